/*-------------------------------------------------------------------------
 *
 * leasehold.c
 *		What a holder does with a lease it has: renew, release, leader,
 *		assert_held, and force_release by an administrator.
 *
 * Acquiring is in lease.c, whose header says how rows are found, locked
 * and changed; the functions here follow the same rules.  renew, release
 * and force_release lock with LockWaitBlock, since they act on the caller's
 * own lease and may wait for a guard to finish; assert_held takes a share
 * lock, which conflicts with the exclusive lock every grant needs.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "args.h"
#include "catalog.h"
#include "wait.h"
#include "fencing.h"
#include "store.h"
#include "lazycommit.h"
#include "lease.h"
#include "lease_int.h"
#include "queued.h"
#include "events.h"
#include "ephemeral.h"

PG_FUNCTION_INFO_V1(dsync_renew);
PG_FUNCTION_INFO_V1(dsync_release);
PG_FUNCTION_INFO_V1(dsync_leader);
PG_FUNCTION_INFO_V1(dsync_assert_held);
PG_FUNCTION_INFO_V1(dsync_force_release);
PG_FUNCTION_INFO_V1(dsync_force_release_waits);

/*
 * LeaseFindHeld
 *		The row in which holder holds the lease live now, not locked: its
 *		plain lease, or its permit of a semaphore; *store tells which table
 *		it is in.  NULL if it holds neither.
 */
static DsyncRow *
LeaseFindHeld(LeaseStores *stores, text *lease, text *holder, DsyncStore **store)
{
	TimestampTz now = GetCurrentTimestamp();
	DsyncRow   *row;

	*store = &stores->lease;
	row = DsyncLeaseFindPlain(&stores->lease, lease);
	if (row != NULL && DsyncRowIsLive(row, now) && DsyncRowHolderIs(row, holder))
		return row;
	if (!LeaseMayHavePermits(stores))
		return NULL;
	*store = &stores->permit;
	return DsyncPermitFindHeld(&stores->permit, lease, holder, now);
}

/*
 * LeaseLockHeld
 *		Find and lock the row in which holder holds the lease live (its
 *		plain lease, or its permit of a semaphore), for a change by that
 *		holder.  Returns NULL if it does not hold it (or the caller's role
 *		does not own it); *store tells which table the row is in.
 */
static DsyncRow *
LeaseLockHeld(LeaseStores *stores, text *lease, text *holder, LockTupleMode mode,
			  DsyncStore **store)
{
	for (;;)
	{
		DsyncRow   *row;

		CHECK_FOR_INTERRUPTS();
		row = LeaseFindHeld(stores, lease, holder, store);
		if (row == NULL || !DsyncRowOwnerIsCaller(row, Anum_lease_owner))
			return NULL;
		if (DsyncStoreLock(*store, row, mode, LockWaitBlock) != TM_Ok)
			continue;
		/* If it expired while we waited for the lock, it is not held. */
		return LeaseHeldByCaller(row, holder) ? row : NULL;
	}
}

/*
 * LeaseRenewUsec
 *		The ttl of a renewal: the one given, or else the one the lease
 *		was last acquired with, capped by dsync.max_ttl.
 */
static int64
LeaseRenewUsec(DsyncRow *row, Interval *ttl, int64 ttl_usec)
{
	if (ttl != NULL)
		return ttl_usec;
	/* Checked when read (store.c): a positive interval that fits. */
	(void) DsyncIntervalUsec(DatumGetIntervalP(row->values[Anum_lease_ttl - 1]), &ttl_usec);
	return DsyncCapTtl(ttl_usec);
}

/* What the fast path of release and renew found. */
typedef enum LeaseFast
{
	LEASE_FAST_DONE,			/* changed */
	LEASE_FAST_NOT_HELD,		/* holder does not hold it: nothing to do */
	LEASE_FAST_SLOW				/* the slow path must decide */
} LeaseFast;

