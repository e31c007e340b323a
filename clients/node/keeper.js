'use strict';
/*
 * The keeper of one Client: one connection (a pg.Client of its own, used
 * by nobody else) and one async loop that renews every lease the client
 * holds in one statement per tick and LISTENs on all their channels, and
 * beside it a watchdog timer that declares a lease lost shortly before it
 * could expire unconfirmed, whatever the keeper is stuck in.
 *
 * The loop is the only user of the connection, so it never has two
 * statements in flight.  Notifications are judged as they arrive (the
 * judging does no I/O), so a loss is reported at once even while a
 * renewal is under way.  While the client holds nothing, the connection's
 * socket and the loop's timers are unref'd: an idle keeper never keeps
 * the process alive.
 */

const { performance } = require('node:perf_hooks');
const pg = require('pg');
const sql = require('./sql');
const errors = require('./errors');
const { Ledger, als, OVERDUE, LAPSED } = require('./ledger');

// At most this many LISTENs in one statement.
const LISTEN_CHUNK = 500;
// The pause after a failed round: RETRY_MS, doubled per failure in a row,
// at most MAX_BACKOFF_MS (as the Python client's KEEPER_RETRY_FIRST and
// KEEPER_RETRY_MAX: a keeper that stays away longer leaves its leases to
// the watchdog's rescue renewals, then to their deadline).  An acquire
// waiting for the keeper's connection cuts a pause short, but the keeper
// never tries again sooner than RETRY_MS after a failed round: callers
// retrying acquire in a loop while the server is down make no storm of
// connection attempts.
const RETRY_MS = 500;
const MAX_BACKOFF_MS = 2000;
// How often the keeper may ask dsync_stats who sends the events.
const SENDERS_EVERY_MS = 1000;
// How long close() waits for a stuck loop before ending its connection.
const STOP_WAIT_MS = 2000;
// After releases found a row locked, they are sent again this much later.
const RELEASE_RETRY_MS = 250;

// The pause after `failures` failed rounds in a row.
function backoff(failures) {
  return Math.min(RETRY_MS * 2 ** Math.min(Math.max(failures, 1) - 1, 16), MAX_BACKOFF_MS);
}

// Whether e is an installation mistake (no CREATE EXTENSION, no preload):
// one failure whatever statement met it.
function isConfigError(e) {
  return e instanceof errors.ExtensionNotCreated || e instanceof errors.NotPreloaded;
}

// Whether e is the server's "lock timeout" (SQLSTATE 55P03).
function lockTimedOut(e) {
  return !!e && e.code === '55P03';
}

const noop = () => {};

// The keeper and the watchdog of one Client.
// The key of a queued wait in Keeper.queued.
function queueKey(name, holder) {
  return `${name.length}:${name}${holder}`;
}

/*
 * A call waiting in a name's line without a connection: woken when its
 * grant is announced (or the keeper reconnected and announcements may have
 * been missed), it asks the server itself.
 */
class QueuedWait {
  constructor(name, holder) {
    this.name = name;
    this.holder = holder;
    this._woken = false;
    this._resolve = null;
  }

  wake() {
    this._woken = true;
    if (this._resolve) this._resolve();
  }

  // Resolves when woken (at once if woken since the last wait), after ms,
  // or when signal aborts.
  wait(ms, signal) {
    if (this._woken) {
      this._woken = false;
      return Promise.resolve();
    }
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        if (signal) signal.removeEventListener('abort', done);
        this._resolve = null;
        this._woken = false;
        resolve();
      };
      const timer = setTimeout(done, ms);
      if (signal) signal.addEventListener('abort', done, { once: true });
      this._resolve = done;
    });
  }
}

