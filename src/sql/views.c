/*-------------------------------------------------------------------------
 *
 * views.c
 *		The rows behind the view dsync_leases: a foreign data wrapper over
 *		dsync's own tables.
 *
 * The view must show the latest committed state, as every dsync function
 * acts on, and must read without SIREAD locks: a plain view over the
 * tables would show a REPEATABLE READ transaction's old snapshot, and in a
 * SERIALIZABLE transaction its predicate locks could make a concurrent
 * dsync call fail serialization, which dsync itself must never cause.  A
 * set-returning function gets both right but sees none of the query's
 * WHERE clause, so every query on the view used to read every row of the
 * table into memory (including released ones): 220 MB and seconds for one
 * lookup at a million names.
 *
 * A foreign table, dsync_lease_scan, served by this wrapper, fixes that.
 * The planner hands the wrapper the query's conditions: an equality on
 * lease (and on holder) with a constant or a parameter becomes an index
 * probe, so "WHERE lease = $1" costs what any dsync call costs.  Rows are
 * produced one at a time, from memory that is reset for every row, so a
 * query without such a condition reads the tables once with bounded
 * memory, whatever they hold.  Every condition is still checked on each
 * row by the executor, so the probe only narrows where to look.  The view
 * dsync_leases selects from the foreign table; ordinary roles read the
 * view and have no rights on the table or on dsync's own tables.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_collation.h"
#include "catalog/pg_operator.h"
#include "commands/explain.h"
#include "foreign/fdwapi.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "nodes/nodeFuncs.h"
#include "optimizer/optimizer.h"
#include "optimizer/pathnode.h"
#include "optimizer/planmain.h"
#include "optimizer/restrictinfo.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/tuplestore.h"

#include "catalog.h"
#include "store.h"
#include "ephemeral.h"
#include "lease.h"
#include "compat.h"

PG_FUNCTION_INFO_V1(dsync_fdw_handler);
PG_FUNCTION_INFO_V1(dsync_lease_rows);

#define LEASE_ROWS_COLS 10

/* Columns of dsync_lease_scan (1-based) that a lookup can use. */
#define SCAN_ATT_LEASE		1
#define SCAN_ATT_HOLDER		2

/* A scan of the live holders: both tables, in turn. */
typedef struct LeaseScanState
{
	const DsyncCatalog *catalog;
	bool		started;
	int			table;			/* 0: dsync_lease, 1: dsync_permit, 2: ephemeral */
	DsyncStore	store;
	bool		store_open;
	DsyncScan  *scan;
	text	   *lease;			/* lookup by lease, or NULL */
	text	   *holder;			/* and by holder, or NULL */
	List	   *exprs;			/* ExprStates of the lookup values */
	bool		has_lease;
	bool		has_holder;
	bool		empty;			/* a lookup value is NULL: no row can match */
	MemoryContext keep_cxt;		/* lives as long as the scan */
	MemoryContext row_cxt;		/* reset for every row */
	text	   *permits_name;	/* the name whose count permits_count is */
	int			permits_count;
	List	   *ephemeral;		/* copies of the live ephemeral leases */
	int			ephemeral_next; /* the next of them to return */
} LeaseScanState;

/*
 * LeaseScanValue
 *		If clause is "column = value" (either way round) for one of this
 *		relation's lookup columns, with a value that is the same for the
 *		whole scan and an equality that compares bytes, return the value
 *		and set *attno.
 */
