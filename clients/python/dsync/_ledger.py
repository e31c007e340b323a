"""The bookkeeping of held leases, without any I/O, shared by the thread
client (client.py) and the asyncio client (aio_client.py).

A client's keeper keeps every lease the client holds with one connection:
it renews the due ones in one statement, LISTENs on all their channels,
and decides from what it hears whether a lease was lost.  The Ledger is
what it knows; the Hold is one lease held by one owner.  Owners is how a
lock object shared by threads or tasks gives each owner a holder name of
its own on the server.  The clients do the I/O and the locking around
these; nothing here blocks.

See clients/DESIGN.md for why the rules are what they are.
"""

from __future__ import annotations

import os
import time
import weakref
from collections import deque
from datetime import timedelta
from typing import Any, Callable, Deque, Dict, List, Optional, Set, Tuple

from . import _common as c
from ._sql import channel_of

# How many channels with no held lease stay LISTENed, so that a lock taken
# again and again is not LISTENed anew each time.  Not more: a listening
# backend compares every notification of its database with each channel.
IDLE_CHANNELS = 256
# A hold still unconfirmed is LISTENed for and confirmed this long after
# its grant: a section shorter than that costs the keeper nothing, and a
# burst of acquires shares one LISTEN and one renewal.
SETTLE = 0.02
# Releases and expiries kept on record per channel for marks taken before
# them (see Ledger.news): a burst of hand-offs longer than that between an
# acquirer's mark and its grant costs that hold a confirming renewal.  A
# waiter hears of one release per owner queued ahead of it: with 16 kept,
# 16 threads on one name (test/bench/wait_bench.py) had runs where the
# keeper spent 25 us of CPU per hand-off confirming grants, against 1.
NEWS_KEPT = 256
# A renewal that found a lease locked by a transaction (a guard, see
# dsync_assert_held) tries that lease again this much later, alone.
BLOCKED_RETRY = 0.25
# A kept hold this close to its watchdog deadline (half its renewal
# period, at least this much, never more than a whole period) is late for
# its renewal: the keeper's connection is gone or stuck.  The watchdog
# then renews it over one of the client's statement connections (a
# rescue) before it would have to give it up: a renewal whose reply was
# lost with the keeper's connection may well have committed, and the
# server still holds the lease.  A healthy hold never gets this close: the
# keeper confirms it every period.
RESCUE_LEAD = 1.0


# Why the watchdog, or a reader before it, gives a kept hold up.
OVERDUE = "no renewal could be confirmed before the lease could expire"
LAPSED = "its ttl ran out (keep_alive=False)"
# Why release() reports a loss nobody had heard of.
REFUSED = "the server no longer held it when it was released"


