/*-------------------------------------------------------------------------
 *
 * events.c
 *		Lease events: recorded during a transaction, queued at commit in
 *		shared memory, announced by the database's reaper with NOTIFY.
 *
 * A NOTIFY in every acquiring or releasing transaction would serialise
 * their commits on the cluster-wide notify lock (async.c, PreCommit_Notify).
 * Instead each backend keeps the events of its transaction in local memory
 * (dropping those of rolled-back savepoints), and its commit callback
 * appends them to its database's queue in shared memory (queue.c), then
 * wakes the database's worker, or asks the launcher to start one.  The
 * worker sends whatever has accumulated in one transaction of its own, so
 * listeners get every committed change while committers pay only for a
 * short copy under an LWLock.
 *
 * The commit callback runs after the commit record is written but before
 * the transaction's row locks are released, so the next change to the same
 * lease (which needs that row lock) is always queued after this one:
 * events of one lease are queued, and sent, in commit order.
 *
 * The queue also tells the worker about every new deadline, so that it
 * never has to scan the table to know when to wake up next.  If the shared
 * pool is full, events are dropped rather than making commits wait; the
 * worker notices, logs a warning and rebuilds its deadlines from the
 * table, so that expired leases are still cleared and announced.  Before
 * commit, a backend makes sure its database has a slot, and warns its
 * client if dsync cannot serve the database.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "commands/dbcommands.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/json.h"
#include "utils/memutils.h"

#include "catalog.h"
#include "compat.h"
#include "stats.h"
#include "dbslot.h"
#include "settings.h"
#include "store.h"
#include "events.h"
#include "xactcb.h"

/* An event of the current transaction, with the nesting level it belongs to. */
typedef struct DsyncPendingEvent
{
	int			nest_level;
	DsyncEvent	event;
} DsyncPendingEvent;

static List *pending_events = NIL;	/* in TopTransactionContext */
static int64 pending_renewals = 0;	/* renewals made by this transaction */
static bool callbacks_registered = false;

static void DsyncEventXactCallback(XactEvent event, void *arg);
static void DsyncEventSubXactCallback(SubXactEvent event, SubTransactionId mySubid,
									  SubTransactionId parentSubid, void *arg);

/*
 * DsyncEventRegisterCallbacks
 *		Hook transaction end in this backend, once.
 */
static void
DsyncEventRegisterCallbacks(void)
{
	DsyncXactCallbacksOnce(&callbacks_registered, DsyncEventXactCallback,
						   DsyncEventSubXactCallback);
}

/*
 * DsyncEventRecordRenewal
 *		Count a renewal (for dsync_stats) once this transaction commits.
 */
void
DsyncEventRecordRenewal(void)
{
	DsyncEventRegisterCallbacks();
	pending_renewals++;
}

/*
 * DsyncEventRecord
 *		Note an event about a row that this transaction has just changed.
 */
void
DsyncEventRecord(DsyncEventKind kind, const DsyncRow *row)
{
	MemoryContext oldcontext;
	DsyncPendingEvent *pe;

	DsyncEventRegisterCallbacks();

	oldcontext = MemoryContextSwitchTo(TopTransactionContext);
	pe = palloc0(sizeof(DsyncPendingEvent));
	pe->nest_level = GetCurrentTransactionNestLevel();
	pe->event.kind = kind;
	pe->event.slot = DatumGetInt32(row->values[Anum_lease_slot - 1]);
	pe->event.name = TextDatumGetCString(row->values[Anum_lease_name - 1]);
	pe->event.holder = row->nulls[Anum_lease_holder - 1] ? pstrdup("") :
		TextDatumGetCString(row->values[Anum_lease_holder - 1]);
	pe->event.fencing = row->nulls[Anum_lease_fencing - 1] ? 0 :
		DatumGetInt64(row->values[Anum_lease_fencing - 1]);
	pe->event.expires_at = row->nulls[Anum_lease_expires_at - 1] ? 0 :
		DatumGetTimestampTz(row->values[Anum_lease_expires_at - 1]);
	/* The reaper removes a released row once it has been unused a while. */
	if (kind == DSYNC_EVENT_RELEASED || kind == DSYNC_EVENT_PERMIT_RELEASED)
		pe->event.expires_at = GetCurrentTimestamp();
	pending_events = lappend(pending_events, pe);
	MemoryContextSwitchTo(oldcontext);
}

