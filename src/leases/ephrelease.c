/*-------------------------------------------------------------------------
 *
 * ephrelease.c
 *		Letting go of an ephemeral lease: release, guards
 *		(dsync_assert_held), leader, and force_release.
 *
 * A guard counts itself in the entry until its transaction ends (the
 * transaction callback here drops the count); a release or forced release
 * by another transaction waits for it on the heavyweight lock the guard
 * holds (ephguard.c), so that the deadlock detector sees the wait.  The
 * table itself is ephemeral.c's; see its header.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/xact.h"
#include "common/hashfn.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/condition_variable.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"

#include "args.h"
#include "catalog.h"
#include "compat.h"
#include "dbslot.h"
#include "events.h"
#include "fencing.h"
#include "heldmap.h"
#include "queued.h"
#include "settings.h"
#include "stats.h"
#include "store.h"
#include "wait.h"
#include "ephemeral.h"
#include "ephemeral_int.h"

/* A guard of this backend's transaction, dropped when it ends. */
typedef struct EphemeralGuardNote
{
	EphemeralKey key;
	uint32		hash;
	uint64		generation;		/* of the grant guarded */
	uint64		wait_key;		/* DsyncWaitKey of the name */
} EphemeralGuardNote;

static List *my_guards = NIL;	/* in TopMemoryContext */
static bool guard_callback_registered = false;

/*
 * EphemeralMyGuards
 *		How many guards of this backend's transaction an entry counts.
 */
static int
EphemeralMyGuards(const EphemeralEntry *entry)
{
	ListCell   *lc;
	int			mine = 0;

	foreach(lc, my_guards)
	{
		EphemeralGuardNote *note = lfirst(lc);

		/* Generations are unique: the same one is the same grant. */
		if (note->generation == entry->generation &&
			note->key.dbid == entry->key.dbid && note->hash == entry->key.hash)
			mine++;
	}
	return mine;
}

/*
 * EphemeralWaitGuards
 *		With the partition lock held exclusively on entry, wait until no
 *		other transaction guards the entry; the lock is held again on
 *		return, and *entry looked up again (NULL if it is gone).  The wait
 *		is on the guards' heavyweight lock (ephguard.c), which the deadlock
 *		detector sees; should guards still be counted once it is granted
 *		(they never should), a short sleep keeps this from spinning.
 */
void
EphemeralWaitGuards(const EphemeralKey *key, uint32 hash, EphemeralEntry **entry)
{
	LWLock	   *lock = EphemeralLock(hash);
	uint64		waited = 0;

	while (*entry != NULL && (*entry)->guards > EphemeralMyGuards(*entry))
	{
		uint64		generation = (*entry)->generation;

		LWLockRelease(lock);
		if (generation != waited)
			EphemeralGuardWait(generation);
		else
		{
			ConditionVariablePrepareToSleep(&ephemeral_shared->guards_done);
			ConditionVariableTimedSleep(&ephemeral_shared->guards_done, 10,
										PG_WAIT_EXTENSION);
			ConditionVariableCancelSleep();
		}
		waited = generation;
		LWLockAcquire(lock, LW_EXCLUSIVE);
		*entry = EphemeralFind(key, hash);
	}
}

/*
 * EphemeralLetGo
 *		Release an entry (partition lock held exclusively): announce it,
 *		remove it, wake its waiters.
 */
void
EphemeralLetGo(EphemeralEntry *entry, uint32 hash)
{
	DsyncEvent	event = EphemeralEvent(DSYNC_EVENT_RELEASED, entry);

	DsyncEventPublishNow(&event, 1, 0);
	EphemeralRemove(entry);
}

/*
 * EphemeralReleaseIf
 *		Release holder's ephemeral lease if it holds it.  If only_token is
 *		not 0, only the grant with that token; with session_only, only if
 *		it is this backend's session lease still (another backend may have
 *		taken it over, see DsyncEphemeralSessionMove); with renewed_upto
 *		not 0, only if not renewed since (a renewal is a claim of a grant
 *		made to a queued waiter).  NONE if the name has none.  With wait,
 *		waits for the guards of other transactions, as a row lock would;
 *		without, a guarded lease is BUSY (*busy).
 */
