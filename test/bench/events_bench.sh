#!/usr/bin/env bash
#
# events_bench.sh: dsync's NOTIFY events: how soon the reaper announces an
# expiry, what LISTENers cost the lease hot path, and how the reaper copes
# with many leases expiring at once.
#
# Run as root, after `make install`, from the top of the source tree:
#
#     bash test/bench/events_bench.sh
#
# It starts one throwaway PostgreSQL 15 server of its own (test/bench/
# server.sh: initdb into a mktemp directory owned by postgres, Unix socket
# only, dsync preloaded), builds the libpq driver events.c into that
# directory, runs the three measurements below, and stops and removes
# everything on exit.  Timings are printed, never asserted.  About 7
# minutes at the defaults.
#
# 1. Expiry-to-NOTIFY latency (events latency).  A listener LISTENs on the
#    channels (dsync_channel) of 200 leases; another session acquires them
#    in one statement with staggered ttls (1 s + i * 17 ms, holder 'h') and
#    reads their expires_at from dsync_leases.  For every "expired" event:
#    latency = the client's CLOCK_REALTIME when the listener's socket became
#    readable - that lease's expires_at (same machine, same clock).  Fresh
#    names each round, BENCH_ROUNDS rounds pooled.  Also counted: lost and
#    duplicate events, payloads that differ from the lease as acquired
#    (holder, fencing, expires_at) or whose expires_at is not in the
#    specified format, and the "acquired" events of the same leases with
#    their lag from the acquire call.  For scale, the floor: a plain
#    pg_notify() from another session, latency = arrival - the sender's
#    clock_timestamp() before its commit (synchronous_commit on and off).
#    Targets: median <= 10 ms, none later than 50 ms.
#
# 2. Acquire+release throughput with and without LISTENers: pgbench with
#    cycle_dsync.sql (random names 1..100000, two autocommit transactions
#    per cycle, so tps = cycles/s; -M prepared -j 2), synchronous_commit off,
#    4 and 16 clients, BENCH_SECONDS each; first nobody listening, then 4
#    listener connections (events listen) draining notifications as fast as
#    they come.  Each listener LISTENs on 100 distinct channels of those
#    names (400 in all, spread evenly), not on all 100,000: PostgreSQL 15
#    checks every queued notification against a listening backend's channel
#    list one by one (async.c, IsListeningOn), and LISTEN itself searches the
#    list, so 100,000 channels per backend would measure that list, not
#    dsync (BENCH_LISTEN_CHANNELS changes it).  Before measuring, dsync_lease
#    is filled with one released row per name (as lease_bench.sh does).
#    After every run a barrier (events sync: acquire and release one lease,
#    wait for its "released" event) makes sure the reaper has sent the run's
#    backlog before the next run starts; its time is printed as "drain".
#    The reaper's CPU time per run comes from /proc.  For reference, a
#    third variant runs with dsync.events = off (ALTER SYSTEM + reload: no
#    NOTIFY sent at all), showing what sending the events costs even with
#    nobody listening.  Variants alternate, their order rotating;
#    BENCH_ROUNDS rounds, medians reported.  The listeners' deliveries are
#    compared with the number expected (2 events per cycle x the share of
#    names listened to; a statistical estimate, +-7 % for one run).
#    Target: with listeners >= 0.80 x without.
#
# 3. 50,000 leases expiring together (events mass), each run in a fresh
#    database: 'mass-1'..'mass-50000' are acquired in transactions of 5,000
#    with ttl = T - clock_timestamp() for a moment T 15 s ahead, so all
#    expire at T however long the insert takes (the spread of their
#    expires_at is printed); T_max = max(expires_at).  One connection
#    LISTENs on every 100th lease's channel (500 channels); another polls
#    the extension's table from just before T: every 10 ms
#    EXISTS (name LIKE 'mass-%' AND holder IS NOT NULL), and every 250 ms a
#    full count for the progress trace.  "holder IS NOT NULL" rather than
#    row count: released rows stay in dsync_lease with no holder (see the
#    install script), so a reaper may clear rather than delete; the script
#    reports which it did.  Reports seconds from T_max until no mass- row
#    is held and until the first / last sampled "expired" event arrived, the
#    reaper's CPU time, and checks afterwards.  Done once plain and once
#    with 50,000 long-lived leases (ttl 1 hour) in the table as well, which
#    should take about as long (O(expired), not O(all)); BENCH_ROUNDS rounds
#    of the pair, medians reported.  Target: under 5 s.
#
# Events dsync drops: when a database's event queue in shared memory
# (dsync.event_queue_size) is full, committing backends drop their events
# and the reaper logs "dsync dropped N lease events ...".  Those counts are
# read from the server log and attributed to each part and run (the
# prefill of part 2, whose 100,000 releases commit in one transaction,
# separately).
#
# Ends with a Markdown summary table.
#
# Settings (environment):
#   BENCH_ROUNDS           rounds of every measurement; medians (part 1:
#                          pooled samples) are reported (default 3)
#   BENCH_SECONDS          seconds per measured pgbench run (default 10)
#   BENCH_WARMUP           seconds of unmeasured pgbench warm-up (default 3)
#   BENCH_PROTOCOL         pgbench query mode (default prepared)
#   BENCH_LEASES           leases per latency round (default 200)
#   BENCH_TTL_BASE_MS      ttl of the first of them (default 1000)
#   BENCH_TTL_STEP_MS      ttl step between them (default 17)
#   BENCH_FLOOR_ITERS      plain pg_notify samples per commit mode (default 200)
#   BENCH_LISTENERS        listener connections in part 2 (default 4)
#   BENCH_LISTEN_CHANNELS  channels per listener in part 2 (default 100)
#   BENCH_MASS             leases expiring together (default 50000)
#   BENCH_MASS_EXTRA       long-lived leases besides them (default 50000)
#   BENCH_MASS_SAMPLE      LISTEN on every n-th of them (default 100)
#   BENCH_MASS_LEAD        seconds from fixing T to T (default 15)
#   BENCH_MASS_BATCH       leases per acquiring transaction (default 5000)
#   BENCH_POLL_MS          poll period of part 3 (default 10)
#   BENCH_MASS_TIMEOUT     part 3 gives up this many seconds after T (default 60)
#   BENCH_BARRIER_TIMEOUT  part 2's barrier gives up after this many seconds
#                          (default 60)
#   BENCH_PARTS            which parts to run, e.g. 13 (default 123)
#   BENCH_EVENTS_OFF       1 (default): part 2 also runs with dsync.events = off
#                          (no NOTIFY sent at all), for reference; 0 skips it
#   BENCH_SERVER_CONF      extra postgresql.conf lines, e.g.
#                          'dsync.event_queue_size = 4MB'
#   BENCH_KEEP             1: keep the directory (server log, driver output,
#                          raw latency samples)
#
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/server.sh"
bench_settings LEASES=200 TTL_BASE_MS=1000 TTL_STEP_MS=17 FLOOR_ITERS=200 \
	LISTENERS=4 LISTEN_CHANNELS=100 MASS=50000 MASS_EXTRA=50000 MASS_SAMPLE=100 \
	MASS_LEAD=15 MASS_BATCH=5000 POLL_MS=10 MASS_TIMEOUT=60 BARRIER_TIMEOUT=60 \
	PARTS=123 EVENTS_OFF=1 'SERVER_CONF='
