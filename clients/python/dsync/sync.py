"""dsync for threads: Lock, Semaphore, Event, LeaderElection and watch.

A held lease is kept by a keeper thread on a connection of its own: it
renews every ttl/3, listens on the lease's channel so that a release by
someone else (dsync_force_release) or an expiry is known at once, and
declares the lease lost if no renewal has been confirmed shortly before
the lease could expire, so that the holder hears of the loss before
anyone else can take the lease.  That moment is reckoned on the client's
monotonic clock from when the last successful grant or renewal was sent
(the server's expiry is later than that plus the ttl), never by comparing
the client's wall clock with the server's.
"""

from __future__ import annotations

import select
import socket
import threading
import time
from contextlib import contextmanager
from datetime import datetime
from typing import Any, Callable, Iterator, List, Optional, Sequence

import psycopg

from . import _common as c
from ._common import LeaseEvent, Seconds

__all__ = ["Lock", "Semaphore", "Event", "LeaderElection", "watch"]


class _Connector(c.ConnectionSettings):
    """Where connections come from: a conninfo string or a psycopg_pool
    ConnectionPool.  Short statements borrow from the pool; the keeper and
    waits that must stay on one session get a connection of their own."""

    def __init__(self, conninfo: Optional[str], pool: Any, kwargs: dict):
        super().__init__(conninfo, pool, kwargs)
        self._own: Optional[psycopg.Connection] = None
        self._lock = threading.Lock()

    def open(self, application_name: Optional[str] = None, **extra: Any) -> psycopg.Connection:
        return psycopg.connect(self.conninfo, **self.connect_kwargs(application_name, extra))

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection]:
        if self.pool is not None:
            with self.pool.connection() as conn:
                yield conn
            return
        with self._lock:
            if self._own is not None and not c.still_open(self._own):
                self._own.close()       # the server went away (failover, restart)
            if self._own is None or self._own.closed:
                self._own = self.open()
            conn = self._own
        try:
            yield conn
        except BaseException:
            # Interrupted mid-statement (KeyboardInterrupt, a broken
            # connection): close it, which ends any wait in the server.
            conn.close()
            raise

    def value(self, sql: str, params: Sequence[Any] = ()) -> Any:
        with self.connection() as conn:
            row = conn.execute(sql, params).fetchone()
            return row[0] if row else None

    def close(self) -> None:
        with self._lock:
            if self._own is not None:
                self._own.close()
                self._own = None


def behind_pooler(conn: psycopg.Connection) -> bool:
    """Whether conn goes through a connection pooler (PgBouncer sends a
    backend key of its own, so the server's pid differs from libpq's)."""
    pid = conn.execute(c.SQL_BACKEND_PID).fetchone()[0]
    return pid != conn.info.backend_pid


def _channels(conn: psycopg.Connection, names: Sequence[str]) -> dict:
    rows = conn.execute(c.SQL_CHANNELS, (list(names),)).fetchall()
    return {channel: name for name, channel in rows}


def _listen(conn: psycopg.Connection, channels: Sequence[str]) -> None:
    for ch in channels:
        conn.execute(psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(ch)))


def _drain(conn: psycopg.Connection) -> List[tuple]:
    """The notifications that have arrived, without a query (psycopg 3.1's
    notifies() cannot time out): (channel, payload, sender pid)."""
    pg = conn.pgconn
    pg.consume_input()
    out = []
    while True:
        n = pg.notifies()
        if n is None:
            return out
        out.append((n.relname.decode(), n.extra.decode(), n.be_pid))


