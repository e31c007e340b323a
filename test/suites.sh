#!/usr/bin/env bash
# Every dsync test suite against one PostgreSQL major, as root, on a
# machine (or chroot) where that major's server, headers and pgTAP are
# installed:
#   build with clang and with gcc, warnings as errors (the shipped Makefile
#   does not make warnings errors; CI does, through COPT), and install a
#   gcc build with dsync's Asserts enabled (-DUSE_ASSERT_CHECKING), which
#   every suite below then runs against;
#   pg_regress and isolation specs (make installcheck on a server with
#   nothing but dsync preloaded, then again as an ordinary role);
#   pgTAP (pg_prove); a concurrency stress test (libpq, test/stress);
#   the Perl TAP tests (PostgreSQL::Test::Cluster, run as postgres); and,
#   on majors other than 15 where this Debian has python3-psycopg and
#   pytest (the chroots do), the Python client's tests on that Debian's
#   Python and psycopg.
# Each suite gets a throwaway server with dsync preloaded.  test/run_all.sh
# runs this once per major; it prints "N passed, N failed" at the end and
# exits non-zero on any failure.
#
#   bash test/suites.sh 15
set -uo pipefail
cd "$(dirname "$0")/.."
top=$(pwd)
major=${1:?usage: test/suites.sh MAJOR}

bindir=/usr/lib/postgresql/$major/bin
if [ ! -x "$bindir/pg_config" ]; then
	echo "PostgreSQL $major (server and headers) is not installed here"
	echo "0 passed, 1 failed"
	exit 1
fi
export PATH="$bindir:$PATH"
export PG_CONFIG="$bindir/pg_config"
echo "== PostgreSQL $(pg_config --version | sed 's/^PostgreSQL //'), $(. /etc/os-release && echo "$PRETTY_NAME")"

