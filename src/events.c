/*-------------------------------------------------------------------------
 *
 * events.c
 *		Lease events: recorded during a transaction, queued at commit in
 *		shared memory, announced by the database's reaper with NOTIFY.
 *
 * A NOTIFY in every acquiring or releasing transaction would serialise
 * their commits on the cluster-wide notify lock (async.c, PreCommit_Notify).
 * Instead each backend keeps the events of its transaction in local memory
 * (dropping those of rolled-back savepoints), and its commit callback
 * appends them to its database's queue in shared memory, then sets the
 * reaper's latch.  The reaper sends whatever has accumulated in one
 * transaction of its own, so listeners get every committed change while
 * committers pay only for a short copy under an LWLock.
 *
 * The commit callback runs after the commit record is written but before
 * the transaction's row locks are released, so the next change to the same
 * lease (which needs that row lock) is always queued after this one:
 * events of one lease are queued, and sent, in commit order.
 *
 * The queue also tells the reaper about every new deadline, so that it
 * never has to scan the table to know when to wake up next.  If the queue
 * is full, events are dropped rather than making commits wait; the reaper
 * notices, logs a warning and rebuilds its deadlines from the table, so
 * that expired leases are still cleared and announced.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/json.h"
#include "utils/memutils.h"

#include "dsync.h"

/* An event as stored in a queue; name and holder bytes follow. */
typedef struct DsyncQueueEntry
{
	uint32		len;			/* whole entry, MAXALIGN'd; 0: wrap to start */
	uint16		kind;
	uint16		namelen;
	uint16		holderlen;
	int32		slot;
	int64		fencing;
	TimestampTz expires_at;
	char		data[FLEXIBLE_ARRAY_MEMBER];
} DsyncQueueEntry;

/* An event of the current transaction, with the nesting level it belongs to. */
typedef struct DsyncPendingEvent
{
	int			nest_level;
	DsyncEvent	event;
} DsyncPendingEvent;

static List *pending_events = NIL;	/* in TopTransactionContext */
static int64 pending_renewals = 0;	/* renewals made by this transaction */
static bool callbacks_registered = false;
static bool probe_requested = false;	/* once per backend */

static Size DsyncEventEntrySize(const DsyncEvent *event);
static void DsyncEventXactCallback(XactEvent event, void *arg);
static void DsyncEventSubXactCallback(SubXactEvent event, SubTransactionId mySubid,
									  SubTransactionId parentSubid, void *arg);

/*
 * DsyncEventRegisterCallbacks
 *		Hook transaction end in this backend, once.
 */
static void
DsyncEventRegisterCallbacks(void)
{
	if (callbacks_registered)
		return;
	RegisterXactCallback(DsyncEventXactCallback, NULL);
	RegisterSubXactCallback(DsyncEventSubXactCallback, NULL);
	callbacks_registered = true;
}

/*
 * DsyncEventRecordRenewal
 *		Count a renewal (for dsync_stats) once this transaction commits.
 */
void
DsyncEventRecordRenewal(void)
{
	DsyncEventRegisterCallbacks();
	pending_renewals++;
}

/*
 * DsyncEventRecord
 *		Note an event about a row that this transaction has just changed.
 */
void
DsyncEventRecord(DsyncEventKind kind, const DsyncRow *row)
{
	MemoryContext oldcontext;
	DsyncPendingEvent *pe;

	DsyncEventRegisterCallbacks();

	oldcontext = MemoryContextSwitchTo(TopTransactionContext);
	pe = palloc0(sizeof(DsyncPendingEvent));
	pe->nest_level = GetCurrentTransactionNestLevel();
	pe->event.kind = kind;
	pe->event.slot = DatumGetInt32(row->values[Anum_lease_slot - 1]);
	pe->event.name = TextDatumGetCString(row->values[Anum_lease_name - 1]);
	pe->event.holder = row->nulls[Anum_lease_holder - 1] ? pstrdup("") :
		TextDatumGetCString(row->values[Anum_lease_holder - 1]);
	pe->event.fencing = row->nulls[Anum_lease_fencing - 1] ? 0 :
		DatumGetInt64(row->values[Anum_lease_fencing - 1]);
	pe->event.expires_at = row->nulls[Anum_lease_expires_at - 1] ? 0 :
		DatumGetTimestampTz(row->values[Anum_lease_expires_at - 1]);
	/* The reaper removes a released row once it has been unused a while. */
	if (kind == DSYNC_EVENT_RELEASED || kind == DSYNC_EVENT_PERMIT_RELEASED)
		pe->event.expires_at = GetCurrentTimestamp();
	pending_events = lappend(pending_events, pe);
	MemoryContextSwitchTo(oldcontext);
}

