'use strict';
// 32 async workers over shared and private Lock objects of one Client,
// while the client's server connections (keeper, statement pool, waits)
// are killed every second: no overlap (in memory and in a fenced table
// row written in the same transaction as dsync_assert_held), no hang (the
// test's timeout), and nothing left open after close().
const { test } = require('node:test');
const assert = require('node:assert');
const pg = require('pg');
const { Client, DsyncError, NotHeld } = require('..');
const { uniqueName, adminQuery, ownRole, connectionsOf, sleep, waitFor } = require('./helpers');

const SECONDS = Number(process.env.DSYNC_STRESS_SECONDS || 10);

test(`stress: 32 workers, shared and private locks, connections killed every second for ${SECONDS} s`, { timeout: 120000 }, async () => {
  const cfg = await ownRole('dsync_tstress');
  const app = uniqueName('stress');
  const table = `fenced_${process.pid}`;
  await adminQuery(`CREATE TABLE ${table} (name text PRIMARY KEY, n bigint NOT NULL DEFAULT 0, last_token bigint NOT NULL DEFAULT 0)`);
  await adminQuery(`GRANT SELECT, UPDATE ON ${table} TO ${cfg.role}`);
  const names = [0, 1, 2, 3].map((i) => uniqueName(`stress${i}`));
  await adminQuery(`INSERT INTO ${table} (name) SELECT unnest($1::text[])`, [names]);

  const client = new Client({ config: { ...cfg, application_name: app } });
  // The application's own writes, on a pool the kills leave alone.
  const writer = new pg.Pool({ ...cfg, application_name: `${app} writer`, max: 8 });
  writer.on('error', () => {});
  const shared = names.map((n) => client.lock(n, { ttl: 5 }));
  const inside = new Map(names.map((n) => [n, 0]));
  const counts = {
    sections: 0, overlaps: 0, staleWrites: 0, notHeld: 0, connectionErrors: 0, otherErrors: [], losses: 0,
  };
  const perName = new Map(names.map((n) => [n, 0]));
  for (const l of shared) l.on('lost', () => { counts.losses += 1; });
  let stop = false;

  // The guarded section: counted in memory, and written in one
  // transaction with dsync_assert_held (a stale token updates no row).
  async function section(lock) {
    const n = lock.name;
    inside.set(n, inside.get(n) + 1);
    if (inside.get(n) > 1) counts.overlaps += 1;
    try {
      const c = await writer.connect();
      let ok = false;
      try {
        await c.query('BEGIN');
        const token = await lock.guard(c);
        const r = await c.query(`UPDATE ${table} SET n = n + 1, last_token = $2 WHERE name = $1 AND last_token <= $2 RETURNING n`, [n, String(token)]);
        if (r.rowCount !== 1) counts.staleWrites += 1;
        await c.query('COMMIT');
        ok = r.rowCount === 1;
      } catch (e) {
        await c.query('ROLLBACK').catch(() => {});
        if (e instanceof NotHeld) counts.notHeld += 1;
        else throw e;
      } finally {
        c.release();
      }
      if (ok) {
        counts.sections += 1;
        perName.set(n, perName.get(n) + 1);
      }
      await sleep(Math.random() * 3);
    } finally {
      inside.set(n, inside.get(n) - 1);
    }
  }

  // Worker w: names[w % 4]; half use the shared object with run(), the
  // others a private object, alternating bare acquire/release and run().
  async function worker(w) {
    const name = names[w % 4];
    const own = w >= 16 ? client.lock(name, { ttl: 5 }) : null;
    if (own) own.on('lost', () => { counts.losses += 1; });
    let i = 0;
    while (!stop) {
      i += 1;
      try {
        if (!own) {
          await shared[w % 4].run((l) => section(l), { timeout: 5 });
        } else if (i % 2) {
          if (await own.acquire({ timeout: 5 })) {
            try {
              await section(own);
            } finally {
              await own.release().catch((e) => { if (!(e instanceof DsyncError)) throw e; });
            }
          }
        } else {
          await own.run((l) => section(l), { timeout: 5 });
        }
      } catch (e) {
        if (e instanceof DsyncError && /connect|terminat|ended|closed/i.test(`${e.name} ${e.message}`)) counts.connectionErrors += 1;
        else if (e.name === 'AcquireTimeout') counts.otherErrors.push('timeout');
        else counts.otherErrors.push(`${e.name}: ${e.message}`);
        await sleep(5);
      }
    }
  }

  let kills = 0;
  let killed = 0;
  // A fixed number of kill rounds, a second apart, however slow the
  // machine: the workers run until the last one is done, and the checks
  // are about what happened, never about how much of it fitted in a time.
  const killer = (async () => {
    for (let round = 0; round < SECONDS; round++) {
      await sleep(1000);
      const rows = await adminQuery('SELECT count(pg_terminate_backend(pid))::int AS n FROM pg_stat_activity WHERE usename = $1 AND application_name <> $2',
        [cfg.role, `${app} writer`]);
      kills += 1;
      killed += rows[0].n;
    }
  })();
  const workers = Array.from({ length: 32 }, (_, w) => worker(w));
  await killer;
  await sleep(1000);              // the workers go on past the last kill
  stop = true;
  await Promise.all(workers);

  const rows = await adminQuery(`SELECT name, n::int AS n FROM ${table} ORDER BY name`);
  console.log(`stress ${SECONDS} s: ${counts.sections} guarded sections (${names.map((n) => perName.get(n)).join('/')} per name), `
    + `${kills} kill rounds ending ${killed} connections; overlaps ${counts.overlaps}, stale writes ${counts.staleWrites}, `
    + `guard refused ${counts.notHeld}, losses ${counts.losses}, connection errors ${counts.connectionErrors}, `
    + `other errors ${counts.otherErrors.length}${counts.otherErrors.length ? ` (${[...new Set(counts.otherErrors)].slice(0, 5).join('; ')})` : ''}`);
  const keeperConnections = client._keeper.ledger.generation;
  console.log(`the keeper connected ${keeperConnections} times`);
  await client.close();
  await writer.end();
  const left = await waitFor(async () => (await connectionsOf(cfg.role)) === 0, 5000, 50);
  const leases = (await adminQuery('SELECT count(*)::int AS n FROM dsync_leases WHERE lease = ANY($1)', [names]))[0].n;
  await adminQuery(`DROP TABLE ${table}`);

  assert.strictEqual(counts.overlaps, 0, 'no two holders inside at once (in memory)');
  assert.strictEqual(counts.staleWrites, 0, 'no write with an older token after a newer one (fenced row)');
  for (const r of rows) assert.strictEqual(r.n, perName.get(r.name), `the table counted every section of ${r.name}`);
  assert.ok(counts.sections > 0, `${counts.sections} sections`);
  assert.strictEqual(kills, SECONDS, `${kills} kill rounds`);
  assert.ok(killed > 0, 'the kills ended connections');
  assert.ok(keeperConnections >= 2, 'the keeper was killed and connected again');
  assert.ok(left, `connections of the role left after close(): ${await connectionsOf(cfg.role)}`);
  assert.strictEqual(leases, 0, 'no lease left held');
});
