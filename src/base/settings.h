/*-------------------------------------------------------------------------
 *
 * settings.h
 *		dsync's settings (GUCs), defined in settings.c.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DSYNC_SETTINGS_H
#define DSYNC_SETTINGS_H

#include "postgres.h"

extern int	dsync_max_databases;
extern int	dsync_event_queue_size;
extern int	dsync_reap_batch_size;
extern int	dsync_restart_delay;
extern bool dsync_events;
extern int	dsync_max_ttl;
extern int	dsync_idle_row_retention;
extern int	dsync_deadlines_in_memory;
extern int	dsync_max_workers;
extern int	dsync_worker_idle_timeout;
extern int	dsync_ephemeral_max_leases;
extern int	dsync_ephemeral_max_ttl;
extern int	dsync_event_retention;
extern int	dsync_max_queued_waiters;
extern int	dsync_claim_window;

extern void DsyncDefineSettings(void);

#endif							/* DSYNC_SETTINGS_H */
