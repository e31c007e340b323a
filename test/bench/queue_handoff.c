/*
 * queue_handoff.c: 16 waiters on one name handing it on as fast as they
 * can, waiting in a backend (dsync_acquire with a wait) or in the line
 * without one (dsync_queue), through libpq from one event loop.
 *
 * Driven by queue_handoff_bench.sh, whose header says how to run it.  One
 * thread drives every connection with non-blocking libpq, so the figures
 * are the server's and the protocol's, not a client library's threads:
 *
 *   raw    each waiter's connection sends
 *            SELECT dsync_acquire(name, holder, '30 s', wait => '30 s')
 *          and, once granted, SELECT dsync_release(name, holder); then
 *          acquires again.
 *   queue  each waiter's connection sends
 *            SELECT dsync_queue(name, holder, '30 s', 'qh')
 *          (NULL: queued) and the holder learns of its grant from the
 *          "granted" notification that one listener connection receives
 *          for all of them (as a client library's keeper does); it then
 *          sends dsync_release, which claims the grant and whose
 *          transaction grants the next in line; then queues again.
 *
 * Per round: hand-offs/s (releases that returned in the window), the
 * hand-off latency (a release's result received to the next holder's
 * grant seen: its acquire's result, or its notification), and the
 * transaction ids per hand-off (pg_current_snapshot's xmax, before and
 * after: every write transaction, the worker's too).  The sides alternate,
 * -r rounds of -s seconds each, in each commit mode of -m (on,off).
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "benchlib.h"

#define MAXW 64

typedef enum
{
	W_ACQUIRING,				/* acquire or queue sent */
	W_QUEUED,					/* in line, waiting for the notification */
	W_RELEASING					/* release sent */
} WState;

typedef struct Waiter
{
	PGconn	   *c;
	WState		state;
	bool		told;			/* its grant was announced before it heard it was queued */
	char		holder[16];
} Waiter;

const char *bench_prog = "queue_handoff";

static int	nwaiters = 16;
static int	rounds = 3;
static double seconds = 4;
static char *modes = "on,off";

static Waiter w[MAXW];
static PGconn *listener;
static char name[64];
static bool queue_side;
static int64_t last_release_us;
static int64_t window_start, window_end;
static long handoffs;
static Samples latency;
static PGresult *pending[MAXW];	/* a result whose statement is not over yet */

/* Send the statement that gets waiter i in line (or the lease). */
static void
SendAcquire(int i)
{
	if (queue_side)
		send_query(w[i].c, "SELECT dsync_queue($1, $2, '30 s', 'qh')", name, w[i].holder);
	else
		send_query(w[i].c, "SELECT dsync_acquire($1, $2, '30 s', wait => '30 s')",
				   name, w[i].holder);
	w[i].state = W_ACQUIRING;
}

/* Waiter i holds the lease now: note the hand-off, give it back. */
static void
Granted(int i, int64_t now)
{
	if (last_release_us != 0 && now >= window_start && now < window_end)
		push(&latency, (now - last_release_us) / 1000.0);
	send_query(w[i].c, "SELECT dsync_release($1, $2)", name, w[i].holder);
	w[i].state = W_RELEASING;
	w[i].told = false;
}

/* A result came in on waiter i's connection. */
static void
OnResult(int i, PGresult *r, int64_t now)
{
	if (PQresultStatus(r) != PGRES_TUPLES_OK)
		die("%s: %s", w[i].holder, PQresultErrorMessage(r));
	if (w[i].state == W_RELEASING)
	{
		if (now >= window_start && now < window_end)
			handoffs++;
		last_release_us = now;
		SendAcquire(i);
	}
	else if (w[i].state == W_ACQUIRING)
	{
		if (!PQgetisnull(r, 0, 0) || w[i].told)
			Granted(i, now);
		else if (queue_side)
			w[i].state = W_QUEUED;
		else
			SendAcquire(i);		/* the wait ran out: again */
	}
}

/* Read what arrived on connection c (waiter i, or -1: the listener). */
static void
Drain(PGconn *c, int i)
{
	PGnotify   *n;

	if (!PQconsumeInput(c))
		die("connection lost: %s", PQerrorMessage(c));
	while (i >= 0 && !PQisBusy(c))
	{
		PGresult   *r = PQgetResult(c);

		if (r == NULL)
		{
			/* The statement is over: act on its result (the next one may go). */
			if (pending[i] != NULL)
			{
				OnResult(i, pending[i], mono_us());
				PQclear(pending[i]);
				pending[i] = NULL;
			}
			break;
		}
		if (pending[i] != NULL)
			PQclear(pending[i]);
		pending[i] = r;
	}
	while ((n = PQnotifies(c)) != NULL)
	{
		char		holder[64];
		const char *h = json_value(n->extra, "holder");
		int			k;

		if (h && json_string(h, holder, sizeof(holder)) && holder[0] == 'w' &&
			(k = atoi(holder + 1)) >= 0 && k < nwaiters)
		{
			if (w[k].state == W_QUEUED)
				Granted(k, mono_us());
			else if (w[k].state == W_ACQUIRING)
				w[k].told = true;	/* granted as soon as it queued */
		}
		PQfreemem(n);
	}
}

