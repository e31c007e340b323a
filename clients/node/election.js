'use strict';
/*
 * LeaderElection: join a group and campaign for its lease; while leader,
 * the lease is kept by the client's keeper like any other.  An
 * EventEmitter: 'elected' (token), 'lost' (reason) as soon as leadership
 * is lost (before the lease's expiry lets anyone else in) and on stop,
 * 'members' (the group's live members, at each look, if listened to),
 * 'retry' (error, pause in ms) for each attempt that failed and will be
 * retried (the server gone, a wait cancelled by statement_timeout or
 * pg_cancel_backend: a warning when nobody listens), and 'error' if the
 * campaign fails for good, which only a bug can make it do.  Listeners
 * are not awaited; an error they throw or reject with is a warning.
 *
 * isLeader, leaderExists, token and status are getters that never wait:
 * they read what the campaign last saw (its periodic look, every ttl/3,
 * and its own grants), and the term's hold itself, so isLeader is false
 * the moment the keeper marks the lease lost, before any listener runs.
 * leader() and members() ask the server.
 */

const { EventEmitter } = require('node:events');
const { performance } = require('node:perf_hooks');
const sql = require('./sql');
const errors = require('./errors');
const args = require('./args');
const { Lock, OnClient } = require('./lock');
const { Scope, als } = require('./ledger');

// A campaign's pause after a failed attempt: from RETRY_FIRST_MS, doubled
// per failure in a row, never more than a third of the ttl (a member must
// be back in the race before a dead leader's lease ends) nor RETRY_MAX_MS,
// with jitter so that members do not retry in step.
const RETRY_FIRST_MS = 100;
const RETRY_MAX_MS = 2000;

function retryPause(failures, ttl) {
  const cap = Math.min((ttl * 1000) / 3, RETRY_MAX_MS);
  const pause = Math.min(cap, RETRY_FIRST_MS * 2 ** Math.min(failures - 1, 16));
  return pause * (0.5 + Math.random() / 2);
}

// A members row as the cluster detail's object.
function memberOf(r) {
  return { member: r.member, info: r.info, joinedAt: r.joined_at, expiresAt: r.expires_at, isLeader: r.is_leader };
}

// One member's campaign in one group (see the top of this file).
class LeaderElection extends EventEmitter {
  // opts: client, or connection settings; ttl (15 s); member (default
  // host:pid:random); info (JSON shown in the membership).
  constructor(group, opts = {}) {
    super({ captureRejections: true });
    this.group = args.nameArg(group, 'group');
    this.ttl = args.positive(opts.ttl ?? 15, 'ttl');
    this.info = opts.info;
    this._on = new OnClient(opts);
    const lockOpts = { ttl: this.ttl, holder: opts.member, info: opts.info };
    if (opts.client) lockOpts.client = opts.client;
    else Object.assign(lockOpts, { connectionString: opts.connectionString, config: opts.config, pool: opts.pool, listen: opts.listen });
    this._lock = new Lock(this.group, lockOpts);
    this.member = this._lock.holder;
    this._lock.on('lost', (reason) => this._endLeadership(reason));
    this._scope = null;         // the campaign's owner
    this._leader = false;
    this._hold = null;          // the current term's hold
    this._token = null;
    this._seenLeader = null;
    this._seenAt = null;
    this._stopping = false;
    this._loop = null;
    this._abort = null;
    this._wakeFn = null;
    this.error = null;
    this.lastError = null;      // the last failed attempt's error
    this.failures = 0;          // failed attempts so far (each retried)
    this._ready = false;        // the campaign made its first attempt
    this._readyWaiters = new Set();
    this._ended = false;        // the campaign's loop has ended
  }

  // The Client this election runs on.
  get client() {
    return this._on.client;
  }

  // A listener's rejection (captureRejections): a warning, as a throw is.
  [EventEmitter.captureRejectionSymbol](err, event) {
    process.emitWarning(`dsync: a '${event}' listener of group "${this.group}" failed: ${err && err.stack ? err.stack : err}`,
      'DsyncWarning');
  }

  // -- what it knows, without waiting ----------------------------------------------

