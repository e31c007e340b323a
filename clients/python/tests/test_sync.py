"""The thread-side API against a real server, directly and through
PgBouncer in transaction mode (the dsn fixture runs each test both ways)."""

import os
import select
import signal
import subprocess
import sys
import threading
import time
import types
from datetime import datetime, timedelta

import psycopg
import pytest

from conftest import stop_worker_asleep, wait_for
from dsync import (Client, Event, LeaderElection, LeaseEvent, ListenUnavailable, Lock, LockLost,
                   NotHeld, ReadLock, Semaphore, watch)

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON = sys.executable


def test_types_and_basic_cycle(dsn, name):
    # An int ttl and a dict info: the casts the library adds make them work.
    lock = Lock(name, conninfo=dsn, ttl=30, info={"host": "h1", "n": 1})
    assert lock.acquire(blocking=False)
    assert isinstance(lock.token, int) and lock.token > 0
    assert lock.owned() and lock.locked()
    other = Lock(name, conninfo=dsn, ttl=30.5)
    assert not other.acquire(blocking=False)
    assert not other.acquire(timeout=timedelta(milliseconds=200))
    expiry = lock.renew()
    assert isinstance(expiry, datetime) and expiry.tzinfo is not None
    assert lock.release()
    assert not lock.owned() and not lock.locked()
    assert other.acquire(blocking=False)
    assert other.release()
    lock.close()
    other.close()


def test_default_holder_and_reentry(dsn, admin, name):
    lock = Lock(name, conninfo=dsn, ttl=10)
    host, pid, rnd = lock.holder.split(":")
    assert pid == str(os.getpid()) and len(rnd) == 8
    assert lock.acquire()
    first = lock.token
    assert lock.acquire(blocking=False)          # the owner again: counted
    assert lock.token == first
    assert lock.release()                        # one of two: still held
    assert lock.held and lock.owned()
    assert admin.execute("SELECT holder FROM dsync_leases WHERE lease = %s",
                         (name,)).fetchone()[0] == lock.holder
    assert lock.release()
    assert not lock.held and not lock.locked()
    with pytest.raises(NotHeld):
        lock.release()
    lock.close()


def _in_a_thread(fn, timeout=5.0):
    """fn() in a thread of its own: its result, or an AssertionError if it
    did not return within timeout (a deadlock fails instead of hanging)."""
    got = []
    t = threading.Thread(target=lambda: got.append(fn()), daemon=True)
    t.start()
    t.join(timeout)
    assert got, f"{fn} did not return within {timeout} s (a deadlock)"
    return got[0]


def test_holder_read_under_the_objects_mutex(direct, name):
    """lock.holder from code that runs while the object's mutex is held
    (its repr in NotHeld's message, a callback, a subclass) answers
    instead of deadlocking; so does an on_lost handler that reads it."""
    lock = Lock(name, conninfo=direct, ttl=10)

    def under_mutex():
        with lock._mutex:
            return lock.holder, repr(lock)
    holder, text = _in_a_thread(under_mutex)
    assert holder == lock.holder and holder in text

    def release_unheld():
        try:
            lock.release()
        except NotHeld as exc:
            return str(exc)
    assert lock.holder in _in_a_thread(release_unheld)

    seen = []
    lock.on_lost = lambda hold: seen.append(lock.holder)
    lock.acquire()
    mine = lock.holder
    lock.client._keeper.report([lock.hold], "a test")
    assert wait_for(lambda: seen, timeout=5)
    assert seen == [mine]       # the callback thread holds nothing: the base name
    lock.release()
    lock.close()


def test_bad_arguments():
    with pytest.raises(TypeError):
        Lock("x", conninfo="dbname=none", ttl="30")
    with pytest.raises(ValueError):
        Lock("x", conninfo="dbname=none", ttl=0)
    with pytest.raises(ValueError):
        Lock("", conninfo="dbname=none")
    with pytest.raises(TypeError):
        Lock("x")
    with pytest.raises(ValueError):
        Semaphore("x", 0, conninfo="dbname=none")


def _hand_off(a, b):
    """a holds; b blocks in acquire in another thread; a's release wakes
    b, which then holds (b's thread is its owner)."""
    assert a.acquire()
    got = []

    def take():
        ok = b.acquire(timeout=20)
        got.append((ok, b.token, b.owned()))
        if ok:
            got.append(b.release())
    t = threading.Thread(target=take)
    t.start()
    time.sleep(0.3)
    assert a.release()
    t.join(15)
    assert got[0][0] is True and got[0][1] > 0 and got[0][2] is True
    assert got[1] is True
    a.close()
    b.close()


