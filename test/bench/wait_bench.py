"""Waiting through the Python client against waiting in raw SQL: BENCH_WORKERS
(default 16) threads on one name take it, hold it BENCH_HOLD_MS (default 0)
and give it back, as fast as hand-offs go.

    python3 test/bench/wait_bench.py        # as root, after make install

Both sides wait inside the server, woken at the commit that frees the name:

  - raw: each thread has its own psycopg connection (psycopg's defaults:
    a statement run 5 times is prepared) and calls dsync_acquire(name,
    holder, '30 s', wait => '30 s') and dsync_release;
  - raw-unprepared: the same with prepare_threshold=None, the setting the
    client uses so that it works through PgBouncer in transaction mode;
  - client: one dsync.Client, one Lock object shared by the threads (a
    module-level lock, as threading.Lock is used), lock.acquire() and
    lock.release(); its keeper renews and LISTENs as in production (on a
    connection that reaches the server itself it prepares its statements:
    dsync/_wire.py);
  - raw-queue: each thread has its own connection for its statements and
    waits without a backend: dsync_queue(name, holder, '30 s', 'wb'); on
    NULL it waits for the "granted" notification (with the token), which
    one listener connection of the process receives and hands to it (or
    1 s, then asks with dsync_claim), and later calls dsync_release, which
    claims the grant and whose transaction grants the next in line (the
    figure issue 41 compares with raw);
  - client-prepared (not run by default): the same with
    Client(dsn, prepare_threshold=5), which the clients before 1.5's
    dsync/_wire.py needed to prepare anything.

Printed per round and side: the transaction ids handed out per hand-off
(every write transaction of the server's, the worker's too).  BENCH_COMMIT
(on, off): synchronous_commit of the sides' connections.

The sides (BENCH_SIDES, comma-separated) alternate, BENCH_ROUNDS (default 5) rounds of BENCH_SECONDS (default
5) each way on a fresh name, on the throwaway server of
clients/python/tests/conftest.py (an ordinary role, default settings).
Printed per side: hand-offs/s (median of the rounds) and the hand-off
latency, from the moment release() returned to the moment the next
holder's acquire() returned (p50 and p99 over every hand-off); then client
/ raw.  Nothing is asserted: the machine is noisy, only same-run ratios
mean anything.
"""

import json
import os
import select
import statistics
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# BENCH_CLIENT: the clients/python folder of another version of the client
# (for a figure before a change), e.g.
#     git archive c341add clients/python | tar -x -C /tmp/before
#     BENCH_CLIENT=/tmp/before/clients/python python3 test/bench/wait_bench.py
sys.path.insert(0, os.environ.get("BENCH_CLIENT")
                or os.path.join(HERE, "..", "..", "clients", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "clients", "python", "tests"))

import psycopg  # noqa: E402

from conftest import Server  # noqa: E402
from dsync import Client  # noqa: E402

WORKERS = int(os.environ.get("BENCH_WORKERS", "16"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "5"))
SECONDS = float(os.environ.get("BENCH_SECONDS", "5"))
HOLD = float(os.environ.get("BENCH_HOLD_MS", "0")) / 1000
SIDES = os.environ.get("BENCH_SIDES", "raw,raw-unprepared,client").split(",")
# BENCH_COMMIT=off: every connection of the sides commits with
# synchronous_commit = off (the worker keeps the server's setting).
COMMIT = os.environ.get("BENCH_COMMIT", "on")

RAW_ACQUIRE = ("SELECT dsync_acquire(%s::text, %s::text, '30 s'::interval, "
               "wait => '30 s'::interval)")
RAW_RELEASE = "SELECT dsync_release(%s::text, %s::text)"
QUEUE = "SELECT dsync_queue(%s::text, %s::text, '30 s'::interval, %s::text)"
CLAIM = "SELECT state, fencing FROM dsync_claim(%s::text, %s::text)"


