'use strict';
/*
 * The Node client (clients/node) against the same throwaway server as the
 * raw SQL: prints figures, asserts nothing about time.
 *
 *   python3 clients/with_server.py node test/bench/client_bench.js
 *
 * 1. acquire+release through a Client (a Lock object per name, made
 *    beforehand; and one object reused) against the two SQL calls on one
 *    pg.Client, interleaved in blocks, median and p99 over BENCH_CYCLES
 *    (2,000) cycles each;
 * 2. a first acquire on a new Lock object (a new name) of a client that
 *    is already running;
 * 3. the server CPU of 1,000 leases held and renewed by one keeper: utime
 *    + stime from /proc/<pid>/stat of the keeper's backend and of the dsync
 *    background workers over BENCH_CPU_SECONDS (30), with ttl 30 s (the
 *    default) and ttl 3 s.
 */

const fs = require('node:fs');
const path = require('node:path');
const { execSync } = require('node:child_process');
const { performance } = require('node:perf_hooks');

// pg from clients/node's node_modules (npm ci there), as the library uses it.
const NODE_CLIENT = path.join(__dirname, '..', '..', 'clients', 'node');
const pg = require(require.resolve('pg', { paths: [NODE_CLIENT] }));
const { Client } = require(NODE_CLIENT);

const CYCLES = Number(process.env.BENCH_CYCLES || 2000);
const CPU_SECONDS = Number(process.env.BENCH_CPU_SECONDS || 30);
const BLOCK = 200;

const { config, query } = require('../../clients/node/test/dsn');
const direct = config(process.env.DSYNC_DSN);
const admin = config(process.env.DSYNC_ADMIN_DSN);

// Median and p99 of samples (ms), printed on one line.
function show(label, ms) {
  const s = [...ms].sort((a, b) => a - b);
  const median = s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
  const p99 = s[Math.max(0, Math.ceil(s.length * 0.99) - 1)];
  console.log(`  ${label.padEnd(62)} median ${median.toFixed(3)} ms  p99 ${p99.toFixed(3)} ms  (n=${s.length})`);
  return median;
}

const pick = (names) => names[Math.floor(Math.random() * names.length)];

// Two SQL calls on one connection, the way a hand-written client does it.
async function rawBlock(conn, names, n, out) {
  for (let i = 0; i < n; i++) {
    const name = pick(names);
    const t0 = performance.now();
    await conn.query('SELECT dsync_acquire($1::text, $2::text, $3::interval)', [name, 'bench', '30 seconds']);
    await conn.query('SELECT dsync_release($1::text, $2::text)', [name, 'bench']);
    out.push(performance.now() - t0);
  }
}

// acquire() + release() of a Lock object per name, through the client.
async function clientBlock(locks, n, out) {
  for (let i = 0; i < n; i++) {
    const lock = pick(locks);
    const t0 = performance.now();
    if (!(await lock.acquire({ blocking: false }))) throw new Error('not acquired');
    await lock.release();
    out.push(performance.now() - t0);
  }
}

// utime + stime of a process, in ms.
const TICK_MS = 1000 / Number(execSync('getconf CLK_TCK').toString().trim() || 100);
function cpuMs(pid) {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) * TICK_MS;     // fields 14 and 15 of stat(5)
}

const adminRows = (text, values) => query(admin, text, values);

