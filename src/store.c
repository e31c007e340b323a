/*-------------------------------------------------------------------------
 *
 * store.c
 *		Direct access to the dsync_lease table.
 *
 * The lease functions read and write their table below the executor, for
 * three reasons:
 *
 *	- Latest committed state at every isolation level.  Rows are found with
 *	  an index scan under SnapshotAny and filtered with a fresh snapshot
 *	  (GetLatestSnapshot), so a REPEATABLE READ or SERIALIZABLE caller acts
 *	  on what has been committed now, not on its old snapshot.  Checking
 *	  visibility ourselves also keeps SSI out of it: no SIREAD locks are
 *	  taken and no serialization failure can come from dsync's own reads.
 *
 *	- Control over waiting.  A row is locked with heap_lock_tuple and an
 *	  explicit wait policy before it is changed: acquire uses
 *	  LockWaitSkip, so it never blocks on another transaction's uncommitted
 *	  grant or guard, while release and renew of one's own lease wait.
 *
 *	- Speed.  No parsing, planning or executor start-up on the hot path.
 *
 * Every change is followed by CommandCounterIncrement so that a later call
 * in the same statement sees it.  Every lock taken here is held until the
 * transaction (or the savepoint) ends, so each one also schedules a wake-up
 * of the lease's waiters for that moment (wait.c).
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
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/fmgroids.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "dsync.h"

/*
 * Lock class for the per-name insert lock (the fourth field of an advisory
 * lock tag; PostgreSQL's own advisory locks use 1 and 2).
 */
#define DSYNC_INSERT_LOCK_CLASS 0x6473

/*
 * DsyncStoreOpen
 *		Open the lease table and its primary key.
 */
void
DsyncStoreOpen(DsyncStore *store, FunctionCallInfo fcinfo, bool for_write)
{
	DsyncStoreOpenCatalog(store, DsyncCatalogGet(fcinfo), DSYNC_TABLE_LEASE, for_write);
}

/*
 * DsyncStoreOpenCatalog
 *		Open the lease table and its primary key, given where they are.
 */
void
DsyncStoreOpenCatalog(DsyncStore *store, const DsyncCatalog *catalog,
					  DsyncTable table, bool for_write)
{
	if (!OidIsValid(catalog->rels[table]))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the installed version of extension \"dsync\" lacks this function's table"),
				 errhint("Run ALTER EXTENSION dsync UPDATE.")));
	store->catalog = catalog;
	store->table = table;
	store->lockmode = for_write ? RowExclusiveLock : AccessShareLock;
	store->rel = table_open(catalog->rels[table], store->lockmode);
	store->index = index_open(catalog->pkeys[table], store->lockmode);
}

/*
 * DsyncStoreOpenTable
 *		Open one of the extension's tables and its primary key.
 */
void
DsyncStoreOpenTable(DsyncStore *store, FunctionCallInfo fcinfo, DsyncTable table,
					bool for_write)
{
	DsyncStoreOpenCatalog(store, DsyncCatalogGet(fcinfo), table, for_write);
}

/*
 * DsyncStoreNewRow
 *		A row with every column NULL, to fill in and insert.
 */
DsyncLeaseRow *
DsyncStoreNewRow(void)
{
	DsyncLeaseRow *row = palloc0(sizeof(DsyncLeaseRow));

	for (int i = 0; i < DSYNC_MAX_ATTS; i++)
		row->nulls[i] = true;
	return row;
}

/*
 * DsyncStoreClose
 *		Close what DsyncStoreOpen opened; locks stay until transaction end.
 */
void
DsyncStoreClose(DsyncStore *store)
{
	index_close(store->index, NoLock);
	table_close(store->rel, NoLock);
}

/*
 * DsyncStoreLoadRow
 *		Copy a heap tuple's columns into a row, so it outlives the buffer.
 */
static void
DsyncStoreLoadRow(DsyncStore *store, HeapTuple tuple, DsyncLeaseRow *row)
{
	TupleDesc	desc = RelationGetDescr(store->rel);

	heap_deform_tuple(tuple, desc, row->values, row->nulls);
	for (int i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);

		if (!row->nulls[i] && !att->attbyval)
			row->values[i] = datumCopy(row->values[i], att->attbyval, att->attlen);
	}
	row->tid = tuple->t_self;
}

/*
 * DsyncStoreVisibleRow
 *		A copy of the tuple if it is visible to snapshot, else NULL.  The
 *		buffer must be pinned; it is share-locked here for the check, which
 *		may set hint bits.
 */
