/*-------------------------------------------------------------------------
 *
 * ephemeral.c
 *		Ephemeral leases (dsync_acquire(..., durable => false)): held in a
 *		shared hash table, not in dsync_lease.
 *
 * An ephemeral grant, renewal or release takes effect at once, whatever
 * the caller's transaction does next, and writes no WAL: it costs a hash
 * probe under one of EPHEMERAL_PARTITIONS LWLocks, plus, unless the held
 * map (heldmap.c) says no durable lease can hold the name, a look at
 * dsync_lease to make sure the name is not held there.  Everything else is
 * as for a durable lease: the token comes from the same durable sequence
 * (so tokens keep rising across restarts), waiters queue and wake the same
 * way (woken at once rather than at commit), events go through the same
 * queue, the reaper announces expiries, and dsync_leases shows them.
 *
 * Nothing of this survives a restart, a crash or a failover.  A holder
 * from before may still believe it holds its lease, for up to its ttl, so
 * no ephemeral grant is made until dsync.ephemeral_max_ttl (the longest
 * ttl an ephemeral lease can have) has passed since the launcher first
 * started after shared memory was set up: on a primary that is just after
 * startup or crash recovery, on a standby just after promotion.
 *
 * One name is held in one kind at a time.  An ephemeral grant holds its
 * partition lock exclusively while it looks at the held map and, unless
 * that clears the name, at dsync_lease (seeing uncommitted changes too,
 * with a dirty snapshot), and enters the name; a durable grant holds the
 * same partition lock in share mode from its look at the hash table until
 * its row version is written (DsyncEphemeralExclude).  Whichever comes
 * second sees the first.  The durable grant also draws its token inside
 * that window, so a name's tokens rise across the two kinds as well.
 *
 * A guard (dsync_assert_held) counts itself in the entry until its
 * transaction ends; while it is counted, nobody else takes the lease and
 * the reaper leaves it, even once it has expired, and a release or forced
 * release by another transaction waits for it, as a row lock would make
 * it wait: on a heavyweight lock the guard holds (ephguard.c), so that
 * the deadlock detector sees the wait.
 *
 * An ephemeral grant is never made next to a semaphore's permits: it asks,
 * under its partition lock, whether the name has a definition (a permit
 * grant counts an ephemeral holder it finds, under the same lock, as one
 * of the permits: permit.c), and it counts every live row of dsync_permit
 * (shared holders, permits left over from a dropped semaphore) as a
 * durable holder.  Who an entry belongs to besides its holder (session
 * backend, owner role) is ephowner.c's.
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
#include "settings.h"
#include "stats.h"
#include "store.h"
#include "wait.h"
#include "ephemeral.h"
#include "ephemeral_int.h"

/* A guard of this backend's transaction, dropped when it ends. */
typedef struct EphemeralGuardNote
{
	EphemeralKey key;
	uint32		hash;
	uint64		generation;		/* of the grant guarded */
	uint64		wait_key;		/* DsyncWaitKey of the name */
} EphemeralGuardNote;

EphemeralShared *ephemeral_shared = NULL;
HTAB	   *ephemeral_hash = NULL;
static List *my_guards = NIL;	/* in TopMemoryContext */
static bool guard_callback_registered = false;
static LWLock *excluding = NULL;	/* held by DsyncEphemeralExclude */

/*
 * EphemeralTableSize
 *		Entries to allocate.  A partitioned table spreads its entries over
 *		32 free lists, at least one each, and lends between them: it cannot
 *		be kept smaller than that, so dsync.ephemeral_max_leases is enforced
 *		with the entries counter, not by the table running out.
 */
static long
EphemeralTableSize(void)
{
	return Max(dsync_ephemeral_max_leases, 64);
}

/*
 * DsyncEphemeralShmemSize
 *		Shared memory for the table and its header.
 */
Size
DsyncEphemeralShmemSize(void)
{
	if (dsync_ephemeral_max_leases == 0)
		return 0;
	return add_size(add_size(MAXALIGN(sizeof(EphemeralShared)), DsyncHeldMapShmemSize()),
					hash_estimate_size(EphemeralTableSize(), sizeof(EphemeralEntry)));
}

/*
 * DsyncEphemeralShmemRequest
 *		Ask for the memory and the partition locks (from the shmem request hook).
 */
