"""dsync for asyncio: AsyncLock, AsyncReadLock, AsyncSemaphore, AsyncEvent
and AsyncLeaderElection, the shapes of dsync.sync.

A lock object is owned by the task that acquired it: the task acquiring
again counts (n acquires need n releases), and any other task using the
same object has a holder name of its own on the server and waits, or gets
False, like any other holder.  So three tasks sharing one AsyncLock take
turns.  (Before Python 3.12, asyncio.wait_for runs its coroutine in a task
of its own: use acquire(timeout=...) rather than wrapping acquire in it.)

Objects run on an AsyncClient: one given, or the running loop's default
client for their connection string.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
import weakref
from datetime import datetime
from typing import Any, Awaitable, Callable, List, Optional

import psycopg

from . import _common as c
from . import _sql as sql
from . import aio_client
from . import errors
from ._common import Seconds
from ._ledger import Hold, OwnerState
from ._views import ElectionViews, LeaseObject, OnClient
from .aio_client import AsyncClient
from .aio_watch import awatch

__all__ = ["AsyncLock", "AsyncReadLock", "AsyncSemaphore", "AsyncEvent", "AsyncLeaderElection",
           "awatch"]


class _OnClient(OnClient):
    """OnClient on the running loop's default clients (aio_client.py)."""

    _default_client = staticmethod(aio_client.default_client)


def _current_task() -> asyncio.Task:
    task = asyncio.current_task()
    if task is None:
        raise RuntimeError("dsync's asyncio objects must be used from a task")
    return task


def _is_async_sqlalchemy(conn: Any) -> bool:
    """Whether conn is a SQLAlchemy AsyncSession or AsyncConnection (a
    subclass, an async_scoped_session).  Only where sqlalchemy.ext.asyncio
    is imported already: without it no such object exists, and dsync does
    not import it to ask (as dsync.sync's _is_sqlalchemy)."""
    ext = sys.modules.get("sqlalchemy.ext.asyncio")
    if ext is None:
        return False
    kinds = tuple(getattr(ext, kind) for kind in
                  ("AsyncSession", "AsyncConnection", "async_scoped_session")
                  if hasattr(ext, kind))
    return isinstance(conn, kinds)


