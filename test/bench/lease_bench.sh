#!/usr/bin/env bash
#
# lease_bench.sh: throughput of dsync leases against the baselines of
# NOTES.md section 8, and the HOT behaviour of renewals.
#
# Run as root, after `make install`, from the top of the source tree:
#
#     bash test/bench/lease_bench.sh
#
# It starts one throwaway PostgreSQL 15 server of its own (initdb into a
# mktemp directory owned by postgres, Unix socket only, dsync preloaded),
# and stops and removes it on exit.  Every figure is measured in the same
# run on the same server, and the variants are interleaved (their order
# rotates from one configuration to the next) so that noise on a shared
# machine hits all of them alike.  Timings are printed, never asserted.
#
# 1. Acquire+release cycles per second on random lease names (1..100000),
#    each cycle being two autocommit transactions (one to acquire, one to
#    release), for three variants:
#      dsync     dsync_acquire(name, holder, '30 seconds'); dsync_release(name, holder)
#      table     the hand-written lease table: INSERT ... ON CONFLICT DO UPDATE
#                ... WHERE; DELETE (cycle_table.sql)
#      advisory  pg_try_advisory_lock(key); pg_advisory_unlock(key)
#    with 4 and 16 clients (pgbench -j 2; BENCH_CLIENT_COUNTS="2 4 8 16"
#    for others), synchronous_commit off and on.
#    Each variant is one pgbench script file (cycle_*.sql) holding both
#    statements; pgbench counts one run of a script file as one
#    "transaction", so its tps is cycles/s.  The script checks this at the
#    start by comparing pgbench's count with the server's commit counter.
#    Before measuring, dsync_lease is filled with one (released) row per
#    name, the state a long-running system reaches, so the figures are
#    steady-state ones (BENCH_PREFILL=0 measures from an empty table).
#
# 2. Renewals: 1,000 leases held by dsync (ttl 1 hour) in a database of
#    their own, then 4 pgbench clients renew random ones of them for the
#    duration.  Reports the share of HOT updates on dsync_lease during the
#    run (pg_stat_user_tables deltas) and the table's size before and
#    after.  Done twice, to show that the size settles.
#
# Settings (environment):
#   BENCH_SECONDS    seconds per measured pgbench run (default 15)
#   BENCH_WARMUP     seconds of unmeasured warm-up per variant (default 3)
#   BENCH_ROUNDS     repetitions of the whole cycle matrix; the median is
#                    reported (default 1)
#   BENCH_PROTOCOL   pgbench query mode: prepared (default), simple, extended
#   BENCH_PREFILL    1 (default) or 0, see above
#   BENCH_RENEW_COMMIT  synchronous_commit for the renew runs (default off)
#   BENCH_FLOOR      1: also run cycle_floor.sql, two transactions that
#                    each write one small WAL record and commit, touching no
#                    table: a lower bound on the cost of any transactional
#                    acquire+release, so floor/table bounds the dsync/table
#                    ratio this setup can show (default 0)
#   BENCH_KEEP_LOG   1: print the server log path and keep the directory
#
# Targets (from the issue): dsync >= 1.5x the table with asynchronous
# commit and >= 1.0x with synchronous commit; renewals >= 90% HOT and the
# table not growing without bound.
#
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/server.sh"
bench_settings RENEW_COMMIT=off FLOOR=0
bench_throughput_settings 15 1

VARIANTS=(dsync table advisory)
[ "$FLOOR" = 1 ] && VARIANTS+=(floor)
read -r -a CLIENT_COUNTS <<<"${BENCH_CLIENT_COUNTS:-4 16}"
COMMIT_MODES=(off on)
NAMES=100000

# ---------------------------------------------------------------------------
# The throwaway server (test/bench/server.sh)
# ---------------------------------------------------------------------------

bench_pgbench_start bench "$THROUGHPUT_CONF"

bench_throughput_header "dsync lease benchmark"

# ---------------------------------------------------------------------------
# Part 1: acquire+release cycles
# ---------------------------------------------------------------------------

# Both databases get the extension now, right after the server has
# loaded the library, so that its SQL script and the loaded library match
# even if someone re-installs dsync while this runs.
q postgres "CREATE DATABASE bench"
q bench "CREATE EXTENSION dsync"
q postgres "CREATE DATABASE bench_renew"
q bench_renew "CREATE EXTENSION dsync"
q bench "CREATE TABLE lease (name text PRIMARY KEY, holder text NOT NULL, expires_at timestamptz NOT NULL)"
DSYNC_SCHEMA=$(q bench "SELECT quote_ident(extnamespace::regnamespace::text) FROM pg_extension WHERE extname = 'dsync'")
DSYNC_TABLE="$DSYNC_SCHEMA.dsync_lease"

