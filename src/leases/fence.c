/*-------------------------------------------------------------------------
 *
 * fence.c
 *		Storage-side fencing: the database refuses a write that carries an
 *		older fencing token than one it already accepted.
 *
 * A fencing token only protects data if whatever stores the data checks
 * it; lock services hand that check back to their users.  Here the data
 * is next to the lock, so the check is a row: dsync_fence keeps, per
 * resource, the greatest token accepted (its mark), and a writer whose
 * token is older gets SQLSTATE 55000.  The trigger function dsync_fenced
 * does the same for every row written to a table, with the table as the
 * resource ("table:" and its name: a space no other call can claim), so
 * that a stale writer (a holder paused past its ttl, or cut
 * off and replaced) is refused by the database itself.
 *
 * The mark's row is locked until the caller's transaction ends, so writers
 * of one resource are serialised: a second writer waits for the first and
 * then compares against what it committed (or, after a rollback, against
 * the mark from before).  Rows are read as of the latest committed state
 * (scan.c), so a REPEATABLE READ or SERIALIZABLE caller is refused or let
 * through on what is committed now, never on its snapshot, and dsync raises
 * no serialization failure of its own.  Like every dsync row, a mark
 * belongs to the role that first set it: another role may not move it.
 * A table's mark belongs to the table: any role that may write the table
 * moves it, through the trigger or dsync_fence, and no other role can.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "common/hashfn.h"
#include "catalog/namespace.h"
#include "catalog/partition.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/regproc.h"
#include "utils/rel.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "args.h"
#include "catalog.h"
#include "fence.h"
#include "fencing.h"
#include "store.h"
#include "boundmap.h"

PG_FUNCTION_INFO_V1(dsync_fence);
PG_FUNCTION_INFO_V1(dsync_fenced);

/*
 * DsyncFenceFind
 *		A resource's mark row, as of the latest committed state, or NULL.
 */
DsyncRow *
DsyncFenceFind(DsyncStore *store, text *resource)
{
	DsyncScan  *scan = DsyncScanName(store, resource);
	DsyncRow   *row = DsyncScanNext(scan);

	DsyncScanEnd(scan);
	return row;
}

/*
 * DsyncFenceStale
 *		Refuse a token older than the resource's mark.
 */
void
DsyncFenceStale(const char *resource, int64 token, int64 mark)
{
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("stale fencing token for resource \"%s\"", resource),
			 errdetail("Token " INT64_FORMAT " is older than token " INT64_FORMAT
					   ", already accepted.", token, mark),
			 errhint("The lease this token came with was lost; acquire it again before writing.")));
}

/* The prefix of a table's resource name: table marks are a space of their own. */
#define FENCE_TABLE_PREFIX	"table:"

/* Lock class of a resource's turnstile (see DsyncFenceTurnstile). */
#define DSYNC_FENCE_LOCK_CLASS	0x6481

/*
 * DsyncFenceTurnstile
 *		Queue for a resource's turnstile: a heavyweight lock on the
 *		resource's name, held until this transaction ends.  Writers with
 *		the mark's own token take it in ShareLock, writers that raise the
 *		mark (or make it) in ExclusiveLock, and so do grants and binds
 *		(fencebind.c).  With nowait, false if it is not to be had at once.
 *
 * Row locks alone let a newer token wait for ever: new share lockers of a
 * row join its lockers without looking at who waits for it, so a steady
 * stream of writers of the old token keeps a raiser out.  The lock manager
 * queues instead: a ShareLock request that conflicts with a waiting
 * ExclusiveLock waits behind it, so once a newer token waits, writers of
 * the older one that come later wait for it, and are then refused.  A
 * writer that holds the turnstile already (a second row, the same
 * transaction) gets it again at once, without queueing behind anyone.
 * The name is hashed to 64 bits with the table's OID as seed; two
 * resources sharing a turnstile would only wait for each other.
 */
