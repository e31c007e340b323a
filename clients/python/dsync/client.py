"""The thread-side Client: one per process (or per database), shared by
every lock, semaphore, event and election made from it.

It owns the connections.  Short statements take a connection from a
small pool (one thread at a time on each); blocking waits take one of
their own, so a release never queues behind a waiter; and one keeper
thread, on one connection, renews every lease the client holds in one
statement per tick and LISTENs on all their channels.  A watchdog thread
declares a lease lost shortly before it could expire unrenewed, whatever
the keeper is stuck in.  Holding a thousand leases costs the keeper's
connection and the pool's, not a connection and a thread each.

clients/DESIGN.md tells the rules; _ledger.py holds the bookkeeping.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import queue
import select
import socket
import threading
import time
import uuid
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

import psycopg

from . import _common as c
from . import _sql as sql
from . import _wire
from . import errors
from ._bound import BOUNDS, CALL_TIMEOUT, check_call_timeout
from ._lanes import Lane
from ._ledger import LAPSED, OVERDUE, SETTLE, Hold, Ledger, Mark
from ._wire import behind_pooler
from .errors import is_connection_error

log = logging.getLogger("dsync")

# How long idle connections of blocking waits are kept for the next wait.
WAIT_IDLE_SECONDS = 10.0
# At most this many LISTENs in one statement.
LISTEN_CHUNK = 500


def readable(fds: Sequence[Any], timeout: float) -> List[int]:
    """The descriptors among fds (ints or objects with fileno) that can be
    read within timeout seconds.  poll(), not select(): select() fails on
    descriptors past 1024, which busy processes have."""
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    return [fd for fd, _ in poller.poll(max(0.0, timeout) * 1000)]


def in_keeper_tx(conn: psycopg.Connection, statement: str, params: Sequence[Any]) -> List[tuple]:
    """statement's rows: one of sql.KEEPER_*, one statement in a transaction
    of its own that waits at most 50 ms for a locked row (LockNotAvailable
    if a row stayed locked that long)."""
    return conn.execute(statement, params).fetchall()


def sender_pids(conn: Any) -> Set[int]:
    """The pids that send this database's events (dsync_stats)."""
    cur = conn.execute(sql.SENDERS)
    return c.sender_pids([d.name for d in cur.description], cur.fetchone())


class QueuedWait:
    """A thread waiting in a name's line without a connection: woken by
    the keeper when its grant is announced (or the keeper reconnected and
    announcements may have been missed), it asks the server itself."""

    __slots__ = ("name", "holder", "event")

    def __init__(self, name: str, holder: str):
        self.name = name
        self.holder = holder
        self.event = threading.Event()


def _alive(thread: Optional[threading.Thread]) -> bool:
    """Whether thread was started and still runs."""
    return thread is not None and thread.is_alive()


