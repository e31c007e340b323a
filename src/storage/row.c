/*-------------------------------------------------------------------------
 *
 * row.c
 *		What a row of one of the extension's tables says, and whether it
 *		can be trusted.
 *
 * Anybody who can write the tables directly (a superuser) could leave a
 * NULL or a nonsense value where dsync relies on one; every row a scan
 * returns is checked here first (DsyncRowDamage), so that it is an error
 * naming the row, never a crash.  The rest are small questions about a
 * row (live? held by whom? owned by the caller?) asked all over dsync.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "args.h"
#include "catalog.h"
#include "store.h"

/*
 * DsyncRowNameDamage
 *		Why a name column is unusable, or NULL.
 */
static const char *
DsyncRowNameDamage(const DsyncRow *row, int attnum, const char *what)
{
	int			len;

	if (row->nulls[attnum - 1])
		return psprintf("%s is null", what);
	len = VARSIZE_ANY_EXHDR(DatumGetPointer(row->values[attnum - 1]));
	if (len < 1 || len > DSYNC_NAME_MAX_BYTES)
		return psprintf("%s is %d bytes long", what, len);
	return NULL;
}

/*
 * DsyncRowTimeDamage
 *		Why a timestamp column is unusable, or NULL.
 */
static const char *
DsyncRowTimeDamage(const DsyncRow *row, int attnum, const char *what)
{
	if (row->nulls[attnum - 1])
		return psprintf("%s is null", what);
	if (TIMESTAMP_NOT_FINITE(DatumGetTimestampTz(row->values[attnum - 1])))
		return psprintf("%s is not finite", what);
	return NULL;
}

/*
 * DsyncRowTtlDamage
 *		Why a ttl column is unusable, or NULL.
 */
static const char *
DsyncRowTtlDamage(const DsyncRow *row, int attnum)
{
	int64		usec;

	if (row->nulls[attnum - 1])
		return "ttl is null";
	if (!DsyncIntervalUsec(DatumGetIntervalP(row->values[attnum - 1]), &usec) || usec <= 0)
		return "ttl is not a positive interval";
	return NULL;
}

/*
 * DsyncRowLifetimeDamage
 *		Why the lifetime of a lease or member row is unusable, or NULL:
 *		both keep their start, renewal and expiry times and their ttl in
 *		four columns in a row, from start_attnum on.
 */
static const char *
DsyncRowLifetimeDamage(const DsyncRow *row, int start_attnum, const char *start_name)
{
	const char *why = DsyncRowTimeDamage(row, start_attnum, start_name);

	if (why == NULL)
		why = DsyncRowTimeDamage(row, start_attnum + 1, "renewed_at");
	if (why == NULL)
		why = DsyncRowTimeDamage(row, start_attnum + 2, "expires_at");
	if (why == NULL)
		why = DsyncRowTtlDamage(row, start_attnum + 3);
	return why;
}

StaticAssertDecl(Anum_lease_renewed_at == Anum_lease_acquired_at + 1 &&
				 Anum_lease_expires_at == Anum_lease_acquired_at + 2 &&
				 Anum_lease_ttl == Anum_lease_acquired_at + 3,
				 "a lease row's lifetime columns follow each other");
StaticAssertDecl(Anum_member_renewed_at == Anum_member_joined_at + 1 &&
				 Anum_member_expires_at == Anum_member_joined_at + 2 &&
				 Anum_member_ttl == Anum_member_joined_at + 3,
				 "a member row's lifetime columns follow each other");

/*
 * DsyncRowDamage
 *		Why a row of a table cannot be used, or NULL if it can.
 *
 * dsync writes rows only through its functions, but a superuser can write
 * the tables directly.  Every column the code reads without a NULL check
 * is checked here, once, as the row is read.
 */
