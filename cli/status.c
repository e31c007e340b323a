/*-------------------------------------------------------------------------
 *
 * status.c
 *		dsync status: the live leases as a table, or with --json one JSON
 *		document of the leases, the waiters, the database's counters and
 *		its worker.
 *
 * Every function is called schema-qualified (pg_catalog's, or the
 * extension's through @extschema@), so that a search_path with a schema
 * of someone else's first cannot put a function of its own in their
 * place.  The whole run, connecting included, ends within --timeout.
 *
 * The tool first looks (probe.c) whether the views can be read here at
 * all, so that a database without the extension, or a server without
 * dsync preloaded, gets a message and exit 78 and no ERROR in its log.
 * The JSON is built by the server (json_build_object), which quotes
 * every string correctly; the keys are documented in
 * docs/reference/cli.md and stay as they are.
 *
 *-------------------------------------------------------------------------
 */
#include <stdlib.h>
#include <string.h>

#include "dsync_cli.h"

/* A timestamptz as RFC 3339 in UTC, always with microseconds. */
#define RFC3339(x) \
	"pg_catalog.to_char((" x ") AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')"

/* An interval in whole milliseconds. */
#define MILLIS(x) "(pg_catalog.date_part('epoch', " x ") * 1000)::bigint"

/*
 * The table's rows: a name (when given) is looked up (an index probe),
 * not filtered from a scan.
 */
#define STATUS_COLUMNS \
	"SELECT l.lease, l.holder, l.fencing, l.permits," \
	"       pg_catalog.to_char(greatest(l.expires_at - pg_catalog.clock_timestamp(), '0'::interval), 'HH24:MI:SS.MS')," \
	"       (SELECT pg_catalog.count(*) FROM @extschema@.dsync_waiters w" \
	"         WHERE w.name = l.lease AND w.kind <> 'event')," \
	"       l.owner" \
	"  FROM @extschema@.dsync_leases l"
static const char status_sql_all[] = STATUS_COLUMNS " ORDER BY l.lease, l.fencing";
static const char status_sql_name[] = STATUS_COLUMNS " WHERE l.lease = $1 ORDER BY l.lease, l.fencing";

/*
 * The JSON document, in one statement (one snapshot).  $1 is the name or
 * NULL (all); a query with parameters is planned with their values, so
 * "$1 IS NULL" folds away and a name is still an index probe.  mode came
 * with 1.4: taken from the row as JSON, it is null before.
 */
static const char status_sql_json[] =
"SELECT pg_catalog.json_build_object("
"  'database', pg_catalog.current_database(),"
"  'at', " RFC3339("pg_catalog.clock_timestamp()") ","
"  'extension_version', (SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'dsync'),"
"  'name', $1::pg_catalog.text,"
"  'leases', COALESCE((SELECT pg_catalog.json_agg(pg_catalog.json_build_object("
"      'lease', l.lease, 'holder', l.holder, 'fencing', l.fencing,"
"      'mode', pg_catalog.to_jsonb(l) -> 'mode', 'permits', l.permits,"
"      'acquired_at', " RFC3339("l.acquired_at") ","
"      'renewed_at', " RFC3339("l.renewed_at") ","
"      'expires_at', " RFC3339("l.expires_at") ","
"      'ttl_ms', " MILLIS("l.ttl") ","
"      'time_left_ms', " MILLIS("greatest(l.expires_at - pg_catalog.clock_timestamp(), '0'::interval)") ","
"      'waiters', (SELECT pg_catalog.count(*) FROM @extschema@.dsync_waiters w"
"                   WHERE w.name = l.lease AND w.kind <> 'event'),"
"      'owner', l.owner, 'info', l.info) ORDER BY l.lease, l.fencing)"
"    FROM @extschema@.dsync_leases l WHERE $1::pg_catalog.text IS NULL OR l.lease = $1), '[]'),"
"  'waiters', COALESCE((SELECT pg_catalog.json_agg(pg_catalog.json_build_object("
"      'name', w.name, 'kind', w.kind, 'holder', w.holder, 'pid', w.pid,"
"      'since', " RFC3339("w.since") ") ORDER BY w.name, w.since)"
"    FROM @extschema@.dsync_waiters w WHERE $1::pg_catalog.text IS NULL OR w.name = $1), '[]'),"
"  'stats', (SELECT pg_catalog.json_build_object("
"      'served', s.served, 'sender_pid', s.sender_pid, 'sender_pids', s.sender_pids,"
"      'grants', s.grants, 'renewals', s.renewals, 'releases', s.releases,"
"      'expiries', s.expiries, 'waits', s.waits, 'wait_timeouts', s.wait_timeouts,"
"      'wait_time_ms', " MILLIS("s.wait_time") ","
"      'events_sent', s.events_sent, 'events_lost', s.events_lost,"
"      'queue_used', s.queue_used, 'queue_size', s.queue_size)"
"    FROM @extschema@.dsync_stats s),"
"  'worker', (SELECT pg_catalog.json_build_object("
"      'state', d.state, 'served', d.served, 'worker_pid', d.worker_pid,"
"      'worker_since', " RFC3339("d.worker_since") ","
"      'next_deadline', " RFC3339("d.next_deadline") ","
"      'queued_bytes', d.queued_bytes)"
"    FROM @extschema@.dsync_databases d WHERE d.datname = pg_catalog.current_database()))";

