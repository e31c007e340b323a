/*-------------------------------------------------------------------------
 *
 * main.c
 *		The dsync command-line tool: run a command under a lease or only
 *		while leader, watch events, show leases, check health.  Built on libpq; this
 *		file is the command line (dsync_cli.h lists the other parts).
 *
 *	dsync lock NAME [--ttl 30s] [--wait DURATION] [--permits N | --shared] -- CMD...
 *	dsync elect GROUP [--ttl 15s] [--id ID] [--info JSON] -- CMD...
 *	dsync watch GROUP|NAME [--json]
 *	dsync status [NAME] [--json] [--timeout 10s]
 *	dsync check [--json] [--queue-threshold PERCENT] [--timeout 10s]
 *	dsync COMMAND --help, dsync help [COMMAND]
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
 * for signals, and timers; lease waits stand in the lease's line on an
 * idle connection (queue.c), or block inside the server where they cannot.  While
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
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dsync_cli.h"

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
			"  dsync [--dsn DSN] lock NAME [--ttl 30s] [--wait DURATION] [--permits N | --shared]\n"
			"                   [--holder ID] [--grace 5s] [--no-queue] -- COMMAND [ARGS...]\n"
			"  dsync [--dsn DSN] elect GROUP [--ttl 15s] [--id ID] [--info JSON]\n"
			"                   [--grace 5s] [--no-queue] -- COMMAND [ARGS...]\n"
			"  dsync [--dsn DSN] watch GROUP|NAME [--json]\n"
			"  dsync [--dsn DSN] status [NAME] [--json] [--timeout 10s]\n"
			"  dsync [--dsn DSN] check [--json] [--queue-threshold PERCENT] [--timeout 10s]\n"
			"  dsync COMMAND --help | help [COMMAND]\n"
			"  dsync --help | --version\n"
			"\n"
			"lock   runs COMMAND while holding the lease NAME (or one permit of an\n"
			"       N-permit semaphore), renewing it every ttl/3, and releases it when\n"
			"       COMMAND exits; exits with COMMAND's status, or 75 if --wait ran out.\n"
			"       Without --wait it waits as long as it takes.  --shared takes it as\n"
			"       one of any number of shared holders (a read lock), never together\n"
			"       with an exclusive one.\n"
			"elect  joins GROUP and campaigns for its lease; runs COMMAND only while\n"
			"       leader, and campaigns again if leadership is lost.\n"
			"       lock and elect wait in the lease's line on an idle connection\n"
			"       (dsync_queue); --no-queue waits in a running statement instead, as\n"
			"       they do anyway where LISTEN does not work (a pooler in transaction\n"
			"       mode) or the extension is older than 1.5.\n"
			"watch  prints lease, membership and event notifications as they happen.\n"
			"status shows live leases: holder, fencing token, time left, waiters\n"
			"       (--json: also waiters, counters and the worker, as one JSON document).\n"
			"check  exits 0 if dsync works in the database, else with a code that says\n"
			"       what is wrong (a health probe); its codes: \"dsync check --help\".\n"
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
			"77 permission denied, 78 dsync is not preloaded or the extension is not\n"
			"installed, 128+N signal N.\n"
			"check has codes of its own (72, 75, 78, 79).\n"
			"\n"
			"\"dsync COMMAND --help\" (or \"dsync help COMMAND\") shows one command's\n"
			"arguments, options and exit codes.\n");
}

/*
 * Option lines that several commands' help shows alike.
 */
#define HELP_GRACE_OPTION \
	"  --grace DURATION    time between SIGTERM and SIGKILL when COMMAND is\n" \
	"                      stopped (default 5s)\n"
#define HELP_TIMEOUT_OPTION \
	"  --timeout DURATION  give up after this long, connecting included, and\n" \
	"                      exit 69 (default 10s)\n"
#define HELP_COMMON_OPTIONS \
	"  --dsn DSN           the connection (default: the libpq environment,\n" \
	"                      PGHOST, PGDATABASE, ...)\n" \
	"  -h, --help          show this help and exit\n"

/*
 * UsageLock
 *		dsync lock --help.
 */
