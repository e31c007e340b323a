/*-------------------------------------------------------------------------
 *
 * reaper.c
 *		The per-database reaper: clears expired leases at the moment they
 *		expire (expiry.c) and announces every committed change with NOTIFY.
 *
 * Committing backends queue their events in shared memory (events.c); the
 * reaper takes them, notes the deadlines they carry, and sends them in one
 * transaction of its own, so that a busy lease path never waits for
 * PostgreSQL's notify lock.  It sleeps until exactly the next deadline, or
 * until a backend wakes it, never polling.
 *
 * Every notification carries "seq", a number per database that rises in
 * the order events are sent (commit order for each name) and keeps rising
 * across restarts and failovers: it comes from the sequence
 * dsync_event_seq, whose WAL is flushed before a notification that uses a
 * number is sent, and which each reaper moves up to the clock (in
 * microseconds) when it starts, in case the sequence lost its latest
 * numbers to an asynchronous failover.  Because
 * two payloads never repeat, PostgreSQL never merges two notifications of
 * one transaction (it drops duplicate channel and payload pairs), so each
 * committed change is exactly one notification.  Events that were lost
 * (dsync's queue was full) still use up their numbers, so a listener that
 * missed something sees a gap (a reaper's start makes one too).  NOTIFY can fail (the
 * notification queue is full when a listener stops reading), and that
 * must never undo or block the cleanup, which also wakes in-server
 * waiters: cleanup and sending are separate transactions.  Events whose
 * NOTIFY failed keep their numbers and are sent again later, oldest first;
 * if too many pile up, the oldest are dropped with a warning.
 *
 * The reaper is the only process that sends a database's events:
 * dsync_stats.sender_pid names it, so that a client can ignore a NOTIFY on
 * a dsync channel from anybody else.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/relation.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/pg_database.h"
#include "commands/async.h"
#include "commands/dbcommands.h"
#include "commands/extension.h"
#include "commands/sequence.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/bufmgr.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lmgr.h"
#include "storage/lock.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "lazycommit.h"
#include "reaper.h"
#include "settings.h"
#include "workers.h"
#include "queued.h"
#include "catalog.h"
#include "stats.h"
#include "dbslot.h"
#include "heldmap.h"
#include "events.h"
#include "fencing.h"
#include "ephemeral.h"
#include "lease.h"

/* Events kept after a failed NOTIFY before the oldest are dropped. */
#define DSYNC_MAX_UNSENT		1000000

/* How long to wait before sending again after NOTIFY failed. */
#define DSYNC_NOTIFY_RETRY_MS	1000

/* How long to wait before sending again when the notify lock is busy. */
#define DSYNC_NOTIFY_BUSY_MS	10

/*
 * After a pass that took events, how long to let more gather before the
 * next one: one NOTIFY transaction then carries a batch, and committers
 * queue events meanwhile without signalling the reaper (SetLatch sends
 * no signal to a process that is not waiting on its latch).  The first
 * event after a quiet spell goes out at once.
 */
#define DSYNC_EVENT_BATCH_MS	2

/*
 * The most events a pass over due deadlines gathers before it sends: the
 * pass reaps in batches of dsync.reap_batch_size, one transaction each, and
 * sends once at its end, since every NOTIFY transaction wakes every
 * backend listening in the database (async.c), and on a busy machine those
 * wake-ups held up the next batch: 500 leases expiring together with 500
 * listeners were announced over up to 95 ms, one batch of 100 at a time.
 * A pass longer than this, or than DSYNC_SEND_BATCH_MS, still sends as it
 * goes: the events of users' own grants and releases wait with the rest.
 */
#define DSYNC_SEND_BATCH_EVENTS	10000
#define DSYNC_SEND_BATCH_MS		100

/* The longest the reaper sleeps in one go (a safety net for clock jumps). */
#define DSYNC_REAPER_SLEEP_CAP_MS	60000

