/*
 * scale_work.c: what dsync costs as the work grows, for the parts of
 * scale_bench.sh that need many connections at once (scale_work_bench.sh
 * builds and runs it; see the header of that script for what is measured).
 *
 *   scale_work waiters  -k K -m one|distinct -n HANDOFFS -i IDLE_S DB
 *       K connections blocked in dsync_acquire (on K held names, or all on
 *       one held name); the server's CPU over IDLE_S seconds while they
 *       sleep; then HANDOFFS hand-offs, each one release to the waiter
 *       holding the lease, on the server clock.
 *   scale_work listeners -k K -m one|distinct -r ROUNDS -t TTL_MS DB
 *       K connections LISTENing (all on one lease's channel, or each on its
 *       own lease's); ROUNDS times the leases are taken with a short ttl
 *       and expire; expiry-to-notification for every listener and event,
 *       and the worker's share (expires_at to the event log's sent_at).
 *   scale_work mass -k N -l LEAD_S DB
 *       N durable leases expiring within one second, LEAD_S seconds after
 *       they are taken; when the expiries are counted, when the events are
 *       sent, and when dsync_leases shows none of them.
 *
 * Lines starting with "@ " are for the script (key value); the rest is for
 * people.  Timings are printed, never asserted.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "benchlib.h"

#define TS US("clock_timestamp()")

const char *bench_prog = "scale_work";

static int	k = 1000;
static int	handoffs = 50;
static int	idle_s = 10;
static int	rounds = 5;
static int	ttl_ms = 500;
static int	lead_s = 20;
static int	extra = 0;
static int	same = 0;
static const char *mode = "distinct";

static PGconn **conns;
static int	nconns;
static int64_t server_run_ns;	/* summed by server_ticks, from schedstat */
static long server_wakes;		/* summed by server_ticks: voluntary switches */
static PGconn *mon;

/* Print how to call this driver and exit. */
static void
usage(void)
{
	fprintf(stderr, "usage: scale_work waiters|listeners|mass [-k N] [-m one|distinct] "
			"[-n handoffs] [-i idle_s] [-r rounds] [-t ttl_ms] [-l lead_s] [-x idle_sessions] [-s 1] DB\n");
	exit(2);
}

/* Open n connections to db (application_name app), one after another. */
static void
open_conns(const char *db, int n, const char *app)
{
	conns = calloc(n, sizeof(PGconn *));
	if (conns == NULL)
		die("out of memory");
	for (int i = 0; i < n; i++)
		conns[i] = connect_db(db, app, "-c synchronous_commit=off");
	nconns = n;
}

/* Start a blocking acquire of name by holder on c (result read later). */
static void
send_acquire(PGconn *c, const char *name, const char *holder)
{
	const char *params[2] = {name, holder};

	if (!PQsendQueryParams(c, "SELECT dsync_acquire($1, $2, '1 hour', '10 min'), " TS,
						   2, NULL, params, NULL, NULL, 0))
		die("send: %s", PQerrorMessage(c));
}

/* The server time (us) at which c's acquire returned; dies unless granted. */
static int64_t
finish_acquire(PGconn *c)
{
	PGresult   *r = PQgetResult(c);
	int64_t		at;

	if (PQresultStatus(r) != PGRES_TUPLES_OK || PQgetisnull(r, 0, 0))
		die("a waiter was not granted: %s", PQresultErrorMessage(r));
	at = int8_val(r, 0, 1);
	PQclear(r);
	if ((r = PQgetResult(c)) != NULL)
		die("unexpected second result");
	return at;
}

/* Wait (up to 120 s) until dsync_waiters lists n waits. */
static void
wait_waiters(int n)
{
	char		want[16];
	int64_t		give_up = mono_us() + 120000000;

	snprintf(want, sizeof(want), "%d", n);
	while (query_int8(mon, "SELECT (count(*) = $1::int)::int FROM dsync_waiters", want,
					  NULL, NULL) != 1)
	{
		if (mono_us() > give_up)
			die("dsync_waiters never showed %d waits", n);
		sleep_us(2000);
	}
}

