/*-------------------------------------------------------------------------
 *
 * member.c
 *		Group membership: the live candidates of a leader election, with
 *		their metadata.
 *
 * A member is one row of dsync_member, keyed by group and member name,
 * with an expiry like a lease's: a member that stops refreshing its
 * membership disappears from dsync_members the moment its time passes, and
 * the reaper deletes the row and announces it.  Membership is separate
 * from leadership: the leader is the holder of the lease named after the
 * group, which dsync_members shows as is_leader.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"

#include "args.h"
#include "catalog.h"
#include "store.h"
#include "lease.h"
#include "events.h"

PG_FUNCTION_INFO_V1(dsync_join);
PG_FUNCTION_INFO_V1(dsync_leave);
PG_FUNCTION_INFO_V1(dsync_member_rows);

#define MEMBER_ROWS_COLS	5

/*
 * MemberFind
 *		The row of one member of a group, or NULL: one index probe.
 */
static DsyncRow *
MemberFind(DsyncStore *store, text *grp, text *member)
{
	DsyncScan  *scan = DsyncScanKey(store, grp, PointerGetDatum(member));
	DsyncRow   *row = DsyncScanNext(scan);

	DsyncScanEnd(scan);
	return row;
}

/*
 * MemberIsLive
 *		Whether a member row has not expired at now.
 */
static bool
MemberIsLive(const DsyncRow *row, TimestampTz now)
{
	return DatumGetTimestampTz(row->values[Anum_member_expires_at - 1]) > now;
}

/*
 * dsync_join
 *		SQL: dsync_join(grp, member, ttl, info) RETURNS timestamptz
 *
 * Joins, or refreshes a membership, for ttl from now; returns the expiry.
 * A NULL info keeps what a refreshed membership had.  A live membership
 * of another role cannot be taken over; an expired one can.
 */
Datum
dsync_join(PG_FUNCTION_ARGS)
{
	text	   *grp = DsyncArgName(fcinfo, 0, "grp");
	text	   *member = DsyncArgName(fcinfo, 1, "member");
	Interval   *ttl;
	int64		ttl_usec = DsyncArgTtl(fcinfo, 2, "ttl", false, &ttl);
	bool		info_null = PG_ARGISNULL(3);
	Datum		info = info_null ? (Datum) 0 : JsonbPGetDatum(PG_GETARG_JSONB_P(3));
	DsyncStore	store;
	DsyncRow *row;
	TimestampTz now;
	TimestampTz expiry;

	(void) DsyncExpiry(GetCurrentTimestamp(), ttl_usec, "ttl");
	DsyncPreventWrite("dsync_join()");

	DsyncStoreOpen(&store, fcinfo, DSYNC_TABLE_MEMBER, true);
	for (;;)
	{
		TimestampTz previous;
		bool		was_live;

		CHECK_FOR_INTERRUPTS();
		row = MemberFind(&store, grp, member);
		if (row == NULL)
		{
			/* Make sure no other joiner of this member inserts it too. */
			if (DsyncStoreClaimKey(&store, grp, PointerGetDatum(member), true) != DSYNC_CLAIM_OK)
				continue;
			now = GetCurrentTimestamp();
			expiry = DsyncExpiry(now, ttl_usec, "ttl");
			row = DsyncStoreNewRow();
			row->values[Anum_member_grp - 1] = PointerGetDatum(grp);
			row->values[Anum_member_member - 1] = PointerGetDatum(member);
			row->values[Anum_member_info - 1] = info;
			row->nulls[Anum_member_info - 1] = info_null;
			row->values[Anum_member_joined_at - 1] = TimestampTzGetDatum(now);
			row->values[Anum_member_renewed_at - 1] = TimestampTzGetDatum(now);
			row->values[Anum_member_expires_at - 1] = TimestampTzGetDatum(expiry);
			row->values[Anum_member_ttl - 1] = IntervalPGetDatum(ttl);
			row->values[Anum_member_owner - 1] = ObjectIdGetDatum(GetUserId());
			for (int i = 0; i < Natts_member; i++)
				if (i != Anum_member_info - 1)
					row->nulls[i] = false;
			DsyncStoreInsert(&store, row);
			DsyncStoreUnclaimKey(&store, grp, PointerGetDatum(member));
			DsyncEventRecordRaw(DSYNC_EVENT_JOINED, grp, member, expiry);
			break;
		}

		if (DsyncStoreLock(&store, row, LockTupleNoKeyExclusive, LockWaitBlock) != TM_Ok)
			continue;			/* changed or left meanwhile: look again */

		now = GetCurrentTimestamp();
		was_live = MemberIsLive(row, now);
		if (was_live && !DsyncRowOwnerIsCaller(row, Anum_member_owner))
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("member \"%s\" of group \"%s\" was joined by another role",
							text_to_cstring(member), text_to_cstring(grp)),
					 errhint("Use another member name, or wait until that membership expires.")));

		previous = DatumGetTimestampTz(row->values[Anum_member_expires_at - 1]);
		expiry = DsyncExpiry(now, ttl_usec, "ttl");
		if (!was_live)
		{
			/* An expired membership not yet reaped: it ends, a new one starts. */
			DsyncEventRecordRaw(DSYNC_EVENT_MEMBER_EXPIRED, grp, member, previous);
			row->values[Anum_member_joined_at - 1] = TimestampTzGetDatum(now);
			row->values[Anum_member_owner - 1] = ObjectIdGetDatum(GetUserId());
			row->values[Anum_member_info - 1] = info;
			row->nulls[Anum_member_info - 1] = info_null;
		}
		else if (!info_null)
			DsyncRowSet(row, Anum_member_info, info);
		row->values[Anum_member_renewed_at - 1] = TimestampTzGetDatum(now);
		row->values[Anum_member_expires_at - 1] = TimestampTzGetDatum(expiry);
		row->values[Anum_member_ttl - 1] = IntervalPGetDatum(ttl);
		DsyncStoreUpdate(&store, row);
		if (!was_live)
			DsyncEventRecordRaw(DSYNC_EVENT_JOINED, grp, member, expiry);
		else if (expiry < previous)
			DsyncEventRecordRaw(DSYNC_EVENT_MEMBER_DEADLINE, grp, member, expiry);
		break;
	}
	DsyncStoreClose(&store);

	PG_RETURN_TIMESTAMPTZ(expiry);
}

