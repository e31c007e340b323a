/*-------------------------------------------------------------------------
 *
 * check.c
 *		dsync check: a health probe for load balancers, Kubernetes exec
 *		probes and monitoring.  It exits 0 when dsync works in the
 *		database, and with a code of its own for each thing that keeps it
 *		from working, first found first:
 *
 *		69	the server cannot be reached (or a query failed; 77 if refused)
 *		72	dsync is not in shared_preload_libraries
 *		78	the extension is not installed here (or older than 1.2)
 *		79	no worker serves the database: expiries are not announced
 *		75	the event queue is fuller than --queue-threshold (80%)
 *
 * and prints one line saying what is wrong and what to do (or, with
 * --json, one JSON object).  It only reads pg_settings, the catalogs and
 * dsync's views, so it needs no rights beyond connecting and causes no
 * ERROR in the server log, healthy or not.
 *
 *-------------------------------------------------------------------------
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "dsync_cli.h"

/* What the probe found; -1 in a number (or tri-state) means unknown. */
typedef struct CheckResult
{
	int			code;			/* the exit code */
	const char *status;			/* one word for the code: "ok", "not_served", ... */
	char		message[1024];	/* what is wrong and what to do, or what is fine */
	char		database[128];
	int			preloaded;
	char		version[32];
	int			served;
	char		state[32];
	int			worker_pid;
	long long	queue_used;
	long long	queue_size;
	long long	events_lost;
} CheckResult;

/*
 * The database's part: served, counters, the whole event queue's use
 * (every database's queued bytes, as the queue is one pool) and the
 * database's slot (a database dsync has no slot for shows as "no slot").
 */
static const char check_sql[] =
"SELECT s.served, s.events_lost, s.queue_size,"
"       (SELECT COALESCE(pg_catalog.sum(queued_bytes), 0) FROM @extschema@.dsync_databases)::bigint,"
"       COALESCE(d.state, 'no slot'), d.worker_pid,"
"       pg_catalog.current_setting('dsync.max_databases')"
"  FROM @extschema@.dsync_stats s"
"  LEFT JOIN @extschema@.dsync_databases d ON d.datname = pg_catalog.current_database()";

/*
 * SetResult
 *		Record the outcome: its exit code, its word and its line.
 */
static void SetResult(CheckResult *r, int code, const char *status, const char *fmt,...) pg_attribute_printf_cli(4, 5);

static void
SetResult(CheckResult *r, int code, const char *status, const char *fmt,...)
{
	va_list		ap;

	r->code = code;
	r->status = status;
	va_start(ap, fmt);
	vsnprintf(r->message, sizeof(r->message), fmt, ap);
	va_end(ap);
}

/*
 * OneLine
 *		libpq's messages as one line: each newline, with the indentation
 *		after it, becomes "; ", and the last one goes.
 */
static void
OneLine(char *text)
{
	size_t		len = strlen(text);
	char	   *out = text;

	while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == ' '))
		text[--len] = '\0';
	for (const char *p = text; *p;)
	{
		if (*p != '\n')
		{
			*out++ = *p++;
			continue;
		}
		while (*p == '\n' || *p == '\t' || *p == ' ')
			p++;
		*out++ = ';';
		*out++ = ' ';
	}
	*out = '\0';
}

/*
 * CheckConnect
 *		Connect as the other commands do, but keep libpq's message for the
 *		result instead of printing it: NULL if the server cannot be
 *		reached.
 */
