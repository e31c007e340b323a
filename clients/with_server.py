"""Run a command against a throwaway dsync server and PgBouncer (the same
ones the Python tests start), with DSYNC_DSN (the app role, direct),
DSYNC_BOUNCER_DSN (through PgBouncer in transaction mode) and
DSYNC_ADMIN_DSN (the superuser) in its environment, and
DSYNC_UNPRELOADED_DSN: the app role on a second server that has the
extension created but does not preload dsync (set DSYNC_UNPRELOADED=0 to
skip starting it).

    python3 clients/with_server.py node --test clients/node/test/
"""

import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "python", "tests"))

from conftest import Server  # noqa: E402

server = Server()
unpreloaded = Server() if os.environ.get("DSYNC_UNPRELOADED") != "0" else None
try:
    server.start()
    env = dict(os.environ, DSYNC_DSN=server.dsn(), DSYNC_BOUNCER_DSN=server.dsn(bouncer=True),
               DSYNC_ADMIN_DSN=server.dsn(user="postgres"))
    if unpreloaded is not None:
        unpreloaded.start()
        unpreloaded.unpreload()
        env["DSYNC_UNPRELOADED_DSN"] = unpreloaded.dsn()
    sys.exit(subprocess.call(sys.argv[1:], env=env))
finally:
    server.stop()
    if unpreloaded is not None:
        unpreloaded.stop()
