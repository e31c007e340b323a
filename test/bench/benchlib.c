/*
 * benchlib.c: helpers shared by the libpq benchmark drivers; see
 * benchlib.h.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <getopt.h>

#include "benchlib.h"



void
die(const char *fmt,...)
{
	va_list		ap;

	fflush(stdout);
	fprintf(stderr, "%s: ", bench_prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
	exit(2);
}

void *
xrealloc(void *p, size_t size)
{
	void	   *q = realloc(p, size);

	if (q == NULL)
		die("out of memory");
	return q;
}

static int64_t
clock_us(clockid_t clock)
{
	struct timespec ts;

	clock_gettime(clock, &ts);
	return (int64_t) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Wall-clock microseconds, comparable with the server's timestamps. */
int64_t
real_us(void)
{
	return clock_us(CLOCK_REALTIME);
}

int64_t
mono_us(void)
{
	return clock_us(CLOCK_MONOTONIC);
}

void
sleep_us(int64_t us)
{
	struct timespec ts;

	if (us <= 0)
		return;
	ts.tv_sec = us / 1000000;
	ts.tv_nsec = (us % 1000000) * 1000;
	while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
		;
}

/* ---------------------------------------------------------------------- */
/* Connections and queries                                                */

PGconn *
connect_db(const char *dbname, const char *appname, const char *options)
{
	const char *keys[] = {"dbname", "application_name", "options", NULL};
	const char *vals[] = {dbname, appname, options ? options : "", NULL};
	PGconn	   *c = PQconnectdbParams(keys, vals, 1);

	if (PQstatus(c) != CONNECTION_OK)
		die("connection %s failed: %s", appname, PQerrorMessage(c));
	return c;
}

/* Run sql with up to four text parameters; die unless it succeeds. */
PGresult *
run(PGconn *c, const char *sql, const char *p1, const char *p2,
	const char *p3, const char *p4)
{
	const char *params[4] = {p1, p2, p3, p4};
	int			n = p4 ? 4 : p3 ? 3 : p2 ? 2 : p1 ? 1 : 0;
	PGresult   *r = PQexecParams(c, sql, n, NULL, params, NULL, NULL, 0);

	if (PQresultStatus(r) != PGRES_TUPLES_OK && PQresultStatus(r) != PGRES_COMMAND_OK)
		die("query failed: %s  %s", PQresultErrorMessage(r), sql);
	return r;
}

/* Several statements in one string (LISTEN lists); die on error. */
void
run_script(PGconn *c, const char *sql)
{
	PGresult   *r = PQexec(c, sql);

	if (PQresultStatus(r) != PGRES_TUPLES_OK && PQresultStatus(r) != PGRES_COMMAND_OK)
		die("query failed: %s", PQresultErrorMessage(r));
	PQclear(r);
}

int64_t
int8_val(PGresult *r, int row, int col)
{
	if (PQntuples(r) <= row || PQgetisnull(r, row, col))
		die("unexpected NULL or missing row (row %d, column %d)", row, col);
	return strtoll(PQgetvalue(r, row, col), NULL, 10);
}

int64_t
query_int8(PGconn *c, const char *sql, const char *p1, const char *p2, const char *p3)
{
	PGresult   *r = run(c, sql, p1, p2, p3, NULL);
	int64_t		v = int8_val(r, 0, 0);

	PQclear(r);
	return v;
}

/* The schema-qualified name of the extension's lease table. */
char *
lease_table(PGconn *c)
{
	PGresult   *r = run(c, "SELECT quote_ident(extnamespace::regnamespace::text) || '.dsync_lease'"
						"  FROM pg_extension WHERE extname = 'dsync'", NULL, NULL, NULL, NULL);
	char	   *t;

	if (PQntuples(r) != 1)
		die("the dsync extension is not installed in this database");
	t = strdup(PQgetvalue(r, 0, 0));
	PQclear(r);
	return t;
}

/*
 * LISTEN on the channels, given as the rows of a query's first column, in
 * one round trip.  Returns the channel names (malloc'd) in row order.
 */
