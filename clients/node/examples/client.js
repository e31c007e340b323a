'use strict';
// One Client per process: a lock shared by concurrent tasks (each run() is
// an owner of its own), a one-to-one signal, and a close() that gives
// everything back.
const { Client } = require('..');

const config = process.env.DSYNC_DSN ? require('../test/helpers').direct : {};

async function main() {
  const client = new Client({ config });
  try {
    const lock = client.lock('node-example-report', { ttl: 30 });
    let inside = 0;
    let most = 0;
    await Promise.all([1, 2, 3].map((i) => lock.run(async () => {
      inside += 1;
      most = Math.max(most, inside);
      await new Promise((r) => setTimeout(r, 50));
      inside -= 1;
      return i;
    })));
    const ready = client.event('node-example-ready');
    const waiting = ready.wait(5);
    await ready.set();
    console.log(`3 tasks took turns (at most ${most} inside); signal received: ${await waiting}`);
  } finally {
    await client.close();
  }
}

main().catch((e) => { console.error(e); process.exit(1); });
