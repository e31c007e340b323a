'use strict';
/*
 * The bookkeeping of held leases, without any I/O: the Node twin of the
 * Python library's _ledger.py (see clients/DESIGN.md for why the rules are
 * what they are).
 *
 * A client's keeper keeps every lease the client holds with one
 * connection: it renews the due ones in one statement, LISTENs on all
 * their channels, and decides from what it hears whether a lease was
 * lost.  The Ledger is what it knows; a Hold is one lease held by one
 * owner.  Owners is how one lock object used by several owners (run()
 * scopes, bare acquires) gives each a holder name of its own on the
 * server.  Times are performance.now() milliseconds: a monotonic clock,
 * never compared with the server's.
 */

const { AsyncLocalStorage } = require('node:async_hooks');
const { performance } = require('node:perf_hooks');
const { channelOf, parsePayload } = require('./sql');
const { LockLost } = require('./errors');

// How many channels with no held lease stay LISTENed, so that a lock taken
// again and again is not LISTENed anew each time.  Not more: a listening
// backend compares every notification of its database with each channel.
const IDLE_CHANNELS = 256;
// A hold still unconfirmed is LISTENed for and confirmed this long (ms)
// after its grant: a section shorter than that costs the keeper nothing,
// and a burst of acquires shares one LISTEN and one renewal.
const SETTLE_MS = 20;
// A renewal that found its lease's row locked by a transaction (a guard:
// dsync_assert_held keeps the row locked until its transaction ends) tries
// that lease again this much later (ms), alone.
const BLOCKED_RETRY_MS = 250;

// A kept hold this close to its watchdog deadline (half its renewal
// period, at least this many ms, never more than a whole period) is late
// for its renewal: the keeper's connection is gone or stuck.  The
// watchdog then renews it over the client's statement pool (a rescue)
// before it would have to give it up: a renewal whose reply was lost with
// the keeper's connection may well have committed, and the server still
// holds the lease.  A healthy hold never gets this close: the keeper
// confirms it every period.
const RESCUE_LEAD_MS = 1000;

// Why the watchdog, or a reader before it, gives a hold up.
const OVERDUE = 'no renewal could be confirmed before the lease could expire';
const LAPSED = 'its ttl ran out (keepAlive: false)';
// Why release() reports a loss nobody had heard of.
const REFUSED = 'the server no longer held it when it was released';
// Releases and expiries kept on record per channel for marks taken before
// them (see Ledger.news): a burst of hand-offs longer than that between an
// acquirer's mark and its grant costs that hold a confirming renewal.  A
// waiter hears of one release per owner queued ahead of it: with 16 kept,
// 16 threads on one name (test/bench/wait_bench.py) had runs where the
// keeper spent 25 us of CPU per hand-off confirming grants, against 1.
const NEWS_KEPT = 256;

/*
 * One lease held by one owner: what the keeper renews and watches, and
 * what the owner's code reads (token, lostReason).  `confirmed` is when
 * the last grant or renewal the server confirmed was sent: the lease lasts
 * at least until confirmed + ttl, whatever the clocks of the client and
 * the server say.
 */
class Hold {
  // granted: when the granting statement was sent.
  constructor({ lock, client, owners, name, holder, token, ttl, ttlText, keepAlive, granted }) {
    this.lock = lock;
    this.client = client;
    this.owners = owners;
    this.name = name;
    this.holder = holder;
    this.token = token;
    this.ttlMs = ttl * 1000;
    this.ttlText = ttlText;
    this.channel = channelOf(name);
    this.keepAlive = keepAlive;
    this.confirmed = granted;
    this.lostReason = null;
    this.done = false;        // released, or lost: nobody keeps it any more
    this.giveBack = false;    // the keeper is to release it (a name not to reuse till then)
    this.retryAt = 0;         // not renewed before then (its row was locked)
    // Set by the keeper that watches it: declares it lost as the watchdog
    // would, for a reader that finds it past its deadline.
    this.onOverdue = null;
  }

  // Whether the hold may still be relied on: not lost, and not past its
  // deadline.  A process stopped past the deadline (SIGSTOP, an event loop
  // blocked) reads false the moment it runs again, before the watchdog's
  // timer has had its turn; the hold is then declared lost as the
  // watchdog would declare it.
  live() {
    if (this.done) return false;
    if (performance.now() < this.deadline) return true;
    if (this.onOverdue) this.onOverdue(this);
    return false;
  }

