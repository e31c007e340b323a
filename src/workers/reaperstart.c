/*-------------------------------------------------------------------------
 *
 * reaperstart.c
 *		How the per-database worker starts: it takes the slot the launcher
 *		started it for, connects with settings of its own, and, after its
 *		first pass, fills the shared maps that let grants skip tables.
 *
 * The loop it then runs is reaper.c's.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "commands/extension.h"
#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "utils/guc.h"
#include "utils/snapmgr.h"

#include "compat.h"
#include "dbslot.h"
#include "heldmap.h"
#include "boundmap.h"
#include "reaper.h"

/*
 * ReaperClaimSlot
 *		Take the slot the launcher started us for; false if it is not
 *		ours to take (another reaper has it, or a statement holds the
 *		database).
 */
bool
ReaperClaimSlot(DsyncDbSlot *slot, Oid dbid)
{
	bool		ok;

	LWLockAcquire(dsync_workers->lock, LW_EXCLUSIVE);
	ok = slot->dbid == dbid && slot->state != DSYNC_DB_FREE &&
		(slot->pid == 0 || slot->pid == -1) && slot->held_by == 0;
	if (ok)
	{
		slot->pid = MyProcPid;
		slot->pgprocno = DsyncProcNumber(MyProc);
		slot->serving_since = GetCurrentTimestamp();
		slot->settled = false;
		slot->wanted_since = 0;
		pg_atomic_write_u32(&slot->recheck, 0);
		pg_atomic_write_u32(&slot->yield, 0);
		pg_atomic_write_u32(&slot->wanted, 0);
		DsyncDbSlotSenderBegin(slot, MyProcPid);
	}
	else if (slot->pid == -1)
		slot->pid = 0;
	LWLockRelease(dsync_workers->lock);
	return ok;
}

/*
 * ReaperConnect
 *		Connect to the database, with the worker's own settings.
 *
 * Cleanup is redone after a crash, so its commits need not wait for WAL
 * flushes.  A database's settings (ALTER DATABASE ... SET) are for its
 * sessions: a default role would make the worker read and write dsync's
 * tables as that role, which may not, and a read-only default or a
 * timeout would stop its cleanup.
 */
void
ReaperConnect(Oid dbid)
{
	BackgroundWorkerInitializeConnectionByOid(dbid, InvalidOid, 0);
	SetConfigOption("synchronous_commit", "off", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("application_name", "dsync reaper", PGC_USERSET, PGC_S_OVERRIDE);
	SetConfigOption("role", "none", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("default_transaction_read_only", "off", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("statement_timeout", "0", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("lock_timeout", "0", PGC_SUSET, PGC_S_OVERRIDE);
}

/*
 * ReaperFillMaps
 *		Read dsync_lease into the held map (heldmap.c) and dsync_fence into
 *		the bound map (boundmap.c), once this shared memory has a worker
 *		for the database: until then every ephemeral grant looks at
 *		dsync_lease, and every grant at dsync_fence.  After the first pass,
 *		so that a big table delays no expiry; in a transaction of its own.
 */
void
ReaperFillMaps(DsyncDbSlot *slot)
{
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	if (OidIsValid(get_extension_oid("dsync", true)))
	{
		DsyncHeldMapFill(slot);
		DsyncBoundMapFill(slot);
	}
	PopActiveSnapshot();
	CommitTransactionCommand();
}