/*
 * LeaseChangeFast
 *		The fast path of release and renew (for ttl, ttl_usec) of a plain
 *		lease held live by holder: find its row, write the change in one
 *		update, with no lock taken first.  On LEASE_FAST_DONE, *token is
 *		the lease's token and *expiry the new expiry of a renewal.
 *
 * When the plain row is not held by holder and the database has no
 * permits, the answer is known without the slow path, which would only
 * look again.  A locked row (a guard, the reaper, this transaction) and a
 * name that may have permits go the slow way.
 */
static LeaseFast
LeaseChangeFast(LeaseStores *stores, text *lease, text *holder, bool release,
				Interval *ttl, int64 ttl_usec, int64 *token, TimestampTz *expiry)
{
	for (;;)
	{
		DsyncRow   *row;
		DsyncRow	changed;
		TM_Result	result;

		CHECK_FOR_INTERRUPTS();
		row = DsyncLeaseFindPlain(&stores->lease, lease);
		if (row == NULL || !LeaseHeldByCaller(row, holder))
			return LeaseMayHavePermits(stores) ? LEASE_FAST_SLOW : LEASE_FAST_NOT_HELD;
		changed = *row;
		if (release)
			DsyncLeaseSetReleased(&changed);
		else
		{
			TimestampTz retry_at;

			/*
			 * As in LeaseExtend: an ephemeral grant must not come between
			 * the liveness check and the renewal.
			 */
			if (!DsyncEphemeralExclude(NULL, lease, &retry_at))
				return LEASE_FAST_SLOW;
			if (!DsyncRowIsLive(row, GetCurrentTimestamp()))
			{
				DsyncEphemeralExcludeEnd();
				return LEASE_FAST_SLOW;
			}
			*expiry = LeaseSetRenewal(&changed, LeaseRenewUsec(row, ttl, ttl_usec));
		}
		result = DsyncStoreTryUpdate(&stores->lease, &changed);
		if (!release)
			DsyncEphemeralExcludeEnd();
		switch (result)
		{
			case TM_Ok:
				if (release)
					DsyncEventRecord(DSYNC_EVENT_RELEASED, row);
				else
					LeaseRecordDeadline(&stores->lease, &changed, DsyncRowExpiry(row));
				*token = DatumGetInt64(row->values[Anum_lease_fencing - 1]);
				return LEASE_FAST_DONE;
			case TM_Updated:
			case TM_Deleted:
				continue;
			default:
				return LEASE_FAST_SLOW;
		}
	}
}

/*
 * dsync_renew
 *		SQL: dsync_renew(lease, holder, ttl) RETURNS timestamptz
 *
 * A NULL ttl renews for the ttl the lease was last acquired with (capped
 * by dsync.max_ttl); an explicit ttl applies to this renewal only.
 */
Datum
dsync_renew(PG_FUNCTION_ARGS)
{
	text	   *lease = DsyncArgName(fcinfo, 0, "lease");
	text	   *holder = DsyncArgName(fcinfo, 1, "holder");
	Interval   *ttl;
	int64		ttl_usec = DsyncArgTtl(fcinfo, 2, "ttl", true, &ttl);
	LeaseStores stores;
	DsyncStore *store;
	DsyncRow   *row = NULL;
	TimestampTz expiry = 0;
	int64		token;

	DsyncPreventWrite("dsync_renew()");

	switch (DsyncEphemeralRenew(DsyncCatalogGet(fcinfo), lease, holder, ttl, ttl_usec, &expiry))
	{
		case DSYNC_EPHEMERAL_DONE:
			/* Not undone by a rollback, but a change: no PREPARE after it. */
			DsyncXactChanged();
			DsyncQueuedUse(lease, holder);
			PG_RETURN_TIMESTAMPTZ(expiry);
		case DSYNC_EPHEMERAL_NOT_HELD:
			PG_RETURN_NULL();
		case DSYNC_EPHEMERAL_NONE:
			break;
	}
	LeaseStoresOpen(&stores, fcinfo, true);
	switch (LeaseChangeFast(&stores, lease, holder, false, ttl, ttl_usec, &token, &expiry))
	{
		case LEASE_FAST_DONE:
			LeaseStoresClose(&stores);
			/* Renewed: as good as a claim of a grant made to a queued waiter. */
			DsyncQueuedUse(lease, holder);
			PG_RETURN_TIMESTAMPTZ(expiry);
		case LEASE_FAST_NOT_HELD:
			break;
		case LEASE_FAST_SLOW:
			row = LeaseLockHeld(&stores, lease, holder, LockTupleNoKeyExclusive, &store);
			break;
	}
	if (row)
	{
		TimestampTz previous = DsyncRowExpiry(row);

		expiry = LeaseSetRenewal(row, LeaseRenewUsec(row, ttl, ttl_usec));
		DsyncStoreUpdate(store, row);
		LeaseRecordDeadline(store, row, previous);
	}
	LeaseStoresClose(&stores);

	if (row == NULL)
		PG_RETURN_NULL();
	DsyncQueuedUse(lease, holder);
	PG_RETURN_TIMESTAMPTZ(expiry);
}

