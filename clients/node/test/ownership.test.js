'use strict';
// Who owns a lock (clients/DESIGN.md): run() scopes, bare acquires,
// reentrancy, and the losses that must not be reported.
const { test, after } = require('node:test');
const assert = require('node:assert');
const { Client, NotHeld, AcquireTimeout, channelOf } = require('..');
const { direct, uniqueName, adminQuery, sleep, waitFor } = require('./helpers');

const client = new Client({ config: direct });
after(() => client.close());

const leases = async (name) => (await adminQuery('SELECT count(*)::int AS n FROM dsync_leases WHERE lease = $1', [name]))[0].n;

test('8 concurrent run() calls on one shared Lock never overlap and all complete', { timeout: 30000 }, async () => {
  const lock = client.lock(uniqueName('shared'), { ttl: 10 });
  let inside = 0;
  let overlaps = 0;
  let done = 0;
  const holders = new Set();
  await Promise.all(Array.from({ length: 8 }, (_, i) => lock.run(async () => {
    inside += 1;
    if (inside > 1) overlaps += 1;
    holders.add(lock.hold.holder);
    assert.strictEqual(typeof lock.token, 'bigint');
    await sleep(20 + (i % 3) * 5);
    inside -= 1;
    done += 1;
  })));
  console.log(`8 run() calls: ${overlaps} overlaps, holder names used: ${[...holders].join(', ')}`);
  assert.strictEqual(overlaps, 0);
  assert.strictEqual(done, 8);
  assert.ok(holders.size >= 2, 'concurrent owners have holder names of their own');
  assert.strictEqual(lock.held, false);
  assert.strictEqual(await leases(lock.name), 0);
});

test('nested run() of the same lock is reentrant: one lease, same token, kept after the inner block', { timeout: 20000 }, async () => {
  const lock = client.lock(uniqueName('nested'), { ttl: 10 });
  await lock.run(async () => {
    const token = lock.token;
    const holder = lock.hold.holder;
    assert.strictEqual(await leases(lock.name), 1);
    const inner = await lock.run(async () => {
      assert.strictEqual(lock.token, token);
      assert.strictEqual(lock.hold.holder, holder);
      assert.strictEqual(await leases(lock.name), 1, 'one server lease for both');
      // An acquire inside the scope counts too; n acquires need n releases.
      assert.strictEqual(await lock.acquire({ blocking: false }), true);
      assert.strictEqual(await lock.release(), true);
      assert.strictEqual(lock.held, true);
      return 'inner';
    }, { timeout: 0 });
    assert.strictEqual(inner, 'inner');
    assert.strictEqual(lock.held, true, 'the lease survives the inner block');
    assert.strictEqual(lock.token, token);
    assert.strictEqual(await lock.owned(), true);
    assert.strictEqual(await leases(lock.name), 1);
  });
  assert.strictEqual(lock.held, false);
  assert.strictEqual(await leases(lock.name), 0);
});

test('a shared Semaphore(2) used by 6 concurrent run() callers never has more than 2 inside', { timeout: 30000 }, async () => {
  const sem = await client.semaphore(uniqueName('sem2'), 2, { ttl: 10 });
  let inside = 0;
  let most = 0;
  await Promise.all(Array.from({ length: 6 }, () => sem.run(async () => {
    inside += 1;
    most = Math.max(most, inside);
    await sleep(80);
    inside -= 1;
  })));
  console.log(`semaphore of 2, 6 run() callers: at most ${most} inside`);
  assert.strictEqual(most, 2);
  assert.strictEqual(await leases(sem.name), 0);
});

test('bare acquire is an owner of its own; bare release gives back the most recent; NotHeld when nothing is held', { timeout: 20000 }, async () => {
  const sem = await client.semaphore(uniqueName('bare'), 2, { ttl: 10 });
  await assert.rejects(sem.release(), NotHeld);
  assert.ok(await sem.acquire({ blocking: false }));
  const first = sem.token;
  assert.ok(await sem.acquire({ blocking: false }), 'a second bare acquire is another owner: a second permit');
  const second = sem.token;
  assert.notStrictEqual(first, second);
  assert.strictEqual(await sem.acquire({ blocking: false }), false, 'no third permit');
  assert.strictEqual(await leases(sem.name), 2);
  assert.strictEqual(await sem.release(), true);
  assert.strictEqual(sem.token, first, 'the most recent bare hold went first');
  assert.strictEqual(await sem.release(), true);
  await assert.rejects(sem.release(), NotHeld);
  assert.strictEqual(await leases(sem.name), 0);

  const lock = client.lock(uniqueName('bare-lock'), { ttl: 10 });
  assert.ok(await lock.acquire());
  assert.strictEqual(await lock.acquire({ blocking: false }), false, 'never reentrant outside run()');
  assert.strictEqual(await lock.acquire({ timeout: 0.2 }), false);
  await lock.release();
  await assert.rejects(lock.run(async () => {}, { timeout: 0 }).then(() => lock.acquire())
    .then(() => client.lock(lock.name).run(async () => {}, { timeout: 0.1 })), AcquireTimeout);
  await lock.release();
});

