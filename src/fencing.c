/*-------------------------------------------------------------------------
 *
 * fencing.c
 *		Fencing tokens that never repeat, across crashes and failover.
 *
 * Tokens come from the sequence dsync_fencing_seq.  A sequence WAL-logs a
 * value some way ahead (32 values) of what it hands out and, after a crash,
 * resumes from the logged value, so it never goes backwards provided that
 * WAL survived.  Nothing guarantees that by itself:
 *
 *	- With synchronous_commit = off, a crash can lose the WAL of a batch
 *	  together with acknowledged grants whose tokens clients already use.
 *	  So before a token is handed out, WAL is flushed up to the sequence
 *	  page's LSN.  That must be the page's LSN, not only what this backend
 *	  wrote: another backend may have logged the batch and not flushed it
 *	  yet.  When the batch is already on disk, which is the common case,
 *	  the flush is a comparison.
 *
 *	- With a synchronous standby, a commit waits for the standby only if
 *	  the session's synchronous_commit asks for it, and any role can turn
 *	  that off for itself.  So when a synchronous standby is configured and
 *	  the session would not wait at commit, dsync waits for the standby to
 *	  confirm the batch, once per batch.  If that wait is cancelled the
 *	  token is not handed out.
 *
 * Tokens are taken only after the row lock that serialises grants of a
 * lease is held, so the tokens of one lease also rise in grant order.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/relation.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "commands/sequence.h"
#include "replication/syncrep.h"
#include "replication/walsender.h"
#include "replication/walsender_private.h"
#include "storage/bufmgr.h"
#include "storage/lwlock.h"
#include "utils/guc.h"
#include "utils/rel.h"

#include "dsync.h"

/*
 * FencingSequenceLsn
 *		The LSN of the last WAL record that changed the sequence's page.
 *
 * nextval_internal has just locked and used the sequence, so its relation
 * lock is held and the relation can be opened without another lock.
 */
static XLogRecPtr
FencingSequenceLsn(Oid seqoid)
{
	Relation	seqrel = relation_open(seqoid, NoLock);
	Buffer		buffer = ReadBuffer(seqrel, 0);
	XLogRecPtr	lsn = BufferGetLSNAtomic(buffer);

	ReleaseBuffer(buffer);
	relation_close(seqrel, NoLock);
	return lsn;
}

/*
 * FencingStandbyHas
 *		Whether the synchronous standbys have confirmed flushing lsn, or no
 *		synchronous standby is configured at all.
 */
static bool
FencingStandbyHas(XLogRecPtr lsn)
{
	bool		confirmed;

	LWLockAcquire(SyncRepLock, LW_SHARED);
	confirmed = (WalSndCtl->sync_standbys_status & SYNC_STANDBY_DEFINED) == 0 ||
		WalSndCtl->lsn[SYNC_REP_WAIT_FLUSH] >= lsn;
	LWLockRelease(SyncRepLock);
	return confirmed;
}

/*
 * FencingWaitForStandby
 *		Wait until the synchronous standbys have flushed lsn, whatever this
 *		session's synchronous_commit says.
 *
 * SyncRepWaitForLSN takes its mode from synchronous_commit, so the setting
 * is raised for the duration of the wait (and restored as a function's SET
 * clause would be).  A cancelled wait returns with a warning; then the
 * token must not be used, so that is an error.
 */
static void
FencingWaitForStandby(XLogRecPtr lsn)
{
	int			save_nestlevel;

	if (max_wal_senders == 0 || FencingStandbyHas(lsn))
		return;

	save_nestlevel = NewGUCNestLevel();
	(void) set_config_option("synchronous_commit", "on", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	SyncRepWaitForLSN(lsn, false);
	AtEOXact_GUC(true, save_nestlevel);

	if (!FencingStandbyHas(lsn))
		ereport(ERROR,
				(errcode(ERRCODE_QUERY_CANCELED),
				 errmsg("canceled waiting for the synchronous standby to confirm a fencing token"),
				 errdetail("A token the standby has not confirmed could be handed out again after failover.")));
}

/*
 * DsyncNextFencingToken
 *		A new token, greater than every token handed out before in this
 *		database, and durable (locally and on synchronous standbys) before
 *		the caller can see it.
 */
int64
DsyncNextFencingToken(const DsyncCatalog *catalog)
{
	int64		token;
	XLogRecPtr	lsn;

	/* The caller has no rights on the sequence; the SQL function is the gate. */
	token = nextval_internal(catalog->fencing_seq, false);

	lsn = FencingSequenceLsn(catalog->fencing_seq);
	XLogFlush(lsn);
	if (synchronous_commit <= SYNCHRONOUS_COMMIT_LOCAL_FLUSH)
		FencingWaitForStandby(lsn);
	return token;
}
