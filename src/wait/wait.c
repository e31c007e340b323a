/*-------------------------------------------------------------------------
 *
 * wait.c
 *		Waiting without polling, and waking waiters after commit.
 *
 * Every blocking dsync call runs the loop here (DsyncWaitFor): try in an
 * internal subtransaction, get in line, sleep, try again; and every change
 * of a name wakes its waiters once the transaction's locks are gone.  The
 * queue and the sleep are in waitqueue.c.  Why it is built so (FIFO order,
 * no lost wake-up, one wake-up per turn, no PREPARE TRANSACTION), the state
 * it keeps, its lock and the tests that prove it: README.md in this folder.
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
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/timeout.h"
#include "utils/tuplestore.h"

#include "wait.h"
#include "wait_int.h"
#include "queued.h"
#include "xactcb.h"
#include "stats.h"
#include "dbslot.h"
#include "shmem.h"
#include "compat.h"
#include "libpq_compat.h"

/* Set by _PG_init: what else forgets a database whose extension went. */
DsyncDatabaseGoneHook dsync_database_gone_hook = NULL;

#define WAKE_WORDS (DSYNC_WAKE_CHANNELS / 64)

/* Channels to broadcast when the current transaction ends. */
static uint64 wake_at_end[WAKE_WORDS];
static bool wake_pending = false;

/* Wake every waiter of the database at commit (DROP EXTENSION). */
static bool wake_database_at_commit = false;

/* A savepoint is being rolled back: broadcast once its locks are gone. */
static bool wake_after_subabort = false;

/* Set while a blocked caller's internal subtransaction runs. */
static bool in_internal_attempt = false;

/* Set while a failed try's channels are woken: they poke no worker. */
static bool waking_failed_try = false;

/*
 * How long the try under way may wait for another transaction's lock
 * (DsyncWaitAttemptMayWait): until attempt_deadline (0: no limit), unless
 * attempt_may_wait is false (a try that must not wait: wait = 0).  While
 * attempt_lock_timeout is set, the try waits with a lock_timeout of its
 * own, and that timeout ends the try, not the call.
 */
static bool attempt_may_wait = false;
static TimestampTz attempt_deadline = 0;
static bool attempt_lock_timeout = false;

/* This backend's waiter slot is stepped aside (DsyncWaitStepAside). */
static bool stepped_aside = false;

/*
 * The channels the current try noted wake-ups on (it locked rows there): if
 * it fails, whoever those locks blocked must look again at once.
 */
static bool attempt_noted = false;
static uint64 attempt_wake[DSYNC_WAKE_CHANNELS / 64];

/* When the current try began, and (not 0) that it granted a lease nobody
 * else can share until at least attempt_until. */
static TimestampTz attempt_began = 0;
static TimestampTz attempt_until = 0;
static uint64 attempt_until_key = 0;	/* the lease attempt_until is about */

/*
 * The last thing this transaction did to quiet_key was a blocked caller's
 * exclusive grant, which holds it until at least quiet_until if we commit.
 */
static bool quiet_pending = false;
static uint64 quiet_key = 0;
static TimestampTz quiet_until = 0;
static char quiet_holder[DSYNC_NAME_MAX_BYTES + 1];	/* as in a waiter slot */

/* This transaction changed or locked something of dsync's. */
static bool xact_changed = false;

static bool callbacks_registered = false;

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
	return DsyncWaitKeyBytes(VARDATA_ANY(name), VARSIZE_ANY_EXHDR(name));
}

/*
 * DsyncWaitKeyBytes
 *		DsyncWaitKey of a name given as len bytes: for callers holding a
 *		spinlock or LWLock, where a text would have to be allocated.
 */
uint64
DsyncWaitKeyBytes(const char *name, int len)
{
	return hash_bytes_extended((const unsigned char *) name, len, (uint64) MyDatabaseId);
}

/*
 * DsyncWaitKeySignal
 *		The wait key of a signal's name: not the same as a lease of that
 *		name, so that the two queues never mix.
 */
uint64
DsyncWaitKeySignal(text *name)
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
	if (DsyncXactCallbacksOnce(&callbacks_registered, DsyncWaitXactCallback,
							   DsyncWaitSubXactCallback))
		RegisterResourceReleaseCallback(DsyncWaitReleaseCallback, NULL);
}

/*
 * DsyncXactChanged
 *		Note that this transaction changed or locked a row of dsync's, so
 *		that it cannot be prepared.
 */
