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
#include "queue.h"
#include "store.h"

/* events.c: lease events recorded during a transaction, queued at commit */
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
extern const char *DsyncQueueChannel(const char *name);
extern bool DsyncIsEventChannel(const char *channel);
extern bool DsyncTimeLower(pg_atomic_uint64 *value, TimestampTz t, TimestampTz *result);
extern bool DsyncDeadlineLower(DsyncDbSlot *slot, TimestampTz deadline);
extern void DsyncEventTimestamp(StringInfo buf, TimestampTz ts);

/* eventlog.c: the retained event log */
extern void DsyncEventLogAppend(List *events);
extern void DsyncEventLogResume(void);
extern void DsyncEventWatcherLeft(Oid dbid, TimestampTz left_at);

/* listen.c */
extern Size DsyncListenShmemSize(void);
extern void DsyncListenShmemInit(void);
extern void DsyncListenUtility(Node *parsetree);
extern bool DsyncListenersIn(Oid dbid);

#endif							/* DSYNC_EVENTS_H */