bench_throughput_settings 10 3

CLIENT_COUNTS=(4 16)
NAMES=100000
CLK_TCK=$(getconf CLK_TCK)

# ---------------------------------------------------------------------------
# The throwaway server (test/bench/server.sh)
# ---------------------------------------------------------------------------

# One reaper per database: part 3 creates 2 x BENCH_ROUNDS databases.
# Transactions of BENCH_MASS_BATCH first acquires hold that many locks.
bench_server_start events "$THROUGHPUT_CONF
max_worker_processes = 32
max_locks_per_transaction = 256
$SERVER_CONF"
KEEP_NOTE="driver output: $WORKDIR/*.out"
LISTENER_PID=
stop_listener() {
	if [ -n "$LISTENER_PID" ]; then
		kill -TERM "$LISTENER_PID" 2>/dev/null || true
		wait "$LISTENER_PID" 2>/dev/null || true
		LISTENER_PID=
	fi
}
bench_before_cleanup() {
	stop_listener
}

# wait_reaper DB: wait up to 10 s for DB's reaper; print its pid
wait_reaper() {
	local pid=
	for _ in $(seq 1 100); do
		pid=$(reaper_pid "$1")
		[ -n "$pid" ] && break
		sleep 0.1
	done
	echo "$pid"
}

# cpu_ms PID: utime + stime of a process in ms (NA if unreadable)
cpu_ms() {
	if [ -n "$1" ] && [ -r "/proc/$1/stat" ]; then
		sed 's/^.*) //' "/proc/$1/stat" | awk -v hz="$CLK_TCK" '{ printf "%.0f\n", ($12 + $13) * 1000 / hz }'
	else
		echo NA
	fi
}

