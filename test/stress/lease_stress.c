/*-------------------------------------------------------------------------
 *
 * lease_stress.c
 *		Concurrency stress test for dsync leases: many clients at mixed
 *		isolation levels hammer a few leases with blocking waits while a
 *		killer terminates random clients' backends; afterwards the log of
 *		guarded work, timed by the server clock, must show that no two
 *		holders of a lease ever overlapped and that fencing tokens rose in
 *		grant order.
 *
 * Each client loops:
 *	1. BEGIN at its isolation level; token := dsync_acquire(lease, me,
 *	   ttl, wait); COMMIT.  NULL (wait ran out): try again.
 *	2. BEGIN at its isolation level; dsync_assert_held(lease, me) must
 *	   return the same token; t_start := clock_timestamp(); a short sleep;
 *	   INSERT a log row (lease, me, token, t_start, clock_timestamp());
 *	   COMMIT.  While that transaction is open nobody else can hold the
 *	   lease, so logged intervals of different holders must not overlap.
 *	3. Usually dsync_release; sometimes walk away and let the ttl expire.
 * A killer process calls pg_terminate_backend on a random client every
 * so often; killed clients reconnect under a new holder name, and the
 * lease they held comes back when its ttl passes.
 *
 * Usage: lease_stress [clients] [seconds] [leases]   (libpq environment)
 *        lease_stress fair|fair-cut-in [clients] [rounds]
 *        lease_stress semaphore [clients] [seconds] [permits] [limit]
 * The second form checks fairness: clients contend for one lease in a loop
 * (acquire with a wait, log, release, acquire again at once).  Waiters are
 * served in the order they joined the queue (a sampler records that from
 * dsync_waiters), so no grant may overtake an earlier waiter, and every
 * client gets all its turns.  "fair-cut-in" runs the same check on clients
 * that poll with wait = 0 instead of queueing: it must fail, which shows
 * that the check can.
 * The third form runs the same client loop with kills against one
 * semaphore of N permits (dsync_semaphore_create): each client also logs
 * which permit (slot) it got.  The checks prove that at no instant more
 * than N guarded intervals overlapped (a sweep over all interval ends,
 * counting touching intervals as overlapping), that no two holders of one
 * permit overlapped and its tokens rose in grant order, that tokens are
 * distinct, and that several holders did work at once (so the check is not
 * vacuous).  A monitor samples dsync_leases meanwhile: never more than N
 * holders, never a repeated token, permits always N.  "limit" (default N)
 * is the bound the overlap check uses; a run with limit N - 1 must fail,
 * which shows that the check can fail at all.
 * Exit status 0 if every check passed.
 *
 *-------------------------------------------------------------------------
 */
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "libpq-fe.h"

static const char *const isolation_levels[] = {
	"READ COMMITTED", "REPEATABLE READ", "SERIALIZABLE"
};

/*
 * die
 *		Print a message and exit with failure.
 */
static void
die(const char *fmt,...)
{
	va_list		ap;

	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(2);
}

/*
 * connect_db
 *		A connection tagged with application_name, or NULL on failure.
 */
static PGconn *
connect_db(const char *appname)
{
	const char *keys[] = {"application_name", "dbname", NULL};
	const char *vals[] = {appname, getenv("PGDATABASE") ? getenv("PGDATABASE") : "postgres", NULL};
	PGconn	   *conn = PQconnectdbParams(keys, vals, 0);

	if (PQstatus(conn) != CONNECTION_OK)
	{
		PQfinish(conn);
		return NULL;
	}
	return conn;
}

/*
 * exec_ok
 *		Run a command; true if it succeeded.
 */
static bool
exec_ok(PGconn *conn, const char *sql)
{
	PGresult   *res = PQexec(conn, sql);
	bool		ok = PQresultStatus(res) == PGRES_COMMAND_OK ||
		PQresultStatus(res) == PGRES_TUPLES_OK;

	PQclear(res);
	return ok;
}

/*
 * query_value
 *		First value of a query with text parameters, copied into buf;
 *		returns 1 if a non-NULL value came back, 0 for NULL, -1 on error.
 */
