/*-------------------------------------------------------------------------
 *
 * ephemeral_int.h
 *		The shared table of ephemeral leases, for the files that work on
 *		it (ephemeral.c, ephgrant.c, ephrelease.c, ephscan.c, ephowner.c,
 *		ephguard.c, ephpool.c, ephheap.c); not for anybody else.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DSYNC_EPHEMERAL_INT_H
#define DSYNC_EPHEMERAL_INT_H

#include "postgres.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "port/atomics.h"
#include "storage/condition_variable.h"
#include "storage/lock.h"
#include "storage/lwlock.h"
#include "storage/spin.h"
#include "utils/hsearch.h"
#include "utils/jsonb.h"
#include "lib/pairingheap.h"
#include "utils/timestamp.h"

#include "catalog.h"
#include "dbslot.h"
#include "events.h"
#include "ephemeral.h"

#define EPHEMERAL_PARTITIONS	16
#define EPHEMERAL_INFO_MAX		1024	/* bytes of jsonb an ephemeral lease keeps */

/*
 * The strings of an entry (name, holder, info, one after the other) live
 * out of line, in a chain of chunks of a shared pool (ephpool.c), so that
 * an entry is small and a lease takes only the room its strings need.
 */
#define EPHEMERAL_CHUNK_DATA	60
#define EPHEMERAL_NO_CHUNK		PG_UINT32_MAX

/*
 * Chunks in the pool, per lease of dsync.ephemeral_max_leases: 2.5 of 60
 * bytes, 150 bytes of strings per lease on average.
 */
#define EPHEMERAL_CHUNKS(leases)	((Size) (leases) * 5 / 2)

typedef struct EphemeralChunk
{
	uint32		next;			/* EPHEMERAL_NO_CHUNK: the last one */
	char		data[EPHEMERAL_CHUNK_DATA];
} EphemeralChunk;

/*
 * A name in one database.  In the table, chunk is the first chunk of the
 * entry's strings and name is NULL; a key to look up (EphemeralKeyFor)
 * points name at the caller's bytes instead.  hash is DsyncNameHashOf of
 * the name, kept so that dynahash never needs the bytes to hash a key;
 * keys compare by their bytes (EphemeralKeyMatch), never by their hash.
 */
typedef struct EphemeralKey
{
	Oid			dbid;
	uint32		hash;
	uint32		len;			/* of the name, in bytes */
	uint32		chunk;
	const char *name;
} EphemeralKey;

typedef struct EphemeralEntry
{
	EphemeralKey key;
	int64		fencing;
	TimestampTz acquired_at;
	TimestampTz renewed_at;
	TimestampTz expires_at;
	Interval	ttl;
	Oid			owner;
	int			session_pid;	/* backend whose exit releases it (0: none) */
	uint64		generation;		/* of this grant: a guard of an earlier one is not its */
	int			guards;			/* transactions guarding it now */
	uint16		holder_len;		/* bytes, after the name's in the chain */
	uint16		info_len;		/* 0: no info; after the holder's */
	pairingheap_node expiry;	/* in the heap of its slot and partition (ephheap.c) */
	pairingheap_node **heap;	/* that heap's root; NULL: in none */
} EphemeralEntry;

typedef struct EphemeralShared
{
	LWLockPadded *locks;
	pg_atomic_uint32 entries;	/* in all databases */
	pg_atomic_uint64 open_at;	/* no grant before; 0: not yet known */
	pg_atomic_uint64 generations;	/* grants so far */
	ConditionVariable guards_done;	/* a guard ended */
	slock_t		pool_mutex;		/* the pool's free list */
	uint32		pool_free;		/* first free chunk */
	uint32		pool_nfree;
	uint32		pool_size;		/* chunks */
	EphemeralChunk *pool;
	pairingheap_node **roots;	/* [slot][partition]: ephheap.c */
} EphemeralShared;

extern EphemeralShared *ephemeral_shared;
extern HTAB *ephemeral_hash;

/*
 * EphemeralLock
 *		The partition lock of a hash value.
 */
