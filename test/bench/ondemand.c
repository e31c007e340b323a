/*
 * ondemand.c: expiry-to-NOTIFY latency where a database's worker must
 * first be started, and across many databases sharing dsync's workers.
 *
 * Driven by ondemand_bench.sh, which starts a throwaway server, creates
 * the databases, builds this file and runs its modes; see the header of
 * that script.  Connection settings come from PGHOST, PGPORT and PGUSER.
 *
 * Modes:
 *
 *   ondemand  One database.  Each round: LISTEN on the channel of a fresh
 *             lease, acquire it with ttl t ms, then watch dsync_databases
 *             until the database has no worker (the server runs with a
 *             short dsync.worker_idle_timeout, so its worker leaves once
 *             the "acquired" event is sent).  A round in which a worker
 *             was still there 20 ms before the expiry is not counted (it
 *             is reported).  Then wait for the "expired" event: latency =
 *             the client's CLOCK_REALTIME when the listener's socket became
 *             readable - expires_at.  The sender's pid must be new (a
 *             worker started for this expiry).
 *
 *   manydb    Many databases (given as arguments), one listener each.
 *             Each round: a moment T is fixed lead ms ahead, and in every
 *             database a fresh lease is acquired with ttl = T -
 *             clock_timestamp(), so that all expire together; latency per
 *             database = arrival of its "expired" event - its expires_at.
 *             With fewer workers than databases, most must be started (or
 *             wait for a worker to make way): this shows the queueing.
 *
 * Each mode prints readable lines, then lines "@ key value" for the
 * script.  Timings are printed, never asserted.
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "benchlib.h"

const char *bench_prog = "ondemand";

/* What a listener waits for: the "expired" event of one lease. */
typedef struct Expect
{
	char		lease[64];
	int64_t		expires_us;
	int64_t		arrival_us;		/* 0 until it came */
	int			sender;
	int			dup;
} Expect;

/*
 * expect_notify
 *		pump() callback: note the arrival of an expected "expired" event.
 */
static void
expect_notify(int conn, const PGnotify *n, int64_t arrival, void *arg)
{
	Expect	   *x = &((Expect *) arg)[conn];
	Event		e;

	if (!parse_event(n->extra, &e) || strcmp(e.kind, "expired") != 0 ||
		strcmp(e.lease, x->lease) != 0)
		return;
	if (x->arrival_us != 0)
	{
		x->dup++;
		return;
	}
	x->arrival_us = arrival;
	x->sender = n->be_pid;
}

/*
 * listen_lease
 *		LISTEN on the channel of a lease.
 */
static void
listen_lease(PGconn *c, const char *lease)
{
	PGresult   *r = run(c, "SELECT dsync_channel($1)", lease, NULL, NULL, NULL);
	char	   *id = PQescapeIdentifier(c, PQgetvalue(r, 0, 0), strlen(PQgetvalue(r, 0, 0)));
	char		sql[256];

	snprintf(sql, sizeof(sql), "LISTEN %s", id);
	run_script(c, sql);
	PQfreemem(id);
	PQclear(r);
}

/*
 * lease_expiry
 *		A lease's expires_at, in microseconds since the Unix epoch.
 */
static int64_t
lease_expiry(PGconn *c, const char *lease)
{
	return query_int8(c, "SELECT " US("expires_at") " FROM dsync_leases WHERE lease = $1",
					  lease, NULL, NULL);
}

/*
 * worker_pid
 *		The pid of the worker serving the connection's database, 0 if none.
 */
static int
worker_pid(PGconn *c)
{
	PGresult   *r = run(c, "SELECT coalesce(worker_pid, 0) FROM dsync_databases"
						" WHERE datname = current_database()", NULL, NULL, NULL, NULL);
	int			pid = PQntuples(r) ? atoi(PQgetvalue(r, 0, 0)) : 0;

	PQclear(r);
	return pid;
}

/*
 * mode_ondemand
 *		Latency of expiries in a database whose worker has left.
 */
