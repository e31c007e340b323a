/*-------------------------------------------------------------------------
 *
 * store_int.h
 *		What store.c and storekey.c share, and nothing else uses.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DSYNC_STORE_INT_H
#define DSYNC_STORE_INT_H

#include "postgres.h"
#include "store.h"

extern bool DsyncStoreLockedByReaper(TransactionId xid);

#endif							/* DSYNC_STORE_INT_H */
