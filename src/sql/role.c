/*-------------------------------------------------------------------------
 *
 * role.c
 *		Roles that own dsync state: DROP ROLE, DROP OWNED BY and
 *		REASSIGN OWNED BY.
 *
 * Every lease, permit, membership, signal and semaphore definition records
 * the role that made it, and only roles with that role's privileges may
 * act on it.  These are rows, not catalog objects, so pg_shdepend knows
 * nothing of them and DROP ROLE would succeed and leave them owned by a
 * role that no longer exists ("unknown (OID=n)").  PostgreSQL's rule for
 * objects that depend on a role is that DROP ROLE fails until they are
 * dropped or given away; dsync follows it, through the utility hook, for
 * the database the command runs in:
 *
 *	- DROP ROLE fails (SQLSTATE 2BP01) while the role holds a live lease
 *	  or permit, has a live membership, owns a pending signal, a
 *	  semaphore definition or a fence, or holds a live ephemeral lease
 *	  (in shared memory: in any database, ephowner.c);
 *	- DROP OWNED BY releases its leases and permits, ends its memberships,
 *	  drops its signals and semaphore definitions (with events, as the
 *	  functions would), and gives its fences to the bootstrap superuser
 *	  (a fence's mark must never go back);
 *	- REASSIGN OWNED BY gives them to the new role.
 *
 * A backend sees only its own database's tables, so state in other
 * databases is not checked (but for ephemeral leases): DROP OWNED BY must be run in each database, as
 * PostgreSQL documents for its own objects.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/pg_authid.h"
#include "commands/dbcommands.h"
#include "commands/extension.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "utils/acl.h"
#include "utils/builtins.h"

#include "catalog.h"
#include "ephemeral.h"
#include "wait.h"
#include "store.h"
#include "lease.h"
#include "events.h"
#include "role.h"

/* What to do with the rows a role owns. */
typedef enum RoleAction
{
	ROLE_COUNT,					/* count the live ones */
	ROLE_DROP_OWNED,			/* release, leave, drop them */
	ROLE_REASSIGN				/* give them to another role */
} RoleAction;

/* The owner column of each table. */
static const int role_owner_attnum[DSYNC_NUM_TABLES] = {
	[DSYNC_TABLE_LEASE] = Anum_lease_owner,
	[DSYNC_TABLE_SEMAPHORE] = Anum_semaphore_owner,
	[DSYNC_TABLE_SIGNAL] = Anum_signal_owner,
	[DSYNC_TABLE_MEMBER] = Anum_member_owner,
	[DSYNC_TABLE_PERMIT] = Anum_lease_owner,
	[DSYNC_TABLE_FENCE] = Anum_fence_owner,
};

/*
 * RoleRowLive
 *		Whether a row is something its owner still has: a live lease or
 *		permit, a live membership, a pending signal, a definition.
 */
static bool
RoleRowLive(DsyncTable table, const DsyncRow *row)
{
	TimestampTz now = GetCurrentTimestamp();

	switch (table)
	{
		case DSYNC_TABLE_LEASE:
		case DSYNC_TABLE_PERMIT:
			return DsyncRowIsLive(row, now);
		case DSYNC_TABLE_MEMBER:
			return DatumGetTimestampTz(row->values[Anum_member_expires_at - 1]) > now;
		default:
			return true;
	}
}

/*
 * RoleRowOwnedBy
 *		Whether a row's owner is roleid.
 */
static bool
RoleRowOwnedBy(DsyncTable table, const DsyncRow *row, Oid roleid)
{
	int			attnum = role_owner_attnum[table];

	return !row->nulls[attnum - 1] && DatumGetObjectId(row->values[attnum - 1]) == roleid;
}

/*
 * RoleDropRow
 *		DROP OWNED BY for one locked row: what the role's own calls would
 *		do to let it go.
 */
static void
RoleDropRow(DsyncStore *store, DsyncRow *row, List **semaphores)
{
	switch (store->table)
	{
		case DSYNC_TABLE_LEASE:
		case DSYNC_TABLE_PERMIT:
			DsyncLeaseRelease(store, row);
			break;
		case DSYNC_TABLE_MEMBER:
			DsyncStoreDelete(store, row);
			DsyncEventRecordRaw(DSYNC_EVENT_LEFT,
								DatumGetTextPP(row->values[Anum_member_grp - 1]),
								DatumGetTextPP(row->values[Anum_member_member - 1]), 0);
			break;
		case DSYNC_TABLE_FENCE:

			/*
			 * A mark is a record of what was refused, not something the role
			 * holds: deleting it would let a stale token through.  It goes to
			 * the bootstrap superuser instead.
			 */
			row->values[Anum_fence_owner - 1] = ObjectIdGetDatum(BOOTSTRAP_SUPERUSERID);
			DsyncStoreUpdate(store, row);
			break;
		case DSYNC_TABLE_SEMAPHORE:
			DsyncStoreDelete(store, row);
			*semaphores = lappend(*semaphores,
								  DatumGetTextPP(row->values[Anum_semaphore_name - 1]));
			break;
		default:
			DsyncStoreDelete(store, row);
			break;
	}
}