/*
 * DsyncEventRecordRaw
 *		Note an event that is not about a lease row: group membership
 *		(name is the group, holder the member) and signals (no holder).
 */
void
DsyncEventRecordRaw(DsyncEventKind kind, text *name, text *holder,
					TimestampTz expires_at)
{
	DsyncRow row;

	memset(&row, 0, sizeof(row));
	for (int i = 0; i < DSYNC_MAX_ATTS; i++)
		row.nulls[i] = true;
	DsyncRowSet(&row, Anum_lease_name, PointerGetDatum(name));
	DsyncRowSet(&row, Anum_lease_slot, Int32GetDatum(0));
	if (holder)
		DsyncRowSet(&row, Anum_lease_holder, PointerGetDatum(holder));
	if (expires_at != 0)
		DsyncRowSet(&row, Anum_lease_expires_at, TimestampTzGetDatum(expires_at));
	DsyncEventRecord(kind, &row);
}

/*
 * DsyncEventSubXactCallback
 *		A rolled-back savepoint's events never happened; a released one's
 *		belong to its parent from now on.
 */
static void
DsyncEventSubXactCallback(SubXactEvent event, SubTransactionId mySubid,
						  SubTransactionId parentSubid, void *arg)
{
	int			level = GetCurrentTransactionNestLevel();
	ListCell   *lc;

	if (pending_events == NIL)
		return;
	if (event == SUBXACT_EVENT_ABORT_SUB)
	{
		foreach(lc, pending_events)
		{
			DsyncPendingEvent *pe = lfirst(lc);

			if (pe->nest_level >= level)
				pending_events = foreach_delete_current(pending_events, lc);
		}
	}
	else if (event == SUBXACT_EVENT_COMMIT_SUB)
	{
		foreach(lc, pending_events)
		{
			DsyncPendingEvent *pe = lfirst(lc);

			if (pe->nest_level >= level)
				pe->nest_level = level - 1;
		}
	}
}

/*
 * DsyncEventHasDeadline
 *		Whether an event gives the reaper a deadline to watch.
 */
bool
DsyncEventHasDeadline(DsyncEventKind kind)
{
	return kind == DSYNC_EVENT_ACQUIRED || kind == DSYNC_EVENT_DEADLINE ||
		kind == DSYNC_EVENT_PERMIT_ACQUIRED || kind == DSYNC_EVENT_PERMIT_DEADLINE ||
		kind == DSYNC_EVENT_JOINED || kind == DSYNC_EVENT_MEMBER_DEADLINE;
}

/*
 * DsyncEventIsAnnounced
 *		Whether an event is sent to listeners.
 */
bool
DsyncEventIsAnnounced(DsyncEventKind kind)
{
	return kind != DSYNC_EVENT_DEADLINE && kind != DSYNC_EVENT_MEMBER_DEADLINE &&
		kind != DSYNC_EVENT_PERMIT_DEADLINE && kind != DSYNC_EVENT_RENEWED &&
		kind != DSYNC_EVENT_IDLE && kind != DSYNC_EVENT_PERMIT_IDLE;
}

/*
 * DsyncEventIsRelease
 *		Whether an event releases a lease or permit row, announced or not:
 *		the row may be removed once unused for dsync.idle_row_retention.
 */
bool
DsyncEventIsRelease(DsyncEventKind kind)
{
	return kind == DSYNC_EVENT_RELEASED || kind == DSYNC_EVENT_PERMIT_RELEASED ||
		kind == DSYNC_EVENT_IDLE || kind == DSYNC_EVENT_PERMIT_IDLE;
}

/*
 * EventCountKind
 *		Add one event to the counts of grants, releases and expiries.
 */
static void
EventCountKind(DsyncEventKind kind, int64 *counts)
{
	if (kind == DSYNC_EVENT_ACQUIRED || kind == DSYNC_EVENT_PERMIT_ACQUIRED)
		counts[0]++;
	else if (kind == DSYNC_EVENT_RELEASED || kind == DSYNC_EVENT_PERMIT_RELEASED)
		counts[1]++;
	else if (kind == DSYNC_EVENT_EXPIRED)
		counts[2]++;
}

