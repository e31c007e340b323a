-- Waiting without a connection: dsync_queue, dsync_claim, dsync_unqueue.
CREATE EXTENSION IF NOT EXISTS dsync;
CREATE TEMP TABLE tok (step text PRIMARY KEY, token bigint);

-- bad input
SELECT regress_err($$SELECT dsync_queue(NULL, 'h')$$);
SELECT regress_err($$SELECT dsync_queue('q', '')$$);
SELECT regress_err($$SELECT dsync_queue('q', 'h', '0 seconds')$$);
SELECT regress_err($$SELECT dsync_queue('q', 'h', '10 seconds', '')$$);
SELECT regress_err($$SELECT dsync_queue('q', 'h', '10 seconds', NULL, NULL)$$);
SELECT regress_err($$SELECT * FROM dsync_claim('q', NULL)$$);
SELECT regress_err($$SELECT dsync_unqueue(repeat('x', 256), 'h')$$);
-- the worker's pass is for administrators only
SELECT regress_err($$SELECT dsync_queue_pass()$$);

-- a free lease is granted at once, and nothing stays queued
INSERT INTO tok SELECT 'free', dsync_queue('q', 'a', '1 minute');
SELECT token = (SELECT fencing FROM dsync_leases WHERE lease = 'q') AS granted_now FROM tok WHERE step = 'free';
SELECT * FROM dsync_claim('q', 'a');
SELECT count(*) AS queued FROM dsync_waiters WHERE name = 'q';

-- a held lease: NULL, and the waiter is in dsync_waiters with no pid
SELECT dsync_queue('q', 'b', '1 minute') IS NULL AS queued_b;
SELECT dsync_queue('q', 'c', '1 minute') IS NULL AS queued_c;
SELECT dsync_queue('q', 'd', '1 minute') IS NULL AS queued_d;
-- queueing again keeps the place
SELECT dsync_queue('q', 'b', '1 minute') IS NULL AS queued_b_again;
SELECT pid IS NULL AS no_pid, kind, holder FROM dsync_waiters WHERE name = 'q' ORDER BY since;
SELECT * FROM dsync_claim('q', 'b');
-- a wait = 0 acquire does not jump the line, nor does the holder's own queueing
SELECT dsync_acquire('q', 'x') IS NULL AS refused;

-- the release grants to the first in line, in the releasing transaction
SELECT dsync_release('q', 'a');
SELECT holder, owner = current_user AS owned_by_the_queuer FROM dsync_leases WHERE lease = 'q';
INSERT INTO tok SELECT 'b', fencing FROM dsync_claim('q', 'b')
	WHERE expires_in BETWEEN interval '59 seconds' AND interval '1 minute';
SELECT token > (SELECT token FROM tok WHERE step = 'free') AS token_rises,
	   token = (SELECT fencing FROM dsync_leases WHERE lease = 'q') AS token_of_the_lease
  FROM tok WHERE step = 'b';
-- claimed: the entry is gone, the lease stays
SELECT * FROM dsync_claim('q', 'b');
SELECT holder FROM dsync_waiters WHERE name = 'q' ORDER BY since;

-- a release that rolls back grants nothing: c is still first in line
BEGIN;
SELECT dsync_release('q', 'b');
SELECT holder FROM dsync_leases WHERE lease = 'q';
ROLLBACK;
SELECT holder FROM dsync_leases WHERE lease = 'q';
SELECT * FROM dsync_claim('q', 'c');
-- so does a savepoint that rolls back
BEGIN;
SAVEPOINT s;
SELECT dsync_release('q', 'b');
ROLLBACK TO SAVEPOINT s;
COMMIT;
SELECT holder FROM dsync_leases WHERE lease = 'q';
SELECT holder FROM dsync_waiters WHERE name = 'q' ORDER BY since;

-- leaving the line: c goes, d is next
SELECT dsync_unqueue('q', 'c') AS left_c;
SELECT dsync_unqueue('q', 'c') AS left_c_again;
SELECT * FROM dsync_claim('q', 'c');
SELECT dsync_release('q', 'b');
SELECT holder FROM dsync_leases WHERE lease = 'q';
-- leaving with a grant not yet claimed releases it
SELECT dsync_queue('q', 'e', '1 minute') IS NULL AS queued_e;
SELECT dsync_unqueue('q', 'd') AS left_d_granted;
SELECT holder FROM dsync_leases WHERE lease = 'q';
SELECT (dsync_claim('q', 'e')).state;
SELECT dsync_release('q', 'e');

