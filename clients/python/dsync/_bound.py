"""A bound on every statement a client sends on its statement and wait
connections: past it, the connection is cut and the call fails with
DsyncConnectionError, as if the network had gone.

Nothing else bounds such a call.  A server process that is stopped
(SIGSTOP, a frozen VM, swapped out) keeps its socket open and the kernel
acknowledges what is sent, so TCP keepalives and tcp_user_timeout see a
healthy connection, and statement_timeout is the stopped process's own
to enforce.  The call would wait as long as the process stays stopped.

Cutting is shutdown(2) on the connection's socket: the thread (or task)
waiting for the answer then reads the end of the stream, libpq reports
the connection lost, and the connection is closed and replaced like any
broken one.  One thread per process watches the deadlines of the calls in
flight (a timer thread per call would cost more than the call); the
asyncio client uses its loop's timers (call_later) instead.
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from typing import Any, Dict, Optional, Set, Tuple

# Seconds a statement may go unanswered beyond the time it asked the
# server to wait (Client's call_timeout).  dsync's statements take
# milliseconds; the bound is for a server that stopped answering, and is
# wide enough for a slow commit (a synchronous standby far away).
CALL_TIMEOUT = 30.0
# The largest call_timeout: finite, and far below what a timed wait takes.
MAX_CALL_TIMEOUT = 1_000_000.0


def check_call_timeout(value: Optional[float]) -> Optional[float]:
    """call_timeout as given: seconds above zero, or None for no bound."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            not 0 < value <= MAX_CALL_TIMEOUT:
        raise ValueError(f"call_timeout must be a number of seconds above 0 and at most "
                         f"{MAX_CALL_TIMEOUT:g}, or None")
    return float(value)


def _cancel(cancel: Any) -> None:
    try:
        cancel.cancel()
    except Exception:           # the server may be unreachable: the cut stands
        pass


def sever(conn: Any) -> None:
    """Cancel conn's statement and shut down its socket under whoever is
    reading it.  The cancel (sent from a thread of its own: libpq's cancel
    blocks) reaches the server process when it runs again, so that it does
    not go on with a statement, a grant say, whose answer nobody reads.
    shutdown acts on the socket, not on the descriptor, so a duplicate
    serves and the connection's own descriptor is left for libpq to close."""
    try:
        cancel = conn.pgconn.get_cancel()
        threading.Thread(target=_cancel, args=(cancel,), daemon=True,
                         name="dsync cancel").start()
    except Exception:
        pass
    try:
        fd = os.dup(conn.pgconn.socket)
    except Exception:           # closed or never connected: nothing to cut
        return
    try:
        with socket.socket(fileno=fd) as sock:
            sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


class Bounds:
    """The deadlines of the thread client's calls in flight, and the
    thread that cuts the connection of a call past its deadline."""

    def __init__(self) -> None:
        self._reset()
        # A child forked while the lock was held must not inherit it held.
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self.cond = threading.Condition()
        self.calls: Dict[int, Tuple[float, Any]] = {}
        self.cut: Set[int] = set()
        self.wake_at = float("inf")
        self.thread: Optional[threading.Thread] = None
        self.last = 0

    def begin(self, conn: Any, seconds: float) -> int:
        """Watch a call on conn that must be answered within seconds; the
        key that end() takes."""
        deadline = time.monotonic() + seconds
        with self.cond:
            if self.thread is None:
                # First use, here or in a forked child (_reset: it has no
                # such thread).  The thread never ends.
                self.calls.clear()
                self.cut.clear()
                self.wake_at = float("inf")
                self.thread = threading.Thread(target=self._run, daemon=True,
                                               name="dsync call bounds")
                self.thread.start()
            self.last += 1
            self.calls[self.last] = (deadline, conn)
            if deadline < self.wake_at:
                self.cond.notify()
            return self.last

    def end(self, key: int) -> bool:
        """The call is over; whether its connection was cut."""
        with self.cond:
            self.calls.pop(key, None)
            if key in self.cut:
                self.cut.discard(key)
                return True
            return False

    def _run(self) -> None:
        with self.cond:
            while True:
                now = time.monotonic()
                for key in [k for k, (d, _) in self.calls.items() if d <= now]:
                    _, conn = self.calls.pop(key)
                    self.cut.add(key)
                    sever(conn)
                self.wake_at = min((d for d, _ in self.calls.values()), default=float("inf"))
                self.cond.wait(None if not self.calls else self.wake_at - now)


BOUNDS = Bounds()


class AsyncBound:
    """The bound of one asyncio call: a timer of its loop that cuts the
    call's connection."""

    __slots__ = ("conn", "cut", "handle")

    def __init__(self, conn: Any, seconds: float) -> None:
        self.conn = conn
        self.cut = False
        self.handle = asyncio.get_running_loop().call_later(seconds, self._fire)

    def _fire(self) -> None:
        self.cut = True
        sever(self.conn)

    def end(self) -> bool:
        """The call is over; whether its connection was cut."""
        self.handle.cancel()
        return self.cut
