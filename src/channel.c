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

#include "dsync.h"

PG_FUNCTION_INFO_V1(dsync_channel);

#define DSYNC_CHANNEL_PREFIX	"dsync:"
#define DSYNC_HASHED_PREFIX		"dsync#"
#define DSYNC_PREFIX_LEN		6
#define DSYNC_HASH_HEX_LEN		56

/*
 * dsync_channel
 *		SQL: dsync_channel(name) RETURNS text
 */
Datum
dsync_channel(PG_FUNCTION_ARGS)
{
	text	   *name = DsyncArgName(fcinfo, 0, "name");
	int			len = VARSIZE_ANY_EXHDR(name);
	pg_cryptohash_ctx *ctx;
	uint8		digest[PG_SHA256_DIGEST_LENGTH];
	char		channel[NAMEDATALEN];

	if (DSYNC_PREFIX_LEN + len < NAMEDATALEN)
	{
		memcpy(channel, DSYNC_CHANNEL_PREFIX, DSYNC_PREFIX_LEN);
		memcpy(channel + DSYNC_PREFIX_LEN, VARDATA_ANY(name), len);
		PG_RETURN_TEXT_P(cstring_to_text_with_len(channel, DSYNC_PREFIX_LEN + len));
	}

	ctx = pg_cryptohash_create(PG_SHA256);
	if (pg_cryptohash_init(ctx) < 0 ||
		pg_cryptohash_update(ctx, (const uint8 *) VARDATA_ANY(name), len) < 0 ||
		pg_cryptohash_final(ctx, digest, sizeof(digest)) < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg_internal("could not compute SHA-256 of a channel name: %s",
								 pg_cryptohash_error(ctx))));
	pg_cryptohash_free(ctx);

	memcpy(channel, DSYNC_HASHED_PREFIX, DSYNC_PREFIX_LEN);
	hex_encode((const char *) digest, DSYNC_HASH_HEX_LEN / 2, channel + DSYNC_PREFIX_LEN);
	PG_RETURN_TEXT_P(cstring_to_text_with_len(channel, DSYNC_PREFIX_LEN + DSYNC_HASH_HEX_LEN));
}
