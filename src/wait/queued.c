/*-------------------------------------------------------------------------
 *
 * queued.c
 *		Waiters queued without a connection: entries in shared memory, in
 *		the same FIFO as blocked backends, granted by whoever frees the name.
 *
 * A client queues (dsync_queue) and goes away; its entry takes a ticket
 * from the counter blocked backends take theirs from, so both kinds are
 * served in arrival order.  The entry stays in line while its client
 * renews it (dsync_claim, within its ttl); one that is not renewed lapses
 * and is skipped and dropped when it would reach the front, or by the
 * worker's sweep, with no timer of its own.
 *
 * Life of an entry:
 *	WAITING		in line.
 *	GRANTING	a transaction that freed the name granted it the lease in the
 *				same transaction (leases/queuegrant.c).  Out of line: a
 *				rollback puts it back (at its old ticket), a commit makes it
 *				GRANTED.
 *	GRANTED		the grant committed.  Its client claims it (dsync_claim: the
 *				entry goes, the lease stays), or the worker passes it on at
 *				claim_by (dsync.claim_window after the commit): the entry
 *				goes and the lease is released, in one transaction that
 *				grants the next in line.
 *
 * This file has the tables and what clients do (join, claim, leave);
 * queuedgrant.c has the grants made in transactions, queuedpoke.c the
 * worker's side (pokes, sweeping).
 *
 * State: two shared hash tables under one LWLock ("dsync queued waiters"):
 * the names with queued waiters (each with its entries in ticket order) and
 * the entries by (database, name, holder).  Per wake channel, a count of
 * WAITING entries (read without the lock: a channel with none costs
 * blocked backends nothing) and a "poked" flag: a wake-up that may have
 * freed a name with queued waiters and granted nobody asks the worker to
 * look (DsyncQueuedPoke).  Per backend, the entries its transaction is
 * granting, with their subtransaction level.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "common/hashfn.h"
#include "lib/ilist.h"
#include "miscadmin.h"
#include "nodes/pg_list.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "queued.h"
#include "queued_int.h"
#include "wait.h"
#include "wait_int.h"
#include "dbslot.h"
#include "settings.h"
#include "shmem.h"
#include "compat.h"

QueuedControl *queued_control = NULL;
HTAB	   *queued_names = NULL;
HTAB	   *queued_entries = NULL;

/*
 * QueuedMax
 *		Entries the tables are sized for (at least one, so that a server
 *		with queueing off still has valid tables).
 */
static int
QueuedMax(void)
{
	return Max(dsync_max_queued_waiters, 1);
}

/*
 * QueuedControlSize
 *		Bytes of the control block, with its poke bits.
 */
static Size
QueuedControlSize(void)
{
	return add_size(offsetof(QueuedControl, poked),
					mul_size(mul_size(dsync_max_databases, POKE_WORDS),
							 sizeof(pg_atomic_uint64)));
}

/*
 * DsyncQueuedShmemSize
 *		Bytes of shared memory for the queued waiters.
 */
Size
DsyncQueuedShmemSize(void)
{
	Size		size = MAXALIGN(QueuedControlSize());

	size = add_size(size, hash_estimate_size(QueuedMax(), sizeof(QueuedName)));
	return add_size(size, hash_estimate_size(QueuedMax(), sizeof(QueuedEntry)));
}

/*
 * DsyncQueuedShmemRequest
 *		Ask for the space and the lock (from the shared memory request hook).
 */
void
DsyncQueuedShmemRequest(void)
{
	RequestAddinShmemSpace(DsyncQueuedShmemSize());
	RequestNamedLWLockTranche(DSYNC_TRANCHE_QUEUED, 1);
}

/*
 * DsyncQueuedShmemInit
 *		Create or attach to the control block and the two tables; the caller
 *		holds AddinShmemInitLock.
 */