class _Keeper:
    """The threads that keep one held lease (or leadership) alive: the
    keeper renews and listens; the watchdog declares the loss when no
    renewal got through in time, whatever the keeper is stuck in."""

    def __init__(self, owner: "Lock", token: int, granted: float):
        self.owner = owner
        self.token = token
        # The lease lasts at least until this time.monotonic() value.
        self.holds_until = granted + owner.ttl.total_seconds()
        self.stop_r, self.stop_w = socket.socketpair()
        self.thread = threading.Thread(target=self._run, daemon=True,
                                       name=f"dsync keeper {owner.name}")
        self.listening = False
        self.ready = threading.Event()
        self.pending = owner._pending
        self.healthy = True
        self.stopped = threading.Event()
        self.watchdog = threading.Thread(target=self._watch, daemon=True,
                                         name=f"dsync watchdog {owner.name}")

    def start(self) -> None:
        self.thread.start()
        self.watchdog.start()
        self.ready.wait(10)

    def lost(self, why: str) -> None:
        """Report a loss, unless the keeper was stopped meanwhile (a stuck
        renewal returning after release() must not report anything)."""
        if not self.stopped.is_set():
            self.owner._set_lost(why)

    def _watch(self) -> None:
        """The watchdog, in a thread of its own so that a renewal stuck on
        a dead network or a stalled server cannot hold it up: the lease
        counts as lost shortly before it could expire unrenewed."""
        while not self.stopped.is_set() and not self.owner.lost.is_set():
            left = self.holds_until - self._margin() - time.monotonic()
            if left <= 0:
                self.lost("no renewal could be confirmed before the lease could expire")
                return
            self.stopped.wait(min(left, 0.5))

    def stop(self) -> None:
        """Stop both threads.  A keeper stuck in a renewal (a stalled
        server, a dead network) is not waited for beyond a moment: it is
        a daemon thread, flagged stopped, and reports nothing when it
        returns."""
        self.stopped.set()
        try:
            self.stop_w.send(b"x")
        except OSError:
            pass
        for t in (self.thread, self.watchdog):
            if t is not threading.current_thread() and t.is_alive():
                t.join(2.0)
        if not self.thread.is_alive():
            self.stop_r.close()
            self.stop_w.close()

    def _margin(self) -> float:
        # Declare a loss this long before the lease could expire: the
        # holder must stop before anyone else can be granted the lease.
        return min(1.0, self.owner.ttl.total_seconds() / 10)

    def _connect(self) -> psycopg.Connection:
        """The keeper's connection, listening on the lease's channel where
        LISTEN works: the one the lock's last keeper left, if any, so that
        taking a lock again costs no new server process and no LISTEN."""
        o = self.owner
        kept, o._kept = o._kept, None
        if kept is not None and c.still_open(kept[0]):
            self.listening = kept[1]
            return kept[0]
        if kept is not None:
            kept[0].close()
        pending = o._pending
        conn = o._connector.open(**c.keeper_settings(o.name, o.ttl))
        # Notifications that arrive during a query: psycopg reads them.
        conn.add_notify_handler(lambda n: pending.append((n.channel, n.payload, n.pid)))
        if o.listen is not False and not behind_pooler(conn):
            _listen(conn, list(_channels(conn, [o.name])))
            self.listening = True
        elif o.listen is True:
            conn.close()
            raise c.ListenUnavailable(
                "LISTEN does not work through this connection (a pooler in "
                "transaction mode); a lost lease is noticed at the next renewal")
        return conn

    def _still_held(self, conn: psycopg.Connection) -> bool:
        """Whatever happened before the LISTEN (or while reconnecting): ask
        once.  Notifications delivered by then are older than the answer
        (a listening backend delivers them when a transaction ends), such as
        the release of this lock's previous hold: they are dropped."""
        held = conn.execute(c.SQL_HELD, (self.owner.name, self.owner.holder)).fetchone() is not None
        if self.listening:
            _drain(conn)
        self.pending.clear()
        return held

    def _run(self) -> None:
        o = self.owner
        conn: Optional[psycopg.Connection] = None
        period = o.ttl.total_seconds() / 3
        next_renew = time.monotonic() + period
        try:
            try:
                conn = self._connect()
                if not self._still_held(conn):
                    self.lost("the lease was not held by the time the keeper started")
                    return
            finally:
                self.ready.set()
            while not o.lost.is_set() and not self.stopped.is_set():
                try:
                    if conn is None or conn.closed:
                        conn = self._connect()
                        if not self._still_held(conn):
                            self.lost("the lease was not held after the keeper reconnected")
                            return
                    timeout = max(0.0, next_renew - time.monotonic())
                    fds = [self.stop_r] + ([conn.fileno()] if self.listening else [])
                    readable, _, _ = select.select(fds, [], [], 0 if self.pending else timeout)
                    if self.stop_r in readable:
                        return
                    notes = self.pending[:]
                    self.pending.clear()
                    if self.listening and conn.fileno() in readable:
                        notes += _drain(conn)
                    for channel, payload, _pid in notes:
                        ev = c.parse_payload(channel, payload)
                        if ev is not None and c.lost_by(ev, o.name, o.holder):
                            self.lost(f"the lease was {ev.kind}")
                            return
                    if time.monotonic() >= next_renew:
                        sent = time.monotonic()
                        expiry = conn.execute(c.SQL_RENEW, (o.name, o.holder, o.ttl)).fetchone()[0]
                        if expiry is None:
                            self.lost("the renewal found the lease no longer held")
                            return
                        self.holds_until = sent + o.ttl.total_seconds()
                        next_renew = time.monotonic() + period
                except (psycopg.OperationalError, psycopg.InterfaceError, OSError, ValueError):
                    # A broken connection: try again on a new one until the
                    # watchdog says the lease may have expired.
                    if conn is not None:
                        conn.close()
                    conn = None
                    self.stopped.wait(min(0.5, period))
                    next_renew = time.monotonic()
        except Exception as exc:            # never leave a held lease unwatched
            self.healthy = False
            self.lost(f"the keeper failed: {exc!r}")
        finally:
            if conn is not None:
                self._leave(conn)

    def _leave(self, conn: psycopg.Connection) -> None:
        """Keep a sound, idle connection for the lock's next hold."""
        o = self.owner
        if (self.healthy and not o._closed and o._kept is None and not conn.closed
                and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE):
            o._kept = (conn, self.listening)
        else:
            conn.close()


