// Types of dsync-client (index.js).
import { EventEmitter } from 'node:events';
import type { Pool, Client, ClientConfig } from 'pg';

export interface ConnectOptions {
  connectionString?: string;
  config?: ClientConfig;
  pool?: Pool;
}

export interface LockOptions extends ConnectOptions {
  ttl?: number;            // seconds
  holder?: string;         // default host:pid:random
  info?: unknown;          // any JSON value
  listen?: boolean;        // default: when the connection is not behind a pooler
}

export interface DsyncEvent {
  kind: 'acquired' | 'released' | 'expired' | 'joined' | 'left' | 'set' | 'state' | string;
  name: string;
  holder: string | null;
  fencing: bigint | null;
  expiresAt: Date | null;
  seq: bigint | null;
  channel: string | null;
  raw: Record<string, unknown>;
}

export class Lock extends EventEmitter {
  constructor(name: string, opts?: LockOptions);
  readonly name: string;
  readonly holder: string;
  token: bigint | null;
  lost: boolean;
  lostReason: string | null;
  acquire(opts?: { blocking?: boolean; timeout?: number | null }): Promise<boolean>;
  release(): Promise<boolean>;
  renew(): Promise<Date | null>;
  locked(): Promise<boolean>;
  owned(): Promise<boolean>;
  check(): void;
  guard(client: Client): Promise<bigint>;
  close(): Promise<void>;
  on(event: 'lost', listener: (reason: string) => void): this;
}

/** The shared side of a read-write lock: any number at once, never with a Lock. */
export class ReadLock extends Lock {
  constructor(name: string, opts?: LockOptions);
}

export class Semaphore extends Lock {
  constructor(name: string, permits: number, opts?: LockOptions);
}

export interface Member {
  member: string;
  info: unknown;
  joinedAt: Date;
  expiresAt: Date;
  isLeader: boolean;
}

export class LeaderElection extends EventEmitter {
  constructor(group: string, opts?: LockOptions & { member?: string });
  readonly isLeader: boolean;
  readonly token: bigint | null;
  start(): this;
  stop(): Promise<void>;
  leaderExists(): Promise<boolean>;
  members(): Promise<Member[]>;
  on(event: 'elected', listener: (token: bigint) => void): this;
  on(event: 'lost', listener: (reason: string) => void): this;
  on(event: 'members', listener: (members: Member[]) => void): this;
  on(event: 'error', listener: (err: Error) => void): this;
}

export function watch(names: string[], opts?: ConnectOptions & { timeout?: number; after?: bigint | number | string }): AsyncGenerator<DsyncEvent>;
export function withLock<T>(name: string, fn: (lock: Lock) => Promise<T>, opts?: LockOptions & { timeout?: number }): Promise<T>;
export function parsePayload(channel: string, payload: string): DsyncEvent | null;
export function defaultHolder(): string;
export class DsyncError extends Error {}
export class LockLost extends DsyncError {}
export class ListenUnavailable extends DsyncError {}