const char *
DsyncRowDamage(DsyncTable table, const DsyncRow *row)
{
	const char *why = NULL;

#define CHECK(expr) do { if (why == NULL) why = (expr); } while (0)
	switch (table)
	{
		case DSYNC_TABLE_LEASE:
		case DSYNC_TABLE_PERMIT:
			CHECK(DsyncRowNameDamage(row, Anum_lease_name, "name"));
			if (why == NULL && (row->nulls[Anum_lease_slot - 1] ||
								DatumGetInt32(row->values[Anum_lease_slot - 1]) < 0))
				why = "slot is null or negative";
			if (row->nulls[Anum_lease_holder - 1])
				break;			/* released: nothing else is read */
			CHECK(DsyncRowNameDamage(row, Anum_lease_holder, "holder"));
			if (why == NULL && row->nulls[Anum_lease_fencing - 1])
				why = "fencing is null";
			CHECK(DsyncRowLifetimeDamage(row, Anum_lease_acquired_at, "acquired_at"));
			if (why == NULL && row->nulls[Anum_lease_owner - 1])
				why = "owner is null";
			break;
		case DSYNC_TABLE_SEMAPHORE:
			CHECK(DsyncRowNameDamage(row, Anum_semaphore_name, "name"));
			if (why == NULL && (row->nulls[Anum_semaphore_permits - 1] ||
								DatumGetInt32(row->values[Anum_semaphore_permits - 1]) < 1 ||
								DatumGetInt32(row->values[Anum_semaphore_permits - 1]) > DSYNC_MAX_PERMITS))
				why = "permits is null or out of range";
			if (why == NULL && row->nulls[Anum_semaphore_owner - 1])
				why = "owner is null";
			break;
		case DSYNC_TABLE_SIGNAL:
			CHECK(DsyncRowNameDamage(row, Anum_signal_name, "name"));
			if (why == NULL && (row->nulls[Anum_signal_seq - 1] ||
								row->nulls[Anum_signal_owner - 1]))
				why = "seq or owner is null";
			break;
		case DSYNC_TABLE_MEMBER:
			CHECK(DsyncRowNameDamage(row, Anum_member_grp, "grp"));
			CHECK(DsyncRowNameDamage(row, Anum_member_member, "member"));
			CHECK(DsyncRowLifetimeDamage(row, Anum_member_joined_at, "joined_at"));
			if (why == NULL && row->nulls[Anum_member_owner - 1])
				why = "owner is null";
			break;
		case DSYNC_TABLE_FENCE:
			CHECK(DsyncRowNameDamage(row, Anum_fence_resource, "resource"));
			if (why == NULL && (row->nulls[Anum_fence_token - 1] ||
								row->nulls[Anum_fence_owner - 1]))
				why = "token or owner is null";
			if (!row->nulls[Anum_fence_lease - 1])
				CHECK(DsyncRowNameDamage(row, Anum_fence_lease, "lease"));
			break;
		case DSYNC_NUM_TABLES:
			Assert(false);
			break;
	}
#undef CHECK
	return why;
}

/*
 * DsyncRowIsLive
 *		Whether a lease or permit row is held and has not expired at now.
 */
bool
DsyncRowIsLive(const DsyncRow *row, TimestampTz now)
{
	if (row->nulls[Anum_lease_holder - 1] || row->nulls[Anum_lease_expires_at - 1])
		return false;
	return DatumGetTimestampTz(row->values[Anum_lease_expires_at - 1]) > now;
}

/*
 * DsyncRowExpiry
 *		A held row's expiry.
 */
TimestampTz
DsyncRowExpiry(const DsyncRow *row)
{
	Assert(!row->nulls[Anum_lease_expires_at - 1]);
	return DatumGetTimestampTz(row->values[Anum_lease_expires_at - 1]);
}

/*
 * DsyncRowSlot
 *		A lease or permit row's slot.
 */
int32
DsyncRowSlot(const DsyncRow *row)
{
	return DatumGetInt32(row->values[Anum_lease_slot - 1]);
}

/*
 * DsyncRowHolderIs
 *		Whether a row's holder is exactly the given one (byte for byte).
 */
bool
DsyncRowHolderIs(const DsyncRow *row, text *holder)
{
	if (row->nulls[Anum_lease_holder - 1])
		return false;
	return DsyncTextEquals(DatumGetTextPP(row->values[Anum_lease_holder - 1]), holder);
}

/*
 * DsyncTextEquals
 *		Whether two names are the same, byte for byte (names are compared
 *		as in the "C" collation of the tables' keys).
 */
bool
DsyncTextEquals(text *a, text *b)
{
	return VARSIZE_ANY_EXHDR(a) == VARSIZE_ANY_EXHDR(b) &&
		memcmp(VARDATA_ANY(a), VARDATA_ANY(b), VARSIZE_ANY_EXHDR(a)) == 0;
}

/*
 * DsyncRowOwnerIsCaller
 *		Whether the current role may act on what the row's owner acquired,
 *		joined or set: it must have the owner's privileges.
 */
bool
DsyncRowOwnerIsCaller(const DsyncRow *row, int owner_attnum)
{
	if (row->nulls[owner_attnum - 1])
		return false;
	return has_privs_of_role(GetUserId(), DatumGetObjectId(row->values[owner_attnum - 1]));
}
