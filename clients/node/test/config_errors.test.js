'use strict';
// Installation mistakes said as such (issue 43): a database without
// CREATE EXTENSION dsync, a server that does not preload dsync, and a
// keeper that meets either says so once, not at every retry.
const { test, after } = require('node:test');
const assert = require('node:assert');
const {
  Client, Lock, Event, ExtensionNotCreated, NotPreloaded, NotHeld, DsyncError, translateError,
} = require('..');
const { direct, admin, uniqueName, adminQuery, waitFor } = require('./helpers');
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
    assert.ok(!said[0].includes('\n    at '), 'no stack trace');
    assert.ok(client._keeper.error instanceof ExtensionNotCreated);
  } finally {
    process.off('warning', onWarning);
    await client.close();
  }
});
