/*-------------------------------------------------------------------------
 *
 * lifecycle.h
 *		The hooks that tell the workers about CREATE/DROP EXTENSION and
 *		DROP DATABASE (lifecycle.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef DSYNC_LIFECYCLE_H
#define DSYNC_LIFECYCLE_H

extern void DsyncLifecycleInit(void);

#endif							/* DSYNC_LIFECYCLE_H */
