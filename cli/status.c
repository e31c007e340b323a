/*-------------------------------------------------------------------------
 *
 * status.c
 *		dsync status: the live leases as a table.
 *
 * The tool first looks (probe.c) whether the views can be read here at
 * all, so that a database without the extension, or a server without
 * dsync preloaded, gets a message and exit 78 and no ERROR in its log.
 *
 *-------------------------------------------------------------------------
 */
#include <stdlib.h>
#include <string.h>

#include "dsync_cli.h"

/*
 * The table's rows: a name (when given) is looked up (an index probe),
 * not filtered from a scan.
 */
#define STATUS_COLUMNS \
	"SELECT l.lease, l.holder, l.fencing, l.permits," \
	"       to_char(greatest(l.expires_at - clock_timestamp(), '0'::interval), 'HH24:MI:SS.MS')," \
	"       (SELECT count(*) FROM @extschema@.dsync_waiters w" \
	"         WHERE w.name = l.lease AND w.kind <> 'event')," \
	"       l.owner" \
	"  FROM @extschema@.dsync_leases l"
static const char status_sql_all[] = STATUS_COLUMNS " ORDER BY l.lease, l.fencing";
static const char status_sql_name[] = STATUS_COLUMNS " WHERE l.lease = $1 ORDER BY l.lease, l.fencing";

/*
 * PrintTable
 *		The live leases, one line per holder, or a line saying there are
 *		none.
 */
static void
PrintTable(PGresult *res, const Options *opt)
{
	int			n = PQntuples(res);

	printf("%-24s %-32s %16s %7s %12s %7s %s\n", "LEASE", "HOLDER", "FENCING", "PERMITS",
		   "TIME LEFT", "WAITERS", "OWNER");
	for (int i = 0; i < n; i++)
		printf("%-24s %-32s %16s %7s %12s %7s %s\n", PQgetvalue(res, i, 0),
			   PQgetvalue(res, i, 1), PQgetvalue(res, i, 2), PQgetvalue(res, i, 3),
			   PQgetvalue(res, i, 4), PQgetvalue(res, i, 5), PQgetvalue(res, i, 6));
	if (n == 0)
		printf("(no live leases%s%s)\n", opt->name ? " named " : "", opt->name ? opt->name : "");
}

/*
 * CommandStatus
 *		dsync status: the live leases (all, or those of NAME) as a table.
 */
int
CommandStatus(Options *opt)
{
	PGconn	   *conn = Connect(opt, false);
	const char *params[1] = {opt->name};
	DsyncProbe	probe;
	PGresult   *res;
	char	   *sql;
	bool		timed_out;

	if (conn == NULL)
		return EXIT_UNAVAILABLE;
	RequireDsync(conn, &probe);
	sql = SchemaSql(conn, &probe, opt->name ? status_sql_name : status_sql_all);
	res = Query(conn, sql, opt->name ? 1 : 0, params, -1, NULL, NULL, &timed_out);
	free(sql);
	if (res == NULL || PQresultStatus(res) != PGRES_TUPLES_OK)
		FatalResult("could not read leases", conn, res);
	PrintTable(res, opt);
	PQclear(res);
	PQfinish(conn);
	return 0;
}
