'use strict';
/*
 * The library's errors: one hierarchy under DsyncError.  An error that
 * came from the server or from node-postgres keeps it as `cause`, and its
 * SQLSTATE (or node's socket error code) as `code`, so code written
 * against pg's errors still finds what it looks for.
 */

// Base class of every error this library throws on its own.
class DsyncError extends Error {
  // cause: the driver's error; code: its SQLSTATE unless given.
  constructor(message, { cause, code } = {}) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = new.target.name;
    this.code = code ?? (cause && typeof cause.code === 'string' ? cause.code : undefined);
  }
}

// A lease, permit or signal could not be had within the timeout, where a
// call cannot answer false (run(), withLock, Semaphore.attach's wait).
class AcquireTimeout extends DsyncError {}

// acquire({ blocking: false }) of a lock made with raiseOnFailure found the
// lease held (an AcquireTimeout that did not wait; redsync's ErrFailed).
class LockExists extends AcquireTimeout {}

// The lease was lost while held: expired, released by an administrator, or
// no renewal confirmed before it could expire.  Guarded work must stop.
class LockLost extends DsyncError {}

// The caller does not hold what it gives back or guards (SQLSTATE 55000
// from the server's dsync_assert_held, or nothing held by this owner).
class NotHeld extends DsyncError {}

// The semaphore exists with another number of permits (SQLSTATE 42710).
class SemaphoreMismatch extends DsyncError {}

// Semaphore.attach found no semaphore of that name in time.
class SemaphoreNotFound extends DsyncError {}

// The server could not be reached, or the connection broke (class 08,
// 57P0x, node's socket errors).
class DsyncConnectionError extends DsyncError {}

// The client's keeper, which renews held leases, has no connection: a
// lease it cannot keep is given back rather than handed to the caller.
class KeeperUnavailable extends DsyncConnectionError {}

// LISTEN does not work on this connection: it goes through a pooler in
// transaction mode, which lends each transaction any server connection.
class ListenUnavailable extends DsyncError {}

// Any other error the server raised for one of our statements.
class ServerError extends DsyncError {}

// The server refused an argument (SQLSTATE class 22).
class InvalidArgument extends ServerError {}

// SQLSTATEs and socket codes that say the connection is gone, rather than
// that one statement failed on a sound connection.
const CONNECTION_CODES = new Set(['57P01', '57P02', '57P03', '57P04', '57P05', 'ECONNREFUSED',
  'ECONNRESET', 'ECONNABORTED', 'ENOENT', 'EPIPE', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH',
  'ENOTFOUND', 'EAI_AGAIN', 'ERR_STREAM_DESTROYED', 'ERR_STREAM_WRITE_AFTER_END']);

// Whether e says the connection is unusable.  pg's own errors for a dead
// client have no code, only a message.
function isConnectionError(e) {
  if (e instanceof DsyncConnectionError) return true;
  if (e instanceof DsyncError) return false;
  const code = e && e.code;
  if (typeof code === 'string' && code !== '') return code.startsWith('08') || CONNECTION_CODES.has(code);
  return e instanceof Error && /connection|terminat|ended|closed|not queryable|timeout expired/i.test(e.message);
}

// Whether e came from the server or from node-postgres (rather than being
// a bug of ours or of the caller's, which is passed on as it is).
function isDriverError(e) {
  return e instanceof Error && (typeof e.severity === 'string' || isConnectionError(e));
}

// Our error for a driver error e that happened while doing `what` (a short
// phrase naming the operation and the lease).
function fromPg(e, what) {
  if (e instanceof DsyncError || !isDriverError(e)) return e;
  const code = typeof e.code === 'string' ? e.code : undefined;
  let Cls = ServerError;
  if (isConnectionError(e)) Cls = DsyncConnectionError;
  else if (code === '42710') Cls = SemaphoreMismatch;
  else if (code === '55000') Cls = NotHeld;
  else if (code && code.startsWith('22')) Cls = InvalidArgument;
  const text = String(e.message || e).split('\n')[0];
  return new Cls(`${what}: ${text}`, { cause: e, code });
}

module.exports = {
  DsyncError, AcquireTimeout, LockExists, LockLost, NotHeld, SemaphoreMismatch, SemaphoreNotFound,
  DsyncConnectionError, KeeperUnavailable, ListenUnavailable, ServerError, InvalidArgument,
  isConnectionError, fromPg,
};
