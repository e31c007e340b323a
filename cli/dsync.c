/*-------------------------------------------------------------------------
 *
 * dsync.c
 *		The dsync command-line tool: run a command under a lease or only
 *		while leader, watch events, show leases.  Built on libpq.
 *
 *	dsync lock NAME [--ttl 30s] [--wait DURATION] [--permits N] -- CMD...
 *	dsync elect GROUP [--ttl 15s] [--id ID] [--info JSON] -- CMD...
 *	dsync watch GROUP|NAME [--json]
 *	dsync status [NAME]
 *
 * The safety rule: the command never keeps running on a lease the tool no
 * longer holds.  The lease is renewed every third of its ttl.  If a renewal
 * says the lease is gone, the command gets SIGTERM at once and SIGKILL
 * after --grace.  If the server cannot be reached, the tool reconnects, and
 * if it cannot renew in time, it stops the command so that it is dead
 * (SIGKILL sent) a safety margin before the lease would expire.  The
 * lease's expiry is tracked with the server's clock: the tool only ever
 * uses "time left", measured from before it sent the request.
 *
 * All waiting is done with poll() on the connection's socket, a self-pipe
 * for signals, and timers; lease waits block inside the server.  While
 * holding, the tool LISTENs on the lease's channel, so that a release or
 * takeover by anybody (dsync_force_release) is acted on within
 * milliseconds, not at the next renewal.  On Linux the command is killed
 * if the tool itself dies (PR_SET_PDEATHSIG).
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif
#include <time.h>
#include <unistd.h>

#include "libpq-fe.h"

#define DSYNC_VERSION		"1.2"

/*
 * Exit codes (sysexits.h).  70 means only "a held lease was lost": scripts
 * may act on it, so nothing else uses it.
 */
#define EXIT_USAGE			64
#define EXIT_DATAERR		65
#define EXIT_UNAVAILABLE	69
#define EXIT_LEASE_LOST		70
#define EXIT_OSERR			71
#define EXIT_TEMPFAIL		75
#define EXIT_NOPERM			77
#define EXIT_CONFIG			78

/* libpq's connect_timeout, which bounds a reconnect attempt. */
#define CONNECT_TIMEOUT_S	"2"
#define CONNECT_TIMEOUT_MS	2000

/* Options shared by the commands. */
typedef struct Options
{
	const char *dsn;
	const char *name;
	const char *holder;
	const char *info;
	int64_t		ttl_ms;
	int64_t		wait_ms;		/* -1: wait without limit */
	int64_t		grace_ms;
	int			permits;
	bool		json;
	char	  **command;
} Options;

static int	signal_pipe[2] = {-1, -1};
static const char *progname = "dsync";

/*
 * Fatal
 *		Print an error and exit.
 */
static void
Fatal(int code, const char *fmt,...)
{
	va_list		ap;
	char		buf[4096];
	size_t		len;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	/* libpq's messages end in a newline: print one line. */
	len = strlen(buf);
	while (len > 0 && buf[len - 1] == '\n')
		buf[--len] = '\0';
	fprintf(stderr, "%s: %s\n", progname, buf);
	exit(code);
}

/*
 * Note
 *		A line of progress on stderr.
 */
static void
Note(const char *fmt,...)
{
	va_list		ap;
	char		buf[4096];
	size_t		len;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	len = strlen(buf);
	while (len > 0 && buf[len - 1] == '\n')
		buf[--len] = '\0';
	fprintf(stderr, "%s: %s\n", progname, buf);
}

/*
 * FatalResult
 *		A server error that ends the tool: say what failed, and exit with
 *		the code that says why.  A missing extension (or an installation
 *		without what this tool needs) is a configuration error, not a lost
 *		lease.
 */
static void
FatalResult(const char *what, PGconn *conn, PGresult *res)
{
	const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
	const char *msg = res ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : NULL;

	if (msg == NULL)
		msg = res ? PQresultErrorMessage(res) : PQerrorMessage(conn);
	if (state == NULL)
		Fatal(EXIT_UNAVAILABLE, "%s: %s", what, msg);
	if (strcmp(state, "42883") == 0 || strcmp(state, "42P01") == 0 ||
		strcmp(state, "42704") == 0 || strcmp(state, "3F000") == 0)
		Fatal(EXIT_CONFIG, "%s: %s\n"
			  "%s: the dsync extension (version 1.2 or later) is not installed in database \"%s\"; "
			  "run CREATE EXTENSION dsync there (or ALTER EXTENSION dsync UPDATE), "
			  "with dsync in shared_preload_libraries",
			  what, msg, progname, PQdb(conn));
	if (strcmp(state, "42501") == 0)
		Fatal(EXIT_NOPERM, "%s: %s", what, msg);
	if (strncmp(state, "22", 2) == 0)
		Fatal(EXIT_DATAERR, "%s: %s", what, msg);
	Fatal(EXIT_UNAVAILABLE, "%s: %s (SQLSTATE %s)", what, msg, state);
}

/*
 * NowMs
 *		Monotonic milliseconds.
 */