class Keeper {
  // Nothing runs until the first start().
  constructor(client) {
    this.client = client;
    this.ledger = new Ledger();
    this.watched = new Set();        // every hold the watchdog looks after
    this.conn = null;                // the connected keeper connection
    this.connecting = null;          // one being connected
    this.connectedAt = 0;
    this.error = null;               // the last connection failure
    this.wanted = false;             // an acquirer needs a connection
    this.stopping = false;
    this.loop = null;
    this.releasing = [];             // releases being sent now
    this.needSenders = false;
    this.sendersAsked = -Infinity;
    this._wakeFn = null;
    this._woken = false;
    this._sleepsUntil = -Infinity;   // when the loop's sleep ends (-Infinity: not sleeping)
    this._waiters = new Set();       // ensure() calls waiting for a connection
    this._watchTimer = null;
    this._watchAt = Infinity;
    this._rescuing = null;           // a rescue renewal in flight (a promise)
    this._pausing = null;            // the pause after a failed round: { startedAt, endsAt, timer, done }
    this._stopped = new Promise((resolve) => { this._stop = resolve; });   // resolves once stop() is called
    this.failures = 0;               // failed rounds in a row
    this._told = null;               // the failure last warned of, until a round works
    this._releasesRetryAt = -Infinity;   // releases found a row locked: not sent again before
    // Calls waiting in a line without a connection, by name and holder;
    // the keeper LISTENs on the client's queue channel while it can.
    this.queued = new Map();
    this.queueListening = false;
  }

  // -- what lock objects call ------------------------------------------------

  // Starts the loop if it is not running and asks it to connect now, so
  // the connection is ready by the time a first grant comes back.  The
  // loop runs outside every owner's scope.  A connected keeper is not
  // woken: an acquire costs it nothing until its hold is added.
  start() {
    if (this.stopping) return;
    this.wanted = true;
    if (!this.loop) this.loop = als.exit(() => this._run());
    if (!this.conn) this._wake();
  }

  /*
   * Registers a call about to wait in name's line, once the keeper LISTENs
   * for its grants (up to timeoutMs): null if it cannot, and the caller
   * waits in a backend instead.
   */
  async queueJoin(name, holder, timeoutMs) {
    if (!(await this.ensure(timeoutMs)) || !this.queueListening || this.stopping) return null;
    const w = new QueuedWait(name, holder);
    this.queued.set(queueKey(name, holder), w);
    this.wanted = true;
    return w;
  }

  queueLeave(w) {
    const key = queueKey(w.name, w.holder);
    if (this.queued.get(key) === w) this.queued.delete(key);
  }

  // A grant announced on the queue channel: its waiter claims it (the
  // announcement is a hint; the claim is the word).
  _queueHeard(payload) {
    let w;
    try {
      const grant = JSON.parse(payload);
      w = this.queued.get(queueKey(grant.lease, grant.holder));
    } catch (e) {
      return;
    }
    if (w) w.wake();
  }

  // The mark an acquirer takes before its statement (Ledger.mark).
  mark(channel) {
    return this.ledger.mark(channel);
  }

  // Waits up to timeoutMs for the keeper to have a connection; false if
  // it has none by then (the caller gives its lease back).
  async ensure(timeoutMs) {
    const deadline = performance.now() + timeoutMs;
    while (!this.ledger.connected) {
      const left = deadline - performance.now();
      if (left <= 0 || this.stopping) return false;
      this.start();
      this._hurry();
      await new Promise((resolve) => {
        const done = () => {
          clearTimeout(timer);
          this._waiters.delete(done);
          resolve();
        };
        const timer = setTimeout(done, left);
        this._waiters.add(done);
      });
    }
    return true;
  }

  // Keeps hold (renewed if keepAlive, watched in any case).
  // The loop is woken only if the hold needs it before the loop's sleep
  // ends (its LISTEN and confirmation once settled, else its renewal).
  // Throws once the client is closing: a hold added then would be kept by
  // nobody (the acquirer gives it back).
  add(hold, mark) {
    if (this.stopping) throw new errors.DsyncError('the dsync client is closed');
    if (hold.keepAlive) this.ledger.add(hold, mark);
    this.watched.add(hold);
    hold.onOverdue = (h) => this._overdue(h);
    if (Ledger.rescuePoint(hold) < this._watchAt) this._armWatchdog();
    this._refs();
    if (hold.keepAlive && this.ledger.firstNeed(hold) < this._sleepsUntil) this._wake();
  }

