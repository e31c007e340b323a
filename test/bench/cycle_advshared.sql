-- The baseline of cycle_shared.sql (rw_bench.sh): a shared advisory lock
-- on a random key, taken without waiting and let go.
\set key random(1, 100000)
SELECT pg_try_advisory_lock_shared(:key);
SELECT pg_advisory_unlock_shared(:key);
