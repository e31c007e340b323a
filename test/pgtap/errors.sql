-- pgTAP: every bad input fails with its SQLSTATE and a message naming the argument.
SET client_min_messages = warning;
BEGIN;
CREATE EXTENSION IF NOT EXISTS dsync;
SELECT plan(34);

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

-- a read-only transaction refuses every change
SET LOCAL transaction_read_only = on;
SELECT throws_ok($$SELECT dsync_acquire('ro', 'h')$$, '25006', 'cannot execute dsync_acquire() in a read-only transaction');
SELECT throws_ok($$SELECT dsync_renew('ro', 'h')$$, '25006', 'cannot execute dsync_renew() in a read-only transaction');
SELECT throws_ok($$SELECT dsync_release('ro', 'h')$$, '25006', 'cannot execute dsync_release() in a read-only transaction');
SELECT lives_ok($$SELECT dsync_leader('ro')$$, 'dsync_leader works read-only');

SELECT * FROM finish();
ROLLBACK;
