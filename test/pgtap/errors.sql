-- pgTAP: every bad input fails with its SQLSTATE and a message naming the argument.
SET client_min_messages = warning;
BEGIN;
CREATE EXTENSION IF NOT EXISTS dsync;
SELECT plan(106);
-- The range checks below, without the administrators' cap on ttl.
SET LOCAL dsync.max_ttl = 0;

SELECT throws_ok($$SELECT dsync_acquire(NULL, 'h')$$, '22004', 'argument "lease" must not be null');
SELECT throws_ok($$SELECT dsync_acquire('l', NULL)$$, '22004', 'argument "holder" must not be null');
SELECT throws_ok($$SELECT dsync_acquire('', 'h')$$, '22023', 'argument "lease" must not be empty');
SELECT throws_ok($$SELECT dsync_acquire('l', '')$$, '22023', 'argument "holder" must not be empty');
SELECT throws_ok($$SELECT dsync_acquire(repeat('x', 256), 'h')$$, '22001', 'argument "lease" is too long');
SELECT throws_ok($$SELECT dsync_acquire('l', repeat('x', 256))$$, '22001', 'argument "holder" is too long');
SELECT lives_ok($$SELECT dsync_acquire(repeat('x', 255), repeat('y', 255))$$, '255-byte names are accepted');
SELECT throws_ok($$SELECT dsync_acquire('l', 'h', NULL)$$, '22004', 'argument "ttl" must not be null');
SELECT throws_ok($$SELECT dsync_acquire('l', 'h', '0 seconds')$$, '22023', 'argument "ttl" must be positive');
SELECT throws_ok($$SELECT dsync_acquire('l', 'h', '-1 second')$$, '22023', 'argument "ttl" must be positive');
SELECT throws_ok($$SELECT dsync_acquire('l', 'h', '300000 years')$$, '22015', 'argument "ttl" is out of range');
SELECT throws_ok($$SELECT dsync_acquire('l', 'h', '106750000 days')$$, '22008', 'argument "ttl" is out of range');
SELECT throws_ok($$SELECT dsync_acquire('l', 'h', '1 minute', '-1 second')$$, '22023', 'argument "wait" must not be negative');
SELECT throws_ok($$SELECT dsync_acquire('l', 'h', '1 minute', '300000 years')$$, '22015', 'argument "wait" is out of range');
SELECT throws_ok($$SELECT dsync_acquire('l', 'h', info => '{')$$, '22P02');
SET LOCAL dsync.max_ttl = '1h';
SELECT throws_ok($$SELECT dsync_acquire('l', 'h', '61 minutes')$$, '22023', 'argument "ttl" exceeds dsync.max_ttl');
SELECT throws_ok($$SELECT dsync_join('g', 'm', '2 hours')$$, '22023', 'argument "ttl" exceeds dsync.max_ttl');
SELECT throws_ok($$SELECT dsync_renew('l', 'h', '1 day')$$, '22023', 'argument "ttl" exceeds dsync.max_ttl');
SET LOCAL dsync.max_ttl = 0;

SELECT throws_ok($$SELECT dsync_renew(NULL, 'h')$$, '22004', 'argument "lease" must not be null');
SELECT throws_ok($$SELECT dsync_renew('l', '')$$, '22023', 'argument "holder" must not be empty');
SELECT throws_ok($$SELECT dsync_renew('l', 'h', '0')$$, '22023', 'argument "ttl" must be positive');
SELECT is(dsync_renew('not-held', 'h'), NULL, 'renew of a lease not held is NULL, not an error');

SELECT throws_ok($$SELECT dsync_release(NULL, 'h')$$, '22004', 'argument "lease" must not be null');
SELECT throws_ok($$SELECT dsync_release('l', repeat('x', 256))$$, '22001', 'argument "holder" is too long');
SELECT is(dsync_release('not-held', 'h'), false, 'release of a lease not held is false');

SELECT throws_ok($$SELECT dsync_leader(NULL)$$, '22004', 'argument "lease" must not be null');
SELECT throws_ok($$SELECT dsync_leader('')$$, '22023', 'argument "lease" must not be empty');

SELECT throws_ok($$SELECT dsync_assert_held('l', NULL)$$, '22004', 'argument "holder" must not be null');
SELECT throws_ok($$SELECT dsync_assert_held('not-held', 'h')$$, '55000', 'lease "not-held" is not held by "h"');

SELECT throws_ok($$SELECT dsync_force_release(NULL)$$, '22004', 'argument "lease" must not be null');
SELECT throws_ok($$SELECT dsync_force_release('l', '')$$, '22023', 'argument "holder" must not be empty');

SELECT throws_ok($$SELECT dsync_channel(NULL)$$, '22004', 'argument "name" must not be null');
SELECT throws_ok($$SELECT dsync_channel(repeat('x', 256))$$, '22001', 'argument "name" is too long');

-- Another role, for the calls only the creator (or joiner) may make: these
-- helpers run as that role.
CREATE ROLE dsync_tap_other;
CREATE FUNCTION tap_drop_as_other(text) RETURNS boolean
	LANGUAGE sql SECURITY DEFINER AS $$ SELECT dsync_semaphore_drop($1) $$;
