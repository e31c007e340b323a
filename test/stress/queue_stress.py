#!/usr/bin/env python3
"""Queued waiters under stress, checked from the history every client saw.

Clients take turns on one lease (one turn in twenty left to expire, for
the worker to hand on), some blocking in a backend
(dsync_acquire with a wait), some queued without a connection
(dsync_queue, then a grant on their own channel or dsync_claim), and
some misbehave: they queue and vanish (never claim, never renew), or
leave the line at their deadline (dsync_unqueue).  A killer terminates
random client backends.  Every client records, for each turn it had,
when it learnt it held the lease and when it sent its release, and the
token; afterwards the history is checked:

  - no two turns overlap (a turn starts when its holder learnt of the
    grant and ends when it sent its release: a queued grant is made in
    the releasing transaction, so the next holder can only learn of it
    after the release was sent);
  - tokens rise in the order of the turns;
  - every fenced write inside a turn was accepted, and none was lost;
  - at the end nobody is left in line and the lease is free once the
    vanished waiters' places and unclaimed grants have run out.

    python3 test/stress/queue_stress.py [seconds] [clients]

QUEUE_KINDS=mixed makes each turn durable or ephemeral (durable => false)
at random, so the line hands the lease between the two kinds (the server
needs dsync.ephemeral_max_ttl of at least 2 s); QUEUE_KINDS=ephemeral
makes every turn ephemeral.  The default is durable.

Connects with libpq's environment (PGHOST, PGPORT, PGDATABASE, ...).
Prints "N passed, M failed"; exits non-zero on a failure.
"""
import json
import os
import random
import select
import sys
import threading
import time

import psycopg

SECONDS = float(sys.argv[1]) if len(sys.argv) > 1 else 20.0
CLIENTS = int(sys.argv[2]) if len(sys.argv) > 2 else 12
LEASE = "qs_lease"
KINDS = os.environ.get("QUEUE_KINDS", "durable")
TTL = "3 seconds" if KINDS == "durable" else "2 seconds"
seed = int(os.environ.get("SEED", random.randrange(1 << 30)))
random.seed(seed)

history = []            # (start, end, token, holder, kind)
history_lock = threading.Lock()
errors = []
counts = {"backend": 0, "queued": 0, "vanished": 0, "left": 0, "timeouts": 0,
          "reconnects": 0, "writes": 0}
stop_at = time.monotonic() + SECONDS


def connect():
    return psycopg.connect(autocommit=True)


def wait_notify(listener, timeout):
    """Wait up to timeout for a notification on listener and drain them
    (psycopg 3.1 has no timeout on notifies()): the token of the last
    grant announced, or None."""
    pg = listener.pgconn
    token = None
    ready, _, _ = select.select([pg.socket], [], [], timeout)
    if ready:
        pg.consume_input()
        while True:
            n = pg.notifies()
            if n is None:
                break
            token = json.loads(n.extra.decode())["fencing"]
    return token


def note(kind):
    with history_lock:
        counts[kind] += 1


def turn(conn, holder, token, kind, start):
    """Hold the lease a moment: a fenced write, then the release."""
    with conn.transaction():
        t = conn.execute("SELECT dsync_assert_held(%s, %s)", (LEASE, holder)).fetchone()[0]
        if t != token:
            errors.append(f"{holder}: assert_held gave {t}, the grant {token}")
        conn.execute("UPDATE qs_counter SET n = n + 1, last_token = %s", (token,))
    time.sleep(random.uniform(0, 0.01))
    end = time.monotonic()
    # One turn in twenty is left to expire (shortened to 200 ms first): the
    # worker grants the next one in the transaction that clears it.
    left_to_expire = random.random() < 0.05
    if left_to_expire:
        conn.execute("SELECT dsync_renew(%s, %s, '200 milliseconds')", (LEASE, holder))
    else:
        conn.execute("SELECT dsync_release(%s, %s)", (LEASE, holder))
    with history_lock:
        history.append((start, end, token, holder, kind))
        counts["writes"] += 1
    if left_to_expire:
        raise LeftToExpire()


class LeftToExpire(Exception):
    """The turn left its lease to expire: the client takes another holder
    name, or it would get that lease again (reentrant, the same token)
    while it lasts."""


def durable(rng):
    """The kind of the next turn."""
    return KINDS == "durable" or (KINDS == "mixed" and rng.random() < 0.5)


def queued_turn(conn, listener, holder, channel, rng):
    """Queue, wait for the grant (notification, or dsync_claim every
    100 ms, which also renews the place), take the turn."""
    token = conn.execute("SELECT dsync_queue(%s, %s, %s, %s, durable => %s)",
                         (LEASE, holder, TTL, channel, durable(rng))).fetchone()[0]
    if token is not None:
        turn(conn, holder, token, "queued", time.monotonic())
        note("queued")
        return
    behaviour = rng.random()
    if behaviour < 0.03:
        note("vanished")             # never claims, never renews
        return
    deadline = time.monotonic() + (1.0 if behaviour < 0.2 else 10.0)
    while True:
        announced = wait_notify(listener, 0.1)
        if announced is not None and rng.random() < 0.5:
            # Trust the announcement: the release claims the grant.
            turn(conn, holder, announced, "queued", time.monotonic())
            note("queued")
            return
        sent = time.monotonic()
        state, t, left = conn.execute("SELECT state, fencing, expires_in FROM dsync_claim(%s, %s)",
                                      (LEASE, holder)).fetchone()
        if state == "granted":
            turn(conn, holder, t, "queued", time.monotonic())
            note("queued")
            return
        if state == "gone":
            note("timeouts")
            return
        if time.monotonic() > deadline:
            was = conn.execute("SELECT dsync_unqueue(%s, %s)", (LEASE, holder)).fetchone()[0]
            note("left")
            return


