"""dsync's locks against Redis, etcd and ZooKeeper locks on the same machine,
each through its usual Python lock API (issue 42).

    python3 test/bench/rivals_bench.py      # as root, with dsync installed

Needs redis-server, etcd and ZooKeeper's jars besides PostgreSQL 15 (on
Debian: apt-get install redis-server etcd-server zookeeper python3-redis
python3-etcd3 python3-kazoo; no service of theirs is used).  Every server is
started here, in a temporary directory, listening on 127.0.0.1 only (every
side goes through TCP loopback), and stopped at the end:

  - dsync: the throwaway server of clients/python/tests/conftest.py
    (initdb's settings: fsync, synchronous_commit on), moved from its Unix
    socket to 127.0.0.1; dsync.Client(dsn).lock(name, ttl=30), acquire()
    and release();
  - dsync-async: the same server, the client's connections with
    synchronous_commit=off (a commit is acknowledged before its WAL is
    flushed; a crash may forget the last grants, never a fencing order);
  - advisory: the same server, pg_advisory_lock(key) and
    pg_advisory_unlock(key) of the name's hashtextextended() on a
    connection of its own per thread (a session-level advisory lock
    belongs to a connection, so each waiter needs one), in autocommit: no
    ttl, no token, nothing written, a waiter blocked in the server's lock
    manager;
  - redis: redis-server --save '' --appendonly no (nothing on disk: a
    restart forgets every lock); redis.Redis().lock(name, timeout=30,
    blocking_timeout=60), redis-py's Lock: SET key token NX PX, released
    by a Lua compare-and-delete, a waiter retrying every `sleep` seconds
    (redis-py's default 0.1);
  - redis-poll1ms: the same with sleep=0.001, to show what the polling
    interval does to a hand-off (and to the server);
  - redis-aof: redis-server --appendonly yes --appendfsync always (every
    write on disk before its reply), redis-py's default Lock;
  - etcd: one member, its own data directory (it fsyncs its WAL before
    answering a write); python-etcd3's Lock(name, ttl=30): acquire(timeout=60)
    and release(), its acquire rewritten here as EtcdLock (the library's
    fails whenever it has to wait: see EtcdLock); python-etcd3 0.12 with
    protobuf 4 may need PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python, a
    slower encoder: the versions printed say which one ran;
  - zookeeper: standalone ZooKeeperServerMain (forceSync=yes, its default:
    the transaction log is fsynced before a write is answered); kazoo's
    KazooClient.Lock(path).acquire(timeout=60) and release().

Two scenarios, alternating with the sides in rounds (the order of the sides
rotates from round to round):

  1. cycle: one thread, acquire+release of a fresh random name each cycle
     (the lock object made for it counts): cycles/s, and the latency of a
     cycle (p50, p99 over every cycle of every round);
  2. handoff: BENCH_THREADS (8) threads on one name, each with its own
     lock object (on one client of the library per process: a dsync
     Client, a redis.Redis pool, an etcd3 client, a KazooClient), taking
     it, holding it BENCH_HOLD_MS (0) and giving it back, in a loop.
     Timestamps (time.monotonic) of every acquire and release returned
     give: sections/s on the name, hand-offs/s (a section followed by
     another thread's), the share of sections the thread that had just
     released took again (a lock without a queue lets it barge), and the
     hand-off latency, from release() returned in one thread to acquire()
     returned in the next (p50, p99 over every hand-off).

Printed per round and side, then a table of medians over the rounds (the
percentiles pool every sample), what each side offers (fencing token,
durability, how a waiter waits), and the versions of servers and
libraries.  Settings: BENCH_SIDES (comma-separated, default all of the
above), BENCH_ROUNDS (3), BENCH_SECONDS (5, per round, scenario and side),
BENCH_THREADS (8), BENCH_HOLD_MS (0), BENCH_TTL (30).  Nothing is asserted:
the machine is noisy, compare within one run.
"""

import concurrent.futures
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "clients", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "clients", "python", "tests"))

