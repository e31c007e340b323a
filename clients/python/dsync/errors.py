"""The library's exceptions: one hierarchy under DsyncError.

Each also derives from the built-in exception a Python programmer would
catch for the same trouble (TimeoutError, RuntimeError, ValueError,
LookupError, ConnectionError), so code written for threading or asyncio
primitives keeps working.  An error that came from the server or the
driver keeps psycopg's exception as its __cause__, and its SQLSTATE in
.sqlstate.
"""

from __future__ import annotations

import re
from typing import Any, Optional, Tuple

import psycopg

from ._bound import BOUNDS, AsyncBound


class DsyncError(Exception):
    """Base class of every error this library raises on its own."""

    sqlstate: Optional[str] = None
    # What to do about it, when the library knows (also the end of the
    # message): the command to run, the line to put in postgresql.conf.
    hint: Optional[str] = None


class AcquireTimeout(DsyncError, TimeoutError):
    """A lease, permit or signal could not be had within the timeout
    (raised where a call cannot answer False: a `with` block given a
    timeout, Semaphore.attach)."""


class LockExists(AcquireTimeout):
    """A non-blocking acquire found the lease held (raised instead of
    returning False by objects made with raise_on_failure=True, as
    mongoelector raises it).  An AcquireTimeout of no wait."""


class LockLost(DsyncError):
    """The lease was lost while held: expired, released by an
    administrator, or no longer confirmed before it could expire.
    Anything guarded by it must stop."""


class NotHeld(DsyncError, RuntimeError):
    """An operation that needs the lease was called by a thread or task
    that does not hold it (as threading.RLock.release raises
    RuntimeError), or the server says the holder does not hold it."""


class StaleToken(DsyncError):
    """A write carried a fencing token older than one the resource has
    accepted (dsync_fence, a dsync_fenced trigger; SQLSTATE 55000): the
    lease it came with was lost, and the write was refused.  resource,
    token and accepted say which mark refused which token (None where
    the server did not say)."""

    resource: Optional[str] = None
    token: Optional[int] = None
    accepted: Optional[int] = None


class ExtensionNotCreated(DsyncError):
    """The database has no dsync extension (CREATE EXTENSION dsync was not
    run there), so dsync's functions and views do not exist."""


class NotPreloaded(DsyncError):
    """The server does not load dsync at start (it is not in
    shared_preload_libraries), so no dsync function can run."""


class SemaphoreMismatch(DsyncError, ValueError):
    """The semaphore exists with another number of permits."""


class SemaphoreNotFound(DsyncError, LookupError):
    """Semaphore.attach found no semaphore of that name in time."""


class DsyncConnectionError(DsyncError, ConnectionError):
    """The server could not be reached, or the connection broke."""


class KeeperUnavailable(DsyncConnectionError):
    """The client's keeper, which renews held leases, has no connection:
    a lease it cannot keep is given back rather than held."""


class ListenUnavailable(DsyncError):
    """LISTEN does not work on this connection: it goes through a pooler
    in transaction mode, which lends each transaction any server
    connection."""


class ServerError(DsyncError):
    """Any other error the server raised for one of our statements."""


class InvalidArgument(ServerError, ValueError):
    """The server refused an argument (SQLSTATE class 22)."""


def is_connection_error(exc: BaseException) -> bool:
    """Whether exc says the connection is gone (rather than that one
    statement failed on a sound connection)."""
    if isinstance(exc, (psycopg.InterfaceError, OSError)):
        return True
    if isinstance(exc, psycopg.OperationalError):
        state = getattr(exc, "sqlstate", None)
        return state is None or state.startswith("08") or state.startswith("57P")
    return False


# -- what the server said ------------------------------------------------------------

# The server's own words (src/leases/fence.c, src/leases/leasehold.c,
# src/sql/dsync.c).  dsync has no message catalogue, so they are the same
# whatever lc_messages says.
_STALE = re.compile(r'^stale fencing token for resource "(.*)"$', re.S)
_STALE_DETAIL = re.compile(r"^Token (\d+) is older than token (\d+)")
_NOT_HELD = re.compile(r'^lease ".*" is not held by ".*"$', re.S)
_NOT_PRELOADED = "dsync must be loaded via shared_preload_libraries"
# A dsync function or view that does not exist (42883, 42P01), or the
# extension dropped under a running call (42704).
_MISSING_STATES = ("42883", "42P01")
_MISSING = re.compile(r'^(function|relation) "?(dsync_\w*)')
_DROPPED = 'extension "dsync" has been dropped'

