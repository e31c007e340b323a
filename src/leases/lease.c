/*-------------------------------------------------------------------------
 *
 * lease.c
 *		The lease functions: acquire, renew, release, leader, assert_held
 *		and force_release.
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
#include "events.h"
#include "ephemeral.h"

PG_FUNCTION_INFO_V1(dsync_acquire);
PG_FUNCTION_INFO_V1(dsync_renew);
PG_FUNCTION_INFO_V1(dsync_release);
PG_FUNCTION_INFO_V1(dsync_leader);
PG_FUNCTION_INFO_V1(dsync_assert_held);
PG_FUNCTION_INFO_V1(dsync_force_release);
PG_FUNCTION_INFO_V1(dsync_force_release_waits);

/* The tables a lease's holders may be in. */
typedef struct LeaseStores
{
	DsyncStore	lease;
	DsyncStore	permit;
	bool		has_permits;	/* dsync_permit exists (1.2) */
} LeaseStores;

static void LeaseStoresOpenCatalog(LeaseStores *stores, const DsyncCatalog *catalog,
								   bool for_write);

/* What a blocked acquirer's tries need. */
typedef struct LeaseTryArgs
{
	FunctionCallInfo fcinfo;
	text	   *lease;
	const LeaseGrant *grant;
	bool		durable;		/* false: an ephemeral lease (ephemeral.c) */
	int64		token;
} LeaseTryArgs;

/*
 * LeaseStoresOpen
 *		Open dsync_lease and, where installed, dsync_permit.
 */
static void
LeaseStoresOpen(LeaseStores *stores, FunctionCallInfo fcinfo, bool for_write)
{
	LeaseStoresOpenCatalog(stores, DsyncCatalogGet(fcinfo), for_write);
}

/*
 * LeaseStoresOpenCatalog
 *		LeaseStoresOpen, given where the extension's tables are.
 */
static void
LeaseStoresOpenCatalog(LeaseStores *stores, const DsyncCatalog *catalog, bool for_write)
{
	DsyncStoreOpenCatalog(&stores->lease, catalog, DSYNC_TABLE_LEASE, for_write);
	stores->has_permits = OidIsValid(catalog->rels[DSYNC_TABLE_PERMIT]);
	if (stores->has_permits)
		DsyncStoreOpenCatalog(&stores->permit, catalog, DSYNC_TABLE_PERMIT, for_write);
}

/*
 * LeaseStoresClose
 *		Close what LeaseStoresOpen opened.
 */
static void
LeaseStoresClose(LeaseStores *stores)
{
	if (stores->has_permits)
		DsyncStoreClose(&stores->permit);
	DsyncStoreClose(&stores->lease);
}

/*
 * LeaseMayHavePermits
 *		Whether dsync_permit may hold a row: it is installed, the database
 *		may use semaphores (DsyncSemaphoresUnused, remembered), and it has
 *		pages.
 */
static bool
LeaseMayHavePermits(LeaseStores *stores)
{
	return stores->has_permits && !DsyncSemaphoresUnused(stores->lease.catalog) &&
		DsyncStoreBlockCount(stores->permit.rel) > 0;
}

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
 * LeaseHeldByCaller
 *		Whether a locked row is still held live by this holder, as the
 *		clock reads now, and owned by a role the caller acts for.
 */
