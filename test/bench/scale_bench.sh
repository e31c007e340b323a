#!/usr/bin/env bash
#
# scale_bench.sh: what dsync costs when the tables are big and clients die.
#
# Run as root, after `make install`, from the top of the source tree:
#
#     bash test/bench/scale_bench.sh
#
# It starts a throwaway PostgreSQL 15 server of its own (test/bench/
# server.sh) and prints, never asserts:
#
# The server runs with synchronous_commit = off (costs are CPU, not fsync).
#
# 1. The view at a million names: dsync_lease holds BENCH_NAMES (1,000,000)
#    released rows (written directly, as a long-running system that never
#    removed them would have; dsync.idle_row_retention = -1 keeps them)
#    and one live lease.  A lookup by name
#        SELECT expires_at FROM dsync_leases WHERE lease = 'x5'
#    by 1 and by 50 pgbench clients for BENCH_SECONDS (latency, rate);
#    a scan of the whole view (count(*)) once; and the peak private memory
#    (RssAnon in /proc) of the backend running each kind of query, sampled
#    every 10 ms, above what it used before.
# 2. A semaphore of 65,535 permits: the time to create it; the cost of one
#    cycle (acquire, renew, release by a new holder) with 1 holder and with
#    4,000 holders besides (pgbench, 1 client, BENCH_SECONDS each), and
#    the same cycle on a plain lease; then the time to fill every permit
#    in one statement.
# 3. 50,000 new names acquired in one statement, and released in one, on
#    default max_locks_per_transaction.
# 4. Dead waiters: BENCH_ROUNDS times, three psql clients queue for a held
#    lease, then a live one; the three are killed with SIGKILL; the holder
#    releases; the time from the release to the live waiter holding the
#    lease (server clock).
#
# Parts 5 to 8, cost as the work grows (held leases, sleeping waiters,
# listeners, mass expiry), need a server with room for 1,000 connections
# and a libpq driver: scale_work_bench.sh runs them on a server of its own
# and describes them.
#
# BENCH_PARTS (default "1 2 3 4 5 6 7 8") selects the parts, e.g.
# BENCH_PARTS="5 6" runs those two alone.  PGBIN names the server's
# binaries (default /usr/lib/postgresql/15/bin).
set -euo pipefail
cd "$(dirname "$0")/../.."
top=$(pwd)
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
NAMES=${BENCH_NAMES:-1000000}
SECONDS_EACH=${BENCH_SECONDS:-5}
ROUNDS=${BENCH_ROUNDS:-20}
PARTS=${BENCH_PARTS:-1 2 3 4 5 6 7 8}
export PGBIN
part() { [[ " $PARTS " == *" $1 "* ]]; }
if ! part 1 && ! part 2 && ! part 3 && ! part 4; then
	BENCH_PARTS="$PARTS" exec bash "$top/test/bench/scale_work_bench.sh"
fi
. "$top/test/bench/server.sh"
bench_server_start scale "dsync.idle_row_retention = -1
synchronous_commit = off
max_connections = 120"

psql_() { "$PGBIN/psql" -X -q -A -t -h "$WORKDIR" -p "$PORT" -U postgres -d postgres "$@"; }
pgbench_() { "$PGBIN/pgbench" -h "$WORKDIR" -p "$PORT" -U postgres -n "$@" postgres; }
ms() { echo $(( $(date +%s%N) / 1000000 )); }

# The peak RssAnon (kB) of the backend that runs $1, above its level before.
peak_memory() {
	local sql=$1 pid base peak now
	"$PGBIN/psql" -X -q -A -t -h "$WORKDIR" -p "$PORT" -U postgres -d postgres \
		-c "SET application_name = 'memprobe'" -c "SELECT pg_sleep(0.5)" -c "$sql" >/dev/null &
	local client=$!
	for _ in $(seq 100); do
		pid=$(psql_ -c "SELECT pid FROM pg_stat_activity WHERE application_name = 'memprobe'")
		[ -n "$pid" ] && break
		sleep 0.01
	done
	base=$(awk '/^RssAnon/ { print $2 }' "/proc/$pid/status")
	peak=$base
	while kill -0 "$client" 2>/dev/null; do
		now=$(awk '/^RssAnon/ { print $2 }' "/proc/$pid/status" 2>/dev/null || echo 0)
		[ -n "$now" ] && [ "$now" -gt "$peak" ] && peak=$now
		sleep 0.01
	done
	wait "$client"
	echo $((peak - base))
}