bool
DsyncFenceTurnstile(const DsyncCatalog *catalog, text *resource, LOCKMODE mode, bool nowait)
{
	LOCKTAG		tag;
	uint64		hash;

	hash = hash_bytes_extended((const unsigned char *) VARDATA_ANY(resource),
							   VARSIZE_ANY_EXHDR(resource),
							   catalog->rels[DSYNC_TABLE_FENCE]);
	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, (uint32) (hash >> 32), (uint32) hash,
						 DSYNC_FENCE_LOCK_CLASS);
	return LockAcquire(&tag, mode, false, nowait) != LOCKACQUIRE_NOT_AVAIL;
}

/*
 * DsyncFenceForeign
 *		Whether a table's mark row was made for another table: one that had
 *		the same name before (dropped, or renamed since).  Such a mark is
 *		no guard of this table's data, and taking it over would let whoever
 *		made that table set this one's mark: it is replaced.
 */
bool
DsyncFenceForeign(const DsyncCatalog *catalog, const DsyncRow *row, Oid relid)
{
	if (!OidIsValid(relid) || !catalog->fence_relid)
		return false;
	return row->nulls[Anum_fence_relid - 1] ||
		DatumGetObjectId(row->values[Anum_fence_relid - 1]) != relid;
}

/*
 * FenceStaleGranted
 *		Refuse a token older than one the lease of the resource's name has
 *		been granted with, when the resource's first mark is made: that
 *		grant would have raised the mark had there been one
 *		(fencebind.c).
 */
static void
FenceStaleGranted(text *resource, int64 token, int64 granted)
{
	char	   *name = text_to_cstring(resource);

	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("stale fencing token for resource \"%s\"", name),
			 errdetail("Token " INT64_FORMAT " is older than token " INT64_FORMAT
					   ", which lease \"%s\" has been granted with.", token, granted, name),
			 errhint("The lease this token came with was lost; acquire it again before writing.")));
}

/*
 * DsyncFenceNamedLike
 *		Whether a resource of this name is bound to the lease of the same
 *		name without a binding: any resource but a table's.  A table's mark
 *		is moved only by roles that may write the table; a lease named
 *		"table:..." may be taken by any role, which must not move it.
 */
bool
DsyncFenceNamedLike(text *name)
{
	return VARSIZE_ANY_EXHDR(name) < strlen(FENCE_TABLE_PREFIX) ||
		strncmp(VARDATA_ANY(name), FENCE_TABLE_PREFIX, strlen(FENCE_TABLE_PREFIX)) != 0;
}

/*
 * FenceMakeMark
 *		Make a resource's first mark, token, with its key claimed: noted in
 *		the bound map before it is written (boundmap.c), and raised to the
 *		newest grant of the lease named like the resource, which is bound
 *		to it (unless it is a table's, DsyncFenceNamedLike): a token older
 *		than that is refused (unless at_least), as it would have been had
 *		the mark been there when the lease moved.  The grants are looked at
 *		once the row is written, so that a grant that missed the row has
 *		been made by then (fencebind.c).
 */
static void
FenceMakeMark(DsyncStore *store, text *resource, int64 token, Oid new_owner, Oid relid,
			  bool at_least)
{
	DsyncRow   *row = DsyncStoreNewRow();
	int64		granted;

	DsyncBoundMapSet(resource);
	DsyncRowSet(row, Anum_fence_resource, PointerGetDatum(resource));
	DsyncRowSet(row, Anum_fence_token, Int64GetDatum(token));
	DsyncRowSet(row, Anum_fence_fenced_at, TimestampTzGetDatum(GetCurrentTimestamp()));
	DsyncRowSet(row, Anum_fence_owner, ObjectIdGetDatum(new_owner));
	if (OidIsValid(relid))
		DsyncRowSet(row, Anum_fence_relid, ObjectIdGetDatum(relid));
	DsyncStoreInsert(store, row);
	DsyncStoreUnclaimKey(store, resource, (Datum) 0);
	if (!DsyncFenceNamedLike(resource))
		return;
	pg_memory_barrier();
	granted = DsyncFenceLeaseToken(store->catalog, resource);
	if (granted > token)
	{
		if (!at_least)
			FenceStaleGranted(resource, token, granted);
		DsyncRowSet(row, Anum_fence_token, Int64GetDatum(granted));
		DsyncStoreUpdate(store, row);
	}
}

