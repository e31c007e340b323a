'use strict';
// LeaderElection's getters never wait; leader() and members() ask.
const { test, after } = require('node:test');
const assert = require('node:assert');
const { Client, DsyncConnectionError, LeaderElection } = require('..');
const { direct, uniqueName, adminQuery, waitFor } = require('./helpers');

const client = new Client({ config: direct });
after(() => client.close());

test('leaderExists and status answer at once while a follower waits in the server', { timeout: 30000 }, async () => {
  const group = uniqueName('getters');
  const a = client.election(group, { ttl: 6, member: 'a', info: { role: 'first' } });
  const b = client.election(group, { ttl: 6, member: 'b' });
  assert.strictEqual(b.leaderExists, false, 'nothing seen before the campaign');
  assert.deepStrictEqual(b.status, {
    group, member: 'b', running: false, isLeader: false, leader: null, leaderExists: false, token: null, seenAt: null,
  });
  const elected = new Promise((resolve) => a.once('elected', resolve));
  a.start();
  const token = await elected;
  assert.strictEqual(typeof token, 'bigint');
  assert.strictEqual(a.isLeader, true);
  assert.strictEqual(a.token, token);
  b.start();
  try {
    // The follower's campaign is waiting inside the server for the lease.
    assert.ok(await waitFor(async () => (await adminQuery('SELECT count(*)::int AS n FROM dsync_waiters WHERE name = $1', [group]))[0].n === 1, 5000));
    const t0 = performance.now();
    const exists = b.leaderExists;
    const status = b.status;
    const took = performance.now() - t0;
    console.log(`leaderExists and status answered in ${(took * 1000).toFixed(0)} us while the campaign waits in the server`);
    assert.ok(took < 5, `${took} ms`);
    assert.strictEqual(exists, true);
    assert.strictEqual(status.isLeader, false);
    assert.strictEqual(status.leader, 'a');
    assert.strictEqual(status.leaderExists, true);
    assert.strictEqual(status.running, true);
    assert.strictEqual(status.token, null);
    assert.strictEqual(typeof status.seenAt, 'number');
    // Getters, not methods: `if (e.leaderExists)` is right.
    for (const p of ['isLeader', 'leaderExists', 'status', 'token']) {
      assert.strictEqual(typeof Object.getOwnPropertyDescriptor(LeaderElection.prototype, p).get, 'function', p);
    }
    assert.deepStrictEqual(a.status, {
      group, member: 'a', running: true, isLeader: true, leader: 'a', leaderExists: true, token, seenAt: a.status.seenAt,
    });
    assert.strictEqual(await b.leader(), 'a');
    const members = await b.members();
    assert.deepStrictEqual(members.map((m) => [m.member, m.isLeader]), [['a', true], ['b', false]]);
    assert.deepStrictEqual(members[0].info, { role: 'first' });
    assert.ok(members[0].expiresAt instanceof Date);

    // The leader steps down: the follower is elected, and its getters say so.
    const bElected = new Promise((resolve) => b.once('elected', resolve));
    const lost = new Promise((resolve) => a.once('lost', resolve));
    await a.stop();
    assert.strictEqual(await lost, 'stopped');
    assert.strictEqual(a.isLeader, false);
    assert.strictEqual(a.running, false);
    await bElected;
    assert.strictEqual(b.isLeader, true);
    assert.strictEqual(b.status.leader, 'b');
    assert.ok(b.token > token);
  } finally {
    await a.stop();
    await b.stop();
  }
  assert.strictEqual((await adminQuery('SELECT count(*)::int AS n FROM dsync_members($1)', [group]))[0].n, 0, 'both left');
  assert.strictEqual((await adminQuery('SELECT count(*)::int AS n FROM dsync_waiters WHERE name = $1', [group]))[0].n, 0);
});

test('stop() ends a waiting campaign at once', { timeout: 20000 }, async () => {
  const group = uniqueName('stopwait');
  const a = client.election(group, { ttl: 15, member: 'a' });
  const b = client.election(group, { ttl: 15, member: 'b' });
  a.start();
  await waitFor(() => a.isLeader, 5000);
  b.start();
  await waitFor(async () => (await adminQuery('SELECT count(*)::int AS n FROM dsync_waiters WHERE name = $1', [group]))[0].n === 1, 5000);
  const t0 = performance.now();
  await b.stop();
  const took = performance.now() - t0;
  console.log(`a follower's stop() took ${took.toFixed(1)} ms (its wait slice is up to 5 s)`);
  assert.ok(took < 1000, `${took} ms`);
  assert.strictEqual(a.isLeader, true);
  await a.stop();
});

