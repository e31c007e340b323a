'use strict';
// A lock around a critical section, the write fenced in its own
// transaction (mongoelector's MongoLocker as a context manager).
const pg = require('pg');
const { withLock } = require('..');

const config = process.env.DSYNC_DSN ? require('../test/helpers').direct : {};

async function main() {
  const client = new pg.Client(config);
  await client.connect();
  await client.query('CREATE TABLE IF NOT EXISTS example_node_account (id int PRIMARY KEY, balance int)');
  await client.query('INSERT INTO example_node_account VALUES (1, 100) ON CONFLICT DO NOTHING');
  const token = await withLock('node-account-1', async (lock) => {
    await client.query('BEGIN');
    const t = await lock.guard(client);          // BigInt; nobody can take it until COMMIT
    await client.query('UPDATE example_node_account SET balance = balance - 10 WHERE id = 1');
    await client.query('COMMIT');
    return t;
  }, { config, ttl: 30 });
  console.log(`debited under fencing token ${token}`);
  await client.end();
}

main().catch((e) => { console.error(e); process.exit(1); });
