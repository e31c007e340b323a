/*-------------------------------------------------------------------------
 *
 * locate.h
 *		Where each lease's newest row version is: a shared cache of tuple
 *		locations, published at commit (locate.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef DSYNC_LOCATE_H
#define DSYNC_LOCATE_H

#include "postgres.h"
#include "storage/itemptr.h"
#include "utils/relcache.h"

extern Size DsyncLocateShmemSize(void);
extern void DsyncLocateShmemInit(void);
extern bool DsyncLocateGet(Relation rel, text *name, ItemPointer tid);
extern void DsyncLocatePut(Relation rel, text *name, ItemPointer tid,
						   ItemPointer expected);
extern void DsyncLocateAtCommit(Relation rel, text *name, ItemPointer tid);

#endif							/* DSYNC_LOCATE_H */
