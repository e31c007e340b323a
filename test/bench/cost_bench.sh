#!/usr/bin/env bash
#
# cost_bench.sh: what one acquire+release cycle costs, dsync against the
# hand-written lease table, in one command and in figures that repeat on a
# noisy shared host:
#
#   1. instructions per cycle (user space, the backend alone), counted by
#      valgrind --tool=callgrind on a server running under it: one psql
#      session runs N cycles through prepared statements (as pgbench -M
#      prepared does) and exits; (Ir of N2 cycles - Ir of N1 cycles) /
#      (N2 - N1), so that start-up and warm-up cancel out;
#   2. WAL records and bytes per cycle, from pg_waldump --stats over the
#      WAL that BENCH_WAL_CYCLES cycles wrote (full-page images counted
#      apart: a checkpoint just before would otherwise decide the figure);
#   3. throughput side by side: pgbench cycles/s of each variant, rotated
#      and interleaved, median of BENCH_ROUNDS rounds, with
#      synchronous_commit off and on, and the ratios to the table;
#   4. the cost of listeners: dsync's cycles/s (synchronous_commit off)
#      with BENCH_LISTENERS sessions LISTENing (on the channel of one
#      name: PostgreSQL makes every listening backend of the database read
#      every notification) against none, rotated, median of BENCH_ROUNDS.
#
# Run as root after `make install`, from the top of the source tree:
#
#     bash test/bench/cost_bench.sh
#
# Settings (environment):
#   BENCH_N1, BENCH_N2     cycles of the two callgrind runs (default 300, 1300)
#   BENCH_WAL_CYCLES       cycles whose WAL is counted (default 2000)
#   BENCH_SECONDS          seconds per throughput run (default 10)
#   BENCH_ROUNDS           throughput rounds (default 3)
#   BENCH_CLIENTS          pgbench clients (default 4)
#   BENCH_LISTENERS        listening sessions of part 4 (default 4)
#   BENCH_PARTS            which parts to run, e.g. 12 (default 1234)
#   BENCH_IR_EXTRA         more variants for part 1 only (default
#                          "ephemeral fence bound": an ephemeral lease's
#                          cycle, one dsync_fence call with the mark's own
#                          token on one of 100 resources, and the cycle of
#                          one of 100 leases each bound to a resource
#                          (dsync_fence_bind), whose grants raise its mark;
#                          "" for none)
#   BENCH_IR_HELD          counts of ephemeral leases held (by another
#                          holder, ttl 100 s, in one statement) while the
#                          ephemeral variant's instructions are counted,
#                          one figure per count, e.g. "0 1000 1000000"
#                          (default "0"; above 0 the server has
#                          dsync.ephemeral_max_ttl = 100 s, and the first
#                          ephemeral grant waits that long after each start)
#   BENCH_KEEP             1: keep the directory
#
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/server.sh"
bench_settings N1=300 N2=1300 WAL_CYCLES=2000 CLIENTS=4 LISTENERS=4 PARTS=1234 IR_HELD=0
bench_throughput_settings 10 3
VARIANTS=(dsync table)
read -r -a IR_EXTRA <<<"${BENCH_IR_EXTRA-ephemeral fence bound}"
NAMES=100000

# Ephemeral grants wait out dsync.ephemeral_max_ttl after every start.
EPHEMERAL_CONF="dsync.ephemeral_max_ttl = 10"
held_max=0
for n in $IR_HELD; do
	if [ "$n" -gt "$held_max" ]; then held_max=$n; fi
done
if [ "$held_max" -gt 0 ]; then
	EPHEMERAL_CONF="dsync.ephemeral_max_ttl = 100
dsync.ephemeral_max_leases = $((held_max + 100000))"
fi
bench_server_start cost "$THROUGHPUT_CONF
$EPHEMERAL_CONF"

q postgres "CREATE DATABASE bench"
q bench "CREATE EXTENSION dsync"
q bench "CREATE TABLE lease (name text PRIMARY KEY, holder text NOT NULL, expires_at timestamptz NOT NULL)"
prefill_released bench "$NAMES"
q bench "VACUUM ANALYZE"