char **
listen_on(PGconn *listener, PGconn *helper, const char *channels_sql,
		  const char *p1, const char *p2, const char *p3, int *count)
{
	PGresult   *r = run(helper, channels_sql, p1, p2, p3, NULL);
	int			n = PQntuples(r);
	char	  **names = calloc(n > 0 ? n : 1, sizeof(char *));
	size_t		len = 0,
				cap = 4096;
	char	   *sql = xrealloc(NULL, cap);

	if (names == NULL)
		die("out of memory");
	sql[0] = '\0';
	for (int i = 0; i < n; i++)
	{
		const char *ch = PQgetvalue(r, i, 0);
		char	   *id = PQescapeIdentifier(listener, ch, strlen(ch));
		size_t		need;

		if (id == NULL)
			die("cannot quote a channel name: %s", PQerrorMessage(listener));
		need = len + strlen(id) + 16;
		if (need > cap)
		{
			cap = need * 2;
			sql = xrealloc(sql, cap);
		}
		len += sprintf(sql + len, "LISTEN %s;", id);
		PQfreemem(id);
		names[i] = strdup(ch);
	}
	PQclear(r);
	if (n > 0)
		run_script(listener, sql);
	free(sql);
	*count = n;
	return names;
}

/* ---------------------------------------------------------------------- */
/* Samples                                                                */


void
push(Samples *s, double x)
{
	if (s->n == s->cap)
	{
		s->cap = s->cap ? s->cap * 2 : 256;
		s->v = xrealloc(s->v, s->cap * sizeof(double));
	}
	s->v[s->n++] = x;
	s->sorted = false;
}

int
cmp_double(const void *x, const void *y)
{
	double		a = *(const double *) x,
				b = *(const double *) y;

	return a < b ? -1 : a > b;
}

/* Nearest-rank percentile; p50 is the usual median.  0 when empty. */
double
pct(Samples *s, double p)
{
	int			k;

	if (s->n == 0)
		return 0;
	if (!s->sorted)
	{
		qsort(s->v, s->n, sizeof(double), cmp_double);
		s->sorted = true;
	}
	if (p == 50)
		return s->n % 2 ? s->v[s->n / 2] : (s->v[s->n / 2 - 1] + s->v[s->n / 2]) / 2;
	if (p <= 0)
		return s->v[0];
	k = (int) (p / 100.0 * s->n + 0.999999);
	if (k < 1)
		k = 1;
	if (k > s->n)
		k = s->n;
	return s->v[k - 1];
}

int
count_over(Samples *s, double limit)
{
	int			c = 0;

	for (int i = 0; i < s->n; i++)
		c += s->v[i] > limit;
	return c;
}

void
print_dist_header(void)
{
	printf("  %-52s %6s %9s %9s %9s %9s %9s\n", "(ms)", "n", "min", "median", "p90", "p99", "max");
}

void
print_dist(const char *label, Samples *s)
{
	printf("  %-52s %6d %9.3f %9.3f %9.3f %9.3f %9.3f\n", label, s->n,
		   pct(s, 0), pct(s, 50), pct(s, 90), pct(s, 99), pct(s, 100));
}

void
emit_dist(const char *key, Samples *s)
{
	printf("@ %s_n %d\n", key, s->n);
	if (s->n == 0)
	{
		printf("@ %s_median_ms NA\n@ %s_p99_ms NA\n@ %s_max_ms NA\n@ %s_min_ms NA\n",
			   key, key, key, key);
		return;
	}
	printf("@ %s_median_ms %.3f\n", key, pct(s, 50));
	printf("@ %s_p99_ms %.3f\n", key, pct(s, 99));
	printf("@ %s_max_ms %.3f\n", key, pct(s, 100));
	printf("@ %s_min_ms %.3f\n", key, pct(s, 0));
}

/* ---------------------------------------------------------------------- */
/* Event payloads                                                         */


/* Pointer to the value of "key" in a flat JSON object, or NULL. */
const char *
json_value(const char *json, const char *key)
{
	char		pat[64];
	const char *p = json;
	size_t		len;

	snprintf(pat, sizeof(pat), "\"%s\"", key);
	len = strlen(pat);
	while ((p = strstr(p, pat)) != NULL)
	{
		p += len;
		while (*p == ' ')
			p++;
		if (*p == ':')
		{
			p++;
			while (*p == ' ')
				p++;
			return p;
		}
	}
	return NULL;
}

