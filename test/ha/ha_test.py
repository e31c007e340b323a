"""The HA test (test/ha/run.sh): dsync under Patroni through a planned
switchover, a crash failover and the old primary's rejoin, with clients on
a libpq multi-host connection string.

Workers take the lease "job" (ttl 5 s, wait 1 s) and, in one transaction
guarded by dsync_assert_held, write a row carrying their token to a
fenced table; every acknowledged write is remembered client-side.  A
watcher LISTENs on the lease's channel and, after each reconnect, catches
up with dsync_events_since from the last seq it saw.  A lease "kept" is
held (ttl 10 min) through it all.

Checks, printed as "ok"/"FAILED" lines with the figures:
  - downtime of each event: from the last write acknowledged before it to
    the first one after;
  - tokens reissued (one token given to two holders), tokens going back
    in the fenced table's commit order, and overlapping guarded windows
    of different holders: 0;
  - acknowledged writes lost: 0;
  - "kept" still held by its holder, with its token;
  - events missed by the watcher (the server's log against what it saw): 0;
  - the dsync worker running on each new primary, and how soon.
Usage: python3 ha_test.py DSN NODE_DSN... (called by run.sh, which drives
the cluster through stdin commands; see run.sh).
"""
import json
import select
import sys
import threading
import time

import psycopg

DSN = sys.argv[1]
stop = threading.Event()            # the workers stop
stop_watch = threading.Event()      # the watcher stops, once it has heard the last of them
lock = threading.Lock()
acked = []          # (token, worker, monotonic time)
grants = []         # (token, worker, monotonic time)
errors = []
windows = []        # (start, end, worker): a guarded transaction, client clock


def connect(until=None):
    until = until or stop
    while not until.is_set():
        try:
            return psycopg.connect(DSN, autocommit=True)
        except psycopg.Error:
            time.sleep(0.1)
    return None


def dropped(conn):
    """Close a connection that failed (the server went away); None, after
    a short pause, so that the caller connects again."""
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
                grants.append((tok, me, time.monotonic()))
            began = time.monotonic()
            with conn.transaction():
                held = conn.execute("SELECT dsync_assert_held('job', %s)", (me,)).fetchone()[0]
                if held != tok:
                    raise RuntimeError("guard returned another token")
                conn.execute("INSERT INTO ha_fenced (worker, token) VALUES (%s, %s)", (me, tok))
            with lock:
                acked.append((tok, me, time.monotonic()))
                windows.append((began, time.monotonic(), me))
            conn.execute("SELECT dsync_release('job', %s)", (me,))
        except psycopg.Error as e:
            errors.append(str(e).splitlines()[0] if str(e) else type(e).__name__)
            conn = dropped(conn)


seen = {}
reconnects = []


def watcher():
    """LISTEN on the lease's channel; after a reconnect, catch up from the
    last seq seen with dsync_events_since."""
    last = None
    conn = None

    def heard(n):
        nonlocal last
        p = json.loads(n.payload)
        seen[p["seq"]] = p
        last = p["seq"] if last is None else max(last, p["seq"])

    while not stop_watch.is_set():
        try:
            if conn is None or conn.closed:
                conn = connect(stop_watch)
                if conn is None:
                    return
                reconnects.append(time.monotonic())
                conn.add_notify_handler(heard)
                conn.execute('LISTEN "dsync:job"')
                if last is not None:
                    for seq, payload in conn.execute(
                            "SELECT seq, payload FROM dsync_events_since(%s, ARRAY['job'])", (last,)):
                        seen[seq] = payload
                        last = max(last, seq)
                else:
                    last = conn.execute("SELECT coalesce(max(seq), 0) FROM dsync_events_since(0, ARRAY['job'])").fetchone()[0]
            select.select([conn.fileno()], [], [], 0.2)
            conn.execute("SELECT 1")     # delivers what arrived to heard()
        except psycopg.Error:
            conn = dropped(conn)


def q(sql, *args):
    for _ in range(300):
        try:
            c = psycopg.connect(DSN, autocommit=True)
            break
        except psycopg.Error:
            time.sleep(0.1)
    with c:
        cur = c.execute(sql, args)
        return cur.fetchall() if cur.description else []