  // The lease was renewed for ttl seconds by a statement sent at `sent`
  // (renew(ttl)): it is kept with that ttl from now on.
  setTtl(ttl, ttlText, sent) {
    this.ttlMs = ttl * 1000;
    this.ttlText = ttlText;
    this.confirmed = sent;
  }

  // A third of the ttl: how often the keeper renews it.
  get period() {
    return this.ttlMs / 3;
  }

  // When the watchdog declares the lease lost unless a renewal was
  // confirmed: a margin (ttl/10, at most 1 s) before it could expire, so
  // the holder stops before anyone else can be granted it.
  get deadline() {
    return this.confirmed + this.ttlMs - Math.min(1000, this.ttlMs / 10);
  }

  // Marks the hold lost; true for the first report only, so an owner hears
  // of a loss once whoever notices it (notification, renewal, watchdog).
  declareLost(reason) {
    if (this.done) return false;
    this.done = true;
    this.lostReason = reason;
    return true;
  }

  // release() found the lease gone on the server although the hold looked
  // live (revoked, or expired while a notice of it was on its way): a loss
  // its owner must hear of.  True if nobody reported it before (the
  // keeper's reports stop at done, which release() sets).
  refusedAtRelease() {
    if (this.lostReason !== null) return false;
    this.lostReason = REFUSED;
    return true;
  }

  // Throws LockLost if the lease was lost while held, or may have expired
  // (past its deadline with no renewal confirmed).
  check() {
    const live = this.live();
    if (!live && this.lostReason === null && !this.done) {
      throw new LockLost(`lease "${this.name}" of holder "${this.holder}" was lost: ${OVERDUE}`);
    }
    if (this.lostReason !== null) {
      throw new LockLost(`lease "${this.name}" of holder "${this.holder}" was lost: ${this.lostReason}`);
    }
  }
}

/*
 * What a keeper knows: the holds it keeps, the channels its current
 * connection LISTENs on, and which holds it must confirm with the server
 * before it may trust its silence about them.
 */
class Ledger {
  // Empty: no holds, not connected.
  constructor() {
    this.holds = new Set();           // kept alive: renewed and watched
    this.byChannel = new Map();       // channel -> Set of holds
    this.listening = new Map();       // channel -> the LISTEN's number, on this connection
    this.listens = 0;
    // Notifications heard per channel, so that one heard between an
    // acquirer's mark and its hold's arrival is not lost on it; and the
    // last releases and expiries among them ({ count, ev, trusted }), so
    // that a hold granted meanwhile is taken as confirmed when none of
    // them can be about it.  Under contention every hand-off is heard on
    // the channel: without the record each grant would cost a renewal.
    this.heard = new Map();
    this.news = new Map();              // channel -> array, oldest first
    this.newsEvicted = new Map();       // channel -> the count of the last one dropped
    this.generation = 0;              // the keeper's connections so far
    this.connected = false;
    this.listenOk = true;             // false behind a pooler in transaction mode
    this.unverified = new Set();
    this.senders = new Set();
    this.releases = [];               // given up: { name, holder, owners, hold } to release when we can
  }

  // Taken before an acquire's statement: if the channel is LISTENed now and
  // stays so, with nothing heard on it, every loss after the grant is heard.
  mark(channel) {
    if (!this.connected || !this.listening.has(channel)) return null;
    return `${this.generation}/${this.listening.get(channel)}/${this.heard.get(channel) || 0}`;
  }

  // Keeps hold.  Unless the mark shows its channel was LISTENed before the
  // grant and nothing was heard on it since, its first renewal comes at
  // once and confirms it: a loss in between would otherwise go unheard.
  add(hold, mark) {
    this.holds.add(hold);
    let peers = this.byChannel.get(hold.channel);
    if (!peers) this.byChannel.set(hold.channel, (peers = new Set()));
    peers.add(hold);
    if (this.connected && !this.listenOk) return;     // nothing to hear: renewals alone tell
    if (!this.heardNothingOf(hold, mark)) this.unverified.add(hold);
  }