bool
json_string(const char *p, char *out, size_t size)
{
	size_t		n = 0;

	if (p == NULL || *p != '"')
		return false;
	for (p++; *p && *p != '"'; p++)
	{
		if (*p == '\\' && p[1])
			p++;
		if (n + 1 >= size)
			return false;
		out[n++] = *p;
	}
	out[n] = '\0';
	return *p == '"';
}

/* "2026-11-21T10:00:30.5+00:00" (also a space for T, Z, +hh) to us. */
bool
parse_ts(const char *s, int64_t *us)
{
	struct tm	tm;
	int			n = 0,
				oh = 0,
				om = 0,
				sign = 1;
	int64_t		frac = 0;
	const char *p;
	time_t		t;

	memset(&tm, 0, sizeof(tm));
	if (sscanf(s, "%4d-%2d-%2d%*1[T ]%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon,
			   &tm.tm_mday, &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &n) != 6 || n == 0)
		return false;
	p = s + n;
	if (*p == '.')
	{
		int64_t		scale = 100000;

		for (p++; *p >= '0' && *p <= '9'; p++)
		{
			frac += (*p - '0') * scale;
			scale /= 10;
		}
	}
	if (*p == 'Z')
		p++;
	else if (*p == '+' || *p == '-')
	{
		sign = *p == '-' ? -1 : 1;
		p++;
		if (sscanf(p, "%2d", &oh) != 1)
			return false;
		p += 2;
		if (*p == ':')
			p++;
		if (*p >= '0' && *p <= '9')
		{
			if (sscanf(p, "%2d", &om) != 1)
				return false;
			p += 2;
		}
	}
	else
		return false;
	if (*p != '\0')
		return false;
	tm.tm_year -= 1900;
	tm.tm_mon -= 1;
	t = timegm(&tm);
	*us = ((int64_t) t - sign * (oh * 3600 + om * 60)) * 1000000 + frac;
	return true;
}

/*
 * The format the spec asks for: UTC with a T and "+00:00" (RFC 3339), fractional seconds
 * with trailing zeros trimmed (and no "." when they are all zero).
 */
bool
ts_format_ok(const char *s)
{
	const char *shape = "dddd-dd-ddTdd:dd:dd";
	size_t		i;

	for (i = 0; shape[i]; i++)
	{
		if (shape[i] == 'd' ? !(s[i] >= '0' && s[i] <= '9') : s[i] != shape[i])
			return false;
	}
	s += i;
	if (*s == '.')
	{
		const char *start = ++s;

		while (*s >= '0' && *s <= '9')
			s++;
		if (s == start || s - start > 6 || s[-1] == '0')
			return false;
	}
	return strcmp(s, "+00:00") == 0;
}

bool
parse_event(const char *payload, Event *e)
{
	const char *p;

	memset(e, 0, sizeof(*e));
	if (!json_string(json_value(payload, "event"), e->kind, sizeof(e->kind)))
		return false;
	if (!json_string(json_value(payload, "lease"), e->lease, sizeof(e->lease)))
		return false;
	json_string(json_value(payload, "holder"), e->holder, sizeof(e->holder));
	if ((p = json_value(payload, "fencing")) != NULL && *p >= '0' && *p <= '9')
	{
		e->fencing = strtoll(p, NULL, 10);
		e->has_fencing = true;
	}
	if (json_string(json_value(payload, "expires_at"), e->expires_text, sizeof(e->expires_text)))
	{
		if (!parse_ts(e->expires_text, &e->expires_us))
			return false;
		e->has_expires = true;
	}
	return true;
}

/* ---------------------------------------------------------------------- */
/* Waiting for notifications                                              */


/*
 * Wait up to timeout_ms for input on any of the connections and hand every
 * notification to fn, with the client's real-time clock read as soon as
 * poll() returned.  Returns how many were handled.
 */