class Hold:
    """One lease held by one owner: what the keeper renews and watches,
    and what the owner's code reads (token, lost, lost_reason).

    confirmed is the time.monotonic() at which the last grant or renewal
    the server confirmed was sent: the lease lasts at least until
    confirmed + ttl, whatever the client's and the server's wall clocks
    say.  The watchdog declares the lease lost a margin before that."""

    __slots__ = ("lock", "name", "holder", "token", "ttl", "ttl_s", "channel", "keep_alive",
                 "confirmed", "lost", "lost_reason", "owner_alive", "owner_kind", "done",
                 "given_back", "retry_at", "on_overdue", "__weakref__")

    def __init__(self, lock: Any, name: str, holder: str, token: int, ttl: timedelta,
                 keep_alive: bool, granted: float, lost: Any,
                 owner_alive: Callable[[], bool], owner_kind: str):
        self.lock = lock
        self.name = name
        self.holder = holder
        self.token = token
        self.ttl = ttl
        self.ttl_s = ttl.total_seconds()
        self.channel = channel_of(name)
        self.keep_alive = keep_alive
        self.confirmed = granted
        self.lost = lost                # a threading.Event or an asyncio.Event
        self.lost_reason: Optional[str] = None
        self.owner_alive = owner_alive
        self.owner_kind = owner_kind    # "thread" or "task", for messages
        self.done = False               # released, or lost: nobody keeps it
        self.given_back = False         # the keeper releases it: its name is spent
        self.retry_at = 0.0             # not renewed before then (its row was locked)
        # Set by the keeper that watches it: declares it lost as the
        # watchdog would, for a reader that finds it past its deadline.
        self.on_overdue: Optional[Callable[["Hold"], None]] = None

    def __repr__(self) -> str:
        return f"<Hold {self.name!r} holder={self.holder!r} token={self.token}>"

    def set_ttl(self, ttl: timedelta, sent: float) -> None:
        """The lease was renewed for ttl by a statement sent at sent: it
        is kept with that ttl from now on."""
        self.ttl = ttl
        self.ttl_s = ttl.total_seconds()
        self.confirmed = sent

    @property
    def period(self) -> float:
        return self.ttl_s / 3

    @property
    def deadline(self) -> float:
        """When the watchdog declares the lease lost unless renewed: a
        margin before it could expire, so the holder stops before anyone
        else can be granted it."""
        return self.confirmed + self.ttl_s - min(1.0, self.ttl_s / 10)

    def declare_lost(self, reason: str) -> bool:
        """Mark the hold lost; True for the first report only."""
        if self.done:
            return False
        self.done = True
        self.lost_reason = reason
        self.lost.set()
        return True

    def refused_at_release(self) -> bool:
        """release() found the lease gone on the server although the hold
        looked live (revoked, or expired while a notice of it was on its
        way): a loss its owner must hear of.  True if nobody reported it
        before (the keeper's reports stop at done, which release() sets)."""
        if self.lost_reason is not None:
            return False
        self.lost_reason = REFUSED
        self.lost.set()
        return True

    def live(self) -> bool:
        """Whether the hold may still be relied on: not lost, and not past
        its deadline on the monotonic clock.  A process stopped past the
        deadline (SIGSTOP, a blocked event loop) reads False the moment it
        runs again, before the watchdog has had its turn; the hold is then
        declared lost as the watchdog would declare it."""
        if self.done:
            return False
        if time.monotonic() < self.deadline:
            return True
        if self.on_overdue is not None:
            self.on_overdue(self)
        return False

    def check(self) -> None:
        """Raise LockLost if the lease was lost while held, or may have
        expired (past its deadline with no renewal confirmed)."""
        from .errors import LockLost
        live = self.live()
        if self.lost_reason is not None:
            raise LockLost(f'lease "{self.name}" of holder "{self.holder}" was lost: '
                           f"{self.lost_reason}")
        if not live and not self.done:
            raise LockLost(f'lease "{self.name}" of holder "{self.holder}" was lost: '
                           f"{OVERDUE}")


Mark = Optional[Tuple[int, int, int]]


