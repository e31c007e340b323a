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
#include "store.h"

PG_FUNCTION_INFO_V1(dsync_fence);
PG_FUNCTION_INFO_V1(dsync_fenced);

/*
 * FenceFind
 *		A resource's mark row, as of the latest committed state, or NULL.
 */
static DsyncRow *
FenceFind(DsyncStore *store, text *resource)
{
	DsyncScan  *scan = DsyncScanName(store, resource);
	DsyncRow   *row = DsyncScanNext(scan);

	DsyncScanEnd(scan);
	return row;
}

/*
 * FenceStale
 *		Refuse a token older than the resource's mark.
 */
static void
FenceStale(const char *resource, int64 token, int64 mark)
{
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("stale fencing token for resource \"%s\"", resource),
			 errdetail("Token " INT64_FORMAT " is older than token " INT64_FORMAT
					   ", already accepted.", token, mark),
			 errhint("The lease this token came with was lost; acquire it again before writing.")));
}

/*
 * FenceApply
 *		Check token against the resource's mark and raise the mark to it,
 *		holding the mark's row until this transaction ends.  Returns the
 *		previous mark, or -1 if the resource had none.
 *
 * A writer with the mark's own token (the current holder, writing again)
 * takes a share lock, so that writers of one holder never wait for one
 * another, nor deadlock through the rows a fenced table's trigger has
 * locked already; raising the mark takes an exclusive lock, which waits
 * for every writer of the resource.  A token below the committed mark is
 * refused at once: marks never go down.
 *
 * check_owner: a direct call must come from a role with the privileges of
 * the mark's owner; a table's mark is for whoever may write the table
 * (checked by the caller).  new_owner owns a mark made now.
 */
static int64
FenceApply(const DsyncCatalog *catalog, text *resource, int64 token,
		   bool check_owner, Oid new_owner)
{
	DsyncStore	store;
	DsyncRow   *row;
	int64		mark;

	DsyncStoreOpenCatalog(&store, catalog, DSYNC_TABLE_FENCE, true);
	for (;;)
	{
		row = FenceFind(&store, resource);
		if (row == NULL)
		{
			/* Concurrent first fencers are serialised by the key's claim. */
			if (DsyncStoreClaimKey(&store, resource, (Datum) 0, true) != DSYNC_CLAIM_OK)
				continue;
			row = DsyncStoreNewRow();
			DsyncRowSet(row, Anum_fence_resource, PointerGetDatum(resource));
			DsyncRowSet(row, Anum_fence_token, Int64GetDatum(token));
			DsyncRowSet(row, Anum_fence_fenced_at,
						TimestampTzGetDatum(GetCurrentTimestamp()));
			DsyncRowSet(row, Anum_fence_owner, ObjectIdGetDatum(new_owner));
			DsyncStoreInsert(&store, row);
			DsyncStoreUnclaimKey(&store, resource, (Datum) 0);
			DsyncStoreClose(&store);
			return -1;
		}
		if (check_owner && !DsyncRowOwnerIsCaller(row, Anum_fence_owner))
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("permission denied for fence \"%s\"", text_to_cstring(resource)),
					 errdetail("Only roles with the privileges of role \"%s\", which set it first, may move it.",
							   GetUserNameFromId(DatumGetObjectId(row->values[Anum_fence_owner - 1]),
												 true) ?: "?")));
		mark = DatumGetInt64(row->values[Anum_fence_token - 1]);
		if (token < mark)
			FenceStale(text_to_cstring(resource), token, mark);
		/* Waits for writers of the resource that conflict; then look again. */
		if (DsyncStoreLock(&store, row, token == mark ? LockTupleShare : LockTupleNoKeyExclusive,
						   LockWaitBlock) != TM_Ok)
			continue;
		mark = DatumGetInt64(row->values[Anum_fence_token - 1]);
		if (token < mark)
			FenceStale(text_to_cstring(resource), token, mark);
		/* A share lock was taken only for token == mark, which marks never go below. */
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
 *		the caller): positive, as dsync's tokens are.
 */
static int64
FenceCheckToken(int64 token, const char *what)
{
	if (token <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be positive", what),
				 errdetail("The value is " INT64_FORMAT ".", token)));
	return token;
}

