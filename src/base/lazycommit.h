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

extern void DsyncLazyCommitBegin(void);
extern void DsyncLazyCommitEnd(void);

#endif							/* DSYNC_LAZYCOMMIT_H */
