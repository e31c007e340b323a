"""dsync for threads: Lock, ReadLock, Semaphore, Event and LeaderElection.

A lock object is owned like threading.RLock: by the thread that acquired
it (by the task, when a sync lock is used inside a running event loop).
The owner acquiring again counts, and n acquires need n releases; any
other thread using the same object has a holder name of its own on the
server and contends like any other holder.  So a module-level
`lock = Lock("x", conninfo=...)` shared by worker threads excludes them
from each other, as a threading.Lock would, and across processes too.

Every object runs on a Client (client.py): its own, or the default client
shared per connection string.  Held leases are renewed by the client's one
keeper; see clients/DESIGN.md.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
import time
import weakref
from datetime import datetime
from typing import Any, Callable, List, Optional, Tuple

import psycopg

from . import _common as c
from . import _sql as sql
from . import errors
from ._common import Seconds
from ._ledger import Hold, OwnerState
from ._views import ElectionViews, LeaseObject, OnClient
from .client import Client, default_client

log = logging.getLogger("dsync")

__all__ = ["Lock", "ReadLock", "Semaphore", "Event", "LeaderElection"]


class _OnClient(OnClient):
    """OnClient on the default clients of client.py."""

    _default_client = staticmethod(default_client)


# The calling thread's answer of current_owner(), made once per thread: a
# new one in a forked child (the forking thread is the child's main thread
# there), and kept with the thread identity it was made for (gevent's
# patching, done after this import, makes each greenlet an identity of its
# own within one real thread).
_this_thread = threading.local()


def _forget_thread_owners() -> None:
    """In a forked child: every thread's answer is made anew."""
    global _this_thread
    _this_thread = threading.local()


os.register_at_fork(after_in_child=_forget_thread_owners)


def current_owner() -> Tuple[Any, Callable[[], bool], str]:
    """Who acquires: the running asyncio task when there is one in this
    thread (a sync lock used from async code must not let the loop's tasks
    in together), else the thread.  With a test of whether it still runs,
    and what it is called in messages."""
    # Every acquire and release asks: no exception when no loop runs.
    task = asyncio.current_task() if asyncio._get_running_loop() is not None else None
    if task is not None:
        ref = weakref.ref(task)
        return task, lambda: (ref() is not None and not ref().done()), "task"
    ident = threading.get_ident()
    known = getattr(_this_thread, "owner", None)
    if known is None or known[0] != ident:
        known = _this_thread.owner = (ident, _thread_owner())
    return known[1]


def _is_sqlalchemy(conn: Any) -> bool:
    """Whether conn is a SQLAlchemy Connection or Session (a subclass, a
    scoped_session).  Only where SQLAlchemy is imported already: without
    it no such object exists, and dsync does not import it to ask."""
    engine = sys.modules.get("sqlalchemy.engine")
    orm = sys.modules.get("sqlalchemy.orm")
    return (engine is not None and isinstance(conn, engine.Connection)) or \
        (orm is not None and isinstance(conn, (orm.Session, orm.scoped_session)))


def _thread_owner() -> Tuple[Any, Callable[[], bool], str]:
    """The calling thread as current_owner() answers for it."""
    thread = threading.current_thread()
    if thread is threading.main_thread():
        # Its holds last until the process exits (at exit the default
        # clients give them back), even while other threads finish.
        return thread, lambda: True, "thread"
    ref = weakref.ref(thread)
    return thread, lambda: (ref() is not None and ref().is_alive()), "thread"


