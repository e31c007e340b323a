/* dsync 1.3 -> 1.4: storage-side fencing, the retained event log */

\echo Use "ALTER EXTENSION dsync UPDATE TO '1.4'" to load this file. \quit

-- Storage-side fencing ---------------------------------------------------

/*
 * One row per fenced resource: the greatest fencing token accepted for it.
 * dsync_fence() and the trigger dsync_fenced() lock the row for the rest
 * of the caller's transaction, so writers of one resource are serialised
 * and a stale token is refused whatever the caller's snapshot.  The marks
 * are dumped by pg_dump: a restored database must not accept a token it
 * refused before.
 */
CREATE TABLE @extschema@.dsync_fence (
	resource	text COLLATE "C" NOT NULL,
	token		bigint NOT NULL,
	fenced_at	timestamptz NOT NULL,
	owner		oid NOT NULL,
	CONSTRAINT dsync_fence_pkey PRIMARY KEY (resource)
) WITH (fillfactor = 50);

REVOKE ALL ON TABLE @extschema@.dsync_fence FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.dsync_fence', '');

CREATE FUNCTION @extschema@.dsync_fence(
	resource text,
	token bigint)
RETURNS bigint
AS 'MODULE_PATHNAME', 'dsync_fence'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.dsync_fence(text, bigint) IS
'refuse a fencing token older than one already accepted for resource (SQLSTATE 55000); otherwise record it and return the previous mark';

CREATE FUNCTION @extschema@.dsync_fenced()
RETURNS trigger
AS 'MODULE_PATHNAME', 'dsync_fenced'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.dsync_fenced() IS
'trigger: BEFORE INSERT OR UPDATE ... FOR EACH ROW EXECUTE FUNCTION dsync_fenced(''token_column''); refuses rows whose token is older than one the table already accepted';

CREATE VIEW @extschema@.dsync_fences AS
	SELECT f.resource, f.token, f.fenced_at,
		   pg_catalog.pg_get_userbyid(f.owner) AS owner
	FROM @extschema@.dsync_fence f;

GRANT SELECT ON @extschema@.dsync_fences TO PUBLIC;

-- Several leases at once ----------------------------------------------------

CREATE FUNCTION @extschema@.dsync_acquire_all(
	leases text[],
	holder text,
	ttl interval DEFAULT '30 seconds',
	wait interval DEFAULT '0',
	info jsonb DEFAULT NULL)
RETURNS bigint[]
AS 'MODULE_PATHNAME', 'dsync_acquire_all'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.dsync_acquire_all(text[], text, interval, interval, jsonb) IS
'take every one of leases or none; returns their fencing tokens in the array''s order, or NULL if not all could be had within wait; holds none of them while it waits';

-- Session leases -----------------------------------------------------------

/*
 * dsync_acquire(..., session => true): also released when the acquiring
 * backend ends.  A parameter with a default cannot be added in place (see
 * 1.2 -> 1.3): the function is replaced, still executable by PUBLIC.
 */
DROP FUNCTION @extschema@.dsync_acquire(text, text, interval, interval, jsonb, boolean);

CREATE FUNCTION @extschema@.dsync_acquire(
	lease text,
	holder text,
	ttl interval DEFAULT '30 seconds',
	wait interval DEFAULT '0',
	info jsonb DEFAULT NULL,
	durable boolean DEFAULT true,
	session boolean DEFAULT false)
RETURNS bigint
AS 'MODULE_PATHNAME', 'dsync_acquire'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.dsync_acquire(text, text, interval, interval, jsonb, boolean, boolean) IS
'take a lease (or one permit) for ttl; returns the fencing token, or NULL if it could not be had within wait; durable => false keeps it in shared memory only; session => true also releases it when this connection ends';

/*
 * The durable session grants of running backends, with the epoch of the
 * shared memory they were made in: a reaper that starts releases those of
 * another epoch (the server crashed, or this is a promoted standby) and
 * those of backends that are gone.  Not dumped: a restored database has
 * no sessions.
 */
CREATE TABLE @extschema@.dsync_session (
	fencing		bigint NOT NULL,
	name		text COLLATE "C" NOT NULL,
	holder		text COLLATE "C" NOT NULL,
	epoch		timestamptz NOT NULL,
	pid			integer NOT NULL,
	CONSTRAINT dsync_session_pkey PRIMARY KEY (fencing)
);

