/*-------------------------------------------------------------------------
 *
 * stats.h
 *		Counters per database for the view dsync_stats (stats.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef DSYNC_STATS_H
#define DSYNC_STATS_H

#include "postgres.h"

/*
 * Counters of one database since server start (or dsync_stats_reset), for
 * the view dsync_stats.  Updated without locks.
 */
typedef enum DsyncCounter
{
	DSYNC_STAT_GRANTS = 0,
	DSYNC_STAT_RENEWALS,
	DSYNC_STAT_RELEASES,
	DSYNC_STAT_EXPIRIES,
	DSYNC_STAT_WAITS,
	DSYNC_STAT_WAIT_TIMEOUTS,
	DSYNC_STAT_WAIT_TIME,		/* microseconds */
	DSYNC_STAT_EVENTS_SENT,
	DSYNC_STAT_EVENTS_LOST,
	DSYNC_NUM_COUNTERS
} DsyncCounter;

#endif							/* DSYNC_STATS_H */
