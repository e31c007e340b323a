'use strict';
/*
 * Lock, ReadLock and Semaphore, and withLock.
 *
 * A lock object is owned by whoever acquired it (clients/DESIGN.md, "Who
 * owns a lock").  Node has no task identity that survives `await`, so an
 * owner is the async context of `lock.run(fn)` (withLock): fn and
 * everything it awaits is one owner, and acquiring again there only counts
 * (n acquires need n releases).  Concurrent run() calls on one shared
 * object are different owners and exclude each other, each with a holder
 * name of its own on the server (holder, holder#2, ...).  A bare
 * `await lock.acquire()` outside any run() is an owner of its own, never
 * reentrant, and a bare `release()` gives back the most recent bare hold.
 *
 * Every object runs on a Client (client.js): the one given, or the default
 * client shared per connection settings.  Held leases are renewed by the
 * client's one keeper.
 */

const { EventEmitter } = require('node:events');
const { performance } = require('node:perf_hooks');
const sql = require('./sql');
const errors = require('./errors');
const args = require('./args');
const { Hold, Scope, BareOwner, Owners, als } = require('./ledger');
const { Client, defaultClient } = require('./client');
const { assertHeldIn } = require('./guard');

const noop = () => {};

/*
 * What an object runs on: the client given, or the default client of its
 * connection settings (looked up at each use, so an object outlives a
 * closed default client).  Shared by Lock, Event and LeaderElection.
 */
class OnClient {
  // opts: client, or connection settings (checked now).
  constructor(opts) {
    const { client, connectionString, config, pool, listen } = opts;
    if (client !== undefined && client !== null) {
      if (!(client instanceof Client)) throw new TypeError('client must be a dsync Client');
      if (connectionString !== undefined || config !== undefined || pool !== undefined || (listen !== undefined && listen !== null)) {
        throw new TypeError('give either client or connection settings, not both');
      }
      this._client = client;
      this._clientArgs = null;
    } else {
      this._client = null;
      this._clientArgs = { connectionString, config, pool, listen };
      defaultClient(this._clientArgs);     // checks the settings now
    }
  }

  // The client to use now.
  get client() {
    return this._client || defaultClient(this._clientArgs);
  }
}

// An async listener that rejects is reported as a DsyncWarning, as a
// listener that throws is: never an unhandled rejection (which ends the
// process), never thrown into the keeper.
function listenerFailed(what, err, event) {
  process.emitWarning(`dsync: a '${event}' listener of ${what} failed: ${err && err.stack ? err.stack : err}`, 'DsyncWarning');
}

/*
 * A lease held for ttl seconds and renewed by the client's keeper while
 * held.  Emits 'lost' (reason, hold) the moment one of its holds is known
 * to be gone (every hold lost together is marked lost first).  Listeners
 * are not awaited; an error they throw or reject with is a warning.
 *
 * opts: client, or one of connectionString / config / pool (a default
 * client); ttl (30 s); holder (default host:pid:random); info (any JSON
 * value, shown in dsync_leases); keepAlive (true; false: held without
 * renewal, lapsing at its ttl); timeout (run()'s default, null: no limit);
 * listen (for the default client); raiseOnFailure (false; true: acquire()
 * rejects with LockExists when a try finds the lease held, AcquireTimeout
 * when a wait runs out, instead of answering false).
 */
class Lock extends EventEmitter {
  // Checks every option now; connects nothing until first used.
  constructor(name, opts = {}) {
    super({ captureRejections: true });
    this.name = args.nameArg(name, 'name');
    this.ttl = args.positive(opts.ttl ?? 30, 'ttl');
    this.info = opts.info;
    this._info = sql.jsonb(opts.info);
    this.keepAlive = opts.keepAlive !== false;
    this.timeout = args.optionalSeconds(opts.timeout, 'timeout');
    this.raiseOnFailure = opts.raiseOnFailure === true;
    this._ttlText = sql.interval(this.ttl);
    this._on = new OnClient(opts);
    this._owners = new Owners(opts.holder !== undefined && opts.holder !== null ? args.nameArg(opts.holder, 'holder') : args.defaultHolder());
    this._bare = [];        // bare owners' states, most recent last
  }

  // The Client this object runs on.
  get client() {
    return this._on.client;
  }

