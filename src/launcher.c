/*-------------------------------------------------------------------------
 *
 * launcher.c
 *		The launcher, which keeps one reaper running in every database that
 *		has the extension, and the hooks that tell it what changed.
 *
 * The launcher connects to no database (it reads only pg_database), so it
 * cannot see which databases have the extension.  Each database gets a
 * slot in shared memory.  At start-up, and when a database is created,
 * the launcher starts a reaper in every database it has not looked at,
 * one at a time; a reaper that finds no extension marks its slot absent
 * and exits.  CREATE EXTENSION dsync marks its database's slot for a
 * reaper when it commits, so no restart is needed.  A reaper that finds
 * the extension dropped exits for good; one that stops for any other
 * reason is started again after dsync.restart_delay.
 *
 * A connected reaper would make DROP DATABASE, ALTER DATABASE ... RENAME
 * or SET TABLESPACE, and CREATE DATABASE ... TEMPLATE fail with "being
 * accessed by other users".  The utility hook holds the database's slot
 * for the statement, so that the launcher does not start a reaper there,
 * and stops the running one first, as TimescaleDB's loader does.
 *
 * Template databases never get a reaper, for the same reason.  Workers
 * start only once recovery has finished: a hot standby runs none, and a
 * promoted standby starts them.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/objectaccess.h"
#include "utils/acl.h"
#include "catalog/pg_database.h"
#include "catalog/pg_extension.h"
#include "commands/dbcommands.h"
#include "commands/defrem.h"
#include "commands/extension.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "tcop/utility.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "dsync.h"

/* How long a utility statement waits for a reaper to leave its database. */
#define DSYNC_HOLD_WAIT_MS		10000

static ProcessUtility_hook_type prev_process_utility = NULL;
static object_access_hook_type prev_object_access = NULL;

/* Changes this transaction makes that the workers must hear about. */
static bool probe_at_commit = false;
static bool recheck_at_commit = false;
static bool rescan_at_commit = false;
static bool xact_callback_registered = false;

/* Launcher-local: the handles of the reapers it started. */
static BackgroundWorkerHandle **reaper_handles = NULL;

/* Backend-local cache of this database's slot. */
static DsyncDbSlot *my_slot = NULL;

/*
 * DsyncLauncherRegister
 *		Register the launcher with the postmaster, from _PG_init.
 */
void
DsyncLauncherRegister(void)
{
	BackgroundWorker worker;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = 1;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "dsync");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "dsync_launcher_main");
	snprintf(worker.bgw_name, BGW_MAXLEN, "dsync launcher");
	snprintf(worker.bgw_type, BGW_MAXLEN, "dsync launcher");
	RegisterBackgroundWorker(&worker);
}

/*
 * DsyncLauncherWake
 *		Set the launcher's latch, if it runs.
 */
void
DsyncLauncherWake(void)
{
	int			procno = dsync_workers->launcher_pgprocno;

	if (procno >= 0)
		SetLatch(&ProcGlobal->allProcs[procno].procLatch);
}

/*
 * DsyncDbSlotLookup
 *		The slot of a database, or NULL.  The caller holds the worker lock.
 */
static DsyncDbSlot *
DsyncDbSlotLookup(Oid dbid)
{
	for (int i = 0; i < dsync_workers->nslots; i++)
	{
		DsyncDbSlot *slot = &dsync_workers->slots[i];

		if (slot->state != DSYNC_DB_FREE && slot->dbid == dbid)
			return slot;
	}
	return NULL;
}

/*
 * DsyncDbSlotAllocate
 *		A slot for a database, made if it has none.  Slots of databases
 *		known to lack the extension are reused when no slot is free.
 *		NULL if all are in use.  The caller holds the worker lock
 *		exclusively.
 */
