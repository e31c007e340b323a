/*-------------------------------------------------------------------------
 *
 * queuedgrant.c
 *		Grants to queued waiters: reserved by the transaction that makes
 *		them, settled when it ends; and the claim deadlines the worker
 *		needs (its pokes are queuedpoke.c's).
 *
 * A transaction that grants to a queued waiter marks it GRANTING and notes
 * it with its subtransaction level; its end makes it GRANTED (with a claim
 * deadline the worker is told of) or puts it back in line.  A wake-up on a
 * channel with queued waiters and no grant of ours there pokes the
 * worker, which grants what nobody else did (leases/queuegrant.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "common/hashfn.h"
#include "lib/ilist.h"
#include "miscadmin.h"
#include "nodes/pg_list.h"
#include "port/pg_bitutils.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "queued.h"
#include "queued_int.h"
#include "wait.h"
#include "wait_int.h"
#include "dbslot.h"
#include "settings.h"
#include "shmem.h"
#include "compat.h"

/* The entries this backend's transaction is granting. */
typedef struct QueuedPending
{
	QueuedTag	tag;
	int			nest_level;
	bool		passing;		/* the worker passes it on (else: granting) */
	bool		undone;			/* a grant its commit lets go of */
} QueuedPending;

static List *queued_pending = NIL;


static void QueuedForgetPending(QueuedEntry *entry);


/*
 * DsyncQueuedReserve
 *		Take a WAITING entry out of line for a grant this transaction is
 *		about to try: false if it is not waiting any more.  Until the
 *		transaction (or the savepoint it is in) ends, it is GRANTING.
 */
bool
DsyncQueuedReserve(const DsyncQueuedWaiter *waiter)
{
	QueuedEntry *entry;
	QueuedPending *pending;
	MemoryContext oldcontext;

	oldcontext = MemoryContextSwitchTo(TopMemoryContext);
	pending = palloc(sizeof(QueuedPending));
	queued_pending = lappend(queued_pending, pending);
	MemoryContextSwitchTo(oldcontext);

	LWLockAcquire(queued_control->lock, LW_EXCLUSIVE);
	entry = QueuedEntryOf(waiter);
	if (entry == NULL || entry->w.state != DSYNC_QUEUED_WAITING)
	{
		LWLockRelease(queued_control->lock);
		queued_pending = list_delete_last(queued_pending);
		pfree(pending);
		return false;
	}
	/* Still counted in waiting: a release must poke for it if it comes back. */
	entry->w.state = DSYNC_QUEUED_GRANTING;
	entry->w.cancelled = false;
	entry->w.claimed = false;
	entry->w.repoke = false;
	entry->w.granting_xid = GetTopTransactionIdIfAny();
	entry->w.granting_pid = MyProcPid;
	pending->tag = entry->tag;
	pending->nest_level = GetCurrentTransactionNestLevel();
	pending->passing = false;
	pending->undone = false;
	LWLockRelease(queued_control->lock);
	return true;
}

/*
 * DsyncQueuedSetToken
 *		The token of the grant made to a reserved entry, and a time its
 *		lease expires no later than.
 */
void
DsyncQueuedSetToken(const DsyncQueuedWaiter *waiter, int64 token, TimestampTz expires_by,
					TimestampTz granted_upto)
{
	QueuedEntry *entry;

	LWLockAcquire(queued_control->lock, LW_EXCLUSIVE);
	entry = QueuedEntryOf(waiter);
	if (entry != NULL && entry->w.state == DSYNC_QUEUED_GRANTING)
	{
		entry->w.token = token;
		entry->w.expires_by = expires_by;
		entry->w.granted_upto = granted_upto;
		/* The grant wrote: the transaction has its id now. */
		entry->w.granting_xid = GetTopTransactionIdIfAny();
	}
	LWLockRelease(queued_control->lock);
}

/*
 * QueuedBackInLine
 *		A grant to entry did not happen (its try failed, or the transaction
 *		or savepoint that made it rolled back): back in line at its own
 *		ticket, unless its client left meanwhile.  Under the lock.  Returns
 *		the channel to poke once the lock is released (a poke met the
 *		entry while it was being granted, and found nobody to grant to),
 *		or -1.
 */
