/* dsync 1.0: leases with TTL, fencing tokens and leader election */

\echo Use "CREATE EXTENSION dsync" to load this file. \quit

/*
 * One row per (lease, permit slot).  A lock or a leader lease uses slot 0.
 * Releasing clears the holder rather than deleting the row, so that taking,
 * renewing and releasing a lease are all HOT updates: the only index is the
 * primary key, whose columns never change, and the fillfactor leaves room
 * on each page for the new row versions.  Expiry is decided by comparing
 * expires_at with the server clock at the moment of each call, so a lease
 * is gone the instant its time passes, whatever has been cleaned up.
 *
 * Nobody but the extension's owner may touch this table: the functions
 * below read and write it directly from C without going through the
 * privilege system, and they are the only way in.
 */
CREATE TABLE @extschema@.dsync_lease (
	name		text COLLATE "C" NOT NULL,
	slot		integer NOT NULL,
	holder		text COLLATE "C",
	fencing		bigint,
	acquired_at	timestamptz,
	renewed_at	timestamptz,
	expires_at	timestamptz,
	ttl			interval,
	info		jsonb,
	owner		oid,
	CONSTRAINT dsync_lease_pkey PRIMARY KEY (name, slot)
) WITH (fillfactor = 50);

REVOKE ALL ON TABLE @extschema@.dsync_lease FROM PUBLIC;

/*
 * Fencing tokens.  Each nextval() reserves a block of 1024 tokens, which
 * dsync hands out in order from shared memory; the sequence's WAL is made
 * durable (and confirmed by synchronous standbys) before a block is used,
 * so tokens never repeat after a crash or failover, even with
 * synchronous_commit = off (see fencing.c).  It is dumped by pg_dump so
 * that a restored database keeps counting upwards.
 */
CREATE SEQUENCE @extschema@.dsync_fencing_seq AS bigint
	INCREMENT BY 1024 MINVALUE 1 NO CYCLE;
REVOKE ALL ON SEQUENCE @extschema@.dsync_fencing_seq FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.dsync_fencing_seq', '');

-- Leases -----------------------------------------------------------------

CREATE FUNCTION @extschema@.dsync_acquire(
	lease text,
	holder text,
	ttl interval DEFAULT '30 seconds',
	wait interval DEFAULT '0',
	info jsonb DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'dsync_acquire'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.dsync_acquire(text, text, interval, interval, jsonb) IS
'take a lease (or one permit) for ttl; returns the fencing token, or NULL if it could not be had within wait';

CREATE FUNCTION @extschema@.dsync_renew(
	lease text,
	holder text,
	ttl interval DEFAULT NULL)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'dsync_renew'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.dsync_renew(text, text, interval) IS
'extend a live lease of this holder to now + ttl; returns the new expiry, or NULL if it is no longer held';

CREATE FUNCTION @extschema@.dsync_release(
	lease text,
	holder text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'dsync_release'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.dsync_release(text, text) IS
'let go of a lease; true if this holder held it';

CREATE FUNCTION @extschema@.dsync_leader(
	lease text)
RETURNS text
AS 'MODULE_PATHNAME', 'dsync_leader'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.dsync_leader(text) IS
'the holder of a live one-permit lease, or NULL';

CREATE FUNCTION @extschema@.dsync_assert_held(
	lease text,
	holder text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'dsync_assert_held'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.dsync_assert_held(text, text) IS
'fenced-write guard: returns the fencing token and keeps the lease held until the transaction ends, or raises SQLSTATE 55000';

CREATE FUNCTION @extschema@.dsync_force_release(
	lease text,
	holder text DEFAULT NULL)
RETURNS integer
AS 'MODULE_PATHNAME', 'dsync_force_release'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.dsync_force_release(text, text) IS
'administrators only: release a lease (all holders, or the one given) whoever owns it; returns how many were released';

REVOKE ALL ON FUNCTION @extschema@.dsync_force_release(text, text) FROM PUBLIC;

-- Notifications ------------------------------------------------------------

CREATE FUNCTION @extschema@.dsync_channel(
	name text)
RETURNS text
AS 'MODULE_PATHNAME', 'dsync_channel'
LANGUAGE C IMMUTABLE PARALLEL SAFE;

COMMENT ON FUNCTION @extschema@.dsync_channel(text) IS
'the channel to LISTEN on for a lease, group or event name';

-- Observing ----------------------------------------------------------------

/*
 * Live leases only: a row whose expiry has passed is hidden at once, even
 * before anything has cleaned it up.  The rows come from a C function that
 * reads the latest committed state without SIREAD locks (see views.c), so
 * reading the view in a SERIALIZABLE transaction never makes a concurrent
 * dsync call fail serialization.  Ordinary roles need no right on the
 * table to read it.
 */
CREATE FUNCTION @extschema@.dsync_lease_rows(
	OUT lease text,
	OUT holder text,
	OUT fencing bigint,
	OUT permits integer,
	OUT acquired_at timestamptz,
	OUT renewed_at timestamptz,
	OUT expires_at timestamptz,
	OUT ttl interval,
	OUT info jsonb,
	OUT owner oid)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'dsync_lease_rows'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.dsync_lease_rows() IS
'rows of the view dsync_leases: every live holder, as last committed';

CREATE VIEW @extschema@.dsync_leases AS
SELECT r.lease,
	   r.holder,
	   r.fencing,
	   r.permits,
	   r.acquired_at,
	   r.renewed_at,
	   r.expires_at,
	   r.ttl,
	   r.info,
	   pg_catalog.pg_get_userbyid(r.owner) AS owner
  FROM @extschema@.dsync_lease_rows() AS r;

COMMENT ON VIEW @extschema@.dsync_leases IS
'live leases, one row per holder';

GRANT SELECT ON @extschema@.dsync_leases TO PUBLIC;

/*
 * Who is blocked in a dsync wait in this database right now, from the
 * queue in shared memory.
 */
CREATE FUNCTION @extschema@.dsync_waiter_rows(
	OUT pid integer,
	OUT kind text,
	OUT name text,
	OUT holder text,
	OUT since timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'dsync_waiter_rows'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.dsync_waiter_rows() IS
'rows of the view dsync_waiters';

CREATE VIEW @extschema@.dsync_waiters AS
SELECT w.pid, w.kind, w.name, w.holder, w.since
  FROM @extschema@.dsync_waiter_rows() AS w;

COMMENT ON VIEW @extschema@.dsync_waiters IS
'backends blocked in a dsync wait in this database, in the order they started waiting';

GRANT SELECT ON @extschema@.dsync_waiters TO PUBLIC;