/*
 * DsyncFenceApply
 *		Check token against the resource's mark and raise the mark to it,
 *		holding the mark until this transaction ends.  Returns the previous
 *		mark, or -1 if the resource had none.
 *
 * A writer with the mark's own token (the current holder, writing again)
 * shares the mark, so that writers of one holder never wait for one
 * another, nor deadlock through the rows a fenced table's trigger has
 * locked already; raising the mark takes it alone, which waits for every
 * writer of the resource and keeps later writers of the older token
 * behind it (DsyncFenceTurnstile).  A token below the committed mark is refused
 * at once: marks never go down.
 *
 * check_owner: a direct call must come from a role with the privileges of
 * the mark's owner; a table's mark is for whoever may write the table
 * (checked by the caller).  new_owner owns a mark made now.  relid: the
 * table whose mark this is, or InvalidOid for any other resource.
 * at_least: a token below the mark is no error; the mark stays (for
 * carrying a mark over, fence_ddl.c).
 */
int64
DsyncFenceApply(const DsyncCatalog *catalog, text *resource, int64 token,
				bool check_owner, Oid new_owner, Oid relid, bool at_least)
{
	DsyncStore	store;
	DsyncRow   *row;
	int64		mark;
	LOCKMODE	held = NoLock;

	DsyncStoreOpenCatalog(&store, catalog, DSYNC_TABLE_FENCE, true);
	for (;;)
	{
		LOCKMODE	need;
		bool		foreign = false;

		row = DsyncFenceFind(&store, resource);
		if (row != NULL && check_owner && !DsyncRowOwnerIsCaller(row, Anum_fence_owner))
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("permission denied for fence \"%s\"", text_to_cstring(resource)),
					 errdetail("Only roles with the privileges of role \"%s\", which set it first, may move it.",
							   GetUserNameFromId(DatumGetObjectId(row->values[Anum_fence_owner - 1]),
												 true) ?: "?")));
		if (row != NULL)
		{
			foreign = DsyncFenceForeign(catalog, row, relid);
			mark = DatumGetInt64(row->values[Anum_fence_token - 1]);
			if (!foreign && token < mark)
			{
				if (at_least)
					break;
				DsyncFenceStale(text_to_cstring(resource), token, mark);
			}
			need = (foreign || token > mark) ? ExclusiveLock : ShareLock;
		}
		else
			need = ExclusiveLock;

		/*
		 * Queue first.  What was read may have changed while this writer
		 * waited: with no row, look again; a row's lock below reports a
		 * change (TM_Updated, TM_Deleted) and reloads it.
		 */
		if (need > held)
		{
			(void) DsyncFenceTurnstile(catalog, resource, need, false);
			held = need;
			if (row == NULL)
				continue;
		}

		if (row == NULL)
		{
			/* Concurrent first fencers are serialised by the key's claim. */
			if (DsyncStoreClaimKey(&store, resource, (Datum) 0, true) != DSYNC_CLAIM_OK)
				continue;
			FenceMakeMark(&store, resource, token, new_owner, relid, at_least);
			DsyncStoreClose(&store);
			return -1;
		}
		/* Waits for writers of the resource that conflict; then look again. */
		if (DsyncStoreLock(&store, row, need == ShareLock ? LockTupleShare : LockTupleNoKeyExclusive,
						   LockWaitBlock) != TM_Ok)
			continue;
		if (DsyncFenceForeign(catalog, row, relid) != foreign)
			continue;
		mark = DatumGetInt64(row->values[Anum_fence_token - 1]);
		if (foreign)
		{
			/* Another table's mark, and binding: this table's start now. */
			DsyncRowSet(row, Anum_fence_token, Int64GetDatum(token));
			DsyncRowSet(row, Anum_fence_fenced_at, TimestampTzGetDatum(GetCurrentTimestamp()));
			DsyncRowSet(row, Anum_fence_owner, ObjectIdGetDatum(new_owner));
			DsyncRowSet(row, Anum_fence_relid, ObjectIdGetDatum(relid));
			row->nulls[Anum_fence_lease - 1] = true;
			DsyncStoreUpdate(&store, row);
			mark = -1;
			break;
		}
		if (token < mark)
		{
			if (at_least)
				break;
			DsyncFenceStale(text_to_cstring(resource), token, mark);
		}
		if (token > mark && need == ShareLock)
			continue;			/* cannot be: marks never go down */
		if (token > mark)
		{
			DsyncRowSet(row, Anum_fence_token, Int64GetDatum(token));
			DsyncRowSet(row, Anum_fence_fenced_at, TimestampTzGetDatum(GetCurrentTimestamp()));
			DsyncStoreUpdate(&store, row);
		}
		break;
	}
	DsyncStoreClose(&store);
	return mark;
}

