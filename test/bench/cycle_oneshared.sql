-- Every client takes the same lease shared and lets it go (rw_bench.sh):
-- readers of one name never wait for one another.
SELECT dsync_acquire_shared('one', 'c' || :client_id, '30 seconds', '30 seconds');
SELECT dsync_release('one', 'c' || :client_id);
