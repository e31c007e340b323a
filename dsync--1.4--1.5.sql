/* dsync 1.4 -> 1.5: semaphore definitions readable by every role */

\echo Use "ALTER EXTENSION dsync UPDATE TO '1.5'" to load this file. \quit

-- Semaphore definitions ----------------------------------------------------

/*
 * One row per semaphore definition, so that a client can attach to a
 * semaphore by its name alone and learn its count: dsync_leases shows a
 * count only while somebody holds a permit, and the table itself grants
 * nothing to PUBLIC (only dsync_semaphore_create and dsync_semaphore_drop
 * write it).  The view reads the table with its owner's rights, so an
 * ordinary role may read the definitions and still write nothing.  owner
 * is the creating role's name, as in dsync_leases: pg_get_userbyid shows a
 * role dropped meanwhile (from another database, where dsync's DROP ROLE
 * check does not see this table) as "unknown (OID=n)" rather than hiding
 * the row.
 *
 * A plain view, as dsync_fences: a definition changes only when it is
 * created or dropped, so the reader's snapshot is a fair answer, and the
 * functions that use a definition (acquire and the rest) read it below the
 * executor, without SIREAD locks, so a SERIALIZABLE reader of this view
 * never makes them fail; only a create or drop in a SERIALIZABLE
 * transaction takes part in serializable conflicts with it, as any write
 * to a table does.  Every name is qualified, as in the other views: a
 * view's names are resolved once, here, and a role with CREATE on the
 * extension's schema must not slip its own table or pg_get_userbyid in.
 */
CREATE VIEW @extschema@.dsync_semaphores AS
SELECT s.name,
	   s.permits,
	   s.created_at,
	   pg_catalog.pg_get_userbyid(s.owner) AS owner
  FROM @extschema@.dsync_semaphore AS s;

COMMENT ON VIEW @extschema@.dsync_semaphores IS
'semaphore definitions, one row per semaphore: its count (permits), when it was created and by which role';

GRANT SELECT ON @extschema@.dsync_semaphores TO PUBLIC;

-- Names given to dsync_events_since ---------------------------------------

/*
 * names is checked as every other function checks names, with the same
 * SQLSTATEs and messages (src/base/args.c, dsync_acquire_all's leases):
 * one dimension, no NULL element, none empty, none over 255 bytes.  An
 * empty array asks for no name and returns nothing.  The rest is as in 1.4.
 */
CREATE OR REPLACE FUNCTION @extschema@.dsync_events_since(
	after bigint,
	names text[] DEFAULT NULL)
RETURNS TABLE(seq bigint, channel text, payload jsonb, sent_at timestamptz)
LANGUAGE plpgsql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	n text;
BEGIN
	IF after IS NULL THEN
		RAISE EXCEPTION 'argument "after" must not be null'
			USING ERRCODE = 'null_value_not_allowed',
				  HINT = 'Pass 0 to read every retained event.';
	END IF;
	IF pg_catalog.array_ndims(names) > 1 THEN
		RAISE EXCEPTION 'argument "names" must be a one-dimensional array'
			USING ERRCODE = 'array_subscript_error';
	END IF;
	FOREACH n IN ARRAY COALESCE(names, '{}') LOOP
		IF n IS NULL THEN
			RAISE EXCEPTION 'argument "names" must not contain nulls'
				USING ERRCODE = 'null_value_not_allowed';
		ELSIF pg_catalog.octet_length(n) = 0 THEN
			RAISE EXCEPTION 'argument "names" must not contain empty names'
				USING ERRCODE = 'invalid_parameter_value';
		ELSIF pg_catalog.octet_length(n) > 255 THEN
			RAISE EXCEPTION 'argument "names" has a name that is too long'
				USING ERRCODE = 'string_data_right_truncation',
					  DETAIL = pg_catalog.format('A name is %s bytes long; names are at most 255 bytes.',
												  pg_catalog.octet_length(n));
		END IF;
	END LOOP;
	RETURN QUERY
		SELECT l.seq, l.channel, l.payload, l.sent_at
		FROM @extschema@.dsync_event_log l
		WHERE l.seq > after
		  AND (names IS NULL OR l.name = ANY (names))
		ORDER BY l.seq;
END
$$;

-- The event log's horizon, recorded ------------------------------------------

/*
 * The greatest seq the reaper has pruned from dsync_event_log
 * (src/events/eventlog.c, EventLogPrune).  1.4 took the horizon to be one
 * below the oldest row; a reaper's first number is moved up to the clock,
 * so on a log that was empty the first event raised that horizon past
 * numbers nobody was given, and a watcher that had seen everything was
 * told it had missed events.  It starts at the last seq handed out: the
 * worker (already running this version's library) does not record what
 * it prunes until this update commits, so a watcher connected across the
 * update may be told once that it missed events, never the reverse.
 * Readable by everybody, as the log is; not dumped, as the log is not.
 */
