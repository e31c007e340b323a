/*-------------------------------------------------------------------------
 *
 * queuegrant.c
 *		Waiting without a connection: dsync_queue, dsync_claim,
 *		dsync_unqueue, and the grant to the first queued waiter made by
 *		whoever frees a name.
 *
 * The queue itself is in wait/queued.c.  Here is what grants from it: a
 * release grants the name to the first queued waiter in its own
 * transaction (one write transaction per hand-off), as that waiter's role
 * (it owns the grant).  What frees a name without a release that can
 * grant (a rollback, an expiry, a blocked backend that gave up, a grant
 * nobody claimed) pokes the worker, which grants in dsync_queue_pass.
 * Durable and ephemeral leases, shared holders and semaphore permits.  An
 * ephemeral grant takes effect at once, as ephemeral leases do: its entry
 * is GRANTED at once too, not when the granting transaction ends (unless
 * it raised a bound fence, which a rollback undoes with the grant).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "commands/async.h"
#include "lib/stringinfo.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/elog.h"
#include "utils/json.h"
#include "utils/timestamp.h"

#include "args.h"
#include "catalog.h"
#include "lazycommit.h"
#include "events.h"
#include "ephemeral.h"
#include "fence.h"
#include "lease.h"
#include "queued.h"
#include "wait.h"
#include "compat.h"

PG_FUNCTION_INFO_V1(dsync_queue);
PG_FUNCTION_INFO_V1(dsync_claim);
PG_FUNCTION_INFO_V1(dsync_unqueue);
PG_FUNCTION_INFO_V1(dsync_queue_pass);

/* How often the worker drops queued waiters nobody renews. */
#define QUEUE_SWEEP_MS		1000

typedef struct QueueTryArgs
{
	FunctionCallInfo fcinfo;
	text	   *lease;
	LeaseGrant	grant;
	Interval	ttl;
	bool		shared;
	bool		durable;
	bool		undone_at_abort;	/* an ephemeral grant a rollback takes back */
	int64		token;
} QueueTryArgs;

/*
 * QueueTry
 *		One try of a grant to a queued waiter (or to dsync_queue's caller).
 */
static bool
QueueTry(void *arg, bool may_take, bool thorough, TimestampTz *retry_at)
{
	QueueTryArgs *args = arg;

	if (args->shared)
		return DsyncSharedTryGrant(args->fcinfo, args->lease, &args->grant, may_take,
								   &args->token, retry_at);
	if (!args->durable)
		return DsyncLeaseTryGrantEphemeral(args->fcinfo, args->lease, &args->grant, may_take,
										   &args->token, &args->undone_at_abort, retry_at);
	return DsyncLeaseTryGrant(args->fcinfo, args->lease, &args->grant, may_take, thorough,
							  &args->token, retry_at);
}

/*
 * QueueTryOnce
 *		One try, in an internal subtransaction, of a grant of lease to
 *		holder for ttl_usec; true with *token if made.  may_take false:
 *		others are ahead in line, so only a holder that has it already
 *		(a reentrant grant) gets it.  *stands: the grant stands whatever
 *		this transaction does (an ephemeral one that raised no fence).
 */
static bool
QueueTryOnce(FunctionCallInfo fcinfo, text *lease, uint64 key, text *holder, int64 ttl_usec,
			 int mode, bool durable, bool may_take, int64 *token, bool *stands)
{
	QueueTryArgs args;
	DsyncWaitSpec spec;

	/* A fence another try found busy is that try's business, not ours. */
	DsyncFenceForgetBusy();
	memset(&args, 0, sizeof(args));
	args.fcinfo = fcinfo;
	args.lease = lease;
	args.ttl.time = ttl_usec;
	args.grant.holder = holder;
	args.grant.ttl = &args.ttl;
	args.grant.ttl_usec = ttl_usec;
	args.grant.info_null = true;
	args.shared = mode == DSYNC_QUEUED_SHARED;
	args.durable = durable;
	memset(&spec, 0, sizeof(spec));
	spec.key = key;
	spec.roleid = InvalidOid;
	spec.kind = "queued";
	spec.name = lease;
	spec.holder = holder;
	spec.try_fn = QueueTry;
	spec.arg = &args;
	*stands = false;
	if (!DsyncWaitTryOnce(&spec, may_take))
		return false;
	*token = args.token;
	*stands = !durable && !args.undone_at_abort;
	if (!durable)
		DsyncXactChanged();		/* no row written, but a change: no PREPARE */
	return true;
}

