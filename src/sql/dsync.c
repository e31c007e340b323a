/*-------------------------------------------------------------------------
 *
 * dsync.c
 *		Module entry point: load-time checks and hook registration.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"

#include "shmem.h"
#include "queued.h"
#include "settings.h"
#include "wait.h"
#include "locate.h"
#include "boundmap.h"
#include "events.h"
#include "ephemeral.h"
#include "workers.h"
#include "lifecycle.h"
#include "lazycommit.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/*
 * DsyncShmemRequest
 *		Reserve the shared memory of every layer and dsync's locks before
 *		the segment is sized.
 */
static void
DsyncShmemRequest(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	DsyncCoreShmemRequest();
	RequestAddinShmemSpace(DsyncLocateShmemSize());
	RequestAddinShmemSpace(DsyncBoundMapShmemSize());
	RequestAddinShmemSpace(DsyncListenShmemSize());
	DsyncEphemeralShmemRequest();
	DsyncQueuedShmemRequest();
}

/*
 * DsyncShmemStartup
 *		Create (in the postmaster) or attach to every layer's shared state.
 */
static void
DsyncShmemStartup(void)
{
	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	DsyncCoreShmemAttach();
	DsyncLocateShmemInit();
	DsyncBoundMapShmemInit();
	DsyncListenShmemInit();
	DsyncEphemeralShmemInit();
	DsyncQueuedShmemInit();
	LWLockRelease(AddinShmemInitLock);
}

/*
 * _PG_init
 *		Refuse to load unless preloaded, then set up settings, shared
 *		memory, utility hooks and the launcher.
 *
 * dsync keeps its wait queues and worker state in shared memory and runs a
 * background worker, both of which can only be set up by the postmaster.
 * Loading it any other way (CREATE EXTENSION loads the library to check the
 * C functions) must fail with instructions rather than half-work.  The
 * launcher is registered here so that it starts with the server (and on
 * promotion); it starts the per-database reapers.
 */
void
_PG_init(void)
{
	if (!process_shared_preload_libraries_in_progress)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("dsync must be loaded via shared_preload_libraries"),
				 errhint("Add dsync to shared_preload_libraries in postgresql.conf "
						 "(for example: shared_preload_libraries = 'dsync') "
						 "and restart the server.")));

	DsyncDefineSettings();
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = DsyncShmemRequest;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = DsyncShmemStartup;
	dsync_database_gone_hook = DsyncEphemeralForgetDatabase;
	DsyncLifecycleInit();
	DsyncLazyCommitInit();
	DsyncLauncherRegister();
}