static void
UsageLock(void)
{
	printf("dsync lock: run a command while holding a lease\n"
		   "\n"
		   "Usage:\n"
		   "  dsync [--dsn DSN] lock NAME [OPTION...] -- COMMAND [ARGS...]\n"
		   "\n"
		   "Takes the lease NAME (or one permit of the semaphore NAME), runs COMMAND,\n"
		   "renews the lease every ttl/3 while COMMAND runs, and releases it when\n"
		   "COMMAND exits.  NAME may come before, between or after the options.  The\n"
		   "tool waits in the lease's line on an idle connection (dsync_queue); it\n"
		   "waits in a running statement instead with --no-queue, through a pooler in\n"
		   "transaction mode, or with an extension older than 1.5.\n"
		   "\n"
		   "Options:\n"
		   "  --ttl DURATION      the lease's time to live (default 30s, at least 300ms)\n"
		   "  --wait DURATION     wait at most this long for the lease, then exit 75\n"
		   "                      (default: as long as it takes; 0: try once)\n"
		   "  --permits N         take one of N permits: NAME is made a semaphore of N\n"
		   "                      permits (dsync_semaphore_create), N from 1 to %d\n"
		   "  --shared            take NAME as one of any number of shared holders (a\n"
		   "                      read lock), never together with an exclusive one;\n"
		   "                      not with --permits\n"
		   "  --holder ID         the holder's name (--id is the same; default\n"
		   "                      host:pid:random); printed on stderr\n"
		   "  --info JSON         a JSON value kept with the lease\n"
		   HELP_GRACE_OPTION
		   "  --no-queue          wait in a running statement, not in the line\n"
		   HELP_COMMON_OPTIONS
		   "\n"
		   "COMMAND sees DSYNC_LEASE, DSYNC_HOLDER and DSYNC_FENCING_TOKEN.  If the\n"
		   "lease is lost, COMMAND gets SIGTERM at once and SIGKILL after --grace; if\n"
		   "the server cannot be reached in time, COMMAND is stopped before the lease\n"
		   "expires.  SIGINT, SIGTERM and SIGHUP are passed on to COMMAND.\n"
		   "\n"
		   "Durations: 500ms, 30s, 5m, 1h (a bare number is seconds).\n"
		   "Exit codes: COMMAND's status (127: it could not be run; 128+N: signal N\n"
		   "ended it), 64 usage, 65 bad argument, 69 server unavailable or error,\n"
		   "70 lease lost (COMMAND was stopped), 71 system error, 75 --wait ran out,\n"
		   "77 permission denied, 78 dsync is not preloaded or the extension is not\n"
		   "installed, 128+N signal N while waiting.\n",
		   DSYNC_MAX_PERMITS);
}

/*
 * UsageElect
 *		dsync elect --help.
 */
static void
UsageElect(void)
{
	printf("dsync elect: run a command only while leader of a group\n"
		   "\n"
		   "Usage:\n"
		   "  dsync [--dsn DSN] elect GROUP [OPTION...] -- COMMAND [ARGS...]\n"
		   "\n"
		   "Joins GROUP (dsync_join) and campaigns for its lease; runs COMMAND only\n"
		   "while leader, renewing the lease every ttl/3.  If leadership is lost,\n"
		   "COMMAND is stopped and the tool campaigns again; it exits when COMMAND\n"
		   "exits by itself.  GROUP may come before, between or after the options.\n"
		   "The tool campaigns in the lease's line on an idle connection\n"
		   "(dsync_queue); in a running statement instead with --no-queue, through a\n"
		   "pooler in transaction mode, or with an extension older than 1.5.\n"
		   "\n"
		   "Options:\n"
		   "  --ttl DURATION      the leadership's and the membership's time to live\n"
		   "                      (default 15s, at least 300ms)\n"
		   "  --id ID             this member's name (--holder is the same; default\n"
		   "                      host:pid:random); printed on stderr\n"
		   "  --info JSON         a JSON value kept with the membership and the lease\n"
		   HELP_GRACE_OPTION
		   "  --no-queue          campaign in a running statement, not in the line\n"
		   HELP_COMMON_OPTIONS
		   "\n"
		   "COMMAND sees DSYNC_LEASE, DSYNC_HOLDER and DSYNC_FENCING_TOKEN.  When\n"
		   "leadership is lost, COMMAND gets SIGTERM at once and SIGKILL after\n"
		   "--grace; if the server cannot be reached in time, COMMAND is stopped\n"
		   "before the lease expires.  SIGINT, SIGTERM and SIGHUP are passed on to\n"
		   "COMMAND.  Durations: 500ms, 30s, 5m, 1h (a bare number is seconds).\n"
		   "\n"
		   "Exit codes: COMMAND's status when it exits by itself (127: it could not\n"
		   "be run; 128+N: signal N ended it), 64 usage, 65 bad argument, 69 server\n"
		   "unavailable (at the start; later the tool reconnects) or error, 71 system\n"
		   "error, 77 permission denied, 78 dsync is not preloaded or the extension\n"
		   "is not installed, 128+N signal N while campaigning.\n");
}

