/*-------------------------------------------------------------------------
 *
 * ephheap.c
 *		The expiries of ephemeral leases, in a pairing heap per partition
 *		and database slot, so that the reaper finds what is due without
 *		walking the whole table.
 *
 * Every entry of a database that has a slot (dbslot.c) when it is granted
 * is in the heap of (its slot, its partition), ordered by expires_at: put
 * there by the grant, moved by a renewal or a reentrant grant, taken out
 * by a release or removal, all under the partition lock held exclusively,
 * which is what guards the heap.  The reaper (DsyncEphemeralReap) locks
 * one partition at a time and pops only what has expired, so a pass costs
 * the expired entries plus one look per partition, not the whole table,
 * and holds up only the ephemeral grants of the partition it is at.
 *
 * Only the roots live in shared memory outside the entries (an array of
 * EPHEMERAL_PARTITIONS pointers per slot); lib/pairingheap.h's heap
 * struct, which holds a function pointer, is made on the stack around a
 * root for each operation.  Shared memory is at the same address in every
 * backend, so the node pointers are good in all of them.
 *
 * A slot reused by another database (after a drop) keeps the old one's
 * entries in its heaps: the new database's reaper takes them out of the
 * heap when they expire and leaves them to EphemeralSweep.  An entry
 * granted while its database had no slot is in no heap: there is no
 * reaper for it either; it is taken over when expired, or swept.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "lib/pairingheap.h"
#include "storage/shmem.h"

#include "dbslot.h"
#include "events.h"
#include "settings.h"
#include "wait.h"
#include "ephemeral_int.h"

/*
 * EphemeralHeapShmemSize
 *		Bytes for the roots.
 */
Size
EphemeralHeapShmemSize(void)
{
	return MAXALIGN(mul_size(mul_size(dsync_max_databases, EPHEMERAL_PARTITIONS),
							 sizeof(pairingheap_node *)));
}

/*
 * EphemeralHeapShmemInit
 *		Create or attach to the roots; found: they were set up already.
 */
void
EphemeralHeapShmemInit(bool found)
{
	bool		roots_found;

	ephemeral_shared->roots = ShmemInitStruct("dsync ephemeral expiries",
											  EphemeralHeapShmemSize(), &roots_found);
	if (!found)
		memset(ephemeral_shared->roots, 0, EphemeralHeapShmemSize());
}

/*
 * EphemeralHeapCompare
 *		The heap's order: the earliest expiry first (pairingheap.h keeps
 *		the greatest on top, so the comparison is reversed).
 */
static int
EphemeralHeapCompare(const pairingheap_node *a, const pairingheap_node *b, void *arg)
{
	TimestampTz ea = pairingheap_const_container(EphemeralEntry, expiry, a)->expires_at;
	TimestampTz eb = pairingheap_const_container(EphemeralEntry, expiry, b)->expires_at;

	return ea < eb ? 1 : ea > eb ? -1 : 0;
}

/*
 * EphemeralHeapRoot
 *		The root of the heap of a slot and partition.
 */
static pairingheap_node **
EphemeralHeapRoot(const DsyncDbSlot *slot, int partition)
{
	return &ephemeral_shared->roots[(slot - dsync_workers->slots) * EPHEMERAL_PARTITIONS + partition];
}

/*
 * EphemeralHeapAddTo
 *		Put an entry (in no heap) into the heap of root.
 */
static void
EphemeralHeapAddTo(EphemeralEntry *entry, pairingheap_node **root)
{
	pairingheap heap = {EphemeralHeapCompare, NULL, *root};

	pairingheap_add(&heap, &entry->expiry);
	*root = heap.ph_root;
	entry->heap = root;
}

/*
 * EphemeralHeapRemove
 *		Take an entry out of its heap, if it is in one.
 */
void
EphemeralHeapRemove(EphemeralEntry *entry)
{
	pairingheap heap;

	if (entry->heap == NULL)
		return;
	heap.ph_compare = EphemeralHeapCompare;
	heap.ph_arg = NULL;
	heap.ph_root = *entry->heap;
	pairingheap_remove(&heap, &entry->expiry);
	*entry->heap = heap.ph_root;
	entry->heap = NULL;
}

/*
 * EphemeralHeapPut
 *		A grant made the entry (new, or taken over): put it in the heap of
 *		slot (NULL: none) and its partition, out of any it was in.
 */
void
EphemeralHeapPut(EphemeralEntry *entry, const DsyncDbSlot *slot)
{
	EphemeralHeapRemove(entry);
	if (slot != NULL)
		EphemeralHeapAddTo(entry, EphemeralHeapRoot(slot, entry->key.hash % EPHEMERAL_PARTITIONS));
}

/*
 * EphemeralHeapMoved
 *		The entry's expiry changed (renewal, reentrant grant): move it in
 *		its heap.
 */
void
EphemeralHeapMoved(EphemeralEntry *entry)
{
	pairingheap_node **root = entry->heap;

	if (root == NULL)
		return;
	EphemeralHeapRemove(entry);
	EphemeralHeapAddTo(entry, root);
}

/*
 * EphemeralHeapReap
 *		The reaper's look at one partition of its database, under the
 *		partition lock held exclusively: remove and announce the entries
 *		that expired by now and nobody guards; returns how many, and lowers
 *		*next to the earliest expiry still to come.  A guarded expired
 *		entry stays (the end of its guard announces when it is due), and
 *		goes back in the heap.  Sets the bits of the removed names' wake
 *		channels in freed (DSYNC_WAKE_CHANNELS bits).
 */
int
EphemeralHeapReap(const DsyncDbSlot *slot, int partition, TimestampTz now, TimestampTz *next,
				  uint64 *freed)
{
	pairingheap_node **root = EphemeralHeapRoot(slot, partition);
	pairingheap heap = {EphemeralHeapCompare, NULL, *root};
	EphemeralEntry *guarded = NULL;
	int			removed = 0;

	while (!pairingheap_is_empty(&heap))
	{
		EphemeralEntry *entry = pairingheap_container(EphemeralEntry, expiry,
													  pairingheap_first(&heap));
		DsyncEvent	event;
		int			channel;

		if (entry->expires_at > now)
		{
			if (*next == 0 || entry->expires_at < *next)
				*next = entry->expires_at;
			break;
		}
		(void) pairingheap_remove_first(&heap);
		/* Kept current: an error below must not leave freed entries in it. */
		*root = heap.ph_root;
		entry->heap = NULL;
		if (entry->key.dbid != MyDatabaseId)
			continue;			/* the slot's former database's: swept */
		if (entry->guards > 0)
		{
			/* Kept aside, linked through its node, until the pass is done. */
			entry->expiry.next_sibling = guarded == NULL ? NULL : &guarded->expiry;
			guarded = entry;
			continue;
		}
		event = EphemeralEvent(DSYNC_EVENT_EXPIRED, entry);
		DsyncEventPublishNow(&event, 1, 0);
		/* Its queued waiters have no backend to wake (DsyncEphemeralReap). */
		channel = DsyncWaitKeyBytes(event.name, entry->key.len) % DSYNC_WAKE_CHANNELS;
		freed[channel / 64] |= UINT64CONST(1) << (channel % 64);
		EphemeralRemove(entry);
		removed++;
	}
	while (guarded != NULL)
	{
		EphemeralEntry *entry = guarded;

		guarded = entry->expiry.next_sibling == NULL ? NULL :
			pairingheap_container(EphemeralEntry, expiry, entry->expiry.next_sibling);
		EphemeralHeapAddTo(entry, root);
	}
	return removed;
}
