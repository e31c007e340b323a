/*-------------------------------------------------------------------------
 *
 * expiry.c
 *		The reaper's deadlines: which lease, permit or member is due next,
 *		kept in bounded memory, and the pass that handles the due ones.
 *
 * The reaper keeps every deadline it knows of in a pairing heap, one entry
 * per lease, permit or member.  It reads them from the tables once when it
 * starts (also after promotion or a crash), and from then on only from its
 * database's event queue, where every committed grant is put (events.c).
 * Renewals only push deadlines later, so they need not be queued: when a
 * deadline comes, the reaper looks the row up by its primary key and, if
 * it was renewed, files it under its new expiry.  The work of a pass is
 * therefore proportional to the rows that are due, not to all rows.
 *
 * What happens to a row whose deadline has come (cleared, announced,
 * removed, or looked at later) is decided in reap.c (ReapRow).
 *
 * Memory stays bounded whatever the tables hold: at most EXPIRY_MAX_ENTRIES
 * deadlines are kept, the nearest ones, and a horizon says that every
 * deadline not kept is at or after it.  A deadline at or after the horizon
 * is not kept (a later read of the tables finds it); when there are too
 * many, the latest are dropped and the horizon comes down to them.  When
 * the horizon comes due, the tables are read again for the next nearest
 * deadlines (ExpiryRescan), in one pass that keeps a bounded heap of the
 * smallest.  At a million live leases the worker holds 100,000 deadlines
 * (dsync.deadlines_in_memory) and reads the table once per 100,000
 * expiries.
 *
 * The clearing transaction publishes its xid (DsyncDbSlot.reaper_xid):
 * an acquirer that meets one of its row locks waits for it (store.c)
 * instead of reporting a free lease as busy.
 *
 * After a pass, the worker tells ephemeral grants up to when every
 * holder it knew of has been cleared and announced (ExpiryReapedUpTo,
 * heldmap.c's reaped_until): when the pass began, unless a deadline due
 * by then is still to be done.  A row someone else had locked (busy) is
 * looked at again later; until then its first due time holds that value
 * back (the busy heap).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "commands/extension.h"
#include "common/hashfn.h"
#include "lib/binaryheap.h"
#include "lib/pairingheap.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

#include "reaper.h"
#include "workers.h"
#include "catalog.h"
#include "dbslot.h"
#include "settings.h"
#include "store.h"
#include "events.h"
#include "ephemeral.h"
#include "heldmap.h"

/* The most deadlines kept in memory (and a quarter more before trimming). */
#define EXPIRY_MAX_ENTRIES		dsync_deadlines_in_memory

/*
 * An entry's key: the names point into expiry_cxt, so that an entry costs
 * what its names need, not two full-length name buffers.
 */
typedef struct ExpiryKey
{
	uint32		hash;
	int32		kind;			/* ExpiryKind */
	int32		slot;			/* permit slot; 0 for leases and members */
	char	   *name;			/* lease, semaphore or group */
	char	   *member;			/* member of a group, or NULL */
} ExpiryKey;

typedef struct ExpiryEntry
{
	ExpiryKey	key;			/* hash key: must be first */
	TimestampTz deadline;
	pairingheap_node node;
	TimestampTz busy_since;		/* first due and found busy (0: not busy) */
	pairingheap_node busy_node; /* in expiry_busy while busy_since is set */
} ExpiryEntry;

static HTAB *expiry_entries = NULL;
static pairingheap *expiry_heap = NULL;
static pairingheap *expiry_busy = NULL; /* busy entries, earliest busy_since first */
static MemoryContext expiry_cxt = NULL;

/* Every deadline not kept is at or after this (DT_NOEND: all are kept). */
static TimestampTz expiry_horizon = DT_NOEND;

/* A deadline read from the tables by a rescan, before it is kept. */
typedef struct ExpiryFound
{
	ExpiryKind	kind;
	int32		slot;
	TimestampTz deadline;
	char	   *name;
	char	   *member;
} ExpiryFound;

static void ExpiryRescan(void);

/*
 * ExpiryCompare
 *		Pairing heap order: the earliest deadline first.
 */
static int
ExpiryCompare(const pairingheap_node *a, const pairingheap_node *b, void *arg)
{
	const ExpiryEntry *ea = pairingheap_const_container(ExpiryEntry, node, a);
	const ExpiryEntry *eb = pairingheap_const_container(ExpiryEntry, node, b);

	if (ea->deadline < eb->deadline)
		return 1;
	if (ea->deadline > eb->deadline)
		return -1;
	return 0;
}