class Lock(_OnClient, LeaseObject):
    """A lease held for ttl seconds and renewed in the background while held.

        lock = Lock("billing", conninfo="dbname=app", ttl=30)   # or client.lock(...)
        with lock:                      # blocks until held
            token = lock.guard(conn)    # in the transaction that writes
            ...

    holder: the holder name on the server (default host:pid:random); a
    second thread holding at the same time (a semaphore, a read lock) is
    holder#2, and so on.  timeout: how long `with lock:` waits before it
    raises AcquireTimeout (None: no limit).  keep_alive=False: held without
    renewal, lapsing at its ttl (for short sections, and adapters that
    renew themselves).  on_lost(hold): called, from the client's keeper or
    watchdog thread, when a held lease is lost; keep it short.
    """

    _sql_acquire = sql.ACQUIRE

    def __init__(self, name: str, *, client: Optional[Client] = None,
                 conninfo: Optional[str] = None, pool: Any = None, ttl: Seconds = 30,
                 holder: Optional[str] = None, info: Any = None,
                 on_lost: Optional[Callable[[Hold], Any]] = None, keep_alive: bool = True,
                 timeout: Optional[Seconds] = None, listen: Optional[bool] = None,
                 raise_on_failure: bool = False, **connect_kwargs: Any):
        self._mutex = threading.Lock()
        self._settle(name, client, conninfo, pool, ttl, holder, info, on_lost, keep_alive, timeout,
                     listen, connect_kwargs, threading.Event)
        self.raise_on_failure = bool(raise_on_failure)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} holder={self.holder!r}>"

    def _prepare(self) -> None:
        """Semaphores define themselves here."""

    def _what(self, verb: str) -> str:
        return f'{verb} lease "{self.name}"'

    # -- taking and letting go ----------------------------------------------------

    def acquire(self, blocking: bool = True, timeout: Optional[Seconds] = None) -> bool:
        """Take the lease for the calling thread: True once held, False if
        not within timeout (blocking=False: at once).  The owner acquiring
        again only counts.  A blocking acquire waits inside the server,
        woken at the commit that frees the lease, never polling."""
        owner, alive, kind = current_owner()
        with self._mutex:
            st = self._owners.state(owner)
            # live(): a hold past its deadline is lost (reported now), not stacked on.
            if st.count > 0 and st.hold is not None and st.hold.live():
                st.count += 1
                return True
            if st.hold is not None and st.hold.given_back:
                self._owners.retire_name(st)        # the keeper releases that name
            holder = self._owners.take_name(st)
            if blocking and kind == "task" and self._held_in_this_loop(st):
                self._owners.free_name(st)
                raise RuntimeError(
                    f"a blocking acquire of {self!r} inside a running event loop, while another "
                    "task of that loop holds it, would block the loop for ever: use AsyncLock")
        deadline = c.deadline_of(timeout, time.monotonic())
        client = self.client
        keeper = client._keeper
        hold = None
        added = False
        try:
            self._prepare()
            keeper.start(keeper=self.keep_alive)
            mark = keeper.mark(sql.channel_of(self.name)) if self.keep_alive else None
            token, sent = client._acquire(self._sql_acquire,
                                          (self.name, holder, self.ttl, self.info),
                                          blocking, deadline, self._what("acquiring"))
            if token is None:
                with self._mutex:
                    self._owners.free_name(st)
                return self._not_had(blocking, timeout)
            hold = Hold(self, self.name, holder, token, self.ttl, self.keep_alive, sent,
                        st.lost, alive, kind)
            if self.keep_alive and not keeper.ensure(min(5.0, self.ttl.total_seconds() / 3)):
                raise errors.KeeperUnavailable(
                    f'lease "{self.name}" was granted but the keeper that renews it has no '
                    "connection; it was given back") from keeper.error
            st.lost.clear()
            keeper.add(hold, mark)
            added = True
            with self._mutex:
                # A count left is a lost hold's (a live one only counts,
                # above): its ownership ended with it, so this is a fresh
                # hold that one release frees (counting on would leave the
                # new lease held).  A failed acquire leaves it as it was.
                st.hold = hold
                st.count = 1
            return True
        except BaseException:
            # Interrupted, or not kept: a grant may have committed unseen,
            # or be held with nobody to renew it.  Give back what this call
            # may have taken (never a hold the owner had before it).
            if added:
                keeper.remove(hold)
            if hold is not None or not self._held_before(st, holder):
                self._give_back(st, holder)
            raise

    def _held_before(self, st: OwnerState, holder: str) -> bool:
        """Whether the owner held a live lease under holder before this
        call (then an interrupted call must not release it)."""
        with self._mutex:
            return st.count > 0 and st.holder == holder and st.hold is not None \
                and not st.hold.done

    def _held_in_this_loop(self, mine: OwnerState) -> bool:
        """Whether another task of the running loop holds this object."""
        loop = asyncio.get_running_loop()
        return any(st is not mine and st.count > 0 and isinstance(o, asyncio.Task)
                   and o.get_loop() is loop for o, st in list(self._owners.states.items()))

    def _give_back(self, st: OwnerState, holder: str) -> None:
        """Release holder's lease; if the server cannot be told now, the
        keeper does it later and the name is never used again (a later
        hold under it would be released by that late release)."""
        try:
            self.client._query(sql.RELEASE, (self.name, holder), self._what("releasing"),
                               retry=False)
        except errors.DsyncError:
            self.client._keeper.release_later(self.name, holder)
            with self._mutex:
                if st.holder == holder:
                    self._owners.retire_name(st)
            return
        with self._mutex:
            if st.holder == holder and st.count == 0:
                if st.hold is not None and st.hold.given_back:
                    self._owners.retire_name(st)
                else:
                    self._owners.free_name(st)

    def release(self) -> bool:
        """Let the lease go: True if it was still held until now.  Only the
        owner may release (NotHeld otherwise, as RLock raises); after n
        acquires the n-th release gives the lease back."""
        owner, _, _ = current_owner()
        with self._mutex:
            st = self._owners.get(owner)
            if st is None or st.count == 0:
                raise errors.NotHeld(f"{self!r} is not held by this "
                                     f"{'task' if isinstance(owner, asyncio.Task) else 'thread'}")
            st.count -= 1
            hold = st.hold
            if st.count > 0:
                return hold is not None and hold.live()
            st.hold = None
            holder = st.holder
        # live(), not done: a process stopped past the deadline hears of the
        # loss here (on_lost) even if its watchdog has not run yet.
        was_kept = hold is not None and hold.live()
        client = self.client
        if hold is not None:
            client._keeper.remove(hold)
        try:
            released = client._query(sql.RELEASE, (self.name, holder),
                                     self._what("releasing"), retry=False)
        except BaseException:
            # Not sent, or interrupted: the keeper makes sure of it, and the
            # name is never used again.
            client._keeper.release_later(self.name, holder)
            with self._mutex:
                self._owners.retire_name(st)
            raise
        with self._mutex:
            if hold is not None and hold.given_back:
                self._owners.retire_name(st)        # the keeper releases it too, later
            else:
                self._owners.free_name(st)
        if was_kept and not released and hold.refused_at_release():
            client._keeper.tell([hold])
        return bool(released) and was_kept

    def _owned_state(self) -> Optional[OwnerState]:
        """The caller's own state, if it holds.  Read without self._mutex
        (one dict lookup, atomic under the GIL; only the caller changes its
        own entry's count from above zero): holder, held, token and repr
        are read from code that runs under it, and it is not reentrant."""
        owner, _, _ = current_owner()
        st = self._owners.get(owner)
        return st if st is not None and st.count > 0 else None

    def renew(self, ttl: Optional[Seconds] = None) -> Optional[datetime]:
        """Extend the caller's hold now (the keeper does it every ttl/3
        anyway): the new expiry, or None, and the lease counts as lost, if
        it is no longer held.  With ttl, the lease is kept with that ttl
        from now on."""
        st = self._owned_state()
        if st is None or st.hold is None:
            raise errors.NotHeld(f"{self!r} is not held by this thread")
        ttl_td = c.positive(ttl, "ttl") if ttl is not None else st.hold.ttl
        timed: list = []
        expiry = self.client._query(sql.RENEW, (self.name, st.holder, ttl_td),
                                    self._what("renewing"), timed=timed)
        hold = st.hold
        if expiry is None:
            self.client._keeper.report([hold], "the renewal found the lease no longer held")
        elif timed:
            # From now on the lease is kept with the ttl it was renewed for.
            hold.set_ttl(ttl_td, max(hold.confirmed, timed[-1]) if ttl is None else timed[-1])
            self.client._keeper.retimed(hold)
        return expiry

    touch = renew

    def locked(self) -> bool:
        """Whether anyone holds the lease now (asks the server)."""
        return bool(self.client._query(sql.LOCKED, (self.name,), self._what("reading")))

    def owned(self) -> bool:
        """Whether the calling thread holds the lease now (asks the server)."""
        st = self._owned_state()
        if st is None:
            return False
        return self.client._query(sql.HELD, (self.name, st.holder), self._what("reading")) \
            is not None

    @property
    def lost(self) -> threading.Event:
        """Set when the calling thread's hold is lost, or found past its
        deadline now (and cleared when it takes the lease again)."""
        owner, _, _ = current_owner()
        with self._mutex:
            st = self._owners.state(owner)
            hold = st.hold if st.count > 0 else None
        if hold is not None:
            hold.live()             # a hold past its deadline is declared lost now
        return st.lost

    def guard(self, conn: Any) -> int:
        """In the caller's own transaction: the fencing token if the calling
        thread holds the lease (nobody can take it until that transaction
        ends), else NotHeld: at once, with no statement, if the calling
        thread holds nothing; from the server (SQLSTATE 55000; the
        transaction is then aborted) if its hold was lost.  conn: a psycopg 3 connection, or a SQLAlchemy Session or
        Connection (dsync.sqlalchemy.guard)."""
        if _is_sqlalchemy(conn):
            from .sqlalchemy import guard
            return guard(self, conn)
        holder = self._guard_holder()
        try:
            row = conn.execute(sql.ASSERT_HELD, (self.name, holder)).fetchone()
        except psycopg.Error as exc:
            raise errors.diagnose(exc, self._what("guarding"), conn) from exc
        return int(row[0])

    # -- the keeper's report --------------------------------------------------------

    def _lost(self, hold: Hold) -> None:
        if self.on_lost is not None:
            self.on_lost(hold)

    def close(self) -> None:
        """Give back every hold of this object (whichever thread owns it).
        The client and its connections stay: they are shared."""
        with self._mutex:
            states = self._owners.holding()
            for st in states:
                st.count = 0
        client = self.client
        for st in states:
            hold = st.hold
            if hold is not None:
                client._keeper.remove(hold)
            if st.holder is not None and not client._closed:
                self._give_back(st, st.holder)
            st.hold = None

    def __enter__(self) -> "Lock":
        if not self.acquire(timeout=self.timeout):
            raise errors.AcquireTimeout(
                f'lease "{self.name}" could not be acquired within {self.timeout}')
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


