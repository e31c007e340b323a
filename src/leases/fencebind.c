/*-------------------------------------------------------------------------
 *
 * fencebind.c
 *		Fences raised by grants: a resource bound to a lease has its mark
 *		raised to every new token of that lease in the granting
 *		transaction, so that an older token is refused from the moment
 *		the lease moves.
 *
 * A mark refuses a token only once a newer one has reached it (fence.c).
 * A new holder that reads a resource before it writes it could read a
 * value that its paused predecessor then overwrites: the old write is
 * accepted, since no newer token has reached the mark yet, and the new
 * holder's write, built on what it read, loses it.  dsync is the lock
 * service inside the storage, so the grant itself moves the mark:
 *
 *	- dsync_fence_bind(resource, lease) puts the lease in the resource's
 *	  mark row (made if need be); a resource is bound to one lease.  A
 *	  resource named like a lease is bound to it with no call.  The
 *	  trigger dsync_fenced('column', 'lease') binds its table when it is
 *	  created (fenceddl.c).
 *	- Every grant of any kind (plain, shared, permit, dsync_acquire_all,
 *	  ephemeral; DsyncFenceRaiseBound, from lease.c and shared.c) raises
 *	  the marks bound to its lease to its token, after it has made the
 *	  grant and in its transaction: it waits for writers of older tokens
 *	  that hold the mark (the turnstile) and keeps later ones behind it
 *	  until it commits.  A grant never waits once made: if a writer holds
 *	  a mark, the try is rolled back, and a blocked acquirer's next try
 *	  waits for the writer in the lock manager before it grants anything,
 *	  no longer than its wait, out of its queue's way (FenceQueue,
 *	  DsyncFencePrewait); a wait = 0 grant is not made.  So the grant commits with its marks, and a rollback undoes
 *	  both; an ephemeral grant, which takes effect at once otherwise, is
 *	  then undone too (ephbound.c), and it is durable when its transaction
 *	  commits, as a durable grant is.
 *	- A table's mark is bound only explicitly: a lease may be named
 *	  "table:..." by any role, and must not move a mark that only roles
 *	  that may write the table move.  Binding is granted by an
 *	  administrator (the SQL script revokes it from PUBLIC): a binding
 *	  makes the lease's grants wait for the resource's writers.
 *	- A grant of a lease with no fence pays one bit of shared memory
 *	  (boundmap.c); a bound grant three index probes and the raise.
 *
 * A binding made while a grant of its lease is under way must not miss
 * that grant: the binder notes the names in the bound map, writes its
 * row, then reads the lease's newest token (seeing grants in flight too)
 * and raises the mark to it; a grant writes its own row, then reads the
 * bit and, if set, looks for marks in flight too.  Whichever comes second
 * sees the other (boundmap.c).  The first mark of a resource named like a
 * lease is made the same way (fence.c, FenceMakeMark).
 *
 * With several holders at once (a semaphore's permits, shared holders) a
 * mark can let through only the newest grant's token: a bound grant
 * refuses the older tokens of the holders still there.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/lock.h"
#include "storage/proc.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/builtins.h"
#include "utils/timeout.h"
#include "utils/timestamp.h"

#include "args.h"
#include "catalog.h"
#include "boundmap.h"
#include "store.h"
#include "wait.h"
#include "ephemeral.h"
#include "fence.h"

PG_FUNCTION_INFO_V1(dsync_fence_bind);
PG_FUNCTION_INFO_V1(dsync_fence_unbind);

/*
 * DsyncFenceMayBeBound
 *		Whether a fence may be bound to the lease of this name hash
 *		(DsyncNameHash; see DsyncBoundMapMaybe): if not, its grants need
 *		not look.  The hash is the caller's, computed once per call.
 */
bool
DsyncFenceMayBeBound(const DsyncCatalog *catalog, uint32 hash)
{
	return OidIsValid(catalog->rels[DSYNC_TABLE_FENCE]) && DsyncBoundMapMaybe(hash);
}

/*
 * FenceNewestToken
 *		The greatest token of a name's rows in one table, those in flight
 *		included (0 if none): released rows keep the token of their last
 *		grant, and a name's tokens only rise.
 */
