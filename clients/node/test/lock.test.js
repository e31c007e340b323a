'use strict';
const { test, after } = require('node:test');
const assert = require('node:assert');
const { spawn } = require('node:child_process');
const path = require('node:path');
const pg = require('pg');
const {
  Client, Lock, ReadLock, Semaphore, LeaderElection, watch, withLock, closeDefaultClients, LockLost, ListenUnavailable,
  DsyncConnectionError, LockExists, AcquireTimeout, NotHeld,
} = require('..');
const { direct, bouncer, uniqueName, adminQuery, stopWorkerAsleep, sleep } = require('./helpers');

// The existing constructors' tests (default clients per connection
// settings), ported to the Client design: each test has a watchdog timeout.
after(() => closeDefaultClients());

for (const [how, config] of [['direct', direct], ['pgbouncer', bouncer]]) {
  test(`lock cycle with BigInt tokens (${how})`, { timeout: 20000 }, async () => {
    const name = uniqueName('cycle');
    const a = new Lock(name, { config, ttl: 30, info: { host: 'h', n: 1 } });
    assert.strictEqual(await a.acquire({ blocking: false }), true);
    assert.strictEqual(typeof a.token, 'bigint');
    assert.ok(await a.owned());
    const b = new Lock(name, { config, ttl: 30 });
    assert.strictEqual(await b.acquire({ blocking: false }), false);
    assert.strictEqual(await b.acquire({ timeout: 0.2 }), false);
    assert.ok((await a.renew()) instanceof Date);
    assert.strictEqual(await a.release(), true);
    assert.strictEqual(await a.locked(), false);
    assert.strictEqual(await b.acquire({ timeout: 5 }), true);
    await b.release();
    await a.close();
    await b.close();
  });

  test(`withLock releases when fn throws (${how})`, { timeout: 20000 }, async () => {
    const name = uniqueName('with');
    await assert.rejects(withLock(name, async (lock) => {
      assert.strictEqual(typeof lock.token, 'bigint');
      throw new Error('boom');
    }, { config, ttl: 30 }), /boom/);
    const rows = await adminQuery('SELECT count(*)::int AS n FROM dsync_leases WHERE lease = $1', [name]);
    assert.strictEqual(rows[0].n, 0);
  });

  test(`semaphore of 2 (${how})`, { timeout: 20000 }, async () => {
    const name = uniqueName('sem');
    const s = [0, 1, 2].map(() => new Semaphore(name, 2, { config, ttl: 30 }));
    assert.ok(await s[0].acquire({ blocking: false }));
    assert.ok(await s[1].acquire({ blocking: false }));
    assert.strictEqual(await s[2].acquire({ blocking: false }), false);
    await s[0].release();
    await assert.rejects(s[0].release(), (e) => e.name === 'NotHeld');    // nothing held any more
    assert.ok(await s[2].acquire({ timeout: 5 }));
    for (const x of s.slice(1)) assert.strictEqual(await x.release(), true);
    for (const x of s) await x.close();
  });

  test(`read-write lock (${how})`, { timeout: 30000 }, async () => {
    const name = uniqueName('rw');
    const r1 = new ReadLock(name, { config, ttl: 30 });
    const r2 = new ReadLock(name, { config, ttl: 30 });
    const w = new Lock(name, { config, ttl: 30 });
    assert.ok(await r1.acquire({ blocking: false }));
    assert.ok(await r2.acquire({ blocking: false }));
    assert.notStrictEqual(r1.token, r2.token);
    assert.strictEqual(await w.acquire({ blocking: false }), false);
    const rows = await adminQuery('SELECT string_agg(mode, \',\') AS m FROM dsync_leases WHERE lease = $1', [name]);
    assert.strictEqual(rows[0].m, 'shared,shared');
    const writer = w.acquire({ timeout: 10 });
    await sleep(300);
    await r1.release();
    await r2.release();
    assert.strictEqual(await writer, true);
    assert.strictEqual(await r1.acquire({ blocking: false }), false);
    await w.release();
    assert.ok(await r1.acquire({ timeout: 5 }));
    await r1.release();
    for (const x of [r1, r2, w]) await x.close();
  });
}

