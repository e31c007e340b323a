/*-------------------------------------------------------------------------
 *
 * dbslot.h
 *		The table of database slots in shared memory, and the workers that
 *		serve them (dbslot.c; the state machine is written down there).
 *
 *-------------------------------------------------------------------------
 */
#ifndef DSYNC_DBSLOT_H
#define DSYNC_DBSLOT_H

#include "postgres.h"
#include "port/atomics.h"
#include "storage/lwlock.h"
#include "storage/spin.h"
#include "utils/timestamp.h"
#include "settings.h"
#include "stats.h"

/*
 * Background workers (launcher.c, reaper.c).  One slot per database that
 * has, or may have, the extension.  At most dsync.max_workers databases
 * have a worker (a "reaper") at a time; the launcher starts one where work
 * is due and, when all are busy, asks the least busy to make way (see the
 * state table in launcher.c).  Each slot has its database's queue of
 * committed events, made of chunks of a pool shared by all databases.
 */
typedef enum DsyncDbState
{
	DSYNC_DB_FREE = 0,			/* slot unused */
	DSYNC_DB_PROBE,				/* may have the extension: a worker must look */
	DSYNC_DB_ACTIVE,			/* has the extension: a worker runs when work is due */
	DSYNC_DB_ABSENT				/* has no extension: no worker */
} DsyncDbState;

/* Workers that served a database lately, to tell their notifications. */
#define DSYNC_SENDER_HISTORY	16

typedef struct DsyncSender
{
	int			pid;
	TimestampTz until;			/* 0 while it serves */
} DsyncSender;

/*
 * A lane of a database's event queue: a list of pool chunks under a lock
 * of its own.  Events someone hears all go to lane 0, in the order their
 * backends take its lock; the rest, which only the worker reads
 * (deadlines and released rows, whose order does not matter: the worker
 * keeps the earliest deadline of each), go to the committing backend's
 * lane, so that backends committing while nobody listens do not all take
 * one lock (the uncontended cycle's one shared exclusive lock).
 */
#define DSYNC_EVENT_LANES		4

/* A cache line each, where the compiler can: lanes' writers apart. */
#if defined(pg_attribute_aligned)
#define DSYNC_LANE_ALIGNED	pg_attribute_aligned(PG_CACHE_LINE_SIZE)
#else
#define DSYNC_LANE_ALIGNED
#endif

typedef struct DSYNC_LANE_ALIGNED DsyncEventLane
{
	LWLock	   *lock;
	int			first;			/* chunk read next, -1 if empty */
	int			last;			/* chunk written next, -1 if empty */
	uint32		read;			/* offset of the next entry in first */
	uint64		bytes;			/* bytes queued */
	uint64		dropped;		/* events lost because the pool was full */
	uint64		dropped_announced;	/* of those, events for listeners */
} DsyncEventLane;