static int64_t
NowMs(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * Usage
 *		Print usage to the given stream.
 */
static void
Usage(FILE *out)
{
	fprintf(out,
			"dsync: leases, leader election and events from PostgreSQL (dsync extension)\n"
			"\n"
			"Usage:\n"
			"  dsync [--dsn DSN] lock NAME [--ttl 30s] [--wait DURATION] [--permits N]\n"
			"                   [--holder ID] [--grace 5s] -- COMMAND [ARGS...]\n"
			"  dsync [--dsn DSN] elect GROUP [--ttl 15s] [--id ID] [--info JSON]\n"
			"                   [--grace 5s] -- COMMAND [ARGS...]\n"
			"  dsync [--dsn DSN] watch GROUP|NAME [--json]\n"
			"  dsync [--dsn DSN] status [NAME]\n"
			"  dsync --help | --version\n"
			"\n"
			"lock   runs COMMAND while holding the lease NAME (or one permit of an\n"
			"       N-permit semaphore), renewing it every ttl/3, and releases it when\n"
			"       COMMAND exits; exits with COMMAND's status, or 75 if --wait ran out.\n"
			"       Without --wait it waits as long as it takes.\n"
			"elect  joins GROUP and campaigns for its lease; runs COMMAND only while\n"
			"       leader, and campaigns again if leadership is lost.\n"
			"watch  prints lease, membership and event notifications as they happen.\n"
			"status shows live leases: holder, fencing token, time left, waiters.\n"
			"\n"
			"If the lease is lost, COMMAND gets SIGTERM at once and SIGKILL after --grace;\n"
			"if the server cannot be reached in time, COMMAND is stopped before the lease\n"
			"expires.  SIGINT, SIGTERM and SIGHUP are passed on to COMMAND.  COMMAND sees\n"
			"DSYNC_LEASE, DSYNC_HOLDER and DSYNC_FENCING_TOKEN.\n"
			"\n"
			"Durations: 500ms, 30s, 5m, 1h (a bare number is seconds).  The connection\n"
			"comes from --dsn or the usual libpq environment (PGHOST, PGDATABASE, ...).\n"
			"Exit codes: 64 usage, 65 bad argument, 69 server unavailable or error,\n"
			"70 lease lost (and only then), 71 system error, 75 wait ran out,\n"
			"77 permission denied, 78 the extension is not installed, 128+N signal N.\n");
}

/*
 * UsageError
 *		Complain about the command line and exit 64.
 */
static void
UsageError(const char *fmt,...)
{
	va_list		ap;

	fprintf(stderr, "%s: ", progname);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry \"dsync --help\" for more information.\n");
	exit(EXIT_USAGE);
}

/*
 * ParseDuration
 *		"500ms", "30s", "5m", "1h" or a bare number of seconds, in ms.
 */
static int64_t
ParseDuration(const char *opt, const char *text, bool allow_zero)
{
	char	   *end;
	double		value;
	double		scale = 1000;

	errno = 0;
	value = strtod(text, &end);
	if (end == text || errno != 0 || !(value >= 0) || value > 1e15)
		UsageError("invalid %s \"%s\": expected a duration such as 30s", opt, text);
	if (strcmp(end, "ms") == 0)
		scale = 1;
	else if (strcmp(end, "s") == 0 || *end == '\0')
		scale = 1000;
	else if (strcmp(end, "m") == 0 || strcmp(end, "min") == 0)
		scale = 60000;
	else if (strcmp(end, "h") == 0)
		scale = 3600000;
	else
		UsageError("invalid %s \"%s\": unknown unit \"%s\" (use ms, s, m or h)", opt, text, end);
	value *= scale;
	if (value > 365.0 * 24 * 3600 * 1000)
		UsageError("invalid %s \"%s\": too long", opt, text);
	if (value < 1 && !allow_zero)
		UsageError("invalid %s \"%s\": must be positive", opt, text);
	return (int64_t) value;
}

/*
 * OnSignal
 *		Signal handler: write the signal number to the self-pipe.
 */
static void
OnSignal(int signo)
{
	int			saved = errno;
	unsigned char b = (unsigned char) signo;

	if (write(signal_pipe[1], &b, 1) < 0)
	{
		/* pipe full: the main loop is already behind; nothing to do */
	}
	errno = saved;
}

/*
 * SetupSignals
 *		Route INT, TERM, HUP and CHLD through the self-pipe.
 */