  // An async listener's rejection (captureRejections): a warning.
  [EventEmitter.captureRejectionSymbol](err, event) {
    listenerFailed(`lease "${this.name}"`, err, event);
  }

  // The statement that takes this kind of lease (ReadLock takes shared).
  get _sqlAcquire() {
    return sql.ACQUIRE;
  }

  // Semaphores define themselves here, before their first acquire.
  async _prepare() {}

  // How an error message names what was being done.
  _what(verb) {
    return `${verb} lease "${this.name}"`;
  }

  // -- whose call this is ---------------------------------------------------------

  // The state of the nearest enclosing run() scope that holds this object
  // (or is acquiring it), null if none does.
  _scopeState(withPending) {
    for (let s = als.getStore(); s; s = s.parent) {
      const st = this._owners.get(s);
      if (st && (st.count > 0 || (withPending && st.pending))) return st;
    }
    return null;
  }

  // The state the caller's token, check(), renew()... are about: its
  // scope's, else the most recent bare hold's.
  _ownedState() {
    return this._scopeState(false) || this._lastBare();
  }

  // The most recent bare hold (acquired, not only being acquired).
  _lastBare() {
    for (let i = this._bare.length - 1; i >= 0; i--) if (this._bare[i].count > 0) return this._bare[i];
    return null;
  }

  // A bare hold that was lost is forgotten at the next bare acquire (its
  // name is freed once the keeper has made sure it is released), so code
  // that takes a lock again after a loss does not pile up dead holds.
  _forgetLostBare(client) {
    this._bare = this._bare.filter((st) => {
      if (!(st.hold && st.hold.done && st.count > 0 && st.pending === null)) return true;
      st.count = 0;
      const { holder } = st;
      st.hold = null;
      this._owners.retireName(st);
      this._owners.drop(st);
      if (holder !== null) client._keeper.releaseLater(this.name, holder, this._owners);
      return false;
    });
  }

  // -- taking and letting go ------------------------------------------------------------

  /*
   * Takes the lease for the calling owner: true once held, false if not
   * within timeout seconds (blocking: false, at once; timeout null: no
   * limit).  Inside run() the owner acquiring again only counts.  A
   * blocking acquire waits inside the server, woken at the commit that
   * frees the lease, never polling.  signal: an AbortSignal that ends the
   * wait (the acquire then rejects with its reason).
   */
  async acquire({ blocking = true, timeout = null, signal = null } = {}) {
    args.optionalSeconds(timeout, 'timeout');
    for (;;) {
      let st = this._scopeState(true);
      if (st && st.pending) {
        await st.pending;
        continue;
      }
      // live(): a hold past its deadline is lost (reported now), not stacked on.
      if (st && st.hold && st.hold.live()) {
        st.count += 1;
        return true;
      }
      if (!st) {
        let scope = als.getStore();
        while (scope && scope.ended) scope = scope.parent;    // a scope that ended owns nothing new
        if (scope) {
          st = this._owners.state(scope);
          scope.states.set(this, st);
        } else {
          this._forgetLostBare(this.client);
          st = this._owners.state(new BareOwner());
          this._bare.push(st);
        }
      }
      const got = await this._acquireFor(st, blocking, timeout, signal);
      if (!got && this.raiseOnFailure) {
        if (!blocking) throw new errors.LockExists(`lease "${this.name}" is held by another holder`);
        throw new errors.AcquireTimeout(`lease "${this.name}" could not be acquired within ${timeout} s`);
      }
      return got;
    }
  }

  // acquire() for one owner's state, with its in-flight mark set so that
  // the same owner's other calls wait for this one.  The client knows of
  // it until it settles (close() lets it settle before ending the pools).
  async _acquireFor(st, blocking, timeout, signal) {
    let settle;
    st.pending = new Promise((resolve) => { settle = resolve; });
    const client = this.client;
    const taking = this._take(st, blocking, timeout, signal, client);
    client._acquiring.add(taking);
    try {
      return await taking;
    } finally {
      client._acquiring.delete(taking);
      st.pending = null;
      settle();
      if (st.count === 0) this._forget(st);
    }
  }

  // Drops a state nobody holds with: from the bare list and the owners.
  _forget(st) {
    const i = this._bare.indexOf(st);
    if (i >= 0) this._bare.splice(i, 1);
    this._owners.drop(st);
    if (st.owner instanceof Scope && st.owner.states.get(this) === st && st.count === 0) st.owner.states.delete(this);
  }