REVOKE ALL ON TABLE @extschema@.dsync_session FROM PUBLIC;

-- The retained event log -------------------------------------------------

/*
 * Every notification the reaper sends, kept for dsync.event_retention, so
 * that a watcher that was disconnected catches up from the last seq it saw
 * (dsync_events_since) and knows when it missed more than is kept
 * (dsync_events_horizon).  Written by the reaper in a transaction that
 * commits, durably, just before the one that sends the notifications, so
 * a listener never sees an event the log does not have.  Event payloads go
 * to anyone who LISTENs, so the log is as readable; it is not dumped.
 */
CREATE TABLE @extschema@.dsync_event_log (
	seq			bigint NOT NULL,
	name		text COLLATE "C" NOT NULL,
	channel		text NOT NULL,
	payload		jsonb NOT NULL,
	sent_at		timestamptz NOT NULL,
	CONSTRAINT dsync_event_log_pkey PRIMARY KEY (seq)
);

REVOKE ALL ON TABLE @extschema@.dsync_event_log FROM PUBLIC;
GRANT SELECT ON TABLE @extschema@.dsync_event_log TO PUBLIC;

CREATE FUNCTION @extschema@.dsync_events_since(
	after bigint,
	names text[] DEFAULT NULL)
RETURNS TABLE(seq bigint, channel text, payload jsonb, sent_at timestamptz)
LANGUAGE plpgsql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	IF after IS NULL THEN
		RAISE EXCEPTION 'argument "after" must not be null'
			USING ERRCODE = 'null_value_not_allowed',
				  HINT = 'Pass 0 to read every retained event.';
	END IF;
	RETURN QUERY
		SELECT l.seq, l.channel, l.payload, l.sent_at
		FROM @extschema@.dsync_event_log l
		WHERE l.seq > after
		  AND (names IS NULL OR l.name = ANY (names))
		ORDER BY l.seq;
END
$$;

COMMENT ON FUNCTION @extschema@.dsync_events_since(bigint, text[]) IS
'the retained events sent after seq "after", of the given names (NULL: all), oldest first';

/*
 * The greatest seq that may have been dropped from the log: a watcher
 * whose last seq is below it has missed events.  Pruning keeps the newest
 * event (and with dsync.event_retention = 0 keeps nothing), so an empty
 * log means nothing is kept: then every number handed out so far counts as
 * lost.  Reading the sequence's last value needs SELECT on it, which only
 * tells what every payload already shows; nextval stays refused.
 */
GRANT SELECT ON SEQUENCE @extschema@.dsync_event_seq TO PUBLIC;

CREATE FUNCTION @extschema@.dsync_events_horizon()
RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
	SELECT COALESCE(
		(SELECT min(l.seq) - 1 FROM @extschema@.dsync_event_log l),
		(SELECT CASE WHEN s.is_called THEN s.last_value ELSE 0 END
		 FROM @extschema@.dsync_event_seq s))
$$;

COMMENT ON FUNCTION @extschema@.dsync_events_horizon() IS
'the greatest event seq that may no longer be retained; a watcher that last saw a smaller seq has missed events';

-- Read-write locks ---------------------------------------------------------

CREATE FUNCTION @extschema@.dsync_acquire_shared(
	lease text,
	holder text,
	ttl interval DEFAULT '30 seconds',
	wait interval DEFAULT '0',
	info jsonb DEFAULT NULL,
	session boolean DEFAULT false)
RETURNS bigint
AS 'MODULE_PATHNAME', 'dsync_acquire_shared'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.dsync_acquire_shared(text, text, interval, interval, jsonb, boolean) IS
'take a lease shared for ttl, together with other shared holders and never with an exclusive one; returns the fencing token, or NULL if it could not be had within wait; queues behind exclusive waiters';

/*
 * dsync_leases.mode: exclusive (dsync_acquire, a plain lease or one
 * permit) or shared (dsync_acquire_shared).  Added last: a view's columns
 * can only be appended.
 */
ALTER FOREIGN TABLE @extschema@.dsync_lease_scan ADD COLUMN mode text;

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
	   pg_catalog.pg_get_userbyid(r.owner) AS owner,
	   r.mode
  FROM @extschema@.dsync_lease_scan AS r;
