"""A one-to-one event between two processes (redsync's RedisEvent):
each set() wakes exactly one wait()."""

import os
import subprocess
import sys

from dsync import Event

dsn = os.environ.get("DSYNC_DSN", "dbname=app")

if len(sys.argv) > 1 and sys.argv[1] == "waiter":
    ok = Event("job-ready", conninfo=dsn).wait(timeout=30)
    print("waiter woke" if ok else "waiter timed out")
    sys.exit(0 if ok else 1)

Event("job-ready", conninfo=dsn).clear()
waiter = subprocess.Popen([sys.executable, __file__, "waiter"], env=os.environ)
Event("job-ready", conninfo=dsn).set()
sys.exit(waiter.wait())
