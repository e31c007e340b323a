/*-------------------------------------------------------------------------
 *
 * shmem.c
 *		dsync's shared memory: requested and set up the PostgreSQL 15 way.
 *
 * Shared memory holds what every backend must see at once and cannot wait
 * for a table to tell it: the condition variables that blocked acquirers
 * sleep on.  Space is requested from shmem_request_hook (asking from
 * _PG_init is an error since PostgreSQL 15) and attached from
 * shmem_startup_hook under AddinShmemInitLock, as pg_stat_statements does.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/condition_variable.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"

#include "dsync.h"

/*
 * Number of wake-up channels.  Lease names hash onto them, so two names
 * may share one; wakers therefore broadcast and sleepers re-check.
 */
#define DSYNC_WAKE_CHANNELS 1024

typedef struct DsyncShared
{
	ConditionVariableMinimallyPadded wake[DSYNC_WAKE_CHANNELS];
} DsyncShared;

static DsyncShared *dsync_shared = NULL;
static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/*
 * DsyncShmemRequest
 *		Reserve dsync's shared memory before the segment is sized.
 */
static void
DsyncShmemRequest(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(MAXALIGN(sizeof(DsyncShared)));
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
	dsync_shared = ShmemInitStruct("dsync", sizeof(DsyncShared), &found);
	if (!found)
	{
		for (int i = 0; i < DSYNC_WAKE_CHANNELS; i++)
			ConditionVariableInit(&dsync_shared->wake[i].cv);
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