PRELOAD_HINT = ("add dsync to shared_preload_libraries in postgresql.conf "
                "(shared_preload_libraries = 'dsync') and restart the server")


def _create_hint(where: str) -> str:
    """The hint for a database without the extension (the CLI's words)."""
    return (f"run CREATE EXTENSION dsync in {where} (as a superuser), "
            "with dsync in shared_preload_libraries")


def _fields(exc: BaseException) -> Tuple[Optional[str], str, Optional[str]]:
    """(SQLSTATE, primary message, detail) of a psycopg 3, psycopg2 or
    asyncpg error (the first two keep the server's fields in exc.diag)."""
    state = getattr(exc, "sqlstate", None) or getattr(exc, "pgcode", None)
    diag = getattr(exc, "diag", None)
    primary = getattr(diag, "message_primary", None) if diag is not None else None
    detail = getattr(diag, "message_detail", None) if diag is not None else None
    if diag is None and _is_asyncpg(exc):
        # asyncpg keeps the server's fields on the exception itself.
        primary, detail = getattr(exc, "message", None), getattr(exc, "detail", None)
    if primary is None:
        text = str(exc).strip()
        primary = text.splitlines()[0] if text else type(exc).__name__
        if primary.startswith("ERROR:"):
            primary = primary[6:].strip()
    return state, primary, detail


def _database(exc: BaseException, conn: Any = None) -> Optional[str]:
    """The name of the database exc came from, where the driver says it:
    the connection given, psycopg 3's exc.pgconn, psycopg2's
    exc.cursor.connection."""
    try:
        if conn is not None:
            return conn.info.dbname
        pgconn = getattr(exc, "pgconn", None)
        if pgconn is not None and pgconn.db:
            return pgconn.db.decode("utf-8", "replace")
        cursor = getattr(exc, "cursor", None)
        if cursor is not None:
            return cursor.connection.info.dbname
    except Exception:           # a closed connection answers nothing: say less
        pass
    return None


def needs_probe(exc: BaseException) -> bool:
    """Whether exc is a dsync function or view that does not exist, for
    which the caller that owns the connection asks pg_extension (probe)
    before translating: the extension may be missing, in a schema out of
    search_path, or older than the function."""
    state, primary, _ = _fields(exc)
    return _missing(state, primary)


def _missing(state: Optional[str], primary: str) -> bool:
    """Whether the server said a dsync function or view does not exist."""
    return state in _MISSING_STATES and _MISSING.match(primary) is not None


# What probe answers: None, the extension is not there; else its schema,
# its version, whether that schema is in search_path, and whether it has
# a function or relation of the missing name (then only the arguments'
# types did not match).
PROBE = ("SELECT n.nspname::text, e.extversion::text, n.nspname = ANY(current_schemas(false)),"
         " EXISTS (SELECT 1 FROM pg_proc p WHERE p.proname = %s AND p.pronamespace = n.oid)"
         " OR EXISTS (SELECT 1 FROM pg_class r WHERE r.relname = %s AND r.relnamespace = n.oid)"
         " FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace"
         " WHERE e.extname = 'dsync'")
UNPROBED = object()


def idle(conn: Any) -> bool:
    """Whether a psycopg 3 connection of the caller's is outside any
    transaction (autocommit), so that probe() may ask on it: inside one,
    the failure aborted it and nothing more can be asked there."""
    try:
        return conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    except Exception:
        return False


def _missing_name(exc: BaseException) -> str:
    """The dsync function or relation exc says does not exist."""
    m = _MISSING.match(_fields(exc)[1])
    return m.group(2) if m else ""


# The longest a probe may take where no call's time bounds it (the keeper's).
PROBE_TIMEOUT = 5.0


def probe(conn: Any, exc: BaseException, seconds: Optional[float] = PROBE_TIMEOUT) -> Any:
    """pg_extension's word on dsync and on the name exc says is missing,
    asked on conn (psycopg 3, idle in autocommit after the failure);
    UNPROBED if it cannot be asked, or not within seconds (the call's
    time left; None: no bound), past which conn is cut and closed."""
    if seconds is not None and seconds <= 0:
        return UNPROBED
    name = _missing_name(exc)
    key = BOUNDS.begin(conn, seconds) if seconds is not None else 0
    try:
        row = conn.execute(PROBE, (name, name)).fetchone()
    except Exception:
        return UNPROBED
    finally:
        if key and BOUNDS.end(key):
            conn.close()            # cut: not reusable
    return row if row is not None else None