void
DsyncQueuedShmemInit(void)
{
	HASHCTL		ctl;
	bool		found;

	queued_control = ShmemInitStruct("dsync queued waiters", QueuedControlSize(), &found);
	if (!found)
	{
		queued_control->lock = &(GetNamedLWLockTranche(DSYNC_TRANCHE_QUEUED))->lock;
		dlist_init(&queued_control->granted);
		pg_atomic_init_u32(&queued_control->ngranted, 0);
		queued_control->full_swept_at = 0;
		for (int i = 0; i < DSYNC_WAKE_CHANNELS; i++)
			pg_atomic_init_u32(&queued_control->waiting[i], 0);
		for (int i = 0; i < dsync_max_databases * POKE_WORDS; i++)
			pg_atomic_init_u64(&queued_control->poked[i], 0);
	}
	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = sizeof(QueuedNameTag);
	ctl.entrysize = sizeof(QueuedName);
	queued_names = ShmemInitHash("dsync queued names", QueuedMax(), QueuedMax(), &ctl,
								 HASH_ELEM | HASH_BLOBS | HASH_FIXED_SIZE);
	ctl.keysize = sizeof(QueuedTag);
	ctl.entrysize = sizeof(QueuedEntry);
	queued_entries = ShmemInitHash("dsync queued entries", QueuedMax(), QueuedMax(), &ctl,
								   HASH_ELEM | HASH_BLOBS | HASH_FIXED_SIZE);
}

/*
 * QueuedMakeTag
 *		The hash keys of (this database, key, holder).
 */
void
QueuedMakeTag(QueuedTag *tag, QueuedNameTag *name_tag, uint64 key, const char *holder,
			  size_t holder_len)
{
	memset(tag, 0, sizeof(*tag));
	tag->dbid = MyDatabaseId;
	tag->key = key;
	tag->holder_key = hash_bytes_extended((const unsigned char *) holder, holder_len, key);
	if (name_tag)
	{
		memset(name_tag, 0, sizeof(*name_tag));
		name_tag->dbid = MyDatabaseId;
		name_tag->key = key;
	}
}

/*
 * QueuedFind
 *		The entry of (name, holder) in this database, checked against the
 *		strings (the tag is a hash), or NULL.  Under the lock.
 */
QueuedEntry *
QueuedFind(text *name, text *holder, uint64 key)
{
	QueuedTag	tag;
	QueuedEntry *entry;

	QueuedMakeTag(&tag, NULL, key, VARDATA_ANY(holder), VARSIZE_ANY_EXHDR(holder));
	entry = hash_search(queued_entries, &tag, HASH_FIND, NULL);
	if (entry == NULL)
		return NULL;
	if (strlen(entry->w.holder) != VARSIZE_ANY_EXHDR(holder) ||
		memcmp(entry->w.holder, VARDATA_ANY(holder), VARSIZE_ANY_EXHDR(holder)) != 0 ||
		strlen(entry->w.name) != VARSIZE_ANY_EXHDR(name) ||
		memcmp(entry->w.name, VARDATA_ANY(name), VARSIZE_ANY_EXHDR(name)) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("dsync queued waiter hash collision"),
				 errhint("Use another holder name.")));
	return entry;
}

/*
 * QueuedUnlink
 *		Take an entry out of its name's line and its table (and out of the
 *		granted list, or the waiting count, as its state says), leaving
 *		the name's entry.  Under the lock, exclusive.
 */
void
QueuedUnlink(QueuedEntry *entry)
{
	QueuedTag	tag = entry->tag;

	if (entry->w.state == DSYNC_QUEUED_WAITING || entry->w.state == DSYNC_QUEUED_GRANTING)
		pg_atomic_fetch_sub_u32(&queued_control->waiting[QueuedChannel(tag.key)], 1);
	if (entry->w.state == DSYNC_QUEUED_GRANTED || entry->w.state == DSYNC_QUEUED_PASSING)
	{
		dlist_delete(&entry->granted_node);
		pg_atomic_fetch_sub_u32(&queued_control->ngranted, 1);
	}
	dlist_delete(&entry->node);
	(void) hash_search(queued_entries, &tag, HASH_REMOVE, NULL);
}