# log_mark: the server log's current size, for dropped_since
log_mark() {
	stat -c %s "$SERVER_LOG"
}

# dropped_since MARK: lease events dsync reported as dropped in the server
# log since MARK (the reaper's "dsync dropped N lease events" warnings)
dropped_since() {
	tail -c +$(($1 + 1)) "$SERVER_LOG" |
		sed -nE 's/.*dsync dropped ([0-9]+) lease events.*/\1/p' | awk '{ s += $1 } END { print s + 0 }'
}

# ---------------------------------------------------------------------------
# The driver
# ---------------------------------------------------------------------------

bench_build events
EVENTS=$WORKDIR/build/events

q postgres "CREATE DATABASE bench"
q bench "CREATE EXTENSION dsync"
DSYNC_SCHEMA=$(q bench "SELECT quote_ident(extnamespace::regnamespace::text) FROM pg_extension WHERE extname = 'dsync'")
BENCH_REAPER=$(wait_reaper bench)

bench_header "dsync events benchmark"
echo "  settings: shared_buffers=256MB"
if [ -n "$BENCH_REAPER" ]; then
	echo "  reaper:   pid $BENCH_REAPER ($(q bench "SELECT backend_type FROM pg_stat_activity WHERE pid = $BENCH_REAPER"))"
else
	echo "  reaper:   NONE in pg_stat_activity 10 s after CREATE EXTENSION (events will not come)"
fi
echo "  rounds:   $ROUNDS"

declare -A SUM=()

# ---------------------------------------------------------------------------
# Part 1: expiry-to-NOTIFY latency
# ---------------------------------------------------------------------------

if bench_part 1 "Expiry-to-NOTIFY latency"; then
	echo
	OUT1=$WORKDIR/latency.out
	mark=$(log_mark)
	"$EVENTS" latency -n "$LEASES" -r "$ROUNDS" -b "$TTL_BASE_MS" -s "$TTL_STEP_MS" \
		-f "$FLOOR_ITERS" -o "$WORKDIR/latency.csv" bench >"$OUT1" || {
		echo "the latency driver failed:" >&2
		cat "$OUT1" >&2
		exit 1
	}
	show "$OUT1"
	DROPS1=$(dropped_since "$mark")
	echo "  events dropped by dsync (server log): $DROPS1"
fi

# ---------------------------------------------------------------------------
# Part 2: acquire+release throughput with and without listeners
# ---------------------------------------------------------------------------

RUN_LOG=$WORKDIR/pgbench.out

# bench CLIENTS SECONDS: run pgbench on cycle_dsync.sql; prints
# "tps cycles" (cycles = pgbench's count of script runs).
bench() {
	local clients=$1 secs=$2 out tps cycles
	out=$(PGOPTIONS="-c synchronous_commit=off" \
		"$PGBIN/pgbench" -n -M "$PROTOCOL" -c "$clients" -j 2 -T "$secs" \
		-f "$HERE/cycle_dsync.sql" bench 2>>"$RUN_LOG") || {
		echo "pgbench failed: $clients clients" >&2
		echo "$out" >&2
		tail -n 20 "$RUN_LOG" >&2
		exit 1
	}
	printf '== clients=%s\n%s\n' "$clients" "$out" >>"$RUN_LOG"
	tps=$(pgbench_tps "$clients clients" "$out")
	cycles=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' <<<"$out")
	echo "$tps $cycles"
}

# barrier: wait (up to BENCH_BARRIER_TIMEOUT s) until the reaper has sent
# every event so far; prints the milliseconds that took, or NA.
barrier() {
	local out
	out=$("$EVENTS" sync -n events-barrier -t "$BARRIER_TIMEOUT" bench) || true
	sed -n 's/^@ sync_ms //p' <<<"$out"
}