import etcd3  # noqa: E402
import etcd3.etcdrpc  # noqa: E402
import etcd3.exceptions  # noqa: E402
import google.protobuf  # noqa: E402
from google.protobuf.internal import api_implementation  # noqa: E402
import grpc  # noqa: E402
import kazoo  # noqa: E402
import kazoo.client  # noqa: E402
import psycopg  # noqa: E402
import redis  # noqa: E402

import dsync  # noqa: E402
from conftest import PGBIN, Server, _as_postgres, _free_port  # noqa: E402

ALL_SIDES = "dsync,dsync-async,advisory,redis,redis-poll1ms,redis-aof,etcd,zookeeper"
SIDES = os.environ.get("BENCH_SIDES", ALL_SIDES).split(",")
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
SECONDS = float(os.environ.get("BENCH_SECONDS", "5"))
THREADS = int(os.environ.get("BENCH_THREADS", "8"))
HOLD = float(os.environ.get("BENCH_HOLD_MS", "0")) / 1000
TTL = int(os.environ.get("BENCH_TTL", "30"))
WAIT = 60          # an acquire's timeout: far beyond any hand-off here

ZK_CLASSPATH = os.environ.get("ZK_CLASSPATH", "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar")


# -- servers ---------------------------------------------------------------------


def wait_port(port, proc, what, seconds=30):
    """Wait until something accepts on 127.0.0.1:port (proc still alive)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{what} did not listen on 127.0.0.1:{port}")


def four_letters(port, word):
    """ZooKeeper's answer to a four-letter word ('' if none yet)."""
    try:
        with socket.create_connection(("127.0.0.1", port), 1) as s:
            s.sendall(word)
            chunks = []
            while True:
                chunk = s.recv(4096)
                if not chunk:
                    return b"".join(chunks).decode()
                chunks.append(chunk)
    except OSError:
        return ""


class Servers:
    """The servers the sides need, each in a directory of its own."""

    def __init__(self, sides):
        self.sides = sides
        self.dir = tempfile.mkdtemp(prefix="dsync-rivals-")
        self.procs = []
        self.pg = None
        self.ports = {}
        self.versions = {}

    def _spawn(self, name, cmd, port):
        log = open(os.path.join(self.dir, f"{name}.log"), "w")
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=self.dir)
        self.procs.append(proc)
        wait_port(port, proc, name)
        self.ports[name] = port

    def start(self):
        if any(s.startswith("dsync") or s == "advisory" for s in self.sides):
            self.pg = Server()
            self.pg.start()
            # Off its Unix socket onto loopback TCP, as the others are.
            with psycopg.connect(self.pg.dsn("postgres", "postgres"), autocommit=True) as conn:
                conn.execute("ALTER SYSTEM SET listen_addresses = '127.0.0.1'")
                self.versions["PostgreSQL"] = conn.execute("SHOW server_version").fetchone()[0]
            with psycopg.connect(self.pg.dsn(), autocommit=True) as conn:
                self.versions["dsync extension"] = conn.execute(
                    "SELECT extversion FROM pg_extension WHERE extname = 'dsync'").fetchone()[0]
            _as_postgres([f"{PGBIN}/pg_ctl", "-D", self.pg.data, "-w", "restart", "-l",
                          os.path.join(self.pg.dir, "server.log")], stdout=subprocess.DEVNULL)
            self.ports["dsync"] = self.pg.port
        if "redis" in self.sides or "redis-poll1ms" in self.sides:
            port = _free_port()
            self._spawn("redis", ["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                                  "--save", "", "--appendonly", "no", "--dir", self.dir,
                                  "--dbfilename", "redis.rdb"], port)
        if "redis-aof" in self.sides:
            port = _free_port()
            aof = os.path.join(self.dir, "redis-aof")
            os.mkdir(aof)
            self._spawn("redis-aof", ["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                                      "--save", "", "--appendonly", "yes",
                                      "--appendfsync", "always", "--dir", aof], port)
        if "etcd" in self.sides:
            port, peer = _free_port(), _free_port()
            client, peer_url = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{peer}"
            self._spawn("etcd", ["etcd", "--name", "bench",
                                 "--data-dir", os.path.join(self.dir, "etcd"),
                                 "--listen-client-urls", client, "--advertise-client-urls", client,
                                 "--listen-peer-urls", peer_url,
                                 "--initial-advertise-peer-urls", peer_url,
                                 "--initial-cluster", f"bench={peer_url}",
                                 "--log-level", "warn"], port)
        if "zookeeper" in self.sides:
            port = _free_port()
            data = os.path.join(self.dir, "zookeeper")
            os.mkdir(data)
            cfg = os.path.join(self.dir, "zoo.cfg")
            with open(cfg, "w") as f:
                f.write(f"tickTime=2000\ndataDir={data}\nclientPort={port}\n"
                        "clientPortAddress=127.0.0.1\nadmin.enableServer=false\n"
                        "4lw.commands.whitelist=srvr\nforceSync=yes\n")
            self._spawn("zookeeper", ["java", "-cp", ZK_CLASSPATH,
                                      "org.apache.zookeeper.server.ZooKeeperServerMain", cfg],
                        port)
            # Its port opens before it serves: wait for "srvr" to say so
            # (else kazoo's first tries log dropped connections).
            deadline = time.monotonic() + 30
            while "Mode:" not in four_letters(port, b"srvr"):
                if time.monotonic() > deadline:
                    raise RuntimeError("zookeeper did not start serving")
                time.sleep(0.2)

    def dsn(self, commit="on"):
        dsn = f"host=127.0.0.1 port={self.pg.port} dbname=app user=app"
        if commit == "off":
            dsn += " options='-c synchronous_commit=off'"
        return dsn

    def stop(self):
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self.pg is not None:
            self.pg.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


