/*-------------------------------------------------------------------------
 *
 * scan.c
 *		Finding rows of the extension's tables: by key, from a slot, by
 *		holder, free permits, or all of them, as of the latest committed
 *		state.
 *
 * Rows are found with an index scan under SnapshotAny and filtered with a
 * fresh snapshot (GetLatestSnapshot), so a REPEATABLE READ or SERIALIZABLE
 * caller acts on what has been committed now, not on its old snapshot;
 * checking visibility here also keeps SSI out of it (no SIREAD locks, no
 * serialization failure from dsync's own reads).  Scans are iterators that
 * stop when the caller has what it needs, so a lookup by key costs one
 * index probe whatever else the table holds, and nothing is materialised.
 * A plain lease's row is looked for first where the location cache says
 * its newest version is (locate.c, DsyncScanKeyLatest), which under an old
 * snapshot saves walking every version the snapshot keeps alive.  Every
 * row read is checked for damage (row.c) before it is returned.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/skey.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/xact.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "storage/procarray.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "catalog.h"
#include "locate.h"
#include "store.h"
#include "compat.h"

struct DsyncScan
{
	DsyncStore *store;
	MemoryContext cxt;			/* where the scan itself lives */
	Snapshot	snapshot;		/* the latest committed state, registered,
								 * or &dirty */
	SnapshotData dirty;			/* for a scan that sees changes in flight */
	IndexScanDesc iscan;		/* an index scan, or */
	TableScanDesc hscan;		/* a whole-table scan */
	TupleTableSlot *slot;
	ScanDirection direction;
	ScanKeyData keys[3];
};

/* Versions of a row followed from a cached location before giving up. */
#define DSYNC_LOCATE_HOPS 16

/*
 * DsyncLatestSnapshot
 *		A snapshot of the latest committed state.
 *
 * GetLatestSnapshot refuses to run in parallel mode, which a query over
 * the views can be in (force_parallel_mode, or a plan the planner thinks
 * parallel-safe, since a foreign scan calls no function it could judge);
 * dsync's scans never run in a worker, so a snapshot taken here is as good.
 */
static Snapshot
DsyncLatestSnapshot(void)
{
	static SnapshotData latest = {SNAPSHOT_MVCC};

	if (!IsInParallelMode())
		return GetLatestSnapshot();
	return GetSnapshotData(&latest);
}

/*
 * DsyncScanBegin
 *		Start a scan of an index with the given keys (nkeys 0: a scan of the
 *		whole table), as of the latest committed state.
 */
static DsyncScan *
DsyncScanBeginAs(DsyncStore *store, Relation index, int nkeys, ScanDirection direction,
				 bool uncommitted)
{
	DsyncScan  *scan = palloc0(sizeof(DsyncScan));

	scan->store = store;
	scan->cxt = CurrentMemoryContext;
	if (uncommitted)
	{
		InitDirtySnapshot(scan->dirty);
		scan->snapshot = &scan->dirty;
	}
	else
		scan->snapshot = RegisterSnapshot(DsyncLatestSnapshot());
	scan->direction = direction;
	if (index == NULL)
		scan->hscan = table_beginscan(store->rel, SnapshotAny, 0, NULL);
	else
	{
		scan->iscan = DsyncIndexBeginscan(store->rel, index, SnapshotAny, nkeys, 0);
		scan->slot = table_slot_create(store->rel, NULL);
	}
	return scan;
}

/*
 * DsyncScanBegin
 *		DsyncScanBeginAs, as of the latest committed state.
 */
static DsyncScan *
DsyncScanBegin(DsyncStore *store, Relation index, int nkeys, ScanDirection direction)
{
	return DsyncScanBeginAs(store, index, nkeys, direction, false);
}

/*
 * DsyncScanRescan
 *		Position an index scan on the keys set up in scan->keys.
 */
static DsyncScan *
DsyncScanRescan(DsyncScan *scan, int nkeys)
{
	index_rescan(scan->iscan, scan->keys, nkeys, NULL, 0);
	return scan;
}

/*
 * ScanByName
 *		Every row whose first key column is name, in key order or in
 *		reverse.
 */
