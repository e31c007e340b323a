/*-------------------------------------------------------------------------
 *
 * dsync.h
 *		Declarations shared by the dsync modules.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DSYNC_H
#define DSYNC_H

#include "postgres.h"

#include "access/tableam.h"
#include "fmgr.h"
#include "port/atomics.h"
#include "storage/condition_variable.h"
#include "storage/lwlock.h"
#include "storage/spin.h"
#include "utils/relcache.h"
#include "utils/timestamp.h"

/* Names (lease, holder, group, event) are at most this many bytes. */
#define DSYNC_NAME_MAX_BYTES	255

/* Columns of dsync_lease, in table order (1-based attribute numbers). */
#define Anum_lease_name			1
#define Anum_lease_slot			2
#define Anum_lease_holder		3
#define Anum_lease_fencing		4
#define Anum_lease_acquired_at	5
#define Anum_lease_renewed_at	6
#define Anum_lease_expires_at	7
#define Anum_lease_ttl			8
#define Anum_lease_info			9
#define Anum_lease_owner		10
#define Natts_lease				10

/* dsync_semaphore (1.1): one row per semaphore definition. */
#define Anum_semaphore_name		1
#define Anum_semaphore_permits	2
#define Anum_semaphore_created_at 3
#define Anum_semaphore_owner	4
#define Natts_semaphore			4

/* dsync_signal (1.1): one row per pending one-to-one signal. */
#define Anum_signal_name		1
#define Anum_signal_seq			2
#define Anum_signal_set_at		3
#define Anum_signal_owner		4
#define Natts_signal			4

/* dsync_member (1.1): one row per live group member. */
#define Anum_member_grp			1
#define Anum_member_member		2
#define Anum_member_info		3
#define Anum_member_joined_at	4
#define Anum_member_renewed_at	5
#define Anum_member_expires_at	6
#define Anum_member_ttl			7
#define Anum_member_owner		8
#define Natts_member			8

/* The widest dsync table; a DsyncLeaseRow can hold a row of any of them. */
#define DSYNC_MAX_ATTS			Natts_lease

/* Most permits a semaphore may have. */
#define DSYNC_MAX_PERMITS		65535

/*
 * Wake-up channels: lease names hash onto them, so two names may share one;
 * wakers broadcast and sleepers re-check.  A sleeper never sleeps longer
 * than DSYNC_WAIT_CAP_MS at a time.
 */
#define DSYNC_WAKE_CHANNELS		1024
#define DSYNC_WAIT_CAP_MS		5000

/* Names per channel whose first waiters a wake-up finds (else: wake all). */
#define DSYNC_WAKE_MAX_KEYS		16

/* A backend blocked in a dsync wait (one slot per PGPROC). */
typedef struct DsyncWaiterSlot
{
	bool		in_use;
	int			pid;
	Oid			dbid;
	uint64		key;			/* DsyncWaitKey of the name */
	uint64		ticket;			/* queue position: lower goes first */
	TimestampTz since;
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
	pg_atomic_uint32 waiting[DSYNC_WAKE_CHANNELS];	/* waiters per channel */
	pg_atomic_uint64 wakes[DSYNC_WAKE_CHANNELS];	/* broadcasts so far */
	slock_t		fencing_lock;	/* protects fencing[] */
	int			fencing_victim; /* next slot to reuse when all are taken */
	DsyncFencingBlock fencing[DSYNC_FENCING_SLOTS];
	DsyncWaiterSlot slots[FLEXIBLE_ARRAY_MEMBER];
} DsyncShared;

/*
 * Background workers (launcher.c, reaper.c).  One slot per database that
 * has, or may have, the extension; each slot also carries that database's
 * event queue, which committing backends append to and its reaper drains.
 */
typedef enum DsyncDbState
{
	DSYNC_DB_FREE = 0,			/* slot unused */
	DSYNC_DB_PROBE,				/* may have the extension: start a reaper to see */
	DSYNC_DB_ACTIVE,			/* has the extension: keep a reaper running */
	DSYNC_DB_ABSENT				/* has no extension: no reaper */
} DsyncDbState;