class Ledger:
    """What a keeper knows: the holds it keeps, the channels its current
    connection LISTENs on, and which holds it must confirm with the server
    before it may trust its silence about them."""

    def __init__(self) -> None:
        self.holds: Set[Hold] = set()           # kept alive: renewed and watched
        self.by_channel: Dict[str, Set[Hold]] = {}
        # channel -> the LISTEN's number, on the current connection.
        self.listening: Dict[str, int] = {}
        self.listens = 0
        # Notifications heard per channel, so that one heard between an
        # acquirer's mark and its hold's arrival is not lost on it; and
        # the last releases and expiries among them (count, event, from a
        # known sender), so that a hold granted meanwhile is taken as
        # confirmed when none of them can be about it.  Under contention
        # every hand-off is heard on the channel: without the record each
        # grant would cost the keeper a wake-up and a renewal.
        self.heard: Dict[str, int] = {}
        self.news: Dict[str, Deque[Tuple[int, Any, bool]]] = {}
        self.news_evicted: Dict[str, int] = {}  # the count of the last one dropped
        self.generation = 0                     # the keeper's connections so far
        self.connected = False
        self.listen_ok = True                   # False behind a transaction pooler
        self.unverified: Set[Hold] = set()
        self.senders: Set[int] = set()
        self.releases: List[Tuple[str, str]] = []   # given up: release when we can

    # -- what acquirers do -------------------------------------------------

    def mark(self, channel: str) -> Mark:
        """Taken before an acquire's statement: if the channel is LISTENed
        now and stays so, every loss after the grant will be heard."""
        if not self.connected or channel not in self.listening:
            return None
        return (self.generation, self.listening[channel], self.heard.get(channel, 0))

    def add(self, hold: Hold, mark: Mark) -> None:
        """Keep hold.  Unless the mark shows that its channel was LISTENed
        before the grant and nothing was heard on it since, its first
        renewal comes at once and confirms it (a loss in between would
        otherwise go unheard)."""
        self.holds.add(hold)
        self.by_channel.setdefault(hold.channel, set()).add(hold)
        if self.connected and not self.listen_ok:
            return                  # nothing to hear: renewals alone tell
        if not self.heard_nothing_of(hold, mark):
            self.unverified.add(hold)

    def heard_nothing_of(self, hold: Hold, mark: Mark) -> bool:
        """Whether hold's channel was LISTENed on this connection from its
        mark on, and nothing heard since can be about hold: no release or
        expiry of its name and holder but those of another token, from
        dsync's sender (judge() would call them no news)."""
        if mark is None:
            return False
        now = self.mark(hold.channel)
        if now is None or now[:2] != mark[:2]:
            return False
        if now[2] == mark[2]:
            return True
        if self.news_evicted.get(hold.channel, 0) > mark[2]:
            return False                # one of them is no longer on record
        for n, ev, trusted in reversed(self.news.get(hold.channel, ())):
            if n <= mark[2]:
                break                   # the rest came before the mark
            if ev.name == hold.name and ev.holder == hold.holder and \
                    not (trusted and ev.fencing is not None and ev.fencing != hold.token):
                return False
        return True

    def remove(self, hold: Hold) -> None:
        self.holds.discard(hold)
        self.unverified.discard(hold)
        peers = self.by_channel.get(hold.channel)
        if peers is not None:
            peers.discard(hold)
            if not peers:
                del self.by_channel[hold.channel]

    # -- the keeper's connection -------------------------------------------

    def connected_anew(self, listen_ok: bool, senders: Set[int]) -> None:
        """A new keeper connection: nothing is LISTENed on it yet, and
        whatever happened while there was none must be asked about."""
        self.generation += 1
        self.connected = True
        self.listen_ok = listen_ok
        self.senders = senders
        self.listening.clear()
        self.unverified = set(self.holds)
        self.forget_heard()

    def disconnected(self) -> None:
        self.connected = False
        self.listening.clear()
        self.forget_heard()

    def forget_heard(self, channels: Optional[List[str]] = None) -> None:
        """Drop what was heard (on channels, or on all): marks taken
        before no longer match."""
        for record in (self.heard, self.news, self.news_evicted):
            if channels is None:
                record.clear()
            else:
                for ch in channels:
                    record.pop(ch, None)

    def settled(self, hold: Hold, now: float) -> bool:
        return now >= hold.confirmed + SETTLE

    def to_listen(self, now: float) -> List[str]:
        """Channels to LISTEN on now: those of settled holds not yet
        LISTENed (a hold whose channel is LISTENed since before its grant
        needs nothing)."""
        if not self.listen_ok:
            return []
        return list({h.channel for h in self.unverified
                     if h.channel not in self.listening and self.settled(h, now)})

    def listened(self, channels: List[str]) -> None:
        for ch in channels:
            self.listens += 1
            self.listening[ch] = self.listens

    def to_unlisten(self) -> List[str]:
        """Channels no held lease needs, beyond the IDLE_CHANNELS most
        recently LISTENed."""
        idle = [ch for ch in self.listening if ch not in self.by_channel]
        if len(idle) <= IDLE_CHANNELS:
            return []
        idle.sort(key=lambda ch: self.listening[ch])
        return idle[:len(idle) - IDLE_CHANNELS]

    def unlistened(self, channels: List[str]) -> None:
        """Channels about to be UNLISTENed: forgotten before the statement
        runs, so that a hold added meanwhile has no mark that matches and
        gets its channel LISTENed again."""
        for ch in channels:
            self.listening.pop(ch, None)
        self.forget_heard(channels)

    # -- renewals ----------------------------------------------------------

    def due(self, now: float) -> List[Hold]:
        """The holds to renew in this tick: none unless one is due (a third
        of its ttl since its last confirmation) or must be confirmed; then
        also every hold at least half-way to due, so that holds taken at
        about the same time share their renewals."""
        ready = [h for h in self.unverified if self.settled(h, now) and now >= h.retry_at and
                 (not self.listen_ok or h.channel in self.listening)]
        if not ready and not any(now >= h.confirmed + h.period and now >= h.retry_at
                                 for h in self.holds):
            return []
        batch = set(ready)
        batch.update(h for h in self.holds
                     if now >= h.confirmed + h.period / 2 and now >= h.retry_at)
        return sorted(batch, key=lambda h: h.confirmed)

    def blocked(self, holds: List[Hold], now: float) -> None:
        """Renewals that found the lease's row locked by a transaction (the
        holder's own guard, say): try them again a little later."""
        for hold in holds:
            hold.retry_at = now + BLOCKED_RETRY

    def renewed(self, batch: List[Hold], expiries: List[Any], sent: float) -> List[Hold]:
        """Record a renewal's answers; the holds it found gone."""
        gone = []
        for hold, expiry in zip(batch, expiries):
            self.unverified.discard(hold)
            if expiry is None:
                gone.append(hold)
            else:
                hold.confirmed = max(hold.confirmed, sent)
        return gone

    def next_wake(self, now: float) -> Optional[float]:
        """Seconds until the keeper has something to do (None: nothing
        held)."""
        if not self.holds:
            return None
        soonest = min(max(h.confirmed + h.period, h.retry_at) for h in self.holds)
        if self.unverified:
            soonest = min(soonest, min(max(h.confirmed + SETTLE, h.retry_at)
                                       for h in self.unverified))
        return max(0.0, soonest - now)

    # -- notifications -----------------------------------------------------

    def judge(self, channel: str, payload: str, pid: int) -> Tuple[List[Hold], bool]:
        """What a notification says about the holds kept: those it proves
        lost (dsync's own release or expiry of the very token held), and
        whether to confirm the others it names with the server at once
        (anything else about them: a forged NOTIFY, a sender not yet
        known, a token that cannot be read).  The release of an earlier
        hold of the same holder (another token, from dsync's sender) is
        no news."""
        # Counted and kept for LISTENed channels only (no mark is taken on
        # another), so the record goes with the channels.
        listened = channel in self.listening
        count = self.heard.get(channel, 0) + 1
        if listened:
            self.heard[channel] = count
        ev = c.parse_payload(channel, payload)
        if ev is None or ev.kind not in ("released", "expired"):
            return [], False
        trusted = pid in self.senders
        if listened:
            news = self.news.setdefault(channel, deque())
            if len(news) == NEWS_KEPT:
                self.news_evicted[channel] = news.popleft()[0]
            news.append((count, ev, trusted))
        holds = self.by_channel.get(channel)
        if not holds:
            return [], False
        lost, suspect = [], False
        for hold in holds:
            if ev.name != hold.name or ev.holder != hold.holder:
                continue
            if trusted and ev.fencing == hold.token:
                lost.append(hold)
            elif trusted and ev.fencing is not None:
                continue
            else:
                self.unverified.add(hold)
                suspect = True
        return lost, suspect

    # -- the watchdog --------------------------------------------------------

    def overdue(self, holds: Set[Hold], now: float) -> List[Hold]:
        return [h for h in holds if not h.done and now >= h.deadline]

    @staticmethod
    def renewal_args(batch: List[Hold]) -> Tuple[List[str], List[str], List[timedelta]]:
        """RENEW_MANY's arrays for batch: names, holders, ttls."""
        return [h.name for h in batch], [h.holder for h in batch], [h.ttl for h in batch]

    @staticmethod
    def rescue_point(hold: Hold) -> float:
        """When the watchdog renews hold itself unless the keeper did."""
        return hold.deadline - min(hold.period, max(RESCUE_LEAD, hold.period / 2))

    def to_rescue(self, holds: Set[Hold], now: float) -> List[Hold]:
        """Kept holds past their rescue point, not yet overdue, and not
        tried again too soon (see RESCUE_LEAD); with them, the kept holds
        that will be past it within half a period, so that holds taken
        together are rescued in one statement."""
        live = [h for h in holds if h.keep_alive and not h.done and h in self.holds and
                now < h.deadline and now >= h.retry_at]
        if not any(self.rescue_point(h) <= now for h in live):
            return []
        return [h for h in live if self.rescue_point(h) - h.period / 2 <= now]

    def watch_wake(self, holds: Set[Hold], now: float) -> Optional[float]:
        """When the watchdog has something to do next: a kept hold's
        rescue point (its deadline once that has passed), or a deadline."""
        times = [h.deadline if not h.keep_alive or now >= self.rescue_point(h)
                 else self.rescue_point(h) for h in holds]
        return min(times, default=None)

    def orphans(self) -> List[Hold]:
        """Holds whose owner (a thread or a task) ended without releasing."""
        return [h for h in self.holds if not h.owner_alive()]


