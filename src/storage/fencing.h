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

/*
 * A block of fencing tokens reserved from one database's sequence and
 * handed out in order from shared memory (fencing.c).
 */
#define DSYNC_FENCING_SLOTS		64

typedef struct DsyncFencingBlock
{
	Oid			dbid;
	Oid			seqrelid;
	uint64		generation;		/* bumped whenever the slot changes hands */
	int64		next;			/* next token to hand out */
	int64		limit;			/* first token past the block */
} DsyncFencingBlock;

extern int64 DsyncNextFencingToken(const DsyncCatalog *catalog);
extern void DsyncFencingFill(const DsyncCatalog *catalog);
extern bool DsyncFencingTryNext(const DsyncCatalog *catalog, int64 *token);
extern int64 DsyncSequenceNextAtClock(Oid seqoid);
extern void DsyncSequenceSetDurably(Oid seqoid, int64 value);
extern int64 DsyncSequenceLastValue(Oid seqoid);
extern bool DsyncFencingIssued(const DsyncCatalog *catalog, int64 token);

#endif							/* DSYNC_FENCING_H */
