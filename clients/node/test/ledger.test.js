'use strict';
// The keeper's ledger on its own: which holds it takes as confirmed at
// once, given what its connection heard between an acquirer's mark and
// the hold's arrival.  A hold wrongly taken as confirmed would miss a
// loss; one wrongly left unconfirmed costs a renewal.
const { test } = require('node:test');
const assert = require('node:assert');
const { Hold, Ledger, NEWS_KEPT } = require('../ledger');
const { channelOf } = require('../sql');

const NAME = 'ledger-test';
const CHANNEL = channelOf(NAME);
const SENDER = 4242;

const notice = (kind, holder, token) => JSON.stringify({ event: kind, lease: NAME, holder, fencing: String(token) });

function ledger() {
  const led = new Ledger();
  led.connectedAnew(true, new Set([SENDER]));
  led.listened([CHANNEL]);
  return led;
}

function hold(holder = 'me', token = 100n) {
  return new Hold({ lock: null, client: null, owners: null, name: NAME, holder, token, ttl: 30, ttlText: '30 s', keepAlive: true, granted: performance.now() });
}

function added(led, mark, h) {
  led.add(h, mark);
  return !led.unverified.has(h);
}

test('nothing heard since the mark', () => {
  const led = ledger();
  assert.ok(added(led, led.mark(CHANNEL), hold()));
});

test('hand-offs of other holders and earlier tokens are no news', () => {
  const led = ledger();
  const mark = led.mark(CHANNEL);
  for (let i = 0; i < 5; i++) {
    led.judge(CHANNEL, notice('acquired', `w${i}`, 90 + i), SENDER);
    led.judge(CHANNEL, notice('released', `w${i}`, 90 + i), SENDER);
  }
  led.judge(CHANNEL, notice('released', 'me', 99), SENDER);
  led.judge(CHANNEL, notice('expired', 'other', 98), SENDER);
  assert.ok(added(led, mark, hold()));
});

test('a release of the very token heard before the hold arrived is confirmed', () => {
  const led = ledger();
  const mark = led.mark(CHANNEL);
  led.judge(CHANNEL, notice('released', 'me', 100), SENDER);
  assert.ok(!added(led, mark, hold()));
});

test('a notice from an unknown sender, or with no token, about the holder is confirmed', () => {
  let led = ledger();
  let mark = led.mark(CHANNEL);
  led.judge(CHANNEL, notice('released', 'me', 99), 1);
  assert.ok(!added(led, mark, hold()));
  led = ledger();
  mark = led.mark(CHANNEL);
  led.judge(CHANNEL, JSON.stringify({ event: 'expired', lease: NAME, holder: 'me' }), SENDER);
  assert.ok(!added(led, mark, hold()));
});

test('news no longer on record is confirmed', () => {
  const led = ledger();
  let mark = led.mark(CHANNEL);
  for (let i = 0; i <= NEWS_KEPT; i++) led.judge(CHANNEL, notice('released', `w${i}`, 50 + i), SENDER);
  assert.ok(!added(led, mark, hold()));
  mark = led.mark(CHANNEL);
  led.judge(CHANNEL, notice('released', 'w0', 80), SENDER);
  assert.ok(added(led, mark, hold('me', 101n)));
});

test('a new connection or LISTEN since the mark is confirmed', () => {
  let led = ledger();
  let mark = led.mark(CHANNEL);
  led.connectedAnew(true, new Set([SENDER]));
  led.listened([CHANNEL]);
  assert.ok(!added(led, mark, hold()));
  led = ledger();
  mark = led.mark(CHANNEL);
  led.unlistened([CHANNEL]);
  led.listened([CHANNEL]);
  assert.ok(!added(led, mark, hold()));
});

test('no mark is confirmed', () => {
  assert.ok(!added(ledger(), null, hold()));
});
