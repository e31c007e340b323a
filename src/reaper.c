/*-------------------------------------------------------------------------
 *
 * reaper.c
 *		The per-database reaper: clears expired leases at the moment they
 *		expire and announces lease events with NOTIFY.
 *
 * The reaper keeps every lease deadline it knows of in a pairing heap
 * (keyed by lease name and permit slot, so each has one entry).  It reads
 * them from the table once when it starts (also after promotion or a
 * crash), and from then on only from its database's event queue, where
 * every committed grant is put (events.c).  Renewals only push deadlines
 * later, so they need not be queued: when a deadline comes, the reaper
 * looks the lease up by its primary key and, if it was renewed, files it
 * under its new expiry.  The work of a pass is therefore proportional to
 * the leases that are due, not to all leases, and the reaper sleeps until
 * exactly the next deadline, never polling.
 *
 * An expired lease's row is deleted in one transaction; its "expired"
 * event is sent in another.  NOTIFY can fail (the notification queue is
 * full when a listener stops reading), and that must never undo or block
 * the cleanup, which also wakes in-server waiters.  Events whose NOTIFY
 * failed are kept and sent again later, oldest first; if too many pile
 * up, the oldest are dropped with a warning.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_database.h"
#include "commands/async.h"
#include "commands/extension.h"
#include "lib/pairingheap.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lmgr.h"
#include "storage/lock.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "dsync.h"

PG_FUNCTION_INFO_V1(dsync_reap);

/* Events kept after a failed NOTIFY before the oldest are dropped. */
#define DSYNC_MAX_UNSENT		1000000

/* How long to wait before looking again at a lease someone has locked. */
#define DSYNC_BUSY_RETRY_MS		100

/* How long to wait before sending again after NOTIFY failed. */
#define DSYNC_NOTIFY_RETRY_MS	1000

/* How long to wait before sending again when the notify lock is busy. */
#define DSYNC_NOTIFY_BUSY_MS	10

/* The longest the reaper sleeps in one go (a safety net for clock jumps). */
#define DSYNC_REAPER_SLEEP_CAP_MS	60000

/* What the reaper watches: a lease permit, or a group member. */
typedef enum ReaperKind
{
	REAPER_LEASE,
	REAPER_MEMBER
} ReaperKind;

typedef struct ReaperKey
{
	int32		kind;			/* ReaperKind */
	int32		slot;			/* permit slot of a lease */
	char		name[DSYNC_NAME_MAX_BYTES + 1]; /* lease or group */
	char		member[DSYNC_NAME_MAX_BYTES + 1];	/* member of a group */
} ReaperKey;

typedef struct ReaperEntry
{
	ReaperKey	key;			/* hash key: must be first */
	TimestampTz deadline;
	pairingheap_node node;
} ReaperEntry;

static HTAB *reaper_deadlines = NULL;
static pairingheap *reaper_heap = NULL;
static List *reaper_unsent = NIL;	/* DsyncEvent *, in reaper_unsent_cxt */
static MemoryContext reaper_unsent_cxt = NULL;
static MemoryContext reaper_loop_cxt = NULL;	/* reset every time round */
static TimestampTz reaper_notify_retry = 0;
static DsyncDbSlot *reaper_slot = NULL;

/*
 * ReaperCompare
 *		Pairing heap order: the earliest deadline first.
 */
static int
ReaperCompare(const pairingheap_node *a, const pairingheap_node *b, void *arg)
{
	const ReaperEntry *ea = pairingheap_const_container(ReaperEntry, node, a);
	const ReaperEntry *eb = pairingheap_const_container(ReaperEntry, node, b);

	if (ea->deadline < eb->deadline)
		return 1;
	if (ea->deadline > eb->deadline)
		return -1;
	return 0;
}

/*
 * ReaperReset
 *		Start with no deadlines.
 */
