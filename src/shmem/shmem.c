/*-------------------------------------------------------------------------
 *
 * shmem.c
 *		dsync's shared memory: requested and set up the PostgreSQL 15 way.
 *
 * Shared memory holds what every backend must see at once and cannot wait
 * for a table to tell it: the condition variables blocked acquirers sleep
 * on, and the queue of waiters that decides who goes next (waitqueue.c).  Space
 * is requested from shmem_request_hook (asking from _PG_init is an error
 * since PostgreSQL 15) and attached from shmem_startup_hook under
 * AddinShmemInitLock, as pg_stat_statements does.  The hooks themselves are
 * installed at the top (sql/dsync.c), which also asks the higher layers
 * (the location cache, listeners, ephemeral leases) for their share, so
 * that this file calls nothing above it.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/twophase.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "utils/timestamp.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/shmem.h"

#include "stats.h"
#include "dbslot.h"
#include "queue.h"
#include "shmem.h"
#include "settings.h"

DsyncShared *dsync_shared = NULL;
DsyncWorkerShared *dsync_workers = NULL;

/*
 * DsyncShmemSlots
 *		One waiter slot per PGPROC, indexed by pgprocno, as proc.c sizes
 *		its own array; a backend waits for one thing at a time.
 */
static int
DsyncShmemSlots(void)
{
	return MaxBackends + NUM_AUXILIARY_PROCS + max_prepared_xacts;
}

/*
 * DsyncShmemSize
 *		Bytes of shared memory dsync needs.
 */
static Size
DsyncShmemSize(void)
{
	return add_size(offsetof(DsyncShared, slots),
					mul_size(DsyncShmemSlots(), sizeof(DsyncWaiterSlot)));
}

/*
 * DsyncPoolChunks
 *		Chunks in the shared event pool: dsync.event_queue_size in all.
 */
static int
DsyncPoolChunks(void)
{
	return (int) (((Size) dsync_event_queue_size * 1024) / DSYNC_CHUNK_SIZE);
}

/*
 * DsyncWorkerShmemSize
 *		Bytes for the database slots and the event pool.
 */
static Size
DsyncWorkerShmemSize(void)
{
	Size		size;

	size = add_size(offsetof(DsyncWorkerShared, slots),
					mul_size(dsync_max_databases, sizeof(DsyncDbSlot)));
	size = MAXALIGN(size);
	return add_size(size, mul_size(DsyncPoolChunks(), sizeof(DsyncChunk)));
}

/*
 * DsyncWorkerShmemInit
 *		Lay out the database slots, each with its event queue's lane locks, and
 *		the event pool.
 */
static void
DsyncWorkerShmemInit(void)
{
	LWLockPadded *queue_locks = GetNamedLWLockTranche(DSYNC_TRANCHE_EVENT_QUEUE);
	DsyncChunk *chunks;

	memset(dsync_workers, 0, DsyncWorkerShmemSize());
	dsync_workers->lock = &(GetNamedLWLockTranche(DSYNC_TRANCHE_WORKERS))->lock;
	dsync_workers->nslots = dsync_max_databases;
	dsync_workers->launcher_pgprocno = -1;
	chunks = (DsyncChunk *) ((char *) dsync_workers +
							 MAXALIGN(offsetof(DsyncWorkerShared, slots) +
									  dsync_max_databases * sizeof(DsyncDbSlot)));
	DsyncQueuePoolInit(dsync_workers, chunks, DsyncPoolChunks());
	for (int i = 0; i < dsync_max_databases; i++)
	{
		DsyncDbSlot *slot = &dsync_workers->slots[i];

		for (int l = 0; l < DSYNC_EVENT_LANES; l++)
		{
			slot->lanes[l].lock = &queue_locks[i * DSYNC_EVENT_LANES + l].lock;
			slot->lanes[l].first = slot->lanes[l].last = -1;
		}
		slot->pgprocno = -1;
		pg_atomic_init_u64(&slot->next_deadline, 0);
		pg_atomic_init_u64(&slot->ephemeral_deadline, 0);
		pg_atomic_init_u64(&slot->queued_grants, 0);
		pg_atomic_init_u64(&slot->watcher_left_at, 0);
		pg_atomic_init_u32(&slot->held_map_ready, 0);
		pg_atomic_init_u32(&slot->bound_map_ready, 0);
		pg_atomic_init_u64(&slot->reaped_until, 0);
		pg_atomic_init_u32(&slot->recheck, 0);
		pg_atomic_init_u32(&slot->yield, 0);
		pg_atomic_init_u32(&slot->wanted, 0);
		for (int c = 0; c < DSYNC_NUM_COUNTERS; c++)
			pg_atomic_init_u64(&slot->counters[c], 0);
	}
}

/*
 * DsyncCoreShmemRequest
 *		Reserve the two segments and dsync's lock tranches, one per kind of
 *		lock, so that a wait on one is named in pg_stat_activity's
 *		wait_event (LWLock "dsync wait queue", "dsync workers" or "dsync
 *		event queue") rather than all of them as "dsync".  The shared-memory
 *		request hook (sql/dsync.c) calls this first.
 */
void
DsyncCoreShmemRequest(void)
{
	RequestAddinShmemSpace(DsyncShmemSize());
	RequestAddinShmemSpace(DsyncWorkerShmemSize());
	RequestNamedLWLockTranche(DSYNC_TRANCHE_WAIT_QUEUE, 1);
	RequestNamedLWLockTranche(DSYNC_TRANCHE_WORKERS, 1);
	RequestNamedLWLockTranche(DSYNC_TRANCHE_EVENT_QUEUE,
							  dsync_max_databases * DSYNC_EVENT_LANES);
}

/*
 * DsyncCoreShmemAttach
 *		Create (in the postmaster) or attach to the two segments.  The
 *		caller holds AddinShmemInitLock.
 */
void
DsyncCoreShmemAttach(void)
{
	bool		found;

	dsync_shared = ShmemInitStruct("dsync", DsyncShmemSize(), &found);
	if (!found)
	{
		memset(dsync_shared, 0, DsyncShmemSize());
		dsync_shared->lock = &(GetNamedLWLockTranche(DSYNC_TRANCHE_WAIT_QUEUE))->lock;
		pg_atomic_init_u64(&dsync_shared->next_ticket, 1);
		pg_atomic_init_u64(&dsync_shared->semaphore_generation, 0);
		/* Session leases of backends from before a crash are of another epoch. */
		dsync_shared->session_epoch = GetCurrentTimestamp();
		for (int i = 0; i < DSYNC_WAKE_CHANNELS; i++)
		{
			pg_atomic_init_u32(&dsync_shared->waiting[i], 0);
			pg_atomic_init_u64(&dsync_shared->wakes[i], 0);
		}
		SpinLockInit(&dsync_shared->fencing_lock);
		dsync_shared->nslots = DsyncShmemSlots();
		for (int i = 0; i < dsync_shared->nslots; i++)
			pg_atomic_init_u64(&dsync_shared->slots[i].sleep_until, 0);
	}
	dsync_workers = ShmemInitStruct("dsync workers", DsyncWorkerShmemSize(), &found);
	if (!found)
		DsyncWorkerShmemInit();
}
