"""Says at once that psycopg is missing when pip could only fail to fetch it.

pip asks the build backend for the package's requirements before it
resolves the dependencies.  When the Python being installed into has no
psycopg and the package index cannot be reached, pip would retry the
index for up to a minute (longer where packets are dropped rather than
refused) and then print "No matching distribution found for psycopg",
which does not say what to do.  check() runs first and stops the install
with the remedy instead.

It stays out of the way whenever pip may still succeed, or it cannot
tell: psycopg is installed for the target Python (found, whether or not
it imports); the installer is not pip (read from its command line,
/proc/<parent>/cmdline, so Linux only); pip's command line has
requirement files or sources or options of its own (-r, -c, --no-deps,
--no-index, --find-links, --index-url, --proxy...), or the environment
or a pip configuration file may give it some (those options as PIP_*
variables, a proxy);
the index's name cannot be looked up within a few seconds; or the index
answers a TCP connect.  DSYNC_BUILD_CHECK=0 turns it off.
test/package_python.sh runs it offline.
"""

import os
import socket
import subprocess
import sys
import threading
from urllib.parse import urlsplit

DEFAULT_INDEX = "https://pypi.org/simple"
CONNECT_SECONDS = 3.0
# pip options after which the check cannot tell what pip will do (other
# sources, requirement files, dependencies not installed, a proxy...).
PIP_OWN_OPTIONS = ("--no-deps", "--no-index", "--find-links", "--index-url",
                   "--extra-index-url", "--requirement", "--constraint", "--proxy",
                   "--target", "--prefix", "--root", "--config-settings", "--isolated")
PIP_OWN_SHORT = ("-f", "-i", "-r", "-c")
# Environment variables that may point pip elsewhere, or through a proxy.
OTHER_ROUTES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY",
                "all_proxy")


class MissingDependency(Exception):
    pass


def _target_has_psycopg():
    """Whether the Python pip installs into can import psycopg.  pip runs
    the backend with its build environment on PYTHONPATH, hiding that
    Python's own site-packages: the child runs without it."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONNOUSERSITE")}
    # Installed is enough (pip counts it so), even if it cannot import
    # here (no libpq, say).
    probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('psycopg') is None)"
    try:
        done = subprocess.run([sys.executable, "-c", probe], env=env,
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
        if names and names[0].startswith("uv"):
            return None             # uv pip install: its own settings
        if "install" in args and any(n.startswith("pip") for n in names):
            return args             # pip, pip3, python -m pip, .../bin/pip
        pid = parent
    return None


def _pip_may_look_elsewhere(args):
    """Whether pip's command line, its environment or a configuration
    file it reads may give it other sources, requirements or a route."""
    for a in args:
        if a.split("=", 1)[0] in PIP_OWN_OPTIONS or \
                any(a.startswith(o) for o in PIP_OWN_SHORT):
            return True
    # The same options as PIP_* variables (pip sets others of its own,
    # PIP_BUILD_TRACKER for one, for the backend).
    settings = ["PIP_" + o[2:].upper().replace("-", "_") for o in PIP_OWN_OPTIONS]
    if any(os.environ.get(k) for k in settings + list(OTHER_ROUTES)):
        return True
    config = os.environ.get("PIP_CONFIG_FILE")
    if config is not None:
        return config != os.devnull          # os.devnull: pip reads no configuration
    home = os.path.expanduser("~")
    xdg = os.environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
    files = ["/etc/pip.conf", "/etc/xdg/pip/pip.conf", os.path.join(xdg, "pip", "pip.conf"),
             os.path.join(home, ".pip", "pip.conf"), os.path.join(sys.prefix, "pip.conf")]
    return any(os.path.exists(f) for f in files)


def _index_unreachable(url):
    """True only if the index's name does not resolve, or no address of
    it answers a TCP connect; a lookup still running after a few seconds
    is not taken for a failure."""
    parts = urlsplit(url)
    if not parts.hostname:
        return False
    port = parts.port or (443 if parts.scheme == "https" else 80)
    verdict = []

    def probe():
        try:
            addresses = socket.getaddrinfo(parts.hostname, port, type=socket.SOCK_STREAM)
        except OSError:
            verdict.append(True)            # no such name here
            return
        for family, kind, proto, _, address in addresses[:4]:
            try:
                with socket.socket(family, kind, proto) as sock:
                    sock.settimeout(CONNECT_SECONDS)
                    sock.connect(address)
                verdict.append(False)
                return
            except OSError:
                continue
        verdict.append(True)
    # In a thread: the name lookup has no timeout of its own.
    t = threading.Thread(target=probe, daemon=True)
    t.start()
    t.join(CONNECT_SECONDS * 5)
    return bool(verdict) and verdict[0]


def check():
    """Raise MissingDependency if psycopg is missing and pip cannot fetch it."""
    if os.environ.get("DSYNC_BUILD_CHECK") == "0" or _target_has_psycopg():
        return
    args = _pip_arguments()
    if args is None or _pip_may_look_elsewhere(args) or not _index_unreachable(DEFAULT_INDEX):
        return
    raise MissingDependency(
        "dsync needs psycopg 3, which %s does not have, and pip cannot fetch it: "
        "%s cannot be reached.\n"
        "Install it from your system's packages and let the environment see them, for "
        "example on Debian:\n"
        "    apt-get install python3-psycopg\n"
        "    python3 -m venv --system-site-packages ENV\n"
        "or install a psycopg wheel first (pip install --no-index --find-links DIR psycopg), "
        "then run this pip install again.  DSYNC_BUILD_CHECK=0 skips this check."
        % (sys.executable, urlsplit(DEFAULT_INDEX).hostname))
