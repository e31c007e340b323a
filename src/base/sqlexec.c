/*-------------------------------------------------------------------------
 *
 * sqlexec.c
 *		Running dsync's own SQL through SPI: the event log (eventlog.c) and
 *		the records of session leases (session.c).
 *
 * These statements are dsync's, on its own tables, with every name
 * qualified; nothing a user passes can make them fail but a broken
 * installation.  A failure is still reported with an error code and the
 * table it concerns, never as a bare internal message.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "executor/spi.h"

#include "sqlexec.h"

/*
 * DsyncSqlConnect
 *		SPI_connect, or an error saying what dsync was about to do.
 */
void
DsyncSqlConnect(const char *what)
{
	int			rc = SPI_connect();

	if (rc != SPI_OK_CONNECT)
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("dsync could not %s: %s", what, SPI_result_code_string(rc))));
}

/*
 * DsyncSqlCheck
 *		The result code of an SPI call that was to return expected.
 */
void
DsyncSqlCheck(int rc, int expected, const char *what)
{
	if (rc != expected)
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("dsync could not %s: %s", what, SPI_result_code_string(rc)),
				 errhint("The extension's objects may have been altered; "
						 "reinstall it with DROP EXTENSION dsync; CREATE EXTENSION dsync.")));
}
