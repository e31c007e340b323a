#!/usr/bin/env bash
#
# contended_bench.sh: many clients taking turns on ONE lease with blocking
# waits, against blocking pg_advisory_lock on one key.
#
# Run as root, after `make install`, from the top of the source tree:
#
#     bash test/bench/contended_bench.sh
#
# One throwaway PostgreSQL 15 server (test/bench/server.sh), then, for 16
# clients (pgbench -j 2), synchronous_commit off and on, interleaved with a
# rotating order, cycles per second of:
#   dsync      dsync_acquire('contended', me, '30 s', wait '30 s'); dsync_release
#   ephemeral  the same with durable => false
#   advisory   pg_advisory_lock(4242); pg_advisory_unlock(4242)
# Each cycle is two autocommit transactions, so pgbench's tps is cycles/s.
# A durable grant and release are commits that write WAL, which a
# synchronous commit flushes; advisory locks write nothing, so with
# synchronous_commit on the comparison measures the disk as much as dsync.
# Target (issue 15): dsync >= 0.6x advisory.  Timings are printed, never
# asserted.
#
# Settings (environment): BENCH_SECONDS (default 10), BENCH_ROUNDS
# (default 1; the median is reported), BENCH_WARMUP (3), BENCH_PROTOCOL
# (prepared), BENCH_CLIENTS (16).
#
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/server.sh"
bench_throughput_settings 10 1

VARIANTS=(dsync ephemeral advisory)
CLIENTS=${BENCH_CLIENTS:-16}
CLIENT_COUNTS=("$CLIENTS")
COMMIT_MODES=(off on)
TARGET=0.6

bench_pgbench_start contended "$THROUGHPUT_CONF
dsync.ephemeral_max_ttl = 10"

# run_variant VARIANT COMMIT SECONDS: pgbench's tps for one variant.
run_variant() {
	local out
	out=$(PGOPTIONS="-c synchronous_commit=$2" \
		"$PGBIN/pgbench" -n -M "$PROTOCOL" -c "$CLIENTS" -j 2 -T "$3" \
		-f "$HERE/contended_$1.sql" bench 2>>"$RUN_LOG") || {
		echo "pgbench failed: contended_$1.sql, synchronous_commit=$2" >&2
		tail -n 20 "$RUN_LOG" >&2
		exit 1
	}
	printf '== %s commit=%s\n%s\n' "$1" "$2" "$out" >>"$RUN_LOG"
	pgbench_tps "contended_$1.sql" "$out"
	wait_idle bench
}

bench_throughput_header "dsync contended-lease benchmark" "$CLIENTS clients on one name, "

q postgres "CREATE DATABASE bench"
q bench "CREATE EXTENSION dsync"
# Ephemeral grants start dsync.ephemeral_max_ttl after the server did.
q bench "SELECT dsync_acquire('bench-open', 'w', '1 second', '30 seconds', NULL, false) IS NOT NULL" |
	grep -qx t || { echo "no ephemeral grant within 30 s of the start" >&2; exit 1; }
q bench "SELECT dsync_release('bench-open', 'w')" >/dev/null

if [ "$WARMUP" -gt 0 ]; then
	for v in "${VARIANTS[@]}"; do
		run_variant "$v" off "$WARMUP" >/dev/null
	done
fi

# measure VARIANT CLIENTS COMMIT: one run, its tps added to RESULTS.
measure() {
	RESULTS[$1,$3]="${RESULTS[$1,$3]:-} $(run_variant "$1" "$3" "$SECONDS_PER_RUN")"
}

declare -A RESULTS=()
bench_matrix : measure

echo
echo "Cycles per second, $CLIENTS clients on one name, blocking waits"
printf '%-10s %12s %10s   %s\n' variant sync_commit cycles/s "each round"
declare -A CYCLES=()
for commit in "${COMMIT_MODES[@]}"; do
	for v in "${VARIANTS[@]}"; do
		# shellcheck disable=SC2086
		CYCLES[$v,$commit]=$(median ${RESULTS[$v,$commit]})
		# shellcheck disable=SC2086
		printf '%-10s %12s %10.0f   %s\n' "$v" "$commit" "${CYCLES[$v,$commit]}" \
			"$(printf '%.0f ' ${RESULTS[$v,$commit]})"
	done
done

echo
echo "Ratios to pg_advisory_lock (same run, same server; target dsync >= ${TARGET}x)"
printf '%12s %16s %8s %20s\n' sync_commit dsync/advisory "" ephemeral/advisory
for commit in "${COMMIT_MODES[@]}"; do
	awk -v d="${CYCLES[dsync,$commit]}" -v e="${CYCLES[ephemeral,$commit]}" \
		-v a="${CYCLES[advisory,$commit]}" -v m="$commit" -v t="$TARGET" 'BEGIN {
			printf "%12s %16.2f %8s %20.2f\n", m, d / a, (d / a >= t ? "met" : "MISSED"), e / a;
		}'
done

held=$(q bench "SELECT count(*) FROM dsync_leases")
echo
echo "leases still held after the runs (0 expected): $held"
if grep -Eq 'PANIC|FATAL|TRAP|terminated by signal' "$SERVER_LOG"; then
	echo "server log has errors:"
	grep -E 'PANIC|FATAL|TRAP|terminated by signal' "$SERVER_LOG" | head -n 20
fi
