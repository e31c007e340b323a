/*-------------------------------------------------------------------------
 *
 * lease.h
 *		Leases and semaphore permits: granting, renewing, releasing
 *		(lease.c, permit.c, semaphore.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef DSYNC_LEASE_H
#define DSYNC_LEASE_H

#include "postgres.h"
#include "fmgr.h"
#include "utils/timestamp.h"
#include "store.h"
#include "wait.h"

typedef struct LeaseGrant
{
	text	   *holder;
	Interval   *ttl;
	int64		ttl_usec;
	Datum		info;
	bool		info_null;
} LeaseGrant;

extern void DsyncLeaseGrantArgs(FunctionCallInfo fcinfo, LeaseGrant *grant,
								bool *wait_forever, int64 *wait_usec);
extern bool DsyncLeaseAcquireWait(const DsyncCatalog *catalog, text *lease, uint32 hash,
								  text *holder, const char *kind, DsyncTryFunc try_fn,
								  void *arg, bool wait_forever, int64 wait_usec);
extern bool DsyncLeaseRaiseFences(const DsyncCatalog *catalog, text *lease, uint32 hash,
								  int64 token, uint64 fresh);
extern text *DsyncLeaseLeader(FunctionCallInfo fcinfo, text *lease);
extern void DsyncLeaseSetGrant(DsyncStore *store, DsyncRow *row, const LeaseGrant *grant);
extern void DsyncLeaseRenewRow(DsyncStore *store, DsyncRow *row, const LeaseGrant *grant);
extern void DsyncLeaseSetReleased(DsyncRow *row);
extern void DsyncLeaseRelease(DsyncStore *store, DsyncRow *row);
extern DsyncRow *DsyncLeaseFindPlain(DsyncStore *store, text *lease);
extern bool DsyncQueueGrantNext(FunctionCallInfo fcinfo, text *lease);
extern bool DsyncSharedTryGrant(FunctionCallInfo fcinfo, text *lease, const LeaseGrant *grant,
								bool may_take, int64 *token, TimestampTz *retry_at);
extern bool DsyncLeaseTryGrant(FunctionCallInfo fcinfo, text *lease, const LeaseGrant *grant,
							   bool may_take, bool thorough, int64 *token,
							   TimestampTz *retry_at);
extern bool DsyncLeaseTryGrantEphemeral(FunctionCallInfo fcinfo, text *lease,
										const LeaseGrant *grant, bool may_take, int64 *token,
										bool *undone_at_abort, TimestampTz *retry_at);
typedef enum DsyncReleaseResult
{
	DSYNC_RELEASE_DONE,
	DSYNC_RELEASE_NOT_HELD,		/* not held by that grant (any more) */
	DSYNC_RELEASE_BUSY			/* a guard has it locked, and we were not to wait */
} DsyncReleaseResult;

extern DsyncReleaseResult DsyncLeasePassOn(const DsyncCatalog *catalog, text *lease,
										  text *holder, int64 token, TimestampTz granted_upto);
extern DsyncReleaseResult DsyncLeaseReleaseGrant(const DsyncCatalog *catalog, text *lease,
												 text *holder, int64 token, bool wait);

/* session.c: session leases, released when their backend ends */
extern void DsyncSessionNote(const DsyncCatalog *catalog, text *lease, text *holder,
							 int64 token, bool durable);
extern void DsyncSessionReleased(int64 token);
extern void DsyncSessionSweep(void);

/* permit.c: semaphore permits */
extern bool DsyncPermitTryAcquire(FunctionCallInfo fcinfo, text *name, const LeaseGrant *grant,
								  int permits, bool may_take, bool thorough,
								  int64 *token, TimestampTz *retry_at);
/* What DsyncPermitExtendHeld found. */
typedef enum DsyncHeld
{
	DSYNC_HELD_NOT,
	DSYNC_HELD_EXTENDED,
	DSYNC_HELD_BUSY,
	DSYNC_HELD_CHANGED
} DsyncHeld;

extern DsyncHeld DsyncPermitExtendHeld(DsyncStore *permits, DsyncStore *leases, text *name,
									   const LeaseGrant *grant, int32 from_slot,
									   DsyncRow **plain, int64 *token);
extern bool DsyncPermitRenew(DsyncStore *store, DsyncRow *row, const LeaseGrant *grant,
							 int64 *token, bool *retry);
extern DsyncRow *DsyncPermitFindHeld(DsyncStore *store, text *name, text *holder,
									 TimestampTz now);
extern void DsyncPermitFill(const DsyncCatalog *catalog, text *name, int permits);
extern void DsyncPermitDropFree(const DsyncCatalog *catalog, text *name);

/* semaphore.c: definitions */
extern int	DsyncSemaphorePermits(FunctionCallInfo fcinfo, text *name);
extern int	DsyncSemaphorePermitsFor(FunctionCallInfo fcinfo, text *name, bool for_grant);
extern int	DsyncSemaphoreCount(const DsyncCatalog *catalog, text *name, bool for_grant);
extern bool DsyncSemaphoresUnused(const DsyncCatalog *catalog);
extern bool DsyncSemaphoreDefinedDirty(const DsyncCatalog *catalog, text *name);

/* A look for a definition made under an LWLock (DsyncSemaphoreWatch*). */
typedef struct DsyncSemaphoreWatch
{
	bool		opened;			/* the look is ready */
	bool		unused;			/* the database had no definitions */
	uint64		generation;		/* the shared generation before it looked */
	DsyncStore	store;			/* dsync_semaphore, opened if !unused */
} DsyncSemaphoreWatch;

extern void DsyncSemaphoreWatchOpen(const DsyncCatalog *catalog, DsyncSemaphoreWatch *watch);
extern bool DsyncSemaphoreWatchDefined(DsyncSemaphoreWatch *watch, text *name, bool *changed);
extern void DsyncSemaphoreWatchClose(DsyncSemaphoreWatch *watch);

#endif							/* DSYNC_LEASE_H */