def test_blocking_acquire_is_woken(dsn, name):
    _hand_off(Lock(name, conninfo=dsn, ttl=30), Lock(name, conninfo=dsn, ttl=30))


def test_mutual_exclusion_across_processes_with_guard(dsn, admin, name):
    """Four processes increment a counter under the lock, each write
    guarded in its own transaction; no increment is lost."""
    table = "counter_" + str(abs(hash(name)) % 100000)
    admin.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, value int, token bigint)")
    admin.execute(f"GRANT ALL ON {table} TO app")
    admin.execute(f"INSERT INTO {table} VALUES (1, 0, 0)")
    procs = [subprocess.Popen([PYTHON, os.path.join(HERE, "worker.py"), "count", dsn,
                               name, table, "25"], stdout=subprocess.PIPE, text=True)
             for _ in range(4)]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    value, token = admin.execute(f"SELECT value, token FROM {table}").fetchone()
    assert value == 100
    assert token > 0


def test_guard_refuses_when_not_held(dsn, admin, name):
    lock = Lock(name, conninfo=dsn, ttl=30)
    with psycopg.connect(dsn, autocommit=True, prepare_threshold=None) as conn:
        with pytest.raises(NotHeld) as err:        # holding nothing: no statement
            lock.guard(conn)
        assert err.value.sqlstate is None and err.value.__cause__ is None
        assert lock.acquire(blocking=False)
        admin.execute("SELECT dsync_force_release(%s)", (name,))
        with pytest.raises(NotHeld) as err:        # held here, lost on the server
            lock.guard(conn)
        assert isinstance(err.value.__cause__, psycopg.errors.ObjectNotInPrerequisiteState)
        assert err.value.sqlstate == "55000"
    lock.close()


def test_guard_refuses_a_thread_that_does_not_hold_while_another_does(dsn, name):
    """A lock object shared by threads: a thread that never acquired it is
    refused, although another thread holds it under the object's name
    (asked under that name, the server said yes, and the thread got the
    other's token)."""
    lock = Lock(name, conninfo=dsn, ttl=30)
    held, done = threading.Event(), threading.Event()

    def owner():
        with lock:
            held.set()
            done.wait(30)
    t = threading.Thread(target=owner)
    t.start()
    try:
        assert held.wait(30)
        with psycopg.connect(dsn, prepare_threshold=None) as conn, conn.transaction():
            with pytest.raises(NotHeld, match="not held by this thread"):
                lock.guard(conn)
    finally:
        done.set()
        t.join()
        lock.close()


def test_lost_lease_is_noticed_at_once(server, admin, name):
    """Force-release a held lock: the holder learns it through LISTEN long
    before the ttl would let anyone else in."""
    seen = []
    # A client of its own: the default client of this conninfo may keep a
    # keeper connected since an earlier test, from before the process that
    # sends this database's events last changed; it then takes the new
    # sender's notification for a stranger's and confirms it with a renewal
    # (as it should), and the loss's reason is the renewal's.
    client = Client(server.dsn())
    lock = client.lock(name, ttl=30, on_lost=lambda l: seen.append(l.lost_reason))
    assert lock.acquire()
    time.sleep(0.2)
    t0 = time.monotonic()
    admin.execute("SELECT dsync_force_release(%s)", (name,))
    assert lock.lost.wait(10)
    took = time.monotonic() - t0
    print(f"\nlost-lease notice after force_release: {took * 1000:.1f} ms")
    assert took < 30 / 3, "not noticed before the first renewal"
    assert wait_for(lambda: seen, 5) and "released" in seen[0]   # the callback, on its thread
    with pytest.raises(LockLost):
        lock.check()
    assert not lock.release()
    lock.close()
    client.close()


def test_lost_lease_through_pgbouncer_at_renewal(server, admin, name):
    """Through a pooler LISTEN does not work: the loss is noticed at the
    next renewal, still before the ttl is over."""
    lock = Lock(name, conninfo=server.dsn(bouncer=True), ttl=3)
    assert lock.acquire()
    t0 = time.monotonic()
    admin.execute("SELECT dsync_force_release(%s)", (name,))
    assert lock.lost.wait(3)
    print(f"\nlost-lease notice through PgBouncer: {(time.monotonic() - t0) * 1000:.0f} ms")
    lock.close()


