'use strict';
// Blocking acquires wait in the line without a connection (dsync_queue):
// a thousand waits in one process cost a few server connections, the line
// is first come, first served across clients, and a timeout or an abort
// leaves nothing queued (all checked on the server).
const { test } = require('node:test');
const assert = require('node:assert');
const { Client } = require('..');
const { direct, uniqueName, adminQuery, ownRole, connectionsOf, waitFor } = require('./helpers');

const queued = async (name, like = false) => (await adminQuery(
  `SELECT count(*)::int AS n FROM dsync_waiters WHERE name ${like ? 'LIKE' : '='} $1 AND kind = 'queued'`,
  [name]))[0].n;

test('1,000 waits on one name, and on 1,000 names, through one Client: at most 4 connections', { timeout: 180000 }, async () => {
  const owner = new Client({ config: direct });
  const cfg = await ownRole('dsync_tq');
  const client = new Client({ config: cfg });
  try {
    // One name.
    const name = uniqueName('q1000');
    const h = owner.lock(name, { ttl: 30 });
    assert.strictEqual(await h.acquire(), true);
    const lock = client.lock(name, { ttl: 30 });
    let done = 0;
    const runs = Array.from({ length: 1000 }, () => lock.run(async () => { done += 1; }, { timeout: 120 }));
    assert.strictEqual(await waitFor(async () => (await queued(name)) === 1000, 60000, 100), true);
    const one = await connectionsOf(cfg.role);
    console.log(`1,000 waits queued on one name: ${one} server connections`);
    assert.ok(one <= 4, `${one} connections`);
    await h.release();
    await Promise.all(runs);
    assert.strictEqual(done, 1000);
    assert.strictEqual(await queued(name), 0);

    // A thousand names.
    const prefix = uniqueName('qn');
    const held = Array.from({ length: 1000 }, (_, i) => owner.lock(`${prefix}/${i}`, { ttl: 60 }));
    for (let i = 0; i < held.length; i += 50) {
      const got = await Promise.all(held.slice(i, i + 50).map((l) => l.acquire({ blocking: false })));
      assert.ok(got.every((x) => x === true));
    }
    const many = held.map((l) => client.lock(l.name, { ttl: 30 }).run(async () => 1, { timeout: 120 }));
    assert.strictEqual(await waitFor(async () => (await queued(`${prefix}/%`, true)) === 1000, 60000, 100), true);
    const conns = await connectionsOf(cfg.role);
    console.log(`1,000 waits queued on 1,000 names: ${conns} server connections`);
    assert.ok(conns <= 4, `${conns} connections`);
    await Promise.all(held.map((l) => l.release()));
    assert.strictEqual((await Promise.all(many)).length, 1000);
    assert.strictEqual(await queued(`${prefix}/%`, true), 0);
  } finally {
    await client.close();
    await owner.close();
  }
});

test('first come, first served across clients', { timeout: 60000 }, async () => {
  const name = uniqueName('qfifo');
  const owner = new Client({ config: direct });
  const clients = [new Client({ config: direct }), new Client({ config: direct })];
  try {
    const h = owner.lock(name, { ttl: 30 });
    assert.strictEqual(await h.acquire(), true);
    const order = [];
    const runs = [];
    for (const [i, who] of ['a1', 'b1', 'a2', 'b2', 'a3'].entries()) {
      const lock = clients[who[0] === 'a' ? 0 : 1].lock(name, { ttl: 30 });
      runs.push(lock.run(async () => { order.push(who); }, { timeout: 30 }));
      assert.strictEqual(await waitFor(async () => (await queued(name)) === i + 1, 10000), true);
    }
    await h.release();
    await Promise.all(runs);
    assert.deepStrictEqual(order, ['a1', 'b1', 'a2', 'b2', 'a3']);
  } finally {
    for (const c of [owner, ...clients]) await c.close();
  }
});

test('a timeout or an abort leaves nothing queued', { timeout: 60000 }, async () => {
  const name = uniqueName('qgone');
  const owner = new Client({ config: direct });
  const client = new Client({ config: direct });
  try {
    const h = owner.lock(name, { ttl: 30 });
    assert.strictEqual(await h.acquire(), true);
    const lock = client.lock(name, { ttl: 30 });
    assert.strictEqual(await lock.acquire({ timeout: 1 }), false);
    assert.strictEqual(await queued(name), 0);
    const ac = new AbortController();
    const p = lock.acquire({ signal: ac.signal });
    assert.strictEqual(await waitFor(async () => (await queued(name)) === 1, 10000), true);
    ac.abort();
    await assert.rejects(p);
    assert.strictEqual(await waitFor(async () => (await queued(name)) === 0, 5000), true);
    // The next one still gets it at the release.
    const next = client.lock(name, { ttl: 30 });
    const got = next.acquire({ timeout: 10 });
    await h.release();
    assert.strictEqual(await got, true);
    await next.release();
  } finally {
    await client.close();
    await owner.close();
  }
});