static void
ReaperReset(void)
{
	HASHCTL		ctl;

	if (reaper_deadlines)
		hash_destroy(reaper_deadlines);
	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = sizeof(ReaperKey);
	ctl.entrysize = sizeof(ReaperEntry);
	ctl.hcxt = TopMemoryContext;
	reaper_deadlines = hash_create("dsync reaper deadlines", 1024, &ctl,
								   HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	if (reaper_heap == NULL)
	{
		MemoryContext oldcontext = MemoryContextSwitchTo(TopMemoryContext);

		reaper_heap = pairingheap_allocate(ReaperCompare, NULL);
		MemoryContextSwitchTo(oldcontext);
	}
	else
		pairingheap_reset(reaper_heap);
}

/*
 * ReaperKindOf
 *		What an event with a deadline is about.
 */
static ReaperKind
ReaperKindOf(DsyncEventKind kind)
{
	return (kind == DSYNC_EVENT_JOINED || kind == DSYNC_EVENT_MEMBER_DEADLINE) ?
		REAPER_MEMBER : REAPER_LEASE;
}

/*
 * ReaperSchedule
 *		Make sure a lease permit or member is looked at no later than
 *		deadline.
 */
static void
ReaperSchedule(ReaperKind kind, const char *name, const char *member, int32 slot,
			   TimestampTz deadline)
{
	ReaperKey	key;
	ReaperEntry *entry;
	bool		found;

	memset(&key, 0, sizeof(key));
	key.kind = kind;
	strlcpy(key.name, name, sizeof(key.name));
	if (kind == REAPER_MEMBER)
		strlcpy(key.member, member, sizeof(key.member));
	else
		key.slot = slot;
	entry = hash_search(reaper_deadlines, &key, HASH_ENTER, &found);
	if (found)
	{
		if (entry->deadline <= deadline)
			return;
		pairingheap_remove(reaper_heap, &entry->node);
	}
	entry->deadline = deadline;
	pairingheap_add(reaper_heap, &entry->node);
}

/*
 * ReaperNextDeadline
 *		The earliest deadline, or 0 if there is none.
 */
static TimestampTz
ReaperNextDeadline(void)
{
	if (pairingheap_is_empty(reaper_heap))
		return 0;
	return pairingheap_container(ReaperEntry, node,
								 pairingheap_first(reaper_heap))->deadline;
}

/*
 * ReaperExtensionPresent
 *		Whether this database still has the extension.  In a transaction.
 */
static bool
ReaperExtensionPresent(void)
{
	return OidIsValid(get_extension_oid("dsync", true));
}

/*
 * ReaperRebuild
 *		Read every held lease's deadline from the table.  In a transaction.
 */
static void
ReaperRebuild(void)
{
	const DsyncCatalog *catalog = DsyncCatalogFromExtension();
	DsyncStore	store;
	List	   *rows;
	ListCell   *lc;

	ReaperReset();
	DsyncStoreOpenCatalog(&store, catalog, DSYNC_TABLE_LEASE, false);
	rows = DsyncStoreScanAll(&store);
	foreach(lc, rows)
	{
		DsyncLeaseRow *row = lfirst(lc);

		if (row->nulls[Anum_lease_holder - 1] || row->nulls[Anum_lease_expires_at - 1])
			continue;
		ReaperSchedule(REAPER_LEASE, TextDatumGetCString(row->values[Anum_lease_name - 1]),
					   NULL, DatumGetInt32(row->values[Anum_lease_slot - 1]),
					   DatumGetTimestampTz(row->values[Anum_lease_expires_at - 1]));
	}
	DsyncStoreClose(&store);

	if (!OidIsValid(catalog->rels[DSYNC_TABLE_MEMBER]))
		return;
	DsyncStoreOpenCatalog(&store, catalog, DSYNC_TABLE_MEMBER, false);
	rows = DsyncStoreScanAll(&store);
	foreach(lc, rows)
	{
		DsyncLeaseRow *row = lfirst(lc);

		ReaperSchedule(REAPER_MEMBER, TextDatumGetCString(row->values[Anum_member_grp - 1]),
					   TextDatumGetCString(row->values[Anum_member_member - 1]), 0,
					   DatumGetTimestampTz(row->values[Anum_member_expires_at - 1]));
	}
	DsyncStoreClose(&store);
}

/*
 * ReaperKeepUnsent
 *		Add events to those waiting to be sent.
 */
static void
ReaperKeepUnsent(List *events)
{
	MemoryContext oldcontext = MemoryContextSwitchTo(reaper_unsent_cxt);
	ListCell   *lc;

	foreach(lc, events)
	{
		DsyncEvent *src = lfirst(lc);
		DsyncEvent *copy = palloc(sizeof(DsyncEvent));

		*copy = *src;
		copy->name = pstrdup(src->name);
		copy->holder = pstrdup(src->holder);
		reaper_unsent = lappend(reaper_unsent, copy);
	}
	if (list_length(reaper_unsent) > DSYNC_MAX_UNSENT)
	{
		int			excess = list_length(reaper_unsent) - DSYNC_MAX_UNSENT;

		ereport(WARNING,
				(errmsg("dsync dropped %d lease events that could not be sent", excess)));
		for (int i = 0; i < excess; i++)
		{
			DsyncEvent *old = list_nth(reaper_unsent, i);

			pfree(old->name);
			pfree(old->holder);
			pfree(old);
		}
		reaper_unsent = list_delete_first_n(reaper_unsent, excess);
	}
	MemoryContextSwitchTo(oldcontext);
}

/*
 * ReaperDrainQueue
 *		Take the queued events: note their deadlines and keep the ones to
 *		announce.
 */
static void
ReaperDrainQueue(void)
{
	List	   *events = NIL;
	List	   *announce = NIL;
	uint64		dropped;
	ListCell   *lc;
	MemoryContext oldcontext = MemoryContextSwitchTo(reaper_loop_cxt);

	DsyncEventDrain(reaper_slot, &events, &dropped);
	foreach(lc, events)
	{
		DsyncEvent *event = lfirst(lc);

		if (DsyncEventHasDeadline(event->kind))
			ReaperSchedule(ReaperKindOf(event->kind), event->name, event->holder,
						   event->slot, event->expires_at);
		if (DsyncEventIsAnnounced(event->kind) && dsync_events)
			announce = lappend(announce, event);
	}
	if (announce != NIL)
		ReaperKeepUnsent(announce);
	MemoryContextSwitchTo(oldcontext);

	if (dropped > 0)
	{
		ereport(WARNING,
				(errmsg("dsync dropped " UINT64_FORMAT " lease events because the event queue was full",
						dropped),
				 errhint("Raise dsync.event_queue_size.  Expired leases are still cleared.")));
		StartTransactionCommand();
		PushActiveSnapshot(GetTransactionSnapshot());
		ReaperRebuild();
		PopActiveSnapshot();
		CommitTransactionCommand();
	}
}

/*
 * ReaperPublishXid
 *		Before the first row lock of a reap transaction: acquirers that
 *		meet our row locks wait for us (see DsyncStoreLock) instead of
 *		reporting a free lease busy.
 */
static void
ReaperPublishXid(void)
{
	if (!TransactionIdIsValid(reaper_slot->reaper_xid))
		reaper_slot->reaper_xid = GetCurrentTransactionId();
}

/*
 * ReaperLookAtLease
 *		A lease permit's deadline has come: clear it if it has expired.
 *		Returns when to look at it again (0: never) and sets *cleared if it
 *		deleted the lease (its "expired" event is queued at commit).
 */
static TimestampTz
ReaperLookAtLease(DsyncStore *store, const ReaperKey *key, TimestampTz now,
				  bool *cleared)
{
	List	   *rows = DsyncStoreScan(store, cstring_to_text(key->name));
	ListCell   *lc;
	DsyncLeaseRow *row = NULL;

	foreach(lc, rows)
	{
		DsyncLeaseRow *candidate = lfirst(lc);

		if (DatumGetInt32(candidate->values[Anum_lease_slot - 1]) == key->slot)
			row = candidate;
	}
	if (row == NULL || row->nulls[Anum_lease_holder - 1])
		return 0;
	if (DsyncRowIsLive(row, now))
		return DatumGetTimestampTz(row->values[Anum_lease_expires_at - 1]);

	ReaperPublishXid();
	switch (DsyncStoreLock(store, row, LockTupleExclusive, LockWaitSkip))
	{
		case TM_Ok:
			if (row->nulls[Anum_lease_holder - 1])
				return 0;
			if (DsyncRowIsLive(row, GetCurrentTimestamp()))
				return DatumGetTimestampTz(row->values[Anum_lease_expires_at - 1]);
			/*
			 * The event is queued at our commit, before our locks go.  An
			 * acquirer that takes the name next needs either the row lock
			 * (it waits for us) or the permit's insert lock, which we hold
			 * from here on: either way its "acquired" is queued after this
			 * "expired".
			 */
			if (!DsyncStoreInsertLock(DSYNC_TABLE_LEASE, DatumGetTextPP(row->values[Anum_lease_name - 1]),
									  key->slot, false))
				return TimestampTzPlusMilliseconds(now, DSYNC_BUSY_RETRY_MS);
			DsyncEventRecord(DSYNC_EVENT_EXPIRED, row);
			DsyncStoreDelete(store, row);
			*cleared = true;
			return 0;
		case TM_WouldBlock:
			/* Being taken over or guarded: look again soon. */
			return TimestampTzPlusMilliseconds(now, DSYNC_BUSY_RETRY_MS);
		default:
			/* Changed since we read it: look again now. */
			return now;
	}
}

/*
 * ReaperLookAtMember
 *		A group member's deadline has come: remove it if it has expired.
 *		Like ReaperLookAtLease.
 */
static TimestampTz
ReaperLookAtMember(DsyncStore *store, const ReaperKey *key, TimestampTz now,
				   bool *cleared)
{
	List	   *rows = DsyncStoreScan(store, cstring_to_text(key->name));
	ListCell   *lc;
	DsyncLeaseRow *row = NULL;
	TimestampTz expiry;

	foreach(lc, rows)
	{
		DsyncLeaseRow *candidate = lfirst(lc);

		if (strcmp(TextDatumGetCString(candidate->values[Anum_member_member - 1]),
				   key->member) == 0)
			row = candidate;
	}
	if (row == NULL)
		return 0;
	expiry = DatumGetTimestampTz(row->values[Anum_member_expires_at - 1]);
	if (expiry > now)
		return expiry;

	ReaperPublishXid();
	switch (DsyncStoreLock(store, row, LockTupleExclusive, LockWaitSkip))
	{
		case TM_Ok:
			expiry = DatumGetTimestampTz(row->values[Anum_member_expires_at - 1]);
			if (expiry > GetCurrentTimestamp())
				return expiry;
			DsyncEventRecordRaw(DSYNC_EVENT_MEMBER_EXPIRED,
								DatumGetTextPP(row->values[Anum_member_grp - 1]),
								DatumGetTextPP(row->values[Anum_member_member - 1]), expiry);
			DsyncStoreDelete(store, row);
			*cleared = true;
			return 0;
		case TM_WouldBlock:
			return TimestampTzPlusMilliseconds(now, DSYNC_BUSY_RETRY_MS);
		default:
			return now;
	}
}

/*
 * ReaperReapDue
 *		Clear up to dsync.reap_batch_size due leases and members in one
 *		transaction; their events go through the queue like everybody
 *		else's.  Returns how many it cleared, or -1 if the extension is
 *		gone.
 */
static int
ReaperReapDue(bool *more)
{
	const DsyncCatalog *catalog;
	DsyncStore	leases;
	DsyncStore	members;
	bool		has_members;
	int			cleared = 0;
	int			looked = 0;

	*more = false;
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	if (!ReaperExtensionPresent())
	{
		PopActiveSnapshot();
		CommitTransactionCommand();
		return -1;
	}
	catalog = DsyncCatalogFromExtension();
	DsyncStoreOpenCatalog(&leases, catalog, DSYNC_TABLE_LEASE, true);
	has_members = OidIsValid(catalog->rels[DSYNC_TABLE_MEMBER]);
	if (has_members)
		DsyncStoreOpenCatalog(&members, catalog, DSYNC_TABLE_MEMBER, true);

	while (!pairingheap_is_empty(reaper_heap))
	{
		ReaperEntry *entry = pairingheap_container(ReaperEntry, node,
												   pairingheap_first(reaper_heap));
		TimestampTz now = GetCurrentTimestamp();
		TimestampTz next = 0;
		bool		done = false;

		if (entry->deadline > now)
			break;
		if (looked++ >= dsync_reap_batch_size)
		{
			*more = true;
			break;
		}
		CHECK_FOR_INTERRUPTS();
		(void) pairingheap_remove_first(reaper_heap);

		if (entry->key.kind == REAPER_LEASE)
			next = ReaperLookAtLease(&leases, &entry->key, now, &done);
		else if (has_members)
			next = ReaperLookAtMember(&members, &entry->key, now, &done);
		if (done)
			cleared++;

		if (next != 0)
		{
			entry->deadline = next;
			pairingheap_add(reaper_heap, &entry->node);
		}
		else
			hash_search(reaper_deadlines, &entry->key, HASH_REMOVE, NULL);
	}

	if (has_members)
		DsyncStoreClose(&members);
	DsyncStoreClose(&leases);
	PopActiveSnapshot();
	CommitTransactionCommand();
	reaper_slot->reaper_xid = InvalidTransactionId;

	/* Our "expired" events are in the queue now, in commit order. */
	ReaperDrainQueue();
	return cleared;
}

/*
 * ReaperSendUnsent
 *		NOTIFY every kept event in one transaction.  On failure (a full
 *		notification queue) the events stay for a later try.
 */
static void
ReaperSendUnsent(void)
{
	MemoryContext oldcontext = CurrentMemoryContext;
	volatile bool sent = false;
	LOCKTAG		tag;

	if (reaper_unsent == NIL || GetCurrentTimestamp() < reaper_notify_retry)
		return;

	StartTransactionCommand();

	/*
	 * Commit of a notifying transaction waits for PostgreSQL's cluster-wide
	 * notify lock (async.c, PreCommit_Notify), which a stalled notifying
	 * commit elsewhere can hold for long.  Take it now without waiting, so
	 * that the reaper goes on clearing leases meanwhile and sends later.
	 */
	SET_LOCKTAG_OBJECT(tag, InvalidOid, DatabaseRelationId, InvalidOid, 0);
	if (LockAcquire(&tag, AccessExclusiveLock, false, true) == LOCKACQUIRE_NOT_AVAIL)
	{
		AbortCurrentTransaction();
		reaper_notify_retry = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
														  DSYNC_NOTIFY_BUSY_MS);
		return;
	}

	PG_TRY();
	{
		ListCell   *lc;

		foreach(lc, reaper_unsent)
		{
			DsyncEvent *event = lfirst(lc);
			char	   *payload = DsyncEventPayload(event);

			if (payload)
				Async_Notify(DsyncEventChannel(event->name), payload);
		}
		CommitTransactionCommand();
		sent = true;
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(oldcontext);
		EmitErrorReport();
		FlushErrorState();
		AbortCurrentTransaction();
		reaper_notify_retry = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
														  DSYNC_NOTIFY_RETRY_MS);
	}
	PG_END_TRY();

	if (sent)
	{
		reaper_unsent = NIL;
		MemoryContextReset(reaper_unsent_cxt);
	}
}