static PGconn *
CheckConnect(const Options *opt, CheckResult *r)
{
	const char *keys[] = {"dbname", "connect_timeout", "application_name", NULL};
	const char *values[] = {opt->dsn ? opt->dsn : "", CONNECT_TIMEOUT_S, "dsync", NULL};
	PGconn	   *conn = PQconnectdbParams(keys, values, 1);
	char		error[600];

	if (conn != NULL && PQstatus(conn) == CONNECTION_OK)
	{
		snprintf(r->database, sizeof(r->database), "%s", PQdb(conn));
		return conn;
	}
	snprintf(error, sizeof(error), "%s", conn ? PQerrorMessage(conn) : "out of memory");
	OneLine(error);
	SetResult(r, EXIT_UNAVAILABLE, "unreachable",
			  "the server cannot be reached: %s; check that it runs and that the connection "
			  "settings (--dsn, PGHOST, PGPORT, PGDATABASE) are right", error);
	PQfinish(conn);
	return NULL;
}

/*
 * QueryFailed
 *		A check query failed: the connection went, or the server refused.
 */
static void
QueryFailed(CheckResult *r, PGconn *conn, PGresult *res)
{
	const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
	char		error[600];

	snprintf(error, sizeof(error), "%s",
			 res && PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) ?
			 PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : PQerrorMessage(conn));
	OneLine(error);
	if (state != NULL && strcmp(state, "42501") == 0)
		SetResult(r, EXIT_NOPERM, "error", "could not read dsync's views: %s", error);
	else
		SetResult(r, EXIT_UNAVAILABLE, PQstatus(conn) == CONNECTION_OK ? "error" : "unreachable",
				  "could not read dsync's views: %s", error);
}

/*
 * CheckServed
 *		The served database's checks, once the views can be read: a worker
 *		slot, then the event queue.
 */
static void
CheckServed(CheckResult *r, PGconn *conn, const DsyncProbe *probe, double threshold)
{
	char	   *sql = SchemaSql(conn, probe, check_sql);
	PGresult   *res = PQexec(conn, sql);
	double		percent;

	free(sql);
	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1)
	{
		QueryFailed(r, conn, res);
		PQclear(res);
		return;
	}
	r->served = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
	r->events_lost = strtoll(PQgetvalue(res, 0, 1), NULL, 10);
	r->queue_size = strtoll(PQgetvalue(res, 0, 2), NULL, 10);
	r->queue_used = strtoll(PQgetvalue(res, 0, 3), NULL, 10);
	snprintf(r->state, sizeof(r->state), "%s", PQgetvalue(res, 0, 4));
	r->worker_pid = PQgetisnull(res, 0, 5) ? 0 : atoi(PQgetvalue(res, 0, 5));
	percent = r->queue_size > 0 ? 100.0 * r->queue_used / r->queue_size : 0;

	if (!r->served && strcmp(r->state, "no slot") == 0)
		SetResult(r, EXIT_NOT_SERVED, "not_served",
				  "database \"%s\" is not served: all dsync.max_databases (%s) slots are taken "
				  "by other databases, so expiries here are not announced; raise "
				  "dsync.max_databases in postgresql.conf and restart the server",
				  r->database, PQgetvalue(res, 0, 6));
	else if (!r->served && strcmp(r->state, "probe") == 0)
		SetResult(r, EXIT_NOT_SERVED, "not_served",
				  "database \"%s\" is not served yet: dsync has not looked at it since the "
				  "server started; try again in a moment", r->database);
	else if (!r->served)
		SetResult(r, EXIT_NOT_SERVED, "not_served",
				  "database \"%s\" is not served (state \"%s\"): no background worker could "
				  "be started for it, so expiries here are not announced; raise "
				  "max_worker_processes (a restart) or free worker slots, and see the server log",
				  r->database, r->state);
	else if (percent > threshold)
		SetResult(r, EXIT_QUEUE_FULL, "queue_full",
				  "the event queue is %.0f%% full (%lld of %lld bytes, above --queue-threshold "
				  "%g%%): the workers do not keep up or cannot run, and events are dropped "
				  "when it is full; see dsync_databases.queued_bytes, and raise "
				  "dsync.event_queue_size or dsync.max_workers",
				  percent, r->queue_used, r->queue_size, threshold);
	else
		SetResult(r, 0, "ok",
				  "database \"%s\" is served by dsync %s; the event queue is %.0f%% full, "
				  "%lld events lost since the counters started",
				  r->database, r->version, percent, r->events_lost);
	PQclear(res);
}