  // The acquire itself (the port of dsync.Lock.acquire).
  async _take(st, blocking, timeout, signal, client) {
    client._checkUsable();
    if (signal && signal.aborted) throw args.abortError(signal);
    // Taken again after the watchdog gave the owner's hold up: the keeper
    // still owes the release of that name, which would hit a grant made
    // under it, so the owner gets a name of its own.
    if (st.hold && st.hold.giveBack && st.holder === st.hold.holder) this._owners.retireName(st);
    const holder = this._owners.takeName(st);
    const deadline = timeout === null || timeout === undefined ? null : performance.now() + timeout * 1000;
    const keeper = client._keeper;
    let token = null;
    let hold = null;
    try {
      await this._prepare(client);
      let mark = null;
      if (this.keepAlive) {
        keeper.start();
        mark = keeper.mark(sql.channelOf(this.name));
      }
      const got = await client._acquire(this._sqlAcquire, this.name, holder, this._ttlText, this.ttl * 1000,
        this._info, blocking, deadline, this._what('acquiring'), signal);
      token = got.token;
      if (signal && signal.aborted) throw args.abortError(signal);
      if (token !== null) {
        hold = new Hold({
          lock: this, client, owners: this._owners, name: this.name, holder, token, ttl: this.ttl,
          ttlText: this._ttlText, keepAlive: this.keepAlive, granted: got.sent,
        });
        if (this.keepAlive && !(await keeper.ensure(Math.min(5000, (this.ttl * 1000) / 3)))) {
          if (client._closing) throw new errors.DsyncError('the dsync client is closed');
          throw new errors.KeeperUnavailable(`lease "${this.name}" was granted but the keeper that renews it `
            + 'has no connection; it was given back', { cause: keeper.error || undefined });
        }
        if (signal && signal.aborted) throw args.abortError(signal);
        if (st.owner instanceof Scope && st.owner.ended) {
          // Its owner (a run() scope that did not await this acquire) is
          // gone: nobody could ever release the lease.
          process.emitWarning(`dsync: an acquire of lease "${this.name}" was granted after the run() scope `
            + 'that started it ended; it was given back and the acquire resolves false', 'DsyncWarning');
          await this._giveBack(st, holder, client);
          return false;
        }
        keeper.add(hold, mark);        // throws if the client is closing
      }
    } catch (e) {
      // Failed after a grant may have committed unseen, or not kept: give
      // back what this call may have taken.  The owner holds nothing live
      // under that name (else the call would only have counted): after a
      // loss its old hold is gone or owed to the keeper, never released
      // here by mistake.
      await this._giveBack(st, holder, client);
      throw e;
    }
    if (token === null) {
      if (st.count === 0) this._owners.freeName(st);
      return false;
    }
    // A count left is a lost hold's (a live one only counts, in
    // acquire()): its ownership ended with it, so this is a fresh hold
    // that one release frees.  A failed acquire leaves it as it was.
    st.hold = hold;
    st.count = 1;
    return true;
  }

  // Releases holder's lease now; if the server cannot be told, the keeper
  // does it later and the name is not used again until then (nor by this
  // owner: a grant under it would be hit by that release).
  async _giveBack(st, holder, client) {
    try {
      await client._query(sql.RELEASE, [this.name, holder], this._what('releasing'), { retry: false, internal: true });
    } catch (e) {
      client._keeper.releaseLater(this.name, holder, this._owners);
      if (st.holder === holder) this._owners.retireName(st);
      return;
    }
    if (st.holder === holder) {
      this._owners.freeName(st);            // unless the owner still counts a (lost) hold under it
    } else if (!client._keeper.pendingRelease(this.name, holder)) {
      this._owners.released(holder);        // a name retired meanwhile, now released
    }
  }

  /*
   * Lets the lease go: true if it was still held until now.  Inside run()
   * it is the scope's hold; outside, the most recent bare hold.  After n
   * acquires the n-th release gives the lease back.  NotHeld if the caller
   * holds nothing.  A release whose connection broke rejects with
   * DsyncConnectionError, and the keeper sends it again.
   */
  async release() {
    const st = this._ownedState();
    if (!st || st.count === 0) throw new errors.NotHeld(`lease "${this.name}" is not held here (nothing to release)`);
    return this._releaseFor(st);
  }

