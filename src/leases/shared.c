/*-------------------------------------------------------------------------
 *
 * shared.c
 *		dsync_acquire_shared: read-write locks, any number of shared holders
 *		or one exclusive (dsync_acquire) holder.
 *
 * A shared holder is a row of dsync_permit in a slot range of its own,
 * from DSYNC_SHARED_SLOT on, above every semaphore permit, so renew,
 * release, assert_held, expiry, events, session leases and the view work
 * for it as for a permit, and an exclusive grant already counts it as a
 * holder that keeps the name busy (lease.c).  The name's plain row (slot 0
 * of dsync_lease) is where the two modes meet:
 *
 *	- a shared grant share-locks the plain row (or inserts it, free) and
 *	  checks, on that locked latest version, that no exclusive holder is
 *	  live, before it writes its own row;
 *	- an exclusive grant locks or writes the plain row first and only then
 *	  looks for live shared holders (lease.c).
 *
 * The two locks conflict, so whichever grant comes second either fails to
 * lock (and is refused without waiting, as every dsync grant is) or sees
 * the first one's committed holder.  Shared grants do not conflict with
 * each other.  Both modes queue in the name's one FIFO queue (wait.c), so
 * once an exclusive waiter is in line, later shared acquirers queue behind
 * it: writers never starve.  A shared holder cannot upgrade itself to
 * exclusive (that is refused with an error); an exclusive holder asking
 * for shared access already has it, and gets its lease extended.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "utils/builtins.h"

#include "args.h"
#include "catalog.h"
#include "ephemeral.h"
#include "fence.h"
#include "events.h"
#include "lease.h"
#include "shmem.h"
#include "store.h"
#include "wait.h"
#include "heldmap.h"

PG_FUNCTION_INFO_V1(dsync_acquire_shared);

/* How many slots a shared grant tries when others are inserting theirs. */
#define SHARED_INSERT_TRIES	64

/* What a blocked shared acquirer's tries need. */
typedef struct SharedTryArgs
{
	FunctionCallInfo fcinfo;
	text	   *lease;
	const LeaseGrant *grant;
	uint32		hash;			/* DsyncNameHash of the lease */
	int64		token;
} SharedTryArgs;

/*
 * SharedNotReaders
 *		Whether a name has live holders in dsync_permit below the shared
 *		range (a dropped semaphore's permits, which keep the name busy for
 *		every mode); *retry_at is set to the earliest of their expiries.
 */
static bool
SharedNotReaders(DsyncStore *permits, text *lease, TimestampTz now, TimestampTz *retry_at)
{
	DsyncScan  *scan = DsyncScanName(permits, lease);
	DsyncRow   *row;
	bool		busy = false;

	while ((row = DsyncScanNext(scan)) != NULL)
	{
		if (DsyncRowSlot(row) >= DSYNC_SHARED_SLOT)
			break;				/* slots come in order */
		if (DsyncRowIsLive(row, now))
		{
			busy = true;
			if (*retry_at == 0 || DsyncRowExpiry(row) < *retry_at)
				*retry_at = DsyncRowExpiry(row);
		}
	}
	DsyncScanEnd(scan);
	return busy;
}

/*
 * SharedHoldPlain
 *		Make sure no exclusive grant of the name can commit before this
 *		transaction ends: share-lock its free plain row, clearing it first
 *		if an expired exclusive holder is still in it (announcing the
 *		expiry).  A name with no plain row has its insert claimed in share
 *		mode instead, which other shared grants share and an exclusive
 *		grant's insert claim (which then looks for shared holders) must
 *		wait for.  Returns 1 when the row is held, 2 when the insert is
 *		claimed (release it once our row is written), 0 to refuse now
 *		(someone else is changing it, or holds it: *retry_at), -1 to look
 *		again.
 */
static int
SharedHoldPlain(DsyncStore *leases, text *lease, TimestampTz *retry_at)
{
	DsyncRow   *plain = DsyncLeaseFindPlain(leases, lease);
	TM_Result	result;

	if (plain == NULL)
	{
		switch (DsyncStoreClaimKeyMode(leases, lease, Int32GetDatum(0), false, ShareLock))
		{
			case DSYNC_CLAIM_BUSY:
				return 0;
			case DSYNC_CLAIM_EXISTS:
				return -1;
			case DSYNC_CLAIM_OK:
				break;
		}
		return 2;
	}

	if (DsyncRowIsLive(plain, GetCurrentTimestamp()))
	{
		*retry_at = DsyncRowExpiry(plain);
		return 0;
	}

	/*
	 * An expired holder still in the row is cleared under an exclusive
	 * lock, which a guard of it (dsync_assert_held) would refuse: a shared
	 * lock alone would pass the guard's.
	 */
	result = DsyncStoreLock(leases, plain,
							plain->nulls[Anum_lease_holder - 1] ?
							LockTupleShare : LockTupleNoKeyExclusive,
							LockWaitSkip);
	if (result == TM_WouldBlock)
		return 0;
	if (result != TM_Ok)
		return -1;
	if (DsyncRowIsLive(plain, GetCurrentTimestamp()))
	{
		*retry_at = DsyncRowExpiry(plain);
		return 0;
	}
	if (!plain->nulls[Anum_lease_holder - 1])
	{
		DsyncEventRecord(DSYNC_EVENT_EXPIRED, plain);
		DsyncLeaseSetReleased(plain);
		DsyncStoreUpdate(leases, plain);
	}
	return 1;
}