/*
 * QueuedDropNameIfEmpty
 *		Drop a name's entry once it has no queued waiters.  Under the lock,
 *		exclusive.
 */
void
QueuedDropNameIfEmpty(uint64 key, Oid dbid)
{
	QueuedNameTag name_tag;
	QueuedName *qname;

	memset(&name_tag, 0, sizeof(name_tag));
	name_tag.dbid = dbid;
	name_tag.key = key;
	qname = hash_search(queued_names, &name_tag, HASH_FIND, NULL);
	if (qname != NULL && dlist_is_empty(&qname->waiters))
		(void) hash_search(queued_names, &name_tag, HASH_REMOVE, NULL);
}

/*
 * QueuedRemove
 *		Take an entry out of both tables (and out of the granted list, or
 *		the waiting count, as its state says).  Under the lock, exclusive.
 */
void
QueuedRemove(QueuedEntry *entry)
{
	QueuedTag	tag = entry->tag;

	QueuedUnlink(entry);
	QueuedDropNameIfEmpty(tag.key, tag.dbid);
}

/*
 * DsyncQueuedJoin
 *		Queue (name, holder) at the back of the name's line, or renew its
 *		place if it is queued already (same ticket).  Returns the entry's
 *		state before the call (GONE: queued now) with a copy in *out.
 */
DsyncQueuedState
DsyncQueuedJoin(text *name, text *holder, uint64 key, int mode, bool durable,
				int64 ttl_usec, const char *channel, DsyncQueuedWaiter *out)
{
	QueuedTag	tag;
	QueuedNameTag name_tag;
	QueuedEntry *entry;
	QueuedName *qname;
	bool		found;
	TimestampTz now = GetCurrentTimestamp();

	if (dsync_max_queued_waiters == 0)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("queueing without a connection is turned off"),
				 errhint("Set dsync.max_queued_waiters above 0 and restart the server.")));
	QueuedMakeTag(&tag, &name_tag, key, VARDATA_ANY(holder), VARSIZE_ANY_EXHDR(holder));
	LWLockAcquire(queued_control->lock, LW_EXCLUSIVE);
	entry = QueuedFind(name, holder, key);
	if (entry != NULL && entry->w.state == DSYNC_QUEUED_WAITING && entry->w.alive_until <= now)
	{
		/* A lapsed place is not revived: queue at the back, as anyone new. */
		QueuedRemove(entry);
		entry = NULL;
	}
	if (entry != NULL && entry->w.userid != GetUserId())
	{
		Oid			owner = entry->w.userid;

		/* Checked without the lock (a catalog lookup), then looked up again. */
		LWLockRelease(queued_control->lock);
		if (!has_privs_of_role(GetUserId(), owner))
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_IN_USE),
					 errmsg("holder \"%s\" is queued for lease \"%s\" by another role",
							text_to_cstring(holder), text_to_cstring(name)),
					 errhint("Give each client a holder name of its own.")));
		LWLockAcquire(queued_control->lock, LW_EXCLUSIVE);
		entry = QueuedFind(name, holder, key);
	}
	if (entry != NULL && entry->w.state == DSYNC_QUEUED_WAITING && entry->w.alive_until <= now)
	{
		QueuedRemove(entry);	/* it lapsed while we checked the role */
		entry = NULL;
	}
	if (entry != NULL)
	{
		DsyncQueuedState was = entry->w.state;

		if (was == DSYNC_QUEUED_WAITING)
			entry->w.alive_until = now + ttl_usec;
		*out = entry->w;
		LWLockRelease(queued_control->lock);
		return was;
	}
	for (int attempt = 0;; attempt++)
	{
		entry = hash_search(queued_entries, &tag, HASH_ENTER_NULL, &found);
		qname = entry == NULL ? NULL :
			hash_search(queued_names, &name_tag, HASH_ENTER_NULL, &found);
		if (qname != NULL)
			break;
		if (entry != NULL)
			(void) hash_search(queued_entries, &tag, HASH_REMOVE, NULL);
		/*
		 * Full: lapsed places nobody swept yet make room, in any database.
		 * A scan of the whole table, so at most once in a while: a table
		 * full of live places would otherwise be scanned by every refusal.
		 */
		if (attempt > 0 || now < queued_control->full_swept_at + QUEUED_FULL_SWEEP_USEC)
			break;
		queued_control->full_swept_at = now;
		if (QueuedSweepLocked(now, InvalidOid) == 0)
			break;
	}
	if (qname == NULL)
	{
		LWLockRelease(queued_control->lock);
		ereport(ERROR,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("too many queued waiters"),
				 errdetail("dsync.max_queued_waiters (%d) are queued in all databases.",
						   dsync_max_queued_waiters),
				 errhint("Raise dsync.max_queued_waiters, or wait in a backend (dsync_acquire with a wait).")));
	}
	if (!found)
		dlist_init(&qname->waiters);
	memset(&entry->w, 0, sizeof(entry->w));
	entry->w.state = DSYNC_QUEUED_WAITING;
	entry->w.dbid = MyDatabaseId;
	entry->w.userid = GetUserId();
	entry->w.key = key;
	entry->w.ticket = pg_atomic_fetch_add_u64(&dsync_shared->next_ticket, 1);
	entry->w.mode = mode;
	entry->w.durable = durable;
	entry->w.ttl_usec = ttl_usec;
	entry->w.commit_level = synchronous_commit;
	entry->w.since = now;
	entry->w.alive_until = now + ttl_usec;
	strlcpy(entry->w.channel, channel, sizeof(entry->w.channel));
	text_to_cstring_buffer(name, entry->w.name, sizeof(entry->w.name));
	text_to_cstring_buffer(holder, entry->w.holder, sizeof(entry->w.holder));
	/* Tickets rise under the lock, so the tail is the right place. */
	dlist_push_tail(&qname->waiters, &entry->node);
	pg_atomic_fetch_add_u32(&queued_control->waiting[QueuedChannel(key)], 1);
	*out = entry->w;
	LWLockRelease(queued_control->lock);
	return DSYNC_QUEUED_GONE;
}

