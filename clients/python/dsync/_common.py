"""What the sync and asyncio halves of the library share: argument types,
the SQL they send, default holders, payload parsing and errors.

Every statement casts its parameters to the SQL types of the interface, so
that a Python int or float ttl, a dict as info, or a str name never meets
PostgreSQL's "function does not exist" for an unknown or smallint argument.
"""

from __future__ import annotations

import json
import os
import secrets
import select
import socket
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Mapping, Optional, Sequence, Union

from psycopg.types.json import Jsonb

Seconds = Union[int, float, timedelta]

# The longest a blocking acquire waits inside the server in one statement.
# Waiting in slices lets the server's cleanup horizon (the statement's
# snapshot) move on, and lets the client notice a timeout or a stop.
WAIT_SLICE = timedelta(seconds=5)

# Connection settings that work through PgBouncer in transaction mode:
# no server-side prepared statements, every statement its own transaction.
POOLER_SAFE = {"autocommit": True, "prepare_threshold": None}

SQL_ACQUIRE = ("SELECT dsync_acquire(%s::text, %s::text, %s::interval, "
               "%s::interval, %s::jsonb)")
SQL_ACQUIRE_SHARED = ("SELECT dsync_acquire_shared(%s::text, %s::text, %s::interval, "
                      "%s::interval, %s::jsonb)")
SQL_RENEW = "SELECT dsync_renew(%s::text, %s::text, %s::interval)"
SQL_RELEASE = "SELECT dsync_release(%s::text, %s::text)"
SQL_ASSERT_HELD = "SELECT dsync_assert_held(%s::text, %s::text)"
SQL_HELD = ("SELECT fencing, expires_at FROM dsync_leases"
            " WHERE lease = %s::text AND holder = %s::text")
SQL_LEASE_STATE = ("SELECT lease, holder, fencing, expires_at FROM dsync_leases"
                   " WHERE lease = ANY(%s::text[]) ORDER BY lease, holder")
SQL_LEADER = "SELECT dsync_leader(%s::text)"
SQL_SEM_CREATE = "SELECT dsync_semaphore_create(%s::text, %s::int)"
SQL_EVENT_SET = "SELECT dsync_event_set(%s::text)"
SQL_EVENT_WAIT = "SELECT dsync_event_wait(%s::text, %s::interval)"
SQL_EVENT_CLEAR = "SELECT dsync_event_clear(%s::text)"
SQL_EVENT_IS_SET = "SELECT dsync_event_is_set(%s::text)"
SQL_JOIN = "SELECT dsync_join(%s::text, %s::text, %s::interval, %s::jsonb)"
SQL_LEAVE = "SELECT dsync_leave(%s::text, %s::text)"
SQL_MEMBERS = ("SELECT member, info, joined_at, expires_at, is_leader"
               " FROM dsync_members(%s::text) ORDER BY member")
SQL_CHANNELS = "SELECT n, dsync_channel(n) FROM unnest(%s::text[]) AS n"
SQL_BACKEND_PID = "SELECT pg_backend_pid()"
SQL_SENDERS = "SELECT * FROM dsync_stats"
# Where the log stands: its newest event, or the last number handed out.
SQL_LOG_TOP = ("SELECT GREATEST(COALESCE((SELECT seq FROM dsync_event_log"
               " ORDER BY seq DESC LIMIT 1), 0), dsync_events_horizon())")
# The horizon and the events after a seq, in one snapshot (no prune between).
SQL_RETENTION = ("SELECT extract(epoch FROM"
                 " current_setting('dsync.event_retention')::interval)::float8")
SQL_CATCH_UP = ("SELECT h.h, e.seq, e.channel, e.payload::text"
                " FROM dsync_events_horizon() AS h(h)"
                " LEFT JOIN dsync_events_since(%s::bigint, %s::text[]) AS e ON true"
                " ORDER BY e.seq")


class DsyncError(Exception):
    """Base class of the library's own errors."""


class LockLost(DsyncError):
    """The lease was lost while held: expired, released by someone else,
    or taken over.  Raised by check(); anything guarded by it must stop."""


class NotHeld(DsyncError):
    """An operation that needs the lease was called without holding it."""


class ListenUnavailable(DsyncError):
    """LISTEN does not work on this connection: it goes through a pooler in
    transaction mode, which lends each transaction any server connection."""


def interval(value: Optional[Seconds], name: str) -> Optional[timedelta]:
    """A ttl, wait or timeout as a timedelta (seconds may be int or float)."""
    if value is None:
        return None
    if isinstance(value, timedelta):
        td = value
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        td = timedelta(seconds=value)
    else:
        raise TypeError(f"{name} must be seconds (int or float) or a timedelta,"
                        f" not {type(value).__name__}")
    if td < timedelta(0):
        raise ValueError(f"{name} must not be negative")
    return td


def positive(value: Seconds, name: str) -> timedelta:
    td = interval(value, name)
    if td is None or td <= timedelta(0):
        raise ValueError(f"{name} must be positive")
    return td


