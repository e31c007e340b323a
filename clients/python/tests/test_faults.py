"""A history-checked fault run: client processes take and release locks,
each section a guarded read-modify-write of a counter, while the test
stops whole processes past their ttl (SIGSTOP) and kills every client
connection of one (pool, waits, keeper).  Each process prints what it saw;
afterwards the histories are checked against the server's event log, the
truth about every hold:

  - a loss is *true* if the server let the hold go by itself (expired),
    *false* if the client declared it while the server still held it
    (the client then gave it back: released);
  - a loss is *missed* if the server let a hold go and its process's
    on_lost never ran (a hold whose release failed is abandoned, and left
    out);
  - no increment is lost or doubled (each name's counter equals the
    sections that committed), so no two holders wrote at once.

Missed losses and lost or doubled increments fail the test; true and
false losses are printed (a process stopped past its ttl loses its holds
for real; a false loss is allowed, as it is safe, and counted)."""

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time

import psycopg

HERE = os.path.dirname(os.path.abspath(__file__))
SECONDS = float(os.environ.get("DSYNC_FAULT_SECONDS", "20"))
PROCESSES = 3
NAMES = 3
TABLE = "fault_counter"


def _faults(admin, procs, stop, done):
    """Every 1 to 2 s, one process: stopped for 3 s (past its 2 s ttl), or
    every client connection of it killed."""
    rng = random.Random(40)
    while not stop.wait(rng.uniform(1.0, 2.0)):
        p = rng.choice(procs)
        if p.poll() is not None:
            continue
        if rng.random() < 0.5:
            os.kill(p.pid, signal.SIGSTOP)
            time.sleep(3.0)
            os.kill(p.pid, signal.SIGCONT)
            done["pauses"] += 1
        else:
            n = admin.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                              " WHERE application_name LIKE %s", (f"fault-{p.pid}%",)).fetchone()[0]
            done["kills"] += n


def _server_ends(admin, prefix):
    """How the server ended each hold: (name, token) -> 'released' or
    'expired', from the event log."""
    ends = {}
    rows = admin.execute("SELECT payload FROM dsync_events_since(0) WHERE payload->>'lease' LIKE %s",
                         (prefix + "-%",)).fetchall()
    for (payload,) in rows:
        if payload["event"] in ("released", "expired"):
            ends[(payload["lease"], int(payload["fencing"]))] = payload["event"]
    return ends


def test_history_under_pauses_and_connection_kills(server, admin):
    prefix = f"fault{os.getpid()}"
    admin.execute(f"CREATE TABLE IF NOT EXISTS {TABLE} (name text PRIMARY KEY, value int NOT NULL)")
    admin.execute(f"GRANT SELECT, UPDATE ON {TABLE} TO PUBLIC")   # the processes' role
    admin.execute(f"INSERT INTO {TABLE} SELECT %s || '-' || i, 0 FROM generate_series(0, %s) i"
                  " ON CONFLICT (name) DO UPDATE SET value = 0", (prefix, NAMES - 1))
    procs = [subprocess.Popen([sys.executable, "-u", os.path.join(HERE, "worker.py"), "faulty",
                               server.dsn(), prefix, str(NAMES), str(SECONDS), TABLE],
                              stdout=subprocess.PIPE, text=True) for _ in range(PROCESSES)]
    # Someone listens for the whole run, so that the server logs every
    # event (the keepers stop listening when idle).
    listener = psycopg.connect(server.dsn(), autocommit=True)
    for i in range(NAMES):
        listener.execute(f'LISTEN "dsync:{prefix}-{i}"')
    stop, done = threading.Event(), {"pauses": 0, "kills": 0}
    faults = threading.Thread(target=_faults, args=(admin, procs, stop, done), daemon=True)
    faults.start()
    outputs = []
    try:
        for p in procs:
            out, _ = p.communicate(timeout=SECONDS + 120)
            outputs.append(out)
    finally:
        stop.set()
        faults.join(10)
        for p in procs:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGCONT)
                p.kill()
    histories = [[json.loads(line) for line in out.splitlines() if line.startswith("{")]
                 for out in outputs]
    failures = {}
    for e in (e for h in histories for e in h if e["ev"].endswith("error") or e["ev"] == "failed"):
        failures[e["err"]] = failures.get(e["err"], 0) + 1
    assert all(h and h[-1]["ev"] == "done" for h in histories), "a process did not finish"
    time.sleep(3)                      # the last events reach the log
    ends = _server_ends(admin, prefix)
    listener.close()
    committed = {}
    true_losses = false_losses = missed = abandoned = unended = 0
    for history in histories:
        lost = {(e["name"], e["token"]) for e in history if e["ev"] == "lost"}
        given_up = {(e["name"], e["token"]) for e in history if e["ev"] == "release-error"}
        for e in history:
            if e["ev"] == "committed":
                committed[e["name"]] = committed.get(e["name"], 0) + 1
            if e["ev"] != "acquired":
                continue
            hold = (e["name"], e["token"])
            end = ends.get(hold)
            if end is None:
                unended += 1
            elif hold in lost:
                true_losses += end == "expired"
                false_losses += end != "expired"
            elif hold in given_up:
                abandoned += 1
            elif end == "expired":
                missed += 1
    counters = dict(admin.execute(f"SELECT name, value FROM {TABLE} WHERE name LIKE %s",
                                  (prefix + "-%",)).fetchall())
    sections = sum(committed.values())
    print(f"\nfault run: {PROCESSES} processes, {SECONDS:g} s, {done['pauses']} pauses of 3 s "
          f"(ttl 2 s), {done['kills']} connections killed; {sections} sections committed; "
          f"losses: {true_losses} true, {false_losses} false, {missed} missed; {abandoned} holds "
          f"abandoned (release failed); failed calls: {failures}")
    assert done["pauses"] > 0 and done["kills"] > 0
    assert sections > 0
    assert missed == 0
    assert unended == 0, "a hold the server's log shows no end of"
    assert counters == {n: committed.get(n, 0) for n in counters}, (counters, committed)
