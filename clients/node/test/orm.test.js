'use strict';
// Fenced writes through knex and Prisma (issue 43): lock.guard(tx) takes a
// knex transaction and a Prisma interactive transaction as well as a pg
// client, the token is a BigInt in each, and a stale writer's refusal is
// StaleToken through translateError.  Prisma's client is generated here,
// offline (Prisma 7 needs no engine binary with @prisma/adapter-pg).
const { test, before, after } = require('node:test');
const assert = require('node:assert');
const path = require('node:path');
const { execFileSync } = require('node:child_process');
const pg = require('pg');
const knexFactory = require('knex');
const {
  Client, Lock, NotHeld, StaleToken, translateError, toToken, types,
} = require('..');
const { direct, uniqueName } = require('./helpers');
const { query } = require('./dsn');

const TABLE = 'orm_account';     // the Prisma schema's @@map
let client;
let knex;
let prisma;

before(async () => {
  await query(direct, `CREATE TABLE IF NOT EXISTS ${TABLE} (id int PRIMARY KEY, balance int NOT NULL, token bigint NOT NULL)`);
  await query(direct, `CREATE OR REPLACE TRIGGER ${TABLE}_fenced BEFORE INSERT OR UPDATE ON ${TABLE}
    FOR EACH ROW EXECUTE FUNCTION dsync_fenced('token')`);
  client = new Client({ config: direct });
  knex = knexFactory({ client: 'pg', connection: { ...direct }, pool: { min: 0, max: 2 } });
  // PRISMA_SCHEMA_ENGINE_BINARY: the CLI otherwise fetches the schema
  // engine (for migrations, unused here) from binaries.prisma.sh first.
  const dir = path.join(__dirname, 'prisma');
  execFileSync(process.execPath, [require.resolve('prisma/build/index.js'), 'generate', '--schema', path.join(dir, 'schema.prisma')],
    { env: { ...process.env, PRISMA_SCHEMA_ENGINE_BINARY: process.execPath, PRISMA_HIDE_UPDATE_MESSAGE: '1' }, stdio: 'pipe' });
  const { PrismaClient } = require('../node_modules/.dsync-test-prisma');
  const { PrismaPg } = require('@prisma/adapter-pg');
  prisma = new PrismaClient({ adapter: new PrismaPg({ ...direct }) });
});

after(async () => {
  if (prisma) await prisma.$disconnect();
  if (knex) await knex.destroy();
  if (client) await client.close();
});

// A lease taken and given back by one holder, then held by another: the
// first holder's token, now stale, and the second lock, holding.
async function staleAndFresh(name) {
  const old = new Lock(name, { client, holder: 'w1' });
  await old.acquire();
  const oldToken = old.token;
  await old.release();
  const fresh = new Lock(name, { client, holder: 'w2' });
  await fresh.acquire();
  return { oldToken, fresh };
}

test('toToken: one BigInt from what pg, knex and Prisma give', () => {
  assert.strictEqual(toToken('849289729338659'), 849289729338659n);
  assert.strictEqual(toToken(42), 42n);
  assert.strictEqual(toToken(7n), 7n);
  assert.throws(() => toToken(2 ** 60), /beyond 2\^53/);
  assert.throws(() => toToken('12a'), TypeError);
  assert.throws(() => toToken(0), /must be positive/);
  assert.throws(() => toToken(null), TypeError);
});

test('knex: guard(trx) returns the token as a BigInt, a stale writer is refused with StaleToken', { timeout: 20000 }, async () => {
  const name = uniqueName('knex');
  const id = 1000 + (process.pid % 1000);
  const { oldToken, fresh } = await staleAndFresh(name);
  const token = await knex.transaction(async (trx) => {
    const t = await fresh.guard(trx);
    await trx(TABLE).insert({ id, balance: 100, token: t }).onConflict('id').merge();
    return t;
  });
  assert.strictEqual(typeof token, 'bigint');
  assert.strictEqual(token, fresh.token);
  // The row's token comes back from knex as a string: toToken makes it one.
  const row = await knex(TABLE).where({ id }).first();
  assert.strictEqual(toToken(row.token), token);
  const e = await knex(TABLE).where({ id }).update({ balance: 90, token: oldToken }).then(() => null, (err) => err);
  assert.strictEqual(e.code, '55000');
  const t = translateError(e);
  assert.ok(t instanceof StaleToken, `${t}`);
  assert.match(t.message, /stale fencing token for resource "table:public.orm_account"/);
  assert.strictEqual(t.cause, e);
  await fresh.release();
  const e2 = await knex.transaction((trx) => fresh.guard(trx)).then(() => null, (err) => err);
  assert.ok(e2 instanceof NotHeld, `${e2 && e2.stack}`);
  assert.ok(!(e2 instanceof StaleToken));
});

