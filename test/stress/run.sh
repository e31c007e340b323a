#!/usr/bin/env bash
# Builds the libpq stress driver and runs it against the server in the
# libpq environment (test/run_all.sh runs this inside pg_virtualenv):
# 16 clients at mixed isolation levels with kills, then the fairness run.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=$(mktemp -d /tmp/dsync-stress.XXXXXX)
trap 'rm -rf "$bin"' EXIT
cc -O2 -Wall -Wextra -Werror -I"$(pg_config --includedir)" "$here/lease_stress.c" \
	-L"$(pg_config --libdir)" -lpq -o "$bin/lease_stress"
"$bin/lease_stress" "${STRESS_CLIENTS:-16}" "${STRESS_SECONDS:-20}" "${STRESS_LEASES:-3}"
"$bin/lease_stress" fair "${FAIR_CLIENTS:-8}" "${FAIR_ROUNDS:-20}"
