-- The baseline of cycle_oneshared.sql (rw_bench.sh): every client takes
-- the same shared advisory lock and lets it go.
SELECT pg_advisory_lock_shared(4242);
SELECT pg_advisory_unlock_shared(4242);
