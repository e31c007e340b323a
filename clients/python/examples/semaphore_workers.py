"""A semaphore of 4 shared by ten worker threads (redsync's RedisSemaphore):
one Semaphore object for all of them, each thread taking its own permit,
and never more than 4 in the section at once, in every process."""

import os
import threading
import time

from dsync import Client

dsn = os.environ.get("DSYNC_DSN", "dbname=app")
client = Client(dsn)
sem = client.semaphore("api-quota", 4, ttl=30)       # created, or checked against the server's count
inside = 0
most = 0
guard = threading.Lock()


def worker():
    global inside, most
    with sem:                                        # this thread's permit
        with guard:
            inside += 1
            most = max(most, inside)
        time.sleep(0.2)
        with guard:
            inside -= 1


threads = [threading.Thread(target=worker) for _ in range(10)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(f"10 workers done; at most {most} held a permit at once")
assert most <= 4
client.close()