class _Keeper:
    """The keeper thread and the watchdog thread of one client."""

    def __init__(self, client: "Client"):
        self.client = client
        self.ledger = Ledger()
        self.mutex = threading.Lock()
        self.changed = threading.Condition(self.mutex)   # connected, failed, stopped
        self.watched: Set[Hold] = set()                  # every hold the watchdog looks after
        self.wake_r, self.wake_w = socket.socketpair()
        self.wake_r.setblocking(False)
        self.wake_w.setblocking(False)
        self.watch_wake = threading.Event()
        self.thread: Optional[threading.Thread] = None
        self.watchdog: Optional[threading.Thread] = None
        self.rescuer: Optional[threading.Thread] = None
        self.conn: Optional[psycopg.Connection] = None
        self.error: Optional[BaseException] = None       # the last connection failure
        self.attempts = 0                                # connection attempts ended
        self.pending: List[Tuple[str, str, int]] = []
        self.stopping = False
        self.senders_asked = 0.0
        # When each thread will wake by itself (time.monotonic()); 0: it
        # is busy and looks at the ledger before it sleeps.
        self.keeper_sleeps_until = 0.0
        self.watchdog_sleeps_until = 0.0
        self.releases_retry_at = 0.0
        # Owners' on_lost callbacks run one at a time in a thread of their
        # own, so a slow one holds up neither renewals nor the watchdog.
        self.callbacks: "queue.SimpleQueue[Optional[Hold]]" = queue.SimpleQueue()
        self.callback_thread: Optional[threading.Thread] = None
        # Threads waiting in a line without a connection, by (name, holder);
        # the keeper LISTENs on the client's queue channel while it can.
        self.queued: Dict[Tuple[str, str], QueuedWait] = {}
        self.queue_listening = False

    # -- what lock objects call ---------------------------------------------

    def start(self, keeper: bool = True) -> None:
        """Start the watchdog, and the keeper unless not asked for, if they
        are not running (the keeper connects at once, so that it is ready
        by the time a first grant returns)."""
        if _alive(self.watchdog) and (not keeper or _alive(self.thread)):
            return                  # every acquire asks: the answer without the lock
        with self.mutex:
            if self.stopping:
                return
            if keeper and (self.thread is None or not self.thread.is_alive()):
                self.thread = threading.Thread(target=self._run, daemon=True, name="dsync keeper")
                self.thread.start()
            if self.watchdog is None or not self.watchdog.is_alive():
                self.watchdog = threading.Thread(target=self._watch, daemon=True,
                                                 name="dsync watchdog")
                self.watchdog.start()

    def mark(self, channel: str) -> Mark:
        with self.mutex:
            return self.ledger.mark(channel)

    def ensure(self, timeout: float) -> bool:
        """Wait up to timeout for the keeper to have a connection."""
        if self.ledger.connected:
            return True             # started, and connected (read without the lock)
        self.start()
        # A keeper pausing after failed rounds tries now, or once its
        # pause has lasted its base interval (c.KeeperPause).
        self._wake()
        deadline = time.monotonic() + timeout
        with self.changed:
            while not self.ledger.connected:
                left = deadline - time.monotonic()
                if left <= 0 or self.stopping:
                    return False
                self.changed.wait(left)
            return True

    def add(self, hold: Hold, mark: Mark) -> None:
        """Keep hold.  The threads are woken only if it needs them before
        they would wake anyway (a lock taken again and again on a LISTENed
        channel costs them nothing)."""
        with self.mutex:
            if self.stopping:
                raise errors.DsyncError("the dsync client is closed")
            if hold.keep_alive:
                self.ledger.add(hold, mark)
            self.watched.add(hold)
            hold.on_overdue = self.overdue
            due = hold.confirmed + (SETTLE if hold in self.ledger.unverified else hold.period)
            wake = hold.keep_alive and due < self.keeper_sleeps_until
            watch = Ledger.rescue_point(hold) < self.watchdog_sleeps_until
        if wake:
            self._wake()
        if watch:
            self.watch_wake.set()

    def retimed(self, hold: Hold) -> None:
        """hold's ttl changed (renew(ttl=...)): wake whoever must now act
        sooner than it planned."""
        with self.mutex:
            wake = hold.confirmed + hold.period < self.keeper_sleeps_until
            watch = Ledger.rescue_point(hold) < self.watchdog_sleeps_until
        if wake:
            self._wake()
        if watch:
            self.watch_wake.set()

    def remove(self, hold: Hold) -> None:
        """Stop keeping hold (its owner releases it)."""
        with self.mutex:
            hold.done = True
            self.ledger.remove(hold)
            self.watched.discard(hold)

    def release_later(self, name: str, holder: str) -> None:
        """A release that failed for the connection: done by the keeper
        once it can (else the lease lapses at its ttl, never renewed)."""
        with self.mutex:
            self.ledger.releases.append((name, holder))
        self.start()                # a client of keep_alive=False locks has no keeper yet
        self._wake()

    def _wake(self) -> None:
        try:
            self.wake_w.send(b"x")
        except OSError:
            pass

    def queue_join(self, name: str, holder: str, timeout: float) -> Optional[QueuedWait]:
        """Register a thread about to wait in name's line, once the keeper
        LISTENs for its grants (up to timeout): None if it cannot (no
        LISTEN through this connection, or no keeper), and the caller waits
        in a backend instead."""
        # Only where a keeper runs already (keep_alive=False locks start none).
        if not _alive(self.thread) or not self.ensure(timeout):
            return None
        with self.mutex:
            if not self.queue_listening or self.stopping:
                return None
            w = QueuedWait(name, holder)
            self.queued[(name, holder)] = w
            return w

    def queue_leave(self, w: QueuedWait) -> None:
        with self.mutex:
            if self.queued.get((w.name, w.holder)) is w:
                del self.queued[(w.name, w.holder)]

    def _queue_heard(self, payload: str) -> None:
        """A grant announced on the queue channel: wake its waiter, which
        claims it (the announcement is a hint; the claim is the word)."""
        try:
            grant = json.loads(payload)
            key = (grant["lease"], grant["holder"])
        except (ValueError, KeyError, TypeError):
            return
        with self.mutex:
            w = self.queued.get(key)
        if w is not None:
            w.event.set()

    # -- reporting a loss ------------------------------------------------------

    def report(self, holds: Sequence[Hold], reason: str, release: bool = False) -> None:
        """Declare holds lost (each once), stop keeping them, and tell their
        owners.  release: the lease may still be the holder's on the server
        (the watchdog's or a failure's verdict); give it back."""
        fresh = []
        with self.mutex:
            for hold in holds:
                if hold.declare_lost(reason):
                    self.ledger.remove(hold)
                    self.watched.discard(hold)
                    if release:
                        hold.given_back = True      # its name is never used again
                        self.ledger.releases.append((hold.name, hold.holder))
                    fresh.append(hold)
        if release and fresh:
            self._wake()
        self.tell(fresh)

    def tell(self, holds: Sequence[Hold]) -> None:
        """Run the on_lost callbacks of holds just declared lost, in the
        callback thread (started when first needed), never in the caller."""
        if not holds:
            return
        try:
            with self.mutex:
                if self.callback_thread is None or not self.callback_thread.is_alive():
                    self.callback_thread = threading.Thread(
                        target=self._run_callbacks, daemon=True, name="dsync callbacks")
                    self.callback_thread.start()
        except RuntimeError:
            # No new thread at interpreter shutdown: run them here.
            for hold in holds:
                self._callback(hold)
            return
        for hold in holds:
            self.callbacks.put(hold)

    def overdue(self, hold: Hold) -> None:
        """A reader found hold past its deadline before the watchdog did
        (the process was stopped): the watchdog's verdict, now."""
        if hold.keep_alive:
            self.report([hold], OVERDUE, release=True)
        else:
            self.report([hold], LAPSED)

    def _run_callbacks(self) -> None:
        while True:
            hold = self.callbacks.get()
            if hold is None:
                return
            self._callback(hold)

    @staticmethod
    def _callback(hold: Hold) -> None:
        try:
            hold.lock._lost(hold)
        except Exception:                   # a callback's error is the caller's
            log.exception("dsync: the on_lost callback of %r failed", hold)

    # -- the keeper thread -----------------------------------------------------

    def _run(self) -> None:
        failures = c.KeeperFailures(log)
        while not self.stopping:
            try:
                if self.conn is None:
                    self._connect()
                self._tick()
                failures.succeeded()
            except Exception as exc:
                # Said as a call says it (a dropped extension, not preloaded).
                err = errors.diagnose(exc, "keeping leases", self.conn) \
                    if isinstance(exc, psycopg.Error) else exc
                self._drop(exc)
                # One line per distinct failure, and a growing pause: a
                # database without the extension fails every round.
                self._rest(failures.failed(err, exc))
        self._drop(None)

    def _connect(self) -> None:
        try:
            conn = self.client._connect(c.KEEPER_SETTINGS, keeper=True)
            try:
                conn.add_notify_handler(lambda n: self.pending.append((n.channel, n.payload, n.pid)))
                listen_ok = self.client.listen is not False and not behind_pooler(conn)
                if self.client.listen is True and not listen_ok:
                    raise errors.ListenUnavailable(
                        "LISTEN does not work through this connection (a pooler in "
                        "transaction mode); give listen=None to notice a lost lease at the "
                        "next renewal instead")
                senders = sender_pids(conn)
                if listen_ok:
                    conn.execute(f'LISTEN "{self.client._queue_channel}"')
            except psycopg.Error as exc:
                # Said as the library says it (no extension, not preloaded):
                # acquire's KeeperUnavailable carries it as its cause.
                err = errors.diagnose(exc, "connecting the keeper", conn)
                conn.close()
                raise err from exc
            except BaseException:
                conn.close()
                raise
        except BaseException as exc:
            # A failure to connect stays the driver's (acquire's
            # KeeperUnavailable has it as its cause); what failed once
            # connected was said as the library says it, above.
            with self.changed:
                self.error = exc
                self.attempts += 1
                self.changed.notify_all()
            raise
        self.pending.clear()
        with self.changed:
            self.conn = conn
            self.error = None
            self.attempts += 1
            self.ledger.connected_anew(listen_ok, senders)
            self.queue_listening = listen_ok
            # Grants announced while it was away went unheard: every waiter
            # asks once.
            for w in self.queued.values():
                w.event.set()
            self.changed.notify_all()

    def _drop(self, exc: Optional[BaseException]) -> None:
        conn, self.conn = self.conn, None
        with self.changed:
            self.ledger.disconnected()
            self.queue_listening = False
            if exc is not None:
                self.error = exc
            self.changed.notify_all()
        if conn is not None:
            conn.close()

    def _rest(self, seconds: float) -> None:
        """The pause after a failed round (c.KeeperPause: a wake-up ends
        it, but not before its base interval)."""
        pause = c.KeeperPause(seconds, time.monotonic())
        while not self.stopping:
            left = pause.left(time.monotonic())
            if left <= 0:
                return
            try:
                woken = bool(readable([self.wake_r], left))
                if woken:
                    self.wake_r.recv(4096)
            except Exception:
                return
            if woken and pause.woken(time.monotonic()):
                return

    def _tick(self) -> None:
        """One round: LISTEN what is new, judge what was heard, renew what
        is due, give back what was given up, then sleep until the next due
        renewal, a notification or a wake-up."""
        conn = self.conn
        with self.mutex:
            listen = self.ledger.to_listen(time.monotonic())
            unlisten = self.ledger.to_unlisten()
        for i in range(0, len(listen), LISTEN_CHUNK):
            chunk = listen[i:i + LISTEN_CHUNK]
            conn.execute(sql.listen_statement(chunk))
            with self.mutex:
                self.ledger.listened(chunk)
        if unlisten:
            with self.mutex:
                self.ledger.unlistened(unlisten)
            conn.execute(sql.unlisten_statement(unlisten))
        self._hear()
        self._renew(conn)
        self._give_back(conn)
        self._orphans()
        self.client._waits.trim()
        with self.mutex:
            now = time.monotonic()
            wait = self.ledger.next_wake(now)
            wait = 0.0 if self.pending else 1.0 if wait is None else min(wait, 1.0)
            self.keeper_sleeps_until = now + wait
        try:
            ready = readable([conn.fileno(), self.wake_r.fileno()], wait)
        finally:
            with self.mutex:
                self.keeper_sleeps_until = 0.0
        if self.wake_r.fileno() in ready:
            try:
                self.wake_r.recv(4096)
            except BlockingIOError:
                pass
        if conn.fileno() in ready:
            pg = conn.pgconn
            pg.consume_input()
            if pg.status != psycopg.pq.ConnStatus.OK:
                raise psycopg.OperationalError("the keeper's connection was lost")
            while True:
                n = pg.notifies()
                if n is None:
                    break
                self.pending.append((n.relname.decode(), n.extra.decode(), n.be_pid))
            self._hear()

    def _hear(self) -> None:
        """Judge the notifications that arrived."""
        if not self.pending:
            return
        notes, self.pending[:] = self.pending[:], []
        lost: List[Tuple[Hold, str]] = []
        unknown = False
        queue_channel = self.client._queue_channel
        for channel, payload, _pid in notes:
            if channel == queue_channel:
                self._queue_heard(payload)
        notes = [n for n in notes if n[0] != queue_channel]
        with self.mutex:
            for channel, payload, pid in notes:
                gone, _suspect = self.ledger.judge(channel, payload, pid)
                ev = c.parse_payload(channel, payload) if gone else None
                lost += [(h, f"the lease was {ev.kind}") for h in gone]
                unknown = unknown or (pid not in self.ledger.senders and
                                      channel in self.ledger.by_channel)
        for hold, why in lost:
            self.report([hold], why)
        if unknown and time.monotonic() - self.senders_asked > 1.0:
            # A sender we do not know: dsync's worker after a restart, or a
            # forgery.  Ask once a second at most.
            self.senders_asked = time.monotonic()
            senders = sender_pids(self.conn)
            with self.mutex:
                self.ledger.senders = senders

    def _renew(self, conn: psycopg.Connection) -> None:
        with self.mutex:
            batch = self.ledger.due(time.monotonic())
        if batch:
            self._renew_batch(conn, batch)
            self._hear()

    def _renew_batch(self, conn: psycopg.Connection, batch: List[Hold]) -> None:
        """Renew batch in one statement.  If a row stays locked (a guard's
        transaction is open), split the batch in halves until the locked
        leases are alone: they wait for a later try, the others are
        renewed now."""
        sent = time.monotonic()
        try:
            rows = in_keeper_tx(conn, sql.KEEPER_RENEW_MANY, Ledger.renewal_args(batch))
        except psycopg.errors.LockNotAvailable:
            if len(batch) == 1:
                with self.mutex:
                    self.ledger.blocked(batch, time.monotonic())
                return
            half = len(batch) // 2
            self._renew_batch(conn, batch[:half])
            self._renew_batch(conn, batch[half:])
            return
        with self.mutex:
            gone = self.ledger.renewed(batch, [r[0] for r in rows], sent)
        if gone:
            self.report(gone, "the renewal found the lease no longer held")

    def _give_back(self, conn: psycopg.Connection) -> None:
        with self.mutex:
            if time.monotonic() < self.releases_retry_at:
                return
            releases, self.ledger.releases = self.ledger.releases, []
        if not releases:
            return
        try:
            in_keeper_tx(conn, sql.KEEPER_RELEASE_MANY, ([n for n, _ in releases],
                                                          [h for _, h in releases]))
        except BaseException as exc:
            with self.mutex:
                self.ledger.releases[:0] = releases
                if isinstance(exc, psycopg.errors.LockNotAvailable):
                    self.releases_retry_at = time.monotonic() + 0.25
                    return
            raise

    def _orphans(self) -> None:
        """Leases whose owner ended without releasing: no longer renewed,
        so they lapse at their ttl, as if the owner's process had died."""
        with self.mutex:
            orphans = self.ledger.orphans()
        for hold in orphans:
            log.warning("dsync: the %s that held lease %r (holder %r) ended without releasing "
                        "it; it is no longer renewed and lapses at its ttl",
                        hold.owner_kind, hold.name, hold.holder)
        if orphans:
            self.report(orphans, f"its owner {orphans[0].owner_kind} ended without releasing it")

    # -- the watchdog thread ---------------------------------------------------

    def _watch(self) -> None:
        while not self.stopping:
            now = time.monotonic()
            with self.mutex:
                rescue = self.ledger.to_rescue(self.watched, now)
                if rescue and (self.rescuer is None or not self.rescuer.is_alive()):
                    self.rescuer = threading.Thread(target=self._rescue, args=(rescue,),
                                                    daemon=True, name="dsync rescue")
                    self.rescuer.start()
                overdue = self.ledger.overdue(self.watched, now)
            kept = [h for h in overdue if h.keep_alive]
            if kept:
                self.report(kept, OVERDUE,
                            release=True)
            lapsed = [h for h in overdue if not h.keep_alive]
            if lapsed:
                self.report(lapsed, LAPSED)
            with self.mutex:
                nxt = self.ledger.watch_wake(self.watched, now)
                wait = 1.0 if nxt is None else max(0.0, min(1.0, nxt - now))
                self.watch_wake.clear()
                self.watchdog_sleeps_until = now + wait
            self.watch_wake.wait(wait)
            with self.mutex:
                self.watchdog_sleeps_until = 0.0

    def _rescue(self, batch: List[Hold]) -> None:
        """Renew holds the keeper has not renewed in time, in one
        statement on one of the client's statement connections (see
        RESCUE_LEAD); a failure is tried again a little later, until the
        watchdog's deadline."""
        sent = time.monotonic()
        try:
            rows = self.client._query(sql.RENEW_MANY, Ledger.renewal_args(batch),
                                      "renewing leases the keeper could not renew in time",
                                      rows=True, retry=False)
        except errors.DsyncError as exc:
            log.info("dsync: a rescue renewal failed: %s", exc)
            with self.mutex:
                self.ledger.blocked(batch, time.monotonic())
            self.watch_wake.set()
            return
        with self.mutex:
            gone = self.ledger.renewed(batch, [r[0] for r in rows], sent)
        if gone:
            self.report(gone, "the renewal found the lease no longer held")
        self.watch_wake.set()

    # -- the end ------------------------------------------------------------------

    def stop(self) -> Tuple[List[Hold], List[Tuple[str, str]]]:
        """Stop the threads; the holds still kept and the releases still to
        send, for the caller to give back."""
        with self.changed:
            self.stopping = True
            holds = list(self.watched)
            self.changed.notify_all()
        self._wake()
        self.watch_wake.set()
        for t in (self.thread, self.watchdog):
            if t is not None and t is not threading.current_thread():
                t.join(5.0)
        with self.mutex:
            releases, self.ledger.releases = self.ledger.releases, []
        return holds, releases