# -- sides: one lock API each ------------------------------------------------------


class Side:
    """What every side does unless it says otherwise: a wait of up to WAIT
    seconds, and nothing to clean between rounds."""

    @staticmethod
    def acquire(lock):
        return lock.acquire(timeout=WAIT)

    def cleanup(self):
        pass


class DsyncSide(Side):
    fencing = "yes: the token acquire() got (lock.token), increasing per name"
    waits = "push: a blocking acquire waits inside the server, woken at the freeing commit"

    def __init__(self, servers, commit):
        self.client = dsync.Client(servers.dsn(commit))
        self.durability = ("synchronous_commit on: each grant and release is a commit "
                           "flushed (fsync) before it returns" if commit == "on" else
                           "synchronous_commit off: acknowledged before the WAL flush "
                           "(up to 3 x wal_writer_delay lost on a crash)")

    def lock(self, name, _i=0):
        return self.client.lock(name, ttl=TTL)

    def close(self):
        self.client.close()


class AdvisoryLock:
    """A session-level advisory lock on one name, on its thread's
    connection: acquire() waits in the server (no timeout: the hand-off
    joins its threads long before WAIT)."""

    def __init__(self, conn, name):
        self.conn = conn
        self.name = name

    def acquire(self, timeout=None):
        self.conn.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", (self.name,))
        return True

    def release(self):
        if not self.conn.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))",
                                 (self.name,)).fetchone()[0]:
            raise RuntimeError(f"advisory lock {self.name!r} was not held")


class AdvisorySide(Side):
    fencing = "no"
    durability = "none: held in the server's memory, lost when the session or the server ends"
    waits = "a blocked backend per waiter, woken by the unlock"

    def __init__(self, servers):
        self.dsn = servers.dsn()
        self.conns = {}

    def lock(self, name, i=0):
        if i not in self.conns:
            self.conns[i] = psycopg.connect(self.dsn, autocommit=True)
        return AdvisoryLock(self.conns[i], name)

    def close(self):
        for conn in self.conns.values():
            conn.close()


