"""The asyncio Client: client.py's twin, with tasks for threads.

One AsyncClient belongs to one event loop (the loop of its first use).
Short statements take a connection from a small pool, blocking waits one
of their own, and one keeper task, on one connection, renews every lease
the client holds in one statement per tick and LISTENs on all their
channels; a watchdog task declares a lease lost shortly before it could
expire unrenewed.  The bookkeeping is _ledger.py's, shared with threads.

A task cancelled in a wait cancels the statement in the server and closes
its connection, so that no waiter is left behind in dsync_waiters.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
import uuid
import weakref
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

import psycopg

from . import _common as c
from . import _sql as sql
from . import _wire
from . import errors
from ._bound import CALL_TIMEOUT, AsyncBound, check_call_timeout
from ._lanes import AsyncLane
from ._ledger import LAPSED, OVERDUE, Hold, Ledger, Mark
from .client import LISTEN_CHUNK, WAIT_IDLE_SECONDS
from .errors import is_connection_error

log = logging.getLogger("dsync")


async def sender_pids(conn: psycopg.AsyncConnection) -> Set[int]:
    cur = await conn.execute(sql.SENDERS)
    return c.sender_pids([d.name for d in cur.description], await cur.fetchone())


async def wait_event(event: asyncio.Event, timeout: Optional[float]) -> None:
    """Wait until event is set or timeout seconds pass.  A timer sets the
    event rather than asyncio.wait_for wrapping the wait: before Python
    3.12, wait_for can swallow a cancellation that arrives as its timeout
    expires, and a keeper that missed its cancellation would keep the
    loop from ever ending."""
    if event.is_set():
        return
    timer = None
    if timeout is not None:
        timer = asyncio.get_running_loop().call_later(max(0.0, timeout), event.set)
    try:
        await event.wait()
    finally:
        if timer is not None:
            timer.cancel()


def _retrieved(task: "asyncio.Future[Any]") -> None:
    """A shielded statement's outcome, read so that asyncio does not
    report it as never retrieved when its caller was cancelled."""
    if not task.cancelled():
        task.exception()


class QueuedWait:
    """A task waiting in a name's line without a connection (see
    client.QueuedWait)."""

    __slots__ = ("name", "holder", "event")

    def __init__(self, name: str, holder: str):
        self.name = name
        self.holder = holder
        self.event = asyncio.Event()


class _Keeper:
    """The keeper task and the watchdog task of one asyncio client."""

    def __init__(self, client: "AsyncClient"):
        self.client = client
        self.ledger = Ledger()
        self.watched: Set[Hold] = set()
        self.wake = asyncio.Event()
        self.watch_wake = asyncio.Event()
        self.changed = asyncio.Event()          # set at each connection attempt's end
        self.task: Optional[asyncio.Task] = None
        self.watchdog: Optional[asyncio.Task] = None
        self.conn: Optional[psycopg.AsyncConnection] = None
        self.error: Optional[BaseException] = None
        self.attempts = 0                       # connection attempts ended
        self.pending: List[Tuple[str, str, int]] = []
        self.reading = False
        self.reader_fd = -1
        self.wanted = False                     # someone needs the connection
        self.stopping = False
        self.senders_asked = 0.0
        self.releases_retry_at = 0.0
        self.callbacks: Set[asyncio.Task] = set()
        self.rescuer: Optional[asyncio.Task] = None
        self.queued: Dict[Tuple[str, str], QueuedWait] = {}
        self.queue_listening = False

    # -- what lock objects call -----------------------------------------------------

    def start(self, connect: bool = True) -> None:
        """Make sure both tasks run; connect: the keeper connects now."""
        if self.stopping:
            return
        self.wanted = self.wanted or connect
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self._run(), name="dsync keeper")
        if self.watchdog is None or self.watchdog.done():
            self.watchdog = asyncio.get_running_loop().create_task(self._watch(),
                                                                   name="dsync watchdog")
        self.wake.set()

    def mark(self, channel: str) -> Mark:
        return self.ledger.mark(channel)

    async def ensure(self, timeout: float) -> bool:
        self.start()
        deadline = time.monotonic() + timeout
        while not self.ledger.connected:
            left = deadline - time.monotonic()
            if left <= 0 or self.stopping:
                return False
            self.changed.clear()
            await wait_event(self.changed, left)
        return True

    def add(self, hold: Hold, mark: Mark) -> None:
        if self.stopping:
            raise errors.DsyncError("the dsync client is closed")
        if hold.keep_alive:
            self.ledger.add(hold, mark)
        self.watched.add(hold)
        hold.on_overdue = self.overdue
        self.wake.set()
        self.watch_wake.set()

    def retimed(self, hold: Hold) -> None:
        """hold's ttl changed: the keeper and the watchdog look again."""
        self.wake.set()
        self.watch_wake.set()

    def remove(self, hold: Hold) -> None:
        hold.done = True
        self.ledger.remove(hold)
        self.watched.discard(hold)

    async def queue_join(self, name: str, holder: str, timeout: float) -> Optional[QueuedWait]:
        """client._Keeper.queue_join for asyncio: None unless the keeper
        runs for kept leases and LISTENs for grants."""
        if not self.wanted or not await self.ensure(timeout) or not self.queue_listening:
            return None
        w = QueuedWait(name, holder)
        self.queued[(name, holder)] = w
        return w

    def queue_leave(self, w: QueuedWait) -> None:
        if self.queued.get((w.name, w.holder)) is w:
            del self.queued[(w.name, w.holder)]

    def _queue_heard(self, payload: str) -> None:
        try:
            grant = json.loads(payload)
            w = self.queued.get((grant["lease"], grant["holder"]))
        except (ValueError, KeyError, TypeError):
            return
        if w is not None:
            w.event.set()

    def release_later(self, name: str, holder: str) -> None:
        self.ledger.releases.append((name, holder))
        self.wanted = True
        self.wake.set()

    # -- reporting a loss ---------------------------------------------------------------

    def report(self, holds: Sequence[Hold], reason: str, release: bool = False) -> None:
        """Declare holds lost (each once), stop keeping them, tell their
        owners.  Every hold is marked first; the on_lost callbacks run after
        (coroutine ones in tasks of their own), so none holds up the rest."""
        fresh = []
        for hold in holds:
            if not hold.declare_lost(reason):
                continue
            self.ledger.remove(hold)
            self.watched.discard(hold)
            if release:
                hold.given_back = True          # its name is never used again
                self.ledger.releases.append((hold.name, hold.holder))
                self.wake.set()
            fresh.append(hold)
        self.tell(fresh)

    def tell(self, holds: Sequence[Hold]) -> None:
        """Run the on_lost callbacks of holds just declared lost, soon, in
        the running loop (not inside the caller)."""
        loop = asyncio.get_running_loop()
        for hold in holds:
            loop.call_soon(self._callback, hold)

    def overdue(self, hold: Hold) -> None:
        """A reader found hold past its deadline before the watchdog did
        (the loop was blocked): the watchdog's verdict, now.  Only in the
        keeper's loop (report schedules callbacks there); a reader in
        another thread sees the hold as not live and leaves the verdict
        to the watchdog."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        if self.task is None or loop is not self.task.get_loop():
            return
        if hold.keep_alive:
            self.report([hold], OVERDUE, release=True)
        else:
            self.report([hold], LAPSED)

    def _callback(self, hold: Hold) -> None:
        try:
            result = hold.lock._lost(hold)
        except Exception:
            log.exception("dsync: the on_lost callback of %r failed", hold)
            return
        if asyncio.iscoroutine(result):
            task = asyncio.get_running_loop().create_task(result)
            self.callbacks.add(task)
            task.add_done_callback(self.callbacks.discard)

    # -- the keeper task ----------------------------------------------------------------

    async def _run(self) -> None:
        failures = c.KeeperFailures(log)
        try:
            while not self.stopping:
                try:
                    if self.conn is None:
                        if not (self.wanted or self.ledger.holds or self.ledger.releases):
                            self.wake.clear()
                            await self.wake.wait()
                            continue
                        await self._connect()
                    await self._tick()
                    failures.succeeded()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    # Said as a call says it (a dropped extension, not preloaded).
                    err = await errors.diagnose_async(exc, "keeping leases", self.conn) \
                        if isinstance(exc, psycopg.Error) else exc
                    await self._drop(exc)
                    # One line per distinct failure, and a growing pause: a
                    # database without the extension fails every round.
                    await self._rest(failures.failed(err, exc))
        finally:
            # Cancelled by stop(), or by the loop's end (asyncio.run cancels
            # every task then): give back what is held, leave nothing open.
            # Not when the coroutine is merely collected after its loop
            # closed: there is nothing left to run on.
            if asyncio._get_running_loop() is not None:
                try:
                    if not self.stopping:
                        await self._last_words()
                    await self._drop(None)
                    if not self.stopping and not self.client._closed:
                        await self.client._close_connections()
                except Exception:
                    log.exception("dsync: closing the keeper failed")

    async def _rest(self, seconds: float) -> None:
        """The pause after a failed round (c.KeeperPause: a wake-up, such
        as an acquire waiting for the connection, ends it, but not before
        its base interval)."""
        pause = c.KeeperPause(seconds, time.monotonic())
        self.wake.clear()
        while not self.stopping:
            left = pause.left(time.monotonic())
            if left <= 0:
                return
            await wait_event(self.wake, left)
            woken = self.wake.is_set()
            self.wake.clear()
            if woken and pause.woken(time.monotonic()):
                return

    async def _last_words(self) -> None:
        holds = list(self.ledger.holds)
        if not holds or self.conn is None:
            return
        self.report(holds, "the event loop ended")
        try:
            await self._execute(sql.RELEASE_MANY, ([h.name for h in holds],
                                                   [h.holder for h in holds]))
        except Exception:
            pass                                # they lapse at their ttl

    async def _connect(self) -> None:
        try:
            conn = await self.client._connect(c.KEEPER_SETTINGS, keeper=True)
            try:
                conn.add_notify_handler(lambda n: self._heard(n.channel, n.payload, n.pid))
                listen_ok = (self.client.listen is not False
                             and not await _wire.behind_pooler_async(conn))
                if self.client.listen is True and not listen_ok:
                    raise errors.ListenUnavailable(
                        "LISTEN does not work through this connection (a pooler in "
                        "transaction mode); give listen=None to notice a lost lease at the "
                        "next renewal instead")
                senders = await sender_pids(conn)
                if listen_ok:
                    await conn.execute(f'LISTEN "{self.client._queue_channel}"')
            except psycopg.Error as exc:
                # Said as the library says it (no extension, not preloaded).
                err = await errors.diagnose_async(exc, "connecting the keeper", conn)
                await conn.close()
                raise err from exc
            except BaseException:
                await conn.close()
                raise
        except BaseException as exc:
            # A failure to connect stays the driver's (acquire's
            # KeeperUnavailable has it as its cause); what failed once
            # connected was said as the library says it, above.
            self.error = exc
            self.attempts += 1
            self.changed.set()
            raise
        self.pending.clear()
        self.conn = conn
        self.error = None
        self.attempts += 1
        self.ledger.connected_anew(listen_ok, senders)
        self.queue_listening = listen_ok
        for w in self.queued.values():
            w.event.set()               # grants announced meanwhile went unheard
        self._resume()
        self.changed.set()

    async def _drop(self, exc: Optional[BaseException]) -> None:
        self._pause()
        conn, self.conn = self.conn, None
        self.ledger.disconnected()
        self.queue_listening = False
        if exc is not None:
            self.error = exc
        self.changed.set()
        if conn is not None:
            await conn.close()

    def _heard(self, channel: str, payload: str, pid: int) -> None:
        if channel == self.client._queue_channel:
            self._queue_heard(payload)
            return
        self.pending.append((channel, payload, pid))
        self.wake.set()

    def _resume(self) -> None:
        """Read notifications off the idle connection's socket."""
        if not self.reading and self.conn is not None:
            self.reader_fd = self.conn.fileno()
            asyncio.get_running_loop().add_reader(self.reader_fd, self._readable)
            self.reading = True
            self._readable()

    def _pause(self) -> None:
        """Before a statement: psycopg reads the socket then.  The reader
        is removed by the descriptor it was added for: a lost connection
        cannot tell its descriptor any more, and a reader left behind on a
        closed descriptor would be found by the next connection that gets
        the same number."""
        if self.reading:
            self.reading = False
            asyncio.get_running_loop().remove_reader(self.reader_fd)

    def _readable(self) -> None:
        pg = self.conn.pgconn
        try:
            pg.consume_input()
        except Exception:
            self._pause()
            self.error = psycopg.OperationalError("the keeper's connection was lost")
            self.wake.set()
            return
        if pg.status != psycopg.pq.ConnStatus.OK:
            self._pause()
            self.error = psycopg.OperationalError("the keeper's connection was lost")
            self.wake.set()
            return
        while True:
            n = pg.notifies()
            if n is None:
                break
            self._heard(n.relname.decode(), n.extra.decode(), n.be_pid)

    async def _execute(self, statement: str, params: Any = None) -> List[tuple]:
        self._pause()
        try:
            cur = await self.conn.execute(statement, params)
            return await cur.fetchall() if cur.description is not None else []
        finally:
            self._resume()

    async def _in_tx(self, statement: str, params: Any) -> List[tuple]:
        """client.in_keeper_tx: one of sql.KEEPER_*, a transaction of its
        own that waits at most 50 ms for a locked row."""
        return await self._execute(statement, params)

    async def _renew_batch(self, batch: List[Hold]) -> None:
        """client._Keeper._renew_batch: a guarded (locked) lease waits for
        a later try alone; the others are renewed now."""
        sent = time.monotonic()
        try:
            rows = await self._in_tx(sql.KEEPER_RENEW_MANY, Ledger.renewal_args(batch))
        except psycopg.errors.LockNotAvailable:
            if len(batch) == 1:
                self.ledger.blocked(batch, time.monotonic())
                return
            half = len(batch) // 2
            await self._renew_batch(batch[:half])
            await self._renew_batch(batch[half:])
            return
        gone = self.ledger.renewed(batch, [r[0] for r in rows], sent)
        if gone:
            self.report(gone, "the renewal found the lease no longer held")

    async def _tick(self) -> None:
        # Cleared first: a wake-up asked for during the tick is not lost.
        self.wake.clear()
        if not self.reading:
            raise self.error or psycopg.OperationalError("the keeper's connection was lost")
        listen = self.ledger.to_listen(time.monotonic())
        for i in range(0, len(listen), LISTEN_CHUNK):
            chunk = listen[i:i + LISTEN_CHUNK]
            await self._execute(sql.listen_statement(chunk))
            self.ledger.listened(chunk)
        unlisten = self.ledger.to_unlisten()
        if unlisten:
            self.ledger.unlistened(unlisten)
            await self._execute(sql.unlisten_statement(unlisten))
        await self._hear()
        batch = self.ledger.due(time.monotonic())
        if batch:
            await self._renew_batch(batch)
            await self._hear()
        if time.monotonic() >= self.releases_retry_at:
            releases, self.ledger.releases = self.ledger.releases, []
            if releases:
                try:
                    await self._in_tx(sql.KEEPER_RELEASE_MANY, ([n for n, _ in releases],
                                                                [h for _, h in releases]))
                except psycopg.errors.LockNotAvailable:
                    self.ledger.releases[:0] = releases
                    self.releases_retry_at = time.monotonic() + 0.25
                except BaseException:
                    self.ledger.releases[:0] = releases
                    raise
        orphans = self.ledger.orphans()
        for hold in orphans:
            log.warning("dsync: the task that held lease %r (holder %r) ended without releasing "
                        "it; it is no longer renewed and lapses at its ttl", hold.name, hold.holder)
        if orphans:
            self.report(orphans, "its owner task ended without releasing it")
        await self.client._waits.trim()
        wait = self.ledger.next_wake(time.monotonic())
        wait = 1.0 if wait is None else min(wait, 1.0)
        if self.pending:
            return
        await wait_event(self.wake, wait)

    async def _hear(self) -> None:
        if not self.pending:
            return
        notes, self.pending = self.pending, []
        unknown = False
        for channel, payload, pid in notes:
            gone, _suspect = self.ledger.judge(channel, payload, pid)
            if gone:
                ev = c.parse_payload(channel, payload)
                self.report(gone, f"the lease was {ev.kind}")
            unknown = unknown or (pid not in self.ledger.senders and
                                  channel in self.ledger.by_channel)
        if unknown and time.monotonic() - self.senders_asked > 1.0:
            self.senders_asked = time.monotonic()
            self._pause()
            try:
                self.ledger.senders = await sender_pids(self.conn)
            finally:
                self._resume()

    # -- the watchdog task ------------------------------------------------------------------

    async def _watch(self) -> None:
        while not self.stopping:
            now = time.monotonic()
            rescue = self.ledger.to_rescue(self.watched, now)
            if rescue and (self.rescuer is None or self.rescuer.done()):
                self.rescuer = asyncio.get_running_loop().create_task(self._rescue(rescue),
                                                                      name="dsync rescue")
            overdue = self.ledger.overdue(self.watched, now)
            kept = [h for h in overdue if h.keep_alive]
            if kept:
                self.report(kept, OVERDUE,
                            release=True)
            lapsed = [h for h in overdue if not h.keep_alive]
            if lapsed:
                self.report(lapsed, LAPSED)
            nxt = self.ledger.watch_wake(self.watched, now)
            wait = 1.0 if nxt is None else max(0.0, min(1.0, nxt - now))
            self.watch_wake.clear()
            await wait_event(self.watch_wake, wait)

    async def _rescue(self, batch: List[Hold]) -> None:
        """client._Keeper._rescue for asyncio."""
        sent = time.monotonic()
        try:
            rows = await self.client._query(sql.RENEW_MANY, Ledger.renewal_args(batch),
                                            "renewing leases the keeper could not renew in time",
                                            rows=True, retry=False)
        except errors.DsyncError as exc:
            log.info("dsync: a rescue renewal failed: %s", exc)
            self.ledger.blocked(batch, time.monotonic())
            self.watch_wake.set()
            return
        gone = self.ledger.renewed(batch, [r[0] for r in rows], sent)
        if gone:
            self.report(gone, "the renewal found the lease no longer held")
        self.watch_wake.set()

    async def stop(self) -> Tuple[List[Hold], List[Tuple[str, str]]]:
        """Stop both tasks; the holds still kept and the releases still to
        send, for the caller to give back."""
        self.stopping = True
        holds = list(self.watched)
        me = asyncio.current_task()
        for task in (self.task, self.watchdog, self.rescuer):
            if task is not None and task is not me and not task.done():
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass
        releases, self.ledger.releases = self.ledger.releases, []
        return holds, releases


