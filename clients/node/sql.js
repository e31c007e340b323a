'use strict';
/*
 * The SQL the library sends, the LISTEN channel of a name, and the shapes
 * of what the server sends back (int8 as BigInt, notification payloads).
 *
 * Every statement casts its parameters to the types of the SQL interface,
 * so a JavaScript number as ttl, an object as info or a string name never
 * meets PostgreSQL's "function does not exist" for an unknown argument.
 */

const crypto = require('node:crypto');
const pg = require('pg');

const ACQUIRE = 'SELECT dsync_acquire($1::text, $2::text, $3::interval, $4::interval, $5::jsonb) AS v';
const ACQUIRE_SHARED = 'SELECT dsync_acquire_shared($1::text, $2::text, $3::interval, $4::interval, $5::jsonb) AS v';
const RENEW = 'SELECT dsync_renew($1::text, $2::text, $3::interval) AS v';
// The keeper's one statement per tick: every due lease, answers in the given order.
const RENEW_MANY = 'SELECT dsync_renew(u.n, u.h, u.t) AS v'
  + ' FROM unnest($1::text[], $2::text[], $3::interval[]) WITH ORDINALITY AS u(n, h, t, i) ORDER BY u.i';
const RELEASE = 'SELECT dsync_release($1::text, $2::text) AS v';
// Waiting without a connection (dsync 1.5): get in line, see where the
// place stands (renewing it), leave the line.
const QUEUE = 'SELECT dsync_queue($1::text, $2::text, $3::interval, $4::text, $5::boolean) AS v';
const CLAIM = 'SELECT state, fencing, extract(epoch FROM expires_in)::float8 AS expires_in'
  + ' FROM dsync_claim($1::text, $2::text)';
const UNQUEUE = 'SELECT dsync_unqueue($1::text, $2::text) AS v';
const RELEASE_MANY = 'SELECT count(*) FILTER (WHERE dsync_release(u.n, u.h)) AS v'
  + ' FROM unnest($1::text[], $2::text[]) AS u(n, h)';
// The keeper's renewals and releases wait at most 50 ms for a row another
// transaction has locked (a guard keeps its lease's row locked until its
// transaction ends, and must not hold up every other lease of the client).
// The lock_timeout is set in the statement itself, before any row is
// touched, so that each is one statement in a transaction of its own: a
// keeper stopped between round trips (SIGSTOP, a paused VM) would
// otherwise leave its transaction open, and the leases it renewed locked.
const KEEPER_LOCK_WAIT = "WITH s AS MATERIALIZED (SELECT set_config('lock_timeout', '50ms', true) AS x) ";
const KEEPER_RENEW_MANY = KEEPER_LOCK_WAIT + 'SELECT dsync_renew(u.n, u.h, u.t) AS v'
  + ' FROM s, unnest($1::text[], $2::text[], $3::interval[]) WITH ORDINALITY AS u(n, h, t, i)'
  + ' WHERE s.x IS NOT NULL ORDER BY u.i';
const KEEPER_RELEASE_MANY = KEEPER_LOCK_WAIT + 'SELECT count(*) FILTER (WHERE dsync_release(u.n, u.h)) AS v'
  + ' FROM s, unnest($1::text[], $2::text[]) AS u(n, h) WHERE s.x IS NOT NULL';
const ASSERT_HELD = 'SELECT dsync_assert_held($1::text, $2::text) AS v';
const HELD = 'SELECT fencing FROM dsync_leases WHERE lease = $1::text AND holder = $2::text';
const LOCKED = 'SELECT EXISTS (SELECT 1 FROM dsync_leases WHERE lease = $1::text) AS v';
const LEASE_STATE = 'SELECT lease, holder, fencing, expires_at FROM dsync_leases'
  + ' WHERE lease = ANY($1::text[]) ORDER BY lease, holder';
const LEADER = 'SELECT dsync_leader($1::text) AS v';
const SEM_CREATE = 'SELECT dsync_semaphore_create($1::text, $2::int) AS v';
const SEM_PERMITS = 'SELECT permits AS v FROM dsync_semaphores WHERE name = $1::text';
const EVENT_SET = 'SELECT dsync_event_set($1::text) AS v';
const EVENT_WAIT = 'SELECT dsync_event_wait($1::text, $2::interval) AS v';
const EVENT_CLEAR = 'SELECT dsync_event_clear($1::text) AS v';
const EVENT_IS_SET = 'SELECT dsync_event_is_set($1::text) AS v';
// A campaign's periodic look: refresh the membership, see who leads.
const JOIN = 'SELECT dsync_join($1::text, $2::text, $3::interval, $4::jsonb) AS expires, dsync_leader($1::text) AS leader';
const LEAVE = 'SELECT dsync_leave($1::text, $2::text) AS v';
const MEMBERS = 'SELECT member, info, joined_at, expires_at, is_leader FROM dsync_members($1::text) ORDER BY member';
const BACKEND_PID = 'SELECT pg_backend_pid() AS v';
const SENDERS = 'SELECT * FROM dsync_stats';
// Whether CREATE EXTENSION dsync was run in this database (pg_extension is
// readable by every role).
const EXTENSION_CREATED = "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'dsync') AS v";
// Where the event log stands: its newest event, or the horizon if it is empty.
const LOG_TOP = 'SELECT GREATEST(COALESCE((SELECT seq FROM dsync_event_log ORDER BY seq DESC LIMIT 1), 0),'
  + ' dsync_events_horizon())::text AS v';