  // Whether hold's channel was LISTENed on this connection from its mark
  // on, and nothing heard since can be about hold: no release or expiry
  // of its name and holder but those of another token, from dsync's
  // sender (judge() would call them no news).
  heardNothingOf(hold, mark) {
    if (mark === null) return false;
    const now = this.mark(hold.channel);
    if (now === null) return false;
    const [gen, listen, count] = mark.split('/');
    const [nowGen, nowListen, nowCount] = now.split('/');
    if (gen !== nowGen || listen !== nowListen) return false;
    if (count === nowCount) return true;
    const since = Number(count);
    if ((this.newsEvicted.get(hold.channel) || 0) > since) return false;    // one is no longer on record
    const news = this.news.get(hold.channel) || [];
    for (let i = news.length - 1; i >= 0 && news[i].count > since; i--) {    // newest first
      const { ev, trusted } = news[i];
      if (ev.name === hold.name && ev.holder === hold.holder
          && !(trusted && ev.fencing !== null && ev.fencing !== hold.token)) return false;
    }
    return true;
  }

  // Drops what was heard (on channels, or on all): marks taken before no
  // longer match.
  forgetHeard(channels = null) {
    for (const record of [this.heard, this.news, this.newsEvicted]) {
      if (channels === null) record.clear();
      else for (const ch of channels) record.delete(ch);
    }
  }

  // Stops keeping hold (released, or lost).
  remove(hold) {
    this.holds.delete(hold);
    this.unverified.delete(hold);
    const peers = this.byChannel.get(hold.channel);
    if (peers) {
      peers.delete(hold);
      if (!peers.size) this.byChannel.delete(hold.channel);
    }
  }

  // A new keeper connection: nothing is LISTENed on it yet, and whatever
  // happened while there was none must be asked about.
  connectedAnew(listenOk, senders) {
    this.generation += 1;
    this.connected = true;
    this.listenOk = listenOk;
    this.senders = senders;
    this.listening.clear();
    this.forgetHeard();                 // marks of the old connection differ by generation anyway
    this.unverified = new Set(this.holds);
  }

  // The keeper's connection is gone: nothing is LISTENed any more.
  disconnected() {
    this.connected = false;
    this.listening.clear();
    this.forgetHeard();
  }

  // Whether an unconfirmed hold is old enough to be LISTENed for and
  // confirmed (SETTLE_MS after its grant).
  settled(hold, now) {
    return now >= hold.confirmed + SETTLE_MS;
  }

  // Channels to LISTEN on now: those of settled unconfirmed holds not yet
  // LISTENed (a hold whose channel was LISTENed before its grant, with
  // nothing heard since, needs nothing).
  toListen(now) {
    if (!this.listenOk) return [];
    const out = new Set();
    for (const h of this.unverified) {
      if (!this.listening.has(h.channel) && this.settled(h, now)) out.add(h.channel);
    }
    return [...out];
  }

  // Records channels now LISTENed, numbered so a mark can tell a LISTEN
  // from a later one of the same channel.
  listened(channels) {
    for (const ch of channels) {
      this.listens += 1;
      this.listening.set(ch, this.listens);
    }
  }

  // Channels no held lease needs, beyond the IDLE_CHANNELS most recently
  // LISTENed (a lock taken again soon is not LISTENed anew).
  toUnlisten() {
    const idle = [];
    for (const ch of this.listening.keys()) if (!this.byChannel.has(ch)) idle.push(ch);
    if (idle.length <= IDLE_CHANNELS) return [];
    idle.sort((a, b) => this.listening.get(a) - this.listening.get(b));
    return idle.slice(0, idle.length - IDLE_CHANNELS);
  }

  // Forgets channels about to be UNLISTENed, before the statement is sent:
  // a hold added meanwhile then finds no mark that matches and gets its
  // channel LISTENed again (a later LISTEN has a new number, so no mark
  // taken before can match it: their counts can go too).
  unlistened(channels) {
    for (const ch of channels) this.listening.delete(ch);
    this.forgetHeard(channels);
  }

  // Whether the keeper may renew hold to confirm it now: once settled, and
  // at once behind a pooler, else once its channel is LISTENed (a loss
  // after that is heard); never before its retry time.
  _ready(hold, now) {
    return this.settled(hold, now) && now >= hold.retryAt
      && (!this.listenOk || this.listening.has(hold.channel));
  }