bench_header "dsync cost per acquire+release cycle, against the hand-written lease table"
echo "  settings: $THROUGHPUT_CONF" | head -1

# cycle_sql VARIANT N: a psql script that prints its backend's pid, then
# runs N cycles of VARIANT through prepared statements (as pgbench -M
# prepared does), names spread over the prefilled ones.
cycle_sql() {
	echo "SELECT pg_backend_pid();"
	if [ "$1" = fence ]; then
		# The mark's own token (the holder writing again), on marks made by
		# fence_prepare, so that every call updates one.
		echo "SELECT token AS t FROM dsync_fences WHERE resource = 'fence-1' \\gset"
		echo "PREPARE f(text) AS SELECT dsync_fence('fence-' || \$1, :t);"
		awk -v n="$2" 'BEGIN { for (i = 1; i <= n; i++) printf "EXECUTE f(%c%d%c);\n", 39, i % 100 + 1, 39 }'
		return
	fi
	if [ "$1" = bound ]; then
		# A lease with a fence bound (see part 1): each grant raises it.
		echo "PREPARE a(text) AS SELECT dsync_acquire('bound-' || \$1, 'c1', '30 seconds');"
		echo "PREPARE r(text) AS SELECT dsync_release('bound-' || \$1, 'c1');"
		awk -v n="$2" 'BEGIN { for (i = 1; i <= n; i++) { k = i % 100 + 1
			printf "EXECUTE a(%c%d%c);\nEXECUTE r(%c%d%c);\n", 39, k, 39, 39, k, 39 } }'
		return
	fi
	if [ "$1" = dsync ]; then
		echo "PREPARE a(text) AS SELECT dsync_acquire(\$1, 'c1', '30 seconds');"
		echo "PREPARE r(text) AS SELECT dsync_release(\$1, 'c1');"
	elif [ "$1" = ephemeral ]; then
		echo "PREPARE a(text) AS SELECT dsync_acquire(\$1, 'c1', '10 seconds', '0', NULL, false);"
		echo "PREPARE r(text) AS SELECT dsync_release(\$1, 'c1');"
	else
		echo "PREPARE a(text) AS INSERT INTO lease VALUES (\$1, 'c1', clock_timestamp() + interval '30 seconds')" \
			"ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at" \
			"WHERE lease.holder = EXCLUDED.holder OR lease.expires_at < clock_timestamp();"
		echo "PREPARE r(text) AS DELETE FROM lease WHERE name = \$1 AND holder = 'c1';"
	fi
	awk -v n="$2" -v names="$NAMES" 'BEGIN {
		for (i = 1; i <= n; i++) {
			k = (i * 7919) % names + 1
			printf "EXECUTE a(%c%d%c);\nEXECUTE r(%c%d%c);\n", 39, k, 39, 39, k, 39
		}
	}'
}

declare -A IR=() WALREC=() WALBYTES=() WALFPI=()

# warm_locations: a server that has run a while knows where each lease's
# row is (locate.c); one that has just started does not, and its first
# call for each name probes the index.  Look every name up once, so that
# each part measures the steady state.
#
# A durable grant of a free name also waits after a start if ephemeral
# leases were used just before it (part 1's are; README "One kind at a
# time"), and a cycle with wait 0 then takes nothing and writes nothing:
# one blocking acquire waits that out first.
warm_locations() {
	q bench "SELECT dsync_release('warm-durable', 'c1') FROM
	         (SELECT dsync_acquire('warm-durable', 'c1', '1 s', '120 s')) a" >/dev/null
	q bench "SELECT count(dsync_leader(i::text)) FROM generate_series(1, $NAMES) i" >/dev/null
}

# ---------------------------------------------------------------------------
# 1. Instructions per cycle (callgrind, single-user backend)
# ---------------------------------------------------------------------------

