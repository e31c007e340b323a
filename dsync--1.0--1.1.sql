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

-- Semaphores ---------------------------------------------------------------

/*
 * One row per semaphore: how many permits its name has.  Each permit is a
 * row of dsync_lease (slot 0 to permits - 1).  Definitions are dumped by
 * pg_dump; permits held are not.
 */
CREATE TABLE @extschema@.dsync_semaphore (
	name		text COLLATE "C" NOT NULL,
	permits		integer NOT NULL CHECK (permits BETWEEN 1 AND 65535),
	created_at	timestamptz NOT NULL,
	owner		oid NOT NULL,
	CONSTRAINT dsync_semaphore_pkey PRIMARY KEY (name)
);

REVOKE ALL ON TABLE @extschema@.dsync_semaphore FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.dsync_semaphore', '');

CREATE FUNCTION @extschema@.dsync_semaphore_create(
	name text,
	permits integer)
RETURNS boolean
AS 'MODULE_PATHNAME', 'dsync_semaphore_create'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.dsync_semaphore_create(text, integer) IS
'define a semaphore: true if created now, false if it exists with this count, SQLSTATE 42710 if with another';

CREATE FUNCTION @extschema@.dsync_semaphore_drop(
	name text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'dsync_semaphore_drop'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.dsync_semaphore_drop(text) IS
'remove a semaphore definition; holders keep their permits until they release or expire';

-- Events (one-to-one signals) --------------------------------------------

/* One row per pending signal; a waiter consumes (deletes) exactly one. */
CREATE TABLE @extschema@.dsync_signal (
	name		text COLLATE "C" NOT NULL,
	seq			bigint NOT NULL,
	set_at		timestamptz NOT NULL,
	owner		oid NOT NULL,
	CONSTRAINT dsync_signal_pkey PRIMARY KEY (name, seq)
);

REVOKE ALL ON TABLE @extschema@.dsync_signal FROM PUBLIC;

CREATE SEQUENCE @extschema@.dsync_signal_seq;
REVOKE ALL ON SEQUENCE @extschema@.dsync_signal_seq FROM PUBLIC;

CREATE FUNCTION @extschema@.dsync_event_set(
	name text)
RETURNS void
AS 'MODULE_PATHNAME', 'dsync_event_set'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.dsync_event_set(text) IS
'store one signal; it stays until one waiter consumes it';

CREATE FUNCTION @extschema@.dsync_event_wait(
	name text,
	timeout interval DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'dsync_event_wait'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.dsync_event_wait(text, interval) IS
'consume exactly one signal, waiting without polling up to timeout (NULL: no limit); false on timeout';

CREATE FUNCTION @extschema@.dsync_event_clear(
	name text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'dsync_event_clear'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.dsync_event_clear(text) IS
'drop all pending signals; returns how many';

CREATE FUNCTION @extschema@.dsync_event_is_set(
	name text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'dsync_event_is_set'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.dsync_event_is_set(text) IS
'whether a signal is pending';

-- Group membership ---------------------------------------------------------

/* One row per member; expired members are hidden at once, then reaped. */
CREATE TABLE @extschema@.dsync_member (
	grp			text COLLATE "C" NOT NULL,
	member		text COLLATE "C" NOT NULL,
	info		jsonb,
	joined_at	timestamptz NOT NULL,
	renewed_at	timestamptz NOT NULL,
	expires_at	timestamptz NOT NULL,
	ttl			interval NOT NULL,
	owner		oid NOT NULL,
	CONSTRAINT dsync_member_pkey PRIMARY KEY (grp, member)
) WITH (fillfactor = 50);

REVOKE ALL ON TABLE @extschema@.dsync_member FROM PUBLIC;

CREATE FUNCTION @extschema@.dsync_join(
	grp text,
	member text,
	ttl interval DEFAULT '30 seconds',
	info jsonb DEFAULT NULL)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'dsync_join'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.dsync_join(text, text, interval, jsonb) IS
'join a group or refresh a membership for ttl; returns the expiry';

CREATE FUNCTION @extschema@.dsync_leave(
	grp text,
	member text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'dsync_leave'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.dsync_leave(text, text) IS
'leave a group at once; false if not a live member';

CREATE FUNCTION @extschema@.dsync_members(
	grp text)
RETURNS TABLE(member text, info jsonb, joined_at timestamptz,
			  expires_at timestamptz, is_leader boolean)
AS 'MODULE_PATHNAME', 'dsync_member_rows'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.dsync_members(text) IS
'live members of a group; is_leader marks the holder of the lease named after the group';
