/*-------------------------------------------------------------------------
 *
 * ephemeral_record.c
 *		The durable trace that ephemeral leases leave, so that after a
 *		start, crash restart or promotion no durable grant is made while an
 *		ephemeral holder from before may still believe it holds the name.
 *
 * Ephemeral leases live in shared memory only.  Their own grants wait out
 * dsync.ephemeral_max_ttl after a start (ephemeral.c), but a durable grant
 * cannot know from shared memory whether a free name was held ephemerally
 * before, and holding every durable grant of a free name back after every
 * start would tax databases that never use ephemeral leases.  So each
 * database keeps one number in the sequence dsync_ephemeral_seq: a time W,
 * moved up to the present before an ephemeral lease is granted or renewed
 * whenever it is more than RECORD_SLACK old.  Every ephemeral expiry is
 * then at most W + dsync.ephemeral_max_ttl + RECORD_SLACK.
 *
 * setval is written to WAL at once and survives the caller's rollback; it
 * is flushed, and confirmed by synchronous standbys, before the grant, as
 * a block of fencing tokens is (fencing.c).  It is replicated, so a
 * promoted standby reads the primary's record.  The cost is one WAL flush
 * per database and RECORD_SLACK while ephemeral leases are in use.
 *
 * After a start (or promotion), a durable grant of a name that nobody holds
 * durably waits until the earlier of W + dsync.ephemeral_max_ttl +
 * RECORD_SLACK and the end of the ephemeral grace (start +
 * dsync.ephemeral_max_ttl, by when every holder from before has expired),
 * if W was written before this start.  A database whose ephemeral leases
 * were last used long before is not held back at all; once the grace is
 * over, the check is one comparison.
 *
 * A semaphore's permit cannot be held back by name: the semaphore may have
 * been defined since (an ephemeral lease of its name is then gone without
 * a trace), and holding every permit back would stop semaphores the
 * holder never touched.  So while the hold-back lasts, a permit grant
 * counts one holder more than it sees, as it counts a live ephemeral
 * lease of the name (DsyncEphemeralHeldBack, permit.c): a semaphore of N
 * grants at most N - 1 permits then, one of 1 none.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/timestamp.h"

#include "catalog.h"
#include "ephemeral.h"
#include "ephemeral_int.h"
#include "fencing.h"
#include "settings.h"

/* How old the record may get before an ephemeral grant moves it up. */
#define RECORD_SLACK			(60 * USECS_PER_SEC)

/* Lock class of the per-database record lock (one writer at a time). */
#define DSYNC_RECORD_LOCK_CLASS	0x6481

/* What this backend knows the record says (the sequence it was read from). */
static Oid	record_seq = InvalidOid;
static TimestampTz record_at = 0;

/* The hold-back on durable grants, worked out once per backend. */
static Oid	holdback_seq = InvalidOid;
static TimestampTz holdback_until = 0;

/*
 * DsyncEphemeralRecordDue
 *		Whether an ephemeral grant or renewal at now must first move the
 *		record up (DsyncEphemeralRecord).  Cheap: called under a partition
 *		lock on every ephemeral grant.  An installation without the
 *		sequence (not yet updated to 1.5) has no record to keep.
 */
bool
DsyncEphemeralRecordDue(const DsyncCatalog *catalog, TimestampTz now)
{
	if (!OidIsValid(catalog->ephemeral_seq))
		return false;
	return catalog->ephemeral_seq != record_seq || now > record_at + RECORD_SLACK;
}

/*
 * DsyncEphemeralRecord
 *		Make the record cover ephemeral expiries for RECORD_SLACK from now,
 *		durably, before an ephemeral grant or renewal.  Not under any
 *		LWLock: it may write and flush WAL and wait for a standby.  One
 *		backend of a database writes at a time; the others then find the
 *		record fresh.
 */
void
DsyncEphemeralRecord(const DsyncCatalog *catalog)
{
	Oid			seqoid = catalog->ephemeral_seq;
	LOCKTAG		tag;
	TimestampTz now;
	int64		recorded;

	if (!OidIsValid(seqoid))
		return;
	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, seqoid, 0, DSYNC_RECORD_LOCK_CLASS);
	(void) LockAcquire(&tag, ExclusiveLock, false, false);
	now = GetCurrentTimestamp();
	recorded = DsyncSequenceLastValue(seqoid);
	if (recorded + RECORD_SLACK / 2 < now)
	{
		DsyncSequenceSetDurably(seqoid, now);
		recorded = now;
	}
	LockRelease(&tag, ExclusiveLock, false);
	record_seq = seqoid;
	record_at = recorded;
}

/*
 * DsyncEphemeralHoldback
 *		Before a durable grant of a name nobody holds durably: true, with
 *		*until, if an ephemeral lease from before this server's start (or
 *		promotion) may still hold it.  open_at is when ephemeral grants
 *		open (0: not known yet, the launcher has not started), that is the
 *		start plus dsync.ephemeral_max_ttl.
 */
bool
DsyncEphemeralHoldback(const DsyncCatalog *catalog, TimestampTz open_at, TimestampTz now,
					   TimestampTz *until)
{
	int64		grace = (int64) dsync_ephemeral_max_ttl * USECS_PER_SEC;

	/* After the grace, nothing from before can be live. */
	if ((open_at != 0 && now >= open_at) || !OidIsValid(catalog->ephemeral_seq))
		return false;
	if (holdback_seq != catalog->ephemeral_seq)
	{
		/* Before the launcher starts, no ephemeral grant has been made since the start. */
		TimestampTz start = open_at != 0 ? open_at - grace : now;
		TimestampTz end_of_grace = start + grace;
		int64		recorded = DsyncSequenceLastValue(catalog->ephemeral_seq);

		holdback_until = 0;
		if (recorded > 0 && recorded < start)
			holdback_until = Min(recorded + grace + RECORD_SLACK, end_of_grace);
		holdback_seq = catalog->ephemeral_seq;
	}
	if (now >= holdback_until)
		return false;
	*until = holdback_until;
	return true;
}

/*
 * DsyncEphemeralHeldBack
 *		DsyncEphemeralHoldback now, for a grant that has no ephemeral
 *		table to look at first (a semaphore's permit): true, with *until,
 *		if an ephemeral lease from before this server's start (or
 *		promotion) may still hold a name of this database.
 */
bool
DsyncEphemeralHeldBack(const DsyncCatalog *catalog, TimestampTz *until)
{
	if (ephemeral_shared == NULL)
		return false;
	return DsyncEphemeralHoldback(catalog,
								  (TimestampTz) pg_atomic_read_u64(&ephemeral_shared->open_at),
								  GetCurrentTimestamp(), until);
}
