"""dsync.grelmicro.DsyncSyncBackend against the contract of grelmicro's
sync backend protocol (grelmicro.sync.abc.SyncBackend, tag 0.26.0), as
its documentation states it.  grelmicro is not installable here; the
protocol below is written from that documentation, and the last test
drives the backend the way grelmicro's Lock and LeaderElection do
(acquire with a per-task token, renew by acquiring again, release)."""

import asyncio
import inspect
import time
from typing import Protocol, runtime_checkable

import pytest

from dsync import AsyncClient
from dsync.grelmicro import DsyncSyncBackend


@runtime_checkable
class DocumentedSyncBackend(Protocol):
    """The methods grelmicro calls on a backend (all keyword-only)."""

    async def __aenter__(self): ...
    async def __aexit__(self, exc_type, exc_value, traceback): ...
    async def acquire(self, *, name: str, token: str, duration: float) -> bool: ...
    async def release(self, *, name: str, token: str) -> bool: ...
    async def locked(self, *, name: str) -> bool: ...
    async def owned(self, *, name: str, token: str) -> bool: ...


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def test_the_shape_grelmicro_calls(dsn):
    backend = DsyncSyncBackend(dsn)
    assert isinstance(backend, DocumentedSyncBackend)
    for method, params in [("acquire", ["name", "token", "duration"]),
                           ("release", ["name", "token"]), ("locked", ["name"]),
                           ("owned", ["name", "token"])]:
        fn = getattr(backend, method)
        assert inspect.iscoroutinefunction(fn)
        sig = inspect.signature(fn)
        assert list(sig.parameters) == params
        assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in sig.parameters.values())


def test_contract(dsn, admin, name):
    async def main():
        async with DsyncSyncBackend(dsn) as backend:
            # Opening captures the running loop, for grelmicro's thread adapters.
            assert backend._loop is asyncio.get_running_loop()
            assert not await backend.locked(name=name)
            assert await backend.acquire(name=name, token="t1", duration=2)
            assert await backend.locked(name=name)
            assert await backend.owned(name=name, token="t1")
            assert not await backend.owned(name=name, token="t2")
            # Another token is refused at once; the same token extends.
            assert not await backend.acquire(name=name, token="t2", duration=2)
            before = admin.execute("SELECT expires_at FROM dsync_leases WHERE lease = %s",
                                   (name,)).fetchone()[0]
            await asyncio.sleep(0.05)
            assert await backend.acquire(name=name, token="t1", duration=5)
            after = admin.execute("SELECT expires_at FROM dsync_leases WHERE lease = %s",
                                  (name,)).fetchone()[0]
            assert after > before
            # Only the owning token releases.
            assert not await backend.release(name=name, token="t2")
            assert await backend.release(name=name, token="t1")
            assert not await backend.release(name=name, token="t1")
            assert not await backend.locked(name=name)
            # A lease grelmicro stops renewing lapses at its duration.
            assert await backend.acquire(name=name, token="t1", duration=0.5)
            await asyncio.sleep(0.7)
            assert not await backend.locked(name=name)
            assert not await backend.owned(name=name, token="t1")
            assert not await backend.release(name=name, token="t1")
            assert await backend.acquire(name=name, token="t2", duration=1)
            assert await backend.release(name=name, token="t2")
            with pytest.raises(ValueError):
                await backend.acquire(name=name, token="t1", duration=0)
            with pytest.raises(ValueError):
                await backend.acquire(name="", token="t1", duration=1)
        # The client it opened is closed on exit.
        assert backend._client is None
        with pytest.raises(RuntimeError):
            await backend.locked(name=name)
    run(main())


def test_one_winner_among_concurrent_tokens(dsn, name):
    async def main():
        async with DsyncSyncBackend(dsn) as backend:
            results = await asyncio.gather(*(
                backend.acquire(name=name, token=f"worker:task:{i}", duration=5)
                for i in range(20)))
            assert sum(results) == 1
            winner = results.index(True)
            assert await backend.owned(name=name, token=f"worker:task:{winner}")
            assert await backend.release(name=name, token=f"worker:task:{winner}")
    run(main())


