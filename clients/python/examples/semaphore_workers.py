"""A semaphore of 4 shared by several workers (redsync's RedisSemaphore):
never more than 4 in the section at once."""

import os
import threading
import time

from dsync import Semaphore

dsn = os.environ.get("DSYNC_DSN", "dbname=app")
inside = 0
most = 0
guard = threading.Lock()


def worker(i):
    global inside, most
    sem = Semaphore("api-quota", 4, conninfo=dsn, ttl=30)
    with sem:
        with guard:
            inside += 1
            most = max(most, inside)
        time.sleep(0.2)
        with guard:
            inside -= 1
    sem.close()


threads = [threading.Thread(target=worker, args=(i,)) for i in range(10)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(f"10 workers done; at most {most} held a permit at once")
assert most <= 4
