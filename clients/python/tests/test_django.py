"""dsync.django against a real server, with Debian's Django (3.2, on
psycopg2) and a minimal settings module (settings.configure): a guard in
transaction.atomic(), a stale write refused and raised as StaleToken,
NotHeld, leader-only commands and jobs that run on one node only."""

import io
import threading

import psycopg
import pytest

django = pytest.importorskip("django")
from django.conf import settings  # noqa: E402

import dsync  # noqa: E402


@pytest.fixture(scope="module")
def dj(server):
    """Django configured once for this process, on the test server's app
    database."""
    if not settings.configured:
        settings.configure(
            DATABASES={"default": {"ENGINE": "django.db.backends.postgresql", "NAME": "app",
                                   "USER": "app", "HOST": server.dir,
                                   "PORT": str(server.port)}},
            INSTALLED_APPS=[], USE_TZ=True)
        django.setup()
    from django.db import connections
    yield
    connections.close_all()


@pytest.fixture
def fenced(dj, direct, name):
    tname = "dj_" + "".join(ch for ch in name.lower() if ch.isalnum())[-30:]
    with psycopg.connect(direct, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {tname} (id int PRIMARY KEY, v int, token bigint)")
        conn.execute(f"INSERT INTO {tname} VALUES (1, 0, NULL)")
        conn.execute(f"CREATE TRIGGER fenced BEFORE INSERT OR UPDATE ON {tname}"
                     " FOR EACH ROW EXECUTE FUNCTION dsync_fenced('token')")
    yield tname
    with psycopg.connect(direct, autocommit=True) as conn:
        conn.execute(f"DROP TABLE {tname}")


def test_conninfo_from_settings(dj, server):
    from dsync.django import conninfo
    info = psycopg.conninfo.conninfo_to_dict(conninfo())
    assert info == {"dbname": "app", "user": "app", "host": server.dir,
                    "port": str(server.port)}


def test_guard_in_atomic_and_not_held(dj, client, name):
    from django.db import connection, transaction
    from django.db.transaction import TransactionManagementError
    from dsync.django import guard
    lock = client.lock(name, ttl=30)
    with lock:
        hold = lock.hold
        with transaction.atomic():
            token = guard(lock)
            assert token == lock.token and isinstance(token, int)
        with pytest.raises(TransactionManagementError):
            guard(lock)                               # autocommit: it would guard nothing
    with pytest.raises(dsync.NotHeld) as ei:
        with transaction.atomic():
            guard(lock)                               # holding nothing: no statement
    assert ei.value.sqlstate is None
    with pytest.raises(dsync.NotHeld) as ei:
        with transaction.atomic():
            guard(hold)                               # a released Hold: the server says
    assert ei.value.sqlstate == "55000"
    assert not connection.in_atomic_block


def test_stale_write_is_stale_token(dj, client, admin, fenced, name):
    from django.db import connection, transaction
    from dsync.django import guard, translated
    lock = client.lock(name, ttl=30)
    assert lock.acquire()
    old = lock.token
    with transaction.atomic(), connection.cursor() as cur:
        guard(lock)
        cur.execute(f"UPDATE {fenced} SET v = v + 1, token = %s WHERE id = 1", [old])
    admin.execute("SELECT dsync_force_release(%s)", (name,))
    other = client.lock(name, ttl=30, holder="other")
    assert other.acquire(blocking=False)
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute(f"UPDATE {fenced} SET v = 10, token = %s WHERE id = 1", [other.token])
    with pytest.raises(dsync.StaleToken) as ei:
        with translated(), transaction.atomic(), connection.cursor() as cur:
            cur.execute(f"UPDATE {fenced} SET v = 0, token = %s WHERE id = 1", [old])
    assert (ei.value.token, ei.value.accepted) == (old, other.token)
    assert ei.value.resource == f"table:public.{fenced}"
    with connection.cursor() as cur:
        cur.execute(f"SELECT v FROM {fenced}")
        assert cur.fetchone()[0] == 10
    other.release()
    lock.close()


def test_leader_only_runs_on_one_node(dj, server, name):
    """Two nodes (two clients) run the same scheduled job at once: one
    runs it, the other skips it, and neither waits."""
    from dsync.django import leader_only
    nodes = [dsync.Client(server.dsn()), dsync.Client(server.dsn())]
    inside = threading.Event()
    finish = threading.Event()
    ran = []

    def body(node):
        ran.append(node)
        inside.set()
        assert finish.wait(30)
        return "done"

    jobs = [leader_only(name, ttl=30, client=n)(body) for n in nodes]
    result = {}
    t = threading.Thread(target=lambda: result.setdefault("first", jobs[0](0)))
    t.start()
    try:
        assert inside.wait(30)
        assert jobs[1](1) is None                  # held by node 0: skipped at once
    finally:
        finish.set()
        t.join(30)
    assert ran == [0] and result["first"] == "done"
    finish.set()
    assert jobs[1](1) == "done"                    # released: node 1 runs the next one
    for n in nodes:
        n.close()


def test_leader_only_without_release_skips_a_late_repeat(dj, server, admin, name):
    from dsync.django import leader_only
    client = dsync.Client(server.dsn())
    ran = []
    job = leader_only(name, ttl=30, release=False, client=client)(lambda: ran.append(1) or 1)
    assert job() == 1
    assert job() is None                           # the same run, late: skipped
    assert ran == [1]
    assert admin.execute("SELECT count(*) FROM dsync_leases WHERE lease = %s",
                         (name,)).fetchone()[0] == 1
    admin.execute("SELECT dsync_force_release(%s)", (name,))
    client.close()


def test_leader_only_command(dj, server, name):
    from django.core.management import call_command
    from dsync.django import LeaderOnlyCommand

    seen = []

    class Command(LeaderOnlyCommand):
        lease_name = name
        lease_ttl = 30

        def handle(self, *args, **options):
            seen.append(self.lock.token)
            self.stdout.write("pruned")

    out = io.StringIO()
    call_command(Command(), stdout=out)
    assert "pruned" in out.getvalue() and len(seen) == 1
    # Another node holds the lease: the command says so and does nothing.
    other = dsync.Client(server.dsn())
    held = other.lock(name, ttl=30)
    assert held.acquire(blocking=False)
    out = io.StringIO()
    assert call_command(Command(), stdout=out) is None
    assert "held by another node" in out.getvalue() and len(seen) == 1
    held.release()
    other.close()
