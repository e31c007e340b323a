/*-------------------------------------------------------------------------
 *
 * catalog.h
 *		The extension's tables: their columns, and where they are in this
 *		database (catalog.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef DSYNC_CATALOG_H
#define DSYNC_CATALOG_H

#include "postgres.h"
#include "fmgr.h"
#include "dsync_limits.h"

/*
 * Columns of dsync_lease (plain leases) and dsync_permit (semaphore
 * permits), which have the same columns, in table order (1-based).
 */
#define Anum_lease_name			1
#define Anum_lease_slot			2
#define Anum_lease_holder		3
#define Anum_lease_fencing		4
#define Anum_lease_acquired_at	5
#define Anum_lease_renewed_at	6
#define Anum_lease_expires_at	7
#define Anum_lease_ttl			8
#define Anum_lease_info			9
#define Anum_lease_owner		10
#define Natts_lease				10

/* dsync_semaphore (1.1): one row per semaphore definition. */
#define Anum_semaphore_name		1
#define Anum_semaphore_permits	2
#define Anum_semaphore_created_at 3
#define Anum_semaphore_owner	4
#define Natts_semaphore			4

/* dsync_signal (1.1): one row per pending one-to-one signal. */
#define Anum_signal_name		1
#define Anum_signal_seq			2
#define Anum_signal_set_at		3
#define Anum_signal_owner		4
#define Natts_signal			4

/* dsync_member (1.1): one row per group member. */
#define Anum_member_grp			1
#define Anum_member_member		2
#define Anum_member_info		3
#define Anum_member_joined_at	4
#define Anum_member_renewed_at	5
#define Anum_member_expires_at	6
#define Anum_member_ttl			7
#define Anum_member_owner		8
#define Natts_member			8

/* dsync_fence (1.4): one row per fenced resource, its greatest token. */
#define Anum_fence_resource		1
#define Anum_fence_token		2
#define Anum_fence_fenced_at	3
#define Anum_fence_owner		4
#define Anum_fence_relid		5	/* 1.5: the table a "table:" mark is of */
#define Anum_fence_lease		6	/* 1.5: the lease whose grants raise it */
#define Natts_fence				6
#define Natts_fence_1_4			4

/* The widest dsync table; a DsyncRow can hold a row of any of them. */
#define DSYNC_MAX_ATTS			Natts_lease


typedef enum DsyncTable
{
	DSYNC_TABLE_LEASE = 0,
	DSYNC_TABLE_SEMAPHORE,
	DSYNC_TABLE_SIGNAL,
	DSYNC_TABLE_MEMBER,
	DSYNC_TABLE_PERMIT,
	DSYNC_TABLE_FENCE,
	DSYNC_NUM_TABLES
} DsyncTable;

typedef struct DsyncCatalog
{
	Oid			extension;
	Oid			namespace;
	Oid			rels[DSYNC_NUM_TABLES];		/* InvalidOid: not installed */
	Oid			fencing_seq;
	Oid			signal_seq;
	Oid			event_seq;		/* 1.2 */
	Oid			event_log;		/* 1.4 */
	Oid			ephemeral_seq;	/* 1.5 */
	Oid			event_pruned;	/* 1.5 */
	bool		fence_relid;	/* 1.5: dsync_fence has relid, lease and its
								 * index on lease */
} DsyncCatalog;

extern const DsyncCatalog *DsyncCatalogGet(FunctionCallInfo fcinfo);
extern const DsyncCatalog *DsyncCatalogFromExtension(void);
extern const DsyncCatalog *DsyncCatalogTry(void);
extern void DsyncCatalogRequire(const DsyncCatalog *catalog, DsyncTable table);
extern void DsyncCatalogReportDropped(void);
extern const char *DsyncTableName(DsyncTable table);

#endif							/* DSYNC_CATALOG_H */
