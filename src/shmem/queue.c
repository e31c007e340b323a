/*-------------------------------------------------------------------------
 *
 * queue.c
 *		Each database's queue of committed events, in shared memory, made
 *		of chunks of a pool that all databases share.
 *
 * Committing backends append their events to their database's queue (in
 * their commit callback, so nothing here may fail); the database's worker
 * takes them all at once.  A queue has DSYNC_EVENT_LANES lanes, each with
 * its own lock (dbslot.h says which events go to which).  A queue is a list of DSYNC_CHUNK_SIZE chunks
 * taken from one pool (dsync.event_queue_size in all), so a busy database
 * can use most of the pool while a hundred quiet ones use none: memory
 * does not grow with the number of databases.  An entry never spans two
 * chunks.  When the pool has no free chunk, the event is dropped and
 * counted; the worker then skips its number and rebuilds its deadlines
 * from the tables (reaper.c), so nothing but the notification is lost.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "storage/spin.h"

#include "args.h"
#include "dbslot.h"
#include "queue.h"

/* An event as stored in a queue; name and holder bytes follow. */
typedef struct DsyncQueueEntry
{
	uint32		len;			/* whole entry, MAXALIGN'd */
	uint16		kind;
	uint16		namelen;
	uint16		holderlen;
	int32		slot;
	int64		fencing;
	TimestampTz expires_at;
	char		data[FLEXIBLE_ARRAY_MEMBER];
} DsyncQueueEntry;

StaticAssertDecl(MAXALIGN(offsetof(DsyncQueueEntry, data) + 2 * DSYNC_NAME_MAX_BYTES) <=
				 DSYNC_CHUNK_DATA, "an entry must fit in a chunk");

/*
 * DsyncQueueEntrySize
 *		Bytes an event takes in a queue.
 */
Size
DsyncQueueEntrySize(const DsyncEvent *event)
{
	return MAXALIGN(offsetof(DsyncQueueEntry, data) + strlen(event->name) +
					strlen(event->holder));
}

/*
 * DsyncQueuePoolInit
 *		Chain every chunk of the pool into the free list (at shared memory
 *		set-up).
 */
void
DsyncQueuePoolInit(DsyncWorkerShared *shared, DsyncChunk *chunks, int nchunks)
{
	SpinLockInit(&shared->pool_lock);
	shared->chunks = chunks;
	shared->pool_size = nchunks;
	shared->pool_nfree = nchunks;
	for (int i = 0; i < nchunks; i++)
	{
		chunks[i].next = i + 1 < nchunks ? i + 1 : -1;
		chunks[i].used = 0;
	}
	shared->pool_free = nchunks > 0 ? 0 : -1;
}

/*
 * DsyncQueueChunkTake
 *		A free chunk of the pool, empty, or -1 if there is none.
 */
static int
DsyncQueueChunkTake(void)
{
	int			chunk;

	SpinLockAcquire(&dsync_workers->pool_lock);
	chunk = dsync_workers->pool_free;
	if (chunk >= 0)
	{
		dsync_workers->pool_free = dsync_workers->chunks[chunk].next;
		dsync_workers->pool_nfree--;
	}
	SpinLockRelease(&dsync_workers->pool_lock);
	if (chunk >= 0)
	{
		dsync_workers->chunks[chunk].next = -1;
		dsync_workers->chunks[chunk].used = 0;
	}
	return chunk;
}

/*
 * DsyncQueueChunksGive
 *		Give a list of chunks (linked by next, ending at last) back.
 */
static void
DsyncQueueChunksGive(int first, int last, int count)
{
	if (first < 0)
		return;
	SpinLockAcquire(&dsync_workers->pool_lock);
	dsync_workers->chunks[last].next = dsync_workers->pool_free;
	dsync_workers->pool_free = first;
	dsync_workers->pool_nfree += count;
	SpinLockRelease(&dsync_workers->pool_lock);
}

/*
 * DsyncQueueFreeChunks
 *		How many chunks the pool has free now: a moment's reading, taken
 *		without the lock, which every committing backend would otherwise
 *		take once more (an int is read whole).
 */
int
DsyncQueueFreeChunks(void)
{
	return ((volatile DsyncWorkerShared *) dsync_workers)->pool_nfree;
}

/*
 * DsyncQueueAppend
 *		Copy one event into a lane of a database's queue; false if the pool
 *		has no room.  The caller holds the lane's lock.  Cannot fail
 *		otherwise.
 */
bool
DsyncQueueAppend(DsyncEventLane *lane, const DsyncEvent *event)
{
	int			namelen = strlen(event->name);
	int			holderlen = strlen(event->holder);
	uint32		len = DsyncQueueEntrySize(event);
	DsyncChunk *last;
	DsyncQueueEntry *entry;

	Assert(LWLockHeldByMeInMode(lane->lock, LW_EXCLUSIVE));

	Assert(len <= DSYNC_CHUNK_DATA);
	last = lane->last >= 0 ? &dsync_workers->chunks[lane->last] : NULL;
	if (last == NULL || last->used + len > DSYNC_CHUNK_DATA)
	{
		int			chunk = DsyncQueueChunkTake();

		if (chunk < 0)
			return false;
		if (last != NULL)
			last->next = chunk;
		else
		{
			lane->first = chunk;
			lane->read = 0;
		}
		lane->last = chunk;
		last = &dsync_workers->chunks[chunk];
	}
	entry = (DsyncQueueEntry *) (last->data + last->used);
	entry->len = len;
	entry->kind = (uint16) event->kind;
	entry->namelen = namelen;
	entry->holderlen = holderlen;
	entry->slot = event->slot;
	entry->fencing = event->fencing;
	entry->expires_at = event->expires_at;
	memcpy(entry->data, event->name, namelen);
	memcpy(entry->data + namelen, event->holder, holderlen);
	last->used += len;
	lane->bytes += len;
	return true;
}