ALTER FUNCTION tap_drop_as_other(text) OWNER TO dsync_tap_other;
CREATE FUNCTION tap_join_as_other(text, text) RETURNS timestamptz
	LANGUAGE sql SECURITY DEFINER AS $$ SELECT dsync_join($1, $2) $$;
ALTER FUNCTION tap_join_as_other(text, text) OWNER TO dsync_tap_other;

-- semaphores
SELECT throws_ok($$SELECT dsync_semaphore_create(NULL, 2)$$, '22004', 'argument "name" must not be null');
SELECT throws_ok($$SELECT dsync_semaphore_create('', 2)$$, '22023', 'argument "name" must not be empty');
SELECT throws_ok($$SELECT dsync_semaphore_create(repeat('x', 256), 2)$$, '22001', 'argument "name" is too long');
SELECT throws_ok($$SELECT dsync_semaphore_create('tap-sem', NULL)$$, '22004', 'argument "permits" must not be null');
SELECT throws_ok($$SELECT dsync_semaphore_create('tap-sem', 0)$$, '22003', 'argument "permits" must be between 1 and 65535');
SELECT throws_ok($$SELECT dsync_semaphore_create('tap-sem', -1)$$, '22003', 'argument "permits" must be between 1 and 65535');
SELECT throws_ok($$SELECT dsync_semaphore_create('tap-sem', 65536)$$, '22003', 'argument "permits" must be between 1 and 65535');
SELECT ok(dsync_semaphore_create('tap-sem-min', 1), '1 permit is accepted');
SELECT ok(dsync_semaphore_create('tap-sem-max', 65535), '65535 permits are accepted');
SELECT ok(dsync_semaphore_create('tap-sem', 2), 'create: true when created now');
SELECT is(dsync_semaphore_create('tap-sem', 2), false, 'create again with the same count: false');
SELECT throws_ok($$SELECT dsync_semaphore_create('tap-sem', 3)$$, '42710', 'semaphore "tap-sem" already exists with 2 permits');
SELECT is((SELECT permits FROM dsync_semaphore WHERE name = 'tap-sem'), 2, 'the count is unchanged');
SELECT throws_ok($$SELECT dsync_semaphore_drop(NULL)$$, '22004', 'argument "name" must not be null');
SELECT throws_ok($$SELECT dsync_semaphore_drop('')$$, '22023', 'argument "name" must not be empty');
SELECT throws_ok($$SELECT dsync_semaphore_drop(repeat('x', 256))$$, '22001', 'argument "name" is too long');
SELECT throws_ok($$SELECT tap_drop_as_other('tap-sem')$$, '42501', 'must be a member of the role that created semaphore "tap-sem"');
SELECT is(dsync_semaphore_drop('tap-sem'), true, 'the creator drops it: true');
SELECT is(dsync_semaphore_drop('tap-sem'), false, 'drop of a semaphore that does not exist: false');

-- events
SELECT throws_ok($$SELECT dsync_event_set(NULL)$$, '22004', 'argument "name" must not be null');
SELECT throws_ok($$SELECT dsync_event_set('')$$, '22023', 'argument "name" must not be empty');
SELECT throws_ok($$SELECT dsync_event_set(repeat('x', 256))$$, '22001', 'argument "name" is too long');
SELECT throws_ok($$SELECT dsync_event_wait(NULL)$$, '22004', 'argument "name" must not be null');
SELECT throws_ok($$SELECT dsync_event_wait('')$$, '22023', 'argument "name" must not be empty');
SELECT throws_ok($$SELECT dsync_event_wait(repeat('x', 256))$$, '22001', 'argument "name" is too long');
SELECT throws_ok($$SELECT dsync_event_wait('tap-ev', '-1 second')$$, '22023', 'argument "timeout" must not be negative');
SELECT throws_ok($$SELECT dsync_event_wait('tap-ev', '300000 years')$$, '22015', 'argument "timeout" is out of range');
SELECT throws_ok($$SELECT dsync_event_wait('tap-ev', '106750000 days')$$, '22008', 'argument "timeout" is out of range');
SELECT throws_ok($$SELECT dsync_event_wait('tap-ev', 'soon')$$, '22007');
SELECT is(dsync_event_wait('tap-ev', '0'), false, 'wait with timeout 0 and nothing pending: false');
SELECT throws_ok($$SELECT dsync_event_clear(NULL)$$, '22004', 'argument "name" must not be null');
SELECT throws_ok($$SELECT dsync_event_clear('')$$, '22023', 'argument "name" must not be empty');
SELECT throws_ok($$SELECT dsync_event_clear(repeat('x', 256))$$, '22001', 'argument "name" is too long');
SELECT throws_ok($$SELECT dsync_event_is_set(NULL)$$, '22004', 'argument "name" must not be null');
SELECT throws_ok($$SELECT dsync_event_is_set('')$$, '22023', 'argument "name" must not be empty');
SELECT throws_ok($$SELECT dsync_event_is_set(repeat('x', 256))$$, '22001', 'argument "name" is too long');

