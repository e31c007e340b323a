#!/usr/bin/env bash
#
# ephemeral_bench.sh: throughput of ephemeral dsync leases (dsync_acquire(...,
# durable => false), held in shared memory only, no WAL) against durable
# dsync leases and the baselines of NOTES.md section 8.
#
# Run as root, after `make install`, from the top of the source tree:
#
#     bash test/bench/ephemeral_bench.sh
#
# It starts one throwaway PostgreSQL 15 server of its own (initdb into a
# mktemp directory owned by postgres, Unix socket only, dsync preloaded,
# dsync.ephemeral_max_ttl = 10), and stops and removes it on exit.  No
# ephemeral lease is granted until dsync.ephemeral_max_ttl has passed since
# the server started, so the script first waits for that (one blocking
# ephemeral acquire, about 10 s).  Every figure is measured in the same run
# on the same server, and the variants are interleaved (their order rotates
# from one configuration to the next) so that noise on a shared machine hits
# all of them alike.  Timings are printed, never asserted.
#
# Acquire+release cycles per second on random lease names (1..100000), each
# cycle being two autocommit transactions (one to acquire, one to release),
# as in part 1 of lease_bench.sh, for four variants:
#   ephemeral  dsync_acquire(name, holder, '10 seconds', '0', NULL, false);
#              dsync_release(name, holder)               (cycle_ephemeral.sql)
#   dsync      the same with a durable lease, ttl 30 s   (cycle_dsync.sql)
#   table      the hand-written lease table: INSERT ... ON CONFLICT DO UPDATE
#              ... WHERE; DELETE                          (cycle_table.sql)
#   advisory   pg_try_advisory_lock(key); pg_advisory_unlock(key)
#                                                         (cycle_advisory.sql)
# with 4 and 16 clients (pgbench -j 2), synchronous_commit off and on.
# pgbench counts one run of a script file as one "transaction", so its tps
# is cycles/s; the script checks this at the start by comparing pgbench's
# count with the server's commit counter.  Before measuring, dsync_lease is
# filled with one released row per name, the state a long-running system
# reaches (an ephemeral grant may look the name up there, to make sure no
# durable lease holds it); BENCH_PREFILL=0 measures from an empty table.
# An ephemeral run starts 30 s (the durable ttl) after the last durable run
# (or the prefill) ended, so that the held map (src/storage/heldmap.c) has
# let go of those names; one more run at the end measures ephemeral cycles
# right after durable ones, the map closed.
#
# Settings (environment):
#   BENCH_SECONDS    seconds per measured pgbench run (default 10)
#   BENCH_WARMUP     seconds of unmeasured warm-up per variant (default 3)
#   BENCH_ROUNDS     repetitions of the whole matrix; the median is reported
#                    (default 1)
#   BENCH_PROTOCOL   pgbench query mode: prepared (default), simple, extended
#   BENCH_PREFILL    1 (default) or 0, see above
#   BENCH_KEEP       1: keep the directory (server log, pgbench output)
#
# Targets: ephemeral >= 2x the table and >= 0.8x pg_advisory_lock, in every
# configuration (printed as met or MISSED, never asserted).
#
# Held mode (issue 33): with BENCH_HELD set to a list of counts, e.g.
#
#     BENCH_HELD="1000 100000 1000000" bash test/bench/ephemeral_bench.sh
#
# it measures instead how the ephemeral cycle (cycle_ephemeral.sql, other
# names) fares while N ephemeral leases are held by another holder: for
# each round and each N (in rotating order), it grants N leases in one
# statement (held-1..held-N, holder 'h', ttl HELD_TTL), runs a warm-up and
# a measured pgbench run with BENCH_HELD_CLIENTS clients (default 4),
# checks that the N are still held, and releases them.  The server has
# dsync.ephemeral_max_leases = the largest N + 200,000 and
# dsync.ephemeral_max_ttl = HELD_TTL (120 s, so the first grant waits
# that long after the start).  It prints cycles/s per N (median of
# BENCH_ROUNDS, default 3 in this mode) and each N's ratio to the first
# N's.  Target (issue 33): within 10% from 1,000 to 1,000,000.
#
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/server.sh"
bench_throughput_settings 10 1