def test_renewal_keeps_the_lease(dsn, name):
    lock = Lock(name, conninfo=dsn, ttl=1.5)
    assert lock.acquire()
    time.sleep(3.5)
    assert not lock.lost.is_set()
    assert lock.owned()
    lock.check()
    assert lock.release()
    lock.close()


def test_semaphore_permits(dsn, name):
    sems = [Semaphore(name, 2, conninfo=dsn, ttl=30) for _ in range(3)]
    assert sems[0].acquire(blocking=False)
    assert sems[1].acquire(blocking=False)
    assert not sems[2].acquire(blocking=False)
    sems[0].release()
    assert sems[2].acquire(timeout=5)
    for s in sems[1:]:
        s.release()
    for s in sems:
        s.close()


def test_read_write_lock(dsn, name):
    # Readers together, a writer alone; a waiting writer goes first.
    r1 = ReadLock(name, conninfo=dsn, ttl=30)
    r2 = ReadLock(name, conninfo=dsn, ttl=30)
    w = Lock(name, conninfo=dsn, ttl=30)
    assert r1.acquire(blocking=False) and r2.acquire(blocking=False)
    assert r1.token != r2.token and r1.owned() and r2.owned()
    assert not w.acquire(blocking=False)
    got = []
    writer_may_go = threading.Event()

    def write():
        got.append(w.acquire(timeout=20))
        got.append(w.owned())
        writer_may_go.wait(10)
        got.append(w.release())
    t = threading.Thread(target=write)
    t.start()
    time.sleep(0.3)
    r3 = ReadLock(name, conninfo=dsn, ttl=30)
    assert not r3.acquire(blocking=False)      # behind the waiting writer
    assert r1.release() and r2.release()
    assert wait_for(lambda: len(got) >= 2, 15)
    assert got[:2] == [True, True]
    assert not r3.acquire(blocking=False)
    writer_may_go.set()
    t.join(10)
    assert got[2] is True
    assert r3.acquire(timeout=5)
    assert r3.release()
    for x in (r1, r2, r3, w):
        x.close()


def test_event_one_to_one(dsn, name):
    ev = Event(name, conninfo=dsn)
    assert ev.clear() == 0
    assert not ev.is_set()
    ev.set()
    assert ev.is_set()
    assert ev.wait(timeout=1)
    assert not ev.wait(timeout=0.2)
    waiter = Event(name, conninfo=dsn)
    got = []
    t = threading.Thread(target=lambda: got.append(waiter.wait(timeout=10)))
    t.start()
    time.sleep(0.2)
    ev.set()
    t.join(10)
    assert got == [True]
    ev.close()
    waiter.close()


def test_event_between_processes(dsn, name):
    p = subprocess.Popen([PYTHON, os.path.join(HERE, "worker.py"), "wait-event", dsn, name],
                         stdout=subprocess.PIPE, text=True)
    time.sleep(0.5)
    Event(name, conninfo=dsn).set()
    out = p.communicate(timeout=30)[0]
    assert p.returncode == 0 and "got" in out


def test_leader_election_callbacks(dsn, name):
    events = []
    a = LeaderElection(name, conninfo=dsn, ttl=3, member="a",
                       on_leader=lambda: events.append("a+"),
                       on_leader_loss=lambda: events.append("a-"))
    b = LeaderElection(name, conninfo=dsn, ttl=3, member="b",
                       on_leader=lambda: events.append("b+"),
                       on_leader_loss=lambda: events.append("b-"))
    a.start()
    assert wait_for(lambda: a.is_leader, 10)
    b.start()
    assert wait_for(lambda: len(b.members()) == 2, 10)
    assert wait_for(lambda: b.leader_exists, 10) and not b.is_leader
    assert b.status["leader"] == "a" and b.status["member"] == "b"
    detail = {m["member"]: m["is_leader"] for m in b.members()}
    assert detail == {"a": True, "b": False}
    a.stop()
    assert events[:2] == ["a+", "a-"]
    assert wait_for(lambda: b.is_leader, 5)
    b.stop()
    assert events == ["a+", "a-", "b+", "b-"]


