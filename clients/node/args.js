'use strict';
/*
 * Argument checks shared by every object, done as the server would do
 * them, so a mistake is reported at the caller's line with the argument's
 * name rather than as an SQL error later.
 */

const os = require('node:os');
const crypto = require('node:crypto');

// A lease, holder, group or event name: non-empty text of at most 255 bytes.
function nameArg(value, what) {
  if (typeof value !== 'string') throw new TypeError(`${what} must be a string`);
  if (value === '') throw new RangeError(`${what} must not be empty`);
  if (Buffer.byteLength(value, 'utf8') > 255) throw new RangeError(`${what} must be at most 255 bytes`);
  return value;
}

// A non-negative number of seconds (wait, timeout).
function seconds(value, what) {
  if (typeof value !== 'number' || !Number.isFinite(value)) {
    throw new TypeError(`${what} must be a finite number of seconds`);
  }
  if (value < 0) throw new RangeError(`${what} must not be negative`);
  return value;
}

// A positive number of seconds (ttl).
function positive(value, what) {
  seconds(value, what);
  if (value <= 0) throw new RangeError(`${what} must be positive`);
  return value;
}

// A timeout that may also be null or undefined (no limit).
function optionalSeconds(value, what) {
  return value === null || value === undefined ? null : seconds(value, what);
}

// host:pid:random, unique per object, readable in dsync_leases.
function defaultHolder() {
  return `${os.hostname()}:${process.pid}:${crypto.randomBytes(4).toString('hex')}`;
}

// The abort reason of an AbortSignal, as the error to throw.
function abortError(signal) {
  if (signal.reason instanceof Error) return signal.reason;
  const e = new Error('the operation was aborted');
  e.name = 'AbortError';
  e.code = 'ABORT_ERR';
  return e;
}

module.exports = { nameArg, seconds, positive, optionalSeconds, defaultHolder, abortError };