/*
 * ReaperExit
 *		Give the slot back and tell the launcher, whatever the reason.
 */
static void
ReaperExit(int code, Datum arg)
{
	DsyncDbSlot *slot = &dsync_workers->slots[DatumGetInt32(arg)];

	LWLockAcquire(dsync_workers->lock, LW_EXCLUSIVE);
	if (slot->pid == MyProcPid)
	{
		slot->pid = 0;
		slot->pgprocno = -1;
		slot->reaper_xid = InvalidTransactionId;
		slot->restart_after = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
														  dsync_restart_delay);
	}
	dsync_workers->rescan = dsync_workers->rescan || code != 0;
	LWLockRelease(dsync_workers->lock);
	DsyncLauncherWake();
}

/*
 * ReaperSetState
 *		Record what the reaper found in its database.
 */
static void
ReaperSetState(DsyncDbState state)
{
	LWLockAcquire(dsync_workers->lock, LW_EXCLUSIVE);
	reaper_slot->state = state;
	LWLockRelease(dsync_workers->lock);
	/* The launcher probes one database at a time: this one is done. */
	DsyncLauncherWake();
}

/*
 * ReaperClaimSlot
 *		Take the slot the launcher started us for; false if it is not
 *		ours to take (another reaper has it, or a statement holds the
 *		database).
 */
