/*-------------------------------------------------------------------------
 *
 * queue.h
 *		Events and the per-database event queues, in a shared pool of
 *		chunks (queue.c).
 *
 * The event type lives here, below events/, because a queue is reset with
 * its database slot (dbslot.c) and holds events by value.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DSYNC_QUEUE_H
#define DSYNC_QUEUE_H

#include "postgres.h"
#include "nodes/pg_list.h"
#include "utils/timestamp.h"
#include "dbslot.h"

/*
 * An event as queued: recorded by a backend in a transaction (events.c),
 * queued at commit, sent by its database's worker.
 */
typedef enum DsyncEventKind
{
	DSYNC_EVENT_NONE = 0,		/* nothing to queue */
	DSYNC_EVENT_ACQUIRED = 1,
	DSYNC_EVENT_RELEASED,
	DSYNC_EVENT_EXPIRED,
	DSYNC_EVENT_DEADLINE,		/* not announced: a renewal shortened a lease */
	DSYNC_EVENT_JOINED,			/* name: group, holder: member */
	DSYNC_EVENT_LEFT,
	DSYNC_EVENT_MEMBER_EXPIRED, /* announced as "left" */
	DSYNC_EVENT_MEMBER_DEADLINE,	/* not announced: a refresh shortened it */
	DSYNC_EVENT_SET,			/* a one-to-one signal was stored */
	DSYNC_EVENT_PERMIT_ACQUIRED,	/* as ACQUIRED, for a semaphore permit */
	DSYNC_EVENT_PERMIT_DEADLINE,	/* as DEADLINE, for a semaphore permit */
	DSYNC_EVENT_PERMIT_RELEASED,	/* as RELEASED, for a semaphore permit */
	DSYNC_EVENT_RENEWED,		/* not announced or queued: counted only */
	DSYNC_EVENT_IDLE,			/* as RELEASED, not announced: nobody listened */
	DSYNC_EVENT_PERMIT_IDLE		/* as PERMIT_RELEASED, not announced */
} DsyncEventKind;

typedef struct DsyncEvent
{
	DsyncEventKind kind;
	int32		slot;
	int64		fencing;
	int64		seq;			/* reaper: assigned when first sent; 0 before */
	TimestampTz expires_at;		/* released: when it was released */
	char	   *name;
	char	   *holder;
} DsyncEvent;

/* queue.c: event queues in a shared pool of chunks */
extern Size DsyncQueueEntrySize(const DsyncEvent *event);
extern void DsyncQueuePoolInit(DsyncWorkerShared *shared, DsyncChunk *chunks, int nchunks);
extern int	DsyncQueueFreeChunks(void);
extern bool DsyncQueueAppend(DsyncEventLane *lane, const DsyncEvent *event);
extern void DsyncQueueLockAll(DsyncDbSlot *slot);
extern void DsyncQueueUnlockAll(DsyncDbSlot *slot);
extern void DsyncQueueReset(DsyncDbSlot *slot);
extern uint64 DsyncQueueBytes(DsyncDbSlot *slot, bool *dropped);
extern int	DsyncQueueDrain(DsyncDbSlot *slot, List **events, uint64 *dropped,
							uint64 *dropped_announced);

#endif							/* DSYNC_QUEUE_H */
