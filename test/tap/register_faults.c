/*-------------------------------------------------------------------------
 *
 * register_faults.c
 *		The clients of the fenced-register fault test
 *		(t/041_fence_faults.pl): workers that increment one register under
 *		a lease bound to its table, and write down everything they saw.
 *
 *	register_faults CONNINFO WORKERS SECONDS DIR
 *
 * Each worker, in a loop until SECONDS have passed: connects if it must;
 * acquires the lease "register" (durable or ephemeral, at random; ttl
 * 500 ms, waiting up to 1 s); reads the register with a plain, unfenced
 * SELECT; works on it for up to 600 ms, so that it sometimes outlives its
 * ttl by itself, and another holder reads the register while it works;
 * writes what it read plus one with its token, and in the same statement
 * a row of the write log (worker, seq, token, value); releases.  The test
 * pauses workers with SIGSTOP past their ttl, terminates their backends
 * and crashes the server meanwhile; a worker retries whatever failed.
 *
 * Every step goes to DIR/wN.log as one line:
 *	acq TOKEN KIND			a grant
 *	read TOKEN VALUE		what the register said
 *	write SEQ TOKEN VALUE OUTCOME
 *		OUTCOME: ok (committed), stale (refused, 55000: nothing written),
 *		failed (another error before any commit), unknown (the connection
 *		went during the write: the write log says whether it committed).
 * The pids of the workers go to DIR/pids, for the test's SIGSTOP.  The
 * test checks the history afterwards (see the test's header).
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "libpq-fe.h"

/*
 * now_s
 *		Wall clock in seconds.
 */
static double
now_s(void)
{
	struct timeval tv;

	gettimeofday(&tv, NULL);
	return tv.tv_sec + tv.tv_usec / 1e6;
}

/*
 * outcome
 *		What a statement's result says: "ok", "stale", "failed" (an error
 *		the server sent, so nothing was written), or "unknown" (no answer:
 *		the connection went, and the write may have committed).
 */
static const char *
outcome(PGconn *conn, PGresult *res)
{
	const char *state;

	if (PQresultStatus(res) == PGRES_COMMAND_OK || PQresultStatus(res) == PGRES_TUPLES_OK)
		return "ok";
	state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
	if (state != NULL && strcmp(state, "55000") == 0)
		return "stale";
	if (PQstatus(conn) == CONNECTION_BAD || state == NULL ||
		strncmp(state, "57P", 3) == 0 || strncmp(state, "08", 2) == 0)
		return "unknown";
	return "failed";
}

/*
 * worker_main
 *		One worker's loop, as the file header says.
 */
static void
worker_main(const char *conninfo, int id, double deadline, const char *dir)
{
	char		path[1024];
	char		holder[32];
	FILE	   *log;
	PGconn	   *conn = NULL;
	long		seq = 0;

	snprintf(path, sizeof(path), "%s/w%d.log", dir, id);
	log = fopen(path, "w");
	if (log == NULL)
		exit(2);
	setvbuf(log, NULL, _IOLBF, 0);
	snprintf(holder, sizeof(holder), "w%d", id);
	srandom((unsigned int) (getpid() ^ (long) (now_s() * 1000)));

	while (now_s() < deadline)
	{
		const char *kind = (random() % 2) ? "true" : "false";
		const char *acq_params[2] = {holder, kind};
		PGresult   *res;
		char		token[32];
		char		value[32];
		char		written[32];
		char		seqbuf[32];
		char		idbuf[16];
		const char *write_params[4];
		const char *result;

		if (conn == NULL || PQstatus(conn) != CONNECTION_OK)
		{
			PQfinish(conn);
			conn = PQconnectdb(conninfo);
			if (PQstatus(conn) != CONNECTION_OK)
			{
				PQfinish(conn);
				conn = NULL;
				usleep(200000);
				continue;
			}
		}

		res = PQexecParams(conn,
						   "SELECT dsync_acquire('register', $1, '500 ms', '1 s', NULL, $2::boolean)",
						   2, NULL, acq_params, NULL, NULL, 0);
		if (PQresultStatus(res) != PGRES_TUPLES_OK || PQgetisnull(res, 0, 0))
		{
			PQclear(res);
			continue;
		}
		snprintf(token, sizeof(token), "%s", PQgetvalue(res, 0, 0));
		PQclear(res);
		fprintf(log, "acq %s %s\n", token, kind[0] == 't' ? "durable" : "ephemeral");

		res = PQexec(conn, "SELECT v FROM register WHERE id = 1");
		if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1)
		{
			PQclear(res);
			continue;
		}
		snprintf(value, sizeof(value), "%s", PQgetvalue(res, 0, 0));
		PQclear(res);
		fprintf(log, "read %s %s\n", token, value);

		usleep((useconds_t) (random() % 600000));

		seq++;
		snprintf(written, sizeof(written), "%ld", atol(value) + 1);
		snprintf(seqbuf, sizeof(seqbuf), "%ld", seq);
		snprintf(idbuf, sizeof(idbuf), "%d", id);
		write_params[0] = written;
		write_params[1] = token;
		write_params[2] = idbuf;
		write_params[3] = seqbuf;
		res = PQexecParams(conn,
						   "WITH u AS (UPDATE register SET v = $1::int, token = $2::bigint "
						   "WHERE id = 1 RETURNING v) "
						   "INSERT INTO wlog SELECT $3::int, $4::int, $2::bigint, v FROM u",
						   4, NULL, write_params, NULL, NULL, 0);
		result = outcome(conn, res);
		PQclear(res);
		fprintf(log, "write %ld %s %s %s\n", seq, token, written, result);

		res = PQexecParams(conn, "SELECT dsync_release('register', $1)", 1, NULL,
						   acq_params, NULL, NULL, 0);
		PQclear(res);
	}
	PQfinish(conn);
	fclose(log);
	exit(0);
}

/*
 * main
 *		Start the workers, note their pids, wait for them.
 */
int
main(int argc, char **argv)
{
	int			workers;
	double		deadline;
	char		path[1024];
	FILE	   *pids;
	int			failed = 0;

	if (argc != 5)
	{
		fprintf(stderr, "usage: register_faults CONNINFO WORKERS SECONDS DIR\n");
		return 2;
	}
	workers = atoi(argv[2]);
	deadline = now_s() + atof(argv[3]);
	snprintf(path, sizeof(path), "%s/pids", argv[4]);
	pids = fopen(path, "w");
	if (pids == NULL)
	{
		fprintf(stderr, "cannot write %s: %s\n", path, strerror(errno));
		return 2;
	}
	for (int i = 0; i < workers; i++)
	{
		pid_t		pid = fork();

		if (pid < 0)
		{
			fprintf(stderr, "fork: %s\n", strerror(errno));
			return 2;
		}
		if (pid == 0)
			worker_main(argv[1], i, deadline, argv[4]);
		fprintf(pids, "%d\n", (int) pid);
	}
	fclose(pids);
	for (int i = 0; i < workers; i++)
	{
		int			status;

		if (wait(&status) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
			failed++;
	}
	printf("workers done, %d failed\n", failed);
	return failed > 0 ? 1 : 0;
}