/*
 * RoleScanTable
 *		Count, drop or reassign what roleid owns in one table; returns how
 *		many rows it counted or changed.
 */
static int64
RoleScanTable(const DsyncCatalog *catalog, DsyncTable table, Oid roleid,
			  RoleAction action, Oid newrole)
{
	DsyncStore	store;
	DsyncScan  *scan;
	DsyncRow   *row;
	List	   *semaphores = NIL;
	ListCell   *lc;
	int64		count = 0;

	if (!OidIsValid(catalog->rels[table]))
		return 0;
	DsyncStoreOpenCatalog(&store, catalog, table, action != ROLE_COUNT);
	store.tolerant = true;
	scan = DsyncScanAll(&store);
	while ((row = DsyncScanNext(scan)) != NULL)
	{
		if (!RoleRowOwnedBy(table, row, roleid) || !RoleRowLive(table, row) ||
			action == ROLE_COUNT)
		{
			if (action == ROLE_COUNT && RoleRowOwnedBy(table, row, roleid) &&
				RoleRowLive(table, row))
				count++;
			DsyncRowFree(&store, row);
			continue;
		}
		if (DsyncStoreLock(&store, row, LockTupleExclusive, LockWaitBlock) != TM_Ok ||
			!RoleRowOwnedBy(table, row, roleid) || !RoleRowLive(table, row))
			continue;			/* changed meanwhile: it is not the role's now */
		if (action == ROLE_REASSIGN)
		{
			row->values[role_owner_attnum[table] - 1] = ObjectIdGetDatum(newrole);
			DsyncStoreUpdate(&store, row);
		}
		else
			RoleDropRow(&store, row, &semaphores);
		count++;
	}
	DsyncScanEnd(scan);
	DsyncStoreClose(&store);

	foreach(lc, semaphores)
	{
		DsyncPermitDropFree(catalog, lfirst(lc));
		DsyncWakeAtEnd(DsyncWaitKey(lfirst(lc)));
	}
	return count;
}

/*
 * RoleCheckDrop
 *		DROP ROLE: refuse while the role owns live dsync state here.
 */
static void
RoleCheckDrop(const DsyncCatalog *catalog, Oid roleid, const char *rolename)
{
	int64		leases = RoleScanTable(catalog, DSYNC_TABLE_LEASE, roleid, ROLE_COUNT, InvalidOid) +
		RoleScanTable(catalog, DSYNC_TABLE_PERMIT, roleid, ROLE_COUNT, InvalidOid);
	int64		members = RoleScanTable(catalog, DSYNC_TABLE_MEMBER, roleid, ROLE_COUNT, InvalidOid);
	int64		signals = RoleScanTable(catalog, DSYNC_TABLE_SIGNAL, roleid, ROLE_COUNT, InvalidOid);
	int64		semaphores = RoleScanTable(catalog, DSYNC_TABLE_SEMAPHORE, roleid, ROLE_COUNT,
										   InvalidOid);
	int64		fences = RoleScanTable(catalog, DSYNC_TABLE_FENCE, roleid, ROLE_COUNT, InvalidOid);
	int64		ephemeral;
	int64		ephemeral_elsewhere;
	char	   *detail;

	/* Ephemeral leases are in shared memory, which shows every database's. */
	DsyncEphemeralRoleCount(roleid, &ephemeral, &ephemeral_elsewhere);
	leases += ephemeral;
	if (leases + members + signals + semaphores + fences + ephemeral_elsewhere == 0)
		return;
	/* One count per phrase, each in the singular or the plural it needs. */
	detail = psprintf("In database \"%s\": %s, %s, %s, %s, %s.",
					  get_database_name(MyDatabaseId),
					  psprintf(ngettext("%lld lease or permit", "%lld leases or permits",
										(unsigned long) leases), (long long) leases),
					  psprintf(ngettext("%lld membership", "%lld memberships",
										(unsigned long) members), (long long) members),
					  psprintf(ngettext("%lld pending signal", "%lld pending signals",
										(unsigned long) signals), (long long) signals),
					  psprintf(ngettext("%lld semaphore definition", "%lld semaphore definitions",
										(unsigned long) semaphores), (long long) semaphores),
					  psprintf(ngettext("%lld fence", "%lld fences",
										(unsigned long) fences), (long long) fences));
	ereport(ERROR,
			(errcode(ERRCODE_DEPENDENT_OBJECTS_STILL_EXIST),
			 errmsg("role \"%s\" cannot be dropped because it owns dsync leases or other dsync state",
					rolename),
			 ephemeral_elsewhere > 0 ?
			 errdetail_plural("%s Besides, %lld ephemeral lease in another database.",
							  "%s Besides, %lld ephemeral leases in other databases.",
							  (unsigned long) ephemeral_elsewhere, detail,
							  (long long) ephemeral_elsewhere) :
			 errdetail_internal("%s", detail),
			 errhint("Release them, or run DROP OWNED BY or REASSIGN OWNED BY in each database concerned first.")));
}

