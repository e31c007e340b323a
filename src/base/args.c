/*-------------------------------------------------------------------------
 *
 * args.c
 *		Argument checks shared by dsync's SQL-callable functions.
 *
 * The SQL functions are not STRICT, so that a NULL name is an error that
 * names the argument instead of a silent NULL result.  Every rejection is
 * in SQLSTATE class 22 and nothing is truncated or adjusted.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"
#include "common/int.h"
#include "datatype/timestamp.h"
#include "miscadmin.h"
#include "utils/builtins.h"

#include "compat.h"
#include "args.h"
#include "settings.h"

/*
 * ArgNameCheck
 *		A name must be non-empty and at most DSYNC_NAME_MAX_BYTES bytes.
 *		element: the name is one element of the array argument argname,
 *		which the messages then say.  Inline: every call checks one or two
 *		names this way.
 */
static inline void
ArgNameCheck(text *name, const char *argname, bool element)
{
	int			len = VARSIZE_ANY_EXHDR(name);

	if (len == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 element ?
				 errmsg("argument \"%s\" must not contain empty names", argname) :
				 errmsg("argument \"%s\" must not be empty", argname)));
	if (len > DSYNC_NAME_MAX_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_STRING_DATA_RIGHT_TRUNCATION),
				 element ?
				 errmsg("argument \"%s\" has a name that is too long", argname) :
				 errmsg("argument \"%s\" is too long", argname),
				 element ?
				 errdetail("A name is %d bytes long; names are at most %d bytes.",
						   len, DSYNC_NAME_MAX_BYTES) :
				 errdetail("The value is %d bytes long; names are at most %d bytes.",
						   len, DSYNC_NAME_MAX_BYTES)));
}

/*
 * DsyncArgNameCheck
 *		ArgNameCheck, for names that are not arguments of their own (the
 *		elements of an array).
 */
void
DsyncArgNameCheck(text *name, const char *argname, bool element)
{
	ArgNameCheck(name, argname, element);
}

/*
 * DsyncArgNameOrNull
 *		A name argument that may be NULL (returned as NULL); when given it
 *		must pass ArgNameCheck.
 */
text *
DsyncArgNameOrNull(FunctionCallInfo fcinfo, int argno, const char *argname)
{
	text	   *name;

	if (PG_ARGISNULL(argno))
		return NULL;
	name = PG_GETARG_TEXT_PP(argno);
	ArgNameCheck(name, argname, false);
	return name;
}

/*
 * DsyncArgName
 *		A name argument that must be given.
 */
text *
DsyncArgName(FunctionCallInfo fcinfo, int argno, const char *argname)
{
	DsyncArgNotNull(fcinfo, argno, argname);
	return DsyncArgNameOrNull(fcinfo, argno, argname);
}

/*
 * DsyncIntervalUsec
 *		An interval as microseconds, or false if that overflows.
 *
 * Leases run on the server clock, so a day is 24 hours and a month 30
 * days here, whatever the session's time zone does with daylight saving.
 */
bool
DsyncIntervalUsec(const Interval *iv, int64 *result)
{
	int64		days_usec;
	int64		months_usec;
	int64		sum;

	if (pg_mul_s64_overflow((int64) iv->day, USECS_PER_DAY, &days_usec) ||
		pg_mul_s64_overflow((int64) iv->month, (int64) DAYS_PER_MONTH * USECS_PER_DAY,
							&months_usec) ||
		pg_add_s64_overflow(iv->time, days_usec, &sum) ||
		pg_add_s64_overflow(sum, months_usec, &sum))
		return false;
	*result = sum;
	return true;
}

/*
 * DsyncArgTtl
 *		A time-to-live argument, in microseconds; it must be positive.
 *
 * When null_ok and the argument is NULL, returns 0 and sets *ttl_out to
 * NULL so the caller can fall back to a stored value.
 */
int64
DsyncArgTtl(FunctionCallInfo fcinfo, int argno, const char *argname,
			bool null_ok, Interval **ttl_out)
{
	Interval   *ttl;
	int64		usec;

	if (PG_ARGISNULL(argno))
	{
		if (!null_ok)
			DsyncArgNotNull(fcinfo, argno, argname);
		if (ttl_out)
			*ttl_out = NULL;
		return 0;
	}

	ttl = PG_GETARG_INTERVAL_P(argno);
	if (!DsyncIntervalUsec(ttl, &usec))
		ereport(ERROR,
				(errcode(ERRCODE_INTERVAL_FIELD_OVERFLOW),
				 errmsg("argument \"%s\" is out of range", argname)));
	if (usec <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"%s\" must be positive", argname),
				 errhint("Pass a time-to-live such as '30 seconds'.")));
	if (dsync_max_ttl > 0 && usec > (int64) dsync_max_ttl * USECS_PER_SEC)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"%s\" exceeds dsync.max_ttl", argname),
				 errdetail("The longest time-to-live allowed is %d seconds.", dsync_max_ttl),
				 errhint("Ask an administrator to raise dsync.max_ttl, or renew a shorter lease.")));
	if (ttl_out)
		*ttl_out = ttl;
	return usec;
}

/*
 * DsyncCapTtl
 *		A stored time-to-live, as a renewal without one uses it: no longer
 *		than dsync.max_ttl allows now (it may have been lowered since).
 */
int64
DsyncCapTtl(int64 ttl_usec)
{
	if (dsync_max_ttl > 0 && ttl_usec > (int64) dsync_max_ttl * USECS_PER_SEC)
		return (int64) dsync_max_ttl * USECS_PER_SEC;
	return ttl_usec;
}

/*
 * DsyncArgWait
 *		A wait argument: NULL means wait forever, otherwise it must not be
 *		negative.
 */
void
DsyncArgWait(FunctionCallInfo fcinfo, int argno, const char *argname,
			 bool *forever, int64 *wait_usec)
{
	Interval   *wait;

	*forever = false;
	*wait_usec = 0;
	if (PG_ARGISNULL(argno))
	{
		*forever = true;
		return;
	}

	wait = PG_GETARG_INTERVAL_P(argno);
	if (!DsyncIntervalUsec(wait, wait_usec))
		ereport(ERROR,
				(errcode(ERRCODE_INTERVAL_FIELD_OVERFLOW),
				 errmsg("argument \"%s\" is out of range", argname),
				 errhint("Pass NULL to wait without a limit.")));
	if (*wait_usec < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"%s\" must not be negative", argname)));
}

/*
 * DsyncExpiry
 *		now + ttl, or an error naming the ttl argument if that leaves the
 *		range of timestamptz.
 */
TimestampTz
DsyncExpiry(TimestampTz now, int64 ttl_usec, const char *argname)
{
	TimestampTz result;

	if (pg_add_s64_overflow(now, ttl_usec, &result) ||
		!IS_VALID_TIMESTAMP(result))
		ereport(ERROR,
				(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
				 errmsg("argument \"%s\" is out of range", argname),
				 errdetail("The expiry it gives lies beyond the range of timestamp with time zone.")));
	return result;
}

/*
 * DsyncPreventWrite
 *		Refuse a state-changing call where PostgreSQL would refuse a write.
 *
 * The functions write the lease table directly, below the executor, so
 * the checks the executor would make (hot standby, read-only transaction,
 * parallel mode) are made here; all of them raise SQLSTATE 25006 or 25000.
 */
void
DsyncPreventWrite(const char *funcname)
{
	PreventCommandDuringRecovery(funcname);
	PreventCommandIfReadOnly(funcname);
	PreventCommandIfParallelMode(funcname);
}
