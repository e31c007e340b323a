/*-------------------------------------------------------------------------
 *
 * extdrop.h
 *		DROP EXTENSION dsync without deadlocks against running calls
 *		(extdrop.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef DSYNC_EXTDROP_H
#define DSYNC_EXTDROP_H

#include "nodes/nodes.h"

extern void DsyncExtensionDropLock(Node *parsetree);

#endif							/* DSYNC_EXTDROP_H */