static Expr *
LeaseScanValue(Expr *clause, Index relid, AttrNumber *attno)
{
	OpExpr	   *op;
	Node	   *left;
	Node	   *right;

	if (!IsA(clause, OpExpr))
		return NULL;
	op = (OpExpr *) clause;
	if (op->opno != TextEqualOperator || list_length(op->args) != 2)
		return NULL;
	if (OidIsValid(op->inputcollid) && op->inputcollid != C_COLLATION_OID &&
		op->inputcollid != DEFAULT_COLLATION_OID &&
		!get_collation_isdeterministic(op->inputcollid))
		return NULL;
	left = linitial(op->args);
	right = lsecond(op->args);
	if (!IsA(left, Var))
	{
		Node	   *swap = left;

		left = right;
		right = swap;
	}
	if (!IsA(left, Var) || ((Var *) left)->varno != (int) relid ||
		((Var *) left)->varlevelsup != 0 ||
		(((Var *) left)->varattno != SCAN_ATT_LEASE &&
		 ((Var *) left)->varattno != SCAN_ATT_HOLDER))
		return NULL;
	if (contain_var_clause(right) || contain_volatile_functions(right))
		return NULL;
	*attno = ((Var *) left)->varattno;
	return (Expr *) right;
}

/*
 * LeaseScanLookups
 *		The lookup values among a relation's conditions: lease first, then
 *		holder (either may be NULL).
 */
static void
LeaseScanLookups(List *clauses, Index relid, Expr **lease, Expr **holder)
{
	ListCell   *lc;

	*lease = NULL;
	*holder = NULL;
	foreach(lc, clauses)
	{
		Expr	   *clause = lfirst(lc);
		AttrNumber	attno;
		Expr	   *value;

		if (IsA(clause, RestrictInfo))
			clause = ((RestrictInfo *) clause)->clause;
		value = LeaseScanValue(clause, relid, &attno);
		if (value && attno == SCAN_ATT_LEASE && *lease == NULL)
			*lease = value;
		else if (value && attno == SCAN_ATT_HOLDER && *holder == NULL)
			*holder = value;
	}
}

/*
 * LeaseScanGetRelSize
 *		FDW: a lookup by lease returns about one row; a scan, many.
 */
static void
LeaseScanGetRelSize(PlannerInfo *root, RelOptInfo *baserel, Oid foreigntableid)
{
	Expr	   *lease;
	Expr	   *holder;

	LeaseScanLookups(baserel->baserestrictinfo, baserel->relid, &lease, &holder);
	baserel->rows = lease ? 1 : 1000;
}

/*
 * LeaseScanGetPaths
 *		FDW: one path, cheap when the scan is a lookup.
 */
static void
LeaseScanGetPaths(PlannerInfo *root, RelOptInfo *baserel, Oid foreigntableid)
{
	Expr	   *lease;
	Expr	   *holder;
	Cost		cost;

	LeaseScanLookups(baserel->baserestrictinfo, baserel->relid, &lease, &holder);
	cost = lease ? 10 : 10000;
	add_path(baserel, (Path *) DsyncCreateForeignscanPath(root, baserel, baserel->rows,
														  cost / 10, cost));
}

/*
 * LeaseScanGetPlan
 *		FDW: the plan.  Every condition stays a filter; the lookup values
 *		go to the executor as fdw_exprs, and fdw_private says which.
 */
static ForeignScan *
LeaseScanGetPlan(PlannerInfo *root, RelOptInfo *baserel, Oid foreigntableid,
				 ForeignPath *best_path, List *tlist, List *scan_clauses, Plan *outer_plan)
{
	Expr	   *lease;
	Expr	   *holder;
	List	   *exprs = NIL;

	LeaseScanLookups(scan_clauses, baserel->relid, &lease, &holder);
	if (lease)
		exprs = lappend(exprs, lease);
	if (lease && holder)
		exprs = lappend(exprs, holder);
	return make_foreignscan(tlist, extract_actual_clauses(scan_clauses, false),
							baserel->relid, exprs,
							list_make2(makeInteger(lease != NULL),
									   makeInteger(lease != NULL && holder != NULL)),
							NIL, NIL, outer_plan);
}

/*
 * LeaseScanExplain
 *		FDW: say how the rows are found.
 */
static void
LeaseScanExplain(ForeignScanState *node, ExplainState *es)
{
	ForeignScan *plan = (ForeignScan *) node->ss.ps.plan;
	bool		has_lease = intVal(linitial(plan->fdw_private));
	bool		has_holder = intVal(lsecond(plan->fdw_private));

	ExplainPropertyText("dsync Lookup",
						has_holder ? "by lease and holder (index probe)" :
						has_lease ? "by lease (index probe)" : "all rows", es);
}

