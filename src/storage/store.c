/*-------------------------------------------------------------------------
 *
 * store.c
 *		Direct access to the extension's tables: opening them, locking and
 *		changing rows, and claiming a new key.
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
#include "compat.h"

/*
 * Lock class for the per-key insert lock (the fourth field of an advisory
 * lock tag; PostgreSQL's own advisory locks use 1 and 2).
 */
#define DSYNC_INSERT_LOCK_CLASS 0x6473

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
 * DsyncStoreOpenIndexes
 *		Open a table's indexes, the first time a caller needs one: a call
 *		that finds its row through the location cache (locate.c) and
 *		updates it in place (HOT) never does.
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
		else if (store->table == DSYNC_TABLE_PERMIT)
			store->holder_index = index_open(indexoid, store->lockmode);
	}
	list_free(indexes);
	store->indexes_open = true;
	if (store->index == NULL || (store->table == DSYNC_TABLE_PERMIT && store->holder_index == NULL))
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
 * DsyncStoreHolderIndex
 *		dsync_permit's (name, holder, slot) index, opened if need be.
 */
Relation
DsyncStoreHolderIndex(DsyncStore *store)
{
	Assert(store->table == DSYNC_TABLE_PERMIT);
	DsyncStoreOpenIndexes(store);
	return store->holder_index;
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
	if (store->holder_index)
		index_close(store->holder_index, NoLock);
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
	if (store->holder_index)
		index_close(store->holder_index, store->lockmode);
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
static bool
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
 *		holder's expiry counts.
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
	if (written && !row->nulls[Anum_lease_holder - 1] &&
		!row->nulls[Anum_lease_expires_at - 1])
		expiry = DsyncRowExpiry(row);
	DsyncHeldMapNote(DatumGetTextPP(row->values[Anum_lease_name - 1]), expiry);
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
	if (store->table == DSYNC_TABLE_PERMIT)
		DsyncStoreIndexInsertOne(store, DsyncStoreHolderIndex(store), tuple, row, false);
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

/*
 * DsyncStoreKeyTag
 *		The insert lock's tag for one key of a table.
 */
static void
DsyncStoreKeyTag(DsyncStore *store, text *name, Datum second, LOCKTAG *tag)
{
	uint64		seed = 0;
	uint64		hash;

	if (store->table == DSYNC_TABLE_LEASE || store->table == DSYNC_TABLE_PERMIT)
		seed = (uint64) DatumGetInt32(second);
	else if (store->table == DSYNC_TABLE_MEMBER)
	{
		text	   *member = DatumGetTextPP(second);

		seed = hash_bytes_extended((const unsigned char *) VARDATA_ANY(member),
								   VARSIZE_ANY_EXHDR(member), 0);
	}
	hash = hash_bytes_extended((const unsigned char *) VARDATA_ANY(name),
							   VARSIZE_ANY_EXHDR(name), seed);
	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, (uint32) (hash >> 32), (uint32) hash,
						 DSYNC_INSERT_LOCK_CLASS + store->table);
}

/*
 * StoreDirtyScanBegin
 *		Start an index scan for one key with a dirty snapshot, which also
 *		returns versions other transactions are inserting or changing now
 *		(dirty->xmin, dirty->xmax tell which).  The caller ends it with
 *		StoreDirtyScanEnd.
 */
static IndexScanDesc StoreDirtyScanBeginRange(DsyncStore *store, text *name, Datum second,
											  bool from_second, Snapshot dirty,
											  TupleTableSlot **slot);

static IndexScanDesc
StoreDirtyScanBegin(DsyncStore *store, text *name, Datum second, Snapshot dirty,
					TupleTableSlot **slot)
{
	return StoreDirtyScanBeginRange(store, name, second, false, dirty, slot);
}

/*
 * StoreDirtyScanBeginRange
 *		StoreDirtyScanBegin; from_second: every key from second on (a
 *		range of permit slots) rather than second alone.
 */