/*
 * UsageWatch
 *		dsync watch --help.
 */
static void
UsageWatch(void)
{
	printf("dsync watch: print a group's or a lease's events as they happen\n"
		   "\n"
		   "Usage:\n"
		   "  dsync [--dsn DSN] watch GROUP|NAME [--json]\n"
		   "\n"
		   "Listens on the channel of GROUP or NAME (dsync_channel) and prints each\n"
		   "lease, membership and event notification that dsync sends there, one\n"
		   "line each; notifications sent by others are ignored.  If the connection\n"
		   "drops, the tool reconnects and first prints, from the event log, what\n"
		   "was sent meanwhile.  It runs until SIGINT, SIGTERM or SIGHUP.\n"
		   "\n"
		   "Options:\n"
		   "  --json              print each notification's JSON instead of a sentence\n"
		   HELP_COMMON_OPTIONS
		   "\n"
		   "Exit codes: 0 stopped by a signal, 64 usage, 65 bad argument, 69 server\n"
		   "error, 71 system error, 77 permission denied, 78 dsync is not preloaded,\n"
		   "the extension is not installed, or LISTEN cannot work (a pooler in\n"
		   "transaction mode).\n");
}

/*
 * UsageStatus
 *		dsync status --help.
 */
static void
UsageStatus(void)
{
	printf("dsync status: show live leases\n"
		   "\n"
		   "Usage:\n"
		   "  dsync [--dsn DSN] status [NAME] [--json] [--timeout DURATION]\n"
		   "\n"
		   "Prints the live leases (dsync_leases), or those of NAME only, one line per\n"
		   "holder: lease, holder, fencing token, permits, time left, waiters and\n"
		   "owner.  It reads the catalogs first: where dsync is not preloaded or the\n"
		   "extension is not installed it says so, and the server logs no error.\n"
		   "\n"
		   "Options:\n"
		   "  --json              print one JSON document instead: the leases, the\n"
		   "                      waiters, the database's counters (dsync_stats) and\n"
		   "                      its worker (dsync_databases); times RFC 3339 in UTC,\n"
		   "                      fencing tokens JSON numbers\n"
		   HELP_TIMEOUT_OPTION
		   HELP_COMMON_OPTIONS
		   "\n"
		   "Exit codes: 0 done, 64 usage, 65 bad argument, 69 server unavailable,\n"
		   "error or --timeout ran out, 77 permission denied, 78 dsync is not\n"
		   "preloaded or the extension is not installed (or older than 1.2).\n");
}

/*
 * UsageCheck
 *		dsync check --help.
 */