/* One round of one side: hand-offs/s; *xids set per hand-off. */
static double
Round(PGconn *probe, const char *commit, bool queue, int round, double *xids)
{
	struct pollfd fds[MAXW + 1];
	int64_t		xid0 = 0,
				xid1;
	bool		counted = false;
	char		appname[32];

	queue_side = queue;
	snprintf(name, sizeof(name), "qh-%s-%s-%d", queue ? "queue" : "raw", commit, round);
	for (int i = 0; i < nwaiters; i++)
	{
		snprintf(w[i].holder, sizeof(w[i].holder), "w%d", i);
		w[i].told = false;
		snprintf(appname, sizeof(appname), "qh %s", w[i].holder);
		w[i].c = connect_commit("postgres", appname, commit);
	}
	listener = connect_commit("postgres", "dsync bench listener", commit);
	PQclear(run(listener, "LISTEN \"dsyncq:qh\"", NULL, NULL, NULL, NULL));
	last_release_us = 0;
	handoffs = 0;
	window_start = mono_us() + 500000;
	window_end = window_start + (int64_t) (seconds * 1e6);
	for (int i = 0; i < nwaiters; i++)
		SendAcquire(i);
	while (mono_us() < window_end + 200000)
	{
		if (!counted && mono_us() >= window_start)
		{
			xid0 = query_int8(probe, "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::int8",
							  NULL, NULL, NULL);
			counted = true;
		}
		for (int i = 0; i < nwaiters; i++)
		{
			fds[i].fd = PQsocket(w[i].c);
			fds[i].events = POLLIN;
		}
		fds[nwaiters].fd = PQsocket(listener);
		fds[nwaiters].events = POLLIN;
		if (poll(fds, nwaiters + 1, 50) < 0)
			die("poll failed");
		for (int i = 0; i <= nwaiters; i++)
			if (fds[i].revents)
				Drain(i < nwaiters ? w[i].c : listener, i < nwaiters ? i : -1);
		if (mono_us() >= window_end && xid0 != 0)
		{
			xid1 = query_int8(probe, "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::int8",
							  NULL, NULL, NULL);
			*xids = handoffs ? (double) (xid1 - xid0) / handoffs : 0;
			xid0 = 0;
		}
	}
	for (int i = 0; i < nwaiters; i++)
		PQfinish(w[i].c);
	PQfinish(listener);
	/* Leave nothing for the worker to pass on during the next rounds. */
	PQclear(run(probe, "SELECT count(dsync_unqueue(name, holder)) FROM dsync_waiters"
				" WHERE name = $1 AND kind = 'queued'", name, NULL, NULL, NULL));
	PQclear(run(probe, "SELECT count(dsync_release(lease, holder)) FROM dsync_leases"
				" WHERE lease = $1", name, NULL, NULL, NULL));
	return handoffs / seconds;
}

static void
usage(void)
{
	die("usage: queue_handoff [-w waiters] [-r rounds] [-s seconds] [-m on,off]");
}

int
main(int argc, char **argv)
{
	const BenchOption opts[] = {
		{'w', OPT_INT, &nwaiters},
		{'r', OPT_INT, &rounds},
		{'s', OPT_DOUBLE, &seconds},
		{'m', OPT_STRING, &modes},
		{0, OPT_INT, NULL}
	};
	PGconn	   *probe;
	char	   *mode;

	parse_options(argc, argv, opts, usage);
	if (nwaiters < 2 || nwaiters > MAXW)
		die("-w must be 2 to %d", MAXW);
	probe = connect_db("postgres", "qh probe", NULL);
	printf("%d waiters on one name, %d alternating rounds of %g s per side and commit mode\n",
		   nwaiters, rounds, seconds);
	for (mode = strtok(modes, ","); mode; mode = strtok(NULL, ","))
	{
		double		rate[2][64];
		double		xids[2][64];
		Samples		lat[2] = {{0}, {0}};

		for (int r = 0; r < rounds && r < 64; r++)
			for (int side = 0; side < 2; side++)
			{
				latency = lat[side];
				rate[side][r] = Round(probe, mode, side == 1, r, &xids[side][r]);
				lat[side] = latency;
				printf("  synchronous_commit %-3s round %d %-5s: %8.0f hand-offs/s, %.2f xids each\n",
					   mode, r + 1, side ? "queue" : "raw", rate[side][r], xids[side][r]);
				fflush(stdout);
			}
		for (int side = 0; side < 2; side++)
		{
			Samples		rs = {0},
						xs = {0};

			for (int r = 0; r < rounds && r < 64; r++)
			{
				push(&rs, rate[side][r]);
				push(&xs, xids[side][r]);
			}
			printf("synchronous_commit %-3s %-5s: %8.0f hand-offs/s (median), hand-off p50 %.3f ms, "
				   "p99 %.3f ms (n=%d), %.2f xids per hand-off\n",
				   mode, side ? "queue" : "raw", pct(&rs, 50), pct(&lat[side], 50),
				   pct(&lat[side], 99), lat[side].n, pct(&xs, 50));
			printf("@ %s_%s_rate %.1f\n", mode, side ? "queue" : "raw", pct(&rs, 50));
		}
	}
	PQfinish(probe);
	return 0;
}
