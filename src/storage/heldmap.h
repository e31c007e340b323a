/*-------------------------------------------------------------------------
 *
 * heldmap.h
 *		Which names may have a durable holder, for ephemeral grants
 *		(heldmap.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef DSYNC_HELDMAP_H
#define DSYNC_HELDMAP_H

#include "postgres.h"
#include "common/hashfn.h"
#include "miscadmin.h"
#include "utils/timestamp.h"
#include "args.h"
#include "dbslot.h"

/*
 * DsyncNameHashOf
 *		The hash of a name's bytes in a database.  The ephemeral lease table
 *		(leases/ephemeral.c) and the held map use the same one, so that a
 *		held-map bucket found from a durable write is the bucket an
 *		ephemeral grant of that name checks.
 */
static inline uint32
DsyncNameHashOf(const char *name, int len, Oid dbid)
{
	return hash_combine(hash_bytes((const unsigned char *) name, len), murmurhash32(dbid));
}

/*
 * DsyncNameHash
 *		DsyncNameHashOf of a name of this database, for callers with no
 *		ephemeral key at hand (the held map, on every durable write).
 */
static inline uint32
DsyncNameHash(text *name)
{
	return DsyncNameHashOf(VARDATA_ANY(name),
						   Min(VARSIZE_ANY_EXHDR(name), DSYNC_NAME_MAX_BYTES),
						   MyDatabaseId);
}

extern Size DsyncHeldMapShmemSize(void);
extern void DsyncHeldMapShmemInit(void);
extern void DsyncHeldMapNote(text *name, TimestampTz expiry, TimestampTz touched);
extern bool DsyncHeldMapClear(DsyncDbSlot *slot, uint32 hash, TimestampTz now);
extern bool DsyncHeldMapPinned(uint32 hash);
extern void DsyncHeldMapReaping(void);
extern uint64 DsyncHeldMapReapBegin(DsyncDbSlot *slot, TimestampTz *began);
extern void DsyncHeldMapReaped(DsyncDbSlot *slot, uint64 seen, TimestampTz upto);
extern void DsyncHeldMapFill(DsyncDbSlot *slot);

#endif							/* DSYNC_HELDMAP_H */