static DsyncDbSlot *
DsyncDbSlotAllocate(Oid dbid)
{
	DsyncDbSlot *slot = DsyncDbSlotLookup(dbid);
	DsyncDbSlot *absent = NULL;

	if (slot)
		return slot;
	for (int i = 0; i < dsync_workers->nslots; i++)
	{
		DsyncDbSlot *candidate = &dsync_workers->slots[i];

		if (candidate->state == DSYNC_DB_FREE)
		{
			slot = candidate;
			break;
		}
		if (candidate->state == DSYNC_DB_ABSENT && candidate->pid == 0 && absent == NULL)
			absent = candidate;
	}
	if (slot == NULL)
		slot = absent;
	if (slot == NULL)
		return NULL;

	slot->state = DSYNC_DB_PROBE;
	slot->pid = 0;
	slot->pgprocno = -1;
	slot->held_by = 0;
	slot->restart_after = 0;
	slot->start_warned = false;
	pg_atomic_write_u32(&slot->recheck, 0);
	pg_atomic_write_u64(&slot->next_deadline, 0);
	/* Under the queue lock, so that no event lands in another database's queue. */
	LWLockAcquire(slot->queue_lock, LW_EXCLUSIVE);
	slot->dbid = dbid;
	slot->queue_head = slot->queue_tail = 0;
	slot->queue_dropped = 0;
	LWLockRelease(slot->queue_lock);
	return slot;
}

/*
 * DsyncDbSlotFind
 *		This backend's view of a database's slot (NULL if none), cached:
 *		a database keeps its slot while anyone is connected to it.
 */
DsyncDbSlot *
DsyncDbSlotFind(Oid dbid)
{
	DsyncDbSlot *slot;

	if (my_slot && my_slot->dbid == dbid && my_slot->state != DSYNC_DB_FREE)
		return my_slot;
	LWLockAcquire(dsync_workers->lock, LW_SHARED);
	slot = DsyncDbSlotLookup(dbid);
	LWLockRelease(dsync_workers->lock);
	if (dbid == MyDatabaseId)
		my_slot = slot;
	return slot;
}

/*
 * DsyncLauncherRequestProbe
 *		Ask for a reaper in a database that may have the extension.  Runs
 *		in commit callbacks, so it only logs.
 */
void
DsyncLauncherRequestProbe(Oid dbid)
{
	DsyncDbSlot *slot;

	LWLockAcquire(dsync_workers->lock, LW_EXCLUSIVE);
	slot = DsyncDbSlotAllocate(dbid);
	if (slot && slot->state == DSYNC_DB_ABSENT)
		slot->state = DSYNC_DB_PROBE;
	if (slot)
		slot->restart_after = 0;
	LWLockRelease(dsync_workers->lock);

	if (slot == NULL)
		ereport(WARNING,
				(errmsg("dsync has no reaper for database %u", dbid),
				 errdetail("All %d slots set by dsync.max_databases are in use.",
						   dsync_max_databases),
				 errhint("Raise dsync.max_databases; until then, expired leases in this "
						 "database are not announced.")));
	DsyncLauncherWake();
}

/*
 * DsyncLifecycleXactCallback
 *		Tell the workers about committed CREATE EXTENSION, DROP EXTENSION
 *		and CREATE DATABASE.
 */
static void
DsyncLifecycleXactCallback(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_COMMIT)
	{
		if (probe_at_commit)
			DsyncLauncherRequestProbe(MyDatabaseId);
		if (recheck_at_commit)
		{
			DsyncDbSlot *slot = DsyncDbSlotFind(MyDatabaseId);

			if (slot)
			{
				int			procno = slot->pgprocno;

				pg_atomic_write_u32(&slot->recheck, 1);
				if (procno >= 0)
					SetLatch(&ProcGlobal->allProcs[procno].procLatch);
			}
		}
		if (rescan_at_commit)
		{
			dsync_workers->rescan = true;
			DsyncLauncherWake();
		}
	}
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT ||
		event == XACT_EVENT_PREPARE)
		probe_at_commit = recheck_at_commit = rescan_at_commit = false;
}

/*
 * DsyncLifecycleNoteAtCommit
 *		Make sure the commit callback is registered.
 */
static void
DsyncLifecycleNoteAtCommit(bool *flag)
{
	if (!xact_callback_registered)
	{
		RegisterXactCallback(DsyncLifecycleXactCallback, NULL);
		xact_callback_registered = true;
	}
	*flag = true;
}

