#!/usr/bin/env bash
# pg_regress and isolation specs, run as an ordinary login role.
#
# Runs inside pg_virtualenv (test/run_all.sh), whose superuser makes the two
# test databases with the extension and the role dsync_tester
# (test/tester.sql); pg_regress then connects as dsync_tester, which is
# neither superuser nor the extension's owner, and uses the databases as
# they are (--use-existing).
set -euo pipefail
cd "$(dirname "$0")/.."
for db in contrib_regression isolation_regression; do
	psql -X -q -v ON_ERROR_STOP=1 -d postgres -c "DROP DATABASE IF EXISTS $db" \
		-c "CREATE DATABASE $db"
	psql -X -q -v ON_ERROR_STOP=1 -d "$db" -v tester_password="$PGPASSWORD" -f test/tester.sql
done
make -s installcheck EXTRA_REGRESS_OPTS="--use-existing --user=dsync_tester"