int
pump(PGconn **conns, int nconns, int timeout_ms, notify_fn fn, void *arg)
{
	struct pollfd pfd[MAX_LISTENERS];
	int			rc,
				handled = 0;
	int64_t		now;

	for (int i = 0; i < nconns; i++)
	{
		pfd[i].fd = PQsocket(conns[i]);
		pfd[i].events = POLLIN;
		pfd[i].revents = 0;
	}
	rc = poll(pfd, nconns, timeout_ms);
	now = real_us();
	if (rc < 0)
	{
		if (errno == EINTR)
			return 0;
		die("poll: %s", strerror(errno));
	}
	for (int i = 0; i < nconns; i++)
	{
		PGnotify   *n;

		if (pfd[i].revents && !PQconsumeInput(conns[i]))
			die("listener connection: %s", PQerrorMessage(conns[i]));
		while ((n = PQnotifies(conns[i])) != NULL)
		{
			fn(i, n, now, arg);
			PQfreemem(n);
			handled++;
		}
	}
	return handled;
}

/* ---------------------------------------------------------------------- */
/* /proc                                                                  */

/*
 * CPU ticks (utime + stime) and context switches of a process, from
 * /proc/<pid>/stat and /proc/<pid>/status.  False if they cannot be read.
 */
bool
proc_read(int pid, ProcSample *out)
{
	char		path[64],
				buf[4096],
			   *p;
	FILE	   *f;
	size_t		len;
	unsigned long utime,
				stime;

	memset(out, 0, sizeof(*out));
	if (pid <= 0)
		return false;
	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	if ((f = fopen(path, "r")) == NULL)
		return false;
	len = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[len] = '\0';
	/* Fields after the command name: state is field 3, utime 14, stime 15. */
	if ((p = strrchr(buf, ')')) == NULL ||
		sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu",
			   &utime, &stime) != 2)
		return false;
	out->ticks = (long) (utime + stime);

	snprintf(path, sizeof(path), "/proc/%d/status", pid);
	if ((f = fopen(path, "r")) == NULL)
		return false;
	while (fgets(buf, sizeof(buf), f))
	{
		sscanf(buf, "voluntary_ctxt_switches: %ld", &out->vcsw);
		sscanf(buf, "nonvoluntary_ctxt_switches: %ld", &out->ivcsw);
	}
	fclose(f);
	return true;
}

/* utime + stime of a process, in ms; -1 if it cannot be read. */
double
proc_cpu_ms(int pid)
{
	ProcSample	s;

	if (!proc_read(pid, &s))
		return -1;
	return s.ticks * 1000.0 / sysconf(_SC_CLK_TCK);
}

int
reaper_pid(PGconn *c)
{
	PGresult   *r = run(c, "SELECT pid FROM pg_stat_activity"
						" WHERE datname = current_database() AND backend_type LIKE 'dsync%'"
						" ORDER BY backend_start LIMIT 1", NULL, NULL, NULL, NULL);
	int			pid = PQntuples(r) ? atoi(PQgetvalue(r, 0, 0)) : 0;

	PQclear(r);
	return pid;
}

/* ---------------------------------------------------------------------- */
/* Command-line options                                                   */

/*
 * getopt over a table of options, each storing its argument as an int, a
 * double or a string; usage() (which should exit) on anything else.
 * Returns optind.
 */
int
parse_options(int argc, char **argv, const BenchOption *opts, void (*usage) (void))
{
	char		spec[128];
	size_t		len = 0;
	int			opt;

	for (const BenchOption *o = opts; o->letter; o++)
	{
		spec[len++] = o->letter;
		spec[len++] = ':';
	}
	spec[len] = '\0';
	while ((opt = getopt(argc, argv, spec)) != -1)
	{
		const BenchOption *o = opts;

		while (o->letter && o->letter != opt)
			o++;
		if (!o->letter)
			usage();
		else if (o->kind == OPT_INT)
			*(int *) o->dest = atoi(optarg);
		else if (o->kind == OPT_DOUBLE)
			*(double *) o->dest = atof(optarg);
		else
			*(const char **) o->dest = optarg;
	}
	return optind;
}

/* ---------------------------------------------------------------------- */
/* Hand-off drivers: interleaved variants measured on the server clock    */

static Variant *variants;
static int	nvariants;
static FILE *raw_file;

/* Register the variants; raw_path (optional) gets every sample as CSV. */
void
variants_init(Variant *v, int n, const char *raw_path)
{
	variants = v;
	nvariants = n;
	if (raw_path && (raw_file = fopen(raw_path, "w")) == NULL)
		die("cannot write %s: %s", raw_path, strerror(errno));
	if (raw_file)
		fprintf(raw_file, "variant,ms\n");
}