CREATE SEQUENCE @extschema@.dsync_event_pruned AS bigint MINVALUE 0 NO CYCLE;
REVOKE ALL ON SEQUENCE @extschema@.dsync_event_pruned FROM PUBLIC;
GRANT SELECT ON SEQUENCE @extschema@.dsync_event_pruned TO PUBLIC;
SELECT pg_catalog.setval('@extschema@.dsync_event_pruned',
	GREATEST(@extschema@.dsync_events_horizon(),
			 (SELECT CASE WHEN s.is_called THEN s.last_value ELSE 0 END
			  FROM @extschema@.dsync_event_seq s)));

CREATE OR REPLACE FUNCTION @extschema@.dsync_events_horizon()
RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
	SELECT s.last_value FROM @extschema@.dsync_event_pruned s
$$;

-- The trace ephemeral leases leave ------------------------------------------

/*
 * An ephemeral lease lives in shared memory only, so after a start, crash
 * restart or promotion nothing says which names were held that way; their
 * holders may still believe they hold them for up to
 * dsync.ephemeral_max_ttl.  Ephemeral grants wait that long after a start;
 * durable grants must too, where ephemeral leases were in use.  This
 * sequence is that record: before an ephemeral lease is granted or renewed,
 * its value is the time (timestamptz in microseconds) it was last moved,
 * at most a minute before, and every ephemeral lease of this database
 * expires within dsync.ephemeral_max_ttl and a minute of it.  A sequence,
 * because setval is written to WAL at once and kept whatever the caller's
 * transaction does, and replicated, so a promoted standby knows too
 * (src/ephemeral_record.c).  Not dumped: a restored database has no
 * ephemeral holders from before.
 */
CREATE SEQUENCE @extschema@.dsync_ephemeral_seq AS bigint MINVALUE 0 NO CYCLE;
REVOKE ALL ON SEQUENCE @extschema@.dsync_ephemeral_seq FROM PUBLIC;

-- A table's fence mark belongs to the table ---------------------------------

/*
 * A table's mark ("table:" and its name) was keyed by the name alone, so a
 * mark outlived its table and the next table of that name inherited it:
 * a role could make a table, push its mark up and drop it, and another
 * role's later table of the same name refused every write.  relid ties the
 * mark to the table: a mark made for another table is replaced (fence.c),
 * and a dropped table's mark goes with it (fenceddl.c).  The name stays the
 * key, for pg_dump: a restored table has a new OID, and the trigger below
 * ties each restored mark to the table of its name.  Marks of other
 * resources have no relid.
 */
ALTER TABLE @extschema@.dsync_fence ADD COLUMN relid oid;

-- Marks made by 1.4: the table of that name now, if there is one.
UPDATE @extschema@.dsync_fence
   SET relid = (SELECT c.oid FROM pg_catalog.pg_class c
				 WHERE c.oid = pg_catalog.to_regclass(pg_catalog.substr(resource, 7))
				   AND c.relkind OPERATOR(pg_catalog.=) ANY ('{r,p,f}'::"char"[]))
 WHERE resource LIKE 'table:%';
DELETE FROM @extschema@.dsync_fence
 WHERE resource LIKE 'table:%' AND relid IS NULL;

-- Fences raised by grants -------------------------------------------------

/*
 * A fence refuses a token only once a newer one has reached it, so a new
 * holder that reads before it writes could read a value its paused
 * predecessor then overwrote.  A resource bound to a lease has its mark
 * raised by every grant of that lease, in the granting transaction, so the
 * old token is refused from the moment the lease moves
 * (src/leases/fencebind.c).  The binding is the mark's own row: a resource
 * is guarded by one lease (the holders of two leases would not exclude one
 * another, so their tokens could not order its writes).  A resource named
 * like a lease is bound to it without a binding.  The index answers a
 * grant's one question: which resources does this lease guard?
 */
ALTER TABLE @extschema@.dsync_fence ADD COLUMN lease text COLLATE "C";
CREATE INDEX dsync_fence_lease ON @extschema@.dsync_fence (lease);

