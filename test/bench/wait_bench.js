'use strict';
/*
 * Waiting through the Node client against waiting in raw SQL (the Node
 * half of wait_bench.py): BENCH_WORKERS (16) async workers on one name take
 * it and give it back, as fast as hand-offs go.
 *
 *   python3 clients/with_server.py node test/bench/wait_bench.js
 *
 *   - raw: each worker has its own pg.Client and calls dsync_acquire(name,
 *     holder, '30 s', wait => '30 s') and dsync_release (node-postgres's
 *     default: sent whole each time);
 *   - raw-named: the same as named (prepared) statements, which the client
 *     uses on connections that reach the server itself;
 *   - client: one dsync Client, a Lock object per worker on the same name,
 *     acquire() and release(); its keeper renews and LISTENs.
 *
 * BENCH_SIDES picks sides (default raw,raw-named,client).
 * BENCH_ROUNDS (5) alternating rounds of BENCH_SECONDS (5) each way, on a
 * fresh name.  Printed: hand-offs/s (median of rounds) and the hand-off
 * latency from release() returned to the next holder's acquire() returned
 * (p50, p99); then client / raw.  Nothing is asserted.
 */

const path = require('node:path');
const { performance } = require('node:perf_hooks');

const NODE_CLIENT = path.join(__dirname, '..', '..', 'clients', 'node');
const pg = require(require.resolve('pg', { paths: [NODE_CLIENT] }));
const { Client } = require(NODE_CLIENT);
const { config } = require('../../clients/node/test/dsn');

const WORKERS = Number(process.env.BENCH_WORKERS || 16);
const ROUNDS = Number(process.env.BENCH_ROUNDS || 5);
const SECONDS = Number(process.env.BENCH_SECONDS || 5);
const direct = config(process.env.DSYNC_DSN);

const ACQUIRE = "SELECT dsync_acquire($1::text, $2::text, '30 s'::interval, wait => '30 s'::interval) AS t";
const RELEASE = 'SELECT dsync_release($1::text, $2::text)';

// Runs take(i) / give(i) in WORKERS loops for SECONDS after a short start;
// the hand-offs/s and gaps (ms) inside the window.
async function round(take, give) {
  const sections = [];
  let stop = false;
  const start = performance.now() + 500;
  const end = start + SECONDS * 1000;
  const loops = [];
  for (let i = 0; i < WORKERS; i++) {
    loops.push((async () => {
      while (!stop) {
        await take(i);
        const acquired = performance.now();
        await give(i);
        sections.push([acquired, performance.now()]);
      }
    })());
  }
  await new Promise((resolve) => setTimeout(resolve, SECONDS * 1000 + 500));
  stop = true;
  await Promise.all(loops);
  const inside = sections.filter(([a]) => a >= start && a < end).sort((x, y) => x[0] - y[0]);
  const gaps = [];
  for (let i = 0; i + 1 < inside.length; i++) gaps.push(inside[i + 1][0] - inside[i][1]);
  return { rate: inside.length / SECONDS, gaps };
}

async function rawSide(name, named = false) {
  const conns = [];
  for (let i = 0; i < WORKERS; i++) {
    const c = new pg.Client(direct);
    await c.connect();
    conns.push(c);
  }
  try {
    return await round(
      async (i) => { await conns[i].query(named ? { name: 'a', text: ACQUIRE, values: [name, `w${i}`] } : ACQUIRE, [name, `w${i}`]); },
      async (i) => { await conns[i].query(named ? { name: 'r', text: RELEASE, values: [name, `w${i}`] } : RELEASE, [name, `w${i}`]); });
  } finally {
    for (const c of conns) await c.end();
  }
}

async function clientSide(name) {
  const client = new Client({ config: direct, ...(process.env.BENCH_LISTEN === '0' ? { listen: false } : {}) });
  const locks = [];
  for (let i = 0; i < WORKERS; i++) locks.push(client.lock(name, { ttl: 30 }));
  try {
    return await round(
      async (i) => { if (!await locks[i].acquire({ timeout: 30 })) throw new Error('not acquired'); },
      async (i) => { await locks[i].release(); });
  } finally {
    await client.close();
  }
}

const pct = (v, q) => { const s = [...v].sort((a, b) => a - b); return s[Math.min(s.length - 1, Math.floor(s.length * q))]; };
const median = (v) => pct(v, 0.5);

async function main() {
  console.log(`${WORKERS} async workers on one name, ${ROUNDS} alternating rounds of ${SECONDS} s; node ${process.version}, pg ${require(require.resolve('pg/package.json', { paths: [NODE_CLIENT] })).version}`);
  const all = { raw: rawSide, 'raw-named': (n) => rawSide(n, true), client: clientSide };
  const sides = Object.fromEntries((process.env.BENCH_SIDES || Object.keys(all).join(','))
    .split(',').map((s) => [s, all[s]]));
  const rates = Object.fromEntries(Object.keys(sides).map((s) => [s, []]));
  const gaps = Object.fromEntries(Object.keys(sides).map((s) => [s, []]));
  for (let r = 0; r < ROUNDS; r++) {
    for (const side of Object.keys(sides)) {
      const out = await sides[side](`bench-js-${side}-${r}-${process.pid}`);
      rates[side].push(out.rate);
      gaps[side].push(...out.gaps);
      console.log(`  round ${r + 1} ${side.padEnd(9)}: ${out.rate.toFixed(1).padStart(7)} hand-offs/s, p50 ${median(out.gaps).toFixed(2)} ms`);
    }
  }
  for (const side of Object.keys(sides)) {
    console.log(`${side.padEnd(9)}: ${median(rates[side]).toFixed(1).padStart(7)} hand-offs/s (median of rounds), hand-off p50 ${median(gaps[side]).toFixed(2)} ms, p99 ${pct(gaps[side], 0.99).toFixed(2)} ms (n=${gaps[side].length})`);
  }
  for (const base of ['raw', 'raw-named'].filter((b) => sides[b] && sides.client)) {
    console.log(`client / ${base}: throughput ${(median(rates.client) / median(rates[base])).toFixed(2)}x, p50 latency ${(median(gaps.client) / median(gaps[base])).toFixed(2)}x, p99 latency ${(pct(gaps.client, 0.99) / pct(gaps[base], 0.99)).toFixed(2)}x`);
  }
}

main().catch((e) => { console.error(e); process.exit(1); });