test('Prisma: guard(tx) in an interactive transaction, a stale writer is refused with StaleToken', { timeout: 30000 }, async () => {
  const name = uniqueName('prisma');
  const id = 2000 + (process.pid % 1000);
  const { oldToken, fresh } = await staleAndFresh(name);
  const token = await prisma.$transaction(async (tx) => {
    const t = await fresh.guard(tx);
    await tx.account.upsert({ where: { id }, create: { id, balance: 100, token: t }, update: { token: t } });
    return t;
  });
  assert.strictEqual(token, fresh.token);
  assert.strictEqual(typeof (await prisma.account.findUnique({ where: { id } })).token, 'bigint');
  // Through $executeRaw (P2010) and through the model API: both refused.
  for (const write of [
    () => prisma.$executeRaw`UPDATE orm_account SET balance = 90, token = ${oldToken} WHERE id = ${id}`,
    () => prisma.account.update({ where: { id }, data: { balance: 90, token: oldToken } }),
  ]) {
    const e = await write().then(() => null, (err) => err);
    assert.ok(e, 'the stale write was accepted');
    const t = translateError(e);
    assert.ok(t instanceof StaleToken, `${t} from ${e && e.stack}`);
    assert.strictEqual(t.code, '55000');
  }
  await fresh.release();
  const e2 = await prisma.$transaction((tx) => fresh.guard(tx)).then(() => null, (err) => err);
  assert.ok(e2 instanceof NotHeld, `${e2 && e2.stack}`);
});

test('pg: guard(client) as before, and the token column read back with types is a BigInt', { timeout: 20000 }, async () => {
  const name = uniqueName('pg');
  const id = 3000 + (process.pid % 1000);
  const { oldToken, fresh } = await staleAndFresh(name);
  const c = new pg.Client({ ...direct, types });
  await c.connect();
  try {
    await c.query('BEGIN');
    const t = await fresh.guard(c);
    await c.query(`INSERT INTO ${TABLE} VALUES ($1, 100, $2) ON CONFLICT (id) DO UPDATE SET token = $2`, [id, t]);
    await c.query('COMMIT');
    const r = await c.query(`SELECT token FROM ${TABLE} WHERE id = $1`, [id]);
    assert.strictEqual(r.rows[0].token, t);
    const e = await c.query(`UPDATE ${TABLE} SET token = $1 WHERE id = $2`, [oldToken, id]).then(() => null, (err) => err);
    assert.ok(translateError(e) instanceof StaleToken);
  } finally {
    await c.end();
    await fresh.release();
  }
});

test('guard() refuses what is not a transaction it knows', { timeout: 5000 }, async () => {
  const lock = new Lock(uniqueName('bad'), { client });
  await assert.rejects(lock.guard({}), /guard\(\) takes a pg Client or PoolClient, a knex transaction or a Prisma/);
});

test('a second owner of a shared Lock holds under its own name, which lock.holder answers inside its scope', { timeout: 20000 }, async () => {
  const lock = new Lock(uniqueName('owners'), { client, holder: 'base' });
  let release;
  let acquired;
  const gate = new Promise((r) => { release = r; });
  const holding = new Promise((r) => { acquired = r; });
  const first = lock.run(async () => { acquired(); await gate; });
  await holding;       // the first owner has the base name
  let seen;
  const second = lock.run(async () => {
    seen = { own: lock.hold.holder, shared: lock.holder, token: lock.token };
    const rows = await query(direct, 'SELECT holder FROM dsync_leases WHERE lease = $1', [lock.name]);
    seen.server = rows.map((r) => r.holder);
    seen.guarded = await knex.transaction((trx) => lock.guard(trx));
  }, { timeout: 10 });
  release();
  await first;
  await second;
  assert.strictEqual(seen.shared, seen.own);
  assert.notStrictEqual(seen.own, 'base');
  assert.strictEqual(lock.holder, 'base');
  assert.deepStrictEqual(seen.server, [seen.own]);
  assert.strictEqual(seen.guarded, seen.token);
});
