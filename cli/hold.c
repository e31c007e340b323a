/*-------------------------------------------------------------------------
 *
 * hold.c
 *		Running the command while holding a lease: renewing it every
 *		third of its ttl, listening for its loss, and stopping the command
 *		in time when it is lost or cannot be renewed.
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
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "dsync_cli.h"

/*
 * ReapChild
 *		Collect the child's exit, if it has exited.
 */
static void
ReapChild(Holding *h)
{
	int			status;

	if (h->child <= 0 || h->exited)
		return;
	if (waitpid(h->child, &status, WNOHANG) == h->child)
	{
		h->exited = true;
		h->status = status;
	}
}

/*
 * HoldingSignal
 *		INT, TERM and HUP go to the child; CHLD means it may have exited.
 */
void
HoldingSignal(int signo, void *arg)
{
	Holding    *h = arg;

	if (signo == SIGCHLD)
	{
		ReapChild(h);
		return;
	}
	if (h->child > 0 && !h->exited)
		kill(-h->child, signo);
	h->stop_signal = signo;
}

/*
 * StopChild
 *		The lease is lost (or about to be): SIGTERM now, SIGKILL after the
 *		grace period, or at kill_by if that is sooner.
 */
static void
StopChild(Holding *h, const char *why, int64_t kill_by)
{
	int64_t		kill_at = NowMs() + h->opt->grace_ms;

	if (h->lost || h->child <= 0 || h->exited)
	{
		h->lost = true;
		return;
	}
	Note("%s; stopping the command (pid %d)", why, (int) h->child);
	h->lost = true;
	kill(-h->child, SIGTERM);
	h->kill_at = (kill_by >= 0 && kill_by < kill_at) ? kill_by : kill_at;
}

/*
 * StartChild
 *		Run the command with the lease's environment.
 */
void
StartChild(Holding *h, const char *token)
{
	pid_t		pid;

	pid_t		parent = getpid();

	fflush(stdout);
	fflush(stderr);
	pid = fork();
	if (pid < 0)
		Fatal(EXIT_OSERR, "could not fork: %s", strerror(errno));
	if (pid == 0)
	{
		SetSignalHandlers(SIG_DFL, SIG_DFL);
#ifdef __linux__
		/*
		 * If dsync itself is killed (SIGKILL, OOM), nobody renews the lease
		 * any more: the command must not outlive it.
		 */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(EXIT_OSERR);
#endif
		/* Its own process group, so that stopping it stops what it started. */
		setpgid(0, 0);
		setenv("DSYNC_LEASE", h->lease, 1);
		setenv("DSYNC_HOLDER", h->opt->holder, 1);
		setenv("DSYNC_FENCING_TOKEN", token, 1);
		execvp(h->opt->command[0], h->opt->command);
		fprintf(stderr, "%s: could not run \"%s\": %s\n", progname,
				h->opt->command[0], strerror(errno));
		_exit(127);
	}
	setpgid(pid, pid);			/* also here: no race with the first kill */
	h->child = pid;
	h->exited = false;
	h->lost = false;
	h->kill_at = -1;
}

/*
 * SetExpiry
 *		Note the lease's remaining time, as the server measured it, from
 *		a request sent at sent_ms; plan the next renewal.
 */
void
SetExpiry(Holding *h, int64_t sent_ms, double left_ms)
{
	h->expires_ms = sent_ms + (int64_t) left_ms;
	h->renew_at = NowMs() + h->opt->ttl_ms / 3;
}

/*
 * AcquireToken
 *		Run call, a dsync function of $1 lease and $2 holder that returns
 *		the fencing token or NULL (dsync_acquire, dsync_acquire_shared,
 *		dsync_queue) written with @extschema@, as RunAcquiring does, and
 *		return the token (malloc'd; NULL: not granted, or as RunAcquiring
 *		says).  lock.c and queue.c acquire through this one statement,
 *		which also reads the time the lease has left and how long the
 *		statement had run when that was measured (it may have waited),
 *		both by the server's clock: the expiry is noted in h from them.
 *		Like every statement of the tool's, it names each function with
 *		its schema (h->probe's, or pg_catalog), so that a schema of
 *		someone else's early in the search_path cannot stand in for one.
 */
char *
AcquireToken(PGconn *conn, Holding *h, const char *call, int nparams,
			 const char *const *params, const char *lease, int *signo,
			 bool *conn_lost, bool *refused)
{
	char		sql[640];
	char	   *qualified;
	PGresult   *res;
	char	   *token;
	int64_t		sent = NowMs();

	snprintf(sql, sizeof(sql),
			 "SELECT t, pg_catalog.date_part('epoch', l.expires_at - pg_catalog.clock_timestamp()) * 1000,"
			 "       pg_catalog.date_part('epoch', pg_catalog.clock_timestamp()"
			 "                                     - pg_catalog.statement_timestamp()) * 1000"
			 "  FROM %s AS t"
			 "  LEFT JOIN @extschema@.dsync_leases l ON l.lease = $1 AND l.holder = $2", call);
	qualified = SchemaSql(conn, &h->probe, sql);
	res = RunAcquiring(conn, qualified, nparams, params, lease, signo, conn_lost, refused);
	free(qualified);
	if (res == NULL)
		return NULL;
	if (PQgetisnull(res, 0, 0))
	{
		PQclear(res);
		return NULL;
	}
	token = strdup(PQgetvalue(res, 0, 0));
	SetExpiry(h, sent + (int64_t) atof(PQgetvalue(res, 0, 2)),
			  PQgetisnull(res, 0, 1) ? (double) h->opt->ttl_ms :
			  atof(PQgetvalue(res, 0, 1)));
	PQclear(res);
	return token;
}

