/*-------------------------------------------------------------------------
 *
 * ephbound.c
 *		An ephemeral grant of a lease with a bound fence stands or falls
 *		with its transaction.
 *
 * An ephemeral grant takes effect at once and outlives its transaction.
 * A grant of a lease with a bound fence also raises the fence's mark, in
 * the granting transaction (fencebind.c), and the two must stand or fall
 * together: a grant whose raise was rolled back would let the previous
 * holder's stale writes through while the new holder works.  So such a
 * grant is noted here with the nesting level of the (sub)transaction that
 * made it, and let go of if that rolls back: released (with a "released"
 * event), or, if another transaction guards it meanwhile, given an expiry
 * of now, which the reaper announces once the guard is gone.  A grant
 * whose transaction commits is its holder's, as any ephemeral grant, and
 * its mark is as durable as the commit; if that commit's wait for a
 * synchronous standby was cancelled (PostgreSQL lets the commit stand,
 * with a warning), the grant is let go of all the same, with a warning of
 * its own: the standby may not have the mark, and after a failover to it
 * the old holder's writes would pass again while the grant stood.
 *
 * The callbacks run while a transaction or savepoint aborts: nothing
 * here reads a catalog or fails.  The name's waiters are woken: the name
 * is free again (a blocked caller whose try failed this way tries again at
 * once anyway).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "replication/syncrep.h"
#include "storage/lwlock.h"
#include "utils/memutils.h"

#include "events.h"
#include "syncstandby.h"
#include "queued.h"
#include "wait.h"
#include "ephemeral.h"
#include "ephemeral_int.h"

/* A grant to let go of if its (sub)transaction rolls back. */
typedef struct EphemeralBoundNote
{
	EphemeralKey key;			/* key.name is a copy, in TopMemoryContext */
	uint32		hash;
	uint64		generation;		/* of the grant */
	uint64		wait_key;		/* DsyncWaitKey of the name */
	int			nest_level;		/* of the (sub)transaction that made it */
} EphemeralBoundNote;

static List *bound_grants = NIL;	/* in TopMemoryContext */
static bool callbacks_registered = false;

/*
 * EphemeralBoundUndo
 *		Let go of a noted grant if the entry is still that grant.
 */
static void
EphemeralBoundUndo(EphemeralBoundNote *note, bool wake)
{
	LWLock	   *lock = EphemeralLock(note->hash);
	EphemeralEntry *entry;

	LWLockAcquire(lock, LW_EXCLUSIVE);
	entry = EphemeralFind(&note->key, note->hash);
	if (entry != NULL && entry->generation == note->generation)
	{
		if (entry->guards == 0)
			EphemeralLetGo(entry, note->hash);
		else
		{
			DsyncEvent	due;

			entry->expires_at = GetCurrentTimestamp();
			EphemeralHeapMoved(entry);
			due = EphemeralEvent(DSYNC_EVENT_DEADLINE, entry);
			DsyncEventPublishNow(&due, 1, 0);
		}
	}
	LWLockRelease(lock);
	if (wake)
		DsyncWakeNow(note->wait_key);
}

/*
 * EphemeralBoundForgetAt
 *		Drop the notes from nest_level on, letting go of their grants first
 *		if undo.
 */
static void
EphemeralBoundForgetAt(int nest_level, bool undo)
{
	ListCell   *lc;

	foreach(lc, bound_grants)
	{
		EphemeralBoundNote *note = lfirst(lc);

		if (note->nest_level < nest_level)
			continue;
		if (undo)
			EphemeralBoundUndo(note, true);
		pfree((char *) note->key.name);
		pfree(note);
		bound_grants = foreach_delete_current(bound_grants, lc);
	}
}

/*
 * EphemeralBoundUnconfirmed
 *		At commit: whether the commit waited for a synchronous standby and
 *		the wait ended without its confirmation (cancelled, or timed out:
 *		PostgreSQL then lets the commit stand with a warning).  The raised
 *		marks would be lost in a failover to that standby while the grants
 *		stood, so the grants are let go of instead, as a rollback would.
 */
static bool
EphemeralBoundUnconfirmed(void)
{
	int			mode = DsyncStandbyCommitMode();

	/* A transaction that wrote no mark wrote no commit record to wait for. */
	return mode != SYNC_REP_NO_WAIT && TransactionIdIsValid(GetTopTransactionIdIfAny()) &&
		!DsyncStandbyConfirmed(XactLastCommitEnd, mode);
}

/*
 * EphemeralBoundRefuse
 *		Say which grants a commit whose standby wait was cancelled let go of.
 */
