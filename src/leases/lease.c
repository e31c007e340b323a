/*-------------------------------------------------------------------------
 *
 * lease.c
 *		Acquiring a lease: the grant, and the wait of a blocked acquirer.
 *		What a holder does next (renew, release, ...) is in leasehold.c.
 *
 * A plain lease (a name with no semaphore definition) is one row of
 * dsync_lease, slot 0; a semaphore's permits are rows of dsync_permit
 * (permit.c).  A lease is held when its row has a holder and expires_at is
 * after the server clock's now; nothing else (no cleanup pass) decides it.
 * Decisions are made on the latest committed version, checked against a
 * fresh clock reading.  A grant, renewal or release of a plain lease whose
 * row nobody has locked is one heap_update that fails rather than wait if
 * the row changed or is locked (the fast path, one WAL record); otherwise
 * the row is locked first:
 *
 *	- acquire locks with LockWaitSkip and treats a row it cannot lock as
 *	  taken, so it never waits for another transaction;
 *	- renew, release and force_release lock with LockWaitBlock: they act
 *	  on the caller's own lease and may wait for a guard to finish;
 *	- assert_held takes a share lock, which conflicts with the exclusive
 *	  lock every grant needs, so until the guarding transaction ends nobody
 *	  else can take the lease, even once it has expired.
 *
 * If a row changed between the scan and the lock or update (TM_Updated),
 * the whole decision is made again from a new scan.  A plain lease's row is
 * found where the location cache says it is (locate.c), else with one
 * index probe; a database with no semaphores never looks in their tables.
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
#include "lease.h"
#include "lease_int.h"
#include "events.h"
#include "ephemeral.h"
#include "fence.h"
#include "heldmap.h"

PG_FUNCTION_INFO_V1(dsync_acquire);

/* What a blocked acquirer's tries need. */
typedef struct LeaseTryArgs
{
	FunctionCallInfo fcinfo;
	text	   *lease;
	const LeaseGrant *grant;
	bool		durable;		/* false: an ephemeral lease (ephemeral.c) */
	uint32		hash;			/* DsyncNameHash of the lease */
	int64		token;
	uint64		fresh;			/* a new ephemeral grant's generation, or 0 */
} LeaseTryArgs;

/*
 * DsyncLeaseFindPlain
 *		The row of a plain lease (slot 0 of dsync_lease), or NULL: from
 *		its cached location, or one index probe.
 */
DsyncRow *
DsyncLeaseFindPlain(DsyncStore *store, text *lease)
{
	return DsyncScanKeyLatest(store, lease, 0);
}

/*
 * DsyncLeaseSetGrant
 *		Fill a row for a new grant: a new fencing token and a fresh expiry.
 */
void
DsyncLeaseSetGrant(DsyncStore *store, DsyncRow *row, const LeaseGrant *grant)
{
	int64		token = DsyncNextFencingToken(store->catalog);
	TimestampTz now = GetCurrentTimestamp();

	DsyncRowSet(row, Anum_lease_holder, PointerGetDatum(grant->holder));
	DsyncRowSet(row, Anum_lease_fencing, Int64GetDatum(token));
	DsyncRowSet(row, Anum_lease_acquired_at, TimestampTzGetDatum(now));
	DsyncRowSet(row, Anum_lease_renewed_at, TimestampTzGetDatum(now));
	DsyncRowSet(row, Anum_lease_expires_at,
				TimestampTzGetDatum(DsyncExpiry(now, grant->ttl_usec, "ttl")));
	DsyncRowSet(row, Anum_lease_ttl, IntervalPGetDatum(grant->ttl));
	row->values[Anum_lease_info - 1] = grant->info;
	row->nulls[Anum_lease_info - 1] = grant->info_null;
	DsyncRowSet(row, Anum_lease_owner, ObjectIdGetDatum(GetUserId()));
}

/*
 * LeaseSetRenewal
 *		Push a held row's expiry to now + ttl_usec; returns the new expiry.
 */
