/*-------------------------------------------------------------------------
 *
 * views.c
 *		Rows behind the observing views.
 *
 * The view dsync_leases reads this set-returning function rather than the
 * table, for two reasons: it shows the latest committed state, as every
 * dsync function acts on, and it reads without SIREAD locks.  A plain SQL
 * view over the table would take predicate locks in a SERIALIZABLE
 * transaction, and a concurrent dsync_acquire writing the same rows could
 * then fail with a serialization error that dsync itself must never cause.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/tuplestore.h"

#include "dsync.h"

PG_FUNCTION_INFO_V1(dsync_lease_rows);

#define LEASE_ROWS_COLS 10

/*
 * dsync_lease_rows
 *		SQL: dsync_lease_rows() RETURNS TABLE(lease, holder, fencing,
 *		permits, acquired_at, renewed_at, expires_at, ttl, info, owner)
 *
 * One row per live holder.  Works on a hot standby.
 */
Datum
dsync_lease_rows(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	DsyncStore	store;
	List	   *rows;
	ListCell   *lc;
	TimestampTz now;

	InitMaterializedSRF(fcinfo, 0);

	DsyncStoreOpen(&store, fcinfo, false);
	rows = DsyncStoreScanAll(&store);
	now = GetCurrentTimestamp();
	foreach(lc, rows)
	{
		DsyncLeaseRow *row = lfirst(lc);
		Datum		values[LEASE_ROWS_COLS];
		bool		nulls[LEASE_ROWS_COLS];

		if (!DsyncRowIsLive(row, now))
			continue;

		values[0] = row->values[Anum_lease_name - 1];
		nulls[0] = false;
		values[1] = row->values[Anum_lease_holder - 1];
		nulls[1] = false;
		values[2] = row->values[Anum_lease_fencing - 1];
		nulls[2] = row->nulls[Anum_lease_fencing - 1];
		values[3] = Int32GetDatum(DsyncSemaphorePermits(fcinfo,
														DatumGetTextPP(row->values[Anum_lease_name - 1])));
		nulls[3] = false;
		for (int i = 0; i < 6; i++)
		{
			/* acquired_at, renewed_at, expires_at, ttl, info, owner */
			values[4 + i] = row->values[Anum_lease_acquired_at - 1 + i];
			nulls[4 + i] = row->nulls[Anum_lease_acquired_at - 1 + i];
		}
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	DsyncStoreClose(&store);

	return (Datum) 0;
}
