/*-------------------------------------------------------------------------
 *
 * reaper.h
 *		What the reaper's loop (reaper.c) uses of its deadline tracking
 *		and clearing (expiry.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef DSYNC_REAPER_H
#define DSYNC_REAPER_H

#include "dsync.h"

/* What a deadline is about. */
typedef enum ExpiryKind
{
	EXPIRY_LEASE,				/* a plain lease (dsync_lease) */
	EXPIRY_PERMIT,				/* a semaphore permit (dsync_permit) */
	EXPIRY_MEMBER				/* a group member (dsync_member) */
} ExpiryKind;

extern void ExpiryReset(void);
extern void ExpiryScheduleEvent(const DsyncEvent *event);
extern TimestampTz ExpiryNext(void);
extern void ExpiryRebuild(void);
extern int	ExpiryReapDue(DsyncDbSlot *slot, bool *more);
extern Size ExpiryCount(void);

#endif							/* DSYNC_REAPER_H */
