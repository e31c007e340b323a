/*-------------------------------------------------------------------------
 *
 * xactcb.h
 *		Registering a module's transaction callbacks once per backend.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DSYNC_XACTCB_H
#define DSYNC_XACTCB_H

#include "postgres.h"
#include "access/xact.h"

/*
 * DsyncXactCallbacksOnce
 *		Register a transaction and a subtransaction callback, unless *done
 *		says they already are; true if this call registered them, so that
 *		a caller can add others of its own just once too.
 *
 * Callbacks are registered on first use, not at load, so that a backend
 * that never calls dsync pays nothing at each transaction end.
 */
static inline bool
DsyncXactCallbacksOnce(bool *done, XactCallback xact, SubXactCallback subxact)
{
	if (*done)
		return false;
	RegisterXactCallback(xact, NULL);
	RegisterSubXactCallback(subxact, NULL);
	*done = true;
	return true;
}

#endif							/* DSYNC_XACTCB_H */
