/*-------------------------------------------------------------------------
 *
 * wait.c
 *		Waiting for a lease without polling, and waking waiters after
 *		commit.
 *
 * Sleeping.  A blocked acquirer sleeps on its own latch.  Names hash onto
 * DSYNC_WAKE_CHANNELS channels, and every wake-up of a channel first bumps
 * the channel's wake count; a waiter reads the count before its try and
 * does not go to sleep if it has moved since, so no wake-up is lost
 * between a failed try and the sleep (each try runs in a subtransaction,
 * so the usual "prepare to sleep, then check" of condition variables does
 * not fit).  The first waiter in line also sets its timeout to the
 * current holder's expiry, so it wakes at that instant without help from
 * anybody else, and nobody sleeps longer than DSYNC_WAIT_CAP_MS in one go
 * (a safety net for a wall clock that jumps and for changes made behind
 * dsync's back).
 *
 * Order.  Waiters queue in shared memory with a ticket taken when they
 * start waiting.  Only the waiter with the lowest ticket for a name may
 * take it; anybody else who is not in the queue, including a wait = 0
 * caller, is refused while the queue is not empty, as PostgreSQL's lock
 * manager refuses a lock that a queued waiter asked for first.  So waiters
 * are served in the order they started waiting and nobody starves.
 *
 * Waking.  Every row lock or insert lock dsync takes on a lease (store.c)
 * notes the lease's channel in backend memory, because whoever meets that
 * lock must look again once it is gone; the channels are woken when the
 * transaction ends, once its outcome is visible and its locks are
 * released (the AFTER_LOCKS phase of releasing the top-level resource
 * owner), never before.  A commit may have freed the lease or changed its
 * expiry; a rollback undoes a grant, renewal or guard, while a rolled-back
 * release grants nothing and its waiters only look again.  A rolled-back
 * savepoint wakes them once its own locks are gone.  Waking a channel
 * sets the latch of the first waiter in line for each name on it, who
 * passes the turn on when it leaves the queue; it needs no catalog access
 * and cannot fail, which is what code running after commit requires.
 *
 * PREPARE TRANSACTION never runs those callbacks at COMMIT PREPARED, so a
 * transaction that changed a lease cannot be prepared.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "common/hashfn.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/latch.h"
#include "pgstat.h"
#include "port/pg_bitutils.h"
#include "storage/ipc.h"
#include "storage/proc.h"
#include "utils/builtins.h"
#include "utils/resowner.h"
#include "utils/tuplestore.h"

#include "dsync.h"

PG_FUNCTION_INFO_V1(dsync_waiter_rows);

#define WAKE_WORDS (DSYNC_WAKE_CHANNELS / 64)

/* Channels to broadcast when the current transaction ends. */
static uint64 wake_at_end[WAKE_WORDS];
static bool wake_pending = false;

/* A savepoint is being rolled back: broadcast once its locks are gone. */
static bool wake_after_subabort = false;

/* Set while a blocked acquirer's internal subtransaction runs. */
static bool in_internal_attempt = false;

/* The current try noted a wake-up (it locked a row). */
static bool attempt_noted = false;

static bool callbacks_registered = false;
static bool exit_callback_registered = false;

static void DsyncWaitXactCallback(XactEvent event, void *arg);
static void DsyncWaitSubXactCallback(SubXactEvent event, SubTransactionId mySubid,
									 SubTransactionId parentSubid, void *arg);
static void DsyncWaitReleaseCallback(ResourceReleasePhase phase, bool isCommit,
									 bool isTopLevel, void *arg);

/*
 * DsyncWaitKey
 *		The wait key of a lease name in this database.
 */
uint64
DsyncWaitKey(text *name)
{
	return hash_bytes_extended((const unsigned char *) VARDATA_ANY(name),
							   VARSIZE_ANY_EXHDR(name), (uint64) MyDatabaseId);
}

/*
 * DsyncWaitKeyEvent
 *		The wait key of an event name: not the same as a lease of that name,
 *		so that the two queues never mix.
 */
uint64
DsyncWaitKeyEvent(text *name)
{
	return hash_bytes_extended((const unsigned char *) VARDATA_ANY(name),
							   VARSIZE_ANY_EXHDR(name),
							   (uint64) MyDatabaseId ^ UINT64CONST(0x6576656e74000000));
}

