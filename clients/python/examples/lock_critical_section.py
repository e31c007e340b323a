"""A lock around a critical section (mongoelector's MongoLocker, grelmicro's
Lock): the write is guarded by the fencing token in its own transaction."""

import os
import sys

import psycopg

from dsync import Client

dsn = os.environ.get("DSYNC_DSN", "dbname=app")

with psycopg.connect(dsn, autocommit=True) as conn:
    conn.execute("CREATE TABLE IF NOT EXISTS example_account (id int PRIMARY KEY, balance int)")
    conn.execute("INSERT INTO example_account VALUES (1, 100) ON CONFLICT DO NOTHING")

client = Client(dsn)                         # one per process
lock = client.lock("account-1", ttl=30)
with lock:                                   # blocks until held
    with psycopg.connect(dsn) as conn, conn.transaction():
        token = lock.guard(conn)             # nobody can take the lease until commit
        conn.execute("UPDATE example_account SET balance = balance - 10 WHERE id = 1")
    print(f"debited under fencing token {token}")

if not lock.acquire(blocking=False):         # mongoelector: acquire(blocking=False)
    sys.exit("someone else holds it")
lock.release()
client.close()