class Client:
    """A process's connection to dsync: a small pool for statements,
    connections of their own for blocking waits, and one keeper for every
    lease held.  Locks, semaphores, events, elections and watches made
    from it share all of that:

        client = Client("dbname=app")            # or Client(pool=pool)
        lock = client.lock("billing", ttl=30)
        with lock:
            ...
        client.close()                           # or `with Client(...) as client:`

    The objects' own constructors (Lock("x", conninfo=...)) use a default
    client shared per connection string, made on first use and closed at
    exit.

    pool_size: connections kept for short statements (threads beyond that
    wait their turn for a moment).  listen: False never LISTENs (a held
    lease's loss is then noticed at its next renewal); True requires LISTEN
    (ListenUnavailable behind a transaction pooler); None LISTENs where it
    works.  call_timeout: seconds a statement may go unanswered (beyond
    the wait it asks of the server) before its connection is closed and
    the call fails with DsyncConnectionError (default 30; None: no bound).
    Keyword arguments go to psycopg.connect.
    """

    def __init__(self, conninfo: Optional[str] = None, *, pool: Any = None, pool_size: int = 2,
                 listen: Optional[bool] = None, call_timeout: Optional[float] = CALL_TIMEOUT,
                 queue: bool = True, **connect_kwargs: Any):
        if not isinstance(pool_size, int) or isinstance(pool_size, bool) or pool_size < 1:
            raise ValueError("pool_size must be a positive int")
        self.call_timeout = check_call_timeout(call_timeout)
        self._settings = c.ConnectionSettings(conninfo, pool, connect_kwargs)
        self.conninfo = self._settings.conninfo
        self.listen = listen
        self._closed = False
        self._pid = os.getpid()
        self._statements = Lane(self, pool_size, pool_size, None)
        self._waits = Lane(self, None, pool_size, WAIT_IDLE_SECONDS)
        self._contention = c.Contention()
        self.queue = bool(queue)
        # The channel the grants of this client's queued waits are announced
        # on (dsync_queue_channel of the key: short enough to be readable).
        self._queue_key = "py-" + uuid.uuid4().hex[:24]
        self._queue_channel = "dsyncq:" + self._queue_key
        self._keeper = _Keeper(self)

    # -- recipes -------------------------------------------------------------------

    def lock(self, name: str, **kwargs: Any):
        """A Lock on this client (see dsync.Lock for the arguments)."""
        from .sync import Lock
        return Lock(name, client=self, **kwargs)

    def read_lock(self, name: str, **kwargs: Any):
        from .sync import ReadLock
        return ReadLock(name, client=self, **kwargs)

    def semaphore(self, name: str, permits: Optional[int] = None, **kwargs: Any):
        """A Semaphore: created with permits (idempotent; SemaphoreMismatch
        if it exists with another count), or attached to an existing one
        when permits is None."""
        from .sync import Semaphore
        if permits is None:
            return Semaphore.attach(name, client=self, **kwargs)
        return Semaphore(name, permits, client=self, **kwargs)

    def event(self, name: str):
        from .sync import Event
        return Event(name, client=self)

    def election(self, group: str, **kwargs: Any):
        from .sync import LeaderElection
        return LeaderElection(group, client=self, **kwargs)

    def watch(self, names: Sequence[str], **kwargs: Any):
        """dsync.watch on this client's server, on a connection of its own."""
        from .watch import watch
        kw = dict(self._settings.kwargs)
        kw.update(kwargs)
        return watch(names, conninfo=self.conninfo, **kw)

    # -- statements ------------------------------------------------------------------

    def _connect(self, extra: Dict[str, Any], keeper: bool = False) -> psycopg.Connection:
        return psycopg.connect(self.conninfo, **self._settings.connect_kwargs(extra, keeper))

    def _check_usable(self) -> None:
        if self._closed:
            raise errors.DsyncError("the dsync client is closed")
        if os.getpid() != self._pid:
            raise errors.DsyncError("a dsync Client cannot be used in a process forked from the "
                                    "one that made it: make a new one in the child")

    def _query(self, statement: str, params: Sequence[Any], what: str, *, wait: bool = False,
               retry: bool = True, rows: bool = False, timed: Optional[list] = None,
               server_wait: float = 0.0) -> Any:
        """Run one statement on a connection of the caller's own: its first
        row's first value (rows: all its rows).  A stale idle connection
        (the server restarted) is replaced and, for retry, the statement
        run again on a new one.  timed: gets the monotonic time at which
        the statement was sent.  server_wait: the seconds the statement
        asks the server to wait, beyond which call_timeout counts."""
        lane = self._waits if wait else self._statements
        for attempt in (0, 1):
            failure: Optional[psycopg.Error] = None
            ext: Any = errors.UNPROBED
            db: Optional[str] = None
            reused = False
            try:
                with lane.connection() as (conn, reused):
                    if timed is not None:
                        timed.append(time.monotonic())
                    bound = None if self.call_timeout is None else self.call_timeout + server_wait
                    until = time.monotonic() + (errors.PROBE_TIMEOUT if bound is None else bound)
                    key = 0
                    cut = False
                    try:
                        try:
                            # Begun inside the try: a key left behind would
                            # cut the connection in its next user's hands.
                            key = BOUNDS.begin(conn, bound) if bound is not None else 0
                            first = None if rows else _wire.first_row(conn, statement, params)
                            if first is not None:
                                result = first[0] if first else None
                            else:
                                cur = conn.execute(statement, params)
                                result = cur.fetchall() if rows else cur.fetchone()
                        finally:
                            cut = bool(key) and BOUNDS.end(key)
                    except psycopg.Error as exc:
                        if cut:
                            raise errors.DsyncConnectionError(
                                f"{what}: the server did not answer within {bound:g} s "
                                "(call_timeout); the connection was closed") from exc
                        if is_connection_error(exc):
                            raise           # the lane closes the connection
                        failure = exc       # a sound connection: the lane keeps it
                        db = conn.info.dbname   # for the message, while it is ours
                        # Still this thread's: ask whether the extension is
                        # there, within the call's time left.
                        ext = errors.probed(exc, conn, until - time.monotonic())
                    if cut:
                        conn.close()        # answered as it was cut: not reusable
            except psycopg.Error as exc:
                if retry and attempt == 0 and reused and is_connection_error(exc):
                    if timed is not None:
                        timed.clear()
                    continue
                raise errors.from_psycopg(exc, what) from exc
            if failure is not None:
                raise errors.from_psycopg(failure, what, ext=ext, db=db) from failure
            if rows:
                return result
            return result[0] if result else None

    def _queue_wait(self, name: str, holder: str, ttl: Any, shared: bool,
                    deadline: Optional[float], what: str) -> Optional[Tuple[Optional[int], float]]:
        """Wait in name's line without a connection (dsync_queue): the
        keeper wakes this thread when its grant is announced, and it claims
        it; every third of the ttl it asks anyway, which keeps its place.
        None if it cannot queue (no LISTEN here: a pooler in transaction
        mode, or keep_alive=False), for the caller to wait in a backend.
        Leaving for any reason (time out, an error) leaves the line, and a
        grant made meanwhile and not claimed is given back by the server."""
        ttl_s = ttl.total_seconds()
        left = None if deadline is None else deadline - time.monotonic()
        w = self._keeper.queue_join(name, holder, min(2.0, ttl_s / 3) if left is None
                                    else max(0.0, min(2.0, ttl_s / 3, left)))
        if w is None:
            return None
        granted = False
        try:
            sent = time.monotonic()
            token = self._query(sql.QUEUE, (name, holder, ttl, self._queue_key, shared), what)
            if token is not None:
                granted = True
                return int(token), sent
            while True:
                now = time.monotonic()
                if deadline is not None and now >= deadline:
                    return None, 0.0
                wait = ttl_s / 3 if deadline is None else min(ttl_s / 3, deadline - now)
                w.event.wait(max(0.0, wait))
                w.event.clear()
                sent = time.monotonic()
                state, fencing, expires_in = self._query(sql.CLAIM, (name, holder), what,
                                                         rows=True)[0]
                if state == "granted":
                    granted = True
                    # The lease ends no later than expires_in after the
                    # claim was sent: as if granted ttl before that.
                    return int(fencing), sent + expires_in - ttl_s
                if state == "gone":
                    # The place lapsed or was lost (a restart): queue again.
                    sent = time.monotonic()
                    token = self._query(sql.QUEUE, (name, holder, ttl, self._queue_key, shared),
                                        what)
                    if token is not None:
                        granted = True
                        return int(token), sent
        finally:
            self._keeper.queue_leave(w)
            if not granted:
                try:
                    self._query(sql.UNQUEUE, (name, holder), what)
                except errors.DsyncError:
                    pass            # the place lapses at its ttl; a grant passes on

    def _acquire(self, statement: str, args: Tuple, blocking: bool, deadline: Optional[float],
                 what: str) -> Tuple[Optional[int], float]:
        """Take a lease: at once on the statement pool, then, if it is not
        free and the caller waits, inside the server in slices on a wait
        connection (at once there if a try found the name taken lately:
        c.Contention).  The token (None if not had) and when the statement
        that got it was sent."""
        name, holder, ttl, info = args
        timed: list = []
        token = None
        now = time.monotonic()
        tried = False
        if not self._contention.wait_at_once(name, blocking, deadline, now):
            tried = True
            token = self._query(statement, (name, holder, ttl, c.ZERO, info), what,
                                timed=timed)
            if token is None and blocking:
                self._contention.found_taken(name, now)
        # Not had at once: wait in the line, without a connection, where we can.
        if token is None and blocking and self.queue:
            got = self._queue_wait(name, holder, ttl, statement == sql.ACQUIRE_SHARED,
                                   deadline, what)
            if got is not None:
                if got[0] is not None and info is not None:
                    # A queued grant carries no info: the holder's acquire
                    # again (reentrant: same token) sets it.
                    sent = time.monotonic()
                    token = self._query(statement, (name, holder, ttl, c.ZERO, info), what)
                    if token is not None and int(token) == got[0]:
                        return got[0], max(got[1], sent)
                return got
        while token is None and blocking:
            # A slice no longer than a third of the ttl: the grant is
            # reckoned from when its statement was sent, and must leave the
            # keeper time to renew before the watchdog's deadline.
            wait = min(c.next_wait(True, deadline, time.monotonic()), ttl / 3)
            if wait <= c.ZERO:
                if tried:
                    break
                wait = c.ZERO               # the time ran out as the try was skipped: try
            tried = True
            timed = []
            token = self._query(statement, (name, holder, ttl, wait, info), what, wait=True,
                                timed=timed, server_wait=wait.total_seconds())
            if deadline is not None and time.monotonic() >= deadline:
                break
        return (int(token) if token is not None else None), (timed[-1] if timed else 0.0)

    # -- the end ---------------------------------------------------------------------

    def close(self) -> None:
        """Give back every lease held through this client (their owners see
        them lost), stop the keeper and close the connections."""
        if self._closed:
            return
        holds, releases = self._keeper.stop()
        self._keeper.report(holds, "the client was closed")
        self._keeper.callbacks.put(None)        # the callback thread ends after these
        releases += [(h.name, h.holder) for h in holds]
        if releases and os.getpid() == self._pid:
            try:
                self._query(sql.RELEASE_MANY, ([n for n, _ in releases],
                                               [h for _, h in releases]),
                            "releasing the leases of a closed client")
            except errors.DsyncError:
                pass                        # they lapse at their ttl
        self._closed = True
        self._statements.close()
        self._waits.close()

    def __enter__(self) -> "Client":
        """Connect now: a wrong connection string or a server that cannot
        be reached raises DsyncConnectionError here, at once (within the
        connect timeout), not at the first lock."""
        self.ping()
        return self

    def ping(self) -> None:
        """Run one statement on a connection of the client's (made if
        needed): DsyncConnectionError if the server cannot be reached."""
        self._query(sql.BACKEND_PID, (), "connecting", retry=False)

    def __exit__(self, *exc: Any) -> None:
        self.close()