/*
 * QueuedHead
 *		The first live WAITING entry of key in this database, dropping the
 *		lapsed ones before it if the lock is held exclusively.  Under the
 *		lock.
 */
QueuedEntry *
QueuedHead(uint64 key, bool exclusive, TimestampTz now)
{
	QueuedNameTag name_tag;
	QueuedName *qname;
	dlist_mutable_iter iter;

	memset(&name_tag, 0, sizeof(name_tag));
	name_tag.dbid = MyDatabaseId;
	name_tag.key = key;
	qname = hash_search(queued_names, &name_tag, HASH_FIND, NULL);
	if (qname == NULL)
		return NULL;
	dlist_foreach_modify(iter, &qname->waiters)
	{
		QueuedEntry *entry = dlist_container(QueuedEntry, node, iter.cur);

		/*
		 * Being granted by another backend: nobody after it is first
		 * meanwhile.  One this backend grants (a shared holder, a permit)
		 * leaves room for the next.
		 */
		if (entry->w.state == DSYNC_QUEUED_GRANTING)
		{
			if (entry->w.granting_pid != MyProcPid)
				return NULL;
			continue;
		}
		if (entry->w.state != DSYNC_QUEUED_WAITING)
			continue;
		if (entry->w.alive_until > now)
			return entry;
		if (exclusive)
			QueuedUnlink(entry);
	}
	if (exclusive)
		QueuedDropNameIfEmpty(key, MyDatabaseId);
	return NULL;
}

/*
 * DsyncQueuedAny
 *		Whether key's channel has WAITING entries (a moment's reading).
 */
