"""The examples run as users would run them, against the test server."""

import os
import subprocess
import sys

import pytest

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples")


@pytest.mark.parametrize("script,expect", [
    ("lock_critical_section.py", "debited under fencing token"),
    ("leader_job.py", "running the job as"),
    ("semaphore_workers.py", "10 workers done"),
    ("event_two_processes.py", "waiter woke"),
])
def test_example(server, script, expect):
    env = dict(os.environ, DSYNC_DSN=server.dsn(),
               PYTHONPATH=os.path.join(EXAMPLES, ".."))
    out = subprocess.run([sys.executable, os.path.join(EXAMPLES, script)], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert expect in out.stdout
