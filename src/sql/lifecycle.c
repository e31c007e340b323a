/*-------------------------------------------------------------------------
 *
 * lifecycle.c
 *		What the workers must hear about from other backends: CREATE and
 *		DROP EXTENSION, CREATE DATABASE, and statements that need a
 *		database to themselves; and roles that own dsync state.
 *
 * CREATE EXTENSION dsync gives its database a slot in state ACTIVE when it
 * commits, so no restart is needed; DROP EXTENSION (directly or by a
 * cascade, seen by an object-access hook) marks it ABSENT, stops its
 * worker and wakes its waiters so that they report it.  CREATE DATABASE
 * makes the launcher look at pg_database again.
 *
 * A connected worker would make DROP DATABASE, ALTER DATABASE ... RENAME
 * or SET TABLESPACE, and CREATE DATABASE ... TEMPLATE fail with "being
 * accessed by other users".  The utility hook holds the database's slot
 * for the statement, so that the launcher does not start a worker there,
 * and stops the running one first, as TimescaleDB's loader does.  It does
 * so only for a statement that can go ahead (by the database's owner,
 * outside a transaction block), or anybody could stop workers.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>

#include "access/xact.h"
#include "catalog/objectaccess.h"
#include "catalog/pg_class.h"
#include "catalog/pg_database.h"
#include "catalog/pg_extension.h"
#include "commands/dbcommands.h"
#include "commands/defrem.h"
#include "commands/extension.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/timestamp.h"

#include "wait.h"
#include "dbslot.h"
#include "settings.h"
#include "events.h"
#include "workers.h"
#include "lifecycle.h"
#include "role.h"
#include "compat.h"
#include "extdrop.h"
#include "fence.h"

/* How long a utility statement waits for a worker to leave its database. */
#define DSYNC_HOLD_WAIT_MS		10000

static ProcessUtility_hook_type prev_process_utility = NULL;
static object_access_hook_type prev_object_access = NULL;

/* Changes this transaction makes that the workers must hear about. */
static bool probe_at_commit = false;
static bool dropped_at_commit = false;
static bool rescan_at_commit = false;
static bool xact_callback_registered = false;

/*
 * DsyncLifecycleDropped
 *		DROP EXTENSION dsync committed here: the database has no extension
 *		now.  Its queue goes, and its worker (if one runs) is told to look
 *		and leave.  Safe in a commit callback.
 */
static void
DsyncLifecycleDropped(void)
{
	DsyncDbSlot *slot = DsyncDbSlotFind(MyDatabaseId);
	int			procno;

	if (slot == NULL)
		return;
	LWLockAcquire(dsync_workers->lock, LW_EXCLUSIVE);
	if (slot->dbid == MyDatabaseId)
	{
		slot->state = DSYNC_DB_ABSENT;
		pg_atomic_write_u32(&slot->wanted, 0);
		pg_atomic_write_u64(&slot->next_deadline, 0);
	}
	LWLockRelease(dsync_workers->lock);
	/* With no worker to find out, nobody else would free the queue. */
	DsyncQueueLockAll(slot);
	if (slot->dbid == MyDatabaseId && slot->state == DSYNC_DB_ABSENT && slot->pid == 0)
		DsyncQueueReset(slot);
	DsyncQueueUnlockAll(slot);
	pg_atomic_write_u32(&slot->recheck, 1);
	procno = slot->pgprocno;
	if (procno >= 0)
		SetLatch(&ProcGlobal->allProcs[procno].procLatch);
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
			(void) DsyncDbSlotClaim(MyDatabaseId, true);
		if (dropped_at_commit)
			DsyncLifecycleDropped();
		if (rescan_at_commit)
		{
			dsync_workers->rescan = true;
			DsyncLauncherWake();
		}
	}
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT ||
		event == XACT_EVENT_PREPARE)
		probe_at_commit = dropped_at_commit = rescan_at_commit = false;
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
 *		Keep workers out of a database for the length of a statement that
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
	slot = DsyncDbSlotAllocate(dbid, true);
	if (slot == NULL)
	{
		LWLockRelease(dsync_workers->lock);
		return;
	}
	slot->held_by = MyProcPid;
	LWLockRelease(dsync_workers->lock);

	/*
	 * A worker that is starting (pid -1) sees the hold when it claims the
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
 *		The statement is over: a worker may come back (if the database
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
	 * Stop a worker only for a statement that can go ahead: by the
	 * database's owner (or a superuser), outside a transaction block
	 * (where those statements fail anyway, except RENAME).  Anybody else
	 * would get their error only after the worker had been stopped.
	 */
	if (!OidIsValid(dbid) || !DsyncDatabaseOwnercheck(dbid, GetUserId()))
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
	Oid			detached_root = InvalidOid;
	Oid			detached = InvalidOid;
	bool		detaching;

	/* Roles that own dsync state: PostgreSQL's dependency rules (role.c). */
	if (IsA(parsetree, DropRoleStmt) || IsA(parsetree, DropOwnedStmt) ||
		IsA(parsetree, ReassignOwnedStmt))
		DsyncRoleUtility(parsetree);
	DsyncListenUtility(parsetree);
	DsyncExtensionDropLock(parsetree);
	/* A detached partition's mark starts at its root's (fenceddl.c). */
	detaching = DsyncFenceBeforeDetach(parsetree, &detached_root, &detached);

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

	if (detaching)
		DsyncFenceAfterDetach(detached_root, detached);
	/* dsync_fenced('column', 'lease') binds the table to the lease (fenceddl.c). */
	DsyncFenceAfterCreateTrigger(parsetree);

	/* Any CREATE EXTENSION may have brought dsync along (CASCADE). */
	if (IsA(parsetree, CreateExtensionStmt) &&
		OidIsValid(get_extension_oid("dsync", true)) &&
		!DsyncDbIsTemplate(MyDatabaseId))
	{
		DsyncLifecycleNoteAtCommit(&probe_at_commit);
		if (!DsyncDbSlotAvailable(MyDatabaseId))
			DsyncDbSlotWarnFull(false);
	}
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
		DsyncLifecycleNoteAtCommit(&dropped_at_commit);
		/* Whoever waits in a dsync call here must stop, not hang on. */
		DsyncWakeDatabaseAtEnd();
	}
	/* A fenced table's mark goes with it (fenceddl.c). */
	if (access == OAT_DROP && classId == RelationRelationId && subId == 0)
		DsyncFenceDropped(objectId);
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