static int64
FenceNewestToken(const DsyncCatalog *catalog, DsyncTable table, text *lease)
{
	DsyncStore	store;
	DsyncScan  *scan;
	DsyncRow   *row;
	int64		newest = 0;

	if (!OidIsValid(catalog->rels[table]))
		return 0;
	DsyncStoreOpenCatalog(&store, catalog, table, false);
	scan = DsyncScanNameUncommitted(&store, lease);
	while ((row = DsyncScanNext(scan)) != NULL)
		if (!row->nulls[Anum_lease_fencing - 1])
			newest = Max(newest, DatumGetInt64(row->values[Anum_lease_fencing - 1]));
	DsyncScanEnd(scan);
	DsyncStoreClose(&store);
	return newest;
}

/*
 * DsyncFenceLeaseToken
 *		The newest token lease has been granted with, in either kind, by a
 *		grant committed or still in flight; 0 if none is known.  A token
 *		older than this one is a former holder's.
 */
int64
DsyncFenceLeaseToken(const DsyncCatalog *catalog, text *lease)
{
	int64		newest = FenceNewestToken(catalog, DSYNC_TABLE_LEASE, lease);

	newest = Max(newest, FenceNewestToken(catalog, DSYNC_TABLE_PERMIT, lease));
	return Max(newest, DsyncEphemeralToken(lease));
}

/*
 * The resources a try of the call under way could not raise without
 * waiting for a writer (in TopMemoryContext: tries run in contexts reset
 * between them).  The next try waits for them first (DsyncFencePrewait).
 */
static List *fence_busy = NIL;

/*
 * FenceQueue
 *		Take a resource's turnstile alone, for a grant that raises its mark
 *		(as a writer raising it does, fence.c): writers of older tokens that
 *		hold it finish first, later ones queue behind and are then refused.
 *		False if it is not to be had without a wait that is not to be made
 *		here.
 *
 * A try that has made its grant (a lease row locked, an ephemeral entry
 * live) must not wait: whoever holds the turnstile may be waiting for that
 * very name, in a queue the deadlock detector does not see.  It gives up,
 * and the next try waits before it grants anything (prewait).  That wait
 * is in the lock manager's queue, which wakes it when the writers are
 * done, sees deadlocks and keeps later writers behind it, but not past its
 * wait's deadline: there it has a lock_timeout of its own, which ends the
 * try, not the call.  A session lock_timeout shorter than that applies as
 * usual.  A try that must not wait (wait = 0) gives up; a grant made
 * outside any try (a binding appeared between a wait = 0 call's look and
 * its grant) waits.
 */
