/*-------------------------------------------------------------------------
 *
 * fencing.c
 *		Fencing tokens that never repeat, across crashes and failover.
 *
 * Tokens come from the sequence dsync_fencing_seq, whose increment (65,536
 * since 1.3; 1,024 before) makes each nextval() a block of tokens.  Blocks are handed out token by
 * token from shared memory, under a spinlock, so the tokens of a database
 * rise in the order they are handed out across all backends; a grant takes
 * its token only once it holds the row lock that serialises grants of its
 * lease, so each lease's tokens also rise in grant order.  Shared memory
 * is lost in a crash, but the next block then comes from the sequence,
 * above every block used before.
 *
 * That relies on the sequence never going backwards, which needs care:
 *
 *	- A sequence WAL-logs a value some way ahead (32 calls) of what it hands
 *	  out and, after a crash, resumes from the logged value, so it never goes
 *	  backwards provided that WAL survived.  With synchronous_commit = off
 *	  nothing forces it to disk.  So before a block is used, WAL is flushed
 *	  up to the sequence page's LSN: the page's, not only what this backend
 *	  wrote, as another backend may have logged the batch and not flushed it
 *	  yet.  While the sequence is behind the clock (the usual case, below)
 *	  every fetch moves it up with setval, which writes WAL: one flush per
 *	  block.  Blocks are big so that this is rare (at 40,000 grants a
 *	  second, one flush every 1.6 s), and only one backend of a database
 *	  fetches at a time, so the sequence moves by a block per block used.
 *
 *	- With a synchronous standby, a commit waits for the standby only if
 *	  the session's synchronous_commit asks for it, and any role can turn
 *	  that off for itself, even after the grant (SET LOCAL).  And a block
 *	  installed by one session is used by others.  So whenever a
 *	  synchronous standby is configured, a block is installed only once
 *	  the standby has confirmed its WAL, whoever installs it.  If that wait
 *	  is cancelled, no token is handed out (the client sees PostgreSQL's
 *	  usual warning that the "transaction has already committed locally",
 *	  which here is not so: only the sequence moved on).  Like a
 *	  synchronous commit, the wait lasts as long as no synchronous standby
 *	  answers.
 *
 *	- Fetching a block (nextval, flush, standby) happens outside the
 *	  spinlock, so a slow fetcher can come back with a block older than one
 *	  another backend has installed and used meanwhile.  Blocks are
 *	  installed only in increasing order, and a slot records a generation
 *	  that changes when it is given to another database, so a block that
 *	  went stale in flight is dropped and the fetch repeated.
 *
 * Blocks left unused (a crash, a failover, an evicted slot) are skipped:
 * tokens are increasing, not dense.
 *
 * The server clock is a floor under every block: a block starts at the
 * later of the sequence's next value and the current time in microseconds
 * (and the sequence is moved up to it).  The sequence alone goes back
 * when an older state of the database comes back: pg_restore --clean of an
 * older dump, point-in-time recovery, or failover to an asynchronous
 * standby that had not received the latest blocks.  Time does not: tokens
 * are handed out far slower than one per microsecond, so every token ever
 * issued is below the clock reading of the moment it was issued, and any
 * block fetched later starts above it, whatever the sequence says.  That
 * holds as long as the clock of the server that fetches the block is not
 * behind, by more than the time that has passed since, the clock of the
 * server that issued the earlier tokens (clocks kept by NTP are).  The
 * sequence stays the floor for a clock that is set back on one server.
 * Block fetches are serialised per database by a heavyweight lock, held
 * only while the sequence moves, so that two fetchers cannot move it past
 * each other.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/relation.h"
#include "access/xact.h"
#include "catalog/pg_sequence.h"
#include "access/xlog.h"
#include "commands/sequence.h"
#include "miscadmin.h"
#include "replication/syncrep.h"
#include "replication/walsender.h"
#include "replication/walsender_private.h"
#include "storage/bufmgr.h"
#include "storage/lwlock.h"
#include "storage/spin.h"
#include "catalog/pg_class.h"
#include "storage/lmgr.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/syscache.h"
#include "utils/guc.h"
#include "utils/rel.h"

#include "catalog.h"
#include "fencing.h"
#include "shmem.h"
#include "syncstandby.h"

/*
 * FencingSequenceLsn
 *		The LSN of the last WAL record that changed the sequence's page.
 *
 * FencingNext has just locked and used the sequence, so its relation
 * lock is held and the relation can be opened without another lock.
 */
