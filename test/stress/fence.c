/*-------------------------------------------------------------------------
 *
 * fence.c
 *		The stress driver's fence-stream mode (lease_stress fence-stream):
 *		writers of a fenced table's current token stream without a pause
 *		while a newer token arrives, generation after generation.
 *
 * Writers that share the mark's own token only share-lock it, so without
 * a queue a steady stream of them keeps a newer token's writer out for as
 * long as the stream lasts.  Each generation here: the driver takes a new
 * token (a fresh grant of the lease "fence-stream"), starts the writers on
 * the previous one, each in short transactions that hold the mark a
 * moment (pg_sleep), lets them stream for a while, writes once with the
 * new token, and lets them go on to the end of the stream.  The checks:
 *
 *	- every generation's new write committed while its stream still ran:
 *	  the writers were refused afterwards (55000), in every generation
 *	  (before the turnstile, the new write waited for the stream to end
 *	  and no writer was ever refused);
 *	- in commit order (the "at" column, stamped after dsync_fenced has
 *	  locked the mark, as in the main run), the table's tokens never go
 *	  back: no stale write committed after a newer one;
 *	- every writer of every generation committed some writes (the stream
 *	  really ran) and none failed otherwise.
 *
 * The new write's wait is printed, as a figure, not checked.
 *
 *-------------------------------------------------------------------------
 */
#include "stress.h"

#include <sys/time.h>

#define FENCE_STREAM_MS			1500	/* how long each generation streams */
#define FENCE_NEW_AFTER_MS		300		/* the newer token arrives then */

/*
 * now_ms
 *		Wall clock in milliseconds.
 */
static double
now_ms(void)
{
	struct timeval tv;

	gettimeofday(&tv, NULL);
	return tv.tv_sec * 1000.0 + tv.tv_usec / 1000.0;
}

/*
 * fence_writer_main
 *		One writer of a generation: write token until stop_at in short
 *		transactions, then report "committed refused errors" on fd.
 */
static void
fence_writer_main(int id, const char *token, double stop_at, int fd)
{
	PGconn	   *conn = connect_db("dsync_stress_fence");
	long		committed = 0,
				refused = 0,
				errors = 0;
	char		line[96];
	char		writer[16];
	const char *params[2] = {token, writer};

	if (conn == NULL)
		die("fence writer %d: cannot connect", id);
	snprintf(writer, sizeof(writer), "%d", id);
	while (now_ms() < stop_at)
	{
		PGresult   *res;
		const char *state;

		if (!exec_ok(conn, "BEGIN"))
			die("fence writer %d: %s", id, PQerrorMessage(conn));
		res = PQexecParams(conn,
						   "INSERT INTO stress_fence_stream (token, writer) VALUES ($1, $2)",
						   2, NULL, params, NULL, NULL, 0);
		state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
		if (PQresultStatus(res) == PGRES_COMMAND_OK &&
			exec_ok(conn, "SELECT pg_sleep(0.003)") && exec_ok(conn, "COMMIT"))
			committed++;
		else
		{
			if (state != NULL && strcmp(state, "55000") == 0)
			{
				/* Refused: back off a little, as a retrying client would. */
				refused++;
				usleep(5000);
			}
			else
			{
				errors++;
				fprintf(stderr, "fence writer %d: %s", id, PQerrorMessage(conn));
			}
			(void) exec_ok(conn, "ROLLBACK");
		}
		PQclear(res);
	}
	PQfinish(conn);
	snprintf(line, sizeof(line), "%ld %ld %ld\n", committed, refused, errors);
	if (write(fd, line, strlen(line)) != (ssize_t) strlen(line))
		die("fence writer %d: cannot report", id);
	exit(0);
}

/*
 * fence_grant
 *		A newer token: the lease "fence-stream" released and granted again.
 */
static void
fence_grant(PGconn *conn, int generation, char *token, size_t len)
{
	char		holder[32];
	const char *params[1] = {holder};

	snprintf(holder, sizeof(holder), "gen%d", generation);
	if (!exec_ok(conn, "SELECT dsync_force_release('fence-stream')") ||
		query_value(conn, "SELECT dsync_acquire('fence-stream', $1, '1 hour')",
					1, params, token, len) != 1)
		die("fence-stream: grant failed: %s", PQerrorMessage(conn));
}

/*
 * fence_stream_main
 *		Run generations of writers (see the top of this file); 0 if every
 *		check passed.
 */