/*
 * DsyncEventRecordRaw
 *		Note an event that is not about a lease row: group membership
 *		(name is the group, holder the member) and signals (no holder).
 */
void
DsyncEventRecordRaw(DsyncEventKind kind, text *name, text *holder,
					TimestampTz expires_at)
{
	DsyncRow row;

	memset(&row, 0, sizeof(row));
	for (int i = 0; i < DSYNC_MAX_ATTS; i++)
		row.nulls[i] = true;
	row.values[Anum_lease_name - 1] = PointerGetDatum(name);
	row.nulls[Anum_lease_name - 1] = false;
	row.values[Anum_lease_slot - 1] = Int32GetDatum(0);
	row.nulls[Anum_lease_slot - 1] = false;
	if (holder)
	{
		row.values[Anum_lease_holder - 1] = PointerGetDatum(holder);
		row.nulls[Anum_lease_holder - 1] = false;
	}
	if (expires_at != 0)
	{
		row.values[Anum_lease_expires_at - 1] = TimestampTzGetDatum(expires_at);
		row.nulls[Anum_lease_expires_at - 1] = false;
	}
	DsyncEventRecord(kind, &row);
}

/*
 * DsyncEventSubXactCallback
 *		A rolled-back savepoint's events never happened; a released one's
 *		belong to its parent from now on.
 */
static void
DsyncEventSubXactCallback(SubXactEvent event, SubTransactionId mySubid,
						  SubTransactionId parentSubid, void *arg)
{
	int			level = GetCurrentTransactionNestLevel();
	ListCell   *lc;

	if (pending_events == NIL)
		return;
	if (event == SUBXACT_EVENT_ABORT_SUB)
	{
		foreach(lc, pending_events)
		{
			DsyncPendingEvent *pe = lfirst(lc);

			if (pe->nest_level >= level)
				pending_events = foreach_delete_current(pending_events, lc);
		}
	}
	else if (event == SUBXACT_EVENT_COMMIT_SUB)
	{
		foreach(lc, pending_events)
		{
			DsyncPendingEvent *pe = lfirst(lc);

			if (pe->nest_level >= level)
				pe->nest_level = level - 1;
		}
	}
}

/*
 * DsyncEventHasDeadline
 *		Whether an event gives the reaper a deadline to watch.
 */
bool
DsyncEventHasDeadline(DsyncEventKind kind)
{
	return kind == DSYNC_EVENT_ACQUIRED || kind == DSYNC_EVENT_DEADLINE ||
		kind == DSYNC_EVENT_PERMIT_ACQUIRED || kind == DSYNC_EVENT_PERMIT_DEADLINE ||
		kind == DSYNC_EVENT_JOINED || kind == DSYNC_EVENT_MEMBER_DEADLINE;
}

/*
 * DsyncEventIsAnnounced
 *		Whether an event is sent to listeners.
 */
bool
DsyncEventIsAnnounced(DsyncEventKind kind)
{
	return kind != DSYNC_EVENT_DEADLINE && kind != DSYNC_EVENT_MEMBER_DEADLINE &&
		kind != DSYNC_EVENT_PERMIT_DEADLINE && kind != DSYNC_EVENT_RENEWED;
}

/*
 * DsyncEventCount
 *		Add a committed transaction's changes to its database's counters.
 */
static void
DsyncEventCount(DsyncDbSlot *slot)
{
	ListCell   *lc;
	int64		grants = 0,
				releases = 0,
				expiries = 0;

	foreach(lc, pending_events)
	{
		DsyncPendingEvent *pe = lfirst(lc);

		if (pe->event.kind == DSYNC_EVENT_ACQUIRED ||
			pe->event.kind == DSYNC_EVENT_PERMIT_ACQUIRED)
			grants++;
		else if (pe->event.kind == DSYNC_EVENT_RELEASED ||
				 pe->event.kind == DSYNC_EVENT_PERMIT_RELEASED)
			releases++;
		else if (pe->event.kind == DSYNC_EVENT_EXPIRED)
			expiries++;
	}
	DsyncStatAddSlot(slot, DSYNC_STAT_GRANTS, grants);
	DsyncStatAddSlot(slot, DSYNC_STAT_RELEASES, releases);
	DsyncStatAddSlot(slot, DSYNC_STAT_EXPIRIES, expiries);
	DsyncStatAddSlot(slot, DSYNC_STAT_RENEWALS, pending_renewals);
}

