/*-------------------------------------------------------------------------
 *
 * compat.h
 *		The differences between the PostgreSQL majors dsync supports (15,
 *		16, 17, 18), in one place.
 *
 * Each macro or inline function below has the newest server's meaning and
 * maps it onto the older ones, so the rest of the source is written once.
 * Nothing here changes behaviour: only the spelling of the same call.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DSYNC_COMPAT_H
#define DSYNC_COMPAT_H

#include "postgres.h"

#include "access/genam.h"
#include "access/heapam.h"
#include "access/xact.h"
#include "catalog/pg_database.h"
#include "optimizer/pathnode.h"
#include "storage/proc.h"
#include "utils/acl.h"
#include "utils/relcache.h"

#if PG_VERSION_NUM < 150000
#error "dsync needs PostgreSQL 15 or later"
#endif

/* The varlena macros (VARSIZE_ANY_EXHDR and the like) moved in 16. */
#if PG_VERSION_NUM >= 160000
#include "varatt.h"
#endif

/* What the FDW's EXPLAIN callback uses moved to headers of its own in 18. */
#if PG_VERSION_NUM >= 180000
#include "commands/explain_format.h"
#include "commands/explain_state.h"
#else
#include "commands/explain.h"
#endif

/*
 * A PGPROC's number, which indexes ProcGlobal->allProcs: a field before
 * 17, a macro from 17 on.
 */
#if PG_VERSION_NUM >= 170000
#define DsyncProcNumber(proc)	GetNumberFromPGProc(proc)
#else
#define DsyncProcNumber(proc)	((proc)->pgprocno)
#endif

/*
 * This backend's local transaction id: a field of PGPROC before 17, of its
 * virtual transaction id from 17 on.
 */
#if PG_VERSION_NUM >= 170000
#define DsyncLocalXid()			(MyProc->vxid.lxid)
#else
#define DsyncLocalXid()			(MyProc->lxid)
#endif

/*
 * A wait event set that lives as long as the backend: tied to a memory
 * context before 17, to a resource owner (none) from 17 on.
 */
#if PG_VERSION_NUM >= 170000
#define DsyncCreateWaitEventSet(nevents) CreateWaitEventSet(NULL, (nevents))
#else
#define DsyncCreateWaitEventSet(nevents) CreateWaitEventSet(TopMemoryContext, (nevents))
#endif

/*
 * Whether a role owns a database or an extension: one function per object
 * kind before 16, one for all kinds from 16 on.
 */
#if PG_VERSION_NUM >= 160000
#define DsyncDatabaseOwnercheck(dbid, roleid) \
	object_ownercheck(DatabaseRelationId, (dbid), (roleid))
#define DsyncExtensionOwnercheck(extid, roleid) \
	object_ownercheck(ExtensionRelationId, (extid), (roleid))
#else
#define DsyncDatabaseOwnercheck(dbid, roleid) \
	pg_database_ownercheck((dbid), (roleid))
#define DsyncExtensionOwnercheck(extid, roleid) \
	pg_extension_ownercheck((extid), (roleid))
#endif

/*
 * Whether the current role may execute a function: one function per object
 * kind before 16, one for all kinds from 16 on.
 */
#if PG_VERSION_NUM >= 160000
#define DsyncProcExecuteCheck(procid) \
	(object_aclcheck(ProcedureRelationId, (procid), GetUserId(), ACL_EXECUTE) == ACLCHECK_OK)
#else
#define DsyncProcExecuteCheck(procid) \
	(pg_proc_aclcheck((procid), GetUserId(), ACL_EXECUTE) == ACLCHECK_OK)
#endif

/*
 * simple_heap_update.  From 16 on it reports which indexes need the new
 * version; dsync's tables have only btree indexes, so the answer is the
 * same as HeapTupleIsHeapOnly() on the new tuple, which callers test on
 * every major.
 */
static inline void
DsyncSimpleHeapUpdate(Relation rel, ItemPointer otid, HeapTuple tuple)
{
#if PG_VERSION_NUM >= 160000
	TU_UpdateIndexes update_indexes;

	simple_heap_update(rel, otid, tuple, &update_indexes);
#else
	simple_heap_update(rel, otid, tuple);
#endif
}

/*
 * heap_update without waiting (the fast path of store.c), with the same
 * difference from 16 on as simple_heap_update.
 */
static inline TM_Result
DsyncHeapUpdateNoWait(Relation rel, ItemPointer otid, HeapTuple tuple,
					  TM_FailureData *tmfd)
{
	LockTupleMode lockmode;
#if PG_VERSION_NUM >= 160000
	TU_UpdateIndexes update_indexes;

	return heap_update(rel, otid, tuple, GetCurrentCommandId(true), InvalidSnapshot,
					   false, tmfd, &lockmode, &update_indexes);
#else
	return heap_update(rel, otid, tuple, GetCurrentCommandId(true), InvalidSnapshot,
					   false, tmfd, &lockmode);
#endif
}

/* index_beginscan takes instrumentation from 18 on; dsync keeps none. */
#if PG_VERSION_NUM >= 180000
#define DsyncIndexBeginscan(heap, index, snapshot, nkeys, norderbys) \
	index_beginscan((heap), (index), (snapshot), NULL, (nkeys), (norderbys))
#else
#define DsyncIndexBeginscan(heap, index, snapshot, nkeys, norderbys) \
	index_beginscan((heap), (index), (snapshot), (nkeys), (norderbys))
#endif

/*
 * create_foreignscan_path: 17 added the restriction clauses the path
 * enforces (fdw_restrictinfo), 18 the count of disabled nodes below it.
 * dsync's scan has neither.
 */
#if PG_VERSION_NUM >= 180000
#define DsyncCreateForeignscanPath(root, rel, rows, startup, total) \
	create_foreignscan_path((root), (rel), NULL, (rows), 0, (startup), (total), \
							NIL, NULL, NULL, NIL, NIL)
#elif PG_VERSION_NUM >= 170000
#define DsyncCreateForeignscanPath(root, rel, rows, startup, total) \
	create_foreignscan_path((root), (rel), NULL, (rows), (startup), (total), \
							NIL, NULL, NULL, NIL, NIL)
#else
#define DsyncCreateForeignscanPath(root, rel, rows, startup, total) \
	create_foreignscan_path((root), (rel), NULL, (rows), (startup), (total), \
							NIL, NULL, NULL, NIL)
#endif

/*
 * A table's primary key index.  18 can also return a deferrable one when
 * asked; dsync never asks, which is what older majors always did.
 */
#if PG_VERSION_NUM >= 180000
#define DsyncPrimaryKeyIndex(rel)	RelationGetPrimaryKeyIndex((rel), false)
#else
#define DsyncPrimaryKeyIndex(rel)	RelationGetPrimaryKeyIndex(rel)
#endif

/* stringToQualifiedNameList took a soft-error context in 16. */
#if PG_VERSION_NUM >= 160000
#define DsyncQualifiedNameList(string) stringToQualifiedNameList((string), NULL)
#else
#define DsyncQualifiedNameList(string) stringToQualifiedNameList(string)
#endif

#endif							/* DSYNC_COMPAT_H */