-- a grant nobody claims passes on after dsync.claim_window
SELECT dsync_acquire('w', 'a', '1 minute') IS NOT NULL AS held;
SELECT dsync_queue('w', 'b', '1 minute') IS NULL AS queued_b;
SELECT dsync_release('w', 'a');
SELECT holder FROM dsync_leases WHERE lease = 'w';
DO $$
BEGIN
	FOR i IN 1..300 LOOP
		EXIT WHEN dsync_leader('w') IS NULL;
		PERFORM pg_sleep(0.1);
	END LOOP;
END $$;
SELECT dsync_leader('w') IS NULL AS passed_on;
SELECT * FROM dsync_claim('w', 'b');
SELECT dsync_renew('w', 'b') IS NULL AS renewal_finds_it_lost;

-- a place nobody renews lapses after its ttl and is passed over
SELECT dsync_acquire('l', 'a', '1 minute') IS NOT NULL AS held;
SELECT dsync_queue('l', 'b', '1 second') IS NULL AS queued_b;
SELECT dsync_queue('l', 'c', '1 minute') IS NULL AS queued_c;
SELECT pg_sleep(1.2);
SELECT holder FROM dsync_waiters WHERE name = 'l';
SELECT dsync_release('l', 'a');
SELECT holder FROM dsync_leases WHERE lease = 'l';
SELECT * FROM dsync_claim('l', 'b');
SELECT (dsync_claim('l', 'c')).state;
SELECT dsync_release('l', 'c');

-- an expiry with nobody releasing: the worker grants
SELECT dsync_acquire('x', 'a', '1 second') IS NOT NULL AS held;
SELECT dsync_queue('x', 'b', '1 minute') IS NULL AS queued_b;
DO $$
BEGIN
	FOR i IN 1..300 LOOP
		EXIT WHEN dsync_leader('x') = 'b';
		PERFORM pg_sleep(0.1);
	END LOOP;
END $$;
SELECT dsync_leader('x');
SELECT (dsync_claim('x', 'b')).state;
SELECT dsync_release('x', 'b');

-- shared holders and a writer in one line (writer preference)
SELECT dsync_acquire('rw', 'w', '1 minute') IS NOT NULL AS held;
SELECT dsync_queue('rw', 'r1', '1 minute', shared => true) IS NULL AS queued_r1;
SELECT dsync_queue('rw', 'r2', '1 minute', shared => true) IS NULL AS queued_r2;
SELECT dsync_queue('rw', 'w2', '1 minute') IS NULL AS queued_w2;
SELECT dsync_queue('rw', 'r3', '1 minute', shared => true) IS NULL AS queued_r3;
SELECT dsync_release('rw', 'w');
SELECT holder, mode FROM dsync_leases WHERE lease = 'rw' ORDER BY holder;
SELECT dsync_release('rw', 'r1'), dsync_release('rw', 'r2');
SELECT holder, mode FROM dsync_leases WHERE lease = 'rw' ORDER BY holder;
SELECT dsync_release('rw', 'w2');
SELECT holder, mode FROM dsync_leases WHERE lease = 'rw' ORDER BY holder;
SELECT dsync_release('rw', 'r3');
-- released: their grants were claimed by the releases, nothing is left
SELECT dsync_unqueue('rw', h) FROM unnest(ARRAY['r1', 'r2', 'w2', 'r3']) AS h;

-- semaphore permits
SELECT dsync_semaphore_create('sem', 2);
SELECT dsync_acquire('sem', 'a', '1 minute') IS NOT NULL AS a, dsync_acquire('sem', 'b', '1 minute') IS NOT NULL AS b;
SELECT dsync_queue('sem', h, '1 minute') IS NULL AS queued FROM unnest(ARRAY['c', 'd', 'e']) AS h;
SELECT dsync_release('sem', 'a');
SELECT holder FROM dsync_leases WHERE lease = 'sem' ORDER BY holder;
SELECT holder FROM dsync_waiters WHERE name = 'sem' ORDER BY since;
SELECT dsync_unqueue('sem', h) FROM unnest(ARRAY['c', 'd', 'e']) AS h;
SELECT dsync_release('sem', 'b');
SELECT dsync_semaphore_drop('sem');