void
DsyncXactChanged(void)
{
	DsyncWaitRegisterCallbacks();
	xact_changed = true;
}

/*
 * DsyncWakeAtEnd
 *		Note that waiters on key must be woken when this transaction ends,
 *		committed or not: it holds a lock on that name until then.
 */
void
DsyncWakeAtEnd(uint64 key)
{
	int			channel = key % DSYNC_WAKE_CHANNELS;

	DsyncWaitRegisterCallbacks();
	if (in_internal_attempt)
	{
		attempt_noted = true;
		attempt_wake[channel / 64] |= UINT64CONST(1) << (channel % 64);
	}
	/* Anything else done to the name since voids what the grant told. */
	if (quiet_pending && quiet_key % DSYNC_WAKE_CHANNELS == (uint64) channel)
		quiet_pending = false;
	wake_at_end[channel / 64] |= UINT64CONST(1) << (channel % 64);
	wake_pending = true;
}

/*
 * DsyncWakePendingFor
 *		Whether the end of this transaction wakes key's channel.
 */
static bool
DsyncWakePendingFor(uint64 key)
{
	int			channel = key % DSYNC_WAKE_CHANNELS;

	return (wake_at_end[channel / 64] & (UINT64CONST(1) << (channel % 64))) != 0;
}

/*
 * DsyncWakeDatabaseAtEnd
 *		Wake every waiter of this database if the transaction commits: it
 *		drops the extension, and they must stop waiting.
 */
void
DsyncWakeDatabaseAtEnd(void)
{
	DsyncWaitRegisterCallbacks();
	wake_database_at_commit = true;
}

/*
 * DsyncWaitGrantExcludes
 *		The try under way grants something nobody else in line can have
 *		while this transaction runs (the durable plain lease), and if it
 *		commits, for ttl_usec from a moment after the try began (so until
 *		at least attempt_until).  So whoever is next need not look
 *		when we leave the queue: the end of our transaction wakes it
 *		(DsyncWakeAtEnd), which is the first moment its look could tell it
 *		anything new; and a commit need not wake it either if it wakes by
 *		itself before until (DsyncWakeChannel).
 */
void
DsyncWaitGrantExcludes(text *lease, int64 ttl_usec)
{
	/* Outside a blocked caller's try (wait = 0) nothing is noted: no hashing. */
	if (in_internal_attempt)
	{
		attempt_until = attempt_began + ttl_usec;
		attempt_until_key = DsyncWaitKey(lease);
	}
}

/*
 * DsyncWaitInAttempt
 *		Whether a try runs in an internal subtransaction now (a blocked
 *		caller's, or DsyncWaitTryOnce's): what it does is undone if it
 *		fails, so it may give up rather than wait for another transaction.
 */
bool
DsyncWaitInAttempt(void)
{
	return in_internal_attempt;
}

/*
 * DsyncWaitAttemptMayWait
 *		Whether the try under way may wait for another transaction's lock
 *		(a blocked caller's try: its wait's deadline, 0 for none, is
 *		*deadline), rather than give up at once (a try that must not wait,
 *		wait = 0).  Outside a try, a caller waits as it would anyway.
 */
bool
DsyncWaitAttemptMayWait(TimestampTz *deadline)
{
	*deadline = in_internal_attempt ? attempt_deadline : 0;
	return !in_internal_attempt || attempt_may_wait;
}

/*
 * DsyncWaitStepAside
 *		The try under way waits for another transaction's lock (a grant's
 *		fence, leases/fencebind.c), holding nothing of the name it queues
 *		for: step out of the queue's way meanwhile (aside), or back into
 *		its place.  The lock's holder may itself want the name, and queue
 *		behind us in a wait no deadlock detector sees; aside, we do not
 *		hold it up, and the next in line is woken to look.
 */
void
DsyncWaitStepAside(bool aside)
{
	DsyncWaiterSlot *me = DsyncWaitMySlot();
	uint64		key;

	if (aside == stepped_aside)
		return;
	LWLockAcquire(dsync_shared->lock, LW_EXCLUSIVE);
	me->aside = aside && me->in_use;
	key = me->key;
	LWLockRelease(dsync_shared->lock);
	stepped_aside = aside;
	if (aside)
		DsyncWakeChannel(key % DSYNC_WAKE_CHANNELS);
}

