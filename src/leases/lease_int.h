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

/*
 * The helpers below are on the path of every acquire, renew and release,
 * in both files: inline, as they were while one file held them all.
 */

/*
 * LeaseStoresOpenCatalog
 *		LeaseStoresOpen, given where the extension's tables are.
 */
static inline void
LeaseStoresOpenCatalog(LeaseStores *stores, const DsyncCatalog *catalog, bool for_write)
{
	DsyncStoreOpenCatalog(&stores->lease, catalog, DSYNC_TABLE_LEASE, for_write);
	stores->has_permits = OidIsValid(catalog->rels[DSYNC_TABLE_PERMIT]);
	if (stores->has_permits)
		DsyncStoreOpenCatalog(&stores->permit, catalog, DSYNC_TABLE_PERMIT, for_write);
}

/*
 * LeaseStoresOpen
 *		Open dsync_lease and, where installed, dsync_permit.
 */
static inline void
LeaseStoresOpen(LeaseStores *stores, FunctionCallInfo fcinfo, bool for_write)
{
	LeaseStoresOpenCatalog(stores, DsyncCatalogGet(fcinfo), for_write);
}

/*
 * LeaseStoresClose
 *		Close what LeaseStoresOpen opened.
 */
static inline void
LeaseStoresClose(LeaseStores *stores)
{
	if (stores->has_permits)
		DsyncStoreClose(&stores->permit);
	DsyncStoreClose(&stores->lease);
}

/*
 * LeaseMayHavePermits
 *		Whether dsync_permit may hold a row: it is installed, the database
 *		may use semaphores (DsyncSemaphoresUnused, remembered), and it has
 *		pages.
 */
static inline bool
LeaseMayHavePermits(LeaseStores *stores)
{
	return stores->has_permits && !DsyncSemaphoresUnused(stores->lease.catalog) &&
		DsyncStoreBlockCount(stores->permit.rel) > 0;
}

/*
 * LeaseHeldByCaller
 *		Whether a locked row is still held live by this holder, as the
 *		clock reads now, and owned by a role the caller acts for.
 */
static inline bool
LeaseHeldByCaller(DsyncRow *row, text *holder)
{
	return DsyncRowIsLive(row, GetCurrentTimestamp()) &&
		DsyncRowHolderIs(row, holder) &&
		DsyncRowOwnerIsCaller(row, Anum_lease_owner);
}

extern TimestampTz LeaseSetRenewal(DsyncRow *row, int64 ttl_usec);
extern void LeaseRecordDeadline(DsyncStore *store, DsyncRow *row, TimestampTz previous);
extern TM_Result LeaseExtend(DsyncStore *store, DsyncRow *row, const LeaseGrant *grant);

#endif							/* DSYNC_LEASE_INT_H */