# start_listener OUTFILE: start the listeners, wait until they LISTEN
start_listener() {
	"$EVENTS" listen -c "$LISTENERS" -k "$LISTEN_CHANNELS" -m "$NAMES" -T 30 bench >"$1" 2>&1 &
	LISTENER_PID=$!
	for _ in $(seq 1 300); do
		grep -q '^ready' "$1" && return 0
		kill -0 "$LISTENER_PID" 2>/dev/null || break
		sleep 0.1
	done
	echo "the listeners did not start:" >&2
	cat "$1" >&2
	exit 1
}

# set_events on|off: dsync.events for the whole server (reloaded)
set_events() {
	if [ "$1" = off ]; then
		q postgres "ALTER SYSTEM SET dsync.events = off" >/dev/null
	else
		q postgres "ALTER SYSTEM RESET dsync.events" >/dev/null
	fi
	q postgres "SELECT pg_reload_conf()" >/dev/null
	sleep 0.5
	[ "$(q bench "SHOW dsync.events")" = "$1" ] || { echo "dsync.events did not become $1" >&2; exit 1; }
}

# fmt_s MS: milliseconds as seconds with two decimals (NA stays NA)
fmt_s() {
	awk -v m="$1" 'BEGIN { if (m == "NA" || m == "") print "NA"; else printf "%.2f", m / 1000 }'
}

# events_run VARIANT CLIENTS COMMIT ROUND: one run of part 2 (none: nobody
# listening; listen: the listeners; off: dsync.events = off), right after
# bench_matrix's checkpoint; its figures go to TPS, DRAIN, DROPS, ... and
# one line is printed.
events_run() {
	local v=$1 clients=$2 round=$4 lout rpid mark c0 c1 c2 tps cycles la lr d drops
	lout=$WORKDIR/listen-$round-$clients.out
	[ "$v" = listen ] && start_listener "$lout"
	[ "$v" = off ] && set_events off
	rpid=$(reaper_pid bench)
	mark=$(log_mark)
	c0=$(cpu_ms "$rpid")
	read -r tps cycles <<<"$(bench "$clients" "$SECONDS_PER_RUN")"
	c1=$(cpu_ms "$rpid")
	[ "$v" = off ] && set_events on
	if [ "$v" = listen ]; then
		stop_listener
		la=$(val "$lout" listen_acquired)
		lr=$(val "$lout" listen_released)
		LDELIV[$clients]="${LDELIV[$clients]:-} $((${la:-0} + ${lr:-0}))"
		# Expected: two events per cycle, on names 1..NAMES
		# drawn uniformly, LISTENERS x LISTEN_CHANNELS of them
		# listened to.
		LEXP[$clients]="${LEXP[$clients]:-} $(awk -v c="$cycles" -v l=$((LISTENERS * LISTEN_CHANNELS)) \
			-v n="$NAMES" 'BEGIN { printf "%.0f", 2 * c * l / n }')"
		LLAG[$clients]="${LLAG[$clients]:-} $(val "$lout" listen_lag_median_ms)"
		LLAGMAX[$clients]="${LLAGMAX[$clients]:-} $(val "$lout" listen_lag_max_ms)"
		LCPU[$clients]="${LCPU[$clients]:-} $(val "$lout" listen_backend_cpu_ms)"
	fi
	d=$(barrier)
	wait_idle bench
	c2=$(cpu_ms "$rpid")
	drops=$(dropped_since "$mark")
	TPS[$v,$clients]="${TPS[$v,$clients]:-} $tps"
	DRAIN[$v,$clients]="${DRAIN[$v,$clients]:-} ${d:-NA}"
	DROPS[$v,$clients]="${DROPS[$v,$clients]:-} $drops"
	DROPPCT[$v,$clients]="${DROPPCT[$v,$clients]:-} $(awk -v d="$drops" -v c="$cycles" 'BEGIN { printf "%.2f", 100 * d / (2 * c) }')"
	if [ "$c0" != NA ] && [ "$c2" != NA ]; then
		RCPU[$v,$clients]="${RCPU[$v,$clients]:-} $((c2 - c0))"
	fi
	printf '  round %s, %2s clients, %-6s: %8.0f cycles/s, events dropped %s of %s, reaper CPU %s ms (+%s ms after), drain %s ms\n' \
		"$round" "$clients" "$v" "$tps" "$drops" "$((2 * cycles))" \
		"$([ "$c1" != NA ] && echo $((c1 - c0)) || echo NA)" \
		"$([ "$c2" != NA ] && [ "$c1" != NA ] && echo $((c2 - c1)) || echo NA)" "${d:-NA}"
	if [ "$v" = listen ]; then
		show "$lout" | grep -v '^ready' | sed 's/^/      /'
		echo "      expected about $(echo "${LEXP[$clients]}" | awk '{ print $NF }') events on the listened names ($((2 * cycles)) x $((LISTENERS * LISTEN_CHANNELS)) / $NAMES)"
	fi
}

