/*-------------------------------------------------------------------------
 *
 * stats.c
 *		Counters of each database, and the view dsync_stats.
 *
 * The counters live in the database's worker slot in shared memory and
 * are added to without locks (atomics): grants, releases, expiries and
 * renewals when the transaction that made them commits, waits as they
 * happen, events when the reaper sends them.  They start at zero when the
 * server starts or the database gets its slot, and dsync_stats_reset()
 * zeroes them.  The view also names the process that sends the database's
 * notifications (sender_pid): any role may NOTIFY a dsync channel, so a
 * client that must not be fooled ignores notifications from any other
 * process.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "dsync.h"

PG_FUNCTION_INFO_V1(dsync_stats_row);
PG_FUNCTION_INFO_V1(dsync_stats_reset);

#define STATS_COLS	(2 + DSYNC_NUM_COUNTERS + 2)

/*
 * DsyncStatAddSlot
 *		Add to a counter of a database's slot.  Safe anywhere, also in
 *		commit callbacks: no locks, no errors.
 */
void
DsyncStatAddSlot(DsyncDbSlot *slot, DsyncCounter counter, int64 delta)
{
	if (slot != NULL && delta != 0)
		pg_atomic_fetch_add_u64(&slot->counters[counter], (uint64) delta);
}

/*
 * DsyncStatAdd
 *		Add to a counter of this database.
 */
void
DsyncStatAdd(DsyncCounter counter, int64 delta)
{
	if (delta != 0)
		DsyncStatAddSlot(DsyncDbSlotFind(MyDatabaseId), counter, delta);
}

/*
 * dsync_stats_row
 *		SQL: dsync_stats_row() RETURNS TABLE(sender_pid, served, grants,
 *		renewals, releases, expiries, waits, wait_timeouts, wait_time,
 *		events_sent, events_lost, queue_used, queue_size): one row for the
 *		current database.
 */
Datum
dsync_stats_row(PG_FUNCTION_ARGS)
{
	DsyncDbSlot *slot = DsyncDbSlotFind(MyDatabaseId);
	TupleDesc	desc;
	Datum		values[STATS_COLS];
	bool		nulls[STATS_COLS];
	int			pid = 0;
	bool		served = false;
	uint64		used = 0;
	int			col = 0;

	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("function returning record called in context that cannot accept type record")));
	memset(nulls, false, sizeof(nulls));

	if (slot != NULL)
	{
		LWLockAcquire(dsync_workers->lock, LW_SHARED);
		if (slot->dbid == MyDatabaseId)
		{
			pid = slot->pid > 0 ? slot->pid : 0;
			served = pid > 0 && slot->state == DSYNC_DB_ACTIVE;
		}
		LWLockRelease(dsync_workers->lock);
		LWLockAcquire(slot->queue_lock, LW_SHARED);
		used = slot->queue_head - slot->queue_tail;
		LWLockRelease(slot->queue_lock);
	}

	values[col] = Int32GetDatum(pid);
	nulls[col++] = pid == 0;
	values[col++] = BoolGetDatum(served);
	for (int i = 0; i < DSYNC_NUM_COUNTERS; i++)
	{
		uint64		value = slot ? pg_atomic_read_u64(&slot->counters[i]) : 0;

		if (i == DSYNC_STAT_WAIT_TIME)
		{
			Interval   *iv = palloc0(sizeof(Interval));

			iv->time = (TimeOffset) value;
			values[col++] = IntervalPGetDatum(iv);
		}
		else
			values[col++] = Int64GetDatum((int64) value);
	}
	values[col++] = Int64GetDatum((int64) used);
	values[col++] = Int64GetDatum((int64) dsync_event_queue_size * 1024);
	Assert(col == STATS_COLS);

	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(desc, values, nulls)));
}

/*
 * dsync_stats_reset
 *		SQL: dsync_stats_reset() RETURNS void: zero this database's
 *		counters.  Not granted to PUBLIC.
 */
Datum
dsync_stats_reset(PG_FUNCTION_ARGS)
{
	DsyncDbSlot *slot = DsyncDbSlotFind(MyDatabaseId);

	if (slot != NULL)
		for (int i = 0; i < DSYNC_NUM_COUNTERS; i++)
			pg_atomic_write_u64(&slot->counters[i], 0);
	PG_RETURN_VOID();
}
