'use strict';
/*
 * Where a client's connections come from: a connection string, a
 * node-postgres client config, or the caller's pg.Pool (whose options the
 * keeper's and the waits' own connections copy), and the key under which
 * objects made with equal settings share one default client.
 */

// Milliseconds a connection may take to open, unless the caller's settings
// say (connectionTimeoutMillis, connect_timeout in the connection string,
// or PGCONNECT_TIMEOUT).  node-postgres waits for ever by default: a keeper
// stuck connecting for a whole outage renews nothing and reports nothing.
const CONNECT_TIMEOUT_MS = 5000;

// pg.Pool options that are not a client's: not copied to our own clients.
const POOL_ONLY = new Set(['max', 'min', 'maxUses', 'allowExitOnIdle', 'maxLifetimeSeconds', 'log',
  'Client', 'Promise', 'idleTimeoutMillis', 'poolSize', 'verify']);

// One client's connection settings.
class ConnectionSettings {
  // opts: exactly one of connectionString, config and pool.
  constructor(opts) {
    const { connectionString, config, pool } = opts;
    const given = [connectionString, config, pool].filter((x) => x !== undefined && x !== null).length;
    if (given !== 1) throw new TypeError('give exactly one of client, connectionString, config and pool');
    if (connectionString !== undefined && connectionString !== null && typeof connectionString !== 'string') {
      throw new TypeError('connectionString must be a string');
    }
    if (pool && typeof pool.connect !== 'function') throw new TypeError('pool must be a pg.Pool');
    this.pool = pool || null;
    let base;
    if (pool) {
      base = {};
      for (const [k, v] of Object.entries(pool.options || {})) if (!POOL_ONLY.has(k)) base[k] = v;
    } else if (config) {
      base = { ...config };
    } else {
      base = { connectionString };
    }
    this.base = base;
  }

  /*
   * A client config for one kind of our connections: the caller's settings,
   * with an application_name that tells them apart in pg_stat_activity
   * ("dsync", "dsync keeper", "dsync watch", or the caller's name with the
   * same suffixes), and `extra` defaults the caller's settings override.
   */
  clientConfig(kind, extra = {}) {
    const app = this.base.application_name ?? 'dsync';
    const cfg = { connectionTimeoutMillis: this.connectTimeoutMillis(), ...extra, ...this.base };
    cfg.application_name = kind ? `${app} ${kind}` : app;
    return cfg;
  }

  // The connect timeout in ms: the caller's (in seconds where libpq's
  // names are used), else dsync's default.
  connectTimeoutMillis() {
    if (this.base.connectionTimeoutMillis !== undefined) return this.base.connectionTimeoutMillis;
    let seconds = this.base.connect_timeout;
    if (seconds === undefined && this.base.connectionString) {
      const m = /(?:^|[?&\s])connect_timeout=(\d+)/.exec(this.base.connectionString);
      if (m) seconds = m[1];
    }
    if (seconds === undefined || seconds === null || seconds === '') seconds = process.env.PGCONNECT_TIMEOUT;
    const n = Number(seconds);
    return seconds !== undefined && seconds !== '' && Number.isFinite(n) && n > 0 ? Math.max(n, 2) * 1000 : CONNECT_TIMEOUT_MS;
  }

  // What identifies a shared default client: the pool itself, or the
  // connection string or config by value (functions by identity).
  static key(opts, extra) {
    if (opts.pool) return `pool:${identity(opts.pool)}|${stable(extra)}`;
    if (opts.config) return `config:${stable(opts.config)}|${stable(extra)}`;
    return `cs:${opts.connectionString}|${stable(extra)}`;
  }
}

const ids = new WeakMap();
let nextId = 0;

// A number per object, for keys that must tell objects apart by identity.
function identity(obj) {
  if (!ids.has(obj)) ids.set(obj, ++nextId);
  return ids.get(obj);
}

// JSON with sorted keys, functions and class instances by identity: equal
// configs written twice share a client, different ones never do.
function stable(value) {
  return JSON.stringify(value, (k, v) => {
    if (typeof v === 'function') return `fn#${identity(v)}`;
    if (typeof v === 'bigint') return `${v}n`;
    if (v && typeof v === 'object' && !Array.isArray(v)) {
      const proto = Object.getPrototypeOf(v);
      if (proto !== Object.prototype && proto !== null && !Buffer.isBuffer(v)) return `obj#${identity(v)}`;
      const out = {};
      for (const key of Object.keys(v).sort()) out[key] = v[key];
      return out;
    }
    return v;
  }) ?? 'undefined';
}

module.exports = { ConnectionSettings, CONNECT_TIMEOUT_MS };
