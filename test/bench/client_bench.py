"""The Python client as users deploy it: an ordinary login role, default
server settings, PgBouncer, a big table, an old snapshot.  Prints figures
against baselines measured in the same run; asserts nothing about time.

    python3 test/bench/client_bench.py        # as root, after make install

Uses the throwaway server and PgBouncer of clients/python/tests/conftest.py.

1. acquire+release through a Client against the two raw SQL calls on one
   connection, in alternating blocks (the machine is noisy: only the
   ratio means anything); directly and through PgBouncer.
2. A first acquire on a new lock object of a running client, and a new
   object for every call through the default client.
3. 1,000 leases held by one client: the server CPU its keeper costs per
   second (its backend's utime+stime from /proc), and the dsync worker's.
4. With BENCH_NAMES (default 1,000,000) released names in the table, and
   while a REPEATABLE READ snapshot is held open (BENCH_SNAPSHOT_SECONDS,
   default 30): the cycle again.

BENCH_BLOCKS (default 20) blocks of 200 cycles each way for 1; BENCH_HOLD
(default 30) seconds for 3; BENCH_NAMES=0 skips 4.  BENCH_BEFORE: the
clients/python folder of an earlier version, whose Lock cycle is then
measured against the same server in the same run, e.g.

    git archive 6da63de clients/python | tar -x -C /tmp/before
    BENCH_BEFORE=/tmp/before/clients/python python3 test/bench/client_bench.py
"""

import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "clients", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "clients", "python", "tests"))

import psycopg  # noqa: E402

from conftest import Server  # noqa: E402
from dsync import Client, Lock  # noqa: E402

BLOCKS = int(os.environ.get("BENCH_BLOCKS", "20"))
BEFORE = os.environ.get("BENCH_BEFORE")
HOLD = int(os.environ.get("BENCH_HOLD", "30"))
NAMES = int(os.environ.get("BENCH_NAMES", "1000000"))
SNAPSHOT_SECONDS = int(os.environ.get("BENCH_SNAPSHOT_SECONDS", "30"))
TICKS = os.sysconf("SC_CLK_TCK")


def median_p99(ms):
    ms = sorted(ms)
    return statistics.median(ms), ms[max(0, int(len(ms) * 0.99) - 1)]


def show(label, ms, base=None):
    med, p99 = median_p99(ms)
    ratio = f"  {med / base:5.2f}x" if base else ""
    print(f"  {label:56s} median {med:6.3f} ms  p99 {p99:6.3f} ms{ratio}  (n={len(ms)})",
          flush=True)
    return med


def raw_cycle(conn, name):
    conn.execute("SELECT dsync_acquire(%s::text, 'bench', '30 s')", (name,))
    conn.execute("SELECT dsync_release(%s::text, 'bench')", (name,))


def cycles(dsn, names):
    """Alternating blocks: the two SQL calls on one connection, then one
    Lock object of a Client taken and let go, on the same names."""
    raw, lib = [], []
    client = Client(dsn)
    locks = {n: client.lock(n, ttl=30) for n in names}
    with psycopg.connect(dsn, autocommit=True, prepare_threshold=None) as conn:
        for _ in range(BLOCKS):
            for _ in range(200):
                name = random.choice(names)
                t0 = time.perf_counter()
                raw_cycle(conn, name)
                raw.append((time.perf_counter() - t0) * 1000)
            for _ in range(200):
                lock = locks[random.choice(names)]
                t0 = time.perf_counter()
                assert lock.acquire(blocking=False)
                lock.release()
                lib.append((time.perf_counter() - t0) * 1000)
    client.close()
    return raw, lib


# One Lock object taken and let go again and again, by the earlier version's
# library, in a process of its own (both are called dsync).
BEFORE_SCRIPT = """
import json, random, sys, time
from dsync import Lock
dsn, names, n = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
locks = {name: Lock(name, conninfo=dsn, ttl=30) for name in names}
out = []
for _ in range(n):
    lock = locks[random.choice(names)]
    t0 = time.perf_counter()
    assert lock.acquire(blocking=False)
    lock.release()
    out.append((time.perf_counter() - t0) * 1000)
print(json.dumps(out))
"""