TimestampTz
LeaseSetRenewal(DsyncRow *row, int64 ttl_usec)
{
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz expiry = DsyncExpiry(now, ttl_usec, "ttl");

	row->values[Anum_lease_renewed_at - 1] = TimestampTzGetDatum(now);
	row->values[Anum_lease_expires_at - 1] = TimestampTzGetDatum(expiry);
	return expiry;
}

/*
 * LeaseRecordDeadline
 *		After a renewal that moved an expiry earlier, tell the reaper:
 *		later deadlines it finds by itself, earlier ones it must be told.
 */
void
LeaseRecordDeadline(DsyncStore *store, DsyncRow *row, TimestampTz previous)
{
	if (DsyncRowExpiry(row) < previous)
		DsyncEventRecord(store->table == DSYNC_TABLE_PERMIT ?
						 DSYNC_EVENT_PERMIT_DEADLINE : DSYNC_EVENT_DEADLINE, row);
	DsyncEventRecordRenewal();
}

/*
 * LeaseSetExtension
 *		Fill a row a holder acquires again: a fresh expiry, the new ttl
 *		and (if given) info; the token stays.
 */
static void
LeaseSetExtension(DsyncRow *row, const LeaseGrant *grant)
{
	(void) LeaseSetRenewal(row, grant->ttl_usec);
	row->values[Anum_lease_ttl - 1] = IntervalPGetDatum(grant->ttl);
	if (!grant->info_null)
		DsyncRowSet(row, Anum_lease_info, grant->info);
}

/*
 * DsyncLeaseRenewRow
 *		A reentrant acquire of a locked row the holder has: extend it, keep
 *		the token, take the new ttl and (if given) info.
 */
void
DsyncLeaseRenewRow(DsyncStore *store, DsyncRow *row, const LeaseGrant *grant)
{
	TimestampTz previous = DsyncRowExpiry(row);

	LeaseSetExtension(row, grant);
	DsyncStoreUpdate(store, row);
	LeaseRecordDeadline(store, row, previous);
}

/*
 * DsyncLeaseSetReleased
 *		Clear a row's holder.  The row stays, so the next grant of this
 *		name is a HOT update rather than an insert; renewed_at records
 *		when it was let go, from which the reaper removes rows that stay
 *		unused (dsync.idle_row_retention).
 */
void
DsyncLeaseSetReleased(DsyncRow *row)
{
	row->nulls[Anum_lease_holder - 1] = true;
	row->nulls[Anum_lease_info - 1] = true;
	DsyncRowSet(row, Anum_lease_renewed_at, TimestampTzGetDatum(GetCurrentTimestamp()));
}

/*
 * DsyncLeaseRelease
 *		Let go of a locked row that is held: announce it, clear it, write
 *		it back.
 */
void
DsyncLeaseRelease(DsyncStore *store, DsyncRow *row)
{
	DsyncEventRecord(store->table == DSYNC_TABLE_PERMIT ?
					 DSYNC_EVENT_PERMIT_RELEASED : DSYNC_EVENT_RELEASED, row);
	DsyncLeaseSetReleased(row);
	DsyncStoreUpdate(store, row);
}

/*
 * LeasePermitHolders
 *		The holders a name has in dsync_permit while it has no semaphore:
 *		its shared holders (shared.c), and holders of a dropped semaphore's
 *		permits, who keep them until they let go.  An expired one that a
 *		transaction still guards or changes counts too.  Sets *mine to the
 *		caller's holder's live row, if it is one of them, and *earliest to
 *		their earliest expiry.  Read as last committed: an exclusive grant
 *		asks once it has locked or written the plain row, which no shared
 *		grant in progress lets it do.
 */
static int	lease_expired_permits = 0;	/* LeasePermitHolders found, to clear */