class Round:
    """What the workers of one round saw: (acquire returned, release
    returned) per section, and when the round ends."""

    def __init__(self):
        self.mutex = threading.Lock()
        self.sections = []
        self.start = self.end = 0.0
        self.stop = threading.Event()

    def record(self, acquired, released):
        with self.mutex:
            self.sections.append((acquired, released))

    def figures(self):
        """Hand-offs/s inside the round's window, and the latency of each
        hand-off in it (ms)."""
        secs = sorted(s for s in self.sections if self.start <= s[0] < self.end)
        gaps = [(secs[i + 1][0] - secs[i][1]) * 1000 for i in range(len(secs) - 1)]
        return len(secs) / (self.end - self.start), gaps


XMAX = "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint"


def run_round(work, setup, teardown, dsn):
    """WORKERS threads running work(rnd, i) until the round's window ends;
    also how many transaction ids the server handed out per section (every
    write transaction of anybody's, the worker's too)."""
    rnd = Round()
    ctx = setup()
    probe = psycopg.connect(dsn, autocommit=True)
    ready = threading.Barrier(WORKERS + 1)

    def worker(i):
        ready.wait()
        work(ctx, rnd, i)
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(WORKERS)]
    for t in threads:
        t.start()
    ready.wait()
    rnd.start = time.perf_counter() + 0.5           # connections made, queue formed
    rnd.end = rnd.start + SECONDS
    time.sleep(0.5)
    xid0 = probe.execute(XMAX).fetchone()[0]
    time.sleep(SECONDS)
    xid1 = probe.execute(XMAX).fetchone()[0]
    rnd.stop.set()
    for t in threads:
        t.join()
    teardown(ctx)
    probe.close()
    rate, gaps = rnd.figures()
    return rate, gaps, (xid1 - xid0) / max(1, rate * SECONDS)


def raw_side(dsn, name, **kwargs):
    """Each thread on its own connection, the two SQL calls."""
    def setup():
        return [psycopg.connect(dsn, autocommit=True, **kwargs) for _ in range(WORKERS)]

    def work(conns, rnd, i):
        conn, holder = conns[i], f"w{i}"
        while not rnd.stop.is_set():
            token = conn.execute(RAW_ACQUIRE, (name, holder)).fetchone()[0]
            acquired = time.perf_counter()
            assert token is not None
            if HOLD:
                time.sleep(HOLD)
            conn.execute(RAW_RELEASE, (name, holder))
            rnd.record(acquired, time.perf_counter())

    def teardown(conns):
        for conn in conns:
            conn.close()
    return run_round(work, setup, teardown, dsn)


def queue_side(dsn, name, **kwargs):
    """Each thread on its own connection for its statements, queued
    without a backend; one listener connection for the process, whose
    thread hands each "granted" notification to its waiter (as a client
    library does: one LISTEN per process, not per waiter)."""
    def setup():
        conns = [psycopg.connect(dsn, autocommit=True, **kwargs) for _ in range(WORKERS)]
        listener = psycopg.connect(dsn, autocommit=True, **kwargs)
        channel = listener.execute("SELECT dsync_queue_channel(%s)", ("wb",)).fetchone()[0]
        listener.execute(f'LISTEN "{channel}"')
        events = [threading.Event() for _ in range(WORKERS)]
        tokens = [None] * WORKERS
        done = threading.Event()

        def dispatch():
            pg = listener.pgconn
            while not done.is_set():
                if not select.select([pg.socket], [], [], 0.2)[0]:
                    continue
                pg.consume_input()
                while True:
                    n = pg.notifies()
                    if n is None:
                        break
                    grant = json.loads(n.extra)
                    i = int(grant["holder"][1:])
                    tokens[i] = grant["fencing"]
                    events[i].set()
        t = threading.Thread(target=dispatch)
        t.start()
        return conns, listener, events, tokens, done, t

    def work(ctx, rnd, i):
        conn, events, tokens, holder = ctx[0][i], ctx[2], ctx[3], f"w{i}"
        while not rnd.stop.is_set():
            events[i].clear()
            tokens[i] = None
            token = conn.execute(QUEUE, (name, holder, "wb")).fetchone()[0]
            while token is None:
                # The grant, committed, comes with its token; the release
                # below claims it (as a renewal would), well within
                # dsync.claim_window.  Without word in 1 s: ask.
                if events[i].wait(1.0) and tokens[i] is not None:
                    token = tokens[i]
                    break
                events[i].clear()
                state, fencing = conn.execute(CLAIM, (name, holder)).fetchone()
                if state == "granted":
                    token = fencing
                else:
                    assert state == "queued", state
            acquired = time.perf_counter()
            if HOLD:
                time.sleep(HOLD)
            conn.execute(RAW_RELEASE, (name, holder))
            rnd.record(acquired, time.perf_counter())

    def teardown(ctx):
        conns, listener, _events, _tokens, done, t = ctx
        done.set()
        t.join()
        for conn in conns + [listener]:
            conn.close()
    return run_round(work, setup, teardown, dsn)


