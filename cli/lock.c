/*-------------------------------------------------------------------------
 *
 * lock.c
 *		dsync lock and dsync elect: acquiring a lease (or a permit),
 *		joining a group and campaigning, then holding (hold.c).
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dsync_cli.h"

/*
 * Acquire
 *		Take the lease, blocking in the server for up to wait_ms (-1: no
 *		limit).  Returns the token (malloc'd), or NULL if the wait ran out;
 *		*signo is set if a signal interrupted the wait.
 */
static char *
Acquire(PGconn *conn, const Options *opt, const char *lease, int64_t wait_ms,
		Holding *h, int *signo, bool *conn_lost)
{
	char		ttl[64];
	char		wait[64];
	const char *params[5];

	params[0] = lease;
	params[1] = opt->holder;
	params[2] = IntervalParam(opt->ttl_ms, ttl, sizeof(ttl));
	params[3] = wait_ms < 0 ? NULL : IntervalParam(wait_ms, wait, sizeof(wait));
	params[4] = opt->info;
	*signo = 0;
	return AcquireToken(conn, h, opt->shared ?
						"@extschema@.dsync_acquire_shared($1, $2, $3::interval, $4::interval,"
						" $5::pg_catalog.jsonb)" :
						"@extschema@.dsync_acquire($1, $2, $3::interval, $4::interval,"
						" $5::pg_catalog.jsonb)",
						5, params, lease, signo, conn_lost, NULL);
}

/*
 * AcquireInfo
 *		A grant from the line carries no info: set it with a reentrant
 *		acquire, which returns the same token.  Returns that token (token
 *		is freed), or NULL if the lease was lost meanwhile; a signal that
 *		comes during it is added to *signo, never forgotten.
 */
static char *
AcquireInfo(PGconn *conn, const Options *opt, Holding *h, char *token, int *signo,
			bool *conn_lost)
{
	int			late = 0;
	char	   *again = Acquire(conn, opt, opt->name, 0, h, &late, conn_lost);

	free(token);
	if (late)
		*signo = late;
	return again;
}

/*
 * HoldingStart
 *		A fresh holding state for the lease or group opt names, connected;
 *		false if the server cannot be reached.  It first looks whether
 *		dsync is there at all (probe.c), once, at the start: where it is
 *		not, lock and elect exit 78 with the same line as status, and the
 *		server logs no ERROR from a dsync function that does not exist.
 *		The probe's schema, kept in h, then names every dsync function
 *		the command calls (SchemaSql), whatever the search_path.
 */
static bool
HoldingStart(Holding *h, const Options *opt)
{
	memset(h, 0, sizeof(*h));
	h->opt = opt;
	h->lease = opt->name;
	h->child = -1;
	h->kill_at = -1;
	h->conn = Connect(opt, false);
	if (h->conn == NULL)
		return false;
	RequireDsync(h->conn, &h->probe, NowMs() + DEFAULT_TIMEOUT_MS, 0);
	h->queue = CheckPooler(opt, h->conn, false) && !opt->no_queue &&
		QueueListen(h->conn, &h->probe) > 0;
	return true;
}

/*
 * CommandLock
 *		dsync lock: run the command under the lease.
 */
int
CommandLock(Options *opt)
{
	Holding		h;
	char	   *token;
	int			signo;
	bool		refused;

	if (!HoldingStart(&h, opt))
		return EXIT_UNAVAILABLE;
	Note("holder %s", opt->holder);

	if (opt->permits > 1)
	{
		char		permits[16];
		const char *params[2] = {opt->name, permits};
		PGresult   *res;
		char	   *sql;
		bool		timed_out;

		snprintf(permits, sizeof(permits), "%d", opt->permits);
		sql = SchemaSql(h.conn, &h.probe, "SELECT @extschema@.dsync_semaphore_create($1, $2::int)");
		res = Query(h.conn, sql, 2, params, -1, NULL, NULL, &timed_out);
		free(sql);
		if (res == NULL || PQresultStatus(res) != PGRES_TUPLES_OK)
			FatalResult("could not create the semaphore", h.conn, res);
		PQclear(res);
	}

	token = NULL;
	signo = 0;
	refused = !h.queue || opt->wait_ms == 0;
	if (!refused)
	{
		token = QueueAcquire(h.conn, opt, opt->name, opt->wait_ms, &h, &signo, NULL, false,
							 &refused);
		h.queue = !refused;
		if (token && opt->info && !signo)
			token = AcquireInfo(h.conn, opt, &h, token, &signo, NULL);
	}
	if (refused)
		token = Acquire(h.conn, opt, opt->name, opt->wait_ms, &h, &signo, NULL);
	if (signo)
	{
		Note("interrupted while waiting for \"%s\"", opt->name);
		if (token)
			Release(&h, NULL);	/* granted just as we gave up */
		return 128 + signo;
	}
	if (token == NULL)
	{
		Note("could not get \"%s\" within the wait", opt->name);
		return EXIT_TEMPFAIL;
	}
	Note("acquired \"%s\" (fencing token %s)", opt->name, token);

	StartChild(&h, token);
	HoldWhileRunning(&h, NULL);
	/* Also after a stop for failed renewals: if we still hold it, let go. */
	Release(&h, NULL);
	if (h.conn)
		PQfinish(h.conn);
	if (h.lost)
	{
		Note("the command was stopped because the lease was lost");
		return EXIT_LEASE_LOST;
	}
	return ChildExitCode(h.status);
}