static XLogRecPtr
FencingSequenceLsn(Oid seqoid)
{
	Relation	seqrel = relation_open(seqoid, NoLock);
	Buffer		buffer = ReadBuffer(seqrel, 0);
	XLogRecPtr	lsn = BufferGetLSNAtomic(buffer);

	ReleaseBuffer(buffer);
	relation_close(seqrel, NoLock);
	return lsn;
}

/*
 * FencingWaitForStandby
 *		Wait until the synchronous standbys have flushed lsn, whatever this
 *		session's synchronous_commit says.
 *
 * SyncRepWaitForLSN takes its mode from synchronous_commit, so the setting
 * is raised for the duration of the wait (and restored as a function's SET
 * clause would be).  A cancelled wait returns with a warning; then the
 * token must not be used, so that is an error.
 */
static void
FencingWaitForStandby(XLogRecPtr lsn)
{
	int			save_nestlevel;

	if (max_wal_senders == 0 || DsyncStandbyConfirmed(lsn, SYNC_REP_WAIT_FLUSH))
		return;

	/*
	 * SyncRepWaitForLSN must run with interrupts held, as at commit: it
	 * handles cancel and termination itself, and an error thrown from
	 * inside it would leave this backend in the shared wait queue.
	 */
	save_nestlevel = NewGUCNestLevel();
	(void) set_config_option("synchronous_commit", "on", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	HOLD_INTERRUPTS();
	SyncRepWaitForLSN(lsn, false);
	RESUME_INTERRUPTS();
	AtEOXact_GUC(true, save_nestlevel);

	CHECK_FOR_INTERRUPTS();
	if (!DsyncStandbyConfirmed(lsn, SYNC_REP_WAIT_FLUSH))
		ereport(ERROR,
				(errcode(ERRCODE_QUERY_CANCELED),
				 errmsg("canceled waiting for the synchronous standby to confirm a fencing token"),
				 errdetail("A token the standby has not confirmed could be handed out again after failover.")));
}

/*
 * FencingSysCache
 *		The sequence's entry in a syscache (pg_class or pg_sequence); the
 *		caller releases it.  Its absence is an internal error: the catalog
 *		entry was found a moment ago.
 */
static HeapTuple
FencingSysCache(int cacheid, Oid seqoid)
{
	HeapTuple	tuple = SearchSysCache1(cacheid, ObjectIdGetDatum(seqoid));

	if (!HeapTupleIsValid(tuple))
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg_internal("cache lookup failed for sequence %u", seqoid)));
	return tuple;
}

/*
 * FencingSequenceIncrement
 *		The sequence's increment: the size of the block one nextval()
 *		reserves.  Read from the catalog rather than assumed, so that an
 *		altered sequence can never make two blocks overlap.
 */
static int64
FencingSequenceIncrement(Oid seqoid)
{
	HeapTuple	tuple = FencingSysCache(SEQRELID, seqoid);
	int64		increment;

	increment = ((Form_pg_sequence) GETSTRUCT(tuple))->seqincrement;
	ReleaseSysCache(tuple);
	if (increment < 1)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("sequence \"dsync_fencing_seq\" must have a positive increment"),
				 errhint("Do not alter the dsync extension's objects; reinstall it.")));
	return increment;
}

/* Lock class of the per-database block fetch lock (see FencingNext). */
#define DSYNC_FENCING_LOCK_CLASS	0x6480

