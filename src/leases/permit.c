/*-------------------------------------------------------------------------
 *
 * permit.c
 *		The permits of semaphores: taking one, and finding the one a holder
 *		has, in a few index probes whatever the number of holders.
 *
 * A semaphore of N permits has N rows in dsync_permit, slots 0 to N-1,
 * made when it is defined; each is free (holder NULL) or held, with its
 * own fencing token, expiry, owner and info, exactly like a plain lease's
 * row.  Besides the primary key (name, slot) the table has an index on
 * (name, holder), which answers both questions every call asks:
 *
 *	- which permit does this holder have?  (name, holder) = one probe;
 *	- which permit is free?  (name, NULL) = one probe, the first that can
 *	  be locked without waiting.
 *
 * The price is that a grant or release changes an indexed column, so it is
 * not a HOT update; renewals, by far the most frequent call, still are.
 * A permit whose holder's time has passed is not free until the reaper
 * clears it (at that instant, where a reaper runs), so an acquirer does
 * not need to look at every permit to find an expired one; a blocked
 * acquirer that has slept a whole DSYNC_WAIT_CAP_MS without being woken
 * does look at them all (the "thorough" try), so permits come back even
 * where no reaper runs.
 *
 * Capacity.  Every live holder counts, in whatever slot: holders from
 * before a semaphore was dropped or re-created with fewer permits keep
 * their permits, and so does a plain lock on the name taken before the
 * semaphore was defined.  Those are few and are counted exactly (slots at
 * or above the count are a range of the primary key); a grant then needs
 * that many free permits besides its own, all locked, so the semaphore is
 * never oversubscribed at any isolation level.  After a start, crash
 * restart or promotion, an ephemeral lease from before, gone from shared
 * memory, may still be believed held: while that may be so (the
 * hold-back of ephemeral_record.c) it counts as one more.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "utils/builtins.h"

#include "compat.h"
#include "args.h"
#include "catalog.h"
#include "store.h"
#include "lease.h"
#include "ephemeral.h"
#include "events.h"

/*
 * DsyncPermitFindHeld
 *		The permit holder holds live, or NULL: one probe.
 */
DsyncRow *
DsyncPermitFindHeld(DsyncStore *store, text *name, text *holder, TimestampTz now)
{
	DsyncScan  *scan = DsyncScanHolder(store, name, holder);
	DsyncRow   *row;

	while ((row = DsyncScanNext(scan)) != NULL)
		if (DsyncRowIsLive(row, now) && DsyncRowHolderIs(row, holder))
			break;
	DsyncScanEnd(scan);
	return row;
}

/*
 * DsyncPermitRenew
 *		A reentrant acquire: the holder already has a permit (or the plain
 *		lock counted as one, or a shared lease).  Extend it and keep its
 *		token; false if it is being changed or guarded right now, *retry
 *		if it changed meanwhile (look again).
 */
bool
DsyncPermitRenew(DsyncStore *store, DsyncRow *row, const LeaseGrant *grant, int64 *token,
			bool *retry)
{
	TM_Result	result;

	*retry = false;
	if (!DsyncRowOwnerIsCaller(row, Anum_lease_owner))
		return false;
	result = DsyncStoreLock(store, row, LockTupleNoKeyExclusive, LockWaitSkip);
	if (result == TM_WouldBlock)
		return false;
	if (result != TM_Ok || !DsyncRowIsLive(row, GetCurrentTimestamp()) ||
		!DsyncRowHolderIs(row, grant->holder))
	{
		*retry = true;
		return false;
	}
	DsyncLeaseRenewRow(store, row, grant);
	*token = DatumGetInt64(row->values[Anum_lease_fencing - 1]);
	return true;
}