  // hold's ttl changed (renew(ttl)): wakes whoever must now act sooner
  // than it planned (the loop to renew it, the watchdog to watch it).
  retimed(hold) {
    if (hold.keepAlive && this.ledger.holds.has(hold) && this.ledger.firstNeed(hold) < this._sleepsUntil) this._wake();
    if (this.watched.has(hold) && Ledger.rescuePoint(hold) < this._watchAt) this._armWatchdog();
  }

  // Stops keeping hold: its owner gives it back.
  remove(hold) {
    hold.done = true;
    this.ledger.remove(hold);
    this.watched.delete(hold);
    this._refs();
  }

  // A release that could not be sent (its connection broke), or of a lease
  // given up: the keeper sends it once it can.  The owner's name stays
  // retired until then (Owners.released).
  releaseLater(name, holder, owners, hold = null) {
    if (hold) hold.giveBack = true;
    this.ledger.releases.push({ name, holder, owners, hold });
    this._refs();
    this.start();
    this._wake();
  }

  // Whether a release of holder's lease is still to be sent or confirmed.
  pendingRelease(name, holder) {
    const match = (r) => r.name === name && r.holder === holder;
    return this.ledger.releases.some(match) || this.releasing.some(match);
  }

  // -- reporting a loss --------------------------------------------------------

  /*
   * Declares holds lost (each once), stops keeping them and tells their
   * lock objects, which emit 'lost'.  release: the lease may still be the
   * holder's on the server (the watchdog's verdict): give it back.
   */
  report(holds, reason, release = false) {
    this.tell(this._declare(holds, reason, release));
  }

  // The marking half of report(): every hold is marked lost (lost, held
  // and an election's isLeader read it at once) before any listener runs.
  _declare(holds, reason, release) {
    const fresh = [];
    for (const hold of holds) {
      if (!hold.declareLost(reason)) continue;
      this.ledger.remove(hold);
      this.watched.delete(hold);
      if (release) {
        hold.giveBack = true;      // its holder name is not used again until the keeper released it
        this.ledger.releases.push({ name: hold.name, holder: hold.holder, owners: hold.owners, hold });
      }
      fresh.push(hold);
    }
    if (fresh.length) {
      this._refs();
      if (release) {
        this.start();
        this._wake();
      }
    }
    return fresh;
  }

  // A reader found hold past its deadline before the watchdog's timer ran
  // (the process was stopped, the loop blocked): the watchdog's verdict,
  // marked now; 'lost' is emitted just after, not inside the reader's
  // property read.
  _overdue(hold) {
    const fresh = hold.keepAlive ? this._declare([hold], OVERDUE, true) : this._declare([hold], LAPSED, false);
    if (fresh.length) als.exit(() => setImmediate(() => this.tell(fresh)));
  }

  // The telling half: each lock object emits 'lost' (a listener's error,
  // thrown or rejected, is a warning; an async listener is not awaited).
  tell(fresh) {
    for (const hold of fresh) hold.lock._lost(hold);
  }

  // -- the loop ----------------------------------------------------------------

