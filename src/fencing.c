/*-------------------------------------------------------------------------
 *
 * fencing.c
 *		Fencing tokens that never repeat, even across crashes.
 *
 * Tokens come from the sequence dsync_fencing_seq.  A sequence WAL-logs a
 * value some way ahead of what it hands out, and on crash recovery resumes
 * from the logged value, so it never goes backwards provided that WAL
 * reached disk.  With synchronous_commit = off nothing forces it there: a
 * crash could lose it together with an acknowledged grant whose token a
 * client is already using.  So whenever taking a token wrote sequence WAL,
 * that WAL is flushed before the token is handed out.  This costs one
 * flush per batch of values the sequence logs ahead (32), not one per
 * token.  Failover to a synchronous standby is covered by the commit,
 * which waits for the standby to have the same WAL.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"
#include "commands/sequence.h"

#include "dsync.h"

/*
 * DsyncNextFencingToken
 *		A new token, greater than every token handed out before in this
 *		database.  Callers take it only once they hold the row lock that
 *		serialises grants of the lease, so tokens of one lease also rise in
 *		grant order.
 */
int64
DsyncNextFencingToken(const DsyncCatalog *catalog)
{
	XLogRecPtr	before = XactLastRecEnd;
	int64		token;

	/* The caller has no rights on the sequence; the function is the gate. */
	token = nextval_internal(catalog->fencing_seq, false);
	if (XactLastRecEnd != before)
		XLogFlush(XactLastRecEnd);
	return token;
}
