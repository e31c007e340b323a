/*-------------------------------------------------------------------------
 *
 * fenceddl.c
 *		What DDL does to a fenced table's mark: a dropped table's mark (and
 *		its binding) goes with it, a detached partition starts at its
 *		partitioned table's mark, CREATE TRIGGER ... dsync_fenced('column',
 *		'lease') binds the table to the lease; and what a restore does.
 *
 * A table's mark is a row of dsync_fence keyed by the table's name (so that
 * pg_dump carries it to the restored table of that name) and tied to the
 * table by its OID (relid; fence.c replaces a row made for another table
 * of the same name).  The object-access hook removes the mark when its
 * table is dropped, however that happens: DROP TABLE, DROP SCHEMA ...
 * CASCADE, DROP OWNED, and the end of the session for a temporary table,
 * so that no mark outlives its table (and a reused OID never finds one).
 *
 * A partition's writers are guarded by the mark of its partitioned root.
 * Detached, it is a table of its own, whose mark is keyed by its own name
 * and would start from nothing: a writer with a token the root refuses
 * could write to it.  The utility hook notes the root before ALTER TABLE
 * ... DETACH PARTITION (CONCURRENTLY and FINALIZE too) and, once the
 * partition is detached, raises the table's own mark to the root's, in
 * the transaction that detaches it (the last one, for CONCURRENTLY).
 *
 * Rows of dsync_fence that SQL inserts are a restore's (pg_dump dumps the
 * marks; dsync writes its tables below the executor): the table's
 * trigger ties a table's mark to the table of its name, drops it if there
 * is none, and notes the names the row binds for grants (boundmap.c),
 * since the shared map was filled before the rows existed.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xlog.h"
#include "catalog/dependency.h"
#include "catalog/namespace.h"
#include "catalog/partition.h"
#include "catalog/pg_class.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "commands/trigger.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "parser/parse_func.h"
#include "storage/lmgr.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/regproc.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

#include "catalog.h"
#include "compat.h"
#include "fence.h"
#include "store.h"
#include "boundmap.h"

/*
 * DsyncFenceDropped
 *		Object-access hook, for a relation being dropped: delete its own
 *		mark, if it has one.  Called before the relation goes, so its name
 *		can still be read.  Any other relation, a database without dsync,
 *		or dsync's own tables going (DROP EXTENSION, DROP SCHEMA ...
 *		CASCADE) are no business of this.
 */
void
DsyncFenceDropped(Oid relid)
{
	char		relkind = get_rel_relkind(relid);
	const DsyncCatalog *catalog;
	text	   *resource;
	DsyncStore	store;
	DsyncScan  *scan;
	DsyncRow   *row;

	if (!DsyncFenceRelkindOk(relkind) ||
		IsBinaryUpgrade || !IsNormalProcessingMode() || RecoveryInProgress())
		return;
	if (OidIsValid(getExtensionOfObject(RelationRelationId, relid)))
		return;
	catalog = DsyncCatalogTry();
	if (catalog == NULL || !catalog->fence_relid)
		return;
	resource = DsyncFenceResourceOf(relid, true);
	if (resource == NULL)
		return;

	DsyncStoreOpenCatalog(&store, catalog, DSYNC_TABLE_FENCE, true);

	/*
	 * Only the table's own mark: a row of that name made for another table
	 * is that one's.  The drop holds the table exclusively, so none of its
	 * writers holds the row, but a grant of a lease it is bound to may be
	 * raising it: queued behind such grants on its turnstile, we find the
	 * row as they left it.
	 */
	for (bool queued = false;;)
	{
		TM_Result	result;

		scan = DsyncScanName(&store, resource);
		row = DsyncScanNext(scan);
		DsyncScanEnd(scan);
		if (row == NULL || row->nulls[Anum_fence_relid - 1] ||
			DatumGetObjectId(row->values[Anum_fence_relid - 1]) != relid)
			break;
		/* Only a table with a mark queues (DROP SCHEMA may drop thousands). */
		if (!queued)
		{
			(void) DsyncFenceTurnstile(catalog, resource, ExclusiveLock, false);
			queued = true;
			continue;
		}
		result = DsyncStoreLock(&store, row, LockTupleExclusive, LockWaitBlock);
		if (result == TM_Ok)
		{
			DsyncStoreDelete(&store, row);
			break;
		}
		if (result == TM_Deleted)
			break;
	}
	DsyncStoreClose(&store);
}

