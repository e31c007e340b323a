"""32 threads and 32 asyncio tasks in one process, over shared and private
lock objects on four names, while the clients' server connections (the
statement pools', the waits', the keepers') and the workers' own are
killed under them.  Every section makes a fenced write in the same
transaction as its guard.  Counted: overlaps (two owners inside one name's
section at once), increments lost or doubled, hangs (every worker must
finish), and connections left open after the clients close."""

import asyncio
import os
import random
import threading
import time

import psycopg

from conftest import wait_for
from dsync import AsyncClient, Client, DsyncError

SECONDS = float(os.environ.get("DSYNC_STRESS_SECONDS", "12"))
NAMES = [f"stress-{i}" for i in range(4)]
TABLE = "stress_fenced"


class Sections:
    """Who is inside each name's section, across threads and tasks."""

    def __init__(self):
        self.guard = threading.Lock()
        self.inside = {n: 0 for n in NAMES}
        self.overlaps = 0
        self.done = {n: 0 for n in NAMES}
        self.errors = {}

    def enter(self, name):
        with self.guard:
            self.inside[name] += 1
            if self.inside[name] > 1:
                self.overlaps += 1

    def leave(self, name, committed):
        with self.guard:
            self.inside[name] -= 1
            if committed:
                self.done[name] += 1

    def error(self, exc):
        with self.guard:
            key = type(exc).__name__
            self.errors[key] = self.errors.get(key, 0) + 1


FENCED_UPDATE = (f"UPDATE {TABLE} SET value = value + 1, token = %s"
                 " WHERE name = %s AND token <= %s")


def _thread_worker(lock, name, dsn, sections, deadline):
    conn = None
    while time.monotonic() < deadline:
        try:
            if conn is None or conn.closed:
                conn = psycopg.connect(dsn, application_name="stress-own")
            if not lock.acquire(timeout=2):
                continue
            entered = committed = False
            try:
                # The section: from a successful guard to the commit, while
                # the guard keeps everyone else out.
                with conn.transaction():
                    token = lock.guard(conn)
                    sections.enter(name)
                    entered = True
                    cur = conn.execute(FENCED_UPDATE, (token, name, token))
                    assert cur.rowcount == 1, "a stale token in the section"
                    time.sleep(random.random() * 0.003)
                committed = True
            finally:
                if entered:
                    sections.leave(name, committed)
                lock.release()
        except (DsyncError, psycopg.OperationalError) as exc:
            sections.error(exc)
            # A commit that failed with its connection leaves the count
            # uncertain; start over on a new one.
            if conn is not None and (conn.closed or conn.broken):
                conn = None
    if conn is not None:
        conn.close()


async def _task_worker(lock, name, dsn, sections, deadline):
    conn = None
    while time.monotonic() < deadline:
        try:
            if conn is None or conn.closed:
                conn = await psycopg.AsyncConnection.connect(dsn, application_name="stress-own")
            if not await lock.acquire(timeout=2):
                continue
            entered = committed = False
            try:
                async with conn.transaction():
                    token = await lock.guard(conn)
                    sections.enter(name)
                    entered = True
                    cur = await conn.execute(FENCED_UPDATE, (token, name, token))
                    assert cur.rowcount == 1, "a stale token in the section"
                    await asyncio.sleep(random.random() * 0.003)
                committed = True
            finally:
                if entered:
                    sections.leave(name, committed)
                await lock.release()
        except (DsyncError, psycopg.OperationalError) as exc:
            sections.error(exc)
            if conn is not None and (conn.closed or conn.broken):
                conn = None
    if conn is not None:
        await conn.close()


def _tasks(dsn, sections, deadline, clients):
    async def main():
        client = AsyncClient(dsn, application_name="stress-tasks", pool_size=4)
        clients.append(client)
        shared = {n: client.lock(n, ttl=5) for n in NAMES}
        workers = []
        for i in range(32):
            name = NAMES[i % len(NAMES)]
            lock = shared[name] if i < 16 else client.lock(name, ttl=5)
            workers.append(_task_worker(lock, name, dsn, sections, deadline))
        await asyncio.wait_for(asyncio.gather(*workers), SECONDS + 60)
        await client.close()
    asyncio.run(main())


