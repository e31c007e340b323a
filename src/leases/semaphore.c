/*-------------------------------------------------------------------------
 *
 * semaphore.c
 *		Semaphore definitions: how many permits a lease name has.
 *
 * A semaphore is a lease with N permits, and each permit is a row of its
 * own in dsync_permit (slots 0 to N-1, see permit.c), so acquire, renew,
 * release, assert_held, waiting, fencing, ownership and expiry work for a
 * permit exactly as for a lock.  The definition itself is one row of
 * dsync_semaphore, read with the latest committed state like everything
 * else, so that every isolation level sees the same count.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/rel.h"
#include "utils/timestamp.h"

#include "args.h"
#include "catalog.h"
#include "wait.h"
#include "store.h"
#include "lease.h"
#include "shmem.h"

PG_FUNCTION_INFO_V1(dsync_semaphore_create);
PG_FUNCTION_INFO_V1(dsync_semaphore_drop);

/*
 * How long this backend trusts what it saw of the semaphore tables: a row
 * written other than by dsync_semaphore_create (a restore, a superuser's
 * INSERT) does not move the shared generation, and is noticed within this
 * time.
 */
#define SEMAPHORE_TRUST_MS	1000

/* What this backend saw: the shared generation then, when, and in which table. */
static uint64 semaphore_seen_generation = 0;
static TimestampTz semaphore_seen_at = 0;
static Oid	semaphore_seen_rel = InvalidOid;
static bool semaphore_seen_unused = false;

/*
 * SemaphoreFind
 *		The definition row of a semaphore, or NULL.
 */
static DsyncRow *
SemaphoreFind(DsyncStore *store, text *name)
{
	DsyncScan  *scan = DsyncScanName(store, name);
	DsyncRow   *row = DsyncScanNext(scan);

	DsyncScanEnd(scan);
	return row;
}

/*
 * DsyncSemaphorePermits
 *		How many permits a lease name has: its semaphore's count, or 1.
 */
int
DsyncSemaphorePermits(FunctionCallInfo fcinfo, text *name)
{
	int			permits = DsyncSemaphorePermitsFor(fcinfo, name, false);

	return permits < 0 ? 1 : permits;
}

/*
 * DsyncSemaphorePermitsFor
 *		A name's semaphore count, or -1 if it has no definition (it is a
 *		plain lease).  For a grant (for_grant), the definition is also
 *		share-locked until the caller's transaction ends, so that no drop
 *		or re-creation with another count can commit between our reading
 *		the count and our grant committing; then 0 means the definition is
 *		being changed right now (grant nothing new).  An installation
 *		without the semaphore table has only plain leases.
 */
int
DsyncSemaphorePermitsFor(FunctionCallInfo fcinfo, text *name, bool for_grant)
{
	return DsyncSemaphoreCount(DsyncCatalogGet(fcinfo), name, for_grant);
}

/*
 * DsyncSemaphoreCount
 *		DsyncSemaphorePermitsFor, given where the extension's objects are.
 */
int
DsyncSemaphoreCount(const DsyncCatalog *catalog, text *name, bool for_grant)
{
	DsyncStore	store;
	DsyncRow   *row;
	int			permits = -1;

	/* A database that uses no semaphores pays no lookup, mostly nothing. */
	if (DsyncSemaphoresUnused(catalog))
		return -1;
	DsyncStoreOpenCatalog(&store, catalog, DSYNC_TABLE_SEMAPHORE, for_grant);
	while (DsyncStoreBlockCount(store.rel) > 0)
	{
		row = SemaphoreFind(&store, name);
		if (row == NULL)
			break;
		if (for_grant)
		{
			TM_Result	result = DsyncStoreLock(&store, row, LockTupleKeyShare, LockWaitSkip);

			if (result == TM_WouldBlock)
			{
				permits = 0;
				break;
			}
			if (result != TM_Ok)
				continue;		/* changed meanwhile: read it again */
		}
		permits = DatumGetInt32(row->values[Anum_semaphore_permits - 1]);
		break;
	}
	if (for_grant)
		DsyncStoreClose(&store);
	else
		DsyncStoreCloseUnlock(&store);
	return permits;
}

