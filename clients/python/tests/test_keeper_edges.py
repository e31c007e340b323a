"""The keeper's edge cases: each test here failed before the fix it
proves (found by a review of the client)."""

import asyncio
import gc
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import psycopg
import pytest

from conftest import wait_for
from dsync import (AsyncClient, Client, DsyncConnectionError, DsyncError, KeeperUnavailable, Lock,
                   LockLost)
from dsync import aio_client
from dsync import client as client_module
from test_sync import _stop_keeper_backend

HERE = os.path.dirname(os.path.abspath(__file__))


def _held(admin, name):
    return admin.execute("SELECT holder, fencing FROM dsync_leases WHERE lease = %s",
                         (name,)).fetchall()


def _no_rescue(client):
    """Turn the watchdog's rescue renewals off (over the statement
    connections), for tests of what follows its verdict when the keeper
    is stuck: with them on, the statement connections these tests keep
    working would save the lease."""
    client._keeper._rescue = lambda batch: None


def test_a_name_given_back_late_is_never_reused(server, admin, name):
    """The watchdog gives up a lease its stuck keeper cannot renew and
    queues its release; the owner releases and takes the lock again at
    once.  When the keeper comes back, its late release must not hit the
    new hold (it did: two clients then both believed they held it)."""
    app = f"reuse-{name}"[:40]
    client = Client(server.dsn(), application_name=app)
    _no_rescue(client)
    lock = client.lock(name, ttl=2)
    assert lock.acquire()
    first_holder = lock.holder
    # Stopped between statements: stopped inside a renewal it would keep
    # the lease's row locked, and the release below would wait for it
    # until call_timeout (it did, once in a loaded run).
    pid = _stop_keeper_backend(admin, app, idle=True)
    try:
        assert lock.lost.wait(5)
        assert lock.release() is False         # lost; the statement pool still answers
        assert lock.acquire(blocking=False)
        new_holder = _held(admin, name)[0][0]
        assert new_holder != first_holder
    finally:
        os.kill(pid, signal.SIGCONT)
    time.sleep(1.5)                            # the keeper sends its late release
    assert _held(admin, name) == [(new_holder, lock.token)]
    other = Client(server.dsn())
    assert not other.lock(name, ttl=5).acquire(blocking=False)
    assert lock.held and lock.release()
    other.close()
    client.close()


def test_a_slow_callback_holds_up_no_other_loss(server, admin, name):
    """One lease's on_lost takes 4 s; another lease of the same client is
    still declared lost before it could expire."""
    app = f"slowcb-{name}"[:40]
    client = Client(server.dsn(), application_name=app)
    _no_rescue(client)
    slow = client.lock(name + "-a", ttl=2, on_lost=lambda h: time.sleep(4))
    quick = client.lock(name + "-b", ttl=2.5)
    t0 = time.monotonic()
    assert slow.acquire() and quick.acquire()
    pid = _stop_keeper_backend(admin, app)
    try:
        assert quick.lost.wait(4)
        assert time.monotonic() - t0 < 2.5     # before its expiry
    finally:
        os.kill(pid, signal.SIGCONT)
    client.close()


def test_a_guarded_transaction_holds_up_no_other_renewal(server, admin, name):
    """A guard keeps its lease's row locked until its transaction ends;
    the renewals of the client's other leases go on meanwhile (the one
    batch statement used to wait for it, and every lease was lost)."""
    client = Client(server.dsn())
    guarded = client.lock(name + "-g", ttl=2)
    others = [client.lock(f"{name}-{i}", ttl=2) for i in range(5)]
    assert guarded.acquire()
    for lock in others:
        assert lock.acquire()
    with psycopg.connect(server.dsn()) as conn:
        with conn.transaction():
            guarded.guard(conn)
            time.sleep(3.5)                    # longer than the ttl
        assert all(not lock.lost.is_set() for lock in others)
        assert all(lock.owned() for lock in others)
    for lock in others:
        assert lock.release()
    guarded.release()
    client.close()