class AsyncLock(_OnClient, LeaseObject):
    """An asyncio lease: `async with AsyncLock("x", conninfo=...) as lock:`
    (or client.lock("x")).  The arguments are dsync.Lock's; on_lost may be
    a coroutine function (it then runs in a task of its own)."""

    _owner_word = "task"

    _sql_acquire = sql.ACQUIRE

    def __init__(self, name: str, *, client: Optional[AsyncClient] = None,
                 conninfo: Optional[str] = None, pool: Any = None, ttl: Seconds = 30,
                 holder: Optional[str] = None, info: Any = None,
                 on_lost: Optional[Callable[[Hold], Any]] = None, keep_alive: bool = True,
                 timeout: Optional[Seconds] = None, listen: Optional[bool] = None,
                 raise_on_failure: bool = False, **connect_kwargs: Any):
        self._settle(name, client, conninfo, pool, ttl, holder, info, on_lost, keep_alive, timeout,
                     listen, connect_kwargs, asyncio.Event)
        self.raise_on_failure = bool(raise_on_failure)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} holder={self.holder!r}>"

    async def _prepare(self, client: AsyncClient) -> None:
        """Semaphores define themselves here."""

    def _what(self, verb: str) -> str:
        return f'{verb} lease "{self.name}"'

    async def acquire(self, blocking: bool = True, timeout: Optional[Seconds] = None) -> bool:
        """Take the lease for the current task (see dsync.Lock.acquire)."""
        task = _current_task()
        st = self._owners.state(task)
        # live(): a hold past its deadline is lost (reported now), not stacked on.
        if st.count > 0 and st.hold is not None and st.hold.live():
            st.count += 1
            return True
        if st.hold is not None and st.hold.given_back:
            self._owners.retire_name(st)            # the keeper releases that name
        holder = self._owners.take_name(st)
        deadline = c.deadline_of(timeout, time.monotonic())
        client = self.client
        hold = None
        added = False
        try:
            await self._prepare(client)
            keeper = client.keeper
            keeper.start(connect=self.keep_alive)
            mark = keeper.mark(sql.channel_of(self.name)) if self.keep_alive else None
            token, sent = await client._acquire(self._sql_acquire,
                                                (self.name, holder, self.ttl, self.info),
                                                blocking, deadline, self._what("acquiring"))
            if token is None:
                self._owners.free_name(st)
                return self._not_had(blocking, timeout)
            ref = weakref.ref(task)
            hold = Hold(self, self.name, holder, token, self.ttl, self.keep_alive, sent,
                        st.lost, lambda: ref() is not None and not ref().done(), "task")
            if self.keep_alive and \
                    not await keeper.ensure(min(5.0, self.ttl.total_seconds() / 3)):
                raise errors.KeeperUnavailable(
                    f'lease "{self.name}" was granted but the keeper that renews it has no '
                    "connection; it was given back") from keeper.error
            st.lost.clear()
            keeper.add(hold, mark)
            added = True
            st.hold = hold
            st.count = 1            # a fresh hold: see dsync.Lock.acquire
            return True
        except BaseException:
            # Cancelled (or not kept) after a grant may have committed: give
            # back what this call may have taken, not a hold from before it.
            if added:
                client.keeper.remove(hold)
            if hold is not None or not (st.count > 0 and st.holder == holder and
                                        st.hold is not None and not st.hold.done):
                await asyncio.shield(self._give_back(client, st, holder))
            raise

    async def _give_back(self, client: AsyncClient, st: OwnerState, holder: str) -> None:
        """See dsync.Lock._give_back."""
        try:
            await client._query(sql.RELEASE, (self.name, holder), self._what("releasing"),
                                retry=False)
        except errors.DsyncError:
            client.keeper.release_later(self.name, holder)
            if st.holder == holder:
                self._owners.retire_name(st)
            return
        if st.holder == holder and st.count == 0:
            if st.hold is not None and st.hold.given_back:
                self._owners.retire_name(st)
            else:
                self._owners.free_name(st)

    async def release(self) -> bool:
        """Let the lease go: True if it was still held until now.  Only the
        owning task may release (NotHeld otherwise)."""
        st = self._owners.get(_current_task())
        if st is None or st.count == 0:
            raise errors.NotHeld(f"{self!r} is not held by this task")
        st.count -= 1
        hold = st.hold
        if st.count > 0:
            return hold is not None and hold.live()
        st.hold = None
        holder = st.holder
        # live(), not done: a loop blocked past the deadline hears of the
        # loss here (on_lost) even if its watchdog has not run yet.
        was_kept = hold is not None and hold.live()
        client = self.client
        if hold is not None:
            client.keeper.remove(hold)
        try:
            released = await client._query(sql.RELEASE, (self.name, holder),
                                           self._what("releasing"), retry=False)
        except BaseException:
            # Not sent, or cancelled mid-release: the keeper makes sure of
            # it, and the name is never used again.
            client.keeper.release_later(self.name, holder)
            self._owners.retire_name(st)
            raise
        if hold is not None and hold.given_back:
            self._owners.retire_name(st)            # the keeper releases it too, later
        else:
            self._owners.free_name(st)
        if was_kept and not released and hold.refused_at_release():
            client.keeper.tell([hold])
        return bool(released) and was_kept

    def _owned_state(self) -> Optional[OwnerState]:
        try:
            st = self._owners.get(_current_task())
        except RuntimeError:
            return None
        return st if st is not None and st.count > 0 else None

    async def renew(self, ttl: Optional[Seconds] = None) -> Optional[datetime]:
        st = self._owned_state()
        if st is None or st.hold is None:
            raise errors.NotHeld(f"{self!r} is not held by this task")
        ttl_td = c.positive(ttl, "ttl") if ttl is not None else st.hold.ttl
        timed: list = []
        client = self.client
        expiry = await client._query(sql.RENEW, (self.name, st.holder, ttl_td),
                                     self._what("renewing"), timed=timed)
        hold = st.hold
        if expiry is None:
            client.keeper.report([hold], "the renewal found the lease no longer held")
        elif timed:
            # From now on the lease is kept with the ttl it was renewed for.
            hold.set_ttl(ttl_td, max(hold.confirmed, timed[-1]) if ttl is None else timed[-1])
            client.keeper.retimed(hold)
        return expiry

    touch = renew

    async def locked(self) -> bool:
        return bool(await self.client._query(sql.LOCKED, (self.name,), self._what("reading")))

    async def owned(self) -> bool:
        st = self._owned_state()
        if st is None:
            return False
        return await self.client._query(sql.HELD, (self.name, st.holder),
                                        self._what("reading")) is not None

    @property
    def lost(self) -> asyncio.Event:
        """Set when the current task's hold is lost, or found past its
        deadline now."""
        st = self._owners.state(_current_task())
        if st.count > 0 and st.hold is not None:
            st.hold.live()          # a hold past its deadline is declared lost now
        return st.lost

    async def guard(self, conn: Any) -> int:
        """In the caller's own transaction: the fencing token if the current
        task holds the lease, else NotHeld (see dsync.Lock.guard).  conn: a
        psycopg 3 AsyncConnection, or a SQLAlchemy AsyncSession or
        AsyncConnection (dsync.sqlalchemy.guard, through run_sync)."""
        if _is_async_sqlalchemy(conn):
            from .sqlalchemy import guard
            if not hasattr(conn, "run_sync"):   # an async_scoped_session (1.4)
                conn = conn()                   # this scope's AsyncSession
            # run_sync's function runs in this task (a greenlet of it), so
            # guard() reads this task's own holder name.
            return await conn.run_sync(lambda sync_conn: guard(self, sync_conn))
        holder = self._guard_holder()
        try:
            cur = await conn.execute(sql.ASSERT_HELD, (self.name, holder))
            row = await cur.fetchone()
        except psycopg.Error as exc:
            raise await errors.diagnose_async(exc, self._what("guarding"), conn) from exc
        return int(row[0])

    def _lost(self, hold: Hold) -> Any:
        if self.on_lost is not None:
            return self.on_lost(hold)
        return None

    async def close(self) -> None:
        """Give back every hold of this object, whichever task owns it."""
        states = self._owners.holding()
        client = self.client
        for st in states:
            st.count = 0
            hold = st.hold
            if hold is not None:
                client.keeper.remove(hold)
            if st.holder is not None and not client._closed:
                await self._give_back(client, st, st.holder)
            st.hold = None

    async def __aenter__(self) -> "AsyncLock":
        if not await self.acquire(timeout=self.timeout):
            raise errors.AcquireTimeout(
                f'lease "{self.name}" could not be acquired within {self.timeout}')
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.release()