static int
LeasePermitHolders(LeaseStores *stores, text *lease, text *holder, DsyncRow **mine,
				   TimestampTz *earliest)
{
	DsyncScan  *scan;
	DsyncRow   *row;
	TimestampTz now = GetCurrentTimestamp();
	int			live = 0;

	*mine = NULL;
	lease_expired_permits = 0;
	if (!LeaseMayHavePermits(stores))
		return 0;
	scan = DsyncScanName(&stores->permit, lease);
	while ((row = DsyncScanNext(scan)) != NULL)
	{
		if (row->nulls[Anum_lease_holder - 1])
			continue;
		if (!DsyncRowIsLive(row, now))
		{
			if (!row->unlocked && DsyncRowXmaxRunning(row))
				live++;			/* guarded past its expiry */
			else
				lease_expired_permits++;	/* LeaseClearExpired */
			continue;
		}
		live++;
		if (DsyncRowHolderIs(row, holder))
			*mine = row;
		if (*earliest == 0 || DsyncRowExpiry(row) < *earliest)
			*earliest = DsyncRowExpiry(row);
	}
	DsyncScanEnd(scan);
	return live;
}

/*
 * LeaseClearExpired
 *		Before an exclusive grant is recorded, when the last
 *		LeasePermitHolders found holders in dsync_permit whose time has
 *		passed (shared holders, a dropped semaphore's permits): clear them
 *		and announce their expiry, as the reaper would, so that each
 *		"expired" comes before our "acquired" (both ours, in commit order)
 *		rather than whenever the reaper commits.  No shared grant can begin
 *		meanwhile (the caller holds the plain row or its insert claim).  A
 *		row the reaper is clearing is waited for (DsyncStoreLock) and then
 *		found changed: cleared.  False if another transaction has one
 *		locked: no grant now; its end wakes the name's waiters.
 */
static bool
LeaseClearExpired(LeaseStores *stores, text *lease)
{
	DsyncScan  *scan;
	DsyncRow   *row;
	bool		ok = true;

	if (lease_expired_permits == 0)
		return true;
	scan = DsyncScanName(&stores->permit, lease);
	while (ok && (row = DsyncScanNext(scan)) != NULL)
	{
		if (row->nulls[Anum_lease_holder - 1] || DsyncRowIsLive(row, GetCurrentTimestamp()))
			continue;
		switch (DsyncStoreLock(&stores->permit, row, LockTupleNoKeyExclusive, LockWaitSkip))
		{
			case TM_Ok:
				if (row->nulls[Anum_lease_holder - 1] ||
					DsyncRowIsLive(row, GetCurrentTimestamp()))
					break;
				DsyncEventRecord(DSYNC_EVENT_EXPIRED, row);
				DsyncLeaseSetReleased(row);
				DsyncStoreUpdate(&stores->permit, row);
				break;
			case TM_WouldBlock:
				ok = false;
				break;
			default:
				break;			/* changed since it was read: cleared */
		}
	}
	DsyncScanEnd(scan);
	lease_expired_permits = 0;
	return ok;
}

/*
 * LeaseRefuseUpgrade
 *		A holder asking for exclusively the lease it holds shared: it would
 *		wait for itself.
 */
static void
LeaseRefuseUpgrade(text *lease, text *holder)
{
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("lease \"%s\" is held shared by holder \"%s\"",
					text_to_cstring(lease), text_to_cstring(holder)),
			 errdetail("A shared holder cannot take its lease exclusively."),
			 errhint("Release the shared lease with dsync_release() first.")));
}

/*
 * LeaseTakeOver
 *		The fast path of a grant of a free or expired row read with no
 *		lock: write the grant over it in one update, holding ephemeral
 *		grants of the name off while it does.  TM_Ok: granted, the token
 *		set, the events recorded.  Otherwise nothing was granted: the row
 *		changed (TM_Updated, TM_Deleted), is locked (TM_BeingModified), or
 *		an ephemeral lease holds the name (TM_WouldBlock, *retry_at set),
 *		or another transaction has an expired shared holder of it locked
 *		(TM_WouldBlock).  Expired shared holders are cleared and announced
 *		first (LeaseClearExpired).
 *
 * A shared grant locks the row before it writes its own (shared.c), so it
 * cannot run while the update holds the row; but one that locked the row,
 * wrote its own and committed between the caller's look for shared
 * holders and the update would be missed.  So the look is made again once
 * the update holds the row (after the ephemeral window: it may open
 * relations); in that rare case the row gets its previous values back
 * (the update still holds it until our transaction ends) and the caller
 * looks again.
 */