/*
 * ExpiryBusyCompare
 *		The busy heap's order: the earliest busy_since first.
 */
static int
ExpiryBusyCompare(const pairingheap_node *a, const pairingheap_node *b, void *arg)
{
	const ExpiryEntry *ea = pairingheap_const_container(ExpiryEntry, busy_node, a);
	const ExpiryEntry *eb = pairingheap_const_container(ExpiryEntry, busy_node, b);

	if (ea->busy_since < eb->busy_since)
		return 1;
	if (ea->busy_since > eb->busy_since)
		return -1;
	return 0;
}

/*
 * ExpiryKeyHash
 *		dynahash: the hash stored in the key.
 */
static uint32
ExpiryKeyHash(const void *key, Size keysize)
{
	return ((const ExpiryKey *) key)->hash;
}

/*
 * ExpiryKeyMatch
 *		dynahash: 0 if two keys name the same thing.
 */
static int
ExpiryKeyMatch(const void *a, const void *b, Size keysize)
{
	const ExpiryKey *ka = a;
	const ExpiryKey *kb = b;

	if (ka->hash != kb->hash || ka->kind != kb->kind || ka->slot != kb->slot ||
		strcmp(ka->name, kb->name) != 0)
		return 1;
	if (ka->member == NULL || kb->member == NULL)
		return ka->member != kb->member;
	return strcmp(ka->member, kb->member) != 0;
}

/*
 * ExpiryReset
 *		Start with no deadlines.
 */
void
ExpiryReset(void)
{
	HASHCTL		ctl;

	if (expiry_cxt == NULL)
		expiry_cxt = AllocSetContextCreate(TopMemoryContext, "dsync deadlines",
										   ALLOCSET_DEFAULT_SIZES);
	else
		MemoryContextReset(expiry_cxt);

	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = sizeof(ExpiryKey);
	ctl.entrysize = sizeof(ExpiryEntry);
	ctl.hash = ExpiryKeyHash;
	ctl.match = ExpiryKeyMatch;
	ctl.hcxt = expiry_cxt;
	expiry_entries = hash_create("dsync reaper deadlines", 1024, &ctl,
								 HASH_ELEM | HASH_FUNCTION | HASH_COMPARE | HASH_CONTEXT);
	expiry_heap = MemoryContextAlloc(expiry_cxt, sizeof(pairingheap));
	expiry_heap->ph_compare = ExpiryCompare;
	expiry_heap->ph_arg = NULL;
	expiry_heap->ph_root = NULL;
	expiry_busy = MemoryContextAlloc(expiry_cxt, sizeof(pairingheap));
	expiry_busy->ph_compare = ExpiryBusyCompare;
	expiry_busy->ph_arg = NULL;
	expiry_busy->ph_root = NULL;
	expiry_horizon = DT_NOEND;
}

/*
 * ExpiryCount
 *		How many deadlines are tracked.
 */
Size
ExpiryCount(void)
{
	return expiry_entries ? hash_get_num_entries(expiry_entries) : 0;
}

static void ExpiryTrim(void);

/*
 * ExpirySchedule
 *		Make sure a lease, permit or member is looked at no later than
 *		deadline (if it is before the horizon; later, a rescan does).
 */
static void
ExpirySchedule(ExpiryKind kind, const char *name, const char *member, int32 slot,
			   TimestampTz deadline)
{
	ExpiryKey	key;
	ExpiryEntry *entry;
	bool		found;

	key.kind = kind;
	key.slot = slot;
	key.name = (char *) name;
	key.member = (char *) member;
	key.hash = hash_bytes((const unsigned char *) name, strlen(name)) ^
		(uint32) (kind * 0x9e3779b9u) ^ (uint32) slot;
	if (member)
		key.hash ^= hash_bytes((const unsigned char *) member, strlen(member)) * 31;

	entry = hash_search(expiry_entries, &key, deadline < expiry_horizon ? HASH_ENTER : HASH_FIND,
						&found);
	if (entry == NULL)
		return;					/* beyond the horizon: a rescan will find it */
	if (found)
	{
		if (entry->deadline <= deadline)
			return;
		pairingheap_remove(expiry_heap, &entry->node);
	}
	else
	{
		/* The key was copied with the caller's pointers: own the names. */
		entry->key.name = MemoryContextStrdup(expiry_cxt, name);
		entry->key.member = member ? MemoryContextStrdup(expiry_cxt, member) : NULL;
		entry->busy_since = 0;
	}
	entry->deadline = deadline;
	pairingheap_add(expiry_heap, &entry->node);
	if (hash_get_num_entries(expiry_entries) > EXPIRY_MAX_ENTRIES + EXPIRY_MAX_ENTRIES / 4)
		ExpiryTrim();
}