void
DsyncEphemeralShmemRequest(void)
{
	if (dsync_ephemeral_max_leases == 0)
		return;
	RequestAddinShmemSpace(DsyncEphemeralShmemSize());
	RequestNamedLWLockTranche("dsync ephemeral", EPHEMERAL_PARTITIONS);
}

/*
 * EphemeralKeyHash
 *		dynahash's hash of a key: of the name's bytes and the database,
 *		not of the whole zero-padded buffer (keys still compare whole).
 */
static uint32
EphemeralKeyHash(const void *key, Size keysize)
{
	const EphemeralKey *k = key;

	return DsyncNameHashOf(k->name, strlen(k->name), k->dbid);
}

/*
 * DsyncEphemeralShmemInit
 *		Create or attach to the table (from the shmem startup hook, with
 *		AddinShmemInitLock held).
 */
void
DsyncEphemeralShmemInit(void)
{
	HASHCTL		ctl;
	bool		found;

	if (dsync_ephemeral_max_leases == 0)
		return;
	ephemeral_shared = ShmemInitStruct("dsync ephemeral", sizeof(EphemeralShared), &found);
	if (!found)
	{
		ephemeral_shared->locks = GetNamedLWLockTranche("dsync ephemeral");
		pg_atomic_init_u32(&ephemeral_shared->entries, 0);
		pg_atomic_init_u64(&ephemeral_shared->open_at, 0);
		pg_atomic_init_u64(&ephemeral_shared->generations, 0);
		ConditionVariableInit(&ephemeral_shared->guards_done);
	}
	DsyncHeldMapShmemInit();
	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = sizeof(EphemeralKey);
	ctl.entrysize = sizeof(EphemeralEntry);
	ctl.hash = EphemeralKeyHash;
	ctl.num_partitions = EPHEMERAL_PARTITIONS;
	ephemeral_hash = ShmemInitHash("dsync ephemeral leases",
								   EphemeralTableSize(), EphemeralTableSize(),
								   &ctl, HASH_ELEM | HASH_FUNCTION | HASH_PARTITION | HASH_FIXED_SIZE);
}

/*
 * DsyncEphemeralOpen
 *		The launcher has started: ephemeral grants may begin once every
 *		holder from before this shared memory was set up has expired.
 *		Only the first launcher of this shared memory sets it, so that a
 *		launcher that restarts does not close them again.
 */
void
DsyncEphemeralOpen(void)
{
	uint64		expected = 0;
	TimestampTz open_at;

	if (ephemeral_shared == NULL)
		return;
	open_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
										  (int64) dsync_ephemeral_max_ttl * 1000);
	(void) pg_atomic_compare_exchange_u64(&ephemeral_shared->open_at, &expected,
										  (uint64) open_at);
}

/*
 * EphemeralRequire
 *		Error out unless ephemeral leases are enabled.
 */
static void
EphemeralRequire(void)
{
	if (ephemeral_shared == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("ephemeral leases are disabled"),
				 errhint("Set dsync.ephemeral_max_leases above 0 and restart the server.")));
}

/*
 * EphemeralKeyFor
 *		The key of a name in this database, and its hash.
 */
uint32
EphemeralKeyFor(text *lease, EphemeralKey *key)
{
	int			len = VARSIZE_ANY_EXHDR(lease);

	memset(key, 0, sizeof(*key));
	key->dbid = MyDatabaseId;
	memcpy(key->name, VARDATA_ANY(lease), Min(len, DSYNC_NAME_MAX_BYTES));
	return get_hash_value(ephemeral_hash, key);
}

/*
 * EphemeralFind
 *		The entry of a key, or NULL; the partition lock must be held.
 */
EphemeralEntry *
EphemeralFind(const EphemeralKey *key, uint32 hash)
{
	return hash_search_with_hash_value(ephemeral_hash, key, hash, HASH_FIND, NULL);
}

/*
 * EphemeralScanBegin
 *		Take every partition lock, in order, and start a pass over the
 *		table.  With if_any, a table with no entries (or none at all) is
 *		not worth the locks: returns false having taken nothing.
 */
bool
EphemeralScanBegin(LWLockMode mode, HASH_SEQ_STATUS *status, bool if_any)
{
	if (if_any && (ephemeral_shared == NULL ||
				   pg_atomic_read_u32(&ephemeral_shared->entries) == 0))
		return false;
	for (int i = 0; i < EPHEMERAL_PARTITIONS; i++)
		LWLockAcquire(&ephemeral_shared->locks[i].lock, mode);
	hash_seq_init(status, ephemeral_hash);
	return true;
}