/*
 * DsyncFenceBeforeDetach
 *		Utility hook, before a statement: whether it detaches a partition
 *		from a partitioned table in a database with dsync, and if so the
 *		partition and the root whose mark guards it now.  Looked up without
 *		locks: the statement locks them, and a partition that is gone or is
 *		no partition by then makes it fail.
 */
bool
DsyncFenceBeforeDetach(Node *parsetree, Oid *root, Oid *partition)
{
	AlterTableStmt *stmt;
	ListCell   *lc;

	if (!IsA(parsetree, AlterTableStmt))
		return false;
	stmt = (AlterTableStmt *) parsetree;
	if (stmt->objtype != OBJECT_TABLE)
		return false;
	foreach(lc, stmt->cmds)
	{
		AlterTableCmd *cmd = lfirst_node(AlterTableCmd, lc);
		List	   *ancestors;

		if (cmd->subtype != AT_DetachPartition &&
			cmd->subtype != AT_DetachPartitionFinalize)
			continue;
		*partition = RangeVarGetRelid(castNode(PartitionCmd, cmd->def)->name, NoLock, true);
		if (!OidIsValid(*partition) || !get_rel_relispartition(*partition))
			return false;
		if (!OidIsValid(get_extension_oid("dsync", true)))
			return false;
		ancestors = get_partition_ancestors(*partition);
		*root = llast_oid(ancestors);
		list_free(ancestors);
		return true;
	}
	return false;
}

/*
 * DsyncFenceAfterDetach
 *		Utility hook, after the statement DsyncFenceBeforeDetach noted:
 *		the detached table's own mark starts at its former root's.
 */
void
DsyncFenceAfterDetach(Oid root, Oid partition)
{
	const DsyncCatalog *catalog;

	/* Locked, as a writer would: no DROP between here and the mark. */
	LockRelationOid(root, AccessShareLock);
	LockRelationOid(partition, AccessShareLock);
	if (!SearchSysCacheExists1(RELOID, ObjectIdGetDatum(root)) ||
		!SearchSysCacheExists1(RELOID, ObjectIdGetDatum(partition)) ||
		get_rel_relispartition(partition))
		return;
	catalog = DsyncCatalogTry();
	if (catalog == NULL || !catalog->fence_relid)
		return;
	/*
	 * DETACH ... CONCURRENTLY ends in a transaction of its own, which has
	 * no active snapshot by the time the statement returns; writing a mark
	 * needs one (heap_insert asserts it, for TOAST).
	 */
	if (ActiveSnapshotSet())
		DsyncFenceCarry(catalog, root, partition);
	else
	{
		PushActiveSnapshot(GetTransactionSnapshot());
		DsyncFenceCarry(catalog, root, partition);
		PopActiveSnapshot();
	}
}

/*
 * DsyncFenceAfterCreateTrigger
 *		Utility hook, after CREATE TRIGGER: a trigger that calls this
 *		database's dsync_fenced with a lease as second argument binds its
 *		table's mark (its partitioned root's) to the lease, in the same
 *		transaction, as dsync_fence_bind would.
 */
