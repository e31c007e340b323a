/*-------------------------------------------------------------------------
 *
 * common.c
 *		What every command uses: messages, signals (a self-pipe),
 *		connecting, queries with deadlines, and telling a pooler apart.
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

int			signal_pipe[2] = {-1, -1};
const char *progname = "dsync";

/*
 * PrintLine
 *		One message line on stderr, prefixed with the program's name.
 *		libpq's messages end in a newline: they still print as one line.
 */
static void PrintLine(const char *fmt, va_list ap) pg_attribute_printf_cli(1, 0);

static void
PrintLine(const char *fmt, va_list ap)
{
	char		buf[4096];
	size_t		len;

	vsnprintf(buf, sizeof(buf), fmt, ap);
	len = strlen(buf);
	while (len > 0 && buf[len - 1] == '\n')
		buf[--len] = '\0';
	fprintf(stderr, "%s: %s\n", progname, buf);
}

/*
 * Fatal
 *		Print an error and exit.
 */
void
Fatal(int code, const char *fmt,...)
{
	va_list		ap;

	va_start(ap, fmt);
	PrintLine(fmt, ap);
	va_end(ap);
	exit(code);
}

/*
 * Note
 *		A line of progress on stderr.
 */
void
Note(const char *fmt,...)
{
	va_list		ap;

	va_start(ap, fmt);
	PrintLine(fmt, ap);
	va_end(ap);
}

/*
 * ResultError
 *		A failed query's primary message, or the connection's where there
 *		is no result or no message, and in *state its SQLSTATE (NULL where
 *		the server sent none: the connection failed).  FatalResult and dsync
 *		check, which reports rather than exits, judge failures alike with
 *		it.
 */
const char *
ResultError(PGconn *conn, const PGresult *res, const char **state)
{
	const char *msg = res ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : NULL;

	*state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
	if (msg == NULL && res != NULL && PQresultErrorMessage(res)[0] != '\0')
		msg = PQresultErrorMessage(res);
	if (msg == NULL)
		msg = PQerrorMessage(conn);
	return msg;
}

/*
 * FatalResult
 *		A server error that ends the tool: say what failed, and exit with
 *		the code that says why.  A missing extension (or an installation
 *		without what this tool needs) is a configuration error, not a lost
 *		lease.
 */
