/*-------------------------------------------------------------------------
 *
 * ephgrant.c
 *		Granting and renewing an ephemeral lease.
 *
 * A grant holds its partition lock exclusively while it checks that no
 * durable holder has the name (the held map, else dsync_lease and
 * dsync_permit with a dirty snapshot) and that the name is no semaphore,
 * then enters the name.  The table itself is ephemeral.c's; see its header
 * for the rules the two kinds of lease keep between them.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/xact.h"
#include "common/hashfn.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/condition_variable.h"
#include "storage/ipc.h"
#include "storage/lmgr.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"

#include "args.h"
#include "catalog.h"
#include "compat.h"
#include "dbslot.h"
#include "events.h"
#include "fencing.h"
#include "heldmap.h"
#include "lazycommit.h"
#include "settings.h"
#include "stats.h"
#include "store.h"
#include "wait.h"
#include "ephemeral.h"
#include "ephemeral_int.h"

/*
 * EphemeralTtlTooLong
 *		Refuse a ttl beyond dsync.ephemeral_max_ttl: after a restart, grants
 *		wait only that long for holders from before to expire.
 */
static void
EphemeralTtlTooLong(void)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("argument \"ttl\" is longer than dsync.ephemeral_max_ttl (%d s) allows for an ephemeral lease",
					dsync_ephemeral_max_ttl),
			 errhint("Use a shorter ttl and renew it, or a durable lease.")));
}

/*
 * EphemeralSemaphoreRefused
 *		Refuse a semaphore's name: its permits are durable rows.
 */
static void
EphemeralSemaphoreRefused(text *lease)
{
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("semaphore \"%s\" cannot be acquired as an ephemeral lease",
					text_to_cstring(lease)),
			 errhint("Acquire its permits with durable => true.")));
}

/*
 * DsyncEphemeralCheckGrant
 *		Refuse, before any waiting, what an ephemeral grant cannot be: a
 *		ttl beyond dsync.ephemeral_max_ttl, info too big to keep, or a
 *		semaphore's name.
 */
void
DsyncEphemeralCheckGrant(FunctionCallInfo fcinfo, text *lease, const LeaseGrant *grant)
{
	EphemeralRequire();
	if (grant->ttl_usec > (int64) dsync_ephemeral_max_ttl * USECS_PER_SEC)
		EphemeralTtlTooLong();
	if (!grant->info_null)
	{
		Jsonb	   *info = DatumGetJsonbP(grant->info);

		if (VARSIZE(info) > EPHEMERAL_INFO_MAX)
			ereport(ERROR,
					(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
					 errmsg("argument \"info\" is too large for an ephemeral lease"),
					 errdetail("An ephemeral lease keeps at most %d bytes of info; this is %d.",
							   EPHEMERAL_INFO_MAX, (int) VARSIZE(info))));
	}
	if (DsyncSemaphorePermitsFor(fcinfo, lease, false) >= 0)
		EphemeralSemaphoreRefused(lease);
}

/*
 * The tables an ephemeral grant looks at when the held map does not clear
 * it, and the semaphore definitions, which it always asks about.
 */
typedef struct EphemeralStores
{
	DsyncStore	lease;
	DsyncStore	permit;
	bool		has_permits;	/* dsync_permit exists (1.2) */
	DsyncSemaphoreWatch semaphores;
} EphemeralStores;

static bool EphemeralPlainTaken(DsyncStore *store, text *lease, TimestampTz now,
								TimestampTz *retry_at);

/*
 * EphemeralDurableTaken
 *		Whether dsync_lease has the name held, or being changed or guarded
 *		by a transaction still running, or dsync_permit has a holder of it
 *		(shared, or a permit left over from a dropped semaphore) held or
 *		being granted; *retry_at is set to a live holder's
 *		expiry.  The row is found at its cached location; without one, a
 *		single dirty-snapshot probe of the index answers (a name with no
 *		row, the common case for names used only ephemerally, costs one
 *		probe, not a committed-state one and then a dirty one).
 */
