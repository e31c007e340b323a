"""Clients killed mid-call with SIGKILL (not pg_terminate_backend), as
processes die in production: directly and through PgBouncer."""

import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import wait_for
from dsync import Lock

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "worker.py")


def _start(*args):
    p = subprocess.Popen([sys.executable, "-u", WORKER, *args], stdout=subprocess.PIPE, text=True)
    p.stdout.readline()                     # "held" / "waiting"
    return p


def _waiters(admin, name):
    return admin.execute("SELECT count(*) FROM dsync_waiters WHERE name = %s",
                         (name,)).fetchone()[0]


@pytest.mark.parametrize("mode", ["backend", "queue"])
def test_killed_waiter_leaves_the_queue(dsn, admin, name, mode):
    """A waiter killed in a backend leaves the line at once (its backend
    sees the client go); one queued without a connection leaves it once
    its place, no longer renewed, lapses (its ttl, 2 s here)."""
    holder = Lock(name, conninfo=dsn, ttl=30)
    assert holder.acquire()
    victim = _start("block", dsn, name, mode, "2" if mode == "queue" else "30")
    assert wait_for(lambda: _waiters(admin, name) == 1, 10)
    t0 = time.monotonic()
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    assert wait_for(lambda: _waiters(admin, name) == 0, 10, 0.005)
    print(f"\nwaiter gone from dsync_waiters {(time.monotonic() - t0) * 1000:.0f} ms after SIGKILL")
    # The next live waiter, not the dead one, gets the lease at release.
    nxt = Lock(name, conninfo=dsn, ttl=30)
    holder.release()
    assert nxt.acquire(timeout=5)
    nxt.release()
    holder.close()
    nxt.close()


def test_killed_holder_lease_passes_on_at_expiry(dsn, admin, name):
    ttl = 2
    victim = _start("hold", dsn, name, str(ttl))
    expires = admin.execute("SELECT expires_at FROM dsync_leases WHERE lease = %s",
                            (name,)).fetchone()[0]
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    nxt = Lock(name, conninfo=dsn, ttl=30)
    assert nxt.acquire(timeout=ttl + 5)
    granted = admin.execute("SELECT acquired_at FROM dsync_leases WHERE lease = %s",
                            (name,)).fetchone()[0]
    late = (granted - expires).total_seconds()
    print(f"\nkilled holder's lease granted to the next waiter {late * 1000:.0f} ms after its expiry")
    assert late >= 0                         # never before the expiry it had renewed to
    nxt.release()
    nxt.close()
