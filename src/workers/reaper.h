/*-------------------------------------------------------------------------
 *
 * reaper.h
 *		What the reaper's loop (reaper.c) uses of its deadline tracking
 *		(expiry.c), of clearing due rows (reap.c) and of its start
 *		(reaperstart.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef DSYNC_REAPER_H
#define DSYNC_REAPER_H

#include "dbslot.h"
#include "events.h"
#include "store.h"

/* What a deadline is about. */
typedef enum ExpiryKind
{
	EXPIRY_LEASE,				/* a plain lease (dsync_lease) */
	EXPIRY_PERMIT,				/* a semaphore permit (dsync_permit) */
	EXPIRY_MEMBER				/* a group member (dsync_member) */
} ExpiryKind;

/* What ReapRow did with a row (reap.c). */
typedef enum ReapOutcome
{
	REAP_NOT_DUE,				/* held, alive, or not yet removable */
	REAP_BUSY,					/* locked by someone else, or changed: later */
	REAP_CLEARED,				/* expired holder cleared, or member deleted */
	REAP_REMOVED				/* unused row deleted */
} ReapOutcome;

extern ReapOutcome ReapRow(DsyncStore *store, DsyncRow *row, TimestampTz now,
						   DsyncDbSlot *slot, TimestampTz *next);
extern TimestampTz ReapIdleDeadline(const DsyncRow *row);

extern void ExpiryReset(void);
extern void ExpiryScheduleEvent(const DsyncEvent *event);
extern TimestampTz ExpiryNext(void);
extern void ExpiryRebuild(void);
extern int	ExpiryReapDue(DsyncDbSlot *slot, bool *more);
extern TimestampTz ExpiryReapedUpTo(TimestampTz began);
extern Size ExpiryCount(void);

/* reaperstart.c: how the worker starts */
extern bool ReaperClaimSlot(DsyncDbSlot *slot, Oid dbid);
extern void ReaperConnect(Oid dbid);
extern void ReaperFillMaps(DsyncDbSlot *slot);

#endif							/* DSYNC_REAPER_H */