  // The holds to renew in this tick: none unless one is due (a third of
  // its ttl since its last confirmation) or must be confirmed; then also
  // every hold at least half-way to due, so that holds taken at about the
  // same time share their renewals.
  due(now) {
    const batch = new Set();
    for (const h of this.unverified) if (this._ready(h, now)) batch.add(h);
    let any = batch.size > 0;
    if (!any) {
      for (const h of this.holds) {
        if (now >= h.confirmed + h.period && now >= h.retryAt) { any = true; break; }
      }
    }
    if (!any) return [];
    for (const h of this.holds) if (now >= h.confirmed + h.period / 2 && now >= h.retryAt) batch.add(h);
    return [...batch].sort((a, b) => a.confirmed - b.confirmed);
  }

  // Renewals that found their lease's row locked by a transaction (the
  // holder's own guard, say): tried again a little later, alone.
  blocked(holds, now) {
    for (const h of holds) h.retryAt = now + BLOCKED_RETRY_MS;
  }

  // Records a renewal's answers (expiry or null, in the batch's order);
  // returns the holds it found gone.
  renewed(batch, expiries, sent) {
    const gone = [];
    batch.forEach((hold, i) => {
      this.unverified.delete(hold);
      if (expiries[i] === null || expiries[i] === undefined) gone.push(hold);
      else hold.confirmed = Math.max(hold.confirmed, sent);
    });
    return gone;
  }

  // Milliseconds until the keeper has something to do (a renewal due, an
  // unconfirmed hold settled); null: nothing held.
  nextWake(now) {
    if (!this.holds.size) return null;
    let first = Infinity;
    for (const h of this.holds) first = Math.min(first, this.firstNeed(h));
    return Math.max(0, first - now);
  }

  // When hold needs the keeper first: settled if unconfirmed, else due
  // (not before its retry time).
  firstNeed(hold) {
    return Math.max(hold.retryAt, hold.confirmed + (this.unverified.has(hold) ? SETTLE_MS : hold.period));
  }

  /*
   * What a notification says about the holds kept: `lost`, those it proves
   * lost (dsync's own release or expiry of the very token held), and
   * `suspect`, whether others it names must be confirmed with the server at
   * once (a forged NOTIFY, a sender not yet known, a token that cannot be
   * read); `unknownSender` when the sender is not one dsync_stats named.
   * The release of an earlier hold of the same holder (another token, from
   * dsync's sender) is no news.
   */
  judge(channel, payload, pid) {
    // Counted for LISTENed channels only (no mark is taken on another), so
    // the counts go with the channels.
    const listened = this.listening.has(channel);
    const count = (this.heard.get(channel) || 0) + 1;
    if (listened) this.heard.set(channel, count);
    const none = { lost: [], suspect: false, unknownSender: false, kind: null };
    const ev = parsePayload(channel, payload);
    if (ev === null || (ev.kind !== 'released' && ev.kind !== 'expired')) return none;
    const trusted = this.senders.has(pid);
    if (listened) {
      let news = this.news.get(channel);
      if (!news) this.news.set(channel, (news = []));
      if (news.length === NEWS_KEPT) this.newsEvicted.set(channel, news.shift().count);
      news.push({ count, ev, trusted });
    }
    const holds = this.byChannel.get(channel);
    if (!holds) return none;
    const lost = [];
    let suspect = false;
    for (const hold of holds) {
      if (ev.name !== hold.name || ev.holder !== hold.holder) continue;
      if (trusted && ev.fencing === hold.token) {
        lost.push(hold);
      } else if (!(trusted && ev.fencing !== null)) {
        this.unverified.add(hold);
        suspect = true;
      }
    }
    return { lost, suspect, unknownSender: !trusted, kind: ev.kind };
  }

  // The holds of `holds` whose deadline has passed.
  overdue(holds, now) {
    const out = [];
    for (const h of holds) if (!h.done && now >= h.deadline) out.push(h);
    return out;
  }

  // When the watchdog renews hold itself unless the keeper did.
  static rescuePoint(hold) {
    return hold.deadline - Math.min(hold.period, Math.max(RESCUE_LEAD_MS, hold.period / 2));
  }

  // Kept holds past their rescue point, not yet overdue, and not tried
  // again too soon (see RESCUE_LEAD_MS); with them, the kept holds that
  // will be past it within half a period, so that holds taken together
  // are rescued in one statement.
  toRescue(holds, now) {
    const live = [];
    for (const h of holds) {
      if (h.keepAlive && !h.done && this.holds.has(h) && now < h.deadline && now >= h.retryAt) live.push(h);
    }
    if (!live.some((h) => Ledger.rescuePoint(h) <= now)) return [];
    return live.filter((h) => Ledger.rescuePoint(h) - h.period / 2 <= now);
  }