  // release() for one owner's state.
  async _releaseFor(st) {
    st.count -= 1;
    const hold = st.hold;
    if (st.count > 0) return hold !== null && hold.live();
    st.hold = null;
    // live(), not done: a process stopped past the deadline hears of the
    // loss here ('lost') even if its watchdog has not run yet.
    const wasKept = hold !== null && hold.live();
    const client = hold ? hold.client : this.client;
    const holder = st.holder;
    if (hold) client._keeper.remove(hold);
    if (holder === null || (client._closing && !wasKept)) {
      // Its name was retired (the keeper owes its release), or close()
      // gave it back already (and told the owner it was lost).
      if (holder !== null) this._owners.retireName(st);
      this._forget(st);
      return false;
    }
    if (hold && hold.giveBack) {
      // Given up by the watchdog: the keeper releases it too, later, and
      // the name is not used again until then.  Sent now as well, so the
      // lease is free at once if the statement pool answers.
      this._owners.retireName(st);
      this._forget(st);
      await client._value(sql.RELEASE, [this.name, holder], this._what('releasing'), { retry: false, internal: true })
        .catch(noop);
      return false;
    }
    let released;
    try {
      released = await client._value(sql.RELEASE, [this.name, holder], this._what('releasing'), { retry: false, internal: true });
    } catch (e) {
      client._keeper.releaseLater(this.name, holder, this._owners);
      this._owners.retireName(st);
      this._forget(st);
      throw e;
    }
    this._owners.freeName(st);
    this._forget(st);
    if (wasKept && released !== true && hold.refusedAtRelease()) client._keeper.tell([hold]);
    return released === true && wasKept;
  }

  /*
   * Runs fn(lock) holding the lease, as one owner: the lease is released
   * when fn settles (however it settles), and acquiring inside fn only
   * counts.  Rejects with AcquireTimeout if the lease is not had within
   * timeout seconds (default: the object's timeout, null: no limit).
   * A final release that failed for the connection (the keeper sends it
   * again) does not turn fn's result into an error.
   */
  async run(fn, { timeout = this.timeout, blocking = true, signal = null } = {}) {
    if (typeof fn !== 'function') throw new TypeError('fn must be a function');
    const outer = this._scopeState(false);
    const scope = outer ? null : new Scope(als.getStore());
    const body = async () => {
      if (!(await this.acquire({ blocking, timeout, signal }))) {
        throw new errors.AcquireTimeout(`lease "${this.name}" could not be acquired within ${timeout === null ? 'the wait' : `${timeout} s`}`);
      }
      const st = this._scopeState(false);
      let failed = false;
      try {
        return await fn(this);
      } catch (e) {
        failed = true;
        throw e;
      } finally {
        if (st.count > 0) {
          try {
            await this._releaseFor(st);
          } catch (e) {
            if (!failed && !(e instanceof errors.DsyncConnectionError)) throw e;  // eslint-disable-line no-unsafe-finally
          }
        }
      }
    };
    if (!scope) return body();
    try {
      return await als.run(scope, body);
    } finally {
      endScope(scope);
    }
  }

  // -- what the caller holds ------------------------------------------------------------

  // Whether the caller holds the lease, as far as the client knows (no statement).
  // Never a hold past its deadline (see Hold.live).
  get held() {
    const st = this._ownedState();
    return st !== null && st.hold !== null && st.hold.live();
  }

  // The caller's holder name while it holds the lock (a second owner of a
  // shared object holds under holder#2, ...), so that SQL written with
  // lock.holder (dsync_assert_held) guards the caller's own hold; the
  // object's base name otherwise.  As the Python client's lock.holder.
  get holder() {
    const st = this._ownedState();
    return st && st.holder ? st.holder : this._owners.base;
  }

  // The caller's fencing token (BigInt), null if it holds nothing.
  get token() {
    const st = this._ownedState();
    return st && st.hold ? st.hold.token : null;
  }

  // Whether the caller's hold was lost (it still has to release it).
  get lost() {
    const st = this._ownedState();
    if (st !== null && st.hold !== null) st.hold.live();    // declares a hold past its deadline lost
    return st !== null && st.hold !== null && st.hold.lostReason !== null;
  }

