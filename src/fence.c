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
 * resource, so that a stale writer (a holder paused past its ttl, or cut
 * off and replaced) is refused by the database itself.
 *
 * The mark's row is locked until the caller's transaction ends, so writers
 * of one resource are serialised: a second writer waits for the first and
 * then compares against what it committed (or, after a rollback, against
 * the mark from before).  Rows are read as of the latest committed state
 * (scan.c), so a REPEATABLE READ or SERIALIZABLE caller is refused or let
 * through on what is committed now, never on its snapshot, and dsync raises
 * no serialization failure of its own.  Like every dsync row, a mark
 * belongs to the role that first set it: another role may not move it
 * directly, though any role that may write a fenced table moves the
 * table's mark through the trigger.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/timestamp.h"

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
 * check_owner: a direct call must come from a role with the privileges of
 * the mark's owner; the trigger needs no such check, since whoever may
 * write the table may move its mark.  new_owner owns a mark made now.
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
					 errmsg("must be a member of the role that owns the fence of resource \"%s\"",
							text_to_cstring(resource)),
					 errhint("Its owner is shown in dsync_fences.")));
		/* Waits for a concurrent writer of the resource; then look again. */
		if (DsyncStoreLock(&store, row, LockTupleNoKeyExclusive, LockWaitBlock) == TM_Ok)
			break;
	}

	mark = DatumGetInt64(row->values[Anum_fence_token - 1]);
	if (token < mark)
		FenceStale(text_to_cstring(resource), token, mark);
	if (token > mark)
	{
		DsyncRowSet(row, Anum_fence_token, Int64GetDatum(token));
		DsyncRowSet(row, Anum_fence_fenced_at, TimestampTzGetDatum(GetCurrentTimestamp()));
		DsyncStoreUpdate(&store, row);
	}
	DsyncStoreClose(&store);
	return mark;
}

/*
 * FenceCheckToken
 *		A token argument or column: not null, and positive as dsync's tokens are.
 */
static int64
FenceCheckToken(bool isnull, int64 token, const char *what)
{
	if (isnull)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", what),
				 errhint("Pass the fencing token dsync_acquire() returned.")));
	if (token <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be positive", what),
				 errdetail("The value is " INT64_FORMAT ".", token)));
	return token;
}

/*
 * dsync_fence
 *		SQL: dsync_fence(resource, token) RETURNS bigint
 *
 * Returns the previous mark (NULL if none); raises SQLSTATE 55000 if a
 * greater token was already accepted for the resource.
 */
Datum
dsync_fence(PG_FUNCTION_ARGS)
{
	text	   *resource = DsyncArgName(fcinfo, 0, "resource");
	int64		token = FenceCheckToken(PG_ARGISNULL(1), PG_ARGISNULL(1) ? 0 : PG_GETARG_INT64(1),
										"argument \"token\"");
	int64		previous;

	DsyncPreventWrite("dsync_fence()");
	previous = FenceApply(DsyncCatalogGet(fcinfo), resource, token, true, GetUserId());
	if (previous < 0)
		PG_RETURN_NULL();
	PG_RETURN_INT64(previous);
}

/*
 * FenceTriggerResource
 *		The resource name of a fenced table: its schema-qualified name, as
 *		a user would write it.
 */
static text *
FenceTriggerResource(Relation rel)
{
	char	   *name = quote_qualified_identifier(get_namespace_name(RelationGetNamespace(rel)),
												  RelationGetRelationName(rel));

	if (strlen(name) > DSYNC_NAME_MAX_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_NAME_TOO_LONG),
				 errmsg("qualified name of fenced table \"%s\" is longer than %d bytes",
						RelationGetRelationName(rel), DSYNC_NAME_MAX_BYTES)));
	return cstring_to_text(name);
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
	char	   *what;

	if (trigger->tgnargs != 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
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
	value = heap_getattr(tuple, attnum, desc, &isnull);
	what = psprintf("token column \"%s\"", column);
	switch (type)
	{
		case INT8OID:
			return FenceCheckToken(isnull, isnull ? 0 : DatumGetInt64(value), what);
		case INT4OID:
			return FenceCheckToken(isnull, isnull ? 0 : DatumGetInt32(value), what);
		default:
			ereport(ERROR,
					(errcode(ERRCODE_DATATYPE_MISMATCH),
					 errmsg("token column \"%s\" of table \"%s\" must be of type bigint",
							column, RelationGetRelationName(rel)),
					 errdetail("It is of type %s.", format_type_be(type))));
	}
	return 0;					/* keep the compiler quiet */
}

/*
 * dsync_fenced
 *		Trigger: BEFORE INSERT OR UPDATE ... FOR EACH ROW EXECUTE FUNCTION
 *		dsync_fenced('token_column').
 *
 * Each row written must carry a token no older than the table's mark; the
 * mark rises to it.  Deletes carry no token and are not fenced: guard them
 * with dsync_assert_held() or dsync_fence() in the same transaction.
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
					  FenceTriggerResource(trigdata->tg_relation),
					  FenceTriggerToken(trigdata, tuple),
					  false, trigdata->tg_relation->rd_rel->relowner);
	return PointerGetDatum(tuple);
}
