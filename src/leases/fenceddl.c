/*-------------------------------------------------------------------------
 *
 * fenceddl.c
 *		What DDL does to a fenced table's mark: a dropped table's mark goes
 *		with it, and a detached partition starts at its partitioned table's
 *		mark.
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
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"
#include "catalog/dependency.h"
#include "catalog/namespace.h"
#include "catalog/partition.h"
#include "catalog/pg_class.h"
#include "commands/extension.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "storage/lmgr.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"

#include "catalog.h"
#include "fence.h"
#include "store.h"

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

	if ((relkind != RELKIND_RELATION && relkind != RELKIND_PARTITIONED_TABLE) ||
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
	scan = DsyncScanName(&store, resource);
	row = DsyncScanNext(scan);
	DsyncScanEnd(scan);

	/*
	 * Only the table's own mark: a row of that name made for another table
	 * is that one's.  The drop holds the table exclusively, so none of its
	 * writers holds the row; a conflict means somebody else changed it
	 * meanwhile, and then it is not this table's to remove.
	 */
	if (row != NULL && !row->nulls[Anum_fence_relid - 1] &&
		DatumGetObjectId(row->values[Anum_fence_relid - 1]) == relid &&
		DsyncStoreLock(&store, row, LockTupleExclusive, LockWaitBlock) == TM_Ok &&
		!row->nulls[Anum_fence_relid - 1] &&
		DatumGetObjectId(row->values[Anum_fence_relid - 1]) == relid)
		DsyncStoreDelete(&store, row);
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
	DsyncFenceCarry(catalog, root, partition);
}