test('closing the client stops its elections and gives the lease back', { timeout: 20000 }, async () => {
  const c = new Client({ config: direct });
  const group = uniqueName('closeelect');
  const e = c.election(group, { ttl: 6, member: 'm' });
  const calls = [];
  e.on('elected', () => calls.push('+'));
  e.on('lost', (why) => calls.push(`-${why}`));
  e.start();
  await waitFor(() => e.isLeader, 5000);
  await c.close();
  assert.deepStrictEqual(calls, ['+', '-stopped']);
  assert.strictEqual((await adminQuery('SELECT dsync_leader($1) AS v', [group]))[0].v, null);
});

// A campaign whose wait in the server is cancelled (pg_cancel_backend,
// statement_timeout: 57014) retries with a pause, reporting each failure
// through 'retry', and leads once the leader goes; it used to stop for good.
test('a campaign survives cancelled waits', { timeout: 40000 }, async () => {
  const group = uniqueName('cancelled');
  const holder = client.lock(group, { ttl: 30, holder: 'other' });
  assert.ok(await holder.acquire());
  const seen = [];
  // Waiting in a backend (queue: false): the waits cancelled here.
  const waitClient = new Client({ config: direct, queue: false });
  const e = waitClient.election(group, { ttl: 3, member: 'm' });
  e.on('retry', (err, pause) => seen.push([err.code, pause]));
  const slowClient = new Client({ config: { ...direct, options: '-c statement_timeout=200' }, queue: false });
  const slow = slowClient.election(group, { ttl: 3, member: 's' });
  let slowRetries = 0;
  slow.on('retry', () => { slowRetries += 1; });
  e.start();
  slow.start();
  try {
    let cancelled = 0;
    const until = performance.now() + 20000;
    while (cancelled < 3 && performance.now() < until) {
      const rows = await adminQuery("SELECT count(pg_cancel_backend(pid))::int AS n FROM pg_stat_activity WHERE usename = 'app'"
        + " AND state = 'active' AND query LIKE '%dsync_acquire%' AND pid <> pg_backend_pid()");
      cancelled += rows[0].n;
      await new Promise((r) => setTimeout(r, 300));
    }
    assert.ok(cancelled >= 3, `cancelled ${cancelled}`);
    assert.ok(await waitFor(() => seen.some(([code]) => code === '57014'), 5000), JSON.stringify(seen));
    assert.ok(seen.every(([, pause]) => pause > 0 && pause <= 1000), JSON.stringify(seen));
    assert.ok(await waitFor(() => slowRetries >= 3, 10000), `${slowRetries}`);
    assert.strictEqual(slow.lastError.code, '57014');
    assert.ok(e.running && slow.running);
    assert.strictEqual(await holder.release(), true);
    assert.ok(await waitFor(() => e.isLeader || slow.isLeader, 10000));
    await e.stop();
    assert.strictEqual(e.error, null);
    assert.ok(await waitFor(() => slow.isLeader, 10000));
  } finally {
    await e.stop();
    await slow.stop();
    await slowClient.close();
    await waitClient.close();
  }
});

// grelmicro's users wait for the first campaign before they read
// isLeader: ready turns true once the first attempt is made (won, or the
// lease found held), and waitReady() resolves then; it resolves false for
// a campaign that is not running.  ping() connects at once.
test('ready and waitReady() after the first attempt; ping()', { timeout: 30000 }, async () => {
  const group = uniqueName('ready');
  const first = client.election(group, { ttl: 15, member: 'first' });
  const second = client.election(group, { ttl: 15, member: 'second' });
  assert.strictEqual(first.ready, false);
  assert.strictEqual(await first.waitReady({ timeout: 1 }), false);     // not running
  first.start();
  assert.strictEqual(await first.waitReady({ timeout: 10 }), true);
  assert.ok(first.isLeader);
  second.start();
  assert.strictEqual(await second.waitReady({ timeout: 10 }), true);  // found it held, no wait
  assert.strictEqual(second.ready, true);
  assert.strictEqual(second.isLeader, false);
  assert.strictEqual(second.leaderExists, true);
  await second.stop();
  assert.strictEqual(second.ready, false);
  await first.stop();
  await client.ping();
  const wrong = new Client({ config: { ...direct, port: 1, host: '127.0.0.1' } });
  await assert.rejects(wrong.ping(), (e) => e instanceof DsyncConnectionError);
  await wrong.close();
});
