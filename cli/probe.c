/*-------------------------------------------------------------------------
 *
 * probe.c
 *		What a database has of dsync: whether the server preloaded the
 *		library, whether the extension is installed here, its version and
 *		its schema.  Found from pg_settings and the catalogs only, so that
 *		no command (status and check, and lock, elect and watch at their
 *		start) causes an ERROR in the server log where dsync is missing (calling a function that does not exist, or
 *		one whose library refuses to load, would log one).
 *
 *-------------------------------------------------------------------------
 */
#include <stdlib.h>
#include <string.h>

#include "dsync_cli.h"

/*
 * ProbeDsync
 *		Fill *probe.  dsync defines its settings when its library loads,
 *		and only shared_preload_libraries can load it (sql/dsync.c): a
 *		dsync.max_workers of type integer in pg_settings means the library
 *		is preloaded.  Without it the name is at most a placeholder (type
 *		string) or absent, and pg_settings, readable by every role, never
 *		raises an error either way (unlike current_setting on
 *		shared_preload_libraries, which only privileged roles may read).
 *		It waits no later than deadline_ms (monotonic; -1: no limit), so
 *		that a probe of a stuck server ends.  Returns false if the query
 *		failed or timed out: then *failed is its failed result (NULL where
 *		the connection went or the time ran out, which *timed_out tells),
 *		for the caller to judge by its SQLSTATE and clear.
 */
bool
ProbeDsync(PGconn *conn, DsyncProbe *probe, int64_t deadline_ms, PGresult **failed,
		   bool *timed_out)
{
	PGresult   *res;
	int			major = 0,
				minor = 0;

	memset(probe, 0, sizeof(*probe));
	*failed = NULL;
	res = Query(conn,
				"SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_settings"
				"                WHERE name = 'dsync.max_workers' AND vartype = 'integer'),"
				"       e.extversion, n.nspname"
				"  FROM (VALUES (1)) AS one(x)"
				"  LEFT JOIN pg_catalog.pg_extension AS e ON e.extname = 'dsync'"
				"  LEFT JOIN pg_catalog.pg_namespace AS n ON n.oid = e.extnamespace",
				0, NULL, deadline_ms, NULL, NULL, timed_out);
	if (res == NULL)
		return false;
	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1)
	{
		*failed = res;
		return false;
	}
	probe->preloaded = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
	probe->installed = !PQgetisnull(res, 0, 1);
	if (probe->installed)
	{
		snprintf(probe->version, sizeof(probe->version), "%s", PQgetvalue(res, 0, 1));
		snprintf(probe->schema, sizeof(probe->schema), "%s", PQgetvalue(res, 0, 2));
		if (sscanf(probe->version, "%d.%d", &major, &minor) >= 1)
			probe->version_num = major * 100 + minor;
	}
	PQclear(res);
	return true;
}

/*
 * ProbeProblem
 *		What keeps a command from using dsync in this database: 0 if
 *		nothing does, else EXIT_NOT_PRELOADED or EXIT_CONFIG (not installed,
 *		or older than min_version_num: status and check read views that
 *		came with 1.2, while lock, elect and watch work with any version,
 *		so they pass 0), with one line saying what is wrong and what to do
 *		in buf.
 */
int
ProbeProblem(const DsyncProbe *probe, PGconn *conn, int min_version_num, char *buf, size_t len)
{
	buf[0] = '\0';
	if (!probe->preloaded)
	{
		snprintf(buf, len,
				 "dsync is not loaded on this server (it is not in shared_preload_libraries); "
				 "add shared_preload_libraries = 'dsync' to postgresql.conf and restart the server");
		return EXIT_NOT_PRELOADED;
	}
	if (!probe->installed)
	{
		snprintf(buf, len, NOT_INSTALLED_FMT, PQdb(conn));
		return EXIT_CONFIG;
	}
	if (probe->version_num < min_version_num)
	{
		snprintf(buf, len,
				 "the dsync extension in database \"%s\" is version %s, older than 1.2, "
				 "which this tool needs; run ALTER EXTENSION dsync UPDATE there",
				 PQdb(conn), probe->version);
		return EXIT_CONFIG;
	}
	return 0;
}

/*
 * RequireDsync
 *		For commands that need dsync's objects (status, lock, elect,
 *		watch): probe, by deadline_ms (-1: no limit), and exit 78 with the
 *		problem's line unless they can be used (with min_version_num, see
 *		ProbeProblem), so that a database without dsync gets a clear
 *		message and its server log no ERROR.  A library
 *		that is not preloaded is a configuration error like a missing
 *		extension (dsync check tells the two apart).  A probe that fails
 *		exits as FatalResult says (77 where permission was denied), or 69
 *		once the time ran out.
 */
void
RequireDsync(PGconn *conn, DsyncProbe *probe, int64_t deadline_ms, int min_version_num)
{
	char		problem[512];
	PGresult   *failed;
	bool		timed_out;

	if (!ProbeDsync(conn, probe, deadline_ms, &failed, &timed_out))
	{
		if (timed_out)
		{
			CancelStatement(conn);
			Fatal(EXIT_UNAVAILABLE, "timeout: the server did not answer in time; see pg_stat_activity");
		}
		FatalResult("could not read the catalogs", conn, failed);
	}
	if (ProbeProblem(probe, conn, min_version_num, problem, sizeof(problem)) != 0)
		Fatal(EXIT_CONFIG, "%s", problem);
}

/*
 * SchemaSql
 *		sql with every "@extschema@" replaced by the extension's schema, as
 *		a quoted identifier: dsync's views and functions are then found
 *		wherever the extension was created, and no schema of someone
 *		else's that the search_path puts first can stand in for them
 *		(every command's statements name them so), and each
 *		statement stands alone (a pooler in transaction mode may run the
 *		next one on another server connection, so a SET would not carry
 *		over).  The caller frees the result.
 */
char *
SchemaSql(PGconn *conn, const DsyncProbe *probe, const char *sql)
{
	static const char marker[] = "@extschema@";
	char	   *ident = PQescapeIdentifier(conn, probe->schema, strlen(probe->schema));
	size_t		count = 0;
	char	   *out;
	char	   *o;
	const char *p;

	if (ident == NULL)
		Fatal(EXIT_OSERR, "out of memory");
	for (p = strstr(sql, marker); p != NULL; p = strstr(p + 1, marker))
		count++;
	out = malloc(strlen(sql) + count * strlen(ident) + 1);
	if (out == NULL)
		Fatal(EXIT_OSERR, "out of memory");
	o = out;
	for (p = sql; *p;)
	{
		if (strncmp(p, marker, sizeof(marker) - 1) == 0)
		{
			strcpy(o, ident);
			o += strlen(ident);
			p += sizeof(marker) - 1;
		}
		else
			*o++ = *p++;
	}
	*o = '\0';
	PQfreemem(ident);
	return out;
}
