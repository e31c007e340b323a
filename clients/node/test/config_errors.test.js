'use strict';
// Installation mistakes said as such (issue 43): a database without
// CREATE EXTENSION dsync, a server that does not preload dsync, and a
// keeper that meets either says so once, not at every retry.
const { test, after } = require('node:test');
const assert = require('node:assert');
const {
  Client, Lock, Event, ExtensionNotCreated, NotPreloaded, NotHeld, DsyncError, translateError,
} = require('..');
const { direct, admin, uniqueName, adminQuery, waitFor, sleep } = require('./helpers');
const { performance } = require('node:perf_hooks');
const net = require('node:net');
const { config, query } = require('./dsn');

const unpreloaded = process.env.DSYNC_UNPRELOADED_DSN ? config(process.env.DSYNC_UNPRELOADED_DSN) : null;
const made = [];

// A database of the test's own, owned by the app role, with the extension
// created in it or not.
async function ownDatabase(prefix, withExtension) {
  const db = uniqueName(prefix).replace(/[^a-z0-9_]/g, '_');
  await adminQuery(`CREATE DATABASE ${db} OWNER ${direct.user}`);
  made.push(db);
  if (withExtension) await query({ ...admin, database: db }, 'CREATE EXTENSION dsync');
  return db;
}

after(async () => {
  for (const db of made) await adminQuery(`DROP DATABASE IF EXISTS ${db} WITH (FORCE)`).catch(() => {});
});

test('every call in a database without CREATE EXTENSION raises ExtensionNotCreated naming it', { timeout: 20000 }, async () => {
  const db = await ownDatabase('noext', false);
  const client = new Client({ config: { ...direct, database: db } });
  try {
    const lock = new Lock('x', { client });
    for (const call of [() => lock.acquire({ blocking: false }), () => lock.locked(), () => new Event('e', { client }).set()]) {
      const e = await call().then(() => null, (err) => err);
      assert.ok(e instanceof ExtensionNotCreated, `${e && e.stack}`);
      assert.ok(e instanceof DsyncError);
      assert.match(e.message, new RegExp(`not created in database "${db}"`));
      assert.match(e.message, /dsync_\w+/);
      assert.match(e.hint, new RegExp(`run CREATE EXTENSION dsync in database "${db}"`));
      assert.strictEqual(e.code, e.cause.code);
    }
  } finally {
    await client.close();
  }
});

test('a call on a server that does not preload dsync raises NotPreloaded, not NotHeld', { timeout: 20000, skip: unpreloaded ? false : 'DSYNC_UNPRELOADED_DSN is not set (clients/with_server.py sets it)' }, async () => {
  const client = new Client({ config: unpreloaded });
  try {
    const e = await new Lock('x', { client }).acquire({ blocking: false }).then(() => null, (err) => err);
    assert.ok(e instanceof NotPreloaded, `${e && e.stack}`);
    assert.ok(!(e instanceof NotHeld));
    assert.strictEqual(e.code, '55000');
    assert.match(e.message, /dsync is not preloaded by the server of database "app"/);
    assert.match(e.hint, /shared_preload_libraries = 'dsync'.*restart the server/);
  } finally {
    await client.close();
  }
});

test('translateError: the raw driver errors of both mistakes', { timeout: 20000 }, async () => {
  const db = await ownDatabase('noext', false);
  const raw = await query({ ...direct, database: db }, "SELECT dsync_acquire('x', 'h')").then(() => null, (e) => e);
  assert.strictEqual(raw.code, '42883');
  const t = translateError(raw);
  assert.ok(t instanceof ExtensionNotCreated);
  assert.match(t.hint, /CREATE EXTENSION dsync/);
  assert.strictEqual(translateError(new Error('not a database error')), null);
  const other = await query(direct, 'SELECT 1/0').then(() => null, (e) => e);
  assert.strictEqual(translateError(other), null);
  if (unpreloaded) {
    const np = await query(unpreloaded, "SELECT dsync_acquire('x', 'h')").then(() => null, (e) => e);
    assert.ok(translateError(np) instanceof NotPreloaded);
  }
});