static IndexScanDesc
StoreDirtyScanBeginRange(DsyncStore *store, text *name, Datum second, bool from_second,
						 Snapshot dirty, TupleTableSlot **slot)
{
	IndexScanDesc scan;
	ScanKeyData keys[2];
	int			nkeys = (store->table == DSYNC_TABLE_SEMAPHORE ||
						 store->table == DSYNC_TABLE_FENCE) ? 1 : 2;

	InitDirtySnapshot(*dirty);
	ScanKeyInit(&keys[0], 1, BTEqualStrategyNumber, F_TEXTEQ, PointerGetDatum(name));
	if (nkeys == 2 && from_second)
		ScanKeyInit(&keys[1], 2, BTGreaterEqualStrategyNumber, F_INT4GE, second);
	else if (nkeys == 2)
		ScanKeyInit(&keys[1], 2, BTEqualStrategyNumber,
					store->table == DSYNC_TABLE_MEMBER ? F_TEXTEQ : F_INT4EQ, second);
	scan = DsyncIndexBeginscan(store->rel, DsyncStoreIndex(store), dirty, nkeys, 0);
	index_rescan(scan, keys, nkeys, NULL, 0);
	*slot = table_slot_create(store->rel, NULL);
	return scan;
}

/*
 * StoreDirtyScanEnd
 *		End what StoreDirtyScanBegin started.
 */
static void
StoreDirtyScanEnd(IndexScanDesc scan, TupleTableSlot *slot)
{
	ExecDropSingleTupleTableSlot(slot);
	index_endscan(scan);
}

/*
 * DsyncStoreKeyInFlight
 *		After a latest-state scan found no row for a key: the transaction
 *		inserting a row with that key right now, if another one is, else
 *		InvalidTransactionId; *exists is set if a row is there after all
 *		(committed since that scan, or our own).
 */
static TransactionId
DsyncStoreKeyInFlight(DsyncStore *store, text *name, Datum second, bool *exists)
{
	SnapshotData dirty;
	TupleTableSlot *slot;
	IndexScanDesc scan = StoreDirtyScanBegin(store, name, second, &dirty, &slot);
	TransactionId xid = InvalidTransactionId;

	*exists = false;
	while (index_getnext_slot(scan, ForwardScanDirection, slot))
	{
		if (TransactionIdIsValid(dirty.xmin))
			xid = dirty.xmin;	/* inserted by a transaction still running */
		else
			*exists = true;
		break;
	}
	StoreDirtyScanEnd(scan, slot);
	return xid;
}

/*
 * DsyncStoreKeyAny
 *		Whether a key has a row in the latest state, uncommitted changes
 *		included: committed, or being inserted or deleted right now.
 */
bool
DsyncStoreKeyAny(DsyncStore *store, text *name, Datum second)
{
	bool		exists;

	return TransactionIdIsValid(DsyncStoreKeyInFlight(store, name, second, &exists)) || exists;
}

/*
 * DsyncStoreKeyTaken
 *		Whether a key's row is held live, or being changed or locked by a
 *		transaction still running (whose outcome may make it held), as far
 *		as the latest state shows, uncommitted changes included.  For an
 *		ephemeral grant, which cannot wait for that outcome and must not
 *		overlap a durable holder.  *retry_at: a live holder's expiry.
 */
bool
DsyncStoreKeyTaken(DsyncStore *store, text *name, Datum second, TimestampTz now,
				   TimestampTz *retry_at)
{
	return DsyncStoreKeysTaken(store, name, second, false, now, retry_at);
}

/*
 * DsyncStoreKeysTaken
 *		DsyncStoreKeyTaken; from_second: whether any key of the name from
 *		second on is (the shared holders of a lease, from their first slot).
 */