/*
 * QueueNotifyGranted
 *		Tell the waiter's client, on its channel, that the grant is made:
 *		a NOTIFY of this transaction, so sent only if it commits, and sent
 *		by this backend, not the worker (a hop and a logged event per
 *		hand-off made a queued hand-off several times slower than a
 *		backend's).  The client need not trust the sender: it takes the
 *		grant with dsync_claim, which is the only word on it.
 */
static void
QueueNotifyGranted(const DsyncQueuedWaiter *waiter, int64 token)
{
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfoString(&buf, "{\"event\":\"granted\",\"lease\":");
	escape_json(&buf, waiter->name);
	appendStringInfoString(&buf, ",\"holder\":");
	escape_json(&buf, waiter->holder);
	appendStringInfo(&buf, ",\"fencing\":" INT64_FORMAT "}", token);
	Async_Notify(waiter->channel, buf.data);
	pfree(buf.data);
}

/*
 * QueueTryReserved
 *		One try of the grant to a reserved queued waiter, as its role; true
 *		with *token if made (the entry stays reserved: the caller settles
 *		it).  A try that fails with an error is not the caller's failure
 *		(a release, or a keeper's statement renewing many holds and
 *		places, must not fail because of somebody else's wait): the waiter
 *		is dropped from the line with a warning, unless the error is a
 *		cancel or shutdown, which goes on (*dropped).
 */
static bool
QueueTryReserved(FunctionCallInfo fcinfo, const DsyncQueuedWaiter *waiter, int64 *token,
				 bool *stands, bool *dropped)
{
	text	   *lease = cstring_to_text(waiter->name);
	text	   *holder = cstring_to_text(waiter->holder);
	MemoryContext oldcontext = CurrentMemoryContext;
	Oid			save_userid;
	int			save_sec;
	volatile bool granted = false;

	*dropped = false;
	GetUserIdAndSecContext(&save_userid, &save_sec);
	PG_TRY();
	{
		SetUserIdAndSecContext(waiter->userid, save_sec | SECURITY_LOCAL_USERID_CHANGE);
		granted = QueueTryOnce(fcinfo, lease, waiter->key, holder, waiter->ttl_usec,
							   waiter->mode, waiter->durable, true, token, stands);
		SetUserIdAndSecContext(save_userid, save_sec);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		SetUserIdAndSecContext(save_userid, save_sec);
		MemoryContextSwitchTo(oldcontext);
		edata = CopyErrorData();
		/* The try's subtransaction is rolled back already (wait.c). */
		if (edata->sqlerrcode == ERRCODE_QUERY_CANCELED ||
			edata->sqlerrcode == ERRCODE_ADMIN_SHUTDOWN ||
			!IsTransactionState())
			PG_RE_THROW();
		FlushErrorState();
		DsyncQueuedUnreserve(waiter);
		DsyncQueuedDrop(waiter);
		*dropped = true;
		ereport(WARNING,
				(errcode(edata->sqlerrcode),
				 errmsg("dsync dropped queued waiter \"%s\" of lease \"%s\": %s",
						waiter->holder, waiter->name, edata->message)));
		FreeErrorData(edata);
		return false;
	}
	PG_END_TRY();
	/*
	 * A grant marked the transaction changed itself (its rows, or
	 * QueueTryOnce for an ephemeral one), so no PREPARE; a try that got
	 * nothing changed nothing, as a wait that ran out, and goes back in
	 * line now.
	 */
	if (!granted)
		DsyncQueuedUnreserve(waiter);
	return granted;
}

/*
 * QueueGrantTo
 *		Grant a queued waiter its lease in this transaction, as its role;
 *		true if made.
 */
static bool
QueueGrantTo(FunctionCallInfo fcinfo, const DsyncQueuedWaiter *waiter)
{
	int64		token = 0;
	bool		stands = false;
	bool		dropped;
	TimestampTz before = GetCurrentTimestamp();

	if (!DsyncQueuedReserve(waiter) ||
		!QueueTryReserved(fcinfo, waiter, &token, &stands, &dropped))
		return false;
	DsyncQueuedSetToken(waiter, token, before + waiter->ttl_usec, GetCurrentTimestamp());
	/* Ephemeral: in effect now, and GRANTED now (nothing to flush). */
	if (stands)
		DsyncQueuedSettleNow(waiter);
	/* As durable as the waiter's own grant would have been. */
	else
		DsyncCommitAtLeast(waiter->commit_level);
	if (waiter->channel[0] != '\0')
		QueueNotifyGranted(waiter, token);
	return true;
}