/*
 * Join
 *		Join (or refresh membership of) the group.  False if the server
 *		could not be reached.
 */
static bool
Join(Holding *h)
{
	char		ttl[64];
	const char *params[4] = {h->lease, h->opt->holder, NULL, h->opt->info};
	PGresult   *res;
	char	   *sql;
	bool		timed_out;
	bool		ok;

	params[2] = IntervalParam(h->opt->ttl_ms, ttl, sizeof(ttl));
	sql = SchemaSql(h->conn, &h->probe,
					"SELECT @extschema@.dsync_join($1, $2, $3::interval, $4::pg_catalog.jsonb)");
	res = Query(h->conn, sql, 4, params, NowMs() + 10000, HoldingSignal, h, &timed_out);
	free(sql);
	ok = res != NULL && PQresultStatus(res) == PGRES_TUPLES_OK;
	if (res && !ok)
		FatalResult("could not join the group", h->conn, res);
	if (res)
		PQclear(res);
	return ok;
}

/*
 * CommandElect
 *		dsync elect: campaign, run the command while leader, campaign again
 *		after losing leadership; exit when the command exits by itself.
 */
int
CommandElect(Options *opt)
{
	Holding		h;

	if (!HoldingStart(&h, opt))
		return EXIT_UNAVAILABLE;
	Note("candidate %s in group \"%s\"", opt->holder, opt->name);

	for (;;)
	{
		char	   *token = NULL;
		int			signo = 0;
		bool		conn_lost = false;
		bool		refused;
		int			listened;

		/* Campaign a third of the ttl at a time: in line, or blocked in the server. */
		while (token == NULL)
		{
			if (h.conn == NULL || PQstatus(h.conn) != CONNECTION_OK)
			{
				if (h.conn)
					PQfinish(h.conn);
				h.conn = Connect(opt, true);
				if (h.conn == NULL)
				{
					sleep(1);
					if ((signo = ReadSignal()) != 0 && signo != SIGCHLD)
						return 128 + signo;
					continue;
				}
				if (h.queue && (listened = QueueListen(h.conn, &h.probe)) <= 0)
				{
					if (listened == 0)
						h.queue = false;	/* no dsync_queue there */
					else
					{
						PQfinish(h.conn);	/* the connection failed: again */
						h.conn = NULL;
						continue;
					}
				}
			}
			if (!Join(&h))
				continue;
			if (h.stop_signal)
			{
				Release(&h, opt->name);
				return 128 + h.stop_signal;
			}
			/* In line, the place is kept from one slice to the next. */
			refused = !h.queue;
			if (!refused)
			{
				token = QueueAcquire(h.conn, opt, opt->name, opt->ttl_ms / 3, &h, &signo,
									 &conn_lost, true, &refused);
				h.queue = !refused;
				if (token && opt->info && !signo)
					token = AcquireInfo(h.conn, opt, &h, token, &signo, &conn_lost);
			}
			if (refused)
				token = Acquire(h.conn, opt, opt->name, opt->ttl_ms / 3, &h, &signo,
								&conn_lost);
			if (signo)
			{
				if (token)
					free(token);
				Release(&h, opt->name);
				return 128 + signo;
			}
			if (conn_lost)
			{
				/* Reconnect and campaign again (the loop above). */
				PQfinish(h.conn);
				h.conn = NULL;
				conn_lost = false;
			}
		}

		Note("leader of \"%s\" (fencing token %s)", opt->name, token);
		StartChild(&h, token);
		free(token);
		HoldWhileRunning(&h, opt->name);
		if (!h.lost)
		{
			Release(&h, opt->name);
			if (h.conn)
				PQfinish(h.conn);
			return ChildExitCode(h.status);
		}
		if (h.stop_signal)
		{
			/* Asked to stop while the command was being stopped. */
			Release(&h, opt->name);
			return 128 + h.stop_signal;
		}
		Note("no longer leader of \"%s\"; campaigning again", opt->name);
		h.renew_at = 0;
	}
}