def test_url_from_the_environment_and_a_shared_client(server, monkeypatch, name):
    parts = dict(p.split("=", 1) for p in server.dsn().split())
    monkeypatch.setenv("POSTGRES_HOST", parts["host"])
    monkeypatch.setenv("POSTGRES_PORT", parts["port"])
    monkeypatch.setenv("POSTGRES_USER", parts["user"])
    monkeypatch.setenv("POSTGRES_DB", parts["dbname"])

    async def main():
        async with DsyncSyncBackend() as backend:
            assert await backend.acquire(name=name, token="env", duration=5)
            assert await backend.release(name=name, token="env")
        client = AsyncClient(server.dsn())
        async with DsyncSyncBackend(client=client) as backend:
            assert await backend.acquire(name=name, token="c", duration=5)
        # A client given is the caller's: still open after the backend closed.
        assert await client.lock(name).locked()
        async with DsyncSyncBackend(client=client) as backend:
            assert await backend.release(name=name, token="c")
        await client.close()
    run(main())
    monkeypatch.delenv("POSTGRES_HOST")
    with pytest.raises(ValueError):
        DsyncSyncBackend()


def test_driven_as_grelmicro_drives_it(dsn, name):
    """Three workers' leader elections as grelmicro runs them: each task
    acquires with its own token every renew interval (acquiring again is
    the renewal) and releases when cancelled; one leader at a time, and
    another takes over after the leader's task is cancelled."""
    async def main():
        async with DsyncSyncBackend(dsn) as backend:
            leaders = []
            overlaps = []

            async def elect(worker):
                token = f"{worker}:task:{id(asyncio.current_task())}"
                try:
                    while True:
                        if await backend.acquire(name=name, token=token, duration=1.0):
                            if worker not in leaders:
                                leaders.append(worker)
                            holders = [w for w in ("w1", "w2", "w3")
                                       if await backend.owned(name=name, token=f"{w}:task:"
                                                              f"{ids[w]}")]
                            if len(holders) > 1:
                                overlaps.append(holders)
                        await asyncio.sleep(0.2)
                finally:
                    await backend.release(name=name, token=token)
            ids = {}
            tasks = {}
            for w in ("w1", "w2", "w3"):
                tasks[w] = asyncio.create_task(elect(w))
                ids[w] = id(tasks[w])
            await asyncio.sleep(1.0)
            first = leaders[0]
            tasks[first].cancel()
            t0 = time.monotonic()
            while len(leaders) < 2 and time.monotonic() - t0 < 5:
                await asyncio.sleep(0.05)
            assert len(leaders) == 2 and leaders[1] != first
            for t in tasks.values():
                t.cancel()
            await asyncio.gather(*tasks.values(), return_exceptions=True)
            assert overlaps == []
            assert not await backend.locked(name=name)
    run(main())


def test_cancelled_calls_keep_the_pool_and_bound_the_connections(server, admin, name):
    """grelmicro cancels calls that run past its timeouts (a slow server).
    The backend connects on entry; a cancelled call lets its statement
    finish and keeps its connection, so the backend opens no more
    connections than its pool holds (it used to drop the connection of
    every cancelled call and open another: 8 to 59 backends in 2 s)."""
    import psycopg
    from conftest import app_connections
    tag = f"grel-{name}"[:40]
    peak = []
    opened = []

    async def main():
        backend = DsyncSyncBackend(server.dsn(), application_name=tag)
        async with backend:
            assert app_connections(admin, tag) >= 1          # connected on entry
            client = backend._client
            real = client._connect

            async def counting(*args, **kwargs):
                opened.append(1)
                return await real(*args, **kwargs)
            client._connect = counting
            with psycopg.connect(server.dsn("app", "postgres")) as slow:
                # Every statement on the leases waits until this commits.
                slow.execute("LOCK TABLE dsync_lease IN ACCESS EXCLUSIVE MODE")
                for _ in range(30):
                    with pytest.raises(asyncio.TimeoutError):
                        await asyncio.wait_for(backend.locked(name=name), 0.05)
                    peak.append(app_connections(admin, tag))
            await asyncio.sleep(0.3)
            assert await backend.acquire(name=name, token="t", duration=5)
            assert await backend.release(name=name, token="t")
    run(main())
    print(f"\ngrelmicro backend, 30 calls cancelled in the server: {len(opened)} connections "
          f"opened, at most {max(peak)} at once")
    assert len(opened) <= 2 and max(peak) <= 2, (len(opened), peak)