/*
 * LeaseHeldCall
 *		The body of dsync_release and dsync_assert_held: lock the lease
 *		(argument 0) held by holder (argument 1) in mode, which lasts until
 *		the caller's transaction ends, then release it if asked.  Returns
 *		its fencing token, or -1 if holder does not hold it.
 */
static int64
LeaseHeldCall(FunctionCallInfo fcinfo, const char *fname, LockTupleMode mode,
			  bool release, text **lease, text **holder)
{
	LeaseStores stores;
	DsyncStore *store;
	DsyncRow   *row;
	int64		token = -1;
	LeaseFast	fast;

	*lease = DsyncArgName(fcinfo, 0, "lease");
	*holder = DsyncArgName(fcinfo, 1, "holder");
	DsyncPreventWrite(fname);

	switch (release ? DsyncEphemeralRelease(*lease, *holder, &token) :
			DsyncEphemeralGuard(*lease, *holder, &token))
	{
		case DSYNC_EPHEMERAL_DONE:
			/* A change (a guard counts itself): no PREPARE after it. */
			DsyncXactChanged();
			return token;
		case DSYNC_EPHEMERAL_NOT_HELD:
			return -1;
		case DSYNC_EPHEMERAL_NONE:
			break;
	}
	LeaseStoresOpen(&stores, fcinfo, true);
	fast = release ? LeaseChangeFast(&stores, *lease, *holder, true, NULL, 0, &token, NULL) :
		LEASE_FAST_SLOW;
	if (fast != LEASE_FAST_SLOW)
	{
		LeaseStoresClose(&stores);
		return fast == LEASE_FAST_DONE ? token : -1;
	}
	row = LeaseLockHeld(&stores, *lease, *holder, mode, &store);
	if (row)
	{
		token = DatumGetInt64(row->values[Anum_lease_fencing - 1]);
		if (release)
			DsyncLeaseRelease(store, row);
	}
	LeaseStoresClose(&stores);
	return token;
}

/*
 * LeaseReleaseGrantIf
 *		Release the grant holder got with token, if it still holds it and,
 *		unless renewed_upto is 0, has not renewed it since renewed_upto.
 */
static DsyncReleaseResult
LeaseReleaseGrantIf(const DsyncCatalog *catalog, text *lease, text *holder, int64 token,
					bool wait, TimestampTz renewed_upto)
{
	LeaseStores stores;
	DsyncReleaseResult result = DSYNC_RELEASE_NOT_HELD;

	LeaseStoresOpenCatalog(&stores, catalog, true);
	for (;;)
	{
		DsyncStore *store;
		DsyncRow   *row;
		TM_Result	locked;

		CHECK_FOR_INTERRUPTS();
		row = LeaseFindHeld(&stores, lease, holder, &store);
		if (row == NULL || DatumGetInt64(row->values[Anum_lease_fencing - 1]) != token)
			break;
		locked = DsyncStoreLock(store, row, LockTupleNoKeyExclusive,
								wait ? LockWaitBlock : LockWaitSkip);
		if (locked == TM_WouldBlock)
		{
			result = DSYNC_RELEASE_BUSY;
			break;
		}
		if (locked != TM_Ok)
			continue;
		if (DsyncRowIsLive(row, GetCurrentTimestamp()) && DsyncRowHolderIs(row, holder) &&
			DatumGetInt64(row->values[Anum_lease_fencing - 1]) == token &&
			(renewed_upto == 0 ||
			 DatumGetTimestampTz(row->values[Anum_lease_renewed_at - 1]) <= renewed_upto))
		{
			DsyncLeaseRelease(store, row);
			result = DSYNC_RELEASE_DONE;
		}
		break;
	}
	LeaseStoresClose(&stores);
	return result;
}

