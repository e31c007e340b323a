/*-------------------------------------------------------------------------
 *
 * session.c
 *		Session leases: dsync_acquire(..., session => true) is also
 *		released when the backend that acquired it ends.
 *
 * A lease outlives its holder's crash by up to its ttl; a ZooKeeper
 * ephemeral node or a Consul session goes as soon as its client does.  A
 * session lease does both: its ttl still bounds it, and it is released
 * when the acquiring backend ends, whichever way it ends:
 *
 *	- the client goes away (closed, killed, the network reset) or the
 *	  backend is terminated: the backend's exit callback releases its
 *	  session leases in a transaction of its own, as PostgreSQL drops a
 *	  session's temporary tables, and waiters wake at that commit;
 *	- the server crashes (or a standby is promoted): every backend is gone
 *	  with no chance to clean up, so each durable session grant is also
 *	  recorded in dsync_session, in the granting transaction, with the
 *	  epoch of the shared memory it was made in.  A reaper that starts
 *	  releases the grants of other epochs, and those of backends no longer
 *	  running (an exit callback that failed).
 *
 * A grant is released only if its holder still holds it with the token it
 * got, so a lease that expired and was granted again (to this holder or
 * another) is left alone.  An ephemeral session lease needs no record: a
 * crash takes it anyway.
 *
 * This belongs to a backend, not to a holder: behind a pooler in
 * transaction mode the backend is the pooler's and outlives the client.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/procarray.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

#include "catalog.h"
#include "ephemeral.h"
#include "lease.h"
#include "shmem.h"

/* One session grant of this backend. */
typedef struct SessionGrant
{
	char	   *lease;
	char	   *holder;
	int64		token;
	bool		durable;
	int			nest_level;		/* 0: committed (or ephemeral: at once) */
} SessionGrant;

static List *session_grants = NIL;	/* SessionGrant *, in TopMemoryContext */
static bool session_hooked = false;

static void SessionAtExit(int code, Datum arg);
static void SessionXactCallback(XactEvent event, void *arg);
static void SessionSubXactCallback(SubXactEvent event, SubTransactionId mySubid,
								   SubTransactionId parentSubid, void *arg);

/*
 * SessionTable
 *		dsync_session's schema-qualified name and its owner, or NULL if this
 *		installation has none (not yet updated to 1.4).
 */
static char *
SessionTable(const DsyncCatalog *catalog, Oid *owner)
{
	Oid			relid = get_relname_relid("dsync_session", catalog->namespace);
	HeapTuple	tuple;

	if (!OidIsValid(relid))
		return NULL;
	tuple = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	if (!HeapTupleIsValid(tuple))
		return NULL;
	*owner = ((Form_pg_class) GETSTRUCT(tuple))->relowner;
	ReleaseSysCache(tuple);
	return quote_qualified_identifier(get_namespace_name(catalog->namespace), "dsync_session");
}

/*
 * SessionExecute
 *		Run one statement on dsync_session as the table's owner: the
 *		caller's role may not write it, and must not need to.
 */
static void
SessionExecute(const char *sql, int nargs, Oid *argtypes, Datum *args, Oid owner,
			   int expected)
{
	Oid			saved_user;
	int			saved_context;
	int			rc;

	GetUserIdAndSecContext(&saved_user, &saved_context);
	SetUserIdAndSecContext(owner, saved_context | SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_RESTRICTED_OPERATION);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "dsync could not connect to SPI for its session table");
	rc = SPI_execute_with_args(sql, nargs, argtypes, args, NULL, false, 0);
	SPI_finish();
	SetUserIdAndSecContext(saved_user, saved_context);
	if (rc != expected)
		elog(ERROR, "dsync could not change its session table: %s", SPI_result_code_string(rc));
}

/*
 * SessionHook
 *		Hook this backend's exit and transaction ends, once.
 */
static void
SessionHook(void)
{
	if (session_hooked)
		return;
	before_shmem_exit(SessionAtExit, (Datum) 0);
	RegisterXactCallback(SessionXactCallback, NULL);
	RegisterSubXactCallback(SessionSubXactCallback, NULL);
	session_hooked = true;
}

