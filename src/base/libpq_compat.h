/*-------------------------------------------------------------------------
 *
 * libpq_compat.h
 *		The backend's libpq declarations (the client's socket, and
 *		pq_check_connection) without GSSAPI's headers.
 *
 * libpq/libpq-be.h includes <gssapi/gssapi.h> when the server was built
 * with GSSAPI, which would make building dsync need Kerberos development
 * headers that nothing else needs.  dsync uses no GSSAPI type, and the only
 * member of struct Port that depends on it is a pointer either way, so the
 * layout is the same without it.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DSYNC_LIBPQ_COMPAT_H
#define DSYNC_LIBPQ_COMPAT_H

#ifdef ENABLE_GSS
#define DSYNC_UNDEF_GSS
#undef ENABLE_GSS
#endif

#include "libpq/libpq.h"
#include "libpq/libpq-be.h"

#ifdef DSYNC_UNDEF_GSS
#define ENABLE_GSS 1
#undef DSYNC_UNDEF_GSS
#endif

#endif							/* DSYNC_LIBPQ_COMPAT_H */
