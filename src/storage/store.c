/*-------------------------------------------------------------------------
 *
 * store.c
 *		Direct access to the extension's tables: opening them, and locking
 *		and changing rows (claiming a new key is storekey.c's).
 *
 * The dsync functions read and write their tables below the executor, for
 * three reasons:
 *
 *	- Latest committed state at every isolation level.  Rows are found with
 *	  an index scan under SnapshotAny and filtered with a fresh snapshot
 *	  (GetLatestSnapshot), so a REPEATABLE READ or SERIALIZABLE caller acts
 *	  on what has been committed now, not on its old snapshot.  Checking
 *	  visibility ourselves also keeps SSI out of it: no SIREAD locks are
 *	  taken and no serialization failure can come from dsync's own reads.
 *
 *	- Control over waiting.  A plain lease's row is changed with one
 *	  heap_update that does not wait (DsyncStoreTryUpdate); a row that is
 *	  locked, and every other row, is locked with heap_lock_tuple and an
 *	  explicit wait policy before it is changed: acquire uses
 *	  LockWaitSkip, so it never blocks on another transaction's uncommitted
 *	  grant or guard, while release and renew of one's own lease wait.
 *
 *	- Speed.  No parsing, planning or executor start-up on the hot path.
 *
 * Finding rows is in scan.c, and checking what a row says in row.c; this
 * file opens the tables and locks, changes, inserts and deletes rows.
 *
 * Every change is followed by CommandCounterIncrement so that a later call
 * in the same statement sees it.  Every lock taken here is held until the
 * transaction (or the savepoint) ends, so each one also schedules a wake-up
 * of the name's waiters for that moment (wait.c).
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
#include "catalog/index.h"
#include "common/hashfn.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "nodes/execnodes.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "access/multixact.h"
#include "storage/procarray.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "catalog.h"
#include "locate.h"
#include "wait.h"
#include "dbslot.h"
#include "heldmap.h"
#include "store.h"
#include "store_int.h"
#include "compat.h"

/*
 * DsyncStoreOpen
 *		Open one of the extension's tables, found from the function being
 *		called; its indexes are opened when first needed.
 */
void
DsyncStoreOpen(DsyncStore *store, FunctionCallInfo fcinfo, DsyncTable table,
			   bool for_write)
{
	DsyncStoreOpenCatalog(store, DsyncCatalogGet(fcinfo), table, for_write);
}

/*
 * DsyncStoreOpenCatalog
 *		Open a table, given where it is.
 *
 * The relation may have been dropped since the catalog was cached (DROP
 * EXTENSION while we waited): that is reported as such, not as a missing
 * relation OID.
 */
void
DsyncStoreOpenCatalog(DsyncStore *store, const DsyncCatalog *catalog,
					  DsyncTable table, bool for_write)
{
	DsyncCatalogRequire(catalog, table);
	memset(store, 0, sizeof(*store));
	store->catalog = catalog;
	store->table = table;
	store->lockmode = for_write ? RowExclusiveLock : AccessShareLock;
	store->rel = try_table_open(catalog->rels[table], store->lockmode);
	if (store->rel == NULL)
		DsyncCatalogReportDropped();
}

/*
 * DsyncStoreHasSecondIndex
 *		Whether a table has an index besides its primary key: dsync_permit,
 *		and dsync_fence from 1.5 on.
 */
static bool
DsyncStoreHasSecondIndex(const DsyncStore *store)
{
	return store->table == DSYNC_TABLE_PERMIT ||
		(store->table == DSYNC_TABLE_FENCE && store->catalog->fence_relid);
}

/*
 * DsyncStoreOpenIndexes
 *		Open a table's indexes, the first time a caller needs one: a call
 *		that finds its row through the location cache (locate.c) and
 *		updates it in place (HOT) never does.  dsync_fence's index on lease
 *		is only noted: a writer raising a mark (a HOT update) never needs
 *		it, and opening it would cost every fenced write (see
 *		DsyncStoreSecondIndex).
 */
