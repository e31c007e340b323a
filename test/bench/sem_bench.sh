#!/usr/bin/env bash
#
# sem_bench.sh: dsync semaphores and one-to-one events: how fast a blocked
# waiter wakes, and how many acquire+release cycles a contended semaphore
# sustains, against baselines measured in the same run (NOTES.md section 8).
#
# Run as root, after `make install`, from the top of the source tree:
#
#     bash test/bench/sem_bench.sh
#
# It starts one throwaway PostgreSQL 15 server of its own (test/bench/
# server.sh: initdb into a mktemp directory owned by postgres, Unix socket
# only, dsync preloaded), builds the libpq driver sem_handoff.c into that
# directory, runs the two parts below and stops and removes everything on
# exit.  Timings are printed, never asserted.  About 4 minutes at the
# defaults.
#
# 1. Wake-up latency (sem_handoff.c; see its header for the details).
#    Interleaved, BENCH_HANDOFFS iterations each, every latency the
#    difference of two clock_timestamp() values inside the server:
#      - semaphore permit hand-off: a 2-permit semaphore held by A and B,
#        C blocked in dsync_acquire(..., wait => '30 s'); A releases in
#        autocommit; latency = C's timestamp right after its acquire
#        returned - A's timestamp right after its release (so before A's
#        commit, which is included).  Releaser with synchronous_commit off,
#        and again with on;
#      - event set-to-wake: a waiter blocked in dsync_event_wait(E, '30 s'),
#        a setter calls dsync_event_set(E) in autocommit; same timestamps;
#      - for reference, the same hand-off on a one-permit lease;
#      - the baseline: blocking pg_advisory_lock hand-off, from a timestamp
#        taken just before pg_advisory_unlock (which takes effect at once,
#        with no commit) to the waiter's; handoff.c's way, from a timestamp
#        after the unlock, is printed too, but it is often zero or negative
#        here (the woken waiter runs first), so no ratio is taken to it.
#    Markdown table: median, p99, ratios to the advisory baseline.
#    Target: semaphore and event medians under 2 ms (sync_commit off).
#
# 2. Throughput of a contended semaphore: pgbench, BENCH_CLIENTS (16)
#    clients, -M prepared -j 2, synchronous_commit off, BENCH_SECONDS per
#    run.  Each pgbench transaction is one cycle of two autocommit
#    statements on ONE name, holder 'c' || :client_id:
#        SELECT dsync_acquire(name, holder, '30 seconds', '5 seconds')
#        SELECT dsync_release(name, holder)
#    (the acquire blocks in the server when no permit is free):
#      - sem:    name is a 4-permit semaphore (BENCH_PERMITS);
#      - lease1: name is a plain lease (1 permit), for reference;
#      - advisory4: the baseline of sem: blocking pg_advisory_lock(k) +
#                pg_advisory_unlock(k), k = 5000 + client_id % 4 (four
#                keys, four clients on each: at most four holders, though
#                a client cannot take another key's free slot);
#      - advisory1: the baseline of lease1: the same on one key;
#      - cycle:  cycle_dsync.sql, random names 1..100000 (no contention),
#                the plain lease_bench.sh cycle, for reference (dsync_lease
#                prefilled with one released row per name, as there).
#    All scripts but cycle_dsync.sql are generated into the work directory.
#    The two contended dsync scripts check each result client-side
#    (pgbench \gset / \if): an acquire that
#    returns NULL (no permit within 5 s) skips the release, and it and any
#    release that returns false insert a row into a table "miss", counted
#    after each run; nothing is inserted when all goes well.  While each
#    contended run goes on, one session samples, every 10 ms, how many
#    holders dsync_leases shows for the name (it must never exceed the
#    permits).  pgbench's per-transaction log gives each client's number of
#    cycles (fairness: min and max over clients) and the cycle latencies.
#      - sem_snap: sem again, while one more session sits in an open
#                REPEATABLE READ transaction that has taken its snapshot
#                (as any long report or idle-in-transaction session does),
#                to show what that does to the hot rows of a contended name
#                (BENCH_SNAPSHOT=0 skips it; the table is vacuumed after it).
#    Variants alternate, their order rotating; BENCH_ROUNDS rounds, median
#    cycles/s reported, with every round's figure, and ratios to the
#    blocking advisory baseline and to cycle_dsync.sql.
#
# Settings (environment):
#   BENCH_HANDOFFS   measured iterations of part 1 (default 200)
#   BENCH_WARMUP_ITERS unmeasured iterations first (default 10)
#   BENCH_ROUNDS     rounds of part 2; the median is reported (default 3)
#   BENCH_SECONDS    seconds per measured pgbench run (default 10)
#   BENCH_WARMUP     seconds of unmeasured pgbench warm-up per variant
#                    (default 3)
#   BENCH_CLIENTS    pgbench clients (default 16)
#   BENCH_PERMITS    permits of the semaphore of part 2 (default 4)
#   BENCH_PROTOCOL   pgbench query mode (default prepared)
#   BENCH_PREFILL    1 (default): prefill dsync_lease for cycle_dsync.sql
#   BENCH_PARTS      which parts to run, e.g. 2 (default 12)
#   BENCH_KEEP       1: keep the directory (server log, pgbench output and
#                    logs, raw latency samples)
#
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/server.sh"
bench_settings HANDOFFS=200 WARMUP_ITERS=10 CLIENTS=16 PERMITS=4 PARTS=12
bench_throughput_settings 10 3