static bool
FenceQueue(const DsyncCatalog *catalog, text *resource, bool prewait)
{
	TimestampTz deadline;
	int64		left_ms;
	int			save_nestlevel;
	char		value[32];

	if (DsyncFenceTurnstile(catalog, resource, ExclusiveLock, true))
		return true;
	if ((DsyncWaitInAttempt() && !prewait) || !DsyncWaitAttemptMayWait(&deadline))
		return false;
	left_ms = deadline == 0 ? 0 :
		Max((deadline - GetCurrentTimestamp()) / 1000, 1);
	if (deadline == 0 || left_ms > INT_MAX || (LockTimeout > 0 && LockTimeout <= left_ms))
		return DsyncFenceTurnstile(catalog, resource, ExclusiveLock, false);
	save_nestlevel = NewGUCNestLevel();
	snprintf(value, sizeof(value), INT64_FORMAT, left_ms);
	(void) set_config_option("lock_timeout", value, PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	DsyncWaitAttemptLockTimeout(true);
	(void) DsyncFenceTurnstile(catalog, resource, ExclusiveLock, false);
	/* The timer may have fired as the lock was granted: take it now. */
	if (get_timeout_indicator(LOCK_TIMEOUT, false))
		CHECK_FOR_INTERRUPTS();
	DsyncWaitAttemptLockTimeout(false);
	AtEOXact_GUC(true, save_nestlevel);
	return true;
}

/*
 * DsyncFenceForgetBusy
 *		A new call begins: nothing to wait for yet.
 */
void
DsyncFenceForgetBusy(void)
{
	list_free_deep(fence_busy);
	fence_busy = NIL;
}

/*
 * FenceNoteBusy
 *		A writer held a resource the try under way had to raise: the next
 *		try waits for it before it grants (DsyncFencePrewait).
 */
static void
FenceNoteBusy(text *resource)
{
	MemoryContext oldcontext = MemoryContextSwitchTo(TopMemoryContext);

	fence_busy = lappend(fence_busy, DatumGetTextPCopy(PointerGetDatum(resource)));
	MemoryContextSwitchTo(oldcontext);
}

static int	FenceNameCompare(const ListCell *a, const ListCell *b);

/*
 * DsyncFencePrewait
 *		At the start of a try: if the last try of this call gave up on a
 *		resource a writer held, wait for its turnstile now, before the try
 *		grants anything, and stepped out of the queue's way meanwhile
 *		(DsyncWaitStepAside); the turnstile stays the try's, kept if it
 *		grants, let go of if it does not.  Cheap when there is nothing to
 *		wait for: one pointer test.
 */
void
DsyncFencePrewait(const DsyncCatalog *catalog)
{
	List	   *busy = fence_busy;
	ListCell   *lc;

	if (busy == NIL)
		return;
	fence_busy = NIL;
	list_sort(busy, FenceNameCompare);
	DsyncWaitStepAside(true);
	foreach(lc, busy)
		(void) FenceQueue(catalog, lfirst(lc), true);
	DsyncWaitStepAside(false);
	list_free_deep(busy);
}

/*
 * FenceRaise
 *		Raise one resource's mark to at least token, holding it until this
 *		transaction ends; false (noted for the next try) if a writer holds
 *		it and the grant, made already, may not wait (FenceQueue).
 *
 * A mark at or above the token is left alone, unlocked (a reentrant grant,
 * or a newer grant already raised it).  Whoever makes a mark holds the
 * turnstile while it does, so once it is ours a mark in flight has been
 * committed or is gone.
 */
static bool
FenceRaise(DsyncStore *store, text *resource, int64 token)
{
	bool		queued = false;

	for (;;)
	{
		DsyncRow   *row = DsyncFenceFind(store, resource);
		TM_Result	result;

		if (row != NULL && DatumGetInt64(row->values[Anum_fence_token - 1]) >= token)
			return true;
		if (!queued)
		{
			if (!FenceQueue(store->catalog, resource, false))
			{
				FenceNoteBusy(resource);
				return false;
			}
			queued = true;
			continue;
		}
		if (row == NULL)
			return true;
		result = DsyncStoreLock(store, row, LockTupleNoKeyExclusive,
								DsyncWaitInAttempt() ? LockWaitSkip : LockWaitBlock);
		if (result == TM_WouldBlock)
		{
			FenceNoteBusy(resource);
			return false;
		}
		if (result != TM_Ok)
			continue;
		DsyncRowSet(row, Anum_fence_token, Int64GetDatum(token));
		DsyncRowSet(row, Anum_fence_fenced_at, TimestampTzGetDatum(GetCurrentTimestamp()));
		DsyncStoreUpdate(store, row);
		return true;
	}
}

/*
 * FenceNameCompare
 *		list_sort order of resource names: bytewise, as their key.
 */
static int
FenceNameCompare(const ListCell *a, const ListCell *b)
{
	text	   *ta = lfirst(a);
	text	   *tb = lfirst(b);
	int			la = VARSIZE_ANY_EXHDR(ta);
	int			lb = VARSIZE_ANY_EXHDR(tb);
	int			cmp = memcmp(VARDATA_ANY(ta), VARDATA_ANY(tb), Min(la, lb));

	return cmp != 0 ? cmp : la - lb;
}

/*
 * FenceBoundResources
 *		The resources bound to lease, as text, each once: the one named like
 *		it if it has a mark, and those whose mark names it, counting marks
 *		and bindings in flight.  In name order, so that two grants raise
 *		them in the same order.
 */
static List *
FenceBoundResources(DsyncStore *store, text *lease)
{
	List	   *names = NIL;
	DsyncScan  *scan;
	DsyncRow   *row;

	/* A table's mark is not bound to a lease of its name (DsyncFenceNamedLike). */
	if (DsyncFenceNamedLike(lease))
	{
		scan = DsyncScanNameUncommitted(store, lease);
		if (DsyncScanNext(scan) != NULL)
			names = lappend(names, lease);
		DsyncScanEnd(scan);
	}
	if (!store->catalog->fence_relid)
		return names;
	scan = DsyncScanSecond(store, lease, true);
	while ((row = DsyncScanNext(scan)) != NULL)
	{
		text	   *resource = DatumGetTextPP(row->values[Anum_fence_resource - 1]);
		ListCell   *lc;
		bool		seen = false;

		if (row->nulls[Anum_fence_lease - 1] ||
			!DsyncTextEquals(DatumGetTextPP(row->values[Anum_fence_lease - 1]), lease))
			continue;
		foreach(lc, names)
			seen = seen || DsyncTextEquals(lfirst(lc), resource);
		if (!seen)
			names = lappend(names, resource);
	}
	DsyncScanEnd(scan);
	list_sort(names, FenceNameCompare);
	return names;
}

/*
 * DsyncFenceRaiseBound
 *		After a grant of lease with token, in the granting transaction:
 *		raise every mark bound to the lease to the token.  For a lease
 *		DsyncFenceMayBeBound says may have a fence, once the grant is
 *		written.  DSYNC_RAISE_BUSY: a writer holds a mark and the grant may
 *		not wait for it (FenceQueue); the caller must then not grant (its
 *		try is rolled back).
 */
DsyncRaise
DsyncFenceRaiseBound(const DsyncCatalog *catalog, text *lease, int64 token)
{
	DsyncStore	store;
	List	   *names;
	ListCell   *lc;
	DsyncRaise	result = DSYNC_RAISE_DONE;

	DsyncStoreOpenCatalog(&store, catalog, DSYNC_TABLE_FENCE, true);
	names = FenceBoundResources(&store, lease);
	if (names == NIL)
		result = DSYNC_RAISE_UNBOUND;
	foreach(lc, names)
	{
		if (!FenceRaise(&store, lfirst(lc), token))
		{
			result = DSYNC_RAISE_BUSY;
			break;
		}
	}
	DsyncStoreClose(&store);
	list_free(names);
	return result;
}

/*
 * FenceBoundTo
 *		The lease a mark row binds its resource to, or NULL: none, or the
 *		row is another table's (whose binding is not this table's).
 */
static text *
FenceBoundTo(const DsyncCatalog *catalog, const DsyncRow *row, Oid relid)
{
	if (row->nulls[Anum_fence_lease - 1] || DsyncFenceForeign(catalog, row, relid))
		return NULL;
	return DatumGetTextPP(row->values[Anum_fence_lease - 1]);
}

/*
 * FenceRefuseOwner
 *		Refuse a role without the privileges of the mark's owner.
 */
static void
FenceRefuseOwner(text *resource, const DsyncRow *row)
{
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("permission denied for fence \"%s\"", text_to_cstring(resource)),
			 errdetail("Only roles with the privileges of role \"%s\", which set it first, may bind or unbind it.",
					   GetUserNameFromId(DatumGetObjectId(row->values[Anum_fence_owner - 1]),
										 true) ?: "?")));
}