def test_a_hold_added_while_its_channel_is_unlistened_is_listened_again(server, admin, name,
                                                                      monkeypatch):
    """The keeper UNLISTENs idle channels beyond 256; a hold taken on one
    of them while that statement is in flight gets its channel LISTENed
    again (it was trusted, then left unheard)."""
    client = Client(server.dsn())
    keeper = client._keeper
    locks = [client.lock(f"{name}-{i:03d}", ttl=30) for i in range(300)]
    for lock in locks:
        assert lock.acquire()
    assert wait_for(lambda: len(keeper.ledger.listening) >= 300, 10)
    caught = {}
    unlistening = threading.Event()
    orig = client_module.sql.unlisten_statement

    def slow_unlisten(channels):
        caught["channels"] = list(channels)
        unlistening.set()
        return "SELECT pg_sleep(1);" + orig(channels)
    monkeypatch.setattr(client_module.sql, "unlisten_statement", slow_unlisten)
    for lock in locks:
        lock.release()
    keeper._wake()
    assert unlistening.wait(5)
    victim = caught["channels"][0][len("dsync:"):]
    lock = client.lock(victim, ttl=30)
    assert lock.acquire()                      # during the UNLISTEN
    time.sleep(1.5)
    admin.execute("SELECT dsync_force_release(%s)", (victim,))
    assert lock.lost.wait(2), "the loss was not heard"
    client.close()


def test_a_blocking_acquire_longer_than_the_ttl_is_kept(server, admin, name):
    """A waiter whose wait lasted longer than its ttl is granted a fresh
    lease and keeps it (it was declared lost and given back at once)."""
    holder = Lock(name, conninfo=server.dsn(), ttl=30)
    taken = threading.Event()

    def hold_three_seconds():
        with holder:
            taken.set()
            time.sleep(3.0)
    releaser = threading.Thread(target=hold_three_seconds)
    releaser.start()
    assert taken.wait(10)
    waiter = Lock(name, conninfo=server.dsn(), ttl=2)
    assert waiter.acquire(timeout=10)
    releaser.join()
    time.sleep(2.5)
    assert waiter.held and not waiter.lost.is_set() and waiter.owned()
    assert waiter.release()


def test_renew_with_a_shorter_ttl_is_kept_with_it(server, admin, name):
    client = Client(server.dsn(), listen=False)
    lock = client.lock(name, ttl=30)
    assert lock.acquire()
    assert lock.renew(ttl=1) is not None
    time.sleep(2.5)                            # the keeper renews with the new ttl
    assert lock.owned() and not lock.lost.is_set()
    assert not Lock(name, conninfo=server.dsn()).acquire(blocking=False)
    assert lock.release()
    client.close()