static int
query_value(PGconn *conn, const char *sql, int nparams, const char *const *params,
			char *buf, size_t buflen)
{
	PGresult   *res = PQexecParams(conn, sql, nparams, NULL, params, NULL, NULL, 0);
	int			rc;

	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1)
		rc = -1;
	else if (PQgetisnull(res, 0, 0))
		rc = 0;
	else
	{
		snprintf(buf, buflen, "%s", PQgetvalue(res, 0, 0));
		rc = 1;
	}
	PQclear(res);
	return rc;
}

/*
 * client_main
 *		One client's loop until the deadline.  Counts go to stdout as one
 *		line at exit.  With sem set, every round uses that semaphore, logs
 *		to sem_log and records which permit (slot) the grant was.
 */
static void
client_main(int id, int nleases, time_t deadline, const char *sem)
{
	const char *iso = isolation_levels[id % 3];
	unsigned int seed = (unsigned int) (time(NULL) ^ (id * 7919));
	PGconn	   *conn = NULL;
	int			incarnation = 0;
	long		grants = 0,
				timeouts = 0,
				errors = 0,
				reconnects = 0;
	char		holder[64];
	char		begin[96];

	snprintf(begin, sizeof(begin), "BEGIN ISOLATION LEVEL %s", iso);
	while (time(NULL) < deadline)
	{
		char		lease[32];
		char		token[32];
		char		guard[32];
		char		t_start[64];
		char		slot[16];
		const char *p[3];
		int			rc;

		if (conn == NULL || PQstatus(conn) != CONNECTION_OK)
		{
			if (conn)
			{
				PQfinish(conn);
				reconnects++;
			}
			conn = connect_db("dsync_stress_client");
			if (conn == NULL)
			{
				usleep(100000);
				continue;
			}
			snprintf(holder, sizeof(holder), "client-%d.%d", id, ++incarnation);
		}

		if (sem)
			snprintf(lease, sizeof(lease), "%s", sem);
		else
			snprintf(lease, sizeof(lease), "stress-%d", (int) (rand_r(&seed) % nleases));
		p[0] = lease;
		p[1] = holder;
		p[2] = token;

		/* 1. Acquire, blocking up to a second, at this client's level. */
		if (!exec_ok(conn, begin))
			continue;
		rc = query_value(conn, "SELECT dsync_acquire($1, $2, '2 seconds', '1 second')",
						 2, p, token, sizeof(token));
		if (rc < 0 || !exec_ok(conn, "COMMIT"))
		{
			errors++;
			exec_ok(conn, "ROLLBACK");
			continue;
		}
		if (rc == 0)
		{
			timeouts++;
			continue;
		}
		grants++;

		/*
		 * Which permit the grant is: (holder, token) names it.  Read in
		 * autocommit at READ COMMITTED, outside the client's own isolation
		 * level, so that no SERIALIZABLE transaction reads the table.
		 */
		if (sem &&
			query_value(conn,
						"SELECT slot FROM dsync_permit WHERE name = $1 AND holder = $2 AND fencing = $3",
						3, p, slot, sizeof(slot)) != 1)
		{
			errors++;
			continue;
		}

		/* 2. Guarded work, logged with server-clock times. */
		if (exec_ok(conn, begin) &&
			query_value(conn, "SELECT dsync_assert_held($1, $2)", 2, p, guard, sizeof(guard)) == 1 &&
			query_value(conn, "SELECT clock_timestamp()", 0, NULL, t_start, sizeof(t_start)) == 1)
		{
			const char *q[7] = {lease, holder, token, guard, t_start, iso, slot};
			char		sleep_sql[64];

			snprintf(sleep_sql, sizeof(sleep_sql), "SELECT pg_sleep(%.3f)",
					 (rand_r(&seed) % 20) / 1000.0);
			if (!exec_ok(conn, sleep_sql) ||
				query_value(conn,
							sem ?
							"INSERT INTO sem_log (lease, holder, token, guard_token, t_start, t_end, iso, slot) "
							"VALUES ($1, $2, $3, $4, $5, clock_timestamp(), $6, $7) RETURNING 1" :
							"INSERT INTO stress_log (lease, holder, token, guard_token, t_start, t_end, iso) "
							"VALUES ($1, $2, $3, $4, $5, clock_timestamp(), $6) RETURNING 1",
							sem ? 7 : 6, q, guard, sizeof(guard)) != 1 ||
				!exec_ok(conn, "COMMIT"))
			{
				errors++;
				exec_ok(conn, "ROLLBACK");
			}
		}
		else
		{
			/* The lease can have expired already if the backend was slow. */
			errors++;
			exec_ok(conn, "ROLLBACK");
		}

		/* 3. Usually release; one time in eight, let the ttl expire. */
		if (rand_r(&seed) % 8 != 0)
		{
			char		released[8];

			if (query_value(conn, "SELECT dsync_release($1, $2)", 2, p,
							released, sizeof(released)) < 0)
				errors++;
		}
	}
	if (conn)
		PQfinish(conn);
	printf("client %2d (%s): grants %ld, timeouts %ld, errors %ld, reconnects %ld\n",
		   id, iso, grants, timeouts, errors, reconnects);
	exit(grants > 0 ? 0 : 1);
}

