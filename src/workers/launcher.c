/*-------------------------------------------------------------------------
 *
 * launcher.c
 *		The launcher: gives dsync.max_workers workers to the databases that
 *		have work due, so that every database with the extension is served
 *		while dsync takes few of the server's worker slots.
 *
 * As PostgreSQL's autovacuum does, the launcher connects to no database
 * and starts short-lived per-database workers where there is work; unlike
 * autovacuum, a worker stays as long as nobody else needs its place, so a
 * database that keeps it sees expiries announced as promptly as with a
 * worker of its own.  The slots' states and what moves them are in
 * dbslot.c.  Each round the launcher:
 *
 *	1. reads pg_database when asked (server start, CREATE DATABASE, a
 *	   worker that failed): every connectable, non-template database it has
 *	   not looked at gets a PROBE slot; slots of dropped databases go;
 *	2. finds the databases with work due and no worker: a PROBE slot
 *	   (oldest first), or an ACTIVE one whose next deadline has come or
 *	   whose queue has events to send ("wanted");
 *	3. starts workers for them, most overdue first, while fewer than
 *	   dsync.max_workers - 1 run (the launcher counts too);
 *	4. if work is still due, asks the worker of the database with the
 *	   least urgent work (nothing due now, the latest next deadline), if
 *	   it has done a first pass and served at least DSYNC_MIN_SERVE_MS,
 *	   to make way (it sends what it has, leaves its next deadline in the
 *	   slot, and exits);
 *	5. sleeps until the next deadline of a database without a worker, or
 *	   until a backend, a worker or a delay wakes it.
 *
 * The launcher never blocks on a worker; a worker that cannot be started
 * (no free slot in max_worker_processes) is retried after a pause, with
 * one warning in the server log until it works again.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_database.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "tcop/tcopprot.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "dbslot.h"
#include "settings.h"
#include "workers.h"
#include "ephemeral.h"
#include "compat.h"
#include "queue.h"

/* A worker serves at least this long before it is asked to make way. */
#define DSYNC_MIN_SERVE_MS		20

/* Pause before trying again when no background worker slot was free. */
#define DSYNC_START_RETRY_MS	1000

/* Launcher-local: the handles of the workers it started, by slot. */
static BackgroundWorkerHandle **worker_handles = NULL;

/* Launcher-local: databases found without the extension that lost their slot. */
static List *absent_dbs = NIL;
static bool warned_full = false;
static bool short_of_slots = false;

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
 * DsyncLauncherScanDatabases
 *		Forget the slots of databases that no longer exist and give every
 *		other connectable, non-template database a slot to be probed,
 *		unless it is known to lack the extension.
 *
 * A database found without the extension keeps its slot (state ABSENT)
 * while slots are plentiful.  When there are more databases than slots,
 * the launcher remembers such databases in its own memory and gives their
 * slots to databases not looked at yet, scanning again whenever a probe
 * ends, so that every database is looked at once and every one with the
 * extension gets a slot as long as they number at most
 * dsync.max_databases.  Returns whether some database had to go without.
 */
static bool
DsyncLauncherScanDatabases(void)
{
	List	   *dbids = NIL;
	Relation	rel;
	TableScanDesc scan;
	HeapTuple	tuple;
	bool		full = false;
	bool		stuck = true;
	ListCell   *lc;
	MemoryContext callercontext = CurrentMemoryContext;

	SetCurrentStatementStartTimestamp();
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

		if (slot->state == DSYNC_DB_FREE || slot->pid != 0 || slot->held_by != 0)
			continue;
		if (!list_member_oid(dbids, slot->dbid))
			slot->state = DSYNC_DB_FREE;
		else if (slot->state == DSYNC_DB_ABSENT)
			absent_dbs = list_append_unique_oid(absent_dbs, slot->dbid);
	}
	foreach(lc, dbids)
	{
		Oid			dbid = lfirst_oid(lc);

		if (DsyncDbSlotLookup(dbid) != NULL || list_member_oid(absent_dbs, dbid))
			continue;
		if (DsyncDbSlotAllocate(dbid, true) == NULL)
			full = true;
	}
	/* Truly short only if every slot holds a database with the extension. */
	for (int i = 0; i < dsync_workers->nslots && full; i++)
		if (dsync_workers->slots[i].state != DSYNC_DB_ACTIVE)
			stuck = false;
	LWLockRelease(dsync_workers->lock);

	/* Forget dropped databases. */
	foreach(lc, absent_dbs)
	{
		if (!list_member_oid(dbids, lfirst_oid(lc)))
			absent_dbs = foreach_delete_current(absent_dbs, lc);
	}
	list_free(dbids);

	if (full && stuck && !warned_full)
		ereport(WARNING,
				(errmsg("dsync cannot look at every database: all %d database slots hold databases with the extension",
						dsync_max_databases),
				 errdetail("Databases without a slot are not served: their expired leases are "
						   "neither cleared nor announced."),
				 errhint("Raise dsync.max_databases and restart the server (the view "
						 "dsync_databases shows the slots).")));
	warned_full = full && stuck;
	return full;
}