# -- the default clients ------------------------------------------------------------

_defaults: Dict[tuple, Client] = {}
_defaults_lock = threading.Lock()
_forked: List[Client] = []          # a parent's clients, kept from closing its sockets


def default_client(conninfo: Optional[str], pool: Any, listen: Optional[bool],
                   connect_kwargs: Dict[str, Any]) -> Client:
    """The client shared by objects made with the same conninfo (and
    keyword arguments) or the same pool."""
    key = c.ConnectionSettings.key(conninfo, pool, dict(connect_kwargs, listen=listen))
    with _defaults_lock:
        client = _defaults.get(key)
        if client is None or client._closed:
            client = Client(conninfo, pool=pool, listen=listen, **connect_kwargs)
            _defaults[key] = client
        return client


def _close_defaults() -> None:
    """At exit: give back the leases still held, close the connections."""
    with _defaults_lock:
        clients = list(_defaults.values())
        _defaults.clear()
    for client in clients:
        try:
            client.close()
        except Exception:
            pass


def _forget_defaults_in_child() -> None:
    """In a forked child the parent's connections are not ours to use or to
    close (closing would end the parent's sessions): keep them referenced,
    unused, and start afresh."""
    _forked.extend(_defaults.values())
    _defaults.clear()


atexit.register(_close_defaults)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_defaults_in_child)
