#!/usr/bin/env bash
#
# scale_work_bench.sh: parts 5 to 8 of scale_bench.sh, cost as the work
# grows (run by scale_bench.sh, or alone):
#
#     bash test/bench/scale_work_bench.sh
#
# Run as root, after `make install`.  It starts a throwaway server of its
# own (test/bench/server.sh; PGBIN as there, default PostgreSQL 15) with
# max_connections = 1100 and synchronous_commit = off, builds the libpq
# driver scale_work.c, and runs each part in a database of its own,
# dropped afterwards.  It prints, never asserts:
#
# 5. Held durable leases: BENCH_HELD (1000 100000 1000000) live leases
#    held-1.. (ttl 1 hour, taken in transactions of 10,000), each count in
#    a database of its own, filled first; then BENCH_HELD_ROUNDS (3)
#    rounds, the counts in rotating order, each run after a CHECKPOINT, of
#    pgbench on cycle_dsync.sql (acquire+release of a random one of
#    100,000 other names, whose rows exist, released, from the start; a
#    warm-up of 3 s each) with BENCH_CLIENTS (2) clients for
#    BENCH_SECONDS (10): cycles/s and mean latency (medians), and the
#    ratio to the first count.
# 6. Sleeping waiters: (a) BENCH_WAITERS (1000) connections each blocked in
#    dsync_acquire(..., wait => '10 min') on its own held name; (b)
#    BENCH_ONE_WAITERS (200) blocked on one held name.  Once dsync_waiters
#    lists them all: the CPU time of every process of the server (utime +
#    stime from /proc/<pid>/stat of the postmaster and its children) over
#    BENCH_IDLE (10) s, as CPU seconds per second; then BENCH_HANDOFFS (50)
#    hand-offs, each from the release (clock_timestamp() in the releasing
#    statement, committed with synchronous_commit off) to the waiter's
#    return (clock_timestamp() in its statement): p50/p99, and the same
#    with 1 waiter.  In (a) the hand-offs go to waiters in turn, each
#    asleep since it queued, and then, as a control, all to the same
#    waiter (re-queued after each, so it ran a moment before).  In (b) the
#    holder releases with 199 others queued, and queues again behind them.
#    The CPU is also read from /proc/<pid>/schedstat (run time in ns: the
#    tick-sampled utime + stime miss short runs) and the wake-ups are
#    counted (voluntary context switches of every server process).
# 7. Listeners: BENCH_LISTENERS (500) connections LISTEN on dsync_channel
#    of (a) one lease, (b) each its own of 500 leases; BENCH_LISTEN_ROUNDS
#    (5) times the leases are taken (in one statement) with a 500 ms ttl
#    and expire; each listener times its `expired` notification against
#    the payload's expires_at (client and server share the machine's
#    clock): p50/p99 over every listener and event, and the same with 1
#    listener; and, per event, the worker's share: from expires_at to the
#    sent_at of the event in the event log (dsync_events_since), the start
#    of the worker's transaction that logs it just before sending it.
# 8. Mass expiry: BENCH_MASS (100000) durable leases whose expiries are
#    spread over one second, 20 s after they are taken (transactions of
#    10,000); from the last expiry, the time until dsync_stats counts them
#    all as expiries, until events_sent has grown by as many (the `expired`
#    events; the `acquired` ones were sent before the first expiry), and
#    until dsync_leases lists none of them.  The driver LISTENs on one
#    channel meanwhile: events are sent only while someone listens.
#
# BENCH_PARTS (default "5 6 7 8") selects the parts; BENCH_EXTRA_CONF,
# lines added to the server's postgresql.conf (e.g.
# "dsync.reap_batch_size = 1000").
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/server.sh"
# (BENCH_SECONDS: bash's own SECONDS cannot hold it.)
RUN_SECONDS=${BENCH_SECONDS:-10}
bench_settings PARTS="5 6 7 8" HELD="1000 100000 1000000" CLIENTS=2 HELD_ROUNDS=3 \
	WAITERS=1000 ONE_WAITERS=200 IDLE=10 HANDOFFS=50 LISTENERS=500 LISTEN_ROUNDS=5 \
	MASS=100000

# One client process holds up to 1,000 connections.
ulimit -n 8192

bench_server_start scale-work "max_connections = 1100
synchronous_commit = off
shared_buffers = 256MB
max_wal_size = 8GB
checkpoint_timeout = 30min
${BENCH_EXTRA_CONF:-}"

bench_build scale_work
bench_header "dsync: cost as the work grows"

# newdb NAME: a fresh database NAME with the extension.
newdb() {
	q postgres "CREATE DATABASE $1" >/dev/null
	q "$1" "CREATE EXTENSION dsync" >/dev/null
}