/*
 * DsyncWaitAttemptLockTimeout
 *		The try under way waits for a lock with a lock_timeout of its own
 *		(armed), the time its wait has left: if that runs out, the try ends
 *		ungranted and the call goes on (it finds its wait over), instead of
 *		failing with the timeout's error.  Not armed again once the lock is
 *		had.
 */
void
DsyncWaitAttemptLockTimeout(bool armed)
{
	attempt_lock_timeout = armed && in_internal_attempt;
}

/*
 * DsyncWakeChannel
 *		Wake the first waiter in line for each queue on one channel.
 *
 * Only the first in line may take what it waits for (DsyncWaitMayTake), so
 * waking the others would only make them look and sleep again: with many
 * waiters on one lease, a broadcast costs a wake-up per waiter per hand-off.
 * The one woken passes the turn on when it leaves the queue.  The channel's
 * wake count goes up first, so that a waiter between its try and its sleep
 * notices (DsyncWaitSleep).
 *
 * A commit whose last act on a lease was an exclusive grant (quiet) lets
 * that lease's first waiter sleep on if it wakes by itself no later than
 * the grant's expiry and waits under another holder name: its look now
 * would only find the lease taken.  This saves a wake-up per hand-off in
 * a queue.  The waiter publishes when it
 * wakes (sleep_until) before it rereads the wake count, and we read it
 * after raising the count, so either it sees the count move or we see
 * when it wakes.
 */
static void
DsyncWakeChannelQuiet(int channel, bool quiet)
{
	int			firsts[DSYNC_WAKE_MAX_KEYS];
	int			nfirsts = 0;
	bool		overflow = false;

	pg_atomic_fetch_add_u64(&dsync_shared->wakes[channel], 1);

	/*
	 * A queued waiter has no backend to wake: its grant is the worker's.
	 * Not after a failed try, which freed nothing: the try of a queued
	 * waiter's grant by the worker itself would poke it again, for ever.
	 */
	if (!waking_failed_try)
		DsyncQueuedPoke(channel);
	if (pg_atomic_read_u32(&dsync_shared->waiting[channel]) == 0)
		return;

	LWLockAcquire(dsync_shared->lock, LW_SHARED);
	for (int i = 0; i < dsync_shared->nslots; i++)
	{
		DsyncWaiterSlot *slot = &dsync_shared->slots[i];
		int			k;

		if (!slot->in_use || slot->aside || slot->key % DSYNC_WAKE_CHANNELS != (uint64) channel)
			continue;
		for (k = 0; k < nfirsts; k++)
		{
			DsyncWaiterSlot *first = &dsync_shared->slots[firsts[k]];

			if (first->key == slot->key && first->dbid == slot->dbid &&
				first->roleid == slot->roleid)
				break;
		}
		if (k == nfirsts)
		{
			if (nfirsts == DSYNC_WAKE_MAX_KEYS)
			{
				overflow = true;
				break;
			}
			firsts[nfirsts++] = i;
		}
		else if (slot->ticket < dsync_shared->slots[firsts[k]].ticket)
			firsts[k] = i;
	}
	if (overflow)
	{
		/* Too many queues share the channel: wake everybody on it. */
		for (int i = 0; i < dsync_shared->nslots; i++)
			if (dsync_shared->slots[i].in_use &&
				dsync_shared->slots[i].key % DSYNC_WAKE_CHANNELS == (uint64) channel)
				SetLatch(&ProcGlobal->allProcs[i].procLatch);
		nfirsts = 0;
	}
	for (int k = 0; quiet && k < nfirsts; k++)
	{
		DsyncWaiterSlot *first = &dsync_shared->slots[firsts[k]];
		TimestampTz until = (TimestampTz) pg_atomic_read_u64(&first->sleep_until);

		/*
		 * A waiter under the new holder's own name could extend the lease
		 * now (LeaseTryAcquire), so it is woken as before.
		 */
		if (first->key == quiet_key && first->dbid == MyDatabaseId &&
			first->roleid == InvalidOid && until != 0 && until <= quiet_until &&
			strcmp(first->holder, quiet_holder) != 0)
			firsts[k--] = firsts[--nfirsts];
	}
	LWLockRelease(dsync_shared->lock);

	/* Waiter slots are indexed by pgprocno. */
	for (int k = 0; k < nfirsts; k++)
		SetLatch(&ProcGlobal->allProcs[firsts[k]].procLatch);
}

/*
 * DsyncWakeChannel
 *		Wake the first waiter in line for each queue on one channel.
 */
void
DsyncWakeChannel(int channel)
{
	DsyncWakeChannelQuiet(channel, false);
}

