/* dsync 1.0 -> 1.1: the background reaper and lease events */

\echo Use "ALTER EXTENSION dsync UPDATE TO '1.1'" to load this file. \quit

/*
 * The reaper clears expired leases by itself, at the moment they expire.
 * This runs a pass now, in the caller's transaction, over the whole table:
 * for tests and for operators.  Its "expired" events are sent by the
 * reaper once the caller commits.
 */
CREATE FUNCTION @extschema@.dsync_reap()
RETURNS bigint
AS 'MODULE_PATHNAME', 'dsync_reap'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.dsync_reap() IS
'administrators only: clear every expired lease now; returns how many were cleared';

REVOKE ALL ON FUNCTION @extschema@.dsync_reap() FROM PUBLIC;
