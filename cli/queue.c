/*-------------------------------------------------------------------------
 *
 * queue.c
 *		Waiting for a lease in its line without a running statement
 *		(dsync_queue, dsync_claim, dsync_unqueue): the tool's connection
 *		stays idle while it waits, so through a pooler in session mode or
 *		on a busy server a waiting tool costs no active backend.  The
 *		server grants the lease to us when our turn comes and announces
 *		it on a channel of our own; between announcements we renew our
 *		place every third of the ttl with dsync_claim, which also says
 *		whether we were granted (announcements are only hints).
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dsync_cli.h"

/* Our channel's key: one per process (dsync_queue's channel argument). */
static char queue_key[64];

/* The server's dsync.claim_window: a missed announcement costs at most it. */
static int64_t claim_window_ms = 2000;

/* A signal that came while no wait was under way, for the next one. */
static int	early_signo;

/*
 * QueueListen
 *		LISTEN on the channel grants to us are announced on, and read the
 *		server's claim window.  1 if done; 0 if the server has no
 *		dsync_queue (an extension older than 1.5: the caller then waits in
 *		a backend); -1 if the connection failed meanwhile.  Another error
 *		is fatal, as in Acquire.  probe gives the extension's schema.
 */
int
QueueListen(PGconn *conn, const DsyncProbe *probe)
{
	const char *params[1] = {queue_key};
	PGresult   *res;
	bool		timed_out;
	char	   *ident;
	char	   *sql;
	const char *state;

	if (queue_key[0] == '\0')
	{
		/* Two tools on two hosts may share a pid: add the clock. */
		srand((unsigned int) NowMs() ^ ((unsigned int) getpid() << 12));
		snprintf(queue_key, sizeof(queue_key), "cli-%d-%08x", (int) getpid(),
				 (unsigned int) rand());
	}
	sql = SchemaSql(conn, probe,
					"SELECT @extschema@.dsync_queue_channel($1),"
					"       pg_catalog.date_part('epoch',"
					"           pg_catalog.current_setting('dsync.claim_window')::interval) * 1000");
	res = Query(conn, sql, 1, params, NowMs() + 10000, RememberSignal, &early_signo, &timed_out);
	free(sql);
	if (res == NULL)
		return -1;
	state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		if (state && strcmp(state, "42883") == 0)
		{
			PQclear(res);
			return 0;
		}
		FatalResult("could not get in line", conn, res);
	}
	if (atof(PQgetvalue(res, 0, 1)) >= 1)
		claim_window_ms = (int64_t) atof(PQgetvalue(res, 0, 1));
	ident = PQescapeIdentifier(conn, PQgetvalue(res, 0, 0), strlen(PQgetvalue(res, 0, 0)));
	PQclear(res);
	if (ident == NULL)
		return -1;
	sql = malloc(strlen(ident) + 8);
	if (sql == NULL)
		Fatal(EXIT_OSERR, "out of memory");
	sprintf(sql, "LISTEN %s", ident);
	PQfreemem(ident);
	res = Query(conn, sql, 0, NULL, NowMs() + 10000, RememberSignal, &early_signo, &timed_out);
	free(sql);
	if (res == NULL)
		return -1;
	if (PQresultStatus(res) != PGRES_COMMAND_OK)
		FatalResult("could not listen for grants", conn, res);
	PQclear(res);
	return 1;
}

/*
 * QueueJoin
 *		Take our place in the line (or renew it: queuing again keeps it).
 *		Returns the token if the lease is ours now, else NULL.
 */
static char *
QueueJoin(PGconn *conn, const Options *opt, const char *lease, Holding *h,
		  int *signo, bool *conn_lost, bool *refused)
{
	char		ttl[64];
	const char *params[5];

	params[0] = lease;
	params[1] = opt->holder;
	params[2] = IntervalParam(opt->ttl_ms, ttl, sizeof(ttl));
	params[3] = queue_key;
	params[4] = opt->shared ? "true" : "false";
	return AcquireToken(conn, h, "@extschema@.dsync_queue($1, $2, $3::interval, $4, $5::boolean)",
						5, params, lease, signo, conn_lost, refused);
}

/*
 * QueueClaim
 *		Ask where we stand: 'q' (still queued; the place is renewed), 'g'
 *		(granted: *token set, and the grant is now claimed) or 'x' (gone
 *		from the line: queue again); 0 if the connection went.
 */
static char
QueueClaim(PGconn *conn, const Options *opt, const char *lease, Holding *h,
		   char **token, int *signo, bool *conn_lost)
{
	const char *params[2] = {lease, opt->holder};
	PGresult   *res;
	char	   *sql;
	int64_t		sent = NowMs();
	char		state;

	sql = SchemaSql(conn, &h->probe,
					"SELECT state, fencing, pg_catalog.date_part('epoch', expires_in) * 1000"
					"  FROM @extschema@.dsync_claim($1, $2)");
	res = RunAcquiring(conn, sql, 2, params, lease, signo, conn_lost, NULL);
	free(sql);
	if (res == NULL)
		return 0;
	state = PQgetvalue(res, 0, 0)[0];
	if (state == 'g')
	{
		*token = strdup(PQgetvalue(res, 0, 1));
		SetExpiry(h, sent, atof(PQgetvalue(res, 0, 2)));
	}
	else if (state != 'q')
		state = 'x';
	PQclear(res);
	return state;
}

