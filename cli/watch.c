/*-------------------------------------------------------------------------
 *
 * watch.c
 *		dsync watch: printing notifications as they come, and catching
 *		up from the event log after a reconnect.
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dsync_cli.h"

/*
 * JsonField
 *		A crude extraction of a string or number field from a flat JSON
 *		object produced by dsync (for human-readable output only).
 */
static const char *
JsonField(const char *json, const char *field, char *buf, size_t len)
{
	char		key[64];
	const char *p;
	size_t		n = 0;

	snprintf(key, sizeof(key), "\"%s\":", field);
	p = strstr(json, key);
	if (p == NULL)
		return NULL;
	p += strlen(key);
	/* jsonb's text form (the event log's) has a space after the colon. */
	while (*p == ' ')
		p++;
	if (*p == '"')
	{
		p++;
		while (*p && *p != '"' && n + 1 < len)
		{
			if (*p == '\\' && p[1])
				p++;
			buf[n++] = *p++;
		}
	}
	else
		while (*p && *p != ',' && *p != '}' && n + 1 < len)
			buf[n++] = *p++;
	buf[n] = '\0';
	return buf;
}

/*
 * PrintEvent
 *		One line per event: the payload with --json, else a sentence.
 */
static void
PrintEvent(const char *payload, bool json)
{
	char		event[32], name[600], who[600], fencing[32], expires[64], reason[32];
	char		stamp[32];
	time_t		now = time(NULL);

	if (json)
	{
		printf("%s\n", payload);
		fflush(stdout);
		return;
	}
	strftime(stamp, sizeof(stamp), "%H:%M:%S", localtime(&now));
	if (!JsonField(payload, "event", event, sizeof(event)))
		strcpy(event, "?");
	if (!JsonField(payload, "lease", name, sizeof(name)) &&
		!JsonField(payload, "group", name, sizeof(name)) &&
		!JsonField(payload, "name", name, sizeof(name)))
		strcpy(name, "?");
	if (!JsonField(payload, "holder", who, sizeof(who)) &&
		!JsonField(payload, "member", who, sizeof(who)))
		who[0] = '\0';
	if (!JsonField(payload, "fencing", fencing, sizeof(fencing)))
		fencing[0] = '\0';
	if (!JsonField(payload, "expires_at", expires, sizeof(expires)))
		expires[0] = '\0';
	if (!JsonField(payload, "reason", reason, sizeof(reason)))
		reason[0] = '\0';

	printf("%s %-8s %s", stamp, event, name);
	if (who[0])
		printf(" %s %s", strcmp(event, "joined") == 0 || strcmp(event, "left") == 0 ?
			   "member" : "holder", who);
	if (fencing[0])
		printf(" fencing %s", fencing);
	if (strcmp(reason, "expired") == 0)
		printf(" (expired%s%s)", expires[0] ? " at " : "", expires);
	else if (reason[0])
		printf(" (%s)", reason);
	else if (expires[0] && strcmp(event, "expired") != 0)
		printf(" until %s", expires);
	printf("\n");
	fflush(stdout);
}

/*
 * ReadSender
 *		The process that sends this database's dsync notifications
 *		(dsync_stats.sender_pid): 0 if none runs now, -1 if the installed
 *		version cannot say (then every notification is taken as dsync's).
 *		Like every statement of watch's, it names the extension's objects
 *		with probe's schema and built-ins with pg_catalog, so that the
 *		search_path cannot put someone else's in their place.
 */
static int
ReadSender(PGconn *conn, const DsyncProbe *probe)
{
	char	   *sql = SchemaSql(conn, probe, "SELECT sender_pid FROM @extschema@.dsync_stats");
	PGresult   *res = PQexec(conn, sql);
	int			pid = -1;

	free(sql);

	if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1)
		pid = PQgetisnull(res, 0, 0) ? 0 : atoi(PQgetvalue(res, 0, 0));
	PQclear(res);
	return pid;
}

/*
 * IsSender
 *		Whether pid sent this database's dsync notifications lately
 *		(dsync_stats.sender_pids: the database's workers take turns, so the
 *		sender of a notification may have left by the time it is read): 1
 *		yes, 0 no, -1 if the installed version cannot say.
 */
static int
IsSender(PGconn *conn, const DsyncProbe *probe, int pid)
{
	char		pidtext[16];
	const char *params[1] = {pidtext};
	char	   *sql;
	PGresult   *res;
	int			result = -1;

	snprintf(pidtext, sizeof(pidtext), "%d", pid);
	sql = SchemaSql(conn, probe,
					"SELECT $1::integer = ANY (sender_pids) FROM @extschema@.dsync_stats");
	res = PQexecParams(conn, sql, 1, NULL, params, NULL, NULL, 0);
	free(sql);
	if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1)
		result = strcmp(PQgetvalue(res, 0, 0), "t") == 0 ? 1 : 0;
	PQclear(res);
	return result;
}