/*
 * killer_main
 *		Terminate a random client backend every 700 ms until the deadline.
 */
static void
killer_main(time_t deadline)
{
	PGconn	   *conn = connect_db("dsync_stress_killer");
	long		kills = 0;

	if (conn == NULL)
		die("killer: cannot connect");
	while (time(NULL) < deadline - 2)
	{
		char		killed[8];

		usleep(700000);
		if (query_value(conn,
						"SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
						"WHERE application_name = 'dsync_stress_client' "
						"ORDER BY random() LIMIT 1",
						0, NULL, killed, sizeof(killed)) == 1 &&
			strcmp(killed, "t") == 0)
			kills++;
	}
	PQfinish(conn);
	printf("killer: terminated %ld client backends\n", kills);
	exit(0);
}

/*
 * check
 *		Run a verification query returning one count; report it and return
 *		true if it equals expected (or, if at_least, is at least expected).
 */
static bool
check(PGconn *conn, const char *what, const char *sql, long expected, bool at_least)
{
	char		buf[64];
	long		value;
	bool		ok;

	if (query_value(conn, sql, 0, NULL, buf, sizeof(buf)) != 1)
		die("check \"%s\" failed: %s", what, PQerrorMessage(conn));
	value = atol(buf);
	ok = at_least ? value >= expected : value == expected;
	printf("%s %s: %ld\n", ok ? "ok    " : "FAILED", what, value);
	return ok;
}

/*
 * fair_client_main
 *		One client of the fairness run: rounds of acquire, log, release.
 *		With cut_in, the client does not queue: it tries with wait = 0
 *		every millisecond until it gets the lease, as a hand-written
 *		polling lock does, and records when it started trying as the
 *		moment it joined the "queue".
 */
static void
fair_client_main(int id, int rounds, bool cut_in)
{
	PGconn	   *conn = connect_db("dsync_fair_client");
	char		holder[32];
	const char *p[2] = {"fair", holder};
	int			granted = 0;

	if (conn == NULL)
		die("fair client %d: cannot connect", id);
	snprintf(holder, sizeof(holder), "fair-%d", id);
	for (int round = 0; round < rounds; round++)
	{
		char		buf[64];

		if (cut_in)
		{
			char		joined[64];
			const char *q[2] = {holder, joined};

			if (query_value(conn, "INSERT INTO fair_queue SELECT $1, clock_timestamp() "
							"RETURNING since", 1, &p[1], joined, sizeof(joined)) != 1)
				break;
			while (query_value(conn, "SELECT dsync_acquire($1, $2, '1 minute', '0')",
							   2, p, buf, sizeof(buf)) == 0)
				usleep(1000);
			if (query_value(conn,
							"INSERT INTO fair_log (holder, wait_start, granted_at) "
							"SELECT $1, $2::timestamptz, clock_timestamp() RETURNING 1",
							2, q, buf, sizeof(buf)) != 1)
				break;
		}
		/* Server-clock times: when the wait began and when it was granted. */
		else if (query_value(conn,
							 "INSERT INTO fair_log (holder, wait_start, granted_at) "
							 "SELECT $2, statement_timestamp(), clock_timestamp() "
							 "FROM (SELECT dsync_acquire($1, $2, '1 minute', '30 seconds') AS t) g "
							 "WHERE g.t IS NOT NULL RETURNING 1",
							 2, p, buf, sizeof(buf)) != 1)
			break;
		granted++;
		if (query_value(conn, "SELECT dsync_release($1, $2)", 2, p, buf, sizeof(buf)) != 1)
			break;
	}
	PQfinish(conn);
	exit(granted == rounds ? 0 : 1);
}

