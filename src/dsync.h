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

#include "compat.h"

/* Names (lease, holder, group, event) are at most this many bytes. */
#define DSYNC_NAME_MAX_BYTES	255

/*
 * Columns of dsync_lease (plain leases) and dsync_permit (semaphore
 * permits), which have the same columns, in table order (1-based).
 */
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

/* dsync_member (1.1): one row per group member. */
#define Anum_member_grp			1
#define Anum_member_member		2
#define Anum_member_info		3
#define Anum_member_joined_at	4
#define Anum_member_renewed_at	5
#define Anum_member_expires_at	6
#define Anum_member_ttl			7
#define Anum_member_owner		8
#define Natts_member			8

/* The widest dsync table; a DsyncRow can hold a row of any of them. */
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
 * Counters of one database since server start (or dsync_stats_reset), for
 * the view dsync_stats.  Updated without locks.
 */
typedef enum DsyncCounter
{
	DSYNC_STAT_GRANTS = 0,
	DSYNC_STAT_RENEWALS,
	DSYNC_STAT_RELEASES,
	DSYNC_STAT_EXPIRIES,
	DSYNC_STAT_WAITS,
	DSYNC_STAT_WAIT_TIMEOUTS,
	DSYNC_STAT_WAIT_TIME,		/* microseconds */
	DSYNC_STAT_EVENTS_SENT,
	DSYNC_STAT_EVENTS_LOST,
	DSYNC_NUM_COUNTERS
} DsyncCounter;

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

	/* Event queue: a list of pool chunks, protected by queue_lock. */
	LWLock	   *queue_lock;
	int			queue_first;	/* chunk read next, -1 if empty */
	int			queue_last;		/* chunk written next, -1 if empty */
	uint32		queue_read;		/* offset of the next entry in queue_first */
	uint64		queue_bytes;	/* bytes queued */
	uint64		queue_dropped;	/* events lost because the pool was full */
	uint64		queue_dropped_announced;	/* of those, events for listeners */

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

/* dsync.c: settings */
extern int	dsync_max_databases;
extern int	dsync_event_queue_size;
extern int	dsync_reap_batch_size;
extern int	dsync_restart_delay;
extern bool dsync_events;
extern int	dsync_max_ttl;
extern int	dsync_idle_row_retention;
extern int	dsync_deadlines_in_memory;
extern int	dsync_max_workers;
extern int	dsync_worker_idle_timeout;

/* Workers for databases: dsync.max_workers counts the launcher too. */
#define DSYNC_DB_WORKERS		(dsync_max_workers - 1)

/* shmem.c */
extern PGDLLIMPORT DsyncShared *dsync_shared;
extern PGDLLIMPORT DsyncWorkerShared *dsync_workers;
extern void DsyncShmemInit(void);

/* launcher.c */
extern void DsyncLauncherRegister(void);
extern void DsyncLauncherWake(void);
extern PGDLLEXPORT void dsync_launcher_main(Datum arg);

/* lifecycle.c */
extern void DsyncLifecycleInit(void);

/* dbslot.c: the table of database slots */
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

/* reaper.c */
extern PGDLLEXPORT void dsync_reaper_main(Datum arg);

/* wait.c: queues, sleeping, waking */
extern uint64 DsyncWaitKey(text *name);
extern uint64 DsyncWaitKeyEvent(text *name);
extern void DsyncWakeAtEnd(uint64 key);
extern void DsyncWakeDatabaseAtEnd(void);
extern bool DsyncWaitMayTake(uint64 key, Oid roleid);
extern void DsyncWaitEvict(uint64 key, Oid owner);
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