typedef struct DsyncDbSlot
{
	/* Protected by DsyncWorkerShared.lock. */
	Oid			dbid;
	DsyncDbState state;
	int			pid;			/* its reaper, 0 if none */
	int			pgprocno;		/* the reaper's PGPROC, for its latch */
	int			held_by;		/* pid of a backend that needs the database alone */
	TimestampTz restart_after;	/* no reaper before this time */
	pg_atomic_uint32 recheck;	/* the extension may have been dropped */
	bool		start_warned;	/* launcher: said it could not start one */
	TransactionId reaper_xid;	/* the reaper's clearing transaction, if any */

	/* The next lease deadline the reaper knows of (0: none). */
	pg_atomic_uint64 next_deadline;

	/* Event queue, protected by queue_lock; offsets grow forever. */
	LWLock	   *queue_lock;
	uint64		queue_head;		/* where the next event is written */
	uint64		queue_tail;		/* the oldest event not yet read */
	uint64		queue_dropped;	/* events lost because the queue was full */
	char	   *queue;			/* dsync_event_queue_size bytes */
} DsyncDbSlot;

typedef struct DsyncWorkerShared
{
	LWLock	   *lock;			/* protects the slots (not their queues) */
	int			launcher_pid;
	int			launcher_pgprocno;
	bool		rescan;			/* launcher: look for new databases */
	int			nslots;
	DsyncDbSlot slots[FLEXIBLE_ARRAY_MEMBER];
} DsyncWorkerShared;

/* dsync.c: settings */
extern int	dsync_max_databases;
extern int	dsync_event_queue_size;
extern int	dsync_reap_batch_size;
extern int	dsync_restart_delay;
extern bool dsync_events;

/* shmem.c */
extern PGDLLIMPORT DsyncShared *dsync_shared;
extern PGDLLIMPORT DsyncWorkerShared *dsync_workers;
extern void DsyncShmemInit(void);

/* launcher.c */
extern void DsyncLauncherRegister(void);
extern void DsyncLifecycleInit(void);
extern DsyncDbSlot *DsyncDbSlotFind(Oid dbid);
extern void DsyncLauncherWake(void);
extern void DsyncLauncherRequestProbe(Oid dbid);
extern PGDLLEXPORT void dsync_launcher_main(Datum arg);

/* reaper.c */
extern PGDLLEXPORT void dsync_reaper_main(Datum arg);


/* wait.c */
extern uint64 DsyncWaitKey(text *name);
extern uint64 DsyncWaitKeyEvent(text *name);
extern void DsyncWakeAtEnd(uint64 key);
extern void DsyncWaitAttemptStart(void);
extern void DsyncWaitAttemptEnd(uint64 key, bool granted);
extern bool DsyncWaitMayTake(uint64 key);
extern void DsyncWaitEnqueue(uint64 key, const char *kind, text *name, text *holder);
extern void DsyncWaitDequeue(void);
extern uint64 DsyncWaitGeneration(uint64 key);
extern void DsyncWaitSleep(uint64 key, TimestampTz wake_at, uint64 generation);

/* catalog.c: where the extension's objects are in this database */
typedef enum DsyncTable
{
	DSYNC_TABLE_LEASE = 0,
	DSYNC_TABLE_SEMAPHORE,
	DSYNC_TABLE_SIGNAL,
	DSYNC_TABLE_MEMBER,
	DSYNC_NUM_TABLES
} DsyncTable;

typedef struct DsyncCatalog
{
	Oid			namespace;
	Oid			rels[DSYNC_NUM_TABLES];		/* InvalidOid: not installed (1.0) */
	Oid			pkeys[DSYNC_NUM_TABLES];
	Oid			fencing_seq;
	Oid			signal_seq;
} DsyncCatalog;

extern const DsyncCatalog *DsyncCatalogGet(FunctionCallInfo fcinfo);
extern const DsyncCatalog *DsyncCatalogFromExtension(void);

/* args.c: argument checks shared by every SQL-callable function */
extern text *DsyncArgName(FunctionCallInfo fcinfo, int argno, const char *argname);
extern text *DsyncArgNameOrNull(FunctionCallInfo fcinfo, int argno, const char *argname);
extern bool DsyncIntervalUsec(const Interval *iv, int64 *result);
extern int64 DsyncArgTtl(FunctionCallInfo fcinfo, int argno, const char *argname,
						 bool null_ok, Interval **ttl_out);
extern void DsyncArgWait(FunctionCallInfo fcinfo, int argno, const char *argname,
						 bool *forever, int64 *wait_usec);
