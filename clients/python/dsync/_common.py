"""What the thread and asyncio halves of the library share: argument
checks, default holders, connection settings, and typed events."""

from __future__ import annotations

import json
import os
import secrets
import select
import socket
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Dict, Mapping, Optional, Sequence, Union

from psycopg.types.json import Jsonb

Seconds = Union[int, float, timedelta]

# The longest a blocking acquire waits inside the server in one statement.
# Waiting in slices lets the server's cleanup horizon (the statement's
# snapshot) move on, and lets the client notice a timeout or a stop.
WAIT_SLICE = timedelta(seconds=5)
ZERO = timedelta(0)

# Connection settings that work through PgBouncer in transaction mode:
# no server-side prepared statements, every statement its own transaction.
POOLER_SAFE = {"autocommit": True, "prepare_threshold": None}

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
    """A lease, holder, group or event name, checked as the server would
    (non-empty, at most 255 bytes) so the mistake is caught here."""
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")
    if value == "":
        raise ValueError(f"{what} must not be empty")
    if len(value.encode("utf-8")) > 255:
        raise ValueError(f"{what} must be at most 255 bytes")
    return value


def default_holder() -> str:
    """host:pid:random, unique per object, readable in dsync_leases."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


# Seconds libpq may take to connect, unless the caller's settings say (a
# connect_timeout keyword, in the conninfo string, or PGCONNECT_TIMEOUT).
# libpq's own default is to wait for ever: a keeper blocked in connect for
# a whole outage renews nothing and reports nothing.  Well under a usual
# ttl, and above libpq's floor of 2 s.
CONNECT_TIMEOUT = 5


def pool_settings(kwargs: Mapping[str, Any], conninfo: Optional[str] = None) -> dict:
    """Connection keyword arguments with the pooler-safe defaults and,
    unless the caller set one, dsync's connect timeout."""
    merged = dict(POOLER_SAFE)
    merged.update(kwargs)
    if "connect_timeout" not in merged and not os.environ.get("PGCONNECT_TIMEOUT"):
        given = {}
        if conninfo:
            from psycopg.conninfo import conninfo_to_dict
            given = conninfo_to_dict(conninfo)
        if "connect_timeout" not in given:
            merged["connect_timeout"] = CONNECT_TIMEOUT
    return merged


def still_open(conn: Any) -> bool:
    """Whether a connection kept idle between uses can serve the next
    statement.  A server that went away meanwhile (a failover, a restart)
    has left an error and the end of the stream to read, and the statement
    would fail for it.  What there is to read is read: the end of the
    stream makes libpq fail (the connection is gone); notifications of a
    listening connection are dropped, as its next owner asks for the state
    anyway."""
    # Few calls into libpq: each lets go of the GIL, and under contention
    # taking it back costs a context switch (test/bench/wait_bench.py).
    try:
        poller = select.poll()              # select() fails on descriptors >= 1024
        poller.register(conn.fileno(), select.POLLIN)   # raises if closed
        if not poller.poll(0):
            return True                     # nothing came: as it was left
        pg = conn.pgconn
        for _ in range(8):                  # an error message, then the end
            pg.consume_input()
            while pg.notifies() is not None:
                pass
            if not poller.poll(0):
                break
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
    try:
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
    except (TypeError, ValueError, AttributeError):
        return None             # a payload anyone could NOTIFY: not dsync's


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
        self.top: dict = {}                # name -> highest token the state showed
        self.held: set = set()             # (name, holder, token) the state showed

    def saw_state(self, rows: Sequence[Sequence[Any]]) -> None:
        """Notes the state rows (SQL_LEASE_STATE) given to the caller.

        dsync's worker logs and sends an event after the commit that made
        it, so a watch can read a state that already shows a grant whose
        "acquired" event comes after it.  Tokens of a name only grow, so an
        event with a token no higher than the state's is older than the
        state: skipped, unless it ends a hold the state showed."""
        self.top, self.held = {}, set()
        for name, holder, token, *_ in rows:
            self.top[name] = max(int(token), self.top.get(name, 0))
            self.held.add((name, holder, int(token)))

    def _before_state(self, ev: LeaseEvent) -> bool:
        top = self.top.get(ev.name)
        if top is None or ev.fencing is None or ev.fencing > top:
            return False
        if ev.kind == "acquired":
            return True
        return ev.kind in ("released", "expired") and \
            (ev.name, ev.holder, ev.fencing) not in self.held

    def fresh(self, ev: LeaseEvent) -> bool:
        """Whether ev is new to the caller; notes its seq if so."""
        if ev.seq is not None and self.last is not None:
            if ev.seq <= self.last:
                return False
            self.last = ev.seq
        return not self._before_state(ev)

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


