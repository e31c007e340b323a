/*-------------------------------------------------------------------------
 *
 * channel.c
 *		The LISTEN channel for a lease, group or event name.
 *
 * A channel is "dsync:" followed by the name when that fits in a channel
 * name (NAMEDATALEN - 1 = 63 bytes), so people can type it.  Longer names
 * get "dsync#" followed by 56 hex digits of the name's SHA-256: stable
 * across servers and versions, never truncated by LISTEN, and unable to
 * collide with a readable channel because the sixth byte differs.
 *
 * A queued waiter's grant is announced on a channel of another family,
 * "dsyncq:" or "dsyncq#" (dsync_queue_channel): listening there is not
 * listening to dsync's events, so it does not make the database's events
 * be sent and logged for nobody.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/cryptohash.h"
#include "common/sha2.h"
#include "utils/builtins.h"

#include "args.h"
#include "events.h"

PG_FUNCTION_INFO_V1(dsync_channel);
PG_FUNCTION_INFO_V1(dsync_queue_channel);

#define DSYNC_CHANNEL_PREFIX	"dsync:"
#define DSYNC_HASHED_PREFIX		"dsync#"
#define DSYNC_PREFIX_LEN		6
#define DSYNC_HASH_HEX_LEN		56
#define DSYNC_QUEUE_PREFIX		"dsyncq:"
#define DSYNC_QUEUE_HASHED_PREFIX	"dsyncq#"
#define DSYNC_QUEUE_PREFIX_LEN	7

StaticAssertDecl(DSYNC_QUEUE_PREFIX_LEN + DSYNC_HASH_HEX_LEN < NAMEDATALEN,
				 "a hashed queue channel must fit a channel name");

/*
 * ChannelOf
 *		name's channel in a family (its readable and hashed prefixes, of
 *		prefix_len bytes), as a palloc'd string: readable when it fits
 *		PostgreSQL's channel length, a SHA-256 based name otherwise (so that
 *		long names sharing a prefix do not share a channel).
 */
static const char *
ChannelOf(const char *name, const char *readable, const char *hashed, int prefix_len)
{
	int			len = strlen(name);
	pg_cryptohash_ctx *ctx;
	uint8		digest[PG_SHA256_DIGEST_LENGTH];
	char	   *channel = palloc(NAMEDATALEN);

	if (prefix_len + len < NAMEDATALEN)
	{
		memcpy(channel, readable, prefix_len);
		memcpy(channel + prefix_len, name, len + 1);
		return channel;
	}

	ctx = pg_cryptohash_create(PG_SHA256);
	if (pg_cryptohash_init(ctx) < 0 ||
		pg_cryptohash_update(ctx, (const uint8 *) name, len) < 0 ||
		pg_cryptohash_final(ctx, digest, sizeof(digest)) < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg_internal("could not compute SHA-256 of a channel name: %s",
								 pg_cryptohash_error(ctx))));
	pg_cryptohash_free(ctx);

	memcpy(channel, hashed, prefix_len);
	hex_encode((const char *) digest, DSYNC_HASH_HEX_LEN / 2, channel + prefix_len);
	channel[prefix_len + DSYNC_HASH_HEX_LEN] = '\0';
	return channel;
}

/*
 * DsyncEventChannel
 *		The LISTEN channel of a lease, group or event name.
 */
const char *
DsyncEventChannel(const char *name)
{
	return ChannelOf(name, DSYNC_CHANNEL_PREFIX, DSYNC_HASHED_PREFIX, DSYNC_PREFIX_LEN);
}

/*
 * DsyncQueueChannel
 *		The LISTEN channel a queued waiter's grant is announced on.
 */
const char *
DsyncQueueChannel(const char *name)
{
	return ChannelOf(name, DSYNC_QUEUE_PREFIX, DSYNC_QUEUE_HASHED_PREFIX,
					 DSYNC_QUEUE_PREFIX_LEN);
}

/*
 * DsyncIsEventChannel
 *		Whether a channel is one dsync sends events on.
 */
bool
DsyncIsEventChannel(const char *channel)
{
	return strncmp(channel, DSYNC_CHANNEL_PREFIX, DSYNC_PREFIX_LEN) == 0 ||
		strncmp(channel, DSYNC_HASHED_PREFIX, DSYNC_PREFIX_LEN) == 0;
}

/*
 * dsync_channel
 *		SQL: dsync_channel(name) RETURNS text
 */
Datum
dsync_channel(PG_FUNCTION_ARGS)
{
	text	   *name = DsyncArgName(fcinfo, 0, "name");

	PG_RETURN_TEXT_P(cstring_to_text(DsyncEventChannel(text_to_cstring(name))));
}

/*
 * dsync_queue_channel
 *		SQL: dsync_queue_channel(name) RETURNS text: the channel to LISTEN
 *		on for grants to waiters queued with dsync_queue(..., channel =>
 *		name).
 */
Datum
dsync_queue_channel(PG_FUNCTION_ARGS)
{
	text	   *name = DsyncArgName(fcinfo, 0, "name");

	PG_RETURN_TEXT_P(cstring_to_text(DsyncQueueChannel(text_to_cstring(name))));
}