/*
 * DsyncSessionNote
 *		A session lease was granted to holder with token: release it when
 *		this backend ends.  A durable grant is also recorded in
 *		dsync_session (in the granting transaction, so a rollback forgets
 *		it); a reentrant grant, which keeps its token, is noted once.
 */
void
DsyncSessionNote(const DsyncCatalog *catalog, text *lease, text *holder, int64 token,
				 bool durable)
{
	MemoryContext oldcontext;
	SessionGrant *grant;
	ListCell   *lc;

	foreach(lc, session_grants)
	{
		SessionGrant *known = lfirst(lc);

		if (known->token == token && known->durable == durable)
			return;
	}
	if (durable)
	{
		Oid			owner;
		char	   *table = SessionTable(catalog, &owner);
		Oid			argtypes[5] = {INT8OID, TEXTOID, TEXTOID, TIMESTAMPTZOID, INT4OID};
		Datum		args[5];

		if (table == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("session leases need version 1.4 of the dsync extension"),
					 errhint("Run ALTER EXTENSION dsync UPDATE.")));
		args[0] = Int64GetDatum(token);
		args[1] = PointerGetDatum(lease);
		args[2] = PointerGetDatum(holder);
		args[3] = TimestampTzGetDatum(dsync_shared->session_epoch);
		args[4] = Int32GetDatum(MyProcPid);
		SessionExecute(psprintf("INSERT INTO %s (fencing, name, holder, epoch, pid) "
								"VALUES ($1, $2, $3, $4, $5)", table),
					   5, argtypes, args, owner, SPI_OK_INSERT);
	}

	SessionHook();
	oldcontext = MemoryContextSwitchTo(TopMemoryContext);
	grant = palloc(sizeof(SessionGrant));
	grant->lease = text_to_cstring(lease);
	grant->holder = text_to_cstring(holder);
	grant->token = token;
	grant->durable = durable;
	/* An ephemeral grant takes effect at once, and a rollback keeps it. */
	grant->nest_level = durable ? GetCurrentTransactionNestLevel() : 0;
	session_grants = lappend(session_grants, grant);
	MemoryContextSwitchTo(oldcontext);
}

/*
 * SessionForget
 *		Drop the grants a rollback undid: those made at nest_level or
 *		deeper and not yet committed.
 */
static void
SessionForget(int nest_level)
{
	ListCell   *lc;

	foreach(lc, session_grants)
	{
		SessionGrant *grant = lfirst(lc);

		if (grant->nest_level >= nest_level && grant->nest_level > 0)
		{
			session_grants = foreach_delete_current(session_grants, lc);
			pfree(grant->lease);
			pfree(grant->holder);
			pfree(grant);
		}
	}
}

/*
 * SessionXactCallback
 *		A commit keeps the transaction's grants, a rollback forgets them.
 */
static void
SessionXactCallback(XactEvent event, void *arg)
{
	ListCell   *lc;

	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT)
		foreach(lc, session_grants)
			((SessionGrant *) lfirst(lc))->nest_level = 0;
	else if (event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT)
		SessionForget(1);
}

/*
 * SessionSubXactCallback
 *		A released savepoint hands its grants to its parent; one rolled
 *		back forgets them.
 */
static void
SessionSubXactCallback(SubXactEvent event, SubTransactionId mySubid,
					   SubTransactionId parentSubid, void *arg)
{
	int			level = GetCurrentTransactionNestLevel();
	ListCell   *lc;

	if (event == SUBXACT_EVENT_COMMIT_SUB)
	{
		foreach(lc, session_grants)
		{
			SessionGrant *grant = lfirst(lc);

			if (grant->nest_level >= level)
				grant->nest_level = level - 1;
		}
	}
	else if (event == SUBXACT_EVENT_ABORT_SUB)
		SessionForget(level);
}

/*
 * SessionReleaseAll
 *		Release this backend's committed session grants and forget their
 *		records, in the current transaction.
 */
