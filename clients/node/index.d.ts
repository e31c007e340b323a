// Types of dsync-client (index.js and the files it gathers).
import { EventEmitter } from 'node:events';
import type { Pool, ClientBase, ClientConfig, CustomTypesConfig } from 'pg';

/** Exactly one of these: where connections come from. */
export interface ConnectOptions {
  connectionString?: string;
  config?: ClientConfig;
  pool?: Pool;
}

export interface ClientOptions extends ConnectOptions {
  /** Connections kept for statements (default 2). */
  poolSize?: number;
  /** false: never LISTEN (a loss is noticed at the next renewal); true: require it; null (default): where it works. */
  listen?: boolean | null;
  /** Idle connections do not keep the process alive (default false; the default clients set it). */
  allowExitOnIdle?: boolean;
  /** Seconds a statement may go unanswered beyond the wait it asks of the server before its connection is ended and the call fails with DsyncConnectionError (default 30; null: no bound). */
  callTimeout?: number | null;
  /** Blocking acquires wait in the name's line without a connection (dsync_queue), woken by the keeper, where it can LISTEN (default true); false: they wait in a backend. */
  queue?: boolean;
}

/** What an object runs on: a Client, or connection settings (a default client shared per settings). */
export interface OnClientOptions extends ConnectOptions {
  client?: Client;
  /** For the default client of the connection settings (not with `client`). */
  listen?: boolean | null;
}

export interface LockOptions extends OnClientOptions {
  /** Seconds (default 30). */
  ttl?: number;
  /** Holder name on the server (default host:pid:random); other owners of the object get holder#2, ... */
  holder?: string;
  /** Any JSON value, shown in dsync_leases. */
  info?: unknown;
  /** false: held without renewal, lapsing at its ttl (default true). */
  keepAlive?: boolean;
  /** run()'s default timeout in seconds (null: no limit). */
  timeout?: number | null;
  /** true: acquire() rejects with LockExists (a try) or AcquireTimeout (a wait) instead of answering false (default false). */
  raiseOnFailure?: boolean;
}

export interface AcquireOptions {
  /** false: answer at once (default true). */
  blocking?: boolean;
  /** Seconds; null or undefined: no limit. */
  timeout?: number | null;
  /** Ends a wait; the call then rejects with the signal's reason. */
  signal?: AbortSignal | null;
}

export interface RunOptions extends AcquireOptions {}

export interface DsyncEvent {
  kind: 'acquired' | 'released' | 'expired' | 'joined' | 'left' | 'set' | 'state' | 'gap' | string;
  name: string;
  holder: string | null;
  fencing: bigint | null;
  expiresAt: Date | null;
  seq: bigint | null;
  channel: string | null;
  raw: Record<string, unknown>;
}

export interface WatchOptions extends OnClientOptions {
  /** Seconds without an event after which the iteration ends (default: never). */
  timeout?: number | null;
  /** Resume after this seq (the last one an earlier watch yielded). */
  after?: bigint | number | string | null;
  /** false: a lost connection ends the watch with its error (default true). */
  reconnect?: boolean;
}

/** One lease held by one owner, as the keeper keeps it. */
export interface Hold {
  readonly name: string;
  readonly holder: string;
  readonly token: bigint;
  /** The ttl it is kept with (renew(ttl) changes it). */
  readonly ttlMs: number;
  readonly keepAlive: boolean;
  /** performance.now() at which the last confirmed grant or renewal was sent. */
  readonly confirmed: number;
  readonly lostReason: string | null;
  check(): void;
}

export class Client {
  constructor(opts: ClientOptions);
  readonly listen: boolean | null;
  readonly poolSize: number;
  readonly callTimeout: number | null;
  readonly queue: boolean;
  lock(name: string, opts?: Omit<LockOptions, keyof OnClientOptions>): Lock;
  readLock(name: string, opts?: Omit<LockOptions, keyof OnClientOptions>): ReadLock;
  /** Created with permits (idempotent), or attached to an existing one when permits is undefined. */
  semaphore(name: string, permits?: number | null, opts?: Omit<LockOptions, keyof OnClientOptions> & { timeout?: number | null }): Promise<Semaphore>;
  event(name: string): Event;
  election(group: string, opts?: Omit<ElectionOptions, keyof OnClientOptions>): LeaderElection;
  watch(names: string[], opts?: Omit<WatchOptions, keyof OnClientOptions>): AsyncGenerator<DsyncEvent>;
  /** Connects now; rejects with DsyncConnectionError at once on a wrong address or a server that is down. */
  ping(): Promise<void>;
  /** Stops its elections, gives back every held lease and every release still owed, closes every connection it opened; acquires in flight reject with DsyncError. */
  close(): Promise<void>;
}

