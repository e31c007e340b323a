'use strict';
// A semaphore of 4 shared by several workers (redsync's RedisSemaphore).
const { Semaphore } = require('..');

const config = process.env.DSYNC_DSN ? require('../test/helpers').direct : {};

async function main() {
  let inside = 0;
  let most = 0;
  await Promise.all(Array.from({ length: 10 }, async () => {
    const sem = new Semaphore('node-api-quota', 4, { config, ttl: 30 });
    await sem.acquire();
    inside += 1;
    most = Math.max(most, inside);
    await new Promise((r) => setTimeout(r, 200));
    inside -= 1;
    await sem.release();
    await sem.close();
  }));
  console.log(`10 workers done; at most ${most} held a permit at once`);
  if (most > 4) process.exit(1);
}

main().catch((e) => { console.error(e); process.exit(1); });