/*
 * ExpiryForget
 *		Stop tracking an entry taken off the heap.
 */
static void
ExpiryForget(ExpiryEntry *entry)
{
	char	   *name = entry->key.name;
	char	   *member = entry->key.member;

	if (entry->busy_since != 0)
		pairingheap_remove(expiry_busy, &entry->busy_node);

	hash_search(expiry_entries, &entry->key, HASH_REMOVE, NULL);
	pfree(name);
	if (member)
		pfree(member);
}

/*
 * ExpiryDeadlineOrder
 *		qsort comparator: deadlines, earliest first.
 */
static int
ExpiryDeadlineOrder(const void *a, const void *b)
{
	TimestampTz da = *(const TimestampTz *) a;
	TimestampTz db = *(const TimestampTz *) b;

	return (da > db) - (da < db);
}

/*
 * ExpiryTrim
 *		Keep only the EXPIRY_MAX_ENTRIES nearest deadlines; the horizon
 *		comes down to the earliest one dropped.
 */
static void
ExpiryTrim(void)
{
	long		n = hash_get_num_entries(expiry_entries);
	TimestampTz *deadlines = palloc(sizeof(TimestampTz) * n);
	TimestampTz cutoff;
	HASH_SEQ_STATUS status;
	ExpiryEntry *entry;
	long		i = 0;
	List	   *drop = NIL;
	ListCell   *lc;

	hash_seq_init(&status, expiry_entries);
	while ((entry = hash_seq_search(&status)) != NULL)
		deadlines[i++] = entry->deadline;
	qsort(deadlines, n, sizeof(TimestampTz), ExpiryDeadlineOrder);
	cutoff = deadlines[EXPIRY_MAX_ENTRIES - 1];
	pfree(deadlines);

	hash_seq_init(&status, expiry_entries);
	while ((entry = hash_seq_search(&status)) != NULL)
		if (entry->deadline > cutoff)
			drop = lappend(drop, entry);
	foreach(lc, drop)
	{
		entry = lfirst(lc);
		/* A busy row's expiry is earlier: a rescan must find it again. */
		expiry_horizon = Min(expiry_horizon,
							 entry->busy_since != 0 ? entry->busy_since : entry->deadline);
		pairingheap_remove(expiry_heap, &entry->node);
		ExpiryForget(entry);
	}
	list_free(drop);
}

/*
 * ExpiryScheduleEvent
 *		Note the deadline an event gives, if any.
 */
void
ExpiryScheduleEvent(const DsyncEvent *event)
{
	/* An ephemeral lease's deadline comes through the slot (ephemeral.c). */
	if (event->slot < 0)
		return;
	switch (event->kind)
	{
		case DSYNC_EVENT_ACQUIRED:
		case DSYNC_EVENT_DEADLINE:
			ExpirySchedule(EXPIRY_LEASE, event->name, NULL, 0, event->expires_at);
			break;
		case DSYNC_EVENT_PERMIT_ACQUIRED:
		case DSYNC_EVENT_PERMIT_DEADLINE:
			ExpirySchedule(EXPIRY_PERMIT, event->name, NULL, event->slot, event->expires_at);
			break;
		case DSYNC_EVENT_JOINED:
		case DSYNC_EVENT_MEMBER_DEADLINE:
			ExpirySchedule(EXPIRY_MEMBER, event->name, event->holder, 0, event->expires_at);
			break;
		case DSYNC_EVENT_RELEASED:
		case DSYNC_EVENT_PERMIT_RELEASED:
		case DSYNC_EVENT_IDLE:
		case DSYNC_EVENT_PERMIT_IDLE:
			/* Look again once it may have been unused long enough. */
			if (dsync_idle_row_retention >= 0)
				ExpirySchedule(event->kind == DSYNC_EVENT_RELEASED ||
							   event->kind == DSYNC_EVENT_IDLE ? EXPIRY_LEASE : EXPIRY_PERMIT,
							   event->name, NULL, event->slot,
							   TimestampTzPlusMilliseconds(event->expires_at,
														   (int64) dsync_idle_row_retention * 1000));
			break;
		default:
			break;
	}
}

