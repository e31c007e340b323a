"""Processes the tests start: a counter under a guarded lock, a leader
election candidate, an event waiter, and victims to kill while they hold
or wait."""

import faulthandler
import os
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import psycopg  # noqa: E402

from dsync import Event, LeaderElection, Lock  # noqa: E402


def count(dsn, name, table, n):
    lock = Lock(name, conninfo=dsn, ttl=10)
    with psycopg.connect(dsn, prepare_threshold=None) as conn:
        for _ in range(int(n)):
            with lock:
                with conn.transaction():
                    token = lock.guard(conn)
                    value, last = conn.execute(
                        f"SELECT value, token FROM {table} WHERE id = 1").fetchone()
                    assert token >= last, (token, last)
                    time.sleep(0.002)
                    conn.execute(f"UPDATE {table} SET value = %s, token = %s WHERE id = 1",
                                 (value + 1, token))
    lock.close()


def elect(dsn, group, member, ttl):
    e = LeaderElection(group, conninfo=dsn, ttl=float(ttl), member=member,
                       on_leader=lambda: print("leader", flush=True))
    e.start()
    while True:
        time.sleep(1)


def wait_event(dsn, name):
    if Event(name, conninfo=dsn).wait(timeout=20):
        print("got", flush=True)
    else:
        sys.exit(1)


def hold(dsn, name, ttl):
    lock = Lock(name, conninfo=dsn, ttl=float(ttl), holder="victim")
    lock.acquire()
    print("held", flush=True)
    time.sleep(3600)


def block(dsn, name, mode="backend", ttl="30"):
    """Wait for name: in a backend (mode backend) or queued without a
    connection (queue)."""
    print("waiting", flush=True)
    Lock(name, conninfo=dsn, ttl=float(ttl), holder="victim",
         queue=mode == "queue").acquire()


def paused(dsn, name, ttl, first="read"):
    """Hold a lock and lead a group, then print what held and is_leader
    say the moment the process runs again after a SIGSTOP (read in the
    SIGCONT handler, before the watchdog thread has its turn if it can).
    first=release: release the lock first thing instead, and print what
    release() returned and how many times on_lost ran."""
    # SIGCONT goes to the main thread only (the client's threads inherit
    # the mask), so that its handler interrupts the sleep at once.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCONT})
    heard = []
    told = threading.Event()

    def on_lost(hold):
        heard.append(hold.lost_reason)
        told.set()
    lock = Lock(name, conninfo=dsn, ttl=float(ttl), holder="paused", on_lost=on_lost)
    lock.acquire()
    e = LeaderElection(name + "-group", conninfo=dsn, ttl=float(ttl), member="paused")
    e.start()
    while not e.is_leader:
        time.sleep(0.01)

    def resumed(_sig, _frame):
        if first == "release":
            released = lock.release()
            told.wait(10)
            time.sleep(0.5)             # a second report would have come by now
            print(f"resumed released={released} reports={len(heard)}", flush=True)
        else:
            print(f"resumed held={lock.held} leader={e.is_leader}", flush=True)
    signal.signal(signal.SIGCONT, resumed)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCONT})
    print("ready", flush=True)
    # Short sleeps: Python 3.14 sometimes leaves a sleep that SIGCONT
    # should interrupt asleep (2 of 20 in a loaded sid chroot), its handler
    # then running only when the sleep ends.
    while True:
        time.sleep(0.05)


def faulty(dsn, prefix, nnames, seconds, table):
    """Take and release locks on nnames names for seconds, each section a
    guarded read-modify-write of the name's counter in table, and print
    what this process saw as JSON lines (acquired, committed, failed,
    released, lost): test_faults.py checks them against the server's event
    log while it stops this process and kills its connections."""
    import json
    import random
    from dsync import Client, DsyncError

    printing = threading.Lock()

    def out(**kw):
        # One write per line, under a lock: on_lost runs in the client's
        # callback thread, and print() writes the line and its end apart.
        with printing:
            sys.stdout.write(json.dumps(kw) + "\n")
            sys.stdout.flush()

    def on_lost(hold):
        out(ev="lost", name=hold.name, token=hold.token, reason=hold.lost_reason)

    pid = os.getpid()
    client = Client(dsn, application_name=f"fault-{pid}")
    names = [f"{prefix}-{i}" for i in range(int(nnames))]
    locks = {n: client.lock(n, ttl=2, holder=f"p{pid}", on_lost=on_lost) for n in names}
    writer = None
    end = time.monotonic() + float(seconds)
    while time.monotonic() < end:
        if writer is None or writer.closed:
            writer = psycopg.connect(dsn, application_name=f"writer-{pid}")
        name = random.choice(names)
        lock = locks[name]
        try:
            if not lock.acquire(timeout=1):
                continue
        except DsyncError as exc:
            out(ev="acquire-error", name=name, err=type(exc).__name__)
            continue
        token = lock.token
        out(ev="acquired", name=name, token=token)
        try:
            with writer.transaction():
                lock.guard(writer)
                # No FOR UPDATE: only the lease may keep two writers apart.
                value = writer.execute(f"SELECT value FROM {table} WHERE name = %s",
                                       (name,)).fetchone()[0]
                time.sleep(random.uniform(0, 0.03))
                writer.execute(f"UPDATE {table} SET value = %s WHERE name = %s",
                               (value + 1, name))
            out(ev="committed", name=name, token=token)
        except (DsyncError, psycopg.Error) as exc:
            out(ev="failed", name=name, token=token, err=type(exc).__name__)
        try:
            out(ev="released", name=name, token=token, ok=lock.release())
        except DsyncError as exc:
            out(ev="release-error", name=name, token=token, err=type(exc).__name__)
    client.close()
    writer.close()
    time.sleep(1)               # on_lost callbacks of late losses have printed
    out(ev="done")


if __name__ == "__main__":
    # A test that waits too long for this process asks for its stacks.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    {"count": count, "elect": elect, "wait-event": wait_event, "hold": hold,
     "block": block, "paused": paused, "faulty": faulty}[sys.argv[1]](*sys.argv[2:])