// The server CPU of 1,000 leases held by one client with this ttl.
async function cpuOfHeld(ttl) {
  const app = `bench-cpu-${ttl}`;
  const client = new Client({ config: { ...direct, application_name: app } });
  try {
    const locks = Array.from({ length: 1000 }, (_, i) => client.lock(`cpu-${ttl}-${i}`, { ttl }));
    for (let i = 0; i < locks.length; i += 100) {
      await Promise.all(locks.slice(i, i + 100).map((l) => l.acquire({ blocking: false })));
    }
    await new Promise((r) => setTimeout(r, 1000));       // the keeper has LISTENed and confirmed
    const keeper = (await adminRows('SELECT pid FROM pg_stat_activity WHERE application_name = $1', [`${app} keeper`]))[0].pid;
    const workers = await adminRows("SELECT pid, backend_type FROM pg_stat_activity WHERE backend_type LIKE 'dsync%' ORDER BY pid");
    const renewals0 = Number((await adminRows('SELECT renewals FROM dsync_stats'))[0].renewals);
    const k0 = cpuMs(keeper);
    const w0 = workers.map((w) => cpuMs(w.pid));
    const t0 = performance.now();
    await new Promise((r) => setTimeout(r, CPU_SECONDS * 1000));
    const secs = (performance.now() - t0) / 1000;
    const k = (cpuMs(keeper) - k0) / secs;
    const w = workers.map((x, i) => (cpuMs(x.pid) - w0[i]) / secs);
    const renewals = (Number((await adminRows('SELECT renewals FROM dsync_stats'))[0].renewals) - renewals0) / secs;
    const held = (await adminRows('SELECT count(*)::int AS n FROM dsync_leases WHERE lease LIKE $1', [`cpu-${ttl}-%`]))[0].n;
    console.log(`  ttl ${String(ttl).padStart(2)} s: keeper backend ${k.toFixed(2)} ms CPU/s; `
      + `${workers.map((x, i) => `${x.backend_type} (pid ${x.pid}) ${w[i].toFixed(2)} ms CPU/s`).join(', ')}; `
      + `${renewals.toFixed(0)} renewals/s; ${held} leases held at the end`);
  } finally {
    await client.close();
  }
}

async function main() {
  const version = (await adminRows("SELECT extversion FROM pg_extension WHERE extname = 'dsync'"))[0].extversion;
  console.log(`node ${process.version}, pg ${require(require.resolve('pg/package.json', { paths: [NODE_CLIENT] })).version}, dsync ${version}; role ${direct.user}, `
    + 'PostgreSQL as started by clients/python/tests/conftest.py, Unix socket');
  const names = Array.from({ length: 1000 }, (_, i) => `bench-${i}`);
  const client = new Client({ config: direct });
  const locks = names.map((n) => client.lock(n, { ttl: 30, holder: 'bench-client' }));
  const reused = client.lock('bench-reused', { ttl: 30 });
  const conn = new pg.Client(direct);
  await conn.connect();
  try {
    // Warm up both paths (connections, the keeper's LISTENs).
    await rawBlock(conn, names, 200, []);
    await clientBlock(locks, 1000, []);
    await clientBlock([reused], 100, []);
    const raw = [];
    const lib = [];
    const one = [];
    for (let done = 0; done < CYCLES; done += BLOCK) {
      await rawBlock(conn, names, BLOCK, raw);
      await clientBlock(locks, BLOCK, lib);
      await clientBlock([reused], BLOCK, one);
    }
    console.log(`\n1. acquire+release, ${CYCLES} cycles each, interleaved in blocks of ${BLOCK}`);
    const mRaw = show('SQL: the two calls on one pg.Client', raw);
    const mLib = show('Client: a Lock object per name (1,000 names)', lib);
    const mOne = show('Client: one Lock object reused', one);
    console.log(`  ratio of medians: ${(mLib / mRaw).toFixed(2)}x (a Lock per name), ${(mOne / mRaw).toFixed(2)}x (one Lock)`);

    const first = [];
    for (let i = 0; i < 500; i++) {
      const lock = client.lock(`bench-first-${process.pid}-${i}`, { ttl: 30 });
      const t0 = performance.now();
      if (!(await lock.acquire({ blocking: false }))) throw new Error('not acquired');
      first.push(performance.now() - t0);
      await lock.release();
    }
    console.log('\n2. first acquire on a new Lock object (a new name) of a running client');
    show('acquire() only (its keeper LISTENs beside it)', first);
  } finally {
    await conn.end();
    await client.close();
  }

  console.log(`\n3. server CPU of 1,000 leases held by one client, over ${CPU_SECONDS} s`);
  await cpuOfHeld(30);
  await cpuOfHeld(3);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