def client(i):
    rng = random.Random(seed + i)
    channel = f"qs-{i}"
    turns = 0
    conn = listener = None
    while time.monotonic() < stop_at:
        holder = f"c{i}.{turns}"
        try:
            if conn is None:
                conn = connect()
                listener = connect()
                ch = conn.execute("SELECT dsync_queue_channel(%s)", (channel,)).fetchone()[0]
                listener.execute(f'LISTEN "{ch}"')
            if rng.random() < 0.4:
                token = conn.execute("SELECT dsync_acquire(%s, %s, %s, wait => '2 seconds', "
                                     "durable => %s)",
                                     (LEASE, holder, TTL, durable(rng))).fetchone()[0]
                if token is None:
                    note("timeouts")
                    continue
                turn(conn, holder, token, "backend", time.monotonic())
                note("backend")
            else:
                queued_turn(conn, listener, holder, channel, rng)
        except LeftToExpire:
            turns += 1
        except psycopg.OperationalError:
            note("reconnects")
            for c_ in (conn, listener):
                try:
                    if c_ is not None:
                        c_.close()
                except Exception:
                    pass
            conn = listener = None
            time.sleep(0.05)
        except psycopg.Error as exc:
            # A turn cut short by a kill: its lease lapses at its ttl.
            errors.append(f"{holder}: {type(exc).__name__}: {exc}")
    for c_ in (conn, listener):
        if c_ is not None:
            c_.close()


def killer():
    conn = connect()
    rng = random.Random(seed)
    while time.monotonic() < stop_at:
        time.sleep(rng.uniform(0.3, 1.0))
        conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                     "WHERE application_name = 'qs' AND pid <> pg_backend_pid() "
                     "ORDER BY random() LIMIT 1")
    conn.close()


def main():
    os.environ["PGAPPNAME"] = "qs"
    with psycopg.connect(autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS dsync")
        conn.execute("DROP TABLE IF EXISTS qs_counter")
        conn.execute("CREATE TABLE qs_counter (n int, last_token bigint)")
        conn.execute("INSERT INTO qs_counter VALUES (0, 0)")
        conn.execute("SELECT dsync_force_release(%s)", (LEASE,))
    print(f"queue_stress: {CLIENTS} clients, {SECONDS:g} s, {KINDS} leases, seed {seed}")
    threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
    os.environ["PGAPPNAME"] = "qs-killer"
    kt = threading.Thread(target=killer)
    os.environ["PGAPPNAME"] = "qs"
    for t in threads:
        t.start()
    kt.start()
    for t in threads + [kt]:
        t.join()

    passed = failed = 0

    def check(ok, what):
        nonlocal passed, failed
        print(("ok     " if ok else "FAILED ") + what)
        if ok:
            passed += 1
        else:
            failed += 1

    turns = sorted(history)
    overlaps = [(a, b) for a, b in zip(turns, turns[1:]) if b[0] < a[1]]
    check(not overlaps, f"turns that overlap the one before: {len(overlaps)} of {len(turns)}")
    for a, b in overlaps[:5]:
        print(f"    {a[3]} ({a[4]}) {a[0]:.4f}-{a[1]:.4f} and {b[3]} ({b[4]}) {b[0]:.4f}-{b[1]:.4f}")
    backwards = [(a, b) for a, b in zip(turns, turns[1:]) if b[2] <= a[2]]
    check(not backwards, f"tokens not above the turn before's: {len(backwards)}")
    print(f"    turns: backend {counts['backend']}, queued {counts['queued']}; "
          f"vanished {counts['vanished']}, left {counts['left']}, gone or timed out "
          f"{counts['timeouts']}, reconnects {counts['reconnects']}")
    check(counts["queued"] > 0 and counts["backend"] > 0, "both kinds of waiter had turns")
    real_errors = [e for e in errors if "terminat" not in e and "server closed" not in e]
    check(not real_errors, f"unexpected errors: {len(real_errors)}")
    for e in real_errors[:5]:
        print("    " + e)
    with psycopg.connect(autocommit=True) as conn:
        n = conn.execute("SELECT n FROM qs_counter").fetchone()[0]
        check(n >= counts["writes"], f"fenced writes: {n} in the table, {counts['writes']} "
              "acknowledged (killed turns may add some)")
        # Vanished places lapse after their ttl, unclaimed grants pass on
        # after the claim window, a killed holder's lease ends at its ttl.
        end = time.monotonic() + 30
        while time.monotonic() < end:
            left = conn.execute("SELECT count(*) FROM dsync_waiters WHERE name = %s",
                                (LEASE,)).fetchone()[0]
            leader = conn.execute("SELECT dsync_leader(%s)", (LEASE,)).fetchone()[0]
            if left == 0 and leader is None:
                break
            time.sleep(0.2)
        check(left == 0, f"waiters left in line at the end: {left}")
        check(leader is None, f"the lease is free at the end (holder: {leader})")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
