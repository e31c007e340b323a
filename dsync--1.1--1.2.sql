/* dsync 1.1 -> 1.2: semaphore permits of their own, views that look up by
 * name, numbered events, dsync_stats, force-release that ends waits */

\echo Use "ALTER EXTENSION dsync UPDATE TO '1.2'" to load this file. \quit

-- Semaphore permits -----------------------------------------------------

/*
 * One row per permit of a semaphore (slot 0 to permits - 1), free when
 * holder is NULL.  Besides the primary key, (name, holder, slot) is
 * indexed, so that finding the permit a holder has, or a free one (from a
 * given slot on), is one index probe whatever the number of holders.  A grant or release changes holder and
 * so is not a HOT update; renewals are.  Not dumped: a restored semaphore
 * makes its permit rows again as they are taken.
 */
CREATE TABLE @extschema@.dsync_permit (
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
	CONSTRAINT dsync_permit_pkey PRIMARY KEY (name, slot)
) WITH (fillfactor = 50);

CREATE INDEX dsync_permit_holder ON @extschema@.dsync_permit (name, holder, slot);

REVOKE ALL ON TABLE @extschema@.dsync_permit FROM PUBLIC;

-- 1.1 kept permits in dsync_lease; semaphores' rows move here.
INSERT INTO @extschema@.dsync_permit
SELECT l.* FROM @extschema@.dsync_lease l
 WHERE l.slot > 0
	OR l.name IN (SELECT s.name FROM @extschema@.dsync_semaphore s);
DELETE FROM @extschema@.dsync_lease l
 WHERE l.slot > 0
	OR l.name IN (SELECT s.name FROM @extschema@.dsync_semaphore s);
INSERT INTO @extschema@.dsync_permit (name, slot, renewed_at)
SELECT s.name, g.slot, pg_catalog.now()
  FROM @extschema@.dsync_semaphore s,
	   pg_catalog.generate_series(0, s.permits - 1) AS g(slot)
ON CONFLICT DO NOTHING;

-- Events ------------------------------------------------------------------

/*
 * The "seq" of every notification: rises in the order events are sent and
 * keeps rising across restarts.  Dumped, so that a restored database
 * keeps counting from where the dump was made.
 */
CREATE SEQUENCE @extschema@.dsync_event_seq AS bigint MINVALUE 1 NO CYCLE;
REVOKE ALL ON SEQUENCE @extschema@.dsync_event_seq FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.dsync_event_seq', '');

-- The view dsync_leases -------------------------------------------------

/*
 * The view reads a foreign table served by dsync itself (views.c): a
 * condition "lease = value" (and "holder = value") becomes an index probe,
 * rows are produced one at a time with bounded memory, the latest
 * committed state is shown at every isolation level, and no SIREAD lock is
 * taken.  Only the view is granted to PUBLIC.
 */
CREATE FUNCTION @extschema@.dsync_fdw_handler()
RETURNS fdw_handler
AS 'MODULE_PATHNAME', 'dsync_fdw_handler'
LANGUAGE C STRICT;

CREATE FOREIGN DATA WRAPPER dsync HANDLER @extschema@.dsync_fdw_handler;
CREATE SERVER dsync FOREIGN DATA WRAPPER dsync;

CREATE FOREIGN TABLE @extschema@.dsync_lease_scan (
	lease		text,
	holder		text,
	fencing		bigint,
	permits		integer,
	acquired_at	timestamptz,
	renewed_at	timestamptz,
	expires_at	timestamptz,
	ttl			interval,
	info		jsonb,
	owner		oid
) SERVER dsync;

REVOKE ALL ON @extschema@.dsync_lease_scan FROM PUBLIC;

COMMENT ON FOREIGN TABLE @extschema@.dsync_lease_scan IS
'live holders of leases and permits, as last committed; read it through the view dsync_leases';

CREATE OR REPLACE VIEW @extschema@.dsync_leases AS
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
  FROM @extschema@.dsync_lease_scan AS r;

DROP FUNCTION @extschema@.dsync_lease_rows();

-- Statistics --------------------------------------------------------------

CREATE FUNCTION @extschema@.dsync_stats_row(
	OUT sender_pid integer,
	OUT served boolean,
	OUT grants bigint,
	OUT renewals bigint,
	OUT releases bigint,
	OUT expiries bigint,
	OUT waits bigint,
	OUT wait_timeouts bigint,
	OUT wait_time interval,
	OUT events_sent bigint,
	OUT events_lost bigint,
	OUT queue_used bigint,
	OUT queue_size bigint,
	OUT sender_pids integer[])
RETURNS record
AS 'MODULE_PATHNAME', 'dsync_stats_row'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.dsync_stats_row() IS
'row of the view dsync_stats';

/*
 * One row for the current database.  sender_pid is the process that sends
 * this database's notifications now, sender_pids every process that did in
 * the last minute (workers take turns between databases): any role can
 * NOTIFY a dsync channel, so a client ignores notifications whose sender
 * is not among them.
 */
CREATE VIEW @extschema@.dsync_stats AS
SELECT s.* FROM @extschema@.dsync_stats_row() AS s;

COMMENT ON VIEW @extschema@.dsync_stats IS
'who sends this database''s dsync notifications, and counters since server start';

GRANT SELECT ON @extschema@.dsync_stats TO PUBLIC;

CREATE FUNCTION @extschema@.dsync_stats_reset()
RETURNS void
AS 'MODULE_PATHNAME', 'dsync_stats_reset'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.dsync_stats_reset() IS
'administrators only: zero this database''s dsync_stats counters';

REVOKE ALL ON FUNCTION @extschema@.dsync_stats_reset() FROM PUBLIC;

-- Databases and their workers -----------------------------------------------

CREATE FUNCTION @extschema@.dsync_database_slots(
	OUT datid oid,
	OUT state text,
	OUT served boolean,
	OUT worker_pid integer,
	OUT worker_since timestamptz,
	OUT next_deadline timestamptz,
	OUT queued_bytes bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'dsync_database_slots'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.dsync_database_slots() IS
'rows of the view dsync_databases';

/*
 * Every connectable database of the server and what dsync knows of it:
 * "active" (has the extension; served says whether a worker can be given
 * to it), "absent" (has none), "probe" (not looked at yet) or "no slot"
 * (dsync.max_databases is too small to look at it).
 */
CREATE VIEW @extschema@.dsync_databases AS
SELECT d.datname,
	   COALESCE(s.state, 'no slot') AS state,
	   COALESCE(s.served, false) AS served,
	   s.worker_pid,
	   s.worker_since,
	   s.next_deadline,
	   COALESCE(s.queued_bytes, 0) AS queued_bytes
  FROM pg_catalog.pg_database AS d
  LEFT JOIN @extschema@.dsync_database_slots() AS s ON s.datid = d.oid
 WHERE d.datallowconn AND NOT d.datistemplate;

COMMENT ON VIEW @extschema@.dsync_databases IS
'which databases dsync serves, and their workers';

GRANT SELECT ON @extschema@.dsync_databases TO PUBLIC;

-- Administration ----------------------------------------------------------

CREATE FUNCTION @extschema@.dsync_force_release(
	lease text,
	holder text,
	cancel_waits boolean)
RETURNS integer
AS 'MODULE_PATHNAME', 'dsync_force_release_waits'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.dsync_force_release(text, text, boolean) IS
'administrators only: release a lease (all holders, or the one given) whoever owns it and, if cancel_waits, end the released holders'' queued waits for it; returns how many were released';

REVOKE ALL ON FUNCTION @extschema@.dsync_force_release(text, text, boolean) FROM PUBLIC;