async def probe_async(conn: Any, exc: BaseException,
                      seconds: Optional[float] = PROBE_TIMEOUT) -> Any:
    """probe() on an AsyncConnection."""
    if seconds is not None and seconds <= 0:
        return UNPROBED
    name = _missing_name(exc)
    bound = AsyncBound(conn, seconds) if seconds is not None else None
    try:
        cur = await conn.execute(PROBE, (name, name))
        row = await cur.fetchone()
    except Exception:
        return UNPROBED
    finally:
        if bound is not None and bound.end():
            await conn.close()
    return row if row is not None else None


def older_version(ext: Any) -> bool:
    """Whether probe()'s answer says the extension is there, in
    search_path, but has no function or relation of the missing name: an
    older version than the one the client asked of it."""
    return ext is not UNPROBED and ext is not None and bool(ext[2]) and not ext[3]


def probed(exc: BaseException, conn: Any, seconds: Optional[float] = PROBE_TIMEOUT) -> Any:
    """What probe() says for exc on conn if exc needs it and conn can be
    asked (idle); UNPROBED otherwise."""
    if conn is not None and needs_probe(exc) and idle(conn):
        return probe(conn, exc, seconds)
    return UNPROBED


async def probed_async(exc: BaseException, conn: Any,
                       seconds: Optional[float] = PROBE_TIMEOUT) -> Any:
    if conn is not None and needs_probe(exc) and idle(conn):
        return await probe_async(conn, exc, seconds)
    return UNPROBED


def specific(exc: BaseException, what: str, conn: Any,
             seconds: Optional[float] = PROBE_TIMEOUT) -> Optional[DsyncError]:
    """dsync's exception for exc if the server said something about dsync
    itself (not created, not loaded, stale, not held), asking pg_extension
    on conn when it is idle (within seconds); None otherwise, for the
    caller to handle exc as it did."""
    return _dsync_error(exc, what, conn, probed(exc, conn, seconds))


async def specific_async(exc: BaseException, what: str, conn: Any,
                         seconds: Optional[float] = PROBE_TIMEOUT) -> Optional[DsyncError]:
    """specific() on an AsyncConnection."""
    return _dsync_error(exc, what, conn, await probed_async(exc, conn, seconds))


def diagnose(exc: psycopg.Error, what: str, conn: Any = None,
             seconds: Optional[float] = PROBE_TIMEOUT) -> DsyncError:
    """from_psycopg(exc, what), asking pg_extension on conn first where
    that tells more (needs_probe, conn idle), within seconds: the one
    diagnosis of calls, guard, watch and the keeper."""
    db = _database(exc, conn)
    return from_psycopg(exc, what, ext=probed(exc, conn, seconds), db=db)


async def diagnose_async(exc: psycopg.Error, what: str, conn: Any = None,
                         seconds: Optional[float] = PROBE_TIMEOUT) -> DsyncError:
    """diagnose() on an AsyncConnection."""
    db = _database(exc, conn)
    return from_psycopg(exc, what, ext=await probed_async(exc, conn, seconds), db=db)


def _dsync_error(exc: BaseException, what: Optional[str], conn: Any,
                 ext: Any, db: Optional[str] = None) -> Optional[DsyncError]:
    """The dsync exception for what the server said about dsync itself
    (stale token, not held, not loaded, not created), or None."""
    state, primary, detail = _fields(exc)
    prefix = f"{what}: " if what else ""
    db = db or _database(exc, conn)
    where = f'database "{db}"' if db else "this database"
    err: Optional[DsyncError] = None
    if state == "55000" and primary.startswith(_NOT_PRELOADED):
        err = NotPreloaded(f"{prefix}dsync is not loaded by the server of {where} "
                           f"({primary}); {PRELOAD_HINT}")
        err.hint = PRELOAD_HINT
    elif state == "55000" and _STALE.match(primary):
        err = StaleToken(f"{prefix}{primary}" + (f" ({detail.rstrip('.')})" if detail else "")
                         + "; the lease this token came with was lost: acquire it again"
                         " before writing")
        err.resource = _STALE.match(primary).group(1)
        m = _STALE_DETAIL.match(detail or "")
        if m:
            err.token, err.accepted = int(m.group(1)), int(m.group(2))
    elif state == "55000" and _NOT_HELD.match(primary):
        err = NotHeld(f"{prefix}{primary}")
    elif (state == "42704" and primary.startswith(_DROPPED)) or _missing(state, primary):
        if ext is UNPROBED and "unknown" in primary:
            # Untyped parameters (psycopg2, text() without CAST) miss an
            # existing function as well: nothing to say beyond the server.
            return None
        if ext is UNPROBED or ext is None:
            maybe = "" if ext is None else \
                " (or its schema is not in search_path, or the arguments' types do not match)"
            hint = _create_hint(where)
            err = ExtensionNotCreated(f"{prefix}the dsync extension is not created in {where}"
                                      f"{maybe}: {primary}; {hint}")
            err.hint = hint
        else:
            schema, version, in_path, has_name = ext
            if in_path and has_name:
                hint = "cast every argument to the type of the SQL interface (CAST(:ttl AS interval))"
                err = ServerError(f"{prefix}{primary}: no dsync function takes these argument "
                                  f"types; {hint}")
            elif not in_path:
                hint = f'add schema "{schema}" to search_path, or create the extension again in one that is'
                err = ServerError(f'{prefix}{primary}: the dsync extension of {where} is in schema '
                                  f'"{schema}", which is not in search_path; {hint}')
            else:
                hint = f"run ALTER EXTENSION dsync UPDATE in {where}"
                err = ServerError(f"{prefix}{primary}: version {version} of the dsync extension "
                                  f"in {where} does not have it; {hint}")
            err.hint = hint
    elif state == "42710" and primary.startswith("semaphore "):
        # (Another 42710, a fence bound to another lease, is a ServerError.)
        err = SemaphoreMismatch(f"{prefix}{primary}")
    if err is not None:
        err.sqlstate = state
    return err