static TM_Result
LeaseTakeOver(LeaseStores *stores, DsyncRow *row, const LeaseGrant *grant, int64 *token,
			  TimestampTz *retry_at)
{
	DsyncStore *store = &stores->lease;
	text	   *lease = DatumGetTextPP(row->values[Anum_lease_name - 1]);
	DsyncRow	grant_row = *row;
	TM_Result	result;
	DsyncRow   *mine;
	TimestampTz earliest = 0;
	int			holders;

	if (!DsyncEphemeralExclude(store->catalog, lease, retry_at))
		return TM_WouldBlock;
	DsyncLeaseSetGrant(store, &grant_row, grant);
	result = DsyncStoreTryUpdate(store, &grant_row);
	DsyncEphemeralExcludeEnd();
	if (result != TM_Ok)
		return result;
	holders = LeasePermitHolders(stores, lease, grant->holder, &mine, &earliest);
	if (holders > 0 || !LeaseClearExpired(stores, lease))
	{
		DsyncRow	undo = *row;

		undo.tid = grant_row.tid;
		DsyncStoreUpdate(store, &undo);
		/* An expired one another transaction has locked: not now. */
		return holders > 0 ? TM_Updated : TM_WouldBlock;
	}
	/* Taking over an expired lease announces its expiry first. */
	if (!row->nulls[Anum_lease_holder - 1])
		DsyncEventRecord(DSYNC_EVENT_EXPIRED, row);
	DsyncEventRecord(DSYNC_EVENT_ACQUIRED, &grant_row);
	*token = DatumGetInt64(grant_row.values[Anum_lease_fencing - 1]);
	return TM_Ok;
}

/*
 * LeaseExtend
 *		The fast path of a reentrant acquire of a row read with no lock
 *		and held live by the caller: extend it in one update.  On TM_Ok
 *		row is the new version; otherwise nothing was done, as for
 *		LeaseTakeOver.
 */
TM_Result
LeaseExtend(DsyncStore *store, DsyncRow *row, const LeaseGrant *grant)
{
	DsyncRow	extended = *row;
	TimestampTz previous = DsyncRowExpiry(row);
	TM_Result	result;
	TimestampTz retry_at;

	/*
	 * Expired since it was read: a new grant, with a new token.  Checked
	 * while ephemeral grants of the name are held off, or one could take
	 * the name between the check and the update, which would revive it.
	 */
	if (!DsyncEphemeralExclude(NULL, DatumGetTextPP(row->values[Anum_lease_name - 1]),
							   &retry_at))
		return TM_Updated;
	if (!DsyncRowIsLive(row, GetCurrentTimestamp()))
	{
		DsyncEphemeralExcludeEnd();
		return TM_Updated;
	}
	LeaseSetExtension(&extended, grant);
	result = DsyncStoreTryUpdate(store, &extended);
	DsyncEphemeralExcludeEnd();
	if (result == TM_Ok)
	{
		*row = extended;
		LeaseRecordDeadline(store, row, previous);
	}
	return result;
}

/*
 * LeaseTryAcquire
 *		Grant a plain lease to the holder if it is free now, without
 *		waiting for any other transaction.  Returns true and the fencing
 *		token on success; otherwise sets *retry_at to the current holder's
 *		expiry (0 if unknown).
 *
 * A holder that already has the lease always gets its extension.  Anybody
 * else takes it only if may_take: queued waiters go first.
 */