void
FatalResult(const char *what, PGconn *conn, PGresult *res)
{
	const char *state;
	const char *msg = ResultError(conn, res, &state);

	if (state == NULL)
		Fatal(EXIT_UNAVAILABLE, "%s: %s", what, msg);
	if (strcmp(state, "42883") == 0 || strcmp(state, "42P01") == 0 ||
		strcmp(state, "42704") == 0 || strcmp(state, "3F000") == 0)
		Fatal(EXIT_CONFIG, "%s: %s\n"
			  "%s: " NOT_INSTALLED_FMT " (or ALTER EXTENSION dsync UPDATE), "
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
int64_t
NowMs(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * SetSignalHandlers
 *		The disposition of the signals the tool handles: handler for
 *		SIGINT, SIGTERM, SIGHUP and SIGCHLD (restarting system calls), and
 *		pipe_handler for SIGPIPE.  The child resets them all to SIG_DFL.
 */
void
SetSignalHandlers(void (*handler) (int), void (*pipe_handler) (int))
{
	static const int signals[] = {SIGINT, SIGTERM, SIGHUP, SIGCHLD};
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = handler;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	for (size_t i = 0; i < sizeof(signals) / sizeof(signals[0]); i++)
		sigaction(signals[i], &sa, NULL);
	signal(SIGPIPE, pipe_handler);
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
void
SetupSignals(void)
{
	if (pipe(signal_pipe) != 0)
		Fatal(EXIT_OSERR, "could not create pipe: %s", strerror(errno));
	for (int i = 0; i < 2; i++)
	{
		fcntl(signal_pipe[i], F_SETFL, fcntl(signal_pipe[i], F_GETFL) | O_NONBLOCK);
		fcntl(signal_pipe[i], F_SETFD, FD_CLOEXEC);
	}
	SetSignalHandlers(OnSignal, SIG_IGN);
}

/*
 * ReadSignal
 *		The next signal from the self-pipe, or 0.
 */
int
ReadSignal(void)
{
	unsigned char b;

	if (read(signal_pipe[0], &b, 1) == 1)
		return b;
	return 0;
}

/*
 * Connect
 *		Open a connection; NULL (with a note) if the server cannot be
 *		reached.  A connect timeout keeps a dead server from blocking for
 *		long.
 */
PGconn *
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
PGconn *
ConnectBy(const Options *opt, bool quiet, int64_t deadline_ms)
{
	char		error[600];
	bool		timed_out;
	PGconn	   *conn = ConnectWithin(opt, deadline_ms, error, sizeof(error), &timed_out);

	if (conn == NULL && !quiet && timed_out)
		Note("could not connect in time");
	else if (conn == NULL && !quiet)
		Note("could not connect: %s", error);
	return conn;
}

/*
 * ConnectWithin
 *		Open a connection without blocking past deadline_ms (monotonic; -1:
 *		only libpq's connect_timeout).  On failure return NULL with libpq's
 *		message as one line in error (callers print it, or, like dsync
 *		check, report it their own way) and *timed_out set when the
 *		deadline, not the server, ended the attempt.  The connection's
 *		client_encoding is UTF8 whatever the environment says, so that
 *		what the tool prints (JSON above all) is UTF-8.
 */
PGconn *
ConnectWithin(const Options *opt, int64_t deadline_ms, char *error, size_t len,
			  bool *timed_out)
{
	const char *keys[] = {"dbname", "connect_timeout", "application_name",
	"client_encoding", NULL};
	const char *values[] = {opt->dsn ? opt->dsn : "", CONNECT_TIMEOUT_S, "dsync",
	"UTF8", NULL};
	PGconn	   *conn = PQconnectStartParams(keys, values, 1);
	PostgresPollingStatusType status = PGRES_POLLING_WRITING;

	*timed_out = false;
	if (conn == NULL)
	{
		snprintf(error, len, "out of memory");
		return NULL;
	}
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
				snprintf(error, len, "timed out");
				*timed_out = true;
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
		snprintf(error, len, "%s", PQerrorMessage(conn));
		OneLine(error);
		PQfinish(conn);
		return NULL;
	}
	return conn;
}

/*
 * OneLine
 *		libpq's messages as one line, in place: each newline, with the
 *		indentation after it, becomes "; " (";" where no indentation
 *		follows it), and the last one goes.  A
 *		probe's caller reads one line, and a multi-host attempt's message
 *		has one line per host.
 */
void
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
		/*
		 * In place, so never write past what was read: a newline with no
		 * indentation after it (a multi-host attempt's next host) has room
		 * for the ';' only.  Writing both overtook the reader and ran off
		 * the buffer.
		 */
		*out++ = ';';
		if (out < p)
			*out++ = ' ';
	}
	*out = '\0';
}

/*
 * WaitResult
 *		Wait for the result of a query sent with PQsendQueryParams, until
 *		deadline_ms (monotonic; -1: none).  Signals that arrive meanwhile
 *		go to on_signal.  Returns the result (the caller clears it), or
 *		NULL if the connection failed or the deadline passed, in which case
 *		*timed_out says which.
 */
PGresult *
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
 * WaitCancellable
 *		Wait for the result of a query sent, with no deadline, until a
 *		signal recorded in *signo by on_signal asks to give up: then cancel
 *		the statement and take its outcome (within 5 s).  NULL if the
 *		connection failed.
 */
PGresult *
WaitCancellable(PGconn *conn, void (*on_signal) (int, void *), int *signo)
{
	PGresult   *res;
	bool		timed_out;

	for (;;)
	{
		res = WaitResult(conn, NowMs() + 100, on_signal, signo, &timed_out);
		if (res != NULL || !timed_out)
			return res;
		if (*signo)
		{
			PGcancel   *cancel = PQgetCancel(conn);
			char		err[256];

			if (cancel)
			{
				PQcancel(cancel, err, sizeof(err));
				PQfreeCancel(cancel);
			}
			return WaitResult(conn, NowMs() + 5000, NULL, NULL, &timed_out);
		}
	}
}

/*
 * RememberSignal
 *		A signal while waiting for a lease: remember it in *(int *) arg, to
 *		give up.  SIGCHLD is not one of ours (no command runs yet).
 */
void
RememberSignal(int signo, void *arg)
{
	if (signo != SIGCHLD)
		*(int *) arg = signo;
}

/*
 * RunAcquiring
 *		Run a statement that acquires or queues for lease, until a signal
 *		asks to give up (it is then cancelled).  Returns its rows, or NULL:
 *		a signal came (*signo), the connection went (*conn_lost set, or a
 *		fatal exit if the caller cannot reconnect), or, with refused, the
 *		server would not queue (queueing turned off, or its table full).
 *		Any other error is fatal.
 */
PGresult *
RunAcquiring(PGconn *conn, const char *sql, int nparams, const char *const *params,
			 const char *lease, int *signo, bool *conn_lost, bool *refused)
{
	PGresult   *res = NULL;
	const char *state;
	char		what[600];

	if (PQsendQueryParams(conn, sql, nparams, NULL, params, NULL, NULL, 0))
		res = WaitCancellable(conn, RememberSignal, signo);
	if (res != NULL && PQresultStatus(res) == PGRES_TUPLES_OK)
		return res;
	if (*signo)
	{
		if (res)
			PQclear(res);		/* cancelled */
		return NULL;
	}
	if (res == NULL || PQstatus(conn) != CONNECTION_OK)
	{
		if (res)
			PQclear(res);
		if (conn_lost == NULL)
			Fatal(EXIT_UNAVAILABLE, "connection lost while acquiring: %s", PQerrorMessage(conn));
		Note("connection lost while waiting: %s", PQerrorMessage(conn));
		*conn_lost = true;
		return NULL;
	}
	state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
	if (refused && state != NULL &&
		(strcmp(state, "0A000") == 0 || strcmp(state, "53400") == 0))
	{
		Note("waiting in a backend: %s", PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY));
		PQclear(res);
		*refused = true;
		return NULL;
	}
	snprintf(what, sizeof(what), "could not acquire \"%s\"", lease);
	FatalResult(what, conn, res);
}

