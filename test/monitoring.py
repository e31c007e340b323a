"""The Prometheus queries file against the real exporter (test/monitoring.sh's
last step).  As root, after dsync is installed, with Debian's
prometheus-postgres-exporter:

    /usr/bin/python3 test/monitoring.py [QUERIES.yaml]

Starts a throwaway server with dsync (clients/python/tests/conftest.py's
Server) and dsync.event_queue_size = 64kB, so that events can be lost;
makes an unprivileged login role `monitor` (no grant at all), a database
`nodsync` without the extension and a second one with it, `app2`; as the
role `app`: an exclusive and two shared holders, a backend blocked in
dsync_acquire, two queued waiters (dsync_queue), a wait that times out, an expiry and 3,000 signal events in
one transaction to a listener (more than the 64 kB queue holds).  Then it
runs prometheus-postgres-exporter as `monitor` (search_path pg_catalog only)
with the queries file and --auto-discover-databases on a free loopback port, scrapes /metrics and
checks every dsync metric against the views read as `monitor`, and that
the scrape had no error (the queries run in `nodsync` and `postgres` too).
A second exporter pointed at `nodsync` alone must scrape without error and
say dsync_extension_installed 0.  Prints a line per check and exits 1 on
any failure.
"""

import os
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import psycopg

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "clients",
                                "python", "tests"))
from conftest import PGBIN, Server, _as_postgres, _free_port  # noqa: E402
from monitoring_queries import QUERIES as DEFAULT_QUERIES, produced_metrics  # noqa: E402

QUERIES = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_QUERIES
EXPORTER = "/usr/bin/prometheus-postgres-exporter"

failures = []


def check(what, ok, detail=""):
    print(("ok      " if ok else "FAILED  ") + what + ("" if ok else f": {detail}"), flush=True)
    if not ok:
        failures.append(what)


def wait_for(conn, sql, what, seconds=60):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if conn.execute(sql).fetchone()[0]:
            return True
        time.sleep(0.2)
    raise RuntimeError(f"{what}: not within {seconds} s ({sql})")


LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse(text):
    """The samples of a Prometheus text exposition: {(name, labels): value},
    labels a frozenset of (label, value) without the exporter's `server`."""
    samples = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = LINE.match(line)
        if not m:
            raise ValueError(f"unparsable line: {line!r}")
        labels = frozenset((k, v) for k, v in LABEL.findall(m.group(2) or "") if k != "server")
        samples[(m.group(1), labels)] = float(m.group(3))
    return samples


class Exporter:
    def __init__(self, dsn, *args):
        self.port = _free_port()
        self.log = open(os.path.join(server.dir, f"exporter-{self.port}.log"), "w")
        self.proc = subprocess.Popen(
            [EXPORTER, f"--extend.query-path={QUERIES}",
             f"--web.listen-address=127.0.0.1:{self.port}", *args],
            env=dict(os.environ, DATA_SOURCE_NAME=dsn), stdout=self.log,
            stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), 1).close()
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the exporter did not start: {self.logtext()}")
                time.sleep(0.1)

    def scrape(self):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=30) as r:
                return parse(r.read().decode())
        except urllib.error.HTTPError as e:
            raise RuntimeError(f"the scrape failed: HTTP {e.code}: {e.read().decode()[:1000]}")

    def logtext(self):
        self.log.flush()
        with open(self.log.name) as f:
            return f.read()

    def stop(self):
        self.proc.terminate()
        self.proc.wait()
        self.log.close()


def dsync_samples(samples):
    return {k: v for k, v in samples.items() if k[0].startswith("dsync_")}


def one(samples, name, **labels):
    want = frozenset(labels.items())
    return samples.get((name, want))


