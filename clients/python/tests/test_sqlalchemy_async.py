"""dsync.sqlalchemy from async SQLAlchemy (AsyncEngine, AsyncSession) on
asyncpg, against a real server: the sync guard() and fenced_update() run
through `await session.run_sync(fn)` / `await conn.run_sync(fn)` in the
caller's transaction, with an AsyncLock of an AsyncClient; a stale writer
is refused and raised as StaleToken, a guard refused as NotHeld (asyncpg's
errors translated like psycopg's); two tasks sharing an AsyncReadLock each
guard under their own holder name (run_sync's greenlet runs in the
caller's task)."""

import asyncio

import psycopg
import pytest

pytest.importorskip("asyncpg")
pytest.importorskip("greenlet")
sqlalchemy = pytest.importorskip("sqlalchemy")
sa_asyncio = pytest.importorskip("sqlalchemy.ext.asyncio")

from sqlalchemy import text  # noqa: E402

import dsync  # noqa: E402
from dsync import AsyncClient  # noqa: E402
from dsync.sqlalchemy import fenced_update, guard, translate_errors  # noqa: E402

AsyncSession, create_async_engine = sa_asyncio.AsyncSession, sa_asyncio.create_async_engine


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def run_with(direct, body):
    """Run body(engine, client) with an AsyncEngine on asyncpg and an
    AsyncClient of the test's database, both closed after."""
    async def main():
        engine = create_async_engine(_url(direct))
        client = AsyncClient(direct)
        try:
            await body(engine, client)
        finally:
            await client.close()
            await engine.dispose()
    run(main())


def _url(dsn):
    parts = dict(p.split("=", 1) for p in dsn.split())
    return (f"postgresql+asyncpg://{parts['user']}@/{parts['dbname']}"
            f"?host={parts['host']}&port={parts['port']}")


def test_guard_and_fenced_update_through_run_sync(direct, account, name):
    async def main(engine, client):
        lock = client.lock(name, ttl=30)
        async with lock:
            hold = lock.hold
            async with AsyncSession(engine) as session, session.begin():
                token = await session.run_sync(lambda s: guard(lock, s))
                assert token == lock.token and isinstance(token, int)
                assert await session.run_sync(lambda s: fenced_update(
                    s, account, token, account.c.id == 1,
                    balance=account.c.balance - 5)) == 1
            async with engine.begin() as conn:
                assert await conn.run_sync(lambda c: guard(lock, c)) == token
        # Not held any more: NotHeld, at once from the lock object, and
        # translated from asyncpg's error for a Hold handed over.
        async with AsyncSession(engine) as session:
            with pytest.raises(dsync.NotHeld):
                await session.run_sync(lambda s: guard(lock, s))
            with pytest.raises(dsync.NotHeld) as ei:
                await session.run_sync(lambda s: guard(hold, s))
            assert ei.value.sqlstate == "55000"
            assert isinstance(ei.value.__cause__, sqlalchemy.exc.DBAPIError)
            await session.rollback()
        async with engine.connect() as conn:
            row = (await conn.execute(sqlalchemy.select(account.c.balance,
                                                        account.c.token))).one()
        assert tuple(row) == (95, token)
    run_with(direct, main)


def test_stale_writer_is_refused_and_raised_as_stale_token(direct, admin, account, name):
    async def main(engine, client):
        lock = client.lock(name, ttl=30)
        assert await lock.acquire()
        old = lock.token
        async with AsyncSession(engine) as session, session.begin():
            await session.run_sync(lambda s: fenced_update(
                s, account, old, account.c.id == 1, balance=account.c.balance - 10))
        # The lease moves on: an administrator takes it away, another
        # holder gets it and writes with its newer token.
        admin.execute("SELECT dsync_force_release(%s)", (name,))
        other = client.lock(name, ttl=30, holder="other")
        assert await other.acquire(blocking=False)
        async with engine.begin() as conn:
            await conn.run_sync(lambda c: fenced_update(
                c, account, other.token, account.c.id == 1, balance=50))
        # The first holder, still believing it holds the lease, writes late.
        async with AsyncSession(engine) as session:
            with pytest.raises(dsync.StaleToken) as ei:
                async with session.begin():
                    await session.run_sync(lambda s: fenced_update(
                        s, account, old, account.c.id == 1, balance=0))
        err = ei.value
        assert err.sqlstate == "55000" and (err.token, err.accepted) == (old, other.token)
        assert err.resource == f"table:public.{account.name}"
        assert isinstance(err.__cause__, sqlalchemy.exc.DBAPIError)
        async with engine.connect() as conn:
            assert (await conn.execute(sqlalchemy.select(account.c.balance))).scalar() == 50
        await other.release()
        await lock.close()
    run_with(direct, main)


def test_translate_errors_on_an_async_engine(direct, account, name):
    """translate_errors() takes an AsyncEngine (its sync_engine gets the
    listener): a plain awaited statement raises StaleToken, not only the
    ones run through run_sync."""
    async def main(engine, client):
        lock = client.lock(name, ttl=30)
        async with lock:
            stale = lock.token
        async with lock:
            async with engine.begin() as conn:
                await conn.run_sync(lambda c: fenced_update(
                    c, account, lock.token, account.c.id == 1, balance=1))
        update = text(f"UPDATE {account.name} SET balance = 2, token = :t")
        with pytest.raises(sqlalchemy.exc.DBAPIError) as ei:   # untranslated
            async with engine.begin() as conn:
                await conn.execute(update, {"t": stale})
        assert not isinstance(ei.value, dsync.DsyncError)
        assert translate_errors(engine) is engine
        translate_errors(engine)                                   # idempotent
        with pytest.raises(dsync.StaleToken) as ei:
            async with AsyncSession(engine) as session, session.begin():
                await session.execute(update, {"t": stale})
        assert ei.value.sqlstate == "55000" and ei.value.token == stale
        # Errors that are not dsync's pass unchanged.
        with pytest.raises(sqlalchemy.exc.DBAPIError) as ei:
            async with engine.begin() as conn:
                await conn.execute(text("SELECT 1/0"))
        assert not isinstance(ei.value, dsync.DsyncError)
    run_with(direct, main)


