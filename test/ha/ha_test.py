"""The HA test's clients (run by test/ha/run.sh): dsync under Patroni
through a planned switchover, a crash failover and the old primary's
rejoin, with every client on one libpq multi-host connection string, as
the ordinary login role "app".

  - Four workers take the lease "job" (ttl 5 s, wait 1 s) and, in one
    transaction guarded by dsync_assert_held, write a row carrying their
    token to a table fenced by dsync_fenced; each acknowledged write is
    remembered.
  - Three watchers of "job": a hand-written LISTEN loop that catches up
    with dsync_events_since after each reconnect, the Python client's
    dsync.watch(), and the command-line tool's `dsync watch --json`.
  - Three leases held through it all: "kept" (plain SQL, ttl 10 min),
    "libkept" (the Python client's Lock, ttl 30 s, renewed by its
    keeper) and "clikept" (`dsync lock --ttl 30s`, running a command).

run.sh writes one line per event to stdin ("switchover", "crash-failover",
"rejoin"; "end" at the end) at the moment it starts it.  Each event's
figures cover the time from its start to the next one's:
  - downtime: the longest time without an acknowledged write;
  - tokens reissued (a token given to a second holder), tokens going back
    in the fenced table's commit order, overlapping guarded windows of
    different holders (client clock): 0 in either replication mode;
  - acknowledged writes lost: 0 with a synchronous standby; with
    asynchronous replication the crash loses some (run.sh stalls the
    replication first), and that is checked too, so that the other
    checks are known to have run against a new primary that missed
    acknowledged commits;
  - leases kept, by their holders, with their tokens, and each client
    still believing it holds its lease;
  - events missed by each watcher (in the server's log, never delivered).
Usage: python3 ha_test.py DSN sync|async
"""
import json
import os
import select
import subprocess
import sys
import threading
import time

import psycopg

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "clients", "python"))
import dsync  # noqa: E402

ADMIN_DSN = sys.argv[1]
# Every client runs as an ordinary login role, as applications do.
DSN = ADMIN_DSN.replace("user=postgres", "user=app")
assert DSN != ADMIN_DSN
MODE = sys.argv[2]
DSYNC = os.environ.get("DSYNC_TOOL", "dsync")
stop = threading.Event()            # the workers stop
stop_watch = threading.Event()      # the watchers stop, once they heard the last of it
lock = threading.Lock()
acked = []          # (token, worker, wall time)
grants = []         # (token, worker, wall time)
errors = []
windows = []        # (start, end, worker): a guarded transaction, wall clock


def connect(until=None):
    until = until or stop
    while not until.is_set():
        try:
            return psycopg.connect(DSN, autocommit=True)
        except psycopg.Error:
            time.sleep(0.1)
    return None


def dropped(conn):
    """Close a connection that failed; None, after a short pause, so that
    the caller connects again."""
    try:
        conn.close()
    except Exception:
        pass
    time.sleep(0.05)
    return None


def worker(n):
    me = "w%d" % n
    conn = None
    while not stop.is_set():
        try:
            if conn is None or conn.closed:
                conn = connect()
                if conn is None:
                    return
            tok = conn.execute("SELECT dsync_acquire('job', %s, '5 seconds', '1 second')",
                               (me,)).fetchone()[0]
            if tok is None:
                continue
            with lock:
                grants.append((tok, me, time.time()))
            began = time.time()
            with conn.transaction():
                held = conn.execute("SELECT dsync_assert_held('job', %s)", (me,)).fetchone()[0]
                if held != tok:
                    raise RuntimeError("guard returned another token")
                conn.execute("INSERT INTO ha_fenced (worker, token) VALUES (%s, %s)", (me, tok))
            with lock:
                acked.append((tok, me, time.time()))
                windows.append((began, time.time(), me))
            conn.execute("SELECT dsync_release('job', %s)", (me,))
        except psycopg.Error as e:
            errors.append(str(e).splitlines()[0] if str(e) else type(e).__name__)
            conn = dropped(conn)


# seq -> payload, per watcher
seen = {"LISTEN": {}, "dsync.watch()": {}, "dsync watch": {}}
catch_ups = []      # the LISTEN loop's: (time, after, rows, first seq, port)
gaps = {"dsync.watch()": 0}     # dsync watch says so on stderr (checked too)