static void
UsageCheck(void)
{
	printf("dsync check: is dsync working in this database? (a health probe)\n"
		   "\n"
		   "Usage:\n"
		   "  dsync [--dsn DSN] check [--json] [--queue-threshold PERCENT]\n"
		   "                          [--timeout DURATION]\n"
		   "\n"
		   "Looks, in this order, whether the server can be reached, dsync is in\n"
		   "shared_preload_libraries, the extension is installed in the database\n"
		   "(1.2 or later), a worker serves the database (dsync_stats.served), and\n"
		   "the event queue is no fuller than --queue-threshold.  Prints one line on\n"
		   "stdout, \"ok: ...\" or what is wrong and what to do, and exits with the\n"
		   "code of the first problem found.  It reads only pg_settings, the catalogs\n"
		   "and dsync's views: any role that can connect may run it, and the server\n"
		   "logs no error.  Use it as a Kubernetes exec probe or a load balancer's\n"
		   "check.\n"
		   "\n"
		   "Options:\n"
		   "  --json              print one JSON object instead of the line\n"
		   "  --queue-threshold PERCENT\n"
		   "                      unhealthy (75) when the server's event queue is\n"
		   "                      fuller than this (0 to 100, default 80)\n"
		   HELP_TIMEOUT_OPTION
		   HELP_COMMON_OPTIONS
		   "\n"
		   "Exit codes: 0 healthy, 64 usage, 69 server unavailable, error or\n"
		   "--timeout ran out, 72 dsync is not in shared_preload_libraries,\n"
		   "75 the event queue is fuller than --queue-threshold, 77 permission\n"
		   "denied, 78 the extension is not installed (or older than 1.2),\n"
		   "79 no worker serves the database.\n");
}

/*
 * CommandUsage
 *		One command's usage, on stdout (its --help).
 */
static void
CommandUsage(DsyncCommand command)
{
	switch (command)
	{
		case DSYNC_CMD_LOCK:
			UsageLock();
			break;
		case DSYNC_CMD_ELECT:
			UsageElect();
			break;
		case DSYNC_CMD_WATCH:
			UsageWatch();
			break;
		case DSYNC_CMD_STATUS:
			UsageStatus();
			break;
		case DSYNC_CMD_CHECK:
			UsageCheck();
			break;
	}
}

/*
 * UsageError
 *		Complain about the command line and exit 64.
 */
static void UsageError(const char *fmt,...) pg_attribute_noreturn_cli pg_attribute_printf_cli(1, 2);

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
 * ParsePercent
 *		A percentage from 0 to 100, with or without a "%" after it.
 */
static double
ParsePercent(const char *opt, const char *text)
{
	char	   *end;
	double		value;

	errno = 0;
	value = strtod(text, &end);
	if (*end == '%')
		end++;
	if (end == text || *end != '\0' || errno != 0 || !(value >= 0 && value <= 100))
		UsageError("invalid %s \"%s\": expected a percentage from 0 to 100", opt, text);
	return value;
}

/*
 * ParseCommand
 *		The command word, as the one value every later decision looks at.
 */
static DsyncCommand
ParseCommand(const char *word)
{
	static const struct
	{
		const char *word;
		DsyncCommand command;
	}			commands[] = {
		{"lock", DSYNC_CMD_LOCK},
		{"elect", DSYNC_CMD_ELECT},
		{"watch", DSYNC_CMD_WATCH},
		{"status", DSYNC_CMD_STATUS},
		{"check", DSYNC_CMD_CHECK},
	};

	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (strcmp(word, commands[i].word) == 0)
			return commands[i].command;
	UsageError("unknown command \"%s\"", word);
	return DSYNC_CMD_STATUS;	/* not reached */
}

/*
 * HelpOrVersion
 *		-h or -V, before or after the command word: print and exit 0.
 *		After the command word (command not NULL), -h is that command's help.
 */
static int
HelpOrVersion(int c, const DsyncCommand *command)
{
	if (c == 'h' && command != NULL)
		CommandUsage(*command);
	else if (c == 'h')
		Usage(stdout);
	else
		printf("dsync %s\n", DSYNC_VERSION);
	return 0;
}

/*
 * Help
 *		dsync help [COMMAND]: the usage, or one command's.
 */