def test_two_tasks_sharing_a_read_lock_guard_under_their_own_names(direct, name):
    """run_sync's function runs in the awaiting task (a greenlet of it), so
    lock.holder there is that task's own holder name: holder#2 for the
    second owner of a shared AsyncReadLock; `await lock.guard(session)`
    guards under it too."""
    async def main(engine, client):
        lock = client.read_lock(name, ttl=30)
        first_in, second_done = asyncio.Event(), asyncio.Event()
        seen = {}

        async def owner(key, wait_for=None, then=None):
            async with lock:
                if then is not None:
                    then.set()
                if wait_for is not None:
                    await wait_for.wait()
                async with AsyncSession(engine) as session, session.begin():
                    seen[key] = (lock.holder, await session.run_sync(
                        lambda s: (lock.holder, guard(lock, s))), lock.token)
                    assert await lock.guard(session) == lock.token

        first = asyncio.create_task(owner("first", second_done, first_in))
        await first_in.wait()
        await owner("second")
        second_done.set()
        await first
        base = lock._owners.base
        assert seen["first"] == (base, (base, seen["first"][2]), seen["first"][2])
        assert seen["second"] == (base + "#2", (base + "#2", seen["second"][2]),
                                  seen["second"][2])
        assert seen["first"][2] != seen["second"][2]     # each owner's own token
    run_with(direct, main)


def test_extension_missing_through_async_sqlalchemy(server, name):
    with psycopg.connect(server.dsn("postgres", "postgres"), autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS saa_noext")
        conn.execute("CREATE DATABASE saa_noext OWNER app")

    async def main():
        engine = translate_errors(create_async_engine(_url(server.dsn(db="saa_noext"))))
        try:
            with pytest.raises(dsync.ExtensionNotCreated) as ei:
                async with engine.begin() as conn:
                    await conn.execute(text("SELECT dsync_leader(CAST(:n AS text))"),
                                       {"n": name})
            assert "CREATE EXTENSION dsync" in ei.value.hint
            # The guard translates without the listener too (the lease held
            # in the database that has the extension, the guard run in the one
            # that has not).
            plain = create_async_engine(_url(server.dsn(db="saa_noext")))
            client = AsyncClient(server.dsn())
            try:
                lock = client.lock(name)
                with pytest.raises(dsync.ExtensionNotCreated):
                    async with lock, AsyncSession(plain) as session, session.begin():
                        await lock.guard(session)
            finally:
                await client.close()
                await plain.dispose()
        finally:
            await engine.dispose()
    run(main())


def test_lock_guard_takes_an_async_session_and_connection(direct, account, name):
    """`await lock.guard(x)` of an AsyncLock takes an AsyncSession or an
    AsyncConnection (or an async_scoped_session) as the sync guard takes a
    Session or Connection: the token as an int, in the caller's
    transaction (its fenced write lands
    with it), NotHeld (translated from asyncpg's error) once released."""
    async def main(engine, client):
        lock = client.lock(name, ttl=30)
        async with lock:
            hold = lock.hold
            async with AsyncSession(engine) as session, session.begin():
                token = await lock.guard(session)
                assert token == lock.token and type(token) is int
                await session.run_sync(lambda s: fenced_update(
                    s, account, token, account.c.id == 1, balance=account.c.balance - 5))
            async with engine.begin() as conn:
                assert await lock.guard(conn) == token
                # The guard is in this transaction: it holds the lease's row.
                pid = (await conn.execute(text("SELECT pg_backend_pid()"))).scalar()
                async with engine.connect() as other:
                    held = (await other.execute(text(
                        "SELECT count(*) FROM pg_locks WHERE pid = :p AND granted"
                        " AND locktype = 'transactionid'"), {"p": pid})).scalar()
                assert held == 1
            scoped = sa_asyncio.async_scoped_session(
                sqlalchemy.orm.sessionmaker(engine, class_=AsyncSession),
                scopefunc=asyncio.current_task)
            async with scoped.begin():
                assert await lock.guard(scoped) == token
            await scoped.remove()
        async with AsyncSession(engine) as session:
            with pytest.raises(dsync.NotHeld) as ei:
                await lock.guard(session)             # holding nothing: no statement
            assert ei.value.sqlstate is None
            with pytest.raises(dsync.NotHeld) as ei:  # a Hold handed over: the server says
                await session.run_sync(lambda s: guard(hold, s))
            assert ei.value.sqlstate == "55000"
            assert isinstance(ei.value.__cause__, sqlalchemy.exc.DBAPIError)
            await session.rollback()
        async with engine.connect() as conn:
            with pytest.raises(dsync.NotHeld):
                await lock.guard(conn)
            await conn.rollback()
            row = (await conn.execute(sqlalchemy.select(account.c.balance,
                                                        account.c.token))).one()
        assert tuple(row) == (95, token)
    run_with(direct, main)