def listen_watcher():
    """LISTEN on the lease's channel; after a reconnect, catch up from the
    last seq seen with dsync_events_since."""
    mine = seen["LISTEN"]
    last = None         # where a catch-up starts: everything up to it was seen
    caught_up = False   # until the catch-up after a reconnect is read in full
    conn = None

    def heard(n):
        nonlocal last
        p = json.loads(n.payload)
        mine[p["seq"]] = p
        # Heard during a catch-up that then fails, a later event must not
        # move the next catch-up past the ones that failed to arrive.
        if caught_up:
            last = max(last, p["seq"])

    while not stop_watch.is_set():
        try:
            if conn is None or conn.closed:
                caught_up = False
                conn = connect(stop_watch)
                if conn is None:
                    return
                conn.add_notify_handler(heard)
                conn.execute('LISTEN "dsync:job"')
                if last is None:
                    last = conn.execute("SELECT coalesce(max(seq), 0) FROM dsync_events_since(0, ARRAY['job'])").fetchone()[0]
                rows = conn.execute("SELECT seq, payload FROM dsync_events_since(%s, ARRAY['job'])",
                                    (last,)).fetchall()
                catch_ups.append((time.time(), last, len(rows), rows[0][0] if rows else None,
                                  conn.info.port))
                for seq, payload in rows:
                    mine[seq] = payload
                last = max([last] + [s for s in mine if s > last])
                caught_up = True
            select.select([conn.fileno()], [], [], 0.2)
            conn.execute("SELECT 1")     # delivers what arrived to heard()
        except psycopg.Error:
            conn = dropped(conn)


def library_watcher():
    """The Python client's watch(): it reconnects and resumes by itself.
    It ends after 4 s without an event; then it is started again from the
    last seq it gave (its `after`), as a program that restarts would."""
    mine = seen["dsync.watch()"]
    after = None
    while not stop_watch.is_set():
        for ev in dsync.watch(["job"], conninfo=DSN, timeout=4, after=after, connect_timeout=2):
            if ev.kind == "gap":
                gaps["dsync.watch()"] += 1
            elif ev.seq is not None:
                mine[ev.seq] = ev.raw
                after = ev.seq if after is None else max(after, ev.seq)
            if stop_watch.is_set():
                return


def tool_watcher(proc):
    """`dsync watch job --json`: one JSON payload per line."""
    mine = seen["dsync watch"]
    for line in proc.stdout:
        try:
            p = json.loads(line)
        except ValueError:
            continue
        if "seq" in p:
            mine[p["seq"]] = p


def same(payload):
    """What identifies an event, whoever parsed its payload."""
    return tuple(payload.get(k) for k in ("event", "lease", "holder", "fencing"))


def q(sql, *args, dsn=ADMIN_DSN):
    for _ in range(300):
        try:
            c = psycopg.connect(dsn, autocommit=True)
            break
        except psycopg.Error:
            time.sleep(0.1)
    with c:
        cur = c.execute(sql, args)
        return cur.fetchall() if cur.description else []


lost_at = {}        # lease -> wall time it was first found not kept


def lease_checker(expect, liblost, tool):
    """Twice a second: is each kept lease still held by its holder with its
    token, and does each client still believe it holds it?  liblost: the
    library lock's lost flag, taken in the thread that holds the lock (a
    lock's flags are its owner's)."""
    while not stop.is_set():
        now = time.time()
        if liblost.is_set():
            lost_at.setdefault("libkept (client)", now)
        if tool.poll() is not None:
            lost_at.setdefault("clikept (client)", now)
        try:
            with psycopg.connect(DSN, autocommit=True, connect_timeout=2) as c:
                rows = dict((r[0], (r[1], r[2])) for r in c.execute(
                    "SELECT lease, holder, fencing FROM dsync_leases WHERE lease = ANY(%s)",
                    (list(expect),)))
            for lease, want in expect.items():
                if rows.get(lease) != want:
                    lost_at.setdefault(lease, now)
        except psycopg.Error:
            pass        # no primary at the moment
        stop.wait(0.5)


