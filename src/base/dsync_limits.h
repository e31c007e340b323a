/*-------------------------------------------------------------------------
 *
 * dsync_limits.h
 *		Limits of the SQL interface that the server (src/) and the
 *		command-line tool (cli/) both check: plain C, no server headers.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DSYNC_LIMITS_H
#define DSYNC_LIMITS_H

/* Names (lease, holder, group, signal) are at most this many bytes. */
#define DSYNC_NAME_MAX_BYTES	255

/* Most permits a semaphore may have. */
#define DSYNC_MAX_PERMITS		65535

/*
 * The shared holders of a read-write lock are rows of dsync_permit from
 * this slot on, above every semaphore permit (shared.c).
 */
#define DSYNC_SHARED_SLOT		65536

#endif							/* DSYNC_LIMITS_H */
