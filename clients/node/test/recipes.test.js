'use strict';
// Event, Semaphore.create/attach, the error hierarchy, and channel names
// computed on the client as the server computes them.
const { test, after } = require('node:test');
const assert = require('node:assert');
const {
  Client, Event, Semaphore, channelOf, DsyncError, AcquireTimeout, LockLost, NotHeld, SemaphoreMismatch,
  SemaphoreNotFound, DsyncConnectionError, KeeperUnavailable, ListenUnavailable, ServerError, InvalidArgument,
  closeDefaultClients,
} = require('..');
const { fromPg } = require('../errors');
const { direct, uniqueName, adminQuery, sleep } = require('./helpers');

const client = new Client({ config: direct });
after(async () => {
  await client.close();
  await closeDefaultClients();
});

test('Event: each set() wakes exactly one wait()', { timeout: 20000 }, async () => {
  const name = uniqueName('event');
  const ev = client.event(name);
  assert.strictEqual(await ev.isSet(), false);
  assert.strictEqual(await ev.wait(0), false);
  assert.strictEqual(await ev.wait(0.2), false);
  await ev.set();
  await ev.set();
  assert.strictEqual(await ev.isSet(), true);
  assert.strictEqual(await ev.wait(0), true);
  assert.strictEqual(await ev.clear(), 1);
  assert.strictEqual(await ev.isSet(), false);

  // Two waiters in the server, woken one per signal (another client sets).
  const other = new Event(name, { config: direct });
  const woken = [];
  const waits = [0, 1].map((i) => ev.wait(10).then((got) => { woken.push([i, got]); }));
  await sleep(300);
  const t0 = performance.now();
  await other.set();
  for (let i = 0; i < 100 && woken.length < 1; i++) await sleep(10);
  console.log(`event wait woken ${(performance.now() - t0).toFixed(1)} ms after set()`);
  assert.strictEqual(woken.length, 1, 'one signal wakes one waiter');
  await other.set();
  await Promise.all(waits);
  assert.deepStrictEqual(woken.map((w) => w[1]), [true, true]);
  assert.strictEqual(await ev.isSet(), false);
});

test('Semaphore.create, attach and getCount', { timeout: 20000 }, async () => {
  const name = uniqueName('semc');
  await assert.rejects(Semaphore.attach(name, { client, timeout: 0 }), SemaphoreNotFound);
  const attaching = client.semaphore(name, undefined, { timeout: 10, ttl: 10 });
  await sleep(200);
  const created = await Semaphore.create(name, 3, { client, ttl: 10 });
  assert.strictEqual(created.permits, 3);
  const attached = await attaching;
  assert.ok(attached instanceof Semaphore);
  assert.strictEqual(attached.permits, 3);
  assert.strictEqual(await attached.getCount(), 3);
  assert.strictEqual(await (await client.semaphore(name, 3)).getCount(), 3, 'create is idempotent');
  const mismatch = await Semaphore.create(name, 4, { client }).catch((e) => e);
  assert.ok(mismatch instanceof SemaphoreMismatch);
  assert.ok(mismatch instanceof DsyncError);
  assert.strictEqual(mismatch.code, '42710');
  assert.strictEqual(mismatch.cause.code, '42710');
  // The constructor defines it at the first acquire: a mismatch shows there.
  const late = new Semaphore(name, 5, { client });
  await assert.rejects(late.acquire({ blocking: false }), SemaphoreMismatch);
  // An attached semaphore takes permits like a created one.
  const held = [];
  for (let i = 0; i < 3; i++) {
    const s = await client.semaphore(name);
    assert.ok(await s.acquire({ blocking: false }));
    held.push(s);
  }
  assert.strictEqual(await attached.acquire({ blocking: false }), false);
  for (const s of held) await s.release();
  assert.throws(() => new Semaphore(name, 0, { client }), RangeError);
});

test('attach before extension 1.5 (no dsync_semaphores) says which version it needs', { timeout: 10000 }, async () => {
  const old = new Client({ config: direct });
  try {
    // What a 1.4 server answers: relation "dsync_semaphores" does not exist.
    old._value = async () => { throw new ServerError('reading semaphore: relation does not exist', { code: '42P01' }); };
    const e = await Semaphore.attach(uniqueName('old'), { client: old, timeout: 0 }).catch((x) => x);
    assert.ok(e instanceof DsyncError);
    assert.match(e.message, /version 1\.5/);
    assert.strictEqual(e.code, '42P01');
  } finally {
    await old.close();
  }
});