static void
SetupSignals(void)
{
	struct sigaction sa;

	if (pipe(signal_pipe) != 0)
		Fatal(EXIT_OSERR, "could not create pipe: %s", strerror(errno));
	for (int i = 0; i < 2; i++)
	{
		fcntl(signal_pipe[i], F_SETFL, fcntl(signal_pipe[i], F_GETFL) | O_NONBLOCK);
		fcntl(signal_pipe[i], F_SETFD, FD_CLOEXEC);
	}
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = OnSignal;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	sigaction(SIGCHLD, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
}

/*
 * ReadSignal
 *		The next signal from the self-pipe, or 0.
 */
static int
ReadSignal(void)
{
	unsigned char b;

	if (read(signal_pipe[0], &b, 1) == 1)
		return b;
	return 0;
}

static PGconn *ConnectBy(const Options *opt, bool quiet, int64_t deadline_ms);
static void CheckPooler(const Options *opt, PGconn *conn, bool watching);

/*
 * Connect
 *		Open a connection; NULL (with a note) if the server cannot be
 *		reached.  A connect timeout keeps a dead server from blocking for
 *		long.
 */
static PGconn *
Connect(const Options *opt, bool quiet)
{
	return ConnectBy(opt, quiet, -1);
}

/*
 * ConnectBy
 *		Open a connection without blocking past deadline_ms (monotonic; -1:
 *		only libpq's connect_timeout), so that a reconnect cannot delay
 *		stopping the command.  NULL (with a note unless quiet) on failure.
 */
static PGconn *
ConnectBy(const Options *opt, bool quiet, int64_t deadline_ms)
{
	const char *keys[] = {"dbname", "connect_timeout", "application_name", NULL};
	const char *values[] = {opt->dsn ? opt->dsn : "", CONNECT_TIMEOUT_S, "dsync", NULL};
	PGconn	   *conn = PQconnectStartParams(keys, values, 1);
	PostgresPollingStatusType status = PGRES_POLLING_WRITING;

	if (conn == NULL)
		return NULL;
	while (PQstatus(conn) != CONNECTION_BAD &&
		   status != PGRES_POLLING_OK && status != PGRES_POLLING_FAILED)
	{
		struct pollfd fd;
		int			timeout = (int) CONNECT_TIMEOUT_MS;

		if (deadline_ms >= 0)
		{
			int64_t		left = deadline_ms - NowMs();

			if (left <= 0)
			{
				if (!quiet)
					Note("could not connect in time");
				PQfinish(conn);
				return NULL;
			}
			if (left < timeout)
				timeout = (int) left;
		}
		fd.fd = PQsocket(conn);
		fd.events = status == PGRES_POLLING_READING ? POLLIN : POLLOUT;
		if (fd.fd < 0 || poll(&fd, 1, timeout) < 0)
			break;
		if (fd.revents == 0 && deadline_ms < 0)
			break;				/* libpq's own timeout would have ended it */
		if (fd.revents == 0)
			continue;			/* the deadline check above decides */
		status = PQconnectPoll(conn);
	}
	if (PQstatus(conn) != CONNECTION_OK)
	{
		if (!quiet)
			Note("could not connect: %s", PQerrorMessage(conn));
		PQfinish(conn);
		return NULL;
	}
	return conn;
}

/*
 * WaitResult
 *		Wait for the result of a query sent with PQsendQueryParams, until
 *		deadline_ms (monotonic; -1: none).  Signals that arrive meanwhile
 *		go to on_signal.  Returns the result (the caller clears it), or
 *		NULL if the connection failed or the deadline passed, in which case
 *		*timed_out says which.
 */
static PGresult *
WaitResult(PGconn *conn, int64_t deadline_ms, void (*on_signal) (int, void *),
		   void *arg, bool *timed_out)
{
	PGresult   *result = NULL;
	PGresult   *r;

	*timed_out = false;
	for (;;)
	{
		struct pollfd fds[2];
		int			timeout = -1;
		int			n;

		if (PQconsumeInput(conn) == 0)
			return NULL;
		while (!PQisBusy(conn))
		{
			r = PQgetResult(conn);
			if (r == NULL)
				return result;
			if (result)
				PQclear(result);
			result = r;
		}
		/* Once a result is in, the rest follows at once: never drop it. */
		if (deadline_ms >= 0 && result == NULL)
		{
			int64_t		left = deadline_ms - NowMs();

			if (left <= 0)
			{
				*timed_out = true;
				if (result)
					PQclear(result);
				return NULL;
			}
			timeout = (int) (left > 1000 ? 1000 : left);
		}
		fds[0].fd = PQsocket(conn);
		fds[0].events = POLLIN;
		fds[1].fd = signal_pipe[0];
		fds[1].events = POLLIN;
		n = poll(fds, 2, timeout);
		if (n < 0 && errno != EINTR)
			Fatal(EXIT_OSERR, "poll failed: %s", strerror(errno));
		if (n > 0 && (fds[1].revents & POLLIN))
		{
			int			signo;

			while ((signo = ReadSignal()) != 0)
				if (on_signal)
					on_signal(signo, arg);
		}
	}
}

/*
 * Query
 *		Run a parameterised query and wait for it (see WaitResult).
 */
static PGresult *
Query(PGconn *conn, const char *sql, int nparams, const char *const *params,
	  int64_t deadline_ms, void (*on_signal) (int, void *), void *arg,
	  bool *timed_out)
{
	*timed_out = false;
	if (!PQsendQueryParams(conn, sql, nparams, NULL, params, NULL, NULL, 0))
		return NULL;
	return WaitResult(conn, deadline_ms, on_signal, arg, timed_out);
}

/*
 * IntervalParam
 *		A duration as an interval literal.
 */
static char *
IntervalParam(int64_t ms, char *buf, size_t len)
{
	snprintf(buf, len, "%lld milliseconds", (long long) ms);
	return buf;
}

/*
 * DefaultHolder
 *		host:pid:random, unique enough to tell holders apart.
 */
static char *
DefaultHolder(void)
{
	char		host[256];
	static char holder[512];
	unsigned int seed = (unsigned int) (getpid() ^ time(NULL) ^ (uintptr_t) &host);

	if (gethostname(host, sizeof(host)) != 0)
		strcpy(host, "localhost");
	host[sizeof(host) - 1] = '\0';
	srand(seed);
	snprintf(holder, sizeof(holder), "%s:%d:%08x", host, (int) getpid(),
			 (unsigned int) rand() ^ ((unsigned int) rand() << 16));
	return holder;
}

/* ------------------------------------------------------------------------
 * Running the command while holding a lease
 * ------------------------------------------------------------------------
 */

/* What the holding loop knows. */
typedef struct Holding
{
	const Options *opt;
	const char *lease;
	PGconn	   *conn;
	pid_t		child;
	int			status;			/* child's wait status, once it exited */
	bool		exited;
	bool		lost;			/* the lease was lost: child told to stop */
	int64_t		kill_at;		/* when to SIGKILL a child told to stop */
	int64_t		expires_ms;		/* when the lease expires, local clock, conservative */
	int64_t		renew_at;
	bool		renew_failing;	/* the last renewal could not reach the server */
	int			stop_signal;	/* a signal asked us to stop (elect: campaigning) */
} Holding;

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
static void
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
static void
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
		struct sigaction sa;

		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = SIG_DFL;
		sigaction(SIGINT, &sa, NULL);
		sigaction(SIGTERM, &sa, NULL);
		sigaction(SIGHUP, &sa, NULL);
		sigaction(SIGCHLD, &sa, NULL);
		signal(SIGPIPE, SIG_DFL);
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
static void
SetExpiry(Holding *h, int64_t sent_ms, double left_ms)
{
	h->expires_ms = sent_ms + (int64_t) left_ms;
	h->renew_at = NowMs() + h->opt->ttl_ms / 3;
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
	if (group)
		res = Query(h->conn,
					"SELECT extract(epoch FROM dsync_renew($1, $2, $3::interval) - clock_timestamp()) * 1000,"
					" extract(epoch FROM clock_timestamp() - statement_timestamp()) * 1000,"
					" dsync_join($1, $2, $3::interval, $4::jsonb)",
					4, params, deadline, HoldingSignal, h, &timed_out);
	else
		res = Query(h->conn,
					"SELECT extract(epoch FROM dsync_renew($1, $2, $3::interval) - clock_timestamp()) * 1000,"
					" extract(epoch FROM clock_timestamp() - statement_timestamp()) * 1000",
					3, params, deadline, HoldingSignal, h, &timed_out);
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

	if (h->conn == NULL)
		return;
	int64_t		deadline = NowMs() + 5000;

	if (h->expires_ms > 0 && KillDeadline(h) < deadline)
		deadline = KillDeadline(h);
	res = Query(h->conn, "SELECT dsync_channel($1)", 1, params, deadline,
				HoldingSignal, h, &timed_out);
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
static void
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
static int
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
static void
Release(Holding *h, const char *group)
{
	const char *params[2] = {h->lease, h->opt->holder};
	PGresult   *res;
	bool		timed_out;

	if (h->conn == NULL || PQstatus(h->conn) != CONNECTION_OK)
	{
		if (h->conn)
			PQfinish(h->conn);
		h->conn = Connect(h->opt, true);
	}
	if (h->conn == NULL)
		return;
	res = Query(h->conn,
				group ? "SELECT dsync_release($1, $2), dsync_leave($1, $2)" :
				"SELECT dsync_release($1, $2)",
				2, params, NowMs() + 5000, NULL, NULL, &timed_out);
	if (res)
		PQclear(res);
}

/*
 * LockSignalWhileWaiting
 *		A signal while blocked in the acquire: remember it, to give up.
 */
static void
LockSignalWhileWaiting(int signo, void *arg)
{
	if (signo != SIGCHLD)
		*(int *) arg = signo;
}

/*
 * Acquire
 *		Take the lease, blocking in the server for up to wait_ms (-1: no
 *		limit).  Returns the token (malloc'd), or NULL if the wait ran out;
 *		*signo is set if a signal interrupted the wait.
 */
static char *
Acquire(PGconn *conn, const Options *opt, const char *lease, int64_t wait_ms,
		Holding *h, int *signo, bool *conn_lost)
{
	char		ttl[64];
	char		wait[64];
	const char *params[5];
	PGresult   *res;
	bool		timed_out;
	char	   *token = NULL;
	int64_t		sent = NowMs();

	params[0] = lease;
	params[1] = opt->holder;
	params[2] = IntervalParam(opt->ttl_ms, ttl, sizeof(ttl));
	params[3] = wait_ms < 0 ? NULL : IntervalParam(wait_ms, wait, sizeof(wait));
	params[4] = opt->info;
	*signo = 0;

	/*
	 * Besides the token: the time left on the lease and how long the
	 * statement had run when that was measured (it may have waited long),
	 * both by the server's clock.
	 */
	if (!PQsendQueryParams(conn,
						   "SELECT t, extract(epoch FROM l.expires_at - clock_timestamp()) * 1000,"
						   "       extract(epoch FROM clock_timestamp() - statement_timestamp()) * 1000"
						   "  FROM dsync_acquire($1, $2, $3::interval, $4::interval, $5::jsonb) AS t"
						   "  LEFT JOIN dsync_leases l ON l.lease = $1 AND l.holder = $2",
						   5, NULL, params, NULL, NULL, 0))
		Fatal(EXIT_UNAVAILABLE, "could not send the acquire: %s", PQerrorMessage(conn));
	for (;;)
	{
		res = WaitResult(conn, NowMs() + 100, LockSignalWhileWaiting, signo, &timed_out);
		if (res != NULL || !timed_out)
			break;
		if (*signo)
		{
			/* Give up waiting: cancel the statement and take its outcome. */
			PGcancel   *cancel = PQgetCancel(conn);
			char		err[256];

			if (cancel)
			{
				PQcancel(cancel, err, sizeof(err));
				PQfreeCancel(cancel);
			}
			res = WaitResult(conn, NowMs() + 5000, NULL, NULL, &timed_out);
			break;
		}
	}
	if (res == NULL)
	{
		if (*signo)
			return NULL;
		if (conn_lost)
		{
			Note("connection lost while waiting: %s", PQerrorMessage(conn));
			*conn_lost = true;
			return NULL;
		}
		Fatal(EXIT_UNAVAILABLE, "connection lost while acquiring: %s", PQerrorMessage(conn));
	}
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		if (*signo || (conn_lost && PQstatus(conn) != CONNECTION_OK))
		{
			if (conn_lost && !*signo)
				*conn_lost = true;
			PQclear(res);
			return NULL;		/* cancelled, or the connection went */
		}
		{
			char		what[600];

			snprintf(what, sizeof(what), "could not acquire \"%s\"", lease);
			FatalResult(what, conn, res);
		}
	}
	if (!PQgetisnull(res, 0, 0))
	{
		token = strdup(PQgetvalue(res, 0, 0));
		if (h)
			SetExpiry(h, sent + (int64_t) atof(PQgetvalue(res, 0, 2)),
					  PQgetisnull(res, 0, 1) ? (double) opt->ttl_ms :
					  atof(PQgetvalue(res, 0, 1)));
	}
	PQclear(res);
	return token;
}

/*
 * CommandLock
 *		dsync lock: run the command under the lease.
 */
static int
CommandLock(Options *opt)
{
	Holding		h;
	char	   *token;
	int			signo;

	memset(&h, 0, sizeof(h));
	h.opt = opt;
	h.lease = opt->name;
	h.child = -1;
	h.kill_at = -1;
	h.conn = Connect(opt, false);
	if (h.conn == NULL)
		return EXIT_UNAVAILABLE;
	CheckPooler(opt, h.conn, false);
	Note("holder %s", opt->holder);

	if (opt->permits > 1)
	{
		char		permits[16];
		const char *params[2] = {opt->name, permits};
		PGresult   *res;
		bool		timed_out;

		snprintf(permits, sizeof(permits), "%d", opt->permits);
		res = Query(h.conn, "SELECT dsync_semaphore_create($1, $2::int)", 2, params,
					-1, NULL, NULL, &timed_out);
		if (res == NULL || PQresultStatus(res) != PGRES_TUPLES_OK)
			FatalResult("could not create the semaphore", h.conn, res);
		PQclear(res);
	}

	token = Acquire(h.conn, opt, opt->name, opt->wait_ms, &h, &signo, NULL);
	if (signo)
	{
		Note("interrupted while waiting for \"%s\"", opt->name);
		if (token)
			Release(&h, NULL);	/* granted just as we gave up */
		return 128 + signo;
	}
	if (token == NULL)
	{
		Note("could not get \"%s\" within the wait", opt->name);
		return EXIT_TEMPFAIL;
	}
	Note("acquired \"%s\" (fencing token %s)", opt->name, token);

	StartChild(&h, token);
	HoldWhileRunning(&h, NULL);
	/* Also after a stop for failed renewals: if we still hold it, let go. */
	Release(&h, NULL);
	if (h.conn)
		PQfinish(h.conn);
	if (h.lost)
	{
		Note("the command was stopped because the lease was lost");
		return EXIT_LEASE_LOST;
	}
	return ChildExitCode(h.status);
}

/*
 * Join
 *		Join (or refresh membership of) the group.  False if the server
 *		could not be reached.
 */
static bool
Join(Holding *h)
{
	char		ttl[64];
	const char *params[4] = {h->lease, h->opt->holder, NULL, h->opt->info};
	PGresult   *res;
	bool		timed_out;
	bool		ok;

	params[2] = IntervalParam(h->opt->ttl_ms, ttl, sizeof(ttl));
	res = Query(h->conn, "SELECT dsync_join($1, $2, $3::interval, $4::jsonb)", 4, params,
				NowMs() + 10000, HoldingSignal, h, &timed_out);
	ok = res != NULL && PQresultStatus(res) == PGRES_TUPLES_OK;
	if (res && !ok)
		FatalResult("could not join the group", h->conn, res);
	if (res)
		PQclear(res);
	return ok;
}

/*
 * CommandElect
 *		dsync elect: campaign, run the command while leader, campaign again
 *		after losing leadership; exit when the command exits by itself.
 */
static int
CommandElect(Options *opt)
{
	Holding		h;

	memset(&h, 0, sizeof(h));
	h.opt = opt;
	h.lease = opt->name;
	h.child = -1;
	h.kill_at = -1;
	h.conn = Connect(opt, false);
	if (h.conn == NULL)
		return EXIT_UNAVAILABLE;
	CheckPooler(opt, h.conn, false);
	Note("candidate %s in group \"%s\"", opt->holder, opt->name);

	for (;;)
	{
		char	   *token = NULL;
		int			signo = 0;
		bool		conn_lost = false;

		/* Campaign: block in the server, a third of the ttl at a time. */
		while (token == NULL)
		{
			if (h.conn == NULL || PQstatus(h.conn) != CONNECTION_OK)
			{
				if (h.conn)
					PQfinish(h.conn);
				h.conn = Connect(opt, true);
				if (h.conn == NULL)
				{
					sleep(1);
					if ((signo = ReadSignal()) != 0 && signo != SIGCHLD)
						return 128 + signo;
					continue;
				}
			}
			if (!Join(&h))
				continue;
			if (h.stop_signal)
			{
				Release(&h, opt->name);
				return 128 + h.stop_signal;
			}
			token = Acquire(h.conn, opt, opt->name, opt->ttl_ms / 3, &h, &signo, &conn_lost);
			if (signo)
			{
				if (token)
					free(token);
				Release(&h, opt->name);
				return 128 + signo;
			}
			if (conn_lost)
			{
				/* Reconnect and campaign again (the loop above). */
				PQfinish(h.conn);
				h.conn = NULL;
				conn_lost = false;
			}
		}

		Note("leader of \"%s\" (fencing token %s)", opt->name, token);
		StartChild(&h, token);
		free(token);
		HoldWhileRunning(&h, opt->name);
		if (!h.lost)
		{
			Release(&h, opt->name);
			if (h.conn)
				PQfinish(h.conn);
			return ChildExitCode(h.status);
		}
		if (h.stop_signal)
		{
			/* Asked to stop while the command was being stopped. */
			Release(&h, opt->name);
			return 128 + h.stop_signal;
		}
		Note("no longer leader of \"%s\"; campaigning again", opt->name);
		h.renew_at = 0;
	}
}

/* ------------------------------------------------------------------------
 * watch and status
 * ------------------------------------------------------------------------
 */

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
 * BehindPooler
 *		Whether the connection goes through a connection pooler: the
 *		backend process libpq was told of when it connected is not the one
 *		that runs our queries (PgBouncer sends a key of its own).
 */
static bool
BehindPooler(PGconn *conn)
{
	PGresult   *res = PQexec(conn, "SELECT pg_backend_pid()");
	bool		pooled = false;

	if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1)
		pooled = atoi(PQgetvalue(res, 0, 0)) != PQbackendPID(conn);
	PQclear(res);
	return pooled;
}