/*
 * FenceCheckToken
 *		A token, from an argument or a column (named in the messages by
 *		the caller): positive, as dsync's tokens are, and one this database
 *		has issued.  A greater one would set a mark that no lease granted
 *		for a long while could pass: anybody allowed to fence a resource
 *		could keep its rightful holders out with it.
 */
static int64
FenceCheckToken(const DsyncCatalog *catalog, int64 token, const char *what)
{
	if (token <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be positive", what),
				 errdetail("The value is " INT64_FORMAT ".", token)));
	if (!DsyncFencingIssued(catalog, token))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s is greater than every fencing token this database has issued", what),
				 errdetail("The value is " INT64_FORMAT ".", token),
				 errhint("Pass a token dsync_acquire() returned in this database.")));
	return token;
}

/*
 * FenceRelOwner
 *		The owner of a relation the caller has locked (DsyncFenceTableRoot), so
 *		that it cannot be dropped meanwhile; reported as missing all the
 *		same if it is not there.
 */
static Oid
FenceRelOwner(Oid relid)
{
	HeapTuple	tuple = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	Oid			owner;

	if (!HeapTupleIsValid(tuple))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("fenced table with OID %u does not exist", relid),
				 errdetail("It was dropped while its mark was being moved.")));
	owner = ((Form_pg_class) GETSTRUCT(tuple))->relowner;
	ReleaseSysCache(tuple);
	return owner;
}


/*
 * DsyncFenceTableRoot
 *		The table whose mark guards rel: rel itself, or for a partition its
 *		partitioned root, so that every partition's writers share one mark.
 */
Oid
DsyncFenceTableRoot(Oid relid)
{
	if (get_rel_relispartition(relid))
	{
		List	   *ancestors = get_partition_ancestors(relid);

		relid = llast_oid(ancestors);
		list_free(ancestors);

		/*
		 * Its name and owner are read next: keep it from being dropped
		 * meanwhile, as the partition is (by the writer, or our caller).
		 */
		LockRelationOid(relid, AccessShareLock);
	}
	return relid;
}

/*
 * DsyncFenceResourceOf
 *		The resource name of a table's own mark: "table:" and its
 *		schema-qualified name, as a user would write it.  NULL if that is
 *		too long to be a name, when missing_ok; else an error.
 */
