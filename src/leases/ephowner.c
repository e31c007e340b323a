/*-------------------------------------------------------------------------
 *
 * ephowner.c
 *		Who an ephemeral lease belongs to besides its holder: the backend
 *		whose exit releases a session lease, and the role that owns it
 *		(DROP ROLE, DROP OWNED BY, REASSIGN OWNED BY).
 *
 * A durable session lease acquired again by another backend with session
 * => true moves to that backend: its dsync_session record takes the new
 * pid, and the first backend's exit leaves it alone (session.c).  An
 * ephemeral one has no record; its entry keeps the pid of the backend
 * whose exit releases it, set by the last session => true grant.
 *
 * An ephemeral lease is owned by a role as a durable one is, but lives in
 * shared memory, where role.c's scans of the tables do not look.  DROP
 * ROLE is refused while the role holds a live ephemeral lease in any
 * database (shared memory shows them all); DROP OWNED BY releases, and
 * REASSIGN OWNED BY gives away, those of the database the command runs
 * in, at once (an ephemeral release is not undone by a rollback).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "utils/builtins.h"

#include "events.h"
#include "wait.h"
#include "ephemeral.h"
#include "ephemeral_int.h"

/*
 * DsyncEphemeralSessionMove
 *		holder's ephemeral grant with token was just acquired with session
 *		=> true by this backend: its exit, not an earlier backend's, is
 *		what releases it now.
 */
void
DsyncEphemeralSessionMove(text *lease, text *holder, int64 token)
{
	EphemeralKey key;
	uint32		hash;
	EphemeralEntry *entry;

	if (ephemeral_shared == NULL)
		return;
	hash = EphemeralKeyFor(lease, &key);
	LWLockAcquire(EphemeralLock(hash), LW_EXCLUSIVE);
	entry = EphemeralFind(&key, hash);
	if (entry != NULL && entry->fencing == token && EphemeralHolderNameIs(entry, holder))
		entry->session_pid = MyProcPid;
	LWLockRelease(EphemeralLock(hash));
}

/*
 * DsyncEphemeralRoleCount
 *		How many live ephemeral leases roleid owns in this database
 *		(*here) and in the others (*elsewhere), for DROP ROLE.  An expired
 *		one is nobody's any more, guarded or not.
 */
void
DsyncEphemeralRoleCount(Oid roleid, int64 *here, int64 *elsewhere)
{
	HASH_SEQ_STATUS status;
	EphemeralEntry *entry;
	TimestampTz now = GetCurrentTimestamp();

	*here = *elsewhere = 0;
	if (!EphemeralScanBegin(LW_SHARED, &status, true))
		return;
	while ((entry = hash_seq_search(&status)) != NULL)
	{
		if (entry->owner != roleid || entry->expires_at <= now)
			continue;
		if (entry->key.dbid == MyDatabaseId)
			(*here)++;
		else
			(*elsewhere)++;
	}
	EphemeralUnlockAll();
}

/*
 * DsyncEphemeralRoleReassign
 *		REASSIGN OWNED BY: give roleid's ephemeral leases in this database
 *		to newrole.
 */
void
DsyncEphemeralRoleReassign(Oid roleid, Oid newrole)
{
	HASH_SEQ_STATUS status;
	EphemeralEntry *entry;

	if (!EphemeralScanBegin(LW_EXCLUSIVE, &status, true))
		return;
	while ((entry = hash_seq_search(&status)) != NULL)
		if (entry->key.dbid == MyDatabaseId && entry->owner == roleid)
			entry->owner = newrole;
	EphemeralUnlockAll();
}

/*
 * DsyncEphemeralRoleDrop
 *		DROP OWNED BY: release roleid's live ephemeral leases in this
 *		database, as their holder's dsync_release would (an event, waiters
 *		woken; a guard of another transaction waited for).
 */
void
DsyncEphemeralRoleDrop(Oid roleid)
{
	HASH_SEQ_STATUS status;
	EphemeralEntry *entry;
	List	   *names = NIL;
	ListCell   *lc;
	TimestampTz now = GetCurrentTimestamp();

	/* The names first: the release of each waits, with no lock held. */
	if (!EphemeralScanBegin(LW_SHARED, &status, true))
		return;
	while ((entry = hash_seq_search(&status)) != NULL)
		if (entry->key.dbid == MyDatabaseId && entry->owner == roleid &&
			entry->expires_at > now)
			names = lappend(names, EphemeralNameText(entry));
	EphemeralUnlockAll();

	foreach(lc, names)
	{
		text	   *lease = lfirst(lc);
		EphemeralKey key;
		uint32		hash = EphemeralKeyFor(lease, &key);
		bool		released = false;

		DsyncEventPrepareNow();
		LWLockAcquire(EphemeralLock(hash), LW_EXCLUSIVE);
		entry = EphemeralFind(&key, hash);
		EphemeralWaitGuards(&key, hash, &entry);
		/* It may have changed hands or expired meanwhile. */
		if (entry != NULL && entry->owner == roleid &&
			entry->expires_at > GetCurrentTimestamp())
		{
			EphemeralLetGo(entry, hash);
			released = true;
		}
		LWLockRelease(EphemeralLock(hash));
		if (released)
			DsyncWakeNow(DsyncWaitKey(lease));
	}
}
