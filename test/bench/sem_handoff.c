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
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "benchlib.h"

/* A server timestamp in microseconds since the Unix epoch, as int8. */
#define TS US("clock_timestamp()")

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

const char *bench_prog = "sem_handoff";

static Variant variants[NVARIANTS + 1] = {
	{.key = "sem-off"}, {.key = "sem-on"}, {.key = "event-off"}, {.key = "event-on"},
	{.key = "lease-off"}, {.key = "advisory"}, {.key = "adv-after"}
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

static int	iterations = 200;
static int	warmup = 10;
static const char *raw_path = NULL;

/* Sessions: releasers/setters (synchronous_commit off / on), waiter, monitor. */
static PGconn *a_off;
static PGconn *a_on;
static PGconn *w;
static PGconn *m;

/* The holders of a lease or semaphore, sorted, comma-separated. */
static void
holders_of(const char *name, char *buf, size_t size)
{
	PGresult   *r = run(m, "SELECT coalesce(string_agg(holder, ',' ORDER BY holder), '')"
						"  FROM dsync_leases WHERE lease = $1", name, NULL, NULL, NULL);

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
	int64_t		token_a,
				latency;
	char		holders[256];

	if ((token_a = take(v, a, m, name, "A", "30 s")) < 0)
		return;
	/* B's permit, kept for the whole run (a reentrant re-acquire). */
	if (sem && take(v, a, m, name, "B", "1 hour") < 0)
		return;
	latency = dsync_handoff(v, a, w, m, name, sem ? "semaphore" : "lease", "C", token_a);
	if (latency < 0)
		return;

	holders_of(name, holders, sizeof(holders));
	if (strcmp(holders, sem ? "B,C" : "C") != 0)
		anomaly(v, "after the hand-off %s is held by '%s', expected '%s'",
				name, holders, sem ? "B,C" : "C");

	release_as(v, w, name, "C");

	add_sample(v, latency, measured);
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

	r = run(m, "SELECT dsync_event_clear($1)", EVENT_NAME, NULL, NULL, NULL);
	left = int8_at(r, 0);
	PQclear(r);
	if (left != 0)
		anomaly(v, "%" PRId64 " signal(s) were pending before the wait", left);

	send_query(w, "SELECT dsync_event_wait($1, '30 s'), " TS, EVENT_NAME, NULL);
	if (wait_until_asleep(m, w, "event") < 0)
	{
		PGresult   *early;

		PQclear(run(a, "SELECT dsync_event_set($1)", EVENT_NAME, NULL, NULL, NULL));
		early = collect(w, v, "the event wait");
		anomaly(v, "the waiter never showed as asleep in a dsync wait (its wait returned %s)",
				early == NULL ? "an error" : null_at(early, 0) ? "NULL" : PQgetvalue(early, 0, 0));
		PQclear(early);
		return;
	}

	r = run(a, "SELECT dsync_event_set($1), " TS, EVENT_NAME, NULL, NULL, NULL);
	t_set = int8_at(r, 1);
	PQclear(r);

	r = collect(w, v, "the event wait");
	if (r == NULL || !bool_at(r, 0))
	{
		anomaly(v, "the event wait returned %s after the set",
				r == NULL ? "an error" : null_at(r, 0) ? "NULL" : "false");
		PQclear(r);
		return;
	}
	t_wake = int8_at(r, 1);
	PQclear(r);

	r = run(m, "SELECT dsync_event_is_set($1)", EVENT_NAME, NULL, NULL, NULL);
	if (bool_at(r, 0))
		anomaly(v, "a signal is still pending after one set and one wait");
	PQclear(r);

	add_sample(v, t_wake - t_set, measured);
}

/* The baseline: pg_advisory_lock hand-off, from the ts before the unlock. */
static void
iter_advisory(bool measured)
{
	int64_t		from_before,
				from_after;

	if (advisory_handoff(V_ADVISORY, a_off, w, m, ADVISORY_KEY, &from_before, &from_after))
	{
		add_sample(V_ADVISORY, from_before, measured);
		add_sample(V_ADVISORY_AFTER, from_after, measured);
	}
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

static void
usage(void)
{
	fprintf(stderr,
			"usage: sem_handoff [-n iterations] [-w warmup] [-r raw.csv] dbname\n"
			"connection settings come from PGHOST, PGPORT, PGUSER\n");
	exit(2);
}

/* The figures as a Markdown table, with ratios to the advisory baseline. */
static void
print_table(void)
{
	double		adv_med = pct(&variants[V_ADVISORY].samples, 50),
				adv_p99 = pct(&variants[V_ADVISORY].samples, 99);

	printf("| what | n | median ms | p99 ms | max ms | median / advisory | p99 / advisory |\n");
	printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
	for (int v = 0; v <= NVARIANTS; v++)
	{
		Samples    *s = &variants[v].samples;
		double		med = pct(s, 50),
					p99 = pct(s, 99);

		printf("| %s | %d | %.3f | %.3f | %.3f |", variant_label[v], s->n, med, p99, pct(s, 100));
		if (v == V_ADVISORY_AFTER)
			printf(" | |\n");
		else if (adv_med > 0 && adv_p99 > 0)
			printf(" %.1fx | %.1fx |\n", med / adv_med, p99 / adv_p99);
		else
			printf(" n/a | n/a |\n");
	}
}

int
main(int argc, char **argv)
{
	const char *dbname;
	double		seconds;
	char		holders[256];
	const BenchOption opts[] = {
		{'n', OPT_INT, &iterations}, {'w', OPT_INT, &warmup},
		{'r', OPT_STRING, &raw_path}, {0}
	};

	if (parse_options(argc, argv, opts, usage) != argc - 1 || iterations < 1 || warmup < 0)
		usage();
	dbname = argv[argc - 1];
	variants_init(variants, NVARIANTS + 1, raw_path);

	a_off = connect_commit(dbname, "sem_handoff A (sync off)", "off");
	a_on = connect_commit(dbname, "sem_handoff A (sync on)", "on");
	w = connect_commit(dbname, "sem_handoff W (waiter)", "off");
	m = connect_commit(dbname, "sem_handoff M (monitor)", "off");

	PQclear(run(m, "SELECT dsync_semaphore_create($1, 2)", SEM_NAME, NULL, NULL, NULL));

	seconds = run_interleaved(NVARIANTS, iterations, warmup, run_variant);
	printf("%d iterations of %d interleaved variants in %.1f s (+%d warm-up iterations)\n\n",
		   iterations, NVARIANTS, seconds, warmup);
	print_table();

	printf("\n(Every dsync figure starts at the releaser's/setter's ts taken after its call and\n"
		   " before its commit, which is when the change takes effect, so it includes that commit.\n"
		   " pg_advisory_unlock takes effect at once, with no commit: the baseline starts at a ts\n"
		   " taken just before the unlock.  Taken after it, as handoff.c does, the waiter often\n"
		   " runs first, hence figures near zero or negative; ratios use the baseline row.)\n");
	print_outliers();

	printf("\nTargets (printed, not asserted; sync_commit=off releaser/setter):\n");
	for (int i = 0; i < 2; i++)
	{
		int			v = i == 0 ? V_SEM_OFF : V_EVENT_OFF;
		double		med = pct(&variants[v].samples, 50);

		printf("  %-10s median < 2 ms   %-8s (%.3f ms)\n", variants[v].key,
			   variants[v].samples.n > 0 && med < 2.0 ? "met" : "NOT MET", med);
	}

	holders_of(SEM_NAME, holders, sizeof(holders));
	printf("\nAt the end %s is held by '%s' (expected 'B')\n", SEM_NAME, holders);

	PQfinish(a_off);
	PQfinish(a_on);
	PQfinish(w);
	PQfinish(m);
	return 0;
}