/* The pid of c's server's postmaster (the parent of its backend). */
static int
postmaster_pid(PGconn *c)
{
	char		path[64],
				line[256];
	int			ppid = 0;
	FILE	   *f;

	snprintf(path, sizeof(path), "/proc/%d/status", PQbackendPID(c));
	if ((f = fopen(path, "r")) == NULL)
		die("cannot read %s (run on the server's machine)", path);
	while (fgets(line, sizeof(line), f))
		sscanf(line, "PPid: %d", &ppid);
	fclose(f);
	return ppid;
}

/*
 * CPU ticks (utime + stime) of the postmaster pm and all its children,
 * i.e. every process of the server; *nproc gets how many there were.
 */
static long
server_ticks(int pm, int *nproc)
{
	DIR		   *d = opendir("/proc");
	struct dirent *e;
	long		ticks = 0;

	*nproc = 0;
	if (d == NULL)
		die("cannot open /proc");
	while ((e = readdir(d)) != NULL)
	{
		char		path[300],
					buf[1024],
				   *p;
		int			pid = atoi(e->d_name),
					ppid;
		unsigned long ut,
					st;
		FILE	   *f;
		size_t		len;

		if (pid <= 0)
			continue;
		snprintf(path, sizeof(path), "/proc/%d/stat", pid);
		if ((f = fopen(path, "r")) == NULL)
			continue;
		len = fread(buf, 1, sizeof(buf) - 1, f);
		fclose(f);
		buf[len] = '\0';
		if ((p = strrchr(buf, ')')) == NULL ||
			sscanf(p + 2, "%*c %d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu",
				   &ppid, &ut, &st) != 3)
			continue;
		if (pid != pm && ppid != pm)
			continue;
		ticks += (long) (ut + st);
		(*nproc)++;
		{
			ProcSample	ps;

			if (proc_read(pid, &ps))
				server_wakes += ps.vcsw;
		}
		snprintf(path, sizeof(path), "/proc/%d/schedstat", pid);
		if ((f = fopen(path, "r")) != NULL)
		{
			unsigned long long ns;

			if (fscanf(f, "%llu", &ns) == 1)
				server_run_ns += (int64_t) ns;
			fclose(f);
		}
	}
	closedir(d);
	return ticks;
}

/* The server's CPU seconds per second over idle_s seconds, printed. */
static void
measure_idle(const char *label)
{
	int			pm = postmaster_pid(mon),
				n1,
				n2;
	long		t1,
				t2;
	int64_t		s1,
				s2;
	double		hz = (double) sysconf(_SC_CLK_TCK),
				cps;

	int64_t		ns1,
				ns2;
	long		w1,
				w2;

	server_run_ns = 0;
	server_wakes = 0;
	t1 = server_ticks(pm, &n1);
	ns1 = server_run_ns;
	w1 = server_wakes;
	s1 = mono_us();
	sleep_us((int64_t) idle_s * 1000000);
	server_run_ns = 0;
	server_wakes = 0;
	t2 = server_ticks(pm, &n2);
	ns2 = server_run_ns;
	w2 = server_wakes;
	s2 = mono_us();
	cps = (t2 - t1) / hz / ((s2 - s1) / 1e6);

	/*
	 * utime + stime are sampled at the clock tick and miss short runs;
	 * schedstat's run time (ns) counts them (processes that came or went
	 * in between aside).
	 */
	printf("  %s: server CPU %.4f s/s over %.1f s by utime+stime (%ld ticks of 1/%.0f s), "
		   "%.2f ms/s by schedstat run time; %.0f wake-ups/s (voluntary context switches); "
		   "%d processes\n",
		   label, cps, (s2 - s1) / 1e6, t2 - t1, hz,
		   (ns2 - ns1) / 1e6 / ((s2 - s1) / 1e6), (w2 - w1) / ((s2 - s1) / 1e6), n2);
	printf("@ idle_cpu %.4f\n", cps);
}

/* Print and emit the distribution of the hand-off samples. */
static void
report(const char *key, const char *label, Samples *s)
{
	print_dist_header();
	print_dist(label, s);
	emit_dist(key, s);
}

