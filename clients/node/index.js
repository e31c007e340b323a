'use strict';
/*
 * dsync for Node, on node-postgres: a Client that owns the connections
 * (a small statement pool, connections of their own for blocking waits,
 * one keeper renewing every held lease), and Lock, ReadLock, Semaphore,
 * Event, LeaderElection, watch and withLock on it.  Fencing tokens are
 * BigInt everywhere.  See README.md, and clients/DESIGN.md for the rules.
 *
 * This file only gathers the exports; each concern has a file of its own.
 */

const { Client, closeDefaultClients } = require('./client');
const { Lock, ReadLock, Semaphore, withLock } = require('./lock');
const { Event } = require('./event');
const { LeaderElection } = require('./election');
const { watch } = require('./watch');
const { parsePayload, channelOf, types } = require('./sql');
const { defaultHolder } = require('./args');
const { toToken } = require('./guard');
const {
  DsyncError, AcquireTimeout, LockExists, LockLost, NotHeld, SemaphoreMismatch,
  SemaphoreNotFound, DsyncConnectionError, KeeperUnavailable, ListenUnavailable, ServerError, InvalidArgument,
  StaleToken, ExtensionNotCreated, NotPreloaded, translateError,
} = require('./errors');

module.exports = {
  Client, Lock, ReadLock, Semaphore, Event, LeaderElection, watch, withLock, closeDefaultClients,
  parsePayload, channelOf, defaultHolder, types, toToken,
  DsyncError, AcquireTimeout, LockExists, LockLost, NotHeld, SemaphoreMismatch,
  SemaphoreNotFound, DsyncConnectionError, KeeperUnavailable, ListenUnavailable, ServerError, InvalidArgument,
  StaleToken, ExtensionNotCreated, NotPreloaded, translateError,
};