static bool
EphemeralDurableTaken(EphemeralStores *stores, text *lease, TimestampTz now,
					  TimestampTz *retry_at)
{
	stores->lease.writer_xid = InvalidTransactionId;
	stores->permit.writer_xid = InvalidTransactionId;
	/* Shared holders (shared.c) and a dropped semaphore's permits. */
	if (stores->has_permits &&
		DsyncStoreKeysTaken(&stores->permit, lease, Int32GetDatum(0), true, now, retry_at))
		return true;
	return EphemeralPlainTaken(&stores->lease, lease, now, retry_at);
}

/*
 * EphemeralPlainTaken
 *		EphemeralDurableTaken for the name's plain row in dsync_lease.
 */
static bool
EphemeralPlainTaken(DsyncStore *store, text *lease, TimestampTz now, TimestampTz *retry_at)
{
	DsyncRow   *row = DsyncScanKeyCached(store, lease, 0);

	/* No cached location: a name with no row, or one not looked up lately. */
	if (row == NULL)
		return DsyncStoreKeyTaken(store, lease, Int32GetDatum(0), now, retry_at);

	if (DsyncRowIsLive(row, now))
	{
		*retry_at = DsyncRowExpiry(row);
		return true;
	}

	/*
	 * Our own transaction released or cleared it: a rollback (of the
	 * transaction or a savepoint) would bring the durable holder back,
	 * while the ephemeral grant would stay.
	 */
	if (TransactionIdIsCurrentTransactionId(row->xmin))
		return true;

	/*
	 * A free version that nobody had touched when it was read stays free:
	 * a durable grant writes only while it holds off ephemeral grants of
	 * the name, which we do now.  One with an xmax may have been granted
	 * by a transaction that committed since our snapshot (so the xmax no
	 * longer runs): look again, seeing uncommitted versions too.  Free
	 * means announced free, too: an expired holder not yet cleared, or a
	 * release still queueing its event, keeps the name a moment longer.
	 */
	if (row->unlocked)
	{
		if (!DsyncStoreFreeInOrder(store, row, lease))
			return true;
		DsyncStoreNoteFree(store, row);
		return false;
	}
	return DsyncStoreKeyTaken(store, lease, Int32GetDatum(0), now, retry_at);
}

/*
 * EphemeralGrantInfo
 *		A grant's info, NULL if none.
 */
static inline const Jsonb *
EphemeralGrantInfo(const LeaseGrant *grant)
{
	return grant->info_null ? NULL : DatumGetJsonbP(grant->info);
}

/*
 * EphemeralPoolFull
 *		Refuse a grant whose strings the pool has no room for.
 */
static void
EphemeralPoolFull(void)
{
	ereport(ERROR,
			(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
			 errmsg("no room left for the names, holders and info of ephemeral leases"),
			 errdetail("The pool of %u chunks of %d bytes (2.5 per lease of dsync.ephemeral_max_leases, %d) has too few free.",
					   ephemeral_shared->pool_size, EPHEMERAL_CHUNK_DATA,
					   dsync_ephemeral_max_leases),
			 errhint("Raise dsync.ephemeral_max_leases and restart the server, keep names, holders and info shorter, or use durable leases.")));
}

/*
 * EphemeralSweepToRetry
 *		A grant found no room: let go of its partition lock and, once per
 *		grant, sweep out leases nobody reaps (a dropped database's), which
 *		may hold the room it needs.  True if that freed some: try again.
 */
static bool
EphemeralSweepToRetry(LWLock *lock, bool *swept)
{
	LWLockRelease(lock);
	if (*swept || EphemeralSweep(InvalidOid, false) == 0)
		return false;
	*swept = true;
	return true;
}

/*
 * EphemeralFillGrant
 *		Make an entry the holder's, with a new token (its strings are
 *		EphemeralPutStrings's).
 */