static bool
LeaseHeldByCaller(DsyncRow *row, text *holder)
{
	return DsyncRowIsLive(row, GetCurrentTimestamp()) &&
		DsyncRowHolderIs(row, holder) &&
		DsyncRowOwnerIsCaller(row, Anum_lease_owner);
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
static TimestampTz
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
static void
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
static int
LeasePermitHolders(LeaseStores *stores, text *lease, text *holder, DsyncRow **mine,
				   TimestampTz *earliest)
{
	DsyncScan  *scan;
	DsyncRow   *row;
	TimestampTz now = GetCurrentTimestamp();
	int			live = 0;

	*mine = NULL;
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
 *		an ephemeral lease holds the name (TM_WouldBlock, *retry_at set).
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

	if (!DsyncEphemeralExclude(store->catalog, lease, retry_at))
		return TM_WouldBlock;
	DsyncLeaseSetGrant(store, &grant_row, grant);
	result = DsyncStoreTryUpdate(store, &grant_row);
	DsyncEphemeralExcludeEnd();
	if (result != TM_Ok)
		return result;
	if (LeasePermitHolders(stores, lease, grant->holder, &mine, &earliest) > 0)
	{
		DsyncRow	undo = *row;

		undo.tid = grant_row.tid;
		DsyncStoreUpdate(store, &undo);
		return TM_Updated;
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
static TM_Result
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
		if (LeasePermitHolders(stores, lease, grant->holder, &mine, retry_at) > 0)
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
	int			permits;
	LeaseStores stores;
	bool		granted;

	*retry_at = 0;
	/* A semaphore's name was refused before (DsyncEphemeralCheckGrant). */
	if (!args->durable)
		return DsyncEphemeralTryAcquire(args->fcinfo, args->lease, args->grant, may_take,
										&args->token, retry_at);
	permits = DsyncSemaphorePermitsFor(args->fcinfo, args->lease, true);
	if (permits >= 0)
		return DsyncPermitTryAcquire(args->fcinfo, args->lease, args->grant, permits,
									 may_take, thorough, &args->token);
	LeaseStoresOpen(&stores, args->fcinfo, true);
	granted = LeaseTryAcquire(&stores, args->lease, args->grant, may_take,
							  &args->token, retry_at);
	LeaseStoresClose(&stores);
	if (granted)
		DsyncWaitGrantExcludes(args->lease, args->grant->ttl_usec);
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
	LeaseTryArgs args;
	bool		granted;

	args.fcinfo = fcinfo;
	args.lease = lease;
	args.grant = grant;
	args.durable = true;
	args.token = 0;
	granted = LeaseTry(&args, may_take, thorough, retry_at);
	*token = args.token;
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
DsyncLeaseAcquireWait(text *lease, text *holder, const char *kind, DsyncTryFunc try_fn,
					  void *arg, bool wait_forever, int64 wait_usec)
{
	DsyncWaitSpec spec;
	TimestampTz retry_at;

	if (!wait_forever && wait_usec == 0)
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
		if (PG_ARGISNULL(5))
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("argument \"durable\" must not be null")));
		args.durable = PG_GETARG_BOOL(5);
	}
	if (PG_NARGS() > 6)
	{
		if (PG_ARGISNULL(6))
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("argument \"session\" must not be null")));
		session = PG_GETARG_BOOL(6);
	}

	DsyncPreventWrite("dsync_acquire()");
	if (!args.durable)
		DsyncEphemeralCheckGrant(fcinfo, lease, &grant);

	args.fcinfo = fcinfo;
	args.lease = lease;
	args.grant = &grant;
	args.token = 0;
	granted = DsyncLeaseAcquireWait(lease, grant.holder,
									(wait_forever || wait_usec > 0) &&
									DsyncSemaphorePermits(fcinfo, lease) > 1 ? "semaphore" : "lease",
									LeaseTry, &args, wait_forever, wait_usec);

	if (!granted)
		PG_RETURN_NULL();
	if (session)
		DsyncSessionNote(DsyncCatalogGet(fcinfo), lease, grant.holder, args.token, args.durable);
	PG_RETURN_INT64(args.token);
}

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
			DatumGetInt64(row->values[Anum_lease_fencing - 1]) == token)
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
 * dsync_release
 *		SQL: dsync_release(lease, holder) RETURNS boolean
 */
Datum
dsync_release(PG_FUNCTION_ARGS)
{
	text	   *lease,
			   *holder;
	int64		token = LeaseHeldCall(fcinfo, "dsync_release()", LockTupleNoKeyExclusive,
									  true, &lease, &holder);

	if (token >= 0)
		DsyncSessionReleased(token);
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

	if (PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("argument \"cancel_waits\" must not be null")));
	cancel_waits = PG_GETARG_BOOL(2);
	PG_RETURN_INT32(LeaseForceRelease(fcinfo, lease, holder, cancel_waits));
}