def main():
    q("CREATE EXTENSION IF NOT EXISTS dsync")
    q("CREATE TABLE IF NOT EXISTS ha_fenced (id bigserial PRIMARY KEY, worker text, token bigint, "
      "at timestamptz DEFAULT clock_timestamp())")
    q("DROP TRIGGER IF EXISTS ha_fenced_t ON ha_fenced")
    q("CREATE TRIGGER ha_fenced_t BEFORE INSERT OR UPDATE ON ha_fenced "
      "FOR EACH ROW EXECUTE FUNCTION dsync_fenced('token')")
    q("DO $$ BEGIN CREATE ROLE app LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$")
    q("GRANT SELECT, INSERT ON ha_fenced TO app")
    q("GRANT USAGE ON SEQUENCE ha_fenced_id_seq TO app")
    kept = q("SELECT dsync_acquire('kept', 'k', '10 minutes')", dsn=DSN)[0][0]
    libkept = dsync.Lock("libkept", conninfo=DSN, ttl=30, holder="lib", connect_timeout=2)
    if not libkept.acquire(timeout=10):
        sys.exit("could not take libkept")
    tool = subprocess.Popen([DSYNC, "--dsn", DSN, "lock", "clikept", "--ttl", "30s", "--holder", "cli",
                             "--", "sh", "-c", 'echo "$DSYNC_FENCING_TOKEN"; exec sleep 100000'],
                            stdout=subprocess.PIPE, text=True)
    clikept = int(tool.stdout.readline())
    expect = {"kept": ("k", kept), "libkept": ("lib", libkept.token), "clikept": ("cli", clikept)}
    tool_watch = subprocess.Popen([DSYNC, "--dsn", DSN, "watch", "job", "--json"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    threads.append(threading.Thread(target=lease_checker, args=(expect, libkept.lost, tool)))
    watchers = [threading.Thread(target=listen_watcher), threading.Thread(target=library_watcher),
                threading.Thread(target=tool_watcher, args=(tool_watch,))]
    for t in threads + watchers:
        t.start()
    started = time.time()
    # run.sh starts the first event once the workers are writing.
    while len(acked) < 20 and time.time() < started + 60:
        time.sleep(0.05)
    open(os.environ["HA_READY"], "w").close()
    marks = []
    for line in sys.stdin:
        what = line.strip()
        if what == "end":
            break
        marks.append((what, time.time()))
        print("event %s" % what, flush=True)
    time.sleep(3)
    stop.set()
    for t in threads:
        t.join(30)
    held_end = {"libkept (client)": not libkept.lost.is_set(), "clikept (client)": tool.poll() is None}
    # What the workers did last reaches the watchers within a moment.
    time.sleep(2)
    stop_watch.set()
    tool_watch.terminate()
    for t in watchers:
        t.join(30)
    tool_notes = tool_watch.stderr.read().strip()
    tool.terminate()
    tool.wait(30)
    libkept.release()
    libkept.close()

    failed = 0

    def check(ok, text):
        nonlocal failed
        failed += 0 if ok else 1
        print("%s %s" % ("ok    " if ok else "FAILED", text), flush=True)

    # Everything attributed to the event whose time it falls in.
    bounds = [("before", started)] + marks + [("", float("inf"))]

    def event_of(t):
        for (what, at), (_, end) in zip(bounds, bounds[1:]):
            if at <= t < end:
                return what
        return "before"

    stats = dict((w, {"acked": 0, "lost": 0, "reissued": 0, "back": 0, "overlaps": 0, "tokens": 0,
                      "missed": dict((k, 0) for k in seen), "logged": 0, "unlogged": 0})
                 for w, _ in bounds[:-1])
    # A holder that lost its connection and acquires again is given its
    # own lease back with its token; a token given to a second holder is reissued.
    holders = {}
    for tok, who, at in sorted(grants, key=lambda g: g[2]):
        if tok not in holders:
            holders[tok] = who
            stats[event_of(at)]["tokens"] += 1
        elif holders[tok] != who:
            stats[event_of(at)]["reissued"] += 1
    latest = (float("-inf"), None)     # the latest end so far, and whose
    for start, end, who in sorted(windows):
        if start < latest[0] and who != latest[1]:
            stats[event_of(start)]["overlaps"] += 1
        if end > latest[0]:
            latest = (end, who)
    rows = q("SELECT token, worker, extract(epoch FROM at)::float8 FROM ha_fenced ORDER BY id")
    for a, b in zip(rows, rows[1:]):
        if b[0] < a[0]:
            stats[event_of(b[2])]["back"] += 1
    stored = set(r[0] for r in rows)
    for tok, who, at in acked:
        stats[event_of(at)]["acked"] += 1
        if tok not in stored:
            stats[event_of(at)]["lost"] += 1
    logged = q("SELECT seq, extract(epoch FROM sent_at)::float8, payload FROM dsync_events_since(0, ARRAY['job'])")
    logged_seqs = set(r[0] for r in logged)
    # Missed: never delivered, or another event delivered with its seq (a
    # seq handed out again, which a watcher skips as already seen).
    for name, mine in seen.items():
        first = min(mine) if mine else 0
        shown = 0
        for seq, at, payload in logged:
            if seq >= first and (seq not in mine or same(mine[seq]) != same(payload)):
                stats[event_of(at)]["missed"][name] += 1
                if shown < 5:
                    shown += 1
                    print("       %s missed seq %d sent %s: %s; it has %s; seen around it: %s" % (
                        name, seq, time.strftime("%H:%M:%S", time.localtime(at)) + ".%03d" % int(at % 1 * 1000),
                        same(payload), same(mine[seq]) if seq in mine else "nothing",
                        sorted(x for x in mine if abs(x - seq) <= 2)), flush=True)
    for seq, at, _ in logged:
        stats[event_of(at)]["logged"] += 1
    # Events heard that the new primary's log does not have: those of
    # commits lost in an asynchronous failover.
    phantom = set(seen["LISTEN"]) - logged_seqs
    first_logged = min(logged_seqs) if logged_seqs else 0

    print("\n%-15s %9s %7s %9s %5s %9s %14s %12s %22s" % (
        "event", "downtime", "tokens", "reissued", "back", "overlaps", "writes lost",
        "leases kept", "events missed"), flush=True)
    times = sorted(a[2] for a in acked)
    for (what, at), (_, end) in zip(bounds[1:], bounds[2:]):
        end = min(end, time.time())
        inside = [t for t in times if at <= t < end]
        before = max((t for t in times if t < at), default=at)
        downtime = max(b - a for a, b in zip([before] + inside, inside)) if inside else end - at
        s = stats[what]
        kept_n = 5 - sum(1 for lease, t in lost_at.items() if t < end)
        missed = "/".join(str(n) for n in s["missed"].values())
        print("%-15s %7.2f s %7d %9d %5d %9d %6d of %-5d %7d of 5 %10s of %-6d" % (
            what, downtime, s["tokens"], s["reissued"], s["back"], s["overlaps"], s["lost"],
            s["acked"], kept_n, missed, s["logged"]), flush=True)
    print("(tokens: new tokens granted; back: tokens going back in the fenced table; leases kept:\n"
          " the three leases held by their holders with their tokens, and the Python and dsync-tool\n"
          " clients still believing they hold theirs; events missed: by the LISTEN loop,\n"
          " dsync.watch() and dsync watch, of those logged)\n", flush=True)
    for what, _ in bounds[:-1]:
        s = stats[what]
        check(s["reissued"] == 0, "%s: tokens reissued: %d of %d" % (what, s["reissued"], s["tokens"]))
        check(s["back"] == 0, "%s: tokens going back in the fenced table: %d" % (what, s["back"]))
        check(s["overlaps"] == 0, "%s: overlapping guarded windows of different holders: %d" % (what, s["overlaps"]))
        if MODE == "async" and what == "crash-failover":
            check(s["lost"] > 0, "%s: acknowledged writes lost, as asynchronous replication allows "
                  "(0 would mean the stall did not happen): %d of %d" % (what, s["lost"], s["acked"]))
        else:
            check(s["lost"] == 0, "%s: acknowledged writes lost: %d of %d" % (what, s["lost"], s["acked"]))
        check(s["acked"] > 0, "%s: writes acknowledged: %d" % (what, s["acked"]))
        for name, n in s["missed"].items():
            check(n == 0, "%s: events missed by %s: %d of %d logged" % (what, name, n, s["logged"]))
    for lease in expect:
        check(lease not in lost_at, "lease %s held through every event by its holder with its token%s" % (
            lease, "" if lease not in lost_at else " (not so from %s)" % event_of(lost_at[lease])))
    for who, ok in held_end.items():
        check(ok and who not in lost_at, "%s still held its lease at the end, never declared lost" % who)
    if any(s["missed"]["LISTEN"] for s in stats.values()):
        for at, after, n, first, port in catch_ups:
            print("       LISTEN caught up at %s on port %s: after %s, %d rows from %s" % (
                time.strftime("%H:%M:%S", time.localtime(at)) + ".%03d" % int(at % 1 * 1000),
                port, after, n, first), flush=True)
    for name, n in gaps.items():
        check(n == 0, "%s reported no gap in the events: %d" % (name, n))
    warned = [n for n in tool_notes.splitlines() if any(w in n for w in ("missed", "ignoring", "could not read"))]
    check(not warned, "dsync watch warned of no missed or ignored events%s" % (": " + "; ".join(warned) if warned else ""))
    if MODE == "async":
        print("       events heard but not in the new primary's log (lost commits): %d" % len(phantom))
    else:
        check(not [s for s in phantom if s >= first_logged],
              "events heard that the log does not have: %d" % len([s for s in phantom if s >= first_logged]))
    print("       writes acknowledged: %d; client errors during the events: %d; events logged: %d"
          % (len(acked), len(errors), len(logged)), flush=True)
    print("%d failed" % failed, flush=True)
    sys.exit(1 if failed else 0)


main()
