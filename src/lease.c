/*-------------------------------------------------------------------------
 *
 * lease.c
 *		The lease functions: acquire, renew, release, leader, assert_held
 *		and force_release.
 *
 * A lease is held when its row has a holder and expires_at is after the
 * server clock's now; nothing else (no cleanup pass) decides it.  Every
 * change locks the row first and re-checks it against a fresh clock
 * reading, so decisions are made on the latest committed version:
 *
 *	- acquire locks with LockWaitSkip and treats a row it cannot lock as
 *	  taken, so it never waits for another transaction;
 *	- renew, release and force_release lock with LockWaitBlock: they act
 *	  on the caller's own lease and may wait for a guard to finish;
 *	- assert_held takes a share lock, which conflicts with the exclusive
 *	  lock every grant needs, so until the guarding transaction ends nobody
 *	  else can take the lease, even once it has expired.
 *
 * If a row changed between the scan and the lock (TM_Updated), the whole
 * decision is made again from a new scan.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"

#include "dsync.h"

PG_FUNCTION_INFO_V1(dsync_acquire);
PG_FUNCTION_INFO_V1(dsync_renew);
PG_FUNCTION_INFO_V1(dsync_release);
PG_FUNCTION_INFO_V1(dsync_leader);
PG_FUNCTION_INFO_V1(dsync_assert_held);
PG_FUNCTION_INFO_V1(dsync_force_release);

/* What one grant writes into a row. */
typedef struct LeaseGrant
{
	text	   *holder;
	Interval   *ttl;
	int64		ttl_usec;
	Datum		info;
	bool		info_null;
} LeaseGrant;

/*
 * LeaseFindHeld
 *		The row in which holder holds the lease live at now, if any.
 */
static DsyncLeaseRow *
LeaseFindHeld(List *rows, text *holder, TimestampTz now)
{
	ListCell   *lc;

	foreach(lc, rows)
	{
		DsyncLeaseRow *row = lfirst(lc);

		if (DsyncRowIsLive(row, now) && DsyncRowHolderIs(row, holder))
			return row;
	}
	return NULL;
}

/*
 * LeaseHeldByCaller
 *		Whether a locked row is still held live by this holder, as the
 *		clock reads now, and owned by a role the caller acts for.
 */
static bool
LeaseHeldByCaller(DsyncLeaseRow *row, text *holder)
{
	return DsyncRowIsLive(row, GetCurrentTimestamp()) &&
		DsyncRowHolderIs(row, holder) &&
		DsyncRowOwnerIsCaller(row);
}

/*
 * LeaseSetGrant
 *		Fill a row for a new grant: a new fencing token and a fresh expiry.
 */
static void
LeaseSetGrant(DsyncStore *store, DsyncLeaseRow *row, const LeaseGrant *grant)
{
	int64		token = DsyncNextFencingToken(store->catalog);
	TimestampTz now = GetCurrentTimestamp();

	row->values[Anum_lease_holder - 1] = PointerGetDatum(grant->holder);
	row->nulls[Anum_lease_holder - 1] = false;
	row->values[Anum_lease_fencing - 1] = Int64GetDatum(token);
	row->nulls[Anum_lease_fencing - 1] = false;
	row->values[Anum_lease_acquired_at - 1] = TimestampTzGetDatum(now);
	row->nulls[Anum_lease_acquired_at - 1] = false;
	row->values[Anum_lease_renewed_at - 1] = TimestampTzGetDatum(now);
	row->nulls[Anum_lease_renewed_at - 1] = false;
	row->values[Anum_lease_expires_at - 1] =
		TimestampTzGetDatum(DsyncExpiry(now, grant->ttl_usec, "ttl"));
	row->nulls[Anum_lease_expires_at - 1] = false;
	row->values[Anum_lease_ttl - 1] = IntervalPGetDatum(grant->ttl);
	row->nulls[Anum_lease_ttl - 1] = false;
	row->values[Anum_lease_info - 1] = grant->info;
	row->nulls[Anum_lease_info - 1] = grant->info_null;
	row->values[Anum_lease_owner - 1] = ObjectIdGetDatum(GetUserId());
	row->nulls[Anum_lease_owner - 1] = false;
}

/*
 * LeaseSetRenewal
 *		Push a held row's expiry to now + ttl_usec; returns the new expiry.
 */