  // Connects when there is something to keep, ticks, and after a failure
  // drops the connection and starts again: a working connection that broke
  // at once, a failed attempt after a pause.
  async _run() {
    while (!this.stopping) {
      let attempt = false;
      try {
        if (!this.conn) {
          if (!(this.wanted || this.ledger.holds.size || this.ledger.releases.length || this.queued.size)) {
            await this._sleep(null);
            continue;
          }
          attempt = true;
          await this._connect();
          attempt = false;
        }
        await this._tick();
        this.failures = 0;
        this._told = null;
      } catch (e0) {
        const young = performance.now() - this.connectedAt < 1000;
        this._drop(e0);
        if (this.stopping) break;         // no diagnosis, no warning: close() goes on at once
        const e = await this._explain(e0);
        if (this.stopping) break;
        if (this.error === e0) this.error = e;
        // A connection that worked a while and broke (a restart, a killed
        // backend) is connected again at once; any other failure pauses.
        if (!attempt && !young && errors.isConnectionError(e)) continue;
        this.failures += 1;
        if (!errors.isConnectionError(e) || this.failures > 1) this._tell(e);
        await this._pause(backoff(this.failures));
      }
    }
    this._drop(null);
  }

  // e as the library's error (errors.diagnose): a missing dsync_ function
  // or view is ExtensionNotCreated if pg_extension has no dsync (asked on
  // the client's statement pool), a server that does not preload dsync
  // NotPreloaded.  Never asks once the keeper is stopping, and a question
  // in flight when stop() is called is not waited for.
  async _explain(e) {
    if (this.stopping || e instanceof errors.DsyncError || errors.isConnectionError(e)) return e;
    return errors.diagnose(e, 'the keeper, renewing held leases', {
      database: this.client._database,
      extensionCreated: () => (this.stopping ? true
        : Promise.race([this.client._extensionCreated(), this._stopped.then(() => true)])),
    });
  }

  // Warns, on one line, of a failure unless it is the one last warned of
  // (the words of the Python client's KeeperFailures): a keeper that
  // fails the same way at every attempt says so once, not at every retry
  // (and never with a stack trace).
  _tell(e) {
    const text = `${e.name}: ${String(e.message).replace(/\n/g, '; ')}`;
    // A configuration error is one failure whatever statement met it (a
    // renewal's missing function, then the reconnection's missing view).
    const key = isConfigError(e) ? e.name : text;
    if (this._told === key) return;
    this._told = key;
    const hint = e.hint ? ` (hint: ${e.hint})` : '';
    process.emitWarning(`dsync: the keeper failed (${text}${hint}); it retries every `
      + `${(MAX_BACKOFF_MS / 1000).toFixed(1)} s at most, and says so again only if the failure changes`,
    'DsyncWarning');
  }

  // Connects, learns whether LISTEN works there (not behind a pooler in
  // transaction mode) and who sends dsync's events.
  async _connect() {
    const c = new pg.Client(this.client._settings.clientConfig('keeper', {
      keepAlive: true, keepAliveInitialDelayMillis: 2000,
    }));
    // The database's name, for the hint of an error (once: the same for
    // every connection of the client's settings).
    if (this.client._database === undefined) this.client._database = c.database;
    c.on('error', (e) => this._broken(c, e));
    c.on('end', () => this._broken(c, new errors.DsyncConnectionError("the keeper's connection ended")));
    c.on('notification', (msg) => this._heard(c, msg));
    this.connecting = c;
    if (!this._busy()) c.unref();
    let listenOk;
    let senders;
    try {
      await c.connect();
      listenOk = this.client.listen !== false && !(await sql.behindPooler(c));
      if (this.client.listen === true && !listenOk) {
        throw new errors.ListenUnavailable('LISTEN does not work through this connection (a pooler in '
          + 'transaction mode); give listen: null to notice a lost lease at the next renewal instead');
      }
      senders = sql.senderPidsOf((await c.query(sql.SENDERS)).rows[0]);
      if (listenOk) await c.query(`LISTEN "${this.client._queueChannel}"`);
      if (this.stopping) throw new errors.DsyncError('the dsync client is closed');
    } catch (e) {
      this.connecting = null;
      c.end().catch(noop);
      this.error = e;
      this._changed();
      throw e;
    }
    this.connecting = null;
    this.conn = c;
    this.connectedAt = performance.now();
    this.error = null;
    if (!this.ledger.holds.size && !this.ledger.releases.length && !this.queued.size) this.wanted = false;
    this.ledger.connectedAnew(listenOk, senders);
    this.queueListening = listenOk;
    // Grants announced while it was away went unheard: every waiter asks.
    for (const w of this.queued.values()) w.wake();
    this._refs();
    this._changed();
  }

