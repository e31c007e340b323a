/*-------------------------------------------------------------------------
 *
 * store.h
 *		Direct access to the extension's tables: opening, scanning, locking
 *		and changing rows (store.c, scan.c, row.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef DSYNC_STORE_H
#define DSYNC_STORE_H

#include "postgres.h"
#include "access/tableam.h"
#include "access/xlogdefs.h"
#include "fmgr.h"
#include "nodes/lockoptions.h"
#include "storage/itemptr.h"
#include "storage/lockdefs.h"
#include "utils/relcache.h"
#include "utils/timestamp.h"
#include "catalog.h"

typedef struct DsyncRow
{
	ItemPointerData tid;		/* the row version this was read from */
	TransactionId xmin;			/* the transaction that wrote it */
	bool		unlocked;		/* that version had no xmax when read */
	TransactionId xmax;			/* its raw xmax when read, unless unlocked */
	uint16		infomask;		/* and its infomask */
	Datum		values[DSYNC_MAX_ATTS];
	bool		nulls[DSYNC_MAX_ATTS];
} DsyncRow;

typedef struct DsyncStore
{
	const DsyncCatalog *catalog;
	DsyncTable	table;
	Relation	rel;
	Relation	index;			/* the primary key, once opened */
	Relation	second_index;	/* dsync_permit's (name, holder, slot) or
								 * dsync_fence's (lease), once opened */
	Oid			second_oid;		/* its OID, once the indexes are known */
	bool		indexes_open;	/* see DsyncStoreIndex */
	LOCKMODE	lockmode;
	bool		tolerant;		/* skip damaged rows with a warning */
	bool		note_commits;	/* keep free_commit_lsn (DsyncStoreNoteFree) */
	XLogRecPtr	free_commit_lsn;	/* latest asynchronous commit of a free
									 * version relied on */
	bool		in_event_order;	/* free only once its end is announced
								 * (DsyncStoreFreeInOrder) */
	TransactionId writer_xid;	/* a writer whose events are on their way */
} DsyncStore;

typedef struct DsyncScan DsyncScan;

extern void DsyncStoreOpen(DsyncStore *store, FunctionCallInfo fcinfo, DsyncTable table,
						   bool for_write);
extern void DsyncStoreOpenCatalog(DsyncStore *store, const DsyncCatalog *catalog,
								  DsyncTable table, bool for_write);
extern BlockNumber DsyncStoreBlockCount(Relation rel);
extern void DsyncStoreClose(DsyncStore *store);
extern Relation DsyncStoreIndex(DsyncStore *store);
extern Relation DsyncStoreSecondIndex(DsyncStore *store);
extern void DsyncStoreCloseUnlock(DsyncStore *store);
extern DsyncRow *DsyncStoreNewRow(void);

/* Set a column (attnum counts from 1, as the Anum_ constants do). */
static inline void
DsyncRowSet(DsyncRow *row, int attnum, Datum value)
{
	Assert(attnum >= 1 && attnum <= DSYNC_MAX_ATTS);
	row->values[attnum - 1] = value;
	row->nulls[attnum - 1] = false;
}

extern DsyncScan *DsyncScanName(DsyncStore *store, text *name);
extern DsyncScan *DsyncScanNameUncommitted(DsyncStore *store, text *name);
extern DsyncScan *DsyncScanSecond(DsyncStore *store, text *key, bool uncommitted);
extern DsyncScan *DsyncScanKey(DsyncStore *store, text *name, Datum second);
extern DsyncRow *DsyncScanKeyLatest(DsyncStore *store, text *name, int32 slot);
extern DsyncRow *DsyncScanKeyCached(DsyncStore *store, text *name, int32 slot);
extern DsyncScan *DsyncScanFrom(DsyncStore *store, text *name, int32 slot);
extern DsyncScan *DsyncScanLast(DsyncStore *store, text *name);
extern DsyncScan *DsyncScanHolder(DsyncStore *store, text *name, text *holder);
extern DsyncScan *DsyncScanFree(DsyncStore *store, text *name, int32 from_slot);
extern DsyncScan *DsyncScanAll(DsyncStore *store);
extern DsyncRow *DsyncScanNext(DsyncScan *scan);
extern void DsyncScanEnd(DsyncScan *scan);
extern List *DsyncScanList(DsyncScan *scan);
extern void DsyncRowFree(DsyncStore *store, DsyncRow *row);

extern TM_Result DsyncStoreLock(DsyncStore *store, DsyncRow *row,
								LockTupleMode mode, LockWaitPolicy policy);
extern void DsyncStoreUpdate(DsyncStore *store, DsyncRow *row);
extern TM_Result DsyncStoreTryUpdate(DsyncStore *store, DsyncRow *row);
extern void DsyncStoreInsert(DsyncStore *store, DsyncRow *row);
extern void DsyncStoreDelete(DsyncStore *store, DsyncRow *row);

/* Inserting a new key: see DsyncStoreClaimKey. */
typedef enum DsyncClaim
{
	DSYNC_CLAIM_OK,				/* nobody has the key: insert it, then unlock */
	DSYNC_CLAIM_EXISTS,			/* a committed row has it now: look again */
	DSYNC_CLAIM_BUSY			/* another transaction is inserting or deleting it */
} DsyncClaim;

extern bool DsyncRowXmaxRunning(const DsyncRow *row);
extern bool DsyncStoreKeyAny(DsyncStore *store, text *name, Datum second);
extern void DsyncStoreNoteFree(DsyncStore *store, const DsyncRow *row);
extern bool DsyncStoreFreeInOrder(DsyncStore *store, const DsyncRow *row, text *name);
extern bool DsyncStoreKeyTaken(DsyncStore *store, text *name, Datum second,
							   TimestampTz now, TimestampTz *retry_at);
extern bool DsyncStoreKeysTaken(DsyncStore *store, text *name, Datum second,
								bool from_second, TimestampTz now, TimestampTz *retry_at);
extern DsyncClaim DsyncStoreClaimKey(DsyncStore *store, text *name, Datum second,
									 bool wait);
extern void DsyncStoreUnclaimKey(DsyncStore *store, text *name, Datum second);
extern DsyncClaim DsyncStoreClaimKeyMode(DsyncStore *store, text *name, Datum second,
										 bool wait, LOCKMODE mode);
extern void DsyncStoreUnclaimKeyMode(DsyncStore *store, text *name, Datum second,
									 LOCKMODE mode);

/* Used by scan.c: a row read from a tuple, and checked (row.c). */
extern void DsyncStoreLoadRow(DsyncStore *store, HeapTuple tuple, DsyncRow *row);
extern bool DsyncStoreCheckRow(DsyncStore *store, DsyncRow *row);
extern const char *DsyncRowDamage(DsyncTable table, const DsyncRow *row);

/* Row helpers. */
extern bool DsyncRowIsLive(const DsyncRow *row, TimestampTz now);
extern bool DsyncRowHolderIs(const DsyncRow *row, text *holder);
extern bool DsyncTextEquals(text *a, text *b);
extern bool DsyncRowOwnerIsCaller(const DsyncRow *row, int owner_attnum);
extern int32 DsyncRowSlot(const DsyncRow *row);
extern TimestampTz DsyncRowExpiry(const DsyncRow *row);

#endif							/* DSYNC_STORE_H */