  // Whether this member leads now (as the keeper knows it): elected, and
  // the term's hold not known lost (false at once, before any listener).
  get isLeader() {
    return this._leader && this._hold !== null && this._hold.live();
  }

  // Whether some member leads, as the campaign last saw it (not known
  // while this member's term has just been lost).
  get leaderExists() {
    return this.isLeader || (!this._leader && this._seenLeader !== null);
  }

  // The leader's fencing token (BigInt) while this member leads, else null.
  get token() {
    return this.isLeader ? this._token : null;
  }

  // Whether the campaign runs.
  get running() {
    return this._loop !== null;
  }

  // Whether the campaign has made its first attempt at the lease (won it
  // or found it held): isLeader and leaderExists then say what the server
  // said (grelmicro's ready).
  get ready() {
    return this._ready;
  }

  // Resolves true once the campaign has made its first attempt, false
  // after timeout seconds (null: no limit) or when it stops first.
  waitReady({ timeout = null } = {}) {
    args.optionalSeconds(timeout, 'timeout');
    if (this._ready) return Promise.resolve(true);
    if (!this._loop || this._ended) return Promise.resolve(false);
    return new Promise((resolve) => {
      let timer = null;
      const done = (v) => {
        if (timer) clearTimeout(timer);
        this._readyWaiters.delete(done);
        resolve(v);
      };
      this._readyWaiters.add(done);
      if (timeout !== null) timer = setTimeout(() => done(false), timeout * 1000);
    });
  }

  // Ends the waits of waitReady() with v.
  _settleReady(v) {
    this._ready = v;
    for (const done of [...this._readyWaiters]) done(v);
  }

  // This member's view (mongoelector's node_status): group, member,
  // running, isLeader, leader, leaderExists, token, and seenAt (the
  // performance.now() of the campaign's last look, null before it).
  get status() {
    const isLeader = this.isLeader;
    const leader = isLeader ? this.member : (this._leader ? null : this._seenLeader);
    return {
      group: this.group, member: this.member, running: this.running, isLeader, leader,
      leaderExists: leader !== null, token: this.token, seenAt: this._seenAt,
    };
  }

  // -- what it asks the server --------------------------------------------------------

  // The leading member now (asks the server), null if none.
  async leader() {
    return this.client._value(sql.LEADER, [this.group], `reading group "${this.group}"`);
  }

  // The group's live members (the cluster detail), by member name.
  async members() {
    const rows = await this.client._query(sql.MEMBERS, [this.group], `reading group "${this.group}"`);
    return rows.map(memberOf);
  }

  // -- the campaign -----------------------------------------------------------------------

  // Emits outside the campaign's scope: a listener that takes locks does so
  // as an owner of its own, not as the campaign.
  _emit(event, ...values) {
    als.exit(() => this.emit(event, ...values));
  }

  // Leadership is over: 'lost' once, whoever sees it first (the keeper,
  // the watchdog, the campaign, stop()); the campaign wakes to run again.
  _endLeadership(reason) {
    if (!this._leader) return;
    this._leader = false;
    this._hold = null;
    this._token = null;
    this._seenLeader = null;
    this._emit('lost', reason);
    this._wake();
  }

  // Starts campaigning (in the background); returns this.
  start() {
    if (this._loop) return this;
    this._stopping = false;
    this._ended = false;
    this.error = null;
    this._abort = new AbortController();
    this._scope = new Scope(null);
    this.client._elections.add(this);
    this._loop = als.run(this._scope, () => this._run()).catch((e) => {
      this.error = e;
      if (this.listenerCount('error') > 0) this._emit('error', e);
    });
    return this;
  }

  // Refreshes the membership and sees who leads; 'members' if listened to.
  async _look() {
    const rows = await this.client._query(sql.JOIN,
      [this.group, this.member, sql.interval(this.ttl), sql.jsonb(this.info)], `joining group "${this.group}"`);
    this._seenAt = performance.now();
    if (!this._leader) this._seenLeader = rows.length ? rows[0].leader : null;
    if (this.listenerCount('members') > 0) this._emit('members', await this.members());
  }