export class Lock extends EventEmitter {
  constructor(name: string, opts?: LockOptions);
  readonly name: string;
  /** The calling owner's holder name while it holds (holder#2, ... for a second owner of a shared object), else the object's base name. */
  readonly holder: string;
  readonly ttl: number;
  readonly info: unknown;
  readonly keepAlive: boolean;
  readonly timeout: number | null;
  readonly client: Client;
  /** The caller's fencing token: its run() scope's, else the most recent bare hold's. */
  readonly token: bigint | null;
  /** Whether the caller holds it, as far as the client knows (no statement). */
  readonly held: boolean;
  readonly lost: boolean;
  readonly lostReason: string | null;
  readonly hold: Hold | null;
  acquire(opts?: AcquireOptions): Promise<boolean>;
  /** NotHeld if the caller holds nothing. */
  release(): Promise<boolean>;
  /** fn runs as one owner holding the lease; AcquireTimeout if not had in time. */
  run<T>(fn: (lock: this) => T | Promise<T>, opts?: RunOptions): Promise<T>;
  /** The new expiry, or null (the hold is then lost); with ttl (seconds), the lease is kept with that ttl from then on. */
  renew(ttl?: number): Promise<Date | null>;
  locked(): Promise<boolean>;
  owned(): Promise<boolean>;
  check(): void;
  /**
   * dsync_assert_held in the caller's transaction: a pg Client/PoolClient, a knex
   * transaction or a Prisma interactive transaction.  The token as a BigInt; NotHeld if not held.
   */
  guard(tx: ClientBase | GuardTransaction): Promise<bigint>;
  /** Gives back every hold of this object; the client stays open. */
  close(): Promise<void>;
  /** Not awaited; a listener that throws or rejects is reported as a DsyncWarning. */
  on(event: 'lost', listener: (reason: string, hold: Hold) => void | Promise<void>): this;
  once(event: 'lost', listener: (reason: string, hold: Hold) => void | Promise<void>): this;
}

/** The shared side of a read-write lock: any number at once, never with a Lock. */
export class ReadLock extends Lock {
  constructor(name: string, opts?: LockOptions);
}

export class Semaphore extends Lock {
  constructor(name: string, permits: number, opts?: LockOptions);
  /** null until an attached semaphore has read its count. */
  permits: number | null;
  static create(name: string, permits: number, opts?: LockOptions): Promise<Semaphore>;
  /** Waits up to timeout seconds (default 60; null: for ever; 0: look once), then SemaphoreNotFound. */
  static attach(name: string, opts?: LockOptions & { timeout?: number | null }): Promise<Semaphore>;
  /** The server's count, null if not defined (needs extension version 1.5). */
  getCount(): Promise<number | null>;
}

/** A one-to-one signal: each set() wakes exactly one wait(). */
export class Event {
  constructor(name: string, opts?: OnClientOptions);
  readonly name: string;
  readonly client: Client;
  set(): Promise<void>;
  /** true, or false after timeout seconds (null: no limit). */
  wait(timeout?: number | null, opts?: { signal?: AbortSignal | null }): Promise<boolean>;
  clear(): Promise<number>;
  isSet(): Promise<boolean>;
  close(): Promise<void>;
}

export interface Member {
  member: string;
  info: unknown;
  joinedAt: Date;
  expiresAt: Date;
  isLeader: boolean;
}

export interface ElectionOptions extends OnClientOptions {
  /** Seconds (default 15). */
  ttl?: number;
  member?: string;
  info?: unknown;
}

export interface ElectionStatus {
  group: string;
  member: string;
  running: boolean;
  isLeader: boolean;
  leader: string | null;
  leaderExists: boolean;
  token: bigint | null;
  /** performance.now() of the campaign's last look, null before it. */
  seenAt: number | null;
}