text *
DsyncFenceResourceOf(Oid relid, bool missing_ok)
{
	char	   *name = psprintf(FENCE_TABLE_PREFIX "%s",
								quote_qualified_identifier(get_namespace_name(get_rel_namespace(relid)),
														   get_rel_name(relid)));

	if (strlen(name) > DSYNC_NAME_MAX_BYTES)
	{
		if (missing_ok)
			return NULL;
		ereport(ERROR,
				(errcode(ERRCODE_NAME_TOO_LONG),
				 errmsg("fence resource \"%s\" of table \"%s\" is longer than %d bytes",
						name, get_rel_name(relid), DSYNC_NAME_MAX_BYTES)));
	}
	return cstring_to_text(name);
}

/*
 * DsyncFenceTableResource
 *		The resource name of a fenced table: its root's (DsyncFenceResourceOf).
 *		A rename starts a new mark (documented).
 */
text *
DsyncFenceTableResource(Oid relid)
{
	return DsyncFenceResourceOf(DsyncFenceTableRoot(relid), false);
}

/*
 * DsyncFenceCarry
 *		Raise table to's own mark to at least table from's: for a partition
 *		detached from the partitioned table from, whose mark guarded its
 *		writers until now, so that a token from's mark refuses is refused
 *		by the detached table too.  Writers raising from's mark are waited
 *		for, and new ones kept out until this transaction ends (the
 *		turnstile, shared), so the mark carried is the latest one.  The
 *		caller has locked both tables.
 */
void
DsyncFenceCarry(const DsyncCatalog *catalog, Oid from, Oid to)
{
	text	   *from_resource = DsyncFenceResourceOf(from, true);
	DsyncStore	store;
	DsyncRow   *row;
	int64		mark;

	if (from_resource == NULL)
		return;
	(void) DsyncFenceTurnstile(catalog, from_resource, ShareLock, false);
	DsyncStoreOpenCatalog(&store, catalog, DSYNC_TABLE_FENCE, false);
	row = DsyncFenceFind(&store, from_resource);
	DsyncStoreClose(&store);
	if (row == NULL || DsyncFenceForeign(catalog, row, from))
		return;
	mark = DatumGetInt64(row->values[Anum_fence_token - 1]);
	(void) DsyncFenceApply(catalog, DsyncFenceResourceOf(to, false), mark, false,
						   FenceRelOwner(to), to, true);
}

/*
 * DsyncFenceRelkindOk
 *		Whether a relation of this kind can have a table's mark: one rows
 *		are written to (a trigger can fence them) and whose mark is removed
 *		when it is dropped (fenceddl.c).
 */
bool
DsyncFenceRelkindOk(char relkind)
{
	return relkind == RELKIND_RELATION || relkind == RELKIND_PARTITIONED_TABLE ||
		relkind == RELKIND_FOREIGN_TABLE;
}

/*
 * FenceRelkindName
 *		What a relation that is no table is, for a message.
 */
static const char *
FenceRelkindName(char relkind)
{
	switch (relkind)
	{
		case RELKIND_VIEW:
			return "a view";
		case RELKIND_MATVIEW:
			return "a materialized view";
		case RELKIND_SEQUENCE:
			return "a sequence";
		case RELKIND_INDEX:
		case RELKIND_PARTITIONED_INDEX:
			return "an index";
		case RELKIND_COMPOSITE_TYPE:
			return "a composite type";
		case RELKIND_TOASTVALUE:
			return "a TOAST table";
		default:
			return "not a table";
	}
}

/*
 * FenceTableOfResource
 *		For dsync_fence on a table's resource ("table:name"): the table, which
 *		the caller must be allowed to write (INSERT or UPDATE), as the
 *		trigger's callers are.  InvalidOid for any other resource.  So no
 *		role can poison a table's mark without writing to the table.
 */