/*
 * SemaphoreTableEmpty
 *		Whether one of the semaphore tables has no pages, so no rows,
 *		committed or not (any insert extends the table before its row can
 *		be seen; VACUUM truncates it to nothing only once every row is
 *		gone).
 */
static bool
SemaphoreTableEmpty(const DsyncCatalog *catalog, DsyncTable table)
{
	DsyncStore	store;
	bool		empty;

	DsyncStoreOpenCatalog(&store, catalog, table, false);
	empty = DsyncStoreBlockCount(store.rel) == 0;
	DsyncStoreCloseUnlock(&store);
	return empty;
}

/*
 * DsyncSemaphoresUnused
 *		Whether the database has no semaphore definitions and no permits,
 *		so that every name is a plain lease.
 *
 * Every acquire asks, and in a database that uses no semaphores each
 * answer was the same two system calls (the tables' sizes, which
 * PostgreSQL caches only during recovery): on a small machine each one is
 * also a point where the backend is preempted.  So the answer, either
 * way, is remembered until dsync_semaphore_create, or a shared grant that
 * makes a new row of dsync_permit (shared.c), moves the shared generation
 * (each does so after its insert and before it commits: a backend that
 * looked at the tables before that insert sees the new generation), or
 * for a second at most.  A stale "used" only costs the lookups every call
 * made before.
 */
bool
DsyncSemaphoresUnused(const DsyncCatalog *catalog)
{
	Oid			relid = catalog->rels[DSYNC_TABLE_SEMAPHORE];
	uint64		generation;
	TimestampTz now;

	if (!OidIsValid(relid))
		return true;
	generation = pg_atomic_read_u64(&dsync_shared->semaphore_generation);
	now = GetCurrentStatementStartTimestamp();
	if (semaphore_seen_at != 0 && relid == semaphore_seen_rel &&
		generation == semaphore_seen_generation &&
		!TimestampDifferenceExceeds(semaphore_seen_at, now, SEMAPHORE_TRUST_MS))
		return semaphore_seen_unused;
	/* The generation is read before the tables: see above. */
	pg_read_barrier();
	semaphore_seen_unused = SemaphoreTableEmpty(catalog, DSYNC_TABLE_SEMAPHORE) &&
		(!OidIsValid(catalog->rels[DSYNC_TABLE_PERMIT]) ||
		 SemaphoreTableEmpty(catalog, DSYNC_TABLE_PERMIT));
	semaphore_seen_rel = relid;
	semaphore_seen_generation = generation;
	semaphore_seen_at = now;
	return semaphore_seen_unused;
}

/*
 * DsyncSemaphoreWatchOpen
 *		Get ready to ask, under an LWLock (where no relation may be opened),
 *		whether a name is a semaphore: an ephemeral grant, which must not be
 *		made next to permits that did not count it (ephemeral.c).  The
 *		shared generation is read first: a definition committed before the
 *		question moved it before it committed.
 */
void
DsyncSemaphoreWatchOpen(const DsyncCatalog *catalog, DsyncSemaphoreWatch *watch)
{
	watch->generation = pg_atomic_read_u64(&dsync_shared->semaphore_generation);
	pg_read_barrier();
	watch->unused = DsyncSemaphoresUnused(catalog);
	if (!watch->unused)
		DsyncStoreOpenCatalog(&watch->store, catalog, DSYNC_TABLE_SEMAPHORE, false);
	watch->opened = true;
}

/*
 * DsyncSemaphoreWatchDefined
 *		Whether name has a committed definition now.  In a database that
 *		had none, the answer is no unless the generation has moved since
 *		(then *changed: close, open again and ask again).
 */