class AsyncClient:
    """The asyncio form of dsync.Client (see it for the arguments):

        async with AsyncClient("dbname=app") as client:
            async with client.lock("billing", ttl=30):
                ...

    It belongs to the event loop of its first use.  The objects' own
    constructors (AsyncLock("x", conninfo=...)) use a default client per
    loop and connection string, closed when that loop's tasks are
    cancelled at its end (asyncio.run does so)."""

    def __init__(self, conninfo: Optional[str] = None, *, pool: Any = None, pool_size: int = 2,
                 listen: Optional[bool] = None, call_timeout: Optional[float] = CALL_TIMEOUT,
                 queue: bool = True, **connect_kwargs: Any):
        if not isinstance(pool_size, int) or isinstance(pool_size, bool) or pool_size < 1:
            raise ValueError("pool_size must be a positive int")
        self.call_timeout = check_call_timeout(call_timeout)
        self.queue = bool(queue)
        self._queue_key = "py-" + uuid.uuid4().hex[:24]
        self._queue_channel = "dsyncq:" + self._queue_key
        self._settings = c.ConnectionSettings(conninfo, pool, connect_kwargs)
        self.conninfo = self._settings.conninfo
        self.listen = listen
        self._closed = False
        self._pid = os.getpid()
        # The loop of first use, weakly: the default clients are kept per
        # loop in a WeakKeyDictionary, which a strong reference would pin.
        self._loop: Optional["weakref.ref[asyncio.AbstractEventLoop]"] = None
        self._statements = AsyncLane(self, pool_size, pool_size, None)
        self._waits = AsyncLane(self, None, pool_size, WAIT_IDLE_SECONDS)
        self._contention = c.Contention()
        self._keeper: Optional[_Keeper] = None

    @property
    def keeper(self) -> _Keeper:
        """The keeper, made in (and bound to) the loop of first use; its
        task starts then, so that the loop's end closes the client."""
        if self._keeper is None:
            self._keeper = _Keeper(self)
            self._keeper.start(connect=False)
        return self._keeper

    # -- recipes ----------------------------------------------------------------------

    def lock(self, name: str, **kwargs: Any):
        from .aio import AsyncLock
        return AsyncLock(name, client=self, **kwargs)

    def read_lock(self, name: str, **kwargs: Any):
        from .aio import AsyncReadLock
        return AsyncReadLock(name, client=self, **kwargs)

    async def semaphore(self, name: str, permits: Optional[int] = None, **kwargs: Any):
        """An AsyncSemaphore, created (permits given) or attached."""
        from .aio import AsyncSemaphore
        if permits is None:
            return await AsyncSemaphore.attach(name, client=self, **kwargs)
        return await AsyncSemaphore.create(name, permits, client=self, **kwargs)

    def event(self, name: str):
        from .aio import AsyncEvent
        return AsyncEvent(name, client=self)

    def election(self, group: str, **kwargs: Any):
        from .aio import AsyncLeaderElection
        return AsyncLeaderElection(group, client=self, **kwargs)

    def watch(self, names: Sequence[str], **kwargs: Any):
        from .aio_watch import awatch
        kw = dict(self._settings.kwargs)
        kw.update(kwargs)
        return awatch(names, conninfo=self.conninfo, **kw)

    # -- statements -------------------------------------------------------------------------

    async def _connect(self, extra: Dict[str, Any],
                       keeper: bool = False) -> psycopg.AsyncConnection:
        return await psycopg.AsyncConnection.connect(
            self.conninfo, **self._settings.connect_kwargs(extra, keeper))

    def _check_usable(self) -> None:
        if self._closed:
            raise errors.DsyncError("the dsync client is closed")
        if os.getpid() != self._pid:
            raise errors.DsyncError("a dsync AsyncClient cannot be used in a forked process")
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = weakref.ref(loop)
            self.keeper         # the loop's end now closes the client
        elif self._loop() is not loop:
            raise errors.DsyncError("this AsyncClient belongs to another event loop")

    async def _query(self, statement: str, params: Sequence[Any], what: str, *,
                     wait: bool = False, retry: bool = True, rows: bool = False,
                     timed: Optional[list] = None, shield: bool = False,
                     server_wait: float = 0.0) -> Any:
        """client.Client._query for asyncio.  shield: a caller cancelled
        meanwhile lets the statement finish in the background, and its
        connection goes back to the pool, instead of the connection being
        cancelled and closed (for callers that are cancelled often and
        whose statements are short: a new connection for each would pile
        up backends)."""
        if shield:
            task = asyncio.ensure_future(self._query(statement, params, what, wait=wait,
                                                     retry=retry, rows=rows, timed=timed,
                                                     server_wait=server_wait))
            task.add_done_callback(_retrieved)
            return await asyncio.shield(task)
        lane = self._waits if wait else self._statements
        for attempt in (0, 1):
            failure: Optional[psycopg.Error] = None
            ext: Any = errors.UNPROBED
            db: Optional[str] = None
            reused = False
            try:
                async with lane.connection() as (conn, reused):
                    if timed is not None:
                        timed.append(time.monotonic())
                    bound = None if self.call_timeout is None else self.call_timeout + server_wait
                    until = time.monotonic() + (errors.PROBE_TIMEOUT if bound is None else bound)
                    timer = AsyncBound(conn, bound) if bound is not None else None
                    cut = False
                    try:
                        try:
                            first = None if rows else \
                                await _wire.first_row_async(conn, statement, params)
                            if first is not None:
                                result = first[0] if first else None
                            else:
                                cur = await conn.execute(statement, params)
                                result = await (cur.fetchall() if rows else cur.fetchone())
                        finally:
                            cut = timer is not None and timer.end()
                    except psycopg.Error as exc:
                        if cut:
                            raise errors.DsyncConnectionError(
                                f"{what}: the server did not answer within {bound:g} s "
                                "(call_timeout); the connection was closed") from exc
                        if is_connection_error(exc):
                            raise
                        failure = exc
                        db = conn.info.dbname   # for the message, while it is ours
                        # Still this task's: ask whether the extension is
                        # there, within the call's time left.
                        ext = await errors.probed_async(exc, conn, until - time.monotonic())
                    if cut:
                        await conn.close()  # answered as it was cut: not reusable
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

    async def _queue_wait(self, name: str, holder: str, ttl: Any, shared: bool,
                          deadline: Optional[float],
                          what: str) -> Optional[Tuple[Optional[int], float]]:
        """client.Client._queue_wait for asyncio."""
        ttl_s = ttl.total_seconds()
        left = None if deadline is None else deadline - time.monotonic()
        w = await self.keeper.queue_join(name, holder, min(2.0, ttl_s / 3) if left is None
                                         else max(0.0, min(2.0, ttl_s / 3, left)))
        if w is None:
            return None
        granted = False
        try:
            sent = time.monotonic()
            token = await self._query(sql.QUEUE, (name, holder, ttl, self._queue_key, shared),
                                      what)
            if token is not None:
                granted = True
                return int(token), sent
            while True:
                now = time.monotonic()
                if deadline is not None and now >= deadline:
                    return None, 0.0
                wait = ttl_s / 3 if deadline is None else min(ttl_s / 3, deadline - now)
                await wait_event(w.event, max(0.0, wait))
                w.event.clear()
                sent = time.monotonic()
                state, fencing, expires_in = (await self._query(sql.CLAIM, (name, holder), what,
                                                                rows=True))[0]
                if state == "granted":
                    granted = True
                    return int(fencing), sent + expires_in - ttl_s
                if state == "gone":
                    sent = time.monotonic()
                    token = await self._query(sql.QUEUE,
                                              (name, holder, ttl, self._queue_key, shared), what)
                    if token is not None:
                        granted = True
                        return int(token), sent
        finally:
            self.keeper.queue_leave(w)
            if not granted:
                try:
                    await asyncio.shield(self._query(sql.UNQUEUE, (name, holder), what))
                except (errors.DsyncError, asyncio.CancelledError):
                    pass            # the place lapses at its ttl; a grant passes on

    async def _acquire(self, statement: str, args: Tuple, blocking: bool,
                       deadline: Optional[float], what: str) -> Tuple[Optional[int], float]:
        """client.Client._acquire for asyncio."""
        name, holder, ttl, info = args
        timed: list = []
        token = None
        now = time.monotonic()
        tried = False
        if not self._contention.wait_at_once(name, blocking, deadline, now):
            tried = True
            token = await self._query(statement, (name, holder, ttl, c.ZERO, info), what,
                                      timed=timed)
            if token is None and blocking:
                self._contention.found_taken(name, now)
        # Not had at once: wait in the line, without a connection, where we can.
        if token is None and blocking and self.queue:
            got = await self._queue_wait(name, holder, ttl, statement == sql.ACQUIRE_SHARED,
                                         deadline, what)
            if got is not None:
                if got[0] is not None and info is not None:
                    sent = time.monotonic()
                    token = await self._query(statement, (name, holder, ttl, c.ZERO, info), what)
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
            token = await self._query(statement, (name, holder, ttl, wait, info), what,
                                      wait=True, timed=timed, server_wait=wait.total_seconds())
            if deadline is not None and time.monotonic() >= deadline:
                break
        return (int(token) if token is not None else None), (timed[-1] if timed else 0.0)

    # -- the end ------------------------------------------------------------------------------

    async def _close_connections(self) -> None:
        self._closed = True
        forget_default(self)
        await self._statements.close()
        await self._waits.close()

    async def close(self) -> None:
        """Give back every lease held through this client (their owners see
        them lost), stop the keeper and close the connections."""
        if self._closed:
            return
        holds: List[Hold] = []
        releases: List[Tuple[str, str]] = []
        if self._keeper is not None:
            holds, releases = await self._keeper.stop()
            self._keeper.report(holds, "the client was closed")
        releases += [(h.name, h.holder) for h in holds]
        if releases and os.getpid() == self._pid:
            try:
                await self._query(sql.RELEASE_MANY, ([n for n, _ in releases],
                                                     [h for _, h in releases]),
                                  "releasing the leases of a closed client")
            except errors.DsyncError:
                pass
        await self._close_connections()

    async def __aenter__(self) -> "AsyncClient":
        """Connect now (see dsync.Client.__enter__)."""
        await self.ping()
        return self

    async def ping(self) -> None:
        """See dsync.Client.ping."""
        await self._query(sql.BACKEND_PID, (), "connecting", retry=False)

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()


_defaults: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Dict[tuple, AsyncClient]]" = \
    weakref.WeakKeyDictionary()


def forget_default(client: AsyncClient) -> None:
    """A closed client is nobody's default any more."""
    for clients in list(_defaults.values()):
        for key, other in list(clients.items()):
            if other is client:
                del clients[key]


def default_client(conninfo: Optional[str], pool: Any, listen: Optional[bool],
                   connect_kwargs: Dict[str, Any]) -> AsyncClient:
    """The client shared, in the running loop, by objects made with the same
    conninfo (and keyword arguments) or pool."""
    key = c.ConnectionSettings.key(conninfo, pool, dict(connect_kwargs, listen=listen))
    clients = _defaults.setdefault(asyncio.get_running_loop(), {})
    client = clients.get(key)
    if client is None or client._closed:
        client = AsyncClient(conninfo, pool=pool, listen=listen, **connect_kwargs)
        clients[key] = client
    return client
