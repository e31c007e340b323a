"""dsync for asyncio: AsyncLock, AsyncSemaphore, AsyncEvent,
AsyncLeaderElection and awatch, the same shapes as dsync.sync.

A cancelled wait cancels the statement in the server and closes its
connection, so that no waiter is left behind in dsync_waiters.
"""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from typing import Any, AsyncIterator, Callable, List, Optional, Sequence

import psycopg

from . import _common as c
from ._common import LeaseEvent, Seconds

__all__ = ["AsyncLock", "AsyncReadLock", "AsyncSemaphore", "AsyncEvent", "AsyncLeaderElection", "awatch"]


class _Connector(c.ConnectionSettings):
    """A conninfo string or a psycopg_pool AsyncConnectionPool."""

    def __init__(self, conninfo: Optional[str], pool: Any, kwargs: dict):
        super().__init__(conninfo, pool, kwargs)
        self._own: Optional[psycopg.AsyncConnection] = None
        self._lock = asyncio.Lock()

    async def open(self, application_name: Optional[str] = None,
                   **extra: Any) -> psycopg.AsyncConnection:
        return await psycopg.AsyncConnection.connect(
            self.conninfo, **self.connect_kwargs(application_name, extra))

    async def value(self, sql: str, params: Sequence[Any] = ()) -> Any:
        if self.pool is not None:
            async with self.pool.connection() as conn:
                return await _value(conn, sql, params)
        async with self._lock:
            if self._own is not None and not c.still_open(self._own):
                await self._own.close()     # the server went away (failover, restart)
            if self._own is None or self._own.closed:
                self._own = await self.open()
            conn = self._own
            try:
                return await _value(conn, sql, params)
            except BaseException:
                self._own = None
                raise

    async def close(self) -> None:
        if self._own is not None:
            await self._own.close()
            self._own = None


async def _value(conn: psycopg.AsyncConnection, sql: str, params: Sequence[Any]) -> Any:
    """One statement's first value.  If the task is cancelled meanwhile
    (a wait in the server, say), the statement is cancelled in the server
    and the connection closed, which ends the wait there at once."""
    try:
        cur = await conn.execute(sql, params)
        row = await cur.fetchone()
        return row[0] if row else None
    except (asyncio.CancelledError, Exception):
        try:
            conn.cancel()
        except Exception:
            pass
        await conn.close()
        raise


async def _behind_pooler(conn: psycopg.AsyncConnection) -> bool:
    cur = await conn.execute(c.SQL_BACKEND_PID)
    return (await cur.fetchone())[0] != conn.info.backend_pid


async def _listen(conn: psycopg.AsyncConnection, names: Sequence[str]) -> dict:
    cur = await conn.execute(c.SQL_CHANNELS, (list(names),))
    chans = {ch: n for n, ch in await cur.fetchall()}
    for ch in chans:
        await conn.execute(psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(ch)))
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


