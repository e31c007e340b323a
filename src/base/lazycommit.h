/*-------------------------------------------------------------------------
 *
 * lazycommit.h
 *		Commits that need not wait for their WAL to reach disk
 *		(lazycommit.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef DSYNC_LAZYCOMMIT_H
#define DSYNC_LAZYCOMMIT_H

#include "access/xlogdefs.h"

extern void DsyncLazyCommitInit(void);
extern void DsyncLazyCommitBegin(void);
extern void DsyncLazyCommitEnd(void);
extern void DsyncCommitAtLeast(int level);
extern void DsyncLazyCommitCarry(XLogRecPtr lsn);
extern void DsyncLazyCommitFlushAll(void);

#endif							/* DSYNC_LAZYCOMMIT_H */