/*
 * FencingAsOwner
 *		setval(seqoid, value) when set, else pg_sequence_last_value(seqoid)
 *		(NULL, *isnull, if the sequence was never used), called as the
 *		sequence's owner: callers have no rights on dsync's sequences (the
 *		SQL functions are the gate), and both functions check them.
 */
static Datum
FencingAsOwner(Oid seqoid, bool set, int64 value, bool *isnull)
{
	HeapTuple	tuple = FencingSysCache(RELOID, seqoid);
	Oid			owner;
	Oid			saved_userid;
	int			saved_secctx;
	Datum		result = (Datum) 0;

	owner = ((Form_pg_class) GETSTRUCT(tuple))->relowner;
	ReleaseSysCache(tuple);

	*isnull = false;
	GetUserIdAndSecContext(&saved_userid, &saved_secctx);
	SetUserIdAndSecContext(owner, saved_secctx | SECURITY_LOCAL_USERID_CHANGE);
	PG_TRY();
	{
		if (set)
			result = DirectFunctionCall3(setval3_oid, ObjectIdGetDatum(seqoid),
										 Int64GetDatum(value), BoolGetDatum(true));
		else
		{
			LOCAL_FCINFO(fcinfo, 1);

			InitFunctionCallInfoData(*fcinfo, NULL, 1, InvalidOid, NULL, NULL);
			fcinfo->args[0].value = ObjectIdGetDatum(seqoid);
			fcinfo->args[0].isnull = false;
			result = pg_sequence_last_value(fcinfo);
			*isnull = fcinfo->isnull;
		}
	}
	PG_FINALLY();
	{
		SetUserIdAndSecContext(saved_userid, saved_secctx);
	}
	PG_END_TRY();
	return result;
}

/*
 * FencingSetval
 *		Move the sequence up to value.
 */
static void
FencingSetval(Oid seqoid, int64 value)
{
	bool		isnull;

	(void) FencingAsOwner(seqoid, true, value, &isnull);
}

/*
 * DsyncSequenceNextAtClock
 *		nextval() of one of dsync's sequences, but at least the clock's
 *		reading in microseconds (the sequence is moved up to it).  Numbers
 *		handed out far slower than one a microsecond are then never handed
 *		out again, even when an older state of the database comes back
 *		(failover to an asynchronous standby that missed the latest ones,
 *		point-in-time recovery): the clock has moved on since.  The caller
 *		needs no rights on the sequence and makes the value durable.
 */
int64
DsyncSequenceNextAtClock(Oid seqoid)
{
	int64		value;
	TimestampTz clock;

	value = nextval_internal(seqoid, false);
	clock = GetCurrentTimestamp();
	if (value < clock)
	{
		/* The sequence is behind the clock: restored, or simply idle. */
		FencingSetval(seqoid, clock);
		value = clock;
	}
	return value;
}

/*
 * DsyncSequenceSetDurably
 *		setval() of one of dsync's sequences, as its owner, made durable
 *		locally and on synchronous standbys before returning, whatever the
 *		caller's transaction and synchronous_commit do next.
 */
void
DsyncSequenceSetDurably(Oid seqoid, int64 value)
{
	XLogRecPtr	lsn;

	FencingSetval(seqoid, value);
	lsn = FencingSequenceLsn(seqoid);
	XLogFlush(lsn);
	FencingWaitForStandby(lsn);
}

/*
 * DsyncSequenceLastValue
 *		The last value of one of dsync's sequences, read as its owner (the
 *		caller has no rights on it); 0 if it was never used.
 */
int64
DsyncSequenceLastValue(Oid seqoid)
{
	bool		isnull;
	Datum		value = FencingAsOwner(seqoid, false, 0, &isnull);

	return isnull ? 0 : DatumGetInt64(value);
}

/*
 * FencingFindSlot
 *		Under the spinlock: this database's slot, or NULL.
 */