static bool
LeaseTryAcquire(LeaseStores *stores, text *lease, const LeaseGrant *grant,
				bool may_take, int64 *token, TimestampTz *retry_at)
{
	for (;;)
	{
		DsyncRow   *row;
		DsyncRow   *mine;
		TimestampTz now = GetCurrentTimestamp();
		TM_Result	result;

		CHECK_FOR_INTERRUPTS();
		*retry_at = 0;
		row = DsyncLeaseFindPlain(&stores->lease, lease);

		/* Reentrant: the holder already has it; extend and keep the token. */
		if (row && DsyncRowIsLive(row, now) && DsyncRowHolderIs(row, grant->holder))
		{
			if (!DsyncRowOwnerIsCaller(row, Anum_lease_owner))
				return false;
			result = LeaseExtend(&stores->lease, row, grant);
			if (result == TM_Ok)
			{
				*token = DatumGetInt64(row->values[Anum_lease_fencing - 1]);
				return true;
			}
			if (result != TM_BeingModified)
				continue;
			result = DsyncStoreLock(&stores->lease, row, LockTupleNoKeyExclusive, LockWaitSkip);
			if (result == TM_WouldBlock)
				return false;
			if (result != TM_Ok || !LeaseHeldByCaller(row, grant->holder))
				continue;		/* changed or expired as we locked it: look again */
			DsyncLeaseRenewRow(&stores->lease, row, grant);
			*token = DatumGetInt64(row->values[Anum_lease_fencing - 1]);
			return true;
		}
		if (row && DsyncRowIsLive(row, now))
		{
			*retry_at = DsyncRowExpiry(row);
			return false;
		}

		/*
		 * Shared holders, and holders of a dropped semaphore's permits,
		 * keep the name busy.  Looked at again once the row is ours.
		 */
		if (LeasePermitHolders(stores, lease, grant->holder, &mine, retry_at) > 0)
		{
			if (mine == NULL || !DsyncRowOwnerIsCaller(mine, Anum_lease_owner))
				return false;
			if (DsyncRowSlot(mine) >= DSYNC_SHARED_SLOT)
				LeaseRefuseUpgrade(lease, grant->holder);
			result = DsyncStoreLock(&stores->permit, mine, LockTupleNoKeyExclusive,
									LockWaitSkip);
			if (result == TM_WouldBlock)
				return false;
			if (result != TM_Ok || !LeaseHeldByCaller(mine, grant->holder))
				continue;
			DsyncLeaseRenewRow(&stores->permit, mine, grant);
			*token = DatumGetInt64(mine->values[Anum_lease_fencing - 1]);
			return true;
		}

		if (!may_take)
			return false;

		if (row == NULL)
		{
			DsyncRow   *fresh;

			/* A name never used, or removed while idle: insert its row. */
			switch (DsyncStoreClaimKey(&stores->lease, lease, Int32GetDatum(0), false))
			{
				case DSYNC_CLAIM_BUSY:
					return false;
				case DSYNC_CLAIM_EXISTS:
					continue;
				case DSYNC_CLAIM_OK:
					break;
			}
			/*
			 * Shared holders of a name with no plain row claim its insert
			 * in share mode while they write theirs: now that we hold the
			 * claim, theirs are all written, committed or not.
			 */
			if (LeasePermitHolders(stores, lease, grant->holder, &mine, retry_at) > 0 ||
				(LeaseMayHavePermits(stores) &&
				 DsyncStoreKeysTaken(&stores->permit, lease, Int32GetDatum(DSYNC_SHARED_SLOT),
									 true, GetCurrentTimestamp(), retry_at)) ||
				!LeaseClearExpired(stores, lease) ||
				!DsyncEphemeralExclude(stores->lease.catalog, lease, retry_at))
			{
				DsyncStoreUnclaimKey(&stores->lease, lease, Int32GetDatum(0));
				return false;
			}
			fresh = DsyncStoreNewRow();
			DsyncRowSet(fresh, Anum_lease_name, PointerGetDatum(lease));
			DsyncRowSet(fresh, Anum_lease_slot, Int32GetDatum(0));
			DsyncLeaseSetGrant(&stores->lease, fresh, grant);
			DsyncStoreInsert(&stores->lease, fresh);
			DsyncEphemeralExcludeEnd();
			DsyncStoreUnclaimKey(&stores->lease, lease, Int32GetDatum(0));
			DsyncEventRecord(DSYNC_EVENT_ACQUIRED, fresh);
			*token = DatumGetInt64(fresh->values[Anum_lease_fencing - 1]);
			return true;
		}

		/* Free or expired: take it if nobody else is changing it. */
		result = LeaseTakeOver(stores, row, grant, token, retry_at);
		switch (result)
		{
			case TM_Ok:
				return true;
			case TM_WouldBlock:
				return false;	/* an ephemeral lease holds it */
			case TM_Updated:
			case TM_Deleted:
				continue;
			default:
				break;			/* locked by someone: the slow path decides */
		}
		result = DsyncStoreLock(&stores->lease, row, LockTupleNoKeyExclusive, LockWaitSkip);
		if (result == TM_WouldBlock)
			return false;
		if (result != TM_Ok || DsyncRowIsLive(row, GetCurrentTimestamp()))
			continue;
		/* The row is ours: no shared grant can begin now. */
		if (LeasePermitHolders(stores, lease, grant->holder, &mine, retry_at) > 0 ||
			!LeaseClearExpired(stores, lease))
			return false;
		if (!DsyncEphemeralExclude(stores->lease.catalog, lease, retry_at))
			return false;
		/* Taking over an expired lease announces its expiry first. */
		if (!row->nulls[Anum_lease_holder - 1])
			DsyncEventRecord(DSYNC_EVENT_EXPIRED, row);
		DsyncLeaseSetGrant(&stores->lease, row, grant);
		DsyncStoreUpdate(&stores->lease, row);
		DsyncEphemeralExcludeEnd();
		DsyncEventRecord(DSYNC_EVENT_ACQUIRED, row);
		*token = DatumGetInt64(row->values[Anum_lease_fencing - 1]);
		return true;
	}
}