/*
 * PrintJsonString
 *		A C string as a JSON string (NULL as null).
 */
static void
PrintJsonString(const char *s)
{
	if (s == NULL)
	{
		printf("null");
		return;
	}
	putchar('"');
	for (const unsigned char *p = (const unsigned char *) s; *p; p++)
	{
		if (*p == '"' || *p == '\\')
			printf("\\%c", *p);
		else if (*p < 0x20)
			printf("\\u%04x", *p);
		else
			putchar(*p);
	}
	putchar('"');
}

/*
 * PrintJsonNumber
 *		A number, or null where it is unknown (negative).
 */
static void
PrintJsonNumber(const char *key, long long value)
{
	printf(",\"%s\":", key);
	if (value < 0)
		printf("null");
	else
		printf("%lld", value);
}

/*
 * PrintJsonBool
 *		true, false, or null where it is unknown (negative).
 */
static void
PrintJsonBool(const char *key, int value)
{
	printf(",\"%s\":%s", key, value < 0 ? "null" : value ? "true" : "false");
}

/*
 * PrintResult
 *		The outcome on stdout: one line, "STATUS: MESSAGE", or with --json
 *		one JSON object with the same and what was found.
 */
static void
PrintResult(const CheckResult *r, bool json, double threshold)
{
	if (!json)
	{
		printf("%s: %s\n", r->status, r->message);
		return;
	}
	printf("{\"status\":");
	PrintJsonString(r->status);
	printf(",\"healthy\":%s,\"exit_code\":%d,\"message\":", r->code == 0 ? "true" : "false",
		   r->code);
	PrintJsonString(r->message);
	printf(",\"database\":");
	PrintJsonString(r->database[0] ? r->database : NULL);
	PrintJsonBool("preloaded", r->preloaded);
	printf(",\"extension_version\":");
	PrintJsonString(r->version[0] ? r->version : NULL);
	PrintJsonBool("served", r->served);
	printf(",\"state\":");
	PrintJsonString(r->state[0] ? r->state : NULL);
	PrintJsonNumber("worker_pid", r->worker_pid > 0 ? r->worker_pid : -1);
	PrintJsonNumber("queue_used", r->queue_used);
	PrintJsonNumber("queue_size", r->queue_size);
	printf(",\"queue_threshold_percent\":%g", threshold);
	PrintJsonNumber("events_lost", r->events_lost);
	printf("}\n");
}

/*
 * CommandCheck
 *		dsync check: find the first thing that keeps dsync from working in
 *		the database, print it, and exit with its code (0: healthy).
 */
int
CommandCheck(Options *opt)
{
	CheckResult r;
	DsyncProbe	probe;
	PGconn	   *conn;
	char		problem[512];
	int			code;

	memset(&r, 0, sizeof(r));
	r.preloaded = r.served = -1;
	r.worker_pid = -1;
	r.queue_used = r.queue_size = r.events_lost = -1;
	conn = CheckConnect(opt, &r);
	if (conn != NULL)
	{
		if (!ProbeDsync(conn, &probe))
			QueryFailed(&r, conn, NULL);
		else
		{
			r.preloaded = probe.preloaded;
			snprintf(r.version, sizeof(r.version), "%s", probe.version);
			code = ProbeProblem(&probe, conn, problem, sizeof(problem));
			if (code == EXIT_NOT_PRELOADED)
				SetResult(&r, code, "not_preloaded", "%s", problem);
			else if (code != 0)
				SetResult(&r, code, "no_extension", "%s", problem);
			else
				CheckServed(&r, conn, &probe, opt->queue_threshold);
		}
		PQfinish(conn);
	}
	PrintResult(&r, opt->json, opt->queue_threshold);
	return r.code;
}
