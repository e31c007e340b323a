/*-------------------------------------------------------------------------
 *
 * syncstandby.c
 *		Whether the synchronous standbys have confirmed a WAL position.
 *
 * SyncRepWaitForLSN returns when the synchronous standbys have confirmed
 * the position, but also, with only a WARNING, when the wait is cancelled
 * (pg_cancel_backend, statement_timeout): a commit cannot be taken back by
 * then, so PostgreSQL lets it stand.  dsync has waits that come before
 * what they protect (a block of fencing tokens, storage/fencing.c; an
 * ephemeral grant that relies on a release, lazycommit.c): there a wait
 * that ended without the confirmation must refuse what it was for, and
 * these functions tell whether it did.
 *
 * The answer is read as SyncRepWaitForLSN reads it, under SyncRepLock:
 * from the standbys' confirmed positions in WalSndCtl once the
 * checkpointer has processed synchronous_standby_names, and from the
 * setting until then.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "replication/syncrep.h"
#include "replication/walsender.h"
#include "replication/walsender_private.h"
#include "storage/lwlock.h"

#include "syncstandby.h"

/*
 * DsyncStandbyConfirmed
 *		Whether the synchronous standbys have confirmed lsn in mode
 *		(SYNC_REP_WAIT_WRITE, _FLUSH or _APPLY), or no synchronous standby
 *		is configured at all.
 */
bool
DsyncStandbyConfirmed(XLogRecPtr lsn, int mode)
{
	bool		defined;
	bool		confirmed;

	Assert(mode >= 0 && mode < NUM_SYNC_REP_WAIT_MODE);
	LWLockAcquire(SyncRepLock, LW_SHARED);
	if (WalSndCtl->sync_standbys_status & SYNC_STANDBY_INIT)
		defined = (WalSndCtl->sync_standbys_status & SYNC_STANDBY_DEFINED) != 0;
	else
	{
		/* Until the checkpointer has looked, go by the setting, as core does. */
		defined = SyncRepStandbyNames != NULL && SyncRepStandbyNames[0] != '\0';
	}
	confirmed = !defined || WalSndCtl->lsn[mode] >= lsn;
	LWLockRelease(SyncRepLock);
	return confirmed;
}

/*
 * DsyncStandbyCommitMode
 *		What a commit of this session waits for the synchronous standbys
 *		to confirm (SyncRepWaitForLSN(lsn, true)), from synchronous_commit:
 *		SYNC_REP_NO_WAIT for off and local, which wait for no standby.
 *		syncrep.c keeps the same answer in a variable of its own, which it
 *		does not export.
 */
int
DsyncStandbyCommitMode(void)
{
	if (!SyncRepRequested())
		return SYNC_REP_NO_WAIT;
	switch (synchronous_commit)
	{
		case SYNCHRONOUS_COMMIT_REMOTE_WRITE:
			return SYNC_REP_WAIT_WRITE;
		case SYNCHRONOUS_COMMIT_REMOTE_FLUSH:
			return SYNC_REP_WAIT_FLUSH;
		case SYNCHRONOUS_COMMIT_REMOTE_APPLY:
			return SYNC_REP_WAIT_APPLY;
		default:
			return SYNC_REP_NO_WAIT;
	}
}