static void
DsyncStoreOpenIndexes(DsyncStore *store)
{
	List	   *indexes;
	ListCell   *lc;
	Oid			pkey;

	if (store->indexes_open)
		return;
	/* The table is locked, so its indexes stay as they are. */
	pkey = DsyncPrimaryKeyIndex(store->rel);
	indexes = RelationGetIndexList(store->rel);
	foreach(lc, indexes)
	{
		Oid			indexoid = lfirst_oid(lc);

		if (indexoid == pkey)
			store->index = index_open(indexoid, store->lockmode);
		else if (DsyncStoreHasSecondIndex(store))
			store->second_oid = indexoid;
	}
	list_free(indexes);
	store->indexes_open = true;
	if (OidIsValid(store->second_oid) && store->table == DSYNC_TABLE_PERMIT)
		store->second_index = index_open(store->second_oid, store->lockmode);
	if (store->index == NULL || (DsyncStoreHasSecondIndex(store) && !OidIsValid(store->second_oid)))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("dsync table \"%s\" has lost an index", DsyncTableName(store->table)),
				 errhint("Reinstall the extension with DROP EXTENSION dsync; CREATE EXTENSION dsync.")));
}

/*
 * DsyncStoreIndex
 *		A table's primary key index, opened if need be.
 */
Relation
DsyncStoreIndex(DsyncStore *store)
{
	DsyncStoreOpenIndexes(store);
	return store->index;
}

/*
 * DsyncStoreSecondIndex
 *		A table's other index, opened if need be: dsync_permit's (name,
 *		holder, slot), dsync_fence's (lease).
 */
Relation
DsyncStoreSecondIndex(DsyncStore *store)
{
	Assert(DsyncStoreHasSecondIndex(store));
	DsyncStoreOpenIndexes(store);
	if (store->second_index == NULL)
		store->second_index = index_open(store->second_oid, store->lockmode);
	return store->second_index;
}

/*
 * DsyncStoreBlockCount
 *		A lower bound of the number of blocks of a table this backend has
 *		locked: the size it last knew, with no system call, or else the
 *		size now.  0 means "look": the table may have grown since.
 *
 * While a backend holds any lock on a table, the table only grows: VACUUM
 * truncates it and TRUNCATE replaces it only under locks that conflict
 * with every lock dsync takes, and both make every backend forget the size
 * it knew (smgr invalidation).  So a size once seen stays a lower bound.
 */
BlockNumber
DsyncStoreBlockCount(Relation rel)
{
	BlockNumber known = RelationGetSmgr(rel)->smgr_cached_nblocks[MAIN_FORKNUM];

	if (known != InvalidBlockNumber && known > 0)
		return known;
	return RelationGetNumberOfBlocks(rel);
}

/*
 * DsyncStoreClose
 *		Close what DsyncStoreOpen opened; locks stay until transaction end.
 */
void
DsyncStoreClose(DsyncStore *store)
{
	if (store->second_index)
		index_close(store->second_index, NoLock);
	if (store->index)
		index_close(store->index, NoLock);
	table_close(store->rel, NoLock);
}

/*
 * DsyncStoreCloseUnlock
 *		Close a table only read from and let go of its locks at once, as
 *		catalog lookups do: a caller that goes on to wait must hold no
 *		table lock while it sleeps.
 */
void
DsyncStoreCloseUnlock(DsyncStore *store)
{
	Assert(store->lockmode == AccessShareLock);
	if (store->second_index)
		index_close(store->second_index, store->lockmode);
	if (store->index)
		index_close(store->index, store->lockmode);
	table_close(store->rel, store->lockmode);
}

/*
 * DsyncStoreNewRow
 *		A row with every column NULL, to fill in and insert.
 */
DsyncRow *
DsyncStoreNewRow(void)
{
	DsyncRow   *row = palloc0(sizeof(DsyncRow));

	for (int i = 0; i < DSYNC_MAX_ATTS; i++)
		row->nulls[i] = true;
	return row;
}