static List *reaper_unsent = NIL;	/* DsyncEvent *, in reaper_unsent_cxt */
static MemoryContext reaper_unsent_cxt = NULL;
static MemoryContext reaper_loop_cxt = NULL;	/* reset every time round */
static TimestampTz reaper_notify_retry = 0;
static DsyncDbSlot *reaper_slot = NULL;

/* The worker leaves of its own accord (made way, or idle): no failure. */
static bool reaper_leaving = false;

/* When the worker last had something to do. */
static TimestampTz busy_at = 0;

/* Numbers to skip before the next event: lost events keep theirs. */
static uint64 reaper_seq_skip = 0;

/* Without dsync_event_seq (not yet updated): numbers from memory. */
static int64 reaper_seq_local = 0;

/*
 * The event sequence this reaper has moved up to the clock (an extension
 * dropped and created again meanwhile has a new one).
 */
static Oid	reaper_seq_at_clock = InvalidOid;

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

			/* A numbered event keeps its number: the gap shows the loss. */
			if (old->seq == 0)
				reaper_seq_skip++;
			pfree(old->name);
			pfree(old->holder);
			pfree(old);
		}
		reaper_unsent = list_delete_first_n(reaper_unsent, excess);
		DsyncStatAddSlot(reaper_slot, DSYNC_STAT_EVENTS_LOST, excess);
	}
	MemoryContextSwitchTo(oldcontext);
}

/*
 * ReaperDrainQueue
 *		Take the queued events: note their deadlines and keep the ones to
 *		announce.  Returns how many are to be announced: only those make
 *		the worker busy and worth a pause for more to batch with.
 */
static int
ReaperDrainQueue(void)
{
	List	   *events = NIL;
	List	   *announce = NIL;
	uint64		dropped;
	uint64		dropped_announced;
	ListCell   *lc;
	MemoryContext oldcontext = MemoryContextSwitchTo(reaper_loop_cxt);

	int			n;

	(void) DsyncQueueDrain(reaper_slot, &events, &dropped, &dropped_announced);

	foreach(lc, events)
	{
		DsyncEvent *event = lfirst(lc);

		ExpiryScheduleEvent(event);
		if (DsyncEventIsAnnounced(event->kind) && dsync_events)
			announce = lappend(announce, event);
	}
	n = list_length(announce);
	if (announce != NIL)
		ReaperKeepUnsent(announce);
	MemoryContextSwitchTo(oldcontext);

	if (dropped > 0)
	{
		if (dsync_events)
		{
			reaper_seq_skip += dropped_announced;
			DsyncStatAddSlot(reaper_slot, DSYNC_STAT_EVENTS_LOST, dropped_announced);
		}
		ereport(WARNING,
				(errmsg("dsync dropped " UINT64_FORMAT " lease events because the event queue was full",
						dropped),
				 errhint("Raise dsync.event_queue_size.  Expired leases are still cleared.")));
		SetCurrentStatementStartTimestamp();
		StartTransactionCommand();
		PushActiveSnapshot(GetTransactionSnapshot());
		ExpiryRebuild();
		PopActiveSnapshot();
		CommitTransactionCommand();
	}
	return n;
}

/*
 * ReaperNextSeq
 *		The next event number, in the sending transaction.  The first one a
 *		reaper hands out is at least the clock's reading in microseconds:
 *		after a failover to an asynchronous standby that had not received
 *		the latest numbers, the sequence alone would hand them out again,
 *		and watchers, which skip what they have seen by seq, would drop
 *		those events.
 */
static int64
ReaperNextSeq(Oid seqoid)
{
	int64		seq;

	if (!OidIsValid(seqoid))
		return ++reaper_seq_local;
	if (reaper_seq_at_clock == seqoid)
		return nextval_internal(seqoid, false);
	seq = DsyncSequenceNextAtClock(seqoid);
	reaper_seq_at_clock = seqoid;
	return seq;
}

