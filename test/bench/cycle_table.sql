-- One acquire+release cycle on the hand-written lease table that
-- Postgres-backed lock libraries use (NOTES.md section 8): upsert to take
-- the lease if it is free, expired or already ours; delete to release.
-- Two autocommit transactions; one run of this file is one cycle.  (::text
-- as in cycle_dsync.sql, for pgbench -M simple.)
\set name random(1, 100000)
INSERT INTO lease VALUES (:name::text, 'c' || :client_id, clock_timestamp() + interval '30 seconds')
    ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at
    WHERE lease.holder = EXCLUDED.holder OR lease.expires_at < clock_timestamp();
DELETE FROM lease WHERE name = :name::text AND holder = 'c' || :client_id;