/*
 * DsyncStoreLoadRow
 *		Copy a heap tuple's columns into a row, so it outlives the buffer.
 */
void
DsyncStoreLoadRow(DsyncStore *store, HeapTuple tuple, DsyncRow *row)
{
	TupleDesc	desc = RelationGetDescr(store->rel);

	Assert(desc->natts <= DSYNC_MAX_ATTS);
	heap_deform_tuple(tuple, desc, row->values, row->nulls);
	/* Columns a table from an older version lacks read as NULL. */
	for (int i = desc->natts; i < DSYNC_MAX_ATTS; i++)
		row->nulls[i] = true;
	for (int i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);

		if (!row->nulls[i] && !att->attbyval)
			row->values[i] = datumCopy(row->values[i], att->attbyval, att->attlen);
	}
	row->tid = tuple->t_self;
	row->xmin = HeapTupleHeaderGetRawXmin(tuple->t_data);
	row->unlocked = (tuple->t_data->t_infomask & HEAP_XMAX_INVALID) != 0;
	row->xmax = HeapTupleHeaderGetRawXmax(tuple->t_data);
	row->infomask = tuple->t_data->t_infomask;
}

/*
 * DsyncRowXmaxRunning
 *		Whether the version a row was read from is being updated, deleted
 *		or locked by a transaction still running (a guard, the reaper, an
 *		uncommitted change), as far as its xmax showed when read.
 */
bool
DsyncRowXmaxRunning(const DsyncRow *row)
{
	if (row->infomask & HEAP_XMAX_INVALID)
		return false;
	if (row->infomask & HEAP_XMAX_IS_MULTI)
		return MultiXactIdIsRunning(row->xmax, HEAP_XMAX_IS_LOCKED_ONLY(row->infomask));
	return TransactionIdIsInProgress(row->xmax);
}

/*
 * DsyncRowFree
 *		Free a row a scan returned, with its copied values, for loops over
 *		a whole table that keep few of the rows they read.
 */
void
DsyncRowFree(DsyncStore *store, DsyncRow *row)
{
	TupleDesc	desc = RelationGetDescr(store->rel);

	for (int i = 0; i < desc->natts; i++)
		if (!row->nulls[i] && !TupleDescAttr(desc, i)->attbyval)
			pfree(DatumGetPointer(row->values[i]));
	pfree(row);
}

/*
 * DsyncStoreCheckRow
 *		Refuse a damaged row: an error, or (for the reaper and the views,
 *		which must go on with the other rows) a warning and false.
 */
bool
DsyncStoreCheckRow(DsyncStore *store, DsyncRow *row)
{
	const char *why = DsyncRowDamage(store->table, row);

	if (why == NULL)
		return true;
	ereport(store->tolerant ? WARNING : ERROR,
			(errcode(ERRCODE_DATA_CORRUPTED),
			 errmsg("row (%u,%u) of dsync table \"%s\" is damaged: %s",
					ItemPointerGetBlockNumber(&row->tid),
					ItemPointerGetOffsetNumber(&row->tid),
					DsyncTableName(store->table), why),
			 errdetail("It was not written by dsync's functions."),
			 errhint("Delete the row (as a superuser); dsync ignores it meanwhile where it can.")));
	return false;
}

/*
 * DsyncStoreWakeAtEnd
 *		Wake the waiters of a name when this transaction ends: lease and
 *		semaphore waiters for lease and permit rows, signal waiters for
 *		signals.
 */
static void
DsyncStoreWakeAtEnd(DsyncStore *store, text *name)
{
	if (store->table == DSYNC_TABLE_LEASE || store->table == DSYNC_TABLE_PERMIT)
		DsyncWakeAtEnd(DsyncWaitKey(name));
	else if (store->table == DSYNC_TABLE_SIGNAL)
		DsyncWakeAtEnd(DsyncWaitKeySignal(name));
}

/*
 * DsyncStoreLockedByReaper
 *		Whether xid is this database's reaper clearing expired leases.
 */
