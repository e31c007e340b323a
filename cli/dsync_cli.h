/*-------------------------------------------------------------------------
 *
 * dsync_cli.h
 *		What the parts of the dsync command-line tool share: exit codes,
 *		options, the holding loop's state, and each part's functions.
 *
 *	main.c		the command line: options, the command word, usage
 *	common.c	messages, signals, connecting, queries with deadlines,
 *				pooler detection
 *	hold.c		running the command while holding a lease: renewing,
 *				listening, stopping the command when the lease is lost
 *	lock.c		dsync lock and dsync elect: acquiring, joining, campaigning
 *	queue.c		waiting in a lease's line without a running statement
 *	watch.c		dsync watch
 *	probe.c		what a database has of dsync, found without a server error
 *	status.c	dsync status (a table, or --json)
 *	check.c		dsync check: a health probe with an exit code per problem
 *
 *-------------------------------------------------------------------------
 */
#ifndef DSYNC_CLI_H
#define DSYNC_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "libpq-fe.h"

/* The permit limit and name length the server checks too. */
#include "dsync_limits.h"

/* The Makefile passes the extension's version (dsync.control). */
#ifndef DSYNC_VERSION
#error "DSYNC_VERSION must be defined (the Makefile takes it from dsync.control)"
#endif

#if defined(__GNUC__) || defined(__clang__)
#define pg_attribute_noreturn_cli __attribute__((noreturn))
#define pg_attribute_printf_cli(f, a) __attribute__((format(printf, f, a)))
#else
#define pg_attribute_noreturn_cli
#define pg_attribute_printf_cli(f, a)
#endif

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

/*
 * dsync check's own outcomes, each with a code of its own so that a probe
 * can tell them apart: EX_OSFILE (a file of the system, the server's
 * configuration, lacks dsync) and EX_TEMPFAIL (it may pass again soon)
 * fit; sysexits.h has nothing for "nobody serves the database", so it
 * takes the first code after them.
 */
#define EXIT_NOT_PRELOADED	72
#define EXIT_QUEUE_FULL		75
#define EXIT_NOT_SERVED		79

/*
 * The line that says the extension is missing, with the database's name
 * for %s: probe.c and common.c's FatalResult say it alike.
 */
#define NOT_INSTALLED_FMT \
	"the dsync extension (version 1.2 or later) is not installed in database \"%s\"; " \
	"run CREATE EXTENSION dsync there"

/*
 * How long dsync check and dsync status take at most, connecting
 * included, unless --timeout says otherwise: a probe that never answers
 * is worse than one that says the server does not.
 */
#define DEFAULT_TIMEOUT_MS	10000

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
	bool		shared;			/* lock --shared: dsync_acquire_shared */
	bool		no_queue;		/* --no-queue: wait in a backend */
	bool		json;
	double		queue_threshold;	/* check: percent of the event queue */
	int64_t		timeout_ms;		/* check, status: the whole run's time limit */
	char	  **command;
} Options;

/* The command word, parsed once (main.c). */
typedef enum DsyncCommand
{
	DSYNC_CMD_LOCK,
	DSYNC_CMD_ELECT,
	DSYNC_CMD_WATCH,
	DSYNC_CMD_STATUS,
	DSYNC_CMD_CHECK
} DsyncCommand;

/*
 * What a database has of dsync (probe.c), read from the catalogs and
 * pg_settings only, so that looking causes no error in the server log.
 */
typedef struct DsyncProbe
{
	bool		preloaded;		/* dsync.so is loaded: its settings are defined */
	bool		installed;		/* CREATE EXTENSION dsync was run here */
	int			version_num;	/* extversion as major * 100 + minor (105) */
	char		version[32];	/* extversion as text; "" if not installed */
	char		schema[128];	/* the extension's schema, unquoted */
} DsyncProbe;

/* The oldest extension version status and check can read (1.2). */
#define DSYNC_MIN_VERSION_NUM	102


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
	bool		queue;			/* wait in the line (queue.c), not in a backend */
	DsyncProbe	probe;			/* its schema names every dsync function (SchemaSql) */
} Holding;

/* common.c */
extern int	signal_pipe[2];
extern const char *progname;
extern bool CheckPooler(const Options *opt, PGconn *conn, bool watching);
extern void CancelStatement(PGconn *conn);
extern PGconn *Connect(const Options *opt, bool quiet);
extern PGconn *ConnectBy(const Options *opt, bool quiet, int64_t deadline_ms);
extern PGconn *ConnectWithin(const Options *opt, int64_t deadline_ms, char *error, size_t len, bool *timed_out);
extern char *DefaultHolder(void);
extern void Fatal(int code, const char *fmt,...) pg_attribute_noreturn_cli pg_attribute_printf_cli(2, 3);
extern void FatalResult(const char *what, PGconn *conn, PGresult *res) pg_attribute_noreturn_cli;
extern char *IntervalParam(int64_t ms, char *buf, size_t len);
extern void Note(const char *fmt,...) pg_attribute_printf_cli(1, 2);
extern void OneLine(char *text);
extern int64_t NowMs(void);
extern PGresult *Query(PGconn *conn, const char *sql, int nparams, const char *const *params, int64_t deadline_ms, void (*on_signal) (int, void *), void *arg, bool *timed_out);
extern int ReadSignal(void);
extern const char *ResultError(PGconn *conn, const PGresult *res, const char **state);
extern void SetSignalHandlers(void (*handler) (int), void (*pipe_handler) (int));
extern void SetupSignals(void);
extern void RememberSignal(int signo, void *arg);
extern PGresult *RunAcquiring(PGconn *conn, const char *sql, int nparams, const char *const *params, const char *lease, int *signo, bool *conn_lost, bool *refused);
extern PGresult *WaitCancellable(PGconn *conn, void (*on_signal) (int, void *), int *signo);
extern PGresult *WaitResult(PGconn *conn, int64_t deadline_ms, void (*on_signal) (int, void *), void *arg, bool *timed_out);

/* queue.c */
extern int	QueueListen(PGconn *conn, const DsyncProbe *probe);
extern char *QueueAcquire(PGconn *conn, const Options *opt, const char *lease, int64_t wait_ms, Holding *h, int *signo, bool *conn_lost, bool keep_place, bool *refused);

/* hold.c */
extern int ChildExitCode(int status);
extern void HoldWhileRunning(Holding *h, const char *group);
extern void HoldingSignal(int signo, void *arg);
extern void Release(Holding *h, const char *group);
extern void SetExpiry(Holding *h, int64_t sent_ms, double left_ms);
extern char *AcquireToken(PGconn *conn, Holding *h, const char *call, int nparams,
						  const char *const *params, const char *lease, int *signo,
						  bool *conn_lost, bool *refused);
extern void StartChild(Holding *h, const char *token);

/* lock.c */
extern int CommandElect(Options *opt);
extern int CommandLock(Options *opt);

/* watch.c */
extern int CommandWatch(Options *opt);

/* probe.c */
extern bool ProbeDsync(PGconn *conn, DsyncProbe *probe, int64_t deadline_ms, PGresult **failed, bool *timed_out);
extern int ProbeProblem(const DsyncProbe *probe, PGconn *conn, int min_version_num, char *buf, size_t len);
extern void RequireDsync(PGconn *conn, DsyncProbe *probe, int64_t deadline_ms, int min_version_num);
extern char *SchemaSql(PGconn *conn, const DsyncProbe *probe, const char *sql);

/* status.c */
extern int CommandStatus(Options *opt);

/* check.c */
extern int CommandCheck(Options *opt);

#endif							/* DSYNC_CLI_H */
