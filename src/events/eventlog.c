/*-------------------------------------------------------------------------
 *
 * eventlog.c
 *		The retained event log: every notification the reaper sends, kept
 *		for dsync.event_retention so that watchers can catch up.
 *
 * NOTIFY reaches only those listening when it is sent: a watcher that
 * reconnects (a network blip, a failover, a restart of its own) has missed
 * whatever happened meanwhile.  So the reaper also writes every event it
 * sends to dsync_event_log, in a transaction that commits, durably, just
 * before the one that sends them: a listener never receives an event the
 * log does not have (a crash in between leaves events logged but not
 * sent, which watchers find when they catch up).  A watcher resumes with
 * dsync_events_since(last seq seen), and dsync_events_horizon() tells it
 * whether events it has not seen were already pruned.
 *
 * The log runs while someone listens in the database (events.c,
 * DsyncEventsHeard), for dsync.event_retention after the last listener
 * left (a watcher may be reconnecting), and after a start, crash restart
 * or promotion if the log was written to within that time
 * (DsyncEventLogResume): a database nobody watches pays nothing for it.
 *
 * Rows go in with one statement per batch of notifications.  Pruning runs
 * at most once a second, deletes what is older than the retention but the
 * newest of those events, and records the greatest seq it deleted in the
 * sequence dsync_event_pruned: that record is the horizon, so numbers that
 * were skipped (a reaper's start moves the sequence up) are never taken
 * for pruned events.  The reaper prunes only when it sends, so a quiet
 * database keeps its last events for longer.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "catalog.h"
#include "dbslot.h"
#include "events.h"
#include "settings.h"
#include "sqlexec.h"

/* How often the log is pruned, at most. */
#define EVENT_LOG_PRUNE_MS	1000

static TimestampTz eventlog_pruned_at = 0;

/*
 * EventLogTable
 *		The log's schema-qualified name, or NULL if this installation has
 *		none (not yet updated to 1.4).
 */
static char *
EventLogTable(void)
{
	const DsyncCatalog *catalog = DsyncCatalogFromExtension();

	if (!OidIsValid(catalog->event_log))
		return NULL;
	return quote_qualified_identifier(get_namespace_name(catalog->namespace),
									  "dsync_event_log");
}

/*
 * EventLogArray
 *		A one-dimensional array of the given element type.
 */
static Datum
EventLogArray(Datum *elems, int n, Oid elemtype)
{
	int16		typlen;
	bool		typbyval;
	char		typalign;

	get_typlenbyvalalign(elemtype, &typlen, &typbyval, &typalign);
	return PointerGetDatum(construct_array(elems, n, elemtype, typlen, typbyval, typalign));
}

/*
 * EventLogPrune
 *		Delete what is older than the retention, except the newest of those
 *		events, and record the greatest seq deleted in dsync_event_pruned:
 *		that is the horizon (dsync_events_horizon).
 *
 * 1.4 took the horizon to be one below the oldest row.  Seqs jump when a
 * reaper hands out its first number (the sequence is moved up to the
 * clock, reaper.c), so on a log that was empty, or whose rows were all
 * pruned, the first event raised that horizon past numbers nobody was
 * ever given: a watcher that had seen everything was told it had missed
 * events, and was given the state instead of what it missed.  The newest
 * expired event is still kept, so that a 1.4 catalog (no record yet)
 * keeps its horizon too.
 */
static void
EventLogPrune(const char *table)
{
	StringInfoData sql;
	Datum		args[2];
	Oid			argtypes[2] = {TIMESTAMPTZOID, REGCLASSOID};
	TimestampTz now = GetCurrentTimestamp();
	Oid			pruned = DsyncCatalogFromExtension()->event_pruned;
	int			ret;

	if (eventlog_pruned_at != 0 &&
		!TimestampDifferenceExceeds(eventlog_pruned_at, now, EVENT_LOG_PRUNE_MS))
		return;
	eventlog_pruned_at = now;

	/*
	 * The first event within the retention is found along the key, as rows
	 * went in, and the one before it by one step back along the key: no
	 * scan of the events within the retention.  Every name is qualified:
	 * the reaper is a superuser, and a function or operator a user put
	 * earlier in its search_path must not run as one.  With no retention
	 * nothing is kept, not even the newest event.  The record never goes
	 * down (GREATEST): events whose NOTIFY failed are logged again later,
	 * and may be pruned after newer ones were.
	 */
	initStringInfo(&sql);
	if (OidIsValid(pruned))
		appendStringInfoString(&sql, "WITH d AS (");
	if (dsync_event_retention == 0)
		appendStringInfo(&sql, "DELETE FROM %s WHERE $1 IS NOT NULL", table);
	else
		appendStringInfo(&sql,
						 "DELETE FROM %s WHERE seq OPERATOR(pg_catalog.<) "
						 "(SELECT pg_catalog.max(seq) FROM %s WHERE seq OPERATOR(pg_catalog.<) "
						 "COALESCE((SELECT seq FROM %s WHERE sent_at OPERATOR(pg_catalog.>=) $1 "
						 "ORDER BY seq LIMIT 1), 9223372036854775807))",
						 table, table, table);
	if (OidIsValid(pruned))
		appendStringInfoString(&sql,
							   " RETURNING seq) SELECT pg_catalog.setval($2, GREATEST(m, "
							   "COALESCE(pg_catalog.pg_sequence_last_value($2), 0))) "
							   "FROM (SELECT pg_catalog.max(seq) AS m FROM d) AS x "
							   "WHERE m IS NOT NULL");
	args[0] = TimestampTzGetDatum(TimestampTzPlusMilliseconds(now,
															  -(int64) dsync_event_retention * 1000));
	args[1] = ObjectIdGetDatum(pruned);
	ret = SPI_execute_with_args(sql.data, OidIsValid(pruned) ? 2 : 1, argtypes, args, NULL,
								false, 0);
	DsyncSqlCheck(ret, OidIsValid(pruned) ? SPI_OK_SELECT : SPI_OK_DELETE,
				  "prune its event log");
	pfree(sql.data);
}