static DsyncFencingBlock *
FencingFindSlot(Oid seqoid)
{
	for (int i = 0; i < DSYNC_FENCING_SLOTS; i++)
	{
		DsyncFencingBlock *block = &dsync_shared->fencing[i];

		if (block->dbid == MyDatabaseId && block->seqrelid == seqoid)
			return block;
	}
	return NULL;
}

/*
 * FencingClaimSlot
 *		Under the spinlock: this database's slot, creating it (empty) if
 *		need be, in a free slot or, when all are taken, in another
 *		database's, whose next block then simply starts afresh.
 */
static DsyncFencingBlock *
FencingClaimSlot(Oid seqoid)
{
	DsyncFencingBlock *block = FencingFindSlot(seqoid);

	if (block != NULL)
		return block;
	for (int i = 0; i < DSYNC_FENCING_SLOTS && block == NULL; i++)
		if (dsync_shared->fencing[i].dbid == InvalidOid)
			block = &dsync_shared->fencing[i];
	if (block == NULL)
	{
		block = &dsync_shared->fencing[dsync_shared->fencing_victim];
		dsync_shared->fencing_victim = (dsync_shared->fencing_victim + 1) % DSYNC_FENCING_SLOTS;
	}
	block->dbid = MyDatabaseId;
	block->seqrelid = seqoid;
	block->generation++;
	block->next = 0;
	block->limit = 0;
	return block;
}

/*
 * FencingNext
 *		A new token, greater than every token handed out before in this
 *		database, from a block made durable (locally and on synchronous
 *		standbys) before any of its tokens was handed out.  Unless take,
 *		only make sure the database has a block with a token left, and
 *		return 0.
 */
static int64
FencingNext(const DsyncCatalog *catalog, bool take)
{
	Oid			seqoid = catalog->fencing_seq;

	for (;;)
	{
		DsyncFencingBlock *block;
		uint64		generation;
		int64		start;
		int64		size;
		XLogRecPtr	lsn;
		LOCKTAG		tag;
		bool		refilled;

		CHECK_FOR_INTERRUPTS();

		SpinLockAcquire(&dsync_shared->fencing_lock);
		block = FencingClaimSlot(seqoid);
		if (block->next < block->limit)
		{
			int64		token = take ? block->next++ : 0;

			SpinLockRelease(&dsync_shared->fencing_lock);
			return token;
		}
		generation = block->generation;
		SpinLockRelease(&dsync_shared->fencing_lock);

		/*
		 * One fetch at a time per database, held until the block is in:
		 * backends that found the block empty together would otherwise
		 * each fetch one and move the sequence ahead by a block each, and
		 * a sequence ahead of the clock weakens the clock floor.
		 */
		SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, seqoid, 0, DSYNC_FENCING_LOCK_CLASS);
		(void) LockAcquire(&tag, ExclusiveLock, false, false);
		SpinLockAcquire(&dsync_shared->fencing_lock);
		refilled = block->generation == generation && block->dbid == MyDatabaseId &&
			block->seqrelid == seqoid && block->next < block->limit;
		SpinLockRelease(&dsync_shared->fencing_lock);
		if (refilled)
		{
			LockRelease(&tag, ExclusiveLock, false);
			continue;
		}

		/* The caller has no rights on the sequence; the SQL function is the gate. */
		size = FencingSequenceIncrement(seqoid);
		start = DsyncSequenceNextAtClock(seqoid);
		lsn = FencingSequenceLsn(seqoid);
		XLogFlush(lsn);
		FencingWaitForStandby(lsn);

		LockRelease(&tag, ExclusiveLock, false);
		SpinLockAcquire(&dsync_shared->fencing_lock);
		if (block->generation == generation && block->dbid == MyDatabaseId &&
			block->seqrelid == seqoid)
		{
			int64		token;

			if (block->next < block->limit)
				token = take ? block->next++ : 0;	/* another backend refilled it */
			else if (start >= block->limit)
			{
				block->next = take ? start + 1 : start;
				block->limit = start + size;
				token = take ? start : 0;
			}
			else
			{
				/* Older than a block used meanwhile: drop it, fetch again. */
				SpinLockRelease(&dsync_shared->fencing_lock);
				continue;
			}
			SpinLockRelease(&dsync_shared->fencing_lock);
			return token;
		}
		/* The slot went to another database meanwhile: start over. */
		SpinLockRelease(&dsync_shared->fencing_lock);
	}
}