if bench_part 2 "Acquire+release throughput with and without LISTENers"; then
	echo
	# One released row per name (server.sh: transactions of 1000 acquires,
	# then one transaction of $NAMES releases).
	mark=$(log_mark)
	t0=$(date +%s.%N)
	prefill_released bench "$NAMES"
	t1=$(date +%s.%N)
	drain=$(barrier)
	DROPS_PREFILL=$(dropped_since "$mark")
	echo "prefill: $NAMES names acquired (100 transactions) and released (1 transaction) in" \
		"$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s; barrier ${drain:-NA} ms after;" \
		"events dropped (server log): $DROPS_PREFILL of $((2 * NAMES))"
	q bench "VACUUM ANALYZE $DSYNC_SCHEMA.dsync_lease" >/dev/null

	if [ "$WARMUP" -gt 0 ]; then
		bench 16 "$WARMUP" >/dev/null
		barrier >/dev/null
		wait_idle bench
	fi

	VARIANTS=(none listen)
	[ "$EVENTS_OFF" = 1 ] && VARIANTS+=(off)
	COMMIT_MODES=(off)
	declare -A TPS=() DRAIN=() RCPU=() LDELIV=() LEXP=() LLAG=() LLAGMAX=() LCPU=() DROPS=() DROPPCT=()
	bench_matrix : events_run

	echo
	echo "cycle_dsync.sql, synchronous_commit=off, ${SECONDS_PER_RUN}s per run, medians of $ROUNDS;"
	echo "listeners: $LISTENERS connections x $LISTEN_CHANNELS channels of the $NAMES names."
	echo
	echo "| clients | variant | cycles/s | / nobody listening | each round | events dropped (% of generated) | reaper CPU s/run | drain after (ms) |"
	echo "| ---: | --- | ---: | ---: | --- | --- | ---: | ---: |"
	for clients in "${CLIENT_COUNTS[@]}"; do
		# shellcheck disable=SC2086
		wo=$(median ${TPS[none,$clients]})
		for v in "${VARIANTS[@]}"; do
			# shellcheck disable=SC2086
			{
				m=$(median ${TPS[$v,$clients]})
				ratio=$(awk -v a="$m" -v b="$wo" 'BEGIN { printf "%.3f", a / b }')
				SUM[tps,$v,$clients]=$m
				SUM[ratio,$v,$clients]=$ratio
				SUM[drops,$v,$clients]="$(echo ${DROPS[$v,$clients]})"
				case $v in
					none) label="nobody listening" ;;
					listen) label="$LISTENERS listeners" ;;
					off) label="dsync.events = off" ;;
				esac
				printf '| %s | %s | %.0f | %s | %s | %s (%s %%) | %s | %s |\n' "$clients" "$label" "$m" "$ratio" \
					"$(printf '%.0f ' ${TPS[$v,$clients]} | sed 's/ $//')" \
					"$(echo ${DROPS[$v,$clients]})" "$(echo ${DROPPCT[$v,$clients]})" \
					"$(fmt_s "$(median ${RCPU[$v,$clients]:-})")" "$(median ${DRAIN[$v,$clients]})"
			}
		done
	done
	echo
	echo "Listeners (medians of $ROUNDS runs):"
	echo
	echo "| clients | events delivered | expected (approx.) | delivered / expected | acquired-event lag median (ms) | max (ms) | listening backends' CPU (s/run) |"
	echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
	for clients in "${CLIENT_COUNTS[@]}"; do
		# shellcheck disable=SC2086
		{
			dl=$(median ${LDELIV[$clients]})
			ex=$(median ${LEXP[$clients]})
			tot_dl=$(echo ${LDELIV[$clients]} | tr ' ' '\n' | awk '{ s += $1 } END { print s }')
			tot_ex=$(echo ${LEXP[$clients]} | tr ' ' '\n' | awk '{ s += $1 } END { print s }')
			SUM[deliv,$clients]=$(awk -v a="$tot_dl" -v b="$tot_ex" 'BEGIN { printf "%.3f", a / b }')
			SUM[lagmax,$clients]=$(median ${LLAGMAX[$clients]})
			printf '| %s | %s | %s | %s (all runs: %s / %s) | %s | %s | %s |\n' "$clients" "$dl" "$ex" \
				"$(awk -v a="$dl" -v b="$ex" 'BEGIN { printf "%.3f", a / b }')" "$tot_dl" "$tot_ex" \
				"$(median ${LLAG[$clients]})" "$(median ${LLAGMAX[$clients]})" "$(fmt_s "$(median ${LCPU[$clients]})")"
		}
	done
	echo
	echo "(events dropped: the reaper's \"dsync dropped N lease events\" warnings logged during the run"
	echo " and until the barrier after it; generated = 2 per cycle.  reaper CPU: utime+stime of the bench"
	echo " database's reaper from the start of the run until after the barrier.  drain: from sending a"
	echo " release after the run to the arrival of its event.  expected: 2 x cycles x listened names /"
	echo " $NAMES, a statistical estimate: events come in pairs, so +-2 x sqrt(2 x expected), about +-7 %"
	echo " for one run here; the exact account of losses is the events dropped.  lag: arrival -"
	echo " (expires_at - 30 s).)"