test('a keeper whose extension is dropped warns once over several failed attempts, with backoff', { timeout: 40000 }, async () => {
  const db = await ownDatabase('dropped', true);
  const cfg = { ...direct, database: db };
  const warnings = [];
  const onWarning = (w) => { if (w.name === 'DsyncWarning') warnings.push(w.message); };
  process.on('warning', onWarning);
  const client = new Client({ config: cfg });
  try {
    const lock = new Lock(uniqueName('kept'), { client, ttl: 3 });
    lock.on('lost', () => {});
    assert.strictEqual(await lock.acquire({ blocking: false }), true);
    await query({ ...admin, database: db }, 'DROP EXTENSION dsync');
    // Four failures in a row: the renewal's missing function, then each
    // reconnection's missing view, one pause (doubling) between them.
    assert.ok(await waitFor(() => client._keeper.failures >= 4, 30000), `failures: ${client._keeper.failures}`);
    await new Promise((r) => setImmediate(r));
    const said = warnings.filter((m) => /ExtensionNotCreated/.test(m));
    assert.strictEqual(said.length, 1, said.join('\n'));
    assert.match(said[0], new RegExp(`not created in database "${db}"`));
    assert.match(said[0], /hint: run CREATE EXTENSION dsync/);
    // The words of the Python client's KeeperFailures: what failed, how
    // often it is retried at most, when it is said again.
    assert.match(said[0], /^dsync: the keeper failed \(ExtensionNotCreated: .*\); it retries every 2\.0 s at most, and says so again only if the failure changes$/);
    assert.ok(!said[0].includes('\n    at '), 'no stack trace');
    assert.ok(client._keeper.error instanceof ExtensionNotCreated);
  } finally {
    process.off('warning', onWarning);
    await client.close();
  }
});

// The pauses a keeper takes after failed rounds (ms asked, when each began
// and ended), recorded around its _pause.
function recordPauses(keeper) {
  const pauses = [];
  const pause = keeper._pause.bind(keeper);
  keeper._pause = async (ms) => {
    const p = { ms, start: performance.now(), end: null };
    pauses.push(p);
    await pause(ms);
    p.end = performance.now();
  };
  return pauses;
}

// A client holding a lease (ttl 3 s) in a database whose extension was
// then dropped: its keeper fails every round, and keeps trying (to renew
// the lease, then to give it back).
async function failingKeeper(prefix) {
  const db = await ownDatabase(prefix, true);
  const client = new Client({ config: { ...direct, database: db } });
  const lock = new Lock(uniqueName('kept'), { client, ttl: 3 });
  lock.on('lost', () => {});
  assert.strictEqual(await lock.acquire({ blocking: false }), true);
  const pauses = recordPauses(client._keeper);
  await query({ ...admin, database: db }, 'DROP EXTENSION dsync');
  return { client, pauses };
}