/*
 * ListenWorks
 *		Whether notifications reach this connection while it is idle: LISTEN
 *		on a channel of its own, NOTIFY it from another connection, and
 *		wait up to two seconds.  Through a pooler in transaction mode they
 *		do not: the LISTEN ran on whichever server connection the pooler
 *		lent for that transaction, which goes back to the pool after it.
 */
static bool
ListenWorks(const Options *opt, PGconn *conn)
{
	char		channel[64];
	char		sql[128];
	PGconn	   *other;
	PGresult   *res;
	bool		got = false;
	int64_t		deadline = NowMs() + 2000;

	snprintf(channel, sizeof(channel), "dsync_probe_%d_%lld", (int) getpid(),
			 (long long) NowMs());
	snprintf(sql, sizeof(sql), "LISTEN \"%s\"", channel);
	PQclear(PQexec(conn, sql));
	other = Connect(opt, true);
	if (other == NULL)
		return true;			/* cannot tell: assume it works */
	snprintf(sql, sizeof(sql), "NOTIFY \"%s\"", channel);
	PQclear(PQexec(other, sql));
	PQfinish(other);
	while (!got && NowMs() < deadline)
	{
		struct pollfd fd;
		PGnotify   *notify;

		fd.fd = PQsocket(conn);
		fd.events = POLLIN;
		(void) poll(&fd, 1, (int) (deadline - NowMs()));
		if (PQconsumeInput(conn) == 0)
			break;
		while ((notify = PQnotifies(conn)) != NULL)
		{
			got = got || strcmp(notify->relname, channel) == 0;
			PQfreemem(notify);
		}
	}
	snprintf(sql, sizeof(sql), "UNLISTEN \"%s\"", channel);
	res = PQexec(conn, sql);
	PQclear(res);
	return got;
}

