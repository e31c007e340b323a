#!/usr/bin/env bash
# The client libraries' tests (clients/python, clients/node) against
# throwaway servers with the installed dsync (PostgreSQL 15) and PgBouncer
# in transaction mode.  Run as root after the extension is installed.
# Prints one "N passed, N failed" line, counting the two libraries.
set -uo pipefail
cd "$(dirname "$0")/.."
export PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
passed=0
failed=0

echo "== Python client (clients/python, psycopg $(/usr/bin/python3 -c 'import psycopg; print(psycopg.__version__)'))"
if (cd clients/python && /usr/bin/python3 -m pytest -q -s -p no:cacheprovider tests); then
	passed=$((passed + 1))
else
	failed=$((failed + 1))
fi

echo "== Node client (clients/node, node $(node --version))"
if (cd clients/node && npm ci --no-audit --no-fund --loglevel=error) &&
	/usr/bin/python3 clients/with_server.py node --test clients/node/test/lock.test.js; then
	passed=$((passed + 1))
else
	failed=$((failed + 1))
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
