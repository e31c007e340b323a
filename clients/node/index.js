'use strict';
/*
 * dsync for Node: Lock, LeaderElection, watch and withLock over dsync's
 * SQL functions, on node-postgres.  Fencing tokens are BigInt everywhere,
 * in results and in notification payloads alike.  A held lock is kept by
 * a keeper on a connection of its own: it renews every ttl/3, listens for
 * the lease's release or expiry, and declares the lock lost shortly before
 * the lease could expire if no renewal got through.
 */

const { EventEmitter } = require('node:events');
const os = require('node:os');
const crypto = require('node:crypto');
const { performance } = require('node:perf_hooks');
const pg = require('pg');

const WAIT_SLICE_MS = 5000;

// int8 as BigInt for our queries only, not for the application's.
const types = {
  getTypeParser(oid, format) {
    if (oid === 20 && format !== 'binary') return (v) => BigInt(v);
    return pg.types.getTypeParser(oid, format);
  },
};

const SQL = {
  acquire: 'SELECT dsync_acquire($1::text, $2::text, $3::interval, $4::interval, $5::jsonb) AS v',
  acquireShared: 'SELECT dsync_acquire_shared($1::text, $2::text, $3::interval, $4::interval, $5::jsonb) AS v',
  renew: 'SELECT dsync_renew($1::text, $2::text, $3::interval) AS v',
  release: 'SELECT dsync_release($1::text, $2::text) AS v',
  assertHeld: 'SELECT dsync_assert_held($1::text, $2::text) AS v',
  held: 'SELECT fencing, expires_at FROM dsync_leases WHERE lease = $1::text AND holder = $2::text',
  locked: 'SELECT EXISTS (SELECT 1 FROM dsync_leases WHERE lease = $1::text) AS v',
  leader: 'SELECT dsync_leader($1::text) AS v',
  semCreate: 'SELECT dsync_semaphore_create($1::text, $2::int) AS v',
  join: 'SELECT dsync_join($1::text, $2::text, $3::interval, $4::jsonb) AS v',
  leave: 'SELECT dsync_leave($1::text, $2::text) AS v',
  members: 'SELECT member, info, joined_at, expires_at, is_leader FROM dsync_members($1::text) ORDER BY member',
  channels: 'SELECT n, dsync_channel(n) AS ch FROM unnest($1::text[]) AS n',
  state: 'SELECT lease, holder, fencing, expires_at FROM dsync_leases WHERE lease = ANY($1::text[]) ORDER BY lease, holder',
  backendPid: 'SELECT pg_backend_pid() AS v',
  stats: 'SELECT * FROM dsync_stats',
  // The horizon and the events after a seq, in one snapshot (no prune between).
  // Where the event log stands: its last seq, or the horizon if it is empty.
  logTop: 'SELECT GREATEST(COALESCE((SELECT seq FROM dsync_event_log ORDER BY seq DESC LIMIT 1), 0), dsync_events_horizon())::text AS v',
  retention: "SELECT extract(epoch FROM current_setting('dsync.event_retention')::interval)::float8 AS v",
  catchUp: 'SELECT h.h::text AS horizon, e.seq::text AS seq, e.channel, e.payload::text AS payload FROM dsync_events_horizon() AS h(h) LEFT JOIN dsync_events_since($1::bigint, $2::text[]) AS e ON true ORDER BY e.seq',
};

class DsyncError extends Error {}
class LockLost extends DsyncError {}
class ListenUnavailable extends DsyncError {}

function seconds(value, what) {
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0) {
    throw new TypeError(`${what} must be a non-negative number of seconds`);
  }
  return value;
}

// A number of seconds as an interval literal the server parses exactly.
function interval(sec) {
  return `${(Math.round(sec * 1e6) / 1e6).toFixed(6)} seconds`;
}

function nameArg(value, what) {
  if (typeof value !== 'string' || value === '') throw new TypeError(`${what} must be a non-empty string`);
  return value;
}

function defaultHolder() {
  return `${os.hostname()}:${process.pid}:${crypto.randomBytes(4).toString('hex')}`;
}