/*
 * FromSender
 *		Whether a notification was sent by dsync: any role may NOTIFY a
 *		dsync channel.  A pid we do not know makes us ask again, as the
 *		sender changes whenever a worker comes to the database.
 */
static bool
FromSender(PGconn *conn, const DsyncProbe *probe, int *sender, int be_pid)
{
	int			known;

	if (*sender < 0 || be_pid == *sender)
		return true;
	known = IsSender(conn, probe, be_pid);
	if (known < 0)
	{
		/* Before 1.2: only the current sender is known. */
		*sender = ReadSender(conn, probe);
		known = *sender < 0 || be_pid == *sender;
	}
	if (known)
	{
		*sender = be_pid;
		return true;
	}
	Note("ignoring a notification from process %d, which is not dsync's sender", be_pid);
	return false;
}

/*
 * EventSeq
 *		The seq of an event's payload, 0 if it has none.
 */
static long long
EventSeq(const char *payload)
{
	char		buf[32];

	return JsonField(payload, "seq", buf, sizeof(buf)) ? strtoll(buf, NULL, 10) : 0;
}

/*
 * WatchStart
 *		The seq to resume after if the first connection drops: the newest
 *		event the log held before we listened, or the last number handed
 *		out if it keeps none (-1 if the installed version has no log).
 */
static long long
WatchStart(PGconn *conn, const DsyncProbe *probe)
{
	char	   *sql = SchemaSql(conn, probe,
								"SELECT GREATEST(COALESCE((SELECT seq FROM @extschema@.dsync_event_log"
								"                          ORDER BY seq DESC LIMIT 1), 0),"
								"                @extschema@.dsync_events_horizon())");
	PGresult   *res = PQexec(conn, sql);
	long long	start = -1;

	free(sql);

	if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1)
		start = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
	PQclear(res);
	return start;
}

/*
 * WatchCheckAway
 *		The server logs events for dsync.event_retention after the last
 *		watcher leaves, and no longer: a watcher away for longer may have
 *		missed events the log never had.  Say so.
 */
static void
WatchCheckAway(PGconn *conn, const Options *opt, int64_t lost_ms)
{
	PGresult   *res = PQexec(conn, "SELECT pg_catalog.date_part('epoch', "
							 "pg_catalog.current_setting('dsync.event_retention')::interval)");
	double		away = (NowMs() - lost_ms) / 1000.0;

	if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 &&
		away >= atof(PQgetvalue(res, 0, 0)))
		Note("disconnected for %.0f s, longer than dsync.event_retention (%s s): "
			 "events of \"%s\" may have been missed", away, PQgetvalue(res, 0, 0), opt->name);
	PQclear(res);
}

/*
 * WatchCatchUp
 *		After a reconnect, now that we listen again: print the events of the
 *		name sent after *last_seq (dsync_events_since), and, after a
 *		reconnect (lost_ms: when the connection was lost; -1 on the first
 *		connection), say so if some may be gone from the log.
 *		Notifications that arrive meanwhile repeat what is printed here;
 *		the caller skips them by seq.
 */
static void
WatchCatchUp(PGconn *conn, const DsyncProbe *probe, const Options *opt, long long *last_seq,
			 int64_t lost_ms)
{
	bool		reconnect = lost_ms >= 0;
	char		after[32];
	const char *params[2] = {after, opt->name};
	char	   *sql;
	PGresult   *res;
	long long	horizon;
	int			n;

	snprintf(after, sizeof(after), "%lld", *last_seq);
	/* One statement, one snapshot: no prune can come between the two. */
	sql = SchemaSql(conn, probe,
					"SELECT h.h, e.seq, e.payload::pg_catalog.text"
					"  FROM @extschema@.dsync_events_horizon() AS h(h)"
					"  LEFT JOIN @extschema@.dsync_events_since($1, ARRAY[$2]) AS e ON true"
					" ORDER BY e.seq");
	res = PQexecParams(conn, sql, 2, NULL, params, NULL, NULL, 0);
	free(sql);
	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) < 1)
	{
		Note("could not read the event log to catch up: %s", PQerrorMessage(conn));
		PQclear(res);
		return;
	}
	horizon = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
	if (reconnect && horizon > *last_seq)
		Note("events sent while disconnected (seq %lld to %lld) are no longer kept; "
			 "some of \"%s\" may have been missed (raise dsync.event_retention)",
			 *last_seq + 1, horizon, opt->name);
	else if (reconnect)
		WatchCheckAway(conn, opt, lost_ms);
	n = PQgetisnull(res, 0, 1) ? 0 : PQntuples(res);
	if (n > 0 && !opt->json)
		Note("catching up with %d events sent while disconnected", n);
	for (int i = 0; i < n; i++)
	{
		PrintEvent(PQgetvalue(res, i, 2), opt->json);
		*last_seq = strtoll(PQgetvalue(res, i, 1), NULL, 10);
	}
	if (horizon > *last_seq)
		*last_seq = horizon;
	PQclear(res);
}

