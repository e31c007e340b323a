/*-------------------------------------------------------------------------
 *
 * ephemeral.h
 *		Ephemeral leases: held in shared memory only (ephemeral.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef DSYNC_EPHEMERAL_H
#define DSYNC_EPHEMERAL_H

#include "postgres.h"
#include "fmgr.h"
#include "nodes/pg_list.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"
#include "lease.h"

/* What a renew, release or guard of a name found among ephemeral leases. */
typedef enum DsyncEphemeralFound
{
	DSYNC_EPHEMERAL_NONE,		/* not an ephemeral lease now: ask the tables */
	DSYNC_EPHEMERAL_DONE,		/* held by the caller: done */
	DSYNC_EPHEMERAL_NOT_HELD	/* an ephemeral lease the caller does not hold */
} DsyncEphemeralFound;

/* One live ephemeral lease, as dsync_leases shows it. */
typedef struct DsyncEphemeralRow
{
	text	   *lease;
	text	   *holder;
	int64		fencing;
	TimestampTz acquired_at;
	TimestampTz renewed_at;
	TimestampTz expires_at;
	Interval	ttl;
	Jsonb	   *info;			/* NULL if none */
	Oid			owner;
} DsyncEphemeralRow;

extern Size DsyncEphemeralShmemSize(void);
extern void DsyncEphemeralShmemRequest(void);
extern void DsyncEphemeralShmemInit(void);
extern void DsyncEphemeralOpen(void);
extern void DsyncEphemeralForgetDatabase(Oid dbid);

extern void DsyncEphemeralCheckGrant(FunctionCallInfo fcinfo, text *lease,
									 const LeaseGrant *grant);
extern bool DsyncEphemeralTryAcquire(FunctionCallInfo fcinfo, text *lease,
									 const LeaseGrant *grant, bool may_take,
									 int64 *token, uint64 *fresh, TimestampTz *retry_at);
extern DsyncEphemeralFound DsyncEphemeralRenew(const DsyncCatalog *catalog, text *lease,
											   text *holder, Interval *ttl, int64 ttl_usec,
											   TimestampTz *expiry);
extern DsyncEphemeralFound DsyncEphemeralRelease(text *lease, text *holder, int64 *token);
extern bool DsyncEphemeralReleaseGrant(text *lease, text *holder, int64 token);
extern DsyncReleaseResult DsyncEphemeralPassOn(text *lease, text *holder, int64 token,
											   TimestampTz renewed_upto);
extern DsyncEphemeralFound DsyncEphemeralGuard(text *lease, text *holder, int64 *token);
extern DsyncEphemeralFound DsyncEphemeralLeader(text *lease, text **holder);
extern int64 DsyncEphemeralToken(text *lease);
extern int32 DsyncEphemeralForceRelease(text *lease, text *holder, bool cancel_waits);

extern bool DsyncEphemeralExclude(const DsyncCatalog *for_grant, text *lease,
								  TimestampTz *retry_at);
extern void DsyncEphemeralExcludeEnd(void);
extern void DsyncEphemeralSettle(text *lease);

extern void DsyncEphemeralSessionMove(text *lease, text *holder, int64 token);
extern void DsyncEphemeralRoleCount(Oid roleid, int64 *here, int64 *elsewhere);
extern void DsyncEphemeralRoleReassign(Oid roleid, Oid newrole);
extern void DsyncEphemeralRoleDrop(Oid roleid);

extern void DsyncEphemeralReap(void);
extern TimestampTz DsyncEphemeralDue(void);
extern void DsyncEphemeralLookSoon(void);
extern List *DsyncEphemeralRows(text *lease, text *holder);

/* ephbound.c: a grant of a lease with a bound fence, undone by a rollback */
extern void DsyncEphemeralUndoAtAbort(text *lease, uint64 generation);
extern bool DsyncEphemeralUndoNoted(uint64 generation);
extern void DsyncEphemeralUndoForget(uint64 generation);

/* ephemeral_record.c: the durable trace of ephemeral leases */
extern bool DsyncEphemeralRecordDue(const DsyncCatalog *catalog, TimestampTz now);
extern void DsyncEphemeralRecord(const DsyncCatalog *catalog);
extern bool DsyncEphemeralHoldback(const DsyncCatalog *catalog, TimestampTz open_at,
								   TimestampTz now, TimestampTz *until);
extern bool DsyncEphemeralHeldBack(const DsyncCatalog *catalog, TimestampTz *until);

#endif							/* DSYNC_EPHEMERAL_H */