static DsyncScan *
ScanByName(DsyncStore *store, text *name, ScanDirection dir)
{
	DsyncScan  *scan = DsyncScanBegin(store, DsyncStoreIndex(store), 1, dir);

	ScanKeyInit(&scan->keys[0], 1, BTEqualStrategyNumber, F_TEXTEQ, PointerGetDatum(name));
	return DsyncScanRescan(scan, 1);
}

/*
 * DsyncScanName
 *		Every row whose first key column is name.
 */
DsyncScan *
DsyncScanName(DsyncStore *store, text *name)
{
	return ScanByName(store, name, ForwardScanDirection);
}

/*
 * DsyncScanNameUncommitted
 *		Every row version whose first key column is name that is committed
 *		and not deleted, or that a transaction still running is inserting,
 *		updating or deleting (a dirty snapshot: both versions of a row in
 *		flight): for a look that must not miss a change being made.
 */
DsyncScan *
DsyncScanNameUncommitted(DsyncStore *store, text *name)
{
	DsyncScan  *scan = DsyncScanBeginAs(store, DsyncStoreIndex(store), 1,
										ForwardScanDirection, true);

	ScanKeyInit(&scan->keys[0], 1, BTEqualStrategyNumber, F_TEXTEQ, PointerGetDatum(name));
	return DsyncScanRescan(scan, 1);
}

/*
 * DsyncScanSecond
 *		Every row whose second index's first column is key (dsync_fence:
 *		the marks bound to a lease), as of the latest committed state or,
 *		uncommitted, as DsyncScanNameUncommitted sees them.
 */
DsyncScan *
DsyncScanSecond(DsyncStore *store, text *key, bool uncommitted)
{
	DsyncScan  *scan = DsyncScanBeginAs(store, DsyncStoreSecondIndex(store), 1,
										ForwardScanDirection, uncommitted);

	ScanKeyInit(&scan->keys[0], 1, BTEqualStrategyNumber, F_TEXTEQ, PointerGetDatum(key));
	return DsyncScanRescan(scan, 1);
}

/*
 * DsyncScanKey
 *		The row with one whole primary key: (name, slot) of a lease or
 *		permit, (group, member) of a member, (name, seq) of a signal.
 */
DsyncScan *
DsyncScanKey(DsyncStore *store, text *name, Datum second)
{
	DsyncScan  *scan = DsyncScanBegin(store, DsyncStoreIndex(store), 2, ForwardScanDirection);
	RegProcedure eq;

	switch (store->table)
	{
		case DSYNC_TABLE_MEMBER:
			eq = F_TEXTEQ;
			break;
		case DSYNC_TABLE_SIGNAL:
			eq = F_INT8EQ;
			break;
		default:
			eq = F_INT4EQ;
			break;
	}
	ScanKeyInit(&scan->keys[0], 1, BTEqualStrategyNumber, F_TEXTEQ, PointerGetDatum(name));
	ScanKeyInit(&scan->keys[1], 2, BTEqualStrategyNumber, eq, second);
	return DsyncScanRescan(scan, 2);
}

/*
 * DsyncScanFrom
 *		The rows of a lease or permit name from a slot on, in slot order.
 */
DsyncScan *
DsyncScanFrom(DsyncStore *store, text *name, int32 slot)
{
	DsyncScan  *scan = DsyncScanBegin(store, DsyncStoreIndex(store), 2, ForwardScanDirection);

	ScanKeyInit(&scan->keys[0], 1, BTEqualStrategyNumber, F_TEXTEQ, PointerGetDatum(name));
	ScanKeyInit(&scan->keys[1], 2, BTGreaterEqualStrategyNumber, F_INT4GE,
				Int32GetDatum(slot));
	return DsyncScanRescan(scan, 2);
}

/*
 * DsyncScanLast
 *		The rows of a name, last key first (the highest permit slot).
 */
DsyncScan *
DsyncScanLast(DsyncStore *store, text *name)
{
	return ScanByName(store, name, BackwardScanDirection);
}

/*
 * DsyncScanHolder
 *		The permits of a semaphore held (or last held) by holder: one probe
 *		of dsync_permit's (name, holder, slot) index, whatever the number
 *		of permits.
 */
