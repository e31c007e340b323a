#!/usr/bin/env bash
# The Prometheus kit of monitoring/ (see monitoring/README.md): the alert
# rules checked and unit-tested with promtool (Debian's prometheus
# package), the Grafana dashboard and every expression checked against the
# metrics the queries file produces (test/monitoring_check.py), and the
# queries file run by the real prometheus-postgres-exporter against a
# throwaway server with dsync, its scrape compared with the views
# (test/monitoring.py).  Run as root after the extension is installed.
# Prints one "N passed, N failed" line counting these four steps.
set -uo pipefail
cd "$(dirname "$0")/.."
export PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
passed=0
failed=0

step() {
	local what=$1
	shift
	echo "== $what"
	if "$@"; then
		passed=$((passed + 1))
	else
		echo "-- $what: FAILED"
		failed=$((failed + 1))
	fi
}

step "alert rules parse (promtool check rules, $(promtool --version 2>&1 | head -1))" \
	promtool check rules monitoring/prometheus/dsync-alerts.yml
step "each alert fires on its synthetic series and only then (promtool test rules)" \
	promtool test rules monitoring/prometheus/dsync-alerts.test.yml
step "the Grafana dashboard, and every expression names only metrics the queries file produces (test/monitoring_check.py)" \
	timeout 120 /usr/bin/python3 test/monitoring_check.py
step "the queries file in the real exporter ($(/usr/bin/prometheus-postgres-exporter --version 2>&1 | head -1)), scraped and compared with the views (test/monitoring.py)" \
	timeout 600 /usr/bin/python3 test/monitoring.py

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