class RedisSide(Side):
    fencing = "no: the random token only guards release; nothing increases"

    def __init__(self, servers, name="redis", sleep=0.1):
        self.r = redis.Redis(host="127.0.0.1", port=servers.ports[name])
        self.sleep = sleep
        self.durability = ("appendfsync always: every write fsynced to the AOF before its "
                           "reply" if name == "redis-aof" else
                           "none (--save '' --appendonly no): a restart forgets every lock")
        self.waits = f"polling: SET NX retried every {sleep:g} s (redis-py's sleep)"

    def lock(self, name, _i=0):
        return self.r.lock("bench:" + name, timeout=TTL, sleep=self.sleep,
                           blocking_timeout=WAIT)

    @staticmethod
    def acquire(lock):
        return lock.acquire()           # its wait is the lock's blocking_timeout

    def close(self):
        self.r.close()


class EtcdLock(etcd3.Lock):
    """python-etcd3's Lock with its acquire() rewritten without tenacity:
    0.12's (the last release, and its master) passes tenacity a wait
    function of the old signature, and any acquire that must wait fails
    with "wait() missing 1 required positional argument"
    (kragniz/python-etcd3 issue 2149).  The algorithm is the library's: a
    new lease per try, a transaction putting the key if it does not exist,
    else watch_once on the key and try again, every waiter at each event.
    One change: the watch starts just after the revision the failed try
    saw, so that a delete falling between the try and the watch is not
    missed (the library's would sleep until the next event or its
    timeout)."""

    def acquire(self, timeout=10):
        deadline = None if timeout is None else time.monotonic() + timeout
        tx = self.etcd_client.transactions
        while True:
            self.lease = self.etcd_client.lease(self.ttl)
            ok, found = self.etcd_client.transaction(
                compare=[tx.create(self.key) == 0],
                success=[tx.put(self.key, self.uuid, lease=self.lease)],
                failure=[tx.get(self.key)])
            if ok:
                return True
            self.lease = None
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            seen = found[0][0][1].mod_revision
            try:
                self.etcd_client.watch_once(self.key, left, start_revision=seen + 1)
            except etcd3.exceptions.WatchTimedOut:
                pass


class EtcdSide(Side):
    fencing = ("yes in etcd (the key's create revision), but python-etcd3's Lock "
               "neither keeps nor returns it (a get of the key after acquire)")
    durability = "every write (lease grant, put, delete) fsynced to the WAL by raft"
    waits = ("push: watch_once on the key, then every waiter retries "
             "(a new lease and a transaction each); no queue")

    def __init__(self, servers):
        self.client = etcd3.client(host="127.0.0.1", port=servers.ports["etcd"])

    def lock(self, name, _i=0):
        return EtcdLock(name, ttl=TTL, etcd_client=self.client)

    def cleanup(self):
        # python-etcd3's release deletes the key but leaves its lease (and a
        # failed try's) to expire after the ttl: revoke them now, untimed,
        # rather than have etcd expire them during another side's round.
        leases = self.client.leasestub.LeaseLeases(etcd3.etcdrpc.LeaseLeasesRequest()).leases
        with concurrent.futures.ThreadPoolExecutor(8) as pool:    # one fsync each otherwise
            list(pool.map(self.client.revoke_lease, [lease.ID for lease in leases]))

    def close(self):
        # Not self.client.close(): the library's watch thread, a daemon,
        # would go on retrying on the closed channel and print its error.
        pass


class ZooKeeperSide(Side):
    fencing = "yes: the lock node's sequence number (lock.node), increasing per lock path"
    durability = "every write (create, delete) fsynced to the transaction log (forceSync=yes)"
    waits = "push: a watch on the node just ahead in the queue (FIFO, no herd)"

    def __init__(self, servers):
        self.zk = kazoo.client.KazooClient(hosts=f"127.0.0.1:{servers.ports['zookeeper']}")
        self.zk.start()

    def lock(self, name, i=0):
        return self.zk.Lock("/bench/" + name, f"t{i}")

    def close(self):
        self.zk.stop()
        self.zk.close()


