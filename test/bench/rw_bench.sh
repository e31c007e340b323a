#!/usr/bin/env bash
#
# rw_bench.sh: read-write locks (dsync_acquire_shared, 1.4) against shared
# advisory locks and against dsync's own exclusive leases, in one run.
#
# Run as root, after `make install`, from the top of the source tree:
#
#     bash test/bench/rw_bench.sh
#
# One throwaway PostgreSQL 15 server (test/bench/server.sh), pgbench -M
# prepared -j 2, every run after a checkpoint, variants interleaved in
# rotating order, median of BENCH_ROUNDS rounds.  Acquire+release cycles
# per second (two autocommit statements per cycle, so cycles/s = tps):
#   1. random names 1..100000 (no contention), 4 and 16 clients:
#        dsync     cycle_dsync.sql: dsync_acquire + dsync_release (exclusive),
#        shared    cycle_shared.sql: dsync_acquire_shared + dsync_release,
#        advshared cycle_advshared.sql: pg_try_advisory_lock_shared + unlock,
#      with synchronous_commit off and on.  The exclusive runs share the
#      database with the shared ones, so they pay the look for shared
#      holders that a database using read-write locks costs.
#   2. one name for every client (16 clients, synchronous_commit off):
#        oneshared    every client shared on the name: nobody waits,
#        oneexcl      every client exclusive on it, each waiting its turn,
#        oneadvshared pg_advisory_lock_shared on one key.
# Timings are printed, never asserted.
#
# Settings: BENCH_SECONDS (default 10), BENCH_ROUNDS (default 2),
# BENCH_WARMUP, BENCH_PROTOCOL, BENCH_PREFILL as in server.sh.
#
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/server.sh"
bench_throughput_settings 10 2

NAMES=100000
bench_pgbench_start rw "$THROUGHPUT_CONF"

bench_throughput_header --no-warmup "dsync read-write lock benchmark"

q postgres "CREATE DATABASE bench"
q bench "CREATE EXTENSION dsync"
q bench "CREATE TABLE lease (name text PRIMARY KEY, holder text NOT NULL, expires_at timestamptz NOT NULL)"
DSYNC_TABLE="$(q bench "SELECT extnamespace::regnamespace FROM pg_extension WHERE extname = 'dsync'").dsync_permit"

echo
echo "## 1. Random names, no contention"
VARIANTS=(dsync shared advshared)
CLIENT_COUNTS=(4 16)
COMMIT_MODES=(off on)
declare -A CYCLES=()
cycle_matrix cycle_shared.sql
echo
printf '| clients | synchronous_commit | shared | exclusive | shared advisory | shared / advisory | shared / exclusive |\n'
printf '| ---: | --- | ---: | ---: | ---: | ---: | ---: |\n'
for commit in "${COMMIT_MODES[@]}"; do
	for clients in "${CLIENT_COUNTS[@]}"; do
		s=${CYCLES[shared,$clients,$commit]}
		d=${CYCLES[dsync,$clients,$commit]}
		a=${CYCLES[advshared,$clients,$commit]}
		printf '| %s | %s | %.0f | %.0f | %.0f | %.2f | %.2f |\n' "$clients" "$commit" "$s" "$d" "$a" \
			"$(echo "$s / $a" | bc -l)" "$(echo "$s / $d" | bc -l)"
	done
done

echo
echo "## 2. One name, 16 clients, synchronous_commit off"
VARIANTS=(oneshared oneexcl oneadvshared)
CLIENT_COUNTS=(16)
COMMIT_MODES=(off)
declare -A ONE=()
for v in "${VARIANTS[@]}"; do
	[ "$WARMUP" -gt 0 ] && cycle_run bench "cycle_$v.sql" 16 off "$WARMUP" >/dev/null
done
# one_run VARIANT CLIENTS COMMIT: one run, its tps added to ONE.
one_run() {
	ONE[$1]="${ONE[$1]:-} $(cycle_run bench "cycle_$1.sql" "$2" "$3" "$SECONDS_PER_RUN")"
}
bench_matrix : one_run
printf '| variant | cycles/s | each round |\n| --- | ---: | --- |\n'
for v in "${VARIANTS[@]}"; do
	# shellcheck disable=SC2086
	printf '| %s | %.0f | %s|\n' "$v" "$(median ${ONE[$v]})" "$(printf '%.0f ' ${ONE[$v]})"
done
echo
echo "dsync_permit after the runs: $(q bench "SELECT count(*) || ' rows, ' || pg_size_pretty(pg_total_relation_size('$DSYNC_TABLE')) FROM $DSYNC_TABLE")"
