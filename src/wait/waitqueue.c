/*-------------------------------------------------------------------------
 *
 * waitqueue.c
 *		The queue of waiters in shared memory, sleeping, and the rows of
 *		dsync_waiters.
 *
 * One waiter slot per PGPROC; a waiter's ticket, taken when it joins,
 * orders the queue of its name (wait.c's header says why and how the loop
 * uses it).  A sleeping backend also watches its client's socket, so that a
 * dead waiter never reaches the front of the queue.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "common/hashfn.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "port/pg_bitutils.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/tuplestore.h"

#include "wait.h"
#include "wait_int.h"
#include "queued.h"
#include "stats.h"
#include "dbslot.h"
#include "shmem.h"
#include "compat.h"
#include "libpq_compat.h"

PG_FUNCTION_INFO_V1(dsync_waiter_rows);

/*
 * What a blocked caller sleeps on: its latch, postmaster death and its
 * client's socket closing.  Made once and kept, because WaitLatchOrSocket
 * builds and closes an epoll set at every call, which is a fair share of
 * a hand-off in a busy queue.
 */
static WaitEventSet *sleep_set = NULL;

static bool exit_callback_registered = false;

/*
 * DsyncWaitGeneration
 *		How many broadcasts key's channel has had; read before a try.
 */
uint64
DsyncWaitGeneration(uint64 key)
{
	return pg_atomic_read_u64(&dsync_shared->wakes[key % DSYNC_WAKE_CHANNELS]);
}

/*
 * DsyncWaitMySlot
 *		This backend's waiter slot.
 */
DsyncWaiterSlot *
DsyncWaitMySlot(void)
{
	return &dsync_shared->slots[DsyncProcNumber(MyProc)];
}

/*
 * DsyncWaitMayTake
 *		Whether this backend may take what it wants now, as far as the
 *		queue goes: nobody who joined earlier is waiting for it (a waiter
 *		stepped aside, DsyncWaitStepAside, is not).
 */
bool
DsyncWaitMayTake(uint64 key, Oid roleid)
{
	DsyncWaiterSlot *me = DsyncWaitMySlot();
	uint64		my_ticket;
	bool		ahead = false;

	if (pg_atomic_read_u32(&dsync_shared->waiting[key % DSYNC_WAKE_CHANNELS]) == 0 &&
		!DsyncQueuedAny(key))
		return true;

	LWLockAcquire(dsync_shared->lock, LW_SHARED);
	my_ticket = me->in_use ? me->ticket : PG_UINT64_MAX;
	for (int i = 0; i < dsync_shared->nslots && !ahead; i++)
	{
		DsyncWaiterSlot *slot = &dsync_shared->slots[i];

		ahead = slot->in_use && !slot->aside && slot->key == key &&
			slot->dbid == MyDatabaseId && slot->roleid == roleid && slot->ticket < my_ticket;
	}
	LWLockRelease(dsync_shared->lock);
	/* Signals (a role's queue) have no queued waiters. */
	if (!ahead && roleid == InvalidOid && DsyncQueuedAny(key))
		ahead = DsyncQueuedFirstTicket(key) < my_ticket;
	return !ahead;
}

/*
 * DsyncWaitEvict
 *		End the queued waits for a lease of the role that owned a holder
 *		dsync_force_release just released (with cancel_waits): they fail
 *		at their next wake-up, so whoever an administrator took the lease
 *		from cannot take it straight back through a wait it had queued,
 *		under whatever holder name.
 */
void
DsyncWaitEvict(uint64 key, Oid owner)
{
	LWLockAcquire(dsync_shared->lock, LW_EXCLUSIVE);
	for (int i = 0; i < dsync_shared->nslots; i++)
	{
		DsyncWaiterSlot *slot = &dsync_shared->slots[i];

		if (slot->in_use && slot->key == key && slot->dbid == MyDatabaseId &&
			slot->roleid == InvalidOid && slot->userid == owner)
		{
			slot->evicted = true;
			SetLatch(&ProcGlobal->allProcs[i].procLatch);
		}
	}
	LWLockRelease(dsync_shared->lock);
	DsyncQueuedEvict(key, owner);
}

/*
 * DsyncWaitExit
 *		Leave the queue when the backend exits in the middle of a wait
 *		(pg_terminate_backend, client gone, shutdown): FATAL does not
 *		unwind PG_TRY.
 */
static void
DsyncWaitExit(int code, Datum arg)
{
	if (dsync_shared != NULL && MyProc != NULL && DsyncWaitMySlot()->in_use)
		DsyncWaitDequeue(true);
}