static TimestampTz
LeaseSetRenewal(DsyncLeaseRow *row, int64 ttl_usec)
{
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz expiry = DsyncExpiry(now, ttl_usec, "ttl");

	row->values[Anum_lease_renewed_at - 1] = TimestampTzGetDatum(now);
	row->values[Anum_lease_expires_at - 1] = TimestampTzGetDatum(expiry);
	return expiry;
}

/*
 * LeaseSetReleased
 *		Clear a row's holder.  The row stays, so the next grant of this
 *		name is a HOT update rather than an insert.
 */
static void
LeaseSetReleased(DsyncLeaseRow *row)
{
	row->nulls[Anum_lease_holder - 1] = true;
	row->nulls[Anum_lease_info - 1] = true;
}

/*
 * LeaseEarliestExpiry
 *		The earliest expiry among the live rows, or 0 if none is live: the
 *		instant a blocked acquirer should look again by itself.
 */
static TimestampTz
LeaseEarliestExpiry(List *rows)
{
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz earliest = 0;
	ListCell   *lc;

	foreach(lc, rows)
	{
		DsyncLeaseRow *row = lfirst(lc);
		TimestampTz expiry;

		if (!DsyncRowIsLive(row, now))
			continue;
		expiry = DatumGetTimestampTz(row->values[Anum_lease_expires_at - 1]);
		if (earliest == 0 || expiry < earliest)
			earliest = expiry;
	}
	return earliest;
}

/*
 * LeaseSlotExists
 *		Whether a permit slot has a row.
 */
static bool
LeaseSlotExists(List *rows, int32 slot)
{
	ListCell   *lc;

	foreach(lc, rows)
	{
		if (DatumGetInt32(((DsyncLeaseRow *) lfirst(lc))->values[Anum_lease_slot - 1]) == slot)
			return true;
	}
	return false;
}

/*
 * LeaseTryAcquire
 *		Grant one of the lease's permits to the holder if one is free now,
 *		without waiting for any other transaction.  Returns true and the
 *		fencing token on success; otherwise sets *next_expiry to the
 *		earliest expiry of a current holder (0 if unknown).
 *
 * A holder that already has the lease always gets its extension.  Anybody
 * else takes a free permit only if may_take: queued waiters go first.
 */
