/*
 * sem_handoff.c: wake-up latency of dsync semaphores and one-to-one events,
 * against a blocking pg_advisory_lock hand-off measured in the same run.
 *
 * Driven by sem_bench.sh, which starts a throwaway server, creates the
 * extension, builds this file and runs it; see the header of that script
 * for how to run it.  Connection settings come from PGHOST, PGPORT and
 * PGUSER (a superuser: dsync_force_release cleans up after anomalies).
 *
 * Every latency is the difference of two clock_timestamp() values taken
 * inside the server (the same clock), never a client-side time, exactly as
 * handoff.c does it:
 *
 *   sem-off / sem-on   Semaphore S has 2 permits, held by holders A and B
 *                      (acquired by the releasing session, ttl 30 s and
 *                      1 hour).  Waiter C blocks in
 *                      SELECT dsync_acquire(S,'C','30 s','30 s'), ts
 *                      (confirmed asleep from a monitor session:
 *                      pg_stat_activity.wait_event_type = 'Extension' and
 *                      a row of kind 'semaphore' in dsync_waiters); then,
 *                      in autocommit with synchronous_commit off (on),
 *                      SELECT dsync_release(S,'A'), ts.
 *                      latency = C's ts - the releaser's ts.  The releaser's
 *                      ts is taken before its commit, when the release
 *                      takes effect, so the commit (with "on", its WAL
 *                      flush) is part of the figure.  Checked: the release
 *                      returned true, C got a token greater than A's, and
 *                      afterwards exactly B and C hold S.
 *   event-off/event-on The waiter blocks in
 *                      SELECT dsync_event_wait(E,'30 s'), ts
 *                      (confirmed asleep the same way, kind 'event'); then
 *                      SELECT dsync_event_set(E), ts, in autocommit.
 *                      latency = waiter's ts - setter's ts.  Checked: the
 *                      wait returned true and no signal is left pending.
 *   lease-off          For reference: the same hand-off on a one-permit
 *                      lease (handoff.c's dsync-off), kind 'lease'.
 *   advisory           The baseline: the waiter blocks in
 *                      SELECT pg_advisory_lock(k), ts; the releaser runs
 *                      SELECT ts, pg_advisory_unlock(k), ts.
 *                      pg_advisory_unlock frees the lock at once (there is
 *                      no commit to wait for), so the waiter may well run
 *                      before the releaser's second ts: handoff.c's way
 *                      (the ts after the unlock) gives zero or negative
 *                      figures on a 2-core machine, and no ratio can be
 *                      taken against them.  The baseline is therefore
 *                      measured from the ts just before the unlock, the
 *                      last moment before the release takes effect, as
 *                      the dsync figures are (their ts precedes the
 *                      commit).  handoff.c's figure is printed as well.
 *
 * The variants are interleaved, their order rotating from one iteration to
 * the next, so that noise on a shared machine hits them alike.  Ends with a
 * Markdown table (median, p99, ratio to the advisory baseline).  Timings
 * are printed, never asserted; the exit status is non-zero only if the
 * benchmark itself could not run.  Anything that went wrong in an
 * iteration (a NULL grant, a wait that returned false, an error) is printed
 * as an "anomaly" line, counted, and that sample is not used.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

/* A server timestamp in microseconds since the Unix epoch, as int8. */
#define TS "(extract(epoch FROM clock_timestamp()) * 1000000)::int8"

#define SEM_NAME	"sem-handoff"
#define EVENT_NAME	"event-handoff"
#define LEASE_NAME	"lease-handoff"
#define ADVISORY_KEY "4243"

enum
{
	V_SEM_OFF,
	V_SEM_ON,
	V_EVENT_OFF,
	V_EVENT_ON,
	V_LEASE_OFF,
	V_ADVISORY,
	NVARIANTS,
	V_ADVISORY_AFTER = NVARIANTS	/* not a variant of its own: see above */
};

static const char *const variant_key[NVARIANTS + 1] = {
	"sem-off", "sem-on", "event-off", "event-on", "lease-off", "advisory",
	"adv-after"
};