/*
 * Waiters on k distinct names: "h" (session mon) holds w-1..w-k, waiter i
 * blocks on w-i.  A hand-off: mon releases w-i (with -s 1 always w-1, to
 * the one waiter recently run), waiter i gets it; then it
 * is put back as it was (waiter releases, mon takes it again, waiter
 * blocks again) so that k waiters sleep before every release.
 */
static void
waiters_distinct(const char *db)
{
	char		n[16],
				label[64];
	Samples		s = {0};

	snprintf(n, sizeof(n), "%d", k);
	PQclear(run(mon, "SELECT count(dsync_acquire('w-' || i, 'h', '1 hour')) "
				"FROM generate_series(1, $1::int) i", n, NULL, NULL, NULL));
	open_conns(db, k, "scale waiter");
	for (int i = 0; i < k; i++)
	{
		char		name[32];

		snprintf(name, sizeof(name), "w-%d", i + 1);
		send_acquire(conns[i], name, "waiter");
	}
	wait_waiters(k);
	printf("%d waiters asleep on %d distinct held names (dsync_waiters shows %d)\n", k, k, k);
	if (idle_s > 0)
		measure_idle("idle");
	for (int h = 0; h < handoffs; h++)
	{
		int			i = same ? 0 : h % k;
		char		name[32];
		PGresult   *r;
		int64_t		released,
					granted;

		snprintf(name, sizeof(name), "w-%d", i + 1);
		r = run(mon, "SELECT dsync_release($1, 'h'), " TS, name, NULL, NULL, NULL);
		released = int8_val(r, 0, 1);
		PQclear(r);
		granted = finish_acquire(conns[i]);
		push(&s, (granted - released) / 1000.0);
		PQclear(run(conns[i], "SELECT dsync_release($1, 'waiter')", name, NULL, NULL, NULL));
		PQclear(run(mon, "SELECT dsync_acquire($1, 'h', '1 hour')", name, NULL, NULL, NULL));
		send_acquire(conns[i], name, "waiter");
		wait_waiters(k);
	}
	snprintf(label, sizeof(label), "%d waiters, distinct names%s", k,
			 same ? ", always to w-1" : "");
	report("handoff", label, &s);
}

/*
 * Waiters on one name: connection 0 holds "one", 1..k queue for it.  A
 * hand-off: the holder releases and the waiter that was granted holds it;
 * the old holder queues again, so that k wait before every release.
 */
static void
waiters_one(const char *db)
{
	struct pollfd *pfd = calloc(k + 1, sizeof(struct pollfd));
	int			cur = 0;
	char		holder[32],
				label[64];
	Samples		s = {0};

	if (pfd == NULL)
		die("out of memory");
	open_conns(db, k + 1, "scale waiter");
	PQclear(run(conns[0], "SELECT dsync_acquire('one', 'q0', '1 hour')", NULL, NULL, NULL, NULL));
	for (int i = 1; i <= k; i++)
	{
		snprintf(holder, sizeof(holder), "q%d", i);
		send_acquire(conns[i], "one", holder);
	}
	wait_waiters(k);
	printf("%d waiters asleep on one held name (dsync_waiters shows %d)\n", k, k);
	if (idle_s > 0)
		measure_idle("idle");
	for (int h = 0; h < handoffs; h++)
	{
		PGresult   *r;
		int64_t		released,
					granted = 0;
		int			next = -1;

		snprintf(holder, sizeof(holder), "q%d", cur);
		r = run(conns[cur], "SELECT dsync_release('one', $1), " TS, holder, NULL, NULL, NULL);
		released = int8_val(r, 0, 1);
		PQclear(r);
		while (next < 0)
		{
			for (int i = 0; i <= k; i++)
			{
				pfd[i].fd = PQsocket(conns[i]);
				pfd[i].events = i == cur ? 0 : POLLIN;
				pfd[i].revents = 0;
			}
			if (poll(pfd, k + 1, 30000) <= 0)
				die("no waiter was granted the released lease within 30 s");
			for (int i = 0; i <= k && next < 0; i++)
			{
				if (i == cur || !pfd[i].revents)
					continue;
				if (!PQconsumeInput(conns[i]))
					die("waiter: %s", PQerrorMessage(conns[i]));
				if (!PQisBusy(conns[i]))
					next = i;
			}
		}
		granted = finish_acquire(conns[next]);
		push(&s, (granted - released) / 1000.0);
		send_acquire(conns[cur], "one", holder);
		cur = next;
		wait_waiters(k);
	}
	snprintf(label, sizeof(label), "%d waiters, one name (%d queued at a release)", k, k - 1);
	report("handoff", label, &s);
	free(pfd);
}