class Lock(c.LeaseSettings):
    """A lease held for ttl and renewed in the background while held.

    lock = Lock("billing", conninfo="dbname=app", ttl=30)
    with lock:                      # blocks until held
        token = lock.guard(conn)    # in the transaction that writes
        ...
    """

    _sql_acquire = c.SQL_ACQUIRE

    def __init__(self, name: str, *, conninfo: Optional[str] = None, pool: Any = None,
                 ttl: Seconds = 30, holder: Optional[str] = None, info: Any = None,
                 on_lost: Optional[Callable[["Lock"], None]] = None,
                 listen: Optional[bool] = None, **connect_kwargs: Any):
        c.LeaseSettings.__init__(self, name, ttl, holder, info, on_lost, listen)
        self.lost = threading.Event()
        self._lost_lock = threading.Lock()
        self._connector = _Connector(conninfo, pool, connect_kwargs)
        self._keeper: Optional[_Keeper] = None
        # The keeper's connection between holds, and the notifications
        # psycopg read on it during a query.
        self._kept: Optional[tuple] = None
        self._pending: List[tuple] = []
        self._closed = False

    # -- taking and letting go ------------------------------------------------

    def _prepare(self) -> None:
        """Semaphores define themselves here."""

    def acquire(self, blocking: bool = True, timeout: Optional[Seconds] = None) -> bool:
        """Take the lease: True once held, False if not within timeout
        (blocking=False: at once).  A blocking acquire waits inside the
        server, in slices of at most a few seconds, never polling."""
        deadline = c.deadline_of(timeout, time.monotonic())
        was_held = self._keeper is not None and not self.lost.is_set()
        self._prepare()
        try:
            while True:
                wait = c.next_wait(blocking, deadline, time.monotonic())
                token = self._connector.value(self._sql_acquire,
                                              (self.name, self.holder, self.ttl, wait, self.info))
                if token is not None:
                    # Granted at most a round trip ago: the margin covers that.
                    self._held(int(token), time.monotonic())
                    return True
                if not blocking or (deadline is not None and time.monotonic() >= deadline):
                    return False
        except BaseException:
            # Interrupted (KeyboardInterrupt, a broken connection): the
            # grant may have committed unseen.  Let go of what this call
            # may have taken, not of a lease held before it.
            if not was_held:
                self._abandon()
            raise

    def _abandon(self) -> None:
        self._stop_keeper()
        self.token = None
        try:
            self._connector.value(c.SQL_RELEASE, (self.name, self.holder))
        except Exception:
            pass

    def _held(self, token: int, granted: float) -> None:
        if self._keeper is not None and not self.lost.is_set():
            self.token = token              # reentrant: the same lease, extended
            self._keeper.holds_until = granted + self.ttl.total_seconds()
            return
        self._stop_keeper()
        self.lost.clear()
        self.lost_reason = None
        self.token = token
        self._keeper = _Keeper(self, token, granted)
        self._keeper.start()

    def release(self) -> bool:
        """Let the lease go: True if it was still held."""
        self._stop_keeper()
        released = bool(self._connector.value(c.SQL_RELEASE, (self.name, self.holder)))
        self.token = None
        return released

    def renew(self, ttl: Optional[Seconds] = None) -> Optional[datetime]:
        """Extend now (the keeper does it every ttl/3 anyway): the new
        expiry, or None, and the lease counts as lost, if not held."""
        ttl_td = c.interval(ttl, "ttl") or self.ttl
        sent = time.monotonic()
        expiry = self._connector.value(c.SQL_RENEW, (self.name, self.holder, ttl_td))
        if expiry is None:
            self._set_lost("the renewal found the lease no longer held")
        elif self._keeper is not None:
            self._keeper.holds_until = sent + ttl_td.total_seconds()
        return expiry

    touch = renew

    def locked(self) -> bool:
        """Whether anyone holds the lease now."""
        return bool(self._connector.value(
            "SELECT EXISTS (SELECT 1 FROM dsync_leases WHERE lease = %s::text)", (self.name,)))

    def owned(self) -> bool:
        """Whether this holder holds the lease now (asks the server)."""
        return self._connector.value(c.SQL_HELD, (self.name, self.holder)) is not None

    def check(self) -> None:
        """Raise LockLost if the lease was lost while held."""
        if self.lost.is_set():
            raise self.lost_error()

    def guard(self, conn: psycopg.Connection) -> int:
        """In the caller's own transaction: the fencing token if this
        holder holds the lease (nobody can take it until that transaction
        ends), else psycopg's error for SQLSTATE 55000."""
        row = conn.execute(c.SQL_ASSERT_HELD, (self.name, self.holder)).fetchone()
        return int(row[0])

    # -- the keeper's report --------------------------------------------------

    def _set_lost(self, why: str) -> None:
        # The keeper, the watchdog and renew() may all see a loss at once:
        # one of them reports it.
        with self._lost_lock:
            if self.lost.is_set():
                return
            self.lost_reason = why
            self.lost.set()
        if self.on_lost is not None:
            self.on_lost(self)

    def _stop_keeper(self) -> None:
        if self._keeper is not None:
            self._keeper.stop()
            self._keeper = None

    def close(self) -> None:
        self._closed = True
        self._stop_keeper()
        kept, self._kept = self._kept, None
        if kept is not None:
            kept[0].close()
        self._connector.close()

    def __enter__(self) -> "Lock":
        self.acquire()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