bool
DsyncStoreLockedByReaper(TransactionId xid)
{
	DsyncDbSlot *slot;

	if (!TransactionIdIsValid(xid))
		return false;
	slot = DsyncDbSlotFind(MyDatabaseId);
	return slot != NULL && TransactionIdEquals(slot->reaper_xid, xid);
}

/*
 * DsyncStoreReportChanged
 *		A row version this transaction read was changed by this same
 *		transaction behind dsync's back (TM_SelfModified, TM_Invisible):
 *		never a user's doing, so an internal error.
 */
static void
DsyncStoreReportChanged(DsyncStore *store, DsyncRow *row)
{
	ereport(ERROR,
			(errcode(ERRCODE_INTERNAL_ERROR),
			 errmsg_internal("dsync row (%u,%u) of \"%s\" changed unexpectedly within this transaction",
							 ItemPointerGetBlockNumber(&row->tid),
							 ItemPointerGetOffsetNumber(&row->tid),
							 DsyncTableName(store->table))));
}

/*
 * StoreNoteHeld
 *		Tell the held map (heldmap.c) that this transaction locks or writes
 *		a version of a lease, before it does: ephemeral grants of the name
 *		look at the table until the transaction ends, as they would see
 *		its xmin or xmax there.  written: the version being written, whose
 *		holder's expiry counts.  Either way the holder's expiry is noted,
 *		since the transaction may leave that holder behind past it.
 */
static void
StoreNoteHeld(DsyncStore *store, const DsyncRow *row, bool written)
{
	TimestampTz expiry = 0;

	/*
	 * A plain lease, or any holder in dsync_permit: a shared holder of a
	 * lease (shared.c), or a permit, which keeps ephemeral grants out once
	 * its semaphore is dropped.
	 */
	if (row->nulls[Anum_lease_name - 1] || row->nulls[Anum_lease_slot - 1])
		return;
	if (store->table == DSYNC_TABLE_LEASE ? DsyncRowSlot(row) != 0 :
		store->table != DSYNC_TABLE_PERMIT)
		return;
	if (!row->nulls[Anum_lease_holder - 1] && !row->nulls[Anum_lease_expires_at - 1])
		expiry = DsyncRowExpiry(row);
	DsyncHeldMapNote(DatumGetTextPP(row->values[Anum_lease_name - 1]),
					 written ? expiry : 0, expiry);
}

/*
 * DsyncStoreLock
 *		Lock the row version a scan returned, with the given wait policy.
 *
 * On TM_Ok the row is reloaded from the locked version, which is then the
 * latest one: nobody can change it until this transaction ends.  Any other
 * result means the caller must decide again (TM_Updated, TM_Deleted: a
 * change was committed since the scan, so scan again; TM_WouldBlock:
 * another transaction is changing or guarding it right now).
 */
TM_Result
DsyncStoreLock(DsyncStore *store, DsyncRow *row, LockTupleMode mode,
			   LockWaitPolicy policy)
{
	HeapTupleData tuple;
	Buffer		buffer;
	TM_FailureData tmfd;
	TM_Result	result;

	StoreNoteHeld(store, row, false);
	tuple.t_self = row->tid;
	result = heap_lock_tuple(store->rel, &tuple, GetCurrentCommandId(true),
							 mode, policy, false, &buffer, &tmfd);
	if (result == TM_WouldBlock && DsyncStoreLockedByReaper(tmfd.xmax))
	{
		/*
		 * The reaper is clearing this expired row: that is not a holder
		 * or a guard, and its short transaction never waits for anyone.
		 * Wait for it to end rather than report a free lease as busy, then
		 * try again with the caller's policy (so that a lock-only xmax
		 * that merely looked like the reaper's still never makes us wait
		 * for a guard).
		 */
		ReleaseBuffer(buffer);
		XactLockTableWait(tmfd.xmax, NULL, NULL, XLTW_None);
		result = heap_lock_tuple(store->rel, &tuple, GetCurrentCommandId(true),
								 mode, policy, false, &buffer, &tmfd);
	}
	if (result == TM_Ok)
	{
		DsyncStoreLoadRow(store, &tuple, row);
		/* Whoever meets this lock must look again once it is gone. */
		DsyncStoreWakeAtEnd(store, DatumGetTextPP(row->values[0]));
		DsyncXactChanged();
	}
	ReleaseBuffer(buffer);

	if (result == TM_Invisible || result == TM_SelfModified)
		DsyncStoreReportChanged(store, row);
	if (result == TM_Ok && !DsyncStoreCheckRow(store, row))
		return TM_Updated;		/* damaged in the meantime: never use it */
	return result;
}

