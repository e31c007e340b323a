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

#include "dsync.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

/*
 * _PG_init
 *		Refuse to load unless preloaded, then set up shared memory.
 *
 * dsync keeps its wait queues and worker state in shared memory and runs a
 * background worker, both of which can only be set up by the postmaster.
 * Loading it any other way (CREATE EXTENSION loads the library to check the
 * C functions) must fail with instructions rather than half-work.
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

	DsyncShmemInit();
}
