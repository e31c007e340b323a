/*-------------------------------------------------------------------------
 *
 * boundmap.c
 *		Which names may guard a fence: a summary in shared memory that lets
 *		a grant of a lease no fence is bound to skip the look at
 *		dsync_fence.
 *
 * A grant raises the marks of the resources bound to its lease
 * (leases/fencebind.c): those whose mark row names the lease, and the one
 * named like the lease itself.  Asking dsync_fence on every grant would
 * cost two index probes per acquire of every lease; almost no lease has a
 * fence.  So every name a mark row carries (its resource, and the lease
 * it is bound to) sets a bit here, hashed with its database, before the
 * row is written; a grant whose lease's bit is clear needs no look.
 *
 * Bits are only ever set, never cleared: an unbound or removed mark keeps
 * its bit until a restart, which costs its lease's grants a look that
 * finds nothing, never a missed raise.  Collisions do the same.
 *
 * Shared memory starts empty at every start, while the tables keep their
 * rows: a database's map is ready once its worker has read every row
 * version of dsync_fence (SnapshotAny, committed or not) after this shared
 * memory was set up (DsyncBoundMapFill).  Until then every grant looks.
 * A row written meanwhile sets its bits itself before it is written.
 * Rows that only a restore writes (pg_restore's COPY into dsync_fence)
 * set their bits in the table's trigger (dsync_fence_restored).
 *
 * Why a look never misses a binding in flight: a binder sets the bits and
 * then writes its row; a grant writes its own row and then reads the bit.
 * If the grant read the bit before it was set, its row was written before
 * the binder looks at the lease (after setting the bit), and the binder
 * raises the mark to the grant's token itself; otherwise the grant sees
 * the bit, and its look, which sees changes in flight, finds the binding.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/tableam.h"
#include "miscadmin.h"
#include "storage/shmem.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "catalog.h"
#include "dbslot.h"
#include "heldmap.h"
#include "store.h"
#include "boundmap.h"

/* 2^20 bits, 128 kB: a bit each for a million names before most collide. */
#define BOUNDMAP_WORDS		16384

typedef struct BoundMapShared
{
	pg_atomic_uint64 words[BOUNDMAP_WORDS];
} BoundMapShared;

static BoundMapShared *boundmap = NULL;

/*
 * DsyncBoundMapShmemSize
 *		Bytes for the map.
 */
Size
DsyncBoundMapShmemSize(void)
{
	return MAXALIGN(sizeof(BoundMapShared));
}

/*
 * DsyncBoundMapShmemInit
 *		Create or attach to the map (from the shmem startup hook, with
 *		AddinShmemInitLock held).
 */
void
DsyncBoundMapShmemInit(void)
{
	bool		found;

	boundmap = ShmemInitStruct("dsync bound map", sizeof(BoundMapShared), &found);
	if (!found)
		for (int i = 0; i < BOUNDMAP_WORDS; i++)
			pg_atomic_init_u64(&boundmap->words[i], 0);
}

/*
 * BoundMapBit
 *		The word and bit of a name's hash (DsyncNameHashOf).
 */
static inline pg_atomic_uint64 *
BoundMapBit(uint32 hash, uint64 *bit)
{
	*bit = UINT64CONST(1) << (hash % 64);
	return &boundmap->words[(hash / 64) % BOUNDMAP_WORDS];
}

/*
 * BoundMapSetHash
 *		Set the bit of a name's hash, unless it is set already.
 */
static void
BoundMapSetHash(uint32 hash)
{
	uint64		bit;
	pg_atomic_uint64 *word = BoundMapBit(hash, &bit);

	if ((pg_atomic_read_u64(word) & bit) == 0)
		(void) pg_atomic_fetch_or_u64(word, bit);
}

/*
 * DsyncBoundMapSet
 *		Note that a mark row of this database carries name (as its resource
 *		or as its lease), before the row is written.  Ends with a full
 *		barrier: what the caller looks at next is read after the bit is
 *		visible.
 */
void
DsyncBoundMapSet(text *name)
{
	if (boundmap != NULL)
		BoundMapSetHash(DsyncNameHash(name));
	pg_memory_barrier();
}

/*
 * DsyncBoundMapMaybe
 *		Whether a fence may be bound to the lease whose DsyncNameHash this
 *		is, in this database: false only when its database's map is ready
 *		and the lease's bit is clear.  After a grant, the caller has
 *		written it; a full barrier orders that write before the bit is
 *		read.
 */
bool
DsyncBoundMapMaybe(uint32 hash)
{
	DsyncDbSlot *slot;
	uint64		bit;
	pg_atomic_uint64 *word;

	if (boundmap == NULL)
		return true;
	slot = DsyncDbSlotFind(MyDatabaseId);
	if (slot == NULL || pg_atomic_read_u32(&slot->bound_map_ready) == 0)
		return true;
	pg_read_barrier();
	/* Read once ready is: a slot handed to another database is reset first. */
	if (slot->dbid != MyDatabaseId)
		return true;
	pg_memory_barrier();
	word = BoundMapBit(hash, &bit);
	return (pg_atomic_read_u64(word) & bit) != 0;
}

/*
 * BoundMapSetDatum
 *		Set the bit of a name read from a mark row; one stored out of line
 *		or compressed (never by dsync: its names are short; a superuser's
 *		doing) sets every bit rather than be read.
 */
static void
BoundMapSetDatum(text *name)
{
	if (VARATT_IS_EXTERNAL(name) || VARATT_IS_COMPRESSED(name))
	{
		for (int i = 0; i < BOUNDMAP_WORDS; i++)
			pg_atomic_write_u64(&boundmap->words[i], ~UINT64CONST(0));
		return;
	}
	BoundMapSetHash(DsyncNameHash(name));
}

/*
 * DsyncBoundMapFill
 *		Make the database's map ready: set the bits of the resource and
 *		the lease of every version of dsync_fence, committed or not.  For
 *		the worker, in a transaction, once after this shared memory was set
 *		up; marks written meanwhile set their bits themselves.
 */
void
DsyncBoundMapFill(DsyncDbSlot *slot)
{
	const DsyncCatalog *catalog;
	DsyncStore	store;
	TupleDesc	desc;
	TableScanDesc scan;
	HeapTuple	tuple;

	if (boundmap == NULL || pg_atomic_read_u32(&slot->bound_map_ready) != 0)
		return;
	catalog = DsyncCatalogFromExtension();
	if (OidIsValid(catalog->rels[DSYNC_TABLE_FENCE]))
	{
		DsyncStoreOpenCatalog(&store, catalog, DSYNC_TABLE_FENCE, false);
		desc = RelationGetDescr(store.rel);
		scan = table_beginscan(store.rel, SnapshotAny, 0, NULL);
		while ((tuple = heap_getnext(scan, ForwardScanDirection)) != NULL)
		{
			bool		isnull;
			Datum		value;

			CHECK_FOR_INTERRUPTS();
			value = heap_getattr(tuple, Anum_fence_resource, desc, &isnull);
			if (!isnull)
				BoundMapSetDatum((text *) DatumGetPointer(value));
			if (!catalog->fence_relid)
				continue;
			value = heap_getattr(tuple, Anum_fence_lease, desc, &isnull);
			if (!isnull)
				BoundMapSetDatum((text *) DatumGetPointer(value));
		}
		table_endscan(scan);
		DsyncStoreClose(&store);
	}
	/* The bits before the flag (a full barrier). */
	pg_memory_barrier();
	pg_atomic_write_u32(&slot->bound_map_ready, 1);
}