/*
 * DsyncPermitExtendHeld
 *		A reentrant acquire: if grant's holder holds the name live, in a
 *		row of dsync_permit from slot from_slot on or in its plain row,
 *		extend that and keep its token.  DSYNC_HELD_EXTENDED (with *token),
 *		DSYNC_HELD_BUSY (held, but being changed or guarded right now, or
 *		another role's), DSYNC_HELD_CHANGED (look again), or DSYNC_HELD_NOT
 *		(holds neither; *plain is the name's plain row, or NULL).
 */
DsyncHeld
DsyncPermitExtendHeld(DsyncStore *permits, DsyncStore *leases, text *name,
					  const LeaseGrant *grant, int32 from_slot, DsyncRow **plain,
					  int64 *token)
{
	TimestampTz now = GetCurrentTimestamp();
	DsyncRow   *row = DsyncPermitFindHeld(permits, name, grant->holder, now);
	DsyncStore *store = permits;
	bool		retry;

	*plain = NULL;
	if (row == NULL || DsyncRowSlot(row) < from_slot)
	{
		*plain = DsyncLeaseFindPlain(leases, name);
		row = *plain;
		store = leases;
		if (row == NULL || !DsyncRowIsLive(row, now) || !DsyncRowHolderIs(row, grant->holder))
			return DSYNC_HELD_NOT;
	}
	if (DsyncPermitRenew(store, row, grant, token, &retry))
		return DSYNC_HELD_EXTENDED;
	return retry ? DSYNC_HELD_CHANGED : DSYNC_HELD_BUSY;
}

/*
 * PermitGrant
 *		Give a locked free (or expired) permit row to the holder.
 */
static int64
PermitGrant(DsyncStore *store, DsyncRow *row, const LeaseGrant *grant)
{
	/* Taking over an expired permit announces its expiry first. */
	if (!row->nulls[Anum_lease_holder - 1])
		DsyncEventRecord(DSYNC_EVENT_EXPIRED, row);
	DsyncLeaseSetGrant(store, row, grant);
	DsyncStoreUpdate(store, row);
	DsyncEventRecord(DSYNC_EVENT_PERMIT_ACQUIRED, row);
	return DatumGetInt64(row->values[Anum_lease_fencing - 1]);
}

/*
 * PermitExtraHolders
 *		Live holders that are not in the semaphore's own slots: permits at
 *		or above its count (from before a re-creation with fewer) and a
 *		plain lock, durable or ephemeral, taken before it was defined.
 *		While ephemeral leases from before this server's start may still
 *		be held (*held_back set to when that ends; else 0), one of them
 *		counts too.
 */
static int
PermitExtraHolders(const DsyncCatalog *catalog, DsyncStore *permits_store, DsyncRow *plain,
				   text *name, int permits, TimestampTz *held_back)
{
	TimestampTz now = GetCurrentTimestamp();
	DsyncScan  *scan = DsyncScanFrom(permits_store, name, permits);
	DsyncRow   *row;
	int			extra = (plain && DsyncRowIsLive(plain, now)) ? 1 : 0;
	text	   *leader;

	/* An ephemeral lease taken before the semaphore was defined counts too. */
	if (DsyncEphemeralLeader(name, &leader) == DSYNC_EPHEMERAL_DONE)
		extra++;

	/*
	 * So does one from before a start, which left no entry to find: it may
	 * have held this name, the semaphore being defined since.  Not besides
	 * a live plain holder or ephemeral lease of the name, which it cannot
	 * have held at the same time (one name is held in one kind at a time,
	 * and no ephemeral grant is made while the hold-back lasts).
	 */
	*held_back = 0;
	if (extra == 0 && DsyncEphemeralHeldBack(catalog, held_back))
		extra++;

	while ((row = DsyncScanNext(scan)) != NULL)
		if (DsyncRowIsLive(row, now))
			extra++;
	DsyncScanEnd(scan);
	return extra;
}

/*
 * PermitSettleFormer
 *		Before a permit is granted, once PermitExtraHolders has counted: a
 *		plain lock (durable or ephemeral) taken before the semaphore was
 *		defined whose time has passed is cleared and its expiry announced
 *		now, as the reaper would, so that it comes before our "acquired"
 *		rather than whenever the reaper gets there.  Whatever the count
 *		found expired is still expired at this later clock reading.  1:
 *		done; 0: the plain row changed (look again); -1: another
 *		transaction has it locked (not now; its end wakes the waiters).
 */