static const char *const variant_label[NVARIANTS + 1] = {
	"semaphore permit hand-off (releaser sync_commit=off)",
	"semaphore permit hand-off (releaser sync_commit=on)",
	"event set-to-wake (setter sync_commit=off)",
	"event set-to-wake (setter sync_commit=on)",
	"1-permit lease hand-off (releaser sync_commit=off)",
	"pg_advisory_lock hand-off (baseline; ts before the unlock)",
	"pg_advisory_lock hand-off, ts after the unlock (handoff.c's way)",
};

typedef struct Samples
{
	double	   *ms;
	int			n;
	int			anomalies;
} Samples;

static Samples samples[NVARIANTS + 1];

static int	iterations = 200;
static int	warmup = 10;
static const char *raw_path = NULL;
static FILE *raw;

/* Sessions: releasers/setters (synchronous_commit off / on), waiter, monitor. */
static PGconn *a_off;
static PGconn *a_on;
static PGconn *w;
static PGconn *m;
static int	w_pid;

static void
die(const char *fmt,...)
{
	va_list		ap;

	fflush(stdout);
	fprintf(stderr, "sem_handoff: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
	exit(2);
}

static void
anomaly(int variant, const char *fmt,...)
{
	va_list		ap;

	printf("anomaly (%s): ", variant >= 0 ? variant_key[variant] : "setup");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	if (variant >= 0)
		samples[variant].anomalies++;
}

static int64_t
mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t) ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void
sleep_us(int64_t us)
{
	struct timespec ts;
	int64_t		t = mono_ns() + us * 1000;

	ts.tv_sec = t / 1000000000;
	ts.tv_nsec = t % 1000000000;
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

static PGconn *
connect_as(const char *dbname, const char *appname, const char *commit)
{
	char		options[128];
	const char *keys[] = {"dbname", "application_name", "options", NULL};
	const char *vals[4];
	PGconn	   *c;

	snprintf(options, sizeof(options), "-c synchronous_commit=%s", commit);
	vals[0] = dbname;
	vals[1] = appname;
	vals[2] = options;
	vals[3] = NULL;
	c = PQconnectdbParams(keys, vals, 1);
	if (PQstatus(c) != CONNECTION_OK)
		die("connection %s failed: %s", appname, PQerrorMessage(c));
	return c;
}

/* Run sql with up to two text parameters; die unless it succeeds. */
static PGresult *
run(PGconn *c, const char *sql, const char *p1, const char *p2)
{
	const char *params[2] = {p1, p2};
	int			n = p2 ? 2 : p1 ? 1 : 0;
	PGresult   *r = PQexecParams(c, sql, n, NULL, params, NULL, NULL, 0);

	if (PQresultStatus(r) != PGRES_TUPLES_OK && PQresultStatus(r) != PGRES_COMMAND_OK)
		die("query failed: %s\n  %s", PQresultErrorMessage(r), sql);
	return r;
}

static void
run_discard(PGconn *c, const char *sql, const char *p1, const char *p2)
{
	PQclear(run(c, sql, p1, p2));
}

static void
send_async(PGconn *c, const char *sql, const char *p1)
{
	const char *params[1] = {p1};

	if (!PQsendQueryParams(c, sql, p1 ? 1 : 0, NULL, params, NULL, NULL, 0))
		die("send failed: %s", PQerrorMessage(c));
}

/* Collect the one result of an async query (blocking); NULL on error. */
static PGresult *
collect(PGconn *c, int variant, const char *what)
{
	PGresult   *r,
			   *res = NULL;

	while ((r = PQgetResult(c)) != NULL)
	{
		if (PQresultStatus(r) != PGRES_TUPLES_OK)
		{
			anomaly(variant, "%s failed: %s", what, PQresultErrorMessage(r));
			PQclear(r);
			continue;
		}
		if (res)
			PQclear(res);
		res = r;
	}
	return res;
}

static bool
isnull(PGresult *r, int col)
{
	return PQntuples(r) < 1 || PQgetisnull(r, 0, col);
}

static int64_t
int8_at(PGresult *r, int col)
{
	if (isnull(r, col))
		die("unexpected NULL in column %d", col);
	return strtoll(PQgetvalue(r, 0, col), NULL, 10);
}

static bool
bool_at(PGresult *r, int col)
{
	return !isnull(r, col) && PQgetvalue(r, 0, col)[0] == 't';
}

static void
add_sample(int v, int64_t usec, bool measured)
{
	Samples    *s = &samples[v];

	if (!measured)
		return;
	s->ms[s->n++] = usec / 1000.0;
	if (raw)
		fprintf(raw, "%s,%.3f\n", variant_key[v], usec / 1000.0);
}

/*
 * Poll from the monitor session until the waiter is asleep: in a dsync wait
 * of the given kind ('semaphore', 'event', 'lease'), or, for kind NULL,
 * waiting for an advisory lock.  False if the waiter finished its query
 * instead, or did not get there within 5 seconds.
 */
static bool
wait_until_asleep(const char *kind)
{
	const char *sql = kind ?
		"SELECT a.wait_event_type = 'Extension'"
		"       AND EXISTS (SELECT 1 FROM dsync_waiters x WHERE x.pid = a.pid AND x.kind = $2)"
		"  FROM pg_stat_activity a WHERE a.pid = $1" :
		"SELECT a.wait_event_type = 'Lock' AND a.wait_event = 'advisory'"
		"  FROM pg_stat_activity a WHERE a.pid = $1";
	char		pid[16];
	int64_t		give_up = mono_ns() + 5 * (int64_t) 1000000000;

	snprintf(pid, sizeof(pid), "%d", w_pid);
	for (;;)
	{
		PGresult   *r = run(m, sql, pid, kind);
		bool		asleep = bool_at(r, 0);

		PQclear(r);
		if (asleep)
			return true;
		if (!PQconsumeInput(w))
			die("waiter connection: %s", PQerrorMessage(w));
		if (!PQisBusy(w) || mono_ns() > give_up)
			return false;
		sleep_us(200);
	}
}

static void
force_clean(const char *name)
{
	run_discard(m, "SELECT dsync_force_release($1)", name, NULL);
}

/* The holders of a lease or semaphore, sorted, comma-separated. */
static void
holders_of(const char *name, char *buf, size_t size)
{
	PGresult   *r = run(m, "SELECT coalesce(string_agg(holder, ',' ORDER BY holder), '')"
						"  FROM dsync_leases WHERE lease = $1", name, NULL);

	snprintf(buf, size, "%s", PQgetvalue(r, 0, 0));
	PQclear(r);
}

/* ---------------------------------------------------------------------- */

/*
 * A blocked acquire of the last taken permit (or of a one-permit lease)
 * woken by the commit of a release.
 */
static void
iter_permit(int v, bool measured)
{
	bool		sem = v != V_LEASE_OFF;
	PGconn	   *a = v == V_SEM_ON ? a_on : a_off;
	const char *name = sem ? SEM_NAME : LEASE_NAME;
	PGresult   *r;
	int64_t		token_a,
				token_c,
				t_release,
				t_grant;
	bool		released;
	char		holders[256];

	r = run(a, "SELECT dsync_acquire($1, 'A', '30 s')", name, NULL);
	if (isnull(r, 0))
	{
		PQclear(r);
		anomaly(v, "A could not take %s", name);
		force_clean(name);
		return;
	}
	token_a = int8_at(r, 0);
	PQclear(r);
	if (sem)
	{
		/* B's permit, kept for the whole run (a reentrant re-acquire). */
		r = run(a, "SELECT dsync_acquire($1, 'B', '1 hour')", name, NULL);
		if (isnull(r, 0))
		{
			PQclear(r);
			anomaly(v, "B could not take the second permit of %s", name);
			force_clean(name);
			return;
		}
		PQclear(r);
	}

	send_async(w, "SELECT dsync_acquire($1, 'C', '30 s', '30 s'), " TS, name);
	if (!wait_until_asleep(sem ? "semaphore" : "lease"))
	{
		PGresult   *early;

		run_discard(a, "SELECT dsync_release($1, 'A')", name, NULL);
		early = collect(w, v, "C's acquire");
		anomaly(v, "C never showed as asleep in a dsync wait (its acquire returned %s)",
				early == NULL ? "an error" : isnull(early, 0) ? "NULL" : PQgetvalue(early, 0, 0));
		PQclear(early);
		force_clean(name);
		return;
	}

	r = run(a, "SELECT dsync_release($1, 'A'), " TS, name, NULL);
	released = bool_at(r, 0);
	t_release = int8_at(r, 1);
	PQclear(r);

	r = collect(w, v, "C's acquire");
	if (r == NULL || isnull(r, 0))
	{
		anomaly(v, "C's acquire returned %s (A's release returned %s)",
				r ? "NULL" : "an error", released ? "true" : "false");
		PQclear(r);
		force_clean(name);
		return;
	}
	token_c = int8_at(r, 0);
	t_grant = int8_at(r, 1);
	PQclear(r);
	if (!released)
		anomaly(v, "A's release returned false");
	if (token_c <= token_a)
		anomaly(v, "fencing token did not grow: A %" PRId64 ", C %" PRId64, token_a, token_c);

	holders_of(name, holders, sizeof(holders));
	if (strcmp(holders, sem ? "B,C" : "C") != 0)
		anomaly(v, "after the hand-off %s is held by '%s', expected '%s'",
				name, holders, sem ? "B,C" : "C");

	r = run(w, "SELECT dsync_release($1, 'C')", name, NULL);
	if (!bool_at(r, 0))
		anomaly(v, "C's release returned false");
	PQclear(r);

	add_sample(v, t_grant - t_release, measured);
}

/* A blocked dsync_event_wait woken by the commit of dsync_event_set. */
static void
iter_event(int v, bool measured)
{
	PGconn	   *a = v == V_EVENT_ON ? a_on : a_off;
	PGresult   *r;
	int64_t		t_set,
				t_wake,
				left;

	r = run(m, "SELECT dsync_event_clear($1)", EVENT_NAME, NULL);
	left = int8_at(r, 0);
	PQclear(r);
	if (left != 0)
		anomaly(v, "%" PRId64 " signal(s) were pending before the wait", left);

	send_async(w, "SELECT dsync_event_wait($1, '30 s'), " TS, EVENT_NAME);
	if (!wait_until_asleep("event"))
	{
		PGresult   *early;

		run_discard(a, "SELECT dsync_event_set($1)", EVENT_NAME, NULL);
		early = collect(w, v, "the event wait");
		anomaly(v, "the waiter never showed as asleep in a dsync wait (its wait returned %s)",
				early == NULL ? "an error" : isnull(early, 0) ? "NULL" : PQgetvalue(early, 0, 0));
		PQclear(early);
		return;
	}

	r = run(a, "SELECT dsync_event_set($1), " TS, EVENT_NAME, NULL);
	t_set = int8_at(r, 1);
	PQclear(r);

	r = collect(w, v, "the event wait");
	if (r == NULL || !bool_at(r, 0))
	{
		anomaly(v, "the event wait returned %s after the set",
				r == NULL ? "an error" : isnull(r, 0) ? "NULL" : "false");
		PQclear(r);
		return;
	}
	t_wake = int8_at(r, 1);
	PQclear(r);

	r = run(m, "SELECT dsync_event_is_set($1)", EVENT_NAME, NULL);
	if (bool_at(r, 0))
		anomaly(v, "a signal is still pending after one set and one wait");
	PQclear(r);

	add_sample(v, t_wake - t_set, measured);
}

/* The baseline: pg_advisory_lock hand-off. */
static void
iter_advisory(bool measured)
{
	PGresult   *r;
	int64_t		t_before,
				t_after,
				t_grant;

	run_discard(a_off, "SELECT pg_advisory_lock($1::int8)", ADVISORY_KEY, NULL);
	send_async(w, "SELECT pg_advisory_lock($1::int8), " TS, ADVISORY_KEY);
	if (!wait_until_asleep(NULL))
	{
		anomaly(V_ADVISORY, "the waiter never showed as waiting for the advisory lock");
		run_discard(a_off, "SELECT pg_advisory_unlock_all()", NULL, NULL);
		PQclear(collect(w, V_ADVISORY, "the advisory lock"));
		run_discard(w, "SELECT pg_advisory_unlock_all()", NULL, NULL);
		return;
	}
	r = run(a_off, "SELECT " TS ", pg_advisory_unlock($1::int8), " TS, ADVISORY_KEY, NULL);
	t_before = int8_at(r, 0);
	t_after = int8_at(r, 2);
	PQclear(r);
	r = collect(w, V_ADVISORY, "the advisory lock");
	if (r == NULL)
		die("advisory lock failed");
	t_grant = int8_at(r, 1);
	PQclear(r);
	run_discard(w, "SELECT pg_advisory_unlock($1::int8)", ADVISORY_KEY, NULL);

	add_sample(V_ADVISORY, t_grant - t_before, measured);
	add_sample(V_ADVISORY_AFTER, t_grant - t_after, measured);
}

static void
run_variant(int v, bool measured)
{
	switch (v)
	{
		case V_SEM_OFF:
		case V_SEM_ON:
		case V_LEASE_OFF:
			iter_permit(v, measured);
			break;
		case V_EVENT_OFF:
		case V_EVENT_ON:
			iter_event(v, measured);
			break;
		case V_ADVISORY:
			iter_advisory(measured);
			break;
	}
}

/* ---------------------------------------------------------------------- */

static int
cmp_double(const void *x, const void *y)
{
	double		a = *(const double *) x,
				b = *(const double *) y;

	return a < b ? -1 : a > b;
}

/* Nearest-rank percentile of sorted values; p50 is the usual median. */
static double
percentile(const double *v, int n, double p)
{
	int			k;

	if (n == 0)
		return 0;
	if (p == 50)
		return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
	k = (int) (p / 100.0 * n + 0.999999);
	if (k < 1)
		k = 1;
	if (k > n)
		k = n;
	return v[k - 1];
}

static void
usage(void)
{
	fprintf(stderr,
			"usage: sem_handoff [-n iterations] [-w warmup] [-r raw.csv] dbname\n"
			"connection settings come from PGHOST, PGPORT, PGUSER\n");
	exit(2);
}

int
main(int argc, char **argv)
{
	const char *dbname;
	int			opt;
	int64_t		start;
	PGresult   *r;
	double		adv_med,
				adv_p99;

	while ((opt = getopt(argc, argv, "n:w:r:")) != -1)
	{
		switch (opt)
		{
			case 'n':
				iterations = atoi(optarg);
				break;
			case 'w':
				warmup = atoi(optarg);
				break;
			case 'r':
				raw_path = optarg;
				break;
			default:
				usage();
		}
	}
	if (optind != argc - 1 || iterations < 1 || warmup < 0)
		usage();
	dbname = argv[optind];

	for (int v = 0; v <= NVARIANTS; v++)
	{
		samples[v].ms = calloc(iterations, sizeof(double));
		if (samples[v].ms == NULL)
			die("out of memory");
	}
	if (raw_path && (raw = fopen(raw_path, "w")) == NULL)
		die("cannot write %s: %s", raw_path, strerror(errno));
	if (raw)
		fprintf(raw, "variant,ms\n");

	a_off = connect_as(dbname, "sem_handoff A (sync off)", "off");
	a_on = connect_as(dbname, "sem_handoff A (sync on)", "on");
	w = connect_as(dbname, "sem_handoff W (waiter)", "off");
	m = connect_as(dbname, "sem_handoff M (monitor)", "off");
	w_pid = PQbackendPID(w);

	r = run(m, "SELECT dsync_semaphore_create($1, 2)", SEM_NAME, NULL);
	PQclear(r);

	for (int i = 0; i < warmup; i++)
		for (int v = 0; v < NVARIANTS; v++)
			run_variant(v, false);

	start = mono_ns();
	for (int i = 0; i < iterations; i++)
		for (int j = 0; j < NVARIANTS; j++)
			run_variant((i + j) % NVARIANTS, true);
	printf("%d iterations of %d interleaved variants in %.1f s (+%d warm-up iterations)\n\n",
		   iterations, NVARIANTS, (mono_ns() - start) / 1e9, warmup);

	for (int v = 0; v <= NVARIANTS; v++)
		qsort(samples[v].ms, samples[v].n, sizeof(double), cmp_double);
	adv_med = percentile(samples[V_ADVISORY].ms, samples[V_ADVISORY].n, 50);
	adv_p99 = percentile(samples[V_ADVISORY].ms, samples[V_ADVISORY].n, 99);

	printf("| what | n | median ms | p99 ms | max ms | median / advisory | p99 / advisory |\n");
	printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
	for (int v = 0; v <= NVARIANTS; v++)
	{
		Samples    *s = &samples[v];
		double		med = percentile(s->ms, s->n, 50),
					p99 = percentile(s->ms, s->n, 99);

		if (v == V_ADVISORY_AFTER)
			printf("| %s | %d | %.3f | %.3f | %.3f | | |\n",
				   variant_label[v], s->n, med, p99, s->n ? s->ms[s->n - 1] : 0);
		else if (adv_med > 0 && adv_p99 > 0)
			printf("| %s | %d | %.3f | %.3f | %.3f | %.1fx | %.1fx |\n",
				   variant_label[v], s->n, med, p99, s->n ? s->ms[s->n - 1] : 0,
				   med / adv_med, p99 / adv_p99);
		else
			printf("| %s | %d | %.3f | %.3f | %.3f | n/a | n/a |\n",
				   variant_label[v], s->n, med, p99, s->n ? s->ms[s->n - 1] : 0);
	}

	printf("\n(Every dsync figure starts at the releaser's/setter's ts taken after its call and\n"
		   " before its commit, which is when the change takes effect, so it includes that commit.\n"
		   " pg_advisory_unlock takes effect at once, with no commit: the baseline starts at a ts\n"
		   " taken just before the unlock.  Taken after it, as handoff.c does, the waiter often\n"
		   " runs first, hence figures near zero or negative; ratios use the baseline row.)\n");
	printf("\nOutliers and anomalies (anomalous iterations give no sample):\n");
	for (int v = 0; v <= NVARIANTS; v++)
	{
		Samples    *s = &samples[v];
		int			over2 = 0,
					over10 = 0;

		for (int k = 0; k < s->n; k++)
		{
			over2 += s->ms[k] > 2;
			over10 += s->ms[k] > 10;
		}
		printf("  %-10s min %7.3f ms   > 2 ms: %3d   > 10 ms: %3d   anomalies: %d\n",
			   variant_key[v], s->n ? s->ms[0] : 0, over2, over10, s->anomalies);
	}

	printf("\nTargets (printed, not asserted; sync_commit=off releaser/setter):\n");
	{
		static const int targeted[] = {V_SEM_OFF, V_EVENT_OFF};

		for (int i = 0; i < 2; i++)
		{
			Samples    *s = &samples[targeted[i]];
			double		med = percentile(s->ms, s->n, 50);

			printf("  %-10s median < 2 ms   %-8s (%.3f ms)\n", variant_key[targeted[i]],
				   s->n > 0 && med < 2.0 ? "met" : "NOT MET", med);
		}
	}

	{
		char		holders[256];

		holders_of(SEM_NAME, holders, sizeof(holders));
		printf("\nAt the end %s is held by '%s' (expected 'B')\n", SEM_NAME, holders);
	}

	if (raw)
		fclose(raw);
	PQfinish(a_off);
	PQfinish(a_on);
	PQfinish(w);
	PQfinish(m);
	return 0;
}
