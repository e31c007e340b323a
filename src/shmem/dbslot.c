/*-------------------------------------------------------------------------
 *
 * dbslot.c
 *		The table of database slots in shared memory: which databases have
 *		the extension, which have a worker now, and what they wait for.
 *
 * One slot per database that has, or may have, the extension
 * (dsync.max_databases of them).  A slot's state says what is known of the
 * database, its pid whether a worker serves it now; the launcher moves
 * slots from state to state, and workers, committing backends and the
 * utility hooks report to it.  The table of states and what moves a slot
 * from one to the next, the flags through which lower layers ask for a
 * worker, and the lock order: README.md in this folder.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_database.h"
#include "commands/dbcommands.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "stats.h"
#include "dbslot.h"
#include "queue.h"

/* Backend-local cache of this database's slot. */
static DsyncDbSlot *my_slot = NULL;

/*
 * DsyncDbSlotLookup
 *		The slot of a database, or NULL.  The caller holds the worker lock.
 */
DsyncDbSlot *
DsyncDbSlotLookup(Oid dbid)
{
	Assert(LWLockHeldByMe(dsync_workers->lock));

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
 *		A slot for a database, made (in state PROBE) if it has none.  With
 *		reuse_absent, the slot of a database known to lack the extension is
 *		taken when no slot is free (for a database that has it: the other
 *		one is probed again if it ever matters).  NULL if all are in use.
 *		The caller holds the worker lock exclusively.
 */
DsyncDbSlot *
DsyncDbSlotAllocate(Oid dbid, bool reuse_absent)
{
	DsyncDbSlot *slot = DsyncDbSlotLookup(dbid);
	DsyncDbSlot *absent = NULL;

	Assert(LWLockHeldByMeInMode(dsync_workers->lock, LW_EXCLUSIVE));

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
		if (reuse_absent && candidate->state == DSYNC_DB_ABSENT &&
			candidate->pid == 0 && candidate->held_by == 0 && absent == NULL)
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
	slot->serving_since = 0;
	slot->wanted_since = GetCurrentTimestamp();
	slot->start_warned = false;
	memset(slot->senders, 0, sizeof(slot->senders));
	pg_atomic_write_u32(&slot->recheck, 0);
	pg_atomic_write_u32(&slot->yield, 0);
	pg_atomic_write_u32(&slot->wanted, 0);
	pg_atomic_write_u64(&slot->next_deadline, 0);
	pg_atomic_write_u64(&slot->ephemeral_deadline, 0);
	pg_atomic_write_u64(&slot->queued_grants, 0);
	/*
	 * Until its worker has looked at the event log (DsyncEventLogResume),
	 * assume a watcher was there before a restart or failover and is
	 * reconnecting: its events must be in the log.
	 */
	slot->left_placeholder = (uint64) GetCurrentTimestamp();
	pg_atomic_write_u64(&slot->watcher_left_at, slot->left_placeholder);
	pg_atomic_write_u32(&slot->held_map_ready, 0);
	pg_atomic_write_u32(&slot->bound_map_ready, 0);
	pg_atomic_write_u64(&slot->reaped_until, 0);
	for (int i = 0; i < DSYNC_NUM_COUNTERS; i++)
		pg_atomic_write_u64(&slot->counters[i], 0);
	/* Under the queue's locks, so that no event lands in another database's queue. */
	DsyncQueueLockAll(slot);
	slot->dbid = dbid;
	DsyncQueueReset(slot);
	DsyncQueueUnlockAll(slot);
	return slot;
}

/*
 * DsyncDbIsTemplate
 *		Whether a database is a template (pg_database.datistemplate), which
 *		dsync does not serve.  Needs a transaction; not for commit callbacks.
 */
bool
DsyncDbIsTemplate(Oid dbid)
{
	HeapTuple	tuple;
	bool		result = false;

	tuple = SearchSysCache1(DATABASEOID, ObjectIdGetDatum(dbid));
	if (HeapTupleIsValid(tuple))
	{
		result = ((Form_pg_database) GETSTRUCT(tuple))->datistemplate;
		ReleaseSysCache(tuple);
	}
	return result;
}

/*
 * DsyncDbSlotAvailable
 *		Whether a database has a slot or could be given one now.
 */
bool
DsyncDbSlotAvailable(Oid dbid)
{
	bool		available = false;

	LWLockAcquire(dsync_workers->lock, LW_SHARED);
	for (int i = 0; i < dsync_workers->nslots && !available; i++)
	{
		DsyncDbSlot *slot = &dsync_workers->slots[i];

		available = slot->state == DSYNC_DB_FREE ||
			(slot->dbid == dbid) ||
			(slot->state == DSYNC_DB_ABSENT && slot->pid == 0 && slot->held_by == 0);
	}
	LWLockRelease(dsync_workers->lock);
	return available;
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
 * DsyncLauncherWake
 *		Set the launcher's latch, if it runs.
 *
 * It lives with the slots, not the launcher, because setting a slot's flags
 * and then this latch is how any layer asks for a worker without calling up
 * into workers/.
 */
void
DsyncLauncherWake(void)
{
	int			procno = dsync_workers->launcher_pgprocno;

	if (procno >= 0)
		SetLatch(&ProcGlobal->allProcs[procno].procLatch);
}

/*
 * DsyncDbSlotWarnFull
 *		Warn the client that this database has no slot, so that its lease
 *		changes go unannounced and its expiries uncleared, and what to
 *		change.  in_commit: said of a transaction whose changes are being
 *		committed now, rather than of the database from now on.
 */
void
DsyncDbSlotWarnFull(bool in_commit)
{
	ereport(WARNING,
			(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
			 errmsg("dsync cannot serve database \"%s\": all %d database slots are in use",
					get_database_name(MyDatabaseId), dsync_max_databases),
			 in_commit ?
			 errdetail("This transaction's lease changes are committed but not announced, "
					   "and expired leases here are not cleared until a slot is free.") :
			 errdetail("Lease changes here will not be announced, and expired leases "
					   "will not be cleared, until a slot is free."),
			 errhint("Raise dsync.max_databases and restart the server; the view "
					 "dsync_databases shows which databases have a slot.")));
}

/*
 * DsyncDbSlotClaim
 *		Make sure a database has a slot; with has_extension (a backend has
 *		just used it there), one in state ACTIVE, served when work is due.
 *		NULL if every slot is in use.  Safe in commit callbacks: it only
 *		takes an LWLock and sets a latch.
 */
DsyncDbSlot *
DsyncDbSlotClaim(Oid dbid, bool has_extension)
{
	DsyncDbSlot *slot;

	LWLockAcquire(dsync_workers->lock, LW_EXCLUSIVE);
	slot = DsyncDbSlotAllocate(dbid, has_extension);
	if (slot && (slot->state == DSYNC_DB_ABSENT || (has_extension && slot->state == DSYNC_DB_PROBE)))
	{
		slot->state = has_extension ? DSYNC_DB_ACTIVE : DSYNC_DB_PROBE;
		slot->wanted_since = GetCurrentTimestamp();
		slot->restart_after = 0;
		/* A worker comes to read the tables, so service starts at once. */
		if (has_extension)
			pg_atomic_write_u32(&slot->wanted, 1);
	}
	if (slot && slot->state == DSYNC_DB_PROBE)
		slot->restart_after = 0;
	LWLockRelease(dsync_workers->lock);
	if (dbid == MyDatabaseId)
		my_slot = slot;
	DsyncLauncherWake();
	return slot;
}

/*
 * DsyncDbSlotWant
 *		Events wait in a database's queue and no worker may be running:
 *		ask the launcher for one.  Safe in commit callbacks.
 */
void
DsyncDbSlotWant(DsyncDbSlot *slot)
{
	int			procno = slot->pgprocno;

	if (procno >= 0)
	{
		SetLatch(&ProcGlobal->allProcs[procno].procLatch);
		return;
	}
	if (pg_atomic_exchange_u32(&slot->wanted, 1) == 0)
	{
		LWLockAcquire(dsync_workers->lock, LW_EXCLUSIVE);
		slot->wanted_since = GetCurrentTimestamp();
		LWLockRelease(dsync_workers->lock);
		DsyncLauncherWake();
	}
}

/*
 * DsyncDbStateName
 *		A state as the view dsync_databases shows it.
 */
const char *
DsyncDbStateName(DsyncDbState state)
{
	switch (state)
	{
		case DSYNC_DB_PROBE:
			return "probe";
		case DSYNC_DB_ACTIVE:
			return "active";
		case DSYNC_DB_ABSENT:
			return "absent";
		default:
			return "free";
	}
}

/*
 * DsyncDbSlotSenderBegin
 *		The calling worker serves the slot's database from now on: note it
 *		among the database's senders.  The caller holds the worker lock.
 */
void
DsyncDbSlotSenderBegin(DsyncDbSlot *slot, int pid)
{
	Assert(LWLockHeldByMeInMode(dsync_workers->lock, LW_EXCLUSIVE));
	Assert(pid > 0);

	memmove(&slot->senders[1], &slot->senders[0],
			sizeof(DsyncSender) * (DSYNC_SENDER_HISTORY - 1));
	slot->senders[0].pid = pid;
	slot->senders[0].until = 0;
}

/*
 * DsyncDbSlotSenderEnd
 *		A worker stops serving the slot's database.  The caller holds the
 *		worker lock.
 */
void
DsyncDbSlotSenderEnd(DsyncDbSlot *slot, int pid)
{
	Assert(LWLockHeldByMeInMode(dsync_workers->lock, LW_EXCLUSIVE));

	for (int i = 0; i < DSYNC_SENDER_HISTORY; i++)
		if (slot->senders[i].pid == pid && slot->senders[i].until == 0)
			slot->senders[i].until = GetCurrentTimestamp();
}