VARIANTS=(ephemeral dsync table advisory)
CLIENT_COUNTS=(4 16)
COMMIT_MODES=(off on)
NAMES=100000
EPHEMERAL_MAX_TTL=10
HELD=${BENCH_HELD:-}
HELD_TTL=120
HELD_CLIENTS=${BENCH_HELD_CLIENTS:-4}
EXTRA_CONF=
if [ -n "$HELD" ]; then
	EPHEMERAL_MAX_TTL=$HELD_TTL
	ROUNDS=${BENCH_ROUNDS:-3}
	held_max=0
	for n in $HELD; do
		if [ "$n" -gt "$held_max" ]; then held_max=$n; fi
	done
	EXTRA_CONF="dsync.ephemeral_max_leases = $((held_max + 200000))"
fi
TARGET_TABLE=2.0
TARGET_ADVISORY=0.8

# ---------------------------------------------------------------------------
# The throwaway server (test/bench/server.sh)
# ---------------------------------------------------------------------------

bench_pgbench_start ephemeral "$THROUGHPUT_CONF
dsync.ephemeral_max_ttl = $EPHEMERAL_MAX_TTL
$EXTRA_CONF"

bench_throughput_header "dsync ephemeral lease benchmark" "dsync.ephemeral_max_ttl=${EPHEMERAL_MAX_TTL}s, "

# The extension now, right after the server has loaded the library, so
# that its SQL script and the loaded library match even if someone
# re-installs dsync while this runs.
q postgres "CREATE DATABASE bench"
q bench "CREATE EXTENSION dsync"
q bench "CREATE TABLE lease (name text PRIMARY KEY, holder text NOT NULL, expires_at timestamptz NOT NULL)"
DSYNC_SCHEMA=$(q bench "SELECT quote_ident(extnamespace::regnamespace::text) FROM pg_extension WHERE extname = 'dsync'")
DSYNC_TABLE="$DSYNC_SCHEMA.dsync_lease"

# No ephemeral grant before dsync.ephemeral_max_ttl has passed since the
# start: a blocking ephemeral acquire returns once it has.
t0=$(date +%s.%N)
opened=$(q bench "SELECT dsync_acquire('bench-open', 'w', '1 second', '$((EPHEMERAL_MAX_TTL * 3)) seconds', NULL, false) IS NOT NULL")
[ "$opened" = t ] || { echo "no ephemeral lease granted within $((EPHEMERAL_MAX_TTL * 3)) s of the start" >&2; exit 1; }
q bench "SELECT dsync_release('bench-open', 'w')" >/dev/null
echo "  ephemeral grants open: waited $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s for the first one"

# Held mode: the cycle while N other ephemeral leases are held.
if [ -n "$HELD" ]; then
	declare -A HELD_CYCLES=()
	read -r -a held_list <<<"$HELD"
	echo "  held mode: N = ${held_list[*]}, $HELD_CLIENTS clients, ${SECONDS_PER_RUN} s per run, $ROUNDS rounds"
	for ((round = 0; round < ROUNDS; round++)); do
		for n in $(rotated "$round" "${held_list[@]}"); do
			t0=$(date +%s.%N)
			got=$(q bench "SELECT count(dsync_acquire('held-' || i, 'h', '$HELD_TTL s', '0', NULL, false)) FROM generate_series(1, $n) i")
			fill=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
			[ "$got" = "$n" ] || { echo "only $got of $n held leases granted" >&2; exit 1; }
			q bench "CHECKPOINT" >/dev/null
			cycle_run bench cycle_ephemeral.sql "$HELD_CLIENTS" off "$WARMUP" >/dev/null
			tps=$(cycle_run bench cycle_ephemeral.sql "$HELD_CLIENTS" off "$SECONDS_PER_RUN")
			still=$(q bench "SELECT count(*) FROM dsync_leases WHERE lease LIKE 'held-%'")
			[ "$still" = "$n" ] || { echo "$still of $n held leases left after the run (ttl too short?)" >&2; exit 1; }
			t0=$(date +%s.%N)
			gone=$(q bench "SELECT count(*) FILTER (WHERE dsync_release('held-' || i, 'h')) FROM generate_series(1, $n) i")
			printf '  round %d, N = %8d: %8.0f cycles/s (granted in %s s, released %s in %s s)\n' \
				"$((round + 1))" "$n" "$tps" "$fill" "$gone" \
				"$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')"
			HELD_CYCLES[$n]="${HELD_CYCLES[$n]:-} $tps"
		done
	done
	echo
	echo "Cycles/s with N ephemeral leases held (median of $ROUNDS; same run, same server)"
	first=$(median ${HELD_CYCLES[${held_list[0]}]})
	printf '%10s %12s %12s\n' N cycles/s "vs N=${held_list[0]}"
	for n in "${held_list[@]}"; do
		m=$(median ${HELD_CYCLES[$n]})
		awk -v n="$n" -v m="$m" -v f="$first" 'BEGIN { printf "%10d %12.0f %12.3f\n", n, m, m / f }'
	done
	echo "(target, issue 33: within 10% from 1,000 to 1,000,000 held)"
	echo
	echo "dsync.so measured: the one installed at $DSYNC_SO_STAMP"
	exit 0