class AsyncLock(c.LeaseSettings):
    """An asyncio lease: `async with AsyncLock("x", conninfo=...) as lock:`."""

    _sql_acquire = c.SQL_ACQUIRE

    def __init__(self, name: str, *, conninfo: Optional[str] = None, pool: Any = None,
                 ttl: Seconds = 30, holder: Optional[str] = None, info: Any = None,
                 on_lost: Optional[Callable[["AsyncLock"], Any]] = None,
                 listen: Optional[bool] = None, **connect_kwargs: Any):
        c.LeaseSettings.__init__(self, name, ttl, holder, info, on_lost, listen)
        self.lost = asyncio.Event()
        self._connector = _Connector(conninfo, pool, connect_kwargs)
        self._keeper: Optional[asyncio.Task] = None
        self._kept: Optional[tuple] = None      # the keeper's connection between holds
        self._closed = False
        self._watchdog: Optional[asyncio.Task] = None
        self._holds_until = 0.0

    async def _prepare(self) -> None:
        """Semaphores define themselves here."""

    async def acquire(self, blocking: bool = True, timeout: Optional[Seconds] = None) -> bool:
        deadline = c.deadline_of(timeout, time.monotonic())
        was_held = self._keeping()
        await self._prepare()
        try:
            while True:
                wait = c.next_wait(blocking, deadline, time.monotonic())
                token = await self._connector.value(
                    self._sql_acquire, (self.name, self.holder, self.ttl, wait, self.info))
                if token is not None:
                    await self._held(int(token), time.monotonic())
                    return True
                if not blocking or (deadline is not None and time.monotonic() >= deadline):
                    return False
        except BaseException:
            # Cancelled (or broken) after the grant may have committed: let
            # go of what this call may have taken, not of a lease held
            # before it, and leave no keeper behind.
            if not was_held:
                await asyncio.shield(self._abandon())
            raise

    async def _abandon(self) -> None:
        await self._stop_keeper()
        self.token = None
        try:
            await self._connector.value(c.SQL_RELEASE, (self.name, self.holder))
        except Exception:
            pass

    def _keeping(self) -> bool:
        return (self._keeper is not None and not self._keeper.done()
                and not self.lost.is_set())

    async def _held(self, token: int, granted: float) -> None:
        self.token = token
        # The lease lasts at least until then (time.monotonic()), whatever
        # the client's and the server's wall clocks say.
        self._holds_until = granted + self.ttl.total_seconds()
        if self._keeping():
            return                          # reentrant: the same lease, extended
        await self._stop_keeper()
        self.lost.clear()
        self.lost_reason = None
        started = asyncio.Event()
        self._keeper = asyncio.create_task(self._keep(started))
        self._watchdog = asyncio.create_task(self._watch())
        await started.wait()

    async def _watch(self) -> None:
        """The watchdog, a task of its own so that a renewal stuck on a dead
        network or a stalled server cannot hold it up: the lease counts as
        lost shortly before it could expire unrenewed."""
        margin = min(1.0, self.ttl.total_seconds() / 10)
        while not self.lost.is_set():
            left = self._holds_until - margin - time.monotonic()
            if left <= 0:
                await self._set_lost("no renewal could be confirmed before the lease could expire")
                return
            await asyncio.sleep(min(left, 0.5))

    async def _connect(self):
        """The keeper's connection and, where LISTEN works, its
        notifications (the ones the lock's last keeper left, if any, so
        that taking a lock again costs no new server process and no
        LISTEN); then whether the lease is still held, asked after the
        LISTEN so that nothing falls between the two."""
        kept, self._kept = self._kept, None
        if kept is not None and kept[1] is not None:
            kept[1].pause()
        if kept is not None and not c.still_open(kept[0]):
            await kept[0].close()       # the server went away (failover, restart)
            kept = None
        if kept is not None:
            conn, notes = kept
        else:
            conn, notes = await self._connector.open(**c.keeper_settings(self.name, self.ttl)), None
        try:
            if kept is None and self.listen is not False and not await _behind_pooler(conn):
                await _listen(conn, [self.name])
                notes = _Notifications(conn)
                notes.pause()
            elif kept is None and self.listen is True:
                raise c.ListenUnavailable(
                    "LISTEN does not work through this connection (a pooler in "
                    "transaction mode); a lost lease is noticed at the next renewal")
            cur = await conn.execute(c.SQL_HELD, (self.name, self.holder))
            held = await cur.fetchone() is not None
            if notes is not None:
                # Older than the answer (a listening backend delivers them
                # when a transaction ends), such as the release of the
                # previous hold: dropped.
                while not notes.queue.empty():
                    notes.queue.get_nowait()
                notes.resume()
            return conn, notes, held
        except BaseException:
            if notes is not None:
                notes.close()
            await conn.close()
            raise

    async def _keep(self, started: asyncio.Event) -> None:
        conn = None
        notes = None
        healthy = True
        period = self.ttl.total_seconds() / 3
        next_renew = time.monotonic() + period
        try:
            try:
                conn, notes, held = await self._connect()
                if not held:
                    await self._set_lost("the lease was not held by the time the keeper started")
                    return
            finally:
                started.set()
            while not self.lost.is_set():
                try:
                    if conn is None:
                        conn, notes, held = await self._connect()
                        if not held:
                            await self._set_lost("the lease was not held after the keeper reconnected")
                            return
                    timeout = max(0.0, next_renew - time.monotonic())
                    if notes is not None:
                        item = await notes.get(timeout)
                        if item is not None:
                            ev = c.parse_payload(item[0], item[1])
                            if ev is not None and c.lost_by(ev, self.name, self.holder):
                                await self._set_lost(f"the lease was {ev.kind}")
                                return
                            continue
                    else:
                        await asyncio.sleep(timeout)
                    if time.monotonic() >= next_renew:
                        sent = time.monotonic()
                        if notes is not None:
                            notes.pause()
                        cur = await conn.execute(c.SQL_RENEW, (self.name, self.holder, self.ttl))
                        expiry = (await cur.fetchone())[0]
                        if notes is not None:
                            notes.resume()
                        if expiry is None:
                            await self._set_lost("the renewal found the lease no longer held")
                            return
                        self._holds_until = sent + self.ttl.total_seconds()
                        next_renew = time.monotonic() + period
                except (psycopg.OperationalError, psycopg.InterfaceError, OSError):
                    # A broken connection: a new one, until the watchdog says
                    # the lease may have expired.
                    if notes is not None:
                        notes.close()
                    notes = None
                    if conn is not None:
                        await conn.close()
                    conn = None
                    await asyncio.sleep(min(0.5, period))
                    next_renew = time.monotonic()
        except asyncio.CancelledError:
            pass
        except Exception as exc:
            healthy = False
            await self._set_lost(f"the keeper failed: {exc!r}")
        finally:
            if notes is not None:
                notes.pause()
            if conn is not None:
                # Keep a sound, idle connection for the lock's next hold.
                if (healthy and not self._closed and self._kept is None and not conn.closed
                        and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE):
                    self._kept = (conn, notes)
                else:
                    await conn.close()

    async def _set_lost(self, why: str) -> None:
        if self.lost.is_set():
            return
        self.lost_reason = why
        self.lost.set()
        if self.on_lost is not None:
            result = self.on_lost(self)
            if asyncio.iscoroutine(result):
                await result

    async def _stop_keeper(self) -> None:
        tasks = [self._keeper, self._watchdog]
        self._keeper = self._watchdog = None
        for task in tasks:
            if task is not None and task is not asyncio.current_task():
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass

    async def release(self) -> bool:
        await self._stop_keeper()
        released = bool(await self._connector.value(c.SQL_RELEASE, (self.name, self.holder)))
        self.token = None
        return released

    async def renew(self, ttl: Optional[Seconds] = None) -> Optional[datetime]:
        ttl_td = c.interval(ttl, "ttl") or self.ttl
        sent = time.monotonic()
        expiry = await self._connector.value(c.SQL_RENEW, (self.name, self.holder, ttl_td))
        if expiry is None:
            await self._set_lost("the renewal found the lease no longer held")
        else:
            self._holds_until = sent + ttl_td.total_seconds()
        return expiry

    touch = renew

    async def locked(self) -> bool:
        return bool(await self._connector.value(
            "SELECT EXISTS (SELECT 1 FROM dsync_leases WHERE lease = %s::text)", (self.name,)))

    async def owned(self) -> bool:
        return await self._connector.value(c.SQL_HELD, (self.name, self.holder)) is not None

    def check(self) -> None:
        if self.lost.is_set():
            raise self.lost_error()

    async def guard(self, conn: psycopg.AsyncConnection) -> int:
        cur = await conn.execute(c.SQL_ASSERT_HELD, (self.name, self.holder))
        return int((await cur.fetchone())[0])

    async def close(self) -> None:
        self._closed = True
        await self._stop_keeper()
        kept, self._kept = self._kept, None
        if kept is not None:
            await kept[0].close()
        await self._connector.close()

    async def __aenter__(self) -> "AsyncLock":
        await self.acquire()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await asyncio.shield(self.release())