void
DsyncFenceAfterCreateTrigger(Node *parsetree)
{
	CreateTrigStmt *stmt;
	const DsyncCatalog *catalog;
	Oid			func;
	Oid			relid;

	if (!IsA(parsetree, CreateTrigStmt) || IsBinaryUpgrade)
		return;
	stmt = (CreateTrigStmt *) parsetree;
	if (list_length(stmt->args) != 2)
		return;
	func = LookupFuncName(stmt->funcname, 0, NULL, true);
	if (!OidIsValid(func) || get_extension_oid("dsync", true) == InvalidOid ||
		getExtensionOfObject(ProcedureRelationId, func) != get_extension_oid("dsync", true) ||
		strcmp(get_func_name(func), "dsync_fenced") != 0)
		return;
	catalog = DsyncCatalogTry();
	if (catalog == NULL)
		return;
	/* The statement locked it; a second lookup finds the same table. */
	relid = RangeVarGetRelid(stmt->relation, NoLock, false);
	if (!catalog->fence_relid)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("cannot bind table \"%s\" to lease \"%s\": extension \"dsync\" is older than 1.5",
						get_rel_name(relid), strVal(lsecond(stmt->args))),
				 errhint("Run ALTER EXTENSION dsync UPDATE, or create the trigger without the lease.")));
	/* Binding takes what dsync_fence_bind takes: the right to run it. */
	func = LookupFuncName(list_make2(makeString(get_namespace_name(catalog->namespace)),
									 makeString("dsync_fence_bind")),
						  2, (Oid[]) {TEXTOID, TEXTOID}, true);
	if (!OidIsValid(func) || !DsyncProcExecuteCheck(func))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to bind table \"%s\" to lease \"%s\"",
						get_rel_name(relid), strVal(lsecond(stmt->args))),
				 errdetail("A trigger dsync_fenced('column', 'lease') binds its table as dsync_fence_bind() does, which this role may not execute."),
				 errhint("Have an administrator grant EXECUTE on dsync_fence_bind(text, text), or create the trigger without the lease.")));
	if (ActiveSnapshotSet())
		DsyncFenceBindTable(catalog, relid, cstring_to_text(strVal(lsecond(stmt->args))));
	else
	{
		PushActiveSnapshot(GetTransactionSnapshot());
		DsyncFenceBindTable(catalog, relid, cstring_to_text(strVal(lsecond(stmt->args))));
		PopActiveSnapshot();
	}
}

PG_FUNCTION_INFO_V1(dsync_fence_restored);

/*
 * dsync_fence_restored
 *		Trigger of dsync_fence, BEFORE INSERT FOR EACH ROW (ENABLE ALWAYS):
 *		a restored row.  A table's mark is tied to the table that has its
 *		name now, and skipped if no table has it; a mark of any other
 *		resource has no table.  Its resource and lease are noted in the
 *		bound map before the row is written.
 */
Datum
dsync_fence_restored(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	TupleDesc	desc;
	HeapTuple	tuple;
	Datum		values[Natts_fence];
	bool		nulls[Natts_fence];
	bool		replace[Natts_fence] = {false};
	text	   *resource;
	Oid			relid = InvalidOid;

	if (!CALLED_AS_TRIGGER(fcinfo) || !TRIGGER_FIRED_BY_INSERT(trigdata->tg_event) ||
		!TRIGGER_FIRED_BEFORE(trigdata->tg_event) || !TRIGGER_FIRED_FOR_ROW(trigdata->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("dsync_fence_restored() must be fired BEFORE INSERT FOR EACH ROW")));
	desc = RelationGetDescr(trigdata->tg_relation);
	tuple = trigdata->tg_trigtuple;
	if (desc->natts != Natts_fence)
		return PointerGetDatum(tuple);
	heap_deform_tuple(tuple, desc, values, nulls);
	if (nulls[Anum_fence_resource - 1])
		return PointerGetDatum(tuple);
	resource = DatumGetTextPP(values[Anum_fence_resource - 1]);
	if (strncmp(VARDATA_ANY(resource), "table:", Min(VARSIZE_ANY_EXHDR(resource), 6)) == 0 &&
		VARSIZE_ANY_EXHDR(resource) > 6)
	{
		char	   *name = text_to_cstring(resource) + 6;
		List	   *names = DsyncQualifiedNameList(name);

		relid = RangeVarGetRelid(makeRangeVarFromNameList(names), AccessShareLock, true);
		if (!OidIsValid(relid) || !DsyncFenceRelkindOk(get_rel_relkind(relid)))
			return PointerGetDatum(NULL);
	}
	/*
	 * No turnstile here, as others take to make a mark: a restore inserts
	 * every mark in one transaction, more than the lock table holds, into
	 * a database whose leases are not in use yet.
	 */
	DsyncBoundMapSet(resource);
	if (!nulls[Anum_fence_lease - 1])
		DsyncBoundMapSet(DatumGetTextPP(values[Anum_fence_lease - 1]));
	replace[Anum_fence_relid - 1] = true;
	values[Anum_fence_relid - 1] = ObjectIdGetDatum(relid);
	nulls[Anum_fence_relid - 1] = !OidIsValid(relid);
	return PointerGetDatum(heap_modify_tuple(tuple, desc, values, nulls, replace));
}
