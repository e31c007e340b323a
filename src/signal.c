/*-------------------------------------------------------------------------
 *
 * signal.c
 *		One-to-one events: a signal is stored until exactly one waiter
 *		consumes it.
 *
 * Each pending signal is one row of dsync_signal, keyed by the event name
 * and a sequence number.  Setting inserts a row, so setters never wait for
 * each other or for waiters.  Waiting consumes the oldest row that nobody
 * else is consuming (locked with "skip", then deleted): two waiters never
 * get the same signal, and both changes are transactional, so a rolled-back
 * set never happened and a rolled-back wait gives its signal back (the
 * row's deletion is undone and the next waiter is woken).  Blocked waiters
 * queue in arrival order (wait.c, with keys of their own so that an event
 * and a lease of the same name never share a queue) and only the first in
 * line may consume; each commit that stores a signal wakes the queue.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "commands/sequence.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

#include "dsync.h"

PG_FUNCTION_INFO_V1(dsync_event_set);
PG_FUNCTION_INFO_V1(dsync_event_wait);
PG_FUNCTION_INFO_V1(dsync_event_clear);
PG_FUNCTION_INFO_V1(dsync_event_is_set);

/*
 * SignalTryConsume
 *		Consume the oldest pending signal nobody else is consuming; false
 *		if there is none.
 */
static bool
SignalTryConsume(FunctionCallInfo fcinfo, text *name)
{
	DsyncStore	store;
	bool		consumed = false;
	bool		rescan;

	DsyncStoreOpenTable(&store, fcinfo, DSYNC_TABLE_SIGNAL, true);
	do
	{
		List	   *rows = DsyncStoreScan(&store, name);
		ListCell   *lc;

		CHECK_FOR_INTERRUPTS();
		rescan = false;
		foreach(lc, rows)
		{
			DsyncLeaseRow *row = lfirst(lc);
			TM_Result	result = DsyncStoreLock(&store, row, LockTupleExclusive,
												LockWaitSkip);

			if (result == TM_WouldBlock || result == TM_Deleted)
				continue;		/* somebody else is consuming or has it */
			if (result != TM_Ok)
			{
				rescan = true;
				break;
			}
			DsyncStoreDelete(&store, row);
			consumed = true;
			break;
		}
	} while (rescan && !consumed);
	DsyncStoreClose(&store);
	return consumed;
}

/*
 * dsync_event_set
 *		SQL: dsync_event_set(name) RETURNS void
 */
Datum
dsync_event_set(PG_FUNCTION_ARGS)
{
	text	   *name = DsyncArgName(fcinfo, 0, "name");
	DsyncStore	store;
	DsyncLeaseRow *row;
	int64		seq;

	DsyncPreventWrite("dsync_event_set()");

	DsyncStoreOpenTable(&store, fcinfo, DSYNC_TABLE_SIGNAL, true);
	seq = DatumGetInt64(DirectFunctionCall1(nextval_oid,
											ObjectIdGetDatum(store.catalog->signal_seq)));
	row = DsyncStoreNewRow();
	row->values[Anum_signal_name - 1] = PointerGetDatum(name);
	row->nulls[Anum_signal_name - 1] = false;
	row->values[Anum_signal_seq - 1] = Int64GetDatum(seq);
	row->nulls[Anum_signal_seq - 1] = false;
	row->values[Anum_signal_set_at - 1] = TimestampTzGetDatum(GetCurrentTimestamp());
	row->nulls[Anum_signal_set_at - 1] = false;
	row->values[Anum_signal_owner - 1] = ObjectIdGetDatum(GetUserId());
	row->nulls[Anum_signal_owner - 1] = false;
	DsyncStoreInsert(&store, row);
	DsyncStoreClose(&store);

	DsyncEventRecordRaw(DSYNC_EVENT_SET, name, NULL, 0);
	DsyncWakeAtEnd(DsyncWaitKeyEvent(name));
	PG_RETURN_VOID();
}

