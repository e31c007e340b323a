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
#include "utils/timestamp.h"
#include "dbslot.h"

extern Size DsyncHeldMapShmemSize(void);
extern void DsyncHeldMapShmemInit(void);
extern void DsyncHeldMapNote(text *name, TimestampTz expiry);
extern bool DsyncHeldMapClear(DsyncDbSlot *slot, uint32 hash, TimestampTz now);
extern void DsyncHeldMapFill(DsyncDbSlot *slot);

#endif							/* DSYNC_HELDMAP_H */