DsyncScan *
DsyncScanHolder(DsyncStore *store, text *name, text *holder)
{
	DsyncScan  *scan;

	scan = DsyncScanBegin(store, DsyncStoreSecondIndex(store), 2, ForwardScanDirection);
	ScanKeyInit(&scan->keys[0], 1, BTEqualStrategyNumber, F_TEXTEQ, PointerGetDatum(name));
	ScanKeyInit(&scan->keys[1], 2, BTEqualStrategyNumber, F_TEXTEQ, PointerGetDatum(holder));
	return DsyncScanRescan(scan, 2);
}

/*
 * DsyncScanFree
 *		The free permits of a semaphore (holder NULL) from a slot on, in
 *		slot order: one probe of the same index.
 */
DsyncScan *
DsyncScanFree(DsyncStore *store, text *name, int32 from_slot)
{
	DsyncScan  *scan;

	scan = DsyncScanBegin(store, DsyncStoreSecondIndex(store), 3, ForwardScanDirection);
	ScanKeyInit(&scan->keys[0], 1, BTEqualStrategyNumber, F_TEXTEQ, PointerGetDatum(name));
	ScanKeyEntryInitialize(&scan->keys[1], SK_ISNULL | SK_SEARCHNULL, 2,
						   InvalidStrategy, InvalidOid, InvalidOid, InvalidOid, (Datum) 0);
	ScanKeyInit(&scan->keys[2], 3, BTGreaterEqualStrategyNumber, F_INT4GE,
				Int32GetDatum(from_slot));
	return DsyncScanRescan(scan, 3);
}

/*
 * DsyncScanAll
 *		Every row of the table, for the views, the reaper's start and the
 *		administrative functions.  Like the other scans it takes no SIREAD
 *		locks, so reading a view in a SERIALIZABLE transaction cannot make
 *		a concurrent dsync call fail serialization.
 */
DsyncScan *
DsyncScanAll(DsyncStore *store)
{
	return DsyncScanBegin(store, NULL, 0, ForwardScanDirection);
}

/*
 * DsyncScanNext
 *		The next row version the scan finds that is visible as of the
 *		latest committed state (plus this transaction's own changes), as a
 *		palloc'd copy, or NULL at the end.
 */
DsyncRow *
DsyncScanNext(DsyncScan *scan)
{
	for (;;)
	{
		HeapTuple	tuple;
		Buffer		buffer;
		bool		visible;
		DsyncRow   *row;
		MemoryContext oldcontext;

		CHECK_FOR_INTERRUPTS();
		/* Whatever the scan allocates must last as long as it does. */
		oldcontext = MemoryContextSwitchTo(scan->cxt);
		if (scan->hscan)
		{
			tuple = heap_getnext(scan->hscan, ForwardScanDirection);
			buffer = tuple ? ((HeapScanDesc) scan->hscan)->rs_cbuf : InvalidBuffer;
		}
		else
		{
			BufferHeapTupleTableSlot *bslot = (BufferHeapTupleTableSlot *) scan->slot;

			tuple = NULL;
			buffer = InvalidBuffer;
			if (index_getnext_slot(scan->iscan, scan->direction, scan->slot))
			{
				tuple = bslot->base.tuple;
				buffer = bslot->buffer;
			}
		}
		MemoryContextSwitchTo(oldcontext);
		if (tuple == NULL)
			return NULL;

		LockBuffer(buffer, BUFFER_LOCK_SHARE);
		visible = HeapTupleSatisfiesVisibility(tuple, scan->snapshot, buffer);
		LockBuffer(buffer, BUFFER_LOCK_UNLOCK);
		if (!visible)
			continue;

		row = palloc(sizeof(DsyncRow));
		DsyncStoreLoadRow(scan->store, tuple, row);
		if (DsyncStoreCheckRow(scan->store, row))
			return row;
		DsyncRowFree(scan->store, row);
	}
}

/*
 * DsyncScanEnd
 *		End a scan.
 */
void
DsyncScanEnd(DsyncScan *scan)
{
	if (scan->hscan)
		table_endscan(scan->hscan);
	else
	{
		ExecDropSingleTupleTableSlot(scan->slot);
		index_endscan(scan->iscan);
	}
	if (scan->snapshot != &scan->dirty)
		UnregisterSnapshot(scan->snapshot);
	pfree(scan);
}

/*
 * DsyncScanList
 *		Every row a scan finds, as a List, and end the scan.
 */