static void
EphemeralFillGrant(EphemeralEntry *entry, int64 token, TimestampTz now, const LeaseGrant *grant)
{
	entry->fencing = token;
	entry->acquired_at = now;
	entry->renewed_at = now;
	entry->expires_at = DsyncExpiry(now, grant->ttl_usec, "ttl");
	entry->ttl = *grant->ttl;
	entry->owner = GetUserId();
	entry->session_pid = 0;
	entry->generation = pg_atomic_add_fetch_u64(&ephemeral_shared->generations, 1);
	entry->guards = 0;
}

/*
 * EphemeralStoreOpen
 *		Open dsync_lease, dsync_permit (shared holders) and their indexes
 *		for a grant's look: before the partition lock, since relation locks
 *		are never taken under it.
 */
static void
EphemeralStoreOpen(EphemeralStores *stores, const DsyncCatalog *catalog)
{
	DsyncDbSlot *slot = DsyncDbSlotFind(MyDatabaseId);

	/*
	 * Our "acquired" must come after the events that freed the name, if
	 * events are queued here at all (no slot, or a database dsync does not
	 * serve, queues none, and no worker would clear an expired holder).
	 */
	bool		in_order = slot != NULL && slot->state == DSYNC_DB_ACTIVE;

	DsyncStoreOpenCatalog(&stores->lease, catalog, DSYNC_TABLE_LEASE, false);
	(void) DsyncStoreIndex(&stores->lease);
	stores->lease.note_commits = true;
	stores->lease.in_event_order = in_order;
	stores->has_permits = OidIsValid(catalog->rels[DSYNC_TABLE_PERMIT]);
	if (stores->has_permits)
	{
		DsyncStoreOpenCatalog(&stores->permit, catalog, DSYNC_TABLE_PERMIT, false);
		(void) DsyncStoreIndex(&stores->permit);
		stores->permit.note_commits = true;
		stores->permit.in_event_order = in_order;
	}
}

/*
 * EphemeralStoreWriter
 *		A committed transaction whose events are still being queued, that
 *		the last look found (EphemeralDurableTaken): wait for it, then look
 *		again.  InvalidTransactionId if none.
 */
static TransactionId
EphemeralStoreWriter(const EphemeralStores *stores, bool opened)
{
	if (!opened)
		return InvalidTransactionId;
	if (TransactionIdIsValid(stores->lease.writer_xid))
		return stores->lease.writer_xid;
	return stores->has_permits ? stores->permit.writer_xid : InvalidTransactionId;
}

/*
 * EphemeralStoreFreeCommit
 *		The latest asynchronous commit among the free versions the grant
 *		relied on (a durable holder's release), InvalidXLogRecPtr if none.
 */
static XLogRecPtr
EphemeralStoreFreeCommit(const EphemeralStores *stores, bool opened)
{
	if (!opened)
		return InvalidXLogRecPtr;
	if (stores->has_permits)
		return Max(stores->lease.free_commit_lsn, stores->permit.free_commit_lsn);
	return stores->lease.free_commit_lsn;
}

/*
 * EphemeralStoreClose
 *		Close what EphemeralStoreOpen opened, if a grant opened it, and the
 *		look at semaphore definitions.
 */
static void
EphemeralStoreClose(EphemeralStores *stores, bool opened)
{
	DsyncSemaphoreWatchClose(&stores->semaphores);
	if (!opened)
		return;
	if (stores->has_permits)
		DsyncStoreClose(&stores->permit);
	DsyncStoreClose(&stores->lease);
}

/*
 * DsyncEphemeralTryAcquire
 *		One try of an ephemeral grant: the holder's extension if it has the
 *		lease, else a grant if the name is free in both kinds and may_take.
 *		As LeaseTryAcquire, *retry_at is when to look again by itself.
 *		*fresh is the new grant's generation (0 for an extension).
 */