/*
 * fair_sampler_main
 *		Record when each waiter joined dsync's queue: dsync_waiters.since is
 *		set as a waiter takes its place in line (under the same lock as its
 *		ticket), so the order of "since" is the order of the queue.
 *		Sampled until the parent ends this process; a wait too short to be
 *		seen is simply not judged.
 */
static void
fair_sampler_main(void)
{
	PGconn	   *conn = connect_db("dsync_fair_sampler");

	if (conn == NULL)
		die("fair sampler: cannot connect");
	for (;;)
		if (!exec_ok(conn, "INSERT INTO fair_queue SELECT holder, since FROM dsync_waiters "
					 "WHERE name = 'fair' ON CONFLICT DO NOTHING"))
			die("fair sampler: %s", PQerrorMessage(conn));
}

/*
 * fair_main
 *		The fairness run and its checks.  With cut_in the clients do not
 *		use dsync's queue, and the check must find that some of them cut
 *		in: that shows it can fail.
 */
static int
fair_main(int clients, int rounds, bool cut_in)
{
	PGconn	   *conn = connect_db("dsync_fair_main");
	int			status;
	int			failed_children = 0;
	int			passed = 0,
				failed = 0;
	char		sql[1024];
	pid_t		sampler = 0;

	if (conn == NULL)
		die("cannot connect to the server");
	if (!exec_ok(conn, "SET client_min_messages = warning") ||
		!exec_ok(conn, "CREATE EXTENSION IF NOT EXISTS dsync") ||
		!exec_ok(conn, "DROP TABLE IF EXISTS fair_log, fair_queue") ||
		!exec_ok(conn, "CREATE TABLE fair_log (id bigserial PRIMARY KEY, holder text, "
				 "wait_start timestamptz, granted_at timestamptz)") ||
		!exec_ok(conn, "CREATE TABLE fair_queue (holder text, since timestamptz, "
				 "PRIMARY KEY (holder, since))") ||
		!exec_ok(conn, "SELECT dsync_force_release('fair')") ||
		!exec_ok(conn, "SELECT dsync_acquire('fair', 'starter', '1 minute')"))
		die("setup failed: %s", PQerrorMessage(conn));

	/*
	 * Hold the lease until every client waits, so that all start
	 * contending together.  The children never use this connection (and
	 * exit without closing it), so sharing its socket is harmless.
	 */
	printf("lease_stress fair%s: %d clients, %d rounds each, one lease\n",
		   cut_in ? " (clients cut in: the check must fail)" : "", clients, rounds);
	fflush(stdout);
	if (!cut_in && (sampler = fork()) == 0)
		fair_sampler_main();
	for (int i = 0; i < clients; i++)
		if (fork() == 0)
			fair_client_main(i, rounds, cut_in);
	for (int tries = 0;; tries++)
	{
		char		queued[16];

		if (query_value(conn, cut_in ? "SELECT count(DISTINCT holder) FROM fair_queue" :
						"SELECT count(*) FROM dsync_waiters WHERE name = 'fair'",
						0, NULL, queued, sizeof(queued)) != 1)
			die("cannot count the waiters: %s", PQerrorMessage(conn));
		if (atoi(queued) == clients)
			break;
		if (tries > 3000)
			die("only %s of %d clients queued", queued, clients);
		usleep(10000);
	}
	if (!exec_ok(conn, "SELECT dsync_release('fair', 'starter')"))
		die("release failed: %s", PQerrorMessage(conn));
	for (int done = 0; done < clients;)
	{
		pid_t		pid = wait(&status);

		if (pid < 0)
			break;
		if (pid == sampler)
			continue;
		done++;
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			failed_children++;
	}
	if (sampler > 0)
	{
		kill(sampler, SIGKILL);
		waitpid(sampler, &status, 0);
	}
	printf("%s clients that did not get all their rounds: %d\n",
		   failed_children == 0 ? "ok    " : "FAILED", failed_children);
	if (failed_children == 0)
		passed++;
	else
		failed++;

	/*
	 * FIFO: no grant may overtake a waiter that joined the queue before it.
	 * Each grant is matched with the moment its waiter joined the queue
	 * (fair_queue: the same holder, between the start of its acquire and
	 * the grant); of two matched grants, the one that joined first must be
	 * granted first.  Grant times are exact: a grant comes only after the
	 * previous holder's release, which comes after its own grant time was
	 * taken.  A grant made on the first try, without queueing, is not
	 * matched, and cannot have overtaken anybody in the queue.
	 */
	snprintf(sql, sizeof(sql),
			 "CREATE TEMP VIEW fair_judged AS SELECT l.holder, q.since, l.granted_at "
			 "FROM fair_log l JOIN fair_queue q ON q.holder = l.holder "
			 "AND q.since BETWEEN l.wait_start AND l.granted_at");
	if (!exec_ok(conn, sql))
		die("cannot match grants: %s", PQerrorMessage(conn));
	if (check(conn, "grants matched with the moment their waiter joined the queue",
			  "SELECT count(*) FROM fair_judged", 2, true))
		passed++;
	else
		failed++;
	if (check(conn, "grants that overtook a waiter that joined the queue earlier",
			  "SELECT count(*) FROM fair_judged a JOIN fair_judged b ON a.holder <> b.holder "
			  "AND a.since > b.since AND a.granted_at < b.granted_at", 0, false))
		passed++;
	else
		failed++;
	snprintf(sql, sizeof(sql),
			 "SELECT count(*) FROM (SELECT holder FROM fair_log GROUP BY holder "
			 "HAVING count(*) = %d) s", rounds);
	if (check(conn, "clients with every round granted", sql, clients, false))
		passed++;
	else
		failed++;
	PQfinish(conn);
	printf("\n%d passed, %d failed\n", passed, failed);
	return failed == 0 ? 0 : 1;
}

