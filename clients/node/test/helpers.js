'use strict';
// Connection strings from clients/with_server.py, in libpq keyword form.
const pg = require('pg');

function config(dsn) {
  const cfg = {};
  for (const part of dsn.split(/\s+/)) {
    const [k, v] = part.split('=');
    if (k === 'dbname') cfg.database = v;
    else if (k === 'user') cfg.user = v;
    else if (k === 'host') cfg.host = v;
    else if (k === 'port') cfg.port = Number(v);
  }
  return cfg;
}

const direct = config(process.env.DSYNC_DSN);
const bouncer = config(process.env.DSYNC_BOUNCER_DSN);
const admin = config(process.env.DSYNC_ADMIN_DSN);

let counter = 0;
function uniqueName(prefix) {
  counter += 1;
  return `${prefix}-${process.pid}-${counter}`;
}

async function adminQuery(text, values) {
  const c = new pg.Client(admin);
  await c.connect();
  try {
    return (await c.query(text, values)).rows;
  } finally {
    await c.end();
  }
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

module.exports = { direct, bouncer, admin, uniqueName, adminQuery, sleep };