static DsyncEphemeralFound
EphemeralReleaseIf(text *lease, text *holder, int64 only_token, bool session_only,
				   TimestampTz renewed_upto, bool wait, bool *busy, int64 *token)
{
	EphemeralLook look;
	DsyncEphemeralFound found;

	*busy = false;
	found = EphemeralLookHeld(lease, holder, LW_EXCLUSIVE, &look);
	if (found == DSYNC_EPHEMERAL_NONE)
		return found;
	if (found == DSYNC_EPHEMERAL_DONE && !wait &&
		look.entry->guards > EphemeralMyGuards(look.entry))
	{
		*busy = true;
		found = DSYNC_EPHEMERAL_NOT_HELD;
	}
	else if (found == DSYNC_EPHEMERAL_DONE)
	{
		EphemeralWaitGuards(&look.key, look.hash, &look.entry);
		/* It may have expired or changed hands while we waited. */
		if (look.entry == NULL || look.entry->expires_at <= GetCurrentTimestamp() ||
			!EphemeralHolderIs(look.entry, holder) ||
			(only_token != 0 && look.entry->fencing != only_token) ||
			(session_only && look.entry->session_pid != MyProcPid) ||
			(renewed_upto != 0 && look.entry->renewed_at > renewed_upto))
			found = DSYNC_EPHEMERAL_NOT_HELD;
		else
		{
			*token = look.entry->fencing;
			EphemeralLetGo(look.entry, look.hash);
		}
	}
	LWLockRelease(EphemeralLock(look.hash));
	if (found == DSYNC_EPHEMERAL_DONE)
	{
		uint64		key = DsyncWaitKey(lease);

		/*
		 * dsync_release grants to the first queued waiter next: the worker
		 * must not race it for that grant (DsyncQueuedPokeUnhold).
		 */
		if (only_token == 0 && !session_only && renewed_upto == 0)
			DsyncQueuedPokeHold(key);
		DsyncWakeNow(key);
	}
	return found;
}

/*
 * DsyncEphemeralRelease
 *		dsync_release of an ephemeral lease: NONE if the name has none.
 *		The caller lets go of the poke it holds back (DsyncQueuedPokeHold).
 */
DsyncEphemeralFound
DsyncEphemeralRelease(text *lease, text *holder, int64 *token)
{
	bool		busy;

	return EphemeralReleaseIf(lease, holder, 0, false, 0, true, &busy, token);
}

/*
 * DsyncEphemeralReleaseGrant
 *		Release the ephemeral grant holder got with token, if it still
 *		holds it (a session lease whose backend ends); true if released.
 */
bool
DsyncEphemeralReleaseGrant(text *lease, text *holder, int64 token)
{
	int64		released;
	bool		busy;

	return EphemeralReleaseIf(lease, holder, token, true, 0, true, &busy,
							  &released) == DSYNC_EPHEMERAL_DONE;
}

/*
 * DsyncEphemeralPassOn
 *		Release the ephemeral grant made to a queued waiter with token
 *		(leases/queuegrant.c): one its client gave up (renewed_upto 0,
 *		waiting for guards as a release does), or one not claimed in time
 *		(unless renewed since renewed_upto; never waiting for a guard,
 *		which is a use of the lease: BUSY).
 */
DsyncReleaseResult
DsyncEphemeralPassOn(text *lease, text *holder, int64 token, TimestampTz renewed_upto)
{
	int64		released;
	bool		busy;

	if (EphemeralReleaseIf(lease, holder, token, false, renewed_upto, renewed_upto == 0,
						   &busy, &released) == DSYNC_EPHEMERAL_DONE)
		return DSYNC_RELEASE_DONE;
	return busy ? DSYNC_RELEASE_BUSY : DSYNC_RELEASE_NOT_HELD;
}

/*
 * EphemeralGuardXactCallback
 *		At the end of the top-level transaction, drop its guards and wake
 *		whoever waits for them; a guarded lease that expired meanwhile is
 *		due for the reaper now.
 */
static void
EphemeralGuardXactCallback(XactEvent event, void *arg)
{
	ListCell   *lc;

	if (my_guards == NIL ||
		(event != XACT_EVENT_COMMIT && event != XACT_EVENT_ABORT &&
		 event != XACT_EVENT_PARALLEL_COMMIT && event != XACT_EVENT_PARALLEL_ABORT))
		return;
	foreach(lc, my_guards)
	{
		EphemeralGuardNote *note = lfirst(lc);
		LWLock	   *lock = EphemeralLock(note->hash);
		EphemeralEntry *entry;

		LWLockAcquire(lock, LW_EXCLUSIVE);
		entry = EphemeralFind(&note->key, note->hash);
		if (entry != NULL && entry->generation == note->generation && entry->guards > 0)
		{
			entry->guards--;
			if (entry->guards == 0)
			{
				/* Unguarded: the reaper must know when it is due (now, if expired). */
				DsyncEvent	due = EphemeralEvent(DSYNC_EVENT_DEADLINE, entry);

				due.expires_at = Max(entry->expires_at, GetCurrentTimestamp());
				DsyncEventPublishNow(&due, 1, 0);
			}
		}
		LWLockRelease(lock);
		DsyncWakeNow(note->wait_key);
		pfree((char *) note->key.name);
	}
	list_free_deep(my_guards);
	my_guards = NIL;
	ConditionVariableBroadcast(&ephemeral_shared->guards_done);
}

