/*-------------------------------------------------------------------------
 *
 * catalog.c
 *		Find the extension's tables and sequences in this database.
 *
 * The functions never resolve names through search_path, and never trust
 * a relation only because of its name: a relation is used only if it is a
 * member of the dsync extension (pg_depend, deptype 'e').  A role with
 * CREATE on the extension's schema can make a table called
 * dsync_semaphore in an installation that has none yet, and dsync must
 * not read its rows as semaphore definitions.  The extension itself is the
 * one the called SQL function belongs to.  The answer is cached per
 * backend and forgotten when the relcache says any of those relations
 * changed (DROP EXTENSION, ALTER ... RENAME), so the hot path costs no
 * catalog lookups at all.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/dependency.h"
#include "catalog/pg_class.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_proc.h"
#include "commands/extension.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/relcache.h"
#include "utils/syscache.h"

#include "catalog.h"
#include "compat.h"

static DsyncCatalog dsync_catalog;
static bool dsync_catalog_valid = false;
/* The extension the cache was last filled from (kept when it is invalidated). */
static Oid	dsync_filled_extension = InvalidOid;
static bool dsync_callback_registered = false;

/* Table names and their number of columns and indexes, by DsyncTable. */
static const struct
{
	const char *name;
	int			natts;
	int			nindexes;
	bool		required;
}			dsync_tables[DSYNC_NUM_TABLES] = {
	[DSYNC_TABLE_LEASE] = {"dsync_lease", Natts_lease, 1, true},
	[DSYNC_TABLE_SEMAPHORE] = {"dsync_semaphore", Natts_semaphore, 1, false},
	[DSYNC_TABLE_SIGNAL] = {"dsync_signal", Natts_signal, 1, false},
	[DSYNC_TABLE_MEMBER] = {"dsync_member", Natts_member, 1, false},
	[DSYNC_TABLE_PERMIT] = {"dsync_permit", Natts_lease, 2, false},
	[DSYNC_TABLE_FENCE] = {"dsync_fence", Natts_fence, 2, false},
};

/*
 * DsyncTableName
 *		The name of one of the extension's tables, for messages.
 */
const char *
DsyncTableName(DsyncTable table)
{
	Assert(table >= 0 && table < DSYNC_NUM_TABLES);
	return dsync_tables[table].name;
}

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
		relid == dsync_catalog.signal_seq || relid == dsync_catalog.event_seq ||
		relid == dsync_catalog.ephemeral_seq || relid == dsync_catalog.event_pruned)
		dsync_catalog_valid = false;
	for (int i = 0; i < DSYNC_NUM_TABLES; i++)
		if (relid == dsync_catalog.rels[i])
			dsync_catalog_valid = false;
}

/*
 * DsyncCatalogReportDropped
 *		The extension was dropped under a running call (typically one that
 *		was waiting): say so, rather than fail on a missing relation.
 */
void
DsyncCatalogReportDropped(void)
{
	dsync_catalog_valid = false;
	ereport(ERROR,
			(errcode(ERRCODE_UNDEFINED_OBJECT),
			 errmsg("extension \"dsync\" has been dropped from this database"),
			 errdetail("DROP EXTENSION dsync committed while this call was running.")));
}

/*
 * DsyncCatalogMember
 *		The OID of a relation of the given kind that is called relname in
 *		namespace and belongs to the extension, or InvalidOid.  A relation
 *		of that name that does not belong to the extension is ignored.
 */
static Oid
DsyncCatalogMember(const char *relname, Oid namespace, Oid extension, char relkind)
{
	Oid			relid = get_relname_relid(relname, namespace);

	if (!OidIsValid(relid) || get_rel_relkind(relid) != relkind ||
		getExtensionOfObject(RelationRelationId, relid) != extension)
		return InvalidOid;
	return relid;
}

/*
 * DsyncCatalogRequired
 *		Like DsyncCatalogMember, for an object every installation has.
 */