bool
DsyncEphemeralTryAcquire(FunctionCallInfo fcinfo, text *lease, const LeaseGrant *grant,
						 bool may_take, int64 *token, uint64 *fresh, TimestampTz *retry_at)
{
	const DsyncCatalog *catalog = DsyncCatalogGet(fcinfo);
	EphemeralStores store;
	EphemeralKey key;
	uint32		hash;
	LWLock	   *lock;
	bool		swept = false;
	bool		opened = false;
	XLogRecPtr	carried = InvalidXLogRecPtr;	/* made durable so far */
	DsyncDbSlot *slot;

	*retry_at = 0;
	*fresh = 0;
	EphemeralRequire();
	store.semaphores.opened = false;
	hash = EphemeralKeyFor(lease, &key);
	lock = EphemeralLock(hash);
	/* Looked up before the partition lock, which the worker lock never nests in. */
	slot = DsyncDbSlotFind(MyDatabaseId);

	DsyncEventPrepareNow();

	for (;;)
	{
		TimestampTz now = GetCurrentTimestamp();
		TimestampTz open_at = (TimestampTz) pg_atomic_read_u64(&ephemeral_shared->open_at);
		EphemeralEntry *entry;
		DsyncEvent	events[2];
		int			nevents = 0;
		int64		renewals = 0;
		bool		found;
		bool		clear;
		bool		changed = false;
		XLogRecPtr	carry;

		CHECK_FOR_INTERRUPTS();
		if (open_at == 0 || now < open_at)
		{
			/* Holders from before the restart may still be live. */
			*retry_at = open_at;
			EphemeralStoreClose(&store, opened);
			return false;
		}

		/* dsync_lease is opened only if the held map may send us there. */
		if (!opened && may_take && !DsyncHeldMapClear(slot, hash, now))
		{
			EphemeralStoreOpen(&store, catalog);
			opened = true;
		}

		if (may_take && !store.semaphores.opened)
			DsyncSemaphoreWatchOpen(catalog, &store.semaphores);

		LWLockAcquire(lock, LW_EXCLUSIVE);
		/* The clock read once the lock is ours: a durable grant may just have ended. */
		now = GetCurrentTimestamp();
		if (DsyncEphemeralRecordDue(catalog, now))
		{
			/* The durable record must cover this grant before it is made. */
			LWLockRelease(lock);
			DsyncEphemeralRecord(catalog);
			continue;
		}
		entry = EphemeralFind(&key, hash);
		if (entry != NULL && EphemeralIsHeld(entry, now))
		{
			if (entry->expires_at > now && EphemeralHolderIs(entry, grant->holder))
			{
				/* Reentrant: extend, keep the token. */
				TimestampTz previous = entry->expires_at;
				TimestampTz expiry = DsyncExpiry(now, grant->ttl_usec, "ttl");

				if (!grant->info_null &&
					!EphemeralPutStrings(entry, key.name, key.len, grant->holder,
										 EphemeralGrantInfo(grant)))
				{
					/* Nothing changed: the old info and expiry stay. */
					LWLockRelease(lock);
					EphemeralStoreClose(&store, opened);
					EphemeralPoolFull();
				}
				entry->renewed_at = now;
				entry->expires_at = expiry;
				entry->ttl = *grant->ttl;
				EphemeralHeapMoved(entry);
				*token = entry->fencing;
				if (entry->expires_at < previous)
					events[nevents++] = EphemeralEvent(DSYNC_EVENT_DEADLINE, entry);
				DsyncEventPublishNow(events, nevents, 1);
				LWLockRelease(lock);
				EphemeralStoreClose(&store, opened);
				return true;
			}
			*retry_at = entry->expires_at > now ? entry->expires_at : 0;
			LWLockRelease(lock);
			EphemeralStoreClose(&store, opened);
			return false;
		}
		/*
		 * A semaphore defined since the call began (while it waited): a
		 * permit granted before we took the lock did not count us, one
		 * granted after will (permit.c).
		 */
		if (may_take && DsyncSemaphoreWatchDefined(&store.semaphores, lease, &changed))
		{
			LWLockRelease(lock);
			EphemeralStoreClose(&store, opened);
			EphemeralSemaphoreRefused(lease);
		}
		if (changed)
		{
			LWLockRelease(lock);
			DsyncSemaphoreWatchClose(&store.semaphores);
			continue;
		}
		clear = may_take && DsyncHeldMapClear(slot, hash, now);
		if (may_take && !clear && !opened)
		{
			/* A durable change of the name began since: open the table. */
			LWLockRelease(lock);
			EphemeralStoreOpen(&store, catalog);
			opened = true;
			continue;
		}
		if (!may_take || (!clear && EphemeralDurableTaken(&store, lease, now, retry_at)))
		{
			TransactionId writer = may_take ? EphemeralStoreWriter(&store, opened) :
				InvalidTransactionId;

			LWLockRelease(lock);
			if (TransactionIdIsValid(writer))
			{
				/* Committed, its events being queued: a moment, not a wait. */
				XactLockTableWait(writer, NULL, NULL, XLTW_None);
				continue;
			}
			EphemeralStoreClose(&store, opened);
			return false;
		}
		/*
		 * A durable holder's release, committed without a flush, made room:
		 * make it durable before anyone can see this grant, then look again.
		 */
		carry = EphemeralStoreFreeCommit(&store, opened);
		if (carry > carried)
		{
			LWLockRelease(lock);
			DsyncLazyCommitCarry(carry);
			carried = carry;
			continue;
		}
		if (!DsyncFencingTryNext(catalog, token))
		{
			/* A new block of tokens is fetched without the lock; try again. */
			LWLockRelease(lock);
			DsyncFencingFill(catalog);
			continue;
		}
		if (entry != NULL)
		{
			/* Announced before the grant overwrites the holder it names. */
			DsyncEvent	expired = EphemeralEvent(DSYNC_EVENT_EXPIRED, entry);

			DsyncEventPublishNow(&expired, 1, 0);
			if (!EphemeralPutStrings(entry, key.name, key.len, grant->holder,
									 EphemeralGrantInfo(grant)))
			{
				/* The expired lease is gone: the reaper would remove it next. */
				EphemeralRemove(entry);
				if (EphemeralSweepToRetry(lock, &swept))
					continue;
				EphemeralStoreClose(&store, opened);
				EphemeralPoolFull();
			}
		}
		else
		{
			/* Count it first: the counter is what enforces the limit. */
			if (pg_atomic_fetch_add_u32(&ephemeral_shared->entries, 1) >=
				(uint32) dsync_ephemeral_max_leases)
				entry = NULL;
			else
				entry = hash_search_with_hash_value(ephemeral_hash, &key, hash,
													HASH_ENTER_NULL, &found);
			if (entry == NULL)
			{
				pg_atomic_fetch_sub_u32(&ephemeral_shared->entries, 1);
				if (EphemeralSweepToRetry(lock, &swept))
					continue;
				EphemeralStoreClose(&store, opened);
				ereport(ERROR,
						(errcode(ERRCODE_OUT_OF_MEMORY),
						 errmsg("too many ephemeral leases"),
						 errdetail("All %d ephemeral leases the server may hold are held.",
								   dsync_ephemeral_max_leases),
						 errhint("Raise dsync.ephemeral_max_leases and restart the server, or use durable leases.")));
			}
			entry->heap = NULL;
			if (!EphemeralPutStrings(entry, key.name, key.len, grant->holder,
									 EphemeralGrantInfo(grant)))
			{
				/* Entered with no chain: the key looked up finds it. */
				(void) hash_search_with_hash_value(ephemeral_hash, &key, hash, HASH_REMOVE, NULL);
				pg_atomic_fetch_sub_u32(&ephemeral_shared->entries, 1);
				if (EphemeralSweepToRetry(lock, &swept))
					continue;
				EphemeralStoreClose(&store, opened);
				EphemeralPoolFull();
			}
		}
		EphemeralFillGrant(entry, *token, now, grant);
		*fresh = entry->generation;
		EphemeralHeapPut(entry, slot);
		events[nevents++] = EphemeralEvent(DSYNC_EVENT_ACQUIRED, entry);
		DsyncEventPublishNow(events, nevents, renewals);
		LWLockRelease(lock);
		EphemeralStoreClose(&store, opened);
		return true;
	}
}