class AsyncReadLock(AsyncLock):
    """The shared side of a read-write lock (see dsync.ReadLock)."""

    _sql_acquire = sql.ACQUIRE_SHARED


class AsyncSemaphore(AsyncLock):
    """A lease with permits (see dsync.Semaphore).  `await
    AsyncSemaphore.create(name, permits, ...)` defines it at once
    (SemaphoreMismatch if it exists with another count); `await
    AsyncSemaphore.attach(name, ...)` uses an existing one.  The plain
    constructor defines it at the first acquire."""

    def __init__(self, name: str, permits: Optional[int], **kwargs: Any):
        if permits is not None and (not isinstance(permits, int) or isinstance(permits, bool)
                                    or not 1 <= permits <= 65535):
            raise ValueError("permits must be an int from 1 to 65535")
        self.permits = permits
        self._created = permits is None
        super().__init__(name, **kwargs)

    async def _prepare(self, client: AsyncClient) -> None:
        if not self._created:
            await client._query(sql.SEM_CREATE, (self.name, self.permits),
                                f'creating semaphore "{self.name}"')
            self._created = True

    @classmethod
    async def create(cls, name: str, permits: int, **kwargs: Any) -> "AsyncSemaphore":
        self = cls(name, permits, **kwargs)
        await self._prepare(self.client)
        return self

    @classmethod
    async def attach(cls, name: str, *, timeout: Optional[Seconds] = 60,
                     **kwargs: Any) -> "AsyncSemaphore":
        """See dsync.Semaphore.attach."""
        self = cls(name, None, **kwargs)
        deadline = c.deadline_of(timeout, time.monotonic())
        pause = 0.05
        while True:
            permits = await self.get_count()
            if permits is not None:
                self.permits = permits
                return self
            if deadline is not None and time.monotonic() >= deadline:
                raise errors.SemaphoreNotFound(f'semaphore "{self.name}" does not exist')
            await asyncio.sleep(pause if deadline is None else
                                max(0.0, min(pause, deadline - time.monotonic())))
            pause = min(pause * 2, 1.0)

    async def get_count(self) -> Optional[int]:
        return await self.client._query(sql.SEM_PERMITS, (self.name,),
                                        f'reading semaphore "{self.name}"')