bool
DsyncQueuedAny(uint64 key)
{
	return queued_control != NULL &&
		pg_atomic_read_u32(&queued_control->waiting[QueuedChannel(key)]) > 0;
}

/*
 * DsyncQueuedFirstTicket
 *		The ticket of the first live queued waiter of key in this database,
 *		PG_UINT64_MAX if none: blocked backends with a later ticket let it
 *		go first.
 */
uint64
DsyncQueuedFirstTicket(uint64 key)
{
	QueuedEntry *entry;
	uint64		ticket = PG_UINT64_MAX;

	if (!DsyncQueuedAny(key))
		return ticket;
	LWLockAcquire(queued_control->lock, LW_SHARED);
	entry = QueuedHead(key, false, GetCurrentTimestamp());
	if (entry != NULL)
		ticket = entry->w.ticket;
	LWLockRelease(queued_control->lock);
	return ticket;
}

/*
 * DsyncQueuedFirst
 *		The queued waiter of key that is first in the name's whole line
 *		(no blocked backend ahead of it, none stepped aside counted), if
 *		any: the one a transaction that frees the name grants to.
 */
bool
DsyncQueuedFirst(uint64 key, DsyncQueuedWaiter *out)
{
	QueuedEntry *entry;
	bool		ahead = false;

	if (!DsyncQueuedAny(key))
		return false;
	LWLockAcquire(queued_control->lock, LW_EXCLUSIVE);
	entry = QueuedHead(key, true, GetCurrentTimestamp());
	if (entry != NULL)
		*out = entry->w;
	LWLockRelease(queued_control->lock);
	if (entry == NULL)
		return false;

	LWLockAcquire(dsync_shared->lock, LW_SHARED);
	for (int i = 0; i < dsync_shared->nslots && !ahead; i++)
	{
		DsyncWaiterSlot *slot = &dsync_shared->slots[i];

		ahead = slot->in_use && !slot->aside && slot->key == key &&
			slot->dbid == MyDatabaseId && slot->roleid == InvalidOid &&
			slot->ticket < out->ticket;
	}
	LWLockRelease(dsync_shared->lock);
	return !ahead;
}

/*
 * QueuedEntryOf
 *		The entry a copy was made from, if it is still there.  Under the
 *		lock.
 */
QueuedEntry *
QueuedEntryOf(const DsyncQueuedWaiter *waiter)
{
	QueuedTag	tag;
	QueuedEntry *entry;

	QueuedMakeTag(&tag, NULL, waiter->key, waiter->holder, strlen(waiter->holder));
	entry = hash_search(queued_entries, &tag, HASH_FIND, NULL);
	if (entry == NULL || entry->w.ticket != waiter->ticket)
		return NULL;
	return entry;
}

/*
 * QueuedOwnerFor
 *		The role that queued (name, holder), if the caller acts for it (is
 *		a member of it, as for leases), else InvalidOid.  Looked up under
 *		the lock and checked after it is released (a catalog lookup); the
 *		caller acts only on an entry of that same role.
 */
static Oid
QueuedOwnerFor(text *name, text *holder, uint64 key)
{
	QueuedEntry *entry;
	Oid			owner = InvalidOid;

	LWLockAcquire(queued_control->lock, LW_SHARED);
	entry = QueuedFind(name, holder, key);
	if (entry != NULL)
		owner = entry->w.userid;
	LWLockRelease(queued_control->lock);
	if (OidIsValid(owner) && owner != GetUserId() && !has_privs_of_role(GetUserId(), owner))
		return InvalidOid;
	return owner;
}

/*
 * DsyncQueuedClaim
 *		The client of (name, holder) asks where it stands: WAITING (its
 *		place renewed for another ttl), GRANTING (granted by a transaction
 *		not yet committed: ask again), GRANTED (claimed now: the entry is
 *		gone, the lease is the client's, *out has the token) or GONE.
 */