fi

# pgbench counts one run of a script file as one "transaction"; with
# autocommit, each of its two statements is a transaction of its own on
# the server.  Check that, so that cycles/s = pgbench tps is not a guess.
# The held map (src/storage/heldmap.c) lets an ephemeral grant skip
# dsync_lease for a name no durable lease may hold; a durable grant closes
# the name's bucket until the expiry it wrote, released or not.  Right after
# durable cycles on these same names (ttl 30 s; the prefill too), nearly
# every bucket is closed and ephemeral grants look at the table as before.
# So an ephemeral run starts once DURABLE_TTL has passed since the last
# durable one: the steady state of a database whose ephemeral names were not
# also held durably within a ttl.  The closed case is measured apart, below.
DURABLE_TTL=30
durable_end=
cycle_before() {
	# The first call comes right after the prefill.
	[ -n "$durable_end" ] || durable_end=$(date +%s)
	if [ "$1" = ephemeral ]; then
		local pause=$((durable_end + DURABLE_TTL + 1 - $(date +%s)))
		if [ "$pause" -gt 0 ]; then sleep "$pause"; fi
	fi
	return 0
}
cycle_after() {
	if [ "$1" = dsync ]; then durable_end=$(date +%s); fi
	return 0
}

declare -A CYCLES=()
cycle_matrix cycle_ephemeral.sql

echo
echo "Ratios (same run, same server)"
printf '%8s %12s %16s %8s %19s %8s %16s\n' clients sync_commit ephemeral/table \
	"(>= $TARGET_TABLE)" ephemeral/advisory "(>= $TARGET_ADVISORY)" ephemeral/dsync
for commit in "${COMMIT_MODES[@]}"; do
	for clients in "${CLIENT_COUNTS[@]}"; do
		awk -v e="${CYCLES[ephemeral,$clients,$commit]}" -v d="${CYCLES[dsync,$clients,$commit]}" \
			-v t="${CYCLES[table,$clients,$commit]}" -v a="${CYCLES[advisory,$clients,$commit]}" \
			-v c="$clients" -v m="$commit" -v tt="$TARGET_TABLE" -v ta="$TARGET_ADVISORY" 'BEGIN {
				rt = e / t;
				ra = e / a;
				printf "%8s %12s %16.2f %8s %19.2f %8s %16.2f\n", c, m,
					rt, (rt >= tt ? "met" : "MISSED"), ra, (ra >= ta ? "met" : "MISSED"), e / d;
			}'
	done
done
echo "(met/MISSED compares the unrounded ratio with the target: ephemeral >= ${TARGET_TABLE}x the table, >= ${TARGET_ADVISORY}x advisory)"

# The held map closed: ephemeral cycles right after durable ones on the
# same names, 4 clients, synchronous_commit off.
cycle_run bench cycle_dsync.sql 4 off "$WARMUP" >/dev/null
closed=$(cycle_run bench cycle_ephemeral.sql 4 off "$SECONDS_PER_RUN")
echo
echo "Ephemeral right after durable cycles on the same names (held map closed), 4 clients, off:"
awk -v e="$closed" -v t="${CYCLES[table,4,off]}" -v a="${CYCLES[advisory,4,off]}" 'BEGIN {
	printf "  %.0f cycles/s: %.2fx the table, %.2fx advisory (medians above)\n", e, e / t, e / a }'

echo
echo "dsync_lease after the cycle runs: $(q bench "SELECT count(*) || ' rows, ' || pg_size_pretty(pg_relation_size('$DSYNC_TABLE')) || ' heap, ' || pg_size_pretty(pg_total_relation_size('$DSYNC_TABLE')) || ' with index' FROM $DSYNC_TABLE")"
echo "leases still held after the runs (both kinds; 0 expected): $(q bench "SELECT count(*) FROM $DSYNC_SCHEMA.dsync_leases")"

if grep -Eq 'PANIC|FATAL|TRAP|terminated by signal' "$SERVER_LOG"; then
	echo
	echo "server log has errors:"
	grep -E 'PANIC|FATAL|TRAP|terminated by signal' "$SERVER_LOG" | head -n 20
fi

echo
echo "dsync.so measured: the one installed at $DSYNC_SO_STAMP"
