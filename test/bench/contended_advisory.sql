-- The same with a blocking session-level advisory lock on one key:
-- contended_bench.sh.
SELECT pg_advisory_lock(4242);
SELECT pg_advisory_unlock(4242);
