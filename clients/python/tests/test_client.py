"""The Client: ownership by thread and task, one keeper for every held
lease, losses only when they are real, and the seeds' semantics
(leader_exists as a property that never waits, Semaphore.attach, one
exception hierarchy).  Directly, and where it matters through PgBouncer."""

import asyncio
import logging
import os
import threading
import time
from datetime import timedelta

import psycopg
import pytest

from conftest import app_connections, wait_for
from dsync import (AcquireTimeout, AsyncClient, AsyncSemaphore, Client, DsyncConnectionError,
                   DsyncError, InvalidArgument, KeeperUnavailable, LeaderElection, Lock, NotHeld,
                   Semaphore, SemaphoreMismatch, SemaphoreNotFound, watch)


def _overlap_counter():
    """A section's occupancy: enter() returns how many are inside."""
    state = {"inside": 0, "most": 0}
    guard = threading.Lock()

    def enter():
        with guard:
            state["inside"] += 1
            state["most"] = max(state["most"], state["inside"])

    def leave():
        with guard:
            state["inside"] -= 1
    return state, enter, leave


# -- ownership: threads ----------------------------------------------------------------

def test_threads_sharing_one_lock_take_turns(dsn, admin, name):
    """A module-level lock used by every worker thread excludes them from
    each other (the 1.4 client let all four in)."""
    lock = Lock(name, conninfo=dsn, ttl=10)
    state, enter, leave = _overlap_counter()
    holders = set()

    def work():
        for _ in range(10):
            with lock:
                enter()
                holders.add(admin.execute("SELECT holder FROM dsync_leases WHERE lease = %s",
                                          (name,)).fetchone()[0])
                time.sleep(0.002)
                leave()
    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert state["most"] == 1
    assert holders <= {lock.holder} | {f"{lock.holder}#{k}" for k in range(2, 9)}
    assert not lock.locked()
    lock.close()


def test_nested_with_is_reentrant_and_inner_exit_keeps_the_lease(dsn, admin, name):
    lock = Lock(name, conninfo=dsn, ttl=10)
    with lock:
        token = lock.token
        with lock:
            assert lock.token == token
        # The inner block's exit did not give the lease back.
        row = admin.execute("SELECT holder, fencing FROM dsync_leases WHERE lease = %s",
                            (name,)).fetchone()
        assert row == (lock.holder, token)
        assert lock.held
    assert not lock.locked() and not lock.held
    lock.close()


def test_only_the_owner_releases(dsn, name):
    lock = Lock(name, conninfo=dsn, ttl=10)
    assert lock.acquire()
    errors = []

    def other():
        try:
            lock.release()
        except NotHeld as exc:
            errors.append(exc)
        errors.append(lock.acquire(blocking=False))     # contends as another holder
    t = threading.Thread(target=other)
    t.start()
    t.join(10)
    assert isinstance(errors[0], RuntimeError) and errors[1] is False
    assert lock.release()
    with pytest.raises(NotHeld):
        lock.release()
    lock.close()


def test_semaphore_object_shared_by_threads(dsn, admin, name):
    sem = Semaphore(name, 2, conninfo=dsn, ttl=10)
    state, enter, leave = _overlap_counter()

    def work():
        for _ in range(5):
            with sem:
                enter()
                time.sleep(0.01)
                leave()
    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert state["most"] == 2
    sem.close()


# -- ownership: asyncio tasks ---------------------------------------------------------------

