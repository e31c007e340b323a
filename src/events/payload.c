/*-------------------------------------------------------------------------
 *
 * payload.c
 *		What a listener receives: the JSON payload of each event.
 *
 * One JSON object per committed change (API.md, "Notifications"), with
 * times in RFC 3339 and a full UTC offset, built by the worker that sends
 * the event (reaper.c) and by the event log (eventlog.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "lib/stringinfo.h"
#include "utils/datetime.h"
#include "utils/json.h"

#include "events.h"
#include "store.h"

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
			if (event->slot >= DSYNC_SHARED_SLOT)
				appendStringInfoString(&buf, ",\"mode\":\"shared\"");
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