/*
 * DsyncLauncherStartWorker
 *		Ask the postmaster for a worker in a slot's database; false if no
 *		background worker slot was free.
 */
static bool
DsyncLauncherStartWorker(int slotno, Oid dbid)
{
	BackgroundWorker worker;
	BackgroundWorkerHandle *handle;
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
		/* Said once until a start succeeds. */
		if (!slot->start_warned)
			ereport(WARNING,
					(errmsg("dsync launcher could not start a worker for database %u", dbid),
					 errdetail("All background worker slots are in use."),
					 errhint("Raise max_worker_processes: dsync needs 1 + dsync.max_workers "
							 "of them, besides parallel query and other extensions.")));
		LWLockAcquire(dsync_workers->lock, LW_EXCLUSIVE);
		slot->start_warned = true;
		if (slot->pid == -1)
			slot->pid = 0;
		slot->restart_after = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
														  DSYNC_START_RETRY_MS);
		LWLockRelease(dsync_workers->lock);
		return false;
	}
	slot->start_warned = false;
	worker_handles[slotno] = handle;
	return true;
}

/*
 * DsyncLauncherDue
 *		When a slot without a worker next needs one (0: not now, nor at a
 *		known time).  The caller holds the worker lock.
 */
static TimestampTz
DsyncLauncherDue(DsyncDbSlot *slot)
{
	TimestampTz due = 0;
	uint64		deadline;

	Assert(LWLockHeldByMe(dsync_workers->lock));

	if (slot->state == DSYNC_DB_PROBE)
		due = slot->wanted_since;
	else if (slot->state == DSYNC_DB_ACTIVE)
	{
		if (pg_atomic_read_u32(&slot->wanted) || pg_atomic_read_u32(&slot->recheck))
			due = slot->wanted_since != 0 ? slot->wanted_since : 1;
		deadline = pg_atomic_read_u64(&slot->next_deadline);
		if (deadline != 0 && (due == 0 || (TimestampTz) deadline < due))
			due = (TimestampTz) deadline;
	}
	if (due != 0 && slot->restart_after > due)
		due = slot->restart_after;
	return due;
}

/*
 * DsyncLauncherUrgency
 *		How soon a served database needs its worker: its next deadline, or
 *		now if events wait.  The least urgent gives way first.
 */
static TimestampTz
DsyncLauncherUrgency(DsyncDbSlot *slot, TimestampTz now)
{
	uint64		deadline = pg_atomic_read_u64(&slot->next_deadline);

	if (slot->state == DSYNC_DB_PROBE)
		return now;
	if (DsyncQueueBytes(slot, NULL) > 0)
		deadline = (uint64) now;
	return deadline == 0 ? DT_NOEND : (TimestampTz) deadline;
}

/*
 * DsyncLauncherStep
 *		One round: start workers where work is due, ask one to make way if
 *		none is free; returns how long the launcher may sleep (-1: until
 *		woken).
 */