def jsonb(info: Any) -> Optional[Jsonb]:
    """info as a jsonb parameter: any JSON-serialisable value."""
    if info is None:
        return None
    json.dumps(info)            # fail here, with the caller's value
    return Jsonb(info)


def name_arg(value: str, what: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")
    if value == "":
        raise ValueError(f"{what} must not be empty")
    return value


def default_holder() -> str:
    """host:pid:random, unique per object, readable in dsync_leases."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


def pool_settings(kwargs: Mapping[str, Any]) -> dict:
    """Connection keyword arguments with the pooler-safe defaults."""
    merged = dict(POOLER_SAFE)
    merged.update(kwargs)
    return merged


def still_open(conn: Any) -> bool:
    """Whether a connection kept idle between uses can serve the next
    statement.  A server that went away meanwhile (a failover, a restart)
    has left an error and the end of the stream to read, and the statement
    would fail for it.  What there is to read is read: the end of the
    stream makes libpq fail (the connection is gone); notifications of a
    listening connection are dropped, as its next owner asks for the state
    anyway."""
    if conn.closed:
        return False
    try:
        poller = select.poll()              # select() fails on descriptors >= 1024
        poller.register(conn.fileno(), select.POLLIN)
        pg = conn.pgconn
        for _ in range(8):                  # an error message, then the end
            if not poller.poll(0):
                break
            pg.consume_input()
            while pg.notifies() is not None:
                pass
    except Exception:           # no socket any more, or the server hung up
        return False
    return not conn.closed


@dataclass(frozen=True)
class LeaseEvent:
    """One dsync notification, typed: fencing is an int, times are
    timezone-aware datetimes.  kind is the payload's "event" ("acquired",
    "released", "expired", "joined", "left", "set"), "state" for a row
    of the current state read at the start (and after a gap), or "gap":
    events up to seq were missed for good (older than the server's
    dsync.event_retention when the watch resumed)."""

    kind: str
    name: str
    holder: Optional[str] = None
    fencing: Optional[int] = None
    expires_at: Optional[datetime] = None
    seq: Optional[int] = None
    channel: Optional[str] = None
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False)


def parse_time(text: Optional[str]) -> Optional[datetime]:
    if text is None:
        return None
    # RFC 3339 with a full offset; fromisoformat before 3.11 wants exactly
    # six fraction digits, so normalise them.
    t = text.replace("Z", "+00:00")
    if "." in t:
        head, rest = t.split(".", 1)
        digits = ""
        while rest and rest[0].isdigit():
            digits += rest[0]
            rest = rest[1:]
        t = f"{head}.{(digits + '000000')[:6]}{rest}"
    return datetime.fromisoformat(t)


def parse_payload(channel: str, payload: str) -> Optional[LeaseEvent]:
    """The event a dsync notification carries, or None if it is not one."""
    try:
        data = json.loads(payload)
    except ValueError:
        return None
    if not isinstance(data, dict) or "event" not in data:
        return None
    name = data.get("lease", data.get("group", data.get("name")))
    if not isinstance(name, str):
        return None
    fencing = data.get("fencing")
    return LeaseEvent(
        kind=str(data["event"]),
        name=name,
        holder=data.get("holder", data.get("member")),
        fencing=int(fencing) if fencing is not None else None,
        expires_at=parse_time(data.get("expires_at")),
        seq=int(data["seq"]) if data.get("seq") is not None else None,
        channel=channel,
        raw=data,
    )


class Resume:
    """Where a watch stands in the server's event log: the last seq it
    has given its caller (None: the server keeps no log), so that after a
    reconnect it replays what it missed, and skips a notification it has
    already replayed."""

    def __init__(self, after: Optional[int]):
        if after is not None and (not isinstance(after, int) or after < 0):
            raise ValueError("after must be a non-negative int (a seq), or None")
        self.last = after
        self.started = after is not None   # a position to resume from is known

    def fresh(self, ev: LeaseEvent) -> bool:
        """Whether ev is new to the caller; notes its seq if so."""
        if ev.seq is None or self.last is None:
            return True
        if ev.seq <= self.last:
            return False
        self.last = ev.seq
        return True

    def catch_up(self, rows: Optional[list]) -> tuple:
        """From SQL_CATCH_UP's rows: the "gap" event if events after the
        last seq are gone and a position to resume from was known (else
        None), and the missed events' (channel, payload) rows."""
        if not rows:
            return None, []
        horizon = rows[0][0]
        missed = [(r[2], r[3]) for r in rows if r[1] is not None]
        gap = None
        if self.started and horizon is not None and horizon > self.last:
            gap = LeaseEvent(kind="gap", name="", seq=int(horizon))
        if horizon is not None and horizon > self.last:
            self.last = int(horizon)
        return gap, missed

    def away_too_long(self, away: Optional[float], retention: Optional[float]) -> Optional[LeaseEvent]:
        """The "gap" event if the watcher was disconnected for longer than
        the server keeps logging after the last watcher left (its
        dsync.event_retention): events it never logged may have been
        missed, and no horizon shows them."""
        if away is None or retention is None or away < retention:
            return None
        return LeaseEvent(kind="gap", name="", seq=self.last)