class OwnerState:
    """One owner's use of one lock object: the holder name it has on the
    server, how many times it acquired (n acquires need n releases), and
    its current hold."""

    __slots__ = ("holder", "count", "hold", "lost", "__weakref__")

    def __init__(self, lost: Any):
        self.holder: Optional[str] = None
        self.count = 0
        self.hold: Optional[Hold] = None
        self.lost = lost                # the owner's lost flag, the same across holds


class Owners:
    """The owners of one lock object (threads or tasks), each with a
    holder name of its own: the object's holder for the first one, then
    holder#2, holder#3... for owners holding at the same time, so that the
    server's reentrancy (same holder, same lease) never merges two owners.
    A name is used again only once the server confirmed its release."""

    def __init__(self, base: Optional[str], make_flag: Callable[[], Any]):
        """base: the object's holder; None: a default one (c.default_holder:
        host, pid, random), made anew in a forked child."""
        self.given = base
        self.make_flag = make_flag
        self._reset()

    def _reset(self) -> None:
        self.pid = os.getpid()
        self.base = self.given if self.given is not None else c.default_holder()
        self.states: "weakref.WeakKeyDictionary[Any, OwnerState]" = weakref.WeakKeyDictionary()
        self.in_use: Set[str] = set()

    def _forked(self) -> None:
        """In a forked child nothing of the parent's is held: the parent
        holds it.  Forget its owners, and give the object a holder of the
        child's own (unless one was given), or the child would be merged
        with the parent on the server."""
        if os.getpid() != self.pid:
            self._reset()

    def get(self, owner: Any) -> Optional[OwnerState]:
        self._forked()
        return self.states.get(owner)

    def state(self, owner: Any) -> OwnerState:
        self._forked()
        st = self.states.get(owner)
        if st is None:
            st = OwnerState(self.make_flag())
            self.states[owner] = st
        return st

    def take_name(self, st: OwnerState) -> str:
        if st.holder is None:
            k = 1
            name = self.base
            while name in self.in_use:
                k += 1
                name = f"{self.base}#{k}"
            if len(name.encode("utf-8")) > 255:
                raise ValueError("holder is too long to give each owner a name of its own"
                                 " (at most 250 bytes)")
            self.in_use.add(name)
            st.holder = name
        return st.holder

    def free_name(self, st: OwnerState) -> None:
        """The server confirmed the release of the owner's name: another
        owner may have it."""
        if st.holder is not None and st.count == 0:
            self.in_use.discard(st.holder)
            st.holder = None

    def retire_name(self, st: OwnerState) -> None:
        """The name may still hold a lease on the server (its release is
        left to the keeper): never give it to anyone again."""
        st.holder = None

    def holding(self) -> List[OwnerState]:
        self._forked()
        return [st for st in list(self.states.values()) if st.count > 0]
