"""Blocking acquires wait in the line without a connection (dsync_queue):
a thousand waiters in one process cost a few server connections, the line
is first come, first served across clients, and a timeout or a cancel
leaves nothing queued (all checked on the server)."""

import asyncio
import threading
import time

import pytest

from conftest import app_connections, wait_for
from dsync import AsyncClient, Client, Lock

N = 1000


def _queued(admin, name, like=False):
    op = "LIKE" if like else "="
    return admin.execute(f"SELECT count(*) FROM dsync_waiters WHERE name {op} %s"
                         " AND kind = 'queued'", (name,)).fetchone()[0]


def test_a_thousand_threads_on_one_name_use_few_connections(server, admin, name):
    app = f"q1:{name}"[:50]
    holder = Lock(name, conninfo=server.dsn(), ttl=30)
    assert holder.acquire()
    client = Client(server.dsn(), application_name=app)
    lock = client.lock(name, ttl=30)
    got = []
    mutex = threading.Lock()

    def waiter():
        assert lock.acquire(timeout=120)
        with mutex:
            got.append(1)
        lock.release()
    threads = [threading.Thread(target=waiter) for _ in range(N)]
    for t in threads:
        t.start()
    assert wait_for(lambda: _queued(admin, name) == N, 60, 0.1), _queued(admin, name)
    conns = app_connections(admin, app)
    print(f"\n{N} threads queued on one name: {conns} server connections")
    assert conns <= 4
    holder.release()
    for t in threads:
        t.join(120)
    assert len(got) == N
    assert _queued(admin, name) == 0
    holder.close()
    client.close()


def test_a_thousand_tasks_on_a_thousand_names_use_few_connections(server, admin, name):
    app = f"q2:{name}"[:50]
    names = [f"{name}/{i}" for i in range(N)]
    owner = Client(server.dsn())
    held = [owner.lock(n, ttl=60) for n in names]
    taken, give_back = threading.Event(), threading.Event()

    def hold_all():
        # A lock is released by the thread that took it.
        for h in held:
            assert h.acquire()
        taken.set()
        give_back.wait(120)
        for h in held:
            h.release()
    holding = threading.Thread(target=hold_all)
    holding.start()
    assert taken.wait(60)

    async def main():
        client = AsyncClient(server.dsn(), application_name=app)
        locks = [client.lock(n, ttl=30) for n in names]

        async def one(lock):
            assert await lock.acquire(timeout=120)
            await lock.release()
            return 1
        tasks = [asyncio.create_task(one(lk)) for lk in locks]
        deadline = time.monotonic() + 60
        while _queued(admin, name + "/%", like=True) < N and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert _queued(admin, name + "/%", like=True) == N
        conns = app_connections(admin, app)
        print(f"\n{N} tasks queued on {N} names: {conns} server connections")
        assert conns <= 4
        give_back.set()
        assert sum(await asyncio.wait_for(asyncio.gather(*tasks), 120)) == N
        await client.close()
    asyncio.run(main())
    holding.join(60)
    assert _queued(admin, name + "/%", like=True) == 0
    owner.close()


def test_first_come_first_served_across_clients(server, admin, name):
    """Two clients (two keepers, two sets of connections: as two processes
    are to the server) queue in turn: the grants follow the order they
    queued in, whichever client each came through."""
    holder = Lock(name, conninfo=server.dsn(), ttl=30)
    assert holder.acquire()
    clients = [Client(server.dsn()), Client(server.dsn())]
    order = []
    threads = []
    for i, who in enumerate(["a1", "b1", "a2", "b2", "a3"]):
        lock = clients[0 if who[0] == "a" else 1].lock(name, ttl=30)

        def waiter(lock=lock, who=who):
            assert lock.acquire(timeout=60)
            order.append(who)
            lock.release()
        t = threading.Thread(target=waiter)
        t.start()
        threads.append(t)
        assert wait_for(lambda: _queued(admin, name) == i + 1, 10)
    holder.release()
    for t in threads:
        t.join(60)
    assert order == ["a1", "b1", "a2", "b2", "a3"]
    holder.close()
    for c in clients:
        c.close()


def test_a_timeout_leaves_nothing_queued(dsn, admin, name):
    holder = Lock(name, conninfo=dsn, ttl=30)
    assert holder.acquire()
    lock = Lock(name, conninfo=dsn, ttl=30)
    t0 = time.monotonic()
    assert not lock.acquire(timeout=1)
    assert time.monotonic() - t0 < 5
    assert _queued(admin, name) == 0
    # The next one still gets it at the release, at once.
    nxt = Lock(name, conninfo=dsn, ttl=30)
    holder.release()
    assert nxt.acquire(timeout=5)
    nxt.release()
    for lk in (holder, lock, nxt):
        lk.close()


def test_a_cancelled_task_leaves_nothing_queued(server, admin, name):
    holder = Lock(name, conninfo=server.dsn(), ttl=30)
    assert holder.acquire()

    async def main():
        client = AsyncClient(server.dsn())
        lock = client.lock(name, ttl=30)
        task = asyncio.create_task(lock.acquire())
        deadline = time.monotonic() + 10
        while _queued(admin, name) == 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert _queued(admin, name) == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        deadline = time.monotonic() + 5
        while _queued(admin, name) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert _queued(admin, name) == 0
        await client.close()
    asyncio.run(main())
    holder.release()
    holder.close()
