-- Keep-alive of one of the 1,000 leases that lease_bench.sh acquired for
-- holder 'renewer' (names r1 .. r1000) before the run.
\set n random(1, 1000)
SELECT dsync_renew('r' || :n, 'renewer');
