"""A grelmicro sync backend on dsync: grelmicro's Lock, TaskLock and
LeaderElection, with dsync doing the locking.

grelmicro (https://github.com/grelinfo/grelmicro) drives its primitives
through a small backend protocol (`grelmicro.sync.abc.SyncBackend`, as of
0.26.0): an async context manager with acquire(name, token, duration),
release(name, token), locked(name) and owned(name, token), all keyword
arguments.  grelmicro renews a lease itself by acquiring it again with the
same token, so this backend holds nothing on its own: each call is one
statement, the lease lapses at its duration unless grelmicro renews it,
and grelmicro's token is dsync's holder.

    from dsync.grelmicro import DsyncSyncBackend
    micro = Grelmicro(uses=[Sync(DsyncSyncBackend("postgresql://app@db/app"))])

grelmicro cancels calls that outlast its timeouts: a cancelled call's
statement finishes in the background and its connection stays in the
client's pool (pool_size connections at most, 2 by default), so a slow
server is not also flooded with new connections.

grelmicro is not needed to import this module.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any, Optional

from . import _common as c
from . import _sql as sql
from .aio_client import AsyncClient

__all__ = ["DsyncSyncBackend"]


def _conninfo_from_env(prefix: str) -> Optional[str]:
    """A connection string from the environment, as grelmicro's Postgres
    provider reads it: {prefix}URL, or {prefix}HOST with PORT, USER,
    PASSWORD and DB."""
    url = os.environ.get(f"{prefix}URL")
    if url:
        return url
    host = os.environ.get(f"{prefix}HOST")
    if not host:
        return None
    parts = {"host": host, "port": os.environ.get(f"{prefix}PORT"),
             "user": os.environ.get(f"{prefix}USER"),
             "password": os.environ.get(f"{prefix}PASSWORD"),
             "dbname": os.environ.get(f"{prefix}DB")}
    from psycopg.conninfo import make_conninfo
    return make_conninfo(**{k: v for k, v in parts.items() if v})


class DsyncSyncBackend:
    """grelmicro's SyncBackend protocol on dsync.

    url: a PostgreSQL URL or conninfo string; None reads the environment
    (POSTGRES_URL, or POSTGRES_HOST and friends; env_prefix changes the
    prefix).  Or give client= (an AsyncClient, not closed on exit) or
    pool= (a psycopg_pool AsyncConnectionPool).  Through PgBouncer in
    transaction mode every call works."""

    def __init__(self, url: Optional[str] = None, *, client: Optional[AsyncClient] = None,
                 pool: Any = None, env_prefix: str = "POSTGRES_", **connect_kwargs: Any):
        given = sum(x is not None for x in (url, client, pool))
        if given > 1:
            raise TypeError("give at most one of url, client and pool")
        if given == 0:
            url = _conninfo_from_env(env_prefix)
            if url is None:
                raise ValueError(f"give url, client or pool, or set {env_prefix}URL "
                                 f"(or {env_prefix}HOST)")
        self._given_client = client
        self._args = (url, pool, connect_kwargs)
        self._client: Optional[AsyncClient] = client
        self._loop: Optional[asyncio.AbstractEventLoop] = None

    async def __aenter__(self) -> "DsyncSyncBackend":
        # grelmicro's thread adapters send coroutines to this loop.
        self._loop = asyncio.get_running_loop()
        if self._client is None or self._client._closed:
            url, pool, kwargs = self._args
            self._client = AsyncClient(url, pool=pool, **kwargs)
        # Connected now: a wrong URL fails here, and the first call finds
        # a connection ready.
        await self._client.ping()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        if self._client is not None and self._client is not self._given_client:
            await self._client.close()
            self._client = None

    def _connected(self) -> AsyncClient:
        if self._client is None:
            raise RuntimeError("use the backend inside `async with` (grelmicro opens it)")
        return self._client

    async def acquire(self, *, name: str, token: str, duration: float) -> bool:
        """Take name for token for duration seconds: True if granted (or
        extended: token held it already), False if another token holds it.
        Never waits."""
        ttl = c.positive(duration, "duration")
        result = await self._connected()._query(
            sql.ACQUIRE, (c.name_arg(name, "name"), c.name_arg(token, "token"), ttl, c.ZERO,
                          None), f'acquiring lease "{name}"', shield=True)
        return result is not None

    async def release(self, *, name: str, token: str) -> bool:
        """True if token held name (live) and has let it go."""
        return bool(await self._connected()._query(
            sql.RELEASE, (c.name_arg(name, "name"), c.name_arg(token, "token")),
            f'releasing lease "{name}"', retry=False, shield=True))

    async def locked(self, *, name: str) -> bool:
        return bool(await self._connected()._query(sql.LOCKED, (c.name_arg(name, "name"),),
                                                   f'reading lease "{name}"', shield=True))

    async def owned(self, *, name: str, token: str) -> bool:
        return await self._connected()._query(
            sql.HELD, (c.name_arg(name, "name"), c.name_arg(token, "token")),
            f'reading lease "{name}"', shield=True) is not None


# grelmicro's own adapters are named *SyncAdapter since 0.26; both names work.
DsyncSyncAdapter = DsyncSyncBackend