/*
 * ExpiryNext
 *		The earliest deadline, or 0 if there is none.
 */
TimestampTz
ExpiryNext(void)
{
	TimestampTz next = expiry_horizon == DT_NOEND ? 0 : expiry_horizon;
	TimestampTz ephemeral = DsyncEphemeralDue();

	if (!pairingheap_is_empty(expiry_heap))
	{
		TimestampTz first = pairingheap_container(ExpiryEntry, node,
												  pairingheap_first(expiry_heap))->deadline;

		if (next == 0 || first < next)
			next = first;
	}
	if (ephemeral != 0 && (next == 0 || ephemeral < next))
		next = ephemeral;
	return next;
}

/*
 * ExpiryFoundOrder
 *		binaryheap comparator: the latest deadline on top (a max-heap), so
 *		that a rescan keeps the earliest ones.
 */
static int
ExpiryFoundOrder(Datum a, Datum b, void *arg)
{
	TimestampTz da = ((ExpiryFound *) DatumGetPointer(a))->deadline;
	TimestampTz db = ((ExpiryFound *) DatumGetPointer(b))->deadline;

	return (da > db) - (da < db);
}

/*
 * ExpiryRescanOffer
 *		A deadline a rescan read: keep it among the nearest, or account for
 *		it in the next horizon.
 */
static void
ExpiryRescanOffer(binaryheap *found, int room, TimestampTz *rejected, ExpiryKind kind,
				  const char *name, const char *member, int32 slot, TimestampTz deadline)
{
	ExpiryFound *f;

	if (deadline == 0 || deadline < expiry_horizon)
		return;					/* kept already, or nothing to watch */
	if (found->bh_size >= room)
	{
		ExpiryFound *top = (ExpiryFound *) DatumGetPointer(binaryheap_first(found));

		if (deadline >= top->deadline)
		{
			*rejected = Min(*rejected, deadline);
			return;
		}
		*rejected = Min(*rejected, top->deadline);
		(void) binaryheap_remove_first(found);
		pfree(top->name);
		if (top->member)
			pfree(top->member);
		pfree(top);
	}
	f = palloc(sizeof(ExpiryFound));
	f->kind = kind;
	f->slot = slot;
	f->deadline = deadline;
	f->name = pstrdup(name);
	f->member = member ? pstrdup(member) : NULL;
	binaryheap_add(found, PointerGetDatum(f));
}

/*
 * ExpiryRescan
 *		Read the tables for the nearest deadlines at or after the horizon
 *		(those before it are all kept already), as many as there is room
 *		for, and move the horizon to the earliest one left out.  In a
 *		transaction.
 */