/*
 * EphemeralLookHeld
 *		Find a name's entry under its partition lock (held on return, in
 *		mode, when the result is not NONE): NONE if the name has no held
 *		ephemeral lease, NOT_HELD if holder does not hold it, else DONE
 *		with look->entry set.
 */
DsyncEphemeralFound
EphemeralLookHeld(text *lease, text *holder, LWLockMode mode, EphemeralLook *look)
{
	TimestampTz now;

	look->entry = NULL;
	if (ephemeral_shared == NULL || pg_atomic_read_u32(&ephemeral_shared->entries) == 0)
		return DSYNC_EPHEMERAL_NONE;
	/* What may claim a database slot (catalogs, locks) comes before the LWLock. */
	if (mode == LW_EXCLUSIVE)
		DsyncEventPrepareNow();
	look->hash = EphemeralKeyFor(lease, &look->key);
	LWLockAcquire(EphemeralLock(look->hash), mode);
	look->entry = EphemeralFind(&look->key, look->hash);
	now = GetCurrentTimestamp();
	if (look->entry == NULL || !EphemeralIsHeld(look->entry, now))
	{
		LWLockRelease(EphemeralLock(look->hash));
		return DSYNC_EPHEMERAL_NONE;
	}
	if (holder == NULL)
		return DSYNC_EPHEMERAL_DONE;
	if (look->entry->expires_at <= now || !EphemeralHolderIs(look->entry, holder))
		return DSYNC_EPHEMERAL_NOT_HELD;
	return DSYNC_EPHEMERAL_DONE;
}