def test_leader_failover_after_kill(dsn, name):
    """Kill -9 the leader process: another takes over within ttl + 1 s."""
    ttl = 3
    procs = {m: subprocess.Popen([PYTHON, "-u", os.path.join(HERE, "worker.py"), "elect", dsn,
                                  name, m, str(ttl)], stdout=subprocess.PIPE, text=True)
             for m in ("p1", "p2")}
    observer = LeaderElection(name, conninfo=dsn, ttl=ttl, member="observer")
    try:
        assert wait_for(lambda: observer.leader() in ("p1", "p2"), 15)
        leader = observer.leader()
        other = "p2" if leader == "p1" else "p1"
        t0 = time.monotonic()
        procs[leader].send_signal(signal.SIGKILL)
        assert wait_for(lambda: observer.leader() == other, ttl + 5, 0.02)
        took = time.monotonic() - t0
        print(f"\nfailover after kill -9 of the leader: {took:.2f} s (ttl {ttl} s)")
        assert took <= ttl + 1
    finally:
        for p in procs.values():
            p.kill()
            p.wait()
        observer._lock.close()


def test_watch_typed_events_and_state(server, admin, name):
    direct = server.dsn()
    holder = Lock(name, conninfo=direct, ttl=30, holder="h-state")
    assert holder.acquire()
    it = watch([name], conninfo=direct, timeout=5)
    first = next(it)
    assert first == LeaseEvent(kind="state", name=name, holder="h-state",
                               fencing=holder.token, expires_at=first.expires_at)
    # A NOTIFY dsync did not send, on the same channel, is skipped.
    channel = admin.execute("SELECT dsync_channel(%s)", (name,)).fetchone()[0]
    admin.execute(psycopg.sql.SQL("NOTIFY {}, {}").format(
        psycopg.sql.Identifier(channel),
        psycopg.sql.Literal('{"event":"released","lease":"%s","holder":"h-state"}' % name)))
    holder.release()
    ev = next(it)
    assert ev.kind == "released" and ev.holder == "h-state"
    assert isinstance(ev.fencing, int) and ev.fencing == first.fencing
    assert ev.seq is not None
    other = Lock(name, conninfo=direct, ttl=30, holder="h2")
    other.acquire()
    ev = next(it)
    assert ev.kind == "acquired" and ev.holder == "h2" and ev.expires_at.tzinfo is not None
    other.release()
    holder.close()
    other.close()


def test_watch_skips_an_event_its_state_already_shows(server, admin, name):
    """The worker logs and sends an event after the commit that made it:
    with the worker stopped, a watch that starts after a grant shows it
    in its state, and the late "acquired" event is not given again."""
    direct = server.dsn()
    pid = admin.execute("SELECT sender_pid FROM dsync_stats").fetchone()[0]
    assert pid, "no event sender in dsync_stats"
    holder = Lock(name, conninfo=direct, ttl=30, holder="h-late")
    # Someone listens in the database, so the grant's event is to be sent.
    with psycopg.connect(direct, autocommit=True) as other:
        channel = other.execute("SELECT dsync_channel(%s)", (name + "-other",)).fetchone()[0]
        other.execute(psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(channel)))
        stop_worker_asleep(admin, pid)
        try:
            assert holder.acquire()
            it = watch([name], conninfo=direct, timeout=5)
            first = next(it)
            assert (first.kind, first.holder, first.fencing) == ("state", "h-late", holder.token)
        finally:
            os.kill(pid, signal.SIGCONT)
        holder.release()
        ev = next(it)
        assert (ev.kind, ev.holder, ev.fencing) == ("released", "h-late", first.fencing)
    holder.close()


def test_watch_refuses_pgbouncer(server, name):
    with pytest.raises(ListenUnavailable):
        next(watch([name], conninfo=server.dsn(bouncer=True), timeout=1))


def test_with_a_connection_pool(dsn, name):
    """A psycopg_pool ConnectionPool in place of a conninfo string; the
    pool's connections are in transactions, not autocommit."""
    from psycopg_pool import ConnectionPool
    with ConnectionPool(dsn, min_size=1, max_size=4, kwargs={"prepare_threshold": None}) as pool:
        _hand_off(Lock(name, pool=pool, ttl=30), Lock(name, pool=pool, ttl=30))


