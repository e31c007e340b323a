/*-------------------------------------------------------------------------
 *
 * fence.h
 *		Storage-side fencing (fence.c), and what DDL does to a table's
 *		mark (fenceddl.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef DSYNC_FENCE_H
#define DSYNC_FENCE_H

#include "postgres.h"
#include "nodes/parsenodes.h"
#include "catalog.h"

extern int64 DsyncFenceApply(const DsyncCatalog *catalog, text *resource, int64 token,
							 bool check_owner, Oid new_owner, Oid relid, bool at_least);
extern Oid	DsyncFenceTableRoot(Oid relid);
extern text *DsyncFenceTableResource(Oid relid);
extern text *DsyncFenceResourceOf(Oid relid, bool missing_ok);
extern void DsyncFenceCarry(const DsyncCatalog *catalog, Oid from, Oid to);

extern void DsyncFenceDropped(Oid relid);
extern bool DsyncFenceBeforeDetach(Node *parsetree, Oid *root, Oid *partition);
extern void DsyncFenceAfterDetach(Oid root, Oid partition);

#endif							/* DSYNC_FENCE_H */