static int
QueuedBackInLine(QueuedEntry *entry)
{
	int			channel = QueuedChannel(entry->tag.key);

	if (entry->w.state != DSYNC_QUEUED_GRANTING)
		return -1;
	entry->w.token = 0;
	if (entry->w.cancelled)
	{
		bool		repoke = entry->w.repoke;

		QueuedRemove(entry);	/* as GRANTING: counted out of waiting */
		return repoke ? channel : -1;	/* the next one may be first now */
	}
	entry->w.state = DSYNC_QUEUED_WAITING;
	if (!entry->w.repoke)
		return -1;
	entry->w.repoke = false;
	return channel;
}

/*
 * QueuedMakeGranted
 *		A GRANTING entry's grant stands: GRANTED, its claim window starting
 *		now (ending now if its client left meanwhile).  Under the lock,
 *		exclusive; cannot fail.
 */
static void
QueuedMakeGranted(QueuedEntry *entry, TimestampTz now)
{
	entry->w.state = DSYNC_QUEUED_GRANTED;
	pg_atomic_fetch_sub_u32(&queued_control->waiting[QueuedChannel(entry->tag.key)], 1);
	entry->w.claim_by = entry->w.cancelled ? now :
		TimestampTzPlusMilliseconds(now, dsync_claim_window);
	dlist_push_tail(&queued_control->granted, &entry->granted_node);
	pg_atomic_fetch_add_u32(&queued_control->ngranted, 1);
}

/*
 * QueuedCountGrants
 *		ngrants grants were settled in this database: counted in its slot,
 *		which keeps the worker planning a claim window ahead (queuework.c).
 */
static void
QueuedCountGrants(uint64 ngrants)
{
	DsyncDbSlot *slot = DsyncDbSlotFind(MyDatabaseId);

	if (slot != NULL)
		pg_atomic_fetch_add_u64(&slot->queued_grants, ngrants);
}

/*
 * DsyncQueuedSettleNow
 *		The grant just made to a reserved entry took effect at once and
 *		outlives this transaction whatever it does (an ephemeral lease's):
 *		GRANTED now, not when the transaction ends.
 */
void
DsyncQueuedSettleNow(const DsyncQueuedWaiter *waiter)
{
	QueuedEntry *entry;
	TimestampTz claim_by = 0;

	LWLockAcquire(queued_control->lock, LW_EXCLUSIVE);
	entry = QueuedEntryOf(waiter);
	if (entry != NULL && entry->w.state == DSYNC_QUEUED_GRANTING)
	{
		QueuedForgetPending(entry);
		QueuedMakeGranted(entry, GetCurrentTimestamp());
		claim_by = entry->w.claim_by;
	}
	LWLockRelease(queued_control->lock);
	if (claim_by != 0)
	{
		QueuedCountGrants(1);
		QueuedWorkerBy(claim_by);
	}
}

/*
 * QueuedPendingDone
 *		Settle the pending entries at or below nest level (all if 0): made
 *		GRANTED if commit, else back in line.
 */
