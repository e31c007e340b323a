/*-------------------------------------------------------------------------
 *
 * rw.c
 *		The stress driver's read-write mode (lease_stress rw): clients
 *		taking two names shared (dsync_acquire_shared) or exclusively
 *		(dsync_acquire) with blocking waits, a quarter of them as session
 *		leases, while a killer terminates random clients' backends.
 *
 * A quarter of the rounds acquire with wait = 0 inside a transaction of
 * the client's own (a refused try keeps what it locked until then); the
 * rest wait up to 1 s.  Released rows are removed at once
 * (dsync.idle_row_retention = 0 for the run), so names often lose their
 * plain row and grants of both modes race to insert it.  "rw-cheat" runs
 * the same with every "exclusive" round taking the name shared: the
 * overlap check must then fail, which shows that it can.
 *
 * Each round logs its guarded work (dsync_assert_held in the transaction
 * that logs, as the main run does), so the log shows when each holder
 * certainly held its name.  The checks: no interval of an exclusive
 * holder overlaps any other holder's interval of the same name; shared
 * holders did overlap one another (so shared grants really were made
 * together and the first check is not vacuous); every exclusive grant's
 * token is above the tokens of every grant of the name that ended before
 * it began; both modes were granted many times; nobody is left waiting.
 *
 *-------------------------------------------------------------------------
 */
#include "stress.h"

/*
 * rw_client_main
 *		One client of the read-write run, until the deadline.  Holder names
 *		are unique per round ("<s|x><client>.<incarnation>.<round>").
 */
/* rw-cheat: "exclusive" rounds take the name shared (the checks must fail). */
static bool rw_cheat = false;

static void
rw_client_main(int id, time_t deadline)
{
	const char *iso = isolation_levels[id % 3];
	unsigned int seed = stress_seed ^ (unsigned int) (id * 104729);
	PGconn	   *conn = NULL;
	int			incarnation = 0;
	long		grants[2] = {0, 0},
				timeouts = 0,
				errors = 0;
	char		begin[96];

	snprintf(begin, sizeof(begin), "BEGIN ISOLATION LEVEL %s", iso);
	for (int round = 0; time(NULL) < deadline; round++)
	{
		bool		shared = rand_r(&seed) % 2 != 0;
		const char *session = rand_r(&seed) % 4 == 0 ? "true" : "false";
		bool		in_xact = rand_r(&seed) % 4 == 0;
		int			got;
		char		lease[16];
		char		holder[64];
		char		token[32];
		char		same[8];
		char		sleep_sql[64];
		const char *p[3] = {lease, holder, session};
		const char *q[4] = {lease, holder, shared ? "t" : "f", token};

		if (!client_connected(&conn, &incarnation))
			continue;
		snprintf(lease, sizeof(lease), "rw-%d", (int) (rand_r(&seed) % 2));
		snprintf(holder, sizeof(holder), "%c%d.%d.%d", shared ? 's' : 'x', id, incarnation, round);
		/*
		 * Usually a blocking wait (each try in a subtransaction); one time
		 * in four, wait = 0 inside a transaction of the client's own, so
		 * that whatever a refused try locked stays locked until it ends.
		 */
		if (in_xact && !exec_ok(conn, begin))
			continue;
		got = query_value(conn, (shared || rw_cheat) ?
						  (in_xact ?
						   "SELECT dsync_acquire_shared($1, $2, '2 seconds', '0', NULL, $3::boolean)" :
						   "SELECT dsync_acquire_shared($1, $2, '2 seconds', '1 second', NULL, $3::boolean)") :
						  (in_xact ?
						   "SELECT dsync_acquire($1, $2, '2 seconds', '0', NULL, true, $3::boolean)" :
						   "SELECT dsync_acquire($1, $2, '2 seconds', '1 second', NULL, true, $3::boolean)"),
						  3, p, token, sizeof(token));
		if (in_xact)
		{
			usleep((rand_r(&seed) % 5) * 1000);
			if (!exec_ok(conn, got >= 0 ? "COMMIT" : "ROLLBACK"))
				got = -1;
		}
		if (got != 1)
		{
			if (PQstatus(conn) == CONNECTION_OK)
				timeouts++;
			if (got == 0 && in_xact)
				usleep(20000);	/* polling: let the others get on */
			continue;
		}
		grants[shared]++;

		/* Guarded work: a shared holder's guard keeps exclusive ones out too. */
		snprintf(sleep_sql, sizeof(sleep_sql), "SELECT pg_sleep(%.3f)",
				 (rand_r(&seed) % (shared ? 20 : 10)) / 1000.0);
		if (!exec_ok(conn, begin) ||
			query_value(conn,
						"WITH g AS (SELECT dsync_assert_held($1, $2) AS t, clock_timestamp() AS at) "
						"INSERT INTO rw_log (lease, holder, shared, token, t_start) "
						"SELECT $1, $2, $3::boolean, g.t, g.at FROM g RETURNING token = $4::bigint",
						4, q, same, sizeof(same)) != 1 || strcmp(same, "t") != 0 ||
			!exec_ok(conn, sleep_sql) ||
			query_value(conn, "WITH u AS (UPDATE rw_log SET t_end = clock_timestamp() "
						"WHERE holder = $2 AND lease = $1 RETURNING 1) SELECT count(*) FROM u",
						2, q, same, sizeof(same)) != 1 ||
			!exec_ok(conn, "COMMIT"))
		{
			errors++;
			exec_ok(conn, "ROLLBACK");
			continue;
		}

		/* Usually released; one time in sixteen left to expire. */
		if (rand_r(&seed) % 16 != 0 &&
			query_value(conn, "SELECT dsync_release($1, $2)", 2, p, same, sizeof(same)) != 1)
			errors++;
	}
	if (conn)
		PQfinish(conn);
	printf("rw client %2d (%s): shared grants %ld, exclusive grants %ld, timeouts %ld, errors %ld\n",
		   id, iso, grants[1], grants[0], timeouts, errors);
	exit(grants[0] + grants[1] > 0 ? 0 : 1);
}

