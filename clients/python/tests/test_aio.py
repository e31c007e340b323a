"""The asyncio API against a real server (pytest without plugins: each
test runs its own event loop)."""

import asyncio
import time

import pytest

from conftest import stop_worker_asleep
from dsync import errors
from dsync import (AsyncClient, AsyncEvent, AsyncLeaderElection, AsyncLock, AsyncReadLock,
                   AsyncSemaphore, LockLost, NotHeld, awatch)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def test_async_lock_cycle(dsn, name):
    async def main():
        async with AsyncLock(name, conninfo=dsn, ttl=30, info={"k": [1, 2]}) as lock:
            assert isinstance(lock.token, int)
            assert await lock.owned()
            other = AsyncLock(name, conninfo=dsn, ttl=30)
            assert not await other.acquire(blocking=False)
            assert not await other.acquire(timeout=0.2)
            await other.close()
        assert not await lock.locked()
        await lock.close()
    run(main())


def test_cancelled_waiter_leaves_no_waiter(dsn, admin, name):
    """Cancel a task blocked in acquire: its wait ends in the server too."""
    async def main():
        holder = AsyncLock(name, conninfo=dsn, ttl=30)
        assert await holder.acquire()
        waiter = AsyncLock(name, conninfo=dsn, ttl=30)
        task = asyncio.create_task(waiter.acquire())
        for _ in range(200):
            await asyncio.sleep(0.02)
            if admin.execute("SELECT count(*) FROM dsync_waiters WHERE name = %s",
                             (name,)).fetchone()[0] == 1:
                break
        else:
            pytest.fail("the waiter never showed in dsync_waiters")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        for _ in range(200):
            if admin.execute("SELECT count(*) FROM dsync_waiters WHERE name = %s",
                             (name,)).fetchone()[0] == 0:
                break
            await asyncio.sleep(0.01)
        else:
            pytest.fail("a cancelled waiter stayed in dsync_waiters")
        # The holder still holds it, and the next waiter gets it normally.
        assert await holder.owned()
        await holder.release()
        assert await waiter.acquire(timeout=5)
        await waiter.release()
        await holder.close()
        await waiter.close()
    run(main())


def test_async_lost_lease(server, admin, name):
    async def main():
        lost = []
        lock = AsyncLock(name, conninfo=server.dsn(), ttl=30,
                         on_lost=lambda l: lost.append(l.lost_reason))
        assert await lock.acquire()
        await asyncio.sleep(0.2)
        t0 = time.monotonic()
        admin.execute("SELECT dsync_force_release(%s)", (name,))
        await asyncio.wait_for(lock.lost.wait(), 10)
        print(f"\nasyncio lost-lease notice: {(time.monotonic() - t0) * 1000:.1f} ms")
        for _ in range(100):                     # on_lost runs just after
            if lost:
                break
            await asyncio.sleep(0.01)
        assert lost and "released" in lost[0]
        with pytest.raises(LockLost):
            lock.check()
        await lock.close()
    run(main())


def test_async_acquire_after_loss_without_release_starts_a_fresh_hold(server, admin, name):
    """See the thread test of the same name: one release frees the lease
    a task took again after a loss."""
    async def main():
        lock = AsyncLock(name, conninfo=server.dsn(), ttl=1.5)
        assert await lock.acquire()
        admin.execute("SELECT dsync_force_release(%s)", (name,))
        await asyncio.wait_for(lock.lost.wait(), 5)
        assert await lock.acquire()
        assert not lock.lost.is_set()
        assert await lock.release()
        held = "SELECT count(*) FROM dsync_leases WHERE lease = %s"
        assert admin.execute(held, (name,)).fetchone()[0] == 0
        with pytest.raises(NotHeld):
            await lock.release()
        await lock.close()
    run(main())


def test_async_campaign_survives_statement_timeout(server, admin, name):
    """See test_campaign_survives_cancelled_waits: each wait cancelled by
    statement_timeout is retried, on_error may be a coroutine function,
    and the elector leads once the leader goes."""
    async def main():
        other = AsyncLock(name, conninfo=server.dsn(), ttl=30, holder="other")
        assert await other.acquire()
        seen = []

        async def on_error(exc):
            seen.append(exc.sqlstate)
        # Waiting in a backend (queue=False): the waits cancelled here.
        e = AsyncLeaderElection(name, ttl=3, member="m", on_error=on_error, queue=False,
                                conninfo=server.dsn() + " options='-c statement_timeout=200'")
        e.start()
        for _ in range(200):
            if len(seen) >= 3:
                break
            await asyncio.sleep(0.05)
        assert seen[:3] == ["57014"] * 3 and e.running
        assert await other.release()
        for _ in range(200):
            if e.is_leader:
                break
            await asyncio.sleep(0.05)
        assert e.is_leader
        await e.stop()
        await other.close()
    run(main())