/* The row a shared grant writes: a free one it has locked, or a new slot it has claimed. */
typedef struct SharedSlot
{
	DsyncRow   *row;			/* locked free row, or NULL */
	int32		slot;			/* else the slot claimed for an insert */
} SharedSlot;

/*
 * SharedPickRow
 *		Find where the holder's shared row goes: a free one of the name's
 *		shared slots if one can be locked without waiting, else a new slot
 *		after the last, its insert claimed.  False only if every slot
 *		tried is being inserted by others.  Before the ephemeral window:
 *		locking and claiming may wait for the reaper.
 */
static bool
SharedPickRow(DsyncStore *permits, text *lease, SharedSlot *pick)
{
	DsyncScan  *scan = DsyncScanFree(permits, lease, DSYNC_SHARED_SLOT);
	DsyncRow   *row;
	int32		slot;

	while ((row = DsyncScanNext(scan)) != NULL)
	{
		if (DsyncStoreLock(permits, row, LockTupleNoKeyExclusive, LockWaitSkip) == TM_Ok &&
			row->nulls[Anum_lease_holder - 1])
			break;
	}
	DsyncScanEnd(scan);
	pick->row = row;
	if (row != NULL)
		return true;

	scan = DsyncScanLast(permits, lease);
	row = DsyncScanNext(scan);
	slot = (row != NULL && DsyncRowSlot(row) >= DSYNC_SHARED_SLOT) ?
		DsyncRowSlot(row) + 1 : DSYNC_SHARED_SLOT;
	DsyncScanEnd(scan);
	for (int i = 0; i < SHARED_INSERT_TRIES && slot > 0; i++, slot++)
	{
		/* Another shared grant inserting this slot: take the next one. */
		if (DsyncStoreClaimKey(permits, lease, Int32GetDatum(slot), false) == DSYNC_CLAIM_OK)
		{
			pick->slot = slot;
			return true;
		}
	}
	return false;
}

/*
 * SharedWriteRow
 *		Write the holder's shared row where SharedPickRow said, drawing its
 *		token; the caller holds ephemeral grants of the name off.
 */
static int64
SharedWriteRow(DsyncStore *permits, text *lease, const LeaseGrant *grant, SharedSlot *pick)
{
	DsyncRow   *row = pick->row;

	if (row != NULL)
	{
		DsyncLeaseSetGrant(permits, row, grant);
		DsyncStoreUpdate(permits, row);
	}
	else
	{
		row = DsyncStoreNewRow();
		DsyncRowSet(row, Anum_lease_name, PointerGetDatum(lease));
		DsyncRowSet(row, Anum_lease_slot, Int32GetDatum(pick->slot));
		DsyncLeaseSetGrant(permits, row, grant);
		DsyncStoreInsert(permits, row);
		DsyncStoreUnclaimKey(permits, lease, Int32GetDatum(pick->slot));

		/*
		 * Backends that saw no permit rows in the database skip the look
		 * for shared holders before an exclusive grant, and make it after
		 * the grant's update once the generation has moved (lease.c):
		 * moved after the insert.
		 */
		pg_atomic_fetch_add_u64(&dsync_shared->semaphore_generation, 1);
	}
	DsyncEventRecord(DSYNC_EVENT_PERMIT_ACQUIRED, row);
	return DatumGetInt64(row->values[Anum_lease_fencing - 1]);
}

/*
 * SharedSemaphoreRefused
 *		Refuse a semaphore's name: it has permits, not shared holders.
 */
static void
SharedSemaphoreRefused(text *lease)
{
	ereport(ERROR,
			(errcode(ERRCODE_WRONG_OBJECT_TYPE),
			 errmsg("semaphore \"%s\" cannot be acquired shared", text_to_cstring(lease)),
			 errhint("Acquire one of its permits with dsync_acquire(), or use a lease name that is not a semaphore.")));
}

/*
 * SharedTryAcquire
 *		Grant the lease shared to the holder if no exclusive holder has it,
 *		without waiting for any other transaction.  A holder that has it
 *		(shared, or exclusive) gets it extended with its token.  Anybody
 *		else takes it only if may_take: queued waiters go first.
 */
