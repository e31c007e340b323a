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
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

#include "catalog.h"
#include "ephemeral.h"
#include "lease.h"
#include "shmem.h"
#include "sqlexec.h"

/* One session grant of this backend. */
typedef struct SessionGrant
{
	char	   *lease;
	char	   *holder;
	int64		token;
	bool		durable;
	int			nest_level;		/* 0: committed (or ephemeral: at once) */
	int			released_level; /* released by an uncommitted transaction */
} SessionGrant;

/* A record of dsync_session, as a starting reaper reads it. */
typedef struct SessionRecord
{
	int64		token;
	char	   *lease;
	char	   *holder;
	int			pid;
	TimestampTz epoch;
} SessionRecord;

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
 *		Run one statement on dsync_session as the table's owner (the
 *		caller's role may not touch it, and must not need to); returns how
 *		many rows it processed.
 */
static uint64
SessionExecute(const char *sql, int nargs, Oid *argtypes, Datum *args, Oid owner,
			   int expected)
{
	Oid			saved_user;
	int			saved_context;
	int			rc;
	uint64		processed;

	GetUserIdAndSecContext(&saved_user, &saved_context);
	SetUserIdAndSecContext(owner, saved_context | SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_RESTRICTED_OPERATION);
	DsyncSqlConnect("use its session table");
	rc = SPI_execute_with_args(sql, nargs, argtypes, args, NULL, false, 0);
	processed = SPI_processed;
	SPI_finish();
	SetUserIdAndSecContext(saved_user, saved_context);
	DsyncSqlCheck(rc, expected, "use its session table");
	return processed;
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
		/* A grant acquired again elsewhere with session => true moves here. */
		SessionExecute(psprintf("INSERT INTO %s (fencing, name, holder, epoch, pid) "
								"VALUES ($1, $2, $3, $4, $5) ON CONFLICT (fencing) DO UPDATE "
								"SET name = EXCLUDED.name, holder = EXCLUDED.holder, "
								"epoch = EXCLUDED.epoch, pid = EXCLUDED.pid", table),
					   5, argtypes, args, owner, SPI_OK_INSERT);
	}
	else
	{
		/* Likewise: the grant's entry names this backend now. */
		DsyncEphemeralSessionMove(lease, holder, token);
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
	grant->released_level = 0;
	session_grants = lappend(session_grants, grant);
	MemoryContextSwitchTo(oldcontext);
}

/*
 * SessionFree
 *		Free a grant taken off the list.
 */
static void
SessionFree(SessionGrant *grant)
{
	pfree(grant->lease);
	pfree(grant->holder);
	pfree(grant);
}

/*
 * SessionForget
 *		Undo what a rollback at nest_level undid: forget the grants made at
 *		that level or deeper and not yet committed, and keep those whose
 *		release it undid.
 */
static void
SessionForget(int nest_level)
{
	ListCell   *lc;

	foreach(lc, session_grants)
	{
		SessionGrant *grant = lfirst(lc);

		if (grant->released_level >= nest_level)
			grant->released_level = 0;
		if (grant->nest_level >= nest_level && grant->nest_level > 0)
		{
			session_grants = foreach_delete_current(session_grants, lc);
			SessionFree(grant);
		}
	}
}

/*
 * SessionXactCallback
 *		A commit keeps the transaction's grants and forgets those it
 *		released; a rollback forgets its grants and keeps what it released.
 */
static void
SessionXactCallback(XactEvent event, void *arg)
{
	ListCell   *lc;

	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT)
	{
		foreach(lc, session_grants)
		{
			SessionGrant *grant = lfirst(lc);

			grant->nest_level = 0;
			if (grant->released_level > 0)
			{
				session_grants = foreach_delete_current(session_grants, lc);
				SessionFree(grant);
			}
		}
	}
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
			if (grant->released_level >= level)
				grant->released_level = level - 1;
		}
	}
	else if (event == SUBXACT_EVENT_ABORT_SUB)
		SessionForget(level);
}

/*
 * SessionClaim
 *		Lock the record of a durable session grant if it is still this
 *		backend's (pid, epoch): a backend that acquired it again with
 *		session => true has made it its own.  True if claimed; the caller
 *		then releases the grant and deletes the record.
 */
static bool
SessionClaim(const char *table, Oid owner, int64 token, int pid, TimestampTz epoch)
{
	Oid			argtypes[3] = {INT8OID, INT4OID, TIMESTAMPTZOID};
	Datum		args[3] = {Int64GetDatum(token), Int32GetDatum(pid), TimestampTzGetDatum(epoch)};

	/*
	 * A record locked by someone else is being taken over by a backend
	 * acquiring the grant again: it is not ours to release, and waiting
	 * for that transaction could stall a reaper or an exiting backend.
	 */
	return SessionExecute(psprintf("SELECT FROM %s WHERE fencing OPERATOR(pg_catalog.=) $1 "
								   "AND pid OPERATOR(pg_catalog.=) $2 "
								   "AND epoch OPERATOR(pg_catalog.=) $3 FOR UPDATE SKIP LOCKED", table),
						  3, argtypes, args, owner, SPI_OK_SELECT) > 0;
}

/*
 * SessionDelete
 *		Forget the record of a durable session grant.
 */
static void
SessionDelete(const char *table, Oid owner, int64 token)
{
	Oid			argtypes[1] = {INT8OID};
	Datum		args[1] = {Int64GetDatum(token)};

	(void) SessionExecute(psprintf("DELETE FROM %s WHERE fencing OPERATOR(pg_catalog.=) $1", table),
						  1, argtypes, args, owner, SPI_OK_DELETE);
}

