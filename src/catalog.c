/*-------------------------------------------------------------------------
 *
 * catalog.c
 *		Find the extension's table, index and sequence in this database.
 *
 * The functions never resolve names through search_path: the objects are
 * looked up in the schema of the SQL function being called, which is the
 * schema the extension was created in.  The answer is cached per backend
 * and forgotten when the relcache says any of those relations changed
 * (DROP EXTENSION, ALTER ... RENAME), so the hot path costs no catalog
 * lookups at all.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_proc.h"
#include "commands/extension.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/relcache.h"
#include "utils/syscache.h"

#include "dsync.h"

static DsyncCatalog dsync_catalog;
static bool dsync_catalog_valid = false;
static bool dsync_callback_registered = false;

/*
 * DsyncCatalogInvalidate
 *		Relcache callback: drop the cache if one of our relations changed.
 */
static void
DsyncCatalogInvalidate(Datum arg, Oid relid)
{
	if (!dsync_catalog_valid)
		return;
	if (relid == InvalidOid || relid == dsync_catalog.fencing_seq ||
		relid == dsync_catalog.signal_seq)
		dsync_catalog_valid = false;
	for (int i = 0; i < DSYNC_NUM_TABLES; i++)
		if (relid == dsync_catalog.rels[i] || relid == dsync_catalog.pkeys[i])
			dsync_catalog_valid = false;
}

/*
 * DsyncCatalogLookupRel
 *		OID of one of the extension's relations, or an error saying the
 *		installation is damaged.
 */
static Oid
DsyncCatalogLookupRel(const char *relname, Oid namespace)
{
	Oid			relid = get_relname_relid(relname, namespace);

	if (!OidIsValid(relid))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("dsync relation \"%s.%s\" does not exist",
						get_namespace_name(namespace), relname),
				 errhint("The dsync extension's objects have been altered; "
						 "reinstall it with DROP EXTENSION dsync; CREATE EXTENSION dsync.")));
	return relid;
}

/*
 * DsyncCatalogCheckShape
 *		Refuse to work on a table whose shape was changed behind the
 *		extension's back: the C code writes rows with exactly its own
 *		columns and maintains only the primary key, so an added column or
 *		index would be corrupted or overrun.  Checked when the cache is
 *		filled, which any ALTER TABLE or CREATE INDEX forces again.
 */
static void
DsyncCatalogCheckShape(Oid relid, const char *relname, int natts)
{
	Relation	rel = table_open(relid, AccessShareLock);
	List	   *indexes = RelationGetIndexList(rel);
	bool		ok = RelationGetDescr(rel)->natts == natts &&
		list_length(indexes) == 1;

	list_free(indexes);
	table_close(rel, AccessShareLock);
	if (!ok)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("dsync table \"%s\" has been altered", relname),
				 errdetail("It must have exactly its original columns and only its primary key index."),
				 errhint("Drop what was added, or reinstall the extension with DROP EXTENSION dsync; CREATE EXTENSION dsync.")));
}

/*
 * DsyncCatalogFillTable
 *		Find one table and its primary key.  The tables added in 1.1 may be
 *		missing (an installation not yet updated): then they stay invalid
 *		and the functions that need them say so.
 */
static void
DsyncCatalogFillTable(DsyncTable table, const char *relname, const char *pkeyname,
					  int natts, bool required)
{
	Oid			namespace = dsync_catalog.namespace;

	if (!required && !OidIsValid(get_relname_relid(relname, namespace)))
	{
		dsync_catalog.rels[table] = InvalidOid;
		dsync_catalog.pkeys[table] = InvalidOid;
		return;
	}
	dsync_catalog.rels[table] = DsyncCatalogLookupRel(relname, namespace);
	dsync_catalog.pkeys[table] = DsyncCatalogLookupRel(pkeyname, namespace);
	DsyncCatalogCheckShape(dsync_catalog.rels[table], relname, natts);
}

