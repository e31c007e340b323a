/*-------------------------------------------------------------------------
 *
 * shmem.c
 *		dsync's shared memory: requested and set up the PostgreSQL 15 way.
 *
 * Shared memory holds what every backend must see at once and cannot wait
 * for a table to tell it: the condition variables blocked acquirers sleep
 * on, and the queue of waiters that decides who goes next (wait.c).  Space
 * is requested from shmem_request_hook (asking from _PG_init is an error
 * since PostgreSQL 15) and attached from shmem_startup_hook under
 * AddinShmemInitLock, as pg_stat_statements does.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/twophase.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/shmem.h"

#include "dsync.h"

DsyncShared *dsync_shared = NULL;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

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
 * DsyncShmemRequest
 *		Reserve dsync's shared memory and its lock before the segment is
 *		sized.
 */
static void
DsyncShmemRequest(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(DsyncShmemSize());
	RequestNamedLWLockTranche("dsync", 1);
}

/*
 * DsyncShmemStartup
 *		Create (in the postmaster) or attach to dsync's shared state.
 */
static void
DsyncShmemStartup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	dsync_shared = ShmemInitStruct("dsync", DsyncShmemSize(), &found);
	if (!found)
	{
		memset(dsync_shared, 0, DsyncShmemSize());
		dsync_shared->lock = &(GetNamedLWLockTranche("dsync"))->lock;
		pg_atomic_init_u64(&dsync_shared->next_ticket, 1);
		for (int i = 0; i < DSYNC_WAKE_CHANNELS; i++)
		{
			ConditionVariableInit(&dsync_shared->wake[i].cv);
			pg_atomic_init_u32(&dsync_shared->waiting[i], 0);
			pg_atomic_init_u64(&dsync_shared->wakes[i], 0);
		}
		SpinLockInit(&dsync_shared->fencing_lock);
		dsync_shared->nslots = DsyncShmemSlots();
	}
	LWLockRelease(AddinShmemInitLock);
}

/*
 * DsyncShmemInit
 *		Install the shared memory hooks; called once from _PG_init.
 */
void
DsyncShmemInit(void)
{
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = DsyncShmemRequest;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = DsyncShmemStartup;
}