/*
 * PrintTable
 *		The live leases, one line per holder, or a line saying there are
 *		none.
 */
static void
PrintTable(PGresult *res, const Options *opt)
{
	int			n = PQntuples(res);

	printf("%-24s %-32s %16s %7s %12s %7s %s\n", "LEASE", "HOLDER", "FENCING", "PERMITS",
		   "TIME LEFT", "WAITERS", "OWNER");
	for (int i = 0; i < n; i++)
		printf("%-24s %-32s %16s %7s %12s %7s %s\n", PQgetvalue(res, i, 0),
			   PQgetvalue(res, i, 1), PQgetvalue(res, i, 2), PQgetvalue(res, i, 3),
			   PQgetvalue(res, i, 4), PQgetvalue(res, i, 5), PQgetvalue(res, i, 6));
	if (n == 0)
		printf("(no live leases%s%s)\n", opt->name ? " named " : "", opt->name ? opt->name : "");
}

/*
 * CommandStatus
 *		dsync status: the live leases (all, or those of NAME) as a table,
 *		or everything as one JSON document with --json, within --timeout
 *		(a script that runs it must not hang with a stuck server).
 */
int
CommandStatus(Options *opt)
{
	int64_t		deadline = NowMs() + opt->timeout_ms;
	PGconn	   *conn = ConnectBy(opt, false, deadline);
	const char *params[1] = {opt->name};
	DsyncProbe	probe;
	PGresult   *res;
	char	   *sql;
	bool		timed_out;

	if (conn == NULL)
		return EXIT_UNAVAILABLE;
	RequireDsync(conn, &probe, deadline, DSYNC_MIN_VERSION_NUM);
	if (opt->json)
		sql = SchemaSql(conn, &probe, status_sql_json);
	else
		sql = SchemaSql(conn, &probe, opt->name ? status_sql_name : status_sql_all);
	res = Query(conn, sql, opt->json || opt->name ? 1 : 0, params, deadline, NULL, NULL,
				&timed_out);
	free(sql);
	if (timed_out)
	{
		CancelStatement(conn);
		Fatal(EXIT_UNAVAILABLE, "timeout: the server did not answer within --timeout %gs",
			  opt->timeout_ms / 1000.0);
	}
	if (res == NULL || PQresultStatus(res) != PGRES_TUPLES_OK)
		FatalResult(opt->json ? "could not read the state" : "could not read leases", conn, res);
	if (opt->json)
		printf("%s\n", PQgetvalue(res, 0, 0));
	else
		PrintTable(res, opt);
	PQclear(res);
	PQfinish(conn);
	return 0;
}