/*
 * KillDeadline
 *		When a command that can no longer be covered by the lease must be
 *		dead: a safety margin before the lease expires.
 */
static int64_t
KillDeadline(const Holding *h)
{
	int64_t		margin = h->opt->ttl_ms / 10;

	if (margin > 1000)
		margin = 1000;
	return h->expires_ms - margin;
}

/*
 * TermDeadline
 *		When to tell the command to stop if renewals keep failing: early
 *		enough for its grace period to end by KillDeadline.
 */
static int64_t
TermDeadline(const Holding *h)
{
	return KillDeadline(h) - h->opt->grace_ms;
}

/*
 * The renewal: the time the lease has left and how long the statement had
 * run when that was measured, as in AcquireToken; elect adds its join.
 */
#define RENEW_SQL \
	"SELECT pg_catalog.date_part('epoch', @extschema@.dsync_renew($1, $2, $3::interval)" \
	"                                     - pg_catalog.clock_timestamp()) * 1000," \
	" pg_catalog.date_part('epoch', pg_catalog.clock_timestamp()" \
	"                               - pg_catalog.statement_timestamp()) * 1000"

/*
 * Renew
 *		Renew the lease (and, for elect, the membership).  Returns 1 if
 *		renewed, 0 if the lease is gone, -1 if the server could not answer
 *		(the connection is closed then).
 */
static int
Renew(Holding *h, const char *group)
{
	char		ttl[64];
	const char *params[4];
	PGresult   *res;
	char	   *sql;
	bool		timed_out;
	int64_t		sent = NowMs();
	int64_t		deadline = TermDeadline(h);
	int			rc;

	/* Give the server a fair chance, but never past the kill deadline. */
	if (deadline < sent + h->opt->ttl_ms / 3)
		deadline = sent + h->opt->ttl_ms / 3;
	if (deadline > KillDeadline(h))
		deadline = KillDeadline(h);
	params[0] = h->lease;
	params[1] = h->opt->holder;
	params[2] = IntervalParam(h->opt->ttl_ms, ttl, sizeof(ttl));
	params[3] = h->opt->info;
	sql = SchemaSql(h->conn, &h->probe, group ?
					RENEW_SQL ", @extschema@.dsync_join($1, $2, $3::interval, $4::pg_catalog.jsonb)" :
					RENEW_SQL);
	res = Query(h->conn, sql, group ? 4 : 3, params, deadline, HoldingSignal, h, &timed_out);
	free(sql);
	if (res == NULL || PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		if (res)
		{
			Note("renewal failed: %s", PQresultErrorMessage(res));
			PQclear(res);
		}
		else if (timed_out)
			Note("renewal did not answer in time");
		else
			Note("connection lost: %s", PQerrorMessage(h->conn));
		PQfinish(h->conn);
		h->conn = NULL;
		return -1;
	}
	if (PQgetisnull(res, 0, 0))
		rc = 0;
	else
	{
		PGnotify   *notify;

		SetExpiry(h, sent + (int64_t) atof(PQgetvalue(res, 0, 1)), atof(PQgetvalue(res, 0, 0)));
		rc = 1;
		/* A notification read along with the answer: look again at once. */
		while ((notify = PQnotifies(h->conn)) != NULL)
		{
			PQfreemem(notify);
			h->renew_at = NowMs();
		}
	}
	PQclear(res);
	return rc;
}

/*
 * Listen
 *		LISTEN on the lease's channel, so that a release, expiry or
 *		takeover of it by anybody is noticed at once, not at the next
 *		renewal.
 */
static void
Listen(Holding *h)
{
	const char *params[1] = {h->lease};
	PGresult   *res;
	bool		timed_out;
	char	   *ident;
	char	   *sql;
	int64_t		deadline;

	if (h->conn == NULL)
		return;
	deadline = NowMs() + 5000;
	if (h->expires_ms > 0 && KillDeadline(h) < deadline)
		deadline = KillDeadline(h);
	sql = SchemaSql(h->conn, &h->probe, "SELECT @extschema@.dsync_channel($1)");
	res = Query(h->conn, sql, 1, params, deadline, HoldingSignal, h, &timed_out);
	free(sql);
	if (res == NULL || PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		if (res)
			PQclear(res);
		/* A query still running would get in the renewal's way. */
		PQfinish(h->conn);
		h->conn = NULL;
		return;
	}
	ident = PQescapeIdentifier(h->conn, PQgetvalue(res, 0, 0), strlen(PQgetvalue(res, 0, 0)));
	PQclear(res);
	if (ident == NULL)
		return;
	sql = malloc(strlen(ident) + 8);
	sprintf(sql, "LISTEN %s", ident);
	PQfreemem(ident);
	res = Query(h->conn, sql, 0, NULL, deadline, HoldingSignal, h, &timed_out);
	free(sql);
	if (res)
		PQclear(res);
	else
	{
		PQfinish(h->conn);
		h->conn = NULL;
	}
}

