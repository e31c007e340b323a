/*-------------------------------------------------------------------------
 *
 * boundmap.h
 *		Which names may guard a fence, for grants (boundmap.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef DSYNC_BOUNDMAP_H
#define DSYNC_BOUNDMAP_H

#include "postgres.h"
#include "dbslot.h"

extern Size DsyncBoundMapShmemSize(void);
extern void DsyncBoundMapShmemInit(void);
extern void DsyncBoundMapSet(text *name);
extern bool DsyncBoundMapMaybe(uint32 hash);
extern void DsyncBoundMapFill(DsyncDbSlot *slot);

#endif							/* DSYNC_BOUNDMAP_H */