/*
 * dsync_leave
 *		SQL: dsync_leave(grp, member) RETURNS boolean
 *
 * True if the member was live (and the caller's role may act on it) and
 * has now left; false otherwise.
 */
Datum
dsync_leave(PG_FUNCTION_ARGS)
{
	text	   *grp = DsyncArgName(fcinfo, 0, "grp");
	text	   *member = DsyncArgName(fcinfo, 1, "member");
	DsyncStore	store;
	DsyncRow *row;
	bool		left = false;

	DsyncPreventWrite("dsync_leave()");

	DsyncStoreOpen(&store, fcinfo, DSYNC_TABLE_MEMBER, true);
	for (;;)
	{
		CHECK_FOR_INTERRUPTS();
		row = MemberFind(&store, grp, member);
		if (row == NULL || !MemberIsLive(row, GetCurrentTimestamp()) ||
			!DsyncRowOwnerIsCaller(row, Anum_member_owner))
			break;
		if (DsyncStoreLock(&store, row, LockTupleExclusive, LockWaitBlock) != TM_Ok)
			continue;
		if (!MemberIsLive(row, GetCurrentTimestamp()))
			break;
		DsyncStoreDelete(&store, row);
		DsyncEventRecordRaw(DSYNC_EVENT_LEFT, grp, member, 0);
		left = true;
		break;
	}
	DsyncStoreClose(&store);

	PG_RETURN_BOOL(left);
}

/*
 * dsync_member_rows
 *		SQL: dsync_members(grp) RETURNS TABLE(member, info, joined_at,
 *		expires_at, is_leader)
 *
 * Live members only, as last committed; is_leader marks the holder of the
 * lease named after the group.  Read-only, so it works on a standby.
 */
Datum
dsync_member_rows(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	text	   *grp = DsyncArgName(fcinfo, 0, "grp");
	DsyncStore	store;
	DsyncScan  *scan;
	DsyncRow   *row;
	text	   *leader;
	TimestampTz now;

	InitMaterializedSRF(fcinfo, 0);

	leader = DsyncLeaseLeader(fcinfo, grp);
	now = GetCurrentTimestamp();

	DsyncStoreOpen(&store, fcinfo, DSYNC_TABLE_MEMBER, false);
	scan = DsyncScanName(&store, grp);
	while ((row = DsyncScanNext(scan)) != NULL)
	{
		Datum		values[MEMBER_ROWS_COLS];
		bool		nulls[MEMBER_ROWS_COLS] = {false, false, false, false, false};
		text	   *member = DatumGetTextPP(row->values[Anum_member_member - 1]);

		if (!MemberIsLive(row, now))
			continue;
		values[0] = PointerGetDatum(member);
		values[1] = row->values[Anum_member_info - 1];
		nulls[1] = row->nulls[Anum_member_info - 1];
		values[2] = row->values[Anum_member_joined_at - 1];
		values[3] = row->values[Anum_member_expires_at - 1];
		values[4] = BoolGetDatum(leader != NULL && DsyncTextEquals(leader, member));
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	DsyncScanEnd(scan);
	DsyncStoreClose(&store);

	return (Datum) 0;
}