/*
 * DsyncWakeDatabase
 *		Wake every waiter of a database.
 */
static void
DsyncWakeDatabase(Oid dbid)
{
	LWLockAcquire(dsync_shared->lock, LW_SHARED);
	for (int i = 0; i < dsync_shared->nslots; i++)
		if (dsync_shared->slots[i].in_use && dsync_shared->slots[i].dbid == dbid)
			SetLatch(&ProcGlobal->allProcs[i].procLatch);
	LWLockRelease(dsync_shared->lock);
}

/*
 * DsyncWakeNow
 *		Wake the waiters on key at once: a change that takes effect
 *		without waiting for a commit (an ephemeral lease) freed it.
 */
void
DsyncWakeNow(uint64 key)
{
	DsyncWakeChannel(key % DSYNC_WAKE_CHANNELS);
}

/*
 * DsyncWakeDatabaseNow
 *		Wake every waiter of this database at once.
 */
void
DsyncWakeDatabaseNow(void)
{
	DsyncWakeDatabase(MyDatabaseId);
}

/*
 * DsyncWakeBroadcast
 *		Wake every sleeper on the channels set in bits.
 */
static void
DsyncWakeBroadcast(const uint64 *bits, bool quiet)
{
	for (int word = 0; word < WAKE_WORDS; word++)
	{
		uint64		w = bits[word];

		while (w != 0)
		{
			int			bit = pg_rightmost_one_pos64(w);

			DsyncWakeChannelQuiet(word * 64 + bit,
								  quiet && quiet_key % DSYNC_WAKE_CHANNELS == (uint64) (word * 64 + bit));
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
	if (phase != RESOURCE_RELEASE_AFTER_LOCKS)
		return;
	/* A failed try's rollback that failed itself pokes no less at the end. */
	if (isTopLevel)
		waking_failed_try = false;
	if (!isTopLevel)
	{
		/* The rolled-back savepoint's locks (insert lock too) are gone. */
		if (wake_after_subabort)
		{
			wake_after_subabort = false;
			DsyncWakeBroadcast(wake_at_end, false);
		}
		return;
	}
	if (wake_database_at_commit && isCommit)
	{
		if (dsync_database_gone_hook)
			dsync_database_gone_hook(MyDatabaseId);
		DsyncQueuedForgetDatabase(MyDatabaseId);
		DsyncWakeDatabase(MyDatabaseId);
	}
	/* Grants to queued waiters settle before anybody is woken. */
	DsyncQueuedAtEnd(isCommit);
	if (wake_pending)
		DsyncWakeBroadcast(wake_at_end, isCommit && quiet_pending);
	DsyncQueuedPokeDone();
	memset(wake_at_end, 0, sizeof(wake_at_end));
	wake_pending = false;
	quiet_pending = false;
	wake_after_subabort = false;
	wake_database_at_commit = false;
	xact_changed = false;
	waking_failed_try = false;
}

/*
 * DsyncWaitSubXactCallback
 *		A rolled-back savepoint may have undone a grant, or dropped a lock
 *		that others met: wake them so they look again, once its locks
 *		are released (this callback runs before that; the resource release
 *		callback does the broadcast).  The failed tries of our own blocked
 *		callers change nothing and wake nobody (otherwise two waiters could
 *		keep waking each other).
 */
static void
DsyncWaitSubXactCallback(SubXactEvent event, SubTransactionId mySubid,
						 SubTransactionId parentSubid, void *arg)
{
	if (event == SUBXACT_EVENT_ABORT_SUB)
		DsyncQueuedAtSubAbort(GetCurrentTransactionNestLevel());
	else if (event == SUBXACT_EVENT_COMMIT_SUB)
		DsyncQueuedAtSubCommit(GetCurrentTransactionNestLevel());
	if (event == SUBXACT_EVENT_ABORT_SUB && wake_pending && !in_internal_attempt)
	{
		wake_after_subabort = true;
		quiet_pending = false;	/* the grant may have been undone */
	}
}

/*
 * DsyncWaitXactCallback
 *		Refuse PREPARE TRANSACTION after any dsync change: COMMIT PREPARED
 *		runs no callbacks, so nobody would be woken and no event sent.
 */
static void
DsyncWaitXactCallback(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_PRE_PREPARE && xact_changed)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cannot PREPARE a transaction that has made dsync changes"),
				 errdetail("Leases, permits, memberships and signals cannot take part in two-phase commit."),
				 errhint("Commit it directly instead.")));
	if (event == XACT_EVENT_ABORT || event == XACT_EVENT_PREPARE)
		xact_changed = false;
}