/*
 * LeaseTry
 *		One try of dsync_acquire: a semaphore's permit if the name has a
 *		definition, else the plain lease.
 */
static bool
LeaseTry(void *arg, bool may_take, bool thorough, TimestampTz *retry_at)
{
	LeaseTryArgs *args = arg;
	const DsyncCatalog *catalog = DsyncCatalogGet(args->fcinfo);
	int			permits = -1;
	LeaseStores stores;
	bool		granted;
	uint64		fresh = 0;

	*retry_at = 0;
	/* A writer held a fence the last try had to raise: wait for it first. */
	DsyncFencePrewait(catalog);
	/* A semaphore's name was refused before (DsyncEphemeralCheckGrant). */
	if (!args->durable)
		granted = DsyncEphemeralTryAcquire(args->fcinfo, args->lease, args->grant, may_take,
										   &args->token, &fresh, retry_at);
	else if ((permits = DsyncSemaphorePermitsFor(args->fcinfo, args->lease, true)) >= 0)
		granted = DsyncPermitTryAcquire(args->fcinfo, args->lease, args->grant, permits,
										may_take, thorough, &args->token, retry_at);
	else
	{
		LeaseStoresOpen(&stores, args->fcinfo, true);
		granted = LeaseTryAcquire(&stores, args->lease, args->grant, may_take,
								  &args->token, retry_at);
		LeaseStoresClose(&stores);
	}
	if (!granted)
		return false;
	args->fresh = fresh;
	if (!DsyncLeaseRaiseFences(catalog, args->lease, args->hash, args->token, fresh))
	{
		/* Rolled back; the next try waits for the writer, at once. */
		*retry_at = GetCurrentTimestamp();
		return false;
	}
	if (args->durable && permits < 0)
		DsyncWaitGrantExcludes(args->lease, args->grant->ttl_usec);
	return true;
}