class Semaphore(Lock):
    """A lease with permits: at most `permits` holders at once.  Created on
    first use (idempotent), so that every process can name the same one."""

    def __init__(self, name: str, permits: int, **kwargs: Any):
        if not isinstance(permits, int) or isinstance(permits, bool) or permits < 1:
            raise ValueError("permits must be a positive int")
        self.permits = permits
        self._created = False
        super().__init__(name, **kwargs)

    def _prepare(self) -> None:
        if not self._created:
            self._connector.value(c.SQL_SEM_CREATE, (self.name, self.permits))
            self._created = True


class ReadLock(Lock):
    """The shared side of a read-write lock: any number of ReadLocks of a
    name are held at once, never together with a Lock of it.  Once a Lock
    waits for the name, later ReadLocks wait behind it (writers never
    starve).  Renewed, lost and guarded like a Lock."""

    _sql_acquire = c.SQL_ACQUIRE_SHARED


class Event:
    """A one-to-one signal: each set() wakes exactly one wait()."""

    def __init__(self, name: str, *, conninfo: Optional[str] = None, pool: Any = None,
                 **connect_kwargs: Any):
        self.name = c.name_arg(name, "name")
        self._connector = _Connector(conninfo, pool, connect_kwargs)

    def set(self) -> None:
        self._connector.value(c.SQL_EVENT_SET, (self.name,))

    def wait(self, timeout: Optional[Seconds] = None) -> bool:
        """Consume one signal: True, or False after timeout (None: wait
        with no limit, in bounded slices inside the server)."""
        deadline = c.deadline_of(timeout, time.monotonic())
        while True:
            wait = c.next_wait(True, deadline, time.monotonic())
            if self._connector.value(c.SQL_EVENT_WAIT, (self.name, wait)):
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False

    def clear(self) -> int:
        return int(self._connector.value(c.SQL_EVENT_CLEAR, (self.name,)))

    def is_set(self) -> bool:
        return bool(self._connector.value(c.SQL_EVENT_IS_SET, (self.name,)))

    def close(self) -> None:
        self._connector.close()


