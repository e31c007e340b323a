/*-------------------------------------------------------------------------
 *
 * check.c
 *		dsync check: a health probe for load balancers, Kubernetes exec
 *		probes and monitoring.  It exits 0 when dsync works in the
 *		database, and with a code of its own for each thing that keeps it
 *		from working, first found first:
 *
 *		69	the server cannot be reached, did not answer within --timeout
 *			(10 s), or a query failed (77 if permission was denied)
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
 * Unreachable
 *		The server could not be reached, or not in time: error is
 *		ConnectWithin's line.
 */
static void
Unreachable(CheckResult *r, const char *error, bool timed_out, const Options *opt)
{
	if (timed_out)
		SetResult(r, EXIT_UNAVAILABLE, "timeout",
				  "the server did not accept the connection within --timeout %gs; check "
				  "that it runs and is not overloaded", opt->timeout_ms / 1000.0);
	else
		SetResult(r, EXIT_UNAVAILABLE, "unreachable",
				  "the server cannot be reached: %s; check that it runs and that the connection "
				  "settings (--dsn, PGHOST, PGPORT, PGDATABASE) are right", error);
}

/*
 * QueryFailed
 *		A check query failed (res, NULL where there is no result): the
 *		time ran out, the connection went, or the server refused.  A
 *		refusal for want of a privilege is 77, as with the other
 *		commands, whichever query met it; what says what was being read.
 */
static void
QueryFailed(CheckResult *r, const char *what, PGconn *conn, PGresult *res, bool timed_out,
			const Options *opt)
{
	const char *state;
	char		error[600];

	if (timed_out)
	{
		CancelStatement(conn);
		SetResult(r, EXIT_UNAVAILABLE, "timeout",
				  "the server did not answer within --timeout %gs: it is overloaded, or "
				  "the query waits for a lock; see pg_stat_activity", opt->timeout_ms / 1000.0);
		return;
	}
	snprintf(error, sizeof(error), "%s", ResultError(conn, res, &state));
	OneLine(error);
	if (state != NULL && strcmp(state, "42501") == 0)
		SetResult(r, EXIT_NOPERM, "error", "could not read %s: %s", what, error);
	else
		SetResult(r, EXIT_UNAVAILABLE, PQstatus(conn) == CONNECTION_OK ? "error" : "unreachable",
				  "could not read %s: %s", what, error);
}

/*
 * CheckServed
 *		The served database's checks, once the views can be read: a worker
 *		slot, then the event queue.  The query ends by deadline_ms, so that
 *		a view locked by someone else cannot hang the probe.
 */
static void
CheckServed(CheckResult *r, PGconn *conn, const DsyncProbe *probe, const Options *opt,
			int64_t deadline_ms)
{
	char	   *sql = SchemaSql(conn, probe, check_sql);
	double		threshold = opt->queue_threshold;
	bool		timed_out;
	PGresult   *res = Query(conn, sql, 0, NULL, deadline_ms, NULL, NULL, &timed_out);
	double		percent;

	free(sql);
	if (res == NULL || PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1)
	{
		QueryFailed(r, "dsync's views", conn, res, timed_out, opt);
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
 * Utf8Length
 *		The length of the well-formed UTF-8 sequence at p (1 to 4), or 0 if
 *		none starts there (a stray or overlong byte, a surrogate, a cut
 *		sequence).
 */
static int
Utf8Length(const unsigned char *p)
{
	int			n;
	unsigned int cp;

	if (*p < 0x80)
		return 1;
	if (*p >= 0xc2 && *p <= 0xdf)
		n = 2;
	else if (*p >= 0xe0 && *p <= 0xef)
		n = 3;
	else if (*p >= 0xf0 && *p <= 0xf4)
		n = 4;
	else
		return 0;
	cp = *p & (0x7f >> n);
	for (int i = 1; i < n; i++)
	{
		if ((p[i] & 0xc0) != 0x80)
			return 0;
		cp = (cp << 6) | (p[i] & 0x3f);
	}
	if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
		(cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return n;
}

/*
 * PrintJsonString
 *		A C string as a JSON string (NULL as null).  The connection's
 *		client_encoding is UTF8, but libpq's own messages (a host name, the
 *		locale's text) need not be: a byte that is not part of well-formed
 *		UTF-8 becomes U+FFFD, so that the output is always valid JSON.
 *		Control characters are escaped, as JSON requires.
 */
static void
PrintJsonString(const char *s)
{
	const unsigned char *p = (const unsigned char *) s;

	if (s == NULL)
	{
		printf("null");
		return;
	}
	putchar('"');
	while (*p)
	{
		int			n = Utf8Length(p);

		if (*p == '"' || *p == '\\')
			printf("\\%c", *p);
		else if (*p < 0x20 || *p == 0x7f)
			printf("\\u%04x", *p);
		else if (n == 0)
			printf("\\ufffd");
		else
			fwrite(p, 1, n, stdout);
		p += n > 0 ? n : 1;
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
 *		the database, print it, and exit with its code (0: healthy).  The
 *		whole run, connecting included, ends within --timeout: a probe
 *		that hangs on a stuck server would hang its load balancer's or
 *		Kubernetes' check with it.
 */
int
CommandCheck(Options *opt)
{
	CheckResult r;
	DsyncProbe	probe;
	PGconn	   *conn;
	PGresult   *failed;
	char		problem[600];
	int64_t		deadline = NowMs() + opt->timeout_ms;
	bool		timed_out;
	int			code;

	memset(&r, 0, sizeof(r));
	r.preloaded = r.served = -1;
	r.worker_pid = -1;
	r.queue_used = r.queue_size = r.events_lost = -1;
	conn = ConnectWithin(opt, deadline, problem, sizeof(problem), &timed_out);
	if (conn == NULL)
		Unreachable(&r, problem, timed_out, opt);
	else
	{
		snprintf(r.database, sizeof(r.database), "%s", PQdb(conn));
		if (!ProbeDsync(conn, &probe, deadline, &failed, &timed_out))
		{
			QueryFailed(&r, "the catalogs", conn, failed, timed_out, opt);
			PQclear(failed);
		}
		else
		{
			r.preloaded = probe.preloaded;
			snprintf(r.version, sizeof(r.version), "%s", probe.version);
			code = ProbeProblem(&probe, conn, DSYNC_MIN_VERSION_NUM, problem, sizeof(problem));
			if (code == EXIT_NOT_PRELOADED)
				SetResult(&r, code, "not_preloaded", "%s", problem);
			else if (code != 0)
				SetResult(&r, code, "no_extension", "%s", problem);
			else
				CheckServed(&r, conn, &probe, opt, deadline);
		}
		PQfinish(conn);
	}
	PrintResult(&r, opt->json, opt->queue_threshold);
	return r.code;
}