def _stop_keeper_backend(admin, application_name, idle=False):
    """SIGSTOP the server process of a client's keeper; its pid.  idle:
    stop it between two statements only, so that it holds no row lock (a
    process stopped in a renewal's commit keeps the leases' rows locked,
    and nothing can renew them until it runs again)."""
    keeper = f"{application_name} keeper"[:63]
    for _ in range(500):
        row = admin.execute("SELECT pid, state FROM pg_stat_activity WHERE application_name = %s",
                            (keeper,)).fetchone()
        if row is None or (idle and row[1] != "idle"):
            time.sleep(0.01)
            continue
        os.kill(row[0], signal.SIGSTOP)
        if not idle or admin.execute("SELECT state FROM pg_stat_activity WHERE pid = %s",
                                     (row[0],)).fetchone()[0] == "idle":
            return row[0]
        os.kill(row[0], signal.SIGCONT)        # it had begun a statement: again
    raise AssertionError("no keeper connection in pg_stat_activity"
                         + (" stopped while idle" if idle else ""))


def _stop_client_backends(admin, application_name):
    """SIGSTOP every server process of a client (its keeper's and its
    statement connections): to it, the server hangs.  Their pids."""
    pids = [_stop_keeper_backend(admin, application_name)]
    for (pid,) in admin.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s",
                                (application_name,)).fetchall():
        os.kill(pid, signal.SIGSTOP)
        pids.append(pid)
    return pids


def test_watchdog_declares_loss_before_expiry(server, admin, name):
    """Renewals stuck (every server process of the client stopped with
    SIGSTOP: the keeper's, and the statement connections a rescue renewal
    would use): the holder is told the lease is lost before it can
    expire, so nothing else can have been granted it yet."""
    lost_at = []
    app = f"wd-{name}"[:50]
    client = Client(server.dsn(), application_name=app)
    lock = client.lock(name, ttl=2, on_lost=lambda h: lost_at.append(time.monotonic()))
    t0 = time.monotonic()
    assert lock.acquire()
    expires = admin.execute("SELECT expires_at FROM dsync_leases WHERE lease = %s",
                            (name,)).fetchone()[0]
    pids = _stop_client_backends(admin, app)
    try:
        assert lock.lost.wait(5)
        assert wait_for(lambda: lost_at, 5)
        still = admin.execute("SELECT expires_at FROM dsync_leases WHERE lease = %s",
                              (name,)).fetchone()
        # At the moment of the notice the lease was still live (held by us).
        assert still is not None and still[0] >= expires
        print(f"\nwatchdog: loss declared {lost_at[0] - t0:.2f} s after the acquire (ttl 2 s)")
        assert lost_at[0] - t0 < 2.0
        assert "renewal" in lock.lost_reason
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
    assert not lock.release()
    client.close()


def test_a_stuck_keeper_connection_loses_no_lease(server, admin, name):
    """The keeper's server process stopped (SIGSTOP) for three ttls, or
    its connection killed while new ones are refused: the watchdog renews
    the leases over the client's statement connections before their
    deadline (a rescue), so nothing is lost while the server still holds
    them (each used to be declared lost and given back)."""
    app = f"rescue-{name}"[:40]
    client = Client(server.dsn(), application_name=app)
    locks = [client.lock(f"{name}-{i}", ttl=2) for i in range(3)]
    for lock in locks:
        assert lock.acquire()
    tokens = [lock.token for lock in locks]
    pid = _stop_keeper_backend(admin, app, idle=True)
    try:
        time.sleep(6)
        assert not any(lock.lost.is_set() for lock in locks)
        assert all(lock.held for lock in locks)
    finally:
        os.kill(pid, signal.SIGCONT)
    keeper = client._keeper

    def refused(*_a, **_k):
        raise psycopg.OperationalError("connection refused (the test refuses it)")
    keeper._connect = refused
    admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                  " WHERE application_name = %s", (f"{app} keeper"[:63],))
    time.sleep(6)
    assert not any(lock.lost.is_set() for lock in locks)
    held = admin.execute("SELECT lease, fencing FROM dsync_leases WHERE lease LIKE %s"
                         " ORDER BY lease", (f"{name}-%",)).fetchall()
    assert [t for _, t in held] == tokens
    for lock in locks:
        assert lock.release()
    client.close()