def client_side(dsn, name, **kwargs):
    """One Client, one Lock object shared by the threads."""
    def setup():
        client = Client(dsn, **kwargs)
        return client, client.lock(name, ttl=30)

    def work(ctx, rnd, _i):
        lock = ctx[1]
        while not rnd.stop.is_set():
            assert lock.acquire(timeout=30)
            acquired = time.perf_counter()
            if HOLD:
                time.sleep(HOLD)
            lock.release()
            rnd.record(acquired, time.perf_counter())

    def teardown(ctx):
        ctx[0].close()
    return run_round(work, setup, teardown, dsn)


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * q))]


def main():
    server = Server()
    server.start()
    sides = {"raw": raw_side,
             "raw-unprepared": lambda d, n: raw_side(d, n, prepare_threshold=None),
             "raw-queue": queue_side,
             "client": client_side,
             "client-prepared": lambda d, n: client_side(d, n, prepare_threshold=5)}
    try:
        print(f"{WORKERS} threads on one name, {ROUNDS} alternating rounds of {SECONDS:g} s, "
              f"sections of {HOLD * 1000:g} ms, synchronous_commit {COMMIT}; "
              f"PostgreSQL as initdb makes it (role app), "
              f"psycopg {psycopg.__version__} ({psycopg.pq.__impl__}), "
              f"Python {sys.version.split()[0]}", flush=True)
        rates = {s: [] for s in SIDES}
        gaps = {s: [] for s in SIDES}
        xids = {s: [] for s in SIDES}
        for r in range(ROUNDS):
            for side in SIDES:
                dsn = server.dsn()
                if COMMIT == "off":
                    dsn += " options='-c synchronous_commit=off'"
                rate, g, x = sides[side](dsn, f"bench-{side}-{r}")
                rates[side].append(rate)
                gaps[side] += g
                xids[side].append(x)
                print(f"  round {r + 1} {side:15s}: {rate:7.1f} hand-offs/s, "
                      f"p50 {pct(g, 0.5):6.2f} ms, {x:.2f} xids per hand-off", flush=True)
        print()
        for side in SIDES:
            print(f"{side:15s}: {statistics.median(rates[side]):7.1f} hand-offs/s (median of "
                  f"rounds), hand-off p50 {pct(gaps[side], 0.5):6.2f} ms, p99 "
                  f"{pct(gaps[side], 0.99):6.2f} ms (n={len(gaps[side])}), "
                  f"{statistics.median(xids[side]):.2f} xids per hand-off")
        for lib, base in (("client", "raw"), ("client", "raw-unprepared"),
                          ("client-prepared", "raw"), ("raw-queue", "raw")):
            if lib in SIDES and base in SIDES:
                print(f"{lib} / {base}: throughput "
                      f"{statistics.median(rates[lib]) / statistics.median(rates[base]):.2f}x, "
                      f"p50 latency {pct(gaps[lib], 0.5) / pct(gaps[base], 0.5):.2f}x, "
                      f"p99 latency {pct(gaps[lib], 0.99) / pct(gaps[base], 0.99):.2f}x")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