/* Something went wrong in an iteration of variant v (or, v < 0, outside). */
void
anomaly(int v, const char *fmt,...)
{
	va_list		ap;

	printf("anomaly (%s): ", v >= 0 ? variants[v].key : "check");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	if (v >= 0)
		variants[v].anomalies++;
}

void
add_sample(int v, int64_t usec, bool measured)
{
	if (!measured)
		return;
	push(&variants[v].samples, usec / 1000.0);
	if (raw_file)
		fprintf(raw_file, "%s,%.3f\n", variants[v].key, usec / 1000.0);
}

/*
 * Warm up, then run each of the first nrun variants once per iteration
 * (the others only collect figures), the order rotating from one iteration
 * to the next so that noise on a shared machine hits them alike.  Returns
 * the measured part's duration in seconds.
 */
double
run_interleaved(int nrun, int iterations, int warmup, void (*fn) (int v, bool measured))
{
	int64_t		start;

	for (int i = 0; i < warmup; i++)
		for (int v = 0; v < nrun; v++)
			fn(v, false);
	start = mono_us();
	for (int i = 0; i < iterations; i++)
		for (int j = 0; j < nrun; j++)
			fn((i + j) % nrun, true);
	if (raw_file)
		fclose(raw_file);
	raw_file = NULL;
	return (mono_us() - start) / 1e6;
}

/* Per variant: the minimum, the outliers and the anomalies. */
void
print_outliers(void)
{
	printf("\nOutliers and anomalies (anomalous iterations give no sample):\n");
	for (int v = 0; v < nvariants; v++)
	{
		Samples    *s = &variants[v].samples;

		printf("  %-12s min %7.3f ms   > 2 ms: %3d   > 10 ms: %3d   > 1 s: %3d   anomalies: %d\n",
			   variants[v].key, pct(s, 0), count_over(s, 2), count_over(s, 10),
			   count_over(s, 1000), variants[v].anomalies);
	}
}

PGconn *
connect_commit(const char *dbname, const char *appname, const char *commit)
{
	char		options[128];

	snprintf(options, sizeof(options), "-c synchronous_commit=%s", commit);
	return connect_db(dbname, appname, options);
}

void
send_query(PGconn *c, const char *sql, const char *p1, const char *p2)
{
	const char *params[2] = {p1, p2};
	int			n = p2 ? 2 : p1 ? 1 : 0;

	if (!PQsendQueryParams(c, sql, n, NULL, params, NULL, NULL, 0))
		die("send failed: %s", PQerrorMessage(c));
}

/* The one result of an async query (blocking); NULL, and an anomaly, on error. */
PGresult *
collect(PGconn *c, int v, const char *what)
{
	PGresult   *r,
			   *res = NULL;

	while ((r = PQgetResult(c)) != NULL)
	{
		if (PQresultStatus(r) != PGRES_TUPLES_OK)
		{
			anomaly(v, "%s failed: %s", what, PQresultErrorMessage(r));
			PQclear(r);
			continue;
		}
		if (res)
			PQclear(res);
		res = r;
	}
	return res;
}

bool
null_at(PGresult *r, int col)
{
	return PQntuples(r) < 1 || PQgetisnull(r, 0, col);
}

int64_t
int8_at(PGresult *r, int col)
{
	return int8_val(r, 0, col);
}

bool
bool_at(PGresult *r, int col)
{
	return !null_at(r, col) && PQgetvalue(r, 0, col)[0] == 't';
}

/*
 * Poll from the monitor session until the waiter's backend is asleep: in a
 * dsync wait of the given kind ('lease', 'semaphore', 'event'), or, for
 * kind NULL, waiting for an advisory lock.  Returns the server time (us)
 * at which that was seen, or -1 if the waiter finished its query instead
 * or did not get there within 5 seconds.
 */