static void
SessionReleaseAll(void)
{
	const DsyncCatalog *catalog = DsyncCatalogFromExtension();
	Oid			owner;
	char	   *table = SessionTable(catalog, &owner);
	ListCell   *lc;

	foreach(lc, session_grants)
	{
		SessionGrant *grant = lfirst(lc);
		text	   *lease = cstring_to_text(grant->lease);
		text	   *holder = cstring_to_text(grant->holder);

		if (grant->nest_level != 0)
			continue;
		if (!grant->durable)
			(void) DsyncEphemeralReleaseGrant(lease, holder, grant->token);
		else
		{
			(void) DsyncLeaseReleaseGrant(catalog, lease, holder, grant->token);
			if (table)
			{
				Oid			argtypes[1] = {INT8OID};
				Datum		args[1] = {Int64GetDatum(grant->token)};

				SessionExecute(psprintf("DELETE FROM %s WHERE fencing OPERATOR(pg_catalog.=) $1",
										table),
							   1, argtypes, args, owner, SPI_OK_DELETE);
			}
		}
	}
}

/*
 * SessionAtExit
 *		The backend ends: release its session leases in a transaction of
 *		its own.  Runs before PostgreSQL's own cleanup (callbacks run last
 *		registered first), so any transaction in progress is aborted first.
 *		If this fails, the ttl still ends the leases, and the next reaper
 *		to start releases the durable ones.
 */
static void
SessionAtExit(int code, Datum arg)
{
	if (session_grants == NIL || !OidIsValid(MyDatabaseId))
		return;
	AbortOutOfAnyTransaction();
	PG_TRY();
	{
		StartTransactionCommand();
		PushActiveSnapshot(GetTransactionSnapshot());
		if (OidIsValid(get_extension_oid("dsync", true)))
			SessionReleaseAll();
		PopActiveSnapshot();
		CommitTransactionCommand();
	}
	PG_CATCH();
	{
		EmitErrorReport();
		FlushErrorState();
		AbortOutOfAnyTransaction();
	}
	PG_END_TRY();
	session_grants = NIL;
}

/*
 * DsyncSessionSweep
 *		In a starting reaper's transaction: release the durable session
 *		grants whose backends are gone, those of another epoch (made before
 *		a crash or a promotion) and those of backends no longer running, and
 *		forget their records.
 */
void
DsyncSessionSweep(void)
{
	const DsyncCatalog *catalog = DsyncCatalogFromExtension();
	Oid			owner;
	char	   *table = SessionTable(catalog, &owner);
	List	   *gone = NIL;
	ListCell   *lc;
	uint64		n;

	if (table == NULL)
		return;
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "dsync could not connect to SPI for its session table");
	if (SPI_execute(psprintf("SELECT fencing, name, holder, epoch, pid FROM %s", table),
					true, 0) != SPI_OK_SELECT)
		elog(ERROR, "dsync could not read its session table");
	n = SPI_processed;
	for (uint64 i = 0; i < n; i++)
	{
		HeapTuple	tuple = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		isnull;
		TimestampTz epoch = DatumGetTimestampTz(SPI_getbinval(tuple, desc, 4, &isnull));
		int			pid = DatumGetInt32(SPI_getbinval(tuple, desc, 5, &isnull));
		MemoryContext oldcontext;
		SessionGrant *grant;

		if (epoch == dsync_shared->session_epoch && BackendPidGetProc(pid) != NULL)
			continue;
		oldcontext = MemoryContextSwitchTo(CurTransactionContext);
		grant = palloc(sizeof(SessionGrant));
		grant->token = DatumGetInt64(SPI_getbinval(tuple, desc, 1, &isnull));
		grant->lease = SPI_getvalue(tuple, desc, 2);
		grant->holder = SPI_getvalue(tuple, desc, 3);
		gone = lappend(gone, grant);
		MemoryContextSwitchTo(oldcontext);
	}
	SPI_finish();

	foreach(lc, gone)
	{
		SessionGrant *grant = lfirst(lc);
		Oid			argtypes[1] = {INT8OID};
		Datum		args[1] = {Int64GetDatum(grant->token)};

		if (DsyncLeaseReleaseGrant(catalog, cstring_to_text(grant->lease),
								   cstring_to_text(grant->holder), grant->token))
			ereport(LOG,
					(errmsg("dsync released session lease \"%s\" of holder \"%s\": its backend is gone",
							grant->lease, grant->holder)));
		SessionExecute(psprintf("DELETE FROM %s WHERE fencing OPERATOR(pg_catalog.=) $1", table),
					   1, argtypes, args, owner, SPI_OK_DELETE);
	}
}