static DsyncLeaseRow *
DsyncStoreVisibleRow(DsyncStore *store, HeapTuple tuple, Buffer buffer,
					 Snapshot snapshot)
{
	bool		visible;
	DsyncLeaseRow *row;

	LockBuffer(buffer, BUFFER_LOCK_SHARE);
	visible = HeapTupleSatisfiesVisibility(tuple, snapshot, buffer);
	LockBuffer(buffer, BUFFER_LOCK_UNLOCK);
	if (!visible)
		return NULL;

	row = palloc(sizeof(DsyncLeaseRow));
	DsyncStoreLoadRow(store, tuple, row);
	return row;
}

/*
 * DsyncStoreScan
 *		All rows of one lease name as of the latest committed state (plus
 *		this transaction's own changes), as a List of DsyncLeaseRow.
 */
List *
DsyncStoreScan(DsyncStore *store, text *name)
{
	Snapshot	snapshot = RegisterSnapshot(GetLatestSnapshot());
	ScanKeyData key;
	IndexScanDesc scan;
	TupleTableSlot *slot;
	List	   *rows = NIL;

	ScanKeyInit(&key, 1, BTEqualStrategyNumber, F_TEXTEQ, PointerGetDatum(name));
	scan = index_beginscan(store->rel, store->index, SnapshotAny, 1, 0);
	index_rescan(scan, &key, 1, NULL, 0);
	slot = table_slot_create(store->rel, NULL);

	while (index_getnext_slot(scan, ForwardScanDirection, slot))
	{
		BufferHeapTupleTableSlot *bslot = (BufferHeapTupleTableSlot *) slot;
		DsyncLeaseRow *row;

		CHECK_FOR_INTERRUPTS();
		row = DsyncStoreVisibleRow(store, bslot->base.tuple, bslot->buffer, snapshot);
		if (row)
			rows = lappend(rows, row);
	}

	ExecDropSingleTupleTableSlot(slot);
	index_endscan(scan);
	UnregisterSnapshot(snapshot);
	return rows;
}

/*
 * DsyncStoreScanAll
 *		Every row of the table as of the latest committed state, for the
 *		views.  Like DsyncStoreScan it takes no SIREAD locks, so reading
 *		the views in a SERIALIZABLE transaction cannot make a concurrent
 *		dsync call fail serialization.
 */
List *
DsyncStoreScanAll(DsyncStore *store)
{
	Snapshot	snapshot = RegisterSnapshot(GetLatestSnapshot());
	TableScanDesc scan = table_beginscan(store->rel, SnapshotAny, 0, NULL);
	HeapTuple	tuple;
	List	   *rows = NIL;

	while ((tuple = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		DsyncLeaseRow *row;

		CHECK_FOR_INTERRUPTS();
		row = DsyncStoreVisibleRow(store, tuple, ((HeapScanDesc) scan)->rs_cbuf, snapshot);
		if (row)
			rows = lappend(rows, row);
	}

	table_endscan(scan);
	UnregisterSnapshot(snapshot);
	return rows;
}

/*
 * DsyncStoreWakeAtEnd
 *		Wake the waiters of a name when this transaction ends: lease and
 *		semaphore waiters for lease rows, event waiters for signals.
 */
static void
DsyncStoreWakeAtEnd(DsyncStore *store, text *name)
{
	if (store->table == DSYNC_TABLE_LEASE)
		DsyncWakeAtEnd(DsyncWaitKey(name));
	else if (store->table == DSYNC_TABLE_SIGNAL)
		DsyncWakeAtEnd(DsyncWaitKeyEvent(name));
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
DsyncStoreLock(DsyncStore *store, DsyncLeaseRow *row, LockTupleMode mode,
			   LockWaitPolicy policy)
{
	HeapTupleData tuple;
	Buffer		buffer;
	TM_FailureData tmfd;
	TM_Result	result;

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
	}
	ReleaseBuffer(buffer);

	if (result == TM_Invisible || result == TM_SelfModified)
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg_internal("dsync lease row (%u,%u) changed unexpectedly within this transaction",
								 ItemPointerGetBlockNumber(&row->tid),
								 ItemPointerGetOffsetNumber(&row->tid))));
	return result;
}

/*
 * DsyncStoreIndexInsert
 *		Add a primary key entry for a new (or non-HOT) row version.
 */
static void
DsyncStoreIndexInsert(DsyncStore *store, HeapTuple tuple, DsyncLeaseRow *row,
					  bool unchanged)
{
	Datum		values[INDEX_MAX_KEYS];
	bool		nulls[INDEX_MAX_KEYS];
	IndexInfo  *info = BuildIndexInfo(store->index);

	for (int i = 0; i < info->ii_NumIndexKeyAttrs; i++)
	{
		AttrNumber	attnum = info->ii_IndexAttrNumbers[i];

		values[i] = row->values[attnum - 1];
		nulls[i] = row->nulls[attnum - 1];
	}
	index_insert(store->index, values, nulls, &tuple->t_self, store->rel,
				 UNIQUE_CHECK_YES, unchanged, info);
}