/*
 * EphemeralUnlockAll
 *		Let go of what EphemeralScanBegin took.
 */
void
EphemeralUnlockAll(void)
{
	for (int i = EPHEMERAL_PARTITIONS - 1; i >= 0; i--)
		LWLockRelease(&ephemeral_shared->locks[i].lock);
}

/*
 * EphemeralIsHeld
 *		Whether an entry still keeps others out: live, or guarded.
 */
static bool
EphemeralIsHeld(const EphemeralEntry *entry, TimestampTz now)
{
	return entry->expires_at > now || entry->guards > 0;
}

/*
 * EphemeralHolderNameIs
 *		Whether the entry's holder is holder.
 */
bool
EphemeralHolderNameIs(const EphemeralEntry *entry, text *holder)
{
	int			len = VARSIZE_ANY_EXHDR(holder);

	return (int) strlen(entry->holder) == len &&
		memcmp(entry->holder, VARDATA_ANY(holder), len) == 0;
}

/*
 * EphemeralHolderIs
 *		Whether the entry's holder is holder and the caller acts for its
 *		owner role.
 */
static bool
EphemeralHolderIs(const EphemeralEntry *entry, text *holder)
{
	return EphemeralHolderNameIs(entry, holder) &&
		has_privs_of_role(GetUserId(), entry->owner);
}

/*
 * EphemeralEvent
 *		An event about an entry, for DsyncEventPublishNow.  slot -1 tells
 *		the reaper there is no row to look up.
 */
DsyncEvent
EphemeralEvent(DsyncEventKind kind, const EphemeralEntry *entry)
{
	DsyncEvent	event;

	memset(&event, 0, sizeof(event));
	event.kind = kind;
	event.slot = -1;
	event.fencing = entry->fencing;
	event.expires_at = kind == DSYNC_EVENT_RELEASED ? GetCurrentTimestamp() : entry->expires_at;
	event.name = (char *) entry->key.name;
	event.holder = (char *) entry->holder;
	return event;
}

/*
 * EphemeralRemove
 *		Take an entry out of the table, under its partition lock held
 *		exclusively.
 */
static void
EphemeralRemove(EphemeralEntry *entry, uint32 hash)
{
	EphemeralKey key = entry->key;

	(void) hash_search_with_hash_value(ephemeral_hash, &key, hash, HASH_REMOVE, NULL);
	pg_atomic_fetch_sub_u32(&ephemeral_shared->entries, 1);
}

/*
 * EphemeralSetInfo
 *		Keep a grant's info (checked for size by DsyncEphemeralCheckGrant).
 */
static void
EphemeralSetInfo(EphemeralEntry *entry, const LeaseGrant *grant)
{
	Jsonb	   *info = DatumGetJsonbP(grant->info);

	entry->info_len = VARSIZE(info);
	memcpy(entry->info, info, entry->info_len);
}

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
	 * longer runs): look again, seeing uncommitted versions too.
	 */
	if (row->unlocked)
		return false;
	return DsyncStoreKeyTaken(store, lease, Int32GetDatum(0), now, retry_at);
}

/*
 * EphemeralFillGrant
 *		Make an entry the holder's, with a new token.
 */
