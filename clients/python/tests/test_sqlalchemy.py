"""dsync.sqlalchemy against a real server, on Debian's SQLAlchemy (1.4, on
psycopg2; on psycopg 3 too where SQLAlchemy is 2.x): a guard in a Session's
and in a Connection's transaction, a stale writer refused by the
dsync_fenced trigger and raised as StaleToken, and a second owner of a
shared lock object guarding under its own holder name."""

import threading

import psycopg
import pytest
import sqlalchemy
from sqlalchemy import text
from sqlalchemy.orm import Session

import dsync
from dsync.sqlalchemy import fenced_update, guard, translate_errors, translated

SA2 = int(sqlalchemy.__version__.split(".")[0]) >= 2
DRIVERS = ["psycopg2"] + (["psycopg"] if SA2 else [])


def _url(dsn, driver):
    parts = dict(p.split("=", 1) for p in dsn.split())
    return (f"postgresql+{driver}://{parts['user']}@/{parts['dbname']}"
            f"?host={parts['host']}&port={parts['port']}")


@pytest.fixture(params=DRIVERS)
def engine(request, direct):
    eng = sqlalchemy.create_engine(_url(direct, request.param))
    yield eng
    eng.dispose()


def test_guard_in_a_session_and_a_connection(engine, client, name):
    lock = client.lock(name, ttl=30)
    with lock:
        hold = lock.hold
        with Session(engine) as session, session.begin():
            token = guard(lock, session)
            assert token == lock.token and isinstance(token, int)
            assert lock.guard(session) == token          # Lock.guard takes a Session too
        with engine.begin() as conn:
            assert guard(lock, conn) == token
            assert lock.guard(conn) == token
    # Not held any more: NotHeld, and the transaction is to be rolled back
    # (the lock object refuses before any statement; a Hold handed over
    # is refused by the server).
    with Session(engine) as session:
        with pytest.raises(dsync.NotHeld) as ei:
            guard(lock, session)
        assert ei.value.sqlstate is None
        with pytest.raises(dsync.NotHeld) as ei:
            guard(hold, session)
        assert ei.value.sqlstate == "55000"
        assert isinstance(ei.value.__cause__, sqlalchemy.exc.DBAPIError)
        session.rollback()


class AppSession(Session):
    """An application's own Session class (its module is not SQLAlchemy's)."""


def test_lock_guard_takes_a_session_subclass(engine, client, name):
    lock = client.lock(name, ttl=30)
    with lock:
        with AppSession(engine) as session, session.begin():
            assert lock.guard(session) == lock.token


def test_stale_writer_is_refused_and_raised_as_stale_token(engine, client, admin, account, name):
    lock = client.lock(name, ttl=30)
    assert lock.acquire()
    old = lock.token
    with Session(engine) as session, session.begin():
        assert fenced_update(session, account, old, account.c.id == 1,
                             balance=account.c.balance - 10) == 1
    # The lease moves on: an administrator takes it away, another holder
    # gets it and writes with its newer token.
    admin.execute("SELECT dsync_force_release(%s)", (name,))
    other = client.lock(name, ttl=30, holder="other")
    assert other.acquire(blocking=False)
    with engine.begin() as conn:
        fenced_update(conn, account, other.token, account.c.id == 1, balance=50)
    # The first holder, still believing it holds the lease, writes late.
    with Session(engine) as session:
        with pytest.raises(dsync.StaleToken) as ei:
            with session.begin():
                fenced_update(session, account, old, account.c.id == 1, balance=0)
    err = ei.value
    assert err.sqlstate == "55000" and (err.token, err.accepted) == (old, other.token)
    assert err.resource == f"table:public.{account.name}"
    assert isinstance(err.__cause__, sqlalchemy.exc.OperationalError)
    with engine.connect() as conn:
        assert conn.execute(sqlalchemy.select(account.c.balance)).scalar() == 50
    other.release()
    lock.close()


def test_translate_errors_listener_and_context_manager(engine, client, account, name):
    """Any statement of the engine, ORM or text(), raises StaleToken once
    translate_errors(engine) is installed; translated() does it for a
    block without the listener."""
    lock = client.lock(name, ttl=30)
    with lock:
        stale = lock.token
    with lock:
        with engine.begin() as conn:
            fenced_update(conn, account, lock.token, account.c.id == 1, balance=1)
    update = text(f"UPDATE {account.name} SET balance = 2, token = :t")
    with pytest.raises(sqlalchemy.exc.OperationalError):     # untranslated: the bare 55000
        with engine.begin() as conn:
            conn.execute(update, {"t": stale})
    with pytest.raises(dsync.StaleToken):
        with translated(), engine.begin() as conn:
            conn.execute(update, {"t": stale})
    translate_errors(engine)
    translate_errors(engine)                                  # idempotent
    with pytest.raises(dsync.StaleToken) as ei:
        with Session(engine) as session, session.begin():
            session.execute(update, {"t": stale})
    assert ei.value.sqlstate == "55000"
    # Errors that are not dsync's pass unchanged.
    with pytest.raises(sqlalchemy.exc.DataError):
        with engine.begin() as conn:
            conn.execute(text("SELECT 1/0"))


def test_second_owner_of_a_shared_lock_guards_under_its_own_name(engine, client, name):
    """A ReadLock shared by two threads: both hold at once, the second
    under holder#2.  lock.holder answers each thread's own name, and the
    guard of each passes in its own session."""
    lock = client.read_lock(name, ttl=30)
    first_in = threading.Event()
    second_done = threading.Event()
    seen = {}

    def owner(key, wait_for=None, then=None):
        try:
            with lock:
                if then is not None:
                    then.set()
                if wait_for is not None:
                    assert wait_for.wait(30)
                with Session(engine) as session, session.begin():
                    seen[key] = (lock.holder, lock.hold.holder, guard(lock, session),
                                 lock.token)
        except BaseException as exc:   # seen in the main thread's assert
            seen[key] = exc

    t1 = threading.Thread(target=owner, args=("first", second_done, first_in))
    t1.start()
    assert first_in.wait(30)
    t2 = threading.Thread(target=owner, args=("second", None, None))
    t2.start()
    t2.join(30)
    second_done.set()
    t1.join(30)
    first, second = seen["first"], seen["second"]
    assert not isinstance(first, BaseException), first
    assert not isinstance(second, BaseException), second
    assert first[0] == first[1] == lock._owners.base
    assert second[0] == second[1] == lock._owners.base + "#2"
    assert first[2] == first[3] and second[2] == second[3]
    # The main thread holds nothing: holder is the object's own name.
    assert lock.holder == lock._owners.base


def test_extension_missing_through_sqlalchemy(server, name):
    """The clear error through SQLAlchemy too (translate on psycopg2)."""
    with psycopg.connect(server.dsn("postgres", "postgres"), autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS sa_noext")
        conn.execute("CREATE DATABASE sa_noext OWNER app")
    eng = translate_errors(sqlalchemy.create_engine(_url(server.dsn(db="sa_noext"), "psycopg2")))
    try:
        with pytest.raises(dsync.ExtensionNotCreated) as ei:
            with eng.begin() as conn:
                conn.execute(text("SELECT dsync_leader(CAST(:n AS text))"), {"n": name})
        assert 'database "sa_noext"' in str(ei.value)
        assert "CREATE EXTENSION dsync" in ei.value.hint
    finally:
        eng.dispose()