test('guard in the caller\'s transaction returns the BigInt token', { timeout: 20000 }, async () => {
  const name = uniqueName('guard');
  await withLock(name, async (lock) => {
    const c = new pg.Client(direct);
    await c.connect();
    await c.query('BEGIN');
    const token = await lock.guard(c);
    assert.strictEqual(token, lock.token);
    await c.query('COMMIT');
    await c.end();
  }, { config: direct, ttl: 30 });
  const other = new Lock(name, { config: direct });
  const c = new pg.Client(direct);
  await c.connect();
  // Holding nothing: NotHeld at once, no statement.
  await assert.rejects(other.guard(c), (e) => e instanceof NotHeld && e.code === undefined);
  // Held here, lost on the server: NotHeld from the server.
  assert.ok(await other.acquire({ blocking: false }));
  await adminQuery('SELECT dsync_force_release($1)', [name]);
  await assert.rejects(other.guard(c), (e) => e instanceof NotHeld && e.code === '55000');
  await other.release().catch(() => {});
  // A shared Lock held by one run() scope: code outside it is refused, not
  // answered for the scope's hold (its holder name is the object's).
  let entered;
  const inside = new Promise((resolve) => { entered = resolve; });
  let open;
  const gate = new Promise((resolve) => { open = resolve; });
  const scope = other.run(async () => { entered(); await gate; });
  await inside;
  await c.query('BEGIN');
  await assert.rejects(other.guard(c), (e) => e instanceof NotHeld && /not held by the calling owner/.test(e.message));
  await c.query('ROLLBACK');
  open();
  await scope;
  await c.end();
});

test('a force-released lock is known lost at once', { timeout: 20000 }, async () => {
  const name = uniqueName('lost');
  const lock = new Lock(name, { config: direct, ttl: 30 });
  assert.ok(await lock.acquire());
  // A hold is LISTENed for once it has settled (20 ms): a loss before that
  // is found by the confirming renewal instead of heard.
  await sleep(200);
  const lost = new Promise((resolve) => lock.once('lost', resolve));
  const t0 = process.hrtime.bigint();
  await adminQuery('SELECT dsync_force_release($1)', [name]);
  const why = await lost;
  const ms = Number(process.hrtime.bigint() - t0) / 1e6;
  console.log(`node lost-lease notice: ${ms.toFixed(1)} ms`);
  assert.match(why, /released/);
  assert.ok(ms < 10000);
  assert.throws(() => lock.check(), LockLost);
  await lock.close();
});

// After a loss, taking the lock again without releasing the lost hold
// starts a fresh hold that one release frees, inside run() and outside it
// (inside run() it used to count 2: the new lease stayed held and renewed).
for (const how of ['bare', 'run()']) {
  test(`an acquire after a loss starts a fresh hold (${how})`, { timeout: 20000 }, async () => {
    const name = uniqueName('relost');
    const lock = new Lock(name, { config: direct, ttl: 1.5 });
    const held = async () => Number((await adminQuery('SELECT count(*) AS n FROM dsync_leases WHERE lease = $1', [name]))[0].n);
    const body = async () => {
      assert.ok(await lock.acquire());
      await sleep(200);
      const lost = new Promise((resolve) => lock.once('lost', resolve));
      await adminQuery('SELECT dsync_force_release($1)', [name]);
      await lost;
      assert.ok(await lock.acquire());
      assert.strictEqual(await lock.release(), true);
      assert.strictEqual(await held(), 0);
      await assert.rejects(lock.release(), (e) => e.name === 'NotHeld');
    };
    if (how === 'bare') {
      await body();
    } else {
      await lock.run(body);
    }
    assert.strictEqual(await held(), 0);
    await lock.close();
  });
}

