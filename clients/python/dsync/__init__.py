"""dsync: locks, semaphores, one-to-one events and leader election on
PostgreSQL with the dsync extension, for threads and for asyncio.

    from dsync import Client
    client = Client("dbname=app")
    with client.lock("billing", ttl=30) as lock:
        ...

    from dsync import Lock                       # a default client per conninfo
    with Lock("billing", conninfo="dbname=app", ttl=30):
        ...

A layer over dsync's SQL functions: the server does the locking, waiting,
expiry and fencing; the client renews what it holds with one keeper,
listens, and types.  clients/DESIGN.md tells how.
"""

from ._common import LeaseEvent, default_holder
from ._ledger import Hold
from ._version import __version__
from .aio import (AsyncEvent, AsyncLeaderElection, AsyncLock, AsyncReadLock, AsyncSemaphore,
                  awatch)
from .aio_client import AsyncClient
from .client import Client
from .errors import (AcquireTimeout, LockExists, DsyncConnectionError, DsyncError,
                     ExtensionNotCreated, InvalidArgument, KeeperUnavailable, ListenUnavailable,
                     LockLost, NotHeld, NotPreloaded, SemaphoreMismatch, SemaphoreNotFound,
                     ServerError, StaleToken)
from .sync import Event, LeaderElection, Lock, ReadLock, Semaphore
from .watch import watch

__all__ = [
    "Client", "Lock", "ReadLock", "Semaphore", "Event", "LeaderElection", "watch",
    "AsyncClient", "AsyncLock", "AsyncReadLock", "AsyncSemaphore", "AsyncEvent",
    "AsyncLeaderElection", "awatch",
    "Hold", "LeaseEvent", "default_holder", "__version__",
    "DsyncError", "AcquireTimeout", "LockExists", "LockLost", "NotHeld", "SemaphoreMismatch",
    "SemaphoreNotFound", "DsyncConnectionError", "KeeperUnavailable", "ListenUnavailable",
    "ServerError", "InvalidArgument", "StaleToken", "ExtensionNotCreated", "NotPreloaded",
]
