/*-------------------------------------------------------------------------
 *
 * fencing.h
 *		Fencing tokens, handed out in blocks from shared memory (fencing.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef DSYNC_FENCING_H
#define DSYNC_FENCING_H

#include "postgres.h"
#include "catalog.h"
#include "shmem.h"

extern int64 DsyncNextFencingToken(const DsyncCatalog *catalog);
extern void DsyncFencingFill(const DsyncCatalog *catalog);
extern bool DsyncFencingTryNext(const DsyncCatalog *catalog, int64 *token);
extern int64 DsyncSequenceNextAtClock(Oid seqoid);
extern void DsyncSequenceSetDurably(Oid seqoid, int64 value);
extern int64 DsyncSequenceLastValue(Oid seqoid);
extern bool DsyncFencingIssued(const DsyncCatalog *catalog, int64 token);

#endif							/* DSYNC_FENCING_H */