static int
PermitSettleFormer(DsyncStore *plain_store, DsyncRow *plain, text *name)
{
	DsyncEphemeralSettle(name);
	if (plain == NULL || plain->nulls[Anum_lease_holder - 1] ||
		DsyncRowIsLive(plain, GetCurrentTimestamp()))
		return 1;
	switch (DsyncStoreLock(plain_store, plain, LockTupleNoKeyExclusive, LockWaitSkip))
	{
		case TM_Ok:
			break;
		case TM_WouldBlock:
			return -1;
		default:
			return 0;
	}
	if (plain->nulls[Anum_lease_holder - 1] || DsyncRowIsLive(plain, GetCurrentTimestamp()))
		return 0;
	DsyncEventRecord(DSYNC_EVENT_EXPIRED, plain);
	DsyncLeaseSetReleased(plain);
	DsyncStoreUpdate(plain_store, plain);
	return 1;
}

/*
 * The slot this backend took last, and of which semaphore: the next search
 * for a free permit of it starts after that slot.  Permits taken earlier in
 * the same transaction (or so recently that nobody has pruned them yet)
 * still have index entries as free ones, and a search from slot 0 would
 * walk them all: filling a semaphore in one statement would cost the square
 * of its size.
 */
static char permit_hint_name[DSYNC_NAME_MAX_BYTES + 1];
static int32 permit_hint_slot = -1;

/*
 * PermitLockFreeFrom
 *		PermitLockFree's scan from one slot on (thorough: every permit).
 */
static int
PermitLockFreeFrom(DsyncStore *store, text *name, int permits, int32 from, int need,
				   bool thorough, DsyncRow **first, bool *changed)
{
	DsyncScan  *scan = thorough ? DsyncScanFrom(store, name, from) :
		DsyncScanFree(store, name, from);
	DsyncRow   *row;
	int			locked = 0;

	while (locked < need && (row = DsyncScanNext(scan)) != NULL)
	{
		TM_Result	result;

		if (DsyncRowSlot(row) >= permits)
			break;				/* slots come in order: no more below the count */
		if (DsyncRowIsLive(row, GetCurrentTimestamp()))
			continue;
		result = DsyncStoreLock(store, row, LockTupleNoKeyExclusive, LockWaitSkip);
		if (result == TM_WouldBlock)
			continue;			/* somebody is taking it right now */
		if (result != TM_Ok)
		{
			*changed = true;
			break;
		}
		if (DsyncRowIsLive(row, GetCurrentTimestamp()))
			continue;
		if (*first == NULL)
			*first = row;
		locked++;
	}
	DsyncScanEnd(scan);
	return locked;
}

/*
 * PermitLockFree
 *		Lock up to need permits below the count that are free (thorough:
 *		or held by a holder whose time has passed), without waiting, from
 *		after the slot this backend took last, then from slot 0.  Returns
 *		how many it locked and the first of them; *changed if a row changed
 *		under us (look again).
 */
static int
PermitLockFree(DsyncStore *store, text *name, int permits, int need, bool thorough,
			   DsyncRow **first, bool *changed)
{
	int32		from = 0;
	int			locked = 0;

	*first = NULL;
	*changed = false;
	if (permit_hint_slot >= 0 && strlen(permit_hint_name) == VARSIZE_ANY_EXHDR(name) &&
		memcmp(permit_hint_name, VARDATA_ANY(name), VARSIZE_ANY_EXHDR(name)) == 0)
		from = permit_hint_slot + 1;
	if (from > 0 && from < permits)
		locked = PermitLockFreeFrom(store, name, permits, from, need, thorough,
									first, changed);
	if (locked < need && !*changed)
		locked += PermitLockFreeFrom(store, name, Min(permits, from > 0 ? from : permits),
									 0, need - locked, thorough, first, changed);
	if (*first != NULL)
	{
		text_to_cstring_buffer(name, permit_hint_name, sizeof(permit_hint_name));
		permit_hint_slot = DsyncRowSlot(*first);
	}
	return locked;
}