/*
 * DsyncStoreIndexInsertOne
 *		Add an index entry for a new (or non-HOT) row version.
 */
static void
DsyncStoreIndexInsertOne(DsyncStore *store, Relation index, HeapTuple tuple,
						 DsyncRow *row, bool unchanged)
{
	Datum		values[INDEX_MAX_KEYS];
	bool		nulls[INDEX_MAX_KEYS];
	IndexInfo  *info = BuildIndexInfo(index);

	for (int i = 0; i < info->ii_NumIndexKeyAttrs; i++)
	{
		AttrNumber	attnum = info->ii_IndexAttrNumbers[i];

		Assert(attnum > 0 && attnum <= DSYNC_MAX_ATTS);
		values[i] = row->values[attnum - 1];
		nulls[i] = row->nulls[attnum - 1];
	}
	/*
	 * An update keeps the key, and the version it replaces (locked by us,
	 * live to everyone else) already stops any other insert of that key:
	 * a unique check would only walk the key's older entries, which under
	 * an old snapshot pile up with every change.
	 */
	index_insert(index, values, nulls, &tuple->t_self, store->rel,
				 info->ii_Unique && !unchanged ? UNIQUE_CHECK_YES : UNIQUE_CHECK_NO,
				 unchanged, info);
}

/*
 * DsyncStoreIndexInsert
 *		Add entries for a new (or non-HOT) row version to every index.
 *		The primary key's columns never change in an update.
 */
static void
DsyncStoreIndexInsert(DsyncStore *store, HeapTuple tuple, DsyncRow *row, bool update)
{
	DsyncStoreIndexInsertOne(store, DsyncStoreIndex(store), tuple, row, update);
	if (DsyncStoreHasSecondIndex(store))
		DsyncStoreIndexInsertOne(store, DsyncStoreSecondIndex(store), tuple, row, false);
}

/*
 * DsyncStoreWritten
 *		What follows every row version written, whichever way: its index
 *		entries unless the update was HOT, the row pointing at it, its
 *		location noted for the cache (locate.c), the change made visible
 *		to the rest of the statement.
 */
static void
DsyncStoreWritten(DsyncStore *store, DsyncRow *row, HeapTuple tuple, bool update)
{
	if (!update || !HeapTupleIsHeapOnly(tuple))
		DsyncStoreIndexInsert(store, tuple, row, update);
	row->tid = tuple->t_self;
	row->xmin = GetCurrentTransactionId();
	row->unlocked = true;
	heap_freetuple(tuple);
	if (store->table == DSYNC_TABLE_LEASE)
		DsyncLocateAtCommit(store->rel, DatumGetTextPP(row->values[0]), &row->tid);
	DsyncXactChanged();
	CommandCounterIncrement();
}

/*
 * DsyncStoreWrite
 *		Write a row's values as a new row (insert), or as the new version of
 *		the locked row it was read from (update), with its index entries.
 *
 * Only key columns are indexed, so an update is a HOT update whenever the
 * page has room (which the tables' fillfactor sees to) and, for permits,
 * the holder does not change; otherwise the indexes get the new version
 * too.  Either way the row then points at the version written.
 */
