"""Driver of queue_scale_bench.sh: what queued waiters (dsync_queue) cost as
their number grows, on the script's throwaway server (PGHOST/PGPORT set).

For each size N of BENCH_SIZES (default 100,1000,10000,100000):

  many names  N names held by "owner", one waiter queued on each
              (queued from one connection: a queued waiter needs none);
  one name    one name held, N waiters queued on it.

and prints, per size and shape:

  join        seconds to queue the N waiters (one statement);
  worker +kB  what the dsync worker's RssAnon (private memory) grew by from
              before the N joined (the names already held) to after the
              idle time and the passes;
  idle cpu    CPU time, in ms per second, of every server process while the
              N waiters sit queued for BENCH_IDLE seconds (nothing renews:
              their ttl is 10 minutes); no per-waiter timer means flat;
  pass ms     one dsync_queue_pass() (the worker's pass: due grants, poked
              names, the sweep) with N queued, median of 5;
  hand-off    release to the granted waiter's notification arriving on a
              listening connection, p50 / p99 over BENCH_SAMPLES releases
              (many names: a random held name each time; one name: the
              holder releases and the next in line is granted, a chain);
  lapse s     with the N waiters queued at a 2 s ttl and nothing renewing,
              seconds until dsync_waiters shows none and a new waiter is
              granted a released name at once (the sweep's cost at scale).

Lines starting "@ " are for the script.  Nothing is asserted.
"""

import json
import os
import random
import select
import statistics
import time

import psycopg

from client_bench import cpu_seconds  # noqa: E402  (its /proc reading)

SIZES = [int(s) for s in os.environ.get("BENCH_SIZES", "100,1000,10000,100000").split(",")]
IDLE = float(os.environ.get("BENCH_IDLE", "5"))
SAMPLES = int(os.environ.get("BENCH_SAMPLES", "200"))
CHANNEL_KEY = "qs"


def rss_anon_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    return 0


def server_pids(conn):
    """The postmaster and every process it started, by pg_stat_activity."""
    rows = conn.execute("SELECT pid FROM pg_stat_activity").fetchall()
    with open(os.path.join(conn.execute("SHOW data_directory").fetchone()[0],
                           "postmaster.pid")) as f:
        postmaster = int(f.readline())
    return [postmaster] + [r[0] for r in rows]


def wait_grant(listener, lease, deadline):
    """Seconds-stamp when a "granted" notification for lease arrives."""
    pg = listener.pgconn
    while time.perf_counter() < deadline:
        pg.consume_input()
        while True:
            n = pg.notifies()
            if n is None:
                break
            if json.loads(n.extra).get("lease") == lease:
                return time.perf_counter()
        select.select([pg.socket], [], [], 0.05)
    return None


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))] if xs else float("nan")


