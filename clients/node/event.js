'use strict';
/*
 * Event: a one-to-one signal (dsync_event_set / dsync_event_wait).  Each
 * set() stores one signal until exactly one wait() consumes it, across
 * processes; a waiter waits inside the server, woken at the commit of a
 * set, never polling.
 */

const { performance } = require('node:perf_hooks');
const sql = require('./sql');
const args = require('./args');
const { OnClient } = require('./lock');

// A one-to-one signal named `name` (see the top of this file).
class Event {
  // opts: client, or one of connectionString / config / pool.
  constructor(name, opts = {}) {
    this.name = args.nameArg(name, 'name');
    this._on = new OnClient(opts);
  }

  // The Client this object runs on.
  get client() {
    return this._on.client;
  }

  // How an error message names what was being done.
  _what(verb) {
    return `${verb} event "${this.name}"`;
  }

  // Stores one signal: the next wait() (here or anywhere) consumes it.
  // Not retried on a broken connection (it may have been stored).
  async set() {
    await this.client._value(sql.EVENT_SET, [this.name], this._what('setting'), { retry: false });
  }

  /*
   * Consumes one signal: true, or false after timeout seconds (null or
   * undefined: wait with no limit, in bounded slices inside the server).
   * opts.signal: an AbortSignal that ends the wait (it then rejects).
   */
  async wait(timeout = null, { signal = null } = {}) {
    args.optionalSeconds(timeout, 'timeout');
    const deadline = timeout === null || timeout === undefined ? null : performance.now() + timeout * 1000;
    return this.client._eventWait(this.name, deadline, this._what('waiting for'), signal);
  }

  // Drops every pending signal; how many there were.
  async clear() {
    return Number(await this.client._value(sql.EVENT_CLEAR, [this.name], this._what('clearing'), { retry: false }));
  }

  // Whether a signal is pending (asks the server).
  async isSet() {
    return (await this.client._value(sql.EVENT_IS_SET, [this.name], this._what('reading'))) === true;
  }

  // Nothing to give back; kept so every object can be closed alike.
  async close() {}
}

module.exports = { Event };
