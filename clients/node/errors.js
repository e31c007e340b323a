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

// A fencing token older than one already accepted for the resource was
// refused by dsync_fence or a dsync_fenced trigger (SQLSTATE 55000,
// "stale fencing token ..."): the lease it came with was lost, and the
// write with it must not happen.  Not a NotHeld: dsync_assert_held's 55000
// says the caller holds nothing, this one that a write came too late.
class StaleToken extends DsyncError {}

// The dsync extension is not created in the database the client connects
// to (a dsync_ function or view does not exist there, and pg_extension
// has no dsync).  A configuration error: retrying does not help.
class ExtensionNotCreated extends DsyncError {}

// The server does not preload dsync (shared_preload_libraries), so its
// functions cannot run (SQLSTATE 55000, "dsync must be loaded via
// shared_preload_libraries").  A configuration error, not a lost lease.
class NotPreloaded extends DsyncError {}

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

// The server's own texts that tell one 55000 from another (src/sql/dsync.c,
// src/leases/fence.c, src/leases/leasehold.c).  Matched anywhere in the
// message: knex puts the statement in front of it.
const NOT_PRELOADED_TEXT = 'dsync must be loaded via shared_preload_libraries';
const STALE_TEXT = /stale fencing token for resource/;
// An object of the extension's that is missing: `function dsync_acquire(...)
// does not exist` (42883), `relation "dsync_stats" does not exist` (42P01).
const MISSING_CODES = new Set(['42883', '42P01']);
const MISSING_TEXT = /\bdsync_[a-z_]+\b.*does not exist/;

const PRELOAD_HINT = "add dsync to shared_preload_libraries in postgresql.conf "
  + "(shared_preload_libraries = 'dsync') and restart the server";

// The hint of an ExtensionNotCreated: what to run, and where.
function createHint(database) {
  const where = database ? `database "${database}"` : 'the database the client connects to';
  return `run CREATE EXTENSION dsync in ${where} as a superuser `
    + '(or ALTER EXTENSION dsync UPDATE if an older version is there), with dsync in shared_preload_libraries';
}

/*
 * The PostgreSQL error inside err, whoever wrapped it: pg's and knex's
 * errors are it (knex prefixes the statement to the message); Prisma's
 * P2010 ($queryRaw failed) carries the code in meta.code and the text in
 * meta.message, and with a driver adapter in meta.driverAdapterError.cause
 * (originalCode, originalMessage); other wrappers keep it as err.cause.
 * Returns { code, message, hint } or null.
 */
function pgErrorOf(err, depth = 0) {
  if (!err || typeof err !== 'object' || depth > 4) return null;
  const meta = err.meta;
  // Prisma's own codes (P2010) look like SQLSTATEs: its meta comes first.
  const prisma = meta && typeof meta === 'object' && /^P\d{4}$/.test(String(err.code));
  if (!prisma && typeof err.code === 'string' && /^[0-9A-Z]{5}$/.test(err.code) && typeof err.message === 'string') {
    return { code: err.code, message: err.message, hint: err.hint };
  }
  if (prisma) {
    const dae = meta.driverAdapterError;
    const c = dae && dae.cause;
    if (c && typeof c.originalCode === 'string') {
      return { code: c.originalCode, message: String(c.originalMessage ?? c.message ?? ''), hint: c.hint };
    }
    if (typeof meta.code === 'string' && /^[0-9A-Z]{5}$/.test(meta.code)) {
      return { code: meta.code, message: String(meta.message ?? err.message ?? ''), hint: undefined };
    }
  }
  return pgErrorOf(err.cause, depth + 1);
}

// Whether PostgreSQL error p ({ code, message }) says one of the
// extension's objects is missing.
function missing(p) {
  return MISSING_CODES.has(p.code) && MISSING_TEXT.test(p.message);
}

// Whether a driver error says one of the extension's objects is missing
// (the caller then asks pg_extension whether the extension is there).
function isMissingObject(e) {
  const p = pgErrorOf(e);
  return p !== null && missing(p);
}

/*
 * The one SQLSTATE table of dsync's own errors: the code, the server's
 * text that tells it from others of that code (matched anywhere in the
 * message), the class, and whether the code alone says it of one of our
 * own statements (dsync_assert_held's 55000, dsync_semaphore_create's
 * 42710), where the server's text may be another's.
 */
const OWN_ERRORS = [
  ['55000', NOT_PRELOADED_TEXT, NotPreloaded, false],
  ['55000', STALE_TEXT, StaleToken, false],
  ['55000', /lease ".*" is not held by/, NotHeld, true],
  // DROP EXTENSION under a running call (src/: "extension "dsync" has
  // been dropped from this database"): the extension is not there.
  ['42704', 'extension "dsync" has been dropped', ExtensionNotCreated, false],
  ['42710', /semaphore ".*" already exists/, SemaphoreMismatch, true],
];