def measure(conn, listener, worker, tag, n, shape):
    pids = server_pids(conn)
    q = conn.execute
    prefix = f"{shape}{n}_"
    if shape == "many":
        q("SELECT count(dsync_acquire(%s || i, 'owner', '1 hour')) FROM generate_series(1, %s) i",
          (prefix, n))
        time.sleep(0.5)
        wkb0 = rss_anon_kb(worker) if worker else 0
        t0 = time.perf_counter()
        q("SELECT count(*) FROM generate_series(1, %s) i"
          " WHERE dsync_queue(%s || i, 'w', '10 min', %s) IS NULL", (n, prefix, CHANNEL_KEY))
    else:
        q("SELECT dsync_acquire(%s, 'owner', '1 hour')", (prefix,))
        time.sleep(0.5)
        wkb0 = rss_anon_kb(worker) if worker else 0
        t0 = time.perf_counter()
        q("SELECT count(*) FROM generate_series(1, %s) i"
          " WHERE dsync_queue(%s, 'w' || i, '10 min', %s) IS NULL", (n, prefix, CHANNEL_KEY))
    join = time.perf_counter() - t0
    queued = q("SELECT count(*) FROM dsync_waiters WHERE kind = 'queued'").fetchone()[0]
    before = cpu_seconds(pids)
    time.sleep(IDLE)
    idle = (cpu_seconds(pids) - before) * 1000 / IDLE
    passes = []
    for _ in range(5):
        t = time.perf_counter()
        q("SELECT dsync_queue_pass()")
        passes.append((time.perf_counter() - t) * 1000)
    wkb = (rss_anon_kb(worker) - wkb0) if worker else 0
    lat = []
    if shape == "many":
        picks = random.sample(range(1, n + 1), min(SAMPLES, n))
        for i in picks:
            lease = f"{prefix}{i}"
            t = time.perf_counter()
            q("SELECT dsync_release(%s, 'owner')", (lease,))
            got = wait_grant(listener, lease, t + 10)
            if got is not None:
                lat.append((got - t) * 1000)
    else:
        holder = "owner"
        for k in range(1, min(SAMPLES, n) + 1):
            t = time.perf_counter()
            q("SELECT dsync_release(%s, %s)", (prefix, holder))
            got = wait_grant(listener, prefix, t + 10)
            if got is not None:
                lat.append((got - t) * 1000)
            holder = f"w{k}"
    print(f"{tag:>5} {shape:>4} {n:>7} {queued:>7} {join:7.2f} s "
          f"{wkb:8d} kB {idle:7.2f} ms/s {statistics.median(passes):8.2f} ms "
          f"{pct(lat, 0.5):6.2f} / {pct(lat, 0.99):6.2f} ms", flush=True)
    print(f"@ {shape}_{n}_handoff_p50 {pct(lat, 0.5):.3f}")
    # Leave nothing behind for the next size.
    q("SELECT count(dsync_unqueue(lease, holder)) FROM"
      " (SELECT name AS lease, holder FROM dsync_waiters WHERE kind = 'queued') w")
    q("SELECT count(dsync_release(lease, holder)) FROM dsync_leases")


def lapse(conn, n):
    q = conn.execute
    prefix = f"lapse{n}_"
    q("SELECT count(dsync_acquire(%s || i, 'owner', '1 hour')) FROM generate_series(1, %s) i",
      (prefix, n))
    q("SELECT count(*) FROM generate_series(1, %s) i"
      " WHERE dsync_queue(%s || i, 'w', '2 s', %s) IS NULL", (n, prefix, CHANNEL_KEY))
    t0 = time.perf_counter()
    while q("SELECT count(*) FROM dsync_waiters WHERE kind = 'queued'").fetchone()[0] > 0:
        time.sleep(0.05)
    gone = time.perf_counter() - t0
    q("SELECT dsync_release(%s || 1, 'owner')", (prefix,))
    token = q("SELECT dsync_queue(%s || 1, 'late', '10 s', %s)", (prefix, CHANNEL_KEY)).fetchone()[0]
    print(f"lapse {n:>7}: places gone {gone:.2f} s after queuing at a 2 s ttl; "
          f"a new waiter on a released name granted at once: {token is not None}", flush=True)
    q("SELECT count(dsync_release(lease, holder)) FROM dsync_leases")


def main():
    conn = psycopg.connect("dbname=postgres", autocommit=True)
    listener = psycopg.connect("dbname=postgres", autocommit=True,
                               application_name="dsync bench listener")
    channel = listener.execute("SELECT dsync_queue_channel(%s)", (CHANNEL_KEY,)).fetchone()[0]
    listener.execute(f'LISTEN "{channel}"')
    worker = conn.execute("SELECT pid FROM pg_stat_activity WHERE backend_type LIKE 'dsync%'"
                          " AND datname = current_database() LIMIT 1").fetchone()
    worker = worker[0] if worker else None
    print("shared memory: %s in all with dsync.max_queued_waiters = %s (the queue's tables are"
          " allocated at start, whatever is queued)" % (
              conn.execute("SHOW shared_memory_size").fetchone()[0],
              conn.execute("SHOW dsync.max_queued_waiters").fetchone()[0]))
    print(f"{'':>5} {'':>4} {'N':>7} {'queued':>7} {'join':>9} "
          f"{'worker +':>11} {'idle cpu':>12} {'pass':>11} {'hand-off p50 / p99':>18}")
    for n in SIZES:
        for shape in ("many", "one"):
            measure(conn, listener, worker, "size", n, shape)
    for n in SIZES:
        lapse(conn, n)


if __name__ == "__main__":
    main()