export class LeaderElection extends EventEmitter {
  constructor(group: string, opts?: ElectionOptions);
  readonly group: string;
  readonly member: string;
  readonly ttl: number;
  readonly client: Client;
  /** Getters that never wait: what the campaign last saw; isLeader is false as soon as the term's hold is marked lost. */
  readonly isLeader: boolean;
  readonly leaderExists: boolean;
  readonly token: bigint | null;
  readonly running: boolean;
  /** The campaign has made its first attempt (won the lease or found it held). */
  readonly ready: boolean;
  /** true once ready; false after timeout seconds (null: no limit) or if the campaign stops first. */
  waitReady(opts?: { timeout?: number | null }): Promise<boolean>;
  readonly status: ElectionStatus;
  error: Error | null;
  /** The last failed campaign attempt's error (each is retried), and how many failed. */
  lastError: Error | null;
  failures: number;
  start(): this;
  stop(): Promise<void>;
  /** Asks the server. */
  leader(): Promise<string | null>;
  members(): Promise<Member[]>;
  on(event: 'elected', listener: (token: bigint) => void): this;
  on(event: 'lost', listener: (reason: string) => void): this;
  on(event: 'members', listener: (members: Member[]) => void): this;
  on(event: 'error', listener: (err: Error) => void): this;
  on(event: 'retry', listener: (err: Error, pauseMs: number) => void): this;
  once(event: 'elected', listener: (token: bigint) => void): this;
  once(event: 'lost', listener: (reason: string) => void): this;
  once(event: 'members', listener: (members: Member[]) => void): this;
  once(event: 'error', listener: (err: Error) => void): this;
}

export function watch(names: string[], opts?: WatchOptions): AsyncGenerator<DsyncEvent>;
export function withLock<T>(name: string, fn: (lock: Lock) => T | Promise<T>, opts?: LockOptions & { signal?: AbortSignal | null }): Promise<T>;
/** Closes every default client (giving back what they hold). */
export function closeDefaultClients(): Promise<void>;
export function parsePayload(channel: string, payload: string): DsyncEvent | null;
/** The channel dsync notifies for a name, as dsync_channel() computes it. */
export function channelOf(name: string): string;
export function defaultHolder(): string;
/** int8 as BigInt: pass as a query's `types` to read tokens yourself. */
export const types: CustomTypesConfig;
/** A knex transaction (raw) or a Prisma interactive transaction ($queryRawUnsafe), as guard() takes them. */
export type GuardTransaction =
  | { raw(sql: string, bindings: unknown[]): PromiseLike<{ rows: Array<Record<string, unknown>> }> }
  | { $queryRawUnsafe(sql: string, ...values: unknown[]): PromiseLike<unknown> };
/** A fencing token as a BigInt, from a string of digits (pg, knex), a safe integer number or a BigInt. */
export function toToken(x: bigint | string | number): bigint;

export class DsyncError extends Error {
  constructor(message: string, opts?: { cause?: unknown; code?: string });
  /** The SQLSTATE (or node's socket error code) of the cause, if any. */
  code: string | undefined;
  /** What to do about it, for a configuration error (the server's hint otherwise), if any. */
  hint?: string;
  cause?: unknown;
}
export class AcquireTimeout extends DsyncError {}
export class LockExists extends AcquireTimeout {}
export class LockLost extends DsyncError {}
export class NotHeld extends DsyncError {}
export class SemaphoreMismatch extends DsyncError {}
export class SemaphoreNotFound extends DsyncError {}
export class DsyncConnectionError extends DsyncError {}
export class KeeperUnavailable extends DsyncConnectionError {}
export class ListenUnavailable extends DsyncError {}
export class ServerError extends DsyncError {}
export class InvalidArgument extends ServerError {}
/** A stale fencing token refused by dsync_fence or a dsync_fenced trigger (SQLSTATE 55000). */
export class StaleToken extends DsyncError {}
/** No CREATE EXTENSION dsync in the database connected to; `hint` says what to run. */
export class ExtensionNotCreated extends DsyncError {}
/** The server does not preload dsync (shared_preload_libraries); `hint` says what to put in postgresql.conf. */
export class NotPreloaded extends DsyncError {}
/**
 * The dsync error for a PostgreSQL error thrown by pg, knex or Prisma
 * (StaleToken, NotHeld, NotPreloaded, ExtensionNotCreated, SemaphoreMismatch),
 * or null if it is not one of dsync's.
 */
export function translateError(err: unknown, opts?: { what?: string; database?: string }): DsyncError | null;
