'use strict';
// A Client through PgBouncer in transaction mode: no LISTEN there, so a
// loss is noticed at the next renewal; everything else works as direct.
const { test, after } = require('node:test');
const assert = require('node:assert');
const { Client, KeeperUnavailable } = require('..');
const { bouncer, uniqueName, adminQuery, sleep } = require('./helpers');

const client = new Client({ config: bouncer });
after(() => client.close());

test('lock cycle through PgBouncer', { timeout: 20000 }, async () => {
  const name = uniqueName('bcycle');
  const a = client.lock(name, { ttl: 30 });
  const b = client.lock(name, { ttl: 30 });
  assert.ok(await a.acquire({ blocking: false }));
  assert.strictEqual(typeof a.token, 'bigint');
  assert.ok(await a.owned());
  assert.strictEqual(await b.acquire({ blocking: false }), false);
  const waiting = b.acquire({ timeout: 10 });
  await sleep(200);
  assert.strictEqual(await a.release(), true);
  assert.strictEqual(await waiting, true);
  assert.ok(b.token > 0n);
  assert.strictEqual(await b.release(), true);
  assert.strictEqual(client._keeper.ledger.listenOk, false, 'the keeper knows it cannot LISTEN here');
  await client.lock(name).run(async (l) => { assert.ok(await l.owned()); });
});

test('semaphore create and attach through PgBouncer', { timeout: 20000 }, async () => {
  const name = uniqueName('bsem');
  const sem = await client.semaphore(name, 2, { ttl: 30 });
  const attached = await client.semaphore(name, undefined, { ttl: 30, timeout: 0 });
  assert.strictEqual(attached.permits, 2);
  let inside = 0;
  let most = 0;
  await Promise.all(Array.from({ length: 5 }, (_, i) => (i % 2 ? sem : attached).run(async () => {
    inside += 1;
    most = Math.max(most, inside);
    await sleep(50);
    inside -= 1;
  })));
  assert.strictEqual(most, 2);
});

test('event through PgBouncer', { timeout: 20000 }, async () => {
  const ev = client.event(uniqueName('bevent'));
  const waiter = ev.wait(10);
  await sleep(200);
  await ev.set();
  assert.strictEqual(await waiter, true);
  assert.strictEqual(await ev.wait(0.1), false);
  await ev.set();
  assert.strictEqual(await ev.isSet(), true);
  assert.strictEqual(await ev.clear(), 1);
});

test('through PgBouncer a loss is noticed at the next renewal', { timeout: 20000 }, async () => {
  const name = uniqueName('bloss');
  const lock = client.lock(name, { ttl: 1.5 });
  assert.ok(await lock.acquire());
  await sleep(100);
  const lost = new Promise((resolve) => lock.once('lost', resolve));
  const t0 = performance.now();
  await adminQuery('SELECT dsync_force_release($1)', [name]);
  const why = await lost;
  const took = performance.now() - t0;
  console.log(`node lost-lease notice through PgBouncer: ${took.toFixed(0)} ms (ttl 1.5 s, renewal every 0.5 s)`);
  assert.match(why, /renewal/);
  assert.ok(took <= 1000, `${took} ms`);
  assert.strictEqual(await lock.release(), false);
});

test('listen: true through PgBouncer: the keeper refuses, the acquire gives the lease back', { timeout: 20000 }, async () => {
  const strict = new Client({ config: bouncer, listen: true });
  try {
    const name = uniqueName('blisten');
    const e = await strict.lock(name, { ttl: 3 }).acquire().catch((x) => x);
    assert.ok(e instanceof KeeperUnavailable, String(e));
    assert.strictEqual(e.cause.name, 'ListenUnavailable');
    assert.strictEqual((await adminQuery('SELECT count(*)::int AS n FROM dsync_leases WHERE lease = $1', [name]))[0].n, 0);
  } finally {
    await strict.close();
  }
});