/*
 * DsyncWaitEnqueue
 *		Join the queue for a name, behind everybody already in it.
 */
void
DsyncWaitEnqueue(const DsyncWaitSpec *spec)
{
	DsyncWaiterSlot *me = DsyncWaitMySlot();

	if (!exit_callback_registered)
	{
		before_shmem_exit(DsyncWaitExit, (Datum) 0);
		exit_callback_registered = true;
	}

	LWLockAcquire(dsync_shared->lock, LW_EXCLUSIVE);
	Assert(!me->in_use);		/* a wait is never nested */
	me->pid = MyProcPid;
	me->dbid = MyDatabaseId;
	me->roleid = spec->roleid;
	me->userid = GetUserId();
	me->key = spec->key;
	me->evicted = false;
	me->aside = false;
	me->ticket = pg_atomic_fetch_add_u64(&dsync_shared->next_ticket, 1);
	me->since = GetCurrentTimestamp();
	strlcpy(me->kind, spec->kind, sizeof(me->kind));
	text_to_cstring_buffer(spec->name, me->name, sizeof(me->name));
	text_to_cstring_buffer(spec->holder, me->holder, sizeof(me->holder));
	me->in_use = true;
	pg_atomic_fetch_add_u32(&dsync_shared->waiting[spec->key % DSYNC_WAKE_CHANNELS], 1);
	LWLockRelease(dsync_shared->lock);
	DsyncStatAdd(DSYNC_STAT_WAITS, 1);
}

/*
 * DsyncWaitDequeue
 *		Leave the queue, and unless told otherwise wake the others on the
 *		channel: whoever is next in line must look again now.
 */
void
DsyncWaitDequeue(bool wake)
{
	DsyncWaiterSlot *me = DsyncWaitMySlot();
	uint64		key;
	TimestampTz since;

	LWLockAcquire(dsync_shared->lock, LW_EXCLUSIVE);
	key = me->key;
	since = me->since;
	if (me->in_use)
	{
		me->in_use = false;
		pg_atomic_fetch_sub_u32(&dsync_shared->waiting[key % DSYNC_WAKE_CHANNELS], 1);
	}
	LWLockRelease(dsync_shared->lock);
	if (wake)
		DsyncWakeChannel(key % DSYNC_WAKE_CHANNELS);
	DsyncStatAdd(DSYNC_STAT_WAIT_TIME, GetCurrentTimestamp() - since);
}

/*
 * DsyncWaitClientGone
 *		End the backend because its client has gone: the same FATAL that
 *		client_connection_check_interval gives.  The transaction is rolled
 *		back, so a grant made in it never takes effect.
 */
void
DsyncWaitClientGone(void)
{
	ClientConnectionLost = 1;
	InterruptPending = 1;
	CHECK_FOR_INTERRUPTS();
}

/*
 * DsyncWaitMakeSleepSet
 *		The wait event set a blocked caller sleeps on (sleep_set).
 */