/*
 * FenceBindRow
 *		Bind resource to lease, or unbind it (lease NULL), in its mark row,
 *		made if there is none (to bind).  Returns whether it changed.  A
 *		resource bound to another lease is an error, or with keep_other
 *		(a trigger created again, as a restore does) a warning.
 *
 * The turnstile is taken alone first, as for a writer raising the mark:
 * the row is ours to change, and a grant that finds the binding in flight
 * gives up (or waits) until we end.  A new binding raises the mark to the
 * lease's newest token, looked for once the row is written (see the file
 * header); a grant after our commit raises it further.
 */
static bool
FenceBindRow(const DsyncCatalog *catalog, text *resource, text *lease, bool check_owner,
			 Oid new_owner, Oid relid, bool keep_other)
{
	DsyncStore	store;
	DsyncRow   *row;
	bool		changed = false;

	DsyncStoreOpenCatalog(&store, catalog, DSYNC_TABLE_FENCE, true);
	/* Refused before it queues: it would hold up the resource's writers. */
	row = DsyncFenceFind(&store, resource);
	if (row != NULL && check_owner && !DsyncRowOwnerIsCaller(row, Anum_fence_owner))
		FenceRefuseOwner(resource, row);
	(void) DsyncFenceTurnstile(catalog, resource, ExclusiveLock, false);
	if (lease != NULL)
	{
		DsyncBoundMapSet(lease);
		DsyncBoundMapSet(resource);
	}
	for (;;)
	{
		text	   *bound;
		bool		foreign;

		row = DsyncFenceFind(&store, resource);
		if (row == NULL)
		{
			if (lease == NULL)
				break;
			if (DsyncStoreClaimKey(&store, resource, (Datum) 0, true) != DSYNC_CLAIM_OK)
				continue;
			/* Token 0: no writer has passed yet; the lease's grants raise it. */
			row = DsyncStoreNewRow();
			DsyncRowSet(row, Anum_fence_resource, PointerGetDatum(resource));
			DsyncRowSet(row, Anum_fence_token, Int64GetDatum(0));
			DsyncRowSet(row, Anum_fence_fenced_at, TimestampTzGetDatum(GetCurrentTimestamp()));
			DsyncRowSet(row, Anum_fence_owner, ObjectIdGetDatum(new_owner));
			if (OidIsValid(relid))
				DsyncRowSet(row, Anum_fence_relid, ObjectIdGetDatum(relid));
			DsyncRowSet(row, Anum_fence_lease, PointerGetDatum(lease));
			DsyncStoreInsert(&store, row);
			DsyncStoreUnclaimKey(&store, resource, (Datum) 0);
			changed = true;
			break;
		}
		if (check_owner && !DsyncRowOwnerIsCaller(row, Anum_fence_owner))
			FenceRefuseOwner(resource, row);
		foreign = DsyncFenceForeign(catalog, row, relid);
		bound = FenceBoundTo(catalog, row, relid);
		if (lease != NULL && bound != NULL && !DsyncTextEquals(bound, lease) && keep_other)
		{
			ereport(WARNING,
					(errcode(ERRCODE_DUPLICATE_OBJECT),
					 errmsg("fence \"%s\" stays bound to lease \"%s\", not \"%s\"",
							text_to_cstring(resource), text_to_cstring(bound),
							text_to_cstring(lease)),
					 errhint("Unbind it with dsync_fence_unbind() and bind it with dsync_fence_bind() to change it.")));
			break;
		}
		if (lease != NULL && bound != NULL && !DsyncTextEquals(bound, lease))
			ereport(ERROR,
					(errcode(ERRCODE_DUPLICATE_OBJECT),
					 errmsg("fence \"%s\" is bound to lease \"%s\"",
							text_to_cstring(resource), text_to_cstring(bound)),
					 errdetail("A fence is bound to one lease: the holders of two leases do not exclude one another."),
					 errhint("Unbind it with dsync_fence_unbind() first.")));
		if (lease != NULL ? bound != NULL : bound == NULL)
			break;				/* as asked already */
		if (DsyncStoreLock(&store, row, LockTupleNoKeyExclusive, LockWaitBlock) != TM_Ok)
			continue;
		if (foreign)
		{
			/* Another table's mark: this table's starts now (as fence.c does). */
			DsyncRowSet(row, Anum_fence_token, Int64GetDatum(0));
			DsyncRowSet(row, Anum_fence_owner, ObjectIdGetDatum(new_owner));
			DsyncRowSet(row, Anum_fence_relid, ObjectIdGetDatum(relid));
		}
		if (lease != NULL)
			DsyncRowSet(row, Anum_fence_lease, PointerGetDatum(lease));
		else
			row->nulls[Anum_fence_lease - 1] = true;
		DsyncStoreUpdate(&store, row);
		changed = true;
		break;
	}
	if (changed && lease != NULL)
	{
		int64		granted;

		/* The row is written: a grant that missed it is seen now. */
		pg_memory_barrier();
		granted = DsyncFenceLeaseToken(catalog, lease);
		if (granted > DatumGetInt64(row->values[Anum_fence_token - 1]))
		{
			DsyncRowSet(row, Anum_fence_token, Int64GetDatum(granted));
			DsyncRowSet(row, Anum_fence_fenced_at, TimestampTzGetDatum(GetCurrentTimestamp()));
			DsyncStoreUpdate(&store, row);
		}
	}
	DsyncStoreClose(&store);
	return changed;
}

