-- Semaphores: definitions, permits, and every return path and error.
CREATE EXTENSION IF NOT EXISTS dsync;

-- create is idempotent; another count is an error (42710)
SELECT dsync_semaphore_create('pool', 3) AS created;
SELECT dsync_semaphore_create('pool', 3) AS created_again;
SELECT regress_err($$SELECT dsync_semaphore_create('pool', 4)$$);

-- bad input: class 22, naming the argument
SELECT regress_err($$SELECT dsync_semaphore_create(NULL, 3)$$);
SELECT regress_err($$SELECT dsync_semaphore_create('', 3)$$);
SELECT regress_err($$SELECT dsync_semaphore_create(repeat('s', 256), 3)$$);
SELECT regress_err($$SELECT dsync_semaphore_create('s', NULL)$$);
SELECT regress_err($$SELECT dsync_semaphore_create('s', 0)$$);
SELECT regress_err($$SELECT dsync_semaphore_create('s', 65536)$$);
SELECT regress_err($$SELECT dsync_semaphore_drop(NULL)$$);
SELECT dsync_semaphore_create('s-max', 65535) AS max_permits_ok;

-- every role reads the definitions (dsync_semaphores, 1.5): a client can
-- attach to a semaphore by name without knowing its count, before anybody
-- holds a permit; the suite runs as an ordinary login role
SELECT name, permits, owner = current_user AS mine, created_at <= now() AS created_before
  FROM dsync_semaphores WHERE name IN ('pool', 's-max') ORDER BY name;
-- also a role that did not create them; none may write the definitions,
-- neither in the table nor through the view
SET ROLE regress_sem_other;
SELECT name, permits, owner::text = 'dsync_tester' AS owner_is_creator
  FROM dsync_semaphores WHERE name = 'pool';
SELECT regress_err($$SELECT * FROM dsync_semaphore$$);
SELECT regress_err($$INSERT INTO dsync_semaphore VALUES ('forged', 9, now(), 10)$$);
SELECT regress_err($$UPDATE dsync_semaphore SET permits = 9$$);
SELECT regress_err($$UPDATE dsync_semaphores SET permits = 9$$);
SELECT regress_err($$DELETE FROM dsync_semaphores$$);
RESET ROLE;
-- nor their creator, other than by dsync_semaphore_drop
SELECT regress_err($$DELETE FROM dsync_semaphores$$);
SELECT permits FROM dsync_semaphores WHERE name = 'pool';

-- three holders take the three permits, each with its own token
CREATE TEMP TABLE tok (holder text PRIMARY KEY, token bigint);
INSERT INTO tok SELECT 'h' || i, dsync_acquire('pool', 'h' || i, '1 minute') FROM generate_series(1, 3) i;
SELECT count(*) AS granted, count(DISTINCT token) AS distinct_tokens FROM tok WHERE token IS NOT NULL;
-- the fourth is refused; a holder asking again keeps its permit and token
SELECT dsync_acquire('pool', 'h4') IS NULL AS fourth_refused;
SELECT dsync_acquire('pool', 'h1', '1 minute') = (SELECT token FROM tok WHERE holder = 'h1') AS reentrant_same_token;
SELECT lease, holder, permits FROM dsync_leases WHERE lease = 'pool' ORDER BY holder;
-- a semaphore of several permits has no leader
SELECT dsync_leader('pool') IS NULL AS no_leader;

-- renew, assert_held and release act on the holder's own permit
SELECT dsync_renew('pool', 'h2') IS NOT NULL AS renewed;
SELECT dsync_renew('pool', 'h4') IS NULL AS not_a_holder;
SELECT dsync_assert_held('pool', 'h3') = (SELECT token FROM tok WHERE holder = 'h3') AS guard_token;
SELECT regress_err($$SELECT dsync_assert_held('pool', 'h4')$$);
SELECT dsync_release('pool', 'h2') AS released;
SELECT dsync_release('pool', 'h2') AS released_twice;
-- the freed permit goes to the next acquirer, with a new token
SELECT dsync_acquire('pool', 'h4') > (SELECT max(token) FROM tok) AS h4_granted_new_token;
SELECT count(*) AS holders FROM dsync_leases WHERE lease = 'pool';

-- dropping the definition leaves holders alone; the name is a lock again
SELECT dsync_semaphore_drop('pool') AS dropped;
SELECT dsync_semaphore_drop('pool') AS dropped_twice;
SELECT count(*) AS definitions_left FROM dsync_semaphores WHERE name = 'pool';
SELECT count(*) AS holders_kept FROM dsync_leases WHERE lease = 'pool';
SELECT dsync_renew('pool', 'h3') IS NOT NULL AS holder_still_renews;
SELECT permits FROM dsync_leases WHERE lease = 'pool' LIMIT 1;
SELECT dsync_force_release('pool') AS force_released;

-- a one-permit semaphore behaves as a lock, with a leader
SELECT dsync_semaphore_create('single', 1) AS created;
SELECT dsync_acquire('single', 'only') IS NOT NULL AS granted;
SELECT dsync_leader('single');
SELECT dsync_acquire('single', 'other') IS NULL AS refused;

-- a semaphore created after permits were held counts them
SELECT dsync_acquire('late', 'l1') IS NOT NULL AS lock_taken;
SELECT dsync_acquire('late', 'l2') IS NULL AS lock_refused;
SELECT dsync_semaphore_create('late', 2) AS made_semaphore;
SELECT dsync_acquire('late', 'l2') IS NOT NULL AS second_permit;
SELECT dsync_acquire('late', 'l3') IS NULL AS third_refused;

-- only the creating role may drop it
SET ROLE regress_sem_other;
SELECT regress_err($$SELECT dsync_semaphore_drop('late')$$);
SELECT dsync_semaphore_create('late', 2) AS same_count_ok;
RESET ROLE;

-- nobody writes the definitions table directly
SELECT has_table_privilege('public', 'dsync_semaphore', 'INSERT') AS public_can_insert;

SELECT dsync_force_release('late') + dsync_force_release('single') AS cleaned;
SELECT dsync_semaphore_drop('late') AND dsync_semaphore_drop('single') AND dsync_semaphore_drop('s-max') AS dropped_all;

-- shrinking a semaphore: holders of the old count keep their permits and
-- nobody new comes in until they are fewer than the new count
SELECT dsync_semaphore_create('shrink', 3) AS created;
SELECT count(dsync_acquire('shrink', h, '1 minute')) AS granted FROM unnest(ARRAY['a', 'b', 'c']) h;
SELECT dsync_semaphore_drop('shrink') AND dsync_semaphore_create('shrink', 1) AS recreated_with_1;
SELECT name, permits FROM dsync_semaphores WHERE name = 'shrink';
SELECT dsync_release('shrink', 'a') AS released_a;
SELECT dsync_acquire('shrink', 'd') IS NULL AS d_refused_while_two_hold;
SELECT dsync_release('shrink', 'b') AND dsync_release('shrink', 'c') AS released_b_c;
SELECT dsync_acquire('shrink', 'd') IS NOT NULL AS d_granted_when_free;
SELECT dsync_force_release('shrink') AS cleaned;
SELECT dsync_semaphore_drop('shrink') AS dropped;
SELECT count(*) AS definitions_left FROM dsync_semaphores
 WHERE name IN ('pool', 's-max', 'single', 'late', 'shrink');