  // Why the caller's hold was lost, null if it was not.
  get lostReason() {
    const st = this._ownedState();
    return st && st.hold ? st.hold.lostReason : null;
  }

  // The caller's Hold (name, holder, token, ...), null if none.
  get hold() {
    const st = this._ownedState();
    return st ? st.hold : null;
  }

  // Throws LockLost if the caller's hold was lost, NotHeld if it holds nothing.
  check() {
    const st = this._ownedState();
    if (!st || !st.hold) throw new errors.NotHeld(`lease "${this.name}" is not held here`);
    st.hold.check();
  }

  /*
   * Extends the caller's hold now (the keeper does so every ttl/3 anyway):
   * the new expiry (a Date), or null, and the hold counts as lost, if the
   * lease is no longer held.  With ttl (seconds), the lease is kept with
   * that ttl from then on: the keeper renews it with it, every ttl/3, and
   * the watchdog watches it with it.
   */
  async renew(ttl) {
    const st = this._ownedState();
    if (!st || !st.hold) throw new errors.NotHeld(`lease "${this.name}" is not held here`);
    const hold = st.hold;
    const given = ttl !== undefined && ttl !== null;
    const seconds = given ? args.positive(ttl, 'ttl') : null;
    const ttlText = given ? sql.interval(seconds) : hold.ttlText;
    const timed = {};
    const keeper = hold.client._keeper;
    const expiry = await hold.client._value(sql.RENEW, [this.name, hold.holder, ttlText], this._what('renewing'), { timed });
    if (expiry === null) {
      keeper.report([hold], 'the renewal found the lease no longer held');
    } else if (timed.sent !== undefined && !hold.done) {
      if (given) hold.setTtl(seconds, ttlText, timed.sent);
      else hold.confirmed = Math.max(hold.confirmed, timed.sent);
      keeper.retimed(hold);
    }
    return expiry;
  }

  // Whether anyone holds the lease now (asks the server).
  async locked() {
    return (await this.client._value(sql.LOCKED, [this.name], this._what('reading'))) === true;
  }

  // Whether the caller holds the lease now (asks the server).
  async owned() {
    const st = this._ownedState();
    if (!st || st.count === 0) return false;
    return (await this.client._query(sql.HELD, [this.name, st.holder], this._what('reading'))).length > 0;
  }

  /*
   * In the caller's own transaction: the fencing token (BigInt) if the
   * caller holds the lease (nobody can take it until that transaction
   * ends), else NotHeld: at once, with no statement, if the caller holds
   * nothing; from the server (SQLSTATE 55000; the transaction is then
   * aborted) if its hold was lost.  tx: a pg Client or PoolClient in a transaction, a knex transaction
   * (knex.transaction(async (trx) => ...)) or a Prisma interactive
   * transaction (prisma.$transaction(async (tx) => ...)), told apart by
   * what they can do.  The holder asked about is the calling owner's
   * (lock.holder inside its scope): a second owner of a shared Lock holds
   * under a name of its own.
   */
  async guard(tx) {
    // An owner holding nothing is refused without a statement: asked under
    // the object's name, the server would answer for whichever owner holds
    // under it, and give this one that owner's token.
    const st = this._ownedState();
    return assertHeldIn(tx, this.name, st && st.holder !== null ? st.holder : null, this._what('guarding'));
  }

  // -- the keeper's report ----------------------------------------------------------

  // Emits 'lost' outside any owner's scope (a listener that acquires does
  // so as an owner of its own).  A listener's error is reported as a
  // warning, never thrown into the keeper.
  _lost(hold) {
    als.exit(() => {
      try {
        this.emit('lost', hold.lostReason, hold);
      } catch (e) {
        process.emitWarning(`dsync: a 'lost' listener of lease "${this.name}" threw: ${e && e.stack}`, 'DsyncWarning');
      }
    });
  }

  /*
   * Gives back every hold of this object, whoever owns it.  The client
   * and its connections stay (they are shared; close the Client for them).
   */
  async close() {
    const states = this._owners.holding();
    for (const st of states) {
      st.count = 1;
      try {
        await this._releaseFor(st);
      } catch (e) {
        // the keeper sends it again
      }
    }
    this._bare = [];
  }
}

