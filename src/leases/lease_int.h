/*-------------------------------------------------------------------------
 *
 * lease_int.h
 *		What lease.c and leasehold.c share, and nothing else uses.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DSYNC_LEASE_INT_H
#define DSYNC_LEASE_INT_H

#include "postgres.h"
#include "access/tableam.h"
#include "lease.h"
#include "store.h"

/* The tables a lease's holders may be in. */
typedef struct LeaseStores
{
	DsyncStore	lease;
	DsyncStore	permit;
	bool		has_permits;	/* dsync_permit exists (1.2) */
} LeaseStores;

extern void LeaseStoresOpen(LeaseStores *stores, FunctionCallInfo fcinfo,
							bool for_write);
extern void LeaseStoresOpenCatalog(LeaseStores *stores, const DsyncCatalog *catalog,
								   bool for_write);
extern void LeaseStoresClose(LeaseStores *stores);
extern bool LeaseMayHavePermits(LeaseStores *stores);
extern bool LeaseHeldByCaller(DsyncRow *row, text *holder);
extern TimestampTz LeaseSetRenewal(DsyncRow *row, int64 ttl_usec);
extern void LeaseRecordDeadline(DsyncStore *store, DsyncRow *row, TimestampTz previous);
extern TM_Result LeaseExtend(DsyncStore *store, DsyncRow *row, const LeaseGrant *grant);

#endif							/* DSYNC_LEASE_INT_H */