def lost_by(event: LeaseEvent, name: str, holder: str) -> bool:
    """Whether event says that holder no longer holds name: its release
    (by itself or by an administrator) or its expiry."""
    return (event.name == name and event.holder == holder
            and event.kind in ("released", "expired"))


class LeaseSettings:
    """What a Lock and an AsyncLock are told, checked once for both."""

    def __init__(self, name: str, ttl: Seconds, holder: Optional[str], info: Any,
                 on_lost: Any, listen: Optional[bool]):
        self.name = name_arg(name, "name")
        self.ttl = positive(ttl, "ttl")
        self.holder = name_arg(holder, "holder") if holder is not None else default_holder()
        self.info = jsonb(info)
        self.on_lost = on_lost
        self.listen = listen
        self.lost_reason: Optional[str] = None
        self.token: Optional[int] = None

    def lost_error(self) -> LockLost:
        return LockLost(f'lease "{self.name}" of holder "{self.holder}" was lost: '
                        f"{self.lost_reason}")


def next_wait(blocking: bool, deadline: Optional[float], now: float) -> timedelta:
    """How long the next statement of a blocking call may wait in the
    server: nothing when not blocking, else a slice of at most WAIT_SLICE
    that ends by the deadline (a time.monotonic() value, or None)."""
    if not blocking:
        return timedelta(0)
    if deadline is None:
        return WAIT_SLICE
    return min(WAIT_SLICE, timedelta(seconds=max(0.0, deadline - now)))


def deadline_of(timeout: Optional[Seconds], now: float) -> Optional[float]:
    limit = interval(timeout, "timeout")
    return None if limit is None else now + limit.total_seconds()


def member_row(row: Sequence[Any]) -> dict:
    """A row of SQL_MEMBERS as the cluster detail's dict."""
    return dict(member=row[0], info=row[1], joined_at=row[2], expires_at=row[3],
                is_leader=row[4])


def state_event(row: Sequence[Any]) -> LeaseEvent:
    """A row of SQL_LEASE_STATE as an event of kind "state"."""
    return LeaseEvent(kind="state", name=row[0], holder=row[1], fencing=int(row[2]),
                      expires_at=row[3])


def sender_pids(columns: Sequence[str], row: Optional[Sequence[Any]]) -> set:
    """The pids that send this database's events, from dsync_stats."""
    if row is None:
        return set()
    data = dict(zip(columns, row))
    pids = data.get("sender_pids") or ([data["sender_pid"]] if data.get("sender_pid") else [])
    return {int(p) for p in pids if p is not None}


class ElectionSettings:
    """What a LeaderElection and an AsyncLeaderElection are told; the lease
    they campaign for is made by lock_class with the same connection."""

    def __init__(self, lock_class: Any, group: str, conninfo: Optional[str], pool: Any,
                 ttl: Seconds, member: Optional[str], info: Any, on_leader: Any,
                 on_leader_loss: Any, listen: Optional[bool], connect_kwargs: dict):
        self.group = name_arg(group, "group")
        self.ttl = positive(ttl, "ttl")
        self.member = name_arg(member, "member") if member is not None else default_holder()
        self.info = info
        self.on_leader = on_leader
        self.on_leader_loss = on_leader_loss
        self._lock = lock_class(self.group, conninfo=conninfo, pool=pool, ttl=self.ttl,
                                holder=self.member, info=info, listen=listen,
                                on_lost=self._lost, **connect_kwargs)


class ConnectionSettings:
    """Where a sync or asyncio connector's connections come from: a
    conninfo string or a psycopg_pool pool, with the pooler-safe defaults
    and the caller's keyword arguments."""

    def __init__(self, conninfo: Optional[str], pool: Any, kwargs: Mapping[str, Any]):
        if (conninfo is None) == (pool is None):
            raise TypeError("give exactly one of conninfo and pool")
        self.pool = pool
        self.conninfo = conninfo if conninfo is not None else pool.conninfo
        self.kwargs = pool_settings(kwargs)

    def connect_kwargs(self, application_name: Optional[str], extra: Mapping[str, Any]) -> dict:
        """The caller's settings over extra; application_name if unset."""
        kwargs = dict(extra)
        kwargs.update(self.kwargs)
        if application_name is not None:
            kwargs.setdefault("application_name", application_name)
        return kwargs


def keeper_settings(name: str, ttl: timedelta) -> dict:
    """A keeper connection's name and TCP settings: keepalives and a user
    timeout make a dead network an error within a renewal period instead
    of a hang (libpq ignores them on Unix sockets)."""
    period_ms = int(ttl.total_seconds() * 1000 / 3)
    return dict(application_name=f"dsync keeper {name}"[:63], keepalives=1,
                keepalives_idle=max(1, period_ms // 1000), keepalives_interval=1,
                keepalives_count=3, tcp_user_timeout=max(1000, period_ms))