/*
 * DsyncDeadlineLower
 *		Make the reaper wake up by deadline if that is earlier than what it
 *		sleeps until.  Safe in a commit callback: no locks, no errors.
 */
void
DsyncDeadlineLower(DsyncDbSlot *slot, TimestampTz deadline)
{
	uint64		current = pg_atomic_read_u64(&slot->next_deadline);

	while (current == 0 || (TimestampTz) current > deadline)
	{
		if (pg_atomic_compare_exchange_u64(&slot->next_deadline, &current,
										   (uint64) deadline))
			break;
	}
}

/*
 * DsyncQueueAppend
 *		Copy one event into a queue; false if it does not fit.  The caller
 *		holds the queue lock.
 */
static bool
DsyncQueueAppend(DsyncDbSlot *slot, const DsyncEvent *event)
{
	Size		size = (Size) dsync_event_queue_size * 1024;
	int			namelen = strlen(event->name);
	int			holderlen = strlen(event->holder);
	uint32		len = DsyncEventEntrySize(event);
	Size		pos = slot->queue_head % size;
	Size		skip = (pos + len > size) ? size - pos : 0;
	DsyncQueueEntry *entry;

	if (slot->queue_head - slot->queue_tail + skip + len > size)
		return false;
	if (skip > 0)
	{
		/* Entries never wrap: mark the rest of the buffer as unused. */
		((DsyncQueueEntry *) (slot->queue + pos))->len = 0;
		slot->queue_head += skip;
		pos = 0;
	}
	entry = (DsyncQueueEntry *) (slot->queue + pos);
	entry->len = len;
	entry->kind = (uint16) event->kind;
	entry->namelen = namelen;
	entry->holderlen = holderlen;
	entry->slot = event->slot;
	entry->fencing = event->fencing;
	entry->expires_at = event->expires_at;
	memcpy(entry->data, event->name, namelen);
	memcpy(entry->data + namelen, event->holder, holderlen);
	slot->queue_head += len;
	return true;
}

/*
 * DsyncEventPublish
 *		Queue the committed transaction's events and wake the reaper.
 *
 * Runs in the commit callback, where an error would be a PANIC: nothing
 * here can fail.  Without a reaper slot for this database (it has not been
 * started yet, or dsync.max_databases is too small) the events are
 * dropped, and the launcher is asked, once per backend, to look at this
 * database: a starting reaper reads its deadlines from the table.
 */
static void
DsyncEventPublish(void)
{
	DsyncDbSlot *slot = DsyncDbSlotFind(MyDatabaseId);
	ListCell   *lc;
	bool		wake = false;
	int			procno;
	uint64		dropped = 0;
	uint64		dropped_announced = 0;
	Size		size = (Size) dsync_event_queue_size * 1024;

	if (slot == NULL || slot->state == DSYNC_DB_ABSENT)
	{
		/* The extension is here, so the launcher missed it: tell it. */
		if (!probe_requested)
		{
			probe_requested = true;
			DsyncLauncherRequestProbe(MyDatabaseId);
		}
		if (slot == NULL)
			return;
	}

	LWLockAcquire(slot->queue_lock, LW_EXCLUSIVE);
	if (slot->dbid != MyDatabaseId)
	{
		/* The slot went to another database meanwhile. */
		LWLockRelease(slot->queue_lock);
		return;
	}
	foreach(lc, pending_events)
	{
		DsyncPendingEvent *pe = lfirst(lc);

		if (!DsyncQueueAppend(slot, &pe->event))
		{
			dropped++;
			if (DsyncEventIsAnnounced(pe->event.kind))
				dropped_announced++;
			continue;
		}
		if (DsyncEventHasDeadline(pe->event.kind))
		{
			uint64		before = pg_atomic_read_u64(&slot->next_deadline);

			DsyncDeadlineLower(slot, pe->event.expires_at);
			if (before == 0 || (TimestampTz) before > pe->event.expires_at)
				wake = true;
		}
		if (DsyncEventIsAnnounced(pe->event.kind) && dsync_events)
			wake = true;
	}
	slot->queue_dropped += dropped;
	slot->queue_dropped_announced += dropped_announced;
	if (slot->queue_head - slot->queue_tail > size / 2 || dropped > 0)
		wake = true;
	LWLockRelease(slot->queue_lock);
	DsyncEventCount(slot);

	procno = slot->pgprocno;
	if (wake && procno >= 0)
		SetLatch(&ProcGlobal->allProcs[procno].procLatch);
}