static Oid
FenceTableOfResource(text *resource)
{
	char	   *name = text_to_cstring(resource);
	List	   *names;
	Oid			relid;

	if (strncmp(name, FENCE_TABLE_PREFIX, strlen(FENCE_TABLE_PREFIX)) != 0)
		return InvalidOid;
	names = DsyncQualifiedNameList(name + strlen(FENCE_TABLE_PREFIX));
	/* Locked, as a write would lock it: no DROP between here and the mark. */
	relid = RangeVarGetRelid(makeRangeVarFromNameList(names), AccessShareLock, true);
	if (!OidIsValid(relid))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("table \"%s\" of fence resource \"%s\" does not exist",
						name + strlen(FENCE_TABLE_PREFIX), name),
				 errhint("Resources that begin with \"" FENCE_TABLE_PREFIX "\" are the marks of fenced tables.")));
	if (!DsyncFenceRelkindOk(get_rel_relkind(relid)))
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("fence resource \"%s\" does not name a table", name),
				 errdetail("\"%s\" is %s.", name + strlen(FENCE_TABLE_PREFIX),
						   FenceRelkindName(get_rel_relkind(relid))),
				 errhint("Resources that begin with \"" FENCE_TABLE_PREFIX "\" are the marks of tables, partitioned tables and foreign tables.")));
	if (pg_class_aclmask(relid, GetUserId(), ACL_INSERT | ACL_UPDATE, ACLMASK_ANY) == 0 &&
		pg_attribute_aclcheck_all(relid, GetUserId(), ACL_INSERT | ACL_UPDATE,
								  ACLMASK_ANY) != ACLCHECK_OK)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for fence \"%s\"", name),
				 errdetail("Moving a table's mark takes INSERT or UPDATE privilege on the table or one of its columns.")));
	if (DsyncFenceTableRoot(relid) != relid)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("fence resource \"%s\" names a partition", name),
				 errhint("A partitioned table's writes share its root's mark: fence \"" FENCE_TABLE_PREFIX "%s\".",
						 get_rel_name(DsyncFenceTableRoot(relid)))));
	return relid;
}

/*
 * DsyncFenceTableOf
 *		For a call naming a resource: the table it names, if it is a
 *		table's resource ("table:" and a table the caller may write), else
 *		InvalidOid; *resource becomes the table's mark's name however the
 *		table was spelled, and *owner the role that owns a mark made now
 *		(the table's owner, else the caller).
 */
Oid
DsyncFenceTableOf(text **resource, Oid *owner)
{
	Oid			table = FenceTableOfResource(*resource);

	*owner = GetUserId();
	if (OidIsValid(table))
	{
		*resource = DsyncFenceTableResource(table);
		*owner = FenceRelOwner(table);
	}
	return table;
}

/*
 * dsync_fence
 *		SQL: dsync_fence(resource, token) RETURNS bigint
 *
 * Returns the previous mark (NULL if none); raises SQLSTATE 55000 if a
 * greater token was already accepted for the resource.  A fenced table's
 * mark ("table:" and its name) may be moved here too, by roles that may
 * write the table: to guard a delete, which carries no token.
 */
Datum
dsync_fence(PG_FUNCTION_ARGS)
{
	text	   *resource = DsyncArgName(fcinfo, 0, "resource");
	int64		token;
	int64		previous;
	Oid			table;
	Oid			owner;
	const DsyncCatalog *catalog;

	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("argument \"token\" must not be null"),
				 errhint("Pass the fencing token dsync_acquire() returned.")));
	DsyncPreventWrite("dsync_fence()");
	catalog = DsyncCatalogGet(fcinfo);
	token = FenceCheckToken(catalog, PG_GETARG_INT64(1), "argument \"token\"");
	table = DsyncFenceTableOf(&resource, &owner);
	previous = DsyncFenceApply(catalog, resource, token, !OidIsValid(table), owner,
							   table, false);
	if (previous < 0)
		PG_RETURN_NULL();
	PG_RETURN_INT64(previous);
}

/*
 * FenceTriggerToken
 *		The token the row being written carries, from the column named by
 *		the trigger's argument.
 */
