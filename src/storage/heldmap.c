/*-------------------------------------------------------------------------
 *
 * heldmap.c
 *		Which names may have a durable holder: a summary in shared memory
 *		that lets an ephemeral grant skip its look at dsync_lease.
 *
 * An ephemeral grant must not overlap a durable lease of the same name, so
 * it used to look the name up in dsync_lease every time: a buffer pin and
 * a visibility check on a row it almost never finds held, about a fifth of
 * an ephemeral acquire+release on a table of 100,000 names.  This map
 * answers "certainly free" without the table for most names.
 *
 * The names are hashed (with their database) into HELDMAP_BUCKETS buckets.
 * Each bucket has:
 *	- until: no durable holder of a name in the bucket lives past this
 *	  time, as far as dsync has written.  Every write of a version with a
 *	  holder raises it to that version's expiry first (store.c).
 *	- pins: transactions that have locked or written a version of a name
 *	  in the bucket, until they end (store.c pins before it locks or
 *	  writes).  A dirty-snapshot look at the table would see them as a
 *	  running xmin or xmax; the pin stands for that, so that an
 *	  uncommitted grant, or a guard (which keeps a lease even once it has
 *	  expired), is not skipped over.
 * A name is certainly free of durable holders at time now when its
 * database's map is ready, its bucket has no pins and until <= now.  A
 * grant takes its name's partition lock in share mode from its look at
 * the ephemeral table until its version is written (ephemeral.c), and the
 * ephemeral grant looks at the map under that lock in exclusive mode:
 * whichever comes second sees the first, as with the table.
 *
 * A database's map is ready once its worker has read dsync_lease after
 * this shared memory was set up (DsyncHeldMapFill): rows from before a
 * restart were never counted here.  The worker reads every row version
 * (SnapshotAny), committed or not: whatever is in flight then was written
 * after the start, by a transaction that pins its buckets itself (no
 * transaction with dsync changes can be prepared, so none survives a
 * restart).  Writes to dsync_lease by other means than dsync's functions
 * (which only a superuser may make) are not seen until the database's
 * map is filled again, after a restart; an upgrade script that ever
 * writes lease rows with holders must therefore be followed by a fill.
 *
 * Buckets are shared by all databases; collisions only send more grants
 * to the table, never fewer.  until never goes down: a name held durably
 * keeps its bucket closed until its last expiry, released or not, so a
 * server with more durable names in use than buckets gains little.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "miscadmin.h"
#include "port/pg_bitutils.h"
#include "storage/shmem.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/snapmgr.h"

#include "catalog.h"
#include "dbslot.h"
#include "store.h"
#include "heldmap.h"

#define HELDMAP_BUCKETS		16384	/* a power of two */

typedef struct HeldMapShared
{
	pg_atomic_uint32 pins[HELDMAP_BUCKETS];
	pg_atomic_uint64 until[HELDMAP_BUCKETS];
} HeldMapShared;

static HeldMapShared *heldmap = NULL;
static uint64 *my_pins = NULL;	/* bitmap of the buckets this transaction pins */
static int	my_npins = 0;
static bool pin_callback_registered = false;

/*
 * DsyncHeldMapShmemSize
 *		Bytes for the map.
 */
Size
DsyncHeldMapShmemSize(void)
{
	return MAXALIGN(sizeof(HeldMapShared));
}

/*
 * DsyncHeldMapShmemInit
 *		Create or attach to the map (from the shmem startup hook, with
 *		AddinShmemInitLock held).
 */
void
DsyncHeldMapShmemInit(void)
{
	bool		found;

	heldmap = ShmemInitStruct("dsync held map", sizeof(HeldMapShared), &found);
	if (!found)
	{
		for (int i = 0; i < HELDMAP_BUCKETS; i++)
		{
			pg_atomic_init_u32(&heldmap->pins[i], 0);
			pg_atomic_init_u64(&heldmap->until[i], 0);
		}
	}
}

/*
 * HeldMapBucket
 *		The bucket of a name's hash (DsyncNameHash).
 */
static inline uint32
HeldMapBucket(uint32 hash)
{
	return hash & (HELDMAP_BUCKETS - 1);
}

/*
 * HeldMapRaise
 *		Raise a bucket's until to t if that is later, atomically.
 */
static void
HeldMapRaise(uint32 bucket, TimestampTz t)
{
	uint64		current = pg_atomic_read_u64(&heldmap->until[bucket]);

	while ((TimestampTz) current < t)
	{
		if (pg_atomic_compare_exchange_u64(&heldmap->until[bucket], &current, (uint64) t))
			break;
	}
}

/*
 * HeldMapXactEnd
 *		Drop this transaction's pins once it has ended, its changes now
 *		committed or gone.  A transaction that was prepared changed nothing
 *		of dsync's (wait.c refuses to prepare one that did: a lock taken or
 *		a version written), so its pins are those of tries that failed.
 */
static void
HeldMapXactEnd(XactEvent event, void *arg)
{
	if (my_npins == 0)
		return;
	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PREPARE:
			break;
		default:
			return;
	}
	for (int w = 0; w < HELDMAP_BUCKETS / 64; w++)
	{
		while (my_pins[w] != 0)
		{
			int			bit = pg_rightmost_one_pos64(my_pins[w]);

			/* A full barrier: whoever sees the pin gone sees the raise too. */
			(void) pg_atomic_fetch_sub_u32(&heldmap->pins[w * 64 + bit], 1);
			my_pins[w] &= ~(UINT64CONST(1) << bit);
		}
	}
	my_npins = 0;
}

