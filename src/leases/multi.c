/*-------------------------------------------------------------------------
 *
 * multi.c
 *		dsync_acquire_all: several leases, all or none.
 *
 * Taking locks one at a time, in whatever order each caller names them, is
 * how two callers deadlock: each holds one and waits for the other's.
 * dsync_acquire_all never holds one while it waits for another.  Each try
 * takes every name in an internal subtransaction, never waiting for
 * another transaction (as dsync_acquire with wait = 0 does), and keeps
 * what it took only if it got them all; otherwise the subtransaction is
 * rolled back, whoever its row locks met is woken (wait.c), and the caller
 * waits, holding nothing, in the queue of the name that stopped it.  A try
 * starts with that name, so a caller at the head of its queue does not
 * lose its place to the others' tries; if another name stops it, it moves
 * to that name's queue.  Waiting in one queue at a time, it takes the
 * other names when they are free even if others queue for them (it could
 * never be first in all its queues at once).  Two callers with
 * overlapping sets can only make each other look again, never wait on
 * each other.
 *
 * Names are taken in byte order after the one waited for, each once; the
 * tokens come back in the order the caller gave, a name given twice
 * getting its token twice.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"

#include "args.h"
#include "lease.h"
#include "fence.h"
#include "wait.h"

PG_FUNCTION_INFO_V1(dsync_acquire_all);

/* The most names one call may take. */
#define DSYNC_MAX_ALL	1000

/* What the tries of one call need. */
typedef struct MultiArgs
{
	FunctionCallInfo fcinfo;
	const LeaseGrant *grant;
	int			n;				/* distinct names, in byte order */
	text	  **names;
	int64	   *tokens;			/* of each name, once granted */
	int			first;			/* the name to try first: the one waited for */
	int			stopped;		/* the name that stopped the last try, or -1 */
	bool		waiting;		/* in a wait (not wait = 0) */
} MultiArgs;

/*
 * MultiNameCmp
 *		qsort comparator: names in byte order.
 */
static int
MultiNameCmp(const void *a, const void *b)
{
	text	   *x = *(text *const *) a;
	text	   *y = *(text *const *) b;
	int			lx = VARSIZE_ANY_EXHDR(x);
	int			ly = VARSIZE_ANY_EXHDR(y);
	int			c = memcmp(VARDATA_ANY(x), VARDATA_ANY(y), Min(lx, ly));

	return c != 0 ? c : (lx > ly) - (lx < ly);
}

/*
 * MultiTry
 *		One try of every name (see DsyncTryFunc), the one waited for first.
 *		may_take is about that one.  A caller waits in one queue at a time,
 *		so if the others' queues held it back too it would have to be first
 *		in every one at once, which it never is while others wait there: a
 *		blocked caller takes the other names if they are free, ahead of
 *		their queues (a caller that does not wait respects every queue, as
 *		dsync_acquire does).  If a name other than the one waited for stops
 *		the try, the wait moves to that name's queue (DSYNC_WAIT_ELSEWHERE).
 */
static bool
MultiTry(void *arg, bool may_take, bool thorough, TimestampTz *retry_at)
{
	MultiArgs  *args = arg;

	for (int k = 0; k < args->n; k++)
	{
		int			i = k == 0 ? args->first : (k <= args->first ? k - 1 : k);
		bool		mine = i == args->first;
		TimestampTz at = 0;

		bool		take = mine ? may_take :
			args->waiting || DsyncWaitMayTake(DsyncWaitKey(args->names[i]), InvalidOid);

		if (!DsyncLeaseTryGrant(args->fcinfo, args->names[i], args->grant, take,
								thorough && mine, &args->tokens[i], &at))
		{
			args->stopped = i;
			*retry_at = mine ? at : DSYNC_WAIT_ELSEWHERE;
			return false;
		}
	}
	args->stopped = -1;
	return true;
}

/*
 * MultiNames
 *		The leases argument: its elements, checked as names, and (in *names,
 *		*n) the distinct ones in byte order; *order maps each element to its
 *		place among those.
 */
