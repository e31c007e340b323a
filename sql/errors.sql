-- Every bad input fails with its SQLSTATE and a message naming the argument
-- (regress_err shows the SQLSTATE and message instead of failing).
BEGIN;
CREATE EXTENSION IF NOT EXISTS dsync;
-- The range checks below, without the administrators' cap on ttl.
SELECT regress_set_max_ttl('0');

SELECT regress_err($$SELECT dsync_acquire(NULL, 'h')$$);
SELECT regress_err($$SELECT dsync_acquire('l', NULL)$$);
SELECT regress_err($$SELECT dsync_acquire('', 'h')$$);
SELECT regress_err($$SELECT dsync_acquire('l', '')$$);
SELECT regress_err($$SELECT dsync_acquire(repeat('x', 256), 'h')$$);
SELECT regress_err($$SELECT dsync_acquire('l', repeat('x', 256))$$);
-- 255-byte names are accepted
SELECT regress_err($$SELECT dsync_acquire(repeat('x', 255), repeat('y', 255))$$);
SELECT regress_err($$SELECT dsync_acquire('l', 'h', NULL)$$);
SELECT regress_err($$SELECT dsync_acquire('l', 'h', '0 seconds')$$);
SELECT regress_err($$SELECT dsync_acquire('l', 'h', '-1 second')$$);
SELECT regress_err($$SELECT dsync_acquire('l', 'h', '300000 years')$$);
SELECT regress_err($$SELECT dsync_acquire('l', 'h', '106750000 days')$$);
SELECT regress_err($$SELECT dsync_acquire('l', 'h', '1 minute', '-1 second')$$);
SELECT regress_err($$SELECT dsync_acquire('l', 'h', '1 minute', '300000 years')$$);
SELECT regress_err($$SELECT dsync_acquire('l', 'h', info => '{')$$);
SELECT regress_set_max_ttl('1h');
SELECT regress_err($$SELECT dsync_acquire('l', 'h', '61 minutes')$$);
SELECT regress_err($$SELECT dsync_join('g', 'm', '2 hours')$$);
SELECT regress_err($$SELECT dsync_renew('l', 'h', '1 day')$$);
SELECT regress_set_max_ttl('0');

SELECT regress_err($$SELECT dsync_renew(NULL, 'h')$$);
SELECT regress_err($$SELECT dsync_renew('l', '')$$);
SELECT regress_err($$SELECT dsync_renew('l', 'h', '0')$$);
-- renew of a lease not held is NULL, not an error
SELECT dsync_renew('not-held', 'h') AS result;

SELECT regress_err($$SELECT dsync_release(NULL, 'h')$$);
SELECT regress_err($$SELECT dsync_release('l', repeat('x', 256))$$);
-- release of a lease not held is false
SELECT dsync_release('not-held', 'h') AS result;

SELECT regress_err($$SELECT dsync_leader(NULL)$$);
SELECT regress_err($$SELECT dsync_leader('')$$);

SELECT regress_err($$SELECT dsync_assert_held('l', NULL)$$);
SELECT regress_err($$SELECT dsync_assert_held('not-held', 'h')$$);

SELECT regress_err($$SELECT dsync_force_release(NULL)$$);
SELECT regress_err($$SELECT dsync_force_release('l', '')$$);

SELECT regress_err($$SELECT dsync_channel(NULL)$$);
SELECT regress_err($$SELECT dsync_channel(repeat('x', 256))$$);

-- The calls only the creator (or joiner) may make are also made as
-- another role (regress_sem_other, regress_member_other: test/tester.sql).

-- semaphores
SELECT regress_err($$SELECT dsync_semaphore_create(NULL, 2)$$);
SELECT regress_err($$SELECT dsync_semaphore_create('', 2)$$);
SELECT regress_err($$SELECT dsync_semaphore_create(repeat('x', 256), 2)$$);
SELECT regress_err($$SELECT dsync_semaphore_create('tap-sem', NULL)$$);
SELECT regress_err($$SELECT dsync_semaphore_create('tap-sem', 0)$$);
SELECT regress_err($$SELECT dsync_semaphore_create('tap-sem', -1)$$);
SELECT regress_err($$SELECT dsync_semaphore_create('tap-sem', 65536)$$);
-- 1 permit is accepted
SELECT dsync_semaphore_create('tap-sem-min', 1);
-- 65535 permits are accepted
SELECT dsync_semaphore_create('tap-sem-max', 65535);
-- create: true when created now
SELECT dsync_semaphore_create('tap-sem', 2);
-- create again with the same count: false
SELECT dsync_semaphore_create('tap-sem', 2) AS result;
SELECT regress_err($$SELECT dsync_semaphore_create('tap-sem', 3)$$);
SELECT regress_err($$SELECT dsync_semaphore_drop(NULL)$$);
SELECT regress_err($$SELECT dsync_semaphore_drop('')$$);
SELECT regress_err($$SELECT dsync_semaphore_drop(repeat('x', 256))$$);
SET ROLE regress_sem_other;
SELECT regress_err($$SELECT dsync_semaphore_drop('tap-sem')$$);
RESET ROLE;
-- the creator drops it: true
SELECT dsync_semaphore_drop('tap-sem') AS result;
-- drop of a semaphore that does not exist: false
SELECT dsync_semaphore_drop('tap-sem') AS result;

