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
 * Free is not enough for an ephemeral grant, which announces itself at
 * once: a holder whose time has passed must also have been cleared, its
 * "expired" queued, or its name's events would come out of order (the
 * ephemeral grant's "acquired" first).  So a bucket is clear only once
 * until is also at or before the database's reaped_until (its slot): the
 * time up to which every durable holder has been cleared and announced,
 * unless a transaction still pins its bucket.  The worker raises it after
 * each pass over its deadlines to the time the pass began
 * (DsyncHeldMapReaped), unless something due by then is still to be done,
 * with a compare-and-swap from the value it read before it took its
 * queue; a transaction that leaves behind a holder that such a pass may
 * count as done lowers it, and always changes it, before its pins go
 * (HeldMapLowerReaped): one that committed a holder whose expiry has
 * passed by its end, and one that locked a holder (a guard, a try that
 * failed) that the worker then found busy.  Pins are dropped once the
 * transaction's events are queued (after the commit callbacks, with the
 * locks), so that no pin is gone before the events it stood for.
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
#include "storage/proc.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
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

/*
 * The first buckets pinned, in order, so that the end of a transaction
 * (which pins one or two, as a rule) drops them without walking the whole
 * bitmap: that walk was about 1,900 instructions per transaction.
 */
#define HELDMAP_PINS_LISTED	8
static uint32 my_pin_list[HELDMAP_PINS_LISTED];
static bool pin_callback_registered = false;

/* The earliest expiry of a holder this transaction locked or wrote (0: none). */
static TimestampTz my_touched = 0;

/* This transaction is the worker's clearing one (DsyncHeldMapReaping). */
static bool my_reaping = false;

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
 * HeldMapLowerReaped
 *		This transaction, ending, leaves behind a holder whose expiry is
 *		touched, unless it cleared it: if a pass of the worker may count
 *		that holder as cleared (its expiry is at or before reaped_until, or
 *		has passed, so that a pass running now may raise reaped_until over
 *		it), lower reaped_until below it.  The value always changes, so
 *		that a pass that read it before fails to raise it.  Read before
 *		the clock: a pass reads the clock before the value, so one whose
 *		read came earlier began no later than our clock says.  The worker
 *		is woken to raise it again after its next pass.  In the resource
 *		release callback: no error, no wait.
 */
static void
HeldMapLowerReaped(TimestampTz touched)
{
	DsyncDbSlot *slot = DsyncDbSlotFind(MyDatabaseId);
	uint64		current;
	int			procno;

	if (slot == NULL)
		return;
	current = pg_atomic_read_u64(&slot->reaped_until);
	for (;;)
	{
		TimestampTz reaped = (TimestampTz) current;
		TimestampTz now;

		pg_memory_barrier();
		now = GetCurrentTimestamp();
		if (touched > now && touched > reaped)
			return;				/* no pass can count it yet */
		if (pg_atomic_compare_exchange_u64(&slot->reaped_until, &current,
										   (uint64) Min(reaped - 1, touched - 1)))
			break;
	}
	procno = slot->pgprocno;
	if (procno >= 0)
		SetLatch(&ProcGlobal->allProcs[procno].procLatch);
}

/*
 * HeldMapXactEnd
 *		Once the transaction has ended, its changes committed (and their
 *		events queued: this runs after the commit callbacks) or gone: lower
 *		reaped_until if it must, then drop its pins.  A transaction that
 *		was prepared changed nothing of dsync's (wait.c refuses to prepare
 *		one that did: a lock taken or a version written), so its pins are
 *		those of tries that failed.  A resource release callback, called
 *		for the top-level transaction once its locks are gone (and for
 *		other resource owners, which are not ours).
 */
static void
HeldMapXactEnd(ResourceReleasePhase phase, bool isCommit, bool isTopLevel, void *arg)
{
	if (phase != RESOURCE_RELEASE_AFTER_LOCKS || !isTopLevel)
		return;
	if (my_touched != 0 && !my_reaping)
		HeldMapLowerReaped(my_touched);
	my_touched = 0;
	my_reaping = false;
	if (my_npins == 0)
		return;
	if (my_npins <= HELDMAP_PINS_LISTED)
	{
		for (int i = 0; i < my_npins; i++)
		{
			uint32		bucket = my_pin_list[i];

			/* A full barrier: whoever sees the pin gone sees the raise too. */
			(void) pg_atomic_fetch_sub_u32(&heldmap->pins[bucket], 1);
			my_pins[bucket / 64] &= ~(UINT64CONST(1) << (bucket % 64));
		}
		my_npins = 0;
		return;
	}
	for (int w = 0; w < HELDMAP_BUCKETS / 64; w++)
	{
		while (my_pins[w] != 0)
		{
			int			bit = pg_rightmost_one_pos64(my_pins[w]);

			(void) pg_atomic_fetch_sub_u32(&heldmap->pins[w * 64 + bit], 1);
			my_pins[w] &= ~(UINT64CONST(1) << bit);
		}
	}
	my_npins = 0;
}