static text **
MultiNames(FunctionCallInfo fcinfo, int *nelems, int **order, int *n)
{
	ArrayType  *array;
	Datum	   *elems;
	bool	   *nulls;
	text	  **given;
	text	  **sorted;
	int			count;

	DsyncArgNotNull(fcinfo, 0, "leases");
	array = PG_GETARG_ARRAYTYPE_P(0);
	if (ARR_NDIM(array) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("argument \"leases\" must be a one-dimensional array")));
	deconstruct_array(array, TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, &count);
	if (count == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"leases\" must not be empty")));
	if (count > DSYNC_MAX_ALL)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("argument \"leases\" has %d names; at most %d may be taken at once",
						count, DSYNC_MAX_ALL)));
	given = palloc(sizeof(text *) * count);
	for (int i = 0; i < count; i++)
	{
		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("argument \"leases\" must not contain nulls")));
		given[i] = DatumGetTextPP(elems[i]);
		DsyncArgNameCheck(given[i], "leases", true);
	}

	sorted = palloc(sizeof(text *) * count);
	memcpy(sorted, given, sizeof(text *) * count);
	qsort(sorted, count, sizeof(text *), MultiNameCmp);
	*n = 0;
	for (int i = 0; i < count; i++)
		if (*n == 0 || MultiNameCmp(&sorted[*n - 1], &sorted[i]) != 0)
			sorted[(*n)++] = sorted[i];

	*order = palloc(sizeof(int) * count);
	for (int i = 0; i < count; i++)
	{
		text	  **found = bsearch(&given[i], sorted, *n, sizeof(text *), MultiNameCmp);

		(*order)[i] = (int) (found - sorted);
	}
	*nelems = count;
	return sorted;
}

/*
 * dsync_acquire_all
 *		SQL: dsync_acquire_all(leases, holder, ttl, wait, info) RETURNS
 *		bigint[]: the tokens in the array's order, or NULL.
 */
Datum
dsync_acquire_all(PG_FUNCTION_ARGS)
{
	LeaseGrant	grant;
	MultiArgs	args;
	int			nelems;
	int		   *order;
	bool		wait_forever;
	int64		wait_usec;
	bool		granted;
	Datum	   *result;

	args.names = MultiNames(fcinfo, &nelems, &order, &args.n);
	DsyncLeaseGrantArgs(fcinfo, &grant, &wait_forever, &wait_usec);
	DsyncPreventWrite("dsync_acquire_all()");
	DsyncFenceForgetBusy();

	args.fcinfo = fcinfo;
	args.grant = &grant;
	args.tokens = palloc0(sizeof(int64) * args.n);
	args.first = 0;
	args.stopped = -1;
	args.waiting = wait_forever || wait_usec > 0;

	{
		DsyncWaitSpec spec;
		TimestampTz deadline = wait_forever ? 0 :
			DsyncExpiry(GetCurrentTimestamp(), wait_usec, "wait");

		spec.roleid = InvalidOid;
		spec.kind = "lease";
		spec.holder = grant.holder;
		spec.forever = wait_forever;
		spec.deadline = deadline;
		spec.try_fn = MultiTry;
		spec.arg = &args;
		for (;;)
		{
			spec.name = args.names[args.first];
			spec.key = DsyncWaitKey(spec.name);
			if (!wait_forever && wait_usec == 0)
			{
				granted = DsyncWaitTryOnce(&spec, DsyncWaitMayTake(spec.key, InvalidOid));
				break;
			}
			granted = DsyncWaitFor(&spec);
			if (granted || args.stopped < 0 || args.stopped == args.first)
				break;			/* granted, or the wait ran out */
			/* Another name stopped the try: wait in its queue. */
			args.first = args.stopped;
			args.stopped = -1;
			if (!wait_forever && GetCurrentTimestamp() >= deadline)
				break;
		}
	}
	if (!granted)
		PG_RETURN_NULL();

	result = palloc(sizeof(Datum) * nelems);
	for (int i = 0; i < nelems; i++)
		result[i] = Int64GetDatum(args.tokens[order[i]]);
	PG_RETURN_ARRAYTYPE_P(construct_array(result, nelems, INT8OID, sizeof(int64),
										  FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
}
