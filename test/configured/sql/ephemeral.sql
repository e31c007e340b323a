-- Ephemeral leases (durable => false): every function on both kinds.
CREATE EXTENSION IF NOT EXISTS dsync;
CREATE TEMP TABLE tok (step text PRIMARY KEY, token bigint);

-- No ephemeral grant until dsync.ephemeral_max_ttl (2 s in the test
-- server) has passed since startup: a blocking acquire waits for that.
SELECT dsync_acquire('eph-open', 'o', '1 second', '30 seconds', NULL, false) IS NOT NULL AS opened;
SELECT dsync_release('eph-open', 'o');

-- grant, busy, reentrant with the same token, leader, view
INSERT INTO tok SELECT 'e1', dsync_acquire('eph', 'w1', '2 seconds', durable => false, info => '{"host":"a"}');
SELECT token IS NOT NULL AS granted FROM tok WHERE step = 'e1';
SELECT dsync_acquire('eph', 'w2', '1 second', durable => false) IS NULL AS other_refused;
SELECT dsync_acquire('eph', 'w2', '1 second') IS NULL AS durable_refused;
SELECT dsync_acquire('eph', 'w1', '2 seconds', durable => false) = (SELECT token FROM tok WHERE step = 'e1') AS same_token;
SELECT dsync_leader('eph');
SELECT lease, holder, fencing = (SELECT token FROM tok WHERE step = 'e1') AS token_shown,
	   permits, ttl, info, owner = current_user AS owned_by_me,
	   expires_at - renewed_at = ttl AS expiry_is_renewed_plus_ttl
  FROM dsync_leases WHERE lease = 'eph';
SELECT count(*) AS by_holder FROM dsync_leases WHERE lease = 'eph' AND holder = 'w1';
SELECT count(*) AS other_holder FROM dsync_leases WHERE lease = 'eph' AND holder = 'w2';

-- renew: only the holder; NULL ttl is the acquired ttl
SELECT dsync_renew('eph', 'w1') - clock_timestamp() BETWEEN interval '1.5 seconds' AND interval '2 seconds' AS renewed;
SELECT dsync_renew('eph', 'w1', '1 second') - clock_timestamp() <= interval '1 second' AS renewed_shorter;
SELECT dsync_renew('eph', 'w2') IS NULL AS renew_other_null;

-- assert_held: the token for the holder, an error for anyone else
SELECT dsync_assert_held('eph', 'w1') = (SELECT token FROM tok WHERE step = 'e1') AS guard_token;
SELECT dsync_assert_held('eph', 'w2');

-- effective at once: a rollback undoes neither a grant nor a release
BEGIN;
SELECT dsync_release('eph', 'w1') AS released;
INSERT INTO tok SELECT 'e2', dsync_acquire('eph2', 'w1', '2 seconds', durable => false);
ROLLBACK;
SELECT dsync_leader('eph') IS NULL AS still_released, dsync_leader('eph2') AS still_granted;
SELECT dsync_release('eph', 'w1') AS release_again;
SELECT dsync_release('eph2', 'w2') AS release_other;
SELECT dsync_release('eph2', 'w1') AS release_granted;

-- tokens rise across both kinds of one name
INSERT INTO tok SELECT 'd1', dsync_acquire('mixed', 'w1', '1 minute');
SELECT dsync_acquire('mixed', 'w2', '1 second', durable => false) IS NULL AS ephemeral_refused;
SELECT dsync_release('mixed', 'w1');
INSERT INTO tok SELECT 'e3', dsync_acquire('mixed', 'w2', '1 second', durable => false);
SELECT (SELECT token FROM tok WHERE step = 'e3') > (SELECT token FROM tok WHERE step = 'd1') AS rises_to_ephemeral;
SELECT dsync_release('mixed', 'w2');
INSERT INTO tok SELECT 'd2', dsync_acquire('mixed', 'w1', '1 minute');
SELECT (SELECT token FROM tok WHERE step = 'd2') > (SELECT token FROM tok WHERE step = 'e3') AS rises_to_durable;
SELECT dsync_release('mixed', 'w1');

