/*-------------------------------------------------------------------------
 *
 * role.h
 *		Leases, signals and memberships owned by roles that are dropped
 *		or reassigned (role.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef DSYNC_ROLE_H
#define DSYNC_ROLE_H

#include "postgres.h"
#include "nodes/nodes.h"

/* role.c: DROP ROLE, DROP OWNED and REASSIGN OWNED */
extern void DsyncRoleUtility(Node *parsetree);

#endif							/* DSYNC_ROLE_H */