/*
 * FenceBindArgs
 *		The resource argument of bind and unbind, checked, and what a mark
 *		made now needs: a table's resource is the table's (its owner owns
 *		the mark, and the caller must be allowed to write the table), any
 *		other one the caller's.  Sets *check_owner for the latter.
 */
static text *
FenceBindArgs(FunctionCallInfo fcinfo, const char *what, const DsyncCatalog **catalog,
			  Oid *relid, Oid *owner, bool *check_owner)
{
	text	   *resource = DsyncArgName(fcinfo, 0, "resource");

	DsyncPreventWrite(what);
	*catalog = DsyncCatalogGet(fcinfo);
	if (!(*catalog)->fence_relid)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("%s needs version 1.5 of extension \"dsync\"", what),
				 errhint("Run ALTER EXTENSION dsync UPDATE.")));
	*relid = DsyncFenceTableOf(&resource, owner);
	*check_owner = !OidIsValid(*relid);
	return resource;
}

/*
 * dsync_fence_bind
 *		SQL: dsync_fence_bind(resource, lease) RETURNS boolean (1.5)
 *
 * True if the resource is bound to the lease now, false if it was already;
 * an error (42710) if it is bound to another lease.  The mark is made if
 * the resource has none, and raised to the lease's newest token.
 */