/*
 * CheckPooler
 *		Say what a connection pooler means for this command: a blocked wait
 *		holds a server connection for as long as it lasts, and LISTEN does
 *		not work in transaction mode (fatal for watch, which prints events;
 *		lock and elect then learn of a lost lease at the next renewal).
 */
static void
CheckPooler(const Options *opt, PGconn *conn, bool watching)
{
	if (!BehindPooler(conn))
		return;
	if (!ListenWorks(opt, conn))
	{
		if (watching)
			Fatal(EXIT_CONFIG,
				  "LISTEN does not work through this connection: it goes through a "
				  "connection pooler in transaction mode, which lends each transaction "
				  "any server connection; connect dsync watch to PostgreSQL directly, "
				  "or to a pool in session mode");
		Note("connected through a pooler in transaction mode, where LISTEN does not "
			 "work: a lease taken away by someone else is noticed at the next renewal "
			 "(every ttl/3), not at once");
	}
	if (!watching)
		Note("connected through a connection pooler: waiting for the lease holds one "
			 "server connection of the pool for as long as the wait lasts");
}

/*
 * ReadSender
 *		The process that sends this database's dsync notifications
 *		(dsync_stats.sender_pid): 0 if none runs now, -1 if the installed
 *		version cannot say (then every notification is taken as dsync's).
 */
