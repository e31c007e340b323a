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

#include "storage/lockdefs.h"
#include "store.h"

extern int64 DsyncFenceApply(const DsyncCatalog *catalog, text *resource, int64 token,
							 bool check_owner, Oid new_owner, Oid relid, bool at_least);
extern DsyncRow *DsyncFenceFind(DsyncStore *store, text *resource);
extern void DsyncFenceStale(const char *resource, int64 token, int64 mark);
extern bool DsyncFenceTurnstile(const DsyncCatalog *catalog, text *resource, LOCKMODE mode,
								bool nowait);
extern bool DsyncFenceForeign(const DsyncCatalog *catalog, const DsyncRow *row, Oid relid);
extern bool DsyncFenceRelkindOk(char relkind);
extern bool DsyncFenceNamedLike(text *name);
extern Oid	DsyncFenceTableOf(text **resource, Oid *owner);

/* fencebind.c: fences raised by grants */
typedef enum DsyncRaise
{
	DSYNC_RAISE_UNBOUND,		/* no fence is bound to the lease */
	DSYNC_RAISE_DONE,			/* every bound mark is at the token now */
	DSYNC_RAISE_BUSY			/* a writer holds one: not without waiting */
} DsyncRaise;

extern bool DsyncFenceMayBeBound(const DsyncCatalog *catalog, uint32 hash);
extern DsyncRaise DsyncFenceRaiseBound(const DsyncCatalog *catalog, text *lease, int64 token);
extern int64 DsyncFenceLeaseToken(const DsyncCatalog *catalog, text *lease);
extern void DsyncFenceForgetBusy(void);
extern void DsyncFencePrewait(const DsyncCatalog *catalog);
extern void DsyncFenceBindTable(const DsyncCatalog *catalog, Oid relid, text *lease);
extern Oid	DsyncFenceTableRoot(Oid relid);
extern text *DsyncFenceTableResource(Oid relid);
extern text *DsyncFenceResourceOf(Oid relid, bool missing_ok);
extern void DsyncFenceCarry(const DsyncCatalog *catalog, Oid from, Oid to);

extern void DsyncFenceDropped(Oid relid);
extern void DsyncFenceAfterCreateTrigger(Node *parsetree);
extern bool DsyncFenceBeforeDetach(Node *parsetree, Oid *root, Oid *partition);
extern void DsyncFenceAfterDetach(Oid root, Oid partition);

#endif							/* DSYNC_FENCE_H */