static void
ExpiryRescan(void)
{
	const DsyncCatalog *catalog = DsyncCatalogFromExtension();
	static const DsyncTable tables[] = {DSYNC_TABLE_LEASE, DSYNC_TABLE_PERMIT, DSYNC_TABLE_MEMBER};
	int			room;
	MemoryContext scan_cxt = AllocSetContextCreate(CurrentMemoryContext, "dsync rescan",
												   ALLOCSET_DEFAULT_SIZES);
	MemoryContext row_cxt = AllocSetContextCreate(scan_cxt, "dsync rescan row",
												  ALLOCSET_SMALL_SIZES);
	MemoryContext oldcontext;
	binaryheap *found;
	TimestampTz rejected = DT_NOEND;

	/*
	 * Kept deadlines may lie beyond the horizon (leases re-filed at their
	 * renewed expiry).  If they leave little room, let them go: this very
	 * pass finds them again, so the pass always makes progress.
	 */
	if (hash_get_num_entries(expiry_entries) > EXPIRY_MAX_ENTRIES - EXPIRY_MAX_ENTRIES / 10)
	{
		HASH_SEQ_STATUS status;
		ExpiryEntry *entry;
		List	   *drop = NIL;
		ListCell   *lc;

		/* A busy row stays: its expiry is before the horizon, unread here. */
		hash_seq_init(&status, expiry_entries);
		while ((entry = hash_seq_search(&status)) != NULL)
			if (entry->deadline >= expiry_horizon && entry->busy_since == 0)
				drop = lappend(drop, entry);
		foreach(lc, drop)
		{
			pairingheap_remove(expiry_heap, &((ExpiryEntry *) lfirst(lc))->node);
			ExpiryForget(lfirst(lc));
		}
		list_free(drop);
	}
	room = EXPIRY_MAX_ENTRIES - (int) hash_get_num_entries(expiry_entries);
	oldcontext = MemoryContextSwitchTo(scan_cxt);
	found = binaryheap_allocate(Max(room, 1), ExpiryFoundOrder, NULL);

	for (int i = 0; i < (int) lengthof(tables); i++)
	{
		DsyncStore	store;
		DsyncScan  *scan;
		DsyncRow   *row;

		if (!OidIsValid(catalog->rels[tables[i]]))
			continue;
		DsyncStoreOpenCatalog(&store, catalog, tables[i], false);
		store.tolerant = true;
		scan = DsyncScanAll(&store);
		MemoryContextSwitchTo(row_cxt);
		while ((row = DsyncScanNext(scan)) != NULL)
		{
			MemoryContextSwitchTo(scan_cxt);
			if (tables[i] == DSYNC_TABLE_MEMBER)
				ExpiryRescanOffer(found, room, &rejected, EXPIRY_MEMBER,
								  TextDatumGetCString(row->values[Anum_member_grp - 1]),
								  TextDatumGetCString(row->values[Anum_member_member - 1]), 0,
								  DatumGetTimestampTz(row->values[Anum_member_expires_at - 1]));
			else
				ExpiryRescanOffer(found, room, &rejected,
								  tables[i] == DSYNC_TABLE_LEASE ? EXPIRY_LEASE : EXPIRY_PERMIT,
								  TextDatumGetCString(row->values[Anum_lease_name - 1]), NULL,
								  DsyncRowSlot(row),
								  row->nulls[Anum_lease_holder - 1] ?
								  ReapIdleDeadline(row) : DsyncRowExpiry(row));
			MemoryContextReset(row_cxt);
			MemoryContextSwitchTo(row_cxt);
		}
		MemoryContextSwitchTo(scan_cxt);
		DsyncScanEnd(scan);
		DsyncStoreClose(&store);
	}

	/* The horizon moves first, so that what was found is kept. */
	expiry_horizon = rejected;
	while (!binaryheap_empty(found))
	{
		ExpiryFound *f = (ExpiryFound *) DatumGetPointer(binaryheap_remove_first(found));

		ExpirySchedule(f->kind, f->name, f->member, f->slot, f->deadline);
	}
	MemoryContextSwitchTo(oldcontext);
	MemoryContextDelete(scan_cxt);
}

/*
 * ExpiryRebuild
 *		Start from the tables alone: keep the nearest deadlines of every
 *		lease, permit and member.  In a transaction.
 */
void
ExpiryRebuild(void)
{
	ExpiryReset();
	expiry_horizon = DT_NOBEGIN;	/* nothing kept: everything is beyond */
	DsyncEphemeralLookSoon();	/* look at them once now */
	ExpiryRescan();
}

/*
 * ExpiryMarkBusy
 *		Note whether an entry's row was found busy when due (due: when it
 *		was due; 0: it was not busy).  It stays busy from the first time
 *		until a look finds it not busy.
 */
static void
ExpiryMarkBusy(ExpiryEntry *entry, TimestampTz due)
{
	if (due != 0 && entry->busy_since == 0)
	{
		entry->busy_since = due;
		pairingheap_add(expiry_busy, &entry->busy_node);
	}
	else if (due == 0 && entry->busy_since != 0)
	{
		pairingheap_remove(expiry_busy, &entry->busy_node);
		entry->busy_since = 0;
	}
}

/*
 * ExpiryReapedUpTo
 *		After a pass that began at began, with every queued event taken
 *		after that: the time up to which every holder the worker knows of
 *		has been cleared and announced (heldmap.c, reaped_until), or 0 if
 *		nothing new can be said.  That is began itself unless a deadline
 *		due by then is kept for later (busy rows: from when they were
 *		first due), or lies beyond the horizon.
 */
TimestampTz
ExpiryReapedUpTo(TimestampTz began)
{
	TimestampTz upto = began;

	if (expiry_heap == NULL)
		return 0;
	if (!pairingheap_is_empty(expiry_heap))
		upto = Min(upto, pairingheap_container(ExpiryEntry, node,
											   pairingheap_first(expiry_heap))->deadline - 1);
	if (!pairingheap_is_empty(expiry_busy))
		upto = Min(upto, pairingheap_container(ExpiryEntry, busy_node,
											   pairingheap_first(expiry_busy))->busy_since - 1);
	if (expiry_horizon <= upto)
		return 0;				/* deadlines not kept may be due */
	return upto;
}