class AsyncEvent(_OnClient):
    """A one-to-one signal: each set() wakes exactly one wait()."""

    def __init__(self, name: str, *, client: Optional[AsyncClient] = None,
                 conninfo: Optional[str] = None, pool: Any = None, **connect_kwargs: Any):
        self.name = c.name_arg(name, "name")
        self._use(client, conninfo, pool, None, connect_kwargs)

    def _what(self, verb: str) -> str:
        return f'{verb} event "{self.name}"'

    async def set(self) -> None:
        await self.client._query(sql.EVENT_SET, (self.name,), self._what("setting"), retry=False)

    async def wait(self, timeout: Optional[Seconds] = None) -> bool:
        deadline = c.deadline_of(timeout, time.monotonic())
        client = self.client
        if await client._query(sql.EVENT_WAIT, (self.name, c.ZERO), self._what("waiting for"),
                               retry=False):
            return True
        while True:
            wait = c.next_wait(True, deadline, time.monotonic())
            if wait <= c.ZERO:
                return False
            if await client._query(sql.EVENT_WAIT, (self.name, wait), self._what("waiting for"),
                                   wait=True, retry=False, server_wait=wait.total_seconds()):
                return True

    async def clear(self) -> int:
        return int(await self.client._query(sql.EVENT_CLEAR, (self.name,),
                                            self._what("clearing"), retry=False))

    async def is_set(self) -> bool:
        return bool(await self.client._query(sql.EVENT_IS_SET, (self.name,),
                                             self._what("reading")))

    async def close(self) -> None:
        """Nothing to give back; kept for symmetry."""