static bool
LeaseTryAcquire(DsyncStore *store, text *lease, const LeaseGrant *grant,
				int permits, bool may_take, int64 *token,
				TimestampTz *next_expiry)
{
	for (;;)
	{
		List	   *rows;
		ListCell   *lc;
		DsyncLeaseRow *mine;
		bool	   *slot_used;
		bool		rescan = false;
		int			free_slot;
		DsyncLeaseRow *fresh;

		CHECK_FOR_INTERRUPTS();

		rows = DsyncStoreScan(store, lease);
		mine = LeaseFindHeld(rows, grant->holder, GetCurrentTimestamp());
		*next_expiry = LeaseEarliestExpiry(rows);

		/* Reentrant: the holder already has it; extend and keep the token. */
		if (mine)
		{
			TM_Result	result;
			TimestampTz previous;

			if (!DsyncRowOwnerIsCaller(mine))
				return false;
			result = DsyncStoreLock(store, mine, LockTupleNoKeyExclusive, LockWaitSkip);
			if (result == TM_WouldBlock)
				return false;
			if (result != TM_Ok)
				continue;
			if (!LeaseHeldByCaller(mine, grant->holder))
				continue;		/* it expired as we locked it: look again */
			previous = DatumGetTimestampTz(mine->values[Anum_lease_expires_at - 1]);
			if (LeaseSetRenewal(mine, grant->ttl_usec) < previous)
				DsyncEventRecord(DSYNC_EVENT_DEADLINE, mine);
			mine->values[Anum_lease_ttl - 1] = IntervalPGetDatum(grant->ttl);
			if (!grant->info_null)
			{
				mine->values[Anum_lease_info - 1] = grant->info;
				mine->nulls[Anum_lease_info - 1] = false;
			}
			DsyncStoreUpdate(store, mine);
			*token = DatumGetInt64(mine->values[Anum_lease_fencing - 1]);
			return true;
		}

		if (!may_take)
			return false;

		/*
		 * Every live holder counts, in whatever slot: holders from before a
		 * semaphore was dropped or re-created with fewer permits keep their
		 * permits, and nobody new comes in until they are fewer.
		 */
		{
			int			live = 0;

			foreach(lc, rows)
				if (DsyncRowIsLive(lfirst(lc), GetCurrentTimestamp()))
					live++;
			if (live >= permits)
				return false;
		}

		/* Take the first existing permit that is free or expired. */
		slot_used = palloc0(sizeof(bool) * permits);
		foreach(lc, rows)
		{
			DsyncLeaseRow *row = lfirst(lc);
			int32		slot = DatumGetInt32(row->values[Anum_lease_slot - 1]);
			TM_Result	result;

			if (slot < 0 || slot >= permits)
				continue;
			slot_used[slot] = true;
			if (DsyncRowIsLive(row, GetCurrentTimestamp()))
				continue;

			result = DsyncStoreLock(store, row, LockTupleNoKeyExclusive, LockWaitSkip);
			if (result == TM_WouldBlock)
				continue;
			if (result != TM_Ok || DsyncRowIsLive(row, GetCurrentTimestamp()))
			{
				rescan = true;
				break;
			}
			/* Taking over an expired lease announces its expiry first. */
			if (!row->nulls[Anum_lease_holder - 1])
				DsyncEventRecord(DSYNC_EVENT_EXPIRED, row);
			LeaseSetGrant(store, row, grant);
			DsyncStoreUpdate(store, row);
			DsyncEventRecord(DSYNC_EVENT_ACQUIRED, row);
			*token = DatumGetInt64(row->values[Anum_lease_fencing - 1]);
			return true;
		}
		if (rescan)
			continue;

		/*
		 * No free row: make one for a permit that has no row (never used,
		 * or cleared by the reaper).  Each (name, slot) has its own insert
		 * lock, so that acquirers of different permits do not stand in
		 * each other's way.
		 */
		free_slot = -1;
		for (int slot = 0; slot < permits && free_slot < 0; slot++)
		{
			if (slot_used[slot] ||
				!DsyncStoreInsertLock(DSYNC_TABLE_LEASE, lease, slot, false))
				continue;
			free_slot = slot;
		}
		if (free_slot < 0)
			return false;

		/* Someone may have inserted that permit and committed since our scan. */
		if (LeaseSlotExists(DsyncStoreScan(store, lease), free_slot))
			continue;

		fresh = DsyncStoreNewRow();
		fresh->values[Anum_lease_name - 1] = PointerGetDatum(lease);
		fresh->nulls[Anum_lease_name - 1] = false;
		fresh->values[Anum_lease_slot - 1] = Int32GetDatum(free_slot);
		fresh->nulls[Anum_lease_slot - 1] = false;
		LeaseSetGrant(store, fresh, grant);
		DsyncStoreInsert(store, fresh);
		DsyncEventRecord(DSYNC_EVENT_ACQUIRED, fresh);
		*token = DatumGetInt64(fresh->values[Anum_lease_fencing - 1]);
		return true;
	}
}

/*
 * LeaseLockHeld
 *		Find and lock the row in which holder holds the lease live, for a
 *		change by that holder.  Returns NULL if it does not hold it (or the
 *		caller's role does not own it).
 */
static DsyncLeaseRow *
LeaseLockHeld(DsyncStore *store, text *lease, text *holder, LockTupleMode mode)
{
	for (;;)
	{
		List	   *rows;
		DsyncLeaseRow *row;
		TM_Result	result;

		CHECK_FOR_INTERRUPTS();

		rows = DsyncStoreScan(store, lease);
		row = LeaseFindHeld(rows, holder, GetCurrentTimestamp());
		if (row == NULL || !DsyncRowOwnerIsCaller(row))
			return NULL;

		result = DsyncStoreLock(store, row, mode, LockWaitBlock);
		if (result != TM_Ok)
			continue;
		/* If it expired while we waited for the lock, it is not held. */
		return LeaseHeldByCaller(row, holder) ? row : NULL;
	}
}

/*
 * LeaseAttempt
 *		One try of a blocked acquirer, in an internal subtransaction.
 *
 * If the try fails, the subtransaction is rolled back, so that the waiter
 * sleeps holding nothing a holder or releaser needs: no row lock, no
 * insert lock.  A successful grant is kept by merging the subtransaction
 * into the caller's transaction.
 */
