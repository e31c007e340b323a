/*-------------------------------------------------------------------------
 *
 * workers.h
 *		Entry points of the background workers and the hooks that tell
 *		them about CREATE/DROP EXTENSION and DROP DATABASE
 *		(launcher.c, reaper.c, lifecycle.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef DSYNC_WORKERS_H
#define DSYNC_WORKERS_H

#include "postgres.h"
#include "fmgr.h"

/* launcher.c */
extern void DsyncLauncherRegister(void);
extern void DsyncLauncherWake(void);
extern PGDLLEXPORT void dsync_launcher_main(Datum arg);

/* lifecycle.c */
extern void DsyncLifecycleInit(void);

/* reaper.c */
extern PGDLLEXPORT void dsync_reaper_main(Datum arg);

#endif							/* DSYNC_WORKERS_H */
