/*-------------------------------------------------------------------------
 *
 * settings.c
 *		dsync's settings (GUCs): their variables and their definitions.
 *
 * The variables live at the bottom layer because every layer reads them;
 * _PG_init (sql/dsync.c) calls DsyncDefineSettings once, at load.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>

#include "utils/guc.h"

#include "settings.h"

/* Settings; see DsyncDefineSettings for what each one is for. */
int			dsync_max_databases = 512;
int			dsync_event_queue_size = 16384;
int			dsync_reap_batch_size = 100;
int			dsync_restart_delay = 1000;
bool		dsync_events = true;
int			dsync_max_ttl = 86400;
int			dsync_idle_row_retention = 600;
int			dsync_deadlines_in_memory = 100000;
int			dsync_max_workers = 3;
int			dsync_worker_idle_timeout = 60000;
int			dsync_ephemeral_max_leases = 100000;
int			dsync_ephemeral_max_ttl = 60;
int			dsync_event_retention = 300;
int			dsync_max_queued_waiters = 10000;
int			dsync_claim_window = 2000;

/*
 * The integer settings, as a table: they differ only in their values.
 */
typedef struct DsyncIntSetting
{
	const char *name;
	const char *short_desc;
	const char *long_desc;
	int		   *variable;
	int			boot;
	int			min;
	int			max;
	GucContext	context;
	int			flags;
} DsyncIntSetting;

static const DsyncIntSetting dsync_int_settings[] = {
	{"dsync.max_databases",
		"Maximum number of databases dsync keeps track of.",
		"Every connectable database takes a slot (about 400 bytes of shared "
		"memory) so that dsync can look for the extension there; a database "
		"with the extension and no slot is not served, and its clients are "
		"warned.",
		&dsync_max_databases, 512, 1, 10000, PGC_POSTMASTER, 0},
	{"dsync.max_workers",
		"Maximum number of background worker slots dsync uses, its launcher included.",
		"The launcher takes one; the others serve databases, each in turn "
		"where work is due.  Count them in max_worker_processes.",
		&dsync_max_workers, 3, 2, 64, PGC_SIGHUP, 0},
	{"dsync.worker_idle_timeout",
		"Time after which a dsync worker with nothing to do leaves its database.",
		"It leaves only if nothing is due there within that time either; "
		"a worker comes back when a deadline comes or a lease changes "
		"(started on demand).  -1 keeps workers for as long as no other "
		"database needs them.",
		&dsync_worker_idle_timeout, 60000, -1, INT_MAX, PGC_SIGHUP, GUC_UNIT_MS},
	{"dsync.event_queue_size",
		"Shared memory for the queues of committed lease events of all databases.",
		"Committing transactions queue their events here and a worker sends "
		"them as notifications; if it is full, events are dropped (never the "
		"changes themselves) and a warning is logged.",
		&dsync_event_queue_size, 16384, 64, 2 * 1024 * 1024, PGC_POSTMASTER, GUC_UNIT_KB},
	{"dsync.reap_batch_size",
		"Maximum number of expired leases cleared in one reaper transaction.",
		"An acquirer that meets a row being cleared waits for that "
		"transaction, so keep it short.",
		&dsync_reap_batch_size, 100, 1, 10000, PGC_SIGHUP, 0},
	{"dsync.restart_delay",
		"Time before a stopped dsync reaper is started again.",
		NULL,
		&dsync_restart_delay, 1000, 0, 3600 * 1000, PGC_SIGHUP, GUC_UNIT_MS},
	{"dsync.max_ttl",
		"Longest time-to-live a lease or membership may be given.",
		"A caller asking for more gets an error; 0 means no limit.  "
		"Only superusers can change it, so that no role can hold a "
		"name for longer than administrators allow.",
		&dsync_max_ttl, 86400, 0, INT_MAX, PGC_SUSET, GUC_UNIT_S},
	{"dsync.idle_row_retention",
		"How long the row of a released lease is kept before the reaper removes it.",
		"Keeping it makes the next grant of a name in use a HOT update; "
		"removing it keeps names used once from piling up.  "
		"-1 keeps released rows for ever.",
		&dsync_idle_row_retention, 600, -1, INT_MAX, PGC_SIGHUP, GUC_UNIT_S},
	{"dsync.deadlines_in_memory",
		"Most lease, permit and member deadlines a dsync worker keeps in memory.",
		"It keeps the nearest ones and reads its tables again for the "
		"next ones when those are used up; about 150 bytes each.",
		&dsync_deadlines_in_memory, 100000, 100, 10000000, PGC_SIGHUP, 0},
	{"dsync.ephemeral_max_leases",
		"Most ephemeral leases (durable => false) held at once, in all databases.",
		"Each takes about 320 bytes of shared memory (its entry, and 160 bytes "
		"of the pool its name, holder and info are kept in); 0 turns "
		"ephemeral leases off.",
		&dsync_ephemeral_max_leases, 100000, 0, 50000000, PGC_POSTMASTER, 0},
	{"dsync.ephemeral_max_ttl",
		"Longest time-to-live an ephemeral lease may be given.",
		"Ephemeral leases are lost in a restart, crash or failover; for this "
		"long afterwards no ephemeral lease is granted, so that a holder from "
		"before cannot overlap a new one.  Do not lower it across a restart "
		"while ephemeral leases are held.",
		&dsync_ephemeral_max_ttl, 60, 1, 86400, PGC_POSTMASTER, GUC_UNIT_S},
	{"dsync.event_retention",
		"How long sent events are kept for watchers to catch up with dsync_events_since().",
		"The worker writes every event it sends to dsync_event_log and prunes "
		"what is older, keeping at least the newest.  0 keeps no new events.",
		&dsync_event_retention, 300, 0, 365 * 86400, PGC_SIGHUP, GUC_UNIT_S},
	{"dsync.max_queued_waiters",
		"Most waiters queued without a connection (dsync_queue) at once, in all databases.",
		"Each takes about 800 bytes of shared memory; 0 turns queueing off.",
		&dsync_max_queued_waiters, 10000, 0, 10000000, PGC_POSTMASTER, 0},
	{"dsync.claim_window",
		"How long a grant made to a queued waiter waits to be claimed before it passes on.",
		"A queued waiter that has gone costs the name at most this long.",
		&dsync_claim_window, 2000, 10, 3600000, PGC_SIGHUP, GUC_UNIT_MS},
};

/*
 * DsyncDefineSettings
 *		The dsync.* settings.  Those that size shared memory can only be
 *		set at server start; the rest take effect on reload.
 */
void
DsyncDefineSettings(void)
{
	for (size_t i = 0; i < lengthof(dsync_int_settings); i++)
	{
		const DsyncIntSetting *setting = &dsync_int_settings[i];

		DefineCustomIntVariable(setting->name, setting->short_desc, setting->long_desc,
								setting->variable, setting->boot, setting->min,
								setting->max, setting->context, setting->flags,
								NULL, NULL, NULL);
	}
	DefineCustomBoolVariable("dsync.events",
							 "Whether lease changes are announced with NOTIFY.",
							 "When off, the reaper still clears expired leases but sends "
							 "no notifications.",
							 &dsync_events, true,
							 PGC_SIGHUP, 0, NULL, NULL, NULL);
	MarkGUCPrefixReserved("dsync");
}
