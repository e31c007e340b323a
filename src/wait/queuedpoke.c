/*-------------------------------------------------------------------------
 *
 * queuedpoke.c
 *		What brings the worker to queued waiters: pokes of wake channels,
 *		claim deadlines in the database's slot, and sweeping places that
 *		lapsed.
 *
 * A wake-up of a channel with queued waiters (a commit, rollback or
 * departure that may have freed a name) sets the channel's bit in the
 * database's poke words, unless this backend's commit just granted there
 * or is about to grant itself (an ephemeral release, held back until its
 * grant is tried); the worker takes the bits and grants to the first
 * waiter of each name on them (leases/queuegrant.c, dsync_queue_pass).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "lib/ilist.h"
#include "miscadmin.h"
#include "nodes/pg_list.h"
#include "port/pg_bitutils.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "utils/hsearch.h"
#include "utils/timestamp.h"

#include "queued.h"
#include "queued_int.h"
#include "wait.h"
#include "dbslot.h"
#include "shmem.h"
#include "compat.h"

/* Channels whose queued head this backend's commit just granted. */
static uint64 granted_now[DSYNC_WAKE_CHANNELS / 64];

/*
 * The channel of a name this backend frees at once and then grants to its
 * first queued waiter itself (DsyncQueuedPokeHold), -1 for none; and
 * whether a wake-up meanwhile would have poked the worker for it.
 */
static int	held_channel = -1;
static bool held_poked = false;

/*
 * QueuedWorkerBy
 *		See that this database's worker looks at the queue by t (a claim
 *		deadline): lower the slot's next deadline and wake the worker, or
 *		the launcher if none runs.  In a commit callback: cannot fail.
 */
void
QueuedWorkerBy(TimestampTz t)
{
	DsyncDbSlot *slot = DsyncDbSlotFind(MyDatabaseId);
	uint64		old;

	if (slot == NULL)
		return;
	old = pg_atomic_read_u64(&slot->next_deadline);
	while (old == 0 || (TimestampTz) old > t)
	{
		if (pg_atomic_compare_exchange_u64(&slot->next_deadline, &old, (uint64) t))
		{
			if (slot->pgprocno >= 0)
				SetLatch(&ProcGlobal->allProcs[slot->pgprocno].procLatch);
			else
				DsyncLauncherWake();
			break;
		}
	}
}

/*
 * QueuedNoteGrantedNow
 *		This backend's commit granted to the first queued waiter of a name
 *		on channel: its wake-up need not poke the worker there.
 */
void
QueuedNoteGrantedNow(int channel)
{
	granted_now[channel / 64] |= UINT64CONST(1) << (channel % 64);
}

/*
 * DsyncQueuedPoke
 *		channel was woken (a commit, rollback or departure that may have
 *		freed a name): if a queued waiter may be first on it now and no
 *		grant to one was just committed there, ask this database's worker
 *		to look.
 */
void
DsyncQueuedPoke(int channel)
{
	if (queued_control == NULL ||
		pg_atomic_read_u32(&queued_control->waiting[channel]) == 0)
		return;
	if (granted_now[channel / 64] & (UINT64CONST(1) << (channel % 64)))
		return;
	if (channel == held_channel)
	{
		held_poked = true;
		return;
	}
	QueuedPokeNow(channel);
}

/*
 * QueuedPokeNow
 *		Ask this database's worker to look at channel, if it has queued
 *		waiters: DsyncQueuedPoke without its exceptions, for a poke that
 *		met a grant in progress (repoke).  Cannot fail; takes no lock but
 *		the workers' (shared, to find the slot).
 */
void
QueuedPokeNow(int channel)
{
	DsyncDbSlot *slot;
	uint64		bit = UINT64CONST(1) << (channel % 64);
	int			slotno;

	if (queued_control == NULL ||
		pg_atomic_read_u32(&queued_control->waiting[channel]) == 0)
		return;
	slot = DsyncDbSlotFind(MyDatabaseId);
	if (slot == NULL)
		return;
	slotno = slot - dsync_workers->slots;
	pg_atomic_fetch_or_u64(&queued_control->poked[slotno * POKE_WORDS + channel / 64], bit);
	/*
	 * Due now, in the slot too: a worker leaving just now would otherwise
	 * take the poke with it, and the launcher starts one for what is due.
	 */
	QueuedWorkerBy(GetCurrentTimestamp());
}

/*
 * DsyncQueuedPokeHold
 *		This backend is about to free key's name at once (an ephemeral
 *		release, whose wake-up comes before the grant) and then grant it to
 *		its first queued waiter: hold the worker's poke for the channel
 *		until DsyncQueuedPokeUnhold, so that the worker does not race us
 *		for the grant (the waiter would then learn of it only once the
 *		worker's transaction commits).
 */
void
DsyncQueuedPokeHold(uint64 key)
{
	held_channel = QueuedChannel(key);
	held_poked = false;
}

/*
 * DsyncQueuedPokeUnhold
 *		The grant is made (granted) or not: in the latter case the worker
 *		gets the poke we held back.
 */
void
DsyncQueuedPokeUnhold(bool granted)
{
	int			channel = held_channel;
	bool		poked = held_poked;

	held_channel = -1;
	held_poked = false;
	if (channel >= 0 && poked && !granted)
		DsyncQueuedPoke(channel);
}

/*
 * QueuedMyPokes
 *		The first of this database's poke words, or NULL if it has no slot.
 */