bool
DsyncSemaphoreWatchDefined(DsyncSemaphoreWatch *watch, text *name, bool *changed)
{
	DsyncRow   *row;

	*changed = false;
	if (watch->unused)
	{
		*changed = pg_atomic_read_u64(&dsync_shared->semaphore_generation) != watch->generation;
		return false;
	}
	row = SemaphoreFind(&watch->store, name);
	if (row == NULL)
		return false;
	DsyncRowFree(&watch->store, row);
	return true;
}

/*
 * DsyncSemaphoreWatchClose
 *		Close what DsyncSemaphoreWatchOpen opened, if anything.
 */
void
DsyncSemaphoreWatchClose(DsyncSemaphoreWatch *watch)
{
	if (watch->opened && !watch->unused)
		DsyncStoreCloseUnlock(&watch->store);
	watch->opened = false;
}

/*
 * SemaphoreRefuseShared
 *		Refuse a definition for a name with shared holders (shared.c),
 *		held or being granted: permits are exclusive, and a shared holder
 *		is not one.  (A plain exclusive holder is kept and counts as a
 *		permit.)  Called once the definition is written: a shared grant
 *		that writes its row after this look sees the definition and fails
 *		(DsyncSemaphoreDefinedDirty), so one of the two always sees the
 *		other.
 */
static void
SemaphoreRefuseShared(const DsyncCatalog *catalog, text *name)
{
	DsyncStore	permits;
	TimestampTz retry_at = 0;
	bool		shared;

	DsyncStoreOpenCatalog(&permits, catalog, DSYNC_TABLE_PERMIT, false);
	shared = DsyncStoreKeysTaken(&permits, name, Int32GetDatum(DSYNC_SHARED_SLOT), true,
								 GetCurrentTimestamp(), &retry_at);
	DsyncStoreClose(&permits);
	if (shared)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_IN_USE),
				 errmsg("semaphore \"%s\" cannot be created while the name has shared holders",
						text_to_cstring(name)),
				 errhint("Create it once they have released it, or use a name that is not acquired shared.")));
}

/*
 * DsyncSemaphoreDefinedDirty
 *		Whether name has a definition, committed or being made (or dropped)
 *		right now: for a shared grant that has written its row, which must
 *		not stand next to a definition that did not see it.
 */
bool
DsyncSemaphoreDefinedDirty(const DsyncCatalog *catalog, text *name)
{
	DsyncStore	store;
	bool		defined;

	/* Read after our row was written: a definition since moved it. */
	if (DsyncSemaphoresUnused(catalog))
		return false;
	DsyncStoreOpenCatalog(&store, catalog, DSYNC_TABLE_SEMAPHORE, false);
	defined = DsyncStoreKeyAny(&store, name, (Datum) 0);
	DsyncStoreCloseUnlock(&store);
	return defined;
}

/*
 * dsync_semaphore_create
 *		SQL: dsync_semaphore_create(name, permits) RETURNS boolean
 *
 * Idempotent, so that every process can create the semaphore it uses at
 * start-up: true if created now, false if it exists with this count, an
 * error if it exists with another.  Concurrent creators of one name are
 * serialised by the name's insert claim, so the second sees the first's
 * committed definition and never meets it in the unique index.  Creating
 * makes the semaphore's permit rows (permit.c), so that taking a permit
 * never has to make one.
 */