  // Sleeps up to ms, woken by a loss or stop().
  _sleep(ms) {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        if (this._wakeFn === done) this._wakeFn = null;
        resolve();
      };
      const timer = setTimeout(done, Math.max(0, ms));
      this._wakeFn = done;
    });
  }

  // Ends the campaign's sleep now (a loss, stop()).
  _wake() {
    if (this._wakeFn) this._wakeFn();
  }

  // The campaign: look every ttl/3; while not leader, wait in the server
  // for the lease in slices that end by the next look; when lost while
  // leading, give the dead hold back and campaign again.
  async _run() {
    const period = (this.ttl * 1000) / 3;
    let nextLook = 0;
    let failed = 0;
    try {
      while (!this._stopping) {
        try {
          if (performance.now() >= nextLook) {
            await this._look();
            failed = 0;
            nextLook = performance.now() + period;
          }
          if (this._stopping) break;
          if (this._lock.held) {
            await this._sleep(Math.min(nextLook - performance.now(), period));
            continue;
          }
          if (this._lock._ownedState() !== null) {
            // Lost while leading: leadership ended; give the hold back.
            this._endLeadership(this._lock.lostReason || 'the lease was lost');
            await this._lock.release().catch((e) => { if (!(e instanceof errors.DsyncError)) throw e; });
            continue;
          }
          if (!this._lock._owners.isFree(this.member)) {
            // A release of our name is pending with the keeper: our next
            // grant must not be taken away by it.
            await this._sleep(50);
            continue;
          }
          const timeout = Math.max(0.05, Math.min(period, nextLook - performance.now()) / 1000);
          // The first attempt only tries, so that waitReady() answers at
          // once when another member leads.
          const got = await this._lock.acquire({ blocking: this._ready, timeout, signal: this._abort.signal });
          failed = 0;
          if (got) {
            if (this._stopping) break;
            if (this._lock.held) {              // lost already: campaign on
              this._hold = this._lock.hold;
              this._token = this._lock.token;
              this._seenLeader = this.member;
              this._leader = true;
              this._emit('elected', this._token);
            }
          }
          if (!this._ready) this._settleReady(true);
        } catch (e) {
          if (this._stopping) break;
          if (!(e instanceof errors.DsyncError)) throw e;
          // A restart, a failover, a cancelled wait: a later attempt may
          // succeed, and a member that stopped campaigning would never
          // lead again.  The keeper's watchdog decides about a leadership
          // held.
          failed += 1;
          await this._sleep(this._retrying(e, failed));
        }
      }
    } finally {
      this._ended = true;
      this._settleReady(false);
      await this._resign();
    }
  }

  // Reports a failed attempt ('retry', or a warning) and says how long to
  // pause before the next one.
  _retrying(e, failed) {
    const pause = retryPause(failed, this.ttl);
    this.lastError = e;
    this.failures += 1;
    if (this.listenerCount('retry') > 0) {
      this._emit('retry', e, pause);
    } else {
      process.emitWarning(`dsync: campaign for group "${this.group}" failed (${e.code ? `${e.code}: ` : ''}${e.message}); `
        + `retrying in ${Math.round(pause)} ms`, 'DsyncWarning');
    }
    return pause;
  }

  // Leadership ends before the lease goes: nothing may still act as leader
  // once another member can be elected.  Then leave the group.
  async _resign() {
    this._endLeadership('stopped');
    try {
      if (this._lock._ownedState() !== null) await this._lock.release();
    } catch (e) {
      // the keeper sends it again, or it lapses
    }
    try {
      await this.client._query(sql.LEAVE, [this.group, this.member], `leaving group "${this.group}"`,
        { retry: false, internal: true });
    } catch (e) {
      // membership lapses at its ttl
    }
  }

  // Resigns and stops campaigning (a wait in the server is cancelled).
  async stop() {
    const loop = this._loop;
    if (!loop) return;
    this._stopping = true;
    this._abort.abort();
    this._wake();
    try {
      await loop;
    } finally {
      this._loop = null;
      this.client._elections.delete(this);
    }
  }
}

module.exports = { LeaderElection };