/*
 * The error class for PostgreSQL error p of dsync's own, else null.
 * missingMeansAbsent: a missing dsync_ object means the extension is not
 * created (known from pg_extension, or assumed where it cannot be asked);
 * ours: p came from one of our own statements (OWN_ERRORS' last column).
 */
function dsyncClassOf(p, missingMeansAbsent, ours = false) {
  const says = (text) => (typeof text === 'string' ? p.message.includes(text) : text.test(p.message));
  const row = OWN_ERRORS.find(([code, text]) => code === p.code && says(text))
    || (ours ? OWN_ERRORS.find(([code, , , alone]) => code === p.code && alone) : undefined);
  if (row) return row[2];
  if (missingMeansAbsent && missing(p)) return ExtensionNotCreated;
  return null;
}

// The error of class Cls for driver error e (p: the PostgreSQL error in
// it, or null), its message led by what, its hint what to do.
function make(Cls, e, p, what, database) {
  const code = p !== null ? p.code : typeof e.code === 'string' ? e.code : undefined;
  if (p === null || Cls === DsyncConnectionError) {
    return new Cls(`${what}: ${String(e.message || e).split('\n')[0]}`, { cause: e, code });
  }
  const text = p.message.split('\n')[0];
  const where = database ? `database "${database}"` : 'this database';
  let message = `${what}: ${text}`;
  let hint = p.hint;
  if (Cls === NotPreloaded) {
    message = `${what}: dsync is not preloaded by the server of ${where} (${text})`;
    hint = PRELOAD_HINT;
  } else if (Cls === ExtensionNotCreated) {
    message = `${what}: the dsync extension is not created in ${where} (${text})`;
    hint = createHint(database);
  }
  const out = new Cls(message, { cause: e, code });
  if (hint) out.hint = hint;
  return out;
}

/*
 * The dsync error for err, a PostgreSQL error as pg, knex or Prisma throw
 * it (see pgErrorOf), or null if it is not one of dsync's: StaleToken,
 * NotHeld, NotPreloaded, SemaphoreMismatch, and ExtensionNotCreated for a
 * missing dsync_ function or relation (without asking pg_extension, which
 * an aborted transaction cannot: an older extension missing a newer
 * function looks the same, and the hint names ALTER EXTENSION UPDATE too).
 * opts.what: the operation, put first in the message; opts.database: the
 * database's name, for the hint.
 */
function translateError(err, { what = 'dsync', database } = {}) {
  if (err instanceof DsyncError) return err;
  const p = pgErrorOf(err);
  const Cls = p === null ? null : dsyncClassOf(p, true);
  return Cls === null ? null : make(Cls, err, p, what, database);
}

// Our error for a driver error e that happened while doing `what` (a short
// phrase naming the operation and the lease), from one of our own
// statements: dsync's own errors (OWN_ERRORS), class 22 InvalidArgument.
// extensionAbsent: the caller has asked pg_extension and found no dsync
// (see diagnose); database: the name of the database, for the hint.
function fromPg(e, what, { extensionAbsent = false, database } = {}) {
  if (e instanceof DsyncError || !isDriverError(e)) return e;
  const p = pgErrorOf(e);
  let Cls = ServerError;
  if (isConnectionError(e)) Cls = DsyncConnectionError;
  else if (p !== null) {
    Cls = dsyncClassOf(p, extensionAbsent, true) || (p.code.startsWith('22') ? InvalidArgument : ServerError);
  }
  return make(Cls, e, p, what, database);
}

/*
 * The one diagnosis of a driver error e met doing `what`: fromPg, after
 * asking whether the extension is created where e says a dsync_ function
 * or relation is missing (an older version lacks it too: its error is
 * then the server's).  extensionCreated: an async function answering
 * that from pg_extension; a failure to answer counts as created.
 */
async function diagnose(e, what, { database, extensionCreated }) {
  if (e instanceof DsyncError || !isDriverError(e)) return e;
  let absent = false;
  if (isMissingObject(e)) absent = !(await Promise.resolve().then(extensionCreated).catch(() => true));
  return fromPg(e, what, { extensionAbsent: absent, database });
}

module.exports = {
  DsyncError, AcquireTimeout, LockExists, LockLost, NotHeld, SemaphoreMismatch, SemaphoreNotFound,
  DsyncConnectionError, KeeperUnavailable, ListenUnavailable, ServerError, InvalidArgument,
  StaleToken, ExtensionNotCreated, NotPreloaded,
  isConnectionError, fromPg, diagnose, translateError,
};
