-- Ephemeral leases keep their name, holder and info out of line, in a
-- shared pool of chunks (src/leases/ephpool.c): long strings round-trip
-- through dsync_leases, dsync_leader and events; names with the same hash
-- stay apart; chunks are given back and used again.
CREATE EXTENSION IF NOT EXISTS dsync;
SELECT dsync_acquire('pool-open', 'o', '1 second', '30 seconds', NULL, false) IS NOT NULL AS opened;
SELECT dsync_release('pool-open', 'o');

-- Events are logged while someone listens.
LISTEN "dsync:pool_watcher";
CREATE TEMP TABLE pool_start AS SELECT COALESCE(max(seq), 0) AS s FROM dsync_events_since(0);

-- The longest name and holder (255 bytes, several chunks each), and info
-- of 1,000 bytes and more.
CREATE TEMP TABLE long AS
SELECT 'L' || repeat('n', 250) || 'name' AS name, 'H' || repeat('h', 250) || 'hold' AS holder,
	   jsonb_build_object('pad', repeat('i', 960), 'end', 'x') AS info;
SELECT octet_length(name) AS name_bytes, octet_length(holder) AS holder_bytes,
	   pg_column_size(info) > 960 AS big_info FROM long;
SELECT dsync_acquire(name, holder, '2 seconds', '0', info, false) IS NOT NULL AS granted FROM long;
SELECT l.lease = g.name AS name_kept, l.holder = g.holder AS holder_kept, l.info = g.info AS info_kept
  FROM dsync_leases l, long g WHERE l.lease = g.name;
SELECT dsync_leader(name) = holder AS leader_kept FROM long;
SELECT dsync_assert_held(name, holder) IS NOT NULL AS guard_ok FROM long;
SELECT dsync_acquire(name, 'H' || repeat('h', 250) || 'hol_', '1 second', '0', NULL, false) IS NULL AS other_refused FROM long;
-- Reentrant with other info (fewer chunks): the info changes, the rest stays.
SELECT dsync_acquire(name, holder, '2 seconds', '0', '{"short": 1}', false) IS NOT NULL AS regranted FROM long;
SELECT l.lease = g.name AS name_kept, l.holder = g.holder AS holder_kept, l.info AS info_now
  FROM dsync_leases l, long g WHERE l.lease = g.name;
-- Reentrant with no info: the info stays.
SELECT dsync_acquire(name, holder, '2 seconds', '0', NULL, false) IS NOT NULL AS regranted FROM long;
SELECT l.info AS info_still FROM dsync_leases l, long g WHERE l.lease = g.name;
SELECT dsync_renew(name, holder) IS NOT NULL AS renewed FROM long;
SELECT dsync_release(name, holder) AS released FROM long;
SELECT count(*) AS left_over FROM dsync_leases l, long g WHERE l.lease = g.name;

-- Two names with the same 32-bit hash (hashtext is the same hash_bytes
-- the table's key hash starts from: one pair among 400,000 names of the
-- same length (so that only their bytes tell them apart) is
-- all but certain) are two leases, each with its own holder.
CREATE TEMP TABLE twin AS
SELECT min(n) AS a, max(n) AS b
  FROM (SELECT 'twin-' || i AS n FROM generate_series(100000, 499999) i) s
 GROUP BY hashtext(n COLLATE "C") HAVING count(*) = 2 LIMIT 1;
SELECT count(*) AS pair_found, bool_and(a <> b AND octet_length(a) = octet_length(b) AND
									  hashtext(a COLLATE "C") = hashtext(b COLLATE "C")) AS same_hash FROM twin;
SELECT dsync_acquire(a, 'ha', '2 seconds', '0', '{"who": "a"}', false) IS NOT NULL AS a_granted FROM twin;
SELECT dsync_acquire(b, 'hb', '2 seconds', '0', '{"who": "b"}', false) IS NOT NULL AS b_granted FROM twin;
SELECT dsync_leader(a) AS leader_a, dsync_leader(b) AS leader_b FROM twin;
SELECT l.lease = t.a AS is_a, l.holder, l.info FROM dsync_leases l, twin t
 WHERE l.lease IN (t.a, t.b) ORDER BY l.holder;