psql_ -c "CREATE EXTENSION dsync"

if part 1; then
echo "== 1. the view with $NAMES released names"
t0=$(ms)
psql_ -c "INSERT INTO dsync_lease (name, slot, renewed_at)
		  SELECT 'n' || i, 0, now() FROM generate_series(1, $NAMES) i" \
	-c "SELECT dsync_acquire('x5', 'holder', '1 hour')" -c "VACUUM ANALYZE dsync_lease" >/dev/null
echo "filled in $(( $(ms) - t0 )) ms; table $(psql_ -c "SELECT pg_size_pretty(pg_total_relation_size('dsync_lease'))")"
echo "SELECT expires_at FROM dsync_leases WHERE lease = 'x5';" >"$WORKDIR/lookup.sql"
for c in 1 50; do
	pgbench_ -f "$WORKDIR/lookup.sql" -c "$c" -j 2 -T "$SECONDS_EACH" |
		awk -v c="$c" '/latency average/ { lat = $4 } /^tps/ { tps = $3 }
			END { printf "lookup by name, %d clients: %s ms average, %.0f lookups/s\n", c, lat, tps }'
done
t0=$(ms)
psql_ -c "SELECT count(*) FROM dsync_leases" >/dev/null
echo "scan of the whole view (count(*)): $(( $(ms) - t0 )) ms"
echo "peak backend memory, lookup by name: $(peak_memory "SELECT expires_at FROM dsync_leases WHERE lease = 'x5'") kB"
echo "peak backend memory, scan of the whole view: $(peak_memory "SELECT count(*) FROM dsync_leases") kB"
echo "peak backend memory, scan returning every live row and info: $(peak_memory "SELECT * FROM dsync_leases") kB"
psql_ -c "TRUNCATE dsync_lease" >/dev/null
fi

if part 2; then
echo
echo "== 2. a semaphore of 65,535 permits"
t0=$(ms)
psql_ -c "SELECT dsync_semaphore_create('big', 65535)" >/dev/null
echo "dsync_semaphore_create('big', 65535): $(( $(ms) - t0 )) ms"
cat >"$WORKDIR/cycle_sem.sql" <<'SQL'
\set h random(1, 1000000000)
SELECT dsync_acquire('big', 'n' || :h, '1 hour');
SELECT dsync_renew('big', 'n' || :h);
SELECT dsync_release('big', 'n' || :h);
SQL
sed 's/big/plain/' "$WORKDIR/cycle_sem.sql" >"$WORKDIR/cycle_plain.sql"
run_cycle() {
	pgbench_ -f "$1" -c 1 -T "$SECONDS_EACH" | awk '/latency average/ { print $4 }'
}
psql_ -c "SELECT dsync_acquire('big', 'h0', '1 hour')" >/dev/null
lat1=$(run_cycle "$WORKDIR/cycle_sem.sql")
psql_ -c "SELECT count(dsync_acquire('big', 'h' || i, '1 hour')) FROM generate_series(1, 3999) i" >/dev/null
lat4000=$(run_cycle "$WORKDIR/cycle_sem.sql")
latplain=$(run_cycle "$WORKDIR/cycle_plain.sql")
echo "cycle (acquire, renew, release by a new holder), 1 holder besides: $lat1 ms"
echo "the same, 4,000 holders besides: $lat4000 ms ($(awk -v a="$lat4000" -v b="$lat1" 'BEGIN { printf "%.2f", a / b }')x)"
echo "the same on a plain lease: $latplain ms"
psql_ -c "SELECT dsync_force_release('big')" >/dev/null
t0=$(ms)
got=$(psql_ -c "SELECT count(dsync_acquire('big', 'f' || i, '1 hour')) FROM generate_series(1, 65535) i")
echo "filling all 65,535 permits in one statement: $got granted in $(( $(ms) - t0 )) ms"
echo "one more holder: $(psql_ -c "SELECT coalesce(dsync_acquire('big', 'late', '1 hour')::text, 'refused')")"
fi