/*
 * dsync_event_wait
 *		SQL: dsync_event_wait(name, timeout DEFAULT NULL) RETURNS boolean
 *
 * Consumes one signal, waiting up to timeout (NULL: no limit but
 * statement_timeout and cancel) without polling; false if none came.
 */
Datum
dsync_event_wait(PG_FUNCTION_ARGS)
{
	text	   *name = DsyncArgName(fcinfo, 0, "name");
	bool		forever;
	int64		wait_usec;
	uint64		key = DsyncWaitKeyEvent(name);
	TimestampTz deadline;
	MemoryContext attempt_cxt;
	MemoryContext oldcontext = CurrentMemoryContext;

	/* Set inside PG_TRY and read in PG_CATCH, so they must be volatile. */
	volatile bool queued = false;
	volatile bool consumed = false;

	DsyncArgWait(fcinfo, 1, "timeout", &forever, &wait_usec);
	DsyncPreventWrite("dsync_event_wait()");
	deadline = forever ? 0 : DsyncExpiry(GetCurrentTimestamp(), wait_usec, "timeout");

	attempt_cxt = AllocSetContextCreate(CurrentMemoryContext, "dsync event wait",
										ALLOCSET_SMALL_SIZES);
	PG_TRY();
	{
		for (;;)
		{
			uint64		generation = DsyncWaitGeneration(key);

			MemoryContextReset(attempt_cxt);
			MemoryContextSwitchTo(attempt_cxt);
			if (DsyncWaitMayTake(key))
				consumed = SignalTryConsume(fcinfo, name);
			MemoryContextSwitchTo(oldcontext);
			if (consumed)
				break;
			if (!forever && GetCurrentTimestamp() >= deadline)
				break;
			if (!queued)
			{
				DsyncWaitEnqueue(key, "event", name, cstring_to_text(""));
				queued = true;
				continue;
			}
			DsyncWaitSleep(key, deadline, generation);
		}
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(oldcontext);
		if (queued)
			DsyncWaitDequeue();
		PG_RE_THROW();
	}
	PG_END_TRY();

	if (queued)
		DsyncWaitDequeue();
	MemoryContextDelete(attempt_cxt);
	PG_RETURN_BOOL(consumed);
}

/*
 * dsync_event_clear
 *		SQL: dsync_event_clear(name) RETURNS bigint
 *
 * Drops every pending signal nobody is consuming right now; returns how
 * many.
 */
Datum
dsync_event_clear(PG_FUNCTION_ARGS)
{
	text	   *name = DsyncArgName(fcinfo, 0, "name");
	DsyncStore	store;
	List	   *rows;
	ListCell   *lc;
	int64		cleared = 0;

	DsyncPreventWrite("dsync_event_clear()");

	DsyncStoreOpenTable(&store, fcinfo, DSYNC_TABLE_SIGNAL, true);
	rows = DsyncStoreScan(&store, name);
	foreach(lc, rows)
	{
		DsyncLeaseRow *row = lfirst(lc);

		if (DsyncStoreLock(&store, row, LockTupleExclusive, LockWaitSkip) != TM_Ok)
			continue;
		DsyncStoreDelete(&store, row);
		cleared++;
	}
	DsyncStoreClose(&store);
	PG_RETURN_INT64(cleared);
}

/*
 * dsync_event_is_set
 *		SQL: dsync_event_is_set(name) RETURNS boolean
 *
 * Read-only, so it also works on a hot standby.
 */
Datum
dsync_event_is_set(PG_FUNCTION_ARGS)
{
	text	   *name = DsyncArgName(fcinfo, 0, "name");
	DsyncStore	store;
	bool		pending;

	DsyncStoreOpenTable(&store, fcinfo, DSYNC_TABLE_SIGNAL, false);
	pending = DsyncStoreScan(&store, name) != NIL;
	DsyncStoreClose(&store);
	PG_RETURN_BOOL(pending);
}