fi

# ---------------------------------------------------------------------------
# Part 3: many leases expiring together
# ---------------------------------------------------------------------------

if bench_part 3 "$MASS leases expiring together"; then
	declare -A MASSV=()
	for round in $(seq 1 "$ROUNDS"); do
		if [ $((round % 2)) = 1 ]; then order=(plain extra); else order=(extra plain); fi
		for cfg in "${order[@]}"; do
			db=mass_${round}_$cfg
			q postgres "CREATE DATABASE $db"
			q "$db" "CREATE EXTENSION dsync"
			rp=$(wait_reaper "$db")
			[ -n "$rp" ] || echo "  (no reaper in $db after 10 s)"
			x=0
			[ "$cfg" = extra ] && x=$MASS_EXTRA
			out=$WORKDIR/mass-$round-$cfg.out
			echo
			echo "### round $round, $cfg"
			mark=$(log_mark)
			"$EVENTS" mass -n "$MASS" -x "$x" -e "$MASS_SAMPLE" -l "$MASS_LEAD" -b "$MASS_BATCH" \
				-p "$POLL_MS" -t "$MASS_TIMEOUT" "$db" >"$out" || {
				echo "the mass driver failed:" >&2
				cat "$out" >&2
				exit 1
			}
			show "$out"
			drops=$(dropped_since "$mark")
			echo "  events dropped by dsync (server log): $drops"
			MASSV[drops,$cfg]="${MASSV[drops,$cfg]:-} $drops"
			for k in mass_gone_s mass_last_event_s mass_first_event_s mass_events mass_events_expected \
				mass_reaper_cpu_ms mass_insert_s mass_spread_ms mass_dup mass_acquired_events \
				mass_rows_left mass_reap_after mass_long_held mass_poll_median_ms; do
				MASSV[$k,$cfg]="${MASSV[$k,$cfg]:-} $(val "$out" $k)"
			done
		done
	done
	echo
	echo "Medians of $ROUNDS round(s), seconds after T_max = the latest expires_at:"
	echo
	echo "| table holds | all rows reaped (s) | first sampled event (s) | last sampled event (s) | sampled expired events (each round) | reaper CPU (ms) | insert (s) | expires_at spread (ms) | each round: reaped / last event (s) |"
	echo "| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | --- |"
	for cfg in plain extra; do
		# shellcheck disable=SC2086
		{
			label="$MASS expiring"
			[ "$cfg" = extra ] && label="$MASS expiring + $MASS_EXTRA long-lived"
			SUM[gone,$cfg]=$(median ${MASSV[mass_gone_s,$cfg]})
			SUM[last,$cfg]=$(median ${MASSV[mass_last_event_s,$cfg]})
			SUM[events,$cfg]="$(echo ${MASSV[mass_events,$cfg]} | tr ' ' '+') of $(echo ${MASSV[mass_events_expected,$cfg]} | tr ' ' '+')"
			SUM[cpu,$cfg]=$(median ${MASSV[mass_reaper_cpu_ms,$cfg]})
			rounds_txt=""
			read -ra g <<<"${MASSV[mass_gone_s,$cfg]}"
			read -ra l <<<"${MASSV[mass_last_event_s,$cfg]}"
			for i in "${!g[@]}"; do rounds_txt+="${g[$i]} / ${l[$i]:-NA}; "; done
			printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$label" \
				"${SUM[gone,$cfg]}" "$(median ${MASSV[mass_first_event_s,$cfg]})" "${SUM[last,$cfg]}" \
				"${SUM[events,$cfg]}" "${SUM[cpu,$cfg]}" "$(median ${MASSV[mass_insert_s,$cfg]})" \
				"$(median ${MASSV[mass_spread_ms,$cfg]})" "${rounds_txt%; }"
		}
	done
	echo
	echo "checks: rows left per round (plain: ${MASSV[mass_rows_left,plain]# }; with long-lived: ${MASSV[mass_rows_left,extra]# });" \
		"dsync_reap() afterwards cleared (plain: ${MASSV[mass_reap_after,plain]# }; with: ${MASSV[mass_reap_after,extra]# });" \
		"long-lived leases still held: ${MASSV[mass_long_held,extra]# } of $MASS_EXTRA;" \
		"duplicates: ${MASSV[mass_dup,plain]# } / ${MASSV[mass_dup,extra]# };" \
		"sampled acquired events: ${MASSV[mass_acquired_events,plain]# } / ${MASSV[mass_acquired_events,extra]# } of $((MASS / MASS_SAMPLE)) each;" \
		"median poll query: ${MASSV[mass_poll_median_ms,plain]# } / ${MASSV[mass_poll_median_ms,extra]# } ms;" \
		"events dropped (server log): ${MASSV[drops,plain]# } / ${MASSV[drops,extra]# }"
