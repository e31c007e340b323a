/*-------------------------------------------------------------------------
 *
 * shmem.h
 *		dsync's shared memory: waiter slots, fencing blocks (shmem.c).
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
#include "wait.h"
#include "fencing.h"

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
extern void DsyncShmemInit(void);

#endif							/* DSYNC_SHMEM_H */