test('the error hierarchy, each with the pg error as cause and the SQLSTATE as code', { timeout: 20000 }, async () => {
  assert.ok(new AcquireTimeout('x') instanceof DsyncError);
  assert.ok(new LockLost('x') instanceof DsyncError);
  assert.ok(new NotHeld('x') instanceof DsyncError);
  assert.ok(new SemaphoreNotFound('x') instanceof DsyncError);
  assert.ok(new KeeperUnavailable('x') instanceof DsyncConnectionError);
  assert.ok(new DsyncConnectionError('x') instanceof DsyncError);
  assert.ok(new ListenUnavailable('x') instanceof DsyncError);
  assert.ok(new InvalidArgument('x') instanceof ServerError);
  assert.ok(new ServerError('x') instanceof DsyncError);
  assert.strictEqual(new LockLost('x').name, 'LockLost');
  const pgError = (code, message) => Object.assign(new Error(message), { code, severity: 'ERROR' });
  const cases = [['22023', InvalidArgument], ['42710', SemaphoreMismatch], ['55000', NotHeld], ['57P01', DsyncConnectionError],
    ['08006', DsyncConnectionError], ['XX000', ServerError], ['ECONNRESET', DsyncConnectionError]];
  for (const [code, Cls] of cases) {
    const cause = pgError(code, `boom ${code}\nDETAIL: more`);
    const e = fromPg(cause, 'doing it');
    assert.ok(e instanceof Cls, `${code} -> ${e.name}`);
    assert.strictEqual(e.code, code);
    assert.strictEqual(e.cause, cause);
    assert.strictEqual(e.message, `doing it: boom ${code}`);
  }
  const bug = new TypeError('not ours');
  assert.strictEqual(fromPg(bug, 'x'), bug, "a caller's bug is passed on as it is");

  // From the server: a class 22 error.
  const err = await client._query('SELECT dsync_acquire($1::text, $2::text, $3::interval)', ['x', 'h', '-1 seconds'], 'acquiring "x"').catch((e) => e);
  assert.ok(err instanceof InvalidArgument, String(err));
  assert.ok(err.code.startsWith('22'));
  assert.strictEqual(err.cause.code, err.code);
  // A guard of a lease held here but lost on the server: NotHeld with 55000.
  const pg = require('pg');
  const c = new pg.Client(direct);
  await c.connect();
  const lost = client.lock(uniqueName('noguard'));
  try {
    assert.ok(await lost.acquire({ blocking: false }));
    await adminQuery('SELECT dsync_force_release($1)', [lost.name]);
    const e = await lost.guard(c).catch((x) => x);
    assert.ok(e instanceof NotHeld);
    assert.strictEqual(e.code, '55000');
  } finally {
    await lost.release().catch(() => {});
    await c.end();
  }
  // Arguments are checked at the caller's line.
  assert.throws(() => client.lock(''), RangeError);
  assert.throws(() => client.lock('x'.repeat(256)), RangeError);
  assert.throws(() => client.lock('x', { ttl: 0 }), RangeError);
  assert.throws(() => client.lock('x', { ttl: '3' }), TypeError);
  assert.throws(() => client.lock('x', { config: direct }), TypeError, 'client and settings together');
  assert.throws(() => new Client({}), TypeError);
});

test('channel names are computed as dsync_channel() computes them', { timeout: 20000 }, async () => {
  const names = ['a', 'billing', 'x'.repeat(57), 'x'.repeat(58), 'y'.repeat(255), 'é'.repeat(28), 'é'.repeat(29),
    'ключ-блокировки', 'with "quotes" and spaces', '日本語の名前'.repeat(4)];
  const rows = await adminQuery('SELECT n, dsync_channel(n) AS ch FROM unnest($1::text[]) WITH ORDINALITY AS u(n, i) ORDER BY i', [names]);
  for (const r of rows) assert.strictEqual(channelOf(r.n), r.ch, r.n);
});