static bool
LeaseAttempt(FunctionCallInfo fcinfo, text *lease, const LeaseGrant *grant,
			 bool may_take, int64 *token, TimestampTz *next_expiry)
{
	MemoryContext oldcontext = CurrentMemoryContext;
	ResourceOwner oldowner = CurrentResourceOwner;
	bool		granted = false;

	BeginInternalSubTransaction(NULL);
	DsyncWaitAttemptStart();
	MemoryContextSwitchTo(oldcontext);

	PG_TRY();
	{
		DsyncStore	store;

		DsyncStoreOpen(&store, fcinfo, true);
		granted = LeaseTryAcquire(&store, lease, grant,
								  DsyncSemaphorePermitsFor(fcinfo, lease, true),
								  may_take, token, next_expiry);
		DsyncStoreClose(&store);

		if (granted)
			ReleaseCurrentSubTransaction();
		else
			RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcontext);
		CurrentResourceOwner = oldowner;
		DsyncWaitAttemptEnd(DsyncWaitKey(lease), granted);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(oldcontext);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcontext);
		CurrentResourceOwner = oldowner;
		DsyncWaitAttemptEnd(DsyncWaitKey(lease), false);
		ReThrowError(edata);
	}
	PG_END_TRY();

	return granted;
}

/*
 * LeaseAcquireWaiting
 *		Acquire, blocking until granted or until the wait runs out.
 *
 * The waiter queues behind earlier waiters and sleeps on its name's
 * channel until woken by a commit or rollback that may have freed the
 * lease, or until the current holder's expiry, whichever is first.  The
 * channel's wake count is read before each try, so a wake-up that comes
 * between the try and the sleep is not lost.  Each
 * try runs in its own memory context, reset between tries, so that a
 * long wait does not grow.
 */
static bool
LeaseAcquireWaiting(FunctionCallInfo fcinfo, text *lease, const LeaseGrant *grant,
					bool forever, int64 wait_usec, int64 *token)
{
	uint64		key = DsyncWaitKey(lease);
	TimestampTz deadline = forever ? 0 : DsyncExpiry(GetCurrentTimestamp(), wait_usec, "wait");
	MemoryContext attempt_cxt;
	MemoryContext oldcontext = CurrentMemoryContext;

	/* Set inside PG_TRY and read in PG_CATCH, so they must be volatile. */
	volatile bool queued = false;
	volatile bool granted = false;

	attempt_cxt = AllocSetContextCreate(CurrentMemoryContext, "dsync wait",
										ALLOCSET_SMALL_SIZES);
	PG_TRY();
	{
		for (;;)
		{
			TimestampTz next_expiry = 0;
			TimestampTz wake_at;
			uint64		generation = DsyncWaitGeneration(key);
			bool		first_in_line = DsyncWaitMayTake(key);

			MemoryContextReset(attempt_cxt);
			MemoryContextSwitchTo(attempt_cxt);
			granted = LeaseAttempt(fcinfo, lease, grant, first_in_line,
								   token, &next_expiry);
			MemoryContextSwitchTo(oldcontext);
			if (granted)
				break;

			if (!queued)
			{
				/* Get in line, then look once more before sleeping. */
				DsyncWaitEnqueue(key,
								 DsyncSemaphorePermits(fcinfo, lease) > 1 ? "semaphore" : "lease",
								 lease, grant->holder);
				queued = true;
				continue;
			}

			if (!forever && GetCurrentTimestamp() >= deadline)
				break;
			/* Only the first in line wakes by itself at the holder's expiry. */
			if (!first_in_line)
				next_expiry = 0;
			wake_at = forever ? next_expiry :
				(next_expiry != 0 && next_expiry < deadline ? next_expiry : deadline);
			DsyncWaitSleep(key, wake_at, generation);
		}
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(oldcontext);
		if (queued)
			DsyncWaitDequeue();
		PG_RE_THROW();
	}
	PG_END_TRY();

	if (queued)
		DsyncWaitDequeue();
	MemoryContextDelete(attempt_cxt);
	return granted;
}

/*
 * dsync_acquire
 *		SQL: dsync_acquire(lease, holder, ttl, wait, info) RETURNS bigint
 */
