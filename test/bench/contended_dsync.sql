-- One blocking acquire+release of the one lease all clients contend for
-- (contended_bench.sh).  Two autocommit transactions per cycle.
SELECT dsync_acquire('contended', 'c' || :client_id, '30 seconds', '30 seconds');
SELECT dsync_release('contended', 'c' || :client_id);