/*
 * DsyncLeaseRaiseFences
 *		After a grant of lease with token, in its transaction: raise the
 *		fences bound to the lease to the token (fencebind.c).  False if
 *		that cannot be done without a wait the try may not make (wait = 0,
 *		or past its deadline): the caller must then report no grant, and
 *		its try is rolled back.
 *		fresh: the generation of a new ephemeral grant (0 for any other),
 *		which a rollback must then undo with the raise (ephbound.c).  hash:
 *		the lease's DsyncNameHash.
 */
bool
DsyncLeaseRaiseFences(const DsyncCatalog *catalog, text *lease, uint32 hash, int64 token,
					  uint64 fresh)
{
	DsyncRaise	raised;

	if (!DsyncFenceMayBeBound(catalog, hash))
		return true;
	/* Noted first: an error in the raise rolls the grant back too. */
	if (fresh != 0)
		DsyncEphemeralUndoAtAbort(lease, fresh);
	raised = DsyncFenceRaiseBound(catalog, lease, token);
	if (raised == DSYNC_RAISE_UNBOUND && fresh != 0)
		DsyncEphemeralUndoForget(fresh);
	return raised != DSYNC_RAISE_BUSY;
}

/*
 * LeaseTryGrantKind
 *		One try of a grant of lease to grant's holder, durable or not,
 *		outside a blocked caller's loop; *fresh: a new ephemeral grant's
 *		generation, or 0.
 */
static bool
LeaseTryGrantKind(FunctionCallInfo fcinfo, text *lease, const LeaseGrant *grant, bool durable,
				  bool may_take, bool thorough, int64 *token, uint64 *fresh,
				  TimestampTz *retry_at)
{
	LeaseTryArgs args;
	bool		granted;

	args.fcinfo = fcinfo;
	args.lease = lease;
	args.grant = grant;
	args.durable = durable;
	args.hash = DsyncNameHash(lease);
	args.token = 0;
	args.fresh = 0;
	granted = LeaseTry(&args, may_take, thorough, retry_at);
	*token = args.token;
	*fresh = args.fresh;
	return granted;
}

/*
 * DsyncLeaseTryGrant
 *		One try of a durable grant of lease (a plain lease or a permit) to
 *		grant's holder, never waiting for another transaction: the step
 *		dsync_acquire_all makes for each of its names.  may_take: nobody
 *		is ahead in the name's queue.
 */
bool
DsyncLeaseTryGrant(FunctionCallInfo fcinfo, text *lease, const LeaseGrant *grant,
				   bool may_take, bool thorough, int64 *token, TimestampTz *retry_at)
{
	uint64		fresh;

	return LeaseTryGrantKind(fcinfo, lease, grant, true, may_take, thorough, token, &fresh,
							 retry_at);
}

/*
 * DsyncLeaseTryGrantEphemeral
 *		One try of an ephemeral grant of lease to grant's holder (a queued
 *		waiter's), as DsyncLeaseTryGrant.  *undone_at_abort: the grant
 *		raised a bound fence, so a rollback of this transaction takes it
 *		back; otherwise it stands whatever the transaction does.
 */
bool
DsyncLeaseTryGrantEphemeral(FunctionCallInfo fcinfo, text *lease, const LeaseGrant *grant,
							bool may_take, int64 *token, bool *undone_at_abort,
							TimestampTz *retry_at)
{
	uint64		fresh;
	bool		granted;

	granted = LeaseTryGrantKind(fcinfo, lease, grant, false, may_take, false, token, &fresh,
								retry_at);
	*undone_at_abort = granted && fresh != 0 && DsyncEphemeralUndoNoted(fresh);
	return granted;
}

/*
 * DsyncLeaseGrantArgs
 *		The arguments every acquire function takes after the name: holder,
 *		ttl, wait and info (positions 1 to 4), checked.
 */
void
DsyncLeaseGrantArgs(FunctionCallInfo fcinfo, LeaseGrant *grant, bool *wait_forever,
					int64 *wait_usec)
{
	grant->holder = DsyncArgName(fcinfo, 1, "holder");
	grant->ttl_usec = DsyncArgTtl(fcinfo, 2, "ttl", false, &grant->ttl);
	(void) DsyncExpiry(GetCurrentTimestamp(), grant->ttl_usec, "ttl");
	DsyncArgWait(fcinfo, 3, "wait", wait_forever, wait_usec);
	grant->info_null = PG_ARGISNULL(4);
	grant->info = grant->info_null ? (Datum) 0 : JsonbPGetDatum(PG_GETARG_JSONB_P(4));
}

