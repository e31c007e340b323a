/*-------------------------------------------------------------------------
 *
 * wait.h
 *		Waiting in the server: queues per name, sleeping, waking (wait.c,
 *		waitqueue.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef DSYNC_WAIT_H
#define DSYNC_WAIT_H

#include "postgres.h"
#include "args.h"
#include "shmem.h"
#include "port/atomics.h"
#include "utils/timestamp.h"

/* A sleeper never sleeps longer than this at a time. */
#define DSYNC_WAIT_CAP_MS		5000

/* Queues per channel whose first waiters a wake-up finds (else: wake all). */
#define DSYNC_WAKE_MAX_KEYS		16

/*
 * Called when DROP EXTENSION commits, before the database's waiters are
 * woken: the layers above (ephemeral leases) forget the database.  A hook,
 * set once by _PG_init, so that waiting calls nothing above it; the order
 * (forget, then wake) is why it is not a second release callback.
 */
typedef void (*DsyncDatabaseGoneHook) (Oid dbid);
extern PGDLLIMPORT DsyncDatabaseGoneHook dsync_database_gone_hook;

extern uint64 DsyncWaitKey(text *name);
extern uint64 DsyncWaitKeyBytes(const char *name, int len);
extern uint64 DsyncWaitKeySignal(text *name);
extern void DsyncWakeAtEnd(uint64 key);
extern void DsyncWakeDatabaseAtEnd(void);
extern void DsyncWakeNow(uint64 key);
extern void DsyncWakeDatabaseNow(void);
extern bool DsyncWaitMayTake(uint64 key, Oid roleid);
extern void DsyncWaitEvict(uint64 key, Oid owner);
extern void DsyncWaitGrantExcludes(text *lease, int64 ttl_usec);
extern bool DsyncWaitInAttempt(void);
extern bool DsyncWaitAttemptMayWait(TimestampTz *deadline);
extern void DsyncWaitAttemptLockTimeout(bool armed);
extern void DsyncWaitStepAside(bool aside);
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