/*
 * DsyncEventEntrySize
 *		Bytes an event takes in a queue.
 */
static Size
DsyncEventEntrySize(const DsyncEvent *event)
{
	return MAXALIGN(offsetof(DsyncQueueEntry, data) + strlen(event->name) +
					strlen(event->holder));
}

/*
 * DsyncEventMakeRoom
 *		Before committing, give a running reaper up to a second to make
 *		room in the queue for this transaction's events.
 *
 * The commit callback cannot wait, so it drops what does not fit; this
 * makes that happen only when the reaper has stopped keeping up for a
 * whole second, not on every burst.  It is the one place where dsync
 * looks at something repeatedly (every millisecond, and only while the
 * queue is full).  A transaction with more events than the whole queue
 * holds does not wait.
 */
static void
DsyncEventMakeRoom(void)
{
	DsyncDbSlot *slot = DsyncDbSlotFind(MyDatabaseId);
	Size		size = (Size) dsync_event_queue_size * 1024;
	Size		needed = 0;
	ListCell   *lc;

	/* The reaper would only be waiting for itself. */
	if (slot == NULL || slot->pid == MyProcPid)
		return;
	foreach(lc, pending_events)
		needed += DsyncEventEntrySize(&((DsyncPendingEvent *) lfirst(lc))->event);
	if (needed > size / 2)
		return;

	for (int waited = 0; waited < 1000; waited++)
	{
		Size		used;
		int			procno;

		LWLockAcquire(slot->queue_lock, LW_SHARED);
		used = slot->queue_head - slot->queue_tail;
		LWLockRelease(slot->queue_lock);
		/* Twice what we need: the end of the buffer may be skipped. */
		if (used + 2 * needed <= size)
			return;
		procno = slot->pgprocno;
		if (procno < 0)
			return;				/* no reaper to wait for */
		SetLatch(&ProcGlobal->allProcs[procno].procLatch);
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 1, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

/*
 * DsyncEventXactCallback
 *		Make room before commit, publish at commit, forget at abort.
 */
static void
DsyncEventXactCallback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
			if (pending_events != NIL)
				DsyncEventMakeRoom();
			break;
		case XACT_EVENT_COMMIT:
			if (pending_events != NIL || pending_renewals > 0)
				DsyncEventPublish();
			pending_events = NIL;
			pending_renewals = 0;
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PREPARE:
			pending_events = NIL;
			pending_renewals = 0;
			break;
		default:
			break;
	}
}

/*
 * DsyncEventDrain
 *		Take every queued event of a database, for its reaper.  Returns how
 *		many; *dropped gets (and resets) the count of events lost since the
 *		last call because the queue was full.
 */
int
DsyncEventDrain(DsyncDbSlot *slot, List **events, uint64 *dropped,
				uint64 *dropped_announced)
{
	Size		size = (Size) dsync_event_queue_size * 1024;
	uint64		tail;
	uint64		head;
	char	   *copy;
	int			n = 0;

	/*
	 * Copy the bytes out under the lock and parse them afterwards: the
	 * lock is what committing backends take in their commit callbacks.
	 */
	LWLockAcquire(slot->queue_lock, LW_EXCLUSIVE);
	tail = slot->queue_tail;
	head = slot->queue_head;
	copy = palloc(head - tail + 1);
	for (uint64 off = tail; off < head;)
	{
		Size		pos = off % size;
		Size		chunk = Min(size - pos, head - off);

		memcpy(copy + (off - tail), slot->queue + pos, chunk);
		off += chunk;
	}
	slot->queue_tail = head;
	*dropped = slot->queue_dropped;
	*dropped_announced = slot->queue_dropped_announced;
	slot->queue_dropped = 0;
	slot->queue_dropped_announced = 0;
	LWLockRelease(slot->queue_lock);

	for (uint64 off = tail; off < head;)
	{
		Size		pos = off % size;
		DsyncQueueEntry *entry = (DsyncQueueEntry *) (copy + (off - tail));
		DsyncEvent *event;

		if (size - pos < offsetof(DsyncQueueEntry, data) || entry->len == 0)
		{
			off += size - pos;	/* the writer wrapped to the start here */
			continue;
		}
		event = palloc(sizeof(DsyncEvent));
		event->kind = (DsyncEventKind) entry->kind;
		event->slot = entry->slot;
		event->fencing = entry->fencing;
		event->seq = 0;
		event->expires_at = entry->expires_at;
		event->name = pnstrdup(entry->data, entry->namelen);
		event->holder = pnstrdup(entry->data + entry->namelen, entry->holderlen);
		*events = lappend(*events, event);
		off += entry->len;
		n++;
	}
	pfree(copy);
	return n;
}