/*
 * DsyncEphemeralRenew
 *		dsync_renew of an ephemeral lease: NONE if the name has none.
 */
DsyncEphemeralFound
DsyncEphemeralRenew(const DsyncCatalog *catalog, text *lease, text *holder, Interval *ttl,
					int64 ttl_usec, TimestampTz *expiry)
{
	EphemeralLook look;
	DsyncEphemeralFound found;
	TimestampTz now;
	TimestampTz previous;
	int64		usec = ttl_usec;
	DsyncEvent	event;

	found = EphemeralLookHeld(lease, holder, LW_EXCLUSIVE, &look);
	if (found == DSYNC_EPHEMERAL_NONE)
		return found;
	if (found == DSYNC_EPHEMERAL_NOT_HELD)
	{
		LWLockRelease(EphemeralLock(look.hash));
		return found;
	}
	if (ttl == NULL)
	{
		(void) DsyncIntervalUsec(&look.entry->ttl, &usec);
		usec = DsyncCapTtl(usec);
	}
	else if (ttl_usec > (int64) dsync_ephemeral_max_ttl * USECS_PER_SEC)
	{
		LWLockRelease(EphemeralLock(look.hash));
		EphemeralTtlTooLong();
	}
	now = GetCurrentTimestamp();
	if (DsyncEphemeralRecordDue(catalog, now))
	{
		/* The durable record must cover the new expiry first. */
		LWLockRelease(EphemeralLock(look.hash));
		DsyncEphemeralRecord(catalog);
		return DsyncEphemeralRenew(catalog, lease, holder, ttl, ttl_usec, expiry);
	}
	previous = look.entry->expires_at;
	look.entry->renewed_at = now;
	look.entry->expires_at = DsyncExpiry(now, usec, "ttl");
	EphemeralHeapMoved(look.entry);
	*expiry = look.entry->expires_at;
	event = EphemeralEvent(DSYNC_EVENT_DEADLINE, look.entry);
	DsyncEventPublishNow(&event, look.entry->expires_at < previous ? 1 : 0, 1);
	LWLockRelease(EphemeralLock(look.hash));
	return DSYNC_EPHEMERAL_DONE;
}