def _killer(admin_dsn, stop, killed):
    """Every 0.3-0.8 s, end one of the clients' server connections (a
    pool's, a wait's or a keeper's) and one worker's own; every third time
    both keepers too."""
    kinds = [("stress-threads%", 1), ("stress-tasks%", 1), ("stress-own", 1)]
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        rounds = 0
        while not stop.wait(0.3 + random.random() * 0.5):
            rounds += 1
            picks = [random.choice(kinds[:2]), kinds[2]]
            if rounds % 3 == 0:
                picks += [("stress-threads keeper", 1), ("stress-tasks keeper", 1)]
            for pattern, n in picks:
                rows = admin.execute(
                    "SELECT pg_terminate_backend(pid), application_name FROM ("
                    " SELECT pid, application_name FROM pg_stat_activity"
                    " WHERE application_name LIKE %s ORDER BY random() LIMIT %s) s",
                    (pattern, n)).fetchall()
                for _, app in rows:
                    killed[app] = killed.get(app, 0) + 1


def test_threads_and_tasks_under_connection_kills(server, admin):
    admin.execute(f"CREATE TABLE {TABLE} (name text PRIMARY KEY, value int, token bigint)")
    admin.execute(f"GRANT ALL ON {TABLE} TO app")
    for n in NAMES:
        admin.execute(f"INSERT INTO {TABLE} VALUES (%s, 0, 0)", (n,))
    dsn = server.dsn()
    sections = Sections()
    deadline = time.monotonic() + SECONDS
    client = Client(dsn, application_name="stress-threads", pool_size=4)
    shared = {n: client.lock(n, ttl=5) for n in NAMES}
    threads = []
    for i in range(32):
        name = NAMES[i % len(NAMES)]
        lock = shared[name] if i < 16 else client.lock(name, ttl=5)
        threads.append(threading.Thread(target=_thread_worker,
                                        args=(lock, name, dsn, sections, deadline)))
    async_clients = []
    threads.append(threading.Thread(target=_tasks, args=(dsn, sections, deadline, async_clients)))
    stop = threading.Event()
    killed = {}
    killer = threading.Thread(target=_killer, args=(server.dsn(user="postgres"), stop, killed))
    for t in threads:
        t.start()
    killer.start()
    for t in threads:
        t.join(SECONDS + 90)
    stop.set()
    killer.join(10)
    hung = [t.name for t in threads if t.is_alive()]
    client.close()

    values = dict(admin.execute(f"SELECT name, value FROM {TABLE}").fetchall())
    print(f"\nsections: {sections.done}; table: {values}; errors: {sections.errors}; "
          f"connections killed: {killed}")
    assert not hung, f"workers that never finished: {hung}"
    assert sections.overlaps == 0
    # Every committed section counted once; a commit cut by a kill may have
    # landed without being counted, never the other way round.
    for n in NAMES:
        assert values[n] >= sections.done[n]
        assert values[n] - sections.done[n] <= sections.errors.get("OperationalError", 0)
    assert all(sections.done[n] > 0 for n in NAMES), sections.done   # outcomes, not throughput
    assert killed.get("stress-threads keeper", 0) >= 2 and killed.get("stress-tasks keeper", 0) >= 2
    assert killed.get("stress-threads", 0) >= 2 and killed.get("stress-tasks", 0) >= 2
    # No connection left behind by the clients (nor by the workers).
    assert wait_for(lambda: admin.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'stress-%'"
    ).fetchone()[0] == 0, 10), admin.execute(
        "SELECT application_name, state FROM pg_stat_activity"
        " WHERE application_name LIKE 'stress-%'").fetchall()
    assert admin.execute("SELECT count(*) FROM dsync_leases WHERE lease LIKE 'stress-%'"
                         ).fetchone()[0] == 0