def test_tasks_sharing_one_async_lock_take_turns(dsn, admin, name):
    """Three tasks sharing one AsyncLock take turns (the 1.4 client let all
    three in), and a nested `async with` does not release the lease when
    the inner block exits."""
    async def main():
        client = AsyncClient(dsn)
        lock = client.lock(name, ttl=10)
        state = {"inside": 0, "most": 0}

        async def work():
            for _ in range(5):
                async with lock:
                    state["inside"] += 1
                    state["most"] = max(state["most"], state["inside"])
                    async with lock:                    # reentrant, same task
                        token = lock.token
                    held = await asyncio.to_thread(
                        lambda: admin.execute("SELECT fencing FROM dsync_leases WHERE lease = %s",
                                              (name,)).fetchone())
                    assert held == (token,)
                    await asyncio.sleep(0.005)
                    state["inside"] -= 1
        await asyncio.wait_for(asyncio.gather(*(work() for _ in range(3))), 60)
        assert state["most"] == 1
        with pytest.raises(NotHeld):
            await lock.release()
        await client.close()
    asyncio.run(main())


# -- the keeper: one connection for every lease -----------------------------------------------

def test_thousand_leases_on_few_connections(server, admin, name):
    """1,000 leases held by one client take at most 4 server connections,
    are all still held after three ttls, and a loss among them is known
    from its notification, long before the next renewal would tell."""
    app = f"k-{name}"[:40]
    client = Client(server.dsn(), application_name=app)
    ttl = 1.5
    lost = []
    locks = [client.lock(f"{name}:{i}", ttl=ttl, on_lost=lambda h: lost.append(
        (h.name, time.monotonic()))) for i in range(1000)]
    t0 = time.monotonic()
    for lock in locks:
        assert lock.acquire(blocking=False)
    print(f"\n1,000 acquires in {time.monotonic() - t0:.2f} s")
    conns = app_connections(admin, app)
    print(f"server connections of the client: {conns}")
    assert conns <= 4
    time.sleep(3 * ttl)
    held = admin.execute("SELECT count(*) FROM dsync_leases WHERE lease LIKE %s",
                         (f"{name}:%",)).fetchone()[0]
    assert held == 1000 and not lost
    assert app_connections(admin, app) <= 4
    took = []
    for i in range(5):
        victim = f"{name}:{i * 100}"
        admin.execute("SELECT dsync_force_release(%s)", (victim,))
        t = time.monotonic()
        assert wait_for(lambda: any(n == victim for n, _ in lost), 5, 0.001)
        took.append(next(at for n, at in lost if n == victim) - t)
    print("loss reported after force_release: " +
          ", ".join(f"{x * 1000:.1f} ms" for x in took))
    # From the notification: well before a renewal (every ttl/3) could tell.
    assert max(took) < ttl / 3
    assert len(lost) == 5
    assert sum(lock.held for lock in locks) == 995
    client.close()
    assert wait_for(lambda: app_connections(admin, app) == 0, 5)
    assert admin.execute("SELECT count(*) FROM dsync_leases WHERE lease LIKE %s",
                         (f"{name}:%",)).fetchone()[0] == 0


def test_release_and_reacquire_is_no_loss(dsn, name):
    """The previous hold's late `released` notification is not the new
    hold's loss (1.4 reported 128 of 200)."""
    lost = []
    lock = Lock(name, conninfo=dsn, ttl=10, on_lost=lambda h: lost.append(h.lost_reason))
    for _ in range(200):
        assert lock.acquire(blocking=False)
        assert lock.release()
    assert lock.acquire(blocking=False)
    time.sleep(0.5)
    assert lost == [] and lock.held and lock.owned()
    lock.release()
    lock.close()


def test_forged_notification_is_no_loss(server, admin, name):
    """Any session can NOTIFY a dsync channel: the keeper asks the server
    instead of believing it; dsync's own notice still counts at once."""
    client = Client(server.dsn())
    lock = client.lock(name, ttl=30)
    assert lock.acquire()
    time.sleep(0.2)
    channel = admin.execute("SELECT dsync_channel(%s)", (name,)).fetchone()[0]
    before = admin.execute("SELECT renewed_at FROM dsync_leases WHERE lease = %s",
                           (name,)).fetchone()[0]
    payload = ('{"seq":1,"event":"released","lease":"%s","holder":"%s","fencing":%d}'
               % (name, lock.holder, lock.token))
    admin.execute("SELECT pg_notify(%s, %s)", (channel, payload))
    # The keeper confirms the lease with a renewal, at once.
    assert wait_for(lambda: admin.execute("SELECT renewed_at FROM dsync_leases WHERE lease = %s",
                                          (name,)).fetchone()[0] > before, 5)
    time.sleep(0.2)
    assert lock.held and not lock.lost.is_set()
    admin.execute("SELECT dsync_force_release(%s)", (name,))
    assert lock.lost.wait(2) and "released" in lock.lost_reason
    assert not lock.release()
    client.close()