def test_async_properties_are_false_after_a_blocked_loop(server, name):
    """An event loop blocked past the ttl (no keeper, no watchdog ran):
    held, is_leader, lost and check() tell the truth the moment it runs."""
    async def main():
        lock = AsyncLock(name, conninfo=server.dsn(), ttl=1.5)
        e = AsyncLeaderElection(name + "-group", conninfo=server.dsn(), ttl=1.5, member="m")
        assert await lock.acquire()
        e.start()
        while not e.is_leader:
            await asyncio.sleep(0.01)
        time.sleep(2.5)                              # blocks the loop
        assert not lock.held
        assert not e.is_leader
        assert lock.lost.is_set()
        with pytest.raises(LockLost):
            lock.check()
        await e.stop()
        await lock.release()
        await lock.close()
    run(main())


def test_async_release_after_a_blocked_loop_reports_the_loss(server, name):
    """A loop blocked past the ttl whose first act is release(): False,
    and on_lost runs (the watchdog had no turn to say it)."""
    from dsync._ledger import OVERDUE

    async def main():
        heard = []
        lock = AsyncLock(name, conninfo=server.dsn(), ttl=1.5,
                         on_lost=lambda hold: heard.append(hold.lost_reason))
        assert await lock.acquire()
        time.sleep(2.5)                              # blocks the loop
        assert await lock.release() is False
        for _ in range(100):
            if heard:
                break
            await asyncio.sleep(0.05)
        assert heard == [OVERDUE]
        await lock.close()
    run(main())


def test_async_read_write_lock(dsn, name):
    async def main():
        r1 = AsyncReadLock(name, conninfo=dsn, ttl=30)
        r2 = AsyncReadLock(name, conninfo=dsn, ttl=30)
        w = AsyncLock(name, conninfo=dsn, ttl=30)
        assert await r1.acquire(blocking=False) and await r2.acquire(blocking=False)
        assert not await w.acquire(blocking=False)
        go = asyncio.Event()

        async def write():
            ok = await w.acquire(timeout=20)
            owned = await w.owned()
            await go.wait()
            return ok, owned, await w.release()
        writer = asyncio.create_task(write())
        await asyncio.sleep(0.3)
        await r1.release()
        await r2.release()
        await asyncio.sleep(0.3)
        assert not await r1.acquire(blocking=False)     # the writer holds it
        go.set()
        assert await writer == (True, True, True)
        with pytest.raises(NotHeld):
            await w.release()                           # not this task's
        assert await r1.acquire(timeout=5)
        await r1.release()
        for x in (r1, r2, w):
            await x.close()
    run(main())


def test_async_semaphore_and_event(dsn, name):
    async def main():
        sems = [AsyncSemaphore(name, 2, conninfo=dsn, ttl=30) for _ in range(3)]
        assert await sems[0].acquire(blocking=False)
        assert await sems[1].acquire(blocking=False)
        assert not await sems[2].acquire(blocking=False)
        await sems[0].release()
        assert await sems[2].acquire(timeout=5)
        for s in sems[1:]:
            assert await s.release()
        for s in sems:
            await s.close()
        ev = AsyncEvent(name + "-ev", conninfo=dsn)
        waiter = asyncio.create_task(ev.wait(timeout=10))
        await asyncio.sleep(0.2)
        setter = AsyncEvent(name + "-ev", conninfo=dsn)
        await setter.set()
        assert await waiter
        assert not await ev.is_set()
        await ev.close()
        await setter.close()
    run(main())


def test_async_leader_election_cancel(dsn, admin, name):
    async def main():
        calls = []
        e = AsyncLeaderElection(name, conninfo=dsn, ttl=3, member="m1",
                                on_leader=lambda: calls.append("+"),
                                on_leader_loss=lambda: calls.append("-"))
        task = e.start()
        for _ in range(200):
            if e.is_leader:
                break
            await asyncio.sleep(0.05)
        assert e.is_leader and e.leader_exists and e.status["leader"] == "m1"
        members = await e.members()
        assert [m["member"] for m in members] == ["m1"] and members[0]["is_leader"]
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert calls == ["+", "-"]
        assert admin.execute("SELECT dsync_leader(%s)", (name,)).fetchone()[0] is None
        assert admin.execute("SELECT count(*) FROM dsync_members(%s)",
                             (name,)).fetchone()[0] == 0
    run(main())