  // The keeper's connection failed under it (an error, the server ended
  // it): nothing is LISTENed any more; the loop connects again.
  _broken(c, e) {
    if (c !== this.conn) return;
    this._drop(e);
    this._wake();
  }

  // Forgets the connection (ending it) and tells ensure() callers.
  _drop(e) {
    const c = this.conn;
    this.conn = null;
    this.ledger.disconnected();
    this.queueListening = false;
    if (e) this.error = e;
    if (!this.ledger.holds.size && !this.ledger.releases.length && !this.queued.size) this.wanted = false;
    if (c) c.end().catch(noop);
    this._changed();
  }

  // Runs one statement on the keeper's connection; throws if the
  // connection was replaced meanwhile (the answer is no longer ours to use).
  async _exec(c, query) {
    const r = await c.query(query);
    if (c !== this.conn) throw new errors.DsyncConnectionError("the keeper's connection was lost");
    return r;
  }

  // One round: LISTEN what is new, UNLISTEN what is old, ask who sends if
  // needed, renew what is due, give back what was given up, then sleep
  // until the next renewal is due or something wakes the loop.
  async _tick() {
    this._woken = false;
    const c = this.conn;
    const listen = this.ledger.toListen(performance.now());
    for (let i = 0; i < listen.length; i += LISTEN_CHUNK) {
      const chunk = listen.slice(i, i + LISTEN_CHUNK);
      await this._exec(c, sql.listenStatement(chunk));
      this.ledger.listened(chunk);
    }
    const unlisten = this.ledger.toUnlisten();
    if (unlisten.length) {
      // Forgotten first: a hold added while the UNLISTEN is in flight finds
      // no matching mark, and its channel is LISTENed again next tick.
      this.ledger.unlistened(unlisten);
      await this._exec(c, sql.unlistenStatement(unlisten));
    }
    if (this.needSenders && performance.now() - this.sendersAsked >= SENDERS_EVERY_MS) {
      // A sender we did not know: dsync's worker after a restart, or a
      // forgery.  The holds it named are confirmed by renewal anyway.
      this.needSenders = false;
      this.sendersAsked = performance.now();
      this.ledger.senders = sql.senderPidsOf((await this._exec(c, sql.SENDERS)).rows[0]);
    }
    const batch = this.ledger.due(performance.now());
    if (batch.length) await this._renew(c, batch);
    if (this.ledger.releases.length && performance.now() >= this._releasesRetryAt) await this._giveBack(c);
    let wait = this.ledger.nextWake(performance.now());
    if (this.needSenders) wait = Math.min(wait ?? Infinity, SENDERS_EVERY_MS);
    if (this.ledger.releases.length) wait = Math.min(wait ?? Infinity, Math.max(0, this._releasesRetryAt - performance.now()));
    await this._sleep(wait);
  }

  // Runs query, one of sql.KEEPER_*: a transaction of its own whose lock
  // waits end after 50 ms (a lock timeout, 55P03, is thrown).
  async _inKeeperTx(c, query) {
    return this._exec(c, query);
  }

  /*
   * Renews batch in one statement.  If a row stays locked (a guard's
   * transaction is open), the batch is split in halves until the locked
   * leases are alone: they are tried again 250 ms later, the others are
   * renewed now.
   */
  async _renew(c, batch) {
    const sent = performance.now();
    let r;
    try {
      r = await this._inKeeperTx(c, {
        text: sql.KEEPER_RENEW_MANY,
        values: [batch.map((h) => h.name), batch.map((h) => h.holder), batch.map((h) => h.ttlText)],
        types: sql.types,
      });
    } catch (e) {
      if (!lockTimedOut(e)) throw e;
      if (batch.length === 1) {
        this.ledger.blocked(batch, performance.now());
        return;
      }
      const half = Math.floor(batch.length / 2);
      await this._renew(c, batch.slice(0, half));
      await this._renew(c, batch.slice(half));
      return;
    }
    const gone = this.ledger.renewed(batch, r.rows.map((row) => row.v), sent);
    if (gone.length) this.report(gone, 'the renewal found the lease no longer held');
  }