  // When the watchdog has something to do next: a kept hold's rescue
  // point (its deadline once that has passed), or a deadline.
  watchWake(holds, now) {
    let next = Infinity;
    for (const h of holds) {
      const point = !h.keepAlive || now >= Ledger.rescuePoint(h) ? h.deadline : Ledger.rescuePoint(h);
      if (point < next) next = point;
    }
    return next;
  }
}

/*
 * An owner: the async context of one lock.run(fn) (withLock, a campaign).
 * Scopes nest: an operation on a lock belongs to the nearest enclosing
 * scope that holds that lock, else to the innermost scope.
 */
class Scope {
  // parent: the scope this one was entered from, if any.
  constructor(parent) {
    this.parent = parent || null;
    this.ended = false;
    this.states = new Map();    // lock -> its OwnerState for this scope
  }
}

// The owner of each async context (undefined outside every run()).
const als = new AsyncLocalStorage();

// The owner of one bare acquire() outside any scope: never reentrant.
class BareOwner {}

/*
 * One owner's use of one lock object: the holder name it has on the
 * server, how many times it acquired (n acquires need n releases), its
 * current hold, and the acquire in flight if any (a second acquire of the
 * same owner waits for it rather than racing it).
 */
class OwnerState {
  // owner: a Scope or a BareOwner.
  constructor(owner) {
    this.owner = owner;
    this.holder = null;
    this.count = 0;
    this.hold = null;
    this.pending = null;
  }
}

/*
 * The owners of one lock object, each with a holder name of its own: the
 * object's holder for the first one, then holder#2, holder#3... for owners
 * holding at the same time, so that the server's reentrancy (same holder,
 * same lease) never merges two owners.  A name is used again only once
 * the server confirmed its release.
 */
class Owners {
  // base: the object's holder name.
  constructor(base) {
    this.base = base;
    this.states = new Map();    // owner -> OwnerState
    this.inUse = new Set();     // names given to owners, or retired until released
  }

  // The owner's state, null if it has none.
  get(owner) {
    return this.states.get(owner) || null;
  }

  // The owner's state, made on first use.
  state(owner) {
    let st = this.states.get(owner);
    if (!st) {
      st = new OwnerState(owner);
      this.states.set(owner, st);
    }
    return st;
  }

  // Forgets a state nobody holds or is acquiring with.
  drop(st) {
    if (st.count === 0 && st.pending === null && this.states.get(st.owner) === st) this.states.delete(st.owner);
  }

  // The owner's holder name: the one it has, or the first free one.
  takeName(st) {
    if (st.holder === null) {
      let k = 1;
      let name = this.base;
      while (this.inUse.has(name)) {
        k += 1;
        name = `${this.base}#${k}`;
      }
      if (Buffer.byteLength(name, 'utf8') > 255) {
        throw new RangeError('holder is too long to give each owner a name of its own (at most 250 bytes)');
      }
      this.inUse.add(name);
      st.holder = name;
    }
    return st.holder;
  }

  // The server confirmed the release: the name may serve another owner.
  freeName(st) {
    if (st.holder !== null && st.count === 0) {
      this.inUse.delete(st.holder);
      st.holder = null;
    }
  }

  // The name may still hold a lease on the server (its release is left to
  // the keeper): nobody gets it until released() says the keeper did it.
  retireName(st) {
    st.holder = null;
  }

  // The keeper released a retired name: usable again, unless an owner has it.
  released(holder) {
    for (const st of this.states.values()) if (st.holder === holder) return;
    this.inUse.delete(holder);
  }

  // Whether no owner has the name and no release of it is pending.
  isFree(name) {
    return !this.inUse.has(name);
  }

  // The states of owners that hold now.
  holding() {
    return [...this.states.values()].filter((st) => st.count > 0);
  }
}

module.exports = {
  Hold, Ledger, Scope, BareOwner, OwnerState, Owners, als, IDLE_CHANNELS, SETTLE_MS, BLOCKED_RETRY_MS, OVERDUE, LAPSED,
  NEWS_KEPT,
};
