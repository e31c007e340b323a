/*-------------------------------------------------------------------------
 *
 * ephemeral_int.h
 *		The shared table of ephemeral leases, for the files that work on
 *		it (ephemeral.c, ephscan.c, ephowner.c, ephguard.c); not for
 *		anybody else.
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
#include "utils/hsearch.h"
#include "utils/timestamp.h"

#include "catalog.h"
#include "events.h"
#include "ephemeral.h"

#define EPHEMERAL_PARTITIONS	16
#define EPHEMERAL_INFO_MAX		1024	/* bytes of jsonb an ephemeral lease keeps */

/* A name in one database; zero-padded, so that it hashes as a blob. */
typedef struct EphemeralKey
{
	Oid			dbid;
	char		name[DSYNC_NAME_MAX_BYTES + 1];
} EphemeralKey;

typedef struct EphemeralEntry
{
	EphemeralKey key;
	char		holder[DSYNC_NAME_MAX_BYTES + 1];
	int64		fencing;
	TimestampTz acquired_at;
	TimestampTz renewed_at;
	TimestampTz expires_at;
	Interval	ttl;
	Oid			owner;
	int			session_pid;	/* backend whose exit releases it (0: none) */
	uint64		generation;		/* of this grant: a guard of an earlier one is not its */
	int			guards;			/* transactions guarding it now */
	int			info_len;		/* 0: no info */
	char		info[EPHEMERAL_INFO_MAX];
} EphemeralEntry;

typedef struct EphemeralShared
{
	LWLockPadded *locks;
	pg_atomic_uint32 entries;	/* in all databases */
	pg_atomic_uint64 open_at;	/* no grant before; 0: not yet known */
	pg_atomic_uint64 generations;	/* grants so far */
	ConditionVariable guards_done;	/* a guard ended */
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

	return (int) strlen(entry->holder) == len &&
		memcmp(entry->holder, VARDATA_ANY(holder), len) == 0;
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
extern void EphemeralRemove(EphemeralEntry *entry, uint32 hash);
extern void EphemeralRequire(void);
extern void EphemeralSetInfo(EphemeralEntry *entry, const LeaseGrant *grant);
/* A name's entry as EphemeralLookHeld found it, and its key's hash. */
typedef struct EphemeralLook
{
	EphemeralKey key;
	uint32		hash;
	EphemeralEntry *entry;
} EphemeralLook;

extern DsyncEphemeralFound EphemeralLookHeld(text *lease, text *holder, LWLockMode mode,
											 EphemeralLook *look);

/* ephscan.c */
extern int	EphemeralSweep(Oid dbid, bool forget);

/* ephguard.c */
extern bool EphemeralGuardLock(uint64 generation, bool wait);
extern void EphemeralGuardWait(uint64 generation);

#endif							/* DSYNC_EPHEMERAL_INT_H */
