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

/*
 * Fencing tokens come in blocks of the sequence's increment, and fetching a
 * block moves the sequence up to the clock (setval, one WAL flush).  With
 * blocks of 1,024 that was a flush every 25 ms at 40,000 grants a second,
 * which stalled every grant that needed a token meanwhile; a block of 65,536
 * lasts 1.6 s at that rate and is still spent far slower than the clock
 * moves (one microsecond per token), which keeps the clock floor.
 */
ALTER SEQUENCE @extschema@.dsync_fencing_seq INCREMENT BY 65536;