/*
 * rw_main
 *		The read-write run with kills, then its checks.
 */
int
rw_main(int clients, int seconds, bool cheat)
{
	PGconn	   *conn = connect_db("dsync_stress_main");
	int			passed = 0,
				failed = 0;

	if (conn == NULL)
		die("cannot connect to the server");
	rw_cheat = cheat;

	/*
	 * Released rows removed at once (the reaper's next look), so that names
	 * lose their plain row often and grants of both modes race to make it.
	 */
	if (!exec_ok(conn, "ALTER SYSTEM SET dsync.idle_row_retention = 0") ||
		!exec_ok(conn, "SELECT pg_reload_conf()"))
		printf("note: dsync.idle_row_retention left as it is: %s", PQerrorMessage(conn));
	if (!exec_ok(conn, "SET client_min_messages = warning") ||
		!exec_ok(conn, "CREATE EXTENSION IF NOT EXISTS dsync") ||
		!exec_ok(conn, "DROP TABLE IF EXISTS rw_log") ||
		!exec_ok(conn, "CREATE TABLE rw_log (id bigserial PRIMARY KEY, lease text, holder text, "
				 "shared boolean, token bigint, t_start timestamptz, t_end timestamptz)") ||
		!exec_ok(conn, "SELECT dsync_force_release('rw-' || i) FROM generate_series(0, 1) i"))
		die("setup failed: %s", PQerrorMessage(conn));
	PQfinish(conn);
	printf("lease_stress rw%s: %d clients, %d s, 2 names taken shared or %s (1 in 2) "
		   "(ttl 2 s, wait 1 s, or wait 0 in a transaction one time in 4; a quarter as "
		   "session leases; released rows removed at once), kills every 0.7 s, seed %u\n",
		   cheat ? "-cheat" : "", clients, seconds,
		   cheat ? "\"exclusively\" (but taken shared: the checks must fail)" : "exclusively",
		   stress_seed);
	conn = run_with_kills(clients, seconds, rw_client_main, NULL, &passed, &failed);
#define RWCHECK(what, sql, expected, at_least) \
	(check(conn, what, sql, expected, at_least) ? passed++ : failed++)
	RWCHECK("exclusive grants guarded",
			"SELECT count(*) FROM rw_log WHERE NOT shared AND t_end IS NOT NULL", 20, true);
	RWCHECK("shared grants guarded",
			"SELECT count(*) FROM rw_log WHERE shared AND t_end IS NOT NULL", 20, true);
	RWCHECK("pairs of shared holders that did guarded work together",
			"SELECT count(*) FROM rw_log a JOIN rw_log b ON a.lease = b.lease AND a.id < b.id "
			"AND a.shared AND b.shared AND a.t_end IS NOT NULL AND b.t_end IS NOT NULL "
			"AND tstzrange(a.t_start, a.t_end, '[]') && tstzrange(b.t_start, b.t_end, '[]')",
			1, true);
	RWCHECK("intervals overlapping an exclusive holder's interval of the same name",
			"SELECT count(*) FROM rw_log a JOIN rw_log b ON a.lease = b.lease AND a.id <> b.id "
			"AND NOT a.shared AND a.t_end IS NOT NULL AND b.t_end IS NOT NULL "
			"AND tstzrange(a.t_start, a.t_end, '[]') && tstzrange(b.t_start, b.t_end, '[]')",
			0, false);
	RWCHECK("exclusive grants whose token is not above every earlier holder's",
			"SELECT count(*) FROM rw_log e WHERE NOT e.shared AND e.t_end IS NOT NULL AND EXISTS "
			"(SELECT FROM rw_log o WHERE o.lease = e.lease AND o.t_end < e.t_start "
			"AND o.token >= e.token)", 0, false);
	RWCHECK("waiters left behind",
			"SELECT count(*) FROM dsync_waiters", 0, false);
	exec_ok(conn, "ALTER SYSTEM RESET dsync.idle_row_retention");
	exec_ok(conn, "SELECT pg_reload_conf()");
	PQfinish(conn);
	printf("\n%d passed, %d failed\n", passed, failed);
	return failed == 0 ? 0 : 1;
}
