/*
 * handoff.c: hand-off latency of dsync leases against its baselines.
 *
 * Driven by handoff_bench.sh, which starts a throwaway server, creates the
 * extension and the baseline table "lease", builds this file and runs it;
 * see the header of that script for what is measured and how to run it.
 *
 * Every latency is the difference of two clock_timestamp() values taken
 * inside the server (the same clock), never a client-side time:
 *
 *   dsync-off / dsync-on  A holds lease L; B blocks in
 *                         SELECT dsync_acquire(L,'B','30 s','10 s'), ts
 *                         (confirmed asleep from a third session M:
 *                         pg_stat_activity.wait_event_type = 'Extension' and
 *                         listed in dsync_waiters); A runs, in autocommit
 *                         with synchronous_commit off (on),
 *                         SELECT dsync_release(L,'A'), ts.
 *                         latency = B's ts - A's ts.  A's ts is taken before
 *                         A's commit, so the commit (and with "on" its WAL
 *                         flush) is part of the figure, as it is part of any
 *                         real hand-off.
 *   ephemeral             the same with an ephemeral lease: A holds L taken
 *                         with durable => false and ttl '10 s'; B blocks in
 *                         SELECT dsync_acquire(L,'B','10 s','30 s',
 *                                              NULL,false), ts
 *                         (confirmed asleep the same way); A (with
 *                         synchronous_commit off) runs
 *                         SELECT ts, dsync_release(L,'A').  The
 *                         release takes effect, and wakes B, within the call,
 *                         with no WAL and no commit to wait for, so A's ts is
 *                         read just before the call: read after it, it came
 *                         after B's grant about half the time (a negative
 *                         sample) and the median meant little.
 *   advisory              the same with pg_advisory_lock(k) /
 *                         SELECT ts, pg_advisory_unlock(k) (wait_event
 *                         'advisory'), ts again read just before the call.
 *   table-poll            the hand-written lease table of NOTES.md section 8;
 *                         B retries the upsert every poll period (client-side
 *                         sleep after each failed try), A deletes its row at
 *                         a uniformly random instant within B's first period;
 *                         latency = ts of B's successful upsert - ts of A's
 *                         DELETE.
 *   expiry                A takes L with a short ttl and never releases; B
 *                         blocks (confirmed asleep before the expiry);
 *                         latency = B's ts at grant - the lease's expires_at
 *                         as read from dsync_leases.
 *
 * The variants are interleaved, their order rotating from one iteration to
 * the next.  Afterwards one waiter is watched while it sleeps, idle and
 * while another session commits dsync changes on other names, through
 * /proc/<pid>/stat (CPU time) and /proc/<pid>/status (context switches), to
 * show whether a waiting backend stays asleep.
 *
 * Timings are printed, never asserted; the exit status is non-zero only if
 * the benchmark itself could not run.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "benchlib.h"

/* A server timestamp in microseconds since the Unix epoch, as int8. */
#define TS US("clock_timestamp()")

enum
{
	V_DSYNC_OFF,
	V_DSYNC_ON,
	V_EPHEMERAL,
	V_ADVISORY,
	V_TABLE,
	V_EXPIRY,
	NVARIANTS
};

const char *bench_prog = "handoff";

static Variant variants[NVARIANTS] = {
	{.key = "dsync-off"}, {.key = "dsync-on"}, {.key = "ephemeral"}, {.key = "advisory"},
	{.key = "table-poll"}, {.key = "expiry"}
};

/* Settings, from the command line. */
static int	iterations = 200;
static int	warmup = 10;
static int	poll_ms = 50;
static int	expiry_ttl_ms = 200;
static int	idle_seconds = 3;
static int	traffic_cycles = 1000;
static const char *raw_path = NULL;
static int	expiry_warmups = 0;
static unsigned int seed = 0;

/* Sessions: releasers (synchronous_commit off / on), waiter, monitor. */
static PGconn *a_off;
static PGconn *a_on;
static PGconn *b;
static PGconn *m;

