"""deploy_trial.py: dsync tried the way users deploy it, on a throwaway
server with nothing but shared_preload_libraries = 'dsync' (and its
socket), as the ordinary role app, through PgBouncer in transaction mode,
and under faults: the README's Quick start pasted, a fenced table of
1,000,000 rows, one Client holding 1,000 leases while 1,000 of its threads
wait on one name and every connection of it is killed, a holder SIGSTOPped
past its ttl, a waiter SIGKILLed in line, a crash mid-hand-off.  Prints a
line per trial and "TRIALS: N ok, N failed"; exits non-zero on a failure.

    /usr/bin/python3 test/deploy_trial.py      (as root, dsync installed; about 2 minutes)
"""
import os, re, signal, subprocess, sys, threading, time
TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(TOP, "clients/python/tests")); sys.path.insert(0, os.path.join(TOP, "clients/python"))
from conftest import Server, PGBIN
import psycopg
from dsync import Client

s = Server(); s.start()
conf = os.path.join(s.data, "postgresql.conf")
txt = open(conf).read().replace("max_connections = 200\n", "")
open(conf, "w").write(txt)
subprocess.run(["runuser", "-u", "postgres", "--", f"{PGBIN}/pg_ctl", "-D", s.data, "-w", "restart", "-l", s.dir + "/log"], check=True, stdout=subprocess.DEVNULL)
admin = psycopg.connect(s.dsn(user="postgres"), autocommit=True)
print("non-default settings:", admin.execute("SELECT string_agg(name || '=' || setting, ', ') FROM pg_settings WHERE source = 'configuration file' AND name NOT IN ('unix_socket_directories','listen_addresses','port','shared_preload_libraries','lc_messages','lc_monetary','lc_numeric','lc_time','datestyle','default_text_search_config','timezone','log_timezone','dynamic_shared_memory_type','max_wal_size','min_wal_size')").fetchone()[0])
app = psycopg.connect(s.dsn(), autocommit=True)
results = {}
def check(name, ok, detail=""):
    results[name] = ok
    print(("ok    " if ok else "FAIL  ") + name + (": " + detail if detail else ""))

# 1. The README's Quick start, pasted as the ordinary role (the extension made by the admin).
readme = open(os.path.join(TOP, "README.md")).read()
qs = re.search(r"```sql\n(CREATE EXTENSION IF NOT EXISTS dsync;.*?)```", readme, re.S).group(1)
r = subprocess.run([f"{PGBIN}/psql", "-X", "-v", "ON_ERROR_STOP=1", s.dsn()], input=qs, capture_output=True, text=True)
check("quick start as app: fails only at its stale write", r.returncode == 3 and "stale fencing token" in r.stderr and r.stderr.count("ERROR") == 1, r.stderr.strip().splitlines()[0] if r.stderr else "")

# 2. A big fenced table: 1,000,000 rows updated under the lease's token; the stale holder refused.
app.execute("CREATE TABLE big (id int PRIMARY KEY, v int, token bigint)")
app.execute("CREATE TRIGGER big_fenced BEFORE INSERT OR UPDATE ON big FOR EACH ROW EXECUTE FUNCTION dsync_fenced('token')")
t1 = app.execute("SELECT dsync_acquire('big-lease', 'w1', '60 s')").fetchone()[0]
t0 = time.monotonic(); app.execute("INSERT INTO big SELECT g, 0, %s FROM generate_series(1, 1000000) g", (t1,)); ins = time.monotonic() - t0
app.execute("SELECT dsync_release('big-lease', 'w1')")
t2 = app.execute("SELECT dsync_acquire('big-lease', 'w2', '60 s')").fetchone()[0]
t0 = time.monotonic(); app.execute("UPDATE big SET v = v + 1, token = %s", (t2,)); upd = time.monotonic() - t0
try:
    app.execute("UPDATE big SET v = v + 1, token = %s WHERE id = 500000", (t1,)); stale = False