static bool
SharedTryAcquire(const DsyncCatalog *catalog, text *lease, const LeaseGrant *grant,
				 bool may_take, int64 *token, TimestampTz *retry_at)
{
	DsyncStore	leases;
	DsyncStore	permits;
	bool		granted = false;
	bool		wrote = false;

	DsyncStoreOpenCatalog(&leases, catalog, DSYNC_TABLE_LEASE, true);
	DsyncStoreOpenCatalog(&permits, catalog, DSYNC_TABLE_PERMIT, true);
	for (;;)
	{
		TimestampTz now = GetCurrentTimestamp();
		DsyncRow   *row;
		DsyncHeld	extended;
		int			held;
		SharedSlot	pick;

		CHECK_FOR_INTERRUPTS();
		*retry_at = 0;

		/* Reentrant: the holder's shared row, or its exclusive lease. */
		extended = DsyncPermitExtendHeld(&permits, &leases, lease, grant, DSYNC_SHARED_SLOT,
										 &row, token);
		if (extended == DSYNC_HELD_CHANGED)
			continue;
		if (extended != DSYNC_HELD_NOT)
		{
			granted = extended == DSYNC_HELD_EXTENDED;
			break;
		}
		if (row != NULL && DsyncRowIsLive(row, now))
		{
			*retry_at = DsyncRowExpiry(row);
			break;
		}
		if (SharedNotReaders(&permits, lease, now, retry_at) || !may_take)
			break;

		held = SharedHoldPlain(&leases, lease, retry_at);
		if (held < 0)
			continue;
		/* Tokens rise across both kinds: drawn while ephemeral grants wait. */
		if (held > 0 && SharedPickRow(&permits, lease, &pick))
		{
			if (DsyncEphemeralExclude(catalog, lease, retry_at))
			{
				*token = SharedWriteRow(&permits, lease, grant, &pick);
				DsyncEphemeralExcludeEnd();
				granted = wrote = true;
			}
			else if (pick.row == NULL)
				DsyncStoreUnclaimKey(&permits, lease, Int32GetDatum(pick.slot));
		}
		if (held == 2)
			DsyncStoreUnclaimKeyMode(&leases, lease, Int32GetDatum(0), ShareLock);
		break;
	}
	DsyncStoreClose(&permits);
	DsyncStoreClose(&leases);
	/* A semaphore defined meanwhile may not have seen our row (semaphore.c). */
	if (wrote && DsyncSemaphoreDefinedDirty(catalog, lease))
		SharedSemaphoreRefused(lease);
	return granted;
}

/*
 * SharedTry
 *		One try of dsync_acquire_shared, for the wait loop.
 */
static bool
SharedTry(void *arg, bool may_take, bool thorough, TimestampTz *retry_at)
{
	SharedTryArgs *args = arg;
	const DsyncCatalog *catalog = DsyncCatalogGet(args->fcinfo);

	(void) thorough;
	DsyncFencePrewait(catalog);
	if (!SharedTryAcquire(catalog, args->lease, args->grant, may_take, &args->token, retry_at))
		return false;
	if (!DsyncLeaseRaiseFences(catalog, args->lease, args->hash, args->token, 0))
	{
		*retry_at = GetCurrentTimestamp();
		return false;
	}
	return true;
}

/*
 * DsyncSharedTryGrant
 *		One try of a shared grant of lease to grant's holder, never waiting
 *		for another transaction (a queued waiter's, queuegrant.c).
 */
bool
DsyncSharedTryGrant(FunctionCallInfo fcinfo, text *lease, const LeaseGrant *grant,
					bool may_take, int64 *token, TimestampTz *retry_at)
{
	SharedTryArgs args;

	args.fcinfo = fcinfo;
	args.lease = lease;
	args.grant = grant;
	args.hash = DsyncNameHash(lease);
	args.token = 0;
	if (!SharedTry(&args, may_take, false, retry_at))
		return false;
	*token = args.token;
	return true;
}

/*
 * dsync_acquire_shared
 *		SQL: dsync_acquire_shared(lease, holder, ttl, wait, info, session)
 *		RETURNS bigint (1.4)
 */
Datum
dsync_acquire_shared(PG_FUNCTION_ARGS)
{
	text	   *lease = DsyncArgName(fcinfo, 0, "lease");
	const DsyncCatalog *catalog = DsyncCatalogGet(fcinfo);
	LeaseGrant	grant;
	SharedTryArgs args;
	bool		wait_forever;
	int64		wait_usec;
	bool		granted;

	DsyncLeaseGrantArgs(fcinfo, &grant, &wait_forever, &wait_usec);
	DsyncArgNotNull(fcinfo, 5, "session");

	DsyncPreventWrite("dsync_acquire_shared()");
	DsyncCatalogRequire(catalog, DSYNC_TABLE_PERMIT);
	if (DsyncSemaphorePermitsFor(fcinfo, lease, false) >= 0)
		SharedSemaphoreRefused(lease);

	args.fcinfo = fcinfo;
	args.lease = lease;
	args.grant = &grant;
	args.hash = DsyncNameHash(lease);
	args.token = 0;
	granted = DsyncLeaseAcquireWait(catalog, lease, args.hash, grant.holder, "shared", SharedTry,
									&args, wait_forever, wait_usec);

	if (!granted)
		PG_RETURN_NULL();
	if (PG_GETARG_BOOL(5))
		DsyncSessionNote(catalog, lease, grant.holder, args.token, true);
	PG_RETURN_INT64(args.token);
}
