/*-------------------------------------------------------------------------
 *
 * storekey.c
 *		Claiming a new key: the insert lock a first acquire of a name
 *		takes, so that two callers never both insert its row.
 *
 * A key that has no row yet cannot be row-locked, so a caller about to
 * insert one first takes a heavyweight lock on the key (an advisory-style
 * tag made from the table and the name, DsyncStoreKeyTag) and looks again
 * with a dirty snapshot, which sees rows being inserted by transactions in
 * progress.  Like a row lock, the insert lock is held until the transaction
 * (or the savepoint) ends and wakes the name's waiters then (wait.c).
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
#include "access/transam.h"
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
#include "store_int.h"

/*
 * Lock class for the per-key insert lock (the fourth field of an advisory
 * lock tag; PostgreSQL's own advisory locks use 1 and 2).
 */
#define DSYNC_INSERT_LOCK_CLASS 0x6473

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
 * DsyncStoreNoteFree
 *		The caller relies on row being free: if the transaction that made
 *		that version committed asynchronously (a release commits so,
 *		lazycommit.c), remember its commit's WAL position, so that the
 *		caller can make it durable before anyone relies on what it grants
 *		(DsyncLazyCommitCarry).  Only for stores that ask (note_commits):
 *		a durable grant's own commit flushes past it anyway.
 */
void
DsyncStoreNoteFree(DsyncStore *store, const DsyncRow *row)
{
	XLogRecPtr	lsn;

	/* A frozen xmin may be older than the commit log still kept. */
	if (!store->note_commits || !TransactionIdIsNormal(row->xmin) ||
		(row->infomask & HEAP_XMIN_FROZEN) == HEAP_XMIN_FROZEN)
		return;
	lsn = TransactionIdGetCommitLSN(row->xmin);
	if (lsn > store->free_commit_lsn)
		store->free_commit_lsn = lsn;
}

/*
 * DsyncStoreFreeInOrder
 *		Whether a version that holds nobody now (free, or expired) may be
 *		taken as free by a look made in event order (store->in_event_order:
 *		an ephemeral grant, which announces itself at once): only once
 *		what ended its last holder has been announced, or the grant's
 *		"acquired" would come before that holder's "expired" or
 *		"released".  So an expired holder keeps the key until it is
 *		cleared (by the worker, dsync_reap() or a durable grant, which
 *		announce the expiry and wake the name's waiters when they end),
 *		and a version written by a transaction that has committed but not
 *		yet queued its events (its commit callbacks run after the commit
 *		is visible, before its locks go) keeps it until then: its xid is
 *		left in store->writer_xid, to wait for without the caller's
 *		LWLock.  Such a writer still pins the name's bucket of the held
 *		map, so the lock table is asked only if the bucket is pinned.
 */
bool
DsyncStoreFreeInOrder(DsyncStore *store, const DsyncRow *row, text *name)
{
	LOCKTAG		tag;

	if (!store->in_event_order)
		return true;
	if (!row->nulls[Anum_lease_holder - 1])
		return false;			/* expired, not yet cleared */
	if (!TransactionIdIsNormal(row->xmin) ||
		(row->infomask & HEAP_XMIN_FROZEN) == HEAP_XMIN_FROZEN ||
		!DsyncHeldMapPinned(DsyncNameHash(name)))
		return true;
	SET_LOCKTAG_TRANSACTION(tag, row->xmin);
	if (LockAcquire(&tag, ShareLock, false, true) == LOCKACQUIRE_NOT_AVAIL)
	{
		store->writer_xid = row->xmin;
		return false;
	}
	LockRelease(&tag, ShareLock, false);
	return true;
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
		else if (DsyncRowXmaxRunning(&row))
			taken = true;		/* a guard keeps even an expired lease */
		else if (!DsyncStoreFreeInOrder(store, &row, name))
			taken = true;
		else
			DsyncStoreNoteFree(store, &row);
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