/*
 * monitor_main
 *		Sample the semaphore's rows in dsync_leases until the deadline;
 *		store how many samples, the most holders seen at once, and how many
 *		samples were wrong (more than permits holders, a token shown twice,
 *		a permits column other than the semaphore's count) in sem_monitor.
 */
static void
monitor_main(time_t deadline, const char *sem, int permits)
{
	PGconn	   *conn = connect_db("dsync_stress_monitor");
	char		permits_s[16];
	const char *p[2] = {sem, permits_s};
	long		samples = 0,
				bad = 0,
				most = 0;
	char		sql[256];

	if (conn == NULL)
		die("monitor: cannot connect");
	snprintf(permits_s, sizeof(permits_s), "%d", permits);
	while (time(NULL) < deadline)
	{
		PGresult   *res = PQexecParams(conn,
									   "SELECT count(*), count(DISTINCT fencing), "
									   "count(*) FILTER (WHERE permits IS DISTINCT FROM $2::int) "
									   "FROM dsync_leases WHERE lease = $1",
									   2, NULL, p, NULL, NULL, 0);

		if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1)
		{
			long		holders = atol(PQgetvalue(res, 0, 0));
			long		tokens = atol(PQgetvalue(res, 0, 1));
			long		wrong_permits = atol(PQgetvalue(res, 0, 2));

			samples++;
			if (holders > most)
				most = holders;
			if (holders > permits || tokens != holders || wrong_permits != 0)
				bad++;
		}
		PQclear(res);
		usleep(2000);
	}
	snprintf(sql, sizeof(sql), "INSERT INTO sem_monitor VALUES (%ld, %ld, %ld)",
			 samples, most, bad);
	if (!exec_ok(conn, sql))
		die("monitor: %s", PQerrorMessage(conn));
	PQfinish(conn);
	printf("monitor: %ld samples of dsync_leases, at most %ld holders at once\n",
		   samples, most);
	exit(0);
}