/*
 * DsyncWaitTry
 *		One try of a blocked caller, in an internal subtransaction.
 *
 * If the try fails, the subtransaction is rolled back, so that the waiter
 * sleeps holding nothing: no row lock, no insert lock, no table lock.  A
 * try that waited for a lock with a timeout of its own
 * (DsyncWaitAttemptLockTimeout) and ran out of it fails the same way,
 * without an error.  may_wait: the try may wait for other transactions'
 * locks until the wait's deadline (a blocked caller's), else it must not.  A
 * successful try is kept by merging the subtransaction into the caller's
 * transaction.  If the failed try locked something (the lease expired
 * under it), that lock went with the rolled-back subtransaction just now,
 * and whoever it blocked must look again now, not when our transaction
 * ends.
 */
static bool
DsyncWaitTry(const DsyncWaitSpec *spec, bool may_take, bool thorough, bool may_wait,
			 TimestampTz *retry_at)
{
	MemoryContext oldcontext = CurrentMemoryContext;
	ResourceOwner oldowner = CurrentResourceOwner;
	volatile bool granted = false;	/* set in PG_TRY, read after PG_CATCH */
	bool		changed_before = xact_changed;
	uint64		wake_before[WAKE_WORDS];
	bool		pending_before = wake_pending;
	bool		quiet_before = quiet_pending;

	memcpy(wake_before, wake_at_end, sizeof(wake_at_end));

	BeginInternalSubTransaction(NULL);
	in_internal_attempt = true;
	attempt_may_wait = may_wait;
	attempt_deadline = spec->forever ? 0 : spec->deadline;
	attempt_lock_timeout = false;
	attempt_noted = false;
	memset(attempt_wake, 0, sizeof(attempt_wake));
	attempt_until = 0;
	attempt_until_key = 0;
	attempt_began = GetCurrentTimestamp();
	MemoryContextSwitchTo(oldcontext);

	PG_TRY();
	{
		granted = spec->try_fn(spec->arg, may_take, thorough, retry_at);
		if (granted)
			ReleaseCurrentSubTransaction();
		else
		{
			/* An ephemeral grant it undoes (ephbound.c) wakes, not pokes. */
			waking_failed_try = true;
			RollbackAndReleaseCurrentSubTransaction();
			waking_failed_try = false;
		}
		MemoryContextSwitchTo(oldcontext);
		CurrentResourceOwner = oldowner;
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(oldcontext);
		edata = CopyErrorData();
		FlushErrorState();
		waking_failed_try = true;
		RollbackAndReleaseCurrentSubTransaction();
		waking_failed_try = false;
		MemoryContextSwitchTo(oldcontext);
		CurrentResourceOwner = oldowner;
		in_internal_attempt = false;
		DsyncWaitStepAside(false);
		if (!attempt_lock_timeout || edata->sqlerrcode != ERRCODE_LOCK_NOT_AVAILABLE)
			ReThrowError(edata);
		attempt_lock_timeout = false;
		/* A statement timeout that fired with it was consumed with it. */
		if (StatementTimeout > 0 && !get_timeout_active(STATEMENT_TIMEOUT))
			ereport(ERROR,
					(errcode(ERRCODE_QUERY_CANCELED),
					 errmsg("canceling statement due to statement timeout")));
		/* The try's own lock_timeout: the wait is over, the call goes on. */
		FreeErrorData(edata);
		granted = false;
	}
	PG_END_TRY();

	DsyncWaitStepAside(false);
	in_internal_attempt = false;
	if (!granted)
	{
		/*
		 * The failed try changed nothing, and its locks are gone: nothing
		 * of it is for the end of our transaction to wake.
		 */
		xact_changed = changed_before;
		memcpy(wake_at_end, wake_before, sizeof(wake_at_end));
		wake_pending = pending_before;
		quiet_pending = quiet_before;
	}
	if (attempt_noted && !granted)
	{
		/* A try of several names (dsync_acquire_all) locks on several channels. */
		waking_failed_try = true;
		for (int i = 0; i < DSYNC_WAKE_CHANNELS / 64; i++)
			for (uint64 bits = attempt_wake[i]; bits != 0; bits &= bits - 1)
				DsyncWakeChannel(i * 64 + pg_rightmost_one_pos64(bits));
		waking_failed_try = false;
	}
	attempt_noted = false;
	return granted;
}

