#!/usr/bin/env bash
#
# eventlog_bench.sh: what the retained event log (dsync.event_retention,
# 1.4) costs the lease hot path, against the same server without it.
#
# Run as root, after `make install`, from the top of the source tree:
#
#     bash test/bench/eventlog_bench.sh
#
# One throwaway PostgreSQL 15 server (test/bench/server.sh).  Acquire+
# release cycles per second on random names (cycle_dsync.sql, the script
# of lease_bench.sh) with 4 and 16 clients, synchronous_commit off and on,
# in two parts, each comparing two variants interleaved in rotating order,
# every run after a checkpoint:
#   A. nobody listening:  log (dsync.event_retention = 5min, the default)
#      against nolog (dsync.event_retention = 0).  The log runs only while
#      someone watches, so both take the same path: this shows it costs a
#      database nobody watches nothing.
#   B. one session LISTENing on a dsync channel throughout: log (every
#      change numbered, written to dsync_event_log in a flushed transaction
#      and sent) against nolog (sent, not logged, as in 1.3).
# The setting is changed with ALTER SYSTEM and a reload between runs.  It
# reports how many events the log holds after each part.  Timings are
# printed, never asserted.
#
# Settings: BENCH_SECONDS (default 10), BENCH_ROUNDS (default 2),
# BENCH_WARMUP, BENCH_PROTOCOL, BENCH_PREFILL as in server.sh.
#
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/server.sh"
bench_throughput_settings 10 2

VARIANTS=(log nolog)
CLIENT_COUNTS=(4 16)
COMMIT_MODES=(off on)
NAMES=100000

bench_pgbench_start eventlog "$THROUGHPUT_CONF"

bench_throughput_header --no-warmup "dsync event log benchmark"

q postgres "CREATE DATABASE bench"
q bench "CREATE EXTENSION dsync"
[ "$PREFILL" = 1 ] && prefill_released bench "$NAMES"

# set_variant V: the event log on (log) or off (nolog), in force before
# the next run (a reload reaches the worker at its next wake-up).
set_variant() {
	local retention=300
	[ "$1" = nolog ] && retention=0
	q postgres "ALTER SYSTEM SET dsync.event_retention = $retention" >/dev/null
	q postgres "SELECT pg_reload_conf()" >/dev/null
	sleep 1
}

LISTENER_PID=
bench_before_cleanup() {
	[ -n "$LISTENER_PID" ] && kill "$LISTENER_PID" 2>/dev/null || true
}

# measure_run VARIANT CLIENTS COMMIT: one run, its tps added to RESULTS.
measure_run() {
	local tps
	tps=$(cycle_run bench cycle_dsync.sql "$2" "$3" "$SECONDS_PER_RUN")
	RESULTS[$1,$2,$3]="${RESULTS[$1,$2,$3]:-} $tps"
}

# measure PART: the rounds of both variants; prints the table.
measure() {
	local part=$1 commit clients v l n
	local -A RESULTS=()
	for v in "${VARIANTS[@]}"; do
		set_variant "$v"
		[ "$WARMUP" -gt 0 ] && cycle_run bench cycle_dsync.sql 16 off "$WARMUP" >/dev/null
	done
	bench_matrix set_variant measure_run
	echo
	echo "$part"
	printf '%8s %12s %10s %10s %10s   %s\n' clients sync_commit log nolog log/nolog "each round (log | nolog)"
	for commit in "${COMMIT_MODES[@]}"; do
		for clients in "${CLIENT_COUNTS[@]}"; do
			# shellcheck disable=SC2086
			l=$(median ${RESULTS[log,$clients,$commit]})
			# shellcheck disable=SC2086
			n=$(median ${RESULTS[nolog,$clients,$commit]})
			printf '%8s %12s %10.0f %10.0f %10.2f   %s| %s\n' "$clients" "$commit" "$l" "$n" \
				"$(awk -v a="$l" -v b="$n" 'BEGIN { print a / b }')" \
				"$(printf '%.0f ' ${RESULTS[log,$clients,$commit]})" \
				"$(printf '%.0f ' ${RESULTS[nolog,$clients,$commit]})"
		done
	done
	echo "dsync_event_log after it: $(q bench "SELECT count(*) || ' events, ' || pg_size_pretty(pg_total_relation_size('dsync_event_log')) FROM dsync_event_log")"
}

measure "A. Acquire+release cycles per second, nobody listening (random names 1..$NAMES)"

# B: a session listens throughout (on a channel no cycle uses).
PGAPPNAME='dsync bench listener' "$PGBIN/psql" -X -q -d bench \
	-c 'LISTEN "dsync:bench-watch"' -c 'SELECT pg_sleep(100000)' >/dev/null 2>&1 &
LISTENER_PID=$!
sleep 1
measure "B. The same with one session listening"
