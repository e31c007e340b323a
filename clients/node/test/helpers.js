'use strict';
// What the tests share: connection settings from clients/with_server.py
// (libpq keyword form), unique names, admin statements, roles of their own.
// node --test runs every file of this directory, this one too: it only
// defines things.
const { after } = require('node:test');

// A test that timed out may leave a connection open, which would keep its
// file's process (and so node --test) running: exit 5 s after the last
// test whatever is left (the results, failures included, are reported by
// then).  The timer is unref'd, so a clean run exits at once.
after(() => { setTimeout(() => process.exit(), 5000).unref(); });

const { config, query } = require('./dsn');

const direct = config(process.env.DSYNC_DSN);
const bouncer = config(process.env.DSYNC_BOUNCER_DSN);
const admin = config(process.env.DSYNC_ADMIN_DSN);
// The admin role in the app database (dsync_force_release is for administrators).
const adminApp = { ...admin, database: direct.database };

let counter = 0;
function uniqueName(prefix) {
  counter += 1;
  return `${prefix}-${process.pid}-${counter}`;
}

const adminQuery = (text, values) => query(adminApp, text, values);

/*
 * SIGSTOP dsync's worker while it sleeps (its wait event is Extension),
 * never mid-pass: stopped holding one of dsync's locks, it would hold up
 * for ever whatever the test does next.
 */
async function stopWorkerAsleep(pid) {
  for (let i = 0; i < 1000; i += 1) {
    process.kill(pid, 'SIGSTOP');
    const rows = await adminQuery('SELECT wait_event_type FROM pg_stat_activity WHERE pid = $1', [pid]);
    if (rows.length && rows[0].wait_event_type === 'Extension') return;
    process.kill(pid, 'SIGCONT');
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  throw new Error("dsync's worker was never seen asleep");
}

/*
 * A login role of its own for a test that counts or limits connections
 * by role (pg_stat_activity.usename, CONNECTION LIMIT): test files may run
 * side by side on one server, and the app role's count is theirs too.
 * Returns the role's client config.
 */
async function ownRole(prefix) {
  const role = `${prefix}_${process.pid}_${++counter}`.replace(/[^a-z0-9_]/g, '_');
  await adminQuery(`CREATE ROLE ${role} LOGIN`);
  return { ...direct, user: role, role };
}

// Connections of a role in pg_stat_activity (client backends only).
async function connectionsOf(role) {
  const rows = await adminQuery("SELECT count(*)::int AS n FROM pg_stat_activity WHERE usename = $1 AND backend_type = 'client backend'", [role]);
  return rows[0].n;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Polls cond() (sync or async) every `every` ms until it is truthy or ms
// have passed; returns its last value.
async function waitFor(cond, ms = 5000, every = 10) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await cond();
    if (v || Date.now() >= end) return v;
    await sleep(every);
  }
}

module.exports = {
  direct, bouncer, admin, adminApp, uniqueName, adminQuery, stopWorkerAsleep, ownRole, connectionsOf, sleep, waitFor,
};