/*
 * DsyncWaitRegisterCallbacks
 *		Hook transaction end in this backend, once.
 */
static void
DsyncWaitRegisterCallbacks(void)
{
	if (callbacks_registered)
		return;
	RegisterXactCallback(DsyncWaitXactCallback, NULL);
	RegisterSubXactCallback(DsyncWaitSubXactCallback, NULL);
	RegisterResourceReleaseCallback(DsyncWaitReleaseCallback, NULL);
	callbacks_registered = true;
}

/*
 * DsyncWakeAtEnd
 *		Note that waiters on key must be woken when this transaction ends,
 *		committed or not: it holds a lock on that lease until then.
 */
void
DsyncWakeAtEnd(uint64 key)
{
	int			channel = key % DSYNC_WAKE_CHANNELS;

	DsyncWaitRegisterCallbacks();
	if (in_internal_attempt)
		attempt_noted = true;
	wake_at_end[channel / 64] |= UINT64CONST(1) << (channel % 64);
	wake_pending = true;
}

/*
 * DsyncWakeChannel
 *		Wake the first waiter in line for each name on one channel.
 *
 * Only the first in line may take what it waits for (DsyncWaitMayTake), so
 * waking the others would only make them look and sleep again: with many
 * waiters on one lease, a broadcast costs a wake-up per waiter per hand-off.
 * The one woken passes the turn on when it leaves the queue.  The channel's
 * wake count goes up first, so that a waiter between its try and its sleep
 * notices (DsyncWaitSleep).
 */
static void
DsyncWakeChannel(int channel)
{
	uint64		keys[DSYNC_WAKE_MAX_KEYS];
	uint64		tickets[DSYNC_WAKE_MAX_KEYS];
	int			procnos[DSYNC_WAKE_MAX_KEYS];
	int			nkeys = 0;
	bool		overflow = false;

	pg_atomic_fetch_add_u64(&dsync_shared->wakes[channel], 1);
	if (pg_atomic_read_u32(&dsync_shared->waiting[channel]) == 0)
		return;

	LWLockAcquire(dsync_shared->lock, LW_SHARED);
	for (int i = 0; i < dsync_shared->nslots; i++)
	{
		DsyncWaiterSlot *slot = &dsync_shared->slots[i];
		int			k;

		if (!slot->in_use || slot->key % DSYNC_WAKE_CHANNELS != (uint64) channel)
			continue;
		for (k = 0; k < nkeys; k++)
			if (keys[k] == slot->key && slot->dbid == dsync_shared->slots[procnos[k]].dbid)
				break;
		if (k == nkeys)
		{
			if (nkeys == DSYNC_WAKE_MAX_KEYS)
			{
				overflow = true;
				break;
			}
			keys[nkeys] = slot->key;
			tickets[nkeys] = slot->ticket;
			procnos[nkeys++] = i;
		}
		else if (slot->ticket < tickets[k])
		{
			tickets[k] = slot->ticket;
			procnos[k] = i;
		}
	}
	if (overflow)
	{
		/* Too many names share the channel: wake everybody on it. */
		for (int i = 0; i < dsync_shared->nslots; i++)
			if (dsync_shared->slots[i].in_use &&
				dsync_shared->slots[i].key % DSYNC_WAKE_CHANNELS == (uint64) channel)
				SetLatch(&ProcGlobal->allProcs[i].procLatch);
		nkeys = 0;
	}
	LWLockRelease(dsync_shared->lock);

	/* Waiter slots are indexed by pgprocno. */
	for (int k = 0; k < nkeys; k++)
		SetLatch(&ProcGlobal->allProcs[procnos[k]].procLatch);
}

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
 * DsyncWakeBroadcast
 *		Wake every sleeper on the channels set in bits.
 */
static void
DsyncWakeBroadcast(const uint64 *bits)
{
	for (int word = 0; word < WAKE_WORDS; word++)
	{
		uint64		w = bits[word];

		while (w != 0)
		{
			int			bit = pg_rightmost_one_pos64(w);

			DsyncWakeChannel(word * 64 + bit);
			w &= w - 1;
		}
	}
}