/*
 * CheckNotifications
 *		Something arrived on the idle connection: a notification about the
 *		lease (renew now, which tells whether we still hold it) or the
 *		connection's end (reconnect and renew now).
 */
static void
CheckNotifications(Holding *h)
{
	PGnotify   *notify;
	bool		any = false;

	if (PQconsumeInput(h->conn) == 0)
	{
		Note("connection lost: %s", PQerrorMessage(h->conn));
		PQfinish(h->conn);
		h->conn = NULL;
		h->renew_at = NowMs();
		return;
	}
	while ((notify = PQnotifies(h->conn)) != NULL)
	{
		any = true;
		PQfreemem(notify);
	}
	if (any)
		h->renew_at = NowMs();
}

/*
 * HoldWhileRunning
 *		The main loop while the command runs: renew on time, reconnect,
 *		stop the command if the lease is lost or about to be, forward
 *		signals.  Returns when the child has exited.
 */
void
HoldWhileRunning(Holding *h, const char *group)
{
	h->renew_failing = false;
	Listen(h);
	while (!h->exited)
	{
		struct pollfd fds[2];
		int64_t		now = NowMs();
		int64_t		wake = h->renew_at;
		int			signo;

		ReapChild(h);
		if (h->exited)
			break;

		if (h->lost && h->kill_at >= 0 && now >= h->kill_at)
		{
			Note("the command did not stop in time; killing it");
			kill(-h->child, SIGKILL);
			h->kill_at = -1;
		}
		if (!h->lost && (now >= KillDeadline(h) ||
						 (h->renew_failing && now >= TermDeadline(h))))
			StopChild(h, "could not renew the lease in time", KillDeadline(h));

		if (!h->lost && now >= h->renew_at)
		{
			int			rc;

			/* A reconnect never runs past the moment the command must be dead. */
			if (h->conn == NULL &&
				(h->conn = ConnectBy(h->opt, true, KillDeadline(h))) != NULL)
				Listen(h);
			rc = h->conn ? Renew(h, group) : -1;
			h->renew_failing = rc < 0;
			if (rc == 0)
				StopChild(h, "the lease was lost", -1);
			else if (rc < 0)
				h->renew_at = NowMs() + 250;	/* reconnect and retry soon */
			continue;
		}

		if (h->lost && h->kill_at >= 0 && h->kill_at < wake)
			wake = h->kill_at;
		if (!h->lost && KillDeadline(h) < wake)
			wake = KillDeadline(h);
		if (!h->lost && h->renew_failing && TermDeadline(h) < wake)
			wake = TermDeadline(h);
		if (h->lost && h->kill_at < 0)
			wake = now + 1000;
		fds[0].fd = signal_pipe[0];
		fds[0].events = POLLIN;
		fds[1].fd = h->conn ? PQsocket(h->conn) : -1;
		fds[1].events = POLLIN;
		fds[1].revents = 0;
		if (poll(fds, 2, wake > now ? (int) (wake - now) : 0) > 0)
		{
			while ((signo = ReadSignal()) != 0)
				HoldingSignal(signo, h);
			if (fds[1].revents)
				CheckNotifications(h);
		}
	}
}

/*
 * ChildExitCode
 *		The exit code that reports the child's wait status.
 */
int
ChildExitCode(int status)
{
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return EXIT_OSERR;
}

/*
 * Release
 *		Give the lease back (best effort: if the server is unreachable, the
 *		lease expires by itself).
 */
void
Release(Holding *h, const char *group)
{
	const char *params[2] = {h->lease, h->opt->holder};
	PGresult   *res;
	char	   *sql;
	bool		timed_out;

	if (h->conn == NULL || PQstatus(h->conn) != CONNECTION_OK)
	{
		if (h->conn)
			PQfinish(h->conn);
		h->conn = Connect(h->opt, true);
	}
	if (h->conn == NULL)
		return;
	/* In line (elect keeps its place between slices): leave it first. */
	sql = SchemaSql(h->conn, &h->probe,
					h->queue ?
					(group ? "SELECT @extschema@.dsync_unqueue($1, $2), @extschema@.dsync_release($1, $2),"
					 " @extschema@.dsync_leave($1, $2)" :
					 "SELECT @extschema@.dsync_unqueue($1, $2), @extschema@.dsync_release($1, $2)") :
					(group ? "SELECT @extschema@.dsync_release($1, $2), @extschema@.dsync_leave($1, $2)" :
					 "SELECT @extschema@.dsync_release($1, $2)"));
	res = Query(h->conn, sql, 2, params, NowMs() + 5000, NULL, NULL, &timed_out);
	free(sql);
	if (res)
		PQclear(res);
}