/*
 * LeaseScanBegin
 *		FDW: set up; the tables are opened at the first row.
 */
static void
LeaseScanBegin(ForeignScanState *node, int eflags)
{
	ForeignScan *plan = (ForeignScan *) node->ss.ps.plan;
	LeaseScanState *state = palloc0(sizeof(LeaseScanState));

	state->has_lease = intVal(linitial(plan->fdw_private));
	state->has_holder = intVal(lsecond(plan->fdw_private));
	state->exprs = ExecInitExprList(plan->fdw_exprs, (PlanState *) node);
	state->keep_cxt = CurrentMemoryContext;
	state->row_cxt = AllocSetContextCreate(CurrentMemoryContext, "dsync lease scan row",
										   ALLOCSET_DEFAULT_SIZES);
	node->fdw_state = state;
	if (eflags & EXEC_FLAG_EXPLAIN_ONLY)
		return;
	state->catalog = DsyncCatalogFromExtension();
}

/*
 * LeaseScanClose
 *		End the current table's scan.
 */
static void
LeaseScanClose(LeaseScanState *state)
{
	if (state->scan)
		DsyncScanEnd(state->scan);
	if (state->store_open)
		DsyncStoreClose(&state->store);
	state->scan = NULL;
	state->store_open = false;
}

/*
 * LeaseScanStart
 *		Work out the lookup values (parameters are known now).
 */
static void
LeaseScanStart(ForeignScanState *node, LeaseScanState *state)
{
	ExprContext *econtext = node->ss.ps.ps_ExprContext;
	ListCell   *lc;
	int			i = 0;

	state->lease = state->holder = NULL;
	state->empty = false;
	foreach(lc, state->exprs)
	{
		bool		isnull;
		Datum		value = ExecEvalExpr(lfirst(lc), econtext, &isnull);

		if (isnull)
			state->empty = true;
		else if (i == 0)
			state->lease = DatumGetTextPP(value);
		else
			state->holder = DatumGetTextPP(value);
		i++;
	}
	state->table = 0;
	state->ephemeral = NIL;
	state->ephemeral_next = 0;
	state->started = true;
}

/*
 * LeaseScanOpenTable
 *		Open the next table and start its scan; false when both are done.
 */
static bool
LeaseScanOpenTable(LeaseScanState *state)
{
	static const DsyncTable tables[] = {DSYNC_TABLE_LEASE, DSYNC_TABLE_PERMIT};

	for (; state->table < (int) lengthof(tables); state->table++)
	{
		DsyncTable table = tables[state->table];

		if (!OidIsValid(state->catalog->rels[table]))
			continue;
		DsyncStoreOpenCatalog(&state->store, state->catalog, table, false);
		state->store.tolerant = true;
		state->store_open = true;
		if (state->lease == NULL)
			state->scan = DsyncScanAll(&state->store);
		else if (table == DSYNC_TABLE_LEASE)
			state->scan = DsyncScanKey(&state->store, state->lease, Int32GetDatum(0));
		else if (state->holder)
			state->scan = DsyncScanHolder(&state->store, state->lease, state->holder);
		else
			state->scan = DsyncScanName(&state->store, state->lease);
		return true;
	}
	return false;
}

/*
 * LeaseScanPermits
 *		A name's permit count, remembered for the rows of the same name
 *		that follow.
 */
static int
LeaseScanPermits(LeaseScanState *state, text *name)
{
	MemoryContext oldcontext;

	if (state->permits_name && DsyncTextEquals(state->permits_name, name))
		return state->permits_count;
	state->permits_count = DsyncSemaphoreCount(state->catalog, name, false);
	if (state->permits_count < 0)
		state->permits_count = 1;
	oldcontext = MemoryContextSwitchTo(state->keep_cxt);
	if (state->permits_name)
		pfree(state->permits_name);
	state->permits_name = (text *) PG_DETOAST_DATUM_COPY(PointerGetDatum(name));
	MemoryContextSwitchTo(oldcontext);
	return state->permits_count;
}