# callgrind_ir VARIANT N: the instructions of one backend (the server
# runs under callgrind meanwhile) that ran N cycles and exited.
callgrind_ir() {
	local script=$WORKDIR/cycles.$1.$2.sql pid file
	cycle_sql "$1" "$2" >"$script"
	"$PGBIN/psql" -X -q -At -v ON_ERROR_STOP=1 -d bench -f "$script" >"$script.out"
	pid=$(head -1 "$script.out")
	file=$WORKDIR/callgrind/cg.$pid
	for _ in $(seq 1 600); do
		[ -s "$file" ] && grep -q '^totals:\|^summary:' "$file" && break
		sleep 0.1
	done
	sed -n 's/^summary: *\([0-9]*\).*/\1/p;s/^totals: *\([0-9]*\).*/\1/p' "$file" | head -1
}

if bench_part 1 "Instructions per cycle (callgrind, one backend, prepared statements, $N1 and $N2 cycles)"; then
	runuser -u postgres -- "$PGBIN/pg_ctl" -D "$PGDATA_DIR" -m fast -w stop >/dev/null
	mkdir "$WORKDIR/callgrind"
	chown postgres: "$WORKDIR/callgrind"
	# Every process of the server runs under callgrind (backends are
	# forked, not executed); autovacuum is off so that no other process
	# comes and goes.
	runuser -u postgres -- valgrind --quiet --tool=callgrind \
		--callgrind-out-file="$WORKDIR/callgrind/cg.%p" \
		"$PGBIN/postgres" -D "$PGDATA_DIR" -c autovacuum=off -c synchronous_commit=off \
		>>"$WORKDIR/valgrind.log" 2>&1 &
	for _ in $(seq 1 600); do
		"$PGBIN/pg_isready" -q -d bench && break
		sleep 0.2
	done
	warm_locations
	for v in "${VARIANTS[@]}" "${IR_EXTRA[@]}"; do
		case $v in
			ephemeral)
				# Until the grace after the start is over, nothing is granted.
				q bench "SELECT dsync_release('warm', 'c1') FROM
				         (SELECT dsync_acquire('warm', 'c1', '1 s', '300 s', NULL, false)) a" >/dev/null
				for held in $IR_HELD; do
					[ "$held" -gt 0 ] || continue
					q bench "SELECT count(dsync_acquire('held-' || i, 'h', '100 s', '0', NULL, false))
					         FROM generate_series(1, $held) i" >/dev/null
					a=$(callgrind_ir "$v" "$N1")
					b=$(callgrind_ir "$v" "$N2")
					printf '  %-6s %10s instructions per cycle  (%s and %s in all), %s ephemeral leases held\n' "$v" \
						"$(awk -v a="$a" -v b="$b" -v n1="$N1" -v n2="$N2" 'BEGIN { printf "%.0f", (b - a) / (n2 - n1) }')" \
						"$a" "$b" "$(q bench "SELECT count(*) FROM dsync_leases WHERE lease LIKE 'held-%'")"
					q bench "SELECT count(dsync_release('held-' || i, 'h')) FROM generate_series(1, $held) i" >/dev/null
				done ;;
			fence)
				q bench "SELECT count(dsync_fence('fence-' || i, t.token)) FROM generate_series(1, 100) i,
				         (SELECT dsync_acquire('fence-token', 'c1', '1 day') AS token) t" >/dev/null ;;
			bound)
				q bench "SELECT count(dsync_fence_bind('bound-res-' || i, 'bound-' || i))
				         FROM generate_series(1, 100) i" >/dev/null ;;
		esac
		a=$(callgrind_ir "$v" "$N1")
		b=$(callgrind_ir "$v" "$N2")
		IR[$v]=$(awk -v a="$a" -v b="$b" -v n1="$N1" -v n2="$N2" 'BEGIN { printf "%.0f", (b - a) / (n2 - n1) }')
		printf '  %-6s %10s instructions per cycle  (%s and %s in all)\n' "$v" "${IR[$v]}" "$a" "$b"
	done
	runuser -u postgres -- "$PGBIN/pg_ctl" -D "$PGDATA_DIR" -m fast -w -t 300 stop >/dev/null
	wait
	runuser -u postgres -- "$PGBIN/pg_ctl" -D "$PGDATA_DIR" -l "$SERVER_LOG" -w start >/dev/null
