/*-------------------------------------------------------------------------
 *
 * stress.h
 *		Declarations shared by the files of the stress driver
 *		(lease_stress.c, common.c and one file per mode).
 *
 *-------------------------------------------------------------------------
 */
#ifndef DSYNC_STRESS_H
#define DSYNC_STRESS_H

#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "libpq-fe.h"

/* The isolation levels clients cycle through, by id. */
extern const char *const isolation_levels[3];

/* Clients' random choices start from this, printed (STRESS_SEED sets it). */
extern unsigned int stress_seed;

/* For check's at_least: the count must be at most the one expected. */
#define AT_MOST (-1)

extern void die(const char *fmt,...) __attribute__((format(printf, 1, 2), noreturn));
extern PGconn *connect_db(const char *appname);
extern bool exec_ok(PGconn *conn, const char *sql);
extern int	query_value(PGconn *conn, const char *sql, int nparams,
						const char *const *params, char *buf, size_t buflen);
extern int	query_row(PGconn *conn, const char *sql, int nparams, const char *const *params,
					  int nvalues, char *const *bufs, size_t buflen);
extern void killer_main(time_t deadline) __attribute__((noreturn));
extern bool check(PGconn *conn, const char *what, const char *sql, long expected,
				  int at_least);

extern bool client_connected(PGconn **conn, int *incarnation);
extern PGconn *run_with_kills(int clients, int seconds, void (*client) (int, time_t),
							  void (*extra) (time_t), int *passed, int *failed);

extern int	multi_main(int clients, int seconds);
extern int	rw_main(int clients, int seconds, bool cheat);
extern int	fence_stream_main(int writers, int generations);

#endif							/* DSYNC_STRESS_H */
