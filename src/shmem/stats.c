/*-------------------------------------------------------------------------
 *
 * stats.c
 *		Counters of each database, and the view dsync_stats.
 *
 * The counters live in the database's worker slot in shared memory and
 * are added to without locks (atomics): grants, releases, expiries and
 * renewals when the transaction that made them commits, waits as they
 * happen, events when a worker sends them.  They start at zero when the
 * server starts or the database gets its slot, and dsync_stats_reset()
 * zeroes them.  The view also names the processes that send the database's
 * notifications (sender_pid, sender_pids): any role may NOTIFY a dsync
 * channel, so a client that must not be fooled ignores notifications from
 * any other process.  The view dsync_databases shows every database's
 * slot and worker.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "stats.h"
#include "dbslot.h"
#include "queue.h"

PG_FUNCTION_INFO_V1(dsync_stats_row);
PG_FUNCTION_INFO_V1(dsync_stats_reset);
PG_FUNCTION_INFO_V1(dsync_database_slots);

#define STATS_COLS	(2 + DSYNC_NUM_COUNTERS + 3)

/* How long a worker that served a database still counts as its sender. */
#define DSYNC_SENDER_GRACE_MS	(60 * 1000)

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
 * DsyncStatSenders
 *		The processes that sent a database's notifications lately, as an
 *		int4[]: the one serving it now and those that did within the last
 *		minute (a worker that made way for another database may still have
 *		notifications on their way; its pid is not reused that soon).  The
 *		caller holds the worker lock.
 */
static Datum
DsyncStatSenders(DsyncDbSlot *slot)
{
	Datum		pids[DSYNC_SENDER_HISTORY];
	int			n = 0;
	TimestampTz since = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
													-DSYNC_SENDER_GRACE_MS);

	Assert(LWLockHeldByMe(dsync_workers->lock));

	for (int i = 0; slot != NULL && i < DSYNC_SENDER_HISTORY; i++)
		if (slot->senders[i].pid > 0 &&
			(slot->senders[i].until == 0 || slot->senders[i].until >= since))
			pids[n++] = Int32GetDatum(slot->senders[i].pid);
	return PointerGetDatum(construct_array(pids, n, INT4OID, sizeof(int32), true,
										   TYPALIGN_INT));
}

/*
 * dsync_stats_row
 *		SQL: dsync_stats_row() RETURNS TABLE(sender_pid, served, grants,
 *		renewals, releases, expiries, waits, wait_timeouts, wait_time,
 *		events_sent, events_lost, queue_used, queue_size, sender_pids): one
 *		row for the current database.
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
	Datum		senders;
	int			col = 0;

	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("function returning record called in context that cannot accept type record")));
	memset(nulls, false, sizeof(nulls));

	LWLockAcquire(dsync_workers->lock, LW_SHARED);
	if (slot != NULL && slot->dbid != MyDatabaseId)
		slot = NULL;
	if (slot != NULL)
	{
		pid = slot->pid > 0 ? slot->pid : 0;
		served = slot->state == DSYNC_DB_ACTIVE && !slot->start_warned;
	}
	senders = DsyncStatSenders(slot);
	LWLockRelease(dsync_workers->lock);
	if (slot != NULL)
	{
		used = DsyncQueueBytes(slot, NULL);
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
	values[col++] = Int64GetDatum((int64) dsync_workers->pool_size * DSYNC_CHUNK_DATA);
	values[col++] = senders;
	Assert(col == STATS_COLS);

	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(desc, values, nulls)));
}

/*
 * dsync_database_slots
 *		SQL: dsync_database_slots() RETURNS SETOF (datid, state, served,
 *		worker_pid, worker_since, next_deadline, queued_bytes): every
 *		database slot in use, for the view dsync_databases.
 */
Datum
dsync_database_slots(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

	InitMaterializedSRF(fcinfo, 0);
	for (int i = 0; i < dsync_workers->nslots; i++)
	{
		DsyncDbSlot *slot = &dsync_workers->slots[i];
		Datum		values[7];
		bool		nulls[7];
		DsyncDbState state;
		uint64		deadline;

		memset(nulls, false, sizeof(nulls));
		LWLockAcquire(dsync_workers->lock, LW_SHARED);
		state = slot->state;
		values[0] = ObjectIdGetDatum(slot->dbid);
		values[2] = BoolGetDatum(state == DSYNC_DB_ACTIVE && !slot->start_warned);
		values[3] = Int32GetDatum(slot->pid);
		nulls[3] = slot->pid <= 0;
		values[4] = TimestampTzGetDatum(slot->serving_since);
		nulls[4] = slot->pid <= 0 || slot->serving_since == 0;
		LWLockRelease(dsync_workers->lock);
		if (state == DSYNC_DB_FREE)
			continue;
		values[1] = CStringGetTextDatum(DsyncDbStateName(state));
		deadline = pg_atomic_read_u64(&slot->next_deadline);
		values[5] = TimestampTzGetDatum((TimestampTz) deadline);
		nulls[5] = deadline == 0 || state != DSYNC_DB_ACTIVE;
		values[6] = Int64GetDatum((int64) DsyncQueueBytes(slot, NULL));
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
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