DsyncQueuedState
DsyncQueuedClaim(text *name, text *holder, uint64 key, DsyncQueuedWaiter *out)
{
	QueuedEntry *entry;
	DsyncQueuedState state = DSYNC_QUEUED_GONE;
	TimestampTz now = GetCurrentTimestamp();
	Oid			owner = QueuedOwnerFor(name, holder, key);

	if (!OidIsValid(owner))
		return state;
	LWLockAcquire(queued_control->lock, LW_EXCLUSIVE);
	entry = QueuedFind(name, holder, key);
	if (entry != NULL && entry->w.userid == owner)
	{
		state = entry->w.state;
		if (state == DSYNC_QUEUED_GRANTING && QueuedSettledGrantOf(entry))
		{
			/* Committed, not settled yet: taken up all the same. */
			*out = entry->w;
			DsyncQueuedTakeUp(entry);
			LWLockRelease(queued_control->lock);
			return DSYNC_QUEUED_GRANTED;
		}
		if (state == DSYNC_QUEUED_PASSING)
			state = DSYNC_QUEUED_GONE;	/* too late: being passed on */
		else if (state == DSYNC_QUEUED_WAITING && entry->w.alive_until <= now)
		{
			QueuedRemove(entry);
			state = DSYNC_QUEUED_GONE;
		}
		else
		{
			if (state == DSYNC_QUEUED_WAITING)
				entry->w.alive_until = now + entry->w.ttl_usec;
			*out = entry->w;
			if (state == DSYNC_QUEUED_GRANTED)
				QueuedRemove(entry);
		}
	}
	LWLockRelease(queued_control->lock);
	return state;
}

/*
 * DsyncQueuedLeave
 *		The client of (name, holder) gives up: a WAITING entry leaves the
 *		line, a GRANTED one goes (the caller releases its lease, token in
 *		*out), a GRANTING one is passed on as soon as its grant commits.
 *		Returns the state it was in.
 */
DsyncQueuedState
DsyncQueuedLeave(text *name, text *holder, uint64 key, DsyncQueuedWaiter *out)
{
	QueuedEntry *entry;
	DsyncQueuedState state = DSYNC_QUEUED_GONE;
	Oid			owner = QueuedOwnerFor(name, holder, key);

	if (!OidIsValid(owner))
		return state;
	LWLockAcquire(queued_control->lock, LW_EXCLUSIVE);
	entry = QueuedFind(name, holder, key);
	if (entry != NULL && entry->w.userid == owner)
	{
		state = entry->w.state;
		*out = entry->w;
		if (state == DSYNC_QUEUED_GRANTING)
			entry->w.cancelled = true;
		else if (state == DSYNC_QUEUED_PASSING)
			state = DSYNC_QUEUED_GONE;	/* the worker lets it go already */
		else
			QueuedRemove(entry);
	}
	LWLockRelease(queued_control->lock);
	if (state == DSYNC_QUEUED_WAITING)
		DsyncWakeNow(key);		/* a backend behind it may be first now */
	return state;
}

/*
 * DsyncQueuedForgetGrant
 *		dsync_force_release took the lease from holder: a grant made to it
 *		as a queued waiter and not taken up is not to be claimed any more.
 */
void
DsyncQueuedForgetGrant(text *name, text *holder)
{
	QueuedEntry *entry;
	uint64		key = DsyncWaitKey(name);

	if (!DsyncQueuedAny(key) && pg_atomic_read_u32(&queued_control->ngranted) == 0)
		return;
	LWLockAcquire(queued_control->lock, LW_EXCLUSIVE);
	entry = QueuedFind(name, holder, key);
	if (entry != NULL && entry->w.state == DSYNC_QUEUED_GRANTED)
		QueuedRemove(entry);
	else if (entry != NULL && entry->w.state == DSYNC_QUEUED_GRANTING)
		entry->w.cancelled = true;
	LWLockRelease(queued_control->lock);
}

/*
 * DsyncQueuedEvict
 *		dsync_force_release(..., cancel_waits => true): the places in key's
 *		line of the role owner go (as its blocked backends' waits end).
 */
