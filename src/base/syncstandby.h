/*-------------------------------------------------------------------------
 *
 * syncstandby.h
 *		Whether the synchronous standbys have confirmed a WAL position
 *		(syncstandby.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef DSYNC_SYNCSTANDBY_H
#define DSYNC_SYNCSTANDBY_H

#include "access/xlogdefs.h"

extern bool DsyncStandbyConfirmed(XLogRecPtr lsn, int mode);
extern int	DsyncStandbyCommitMode(void);

#endif							/* DSYNC_SYNCSTANDBY_H */
