/*-------------------------------------------------------------------------
 *
 * semaphore.c
 *		Semaphore definitions: how many permits a lease name has.
 *
 * A semaphore is a lease with N permits, and each permit is a lease row of
 * its own (dsync_lease's slot column, 0 to N-1), so acquire, renew,
 * release, assert_held, waiting, fencing, ownership and expiry work for a
 * permit exactly as for a lock.  A permit row is only ever granted under
 * its own row lock after checking it is free, and only slots below the
 * definition's count are granted, so a semaphore cannot be oversubscribed
 * whatever the interleaving.  The definition itself is one row of
 * dsync_semaphore, read with the latest committed state like everything
 * else, so that every isolation level sees the same count.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"

#include "dsync.h"

PG_FUNCTION_INFO_V1(dsync_semaphore_create);
PG_FUNCTION_INFO_V1(dsync_semaphore_drop);

/*
 * SemaphoreFind
 *		The definition row of a semaphore, or NULL.
 */
static DsyncLeaseRow *
SemaphoreFind(DsyncStore *store, text *name)
{
	List	   *rows = DsyncStoreScan(store, name);

	return rows == NIL ? NULL : linitial(rows);
}

/*
 * DsyncSemaphorePermits
 *		How many permits a lease name has: its semaphore's count, or 1.
 *		An installation without the semaphore table has only locks.
 */
int
DsyncSemaphorePermits(FunctionCallInfo fcinfo, text *name)
{
	return DsyncSemaphorePermitsFor(fcinfo, name, false);
}

/*
 * DsyncSemaphorePermitsFor
 *		The same; for a grant (for_grant), the definition is also share-
 *		locked until the caller's transaction ends, so that no drop or
 *		re-creation with another count can commit between our reading the
 *		count and our grant committing.  Returns 0 (grant nothing now) if
 *		the definition is being changed right now.
 */
int
DsyncSemaphorePermitsFor(FunctionCallInfo fcinfo, text *name, bool for_grant)
{
	const DsyncCatalog *catalog = DsyncCatalogGet(fcinfo);
	DsyncStore	store;
	DsyncLeaseRow *row;
	int			permits = 1;

	if (!OidIsValid(catalog->rels[DSYNC_TABLE_SEMAPHORE]))
		return 1;
	DsyncStoreOpenCatalog(&store, catalog, DSYNC_TABLE_SEMAPHORE, for_grant);
	for (;;)
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
	DsyncStoreClose(&store);
	return permits;
}

/*
 * dsync_semaphore_create
 *		SQL: dsync_semaphore_create(name, permits) RETURNS boolean
 *
 * Idempotent, so that every process can create the semaphore it uses at
 * start-up: true if created now, false if it exists with this count, an
 * error if it exists with another.  Concurrent creators of one name are
 * serialised by the name's insert lock, so the second sees the first's
 * committed definition and never meets it in the unique index.
 */
Datum
dsync_semaphore_create(PG_FUNCTION_ARGS)
{
	text	   *name = DsyncArgName(fcinfo, 0, "name");
	int32		permits;
	DsyncStore	store;
	DsyncLeaseRow *row;

	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("argument \"permits\" must not be null")));
	permits = PG_GETARG_INT32(1);
	if (permits < 1 || permits > DSYNC_MAX_PERMITS)
		ereport(ERROR,
				(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
				 errmsg("argument \"permits\" must be between 1 and %d", DSYNC_MAX_PERMITS),
				 errdetail("The value is %d.", permits)));

	DsyncPreventWrite("dsync_semaphore_create()");

	DsyncStoreOpenTable(&store, fcinfo, DSYNC_TABLE_SEMAPHORE, true);
	(void) DsyncStoreInsertLock(DSYNC_TABLE_SEMAPHORE, name, 0, true);
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

	row = DsyncStoreNewRow();
	row->values[Anum_semaphore_name - 1] = PointerGetDatum(name);
	row->nulls[Anum_semaphore_name - 1] = false;
	row->values[Anum_semaphore_permits - 1] = Int32GetDatum(permits);
	row->nulls[Anum_semaphore_permits - 1] = false;
	row->values[Anum_semaphore_created_at - 1] = TimestampTzGetDatum(GetCurrentTimestamp());
	row->nulls[Anum_semaphore_created_at - 1] = false;
	row->values[Anum_semaphore_owner - 1] = ObjectIdGetDatum(GetUserId());
	row->nulls[Anum_semaphore_owner - 1] = false;
	DsyncStoreInsert(&store, row);
	DsyncStoreClose(&store);

	/* Waiters on the name may now have more permits to take. */
	DsyncWakeAtEnd(DsyncWaitKey(name));
	PG_RETURN_BOOL(true);
}

/*
 * dsync_semaphore_drop
 *		SQL: dsync_semaphore_drop(name) RETURNS boolean
 *
 * Removes the definition; the name becomes a one-permit lease again.
 * Holders of permits keep them until they release them or their ttl
 * passes.  Only the role that created it (or a member) may drop it.
 */
Datum
dsync_semaphore_drop(PG_FUNCTION_ARGS)
{
	text	   *name = DsyncArgName(fcinfo, 0, "name");
	DsyncStore	store;
	DsyncLeaseRow *row;

	DsyncPreventWrite("dsync_semaphore_drop()");

	DsyncStoreOpenTable(&store, fcinfo, DSYNC_TABLE_SEMAPHORE, true);
	(void) DsyncStoreInsertLock(DSYNC_TABLE_SEMAPHORE, name, 0, true);
	row = SemaphoreFind(&store, name);
	if (row == NULL)
	{
		DsyncStoreClose(&store);
		PG_RETURN_BOOL(false);
	}
	if (!has_privs_of_role(GetUserId(), DatumGetObjectId(row->values[Anum_semaphore_owner - 1])))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("must be a member of the role that created semaphore \"%s\"",
						text_to_cstring(name))));
	if (DsyncStoreLock(&store, row, LockTupleExclusive, LockWaitBlock) != TM_Ok)
		ereport(ERROR,
				(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				 errmsg("semaphore \"%s\" was changed concurrently", text_to_cstring(name))));
	DsyncStoreDelete(&store, row);
	DsyncStoreClose(&store);

	DsyncWakeAtEnd(DsyncWaitKey(name));
	PG_RETURN_BOOL(true);
}