/*
 * ReaperNumber
 *		Give every kept event that has none its number, skipping the numbers
 *		of lost events first.  In the sending transaction; the numbers are
 *		kept even if it fails, so a retry sends the same ones.  Before
 *		anything is sent, the sequence's WAL is flushed, so that after a
 *		crash it never hands out a number a listener has already seen.
 */
static void
ReaperNumber(void)
{
	Oid			seqoid = InvalidOid;
	ListCell   *lc;
	bool		numbered = false;

	if (OidIsValid(get_extension_oid("dsync", true)))
		seqoid = DsyncCatalogFromExtension()->event_seq;
	for (; reaper_seq_skip > 0; reaper_seq_skip--)
	{
		(void) ReaperNextSeq(seqoid);
		numbered = true;
	}
	foreach(lc, reaper_unsent)
	{
		DsyncEvent *event = lfirst(lc);

		if (event->seq != 0)
			continue;
		event->seq = ReaperNextSeq(seqoid);
		numbered = true;
	}
	if (numbered && OidIsValid(seqoid))
	{
		Relation	seqrel = relation_open(seqoid, AccessShareLock);
		Buffer		buffer = ReadBuffer(seqrel, 0);

		XLogFlush(BufferGetLSNAtomic(buffer));
		ReleaseBuffer(buffer);
		relation_close(seqrel, AccessShareLock);
	}
}

/*
 * DsyncReaperTransaction
 *		Run step in a transaction of its own and commit it; a failure is
 *		logged and rolled back, never fatal to the worker.  True if it
 *		committed.
 *
 * Every transaction of the worker first sets the statement start time:
 * nothing else moves it on in a background worker, and now() would stay
 * at the worker's start, making the event log's sent_at wrong and its
 * pruning by age drop events it must keep.
 */
bool
DsyncReaperTransaction(void (*step) (void))
{
	MemoryContext oldcontext = CurrentMemoryContext;
	volatile bool committed = false;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PG_TRY();
	{
		step();
		CommitTransactionCommand();
		committed = true;
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(oldcontext);
		EmitErrorReport();
		FlushErrorState();
		AbortCurrentTransaction();
	}
	PG_END_TRY();
	MemoryContextSwitchTo(oldcontext);
	return committed;
}

/*
 * ReaperResume
 *		What a worker starting to serve the database takes over: release
 *		the session leases whose backends are gone (a crash, a promotion,
 *		an exit that could not clean up), and find out whether a watcher
 *		may be coming back for the event log.  In DsyncReaperTransaction: a
 *		failure leaves the leases to their ttl.
 */
static void
ReaperResume(void)
{
	PushActiveSnapshot(GetTransactionSnapshot());
	DsyncSessionSweep();
	DsyncEventLogResume();
	PopActiveSnapshot();
}

/*
 * ReaperLogUnsent
 *		Give the kept events their numbers and write them to the event log
 *		(eventlog.c), in a transaction of their own (DsyncReaperTransaction) that
 *		is durable before any of them is announced: a listener must never
 *		see an event that a crash or failover then takes out of the log,
 *		where others catch up.  It runs before the notify lock is taken, so
 *		that waiting for the flush (or for a synchronous standby) never
 *		holds up every other NOTIFY in the cluster.  Events logged but not
 *		sent (NOTIFY failed, or a crash came between) are logged again
 *		harmlessly when sent later, and a watcher that missed them catches
 *		up from the log.  The log's flush also carries the changes whose
 *		events these are, releases included, which commit without waiting
 *		for their own flush.  If it fails, nothing is sent.
 */
static void
ReaperLogUnsent(void)
{
	ReaperNumber();
	if (dsync_event_retention > 0)
		(void) set_config_option("synchronous_commit", "on", PGC_SUSET, PGC_S_OVERRIDE,
								 GUC_ACTION_LOCAL, true, 0, false);
	DsyncEventLogAppend(reaper_unsent);

	/*
	 * A release commits without waiting for its flush (lazycommit.c): its
	 * event must not be heard before the release is on disk.  With no log
	 * (retention 0), or nothing written to it (a version from before the
	 * log), this commit flushes nothing of its own, and numbering flushes
	 * far enough only usually; so flush everything inserted so far.
	 */
	if (dsync_event_retention <= 0 || !TransactionIdIsValid(GetTopTransactionIdIfAny()))
		DsyncLazyCommitFlushAll();
}