/*
 * DsyncSessionReleased
 *		The caller released the grant with token: if it was one of this
 *		backend's session grants, it is one no more once the release
 *		commits (an ephemeral release takes effect at once).
 */
void
DsyncSessionReleased(int64 token)
{
	ListCell   *lc;

	foreach(lc, session_grants)
	{
		SessionGrant *grant = lfirst(lc);

		if (grant->token != token || grant->released_level != 0)
			continue;
		if (!grant->durable)
		{
			session_grants = foreach_delete_current(session_grants, lc);
			SessionFree(grant);
		}
		else
		{
			const DsyncCatalog *catalog = DsyncCatalogFromExtension();
			Oid			owner;
			char	   *table = SessionTable(catalog, &owner);

			if (table && SessionClaim(table, owner, token, MyProcPid,
									  dsync_shared->session_epoch))
				SessionDelete(table, owner, token);
			grant->released_level = GetCurrentTransactionNestLevel();
		}
	}
}

/*
 * SessionReleaseAll
 *		Release this backend's committed session grants and forget their
 *		records, in the current transaction.  An exiting backend cannot be
 *		interrupted, so it waits for nobody: a grant a guard has locked
 *		keeps its record, for the next reaper to start (or its ttl).
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
		else if (table == NULL ||
				 SessionClaim(table, owner, grant->token, MyProcPid,
							  dsync_shared->session_epoch))
		{
			if (DsyncLeaseReleaseGrant(catalog, lease, holder, grant->token, false) !=
				DSYNC_RELEASE_BUSY && table)
				SessionDelete(table, owner, grant->token);
		}
	}
}

/*
 * SessionAtExit
 *		The backend ends: release its session leases in a transaction of
 *		its own.  Runs before PostgreSQL's own cleanup (callbacks run last
 *		registered first), so any transaction in progress is aborted first.
 *		The session's settings must not make it fail: it is read-write, and
 *		waits for no lock (SessionReleaseAll).  An error
 *		here ends the backend at once (it is exiting already); the ttl then
 *		ends the leases, and the next reaper to start releases durable ones.
 */
static void
SessionAtExit(int code, Datum arg)
{
	if (session_grants == NIL || !OidIsValid(MyDatabaseId))
		return;
	AbortOutOfAnyTransaction();
	StartTransactionCommand();
	(void) set_config_option("transaction_read_only", "off", PGC_SUSET, PGC_S_OVERRIDE,
							 GUC_ACTION_LOCAL, true, 0, false);
	(void) set_config_option("statement_timeout", "0", PGC_SUSET, PGC_S_OVERRIDE,
							 GUC_ACTION_LOCAL, true, 0, false);
	PushActiveSnapshot(GetTransactionSnapshot());
	if (OidIsValid(get_extension_oid("dsync", true)))
		SessionReleaseAll();
	PopActiveSnapshot();
	CommitTransactionCommand();
	session_grants = NIL;
}

/*
 * DsyncSessionSweep
 *		In a starting reaper's transaction: release the durable session
 *		grants whose backends are gone, those of another epoch (made before
 *		a crash or a promotion) and those of backends no longer running, and
 *		forget their records.  A grant a guard has locked is left for the
 *		next sweep (or its ttl): the reaper never waits for a guard.
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
	DsyncSqlConnect("read its session table");
	DsyncSqlCheck(SPI_execute(psprintf("SELECT fencing, name, holder, epoch, pid FROM %s", table),
							  true, 0),
				  SPI_OK_SELECT, "read its session table");
	n = SPI_processed;
	for (uint64 i = 0; i < n; i++)
	{
		HeapTuple	tuple = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		isnull;
		MemoryContext oldcontext;
		SessionRecord *record;

		oldcontext = MemoryContextSwitchTo(CurTransactionContext);
		record = palloc(sizeof(SessionRecord));
		record->token = DatumGetInt64(SPI_getbinval(tuple, desc, 1, &isnull));
		record->lease = SPI_getvalue(tuple, desc, 2);
		record->holder = SPI_getvalue(tuple, desc, 3);
		record->epoch = DatumGetTimestampTz(SPI_getbinval(tuple, desc, 4, &isnull));
		record->pid = DatumGetInt32(SPI_getbinval(tuple, desc, 5, &isnull));
		/* The list too must outlive SPI_finish, which frees SPI's memory. */
		if (record->epoch != dsync_shared->session_epoch || BackendPidGetProc(record->pid) == NULL)
			gone = lappend(gone, record);
		MemoryContextSwitchTo(oldcontext);
	}
	SPI_finish();

	foreach(lc, gone)
	{
		SessionRecord *record = lfirst(lc);
		DsyncReleaseResult result;

		if (!SessionClaim(table, owner, record->token, record->pid, record->epoch))
			continue;
		result = DsyncLeaseReleaseGrant(catalog, cstring_to_text(record->lease),
										cstring_to_text(record->holder), record->token, false);
		if (result == DSYNC_RELEASE_BUSY)
			continue;
		if (result == DSYNC_RELEASE_DONE)
			ereport(LOG,
					(errmsg("dsync released session lease \"%s\" of holder \"%s\": its backend is gone",
							record->lease, record->holder)));
		SessionDelete(table, owner, record->token);
	}
}