static void
EphemeralFillGrant(EphemeralEntry *entry, const LeaseGrant *grant, int64 token,
				   TimestampTz now)
{
	int			len = VARSIZE_ANY_EXHDR(grant->holder);

	memset(entry->holder, 0, sizeof(entry->holder));
	memcpy(entry->holder, VARDATA_ANY(grant->holder), len);
	entry->fencing = token;
	entry->acquired_at = now;
	entry->renewed_at = now;
	entry->expires_at = DsyncExpiry(now, grant->ttl_usec, "ttl");
	entry->ttl = *grant->ttl;
	entry->owner = GetUserId();
	entry->session_pid = 0;
	entry->generation = pg_atomic_add_fetch_u64(&ephemeral_shared->generations, 1);
	entry->guards = 0;
	entry->info_len = 0;
	if (!grant->info_null)
		EphemeralSetInfo(entry, grant);
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
	DsyncStoreOpenCatalog(&stores->lease, catalog, DSYNC_TABLE_LEASE, false);
	(void) DsyncStoreIndex(&stores->lease);
	stores->has_permits = OidIsValid(catalog->rels[DSYNC_TABLE_PERMIT]);
	if (stores->has_permits)
	{
		DsyncStoreOpenCatalog(&stores->permit, catalog, DSYNC_TABLE_PERMIT, false);
		(void) DsyncStoreIndex(&stores->permit);
	}
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
 */
bool
DsyncEphemeralTryAcquire(FunctionCallInfo fcinfo, text *lease, const LeaseGrant *grant,
						 bool may_take, int64 *token, TimestampTz *retry_at)
{
	const DsyncCatalog *catalog = DsyncCatalogGet(fcinfo);
	EphemeralStores store;
	EphemeralKey key;
	uint32		hash;
	LWLock	   *lock;
	bool		swept = false;
	bool		opened = false;
	DsyncDbSlot *slot;

	*retry_at = 0;
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

				entry->renewed_at = now;
				entry->expires_at = DsyncExpiry(now, grant->ttl_usec, "ttl");
				entry->ttl = *grant->ttl;
				if (!grant->info_null)
					EphemeralSetInfo(entry, grant);
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
			LWLockRelease(lock);
			EphemeralStoreClose(&store, opened);
			return false;
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
				LWLockRelease(lock);
				/* Room held by leases nobody reaps (a dropped database)? */
				if (!swept && EphemeralSweep(InvalidOid, false) > 0)
				{
					swept = true;
					continue;
				}
				EphemeralStoreClose(&store, opened);
				ereport(ERROR,
						(errcode(ERRCODE_OUT_OF_MEMORY),
						 errmsg("too many ephemeral leases"),
						 errdetail("All %d ephemeral leases the server may hold are held.",
								   dsync_ephemeral_max_leases),
						 errhint("Raise dsync.ephemeral_max_leases and restart the server, or use durable leases.")));
			}
		}
		EphemeralFillGrant(entry, grant, *token, now);
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
 *		with *entry set.
 */
static DsyncEphemeralFound
EphemeralLookHeld(text *lease, text *holder, LWLockMode mode, EphemeralKey *key,
				  uint32 *hash, EphemeralEntry **entry)
{
	TimestampTz now;

	*entry = NULL;
	if (ephemeral_shared == NULL || pg_atomic_read_u32(&ephemeral_shared->entries) == 0)
		return DSYNC_EPHEMERAL_NONE;
	/* What may claim a database slot (catalogs, locks) comes before the LWLock. */
	if (mode == LW_EXCLUSIVE)
		DsyncEventPrepareNow();
	*hash = EphemeralKeyFor(lease, key);
	LWLockAcquire(EphemeralLock(*hash), mode);
	*entry = EphemeralFind(key, *hash);
	now = GetCurrentTimestamp();
	if (*entry == NULL || !EphemeralIsHeld(*entry, now))
	{
		LWLockRelease(EphemeralLock(*hash));
		return DSYNC_EPHEMERAL_NONE;
	}
	if (holder == NULL)
		return DSYNC_EPHEMERAL_DONE;
	if ((*entry)->expires_at <= now || !EphemeralHolderIs(*entry, holder))
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
	EphemeralKey key;
	uint32		hash;
	EphemeralEntry *entry;
	DsyncEphemeralFound found;
	TimestampTz now;
	TimestampTz previous;
	int64		usec = ttl_usec;
	DsyncEvent	event;

	found = EphemeralLookHeld(lease, holder, LW_EXCLUSIVE, &key, &hash, &entry);
	if (found == DSYNC_EPHEMERAL_NONE)
		return found;
	if (found == DSYNC_EPHEMERAL_NOT_HELD)
	{
		LWLockRelease(EphemeralLock(hash));
		return found;
	}
	if (ttl == NULL)
	{
		(void) DsyncIntervalUsec(&entry->ttl, &usec);
		usec = DsyncCapTtl(usec);
	}
	else if (ttl_usec > (int64) dsync_ephemeral_max_ttl * USECS_PER_SEC)
	{
		LWLockRelease(EphemeralLock(hash));
		EphemeralTtlTooLong();
	}
	now = GetCurrentTimestamp();
	if (DsyncEphemeralRecordDue(catalog, now))
	{
		/* The durable record must cover the new expiry first. */
		LWLockRelease(EphemeralLock(hash));
		DsyncEphemeralRecord(catalog);
		return DsyncEphemeralRenew(catalog, lease, holder, ttl, ttl_usec, expiry);
	}
	previous = entry->expires_at;
	entry->renewed_at = now;
	entry->expires_at = DsyncExpiry(now, usec, "ttl");
	*expiry = entry->expires_at;
	event = EphemeralEvent(DSYNC_EVENT_DEADLINE, entry);
	DsyncEventPublishNow(&event, entry->expires_at < previous ? 1 : 0, 1);
	LWLockRelease(EphemeralLock(hash));
	return DSYNC_EPHEMERAL_DONE;
}