def test_awatch(server, name):
    async def main():
        dsn = server.dsn()
        seen = []

        async def consume():
            async for ev in awatch([name], conninfo=dsn, timeout=3):
                seen.append(ev)
                if ev.kind == "released":
                    return
        task = asyncio.create_task(consume())
        await asyncio.sleep(0.5)
        async with AsyncLock(name, conninfo=dsn, ttl=30, holder="w1"):
            pass
        await task
        kinds = [e.kind for e in seen]
        assert kinds == ["acquired", "released"], kinds
        assert seen[0].fencing == seen[1].fencing and isinstance(seen[0].fencing, int)
    run(main())


def test_awatch_skips_an_event_its_state_already_shows(server, admin, name):
    """As the sync watch: with the worker stopped, awatch starts after a
    grant, shows it in its state, and skips the late "acquired" event."""
    import os
    import signal
    import psycopg

    async def main():
        dsn = server.dsn()
        pid = admin.execute("SELECT sender_pid FROM dsync_stats").fetchone()[0]
        assert pid, "no event sender in dsync_stats"
        lock = AsyncLock(name, conninfo=dsn, ttl=30, holder="h-late")
        it = awatch([name], conninfo=dsn, timeout=5)
        with psycopg.connect(dsn, autocommit=True) as other:
            channel = other.execute("SELECT dsync_channel(%s)", (name + "-other",)).fetchone()[0]
            other.execute(psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(channel)))
            stop_worker_asleep(admin, pid)
            try:
                assert await lock.acquire()
                first = await it.__anext__()
            finally:
                os.kill(pid, signal.SIGCONT)
            assert (first.kind, first.holder, first.fencing) == ("state", "h-late", lock.token)
            await lock.release()
            ev = await it.__anext__()
            assert (ev.kind, ev.holder, ev.fencing) == ("released", "h-late", first.fencing)
        await it.aclose()
        await lock.close()
    run(main())


def test_awatch_resumes_after_reconnect(server, admin, name):
    """awatch's connection is killed while the lease changes hands: after
    the reconnect it replays the missed events once each, in order."""
    async def main():
        dsn = server.dsn()
        app = f"aw-{name}"[:60]
        seen = []

        async def consume():
            async for ev in awatch([name], conninfo=dsn, timeout=5, application_name=app):
                seen.append(ev)
                if (ev.kind, ev.holder) == ("acquired", "w3"):
                    return
        task = asyncio.create_task(consume())
        # Killed only once the watch has started (its last statement
        # before it waits is the senders' query): killed before, it takes
        # the log's position anew and starts with the state (it used to
        # wait for any idle moment, and saw only ('state', 'w3') then).
        from dsync import _sql
        for _ in range(500):
            if admin.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
                             " AND state = 'idle' AND query = %s",
                             (app, _sql.SENDERS)).fetchone()[0]:
                break
            await asyncio.sleep(0.02)
        else:
            raise AssertionError("the watch did not start")
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                      " WHERE application_name = %s", (app,))
        async with AsyncLock(name, conninfo=dsn, ttl=30, holder="w2"):
            pass
        lock = AsyncLock(name, conninfo=dsn, ttl=30, holder="w3")
        await lock.acquire()
        await asyncio.wait_for(task, 30)
        await lock.release()
        assert [(e.kind, e.holder) for e in seen] == \
            [("acquired", "w2"), ("released", "w2"), ("acquired", "w3")]
        assert [e.seq for e in seen] == sorted({e.seq for e in seen})
    run(main())


def test_awatch_refuses_pgbouncer(server, name):
    async def main():
        from dsync import ListenUnavailable
        with pytest.raises(ListenUnavailable):
            async for _ in awatch([name], conninfo=server.dsn(bouncer=True), timeout=1):
                pass
    run(main())


def test_async_with_a_connection_pool(dsn, name):
    async def main():
        from psycopg_pool import AsyncConnectionPool
        async with AsyncConnectionPool(dsn, min_size=1, max_size=4,
                                       kwargs={"prepare_threshold": None}) as pool:
            a = AsyncLock(name, pool=pool, ttl=30)
            b = AsyncLock(name, pool=pool, ttl=30)
            assert await a.acquire()

            async def take():
                ok = await b.acquire(timeout=10)
                return ok, await b.release()
            waiter = asyncio.create_task(take())
            await asyncio.sleep(0.3)
            assert await a.release()
            assert await waiter == (True, True)
            await a.close()
            await b.close()
    run(main())