CREATE FUNCTION @extschema@.dsync_fence_bind(
	resource text,
	lease text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'dsync_fence_bind'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.dsync_fence_bind(text, text) IS
'from now on every grant of lease raises the mark of resource to the new token; true if bound now, false if it already was';

CREATE FUNCTION @extschema@.dsync_fence_unbind(
	resource text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'dsync_fence_unbind'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.dsync_fence_unbind(text) IS
'undo dsync_fence_bind: grants no longer raise the mark of resource (the mark stays); true if it was bound';

/*
 * A binding makes every grant of the lease wait for the resource's writers
 * to finish: whoever may bind a resource to a lease, and write the
 * resource, can hold up the lease's grants.  Lease names are one namespace
 * shared by every role, so this is an administrator's grant, as
 * dsync_force_release is (a trigger dsync_fenced('column', 'lease') needs
 * it too).
 */
REVOKE ALL ON FUNCTION @extschema@.dsync_fence_bind(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.dsync_fence_unbind(text) FROM PUBLIC;

CREATE OR REPLACE VIEW @extschema@.dsync_fences AS
	SELECT f.resource, f.token, f.fenced_at,
		   pg_catalog.pg_get_userbyid(f.owner) AS owner,
		   f.lease
	FROM @extschema@.dsync_fence f;

COMMENT ON FUNCTION @extschema@.dsync_fenced() IS
'trigger: BEFORE INSERT OR UPDATE ... FOR EACH ROW EXECUTE FUNCTION dsync_fenced(''token_column'' [, ''lease'']); refuses rows whose token is older than one the table already accepted; with a lease, CREATE TRIGGER binds the table to it';

/*
 * Rows inserted with SQL are a restore's (dsync writes its tables below
 * the executor, and nobody else may): a table's mark is tied to the table
 * that has its name in the restored database, and dropped if there is
 * none (or it is no table); the names the row binds are noted for grants
 * in shared memory.  ENABLE ALWAYS: restores that set
 * session_replication_role = replica run it too.
 */
CREATE FUNCTION @extschema@.dsync_fence_restored()
RETURNS trigger
AS 'MODULE_PATHNAME', 'dsync_fence_restored'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

REVOKE ALL ON FUNCTION @extschema@.dsync_fence_restored() FROM PUBLIC;

COMMENT ON FUNCTION @extschema@.dsync_fence_restored() IS
'trigger of dsync_fence: ties a restored table mark to the table of its name';

CREATE TRIGGER dsync_fence_restored BEFORE INSERT ON @extschema@.dsync_fence
	FOR EACH ROW EXECUTE FUNCTION @extschema@.dsync_fence_restored();
ALTER TABLE @extschema@.dsync_fence ENABLE ALWAYS TRIGGER dsync_fence_restored;

/*
 * Waiting without a connection (src/leases/queuegrant.c, src/wait/queued.c):
 * a waiter queues and goes; whoever frees the name grants it to the first
 * queued waiter in its own transaction; the waiter claims the grant.
 */
CREATE FUNCTION @extschema@.dsync_queue(
	lease text,
	holder text,
	ttl interval DEFAULT '30 seconds',
	channel text DEFAULT NULL,
	shared boolean DEFAULT false,
	durable boolean DEFAULT true)
RETURNS bigint
AS 'MODULE_PATHNAME', 'dsync_queue'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.dsync_queue(text, text, interval, text, boolean, boolean) IS
'get in line for lease without staying connected: the fencing token if granted now, else NULL (queued; renew the place with dsync_claim within ttl; the grant is announced on dsync_queue_channel(channel)); durable => false queues for an ephemeral lease';

CREATE FUNCTION @extschema@.dsync_queue_channel(
	name text)
RETURNS text
AS 'MODULE_PATHNAME', 'dsync_queue_channel'
LANGUAGE C IMMUTABLE PARALLEL SAFE;

COMMENT ON FUNCTION @extschema@.dsync_queue_channel(text) IS
'the channel to LISTEN on for grants to waiters queued with dsync_queue(..., channel => name)';

CREATE FUNCTION @extschema@.dsync_claim(
	lease text,
	holder text,
	OUT state text,
	OUT fencing bigint,
	OUT expires_in interval)
RETURNS record
AS 'MODULE_PATHNAME', 'dsync_claim'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.dsync_claim(text, text) IS
'where a queued waiter stands: queued (place renewed), granted (with the token and the most time the lease has left; claimed now) or gone';

CREATE FUNCTION @extschema@.dsync_unqueue(
	lease text,
	holder text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'dsync_unqueue'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.dsync_unqueue(text, text) IS
'leave the line; a grant not yet claimed is released and passed on; true if it was queued';

CREATE FUNCTION @extschema@.dsync_queue_pass()
RETURNS integer
AS 'MODULE_PATHNAME', 'dsync_queue_pass'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.dsync_queue_pass() IS
'administrators: pass on unclaimed grants and grant to queued waiters nobody granted (the worker runs it)';

REVOKE ALL ON FUNCTION @extschema@.dsync_queue_pass() FROM PUBLIC;