static void
QueuedPendingDone(int nest_level, bool commit)
{
	ListCell   *lc;
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz first_claim = 0;
	uint64		ngrants = 0;
	uint64		repoke[DSYNC_WAKE_CHANNELS / 64] = {0};
	bool		any_repoke = false;

	if (queued_pending == NIL)
		return;
	/* No allocation here: it may run in an abort, after an error. */
	LWLockAcquire(queued_control->lock, LW_EXCLUSIVE);
	foreach(lc, queued_pending)
	{
		QueuedPending *pending = lfirst(lc);
		QueuedEntry *entry;

		if (nest_level > 0 && pending->nest_level < nest_level)
			continue;
		entry = hash_search(queued_entries, &pending->tag, HASH_FIND, NULL);
		if (entry != NULL && pending->passing && entry->w.state == DSYNC_QUEUED_PASSING)
		{
			/* Passed on, or (rolled back) to be tried again a window later. */
			if (commit)
				QueuedRemove(entry);
			else
			{
				entry->w.state = DSYNC_QUEUED_GRANTED;
				entry->w.claim_by = TimestampTzPlusMilliseconds(now, dsync_claim_window);
				if (first_claim == 0 || entry->w.claim_by < first_claim)
					first_claim = entry->w.claim_by;
			}
		}
		else if (entry != NULL && !pending->passing && entry->w.state == DSYNC_QUEUED_GRANTING)
		{
			int			channel = -1;
			bool		stands = commit && !pending->undone;

			/*
			 * A poke met it while we granted (a permit or a shared holder
			 * may have left room for the next): the worker looks again,
			 * whatever our commit tells.
			 */
			if (stands && entry->w.repoke)
				channel = QueuedChannel(entry->tag.key);
			if (stands && entry->w.claimed)
				QueuedRemove(entry);	/* taken up already: nothing to wait for */
			else if (stands)
			{
				QueuedMakeGranted(entry, now);
				ngrants++;
				if (first_claim == 0 || entry->w.claim_by < first_claim)
					first_claim = entry->w.claim_by;
				QueuedNoteGrantedNow(QueuedChannel(entry->tag.key));
			}
			else
				channel = QueuedBackInLine(entry);
			if (channel >= 0)
			{

				repoke[channel / 64] |= UINT64CONST(1) << (channel % 64);
				any_repoke = true;
			}
		}
		queued_pending = foreach_delete_current(queued_pending, lc);
		pfree(pending);
	}
	LWLockRelease(queued_control->lock);
	if (ngrants > 0)
		QueuedCountGrants(ngrants);
	if (first_claim != 0)
		QueuedWorkerBy(first_claim);
	for (int word = 0; any_repoke && word < DSYNC_WAKE_CHANNELS / 64; word++)
		for (uint64 w = repoke[word]; w != 0; w &= w - 1)
			QueuedPokeNow(word * 64 + pg_rightmost_one_pos64(w));
}

/*
 * QueuedForgetPending
 *		This transaction no longer grants to entry: forget its pending
 *		record, so that the commit or abort does not settle it.
 */
static void
QueuedForgetPending(QueuedEntry *entry)
{
	ListCell   *lc;

	foreach(lc, queued_pending)
	{
		QueuedPending *pending = lfirst(lc);

		if (memcmp(&pending->tag, &entry->tag, sizeof(QueuedTag)) == 0)
		{
			queued_pending = foreach_delete_current(queued_pending, lc);
			pfree(pending);
			break;
		}
	}
}

/*
 * DsyncQueuedUnreserve
 *		The grant to a reserved entry was not made: back in line.
 */
void
DsyncQueuedUnreserve(const DsyncQueuedWaiter *waiter)
{
	QueuedEntry *entry;
	int			channel = -1;

	LWLockAcquire(queued_control->lock, LW_EXCLUSIVE);
	entry = QueuedEntryOf(waiter);
	if (entry != NULL)
	{
		QueuedForgetPending(entry);
		channel = QueuedBackInLine(entry);
	}
	LWLockRelease(queued_control->lock);
	if (channel >= 0)
		QueuedPokeNow(channel);
}

/*
 * DsyncQueuedDropOwn
 *		The entry goes now, whatever this transaction does: dsync_queue's
 *		own try, made with its entry reserved, got the lease for its
 *		caller (who has the token), or the worker passed on an ephemeral
 *		grant not claimed in time (its release is not undone by a rollback).
 */
void
DsyncQueuedDropOwn(const DsyncQueuedWaiter *waiter)
{
	QueuedEntry *entry;

	LWLockAcquire(queued_control->lock, LW_EXCLUSIVE);
	entry = QueuedEntryOf(waiter);
	if (entry != NULL)
	{
		QueuedForgetPending(entry);
		QueuedRemove(entry);
	}
	LWLockRelease(queued_control->lock);
}

/*
 * DsyncQueuedTakeOwn
 *		A renewal's own try, made with its entry reserved, got the lease
 *		for its caller in this transaction (a durable grant, or an
 *		ephemeral one that raised a bound fence): the entry goes when the
 *		transaction commits, and is back in line at its own ticket if it
 *		rolls back (with the grant).
 */