/*
 * CommandWatch
 *		dsync watch: LISTEN on the name's channel and print each event that
 *		dsync sent; reconnect if the connection drops, and then catch up
 *		from the event log with what was sent meanwhile, each event once.
 */
int
CommandWatch(Options *opt)
{
	long long	last_seq = -1;	/* -1: not connected yet, or no log */
	bool		connected_before = false;
	int64_t		lost_ms = -1;	/* when the last connection was lost */
	DsyncProbe	probe;			/* read once: its schema for every reconnect */

	for (;;)
	{
		PGconn	   *conn = Connect(opt, false);
		const char *params[1] = {opt->name};
		PGresult   *res;
		char	   *sql;
		bool		timed_out;
		int			sender;

		if (conn == NULL)
		{
			int			signo;

			sleep(1);
			if ((signo = ReadSignal()) != 0 && signo != SIGCHLD)
				return 0;
			continue;
		}
		/*
		 * The first time, look whether dsync is there at all: where it is
		 * not, exit 78 with status's line and no ERROR in the server log.
		 */
		if (!connected_before)
			RequireDsync(conn, &probe, NowMs() + DEFAULT_TIMEOUT_MS, 0);
		sql = SchemaSql(conn, &probe, "SELECT @extschema@.dsync_channel($1)");
		res = Query(conn, sql, 1, params, -1, NULL, NULL, &timed_out);
		free(sql);
		if (res == NULL || PQresultStatus(res) != PGRES_TUPLES_OK)
			FatalResult("could not find the channel to watch", conn, res);
		{
			char	   *ident = PQescapeIdentifier(conn, PQgetvalue(res, 0, 0),
												   strlen(PQgetvalue(res, 0, 0)));

			sql = malloc(strlen(ident) + 16);
			sprintf(sql, "LISTEN %s", ident);
			PQfreemem(ident);
		}
		PQclear(res);
		CheckPooler(opt, conn, true);
		sender = ReadSender(conn, &probe);
		if (sender < 0)
			Note("this version of the extension does not say which process sends "
				 "its notifications: run ALTER EXTENSION dsync UPDATE");
		/* Where the log stands before we listen: nothing after it is missed. */
		if (!connected_before)
			last_seq = WatchStart(conn, &probe);
		res = PQexec(conn, sql);
		free(sql);
		if (PQresultStatus(res) != PGRES_COMMAND_OK)
			FatalResult("could not listen", conn, res);
		PQclear(res);
		if (!opt->json)
			Note("watching \"%s\"", opt->name);
		if (last_seq >= 0)
			WatchCatchUp(conn, &probe, opt, &last_seq, connected_before ? lost_ms : -1);
		else if (connected_before)
			Note("events sent while disconnected were missed: this version of the "
				 "extension keeps no event log (run ALTER EXTENSION dsync UPDATE)");
		connected_before = true;

		for (;;)
		{
			struct pollfd fds[2];
			PGnotify   *notify;
			int			signo;

			fds[0].fd = PQsocket(conn);
			fds[0].events = POLLIN;
			fds[1].fd = signal_pipe[0];
			fds[1].events = POLLIN;
			if (poll(fds, 2, -1) < 0 && errno != EINTR)
				Fatal(EXIT_OSERR, "poll failed: %s", strerror(errno));
			while ((signo = ReadSignal()) != 0)
				if (signo != SIGCHLD)
				{
					PQfinish(conn);
					return 0;
				}
			if (PQconsumeInput(conn) == 0)
			{
				Note("connection lost: %s", PQerrorMessage(conn));
				lost_ms = NowMs();
				break;
			}
			while ((notify = PQnotifies(conn)) != NULL)
			{
				if (FromSender(conn, &probe, &sender, notify->be_pid))
				{
					long long	seq = EventSeq(notify->extra);

					/* Already printed while catching up: skip. */
					if (seq == 0 || seq > last_seq)
						PrintEvent(notify->extra, opt->json);
					if (last_seq >= 0 && seq > last_seq)
						last_seq = seq;
				}
				PQfreemem(notify);
			}
		}
		PQfinish(conn);
	}
}