/*
 * EventCountAdd
 *		Add counts of grants, releases and expiries, and renewals, to a
 *		database's counters.
 */
static void
EventCountAdd(DsyncDbSlot *slot, const int64 *counts, int64 renewals)
{
	DsyncStatAddSlot(slot, DSYNC_STAT_GRANTS, counts[0]);
	DsyncStatAddSlot(slot, DSYNC_STAT_RELEASES, counts[1]);
	DsyncStatAddSlot(slot, DSYNC_STAT_EXPIRIES, counts[2]);
	DsyncStatAddSlot(slot, DSYNC_STAT_RENEWALS, renewals);
}

/*
 * DsyncTimeLower
 *		Lower a shared time (0: none) to t if that is earlier, atomically;
 *		true if it was lowered.  *result, if given: the time it holds now,
 *		ours or an earlier one.  A successful swap is a full barrier.
 */
bool
DsyncTimeLower(pg_atomic_uint64 *value, TimestampTz t, TimestampTz *result)
{
	uint64		current = pg_atomic_read_u64(value);

	while (current == 0 || (TimestampTz) current > t)
	{
		if (pg_atomic_compare_exchange_u64(value, &current, (uint64) t))
		{
			if (result)
				*result = t;
			return true;
		}
	}
	if (result)
		*result = (TimestampTz) current;
	return false;
}

/*
 * DsyncDeadlineLower
 *		Make the reaper wake up by deadline if that is earlier than what it
 *		sleeps until; true if it is.  Safe in a commit callback: no locks,
 *		no errors.
 */
bool
DsyncDeadlineLower(DsyncDbSlot *slot, TimestampTz deadline)
{
	return DsyncTimeLower(&slot->next_deadline, deadline, NULL);
}

/*
 * DsyncEventsHeard
 *		Whether this database's events are to be sent at now: someone
 *		listens in it, or (with the event log on) someone did lately and may
 *		be reconnecting, in which case the log must have what it missed.  A
 *		database nobody watches pays nothing for the log.
 */
static bool
DsyncEventsHeard(DsyncDbSlot *slot, TimestampTz now)
{
	TimestampTz left_at;

	if (!dsync_events)
		return false;
	if (DsyncListenersIn(MyDatabaseId))
		return true;
	/* A leaving listener raises left_at before it clears its mark. */
	pg_read_barrier();
	if (dsync_event_retention <= 0 || slot == NULL ||
		(left_at = (TimestampTz) pg_atomic_read_u64(&slot->watcher_left_at)) == 0)
		return false;
	return now < TimestampTzPlusMilliseconds(left_at, (int64) dsync_event_retention * 1000);
}

/*
 * DsyncEventWatcherLeft
 *		A watcher of database dbid left at left_at: keep its events sent
 *		and logged for dsync.event_retention after that (DsyncEventsHeard).
 */
void
DsyncEventWatcherLeft(Oid dbid, TimestampTz left_at)
{
	DsyncDbSlot *slot = DsyncDbSlotFind(dbid);
	uint64		current;

	if (slot == NULL)
		return;
	current = pg_atomic_read_u64(&slot->watcher_left_at);
	while ((TimestampTz) current < left_at &&
		   !pg_atomic_compare_exchange_u64(&slot->watcher_left_at, &current, (uint64) left_at))
		;
}

/*
 * EventUnheard
 *		What the worker still needs of an event nobody listens to, as a
 *		kind that is not announced: the deadline of a grant or a join, or
 *		the release after which an unused row may go (IDLE).
 *		DSYNC_EVENT_NONE if nothing: then it is not queued at all.
 *
 * So an event is sent exactly when someone listened as it was queued:
 * every change committed after a LISTEN committed, and nothing from
 * before one (which would reach a new listener late and out of date).
 */