/*
 * sem_main
 *		The semaphore run and its checks.  limit is the bound of the
 *		overlap check (normally permits; lower it to see the check fail).
 */
static int
sem_main(int clients, int seconds, int permits, int limit)
{
	const char *sem = "stress-sem";
	PGconn	   *conn;
	time_t		deadline;
	int			failed_children = 0;
	int			status;
	int			passed = 0,
				failed = 0;
	char		sql[1024];
	char		create[128];

	if (clients < 2 || seconds < 5 || permits < 2 || limit < 0)
		die("usage: lease_stress semaphore [clients >= 2] [seconds >= 5] [permits >= 2] [limit]");
	conn = connect_db("dsync_stress_main");
	if (conn == NULL)
		die("cannot connect to the server");
	snprintf(create, sizeof(create), "SELECT dsync_semaphore_create('%s', %d)", sem, permits);
	if (!exec_ok(conn, "SET client_min_messages = warning") ||
		!exec_ok(conn, "CREATE EXTENSION IF NOT EXISTS dsync") ||
		!exec_ok(conn, "DROP TABLE IF EXISTS sem_log, sem_monitor") ||
		!exec_ok(conn,
				 "CREATE TABLE sem_log (id bigserial PRIMARY KEY, lease text, holder text, "
				 "token bigint, guard_token bigint, slot integer, t_start timestamptz, "
				 "t_end timestamptz, iso text)") ||
		!exec_ok(conn, "CREATE TABLE sem_monitor (samples bigint, most bigint, bad bigint)") ||
		!exec_ok(conn, "SELECT dsync_force_release('stress-sem')") ||
		!exec_ok(conn, "SELECT dsync_semaphore_drop('stress-sem')") ||
		!exec_ok(conn, "DELETE FROM dsync_permit WHERE name = 'stress-sem'") ||
		!exec_ok(conn, create))
		die("setup failed: %s", PQerrorMessage(conn));

	printf("lease_stress semaphore: %d clients, %d s, one semaphore of %d permits, "
		   "ttl 2 s, wait 1 s, kills every 0.7 s\n", clients, seconds, permits);
	fflush(stdout);
	PQfinish(conn);

	deadline = time(NULL) + seconds;
	for (int i = 0; i < clients; i++)
		if (fork() == 0)
			client_main(i, 1, deadline, sem);
	if (fork() == 0)
		killer_main(deadline);
	if (fork() == 0)
		monitor_main(deadline, sem, permits);
	while (wait(&status) > 0)
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			failed_children++;

	conn = connect_db("dsync_stress_main");
	if (conn == NULL)
		die("cannot reconnect to the server");

	printf("\n");
#define SEM_CHECK(what, sql, expected, at_least) \
	(check(conn, what, sql, expected, at_least) ? passed++ : failed++)

	printf("%s clients that never got a grant or exited abnormally: %d\n",
		   failed_children == 0 ? "ok    " : "FAILED", failed_children);
	if (failed_children == 0)
		passed++;
	else
		failed++;
	SEM_CHECK("guarded intervals logged", "SELECT count(*) FROM sem_log", 50, true);

	/*
	 * Sweep over every interval's start (+1) and end (-1) in time order;
	 * at equal times starts come first, so intervals that merely touch
	 * count as overlapping.  The running sum is how many guarded intervals
	 * were open at that instant.
	 */
#define SEM_OPEN_SQL \
	"SELECT sum(d) OVER (ORDER BY t, d DESC, id ROWS UNBOUNDED PRECEDING) AS open " \
	"FROM (SELECT id, t_start AS t, 1 AS d FROM sem_log " \
	"UNION ALL SELECT id, t_end, -1 FROM sem_log) e"
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM (" SEM_OPEN_SQL ") s WHERE open > %d", limit);
	{
		char		what[128];

		snprintf(what, sizeof(what),
				 "instants at which more than %d holders' guarded intervals overlapped", limit);
		SEM_CHECK(what, sql, 0, false);
	}
	SEM_CHECK("most guarded intervals open at one instant (at least 2: holders worked at once)",
			  "SELECT coalesce(max(open), 0) FROM (" SEM_OPEN_SQL ") s", 2, true);
	SEM_CHECK("intervals that ended before they started",
			  "SELECT count(*) FROM sem_log WHERE t_end < t_start", 0, false);
	snprintf(sql, sizeof(sql),
			 "SELECT count(*) FROM sem_log WHERE slot IS NULL OR slot < 0 OR slot >= %d", permits);
	SEM_CHECK("intervals on a permit that does not exist", sql, 0, false);
	SEM_CHECK("overlapping intervals of different holders of one permit",
			  "SELECT count(*) FROM sem_log a JOIN sem_log b ON a.slot = b.slot "
			  "AND a.id < b.id AND a.holder <> b.holder "
			  "AND tstzrange(a.t_start, a.t_end, '[]') && tstzrange(b.t_start, b.t_end, '[]')",
			  0, false);
	SEM_CHECK("grants whose token did not rise in grant order on their permit",
			  "SELECT count(*) FROM (SELECT holder, token, "
			  "lag(holder) OVER w AS prev_holder, lag(token) OVER w AS prev_token "
			  "FROM sem_log WINDOW w AS (PARTITION BY slot ORDER BY t_start)) s "
			  "WHERE prev_token IS NOT NULL AND NOT (token > prev_token OR "
			  "(token = prev_token AND holder = prev_holder))",
			  0, false);
	SEM_CHECK("guards that returned another token than the grant",
			  "SELECT count(*) FROM sem_log WHERE guard_token <> token", 0, false);
	SEM_CHECK("tokens shared by two holders",
			  "SELECT count(*) FROM (SELECT token FROM sem_log GROUP BY token "
			  "HAVING count(DISTINCT holder) > 1) s", 0, false);
	SEM_CHECK("overlapping intervals of different holders with one token",
			  "SELECT count(*) FROM sem_log a JOIN sem_log b ON a.token = b.token "
			  "AND a.id < b.id AND a.holder <> b.holder "
			  "AND tstzrange(a.t_start, a.t_end, '[]') && tstzrange(b.t_start, b.t_end, '[]')",
			  0, false);
	snprintf(sql, sizeof(sql), "SELECT count(DISTINCT slot) FROM sem_log");
	SEM_CHECK("permits used (at least 2)", sql, 2, true);
	SEM_CHECK("isolation levels seen in guarded work",
			  "SELECT count(DISTINCT iso) FROM sem_log", 3, false);
	SEM_CHECK("monitor samples of dsync_leases",
			  "SELECT coalesce(sum(samples), 0) FROM sem_monitor", 100, true);
	SEM_CHECK("samples with too many holders, a repeated token or wrong permits",
			  "SELECT coalesce(sum(bad), 1) FROM sem_monitor", 0, false);
	SEM_CHECK("waiters left behind",
			  "SELECT count(*) FROM dsync_waiters", 0, false);

	PQfinish(conn);
	printf("\n%d passed, %d failed\n", passed, failed);
	return failed == 0 ? 0 : 1;
}