List *
DsyncScanList(DsyncScan *scan)
{
	List	   *rows = NIL;
	DsyncRow   *row;

	while ((row = DsyncScanNext(scan)) != NULL)
		rows = lappend(rows, row);
	DsyncScanEnd(scan);
	return rows;
}

/*
 * ScanLocatedKeyIs
 *		Whether a row has the key (name, slot).
 */
static bool
ScanLocatedKeyIs(DsyncRow *row, text *name, int32 slot)
{
	text	   *found = DatumGetTextPP(row->values[0]);

	return !row->nulls[0] && !row->nulls[1] &&
		DatumGetInt32(row->values[1]) == slot &&
		VARSIZE_ANY_EXHDR(found) == VARSIZE_ANY_EXHDR(name) &&
		memcmp(VARDATA_ANY(found), VARDATA_ANY(name), VARSIZE_ANY_EXHDR(name)) == 0;
}

/*
 * ScanPruneNearlyFull
 *		Prune a page once it is nearly full, as an index fetch would, but
 *		not sooner.
 *
 * heap_page_prune_opt tries whenever a page's free space is below the
 * table's fillfactor target: for dsync's tables (fillfactor 50, room for
 * the versions of HOT updates) that is on most visits, and each try then
 * clears the one or two versions that died since the last.  Waiting until
 * a tenth of the page is left clears dozens in one go, while the updates
 * still find room on their page and stay HOT.
 */
static void
ScanPruneNearlyFull(Relation rel, Buffer buffer)
{
	/* An unlocked look, as heap_page_prune_opt's own first one. */
	if (PageGetHeapFreeSpace(BufferGetPage(buffer)) < BLCKSZ / 10)
		heap_page_prune_opt(rel, buffer);
}

/*
 * ScanLocatedWalk
 *		The version of (name, slot) at a location the cache had (cached),
 *		or a newer one its update chain leads to, if that is the version
 *		visible in snapshot; else NULL, and the caller scans the index.
 *
 * The primary key is unique, so a visible version carrying the key is the
 * one an index scan would find: whatever the location held (an old version,
 * another row reusing the slot, a page past the end after a truncation),
 * the answer is either that very row or NULL.  The chain is followed as
 * heapam follows it, only while each version's xmin is its predecessor's
 * updater, and not for long: a cache that lags far behind costs one index
 * scan and is then brought up to date.
 */
static DsyncRow *
ScanLocatedWalk(DsyncStore *store, text *name, int32 slot, Snapshot snapshot,
				ItemPointer cached)
{
	ItemPointerData tid = *cached;
	TransactionId prior_xmax = InvalidTransactionId;
	BlockNumber nblocks = DsyncStoreBlockCount(store->rel);

	for (int hop = 0; hop < DSYNC_LOCATE_HOPS; hop++)
	{
		BlockNumber blkno = ItemPointerGetBlockNumber(&tid);
		OffsetNumber offnum = ItemPointerGetOffsetNumber(&tid);
		Buffer		buffer;
		Page		page;
		ItemId		lp = NULL;
		HeapTupleData tuple;
		DsyncRow   *row = NULL;
		uint16		infomask;

		CHECK_FOR_INTERRUPTS();
		/* Past the size known: ask whether it grew. */
		if (blkno >= nblocks)
			nblocks = RelationGetNumberOfBlocks(store->rel);
		if (blkno >= nblocks)
			return NULL;
		buffer = ReadBuffer(store->rel, blkno);
		ScanPruneNearlyFull(store->rel, buffer);
		LockBuffer(buffer, BUFFER_LOCK_SHARE);
		page = BufferGetPage(buffer);
		if (offnum >= FirstOffsetNumber && offnum <= PageGetMaxOffsetNumber(page))
		{
			lp = PageGetItemId(page, offnum);
			if (ItemIdIsRedirected(lp))
			{
				offnum = ItemIdGetRedirect(lp);
				lp = PageGetItemId(page, offnum);
			}
			if (!ItemIdIsNormal(lp))
				lp = NULL;
		}
		if (lp != NULL)
		{
			ItemPointerSet(&tuple.t_self, blkno, offnum);
			tuple.t_data = (HeapTupleHeader) PageGetItem(page, lp);
			tuple.t_len = ItemIdGetLength(lp);
			tuple.t_tableOid = RelationGetRelid(store->rel);
			/* A broken chain: the slot now holds something else. */
			if (TransactionIdIsValid(prior_xmax) &&
				!TransactionIdEquals(prior_xmax, HeapTupleHeaderGetXmin(tuple.t_data)))
				lp = NULL;
		}
		if (lp == NULL)
		{
			UnlockReleaseBuffer(buffer);
			return NULL;
		}
		if (HeapTupleSatisfiesVisibility(&tuple, snapshot, buffer))
		{
			row = palloc(sizeof(DsyncRow));
			DsyncStoreLoadRow(store, &tuple, row);
			UnlockReleaseBuffer(buffer);
			if (!ScanLocatedKeyIs(row, name, slot))
			{
				DsyncRowFree(store, row);
				return NULL;
			}
			/* Save the next caller the walk, unless it may still roll back. */
			if (hop > 0 && !TransactionIdIsCurrentTransactionId(row->xmin))
				DsyncLocatePut(store->rel, name, &row->tid, cached);
			if (DsyncStoreCheckRow(store, row))
				return row;
			DsyncRowFree(store, row);
			return NULL;
		}

		/* An invisible version leads on only if an update replaced it. */
		infomask = tuple.t_data->t_infomask;
		if ((infomask & HEAP_XMAX_INVALID) || HEAP_XMAX_IS_LOCKED_ONLY(infomask) ||
			ItemPointerEquals(&tuple.t_self, &tuple.t_data->t_ctid) ||
			HeapTupleHeaderIndicatesMovedPartitions(tuple.t_data))
		{
			UnlockReleaseBuffer(buffer);
			return NULL;
		}
		prior_xmax = HeapTupleHeaderGetUpdateXid(tuple.t_data);
		tid = tuple.t_data->t_ctid;
		UnlockReleaseBuffer(buffer);
	}
	return NULL;
}