/*
 * EventLogNotKept
 *		With no retention, events are sent but not logged: record the
 *		greatest of their seqs as pruned, before they are sent, so that a
 *		watcher resuming from an earlier seq is told it missed them.  In
 *		DsyncEventLogAppend's SPI connection.
 */
static void
EventLogNotKept(List *events)
{
	Oid			pruned = DsyncCatalogFromExtension()->event_pruned;
	int64		greatest = 0;
	ListCell   *lc;
	Datum		args[2];
	Oid			argtypes[2] = {REGCLASSOID, INT8OID};

	foreach(lc, events)
		greatest = Max(greatest, ((DsyncEvent *) lfirst(lc))->seq);
	if (!OidIsValid(pruned) || greatest <= 0)
		return;
	args[0] = ObjectIdGetDatum(pruned);
	args[1] = Int64GetDatum(greatest);
	DsyncSqlCheck(SPI_execute_with_args("SELECT pg_catalog.setval($1, GREATEST($2, "
										"COALESCE(pg_catalog.pg_sequence_last_value($1), 0)))",
										2, argtypes, args, NULL, false, 0),
				  SPI_OK_SELECT, "record what its event log does not keep");
}

/*
 * DsyncEventLogResume
 *		A worker that starts serving the database (after a start, a crash
 *		restart or a promotion, or after leaving it idle).  A new slot
 *		assumes a watcher may be reconnecting (DsyncDbSlotClaim) and keeps
 *		the log running for dsync.event_retention: that stands if the log
 *		was ever used here, since a quiet watcher leaves no trace in it, and
 *		is withdrawn if the log is empty.  A later leave time, recorded by a
 *		watcher leaving meanwhile, is never lowered.  In a transaction.
 */
void
DsyncEventLogResume(void)
{
	char	   *table;
	bool		used = false;
	DsyncDbSlot *slot;
	uint64		placeholder;

	if (OidIsValid(get_extension_oid("dsync", true)) && (table = EventLogTable()) != NULL)
	{
		DsyncSqlConnect("read its event log");
		DsyncSqlCheck(SPI_execute(psprintf("SELECT FROM %s LIMIT 1", table), true, 1),
					  SPI_OK_SELECT, "read its event log");
		used = SPI_processed > 0;
		SPI_finish();
	}
	slot = DsyncDbSlotFind(MyDatabaseId);
	if (slot == NULL || used)
		return;
	placeholder = slot->left_placeholder;
	if (placeholder != 0)
		(void) pg_atomic_compare_exchange_u64(&slot->watcher_left_at, &placeholder, 0);
}

/*
 * DsyncEventLogAppend
 *		Write the events about to be sent, which have their numbers, to the
 *		log (once: a retry after a failed NOTIFY writes nothing again), and
 *		prune it.  In the reaper's logging transaction (ReaperLogUnsent).
 */
void
DsyncEventLogAppend(List *events)
{
	char	   *table;
	StringInfoData sql;
	Datum	   *seqs;
	Datum	   *names;
	Datum	   *channels;
	Datum	   *payloads;
	Datum		args[4];
	Oid			argtypes[4] = {INT8ARRAYOID, TEXTARRAYOID, TEXTARRAYOID, TEXTARRAYOID};
	int			n = 0;
	ListCell   *lc;

	if (!OidIsValid(get_extension_oid("dsync", true)) || (table = EventLogTable()) == NULL)
		return;

	seqs = palloc(sizeof(Datum) * list_length(events));
	names = palloc(sizeof(Datum) * list_length(events));
	channels = palloc(sizeof(Datum) * list_length(events));
	payloads = palloc(sizeof(Datum) * list_length(events));
	if (dsync_event_retention > 0)
	{
		foreach(lc, events)
		{
			DsyncEvent *event = lfirst(lc);
			char	   *payload = DsyncEventPayload(event);

			if (payload == NULL)
				continue;
			seqs[n] = Int64GetDatum(event->seq);
			names[n] = CStringGetTextDatum(event->name);
			channels[n] = CStringGetTextDatum(DsyncEventChannel(event->name));
			payloads[n] = CStringGetTextDatum(payload);
			n++;
		}
	}

	DsyncSqlConnect("write its event log");
	PushActiveSnapshot(GetTransactionSnapshot());
	if (dsync_event_retention == 0)
		EventLogNotKept(events);
	if (n > 0)
	{
		initStringInfo(&sql);
		appendStringInfo(&sql,
						 "INSERT INTO %s (seq, name, channel, payload, sent_at) "
						 "SELECT s, n, c, p::pg_catalog.jsonb, pg_catalog.now() "
						 "FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2), "
						 "pg_catalog.unnest($3), pg_catalog.unnest($4)) AS e(s, n, c, p) "
						 "ON CONFLICT (seq) DO NOTHING",
						 table);
		args[0] = EventLogArray(seqs, n, INT8OID);
		args[1] = EventLogArray(names, n, TEXTOID);
		args[2] = EventLogArray(channels, n, TEXTOID);
		args[3] = EventLogArray(payloads, n, TEXTOID);
		DsyncSqlCheck(SPI_execute_with_args(sql.data, 4, argtypes, args, NULL, false, 0),
					  SPI_OK_INSERT, "write its event log");
		pfree(sql.data);
	}
	EventLogPrune(table);
	PopActiveSnapshot();
	SPI_finish();
}
