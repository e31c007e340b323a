/*-------------------------------------------------------------------------
 *
 * sqlexec.h
 *		Running dsync's own SQL through SPI (sqlexec.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef DSYNC_SQLEXEC_H
#define DSYNC_SQLEXEC_H

#include "postgres.h"

extern void DsyncSqlConnect(const char *what);
extern void DsyncSqlCheck(int rc, int expected, const char *what);

#endif							/* DSYNC_SQLEXEC_H */
