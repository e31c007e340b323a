#!/usr/bin/env bash
#
# cycle_scale_bench.sh: the uncontended acquire+release cycle as clients
# grow, dsync against the hand-written lease table, and what the dsync
# backends wait on meanwhile.
#
# Run as root, after `make install`, from the top of the source tree:
#
#     bash test/bench/cycle_scale_bench.sh
#
# On a throwaway server of its own (test/bench/server.sh), the cycle runs
# of lease_bench.sh (cycle_dsync.sql, cycle_table.sql: random names of
# 1..100000, pgbench -M prepared, two autocommit transactions per cycle,
# dsync_lease prefilled) for 1, 2, 4, 8 and 16 clients, with asynchronous
# and synchronous commit, the variants rotated, median of BENCH_ROUNDS.
# Besides cycles/s and dsync/table, for every dsync run:
#
#   - what its backends waited on: pg_stat_activity's wait events of the
#     pgbench backends, sampled every 50 ms (LWLocks by tranche: each of
#     dsync's locks has a tranche of its own, "dsync wait queue", "dsync
#     workers", "dsync event queue", "dsync queued waiters", ...);
#   - the CPU time of the database's dsync worker per 1,000 cycles (its
#     /proc ticks over the run; cycles from the server's commit counter).
#
# BENCH_SECONDS (10), BENCH_ROUNDS (3), BENCH_CLIENT_COUNTS ("1 2 4 8 16"),
# BENCH_WARMUP (3).  Figures are printed, never asserted.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/server.sh"
bench_throughput_settings 10 3

VARIANTS=(dsync table)
read -r -a CLIENT_COUNTS <<<"${BENCH_CLIENT_COUNTS:-1 2 4 8 16}"
COMMIT_MODES=(off on)
NAMES=100000

bench_pgbench_start cyclescale "$THROUGHPUT_CONF"
bench_throughput_header "dsync cycle as clients grow"
q postgres "CREATE DATABASE bench"
q bench "CREATE EXTENSION dsync"
q bench "CREATE TABLE lease (name text PRIMARY KEY, holder text NOT NULL, expires_at timestamptz NOT NULL)"
DSYNC_SCHEMA=$(q bench "SELECT quote_ident(extnamespace::regnamespace::text) FROM pg_extension WHERE extname = 'dsync'")
DSYNC_TABLE="$DSYNC_SCHEMA.dsync_lease"

SAMPLES=$WORKDIR/waits
REAPER=$WORKDIR/reaper
: >"$REAPER"
SAMPLER_PID=

commits() {
	q bench "SELECT pg_stat_force_next_flush(); SELECT xact_commit FROM pg_stat_database WHERE datname = 'bench'" | tail -n 1
}

ticks() {
	local pid
	pid=$(reaper_pid bench)
	[ -n "$pid" ] || { echo 0; return; }
	awk '{ print $14 + $15 }' "/proc/$pid/stat" 2>/dev/null || echo 0
}

# Around every run (warm-up included; the warm-up's are not kept): sample
# its backends' wait events, through one connection (psql's \watch: a
# psql started every 50 ms would cost the measured run a backend start
# each time), for both variants alike, so that sampling costs each the
# same; keep the dsync runs' samples, and count the worker's ticks.
cycle_before() {
	BEFORE_COMMITS=$(commits)
	BEFORE_TICKS=$(ticks)
	printf '%s\n\\watch 0.05\n' "SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU')
		FROM pg_stat_activity WHERE application_name = 'pgbench' AND state = 'active'" |
		PGAPPNAME="dsync bench sampler" "$PGBIN/psql" -X -q -At -d bench >"$SAMPLES.current" 2>/dev/null &
	SAMPLER_PID=$!
}

cycle_after() {
	kill "$SAMPLER_PID" 2>/dev/null || true
	wait "$SAMPLER_PID" 2>/dev/null || true
	SAMPLER_PID=
	if [ "$1" != dsync ]; then
		rm -f "$SAMPLES.current"
		return 0
	fi
	local cycles=$((($(commits) - BEFORE_COMMITS) / 2)) ms
	ms=$(awk -v t=$(($(ticks) - BEFORE_TICKS)) -v hz="$(getconf CLK_TCK)" 'BEGIN { print t * 1000 / hz }')
	if [ -z "$CUR_CLIENTS" ]; then
		rm -f "$SAMPLES.current"	# the warm-up
		return 0
	fi
	echo "$CUR_CLIENTS $CUR_COMMIT $cycles $ms" >>"$REAPER"
	mv "$SAMPLES.current" "$SAMPLES.$CUR_CLIENTS.$CUR_COMMIT.$RANDOM"
	CUR_CLIENTS=
}

bench_before_cleanup() {
	[ -z "$SAMPLER_PID" ] || kill "$SAMPLER_PID" 2>/dev/null || true
}

# The matrix's before-function, wrapped to tell the hooks the measured
# run's configuration (the warm-up calls the hooks with none: not kept).
eval "$(declare -f cycle_matrix_before | sed '1s/cycle_matrix_before/cycle_matrix_before_inner/')"
cycle_matrix_before() {
	CUR_CLIENTS=$2 CUR_COMMIT=$3
	cycle_matrix_before_inner "$@"
}
CUR_CLIENTS= CUR_COMMIT=

declare -A CYCLES=()
cycle_matrix cycle_dsync.sql

echo
echo "dsync / table (same run), and the worker's CPU per 1,000 dsync cycles"
printf '%8s %12s %12s %22s\n' clients sync_commit dsync/table "worker ms/1000 cycles"
for commit in "${COMMIT_MODES[@]}"; do
	for clients in "${CLIENT_COUNTS[@]}"; do
		per=$(awk -v c="$clients" -v m="$commit" '$1 == c && $2 == m && $3 > 0 { s += $4 * 1000 / $3; n++ }
			END { if (n) printf "%.2f", s / n; else print "NA" }' "$REAPER")
		awk -v d="${CYCLES[dsync,$clients,$commit]}" -v t="${CYCLES[table,$clients,$commit]}" \
			-v c="$clients" -v m="$commit" -v p="$per" \
			'BEGIN { printf "%8s %12s %12.2f %22s\n", c, m, d / t, p }'
	done
done

# A run's worker CPU is mostly the deadlines of an earlier run's acquires
# (ttl 30 s) coming due, each a lookup of a row released long ago: so
# per run it swings with what ran 30 s before; over all runs it does not.
for commit in "${COMMIT_MODES[@]}"; do
	awk -v m="$commit" '$2 == m { c += $3; t += $4 }
		END { if (c) printf "all dsync runs, synchronous_commit %s: %d cycles, worker %.0f ms, %.2f ms per 1,000 cycles\n", m, c, t, t * 1000 / c }' "$REAPER"
done

echo
echo "What the dsync backends waited on (samples every 50 ms over the measured runs; top 6)"
for commit in "${COMMIT_MODES[@]}"; do
	for clients in "${CLIENT_COUNTS[@]}"; do
		files=("$SAMPLES.$clients.$commit".*)
		[ -e "${files[0]}" ] || continue
		total=$(cat "${files[@]}" | wc -l)
		printf '%2s clients, synchronous_commit %-3s (%s samples): %s\n' "$clients" "$commit" "$total" \
			"$(cat "${files[@]}" | sort | uniq -c | sort -rn | head -6 |
				awk '{ n = $1; sub(/^ *[0-9]+ /, ""); printf "%s%s %s", (NR > 1 ? ", " : ""), $0, n }')"
	done
done
