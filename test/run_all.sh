#!/usr/bin/env bash
# Runs every dsync test on a Debian machine, as root:
#   pg_regress and isolation specs (make installcheck), pgTAP (pg_prove),
#   a concurrency stress test (libpq, test/stress), and the Perl TAP tests
#   (PostgreSQL::Test::Cluster, run as postgres).
# Each suite gets a throwaway server with dsync preloaded.  Prints one
# "N passed, N failed" line at the end and exits non-zero on any failure.
set -uo pipefail
cd "$(dirname "$0")/.."
top=$(pwd)

bash scripts/install-deps.sh || exit 1
export PATH="/usr/lib/postgresql/15/bin:$PATH"

echo "== build (warnings are errors)"
make -s clean >/dev/null
make -s >/dev/null || { echo "build failed"; echo "0 passed, 1 failed"; exit 1; }
make -s install >/dev/null || { echo "install failed"; echo "0 passed, 1 failed"; exit 1; }

passed=0
failed=0
run_suite() {
	local name=$1; shift
	echo "== $name"
	if "$@"; then
		echo "-- $name: ok"
		passed=$((passed + 1))
	else
		echo "-- $name: FAILED"
		failed=$((failed + 1))
		[ -f regression.diffs ] && head -200 regression.diffs
		[ -f output_iso/regression.diffs ] && head -200 output_iso/regression.diffs
	fi
}

# pg_virtualenv makes a throwaway cluster (owned by postgres) and points
# libpq at it; the server settings are the ones the tests rely on.
virtualenv() {
	pg_virtualenv -o "shared_preload_libraries=dsync" -o "max_prepared_transactions=10" \
		-o "log_min_messages=warning" "$@"
}

# pg_regress and the isolation specs run as dsync_tester, an ordinary login
# role (neither superuser nor the extension's owner): test/regress.sh.
run_suite "pg_regress + isolation (as an ordinary role)" virtualenv bash test/regress.sh
run_suite "pgTAP" virtualenv bash -c \
	'psql -X -q -c "CREATE EXTENSION IF NOT EXISTS pgtap" && pg_prove -q --ext .sql test/pgtap/'

# Concurrency stress: 16 clients at mixed isolation levels with blocking
# waits while backends are terminated (checks overlap and token order),
# then 8 clients looping on one lease (checks that turns go round-robin).
run_suite "stress (16 clients with kills; fairness)" virtualenv bash test/stress/run.sh

# Perl TAP tests run as an ordinary user on a copy of the tree.
tapdir=$(mktemp -d /tmp/dsync-tap.XXXXXX)
cp -a "$top/." "$tapdir/"
chown -R postgres "$tapdir"
run_suite "Perl TAP" runuser -u postgres -- make -s -C "$tapdir" prove-installcheck
rm -rf "$tapdir"

echo
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
