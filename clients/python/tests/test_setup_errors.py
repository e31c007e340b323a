"""Clear errors for a server set up wrong, and for stale writes (issue 43):
a database without CREATE EXTENSION dsync raises ExtensionNotCreated, a
server that does not preload dsync raises NotPreloaded, each naming the
database and saying what to run or put in postgresql.conf; the keeper
logs one line per distinct failure instead of a traceback per round; a
stale fencing token is StaleToken, and errors.translate maps the
drivers' exceptions (psycopg 3, psycopg2) to these."""

import asyncio
import logging
import os

import psycopg
import psycopg2
import pytest

import dsync
from dsync import errors

from conftest import PGBIN, Server, _as_postgres, wait_for


def _new_database(server, db, extension=None):
    """A fresh database db of the app role; extension: the superuser's
    statement to run in it (CREATE EXTENSION ...)."""
    with psycopg.connect(server.dsn("postgres", "postgres"), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {db} OWNER app")
    if extension:
        with psycopg.connect(server.dsn(db, "postgres"), autocommit=True) as conn:
            conn.execute(extension)
    return server.dsn(db=db)


@pytest.fixture(scope="module")
def noext(server):
    """A database of the app role without the dsync extension."""
    return _new_database(server, "noext")


def _acquire_error(dsn, name, cls):
    """What a non-blocking acquire on a client of dsn raises (cls)."""
    client = dsync.Client(dsn)
    try:
        with pytest.raises(cls) as ei:
            client.lock(name).acquire(blocking=False)
    finally:
        client.close()
    return ei.value


def test_acquire_without_the_extension_says_create_extension(noext, name):
    err = _acquire_error(noext, name, dsync.ExtensionNotCreated)
    assert isinstance(err, dsync.DsyncError)
    assert 'database "noext"' in str(err)
    assert "CREATE EXTENSION dsync" in err.hint and err.hint in str(err)
    assert "shared_preload_libraries" in err.hint
    # Asked pg_extension: the extension is not there at all (not merely
    # out of search_path).
    assert "search_path" not in str(err)
    assert err.sqlstate == "42883"
    assert isinstance(err.__cause__, psycopg.errors.UndefinedFunction)


def test_guard_without_the_extension_in_a_transaction(direct, noext, name):
    # The lease held where the extension is, the guard run where it is not.
    lock = dsync.Client(direct).lock(name)
    try:
        with lock, psycopg.connect(noext) as conn:
            with pytest.raises(dsync.ExtensionNotCreated) as ei:
                with conn.transaction():
                    lock.guard(conn)
        # Inside a transaction nothing more can be asked: it says both causes.
        assert 'database "noext"' in str(ei.value)
        assert "search_path" in str(ei.value)
    finally:
        lock.client.close()


def test_extension_out_of_search_path_says_so(server, admin, name):
    dsn = _new_database(server, "otherschema",
                        "CREATE SCHEMA hidden; CREATE EXTENSION dsync SCHEMA hidden")
    client = dsync.Client(dsn)
    try:
        with pytest.raises(dsync.ServerError) as ei:
            client.lock(name).acquire(blocking=False)
    finally:
        client.close()
    assert not isinstance(ei.value, dsync.ExtensionNotCreated)
    assert 'schema "hidden"' in str(ei.value) and "search_path" in ei.value.hint


def test_async_acquire_without_the_extension(noext, name):
    async def main():
        async with dsync.AsyncClient(noext) as client:
            with pytest.raises(dsync.ExtensionNotCreated) as ei:
                await client.lock(name).acquire(blocking=False)
            return ei.value
    err = asyncio.run(main())
    assert 'database "noext"' in str(err) and "CREATE EXTENSION dsync" in str(err)


def _keeper_lines(caplog):
    return [r for r in caplog.records if r.name == "dsync" and "keeper failed" in r.getMessage()]


def test_keeper_logs_one_line_per_distinct_failure(noext, name, caplog):
    """Without the extension every round of the keeper fails; it says so
    once (no traceback) and retries with a growing pause."""
    client = dsync.Client(noext)
    try:
        with caplog.at_level(logging.INFO, logger="dsync"):
            with pytest.raises(dsync.ExtensionNotCreated):
                client.lock(name).acquire(blocking=False)   # starts the keeper too
            keeper = client._keeper
            assert wait_for(lambda: keeper.attempts >= 4, timeout=60)
        lines = _keeper_lines(caplog)
        assert len(lines) == 1, [r.getMessage() for r in lines]
        assert lines[0].exc_info is None
        assert "ExtensionNotCreated" in lines[0].getMessage()
        assert 'database "noext"' in lines[0].getMessage()
        assert "\n" not in lines[0].getMessage()
        assert isinstance(keeper.error, dsync.ExtensionNotCreated)
        assert not any(r.exc_info for r in caplog.records if r.name == "dsync")
    finally:
        client.close()


def test_async_keeper_logs_one_line_per_distinct_failure(noext, name, caplog):
    async def main():
        client = dsync.AsyncClient(noext)
        try:
            with pytest.raises(dsync.ExtensionNotCreated):
                await client.lock(name).acquire(blocking=False)
            keeper = client.keeper
            keeper.start()
            for _ in range(6000):
                if keeper.attempts >= 4:
                    break
                await asyncio.sleep(0.01)
            assert keeper.attempts >= 4
            assert isinstance(keeper.error, dsync.ExtensionNotCreated)
        finally:
            await client.close()
    with caplog.at_level(logging.INFO, logger="dsync"):
        asyncio.run(main())
    lines = _keeper_lines(caplog)
    assert len(lines) == 1, [r.getMessage() for r in lines]
    assert lines[0].exc_info is None and "ExtensionNotCreated" in lines[0].getMessage()


def _acquire_in_a_loop(acquire, seconds):
    """Call acquire (which fails: the keeper cannot connect) for seconds."""
    import time
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        with pytest.raises(dsync.KeeperUnavailable):
            acquire()


def test_acquires_in_a_loop_do_not_storm_the_keeper(server, name, caplog):
    """Behind a pooler in transaction mode with listen=True the keeper
    fails every round while statements work: an acquire retried in a loop
    (each waiting for the keeper's connection) may end the keeper's pause,
    but not before it has lasted its base interval (KEEPER_RETRY_FIRST)."""
    import time
    from dsync._common import KEEPER_RETRY_FIRST
    client = dsync.Client(server.dsn(bouncer=True), listen=True)
    try:
        lock = client.lock(name, ttl=0.6)
        with caplog.at_level(logging.INFO, logger="dsync"):
            start = time.monotonic()
            _acquire_in_a_loop(lambda: lock.acquire(blocking=False), 3.0)
            took = time.monotonic() - start
        # One try at once, then at most one per base interval.
        assert client._keeper.attempts <= took / KEEPER_RETRY_FIRST + 2, client._keeper.attempts
        assert isinstance(client._keeper.error, dsync.ListenUnavailable)
        assert len(_keeper_lines(caplog)) == 1
    finally:
        client.close()


def test_async_acquires_in_a_loop_do_not_storm_the_keeper(server, name, caplog):
    import time
    from dsync._common import KEEPER_RETRY_FIRST

    async def main():
        client = dsync.AsyncClient(server.dsn(bouncer=True), listen=True)
        try:
            lock = client.lock(name, ttl=0.6)
            start = time.monotonic()
            end = start + 3.0
            while time.monotonic() < end:
                with pytest.raises(dsync.KeeperUnavailable):
                    await lock.acquire(blocking=False)
            took = time.monotonic() - start
            keeper = client.keeper
            assert keeper.attempts <= took / KEEPER_RETRY_FIRST + 2, keeper.attempts
            assert isinstance(keeper.error, dsync.ListenUnavailable)
        finally:
            await client.close()
    with caplog.at_level(logging.INFO, logger="dsync"):
        asyncio.run(main())
    assert len(_keeper_lines(caplog)) == 1


# A probe that does not answer for 20 s (a stuck server), with PROBE's two
# parameters and its four columns.
_STUCK_PROBE = ("SELECT %s::text, %s::text, true, true FROM pg_sleep(20)")


def test_the_probe_keeps_to_the_call_timeout(noext, name, monkeypatch):
    """The diagnosis of a missing function (asking pg_extension) runs
    within the call's call_timeout: a server that does not answer it does
    not hold up a call that had a timeout."""
    import time
    monkeypatch.setattr(errors, "PROBE", _STUCK_PROBE)
    client = dsync.Client(noext, call_timeout=1.5)
    try:
        start = time.monotonic()
        with pytest.raises(dsync.ExtensionNotCreated):
            client.lock(name).acquire(blocking=False)
        assert time.monotonic() - start < 5
        client.ping()               # the cut connection was replaced
    finally:
        client.close()


def test_async_probe_keeps_to_the_call_timeout(noext, name, monkeypatch):
    import time
    monkeypatch.setattr(errors, "PROBE", _STUCK_PROBE)

    async def main():
        async with dsync.AsyncClient(noext, call_timeout=1.5) as client:
            start = time.monotonic()
            with pytest.raises(dsync.ExtensionNotCreated):
                await client.lock(name).acquire(blocking=False)
            assert time.monotonic() - start < 5
    asyncio.run(main())


@pytest.fixture
def droppable(server, name):
    """A database of its own with the extension, for a test to drop it."""
    db = "drop_" + str(abs(hash(name)) % 10**8)
    _new_database(server, db, "CREATE EXTENSION dsync")
    yield db
    with psycopg.connect(server.dsn("postgres", "postgres"), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")


def _drop_extension(server, db):
    with psycopg.connect(server.dsn(db, "postgres"), autocommit=True) as conn:
        conn.execute("DROP EXTENSION dsync")


def _not_created_lines(caplog):
    """The keeper's lines that say the extension is not created.  (A
    renewal running as the extension is dropped may first fail otherwise,
    "could not open relation with OID ...": a line of its own.)"""
    return [r.getMessage() for r in _keeper_lines(caplog)
            if "ExtensionNotCreated" in r.getMessage()]


def test_keeper_diagnoses_a_dropped_extension_as_the_call_does(server, droppable, name, caplog):
    """The extension dropped under a running keeper: its renewals fail
    with a missing function, and its one line says, as a call would
    after asking pg_extension, that the extension is not created (not
    that it may be out of search_path)."""
    client = dsync.Client(server.dsn(droppable))
    try:
        with caplog.at_level(logging.INFO, logger="dsync"):
            lock = client.lock(name, ttl=3)
            assert lock.acquire()
            _drop_extension(server, droppable)
            assert wait_for(lambda: _not_created_lines(caplog), timeout=30)
        for line in _not_created_lines(caplog):
            assert "search_path" not in line and 'database "drop_' in line, line
    finally:
        client.close()


def test_async_keeper_diagnoses_a_dropped_extension(server, droppable, name, caplog):
    async def main():
        async with dsync.AsyncClient(server.dsn(droppable)) as client:
            lock = client.lock(name, ttl=3)
            assert await lock.acquire()
            _drop_extension(server, droppable)
            for _ in range(3000):
                if _not_created_lines(caplog):
                    break
                await asyncio.sleep(0.01)
    with caplog.at_level(logging.INFO, logger="dsync"):
        asyncio.run(main())
    assert _not_created_lines(caplog)
    for line in _not_created_lines(caplog):
        assert "search_path" not in line and 'database "drop_' in line, line


@pytest.fixture(scope="module")
def older(server):
    """A database with version 1.3 of the extension (no semaphore view, no
    event log)."""
    return _new_database(server, "older", "CREATE EXTENSION dsync VERSION '1.3'")


def test_an_older_version_is_said_by_the_one_diagnosis(older, name):
    """get_count on a version without dsync_semaphores says which version
    is there and what to run, as any call does (no special case); watch
    on a version without the event log starts from the state alone."""
    client = dsync.Client(older)
    try:
        sem = client.lock(name)
        from dsync.sync import Semaphore
        with pytest.raises(dsync.ServerError) as ei:
            Semaphore.get_count(sem)
        assert "version 1.3" in str(ei.value)
        assert ei.value.hint == 'run ALTER EXTENSION dsync UPDATE in database "older"'
        holder = client.lock(name, holder="h-old")
        assert holder.acquire(blocking=False)
        it = client.watch([name], timeout=1)
        first = next(it)
        assert (first.kind, first.holder) == ("state", "h-old")
        holder.release()
    finally:
        client.close()


def test_keeper_says_again_when_the_failure_changes():
    """KeeperFailures: the same failure is said once, another one again,
    and after a round that worked the same failure is news again."""
    from dsync._common import KeeperFailures

    class Log:
        def __init__(self):
            self.lines = []

        def log(self, level, *a, **k):
            self.lines.append((level,) + a)

        def info(self, *a, **k):
            pass

    log = Log()
    f = KeeperFailures(log)
    a, b = dsync.ExtensionNotCreated("a"), dsync.NotPreloaded("b")
    pauses = [f.failed(a, a) for _ in range(5)]
    assert len(log.lines) == 1
    assert pauses == sorted(pauses) and pauses[0] < pauses[-1]
    f.failed(b, b)
    assert len(log.lines) == 2
    f.succeeded()
    f.failed(b, b)
    assert len(log.lines) == 3
    # A connection lost once is said at info, lost again in a row at warning.
    f.succeeded()
    gone = dsync.DsyncConnectionError("gone")
    f.failed(gone, gone)
    f.failed(gone, gone)
    f.failed(gone, gone)
    assert [line[0] for line in log.lines[3:]] == [logging.INFO, logging.WARNING]


@pytest.fixture(scope="module")
def unloaded():
    """A server whose database app has the extension, restarted without
    dsync in shared_preload_libraries (as after a config change), and a
    database without the extension there too."""
    s = Server()
    try:
        s.start()
        with open(os.path.join(s.data, "postgresql.conf"), "a") as f:
            f.write("\nshared_preload_libraries = ''\n")     # the last line wins
        _as_postgres([f"{PGBIN}/pg_ctl", "-D", s.data, "-l", os.path.join(s.dir, "server.log"),
                      "-w", "restart"], stdout=open(os.devnull, "w"))
        with psycopg.connect(s.dsn("postgres", "postgres"), autocommit=True) as conn:
            conn.execute("CREATE DATABASE bare OWNER app")
        yield s
    finally:
        s.stop()


def test_not_preloaded_says_what_to_put_in_postgresql_conf(unloaded, name):
    err = _acquire_error(unloaded.dsn(), name, dsync.NotPreloaded)
    assert not isinstance(err, dsync.NotHeld)        # it used to be NotHeld
    assert err.sqlstate == "55000"
    assert 'database "app"' in str(err)
    assert "shared_preload_libraries = 'dsync'" in err.hint and "restart" in err.hint
    assert err.hint in str(err)


def test_not_preloaded_guard_and_async(direct, unloaded, name):
    # The lease held on the server with dsync, the guard run on the other.
    lock = dsync.Client(direct).lock(name)
    try:
        with lock, psycopg.connect(unloaded.dsn()) as conn, pytest.raises(dsync.NotPreloaded):
            with conn.transaction():
                lock.guard(conn)
    finally:
        lock.client.close()

    async def main():
        async with dsync.AsyncClient(unloaded.dsn()) as client:
            with pytest.raises(dsync.NotPreloaded):
                await client.lock(name).acquire(blocking=False)
    asyncio.run(main())


def test_not_preloaded_keeper_logs_once(unloaded, name, caplog):
    client = dsync.Client(unloaded.dsn())
    try:
        with caplog.at_level(logging.INFO, logger="dsync"):
            with pytest.raises(dsync.NotPreloaded):
                client.lock(name).acquire(blocking=False)
            assert wait_for(lambda: client._keeper.attempts >= 4, timeout=60)
        lines = _keeper_lines(caplog)
        assert len(lines) == 1 and "NotPreloaded" in lines[0].getMessage()
        assert lines[0].exc_info is None
    finally:
        client.close()


def test_no_extension_on_a_server_without_preload(unloaded, name):
    err = _acquire_error(unloaded.dsn(db="bare"), name, dsync.ExtensionNotCreated)
    assert 'database "bare"' in str(err)


# -- stale tokens, and translate() ---------------------------------------------------


@pytest.fixture
def fenced(direct, admin, name):
    """A fenced table, and w1's token made stale by w2's write."""
    table = "acct_" + str(abs(hash(name)) % 10**8)
    with psycopg.connect(direct, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, v int, token bigint)")
        conn.execute(f"CREATE TRIGGER f BEFORE INSERT OR UPDATE ON {table}"
                     " FOR EACH ROW EXECUTE FUNCTION dsync_fenced('token')")
        old = conn.execute("SELECT dsync_acquire(%s, 'w1')", (name,)).fetchone()[0]
        conn.execute(f"INSERT INTO {table} VALUES (1, 0, %s)", (old,))
        conn.execute("SELECT dsync_release(%s, 'w1')", (name,))
        new = conn.execute("SELECT dsync_acquire(%s, 'w2')", (name,)).fetchone()[0]
        conn.execute(f"UPDATE {table} SET v = 1, token = %s", (new,))
    yield table, old, new
    with psycopg.connect(direct, autocommit=True) as conn:
        conn.execute(f"DROP TABLE {table}")


def test_translate_psycopg3_stale_token(direct, fenced):
    table, old, new = fenced
    with psycopg.connect(direct) as conn:
        with pytest.raises(psycopg.Error) as ei:
            conn.execute(f"UPDATE {table} SET v = 2, token = %s", (old,))
    err = errors.translate(ei.value)
    assert isinstance(err, dsync.StaleToken) and not isinstance(err, dsync.NotHeld)
    assert err.sqlstate == "55000" and err.__cause__ is ei.value
    assert err.resource == f"table:public.{table}"
    assert (err.token, err.accepted) == (old, new)
    assert "acquire it again" in str(err)


def test_translate_psycopg2_stale_token_and_not_held(direct, fenced, name):
    table, old, new = fenced
    conn = psycopg2.connect(direct)
    try:
        cur = conn.cursor()
        with pytest.raises(psycopg2.Error) as ei:
            cur.execute(f"UPDATE {table} SET v = 2, token = %s", (old,))
        err = errors.translate(ei.value)
        assert isinstance(err, dsync.StaleToken) and (err.token, err.accepted) == (old, new)
        conn.rollback()
        with pytest.raises(psycopg2.Error) as ei:
            cur.execute("SELECT dsync_assert_held(%s, 'w1')", (name,))
        err = errors.translate(ei.value, 'guarding lease "x"')
        assert isinstance(err, dsync.NotHeld) and err.sqlstate == "55000"
        assert str(err).startswith('guarding lease "x": lease ')
        conn.rollback()
        # Not one of dsync's: None, for the caller to re-raise as it is.
        with pytest.raises(psycopg2.Error) as ei:
            cur.execute("SELECT 1/0")
        assert errors.translate(ei.value) is None
        assert errors.translate(ValueError("x")) is None
    finally:
        conn.close()


def test_argument_types_that_match_no_function(direct, name):
    """A dsync function called with types it does not take is not a
    missing extension: asked on the connection, the library says to cast;
    untyped parameters (psycopg2's) are left to the server's own words."""
    with psycopg.connect(direct, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.UndefinedFunction) as ei:
            conn.execute("SELECT dsync_acquire(%s::text, %s::text, 5::int)", (name, "h"))
        assert errors.needs_probe(ei.value)
        err = errors.from_psycopg(ei.value, "acquiring", ext=errors.probe(conn, ei.value))
    assert type(err) is dsync.ServerError and "CAST(" in err.hint
    conn2 = psycopg2.connect(direct)
    try:
        with pytest.raises(psycopg2.Error) as ei:
            conn2.cursor().execute("SELECT dsync_acquire(%s, %s, %s)", (name, "h", 30))
        assert errors.translate(ei.value) is None          # (unknown, unknown, integer)
    finally:
        conn2.close()


def test_watch_without_the_extension_or_preload(noext, unloaded, name):
    """watch and awatch raise the same errors, at once: a server without
    dsync preloaded (a 55000, an OperationalError) is not retried for
    ever as a lost connection."""
    with pytest.raises(dsync.ExtensionNotCreated) as ei:
        next(iter(dsync.watch([name], conninfo=noext)))
    assert 'database "noext"' in str(ei.value)
    with pytest.raises(dsync.NotPreloaded):
        next(iter(dsync.watch([name], conninfo=unloaded.dsn())))

    async def first(conninfo):
        async for ev in dsync.awatch([name], conninfo=conninfo):
            return ev
    with pytest.raises(dsync.ExtensionNotCreated):
        asyncio.run(first(noext))
    with pytest.raises(dsync.NotPreloaded):
        asyncio.run(first(unloaded.dsn()))