static Oid
DsyncCatalogRequired(const char *relname, Oid namespace, Oid extension, char relkind)
{
	Oid			relid = DsyncCatalogMember(relname, namespace, extension, relkind);

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
 *		columns and maintains only its own indexes, so an added column or
 *		index would be corrupted or overrun.  Checked when the cache is
 *		filled, which any ALTER TABLE or CREATE INDEX forces again.
 */
static void
DsyncCatalogCheckShape(DsyncTable table, Oid relid)
{
	Relation	rel = table_open(relid, AccessShareLock);
	List	   *indexes = RelationGetIndexList(rel);
	int			natts = RelationGetDescr(rel)->natts;
	bool		ok = ((natts == dsync_tables[table].natts &&
					   list_length(indexes) == dsync_tables[table].nindexes) ||
					  (table == DSYNC_TABLE_FENCE && natts == Natts_fence_1_4 &&
					   list_length(indexes) == 1)) &&
		OidIsValid(DsyncPrimaryKeyIndex(rel));

	list_free(indexes);
	table_close(rel, AccessShareLock);
	if (!ok)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("dsync table \"%s\" has been altered", dsync_tables[table].name),
				 errdetail("It must have exactly its original columns and indexes."),
				 errhint("Drop what was added, or reinstall the extension with DROP EXTENSION dsync; CREATE EXTENSION dsync.")));
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
		DsyncCatalogReportDropped();
	return namespace;
}

/*
 * DsyncCatalogFill
 *		Look up the extension's objects and cache them.
 */
static const DsyncCatalog *
DsyncCatalogFill(Oid extension)
{
	Oid			namespace;

	if (!dsync_callback_registered)
	{
		CacheRegisterRelcacheCallback(DsyncCatalogInvalidate, (Datum) 0);
		dsync_callback_registered = true;
	}
	namespace = DsyncCatalogExtensionSchema(extension);
	memset(&dsync_catalog, 0, sizeof(dsync_catalog));
	dsync_catalog.extension = extension;
	dsync_catalog.namespace = namespace;
	dsync_filled_extension = extension;
	for (int i = 0; i < DSYNC_NUM_TABLES; i++)
	{
		Oid			relid;

		if (dsync_tables[i].required)
			relid = DsyncCatalogRequired(dsync_tables[i].name, namespace, extension,
										 RELKIND_RELATION);
		else
			relid = DsyncCatalogMember(dsync_tables[i].name, namespace, extension,
									   RELKIND_RELATION);
		if (OidIsValid(relid))
			DsyncCatalogCheckShape(i, relid);
		dsync_catalog.rels[i] = relid;
		/* A 1.4 dsync_fence, until ALTER EXTENSION UPDATE adds relid and lease. */
		if (i == DSYNC_TABLE_FENCE && OidIsValid(relid))
			dsync_catalog.fence_relid = get_attnum(relid, "relid") == Anum_fence_relid &&
				get_attnum(relid, "lease") == Anum_fence_lease;
	}
	dsync_catalog.fencing_seq = DsyncCatalogRequired("dsync_fencing_seq", namespace,
													 extension, RELKIND_SEQUENCE);
	dsync_catalog.signal_seq = DsyncCatalogMember("dsync_signal_seq", namespace,
												  extension, RELKIND_SEQUENCE);
	dsync_catalog.event_seq = DsyncCatalogMember("dsync_event_seq", namespace,
												 extension, RELKIND_SEQUENCE);
	dsync_catalog.event_log = DsyncCatalogMember("dsync_event_log", namespace,
												 extension, RELKIND_RELATION);
	dsync_catalog.ephemeral_seq = DsyncCatalogMember("dsync_ephemeral_seq", namespace,
													 extension, RELKIND_SEQUENCE);
	dsync_catalog.event_pruned = DsyncCatalogMember("dsync_event_pruned", namespace,
													extension, RELKIND_SEQUENCE);

	/*
	 * An installation not yet updated is looked up again on every call, so
	 * that the objects ALTER EXTENSION UPDATE creates are found without a
	 * reconnect (no invalidation names relations we have not seen).
	 */
	dsync_catalog_valid = OidIsValid(dsync_catalog.rels[DSYNC_TABLE_PERMIT]) &&
		OidIsValid(dsync_catalog.rels[DSYNC_TABLE_MEMBER]) &&
		OidIsValid(dsync_catalog.rels[DSYNC_TABLE_FENCE]) && dsync_catalog.fence_relid &&
		OidIsValid(dsync_catalog.signal_seq) && OidIsValid(dsync_catalog.event_seq) &&
		OidIsValid(dsync_catalog.event_log) && OidIsValid(dsync_catalog.ephemeral_seq) &&
		OidIsValid(dsync_catalog.event_pruned);

	return &dsync_catalog;
}

