/*-------------------------------------------------------------------------
 *
 * queuework.c
 *		The worker's part in waiting without a connection: it runs
 *		dsync_queue_pass when a wake-up poked it or a claim window ended.
 *
 * A release grants to the first queued waiter in its own transaction;
 * what frees a name with no such transaction (a rollback, an expiry the
 * worker cleared, a blocked backend that gave up) pokes the worker, and
 * unclaimed grants pass on when their claim window ends (leases/
 * queuegrant.c, wait/queued.c).  The pass is the SQL function, called
 * through its OID, so that it finds the extension as any call does.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/namespace.h"
#include "commands/extension.h"
#include "miscadmin.h"
#include "fmgr.h"
#include "nodes/makefuncs.h"
#include "nodes/value.h"
#include "parser/parse_func.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

#include "catalog.h"
#include "queued.h"
#include "workers.h"
#include "compat.h"

/*
 * DsyncQueueWorkNext
 *		next (0: none) lowered to this database's next claim deadline.
 */
TimestampTz
DsyncQueueWorkNext(TimestampTz next)
{
	TimestampTz claim = DsyncQueuedNextClaim(MyDatabaseId);

	if (claim != 0 && (next == 0 || claim < next))
		return claim;
	return next;
}

/*
 * QueueWorkStep
 *		The pass itself, in DsyncReaperTransaction's transaction: the SQL
 *		function, found by name in the extension's schema.
 */
static void
QueueWorkStep(void)
{
	Oid			fn = InvalidOid;

	PushActiveSnapshot(GetTransactionSnapshot());
	if (OidIsValid(get_extension_oid("dsync", true)))
	{
		const DsyncCatalog *catalog = DsyncCatalogFromExtension();
		char	   *schema = get_namespace_name(catalog->namespace);

		if (schema != NULL)
			fn = LookupFuncName(list_make2(makeString(schema), makeString("dsync_queue_pass")),
								0, NULL, true);
	}
	if (OidIsValid(fn))
		(void) OidFunctionCall0(fn);
	PopActiveSnapshot();
}

/*
 * DsyncQueueWork
 *		Run a queue pass in a transaction of its own if one is due; an
 *		error is reported and the pass tried again at the next wake-up.
 */
void
DsyncQueueWork(void)
{
	if (DsyncQueuedWorkDue(GetCurrentTimestamp()))
		(void) DsyncReaperTransaction(QueueWorkStep);
}
