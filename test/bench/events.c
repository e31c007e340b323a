/*
 * events.c: dsync's NOTIFY events (the reaper's "expired" events and the
 * batched "acquired" / "released" events), measured.
 *
 * Driven by events_bench.sh, which starts a throwaway server, creates the
 * databases, builds this file and runs its modes; see the header of that
 * script for what is measured and how to run it.  Connection settings come
 * from PGHOST, PGPORT and PGUSER (a superuser: the mass mode reads the
 * extension's table and calls dsync_reap()).
 *
 * Modes:
 *
 *   latency   Expiry-to-NOTIFY latency.  One connection LISTENs on the
 *             channels (dsync_channel) of n leases; another acquires them
 *             in one statement with staggered ttls (base + i * step ms,
 *             holder 'h') and reads each lease's expires_at from
 *             dsync_leases.  The listener then waits on its socket (poll,
 *             PQconsumeInput, PQnotifies); for each "expired" event,
 *             latency = the client's CLOCK_REALTIME when the socket became
 *             readable - the lease's expires_at.  Client and server run on
 *             the same machine and so read the same clock.  Repeated for
 *             several rounds (fresh names each round), pooled.  The payload
 *             is checked against what was acquired (holder, fencing,
 *             expires_at, its format), and lost or duplicate events are
 *             counted.  Then a floor: a plain pg_notify() from a third
 *             session, whose payload carries the sender's clock_timestamp()
 *             taken before its commit, with synchronous_commit on and off;
 *             latency = arrival - that timestamp.  That is the least any
 *             event delivered through NOTIFY can cost on this machine.
 *
 *   listen    The listeners of the throughput measurement: c connections,
 *             each LISTENing on k distinct channels of the lease names that
 *             cycle_dsync.sql uses (1..m), drain notifications as fast as
 *             they come until SIGTERM/SIGINT, then until 300 ms pass with
 *             none.  Prints the events received, the lag of "acquired"
 *             events (arrival - (expires_at - ttl), i.e. from the acquire
 *             call), and the CPU time of the listening backends.
 *
 *   sync      A barrier: LISTEN on one lease's channel, acquire and release
 *             it, wait for its "released" event.  Prints how long that took
 *             from sending the release (its round trip and commit, plus the
 *             event backlog still to be sent at that moment).  Exit
 *             status 3 if the event did not come within the timeout.
 *
 *   mass      n leases expiring together.  Optionally x long-lived leases
 *             ('long-1'.., ttl 1 hour) first.  Then a moment T = now + lead
 *             is fixed and 'mass-1'..'mass-n' are acquired in batches (one
 *             transaction each) with ttl = T - clock_timestamp(), so all
 *             expire at T whatever the insert takes; the spread of their
 *             expires_at and T_max = max(expires_at) are read back.  One
 *             connection LISTENs on every e-th lease's channel; another
 *             polls the extension's table every p ms from just before
 *             T_max (a cheap EXISTS; every 250 ms a full count, for the
 *             progress trace) until no 'mass-%' row has a holder.
 *             Reports seconds from T_max until the rows were gone and until
 *             the first, median and last sampled "expired" event arrived,
 *             lost events, the reaper's CPU time, and sanity checks (the
 *             long-lived leases untouched, dsync_reap() finding nothing).
 *
 * Each mode prints readable lines, then lines "@ key value" for the
 * script.  Timings are printed, never asserted; the exit status is
 * non-zero only if the benchmark itself could not run.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "benchlib.h"

const char *bench_prog = "events";

/* ---------------------------------------------------------------------- */
/* Mode latency                                                           */

typedef struct LatRound
{
	const char *prefix;			/* "lat<r>-" */
	int			n;
	char	  **channel;		/* per lease */
	int64_t    *expires_us;		/* from dsync_leases */
	int64_t    *ttl_us;
	int64_t    *fencing;
	int		   *n_expired;
	int		   *n_acquired;
	int			expired;		/* distinct leases with an expired event */
	/* pooled over rounds: */
	Samples    *latency;		/* expired: arrival - expires_at */
	Samples    *acq_lag;		/* acquired: arrival - (expires_at - ttl) */
	int		   *dup;
	int		   *stray;
	int		   *released;
	int		   *other;
	int		   *bad_payload;
	int		   *mismatch;
	int		   *bad_format;
	int		   *wrong_channel;
} LatRound;

static int	complaints = 0;

