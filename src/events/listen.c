/*-------------------------------------------------------------------------
 *
 * listen.c
 *		Which databases have a backend listening on a dsync channel, so
 *		that events nobody can hear cost nothing.
 *
 * Sending an event is a NOTIFY in the reaper's own transaction (an XID, a
 * commit record, a sequence number), and waking the reaper for it costs
 * the committing backend a signal.  With nobody listening, that work
 * serves nobody: PostgreSQL delivers a notification only to backends whose
 * LISTEN committed before it was sent.  So every backend notes in shared
 * memory, indexed by its PGPROC number, the database it listens in, from
 * the moment a LISTEN on a dsync channel ("dsync:" or "dsync#") starts
 * executing until it leaves, or until an UNLISTEN * or DISCARD ALL of
 * its commits.  A count of such backends makes the common answer ("nobody
 * listens anywhere") one atomic read.
 *
 * The mark is set before the LISTEN can commit, and a committing backend
 * reads it after its commit, behind a memory barrier: so an event committed
 * after a LISTEN committed is always sent.  One committed while nobody
 * listened is queued only for what the reaper itself needs of it (a
 * deadline, a released row), never to be sent (events.c, EventUnheard).
 * The mark errs on the side of sending: a LISTEN that rolls back, or an
 * UNLISTEN of one channel, leaves it set until the backend leaves.  With
 * the event log on, a listener leaving keeps its database's events sent
 * and logged for dsync.event_retention, in case it is reconnecting.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/twophase.h"
#include "access/xact.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "events.h"

typedef struct DsyncListenShared
{
	pg_atomic_uint32 listening;	/* backends with a nonzero dbid below */
	int			nprocs;
	pg_atomic_uint32 dbid[FLEXIBLE_ARRAY_MEMBER];	/* per PGPROC number */
} DsyncListenShared;

static DsyncListenShared *listen_shared = NULL;

/* This backend's mark is set. */
static bool listen_marked = false;

/*
 * The nesting level of an UNLISTEN * or DISCARD ALL (0: none): it clears
 * the mark if it commits, not if its savepoint is rolled back.
 */
static int	listen_clear_level = 0;
static bool listen_callbacks = false;

/*
 * ListenProcs
 *		One entry per PGPROC, as proc.c sizes its own array.
 */
static int
ListenProcs(void)
{
	return MaxBackends + NUM_AUXILIARY_PROCS + max_prepared_xacts;
}

/*
 * DsyncListenShmemSize
 *		Bytes for the marks.
 */
Size
DsyncListenShmemSize(void)
{
	return add_size(offsetof(DsyncListenShared, dbid),
					mul_size(ListenProcs(), sizeof(pg_atomic_uint32)));
}

/*
 * DsyncListenShmemInit
 *		Create or attach to the marks; called under AddinShmemInitLock.
 */
void
DsyncListenShmemInit(void)
{
	bool		found;

	listen_shared = ShmemInitStruct("dsync listeners", DsyncListenShmemSize(), &found);
	if (found)
		return;
	listen_shared->nprocs = ListenProcs();
	pg_atomic_init_u32(&listen_shared->listening, 0);
	for (int i = 0; i < listen_shared->nprocs; i++)
		pg_atomic_init_u32(&listen_shared->dbid[i], InvalidOid);
}

/*
 * ListenUnmark
 *		Take this backend's mark away.
 */
static void
ListenUnmark(void)
{
	if (!listen_marked)
		return;
	/* A watcher may be leaving to reconnect: keep logging for it meanwhile. */
	DsyncEventWatcherLeft(MyDatabaseId, GetCurrentTimestamp());
	pg_atomic_write_u32(&listen_shared->dbid[DsyncProcNumber(MyProc)], InvalidOid);
	pg_atomic_fetch_sub_u32(&listen_shared->listening, 1);
	listen_marked = false;
}

/*
 * ListenAtExit
 *		A backend that leaves listens no more.
 */
static void
ListenAtExit(int code, Datum arg)
{
	ListenUnmark();
}

/*
 * ListenXactCallback
 *		Apply a committed UNLISTEN * or DISCARD ALL.
 */
static void
ListenXactCallback(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_COMMIT && listen_clear_level > 0)
		ListenUnmark();
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT ||
		event == XACT_EVENT_PREPARE)
		listen_clear_level = 0;
}

/*
 * ListenSubXactCallback
 *		An UNLISTEN * in a savepoint that is rolled back never happened
 *		(PostgreSQL drops it too); one in a released savepoint belongs to
 *		the parent.
 */
static void
ListenSubXactCallback(SubXactEvent event, SubTransactionId mySubid,
					  SubTransactionId parentSubid, void *arg)
{
	int			level = GetCurrentTransactionNestLevel();

	if (listen_clear_level < level)
		return;
	if (event == SUBXACT_EVENT_ABORT_SUB)
		listen_clear_level = 0;
	else if (event == SUBXACT_EVENT_COMMIT_SUB)
		listen_clear_level = level - 1;
}

/*
 * ListenMark
 *		Note that this backend listens in its database, from now on.
 */
static void
ListenMark(void)
{
	listen_clear_level = 0;
	if (listen_marked)
		return;
	if (!listen_callbacks)
	{
		before_shmem_exit(ListenAtExit, (Datum) 0);
		RegisterXactCallback(ListenXactCallback, NULL);
		RegisterSubXactCallback(ListenSubXactCallback, NULL);
		listen_callbacks = true;
	}
	/* Full barriers: the mark is visible before the LISTEN can commit. */
	pg_atomic_fetch_add_u32(&listen_shared->listening, 1);
	pg_atomic_exchange_u32(&listen_shared->dbid[DsyncProcNumber(MyProc)], MyDatabaseId);
	listen_marked = true;
}

/*
 * ListenIsDsyncChannel
 *		Whether a channel is one dsync sends on (channel.c).
 */
static bool
ListenIsDsyncChannel(const char *channel)
{
	return channel != NULL && DsyncIsEventChannel(channel);
}

/*
 * DsyncListenUtility
 *		Called by the utility hook before a statement runs: mark this
 *		backend at a LISTEN on a dsync channel, and note an UNLISTEN * or
 *		DISCARD ALL for commit.
 */
void
DsyncListenUtility(Node *parsetree)
{
	if (listen_shared == NULL || MyProc == NULL)
		return;
	if (IsA(parsetree, ListenStmt))
	{
		if (ListenIsDsyncChannel(((ListenStmt *) parsetree)->conditionname))
			ListenMark();
	}
	else if (listen_marked &&
			 ((IsA(parsetree, UnlistenStmt) &&
			   ((UnlistenStmt *) parsetree)->conditionname == NULL) ||
			  (IsA(parsetree, DiscardStmt) &&
			   ((DiscardStmt *) parsetree)->target == DISCARD_ALL)))
		listen_clear_level = GetCurrentTransactionNestLevel();
}

/*
 * DsyncListenersIn
 *		Whether any backend listens on a dsync channel in database dbid.
 *		Callers read it after their change took effect: a LISTEN that
 *		committed before that had set its mark first (full barriers on
 *		both sides), so this read sees it.  Costs a scan of the marks only
 *		while some backend of the cluster listens.
 */
bool
DsyncListenersIn(Oid dbid)
{
	if (listen_shared == NULL || pg_atomic_read_u32(&listen_shared->listening) == 0)
		return false;
	for (int i = 0; i < listen_shared->nprocs; i++)
		if (pg_atomic_read_u32(&listen_shared->dbid[i]) == dbid)
			return true;
	return false;
}
