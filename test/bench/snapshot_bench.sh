#!/usr/bin/env bash
#
# snapshot_bench.sh: one name cycled by 8 clients while another session
# holds a REPEATABLE READ snapshot open, dsync against the hand-written
# lease table.  Every cycle leaves a version of the row that the snapshot
# keeps alive; what matters is whether the cost of a call grows with them.
#
# For each variant in turn: VACUUM and CHECKPOINT, open the snapshot, run
# pgbench for BENCH_DURATION seconds with a progress line every 10 s, close the
# snapshot.  Printed: cycles/s of every 10 s window, the last window as a
# share of the first, and dsync against the table in the last window.
# A cycle is a try-acquire (no wait) and a release of the name 'hot', as
# autocommit statements: with 8 clients most tries find it taken, which
# is the point, since a lookup is what the snapshot slows down.
#
# Run as root after `make install`, from the top of the source tree:
#
#     bash test/bench/snapshot_bench.sh
#
# Settings (environment):
#   BENCH_DURATION  length of each run, a multiple of 10 (default 60)
#   BENCH_CLIENTS   pgbench clients (default 8)
#   BENCH_COMMIT    synchronous_commit of the clients (default off)
#   BENCH_VARIANTS  which to run (default "dsync table")
#   BENCH_KEEP      1: keep the directory
#
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/server.sh"
bench_settings DURATION=60 CLIENTS=8 COMMIT=off
read -r -a VARIANTS <<<"${BENCH_VARIANTS:-dsync table}"

bench_server_start snapshot "$THROUGHPUT_CONF"
q postgres "CREATE DATABASE bench"
q bench "CREATE EXTENSION dsync"
q bench "CREATE TABLE lease (name text PRIMARY KEY, holder text NOT NULL, expires_at timestamptz NOT NULL)"

bench_header "One name, $CLIENTS clients, a REPEATABLE READ snapshot held for the whole ${DURATION} s run"
echo "  synchronous_commit=$COMMIT, cycles/s per 10 s window"

cat >"$WORKDIR/hot_dsync.sql" <<'SQL'
SELECT dsync_acquire('hot', 'c' || :client_id, '30 seconds');
SELECT dsync_release('hot', 'c' || :client_id);
SQL
cat >"$WORKDIR/hot_table.sql" <<'SQL'
INSERT INTO lease VALUES ('hot', 'c' || :client_id, clock_timestamp() + interval '30 seconds')
    ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at
    WHERE lease.holder = EXCLUDED.holder OR lease.expires_at < clock_timestamp();
DELETE FROM lease WHERE name = 'hot' AND holder = 'c' || :client_id;
SQL

declare -A FIRST=() LAST=()
for v in "${VARIANTS[@]}"; do
	q bench "VACUUM"
	q bench "CHECKPOINT"
	snapshot_hold "snapshot_bench holder" $((DURATION + 60))
	out=$(PGOPTIONS="-c synchronous_commit=$COMMIT" "$PGBIN/pgbench" -n -M prepared -c "$CLIENTS" -j 2 \
		-T "$DURATION" -P 10 -f "$WORKDIR/hot_$v.sql" bench 2>&1)
	snapshot_release "snapshot_bench holder"
	pgbench_tps "$v" "$out" >/dev/null
	mapfile -t windows < <(sed -n 's/^progress: [0-9.]* s, \([0-9.]*\) tps.*/\1/p' <<<"$out")
	[ "${#windows[@]}" -ge 2 ] || { echo "no progress lines from pgbench:" >&2; echo "$out" >&2; exit 1; }
	FIRST[$v]=${windows[0]}
	LAST[$v]=${windows[-1]}
	printf '  %-6s %s\n' "$v" "$(printf '%8.0f' "${windows[@]}")"
	printf '  %-6s last 10 s / first 10 s: %.2f\n' "$v" \
		"$(awk -v a="${LAST[$v]}" -v b="${FIRST[$v]}" 'BEGIN { print (b > 0 ? a / b : 0) }')"
	wait_idle bench
done

echo
echo "## Summary"
echo
echo "| measure | dsync | table | dsync / table |"
echo "| --- | ---: | ---: | ---: |"
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b + 0 == 0) print "n/a"; else printf "%.2f", a / b }'; }
printf '| cycles/s, first 10 s | %.0f | %.0f | %s |\n' "${FIRST[dsync]}" "${FIRST[table]}" "$(ratio "${FIRST[dsync]}" "${FIRST[table]}")"
printf '| cycles/s, last 10 s | %.0f | %.0f | %s |\n' "${LAST[dsync]}" "${LAST[table]}" "$(ratio "${LAST[dsync]}" "${LAST[table]}")"
printf '| last / first | %s | %s | |\n' "$(ratio "${LAST[dsync]}" "${FIRST[dsync]}")" "$(ratio "${LAST[table]}" "${FIRST[table]}")"
