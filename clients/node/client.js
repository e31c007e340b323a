'use strict';
/*
 * The Client: one per process (or per database), shared by every lock,
 * semaphore, event, election and watch made from it.  It owns the
 * connections:
 *
 *   - a small pool for statements (a pg.Pool of poolSize, or the caller's
 *     pool): each statement checks a connection out for itself, runs, reads
 *     its whole result and gives it back, so no connection ever has two of
 *     our statements in flight;
 *   - connections of their own for blocking waits (a second pg.Pool, not
 *     capped small, idle ones closed after 10 s): a release never queues
 *     behind the waiters it is about to wake;
 *   - one keeper (keeper.js) for every lease held.
 *
 * Holding a thousand leases costs the keeper's connection and the pool's.
 * clients/DESIGN.md tells the rules; ledger.js holds the bookkeeping.
 */

const crypto = require('node:crypto');
const net = require('node:net');
const { performance } = require('node:perf_hooks');
const pg = require('pg');
const sql = require('./sql');
const errors = require('./errors');
const { ConnectionSettings } = require('./settings');
const { Keeper } = require('./keeper');
const { abortError, positive } = require('./args');

// The longest a blocking call waits inside the server in one statement:
// slices let the server's cleanup horizon move on and the client notice a
// timeout, a stop or an abort.
const WAIT_SLICE_MS = 5000;
// How long a name counts as contended after a try found it taken (a name
// contended for good pays one try per that long), and how many names are
// remembered at most (forgotten all at once beyond it).
const CONTENDED_MS = 1000;
const CONTENDED_KEPT = 1024;
// How long idle connections of blocking waits are kept for the next wait.
const WAIT_IDLE_MS = 10000;
// How long close() waits for the acquires in flight to settle (their
// waits are cancelled) before it ends the pools.
const CLOSE_WAIT_MS = 5000;

// Seconds a statement may go unanswered beyond the wait it asks of the
// server (the callTimeout option): dsync's statements take milliseconds;
// the bound is for a server process that stopped answering, and is wide
// enough for a slow commit (a synchronous standby far away).
const CALL_TIMEOUT = 30;
const MAX_CALL_TIMEOUT = 1000000;
const USED = Symbol('dsync.used');          // a pooled connection that ran a statement before
const GUARDED = Symbol('dsync.guarded');    // has our error listener
const CANCELLED = Symbol('dsync.cancelled');
// Whether a connection reaches the server itself (its backend pid is the
// one the server gave at connect), or a pooler (PgBouncer sends a key of
// its own): statements are prepared on the first only.
const DIRECT = Symbol('dsync.direct');
const noop = () => {};

// Refusals of a named statement before it runs, after which it is sent
// whole: the server does not have it (26000, at Bind), has another under
// its name (42P05, at Parse), or its result type changed under it (an
// extension update: 0A000 with this message, at Bind).
const UNPREPARED = new Set(['26000', '42P05']);
const REPLANNED = 'cached plan must not change result type';
const statementNames = new Map();

// The name a statement is prepared as: derived from its text, so that one
// prepared under the same name is the same.
function statementName(text) {
  let name = statementNames.get(text);
  if (name === undefined) {
    name = `dsync_${crypto.createHash('sha256').update(text).digest('hex').slice(0, 24)}`;
    statementNames.set(text, name);
  }
  return name;
}

/*
 * Runs text on conn and returns its rows.  On a connection that reaches
 * the server itself each statement is prepared once and then executed by
 * name (the server skips parsing and planning it: test/bench/wait_bench.js);
 * through a pooler, whose server connection changes between transactions,
 * statements are sent whole, and so they are from then on on a connection
 * whose server forgot one (a pool's DISCARD ALL).
 */
async function runStatement(conn, text, values) {
  if (conn[DIRECT] === undefined) conn[DIRECT] = !(await sql.behindPooler(conn));
  if (conn[DIRECT]) {
    try {
      return (await conn.query({ name: statementName(text), text, values, types: sql.types })).rows;
    } catch (e) {
      const code = e && e.code;
      if (!UNPREPARED.has(code) && !(code === '0A000' && String(e.message).includes(REPLANNED))) throw e;
      conn[DIRECT] = false;             // not the server it was prepared on: send it whole
    }
  }
  return (await conn.query({ text, values, types: sql.types })).rows;
}

/*
 * Sends PostgreSQL's cancel request for the statement running on conn (a
 * wait inside the server ends at once).  The connection is marked so it
 * is thrown away afterwards: a cancel that arrives late must not hit the
 * next statement run on it.
 */