function jsonb(info) {
  return info === undefined || info === null ? null : JSON.stringify(info);
}

// node-postgres gives timestamptz as Date; keep it so (time zone aware).
function parseTime(text) {
  return text === undefined || text === null ? null : new Date(text);
}

/*
 * The event a dsync notification carries, or null.  Integers that may
 * exceed 2^53 (fencing, seq) become BigInt without passing through a
 * JavaScript number.
 */
function parsePayload(channel, payload) {
  let data;
  try {
    data = JSON.parse(String(payload).replace(/"(fencing|seq)":\s*(\d+)/g, '"$1":"$2"'));
  } catch (e) {
    return null;
  }
  if (data === null || typeof data !== 'object' || typeof data.event !== 'string') return null;
  const name = data.lease ?? data.group ?? data.name;
  if (typeof name !== 'string') return null;
  return {
    kind: data.event,
    name,
    holder: data.holder ?? data.member ?? null,
    fencing: data.fencing !== undefined && data.fencing !== null ? BigInt(data.fencing) : null,
    expiresAt: parseTime(data.expires_at),
    seq: data.seq !== undefined && data.seq !== null ? BigInt(data.seq) : null,
    channel,
    raw: data,
  };
}

// Errors of a connection rather than of a statement (SQLSTATE class 08,
// 57P01-57P03 and 57P05, or node's own socket and name lookup errors).
const CONNECTION_ERRORS = new Set(['57P01', '57P02', '57P03', '57P05', 'ECONNREFUSED', 'ECONNRESET',
  'ECONNABORTED', 'ENOENT', 'EPIPE', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOTFOUND', 'EAI_AGAIN']);
function isConnectionError(e) {
  const code = e && e.code;
  if (!code) return e instanceof Error && /connect|terminat|ended|closed/i.test(e.message);
  return code.startsWith('08') || CONNECTION_ERRORS.has(code);
}

class Connector {
  constructor(opts) {
    const { connectionString, config, pool } = opts;
    const given = [connectionString, config, pool].filter((x) => x !== undefined).length;
    if (given !== 1) throw new TypeError('give exactly one of connectionString, config and pool');
    this.pool = pool;
    this.config = pool ? pool.options : config ?? { connectionString };
  }

  client(applicationName) {
    return new pg.Client(applicationName ? { application_name: applicationName, ...this.config } : this.config);
  }

  // One statement: on the pool, or on a client of our own kept open
  // (a connection per statement would cost a new server process each).
  async query(text, values) {
    if (this.pool) {
      const r = await this.pool.query({ text, values, types });
      return r.rows;
    }
    if (!this._own) {
      const c = this.client();
      c.on('error', () => {   // a connection ended under us: the query rejects
        if (this._own === connecting) this._own = null;
      });
      const connecting = c.connect().then(() => c);
      this._own = connecting;
      connecting.catch(() => { if (this._own === connecting) this._own = null; });
    }
    const own = this._own;
    const c = await own;
    try {
      return (await c.query({ text, values, types })).rows;
    } catch (e) {
      if (isConnectionError(e) && this._own === own) {
        this._own = null;
        c.end().catch(() => {});
      }
      throw e;
    }
  }

  async close() {
    const own = this._own;
    this._own = null;
    if (own) await own.then((c) => c.end()).catch(() => {});
  }

  async value(text, values) {
    const rows = await this.query(text, values);
    return rows.length ? rows[0].v : null;
  }
}

async function behindPooler(client) {
  const r = await client.query(SQL.backendPid);
  return r.rows[0].v !== client.processID;
}

async function listenOn(client, names) {
  const r = await client.query({ text: SQL.channels, values: [names] });
  const chans = new Map();
  for (const row of r.rows) {
    chans.set(row.ch, row.n);
    await client.query(`LISTEN ${client.escapeIdentifier(row.ch)}`);
  }
  return chans;
}

async function senderPids(client) {
  const r = await client.query(SQL.stats);
  const row = r.rows[0] || {};
  const pids = row.sender_pids ?? (row.sender_pid ? [row.sender_pid] : []);
  return new Set((pids || []).filter((p) => p !== null).map(Number));
}

/*
 * A lease held for ttl seconds and renewed while held.  Emits 'lost'
 * (with the reason) the moment the lease is known to be gone.
 */
class Lock extends EventEmitter {
  constructor(name, opts = {}) {
    super();
    this.name = nameArg(name, 'name');
    this.ttl = seconds(opts.ttl ?? 30, 'ttl');
    if (this.ttl <= 0) throw new TypeError('ttl must be positive');
    this.holder = opts.holder !== undefined ? nameArg(opts.holder, 'holder') : defaultHolder();
    this.info = opts.info;
    this.listen = opts.listen;
    this.permits = opts.permits;
    this.connector = new Connector(opts);
    this.token = null;
    this.lost = false;
    this.lostReason = null;
    this._keeper = null;
    this._client = null;
    this._created = false;
  }

  async acquire({ blocking = true, timeout = null } = {}) {
    const deadline = timeout === null ? null : Date.now() + seconds(timeout, 'timeout') * 1000;
    if (this.permits !== undefined && !this._created) {
      await this.connector.value(SQL.semCreate, [this.name, this.permits]);
      this._created = true;
    }
    for (;;) {
      let waitMs = 0;
      if (blocking) waitMs = deadline === null ? WAIT_SLICE_MS : Math.max(0, Math.min(WAIT_SLICE_MS, deadline - Date.now()));
      const token = await this.connector.value(this.shared ? SQL.acquireShared : SQL.acquire, [this.name, this.holder, interval(this.ttl), interval(waitMs / 1000), jsonb(this.info)]);
      if (token !== null) {
        this.token = token;
        const granted = performance.now();    // at most a round trip after the grant
        if (this._keeper && !this.lost) {
          this._keeper.holdsUntil = granted + this.ttl * 1000;   // reentrant: extended
        } else {
          await this._stopKeeper();
          await this._startKeeper(granted);
        }
        return true;
      }
      if (!blocking || (deadline !== null && Date.now() >= deadline)) return false;
    }
  }

  async release() {
    await this._stopKeeper();
    const released = await this.connector.value(SQL.release, [this.name, this.holder]);
    this.token = null;
    return released === true;
  }

  async renew() {
    const sent = performance.now();
    const expiry = await this.connector.value(SQL.renew, [this.name, this.holder, interval(this.ttl)]);
    if (expiry === null) this._setLost('the renewal found the lease no longer held');
    else if (this._keeper) this._keeper.holdsUntil = sent + this.ttl * 1000;
    return expiry;
  }

  async locked() {
    return (await this.connector.value(SQL.locked, [this.name])) === true;
  }

  async owned() {
    return (await this.connector.query(SQL.held, [this.name, this.holder])).length > 0;
  }

  check() {
    if (this.lost) throw new LockLost(`lease "${this.name}" of holder "${this.holder}" was lost: ${this.lostReason}`);
  }

  // In the caller's transaction, on the caller's client: the token (BigInt).
  async guard(client) {
    const r = await client.query({ text: SQL.assertHeld, values: [this.name, this.holder], types });
    return r.rows[0].v;
  }

  _setLost(why) {
    if (this.lost) return;
    this.lost = true;
    this.lostReason = why;
    this.emit('lost', why);
  }

  // The keeper's client: the one the lock's last hold left, if any, so
  // that taking a lock again costs no new server process and no LISTEN.
  // Its one notification listener serves whichever keeper is current.
  async _keeperClient() {
    if (this._client) return this._client;
    const client = this.connector.client(`dsync keeper ${this.name}`.slice(0, 63));
    client.on('error', () => {   // a broken keeper connection: the watchdog decides
      if (this._client === client) this._client = null;
    });
    client.on('notification', (msg) => {
      const k = this._keeper;
      const ev = parsePayload(msg.channel, msg.payload);
      if (k && k.armed && !k.stopped && ev && ev.name === this.name && ev.holder === this.holder &&
          (ev.kind === 'released' || ev.kind === 'expired')) {
        this._setLost(`the lease was ${ev.kind}`);
      }
    });
    await client.connect();
    if (this.listen !== false && !(await behindPooler(client))) await listenOn(client, [this.name]);
    this._client = client;
    return client;
  }

  async _startKeeper(granted) {
    this.lost = false;
    this.lostReason = null;
    // holdsUntil: the lease lasts at least until then (performance.now()),
    // reckoned from when the grant or renewal was sent, whatever the
    // client's and the server's wall clocks say.
    const k = { client: null, holdsUntil: granted + this.ttl * 1000, timers: [], stopped: false, armed: false };
    this._keeper = k;
    const margin = Math.min(1000, this.ttl * 100);
    const watchdog = () => {
      if (k.stopped || this.lost) return;
      if (k.holdsUntil - margin <= performance.now()) {
        this._setLost('no renewal could be confirmed before the lease could expire');
      }
    };
    k.timers.push(setInterval(watchdog, Math.max(10, margin / 2)));
    try {
      k.client = await this._keeperClient();
      // After the LISTEN, so that a release in between is not missed.
      // Notifications delivered before its answer are older than it (the
      // release of the previous hold, say): only later ones count.
      const held = await k.client.query({ text: SQL.held, values: [this.name, this.holder], types });
      k.armed = true;
      if (!held.rows.length) this._setLost('the lease was not held by the time the keeper started');
    } catch (e) {
      // No keeper: give the lease back rather than hold it unrenewed.
      await this._stopKeeper();
      await this.connector.value(SQL.release, [this.name, this.holder]).catch(() => {});
      this.token = null;
      throw e;
    }
    const tick = async () => {
      if (k.stopped || this.lost) return;
      const sent = performance.now();
      try {
        const client = await this._keeperClient();
        const r = await client.query({ text: SQL.renew, values: [this.name, this.holder, interval(this.ttl)], types });
        const expiry = r.rows[0].v;
        if (k.stopped) return;
        if (expiry === null) this._setLost('the renewal found the lease no longer held');
        else k.holdsUntil = sent + this.ttl * 1000;
      } catch (e) {
        // A broken keeper connection (the next tick connects again): the
        // watchdog decides.
        if (isConnectionError(e) && this._client) {
          const dead = this._client;
          this._client = null;
          dead.end().catch(() => {});
        }
      }
    };
    k.timers.push(setInterval(tick, (this.ttl * 1000) / 3));
  }

  async _stopKeeper() {
    const k = this._keeper;
    this._keeper = null;
    if (!k) return;
    k.stopped = true;
    for (const t of k.timers) clearInterval(t);
  }

  // Ends the lock's connections; call it when done with the lock.
  async close() {
    await this._stopKeeper();
    const client = this._client;
    this._client = null;
    if (client) await client.end().catch(() => {});
    await this.connector.close();
  }
}

// A lease with permits: at most `permits` holders at once.
class Semaphore extends Lock {
  constructor(name, permits, opts = {}) {
    if (!Number.isInteger(permits) || permits < 1) throw new TypeError('permits must be a positive integer');
    super(name, { ...opts, permits });
  }
}

// The shared side of a read-write lock: any number of ReadLocks of a name
// at once, never with a Lock of it; a waiting Lock goes before later ReadLocks.
class ReadLock extends Lock {
  constructor(name, opts = {}) {
    super(name, opts);
    this.shared = true;
  }
}

// Run fn while holding the lock; released in all cases.
async function withLock(name, fn, opts = {}) {
  const lock = new Lock(name, opts);
  if (!(await lock.acquire({ timeout: opts.timeout ?? null }))) {
    throw new DsyncError(`could not acquire lease "${name}" within the timeout`);
  }
  try {
    return await fn(lock);
  } finally {
    await lock.release().catch(() => {});
    await lock.close();
  }
}

/*
 * Leader election: emits 'elected' (token), 'lost' (reason) and
 * 'members' (the group's live members, at each refresh).
 */
class LeaderElection extends EventEmitter {
  constructor(group, opts = {}) {
    super();
    this.group = nameArg(group, 'group');
    this.ttl = seconds(opts.ttl ?? 15, 'ttl');
    this.member = opts.member !== undefined ? nameArg(opts.member, 'member') : defaultHolder();
    this.info = opts.info;
    this.lock = new Lock(this.group, { ...opts, ttl: this.ttl, holder: this.member });
    this.lock.on('lost', (why) => {
      if (this.isLeader) {
        this.isLeader = false;
        this.emit('lost', why);
      }
    });
    this.isLeader = false;
    this._stopping = false;
    this._loop = null;
  }

  get token() {
    return this.isLeader ? this.lock.token : null;
  }

  async leaderExists() {
    return (await this.lock.connector.value(SQL.leader, [this.group])) !== null;
  }

  async members() {
    const rows = await this.lock.connector.query(SQL.members, [this.group]);
    return rows.map((r) => ({ member: r.member, info: r.info, joinedAt: r.joined_at, expiresAt: r.expires_at, isLeader: r.is_leader }));
  }

  start() {
    this._stopping = false;
    this.error = null;
    this._loop = this._run().catch((e) => {
      this.error = e;
      if (this.listenerCount('error') > 0) this.emit('error', e);
    });
    return this;
  }

  async _run() {
    const period = (this.ttl * 1000) / 3;
    let nextJoin = 0;
    while (!this._stopping) {
      try {
        if (Date.now() >= nextJoin) {
          await this.lock.connector.value(SQL.join, [this.group, this.member, interval(this.ttl), jsonb(this.info)]);
          nextJoin = Date.now() + period;
          this.emit('members', await this.members());
        }
        if (this.isLeader) {
          if (this.lock.lost) {
            this.isLeader = false;
            this.emit('lost', this.lock.lostReason);
            continue;
          }
          await new Promise((r) => setTimeout(r, Math.max(0, Math.min(500, nextJoin - Date.now()))));
          continue;
        }
        const slice = Math.max(0.05, Math.min(period, nextJoin - Date.now()) / 1000);
        if (await this.lock.acquire({ timeout: slice })) {
          if (this._stopping) break;
          if (this.lock.lost) continue;      // lost already: campaign on
          this.isLeader = true;
          this.emit('elected', this.lock.token);
        }
      } catch (e) {
        if (!isConnectionError(e)) throw e;
        // The server went away: the lease's watchdog decides; retry.
        await new Promise((r) => setTimeout(r, 500));
      }
    }
  }

  async stop() {
    this._stopping = true;
    try {
      if (this._loop) await this._loop;
    } finally {
      this._loop = null;
      // Leadership ends before the lease goes.
      if (this.isLeader) {
        this.isLeader = false;
        this.emit('lost', 'stopped');
      }
      await this.lock.release().catch(() => {});
      await this.lock.connector.value(SQL.leave, [this.group, this.member]).catch(() => {});
      await this.lock.close();
    }
  }
}

// Rows of a query on the event log, or null if the installed version
// keeps none (before 1.4).
async function logQuery(client, text, values) {
  try {
    return (await client.query(text, values)).rows;
  } catch (e) {
    if (e && (e.code === '42P01' || e.code === '42883')) return null;
    throw e;
  }
}

/*
 * The events of the given names as an async iterator: first the current
 * state (kind "state", one per live holder), then each notification dsync
 * sent.  Ends after `timeout` seconds without an event (default: never).
 * With `after` (the last seq an earlier watch yielded), it resumes instead:
 * the events sent since are replayed from the server's event log, each
 * once, and if some are gone (older than dsync.event_retention) an event
 * of kind "gap" (seq: the last one lost) comes first, then the state.
 * A lost connection (a failover, a restart) is reconnected, through the
 * same connection settings, and resumed in the same way, unless
 * `reconnect: false`; then the connection error is thrown.
 */
async function* watch(names, opts = {}) {
  names = names.map((n) => nameArg(n, 'name'));
  const reconnect = opts.reconnect !== false;
  let last = opts.after === undefined || opts.after === null ? null : BigInt(opts.after);
  if (last !== null && last < 0n) throw new RangeError('after must be a non-negative seq');
  let started = last !== null;    // a position to resume from is known
  let lostAt = null;              // when the last connection was lost
  const connector = new Connector(opts);
  for (;;) {
    const client = connector.client('dsync watch');
    const queue = [];
    let wake = null;
    client.on('notification', (msg) => {
      queue.push(msg);
      if (wake) wake();
    });
    client.on('error', (e) => {
      queue.push(e);
      if (wake) wake();
    });
    try {
      await client.connect();
      if (await behindPooler(client)) {
        throw new ListenUnavailable('LISTEN does not work through this connection: it goes through a connection pooler in transaction mode; watch needs a direct connection (or a pool in session mode)');
      }
      if (!started) {
        // Where the log stands before we listen: nothing later is missed.
        const top = await logQuery(client, SQL.logTop, []);
        last = top ? BigInt(top[0].v) : null;
      }
      const chans = await listenOn(client, names);
      let senders = await senderPids(client);
      let gap = null;
      let missed = [];
      const rows = last === null ? null : await logQuery(client, SQL.catchUp, [String(last), names]);
      if (rows) {
        const horizon = BigInt(rows[0].horizon);
        if (horizon > last) {
          if (started) gap = { kind: 'gap', name: '', holder: null, fencing: null, expiresAt: null, seq: horizon, channel: null, raw: {} };
          last = horizon;
        }
        missed = rows.filter((r) => r.seq !== null);
      }
      if (!gap && lostAt !== null && last !== null) {
        // Away for longer than the log runs on after its last watcher left:
        // events it never logged may have been missed.
        const retention = Number((await client.query(SQL.retention)).rows[0].v);
        if ((Date.now() - lostAt) / 1000 >= retention) {
          gap = { kind: 'gap', name: '', holder: null, fencing: null, expiresAt: null, seq: last, channel: null, raw: {} };
        }
      }
      const state = !started || gap || last === null ? (await client.query({ text: SQL.state, values: [names], types })).rows : [];
      started = true;
      lostAt = null;
      if (gap) yield gap;
      for (const r of state) {
        yield { kind: 'state', name: r.lease, holder: r.holder, fencing: r.fencing, expiresAt: r.expires_at, seq: null, channel: null, raw: {} };
      }
      // A notification that repeats a replayed event is skipped by its seq.
      const fresh = (ev) => {
        if (ev.seq === null || last === null) return true;
        if (ev.seq <= last) return false;
        last = ev.seq;
        return true;
      };
      for (const r of missed) {
        const ev = parsePayload(r.channel, r.payload);
        if (ev && fresh(ev)) yield ev;
      }
      for (;;) {
        if (!queue.length) {
          let timer = null;
          const got = await new Promise((resolve) => {
            wake = () => resolve(true);
            if (opts.timeout !== undefined && opts.timeout !== null) timer = setTimeout(() => resolve(false), seconds(opts.timeout, 'timeout') * 1000);
          });
          if (timer) clearTimeout(timer);
          wake = null;
          if (!got && !queue.length) return;
        }
        const msg = queue.shift();
        if (msg instanceof Error) throw msg;
        if (!chans.has(msg.channel)) continue;
        if (senders.size && !senders.has(msg.processId)) {
          senders = await senderPids(client);
          if (!senders.has(msg.processId)) continue;
        }
        const ev = parsePayload(msg.channel, msg.payload);
        if (ev && fresh(ev)) yield ev;
      }
    } catch (e) {
      if (!reconnect || e instanceof DsyncError || !isConnectionError(e)) throw e;
      if (started && lostAt === null) lostAt = Date.now();     // the first loss counts, not each retry
      await new Promise((resolve) => setTimeout(resolve, started ? 200 : 1000));
    } finally {
      await client.end().catch(() => {});
    }
  }
}

module.exports = {
  Lock, ReadLock, Semaphore, LeaderElection, watch, withLock, parsePayload, defaultHolder,
  DsyncError, LockLost, ListenUnavailable, types,
};
