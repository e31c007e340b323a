-- Every client takes the same lease exclusively, waiting its turn, and
-- lets it go (rw_bench.sh): what cycle_oneshared.sql would be without
-- shared holders.
SELECT dsync_acquire('one', 'c' || :client_id, '30 seconds', '30 seconds');
SELECT dsync_release('one', 'c' || :client_id);
