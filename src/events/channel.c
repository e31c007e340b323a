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
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/cryptohash.h"
#include "common/sha2.h"
#include "utils/builtins.h"

#include "args.h"
#include "events.h"

PG_FUNCTION_INFO_V1(dsync_channel);

#define DSYNC_CHANNEL_PREFIX	"dsync:"
#define DSYNC_HASHED_PREFIX		"dsync#"
#define DSYNC_PREFIX_LEN		6
#define DSYNC_HASH_HEX_LEN		56

/*
 * DsyncEventChannel
 *		The LISTEN channel of a name, as a palloc'd string: readable when it
 *		fits PostgreSQL's channel length, a SHA-256 based name otherwise
 *		(so that long names sharing a prefix do not share a channel).
 */
const char *
DsyncEventChannel(const char *name)
{
	int			len = strlen(name);
	pg_cryptohash_ctx *ctx;
	uint8		digest[PG_SHA256_DIGEST_LENGTH];
	char	   *channel = palloc(NAMEDATALEN);

	if (DSYNC_PREFIX_LEN + len < NAMEDATALEN)
	{
		memcpy(channel, DSYNC_CHANNEL_PREFIX, DSYNC_PREFIX_LEN);
		memcpy(channel + DSYNC_PREFIX_LEN, name, len + 1);
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

	memcpy(channel, DSYNC_HASHED_PREFIX, DSYNC_PREFIX_LEN);
	hex_encode((const char *) digest, DSYNC_HASH_HEX_LEN / 2, channel + DSYNC_PREFIX_LEN);
	channel[DSYNC_PREFIX_LEN + DSYNC_HASH_HEX_LEN] = '\0';
	return channel;
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
