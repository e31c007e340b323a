/*-------------------------------------------------------------------------
 *
 * signal.c
 *		One-to-one signals (the SQL functions dsync_event_*): a signal is
 *		stored until exactly one waiter consumes it.
 *
 * Inside the code these are "signals"; "event" there means a lease or
 * membership event announced by NOTIFY (events.c).  Each pending signal is
 * one row of dsync_signal, keyed by the signal's name
 * and a sequence number, and owned by the role that set it: as with
 * leases, only roles with that role's privileges may consume or clear it,
 * so another tenant cannot steal it.  Setting inserts a row, so setters
 * never wait for each other or for waiters.  Waiting consumes the oldest
 * row the caller may take that nobody else is consuming (locked with
 * "skip", then deleted): two waiters never get the same signal, and both
 * changes are transactional, so a rolled-back set never happened and a
 * rolled-back wait gives its signal back (the row's deletion is undone and
 * the next waiter is woken).  Blocked waiters queue per name and role in
 * arrival order (wait.c, with keys of their own so that a signal and a
 * lease of the same name never share a queue) and only the first in line
 * of a role may consume; each commit that stores a signal wakes the queue.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "commands/sequence.h"
#include "miscadmin.h"
#include "utils/builtins.h"

#include "args.h"
#include "catalog.h"
#include "wait.h"
#include "store.h"
#include "events.h"

PG_FUNCTION_INFO_V1(dsync_event_set);
PG_FUNCTION_INFO_V1(dsync_event_wait);
PG_FUNCTION_INFO_V1(dsync_event_clear);
PG_FUNCTION_INFO_V1(dsync_event_is_set);

/*
 * SignalTryConsume
 *		Consume the oldest pending signal that the caller's role may take
 *		and nobody else is consuming; false if there is none.  Signals are
 *		read in set order and the first one that qualifies ends the scan.
 */
static bool
SignalTryConsume(FunctionCallInfo fcinfo, text *name)
{
	DsyncStore	store;
	bool		consumed = false;
	bool		rescan;

	DsyncStoreOpen(&store, fcinfo, DSYNC_TABLE_SIGNAL, true);
	do
	{
		DsyncScan  *scan = DsyncScanName(&store, name);
		DsyncRow   *row;

		rescan = false;
		while (!consumed && (row = DsyncScanNext(scan)) != NULL)
		{
			TM_Result	result;

			if (!DsyncRowOwnerIsCaller(row, Anum_signal_owner))
				continue;		/* another role's signal */
			result = DsyncStoreLock(&store, row, LockTupleExclusive, LockWaitSkip);
			if (result == TM_WouldBlock || result == TM_Deleted)
				continue;		/* somebody else is consuming or has it */
			if (result != TM_Ok)
			{
				rescan = true;
				break;
			}
			DsyncStoreDelete(&store, row);
			consumed = true;
		}
		DsyncScanEnd(scan);
	} while (rescan && !consumed);
	DsyncStoreClose(&store);
	return consumed;
}

/*
 * dsync_event_set
 *		SQL: dsync_event_set(name) RETURNS void
 *
 * The signal belongs to the calling role.  Its sequence number comes from
 * dsync_signal_seq, on which the caller needs no privilege: the function is
 * the only way in.
 */
Datum
dsync_event_set(PG_FUNCTION_ARGS)
{
	text	   *name = DsyncArgName(fcinfo, 0, "name");
	DsyncStore	store;
	DsyncRow   *row;
	int64		seq;

	DsyncPreventWrite("dsync_event_set()");

	DsyncStoreOpen(&store, fcinfo, DSYNC_TABLE_SIGNAL, true);
	if (!OidIsValid(store.catalog->signal_seq))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the installed version of extension \"dsync\" has no sequence \"dsync_signal_seq\""),
				 errhint("Run ALTER EXTENSION dsync UPDATE.")));
	seq = nextval_internal(store.catalog->signal_seq, false);
	row = DsyncStoreNewRow();
	DsyncRowSet(row, Anum_signal_name, PointerGetDatum(name));
	DsyncRowSet(row, Anum_signal_seq, Int64GetDatum(seq));
	DsyncRowSet(row, Anum_signal_set_at, TimestampTzGetDatum(GetCurrentTimestamp()));
	DsyncRowSet(row, Anum_signal_owner, ObjectIdGetDatum(GetUserId()));
	DsyncStoreInsert(&store, row);
	DsyncStoreClose(&store);

	DsyncEventRecordRaw(DSYNC_EVENT_SET, name, NULL, 0);
	DsyncWakeAtEnd(DsyncWaitKeySignal(name));
	PG_RETURN_VOID();
}

