"""What lock objects and elections tell their caller without a statement,
shared by the thread objects (sync.py) and the asyncio ones (aio.py): each
side says who the caller is (_owned_state, _elected, running), the rest
reads the hold."""

from __future__ import annotations

from typing import Any, Optional

from . import errors
from ._ledger import Hold


class HoldViews:
    """The calling owner's view of its own hold of a lock object."""

    _owner_word = "thread"

    def _owned_state(self) -> Any:
        raise NotImplementedError

    @property
    def held(self) -> bool:
        """Whether the caller holds the lease, as far as the client knows
        (no statement)."""
        st = self._owned_state()
        return st is not None and st.hold is not None and not st.hold.done

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
        return self._lock.holder

    @property
    def is_leader(self) -> bool:
        """Leading now: elected, and the term's lease not known lost (read
        from the hold itself, so it is false at once, before any callback
        has run)."""
        hold = self._hold
        return self._elected() and hold is not None and not hold.done

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