function cancelStatement(conn) {
  if (!conn || conn.processID === null || conn[CANCELLED]) return;
  conn[CANCELLED] = true;
  const host = conn.host;
  const socket = host && host.startsWith('/')
    ? net.connect(`${host}/.s.PGSQL.${conn.port}`)
    : net.connect(conn.port, host);
  socket.on('error', noop);
  socket.setTimeout(5000, () => socket.destroy());
  socket.on('connect', () => {
    // CancelRequest: length 16, code 80877102, the backend's pid and key.
    const buf = Buffer.alloc(16);
    buf.writeInt32BE(16, 0);
    buf.writeInt32BE(80877102, 4);
    buf.writeInt32BE(conn.processID, 8);
    buf.writeInt32BE(conn.secretKey, 12);
    socket.end(buf);
  });
  socket.unref();
}

// The first row's v column of a statement's rows (null if none).
function first(rows) {
  return rows.length ? rows[0].v : null;
}

// A process's connection to dsync (see the top of this file).
class Client {
  /*
   * opts: one of connectionString, config (a node-postgres client config)
   * and pool (a pg.Pool); poolSize (2): connections kept for statements;
   * listen (null): false never LISTENs (a loss is noticed at the next
   * renewal), true requires LISTEN, null LISTENs where it works;
   * allowExitOnIdle (false): idle connections do not keep the process
   * alive (the default clients set it).
   */
  constructor(opts = {}) {
    const {
      poolSize = 2, listen = null, allowExitOnIdle = false, callTimeout = CALL_TIMEOUT, queue = true,
    } = opts;
    if (!Number.isInteger(poolSize) || poolSize < 1) throw new RangeError('poolSize must be a positive integer');
    if (callTimeout !== null && callTimeout !== undefined) {
      positive(callTimeout, 'callTimeout');
      // setTimeout fires at once past 2^31 - 1 ms.
      if (callTimeout > MAX_CALL_TIMEOUT) throw new RangeError(`callTimeout must be at most ${MAX_CALL_TIMEOUT} seconds`);
    }
    // Seconds a statement may go unanswered beyond the wait it asks of the
    // server, before its connection is ended (null: no bound).
    this.callTimeout = callTimeout ?? null;
    if (listen !== null && listen !== undefined && typeof listen !== 'boolean') {
      throw new TypeError('listen must be true, false or null');
    }
    this._settings = new ConnectionSettings(opts);
    this.listen = listen ?? null;
    // Blocking acquires wait in the line without a connection where the
    // keeper can LISTEN for their grants (dsync_queue), else in a backend.
    this.queue = queue !== false;
    this._queueKey = `js-${crypto.randomBytes(12).toString('hex')}`;
    this._queueChannel = `dsyncq:${this._queueKey}`;
    this.poolSize = poolSize;
    this._ownPool = !this._settings.pool;
    this._pool = this._settings.pool || new pg.Pool({
      ...this._settings.clientConfig(null), max: poolSize, idleTimeoutMillis: 0, allowExitOnIdle,
    });
    this._waitPool = new pg.Pool({
      ...this._settings.clientConfig(null), max: Infinity, idleTimeoutMillis: WAIT_IDLE_MS, allowExitOnIdle,
    });
    for (const pool of this._ownPool ? [this._pool, this._waitPool] : [this._waitPool]) {
      // An idle connection the server ended is dropped by the pool; its
      // error is no business of the application's.
      pool.on('error', noop);
    }
    this._keeper = new Keeper(this);
    this._waiting = new Set();      // wait connections inside a statement now
    this._acquiring = new Set();    // acquires in flight (promises), which close() lets settle
    this._contended = new Map();    // name -> until when a blocking acquire waits at once (_acquire)
    this._elections = new Set();    // running campaigns, stopped by close()
    this._closing = null;
    this._closed = false;
    this._database = undefined;     // the name of the database, once a connection told it
  }

  // -- recipes ---------------------------------------------------------------------

  // A Lock on this client (see Lock for the options).
  lock(name, opts = {}) {
    const { Lock } = require('./lock');
    return new Lock(name, { ...opts, client: this });
  }

  // A ReadLock (the shared side of a read-write lock) on this client.
  readLock(name, opts = {}) {
    const { ReadLock } = require('./lock');
    return new ReadLock(name, { ...opts, client: this });
  }

  // A Semaphore: created with permits (idempotent; SemaphoreMismatch if it
  // exists with another count), or attached to an existing one when
  // permits is undefined (see Semaphore.attach).
  async semaphore(name, permits, opts = {}) {
    const { Semaphore } = require('./lock');
    if (permits === undefined || permits === null) return Semaphore.attach(name, { ...opts, client: this });
    return Semaphore.create(name, permits, { ...opts, client: this });
  }

