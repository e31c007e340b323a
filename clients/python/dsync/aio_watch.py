"""dsync.awatch: the asyncio form of dsync.watch (see watch.py)."""

from __future__ import annotations

import asyncio
import time
from typing import Any, AsyncIterator, Optional, Sequence

import psycopg

from . import _common as c
from . import errors
from . import _sql as sql
from .errors import ListenUnavailable
from ._common import LeaseEvent, Seconds
from ._wire import behind_pooler_async

__all__ = ["awatch"]


async def _listen(conn: psycopg.AsyncConnection, names: Sequence[str]) -> dict:
    cur = await conn.execute(sql.CHANNELS, (list(names),))
    chans = {ch: n for n, ch in await cur.fetchall()}
    if chans:
        await conn.execute(sql.listen_statement(list(chans)))
    return chans


class _Notifications:
    """Notifications of an idle connection as an asyncio queue, read off
    its socket without a query (psycopg 3.1's notifies() cannot time out)."""

    def __init__(self, conn: psycopg.AsyncConnection):
        self.conn = conn
        self.queue: asyncio.Queue = asyncio.Queue()
        self.loop = asyncio.get_running_loop()
        self.fd = conn.fileno()
        # Those that arrive while a query runs are psycopg's to read.
        conn.add_notify_handler(
            lambda n: self.queue.put_nowait((n.channel, n.payload, n.pid)))
        self.reading = False
        self.resume()

    def pause(self) -> None:
        """Before a query on the connection: psycopg reads its socket then."""
        if self.reading:
            self.loop.remove_reader(self.fd)
            self.reading = False

    def resume(self) -> None:
        if not self.reading:
            self.loop.add_reader(self.fd, self._readable)
            self.reading = True
            self._readable()

    def _readable(self) -> None:
        pg = self.conn.pgconn
        try:
            pg.consume_input()
        except Exception as exc:
            self.queue.put_nowait(exc)
            self.pause()
            return
        while True:
            n = pg.notifies()
            if n is None:
                return
            self.queue.put_nowait((n.relname.decode(), n.extra.decode(), n.be_pid))

    async def get(self, timeout: Optional[float]) -> Optional[tuple]:
        try:
            item = await asyncio.wait_for(self.queue.get(), timeout)
        except asyncio.TimeoutError:
            return None
        if isinstance(item, Exception):
            raise psycopg.OperationalError(str(item))
        return item

    def close(self) -> None:
        try:
            self.pause()
        except Exception:
            pass


async def _log_query(conn: psycopg.AsyncConnection, sql: str, params: Any = None) -> Optional[list]:
    """Rows of a query on the event log, or None if the installed version
    keeps none (before 1.4; see watch._log_query)."""
    try:
        cur = await conn.execute(sql, params)
        return await cur.fetchall()
    except psycopg.Error as exc:
        if errors.older_version(await errors.probed_async(exc, conn)):
            return None
        raise


async def awatch(names: Sequence[str], *, conninfo: str, timeout: Optional[Seconds] = None,
                 reconnect: bool = True, after: Optional[int] = None,
                 **connect_kwargs: Any) -> AsyncIterator[LeaseEvent]:
    """The asyncio form of dsync.watch: the current state, then events,
    resumed from the server's event log after a reconnect."""
    names = [c.name_arg(n, "name") for n in names]
    limit = c.interval(timeout, "timeout")
    resume = c.Resume(after)
    lost_at: Optional[float] = None
    kwargs = c.pool_settings(connect_kwargs, conninfo)
    kwargs.setdefault("application_name", "dsync watch")
    while True:
        try:
            conn = await psycopg.AsyncConnection.connect(conninfo, **kwargs)
        except psycopg.OperationalError:
            if not reconnect:
                raise
            await asyncio.sleep(1)
            continue
        notes = None
        try:
            if await behind_pooler_async(conn):
                raise ListenUnavailable(
                    "LISTEN does not work through this connection: it goes through a "
                    "connection pooler in transaction mode; watch needs a direct "
                    "connection (or a pool in session mode)")
            if not resume.started:
                # Where the log stands before we listen: nothing later is missed.
                top = await _log_query(conn, sql.LOG_TOP)
                resume.last = top[0][0] if top else None
            chans = await _listen(conn, names)
            notes = _Notifications(conn)
            notes.pause()
            gap, missed = None, []
            if resume.last is not None:
                gap, missed = resume.catch_up(
                    await _log_query(conn, sql.CATCH_UP, (resume.last, names)))
                if gap is None and lost_at is not None:
                    retention = await _log_query(conn, sql.RETENTION)
                    gap = resume.away_too_long(time.monotonic() - lost_at,
                                               retention[0][0] if retention else None)
            lost_at = None
            state = []
            if not resume.started or gap is not None or resume.last is None:
                cur = await conn.execute(sql.LEASE_STATE, (names,))
                state = await cur.fetchall()
            senders = await _senders(conn)
            notes.resume()
            # Everything is read before anything is yielded (see watch).
            resume.started = True
            if state:
                resume.saw_state(state)
            if gap is not None:
                yield gap
            for row in state:
                yield c.state_event(row)
            for channel, payload in missed:
                ev = c.parse_payload(channel, payload)
                if ev is not None and resume.fresh(ev):
                    yield ev
            while True:
                item = await notes.get(None if limit is None else limit.total_seconds())
                if item is None:
                    return
                channel, payload, pid = item
                if channel not in chans:
                    continue
                if senders and pid not in senders:
                    notes.pause()
                    senders = await _senders(conn)
                    notes.resume()
                    if pid not in senders:
                        continue
                ev = c.parse_payload(channel, payload)
                if ev is not None and resume.fresh(ev):
                    yield ev
        except psycopg.Error as exc:
            # A database without the extension, a server without dsync
            # preloaded: said as the library says it, not retried (a 55000
            # is an OperationalError, and was retried for ever).
            err = await errors.specific_async(exc, "watching " + ", ".join(repr(n) for n in names), conn)
            if err is not None:
                raise err from exc
            if not isinstance(exc, psycopg.OperationalError) or not reconnect:
                raise
            if lost_at is None:     # the first loss counts, not each failed retry
                lost_at = time.monotonic()
            await asyncio.sleep(0.2)
        finally:
            if notes is not None:
                notes.close()
            await conn.close()


async def _senders(conn: psycopg.AsyncConnection) -> set:
    cur = await conn.execute(sql.SENDERS)
    return c.sender_pids([d.name for d in cur.description], await cur.fetchone())