def main():
    q("CREATE EXTENSION IF NOT EXISTS dsync")
    q("CREATE TABLE IF NOT EXISTS ha_fenced (id bigserial PRIMARY KEY, worker text, token bigint, "
      "at timestamptz DEFAULT clock_timestamp())")
    q("DROP TRIGGER IF EXISTS ha_fenced_t ON ha_fenced")
    q("CREATE TRIGGER ha_fenced_t BEFORE INSERT OR UPDATE ON ha_fenced "
      "FOR EACH ROW EXECUTE FUNCTION dsync_fenced('token')")
    kept = q("SELECT dsync_acquire('kept', 'k', '10 minutes')")[0][0]
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    threads.append(threading.Thread(target=watcher))
    for t in threads:
        t.start()
    marks = []
    # run.sh says when each event starts: one line per event on stdin.
    for line in sys.stdin:
        what = line.strip()
        if what == "end":
            break
        marks.append((what, time.monotonic()))
        print("event %s" % what, flush=True)
    time.sleep(3)
    stop.set()
    for t in threads[:-1]:
        t.join(30)
    # What the workers did last reaches the watcher within a moment.
    time.sleep(2)
    stop_watch.set()
    threads[-1].join(30)

    failed = 0
    def check(ok, text):
        nonlocal failed
        failed += 0 if ok else 1
        print("%s %s" % ("ok    " if ok else "FAILED", text), flush=True)

    times = sorted(a[2] for a in acked)
    ends = [m[1] for m in marks[1:]] + [time.monotonic()]
    for (what, at), end in zip(marks, ends):
        inside = [t for t in times if at <= t < end]
        before = max((t for t in times if t < at), default=at)
        gaps = [b - a for a, b in zip([before] + inside, inside)]
        if not inside:
            check(False, "%s: no write acknowledged after it" % what)
        else:
            print("       %s: downtime %.2f s (the longest time without an acknowledged write)"
                  % (what, max(gaps)), flush=True)
    # A holder that lost its connection and acquires again is given its
    # own lease back with its token; a token given to two holders is reissued.
    holders = {}
    for tok, who, _ in grants:
        holders.setdefault(tok, set()).add(who)
    reissued = [t for t, who in holders.items() if len(who) > 1]
    check(not reissued, "tokens reissued (given to two holders): %d of %d tokens" % (len(reissued), len(holders)))
    # Guarded windows (from before the guard to after the commit, one
    # clock) of different holders must not overlap.
    overlaps = 0
    latest = (float("-inf"), None)     # the latest end so far, and whose
    for start, end, who in sorted(windows):
        if start < latest[0] and who != latest[1]:
            overlaps += 1
        if end > latest[0]:
            latest = (end, who)
    ws = windows
    check(overlaps == 0, "overlapping guarded windows of different holders: %d of %d" % (overlaps, len(ws)))
    rows = q("SELECT token, worker FROM ha_fenced ORDER BY id")
    back = sum(1 for a, b in zip(rows, rows[1:]) if b[0] < a[0])
    check(back == 0, "tokens going back in the fenced table's commit order: %d of %d rows" % (back, len(rows)))
    stored = set(r[0] for r in rows)
    lost = [a for a in acked if a[0] not in stored]
    check(not lost, "acknowledged writes lost: %d of %d" % (len(lost), len(acked)))
    k = q("SELECT holder, fencing FROM dsync_leases WHERE lease = 'kept'")
    check(k == [("k", kept)], "lease held through every event kept by its holder with its token: %s" % k)
    logged = q("SELECT seq FROM dsync_events_since(0, ARRAY['job'])")
    t0 = marks[0][1] if marks else 0
    first_seen = min(seen) if seen else 0
    missed = [s for (s,) in logged if s >= first_seen and s not in seen]
    check(seen and not missed, "events missed by the watcher: %d of %d logged since it started" % (len(missed), sum(1 for (s,) in logged if s >= first_seen)))
    for m in missed[:10]:
        near = sorted(x for x in seen if abs(x - m) <= 3)
        print("       missed seq %d (seen around it: %s; logged: %s)" % (
            m, near, q("SELECT sent_at::time, payload FROM dsync_events_since(%s - 1, ARRAY['job']) LIMIT 1", m)), flush=True)
    print("       watcher (re)connects at: %s; events at: %s" % (
        ", ".join(time.strftime("%H:%M:%S", time.localtime(time.time() - time.monotonic() + r)) + ".%02d" % int((r % 1) * 100) for r in reconnects),
        ", ".join("%s %+.2f" % (w, a - t0) for w, a in marks)))
    print("       max seq seen: %d, last logged: %d" % (max(seen), max(s for (s,) in logged)))
    print("       writes acknowledged: %d, client errors during the events: %d" % (len(acked), len(errors)), flush=True)
    print("%d failed" % failed, flush=True)
    sys.exit(1 if failed else 0)


main()