static void
EphemeralBoundRefuse(void)
{
	ListCell   *lc;

	foreach(lc, bound_grants)
	{
		EphemeralBoundNote *note = lfirst(lc);

		ereport(WARNING,
				(errcode(ERRCODE_QUERY_CANCELED),
				 errmsg("ephemeral lease \"%.*s\" was released: the synchronous standby did not confirm its fence",
						note->key.len, note->key.name),
				 errdetail("The mark its grant raised could be lost in a failover, while the grant stood."),
				 errhint("Acquire it again.")));
	}
}

/*
 * EphemeralBoundXactCallback
 *		A commit keeps the grants (unless its standby wait was cancelled);
 *		a rollback lets go of them.
 */
static void
EphemeralBoundXactCallback(XactEvent event, void *arg)
{
	if (bound_grants == NIL)
		return;
	switch (event)
	{
		case XACT_EVENT_COMMIT:
			if (EphemeralBoundUnconfirmed())
			{
				EphemeralBoundRefuse();
				EphemeralBoundForgetAt(0, true);

				/*
				 * Those made to queued waiters did not happen either; they
				 * go back in line at the transaction's end, once the names
				 * are let go of.  A waiter back in line while its undone
				 * grant still held the name could be granted again by the
				 * worker as a reentrant acquire, which the let-go would
				 * then empty under it.
				 */
				DsyncQueuedUndoEphemeral();
			}
			else
				EphemeralBoundForgetAt(0, false);
			break;
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_PREPARE:
			EphemeralBoundForgetAt(0, false);
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			EphemeralBoundForgetAt(0, true);
			break;
		default:
			break;
	}
}

/*
 * EphemeralBoundSubXactCallback
 *		A savepoint released hands its grants to its parent; one rolled
 *		back lets go of them.
 */
static void
EphemeralBoundSubXactCallback(SubXactEvent event, SubTransactionId mySubid,
							  SubTransactionId parentSubid, void *arg)
{
	int			level = GetCurrentTransactionNestLevel();
	ListCell   *lc;

	if (bound_grants == NIL)
		return;
	if (event == SUBXACT_EVENT_ABORT_SUB)
		EphemeralBoundForgetAt(level, true);
	else if (event == SUBXACT_EVENT_COMMIT_SUB)
	{
		foreach(lc, bound_grants)
		{
			EphemeralBoundNote *note = lfirst(lc);

			if (note->nest_level >= level)
				note->nest_level = level - 1;
		}
	}
}

/*
 * DsyncEphemeralUndoAtAbort
 *		Note the grant of lease with this generation, just made by the
 *		current (sub)transaction, to be let go of if it rolls back.
 */
void
DsyncEphemeralUndoAtAbort(text *lease, uint64 generation)
{
	MemoryContext oldcontext = MemoryContextSwitchTo(TopMemoryContext);
	EphemeralBoundNote *note = palloc(sizeof(EphemeralBoundNote));

	note->hash = EphemeralKeyFor(lease, &note->key);
	note->key.name = pnstrdup(note->key.name, note->key.len);
	note->generation = generation;
	note->wait_key = DsyncWaitKey(lease);
	note->nest_level = GetCurrentTransactionNestLevel();
	if (!callbacks_registered)
	{
		RegisterXactCallback(EphemeralBoundXactCallback, NULL);
		RegisterSubXactCallback(EphemeralBoundSubXactCallback, NULL);
		callbacks_registered = true;
	}
	bound_grants = lappend(bound_grants, note);
	MemoryContextSwitchTo(oldcontext);
}

/*
 * DsyncEphemeralUndoNoted
 *		Whether the grant of this generation is to be let go of if the
 *		current transaction rolls back (a fence bound to it was raised).
 */
bool
DsyncEphemeralUndoNoted(uint64 generation)
{
	ListCell   *lc;

	foreach(lc, bound_grants)
	{
		EphemeralBoundNote *note = lfirst(lc);

		if (note->generation == generation)
			return true;
	}
	return false;
}

/*
 * DsyncEphemeralUndoForget
 *		The grant of this generation turned out to have no fence bound: it
 *		outlives its transaction after all, as ephemeral grants do.
 */
void
DsyncEphemeralUndoForget(uint64 generation)
{
	ListCell   *lc;

	foreach(lc, bound_grants)
	{
		EphemeralBoundNote *note = lfirst(lc);

		if (note->generation != generation)
			continue;
		pfree((char *) note->key.name);
		pfree(note);
		bound_grants = foreach_delete_current(bound_grants, lc);
	}
}
