/*-------------------------------------------------------------------------
 *
 * ephscan.c
 *		Passes over the whole table of ephemeral leases (ephemeral.c): the
 *		reaper's, the view's, and the sweeps of leases nobody can hold any
 *		more.
 *
 * The view and the sweeps take every partition lock, in order
 * (EphemeralScanBegin), so they see the table as of one instant; the
 * reaper's pass takes one at a time and looks only at what is due
 * (ephheap.c).  None of them is on a path that grants, renews or releases
 * one lease.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "port/pg_bitutils.h"
#include "utils/builtins.h"

#include "dbslot.h"
#include "events.h"
#include "queued.h"
#include "settings.h"
#include "wait.h"
#include "ephemeral.h"
#include "ephemeral_int.h"

/*
 * EphemeralSweep
 *		Remove entries of a database (InvalidOid: any) that nobody can hold
 *		any more: expired and unguarded for longer than
 *		dsync.ephemeral_max_ttl (whose reaper, had the database one, would
 *		have announced them by then: a dropped or unserved database), or
 *		all of dbid's if forget.  Takes every partition lock; returns how
 *		many it removed.  Cannot fail, so that a commit callback may call it.
 */
int
EphemeralSweep(Oid dbid, bool forget)
{
	HASH_SEQ_STATUS status;
	EphemeralEntry *entry;
	TimestampTz stale = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
													-(int64) dsync_ephemeral_max_ttl * 1000);
	int			removed = 0;

	(void) EphemeralScanBegin(LW_EXCLUSIVE, &status, false);
	while ((entry = hash_seq_search(&status)) != NULL)
	{
		if (OidIsValid(dbid) && entry->key.dbid != dbid)
			continue;
		if (!forget && (entry->guards > 0 || entry->expires_at > stale))
			continue;
		EphemeralRemove(entry);
		removed++;
	}
	EphemeralUnlockAll();
	return removed;
}

/*
 * DsyncEphemeralForgetDatabase
 *		DROP EXTENSION dsync committed: this database's ephemeral leases go
 *		with it.
 */
void
DsyncEphemeralForgetDatabase(Oid dbid)
{
	if (ephemeral_shared != NULL && pg_atomic_read_u32(&ephemeral_shared->entries) > 0)
		(void) EphemeralSweep(dbid, true);
}

/*
 * DsyncEphemeralDue
 *		When an ephemeral lease of this database may next be due (0:
 *		none), for the reaper.
 */
TimestampTz
DsyncEphemeralDue(void)
{
	DsyncDbSlot *slot = DsyncDbSlotFind(MyDatabaseId);

	return slot == NULL ? 0 : (TimestampTz) pg_atomic_read_u64(&slot->ephemeral_deadline);
}

/*
 * DsyncEphemeralLookSoon
 *		Make the reaper look at this database's ephemeral leases now: it
 *		has just started and knows nothing of them.
 */
void
DsyncEphemeralLookSoon(void)
{
	DsyncDbSlot *slot = DsyncDbSlotFind(MyDatabaseId);

	if (slot != NULL)
		(void) DsyncTimeLower(&slot->ephemeral_deadline, GetCurrentTimestamp(), NULL);
}

/*
 * DsyncEphemeralReap
 *		The reaper's pass over this database's ephemeral leases: remove and
 *		announce the expired ones nobody guards, wake their waiters, and
 *		note in the slot when the next is due.
 *
 * It takes one partition lock at a time and looks only at what its heap
 * of expiries (ephheap.c) says is due, so a pass costs the expired leases,
 * not the table, and an ephemeral grant waits for it only in the one
 * partition it is at.  Grants lower the slot's value under their partition
 * lock; the pass first clears it (0: none), so that a grant in a partition
 * it has looked at already lowers it afresh, and then lowers it to the
 * earliest expiry it saw: nothing due is lost.
 */
void
DsyncEphemeralReap(void)
{
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz next = 0;
	int			removed = 0;
	DsyncDbSlot *slot = DsyncDbSlotFind(MyDatabaseId);
	uint64		freed[DSYNC_WAKE_CHANNELS / 64] = {0};

	if (slot == NULL || ephemeral_shared == NULL)
		return;
	DsyncEventPrepareNow();
	pg_atomic_write_u64(&slot->ephemeral_deadline, 0);
	for (int i = 0; i < EPHEMERAL_PARTITIONS; i++)
	{
		LWLockAcquire(&ephemeral_shared->locks[i].lock, LW_EXCLUSIVE);
		removed += EphemeralHeapReap(slot, i, now, &next, freed);
		LWLockRelease(&ephemeral_shared->locks[i].lock);
	}
	if (next != 0)
		(void) DsyncTimeLower(&slot->ephemeral_deadline, next, NULL);
	if (removed > 0)
		DsyncWakeDatabaseNow();
	/* A queued waiter of an expired lease is granted by the worker's pass. */
	for (int word = 0; word < DSYNC_WAKE_CHANNELS / 64; word++)
		for (uint64 w = freed[word]; w != 0; w &= w - 1)
			DsyncQueuedPoke(word * 64 + pg_rightmost_one_pos64(w));
}

/*
 * DsyncEphemeralRows
 *		Copies of this database's live ephemeral leases (of lease, and of
 *		holder, where given), for dsync_leases.
 */
List *
DsyncEphemeralRows(text *lease, text *holder)
{
	List	   *rows = NIL;
	HASH_SEQ_STATUS status;
	EphemeralEntry *entry;
	TimestampTz now = GetCurrentTimestamp();
	EphemeralKey key;

	if (!EphemeralScanBegin(LW_SHARED, &status, true))
		return NIL;
	if (lease != NULL)
		(void) EphemeralKeyFor(lease, &key);
	while ((entry = hash_seq_search(&status)) != NULL)
	{
		DsyncEphemeralRow *row;

		if (entry->key.dbid != MyDatabaseId || entry->expires_at <= now)
			continue;
		if (lease != NULL && EphemeralKeyMatch(&entry->key, &key, sizeof(key)) != 0)
			continue;
		if (holder != NULL && !EphemeralHolderNameIs(entry, holder))
			continue;
		row = palloc0(sizeof(DsyncEphemeralRow));
		row->lease = EphemeralNameText(entry);
		row->holder = EphemeralHolderText(entry);
		row->fencing = entry->fencing;
		row->acquired_at = entry->acquired_at;
		row->renewed_at = entry->renewed_at;
		row->expires_at = entry->expires_at;
		row->ttl = entry->ttl;
		row->owner = entry->owner;
		if (entry->info_len > 0)
		{
			row->info = palloc(entry->info_len);
			EphemeralChainRead(entry->key.chunk, entry->key.len + entry->holder_len,
							   (char *) row->info, entry->info_len);
		}
		rows = lappend(rows, row);
	}
	EphemeralUnlockAll();
	return rows;
}
