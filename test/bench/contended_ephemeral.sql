-- The same with an ephemeral lease (durable => false): contended_bench.sh.
SELECT dsync_acquire('contended-e', 'c' || :client_id, '10 seconds', '30 seconds', NULL, false);
SELECT dsync_release('contended-e', 'c' || :client_id);
