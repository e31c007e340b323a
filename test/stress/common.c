/*-------------------------------------------------------------------------
 *
 * common.c
 *		What every mode of the stress driver shares: connecting, running
 *		queries, killing clients and reporting checks.
 *
 *-------------------------------------------------------------------------
 */
#include "stress.h"

const char *const isolation_levels[3] = {
	"READ COMMITTED", "REPEATABLE READ", "SERIALIZABLE"
};

unsigned int stress_seed;

/*
 * die
 *		Print a message and exit with failure.
 */
void
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
PGconn *
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
bool
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
int
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
 * query_row
 *		As query_value, for the first nvalues values of the row: each is
 *		copied into its own buffer of buflen bytes (a NULL as an empty
 *		string); the result is query_value's for the first value.
 */
int
query_row(PGconn *conn, const char *sql, int nparams, const char *const *params,
		  int nvalues, char *const *bufs, size_t buflen)
{
	PGresult   *res = PQexecParams(conn, sql, nparams, NULL, params, NULL, NULL, 0);
	int			rc;

	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1 ||
		PQnfields(res) < nvalues)
		rc = -1;
	else
	{
		rc = PQgetisnull(res, 0, 0) ? 0 : 1;
		for (int i = 0; i < nvalues; i++)
			snprintf(bufs[i], buflen, "%s", PQgetvalue(res, 0, i));
	}
	PQclear(res);
	return rc;
}

/*
 * killer_main
 *		Terminate a random client backend every 700 ms until the deadline.
 */
void
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
 *		true if it equals expected (or, if at_least, is at least expected;
 *		with at_least AT_MOST, is at most expected).
 */
bool
check(PGconn *conn, const char *what, const char *sql, long expected, int at_least)
{
	char		buf[64];
	long		value;
	bool		ok;

	if (query_value(conn, sql, 0, NULL, buf, sizeof(buf)) != 1)
		die("check \"%s\" failed: %s", what, PQerrorMessage(conn));
	value = atol(buf);
	ok = at_least == AT_MOST ? value <= expected :
		at_least ? value >= expected : value == expected;
	printf("%s %s: %ld\n", ok ? "ok    " : "FAILED", what, value);
	return ok;
}

/*
 * client_connected
 *		A client's connection, made again (a new incarnation) if the killer
 *		ended it; false, after a pause, if the server cannot be reached.
 */
bool
client_connected(PGconn **conn, int *incarnation)
{
	if (*conn != NULL && PQstatus(*conn) == CONNECTION_OK)
		return true;
	if (*conn)
		PQfinish(*conn);
	*conn = connect_db("dsync_stress_client");
	if (*conn == NULL)
	{
		usleep(100000);
		return false;
	}
	(*incarnation)++;
	return true;
}

/*
 * run_with_kills
 *		Fork clients (client(id, deadline) each, exiting non-zero if they
 *		never got a grant), the killer and, if given, one more process
 *		(extra(deadline)); wait for them all, then connect for the checks.
 *		Reports the clients that failed as the first check, counted in
 *		*passed or *failed, and returns the connection.
 */
PGconn *
run_with_kills(int clients, int seconds, void (*client) (int, time_t),
			   void (*extra) (time_t), int *passed, int *failed)
{
	time_t		deadline = time(NULL) + seconds;
	int			status;
	int			failed_children = 0;
	PGconn	   *conn;

	fflush(stdout);
	for (int i = 0; i < clients; i++)
		if (fork() == 0)
			client(i, deadline);
	if (fork() == 0)
		killer_main(deadline);
	if (extra != NULL && fork() == 0)
		extra(deadline);
	while (wait(&status) > 0)
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			failed_children++;

	conn = connect_db("dsync_stress_main");
	if (conn == NULL)
		die("cannot reconnect to the server");
	printf("\n%s clients that never got a grant or exited abnormally: %d\n",
		   failed_children == 0 ? "ok    " : "FAILED", failed_children);
	if (failed_children == 0)
		(*passed)++;
	else
		(*failed)++;
	return conn;
}
