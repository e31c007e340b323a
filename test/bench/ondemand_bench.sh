#!/usr/bin/env bash
#
# ondemand_bench.sh: dsync's workers shared between databases (issue 11):
# how soon an expiry is announced where a worker is resident and where one
# must first be started, across many databases at once, and how much
# memory a worker takes at 100,000 and 1,000,000 live leases.
#
# Run as root, after `make install`, from the top of the source tree:
#
#     bash test/bench/ondemand_bench.sh
#
# It starts one throwaway PostgreSQL 15 server of its own (test/bench/
# server.sh) with default worker settings (max_worker_processes 8,
# dsync.max_workers 3), builds the libpq drivers events.c and ondemand.c,
# runs the parts below and removes everything on exit.  Timings are
# printed, never asserted.  About 4 minutes at the defaults.
#
# 1. Resident: events.c's latency mode (see events_bench.sh, part 1) in a
#    database whose worker stays: 200 leases per round with staggered ttls,
#    latency = arrival of "expired" - expires_at.  Target: median < 10 ms.
# 2. Started on demand: the server's dsync.worker_idle_timeout is lowered
#    to 200 ms (ALTER SYSTEM, reload), so that a worker leaves its database
#    as soon as it has nothing to do; ondemand.c's ondemand mode acquires
#    one lease at a time (ttl 1.5 s), checks that the worker has left
#    before the expiry, and measures the "expired" event of a worker the
#    launcher starts for it.  Target: median < 250 ms.
# 3. Many databases: 30 databases with the extension, one lease each
#    expiring at the same moment (ondemand.c manydb), two database workers
#    between them (dsync.max_workers = 3 with the launcher).
# 4. Memory: 100,000 then 1,000,000 live leases (ttl 1 hour) in one
#    database.  The worker is stopped and a new one started (an acquire
#    asks for it), so that it reads its deadlines from the table; its
#    private memory (RssAnon in /proc/PID/status) is sampled every 20 ms
#    from its start until 2 s after it first sleeps, and its memory
#    contexts are logged with pg_log_backend_memory_contexts ("Grand
#    total").  Also the time from its start until it first sleeps.
#    Target: under 100 MB at 1M.
#
# Settings (environment):
#   BENCH_ROUNDS      rounds of parts 1-3 (default 3 / 30 / 3)
#   BENCH_DATABASES   databases in part 3 (default 30, at most 64)
#   BENCH_MEM_SIZES   live leases in part 4 (default "100000 1000000")
#   BENCH_PARTS       which parts to run, e.g. 24 (default 1234)
#   BENCH_KEEP        1: keep the directory (server log, driver output)
#
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/server.sh"
bench_settings PARTS=1234 'MEM_SIZES=100000 1000000'
NDB=${BENCH_DATABASES:-30}

bench_server_start ondemand "max_connections = 200
shared_buffers = 256MB
max_wal_size = 4GB
log_min_messages = log
synchronous_commit = off"
KEEP_NOTE="driver output: $WORKDIR/*.out"
bench_build events
bench_build ondemand

bench_header "dsync: background work for many databases"
echo "  workers: max_worker_processes $(q postgres 'SHOW max_worker_processes'), dsync.max_workers $(q postgres 'SHOW dsync.max_workers')"
declare -A R=()

if bench_part 1 "Expiry-to-NOTIFY, worker resident"; then
	q postgres "CREATE DATABASE resident"
	q resident "CREATE EXTENSION dsync"
	"$WORKDIR/build/events" latency -n 200 -r "${BENCH_ROUNDS:-3}" -b 1000 -s 17 -f 20 resident >"$WORKDIR/resident.out"
	grep -v '^@ ' "$WORKDIR/resident.out" | grep -v floor || true
	for k in median p99 max; do R[res_$k]=$(val "$WORKDIR/resident.out" expiry_${k}_ms); done
	R[res_n]=$(val "$WORKDIR/resident.out" expiry_n)
fi

if bench_part 2 "Expiry-to-NOTIFY, worker started on demand"; then
	q postgres "CREATE DATABASE od"
	q od "CREATE EXTENSION dsync"
	q postgres "ALTER SYSTEM SET dsync.worker_idle_timeout = '200ms'"
	q postgres "SELECT pg_reload_conf()" >/dev/null
	sleep 1
	"$WORKDIR/build/ondemand" ondemand -r "${BENCH_ROUNDS:-30}" -t 1500 od >"$WORKDIR/od.out"
	grep -v '^@ ' "$WORKDIR/od.out"
	for k in median p99 max; do R[od_$k]=$(val "$WORKDIR/od.out" ondemand_${k}_ms); done
	R[od_n]=$(val "$WORKDIR/od.out" ondemand_n)
	q postgres "ALTER SYSTEM RESET dsync.worker_idle_timeout"
	q postgres "SELECT pg_reload_conf()" >/dev/null
fi

if bench_part 3 "$NDB databases, one expiry each at the same moment"; then
	dbs=()
	for i in $(seq 1 "$NDB"); do
		q postgres "CREATE DATABASE many_$i"
		q "many_$i" "CREATE EXTENSION dsync"
		dbs+=("many_$i")
	done
	sleep 2
	"$WORKDIR/build/ondemand" manydb -r "${BENCH_ROUNDS:-3}" -l 3000 "${dbs[@]}" >"$WORKDIR/many.out"
	grep -v '^@ ' "$WORKDIR/many.out"
	for k in median p99 max; do R[many_$k]=$(val "$WORKDIR/many.out" manydb_${k}_ms); done
	R[many_n]=$(val "$WORKDIR/many.out" manydb_n)
	most=$(q postgres "SELECT count(*) FROM pg_stat_activity WHERE backend_type LIKE 'dsync%'")
	echo "  dsync processes now: $most"