except psycopg.Error as e:
    stale = "stale fencing token" in str(e)
check("big table: 1M rows inserted and updated fenced, the stale token refused", stale, f"insert {ins:.1f} s, update {upd:.1f} s")
app.execute("SELECT dsync_release('big-lease', 'w2')")

# 3. One Client, 1,000 leases held and 1,000 threads waiting on one name; connections counted on the server.
def conns(tag):
    return admin.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (tag,)).fetchone()[0]
c = Client(s.dsn(), application_name="trial-1000")
held = [c.lock(f"held/{i}", ttl=20) for i in range(1000)]
for h in held: assert h.acquire()
blocker = Client(s.dsn(), application_name="trial-blocker"); bl = blocker.lock("one", ttl=20); assert bl.acquire()
shared = c.lock("one", ttl=20); got = []; mu = threading.Lock()
def waiter():
    if shared.acquire(timeout=120):
        with mu: got.append(shared.token)
        shared.release()
ths = [threading.Thread(target=waiter) for _ in range(1000)]
for t in ths: t.start()
deadline = time.time() + 60
while time.time() < deadline and admin.execute("SELECT count(*) FROM dsync_waiters WHERE name = 'one'").fetchone()[0] < 1000: time.sleep(0.2)
q = admin.execute("SELECT count(*) FROM dsync_waiters WHERE name = 'one' AND kind = 'queued'").fetchone()[0]
n = conns("trial-1000")
# 4. Every connection of that client killed while they wait (and it holds 1,000 leases).
killed = admin.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = 'trial-1000'").fetchone()[0]
time.sleep(1.0)
bl.release()
for t in ths: t.join(180)
lost = [h for h in held if h.lost.is_set()] if hasattr(held[0].lost, "is_set") else [h for h in held if h.lost]
check("1,000 held + 1,000 threads queued on one Client", q == 1000 and n <= 4, f"{q} queued, {n} server connections")
check("every connection killed mid-wait: all 1,000 served, in token order, no lease lost", len(got) == 1000 and got == sorted(got) and not lost,
      f"killed {killed}, served {len(got)}, tokens increasing {got == sorted(got)}, holds lost {len(lost)}")
check("nothing left queued", admin.execute("SELECT count(*) FROM dsync_waiters").fetchone()[0] == 0)
for h in held: h.release()
c.close(); blocker.close()

# 5. A holder paused past its ttl (SIGSTOP): the next waiter gets the name; the paused one's write is refused.
app.execute("CREATE TABLE acct (id int PRIMARY KEY, v int, token bigint)")
app.execute("CREATE TRIGGER acct_fenced BEFORE INSERT OR UPDATE ON acct FOR EACH ROW EXECUTE FUNCTION dsync_fenced('token')")
app.execute("INSERT INTO acct VALUES (1, 0, dsync_acquire('acct', 'setup', '10 s'))"); app.execute("SELECT dsync_release('acct', 'setup')")
holder_src = f'''
import sys, time, psycopg; sys.path.insert(0, "{TOP}/clients/python")
from dsync import Client
c = Client("{s.dsn()}"); l = c.lock("acct", ttl=2); l.acquire(); print(l.token, flush=True)
time.sleep(6)
try:
    with psycopg.connect("{s.dsn()}") as conn:
        conn.execute("UPDATE acct SET v = v + 1, token = %s WHERE id = 1", (l.token,))
    print("WROTE", l.lost.is_set(), flush=True)
except psycopg.Error as e:
    print("REFUSED", type(e).__name__, l.lost.is_set(), flush=True)
'''
p = subprocess.Popen([sys.executable, "-c", holder_src], stdout=subprocess.PIPE, text=True)
tok = int(p.stdout.readline()); os.kill(p.pid, signal.SIGSTOP)
c2 = Client(s.dsn()); l2 = c2.lock("acct", ttl=10)
t0 = time.monotonic(); ok2 = l2.acquire(timeout=20); waited = time.monotonic() - t0
with psycopg.connect(s.dsn(), autocommit=True) as conn:
    conn.execute("UPDATE acct SET v = v + 1, token = %s WHERE id = 1", (l2.token,))