void
DsyncQueuedEvict(uint64 key, Oid owner)
{
	QueuedNameTag name_tag;
	QueuedName *qname;
	dlist_mutable_iter iter;

	if (!DsyncQueuedAny(key))
		return;
	memset(&name_tag, 0, sizeof(name_tag));
	name_tag.dbid = MyDatabaseId;
	name_tag.key = key;
	LWLockAcquire(queued_control->lock, LW_EXCLUSIVE);
	qname = hash_search(queued_names, &name_tag, HASH_FIND, NULL);
	if (qname != NULL)
	{
		dlist_foreach_modify(iter, &qname->waiters)
		{
			QueuedEntry *entry = dlist_container(QueuedEntry, node, iter.cur);

			if (entry->w.userid == owner && entry->w.state == DSYNC_QUEUED_WAITING)
				QueuedUnlink(entry);
			else if (entry->w.userid == owner && entry->w.state == DSYNC_QUEUED_GRANTING)
				entry->w.cancelled = true;
		}
		QueuedDropNameIfEmpty(key, MyDatabaseId);
	}
	LWLockRelease(queued_control->lock);
}

/*
 * DsyncQueuedDrop
 *		Take a waiter out of the line whatever role asks (a grant to it
 *		failed with an error: queuegrant.c), unless it is granted already.
 */
void
DsyncQueuedDrop(const DsyncQueuedWaiter *waiter)
{
	QueuedEntry *entry;

	LWLockAcquire(queued_control->lock, LW_EXCLUSIVE);
	entry = QueuedEntryOf(waiter);
	if (entry != NULL && entry->w.state == DSYNC_QUEUED_WAITING)
		QueuedRemove(entry);
	LWLockRelease(queued_control->lock);
}

/*
 * DsyncQueuedCopyAll
 *		Copies of this database's entries (for dsync_waiters); returns how
 *		many, *out palloc'd.
 */
int
DsyncQueuedCopyAll(DsyncQueuedWaiter **out)
{
	HASH_SEQ_STATUS status;
	QueuedEntry *entry;
	int			n = 0;
	int			size = 16;
	TimestampTz now = GetCurrentTimestamp();

	*out = palloc(sizeof(DsyncQueuedWaiter) * size);
	if (queued_control == NULL)
		return 0;
	LWLockAcquire(queued_control->lock, LW_SHARED);
	hash_seq_init(&status, queued_entries);
	while ((entry = hash_seq_search(&status)) != NULL)
	{
		if (entry->w.dbid != MyDatabaseId)
			continue;
		if (entry->w.state == DSYNC_QUEUED_WAITING && entry->w.alive_until <= now)
			continue;
		if (n == size)
		{
			size *= 2;
			/* repalloc may fail: the lock goes with the error. */
			*out = repalloc(*out, sizeof(DsyncQueuedWaiter) * size);
		}
		(*out)[n++] = entry->w;
	}
	LWLockRelease(queued_control->lock);
	return n;
}

/*
 * DsyncQueuedForgetDatabase
 *		DROP EXTENSION committed: the database's entries go.
 */
void
DsyncQueuedForgetDatabase(Oid dbid)
{
	HASH_SEQ_STATUS status;
	QueuedEntry *entry;
	QueuedEntry *gone[64];
	int			n;

	if (queued_control == NULL)
		return;
	LWLockAcquire(queued_control->lock, LW_EXCLUSIVE);
	do
	{
		n = 0;
		hash_seq_init(&status, queued_entries);
		while ((entry = hash_seq_search(&status)) != NULL)
		{
			if (entry->w.dbid != dbid)
				continue;
			gone[n++] = entry;
			if (n == lengthof(gone))
			{
				hash_seq_term(&status);
				break;
			}
		}
		for (int i = 0; i < n; i++)
			QueuedRemove(gone[i]);
	} while (n == lengthof(gone));
	LWLockRelease(queued_control->lock);
}