/*
 * DsyncLeaseReleaseGrant
 *		Release the grant holder got with token (its plain lease or its
 *		permit), if it still holds it: a session lease whose backend ended
 *		(session.c), released whatever role the backend acts as by then.
 *		wait: wait for a guard of the lease to end; else report it BUSY.
 */
DsyncReleaseResult
DsyncLeaseReleaseGrant(const DsyncCatalog *catalog, text *lease, text *holder, int64 token,
					   bool wait)
{
	return LeaseReleaseGrantIf(catalog, lease, holder, token, wait, 0);
}

/*
 * DsyncLeasePassOn
 *		Release a grant made to a queued waiter that was not claimed in
 *		time (queuegrant.c), unless its holder has renewed it since it was
 *		made (granted_upto: no later than the grant's row was written): a
 *		renewal is a claim, and one that got in first keeps the lease.
 *		Never waits for a guard (BUSY).
 */
DsyncReleaseResult
DsyncLeasePassOn(const DsyncCatalog *catalog, text *lease, text *holder, int64 token,
				 TimestampTz granted_upto)
{
	return LeaseReleaseGrantIf(catalog, lease, holder, token, false, granted_upto);
}

/*
 * dsync_release
 *		SQL: dsync_release(lease, holder) RETURNS boolean
 *
 * A transaction that only releases commits without waiting for its WAL
 * flush: the next grant's flush carries it (lazycommit.c).
 */
Datum
dsync_release(PG_FUNCTION_ARGS)
{
	text	   *lease,
			   *holder;
	int64		token;
	bool		granted = false;

	DsyncLazyCommitBegin();
	token = LeaseHeldCall(fcinfo, "dsync_release()", LockTupleNoKeyExclusive,
						  true, &lease, &holder);
	/* Released, a grant made to a queued waiter needs no claim any more. */
	if (token >= 0)
		DsyncQueuedUse(lease, holder);
	if (token >= 0)
		DsyncSessionReleased(token);
	DsyncLazyCommitEnd();
	/* The first queued waiter gets it in this transaction (queuegrant.c). */
	if (token >= 0)
		granted = DsyncQueueGrantNext(fcinfo, lease);
	/* An ephemeral release held the worker's poke back for that grant. */
	DsyncQueuedPokeUnhold(granted);
	PG_RETURN_BOOL(token >= 0);
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
	int			permits = DsyncSemaphorePermitsFor(fcinfo, lease, false);
	LeaseStores stores;
	DsyncRow   *row;
	text	   *leader = NULL;
	TimestampTz now = GetCurrentTimestamp();

	if (permits > 1)
		return NULL;
	if (DsyncEphemeralLeader(lease, &leader) == DSYNC_EPHEMERAL_DONE)
		return leader;
	LeaseStoresOpen(&stores, fcinfo, false);
	row = DsyncLeaseFindPlain(&stores.lease, lease);
	if (row && DsyncRowIsLive(row, now))
		leader = DatumGetTextPP(row->values[Anum_lease_holder - 1]);
	else if (permits == 1 && stores.has_permits)
	{
		DsyncScan  *scan = DsyncScanKey(&stores.permit, lease, Int32GetDatum(0));

		row = DsyncScanNext(scan);
		DsyncScanEnd(scan);
		if (row && DsyncRowIsLive(row, now))
			leader = DatumGetTextPP(row->values[Anum_lease_holder - 1]);
	}
	LeaseStoresClose(&stores);
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
	text	   *lease,
			   *holder;
	int64		token = LeaseHeldCall(fcinfo, "dsync_assert_held()", LockTupleShare,
									  false, &lease, &holder);

	if (token < 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("lease \"%s\" is not held by \"%s\"",
						text_to_cstring(lease), text_to_cstring(holder)),
				 errdetail("It has expired, was released or taken over, or was acquired by a role you are not a member of.")));
	PG_RETURN_INT64(token);
}

