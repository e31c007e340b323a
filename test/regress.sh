#!/usr/bin/env bash
# pg_regress and the isolation specs, twice, inside pg_virtualenv
# (test/suites.sh) on a server with dsync preloaded and nothing else set
# (the tests that need other settings are in test/configured, run by the
# Perl TAP test t/036_configured_regress.pl):
#   1. `make installcheck` as PGXS users, PGXN's tools and Debian's
#      pg_buildext run it: as the superuser, in databases pg_regress makes,
#      with nothing prepared (the "setup" test and spec make what the others
#      need);
#   2. logged in as dsync_tester, a login role that is neither superuser nor
#      the extension's owner: the databases are made afresh by the
#      superuser, who runs only the setup test and spec in them, then
#      pg_regress connects as dsync_tester and uses them as they are
#      (--use-existing).
set -euo pipefail
cd "$(dirname "$0")/.."

echo "-- make installcheck, as the superuser, nothing prepared"
make -s installcheck

echo "-- again, logged in as dsync_tester (an ordinary role)"
for db in contrib_regression isolation_regression; do
	psql -X -q -v ON_ERROR_STOP=1 -d postgres -c "DROP DATABASE IF EXISTS $db" \
		-c "CREATE DATABASE $db"
	psql -X -q -v ON_ERROR_STOP=1 -d "$db" -c "CREATE EXTENSION dsync"
done
make -s installcheck REGRESS=setup ISOLATION=setup EXTRA_REGRESS_OPTS=--use-existing
echo "ALTER ROLE dsync_tester PASSWORD :'pw';" |
	psql -X -q -v ON_ERROR_STOP=1 -d postgres -v pw="$PGPASSWORD"
make -s installcheck EXTRA_REGRESS_OPTS="--use-existing --user=dsync_tester"