/*
 * EphemeralMyGuards
 *		How many guards of this backend's transaction an entry counts.
 */
static int
EphemeralMyGuards(const EphemeralEntry *entry)
{
	ListCell   *lc;
	int			mine = 0;

	foreach(lc, my_guards)
	{
		EphemeralGuardNote *note = lfirst(lc);

		if (note->generation == entry->generation &&
			memcmp(&note->key, &entry->key, sizeof(EphemeralKey)) == 0)
			mine++;
	}
	return mine;
}

/*
 * EphemeralWaitGuards
 *		With the partition lock held exclusively on entry, wait until no
 *		other transaction guards the entry; the lock is held again on
 *		return, and *entry looked up again (NULL if it is gone).  The wait
 *		is on the guards' heavyweight lock (ephguard.c), which the deadlock
 *		detector sees; should guards still be counted once it is granted
 *		(they never should), a short sleep keeps this from spinning.
 */
void
EphemeralWaitGuards(const EphemeralKey *key, uint32 hash, EphemeralEntry **entry)
{
	LWLock	   *lock = EphemeralLock(hash);
	uint64		waited = 0;

	while (*entry != NULL && (*entry)->guards > EphemeralMyGuards(*entry))
	{
		uint64		generation = (*entry)->generation;

		LWLockRelease(lock);
		if (generation != waited)
			EphemeralGuardWait(generation);
		else
		{
			ConditionVariablePrepareToSleep(&ephemeral_shared->guards_done);
			ConditionVariableTimedSleep(&ephemeral_shared->guards_done, 10,
										PG_WAIT_EXTENSION);
			ConditionVariableCancelSleep();
		}
		waited = generation;
		LWLockAcquire(lock, LW_EXCLUSIVE);
		*entry = EphemeralFind(key, hash);
	}
}

/*
 * EphemeralLetGo
 *		Release an entry (partition lock held exclusively): announce it,
 *		remove it, wake its waiters.
 */
void
EphemeralLetGo(EphemeralEntry *entry, uint32 hash)
{
	DsyncEvent	event = EphemeralEvent(DSYNC_EVENT_RELEASED, entry);

	DsyncEventPublishNow(&event, 1, 0);
	EphemeralRemove(entry, hash);
}

/*
 * EphemeralReleaseIf
 *		Release holder's ephemeral lease if it holds it, and if only_token
 *		is not 0, only the grant with that token and only if it is this
 *		backend's session lease still (another backend may have taken it
 *		over, see DsyncEphemeralSessionMove).  NONE if the name has none.
 *		Waits for the guards of other transactions, as a row lock would.
 */
static DsyncEphemeralFound
EphemeralReleaseIf(text *lease, text *holder, int64 only_token, int64 *token)
{
	EphemeralKey key;
	uint32		hash;
	EphemeralEntry *entry;
	DsyncEphemeralFound found;

	found = EphemeralLookHeld(lease, holder, LW_EXCLUSIVE, &key, &hash, &entry);
	if (found == DSYNC_EPHEMERAL_NONE)
		return found;
	if (found == DSYNC_EPHEMERAL_DONE)
	{
		EphemeralWaitGuards(&key, hash, &entry);
		/* It may have expired or changed hands while we waited. */
		if (entry == NULL || entry->expires_at <= GetCurrentTimestamp() ||
			!EphemeralHolderIs(entry, holder) ||
			(only_token != 0 && (entry->fencing != only_token ||
								 entry->session_pid != MyProcPid)))
			found = DSYNC_EPHEMERAL_NOT_HELD;
		else
		{
			*token = entry->fencing;
			EphemeralLetGo(entry, hash);
		}
	}
	LWLockRelease(EphemeralLock(hash));
	if (found == DSYNC_EPHEMERAL_DONE)
		DsyncWakeNow(DsyncWaitKey(lease));
	return found;
}