/* What the listeners of one round have seen. */
typedef struct ListenRound
{
	Samples    *s;
	int			expired;
} ListenRound;

/* Record one notification: an "expired" event's delay after expires_at. */
static void
on_notify(const PGnotify *n, int64_t arrival_us, ListenRound *lr)
{
	Event		e;

	if (!parse_event(n->extra, &e))
		die("unparsable payload: %s", n->extra);
	if (strcmp(e.kind, "expired") != 0)
		return;
	if (!e.has_expires)
		die("expired event without expires_at: %s", n->extra);
	push(lr->s, (arrival_us - e.expires_us) / 1000.0);
	lr->expired++;
}

/*
 * Listeners: k connections LISTEN, all on l-0's channel (one) or each on
 * l-i's (distinct).  Each round mon takes the leases (in one statement,
 * so they expire together) with ttl_ms and every listener's "expired"
 * notification is timed against the payload's expires_at.
 */
static void
listeners(const char *db)
{
	struct pollfd *pfd = calloc(k, sizeof(struct pollfd));
	bool		one = strcmp(mode, "one") == 0;
	int			names = one ? 1 : k;
	char		nbuf[16],
				ttl[32],
				label[80];
	Samples		s = {0},
				sent = {0};
	PGresult   *r0res;
	const char *r0;

	if (pfd == NULL)
		die("out of memory");
	open_conns(db, k, "scale listener");
	for (int i = 0; i < k; i++)
	{
		char		name[32];
		int			count;
		char	  **ch;

		snprintf(name, sizeof(name), "l-%d", one ? 0 : i);
		ch = listen_on(conns[i], mon, "SELECT dsync_channel($1)", name, NULL, NULL, &count);
		free(ch[0]);
		free(ch);
	}
	r0 = PQgetvalue(r0res = run(mon, "SELECT coalesce(max(seq), 0) FROM dsync_events_since(0)",
								NULL, NULL, NULL, NULL), 0, 0);
	snprintf(nbuf, sizeof(nbuf), "%d", names);
	snprintf(ttl, sizeof(ttl), "%d ms", ttl_ms);
	for (int r = 0; r < rounds; r++)
	{
		ListenRound lr = {&s, 0};
		int64_t		give_up = mono_us() + (int64_t) ttl_ms * 1000 + 30000000;

		PQclear(run(mon, "SELECT count(dsync_acquire('l-' || i, 'h', $2::interval)) "
					"FROM generate_series(0, $1::int - 1) i", nbuf, ttl, NULL, NULL));
		while (lr.expired < k)
		{
			int			rc;
			int64_t		now;

			for (int i = 0; i < k; i++)
			{
				pfd[i].fd = PQsocket(conns[i]);
				pfd[i].events = POLLIN;
				pfd[i].revents = 0;
			}
			rc = poll(pfd, k, 1000);
			now = real_us();
			if (rc < 0 && errno != EINTR)
				die("poll: %s", strerror(errno));
			for (int i = 0; i < k; i++)
			{
				PGnotify   *n;

				if (pfd[i].revents && !PQconsumeInput(conns[i]))
					die("listener: %s", PQerrorMessage(conns[i]));
				while ((n = PQnotifies(conns[i])) != NULL)
				{
					on_notify(n, now, &lr);
					PQfreemem(n);
				}
			}
			if (mono_us() > give_up)
			{
				printf("  round %d: only %d of %d expired notifications within 30 s\n",
					   r + 1, lr.expired, k);
				printf("@ missing %d\n", k - lr.expired);
				break;
			}
		}
	}
	snprintf(label, sizeof(label), "%d listeners, %s (%d rounds)", k,
			 one ? "one channel" : "own channels", rounds);
	print_dist_header();
	print_dist(label, &s);
	emit_dist("notify", &s);

	/*
	 * The part that is the worker's: from expires_at to the event's
	 * sent_at in the event log, the start (now()) of the worker's
	 * transaction that logs it; the rest is the worker's NOTIFY commit and
	 * PostgreSQL delivering the notification to every listener.
	 */
	{
		PGresult   *r = run(mon, "SELECT extract(epoch FROM sent_at - "
							"(payload->>'expires_at')::timestamptz) * 1000 "
							"FROM dsync_events_since($1::int8) WHERE payload->>'event' = 'expired'",
							r0, NULL, NULL, NULL);

		for (int i = 0; i < PQntuples(r); i++)
			push(&sent, atof(PQgetvalue(r, i, 0)));
		PQclear(r);
		print_dist("  of which expires_at to sent_at (worker; event log)", &sent);
	}
	PQclear(r0res);
	free(pfd);
}