/*
 * DsyncLifecycleHold
 *		Keep reapers out of a database for the length of a statement that
 *		needs it alone, and stop the one there now.
 */
static void
DsyncLifecycleHold(Oid dbid)
{
	DsyncDbSlot *slot;
	int			pid;
	int			signalled = 0;

	/*
	 * A database without a slot gets one, held: otherwise the launcher
	 * could give it a reaper in the middle of the statement.
	 */
	LWLockAcquire(dsync_workers->lock, LW_EXCLUSIVE);
	slot = DsyncDbSlotAllocate(dbid);
	if (slot == NULL)
	{
		LWLockRelease(dsync_workers->lock);
		return;
	}
	slot->held_by = MyProcPid;
	LWLockRelease(dsync_workers->lock);

	/*
	 * A reaper that is starting (pid -1) sees the hold when it claims the
	 * slot and leaves; one that runs is told to go.  Wait until it has.
	 */
	for (int waited = 0; waited < DSYNC_HOLD_WAIT_MS; waited += 10)
	{
		LWLockAcquire(dsync_workers->lock, LW_SHARED);
		pid = (slot->dbid == dbid) ? slot->pid : 0;
		LWLockRelease(dsync_workers->lock);
		if (pid == 0)
			break;
		if (pid > 0 && pid != signalled)
		{
			kill(pid, SIGTERM);
			signalled = pid;
		}
		CHECK_FOR_INTERRUPTS();
		pg_usleep(10000L);
	}
}

/*
 * DsyncLifecycleRelease
 *		The statement is over: a reaper may come back (if the database
 *		still exists; the launcher checks).
 */
static void
DsyncLifecycleRelease(Oid dbid)
{
	DsyncDbSlot *slot;

	LWLockAcquire(dsync_workers->lock, LW_EXCLUSIVE);
	slot = DsyncDbSlotLookup(dbid);
	if (slot && slot->held_by == MyProcPid)
	{
		slot->held_by = 0;
		slot->restart_after = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
														  dsync_restart_delay);
	}
	dsync_workers->rescan = true;
	LWLockRelease(dsync_workers->lock);
	DsyncLauncherWake();
}

static Oid	DsyncLifecycleStatementDatabase(Node *parsetree);

/*
 * DsyncLifecycleHeldDatabase
 *		The database whose reaper must stop for a utility statement, if any.
 */
static Oid
DsyncLifecycleHeldDatabase(Node *parsetree)
{
	Oid			dbid = DsyncLifecycleStatementDatabase(parsetree);

	/*
	 * Stop a reaper only for a statement that can go ahead: by the
	 * database's owner (or a superuser), outside a transaction block
	 * (where those statements fail anyway, except RENAME).  Anybody else
	 * would get their error only after the reaper had been stopped.
	 */
	if (!OidIsValid(dbid) || !pg_database_ownercheck(dbid, GetUserId()))
		return InvalidOid;
	if (!IsA(parsetree, RenameStmt) && IsTransactionBlock())
		return InvalidOid;
	return dbid;
}

/*
 * DsyncLifecycleStatementDatabase
 *		The database a utility statement needs to itself, if any.
 */
static Oid
DsyncLifecycleStatementDatabase(Node *parsetree)
{
	ListCell   *lc;

	switch (nodeTag(parsetree))
	{
		case T_DropdbStmt:
			return get_database_oid(((DropdbStmt *) parsetree)->dbname, true);
		case T_CreatedbStmt:
			foreach(lc, ((CreatedbStmt *) parsetree)->options)
			{
				DefElem    *def = lfirst(lc);

				if (strcmp(def->defname, "template") == 0 && def->arg != NULL)
					return get_database_oid(defGetString(def), true);
			}
			return InvalidOid;
		case T_RenameStmt:
			if (((RenameStmt *) parsetree)->renameType == OBJECT_DATABASE)
				return get_database_oid(((RenameStmt *) parsetree)->subname, true);
			return InvalidOid;
		case T_AlterDatabaseStmt:
			foreach(lc, ((AlterDatabaseStmt *) parsetree)->options)
			{
				DefElem    *def = lfirst(lc);

				if (strcmp(def->defname, "tablespace") == 0)
					return get_database_oid(((AlterDatabaseStmt *) parsetree)->dbname, true);
			}
			return InvalidOid;
		default:
			return InvalidOid;
	}
}