/*
 * QueueLeave
 *		Leave the line (a grant we did not claim is passed on).  Best
 *		effort: a place nobody renews lapses at its ttl anyway.
 */
static void
QueueLeave(PGconn *conn, const Options *opt, const char *lease, const Holding *h)
{
	const char *params[2] = {lease, opt->holder};
	PGresult   *res;
	char	   *sql;
	bool		timed_out;

	if (PQstatus(conn) != CONNECTION_OK)
		return;
	sql = SchemaSql(conn, &h->probe, "SELECT @extschema@.dsync_unqueue($1, $2)");
	res = Query(conn, sql, 2, params, NowMs() + 5000, RememberSignal, &early_signo,
				&timed_out);
	free(sql);
	if (res)
		PQclear(res);
}

/*
 * QueueWaitIdle
 *		Sleep on the idle connection until a notification, a signal or
 *		wake_ms.  False if the connection went.
 */
static bool
QueueWaitIdle(PGconn *conn, int64_t wake_ms, int *signo)
{
	struct pollfd fds[2];
	int64_t		left = wake_ms - NowMs();
	int			sig;
	PGnotify   *notify;
	bool		any = false;

	/* One may have come in with the last answer. */
	while ((notify = PQnotifies(conn)) != NULL)
	{
		any = true;
		PQfreemem(notify);
	}
	if (any || left <= 0)
		return true;
	fds[0].fd = PQsocket(conn);
	fds[0].events = POLLIN;
	fds[0].revents = 0;
	fds[1].fd = signal_pipe[0];
	fds[1].events = POLLIN;
	fds[1].revents = 0;
	if (poll(fds, 2, (int) (left > 1000000 ? 1000000 : left)) < 0 && errno != EINTR)
		Fatal(EXIT_OSERR, "poll failed: %s", strerror(errno));
	if (fds[1].revents & POLLIN)
		while ((sig = ReadSignal()) != 0)
			RememberSignal(sig, signo);
	if ((fds[0].revents & (POLLIN | POLLERR | POLLHUP)) && PQconsumeInput(conn) == 0)
		return false;
	while ((notify = PQnotifies(conn)) != NULL)
		PQfreemem(notify);
	return true;
}

/*
 * QueueAcquire
 *		Acquire's contract (token, or NULL if wait_ms ran out or a signal
 *		came), waiting in the line instead of in a backend.  With
 *		keep_place, a wait that runs out leaves us in line, for a caller
 *		that comes back at once (elect's campaign); otherwise, and on a
 *		signal, we leave it.  NULL with *refused set if the server would
 *		not queue us (queueing turned off, or its table full): the caller
 *		waits in a backend instead.
 *
 * Between announcements we ask every third of the ttl (which keeps our
 * place), and at least twice a claim window: a grant whose announcement
 * we missed is still ours when we ask.
 */
char *
QueueAcquire(PGconn *conn, const Options *opt, const char *lease, int64_t wait_ms,
			 Holding *h, int *signo, bool *conn_lost, bool keep_place, bool *refused)
{
	int64_t		deadline = wait_ms < 0 ? -1 : NowMs() + wait_ms;
	int64_t		every = opt->ttl_ms / 3;
	char	   *token;

	if (claim_window_ms / 2 < every)
		every = claim_window_ms / 2 > 100 ? claim_window_ms / 2 : 100;
	*signo = early_signo;
	early_signo = 0;
	*refused = false;
	token = *signo ? NULL : QueueJoin(conn, opt, lease, h, signo, conn_lost, refused);
	while (token == NULL && !*refused && !(conn_lost && *conn_lost))
	{
		int64_t		now = NowMs();
		int64_t		wake = now + every;
		char		state;

		if (*signo || (deadline >= 0 && now >= deadline))
		{
			if (*signo || !keep_place)
				QueueLeave(conn, opt, lease, h);
			return NULL;
		}
		if (deadline >= 0 && deadline < wake)
			wake = deadline;
		if (!QueueWaitIdle(conn, wake, signo))
		{
			if (conn_lost)
			{
				Note("connection lost while waiting: %s", PQerrorMessage(conn));
				*conn_lost = true;
				return NULL;
			}
			Fatal(EXIT_UNAVAILABLE, "connection lost while acquiring: %s",
				  PQerrorMessage(conn));
		}
		if (*signo)
			continue;			/* leave the line, above */
		state = QueueClaim(conn, opt, lease, h, &token, signo, conn_lost);
		if (state == 'x')
			token = QueueJoin(conn, opt, lease, h, signo, conn_lost, refused);
	}
	return token;
}