int
fence_stream_main(int writers, int generations)
{
	PGconn	   *conn = connect_db("dsync_stress_fence_main");
	char		stale[32];
	char		token[32];
	long		sum_committed = 0,
				sum_refused = 0,
				sum_errors = 0;
	int			starved = 0,
				idle = 0,
				bad = 0;
	double		max_wait = 0;

	if (writers < 1 || generations < 1)
		die("usage: lease_stress fence-stream [writers >= 1] [generations >= 1]");
	if (conn == NULL)
		die("fence-stream: cannot connect");
	if (!exec_ok(conn, "CREATE EXTENSION IF NOT EXISTS dsync") ||
		!exec_ok(conn,
				 "CREATE OR REPLACE FUNCTION stress_fenced_at() RETURNS trigger LANGUAGE plpgsql AS "
				 "$$BEGIN NEW.at := clock_timestamp(); RETURN NEW; END$$") ||
		!exec_ok(conn,
				 "DROP TABLE IF EXISTS stress_fence_stream; "
				 "CREATE TABLE stress_fence_stream (id bigserial PRIMARY KEY, token bigint, "
				 "writer int, at timestamptz); "
				 "CREATE TRIGGER a_fenced BEFORE INSERT ON stress_fence_stream "
				 "FOR EACH ROW EXECUTE FUNCTION dsync_fenced('token'); "
				 "CREATE TRIGGER b_at BEFORE INSERT ON stress_fence_stream "
				 "FOR EACH ROW EXECUTE FUNCTION stress_fenced_at()"))
		die("fence-stream: setup failed: %s", PQerrorMessage(conn));

	fence_grant(conn, 0, stale, sizeof(stale));
	{
		const char *params[1] = {stale};
		PGresult   *res = PQexecParams(conn,
									   "INSERT INTO stress_fence_stream (token, writer) VALUES ($1, -1)",
									   1, NULL, params, NULL, NULL, 0);

		if (PQresultStatus(res) != PGRES_COMMAND_OK)
			die("fence-stream: first write failed: %s", PQerrorMessage(conn));
		PQclear(res);
	}
	printf("lease_stress fence-stream: %d writers of the current token, %d generations, "
		   "%d ms each, the newer token after %d ms\n",
		   writers, generations, FENCE_STREAM_MS, FENCE_NEW_AFTER_MS);
	fflush(stdout);

	for (int g = 1; g <= generations; g++)
	{
		int			report[2];
		double		stop_at;
		double		started;
		double		waited;
		long		committed = 0,
					refused = 0,
					errors = 0;
		const char *params[1] = {token};
		PGresult   *res;
		FILE	   *in;

		fence_grant(conn, g, token, sizeof(token));
		if (pipe(report) != 0)
			die("cannot make a pipe");
		stop_at = now_ms() + FENCE_STREAM_MS;
		for (int i = 0; i < writers; i++)
			if (fork() == 0)
			{
				close(report[0]);
				fence_writer_main(i, stale, stop_at, report[1]);
			}
		close(report[1]);
		usleep(FENCE_NEW_AFTER_MS * 1000);

		started = now_ms();
		res = PQexecParams(conn,
						   "INSERT INTO stress_fence_stream (token, writer) VALUES ($1, -1)",
						   1, NULL, params, NULL, NULL, 0);
		waited = now_ms() - started;
		if (PQresultStatus(res) != PGRES_COMMAND_OK)
		{
			printf("FAILED generation %d: the newer token's write failed: %s",
				   g, PQerrorMessage(conn));
			bad++;
		}
		PQclear(res);
		if (waited > max_wait)
			max_wait = waited;

		in = fdopen(report[0], "r");
		for (int i = 0; i < writers; i++)
		{
			long		c,
						r,
						e;

			if (fscanf(in, "%ld %ld %ld", &c, &r, &e) != 3)
				die("fence-stream: a writer did not report");
			committed += c;
			refused += r;
			errors += e;
			if (c == 0)
				idle++;
		}
		fclose(in);
		while (wait(NULL) > 0)
			;
		if (refused == 0)
			starved++;
		sum_committed += committed;
		sum_refused += refused;
		sum_errors += errors;
		printf("generation %d: stale writes committed %ld, refused %ld; "
			   "the newer token waited %.1f ms\n", g, committed, refused, waited);
		fflush(stdout);
		snprintf(stale, sizeof(stale), "%s", token);
	}

	printf("fence-stream: %ld stale writes committed, %ld refused, %ld other errors; "
		   "the longest wait of a newer token %.1f ms\n",
		   sum_committed, sum_refused, sum_errors, max_wait);
	printf("%s generations whose newer token got in only once the stream ended: %d\n",
		   starved == 0 ? "ok    " : "FAILED", starved);
	printf("%s writers that committed nothing: %d\n", idle == 0 ? "ok    " : "FAILED", idle);
	printf("%s failed newer writes and other errors: %ld\n",
		   bad == 0 && sum_errors == 0 ? "ok    " : "FAILED", bad + sum_errors);
	if (!check(conn, "writes whose token is below one committed before them",
			   "SELECT count(*) FROM (SELECT token, max(token) OVER (ORDER BY at, id "
			   "ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS before "
			   "FROM stress_fence_stream) s WHERE token < before", 0, false))
		bad++;
	PQfinish(conn);
	return starved == 0 && idle == 0 && bad == 0 && sum_errors == 0 ? 0 : 1;
}
