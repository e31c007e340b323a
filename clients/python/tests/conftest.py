"""A throwaway PostgreSQL server with dsync preloaded, and PgBouncer in
transaction mode in front of it, for the library's tests.

The server listens on a Unix socket in a directory of its own.  The tests
connect as an ordinary login role (app), the way applications do; the
superuser connection (admin) is only for what administrators do, such as
dsync_force_release.  Run as root (the server runs as postgres) or as the
user that owns PGBIN's cluster files.
"""

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time

import psycopg
import pytest

PGBIN = os.environ.get("PGBIN", "/usr/lib/postgresql/15/bin")
PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _as_postgres(cmd, **kw):
    if os.geteuid() == 0:
        cmd = ["runuser", "-u", "postgres", "--"] + cmd
    return subprocess.run(cmd, check=True, **kw)


class Server:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="dsync-pytest-")
        if os.geteuid() == 0:
            pw = pwd.getpwnam("postgres")
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
        self.data = os.path.join(self.dir, "data")
        self.port = _free_port()
        self.bouncer_port = _free_port()
        self.bouncer = None

    def start(self):
        _as_postgres([f"{PGBIN}/initdb", "-D", self.data, "-U", "postgres", "-A", "trust",
                      "-E", "UTF8", "--locale=C", "--no-sync"], stdout=subprocess.DEVNULL)
        with open(os.path.join(self.data, "postgresql.conf"), "a") as f:
            f.write(f"""
listen_addresses = ''
unix_socket_directories = '{self.dir}'
port = {self.port}
shared_preload_libraries = 'dsync'
max_connections = 200
""")
        _as_postgres([f"{PGBIN}/pg_ctl", "-D", self.data, "-l",
                      os.path.join(self.dir, "server.log"), "-w", "start"],
                     stdout=subprocess.DEVNULL)
        with psycopg.connect(self.dsn("postgres", "postgres"), autocommit=True) as conn:
            conn.execute("CREATE ROLE app LOGIN")
            conn.execute("CREATE DATABASE app OWNER app")
        with psycopg.connect(self.dsn("app", "postgres"), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION dsync")
        self._start_bouncer()

    def unpreload(self):
        """Restarts the server without dsync in shared_preload_libraries,
        the extension still created in app: every dsync call there then
        fails as an installation that forgot the preload does."""
        with open(os.path.join(self.data, "postgresql.conf"), "a") as f:
            f.write("shared_preload_libraries = ''\n")
        _as_postgres([f"{PGBIN}/pg_ctl", "-D", self.data, "-l",
                      os.path.join(self.dir, "server.log"), "-w", "restart"],
                     stdout=subprocess.DEVNULL)

    def _start_bouncer(self):
        ini = os.path.join(self.dir, "pgbouncer.ini")
        users = os.path.join(self.dir, "users.txt")
        with open(users, "w") as f:
            f.write('"app" ""\n"postgres" ""\n')
        with open(ini, "w") as f:
            f.write(f"""[databases]
app = host={self.dir} port={self.port} dbname=app

[pgbouncer]
listen_addr =
unix_socket_dir = {self.dir}
listen_port = {self.bouncer_port}
auth_type = trust
auth_file = {users}
pool_mode = transaction
max_client_conn = 200
default_pool_size = 20
logfile = {self.dir}/pgbouncer.log
pidfile = {self.dir}/pgbouncer.pid
""")
        if os.geteuid() == 0:
            pw = pwd.getpwnam("postgres")
            for p in (ini, users):
                os.chown(p, pw.pw_uid, pw.pw_gid)
        cmd = [PGBOUNCER, ini]
        if os.geteuid() == 0:
            cmd = ["runuser", "-u", "postgres", "--"] + cmd
        self.bouncer = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(100):
            if os.path.exists(os.path.join(self.dir, f".s.PGSQL.{self.bouncer_port}")):
                return
            time.sleep(0.05)
        raise RuntimeError("pgbouncer did not start")

    def dsn(self, db="app", user="app", bouncer=False):
        port = self.bouncer_port if bouncer else self.port
        return f"host={self.dir} port={port} dbname={db} user={user}"

    def stop(self):
        if self.bouncer is not None:
            self.bouncer.terminate()
            self.bouncer.wait()
        subprocess.run((["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else [])
                       + [f"{PGBIN}/pg_ctl", "-D", self.data, "-m", "immediate", "-w", "stop"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if os.environ.get("DSYNC_TEST_KEEP") != "1":
            shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def server():
    s = Server()
    try:
        s.start()
        yield s
    finally:
        s.stop()


@pytest.fixture(params=["direct", "pgbouncer"])
def dsn(request, server):
    """The app role's connection string: to the server, then through
    PgBouncer in transaction mode."""
    return server.dsn(bouncer=request.param == "pgbouncer")


@pytest.fixture
def direct(server):
    return server.dsn()


@pytest.fixture
def admin(server):
    with psycopg.connect(server.dsn(user="postgres"), autocommit=True) as conn:
        yield conn


_counter = [0]


@pytest.fixture
def name(request):
    """A lease name of the test's own."""
    _counter[0] += 1
    return f"{request.node.name[:40]}-{_counter[0]}"


@pytest.fixture
def account(direct, name):
    """A SQLAlchemy Table (sqlalchemy imported here, so the suite runs
    without it) of a fenced table of the test's own, dsync_fenced on its
    token column, with one row written before the fence."""
    from sqlalchemy import BigInteger, Column, Integer, MetaData, Table
    tname = "sa_" + "".join(ch for ch in name.lower() if ch.isalnum())[-30:]
    with psycopg.connect(direct, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {tname} (id int PRIMARY KEY, balance int, token bigint)")
        conn.execute(f"INSERT INTO {tname} VALUES (1, 100, NULL)")   # before the fence
        conn.execute(f"CREATE TRIGGER fenced BEFORE INSERT OR UPDATE ON {tname}"
                     " FOR EACH ROW EXECUTE FUNCTION dsync_fenced('token')")
    yield Table(tname, MetaData(), Column("id", Integer, primary_key=True),
                Column("balance", Integer), Column("token", BigInteger))
    with psycopg.connect(direct, autocommit=True) as conn:
        conn.execute(f"DROP TABLE {tname}")


@pytest.fixture
def client(server, name):
    """A Client of the test's own (direct), its connections named after
    the test, closed at the end."""
    from dsync import Client
    c = Client(server.dsn(), application_name=f"t:{name}"[:50])
    try:
        yield c
    finally:
        c.close()


def app_connections(admin, application_name=None):
    """The app role's server connections now (all of them, or those of one
    application_name and its keeper)."""
    if application_name is None:
        return admin.execute("SELECT count(*) FROM pg_stat_activity WHERE usename = 'app'"
                             " AND pid <> pg_backend_pid()").fetchone()[0]
    return admin.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name"
                         " IN (%s, %s || ' keeper')",
                         (application_name, application_name)).fetchone()[0]


def stop_worker_asleep(admin, pid, tries=1000):
    """SIGSTOP dsync's worker while it sleeps (its wait event is
    Extension), never mid-pass: stopped holding one of dsync's locks, it
    would hold up for ever whatever the test does next."""
    import signal
    for _ in range(tries):
        os.kill(pid, signal.SIGSTOP)
        row = admin.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s",
                            (pid,)).fetchone()
        if row and row[0] == "Extension":
            return
        os.kill(pid, signal.SIGCONT)
        time.sleep(0.01)
    raise AssertionError("dsync's worker was never seen asleep")


def wait_for(pred, timeout=10.0, step=0.01):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(step)
    return False
