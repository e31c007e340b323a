/*-------------------------------------------------------------------------
 *
 * queued.h
 *		Waiters queued without a connection (queued.c): entries in the same
 *		FIFO as blocked backends, kept alive by their client's renewals and
 *		granted by whoever frees the name.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DSYNC_QUEUED_H
#define DSYNC_QUEUED_H

#include "postgres.h"
#include "args.h"
#include "datatype/timestamp.h"
#include "nodes/pg_list.h"

/* Where a queued waiter is in its life (see queued.c's header). */
typedef enum DsyncQueuedState
{
	DSYNC_QUEUED_GONE = 0,		/* not queued: never, left, lapsed or passed on */
	DSYNC_QUEUED_WAITING,		/* in line */
	DSYNC_QUEUED_GRANTING,		/* granted by a transaction still in progress */
	DSYNC_QUEUED_GRANTED,		/* granted, committed, not claimed yet */
	DSYNC_QUEUED_PASSING		/* not claimed in time: the worker's transaction
								 * passing it on is in progress */
} DsyncQueuedState;

/* What a queued waiter asked for. */
#define DSYNC_QUEUED_EXCLUSIVE	0
#define DSYNC_QUEUED_SHARED		1

/* A copy of a queued waiter, as handed to callers. */
typedef struct DsyncQueuedWaiter
{
	DsyncQueuedState state;
	Oid			dbid;
	Oid			userid;			/* the role that queued: it owns the grant */
	uint64		key;			/* DsyncWaitKey of the name */
	uint64		ticket;			/* place in the name's FIFO */
	int			mode;			/* DSYNC_QUEUED_EXCLUSIVE or _SHARED */
	bool		durable;
	int64		ttl_usec;		/* of the grant, and of the place in line */
	int			commit_level;	/* synchronous_commit the waiter queued with */
	TimestampTz since;
	TimestampTz alive_until;	/* WAITING: gone unless renewed by then */
	TimestampTz claim_by;		/* GRANTED: passed on unless claimed by then */
	TimestampTz expires_by;		/* GRANTING, GRANTED: the grant's expiry is
								 * no later (the clock before the try + ttl) */
	int64		token;			/* GRANTING, GRANTED */
	bool		cancelled;		/* GRANTING: left meanwhile; pass it on */
	bool		repoke;			/* GRANTING: a poke met it; if it goes back
								 * in line, the worker must look again */
	bool		claimed;		/* GRANTING: taken up once its transaction
								 * committed; goes instead of being GRANTED */
	TransactionId granting_xid; /* GRANTING: the granting transaction */
	int			granting_pid;	/* GRANTING: the backend granting it */
	TimestampTz granted_upto;	/* GRANTING, GRANTED: the grant's row was
								 * written no later (a later renewed_at: renewed) */
	char		channel[NAMEDATALEN];	/* where its grant is announced */
	char		name[DSYNC_NAME_MAX_BYTES + 1];
	char		holder[DSYNC_NAME_MAX_BYTES + 1];
} DsyncQueuedWaiter;

extern Size DsyncQueuedShmemSize(void);
extern void DsyncQueuedShmemRequest(void);
extern void DsyncQueuedShmemInit(void);

extern DsyncQueuedState DsyncQueuedJoin(text *name, text *holder, uint64 key, int mode,
										bool durable, int64 ttl_usec, const char *channel,
										DsyncQueuedWaiter *out);
extern bool DsyncQueuedFirst(uint64 key, DsyncQueuedWaiter *out);
extern uint64 DsyncQueuedFirstTicket(uint64 key);
extern bool DsyncQueuedAny(uint64 key);
extern bool DsyncQueuedReserve(const DsyncQueuedWaiter *waiter);
extern void DsyncQueuedSetToken(const DsyncQueuedWaiter *waiter, int64 token,
								TimestampTz expires_by, TimestampTz granted_upto);
extern void DsyncQueuedSettleNow(const DsyncQueuedWaiter *waiter);
extern void DsyncQueuedDropOwn(const DsyncQueuedWaiter *waiter);
extern void DsyncQueuedTakeOwn(const DsyncQueuedWaiter *waiter);
extern void DsyncQueuedUndoEphemeral(void);
extern void DsyncQueuedForgetGrant(text *name, text *holder);
extern void DsyncQueuedEvict(uint64 key, Oid owner);
extern void DsyncQueuedUnreserve(const DsyncQueuedWaiter *waiter);
extern void DsyncQueuedAtSubCommit(int nest_level);
extern void DsyncQueuedAtSubAbort(int nest_level);
extern void DsyncQueuedAtEnd(bool commit);
extern DsyncQueuedState DsyncQueuedClaim(text *name, text *holder, uint64 key,
										 DsyncQueuedWaiter *out);
extern DsyncQueuedState DsyncQueuedLeave(text *name, text *holder, uint64 key,
										 DsyncQueuedWaiter *out);
extern List *DsyncQueuedTakeDue(TimestampTz now);
extern void DsyncQueuedUse(text *name, text *holder);
extern List *DsyncQueuedTakePoked(void);
extern int	DsyncQueuedSweep(TimestampTz now);
extern TimestampTz DsyncQueuedNextClaim(Oid dbid);
extern uint64 DsyncQueuedGrants(void);
extern void DsyncQueuedPoke(int channel);
extern void DsyncQueuedPokeDone(void);
extern void DsyncQueuedPokeHold(uint64 key);
extern void DsyncQueuedPokeUnhold(bool granted);
extern bool DsyncQueuedWorkDue(TimestampTz now);
extern void DsyncQueuedDrop(const DsyncQueuedWaiter *waiter);
extern int	DsyncQueuedCopyAll(DsyncQueuedWaiter **out);
extern void DsyncQueuedForgetDatabase(Oid dbid);

#endif							/* DSYNC_QUEUED_H */
