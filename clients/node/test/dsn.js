'use strict';
// The connection settings clients/with_server.py passes in the environment
// (libpq keyword strings), as node-postgres client configs: for the tests
// and the benchmark alike.

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

module.exports = { config };