def make_side(name, servers):
    if name == "dsync":
        return DsyncSide(servers, "on")
    if name == "dsync-async":
        return DsyncSide(servers, "off")
    if name == "advisory":
        return AdvisorySide(servers)
    if name == "redis":
        return RedisSide(servers)
    if name == "redis-poll1ms":
        return RedisSide(servers, sleep=0.001)
    if name == "redis-aof":
        return RedisSide(servers, "redis-aof")
    if name == "etcd":
        return EtcdSide(servers)
    if name == "zookeeper":
        return ZooKeeperSide(servers)
    raise SystemExit(f"unknown side {name!r} (known: {ALL_SIDES})")


# -- scenarios ----------------------------------------------------------------------


def run_cycle(side):
    """One thread, acquire+release on a fresh random name per cycle, for
    SECONDS (after a second of the same, unmeasured): (cycles/s, latencies
    in ms)."""
    def cycle():
        lock = side.lock(uuid.uuid4().hex)
        assert side.acquire(lock)
        lock.release()

    warm = time.monotonic() + 1
    while time.monotonic() < warm:
        cycle()
    lat = []
    start = time.monotonic()
    end = start + SECONDS
    while True:
        t0 = time.monotonic()
        if t0 >= end:
            break
        cycle()
        lat.append((time.monotonic() - t0) * 1000)
    return len(lat) / (time.monotonic() - start), lat


def run_handoff(side, name):
    """THREADS threads on one name until SECONDS past a half-second start:
    (sections/s, hand-offs/s, share of sections retaken by the thread that
    had just released, hand-off latencies in ms from release() returned,
    the same from release() called)."""
    sections = []                       # (acquired, release called, released, thread)
    mutex = threading.Lock()
    stop = threading.Event()
    locks = [side.lock(name, i) for i in range(THREADS)]
    ready = threading.Barrier(THREADS + 1)
    errors = []

    def worker(i):
        lock = locks[i]
        ready.wait()
        try:
            while not stop.is_set():
                if not side.acquire(lock):
                    raise RuntimeError(f"no lock within {WAIT} s")
                acquired = time.monotonic()
                if HOLD:
                    time.sleep(HOLD)
                releasing = time.monotonic()
                lock.release()
                released = time.monotonic()
                with mutex:
                    sections.append((acquired, releasing, released, i))
        except Exception as e:          # reported below, not lost in a thread
            errors.append(e)
            stop.set()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    ready.wait()
    start = time.monotonic() + 0.5      # let the first waits line up
    end = start + SECONDS
    time.sleep(0.5 + SECONDS)
    stop.set()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    secs = sorted(s for s in sections if start <= s[0] < end)
    pairs = list(zip(secs, secs[1:]))
    for a, b in pairs:
        # Mutual exclusion as this process saw it: the next holder's acquire
        # may return before the releaser's reply arrives (the server freed
        # the lock first), never before release() was called.
        assert b[0] >= a[1], f"overlapping sections {a} {b}"
    moved = [(a, b) for a, b in pairs if b[3] != a[3]]
    after_return = [(b[0] - a[2]) * 1000 for a, b in moved]
    after_call = [(b[0] - a[1]) * 1000 for a, b in moved]
    return (len(secs) / SECONDS, len(moved) / SECONDS,
            (len(pairs) - len(moved)) / max(1, len(pairs)), after_return, after_call)


def pct(values, q):
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * q))]


# -- report ---------------------------------------------------------------------------


def versions(servers, sides):
    v = dict(servers.versions)
    v["dsync Python client"] = dsync.__version__
    v["psycopg"] = f"{psycopg.__version__} ({psycopg.pq.__impl__}, libpq {psycopg.pq.version()})"
    if "redis" in servers.ports or "redis-aof" in servers.ports:
        port = servers.ports.get("redis") or servers.ports["redis-aof"]
        v["redis-server"] = redis.Redis(port=port).info("server")["redis_version"]
    v["redis-py"] = redis.__version__
    if "etcd" in servers.ports:
        v["etcd"] = sides["etcd"].client.status().version
    v["python-etcd3"] = f"{etcd3.__version__} (grpcio {grpc.__version__}, protobuf " \
        f"{google.protobuf.__version__}, " \
        f"{api_implementation.Type()} implementation)"
    if "zookeeper" in servers.ports:
        srvr = sides["zookeeper"].zk.command(b"srvr")
        v["ZooKeeper"] = srvr.splitlines()[0].split(":", 1)[1].strip()
    v["kazoo"] = kazoo.__version__
    v["Python"] = sys.version.split()[0]
    return v


