/*-------------------------------------------------------------------------
 *
 * ephguard.c
 *		The heavyweight lock behind a guard of an ephemeral lease, so that
 *		PostgreSQL's deadlock detector sees a release waiting for it.
 *
 * A guard (dsync_assert_held) of an ephemeral lease counts itself in the
 * lease's entry until its transaction ends, and a release by another
 * transaction waits for that count to drop (ephrelease.c).  A wait on
 * anything but a heavyweight lock is invisible to the deadlock detector:
 * a guard's transaction waiting for a row lock held by the releaser's
 * would wait forever.  So a guard also takes a heavyweight lock in share
 * mode, in its top-level transaction (a savepoint rolled back keeps it,
 * as it keeps the count), and a release waits by asking for that lock in
 * exclusive mode, then lets go of it at once: a deadlock is reported, as
 * for row locks, after deadlock_timeout, and lock_timeout applies.
 *
 * The lock is an advisory one (as pg_locks shows it), on the grant's
 * generation, unique in the server: field1 the database, field2 and
 * field3 the generation, field4 DSYNC_GUARD_LOCK_FIELD4, which
 * pg_advisory_lock never uses (it uses 1 and 2) and no other lock of
 * dsync does, so nothing can collide with it.  A guard of an earlier grant of the name holds up
 * nobody releasing a later one.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/lock.h"
#include "utils/resowner.h"

#include "ephemeral_int.h"

#define DSYNC_GUARD_LOCK_FIELD4	0x6490	/* after the insert (storekey.c) and fencing (fencing.c) locks */

/*
 * EphemeralGuardTag
 *		The lock tag of a grant's guards.
 */
static void
EphemeralGuardTag(LOCKTAG *tag, uint64 generation)
{
	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, (uint32) (generation >> 32),
						 (uint32) generation, DSYNC_GUARD_LOCK_FIELD4);
}

/*
 * EphemeralGuardLock
 *		Take a guard's lock on a grant, in share mode, until the top-level
 *		transaction ends; without wait, false if a release is queued for it
 *		(the caller then waits with no LWLock held, and looks again).
 */
bool
EphemeralGuardLock(uint64 generation, bool wait)
{
	LOCKTAG		tag;
	ResourceOwner saved = CurrentResourceOwner;
	LockAcquireResult result;

	EphemeralGuardTag(&tag, generation);
	/* The count lasts until the top-level transaction ends: so must this. */
	CurrentResourceOwner = TopTransactionResourceOwner;
	PG_TRY();
	{
		result = LockAcquire(&tag, ShareLock, false, !wait);
	}
	PG_FINALLY();
	{
		CurrentResourceOwner = saved;
	}
	PG_END_TRY();
	return result != LOCKACQUIRE_NOT_AVAIL;
}

/*
 * EphemeralGuardWait
 *		Wait, as a heavyweight lock waiter, until every transaction that
 *		guards the grant has ended; no LWLock may be held.
 */
void
EphemeralGuardWait(uint64 generation)
{
	LOCKTAG		tag;

	EphemeralGuardTag(&tag, generation);
	(void) LockAcquire(&tag, ExclusiveLock, false, false);
	LockRelease(&tag, ExclusiveLock, false);
}