class AsyncLeaderElection(_OnClient, ElectionViews):
    """Leader election as an asyncio task: `task = election.start()`;
    cancelling the task (or `await election.stop()`) resigns cleanly.
    is_leader, leader_exists and status are properties that read what the
    campaign last saw; `await leader()` and `await members()` ask.  A
    failed attempt is retried as dsync.LeaderElection retries it (on_error
    may be a coroutine function); only cancelling ends the campaign."""

    def __init__(self, group: str, *, client: Optional[AsyncClient] = None,
                 conninfo: Optional[str] = None, pool: Any = None, ttl: Seconds = 15,
                 member: Optional[str] = None, info: Any = None,
                 on_leader: Optional[Callable[[], Any]] = None,
                 on_leader_loss: Optional[Callable[[], Any]] = None,
                 on_error: Optional[Callable[[BaseException], Any]] = None,
                 listen: Optional[bool] = None, **connect_kwargs: Any):
        self.group = c.name_arg(group, "group")
        self.ttl = c.positive(ttl, "ttl")
        self.info = info
        self.on_leader = on_leader
        self.on_leader_loss = on_leader_loss
        self.on_error = on_error
        self.last_error: Optional[BaseException] = None
        self.failures = 0
        self._use(client, conninfo, pool, listen, connect_kwargs)
        self._lock = AsyncLock(self.group, client=client, conninfo=conninfo, pool=pool,
                               listen=listen, ttl=self.ttl, holder=member, info=info,
                               on_lost=self._lost, **connect_kwargs)
        self._leader = False
        self._hold: Optional[Hold] = None
        self._seen_leader: Optional[str] = None
        self._seen_at: Optional[float] = None
        self._token: Optional[int] = None
        self._task: Optional[asyncio.Task] = None
        self._ready: Optional[asyncio.Event] = None

    def _elected(self) -> bool:
        return self._leader

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def leader(self) -> Optional[str]:
        return await self.client._query(sql.LEADER, (self.group,),
                                        f'reading group "{self.group}"')

    async def members(self) -> List[dict]:
        rows = await self.client._query(sql.MEMBERS, (self.group,),
                                        f'reading group "{self.group}"', rows=True)
        return [c.member_row(r) for r in rows]

    @property
    def cluster_detail(self) -> Awaitable[List[dict]]:
        """`await election.cluster_detail`: members(), as mongoelector's
        property of that name."""
        return self.members()

    @property
    def ready(self) -> bool:
        """Whether the campaign has made its first attempt."""
        return self._ready is not None and self._ready.is_set()

    async def wait_ready(self, timeout: Optional[Seconds] = None) -> bool:
        """Wait until the campaign has made its first attempt at the lease
        (won it or found it held): True, or False after timeout (None: no
        limit) or if the campaign is not running."""
        deadline = c.deadline_of(timeout, time.monotonic())
        await asyncio.sleep(0)          # a campaign task made just now starts
        while not self.ready:
            if not self.running:
                return False
            left = 0.1 if deadline is None else min(0.1, deadline - time.monotonic())
            if left <= 0:
                return False
            await asyncio.sleep(left)
        return True

    async def __call__(self, *, task_status: Any = None) -> None:
        """Campaign until cancelled, as an AnyIO task that reports when it
        is ready: `await task_group.start(election)` returns once the first
        attempt was made, as grelmicro's LeaderElection does."""
        self._ready = asyncio.Event()
        self._task = asyncio.current_task()
        await self.run(on_ready=task_status.started if task_status is not None else None)

    async def _call(self, fn: Optional[Callable[[], Any]]) -> None:
        if fn is not None:
            result = fn()
            if asyncio.iscoroutine(result):
                await result

    async def _end_leadership(self) -> None:
        """Leadership is over: on_leader_loss runs once."""
        if self._leader:
            self._leader = False
            self._seen_leader = None
            await self._call(self.on_leader_loss)

    async def _lost(self, _hold: Hold) -> None:
        await self._end_leadership()

    async def _look(self) -> None:
        rows = await self.client._query(sql.JOIN, (self.group, self.member, self.ttl,
                                                   c.jsonb(self.info), self.group),
                                        f'joining group "{self.group}"', rows=True)
        self._seen_at = time.monotonic()
        if not self._leader:
            self._seen_leader = rows[0][1] if rows else None

    async def run(self, on_ready: Optional[Callable[[], Any]] = None) -> None:
        """Campaign until cancelled (start() runs it as a task).  on_ready
        is called once the first attempt was made (see wait_ready)."""
        period = self.ttl.total_seconds() / 3
        next_look = 0.0
        failed = 0
        if self._ready is None:
            self._ready = asyncio.Event()
        ready = self._ready
        try:
            while True:
                try:
                    if time.monotonic() >= next_look:
                        await self._look()
                        failed = 0
                        next_look = time.monotonic() + period
                    if self._lock.held:
                        await asyncio.sleep(max(0.0, min(0.5, next_look - time.monotonic())))
                        continue
                    if self._lock._owned_state() is not None:
                        await self._end_leadership()
                        await self._lock.release()
                        continue
                    # The first attempt only tries (see LeaderElection.run).
                    got = await self._lock.acquire(
                        blocking=ready.is_set(),
                        timeout=max(0.05, min(period, next_look - time.monotonic())))
                    failed = 0
                    elected = got and self._lock.held
                    if elected:
                        self._hold = self._lock.hold
                        self._token = self._lock.token
                        self._seen_leader = self.member
                        self._leader = True
                    if not ready.is_set():
                        ready.set()
                        if on_ready is not None:
                            on_ready()
                    if elected:
                        await self._call(self.on_leader)
                except Exception as exc:
                    # See dsync.LeaderElection.run: every failure is retried.
                    failed += 1
                    await self._retrying(exc, failed)
        finally:
            # In this task (it owns the lease), even when cancelled.
            await self._resign()

    async def _retrying(self, exc: Exception, failed: int) -> None:
        """Report a failed attempt (log, on_error) and pause before the
        next one."""
        pause = c.campaign_pause(failed, self.ttl.total_seconds())
        self.last_error = exc
        self.failures += 1
        c.campaign_failed(self.group, exc, pause)
        if self.on_error is not None:
            try:
                result = self.on_error(exc)
                if asyncio.iscoroutine(result):
                    await result
            except Exception:
                logging.getLogger("dsync").exception('dsync: on_error of group "%s" raised',
                                                     self.group)
        await asyncio.sleep(pause)

    async def _resign(self) -> None:
        # Leadership ends before the lease goes.
        await self._end_leadership()
        try:
            if self._lock._owned_state() is not None:
                await self._lock.release()
            await self.client._query(sql.LEAVE, (self.group, self.member),
                                     f'leaving group "{self.group}"', retry=False)
        except errors.DsyncError:
            pass

    def start(self) -> asyncio.Task:
        self._ready = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self.run(),
                                                            name=f"dsync election {self.group}")
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
        """Start campaigning, after a first statement (see
        dsync.LeaderElection.__enter__)."""
        await self.client.ping()
        self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()