static int
Help(int argc, char **argv, int first)
{
	DsyncCommand command;

	if (first >= argc)
		return HelpOrVersion('h', NULL);
	if (first + 1 < argc)
		UsageError("help takes one command name, not \"%s\"", argv[first + 1]);
	command = ParseCommand(argv[first]);
	return HelpOrVersion('h', &command);
}

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
		{"shared", no_argument, NULL, 's'},
		{"holder", required_argument, NULL, 'H'},
		{"id", required_argument, NULL, 'i'},
		{"info", required_argument, NULL, 'I'},
		{"grace", required_argument, NULL, 'g'},
		{"json", no_argument, NULL, 'j'},
		{"no-queue", no_argument, NULL, 'Q'},
		{"queue-threshold", required_argument, NULL, 'q'},
		{"timeout", required_argument, NULL, 'T'},
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'V'},
		{NULL, 0, NULL, 0}
	};
	Options		opt;
	const char *cmd;
	DsyncCommand command;
	int			c;
	bool		ttl_given = false;
	bool		saw_dashdash = false;
	bool		threshold_given = false;
	bool		timeout_given = false;

	memset(&opt, 0, sizeof(opt));
	opt.wait_ms = -1;
	opt.grace_ms = 5000;
	opt.permits = 1;
	opt.queue_threshold = 80;
	opt.timeout_ms = DEFAULT_TIMEOUT_MS;

	/* Options before the command word, then the command's own. */
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+hV", long_options, NULL)) != -1)
	{
		if (c == 'h' || c == 'V')
			return HelpOrVersion(c, NULL);
		if (c != 'd')
			UsageError("only --dsn may come before the command (lock, elect, watch, status or check)");
		opt.dsn = optarg;
	}
	if (optind >= argc)
		UsageError("no command given");
	cmd = argv[optind++];
	if (strcmp(cmd, "help") == 0)
		return Help(argc, argv, optind);
	command = ParseCommand(cmd);

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

						if (*end != '\0' || v < 1 || v > DSYNC_MAX_PERMITS)
							UsageError("invalid --permits \"%s\": expected 1 to %d", optarg,
									   DSYNC_MAX_PERMITS);
						opt.permits = (int) v;
					}
					break;
				case 's':
					opt.shared = true;
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
				case 'Q':
					opt.no_queue = true;
					break;
				case 'q':
					opt.queue_threshold = ParsePercent("--queue-threshold", optarg);
					threshold_given = true;
					break;
				case 'T':
					opt.timeout_ms = ParseDuration("--timeout", optarg, false);
					timeout_given = true;
					break;
				case 'h':
				case 'V':
					return HelpOrVersion(c, &command);
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

	if (command == DSYNC_CMD_LOCK || command == DSYNC_CMD_ELECT)
	{
		bool		elect = command == DSYNC_CMD_ELECT;

		if (opt.name == NULL || opt.name[0] == '\0')
			UsageError("%s needs a %s name", cmd, elect ? "group" : "lease");
		if (!saw_dashdash && optind < argc)
			UsageError("unexpected argument \"%s\" (the command goes after \"--\")", argv[optind]);
		if (!saw_dashdash || optind >= argc)
			UsageError("%s needs \"-- COMMAND [ARGS...]\"", cmd);
		if (elect && (opt.permits != 1 || opt.wait_ms >= 0 || opt.shared))
			UsageError("elect takes no --permits, --shared or --wait");
		if (opt.shared && opt.permits != 1)
			UsageError("--shared and --permits cannot be used together");
		if (!elect && opt.json)
			UsageError("lock takes no --json");
		if (threshold_given || timeout_given)
			UsageError("%s takes no %s", cmd,
					   threshold_given ? "--queue-threshold" : "--timeout");
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
		opt.permits != 1 || opt.shared || opt.no_queue)
		UsageError("%s takes no --ttl, --wait, --permits, --shared, --holder, --id, --info or --no-queue", cmd);
	if (threshold_given && command != DSYNC_CMD_CHECK)
		UsageError("%s takes no --queue-threshold", cmd);
	if (timeout_given && command == DSYNC_CMD_WATCH)
		UsageError("watch takes no --timeout (it runs until stopped)");
	if (command == DSYNC_CMD_WATCH)
	{
		if (opt.name == NULL)
			UsageError("watch needs a group or lease name");
		SetupSignals();
		return CommandWatch(&opt);
	}
	if (command == DSYNC_CMD_CHECK)
	{
		if (opt.name != NULL)
			UsageError("check takes no name (it checks the database it connects to)");
		return CommandCheck(&opt);
	}
	return CommandStatus(&opt);
}