/*
 * DsyncCatalogFill
 *		Look up the extension's objects in its schema and cache them.
 */
static const DsyncCatalog *
DsyncCatalogFill(Oid namespace)
{
	if (!dsync_callback_registered)
	{
		CacheRegisterRelcacheCallback(DsyncCatalogInvalidate, (Datum) 0);
		dsync_callback_registered = true;
	}
	dsync_catalog.namespace = namespace;
	DsyncCatalogFillTable(DSYNC_TABLE_LEASE, "dsync_lease", "dsync_lease_pkey",
						  Natts_lease, true);
	DsyncCatalogFillTable(DSYNC_TABLE_SEMAPHORE, "dsync_semaphore", "dsync_semaphore_pkey",
						  Natts_semaphore, false);
	DsyncCatalogFillTable(DSYNC_TABLE_SIGNAL, "dsync_signal", "dsync_signal_pkey",
						  Natts_signal, false);
	DsyncCatalogFillTable(DSYNC_TABLE_MEMBER, "dsync_member", "dsync_member_pkey",
						  Natts_member, false);
	dsync_catalog.fencing_seq = DsyncCatalogLookupRel("dsync_fencing_seq", namespace);
	dsync_catalog.signal_seq = get_relname_relid("dsync_signal_seq", namespace);

	/*
	 * A 1.0 installation is looked up again on every call, so that the
	 * tables ALTER EXTENSION UPDATE creates are found without a reconnect
	 * (no invalidation names relations we have not seen).
	 */
	dsync_catalog_valid = OidIsValid(dsync_catalog.rels[DSYNC_TABLE_MEMBER]) &&
		OidIsValid(dsync_catalog.signal_seq);

	return &dsync_catalog;
}

/*
 * DsyncCatalogGet
 *		The extension's objects, found from the function being called.
 */
const DsyncCatalog *
DsyncCatalogGet(FunctionCallInfo fcinfo)
{
	HeapTuple	proctup;
	Oid			namespace;

	if (dsync_catalog_valid)
		return &dsync_catalog;

	proctup = SearchSysCache1(PROCOID, ObjectIdGetDatum(fcinfo->flinfo->fn_oid));
	if (!HeapTupleIsValid(proctup))
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg_internal("cache lookup failed for function %u",
								 fcinfo->flinfo->fn_oid)));
	namespace = ((Form_pg_proc) GETSTRUCT(proctup))->pronamespace;
	ReleaseSysCache(proctup);

	return DsyncCatalogFill(namespace);
}

/*
 * DsyncCatalogExtensionSchema
 *		The schema an extension was created in (PostgreSQL 15 does not
 *		export get_extension_schema).
 */
static Oid
DsyncCatalogExtensionSchema(Oid extension)
{
	Relation	rel = table_open(ExtensionRelationId, AccessShareLock);
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tuple;
	Oid			namespace = InvalidOid;

	ScanKeyInit(&key, Anum_pg_extension_oid, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(extension));
	scan = systable_beginscan(rel, ExtensionOidIndexId, true, NULL, 1, &key);
	tuple = systable_getnext(scan);
	if (HeapTupleIsValid(tuple))
		namespace = ((Form_pg_extension) GETSTRUCT(tuple))->extnamespace;
	systable_endscan(scan);
	table_close(rel, AccessShareLock);

	if (!OidIsValid(namespace))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("extension \"dsync\" does not exist")));
	return namespace;
}

/*
 * DsyncCatalogFromExtension
 *		The extension's objects, found from pg_extension, for the reaper,
 *		which calls no SQL function to find them through.
 */
const DsyncCatalog *
DsyncCatalogFromExtension(void)
{
	Oid			extension;

	if (dsync_catalog_valid)
		return &dsync_catalog;
	extension = get_extension_oid("dsync", false);
	return DsyncCatalogFill(DsyncCatalogExtensionSchema(extension));
}