void
DsyncQueuedTakeOwn(const DsyncQueuedWaiter *waiter)
{
	QueuedEntry *entry;

	LWLockAcquire(queued_control->lock, LW_EXCLUSIVE);
	entry = QueuedEntryOf(waiter);
	if (entry != NULL && entry->w.state == DSYNC_QUEUED_GRANTING)
		entry->w.claimed = true;
	LWLockRelease(queued_control->lock);
}

/*
 * DsyncQueuedUndoEphemeral
 *		This transaction commits, but lets go of the ephemeral grants that
 *		raised bound fences (their synchronous standby did not confirm the
 *		raise: leases/ephbound.c): those it made to queued waiters did not
 *		happen.  In a commit callback; the end of the transaction puts the
 *		waiters back in line as a rollback's would (QueuedPendingDone), once
 *		the names are let go of and this transaction's locks (the fences'
 *		among them) are released, so that the worker's next try can grant.
 */
void
DsyncQueuedUndoEphemeral(void)
{
	ListCell   *lc;

	if (queued_pending == NIL)
		return;
	LWLockAcquire(queued_control->lock, LW_SHARED);
	foreach(lc, queued_pending)
	{
		QueuedPending *pending = lfirst(lc);
		QueuedEntry *entry = hash_search(queued_entries, &pending->tag, HASH_FIND, NULL);

		if (!pending->passing && entry != NULL && !entry->w.durable)
			pending->undone = true;
	}
	LWLockRelease(queued_control->lock);
}

/*
 * DsyncQueuedAtSubAbort
 *		A savepoint at nest_level rolled back: its grants to queued waiters
 *		are undone, and they are back in line.
 */
void
DsyncQueuedAtSubAbort(int nest_level)
{
	QueuedPendingDone(nest_level, false);
}

/*
 * DsyncQueuedAtSubCommit
 *		A savepoint at nest_level was released: its grants now belong to
 *		its parent.
 */
void
DsyncQueuedAtSubCommit(int nest_level)
{
	ListCell   *lc;

	foreach(lc, queued_pending)
	{
		QueuedPending *pending = lfirst(lc);

		if (pending->nest_level >= nest_level)
			pending->nest_level = nest_level - 1;
	}
}

/*
 * DsyncQueuedAtEnd
 *		The top-level transaction ended: its grants to queued waiters are
 *		GRANTED (their claim window starts now) or back in line.  Runs
 *		after commit, so nothing here may fail.
 */
void
DsyncQueuedAtEnd(bool commit)
{
	QueuedPendingDone(0, commit);
}

/*
 * DsyncQueuedTakeDue
 *		The GRANTED entries of this database whose claim window has passed,
 *		made PASSING (a claim, renewal or departure now finds them gone)
 *		until this transaction ends: the caller passes each lease on in it.
 *		If it commits they go; if not, each gets another window.  A list of
 *		palloc'd copies.
 */
List *
DsyncQueuedTakeDue(TimestampTz now)
{
	dlist_mutable_iter iter;
	List	   *due = NIL;

	if (queued_control == NULL || dlist_is_empty(&queued_control->granted))
		return NIL;
	LWLockAcquire(queued_control->lock, LW_EXCLUSIVE);
	dlist_foreach_modify(iter, &queued_control->granted)
	{
		QueuedEntry *entry = dlist_container(QueuedEntry, granted_node, iter.cur);
		DsyncQueuedWaiter *copy;

		QueuedPending *pending;
		MemoryContext oldcontext;

		if (entry->w.dbid != MyDatabaseId || entry->w.state != DSYNC_QUEUED_GRANTED ||
			entry->w.claim_by > now)
			continue;
		copy = palloc(sizeof(DsyncQueuedWaiter));
		*copy = entry->w;
		due = lappend(due, copy);
		/* Out of memory here leaves it GRANTED: passed on next time. */
		oldcontext = MemoryContextSwitchTo(TopMemoryContext);
		pending = palloc(sizeof(QueuedPending));
		pending->tag = entry->tag;
		pending->nest_level = GetCurrentTransactionNestLevel();
		pending->passing = true;
		pending->undone = false;
		queued_pending = lappend(queued_pending, pending);
		MemoryContextSwitchTo(oldcontext);
		entry->w.state = DSYNC_QUEUED_PASSING;
	}
	LWLockRelease(queued_control->lock);
	if (due != NIL)
		DsyncXactChanged();		/* the end of this transaction settles them */
	return due;
}

