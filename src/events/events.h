/*-------------------------------------------------------------------------
 *
 * events.h
 *		Lease, membership and signal events: recorded in a transaction,
 *		queued at commit, sent by the workers (events.c, queue.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef DSYNC_EVENTS_H
#define DSYNC_EVENTS_H

#include "postgres.h"
#include "lib/stringinfo.h"
#include "nodes/nodes.h"
#include "utils/timestamp.h"
#include "dbslot.h"
#include "store.h"

/* events.c: lease events recorded during a transaction, queued at commit */
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

extern void DsyncEventRecord(DsyncEventKind kind, const DsyncRow *row);
extern void DsyncEventRecordRaw(DsyncEventKind kind, text *name, text *holder,
								TimestampTz expires_at);
extern void DsyncEventRecordRenewal(void);
extern void DsyncEventPrepareNow(void);
extern void DsyncEventPublishNow(const DsyncEvent *events, int nevents, int64 renewals);
extern char *DsyncEventPayload(const DsyncEvent *event);
extern bool DsyncEventHasDeadline(DsyncEventKind kind);
extern bool DsyncEventIsAnnounced(DsyncEventKind kind);
extern bool DsyncEventIsRelease(DsyncEventKind kind);
extern const char *DsyncEventChannel(const char *name);
extern bool DsyncIsEventChannel(const char *channel);
extern bool DsyncTimeLower(pg_atomic_uint64 *value, TimestampTz t, TimestampTz *result);
extern bool DsyncDeadlineLower(DsyncDbSlot *slot, TimestampTz deadline);
extern void DsyncEventTimestamp(StringInfo buf, TimestampTz ts);

/* eventlog.c: the retained event log */
extern void DsyncEventLogAppend(List *events);
extern void DsyncEventLogResume(void);
extern void DsyncEventWatcherLeft(Oid dbid, TimestampTz left_at);

/* queue.c: event queues in a shared pool of chunks */
extern Size DsyncQueueEntrySize(const DsyncEvent *event);
extern void DsyncQueuePoolInit(DsyncWorkerShared *shared, DsyncChunk *chunks, int nchunks);
extern int	DsyncQueueFreeChunks(void);
extern bool DsyncQueueAppend(DsyncDbSlot *slot, const DsyncEvent *event);
extern void DsyncQueueReset(DsyncDbSlot *slot);
extern int	DsyncQueueDrain(DsyncDbSlot *slot, List **events, uint64 *dropped,
							uint64 *dropped_announced);

/* listen.c */
extern Size DsyncListenShmemSize(void);
extern void DsyncListenShmemInit(void);
extern void DsyncListenUtility(Node *parsetree);
extern bool DsyncListenersIn(Oid dbid);

#endif							/* DSYNC_EVENTS_H */