test('payload tokens are BigInt and foreign NOTIFYs are skipped', { timeout: 20000 }, async () => {
  const name = uniqueName('watch');
  const it = watch([name], { config: direct, timeout: 5 });
  const seen = [];
  const reader = (async () => {
    for await (const ev of it) {
      seen.push(ev);
      if (ev.kind === 'released') break;
    }
  })();
  await sleep(500);
  const ch = (await adminQuery('SELECT dsync_channel($1) AS ch', [name]))[0].ch;
  await adminQuery(`SELECT pg_notify($1, $2)`, [ch, JSON.stringify({ event: 'released', lease: name, holder: 'x', fencing: 1 })]);
  await withLock(name, async () => {}, { config: direct, ttl: 30, holder: 'w' });
  await reader;
  assert.deepStrictEqual(seen.map((e) => e.kind), ['acquired', 'released']);
  assert.strictEqual(typeof seen[0].fencing, 'bigint');
  assert.strictEqual(seen[0].fencing, seen[1].fencing);
  assert.ok(seen[0].expiresAt instanceof Date);
});

test('watch skips an event its state already shows', { timeout: 20000 }, async () => {
  // dsync's worker sends an event after the commit that made it: with the
  // worker stopped, a watch started after a grant shows it in its state,
  // and the late "acquired" event is not given again.
  const name = uniqueName('late');
  const pid = (await adminQuery('SELECT sender_pid FROM dsync_stats'))[0].sender_pid;
  assert.ok(pid, 'no event sender in dsync_stats');
  // Someone listens in the database, so the grant's event is to be sent.
  const other = new pg.Client(direct);
  await other.connect();
  const ch = (await other.query('SELECT dsync_channel($1) AS ch', [`${name}-other`])).rows[0].ch;
  await other.query(`LISTEN "${ch}"`);
  const lock = new Lock(name, { config: direct, ttl: 30, holder: 'h-late' });
  const it = watch([name], { config: direct, timeout: 5 })[Symbol.asyncIterator]();
  let first;
  await stopWorkerAsleep(pid);
  try {
    assert.ok(await lock.acquire({ blocking: false }));
    first = (await it.next()).value;
  } finally {
    process.kill(pid, 'SIGCONT');
  }
  assert.deepStrictEqual([first.kind, first.holder, first.fencing], ['state', 'h-late', lock.token]);
  await lock.release();
  const ev = (await it.next()).value;
  assert.deepStrictEqual([ev.kind, ev.holder, ev.fencing], ['released', 'h-late', first.fencing]);
  await it.return();
  await other.end();
  await lock.close();
});

test('watch resumes after a seq from the event log, each event once', { timeout: 30000 }, async () => {
  const name = uniqueName('resume');
  await withLock(name, async () => {}, { config: direct, ttl: 30, holder: 'r1' });
  await withLock(name, async () => {}, { config: direct, ttl: 30, holder: 'r2' });
  let logged = [];
  for (let i = 0; i < 200 && logged.length < 4; i++) {
    logged = await adminQuery('SELECT seq::text AS seq FROM dsync_events_since(0, $1)', [[name]]);
    if (logged.length < 4) await sleep(50);
  }
  assert.strictEqual(logged.length, 4);
  const seen = [];
  for await (const ev of watch([name], { config: direct, timeout: 1, after: logged[1].seq })) {
    seen.push(ev);
    if (seen.length === 2) break;
  }
  assert.deepStrictEqual(seen.map((e) => [e.kind, e.holder]), [['acquired', 'r2'], ['released', 'r2']]);
  assert.deepStrictEqual(seen.map((e) => String(e.seq)), [logged[2].seq, logged[3].seq]);
});

test('watch reconnects after its connection is cut and replays what it missed', { timeout: 30000 }, async () => {
  const name = uniqueName('reconnect');
  const seen = [];
  let heard = null;
  const reader = (async () => {
    for await (const ev of watch([name], { config: direct, timeout: 10 })) {
      seen.push(ev);
      if (heard) heard();
      if (ev.kind === 'acquired' && ev.holder === 'during') break;
    }
  })();
  // Idle after its last setup statement (the state it starts from): an
  // acquire before that would show as a "state" event.
  const watching = "SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = 'dsync watch' AND state = 'idle'"
    + " AND query LIKE 'SELECT lease, holder, fencing, expires_at FROM dsync_leases%'";
  for (let i = 0; i < 250 && !(await adminQuery(watching))[0].n; i++) await sleep(20);
  const twoSeen = new Promise((resolve) => { heard = () => { if (seen.length >= 2) resolve(); }; });
  await withLock(name, async () => {}, { config: direct, ttl: 30, holder: 'before' });
  await twoSeen;
  // What a failover or a restart does to the watch's session.
  await adminQuery("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'dsync watch'");
  const lock = new Lock(name, { config: direct, ttl: 30, holder: 'during' });
  assert.ok(await lock.acquire());
  await reader;
  assert.deepStrictEqual(seen.map((e) => [e.kind, e.holder]),
    [['acquired', 'before'], ['released', 'before'], ['acquired', 'during']]);
  assert.ok(seen[0].seq < seen[1].seq && seen[1].seq < seen[2].seq, 'each event once, in seq order');
  assert.strictEqual(seen[2].fencing, lock.token);
  await lock.release();
  await lock.close();
});