/*
 * DsyncWaitReleaseCallback
 *		Broadcast the noted channels once the top-level transaction's
 *		outcome is visible and its locks (row locks and the insert lock)
 *		are released.
 */
static void
DsyncWaitReleaseCallback(ResourceReleasePhase phase, bool isCommit,
						 bool isTopLevel, void *arg)
{
	if (phase != RESOURCE_RELEASE_AFTER_LOCKS || !wake_pending)
		return;
	if (!isTopLevel)
	{
		/* The rolled-back savepoint's locks (insert lock too) are gone. */
		if (wake_after_subabort)
		{
			wake_after_subabort = false;
			DsyncWakeBroadcast(wake_at_end);
		}
		return;
	}
	DsyncWakeBroadcast(wake_at_end);
	memset(wake_at_end, 0, sizeof(wake_at_end));
	wake_pending = false;
	wake_after_subabort = false;
}

/*
 * DsyncWaitSubXactCallback
 *		A rolled-back savepoint may have undone a grant, or dropped a lock
 *		that others met: wake them so they look again, once its locks
 *		are released (this callback runs before that; the resource release
 *		callback does the broadcast).  The failed attempts of our own
 *		blocked acquirers change nothing and wake nobody (otherwise two
 *		waiters could keep waking each other).
 */
static void
DsyncWaitSubXactCallback(SubXactEvent event, SubTransactionId mySubid,
						 SubTransactionId parentSubid, void *arg)
{
	if (event == SUBXACT_EVENT_ABORT_SUB && wake_pending && !in_internal_attempt)
		wake_after_subabort = true;
}

/*
 * DsyncWaitXactCallback
 *		Refuse PREPARE TRANSACTION after a dsync change: COMMIT PREPARED
 *		runs no callbacks, so nobody would be woken.
 */
static void
DsyncWaitXactCallback(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_PRE_PREPARE && wake_pending)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cannot PREPARE a transaction that has changed dsync leases"),
				 errhint("Commit it directly instead.")));
}

/*
 * DsyncWaitAttemptStart
 *		A blocked acquirer's try begins, in its own subtransaction.
 */
void
DsyncWaitAttemptStart(void)
{
	in_internal_attempt = true;
	attempt_noted = false;
}

/*
 * DsyncWaitAttemptEnd
 *		A blocked acquirer's try is over.  If it locked a row without
 *		granting anything (the lease expired under it), that lock went with
 *		the rolled-back subtransaction just now, and whoever it blocked
 *		must look again now, not when our transaction ends.
 */
void
DsyncWaitAttemptEnd(uint64 key, bool granted)
{
	in_internal_attempt = false;
	if (attempt_noted && !granted)
		DsyncWakeChannel(key % DSYNC_WAKE_CHANNELS);
	attempt_noted = false;
}

/*
 * DsyncWaitMySlot
 *		This backend's waiter slot.
 */
static DsyncWaiterSlot *
DsyncWaitMySlot(void)
{
	return &dsync_shared->slots[MyProc->pgprocno];
}

/*
 * DsyncWaitMayTake
 *		Whether this backend may take the lease now, as far as the queue
 *		goes: nobody who started waiting earlier is waiting for it.
 */
bool
DsyncWaitMayTake(uint64 key)
{
	DsyncWaiterSlot *me = DsyncWaitMySlot();
	uint64		my_ticket;
	bool		ahead = false;

	if (pg_atomic_read_u32(&dsync_shared->waiting[key % DSYNC_WAKE_CHANNELS]) == 0)
		return true;

	LWLockAcquire(dsync_shared->lock, LW_SHARED);
	my_ticket = me->in_use ? me->ticket : PG_UINT64_MAX;
	for (int i = 0; i < dsync_shared->nslots && !ahead; i++)
	{
		DsyncWaiterSlot *slot = &dsync_shared->slots[i];

		ahead = slot->in_use && slot->key == key && slot->dbid == MyDatabaseId &&
			slot->ticket < my_ticket;
	}
	LWLockRelease(dsync_shared->lock);
	return !ahead;
}

/*
 * DsyncWaitExit
 *		Leave the queue when the backend exits in the middle of a wait
 *		(pg_terminate_backend, shutdown): FATAL does not unwind PG_TRY.
 */
static void
DsyncWaitExit(int code, Datum arg)
{
	if (dsync_shared != NULL && MyProc != NULL && DsyncWaitMySlot()->in_use)
		DsyncWaitDequeue();
}