  // An Event (one-to-one signal) on this client.
  event(name) {
    const { Event } = require('./event');
    return new Event(name, { client: this });
  }

  // A LeaderElection on this client (not started).
  election(group, opts = {}) {
    const { LeaderElection } = require('./election');
    return new LeaderElection(group, { ...opts, client: this });
  }

  // watch() on this client's server, on a connection of its own.
  watch(names, opts = {}) {
    const { watch } = require('./watch');
    return watch(names, { ...opts, client: this });
  }

  // -- statements ----------------------------------------------------------------------

  // Throws if the client can no longer be used.
  _checkUsable() {
    if (this._closing) throw new errors.DsyncError('the dsync client is closed');
  }

  /*
   * Runs one statement on a connection of the caller's own and returns its
   * rows.  wait: on a wait connection.  A stale idle connection (the
   * server ended it) is replaced and, with retry, the statement run again
   * on a new one; retry: false for statements that must not run twice
   * (a release, a signal).  timed.sent gets the performance.now() at which
   * the statement was sent.  signal: an AbortSignal that cancels the
   * statement in the server.
   */
  async _query(text, values, what, {
    wait = false, retry = true, timed = null, signal = null, internal = false, serverWaitMs = 0,
  } = {}) {
    const pool = wait ? this._waitPool : this._pool;
    for (let attempt = 0; ; attempt++) {
      if (!internal) this._checkUsable();
      if (signal && signal.aborted) throw abortError(signal);
      let conn;
      try {
        conn = await pool.connect();
      } catch (e) {
        if (this._closing && !internal) throw new errors.DsyncError('the dsync client is closed', { cause: e });
        throw new errors.DsyncConnectionError(`${what}: cannot connect: ${String(e.message).split('\n')[0]}`, { cause: e });
      }
      if (!conn[GUARDED]) {
        // Errors of a checked-out connection reach its query; without a
        // listener pg would also throw them as an 'error' event.
        conn[GUARDED] = true;
        conn.on('error', noop);
        // The database's name, for the hint of an error: every connection
        // of the client's settings has the same.
        if (this._database === undefined) this._database = conn.database;
      }
      const reused = conn[USED] === true;
      conn[USED] = true;
      let onAbort = null;
      if (wait) this._waiting.add(conn);
      if (signal) {
        onAbort = () => cancelStatement(conn);
        signal.addEventListener('abort', onAbort, { once: true });
      }
      if (timed) timed.sent = performance.now();
      let rows;
      let failure = null;
      // The bound (see callTimeout): a server process that is stopped keeps
      // its socket open and the kernel acknowledges what is sent, so only
      // a timer of ours ends the wait, by ending the connection.
      const boundMs = this.callTimeout === null ? null : this.callTimeout * 1000 + serverWaitMs;
      let cut = false;
      const timer = boundMs === null ? null : setTimeout(() => {
        cut = true;
        // Cancelled too: the server process, once it runs again, must not
        // go on with a statement (a grant) whose answer nobody reads.
        cancelStatement(conn);
        if (conn.connection && conn.connection.stream) conn.connection.stream.destroy();
        else conn.end().catch(noop);            // pg-native: no socket of ours
      }, boundMs);
      try {
        rows = await runStatement(conn, text, values);
      } catch (e) {
        failure = e;
      } finally {
        if (timer) clearTimeout(timer);
        if (wait) this._waiting.delete(conn);
        if (onAbort) signal.removeEventListener('abort', onAbort);
      }
      const broken = cut || (failure !== null && errors.isConnectionError(failure));
      conn.release(broken || conn[CANCELLED] ? (failure || new Error('cancelled')) : undefined);
      if (cut && failure !== null) {
        throw new errors.DsyncConnectionError(`${what}: the server did not answer within ${boundMs / 1000} s `
          + '(callTimeout); the connection was closed', { cause: failure });
      }
      if (failure === null) return rows;
      if (signal && signal.aborted) throw abortError(signal);
      if (broken && retry && attempt === 0 && reused && !this._closing) continue;
      throw await errors.diagnose(failure, what, {
        database: this._database, extensionCreated: () => this._extensionCreated(),
      });
    }
  }

  /*
   * Whether pg_extension has dsync in this database.  Asked after a dsync_
   * function or relation was found missing (42883, 42P01), which is either
   * no CREATE EXTENSION there (ExtensionNotCreated) or an older version
   * without that function (the server's error as it is).  Unknown (the
   * question failed) counts as created: the server's own error is shown.
   */
  async _extensionCreated() {
    try {
      return await this._value(sql.EXTENSION_CREATED, [], 'looking for the dsync extension', { internal: true, retry: false }) !== false;
    } catch (e) {
      return true;
    }
  }