  // Sends the releases given up on, in one statement; the names they free
  // become usable again once the server has answered (and no other
  // release of them is still owed).  A row locked by a guard's transaction
  // puts them off for 250 ms.
  async _giveBack(c) {
    const batch = this.ledger.releases;
    this.ledger.releases = [];
    this.releasing = batch;
    try {
      await this._inKeeperTx(c, { text: sql.KEEPER_RELEASE_MANY, values: [batch.map((r) => r.name), batch.map((r) => r.holder)] });
    } catch (e) {
      this.ledger.releases.unshift(...batch);
      if (!lockTimedOut(e)) throw e;
      this._releasesRetryAt = performance.now() + RELEASE_RETRY_MS;
      return;
    } finally {
      this.releasing = [];
    }
    for (const r of batch) {
      if (r.hold) r.hold.giveBack = false;
      if (r.owners && !this.pendingRelease(r.name, r.holder)) r.owners.released(r.holder);
    }
    this._refs();
  }

  // A notification on the keeper's connection, judged at once.
  _heard(c, msg) {
    if (c !== this.conn) return;
    if (msg.channel === this.client._queueChannel) {
      this._queueHeard(msg.payload);
      return;
    }
    const verdict = this.ledger.judge(msg.channel, msg.payload, msg.processId);
    if (verdict.lost.length) this.report(verdict.lost, `the lease was ${verdict.kind}`);
    if (verdict.suspect) {
      if (verdict.unknownSender) this.needSenders = true;
      this._wake();
    }
  }

  // Sleeps for ms (null: until woken).  The timer keeps the process alive
  // only while something is held.
  _sleep(ms) {
    return new Promise((resolve) => {
      let timer = null;
      const done = () => {
        if (timer) clearTimeout(timer);
        if (this._wakeFn === done) {
          this._wakeFn = null;
          this._sleepsUntil = -Infinity;
        }
        resolve();
      };
      if (this._woken || this.stopping) {
        this._woken = false;
        resolve();
        return;
      }
      this._sleepsUntil = Infinity;
      if (ms !== null && ms !== undefined && Number.isFinite(ms)) {
        timer = setTimeout(done, Math.max(0, ms));
        if (!this._busy()) timer.unref();
        this._sleepsUntil = performance.now() + Math.max(0, ms);
      }
      this._wakeFn = done;
    });
  }

  // The pause after a failed round: cut short by stop(), and by an
  // acquire waiting for the connection (_hurry), never to less than
  // RETRY_MS.
  _pause(ms) {
    return new Promise((resolve) => {
      const p = { startedAt: performance.now(), endsAt: 0, timer: null, done: null };
      p.done = () => {
        clearTimeout(p.timer);
        if (this._pausing === p) this._pausing = null;
        resolve();
      };
      this._pausing = p;
      this._pauseUntil(p, p.startedAt + (this._waiters.size ? Math.min(ms, RETRY_MS) : ms));
    });
  }

  // (Re)sets pause p to end at `at` (a performance.now() value).
  _pauseUntil(p, at) {
    clearTimeout(p.timer);
    p.endsAt = at;
    p.timer = setTimeout(p.done, Math.max(0, at - performance.now()));
    if (!this._busy()) p.timer.unref();
  }

  // An acquire waits for the keeper's connection: the pause ends now, or
  // RETRY_MS after it began if that is later.
  _hurry() {
    const p = this._pausing;
    if (p && p.endsAt > p.startedAt + RETRY_MS) this._pauseUntil(p, p.startedAt + RETRY_MS);
  }

