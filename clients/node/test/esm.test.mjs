// ES module users write `import { Lock, LockLost } from 'dsync-client'`.
// Node finds a CommonJS module's named exports by reading its source, and
// stops at the first export it cannot read: every name require() gives must
// also be a named import.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import * as esm from '../index.js';
import { Lock, LockLost, AcquireTimeout, InvalidArgument } from '../index.js';

const require = createRequire(import.meta.url);

test('every export is a named ES module import', () => {
  const cjs = require('../index.js');
  const named = Object.keys(esm).filter((k) => k !== 'default').sort();
  assert.deepEqual(named, Object.keys(cjs).sort());
  for (const k of named) assert.equal(esm[k], cjs[k], k);
  assert.equal(typeof Lock, 'function');
  assert.ok(new LockLost('x') instanceof Error);
  assert.equal(AcquireTimeout, cjs.AcquireTimeout);
  assert.equal(InvalidArgument, cjs.InvalidArgument);
});