class ReadLock(Lock):
    """The shared side of a read-write lock: any number of ReadLocks of a
    name are held at once, never together with a Lock of it.  Once a Lock
    waits for the name, later ReadLocks wait behind it (writers never
    starve).  Owned, renewed, lost and guarded like a Lock."""

    _sql_acquire = sql.ACQUIRE_SHARED


class Semaphore(Lock):
    """A lease with permits: at most `permits` holders at once, across
    processes.  Each owning thread takes one permit.

    Semaphore(name, permits, ...) (or Semaphore.create) defines it at once,
    idempotently: SemaphoreMismatch if it exists with another count.
    Semaphore.attach(name, ...) uses an existing one without knowing its
    count, waiting up to timeout for it to be created."""

    def __init__(self, name: str, permits: int, **kwargs: Any):
        if not isinstance(permits, int) or isinstance(permits, bool) or not 1 <= permits <= 65535:
            raise ValueError("permits must be an int from 1 to 65535")
        self.permits = permits
        super().__init__(name, **kwargs)
        self.client._query(sql.SEM_CREATE, (self.name, permits),
                           f'creating semaphore "{self.name}"')

    @classmethod
    def create(cls, name: str, permits: int, **kwargs: Any) -> "Semaphore":
        return cls(name, permits, **kwargs)

    @classmethod
    def attach(cls, name: str, *, timeout: Optional[Seconds] = 60, **kwargs: Any) -> "Semaphore":
        """The semaphore `name` as some other process created it: its count
        read from the server.  SemaphoreNotFound if it does not exist within
        timeout (None: wait for ever; 0: look once)."""
        self = cls.__new__(cls)
        Lock.__init__(self, name, **kwargs)
        deadline = c.deadline_of(timeout, time.monotonic())
        pause = 0.05
        while True:
            permits = self.get_count()
            if permits is not None:
                self.permits = permits
                return self
            if deadline is not None and time.monotonic() >= deadline:
                raise errors.SemaphoreNotFound(f'semaphore "{self.name}" does not exist')
            time.sleep(pause if deadline is None else
                       max(0.0, min(pause, deadline - time.monotonic())))
            pause = min(pause * 2, 1.0)

    def get_count(self) -> Optional[int]:
        """The number of permits the server has for this semaphore (None:
        not defined).  Needs version 1.5 of the extension (an older one:
        ServerError saying to run ALTER EXTENSION dsync UPDATE)."""
        return self.client._query(sql.SEM_PERMITS, (self.name,),
                                  f'reading semaphore "{self.name}"')