def test_keeper_that_cannot_connect_gives_the_lease_back(server, admin, name):
    """A role allowed one connection: the statement gets it, the keeper
    cannot have one, so the grant is given back and acquire raises."""
    admin.execute("DROP ROLE IF EXISTS one_conn")
    admin.execute("CREATE ROLE one_conn LOGIN CONNECTION LIMIT 1")
    try:
        client = Client(server.dsn(user="one_conn"))
        lock = client.lock(name, ttl=3)
        assert not lock.locked()                    # the one connection, now open
        with pytest.raises(KeeperUnavailable) as err:
            lock.acquire(blocking=False)
        assert isinstance(err.value, DsyncConnectionError)
        assert isinstance(err.value.__cause__, psycopg.OperationalError)
        assert admin.execute("SELECT count(*) FROM dsync_leases WHERE lease = %s",
                             (name,)).fetchone()[0] == 0
        assert not lock.held
        client.close()
    finally:
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                      " WHERE usename = 'one_conn'")
        wait_for(lambda: admin.execute("SELECT count(*) FROM pg_stat_activity"
                                       " WHERE usename = 'one_conn'").fetchone()[0] == 0)
        admin.execute("DROP ROLE one_conn")


def test_keep_alive_false_lapses_at_its_ttl(server, admin, name):
    app = f"na-{name}"[:40]
    client = Client(server.dsn(), application_name=app)
    lock = client.lock(name, ttl=1, keep_alive=False)
    assert lock.acquire()
    assert admin.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                         (f"{app} keeper",)).fetchone()[0] == 0
    assert lock.lost.wait(3)
    assert "ttl" in lock.lost_reason
    assert wait_for(lambda: admin.execute("SELECT count(*) FROM dsync_leases WHERE lease = %s",
                                          (name,)).fetchone()[0] == 0, 3)
    assert not lock.release()
    client.close()


def test_owner_thread_that_ends_holding_lets_the_lease_lapse(dsn, admin, name, caplog):
    lock = Lock(name, conninfo=dsn, ttl=1.5)
    t = threading.Thread(target=lock.acquire)
    t.start()
    t.join()
    assert lock.locked()
    with caplog.at_level(logging.WARNING, logger="dsync"):
        assert wait_for(lambda: not lock.locked(), 5, 0.05)
    assert any("ended without releasing" in r.getMessage() for r in caplog.records)
    lock.close()


def test_close_gives_back_what_is_held(server, admin, name):
    client = Client(server.dsn())
    locks = [client.lock(f"{name}-{i}", ttl=30) for i in range(3)]
    for lock in locks:
        assert lock.acquire()
    client.close()
    assert all(lock.lost.is_set() for lock in locks)
    assert admin.execute("SELECT count(*) FROM dsync_leases WHERE lease LIKE %s",
                         (f"{name}-%",)).fetchone()[0] == 0
    with pytest.raises(DsyncError):
        locks[0].acquire()


def test_default_clients_are_shared(server, admin, name):
    """Objects made with the same conninfo share one client: fifty held
    locks cost one keeper."""
    dsn = server.dsn() + " application_name=shared-" + name[:20]
    locks = [Lock(f"{name}-{i}", conninfo=dsn, ttl=30) for i in range(50)]
    for lock in locks:
        assert lock.acquire()
    assert len({id(lock.client) for lock in locks}) == 1
    assert app_connections(admin, "shared-" + name[:20]) <= 3
    for lock in locks:
        lock.release()