  // The first row's first value of a statement (see _query).
  async _value(text, values, what, opts) {
    return first(await this._query(text, values, what, opts));
  }

  /*
   * Takes a lease: at once on the statement pool, then, if it is not free
   * and the caller waits, inside the server in slices on a wait
   * connection.  Returns the token (null if not had) and when the
   * statement that got it was sent.  deadline: a performance.now() value
   * or null (no limit).  ttlMs: the lease's ttl; a slice is at most a
   * third of it, because the grant is reckoned from when its statement
   * was sent and must leave the keeper time to renew it before the
   * watchdog's deadline.
   */
  async _acquire(text, name, holder, ttlText, ttlMs, info, blocking, deadline, what, signal) {
    const timed = {};
    const slice = Math.min(WAIT_SLICE_MS, ttlMs / 3);
    // A name a blocking acquire found taken lately goes straight to a wait
    // inside the server: under contention the try nearly always fails,
    // and it cost a statement per acquire (test/bench/wait_bench.py).
    const now = performance.now();
    let token = null;
    let tried = false;
    if (!(blocking && (this._contended.get(name) || 0) > now && (deadline === null || deadline > now))) {
      tried = true;
      token = await this._value(text, [name, holder, ttlText, sql.interval(0), info], what, { timed, signal });
      if (token === null && blocking) {
        if (this._contended.size >= CONTENDED_KEPT) this._contended.clear();
        this._contended.set(name, now + CONTENDED_MS);
      }
    }
    // Not had at once: wait in the line, without a connection, where we can.
    if (token === null && blocking && this.queue) {
      const got = await this._queueWait(name, holder, ttlText, ttlMs, text === sql.ACQUIRE_SHARED,
        deadline, what, signal);
      if (got) {
        if (got.token !== null && info !== null && info !== undefined) {
          // A queued grant carries no info: the holder's acquire again
          // (reentrant: the same token) sets it.
          const t = {};
          const again = await this._value(text, [name, holder, ttlText, sql.interval(0), info], what,
            { timed: t, signal });
          if (again !== null && BigInt(again) === BigInt(got.token)) {
            return { token: got.token, sent: Math.max(got.sent, t.sent) };
          }
        }
        return got;
      }
    }
    while (token === null && blocking) {
      // If the time ran out as the try was skipped, a wait of 0 tries now.
      const left = Math.max(0, deadline === null ? slice : Math.min(slice, deadline - performance.now()));
      if (left <= 0 && tried) break;
      tried = true;
      token = await this._value(text, [name, holder, ttlText, sql.interval(left / 1000), info], what,
        { wait: true, timed, signal, serverWaitMs: left });
      if (deadline !== null && performance.now() >= deadline) break;
    }
    return { token, sent: timed.sent };
  }

  /*
   * Waits in name's line without a connection (dsync_queue): the keeper
   * wakes this call when its grant is announced, and it claims it; every
   * third of the ttl it asks anyway, which keeps its place.  Returns null
   * if it cannot queue (the keeper cannot LISTEN: a pooler in transaction
   * mode), for the caller to wait in a backend.  Leaving for any reason
   * (time out, abort, an error) leaves the line, and a grant made
   * meanwhile and not claimed is given back by the server.
   */
  async _queueWait(name, holder, ttlText, ttlMs, shared, deadline, what, signal) {
    const keeper = this._keeper;
    const left = deadline === null ? null : deadline - performance.now();
    const w = await keeper.queueJoin(name, holder,
      left === null ? Math.min(2000, ttlMs / 3) : Math.max(0, Math.min(2000, ttlMs / 3, left)));
    if (!w) return null;
    let granted = false;
    try {
      let timed = {};
      let token = await this._value(sql.QUEUE, [name, holder, ttlText, this._queueKey, shared], what,
        { timed, signal });
      if (token !== null) {
        granted = true;
        return { token, sent: timed.sent };
      }
      for (;;) {
        const now = performance.now();
        if (deadline !== null && now >= deadline) return { token: null, sent: undefined };
        const wait = deadline === null ? ttlMs / 3 : Math.min(ttlMs / 3, deadline - now);
        await w.wait(Math.max(0, wait), signal);
        if (signal && signal.aborted) throw abortError(signal);
        timed = {};
        const rows = await this._query(sql.CLAIM, [name, holder], what, { timed, signal });
        const { state, fencing, expires_in: expiresIn } = rows[0];
        if (state === 'granted') {
          granted = true;
          // The lease ends no later than expires_in after the claim was
          // sent: as if granted ttl before that.
          return { token: fencing, sent: timed.sent + expiresIn * 1000 - ttlMs };
        }
        if (state === 'gone') {
          // The place lapsed or was lost (a restart): queue again.
          timed = {};
          token = await this._value(sql.QUEUE, [name, holder, ttlText, this._queueKey, shared], what,
            { timed, signal });
          if (token !== null) {
            granted = true;
            return { token, sent: timed.sent };
          }
        }
      }
    } finally {
      keeper.queueLeave(w);
      if (!granted) {
        // The place lapses at its ttl if this fails; a grant passes on.
        await this._value(sql.UNQUEUE, [name, holder], what).catch(noop);
      }
    }
  }