static int64
FenceTriggerToken(const DsyncCatalog *catalog, TriggerData *trigdata, HeapTuple tuple)
{
	Relation	rel = trigdata->tg_relation;
	Trigger    *trigger = trigdata->tg_trigger;
	TupleDesc	desc = RelationGetDescr(rel);
	const char *column;
	int			attnum;
	Oid			type;
	Datum		value;
	bool		isnull;

	if (trigger->tgnargs != 1 && trigger->tgnargs != 2)
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("trigger \"%s\" must pass dsync_fenced() the token column and, optionally, a lease",
						trigger->tgname),
				 errhint("Use EXECUTE FUNCTION dsync_fenced('token_column') or dsync_fenced('token_column', 'lease').")));
	column = trigger->tgargs[0];
	attnum = SPI_fnumber(desc, column);
	if (attnum <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_COLUMN),
				 errmsg("token column \"%s\" of trigger \"%s\" does not exist in table \"%s\"",
						column, trigger->tgname, RelationGetRelationName(rel))));
	type = TupleDescAttr(desc, attnum - 1)->atttypid;
	if (type != INT8OID && type != INT4OID)
		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("token column \"%s\" of table \"%s\" must be of type bigint or integer",
						column, RelationGetRelationName(rel)),
				 errdetail("It is of type %s.", format_type_be(type))));
	value = heap_getattr(tuple, attnum, desc, &isnull);
	if (isnull)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("token column \"%s\" of table \"%s\" must not be null",
						column, RelationGetRelationName(rel)),
				 errdetail("Rows of a fenced table carry the fencing token of the lease they are written under."),
				 errhint("Set it to the token dsync_acquire() returned.")));
	return FenceCheckToken(catalog, type == INT8OID ? DatumGetInt64(value) : DatumGetInt32(value),
						   psprintf("token column \"%s\"", column));
}

/*
 * dsync_fenced
 *		Trigger: BEFORE INSERT OR UPDATE ... FOR EACH ROW EXECUTE FUNCTION
 *		dsync_fenced('token_column' [, 'lease']).
 *
 * Each row written must carry a token no older than the table's mark (its
 * partitioned root's, for a partition); the mark rises to it.  Deletes
 * carry no token and are not fenced: guard them with dsync_assert_held(),
 * or dsync_fence('table:name', token), in the same transaction.  A lease
 * given as second argument is bound to the table when the trigger is
 * created (DsyncFenceAfterCreateTrigger, fenceddl.c); firing ignores it.
 */
Datum
dsync_fenced(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	HeapTuple	tuple;
	const DsyncCatalog *catalog;
	Oid			root;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("dsync_fenced() must be called as a trigger"),
				 errhint("Use CREATE TRIGGER ... BEFORE INSERT OR UPDATE ON table "
						 "FOR EACH ROW EXECUTE FUNCTION dsync_fenced('token_column').")));
	if (!TRIGGER_FIRED_BEFORE(trigdata->tg_event) || !TRIGGER_FIRED_FOR_ROW(trigdata->tg_event) ||
		!(TRIGGER_FIRED_BY_INSERT(trigdata->tg_event) || TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event)))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("trigger \"%s\" must be fired BEFORE INSERT OR UPDATE FOR EACH ROW",
						trigdata->tg_trigger->tgname),
				 errdetail("dsync_fenced() checks the token of each row written; a delete carries none.")));

	tuple = TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event) ?
		trigdata->tg_newtuple : trigdata->tg_trigtuple;

	DsyncPreventWrite("dsync_fenced()");
	catalog = DsyncCatalogGet(fcinfo);
	root = DsyncFenceTableRoot(RelationGetRelid(trigdata->tg_relation));
	(void) DsyncFenceApply(catalog, DsyncFenceTableResource(root),
						   FenceTriggerToken(catalog, trigdata, tuple),
						   false, FenceRelOwner(root), root, false);
	return PointerGetDatum(tuple);
}
