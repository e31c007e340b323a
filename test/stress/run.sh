#!/usr/bin/env bash
# Builds the libpq stress driver and runs it against the server in the
# libpq environment (test/run_all.sh runs this inside pg_virtualenv, with
# dsync.ephemeral_max_ttl=2): 16 clients at mixed isolation levels with
# kills, taking durable and ephemeral leases on the same names and writing
# to fenced tables (dsync_fenced) whose tokens must never go back, the
# fairness run, durable only and with both kinds in one queue (and the
# proof that its check catches clients that cut in), 16 clients with
# kills on one semaphore of 3 permits, 12 clients with kills taking sets of
# names with dsync_acquire_all (never a partial set), 12 clients with kills
# taking two names shared or exclusively (an exclusive holder never
# overlapping another holder; and the proof that the check catches
# "exclusive" rounds taken shared), 8 writers streaming a fenced table's
# current token while a newer one arrives (it must get in while they still
# stream, and no stale write commit after it), waiters queued without a
# connection among blocked backends (queue_stress.py), and the fairness runs once more
# beside a CPU hog on every core, where a backend is often descheduled
# between its statement starting and its joining the queue.  With
# STRESS_HOG=1 every run has the hog beside it.  Every run is made; the exit
# status is non-zero if any of them failed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=$(mktemp -d /tmp/dsync-stress.XXXXXX)
hogs=()
stop_hogs() {
	if [ ${#hogs[@]} -gt 0 ]; then
		kill "${hogs[@]}" 2>/dev/null || true
		wait "${hogs[@]}" 2>/dev/null || true
	fi
	hogs=()
}
start_hogs() {
	for _ in $(seq "$(nproc)"); do
		(while :; do :; done) &
		hogs+=($!)
	done
	echo "(a CPU hog runs on each of $(nproc) cores)"
}
trap 'stop_hogs; rm -rf "$bin"' EXIT
cc -O2 -Wall -Wextra -Werror -I"$(pg_config --includedir)" "$here/lease_stress.c" \
	"$here/common.c" "$here/multi.c" "$here/rw.c" "$here/fence.c" \
	-L"$(pg_config --libdir)" -lpq -o "$bin/lease_stress"
if [ "${STRESS_HOG:-0}" = 1 ]; then start_hogs; fi
status=0
"$bin/lease_stress" "${STRESS_CLIENTS:-16}" "${STRESS_SECONDS:-20}" "${STRESS_LEASES:-3}" || status=1
"$bin/lease_stress" fair "${FAIR_CLIENTS:-8}" "${FAIR_ROUNDS:-20}" || status=1
"$bin/lease_stress" fair-mixed "${FAIR_CLIENTS:-8}" "${FAIR_ROUNDS:-20}" || status=1
if "$bin/lease_stress" fair-cut-in "${FAIR_CLIENTS:-8}" "${FAIR_ROUNDS:-20}"; then
	echo "FAILED the fairness check did not catch clients that cut in"
	status=1
else
	echo "ok     the fairness check catches clients that cut in (the failure above is expected)"
fi
"$bin/lease_stress" semaphore "${SEM_CLIENTS:-16}" "${SEM_SECONDS:-20}" "${SEM_PERMITS:-3}" || status=1
"$bin/lease_stress" multi "${MULTI_CLIENTS:-12}" "${MULTI_SECONDS:-20}" || status=1
"$bin/lease_stress" rw "${RW_CLIENTS:-12}" "${RW_SECONDS:-20}" || status=1
"$bin/lease_stress" fence-stream "${FENCE_WRITERS:-8}" "${FENCE_GENERATIONS:-8}" || status=1
if "$bin/lease_stress" rw-cheat "${RW_CLIENTS:-12}" 8; then
	echo "FAILED the read-write check did not catch exclusive rounds taken shared"
	status=1
else
	echo "ok     the read-write check catches exclusive rounds taken shared (the failure above is expected)"
fi
# Queued waiters (dsync_queue) and blocked backends in one line, with kills
# and clients that vanish or give up (a history check, in Python).
# The first Python 3 with psycopg: on a host whose PATH starts with a
# python3 of its own (pyenv), Debian's python3-psycopg is in /usr/bin's.
queue_python=
for py in python3 /usr/bin/python3; do
	if "$py" -c 'import psycopg' 2>/dev/null; then
		queue_python=$py
		break
	fi
done
if [ -n "$queue_python" ]; then
	"$queue_python" "$here/queue_stress.py" "${QUEUE_SECONDS:-20}" "${QUEUE_CLIENTS:-12}" || status=1
	# Both kinds in one line: the lease goes between durable and ephemeral.
	QUEUE_KINDS=mixed "$queue_python" "$here/queue_stress.py" "${QUEUE_SECONDS:-20}" \
		"${QUEUE_CLIENTS:-12}" || status=1
else
	echo "(python3-psycopg is not installed: the queue stress run is skipped)"
fi
if [ "${STRESS_HOG:-0}" != 1 ]; then start_hogs; fi
"$bin/lease_stress" fair "${FAIR_CLIENTS:-8}" "${FAIR_ROUNDS:-20}" || status=1
"$bin/lease_stress" fair-mixed "${FAIR_CLIENTS:-8}" "${FAIR_ROUNDS:-20}" || status=1
stop_hogs
exit $status