class AsyncReadLock(AsyncLock):
    """The shared side of a read-write lock (see ReadLock)."""

    _sql_acquire = c.SQL_ACQUIRE_SHARED


class AsyncSemaphore(AsyncLock):
    def __init__(self, name: str, permits: int, **kwargs: Any):
        if not isinstance(permits, int) or isinstance(permits, bool) or permits < 1:
            raise ValueError("permits must be a positive int")
        self.permits = permits
        self._created = False
        super().__init__(name, **kwargs)

    async def _prepare(self) -> None:
        if not self._created:
            await self._connector.value(c.SQL_SEM_CREATE, (self.name, self.permits))
            self._created = True


class AsyncEvent:
    def __init__(self, name: str, *, conninfo: Optional[str] = None, pool: Any = None,
                 **connect_kwargs: Any):
        self.name = c.name_arg(name, "name")
        self._connector = _Connector(conninfo, pool, connect_kwargs)

    async def set(self) -> None:
        await self._connector.value(c.SQL_EVENT_SET, (self.name,))

    async def wait(self, timeout: Optional[Seconds] = None) -> bool:
        deadline = c.deadline_of(timeout, time.monotonic())
        while True:
            wait = c.next_wait(True, deadline, time.monotonic())
            if await self._connector.value(c.SQL_EVENT_WAIT, (self.name, wait)):
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False

    async def clear(self) -> int:
        return int(await self._connector.value(c.SQL_EVENT_CLEAR, (self.name,)))

    async def is_set(self) -> bool:
        return bool(await self._connector.value(c.SQL_EVENT_IS_SET, (self.name,)))

    async def close(self) -> None:
        await self._connector.close()