  // Ends the loop's sleep now, or its next one if it is busy.
  _wake() {
    if (this._wakeFn) this._wakeFn();
    else this._woken = true;
  }

  // Tells the ensure() callers that the connection state changed.
  _changed() {
    for (const w of [...this._waiters]) w();
  }

  // Whether the client holds anything the keeper must keep or give back.
  _busy() {
    return this.ledger.holds.size > 0 || this.ledger.releases.length > 0 || this.releasing.length > 0;
  }

  // The keeper's socket keeps the process alive while something is held,
  // and never while nothing is.
  _refs() {
    const c = this.conn || this.connecting;
    if (!c) return;
    try {
      if (this._busy()) c.ref();
      else c.unref();
    } catch (e) {
      // a connection being torn down has no socket to (un)ref
    }
  }

  // -- the watchdog --------------------------------------------------------------

  // One timer at the earliest deadline of the holds watched.
  _armWatchdog() {
    if (this._watchTimer) clearTimeout(this._watchTimer);
    this._watchTimer = null;
    this._watchAt = Infinity;
    if (this.stopping) return;
    const next = this.ledger.watchWake(this.watched, performance.now());
    if (next === Infinity) return;
    this._watchAt = next;
    this._watchTimer = als.exit(() => setTimeout(() => this._watchdog(), Math.max(0, next - performance.now())));
    this._watchTimer.unref();
  }

  // Declares lost every hold whose renewal was not confirmed in time (a
  // kept one is also given back), then waits for the next deadline.
  _watchdog() {
    this._watchTimer = null;
    this._watchAt = Infinity;
    const rescue = this.ledger.toRescue(this.watched, performance.now());
    if (rescue.length && !this._rescuing) {
      this._rescuing = this._rescue(rescue).finally(() => {
        this._rescuing = null;
        this._armWatchdog();
      });
    }
    const overdue = this.ledger.overdue(this.watched, performance.now());
    const kept = overdue.filter((h) => h.keepAlive);
    const lapsed = overdue.filter((h) => !h.keepAlive);
    // Every overdue hold is marked lost before any listener runs.
    const fresh = [
      ...this._declare(kept, OVERDUE, true),
      ...this._declare(lapsed, LAPSED, false),
    ];
    this._armWatchdog();
    this.tell(fresh);
  }

  // Renews holds the keeper has not renewed in time, in one statement on
  // the client's statement pool (see RESCUE_LEAD_MS); a failure is tried
  // again a little later, until the watchdog's deadline.
  async _rescue(batch) {
    const sent = performance.now();
    let rows;
    try {
      rows = await this.client._query(sql.RENEW_MANY,
        [batch.map((h) => h.name), batch.map((h) => h.holder), batch.map((h) => h.ttlText)],
        'renewing leases the keeper could not renew in time', { retry: false, internal: true });
    } catch (e) {
      this.ledger.blocked(batch, performance.now());
      return;
    }
    const gone = this.ledger.renewed(batch, rows.map((row) => row.v), sent);
    if (gone.length) this.report(gone, 'the renewal found the lease no longer held');
  }

  // -- the end -----------------------------------------------------------------

  // Stops the loop and the watchdog; returns the holds still kept, and the
  // releases still to send, for the client to give back.
  async stop() {
    this.stopping = true;
    this._stop();
    if (this._watchTimer) clearTimeout(this._watchTimer);
    this._watchTimer = null;
    const holds = [...this.watched];
    this._wake();
    if (this._pausing) this._pausing.done();
    this._changed();
    if (this.connecting) this.connecting.end().catch(noop);
    if (this.loop) {
      let timer;
      await Promise.race([this.loop, new Promise((r) => { timer = setTimeout(r, STOP_WAIT_MS); })]);
      clearTimeout(timer);
    }
    this._drop(null);
    const releases = [...this.ledger.releases, ...this.releasing];
    this.ledger.releases = [];
    return { holds, releases };
  }
}

module.exports = { Keeper };