/*
 * RoleOids
 *		The OIDs of a list of RoleSpecs, leaving out ones that do not exist.
 */
static List *
RoleOids(List *roles)
{
	List	   *oids = NIL;
	ListCell   *lc;

	foreach(lc, roles)
	{
		Oid			roleid = get_rolespec_oid(lfirst(lc), true);

		if (OidIsValid(roleid))
			oids = lappend_oid(oids, roleid);
	}
	return oids;
}

/*
 * RoleMayActFor
 *		Whether the current role passes the check PostgreSQL itself makes
 *		before DROP OWNED or REASSIGN OWNED for these roles: if not, the
 *		command fails anyway, and dsync does nothing first.
 */
static bool
RoleMayActFor(List *roleids)
{
	ListCell   *lc;

	foreach(lc, roleids)
		if (!has_privs_of_role(GetUserId(), lfirst_oid(lc)))
			return false;
	return true;
}

/*
 * RoleScanAll
 *		DROP OWNED or REASSIGN OWNED of roleids, in every table.
 */
static void
RoleScanAll(List *roleids, RoleAction action, Oid newrole)
{
	const DsyncCatalog *catalog = DsyncCatalogFromExtension();
	ListCell   *lc;

	foreach(lc, roleids)
	{
		for (int table = 0; table < DSYNC_NUM_TABLES; table++)
			(void) RoleScanTable(catalog, table, lfirst_oid(lc), action, newrole);
		/* Ephemeral leases: at once, as everything about them is. */
		if (action == ROLE_REASSIGN)
			DsyncEphemeralRoleReassign(lfirst_oid(lc), newrole);
		else
			DsyncEphemeralRoleDrop(lfirst_oid(lc));
	}
}

/*
 * DsyncRoleUtility
 *		Called by the utility hook before DROP ROLE, DROP OWNED and
 *		REASSIGN OWNED run, in a database that has the extension.
 */
void
DsyncRoleUtility(Node *parsetree)
{
	const DsyncCatalog *catalog;
	List	   *roleids;
	ListCell   *lc;

	if (!OidIsValid(get_extension_oid("dsync", true)) || RecoveryInProgress())
		return;

	switch (nodeTag(parsetree))
	{
		case T_DropRoleStmt:
			if (!has_createrole_privilege(GetUserId()))
				return;
			catalog = DsyncCatalogFromExtension();
			foreach(lc, ((DropRoleStmt *) parsetree)->roles)
			{
				RoleSpec   *spec = lfirst(lc);
				Oid			roleid = get_rolespec_oid(spec, true);

				if (OidIsValid(roleid))
					RoleCheckDrop(catalog, roleid, get_rolespec_name(spec));
			}
			break;
		case T_DropOwnedStmt:
			roleids = RoleOids(((DropOwnedStmt *) parsetree)->roles);
			if (!RoleMayActFor(roleids))
				return;
			RoleScanAll(roleids, ROLE_DROP_OWNED, InvalidOid);
			break;
		case T_ReassignOwnedStmt:
			{
				ReassignOwnedStmt *stmt = (ReassignOwnedStmt *) parsetree;
				Oid			newrole = get_rolespec_oid(stmt->newrole, true);

				roleids = RoleOids(stmt->roles);
				if (!OidIsValid(newrole) || !RoleMayActFor(roleids) ||
					!has_privs_of_role(GetUserId(), newrole))
					return;
				RoleScanAll(roleids, ROLE_REASSIGN, newrole);
			}
			break;
		default:
			break;
	}
}