class AsyncLeaderElection(c.ElectionSettings):
    """Leader election as an asyncio task: `task = election.start()`;
    cancelling the task (or `await election.stop()`) resigns cleanly."""

    def __init__(self, group: str, *, conninfo: Optional[str] = None, pool: Any = None,
                 ttl: Seconds = 15, member: Optional[str] = None, info: Any = None,
                 on_leader: Optional[Callable[[], Any]] = None,
                 on_leader_loss: Optional[Callable[[], Any]] = None,
                 listen: Optional[bool] = None, **connect_kwargs: Any):
        c.ElectionSettings.__init__(self, AsyncLock, group, conninfo, pool, ttl, member, info,
                                    on_leader, on_leader_loss, listen, connect_kwargs)
        self._leader = False
        self._task: Optional[asyncio.Task] = None

    @property
    def is_leader(self) -> bool:
        return self._leader

    @property
    def token(self) -> Optional[int]:
        return self._lock.token if self._leader else None

    async def leader_exists(self) -> bool:
        return await self._lock._connector.value(c.SQL_LEADER, (self.group,)) is not None

    async def members(self) -> List[dict]:
        conn = await self._lock._connector.open()
        try:
            cur = await conn.execute(c.SQL_MEMBERS, (self.group,))
            rows = await cur.fetchall()
        finally:
            await conn.close()
        return [c.member_row(r) for r in rows]

    async def _call(self, fn: Optional[Callable[[], Any]]) -> None:
        if fn is not None:
            result = fn()
            if asyncio.iscoroutine(result):
                await result

    async def _end_leadership(self) -> None:
        """Leadership is over: on_leader_loss runs once."""
        if self._leader:
            self._leader = False
            await self._call(self.on_leader_loss)

    async def _lost(self, _lock: AsyncLock) -> None:
        await self._end_leadership()

    async def run(self) -> None:
        period = self.ttl.total_seconds() / 3
        next_join = 0.0
        try:
            while True:
                try:
                    if time.monotonic() >= next_join:
                        await self._lock._connector.value(
                            c.SQL_JOIN, (self.group, self.member, self.ttl, c.jsonb(self.info)))
                        next_join = time.monotonic() + period
                    if self._leader:
                        if self._lock.lost.is_set():
                            await self._end_leadership()
                            continue
                        await asyncio.sleep(max(0.0, min(0.5, next_join - time.monotonic())))
                        continue
                    if await self._lock.acquire(
                            timeout=max(0.05, min(period, next_join - time.monotonic()))):
                        if self._lock.lost.is_set():
                            continue            # lost already: campaign on
                        self._leader = True
                        await self._call(self.on_leader)
                except psycopg.OperationalError:
                    # The server went away: the lease's watchdog decides
                    # about leadership; retry.
                    await asyncio.sleep(0.5)
        finally:
            await asyncio.shield(self._resign())

    async def _resign(self) -> None:
        # Leadership ends before the lease goes.
        await self._end_leadership()
        try:
            await self._lock.release()
            await self._lock._connector.value(c.SQL_LEAVE, (self.group, self.member))
        except psycopg.Error:
            pass
        await self._lock.close()

    def start(self) -> asyncio.Task:
        self._task = asyncio.create_task(self.run())
        return self._task

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    async def __aenter__(self) -> "AsyncLeaderElection":
        self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()