static void
complain(const char *fmt,...)
{
	va_list		ap;

	if (++complaints > 20)
	{
		if (complaints == 21)
			printf("  (further anomalies are only counted)\n");
		return;
	}
	printf("  anomaly: ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
}

static int
lease_index(const char *lease, const char *prefix, int n)
{
	size_t		len = strlen(prefix);
	char	   *end;
	long		i;

	if (strncmp(lease, prefix, len) != 0)
		return -1;
	i = strtol(lease + len, &end, 10);
	if (*end != '\0' || end == lease + len || i < 0 || i >= n)
		return -1;
	return (int) i;
}

static void
lat_notify(int conn, const PGnotify *n, int64_t arrival, void *arg)
{
	LatRound   *r = arg;
	Event		e;
	int			i;

	(void) conn;
	if (!parse_event(n->extra, &e))
	{
		(*r->bad_payload)++;
		complain("unparsable payload on %s: %s", n->relname, n->extra);
		return;
	}
	if ((i = lease_index(e.lease, r->prefix, r->n)) < 0)
	{
		(*r->stray)++;
		complain("event for a lease of no current round: %s", n->extra);
		return;
	}
	if (strcmp(n->relname, r->channel[i]) != 0)
	{
		(*r->wrong_channel)++;
		complain("event for %s came on channel %s, not %s", e.lease, n->relname, r->channel[i]);
	}
	if (e.has_expires && !ts_format_ok(e.expires_text))
	{
		(*r->bad_format)++;
		complain("expires_at not in the specified format: %s", n->extra);
	}
	if (strcmp(e.kind, "expired") == 0 || strcmp(e.kind, "acquired") == 0)
	{
		bool		expired = e.kind[0] == 'e';

		if (strcmp(e.holder, "h") != 0 || !e.has_fencing || e.fencing != r->fencing[i] ||
			!e.has_expires || e.expires_us != r->expires_us[i])
		{
			(*r->mismatch)++;
			complain("payload differs from the lease as acquired (fencing %" PRId64
					 ", expires_at %" PRId64 " us): %s", r->fencing[i], r->expires_us[i], n->extra);
		}
		if (expired)
		{
			if (r->n_expired[i]++ > 0)
			{
				(*r->dup)++;
				complain("duplicate expired event: %s", n->extra);
				return;
			}
			r->expired++;
			push(r->latency, (arrival - r->expires_us[i]) / 1000.0);
			if (arrival < r->expires_us[i])
				complain("expired event for %s arrived %.3f ms BEFORE its expires_at",
						 e.lease, (r->expires_us[i] - arrival) / 1000.0);
		}
		else
		{
			if (r->n_acquired[i]++ > 0)
			{
				(*r->dup)++;
				complain("duplicate acquired event: %s", n->extra);
				return;
			}
			push(r->acq_lag, (arrival - (r->expires_us[i] - r->ttl_us[i])) / 1000.0);
		}
	}
	else if (strcmp(e.kind, "released") == 0)
	{
		(*r->released)++;
		complain("unexpected released event: %s", n->extra);
	}
	else
	{
		(*r->other)++;
		complain("unexpected event: %s", n->extra);
	}
}

typedef struct FloorState
{
	const char *expect;			/* the tag awaited */
	int64_t		sent_us;		/* from the payload */
	int64_t		arrival;
	bool		got;
} FloorState;

static void
floor_notify(int conn, const PGnotify *n, int64_t arrival, void *arg)
{
	FloorState *f = arg;
	const char *colon = strchr(n->extra, ':');

	(void) conn;
	if (colon == NULL || strncmp(n->extra, f->expect, colon - n->extra) != 0)
		return;
	f->sent_us = strtoll(colon + 1, NULL, 10);
	f->arrival = arrival;
	f->got = true;
}

static void usage(void);

static int
mode_latency(int argc, char **argv)
{
	int			n = 200,
				rounds = 3,
				base_ms = 1000,
				step_ms = 17,
				floor_iters = 200,
				timeout_ms = 5000;
	const char *dbname,
			   *raw_path = NULL;
	FILE	   *raw = NULL;
	PGconn	   *lst,
			   *acq,
			   *snd_on,
			   *snd_off;
	Samples		latency = {0},
				acq_lag = {0},
				floor_on = {0},
				floor_off = {0};
	int			dup = 0,
				stray = 0,
				released = 0,
				other = 0,
				bad_payload = 0,
				mismatch = 0,
				bad_format = 0,
				wrong_channel = 0,
				missing = 0,
				acquired_events = 0,
				floor_lost = 0;
	int			reaper;

	{
		const BenchOption opts[] = {
			{'n', OPT_INT, &n}, {'r', OPT_INT, &rounds}, {'b', OPT_INT, &base_ms},
			{'s', OPT_INT, &step_ms}, {'f', OPT_INT, &floor_iters},
			{'t', OPT_INT, &timeout_ms}, {'o', OPT_STRING, &raw_path}, {0}
		};

		parse_options(argc, argv, opts, usage);
	}
	if (optind != argc - 1 || n < 1 || rounds < 1 || base_ms < 100 || step_ms < 0 ||
		floor_iters < 0 || timeout_ms < 100)
		return -1;
	dbname = argv[optind];
	if (raw_path)
	{
		if ((raw = fopen(raw_path, "w")) == NULL)
			die("cannot write %s: %s", raw_path, strerror(errno));
		fprintf(raw, "kind,ms\n");
	}

	lst = connect_db(dbname, "events listener", NULL);
	acq = connect_db(dbname, "events acquirer", NULL);
	reaper = reaper_pid(acq);
	printf("Expiry-to-NOTIFY latency: %d leases per round, ttl %d ms + i * %d ms (i = 0..%d),"
		   " %d round(s)\n", n, base_ms, step_ms, n - 1, rounds);
	if (reaper)
		printf("  reaper of this database: pid %d\n", reaper);
	else
		printf("  anomaly: no dsync background worker of this database in pg_stat_activity\n");

	for (int round = 1; round <= rounds; round++)
	{
		char		prefix[32],
					pattern[40],
					nbuf[16],
					bbuf[16],
					sbuf[16];
		LatRound	r;
		PGresult   *res;
		int			nch,
					acq_before = acq_lag.n;
		int64_t		last_exp = 0,
					deadline,
					t0;

		snprintf(prefix, sizeof(prefix), "lat%d-", round);
		snprintf(pattern, sizeof(pattern), "lat%d-%%", round);
		snprintf(nbuf, sizeof(nbuf), "%d", n);
		snprintf(bbuf, sizeof(bbuf), "%d", base_ms);
		snprintf(sbuf, sizeof(sbuf), "%d", step_ms);

		memset(&r, 0, sizeof(r));
		r.prefix = prefix;
		r.n = n;
		r.expires_us = calloc(n, sizeof(int64_t));
		r.ttl_us = calloc(n, sizeof(int64_t));
		r.fencing = calloc(n, sizeof(int64_t));
		r.n_expired = calloc(n, sizeof(int));
		r.n_acquired = calloc(n, sizeof(int));
		if (!r.expires_us || !r.ttl_us || !r.fencing || !r.n_expired || !r.n_acquired)
			die("out of memory");
		r.latency = &latency;
		r.acq_lag = &acq_lag;
		r.dup = &dup;
		r.stray = &stray;
		r.released = &released;
		r.other = &other;
		r.bad_payload = &bad_payload;
		r.mismatch = &mismatch;
		r.bad_format = &bad_format;
		r.wrong_channel = &wrong_channel;

		run_script(lst, "UNLISTEN *");
		r.channel = listen_on(lst, acq,
							  "SELECT dsync_channel($1 || i) FROM generate_series(0, $2::int - 1) i ORDER BY i",
							  prefix, nbuf, NULL, &nch);
		if (nch != n)
			die("expected %d channels, got %d", n, nch);

		/* One statement, one transaction: all n acquired at once. */
		res = run(acq, "SELECT i, dsync_acquire($1 || i, 'h',"
				  "       make_interval(secs => ($2::int + i * $3::int) / 1000.0))"
				  "  FROM generate_series(0, $4::int - 1) i",
				  prefix, bbuf, sbuf, nbuf);
		for (int k = 0; k < PQntuples(res); k++)
		{
			int			i = atoi(PQgetvalue(res, k, 0));

			if (PQgetisnull(res, k, 1))
				die("could not acquire %s%d", prefix, i);
			r.fencing[i] = strtoll(PQgetvalue(res, k, 1), NULL, 10);
			r.ttl_us[i] = ((int64_t) base_ms + (int64_t) i * step_ms) * 1000;
		}
		PQclear(res);
		t0 = real_us();
		res = run(acq, "SELECT lease, fencing, " US("expires_at")
				  "  FROM dsync_leases WHERE lease LIKE $1 AND holder = 'h'",
				  pattern, NULL, NULL, NULL);
		if (PQntuples(res) != n)
			die("dsync_leases shows %d of the %d leases just acquired", PQntuples(res), n);
		for (int k = 0; k < n; k++)
		{
			int			i = lease_index(PQgetvalue(res, k, 0), prefix, n);

			if (i < 0)
				die("unexpected lease %s in dsync_leases", PQgetvalue(res, k, 0));
			if (int8_val(res, k, 1) != r.fencing[i])
				die("dsync_leases shows another fencing token for %s", PQgetvalue(res, k, 0));
			r.expires_us[i] = int8_val(res, k, 2);
			if (r.expires_us[i] > last_exp)
				last_exp = r.expires_us[i];
		}
		PQclear(res);
		if (r.expires_us[0] < t0)
			complain("round %d: the first lease had expired (%.1f ms ago) before dsync_leases was read",
					 round, (t0 - r.expires_us[0]) / 1000.0);

		deadline = last_exp + (int64_t) timeout_ms * 1000;
		while (r.expired < n && real_us() < deadline)
			pump(&lst, 1, 100, lat_notify, &r);
		/* A little longer, for duplicates. */
		deadline = real_us() + 200000;
		while (real_us() < deadline)
			pump(&lst, 1, 50, lat_notify, &r);

		{
			int			acq_round = acq_lag.n - acq_before;
			Samples		this = {0};

			for (int i = 0; i < n; i++)
			{
				if (r.n_expired[i] == 0)
				{
					missing++;
					complain("round %d: no expired event for %s%d (expires_at was %.1f s before the wait ended)",
							 round, prefix, i, (real_us() - r.expires_us[i]) / 1e6);
				}
			}
			/* this round's samples are the last r.expired of the pool */
			for (int k = latency.n - r.expired; k < latency.n; k++)
				push(&this, latency.v[k]);
			acquired_events += acq_round;
			printf("  round %d: expired events %d/%d, median %.3f ms, max %.3f ms; acquired events %d/%d\n",
				   round, r.expired, n, pct(&this, 50), pct(&this, 100), acq_round, n);
			free(this.v);
		}
		free(r.expires_us);
		free(r.ttl_us);
		free(r.fencing);
		free(r.n_expired);
		free(r.n_acquired);
		for (int i = 0; i < n; i++)
			free(r.channel[i]);
		free(r.channel);
	}
	if (raw)
	{
		/* The pooled samples, in arrival order (before any sorting). */
		for (int k = 0; k < latency.n; k++)
			fprintf(raw, "expired,%.3f\n", latency.v[k]);
		for (int k = 0; k < acq_lag.n; k++)
			fprintf(raw, "acquired,%.3f\n", acq_lag.v[k]);
		fclose(raw);
	}

	/* The floor: a plain NOTIFY's delivery, committed at each setting. */
	if (floor_iters > 0)
	{
		snd_on = connect_db(dbname, "events floor sender (on)", "-c synchronous_commit=on");
		snd_off = connect_db(dbname, "events floor sender (off)", "-c synchronous_commit=off");
		run_script(lst, "UNLISTEN *; LISTEN dsync_bench_floor");
		for (int k = 0; k < 2 * floor_iters; k++)
		{
			bool		on = k % 2 == 0;
			PGconn	   *s = on ? snd_on : snd_off;
			FloorState	f = {on ? "on" : "off", 0, 0, false};
			int64_t		deadline = real_us() + 2000000;
			const char *tag = f.expect;
			PGresult   *res;

			if (!PQsendQueryParams(s, "SELECT pg_notify('dsync_bench_floor', $1 || ':' || "
								   US("clock_timestamp()") "::text)",
								   1, NULL, &tag, NULL, NULL, 0))
				die("send failed: %s", PQerrorMessage(s));
			while (!f.got && real_us() < deadline)
				pump(&lst, 1, 100, floor_notify, &f);
			while ((res = PQgetResult(s)) != NULL)
			{
				if (PQresultStatus(res) != PGRES_TUPLES_OK)
					die("pg_notify failed: %s", PQresultErrorMessage(res));
				PQclear(res);
			}
			if (f.got)
				push(on ? &floor_on : &floor_off, (f.arrival - f.sent_us) / 1000.0);
			else
				floor_lost++;
			sleep_us(2000);
		}
		PQfinish(snd_on);
		PQfinish(snd_off);
	}

	printf("\n");
	print_dist_header();
	print_dist("expired event: arrival - expires_at", &latency);
	print_dist("acquired event: arrival - acquire call", &acq_lag);
	if (floor_iters > 0)
	{
		print_dist("floor: pg_notify, synchronous_commit=on", &floor_on);
		print_dist("floor: pg_notify, synchronous_commit=off", &floor_off);
	}
	printf("  expired events later than 10 ms: %d, later than 50 ms: %d, before expires_at: %d\n",
		   count_over(&latency, 10), count_over(&latency, 50), latency.n - count_over(&latency, 0));
	printf("  events: expired %d of %d expected (missing %d), acquired %d of %d, duplicates %d,\n"
		   "          released (unexpected) %d, other %d, for no current lease %d\n",
		   latency.n, n * rounds, missing, acquired_events, n * rounds, dup, released, other, stray);
	printf("  payloads: unparsable %d, fields differing from the acquired lease %d,"
		   " expires_at format deviations %d, wrong channel %d\n",
		   bad_payload, mismatch, bad_format, wrong_channel);
	if (floor_lost)
		printf("  anomaly: %d floor notifications did not arrive within 2 s\n", floor_lost);

	emit_dist("expiry", &latency);
	printf("@ expiry_expected %d\n", n * rounds);
	printf("@ expiry_missing %d\n", missing);
	printf("@ expiry_over10 %d\n", count_over(&latency, 10));
	printf("@ expiry_over50 %d\n", count_over(&latency, 50));
	printf("@ expiry_early %d\n", latency.n - count_over(&latency, 0));
	printf("@ expiry_dup %d\n", dup);
	emit_dist("acqlag", &acq_lag);
	printf("@ acquired_events %d\n", acquired_events);
	printf("@ payload_bad %d\n", bad_payload + mismatch + bad_format + wrong_channel);
	printf("@ unexpected_events %d\n", released + other + stray);
	emit_dist("floor_on", &floor_on);
	emit_dist("floor_off", &floor_off);
	PQfinish(lst);
	PQfinish(acq);
	free(latency.v);
	free(acq_lag.v);
	return 0;
}

/* ---------------------------------------------------------------------- */
/* Mode listen                                                            */

static volatile sig_atomic_t stop_requested = 0;

static void
on_stop(int sig)
{
	(void) sig;
	stop_requested = 1;
}

typedef struct ListenState
{
	int64_t		ttl_us;
	long		acquired[MAX_LISTENERS];
	long		released[MAX_LISTENERS];
	long		expired[MAX_LISTENERS];
	long		other[MAX_LISTENERS];
	long		bad[MAX_LISTENERS];
	Samples		lag;
} ListenState;

static void
listen_notify(int conn, const PGnotify *n, int64_t arrival, void *arg)
{
	ListenState *s = arg;
	Event		e;

	if (!parse_event(n->extra, &e))
	{
		if (s->bad[conn]++ == 0)
			printf("  anomaly: unparsable payload on %s: %s\n", n->relname, n->extra);
		return;
	}
	if (strcmp(e.kind, "acquired") == 0)
	{
		s->acquired[conn]++;
		if (e.has_expires)
			push(&s->lag, (arrival - (e.expires_us - s->ttl_us)) / 1000.0);
	}
	else if (strcmp(e.kind, "released") == 0)
		s->released[conn]++;
	else if (strcmp(e.kind, "expired") == 0)
		s->expired[conn]++;
	else
		s->other[conn]++;
}

static int
mode_listen(int argc, char **argv)
{
	int			nconn = 4,
				channels = 100,
				names = 100000,
				ttl_s = 30,
				nch;
	const char *dbname;
	PGconn	   *conns[MAX_LISTENERS];
	int			pids[MAX_LISTENERS];
	double		cpu0[MAX_LISTENERS];
	static ListenState s;
	struct sigaction sa;
	struct rusage ru;
	int64_t		t_ready,
				t_stop,
				t_quiet;
	long		tot_acq = 0,
				tot_rel = 0,
				tot_exp = 0,
				tot_other = 0,
				tot_bad = 0;
	double		backend_cpu = 0;
	bool		cpu_ok = true;

	{
		const BenchOption opts[] = {
			{'c', OPT_INT, &nconn}, {'k', OPT_INT, &channels}, {'m', OPT_INT, &names},
			{'T', OPT_INT, &ttl_s}, {0}
		};

		parse_options(argc, argv, opts, usage);
	}
	if (optind != argc - 1 || nconn < 1 || nconn > MAX_LISTENERS || channels < 1 ||
		names < (long) nconn * channels || ttl_s < 1)
		return -1;
	dbname = argv[optind];
	s.ttl_us = (int64_t) ttl_s * 1000000;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_stop;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = 0;			/* no SA_RESTART: poll() returns EINTR */
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);

	/*
	 * Listener k LISTENs on names 1 + (k + j * c) * stride, j = 0..k-1:
	 * distinct sets spread evenly over 1..names.
	 */
	for (int k = 0; k < nconn; k++)
	{
		char		appname[64],
					kb[16],
					cb[16],
					sb[48];
		char	  **list;
		long		stride = names / ((long) nconn * channels);

		snprintf(appname, sizeof(appname), "events listener %d", k + 1);
		conns[k] = connect_db(dbname, appname, NULL);
		pids[k] = PQbackendPID(conns[k]);
		snprintf(kb, sizeof(kb), "%d", k);
		snprintf(cb, sizeof(cb), "%d", nconn);
		snprintf(sb, sizeof(sb), "%d %ld", channels, stride);
		list = listen_on(conns[k], conns[k],
						 "SELECT dsync_channel((1 + ($1::int + j * $2::int) * split_part($3, ' ', 2)::int)::text)"
						 "  FROM generate_series(0, split_part($3, ' ', 1)::int - 1) j",
						 kb, cb, sb, &nch);
		if (nch != channels)
			die("listener %d: %d channels instead of %d", k + 1, nch, channels);
		for (int i = 0; i < nch; i++)
			free(list[i]);
		free(list);
	}
	for (int k = 0; k < nconn; k++)
		cpu0[k] = proc_cpu_ms(pids[k]);
	t_ready = mono_us();
	printf("ready: %d listeners, %d channels each\n", nconn, channels);
	fflush(stdout);

	while (!stop_requested)
		pump(conns, nconn, 200, listen_notify, &s);
	t_stop = mono_us();
	t_quiet = t_stop;
	while (mono_us() - t_quiet < 300000 && mono_us() - t_stop < 5000000)
		if (pump(conns, nconn, 50, listen_notify, &s) > 0)
			t_quiet = mono_us();

	for (int k = 0; k < nconn; k++)
	{
		double		c1 = proc_cpu_ms(pids[k]);

		if (c1 < 0 || cpu0[k] < 0)
			cpu_ok = false;
		else
			backend_cpu += c1 - cpu0[k];
		tot_acq += s.acquired[k];
		tot_rel += s.released[k];
		tot_exp += s.expired[k];
		tot_other += s.other[k];
		tot_bad += s.bad[k];
	}
	getrusage(RUSAGE_SELF, &ru);

	printf("listened %.1f s (+%.1f s draining after the stop); events received:"
		   " acquired %ld, released %ld, expired %ld, other %ld, unparsable %ld\n",
		   (t_stop - t_ready) / 1e6, (t_quiet - t_stop) / 1e6, tot_acq, tot_rel, tot_exp, tot_other, tot_bad);
	for (int k = 0; k < nconn; k++)
		printf("  listener %d (backend %d): acquired %ld, released %ld\n",
			   k + 1, pids[k], s.acquired[k], s.released[k]);
	if (s.lag.n)
		printf("  acquired event lag (arrival - (expires_at - %d s)): median %.3f ms, p99 %.3f ms, max %.3f ms\n",
			   ttl_s, pct(&s.lag, 50), pct(&s.lag, 99), pct(&s.lag, 100));
	printf("  CPU: listening backends %.0f ms, this driver %.0f ms\n",
		   cpu_ok ? backend_cpu : -1.0,
		   (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000.0 +
		   (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1000.0);
	printf("@ listen_acquired %ld\n@ listen_released %ld\n@ listen_expired %ld\n@ listen_other %ld\n",
		   tot_acq, tot_rel, tot_exp, tot_other + tot_bad);
	emit_dist("listen_lag", &s.lag);
	if (cpu_ok)
		printf("@ listen_backend_cpu_ms %.0f\n", backend_cpu);
	else
		printf("@ listen_backend_cpu_ms NA\n");
	for (int k = 0; k < nconn; k++)
		PQfinish(conns[k]);
	return 0;
}

/* ---------------------------------------------------------------------- */
/* Mode sync                                                              */

typedef struct SyncState
{
	const char *lease;
	bool		got;
	int64_t		arrival;
} SyncState;

static void
sync_notify(int conn, const PGnotify *n, int64_t arrival, void *arg)
{
	SyncState  *s = arg;
	Event		e;

	(void) conn;
	if (parse_event(n->extra, &e) && strcmp(e.kind, "released") == 0 &&
		strcmp(e.lease, s->lease) == 0 && strcmp(e.holder, "sync") == 0)
	{
		s->got = true;
		s->arrival = arrival;
	}
}

static int
mode_sync(int argc, char **argv)
{
	const char *lease = "events-sync";
	int			timeout_s = 30,
				nch;
	PGconn	   *c,
			   *l;
	PGresult   *r;
	SyncState	s = {NULL, false, 0};
	int64_t		t0,
				deadline;
	char	  **ch;

	{
		const BenchOption opts[] = {
			{'n', OPT_STRING, &lease}, {'t', OPT_INT, &timeout_s}, {0}
		};

		parse_options(argc, argv, opts, usage);
	}
	if (optind != argc - 1 || timeout_s < 1)
		return -1;
	s.lease = lease;
	l = connect_db(argv[optind], "events sync listener", NULL);
	c = connect_db(argv[optind], "events sync", NULL);
	ch = listen_on(l, c, "SELECT dsync_channel($1)", lease, NULL, NULL, &nch);
	free(ch[0]);
	free(ch);
	r = run(c, "SELECT dsync_acquire($1, 'sync', '30 s')", lease, NULL, NULL, NULL);
	if (PQgetisnull(r, 0, 0))
		die("sync: could not acquire %s", lease);
	PQclear(r);
	t0 = real_us();
	r = run(c, "SELECT dsync_release($1, 'sync')", lease, NULL, NULL, NULL);
	PQclear(r);
	deadline = t0 + (int64_t) timeout_s * 1000000;
	while (!s.got && real_us() < deadline)
		pump(&l, 1, 100, sync_notify, &s);
	if (s.got)
	{
		printf("released event of %s arrived %.1f ms after the release call was sent\n",
			   lease, (s.arrival - t0) / 1000.0);
		printf("@ sync_ms %.1f\n", (s.arrival - t0) / 1000.0);
	}
	else
	{
		printf("no released event for %s within %d s\n", lease, timeout_s);
		printf("@ sync_ms NA\n");
	}
	PQfinish(l);
	PQfinish(c);
	return s.got ? 0 : 3;
}

/* ---------------------------------------------------------------------- */
/* Mode mass                                                              */

typedef struct MassState
{
	int			n;
	int			every;
	int			nsample;
	int64_t    *arrival;		/* per sampled lease: first expired event */
	int		   *n_expired;
	int		   *n_acquired;
	int			expired;
	int			acquired;
	int			dup;
	int			other;
	int			bad;
} MassState;

static void
mass_notify(int conn, const PGnotify *n, int64_t arrival, void *arg)
{
	MassState  *m = arg;
	Event		e;
	int			i,
				j;

	(void) conn;
	if (!parse_event(n->extra, &e))
	{
		if (m->bad++ == 0)
			printf("  anomaly: unparsable payload on %s: %s\n", n->relname, n->extra);
		return;
	}
	i = lease_index(e.lease, "mass-", m->n + 1);
	if (i < 1 || i % m->every != 0)
	{
		m->other++;
		return;
	}
	j = i / m->every - 1;
	if (strcmp(e.kind, "expired") == 0)
	{
		if (m->n_expired[j]++ > 0)
			m->dup++;
		else
		{
			m->arrival[j] = arrival;
			m->expired++;
		}
	}
	else if (strcmp(e.kind, "acquired") == 0)
	{
		if (m->n_acquired[j]++ == 0)
			m->acquired++;
		else
			m->dup++;
	}
	else
		m->other++;
}

/*
 * Acquire prefix1..prefixN in batches, one transaction each; ttl is an SQL
 * expression, which may use $4 (p4).
 */
static double
acquire_batches(PGconn *c, PGconn *lst, MassState *m, const char *prefix, int n,
				int batch, const char *ttl_expr, const char *p4)
{
	char		sql[512];
	int64_t		t0 = mono_us();

	snprintf(sql, sizeof(sql),
			 "SELECT count(dsync_acquire($3 || i, 'h', %s))"
			 "  FROM generate_series($1::int, $2::int) i", ttl_expr);
	for (int lo = 1; lo <= n; lo += batch)
	{
		int			hi = lo + batch - 1 < n ? lo + batch - 1 : n;
		char		lb[16],
					hb[16];
		int64_t		got;
		PGresult   *r;

		snprintf(lb, sizeof(lb), "%d", lo);
		snprintf(hb, sizeof(hb), "%d", hi);
		r = run(c, sql, lb, hb, prefix, p4);
		got = int8_val(r, 0, 0);
		PQclear(r);
		if (got != hi - lo + 1)
			die("acquired only %" PRId64 " of %s%d..%s%d", got, prefix, lo, prefix, hi);
		if (lst)
			pump(&lst, 1, 0, mass_notify, m);
	}
	return (mono_us() - t0) / 1e6;
}

typedef struct Progress
{
	double		at_s;			/* relative to T_max */
	long		remaining;
} Progress;

static int
mode_mass(int argc, char **argv)
{
	int			n = 50000,
				extra = 0,
				every = 100,
				batch = 5000,
				poll_ms = 10,
				progress_ms = 250,
				timeout_s = 60,
				nch,
				reaper;
	double		lead_s = 15,
				insert_s,
				extra_s = 0,
				cpu0 = -1,
				cpu1 = -1;
	const char *dbname;
	char	   *tbl;
	PGconn	   *a,
			   *lst,
			   *pol;
	PGresult   *r;
	MassState	m;
	char		lead_buf[32],
				t_text[64],
				nb[16],
				eb[16],
				q_exists[512],
				q_count[512],
				q_stats[512];
	int64_t		t_fixed,
				t_min,
				t_max,
				rows,
				t_inserted,
				first_zero = 0,
				last_nonzero_sent = 0,
				deadline;
	Progress   *prog = NULL;
	int			nprog = 0;
	Samples		poll_cost = {0},
				arrivals = {0};
	char	  **ch;

	{
		const BenchOption opts[] = {
			{'n', OPT_INT, &n}, {'x', OPT_INT, &extra}, {'e', OPT_INT, &every},
			{'l', OPT_DOUBLE, &lead_s}, {'b', OPT_INT, &batch},
			{'p', OPT_INT, &poll_ms}, {'P', OPT_INT, &progress_ms},
			{'t', OPT_INT, &timeout_s}, {0}
		};

		parse_options(argc, argv, opts, usage);
	}
	if (optind != argc - 1 || n < 1 || extra < 0 || every < 1 || every > n ||
		lead_s < 1 || batch < 1 || poll_ms < 1 || progress_ms < poll_ms || timeout_s < 1)
		return -1;
	dbname = argv[optind];

	memset(&m, 0, sizeof(m));
	m.n = n;
	m.every = every;
	m.nsample = n / every;
	m.arrival = calloc(m.nsample, sizeof(int64_t));
	m.n_expired = calloc(m.nsample, sizeof(int));
	m.n_acquired = calloc(m.nsample, sizeof(int));
	if (!m.arrival || !m.n_expired || !m.n_acquired)
		die("out of memory");

	a = connect_db(dbname, "events mass acquirer", NULL);
	lst = connect_db(dbname, "events mass listener", NULL);
	pol = connect_db(dbname, "events mass poller", NULL);
	tbl = lease_table(a);
	reaper = reaper_pid(a);
	printf("%d leases expiring together, %d long-lived leases besides (database %s)\n",
		   n, extra, dbname);
	if (reaper == 0)
		printf("  anomaly: no dsync background worker of this database in pg_stat_activity\n");

	if (extra > 0)
	{
		extra_s = acquire_batches(a, NULL, &m, "long-", extra, batch, "'1 hour'::interval", NULL);
		printf("  %d long-lived leases (ttl 1 hour) acquired in %.2f s\n", extra, extra_s);
	}

	snprintf(nb, sizeof(nb), "%d", n);
	snprintf(eb, sizeof(eb), "%d", every);
	ch = listen_on(lst, a, "SELECT dsync_channel('mass-' || (j * $2::int)) FROM generate_series(1, $1::int / $2::int) j",
				   nb, eb, NULL, &nch);
	for (int i = 0; i < nch; i++)
		free(ch[i]);
	free(ch);

	snprintf(lead_buf, sizeof(lead_buf), "%.3f", lead_s);
	r = run(a, "SELECT " US("t") ", t::text FROM (SELECT clock_timestamp() + make_interval(secs => $1::float8) t) s",
			lead_buf, NULL, NULL, NULL);
	t_fixed = int8_val(r, 0, 0);
	snprintf(t_text, sizeof(t_text), "%s", PQgetvalue(r, 0, 1));
	PQclear(r);

	insert_s = acquire_batches(a, lst, &m, "mass-", n, batch, "$4::timestamptz - clock_timestamp()", t_text);
	t_inserted = real_us();

	snprintf(q_stats, sizeof(q_stats),
			 "SELECT count(*), " US("min(expires_at)") ", " US("max(expires_at)")
			 "  FROM %s WHERE name LIKE 'mass-%%' AND holder IS NOT NULL", tbl);
	r = run(a, q_stats, NULL, NULL, NULL, NULL);
	rows = int8_val(r, 0, 0);
	t_min = int8_val(r, 0, 1);
	t_max = int8_val(r, 0, 2);
	PQclear(r);
	printf("  %d leases acquired in %.2f s (%d per transaction), %.1f s before they expire;"
		   " listening on %d of them\n", n, insert_s, batch, (t_min - t_inserted) / 1e6, nch);
	printf("  expires_at: T_max - T_min = %.3f ms (T_max - the T asked for = %.3f ms)\n",
		   (t_max - t_min) / 1000.0, (t_max - t_fixed) / 1000.0);
	if (rows != n)
		complain("%" PRId64 " held mass- rows instead of %d after the insert", rows, n);
	if (t_min < t_inserted + 200000)
		complain("the insert ended %.2f s before the first expiry: raise the lead (-l)",
				 (t_min - t_inserted) / 1e6);

	snprintf(q_exists, sizeof(q_exists),
			 "SELECT EXISTS (SELECT 1 FROM %s WHERE name LIKE 'mass-%%' AND holder IS NOT NULL)::int", tbl);
	snprintf(q_count, sizeof(q_count),
			 "SELECT count(*) FROM %s WHERE name LIKE 'mass-%%' AND holder IS NOT NULL", tbl);

	/* Until just before T_min: collect the acquired events. */
	while (real_us() < t_min - 300000)
		pump(&lst, 1, 50, mass_notify, &m);
	cpu0 = proc_cpu_ms(reaper);

	/* Poll the table and take events until both are done. */
	{
		bool		in_flight = false,
					is_count = false;
		int64_t		next_poll = real_us(),
					next_count = next_poll,
					sent = 0;

		deadline = t_max + (int64_t) timeout_s * 1000000;
		for (;;)
		{
			struct pollfd pfd[2];
			int64_t		now = real_us();
			int			timeout,
						rc;

			if ((first_zero && m.expired == m.nsample) || now > deadline)
				break;
			if (!in_flight && !first_zero && now >= next_poll)
			{
				is_count = now >= next_count;
				if (!PQsendQuery(pol, is_count ? q_count : q_exists))
					die("poll query: %s", PQerrorMessage(pol));
				in_flight = true;
				sent = now;
				next_poll = now + (int64_t) poll_ms * 1000;
				if (is_count)
					next_count = now + (int64_t) progress_ms * 1000;
			}
			timeout = in_flight || first_zero ? 100 : (int) ((next_poll - now + 999) / 1000);
			pfd[0].fd = PQsocket(lst);
			pfd[0].events = POLLIN;
			pfd[0].revents = 0;
			pfd[1].fd = PQsocket(pol);
			pfd[1].events = POLLIN;
			pfd[1].revents = 0;
			rc = poll(pfd, in_flight ? 2 : 1, timeout);
			now = real_us();
			if (rc < 0 && errno != EINTR)
				die("poll: %s", strerror(errno));
			if (rc > 0 && pfd[0].revents)
			{
				PGnotify   *no;

				if (!PQconsumeInput(lst))
					die("listener: %s", PQerrorMessage(lst));
				while ((no = PQnotifies(lst)) != NULL)
				{
					mass_notify(0, no, now, &m);
					PQfreemem(no);
				}
			}
			if (in_flight && rc > 0 && pfd[1].revents)
			{
				if (!PQconsumeInput(pol))
					die("poller: %s", PQerrorMessage(pol));
				while (in_flight && !PQisBusy(pol))
				{
					PGresult   *pr = PQgetResult(pol);
					long		remaining;

					if (pr == NULL)
					{
						in_flight = false;
						break;
					}
					if (PQresultStatus(pr) != PGRES_TUPLES_OK)
						die("poll query failed: %s", PQresultErrorMessage(pr));
					remaining = atol(PQgetvalue(pr, 0, 0));
					PQclear(pr);
					push(&poll_cost, (now - sent) / 1000.0);
					if (is_count)
					{
						prog = xrealloc(prog, (nprog + 1) * sizeof(Progress));
						prog[nprog].at_s = (now - t_max) / 1e6;
						prog[nprog].remaining = remaining;
						nprog++;
					}
					if (remaining == 0 && first_zero == 0)
						first_zero = now;
					else if (remaining > 0)
						last_nonzero_sent = sent;
				}
			}
		}
		if (in_flight)
		{
			PGresult   *pr;

			while ((pr = PQgetResult(pol)) != NULL)
				PQclear(pr);
		}
	}
	cpu1 = proc_cpu_ms(reaper);
	/* A little longer, for duplicates. */
	{
		int64_t		until = real_us() + 200000;

		while (real_us() < until)
			pump(&lst, 1, 50, mass_notify, &m);
	}

	for (int j = 0; j < m.nsample; j++)
		if (m.n_expired[j])
			push(&arrivals, (m.arrival[j] - t_max) / 1e6);

	printf("  remaining held mass- rows, seconds after T_max (a full count every %d ms):\n   ", progress_ms);
	for (int k = 0; k < nprog; k++)
		printf(" %+.2f:%ld%s", prog[k].at_s, prog[k].remaining,
			   (k + 1) % 8 == 0 && k + 1 < nprog ? "\n   " : "");
	printf("\n");
	if (first_zero)
		printf("  all mass- rows reaped %.3f s after T_max (between %.3f and %.3f s: polls every %d ms)\n",
			   (first_zero - t_max) / 1e6, (last_nonzero_sent - t_max) / 1e6,
			   (first_zero - t_max) / 1e6, poll_ms);
	else
		printf("  anomaly: mass- rows still held %d s after T_max\n", timeout_s);
	printf("  poll queries: %d, median %.2f ms, max %.2f ms each\n",
		   poll_cost.n, pct(&poll_cost, 50), pct(&poll_cost, 100));
	printf("  sampled expired events: %d of %d (duplicates %d); arrival - T_max: first %.3f s,"
		   " median %.3f s, last %.3f s\n",
		   m.expired, m.nsample, m.dup, pct(&arrivals, 0), pct(&arrivals, 50), pct(&arrivals, 100));
	printf("  sampled acquired events: %d of %d; events on other leases: %d, unparsable: %d\n",
		   m.acquired, m.nsample, m.other, m.bad);
	if (m.expired < m.nsample)
	{
		int			shown = 0;

		printf("  missing expired events for:");
		for (int j = 0; j < m.nsample && shown < 10; j++)
			if (!m.n_expired[j])
			{
				printf(" mass-%d", (j + 1) * every);
				shown++;
			}
		printf("%s\n", m.nsample - m.expired > 10 ? " ..." : "");
	}
	if (cpu0 >= 0 && cpu1 >= 0)
		printf("  reaper (pid %d) CPU from T_min - 0.3 s to the end: %.0f ms\n", reaper, cpu1 - cpu0);

	/* Sanity checks after the fact. */
	{
		char		sql[512];
		int64_t		left,
					cleared,
					long_held = 0,
					reaped_now = -1;
		PGresult   *rr;

		snprintf(sql, sizeof(sql),
				 "SELECT count(*), count(*) FILTER (WHERE holder IS NULL) FROM %s WHERE name LIKE 'mass-%%'", tbl);
		rr = run(a, sql, NULL, NULL, NULL, NULL);
		left = int8_val(rr, 0, 0);
		cleared = int8_val(rr, 0, 1);
		PQclear(rr);
		if (extra > 0)
			long_held = query_int8(a, "SELECT count(*) FROM dsync_leases WHERE lease LIKE 'long-%' AND holder = 'h'",
								   NULL, NULL, NULL);
		rr = PQexec(a, "SELECT dsync_reap()");
		if (PQresultStatus(rr) == PGRES_TUPLES_OK && PQntuples(rr) == 1)
			reaped_now = strtoll(PQgetvalue(rr, 0, 0), NULL, 10);
		else
			printf("  anomaly: dsync_reap() failed: %s", PQresultErrorMessage(rr));
		PQclear(rr);
		printf("  afterwards: %" PRId64 " mass- rows left in %s (%" PRId64 " with no holder);"
			   " dsync_reap() now clears %" PRId64 "\n",
			   left, tbl, cleared, reaped_now);
		if (extra > 0)
			printf("  long-lived leases still held: %" PRId64 " of %d\n", long_held, extra);
		printf("@ mass_rows_left %" PRId64 "\n", left);
		printf("@ mass_reap_after %" PRId64 "\n", reaped_now);
		printf("@ mass_long_held %" PRId64 "\n", long_held);
	}

	printf("@ mass_insert_s %.3f\n", insert_s);
	printf("@ mass_spread_ms %.3f\n", (t_max - t_min) / 1000.0);
	if (first_zero)
	{
		printf("@ mass_gone_s %.3f\n", (first_zero - t_max) / 1e6);
		printf("@ mass_gone_lower_s %.3f\n", (last_nonzero_sent - t_max) / 1e6);
	}
	else
		printf("@ mass_gone_s NA\n@ mass_gone_lower_s NA\n");
	if (arrivals.n)
		printf("@ mass_first_event_s %.3f\n@ mass_median_event_s %.3f\n@ mass_last_event_s %.3f\n",
			   pct(&arrivals, 0), pct(&arrivals, 50), pct(&arrivals, 100));
	else
		printf("@ mass_first_event_s NA\n@ mass_median_event_s NA\n@ mass_last_event_s NA\n");
	printf("@ mass_events %d\n@ mass_events_expected %d\n@ mass_dup %d\n@ mass_acquired_events %d\n",
		   m.expired, m.nsample, m.dup, m.acquired);
	if (cpu0 >= 0 && cpu1 >= 0)
		printf("@ mass_reaper_cpu_ms %.0f\n", cpu1 - cpu0);
	else
		printf("@ mass_reaper_cpu_ms NA\n");
	printf("@ mass_poll_median_ms %.3f\n", pct(&poll_cost, 50));

	PQfinish(a);
	PQfinish(lst);
	PQfinish(pol);
	return 0;
}

/* ---------------------------------------------------------------------- */

static void
usage(void)
{
	fprintf(stderr,
			"usage: events latency [-n leases] [-r rounds] [-b ttl_base_ms] [-s ttl_step_ms]\n"
			"                      [-f floor_iterations] [-t timeout_ms] [-o raw.csv] dbname\n"
			"       events listen  [-c connections] [-k channels_each] [-m names] [-T ttl_s] dbname\n"
			"       events sync    [-n lease] [-t timeout_s] dbname\n"
			"       events mass    [-n leases] [-x long_lived] [-e sample_every] [-l lead_s]\n"
			"                      [-b batch] [-p poll_ms] [-P progress_ms] [-t timeout_s] dbname\n"
			"connection settings come from PGHOST, PGPORT, PGUSER\n");
	exit(2);
}

int
main(int argc, char **argv)
{
	int			rc;

	if (argc < 2)
		usage();
	setvbuf(stdout, NULL, _IOLBF, 0);
	/* getopt starts after the mode */
	if (strcmp(argv[1], "latency") == 0)
		rc = mode_latency(argc - 1, argv + 1);
	else if (strcmp(argv[1], "listen") == 0)
		rc = mode_listen(argc - 1, argv + 1);
	else if (strcmp(argv[1], "sync") == 0)
		rc = mode_sync(argc - 1, argv + 1);
	else if (strcmp(argv[1], "mass") == 0)
		rc = mode_mass(argc - 1, argv + 1);
	else
		rc = -1;
	if (rc < 0)
		usage();
	return rc;
}