Datum
dsync_acquire(PG_FUNCTION_ARGS)
{
	text	   *lease = DsyncArgName(fcinfo, 0, "lease");
	LeaseGrant	grant;
	bool		wait_forever;
	int64		wait_usec;
	int64		token;
	bool		granted;

	grant.holder = DsyncArgName(fcinfo, 1, "holder");
	grant.ttl_usec = DsyncArgTtl(fcinfo, 2, "ttl", false, &grant.ttl);
	(void) DsyncExpiry(GetCurrentTimestamp(), grant.ttl_usec, "ttl");
	DsyncArgWait(fcinfo, 3, "wait", &wait_forever, &wait_usec);
	grant.info_null = PG_ARGISNULL(4);
	grant.info = grant.info_null ? (Datum) 0 : JsonbPGetDatum(PG_GETARG_JSONB_P(4));

	DsyncPreventWrite("dsync_acquire()");

	if (wait_forever || wait_usec > 0)
		granted = LeaseAcquireWaiting(fcinfo, lease, &grant, wait_forever, wait_usec, &token);
	else
	{
		DsyncStore	store;
		TimestampTz next_expiry;

		DsyncStoreOpen(&store, fcinfo, true);
		granted = LeaseTryAcquire(&store, lease, &grant,
								  DsyncSemaphorePermitsFor(fcinfo, lease, true),
								  DsyncWaitMayTake(DsyncWaitKey(lease)),
								  &token, &next_expiry);
		DsyncStoreClose(&store);
	}

	if (!granted)
		PG_RETURN_NULL();
	PG_RETURN_INT64(token);
}

/*
 * dsync_renew
 *		SQL: dsync_renew(lease, holder, ttl) RETURNS timestamptz
 *
 * A NULL ttl renews for the ttl the lease was last acquired with; an
 * explicit ttl applies to this renewal only.
 */
Datum
dsync_renew(PG_FUNCTION_ARGS)
{
	text	   *lease = DsyncArgName(fcinfo, 0, "lease");
	text	   *holder = DsyncArgName(fcinfo, 1, "holder");
	Interval   *ttl;
	int64		ttl_usec = DsyncArgTtl(fcinfo, 2, "ttl", true, &ttl);
	DsyncStore	store;
	DsyncLeaseRow *row;
	TimestampTz expiry = 0;
	TimestampTz previous;

	DsyncPreventWrite("dsync_renew()");

	DsyncStoreOpen(&store, fcinfo, true);
	row = LeaseLockHeld(&store, lease, holder, LockTupleNoKeyExclusive);
	if (row)
	{
		if (ttl == NULL &&
			!DsyncIntervalUsec(DatumGetIntervalP(row->values[Anum_lease_ttl - 1]), &ttl_usec))
			ereport(ERROR,
					(errcode(ERRCODE_INTERVAL_FIELD_OVERFLOW),
					 errmsg("stored ttl of lease \"%s\" is out of range",
							text_to_cstring(lease))));
		previous = DatumGetTimestampTz(row->values[Anum_lease_expires_at - 1]);
		expiry = LeaseSetRenewal(row, ttl_usec);
		DsyncStoreUpdate(&store, row);
		/* Later deadlines the reaper finds by itself; earlier ones it must be told. */
		if (expiry < previous)
			DsyncEventRecord(DSYNC_EVENT_DEADLINE, row);
	}
	DsyncStoreClose(&store);

	if (row == NULL)
		PG_RETURN_NULL();
	PG_RETURN_TIMESTAMPTZ(expiry);
}

/*
 * dsync_release
 *		SQL: dsync_release(lease, holder) RETURNS boolean
 */
Datum
dsync_release(PG_FUNCTION_ARGS)
{
	text	   *lease = DsyncArgName(fcinfo, 0, "lease");
	text	   *holder = DsyncArgName(fcinfo, 1, "holder");
	DsyncStore	store;
	DsyncLeaseRow *row;

	DsyncPreventWrite("dsync_release()");

	DsyncStoreOpen(&store, fcinfo, true);
	row = LeaseLockHeld(&store, lease, holder, LockTupleNoKeyExclusive);
	if (row)
	{
		DsyncEventRecord(DSYNC_EVENT_RELEASED, row);
		LeaseSetReleased(row);
		DsyncStoreUpdate(&store, row);
	}
	DsyncStoreClose(&store);

	PG_RETURN_BOOL(row != NULL);
}