fi

# ---------------------------------------------------------------------------
# Summary
# ---------------------------------------------------------------------------

# verdict VALUE OP LIMIT: met / MISSED (NA if no value)
verdict() {
	awk -v v="$1" -v op="$2" -v t="$3" 'BEGIN {
		if (v == "NA" || v == "") { print "NO DATA"; exit }
		ok = (op == "<=") ? v + 0 <= t + 0 : (op == ">=") ? v + 0 >= t + 0 : v + 0 < t + 0;
		print ok ? "met" : "MISSED"
	}'
}

echo
echo "## Summary"
echo
echo "| measurement | figure | target | result |"
echo "| --- | ---: | --- | --- |"
if [[ $PARTS == *1* ]]; then
	m=$(val "$OUT1" expiry_median_ms)
	mx=$(val "$OUT1" expiry_max_ms)
	n=$(val "$OUT1" expiry_n)
	exp=$(val "$OUT1" expiry_expected)
	over=$(val "$OUT1" expiry_over50)
	echo "| expiry-to-NOTIFY latency, median ($n of $exp events) | $m ms | <= 10 ms | $(verdict "$m" '<=' 10) |"
	echo "| expiry-to-NOTIFY latency, p99 | $(val "$OUT1" expiry_p99_ms) ms | | |"
	echo "| expiry-to-NOTIFY latency, max | $mx ms | <= 50 ms | $(verdict "$mx" '<=' 50) |"
	echo "| expired events later than 50 ms / missing / duplicate / before expires_at | $over / $(val "$OUT1" expiry_missing) / $(val "$OUT1" expiry_dup) / $(val "$OUT1" expiry_early) | 0 / 0 / 0 / 0 | $([ "$over/$(val "$OUT1" expiry_missing)/$(val "$OUT1" expiry_dup)/$(val "$OUT1" expiry_early)" = 0/0/0/0 ] && echo met || echo MISSED) |"
	echo "| payload anomalies (unparsable, fields differ, format, channel) | $(val "$OUT1" payload_bad) | 0 | $([ "$(val "$OUT1" payload_bad)" = 0 ] && echo met || echo MISSED) |"
	echo "| acquired events received, lag from acquire (median / max) | $(val "$OUT1" acquired_events) of $exp, $(val "$OUT1" acqlag_median_ms) / $(val "$OUT1" acqlag_max_ms) ms | | |"
	echo "| floor: plain pg_notify delivery, median (sync commit on / off) | $(val "$OUT1" floor_on_median_ms) / $(val "$OUT1" floor_off_median_ms) ms | | |"
	echo "| part 1: events dropped by dsync (server log) | $DROPS1 | 0 | $([ "$DROPS1" = 0 ] && echo met || echo MISSED) |"