test('release and at once acquire again, 200 times: no false loss', { timeout: 60000 }, async () => {
  const lock = client.lock(uniqueName('again'), { ttl: 30 });
  const losses = [];
  lock.on('lost', (why) => losses.push(why));
  const tokens = new Set();
  for (let i = 0; i < 200; i++) {
    assert.ok(await lock.acquire({ blocking: false }));
    tokens.add(lock.token);
    assert.strictEqual(await lock.release(), true);
  }
  for (let i = 0; i < 100; i++) await lock.run(async () => { tokens.add(lock.token); });
  assert.ok(await lock.acquire({ blocking: false }));
  await sleep(500);     // the last releases' notifications have arrived
  assert.strictEqual(lock.lost, false);
  assert.strictEqual(await lock.owned(), true);
  await lock.release();
  console.log(`300 release/re-acquire cycles: ${losses.length} false losses`);
  assert.deepStrictEqual(losses, []);
  assert.strictEqual(tokens.size, 300);
});

test('a forged released notification with the real token costs one renewal, never the lease', { timeout: 20000 }, async () => {
  const lock = client.lock(uniqueName('forged'), { ttl: 30 });
  assert.ok(await lock.acquire());
  const losses = [];
  lock.on('lost', (why) => losses.push(why));
  // The keeper LISTENs on the lease's channel and has confirmed the grant.
  const ledger = client._keeper.ledger;
  assert.ok(await waitFor(() => ledger.listening.has(channelOf(lock.name)) && !ledger.unverified.has(lock.hold), 5000));
  await sleep(50);
  const before = (await adminQuery('SELECT renewed_at FROM dsync_leases WHERE lease = $1', [lock.name]))[0].renewed_at;
  const payload = `{"event":"released","lease":${JSON.stringify(lock.name)},"holder":${JSON.stringify(lock.hold.holder)},"fencing":${lock.token}}`;
  const t0 = performance.now();
  await adminQuery('SELECT pg_notify($1, $2)', [channelOf(lock.name), payload]);
  const sent = performance.now();
  let after = null;
  await waitFor(async () => {
    after = (await adminQuery('SELECT renewed_at FROM dsync_leases WHERE lease = $1', [lock.name]))[0].renewed_at;
    return after.getTime() !== before.getTime();
  }, 5000, 2);
  const took = performance.now() - sent;
  console.log(`forged notification: confirming renewal seen ${took.toFixed(1)} ms after the NOTIFY returned (${(performance.now() - t0).toFixed(1)} ms after it was sent)`);
  assert.notStrictEqual(after.getTime(), before.getTime(), 'the keeper confirmed the lease with a renewal');
  await sleep(300);
  assert.deepStrictEqual(losses, []);
  assert.strictEqual(lock.held, true);
  assert.strictEqual(await lock.owned(), true);
  await lock.release();
});

test('a loss right after the grant, before the keeper LISTENs, is found by the confirming renewal', { timeout: 20000 }, async () => {
  const lock = client.lock(uniqueName('early'), { ttl: 30 });
  const lost = new Promise((resolve) => lock.once('lost', resolve));
  assert.ok(await lock.acquire());
  await adminQuery('SELECT dsync_force_release($1)', [lock.name]);
  const t0 = performance.now();
  const why = await Promise.race([lost, sleep(5000).then(() => 'not reported')]);
  console.log(`a loss before the keeper LISTENed: reported ${(performance.now() - t0).toFixed(1)} ms after the release returned (${why})`);
  assert.match(why, /renewal found|released/);
  assert.ok(performance.now() - t0 < 1000);
  assert.strictEqual(await lock.release(), false);
});

test('a run() scope that ends still holding: warned, no longer renewed', { timeout: 20000 }, async () => {
  const outer = client.lock(uniqueName('scope'), { ttl: 30 });
  const inner = client.lock(uniqueName('orphan'), { ttl: 1.5 });
  const warnings = [];
  const onWarning = (w) => { if (w.name === 'DsyncWarning') warnings.push(w.message); };
  process.on('warning', onWarning);
  const lost = new Promise((resolve) => inner.once('lost', resolve));
  try {
    await outer.run(async () => {
      assert.ok(await inner.acquire());     // owned by outer's scope, never released
    });
    const why = await lost;
    assert.match(why, /owner/);
    await waitFor(() => warnings.length > 0, 2000);
    assert.match(warnings[0], /ended holding lease/);
    assert.strictEqual(inner.held, false);
    // Not renewed: it lapses at its ttl.
    assert.ok(await waitFor(async () => (await leases(inner.name)) === 0, 5000, 50));
  } finally {
    process.off('warning', onWarning);
  }
});

