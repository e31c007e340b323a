'use strict';
/*
 * watch(): the events of some names as an async iterator, on a connection
 * of its own (LISTEN needs one connection that stays; the keeper's is not
 * shared with callers).  It trusts only dsync's own sender, resumes from
 * the server's event log after a lost connection, and says when events
 * were lost for good.
 */

const pg = require('pg');
const sql = require('./sql');
const errors = require('./errors');
const args = require('./args');
const { ConnectionSettings } = require('./settings');

// LISTENs on the channels of names, as the server names them (a watch
// connects rarely, so it asks rather than computes); a map channel -> name.
async function listenOn(client, names) {
  const r = await client.query({ text: 'SELECT n, dsync_channel(n) AS ch FROM unnest($1::text[]) AS n', values: [names] });
  const chans = new Map(r.rows.map((row) => [row.ch, row.n]));
  if (chans.size) await client.query(sql.listenStatement([...chans.keys()]));
  return chans;
}

// The pids dsync_stats names as this database's event senders.
async function senderPids(client) {
  return sql.senderPidsOf((await client.query(sql.SENDERS)).rows[0]);
}

// Whether pg_extension has dsync, asked on the watch's connection.
async function extensionCreated(client) {
  return (await client.query(sql.EXTENSION_CREATED)).rows[0].v !== false;
}

// The library's error for e, met on the watch's connection (errors.diagnose).
function diagnose(e, client) {
  return errors.diagnose(e, 'watching', { database: client.database, extensionCreated: () => extensionCreated(client) });
}

// Rows of a query on the event log, or null if the installed version
// keeps none (before 1.4: the diagnosis found the extension created, and
// the server's error for the missing relation or function is all there is).
async function logQuery(client, text, values) {
  try {
    return (await client.query({ text, values, types: sql.types })).rows;
  } catch (e) {
    const d = await diagnose(e, client);
    if (d instanceof errors.ServerError && !(d instanceof errors.InvalidArgument)
      && (d.code === '42P01' || d.code === '42883')) return null;
    throw d;
  }
}

// The "gap" event: events up to seq were missed for good.
function gapEvent(seq) {
  return { kind: 'gap', name: '', holder: null, fencing: null, expiresAt: null, seq, channel: null, raw: {} };
}

/*
 * What the state given to the caller already shows.  dsync's worker logs
 * and sends an event after the commit that made it, so a watch can read a
 * state that shows a grant whose "acquired" event comes after it.  Tokens
 * of a name only grow, so an event with a token no higher than the
 * state's is older than the state: skipped, unless it ends a hold the
 * state showed.
 */
class StateCover {
  constructor() {
    this.top = new Map();       // name -> highest token the state showed
    this.held = new Set();      // JSON [name, holder, token] the state showed
  }

  saw(rows) {
    this.top = new Map();
    this.held = new Set();
    for (const r of rows) {
      const token = BigInt(r.fencing);
      const top = this.top.get(r.lease);
      if (top === undefined || token > top) this.top.set(r.lease, token);
      this.held.add(JSON.stringify([r.lease, r.holder, String(token)]));
    }
  }

  covers(ev) {
    const top = this.top.get(ev.name);
    if (top === undefined || ev.fencing === null || ev.fencing > top) return false;
    if (ev.kind === 'acquired') return true;
    return (ev.kind === 'released' || ev.kind === 'expired')
      && !this.held.has(JSON.stringify([ev.name, ev.holder, String(ev.fencing)]));
  }
}

// The settings a watch connects with: a Client's, or its own options'.
function settingsOf(opts) {
  if (opts.client) return opts.client._settings;
  return new ConnectionSettings(opts);
}

/*
 * The events of the given names as an async iterator: first the current
 * state (kind "state", one per live holder), then each notification dsync
 * sent that the state does not already show (from dsync's sender only: a
 * NOTIFY from another session is skipped).  Ends after `timeout` seconds without an event (default:
 * never).  With `after` (the last seq an earlier watch yielded) it resumes
 * instead: the events sent since are replayed from the server's event log,
 * each once, and if some are gone (older than dsync.event_retention) an
 * event of kind "gap" (seq: the last one lost) comes first, then the
 * state.  A lost connection (a failover, a restart) is reconnected and
 * resumed the same way, unless `reconnect: false`; then the connection
 * error is thrown (a DsyncConnectionError, the SQLSTATE in `code`).
 * Through a pooler in transaction mode it throws ListenUnavailable.
 */
