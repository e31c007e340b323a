"""The Python client as users deploy it: an ordinary login role, default
server settings, a table of a million names, an old snapshot, PgBouncer.
Prints figures; asserts nothing about time.

    python3 test/bench/client_bench.py        # as root, after make install

Uses the throwaway server and PgBouncer of clients/python/tests/conftest.py.
Settings (environment): BENCH_NAMES (default 1000000), BENCH_CYCLES (2000),
BENCH_SNAPSHOT_SECONDS (30).
"""

import os
import random
import statistics
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "clients", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "clients", "python", "tests"))

import psycopg  # noqa: E402

from conftest import Server  # noqa: E402
from dsync import Lock  # noqa: E402

NAMES = int(os.environ.get("BENCH_NAMES", "1000000"))
CYCLES = int(os.environ.get("BENCH_CYCLES", "2000"))
SNAPSHOT_SECONDS = int(os.environ.get("BENCH_SNAPSHOT_SECONDS", "30"))


def cycles(dsn, names, n):
    """Latencies (ms) of n acquire+release cycles of one Lock object per
    name, as an application takes short locks: acquire(blocking=False),
    then release().  The keeper connection each held lock opens is part of
    the figure."""
    out = []
    for _ in range(n):
        lock = Lock(random.choice(names), conninfo=dsn, ttl=30, holder="bench")
        t0 = time.perf_counter()
        assert lock.acquire(blocking=False)
        lock.release()
        out.append((time.perf_counter() - t0) * 1000)
        lock.close()
    return out


def reused_cycles(dsn, name, n):
    """One Lock object taken and let go n times: the statements' connection
    stays open; each hold still starts a keeper (its own connection, LISTEN)."""
    out = []
    lock = Lock(name, conninfo=dsn, ttl=30, holder="bench")
    for _ in range(n):
        t0 = time.perf_counter()
        assert lock.acquire(blocking=False)
        lock.release()
        out.append((time.perf_counter() - t0) * 1000)
    lock.close()
    return out


def raw_cycles(dsn, names, n):
    """The same without the library: the two SQL calls on one connection."""
    out = []
    with psycopg.connect(dsn, autocommit=True, prepare_threshold=None) as conn:
        for _ in range(n):
            name = random.choice(names)
            t0 = time.perf_counter()
            conn.execute("SELECT dsync_acquire(%s::text, 'bench', '30 s')", (name,))
            conn.execute("SELECT dsync_release(%s::text, 'bench')", (name,))
            out.append((time.perf_counter() - t0) * 1000)
    return out


def show(label, ms):
    ms = sorted(ms)
    print(f"  {label:58s} median {statistics.median(ms):7.3f} ms  "
          f"p99 {ms[int(len(ms) * 0.99) - 1]:7.3f} ms  (n={len(ms)})", flush=True)


def main():
    server = Server()
    server.start()
    try:
        direct, bouncer = server.dsn(), server.dsn(bouncer=True)
        names = [str(i) for i in range(1, NAMES + 1)]
        print(f"PostgreSQL as started by initdb (defaults but for the socket and "
              f"shared_preload_libraries), role app (no superuser), {NAMES:,} names")

        print("\n1. Empty table")
        show("Lock cycle (library, a lock object per call)", cycles(direct, names[:1000], CYCLES // 4))
        show("SQL cycle (two statements on one connection)", raw_cycles(direct, names[:1000], CYCLES))

        t0 = time.monotonic()
        with psycopg.connect(direct, autocommit=True) as conn:
            for b in range(0, NAMES, 10000):
                conn.execute("SELECT count(dsync_acquire(i::text, 'prefill', '30 s'))"
                             " FROM generate_series(%s::int, %s::int) i", (b + 1, b + 10000))
                conn.execute("SELECT count(dsync_release(i::text, 'prefill'))"
                             " FROM generate_series(%s::int, %s::int) i", (b + 1, b + 10000))
            size = conn.execute("SELECT pg_size_pretty(pg_total_relation_size("
                                "'dsync_lease'::regclass))").fetchone()[0]
        print(f"\n2. {NAMES:,} released names in the table ({size}, filled as app in "
              f"{time.monotonic() - t0:.0f} s)")
        show("Lock cycle, direct", cycles(direct, names, CYCLES // 4))
        show("Lock cycle, through PgBouncer (transaction mode)", cycles(bouncer, names, CYCLES // 4))
        show("Lock cycle, one Lock object reused, direct", reused_cycles(direct, "reused", CYCLES // 4))
        show("SQL cycle, direct", raw_cycles(direct, names, CYCLES))
        show("SQL cycle, through PgBouncer", raw_cycles(bouncer, names, CYCLES))

        print(f"\n3. One name cycled while a REPEATABLE READ snapshot is held open "
              f"{SNAPSHOT_SECONDS} s")
        stop = threading.Event()
        counts = []

        def loop():
            with psycopg.connect(direct, autocommit=True, prepare_threshold=None) as conn:
                while not stop.is_set():
                    t_end = time.monotonic() + 5
                    n = 0
                    while time.monotonic() < t_end:
                        conn.execute("SELECT dsync_acquire('hot', 'bench', '30 s')")
                        conn.execute("SELECT dsync_release('hot', 'bench')")
                        n += 1
                    counts.append(n / 5)

        with psycopg.connect(direct) as snap:
            snap.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            snap.execute("SELECT count(*) FROM dsync_leases WHERE lease = 'hot'").fetchone()
            t = threading.Thread(target=loop)
            t.start()
            time.sleep(SNAPSHOT_SECONDS)
            stop.set()
            t.join()
            snap.rollback()
        print("  cycles/s in each 5 s: " + ", ".join(f"{c:.0f}" for c in counts))
        if len(counts) >= 2:
            print(f"  last / first: {counts[-1] / counts[0]:.2f}")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
