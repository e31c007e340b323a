#!/usr/bin/env bash
# Builds the libpq stress driver and runs it against the server in the
# libpq environment (test/run_all.sh runs this inside pg_virtualenv):
# 16 clients at mixed isolation levels with kills, then the fairness run,
# then 16 clients with kills on one semaphore of 3 permits.  Every run is
# made; the exit status is non-zero if any of them failed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=$(mktemp -d /tmp/dsync-stress.XXXXXX)
trap 'rm -rf "$bin"' EXIT
cc -O2 -Wall -Wextra -Werror -I"$(pg_config --includedir)" "$here/lease_stress.c" \
	-L"$(pg_config --libdir)" -lpq -o "$bin/lease_stress"
status=0
"$bin/lease_stress" "${STRESS_CLIENTS:-16}" "${STRESS_SECONDS:-20}" "${STRESS_LEASES:-3}" || status=1
"$bin/lease_stress" fair "${FAIR_CLIENTS:-8}" "${FAIR_ROUNDS:-20}" || status=1
"$bin/lease_stress" semaphore "${SEM_CLIENTS:-16}" "${SEM_SECONDS:-20}" "${SEM_PERMITS:-3}" || status=1
exit $status