server = Server()
exporters = []
try:
    server.start()
    admin = psycopg.connect(server.dsn("app", "postgres"), autocommit=True)
    # A queue of the smallest size: 3,000 events in one transaction overflow it.
    admin.execute("ALTER SYSTEM SET dsync.event_queue_size = '64kB'")
    admin.close()
    _as_postgres([f"{PGBIN}/pg_ctl", "-D", server.data, "-w", "restart"],
                 stdout=subprocess.DEVNULL)
    admin = psycopg.connect(server.dsn("app", "postgres"), autocommit=True)
    admin.execute("CREATE ROLE monitor LOGIN")
    admin.execute("CREATE DATABASE nodsync")
    # A second database with dsync: per-database metrics carry datname, and
    # the server-wide dsync_databases must still be read once.
    admin.execute("CREATE DATABASE app2")
    with psycopg.connect(server.dsn("app2", "postgres"), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION dsync")
    with psycopg.connect(server.dsn("app2", "app"), autocommit=True) as conn:
        assert conn.execute("SELECT dsync_acquire('elsewhere', 'a', '10 minutes')").fetchone()[0]

    def app():
        return psycopg.connect(server.dsn(), autocommit=True)

    a, b, c, d = app(), app(), app(), app()
    q = lambda conn, sql, *args: conn.execute(sql, args).fetchone()[0]  # noqa: E731
    # Holders: one exclusive, two shared.
    assert q(a, "SELECT dsync_acquire('job', 'a', '10 minutes')") is not None
    assert q(a, "SELECT dsync_acquire_shared('config', 'r1', '10 minutes')") is not None
    assert q(b, "SELECT dsync_acquire_shared('config', 'r2', '10 minutes')") is not None
    # A wait that times out, and an expiry.
    assert q(b, "SELECT dsync_acquire('job', 'b', '1 minute', wait => '0.2 s')") is None
    assert q(b, "SELECT dsync_acquire('short', 'b', '1 second')") is not None
    wait_for(admin, "SELECT expiries >= 1 FROM dsync_stats", "the expiry")
    # A queued waiter (no connection waits) and a blocked one.
    assert q(b, "SELECT dsync_queue('job', 'q', '10 minutes')") is None
    assert q(b, "SELECT dsync_queue('job', 'q2', '10 minutes')") is None
    def block():
        try:
            c.execute("SELECT dsync_acquire('job', 'c', '1 minute', wait => '10 minutes')")
        except psycopg.Error:
            pass  # the server is stopped at the end with the wait still on

    blocked = threading.Thread(target=block, daemon=True)
    blocked.start()
    wait_for(admin, "SELECT count(*) = 3 FROM dsync_waiters", "the waiters")
    # Lost events: a listener, and more events at once than the queue holds.
    listener = app()
    listener.execute('LISTEN "dsync:lost"')
    d.execute("SELECT count(dsync_event_set('lost')) FROM generate_series(1, 3000)")
    wait_for(admin, "SELECT events_lost > 0 FROM dsync_stats", "lost events")
    wait_for(admin, "SELECT queue_used = 0 FROM dsync_stats", "the queue drained")

    mon = psycopg.connect(server.dsn("app", "monitor"), autocommit=True)
    check("the role monitor is neither superuser nor member of any role",
          q(mon, "SELECT NOT rolsuper AND NOT EXISTS (SELECT FROM pg_auth_members m"
                 " WHERE m.member = r.oid) FROM pg_roles r WHERE rolname = current_user"))

    # search_path without dsync's schema (as Debian's README.Debian sets it
    # for the exporter's role): the queries find the schema themselves.
    # lib/pq sends an unknown DSN key to the server as a setting.
    exp = Exporter(f"host={server.dir} port={server.port} dbname=app user=monitor sslmode=disable"
                   " search_path=pg_catalog", "--auto-discover-databases")
    exporters.append(exp)
    cols = ("served::int, grants, renewals, releases, expiries, waits, wait_timeouts,"
            " extract(epoch FROM wait_time)::float8, events_sent, events_lost, queue_used, queue_size")
    names = ("served", "grants_total", "renewals_total", "releases_total", "expiries_total",
             "waits_total", "wait_timeouts_total", "wait_seconds_total", "events_sent_total",
             "events_lost_total", "queue_used_bytes", "queue_size_bytes")
    # The counters move while the worker sends: compare a scrape with the
    # view read just before and just after it, when both reads agree.
    for attempt in range(20):
        before = mon.execute(f"SELECT {cols} FROM dsync_stats").fetchone()
        samples = exp.scrape()
        after = mon.execute(f"SELECT {cols} FROM dsync_stats").fetchone()
        if before == after:
            break
        time.sleep(0.5)
    check("dsync_stats did not change around a scrape", before == after, f"{before} / {after}")
    check("no scrape error (pg_exporter_last_scrape_error 0)",
          one(samples, "pg_exporter_last_scrape_error") == 0,
          exp.logtext()[-2000:])
    check("pg_up 1", one(samples, "pg_up") == 1)
    for name, value in zip(names, before):
        got = one(samples, f"dsync_stats_{name}", datname="app")
        check(f"dsync_stats_{name} = dsync_stats ({value})", got is not None and
              abs(got - float(value)) < 1e-6, f"scraped {got}")
    stats = dict(zip(names, before))
    check("the activity shows in the counters: grants 4, expiries >= 1, wait_timeouts 1,"
          " waits >= 2, events_lost > 0",
          stats["grants_total"] == 4 and stats["expiries_total"] >= 1
          and stats["wait_timeouts_total"] == 1 and stats["waits_total"] >= 2
          and stats["events_lost_total"] > 0, str(stats))
    with psycopg.connect(server.dsn("app2", "monitor"), autocommit=True) as conn:
        grants2 = conn.execute("SELECT grants FROM dsync_stats").fetchone()[0]
    check("the second database's own counters: dsync_stats_grants_total{datname=app2} 1",
          grants2 == 1 and one(samples, "dsync_stats_grants_total", datname="app2") == 1,
          f"view {grants2}, scraped {one(samples, 'dsync_stats_grants_total', datname='app2')}")
    for db in ("nodsync", "postgres"):
        check(f"no dsync_stats sample for {db} (no extension there)",
              not any(k[0].startswith("dsync_stats_") and ("datname", db) in k[1] for k in samples))
        check(f"dsync_extension_installed{{datname={db}}} 0",
              one(samples, "dsync_extension_installed", datname=db, version="") == 0)
    version = q(mon, "SELECT extversion FROM pg_extension WHERE extname = 'dsync'")
    check(f"dsync_extension_installed{{datname=app,version={version}}} 1",
          one(samples, "dsync_extension_installed", datname="app", version=version) == 1)

    held = dict(mon.execute("SELECT mode, count(*) FROM dsync_leases GROUP BY mode").fetchall())
    check("held leases per mode: exclusive 1, shared 2 in dsync_leases",
          held == {"exclusive": 1, "shared": 2}, str(held))
    for mode in ("exclusive", "shared"):
        got = one(samples, "dsync_leases_held", datname="app", mode=mode)
        check(f"dsync_leases_held{{mode={mode}}} = dsync_leases ({held.get(mode, 0)})",
              got == held.get(mode, 0), f"scraped {got}")
    left = one(samples, "dsync_lease_time_left_min_seconds", datname="app")
    soonest = float(q(mon, "SELECT extract(epoch FROM min(expires_at) - now()) FROM dsync_leases"))
    check(f"dsync_lease_time_left_min_seconds ({left}) within a few seconds of the view's ({soonest:.1f})",
          left is not None and 0 < left <= 600 and abs(left - soonest) < 30)

    for state, pidtest, want in (("blocked", "IS NOT NULL", 1), ("queued", "IS NULL", 2)):
        n, oldest = mon.execute(f"SELECT count(*), extract(epoch FROM max(now() - since))::float8"
                                f" FROM dsync_waiters WHERE pid {pidtest}").fetchone()
        got = one(samples, "dsync_waiters_waiting", datname="app", state=state)
        check(f"dsync_waiters_waiting{{state={state}}} = dsync_waiters ({want})",
              n == want and got == want, f"view {n}, scraped {got}")
        age = one(samples, "dsync_waiters_oldest_wait_seconds", datname="app", state=state)
        check(f"dsync_waiters_oldest_wait_seconds{{state={state}}} ({age}) > 0, <= the view's"
              f" ({oldest:.2f})", age is not None and 0 < age <= oldest)

    for datname, state, served in mon.execute(
            "SELECT datname, state, served::int FROM dsync_databases").fetchall():
        got = one(samples, "dsync_databases_served", datname=datname, state=state)
        check(f"dsync_databases_served{{datname={datname},state={state}}} = {served}",
              got == served, f"scraped {got}")
    check("dsync_databases: app and app2 active and served, nodsync absent",
          one(samples, "dsync_databases_served", datname="app", state="active") == 1
          and one(samples, "dsync_databases_served", datname="app2", state="active") == 1
          and one(samples, "dsync_databases_served", datname="nodsync", state="absent") == 0)
    check("dsync_databases is read once (master: true), not per discovered database",
          len([k for k in samples if k[0] == "dsync_databases_served"])
          == q(mon, "SELECT count(*) FROM dsync_databases"))

    defined = produced_metrics(QUERIES)
    scraped = {k[0] for k in samples}
    check(f"every metric of the queries file was scraped ({len(defined)})",
          defined and defined <= scraped, str(sorted(defined - scraped)))

    with urllib.request.urlopen(f"http://127.0.0.1:{exp.port}/metrics", timeout=30) as r:
        text = r.read().decode()
    types = dict(re.findall(r"^# TYPE (dsync_\S+) (\S+)$", text, re.M))
    bad = {k: v for k, v in types.items() if (v == "counter") != k.endswith("_total")}
    check("every *_total metric is a counter and no other is", not bad and types, str(bad))

    # The same exporter pointed at a database without dsync.
    exp2 = Exporter(f"host={server.dir} port={server.port} dbname=nodsync user=monitor sslmode=disable")
    exporters.append(exp2)
    s2 = exp2.scrape()
    check("against a database without dsync: no scrape error",
          one(s2, "pg_exporter_last_scrape_error") == 0, exp2.logtext()[-2000:])
    check("against a database without dsync: dsync_extension_installed 0 and no other dsync metric",
          dsync_samples(s2) == {("dsync_extension_installed",
                                 frozenset({("datname", "nodsync"), ("version", "")})): 0},
          str(dsync_samples(s2)))
finally:
    for e in exporters:
        e.stop()
    server.stop()

print(f"{'FAILED' if failures else 'ok'}: {len(failures)} check(s) failed")
sys.exit(1 if failures else 0)