static DsyncEventKind
EventUnheard(DsyncEventKind kind)
{
	switch (kind)
	{
		case DSYNC_EVENT_ACQUIRED:
			return DSYNC_EVENT_DEADLINE;
		case DSYNC_EVENT_PERMIT_ACQUIRED:
			return DSYNC_EVENT_PERMIT_DEADLINE;
		case DSYNC_EVENT_JOINED:
			return DSYNC_EVENT_MEMBER_DEADLINE;
		case DSYNC_EVENT_RELEASED:
			return DSYNC_EVENT_IDLE;
		case DSYNC_EVENT_PERMIT_RELEASED:
			return DSYNC_EVENT_PERMIT_IDLE;
		case DSYNC_EVENT_EXPIRED:
		case DSYNC_EVENT_LEFT:
		case DSYNC_EVENT_MEMBER_EXPIRED:
		case DSYNC_EVENT_SET:
			return DSYNC_EVENT_NONE;
		default:
			return kind;
	}
}

/*
 * EventDeadline
 *		When the worker must look at what an event is about (0: never):
 *		a lease's, permit's or membership's expiry, or when a released
 *		row has been unused long enough to remove.  An ephemeral lease's
 *		deadline goes through the slot instead (EventEphemeralDeadline).
 */
static TimestampTz
EventDeadline(const DsyncEvent *event)
{
	if (event->slot < 0)
		return 0;
	if (DsyncEventHasDeadline(event->kind))
		return event->expires_at;
	if (DsyncEventIsRelease(event->kind) && dsync_idle_row_retention >= 0)
		return TimestampTzPlusMilliseconds(event->expires_at,
										   (int64) dsync_idle_row_retention * 1000);
	return 0;
}

/*
 * DsyncEventPublish
 *		Queue the committed transaction's events and see that a worker
 *		comes for them.
 *
 * Runs in the commit callback, where an error would be a PANIC: nothing
 * here can fail.  The database's slot was made before commit
 * (DsyncEventMakeRoom); if there was none to have, the backend has
 * already been warned and the events are dropped.  A running worker is
 * woken when there is something to announce or an earlier deadline; with
 * no worker, the launcher is asked for one (DsyncDbSlotWant) or, for a
 * deadline only, told the earlier time it must start one.  count: add the
 * events to the database's counters.  heard_known: the caller has found a
 * listener already (and passes only events to send).
 */
static void
DsyncEventPublish(List *events, int64 renewals, bool count, bool heard_known)
{
	DsyncDbSlot *slot = DsyncDbSlotFind(MyDatabaseId);
	DsyncEventLane *lane;
	ListCell   *lc;
	bool		wake = false;
	bool		earlier = false;
	bool		heard;
	int			procno;
	uint64		dropped = 0;
	uint64		dropped_announced = 0;
	Size		pool_bytes = (Size) dsync_workers->pool_size * DSYNC_CHUNK_DATA;

	if (slot == NULL)
		return;

	/*
	 * Whether anybody hears: read after the commit (the barrier orders the
	 * read after it), and a LISTEN sets its mark before it can commit, so
	 * an event committed after a LISTEN committed is heard (listen.c).  In
	 * the commit callback: the commit's own time, no clock read.  What is
	 * heard goes to lane 0, in order; the rest to this backend's lane,
	 * unless the pool runs low: a lane holds a chunk of its own while it
	 * has events, so lanes multiply what waiting databases hold.
	 */
	pg_memory_barrier();
	heard = heard_known || DsyncEventsHeard(slot, GetCurrentTransactionStopTimestamp());
	lane = &slot->lanes[heard || DsyncQueueFreeChunks() < dsync_workers->pool_size / 2 ? 0 :
						DsyncProcNumber(MyProc) % DSYNC_EVENT_LANES];
	LWLockAcquire(lane->lock, LW_EXCLUSIVE);
	if (slot->dbid != MyDatabaseId || slot->state != DSYNC_DB_ACTIVE)
	{
		/*
		 * The slot went to another database meanwhile, or nobody serves
		 * this one (a template, or DROP EXTENSION committed): queued
		 * events would hold pool space that no worker frees.
		 */
		LWLockRelease(lane->lock);
		return;
	}
	foreach(lc, events)
	{
		DsyncPendingEvent *pe = lfirst(lc);
		DsyncEvent	event = pe->event;
		TimestampTz deadline;

		/* Nobody hears it, nor will: queue only what the worker itself needs. */
		if (!heard)
			event.kind = EventUnheard(event.kind);
		if (event.kind == DSYNC_EVENT_NONE)
			continue;
		/* Only lane 0 keeps announced events in order. */
		Assert(heard || !DsyncEventIsAnnounced(event.kind));
		if (!DsyncQueueAppend(lane, &event))
		{
			dropped++;
			if (DsyncEventIsAnnounced(event.kind))
				dropped_announced++;
			continue;
		}
		deadline = EventDeadline(&event);
		if (deadline != 0 && DsyncDeadlineLower(slot, deadline))
			earlier = true;
		if (DsyncEventIsAnnounced(event.kind))
			wake = true;
	}
	lane->dropped += dropped;
	lane->dropped_announced += dropped_announced;
	if (lane->bytes > pool_bytes / (4 * DSYNC_EVENT_LANES) || dropped > 0)
		wake = true;
	LWLockRelease(lane->lock);
	if (count)
	{
		int64		counts[3] = {0, 0, 0};

		foreach(lc, events)
			EventCountKind(((DsyncPendingEvent *) lfirst(lc))->event.kind, counts);
		EventCountAdd(slot, counts, renewals);
	}

	/* After queueing: a worker that leaves now sees the events (ReaperExit). */
	procno = slot->pgprocno;
	if (procno >= 0)
	{
		if (wake || earlier)
			SetLatch(&ProcGlobal->allProcs[procno].procLatch);
	}
	else if (wake)
		DsyncDbSlotWant(slot);
	else if (earlier)
		DsyncLauncherWake();
}