/*
 * QueuedSettledGrantOf
 *		Whether entry is a grant its holder may take up: GRANTED, or
 *		GRANTING (not taken up already) by a transaction that has committed (it is visible before
 *		that transaction's end settles the entry).  Under the lock; reads
 *		the commit log.
 */
bool
QueuedSettledGrantOf(QueuedEntry *entry)
{
	if (entry->w.state == DSYNC_QUEUED_GRANTED)
		return true;
	/*
	 * Not an ephemeral grant (one that raised a bound fence: others are
	 * GRANTED at once), which its transaction's commit may still let go of
	 * (DsyncQueuedUndoEphemeral).
	 */
	return entry->w.state == DSYNC_QUEUED_GRANTING && !entry->w.cancelled &&
		!entry->w.claimed && entry->w.durable &&
		TransactionIdIsValid(entry->w.granting_xid) &&
		TransactionIdDidCommit(entry->w.granting_xid);
}

/*
 * DsyncQueuedTakeUp
 *		Take up entry's grant (it is QueuedSettledGrantOf): a GRANTED entry
 *		goes, a GRANTING one goes when its transaction's end settles it.
 *		Under the lock.
 */
void
DsyncQueuedTakeUp(QueuedEntry *entry)
{
	if (entry->w.state == DSYNC_QUEUED_GRANTED)
		QueuedRemove(entry);
	else
		entry->w.claimed = true;
}

/*
 * DsyncQueuedUse
 *		The holder of a grant made to a queued waiter renewed or released
 *		it: as good as a claim.  Costs an atomic read while no grant awaits
 *		its claim.  (A renewal the worker's pass-on meets does not lose the
 *		lease: the pass-on lets a renewed grant be, DsyncLeaseReleaseGrant.)
 */
void
DsyncQueuedUse(text *name, text *holder)
{
	QueuedEntry *entry;

	if (queued_control == NULL ||
		(pg_atomic_read_u32(&queued_control->ngranted) == 0 &&
		 !DsyncQueuedAny(DsyncWaitKey(name))))
		return;
	LWLockAcquire(queued_control->lock, LW_EXCLUSIVE);
	entry = QueuedFind(name, holder, DsyncWaitKey(name));
	if (entry != NULL && QueuedSettledGrantOf(entry))
		DsyncQueuedTakeUp(entry);
	LWLockRelease(queued_control->lock);
}

/*
 * DsyncQueuedNextClaim
 *		The earliest claim deadline of dbid's unclaimed grants (0: none).
 */
TimestampTz
DsyncQueuedNextClaim(Oid dbid)
{
	dlist_iter	iter;
	TimestampTz next = 0;

	if (queued_control == NULL || dlist_is_empty(&queued_control->granted))
		return 0;
	LWLockAcquire(queued_control->lock, LW_SHARED);
	dlist_foreach(iter, &queued_control->granted)
	{
		QueuedEntry *entry = dlist_container(QueuedEntry, granted_node, iter.cur);

		if (entry->w.dbid == dbid && entry->w.state == DSYNC_QUEUED_GRANTED &&
			(next == 0 || entry->w.claim_by < next))
			next = entry->w.claim_by;
	}
	LWLockRelease(queued_control->lock);
	return next;
}

/*
 * DsyncQueuedGrants
 *		How many grants to queued waiters have committed in this database
 *		(a counter that only rises, reset when its slot is).
 */
uint64
DsyncQueuedGrants(void)
{
	DsyncDbSlot *slot = DsyncDbSlotFind(MyDatabaseId);

	return slot == NULL ? 0 : pg_atomic_read_u64(&slot->queued_grants);
}
