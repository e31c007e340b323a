/*-------------------------------------------------------------------------
 *
 * extdrop.c
 *		DROP EXTENSION dsync while dsync calls run: wait or win, never
 *		deadlock.
 *
 * DROP EXTENSION locks each of dsync's relations in turn as it deletes
 * them, in dependency order, while calls running concurrently (and a
 * backend releasing its session leases on exit) lock the same relations
 * in their own order.  A drop holding one relation while waiting for
 * another that a call holds, the call then wanting the first, is a
 * deadlock, and PostgreSQL cancels one of them (40P01).  So before the
 * drop proper, every relation of the extension is locked here at once,
 * conditionally: if one is busy, whatever was taken is let go and the
 * drop waits for that one relation while holding none of them, then
 * tries again.  Waiting while holding nothing of dsync's, the drop is in
 * no cycle with dsync's calls: it waits for them, or it wins and they
 * wait for it (and then report the extension dropped).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/dependency.h"
#include "catalog/indexing.h"
#include "catalog/pg_class.h"
#include "catalog/pg_depend.h"
#include "catalog/pg_extension.h"
#include "commands/extension.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "storage/lmgr.h"
#include "utils/fmgroids.h"
#include "utils/acl.h"
#include "utils/lsyscache.h"

#include "compat.h"
#include "extdrop.h"

/*
 * ExtDropNamesDsync
 *		Whether a DROP statement drops extension dsync.
 */
static bool
ExtDropNamesDsync(DropStmt *stmt)
{
	ListCell   *lc;

	if (stmt->removeType != OBJECT_EXTENSION)
		return false;
	foreach(lc, stmt->objects)
	{
		Node	   *object = lfirst(lc);

		if (IsA(object, String) && strcmp(strVal(object), "dsync") == 0)
			return true;
	}
	return false;
}

/*
 * ExtDropRelations
 *		The relations that belong to the extension, from pg_depend.
 */
static List *
ExtDropRelations(Oid extension)
{
	Relation	depend = table_open(DependRelationId, AccessShareLock);
	ScanKeyData key[2];
	SysScanDesc scan;
	HeapTuple	tuple;
	List	   *relids = NIL;

	ScanKeyInit(&key[0], Anum_pg_depend_refclassid, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(ExtensionRelationId));
	ScanKeyInit(&key[1], Anum_pg_depend_refobjid, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(extension));
	scan = systable_beginscan(depend, DependReferenceIndexId, true, NULL, 2, key);
	while (HeapTupleIsValid(tuple = systable_getnext(scan)))
	{
		Form_pg_depend dep = (Form_pg_depend) GETSTRUCT(tuple);

		if (dep->deptype == DEPENDENCY_EXTENSION && dep->classid == RelationRelationId)
			relids = lappend_oid(relids, dep->objid);
	}
	systable_endscan(scan);
	table_close(depend, AccessShareLock);
	return relids;
}

/*
 * DsyncExtensionDropLock
 *		Before DROP EXTENSION dsync runs: lock all of the extension's
 *		relations, taking them all at once or waiting while holding none
 *		(see the file comment).  The locks are kept until the drop's
 *		transaction ends, as the drop's own would be.
 */
void
DsyncExtensionDropLock(Node *parsetree)
{
	Oid			extension;
	List	   *relids;

	if (!IsA(parsetree, DropStmt) || !ExtDropNamesDsync((DropStmt *) parsetree))
		return;
	extension = get_extension_oid("dsync", true);
	/* Only its owner may drop it; anybody else must not lock it first. */
	if (!OidIsValid(extension) || !DsyncExtensionOwnercheck(extension, GetUserId()))
		return;					/* the drop itself reports what is wrong */
	relids = ExtDropRelations(extension);

	for (;;)
	{
		Oid			busy = InvalidOid;
		int			taken = 0;
		ListCell   *lc;

		foreach(lc, relids)
		{
			if (!ConditionalLockRelationOid(lfirst_oid(lc), AccessExclusiveLock))
			{
				busy = lfirst_oid(lc);
				break;
			}
			taken++;
		}
		if (!OidIsValid(busy))
			break;
		foreach(lc, relids)
		{
			if (taken-- == 0)
				break;
			UnlockRelationOid(lfirst_oid(lc), AccessExclusiveLock);
		}
		/* Wait for the busy one alone, then try them all again. */
		LockRelationOid(busy, AccessExclusiveLock);
		UnlockRelationOid(busy, AccessExclusiveLock);
		CHECK_FOR_INTERRUPTS();
	}
	list_free(relids);
}