/*
 * Query
 *		Run a parameterised query and wait for it (see WaitResult).
 */
PGresult *
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
 * CancelStatement
 *		Ask the server to cancel conn's running statement, after a query
 *		timed out: else its backend would go on (waiting for a lock, say)
 *		after the tool is gone, and a probe run every few seconds against
 *		a long-held lock would pile such backends up to max_connections.
 *		PQcancel blocks until the postmaster has read the request, which a
 *		stopped one never does, so it runs in a child that SIGALRM ends
 *		after 2 s; the tool waits for it at most 1 s.
 */
void
CancelStatement(PGconn *conn)
{
	PGcancel   *cancel = PQgetCancel(conn);
	int64_t		deadline = NowMs() + 1000;
	pid_t		pid;

	if (cancel == NULL)
		return;
	pid = fork();
	if (pid == 0)
	{
		char		err[256];

		signal(SIGALRM, SIG_DFL);
		alarm(2);
		_exit(PQcancel(cancel, err, sizeof(err)) ? 0 : 1);
	}
	PQfreeCancel(cancel);
	while (pid > 0 && waitpid(pid, NULL, WNOHANG) == 0 && NowMs() < deadline)
		usleep(10000);
}

/*
 * IntervalParam
 *		A duration as an interval literal.
 */
char *
IntervalParam(int64_t ms, char *buf, size_t len)
{
	snprintf(buf, len, "%lld milliseconds", (long long) ms);
	return buf;
}

/*
 * DefaultHolder
 *		host:pid:random, unique enough to tell holders apart.
 */
char *
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

/*
 * BehindPooler
 *		Whether the connection goes through a connection pooler: the
 *		backend process libpq was told of when it connected is not the one
 *		that runs our queries (PgBouncer sends a key of its own).
 */
static bool
BehindPooler(PGconn *conn)
{
	PGresult   *res = PQexec(conn, "SELECT pg_catalog.pg_backend_pid()");
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
 *		lock and elect then wait in a backend, and learn of a lost lease at
 *		the next renewal).  Returns whether LISTEN works here, which lock
 *		and elect need to wait in the lease's line (queue.c).
 */
bool
CheckPooler(const Options *opt, PGconn *conn, bool watching)
{
	if (!BehindPooler(conn))
		return true;
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
			 "(every ttl/3), not at once, and waiting for the lease holds one server "
			 "connection of the pool for as long as the wait lasts");
		return false;
	}
	if (!watching && opt->no_queue)
		Note("connected through a connection pooler: waiting for the lease holds one "
			 "server connection of the pool for as long as the wait lasts");
	return true;
}