def test_async_watchdog_before_expiry(server, admin, name):
    import os
    import signal
    from test_sync import _stop_keeper_backend

    async def main():
        app = f"awd-{name}"[:50]
        client = AsyncClient(server.dsn(), application_name=app)
        lock = client.lock(name, ttl=2)
        t0 = time.monotonic()
        assert await lock.acquire()
        pid = await asyncio.to_thread(_stop_keeper_backend, admin, app)

        async def refused(*_a, **_k):
            raise errors.DsyncConnectionError("refused (the test refuses it)")
        client._query = refused                 # the server hangs: no rescue renewal either
        try:
            await asyncio.wait_for(lock.lost.wait(), 5)
            took = time.monotonic() - t0
            print(f"\nasyncio watchdog: loss declared {took:.2f} s after the acquire (ttl 2 s)")
            assert took < 2.0
            assert admin.execute("SELECT count(*) FROM dsync_leases WHERE lease = %s",
                                 (name,)).fetchone()[0] == 1
        finally:
            os.kill(pid, signal.SIGCONT)
        await client.close()
    run(main())


def test_async_stuck_keeper_connection_loses_no_lease(server, admin, name):
    """See test_a_stuck_keeper_connection_loses_no_lease: the asyncio
    watchdog renews over a statement connection before the deadline."""
    import os
    import signal
    from test_sync import _stop_keeper_backend

    async def main():
        app = f"arescue-{name}"[:40]
        client = AsyncClient(server.dsn(), application_name=app)
        lock = client.lock(name, ttl=2)
        assert await lock.acquire()
        token = lock.token
        pid = await asyncio.to_thread(_stop_keeper_backend, admin, app, True)
        try:
            await asyncio.sleep(6)
            assert not lock.lost.is_set() and lock.held
        finally:
            os.kill(pid, signal.SIGCONT)
        assert admin.execute("SELECT fencing FROM dsync_leases WHERE lease = %s",
                             (name,)).fetchone()[0] == token
        assert await lock.release()
        await client.close()
    run(main())


def test_async_keeper_stopped_between_round_trips_leaves_no_lease_locked(server, admin, name):
    """See test_a_keeper_stopped_between_round_trips_leaves_no_lease_locked:
    the asyncio keeper's renewal has ended its transaction when its round
    trip ends."""
    async def main():
        client = AsyncClient(server.dsn())
        lock = client.lock(name, ttl=1.5)
        assert await lock.acquire()
        keeper = client._keeper

        async def no_rescue(batch):
            return None
        keeper._rescue = no_rescue
        for _ in range(100):
            if keeper.conn is not None:
                break
            await asyncio.sleep(0.05)
        conn, stalled, resume = keeper.conn, asyncio.Event(), asyncio.Event()
        real, renewed = conn.execute, []

        async def execute(query, params=None, **kw):
            if renewed:
                stalled.set()
                await resume.wait()
            cur = await real(query, params, **kw)
            if "dsync_renew" in str(query):
                renewed.append(True)
            return cur
        conn.execute = execute
        other = AsyncClient(server.dsn())
        try:
            await asyncio.wait_for(stalled.wait(), 10)
            state = admin.execute("SELECT state FROM pg_stat_activity WHERE pid = %s",
                                  (conn.info.backend_pid,)).fetchone()[0]
            assert state == "idle"
            assert await other.lock(name, ttl=5).acquire(timeout=10)
        finally:
            resume.set()
            await other.close()
            await client.close()
    run(main())


def test_async_leader_reelected_after_forced_loss(server, admin, name):
    async def main():
        calls = []
        e = AsyncLeaderElection(name, conninfo=server.dsn(), ttl=1.5, member="m",
                                on_leader=lambda: calls.append("+"),
                                on_leader_loss=lambda: calls.append("-"))
        e.start()
        for _ in range(200):
            if e.is_leader:
                break
            await asyncio.sleep(0.05)
        assert e.is_leader
        await asyncio.to_thread(admin.execute, "SELECT dsync_force_release(%s)", (name,))
        for _ in range(200):
            if calls[:3] == ["+", "-", "+"]:
                break
            await asyncio.sleep(0.05)
        assert calls[:3] == ["+", "-", "+"], calls
        await asyncio.sleep(3.5)
        assert e.is_leader and calls == ["+", "-", "+"]
        await e.stop()
        assert calls == ["+", "-", "+", "-"]
    run(main())


def test_async_connections_dropped_by_the_server_are_replaced(server, admin, name):
    """As the thread-side test: idle connections the server ended are
    replaced, not failed on."""
    def drop():
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                      " WHERE usename = 'app' AND pid <> pg_backend_pid()")
        time.sleep(0.2)

    async def main():
        lock = AsyncLock(name, conninfo=server.dsn(), ttl=30)
        assert await lock.acquire()
        drop()
        assert await lock.renew() is not None
        drop()
        assert await lock.release()
        drop()
        assert await lock.acquire(blocking=False)
        assert await lock.owned() and not lock.lost.is_set()
        assert await lock.release()
        await lock.close()
    run(main())
