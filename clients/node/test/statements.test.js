'use strict';
// runStatement: statements prepared once on a connection that reaches the
// server itself, sent whole through PgBouncer, and sent whole again once
// the server forgot one or refused it for a changed result type; results
// and errors as pg gives them unprepared.
const { test } = require('node:test');
const assert = require('node:assert');
const pg = require('pg');
const { runStatement, statementName } = require('../client');
const { direct, bouncer, adminApp } = require('./helpers');

const SUM = 'SELECT $1::int + 1 AS v, $2::text AS t, $3::interval AS i';

async function connected(cfg) {
  const c = new pg.Client(cfg);
  await c.connect();
  return c;
}

async function preparedNames(conn) {
  return (await conn.query('SELECT name FROM pg_prepared_statements')).rows.map((r) => r.name);
}

test('a direct connection prepares a statement once and runs it by name', { timeout: 20000 }, async () => {
  const conn = await connected(direct);
  try {
    const plain = (await conn.query(SUM, [1, 'é ✓', '1 day 3 us'])).rows;
    for (let i = 0; i < 3; i++) {
      assert.deepStrictEqual(await runStatement(conn, SUM, [1, 'é ✓', '1 day 3 us']), plain);
    }
    assert.deepStrictEqual(await preparedNames(conn), [statementName(SUM)]);
  } finally {
    await conn.end();
  }
});

test('errors are those of the statement sent whole', { timeout: 20000 }, async () => {
  const conn = await connected(direct);
  try {
    for (const [text, values] of [['SELECT 1 / $1::int AS v', [0]], ['SELECT no_such_function($1::int) AS v', [1]]]) {
      const whole = await conn.query(text, values).catch((e) => e);
      for (let i = 0; i < 2; i++) {
        const named = await runStatement(conn, text, values).catch((e) => e);
        assert.strictEqual(named.code, whole.code);
        assert.strictEqual(named.message, whole.message);
      }
    }
    assert.deepStrictEqual((await conn.query('SELECT 1 AS v')).rows, [{ v: 1 }]);
  } finally {
    await conn.end();
  }
});

test('through PgBouncer in transaction mode statements are sent whole', { timeout: 20000 }, async () => {
  // Two clients' statements share PgBouncer's server connections: a name
  // prepared through one would be missing through the other.
  const conns = [await connected(bouncer), await connected(bouncer)];
  try {
    for (let i = 0; i < 20; i++) {
      for (const conn of conns) {
        assert.deepStrictEqual((await runStatement(conn, SUM, [i, 'x', '1 s']))[0].v, i + 1);
      }
    }
  } finally {
    for (const conn of conns) await conn.end();
  }
});

test('a connection whose server forgot a statement sends it whole from then on', { timeout: 20000 }, async () => {
  const conn = await connected(direct);
  try {
    assert.strictEqual((await runStatement(conn, SUM, [1, 'x', '1 s']))[0].v, 2);
    await conn.query('DEALLOCATE ALL');         // what a pool's reset does
    assert.strictEqual((await runStatement(conn, SUM, [2, 'x', '1 s']))[0].v, 3);
    assert.strictEqual((await runStatement(conn, SUM, [3, 'x', '1 s']))[0].v, 4);
    assert.deepStrictEqual(await preparedNames(conn), []);
  } finally {
    await conn.end();
  }
});

test('a statement whose result type changed under it is sent whole', { timeout: 20000 }, async () => {
  // An extension update may change a function's result type under a
  // prepared statement: PostgreSQL refuses it (0A000) before running it.
  const conn = await connected(adminApp);
  const fn = `wire_f_${process.pid}`;
  const text = `SELECT ${fn}($1::int) AS v`;
  try {
    await conn.query(`CREATE FUNCTION ${fn}(int) RETURNS int LANGUAGE sql AS 'SELECT $1'`);
    assert.deepStrictEqual(await runStatement(conn, text, [1]), [{ v: 1 }]);
    assert.deepStrictEqual(await runStatement(conn, text, [2]), [{ v: 2 }]);
    await conn.query(`DROP FUNCTION ${fn}(int)`);
    await conn.query(`CREATE FUNCTION ${fn}(int) RETURNS text LANGUAGE sql AS 'SELECT $1::text'`);
    assert.deepStrictEqual(await runStatement(conn, text, [3]), [{ v: '3' }]);
  } finally {
    await conn.query(`DROP FUNCTION IF EXISTS ${fn}(int)`);
    await conn.end();
  }
});
