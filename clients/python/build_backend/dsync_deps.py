"""Says at once that psycopg is missing when pip could only fail to fetch it.

pip asks the build backend for the package's requirements before it
resolves the dependencies.  When the Python being installed into has no
psycopg and the package index cannot be reached, pip would retry the
index for up to a minute (longer where packets are dropped rather than
refused) and then print "No matching distribution found for psycopg",
which does not say what to do.  check() runs first and stops the install
with the remedy instead.

It stays out of the way whenever pip may still succeed: psycopg is
importable by the target Python; or the pip command has --no-deps,
--no-index, --find-links or --index-url of its own (read from pip's
command line, /proc/<parent>/cmdline, on Linux only); or the index
answers a TCP connect within a few seconds.  DSYNC_BUILD_CHECK=0 turns it
off.  test/package_python.sh runs it offline.
"""

import os
import socket
import subprocess
import sys
import threading
from urllib.parse import urlsplit

DEFAULT_INDEX = "https://pypi.org/simple"
CONNECT_SECONDS = 3.0
# pip options after which the check has nothing to add (the index is not
# the only source, or dependencies are not installed).
PIP_OWN_SOURCES = ("--no-deps", "--no-index", "--find-links", "-f", "--index-url", "-i",
                   "--extra-index-url")


class MissingDependency(Exception):
    pass


def _target_has_psycopg():
    """Whether the Python pip installs into can import psycopg.  pip runs
    the backend with its build environment on PYTHONPATH, hiding that
    Python's own site-packages: the child runs without it."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONNOUSERSITE")}
    try:
        done = subprocess.run([sys.executable, "-c", "import psycopg"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return True                 # cannot tell: let pip decide
    return done.returncode == 0


def _pip_arguments():
    """The command line of the pip that runs this backend (its parent,
    or the parent's parent), or None if it cannot be read."""
    pid = os.getppid()
    for _ in range(2):
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                args = [a.decode("utf-8", "replace") for a in f.read().split(b"\0") if a]
            with open("/proc/%d/stat" % pid) as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return None
        names = [os.path.basename(a) for a in args[:3]]
        if "install" in args and any(n.startswith("pip") for n in names):
            return args             # pip, pip3, python -m pip, .../bin/pip
        pid = parent
    return None


def _index_reachable(url):
    parts = urlsplit(url)
    if not parts.hostname:
        return True
    port = parts.port or (443 if parts.scheme == "https" else 80)
    answered = []

    def connect():
        try:
            with socket.create_connection((parts.hostname, port), timeout=CONNECT_SECONDS):
                answered.append(True)
        except OSError:
            pass
    # In a thread: the name lookup has no timeout of its own.
    t = threading.Thread(target=connect, daemon=True)
    t.start()
    t.join(CONNECT_SECONDS)
    return bool(answered)


def check():
    """Raise MissingDependency if psycopg is missing and pip cannot fetch it."""
    if os.environ.get("DSYNC_BUILD_CHECK") == "0" or _target_has_psycopg():
        return
    args = _pip_arguments()
    if args is None or any(a.split("=", 1)[0] in PIP_OWN_SOURCES for a in args):
        return
    if os.environ.get("PIP_NO_INDEX") or os.environ.get("PIP_NO_DEPS") or \
            os.environ.get("PIP_FIND_LINKS"):
        return
    index = os.environ.get("PIP_INDEX_URL") or DEFAULT_INDEX
    if _index_reachable(index):
        return
    raise MissingDependency(
        "dsync needs psycopg 3, which %s cannot import, and pip cannot fetch it: "
        "%s could not be reached within %g s.\n"
        "Install it from your system's packages and let the environment see them, for "
        "example on Debian:\n"
        "    apt-get install python3-psycopg\n"
        "    python3 -m venv --system-site-packages ENV\n"
        "or install a psycopg wheel first (pip install --no-index --find-links DIR psycopg), "
        "then run this pip install again.  DSYNC_BUILD_CHECK=0 skips this check."
        % (sys.executable, urlsplit(index).hostname, CONNECT_SECONDS))