/*
 * DsyncQueueGrantNext
 *		lease was freed in this transaction: grant it to its first queued
 *		waiter, if the whole line has one first.  Costs an atomic read
 *		when nobody is queued on the lease's channel.
 */
bool
DsyncQueueGrantNext(FunctionCallInfo fcinfo, text *lease)
{
	uint64		key = DsyncWaitKey(lease);
	DsyncQueuedWaiter first;
	bool		any = false;

	/*
	 * An exclusive grant of a plain lease leaves nothing for the next one;
	 * a shared holder or a semaphore's permit may leave room for more.
	 */
	while (DsyncQueuedAny(key) && DsyncQueuedFirst(key, &first) &&
		   QueueGrantTo(fcinfo, &first))
	{
		any = true;
		if (first.mode != DSYNC_QUEUED_SHARED && DsyncSemaphorePermits(fcinfo, lease) <= 1)
			break;
	}
	return any;
}

/*
 * QueueCheckEphemeral
 *		Refuse, before queuing, what an ephemeral grant could not be: as
 *		dsync_acquire(..., durable => false) refuses it, and a shared
 *		holder (which is durable only).
 */
static void
QueueCheckEphemeral(FunctionCallInfo fcinfo, text *lease, text *holder, Interval *ttl,
					int64 ttl_usec, int mode)
{
	LeaseGrant	grant;

	if (mode == DSYNC_QUEUED_SHARED)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("a shared holder cannot be ephemeral"),
				 errhint("Queue with durable => true, or without shared => true.")));
	memset(&grant, 0, sizeof(grant));
	grant.holder = holder;
	grant.ttl = ttl;
	grant.ttl_usec = ttl_usec;
	grant.info_null = true;
	DsyncEphemeralCheckGrant(fcinfo, lease, &grant);
}

/*
 * dsync_queue
 *		SQL: dsync_queue(lease, holder, ttl, channel, shared, durable)
 *		RETURNS bigint
 *
 * Get in line for lease without staying connected: the fencing token if
 * it is granted now, else NULL (queued, or still queued: the place is
 * renewed for another ttl).  The grant comes later, made by whoever frees
 * the lease, and is announced as an "acquired" event on the lease's
 * channel and, if channel is given, as a "granted" notification with the
 * token on dsync_queue_channel(channel), one channel a client can wait on
 * for all its queued waits; dsync_claim takes it up.
 */
Datum
dsync_queue(PG_FUNCTION_ARGS)
{
	text	   *lease = DsyncArgName(fcinfo, 0, "lease");
	text	   *holder = DsyncArgName(fcinfo, 1, "holder");
	Interval   *ttl;
	int64		ttl_usec = DsyncArgTtl(fcinfo, 2, "ttl", false, &ttl);
	const char *channel = "";
	int			mode = DSYNC_QUEUED_EXCLUSIVE;
	bool		durable = true;
	uint64		key;
	DsyncQueuedWaiter me;
	DsyncQueuedWaiter first;
	DsyncQueuedState state;
	int64		token;
	bool		stands;

	(void) DsyncExpiry(GetCurrentTimestamp(), ttl_usec, "ttl");
	if (PG_NARGS() > 3 && !PG_ARGISNULL(3))
		channel = DsyncQueueChannel(text_to_cstring(DsyncArgName(fcinfo, 3, "channel")));
	if (PG_NARGS() > 4)
	{
		DsyncArgNotNull(fcinfo, 4, "shared");
		if (PG_GETARG_BOOL(4))
		{
			DsyncCatalogRequire(DsyncCatalogGet(fcinfo), DSYNC_TABLE_PERMIT);
			mode = DSYNC_QUEUED_SHARED;
		}
	}
	if (PG_NARGS() > 5)
	{
		DsyncArgNotNull(fcinfo, 5, "durable");
		durable = PG_GETARG_BOOL(5);
	}
	if (!durable)
		QueueCheckEphemeral(fcinfo, lease, holder, ttl, ttl_usec, mode);
	DsyncPreventWrite("dsync_queue()");
	key = DsyncWaitKey(lease);
	state = DsyncQueuedJoin(lease, holder, key, mode, durable, ttl_usec, channel, &me);
	/*
	 * Queued already (its place renewed), or granted and not taken up:
	 * dsync_claim says which, and how long a grant has left.
	 */
	if (state != DSYNC_QUEUED_GONE)
		PG_RETURN_NULL();

	/*
	 * Queued first, then one try if first in line, with the entry reserved
	 * (so that nobody else grants it meanwhile): a release that looked at
	 * the line before we joined it finds our try blocked on its row, and
	 * its commit's wake-up pokes the worker, which grants.
	 */
	if (DsyncQueuedFirst(key, &first) && first.ticket == me.ticket && DsyncQueuedReserve(&me))
	{
		if (QueueTryOnce(fcinfo, lease, key, holder, ttl_usec, mode, durable, true, &token,
						 &stands))
		{
			DsyncQueuedDropOwn(&me);
			PG_RETURN_INT64(token);
		}
		DsyncQueuedUnreserve(&me);
	}

	/*
	 * Behind others: a holder that has the lease already (its client lost
	 * the answer that granted it, and queues again) gets it back at once,
	 * as dsync_acquire would give it, instead of waiting behind others for
	 * what it holds.
	 */
	else if (QueueTryOnce(fcinfo, lease, key, holder, ttl_usec, mode, durable, false, &token,
						  &stands))
	{
		DsyncQueuedDrop(&me);
		PG_RETURN_INT64(token);
	}
	PG_RETURN_NULL();
}