fi

# ---------------------------------------------------------------------------
# 2. WAL per cycle (pg_waldump --stats)
# ---------------------------------------------------------------------------

if bench_part 2 "WAL per cycle ($WAL_CYCLES cycles, one client, after a warm-up)"; then
	warm_locations
	for v in "${VARIANTS[@]}"; do
		"$PGBIN/pgbench" -n -M prepared -c 1 -t "$WAL_CYCLES" -f "$HERE/cycle_$v.sql" bench >/dev/null 2>&1
		start=$(q bench "SELECT pg_current_wal_insert_lsn()")
		"$PGBIN/pgbench" -n -M prepared -c 1 -t "$WAL_CYCLES" -f "$HERE/cycle_$v.sql" bench >/dev/null 2>&1
		end=$(q bench "SELECT pg_current_wal_insert_lsn()")
		q bench "SELECT pg_switch_wal()" >/dev/null
		stats=$(runuser -u postgres -- "$PGBIN/pg_waldump" -p "$PGDATA_DIR/pg_wal" -s "$start" -e "$end" --stats 2>/dev/null)
		# The "Total" line: count, %, record size, %, FPI size, %, combined size, %
		# Total: count, record bytes [%], full-page image bytes [%], combined [%]
		read -r recs recbytes fpibytes <<<"$(awk '/^Total/ { print $2, $3, $5 }' <<<"$stats")"
		WALREC[$v]=$(awk -v r="$recs" -v n="$WAL_CYCLES" 'BEGIN { printf "%.2f", r / n }')
		WALBYTES[$v]=$(awk -v b="$recbytes" -v n="$WAL_CYCLES" 'BEGIN { printf "%.0f", b / n }')
		WALFPI[$v]=$(awk -v b="$fpibytes" -v n="$WAL_CYCLES" 'BEGIN { printf "%.0f", b / n }')
		printf '  %-6s %6s records, %5s bytes of records, %5s bytes of full-page images per cycle\n' \
			"$v" "${WALREC[$v]}" "${WALBYTES[$v]}" "${WALFPI[$v]}"
	done
fi

# ---------------------------------------------------------------------------
# 3. Throughput side by side
# ---------------------------------------------------------------------------

# cycles_tps VARIANT COMMIT: cycles/s of VARIANT's pgbench script, with
# synchronous_commit = COMMIT, right after a checkpoint.
cycles_tps() {
	local out
	q bench "CHECKPOINT"
	out=$(PGOPTIONS="-c synchronous_commit=$2" "$PGBIN/pgbench" -n -M "$PROTOCOL" \
		-c "$CLIENTS" -j 2 -T "$SECONDS_PER_RUN" -f "$HERE/cycle_$1.sql" bench 2>&1)
	pgbench_tps "$1" "$out"
}

declare -A TPS=()
if bench_part 3 "Throughput: $CLIENTS clients, ${SECONDS_PER_RUN} s per run, $ROUNDS round(s), median"; then
	warm_locations
	rotation=0
	for round in $(seq 1 "$ROUNDS"); do
		for commit in off on; do
			mapfile -t order < <(rotated "$rotation" "${VARIANTS[@]}")
			rotation=$((rotation + 1))
			for v in "${order[@]}"; do
				TPS[$v,$commit]="${TPS[$v,$commit]:-} $(cycles_tps "$v" "$commit")"
				wait_idle bench
			done
		done
	done
	for commit in off on; do
		d=$(median ${TPS[dsync,$commit]})
		t=$(median ${TPS[table,$commit]})
		printf '  synchronous_commit=%-3s dsync %9.0f  table %9.0f  dsync/table %.2f\n' "$commit" "$d" "$t" \
			"$(awk -v d="$d" -v t="$t" 'BEGIN { print (t > 0 ? d / t : 0) }')"
	done
fi

# ---------------------------------------------------------------------------
# 4. Listeners
# ---------------------------------------------------------------------------