-- a durable release this transaction could still roll back keeps the name
-- from an ephemeral grant (a rollback to the savepoint brings 'a' back)
SELECT dsync_acquire('own', 'a', '1 minute') IS NOT NULL AS durable_held;
BEGIN;
SAVEPOINT s;
SELECT dsync_release('own', 'a') AS released_in_savepoint;
SELECT dsync_acquire('own', 'b', '1 second', durable => false) IS NULL AS ephemeral_refused;
ROLLBACK TO s;
COMMIT;
SELECT dsync_leader('own') AS leader_after_rollback,
	   (SELECT count(*) FROM dsync_leases WHERE lease = 'own') AS holders;
SELECT dsync_release('own', 'a');

-- a waiter gets it when it expires; nobody holds an expired one
SELECT dsync_acquire('exp', 'w1', '0.2 seconds', durable => false) IS NOT NULL AS short_granted;
SELECT dsync_acquire('exp', 'w2', '1 second', '5 seconds', NULL, false) IS NOT NULL AS waited_for_expiry;
SELECT dsync_renew('exp', 'w1') IS NULL AS expired_not_renewed;
SELECT dsync_release('exp', 'w2');

-- a semaphore defined on a name held ephemerally counts that holder
SELECT dsync_acquire('eph-then-sem', 'e', '2 seconds', durable => false) IS NOT NULL AS ephemeral_held;
SELECT dsync_semaphore_create('eph-then-sem', 1);
SELECT dsync_acquire('eph-then-sem', 'd', '1 minute') IS NULL AS no_permit_left;
SELECT dsync_release('eph-then-sem', 'e');
SELECT dsync_acquire('eph-then-sem', 'd', '1 minute') IS NOT NULL AS permit_after_release;
SELECT dsync_release('eph-then-sem', 'd');
SELECT dsync_semaphore_drop('eph-then-sem');

-- dsync_leases shows such a holder with the semaphore's permits, as it
-- shows the semaphore's durable holders
SELECT dsync_acquire('eph-then-sem2', 'e', '2 seconds', durable => false) IS NOT NULL AS ephemeral_held;
SELECT dsync_semaphore_create('eph-then-sem2', 2);
SELECT dsync_acquire('eph-then-sem2', 'd', '1 minute') IS NOT NULL AS permit_granted;
SELECT holder, permits FROM dsync_leases WHERE lease = 'eph-then-sem2' ORDER BY holder;
SELECT dsync_release('eph-then-sem2', 'e');
SELECT dsync_release('eph-then-sem2', 'd');
SELECT dsync_semaphore_drop('eph-then-sem2');

-- one name in one kind at a time: shared holders keep ephemeral grants out,
-- and an ephemeral holder keeps shared acquirers out
SELECT dsync_acquire_shared('eph-rw', 'r1', '1 minute') IS NOT NULL AS shared_granted;
SELECT dsync_acquire('eph-rw', 'w1', '1 second', durable => false) IS NULL AS eph_refused;
SELECT dsync_release('eph-rw', 'r1');
SELECT dsync_acquire('eph-rw', 'w1', '1 second', durable => false) IS NOT NULL AS eph_granted;
SELECT dsync_acquire_shared('eph-rw', 'r1') IS NULL AS shared_refused;
SELECT dsync_release('eph-rw', 'w1');

-- dsync_stats counts ephemeral grants too
SELECT grants >= 6 AS counted FROM dsync_stats;

-- errors
SELECT dsync_acquire('eph', 'w1', '3 seconds', durable => false);
SELECT dsync_renew('eph3', 'w1', '1 second') IS NULL AS renew_unknown;
SELECT dsync_acquire('eph3', 'w1', '1 second', durable => false) IS NOT NULL AS granted3;
SELECT dsync_renew('eph3', 'w1', '1 minute');
SELECT dsync_release('eph3', 'w1');
SELECT dsync_acquire('eph', 'w1', '1 second', durable => NULL);
SELECT dsync_acquire('eph', 'w1', '1 second', durable => false,
	info => jsonb_build_object('pad', repeat('x', 2000)));
SELECT dsync_semaphore_create('eph-sem', 2);
SELECT dsync_acquire('eph-sem', 'w1', '1 second', durable => false);
SELECT dsync_semaphore_drop('eph-sem');
SELECT count(*) AS left_over FROM dsync_leases WHERE lease LIKE 'e%' OR lease = 'mixed';