os.kill(p.pid, signal.SIGCONT); out = p.stdout.readline().strip(); p.wait(30)
check("SIGSTOP past the ttl: next holder in, the paused one's write refused", ok2 and l2.token > tok and out.startswith("REFUSED"),
      f"next got it after {waited:.1f} s, paused process: {out}")
l2.release(); c2.close()

# 6. Through PgBouncer (transaction mode): a blocking acquire works (it waits in a backend: no LISTEN there).
cb = Client(s.dsn(bouncer=True)); la = cb.lock("pooled", ttl=10); lb = cb.lock("pooled", ttl=10)
assert la.acquire(); res = {}
def bwait():
    res["b"] = lb.acquire(timeout=20)
    if res["b"]: lb.release()
th = threading.Thread(target=bwait); th.start(); time.sleep(1)
kinds = admin.execute("SELECT string_agg(kind, ',') FROM dsync_waiters WHERE name = 'pooled'").fetchone()[0]
la.release(); th.join(25)
check("PgBouncer: the waiter waits in a backend and is served", res.get("b") is True, f"waiter kind: {kinds}")
cb.close()

# 7. A client SIGKILLed while queued and another just granted; then a crash mid-hand-off.
kill_src = f'''
import sys; sys.path.insert(0, "{TOP}/clients/python")
from dsync import Client
c = Client("{s.dsn()}"); l = c.lock("k", ttl=3); print("waiting", flush=True); l.acquire(); print("got", flush=True)
import time; time.sleep(600)
'''
hold = Client(s.dsn()); hk = hold.lock("k", ttl=30); hk.acquire()
victim = subprocess.Popen([sys.executable, "-c", kill_src], stdout=subprocess.PIPE, text=True); victim.stdout.readline(); time.sleep(1)
os.kill(victim.pid, signal.SIGKILL); victim.wait()
hk.release()
c3 = Client(s.dsn()); l3 = c3.lock("k", ttl=10); t0 = time.monotonic(); ok3 = l3.acquire(timeout=30); w3 = time.monotonic() - t0
check("a waiter SIGKILLed in line delays the next by at most its ttl or the claim window", ok3 and w3 < 6, f"next waited {w3:.1f} s")
l3.release(); c3.close(); hold.close()

tokens = []; stop = threading.Event(); errs = []
def turn(i):
    cl = Client(s.dsn()); lk = cl.lock("crash", ttl=5)
    while not stop.is_set():
        try:
            if lk.acquire(timeout=30):
                tokens.append((time.monotonic(), lk.token)); time.sleep(0.005); lk.release()
        except Exception as e:
            errs.append(type(e).__name__); time.sleep(0.2)
    cl.close()
ws = [threading.Thread(target=turn, args=(i,)) for i in range(8)]
for w in ws: w.start()
time.sleep(3)
before = len(tokens)
subprocess.run(["runuser", "-u", "postgres", "--", f"{PGBIN}/pg_ctl", "-D", s.data, "-m", "immediate", "-w", "restart", "-l", s.dir + "/log"], stdout=subprocess.DEVNULL)
time.sleep(12); stop.set()
for w in ws: w.join(60)
toks = [t for _, t in tokens]
after = len(tokens) - before
check("crash mid-hand-off: hand-offs resume, tokens never go back", after > 10 and toks == sorted(toks) and len(set(toks)) == len(toks),
      f"{before} turns before, {after} after the restart, errors seen by clients: {len(errs)}")
left = psycopg.connect(s.dsn(user="postgres"), autocommit=True).execute("SELECT count(*) FROM dsync_waiters").fetchone()[0]
check("nothing left queued after the crash", left == 0, str(left))
s.stop()
print("TRIALS:", sum(results.values()), "ok,", len(results) - sum(results.values()), "failed")
sys.exit(0 if all(results.values()) else 1)