test('watch with reconnect: false ends with the connection error', { timeout: 20000 }, async () => {
  const name = uniqueName('noreconnect');
  // A name of its own: test files run side by side, and another file's
  // watch connection used to end this wait before this one was connected
  // (1 of 5 loaded runs).
  const app = name.slice(0, 40);
  const outcome = (async () => {
    for await (const ev of watch([name], { config: { ...direct, application_name: app }, timeout: 10, reconnect: false })) void ev;
  })().then(() => null, (e) => e);
  const watching = 'SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1 AND state = \'idle\'';
  for (let i = 0; i < 250 && !(await adminQuery(watching, [`${app} watch`]))[0].n; i++) await sleep(20);
  await adminQuery('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1', [`${app} watch`]);
  const err = await outcome;
  assert.ok(err instanceof DsyncConnectionError, 'the watch ended with a connection error');
  assert.strictEqual(err.code, '57P01');
  assert.strictEqual(err.cause.code, '57P01');
});

test('watch through PgBouncer says LISTEN does not work', { timeout: 20000 }, async () => {
  await assert.rejects((async () => {
    for await (const ev of watch(['x'], { config: bouncer, timeout: 1 })) void ev;
  })(), ListenUnavailable);
});

test('leader election emits elected, members and lost; failover after kill', { timeout: 60000 }, async () => {
  const group = uniqueName('elect');
  const events = [];
  const a = new LeaderElection(group, { config: direct, ttl: 3, member: 'a' });
  a.on('elected', (t) => events.push(['elected', typeof t]));
  a.on('lost', () => events.push(['lost']));
  let members = null;
  a.on('members', (m) => { members = m; });
  a.start();
  for (let i = 0; i < 200 && !a.isLeader; i++) await sleep(25);
  assert.ok(a.isLeader);
  assert.ok(members && members[0].member === 'a');
  await a.stop();
  assert.deepStrictEqual(events, [['elected', 'bigint'], ['lost']]);

  // Two processes; kill -9 the leader; the other leads within ttl + 1 s.
  const script = path.join(__dirname, 'candidate.js');
  const procs = {};
  for (const m of ['p1', 'p2']) {
    procs[m] = spawn(process.execPath, [script, group, m], { env: process.env, stdio: 'ignore' });
  }
  const leader = async () => (await adminQuery('SELECT dsync_leader($1) AS v', [group]))[0].v;
  let first = null;
  for (let i = 0; i < 300 && !first; i++) { first = await leader(); await sleep(25); }
  assert.ok(first === 'p1' || first === 'p2');
  const other = first === 'p1' ? 'p2' : 'p1';
  const t0 = Date.now();
  procs[first].kill('SIGKILL');
  let now = null;
  while (Date.now() - t0 < 8000 && now !== other) { now = await leader(); await sleep(20); }
  const took = (Date.now() - t0) / 1000;
  console.log(`node failover after kill -9: ${took.toFixed(2)} s (ttl 3 s)`);
  for (const p of Object.values(procs)) p.kill('SIGKILL');
  assert.strictEqual(now, other);
  assert.ok(took <= 4);
});

for (const [script, expect] of [['with_lock.js', /debited under fencing token \d+/],
  ['leader.js', /running the job with 1 member/], ['semaphore.js', /at most [1-4] held/],
  ['client.js', /3 tasks took turns \(at most 1 inside\); signal received: true/]]) {
  test(`example ${script}`, { timeout: 70000 }, async () => {
    const { execFile } = require('node:child_process');
    const out = await new Promise((resolve, reject) => {
      execFile(process.execPath, [path.join(__dirname, '..', 'examples', script)], { env: process.env, timeout: 60000 },
        (err, stdout, stderr) => (err ? reject(new Error(`${err.message}\n${stderr}`)) : resolve(stdout)));
    });
    assert.match(out, expect);
  });
}