def main():
    servers = Servers(SIDES)
    sides = {}
    try:
        servers.start()
        for name in SIDES:
            sides[name] = make_side(name, servers)
        with open("/proc/loadavg") as f:
            load = " ".join(f.read().split()[:3])
        print(f"rivals_bench: {os.cpu_count()} CPUs, load {load}, {platform.platform()}; "
              f"{ROUNDS} rounds x {SECONDS:g} s per scenario and side, {THREADS} threads "
              f"in the hand-off, held {HOLD * 1000:g} ms, ttl {TTL} s", flush=True)
        cyc = {s: [] for s in SIDES}
        cyc_lat = {s: [] for s in SIDES}
        hand = {s: [] for s in SIDES}
        hand_gaps = {s: [] for s in SIDES}
        hand_calls = {s: [] for s in SIDES}
        for r in range(ROUNDS):
            order = SIDES[r % len(SIDES):] + SIDES[:r % len(SIDES)]
            for side in order:
                rate, lat = run_cycle(sides[side])
                sides[side].cleanup()
                cyc[side].append(rate)
                cyc_lat[side] += lat
                print(f"  round {r + 1} cycle   {side:14s}: {rate:8.1f} cycles/s, "
                      f"p50 {pct(lat, 0.5):7.2f} ms, p99 {pct(lat, 0.99):7.2f} ms", flush=True)
            for side in order:
                secs, handoffs, retaken, gaps, calls = run_handoff(sides[side],
                                                                   f"handoff-{side}-{r}")
                sides[side].cleanup()
                hand[side].append((secs, handoffs, retaken))
                hand_gaps[side] += gaps
                hand_calls[side] += calls
                print(f"  round {r + 1} handoff {side:14s}: {secs:8.1f} sections/s, "
                      f"{handoffs:8.1f} hand-offs/s, retaken {retaken * 100:5.1f}%, "
                      f"p50 {pct(gaps, 0.5):7.2f} ms ({pct(calls, 0.5):7.2f} ms from the "
                      "call)", flush=True)

        print()
        print("| side | cycles/s | cycle p50 ms | cycle p99 ms | sections/s on one name "
              "| hand-offs/s | retaken by the releaser | hand-off p50 ms | hand-off p99 ms "
              "| hand-off p50 ms from release() called |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for side in SIDES:
            med = [statistics.median(x[k] for x in hand[side]) for k in range(3)]
            print(f"| {side} | {statistics.median(cyc[side]):,.0f} "
                  f"| {pct(cyc_lat[side], 0.5):.2f} | {pct(cyc_lat[side], 0.99):.2f} "
                  f"| {med[0]:,.0f} | {med[1]:,.0f} | {med[2] * 100:.0f}% "
                  f"| {pct(hand_gaps[side], 0.5):.2f} | {pct(hand_gaps[side], 0.99):.2f} "
                  f"| {pct(hand_calls[side], 0.5):.2f} |")
        print()
        print("| side | fencing token | durability | waiting |")
        print("| --- | --- | --- | --- |")
        for side in SIDES:
            s = sides[side]
            print(f"| {side} | {s.fencing} | {s.durability} | {s.waits} |")
        print()
        for k, v in versions(servers, sides).items():
            print(f"{k}: {v}")
        with open("/proc/loadavg") as f:
            print(f"load at the end: {' '.join(f.read().split()[:3])}")
    finally:
        for s in sides.values():
            try:
                s.close()
            except Exception as e:      # the servers must stop all the same
                print(f"closing a side: {e!r}", file=sys.stderr)
        servers.stop()


if __name__ == "__main__":
    main()