/*
 * FenceRelOwner
 *		The owner of a relation the caller has locked (FenceTableRoot), so
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

/* The prefix of a table's resource name: table marks are a space of their own. */
#define FENCE_TABLE_PREFIX	"table:"

/*
 * FenceTableRoot
 *		The table whose mark guards rel: rel itself, or for a partition its
 *		partitioned root, so that every partition's writers share one mark.
 */
static Oid
FenceTableRoot(Oid relid)
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
 * FenceTableResource
 *		The resource name of a fenced table: "table:" and its root's
 *		schema-qualified name, as a user would write it.  A rename starts a
 *		new mark (documented).
 */
static text *
FenceTableResource(Oid relid)
{
	Oid			root = FenceTableRoot(relid);
	char	   *name = psprintf(FENCE_TABLE_PREFIX "%s",
								quote_qualified_identifier(get_namespace_name(get_rel_namespace(root)),
														   get_rel_name(root)));

	if (strlen(name) > DSYNC_NAME_MAX_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_NAME_TOO_LONG),
				 errmsg("fence resource \"%s\" of table \"%s\" is longer than %d bytes",
						name, get_rel_name(relid), DSYNC_NAME_MAX_BYTES)));
	return cstring_to_text(name);
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
	if (pg_class_aclmask(relid, GetUserId(), ACL_INSERT | ACL_UPDATE, ACLMASK_ANY) == 0 &&
		pg_attribute_aclcheck_all(relid, GetUserId(), ACL_INSERT | ACL_UPDATE,
								  ACLMASK_ANY) != ACLCHECK_OK)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for fence \"%s\"", name),
				 errdetail("Moving a table's mark takes INSERT or UPDATE privilege on the table or one of its columns.")));
	if (FenceTableRoot(relid) != relid)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("fence resource \"%s\" names a partition", name),
				 errhint("A partitioned table's writes share its root's mark: fence \"" FENCE_TABLE_PREFIX "%s\".",
						 get_rel_name(FenceTableRoot(relid)))));
	return relid;
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

	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("argument \"token\" must not be null"),
				 errhint("Pass the fencing token dsync_acquire() returned.")));
	token = FenceCheckToken(PG_GETARG_INT64(1), "argument \"token\"");

	DsyncPreventWrite("dsync_fence()");
	table = FenceTableOfResource(resource);
	/* However the table was spelled, its mark is the trigger's. */
	if (OidIsValid(table))
		resource = FenceTableResource(table);
	previous = FenceApply(DsyncCatalogGet(fcinfo), resource, token, !OidIsValid(table),
						  OidIsValid(table) ? FenceRelOwner(table) : GetUserId());
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
FenceTriggerToken(TriggerData *trigdata, HeapTuple tuple)
{
	Relation	rel = trigdata->tg_relation;
	Trigger    *trigger = trigdata->tg_trigger;
	TupleDesc	desc = RelationGetDescr(rel);
	const char *column;
	int			attnum;
	Oid			type;
	Datum		value;
	bool		isnull;

	if (trigger->tgnargs != 1)
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("trigger \"%s\" must pass dsync_fenced() exactly one argument, the token column",
						trigger->tgname),
				 errhint("Use EXECUTE FUNCTION dsync_fenced('token_column').")));
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
	return FenceCheckToken(type == INT8OID ? DatumGetInt64(value) : DatumGetInt32(value),
						   psprintf("token column \"%s\"", column));
}

/*
 * dsync_fenced
 *		Trigger: BEFORE INSERT OR UPDATE ... FOR EACH ROW EXECUTE FUNCTION
 *		dsync_fenced('token_column').
 *
 * Each row written must carry a token no older than the table's mark (its
 * partitioned root's, for a partition); the mark rises to it.  Deletes
 * carry no token and are not fenced: guard them with dsync_assert_held(),
 * or dsync_fence('table:name', token), in the same transaction.
 */
Datum
dsync_fenced(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	HeapTuple	tuple;

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
	(void) FenceApply(DsyncCatalogGet(fcinfo),
					  FenceTableResource(RelationGetRelid(trigdata->tg_relation)),
					  FenceTriggerToken(trigdata, tuple),
					  false, FenceRelOwner(FenceTableRoot(RelationGetRelid(trigdata->tg_relation))));
	return PointerGetDatum(tuple);
}
