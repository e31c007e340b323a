/*-------------------------------------------------------------------------
 *
 * reap.c
 *		Clearing one due row: an expired lease or permit, an expired group
 *		member, or a row left unused; and dsync_reap(), the same over whole
 *		tables in the caller's transaction.
 *
 * The reaper (expiry.c) calls ReapRow for each deadline that has come, and
 * dsync_reap for each row of the tables; both lock the row without waiting
 * (someone taking it over or guarding it wins, and the row is looked at
 * again later), look again at what the locked version says, and then:
 *
 *	- an expired lease or permit is cleared in place (its holder set to
 *	  NULL, a HOT update) and announced as "expired";
 *	- an expired member is deleted and announced as "left";
 *	- a lease or permit row released for dsync.idle_row_retention is
 *	  deleted, unless it is one of a semaphore's own permits.
 *
 * Whoever takes the name next must lock that row, so its "acquired" is
 * always queued after the "expired".
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "args.h"
#include "catalog.h"
#include "dbslot.h"
#include "settings.h"
#include "store.h"
#include "lease.h"
#include "events.h"
#include "reaper.h"
#include "workers.h"

PG_FUNCTION_INFO_V1(dsync_reap);

/* How long to wait before looking again at a row someone has locked. */
#define REAP_BUSY_RETRY_MS		100

/*
 * ReapIdleDeadline
 *		When a released lease or permit row becomes removable (renewed_at
 *		records when it was let go), or 0 if it never does
 *		(dsync.idle_row_retention = -1).
 */
TimestampTz
ReapIdleDeadline(const DsyncRow *row)
{
	TimestampTz since;

	if (dsync_idle_row_retention < 0)
		return 0;
	since = row->nulls[Anum_lease_renewed_at - 1] ? 0 :
		DatumGetTimestampTz(row->values[Anum_lease_renewed_at - 1]);
	return TimestampTzPlusMilliseconds(since, (int64) dsync_idle_row_retention * 1000);
}

/*
 * ReapPermitKept
 *		Whether a permit row belongs to its semaphore's current definition
 *		(and so is never removed for being unused).
 */
static bool
ReapPermitKept(const DsyncCatalog *catalog, text *name, int32 slot)
{
	DsyncStore	store;
	DsyncScan  *scan;
	DsyncRow   *row;
	bool		kept;

	if (!OidIsValid(catalog->rels[DSYNC_TABLE_SEMAPHORE]))
		return false;
	DsyncStoreOpenCatalog(&store, catalog, DSYNC_TABLE_SEMAPHORE, false);
	store.tolerant = true;
	scan = DsyncScanName(&store, name);
	row = DsyncScanNext(scan);
	kept = row != NULL && slot < DatumGetInt32(row->values[Anum_semaphore_permits - 1]);
	DsyncScanEnd(scan);
	DsyncStoreClose(&store);
	return kept;
}

/*
 * ReapDueAt
 *		When a row is next due, as of now: its expiry while it is held (or,
 *		for a member, alive), else when it may be removed; 0 if never.  A
 *		value at or before now means it is due.
 */
static TimestampTz
ReapDueAt(DsyncStore *store, const DsyncRow *row, TimestampTz now)
{
	TimestampTz idle_at;

	if (store->table == DSYNC_TABLE_MEMBER)
		return DatumGetTimestampTz(row->values[Anum_member_expires_at - 1]);
	if (DsyncRowIsLive(row, now))
		return DsyncRowExpiry(row);
	if (!row->nulls[Anum_lease_holder - 1])
		return now;				/* held and expired */
	idle_at = ReapIdleDeadline(row);
	if (idle_at != 0 && store->table == DSYNC_TABLE_PERMIT &&
		ReapPermitKept(store->catalog, DatumGetTextPP(row->values[Anum_lease_name - 1]),
					   DsyncRowSlot(row)))
		return 0;
	return idle_at;
}

/*
 * ReapRow
 *		Clear or remove one row of a lease, permit or member table if it is
 *		due, as the header comment says.  *next gets when to look at it
 *		again (0: never, as far as the reaper's deadlines go).
 *
 * slot is the database's slot when the reaper calls (it publishes its xid
 * there before its first row lock, so that an acquirer meeting the lock
 * waits for it instead of reporting a free lease busy: see
 * DsyncStoreLock), NULL from dsync_reap.
 */