NAMES=100000
SEM_NAME=bench-sem$PERMITS
LEASE_NAME=bench-lease1
VARIANTS=(sem lease1 advisory4 advisory1 cycle)
[ "${BENCH_SNAPSHOT:-1}" = 1 ] && VARIANTS+=(sem_snap)

# ---------------------------------------------------------------------------
# The throwaway server (test/bench/server.sh)
# ---------------------------------------------------------------------------

bench_server_start sem "$THROUGHPUT_CONF
log_line_prefix = '%m [%p] %a: '"
# shellcheck disable=SC2034
KEEP_NOTE="pgbench output: $WORKDIR/pgbench.out, raw samples: $WORKDIR/samples.csv"
# server_log_errors: ERROR/FATAL/PANIC lines of the server log, but for the
# cancels this script causes itself (it stops the sampler and the
# snapshot-holding session of part 2 that way)
server_log_errors() {
	grep -E 'ERROR|FATAL|PANIC|TRAP|terminated by signal' "$SERVER_LOG" |
		grep -vE '\] sem_bench (sampler|snapshot): ERROR:  canceling statement due to user request$' || true
}

# ---------------------------------------------------------------------------
# Build the driver, create the database
# ---------------------------------------------------------------------------

bench_build sem_handoff

q postgres "CREATE DATABASE bench"
q bench "CREATE EXTENSION dsync"
q bench "CREATE TABLE miss (name text, what text, client int, at timestamptz DEFAULT clock_timestamp())"
DSYNC_SCHEMA=$(q bench "SELECT quote_ident(extnamespace::regnamespace::text) FROM pg_extension WHERE extname = 'dsync'")
DSYNC_TABLE="$DSYNC_SCHEMA.dsync_lease"

bench_header "dsync semaphore and event benchmark"
echo "  settings: shared_buffers=256MB"

# ---------------------------------------------------------------------------
# Part 1: wake-up latency
# ---------------------------------------------------------------------------

if bench_part 1 "Wake-up latency (server clock)"; then
	echo
	bench_driver sem_handoff -n "$HANDOFFS" -w "$WARMUP_ITERS" -r "$WORKDIR/samples.csv" bench
fi

# ---------------------------------------------------------------------------
# Part 2: throughput of a contended semaphore
# ---------------------------------------------------------------------------