fi
if [[ $PARTS == *2* ]]; then
	for clients in "${CLIENT_COUNTS[@]}"; do
		echo "| cycles/s with $LISTENERS listeners / nobody listening, $clients clients | $(printf '%.0f / %.0f' "${SUM[tps,listen,$clients]}" "${SUM[tps,none,$clients]}") = ${SUM[ratio,listen,$clients]} | >= 0.80 | $(verdict "${SUM[ratio,listen,$clients]}" '>=' 0.80) |"
	done
	if [ "$EVENTS_OFF" = 1 ]; then
		for clients in "${CLIENT_COUNTS[@]}"; do
			echo "| reference: cycles/s nobody listening / dsync.events = off, $clients clients | $(printf '%.0f / %.0f' "${SUM[tps,none,$clients]}" "${SUM[tps,off,$clients]}") = $(awk -v a="${SUM[tps,none,$clients]}" -v b="${SUM[tps,off,$clients]}" 'BEGIN { printf "%.3f", a / b }') | | |"
		done
	fi
	echo "| prefill: events dropped (100,000 releases in one transaction) | $DROPS_PREFILL of $((2 * NAMES)) | | |"
	for clients in "${CLIENT_COUNTS[@]}"; do
		echo "| pgbench runs, $clients clients: events dropped per run, nobody listening / listeners | ${SUM[drops,none,$clients]} / ${SUM[drops,listen,$clients]} | 0 | $([ "$(echo "${SUM[drops,none,$clients]} ${SUM[drops,listen,$clients]}" | tr -d ' 0')" = "" ] && echo met || echo MISSED) |"
		echo "| listeners, $clients clients: events delivered / expected (all runs); acquired-event lag max (median of runs) | ${SUM[deliv,$clients]}; ${SUM[lagmax,$clients]} ms | about 1 | |"
	done
fi
if [[ $PARTS == *3* ]]; then
	for cfg in plain extra; do
		label="$MASS expiring together"
		[ "$cfg" = extra ] && label="$MASS expiring, $MASS_EXTRA long-lived besides"
		echo "| $label: all reaped after | ${SUM[gone,$cfg]} s | < 5 s | $(verdict "${SUM[gone,$cfg]}" '<' 5) |"
		echo "| $label: last sampled expired event after (${SUM[events,$cfg]}) | ${SUM[last,$cfg]} s | < 5 s | $(verdict "${SUM[last,$cfg]}" '<' 5) |"
	done
	r=$(awk -v a="${SUM[gone,extra]}" -v b="${SUM[gone,plain]}" 'BEGIN { if (a == "NA" || b == "NA" || b <= 0) print "NA"; else printf "%.2f", a / b }')
	rc=$(awk -v a="${SUM[cpu,extra]}" -v b="${SUM[cpu,plain]}" 'BEGIN { if (a == "NA" || b == "NA" || b <= 0) print "NA"; else printf "%.2f", a / b }')
	echo "| reap time with / without $MASS_EXTRA long-lived (reaper CPU ratio) | $r ($rc) | about 1 (O(expired)) | |"
	echo "| part 3: events dropped per run, plain / with long-lived (server log) | ${MASSV[drops,plain]# } / ${MASSV[drops,extra]# } | 0 | $([ "$(echo "${MASSV[drops,plain]} ${MASSV[drops,extra]}" | tr -d ' 0')" = "" ] && echo met || echo MISSED) |"
fi

if grep -Eq 'PANIC|FATAL|TRAP|terminated by signal|WARNING' "$SERVER_LOG"; then
	echo
	echo "server log has errors or warnings:"
	grep -E 'PANIC|FATAL|TRAP|terminated by signal|WARNING' "$SERVER_LOG" |
		sed -E 's/^[0-9-]+ [0-9:.]+ [A-Z]+ \[[0-9]+\] //; s/(PID|database) [0-9]+/\1 N/g' |
		sort | uniq -c | sort -rn | head -n 20
fi