/*
 * DsyncLeaseLeader
 *		The holder of a live one-permit lease, or NULL: also the leader
 *		that dsync_members marks.  A semaphore of several permits has
 *		holders, not a leader.
 */
text *
DsyncLeaseLeader(FunctionCallInfo fcinfo, text *lease)
{
	DsyncStore	store;
	List	   *rows;
	ListCell   *lc;
	text	   *leader = NULL;
	TimestampTz now;

	if (DsyncSemaphorePermits(fcinfo, lease) > 1)
		return NULL;

	DsyncStoreOpen(&store, fcinfo, false);
	rows = DsyncStoreScan(&store, lease);
	now = GetCurrentTimestamp();
	foreach(lc, rows)
	{
		DsyncLeaseRow *row = lfirst(lc);

		if (DatumGetInt32(row->values[Anum_lease_slot - 1]) == 0 &&
			DsyncRowIsLive(row, now))
			leader = DatumGetTextPP(row->values[Anum_lease_holder - 1]);
	}
	DsyncStoreClose(&store);
	return leader;
}

/*
 * dsync_leader
 *		SQL: dsync_leader(lease) RETURNS text
 *
 * Read-only, so it also works on a hot standby.
 */
Datum
dsync_leader(PG_FUNCTION_ARGS)
{
	text	   *leader = DsyncLeaseLeader(fcinfo, DsyncArgName(fcinfo, 0, "lease"));

	if (leader == NULL)
		PG_RETURN_NULL();
	PG_RETURN_TEXT_P(leader);
}

/*
 * dsync_assert_held
 *		SQL: dsync_assert_held(lease, holder) RETURNS bigint
 *
 * The share lock taken here lasts until the caller's transaction ends.
 */
Datum
dsync_assert_held(PG_FUNCTION_ARGS)
{
	text	   *lease = DsyncArgName(fcinfo, 0, "lease");
	text	   *holder = DsyncArgName(fcinfo, 1, "holder");
	DsyncStore	store;
	DsyncLeaseRow *row;

	DsyncPreventWrite("dsync_assert_held()");

	DsyncStoreOpen(&store, fcinfo, true);
	row = LeaseLockHeld(&store, lease, holder, LockTupleShare);
	DsyncStoreClose(&store);

	if (row == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("lease \"%s\" is not held by \"%s\"",
						text_to_cstring(lease), text_to_cstring(holder)),
				 errdetail("It has expired, was released or taken over, or was acquired by a role you are not a member of.")));
	PG_RETURN_INT64(DatumGetInt64(row->values[Anum_lease_fencing - 1]));
}

/*
 * dsync_force_release
 *		SQL: dsync_force_release(lease, holder DEFAULT NULL) RETURNS int
 *
 * Releases every live holder of the lease (or only the one given),
 * whichever role owns it.  Execution is not granted to PUBLIC.
 */
Datum
dsync_force_release(PG_FUNCTION_ARGS)
{
	text	   *lease = DsyncArgName(fcinfo, 0, "lease");
	text	   *holder = DsyncArgNameOrNull(fcinfo, 1, "holder");
	DsyncStore	store;
	int32		released = 0;
	bool		rescan;

	DsyncPreventWrite("dsync_force_release()");

	DsyncStoreOpen(&store, fcinfo, true);
	do
	{
		List	   *rows = DsyncStoreScan(&store, lease);
		ListCell   *lc;

		CHECK_FOR_INTERRUPTS();
		rescan = false;
		foreach(lc, rows)
		{
			DsyncLeaseRow *row = lfirst(lc);

			if (!DsyncRowIsLive(row, GetCurrentTimestamp()) ||
				(holder && !DsyncRowHolderIs(row, holder)))
				continue;
			if (DsyncStoreLock(&store, row, LockTupleNoKeyExclusive, LockWaitBlock) != TM_Ok)
			{
				rescan = true;
				break;
			}
			if (!DsyncRowIsLive(row, GetCurrentTimestamp()) ||
				(holder && !DsyncRowHolderIs(row, holder)))
				continue;
			DsyncEventRecord(DSYNC_EVENT_RELEASED, row);
			LeaseSetReleased(row);
			DsyncStoreUpdate(&store, row);
			released++;
		}
	} while (rescan);
	DsyncStoreClose(&store);

	PG_RETURN_INT32(released);
}