  /*
   * Waits for a one-to-one signal: at once on the statement pool, then in
   * slices on a wait connection.  Neither is retried (a statement that may
   * have consumed the signal must not run again).
   */
  async _eventWait(name, deadline, what, signal) {
    if (await this._value(sql.EVENT_WAIT, [name, sql.interval(0)], what, { retry: false, signal })) return true;
    for (;;) {
      const left = deadline === null ? WAIT_SLICE_MS : Math.min(WAIT_SLICE_MS, deadline - performance.now());
      if (left <= 0) return false;
      if (await this._value(sql.EVENT_WAIT, [name, sql.interval(left / 1000)], what,
        { wait: true, retry: false, signal, serverWaitMs: left })) {
        return true;
      }
    }
  }

  // -- the end ---------------------------------------------------------------------------

  // Connects now (a statement on the pool): rejects with
  // DsyncConnectionError at once on a wrong address or a server that is
  // down, where a lazy first use would fail later.
  async ping() {
    await this._value(sql.BACKEND_PID, [], 'connecting', { retry: false });
  }

  /*
   * Stops the running elections, gives back every lease held through this
   * client (their owners see them lost: "the client was closed"), stops
   * the keeper and closes every connection (the caller's pool is left
   * open).  Waits still inside the server are cancelled.
   */
  close() {
    if (!this._closing) this._closing = this._close();
    return this._closing;
  }

  // close() itself, run once.  The acquires in flight fail ("closed"):
  // their waits are cancelled, and one granted meanwhile is given back
  // before the pools end.  The releases the keeper still owes are sent.
  async _close() {
    for (const election of [...this._elections]) await election.stop().catch(noop);
    const { holds, releases } = await this._keeper.stop();
    this._keeper.report(holds, 'the client was closed');
    for (const conn of this._waiting) cancelStatement(conn);
    if (this._acquiring.size) {
      let timer;
      await Promise.race([Promise.allSettled([...this._acquiring]),
        new Promise((r) => { timer = setTimeout(r, CLOSE_WAIT_MS); })]);
      clearTimeout(timer);
    }
    // Releases queued since the keeper stopped (a give-back that failed).
    releases.push(...this._keeper.ledger.releases.splice(0));
    const names = [...holds.map((h) => h.name), ...releases.map((r) => r.name)];
    const holders = [...holds.map((h) => h.holder), ...releases.map((r) => r.holder)];
    if (names.length) {
      await this._query(sql.RELEASE_MANY, [names, holders], 'releasing the leases of a closed client',
        { internal: true, retry: true }).catch(noop);     // else they lapse at their ttl
    }
    const ends = [this._waitPool.end().catch(noop)];
    if (this._ownPool) ends.push(this._pool.end().catch(noop));
    await Promise.all(ends);
    this._closed = true;
  }
}

// -- the default clients -------------------------------------------------------------

const defaults = new Map();

/*
 * The client shared by objects made with the same connection settings
 * (and listen), so the objects' own constructors keep working and share
 * one keeper.  Its pools let the process exit when their connections are
 * idle, and its keeper while nothing is held.
 */
function defaultClient(opts) {
  const listen = opts.listen ?? null;
  const key = ConnectionSettings.key(opts, { listen });
  let client = defaults.get(key);
  if (!client || client._closing) {
    client = new Client({
      connectionString: opts.connectionString, config: opts.config, pool: opts.pool, listen, allowExitOnIdle: true,
    });
    defaults.set(key, client);
  }
  return client;
}

// Closes every default client (giving back what they hold); objects made
// before get a new default client on their next use.
async function closeDefaultClients() {
  const clients = [...defaults.values()];
  defaults.clear();
  await Promise.all(clients.map((c) => c.close()));
}

module.exports = { Client, defaultClient, closeDefaultClients, WAIT_SLICE_MS, cancelStatement, runStatement, statementName };