-- group membership
SELECT throws_ok($$SELECT dsync_join(NULL, 'm')$$, '22004', 'argument "grp" must not be null');
SELECT throws_ok($$SELECT dsync_join('', 'm')$$, '22023', 'argument "grp" must not be empty');
SELECT throws_ok($$SELECT dsync_join(repeat('x', 256), 'm')$$, '22001', 'argument "grp" is too long');
SELECT throws_ok($$SELECT dsync_join('g', NULL)$$, '22004', 'argument "member" must not be null');
SELECT throws_ok($$SELECT dsync_join('g', '')$$, '22023', 'argument "member" must not be empty');
SELECT throws_ok($$SELECT dsync_join('g', repeat('x', 256))$$, '22001', 'argument "member" is too long');
SELECT throws_ok($$SELECT dsync_join('g', 'm', NULL)$$, '22004', 'argument "ttl" must not be null');
SELECT throws_ok($$SELECT dsync_join('g', 'm', '0 seconds')$$, '22023', 'argument "ttl" must be positive');
SELECT throws_ok($$SELECT dsync_join('g', 'm', '-1 second')$$, '22023', 'argument "ttl" must be positive');
SELECT throws_ok($$SELECT dsync_join('g', 'm', '300000 years')$$, '22015', 'argument "ttl" is out of range');
SELECT throws_ok($$SELECT dsync_join('g', 'm', '106750000 days')$$, '22008', 'argument "ttl" is out of range');
SELECT throws_ok($$SELECT dsync_join('g', 'm', info => '{')$$, '22P02');
SELECT ok(dsync_join('tap-grp', 'm') IS NOT NULL, 'join');
SELECT throws_ok($$SELECT tap_join_as_other('tap-grp', 'm')$$, '42501', 'member "m" of group "tap-grp" was joined by another role');
SELECT throws_ok($$SELECT dsync_leave(NULL, 'm')$$, '22004', 'argument "grp" must not be null');
SELECT throws_ok($$SELECT dsync_leave('', 'm')$$, '22023', 'argument "grp" must not be empty');
SELECT throws_ok($$SELECT dsync_leave(repeat('x', 256), 'm')$$, '22001', 'argument "grp" is too long');
SELECT throws_ok($$SELECT dsync_leave('g', NULL)$$, '22004', 'argument "member" must not be null');
SELECT throws_ok($$SELECT dsync_leave('g', '')$$, '22023', 'argument "member" must not be empty');
SELECT throws_ok($$SELECT dsync_leave('g', repeat('x', 256))$$, '22001', 'argument "member" is too long');
SELECT is(dsync_leave('tap-grp', 'nobody'), false, 'leave of a member that is not in the group: false');
SELECT throws_ok($$SELECT * FROM dsync_members(NULL)$$, '22004', 'argument "grp" must not be null');
SELECT throws_ok($$SELECT * FROM dsync_members('')$$, '22023', 'argument "grp" must not be empty');
SELECT throws_ok($$SELECT * FROM dsync_members(repeat('x', 256))$$, '22001', 'argument "grp" is too long');

-- a read-only transaction refuses every change
SET LOCAL transaction_read_only = on;
SELECT throws_ok($$SELECT dsync_acquire('ro', 'h')$$, '25006', 'cannot execute dsync_acquire() in a read-only transaction');
SELECT throws_ok($$SELECT dsync_renew('ro', 'h')$$, '25006', 'cannot execute dsync_renew() in a read-only transaction');
SELECT throws_ok($$SELECT dsync_release('ro', 'h')$$, '25006', 'cannot execute dsync_release() in a read-only transaction');
SELECT lives_ok($$SELECT dsync_leader('ro')$$, 'dsync_leader works read-only');
SELECT throws_ok($$SELECT dsync_semaphore_create('ro', 2)$$, '25006', 'cannot execute dsync_semaphore_create() in a read-only transaction');
SELECT throws_ok($$SELECT dsync_semaphore_drop('ro')$$, '25006', 'cannot execute dsync_semaphore_drop() in a read-only transaction');
SELECT throws_ok($$SELECT dsync_event_set('ro')$$, '25006', 'cannot execute dsync_event_set() in a read-only transaction');
SELECT throws_ok($$SELECT dsync_event_wait('ro', '0')$$, '25006', 'cannot execute dsync_event_wait() in a read-only transaction');
SELECT throws_ok($$SELECT dsync_event_clear('ro')$$, '25006', 'cannot execute dsync_event_clear() in a read-only transaction');
SELECT throws_ok($$SELECT dsync_join('ro', 'm')$$, '25006', 'cannot execute dsync_join() in a read-only transaction');
SELECT throws_ok($$SELECT dsync_leave('ro', 'm')$$, '25006', 'cannot execute dsync_leave() in a read-only transaction');
SELECT lives_ok($$SELECT dsync_event_is_set('ro')$$, 'dsync_event_is_set works read-only');
SELECT lives_ok($$SELECT * FROM dsync_members('ro')$$, 'dsync_members works read-only');

SELECT * FROM finish();
ROLLBACK;