/*
 * PermitGrow
 *		A semaphore with fewer permit rows than its count (its rows were
 *		not restored with its definition, or a superuser removed some):
 *		make the next slot, granted to the holder.  Slots are made one at a
 *		time, in order, so no slot is ever skipped.  Returns 1 if granted,
 *		0 if there is no slot to make, -1 if the next one is being made by
 *		another transaction, -2 if a row appeared meanwhile (look again).
 */
static int
PermitGrow(DsyncStore *store, text *name, int permits, int free_besides,
		   const LeaseGrant *grant, int64 *token)
{
	DsyncScan  *scan = DsyncScanLast(store, name);
	DsyncRow   *last;
	int32		slot;
	DsyncRow   *fresh;

	/* The last permit, below the shared holders' slots (shared.c). */
	while ((last = DsyncScanNext(scan)) != NULL && DsyncRowSlot(last) >= DSYNC_SHARED_SLOT)
		;
	slot = last ? DsyncRowSlot(last) + 1 : 0;
	DsyncScanEnd(scan);
	if (slot >= permits || free_besides + (permits - slot) <= 0)
		return 0;
	switch (DsyncStoreClaimKey(store, name, Int32GetDatum(slot), false))
	{
		case DSYNC_CLAIM_BUSY:
			return -1;
		case DSYNC_CLAIM_EXISTS:
			return -2;
		case DSYNC_CLAIM_OK:
			break;
	}
	fresh = DsyncStoreNewRow();
	DsyncRowSet(fresh, Anum_lease_name, PointerGetDatum(name));
	DsyncRowSet(fresh, Anum_lease_slot, Int32GetDatum(slot));
	DsyncLeaseSetGrant(store, fresh, grant);
	DsyncStoreInsert(store, fresh);
	DsyncStoreUnclaimKey(store, name, Int32GetDatum(slot));
	DsyncEventRecord(DSYNC_EVENT_PERMIT_ACQUIRED, fresh);
	*token = DatumGetInt64(fresh->values[Anum_lease_fencing - 1]);
	return 1;
}

/*
 * DsyncPermitTryAcquire
 *		Grant one of a semaphore's permits to the holder if one is free
 *		now, without waiting for any other transaction; permits is the
 *		definition's count (0: the definition is being changed, grant
 *		nothing new).  A holder that has a permit gets it extended.  Not
 *		granted while the hold-back after a start counted a holder,
 *		*retry_at is when that ends (else 0: only when woken).
 */
bool
DsyncPermitTryAcquire(FunctionCallInfo fcinfo, text *name, const LeaseGrant *grant,
					  int permits, bool may_take, bool thorough, int64 *token,
					  TimestampTz *retry_at)
{
	const DsyncCatalog *catalog = DsyncCatalogGet(fcinfo);
	DsyncStore	store;
	DsyncStore	plain_store;
	bool		granted = false;

	DsyncStoreOpenCatalog(&store, catalog, DSYNC_TABLE_PERMIT, true);
	DsyncStoreOpenCatalog(&plain_store, catalog, DSYNC_TABLE_LEASE, true);
	for (;;)
	{
		DsyncRow   *row;
		DsyncRow   *plain;
		bool		retry;
		DsyncHeld	held;
		int			extra;
		int			locked;
		int			grown;
		int			settled;

		CHECK_FOR_INTERRUPTS();
		*retry_at = 0;

		/* Reentrant: the holder's permit, or its plain lock on the name. */
		held = DsyncPermitExtendHeld(&store, &plain_store, name, grant, 0, &plain, token);
		if (held == DSYNC_HELD_CHANGED)
			continue;
		if (held != DSYNC_HELD_NOT)
		{
			granted = held == DSYNC_HELD_EXTENDED;
			break;
		}
		if (!may_take || permits <= 0)
			break;

		extra = PermitExtraHolders(catalog, &store, plain, name, permits, retry_at);
		/* After the count: what it found expired stays so. */
		settled = PermitSettleFormer(&plain_store, plain, name);
		if (settled <= 0)
		{
			if (settled == 0)
				continue;
			break;
		}
		locked = PermitLockFree(&store, name, permits, extra + 1, thorough, &row, &retry);
		if (retry)
			continue;
		if (locked > extra)
		{
			*token = PermitGrant(&store, row, grant);
			granted = true;
			break;
		}
		grown = PermitGrow(&store, name, permits, locked - extra, grant, token);
		if (grown == -2)
			continue;
		granted = grown == 1;
		break;
	}
	if (granted)
		*retry_at = 0;
	DsyncStoreClose(&plain_store);
	DsyncStoreClose(&store);
	return granted;
}