# pgbench counts one run of a script file as one "transaction"; with
# autocommit, each of its two statements is a transaction of its own on
# the server.  Check that, so that cycles/s = pgbench tps is not a guess.
declare -A CYCLES=()
cycle_matrix cycle_dsync.sql

echo
echo "Ratios (same run, same server)"
printf '%8s %12s %12s %15s %10s  %-7s %s\n' clients sync_commit dsync/table dsync/advisory target result \
	"$([ "$FLOOR" = 1 ] && echo floor/table)"
for commit in "${COMMIT_MODES[@]}"; do
	if [ "$commit" = off ]; then target=1.5; else target=1.0; fi
	for clients in "${CLIENT_COUNTS[@]}"; do
		awk -v d="${CYCLES[dsync,$clients,$commit]}" -v t="${CYCLES[table,$clients,$commit]}" \
			-v a="${CYCLES[advisory,$clients,$commit]}" -v c="$clients" -v m="$commit" \
			-v target="$target" -v f="${CYCLES[floor,$clients,$commit]:-}" 'BEGIN {
				r = d / t;
				printf "%8s %12s %12.2f %15.2f %10s  %-7s %s\n", c, m, r, d / a, ">= " target,
					(r >= target ? "met" : "MISSED"), (f == "" ? "" : sprintf("%11.2f", f / t));
			}'
	done
done

echo "(result compares the unrounded ratio with the target)"
echo
echo "dsync_lease after the cycle runs: $(q bench "SELECT count(*) || ' rows, ' || pg_size_pretty(pg_relation_size('$DSYNC_TABLE')) || ' heap, ' || pg_size_pretty(pg_total_relation_size('$DSYNC_TABLE')) || ' with index' FROM $DSYNC_TABLE")"
echo "lease table after the cycle runs: $(q bench "SELECT count(*) || ' rows, ' || pg_size_pretty(pg_relation_size('lease')) || ' heap, ' || pg_size_pretty(pg_total_relation_size('lease')) || ' with index' FROM lease")"

# ---------------------------------------------------------------------------
# Part 2: renewals
# ---------------------------------------------------------------------------

# A database of its own, so that dsync_lease holds exactly the 1,000
# renewed leases and its size and counters are theirs alone.
RSCHEMA=$(q bench_renew "SELECT quote_ident(extnamespace::regnamespace::text) FROM pg_extension WHERE extname = 'dsync'")
RTABLE="$RSCHEMA.dsync_lease"
held=$(q bench_renew "SELECT count(dsync_acquire('r' || i, 'renewer', '1 hour')) FROM generate_series(1, 1000) i")
[ "$held" = 1000 ] || { echo "could acquire only $held of the 1000 renew leases" >&2; exit 1; }

# renew_state: "updates hot_updates heap_bytes total_bytes live_leases"
renew_state() {
	wait_idle bench_renew
	q bench_renew "SELECT pg_stat_force_next_flush()" >/dev/null
	q bench_renew "SELECT n_tup_upd, n_tup_hot_upd, pg_relation_size(relid), pg_total_relation_size(relid),
	                      (SELECT count(*) FROM $RSCHEMA.dsync_leases WHERE holder = 'renewer')
	                 FROM pg_stat_user_tables WHERE relid = '$RTABLE'::regclass" | tr '|' ' '
}

echo
echo "Renewals: 1000 held leases, dsync_renew on random ones, 4 clients, synchronous_commit=$RENEW_COMMIT"
printf '%-6s %11s %9s %9s %6s %24s %24s %6s\n' run renewals/s updates HOT HOT% "heap before -> after" "total before -> after" held
read -r upd0 hot0 heap0 total0 live0 <<<"$(renew_state)"
for run in 1 2; do
	q bench_renew "CHECKPOINT"
	tps=$(cycle_run bench_renew renew_dsync.sql 4 "$RENEW_COMMIT" "$SECONDS_PER_RUN")
	read -r upd1 hot1 heap1 total1 live1 <<<"$(renew_state)"
	awk -v run="$run" -v tps="$tps" -v du=$((upd1 - upd0)) -v dh=$((hot1 - hot0)) \
		-v h0="$heap0" -v h1="$heap1" -v t0="$total0" -v t1="$total1" -v live="$live1" 'BEGIN {
			printf "%-6s %11.0f %9d %9d %5.1f%% %24s %24s %6d\n", run, tps, du, dh,
				(du > 0 ? 100 * dh / du : 0),
				sprintf("%d kB -> %d kB", h0 / 1024, h1 / 1024),
				sprintf("%d kB -> %d kB", t0 / 1024, t1 / 1024), live;
		}'
	upd0=$upd1 hot0=$hot1 heap0=$heap1 total0=$total1
done
echo "(target: >= 90% HOT, and run 2 should not grow the table the way run 1 may have)"

echo
echo "dsync.so measured: the one installed at $DSYNC_SO_STAMP"