-- The retained event log: dsync_events_since() and dsync_events_horizon().
-- Runs as dsync_tester, an ordinary role (test/tester.sql).
CREATE EXTENSION IF NOT EXISTS dsync;

-- Events are logged while someone listens (or listened lately).
LISTEN "dsync:es_watcher";
CREATE TEMP TABLE es_start AS SELECT COALESCE(max(seq), 0) AS s FROM dsync_events_since(0);
SELECT dsync_acquire('es_a', 'h1') IS NOT NULL AS granted;
SELECT dsync_acquire('es_b', 'h1') IS NOT NULL AS granted;
SELECT dsync_release('es_a', 'h1');
SELECT dsync_event_set('es_sig');
SELECT dsync_release('es_b', 'h1');

-- The reaper sends and logs them shortly after commit.
DO $$
BEGIN
	FOR i IN 1..200 LOOP
		EXIT WHEN (SELECT count(*) FROM dsync_events_since((SELECT s FROM es_start),
						ARRAY['es_a', 'es_b', 'es_sig'])) >= 5;
		PERFORM pg_sleep(0.05);
	END LOOP;
END $$;

-- In commit order, with seq rising, the payload's seq equal to the row's,
-- and the channel each name is announced on.
SELECT payload->>'event' AS event, COALESCE(payload->>'lease', payload->>'name') AS name,
	   channel = dsync_channel(COALESCE(payload->>'lease', payload->>'name')) AS channel_ok,
	   (payload->>'seq')::bigint = seq AS seq_ok,
	   seq > lag(seq, 1, 0::bigint) OVER (ORDER BY seq) AS rising
FROM dsync_events_since((SELECT s FROM es_start), ARRAY['es_a', 'es_b', 'es_sig'])
ORDER BY seq;

-- Only the names asked for; after a seq, only what came later.
SELECT count(*) AS es_a_only
FROM dsync_events_since((SELECT s FROM es_start), ARRAY['es_a']);
SELECT payload->>'event' AS event
FROM dsync_events_since((SELECT max(seq) - 1 FROM dsync_events_since((SELECT s FROM es_start),
						 ARRAY['es_a', 'es_b', 'es_sig'])), ARRAY['es_b']);
SELECT count(*) AS none_after_last
FROM dsync_events_since((SELECT max(seq) FROM dsync_events_since(0)));
SELECT count(*) AS unknown_name FROM dsync_events_since(0, ARRAY['es_nobody']);

-- Nothing logged was pruned yet: the horizon is below every logged seq.
SELECT dsync_events_horizon() < (SELECT min(seq) FROM dsync_events_since(0)) AS horizon_below;

-- Bad input.
SELECT regress_err($$SELECT * FROM dsync_events_since(NULL)$$);
-- names are checked as every function checks them: non-empty, at most
-- 255 bytes, no NULL, one dimension; an empty array asks for no name.
SELECT regress_err($$SELECT * FROM dsync_events_since(0, ARRAY['es_a', repeat('n', 256)])$$);
\set SHOW_CONTEXT never
SELECT * FROM dsync_events_since(0, ARRAY[repeat('n', 300)]);
\set SHOW_CONTEXT errors
SELECT regress_err($$SELECT * FROM dsync_events_since(0, ARRAY['es_a', ''])$$);
SELECT regress_err($$SELECT * FROM dsync_events_since(0, ARRAY['es_a', NULL])$$);
SELECT regress_err($$SELECT * FROM dsync_events_since(0, ARRAY[['es_a'], ['es_b']])$$);
SELECT count(*) AS longest_name FROM dsync_events_since(0, ARRAY[repeat('n', 255)]);
SELECT count(*) AS no_name FROM dsync_events_since(0, '{}');

-- Readable by everybody, written by nobody but dsync.
SELECT regress_err($$DELETE FROM dsync_event_log$$);
SELECT regress_err($$INSERT INTO dsync_event_log VALUES (1, 'x', 'x', '{}', now())$$);
SELECT regress_err($$UPDATE dsync_event_log SET payload = '{}'$$);

-- Leases that expire together are announced in one NOTIFY transaction, not
-- one per reap batch (dsync.reap_batch_size, 100): each NOTIFY wakes every
-- backend listening in the database.  These 300 are committed already
-- expired, so the reaper finds them all due at once; sent_at is the start
-- of the transaction that logs one send.
BEGIN;
SELECT count(dsync_acquire('es_wave_' || i, 'h1', '1 second')) AS wave
FROM generate_series(1, 300) i;
SELECT pg_sleep(1.2);
COMMIT;
DO $$
BEGIN
	FOR i IN 1..400 LOOP
		EXIT WHEN (SELECT count(*) FROM dsync_events_since((SELECT s FROM es_start))
				   WHERE payload->>'event' = 'expired'
				     AND payload->>'lease' LIKE 'es\_wave\_%') >= 300;
		PERFORM pg_sleep(0.05);
	END LOOP;
END $$;
SELECT count(*) AS expired, count(DISTINCT sent_at) AS sends
FROM dsync_events_since((SELECT s FROM es_start))
WHERE payload->>'event' = 'expired' AND payload->>'lease' LIKE 'es\_wave\_%';
