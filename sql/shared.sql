-- dsync_acquire_shared: read-write locks.
-- Runs as dsync_tester, an ordinary role (test/tester.sql).
CREATE EXTENSION IF NOT EXISTS dsync;

-- Shared holders together, each with a token of its own; the view says so.
CREATE TEMP TABLE sh AS
SELECT dsync_acquire_shared('sh_a', 'r1', '1 hour', info => '{"n": 1}') AS r1,
	   dsync_acquire_shared('sh_a', 'r2', '1 hour') AS r2;
SELECT r1 IS NOT NULL AND r2 IS NOT NULL AS both_granted, r2 > r1 AS newer FROM sh;
SELECT holder, mode, permits, info FROM dsync_leases WHERE lease = 'sh_a' ORDER BY holder;

-- An exclusive acquire is refused, also with a short wait; the leader
-- (the exclusive holder) is nobody.
SELECT dsync_acquire('sh_a', 'w') IS NULL AS excl_refused;
SELECT dsync_acquire('sh_a', 'w', wait => '100 ms') IS NULL AS excl_refused_after_wait;
SELECT dsync_leader('sh_a') IS NULL AS no_leader;
SELECT dsync_acquire_all(ARRAY['sh_a', 'sh_other'], 'w') IS NULL AS all_refused;

-- Reentrant: the same holder keeps its token and gets the new expiry.
SELECT dsync_acquire_shared('sh_a', 'r1', '2 hours') = r1 AS same_token FROM sh;
SELECT ttl FROM dsync_leases WHERE lease = 'sh_a' AND holder = 'r1';

-- renew, assert_held and release work for a shared holder.
SELECT dsync_renew('sh_a', 'r2', '3 hours') > now() + '2 hours' AS renewed;
SELECT dsync_assert_held('sh_a', 'r2') = r2 AS guarded FROM sh;
SELECT dsync_release('sh_a', 'r2') AS released, dsync_release('sh_a', 'r2') AS twice;
SELECT regress_err($$SELECT dsync_assert_held('sh_a', 'r2')$$);

-- A shared holder cannot take its own lease exclusively.
SELECT regress_err($$SELECT dsync_acquire('sh_a', 'r1')$$);
SELECT regress_err($$SELECT dsync_acquire_all(ARRAY['sh_a'], 'r1')$$);

-- Once the last shared holder lets go, an exclusive one gets it; then shared
-- acquirers are refused, and the exclusive holder asking for shared access
-- keeps its exclusive lease.
SELECT dsync_release('sh_a', 'r1');
SELECT dsync_acquire('sh_a', 'w', '1 hour') IS NOT NULL AS excl_granted;
SELECT dsync_acquire_shared('sh_a', 'r3') IS NULL AS shared_refused;
SELECT dsync_acquire_shared('sh_a', 'r3', wait => '100 ms') IS NULL AS shared_refused_after_wait;
SELECT dsync_acquire_shared('sh_a', 'w') = dsync_leader_token AS w_keeps_exclusive
  FROM (SELECT fencing AS dsync_leader_token FROM dsync_leases WHERE lease = 'sh_a') l;
SELECT holder, mode FROM dsync_leases WHERE lease = 'sh_a';
SELECT dsync_release('sh_a', 'w');

-- A rollback undoes a shared grant; a savepoint's too.
BEGIN;
SELECT dsync_acquire_shared('sh_b', 'r1') IS NOT NULL AS granted;
ROLLBACK;
SELECT count(*) AS sh_b_held FROM dsync_leases WHERE lease = 'sh_b';
BEGIN;
SELECT dsync_acquire_shared('sh_b', 'r1') IS NOT NULL AS granted;
SAVEPOINT s;
SELECT dsync_acquire_shared('sh_b', 'r2') IS NOT NULL AS granted;
ROLLBACK TO s;
COMMIT;
SELECT holder FROM dsync_leases WHERE lease = 'sh_b' ORDER BY 1;
SELECT dsync_release('sh_b', 'r1');

-- An expired exclusive holder does not keep shared acquirers out.
SELECT dsync_acquire('sh_c', 'w', '10 ms') IS NOT NULL AS excl_granted;
SELECT pg_sleep(0.05);
SELECT dsync_acquire_shared('sh_c', 'r1') IS NOT NULL AS shared_after_expiry;
SELECT dsync_release('sh_c', 'r1');

-- Ownership by role: another role's holder string is not enough.
SELECT dsync_acquire_shared('sh_d', 'r1') IS NOT NULL AS granted;
SET ROLE regress_dsync_bob;
SELECT dsync_release('sh_d', 'r1') AS bob_released;
SELECT dsync_acquire_shared('sh_d', 'r1') IS NULL AS bob_refused;
SELECT dsync_acquire_shared('sh_d', 'bob') IS NOT NULL AS bob_shares;
SELECT dsync_release('sh_d', 'bob');
RESET ROLE;
SELECT dsync_release('sh_d', 'r1');

-- Semaphores have permits, not shared holders.
SELECT dsync_semaphore_create('sh_sem', 2);
SELECT regress_err($$SELECT dsync_acquire_shared('sh_sem', 'r1')$$);

-- Nor can a semaphore be defined on a name that has shared holders
-- (55006); an exclusive holder is kept and counts as one of its permits.
SELECT dsync_acquire_shared('sh_f', 'r1') IS NOT NULL AS shared_granted;
SELECT regress_err($$SELECT dsync_semaphore_create('sh_f', 2)$$);
SELECT count(*) AS sh_f_semaphores FROM dsync_semaphores WHERE name = 'sh_f';
SELECT holder, mode FROM dsync_leases WHERE lease = 'sh_f';
SELECT dsync_release('sh_f', 'r1');
SELECT dsync_acquire('sh_f', 'w') IS NOT NULL AS excl_granted;
SELECT dsync_semaphore_create('sh_f', 2) AS created_over_exclusive;
SELECT dsync_acquire('sh_f', 'p1') IS NOT NULL AS one_permit_left,
	   dsync_acquire('sh_f', 'p2') IS NULL AS no_second;
SELECT dsync_release('sh_f', h) FROM (VALUES ('w'), ('p1')) AS v(h);
SELECT dsync_semaphore_drop('sh_f');

-- Bad input.
SELECT regress_err($$SELECT dsync_acquire_shared(NULL, 'r1')$$);
SELECT regress_err($$SELECT dsync_acquire_shared('sh_e', '')$$);
SELECT regress_err($$SELECT dsync_acquire_shared('sh_e', 'r1', '0 s')$$);
SELECT regress_err($$SELECT dsync_acquire_shared('sh_e', 'r1', wait => '-1 s')$$);
SELECT regress_err($$SELECT dsync_acquire_shared('sh_e', 'r1', session => NULL)$$);
SELECT count(*) AS sh_e_held FROM dsync_leases WHERE lease = 'sh_e';

SELECT count(*) AS left_over FROM dsync_leases WHERE lease LIKE 'sh\_%';