/*
 * ReaperSendUnsent
 *		NOTIFY every kept event in one transaction.  On failure (a full
 *		notification queue) the events stay, with their numbers, for a
 *		later try.
 */
static void
ReaperSendUnsent(void)
{
	MemoryContext oldcontext = CurrentMemoryContext;
	volatile bool sent = false;
	LOCKTAG		tag;
	int			count = list_length(reaper_unsent);

	if (reaper_unsent == NIL || GetCurrentTimestamp() < reaper_notify_retry)
		return;
	if (!DsyncReaperTransaction(ReaperLogUnsent))
	{
		reaper_notify_retry = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
														  DSYNC_NOTIFY_RETRY_MS);
		return;
	}

	SetCurrentStatementStartTimestamp();
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
		DsyncStatAddSlot(reaper_slot, DSYNC_STAT_EVENTS_SENT, count);
	}
}

/*
 * ReaperExit
 *		Give the slot back and tell the launcher, whatever the reason.  If
 *		events were queued meanwhile, the database needs a worker again
 *		(backends saw this one and did not ask the launcher).
 */
static void
ReaperExit(int code, Datum arg)
{
	DsyncDbSlot *slot = &dsync_workers->slots[DatumGetInt32(arg)];
	bool		queued;
	bool		dropped;

	/* An error may have left one held (an exit is no abort): we take them. */
	LWLockReleaseAll();
	LWLockAcquire(dsync_workers->lock, LW_EXCLUSIVE);
	if (slot->pid == MyProcPid)
	{
		slot->pid = 0;
		slot->pgprocno = -1;
		slot->serving_since = 0;
		slot->settled = false;
		slot->reaper_xid = InvalidTransactionId;
		DsyncDbSlotSenderEnd(slot, MyProcPid);
		pg_atomic_write_u32(&slot->yield, 0);
		/* Making way is no failure: come back as soon as work is due. */
		slot->restart_after = (reaper_leaving && code == 0) ? 0 :
			TimestampTzPlusMilliseconds(GetCurrentTimestamp(), dsync_restart_delay);
	}
	dsync_workers->rescan = dsync_workers->rescan || code != 0;
	LWLockRelease(dsync_workers->lock);

	queued = DsyncQueueBytes(slot, &dropped) > 0 || dropped;
	/* Also a worker that failed or was stopped comes back (after a delay). */
	if ((queued || code != 0) && slot->state == DSYNC_DB_ACTIVE)
		DsyncDbSlotWant(slot);
	DsyncLauncherWake();
}

/*
 * ReaperSetState
 *		Record what the worker found in its database.  A database without
 *		the extension keeps no queue.
 */
static void
ReaperSetState(DsyncDbState state)
{
	LWLockAcquire(dsync_workers->lock, LW_EXCLUSIVE);
	reaper_slot->state = state;
	LWLockRelease(dsync_workers->lock);
	if (state == DSYNC_DB_ABSENT)
	{
		DsyncQueueLockAll(reaper_slot);
		if (reaper_slot->state == DSYNC_DB_ABSENT)
			DsyncQueueReset(reaper_slot);
		DsyncQueueUnlockAll(reaper_slot);
		pg_atomic_write_u32(&reaper_slot->wanted, 0);
		pg_atomic_write_u64(&reaper_slot->next_deadline, 0);
	}
	DsyncLauncherWake();
}

/*
 * ReaperIdle
 *		Whether the worker has had nothing to do for
 *		dsync.worker_idle_timeout and nothing is due within that time
 *		either: then it leaves, giving its background worker slot back to
 *		the server (parallel query, other extensions), and the launcher
 *		starts a worker again when the next deadline comes or a backend
 *		queues events.
 */
