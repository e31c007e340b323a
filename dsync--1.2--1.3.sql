/* dsync 1.2 -> 1.3: ephemeral leases, dsync_acquire(..., durable => false) */

\echo Use "ALTER EXTENSION dsync UPDATE TO '1.3'" to load this file. \quit

/*
 * A parameter with a default cannot be added to a function in place, and
 * an overload with one more defaulted parameter would make every existing
 * call ambiguous: replace the function.  Its execution stays granted to
 * PUBLIC, as before.
 */
DROP FUNCTION @extschema@.dsync_acquire(text, text, interval, interval, jsonb);

CREATE FUNCTION @extschema@.dsync_acquire(
	lease text,
	holder text,
	ttl interval DEFAULT '30 seconds',
	wait interval DEFAULT '0',
	info jsonb DEFAULT NULL,
	durable boolean DEFAULT true)
RETURNS bigint
AS 'MODULE_PATHNAME', 'dsync_acquire'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.dsync_acquire(text, text, interval, interval, jsonb, boolean) IS
'take a lease (or one permit) for ttl; returns the fencing token, or NULL if it could not be had within wait; durable => false keeps it in shared memory only (an ephemeral lease)';
