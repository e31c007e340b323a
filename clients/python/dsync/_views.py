"""What lock objects and elections tell their caller without a statement,
shared by the thread objects (sync.py) and the asyncio ones (aio.py): each
side says who the caller is (_owned_state, _elected, running), the rest
reads the hold."""

from __future__ import annotations

from typing import Any, Callable, Optional

from . import _common as c
from . import errors
from ._ledger import Hold, Owners


class OnClient:
    """An object that runs on a client: the one given, or the default
    client for its connection settings, looked up at each use, so that an
    object made before a fork works in the child on the child's own, and
    an asyncio object made at import time works in whichever loop uses
    it.  Each side names its default_client."""

    _default_client: Callable[..., Any]

    def _use(self, client: Any, conninfo: Optional[str], pool: Any,
             listen: Optional[bool], connect_kwargs: dict) -> None:
        if client is not None:
            if conninfo is not None or pool is not None or connect_kwargs or listen is not None:
                raise TypeError("give either client or connection settings, not both")
        elif conninfo is None and pool is None:
            raise TypeError("give one of client, conninfo and pool")
        else:
            c.ConnectionSettings(conninfo, pool, connect_kwargs)      # checked now
        self._client = client
        self._client_args = (conninfo, pool, listen, connect_kwargs)

    @property
    def client(self) -> Any:
        if self._client is not None:
            return self._client
        return type(self)._default_client(*self._client_args)


def guarded_names(lock: Any) -> "tuple[str, str]":
    """The lease and the holder name a guard asks the server about: for a
    lock object the calling owner's own (holder#2 for a second owner of a
    shared one), for a Hold handed over by its owner the Hold's."""
    if isinstance(lock, HoldViews):
        return lock.name, lock._guard_holder()
    if isinstance(lock, Hold):
        return lock.name, lock.holder
    raise TypeError(f"guard() takes a dsync Lock, ReadLock, Semaphore or Hold, not "
                    f"{type(lock).__name__}")


class HoldViews:
    """The calling owner's view of its own hold of a lock object."""

    _owner_word = "thread"

    def _owned_state(self) -> Any:
        raise NotImplementedError

    def _guard_holder(self) -> str:
        """The calling owner's holder name, for a guard.  An owner holding
        nothing is refused here, before any statement: asked under the
        object's own name, the server would answer for whichever owner
        holds under it, and a thread that never took the lock would get
        that owner's token and think its writes guarded."""
        st = self._owned_state()
        if st is None or st.holder is None:
            raise errors.NotHeld(f"{self!r} is not held by this {self._owner_word}")
        return st.holder

    @property
    def held(self) -> bool:
        """Whether the caller holds the lease, as far as the client knows
        (no statement): never a hold past its deadline (see Hold.live)."""
        st = self._owned_state()
        return st is not None and st.hold is not None and st.hold.live()

    @property
    def hold(self) -> Optional[Hold]:
        """The caller's hold (token, lost, lost_reason, check()), to hand to
        another thread or task that watches it; None if it holds nothing."""
        st = self._owned_state()
        return st.hold if st is not None else None

    @property
    def token(self) -> Optional[int]:
        """The caller's fencing token, None if it does not hold."""
        st = self._owned_state()
        return st.hold.token if st is not None and st.hold is not None else None

    @property
    def lost_reason(self) -> Optional[str]:
        st = self._owned_state()
        return st.hold.lost_reason if st is not None and st.hold is not None else None

    def check(self) -> None:
        """Raise LockLost if the caller's hold was lost, NotHeld if it holds
        nothing."""
        st = self._owned_state()
        if st is None or st.hold is None:
            raise errors.NotHeld(f"{self!r} is not held by this {self._owner_word}")
        st.hold.check()


class ElectionViews:
    """An election's properties: what its campaign last saw, never a
    statement, never a wait."""

    _lock: Any
    _hold: Optional[Hold]
    _seen_leader: Optional[str]
    _seen_at: Optional[float]
    _token: Optional[int]
    group: str

    def _elected(self) -> bool:
        raise NotImplementedError

    @property
    def running(self) -> bool:
        raise NotImplementedError

    @property
    def member(self) -> str:
        """This candidate's member name: its lock's own holder name."""
        return self._lock._owners.base

    @property
    def is_leader(self) -> bool:
        """Leading now: elected, and the term's lease neither known lost nor
        past its deadline (read from the hold itself, so it is false at
        once, before any callback has run, and after a pause past the
        ttl)."""
        hold = self._hold
        return self._elected() and hold is not None and hold.live()

    @property
    def leader_exists(self) -> bool:
        """Whether some member leads, as the campaign last saw it."""
        return self.is_leader or self._seen_leader is not None

    @property
    def token(self) -> Optional[int]:
        return self._token if self.is_leader else None

    @property
    def status(self) -> dict:
        """This node's view (mongoelector's node_status): group, member,
        running, is_leader, leader, leader_exists, token, and seen_at (the
        time.monotonic() of the campaign's last look)."""
        leading = self.is_leader
        leader = self.member if leading else self._seen_leader
        return dict(group=self.group, member=self.member, running=self.running,
                    is_leader=leading, leader=leader, leader_exists=leader is not None,
                    token=self.token, seen_at=self._seen_at)


class LeaseObject(OnClient, HoldViews):
    """The settings of a lock object, checked once for the thread and the
    asyncio side (see dsync.Lock for what each means)."""

    def _settle(self, name: str, client: Any, conninfo: Optional[str], pool: Any, ttl: Any,
                holder: Optional[str], info: Any, on_lost: Any, keep_alive: bool, timeout: Any,
                listen: Optional[bool], connect_kwargs: dict, make_flag: Callable[[], Any]) -> None:
        self.name = c.name_arg(name, "name")
        self.ttl = c.positive(ttl, "ttl")
        given = c.name_arg(holder, "holder") if holder is not None else None
        self.info = c.jsonb(info)
        self.on_lost = on_lost
        self.keep_alive = bool(keep_alive)
        self.timeout = c.interval(timeout, "timeout")
        self._use(client, conninfo, pool, listen, connect_kwargs)
        self._owners = Owners(given, make_flag)
        self.raise_on_failure = False

    def _not_had(self, blocking: bool, timeout: Any) -> bool:
        """What an acquire that did not get the lease answers: False, or,
        for an object made with raise_on_failure=True, LockExists (no
        wait) or AcquireTimeout (a wait that ran out)."""
        if not self.raise_on_failure:
            return False
        if not blocking:
            raise errors.LockExists(f'lease "{self.name}" is held by another holder')
        raise errors.AcquireTimeout(f'lease "{self.name}" could not be acquired within {timeout} s')

    @property
    def holder(self) -> str:
        """The holder name on the server of the calling thread's (or
        task's) hold, if it holds; else the object's own, which its first
        owner holds under (host:pid:random unless given; a forked child
        gets one of its own).  An owner holding while another does has a
        name of its own (holder#2, ...): this answers that name, so that
        SQL written with lock.holder (dsync_assert_held) guards the
        caller's own hold."""
        st = self._owned_state()
        if st is not None and st.holder is not None:
            return st.holder
        return self._owners.base