ReapOutcome
ReapRow(DsyncStore *store, DsyncRow *row, TimestampTz now, DsyncDbSlot *slot,
		TimestampTz *next)
{
	TimestampTz due;

	Assert(store->table == DSYNC_TABLE_LEASE || store->table == DSYNC_TABLE_PERMIT ||
		   store->table == DSYNC_TABLE_MEMBER);
	due = ReapDueAt(store, row, now);
	*next = due;
	if (due == 0 || due > now)
		return REAP_NOT_DUE;

	if (slot != NULL && !TransactionIdIsValid(slot->reaper_xid))
		slot->reaper_xid = GetCurrentTransactionId();
	switch (DsyncStoreLock(store, row, LockTupleExclusive, LockWaitSkip))
	{
		case TM_Ok:
			break;
		case TM_WouldBlock:
			/* Being taken over or guarded: look again soon. */
			*next = TimestampTzPlusMilliseconds(now, REAP_BUSY_RETRY_MS);
			return REAP_BUSY;
		default:
			/* Changed since it was read: look again now. */
			*next = now;
			return REAP_BUSY;
	}

	/* The locked version is the latest: decide again on what it says. */
	now = GetCurrentTimestamp();
	due = ReapDueAt(store, row, now);
	*next = due;
	if (due == 0 || due > now)
		return REAP_NOT_DUE;
	*next = 0;
	if (store->table == DSYNC_TABLE_MEMBER)
	{
		DsyncEventRecordRaw(DSYNC_EVENT_MEMBER_EXPIRED,
							DatumGetTextPP(row->values[Anum_member_grp - 1]),
							DatumGetTextPP(row->values[Anum_member_member - 1]), due);
		DsyncStoreDelete(store, row);
		return REAP_CLEARED;
	}
	if (row->nulls[Anum_lease_holder - 1])
	{
		DsyncStoreDelete(store, row);
		return REAP_REMOVED;
	}
	DsyncEventRecord(DSYNC_EVENT_EXPIRED, row);
	DsyncLeaseSetReleased(row);
	DsyncStoreUpdate(store, row);
	DsyncQueueNoteFreed(DatumGetTextPP(row->values[Anum_lease_name - 1]));
	*next = ReapIdleDeadline(row);
	return REAP_CLEARED;
}

/*
 * ReapTable
 *		dsync_reap's pass over one table: every due row it can lock without
 *		waiting is cleared or removed.  Returns how many expired holders and
 *		members it cleared (removed unused rows are not counted).
 */
static int64
ReapTable(FunctionCallInfo fcinfo, DsyncTable table)
{
	DsyncStore	store;
	DsyncScan  *scan;
	DsyncRow   *row;
	int64		cleared = 0;

	DsyncStoreOpen(&store, fcinfo, table, true);
	store.tolerant = true;
	scan = DsyncScanAll(&store);
	while ((row = DsyncScanNext(scan)) != NULL)
	{
		TimestampTz next;

		CHECK_FOR_INTERRUPTS();
		switch (ReapRow(&store, row, GetCurrentTimestamp(), NULL, &next))
		{
			case REAP_CLEARED:
				cleared++;
				break;
			case REAP_NOT_DUE:
				/* Most rows: keep memory flat over a big table. */
				DsyncRowFree(&store, row);
				break;
			default:
				break;
		}
	}
	DsyncScanEnd(scan);
	DsyncStoreClose(&store);
	return cleared;
}

/*
 * dsync_reap
 *		SQL: dsync_reap() RETURNS bigint
 *
 * A reap pass in the caller's transaction, over the whole tables: clears
 * every expired lease and permit and deletes every expired group member
 * it can lock without waiting, and returns how many; also deletes rows
 * left unused for dsync.idle_row_retention (not counted).  The events are
 * sent by the reaper once this commits.  Not granted to PUBLIC.
 */
Datum
dsync_reap(PG_FUNCTION_ARGS)
{
	const DsyncCatalog *catalog = DsyncCatalogGet(fcinfo);
	int64		cleared;

	DsyncPreventWrite("dsync_reap()");

	cleared = ReapTable(fcinfo, DSYNC_TABLE_LEASE);
	if (OidIsValid(catalog->rels[DSYNC_TABLE_PERMIT]))
		cleared += ReapTable(fcinfo, DSYNC_TABLE_PERMIT);
	if (OidIsValid(catalog->rels[DSYNC_TABLE_MEMBER]))
		cleared += ReapTable(fcinfo, DSYNC_TABLE_MEMBER);
	DsyncQueueGrantFreed(fcinfo);
	PG_RETURN_INT64(cleared);
}
