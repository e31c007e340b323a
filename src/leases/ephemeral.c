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
 * An entry keeps only fixed-size fields, about 130 bytes: its name, holder
 * and info are a chain of chunks of a shared pool (ephpool.c), and its key
 * carries the name's hash and finds its bytes there to compare, so that
 * the default of 100,000 leases fits in under 32 MB.  Its expiry is in a
 * heap per database slot and partition (ephheap.c), from which the reaper
 * takes what is due without walking the table.
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

EphemeralShared *ephemeral_shared = NULL;
HTAB	   *ephemeral_hash = NULL;
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
	return add_size(add_size(add_size(MAXALIGN(sizeof(EphemeralShared)), DsyncHeldMapShmemSize()),
							 add_size(EphemeralPoolShmemSize(), EphemeralHeapShmemSize())),
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
 *		dynahash's hash of a key: DsyncNameHashOf of the name's bytes and
 *		the database, which the key carries (EphemeralKeyFor), so that a
 *		key copied from an entry hashes without reading its chain.
 */
static uint32
EphemeralKeyHash(const void *key, Size keysize)
{
	return ((const EphemeralKey *) key)->hash;
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
	EphemeralPoolShmemInit(found);
	EphemeralHeapShmemInit(found);
	DsyncHeldMapShmemInit();
	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = sizeof(EphemeralKey);
	ctl.entrysize = sizeof(EphemeralEntry);
	ctl.hash = EphemeralKeyHash;
	ctl.match = EphemeralKeyMatch;
	ctl.num_partitions = EPHEMERAL_PARTITIONS;
	ephemeral_hash = ShmemInitHash("dsync ephemeral leases",
								   EphemeralTableSize(), EphemeralTableSize(),
								   &ctl, HASH_ELEM | HASH_FUNCTION | HASH_COMPARE |
								   HASH_PARTITION | HASH_FIXED_SIZE);
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
void
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
 *		The key of a name in this database, and its hash.  The key points
 *		at the name's bytes in lease, which must outlive it.
 */
uint32
EphemeralKeyFor(text *lease, EphemeralKey *key)
{
	key->dbid = MyDatabaseId;
	key->len = Min(VARSIZE_ANY_EXHDR(lease), DSYNC_NAME_MAX_BYTES);
	key->name = VARDATA_ANY(lease);
	key->chunk = EPHEMERAL_NO_CHUNK;
	key->hash = DsyncNameHashOf(key->name, key->len, key->dbid);
	return key->hash;
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
 * The name and holder of the last EphemeralEvent: every caller publishes
 * an event before it makes the next, and a static copy costs no palloc
 * (EphemeralGuardXactCallback makes one while its transaction aborts).
 */
static char event_name[DSYNC_NAME_MAX_BYTES + 1];
static char event_holder[DSYNC_NAME_MAX_BYTES + 1];

/*
 * EphemeralEvent
 *		An event about an entry, for DsyncEventPublishNow, which must be
 *		given it before the next call: its name and holder are this file's
 *		copies.  slot -1 tells the reaper there is no row to look up.
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
	EphemeralChainRead(entry->key.chunk, 0, event_name, entry->key.len);
	event_name[entry->key.len] = '\0';
	EphemeralChainRead(entry->key.chunk, entry->key.len, event_holder, entry->holder_len);
	event_holder[entry->holder_len] = '\0';
	event.name = event_name;
	event.holder = event_holder;
	return event;
}

/*
 * EphemeralRemove
 *		Take an entry out of the table and give its strings back to the
 *		pool, under its partition lock held exclusively (every partition
 *		lock, in a pass over the table: removing the entry a pass is at is
 *		allowed).
 */
void
EphemeralRemove(EphemeralEntry *entry)
{
	EphemeralKey key = entry->key;

	key.name = NULL;
	EphemeralHeapRemove(entry);
	(void) hash_search_with_hash_value(ephemeral_hash, &key, key.hash, HASH_REMOVE, NULL);
	EphemeralChainFree(key.chunk);
	pg_atomic_fetch_sub_u32(&ephemeral_shared->entries, 1);
}

/*
 * EphemeralSettle
 *		A durable grant found the name's entry expired and unguarded: under
 *		the partition lock, taken exclusively for this, announce its expiry
 *		and remove it, as the reaper would, if it is still so.  Its
 *		"expired" is then queued before the durable grant's "acquired"
 *		(queued at commit), not whenever the reaper gets to it; the reaper
 *		no longer finds it.
 */
static void
EphemeralSettle(const EphemeralKey *key, uint32 hash)
{
	LWLock	   *lock = EphemeralLock(hash);
	EphemeralEntry *entry;

	/* What may claim a database slot (catalogs, locks) comes before the LWLock. */
	DsyncEventPrepareNow();
	LWLockAcquire(lock, LW_EXCLUSIVE);
	entry = EphemeralFind(key, hash);
	if (entry != NULL && !EphemeralIsHeld(entry, GetCurrentTimestamp()))
	{
		DsyncEvent	event = EphemeralEvent(DSYNC_EVENT_EXPIRED, entry);

		DsyncEventPublishNow(&event, 1, 0);
		EphemeralRemove(entry);
	}
	LWLockRelease(lock);
}

/*
 * DsyncEphemeralSettle
 *		Before a durable grant that counts an ephemeral lease of the name
 *		as a holder (a permit, whose semaphore was defined over it):
 *		announce and remove it if it has expired and nobody guards it
 *		(EphemeralSettle), so that its "expired" comes before the grant's
 *		"acquired".  A probe under the share lock when nothing is due.
 */
void
DsyncEphemeralSettle(text *lease)
{
	EphemeralKey key;
	uint32		hash;
	EphemeralEntry *entry;
	bool		expired;

	if (ephemeral_shared == NULL || pg_atomic_read_u32(&ephemeral_shared->entries) == 0)
		return;
	hash = EphemeralKeyFor(lease, &key);
	LWLockAcquire(EphemeralLock(hash), LW_SHARED);
	entry = EphemeralFind(&key, hash);
	expired = entry != NULL && !EphemeralIsHeld(entry, GetCurrentTimestamp());
	LWLockRelease(EphemeralLock(hash));
	if (expired)
		EphemeralSettle(&key, hash);
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
 *		between) holds up only ephemeral grants in its partition.  A grant
 *		that finds an expired ephemeral lease of the name announces its
 *		expiry first (EphemeralSettle).
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
	for (;;)
	{
		LWLockAcquire(EphemeralLock(hash), LW_SHARED);
		entry = pg_atomic_read_u32(&ephemeral_shared->entries) == 0 ? NULL :
			EphemeralFind(&key, hash);
		if (entry != NULL && EphemeralIsHeld(entry, now))
		{
			*retry_at = entry->expires_at > now ? entry->expires_at : 0;
			LWLockRelease(EphemeralLock(hash));
			return false;
		}
		if (entry == NULL || for_grant == NULL)
			break;
		/* Expired, not yet announced: announce it, then look again. */
		LWLockRelease(EphemeralLock(hash));
		EphemeralSettle(&key, hash);
		now = GetCurrentTimestamp();
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