class Contention:
    """Names a blocking acquire of this client found taken lately.  The
    next blocking acquire of such a name goes straight to a wait inside
    the server instead of trying first on the statement pool: under
    contention the try nearly always fails, and it cost a statement (a
    round trip, a server parse and plan) per acquire, a third of what a
    hand-off took (test/bench/wait_bench.py)."""

    # How long a name counts as contended after a try found it taken: a
    # name contended for good pays one try per that many seconds.
    LASTS = 1.0
    # Names remembered at most (forgotten all at once beyond it).
    KEPT = 1024

    def __init__(self) -> None:
        self.until: Dict[str, float] = {}

    def wait_at_once(self, name: str, blocking: bool, deadline: Optional[float],
                     now: float) -> bool:
        """Whether a blocking acquire of name should skip the try."""
        return (blocking and self.until.get(name, 0.0) > now
                and next_wait(True, deadline, now) > ZERO)

    def found_taken(self, name: str, now: float) -> None:
        if len(self.until) >= self.KEPT:
            self.until.clear()
        self.until[name] = now + self.LASTS


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


# The keeper's connection: keepalives and a user timeout make a dead
# network an error within seconds instead of a hang (libpq ignores them on
# Unix sockets); the watchdog covers the time until then.
KEEPER_SETTINGS = dict(keepalives=1, keepalives_idle=2, keepalives_interval=1,
                       keepalives_count=3, tcp_user_timeout=5000)


class ConnectionSettings:
    """Where a client's connections come from: a conninfo string or a
    psycopg_pool pool, with the pooler-safe defaults and the caller's
    keyword arguments."""

    def __init__(self, conninfo: Optional[str], pool: Any, kwargs: Mapping[str, Any]):
        if (conninfo is None) == (pool is None):
            raise TypeError("give exactly one of conninfo and pool")
        if conninfo is not None and not isinstance(conninfo, str):
            raise TypeError(f"conninfo must be a str, not {type(conninfo).__name__}")
        self.pool = pool
        self.conninfo = conninfo if conninfo is not None else pool.conninfo
        given = dict(kwargs)
        if pool is not None:
            # The keeper's own connection takes the pool's settings too
            # (but the pooler-safe ones), its connect timeout included.
            for k, v in (getattr(pool, "kwargs", None) or {}).items():
                if k not in POOLER_SAFE:
                    given.setdefault(k, v)
        self.kwargs = pool_settings(given, self.conninfo)

    def connect_kwargs(self, extra: Mapping[str, Any], keeper: bool = False) -> dict:
        """The caller's settings over extra, named in pg_stat_activity as
        the caller's application_name (default "dsync"), with " keeper"
        after it for the keeper's connection."""
        kwargs = dict(extra)
        kwargs.update(self.kwargs)
        name = kwargs.get("application_name") or "dsync"
        kwargs["application_name"] = f"{name} keeper"[:63] if keeper else name
        return kwargs

    @staticmethod
    def key(conninfo: Optional[str], pool: Any, kwargs: Mapping[str, Any]) -> tuple:
        """What identifies a shared default client: the pool itself, or the
        conninfo string with the keyword arguments."""
        if pool is not None:
            return ("pool", id(pool))
        return ("conninfo", conninfo, tuple(sorted((k, repr(v)) for k, v in kwargs.items())))


# A campaign's pause after a failed attempt: from CAMPAIGN_RETRY_FIRST,
# doubled per failure in a row, never more than a third of the ttl (a
# member must be back in the race before a dead leader's lease ends) nor
# CAMPAIGN_RETRY_MAX, with jitter so that members do not retry in step.
CAMPAIGN_RETRY_FIRST = 0.1
CAMPAIGN_RETRY_MAX = 2.0