/*
 * QueueClaimTry
 *		A renewal of a place first in line: one try of the grant, as
 *		dsync_queue's.  Whatever freed the name poked the worker, whose
 *		grant may still have failed (a fence's writer busy, the ephemeral
 *		hold-back after a restart): nothing else would try again, and the
 *		waiter would stay queued for ever.  Returns GRANTED with *token, or
 *		WAITING, or GONE if the try failed with an error (the waiter was
 *		dropped).  A durable grant (or an ephemeral one that raised a bound
 *		fence) is the caller's transaction's: its place goes if that
 *		commits, and is kept if it rolls back.
 */
static DsyncQueuedState
QueueClaimTry(FunctionCallInfo fcinfo, const DsyncQueuedWaiter *me, int64 *token)
{
	DsyncQueuedWaiter first;
	bool		stands;
	bool		dropped;

	if (RecoveryInProgress() || XactReadOnly)
		return DSYNC_QUEUED_WAITING;
	if (!DsyncQueuedFirst(me->key, &first) || first.ticket != me->ticket ||
		!DsyncQueuedReserve(me))
		return DSYNC_QUEUED_WAITING;
	if (!QueueTryReserved(fcinfo, me, token, &stands, &dropped))
		return dropped ? DSYNC_QUEUED_GONE : DSYNC_QUEUED_WAITING;
	if (stands)
		DsyncQueuedDropOwn(me);
	else
	{
		DsyncQueuedSetToken(me, *token, GetCurrentTimestamp() + me->ttl_usec,
							GetCurrentTimestamp());
		DsyncQueuedTakeOwn(me);
	}
	return DSYNC_QUEUED_GRANTED;
}

/*
 * dsync_claim
 *		SQL: dsync_claim(lease, holder, OUT state text, OUT fencing bigint,
 *		OUT expires_in interval)
 *
 * Where a queued waiter stands: 'queued' (its place renewed for another
 * ttl), 'granted' with the token (claimed now: the lease is the caller's
 * to renew and release) and how long it has left at most (from the server's
 * clock now: a client that adds it to when it sent the call is never late),
 * or 'gone' (never queued, left, not renewed in
 * time, not claimed in time, or lost in a restart: queue again).
 */