test('the watchdog declares a loss before the lease could expire', { timeout: 20000 }, async () => {
  const name = uniqueName('watchdog');
  const app = uniqueName('wd');
  const client = new Client({ config: { ...direct, application_name: app } });
  client._keeper._rescue = async () => {};   // the statement pool would save it (see keeper_edges)
  const lock = client.lock(name, { ttl: 2 });
  const t0 = Date.now();
  assert.ok(await lock.acquire());
  let pid = null;
  for (let i = 0; i < 200 && !pid; i++) {
    const rows = await adminQuery('SELECT pid FROM pg_stat_activity WHERE application_name = $1', [`${app} keeper`]);
    if (rows.length) pid = rows[0].pid; else await sleep(10);
  }
  assert.ok(pid, 'no keeper connection');
  process.kill(pid, 'SIGSTOP');
  try {
    const why = await new Promise((resolve) => lock.once('lost', resolve));
    const took = (Date.now() - t0) / 1000;
    console.log(`node watchdog: loss declared ${took.toFixed(2)} s after the acquire (ttl 2 s)`);
    assert.match(why, /renewal/);
    assert.ok(took < 2);
    assert.strictEqual(lock.lost, true);
    assert.throws(() => lock.check(), LockLost);
    const rows = await adminQuery('SELECT count(*)::int AS n FROM dsync_leases WHERE lease = $1', [name]);
    assert.strictEqual(rows[0].n, 1);
  } finally {
    process.kill(pid, 'SIGCONT');
  }
  assert.strictEqual(await lock.release(), false);
  await client.close();
  // The keeper gave the lease back once it could (or close() did).
  const rows = await adminQuery('SELECT count(*)::int AS n FROM dsync_leases WHERE lease = $1', [name]);
  assert.strictEqual(rows[0].n, 0);
});

test('a lock taken again after a loss is renewed again', { timeout: 20000 }, async () => {
  const name = uniqueName('again');
  const lock = new Lock(name, { config: direct, ttl: 1.5 });
  assert.ok(await lock.acquire());
  const lost = new Promise((resolve) => lock.once('lost', resolve));
  await adminQuery('SELECT dsync_force_release($1)', [name]);
  await lost;
  assert.ok(await lock.acquire());
  assert.strictEqual(lock.lost, false);
  await sleep(3500);
  assert.ok(await lock.owned());
  assert.strictEqual(lock.lost, false);
  await lock.release();
  await lock.close();
});

test('a leader whose lease is taken away is re-elected and kept', { timeout: 30000 }, async () => {
  const group = uniqueName('reelect');
  const calls = [];
  const e = new LeaderElection(group, { config: direct, ttl: 1.5, member: 'm' });
  e.on('elected', () => calls.push('+'));
  e.on('lost', () => calls.push('-'));
  e.start();
  for (let i = 0; i < 200 && !e.isLeader; i++) await sleep(25);
  assert.ok(e.isLeader);
  await adminQuery('SELECT dsync_force_release($1)', [group]);
  for (let i = 0; i < 400 && calls.length < 3; i++) await sleep(25);
  assert.deepStrictEqual(calls, ['+', '-', '+']);
  await sleep(3500);
  assert.ok(e.isLeader);
  assert.strictEqual((await adminQuery('SELECT dsync_leader($1) AS v', [group]))[0].v, 'm');
  await e.stop();
  assert.deepStrictEqual(calls, ['+', '-', '+', '-']);
});