# -- elections --------------------------------------------------------------------------------

def test_leader_exists_is_a_property_that_never_waits(dsn, name):
    """A follower's campaign waits in the server for seconds at a time;
    its properties answer from what it saw, without a statement."""
    leader = LeaderElection(name, conninfo=dsn, ttl=15, member="leader").start()
    assert wait_for(lambda: leader.is_leader, 10)
    follower = LeaderElection(name, conninfo=dsn, ttl=15, member="follower").start()
    assert wait_for(lambda: follower.leader_exists, 10)
    time.sleep(0.5)                            # the campaign is inside its wait now
    t0 = time.monotonic()
    for _ in range(1000):
        assert follower.leader_exists          # a property: `if el.leader_exists:` is right
        status = follower.status
    took = time.monotonic() - t0
    assert took < 1.0, "the properties waited for the campaign"
    assert status["leader"] == "leader" and not status["is_leader"] and status["running"]
    assert leader.status["is_leader"] and leader.status["token"] == leader.token
    follower.stop()
    leader.stop()


def test_no_hang_when_another_thread_asks(dsn, name):
    """A LeaderElection and a second thread asking leader()/members() over
    and over (1.4 hung within 8 calls): every call returns."""
    e = LeaderElection(name, conninfo=dsn, ttl=3, member="m").start()
    answers = []

    def ask():
        for _ in range(200):
            answers.append((e.leader(), len(e.members()), e.leader_exists))
    threads = [threading.Thread(target=ask) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(answers) == 400
    # The 400 calls can all be answered before the first campaign wins (a
    # loaded machine, through PgBouncer): the elector leads by and by.
    assert wait_for(lambda: e.leader() == "m", 10)
    e.stop()


# -- semaphores -------------------------------------------------------------------------------

def test_semaphore_attach_and_mismatch(dsn, name):
    created = Semaphore.create(name, 3, conninfo=dsn)
    assert created.get_count() == 3
    with pytest.raises(SemaphoreMismatch) as err:
        Semaphore(name, 4, conninfo=dsn)
    assert isinstance(err.value, ValueError)
    assert isinstance(err.value.__cause__, psycopg.errors.DuplicateObject)
    attached = Semaphore.attach(name, conninfo=dsn)
    assert attached.permits == 3
    with pytest.raises(SemaphoreNotFound):
        Semaphore.attach(name + "-none", conninfo=dsn, timeout=0.2)
    # attach waits for a creator that comes later.
    later = threading.Timer(0.3, lambda: Semaphore(name + "-later", 2, conninfo=dsn))
    later.start()
    assert Semaphore.attach(name + "-later", conninfo=dsn, timeout=10).permits == 2
    later.join()


def test_async_semaphore_attach(dsn, name):
    async def main():
        client = AsyncClient(dsn)
        with pytest.raises(SemaphoreMismatch):
            await AsyncSemaphore.create(name, 2, client=client)
            await AsyncSemaphore.create(name, 3, client=client)
        sem = await client.semaphore(name)
        assert sem.permits == 2
        async with sem:
            assert sem.held
        await client.close()
    asyncio.run(main())


# -- errors ----------------------------------------------------------------------------------

def test_errors_are_dsync_errors_with_the_cause(server, name):
    with pytest.raises(DsyncConnectionError) as err:
        Client("host=/nonexistent port=1 dbname=app connect_timeout=2").lock(name).acquire()
    assert isinstance(err.value, ConnectionError)
    assert isinstance(err.value.__cause__, psycopg.OperationalError)
    lock = Lock(name, conninfo=server.dsn(), ttl=timedelta(days=2))
    with pytest.raises(InvalidArgument) as err:
        lock.acquire()
    assert err.value.sqlstate.startswith("22") and isinstance(err.value, ValueError)
    assert "max_ttl" in str(err.value)
    with pytest.raises(ValueError):
        Lock("x" * 256, conninfo=server.dsn())
    holder = Lock(name, conninfo=server.dsn(), ttl=30)
    assert holder.acquire()
    other = Lock(name, conninfo=server.dsn(), ttl=30, timeout=0.2)
    with pytest.raises(AcquireTimeout) as err:
        with other:
            pass
    assert isinstance(err.value, TimeoutError)
    holder.release()


# Python 3.12+ warns of fork() in a process with threads: forking one is
# what these tests are about.
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded")
def test_a_client_is_not_used_after_fork(server, name):
    client = Client(server.dsn())
    lock = client.lock(name, ttl=30)
    assert lock.acquire()
    pid = os.fork()
    if pid == 0:                                # the child: refused, the parent untouched
        try:
            client.lock(name + "-child").acquire()
        except DsyncError as exc:
            os._exit(0 if "forked" in str(exc) else 2)
        os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    assert lock.owned() and lock.release()
    client.close()


def _silent_server():
    """A TCP port that accepts connections and never answers: a server
    that is stopped, or behind a network that drops its replies."""
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(64)
    return s, f"host=127.0.0.1 port={s.getsockname()[1]} dbname=app user=app"


def _ends(fn, within):
    """Run fn in a thread: what it raised, or 'hung' if it did not end
    within the given seconds."""
    out = []

    def run():
        try:
            fn()
            out.append(None)
        except BaseException as exc:         # noqa: B902 (reported to the test)
            out.append(exc)
    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(within)
    return out[0] if out else "hung"


def test_connecting_to_a_silent_server_times_out():
    """libpq waits for ever to connect unless told: every connection the
    clients open has a connect timeout (5 s by default), so a call fails
    with DsyncConnectionError instead of hanging for the whole outage."""
    sock, dsn = _silent_server()
    try:
        client = Client(dsn)
        lock = client.lock("silent", ttl=10)
        err = _ends(lambda: lock.acquire(blocking=False), 60)
        assert isinstance(err, DsyncConnectionError), err
        client.close()
        err = _ends(lambda: next(iter(watch(["silent"], conninfo=dsn, reconnect=False))), 60)
        assert isinstance(err, psycopg.OperationalError), err

        async def aio():
            aclient = AsyncClient(dsn)
            try:
                await aclient.lock("silent", ttl=10).acquire(blocking=False)
            finally:
                await aclient.close()
        err = _ends(lambda: asyncio.run(aio()), 60)
        assert isinstance(err, DsyncConnectionError), err
    finally:
        sock.close()


def test_the_connect_timeout_is_the_callers_to_set(monkeypatch):
    """connect_timeout given as a keyword, in the conninfo string or in
    PGCONNECT_TIMEOUT wins over dsync's default."""
    from dsync._common import CONNECT_TIMEOUT, ConnectionSettings
    assert ConnectionSettings("dbname=x", None, {}).kwargs["connect_timeout"] == CONNECT_TIMEOUT
    assert ConnectionSettings("dbname=x", None, {"connect_timeout": 9}).kwargs[
        "connect_timeout"] == 9
    assert "connect_timeout" not in ConnectionSettings("dbname=x connect_timeout=9", None,
                                                       {}).kwargs
    monkeypatch.setenv("PGCONNECT_TIMEOUT", "9")
    assert "connect_timeout" not in ConnectionSettings("dbname=x", None, {}).kwargs


def test_raise_on_failure_raises_as_mongoelector_and_redsync_do(server, name):
    """raise_on_failure=True: a non-blocking acquire that finds the lease
    held raises LockExists, a wait that runs out AcquireTimeout (both
    AcquireTimeout, so redsync's `except ...TimeoutError` shape works)."""
    from dsync import LockExists
    client = Client(server.dsn())
    holder = client.lock(name, ttl=30)
    assert holder.acquire()
    other = Lock(name, conninfo=server.dsn(), ttl=30, raise_on_failure=True)
    with pytest.raises(LockExists):
        other.acquire(blocking=False)
    with pytest.raises(AcquireTimeout) as err:
        other.acquire(timeout=0.2)
    assert not isinstance(err.value, LockExists)
    assert isinstance(err.value, TimeoutError)
    assert client.lock(name, ttl=30).acquire(blocking=False) is False   # the default answers
    assert holder.release()
    assert other.acquire(blocking=False)
    assert other.release()

    async def aio():
        from dsync import AsyncLock
        a = AsyncLock(name, conninfo=server.dsn(), ttl=30)
        b = AsyncLock(name, conninfo=server.dsn(), ttl=30, raise_on_failure=True)
        assert await a.acquire()
        with pytest.raises(LockExists):
            await b.acquire(blocking=False)
        with pytest.raises(AcquireTimeout):
            await b.acquire(timeout=0.2)
        assert await a.release()
        await a.close()
        await b.close()
    asyncio.run(aio())
    client.close()


def test_elections_are_ready_after_their_first_attempt(server, name):
    """wait_ready() returns once the first attempt was made (at once for a
    follower: it only tries first), then leader_exists tells the truth;
    cluster_detail is a property, as mongoelector's."""
    a = LeaderElection(name, conninfo=server.dsn(), ttl=30, member="a")
    b = LeaderElection(name, conninfo=server.dsn(), ttl=30, member="b")
    assert not a.ready and not a.wait_ready(0.1)          # not started
    with a:
        assert a.wait_ready(10) and a.is_leader
        with b:
            assert b.wait_ready(10)
            assert b.ready and b.leader_exists and not b.is_leader
            assert {m["member"] for m in b.cluster_detail} == {"a", "b"}

    async def aio():
        from dsync import AsyncLeaderElection

        class Status:
            started_calls = 0

            def started(self, value=None):
                self.started_calls += 1
        c = AsyncLeaderElection(name, conninfo=server.dsn(), ttl=30, member="c")
        status = Status()
        task = asyncio.get_running_loop().create_task(c(task_status=status))
        assert await c.wait_ready(10) and c.is_leader and status.started_calls == 1
        assert [m["member"] for m in await c.cluster_detail] == ["c"]
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        async with AsyncLeaderElection(name, conninfo=server.dsn(), ttl=30, member="d") as d:
            assert await d.wait_ready(10) and d.is_leader
    asyncio.run(aio())


def test_entering_a_client_or_election_fails_fast_on_a_wrong_url(server):
    """`with Client(...)` and `with LeaderElection(...)` connect on entry:
    a wrong connection string raises DsyncConnectionError there."""
    bad = f"host={server.dir} port=1 dbname=app user=app"
    with pytest.raises(DsyncConnectionError):
        with Client(bad):
            pass
    with pytest.raises(DsyncConnectionError):
        with LeaderElection("x", conninfo=bad, ttl=30):
            pass

    async def aio():
        from dsync import AsyncLeaderElection
        with pytest.raises(DsyncConnectionError):
            async with AsyncClient(bad):
                pass
        with pytest.raises(DsyncConnectionError):
            async with AsyncLeaderElection("x", conninfo=bad, ttl=30):
                pass
    asyncio.run(aio())


def test_a_contended_acquire_whose_time_ran_out_still_tries_once(dsn):
    """A name found taken lately is waited for at once, without a try; if
    the caller's time ran out meanwhile, one statement (a wait of 0) is
    still sent rather than none (found in review: 2 of 2,000 acquires with
    a 4 µs timeout sent nothing)."""
    from dsync import _sql as sql
    client = Client(dsn)
    sent = []

    def query(statement, params, what, **kw):
        sent.append(params[3])
        return None
    client._query = query
    client._contention.wait_at_once = lambda *a: True
    token, _ = client._acquire(sql.ACQUIRE, ("n", "h", timedelta(seconds=30), None), True,
                               time.monotonic() - 1, "acquiring")
    assert token is None and sent == [timedelta(0)]
    client.close()