class LeaderElection(c.ElectionSettings):
    """Join a group and campaign for its lease; while leader, the lease is
    kept as a Lock keeps it.  on_leader() runs when elected;
    on_leader_loss() runs as soon as leadership is lost (and on stop),
    before the lease's expiry lets anyone else in."""

    def __init__(self, group: str, *, conninfo: Optional[str] = None, pool: Any = None,
                 ttl: Seconds = 15, member: Optional[str] = None, info: Any = None,
                 on_leader: Optional[Callable[[], None]] = None,
                 on_leader_loss: Optional[Callable[[], None]] = None,
                 listen: Optional[bool] = None, **connect_kwargs: Any):
        c.ElectionSettings.__init__(self, Lock, group, conninfo, pool, ttl, member, info,
                                    on_leader, on_leader_loss, listen, connect_kwargs)
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._leader = threading.Event()
        self._leader_lock = threading.Lock()
        self.error: Optional[BaseException] = None

    @property
    def is_leader(self) -> bool:
        return self._leader.is_set()

    @property
    def token(self) -> Optional[int]:
        return self._lock.token if self.is_leader else None

    def leader_exists(self) -> bool:
        return self._lock._connector.value(c.SQL_LEADER, (self.group,)) is not None

    def leader(self) -> Optional[str]:
        return self._lock._connector.value(c.SQL_LEADER, (self.group,))

    def members(self) -> List[dict]:
        """The group's live members (the cluster detail)."""
        with self._lock._connector.connection() as conn:
            rows = conn.execute(c.SQL_MEMBERS, (self.group,)).fetchall()
        return [c.member_row(r) for r in rows]

    def _end_leadership(self) -> None:
        """Leadership is over: on_leader_loss runs once, whoever sees it
        first (the keeper, the watchdog, the campaign loop, stop())."""
        with self._leader_lock:
            if not self._leader.is_set():
                return
            self._leader.clear()
        if self.on_leader_loss is not None:
            self.on_leader_loss()

    def _lost(self, _lock: Lock) -> None:
        self._end_leadership()

    def _join(self) -> None:
        self._lock._connector.value(c.SQL_JOIN, (self.group, self.member, self.ttl,
                                                 c.jsonb(self.info)))

    def run(self) -> None:
        """Campaign until stop(): the loop start() runs in a thread."""
        period = self.ttl.total_seconds() / 3
        next_join = 0.0
        try:
            while not self._stop.is_set():
                try:
                    if time.monotonic() >= next_join:
                        self._join()
                        next_join = time.monotonic() + period
                    if self.is_leader:
                        if self._lock.lost.is_set():
                            self._end_leadership()
                            continue
                        self._stop.wait(max(0.0, min(next_join - time.monotonic(), period)))
                        continue
                    # A wait inside the server shorter than the membership
                    # ttl, so that the membership is refreshed between waits.
                    timeout = max(0.05, min(period, next_join - time.monotonic()))
                    if self._lock.acquire(timeout=timeout):
                        if self._stop.is_set():
                            break
                        with self._leader_lock:
                            if not self._lock.lost.is_set():   # lost already: campaign on
                                self._leader.set()
                        if self._leader.is_set() and self.on_leader is not None:
                            self.on_leader()
                except psycopg.OperationalError:
                    # The server went away (a restart, a failover): the
                    # lease's watchdog decides about leadership; retry.
                    self._stop.wait(0.5)
        except BaseException as exc:          # reported by stop()
            self.error = exc
        finally:
            self._resign()

    def _resign(self) -> None:
        # Leadership ends before the lease goes: nothing may still act as
        # leader once another member can be elected.
        self._end_leadership()
        try:
            self._lock.release()
            self._lock._connector.value(c.SQL_LEAVE, (self.group, self.member))
        except psycopg.Error:
            pass
        self._lock.close()

    def start(self) -> "LeaderElection":
        self._thread = threading.Thread(target=self.run, daemon=True,
                                        name=f"dsync election {self.group}")
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self.error is not None:
            raise self.error

    def __enter__(self) -> "LeaderElection":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def _log_query(conn: psycopg.Connection, sql: str, params: Any = None) -> Optional[list]:
    """Rows of a query on the event log, or None if the installed version
    keeps none (before 1.4)."""
    try:
        return conn.execute(sql, params).fetchall()
    except (psycopg.errors.UndefinedTable, psycopg.errors.UndefinedFunction):
        return None