/*
 * DsyncProcessUtility
 *		Hold a database's slot around statements that need the database
 *		alone; note CREATE EXTENSION dsync and CREATE DATABASE for commit.
 */
static void
DsyncProcessUtility(PlannedStmt *pstmt, const char *queryString,
					bool readOnlyTree, ProcessUtilityContext context,
					ParamListInfo params, QueryEnvironment *queryEnv,
					DestReceiver *dest, QueryCompletion *qc)
{
	Node	   *parsetree = pstmt->utilityStmt;
	Oid			held = DsyncLifecycleHeldDatabase(parsetree);

	/* Roles that own dsync state: PostgreSQL's dependency rules (role.c). */
	if (IsA(parsetree, DropRoleStmt) || IsA(parsetree, DropOwnedStmt) ||
		IsA(parsetree, ReassignOwnedStmt))
		DsyncRoleUtility(parsetree);

	PG_TRY();
	{
		if (OidIsValid(held))
			DsyncLifecycleHold(held);
		if (prev_process_utility)
			prev_process_utility(pstmt, queryString, readOnlyTree, context,
								 params, queryEnv, dest, qc);
		else
			standard_ProcessUtility(pstmt, queryString, readOnlyTree, context,
									params, queryEnv, dest, qc);
	}
	PG_FINALLY();
	{
		if (OidIsValid(held))
			DsyncLifecycleRelease(held);
	}
	PG_END_TRY();

	/* Any CREATE EXTENSION may have brought dsync along (CASCADE). */
	if (IsA(parsetree, CreateExtensionStmt) &&
		OidIsValid(get_extension_oid("dsync", true)))
		DsyncLifecycleNoteAtCommit(&probe_at_commit);
	else if (IsA(parsetree, CreatedbStmt))
		DsyncLifecycleNoteAtCommit(&rescan_at_commit);
}

/*
 * DsyncObjectAccess
 *		Notice the extension being dropped, by DROP EXTENSION or by a
 *		cascade, so that the reaper looks once it commits and the
 *		database's waiters wake and report it.
 */
static void
DsyncObjectAccess(ObjectAccessType access, Oid classId, Oid objectId,
				  int subId, void *arg)
{
	if (prev_object_access)
		prev_object_access(access, classId, objectId, subId, arg);

	if (access == OAT_DROP && classId == ExtensionRelationId &&
		objectId == get_extension_oid("dsync", true))
	{
		DsyncLifecycleNoteAtCommit(&recheck_at_commit);
		/* Whoever waits in a dsync call here must stop, not hang on. */
		DsyncWakeDatabaseAtEnd();
	}
}

/*
 * DsyncLifecycleInit
 *		Install the hooks; called from _PG_init.
 */
void
DsyncLifecycleInit(void)
{
	prev_process_utility = ProcessUtility_hook;
	ProcessUtility_hook = DsyncProcessUtility;
	prev_object_access = object_access_hook;
	object_access_hook = DsyncObjectAccess;
}

/*
 * DsyncLauncherScanDatabases
 *		Forget the slots of databases that no longer exist and, if add_new,
 *		give every other connectable, non-template database a slot to be
 *		probed.
 */