-- the channel a grant is announced on (tests of the notification itself:
-- test/tap/t/044_queue_faults.pl and the clients' tests): not one of the
-- event channels, so listening there is not listening to events
SELECT dsync_queue_channel('worker-7');
SELECT length(dsync_queue_channel(repeat('x', 100))) AS hashed_length,
	   dsync_queue_channel(repeat('x', 100)) LIKE 'dsyncq#%' AS hashed;
SELECT regress_err($$SELECT dsync_queue_channel('')$$);
-- a release claims the grant: there is nothing left to claim
SELECT dsync_acquire('n', 'a', '1 minute') IS NOT NULL AS held;
SELECT dsync_queue('n', 'b', '1 minute', channel => 'queue-test') IS NULL AS queued_b;
SELECT dsync_release('n', 'a');
SELECT dsync_release('n', 'b');
SELECT * FROM dsync_claim('n', 'b');
-- so does a renewal
SELECT dsync_acquire('n', 'a', '1 minute') IS NOT NULL AS held;
SELECT dsync_queue('n', 'b', '1 minute') IS NULL AS queued_b;
SELECT dsync_release('n', 'a');
SELECT dsync_renew('n', 'b') IS NOT NULL AS renewed;
SELECT * FROM dsync_claim('n', 'b');
SELECT dsync_release('n', 'b');

-- another role cannot claim or cancel somebody's place
SELECT dsync_acquire('o', 'a', '1 minute') IS NOT NULL AS held;
SELECT dsync_queue('o', 'b', '1 minute') IS NULL AS queued_b;
SET ROLE regress_dsync_bob;
SELECT * FROM dsync_claim('o', 'b');
SELECT dsync_unqueue('o', 'b');
RESET ROLE;
SELECT * FROM dsync_claim('o', 'b');
SELECT dsync_unqueue('o', 'b');
SELECT dsync_release('o', 'a');
-- a member of the role that queued acts for it, as for leases
SET ROLE regress_dsync_alice;
SELECT dsync_acquire('o', 'a', '1 minute') IS NOT NULL AS held;
SELECT dsync_queue('o', 'b', '1 minute') IS NULL AS queued_b;
SELECT dsync_release('o', 'a');
SELECT holder, owner::regrole FROM dsync_leases WHERE lease = 'o';
SET ROLE regress_dsync_carol;
SELECT state FROM dsync_claim('o', 'b');
SELECT dsync_release('o', 'b');
RESET ROLE;

-- a place left to lapse is not revived by queuing again: it goes to the back
SELECT dsync_acquire('lap', 'owner', '1 hour') IS NOT NULL AS held;
SELECT dsync_queue('lap', 'a', '500 ms') IS NULL AS queued_a;
SELECT dsync_queue('lap', 'b', '1 minute') IS NULL AS queued_b;
SELECT pg_sleep(0.7);
SELECT dsync_queue('lap', 'a', '1 minute') IS NULL AS queued_a_again;
SELECT string_agg(holder, ',' ORDER BY since) AS line FROM dsync_waiters WHERE name = 'lap';
SELECT dsync_release('lap', 'owner');
SELECT state FROM dsync_claim('lap', 'b');
SELECT state FROM dsync_claim('lap', 'a');
SELECT dsync_unqueue('lap', 'a'), dsync_release('lap', 'b');

-- a holder that queues for what it holds gets its token back, even behind others
SELECT dsync_acquire('re', 'a', '1 minute') IS NOT NULL AS held;
SELECT dsync_queue('re', 'b', '1 minute') IS NULL AS queued_b;
SELECT dsync_queue('re', 'a', '1 minute') = (SELECT fencing FROM dsync_leases WHERE lease = 're') AS same_token;
SELECT string_agg(holder, ',') AS line FROM dsync_waiters WHERE name = 're';
-- one that holds nothing joins behind others and writes nothing (a write
-- would wake the line and the worker at its commit)
BEGIN;
SELECT dsync_queue('re', 'c', '1 minute') IS NULL AS queued_c;
SELECT pg_current_xact_id_if_assigned() IS NULL AS wrote_nothing;
COMMIT;
SELECT string_agg(holder, ',' ORDER BY holder) AS line FROM dsync_waiters WHERE name = 're';
SELECT dsync_unqueue('re', 'b'), dsync_unqueue('re', 'c'), dsync_release('re', 'a');

-- a queue whose own try granted is a change: PREPARE refuses it (a claim
-- that got nothing is not: test/configured/sql/prepare.sql)
BEGIN;
SELECT dsync_queue('prq', 'r', '1 minute') IS NOT NULL AS granted_r;
PREPARE TRANSACTION 'dsync_prep_queue';
SELECT dsync_leader('prq') IS NULL AS prepare_rolled_back;
