-- Waiting without a connection for ephemeral leases: dsync_queue(...,
-- durable => false).  The grant takes effect at once, as an ephemeral
-- lease's does, and is not undone by a rollback.
CREATE EXTENSION IF NOT EXISTS dsync;
CREATE TEMP TABLE tok (step text PRIMARY KEY, token bigint);

-- No ephemeral grant until dsync.ephemeral_max_ttl (2 s in the test
-- server) has passed since startup.
SELECT dsync_acquire('qe-open', 'o', '1 second', '30 seconds', NULL, false) IS NOT NULL AS opened;
SELECT dsync_release('qe-open', 'o');

-- bad input: what an ephemeral acquire refuses, and shared holders
SELECT regress_err($$SELECT dsync_queue('qe', 'h', '10 seconds', durable => false)$$);
SELECT regress_err($$SELECT dsync_queue('qe', 'h', '1 second', shared => true, durable => false)$$);
SELECT regress_err($$SELECT dsync_queue('qe', 'h', '1 second', durable => NULL)$$);
SELECT count(*) AS queued FROM dsync_waiters WHERE name = 'qe';

-- a free name: granted at once, ephemerally (no row written)
BEGIN;
SELECT set_config('regress.token', dsync_queue('qe', 'a', '2 seconds', durable => false)::text, true) IS NOT NULL AS granted;
SELECT pg_current_xact_id_if_assigned() IS NULL AS wrote_no_row;
INSERT INTO tok SELECT 'a', current_setting('regress.token')::bigint;
COMMIT;
SELECT token = (SELECT fencing FROM dsync_leases WHERE lease = 'qe') AS granted_now FROM tok WHERE step = 'a';
SELECT dsync_acquire('qe', 'x', '1 second') IS NULL AS durable_refused;

-- held: b and c queue; a release grants to b at once, and a rollback of
-- the releasing transaction undoes neither the release nor the grant
SELECT dsync_queue('qe', 'b', '2 seconds', durable => false) IS NULL AS queued_b;
SELECT dsync_queue('qe', 'c', '2 seconds', durable => false) IS NULL AS queued_c;
SELECT string_agg(holder, ',' ORDER BY since) AS line FROM dsync_waiters WHERE name = 'qe';
BEGIN;
SELECT dsync_release('qe', 'a');
SELECT dsync_leader('qe') AS leader_in_the_transaction;
ROLLBACK;
SELECT dsync_leader('qe') AS leader_after_rollback;
INSERT INTO tok SELECT 'b', fencing FROM dsync_claim('qe', 'b')
	WHERE expires_in BETWEEN interval '1.5 seconds' AND interval '2 seconds';
SELECT token > (SELECT token FROM tok WHERE step = 'a') AS token_rises FROM tok WHERE step = 'b';
SELECT (dsync_claim('qe', 'b')).state AS claimed_once;

-- a renewal takes a grant up as a claim does
SELECT dsync_release('qe', 'b');
SELECT dsync_leader('qe') AS leader;
SELECT dsync_renew('qe', 'c') IS NOT NULL AS renewed;
SELECT (dsync_claim('qe', 'c')).state AS nothing_left_to_claim;

-- leaving with a grant not yet claimed releases it at once
SELECT dsync_queue('qe', 'd', '2 seconds', durable => false) IS NULL AS queued_d;
SELECT dsync_release('qe', 'c');
SELECT dsync_leader('qe') AS leader;
SELECT dsync_unqueue('qe', 'd');
SELECT dsync_leader('qe') IS NULL AS free;

-- a grant nobody claims passes on after dsync.claim_window (2 s)
SELECT dsync_acquire('qe', 'a', '2 seconds', durable => false) IS NOT NULL AS held;
SELECT dsync_queue('qe', 'b', '2 seconds', durable => false) IS NULL AS queued_b;
SELECT dsync_queue('qe', 'c', '2 seconds', durable => false) IS NULL AS queued_c;
SELECT dsync_release('qe', 'a');
SELECT dsync_leader('qe') AS leader;
DO $$
BEGIN
	FOR i IN 1..100 LOOP
		EXIT WHEN dsync_leader('qe') IS DISTINCT FROM 'b';
		-- c keeps its place meanwhile
		PERFORM dsync_claim('qe', 'c');
		PERFORM pg_sleep(0.1);
	END LOOP;
END $$;
SELECT dsync_leader('qe') AS passed_on_to;
SELECT * FROM dsync_claim('qe', 'b');
SELECT dsync_renew('qe', 'b') IS NULL AS renewal_finds_it_lost;
SELECT (dsync_claim('qe', 'c')).state;
SELECT dsync_release('qe', 'c');

-- an expiry with nobody releasing: the worker grants
SELECT dsync_acquire('qe', 'a', '1 second', durable => false) IS NOT NULL AS held;
SELECT dsync_queue('qe', 'b', '2 seconds', durable => false) IS NULL AS queued_b;
DO $$
BEGIN
	FOR i IN 1..100 LOOP
		EXIT WHEN dsync_leader('qe') = 'b';
		PERFORM pg_sleep(0.1);
	END LOOP;
END $$;
SELECT dsync_leader('qe') AS granted_after_expiry;
SELECT (dsync_claim('qe', 'b')).state;
SELECT dsync_release('qe', 'b');

-- one line for both kinds: a durable waiter behind an ephemeral holder,
-- an ephemeral waiter behind it
SELECT dsync_acquire('qe', 'a', '2 seconds', durable => false) IS NOT NULL AS held;
SELECT dsync_queue('qe', 'dur', '1 minute') IS NULL AS queued_durable;
SELECT dsync_queue('qe', 'eph', '2 seconds', durable => false) IS NULL AS queued_ephemeral;
SELECT dsync_release('qe', 'a');
SELECT holder, ttl FROM dsync_leases WHERE lease = 'qe';
SELECT (dsync_claim('qe', 'dur')).state;
-- (an ephemeral grant must not come before the durable release commits:
-- the worker makes it then)
SELECT dsync_release('qe', 'dur');
DO $$
BEGIN
	FOR i IN 1..100 LOOP
		EXIT WHEN dsync_leader('qe') = 'eph';
		PERFORM pg_sleep(0.05);
	END LOOP;
END $$;
SELECT holder, ttl FROM dsync_leases WHERE lease = 'qe';
SELECT (dsync_claim('qe', 'eph')).state;
SELECT dsync_release('qe', 'eph');

-- a holder that queues for what it holds gets its token back
INSERT INTO tok SELECT 're', dsync_acquire('qe', 'a', '2 seconds', durable => false);
SELECT dsync_queue('qe', 'b', '2 seconds', durable => false) IS NULL AS queued_b;
SELECT dsync_queue('qe', 'a', '2 seconds', durable => false) = token AS same_token
  FROM tok WHERE step = 're';
SELECT dsync_unqueue('qe', 'b'), dsync_release('qe', 'a');

SELECT count(*) AS queued FROM dsync_waiters WHERE name = 'qe';