SELECT dsync_release(b, 'ha') AS b_not_as_a, dsync_release(b, 'hb') AS b_released FROM twin;
SELECT dsync_leader(a) AS leader_a, dsync_leader(b) IS NULL AS b_free FROM twin;
SELECT dsync_acquire(b, 'hb2', '2 seconds', '0', NULL, false) IS NOT NULL AS b_again FROM twin;
SELECT dsync_release(a, 'ha') AS a_released, dsync_release(b, 'hb2') AS b_released FROM twin;

-- Chunks are given back: 3,000 grants and releases with long strings
-- leave the pool as it was (the TAP test 032 runs a small pool dry).
DO $$
DECLARE
	g record;
BEGIN
	SELECT * INTO g FROM long;
	FOR i IN 1..3000 LOOP
		IF dsync_acquire(left(g.name, 250) || i, g.holder, '2 seconds', '0', g.info, false) IS NULL
			OR NOT dsync_release(left(g.name, 250) || i, g.holder) THEN
			RAISE EXCEPTION 'cycle % failed', i;
		END IF;
	END LOOP;
END $$;
SELECT count(*) AS left_over FROM dsync_leases WHERE lease LIKE 'L%';

-- The reaper still announces an expiry, with the long name and holder.
SELECT dsync_acquire(left(name, 253) || '-x', holder, '1 second', '0', NULL, false) IS NOT NULL AS granted FROM long;
DO $$
BEGIN
	FOR i IN 1..200 LOOP
		EXIT WHEN (SELECT count(*) FROM dsync_events_since((SELECT s FROM pool_start))
				   WHERE payload->>'event' = 'expired') >= 1;
		PERFORM pg_sleep(0.05);
	END LOOP;
END $$;

-- The events name the long lease and holder in full.
SELECT e.payload->>'event' AS event, e.payload->>'lease' = left(g.name, 253) || '-x' AS x_name,
	   e.payload->>'lease' = g.name AS long_name, e.payload->>'holder' = g.holder AS holder_kept
  FROM dsync_events_since((SELECT s FROM pool_start)) e, long g
 WHERE e.payload->>'lease' IN (g.name, left(g.name, 253) || '-x')
 ORDER BY e.seq;
SELECT count(*) AS left_over FROM dsync_leases WHERE lease LIKE 'L%';

-- The reaper takes expiries in order from its heaps (src/leases/ephheap.c):
-- 300 leases expiring over a second, in every partition, are each
-- announced once; a guarded one stays past its expiry, held, until its
-- guard ends, and is announced then.
SELECT count(dsync_acquire('stag-' || i, 'h', make_interval(secs => 1 + i / 300.0), '0', NULL, false))
	AS granted FROM generate_series(1, 300) i;
SELECT dsync_acquire('stag-guard', 'g', '1 second', '0', NULL, false) IS NOT NULL AS granted;
BEGIN;
SELECT dsync_assert_held('stag-guard', 'g') IS NOT NULL AS guarded;
SELECT pg_sleep(2.2);
SELECT dsync_acquire('stag-guard', 'other', '1 second', '0', NULL, false) IS NULL AS still_kept;
SELECT count(*) AS guard_expired_not_announced FROM dsync_events_since((SELECT s FROM pool_start))
 WHERE payload->>'lease' = 'stag-guard' AND payload->>'event' = 'expired';
COMMIT;
DO $$
BEGIN
	FOR i IN 1..200 LOOP
		EXIT WHEN (SELECT count(*) FROM dsync_events_since((SELECT s FROM pool_start))
				   WHERE payload->>'lease' LIKE 'stag-%' AND payload->>'event' = 'expired') >= 301;
		PERFORM pg_sleep(0.05);
	END LOOP;
END $$;
SELECT count(*) AS expired_events, count(DISTINCT payload->>'lease') AS names
  FROM dsync_events_since((SELECT s FROM pool_start))
 WHERE payload->>'lease' LIKE 'stag-%' AND payload->>'event' = 'expired';
SELECT count(*) AS left_over FROM dsync_leases WHERE lease LIKE 'stag-%';
SELECT dsync_acquire('stag-guard', 'other', '1 second', '0', NULL, false) IS NOT NULL AS free_again;
SELECT dsync_release('stag-guard', 'other');