fi

# worker_of DB: pid of DB's worker, empty if none
worker_of() {
	q "$1" "SELECT worker_pid FROM dsync_databases WHERE datname = current_database()"
}

if bench_part 4 "Worker memory with many live leases"; then
	q postgres "CREATE DATABASE mem"
	q mem "CREATE EXTENSION dsync"
	have=0
	for size in $MEM_SIZES; do
		while [ "$have" -lt "$size" ]; do
			to=$((have + 50000))
			[ "$to" -gt "$size" ] && to=$size
			q mem "SELECT count(dsync_acquire('m-' || g, 'h', '1 hour')) FROM generate_series($((have + 1)), $to) g" >/dev/null
			have=$to
		done
		q mem "CHECKPOINT" >/dev/null
		# A new worker reads the deadlines from the table.
		old=$(worker_of mem)
		[ -n "$old" ] && q postgres "SELECT pg_terminate_backend($old)" >/dev/null
		for _ in $(seq 1 100); do [ -z "$(worker_of mem)" ] && break; sleep 0.05; done
		q mem "SELECT dsync_acquire('poke-$size', 'h', '1 hour')" >/dev/null
		pid=
		for _ in $(seq 1 400); do
			pid=$(worker_of mem)
			[ -n "$pid" ] && [ "$pid" != "$old" ] && break
			sleep 0.01
		done
		[ -n "$pid" ] || { echo "no worker came for database mem" >&2; exit 1; }
		start=$(q postgres "SELECT extract(epoch FROM backend_start) FROM pg_stat_activity WHERE pid = $pid")
		peak=0
		slept_at=
		while [ -r "/proc/$pid/status" ]; do
			kb=$(sed -n 's/^RssAnon:[[:space:]]*\([0-9]*\) kB/\1/p' "/proc/$pid/status")
			[ -n "$kb" ] && [ "$kb" -gt "$peak" ] && peak=$kb
			if [ -z "$slept_at" ]; then
				w=$(q postgres "SELECT wait_event FROM pg_stat_activity WHERE pid = $pid")
				[ "$w" = Extension ] && slept_at=$(date +%s.%N)
			elif awk -v a="$slept_at" -v b="$(date +%s.%N)" 'BEGIN { exit !(b - a > 2) }'; then
				break
			fi
			sleep 0.02
		done
		settled=$(sed -n 's/^RssAnon:[[:space:]]*\([0-9]*\) kB/\1/p' "/proc/$pid/status")
		mark=$(stat -c %s "$SERVER_LOG")
		q postgres "SELECT pg_log_backend_memory_contexts($pid)" >/dev/null
		sleep 1
		total=$(tail -c +$((mark + 1)) "$SERVER_LOG" | grep "\[$pid\]" |
			sed -n 's/.*Grand total: \([0-9]*\) bytes.*/\1/p' | tail -n 1)
		rebuild=$(awk -v a="$start" -v b="$slept_at" 'BEGIN { printf "%.2f", b - a }')
		echo "  $size live leases: worker $pid read them in ${rebuild} s; private memory peak $((peak / 1024)) MB," \
			"after $((settled / 1024)) MB; memory contexts $((total / 1048576)) MB ($total bytes)"
		R[mem_${size}_peak]=$((peak / 1024))
		R[mem_${size}_settled]=$((settled / 1024))
		R[mem_${size}_ctx]=$((total / 1048576))
		R[mem_${size}_rebuild]=$rebuild
	done
fi

echo
echo "## Summary"
echo
echo "| measurement | median | p99 | max | n | target |"
echo "| --- | ---: | ---: | ---: | ---: | --- |"
[[ $PARTS == *1* ]] && echo "| expiry to NOTIFY, worker resident | ${R[res_median]} ms | ${R[res_p99]} ms | ${R[res_max]} ms | ${R[res_n]} | median < 10 ms |"
[[ $PARTS == *2* ]] && echo "| expiry to NOTIFY, worker started on demand | ${R[od_median]} ms | ${R[od_p99]} ms | ${R[od_max]} ms | ${R[od_n]} | median < 250 ms |"
[[ $PARTS == *3* ]] && echo "| expiry to NOTIFY, $NDB databases expiring together, 2 workers | ${R[many_median]} ms | ${R[many_p99]} ms | ${R[many_max]} ms | ${R[many_n]} | |"
if [[ $PARTS == *4* ]]; then
	echo
	echo "| live leases | worker private memory, peak | after reading | memory contexts | time to read the table |"
	echo "| ---: | ---: | ---: | ---: | ---: |"
	for size in $MEM_SIZES; do
		echo "| $size | ${R[mem_${size}_peak]} MB | ${R[mem_${size}_settled]} MB | ${R[mem_${size}_ctx]} MB | ${R[mem_${size}_rebuild]} s |"
	done
fi
if grep -Eq 'PANIC|TRAP|terminated by signal|WARNING' "$SERVER_LOG"; then
	echo
	echo "server log has errors or warnings:"
	grep -E 'PANIC|TRAP|terminated by signal|WARNING' "$SERVER_LOG" | sort | uniq -c | sort -rn | head -n 10
fi
