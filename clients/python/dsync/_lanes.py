"""The connections a client runs its statements on: a lane per kind of
statement (short ones, blocking waits), each connection used by one
caller at a time, for the thread client (Lane) and the asyncio client
(AsyncLane).  See clients/DESIGN.md."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from contextlib import asynccontextmanager, contextmanager
from typing import Any, AsyncIterator, Deque, Iterator, List, Optional, Tuple

import psycopg

from . import _common as c


class Lane:
    """Connections for one kind of statement, each used by one thread at
    a time for a whole statement and its result: at most cap of them (None:
    as many as there are callers), of which keep stay open when idle
    (longer-idle ones beyond that are closed after idle_seconds)."""

    def __init__(self, client: Any, cap: Optional[int], keep: int,
                 idle_seconds: Optional[float]):
        self.client = client
        self.cap = cap
        self.keep = keep
        self.idle_seconds = idle_seconds
        self.idle: List[Tuple[psycopg.Connection, float]] = []
        self.open = 0
        self.cond = threading.Condition()

    @contextmanager
    def connection(self) -> Iterator[Tuple[psycopg.Connection, bool]]:
        """A connection of the caller's own until the block ends, and
        whether it was used before (a stale one may fail at once)."""
        pool = self.client._settings.pool
        if pool is not None:
            with pool.connection() as conn:
                yield conn, True
            return
        conn, reused = self._get()
        ok = False
        try:
            yield conn, reused
            ok = True
        finally:
            self._put(conn, ok)

    def _get(self) -> Tuple[psycopg.Connection, bool]:
        self.client._check_usable()
        while True:
            conn = None
            with self.cond:
                while not self.idle and self.cap is not None and self.open >= self.cap:
                    self.cond.wait()
                if self.idle:
                    conn, _ = self.idle.pop()               # the warmest first
                else:
                    self.open += 1
            if conn is None:
                break
            # Looked at outside the lock: it calls into libpq and polls.
            # An idle connection was left IDLE (_put): only the server can
            # have ended it since.
            if c.still_open(conn):
                return conn, True
            with self.cond:
                self.open -= 1
                self.cond.notify()
            conn.close()
        try:
            return self.client._connect({}), False
        except BaseException:
            with self.cond:
                self.open -= 1
                self.cond.notify()
            raise

    def _put(self, conn: psycopg.Connection, ok: bool) -> None:
        """Back to the idle list, unless the statement failed or was
        interrupted (closing the connection ends any wait in the server)."""
        now = time.monotonic()
        close = []
        with self.cond:
            # One call into libpq (each lets go of the GIL): a connection
            # that is bad or closed is not IDLE but UNKNOWN.
            if ok and not self.client._closed and \
                    conn.pgconn.transaction_status == psycopg.pq.TransactionStatus.IDLE:
                self.idle.append((conn, now))
            else:
                close.append(conn)
                self.open -= 1
            if self.idle_seconds is not None:
                while len(self.idle) > self.keep and now - self.idle[0][1] > self.idle_seconds:
                    close.append(self.idle.pop(0)[0])
                    self.open -= 1
            self.cond.notify()
        for conn in close:
            conn.close()

    def trim(self) -> None:
        """Close connections idle for longer than idle_seconds, beyond keep."""
        if self.idle_seconds is None:
            return
        now = time.monotonic()
        close = []
        with self.cond:
            while len(self.idle) > self.keep and now - self.idle[0][1] > self.idle_seconds:
                close.append(self.idle.pop(0)[0])
                self.open -= 1
        for conn in close:
            conn.close()

    def close(self) -> None:
        with self.cond:
            idle, self.idle = self.idle, []
            self.open -= len(idle)
            self.cond.notify_all()
        for conn, _ in idle:
            conn.close()


async def _abort(conn: psycopg.AsyncConnection) -> None:
    """End a connection that may be inside a statement: cancel it in the
    server (a wait ends there at once), then close."""
    try:
        conn.cancel()
    except Exception:
        pass
    await conn.close()


class AsyncLane:
    """Connections for one kind of statement, each used by one task at a
    time (see Lane)."""

    def __init__(self, client: Any, cap: Optional[int], keep: int,
                 idle_seconds: Optional[float]):
        self.client = client
        self.cap = cap
        self.keep = keep
        self.idle_seconds = idle_seconds
        self.idle: List[Tuple[psycopg.AsyncConnection, float]] = []
        self.open = 0
        self.waiters: Deque[asyncio.Future] = deque()

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[Tuple[psycopg.AsyncConnection, bool]]:
        pool = self.client._settings.pool
        if pool is not None:
            async with pool.connection() as conn:
                yield conn, True
            return
        conn, reused = await self._get()
        ok = False
        try:
            yield conn, reused
            ok = True
        finally:
            if ok:
                await self._put(conn)
            else:
                self.open -= 1
                self._wake_one()
                await asyncio.shield(_abort(conn))

    async def _get(self) -> Tuple[psycopg.AsyncConnection, bool]:
        self.client._check_usable()
        while True:
            while self.idle:
                conn, _ = self.idle.pop()
                if c.still_open(conn) and \
                        conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
                    return conn, True
                self.open -= 1
                await conn.close()
            if self.cap is None or self.open < self.cap:
                break
            fut = asyncio.get_running_loop().create_future()
            self.waiters.append(fut)
            try:
                await fut
            except asyncio.CancelledError:
                if fut in self.waiters:
                    self.waiters.remove(fut)
                elif not fut.cancelled():
                    self._wake_one()        # pass on the turn we were given
                raise
        self.open += 1
        try:
            return await self.client._connect({}), False
        except BaseException:
            self.open -= 1
            self._wake_one()
            raise

    def _wake_one(self) -> None:
        while self.waiters:
            fut = self.waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                return

    async def _put(self, conn: psycopg.AsyncConnection) -> None:
        now = time.monotonic()
        if not conn.closed and not self.client._closed and \
                conn.info.status == psycopg.pq.ConnStatus.OK and \
                conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
            self.idle.append((conn, now))
        else:
            self.open -= 1
            await conn.close()
        self._wake_one()
        await self.trim()

    async def trim(self) -> None:
        if self.idle_seconds is None:
            return
        now = time.monotonic()
        while len(self.idle) > self.keep and now - self.idle[0][1] > self.idle_seconds:
            conn, _ = self.idle.pop(0)
            self.open -= 1
            await conn.close()

    async def close(self) -> None:
        idle, self.idle = self.idle, []
        self.open -= len(idle)
        for conn, _ in idle:
            await conn.close()
        while self.waiters:
            fut = self.waiters.popleft()
            if not fut.done():
                fut.set_result(None)