static void
DsyncLauncherScanDatabases(bool add_new)
{
	List	   *dbids = NIL;
	Relation	rel;
	TableScanDesc scan;
	HeapTuple	tuple;
	bool		full = false;
	MemoryContext callercontext = CurrentMemoryContext;

	StartTransactionCommand();
	(void) GetTransactionSnapshot();
	rel = table_open(DatabaseRelationId, AccessShareLock);
	scan = table_beginscan_catalog(rel, 0, NULL);
	while ((tuple = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		Form_pg_database db = (Form_pg_database) GETSTRUCT(tuple);
		MemoryContext txncontext;

		if (!db->datallowconn || db->datistemplate ||
			db->datconnlimit == DATCONNLIMIT_INVALID_DB)
			continue;
		/* The list must outlive the transaction. */
		txncontext = MemoryContextSwitchTo(callercontext);
		dbids = lappend_oid(dbids, db->oid);
		MemoryContextSwitchTo(txncontext);
	}
	table_endscan(scan);
	table_close(rel, AccessShareLock);
	CommitTransactionCommand();

	LWLockAcquire(dsync_workers->lock, LW_EXCLUSIVE);
	for (int i = 0; i < dsync_workers->nslots; i++)
	{
		DsyncDbSlot *slot = &dsync_workers->slots[i];

		if (slot->state != DSYNC_DB_FREE && slot->pid == 0 && slot->held_by == 0 &&
			!list_member_oid(dbids, slot->dbid))
			slot->state = DSYNC_DB_FREE;
	}
	if (add_new)
	{
		ListCell   *lc;

		foreach(lc, dbids)
		{
			if (DsyncDbSlotLookup(lfirst_oid(lc)) == NULL &&
				DsyncDbSlotAllocate(lfirst_oid(lc)) == NULL)
				full = true;
		}
	}
	LWLockRelease(dsync_workers->lock);
	list_free(dbids);

	if (full)
		ereport(LOG,
				(errmsg("dsync launcher cannot look at every database"),
				 errdetail("All %d slots set by dsync.max_databases are in use.",
						   dsync_max_databases)));
}

/*
 * DsyncLauncherStartReaper
 *		Ask the postmaster for a reaper in a slot's database.
 */
static void
DsyncLauncherStartReaper(int slotno, Oid dbid)
{
	BackgroundWorker worker;
	BackgroundWorkerHandle *handle;
	pid_t		pid;
	DsyncDbSlot *slot = &dsync_workers->slots[slotno];

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = BGW_NEVER_RESTART;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "dsync");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "dsync_reaper_main");
	snprintf(worker.bgw_name, BGW_MAXLEN, "dsync reaper for database %u", dbid);
	snprintf(worker.bgw_type, BGW_MAXLEN, "dsync reaper");
	worker.bgw_main_arg = Int32GetDatum(slotno);
	memcpy(worker.bgw_extra, &dbid, sizeof(Oid));
	worker.bgw_notify_pid = MyProcPid;

	if (!RegisterDynamicBackgroundWorker(&worker, &handle))
	{
		/* Said once until a start succeeds: it is retried every 5 s. */
		if (!slot->start_warned)
			ereport(WARNING,
					(errmsg("dsync launcher could not start a reaper for database %u", dbid),
					 errdetail("All background worker slots are in use."),
					 errhint("Raise max_worker_processes (each database with dsync needs one, "
							 "and the launcher one).")));
		LWLockAcquire(dsync_workers->lock, LW_EXCLUSIVE);
		slot->start_warned = true;
		if (slot->pid == -1)
			slot->pid = 0;
		slot->restart_after = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
														  Max(dsync_restart_delay, 5000));
		LWLockRelease(dsync_workers->lock);
		return;
	}
	slot->start_warned = false;

	/* A quick exit (no extension there, or a hold) is not a failure. */
	(void) WaitForBackgroundWorkerStartup(handle, &pid);
	reaper_handles[slotno] = handle;
}

/*
 * DsyncLauncherStep
 *		Start the reapers that should run and do not; returns how long the
 *		launcher may sleep (-1: until woken).
 */