/* What a blocked signal waiter's tries need. */
typedef struct SignalTryArgs
{
	FunctionCallInfo fcinfo;
	text	   *name;
} SignalTryArgs;

/*
 * SignalTry
 *		One try of a blocked dsync_event_wait.
 */
static bool
SignalTry(void *arg, bool may_take, bool thorough, TimestampTz *retry_at)
{
	SignalTryArgs *args = arg;

	*retry_at = 0;
	return may_take && SignalTryConsume(args->fcinfo, args->name);
}

/*
 * dsync_event_wait
 *		SQL: dsync_event_wait(name, timeout DEFAULT NULL) RETURNS boolean
 *
 * Consumes one signal the caller's role may take, waiting up to timeout
 * (NULL: no limit but statement_timeout and cancel) without polling;
 * false if none came.
 */
Datum
dsync_event_wait(PG_FUNCTION_ARGS)
{
	text	   *name = DsyncArgName(fcinfo, 0, "name");
	bool		forever;
	int64		wait_usec;
	DsyncWaitSpec spec;
	SignalTryArgs args;

	DsyncArgWait(fcinfo, 1, "timeout", &forever, &wait_usec);
	DsyncPreventWrite("dsync_event_wait()");

	args.fcinfo = fcinfo;
	args.name = name;
	spec.key = DsyncWaitKeySignal(name);
	spec.roleid = GetUserId();
	spec.kind = "event";
	spec.name = name;
	spec.holder = cstring_to_text("");
	spec.forever = forever;
	spec.deadline = forever ? 0 : DsyncExpiry(GetCurrentTimestamp(), wait_usec, "timeout");
	spec.try_fn = SignalTry;
	spec.arg = &args;

	/* Nothing to wait for: one look, which holds nothing afterwards either. */
	if (!forever && wait_usec == 0)
	{
		TimestampTz retry_at;

		PG_RETURN_BOOL(SignalTry(&args, DsyncWaitMayTake(spec.key, spec.roleid),
								 false, &retry_at));
	}
	PG_RETURN_BOOL(DsyncWaitFor(&spec));
}

/*
 * dsync_event_clear
 *		SQL: dsync_event_clear(name) RETURNS bigint
 *
 * Drops every pending signal that the caller's role may take and nobody
 * is consuming right now; returns how many.
 */
Datum
dsync_event_clear(PG_FUNCTION_ARGS)
{
	text	   *name = DsyncArgName(fcinfo, 0, "name");
	DsyncStore	store;
	DsyncScan  *scan;
	DsyncRow   *row;
	int64		cleared = 0;

	DsyncPreventWrite("dsync_event_clear()");

	DsyncStoreOpen(&store, fcinfo, DSYNC_TABLE_SIGNAL, true);
	scan = DsyncScanName(&store, name);
	while ((row = DsyncScanNext(scan)) != NULL)
	{
		if (!DsyncRowOwnerIsCaller(row, Anum_signal_owner) ||
			DsyncStoreLock(&store, row, LockTupleExclusive, LockWaitSkip) != TM_Ok)
			continue;
		DsyncStoreDelete(&store, row);
		cleared++;
	}
	DsyncScanEnd(scan);
	DsyncStoreClose(&store);
	PG_RETURN_INT64(cleared);
}

/*
 * dsync_event_is_set
 *		SQL: dsync_event_is_set(name) RETURNS boolean
 *
 * Whether a signal that the caller's role may take is pending.  Read-only,
 * so it also works on a hot standby.
 */
Datum
dsync_event_is_set(PG_FUNCTION_ARGS)
{
	text	   *name = DsyncArgName(fcinfo, 0, "name");
	DsyncStore	store;
	DsyncScan  *scan;
	DsyncRow   *row;
	bool		pending = false;

	DsyncStoreOpen(&store, fcinfo, DSYNC_TABLE_SIGNAL, false);
	scan = DsyncScanName(&store, name);
	while (!pending && (row = DsyncScanNext(scan)) != NULL)
		pending = DsyncRowOwnerIsCaller(row, Anum_signal_owner);
	DsyncScanEnd(scan);
	DsyncStoreClose(&store);
	PG_RETURN_BOOL(pending);
}