static WaitEventSet *
DsyncWaitMakeSleepSet(void)
{
	WaitEventSet *set = DsyncCreateWaitEventSet(3);

	/* A set left half made would keep its epoll descriptor for good. */
	PG_TRY();
	{
		AddWaitEventToSet(set, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
		/* As WaitLatch: single-user mode has no postmaster to watch. */
		if (IsUnderPostmaster)
			AddWaitEventToSet(set, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET,
							  NULL, NULL);
		if (MyProcPort != NULL && WaitEventSetCanReportClosed())
			AddWaitEventToSet(set, WL_SOCKET_CLOSED, MyProcPort->sock, NULL, NULL);
	}
	PG_CATCH();
	{
		FreeWaitEventSet(set);
		PG_RE_THROW();
	}
	PG_END_TRY();
	return set;
}

/*
 * DsyncWaitSleep
 *		Sleep on key's channel until woken or until wake_at (0: no limit),
 *		whichever comes first, but never longer than DSYNC_WAIT_CAP_MS.
 *		Returns at once if the channel was woken since generation was read;
 *		returns true if it slept until its timeout.  Ends the backend if
 *		the client's socket closes meanwhile.  Cancellation and
 *		statement_timeout raise their errors from here.
 */
bool
DsyncWaitSleep(uint64 key, TimestampTz wake_at, uint64 generation)
{
	long		ms = DSYNC_WAIT_CAP_MS;
	WaitEvent	event;
	int			rc;

	if (wake_at != 0)
	{
		/* Round up, so that the retry comes at or after the instant. */
		int64		until = wake_at - GetCurrentTimestamp();

		ms = Max(Min((until + 999) / 1000, (int64) DSYNC_WAIT_CAP_MS), 1);
	}

	/* Publish when we wake by ourselves before the last look at the count. */
	pg_atomic_write_u64(&DsyncWaitMySlot()->sleep_until,
						(uint64) (GetCurrentTimestamp() + ms * 1000));
	pg_memory_barrier();
	if (DsyncWaitGeneration(key) != generation)
	{
		pg_atomic_write_u64(&DsyncWaitMySlot()->sleep_until, 0);
		return false;
	}
	if (sleep_set == NULL)
		sleep_set = DsyncWaitMakeSleepSet();
	rc = WaitEventSetWait(sleep_set, ms, &event, 1, PG_WAIT_EXTENSION);
	pg_atomic_write_u64(&DsyncWaitMySlot()->sleep_until, 0);
	if (rc > 0 && (event.events & WL_SOCKET_CLOSED))
		DsyncWaitClientGone();
	ResetLatch(MyLatch);
	CHECK_FOR_INTERRUPTS();
	return rc == 0;				/* no event: the time ran out */
}

/*
 * DsyncWaiterOrder
 *		qsort comparator: queue order (ticket).
 */
static int
DsyncWaiterOrder(const void *a, const void *b)
{
	uint64		ta = ((const DsyncWaiterSlot *) a)->ticket;
	uint64		tb = ((const DsyncWaiterSlot *) b)->ticket;

	return (ta > tb) - (ta < tb);
}

/*
 * DsyncQueuedOrder
 *		qsort comparator: queue order (ticket) of queued waiters.
 */
static int
DsyncQueuedOrder(const void *a, const void *b)
{
	uint64		ta = ((const DsyncQueuedWaiter *) a)->ticket;
	uint64		tb = ((const DsyncQueuedWaiter *) b)->ticket;

	return (ta > tb) - (ta < tb);
}

/*
 * dsync_waiter_rows
 *		SQL: dsync_waiter_rows() RETURNS TABLE(pid, kind, name, holder,
 *		since): who is blocked in a dsync wait in this database now, in
 *		queue order, with the waiters queued without a connection (no pid,
 *		kind 'queued').  The slots are copied under the lock and formatted
 *		after it is released.
 */
Datum
dsync_waiter_rows(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	DsyncWaiterSlot *copy;
	DsyncQueuedWaiter *queued;
	int			nqueued;
	int			n = 0;
	int			q = 0;

	InitMaterializedSRF(fcinfo, 0);

	copy = palloc(sizeof(DsyncWaiterSlot) * dsync_shared->nslots);
	LWLockAcquire(dsync_shared->lock, LW_SHARED);
	for (int i = 0; i < dsync_shared->nslots; i++)
	{
		DsyncWaiterSlot *slot = &dsync_shared->slots[i];

		if (slot->in_use && slot->dbid == MyDatabaseId)
			copy[n++] = *slot;
	}
	LWLockRelease(dsync_shared->lock);
	nqueued = DsyncQueuedCopyAll(&queued);

	/* Both kinds in one line, by ticket; queued ones have no pid. */
	qsort(copy, n, sizeof(DsyncWaiterSlot), DsyncWaiterOrder);
	qsort(queued, nqueued, sizeof(DsyncQueuedWaiter), DsyncQueuedOrder);
	for (int i = 0; i < n || q < nqueued;)
	{
		Datum		values[5];
		bool		nulls[5] = {false, false, false, false, false};

		/*
		 * Granted: not waiting any more.  One being granted by a transaction
		 * still in progress is (a try that fails, or a rollback, puts it
		 * back; it used to vanish from the view for the try's length).
		 */
		if (q < nqueued && queued[q].state != DSYNC_QUEUED_WAITING &&
			queued[q].state != DSYNC_QUEUED_GRANTING)
		{
			q++;
			continue;
		}
		if (i < n && (q == nqueued || copy[i].ticket < queued[q].ticket))
		{
			values[0] = Int32GetDatum(copy[i].pid);
			values[1] = CStringGetTextDatum(copy[i].kind);
			values[2] = CStringGetTextDatum(copy[i].name);
			values[3] = CStringGetTextDatum(copy[i].holder);
			values[4] = TimestampTzGetDatum(copy[i].since);
			i++;
		}
		else
		{
			nulls[0] = true;
			values[1] = CStringGetTextDatum("queued");
			values[2] = CStringGetTextDatum(queued[q].name);
			values[3] = CStringGetTextDatum(queued[q].holder);
			values[4] = TimestampTzGetDatum(queued[q].since);
			q++;
		}
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}

	return (Datum) 0;
}