/*
 * DsyncLeaseAcquireWait
 *		Acquire one name with try_fn: in the name's queue for up to the
 *		wait (kind shows in dsync_waiters), or with wait = 0 one try that
 *		respects the queue.
 */
bool
DsyncLeaseAcquireWait(const DsyncCatalog *catalog, text *lease, uint32 hash, text *holder,
					  const char *kind, DsyncTryFunc try_fn, void *arg, bool wait_forever,
					  int64 wait_usec)
{
	DsyncWaitSpec spec;
	TimestampTz retry_at;
	bool		once = !wait_forever && wait_usec == 0;

	DsyncFenceForgetBusy();

	/*
	 * A grant that must raise a fence may find a writer holding it, and
	 * then must not be made: it is tried in a subtransaction, as a
	 * blocked caller's tries are, so that it can be undone.
	 */
	if (once && !DsyncFenceMayBeBound(catalog, hash))
		return try_fn(arg, DsyncWaitMayTake(DsyncWaitKey(lease), InvalidOid), false, &retry_at);
	spec.key = DsyncWaitKey(lease);
	spec.roleid = InvalidOid;
	spec.kind = kind;
	spec.name = lease;
	spec.holder = holder;
	spec.forever = wait_forever;
	spec.deadline = wait_forever ? 0 : DsyncExpiry(GetCurrentTimestamp(), wait_usec, "wait");
	spec.try_fn = try_fn;
	spec.arg = arg;
	if (once)
		return DsyncWaitTryOnce(&spec, DsyncWaitMayTake(spec.key, InvalidOid));
	return DsyncWaitFor(&spec);
}

/*
 * dsync_acquire
 *		SQL: dsync_acquire(lease, holder, ttl, wait, info, durable, session)
 *		RETURNS bigint (durable from 1.3 on, session from 1.4 on)
 */
Datum
dsync_acquire(PG_FUNCTION_ARGS)
{
	text	   *lease = DsyncArgName(fcinfo, 0, "lease");
	LeaseGrant	grant;
	LeaseTryArgs args;
	bool		wait_forever;
	int64		wait_usec;
	bool		granted;
	bool		session = false;

	DsyncLeaseGrantArgs(fcinfo, &grant, &wait_forever, &wait_usec);
	args.durable = true;
	if (PG_NARGS() > 5)
	{
		DsyncArgNotNull(fcinfo, 5, "durable");
		args.durable = PG_GETARG_BOOL(5);
	}
	if (PG_NARGS() > 6)
	{
		DsyncArgNotNull(fcinfo, 6, "session");
		session = PG_GETARG_BOOL(6);
	}

	DsyncPreventWrite("dsync_acquire()");
	if (!args.durable)
		DsyncEphemeralCheckGrant(fcinfo, lease, &grant);

	args.fcinfo = fcinfo;
	args.lease = lease;
	args.grant = &grant;
	args.hash = DsyncNameHash(lease);
	args.token = 0;
	args.fresh = 0;
	granted = DsyncLeaseAcquireWait(DsyncCatalogGet(fcinfo), lease, args.hash, grant.holder,
									(wait_forever || wait_usec > 0) &&
									DsyncSemaphorePermits(fcinfo, lease) > 1 ? "semaphore" : "lease",
									LeaseTry, &args, wait_forever, wait_usec);

	if (!granted)
		PG_RETURN_NULL();
	/* An ephemeral grant writes no row, but is a change all the same. */
	if (!args.durable)
		DsyncXactChanged();
	if (session)
		DsyncSessionNote(DsyncCatalogGet(fcinfo), lease, grant.holder, args.token, args.durable);
	PG_RETURN_INT64(args.token);
}