def test_watch_resumes_after_reconnect(server, admin, name):
    """The watcher's connection is killed; meanwhile the lease changes
    hands.  After the reconnect the watcher replays what it missed from
    the server's event log, each event once, in order."""
    direct = server.dsn()
    it = watch([name], conninfo=direct, timeout=10, application_name=f"w-{name}"[:60])
    a = Lock(name, conninfo=direct, ttl=30, holder="before")
    a.acquire()
    first = next(it)                           # state: "before" holds it
    assert (first.kind, first.holder) == ("state", "before")
    admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                  " WHERE application_name = %s", (f"w-{name}"[:60],))
    a.release()
    b = Lock(name, conninfo=direct, ttl=30, holder="during")
    b.acquire()
    got = []
    while not got or (got[-1].kind, got[-1].holder) != ("acquired", "during"):
        got.append(next(it))
    seqs = [e.seq for e in got]
    assert seqs == sorted(set(seqs)), "each event once, in seq order"
    assert [(e.kind, e.holder) for e in got if e.holder == "before"] == \
        [("acquired", "before"), ("released", "before")] or \
        [(e.kind, e.holder) for e in got if e.holder == "before"] == [("released", "before")]
    assert got[-1].fencing == b.token
    assert all(e.kind != "gap" for e in got)
    b.release()
    ev = next(it)
    assert (ev.kind, ev.holder) == ("released", "during") and ev.seq > seqs[-1]
    a.close()
    b.close()


def test_watch_after_and_gap(server, admin, name):
    """watch(after=seq) replays the retained events after seq; events
    older than dsync.event_retention come back as one "gap" event, then
    the current state."""
    direct = server.dsn()
    a = Lock(name, conninfo=direct, ttl=30, holder="one")
    a.acquire()
    a.release()
    a.acquire()
    for _ in range(200):
        rows = admin.execute("SELECT seq, payload->>'event' FROM dsync_events_since(0, %s)",
                             ([name],)).fetchall()
        if len(rows) == 3:
            break
        time.sleep(0.05)
    assert [r[1] for r in rows] == ["acquired", "released", "acquired"]
    it = watch([name], conninfo=direct, timeout=2, after=rows[0][0])
    got = [next(it), next(it)]
    assert [(e.kind, e.seq) for e in got] == [("released", rows[1][0]), ("acquired", rows[2][0])]
    # Pruned: one second of retention, then another event makes the reaper prune.
    admin.execute("ALTER SYSTEM SET dsync.event_retention = 1")
    admin.execute("SELECT pg_reload_conf()")
    try:
        time.sleep(2.5)
        a.release()
        for _ in range(200):
            if admin.execute("SELECT count(*) FROM dsync_events_since(%s, %s)",
                             (rows[0][0] - 1, [name])).fetchone()[0] <= 1:
                break
            time.sleep(0.05)
        it = watch([name], conninfo=direct, timeout=2, after=rows[0][0])
        gap = next(it)
        assert gap.kind == "gap" and gap.seq > rows[0][0]
    finally:
        admin.execute("ALTER SYSTEM RESET dsync.event_retention")
        admin.execute("SELECT pg_reload_conf()")
    a.close()


def test_reacquire_after_loss_keeps_renewing(server, admin, name):
    lock = Lock(name, conninfo=server.dsn(), ttl=1.5)
    assert lock.acquire()
    admin.execute("SELECT dsync_force_release(%s)", (name,))
    assert lock.lost.wait(5)
    assert not lock.release()                  # the lost hold, given back
    assert lock.acquire()
    assert not lock.lost.is_set()
    time.sleep(3.5)                            # more than twice the ttl
    assert lock.owned() and not lock.lost.is_set()
    assert lock.release()
    lock.close()


def test_acquire_after_loss_without_release_starts_a_fresh_hold(server, admin, name):
    """The thread takes the lock again after a loss without releasing the
    lost hold first: the lost hold's ownership is over, so one release
    frees the new lease (it used to count 2 and stay held and renewed)."""
    lock = Lock(name, conninfo=server.dsn(), ttl=1.5)
    assert lock.acquire()
    admin.execute("SELECT dsync_force_release(%s)", (name,))
    assert lock.lost.wait(5)
    assert lock.acquire()
    assert not lock.lost.is_set()
    assert lock.release()
    held = "SELECT count(*) FROM dsync_leases WHERE lease = %s"
    assert admin.execute(held, (name,)).fetchone()[0] == 0
    with pytest.raises(NotHeld):
        lock.release()
    other = Lock(name, conninfo=server.dsn(), ttl=1.5)
    assert other.acquire(blocking=False)
    assert other.release()
    other.close()
    lock.close()