static pg_atomic_uint64 *
QueuedMyPokes(void)
{
	DsyncDbSlot *slot = DsyncDbSlotFind(MyDatabaseId);

	if (queued_control == NULL || slot == NULL)
		return NULL;
	return &queued_control->poked[(slot - dsync_workers->slots) * POKE_WORDS];
}

/*
 * DsyncQueuedWorkDue
 *		Whether this database's worker has queue work now: a poke, or a
 *		claim window that has ended.
 */
bool
DsyncQueuedWorkDue(TimestampTz now)
{
	pg_atomic_uint64 *pokes = QueuedMyPokes();
	TimestampTz claim;

	if (pokes == NULL)
		return false;
	for (int i = 0; i < POKE_WORDS; i++)
		if (pg_atomic_read_u64(&pokes[i]) != 0)
			return true;
	claim = DsyncQueuedNextClaim(MyDatabaseId);
	return claim != 0 && claim <= now;
}

/*
 * DsyncQueuedPokeDone
 *		Forget the channels this backend's commit granted on (called once
 *		its wake-ups are out).
 */
void
DsyncQueuedPokeDone(void)
{
	memset(granted_now, 0, sizeof(granted_now));
	/* An error between hold and unhold: the end of the transaction pokes. */
	DsyncQueuedPokeUnhold(false);
}

/*
 * QueuedNoteRepoke
 *		A poke found no waiter of qname to grant to: if that is because
 *		another backend is granting to its first (a release's or a
 *		renewal's try), and that try fails, the poke must not be lost with
 *		it (QueuedBackInLine).  Under the lock, exclusive.
 */
static void
QueuedNoteRepoke(QueuedName *qname)
{
	dlist_iter	iter;

	dlist_foreach(iter, &qname->waiters)
	{
		QueuedEntry *entry = dlist_container(QueuedEntry, node, iter.cur);

		if (entry->w.state == DSYNC_QUEUED_GRANTING && entry->w.granting_pid != MyProcPid)
		{
			entry->w.repoke = true;
			return;
		}
	}
}

/*
 * DsyncQueuedTakePoked
 *		The first live WAITING entries of this database's names on poked
 *		channels (a list of palloc'd copies); the flags are cleared.
 */
List *
DsyncQueuedTakePoked(void)
{
	HASH_SEQ_STATUS status;
	QueuedName *qname;
	List	   *heads = NIL;
	uint64		chans[POKE_WORDS];
	bool		any = false;
	pg_atomic_uint64 *pokes = QueuedMyPokes();
	TimestampTz now = GetCurrentTimestamp();

	if (pokes == NULL)
		return NIL;
	for (int i = 0; i < POKE_WORDS; i++)
	{
		chans[i] = pg_atomic_read_u64(&pokes[i]) != 0 ?
			pg_atomic_exchange_u64(&pokes[i], 0) : 0;
		any |= chans[i] != 0;
	}
	if (!any)
		return NIL;
	/* Exclusive: a poke that meets a grant in progress is noted on it. */
	LWLockAcquire(queued_control->lock, LW_EXCLUSIVE);
	hash_seq_init(&status, queued_names);
	while ((qname = hash_seq_search(&status)) != NULL)
	{
		QueuedEntry *entry;
		DsyncQueuedWaiter *copy;

		int			channel = QueuedChannel(qname->tag.key);

		if (qname->tag.dbid != MyDatabaseId ||
			(chans[channel / 64] & (UINT64CONST(1) << (channel % 64))) == 0)
			continue;
		entry = QueuedHead(qname->tag.key, false, now);
		if (entry == NULL)
		{
			QueuedNoteRepoke(qname);
			continue;
		}
		copy = palloc(sizeof(DsyncQueuedWaiter));
		*copy = entry->w;
		heads = lappend(heads, copy);
	}
	LWLockRelease(queued_control->lock);
	return heads;
}

/*
 * QueuedSweepLocked
 *		Drop the WAITING entries of database dbid (InvalidOid: of every
 *		database) whose client stopped renewing them; returns how many.
 *		Under the lock, exclusive.
 */
int
QueuedSweepLocked(TimestampTz now, Oid dbid)
{
	HASH_SEQ_STATUS status;
	QueuedEntry *entry;
	List	   *lapsed = NIL;
	ListCell   *lc;
	int			n;

	hash_seq_init(&status, queued_entries);
	while ((entry = hash_seq_search(&status)) != NULL)
		if ((dbid == InvalidOid || entry->w.dbid == dbid) &&
			entry->w.state == DSYNC_QUEUED_WAITING && entry->w.alive_until <= now)
			lapsed = lappend(lapsed, entry);
	/* Removed after the scan: dynahash allows removing only the current one. */
	foreach(lc, lapsed)
		QueuedRemove(lfirst(lc));
	n = list_length(lapsed);
	list_free(lapsed);
	return n;
}

/*
 * DsyncQueuedSweep
 *		Drop this database's WAITING entries whose client stopped renewing
 *		them; returns how many.
 */
int
DsyncQueuedSweep(TimestampTz now)
{
	int			n;

	if (queued_control == NULL)
		return 0;
	LWLockAcquire(queued_control->lock, LW_EXCLUSIVE);
	n = QueuedSweepLocked(now, MyDatabaseId);
	LWLockRelease(queued_control->lock);
	return n;
}