if part 3; then
echo
echo "== 3. 50,000 new names in one statement (max_locks_per_transaction = $(psql_ -c 'SHOW max_locks_per_transaction'))"
t0=$(ms)
got=$(psql_ -c "SELECT count(dsync_acquire('many-' || i, 'w', '1 minute')) FROM generate_series(1, 50000) i")
echo "acquired $got in $(( $(ms) - t0 )) ms"
t0=$(ms)
got=$(psql_ -c "SELECT count(*) FILTER (WHERE dsync_release('many-' || i, 'w')) FROM generate_series(1, 50000) i")
echo "released $got in $(( $(ms) - t0 )) ms"
fi

if part 4; then
echo
echo "== 4. dead waiters: release to the live waiter behind 3 killed ones, $ROUNDS rounds"
: >"$WORKDIR/handoffs"
for r in $(seq "$ROUNDS"); do
	psql_ -c "SELECT dsync_acquire('d$r', 'holder', '1 hour')" >/dev/null
	dead=()
	for k in 1 2 3; do
		# psql itself in the background (not a function: $! must be its pid).
		"$PGBIN/psql" -X -q -A -t -h "$WORKDIR" -p "$PORT" -U postgres -d postgres \
			-c "SELECT dsync_acquire('d$r', 'dead$k', '30 s', '60 s')" >/dev/null 2>&1 &
		dead+=($!)
		until [ "$(psql_ -c "SELECT count(*) FROM dsync_waiters WHERE holder = 'dead$k' AND name = 'd$r'")" = 1 ]; do
			sleep 0.01
		done
	done
	"$PGBIN/psql" -X -q -A -t -h "$WORKDIR" -p "$PORT" -U postgres -d postgres \
		-c "SELECT dsync_acquire('d$r', 'live', '30 s', '60 s')" >/dev/null &
	live=$!
	until [ "$(psql_ -c "SELECT count(*) FROM dsync_waiters WHERE holder = 'live' AND name = 'd$r'")" = 1 ]; do
		sleep 0.01
	done
	kill -9 "${dead[@]}"
	wait "${dead[@]}" 2>/dev/null || true
	until [ "$(psql_ -c "SELECT count(*) FROM dsync_waiters WHERE name = 'd$r'")" = 1 ]; do
		sleep 0.005
	done
	released=$(psql_ -c "SELECT clock_timestamp() FROM (SELECT dsync_release('d$r', 'holder')) r")
	wait "$live"
	psql_ -c "SELECT extract(epoch FROM acquired_at - '$released'::timestamptz) * 1000
			  FROM dsync_leases WHERE lease = 'd$r' AND holder = 'live'" >>"$WORKDIR/handoffs"
done
sort -n "$WORKDIR/handoffs" | awk '{ v[NR] = $1 } END {
	printf "hand-off: median %.3f ms, max %.3f ms (%d rounds; every round granted to the live waiter: %s)\n",
		v[int((NR + 1) / 2)], v[NR], NR, (NR == '"$ROUNDS"') ? "yes" : "no" }'
fi

# Parts 5 to 8 on a server of their own, once this one is stopped.
if part 5 || part 6 || part 7 || part 8; then
	bench_server_cleanup
	trap - EXIT
	echo
	BENCH_PARTS="$PARTS" bash "$top/test/bench/scale_work_bench.sh"
fi
