#!/usr/bin/env bash
# The client libraries' tests (clients/python, clients/node) against
# throwaway servers with the installed dsync (PostgreSQL 15) and PgBouncer
# in transaction mode, then their packaging: one version everywhere
# (test/version.sh), the Python package installed offline with pip
# (test/package_python.sh) and the Node package packed and installed with
# npm (test/package_node.sh), then the documentation's code examples
# (test/doctest.py: its self-test, then README.md, docs/ and the clients'
# READMEs and RECIPES.md).  Run as root
# after the extension is installed.  Prints one "N passed, N failed" line,
# counting the two libraries, the three packaging checks, the two
# documentation-example steps, the reference check (test/docs_reference.py),
# the link check (test/docs_links.py) and the demo run as an ordinary user
# (test/demo.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
export PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
passed=0
failed=0

echo "== Python client (clients/python, psycopg $(/usr/bin/python3 -c 'import psycopg; print(psycopg.__version__)'))"
# Every test has a watchdog (pytest-timeout): a hang fails the run, with
# every thread's stack, instead of stalling CI.
if (cd clients/python && timeout 1800 /usr/bin/python3 -m pytest -q -s -p no:cacheprovider \
	--timeout=300 tests); then
	passed=$((passed + 1))
else
	failed=$((failed + 1))
fi

echo "== Node client (clients/node, node $(node --version))"
if (cd clients/node && npm ci --no-audit --no-fund --loglevel=error) &&
	/usr/bin/python3 clients/with_server.py node --test clients/node/test/; then
	passed=$((passed + 1))
else
	failed=$((failed + 1))
fi

echo "== one version everywhere (test/version.sh, VERSION $(cat VERSION 2>/dev/null))"
if bash test/version.sh; then
	passed=$((passed + 1))
else
	failed=$((failed + 1))
fi

echo "== Python package: pip install ./clients/python, offline (test/package_python.sh)"
if bash test/package_python.sh; then
	passed=$((passed + 1))
else
	failed=$((failed + 1))
fi

echo "== Node package: npm pack and npm install (test/package_node.sh)"
if bash test/package_node.sh; then
	passed=$((passed + 1))
else
	failed=$((failed + 1))
fi

# The code examples of the documentation (README.md, docs/**/*.md,
# clients/*.md and clients/*/README.md, those that exist), each markdown
# file in a fresh database of a throwaway server;
# first the harness's own self-test on its fixtures (test/doctest/).
echo "== documentation examples: the harness's self-test (test/doctest.py --self-test)"
[ -d clients/node/node_modules ] || (cd clients/node && npm ci --no-audit --no-fund --loglevel=error)
if timeout 600 /usr/bin/python3 test/doctest.py --self-test; then
	passed=$((passed + 1))
else
	failed=$((failed + 1))
fi

echo "== documentation examples (test/doctest.py)"
if timeout 1800 /usr/bin/python3 test/doctest.py; then
	passed=$((passed + 1))
else
	failed=$((failed + 1))
fi

echo "== the reference names every function, view column and setting (test/docs_reference.py)"
if timeout 300 /usr/bin/python3 clients/with_server.py /usr/bin/python3 test/docs_reference.py; then
	passed=$((passed + 1))
else
	failed=$((failed + 1))
fi

echo "== every relative link of the documentation leads somewhere (test/docs_links.py)"
if timeout 60 /usr/bin/python3 test/docs_links.py; then
	passed=$((passed + 1))
else
	failed=$((failed + 1))
fi

echo "== the demo, as an ordinary user against the installed dsync (test/demo.sh)"
if timeout 600 bash test/demo.sh; then
	passed=$((passed + 1))
else
	failed=$((failed + 1))
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
