/*-------------------------------------------------------------------------
 *
 * lazycommit.c
 *		Let a transaction whose only writes are releases commit without
 *		waiting for its WAL flush (or for a synchronous standby).
 *
 * A hand-off of a lease is two commits in a row: the holder's release,
 * then the waiter's grant.  Only the grant must be durable before anybody
 * relies on it.  A release lost in a crash or a failover leaves the lease
 * held by its old holder until its ttl passes, which is the state a holder
 * that dies without releasing leaves too: nobody else can hold the lease
 * meanwhile.  And the release's commit record is in WAL before the
 * waiter is woken (post-commit), so the grant's flush, and its wait for a
 * synchronous standby, carry the release along.  So a release need not
 * flush, and a turn costs one flush instead of two.
 *
 * That holds only if the release is all the transaction wrote: a release
 * in the same transaction as the caller's own writes, a grant, a renewal
 * or a fence commits as the session's synchronous_commit says.  The test
 * is on WAL: the transaction had no xid before its first release (so
 * nothing before wrote data), and this backend has inserted no WAL since
 * its last release (XactLastRecEnd has not moved), including anything a
 * deferred trigger wrote at commit.  WAL written without an xid before
 * the release (pruning a page, a hint bit's full-page image) is not data
 * that must survive.  Such WAL written after the release cannot be told
 * from the caller's own writes, so it keeps the commit synchronous: rare
 * (a new connection's first catalog reads may prune a catalog page) and
 * on the safe side.
 *
 * Commit reads synchronous_commit directly (RecordTransactionCommit,
 * SyncRepRequested), so the variable is lowered just for the commit, at
 * pre-commit, and put back by the commit or abort callback.  This is
 * cheaper on the hot path than a GUC change through set_config_option,
 * and no SQL can run in between to see it.  A commit that must flush for
 * other reasons (dropped relations, forceSyncCommit) still does.  The
 * callback is registered at load, so it runs after those of modules loaded
 * later (newest run first) and sees what they write at pre-commit; a
 * module preloaded before dsync that writes at pre-commit is not seen.
 *
 * An ephemeral grant writes no WAL, so it cannot carry a release the way a
 * durable grant does.  When it relies on a durable holder's release (the
 * free row version it found), it flushes that version's commit, and waits
 * for a synchronous standby to have it, before the grant is made
 * (DsyncLazyCommitCarry): the position comes from the commit log, which
 * keeps it for every asynchronous commit (as hint bits need it).  A commit
 * whose wait is cancelled stands, with a warning; a grant whose wait is
 * cancelled must not be made, or after a failover to that standby the old
 * holder would hold the lease again (the release lost) while the
 * ephemeral holder believes it holds it too.  So the wait ends in an error
 * unless the standbys confirmed the release (syncstandby.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/transam.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "miscadmin.h"
#include "replication/syncrep.h"
#include "utils/guc.h"

#include "lazycommit.h"
#include "syncstandby.h"

typedef enum LazyState
{
	LAZY_NONE,					/* no release in this transaction yet */
	LAZY_WRITING,				/* inside the first release */
	LAZY_OK,					/* only releases have written */
	LAZY_NO						/* something else wrote: commit as asked */
} LazyState;

static LazyState lazy_state = LAZY_NONE;
static XLogRecPtr lazy_end = InvalidXLogRecPtr; /* XactLastRecEnd after the last release */
static int	lazy_saved = -1;	/* synchronous_commit to put back; -1: none */


/*
 * LazyCommitXactCallback
 *		At pre-commit, lower synchronous_commit if the releases were all
 *		the transaction wrote; at its end, put it back and start over.
 */
static void
LazyCommitXactCallback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
			if (lazy_state == LAZY_OK && XactLastRecEnd == lazy_end &&
				synchronous_commit > SYNCHRONOUS_COMMIT_OFF)
			{
				lazy_saved = synchronous_commit;
				synchronous_commit = SYNCHRONOUS_COMMIT_OFF;
			}
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PREPARE:
			if (lazy_saved >= 0)
				synchronous_commit = lazy_saved;
			lazy_saved = -1;
			lazy_state = LAZY_NONE;
			break;
		default:
			break;
	}
}

/*
 * DsyncLazyCommitInit
 *		Register the commit callback, from _PG_init (see the file header
 *		for why at load).  An aborted subtransaction that wrote leaves an
 *		abort record, which moves XactLastRecEnd, so subtransactions need
 *		no callback of their own.
 */
void
DsyncLazyCommitInit(void)
{
	RegisterXactCallback(LazyCommitXactCallback, NULL);
}