static bool
ReaperIdle(TimestampTz next, TimestampTz now)
{
	if (dsync_worker_idle_timeout < 0)
		return false;
	if (now < TimestampTzPlusMilliseconds(busy_at, dsync_worker_idle_timeout))
		return false;
	/* A poke or an unclaimed grant is work (queuework.c). */
	if (DsyncQueuedWorkDue(now) || DsyncQueuedNextClaim(MyDatabaseId) != 0)
		return false;
	return next == 0 || next > TimestampTzPlusMilliseconds(now, dsync_worker_idle_timeout);
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

	reaper_slot = &dsync_workers->slots[slotno];
	if (!ReaperClaimSlot(reaper_slot, dbid))
		proc_exit(0);
	before_shmem_exit(ReaperExit, Int32GetDatum(slotno));
	ReaperConnect(dbid);

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	present = OidIsValid(get_extension_oid("dsync", true));
	if (present && DsyncDbIsTemplate(dbid))
	{
		ereport(LOG,
				(errmsg("dsync does not serve template database \"%s\"",
						get_database_name(dbid))));
		present = false;
	}
	if (present)
		ExpiryRebuild();
	PopActiveSnapshot();
	CommitTransactionCommand();

	if (!present)
	{
		ReaperSetState(DSYNC_DB_ABSENT);
		proc_exit(0);
	}

	(void) DsyncReaperTransaction(ReaperResume);

	ReaperSetState(DSYNC_DB_ACTIVE);
	ereport(DEBUG1, (errmsg("dsync reaper started")));

	busy_at = GetCurrentTimestamp();
	for (;;)
	{
		TimestampTz next;
		TimestampTz now;
		long		sleep_ms = -1;
		bool		more;
		bool		dropped;
		bool		recheck;
		int			drained;
		TimestampTz sent_at;	/* when this pass last sent */
		TimestampTz began;		/* when this pass began */
		uint64		reaped_seen;

		CHECK_FOR_INTERRUPTS();
		MemoryContextReset(reaper_loop_cxt);
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		recheck = pg_atomic_exchange_u32(&reaper_slot->recheck, 0) != 0;

		/* Before the queue is taken: see DsyncHeldMapReaped. */
		reaped_seen = DsyncHeldMapReapBegin(reaper_slot, &began);
		drained = ReaperDrainQueue();
		if (drained > 0)
			busy_at = GetCurrentTimestamp();
		/* Grants to queued waiters nobody else made (queuework.c). */
		DsyncQueueWork();
		sent_at = GetCurrentTimestamp();
		do
		{
			more = false;
			next = ExpiryNext();
			if (recheck || (next != 0 && next <= GetCurrentTimestamp()))
			{
				busy_at = GetCurrentTimestamp();
				if (ExpiryReapDue(reaper_slot, &more) < 0)
				{
					/* DROP EXTENSION: nothing is left to look after here. */
					ReaperSetState(DSYNC_DB_ABSENT);
					proc_exit(0);
				}
			}
			recheck = false;
			/* What it cleared is in the queue now, in commit order. */
			drained += ReaperDrainQueue();
			if (!more || list_length(reaper_unsent) >= DSYNC_SEND_BATCH_EVENTS ||
				TimestampDifferenceExceeds(sent_at, GetCurrentTimestamp(),
										   DSYNC_SEND_BATCH_MS))
			{
				ReaperSendUnsent();
				sent_at = GetCurrentTimestamp();
			}
			MemoryContextReset(reaper_loop_cxt);
		} while (more);

		/*
		 * Every holder due by the time the pass began is cleared and its
		 * expiry queued: ephemeral grants may skip the table for them.
		 */
		DsyncHeldMapReaped(reaper_slot, reaped_seen, ExpiryReapedUpTo(began));

		/*
		 * Say what we sleep until, then look at the queue once more: a
		 * backend that queued an event before this point compared its
		 * deadline with the old value and may not have woken us.
		 */
		next = DsyncQueueWorkNext(ExpiryNext());
		pg_atomic_write_u64(&reaper_slot->next_deadline, (uint64) next);
		/*
		 * A grant listed after that read of the claims compared its deadline
		 * with the slot's old one, and may not have woken us: read them
		 * again now that the slot says what we sleep until.
		 */
		pg_memory_barrier();
		{
			TimestampTz again = DsyncQueueWorkNext(next);

			if (again != 0 && (next == 0 || again < next))
			{
				next = again;
				pg_atomic_write_u64(&reaper_slot->next_deadline, (uint64) next);
			}
		}
		if (DsyncQueuedWorkDue(GetCurrentTimestamp()))
			sleep_ms = 0;
		if (DsyncQueueBytes(reaper_slot, &dropped) > 0 || dropped)
			sleep_ms = 0;
		/* Likewise an ephemeral deadline, which comes through the slot. */
		pg_memory_barrier();
		{
			TimestampTz ephemeral = DsyncEphemeralDue();

			if (ephemeral != 0 && (next == 0 || ephemeral < next))
				sleep_ms = 0;
		}

		/*
		 * The launcher wants this worker for a database with more urgent
		 * work: leave, once everything taken from the queue is sent (a
		 * NOTIFY that failed keeps it here), with the next deadline in the
		 * slot so that the launcher brings a worker back in time.
		 */
		/* First pass done: from now on the launcher may ask us to make way. */
		if (!reaper_slot->settled && sleep_ms != 0)
		{
			ReaperFillMaps(reaper_slot);
			LWLockAcquire(dsync_workers->lock, LW_EXCLUSIVE);
			reaper_slot->settled = true;
			LWLockRelease(dsync_workers->lock);
			DsyncLauncherWake();
		}
		now = GetCurrentTimestamp();
		if (sleep_ms != 0 && reaper_unsent == NIL &&
			(pg_atomic_read_u32(&reaper_slot->yield) != 0 || ReaperIdle(next, now)))
		{
			reaper_leaving = true;
			proc_exit(0);
		}
		if (next != 0 && sleep_ms != 0)
			sleep_ms = next > now ? (long) ((next - now + 999) / 1000) : 0;
		if (sleep_ms < 0 || sleep_ms > DSYNC_REAPER_SLEEP_CAP_MS)
			sleep_ms = DSYNC_REAPER_SLEEP_CAP_MS;
		/* Wake when the idle time is up, to leave then. */
		if (dsync_worker_idle_timeout >= 0)
		{
			TimestampTz idle_end = TimestampTzPlusMilliseconds(busy_at, dsync_worker_idle_timeout);
			long		idle_ms = idle_end > now ? (long) ((idle_end - now + 999) / 1000) : 0;

			if (sleep_ms != 0 && idle_ms < sleep_ms)
				sleep_ms = idle_ms;
		}
		if (reaper_unsent != NIL)
		{
			long		retry_ms = (long) ((reaper_notify_retry - GetCurrentTimestamp() + 999) / 1000);

			retry_ms = Max(retry_ms, 0);
			if (sleep_ms < 0 || retry_ms < sleep_ms)
				sleep_ms = retry_ms;
		}

		pgstat_report_activity(STATE_IDLE, NULL);
		if (drained > 0 && reaper_unsent == NIL)
		{
			pgstat_report_wait_start(PG_WAIT_EXTENSION);
			pg_usleep(DSYNC_EVENT_BATCH_MS * 1000L);
			pgstat_report_wait_end();
			/* That time counts towards the next deadline. */
			if (sleep_ms > 0)
				sleep_ms = Max(sleep_ms - DSYNC_EVENT_BATCH_MS, 0);
		}
		(void) WaitLatch(MyLatch,
						 WL_LATCH_SET | WL_EXIT_ON_PM_DEATH |
						 (sleep_ms >= 0 ? WL_TIMEOUT : 0),
						 sleep_ms, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
}