/*
 * DsyncWaitEnqueue
 *		Join the queue for a name, behind everybody already in it.
 */
void
DsyncWaitEnqueue(uint64 key, const char *kind, text *name, text *holder)
{
	DsyncWaiterSlot *me = DsyncWaitMySlot();

	if (!exit_callback_registered)
	{
		before_shmem_exit(DsyncWaitExit, (Datum) 0);
		exit_callback_registered = true;
	}

	LWLockAcquire(dsync_shared->lock, LW_EXCLUSIVE);
	if (me->in_use)
	{
		/* A wait is never nested; never count this backend twice. */
		pg_atomic_fetch_sub_u32(&dsync_shared->waiting[me->key % DSYNC_WAKE_CHANNELS], 1);
		me->in_use = false;
	}
	me->pid = MyProcPid;
	me->dbid = MyDatabaseId;
	me->key = key;
	me->ticket = pg_atomic_fetch_add_u64(&dsync_shared->next_ticket, 1);
	me->since = GetCurrentTimestamp();
	strlcpy(me->kind, kind, sizeof(me->kind));
	text_to_cstring_buffer(name, me->name, sizeof(me->name));
	text_to_cstring_buffer(holder, me->holder, sizeof(me->holder));
	me->in_use = true;
	pg_atomic_fetch_add_u32(&dsync_shared->waiting[key % DSYNC_WAKE_CHANNELS], 1);
	LWLockRelease(dsync_shared->lock);
}

/*
 * DsyncWaitDequeue
 *		Leave the queue, and wake the others on the channel: whoever is
 *		next in line must look again now.
 */
void
DsyncWaitDequeue(void)
{
	DsyncWaiterSlot *me = DsyncWaitMySlot();
	uint64		key;

	LWLockAcquire(dsync_shared->lock, LW_EXCLUSIVE);
	key = me->key;
	if (me->in_use)
	{
		me->in_use = false;
		pg_atomic_fetch_sub_u32(&dsync_shared->waiting[key % DSYNC_WAKE_CHANNELS], 1);
	}
	LWLockRelease(dsync_shared->lock);
	DsyncWakeChannel(key % DSYNC_WAKE_CHANNELS);
}

/*
 * DsyncWaitSleep
 *		Sleep on key's channel until woken or until wake_at (0: no limit),
 *		whichever comes first, but never longer than DSYNC_WAIT_CAP_MS.
 *		Returns at once if the channel was woken since generation was read.
 *		Cancellation and statement_timeout raise their errors from here.
 */
void
DsyncWaitSleep(uint64 key, TimestampTz wake_at, uint64 generation)
{
	long		ms = DSYNC_WAIT_CAP_MS;

	if (wake_at != 0)
	{
		/* Round up, so that the retry comes at or after the instant. */
		int64		until = wake_at - GetCurrentTimestamp();

		ms = Max(Min((until + 999) / 1000, (int64) DSYNC_WAIT_CAP_MS), 1);
	}

	if (DsyncWaitGeneration(key) != generation)
		return;
	(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
					 ms, PG_WAIT_EXTENSION);
	ResetLatch(MyLatch);
	CHECK_FOR_INTERRUPTS();
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
 * dsync_waiter_rows
 *		SQL: dsync_waiter_rows() RETURNS TABLE(pid, kind, name, holder,
 *		since): who is blocked in a dsync wait in this database now, in
 *		queue order.  The slots are copied under the lock and formatted
 *		after it is released.
 */
Datum
dsync_waiter_rows(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	DsyncWaiterSlot *copy;
	int			n = 0;

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

	qsort(copy, n, sizeof(DsyncWaiterSlot), DsyncWaiterOrder);
	for (int i = 0; i < n; i++)
	{
		Datum		values[5];
		bool		nulls[5] = {false, false, false, false, false};

		values[0] = Int32GetDatum(copy[i].pid);
		values[1] = CStringGetTextDatum(copy[i].kind);
		values[2] = CStringGetTextDatum(copy[i].name);
		values[3] = CStringGetTextDatum(copy[i].holder);
		values[4] = TimestampTzGetDatum(copy[i].since);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}

	return (Datum) 0;
}