/*
 * LeaseScanEphemeral
 *		The next ephemeral lease's row; false at the end.  They come last,
 *		copied when the tables are done.
 */
static bool
LeaseScanEphemeral(LeaseScanState *state, Datum *values, bool *nulls, int ncols)
{
	DsyncEphemeralRow *row;

	if (state->ephemeral_next >= list_length(state->ephemeral))
		return false;
	row = list_nth(state->ephemeral, state->ephemeral_next++);
	memset(nulls, 0, sizeof(bool) * 10);
	values[0] = PointerGetDatum(row->lease);
	values[1] = PointerGetDatum(row->holder);
	values[2] = Int64GetDatum(row->fencing);
	/* A semaphore's, if it was defined after the lease was taken. */
	values[3] = Int32GetDatum(LeaseScanPermits(state, row->lease));
	values[4] = TimestampTzGetDatum(row->acquired_at);
	values[5] = TimestampTzGetDatum(row->renewed_at);
	values[6] = TimestampTzGetDatum(row->expires_at);
	values[7] = IntervalPGetDatum(&row->ttl);
	values[8] = PointerGetDatum(row->info);
	nulls[8] = row->info == NULL;
	values[9] = ObjectIdGetDatum(row->owner);
	if (ncols > LEASE_ROWS_COLS)
	{
		values[LEASE_ROWS_COLS] = CStringGetTextDatum("exclusive");
		nulls[LEASE_ROWS_COLS] = false;
	}
	return true;
}

/*
 * LeaseScanNextRow
 *		The next live holder's row, with its permit count, into values and
 *		nulls; false at the end.  ncols: the row's width, with the mode
 *		(1.4) after the first LEASE_ROWS_COLS columns.  Allocates in the
 *		current context.
 */
static bool
LeaseScanNextRow(LeaseScanState *state, Datum *values, bool *nulls, int ncols)
{
	if (state->empty)
		return false;
	for (;;)
	{
		DsyncRow   *row;

		if (state->scan == NULL)
		{
			MemoryContext oldcontext = MemoryContextSwitchTo(state->keep_cxt);
			bool		opened = LeaseScanOpenTable(state);

			if (!opened && state->ephemeral_next == 0 && state->ephemeral == NIL)
				state->ephemeral = DsyncEphemeralRows(state->lease, state->holder);
			MemoryContextSwitchTo(oldcontext);
			if (!opened)
				return LeaseScanEphemeral(state, values, nulls, ncols);
		}
		row = DsyncScanNext(state->scan);
		if (row == NULL)
		{
			LeaseScanClose(state);
			state->table++;
			continue;
		}
		if (!DsyncRowIsLive(row, GetCurrentTimestamp()))
		{
			/* Nothing else lives in this context yet: keep memory flat. */
			Assert(CurrentMemoryContext == state->row_cxt);
			MemoryContextReset(state->row_cxt);
			continue;
		}

		values[0] = row->values[Anum_lease_name - 1];
		nulls[0] = false;
		values[1] = row->values[Anum_lease_holder - 1];
		nulls[1] = false;
		values[2] = row->values[Anum_lease_fencing - 1];
		nulls[2] = false;
		values[3] = Int32GetDatum(LeaseScanPermits(state, DatumGetTextPP(values[0])));
		nulls[3] = false;
		for (int i = 0; i < 6; i++)
		{
			/* acquired_at, renewed_at, expires_at, ttl, info, owner */
			values[4 + i] = row->values[Anum_lease_acquired_at - 1 + i];
			nulls[4 + i] = row->nulls[Anum_lease_acquired_at - 1 + i];
		}
		if (ncols > LEASE_ROWS_COLS)
		{
			/* A plain lease, or one permit, is held by one holder alone. */
			values[LEASE_ROWS_COLS] =
				CStringGetTextDatum(DsyncRowSlot(row) >= DSYNC_SHARED_SLOT ?
									"shared" : "exclusive");
			nulls[LEASE_ROWS_COLS] = false;
		}
		return true;
	}
}

