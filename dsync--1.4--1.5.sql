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