// The end of a run() scope: a lock it still holds (acquired inside fn and
// never released) has lost its owner; it is no longer renewed and lapses
// at its ttl, as if its process had died, with a warning.
function endScope(scope) {
  scope.ended = true;
  for (const [lock, st] of scope.states) {
    if (st.count <= 0) continue;
    const hold = st.hold;
    process.emitWarning(`dsync: a run() scope ended holding lease "${lock.name}" (holder "${st.holder}") `
      + 'without releasing it; it is no longer renewed and lapses at its ttl', 'DsyncWarning');
    st.count = 0;
    st.hold = null;
    lock._owners.retireName(st);
    lock._forget(st);
    if (hold) hold.client._keeper.report([hold], 'its owner (a run() scope) ended without releasing it');
  }
  scope.states.clear();
}

// The shared side of a read-write lock: any number of ReadLocks of a name
// are held at once, never together with a Lock of it; once a Lock waits
// for the name, later ReadLocks wait behind it (writers never starve).
class ReadLock extends Lock {
  // Takes the shared side.
  get _sqlAcquire() {
    return sql.ACQUIRE_SHARED;
  }
}

const ATTACH = Symbol('dsync.attach');

/*
 * A lease with permits: at most `permits` holders at once, across
 * processes; each owner takes one permit.  new Semaphore(name, permits,
 * opts) defines it before its first acquire (idempotently); the static
 * Semaphore.create defines it at once (SemaphoreMismatch if it exists with
 * another count), Semaphore.attach uses an existing one without knowing
 * its count.
 */
class Semaphore extends Lock {
  // permits: 1 to 65535 (ATTACH: read from the server by attach()).
  constructor(name, permits, opts = {}) {
    if (permits !== ATTACH && (!Number.isInteger(permits) || permits < 1 || permits > 65535)) {
      throw new RangeError('permits must be an integer from 1 to 65535');
    }
    super(name, opts);
    this.permits = permits === ATTACH ? null : permits;
    this._created = permits === ATTACH ? true : null;     // the client it was created on
  }

  // Defines the semaphore on the client before its first acquire there.
  async _prepare(client) {
    if (this._created === client || this._created === true) return;
    await client._value(sql.SEM_CREATE, [this.name, this.permits], `creating semaphore "${this.name}"`);
    this._created = client;
  }

  // A Semaphore defined now: SemaphoreMismatch if it exists with another count.
  static async create(name, permits, opts = {}) {
    const sem = new this(name, permits, opts);
    await sem._prepare(sem.client);
    return sem;
  }

  /*
   * The semaphore `name` as another process created it, its count read
   * from the server.  Waits up to timeout seconds (60; null: for ever; 0:
   * look once) for it to be created, then SemaphoreNotFound.
   */
  static async attach(name, { timeout = 60, ...opts } = {}) {
    args.optionalSeconds(timeout, 'timeout');
    const sem = new this(name, ATTACH, opts);
    const deadline = timeout === null ? null : performance.now() + timeout * 1000;
    let pause = 50;
    for (;;) {
      const permits = await sem.getCount();
      if (permits !== null) {
        sem.permits = permits;
        return sem;
      }
      const left = deadline === null ? Infinity : deadline - performance.now();
      if (left <= 0) throw new errors.SemaphoreNotFound(`semaphore "${name}" does not exist`);
      await new Promise((r) => setTimeout(r, Math.min(pause, left)));
      pause = Math.min(pause * 2, 1000);
    }
  }

  // The number of permits the server has for this semaphore (null: not
  // defined).  Needs version 1.5 of the extension (dsync_semaphores).
  async getCount() {
    try {
      return await this.client._value(sql.SEM_PERMITS, [this.name], `reading semaphore "${this.name}"`);
    } catch (e) {
      if (e instanceof errors.ServerError && e.code === '42P01') {
        throw new errors.DsyncError("reading a semaphore's count needs version 1.5 of the dsync extension "
          + '(ALTER EXTENSION dsync UPDATE)', { cause: e.cause, code: e.code });
      }
      throw e;
    }
  }
}

/*
 * Runs fn(lock) while holding the lease `name` (lock.run): released in all
 * cases; AcquireTimeout if not had within opts.timeout seconds.
 */
async function withLock(name, fn, opts = {}) {
  const lock = new Lock(name, opts);
  return lock.run(fn, { timeout: opts.timeout ?? null, signal: opts.signal ?? null });
}

module.exports = { Lock, ReadLock, Semaphore, withLock, OnClient, noop };