Datum
dsync_fence_bind(PG_FUNCTION_ARGS)
{
	const DsyncCatalog *catalog;
	Oid			relid;
	Oid			owner;
	bool		check_owner;
	text	   *resource = FenceBindArgs(fcinfo, "dsync_fence_bind()", &catalog, &relid,
										 &owner, &check_owner);
	text	   *lease = DsyncArgName(fcinfo, 1, "lease");

	PG_RETURN_BOOL(FenceBindRow(catalog, resource, lease, check_owner, owner, relid, false));
}

/*
 * dsync_fence_unbind
 *		SQL: dsync_fence_unbind(resource) RETURNS boolean (1.5)
 *
 * True if the resource was bound to a lease and is not now; its mark
 * stays.  A resource named like a lease stays bound to it.
 */
Datum
dsync_fence_unbind(PG_FUNCTION_ARGS)
{
	const DsyncCatalog *catalog;
	Oid			relid;
	Oid			owner;
	bool		check_owner;
	text	   *resource = FenceBindArgs(fcinfo, "dsync_fence_unbind()", &catalog, &relid,
										 &owner, &check_owner);

	PG_RETURN_BOOL(FenceBindRow(catalog, resource, NULL, check_owner, owner, relid, false));
}

/*
 * DsyncFenceBindTable
 *		Bind a table's mark to lease, for CREATE TRIGGER ...
 *		dsync_fenced('column', 'lease') (fenceddl.c): as dsync_fence_bind
 *		does, with the creator's rights on the table checked; a binding to
 *		another lease stays, with a warning (a restore creates the trigger
 *		after the marks, bindings included).
 */
void
DsyncFenceBindTable(const DsyncCatalog *catalog, Oid relid, text *lease)
{
	text	   *resource = DsyncFenceResourceOf(DsyncFenceTableRoot(relid), false);
	Oid			owner;
	Oid			table = DsyncFenceTableOf(&resource, &owner);

	DsyncArgNameCheck(lease, "lease", false);
	(void) FenceBindRow(catalog, resource, lease, false, owner, table, true);
}