static long
DsyncLauncherStep(void)
{
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz wake = 0;
	int			running = 0;
	int		   *due_slots = palloc(sizeof(int) * dsync_workers->nslots);
	TimestampTz *due_times = palloc(sizeof(TimestampTz) * dsync_workers->nslots);
	int			ndue = 0;
	int			started = 0;

	LWLockAcquire(dsync_workers->lock, LW_EXCLUSIVE);
	for (int i = 0; i < dsync_workers->nslots; i++)
	{
		DsyncDbSlot *slot = &dsync_workers->slots[i];
		pid_t		pid;
		TimestampTz due;

		/* Forget exited workers; one that died before claiming its slot left it "starting". */
		if (worker_handles[i] &&
			GetBackgroundWorkerPid(worker_handles[i], &pid) == BGWH_STOPPED)
		{
			pfree(worker_handles[i]);
			worker_handles[i] = NULL;
			if (slot->pid == -1)
			{
				slot->pid = 0;
				slot->restart_after = TimestampTzPlusMilliseconds(now, dsync_restart_delay);
			}
		}
		if (slot->pid != 0 || worker_handles[i] != NULL)
		{
			if (slot->state != DSYNC_DB_FREE)
				running++;
			continue;
		}
		if (slot->held_by != 0)
		{
			/* A holder that died without letting go no longer counts. */
			if (BackendPidGetProc(slot->held_by) != NULL)
			{
				wake = (wake == 0 || TimestampTzPlusMilliseconds(now, 1000) < wake) ?
					TimestampTzPlusMilliseconds(now, 1000) : wake;
				continue;
			}
			slot->held_by = 0;
		}
		due = DsyncLauncherDue(slot);
		if (due == 0)
			continue;
		if (due > now)
		{
			wake = (wake == 0 || due < wake) ? due : wake;
			continue;
		}
		/* Due: keep the list in order of due time (insertion sort). */
		{
			int			j = ndue++;

			while (j > 0 && due_times[j - 1] > due)
			{
				due_slots[j] = due_slots[j - 1];
				due_times[j] = due_times[j - 1];
				j--;
			}
			due_slots[j] = i;
			due_times[j] = due;
		}
	}
	for (int k = 0; k < ndue && running + started < DSYNC_DB_WORKERS; k++)
	{
		DsyncDbSlot *slot = &dsync_workers->slots[due_slots[k]];

		slot->pid = -1;			/* starting: see DsyncLifecycleHold */
		due_slots[started++] = due_slots[k];
	}
	LWLockRelease(dsync_workers->lock);

	for (int k = 0; k < started; k++)
		if (!DsyncLauncherStartWorker(due_slots[k], dsync_workers->slots[due_slots[k]].dbid))
			wake = TimestampTzPlusMilliseconds(now, DSYNC_START_RETRY_MS);

	/*
	 * Work is still due and every worker is busy, or dsync.max_workers was
	 * lowered: make room.
	 */
	if (ndue > started || running > DSYNC_DB_WORKERS)
	{
		bool		over = running > DSYNC_DB_WORKERS;

		DsyncDbSlot *victim = NULL;
		TimestampTz victim_urgency = 0;
		TimestampTz settled = TimestampTzPlusMilliseconds(now, -DSYNC_MIN_SERVE_MS);

		LWLockAcquire(dsync_workers->lock, LW_SHARED);
		for (int i = 0; i < dsync_workers->nslots; i++)
		{
			DsyncDbSlot *slot = &dsync_workers->slots[i];
			TimestampTz urgency;

			if (slot->pid <= 0 || slot->state == DSYNC_DB_FREE ||
				!slot->settled || slot->serving_since == 0 || slot->serving_since > settled ||
				pg_atomic_read_u32(&slot->yield))
				continue;
			urgency = DsyncLauncherUrgency(slot, now);
			/* Only a database with nothing due now makes way (unless over budget). */
			if ((urgency > now || over) && (victim == NULL || urgency > victim_urgency))
			{
				victim = slot;
				victim_urgency = urgency;
			}
		}
		LWLockRelease(dsync_workers->lock);
		if (victim != NULL)
		{
			int			procno = victim->pgprocno;

			pg_atomic_write_u32(&victim->yield, 1);
			if (procno >= 0)
				SetLatch(&ProcGlobal->allProcs[procno].procLatch);
		}
		/* Look again soon: a worker may be settling or about to leave. */
		wake = TimestampTzPlusMilliseconds(now, victim ? 100 : DSYNC_MIN_SERVE_MS);
		/* (A worker that settles wakes the launcher too.) */
	}

	pfree(due_slots);
	pfree(due_times);
	if (wake == 0)
		return -1;
	return wake > now ? (long) ((wake - now + 999) / 1000) : 0;
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
 *		workers, sleep until woken (by a backend, a worker's exit or start,
 *		or a deadline) or until the next deadline of an unserved database.
 */
void
dsync_launcher_main(Datum arg)
{
	pqsignal(SIGTERM, die);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);

	worker_handles = MemoryContextAllocZero(TopMemoryContext,
											sizeof(BackgroundWorkerHandle *) *
											dsync_workers->nslots);
	before_shmem_exit(DsyncLauncherExit, (Datum) 0);
	LWLockAcquire(dsync_workers->lock, LW_EXCLUSIVE);
	dsync_workers->launcher_pid = MyProcPid;
	dsync_workers->launcher_pgprocno = DsyncProcNumber(MyProc);
	dsync_workers->rescan = true;
	/* Workers a previous launcher was starting have started or failed. */
	for (int i = 0; i < dsync_workers->nslots; i++)
		if (dsync_workers->slots[i].pid == -1)
			dsync_workers->slots[i].pid = 0;
	LWLockRelease(dsync_workers->lock);

	DsyncEphemeralOpen();
	ereport(LOG, (errmsg("dsync launcher started")));
	short_of_slots = false;

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
		/* While slots are short, every round: a probe may have freed one. */
		if (rescan || short_of_slots)
			short_of_slots = DsyncLauncherScanDatabases();

		sleep_ms = DsyncLauncherStep();
		(void) WaitLatch(MyLatch,
						 WL_LATCH_SET | WL_EXIT_ON_PM_DEATH |
						 (sleep_ms >= 0 ? WL_TIMEOUT : 0),
						 sleep_ms, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
}