/*
 * DsyncPermitFill
 *		Make the missing permit rows of a semaphore being defined, slots 0
 *		to permits - 1, all free.  The caller has claimed the definition's
 *		key, so no other definer runs at the same time.
 */
void
DsyncPermitFill(const DsyncCatalog *catalog, text *name, int permits)
{
	DsyncStore	store;
	DsyncScan  *scan;
	DsyncRow   *row;
	bool	   *present = palloc0(sizeof(bool) * permits);

	DsyncStoreOpenCatalog(&store, catalog, DSYNC_TABLE_PERMIT, true);
	scan = DsyncScanName(&store, name);
	while ((row = DsyncScanNext(scan)) != NULL)
	{
		/*
		 * A row the reaper is removing (a permit left unused after an
		 * earlier definition was dropped) is about to be gone: wait and
		 * see, so that its slot is made again rather than lost.  The key
		 * share lock conflicts with nothing a holder does.
		 */
		if (DsyncRowSlot(row) < permits &&
			DsyncStoreLock(&store, row, LockTupleKeyShare, LockWaitBlock) != TM_Deleted)
			present[DsyncRowSlot(row)] = true;
	}
	DsyncScanEnd(scan);

	for (int32 slot = 0; slot < permits; slot++)
	{
		DsyncRow   *fresh;

		if (present[slot])
			continue;
		CHECK_FOR_INTERRUPTS();
		fresh = DsyncStoreNewRow();
		DsyncRowSet(fresh, Anum_lease_name, PointerGetDatum(name));
		DsyncRowSet(fresh, Anum_lease_slot, Int32GetDatum(slot));
		DsyncRowSet(fresh, Anum_lease_renewed_at,
					TimestampTzGetDatum(GetCurrentTimestamp()));
		DsyncStoreInsert(&store, fresh);
	}
	DsyncStoreClose(&store);
	pfree(present);
}

/*
 * DsyncPermitDropFree
 *		Remove the free permit rows of a semaphore whose definition is
 *		being dropped; held ones stay with their holders until they are
 *		let go, and the reaper removes them after that.
 */
void
DsyncPermitDropFree(const DsyncCatalog *catalog, text *name)
{
	DsyncStore	store;
	DsyncScan  *scan;
	DsyncRow   *row;

	if (!OidIsValid(catalog->rels[DSYNC_TABLE_PERMIT]))
		return;
	DsyncStoreOpenCatalog(&store, catalog, DSYNC_TABLE_PERMIT, true);
	scan = DsyncScanFree(&store, name, 0);
	while ((row = DsyncScanNext(scan)) != NULL)
	{
		if (DsyncStoreLock(&store, row, LockTupleExclusive, LockWaitSkip) != TM_Ok ||
			!row->nulls[Anum_lease_holder - 1])
			continue;			/* being taken: the reaper cleans it up later */
		DsyncStoreDelete(&store, row);
	}
	DsyncScanEnd(scan);
	DsyncStoreClose(&store);
}