// node-postgres waits for ever to connect unless told: every connection
// the client opens has a connect timeout (5 s by default), so a call fails
// with DsyncConnectionError instead of hanging for the whole outage.
test('connecting to a silent server times out', { timeout: 60000 }, async () => {
  const net = require('node:net');
  const sockets = [];
  const silent = net.createServer((s) => sockets.push(s));   // accepts, never answers
  await new Promise((resolve) => silent.listen(0, '127.0.0.1', resolve));
  const { port } = silent.address();
  const c = new Client({ connectionString: `postgres://app@127.0.0.1:${port}/app` });
  try {
    await assert.rejects(c.lock(uniqueName('silent'), { ttl: 10 }).acquire({ blocking: false }), DsyncConnectionError);
    const it = watch(['silent'], { connectionString: `postgres://app@127.0.0.1:${port}/app`, reconnect: false });
    await assert.rejects(it.next());
  } finally {
    await c.close();
    for (const s of sockets) s.destroy();
    silent.close();
  }
});

// An event loop blocked past the ttl (no keeper, no watchdog timer ran):
// held, isLeader, lost and check() read the hold's deadline themselves,
// and 'lost' follows just after the read (it used to say held).
test('properties are false after the loop was blocked past the ttl', { timeout: 30000 }, async () => {
  const name = uniqueName('blocked');
  const c = new Client({ config: direct });
  try {
    const lock = c.lock(name, { ttl: 1.5 });
    const e = c.election(`${name}-group`, { ttl: 1.5, member: 'm' });
    assert.ok(await lock.acquire());
    const elected = new Promise((resolve) => e.once('elected', resolve));
    e.start();
    await elected;
    const lost = new Promise((resolve) => lock.once('lost', resolve));
    const end = performance.now() + 2500;
    while (performance.now() < end) { /* the loop is blocked */ }
    assert.strictEqual(lock.held, false);
    assert.strictEqual(e.isLeader, false);
    assert.strictEqual(lock.lost, true);
    assert.throws(() => lock.check(), LockLost);
    assert.match(await lost, /no renewal could be confirmed/);
    await e.stop();
    assert.strictEqual(await lock.release(), false);
  } finally {
    await c.close();
  }
});

// A loop blocked past the ttl whose first act is release(): false, and
// 'lost' is emitted (release() used to look only at whether a loss had
// been reported, so the owner never heard of it: found by the Python
// client's fault run).
test('a release after the loop was blocked past the ttl emits lost', { timeout: 30000 }, async () => {
  const name = uniqueName('blocked-release');
  const c = new Client({ config: direct });
  try {
    const lock = c.lock(name, { ttl: 1.5 });
    assert.ok(await lock.acquire());
    const reasons = [];
    lock.on('lost', (reason) => reasons.push(reason));
    const end = performance.now() + 2500;
    while (performance.now() < end) { /* the loop is blocked */ }
    assert.strictEqual(await lock.release(), false);
    await sleep(200);
    assert.strictEqual(reasons.length, 1);
    assert.match(reasons[0], /no renewal could be confirmed/);
  } finally {
    await c.close();
  }
});

// redsync's users get an error when a lock is not had (ErrFailed): with
// raiseOnFailure, a try rejects with LockExists and a wait that runs out
// with AcquireTimeout (LockExists is one); by default both answer false.
test('raiseOnFailure: LockExists for a try, AcquireTimeout for a wait', { timeout: 20000 }, async () => {
  const name = uniqueName('raise');
  const holder = new Lock(name, { config: direct, ttl: 30 });
  assert.ok(await holder.acquire());
  const strict = new Lock(name, { config: direct, ttl: 30, raiseOnFailure: true });
  await assert.rejects(strict.acquire({ blocking: false }), (e) => e instanceof LockExists && e instanceof AcquireTimeout
    && /is held by another holder/.test(e.message));
  await assert.rejects(strict.acquire({ timeout: 0.3 }), (e) => e instanceof AcquireTimeout && !(e instanceof LockExists));
  const lenient = new Lock(name, { config: direct, ttl: 30 });
  assert.strictEqual(await lenient.acquire({ blocking: false }), false);
  const sem = new Semaphore(`${name}-sem`, 1, { config: direct, ttl: 30, raiseOnFailure: true });
  assert.ok(await sem.acquire());
  const sem2 = new Semaphore(`${name}-sem`, 1, { config: direct, ttl: 30, raiseOnFailure: true });
  await assert.rejects(sem2.acquire({ blocking: false }), LockExists);
  assert.ok(await sem.release());
  assert.ok(await holder.release());
  assert.ok(await strict.acquire({ blocking: false }));
  assert.ok(await strict.release());
});
