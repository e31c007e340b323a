"""The library's exceptions: one hierarchy under DsyncError.

Each also derives from the built-in exception a Python programmer would
catch for the same trouble (TimeoutError, RuntimeError, ValueError,
LookupError, ConnectionError), so code written for threading or asyncio
primitives keeps working.  An error that came from the server or the
driver keeps psycopg's exception as its __cause__, and its SQLSTATE in
.sqlstate.
"""

from __future__ import annotations

from typing import Optional

import psycopg


class DsyncError(Exception):
    """Base class of every error this library raises on its own."""

    sqlstate: Optional[str] = None


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


def from_psycopg(exc: psycopg.Error, what: str) -> DsyncError:
    """Our exception for psycopg's exc, raised while doing what (a short
    phrase naming the operation and the lease)."""
    state = getattr(exc, "sqlstate", None)
    if is_connection_error(exc):
        cls = DsyncConnectionError
    elif state == "42710":
        cls = SemaphoreMismatch
    elif state == "55000":
        cls = NotHeld
    elif state is not None and state.startswith("22"):
        cls = InvalidArgument
    else:
        cls = ServerError
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    err = cls(f"{what}: {text}")
    err.sqlstate = state
    return err
