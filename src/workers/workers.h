/*-------------------------------------------------------------------------
 *
 * workers.h
 *		Entry points of the background workers (launcher.c, reaper.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef DSYNC_WORKERS_H
#define DSYNC_WORKERS_H

#include "postgres.h"
#include "utils/timestamp.h"
#include "fmgr.h"

/* launcher.c */
extern void DsyncLauncherRegister(void);
extern PGDLLEXPORT void dsync_launcher_main(Datum arg);

/* reaper.c */
extern PGDLLEXPORT void dsync_reaper_main(Datum arg);

/* queuework.c */
extern TimestampTz DsyncQueueWorkNext(TimestampTz next);
extern void DsyncQueueWork(void);
extern void DsyncQueueNoteFreed(text *name);
extern void DsyncQueueGrantFreed(FunctionCallInfo fcinfo);

/* reaper.c */
extern bool DsyncReaperTransaction(void (*step) (void));

#endif							/* DSYNC_WORKERS_H */