# listeners_start N: N psql sessions that LISTEN on the channel of name 1
# and then sit idle, so that their backends read the notification queue
# as PostgreSQL's listeners do; returns once all N are listening.  Each
# reads its commands from a FIFO that this script holds open.
listeners_start() {
	local channel n fifo fd
	channel=$(q bench "SELECT dsync_channel('1')")
	LISTENER_FDS=()
	for i in $(seq 1 "$1"); do
		fifo=$WORKDIR/listener.$i
		rm -f "$fifo"
		mkfifo "$fifo"
		PGAPPNAME="cost_bench listener" "$PGBIN/psql" -X -q -d bench <"$fifo" >/dev/null 2>&1 &
		exec {fd}>"$fifo"
		LISTENER_FDS+=("$fd")
		echo "LISTEN \"$channel\";" >&"$fd"
	done
	for _ in $(seq 1 100); do
		n=$(q bench "SELECT count(*) FROM pg_stat_activity
		             WHERE application_name = 'cost_bench listener' AND query LIKE 'LISTEN%'")
		[ "$n" = "$1" ] && return 0
		sleep 0.1
	done
	echo "the listeners did not show up" >&2
	exit 1
}

# listeners_stop: end the listeners' input; their psql sessions exit.
listeners_stop() {
	local fd
	for fd in "${LISTENER_FDS[@]}"; do
		exec {fd}>&-
	done
	wait
}

declare -A LTPS=()
if bench_part 4 "Listeners: dsync cycles/s with $LISTENERS sessions listening and with none ($CLIENTS clients, synchronous_commit=off)"; then
	warm_locations
	rotation=0
	for round in $(seq 1 "$ROUNDS"); do
		mapfile -t order < <(rotated "$rotation" none listening)
		rotation=$((rotation + 1))
		for l in "${order[@]}"; do
			[ "$l" = listening ] && listeners_start "$LISTENERS"
			LTPS[$l]="${LTPS[$l]:-} $(cycles_tps dsync off)"
			[ "$l" = listening ] && listeners_stop
			wait_idle bench
		done
	done
	n=$(median ${LTPS[none]})
	l=$(median ${LTPS[listening]})
	printf '  no listener %9.0f  %d listeners %9.0f  ratio %.2f\n' "$n" "$LISTENERS" "$l" \
		"$(awk -v l="$l" -v n="$n" 'BEGIN { print (n > 0 ? l / n : 0) }')"
fi

echo
echo "## Summary (dsync / table)"
echo
echo "| measure | dsync | table | dsync / table |"
echo "| --- | ---: | ---: | ---: |"
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b + 0 == 0) print "n/a"; else printf "%.2f", a / b }'; }
[ -n "${IR[dsync]:-}" ] && echo "| instructions per cycle | ${IR[dsync]} | ${IR[table]} | $(ratio "${IR[dsync]}" "${IR[table]}") |"
[ -n "${WALREC[dsync]:-}" ] && echo "| WAL records per cycle | ${WALREC[dsync]} | ${WALREC[table]} | $(ratio "${WALREC[dsync]}" "${WALREC[table]}") |"
[ -n "${WALBYTES[dsync]:-}" ] && echo "| WAL bytes per cycle (records) | ${WALBYTES[dsync]} | ${WALBYTES[table]} | $(ratio "${WALBYTES[dsync]}" "${WALBYTES[table]}") |"
for commit in off on; do
	[ -n "${TPS[dsync,$commit]:-}" ] || continue
	d=$(median ${TPS[dsync,$commit]})
	t=$(median ${TPS[table,$commit]})
	printf '| cycles/s, synchronous_commit=%s | %.0f | %.0f | %s |\n' "$commit" "$d" "$t" "$(ratio "$d" "$t")"
done
if [ -n "${LTPS[none]:-}" ]; then
	n=$(median ${LTPS[none]})
	l=$(median ${LTPS[listening]})
	echo
	echo "| dsync, synchronous_commit=off | no listener | $LISTENERS listeners | ratio |"
	echo "| --- | ---: | ---: | ---: |"
	printf '| cycles/s | %.0f | %.0f | %s |\n' "$n" "$l" "$(ratio "$l" "$n")"
fi