/*
 * DsyncEphemeralGuard
 *		dsync_assert_held of an ephemeral lease: NONE if the name has none.
 */
DsyncEphemeralFound
DsyncEphemeralGuard(text *lease, text *holder, int64 *token)
{
	EphemeralLook look;
	DsyncEphemeralFound found;
	EphemeralGuardNote *note;
	MemoryContext oldcontext;

	for (;;)
	{
		uint64		generation;

		found = EphemeralLookHeld(lease, holder, LW_EXCLUSIVE, &look);
		if (found != DSYNC_EPHEMERAL_DONE || EphemeralGuardLock(look.entry->generation, false))
			break;
		/* A release is queued for the guards: wait behind it, then look again. */
		generation = look.entry->generation;
		LWLockRelease(EphemeralLock(look.hash));
		(void) EphemeralGuardLock(generation, true);
	}
	if (found == DSYNC_EPHEMERAL_NONE)
		return found;
	if (found == DSYNC_EPHEMERAL_DONE)
	{
		/* A guard is not kept across PREPARE TRANSACTION. */
		DsyncXactChanged();
		if (!guard_callback_registered)
		{
			RegisterXactCallback(EphemeralGuardXactCallback, NULL);
			guard_callback_registered = true;
		}
		oldcontext = MemoryContextSwitchTo(TopMemoryContext);
		note = palloc(sizeof(EphemeralGuardNote));
		note->key = look.key;
		/* The key points at the name: keep a copy for the transaction's end. */
		note->key.name = pnstrdup(look.key.name, look.key.len);
		note->hash = look.hash;
		note->generation = look.entry->generation;
		note->wait_key = DsyncWaitKey(lease);
		my_guards = lappend(my_guards, note);
		MemoryContextSwitchTo(oldcontext);
		look.entry->guards++;
		*token = look.entry->fencing;
	}
	LWLockRelease(EphemeralLock(look.hash));
	return found;
}

/*
 * DsyncEphemeralLeader
 *		The holder of a live ephemeral lease: NONE if the name has none.
 */
DsyncEphemeralFound
DsyncEphemeralLeader(text *lease, text **holder)
{
	EphemeralLook look;
	DsyncEphemeralFound found;

	found = EphemeralLookHeld(lease, NULL, LW_SHARED, &look);
	if (found == DSYNC_EPHEMERAL_NONE)
		return found;
	*holder = look.entry->expires_at > GetCurrentTimestamp() ? EphemeralHolderText(look.entry) : NULL;
	LWLockRelease(EphemeralLock(look.hash));
	return found;
}

/*
 * DsyncEphemeralToken
 *		The token of a name's ephemeral lease, held or not yet removed
 *		(0 if none): the newest ephemeral grant of the name, for a binding
 *		that raises a fence to it (fencebind.c).
 */
int64
DsyncEphemeralToken(text *lease)
{
	EphemeralKey key;
	uint32		hash;
	EphemeralEntry *entry;
	int64		token = 0;

	if (ephemeral_shared == NULL)
		return 0;
	hash = EphemeralKeyFor(lease, &key);
	LWLockAcquire(EphemeralLock(hash), LW_SHARED);
	entry = EphemeralFind(&key, hash);
	if (entry != NULL)
		token = entry->fencing;
	LWLockRelease(EphemeralLock(hash));
	return token;
}

/*
 * DsyncEphemeralForceRelease
 *		dsync_force_release of an ephemeral lease (of holder, if given);
 *		returns 1 if it released one.
 */
int32
DsyncEphemeralForceRelease(text *lease, text *holder, bool cancel_waits)
{
	EphemeralLook look;
	Oid			owner;
	text	   *was;

	if (EphemeralLookHeld(lease, NULL, LW_EXCLUSIVE, &look) ==
		DSYNC_EPHEMERAL_NONE)
		return 0;
	EphemeralWaitGuards(&look.key, look.hash, &look.entry);
	if (look.entry == NULL || look.entry->expires_at <= GetCurrentTimestamp() ||
		(holder != NULL && !EphemeralHolderNameIs(look.entry, holder)))
	{
		LWLockRelease(EphemeralLock(look.hash));
		return 0;
	}
	owner = look.entry->owner;
	was = EphemeralHolderText(look.entry);
	EphemeralLetGo(look.entry, look.hash);
	LWLockRelease(EphemeralLock(look.hash));
	/* A grant made to it as a queued waiter is not to be claimed now. */
	DsyncQueuedForgetGrant(lease, was);
	if (cancel_waits)
		DsyncWaitEvict(DsyncWaitKey(lease), owner);
	DsyncWakeNow(DsyncWaitKey(lease));
	return 1;
}