def _cancel_campaign_waits(admin, name):
    """pg_cancel_backend on every app backend waiting in dsync_acquire of
    the group: how many it cancelled."""
    return admin.execute(
        "SELECT count(pg_cancel_backend(pid)) FROM pg_stat_activity"
        " WHERE usename = 'app' AND state = 'active' AND query LIKE '%%dsync_acquire%%'"
        " AND pid <> pg_backend_pid()").fetchone()[0]


def test_campaign_survives_cancelled_waits(server, admin, name):
    """A campaign's wait cancelled by pg_cancel_backend (57014) and by
    statement_timeout is retried: the elector keeps running, reports each
    failure through on_error, and leads once the leader goes (it used to
    end its thread at the first cancel)."""
    other = Lock(name, conninfo=server.dsn(), ttl=30, holder="other")
    assert other.acquire()
    seen = []
    # Waiting in a backend (queue=False): the waits cancelled here.
    e = LeaderElection(name, conninfo=server.dsn(), ttl=3, member="m", queue=False,
                       on_error=lambda exc: seen.append(getattr(exc, "sqlstate", None)))
    slow = LeaderElection(name, ttl=3, member="s", queue=False,
                          conninfo=server.dsn() + " options='-c statement_timeout=200'")
    e.start()
    slow.start()
    cancelled = 0
    deadline = time.monotonic() + 20
    while cancelled < 3 and time.monotonic() < deadline:
        cancelled += _cancel_campaign_waits(admin, name)
        time.sleep(0.3)
    assert cancelled >= 3
    assert wait_for(lambda: "57014" in seen, 5), seen
    assert wait_for(lambda: slow.failures >= 3, 10), slow.failures
    assert slow.last_error is not None and slow.last_error.sqlstate == "57014"
    assert e.running and slow.running
    assert other.release()
    assert wait_for(lambda: e.is_leader or slow.is_leader, 10)
    e.stop()                       # raises nothing: no error ended it
    assert wait_for(lambda: slow.is_leader, 10)
    slow.stop()
    other.close()


def _line_of(p, timeout):
    """The next line p prints, within timeout seconds; if none comes, p
    prints its threads' stacks (worker.py's SIGUSR1) and the test fails."""
    if select.select([p.stdout], [], [], timeout)[0]:
        return p.stdout.readline().strip()
    os.kill(p.pid, signal.SIGUSR1)
    time.sleep(1)
    pytest.fail(f"process {p.pid} printed nothing in {timeout} s (its stacks are on stderr)")


def test_held_and_is_leader_are_false_after_a_pause_past_the_ttl(server, name):
    """A process stopped past its ttl reads held and is_leader False the
    moment it runs again, while another process holds the lease: the
    properties compare with the hold's deadline, they do not wait for the
    watchdog to run first (3 pauses)."""
    for i in range(3):
        lease = f"{name}-{i}"
        p = subprocess.Popen([sys.executable, "-u", os.path.join(HERE, "worker.py"), "paused",
                              server.dsn(), lease, "1.5"], stdout=subprocess.PIPE, text=True)
        try:
            assert p.stdout.readline().strip() == "ready"
            os.kill(p.pid, signal.SIGSTOP)
            other = Lock(lease, conninfo=server.dsn(), ttl=30, holder="other")
            leader = LeaderElection(lease + "-group", conninfo=server.dsn(), ttl=30,
                                    member="other")
            assert other.acquire(timeout=10)       # the server let the paused lease go
            leader.start()
            assert wait_for(lambda: leader.is_leader, 10)
            os.kill(p.pid, signal.SIGCONT)
            assert _line_of(p, 30) == "resumed held=False leader=False"
            leader.stop()
            assert other.release()
            other.close()
        finally:
            p.kill()
            p.wait()