/*
 * DsyncHeldMapNote
 *		This transaction is about to lock or write a version of dsync_lease
 *		for name (slot 0): pin its bucket until the transaction ends and,
 *		for a version with a holder until expiry (0: none), raise the
 *		bucket's until to it.
 */
void
DsyncHeldMapNote(text *name, TimestampTz expiry)
{
	uint32		bucket;

	if (heldmap == NULL)
		return;
	bucket = HeldMapBucket(DsyncNameHash(name));
	if (expiry != 0)
		HeldMapRaise(bucket, expiry);
	if (!pin_callback_registered)
	{
		my_pins = MemoryContextAllocZero(TopMemoryContext, HELDMAP_BUCKETS / 8);
		RegisterXactCallback(HeldMapXactEnd, NULL);
		pin_callback_registered = true;
	}
	/* One pin per bucket and transaction. */
	if (my_pins[bucket / 64] & (UINT64CONST(1) << (bucket % 64)))
		return;
	my_pins[bucket / 64] |= UINT64CONST(1) << (bucket % 64);
	my_npins++;
	(void) pg_atomic_fetch_add_u32(&heldmap->pins[bucket], 1);
}

/*
 * DsyncHeldMapClear
 *		Whether no durable lease can hold a name of this hash at now, nor
 *		be on its way to: then an ephemeral grant need not look at
 *		dsync_lease.  The caller holds the name's partition lock
 *		exclusively.
 */
bool
DsyncHeldMapClear(DsyncDbSlot *slot, uint32 hash, TimestampTz now)
{
	uint32		bucket = HeldMapBucket(hash);

	if (heldmap == NULL || slot == NULL || pg_atomic_read_u32(&slot->held_map_ready) == 0)
		return false;
	pg_read_barrier();
	/* Read once ready is: a slot handed to another database is reset first. */
	if (slot->dbid != MyDatabaseId)
		return false;
	if (pg_atomic_read_u32(&heldmap->pins[bucket]) != 0)
		return false;
	/* A pin dropped is a raise made (HeldMapXactEnd). */
	pg_read_barrier();
	return (TimestampTz) pg_atomic_read_u64(&heldmap->until[bucket]) <= now;
}

/*
 * HeldMapFillTable
 *		Raise the bucket of every version with a live holder, committed or
 *		not, of one table: the plain rows of dsync_lease, or any row of
 *		dsync_permit (a shared holder, or a permit, which keeps ephemeral
 *		grants out once its semaphore is dropped).
 */
static void
HeldMapFillTable(const DsyncCatalog *catalog, DsyncTable table, TimestampTz now)
{
	DsyncStore	store;
	TupleDesc	desc;
	TableScanDesc scan;
	HeapTuple	tuple;

	DsyncStoreOpenCatalog(&store, catalog, table, false);
	desc = RelationGetDescr(store.rel);
	scan = table_beginscan(store.rel, SnapshotAny, 0, NULL);
	while ((tuple = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		bool		isnull;
		Datum		value;
		text	   *name;

		CHECK_FOR_INTERRUPTS();
		/* Only what decides, and the name last: most versions are free or dead. */
		value = heap_getattr(tuple, Anum_lease_slot, desc, &isnull);
		if (isnull || (table == DSYNC_TABLE_LEASE && DatumGetInt32(value) != 0))
			continue;
		(void) heap_getattr(tuple, Anum_lease_holder, desc, &isnull);
		if (isnull)
			continue;
		value = heap_getattr(tuple, Anum_lease_expires_at, desc, &isnull);
		if (isnull || DatumGetTimestampTz(value) <= now)
			continue;
		name = (text *) DatumGetPointer(heap_getattr(tuple, Anum_lease_name, desc, &isnull));
		if (isnull || VARATT_IS_EXTERNAL(name) || VARATT_IS_COMPRESSED(name))
		{
			/* Never written by dsync (its names are short): close the lot. */
			for (int i = 0; i < HELDMAP_BUCKETS; i++)
				HeldMapRaise(i, DatumGetTimestampTz(value));
			continue;
		}
		HeldMapRaise(HeldMapBucket(DsyncNameHash(name)), DatumGetTimestampTz(value));
	}
	table_endscan(scan);
	DsyncStoreClose(&store);
}

/*
 * DsyncHeldMapFill
 *		Make the database's map ready: raise the bucket of every version
 *		of a plain lease or of dsync_permit with a live holder, committed
 *		or not.  For the worker, in a transaction, once after this shared
 *		memory was set up; grants made meanwhile raise their buckets
 *		themselves.
 */
void
DsyncHeldMapFill(DsyncDbSlot *slot)
{
	const DsyncCatalog *catalog;
	TimestampTz now = GetCurrentTimestamp();

	if (heldmap == NULL || pg_atomic_read_u32(&slot->held_map_ready) != 0)
		return;
	catalog = DsyncCatalogFromExtension();
	HeldMapFillTable(catalog, DSYNC_TABLE_LEASE, now);
	if (OidIsValid(catalog->rels[DSYNC_TABLE_PERMIT]))
		HeldMapFillTable(catalog, DSYNC_TABLE_PERMIT, now);
	/* The raises before the flag (a full barrier). */
	pg_memory_barrier();
	pg_atomic_write_u32(&slot->held_map_ready, 1);
}