/*
 * DsyncStoreUpdate
 *		Write a locked row back with its new values.
 *
 * Only the primary key is indexed and its columns never change, so this
 * is a HOT update whenever the page has room, which the table's fillfactor
 * sees to; otherwise the index gets the new version too.
 */
void
DsyncStoreUpdate(DsyncStore *store, DsyncLeaseRow *row)
{
	HeapTuple	tuple;

	tuple = heap_form_tuple(RelationGetDescr(store->rel), row->values, row->nulls);
	simple_heap_update(store->rel, &row->tid, tuple);
	if (!HeapTupleIsHeapOnly(tuple))
		DsyncStoreIndexInsert(store, tuple, row, true);
	row->tid = tuple->t_self;
	heap_freetuple(tuple);
	CommandCounterIncrement();
}

/*
 * DsyncStoreInsert
 *		Add a row for a (name, slot) that has none.  The caller holds the
 *		name's insert lock, so no other transaction can be inserting the
 *		same key and the unique check never has to wait.
 */
void
DsyncStoreInsert(DsyncStore *store, DsyncLeaseRow *row)
{
	HeapTuple	tuple;

	tuple = heap_form_tuple(RelationGetDescr(store->rel), row->values, row->nulls);
	simple_heap_insert(store->rel, tuple);
	DsyncStoreIndexInsert(store, tuple, row, false);
	row->tid = tuple->t_self;
	heap_freetuple(tuple);
	CommandCounterIncrement();
}

/*
 * DsyncStoreDelete
 *		Delete a row this transaction has locked (an expired lease).  The
 *		next acquirer of the name inserts a fresh row under the insert lock.
 */
void
DsyncStoreDelete(DsyncStore *store, DsyncLeaseRow *row)
{
	simple_heap_delete(store->rel, &row->tid);
	CommandCounterIncrement();
}

/*
 * DsyncStoreInsertLock
 *		Take the transaction-long lock that guards inserting the row of a
 *		name (and permit slot) in a table; without waiting unless wait, then
 *		false if another transaction has it.
 *
 * Two first-time acquirers of one name would otherwise meet in the
 * primary key's unique check, where the second waits for the first to
 * commit; that would break "wait = 0 never blocks".  The lock shows in
 * pg_locks as an advisory lock with objsubid 25715 (leases) or 25716 and
 * up (the other tables).
 */
bool
DsyncStoreInsertLock(DsyncTable table, text *name, int32 slot, bool wait)
{
	LOCKTAG		tag;
	uint64		hash;

	hash = hash_bytes_extended((const unsigned char *) VARDATA_ANY(name),
							   VARSIZE_ANY_EXHDR(name), (uint64) slot);
	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, (uint32) (hash >> 32), (uint32) hash,
						 DSYNC_INSERT_LOCK_CLASS + table);
	if (LockAcquire(&tag, ExclusiveLock, false, !wait) == LOCKACQUIRE_NOT_AVAIL)
		return false;
	if (table == DSYNC_TABLE_LEASE)
		DsyncWakeAtEnd(DsyncWaitKey(name));
	return true;
}

/*
 * DsyncRowIsLive
 *		Whether a row holds a lease that has not expired at now.
 */
bool
DsyncRowIsLive(const DsyncLeaseRow *row, TimestampTz now)
{
	if (row->nulls[Anum_lease_holder - 1] || row->nulls[Anum_lease_expires_at - 1])
		return false;
	return DatumGetTimestampTz(row->values[Anum_lease_expires_at - 1]) > now;
}

/*
 * DsyncRowHolderIs
 *		Whether a row's holder is exactly the given one (byte for byte).
 */
bool
DsyncRowHolderIs(const DsyncLeaseRow *row, text *holder)
{
	text	   *current;

	if (row->nulls[Anum_lease_holder - 1])
		return false;
	current = DatumGetTextPP(row->values[Anum_lease_holder - 1]);
	return DsyncTextEquals(current, holder);
}

/*
 * DsyncTextEquals
 *		Whether two names are the same, byte for byte (names are compared
 *		as in the "C" collation of the tables' keys).
 */
bool
DsyncTextEquals(text *a, text *b)
{
	return VARSIZE_ANY_EXHDR(a) == VARSIZE_ANY_EXHDR(b) &&
		memcmp(VARDATA_ANY(a), VARDATA_ANY(b), VARSIZE_ANY_EXHDR(a)) == 0;
}

/*
 * DsyncRowOwnerIsCaller
 *		Whether the current role may act on a lease acquired by the row's
 *		owner: it must have the owner's privileges.
 */
bool
DsyncRowOwnerIsCaller(const DsyncLeaseRow *row)
{
	if (row->nulls[Anum_lease_owner - 1])
		return false;
	return has_privs_of_role(GetUserId(), DatumGetObjectId(row->values[Anum_lease_owner - 1]));
}