/*
 * DsyncEphemeralRelease
 *		dsync_release of an ephemeral lease: NONE if the name has none.
 */
DsyncEphemeralFound
DsyncEphemeralRelease(text *lease, text *holder, int64 *token)
{
	return EphemeralReleaseIf(lease, holder, 0, token);
}

/*
 * DsyncEphemeralReleaseGrant
 *		Release the ephemeral grant holder got with token, if it still
 *		holds it (a session lease whose backend ends); true if released.
 */
bool
DsyncEphemeralReleaseGrant(text *lease, text *holder, int64 token)
{
	int64		released;

	return EphemeralReleaseIf(lease, holder, token, &released) == DSYNC_EPHEMERAL_DONE;
}

/*
 * EphemeralGuardXactCallback
 *		At the end of the top-level transaction, drop its guards and wake
 *		whoever waits for them; a guarded lease that expired meanwhile is
 *		due for the reaper now.
 */
static void
EphemeralGuardXactCallback(XactEvent event, void *arg)
{
	ListCell   *lc;

	if (my_guards == NIL ||
		(event != XACT_EVENT_COMMIT && event != XACT_EVENT_ABORT &&
		 event != XACT_EVENT_PARALLEL_COMMIT && event != XACT_EVENT_PARALLEL_ABORT))
		return;
	foreach(lc, my_guards)
	{
		EphemeralGuardNote *note = lfirst(lc);
		LWLock	   *lock = EphemeralLock(note->hash);
		EphemeralEntry *entry;

		LWLockAcquire(lock, LW_EXCLUSIVE);
		entry = EphemeralFind(&note->key, note->hash);
		if (entry != NULL && entry->generation == note->generation && entry->guards > 0)
		{
			entry->guards--;
			if (entry->guards == 0)
			{
				/* Unguarded: the reaper must know when it is due (now, if expired). */
				DsyncEvent	due = EphemeralEvent(DSYNC_EVENT_DEADLINE, entry);

				due.expires_at = Max(entry->expires_at, GetCurrentTimestamp());
				DsyncEventPublishNow(&due, 1, 0);
			}
		}
		LWLockRelease(lock);
		DsyncWakeNow(note->wait_key);
	}
	list_free_deep(my_guards);
	my_guards = NIL;
	ConditionVariableBroadcast(&ephemeral_shared->guards_done);
}

/*
 * DsyncEphemeralGuard
 *		dsync_assert_held of an ephemeral lease: NONE if the name has none.
 */
DsyncEphemeralFound
DsyncEphemeralGuard(text *lease, text *holder, int64 *token)
{
	EphemeralKey key;
	uint32		hash;
	EphemeralEntry *entry;
	DsyncEphemeralFound found;
	EphemeralGuardNote *note;
	MemoryContext oldcontext;

	for (;;)
	{
		uint64		generation;

		found = EphemeralLookHeld(lease, holder, LW_EXCLUSIVE, &key, &hash, &entry);
		if (found != DSYNC_EPHEMERAL_DONE || EphemeralGuardLock(entry->generation, false))
			break;
		/* A release is queued for the guards: wait behind it, then look again. */
		generation = entry->generation;
		LWLockRelease(EphemeralLock(hash));
		(void) EphemeralGuardLock(generation, true);
	}
	if (found == DSYNC_EPHEMERAL_NONE)
		return found;
	if (found == DSYNC_EPHEMERAL_DONE)
	{
		/* A guard is not kept across PREPARE TRANSACTION. */
		DsyncXactChanged();
		if (!guard_callback_registered)
		{
			RegisterXactCallback(EphemeralGuardXactCallback, NULL);
			guard_callback_registered = true;
		}
		oldcontext = MemoryContextSwitchTo(TopMemoryContext);
		note = palloc(sizeof(EphemeralGuardNote));
		note->key = key;
		note->hash = hash;
		note->generation = entry->generation;
		note->wait_key = DsyncWaitKey(lease);
		my_guards = lappend(my_guards, note);
		MemoryContextSwitchTo(oldcontext);
		entry->guards++;
		*token = entry->fencing;
	}
	LWLockRelease(EphemeralLock(hash));
	return found;
}