/*
 * ExpiryReapDue
 *		Look at up to dsync.reap_batch_size due deadlines in one
 *		transaction; the events of what it clears go through the queue like
 *		everybody else's.  Returns how many it cleared, or -1 if the
 *		extension is gone.
 */
int
ExpiryReapDue(DsyncDbSlot *slot, bool *more)
{
	const DsyncCatalog *catalog;
	DsyncStore	stores[3];
	bool		has[3];
	int			cleared = 0;
	int			looked = 0;
	TimestampTz ephemeral_due;

	*more = false;
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	if (!OidIsValid(get_extension_oid("dsync", true)))
	{
		PopActiveSnapshot();
		CommitTransactionCommand();
		return -1;
	}
	/* What this transaction locks, it clears or finds renewed. */
	DsyncHeldMapReaping();
	ephemeral_due = DsyncEphemeralDue();
	if (ephemeral_due != 0 && ephemeral_due <= GetCurrentTimestamp())
		DsyncEphemeralReap();
	catalog = DsyncCatalogFromExtension();
	has[EXPIRY_LEASE] = true;
	has[EXPIRY_PERMIT] = OidIsValid(catalog->rels[DSYNC_TABLE_PERMIT]);
	has[EXPIRY_MEMBER] = OidIsValid(catalog->rels[DSYNC_TABLE_MEMBER]);
	for (int kind = 0; kind < 3; kind++)
	{
		static const DsyncTable tables[] = {DSYNC_TABLE_LEASE, DSYNC_TABLE_PERMIT,
		DSYNC_TABLE_MEMBER};

		if (!has[kind])
			continue;
		DsyncStoreOpenCatalog(&stores[kind], catalog, tables[kind], true);
		stores[kind].tolerant = true;
	}

	/* The kept deadlines are used up before the horizon: read on. */
	if (expiry_horizon != DT_NOEND && expiry_horizon <= GetCurrentTimestamp() &&
		(pairingheap_is_empty(expiry_heap) ||
		 pairingheap_container(ExpiryEntry, node,
							   pairingheap_first(expiry_heap))->deadline >= expiry_horizon))
		ExpiryRescan();

	while (!pairingheap_is_empty(expiry_heap))
	{
		ExpiryEntry *entry = pairingheap_container(ExpiryEntry, node,
												   pairingheap_first(expiry_heap));
		TimestampTz now = GetCurrentTimestamp();
		TimestampTz next = 0;
		TimestampTz due = entry->deadline;
		bool		busy = false;

		if (entry->deadline > now)
			break;
		if (looked++ >= dsync_reap_batch_size)
		{
			*more = true;
			break;
		}
		CHECK_FOR_INTERRUPTS();
		(void) pairingheap_remove_first(expiry_heap);

		if (has[entry->key.kind])
		{
			DsyncStore *store = &stores[entry->key.kind];
			text	   *name = cstring_to_text(entry->key.name);
			DsyncScan  *scan;
			DsyncRow   *row;

			scan = DsyncScanKey(store, name, entry->key.kind == EXPIRY_MEMBER ?
								CStringGetTextDatum(entry->key.member) :
								Int32GetDatum(entry->key.slot));
			row = DsyncScanNext(scan);
			DsyncScanEnd(scan);
			if (row != NULL)
			{
				switch (ReapRow(store, row, now, slot, &next))
				{
					case REAP_CLEARED:
						cleared++;
						break;
					case REAP_BUSY:
						busy = true;
						break;
					default:
						break;
				}
			}
		}
		ExpiryMarkBusy(entry, busy ? due : 0);

		if (next != 0)
		{
			entry->deadline = next;
			pairingheap_add(expiry_heap, &entry->node);
		}
		else
			ExpiryForget(entry);
	}

	for (int kind = 2; kind >= 0; kind--)
		if (has[kind])
			DsyncStoreClose(&stores[kind]);
	/* Cleared holders' names go to their first queued waiters now. */
	DsyncQueueGrantFreed(NULL);
	PopActiveSnapshot();
	CommitTransactionCommand();
	slot->reaper_xid = InvalidTransactionId;
	return cleared;
}