/* dsync_stats' expiries and events_sent, and the server time and events_lost, into v[4]. */
static void
stats(int64_t *v)
{
	PGresult   *r = run(mon, "SELECT expiries, events_sent, " TS ", events_lost FROM dsync_stats",
						NULL, NULL, NULL, NULL);

	v[0] = int8_val(r, 0, 0);
	v[1] = int8_val(r, 0, 1);
	v[2] = int8_val(r, 0, 2);
	v[3] = int8_val(r, 0, 3);
	PQclear(r);
}

/*
 * Mass expiry: k leases mass-1..mass-k whose expiries are spread evenly
 * over one second starting lead_s seconds from now, taken in batches of
 * 10,000 (one transaction each).  Then dsync_stats is read every 2 ms until
 * k more expiries are counted and k more events sent, and dsync_leases
 * until none of the leases is listed.
 */
static void
mass(void)
{
	char		n[16],
				lo[16],
				hi[16],
				t0[32];
	int64_t		v[4],
				base[4],
				first,
				last,
				took,
				counted = 0,
				sent = 0,
				gone = 0,
				stable;
	PGresult   *r;

	/* Events are sent only while someone listens in the database. */
	{
		int			count;
		char	  **ch = listen_on(mon, mon, "SELECT dsync_channel('mass-watch')",
									NULL, NULL, NULL, &count);

		free(ch[0]);
		free(ch);
	}
	snprintf(n, sizeof(n), "%d", lead_s);
	r = run(mon, "SELECT (extract(epoch FROM now()) * 1000000)::int8 + $1::int8 * 1000000",
			n, NULL, NULL, NULL);
	snprintf(t0, sizeof(t0), "%s", PQgetvalue(r, 0, 0));
	PQclear(r);
	snprintf(n, sizeof(n), "%d", k);
	took = mono_us();
	for (int b = 0; b < k; b += 10000)
	{
		snprintf(lo, sizeof(lo), "%d", b + 1);
		snprintf(hi, sizeof(hi), "%d", b + 10000 < k ? b + 10000 : k);
		PQclear(run(mon, "SELECT count(dsync_acquire('mass-' || i, 'm', "
					"to_timestamp(($4::int8 + i::int8 * 1000000 / $3::int8) / 1e6) - now())) "
					"FROM generate_series($1::int, $2::int) i", lo, hi, n, t0));
	}
	took = mono_us() - took;
	r = run(mon, "SELECT " US("min(expires_at)") ", " US("max(expires_at)") ", count(*), " TS
			" FROM dsync_leases WHERE lease LIKE 'mass-%'", NULL, NULL, NULL, NULL);
	first = int8_val(r, 0, 0);
	last = int8_val(r, 0, 1);
	printf("%s leases taken in %.1f s (batches of 10,000); expiries from %.3f s to %.3f s "
		   "after the last batch committed\n", PQgetvalue(r, 0, 2), took / 1e6,
		   (first - int8_val(r, 0, 3)) / 1e6, (last - int8_val(r, 0, 3)) / 1e6);
	if (first <= int8_val(r, 0, 3))
		printf("  warning: the first expiry passed before all were taken; raise -l\n");
	PQclear(r);

	/* The "acquired" events are sent meanwhile: wait until they are. */
	stats(base);
	stable = mono_us();
	while (base[2] < first - 200000)
	{
		sleep_us(100000);
		stats(v);
		if (v[1] != base[1])
			stable = mono_us();
		memcpy(base, v, sizeof(v));
	}
	printf("  events_sent steady for %.1f s before the first expiry (%" PRId64 " lost so far)\n",
		   (mono_us() - stable) / 1e6, base[3]);
	while (!counted || !sent || !gone)
	{
		stats(v);
		if (!counted && v[0] - base[0] >= k)
			counted = v[2];
		if (!sent && v[1] - base[1] >= k)
			sent = v[2];
		if (!gone && v[2] > last &&
			query_int8(mon, "SELECT count(*) FROM dsync_leases WHERE lease LIKE 'mass-%'",
					   NULL, NULL, NULL) == 0)
			gone = v[2];
		if (v[2] > last + 120000000)
		{
			printf("  gave up 120 s after the last expiry: %" PRId64 " expiries and %" PRId64
				   " events counted, %" PRId64 " lost\n", v[0] - base[0], v[1] - base[1], v[3]);
			break;
		}
		sleep_us(2000);
	}
	printf("  from the last expiry: %d expiries counted (dsync_stats.expiries) after %.3f s;\n"
		   "  %d more events sent (dsync_stats.events_sent) after %.3f s; dsync_leases empty of "
		   "them after %.3f s; events lost: %" PRId64 "\n",
		   k, counted ? (counted - last) / 1e6 : -1, k, sent ? (sent - last) / 1e6 : -1,
		   gone ? (gone - last) / 1e6 : -1, v[3]);
	printf("@ counted_s %.3f\n@ sent_s %.3f\n@ gone_s %.3f\n@ lost %" PRId64 "\n",
		   counted ? (counted - last) / 1e6 : -1, sent ? (sent - last) / 1e6 : -1,
		   gone ? (gone - last) / 1e6 : -1, v[3]);
}