int
main(int argc, char **argv)
{
	int			clients = argc > 1 ? atoi(argv[1]) : 16;
	int			seconds = argc > 2 ? atoi(argv[2]) : 20;
	int			nleases = argc > 3 ? atoi(argv[3]) : 3;
	time_t		deadline;
	PGconn	   *conn;
	int			failed_children = 0;
	int			status;
	int			passed = 0,
				failed = 0;

	if (argc > 1 && (strcmp(argv[1], "fair") == 0 || strcmp(argv[1], "fair-cut-in") == 0))
		return fair_main(argc > 2 ? atoi(argv[2]) : 8, argc > 3 ? atoi(argv[3]) : 20,
						 strcmp(argv[1], "fair-cut-in") == 0);
	if (argc > 1 && strcmp(argv[1], "semaphore") == 0)
	{
		int			permits = argc > 4 ? atoi(argv[4]) : 3;

		return sem_main(argc > 2 ? atoi(argv[2]) : 16, argc > 3 ? atoi(argv[3]) : 20,
						permits, argc > 5 ? atoi(argv[5]) : permits);
	}
	if (clients < 2 || seconds < 5 || nleases < 1)
		die("usage: lease_stress [clients >= 2] [seconds >= 5] [leases >= 1]");

	conn = connect_db("dsync_stress_main");
	if (conn == NULL)
		die("cannot connect to the server");
	if (!exec_ok(conn, "SET client_min_messages = warning") ||
		!exec_ok(conn, "CREATE EXTENSION IF NOT EXISTS dsync") ||
		!exec_ok(conn, "DROP TABLE IF EXISTS stress_log") ||
		!exec_ok(conn,
				 "CREATE TABLE stress_log (id bigserial PRIMARY KEY, lease text, holder text, "
				 "token bigint, guard_token bigint, t_start timestamptz, t_end timestamptz, iso text)") ||
		!exec_ok(conn, "SELECT dsync_force_release('stress-' || i) FROM generate_series(0, 99) i"))
		die("setup failed: %s", PQerrorMessage(conn));

	printf("lease_stress: %d clients, %d s, %d leases, ttl 2 s, wait 1 s, kills every 0.7 s\n",
		   clients, seconds, nleases);
	fflush(stdout);

	/* Children must not share this connection's socket. */
	PQfinish(conn);

	deadline = time(NULL) + seconds;
	for (int i = 0; i < clients; i++)
		if (fork() == 0)
			client_main(i, nleases, deadline, NULL);
	if (fork() == 0)
		killer_main(deadline);
	while (wait(&status) > 0)
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			failed_children++;

	conn = connect_db("dsync_stress_main");
	if (conn == NULL)
		die("cannot reconnect to the server");

	printf("\n");
#define CHECK(what, sql, expected, at_least) \
	(check(conn, what, sql, expected, at_least) ? passed++ : failed++)

	/* A client exits non-zero if it never got a grant: starvation. */
	printf("%s clients that never got a grant or exited abnormally: %d\n",
		   failed_children == 0 ? "ok    " : "FAILED", failed_children);
	if (failed_children == 0)
		passed++;
	else
		failed++;
	CHECK("guarded intervals logged", "SELECT count(*) FROM stress_log", 50, true);
	CHECK("leases with more than one holder",
		  "SELECT count(*) FROM (SELECT lease FROM stress_log GROUP BY lease "
		  "HAVING count(DISTINCT holder) > 1) s", 1, true);
	CHECK("overlapping intervals of different holders of one lease",
		  "SELECT count(*) FROM stress_log a JOIN stress_log b ON a.lease = b.lease "
		  "AND a.id < b.id AND a.holder <> b.holder "
		  "AND tstzrange(a.t_start, a.t_end, '[]') && tstzrange(b.t_start, b.t_end, '[]')",
		  0, false);
	CHECK("grants whose token did not rise in grant order",
		  "SELECT count(*) FROM (SELECT holder, token, "
		  "lag(holder) OVER w AS prev_holder, lag(token) OVER w AS prev_token "
		  "FROM stress_log WINDOW w AS (PARTITION BY lease ORDER BY t_start)) s "
		  "WHERE prev_token IS NOT NULL AND NOT (token > prev_token OR "
		  "(token = prev_token AND holder = prev_holder))",
		  0, false);
	CHECK("guards that returned another token than the grant",
		  "SELECT count(*) FROM stress_log WHERE guard_token <> token", 0, false);
	CHECK("tokens shared by two holders",
		  "SELECT count(*) FROM (SELECT token FROM stress_log GROUP BY token "
		  "HAVING count(DISTINCT holder) > 1) s", 0, false);
	CHECK("isolation levels seen in guarded work",
		  "SELECT count(DISTINCT iso) FROM stress_log", 3, false);
	CHECK("waiters left behind",
		  "SELECT count(*) FROM dsync_waiters", 0, false);

	PQfinish(conn);
	printf("\n%d passed, %d failed\n", passed, failed);
	return failed == 0 ? 0 : 1;
}