/*
 * FencingSequenceHighest
 *		The greatest token the sequence has reserved so far: the last block
 *		it handed out ends there, and every token issued (in this server's
 *		lifetime or before a restart, a crash or a promotion) came from it
 *		or an earlier block.  0 if it has reserved none.  Read as the
 *		sequence's owner, as FencingSetval writes it: the caller has no
 *		rights on it.
 */
static int64
FencingSequenceHighest(Oid seqoid)
{
	int64		last = DsyncSequenceLastValue(seqoid);
	int64		size = FencingSequenceIncrement(seqoid);

	/* The sequence starts at 1: 0 means it has reserved nothing yet. */
	if (last == 0)
		return 0;
	if (last > PG_INT64_MAX - (size - 1))
		return PG_INT64_MAX;
	return last + (size - 1);
}

/*
 * DsyncFencingIssued
 *		Whether token is one this database may have issued: no greater than
 *		the greatest token handed out so far.  Fencing refuses any other
 *		(fence.c), so that nobody can push a mark beyond every token a
 *		lease will be granted with for a long while.
 *
 * The database's block in shared memory knows exactly: every token below
 * its next one was handed out from it or an earlier block, and none above.
 * That is a spinlock and no I/O, the usual case.  Without a block (after a
 * restart or a crash, on a promoted standby, or with the slot given to
 * another database) the sequence's page answers: the end of its last block,
 * which may be a little above the greatest token issued (the rest of a
 * block left unused), never below it, as the next block starts above it.
 */
bool
DsyncFencingIssued(const DsyncCatalog *catalog, int64 token)
{
	DsyncFencingBlock *block;
	bool		known = false;
	int64		next = 0;

	SpinLockAcquire(&dsync_shared->fencing_lock);
	block = FencingFindSlot(catalog->fencing_seq);
	if (block != NULL && block->limit > 0)
	{
		known = true;
		next = block->next;
	}
	SpinLockRelease(&dsync_shared->fencing_lock);
	if (known && token < next)
		return true;
	if (known)
		return false;
	return token <= FencingSequenceHighest(catalog->fencing_seq);
}

/*
 * DsyncNextFencingToken
 *		A new token (FencingNext).
 */
int64
DsyncNextFencingToken(const DsyncCatalog *catalog)
{
	return FencingNext(catalog, true);
}

/*
 * DsyncFencingFill
 *		Make sure the database has tokens in shared memory, fetching a
 *		block if need be, so that DsyncFencingTryNext can then succeed
 *		(unless others use them all first).
 */
void
DsyncFencingFill(const DsyncCatalog *catalog)
{
	(void) FencingNext(catalog, false);
}

/*
 * DsyncFencingTryNext
 *		A new token from the database's block in shared memory, without
 *		fetching one: false if there is none left.  For callers holding an
 *		LWLock, who must not wait for WAL, a standby or a lock.
 */
bool
DsyncFencingTryNext(const DsyncCatalog *catalog, int64 *token)
{
	DsyncFencingBlock *block;
	bool		found = false;

	SpinLockAcquire(&dsync_shared->fencing_lock);
	block = FencingFindSlot(catalog->fencing_seq);
	if (block != NULL && block->next < block->limit)
	{
		*token = block->next++;
		found = true;
	}
	SpinLockRelease(&dsync_shared->fencing_lock);
	return found;
}
