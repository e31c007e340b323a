/*-------------------------------------------------------------------------
 *
 * queued_int.h
 *		What queued.c, queuedgrant.c and queuedpoke.c share, and nothing
 *		else uses: the shared tables of queued waiters (queued.c's header
 *		says how they are laid out and why).
 *
 *-------------------------------------------------------------------------
 */
#ifndef DSYNC_QUEUED_INT_H
#define DSYNC_QUEUED_INT_H

#include "postgres.h"
#include "lib/ilist.h"
#include "port/atomics.h"
#include "storage/lwlock.h"
#include "utils/hsearch.h"
#include "queued.h"
#include "shmem.h"

typedef struct QueuedNameTag
{
	Oid			dbid;
	uint32		pad;			/* zero: hashed as bytes */
	uint64		key;
} QueuedNameTag;

typedef struct QueuedName
{
	QueuedNameTag tag;
	dlist_head	waiters;		/* QueuedEntry, ticket order */
} QueuedName;

typedef struct QueuedTag
{
	Oid			dbid;
	uint32		pad;
	uint64		key;
	uint64		holder_key;
} QueuedTag;

typedef struct QueuedEntry
{
	QueuedTag	tag;
	dlist_node	node;			/* in its name's waiters */
	dlist_node	granted_node;	/* in granted, while GRANTED */
	DsyncQueuedWaiter w;
} QueuedEntry;

typedef struct QueuedControl
{
	LWLock	   *lock;
	dlist_head	granted;		/* GRANTED and PASSING entries */
	pg_atomic_uint32 ngranted;	/* how many: none, no lookup on renewals */
	TimestampTz full_swept_at;	/* last sweep for room (under the lock) */
	pg_atomic_uint32 waiting[DSYNC_WAKE_CHANNELS];	/* WAITING entries */
	/* Per database slot, a bit per channel: its worker must look there. */
	pg_atomic_uint64 poked[FLEXIBLE_ARRAY_MEMBER];
} QueuedControl;

#define POKE_WORDS	(DSYNC_WAKE_CHANNELS / 64)

/* A full table is swept for lapsed places at most this often. */
#define QUEUED_FULL_SWEEP_USEC	(100 * 1000)

extern PGDLLIMPORT QueuedControl *queued_control;
extern PGDLLIMPORT HTAB *queued_names;
extern PGDLLIMPORT HTAB *queued_entries;

/*
 * QueuedChannel
 *		The wake channel of a key.
 */
static inline int
QueuedChannel(uint64 key)
{
	return (int) (key % DSYNC_WAKE_CHANNELS);
}

extern void QueuedMakeTag(QueuedTag *tag, QueuedNameTag *name_tag, uint64 key,
						  const char *holder, size_t holder_len);
extern QueuedEntry *QueuedFind(text *name, text *holder, uint64 key);
extern void QueuedUnlink(QueuedEntry *entry);
extern void QueuedDropNameIfEmpty(uint64 key, Oid dbid);
extern void QueuedRemove(QueuedEntry *entry);
extern int	QueuedSweepLocked(TimestampTz now, Oid dbid);
extern QueuedEntry *QueuedHead(uint64 key, bool exclusive, TimestampTz now);
extern QueuedEntry *QueuedEntryOf(const DsyncQueuedWaiter *waiter);
extern bool QueuedSettledGrantOf(QueuedEntry *entry);
extern void QueuedWorkerBy(TimestampTz t);
extern void QueuedNoteGrantedNow(int channel);
extern void QueuedPokeNow(int channel);
extern void DsyncQueuedTakeUp(QueuedEntry *entry);

#endif							/* DSYNC_QUEUED_INT_H */