async def _log_query(conn: psycopg.AsyncConnection, sql: str, params: Any = None) -> Optional[list]:
    """Rows of a query on the event log, or None if the installed version
    keeps none (before 1.4)."""
    try:
        cur = await conn.execute(sql, params)
        return await cur.fetchall()
    except (psycopg.errors.UndefinedTable, psycopg.errors.UndefinedFunction):
        return None


async def awatch(names: Sequence[str], *, conninfo: str, timeout: Optional[Seconds] = None,
                 reconnect: bool = True, after: Optional[int] = None,
                 **connect_kwargs: Any) -> AsyncIterator[LeaseEvent]:
    """The asyncio form of dsync.watch: the current state, then events,
    resumed from the server's event log after a reconnect."""
    names = [c.name_arg(n, "name") for n in names]
    limit = c.interval(timeout, "timeout")
    resume = c.Resume(after)
    lost_at: Optional[float] = None
    kwargs = c.pool_settings(connect_kwargs)
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
            if await _behind_pooler(conn):
                raise c.ListenUnavailable(
                    "LISTEN does not work through this connection: it goes through a "
                    "connection pooler in transaction mode; watch needs a direct "
                    "connection (or a pool in session mode)")
            if not resume.started:
                # Where the log stands before we listen: nothing later is missed.
                top = await _log_query(conn, c.SQL_LOG_TOP)
                resume.last = top[0][0] if top else None
            chans = await _listen(conn, names)
            notes = _Notifications(conn)
            notes.pause()
            gap, missed = None, []
            if resume.last is not None:
                gap, missed = resume.catch_up(
                    await _log_query(conn, c.SQL_CATCH_UP, (resume.last, names)))
                if gap is None and lost_at is not None:
                    retention = await _log_query(conn, c.SQL_RETENTION)
                    gap = resume.away_too_long(time.monotonic() - lost_at,
                                               retention[0][0] if retention else None)
            lost_at = None
            state = []
            if not resume.started or gap is not None or resume.last is None:
                cur = await conn.execute(c.SQL_LEASE_STATE, (names,))
                state = await cur.fetchall()
            senders = await _senders(conn)
            notes.resume()
            # Everything is read before anything is yielded (see watch).
            resume.started = True
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
        except psycopg.OperationalError:
            if not reconnect:
                raise
            if lost_at is None:     # the first loss counts, not each failed retry
                lost_at = time.monotonic()
            await asyncio.sleep(0.2)
        finally:
            if notes is not None:
                notes.close()
            await conn.close()


async def _senders(conn: psycopg.AsyncConnection) -> set:
    cur = await conn.execute(c.SQL_SENDERS)
    return c.sender_pids([d.name for d in cur.description], await cur.fetchone())