bool
DsyncStoreKeysTaken(DsyncStore *store, text *name, Datum second, bool from_second,
					TimestampTz now, TimestampTz *retry_at)
{
	SnapshotData dirty;
	TupleTableSlot *slot;
	IndexScanDesc scan = StoreDirtyScanBeginRange(store, name, second, from_second,
												  &dirty, &slot);
	bool		taken = false;

	while (!taken && index_getnext_slot(scan, ForwardScanDirection, slot))
	{
		bool		should_free;
		HeapTuple	tuple;
		DsyncRow	row;

		if (TransactionIdIsValid(dirty.xmin) || TransactionIdIsValid(dirty.xmax))
		{
			taken = true;		/* inserted or changed by a running transaction */
			break;
		}
		tuple = ExecFetchSlotHeapTuple(slot, false, &should_free);
		DsyncStoreLoadRow(store, tuple, &row);
		if (should_free)
			heap_freetuple(tuple);
		if (DsyncRowIsLive(&row, now))
		{
			*retry_at = DsyncRowExpiry(&row);
			taken = true;
		}
		else if (TransactionIdIsCurrentTransactionId(row.xmin))
			taken = true;		/* our own change, which a rollback would undo */
		else
			taken = DsyncRowXmaxRunning(&row);	/* a guard keeps even an expired lease */
	}
	StoreDirtyScanEnd(scan, slot);
	return taken;
}

/*
 * DsyncStoreClaimKey
 *		Make sure this transaction alone may insert a row with a key that a
 *		latest-state scan has just found absent.
 *
 * Two transactions inserting one key would meet in the unique index,
 * where the second waits until the first commits: that would break
 * "wait = 0 never blocks".  So the key's insert lock is taken (waiting
 * only if wait), and a dirty-snapshot probe tells whether another
 * transaction has inserted the key and not yet committed: then the key is
 * BUSY (or, if wait, we wait for that transaction and look again).  The
 * reaper's short transactions are always waited for.  On DSYNC_CLAIM_OK
 * the caller inserts, then calls DsyncStoreUnclaimKey at once: the lock is
 * needed only for the probe and the insert, so a statement can insert any
 * number of keys without filling the lock table.  It shows in pg_locks as
 * an advisory lock with objsubid 25715 and up.
 */
DsyncClaim
DsyncStoreClaimKey(DsyncStore *store, text *name, Datum second, bool wait)
{
	return DsyncStoreClaimKeyMode(store, name, second, wait, ExclusiveLock);
}

/*
 * DsyncStoreClaimKeyMode
 *		DsyncStoreClaimKey with the insert lock in a given mode: a shared
 *		grant of a lease whose plain row is missing holds it in ShareLock
 *		while it writes its own row, so shared grants do not keep each
 *		other out but an insert of the plain row (ExclusiveLock) waits for
 *		none of them and sees their rows (shared.c).
 */
DsyncClaim
DsyncStoreClaimKeyMode(DsyncStore *store, text *name, Datum second, bool wait,
					   LOCKMODE mode)
{
	LOCKTAG		tag;

	DsyncStoreKeyTag(store, name, second, &tag);
	for (;;)
	{
		TransactionId xid;
		bool		exists;

		if (LockAcquire(&tag, mode, false, !wait) == LOCKACQUIRE_NOT_AVAIL)
			return DSYNC_CLAIM_BUSY;
		xid = DsyncStoreKeyInFlight(store, name, second, &exists);
		if (!TransactionIdIsValid(xid))
		{
			if (!exists)
				return DSYNC_CLAIM_OK;
			LockRelease(&tag, mode, false);
			return DSYNC_CLAIM_EXISTS;
		}
		LockRelease(&tag, mode, false);
		if (!wait && !DsyncStoreLockedByReaper(xid))
			return DSYNC_CLAIM_BUSY;
		XactLockTableWait(xid, NULL, NULL, XLTW_None);
	}
}

/*
 * DsyncStoreUnclaimKey
 *		Let go of a key's insert lock once the row is in.
 */
void
DsyncStoreUnclaimKey(DsyncStore *store, text *name, Datum second)
{
	DsyncStoreUnclaimKeyMode(store, name, second, ExclusiveLock);
}

/*
 * DsyncStoreUnclaimKeyMode
 *		DsyncStoreUnclaimKey for a claim made in a given mode.
 */
void
DsyncStoreUnclaimKeyMode(DsyncStore *store, text *name, Datum second, LOCKMODE mode)
{
	LOCKTAG		tag;

	DsyncStoreKeyTag(store, name, second, &tag);
	LockRelease(&tag, mode, false);
	if (store->table == DSYNC_TABLE_LEASE || store->table == DSYNC_TABLE_PERMIT)
		DsyncWakeAtEnd(DsyncWaitKey(name));
}
