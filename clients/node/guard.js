'use strict';
/*
 * Fenced writes from the caller's own transaction, whatever it is made
 * with: a node-postgres Client or PoolClient, a knex transaction, or a
 * Prisma interactive transaction.  And the one conversion of a fencing
 * token to what the library uses everywhere, a BigInt (pg and knex give
 * int8 as a string unless `types` is used; Prisma gives a BigInt).
 */

const errors = require('./errors');
const sql = require('./sql');

// dsync_assert_held with knex's positional placeholders (knex turns ? into
// $n for pg).  The casts keep "function does not exist" away from strings.
const ASSERT_HELD_KNEX = 'SELECT dsync_assert_held(?::text, ?::text) AS v';

/*
 * A fencing token as a BigInt, from the string pg and knex return for an
 * int8, a number (exact only up to 2^53: refused beyond it), or a BigInt.
 * Throws TypeError for anything else, or a value that is not a positive
 * integer: a token is never 0, negative or fractional.
 */
function toToken(x) {
  let v;
  if (typeof x === 'bigint') v = x;
  else if (typeof x === 'string' && /^\s*\d+\s*$/.test(x)) v = BigInt(x.trim());
  else if (typeof x === 'number' && Number.isSafeInteger(x)) v = BigInt(x);
  else if (typeof x === 'number' && Number.isInteger(x)) {
    throw new TypeError(`fencing token ${x} is beyond 2^53 and lost precision as a number; read it as a string or BigInt`);
  } else {
    throw new TypeError(`a fencing token must be a bigint, a string of digits or an integer number, not ${typeof x === 'string' ? JSON.stringify(x) : typeof x}`);
  }
  if (v <= 0n) throw new TypeError(`a fencing token must be positive, not ${v}`);
  return v;
}

// Which kind of transaction tx is, by what it can do (duck typing: none of
// the three packages is a dependency of this library).
//   'knex': knex's transaction (or knex itself): a function with raw()
//   'prisma': a Prisma client or interactive transaction: $queryRawUnsafe()
//   'pg': node-postgres' Client or PoolClient (or anything with query())
function kindOf(tx) {
  if (tx && (typeof tx === 'function' || typeof tx === 'object')) {
    if (typeof tx.raw === 'function' && (typeof tx === 'function' || tx.isTransaction !== undefined)) return 'knex';
    if (typeof tx.$queryRawUnsafe === 'function') return 'prisma';
    if (typeof tx.query === 'function') return 'pg';
  }
  const what = tx === null ? 'null' : typeof tx;
  throw new TypeError(`guard() takes a pg Client or PoolClient, a knex transaction or a Prisma interactive transaction, not ${what}`);
}

/*
 * Runs dsync_assert_held(name, holder) in tx: the token (BigInt) if holder
 * holds the lease (nobody can take it until tx ends), else NotHeld; a
 * server error is the library's (translateError), the transaction aborted.
 * A null holder (the caller holds nothing) is NotHeld at once, with no
 * statement, once tx is known to be a transaction we can use.
 * what: the operation and lease, first in an error's message.
 */
async function assertHeldIn(tx, name, holder, what) {
  const kind = kindOf(tx);
  if (holder === null) throw new errors.NotHeld(`${what}: the lease is not held by the calling owner`);
  let v;
  try {
    if (kind === 'knex') {
      const r = await tx.raw(ASSERT_HELD_KNEX, [name, holder]);
      v = r.rows[0].v;
    } else if (kind === 'prisma') {
      const rows = await tx.$queryRawUnsafe(sql.ASSERT_HELD, name, holder);
      v = rows[0].v;
    } else {
      const r = await tx.query({ text: sql.ASSERT_HELD, values: [name, holder], types: sql.types });
      v = r.rows[0].v;
    }
  } catch (e) {
    throw errors.translateError(e, { what, database: databaseOf(tx, kind) }) || errors.fromPg(e, what);
  }
  return toToken(v);
}

// The name of the database tx is connected to, where it can be known
// without a statement (the transaction is aborted when this is asked).
function databaseOf(tx, kind) {
  try {
    if (kind === 'pg') return tx.database;
    if (kind === 'knex') {
      const c = tx.client && tx.client.config && tx.client.config.connection;
      return c && typeof c === 'object' ? c.database : undefined;
    }
  } catch (e) {
    // a getter that throws: no name, the hint says "the database"
  }
  return undefined;
}

module.exports = { toToken, assertHeldIn, kindOf };