Datum
dsync_semaphore_create(PG_FUNCTION_ARGS)
{
	text	   *name = DsyncArgName(fcinfo, 0, "name");
	int32		permits;
	DsyncStore	store;
	DsyncRow   *row;

	DsyncArgNotNull(fcinfo, 1, "permits");
	permits = PG_GETARG_INT32(1);
	if (permits < 1 || permits > DSYNC_MAX_PERMITS)
		ereport(ERROR,
				(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
				 errmsg("argument \"permits\" must be between 1 and %d", DSYNC_MAX_PERMITS),
				 errdetail("The value is %d.", permits)));

	DsyncPreventWrite("dsync_semaphore_create()");
	DsyncCatalogRequire(DsyncCatalogGet(fcinfo), DSYNC_TABLE_PERMIT);

	DsyncStoreOpen(&store, fcinfo, DSYNC_TABLE_SEMAPHORE, true);
	for (;;)
	{
		row = SemaphoreFind(&store, name);
		if (row)
		{
			int32		existing = DatumGetInt32(row->values[Anum_semaphore_permits - 1]);

			DsyncStoreClose(&store);
			if (existing != permits)
				ereport(ERROR,
						(errcode(ERRCODE_DUPLICATE_OBJECT),
						 errmsg("semaphore \"%s\" already exists with %d permits",
								text_to_cstring(name), existing),
						 errdetail("This call asked for %d permits.", permits),
						 errhint("Use the same count everywhere, or drop the semaphore first with dsync_semaphore_drop().")));
			PG_RETURN_BOOL(false);
		}
		if (DsyncStoreClaimKey(&store, name, (Datum) 0, true) == DSYNC_CLAIM_OK)
			break;
	}

	row = DsyncStoreNewRow();
	DsyncRowSet(row, Anum_semaphore_name, PointerGetDatum(name));
	DsyncRowSet(row, Anum_semaphore_permits, Int32GetDatum(permits));
	DsyncRowSet(row, Anum_semaphore_created_at,
				TimestampTzGetDatum(GetCurrentTimestamp()));
	DsyncRowSet(row, Anum_semaphore_owner, ObjectIdGetDatum(GetUserId()));
	DsyncStoreInsert(&store, row);
	/* Backends that saw no definitions look again (DsyncSemaphoresUnused). */
	pg_atomic_fetch_add_u64(&dsync_shared->semaphore_generation, 1);
	SemaphoreRefuseShared(store.catalog, name);
	DsyncPermitFill(store.catalog, name, permits);
	DsyncStoreUnclaimKey(&store, name, (Datum) 0);
	DsyncStoreClose(&store);

	/* Waiters on the name may now have more permits to take. */
	DsyncWakeAtEnd(DsyncWaitKey(name));
	PG_RETURN_BOOL(true);
}

/*
 * dsync_semaphore_drop
 *		SQL: dsync_semaphore_drop(name) RETURNS boolean
 *
 * Removes the definition and its free permits; the name becomes a
 * one-permit lease again.  Holders of permits keep them until they
 * release them or their ttl passes.  Only the role that created it (or a
 * member) may drop it.
 */
Datum
dsync_semaphore_drop(PG_FUNCTION_ARGS)
{
	text	   *name = DsyncArgName(fcinfo, 0, "name");
	DsyncStore	store;
	DsyncRow   *row;

	DsyncPreventWrite("dsync_semaphore_drop()");

	DsyncStoreOpen(&store, fcinfo, DSYNC_TABLE_SEMAPHORE, true);
	for (;;)
	{
		TM_Result	result;

		row = SemaphoreFind(&store, name);
		if (row == NULL)
		{
			DsyncStoreClose(&store);
			PG_RETURN_BOOL(false);
		}
		if (!DsyncRowOwnerIsCaller(row, Anum_semaphore_owner))
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("must be a member of the role that created semaphore \"%s\"",
							text_to_cstring(name))));
		result = DsyncStoreLock(&store, row, LockTupleExclusive, LockWaitBlock);
		if (result == TM_Ok)
			break;
		/* Dropped or re-created meanwhile: look again. */
	}
	DsyncStoreDelete(&store, row);
	DsyncStoreClose(&store);
	DsyncPermitDropFree(DsyncCatalogGet(fcinfo), name);

	DsyncWakeAtEnd(DsyncWaitKey(name));
	PG_RETURN_BOOL(true);
}
