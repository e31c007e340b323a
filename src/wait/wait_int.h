/*-------------------------------------------------------------------------
 *
 * wait_int.h
 *		What wait.c and waitqueue.c share, and nothing else uses.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DSYNC_WAIT_INT_H
#define DSYNC_WAIT_INT_H

#include "postgres.h"
#include "wait.h"

extern void DsyncWakeChannel(int channel);
extern uint64 DsyncWaitGeneration(uint64 key);
extern DsyncWaiterSlot *DsyncWaitMySlot(void);
extern void DsyncWaitEnqueue(const DsyncWaitSpec *spec);
extern void DsyncWaitDequeue(bool wake);
extern void DsyncWaitClientGone(void);
extern bool DsyncWaitSleep(uint64 key, TimestampTz wake_at, uint64 generation);

#endif							/* DSYNC_WAIT_INT_H */
