-- One acquire+release cycle of a random ephemeral dsync lease (durable =>
-- false: held in shared memory only, no WAL).  As in cycle_dsync.sql, each
-- statement is its own autocommit transaction and one run of this file is
-- one pgbench "transaction", so pgbench's tps is cycles/s.  The ttl must
-- not exceed dsync.ephemeral_max_ttl (ephemeral_bench.sh sets it to 10 s).
-- (:name::text as in cycle_dsync.sql, for pgbench -M simple.)
\set name random(1, 100000)
SELECT dsync_acquire(:name::text, 'c' || :client_id, '10 seconds', '0', NULL, false);
SELECT dsync_release(:name::text, 'c' || :client_id);