/* Run what the first argument names on the database the last one names. */
int
main(int argc, char **argv)
{
	const BenchOption opts[] = {
		{'k', OPT_INT, &k}, {'n', OPT_INT, &handoffs}, {'i', OPT_INT, &idle_s},
		{'r', OPT_INT, &rounds}, {'t', OPT_INT, &ttl_ms}, {'l', OPT_INT, &lead_s},
		{'m', OPT_STRING, &mode}, {'x', OPT_INT, &extra}, {'s', OPT_INT, &same}, {0, OPT_INT, NULL}
	};
	const char *what;
	int			i;

	if (argc < 2)
		usage();
	what = argv[1];
	i = parse_options(argc - 1, argv + 1, opts, usage) + 1;
	if (i != argc - 1 || k < 1)
		usage();
	setvbuf(stdout, NULL, _IOLBF, 0);
	mon = connect_db(argv[i], "scale monitor", "-c synchronous_commit=off");
	/* -x: idle sessions besides, to tell many backends from many waiters. */
	for (int x = 0; x < extra; x++)
		connect_db(argv[i], "scale idle", NULL);
	if (extra > 0)
		printf("(%d idle sessions besides)\n", extra);
	if (strcmp(what, "waiters") == 0 && strcmp(mode, "one") == 0)
		waiters_one(argv[i]);
	else if (strcmp(what, "waiters") == 0)
		waiters_distinct(argv[i]);
	else if (strcmp(what, "listeners") == 0)
		listeners(argv[i]);
	else if (strcmp(what, "mass") == 0)
		mass();
	else
		usage();

	/*
	 * End the waits that are left (a blocked backend notices its client
	 * going away, but with a FATAL in the log), read each session's answer
	 * and close it; then release the names, for the next run.
	 */
	PQclear(run(mon, "SELECT count(pg_cancel_backend(pid)) FROM dsync_waiters",
				NULL, NULL, NULL, NULL));
	for (int c = 0; c < nconns; c++)
	{
		PGresult   *r;

		while ((r = PQgetResult(conns[c])) != NULL)
			PQclear(r);
		PQfinish(conns[c]);
	}
	wait_waiters(0);
	PQclear(run(mon, "SELECT count(dsync_force_release(lease)) FROM dsync_leases "
				"WHERE lease = 'one' OR lease LIKE 'w-%'", NULL, NULL, NULL, NULL));
	return 0;
}