passed=0
failed=0
run_suite() {
	local name=$1; shift
	echo "== $name"
	rm -f regression.diffs output_iso/regression.diffs
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

# clang first and gcc without Asserts (compile only), then gcc with
# Asserts, which is what gets installed.  The
# server's CFLAGS are gcc's (pg_config --cflags), so clang gets the same
# warnings in its own spelling; -Wno-ignored-attributes because the
# server's headers ask for gnu_printf, which clang does not know.
clang_cflags="-Wall -Wmissing-prototypes -Wpointer-arith -Wdeclaration-after-statement
	-Werror=vla -Wendif-labels -Wmissing-format-attribute -Wimplicit-fallthrough
	-Wcast-function-type -Wformat-security -fno-strict-aliasing -fwrapv -g -O2
	-Wno-ignored-attributes -Werror"
build() {
	if command -v clang >/dev/null 2>&1; then
		make -s clean >/dev/null
		make -s CC=clang CFLAGS="$(echo $clang_cflags)" COPT=-Werror >/dev/null || return 1
	else
		echo "(clang is not installed: gcc only)"
	fi
	make -s clean >/dev/null
	make -s COPT=-Werror >/dev/null || return 1
	# What gets installed and tested: gcc with dsync's own Asserts on
	# (the server itself is a release build).
	make -s clean >/dev/null
	make -s COPT="-Werror -DUSE_ASSERT_CHECKING" >/dev/null && make -s install >/dev/null
}
run_suite "build with clang and gcc, warnings as errors; install with Asserts" build
if [ "$failed" -gt 0 ]; then
	echo "$passed passed, $failed failed"
	exit 1
fi

# A run killed mid-suite (a session or CI job that stops, a SIGKILL) leaves
# pg_virtualenv's throwaway cluster behind, and in a cached chroot that
# outlives the machine; pg_virtualenv then refuses to run at all ("Cluster
# 18/regress exists, refusing to overwrite").  Such a cluster carries
# pg_virtualenv's own marker file, so it is ours to drop; a "regress"
# cluster without the marker is somebody else's and is left alone (and
# pg_virtualenv will say so).
drop_leftover_cluster() {
	local conf=/etc/postgresql/$major/regress
	[ -f "$conf/.by_pg_virtualenv" ] || return 0
	echo "(dropping cluster $major/regress, left behind by a run that was killed)"
	pg_ctlcluster --mode immediate "$major" regress stop >/dev/null 2>&1
	pg_dropcluster "$major" regress >/dev/null 2>&1
	# What pg_dropcluster does not know about (the marker itself, or all of
	# it when the run was killed half-way through making the cluster).
	rm -rf "$conf" "/var/lib/postgresql/$major/regress"
}
drop_leftover_cluster

# pg_virtualenv makes a throwaway cluster (owned by postgres) and points
# libpq at it; the server settings are the ones the tests rely on.  Each
# major has a port of its own (5400 + major): test/run_all.sh runs majors
# side by side, in chroots that share this machine's network, and two
# clusters made at once could otherwise both pick the first free port.
virtualenv() {
	PGPORT=$((5400 + major)) pg_virtualenv -v "$major" -o "shared_preload_libraries=dsync" \
		-o "max_prepared_transactions=10" -o "log_min_messages=warning" \
		-o "dsync.ephemeral_max_ttl=2" "$@"
}

# The same with dsync preloaded and nothing else set: the server PGXS
# users, PGXN's tools and Debian's `pg_buildext installcheck` run `make
# installcheck` on.
virtualenv_defaults() {
	PGPORT=$((5400 + major)) pg_virtualenv -v "$major" -o "shared_preload_libraries=dsync" "$@"
}

# pg_regress and the isolation specs: plain `make installcheck` as the
# superuser, then again logged in as dsync_tester, an ordinary login role
# (neither superuser nor the extension's owner): test/regress.sh, on a
# server with default settings, which it first shows it is (no dsync
# setting and not max_prepared_transactions changed).  The tests that need
# other settings (test/configured) run in the Perl TAP suite, on a server
# that 036_configured_regress.pl configures.
regress_on_defaults() {
	local changed
	changed=$(psql -X -A -t -q -d postgres -c "SELECT string_agg(name || ' = ' || setting, ', ')
		FROM pg_settings WHERE (name LIKE 'dsync.%' OR name = 'max_prepared_transactions')
		AND source <> 'default'") || return 1
	if [ -n "$changed" ]; then
		echo "the server is not on default settings: $changed"
		return 1
	fi
	echo "-- on default settings: max_prepared_transactions = $(psql -X -A -t -q -d postgres \
		-c 'SHOW max_prepared_transactions'), dsync.ephemeral_max_ttl = $(psql -X -A -t -q \
		-d postgres -c 'SHOW dsync.ephemeral_max_ttl')"
	bash test/regress.sh
}
run_suite "pg_regress + isolation on default settings (make installcheck; as an ordinary role)" \
	virtualenv_defaults bash -c "$(declare -f regress_on_defaults); regress_on_defaults"
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
run_suite "Perl TAP" runuser -u postgres -- env PATH="$PATH" PG_CONFIG="$PG_CONFIG" \
	make -s -C "$tapdir" prove-installcheck
rm -rf "$tapdir"

# The Python client on this Debian's Python and psycopg: the host runs it on
# bookworm's (3.11, psycopg 3.1) in test/clients.sh; trixie and sid carry
# the newer ones its users have (Python 3.13, psycopg 3.2).
if [ "$major" != 15 ] &&
	python3 -c 'import psycopg, psycopg_pool, pytest, pytest_timeout' 2>/dev/null; then
	pyver=$(python3 -c 'import sys, psycopg; print("Python %d.%d.%d, psycopg %s" % (sys.version_info[:3] + (psycopg.__version__,)))')
	run_suite "Python client ($pyver)" env PGBIN="$bindir" bash -c \
		'cd clients/python && timeout 1800 python3 -m pytest -q -p no:cacheprovider --timeout=300 tests'
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
