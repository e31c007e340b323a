"""dsync: locks, semaphores, one-to-one events and leader election on
PostgreSQL with the dsync extension, for threads and for asyncio.

    from dsync import Lock
    with Lock("billing", conninfo="dbname=app", ttl=30) as lock:
        ...

A thin layer over dsync's SQL functions: the server does the locking,
waiting, expiry and fencing; this package renews, listens and types.
"""

from ._common import (DsyncError, LeaseEvent, ListenUnavailable, LockLost, NotHeld,
                      default_holder)
from .sync import Event, LeaderElection, Lock, ReadLock, Semaphore, watch
from .aio import AsyncEvent, AsyncLeaderElection, AsyncLock, AsyncReadLock, AsyncSemaphore, awatch

__version__ = "1.2.0"

__all__ = [
    "Lock", "ReadLock", "Semaphore", "Event", "LeaderElection", "watch",
    "AsyncLock", "AsyncReadLock", "AsyncSemaphore", "AsyncEvent", "AsyncLeaderElection", "awatch",
    "LeaseEvent", "DsyncError", "LockLost", "NotHeld", "ListenUnavailable",
    "default_holder",
]