static void
DsyncStoreWrite(DsyncStore *store, DsyncRow *row, bool update)
{
	HeapTuple	tuple;

	Assert(store->lockmode == RowExclusiveLock);
	Assert(!update || ItemPointerIsValid(&row->tid));
	StoreNoteHeld(store, row, true);
	tuple = heap_form_tuple(RelationGetDescr(store->rel), row->values, row->nulls);
	if (update)
		DsyncSimpleHeapUpdate(store->rel, &row->tid, tuple);
	else
		simple_heap_insert(store->rel, tuple);
	DsyncStoreWritten(store, row, tuple, update);
}

/*
 * DsyncStoreUpdate
 *		Write a locked row back with its new values.
 */
void
DsyncStoreUpdate(DsyncStore *store, DsyncRow *row)
{
	DsyncStoreWrite(store, row, true);
}

/*
 * DsyncServerHasAssertions
 *		Whether the server (not only dsync) was built with assertions.
 */
static bool
DsyncServerHasAssertions(void)
{
	static int	has_assertions = -1;

	if (has_assertions < 0)
	{
		const char *value = GetConfigOption("debug_assertions", false, false);

		has_assertions = value != NULL && strcmp(value, "on") == 0;
	}
	return has_assertions == 1;
}

/*
 * DsyncStoreTryUpdate
 *		Write a row's new values over the version it was read from, with no
 *		lock taken first: the update is the lock, and one WAL record rather
 *		than two.
 *
 * Returns TM_Ok when written (row->tid is then the new version);
 * TM_Updated or TM_Deleted when a change was committed since the row was
 * read (scan again); TM_BeingModified when a transaction, this one
 * included, has the version locked or is changing it: heap_update would
 * have to wait, or to work out whether the lock is one it may pass, so the
 * caller takes the slow path (DsyncStoreLock, then DsyncStoreUpdate),
 * which knows guards, the reaper and this transaction's own locks.
 *
 * A version that had an xmax when it was read (a lock, perhaps of a
 * transaction long gone) goes the slow way at once.  So does every row on
 * a server built with assertions: heap_update asserts that no caller asks
 * it not to wait, though without assertions it returns TM_BeingModified
 * as it does for the other failures, which is what this relies on.
 */
TM_Result
DsyncStoreTryUpdate(DsyncStore *store, DsyncRow *row)
{
	HeapTuple	tuple;
	TM_FailureData tmfd;
	TM_Result	result;

	Assert(store->lockmode == RowExclusiveLock);
	Assert(ItemPointerIsValid(&row->tid));
	if (!row->unlocked || DsyncServerHasAssertions())
		return TM_BeingModified;
	StoreNoteHeld(store, row, true);
	tuple = heap_form_tuple(RelationGetDescr(store->rel), row->values, row->nulls);
	result = DsyncHeapUpdateNoWait(store->rel, &row->tid, tuple, &tmfd);
	switch (result)
	{
		case TM_Ok:
			/* What DsyncStoreLock would have scheduled for its lock. */
			DsyncStoreWakeAtEnd(store, DatumGetTextPP(row->values[0]));
			DsyncStoreWritten(store, row, tuple, true);
			return TM_Ok;
		case TM_Updated:
		case TM_Deleted:
		case TM_BeingModified:
			break;
		default:
			DsyncStoreReportChanged(store, row);
	}
	heap_freetuple(tuple);
	return result;
}

/*
 * DsyncStoreInsert
 *		Add a row.  For a key that may be inserted concurrently, the caller
 *		has claimed it (DsyncStoreClaimKey), so that the unique check never
 *		has to wait.
 */
void
DsyncStoreInsert(DsyncStore *store, DsyncRow *row)
{
	DsyncStoreWrite(store, row, false);
}

/*
 * DsyncStoreDelete
 *		Delete a row this transaction has locked.
 */
void
DsyncStoreDelete(DsyncStore *store, DsyncRow *row)
{
	Assert(store->lockmode == RowExclusiveLock);
	Assert(ItemPointerIsValid(&row->tid));

	simple_heap_delete(store->rel, &row->tid);
	DsyncXactChanged();
	CommandCounterIncrement();
}
