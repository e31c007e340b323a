'use strict';
// One Client holding 1,000 leases, and a keeper that cannot connect.
// Each test runs as a role of its own, so connections counted or limited
// by role are only its own (test files may run side by side).
const { test } = require('node:test');
const assert = require('node:assert');
const pg = require('pg');
const { Client, KeeperUnavailable, DsyncConnectionError } = require('..');
const { adminApp, uniqueName, adminQuery, ownRole, connectionsOf, sleep, waitFor } = require('./helpers');

test('1,000 leases held by one Client: at most 4 connections, kept for 3 ttls, losses heard within 100 ms', { timeout: 120000 }, async () => {
  const cfg = await ownRole('dsync_t1000');
  const client = new Client({ config: cfg });
  const prefix = uniqueName('thousand');
  const ttl = 1.5;
  const locks = Array.from({ length: 1000 }, (_, i) => client.lock(`${prefix}-${i}`, { ttl }));
  const lostAt = new Map();
  for (const l of locks) l.on('lost', () => lostAt.set(l, performance.now()));
  const held = async () => (await adminQuery('SELECT count(*)::int AS n FROM dsync_leases WHERE lease LIKE $1', [`${prefix}-%`]))[0].n;
  const admin = new pg.Client(adminApp);
  await admin.connect();
  try {
    const t0 = performance.now();
    for (let i = 0; i < locks.length; i += 50) {
      const got = await Promise.all(locks.slice(i, i + 50).map((l) => l.acquire({ blocking: false })));
      assert.ok(got.every((x) => x === true));
    }
    console.log(`1,000 leases acquired in ${(performance.now() - t0).toFixed(0)} ms`);
    const connsAfterAcquire = await connectionsOf(cfg.role);
    await sleep(3 * ttl * 1000);
    const connsAfter3Ttls = await connectionsOf(cfg.role);
    const stillHeld = await held();
    console.log(`connections of the client's role: ${connsAfterAcquire} after acquiring, ${connsAfter3Ttls} after 3 ttls; `
      + `${stillHeld} of 1,000 leases held after 3 ttls (ttl ${ttl} s), ${lostAt.size} reported lost`);
    assert.ok(connsAfterAcquire <= 4, `${connsAfterAcquire} connections`);
    assert.ok(connsAfter3Ttls <= 4, `${connsAfter3Ttls} connections`);
    assert.strictEqual(stillHeld, 1000);
    assert.strictEqual(lostAt.size, 0);
    assert.ok(locks.every((l) => l.held));

    const victims = [7, 250, 499, 731, 998].map((i) => locks[i]);
    const delays = [];
    for (const l of victims) {
      const lost = new Promise((resolve) => l.once('lost', resolve));
      await admin.query('SELECT dsync_force_release($1)', [l.name]);
      const returned = performance.now();
      const why = await Promise.race([lost, sleep(2000).then(() => null)]);
      assert.match(String(why), /released/);
      delays.push(Math.max(0, lostAt.get(l) - returned));
    }
    console.log(`5 force-released leases reported lost ${delays.map((d) => d.toFixed(1)).join(', ')} ms after dsync_force_release returned`);
    for (const d of delays) assert.ok(d <= 100, `${d} ms`);
    await sleep(2 * ttl * 1000);
    assert.strictEqual(lostAt.size, 5, 'the other 995 were not reported lost');
    assert.strictEqual(locks.filter((l) => l.held).length, 995);
    assert.strictEqual(await held(), 995);
  } finally {
    await admin.end();
    await client.close();
  }
  assert.strictEqual(await held(), 0, 'close() gave every lease back');
  assert.ok(await waitFor(async () => (await connectionsOf(cfg.role)) === 0, 5000, 50), 'no connection left');
});

test('a keeper that cannot connect: acquire rejects with KeeperUnavailable and nothing stays held', { timeout: 30000 }, async () => {
  const cfg = await ownRole('dsync_tlimit');
  const client = new Client({ config: cfg, poolSize: 1 });
  const name = uniqueName('nokeeper');
  try {
    assert.strictEqual(await client.lock(uniqueName('warm')).locked(), false);   // opens the pool's one connection
    assert.strictEqual(await connectionsOf(cfg.role), 1);
    await adminQuery(`ALTER ROLE ${cfg.role} CONNECTION LIMIT 1`);
    const lock = client.lock(name, { ttl: 3 });
    const t0 = performance.now();
    let error = null;
    await lock.acquire().catch((e) => { error = e; });
    const took = performance.now() - t0;
    console.log(`KeeperUnavailable after ${took.toFixed(0)} ms (ttl 3 s): ${error && error.message}; cause: ${error && error.cause && error.cause.message}`);
    assert.ok(error instanceof KeeperUnavailable, String(error));
    assert.ok(error instanceof DsyncConnectionError);
    assert.strictEqual(error.cause && error.cause.code, '53300', 'the keeper was refused: too many connections for the role');
    assert.ok(took >= 900 && took < 3000, `${took} ms`);
    assert.strictEqual(lock.held, false);
    assert.strictEqual(lock.token, null);
    const rows = await adminQuery('SELECT count(*)::int AS n FROM dsync_leases WHERE lease = $1', [name]);
    assert.strictEqual(rows[0].n, 0, 'the lease is not held on the server');
    // It was granted, then given back.
    const events = await adminQuery("SELECT payload->>'event' AS e FROM dsync_events_since(0, ARRAY[$1]) ORDER BY seq", [name]);
    assert.deepStrictEqual(events.map((r) => r.e), ['acquired', 'released']);
  } finally {
    await adminQuery(`ALTER ROLE ${cfg.role} CONNECTION LIMIT -1`);
  }
  try {
    // Once the keeper can connect, the same client holds.
    const lock = client.lock(name, { ttl: 3 });
    assert.ok(await lock.acquire());
    await lock.release();
  } finally {
    await client.close();
  }
});