if [[ $PARTS == *2* ]]; then
	RUN_LOG=$WORKDIR/pgbench.out
	PGB_LOGS=$WORKDIR/pgbench-logs
	mkdir "$PGB_LOGS"
	chmod 777 "$PGB_LOGS"

	# contended_script NAME FILE: one acquire+release cycle on NAME, checked.
	contended_script() {
		cat >"$2" <<SQL
-- One acquire+release cycle on '$1' (generated by sem_bench.sh).  Two
-- autocommit statements; pgbench counts one run of this file as one
-- transaction, so its tps is cycles/s.  Results are checked client-side;
-- only a failure writes (a row into "miss").
SELECT dsync_acquire('$1', 'c' || :client_id, '30 seconds', '5 seconds') AS token \gset
\if :token IS NULL
INSERT INTO miss (name, what, client) VALUES ('$1', 'acquire returned NULL', :client_id);
\else
SELECT dsync_release('$1', 'c' || :client_id)::int AS released \gset
\if :released = 0
INSERT INTO miss (name, what, client) VALUES ('$1', 'release returned false', :client_id);
\endif
\endif
SQL
	}
	contended_script "$SEM_NAME" "$WORKDIR/cycle_sem.sql"
	contended_script "$LEASE_NAME" "$WORKDIR/cycle_lease1.sql"
	cp "$WORKDIR/cycle_sem.sql" "$WORKDIR/cycle_sem_snap.sql"
	cp "$HERE/cycle_dsync.sql" "$WORKDIR/cycle_cycle.sql"
	cat >"$WORKDIR/cycle_advisory1.sql" <<'SQL'
-- Baseline (generated by sem_bench.sh): blocking pg_advisory_lock on one
-- key shared by all clients; two autocommit statements per cycle.
SELECT pg_advisory_lock(4244);
SELECT pg_advisory_unlock(4244);
SQL
	cat >"$WORKDIR/cycle_advisory4.sql" <<'SQL'