test('the keeper pauses after failed rounds from 0.5 s, doubling, at most 2 s (as the Python client)', { timeout: 30000 }, async () => {
  const warnings = [];
  const onWarning = (w) => { if (w.name === 'DsyncWarning') warnings.push(w.message); };
  process.on('warning', onWarning);
  const { client, pauses } = await failingKeeper('backoff');
  try {
    assert.ok(await waitFor(() => pauses.length >= 5, 20000), `pauses: ${pauses.map((p) => p.ms)}`);
    assert.deepStrictEqual(pauses.slice(0, 5).map((p) => p.ms), [500, 1000, 2000, 2000, 2000]);
    for (const p of pauses.slice(0, 4)) assert.ok(p.end - p.start >= p.ms - 20, `a pause of ${p.ms} ms lasted ${p.end - p.start} ms`);
    // Once each failure: the renewal's (a cached plan's relation gone), then the extension's.
    assert.strictEqual(warnings.filter((m) => /keeper failed \(ExtensionNotCreated/.test(m)).length, 1, warnings.join('\n'));
  } finally {
    process.off('warning', onWarning);
    await client.close();
  }
});

test('an acquire waiting for the keeper ends its pause, but the keeper tries at most once per 0.5 s', { timeout: 30000 }, async () => {
  const { client, pauses } = await failingKeeper('hurry');
  try {
    const keeper = client._keeper;
    // Pausing 2 s now, nobody waiting.
    assert.ok(await waitFor(() => pauses.length >= 3, 20000));
    const before = pauses.length;
    // A caller retrying in a tight loop (as acquire does, through ensure).
    const until = performance.now() + 3000;
    let calls = 0;
    while (performance.now() < until) {
      calls += 1;
      assert.strictEqual(await keeper.ensure(5), false);
    }
    const cut = pauses.slice(before - 1, -1).filter((p) => p.end !== null);
    assert.ok(cut.length >= 3, `pauses while waited for: ${cut.length} (${calls} ensure calls)`);
    for (const p of cut) {
      assert.ok(p.end - p.start < 1000, `a ${p.ms} ms pause waited for lasted ${Math.round(p.end - p.start)} ms`);
      assert.ok(p.end - p.start >= 480, `a pause lasted only ${Math.round(p.end - p.start)} ms: a storm of attempts`);
    }
  } finally {
    await client.close();
  }
});

test('close() does not wait for the diagnosis of a failure, nor start one', { timeout: 30000 }, async () => {
  const db = await ownDatabase('closeprobe', false);
  const client = new Client({ config: { ...direct, database: db } });
  const unhandled = [];
  const onUnhandled = (e) => unhandled.push(e);
  process.on('unhandledRejection', onUnhandled);
  try {
    const keeper = client._keeper;
    let asked = 0;
    let askedWhileStopping = 0;
    // A slow pg_extension question (a server slow to answer).
    client._extensionCreated = () => {
      asked += 1;
      if (keeper.stopping) askedWhileStopping += 1;
      return sleep(4000).then(() => false);
    };
    keeper.start();
    assert.ok(await waitFor(() => asked === 1, 10000), 'the keeper asked');
    const t0 = performance.now();
    await client.close();
    const took = performance.now() - t0;
    assert.ok(took < 1000, `close() took ${Math.round(took)} ms`);
    await sleep(4500);
    assert.strictEqual(askedWhileStopping, 0);
    assert.strictEqual(asked, 1);
    assert.deepStrictEqual(unhandled, []);
  } finally {
    process.off('unhandledRejection', onUnhandled);
    await client.close();
  }
});

test('close() while the server is down resolves at once', { timeout: 30000 }, async () => {
  // A port nobody listens on.
  const srv = net.createServer();
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  const { port } = srv.address();
  await new Promise((r) => srv.close(r));
  const client = new Client({ config: { ...direct, host: '127.0.0.1', port } });
  const unhandled = [];
  const onUnhandled = (e) => unhandled.push(e);
  process.on('unhandledRejection', onUnhandled);
  try {
    const pauses = recordPauses(client._keeper);
    assert.strictEqual(await client._keeper.ensure(1200), false);
    assert.ok(client._keeper.error, 'the keeper failed');
    assert.ok(pauses.length >= 1, 'pausing');
    const t0 = performance.now();
    await client.close();
    assert.ok(performance.now() - t0 < 500, `close() took ${Math.round(performance.now() - t0)} ms`);
    await sleep(200);
    assert.deepStrictEqual(unhandled, []);
  } finally {
    process.off('unhandledRejection', onUnhandled);
  }
});

test('watch in a database without CREATE EXTENSION raises ExtensionNotCreated (one diagnosis with the calls)', { timeout: 20000 }, async () => {
  const db = await ownDatabase('watchnoext', false);
  const client = new Client({ config: { ...direct, database: db } });
  try {
    const it = client.watch(['x'], { timeout: 1 });
    const e = await it.next().then(() => null, (err) => err);
    assert.ok(e instanceof ExtensionNotCreated, `${e && e.stack}`);
    assert.match(e.message, new RegExp(`not created in database "${db}"`));
    assert.match(e.hint, /run CREATE EXTENSION dsync/);
  } finally {
    await client.close();
  }
});
