/*-------------------------------------------------------------------------
 *
 * locate.c
 *		A shared cache of where each lease's newest row version is.
 *
 * Finding a lease's row through its primary key costs an index descent,
 * and under an old snapshot far more: the scan runs under SnapshotAny, so
 * it meets every version the snapshot keeps alive, each one under a buffer
 * content lock, and the walk grows with every cycle for as long as the
 * snapshot stays open.  Yet the row wanted is almost always the version
 * the last committed change wrote.  So each change remembers the location
 * it wrote and publishes it when its transaction commits; the next caller
 * reads that one tuple (scan.c, DsyncScanKeyLatest) and uses the index only
 * when the location no longer holds the newest version of that name.
 *
 * A location is only a hint.  Whoever uses it checks the tuple found there
 * as an index scan would: visible to a fresh snapshot and carrying the
 * right key (a visible version of a unique key is the only one), so a
 * stale, evicted or even wrong entry costs an index scan, never a wrong
 * answer.
 *
 * The cache is 4-way set associative, chosen by a hash of (database,
 * relation, name).  An entry is one 64-bit word, read and written
 * atomically with no lock: the location (block and offset) and 16 more
 * bits of the hash as a tag.  Two names with one set and one tag take each
 * other's entry, which again costs an index scan now and then; an offset
 * of 0 (never a valid one) marks an empty entry.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "common/hashfn.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/shmem.h"
#include "utils/rel.h"

#include "compat.h"
#include "locate.h"

/* Sets of the cache, a power of two, and entries per set: 2 MB in all. */
#define DSYNC_LOCATE_SETS		65536
#define DSYNC_LOCATE_WAYS		4

/* Locations a transaction publishes at commit; more are left unpublished. */
#define DSYNC_LOCATE_PENDING	64

/* An entry: tag << 48 | block << 16 | offset; offset 0 is empty. */
#define LOCATE_TAG(word)		((uint16) ((word) >> 48))
#define LOCATE_OFFSET(word)		((OffsetNumber) ((word) & 0xFFFF))

typedef struct DsyncLocateSet
{
	pg_atomic_uint64 ways[DSYNC_LOCATE_WAYS];
} DsyncLocateSet;

typedef struct DsyncLocatePending
{
	uint64		hash;			/* LocateHash of the name */
	ItemPointerData tid;
	SubTransactionId subxid;	/* the subtransaction that wrote it */
} DsyncLocatePending;

static DsyncLocateSet *locate_sets = NULL;

/* This transaction's writes, published if it commits. */
static DsyncLocatePending locate_pending[DSYNC_LOCATE_PENDING];
static int	locate_npending = 0;
static bool locate_callback_registered = false;

/* Which way a new location evicts when its set is full. */
static uint32 locate_victim = 0;

/*
 * DsyncLocateShmemSize
 *		The cache's share of dsync's shared memory.
 */
Size
DsyncLocateShmemSize(void)
{
	return mul_size(DSYNC_LOCATE_SETS, sizeof(DsyncLocateSet));
}

/*
 * DsyncLocateShmemInit
 *		Create or attach to the cache; the caller holds AddinShmemInitLock.
 */
void
DsyncLocateShmemInit(void)
{
	bool		found;

	locate_sets = ShmemInitStruct("dsync locations", DsyncLocateShmemSize(), &found);
	if (!found)
	{
		for (int i = 0; i < DSYNC_LOCATE_SETS; i++)
			for (int w = 0; w < DSYNC_LOCATE_WAYS; w++)
				pg_atomic_init_u64(&locate_sets[i].ways[w], 0);
	}
}

/*
 * LocateHash
 *		The hash of a name of a relation of this database: its low bits
 *		choose the set, its top 16 bits are the tag.
 */
static uint64
LocateHash(Relation rel, text *name)
{
	uint64		seed = ((uint64) MyDatabaseId << 32) | RelationGetRelid(rel);

	return hash_bytes_extended((const unsigned char *) VARDATA_ANY(name),
							   VARSIZE_ANY_EXHDR(name), seed);
}

/*
 * LocateSet
 *		The set a hash lives in.
 */
static DsyncLocateSet *
LocateSet(uint64 hash)
{
	return &locate_sets[hash & (DSYNC_LOCATE_SETS - 1)];
}

/*
 * LocateWord
 *		The entry for a location under a hash's tag.
 */
static uint64
LocateWord(uint64 hash, ItemPointer tid)
{
	return (hash & UINT64CONST(0xFFFF000000000000)) |
		((uint64) ItemPointerGetBlockNumber(tid) << 16) |
		ItemPointerGetOffsetNumber(tid);
}

/*
 * LocateFind
 *		The way of a set holding a hash's tag, or -1; *word is its entry.
 */
static int
LocateFind(DsyncLocateSet *set, uint64 hash, uint64 *word)
{
	uint16		tag = (uint16) (hash >> 48);

	for (int w = 0; w < DSYNC_LOCATE_WAYS; w++)
	{
		uint64		v = pg_atomic_read_u64(&set->ways[w]);

		if (LOCATE_OFFSET(v) != InvalidOffsetNumber && LOCATE_TAG(v) == tag)
		{
			*word = v;
			return w;
		}
	}
	return -1;
}