/*
 * DsyncQueueLockAll
 *		Take every lane's lock of a slot, in lane order (the only order in
 *		which two are ever held), to change its database or reset it.
 */
void
DsyncQueueLockAll(DsyncDbSlot *slot)
{
	for (int i = 0; i < DSYNC_EVENT_LANES; i++)
		LWLockAcquire(slot->lanes[i].lock, LW_EXCLUSIVE);
}

/*
 * DsyncQueueUnlockAll
 *		Release what DsyncQueueLockAll took.
 */
void
DsyncQueueUnlockAll(DsyncDbSlot *slot)
{
	for (int i = DSYNC_EVENT_LANES - 1; i >= 0; i--)
		LWLockRelease(slot->lanes[i].lock);
}

/*
 * DsyncQueueLaneReset
 *		Give every chunk of a lane back.  The caller holds its lock.
 */
static void
DsyncQueueLaneReset(DsyncEventLane *lane)
{
	int			count = 0;
	int			last = -1;

	Assert(LWLockHeldByMeInMode(lane->lock, LW_EXCLUSIVE));

	for (int chunk = lane->first; chunk >= 0; chunk = dsync_workers->chunks[chunk].next)
	{
		last = chunk;
		count++;
	}
	DsyncQueueChunksGive(lane->first, last, count);
	lane->first = lane->last = -1;
	lane->read = 0;
	lane->bytes = 0;
	lane->dropped = 0;
	lane->dropped_announced = 0;
}

/*
 * DsyncQueueReset
 *		Give every chunk of a queue back (the slot goes to another database,
 *		or starts afresh).  The caller holds every lane's lock.
 */
void
DsyncQueueReset(DsyncDbSlot *slot)
{
	for (int i = 0; i < DSYNC_EVENT_LANES; i++)
		DsyncQueueLaneReset(&slot->lanes[i]);
}

/*
 * DsyncQueueBytes
 *		Bytes queued in a database's lanes, each read under its lock; with
 *		dropped, also whether events were lost since its worker last drained
 *		them (it must then rebuild its deadlines).
 */
uint64
DsyncQueueBytes(DsyncDbSlot *slot, bool *dropped)
{
	uint64		total = 0;

	if (dropped)
		*dropped = false;
	for (int i = 0; i < DSYNC_EVENT_LANES; i++)
	{
		DsyncEventLane *lane = &slot->lanes[i];

		LWLockAcquire(lane->lock, LW_SHARED);
		total += lane->bytes;
		if (dropped && lane->dropped > 0)
			*dropped = true;
		LWLockRelease(lane->lock);
	}
	return total;
}

/*
 * DsyncQueueDrain
 *		Take every queued event of a database, for its worker: lane 0
 *		first, then the others.  Returns how many; *dropped gets (and
 *		resets) the count of events lost since the last call because the
 *		pool was full, and *dropped_announced how many of those would have
 *		been sent to listeners.
 *
 * The bytes are copied out under each lane's lock and parsed afterwards:
 * the locks are what committing backends take in their commit callbacks.
 */
int
DsyncQueueDrain(DsyncDbSlot *slot, List **events, uint64 *dropped,
				uint64 *dropped_announced)
{
	char	   *copy = NULL;
	Size		bytes = 0;
	int			n = 0;

	*dropped = 0;
	*dropped_announced = 0;
	for (int i = 0; i < DSYNC_EVENT_LANES; i++)
	{
		DsyncEventLane *lane = &slot->lanes[i];
		Size		lane_bytes PG_USED_FOR_ASSERTS_ONLY = 0;

		LWLockAcquire(lane->lock, LW_EXCLUSIVE);
		/* An error here exits the worker, which releases the lock first. */
		if (lane->bytes > 0)
			copy = copy ? repalloc_huge(copy, bytes + lane->bytes) :
				MemoryContextAllocHuge(CurrentMemoryContext, lane->bytes);
		for (int chunk = lane->first; chunk >= 0; chunk = dsync_workers->chunks[chunk].next)
		{
			DsyncChunk *c = &dsync_workers->chunks[chunk];
			uint32		from = chunk == lane->first ? lane->read : 0;

			memcpy(copy + bytes, c->data + from, c->used - from);
			bytes += c->used - from;
			lane_bytes += c->used - from;
		}
		Assert(lane_bytes == lane->bytes);
		*dropped += lane->dropped;
		*dropped_announced += lane->dropped_announced;
		DsyncQueueLaneReset(lane);
		LWLockRelease(lane->lock);
	}

	for (Size off = 0; off < bytes;)
	{
		DsyncQueueEntry *entry = (DsyncQueueEntry *) (copy + off);
		DsyncEvent *event = palloc(sizeof(DsyncEvent));

		Assert(entry->len > 0 && off + entry->len <= bytes);
		event->kind = (DsyncEventKind) entry->kind;
		event->slot = entry->slot;
		event->fencing = entry->fencing;
		event->seq = 0;
		event->expires_at = entry->expires_at;
		event->name = pnstrdup(entry->data, entry->namelen);
		event->holder = pnstrdup(entry->data + entry->namelen, entry->holderlen);
		*events = lappend(*events, event);
		off += entry->len;
		n++;
	}
	if (copy)
		pfree(copy);
	return n;
}