static long
DsyncLauncherStep(void)
{
	TimestampTz now = GetCurrentTimestamp();
	long		sleep_ms = -1;
	List	   *to_start = NIL;
	bool		probing = false;
	ListCell   *lc;

	LWLockAcquire(dsync_workers->lock, LW_EXCLUSIVE);

	/*
	 * Forget the handles of reapers that have exited; one that died before
	 * claiming its slot leaves it marked as starting.
	 */
	for (int i = 0; i < dsync_workers->nslots; i++)
	{
		DsyncDbSlot *slot = &dsync_workers->slots[i];
		pid_t		pid;

		if (reaper_handles[i] &&
			GetBackgroundWorkerPid(reaper_handles[i], &pid) == BGWH_STOPPED)
		{
			pfree(reaper_handles[i]);
			reaper_handles[i] = NULL;
			if (slot->pid == -1)
			{
				slot->pid = 0;
				slot->restart_after = TimestampTzPlusMilliseconds(now, dsync_restart_delay);
			}
		}
	}

	for (int i = 0; i < dsync_workers->nslots; i++)
	{
		DsyncDbSlot *slot = &dsync_workers->slots[i];

		if (slot->state == DSYNC_DB_PROBE && (slot->pid != 0 || reaper_handles[i]))
			probing = true;
	}
	for (int i = 0; i < dsync_workers->nslots; i++)
	{
		DsyncDbSlot *slot = &dsync_workers->slots[i];

		if ((slot->state != DSYNC_DB_PROBE && slot->state != DSYNC_DB_ACTIVE) ||
			slot->pid != 0 || reaper_handles[i] != NULL)
			continue;
		if (slot->held_by != 0)
		{
			/* A holder that died without letting go no longer counts. */
			if (BackendPidGetProc(slot->held_by) != NULL)
			{
				sleep_ms = (sleep_ms < 0 || sleep_ms > 1000) ? 1000 : sleep_ms;
				continue;
			}
			slot->held_by = 0;
		}
		if (slot->restart_after > now)
		{
			long		ms = (slot->restart_after - now + 999) / 1000;

			if (sleep_ms < 0 || ms < sleep_ms)
				sleep_ms = ms;
			continue;
		}
		if (slot->state == DSYNC_DB_PROBE)
		{
			/* Probe one database at a time: each needs a worker slot. */
			if (probing)
				continue;
			probing = true;
		}
		slot->pid = -1;			/* starting: see DsyncLifecycleHold */
		to_start = lappend_int(to_start, i);
	}
	LWLockRelease(dsync_workers->lock);

	foreach(lc, to_start)
	{
		int			i = lfirst_int(lc);

		DsyncLauncherStartReaper(i, dsync_workers->slots[i].dbid);
	}
	list_free(to_start);
	return sleep_ms;
}

/*
 * DsyncLauncherExit
 *		Let backends stop setting a gone launcher's latch.
 */
static void
DsyncLauncherExit(int code, Datum arg)
{
	dsync_workers->launcher_pgprocno = -1;
	dsync_workers->launcher_pid = 0;
}

/*
 * dsync_launcher_main
 *		The launcher's main loop: look at pg_database when asked, start
 *		reapers, sleep until woken (by a backend, a reaper's exit or start,
 *		or a delay running out).
 */
void
dsync_launcher_main(Datum arg)
{
	pqsignal(SIGTERM, die);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);

	reaper_handles = MemoryContextAllocZero(TopMemoryContext,
											sizeof(BackgroundWorkerHandle *) *
											dsync_workers->nslots);
	before_shmem_exit(DsyncLauncherExit, (Datum) 0);
	LWLockAcquire(dsync_workers->lock, LW_EXCLUSIVE);
	dsync_workers->launcher_pid = MyProcPid;
	dsync_workers->launcher_pgprocno = MyProc->pgprocno;
	dsync_workers->rescan = true;
	/* Reapers a previous launcher was starting have started or failed. */
	for (int i = 0; i < dsync_workers->nslots; i++)
		if (dsync_workers->slots[i].pid == -1)
			dsync_workers->slots[i].pid = 0;
	LWLockRelease(dsync_workers->lock);

	ereport(LOG, (errmsg("dsync launcher started")));

	for (;;)
	{
		long		sleep_ms;
		bool		rescan;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}

		LWLockAcquire(dsync_workers->lock, LW_EXCLUSIVE);
		rescan = dsync_workers->rescan;
		dsync_workers->rescan = false;
		LWLockRelease(dsync_workers->lock);
		DsyncLauncherScanDatabases(rescan);

		sleep_ms = DsyncLauncherStep();
		(void) WaitLatch(MyLatch,
						 WL_LATCH_SET | WL_EXIT_ON_PM_DEATH |
						 (sleep_ms >= 0 ? WL_TIMEOUT : 0),
						 sleep_ms, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
}