/*
 * LocateStore
 *		Write a location into its set: over the entry of its tag, else an
 *		empty one, else one taken in turn.
 */
static void
LocateStore(uint64 hash, ItemPointer tid)
{
	DsyncLocateSet *set = LocateSet(hash);
	uint64		word;
	int			w = LocateFind(set, hash, &word);

	if (w < 0)
	{
		for (w = 0; w < DSYNC_LOCATE_WAYS; w++)
			if (LOCATE_OFFSET(pg_atomic_read_u64(&set->ways[w])) == InvalidOffsetNumber)
				break;
		if (w == DSYNC_LOCATE_WAYS)
			w = locate_victim++ % DSYNC_LOCATE_WAYS;
	}
	pg_atomic_write_u64(&set->ways[w], LocateWord(hash, tid));
}

/*
 * DsyncLocateGet
 *		The last published location of a name's row in rel, if the cache
 *		has one.
 */
bool
DsyncLocateGet(Relation rel, text *name, ItemPointer tid)
{
	uint64		hash;
	uint64		word;

	if (locate_sets == NULL)
		return false;
	hash = LocateHash(rel, name);
	if (LocateFind(LocateSet(hash), hash, &word) < 0)
		return false;
	ItemPointerSet(tid, (BlockNumber) (word >> 16 & 0xFFFFFFFF), LOCATE_OFFSET(word));
	return true;
}

/*
 * DsyncLocatePut
 *		Publish the location of a committed version found by an index
 *		scan, so that the next caller can skip the scan: only if the cache
 *		still holds what DsyncLocateGet gave this caller (expected, or
 *		nothing for this name if expected is invalid).
 *
 * An index scan under an old snapshot is slow, and changes committed
 * meanwhile publish newer locations; putting back the one the scan found
 * would send every later caller on a long walk, then into a scan of its
 * own, and so on.
 */
void
DsyncLocatePut(Relation rel, text *name, ItemPointer tid, ItemPointer expected)
{
	uint64		hash;
	DsyncLocateSet *set;
	uint64		word;
	int			w;

	if (locate_sets == NULL)
		return;
	hash = LocateHash(rel, name);
	set = LocateSet(hash);
	w = LocateFind(set, hash, &word);
	if (!ItemPointerIsValid(expected))
	{
		if (w < 0)
			LocateStore(hash, tid);
	}
	else if (w >= 0 && word == LocateWord(hash, expected))
		(void) pg_atomic_compare_exchange_u64(&set->ways[w], &word, LocateWord(hash, tid));
}

/*
 * LocateXactCallback
 *		Publish a committed transaction's locations; forget an aborted
 *		one's (the versions it wrote are dead).
 */
static void
LocateXactCallback(XactEvent event, void *arg)
{
	if (locate_npending == 0)
		return;
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT)
	{
		for (int i = 0; i < locate_npending; i++)
			LocateStore(locate_pending[i].hash, &locate_pending[i].tid);
	}
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT ||
		event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT ||
		event == XACT_EVENT_PREPARE)
		locate_npending = 0;
}

/*
 * LocateSubXactCallback
 *		A subtransaction rolled back: the versions it wrote are dead, so
 *		forget them; one that committed hands its writes to its parent.
 */
static void
LocateSubXactCallback(SubXactEvent event, SubTransactionId mySubid,
					  SubTransactionId parentSubid, void *arg)
{
	int			kept = 0;

	if (event != SUBXACT_EVENT_ABORT_SUB && event != SUBXACT_EVENT_COMMIT_SUB)
		return;
	for (int i = 0; i < locate_npending; i++)
	{
		if (locate_pending[i].subxid == mySubid)
		{
			if (event == SUBXACT_EVENT_ABORT_SUB)
				continue;
			locate_pending[i].subxid = parentSubid;
		}
		locate_pending[kept++] = locate_pending[i];
	}
	locate_npending = kept;
}

/*
 * DsyncLocateAtCommit
 *		Note a version this transaction has just written, to publish when
 *		it commits.  Before then no other session can see it, and the
 *		version it replaces is still the one they must find.  A prepared
 *		transaction publishes nothing: the next caller finds its versions
 *		through the index once it commits.
 */
void
DsyncLocateAtCommit(Relation rel, text *name, ItemPointer tid)
{
	uint64		hash;

	if (locate_sets == NULL)
		return;
	if (!locate_callback_registered)
	{
		RegisterXactCallback(LocateXactCallback, NULL);
		RegisterSubXactCallback(LocateSubXactCallback, NULL);
		locate_callback_registered = true;
	}
	hash = LocateHash(rel, name);
	/* A name written twice keeps only its newest location. */
	for (int i = 0; i < locate_npending; i++)
	{
		if (locate_pending[i].hash == hash)
		{
			locate_pending[i].tid = *tid;
			locate_pending[i].subxid = GetCurrentSubTransactionId();
			return;
		}
	}
	if (locate_npending < DSYNC_LOCATE_PENDING)
	{
		locate_pending[locate_npending].hash = hash;
		locate_pending[locate_npending].tid = *tid;
		locate_pending[locate_npending].subxid = GetCurrentSubTransactionId();
		locate_npending++;
	}
}
