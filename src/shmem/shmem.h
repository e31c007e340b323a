/*-------------------------------------------------------------------------
 *
 * shmem.h
 *		dsync's shared memory: waiter slots, fencing blocks (shmem.c).
 *
 * The types stored in the segments are declared here, with their layout;
 * wait/ and storage/ use them.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DSYNC_SHMEM_H
#define DSYNC_SHMEM_H

#include "postgres.h"
#include "datatype/timestamp.h"
#include "port/atomics.h"
#include "storage/lwlock.h"
#include "storage/spin.h"
#include "args.h"

/*
 * dsync's LWLock tranches, as pg_stat_activity.wait_event names them: the
 * waiter slots and queue (DsyncShared.lock), the database slots
 * (DsyncWorkerShared.lock), and each database's event queue (one lock per
 * slot).  The ephemeral leases have "dsync ephemeral" (leases/).
 */
#define DSYNC_TRANCHE_WAIT_QUEUE	"dsync wait queue"
#define DSYNC_TRANCHE_WORKERS		"dsync workers"
#define DSYNC_TRANCHE_EVENT_QUEUE	"dsync event queue"
#define DSYNC_TRANCHE_QUEUED		"dsync queued waiters"

/*
 * Wake-up channels: lease names hash onto them, so two names may share one;
 * wakers broadcast and sleepers re-check (wait/wait.c).
 */
#define DSYNC_WAKE_CHANNELS		1024

/* A backend blocked in a dsync wait (one slot per PGPROC). */
typedef struct DsyncWaiterSlot
{
	bool		in_use;
	bool		evicted;		/* dsync_force_release ended this wait */
	bool		aside;			/* waiting for a lock, out of the queue's way */
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

/*
 * A block of fencing tokens reserved from one database's sequence and
 * handed out in order from shared memory (fencing.c).
 */
#define DSYNC_FENCING_SLOTS		64

typedef struct DsyncFencingBlock
{
	Oid			dbid;
	Oid			seqrelid;
	uint64		generation;		/* bumped whenever the slot changes hands */
	int64		next;			/* next token to hand out */
	int64		limit;			/* first token past the block */
} DsyncFencingBlock;


typedef struct DsyncShared
{
	LWLock	   *lock;			/* protects slots */
	int			nslots;
	pg_atomic_uint64 next_ticket;
	pg_atomic_uint64 semaphore_generation;	/* semaphore.c: definitions and permit rows made */
	TimestampTz session_epoch;	/* session.c: when shared memory was made */
	pg_atomic_uint32 waiting[DSYNC_WAKE_CHANNELS];	/* waiters per channel */
	pg_atomic_uint64 wakes[DSYNC_WAKE_CHANNELS];	/* broadcasts so far */
	slock_t		fencing_lock;	/* protects fencing[] */
	int			fencing_victim; /* next slot to reuse when all are taken */
	DsyncFencingBlock fencing[DSYNC_FENCING_SLOTS];
	DsyncWaiterSlot slots[FLEXIBLE_ARRAY_MEMBER];
} DsyncShared;

extern PGDLLIMPORT DsyncShared *dsync_shared;
extern void DsyncCoreShmemRequest(void);
extern void DsyncCoreShmemAttach(void);

#endif							/* DSYNC_SHMEM_H */