int64_t
wait_until_asleep(PGconn *monitor, PGconn *waiter, const char *kind)
{
	const char *sql = kind ?
		"SELECT a.wait_event_type = 'Extension'"
		"       AND EXISTS (SELECT 1 FROM dsync_waiters x WHERE x.pid = a.pid AND x.kind = $2), "
		US("clock_timestamp()") " FROM pg_stat_activity a WHERE a.pid = $1" :
		"SELECT a.wait_event_type = 'Lock' AND a.wait_event = 'advisory', "
		US("clock_timestamp()") " FROM pg_stat_activity a WHERE a.pid = $1";
	char		pid[16];
	int64_t		give_up = mono_us() + 5000000;

	snprintf(pid, sizeof(pid), "%d", PQbackendPID(waiter));
	for (;;)
	{
		PGresult   *r = run(monitor, sql, pid, kind, NULL, NULL);
		bool		asleep = bool_at(r, 0);
		int64_t		at = PQntuples(r) ? int8_at(r, 1) : 0;

		PQclear(r);
		if (asleep)
			return at;
		if (!PQconsumeInput(waiter))
			die("waiter connection: %s", PQerrorMessage(waiter));
		if (!PQisBusy(waiter) || mono_us() > give_up)
			return -1;
		sleep_us(200);
	}
}

/* Release whatever anyone holds of name, after an anomaly. */
void
force_clean(PGconn *monitor, const char *name)
{
	PQclear(run(monitor, "SELECT dsync_force_release($1)", name, NULL, NULL, NULL));
}

/*
 * Take name for holder with the given ttl, without waiting: a durable
 * lease, or with durable false an ephemeral one (durable => false).
 * Returns the fencing token, or -1 after an anomaly (and a clean-up of
 * name).
 */
int64_t
take_lease(int v, PGconn *c, PGconn *monitor, const char *name, const char *holder,
		   const char *ttl, bool durable)
{
	PGresult   *r = durable ?
		run(c, "SELECT dsync_acquire($1, $2, $3::interval)", name, holder, ttl, NULL) :
		run(c, "SELECT dsync_acquire($1, $2, $3::interval, '0', NULL, false)", name, holder, ttl, NULL);
	int64_t		token = null_at(r, 0) ? -1 : int8_at(r, 0);

	PQclear(r);
	if (token < 0)
	{
		anomaly(v, "%s could not take %s", holder, name);
		force_clean(monitor, name);
	}
	return token;
}

/* take_lease of a durable lease. */
int64_t
take(int v, PGconn *c, PGconn *monitor, const char *name, const char *holder,
	 const char *ttl)
{
	return take_lease(v, c, monitor, name, holder, ttl, true);
}

/* Release name held by holder; an anomaly if the release returns false. */
void
release_as(int v, PGconn *c, const char *name, const char *holder)
{
	PGresult   *r = run(c, "SELECT dsync_release($1, $2)", name, holder, NULL, NULL);

	if (!bool_at(r, 0))
		anomaly(v, "%s's release of %s returned false", holder, name);
	PQclear(r);
}

/*
 * One dsync hand-off of name, which holder 'A' took with fencing token
 * token_a: the waiter blocks in dsync_acquire as holder wname (confirmed
 * asleep in a wait of the given kind), then the releaser commits A's
 * release.  Both timestamps come from the server clock; A's is taken
 * before its commit, which is when the release takes effect, so the
 * commit is part of the figure.  With durable false the lease is an
 * ephemeral one, and the waiter asks for it with durable => false and a
 * ttl of 10 s (an ephemeral ttl may not exceed dsync.ephemeral_max_ttl);
 * its release takes effect, and wakes the waiter, within A's call, so A's
 * timestamp is read just before that call (as advisory_handoff's
 * *from_before is): a timestamp read after it would come after the
 * waiter's grant as often as not.  Sets
 * *latency (us) and returns true, the waiter then holding name, or returns
 * false after an anomaly.
 */