Datum
dsync_claim(PG_FUNCTION_ARGS)
{
	text	   *lease = DsyncArgName(fcinfo, 0, "lease");
	text	   *holder = DsyncArgName(fcinfo, 1, "holder");
	TupleDesc	tupdesc;
	Datum		values[3];
	bool		nulls[3] = {false, true, true};
	DsyncQueuedWaiter me;
	DsyncQueuedState state;

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("dsync_claim() must be called where a record is expected")));
	tupdesc = BlessTupleDesc(tupdesc);
	state = DsyncQueuedClaim(lease, holder, DsyncWaitKey(lease), &me);
	if (state == DSYNC_QUEUED_WAITING)
	{
		TimestampTz before = GetCurrentTimestamp();

		state = QueueClaimTry(fcinfo, &me, &me.token);
		if (state == DSYNC_QUEUED_GRANTED)
			me.expires_by = before + me.ttl_usec;
	}
	switch (state)
	{
		case DSYNC_QUEUED_WAITING:
		case DSYNC_QUEUED_GRANTING:
			values[0] = CStringGetTextDatum("queued");
			break;
		case DSYNC_QUEUED_GRANTED:
			values[0] = CStringGetTextDatum("granted");
			values[1] = Int64GetDatum(me.token);
			nulls[1] = false;
			{
				Interval   *left = palloc0(sizeof(Interval));

				left->time = Max(me.expires_by - GetCurrentTimestamp(), 0);
				values[2] = IntervalPGetDatum(left);
				nulls[2] = false;
			}
			break;
		default:
			values[0] = CStringGetTextDatum("gone");
			break;
	}
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}

/*
 * dsync_unqueue
 *		SQL: dsync_unqueue(lease, holder) RETURNS boolean
 *
 * Leave the line: true if (lease, holder) was queued.  A grant made to it
 * and not claimed yet is released (and passed on) in this transaction.
 */
Datum
dsync_unqueue(PG_FUNCTION_ARGS)
{
	text	   *lease = DsyncArgName(fcinfo, 0, "lease");
	text	   *holder = DsyncArgName(fcinfo, 1, "holder");
	DsyncQueuedWaiter me;
	DsyncQueuedState state;

	/* Before the entry goes: a grant left would then stay until its ttl. */
	DsyncPreventWrite("dsync_unqueue()");
	state = DsyncQueuedLeave(lease, holder, DsyncWaitKey(lease), &me);
	if (state == DSYNC_QUEUED_GRANTED)
	{
		if ((me.durable ?
			 DsyncLeaseReleaseGrant(DsyncCatalogGet(fcinfo), lease, holder, me.token, true) :
			 DsyncEphemeralPassOn(lease, holder, me.token, 0)) == DSYNC_RELEASE_DONE)
			(void) DsyncQueueGrantNext(fcinfo, lease);
	}
	PG_RETURN_BOOL(state != DSYNC_QUEUED_GONE);
}

/*
 * dsync_queue_pass
 *		SQL: dsync_queue_pass() RETURNS integer (administrators; the worker
 *		runs it when poked or when a claim window ends)
 *
 * Pass on the grants not claimed in time, grant to the first queued
 * waiters of names that may have been freed with nobody to grant them,
 * and now and then drop the waiters nobody renews.  Returns how many
 * grants it made.
 */
Datum
dsync_queue_pass(PG_FUNCTION_ARGS)
{
	static TimestampTz last_sweep = 0;
	TimestampTz now = GetCurrentTimestamp();
	const DsyncCatalog *catalog = DsyncCatalogGet(fcinfo);
	List	   *due;
	List	   *heads;
	ListCell   *lc;
	int			granted = 0;

	DsyncPreventWrite("dsync_queue_pass()");
	due = DsyncQueuedTakeDue(now);
	foreach(lc, due)
	{
		DsyncQueuedWaiter *w = lfirst(lc);
		text	   *lease = cstring_to_text(w->name);
		DsyncReleaseResult passed;

		if (w->durable)
			passed = DsyncLeasePassOn(catalog, lease, cstring_to_text(w->holder), w->token,
									  w->granted_upto);
		else
		{
			/* Let go of at once, not at commit: so goes the entry. */
			passed = DsyncEphemeralPassOn(lease, cstring_to_text(w->holder), w->token,
										  w->granted_upto);
			DsyncQueuedDropOwn(w);
		}
		if (passed == DSYNC_RELEASE_DONE && DsyncQueueGrantNext(fcinfo, lease))
			granted++;
	}
	heads = DsyncQueuedTakePoked();
	foreach(lc, heads)
	{
		DsyncQueuedWaiter *w = lfirst(lc);
		DsyncQueuedWaiter first;

		if (DsyncQueuedFirst(w->key, &first) && QueueGrantTo(fcinfo, &first))
			granted++;
	}
	if (TimestampDifferenceExceeds(last_sweep, now, QUEUE_SWEEP_MS))
	{
		(void) DsyncQueuedSweep(now);
		last_sweep = now;
	}
	PG_RETURN_INT32(granted);
}