def campaign_pause(failures: int, ttl_s: float) -> float:
    """Seconds to pause after failures attempts failed in a row."""
    cap = min(ttl_s / 3, CAMPAIGN_RETRY_MAX)
    pause = min(cap, CAMPAIGN_RETRY_FIRST * 2 ** min(failures - 1, 16))
    return pause * (0.5 + secrets.randbelow(1000) / 2000)


def campaign_failed(group: str, exc: BaseException, pause: float) -> None:
    """Log a campaign attempt that failed and will be retried: one line
    for dsync's own errors, a traceback for anything else (a bug, or an
    on_leader that raised)."""
    import logging
    from .errors import DsyncError
    logging.getLogger("dsync").warning(
        'dsync: campaign for group "%s" failed (%s: %s); retrying in %.2f s',
        group, type(exc).__name__, exc, pause, exc_info=not isinstance(exc, DsyncError))


# The keeper's pause after a failed round: KEEPER_RETRY_FIRST, doubled per
# failure in a row, at most KEEPER_RETRY_MAX (a keeper that stays away
# longer leaves its leases to the watchdog's rescue renewals, which use the
# statement connections, and then to its deadline).  A wake-up (an acquire
# waiting for the keeper's connection) ends the pause, but never before it
# has lasted KEEPER_RETRY_FIRST: see KeeperPause.
KEEPER_RETRY_FIRST = 0.5
KEEPER_RETRY_MAX = 2.0


class KeeperPause:
    """The keeper's pause after a failed round, begun at now for seconds.
    A wake-up ends it, but not before KEEPER_RETRY_FIRST has passed since
    it began: one earlier shortens it to that, so that callers retrying in
    a loop while the keeper cannot connect make it try at most once per
    KEEPER_RETRY_FIRST, not once per call."""

    __slots__ = ("end", "earliest")

    def __init__(self, seconds: float, now: float):
        self.end = now + seconds
        self.earliest = now + min(seconds, KEEPER_RETRY_FIRST)

    def left(self, now: float) -> float:
        """Seconds still to wait (0 or less: over)."""
        return self.end - now

    def woken(self, now: float) -> bool:
        """A wake-up at now: whether the pause ends now (else it ends at
        its earliest)."""
        if now >= self.earliest:
            return True
        self.end = min(self.end, self.earliest)
        return False


class KeeperFailures:
    """What the keeper (thread or task) says about its failed rounds: one
    log line per distinct failure, not one per round (a database without
    the extension fails every round, for as long as nobody creates it),
    and the pause before the next round."""

    def __init__(self, log: Any):
        """log: the logger to say failures on (the "dsync" logger)."""
        self.log = log
        self.in_a_row = 0
        self.last: Optional[tuple] = None

    def failed(self, err: BaseException, cause: BaseException) -> float:
        """Note a failed round (err: the failure as the library's
        exception, cause: what was raised) and return the pause."""
        import logging
        from .errors import DsyncConnectionError, DsyncError
        self.in_a_row += 1
        # A connection lost once (a server restart, a killed backend) is
        # routine and mended by the next round: info.  Lost again at once,
        # or any other failure, is a warning.
        gone = isinstance(err, DsyncConnectionError) or isinstance(cause, OSError)
        level = logging.INFO if gone and self.in_a_row == 1 else logging.WARNING
        key = (type(err), str(err), level)
        if key != self.last:
            self.last = key
            # A traceback only for what neither the server nor the network
            # explains (a bug), and only once.
            bug = not isinstance(err, DsyncError) and not gone
            self.log.log(level, "dsync: the keeper failed (%s: %s); it retries every %.1f s "
                         "at most, and says so again only if the failure changes",
                         type(err).__name__, str(err).replace("\n", "; "),
                         KEEPER_RETRY_MAX, exc_info=cause if bug else None)
        return self.pause()

    def pause(self) -> float:
        """Seconds to wait after in_a_row failed rounds."""
        return min(KEEPER_RETRY_MAX, KEEPER_RETRY_FIRST * 2 ** min(self.in_a_row - 1, 16))

    def succeeded(self) -> None:
        """A round went through: a failure after it is news again."""
        if self.last is not None:
            self.log.info("dsync: the keeper works again after %d failed round(s)", self.in_a_row)
        self.in_a_row = 0
        self.last = None