static void
mode_ondemand(const char *db, int rounds, int ttl_ms)
{
	PGconn	   *listener = connect_db(db, "ondemand listener", NULL);
	PGconn	   *client = connect_db(db, "ondemand client", NULL);
	Samples		lat = {0};
	int			resident = 0,
				missing = 0,
				same_sender = 0,
				dups = 0;
	int			last_sender = 0;

	for (int round = 0; round < rounds; round++)
	{
		Expect		x;
		char		ttl[32];
		int64_t		give_up;
		bool		left = false;

		memset(&x, 0, sizeof(x));
		snprintf(x.lease, sizeof(x.lease), "od-%d-%d", getpid(), round);
		snprintf(ttl, sizeof(ttl), "%d milliseconds", ttl_ms);
		listen_lease(listener, x.lease);
		PQclear(run(client, "SELECT dsync_acquire($1, 'h', $2::interval)", x.lease, ttl,
					NULL, NULL));
		x.expires_us = lease_expiry(client, x.lease);

		/* Until 20 ms before the expiry: has the worker left? */
		while (real_us() < x.expires_us - 20000)
		{
			int			pid = worker_pid(client);

			if (pid == 0)
			{
				left = true;
				break;
			}
			sleep_us(10000);
		}
		give_up = x.expires_us + 10 * 1000000LL;
		while (x.arrival_us == 0 && real_us() < give_up)
			pump(&listener, 1, 100, expect_notify, &x);
		dups += x.dup;
		if (x.arrival_us == 0)
		{
			missing++;
			continue;
		}
		if (!left)
		{
			resident++;
			continue;
		}
		if (x.sender == last_sender)
			same_sender++;
		last_sender = x.sender;
		push(&lat, (x.arrival_us - x.expires_us) / 1000.0);
	}
	printf("  expiry-to-NOTIFY with the worker started on demand (ttl %d ms, %d rounds)\n",
		   ttl_ms, rounds);
	print_dist_header();
	print_dist("expired: arrival - expires_at, worker started", &lat);
	printf("  rounds with a worker still there at the expiry (not counted): %d; missing: %d;"
		   " duplicates: %d; sent by the previous round's worker: %d\n",
		   resident, missing, dups, same_sender);
	emit_dist("ondemand", &lat);
	printf("@ ondemand_resident %d\n@ ondemand_missing %d\n@ ondemand_dup %d\n"
		   "@ ondemand_same_sender %d\n", resident, missing, dups, same_sender);
	PQfinish(listener);
	PQfinish(client);
}

/*
 * mode_manydb
 *		Latency of expiries that come at one moment in many databases.
 */
static void
mode_manydb(char **dbs, int ndb, int rounds, int lead_ms)
{
	PGconn	   *listeners[MAX_LISTENERS];
	PGconn	   *clients[MAX_LISTENERS];
	Expect	   *x = calloc(ndb, sizeof(Expect));
	Samples		lat = {0};
	int			missing = 0,
				dups = 0;

	if (ndb > MAX_LISTENERS)
		die("at most %d databases", MAX_LISTENERS);
	for (int i = 0; i < ndb; i++)
	{
		listeners[i] = connect_db(dbs[i], "manydb listener", NULL);
		clients[i] = connect_db(dbs[i], "manydb client", NULL);
	}
	for (int round = 0; round < rounds; round++)
	{
		int64_t		t_us = real_us() + (int64_t) lead_ms * 1000;
		char		t_text[32];
		int			got = 0;
		int64_t		give_up;

		snprintf(t_text, sizeof(t_text), "%" PRId64, t_us);
		for (int i = 0; i < ndb; i++)
		{
			memset(&x[i], 0, sizeof(Expect));
			snprintf(x[i].lease, sizeof(x[i].lease), "md-%d-%d", getpid(), round);
			listen_lease(listeners[i], x[i].lease);
			PQclear(run(clients[i], "SELECT dsync_acquire($1, 'h',"
						" to_timestamp($2::int8 / 1e6) - clock_timestamp())",
						x[i].lease, t_text, NULL, NULL));
			x[i].expires_us = lease_expiry(clients[i], x[i].lease);
		}
		give_up = t_us + 60 * 1000000LL;
		while (got < ndb && real_us() < give_up)
		{
			pump(listeners, ndb, 100, expect_notify, x);
			got = 0;
			for (int i = 0; i < ndb; i++)
				got += x[i].arrival_us != 0;
		}
		for (int i = 0; i < ndb; i++)
		{
			dups += x[i].dup;
			if (x[i].arrival_us == 0)
				missing++;
			else
				push(&lat, (x[i].arrival_us - x[i].expires_us) / 1000.0);
		}
		/* Let the workers settle before the next round. */
		sleep_us(2000000);
	}
	printf("  %d databases, one lease each expiring at the same moment, %d rounds\n",
		   ndb, rounds);
	print_dist_header();
	print_dist("expired: arrival - expires_at, all databases", &lat);
	printf("  missing: %d; duplicates: %d\n", missing, dups);
	emit_dist("manydb", &lat);
	printf("@ manydb_missing %d\n@ manydb_dup %d\n", missing, dups);
	for (int i = 0; i < ndb; i++)
	{
		PQfinish(listeners[i]);
		PQfinish(clients[i]);
	}
	free(x);
}

static void
usage(void)
{
	die("usage: ondemand ondemand|manydb [-r rounds] [-t ttl_ms] [-l lead_ms] db...");
}

int
main(int argc, char **argv)
{
	int			rounds = 20;
	int			ttl_ms = 1500;
	int			lead_ms = 3000;
	const char *mode;

	if (argc < 2)
		usage();
	mode = argv[1];
	optind = 2;
	{
		const BenchOption opts[] = {
			{'r', OPT_INT, &rounds}, {'t', OPT_INT, &ttl_ms}, {'l', OPT_INT, &lead_ms},
			{0}
		};

		parse_options(argc, argv, opts, usage);
	}
	if (optind >= argc)
		die("no database given");
	if (strcmp(mode, "ondemand") == 0)
		mode_ondemand(argv[optind], rounds, ttl_ms);
	else if (strcmp(mode, "manydb") == 0)
		mode_manydb(argv + optind, argc - optind, rounds, lead_ms);
	else
		die("unknown mode %s", mode);
	return 0;
}