/*
 * LeaseScanIterate
 *		FDW: the next row, or an empty slot at the end.
 */
static TupleTableSlot *
LeaseScanIterate(ForeignScanState *node)
{
	LeaseScanState *state = node->fdw_state;
	TupleTableSlot *slot = node->ss.ss_ScanTupleSlot;
	MemoryContext oldcontext;
	bool		found;

	ExecClearTuple(slot);
	if (!state->started)
		LeaseScanStart(node, state);
	MemoryContextReset(state->row_cxt);
	oldcontext = MemoryContextSwitchTo(state->row_cxt);
	found = LeaseScanNextRow(state, slot->tts_values, slot->tts_isnull,
							 slot->tts_tupleDescriptor->natts);
	MemoryContextSwitchTo(oldcontext);
	if (found)
		ExecStoreVirtualTuple(slot);
	return slot;
}

/*
 * LeaseScanRescan
 *		FDW: start again (parameters may have changed).
 */
static void
LeaseScanRescan(ForeignScanState *node)
{
	LeaseScanState *state = node->fdw_state;

	LeaseScanClose(state);
	state->started = false;
}

/*
 * LeaseScanEnd
 *		FDW: close what is open.
 */
static void
LeaseScanEnd(ForeignScanState *node)
{
	LeaseScanState *state = node->fdw_state;

	if (state)
		LeaseScanClose(state);
}

/*
 * dsync_fdw_handler
 *		SQL: the handler of FOREIGN DATA WRAPPER dsync.
 */
Datum
dsync_fdw_handler(PG_FUNCTION_ARGS)
{
	FdwRoutine *routine = makeNode(FdwRoutine);

	routine->GetForeignRelSize = LeaseScanGetRelSize;
	routine->GetForeignPaths = LeaseScanGetPaths;
	routine->GetForeignPlan = LeaseScanGetPlan;
	routine->ExplainForeignScan = LeaseScanExplain;
	routine->BeginForeignScan = LeaseScanBegin;
	routine->IterateForeignScan = LeaseScanIterate;
	routine->ReScanForeignScan = LeaseScanRescan;
	routine->EndForeignScan = LeaseScanEnd;
	PG_RETURN_POINTER(routine);
}

/*
 * dsync_lease_rows
 *		SQL (1.0 and 1.1 only): dsync_lease_rows() RETURNS TABLE(lease,
 *		holder, fencing, permits, acquired_at, renewed_at, expires_at, ttl,
 *		info, owner), the rows of those versions' dsync_leases, until
 *		ALTER EXTENSION dsync UPDATE replaces it with the foreign table.
 */
Datum
dsync_lease_rows(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	LeaseScanState state;
	MemoryContext oldcontext = CurrentMemoryContext;
	Datum		values[LEASE_ROWS_COLS];
	bool		nulls[LEASE_ROWS_COLS];

	InitMaterializedSRF(fcinfo, 0);
	memset(&state, 0, sizeof(state));
	state.catalog = DsyncCatalogGet(fcinfo);
	state.started = true;
	state.keep_cxt = oldcontext;
	state.row_cxt = AllocSetContextCreate(CurrentMemoryContext, "dsync lease rows",
										  ALLOCSET_DEFAULT_SIZES);
	for (;;)
	{
		bool		found;

		MemoryContextReset(state.row_cxt);
		MemoryContextSwitchTo(state.row_cxt);
		found = LeaseScanNextRow(&state, values, nulls, LEASE_ROWS_COLS);
		MemoryContextSwitchTo(oldcontext);
		if (!found)
			break;
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	MemoryContextDelete(state.row_cxt);
	return (Datum) 0;
}