/*
 * HeldMapRegister
 *		Hook the end of transactions in this backend, once.
 */
static void
HeldMapRegister(void)
{
	if (pin_callback_registered)
		return;
	my_pins = MemoryContextAllocZero(TopMemoryContext, HELDMAP_BUCKETS / 8);
	RegisterResourceReleaseCallback(HeldMapXactEnd, NULL);
	pin_callback_registered = true;
}

/*
 * DsyncHeldMapNote
 *		This transaction is about to lock or write a version of dsync_lease
 *		for name (slot 0), or of dsync_permit: pin its bucket until the
 *		transaction ends and, for a version written with a holder until
 *		expiry (0: none), raise the bucket's until to it.  touched: the
 *		expiry of the holder of the version locked or written (0: none),
 *		which the end of the transaction may have to keep from counting as
 *		reaped (HeldMapLowerReaped).
 */
void
DsyncHeldMapNote(text *name, TimestampTz expiry, TimestampTz touched)
{
	uint32		bucket;

	if (heldmap == NULL)
		return;
	bucket = HeldMapBucket(DsyncNameHash(name));
	if (expiry != 0)
		HeldMapRaise(bucket, expiry);
	HeldMapRegister();
	if (touched != 0 && (my_touched == 0 || touched < my_touched))
		my_touched = touched;
	/* One pin per bucket and transaction. */
	if (my_pins[bucket / 64] & (UINT64CONST(1) << (bucket % 64)))
		return;
	my_pins[bucket / 64] |= UINT64CONST(1) << (bucket % 64);
	if (my_npins < HELDMAP_PINS_LISTED)
		my_pin_list[my_npins] = bucket;
	my_npins++;
	(void) pg_atomic_fetch_add_u32(&heldmap->pins[bucket], 1);
}

/*
 * DsyncHeldMapReaping
 *		The current transaction is the worker's pass clearing expired
 *		holders: what it locks it clears, or finds renewed, so its end need
 *		not lower reaped_until (which would undo the pass's raise).
 */
void
DsyncHeldMapReaping(void)
{
	if (heldmap == NULL)
		return;
	HeldMapRegister();			/* which forgets it when the transaction ends */
	my_reaping = true;
}

/*
 * DsyncHeldMapPinned
 *		Whether a transaction that locked or wrote a version of a name of
 *		this hash may still be running, or ending (its events not yet
 *		queued).
 */
bool
DsyncHeldMapPinned(uint32 hash)
{
	return heldmap != NULL && pg_atomic_read_u32(&heldmap->pins[HeldMapBucket(hash)]) != 0;
}

/*
 * DsyncHeldMapReapBegin
 *		Before the worker takes its queue for a pass: the clock, then
 *		reaped_until, for DsyncHeldMapReaped after the pass.
 */
uint64
DsyncHeldMapReapBegin(DsyncDbSlot *slot, TimestampTz *began)
{
	*began = GetCurrentTimestamp();
	pg_memory_barrier();
	return pg_atomic_read_u64(&slot->reaped_until);
}

/*
 * DsyncHeldMapReaped
 *		After a pass of the worker that began (DsyncHeldMapReapBegin) with
 *		reaped_until at seen: every holder whose expiry is at or before
 *		upto has been cleared and announced, as far as the worker knew of
 *		it then (upto is at most when the pass began).  Raise reaped_until
 *		to upto (0: nothing to say), unless a transaction has changed it
 *		since: it left a holder behind that the pass may not have counted.
 */
void
DsyncHeldMapReaped(DsyncDbSlot *slot, uint64 seen, TimestampTz upto)
{
	if (upto != 0 && upto > (TimestampTz) seen)
		(void) pg_atomic_compare_exchange_u64(&slot->reaped_until, &seen, (uint64) upto);
}

/*
 * DsyncHeldMapClear
 *		Whether no durable lease can hold a name of this hash at now, nor
 *		be on its way to, nor have left its end unannounced: then an
 *		ephemeral grant need not look at dsync_lease.  The caller holds the
 *		name's partition lock exclusively.
 */
bool
DsyncHeldMapClear(DsyncDbSlot *slot, uint32 hash, TimestampTz now)
{
	uint32		bucket = HeldMapBucket(hash);
	TimestampTz until;

	if (heldmap == NULL || slot == NULL || pg_atomic_read_u32(&slot->held_map_ready) == 0)
		return false;
	pg_read_barrier();
	/* Read once ready is: a slot handed to another database is reset first. */
	if (slot->dbid != MyDatabaseId)
		return false;
	if (pg_atomic_read_u32(&heldmap->pins[bucket]) != 0)
		return false;
	/* A pin dropped is a raise made, and reaped_until lowered (HeldMapXactEnd). */
	pg_read_barrier();
	until = (TimestampTz) pg_atomic_read_u64(&heldmap->until[bucket]);
	if (until == 0)
		return true;			/* never held durably */
	/* Held until then: also cleared and announced? */
	return until <= now && until <= (TimestampTz) pg_atomic_read_u64(&slot->reaped_until);
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