test('keepAlive: false holds without renewal and reports the lapse', { timeout: 20000 }, async () => {
  const c = new Client({ config: direct });
  try {
    const lock = c.lock(uniqueName('nokeep'), { ttl: 1, keepAlive: false });
    const t0 = performance.now();
    const lost = new Promise((resolve) => lock.once('lost', resolve));
    assert.ok(await lock.acquire());
    assert.strictEqual(c._keeper.loop, null, 'no keeper was started');
    assert.match(await lost, /ttl ran out/);
    const took = performance.now() - t0;
    // Due 0.9 s after the grant was sent (a margin of ttl/10 before its
    // expiry); timers can be late on a loaded machine, never early.
    assert.ok(took >= 850 && took < 1500, `declared after ${took} ms`);
    assert.strictEqual(await lock.release(), false);
  } finally {
    await c.close();
  }
});

test('an AbortSignal ends a blocking acquire and leaves no waiter in the server', { timeout: 20000 }, async () => {
  const name = uniqueName('abort');
  const holder = client.lock(name, { ttl: 30 });
  assert.ok(await holder.acquire());
  const waiter = client.lock(name, { ttl: 30 });
  const ac = new AbortController();
  const pending = waiter.acquire({ signal: ac.signal });
  assert.ok(await waitFor(async () => (await adminQuery('SELECT count(*)::int AS n FROM dsync_waiters WHERE name = $1', [name]))[0].n === 1, 5000));
  const t0 = performance.now();
  ac.abort();
  await assert.rejects(pending, (e) => e.name === 'AbortError');
  console.log(`aborted wait ended in ${(performance.now() - t0).toFixed(1)} ms`);
  assert.ok(await waitFor(async () => (await adminQuery('SELECT count(*)::int AS n FROM dsync_waiters WHERE name = $1', [name]))[0].n === 0, 2000));
  assert.strictEqual(waiter.held, false);
  await holder.release();
  assert.ok(await waiter.acquire({ blocking: false }), 'the waiter holds nothing and can take it');
  await waiter.release();
});

test('closing a client gives back what it holds and tells the owners', { timeout: 20000 }, async () => {
  const c = new Client({ config: direct });
  const names = [uniqueName('close'), uniqueName('close')];
  const locks = names.map((n) => c.lock(n, { ttl: 30 }));
  const reasons = [];
  for (const l of locks) {
    l.on('lost', (why) => reasons.push(why));
    assert.ok(await l.acquire());
  }
  await c.close();
  assert.deepStrictEqual(reasons, ['the client was closed', 'the client was closed']);
  for (const n of names) assert.strictEqual(await leases(n), 0);
  assert.strictEqual(locks[0].lost, true);
  assert.strictEqual(await locks[0].release(), false, 'releasing after close() says it was not kept');
  await assert.rejects(locks[1].acquire(), /closed/);
});

test('a process with nothing held exits by itself; one holding a lease stays', { timeout: 30000 }, async () => {
  const { spawn } = require('node:child_process');
  const path = require('node:path');
  const script = (hold) => `
    const { Lock, withLock } = require(${JSON.stringify(path.join(__dirname, '..'))});
    const config = ${JSON.stringify(direct)};
    (async () => {
      await withLock(${JSON.stringify(uniqueName('exit'))}, async () => {}, { config, ttl: 3 });
      const lock = new Lock(${JSON.stringify(uniqueName('exit'))}, { config, ttl: 3 });
      await lock.acquire();
      ${hold ? '' : 'await lock.release();'}
      console.log('done');
    })();`;
  const run = (hold) => new Promise((resolve) => {
    const p = spawn(process.execPath, ['-e', script(hold)], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    p.stdout.on('data', (d) => { out += d; });
    const t0 = Date.now();
    const timer = setTimeout(() => { p.kill('SIGKILL'); resolve({ exited: false, out }); }, 6000);
    p.on('exit', () => { clearTimeout(timer); resolve({ exited: true, out, ms: Date.now() - t0 }); });
  });
  const idle = await run(false);
  assert.strictEqual(idle.out.trim(), 'done');
  assert.strictEqual(idle.exited, true, 'the process exits once nothing is held');
  const holding = await run(true);
  assert.strictEqual(holding.out.trim(), 'done');
  assert.strictEqual(holding.exited, false, 'a held lease keeps the process alive (its keeper renews it)');
});

test('lock.holder is the calling owner\'s holder name: holder#2 for a second owner of a shared read lock', { timeout: 20000 }, async () => {
  const lock = client.readLock(uniqueName('holder'), { ttl: 10, holder: 'h-own' });
  assert.strictEqual(lock.holder, 'h-own');
  let open;
  const gate = new Promise((resolve) => { open = resolve; });
  let entered;
  const firstIn = new Promise((resolve) => { entered = resolve; });
  const first = lock.run(async () => { entered(lock.holder); await gate; });
  assert.strictEqual(await firstIn, 'h-own');
  await lock.run(async () => {
    assert.strictEqual(lock.holder, 'h-own#2');
    assert.strictEqual(lock.holder, lock.hold.holder);
    const rows = await adminQuery('SELECT holder FROM dsync_leases WHERE lease = $1 ORDER BY holder', [lock.name]);
    assert.deepStrictEqual(rows.map((r) => r.holder), ['h-own', 'h-own#2']);
  });
  open();
  await first;
  assert.strictEqual(lock.holder, 'h-own');
});