/*
 * LeaseForceReleaseIn
 *		Release the live holders of a name in one table (or only holder);
 *		returns how many.  With cancel_waits, the queued waits of each
 *		holder released end too.
 */
static int32
LeaseForceReleaseIn(DsyncStore *store, text *lease, text *holder, bool cancel_waits)
{
	int32		released = 0;
	bool		rescan;

	do
	{
		DsyncScan  *scan = holder && store->table == DSYNC_TABLE_PERMIT ?
			DsyncScanHolder(store, lease, holder) :
			store->table == DSYNC_TABLE_LEASE ?
			DsyncScanKey(store, lease, Int32GetDatum(0)) :
			DsyncScanName(store, lease);
		List	   *rows = DsyncScanList(scan);
		ListCell   *lc;

		rescan = false;
		foreach(lc, rows)
		{
			DsyncRow   *row = lfirst(lc);

			if (!DsyncRowIsLive(row, GetCurrentTimestamp()) ||
				(holder && !DsyncRowHolderIs(row, holder)))
				continue;
			if (DsyncStoreLock(store, row, LockTupleNoKeyExclusive, LockWaitBlock) != TM_Ok)
			{
				rescan = true;
				break;
			}
			if (!DsyncRowIsLive(row, GetCurrentTimestamp()) ||
				(holder && !DsyncRowHolderIs(row, holder)))
				continue;
			if (cancel_waits)
				DsyncWaitEvict(DsyncWaitKey(lease),
							   DatumGetObjectId(row->values[Anum_lease_owner - 1]));
			/* A grant made to it as a queued waiter is not to be claimed now. */
			DsyncQueuedForgetGrant(lease, DatumGetTextPP(row->values[Anum_lease_holder - 1]));
			DsyncLeaseRelease(store, row);
			released++;
		}
	} while (rescan);
	return released;
}

/*
 * LeaseForceRelease
 *		dsync_force_release, with or without ending the released holders'
 *		queued waits.
 */
static int32
LeaseForceRelease(FunctionCallInfo fcinfo, text *lease, text *holder, bool cancel_waits)
{
	LeaseStores stores;
	int32		released;

	DsyncPreventWrite("dsync_force_release()");

	released = DsyncEphemeralForceRelease(lease, holder, cancel_waits);
	if (released > 0)
		DsyncXactChanged();		/* no PREPARE after it, as after a release */
	LeaseStoresOpen(&stores, fcinfo, true);
	released += LeaseForceReleaseIn(&stores.lease, lease, holder, cancel_waits);
	if (stores.has_permits)
		released += LeaseForceReleaseIn(&stores.permit, lease, holder, cancel_waits);
	LeaseStoresClose(&stores);
	return released;
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

	PG_RETURN_INT32(LeaseForceRelease(fcinfo, lease, holder, false));
}

/*
 * dsync_force_release_waits
 *		SQL: dsync_force_release(lease, holder, cancel_waits) RETURNS int
 *
 * The same; with cancel_waits true, the queued waits for this lease of
 * the roles that owned what was released end with an error, so that a
 * holder an administrator removed cannot take the lease straight back
 * through a wait it (or another session of its role) had queued.
 */
Datum
dsync_force_release_waits(PG_FUNCTION_ARGS)
{
	text	   *lease = DsyncArgName(fcinfo, 0, "lease");
	text	   *holder = DsyncArgNameOrNull(fcinfo, 1, "holder");
	bool		cancel_waits;

	DsyncArgNotNull(fcinfo, 2, "cancel_waits");
	cancel_waits = PG_GETARG_BOOL(2);
	PG_RETURN_INT32(LeaseForceRelease(fcinfo, lease, holder, cancel_waits));
}