typedef struct DsyncDbSlot
{
	/* Protected by DsyncWorkerShared.lock. */
	Oid			dbid;
	DsyncDbState state;
	int			pid;			/* its worker, 0 if none, -1 while starting */
	int			pgprocno;		/* the worker's PGPROC, for its latch */
	int			held_by;		/* pid of a backend that needs the database alone */
	TimestampTz restart_after;	/* no worker before this time */
	TimestampTz serving_since;	/* when its worker started serving */
	bool		settled;		/* its worker has done a first pass */
	TimestampTz wanted_since;	/* probe asked for, or first event queued unserved */
	bool		start_warned;	/* launcher: said it could not start one */
	DsyncSender senders[DSYNC_SENDER_HISTORY];	/* newest first */
	TransactionId reaper_xid;	/* the worker's clearing transaction, if any */

	pg_atomic_uint32 recheck;	/* the extension may have been dropped */
	pg_atomic_uint32 yield;		/* launcher: let another database have the worker */
	pg_atomic_uint32 wanted;	/* events are queued and no worker runs */

	/* The next deadline of the database (0: none known). */
	pg_atomic_uint64 next_deadline;

	/*
	 * When an ephemeral lease of the database may next be due (0: none):
	 * lowered by grants under their partition lock, set exactly by the
	 * reaper under all of them (ephemeral.c).  No event carries it, so
	 * that ephemeral leases nobody listens to never touch the queue.
	 */
	pg_atomic_uint64 ephemeral_deadline;
	pg_atomic_uint64 queued_grants;	/* grants to queued waiters so far (wait/queued.c) */

	/*
	 * When a watcher last left (0: never): for dsync.event_retention after
	 * that, the database's events are sent and logged though nobody
	 * listens, as the watcher may be reconnecting (events.c,
	 * DsyncEventsHeard).  Raised by a listener leaving, and set by a worker
	 * that starts, from when the log was last in use.
	 */
	pg_atomic_uint64 watcher_left_at;
	uint64		left_placeholder;	/* what a new slot set it to, for its worker */

	/* Its worker has read dsync_lease into the held map (heldmap.c). */
	pg_atomic_uint32 held_map_ready;

	/* Its worker has read dsync_fence into the bound map (boundmap.c). */
	pg_atomic_uint32 bound_map_ready;

	/*
	 * A TimestampTz (it may go below 0): every durable holder of the
	 * database whose expiry is at or before it has been cleared, its
	 * "expired" queued, unless a transaction still pins its name's bucket
	 * of the held map.  Raised by the worker after a pass, lowered by a
	 * transaction that leaves such a holder behind (heldmap.c).
	 */
	pg_atomic_uint64 reaped_until;

	/*
	 * Event queue, in lanes.  dbid changes only under every lane's lock
	 * too (DsyncQueueLockAll), so that no event lands in another
	 * database's queue; a state that stops the queue is set first, then
	 * the queue reset under every lane's lock.
	 */
	DsyncEventLane lanes[DSYNC_EVENT_LANES];

	pg_atomic_uint64 counters[DSYNC_NUM_COUNTERS];
} DsyncDbSlot;

/* The event queues' shared pool of chunks. */
#define DSYNC_CHUNK_SIZE		8192
#define DSYNC_CHUNK_DATA		(DSYNC_CHUNK_SIZE - 8)

typedef struct DsyncChunk
{
	int32		next;			/* the next chunk of its queue, or -1 */
	uint32		used;			/* bytes of data written */
	char		data[DSYNC_CHUNK_DATA];
} DsyncChunk;

typedef struct DsyncWorkerShared
{
	LWLock	   *lock;			/* protects the slots (not their queues) */
	int			launcher_pid;
	int			launcher_pgprocno;
	bool		rescan;			/* launcher: look for new databases */
	int			nslots;

	/* The chunk pool: a free list under its own spinlock. */
	slock_t		pool_lock;
	int			pool_free;		/* first free chunk, -1 if none */
	int			pool_nfree;
	int			pool_size;		/* chunks in all */
	DsyncChunk *chunks;

	DsyncDbSlot slots[FLEXIBLE_ARRAY_MEMBER];
} DsyncWorkerShared;

/* Workers for databases: dsync.max_workers counts the launcher too. */
#define DSYNC_DB_WORKERS		(dsync_max_workers - 1)

extern DsyncDbSlot *DsyncDbSlotLookup(Oid dbid);
extern DsyncDbSlot *DsyncDbSlotAllocate(Oid dbid, bool reuse_absent);
extern DsyncDbSlot *DsyncDbSlotFind(Oid dbid);
extern bool DsyncDbIsTemplate(Oid dbid);
extern bool DsyncDbSlotAvailable(Oid dbid);
extern DsyncDbSlot *DsyncDbSlotClaim(Oid dbid, bool has_extension);
extern void DsyncDbSlotWant(DsyncDbSlot *slot);
extern void DsyncDbSlotSenderBegin(DsyncDbSlot *slot, int pid);
extern void DsyncDbSlotSenderEnd(DsyncDbSlot *slot, int pid);
extern const char *DsyncDbStateName(DsyncDbState state);
extern void DsyncLauncherWake(void);
extern void DsyncDbSlotWarnFull(bool in_commit);

extern PGDLLIMPORT DsyncWorkerShared *dsync_workers;

/* stats.c: counting */
extern void DsyncStatAdd(DsyncCounter counter, int64 delta);
extern void DsyncStatAddSlot(DsyncDbSlot *slot, DsyncCounter counter, int64 delta);

#endif							/* DSYNC_DBSLOT_H */