async function* watch(names, opts = {}) {
  if (!Array.isArray(names)) throw new TypeError('names must be an array of strings');
  names = names.map((n) => args.nameArg(n, 'name'));
  const settings = settingsOf(opts);
  const reconnect = opts.reconnect !== false;
  const timeout = args.optionalSeconds(opts.timeout, 'timeout');
  let last = opts.after === undefined || opts.after === null ? null : BigInt(opts.after);
  if (last !== null && last < 0n) throw new RangeError('after must be a non-negative seq');
  let started = last !== null;    // a position to resume from is known
  let lostAt = null;              // when the last connection was lost
  const cover = new StateCover();
  for (;;) {
    const client = new pg.Client(settings.clientConfig('watch'));
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
      if (await sql.behindPooler(client)) {
        throw new errors.ListenUnavailable('LISTEN does not work through this connection: it goes through a '
          + 'connection pooler in transaction mode; watch needs a direct connection (or a pool in session mode)');
      }
      if (!started) {
        // Where the log stands before we listen: nothing later is missed.
        const top = await logQuery(client, sql.LOG_TOP, []);
        last = top ? BigInt(top[0].v) : null;
      }
      const chans = await listenOn(client, names);
      let senders = await senderPids(client);
      let gap = null;
      let missed = [];
      const rows = last === null ? null : await logQuery(client, sql.CATCH_UP, [String(last), names]);
      if (rows) {
        const horizon = BigInt(rows[0].horizon);
        if (horizon > last) {
          if (started) gap = gapEvent(horizon);
          last = horizon;
        }
        missed = rows.filter((r) => r.seq !== null);
      }
      if (!gap && lostAt !== null && last !== null) {
        // Away for longer than the log runs on after its last watcher left:
        // events it never logged may have been missed.
        const retention = Number((await client.query(sql.RETENTION)).rows[0].v);
        if ((Date.now() - lostAt) / 1000 >= retention) gap = gapEvent(last);
      }
      const state = !started || gap || last === null
        ? (await client.query({ text: sql.LEASE_STATE, values: [names], types: sql.types })).rows : [];
      started = true;
      lostAt = null;
      if (state.length) cover.saw(state);
      if (gap) yield gap;
      for (const r of state) {
        yield { kind: 'state', name: r.lease, holder: r.holder, fencing: r.fencing, expiresAt: r.expires_at, seq: null, channel: null, raw: {} };
      }
      // A notification that repeats a replayed event is skipped by its seq.
      const fresh = (ev) => {
        if (ev.seq !== null && last !== null) {
          if (ev.seq <= last) return false;
          last = ev.seq;
        }
        return !cover.covers(ev);
      };
      for (const r of missed) {
        const ev = sql.parsePayload(r.channel, r.payload);
        if (ev && fresh(ev)) yield ev;
      }
      for (;;) {
        if (!queue.length) {
          let timer = null;
          const got = await new Promise((resolve) => {
            wake = () => resolve(true);
            if (timeout !== null) timer = setTimeout(() => resolve(false), timeout * 1000);
          });
          if (timer) clearTimeout(timer);
          wake = null;
          if (!got && !queue.length) return;
        }
        const msg = queue.shift();
        if (msg instanceof Error) throw msg;
        if (!chans.has(msg.channel)) continue;
        if (senders.size && !senders.has(msg.processId)) {
          // Another session's NOTIFY, or dsync's sender since a restart.
          senders = await senderPids(client);
          if (!senders.has(msg.processId)) continue;
        }
        const ev = sql.parsePayload(msg.channel, msg.payload);
        if (ev && fresh(ev)) yield ev;
      }
    } catch (e) {
      if (!reconnect || e instanceof errors.DsyncError || !errors.isConnectionError(e)) throw await diagnose(e, client);
      if (started && lostAt === null) lostAt = Date.now();     // the first loss counts, not each retry
      await new Promise((resolve) => setTimeout(resolve, started ? 200 : 1000));
    } finally {
      await client.end().catch(() => {});
    }
  }
}

module.exports = { watch };