static int64_t
mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t) ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void
sleep_until_ns(int64_t t)
{
	struct timespec ts;

	ts.tv_sec = t / 1000000000;
	ts.tv_nsec = t % 1000000000;
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

/* ---------------------------------------------------------------------- */

/*
 * dsync hand-off from release (committed by a) to b's grant: of a durable
 * lease, or for V_EPHEMERAL of an ephemeral one (durable => false, whose
 * ttl may not exceed dsync.ephemeral_max_ttl, hence 10 s).
 */
static void
iter_dsync(int v, bool measured)
{
	PGconn	   *a = v == V_DSYNC_ON ? a_on : a_off;
	bool		durable = v != V_EPHEMERAL;
	const char *lease = v == V_DSYNC_ON ? "handoff-on" :
		v == V_EPHEMERAL ? "handoff-ephemeral" : "handoff-off";
	int64_t		token_a,
				latency;

	if ((token_a = take_lease(v, a, m, lease, "A", durable ? "30 s" : "10 s", durable)) < 0)
		return;
	if (!lease_handoff(v, a, b, m, lease, "lease", "B", token_a, durable, &latency))
		return;
	release_as(v, b, lease, "B");
	add_sample(v, latency, measured);
}

/* pg_advisory_lock hand-off, from the ts just before the unlock. */
static void
iter_advisory(bool measured)
{
	int64_t		from_before,
				from_after;

	if (advisory_handoff(V_ADVISORY, a_off, b, m, "4242", &from_before, &from_after))
		add_sample(V_ADVISORY, from_before, measured);
}

#define TABLE_ACQUIRE \
	"INSERT INTO lease VALUES ($1, $2, clock_timestamp() + interval '30 seconds')" \
	"    ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at" \
	"    WHERE lease.holder = EXCLUDED.holder OR lease.expires_at < clock_timestamp()" \
	"    RETURNING " TS
#define TABLE_RELEASE \
	"DELETE FROM lease WHERE name = $1 AND holder = $2 RETURNING " TS

/* The hand-written lease table, with a client polling every poll_ms. */
static void
iter_table(bool measured)
{
	const char *lease = "handoff-table";
	int64_t		poll_ns = (int64_t) poll_ms * 1000000;
	int64_t		t_delete,
				next_poll,
				t_release = 0,
				t_grant = 0;
	bool		deleted = false;
	PGresult   *r;

	r = run(a_off, TABLE_ACQUIRE, lease, "A", NULL, NULL);
	if (PQntuples(r) != 1)
		die("table baseline: A could not take the lease");
	PQclear(r);
	r = run(b, TABLE_ACQUIRE, lease, "B", NULL, NULL);
	if (PQntuples(r) != 0)
		die("table baseline: B took a lease A holds");
	PQclear(r);

	/* B sleeps one period; A lets go at a random point of it. */
	next_poll = mono_ns() + poll_ns;
	t_delete = next_poll - poll_ns + (int64_t) ((double) random() / ((double) RAND_MAX + 1) * poll_ns);
	for (;;)
	{
		if (!deleted && t_delete <= next_poll)
		{
			sleep_until_ns(t_delete);
			r = run(a_off, TABLE_RELEASE, lease, "A", NULL, NULL);
			if (PQntuples(r) != 1)
				die("table baseline: A's delete found no row");
			t_release = int8_at(r, 0);
			PQclear(r);
			deleted = true;
			continue;
		}
		sleep_until_ns(next_poll);
		r = run(b, TABLE_ACQUIRE, lease, "B", NULL, NULL);
		if (PQntuples(r) == 1)
		{
			t_grant = int8_at(r, 0);
			PQclear(r);
			break;
		}
		PQclear(r);
		if (deleted)
			anomaly(V_TABLE, "B's poll failed after A's delete");
		next_poll = mono_ns() + poll_ns;
	}
	r = run(b, TABLE_RELEASE, lease, "B", NULL, NULL);
	if (PQntuples(r) != 1)
		die("table baseline: B's delete found no row");
	PQclear(r);

	add_sample(V_TABLE, t_grant - t_release, measured);
}

/* From the holder's expiry to the blocked waiter's grant. */
static void
iter_expiry(bool measured)
{
	const char *lease = "handoff-expiry";
	char		ttl[32];
	PGresult   *r;
	int64_t		expires_at,
				asleep_at,
				t_grant;

	/* Each try takes a ttl: warm up only a few times. */
	if (!measured && ++expiry_warmups > 3)
		return;
	snprintf(ttl, sizeof(ttl), "%d milliseconds", expiry_ttl_ms);
	if (take(V_EXPIRY, a_off, m, lease, "A", ttl) < 0)
		return;
	r = run(m, "SELECT (extract(epoch FROM expires_at) * 1000000)::int8 FROM dsync_leases"
			" WHERE lease = $1 AND holder = 'A'", lease, NULL, NULL, NULL);
	if (PQntuples(r) != 1)
		die("expiry: A's lease is not in dsync_leases");
	expires_at = int8_at(r, 0);
	PQclear(r);

	send_query(b, "SELECT dsync_acquire($1, 'B', '30 s', '10 s'), " TS, lease, NULL);
	asleep_at = wait_until_asleep(m, b, "lease");
	r = collect(b, V_EXPIRY, "B's acquire");
	if (r == NULL || null_at(r, 0))
	{
		anomaly(V_EXPIRY, "B's acquire returned %s", r ? "NULL" : "an error");
		PQclear(r);
		force_clean(m, lease);
		return;
	}
	t_grant = int8_at(r, 1);
	PQclear(r);
	PQclear(run(b, "SELECT dsync_release($1, 'B')", lease, NULL, NULL, NULL));

	if (asleep_at < 0 || asleep_at >= expires_at)
	{
		/* Not a hand-off at expiry: B was not asleep in time.  Not counted. */
		anomaly(V_EXPIRY, "B was not seen asleep before the expiry (%s); sample dropped",
				asleep_at < 0 ? "never" : "too late");
		return;
	}
	add_sample(V_EXPIRY, t_grant - expires_at, measured);
}

static void
run_variant(int v, bool measured)
{
	switch (v)
	{
		case V_DSYNC_OFF:
		case V_DSYNC_ON:
		case V_EPHEMERAL:
			iter_dsync(v, measured);
			break;
		case V_ADVISORY:
			iter_advisory(measured);
			break;
		case V_TABLE:
			iter_table(measured);
			break;
		case V_EXPIRY:
			iter_expiry(measured);
			break;
	}
}

/* ---------------------------------------------------------------------- */

/* /proc readings of a backend that must be readable. */
static ProcSample
proc_sample(int pid)
{
	ProcSample	s;

	if (!proc_read(pid, &s))
		die("cannot read /proc/%d/stat and status: %s", pid, strerror(errno));
	return s;
}

static void
print_proc_delta(const char *what, ProcSample before, ProcSample after, double seconds)
{
	long		hz = sysconf(_SC_CLK_TCK);

	printf("  %-44s %5.1f s: CPU %5.0f ms, wake-ups (voluntary cs) %4ld, involuntary cs %ld\n",
		   what, seconds, (after.ticks - before.ticks) * 1000.0 / hz,
		   after.vcsw - before.vcsw, after.ivcsw - before.ivcsw);
}

/*
 * Watch one backend asleep in dsync_acquire: idle, then while a fourth
 * session runs acquire+release cycles on other names (each commit
 * broadcasts the condition variable of its name's channel; only names that
 * share the waiter's channel should wake it).
 */
static void
check_sleeping_waiter(void)
{
	const char *lease = "handoff-idle";
	ProcSample	s0,
				s1,
				s2;
	int64_t		t0,
				t1,
				t2,
				t_release,
				t_grant;
	PGresult   *r;

	printf("\nA waiter asleep in dsync_acquire (backend pid %d), from /proc:\n", PQbackendPID(b));
	PQclear(run(a_off, "SELECT dsync_acquire($1, 'A', '10 minutes')", lease, NULL, NULL, NULL));
	send_query(b, "SELECT dsync_acquire($1, 'B', '30 s', '10 minutes'), " TS, lease, NULL);
	if (wait_until_asleep(m, b, "lease") < 0)
	{
		anomaly(-1, "the idle waiter never showed as asleep");
		force_clean(m, lease);
		PQclear(collect(b, -1, "idle waiter"));
		return;
	}

	s0 = proc_sample(PQbackendPID(b));
	t0 = mono_ns();
	sleep_us((int64_t) idle_seconds * 1000000);
	s1 = proc_sample(PQbackendPID(b));
	t1 = mono_ns();
	print_proc_delta("idle", s0, s1, (t1 - t0) / 1e9);

	/* a_on is free here; use it with synchronous_commit off for speed. */
	PQclear(run(a_on, "SET synchronous_commit = off", NULL, NULL, NULL, NULL));
	for (int i = 0; i < traffic_cycles; i++)
	{
		char		name[32];

		snprintf(name, sizeof(name), "other-%d", i);
		PQclear(run(a_on, "SELECT dsync_acquire($1, 'C', '30 s')", name, NULL, NULL, NULL));
		PQclear(run(a_on, "SELECT dsync_release($1, 'C')", name, NULL, NULL, NULL));
	}
	PQclear(run(a_on, "RESET synchronous_commit", NULL, NULL, NULL, NULL));
	s2 = proc_sample(PQbackendPID(b));
	t2 = mono_ns();
	{
		char		what[96];

		snprintf(what, sizeof(what), "during %d acquire+release on other names", traffic_cycles);
		print_proc_delta(what, s1, s2, (t2 - t1) / 1e9);
	}
	printf("    (%d commits, each broadcasting one of 1024 channels: about %.1f expected to hit the waiter's)\n",
		   2 * traffic_cycles, 2.0 * traffic_cycles / 1024);

	r = run(a_off, "SELECT dsync_release($1, 'A'), " TS, lease, NULL, NULL, NULL);
	t_release = int8_at(r, 1);
	PQclear(r);
	r = collect(b, -1, "idle waiter");
	if (r == NULL || null_at(r, 0))
		anomaly(-1, "the idle waiter was not granted the lease after the release");
	else
	{
		t_grant = int8_at(r, 1);
		printf("  hand-off to this waiter after %.1f s asleep: %.3f ms\n",
			   (t2 - t0) / 1e9, (t_grant - t_release) / 1000.0);
		PQclear(run(b, "SELECT dsync_release($1, 'B')", lease, NULL, NULL, NULL));
	}
	PQclear(r);
}

/* ---------------------------------------------------------------------- */

static void
usage(void)
{
	fprintf(stderr,
			"usage: handoff [-n iterations] [-w warmup] [-p poll_ms] [-e expiry_ttl_ms]\n"
			"               [-i idle_seconds] [-c traffic_cycles] [-s seed] [-r raw.csv] dbname\n"
			"connection settings come from PGHOST, PGPORT, PGUSER\n");
	exit(2);
}

/* The targets of the hand-off benchmark, printed and never asserted. */
static void
print_targets(void)
{
	double		d_off = pct(&variants[V_DSYNC_OFF].samples, 50),
				d_on = pct(&variants[V_DSYNC_ON].samples, 50),
				eph = pct(&variants[V_EPHEMERAL].samples, 50),
				adv = pct(&variants[V_ADVISORY].samples, 50),
				tab = pct(&variants[V_TABLE].samples, 50),
				exp = pct(&variants[V_EXPIRY].samples, 50);
	bool		have_off = variants[V_DSYNC_OFF].samples.n > 0;

	printf("\nRatios of medians:\n");
	printf("  dsync (sync_commit=off) / pg_advisory_lock   %8.1fx\n", adv > 0 ? d_off / adv : 0);
	printf("  dsync (sync_commit=on)  / pg_advisory_lock   %8.1fx\n", adv > 0 ? d_on / adv : 0);
	printf("  dsync ephemeral         / pg_advisory_lock   %8.1fx\n", adv > 0 ? eph / adv : 0);
	printf("  50 ms polling table     / dsync (off)        %8.1fx\n", d_off > 0 ? tab / d_off : 0);

	printf("\nTargets (printed, not asserted; hand-off figures use the sync_commit=off releaser):\n");
	printf("  dsync hand-off median < 2 ms                 %-8s (%.3f ms; sync_commit=on: %.3f ms)\n",
		   have_off && d_off < 2.0 ? "met" : "NOT MET", d_off, d_on);
	printf("  dsync median within 10x of advisory median   %-8s (%.1fx; sync_commit=on: %.1fx)\n",
		   have_off && adv > 0 && d_off <= 10 * adv ? "met" : "NOT MET",
		   adv > 0 ? d_off / adv : 0, adv > 0 ? d_on / adv : 0);
	printf("  ephemeral median within 2x of advisory's     %-8s (%.3f ms; %.1fx)\n",
		   variants[V_EPHEMERAL].samples.n > 0 && adv > 0 && eph <= 2 * adv ? "met" : "NOT MET",
		   eph, adv > 0 ? eph / adv : 0);
	printf("  expiry-to-grant median < 10 ms               %-8s (%.3f ms)\n",
		   variants[V_EXPIRY].samples.n > 0 && exp < 10.0 ? "met" : "NOT MET", exp);
}

int
main(int argc, char **argv)
{
	const char *dbname;
	int			seed_arg = 0;
	double		seconds;
	static const char *const label[NVARIANTS] = {
		"dsync hand-off, releaser sync_commit=off",
		"dsync hand-off, releaser sync_commit=on",
		"dsync ephemeral hand-off (durable => false)",
		"pg_advisory_lock hand-off",
		"lease table, client polls every %d ms",
		"dsync expiry-to-grant, ttl %d ms",
	};
	const BenchOption opts[] = {
		{'n', OPT_INT, &iterations}, {'w', OPT_INT, &warmup},
		{'p', OPT_INT, &poll_ms}, {'e', OPT_INT, &expiry_ttl_ms},
		{'i', OPT_INT, &idle_seconds}, {'c', OPT_INT, &traffic_cycles},
		{'s', OPT_INT, &seed_arg}, {'r', OPT_STRING, &raw_path}, {0}
	};

	if (parse_options(argc, argv, opts, usage) != argc - 1 || iterations < 1 || warmup < 0 ||
		poll_ms < 1 || expiry_ttl_ms < 50 || idle_seconds < 0 || traffic_cycles < 0)
		usage();
	dbname = argv[argc - 1];
	seed = seed_arg ? (unsigned int) seed_arg : (unsigned int) (time(NULL) ^ getpid());
	srandom(seed);
	variants_init(variants, NVARIANTS, raw_path);

	a_off = connect_commit(dbname, "handoff A (sync off)", "off");
	a_on = connect_commit(dbname, "handoff A (sync on)", "on");
	b = connect_commit(dbname, "handoff B (waiter)", "off");
	m = connect_commit(dbname, "handoff M (monitor)", "off");

	seconds = run_interleaved(NVARIANTS, iterations, warmup, run_variant);
	printf("%d iterations of %d interleaved variants in %.1f s (random seed %u)\n\n",
		   iterations, NVARIANTS, seconds, seed);

	print_dist_header();
	for (int v = 0; v < NVARIANTS; v++)
	{
		char		name[96];

		snprintf(name, sizeof(name), label[v], v == V_TABLE ? poll_ms : expiry_ttl_ms);
		print_dist(name, &variants[v].samples);
	}
	print_outliers();
	print_targets();

	if (idle_seconds > 0 || traffic_cycles > 0)
		check_sleeping_waiter();

	PQfinish(a_off);
	PQfinish(a_on);
	PQfinish(b);
	PQfinish(m);
	return 0;
}