-- events
SELECT regress_err($$SELECT dsync_event_set(NULL)$$);
SELECT regress_err($$SELECT dsync_event_set('')$$);
SELECT regress_err($$SELECT dsync_event_set(repeat('x', 256))$$);
SELECT regress_err($$SELECT dsync_event_wait(NULL)$$);
SELECT regress_err($$SELECT dsync_event_wait('')$$);
SELECT regress_err($$SELECT dsync_event_wait(repeat('x', 256))$$);
SELECT regress_err($$SELECT dsync_event_wait('tap-ev', '-1 second')$$);
SELECT regress_err($$SELECT dsync_event_wait('tap-ev', '300000 years')$$);
SELECT regress_err($$SELECT dsync_event_wait('tap-ev', '106750000 days')$$);
SELECT regress_err($$SELECT dsync_event_wait('tap-ev', 'soon')$$);
-- wait with timeout 0 and nothing pending: false
SELECT dsync_event_wait('tap-ev', '0') AS result;
SELECT regress_err($$SELECT dsync_event_clear(NULL)$$);
SELECT regress_err($$SELECT dsync_event_clear('')$$);
SELECT regress_err($$SELECT dsync_event_clear(repeat('x', 256))$$);
SELECT regress_err($$SELECT dsync_event_is_set(NULL)$$);
SELECT regress_err($$SELECT dsync_event_is_set('')$$);
SELECT regress_err($$SELECT dsync_event_is_set(repeat('x', 256))$$);

-- group membership
SELECT regress_err($$SELECT dsync_join(NULL, 'm')$$);
SELECT regress_err($$SELECT dsync_join('', 'm')$$);
SELECT regress_err($$SELECT dsync_join(repeat('x', 256), 'm')$$);
SELECT regress_err($$SELECT dsync_join('g', NULL)$$);
SELECT regress_err($$SELECT dsync_join('g', '')$$);
SELECT regress_err($$SELECT dsync_join('g', repeat('x', 256))$$);
SELECT regress_err($$SELECT dsync_join('g', 'm', NULL)$$);
SELECT regress_err($$SELECT dsync_join('g', 'm', '0 seconds')$$);
SELECT regress_err($$SELECT dsync_join('g', 'm', '-1 second')$$);
SELECT regress_err($$SELECT dsync_join('g', 'm', '300000 years')$$);
SELECT regress_err($$SELECT dsync_join('g', 'm', '106750000 days')$$);
SELECT regress_err($$SELECT dsync_join('g', 'm', info => '{')$$);
-- join
SELECT dsync_join('tap-grp', 'm') IS NOT NULL;
SET ROLE regress_member_other;
SELECT regress_err($$SELECT dsync_join('tap-grp', 'm')$$);
RESET ROLE;
SELECT regress_err($$SELECT dsync_leave(NULL, 'm')$$);
SELECT regress_err($$SELECT dsync_leave('', 'm')$$);
SELECT regress_err($$SELECT dsync_leave(repeat('x', 256), 'm')$$);
SELECT regress_err($$SELECT dsync_leave('g', NULL)$$);
SELECT regress_err($$SELECT dsync_leave('g', '')$$);
SELECT regress_err($$SELECT dsync_leave('g', repeat('x', 256))$$);
-- leave of a member that is not in the group: false
SELECT dsync_leave('tap-grp', 'nobody') AS result;
SELECT regress_err($$SELECT * FROM dsync_members(NULL)$$);
SELECT regress_err($$SELECT * FROM dsync_members('')$$);
SELECT regress_err($$SELECT * FROM dsync_members(repeat('x', 256))$$);

-- a read-only transaction refuses every change
SET LOCAL transaction_read_only = on;
SELECT regress_err($$SELECT dsync_acquire('ro', 'h')$$);
SELECT regress_err($$SELECT dsync_renew('ro', 'h')$$);
SELECT regress_err($$SELECT dsync_release('ro', 'h')$$);
-- dsync_leader works read-only
SELECT regress_err($$SELECT dsync_leader('ro')$$);
SELECT regress_err($$SELECT dsync_semaphore_create('ro', 2)$$);
SELECT regress_err($$SELECT dsync_semaphore_drop('ro')$$);
SELECT regress_err($$SELECT dsync_event_set('ro')$$);
SELECT regress_err($$SELECT dsync_event_wait('ro', '0')$$);
SELECT regress_err($$SELECT dsync_event_clear('ro')$$);
SELECT regress_err($$SELECT dsync_join('ro', 'm')$$);
SELECT regress_err($$SELECT dsync_leave('ro', 'm')$$);
-- dsync_event_is_set works read-only
SELECT regress_err($$SELECT dsync_event_is_set('ro')$$);
-- dsync_members works read-only
SELECT regress_err($$SELECT * FROM dsync_members('ro')$$);

ROLLBACK;