const RETENTION = "SELECT extract(epoch FROM current_setting('dsync.event_retention')::interval)::float8 AS v";
// The horizon and the events after a seq, in one snapshot (no prune between).
const CATCH_UP = 'SELECT h.h::text AS horizon, e.seq::text AS seq, e.channel, e.payload::text AS payload'
  + ' FROM dsync_events_horizon() AS h(h) LEFT JOIN dsync_events_since($1::bigint, $2::text[]) AS e ON true'
  + ' ORDER BY e.seq';

// int8 as BigInt, for our statements only (the application's pg keeps its
// own parsers): a fencing token may exceed 2^53.
const types = {
  // pg's parser for every type but int8 (text format).
  getTypeParser(oid, format) {
    if (oid === 20 && format !== 'binary') return (v) => BigInt(v);
    return pg.types.getTypeParser(oid, format);
  },
};

// NAMEDATALEN - 1: the longest channel name PostgreSQL keeps.
const CHANNEL_MAX = 63;

// The channel dsync notifies for a name, as dsync_channel() computes it
// (src/events/channel.c), so the keeper can LISTEN without asking the server:
// "dsync:" and the name when that fits, else "dsync#" and 56 hex digits
// of the SHA-256 of the name's UTF-8 bytes.
function channelOf(name) {
  const raw = Buffer.from(name, 'utf8');
  if (6 + raw.length <= CHANNEL_MAX) return `dsync:${name}`;
  return `dsync#${crypto.createHash('sha256').update(raw).digest('hex').slice(0, 56)}`;
}

// A channel as an SQL identifier (LISTEN takes no parameters).
function quoteIdent(name) {
  return `"${name.replace(/"/g, '""')}"`;
}

// One simple-query string that LISTENs on every channel: one round trip
// however many there are.
function listenStatement(channels) {
  return channels.map((ch) => `LISTEN ${quoteIdent(ch)};`).join('');
}

// The same for UNLISTEN (channels no held lease needs any more).
function unlistenStatement(channels) {
  return channels.map((ch) => `UNLISTEN ${quoteIdent(ch)};`).join('');
}

// Seconds as an interval literal the server parses exactly (microseconds,
// the server's own resolution), never in the client's locale.
function interval(sec) {
  return `${(Math.round(sec * 1e6) / 1e6).toFixed(6)} seconds`;
}

// info as a jsonb parameter (null stays SQL NULL); throws for what JSON
// cannot carry, at the caller's line rather than in the server.
function jsonb(info) {
  return info === undefined || info === null ? null : JSON.stringify(info);
}

// node-postgres gives timestamptz as Date; payload times become Dates too.
function parseTime(text) {
  return text === undefined || text === null ? null : new Date(text);
}

/*
 * The event a dsync notification carries, or null if it is not one.
 * Integers that may exceed 2^53 (fencing, seq) become BigInt without
 * passing through a JavaScript number.
 */
function parsePayload(channel, payload) {
  let data;
  try {
    data = JSON.parse(String(payload).replace(/"(fencing|seq)":\s*(-?\d+)/g, '"$1":"$2"'));
  } catch (e) {
    return null;
  }
  if (data === null || typeof data !== 'object' || typeof data.event !== 'string') return null;
  const name = data.lease ?? data.group ?? data.name;
  if (typeof name !== 'string') return null;
  let fencing = null;
  let seq = null;
  try {
    if (data.fencing !== undefined && data.fencing !== null) fencing = BigInt(data.fencing);
    if (data.seq !== undefined && data.seq !== null) seq = BigInt(data.seq);
  } catch (e) {
    return null;            // not an integer: not dsync's
  }
  return {
    kind: data.event,
    name,
    holder: data.holder ?? data.member ?? null,
    fencing,
    expiresAt: parseTime(data.expires_at),
    seq,
    channel,
    raw: data,
  };
}

// The pids that send this database's events, from a dsync_stats row (a
// future version may name several).
function senderPidsOf(row) {
  if (!row) return new Set();
  const pids = row.sender_pids ?? (row.sender_pid !== undefined && row.sender_pid !== null ? [row.sender_pid] : []);
  return new Set((pids || []).filter((p) => p !== null).map(Number));
}

// Whether a connection goes through a pooler: PgBouncer sends a backend
// key of its own, so the server's pid differs from the one pg was given
// (pg-native gives none, and counts as a pooler: nothing relies on it).
async function behindPooler(conn) {
  if (typeof conn.processID !== 'number') return true;
  return (await conn.query(BACKEND_PID)).rows[0].v !== conn.processID;
}

module.exports = {
  ACQUIRE, ACQUIRE_SHARED, RENEW, RENEW_MANY, RELEASE, RELEASE_MANY, KEEPER_RENEW_MANY,
  QUEUE, CLAIM, UNQUEUE,
  KEEPER_RELEASE_MANY, ASSERT_HELD, HELD, LOCKED,
  LEASE_STATE, LEADER, SEM_CREATE, SEM_PERMITS, EVENT_SET, EVENT_WAIT, EVENT_CLEAR, EVENT_IS_SET,
  JOIN, LEAVE, MEMBERS, BACKEND_PID, behindPooler, SENDERS, EXTENSION_CREATED, LOG_TOP, RETENTION, CATCH_UP,
  types, channelOf, listenStatement, unlistenStatement, interval, jsonb, parseTime, parsePayload,
  senderPidsOf,
};