typedef struct DsyncWaitSpec
{
	uint64		key;			/* DsyncWaitKey or DsyncWaitKeyEvent */
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

/* catalog.c: where the extension's objects are in this database */
typedef enum DsyncTable
{
	DSYNC_TABLE_LEASE = 0,
	DSYNC_TABLE_SEMAPHORE,
	DSYNC_TABLE_SIGNAL,
	DSYNC_TABLE_MEMBER,
	DSYNC_TABLE_PERMIT,
	DSYNC_NUM_TABLES
} DsyncTable;

typedef struct DsyncCatalog
{
	Oid			extension;
	Oid			namespace;
	Oid			rels[DSYNC_NUM_TABLES];		/* InvalidOid: not installed */
	Oid			fencing_seq;
	Oid			signal_seq;
	Oid			event_seq;		/* 1.2 */
} DsyncCatalog;

extern const DsyncCatalog *DsyncCatalogGet(FunctionCallInfo fcinfo);
extern const DsyncCatalog *DsyncCatalogFromExtension(void);
extern void DsyncCatalogRequire(const DsyncCatalog *catalog, DsyncTable table);
extern void DsyncCatalogReportDropped(void);
extern const char *DsyncTableName(DsyncTable table);

/* args.c: argument checks shared by every SQL-callable function */
extern text *DsyncArgName(FunctionCallInfo fcinfo, int argno, const char *argname);
extern text *DsyncArgNameOrNull(FunctionCallInfo fcinfo, int argno, const char *argname);
extern bool DsyncIntervalUsec(const Interval *iv, int64 *result);
extern int64 DsyncArgTtl(FunctionCallInfo fcinfo, int argno, const char *argname,
						 bool null_ok, Interval **ttl_out);
extern int64 DsyncCapTtl(int64 ttl_usec);
extern void DsyncArgWait(FunctionCallInfo fcinfo, int argno, const char *argname,
						 bool *forever, int64 *wait_usec);
extern TimestampTz DsyncExpiry(TimestampTz now, int64 ttl_usec, const char *argname);
extern void DsyncPreventWrite(const char *funcname);

/* store.c: direct access to the extension's tables */
typedef struct DsyncRow
{
	ItemPointerData tid;		/* the row version this was read from */
	Datum		values[DSYNC_MAX_ATTS];
	bool		nulls[DSYNC_MAX_ATTS];
} DsyncRow;

typedef struct DsyncStore
{
	const DsyncCatalog *catalog;
	DsyncTable	table;
	Relation	rel;
	Relation	index;			/* the primary key */
	Relation	holder_index;	/* dsync_permit: (name, holder); else NULL */
	LOCKMODE	lockmode;
	bool		tolerant;		/* skip damaged rows with a warning */
} DsyncStore;

typedef struct DsyncScan DsyncScan;

extern void DsyncStoreOpen(DsyncStore *store, FunctionCallInfo fcinfo, DsyncTable table,
						   bool for_write);
extern void DsyncStoreOpenCatalog(DsyncStore *store, const DsyncCatalog *catalog,
								  DsyncTable table, bool for_write);
extern void DsyncStoreClose(DsyncStore *store);
extern void DsyncStoreCloseUnlock(DsyncStore *store);
extern DsyncRow *DsyncStoreNewRow(void);

extern DsyncScan *DsyncScanName(DsyncStore *store, text *name);
extern DsyncScan *DsyncScanKey(DsyncStore *store, text *name, Datum second);
extern DsyncScan *DsyncScanFrom(DsyncStore *store, text *name, int32 slot);
extern DsyncScan *DsyncScanLast(DsyncStore *store, text *name);
extern DsyncScan *DsyncScanHolder(DsyncStore *store, text *name, text *holder);
extern DsyncScan *DsyncScanFree(DsyncStore *store, text *name, int32 from_slot);
extern DsyncScan *DsyncScanAll(DsyncStore *store);
extern DsyncRow *DsyncScanNext(DsyncScan *scan);
extern void DsyncScanEnd(DsyncScan *scan);
extern List *DsyncScanList(DsyncScan *scan);
extern void DsyncRowFree(DsyncStore *store, DsyncRow *row);

extern TM_Result DsyncStoreLock(DsyncStore *store, DsyncRow *row,
								LockTupleMode mode, LockWaitPolicy policy);
extern void DsyncStoreUpdate(DsyncStore *store, DsyncRow *row);
extern void DsyncStoreInsert(DsyncStore *store, DsyncRow *row);
extern void DsyncStoreDelete(DsyncStore *store, DsyncRow *row);

/* Inserting a new key: see DsyncStoreClaimKey. */
typedef enum DsyncClaim
{
	DSYNC_CLAIM_OK,				/* nobody has the key: insert it, then unlock */
	DSYNC_CLAIM_EXISTS,			/* a committed row has it now: look again */
	DSYNC_CLAIM_BUSY			/* another transaction is inserting or deleting it */
} DsyncClaim;

extern DsyncClaim DsyncStoreClaimKey(DsyncStore *store, text *name, Datum second,
									 bool wait);
extern void DsyncStoreUnclaimKey(DsyncStore *store, text *name, Datum second);

/* Used by scan.c: a row read from a tuple, and checked (row.c). */
extern void DsyncStoreLoadRow(DsyncStore *store, HeapTuple tuple, DsyncRow *row);
extern bool DsyncStoreCheckRow(DsyncStore *store, DsyncRow *row);
extern const char *DsyncRowDamage(DsyncTable table, const DsyncRow *row);

/* Row helpers. */
extern bool DsyncRowIsLive(const DsyncRow *row, TimestampTz now);
extern bool DsyncRowHolderIs(const DsyncRow *row, text *holder);
extern bool DsyncTextEquals(text *a, text *b);
extern bool DsyncRowOwnerIsCaller(const DsyncRow *row, int owner_attnum);
extern int32 DsyncRowSlot(const DsyncRow *row);
extern TimestampTz DsyncRowExpiry(const DsyncRow *row);

/* semaphore.c: definitions */
extern int	DsyncSemaphorePermits(FunctionCallInfo fcinfo, text *name);
extern int	DsyncSemaphorePermitsFor(FunctionCallInfo fcinfo, text *name, bool for_grant);
extern int	DsyncSemaphoreCount(const DsyncCatalog *catalog, text *name, bool for_grant);

/* lease.c */
typedef struct LeaseGrant
{
	text	   *holder;
	Interval   *ttl;
	int64		ttl_usec;
	Datum		info;
	bool		info_null;
} LeaseGrant;

extern text *DsyncLeaseLeader(FunctionCallInfo fcinfo, text *lease);
extern void DsyncLeaseSetGrant(DsyncStore *store, DsyncRow *row, const LeaseGrant *grant);
extern void DsyncLeaseRenewRow(DsyncStore *store, DsyncRow *row, const LeaseGrant *grant);
extern void DsyncLeaseSetReleased(DsyncRow *row);
extern void DsyncLeaseRelease(DsyncStore *store, DsyncRow *row);
extern DsyncRow *DsyncLeaseFindPlain(DsyncStore *store, text *lease);

/* permit.c: semaphore permits */
extern bool DsyncPermitTryAcquire(FunctionCallInfo fcinfo, text *name, const LeaseGrant *grant,
								  int permits, bool may_take, bool thorough,
								  int64 *token);
extern DsyncRow *DsyncPermitFindHeld(DsyncStore *store, text *name, text *holder,
									 TimestampTz now);
extern void DsyncPermitFill(const DsyncCatalog *catalog, text *name, int permits);
extern void DsyncPermitDropFree(const DsyncCatalog *catalog, text *name);

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
	DSYNC_EVENT_SET,			/* a one-to-one signal was stored */
	DSYNC_EVENT_PERMIT_ACQUIRED,	/* as ACQUIRED, for a semaphore permit */
	DSYNC_EVENT_PERMIT_DEADLINE,	/* as DEADLINE, for a semaphore permit */
	DSYNC_EVENT_PERMIT_RELEASED,	/* as RELEASED, for a semaphore permit */
	DSYNC_EVENT_RENEWED			/* not announced or queued: counted only */
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
extern char *DsyncEventPayload(const DsyncEvent *event);
extern bool DsyncEventHasDeadline(DsyncEventKind kind);
extern bool DsyncEventIsAnnounced(DsyncEventKind kind);
extern const char *DsyncEventChannel(const char *name);
extern void DsyncDeadlineLower(DsyncDbSlot *slot, TimestampTz deadline);
extern void DsyncEventTimestamp(StringInfo buf, TimestampTz ts);

/* queue.c: event queues in a shared pool of chunks */
extern Size DsyncQueueEntrySize(const DsyncEvent *event);
extern void DsyncQueuePoolInit(DsyncWorkerShared *shared, DsyncChunk *chunks, int nchunks);
extern int	DsyncQueueFreeChunks(void);
extern bool DsyncQueueAppend(DsyncDbSlot *slot, const DsyncEvent *event);
extern void DsyncQueueReset(DsyncDbSlot *slot);
extern int	DsyncQueueDrain(DsyncDbSlot *slot, List **events, uint64 *dropped,
							uint64 *dropped_announced);

/* stats.c */
extern void DsyncStatAdd(DsyncCounter counter, int64 delta);
extern void DsyncStatAddSlot(DsyncDbSlot *slot, DsyncCounter counter, int64 delta);

/* role.c: DROP ROLE, DROP OWNED and REASSIGN OWNED */
extern void DsyncRoleUtility(Node *parsetree);

#endif							/* DSYNC_H */