/*
 * DsyncEventWarnUnserved
 *		Tell the client, before its transaction commits, that its changes
 *		will not be announced (nor expiries cleared) because dsync cannot
 *		serve this database, and what to change.
 */
static void
DsyncEventWarnUnserved(DsyncDbSlot *slot)
{
	if (slot == NULL)
		DsyncDbSlotWarnFull(true);
	else if (slot->start_warned && slot->pid <= 0)
		ereport(WARNING,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("dsync could not start a worker for database \"%s\"",
						get_database_name(MyDatabaseId)),
				 errdetail("All background worker slots are in use: lease changes are "
						   "announced, and expired leases cleared, only once one is free."),
				 errhint("Raise max_worker_processes: dsync needs dsync.max_workers (%d) of "
						 "them, besides parallel query and other extensions.",
						 dsync_max_workers)));
}

/*
 * DsyncEventMakeRoom
 *		Before committing: make sure the database has a slot (warning the
 *		client if it cannot), then give the workers up to a second to make
 *		room in the shared event pool for this transaction's events.
 *
 * The commit callback can neither fail nor wait, so it drops what does not
 * fit; this makes that happen only when the workers have stopped keeping
 * up for a whole second, not on every burst.  It is the one place where
 * dsync looks at something repeatedly (every millisecond, and only while
 * the pool is full).  A transaction with more events than half the pool
 * holds does not wait.
 */