def from_psycopg(exc: psycopg.Error, what: str, conn: Any = None,
                 ext: Any = UNPROBED, db: Optional[str] = None) -> DsyncError:
    """Our exception for psycopg's exc, raised while doing what (a short
    phrase naming the operation and the lease).  conn: the connection it
    came from, or db: its database's name (for the message); ext: what
    probe() answered, for an exc of which needs_probe() said so."""
    state = getattr(exc, "sqlstate", None)
    if is_connection_error(exc):
        cls = DsyncConnectionError
    else:
        err = _dsync_error(exc, what, conn, ext, db)
        if err is not None:
            return err
        # What _dsync_error does not name: by class alone.
        if state == "55000":
            cls = NotHeld
        elif state is not None and state.startswith("22"):
            cls = InvalidArgument
        else:
            cls = ServerError
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    err = cls(f"{what}: {text}")
    err.sqlstate = state
    return err


def _is_asyncpg(exc: BaseException) -> bool:
    """Whether exc is asyncpg's error for what the server said (its
    PostgresError: SQLSTATE, message and detail as attributes)."""
    return (type(exc).__module__ or "").startswith("asyncpg") and hasattr(exc, "sqlstate")


def _driver_error(exc: BaseException) -> Optional[BaseException]:
    """The driver's error in exc: exc itself (psycopg 3, psycopg2, asyncpg)
    or, for SQLAlchemy's DBAPIError (Django's wrappers too), the one it
    wraps (under SQLAlchemy's asyncpg adapter, that one's __cause__)."""
    seen = 0
    while exc is not None and seen < 4:
        if isinstance(exc, psycopg.Error):
            return exc
        mod = type(exc).__module__ or ""
        if mod.startswith("psycopg2") and hasattr(exc, "pgcode"):
            return exc
        if _is_asyncpg(exc):
            return exc
        exc = getattr(exc, "orig", None) or exc.__cause__
        seen += 1
    return None


def translate(exc: BaseException, what: Optional[str] = None) -> Optional[DsyncError]:
    """The dsync exception for a driver's exception: psycopg 3's, psycopg2's,
    asyncpg's, or a SQLAlchemy DBAPIError (or Django DatabaseError)
    wrapping one.
    None if it is not one of dsync's (a unique violation of your table, a
    broken connection): re-raise it as it is.  The result keeps exc as
    __cause__ (raise it `from exc`, or use it as it is: it is set here)
    and the SQLSTATE in .sqlstate.

        except sqlalchemy.exc.DBAPIError as exc:
            err = dsync.errors.translate(exc)
            if err is None:
                raise
            raise err from exc

    what: a phrase the message starts with ('guarding lease "x"')."""
    if isinstance(exc, DsyncError):
        return exc
    inner = _driver_error(exc)
    if inner is None:
        return None
    err = _dsync_error(inner, what, None, UNPROBED)
    if err is not None:
        err.__cause__ = exc
    return err


def raise_translated(exc: BaseException, what: Optional[str] = None) -> None:
    """Raise translate(exc, what) from exc if exc is one of dsync's errors;
    return otherwise, for the caller to re-raise exc as it is."""
    err = translate(exc, what)
    if err is not None:
        raise err from exc
