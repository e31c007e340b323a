'use strict';
// The connection settings clients/with_server.py passes in the environment
// (libpq keyword strings), as node-postgres client configs, and one-off
// queries on them: for the tests and the benchmark alike.
// pg from clients/node's node_modules, as the library uses it.
const pg = require('pg');

// A libpq keyword string (dbname=, user=, host=, port=) as a pg config.
function config(dsn) {
  const cfg = {};
  for (const part of (dsn || '').split(/\s+/)) {
    const [k, v] = part.split('=');
    if (k === 'dbname') cfg.database = v;
    else if (k === 'user') cfg.user = v;
    else if (k === 'host') cfg.host = v;
    else if (k === 'port') cfg.port = Number(v);
  }
  return cfg;
}

// The rows of one statement, on a connection of its own made with cfg.
async function query(cfg, text, values) {
  const c = new pg.Client(cfg);
  await c.connect();
  try {
    return (await c.query(text, values)).rows;
  } finally {
    await c.end();
  }
}

module.exports = { config, query };