static bool
ReaperClaimSlot(int slotno, Oid dbid)
{
	DsyncDbSlot *slot = &dsync_workers->slots[slotno];
	bool		ok;

	LWLockAcquire(dsync_workers->lock, LW_EXCLUSIVE);
	ok = slot->dbid == dbid && slot->state != DSYNC_DB_FREE &&
		(slot->pid == 0 || slot->pid == -1) && slot->held_by == 0;
	if (ok)
	{
		slot->pid = MyProcPid;
		slot->pgprocno = MyProc->pgprocno;
		pg_atomic_write_u32(&slot->recheck, 0);
	}
	else if (slot->pid == -1)
		slot->pid = 0;
	LWLockRelease(dsync_workers->lock);
	reaper_slot = slot;
	return ok;
}

/*
 * dsync_reaper_main
 *		Connect, check for the extension, read deadlines, then loop:
 *		take queued events, clear due leases, send events, sleep until the
 *		next deadline or until woken.
 */
void
dsync_reaper_main(Datum arg)
{
	int			slotno = DatumGetInt32(arg);
	Oid			dbid;
	bool		present;

	memcpy(&dbid, MyBgworkerEntry->bgw_extra, sizeof(Oid));
	reaper_loop_cxt = AllocSetContextCreate(TopMemoryContext, "dsync reaper",
											ALLOCSET_DEFAULT_SIZES);
	reaper_unsent_cxt = AllocSetContextCreate(TopMemoryContext, "dsync unsent events",
											  ALLOCSET_DEFAULT_SIZES);
	pqsignal(SIGTERM, die);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	BackgroundWorkerUnblockSignals();

	if (!ReaperClaimSlot(slotno, dbid))
		proc_exit(0);
	before_shmem_exit(ReaperExit, Int32GetDatum(slotno));

	BackgroundWorkerInitializeConnectionByOid(dbid, InvalidOid, 0);

	/* Cleanup is redone after a crash; do not wait for WAL flushes. */
	SetConfigOption("synchronous_commit", "off", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("application_name", "dsync reaper", PGC_USERSET, PGC_S_OVERRIDE);

	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	present = ReaperExtensionPresent();
	if (present)
		ReaperRebuild();
	PopActiveSnapshot();
	CommitTransactionCommand();

	if (!present)
	{
		ReaperSetState(DSYNC_DB_ABSENT);
		proc_exit(0);
	}
	ReaperSetState(DSYNC_DB_ACTIVE);
	ereport(DEBUG1, (errmsg("dsync reaper started")));

	for (;;)
	{
		TimestampTz next;
		long		sleep_ms = -1;
		bool		more;
		bool		recheck;

		CHECK_FOR_INTERRUPTS();
		MemoryContextReset(reaper_loop_cxt);
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		recheck = pg_atomic_exchange_u32(&reaper_slot->recheck, 0) != 0;

		ReaperDrainQueue();
		do
		{
			more = false;
			next = ReaperNextDeadline();
			if ((recheck || (next != 0 && next <= GetCurrentTimestamp())) &&
				ReaperReapDue(&more) < 0)
			{
				/* DROP EXTENSION: nothing is left to look after here. */
				ReaperSetState(DSYNC_DB_ABSENT);
				proc_exit(0);
			}
			recheck = false;
			ReaperSendUnsent();
			MemoryContextReset(reaper_loop_cxt);
		} while (more);

		/*
		 * Say what we sleep until, then look at the queue once more: a
		 * backend that queued an event before this point compared its
		 * deadline with the old value and may not have woken us.
		 */
		next = ReaperNextDeadline();
		pg_atomic_write_u64(&reaper_slot->next_deadline, (uint64) next);
		LWLockAcquire(reaper_slot->queue_lock, LW_SHARED);
		if (reaper_slot->queue_head != reaper_slot->queue_tail)
			sleep_ms = 0;
		LWLockRelease(reaper_slot->queue_lock);
		if (next != 0 && sleep_ms != 0)
		{
			TimestampTz now = GetCurrentTimestamp();

			sleep_ms = next > now ? (long) ((next - now + 999) / 1000) : 0;
		}
		if (sleep_ms < 0 || sleep_ms > DSYNC_REAPER_SLEEP_CAP_MS)
			sleep_ms = DSYNC_REAPER_SLEEP_CAP_MS;
		if (reaper_unsent != NIL)
		{
			long		retry_ms = (long) ((reaper_notify_retry - GetCurrentTimestamp() + 999) / 1000);

			retry_ms = Max(retry_ms, 0);
			if (sleep_ms < 0 || retry_ms < sleep_ms)
				sleep_ms = retry_ms;
		}

		pgstat_report_activity(STATE_IDLE, NULL);
		(void) WaitLatch(MyLatch,
						 WL_LATCH_SET | WL_EXIT_ON_PM_DEATH |
						 (sleep_ms >= 0 ? WL_TIMEOUT : 0),
						 sleep_ms, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
}

/*
 * dsync_reap
 *		SQL: dsync_reap() RETURNS bigint
 *
 * A reap pass in the caller's transaction, over the whole tables: deletes
 * every expired lease and group member it can lock without waiting and
 * queues its event, which the reaper sends once this commits.  Not
 * granted to PUBLIC.
 */
Datum
dsync_reap(PG_FUNCTION_ARGS)
{
	DsyncStore	store;
	List	   *rows;
	ListCell   *lc;
	int64		cleared = 0;

	DsyncPreventWrite("dsync_reap()");

	DsyncStoreOpen(&store, fcinfo, true);
	rows = DsyncStoreScanAll(&store);
	foreach(lc, rows)
	{
		DsyncLeaseRow *row = lfirst(lc);

		CHECK_FOR_INTERRUPTS();
		if (row->nulls[Anum_lease_holder - 1] ||
			DsyncRowIsLive(row, GetCurrentTimestamp()))
			continue;
		if (DsyncStoreLock(&store, row, LockTupleExclusive, LockWaitSkip) != TM_Ok ||
			row->nulls[Anum_lease_holder - 1] ||
			DsyncRowIsLive(row, GetCurrentTimestamp()))
			continue;
		DsyncEventRecord(DSYNC_EVENT_EXPIRED, row);
		DsyncStoreDelete(&store, row);
		cleared++;
	}
	DsyncStoreClose(&store);

	if (!OidIsValid(DsyncCatalogGet(fcinfo)->rels[DSYNC_TABLE_MEMBER]))
		PG_RETURN_INT64(cleared);

	DsyncStoreOpenTable(&store, fcinfo, DSYNC_TABLE_MEMBER, true);
	rows = DsyncStoreScanAll(&store);
	foreach(lc, rows)
	{
		DsyncLeaseRow *row = lfirst(lc);

		CHECK_FOR_INTERRUPTS();
		if (DatumGetTimestampTz(row->values[Anum_member_expires_at - 1]) > GetCurrentTimestamp())
			continue;
		if (DsyncStoreLock(&store, row, LockTupleExclusive, LockWaitSkip) != TM_Ok ||
			DatumGetTimestampTz(row->values[Anum_member_expires_at - 1]) > GetCurrentTimestamp())
			continue;
		DsyncEventRecordRaw(DSYNC_EVENT_MEMBER_EXPIRED,
							DatumGetTextPP(row->values[Anum_member_grp - 1]),
							DatumGetTextPP(row->values[Anum_member_member - 1]),
							DatumGetTimestampTz(row->values[Anum_member_expires_at - 1]));
		DsyncStoreDelete(&store, row);
		cleared++;
	}
	DsyncStoreClose(&store);

	PG_RETURN_INT64(cleared);
}