bool
lease_handoff(int v, PGconn *releaser, PGconn *waiter, PGconn *monitor,
			  const char *name, const char *kind, const char *wname, int64_t token_a,
			  bool durable, int64_t *latency)
{
	PGresult   *r;
	int64_t		token_w,
				t_release,
				t_grant;
	bool		released;

	send_query(waiter, durable ?
			   "SELECT dsync_acquire($1, $2, '30 s', '30 s'), " US("clock_timestamp()") :
			   "SELECT dsync_acquire($1, $2, '10 s', '30 s', NULL, false), " US("clock_timestamp()"),
			   name, wname);
	if (wait_until_asleep(monitor, waiter, kind) < 0)
	{
		PQclear(run(releaser, "SELECT dsync_release($1, 'A')", name, NULL, NULL, NULL));
		r = collect(waiter, v, "the waiter's acquire");
		anomaly(v, "%s never showed as asleep in a dsync wait (its acquire returned %s)",
				wname, r == NULL ? "an error" : null_at(r, 0) ? "NULL" : PQgetvalue(r, 0, 0));
		PQclear(r);
		force_clean(monitor, name);
		return false;
	}

	/* Columns are evaluated in order: an ephemeral release's clock comes first. */
	r = run(releaser, durable ?
			"SELECT dsync_release($1, 'A'), " US("clock_timestamp()") :
			"SELECT " US("clock_timestamp()") ", dsync_release($1, 'A')",
			name, NULL, NULL, NULL);
	released = bool_at(r, durable ? 0 : 1);
	t_release = int8_at(r, durable ? 1 : 0);
	PQclear(r);

	r = collect(waiter, v, "the waiter's acquire");
	if (r == NULL || null_at(r, 0))
	{
		anomaly(v, "%s's acquire returned %s (A's release returned %s)", wname,
				r ? "NULL" : "an error", released ? "true" : "false");
		PQclear(r);
		force_clean(monitor, name);
		return false;
	}
	token_w = int8_at(r, 0);
	t_grant = int8_at(r, 1);
	PQclear(r);
	if (!released)
		anomaly(v, "A's release returned false");
	if (token_w <= token_a)
		anomaly(v, "fencing token did not grow: A %" PRId64 ", %s %" PRId64,
				token_a, wname, token_w);
	*latency = t_grant - t_release;
	return true;
}

/*
 * lease_handoff of a durable lease (or a semaphore's permit), whose latency
 * cannot be negative: returns it (us), or -1 after an anomaly.
 */
int64_t
dsync_handoff(int v, PGconn *releaser, PGconn *waiter, PGconn *monitor,
			  const char *name, const char *kind, const char *wname, int64_t token_a)
{
	int64_t		latency;

	if (!lease_handoff(v, releaser, waiter, monitor, name, kind, wname, token_a, true, &latency))
		return -1;
	return latency;
}

/*
 * The baseline: the waiter blocks in pg_advisory_lock(key) (confirmed
 * asleep), the holder unlocks it.  pg_advisory_unlock takes effect at once,
 * with no commit, so the holder reads the server clock both before and
 * after it: *from_before and *from_after are the waiter's grant measured
 * from each (us).  False after an anomaly.
 */
bool
advisory_handoff(int v, PGconn *holder, PGconn *waiter, PGconn *monitor, const char *key,
				 int64_t *from_before, int64_t *from_after)
{
	PGresult   *r;
	int64_t		t_before,
				t_after;

	PQclear(run(holder, "SELECT pg_advisory_lock($1::int8)", key, NULL, NULL, NULL));
	send_query(waiter, "SELECT pg_advisory_lock($1::int8), " US("clock_timestamp()"), key, NULL);
	if (wait_until_asleep(monitor, waiter, NULL) < 0)
	{
		anomaly(v, "the waiter never showed as waiting for the advisory lock");
		PQclear(run(holder, "SELECT pg_advisory_unlock_all()", NULL, NULL, NULL, NULL));
		PQclear(collect(waiter, v, "the advisory lock"));
		PQclear(run(waiter, "SELECT pg_advisory_unlock_all()", NULL, NULL, NULL, NULL));
		return false;
	}
	r = run(holder, "SELECT " US("clock_timestamp()") ", pg_advisory_unlock($1::int8), "
			US("clock_timestamp()"), key, NULL, NULL, NULL);
	t_before = int8_at(r, 0);
	t_after = int8_at(r, 2);
	PQclear(r);
	r = collect(waiter, v, "the advisory lock");
	if (r == NULL)
		die("advisory lock failed");
	*from_before = int8_at(r, 1) - t_before;
	*from_after = int8_at(r, 1) - t_after;
	PQclear(r);
	PQclear(run(waiter, "SELECT pg_advisory_unlock($1::int8)", key, NULL, NULL, NULL));
	return true;
}