def watch(names: Sequence[str], *, conninfo: str, timeout: Optional[Seconds] = None,
          reconnect: bool = True, after: Optional[int] = None,
          **connect_kwargs: Any) -> Iterator[LeaseEvent]:
    """The events of the given lease, group or event names as they come.

    Starts with the current state: one LeaseEvent(kind="state") per live
    holder.  After a reconnect it resumes: the events it missed are
    replayed from the server's event log (dsync_events_since), each once
    and in order, and if some are gone (older than dsync.event_retention)
    a LeaseEvent(kind="gap") says so, followed by the current state.
    `after`: resume from this seq (the last one seen by an earlier watch)
    instead of starting with the current state.  Notifications that dsync
    did not send (another role's NOTIFY on the channel) are skipped.  Ends
    after `timeout` seconds without an event (None: never).
    """
    names = [c.name_arg(n, "name") for n in names]
    limit = c.interval(timeout, "timeout")
    resume = c.Resume(after)
    lost_at: Optional[float] = None
    kwargs = c.pool_settings(connect_kwargs)
    kwargs.setdefault("application_name", "dsync watch")
    while True:
        try:
            conn = psycopg.connect(conninfo, **kwargs)
        except psycopg.OperationalError:
            if not reconnect:
                raise
            time.sleep(1)
            continue
        try:
            if behind_pooler(conn):
                raise c.ListenUnavailable(
                    "LISTEN does not work through this connection: it goes through a "
                    "connection pooler in transaction mode; watch needs a direct "
                    "connection (or a pool in session mode)")
            pending: List[tuple] = []
            conn.add_notify_handler(lambda n: pending.append((n.channel, n.payload, n.pid)))
            chans = _channels(conn, names)
            if not resume.started:
                # Where the log stands before we listen: nothing later is missed.
                top = _log_query(conn, c.SQL_LOG_TOP)
                resume.last = top[0][0] if top else None
            _listen(conn, list(chans))
            senders = _senders(conn)
            # Everything is read before anything is yielded: the caller may
            # take its time, and a connection lost meanwhile must not make
            # the next one start afresh.
            gap, missed = None, []
            if resume.last is not None:
                gap, missed = resume.catch_up(
                    _log_query(conn, c.SQL_CATCH_UP, (resume.last, names)))
                if gap is None and lost_at is not None:
                    retention = _log_query(conn, c.SQL_RETENTION)
                    gap = resume.away_too_long(time.monotonic() - lost_at,
                                               retention[0][0] if retention else None)
            lost_at = None
            state = []
            if not resume.started or gap is not None or resume.last is None:
                state = conn.execute(c.SQL_LEASE_STATE, (names,)).fetchall()
            resume.started = True
            if gap is not None:
                yield gap
            for row in state:
                yield c.state_event(row)
            for channel, payload in missed:
                ev = c.parse_payload(channel, payload)
                if ev is not None and resume.fresh(ev):
                    yield ev
            last = time.monotonic()
            while True:
                wait = None if limit is None else \
                    max(0.0, last + limit.total_seconds() - time.monotonic())
                readable, _, _ = select.select([conn.fileno()], [], [], 0 if pending else wait)
                if not readable and not pending:
                    return
                notes, pending[:] = pending[:] + (_drain(conn) if readable else []), []
                for channel, payload, pid in notes:
                    if channel not in chans:
                        continue
                    if senders and pid not in senders:
                        senders = _senders(conn)        # a new sender after a restart?
                        if pid not in senders:
                            continue
                    ev = c.parse_payload(channel, payload)
                    if ev is not None and resume.fresh(ev):
                        last = time.monotonic()
                        yield ev
        except psycopg.OperationalError:
            if not reconnect:
                raise
            if lost_at is None:     # the first loss counts, not each failed retry
                lost_at = time.monotonic()
            time.sleep(0.2)
        finally:
            conn.close()


def _senders(conn: psycopg.Connection) -> set:
    """The pids that send this database's events (dsync_stats)."""
    cur = conn.execute(c.SQL_SENDERS)
    return c.sender_pids([d.name for d in cur.description], cur.fetchone())
