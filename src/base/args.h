/*-------------------------------------------------------------------------
 *
 * args.h
 *		Argument checks shared by every SQL-callable function (args.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef DSYNC_ARGS_H
#define DSYNC_ARGS_H

#include "postgres.h"
#include "fmgr.h"
#include "utils/timestamp.h"
#include "dsync_limits.h"

extern void DsyncArgNameCheck(text *name, const char *argname, bool element);
extern text *DsyncArgName(FunctionCallInfo fcinfo, int argno, const char *argname);
extern text *DsyncArgNameOrNull(FunctionCallInfo fcinfo, int argno,
								const char *argname);
extern bool DsyncIntervalUsec(const Interval *iv, int64 *result);
extern int64 DsyncArgTtl(FunctionCallInfo fcinfo, int argno, const char *argname,
						 bool null_ok, Interval **ttl_out);
extern int64 DsyncCapTtl(int64 ttl_usec);
extern void DsyncArgWait(FunctionCallInfo fcinfo, int argno, const char *argname,
						 bool *forever, int64 *wait_usec);
extern TimestampTz DsyncExpiry(TimestampTz now, int64 ttl_usec, const char *argname);
extern void DsyncPreventWrite(const char *funcname);

/*
 * DsyncArgNotNull
 *		Refuse a NULL argument, naming it; so that every function words
 *		the error the same way.
 */
static inline void
DsyncArgNotNull(FunctionCallInfo fcinfo, int argno, const char *argname)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("argument \"%s\" must not be null", argname)));
}

#endif							/* DSYNC_ARGS_H */