/*
 * DsyncEphemeralLeader
 *		The holder of a live ephemeral lease: NONE if the name has none.
 */
DsyncEphemeralFound
DsyncEphemeralLeader(text *lease, text **holder)
{
	EphemeralKey key;
	uint32		hash;
	EphemeralEntry *entry;
	DsyncEphemeralFound found;

	found = EphemeralLookHeld(lease, NULL, LW_SHARED, &key, &hash, &entry);
	if (found == DSYNC_EPHEMERAL_NONE)
		return found;
	*holder = entry->expires_at > GetCurrentTimestamp() ? cstring_to_text(entry->holder) : NULL;
	LWLockRelease(EphemeralLock(hash));
	return found;
}

/*
 * DsyncEphemeralForceRelease
 *		dsync_force_release of an ephemeral lease (of holder, if given);
 *		returns 1 if it released one.
 */
int32
DsyncEphemeralForceRelease(text *lease, text *holder, bool cancel_waits)
{
	EphemeralKey key;
	uint32		hash;
	EphemeralEntry *entry;
	Oid			owner;

	if (EphemeralLookHeld(lease, NULL, LW_EXCLUSIVE, &key, &hash, &entry) ==
		DSYNC_EPHEMERAL_NONE)
		return 0;
	EphemeralWaitGuards(&key, hash, &entry);
	if (entry == NULL || entry->expires_at <= GetCurrentTimestamp() ||
		(holder != NULL && !EphemeralHolderNameIs(entry, holder)))
	{
		LWLockRelease(EphemeralLock(hash));
		return 0;
	}
	owner = entry->owner;
	EphemeralLetGo(entry, hash);
	LWLockRelease(EphemeralLock(hash));
	if (cancel_waits)
		DsyncWaitEvict(DsyncWaitKey(lease), owner);
	DsyncWakeNow(DsyncWaitKey(lease));
	return 1;
}

/*
 * DsyncEphemeralExclude
 *		Before a durable grant of lease writes its row: false (with
 *		*retry_at, 0 if unknown) if an ephemeral lease holds the name;
 *		otherwise true, with the name's partition lock held in share mode
 *		until DsyncEphemeralExcludeEnd, so that no ephemeral grant of the
 *		name can happen before the row version is written.  for_grant: the
 *		catalog of a grant (NULL for a renewal, which draws no token); the
 *		token the grant draws meanwhile almost always comes from the block in shared
 *		memory; one fetched under the lock (if others used the block up in
 *		between) holds up only ephemeral grants in its partition.
 */
bool
DsyncEphemeralExclude(const DsyncCatalog *for_grant, text *lease, TimestampTz *retry_at)
{
	EphemeralKey key;
	uint32		hash;
	EphemeralEntry *entry;
	TimestampTz now;

	excluding = NULL;
	if (ephemeral_shared == NULL)
		return true;

	/*
	 * One clock reading serves the holdback and the look below: read before
	 * the lock, it can only make a holder look live for longer, which keeps
	 * the durable grant out (the safe side).
	 */
	now = GetCurrentTimestamp();
	if (for_grant != NULL)
	{
		/* An ephemeral holder from before the start may still hold it. */
		if (DsyncEphemeralHoldback(for_grant,
								   (TimestampTz) pg_atomic_read_u64(&ephemeral_shared->open_at),
								   now, retry_at))
			return false;
		/* A grant draws its token under the lock: fetch a block before. */
		DsyncFencingFill(for_grant);
	}
	hash = EphemeralKeyFor(lease, &key);
	LWLockAcquire(EphemeralLock(hash), LW_SHARED);
	entry = pg_atomic_read_u32(&ephemeral_shared->entries) == 0 ? NULL :
		EphemeralFind(&key, hash);
	if (entry != NULL && EphemeralIsHeld(entry, now))
	{
		*retry_at = entry->expires_at > now ? entry->expires_at : 0;
		LWLockRelease(EphemeralLock(hash));
		return false;
	}
	excluding = EphemeralLock(hash);
	return true;
}

/*
 * DsyncEphemeralExcludeEnd
 *		The durable row version is written (or the write failed): let
 *		ephemeral grants of the name look again.
 */
void
DsyncEphemeralExcludeEnd(void)
{
	if (excluding != NULL)
		LWLockRelease(excluding);
	excluding = NULL;
}