class Event(_OnClient):
    """A one-to-one signal: each set() wakes exactly one wait()."""

    def __init__(self, name: str, *, client: Optional[Client] = None,
                 conninfo: Optional[str] = None, pool: Any = None, **connect_kwargs: Any):
        self.name = c.name_arg(name, "name")
        self._use(client, conninfo, pool, None, connect_kwargs)

    def _what(self, verb: str) -> str:
        return f'{verb} event "{self.name}"'

    def set(self) -> None:
        self.client._query(sql.EVENT_SET, (self.name,), self._what("setting"), retry=False)

    def wait(self, timeout: Optional[Seconds] = None) -> bool:
        """Consume one signal: True, or False after timeout (None: wait with
        no limit, in bounded slices inside the server)."""
        deadline = c.deadline_of(timeout, time.monotonic())
        if self.client._query(sql.EVENT_WAIT, (self.name, c.ZERO), self._what("waiting for"),
                              retry=False):
            return True
        while True:
            wait = c.next_wait(True, deadline, time.monotonic())
            if wait <= c.ZERO:
                return False
            if self.client._query(sql.EVENT_WAIT, (self.name, wait), self._what("waiting for"),
                                  wait=True, retry=False, server_wait=wait.total_seconds()):
                return True

    def clear(self) -> int:
        return int(self.client._query(sql.EVENT_CLEAR, (self.name,), self._what("clearing"),
                                      retry=False))

    def is_set(self) -> bool:
        return bool(self.client._query(sql.EVENT_IS_SET, (self.name,), self._what("reading")))

    def close(self) -> None:
        """Nothing to give back; kept for symmetry with the other objects."""