def test_a_release_after_a_pause_past_the_ttl_reports_the_loss(server, name):
    """A process stopped past its ttl whose first act is release(): the
    release returns False and on_lost runs once, whoever notices first
    (release() used to look only at whether the loss had been reported,
    so when it ran before the watchdog and the keeper, the owner never
    heard of it: found by test_faults)."""
    p = subprocess.Popen([sys.executable, "-u", os.path.join(HERE, "worker.py"), "paused",
                          server.dsn(), name, "1.5", "release"], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        os.kill(p.pid, signal.SIGSTOP)
        other = Lock(name, conninfo=server.dsn(), ttl=30, holder="other")
        assert other.acquire(timeout=10)           # the server let the paused lease go
        os.kill(p.pid, signal.SIGCONT)
        assert _line_of(p, 30) == "resumed released=False reports=1"
        assert other.release()
        other.close()
    finally:
        p.kill()
        p.wait()


def test_a_release_the_server_refuses_reports_the_loss(server, admin, name):
    """The lease was taken from its holder while the keeper could not hear
    of it (its server process stopped): release() finds it gone, returns
    False and runs on_lost, so the owner never takes a lost lease for a
    clean end."""
    app = f"refused-{name}"[:40]
    client = Client(server.dsn(), application_name=app)
    heard = []
    lock = client.lock(name, ttl=30, on_lost=lambda hold: heard.append(hold.lost_reason))
    assert lock.acquire()
    pid = _stop_keeper_backend(admin, app, idle=True)
    try:
        assert admin.execute("SELECT dsync_force_release(%s)", (name,)).fetchone()[0]
        assert lock.held                           # nobody told this process yet
        assert lock.release() is False
        assert wait_for(lambda: heard, 5)
        assert heard == ["the server no longer held it when it was released"]
    finally:
        os.kill(pid, signal.SIGCONT)
        client.close()


def test_leader_reelected_after_forced_loss(server, admin, name):
    calls = []
    e = LeaderElection(name, conninfo=server.dsn(), ttl=1.5, member="m",
                       on_leader=lambda: calls.append("+"),
                       on_leader_loss=lambda: calls.append("-"))
    e.start()
    assert wait_for(lambda: e.is_leader, 10)
    admin.execute("SELECT dsync_force_release(%s)", (name,))
    assert wait_for(lambda: calls[:3] == ["+", "-", "+"], 10), calls
    time.sleep(3.5)                            # the new term is kept alive
    assert e.is_leader and calls == ["+", "-", "+"]
    assert admin.execute("SELECT dsync_leader(%s)", (name,)).fetchone()[0] == "m"
    e.stop()
    assert calls == ["+", "-", "+", "-"]


def _drop_app_sessions(admin):
    """What a failover or a restart does to every client: its sessions end."""
    admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                  " WHERE usename = 'app' AND pid <> pg_backend_pid()")
    time.sleep(0.2)


def test_connections_dropped_by_the_server_are_replaced(server, admin, name):
    """The client's idle connections (the pool's, the keeper's) are ended
    by the server; the next call takes new ones rather than fail on them,
    and the keeper reconnects and keeps the lease."""
    app = f"drop-{name}"[:50]
    client = Client(server.dsn(), application_name=app)
    lock = client.lock(name, ttl=30)
    assert lock.acquire()
    _drop_app_sessions(admin)
    assert lock.renew() is not None
    _drop_app_sessions(admin)
    assert lock.release()
    _drop_app_sessions(admin)
    assert lock.acquire(blocking=False)
    assert wait_for(lambda: admin.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
        (f"{app} keeper",)).fetchone()[0] == 1)
    _drop_app_sessions(admin)
    time.sleep(1.0)                            # the keeper reconnects and confirms
    assert lock.owned() and not lock.lost.is_set()
    assert lock.release()
    client.close()


def test_the_owner_of_a_thread_is_made_anew_after_a_fork_and_per_identity(monkeypatch):
    """current_owner() keeps each thread's answer, but a child forked from
    a thread has that thread as its main thread (whose holds last until
    exit), and gevent's patching gives each greenlet an identity of its
    own within one real thread: neither may reuse the kept answer."""
    from dsync import sync
    seen = {}

    def forker():
        seen["parent"] = sync.current_owner()
        assert sync.current_owner() is seen["parent"]       # kept
        pid = os.fork()
        if pid == 0:
            child = sync.current_owner()
            os._exit(0 if child is not seen["parent"] and child[0] is threading.main_thread()
                     and child[1]() is True else 1)
        seen["status"] = os.waitpid(pid, 0)[1]
    t = threading.Thread(target=forker)
    t.start()
    t.join()
    assert seen["status"] == 0
    mine = sync.current_owner()
    # Another greenlet, as gevent's patched get_ident says (patched in the
    # module's view only: Python 3.13's threading breaks on a fake ident).
    greenlet = types.SimpleNamespace(get_ident=lambda: -1, current_thread=threading.current_thread,
                                     main_thread=threading.main_thread)
    monkeypatch.setattr(sync, "threading", greenlet)
    assert sync.current_owner() is not mine
