-- Bad input: every rejection is in SQLSTATE class 22 and names the argument.
CREATE EXTENSION IF NOT EXISTS dsync;

-- NULL names
SELECT regress_err($$SELECT dsync_acquire(NULL, 'h')$$);
SELECT regress_err($$SELECT dsync_acquire('l', NULL)$$);
SELECT regress_err($$SELECT dsync_renew(NULL, 'h')$$);
SELECT regress_err($$SELECT dsync_renew('l', NULL)$$);
SELECT regress_err($$SELECT dsync_release(NULL, 'h')$$);
SELECT regress_err($$SELECT dsync_release('l', NULL)$$);
SELECT regress_err($$SELECT dsync_leader(NULL)$$);
SELECT regress_err($$SELECT dsync_assert_held(NULL, 'h')$$);
SELECT regress_err($$SELECT dsync_assert_held('l', NULL)$$);
SELECT regress_err($$SELECT dsync_force_release(NULL)$$);
SELECT regress_err($$SELECT dsync_channel(NULL)$$);

-- empty names
SELECT regress_err($$SELECT dsync_acquire('', 'h')$$);
SELECT regress_err($$SELECT dsync_acquire('l', '')$$);
SELECT regress_err($$SELECT dsync_renew('', 'h')$$);
SELECT regress_err($$SELECT dsync_release('l', '')$$);
SELECT regress_err($$SELECT dsync_leader('')$$);
SELECT regress_err($$SELECT dsync_assert_held('', 'h')$$);
SELECT regress_err($$SELECT dsync_force_release('l', '')$$);
SELECT regress_err($$SELECT dsync_channel('')$$);

-- 255 bytes work, 256 bytes do not (also with multibyte characters)
SELECT dsync_acquire(repeat('n', 255), repeat('h', 255)) IS NOT NULL AS granted_255;
SELECT dsync_leader(repeat('n', 255)) = repeat('h', 255) AS leader_255;
SELECT dsync_release(repeat('n', 255), repeat('h', 255)) AS released_255;
SELECT regress_err($$SELECT dsync_acquire(repeat('n', 256), 'h')$$);
SELECT regress_err($$SELECT dsync_acquire('l', repeat('h', 256))$$);
SELECT regress_err($$SELECT dsync_renew(repeat('n', 256), 'h')$$);
SELECT regress_err($$SELECT dsync_release('l', repeat('h', 256))$$);
SELECT regress_err($$SELECT dsync_leader(repeat('n', 256))$$);
SELECT regress_err($$SELECT dsync_assert_held(repeat('n', 256), 'h')$$);
SELECT regress_err($$SELECT dsync_force_release('l', repeat('h', 256))$$);
SELECT regress_err($$SELECT dsync_channel(repeat('n', 256))$$);
-- 'é' is two bytes in UTF-8: 127 of them plus one byte is 255 bytes
SELECT octet_length(repeat('é', 127) || 'x') AS bytes,
	   dsync_acquire(repeat('é', 127) || 'x', 'h') IS NOT NULL AS granted_multibyte;
SELECT dsync_release(repeat('é', 127) || 'x', 'h') AS released_multibyte;
SELECT regress_err($$SELECT dsync_acquire(repeat('é', 128), 'h')$$);

-- ttl must be positive and in range
SELECT regress_err($$SELECT dsync_acquire('l', 'h', NULL)$$);
SELECT regress_err($$SELECT dsync_acquire('l', 'h', '0')$$);
SELECT regress_err($$SELECT dsync_acquire('l', 'h', '-5 seconds')$$);
SELECT regress_err($$SELECT dsync_acquire('l', 'h', '1 day -25 hours')$$);
SELECT regress_err($$SELECT dsync_acquire('l', 'h', '300000 years')$$);
SELECT regress_err($$SELECT dsync_acquire('l', 'h', '106750000 days')$$);
SELECT regress_err($$SELECT dsync_renew('l', 'h', '0')$$);
SELECT regress_err($$SELECT dsync_renew('l', 'h', '-1 ms')$$);

-- nobody holds a name longer than administrators allow (dsync.max_ttl,
-- one day by default), and only a superuser can change that
SHOW dsync.max_ttl;
SELECT regress_err($$SET dsync.max_ttl = 0$$);
SELECT regress_err($$SELECT dsync_acquire('l', 'h', '1 day 1 second')$$);
SELECT regress_err($$SELECT dsync_join('g', 'm', '2 days')$$);
SELECT regress_err($$SELECT dsync_renew('l', 'h', '1 year')$$);
SELECT dsync_acquire('l', 'h', '1 day') IS NOT NULL AS one_day_ok;
SELECT dsync_release('l', 'h') AS released;

-- wait must not be negative nor end beyond the range of timestamptz
SELECT regress_err($$SELECT dsync_acquire('l', 'h', '1 minute', '-1 second')$$);
SELECT regress_err($$SELECT dsync_acquire('l', 'h', '1 minute', '300000 years')$$);
SELECT regress_err($$SELECT dsync_acquire('l', 'h', '1 minute', '106750000 days')$$);
-- a positive or NULL wait on a free lease is granted at once
SELECT dsync_acquire('l', 'h', '1 minute', '1 second') IS NOT NULL AS granted_wait;
SELECT dsync_acquire('l', 'h', '1 minute', NULL) IS NOT NULL AS granted_wait_null;
SELECT dsync_release('l', 'h') AS released;

-- malformed arguments are rejected by the types themselves (class 22)
SELECT regress_err($$SELECT dsync_acquire('l', 'h', 'soon')$$);
SELECT regress_err($$SELECT dsync_acquire('l', 'h', info => '{oops')$$);

-- nothing above left a lease behind
SELECT count(*) AS leases_left FROM dsync_leases;

-- the messages people see, with their hints
\set VERBOSITY default
SELECT dsync_acquire('l', 'h', '0');
SELECT dsync_acquire('l', 'h', '1 minute', '-1 second');
SELECT dsync_acquire(repeat('n', 256), 'h');