class LeaderElection(_OnClient, ElectionViews):
    """Join a group and campaign for its lease in a thread of its own;
    while leader, the lease is kept by the client's keeper.  on_leader()
    runs in the campaign thread when elected; on_leader_loss() as soon as
    leadership is lost (from the keeper's or watchdog's thread, before the
    lease's expiry lets anyone else in) and on stop.

    The campaign retries every attempt that fails (the server gone, a
    wait cancelled by statement_timeout or pg_cancel_backend, an error
    raised by on_leader) after a pause that grows from 0.1 s to at most
    min(ttl/3, 2 s): each failure is logged on the "dsync" logger, passed
    to on_error(exc) if given, and kept in last_error (failures counts
    them).  It ends only at stop().

    is_leader, leader_exists and status are properties that never wait:
    they read what the campaign last saw (at most ttl/3 old); leader()
    and members() ask the server."""

    def __init__(self, group: str, *, client: Optional[Client] = None,
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
        self._lock = Lock(self.group, client=client, conninfo=conninfo, pool=pool, listen=listen,
                          ttl=self.ttl, holder=member, info=info, on_lost=self._lost,
                          **connect_kwargs)
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._leader = threading.Event()
        self._leader_lock = threading.Lock()
        self._seen_leader: Optional[str] = None
        self._seen_at: Optional[float] = None
        self._token: Optional[int] = None
        self._hold: Optional[Hold] = None
        self.error: Optional[BaseException] = None

    # -- what it knows, without waiting -------------------------------------------

    def _elected(self) -> bool:
        return self._leader.is_set()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # -- what it asks the server ------------------------------------------------------

    def leader(self) -> Optional[str]:
        """The leading member now (asks the server)."""
        return self.client._query(sql.LEADER, (self.group,), f'reading group "{self.group}"')

    def members(self) -> List[dict]:
        """The group's live members (the cluster detail)."""
        rows = self.client._query(sql.MEMBERS, (self.group,), f'reading group "{self.group}"',
                                  rows=True)
        return [c.member_row(r) for r in rows]

    @property
    def cluster_detail(self) -> List[dict]:
        """members(), as mongoelector's property of that name (asks the
        server)."""
        return self.members()

    @property
    def ready(self) -> bool:
        """Whether the campaign has made its first attempt: is_leader and
        leader_exists then say what the server said."""
        return self._ready.is_set()

    def wait_ready(self, timeout: Optional[Seconds] = None) -> bool:
        """Wait until the campaign has made its first attempt at the lease
        (won it or found it held): True, or False after timeout (None: no
        limit) or if the campaign is not running."""
        deadline = c.deadline_of(timeout, time.monotonic())
        while not self._ready.is_set():
            if not self.running:
                return False
            left = 0.1 if deadline is None else min(0.1, deadline - time.monotonic())
            if left <= 0:
                return False
            self._ready.wait(left)
        return True

    # -- the campaign ---------------------------------------------------------------------

    def _end_leadership(self) -> None:
        """Leadership is over: on_leader_loss runs once, whoever sees it
        first (the keeper, the watchdog, the campaign, stop())."""
        with self._leader_lock:
            if not self._leader.is_set():
                return
            self._leader.clear()
            self._seen_leader = None
        if self.on_leader_loss is not None:
            self.on_leader_loss()

    def _lost(self, _hold: Hold) -> None:
        self._end_leadership()

    def _look(self) -> None:
        """Refresh the membership and see who leads."""
        row = self.client._query(sql.JOIN, (self.group, self.member, self.ttl,
                                            c.jsonb(self.info), self.group),
                                 f'joining group "{self.group}"', rows=True)
        self._seen_at = time.monotonic()
        if not self.is_leader:
            self._seen_leader = row[0][1] if row else None

    def run(self) -> None:
        """Campaign until stop(): the loop start() runs in a thread."""
        period = self.ttl.total_seconds() / 3
        next_look = 0.0
        failed = 0
        try:
            while not self._stop.is_set():
                try:
                    if time.monotonic() >= next_look:
                        self._look()
                        failed = 0
                        next_look = time.monotonic() + period
                    if self._lock.held:
                        self._stop.wait(max(0.0, min(next_look - time.monotonic(), period)))
                        continue
                    if self._lock._owned_state() is not None:
                        # Lost while leading: leadership ends, then campaign again.
                        self._end_leadership()
                        self._lock.release()
                        continue
                    timeout = max(0.05, min(period, next_look - time.monotonic()))
                    # The first attempt only tries, so that wait_ready()
                    # returns at once when another member leads.
                    got = self._lock.acquire(blocking=self._ready.is_set(), timeout=timeout)
                    failed = 0
                    if got:
                        if self._stop.is_set():
                            break
                        with self._leader_lock:
                            if self._lock.held:         # lost already: campaign on
                                self._hold = self._lock.hold
                                self._token = self._lock.token
                                self._seen_leader = self.member
                                self._leader.set()
                    self._ready.set()
                    if got and self._leader.is_set() and self.on_leader is not None:
                        self.on_leader()
                except Exception as exc:
                    # A restart, a failover, a cancelled wait, a bug in
                    # on_leader: a later attempt may succeed, and a member
                    # that stopped campaigning would never lead again.  The
                    # keeper's watchdog decides about a leadership held.
                    failed += 1
                    self._retrying(exc, failed)
        except BaseException as exc:          # reported by stop()
            self.error = exc
        finally:
            self._resign()

    def _retrying(self, exc: Exception, failed: int) -> None:
        """Report a failed attempt (log, on_error) and pause before the
        next one; stop() ends the pause."""
        pause = c.campaign_pause(failed, self.ttl.total_seconds())
        self.last_error = exc
        self.failures += 1
        c.campaign_failed(self.group, exc, pause)
        if self.on_error is not None:
            try:
                self.on_error(exc)
            except Exception:
                log.exception('dsync: on_error of group "%s" raised', self.group)
        self._stop.wait(pause)

    def _resign(self) -> None:
        # Leadership ends before the lease goes: nothing may still act as
        # leader once another member can be elected.
        self._end_leadership()
        try:
            if self._lock._owned_state() is not None:
                self._lock.release()
            self.client._query(sql.LEAVE, (self.group, self.member),
                               f'leaving group "{self.group}"', retry=False)
        except errors.DsyncError:
            pass

    def start(self) -> "LeaderElection":
        self._stop.clear()
        self._ready.clear()
        self._thread = threading.Thread(target=self.run, daemon=True,
                                        name=f"dsync election {self.group}")
        self._thread.start()
        return self

    def stop(self) -> None:
        """Resign and stop campaigning; raises what ended the campaign
        other than stop() (only a BaseException that is not an Exception
        can), if anything did."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self.error is not None:
            error, self.error = self.error, None
            raise error

    def __enter__(self) -> "LeaderElection":
        """Start campaigning, after a first statement: a wrong connection
        string or an unreachable server raises DsyncConnectionError here."""
        self.client.ping()
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