static void
DsyncEventMakeRoom(void)
{
	DsyncDbSlot *slot = DsyncDbSlotFind(MyDatabaseId);
	Size		pool_bytes = (Size) dsync_workers->pool_size * DSYNC_CHUNK_DATA;
	Size		needed = 0;
	ListCell   *lc;

	if (slot == NULL || slot->state != DSYNC_DB_ACTIVE)
	{
		if (DsyncDbIsTemplate(MyDatabaseId))
		{
			ereport(WARNING,
					(errmsg("dsync does not serve template database \"%s\"",
							get_database_name(MyDatabaseId)),
					 errdetail("Lease changes here are committed but not announced, and "
							   "expired leases here are not cleared."),
					 errhint("Use dsync in the databases created from this template.")));
			return;
		}
		slot = DsyncDbSlotClaim(MyDatabaseId, true);
	}
	DsyncEventWarnUnserved(slot);

	/* A worker would only be waiting for itself. */
	if (slot == NULL || slot->pid == MyProcPid)
		return;
	foreach(lc, pending_events)
		needed += DsyncQueueEntrySize(&((DsyncPendingEvent *) lfirst(lc))->event);
	if (needed > pool_bytes / 2)
		return;

	for (int waited = 0; waited < 1000; waited++)
	{
		/* Twice what we need: the end of a chunk may be left unused. */
		if ((Size) DsyncQueueFreeChunks() * DSYNC_CHUNK_DATA >= 2 * needed + DSYNC_CHUNK_DATA)
			return;
		DsyncDbSlotWant(slot);
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 1, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

/*
 * DsyncEventPrepareNow
 *		Before DsyncEventPublishNow: make sure the database has a slot,
 *		warning the client if it cannot have one (as at commit).
 */
void
DsyncEventPrepareNow(void)
{
	DsyncDbSlot *slot = DsyncDbSlotFind(MyDatabaseId);

	if (slot != NULL && slot->state == DSYNC_DB_ACTIVE)
		return;
	if (DsyncDbIsTemplate(MyDatabaseId))
		return;
	slot = DsyncDbSlotClaim(MyDatabaseId, true);
	DsyncEventWarnUnserved(slot);
}

/*
 * EventEphemeralDeadline
 *		Tell the reaper that an ephemeral lease of the database may be due
 *		at deadline, and wake it (or the launcher) if that is earlier than
 *		what it sleeps until.
 *
 * Runs under the lease's partition lock.  The reaper's pass
 * (DsyncEphemeralReap) clears the value, then visits the partitions one
 * lock at a time and lowers it to the earliest expiry it saw: a deadline
 * lowered here in a partition it has visited stays, and one in a partition
 * it has yet to visit is in the heap it will look at, so none is lost.
 * When we lower it, the compare-and-swap is a
 * full barrier before next_deadline is read; the reaper writes
 * next_deadline, then reads this value again (reaper.c): one of the two
 * sees the other's write.  When it is already lower, whoever lowered it
 * did the same, or the reaper set it under the lock we hold.
 */
static void
EventEphemeralDeadline(DsyncDbSlot *slot, TimestampTz deadline)
{
	TimestampTz due;
	int			procno;

	(void) DsyncTimeLower(&slot->ephemeral_deadline, deadline, &due);
	/* Whichever is earlier, ours or one already there, must be known. */
	if (!DsyncDeadlineLower(slot, due))
		return;
	procno = slot->pgprocno;
	if (procno >= 0)
		SetLatch(&ProcGlobal->allProcs[procno].procLatch);
	else
		DsyncLauncherWake();
}

/*
 * DsyncEventPublishNow
 *		Announce the events of a change that took effect outside any
 *		transaction (an ephemeral lease), and count it with renewals
 *		renewals.  It runs under the lease's partition lock, after the
 *		change: nothing here may fail but the small list of events to send
 *		(out of memory, which releases the lock with the error).
 *
 * Deadlines reach the reaper through the slot, not the queue, so with
 * nobody listening (listen.c) an ephemeral change never takes the queue
 * lock: only the events to be sent are queued.
 */
void
DsyncEventPublishNow(const DsyncEvent *events, int nevents, int64 renewals)
{
	DsyncDbSlot *slot = DsyncDbSlotFind(MyDatabaseId);
	DsyncPendingEvent pending[4];
	List	   *list = NIL;
	int64		counts[3] = {0, 0, 0};
	bool		heard;

	Assert(nevents <= (int) lengthof(pending));
	if (slot == NULL)
		return;
	heard = nevents > 0 && DsyncEventsHeard(slot, GetCurrentTimestamp());
	for (int i = 0; i < nevents; i++)
	{
		EventCountKind(events[i].kind, counts);
		if (DsyncEventHasDeadline(events[i].kind))
			EventEphemeralDeadline(slot, events[i].expires_at);
		if (heard && DsyncEventIsAnnounced(events[i].kind))
		{
			pending[i].nest_level = 0;
			pending[i].event = events[i];
			list = lappend(list, &pending[i]);
		}
	}
	EventCountAdd(slot, counts, renewals);
	if (list != NIL)
		DsyncEventPublish(list, 0, false, true);
	list_free(list);
}

/*
 * DsyncEventXactCallback
 *		Make room before commit, publish at commit, forget at abort.
 */
static void
DsyncEventXactCallback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
			if (pending_events != NIL)
				DsyncEventMakeRoom();
			break;
		case XACT_EVENT_COMMIT:
			if (pending_events != NIL || pending_renewals > 0)
				DsyncEventPublish(pending_events, pending_renewals, true, false);
			pending_events = NIL;
			pending_renewals = 0;
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PREPARE:
			pending_events = NIL;
			pending_renewals = 0;
			break;
		default:
			break;
	}
}