/*
 * DsyncEventTimestamp
 *		A timestamp in RFC 3339, in UTC with a full offset, as JSON:
 *		"2026-11-21T10:00:30.5+00:00" (trailing zeros of the fraction
 *		dropped).  JavaScript's Date and every ISO 8601 parser accept it;
 *		a bare "+00" is not RFC 3339 and some parsers reject it.
 */
void
DsyncEventTimestamp(StringInfo buf, TimestampTz ts)
{
	struct pg_tm tm;
	fsec_t		fsec;

	if (TIMESTAMP_NOT_FINITE(ts) || timestamp2tm(ts, NULL, &tm, &fsec, NULL, NULL) != 0)
	{
		appendStringInfoString(buf, "null");
		return;
	}
	appendStringInfo(buf, "\"%04d-%02d-%02dT%02d:%02d:%02d",
					 tm.tm_year, tm.tm_mon, tm.tm_mday,
					 tm.tm_hour, tm.tm_min, tm.tm_sec);
	if (fsec != 0)
	{
		char		frac[8];
		int			len;

		snprintf(frac, sizeof(frac), "%06d", (int) fsec);
		for (len = 6; len > 0 && frac[len - 1] == '0'; len--)
			;
		frac[len] = '\0';
		appendStringInfo(buf, ".%s", frac);
	}
	appendStringInfoString(buf, "+00:00\"");
}

/*
 * DsyncEventPayload
 *		The NOTIFY payload of an event: one JSON object.
 */
char *
DsyncEventPayload(const DsyncEvent *event)
{
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfoChar(&buf, '{');
	if (event->seq > 0)
		appendStringInfo(&buf, "\"seq\":" INT64_FORMAT ",", event->seq);
	switch (event->kind)
	{
		case DSYNC_EVENT_ACQUIRED:
		case DSYNC_EVENT_PERMIT_ACQUIRED:
		case DSYNC_EVENT_RELEASED:
		case DSYNC_EVENT_PERMIT_RELEASED:
		case DSYNC_EVENT_EXPIRED:
			appendStringInfo(&buf, "\"event\":\"%s\",\"lease\":",
							 event->kind == DSYNC_EVENT_EXPIRED ? "expired" :
							 event->kind == DSYNC_EVENT_RELEASED ||
							 event->kind == DSYNC_EVENT_PERMIT_RELEASED ? "released" :
							 "acquired");
			escape_json(&buf, event->name);
			appendStringInfoString(&buf, ",\"holder\":");
			escape_json(&buf, event->holder);
			appendStringInfo(&buf, ",\"fencing\":" INT64_FORMAT, event->fencing);
			if (event->kind != DSYNC_EVENT_RELEASED &&
				event->kind != DSYNC_EVENT_PERMIT_RELEASED)
			{
				appendStringInfoString(&buf, ",\"expires_at\":");
				DsyncEventTimestamp(&buf, event->expires_at);
			}
			break;
		case DSYNC_EVENT_JOINED:
		case DSYNC_EVENT_LEFT:
		case DSYNC_EVENT_MEMBER_EXPIRED:
			appendStringInfo(&buf, "\"event\":\"%s\",\"group\":",
							 event->kind == DSYNC_EVENT_JOINED ? "joined" : "left");
			escape_json(&buf, event->name);
			appendStringInfoString(&buf, ",\"member\":");
			escape_json(&buf, event->holder);
			if (event->kind == DSYNC_EVENT_LEFT)
				appendStringInfoString(&buf, ",\"reason\":\"left\"");
			else if (event->kind == DSYNC_EVENT_MEMBER_EXPIRED)
				appendStringInfoString(&buf, ",\"reason\":\"expired\"");
			if (event->kind != DSYNC_EVENT_LEFT)
			{
				appendStringInfoString(&buf, ",\"expires_at\":");
				DsyncEventTimestamp(&buf, event->expires_at);
			}
			break;
		case DSYNC_EVENT_SET:
			appendStringInfoString(&buf, "\"event\":\"set\",\"name\":");
			escape_json(&buf, event->name);
			break;
		default:
			pfree(buf.data);
			return NULL;
	}
	appendStringInfoChar(&buf, '}');
	return buf.data;
}