static inline LWLock *
EphemeralLock(uint32 hash)
{
	return &ephemeral_shared->locks[hash % EPHEMERAL_PARTITIONS].lock;
}

/* ephpool.c */
extern Size EphemeralPoolShmemSize(void);
extern void EphemeralPoolShmemInit(bool found);
extern bool EphemeralChainEquals(uint32 chunk, int offset, const char *bytes, int len);
extern void EphemeralChainRead(uint32 chunk, int offset, char *out, int len);
extern void EphemeralChainFree(uint32 chunk);
extern bool EphemeralPutStrings(EphemeralEntry *entry, const char *name, int name_len,
								text *holder, const Jsonb *info);
extern int	EphemeralKeyMatch(const void *stored, const void *probe, Size keysize);
extern text *EphemeralNameText(const EphemeralEntry *entry);
extern text *EphemeralHolderText(const EphemeralEntry *entry);

/* Asked of an entry on every grant, renewal and release: inline. */

/*
 * EphemeralIsHeld
 *		Whether an entry still keeps others out: live, or guarded.
 */
static inline bool
EphemeralIsHeld(const EphemeralEntry *entry, TimestampTz now)
{
	return entry->expires_at > now || entry->guards > 0;
}

/*
 * EphemeralHolderNameIs
 *		Whether the entry's holder is holder.
 */
static inline bool
EphemeralHolderNameIs(const EphemeralEntry *entry, text *holder)
{
	int			len = VARSIZE_ANY_EXHDR(holder);

	return entry->holder_len == len &&
		EphemeralChainEquals(entry->key.chunk, entry->key.len, VARDATA_ANY(holder), len);
}

/*
 * EphemeralHolderIs
 *		Whether the entry's holder is holder and the caller acts for its
 *		owner role.
 */
static inline bool
EphemeralHolderIs(const EphemeralEntry *entry, text *holder)
{
	return EphemeralHolderNameIs(entry, holder) &&
		has_privs_of_role(GetUserId(), entry->owner);
}

extern uint32 EphemeralKeyFor(text *lease, EphemeralKey *key);
extern EphemeralEntry *EphemeralFind(const EphemeralKey *key, uint32 hash);
extern void EphemeralLetGo(EphemeralEntry *entry, uint32 hash);
extern void EphemeralWaitGuards(const EphemeralKey *key, uint32 hash,
								EphemeralEntry **entry);
extern DsyncEvent EphemeralEvent(DsyncEventKind kind, const EphemeralEntry *entry);
extern bool EphemeralScanBegin(LWLockMode mode, HASH_SEQ_STATUS *status, bool if_any);
extern void EphemeralUnlockAll(void);
extern void EphemeralRemove(EphemeralEntry *entry);
extern void EphemeralRequire(void);
/* A name's entry as EphemeralLookHeld found it, and its key's hash. */
typedef struct EphemeralLook
{
	EphemeralKey key;
	uint32		hash;
	EphemeralEntry *entry;
} EphemeralLook;

extern DsyncEphemeralFound EphemeralLookHeld(text *lease, text *holder, LWLockMode mode,
											 EphemeralLook *look);

/* ephheap.c */
extern Size EphemeralHeapShmemSize(void);
extern void EphemeralHeapShmemInit(bool found);
extern void EphemeralHeapRemove(EphemeralEntry *entry);
extern void EphemeralHeapPut(EphemeralEntry *entry, const DsyncDbSlot *slot);
extern void EphemeralHeapMoved(EphemeralEntry *entry);
extern int	EphemeralHeapReap(const DsyncDbSlot *slot, int partition, TimestampTz now,
							  TimestampTz *next, uint64 *freed);

/* ephscan.c */
extern int	EphemeralSweep(Oid dbid, bool forget);

/* ephguard.c */
extern bool EphemeralGuardLock(uint64 generation, bool wait);
extern void EphemeralGuardWait(uint64 generation);

#endif							/* DSYNC_EPHEMERAL_INT_H */
