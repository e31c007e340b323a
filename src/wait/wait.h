/*-------------------------------------------------------------------------
 *
 * wait.h
 *		Waiting in the server: queues per name, sleeping, waking (wait.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef DSYNC_WAIT_H
#define DSYNC_WAIT_H

#include "postgres.h"
#include "args.h"
#include "port/atomics.h"
#include "utils/timestamp.h"

/*
 * Wake-up channels: lease names hash onto them, so two names may share one;
 * wakers broadcast and sleepers re-check.  A sleeper never sleeps longer
 * than DSYNC_WAIT_CAP_MS at a time.
 */
#define DSYNC_WAKE_CHANNELS		1024
#define DSYNC_WAIT_CAP_MS		5000

/* Queues per channel whose first waiters a wake-up finds (else: wake all). */
#define DSYNC_WAKE_MAX_KEYS		16

/* A backend blocked in a dsync wait (one slot per PGPROC). */
typedef struct DsyncWaiterSlot
{
	bool		in_use;
	bool		evicted;		/* dsync_force_release ended this wait */
	int			pid;
	Oid			dbid;
	Oid			roleid;			/* signals queue per role; InvalidOid for leases */
	Oid			userid;			/* the role that waits */
	uint64		key;			/* DsyncWaitKey of the name */
	uint64		ticket;			/* queue position: lower goes first */
	TimestampTz since;
	pg_atomic_uint64 sleep_until;	/* when a sleeping waiter wakes by itself */
	char		kind[16];
	char		name[DSYNC_NAME_MAX_BYTES + 1];
	char		holder[DSYNC_NAME_MAX_BYTES + 1];
} DsyncWaiterSlot;

extern uint64 DsyncWaitKey(text *name);
extern uint64 DsyncWaitKeySignal(text *name);
extern void DsyncWakeAtEnd(uint64 key);
extern void DsyncWakeDatabaseAtEnd(void);
extern void DsyncWakeNow(uint64 key);
extern void DsyncWakeDatabaseNow(void);
extern bool DsyncWaitMayTake(uint64 key, Oid roleid);
extern void DsyncWaitEvict(uint64 key, Oid owner);
extern void DsyncWaitGrantExcludes(text *lease, int64 ttl_usec);
extern void DsyncXactChanged(void);

/*
 * One try of a blocked caller, made in an internal subtransaction that is
 * kept if it returns true and rolled back otherwise.  may_take: nobody is
 * ahead in the queue.  thorough: the last sleep ran its full length
 * without a wake-up, so look harder (semaphores: take over an expired
 * permit the reaper has not cleared).  *retry_at: when to look again by
 * itself (0: only when woken).
 */
typedef bool (*DsyncTryFunc) (void *arg, bool may_take, bool thorough,
							  TimestampTz *retry_at);

/*
 * A try's *retry_at that ends the wait at once, not granted: what blocks
 * the caller now is another name, whose queue it must join instead.
 */
#define DSYNC_WAIT_ELSEWHERE	DT_NOBEGIN

typedef struct DsyncWaitSpec
{
	uint64		key;			/* DsyncWaitKey or DsyncWaitKeySignal */
	Oid			roleid;			/* queue per role (signals), or InvalidOid */
	const char *kind;			/* for dsync_waiters */
	text	   *name;
	text	   *holder;
	bool		forever;
	TimestampTz deadline;		/* unless forever */
	DsyncTryFunc try_fn;
	void	   *arg;
} DsyncWaitSpec;

extern bool DsyncWaitFor(const DsyncWaitSpec *spec);
extern bool DsyncWaitTryOnce(const DsyncWaitSpec *spec, bool may_take);

#endif							/* DSYNC_WAIT_H */