def before_cycles(dsn, names):
    """The earlier version's cycle, and the two SQL calls again, in
    alternating blocks (a process started per block)."""
    raw, old = [], []
    with psycopg.connect(dsn, autocommit=True, prepare_threshold=None) as conn:
        for _ in range(max(1, BLOCKS // 4)):
            for _ in range(200):
                name = random.choice(names)
                t0 = time.perf_counter()
                raw_cycle(conn, name)
                raw.append((time.perf_counter() - t0) * 1000)
            out = subprocess.run([sys.executable, "-c", BEFORE_SCRIPT, dsn, json.dumps(names),
                                  "800"], capture_output=True, text=True,
                                 env=dict(os.environ, PYTHONPATH=BEFORE), cwd=BEFORE)
            if out.returncode != 0:
                raise RuntimeError("the earlier library failed:\n" + out.stderr[-2000:])
            old += json.loads(out.stdout)[200:]       # its first holds open connections
    return raw, old


def first_acquires(dsn, n):
    """A first acquire on a new object of a running client (its keeper
    already connected), and a new object per call on the default client."""
    client = Client(dsn)
    warm = client.lock("warm", ttl=30)
    warm.acquire()
    first = []
    for i in range(n):
        lock = client.lock(f"first-{i}", ttl=30)
        t0 = time.perf_counter()
        assert lock.acquire(blocking=False)
        first.append((time.perf_counter() - t0) * 1000)
        lock.release()
    warm.release()
    client.close()
    per_call = []
    for i in range(n):
        t0 = time.perf_counter()
        lock = Lock(f"per-call-{i}", conninfo=dsn, ttl=30)
        assert lock.acquire(blocking=False)
        lock.release()
        per_call.append((time.perf_counter() - t0) * 1000)
    return first, per_call


def cpu_seconds(pids):
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except FileNotFoundError:
            pass
    return total / TICKS


def keeper_cost(server, ttl):
    """1,000 leases held HOLD seconds: CPU of the keeper's backend and of
    the dsync workers, per second."""
    app = f"bench-keeper-{ttl}"
    client = Client(server.dsn(), application_name=app)
    locks = [client.lock(f"held-{ttl}-{i}", ttl=ttl) for i in range(1000)]
    for lock in locks:
        assert lock.acquire(blocking=False)
    with psycopg.connect(server.dsn(user="postgres"), autocommit=True) as admin:
        time.sleep(1)
        keeper = [r[0] for r in admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s",
            (f"{app} keeper",))]
        workers = [r[0] for r in admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE backend_type LIKE 'dsync%'")]
        conns = admin.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name"
                              " IN (%s, %s)", (app, f"{app} keeper")).fetchone()[0]
        k0, w0, t0 = cpu_seconds(keeper), cpu_seconds(workers), time.monotonic()
        time.sleep(HOLD)
        k1, w1, t1 = cpu_seconds(keeper), cpu_seconds(workers), time.monotonic()
        held = admin.execute("SELECT count(*) FROM dsync_leases WHERE lease LIKE %s",
                             (f"held-{ttl}-%",)).fetchone()[0]
    lost = sum(lock.lost.is_set() for lock in locks)
    client.close()
    secs = t1 - t0
    print(f"  ttl {ttl:>2} s: keeper backend {(k1 - k0) * 1000 / secs:6.2f} ms CPU/s, dsync "
          f"workers {(w1 - w0) * 1000 / secs:6.2f} ms CPU/s, over {secs:.0f} s; "
          f"{conns} server connections, {held} of 1,000 held at the end, {lost} lost",
          flush=True)


def main():
    server = Server()
    server.start()
    try:
        direct, bouncer = server.dsn(), server.dsn(bouncer=True)
        print(f"PostgreSQL as started by initdb (defaults but for the socket and "
              f"shared_preload_libraries), role app (no superuser), psycopg "
              f"{psycopg.__version__} ({psycopg.pq.__impl__} libpq wrapper)")

        names = [f"c{i}" for i in range(100)]
        print(f"\n1. acquire+release, {BLOCKS} alternating blocks of 200 each way")
        raw, lib = cycles(direct, names)
        base = show("two SQL calls on one connection, direct", raw)
        show("Client: lock.acquire(blocking=False) + release(), direct", lib, base)
        raw, lib = cycles(bouncer, names)
        base = show("two SQL calls, through PgBouncer (transaction mode)", raw)
        show("Client, through PgBouncer", lib, base)
        if BEFORE:
            raw, old = before_cycles(direct, names[:10])
            base = show("two SQL calls on one connection, direct", raw)
            show(f"the earlier library's Lock ({BEFORE})"[:56], old, base)

        print("\n2. new lock objects")
        first, per_call = first_acquires(direct, 500)
        show("first acquire on a new object of a running client", first)
        show("Lock(name, conninfo=...) made, acquired, released per call", per_call)

        print(f"\n3. 1,000 leases held by one client for {HOLD} s")
        for ttl in (30, 3):
            keeper_cost(server, ttl)

        if NAMES:
            print(f"\n4. {NAMES:,} released names in the table")
            t0 = time.monotonic()
            with psycopg.connect(direct, autocommit=True) as conn:
                for b in range(0, NAMES, 10000):
                    conn.execute("SELECT count(dsync_acquire(i::text, 'prefill', '30 s'))"
                                 " FROM generate_series(%s::int, %s::int) i", (b + 1, b + 10000))
                    conn.execute("SELECT count(dsync_release(i::text, 'prefill'))"
                                 " FROM generate_series(%s::int, %s::int) i", (b + 1, b + 10000))
            print(f"  (filled as app in {time.monotonic() - t0:.0f} s)")
            big = [str(random.randint(1, NAMES)) for _ in range(1000)]
            raw, lib = cycles(direct, big)
            base = show("two SQL calls on one connection", raw)
            show("Client", lib, base)

            print(f"\n   and a REPEATABLE READ snapshot held open {SNAPSHOT_SECONDS} s")
            stop = threading.Event()
            counts = []

            def loop():
                client = Client(direct)
                lock = client.lock("hot", ttl=30)
                while not stop.is_set():
                    t_end = time.monotonic() + 5
                    n = 0
                    while time.monotonic() < t_end:
                        lock.acquire(blocking=False)
                        lock.release()
                        n += 1
                    counts.append(n / 5)
                client.close()

            with psycopg.connect(direct) as snap:
                snap.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
                snap.execute("SELECT count(*) FROM dsync_leases WHERE lease = 'hot'").fetchone()
                t = threading.Thread(target=loop)
                t.start()
                time.sleep(SNAPSHOT_SECONDS)
                stop.set()
                t.join()
                snap.rollback()
            print("  Client cycles/s in each 5 s: " + ", ".join(f"{c:.0f}" for c in counts))
            if len(counts) >= 2:
                print(f"  last / first: {counts[-1] / counts[0]:.2f}")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