if bench_part 5 "cycles with many durable leases held"; then
	# One database per count, all filled first, so that the runs of the
	# counts can alternate: load from elsewhere on the machine then hits
	# them alike.  The cycle's names exist (released) before the first
	# run, as in a system that has run for a while: else the first runs
	# pay for inserting them.
	echo "filling (one database per count; transactions of 10,000):"
	for n in $HELD; do
		newdb "held_$n"
		t0=$(date +%s%N)
		q "held_$n" "DO \$\$ BEGIN
		          FOR b IN 0 .. ($n - 1) / 10000 LOOP
		            PERFORM dsync_acquire('held-' || i, 'h', '1 hour')
		               FROM generate_series(b * 10000 + 1, least(b * 10000 + 10000, $n)) i;
		            COMMIT;
		          END LOOP;
		        END \$\$" >/dev/null
		echo "  $n leases held in $((($(date +%s%N) - t0) / 1000000)) ms;" \
			"$(q "held_$n" "SELECT count(*) FROM dsync_leases WHERE lease LIKE 'held-%'") live;" \
			"table $(q "held_$n" "SELECT pg_size_pretty(pg_total_relation_size('dsync_lease'))")"
		prefill_released "held_$n" 100000
		q "held_$n" "VACUUM ANALYZE dsync_lease" >/dev/null
		"$PGBIN/pgbench" -n -M prepared -c "$CLIENTS" -j 2 -T 3 -f "$HERE/cycle_dsync.sql" "held_$n" >/dev/null 2>&1
	done
	echo "pgbench -M prepared -c $CLIENTS -j 2 -T $RUN_SECONDS, cycle_dsync.sql (names 1..100000, prefilled),"
	echo "3 s warm-up each, $HELD_ROUNDS rounds, the counts' order rotating, each run after a CHECKPOINT"
	declare -A runs=() lats=()
	read -ra counts <<<"$HELD"
	for round in $(seq "$HELD_ROUNDS"); do
		while read -r n; do
			q "held_$n" "CHECKPOINT" >/dev/null
			out=$("$PGBIN/pgbench" -n -M prepared -c "$CLIENTS" -j 2 -T "$RUN_SECONDS" \
				-f "$HERE/cycle_dsync.sql" "held_$n" 2>&1)
			runs[$n]="${runs[$n]:-} $(pgbench_tps "cycle_dsync.sql with $n held" "$out")"
			lats[$n]="${lats[$n]:-} $(sed -n 's/^latency average = \([0-9.]*\) ms.*/\1/p' <<<"$out")"
		done < <(rotated "$round" "${counts[@]}")
	done
	printf '%10s %10s %12s %8s   %s\n' held cycles/s "latency ms" ratio "(medians; ratio to the first count; each run)"
	first=
	for n in $HELD; do
		# shellcheck disable=SC2086
		tps=$(median ${runs[$n]})
		# shellcheck disable=SC2086
		lat=$(median ${lats[$n]})
		first=${first:-$tps}
		printf '%10s %10.0f %12s %8.2f   (%s)\n' "$n" "$tps" "$lat" \
			"$(awk -v a="$tps" -v b="$first" 'BEGIN { print a / b }')" \
			"$(printf '%.0f ' ${runs[$n]})"
	done
	for n in $HELD; do
		q postgres "DROP DATABASE held_$n" >/dev/null
	done
fi

if bench_part 6 "sleeping waiters: idle CPU and hand-off"; then
	newdb waiters
	echo "(a) distinct names"
	bench_driver scale_work waiters -m distinct -k 1 -i "$IDLE" -n "$HANDOFFS" waiters | grep -v '^@'
	bench_driver scale_work waiters -m distinct -k "$WAITERS" -i "$IDLE" -n "$HANDOFFS" waiters | grep -v '^@'
	echo "the same, every hand-off to w-1 (a waiter that ran a moment ago):"
	bench_driver scale_work waiters -m distinct -k "$WAITERS" -i 0 -n "$HANDOFFS" -s 1 waiters | grep 'waiters, '
	echo "(b) one name"
	bench_driver scale_work waiters -m one -k 1 -i 0 -n "$HANDOFFS" waiters | grep -v '^@'
	bench_driver scale_work waiters -m one -k "$ONE_WAITERS" -i "$IDLE" -n "$HANDOFFS" waiters | grep -v '^@'
	q postgres "DROP DATABASE waiters" >/dev/null
fi

if bench_part 7 "listeners: expiry to notification"; then
	newdb listeners
	for m in one distinct; do
		bench_driver scale_work listeners -m "$m" -k 1 -r "$LISTEN_ROUNDS" -t 500 listeners | grep -v '^@'
		bench_driver scale_work listeners -m "$m" -k "$LISTENERS" -r "$LISTEN_ROUNDS" -t 500 listeners |
			grep -v '^@'
	done
	q postgres "DROP DATABASE listeners" >/dev/null
fi

if bench_part 8 "mass expiry"; then
	newdb mass
	bench_driver scale_work mass -k "$MASS" -l 20 mass | grep -v '^@'
	q postgres "DROP DATABASE mass" >/dev/null
fi

# (DROP DATABASE ends the database's reaper: that FATAL is expected.)
errors=$(grep -E 'PANIC|FATAL|TRAP|terminated by signal' "$SERVER_LOG" |
	grep -v 'due to administrator command' || true)
if [ -n "$errors" ]; then
	echo
	echo "server log has errors:"
	head -n 20 <<<"$errors"
fi