/*
 * DsyncCatalogAfterUpdate
 *		The objects of the extension the cache was last filled from, for a
 *		call whose function vanished while it ran: if that extension is
 *		still installed, ALTER EXTENSION UPDATE replaced the function and
 *		the call goes on (a waiter keeps waiting, and is granted after the
 *		update); if not, DROP EXTENSION ran, and the call says so.
 */
static const DsyncCatalog *
DsyncCatalogAfterUpdate(void)
{
	Oid			extension = get_extension_oid("dsync", true);

	if (!OidIsValid(extension) || extension != dsync_filled_extension)
		DsyncCatalogReportDropped();
	return DsyncCatalogFill(extension);
}

/*
 * DsyncCatalogGet
 *		The extension's objects, found from the function being called: the
 *		extension it belongs to.
 */
const DsyncCatalog *
DsyncCatalogGet(FunctionCallInfo fcinfo)
{
	Oid			fn = fcinfo->flinfo->fn_oid;
	Oid			extension;
	char	   *name;

	if (dsync_catalog_valid)
		return &dsync_catalog;

	/*
	 * The function is gone: ALTER EXTENSION dsync UPDATE replaced it (a
	 * new OID) while this call was waiting, or DROP EXTENSION ran.
	 */
	if (!SearchSysCacheExists1(PROCOID, ObjectIdGetDatum(fn)))
		return DsyncCatalogAfterUpdate();
	extension = getExtensionOfObject(ProcedureRelationId, fn);
	if (!OidIsValid(extension) || extension != get_extension_oid("dsync", true))
	{
		name = get_func_name(fn);
		if (name == NULL)
			return DsyncCatalogAfterUpdate();	/* gone since the look above */
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("function %s is not part of extension \"dsync\"", name),
				 errhint("Call the functions that CREATE EXTENSION dsync created.")));
	}
	return DsyncCatalogFill(extension);
}

/*
 * DsyncCatalogFromExtension
 *		The extension's objects, found from pg_extension, for the reaper
 *		and the utility hooks, which call no SQL function to find them
 *		through.
 */
const DsyncCatalog *
DsyncCatalogFromExtension(void)
{
	if (dsync_catalog_valid)
		return &dsync_catalog;
	return DsyncCatalogFill(get_extension_oid("dsync", false));
}

/*
 * DsyncCatalogTry
 *		The extension's objects for hooks that run inside other statements
 *		(a DROP, a DETACH): NULL, rather than an error, if the extension is
 *		not installed here or the objects they need are gone already (DROP
 *		SCHEMA ... CASCADE takes the extension's tables with the user's).
 */
const DsyncCatalog *
DsyncCatalogTry(void)
{
	Oid			extension = get_extension_oid("dsync", true);
	Oid			namespace;

	if (!OidIsValid(extension))
		return NULL;
	if (dsync_catalog_valid && dsync_catalog.extension == extension)
		return &dsync_catalog;
	namespace = DsyncCatalogExtensionSchema(extension);
	if (!OidIsValid(DsyncCatalogMember("dsync_lease", namespace, extension, RELKIND_RELATION)) ||
		!OidIsValid(DsyncCatalogMember("dsync_fence", namespace, extension, RELKIND_RELATION)) ||
		!OidIsValid(DsyncCatalogMember("dsync_fencing_seq", namespace, extension, RELKIND_SEQUENCE)))
		return NULL;
	return DsyncCatalogFill(extension);
}

/*
 * DsyncCatalogRequire
 *		Error out if the installed version lacks a table a function needs.
 */
void
DsyncCatalogRequire(const DsyncCatalog *catalog, DsyncTable table)
{
	if (!OidIsValid(catalog->rels[table]))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the installed version of extension \"dsync\" has no table \"%s\"",
						dsync_tables[table].name),
				 errhint("Run ALTER EXTENSION dsync UPDATE.")));
}
