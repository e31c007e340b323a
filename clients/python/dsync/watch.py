"""dsync.watch: the events of some names as they come, for threads.

A watch has a connection of its own (it LISTENs, which a transaction
pooler cannot do), starts with the current state, and after a reconnect
resumes from the server's event log so that nothing is missed or seen
twice.
"""

from __future__ import annotations

import select
import time
from typing import Any, Iterator, List, Optional, Sequence

import psycopg

from . import _common as c
from . import errors
from . import _sql as sql
from .errors import ListenUnavailable
from ._common import LeaseEvent, Seconds
from .client import behind_pooler, sender_pids

__all__ = ["watch"]


def _channels(conn: psycopg.Connection, names: Sequence[str]) -> dict:
    rows = conn.execute(sql.CHANNELS, (list(names),)).fetchall()
    return {channel: name for name, channel in rows}


def _listen(conn: psycopg.Connection, channels: Sequence[str]) -> None:
    if channels:
        conn.execute(sql.listen_statement(channels))


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


def _log_query(conn: psycopg.Connection, sql: str, params: Any = None) -> Optional[list]:
    """Rows of a query on the event log, or None if the installed version
    keeps none (before 1.4: pg_extension says it lacks the name; any other
    failure, a missing extension say, is the watch's)."""
    try:
        return conn.execute(sql, params).fetchall()
    except psycopg.Error as exc:
        if errors.older_version(errors.probed(exc, conn)):
            return None
        raise


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
    did not send (another role's NOTIFY on the channel), and events the
    starting state already shows, are skipped.  Ends
    after `timeout` seconds without an event (None: never).
    """
    names = [c.name_arg(n, "name") for n in names]
    limit = c.interval(timeout, "timeout")
    resume = c.Resume(after)
    lost_at: Optional[float] = None
    kwargs = c.pool_settings(connect_kwargs, conninfo)
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
                raise ListenUnavailable(
                    "LISTEN does not work through this connection: it goes through a "
                    "connection pooler in transaction mode; watch needs a direct "
                    "connection (or a pool in session mode)")
            pending: List[tuple] = []
            conn.add_notify_handler(lambda n: pending.append((n.channel, n.payload, n.pid)))
            chans = _channels(conn, names)
            if not resume.started:
                # Where the log stands before we listen: nothing later is missed.
                top = _log_query(conn, sql.LOG_TOP)
                resume.last = top[0][0] if top else None
            _listen(conn, list(chans))
            senders = sender_pids(conn)
            # Everything is read before anything is yielded: the caller may
            # take its time, and a connection lost meanwhile must not make
            # the next one start afresh.
            gap, missed = None, []
            if resume.last is not None:
                gap, missed = resume.catch_up(
                    _log_query(conn, sql.CATCH_UP, (resume.last, names)))
                if gap is None and lost_at is not None:
                    retention = _log_query(conn, sql.RETENTION)
                    gap = resume.away_too_long(time.monotonic() - lost_at,
                                               retention[0][0] if retention else None)
            lost_at = None
            state = []
            if not resume.started or gap is not None or resume.last is None:
                state = conn.execute(sql.LEASE_STATE, (names,)).fetchall()
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
                        senders = sender_pids(conn)        # a new sender after a restart?
                        if pid not in senders:
                            continue
                    ev = c.parse_payload(channel, payload)
                    if ev is not None and resume.fresh(ev):
                        last = time.monotonic()
                        yield ev
        except psycopg.Error as exc:
            # A database without the extension, a server without dsync
            # preloaded: said as the library says it, not retried (a 55000
            # is an OperationalError, and was retried for ever).
            err = errors.specific(exc, "watching " + ", ".join(repr(n) for n in names), conn)
            if err is not None:
                raise err from exc
            if not isinstance(exc, psycopg.OperationalError) or not reconnect:
                raise
            if lost_at is None:     # the first loss counts, not each failed retry
                lost_at = time.monotonic()
            time.sleep(0.2)
        finally:
            conn.close()