def test_a_process_with_many_descriptors(server, name):
    """select() cannot take a descriptor past 1024; the keeper waits with
    poll() (it failed every tick, and every acquire raised)."""
    script = textwrap.dedent(f"""
        import os, resource, sys, time
        sys.path.insert(0, {os.path.join(HERE, '..')!r})
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(4096, hard), hard))
        held_open = [os.open("/dev/null", os.O_RDONLY) for _ in range(1100)]
        import psycopg.waiting
        psycopg.waiting.wait = psycopg.waiting.wait_epoll   # psycopg's own select() fails too
        import dsync
        client = dsync.Client({server.dsn()!r})
        lock = client.lock({name!r}, ttl=2)
        assert lock.acquire()
        assert client._keeper.conn.fileno() >= 1024
        time.sleep(3)
        assert lock.held and lock.owned(), lock.lost_reason
        assert lock.release()
        client.close()
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr[-2000:]


def test_close_while_acquiring(server, admin, name, monkeypatch):
    """A client closed while an acquire is between its grant and its hold's
    registration: the acquire fails, nothing is left held."""
    client = Client(server.dsn())
    lock = client.lock(name, ttl=2)
    keeper = client._keeper
    real_ensure = keeper.ensure

    def closing_ensure(timeout):
        ok = real_ensure(timeout)
        threading.Thread(target=client.close).start()
        time.sleep(0.5)
        return ok
    monkeypatch.setattr(keeper, "ensure", closing_ensure)
    with pytest.raises(DsyncError):
        lock.acquire()
    assert not lock.held
    assert wait_for(lambda: not _held(admin, name), 5)


# Python 3.12+ warns of fork() in a process with threads: forking one is
# what these tests are about.
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded")
def test_an_object_made_before_fork_works_in_the_child(server, admin, name):
    """Objects made before a fork (a module-level lock under a preforking
    server) work in the child, on the child's own client and holder name,
    and a child is never merged with its parent on the server."""
    lock = Lock(name, conninfo=server.dsn(), ttl=30)
    unused = Lock(name + "-unused", conninfo=server.dsn(), ttl=30)
    assert lock.acquire()
    pid = os.fork()
    if pid == 0:
        try:
            code = 0
            if lock.held or lock.acquire(blocking=False):
                code = 2                      # merged with the parent
            elif not (unused.acquire() and unused.release()):
                code = 3
        except BaseException:
            code = 4
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    assert lock.held and lock.owned() and lock.release()


def test_listened_channels_are_not_remembered_for_ever(server, name):
    client = Client(server.dsn())
    for i in range(600):
        lock = client.lock(f"{name}-{i}", ttl=30)
        assert lock.acquire()
        time.sleep(0.03)                       # settled: its channel is LISTENed
        assert lock.release()
    time.sleep(0.5)
    assert len(client._keeper.ledger.heard) <= 300
    assert len(client._keeper.ledger.listening) <= 300
    client.close()


def test_asyncio_run_after_asyncio_run_leaves_no_client_behind(dsn, name):
    async def main():
        lock = aio_client.default_client(dsn, None, None, {})
        async with lock.lock(name, ttl=30):
            pass
    for _ in range(5):
        asyncio.run(main())
    gc.collect()
    alive = [o for o in gc.get_objects() if isinstance(o, AsyncClient)]
    assert len(alive) == 0 and len(aio_client._defaults) == 0


def test_the_main_threads_leases_are_given_back_at_exit(server, admin, name):
    """At exit the default client gives back what the main thread holds,
    even when another thread is still finishing (the keeper took the
    main thread, marked stopped by then, for an owner that ended)."""
    script = textwrap.dedent(f"""
        import sys, threading, time
        sys.path.insert(0, {os.path.join(HERE, '..')!r})
        import dsync
        lock = dsync.Lock({name!r}, conninfo={server.dsn()!r}, ttl=60)
        assert lock.acquire()
        threading.Thread(target=time.sleep, args=(2.5,)).start()
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert "ended without releasing" not in out.stderr
    assert _held(admin, name) == []


def test_a_failed_re_acquire_after_a_loss_gives_its_grant_back(server, admin, name,
                                                               monkeypatch):
    client = Client(server.dsn())
    lock = client.lock(name, ttl=30)
    assert lock.acquire()
    admin.execute("SELECT dsync_force_release(%s)", (name,))
    assert lock.lost.wait(5)
    monkeypatch.setattr(client._keeper, "ensure", lambda timeout: False)
    with pytest.raises(KeeperUnavailable):
        lock.acquire()                         # nested: the outer hold is lost
    assert _held(admin, name) == []
    assert not lock.release()
    client.close()


def test_a_hold_past_its_deadline_reads_lost_before_the_watchdog_runs(server, admin, name):
    """What a process stopped past its ttl sees when it runs again, made
    certain: the keeper renews nothing and the watchdog judges nothing
    (as if neither had run yet).  held, lost and check() read the hold's
    deadline themselves, and the reader's verdict is the watchdog's: the
    lease is given back and on_lost runs.  (An election's is_leader reads
    the same deadline: its campaign reads held too, and acts on it, so it
    is tested with whole processes and loops stopped, in test_sync.py and
    test_aio.py.)"""
    client = Client(server.dsn())
    seen = []
    lock = client.lock(name, ttl=1.5, on_lost=lambda h: seen.append(h.lost_reason))
    assert lock.acquire()
    keeper = client._keeper
    keeper._tick = lambda: time.sleep(0.05)            # no renewal
    _no_rescue(client)
    keeper.ledger.overdue = lambda holds, now: []      # no watchdog verdict
    time.sleep(2.0)
    assert not lock.held
    assert lock.lost.is_set()
    with pytest.raises(LockLost):
        lock.check()
    assert wait_for(lambda: seen, 5) and "no renewal could be confirmed" in seen[0]
    assert not lock.release()
    client.close()


def _stall_after_renewal(conn, stalled, resume):
    """Make conn's next statement after its first renewal wait for resume,
    as a keeper stopped between two round trips (SIGSTOP, a paused VM)."""
    real = conn.execute
    renewed = []

    def execute(query, params=None, **kw):
        if renewed:
            stalled.set()
            resume.wait(30)
        cur = real(query, params, **kw)
        if "dsync_renew" in str(query):
            renewed.append(True)
        return cur
    conn.execute = execute


def test_a_keeper_stopped_between_round_trips_leaves_no_lease_locked(server, admin, name):
    """The keeper stops right after a renewal's round trip.  Its renewal
    must have ended its transaction by then: it used to be BEGIN, the
    renewal, COMMIT in three round trips, and a keeper stopped before the
    COMMIT left the lease's row locked, so no one could take the lease
    once its ttl ran out (found by a process SIGSTOPped on a loaded
    machine)."""
    app = f"stall-{name}"[:40]
    client = Client(server.dsn(), application_name=app)
    _no_rescue(client)
    lock = client.lock(name, ttl=1.5)
    assert lock.acquire()
    keeper = client._keeper
    assert wait_for(lambda: keeper.conn is not None, 5)
    stalled, resume = threading.Event(), threading.Event()
    _stall_after_renewal(keeper.conn, stalled, resume)
    other = Client(server.dsn())
    try:
        assert stalled.wait(10)
        state = admin.execute("SELECT state FROM pg_stat_activity WHERE pid = %s",
                              (keeper.conn.info.backend_pid,)).fetchone()[0]
        assert state == "idle"
        assert other.lock(name, ttl=5).acquire(timeout=10)   # once the ttl ran out
    finally:
        resume.set()
        other.close()
        client.close()


def _stop_statement_backends(admin, application_name):
    """SIGSTOP the server processes of a client's statement connections
    (not its keeper's); their pids."""
    pids = [pid for (pid,) in admin.execute(
        "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (application_name,))]
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    return pids


def test_a_call_to_a_stopped_server_process_ends_at_call_timeout(server, admin, name):
    """A statement sent to a server process that is stopped (its socket
    stays open, the kernel acknowledges, statement_timeout is its own to
    enforce) fails with DsyncConnectionError once call_timeout has passed,
    and the client goes on over a new connection.  It used to wait as long
    as the process stayed stopped (a release hung until pytest's 300 s)."""
    app = f"bound-{name}"[:40]
    client = Client(server.dsn(), application_name=app, call_timeout=2)
    lock = client.lock(name, ttl=30)
    assert lock.acquire()
    pids = _stop_statement_backends(admin, app)
    assert pids
    outcome = []

    def read():
        try:
            outcome.append(lock.locked())
        except DsyncError as exc:
            outcome.append(exc)
    reader = threading.Thread(target=read, daemon=True)
    try:
        reader.start()
        reader.join(20)
        assert outcome, "the call did not end"
        assert isinstance(outcome[0], DsyncConnectionError), outcome
        assert "did not answer within 2 s" in str(outcome[0])
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
    assert lock.locked() and lock.release()
    client.close()


def test_an_async_call_to_a_stopped_server_process_ends_at_call_timeout(server, admin, name):
    """The asyncio twin of the test above."""
    async def main():
        app = f"abound-{name}"[:40]
        client = AsyncClient(server.dsn(), application_name=app, call_timeout=2)
        lock = client.lock(name, ttl=30)
        assert await lock.acquire()
        pids = await asyncio.to_thread(_stop_statement_backends, admin, app)
        assert pids
        try:
            with pytest.raises(DsyncConnectionError, match="did not answer within 2 s"):
                await asyncio.wait_for(lock.locked(), 20)
        finally:
            for pid in pids:
                os.kill(pid, signal.SIGCONT)
        assert await lock.locked() and await lock.release()
        await client.close()
    asyncio.run(main())