-- Baseline (generated by sem_bench.sh): four keys, each shared by a
-- quarter of the clients, blocking pg_advisory_lock: at most four holders,
-- like a 4-permit semaphore (though each client can only use its own key's
-- slot).  Two autocommit statements per cycle.
\set k 5000 + :client_id % 4
SELECT pg_advisory_lock(:k);
SELECT pg_advisory_unlock(:k);
SQL
	declare -A VNAME=([sem]=$SEM_NAME [lease1]=$LEASE_NAME [advisory4]="" [advisory1]="" [cycle]=""
		[sem_snap]=$SEM_NAME)
	declare -A VPERMITS=([sem]=$PERMITS [lease1]=1 [advisory4]="4 keys" [advisory1]=1 [cycle]="1 each"
		[sem_snap]=$PERMITS)
	# the blocking advisory baseline of each contended dsync variant
	declare -A VBASE=([sem]=advisory4 [lease1]=advisory1 [sem_snap]=advisory4)
	declare -A VLABEL=(
		[sem]="dsync semaphore, $PERMITS permits, one name"
		[lease1]="dsync lease (1 permit), one name"
		[advisory4]="pg_advisory_lock, 4 keys (client_id % 4), blocking"
		[advisory1]="pg_advisory_lock, one key, blocking"
		[cycle]="dsync cycle_dsync.sql, random names 1..$NAMES (no contention)"
		[sem_snap]="dsync semaphore, $PERMITS permits, one name, while another session holds a snapshot"
	)

	created=$(q bench "SELECT dsync_semaphore_create('$SEM_NAME', $PERMITS)")
	[ "$created" = t ] || { echo "dsync_semaphore_create returned $created" >&2; exit 1; }

	if [ "$PREFILL" = 1 ]; then
		# One released row per name of cycle_dsync.sql.
		prefill_released bench "$NAMES"
	fi
	q bench "VACUUM ANALYZE $DSYNC_TABLE" >/dev/null

	# sampler NAME SECONDS OUTFILE: the number of holders of NAME in
	# dsync_leases, every 10 ms for SECONDS (psql \watch, so each sample is
	# a transaction of its own: a sampler holding one long transaction, and
	# with it a snapshot, would itself slow dsync down: see sem_snap).
	sampler() {
		printf "SELECT count(*) FROM dsync_leases WHERE lease = '%s'\n\\watch 0.01\n" "$1" |
			PGAPPNAME="sem_bench sampler" timeout -s INT "$2" "$PGBIN/psql" -X -q -At -d bench >"$3" 2>&1 || true
	}

	# bench VARIANT SECONDS TAG: run pgbench; prints "tps misses maxheld
	# samples minclient maxclient p99ms maxms"; logs under TAG.
	bench() {
		local v=$1 secs=$2 tag=$3 out tps misses sampler_pid="" samp=NA nsamp=0 stats logs cs0 cs1 ncycles
		q bench "TRUNCATE miss"
		if [ -n "${VNAME[$v]}" ]; then
			sampler "${VNAME[$v]}" "$secs" "$WORKDIR/sampler.out" &
			sampler_pid=$!
		fi
		rm -f "$PGB_LOGS"/"$tag".*
		[ "$v" = sem_snap ] && snapshot_hold "sem_bench snapshot" $((secs + 5))
		cs0=$(awk '$1 == "ctxt" { print $2 }' /proc/stat)
		out=$(cd "$PGB_LOGS" && PGOPTIONS="-c synchronous_commit=off" \
			"$PGBIN/pgbench" -n -M "$PROTOCOL" -c "$CLIENTS" -j 2 -T "$secs" \
			-l --log-prefix="$tag" -f "$WORKDIR/cycle_$v.sql" bench 2>>"$RUN_LOG") || {
			echo "pgbench failed: $v, $CLIENTS clients" >&2
			echo "$out" >&2
			tail -n 20 "$RUN_LOG" >&2
			exit 1
		}
		cs1=$(awk '$1 == "ctxt" { print $2 }' /proc/stat)
		if [ "$v" = sem_snap ]; then
			snapshot_release "sem_bench snapshot"
			q bench "VACUUM $DSYNC_TABLE"
		fi
		printf '== %s %s\n%s\n' "$v" "$tag" "$out" >>"$RUN_LOG"
		if [ -n "$sampler_pid" ]; then
			wait "$sampler_pid" || true
			nsamp=$(grep -cE '^[0-9]+$' "$WORKDIR/sampler.out" || true)
			samp=$(grep -E '^[0-9]+$' "$WORKDIR/sampler.out" | sort -n | tail -n 1)
			samp=${samp:-NA}
		fi
		tps=$(pgbench_tps "$v" "$out")
		ncycles=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' <<<"$out")
		misses=$(q bench "SELECT count(*) FILTER (WHERE what LIKE 'acquire%') || ' ' || count(*) FILTER (WHERE what LIKE 'release%') FROM miss")
		# Per-transaction logs: client_id transaction_no time_us script_no epoch us
		logs=("$PGB_LOGS"/"$tag".*)
		stats=$(cat "${logs[@]}" | awk -v clients="$CLIENTS" '
			{ n[$1]++ }
			END {
				min = -1; max = 0;
				for (c = 0; c < clients; c++) {
					k = (c in n) ? n[c] : 0;
					if (min < 0 || k < min) min = k;
					if (k > max) max = k;
				}
				printf "%d %d", min, max;
			}')
		stats+=" $(cat "${logs[@]}" | awk '{ print $3 }' | sort -n | awk '{ v[NR] = $1 }
			END {
				i = int(0.99 * NR + 0.999999); if (i < 1) i = 1;
				printf "%.3f %.3f", NR ? v[i] / 1000 : 0, NR ? v[NR] / 1000 : 0;
			}')"
		wait_idle bench
		echo "$tps $misses $samp $nsamp $stats $(awk -v d=$((cs1 - cs0)) -v n="$ncycles" 'BEGIN { printf "%.1f", (n > 0 ? d / n : 0) }')"
	}

	echo
	echo "## 2. Acquire+release throughput, $CLIENTS clients (pgbench -M $PROTOCOL -j 2, synchronous_commit=off)"
	echo
	echo "  ${SECONDS_PER_RUN}s per run, ${WARMUP}s warm-up per variant, $ROUNDS round(s), median reported"

	if [ "$WARMUP" -gt 0 ]; then
		for v in "${VARIANTS[@]}"; do
			[ "$v" = sem_snap ] && continue
			res=$(bench "$v" "$WARMUP" "warmup-$v")
			read -r _ wm_null wm_false _ <<<"$res"
			if [ "$wm_null" != 0 ] || [ "$wm_false" != 0 ]; then
				echo "  warm-up $v: $wm_null NULL acquires, $wm_false false releases"
			fi
		done
	fi

	declare -A TPS=() NULLS=() FALSES=() MAXHELD=() NSAMP=() CMIN=() CMAX=() P99=() LMAX=() CSW=()
	rotation=0
	for round in $(seq 1 "$ROUNDS"); do
		mapfile -t order < <(rotated "$rotation" "${VARIANTS[@]}")
		rotation=$((rotation + 1))
		for v in "${order[@]}"; do
			q bench "CHECKPOINT"
			res=$(bench "$v" "$SECONDS_PER_RUN" "r$round-$v")
			read -r tps nnull nfalse mh ns cmin cmax p99 lmax csw <<<"$res"
			TPS[$v]="${TPS[$v]:-} $tps"
			NULLS[$v]=$((${NULLS[$v]:-0} + nnull))
			FALSES[$v]=$((${FALSES[$v]:-0} + nfalse))
			if [ "$mh" != NA ] && { [ -z "${MAXHELD[$v]:-}" ] || [ "$mh" -gt "${MAXHELD[$v]}" ]; }; then
				MAXHELD[$v]=$mh
			fi
			NSAMP[$v]=$((${NSAMP[$v]:-0} + ns))
			CMIN[$v]="${CMIN[$v]:-} $cmin"
			CMAX[$v]="${CMAX[$v]:-} $cmax"
			P99[$v]="${P99[$v]:-} $p99"
			LMAX[$v]="${LMAX[$v]:-} $lmax"
			CSW[$v]="${CSW[$v]:-} $csw"
		done
	done

	# shellcheck disable=SC2086
	ref=$(median ${TPS[cycle]})
	echo
	echo "| what | permits | cycles/s (median) | each round | vs blocking advisory | vs cycle_dsync | NULL acquires | false releases | max holders seen (samples) | cycles per client, min-max (each round) | cycle latency p99 / max ms (median of rounds) | context switches per cycle, system-wide (median) |"
	echo "| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |"
	for v in "${VARIANTS[@]}"; do
		# shellcheck disable=SC2086
		med=$(median ${TPS[$v]})
		# shellcheck disable=SC2086
		each=$(printf '%.0f ' ${TPS[$v]})
		fair=
		read -ra mins <<<"${CMIN[$v]}"
		read -ra maxs <<<"${CMAX[$v]}"
		for i in "${!mins[@]}"; do
			fair+="${mins[$i]}-${maxs[$i]} "
		done
		if [ -n "${VNAME[$v]}" ]; then
			held="${MAXHELD[$v]:-NA} (${NSAMP[$v]})"
			nulls=${NULLS[$v]} falses=${FALSES[$v]}
		else
			held="n/a" nulls="n/a" falses="n/a"
		fi
		if [ -n "${VBASE[$v]:-}" ]; then
			# shellcheck disable=SC2086
			vsadv=$(awk -v a="$med" -v b="$(median ${TPS[${VBASE[$v]}]})" -v n="${VBASE[$v]}" \
				'BEGIN { printf "%.2f (%s)", (b > 0 ? a / b : 0), n }')
		else
			vsadv=
		fi
		# shellcheck disable=SC2086
		printf '| %s | %s | %.0f | %s | %s | %.2f | %s | %s | %s | %s | %.1f / %.1f | %.0f |\n' \
			"${VLABEL[$v]}" "${VPERMITS[$v]}" "$med" "${each% }" "$vsadv" \
			"$(awk -v a="$med" -v b="$ref" 'BEGIN { print (b > 0 ? a / b : 0) }')" \
			"$nulls" "$falses" "$held" "${fair% }" "$(median ${P99[$v]})" "$(median ${LMAX[$v]})" \
			"$(median ${CSW[$v]})"
	done
	echo
	echo "  (NULL acquires / false releases: summed over the measured rounds; a NULL acquire"
	echo "   means no permit within 5 s.  Max holders: the most rows dsync_leases showed for"
	echo "   the name in any 10 ms sample; must not exceed the permits.)"
	# shellcheck disable=SC2086
	sem_med=$(median ${TPS[sem]})
	# shellcheck disable=SC2086
	l1_med=$(median ${TPS[lease1]})
	echo "  $PERMITS-permit semaphore / 1-permit lease: $(awk -v a="$sem_med" -v b="$l1_med" 'BEGIN { printf "%.2fx", (b > 0 ? a / b : 0) }')"
fi

# ---------------------------------------------------------------------------
# Checks
# ---------------------------------------------------------------------------

echo
errors=$(server_log_errors)
if [ -n "$errors" ]; then
	echo "server log has errors ($(wc -l <<<"$errors") lines; first 20):"
	head -n 20 <<<"$errors"
else
	echo "server log: no ERROR, FATAL or PANIC lines"
fi