/*
 * DsyncLazyCommitBegin
 *		A release is about to write.  Anything written before it by this
 *		transaction that is not a release keeps the commit synchronous.
 */
void
DsyncLazyCommitBegin(void)
{
	switch (lazy_state)
	{
		case LAZY_NONE:
			lazy_state = TransactionIdIsValid(GetTopTransactionIdIfAny()) ?
				LAZY_NO : LAZY_WRITING;
			break;
		case LAZY_OK:
			if (XactLastRecEnd != lazy_end)
				lazy_state = LAZY_NO;
			else
				lazy_state = LAZY_WRITING;
			break;
		case LAZY_WRITING:
			/* An earlier release failed part way, in a subtransaction. */
			lazy_state = LAZY_NO;
			break;
		case LAZY_NO:
			break;
	}
}

/*
 * DsyncLazyCommitEnd
 *		The release has written (or found nothing to release): remember
 *		where this backend's WAL ended, to see at commit whether anything
 *		came after.
 */
void
DsyncLazyCommitEnd(void)
{
	if (lazy_state != LAZY_WRITING)
		return;
	lazy_end = XactLastRecEnd;
	lazy_state = LAZY_OK;
}

/*
 * DsyncCommitAtLeast
 *		This transaction must commit with synchronous_commit at least level
 *		(a SYNCHRONOUS_COMMIT_* value): it granted a lease to a queued
 *		waiter, who acts on it once told, so the grant is made as durable
 *		as that waiter asked its own to be (queuegrant.c), whatever the
 *		granting session (or the worker, which commits its own work without
 *		a flush) has set.  Set for the rest of the transaction, as SET LOCAL
 *		would: the wait for a standby follows the setting's assign hook,
 *		not the variable alone.
 */
void
DsyncCommitAtLeast(int level)
{
	static const char *const names[] = {"off", "local", "remote_write", "on", "remote_apply"};

	if (level <= synchronous_commit || level < 0 || level >= (int) lengthof(names))
		return;
	(void) set_config_option("synchronous_commit", names[level], PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_LOCAL, true, 0, false);
}

/*
 * DsyncLazyCommitCarry
 *		A grant that writes no WAL is about to rely on a change committed
 *		at lsn without a flush (a release): make that change durable, as a
 *		durable grant's own commit would, and wait for a synchronous
 *		standby as that commit would (interrupts held, as the wait
 *		requires).  A cancel or timeout ends the wait with PostgreSQL's
 *		warning, as it does a commit's, and then, the standby not having
 *		confirmed the change, with an error (57014): the grant is not
 *		made.  Under synchronous_commit = off the grant is not made durable
 *		either, so nothing is waited for; under local, not on a standby.
 */
void
DsyncLazyCommitCarry(XLogRecPtr lsn)
{
	int			mode;

	if (XLogRecPtrIsInvalid(lsn) || synchronous_commit == SYNCHRONOUS_COMMIT_OFF)
		return;
	XLogFlush(lsn);
	HOLD_INTERRUPTS();
	/* Returns at once unless a synchronous standby is asked for and behind. */
	SyncRepWaitForLSN(lsn, true);
	RESUME_INTERRUPTS();
	CHECK_FOR_INTERRUPTS();

	/* What the wait was for, per synchronous_commit, as SyncRepWaitForLSN. */
	mode = DsyncStandbyCommitMode();
	if (mode != SYNC_REP_NO_WAIT && !DsyncStandbyConfirmed(lsn, mode))
		ereport(ERROR,
				(errcode(ERRCODE_QUERY_CANCELED),
				 errmsg("canceled waiting for the synchronous standby to confirm a release"),
				 errdetail("The lease is free only through a release the synchronous standby has not confirmed; "
						   "after a failover its old holder could hold it again, so it was not granted.")));
}

/*
 * DsyncLazyCommitFlushAll
 *		Flush all the WAL inserted so far, lazily committed releases
 *		included: for a sender of their events, which must not be heard
 *		before the releases are on disk.
 *
 * GetXLogInsertRecPtr says where the next record would start: at the
 * start of a page, past the page's header, which nothing has written yet,
 * and asking XLogFlush for that is an error ("xlog flush request ... is
 * not satisfied").  The page's start is where the WAL ends then.
 */
void
DsyncLazyCommitFlushAll(void)
{
	XLogRecPtr	lsn = GetXLogInsertRecPtr();

	if (XLogSegmentOffset(lsn, wal_segment_size) == SizeOfXLogLongPHD)
		lsn -= SizeOfXLogLongPHD;
	else if (lsn % XLOG_BLCKSZ == SizeOfXLogShortPHD)
		lsn -= SizeOfXLogShortPHD;
	XLogFlush(lsn);
}