static int
ReadSender(PGconn *conn)
{
	PGresult   *res = PQexec(conn, "SELECT sender_pid FROM dsync_stats");
	int			pid = -1;

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
IsSender(PGconn *conn, int pid)
{
	char		pidtext[16];
	const char *params[1] = {pidtext};
	PGresult   *res;
	int			result = -1;

	snprintf(pidtext, sizeof(pidtext), "%d", pid);
	res = PQexecParams(conn, "SELECT $1::integer = ANY (sender_pids) FROM dsync_stats",
					   1, NULL, params, NULL, NULL, 0);
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
FromSender(PGconn *conn, int *sender, int be_pid)
{
	int			known;

	if (*sender < 0 || be_pid == *sender)
		return true;
	known = IsSender(conn, be_pid);
	if (known < 0)
	{
		/* Before 1.2: only the current sender is known. */
		*sender = ReadSender(conn);
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
 * CommandWatch
 *		dsync watch: LISTEN on the name's channel and print each event that
 *		dsync sent; reconnect if the connection drops.
 */
static int
CommandWatch(Options *opt)
{
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
		res = Query(conn, "SELECT dsync_channel($1)", 1, params, -1, NULL, NULL, &timed_out);
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
		sender = ReadSender(conn);
		if (sender < 0)
			Note("this version of the extension does not say which process sends "
				 "its notifications: run ALTER EXTENSION dsync UPDATE");
		res = PQexec(conn, sql);
		free(sql);
		if (PQresultStatus(res) != PGRES_COMMAND_OK)
			FatalResult("could not listen", conn, res);
		PQclear(res);
		if (!opt->json)
			Note("watching \"%s\"", opt->name);

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
				break;
			}
			while ((notify = PQnotifies(conn)) != NULL)
			{
				if (FromSender(conn, &sender, notify->be_pid))
					PrintEvent(notify->extra, opt->json);
				PQfreemem(notify);
			}
		}
		PQfinish(conn);
	}
}

/*
 * CommandStatus
 *		dsync status: a table of live leases.
 */
static int
CommandStatus(Options *opt)
{
	PGconn	   *conn = Connect(opt, false);
	const char *params[1] = {opt->name};
	PGresult   *res;
	bool		timed_out;
	int			n;

	if (conn == NULL)
		return EXIT_UNAVAILABLE;
	/* A name is looked up (an index probe), not filtered from a scan. */
	res = Query(conn, opt->name ?
				"SELECT l.lease, l.holder, l.fencing, l.permits,"
				"       to_char(greatest(l.expires_at - clock_timestamp(), '0'::interval), 'HH24:MI:SS.MS'),"
				"       (SELECT count(*) FROM dsync_waiters w WHERE w.name = l.lease AND w.kind <> 'event'),"
				"       l.owner"
				"  FROM dsync_leases l WHERE l.lease = $1"
				" ORDER BY l.lease, l.fencing" :
				"SELECT l.lease, l.holder, l.fencing, l.permits,"
				"       to_char(greatest(l.expires_at - clock_timestamp(), '0'::interval), 'HH24:MI:SS.MS'),"
				"       (SELECT count(*) FROM dsync_waiters w WHERE w.name = l.lease AND w.kind <> 'event'),"
				"       l.owner"
				"  FROM dsync_leases l"
				" ORDER BY l.lease, l.fencing",
				opt->name ? 1 : 0, params, -1, NULL, NULL, &timed_out);
	if (res == NULL || PQresultStatus(res) != PGRES_TUPLES_OK)
		FatalResult("could not read leases", conn, res);
	n = PQntuples(res);
	printf("%-24s %-32s %16s %7s %12s %7s %s\n", "LEASE", "HOLDER", "FENCING", "PERMITS",
		   "TIME LEFT", "WAITERS", "OWNER");
	for (int i = 0; i < n; i++)
		printf("%-24s %-32s %16s %7s %12s %7s %s\n", PQgetvalue(res, i, 0),
			   PQgetvalue(res, i, 1), PQgetvalue(res, i, 2), PQgetvalue(res, i, 3),
			   PQgetvalue(res, i, 4), PQgetvalue(res, i, 5), PQgetvalue(res, i, 6));
	if (n == 0)
		printf("(no live leases%s%s)\n", opt->name ? " named " : "", opt->name ? opt->name : "");
	PQclear(res);
	PQfinish(conn);
	return 0;
}

/* ------------------------------------------------------------------------
 * Command line
 * ------------------------------------------------------------------------
 */

/*
 * main
 *		Parse the command line and dispatch.
 */
int
main(int argc, char **argv)
{
	static struct option long_options[] = {
		{"dsn", required_argument, NULL, 'd'},
		{"ttl", required_argument, NULL, 't'},
		{"wait", required_argument, NULL, 'w'},
		{"permits", required_argument, NULL, 'p'},
		{"holder", required_argument, NULL, 'H'},
		{"id", required_argument, NULL, 'i'},
		{"info", required_argument, NULL, 'I'},
		{"grace", required_argument, NULL, 'g'},
		{"json", no_argument, NULL, 'j'},
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'V'},
		{NULL, 0, NULL, 0}
	};
	Options		opt;
	const char *cmd;
	int			c;
	bool		ttl_given = false;
	bool		saw_dashdash = false;

	memset(&opt, 0, sizeof(opt));
	opt.wait_ms = -1;
	opt.grace_ms = 5000;
	opt.permits = 1;

	/* Options before the command word, then the command's own. */
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+hV", long_options, NULL)) != -1)
	{
		switch (c)
		{
			case 'd':
				opt.dsn = optarg;
				break;
			case 'h':
				Usage(stdout);
				return 0;
			case 'V':
				printf("dsync %s\n", DSYNC_VERSION);
				return 0;
			default:
				UsageError("only --dsn may come before the command (lock, elect, watch or status)");
		}
	}
	if (optind >= argc)
		UsageError("no command given");
	cmd = argv[optind++];
	if (strcmp(cmd, "lock") != 0 && strcmp(cmd, "elect") != 0 &&
		strcmp(cmd, "watch") != 0 && strcmp(cmd, "status") != 0)
		UsageError("unknown command \"%s\"", cmd);

	/*
	 * The command's options, and its one operand (a name) before, between
	 * or after them; "--" ends them.
	 */
	opterr = 0;
	for (;;)
	{
		while ((c = getopt_long(argc, argv, "+:hV", long_options, NULL)) != -1)
		{
			switch (c)
			{
				case 'd':
					opt.dsn = optarg;
					break;
				case 't':
					opt.ttl_ms = ParseDuration("--ttl", optarg, false);
					ttl_given = true;
					break;
				case 'w':
					opt.wait_ms = ParseDuration("--wait", optarg, true);
					break;
				case 'p':
					{
						char	   *end;
						long		v = strtol(optarg, &end, 10);

						if (*end != '\0' || v < 1 || v > 65535)
							UsageError("invalid --permits \"%s\": expected 1 to 65535", optarg);
						opt.permits = (int) v;
					}
					break;
				case 'H':
				case 'i':
					opt.holder = optarg;
					break;
				case 'I':
					opt.info = optarg;
					break;
				case 'g':
					opt.grace_ms = ParseDuration("--grace", optarg, true);
					break;
				case 'j':
					opt.json = true;
					break;
				case 'h':
					Usage(stdout);
					return 0;
				case 'V':
					printf("dsync %s\n", DSYNC_VERSION);
					return 0;
				case ':':
					UsageError("option \"%s\" needs a value", argv[optind - 1]);
					break;
				default:
					UsageError("invalid option \"%s\" for \"%s\"", argv[optind - 1], cmd);
			}
		}
		if (strcmp(argv[optind - 1], "--") == 0)
		{
			saw_dashdash = true;
			break;
		}
		if (optind >= argc)
			break;
		if (opt.name != NULL)
			break;				/* a second operand: complained about below */
		opt.name = argv[optind++];
	}

	if (strcmp(cmd, "lock") == 0 || strcmp(cmd, "elect") == 0)
	{
		bool		elect = cmd[0] == 'e';

		if (opt.name == NULL || opt.name[0] == '\0')
			UsageError("%s needs a %s name", cmd, elect ? "group" : "lease");
		if (!saw_dashdash && optind < argc)
			UsageError("unexpected argument \"%s\" (the command goes after \"--\")", argv[optind]);
		if (!saw_dashdash || optind >= argc)
			UsageError("%s needs \"-- COMMAND [ARGS...]\"", cmd);
		if (elect && (opt.permits != 1 || opt.wait_ms >= 0))
			UsageError("elect takes no --permits or --wait");
		if (!elect && opt.json)
			UsageError("lock takes no --json");
		opt.command = &argv[optind];
		if (!ttl_given)
			opt.ttl_ms = elect ? 15000 : 30000;
		if (opt.ttl_ms < 300)
			UsageError("--ttl must be at least 300ms");
		if (opt.holder == NULL)
			opt.holder = DefaultHolder();
		SetupSignals();
		return elect ? CommandElect(&opt) : CommandLock(&opt);
	}

	if (optind < argc)
		UsageError("unexpected argument \"%s\"", argv[optind]);
	if (opt.command || opt.holder || opt.info || ttl_given || opt.wait_ms >= 0 ||
		opt.permits != 1)
		UsageError("%s takes no --ttl, --wait, --permits, --holder, --id or --info", cmd);
	if (strcmp(cmd, "watch") == 0)
	{
		if (opt.name == NULL)
			UsageError("watch needs a group or lease name");
		SetupSignals();
		return CommandWatch(&opt);
	}
	if (opt.json)
		UsageError("status takes no --json");
	return CommandStatus(&opt);
}