/*
 * DsyncWaitTryOnce
 *		One try of spec's function in an internal subtransaction, as a
 *		blocked caller's tries are, for a caller that does not wait: what
 *		the try took is kept only if it succeeds.
 */
bool
DsyncWaitTryOnce(const DsyncWaitSpec *spec, bool may_take)
{
	TimestampTz retry_at = 0;

	return DsyncWaitTry(spec, may_take, false, false, &retry_at);
}

/*
 * DsyncWaitFor
 *		Block until a try succeeds or the wait runs out; true if granted.
 *
 * The caller queues behind earlier waiters and sleeps on its name's
 * channel until woken by a commit or rollback that may have freed what it
 * waits for, or until the instant a try said to look again (the current
 * holder's expiry), whichever is first.  Each try runs in its own memory
 * context, reset between tries, so a long wait does not grow.
 */
bool
DsyncWaitFor(const DsyncWaitSpec *spec)
{
	MemoryContext attempt_cxt;
	MemoryContext oldcontext = CurrentMemoryContext;
	volatile bool thorough = false;

	/* Set inside PG_TRY and read in PG_CATCH, so they must be volatile. */
	volatile bool queued = false;
	volatile bool granted = false;
	volatile bool timed_out = false;
	bool		quiet;

	attempt_cxt = AllocSetContextCreate(CurrentMemoryContext, "dsync wait",
										ALLOCSET_SMALL_SIZES);
	PG_TRY();
	{
		for (;;)
		{
			TimestampTz retry_at = 0;
			TimestampTz wake_at;
			uint64		generation = DsyncWaitGeneration(spec->key);
			bool		first_in_line = DsyncWaitMayTake(spec->key, spec->roleid);

			if (queued && DsyncWaitMySlot()->evicted)
				ereport(ERROR,
						(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
						 errmsg("wait for lease \"%s\" was ended by dsync_force_release()",
								text_to_cstring(spec->name)),
						 errdetail("An administrator released this lease from your role and ended its waits for it.")));

			MemoryContextReset(attempt_cxt);
			MemoryContextSwitchTo(attempt_cxt);
			granted = DsyncWaitTry(spec, first_in_line, thorough, true, &retry_at);
			MemoryContextSwitchTo(oldcontext);
			if (granted)
			{
				/* A client that went while we waited must not get it. */
				if (MyProcPort != NULL && !pq_check_connection())
					DsyncWaitClientGone();
				break;
			}
			/* The caller must wait for another name now (dsync_acquire_all). */
			if (retry_at == DSYNC_WAIT_ELSEWHERE)
				break;

			if (!queued)
			{
				/*
				 * Get in line and sleep without a second look: a wake-up
				 * since generation was read makes the sleep return at once.
				 * Only the first in line sleeps until the holder's expiry
				 * the try reported.
				 */
				DsyncWaitEnqueue(spec);
				queued = true;
				if (first_in_line)
					first_in_line = DsyncWaitMayTake(spec->key, spec->roleid);
			}

			if (!spec->forever && GetCurrentTimestamp() >= spec->deadline)
			{
				timed_out = true;
				break;
			}
			/* Only the first in line wakes by itself at the holder's expiry. */
			if (!first_in_line)
				retry_at = 0;
			wake_at = spec->forever ? retry_at :
				(retry_at != 0 && retry_at < spec->deadline ? retry_at : spec->deadline);
			thorough = DsyncWaitSleep(spec->key, wake_at, generation) && first_in_line;
		}
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(oldcontext);
		if (queued)
			DsyncWaitDequeue(true);
		PG_RE_THROW();
	}
	PG_END_TRY();

	/*
	 * Leaving with an exclusive grant, wake nobody now if our transaction's
	 * end will: the next in line would only find the lease taken.
	 */
	quiet = granted && attempt_until != 0 && attempt_until_key == spec->key &&
		DsyncWakePendingFor(spec->key);
	if (quiet)
	{
		quiet_pending = true;
		quiet_key = spec->key;
		quiet_until = attempt_until;
		text_to_cstring_buffer(spec->holder, quiet_holder, sizeof(quiet_holder));
	}
	if (queued)
		DsyncWaitDequeue(!quiet);
	if (timed_out)
		DsyncStatAdd(DSYNC_STAT_WAIT_TIMEOUTS, 1);
	MemoryContextDelete(attempt_cxt);
	return granted;
}

