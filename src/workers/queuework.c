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
 * An expiry the worker clears is granted to the first queued waiter in
 * the clearing transaction itself (DsyncQueueNoteFreed, then
 * DsyncQueueGrantFreed before its commit), as a release is: one write
 * transaction per hand-off there too.
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
#include "storage/proc.h"
#include "utils/datum.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

#include "catalog.h"
#include "lease.h"
#include "queued.h"
#include "settings.h"
#include "wait.h"
#include "workers.h"
#include "compat.h"

/*
 * DsyncQueueWorkNext
 *		next (0: none) lowered to this database's next claim deadline.
 *
 * While grants are being made, also to a claim window from now, though
 * every grant so far was claimed: a granting transaction wakes the worker
 * only if its claim deadline comes before the one in the slot (leases/
 * queuegrant.c), so under a stream of hand-offs the worker wakes once a
 * window, not once a hand-off (a signal and two context switches each).
 * Each grant's deadline is still kept: the worker is up before it, and
 * plans for it then.
 */
TimestampTz
DsyncQueueWorkNext(TimestampTz next)
{
	static uint64 seen_grants = 0;
	TimestampTz claim = DsyncQueuedNextClaim(MyDatabaseId);
	uint64		grants = DsyncQueuedGrants();

	if (grants != seen_grants)
	{
		TimestampTz again = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
														dsync_claim_window);

		seen_grants = grants;
		if (claim == 0 || again < claim)
			claim = again;
	}
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

/* Names this transaction cleared that have queued waiters (reap.c). */
static List *freed_names = NIL;
static LocalTransactionId freed_lxid = InvalidLocalTransactionId;

/*
 * DsyncQueueNoteFreed
 *		A reap cleared name's holder in this transaction: if queued waiters
 *		may want it, note it for DsyncQueueGrantFreed.  Costs an atomic read
 *		when none are queued on its channel.
 */
void
DsyncQueueNoteFreed(text *name)
{
	MemoryContext oldcontext;

	if (!DsyncQueuedAny(DsyncWaitKey(name)))
		return;
	if (freed_lxid != DsyncLocalXid())
	{
		freed_names = NIL;		/* a list of a transaction that ended */
		freed_lxid = DsyncLocalXid();
	}
	/* Not a savepoint's context: a rolled-back one would free it under us. */
	oldcontext = MemoryContextSwitchTo(TopTransactionContext);
	freed_names = lappend(freed_names, DatumGetTextPP(datumCopy(PointerGetDatum(name), false, -1)));
	MemoryContextSwitchTo(oldcontext);
}

/*
 * DsyncQueueGrantFreed
 *		Before the reaping transaction commits: grant each name it noted to
 *		its first queued waiter.  fcinfo: the calling SQL function's
 *		(dsync_reap), or NULL for the worker, which calls it as
 *		dsync_queue_pass would be called (to find the extension by).
 */
void
DsyncQueueGrantFreed(FunctionCallInfo fcinfo)
{
	List	   *names;
	ListCell   *lc;
	FmgrInfo	flinfo;
	LOCAL_FCINFO(own, 0);

	if (freed_names == NIL || freed_lxid != DsyncLocalXid())
	{
		freed_names = NIL;
		return;
	}
	names = freed_names;
	freed_names = NIL;
	if (fcinfo == NULL)
	{
		const DsyncCatalog *catalog = DsyncCatalogFromExtension();
		char	   *schema = get_namespace_name(catalog->namespace);
		Oid			fn = schema == NULL ? InvalidOid :
			LookupFuncName(list_make2(makeString(schema), makeString("dsync_queue_pass")),
						   0, NULL, true);

		if (!OidIsValid(fn))
			return;				/* the worker's pass will grant them */
		fmgr_info(fn, &flinfo);
		InitFunctionCallInfoData(*own, &flinfo, 0, InvalidOid, NULL, NULL);
		fcinfo = own;
	}
	foreach(lc, names)
		(void) DsyncQueueGrantNext(fcinfo, (text *) lfirst(lc));
}