/*
 * ScanLocated
 *		ScanLocatedWalk from the location the cache has for name, if any;
 *		*cached is set to it (invalid if none).
 *
 * The snapshot is taken after the location is read: a location is
 * published once its transaction shows as committed, so the version there
 * is never too new for the snapshot, which would send us to the index.
 */
static DsyncRow *
ScanLocated(DsyncStore *store, text *name, int32 slot, ItemPointer cached)
{
	Snapshot	snapshot;
	DsyncRow   *row;

	ItemPointerSetInvalid(cached);
	if (!DsyncLocateGet(store->rel, name, cached))
		return NULL;
	snapshot = RegisterSnapshot(DsyncLatestSnapshot());
	row = ScanLocatedWalk(store, name, slot, snapshot, cached);
	UnregisterSnapshot(snapshot);
	return row;
}

/*
 * DsyncScanKeyCached
 *		The row with key (name, slot) of dsync_lease as of the latest
 *		committed state, if the location cache knows it; else NULL, with
 *		no index probe (the caller looks another way).
 */
DsyncRow *
DsyncScanKeyCached(DsyncStore *store, text *name, int32 slot)
{
	ItemPointerData cached;

	Assert(store->table == DSYNC_TABLE_LEASE);
	return ScanLocated(store, name, slot, &cached);
}

/*
 * DsyncScanKeyLatest
 *		The row with key (name, slot) of dsync_lease as of the latest
 *		committed state, or NULL: the tuple the location cache points at
 *		when that is still the row, else one index probe, whose answer is
 *		then cached for the next caller.
 *
 * Under an old snapshot the index probe meets every version the snapshot
 * keeps alive; the cached location does not, so the cost of a call stays
 * flat however long such a snapshot stays open.
 */
DsyncRow *
DsyncScanKeyLatest(DsyncStore *store, text *name, int32 slot)
{
	DsyncScan  *scan;
	DsyncRow   *row;
	ItemPointerData cached;

	Assert(store->table == DSYNC_TABLE_LEASE);
	row = ScanLocated(store, name, slot, &cached);
	if (row != NULL)
		return row;

	scan = DsyncScanKey(store, name, Int32GetDatum(slot));
	row = DsyncScanNext(scan);
	/* Only committed versions are published: others may still roll back. */
	if (row != NULL && !TransactionIdIsCurrentTransactionId(row->xmin))
		DsyncLocatePut(store->rel, name, &row->tid, &cached);
	DsyncScanEnd(scan);
	return row;
}