extern TimestampTz DsyncExpiry(TimestampTz now, int64 ttl_usec, const char *argname);
extern void DsyncPreventWrite(const char *funcname);

/* store.c: direct access to the dsync_lease table */
typedef struct DsyncLeaseRow
{
	ItemPointerData tid;		/* the row version this was read from */
	Datum		values[DSYNC_MAX_ATTS];
	bool		nulls[DSYNC_MAX_ATTS];
} DsyncLeaseRow;

typedef struct DsyncStore
{
	const DsyncCatalog *catalog;
	DsyncTable	table;
	Relation	rel;
	Relation	index;
	LOCKMODE	lockmode;
} DsyncStore;

extern void DsyncStoreOpen(DsyncStore *store, FunctionCallInfo fcinfo, bool for_write);
extern void DsyncStoreOpenTable(DsyncStore *store, FunctionCallInfo fcinfo,
								DsyncTable table, bool for_write);
extern DsyncLeaseRow *DsyncStoreNewRow(void);
extern bool DsyncStoreInsertLock(DsyncTable table, text *name, int32 slot, bool wait);
extern void DsyncStoreClose(DsyncStore *store);
extern List *DsyncStoreScan(DsyncStore *store, text *name);
extern List *DsyncStoreScanAll(DsyncStore *store);
extern TM_Result DsyncStoreLock(DsyncStore *store, DsyncLeaseRow *row,
								LockTupleMode mode, LockWaitPolicy policy);
extern void DsyncStoreUpdate(DsyncStore *store, DsyncLeaseRow *row);
extern void DsyncStoreInsert(DsyncStore *store, DsyncLeaseRow *row);
extern void DsyncStoreDelete(DsyncStore *store, DsyncLeaseRow *row);
extern void DsyncStoreOpenCatalog(DsyncStore *store, const DsyncCatalog *catalog,
								  DsyncTable table, bool for_write);


/* Row helpers. */
extern bool DsyncRowIsLive(const DsyncLeaseRow *row, TimestampTz now);
extern bool DsyncRowHolderIs(const DsyncLeaseRow *row, text *holder);
extern bool DsyncTextEquals(text *a, text *b);
extern bool DsyncRowOwnerIsCaller(const DsyncLeaseRow *row);

/* semaphore.c */
extern int	DsyncSemaphorePermits(FunctionCallInfo fcinfo, text *name);
extern int	DsyncSemaphorePermitsFor(FunctionCallInfo fcinfo, text *name, bool for_grant);

/* lease.c */
extern text *DsyncLeaseLeader(FunctionCallInfo fcinfo, text *lease);

/* fencing.c */
extern int64 DsyncNextFencingToken(const DsyncCatalog *catalog);

/* events.c: lease events recorded during a transaction, queued at commit */
typedef enum DsyncEventKind
{
	DSYNC_EVENT_ACQUIRED = 1,
	DSYNC_EVENT_RELEASED,
	DSYNC_EVENT_EXPIRED,
	DSYNC_EVENT_DEADLINE,		/* not announced: a renewal shortened a lease */
	DSYNC_EVENT_JOINED,			/* name: group, holder: member */
	DSYNC_EVENT_LEFT,
	DSYNC_EVENT_MEMBER_EXPIRED, /* announced as "left" */
	DSYNC_EVENT_MEMBER_DEADLINE,	/* not announced: a refresh shortened it */
	DSYNC_EVENT_SET				/* a one-to-one signal was stored */
} DsyncEventKind;

typedef struct DsyncEvent
{
	DsyncEventKind kind;
	int32		slot;
	int64		fencing;
	TimestampTz expires_at;
	char	   *name;
	char	   *holder;
} DsyncEvent;

extern void DsyncEventRecord(DsyncEventKind kind, const DsyncLeaseRow *row);
extern void DsyncEventRecordRaw(DsyncEventKind kind, text *name, text *holder,
								TimestampTz expires_at);
extern int	DsyncEventDrain(DsyncDbSlot *slot, List **events, uint64 *dropped);
extern char *DsyncEventPayload(const DsyncEvent *event);
extern bool DsyncEventHasDeadline(DsyncEventKind kind);
extern bool DsyncEventIsAnnounced(DsyncEventKind kind);
extern const char *DsyncEventChannel(const char *name);
extern void DsyncDeadlineLower(DsyncDbSlot *slot, TimestampTz deadline);

#endif							/* DSYNC_H */
