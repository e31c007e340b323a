# Sourced by the benchmark scripts: what every one of them does around its
# measurements, written once.
#
#   bench_server_start TAG 'extra postgresql.conf lines'
#
# starts a throwaway PostgreSQL server of the script's own, owned by
# postgres, listening only on a Unix socket in its own directory, with
# dsync preloaded; it is stopped and removed on exit.  It sets WORKDIR,
# PGDATA_DIR, SERVER_LOG, PORT, DSYNC_SO and DSYNC_SO_STAMP and points
# PGHOST/PGPORT/PGUSER at the server.  The caller may set KEEP=1 (plus an
# optional KEEP_NOTE) to keep the directory, and may define
# bench_before_cleanup to stop its own background work first.
#
# bench_pgbench_start does the same and also sets RUN_LOG, where the
# pgbench runs' output goes.
#
# The helpers below (q, val, show, median, wait_idle, reaper_pid,
# bench_build, bench_driver, bench_header, bench_throughput_header,
# bench_matrix) are what the scripts shared by copy before.

PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
PG_CONFIG=${PG_CONFIG:-pg_config}
BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

if [ "$(id -u)" -ne 0 ]; then
	echo "run this as root (the server itself runs as postgres)" >&2
	exit 1
fi

# bench_settings NAME=DEFAULT...: each NAME from the environment's
# BENCH_NAME, or DEFAULT.
bench_settings() {
	local kv name env
	for kv in "$@"; do
		name=${kv%%=*}
		env=BENCH_$name
		printf -v "$name" '%s' "${!env:-${kv#*=}}"
	done
}

# The directory is kept with BENCH_KEEP=1 (lease_bench.sh: BENCH_KEEP_LOG).
KEEP=${BENCH_KEEP:-${BENCH_KEEP_LOG:-0}}

# bench_throughput_settings SECONDS ROUNDS: the settings of the pgbench
# runs, from BENCH_SECONDS (default SECONDS per run), BENCH_ROUNDS (default
# ROUNDS), BENCH_WARMUP (3 s per variant), BENCH_PROTOCOL (prepared) and
# BENCH_PREFILL (1: prefill dsync_lease with released rows).
bench_throughput_settings() {
	SECONDS_PER_RUN=${BENCH_SECONDS:-$1}
	ROUNDS=${BENCH_ROUNDS:-$2}
	WARMUP=${BENCH_WARMUP:-3}
	PROTOCOL=${BENCH_PROTOCOL:-prepared}
	PREFILL=${BENCH_PREFILL:-1}
}

# Settings for throughput runs: room for pgbench's clients, and no
# checkpoint inside a run (each run starts right after one).
THROUGHPUT_CONF="max_connections = 40
shared_buffers = 256MB
wal_buffers = 16MB
max_wal_size = 8GB
min_wal_size = 1GB
checkpoint_timeout = 30min
log_checkpoints = off"

# A re-install of dsync.so under the running server ("make install" writes
# it in place) alone can crash it; say so whenever it happened.
bench_so_note() {
	[ -n "${DSYNC_SO:-}" ] || return 0
	if [ "$(stat -c '%y' "$DSYNC_SO")" != "$DSYNC_SO_STAMP" ]; then
		echo
		echo "note: $DSYNC_SO was re-installed during this run (now $(stat -c '%y' "$DSYNC_SO"));"
		echo "      the figures are for the library the server loaded at start ($DSYNC_SO_STAMP),"
		echo "      and a crash after the re-install may be due to it."
	fi
}

bench_server_cleanup() {
	if declare -F bench_before_cleanup >/dev/null; then
		bench_before_cleanup
	fi
	bench_so_note
	if [ -f "$PGDATA_DIR/postmaster.pid" ]; then
		runuser -u postgres -- "$PGBIN/pg_ctl" -D "$PGDATA_DIR" -m fast -w stop >/dev/null 2>&1 ||
			runuser -u postgres -- "$PGBIN/pg_ctl" -D "$PGDATA_DIR" -m immediate -w stop >/dev/null 2>&1 || true
	fi
	if [ "${KEEP:-0}" = 1 ]; then
		echo "kept $WORKDIR (server log: $SERVER_LOG${KEEP_NOTE:+, $KEEP_NOTE})"
	else
		rm -rf "$WORKDIR"
	fi
}

bench_server_start() {
	local tag=$1 extra_conf=$2 p

	WORKDIR=$(mktemp -d "/tmp/dsync-$tag.XXXXXX")
	chown postgres: "$WORKDIR"
	chmod 700 "$WORKDIR"
	PGDATA_DIR=$WORKDIR/data
	SERVER_LOG=$WORKDIR/server.log
	trap bench_server_cleanup EXIT
	trap 'exit 130' INT TERM

	# A TCP port nobody listens on (the server listens on no TCP address;
	# the port only names the socket file in our own directory).
	PORT=
	for _ in $(seq 1 200); do
		p=$((20000 + RANDOM % 40000))
		if [ -z "$(ss -Hltn "sport = :$p" 2>/dev/null)" ]; then
			PORT=$p
			break
		fi
	done
	[ -n "$PORT" ] || { echo "no free port found" >&2; exit 1; }

	runuser -u postgres -- "$PGBIN/initdb" -D "$PGDATA_DIR" -U postgres -A trust \
		-E UTF8 --locale=C --no-sync >/dev/null
	cat >>"$PGDATA_DIR/postgresql.conf" <<CONF

# $tag benchmark
listen_addresses = ''
unix_socket_directories = '$WORKDIR'
port = $PORT
shared_preload_libraries = 'dsync'
log_min_messages = warning
$extra_conf
CONF
	if ! runuser -u postgres -- "$PGBIN/pg_ctl" -D "$PGDATA_DIR" -l "$SERVER_LOG" -w start >/dev/null; then
		echo "server did not start:" >&2
		cat "$SERVER_LOG" >&2
		exit 1
	fi
	DSYNC_SO="$("$PG_CONFIG" --pkglibdir)/dsync.so"
	DSYNC_SO_STAMP=$(stat -c '%y' "$DSYNC_SO")
	export PGHOST=$WORKDIR PGPORT=$PORT PGUSER=postgres
	unset PGOPTIONS PGDATABASE PGSERVICE
}

# bench_pgbench_start TAG 'extra postgresql.conf lines': bench_server_start
# for a script that runs pgbench; their output goes to RUN_LOG
# ($WORKDIR/pgbench.log), which a kept directory names.
bench_pgbench_start() {
	bench_server_start "$@"
	RUN_LOG=$WORKDIR/pgbench.log
	KEEP_NOTE="pgbench output: $RUN_LOG"
}

# q DB SQL: run SQL, print the unaligned result (one value per line).
q() {
	"$PGBIN/psql" -X -q -At -v ON_ERROR_STOP=1 -d "$1" -c "$2"
}

# val FILE KEY: the value of "@ KEY value" in a driver's output
val() {
	sed -n "s/^@ $2 //p" "$1" | tail -n 1
}

# show FILE: the driver's readable lines
show() {
	grep -v '^@ ' "$1" || true
}

# median of the numbers given as arguments ("NA" if none)
median() {
	local nums
	nums=$(printf '%s\n' "$@" | grep -E '^-?[0-9.]+$' || true)
	if [ -z "$nums" ]; then
		echo NA
		return
	fi
	sort -g <<<"$nums" | awk '{ v[NR] = $1 }
		END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# wait_idle DB: wait until no other client session is connected to DB (a
# benchmark's own listener, application_name "dsync bench listener",
# and a wait-event sampler, "dsync bench sampler", aside), so that every
# pgbench backend has exited and flushed its statistics.
wait_idle() {
	local n
	for _ in $(seq 1 100); do
		n=$(q "$1" "SELECT count(*) FROM pg_stat_activity
		             WHERE datname = current_database() AND pid <> pg_backend_pid()
		               AND backend_type = 'client backend'
		               AND application_name NOT IN ('dsync bench listener', 'dsync bench sampler')")
		[ "$n" = 0 ] && { sleep 0.2; return 0; }
		sleep 0.1
	done
	echo "warning: sessions still connected to $1" >&2
}

# reaper_pid DB: pid of DB's dsync background worker, empty if none
reaper_pid() {
	q "$1" "SELECT pid FROM pg_stat_activity
	         WHERE datname = current_database() AND backend_type LIKE 'dsync%'
	         ORDER BY backend_start LIMIT 1"
}

# pgbench_tps WHAT OUTPUT: the tps of a pgbench run's output; exits the
# script if pgbench reported failed transactions or no tps.
pgbench_tps() {
	local tps
	if ! grep -q '^number of failed transactions: 0 ' <<<"$2"; then
		echo "pgbench reported failed transactions for $1:" >&2
		echo "$2" >&2
		exit 1
	fi
	tps=$(sed -n 's/^tps = \([0-9.]*\) .*/\1/p' <<<"$2")
	[ -n "$tps" ] || { echo "no tps in pgbench output:" >&2; echo "$2" >&2; exit 1; }
	echo "$tps"
}

# rotated K ITEM...: the items, one per line, rotated left by K, so that
# the order of the variants changes from one run to the next.
rotated() {
	local k=$1 n i
	shift
	n=$#
	local items=("$@")
	for ((i = 0; i < n; i++)); do
		echo "${items[$(((i + k) % n))]}"
	done
}

# prefill_released DB N: one released row for each of the names 1..N,
# the steady state of a long-running system.  The acquires go in batches
# of 1000 per transaction: each first acquire of a name holds a lock until
# its transaction ends, and N of them would not fit in the lock table.
prefill_released() {
	q "$1" "DO \$\$ BEGIN
	          FOR b IN 0 .. $2 / 1000 - 1 LOOP
	            PERFORM dsync_acquire(i::text, 'prefill', '30 seconds')
	               FROM generate_series(b * 1000 + 1, b * 1000 + 1000) i;
	            COMMIT;
	          END LOOP;
	        END \$\$" >/dev/null
	q "$1" "SELECT count(dsync_release(i::text, 'prefill')) FROM generate_series(1, $2) i" >/dev/null
}

# snapshot_hold NAME SECONDS: start a session (in the background), with
# application_name NAME, that takes a REPEATABLE READ snapshot and sits on
# it for SECONDS; returns once pg_stat_activity shows its backend_xmin.
snapshot_hold() {
	printf 'BEGIN ISOLATION LEVEL REPEATABLE READ;\nSELECT 1;\nSELECT pg_sleep(%s);\nCOMMIT;\n' "$2" |
		PGAPPNAME="$1" "$PGBIN/psql" -X -q -At -d bench >/dev/null 2>&1 &
	SNAPSHOT_PID=$!
	for _ in $(seq 1 100); do
		[ "$(q bench "SELECT count(*) FROM pg_stat_activity
		              WHERE application_name = '$1' AND backend_xmin IS NOT NULL")" = 1 ] && return 0
		sleep 0.05
	done
	echo "the snapshot-holding session did not show up" >&2
	exit 1
}

# snapshot_release NAME: end that session's sleep (its transaction then
# ends).
snapshot_release() {
	q bench "SELECT pg_cancel_backend(pid) FROM pg_stat_activity
	         WHERE application_name = '$1'" >/dev/null
	wait "$SNAPSHOT_PID" || true
}

# bench_build DRIVER: compile DRIVER.c with benchlib.c into
# $WORKDIR/build/DRIVER, warnings as errors.
bench_build() {
	mkdir -p "$WORKDIR/build"
	(
		cd "$BENCH_DIR"
		cc -O2 -Wall -Wextra -Werror -I"$("$PG_CONFIG" --includedir)" "$1.c" benchlib.c \
			-L"$("$PG_CONFIG" --libdir)" -lpq -o "$WORKDIR/build/$1"
	)
}

# bench_driver DRIVER ARGS...: run a built driver; if it fails, show the
# end of the server log and exit with its status.
bench_driver() {
	local driver=$1 status=0
	shift
	"$WORKDIR/build/$driver" "$@" || status=$?
	if [ "$status" -ne 0 ]; then
		echo "the driver failed (exit $status); last lines of the server log:" >&2
		tail -n 30 "$SERVER_LOG" >&2
		exit "$status"
	fi
}

# bench_part N TITLE: true, after a heading, if part N is among the
# BENCH_PARTS to run.
bench_part() {
	[[ $PARTS == *$1* ]] || return 1
	echo
	echo "## $1. $2"
}

# bench_header TITLE: the title and the machine the figures come from.
bench_header() {
	echo "$1"
	echo "  server:   $("$PGBIN/postgres" --version), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
	echo "  data:     $(df -T "$WORKDIR" | awk 'NR == 2 { print $2 " on " $1 }'), fsync on"
	echo "  dsync.so: installed $DSYNC_SO_STAMP"
}

# bench_throughput_header [--no-warmup] TITLE [SETTINGS]: bench_header and
# the settings of the pgbench runs (bench_throughput_settings); SETTINGS,
# e.g. "16 clients on one name, ", stand after "fsync on, ".  --no-warmup
# leaves the warm-up out.
bench_throughput_header() {
	local warmup="${WARMUP}s warm-up per variant, "
	if [ "$1" = --no-warmup ]; then
		warmup=
		shift
	fi
	bench_header "$1"
	echo "  settings: shared_buffers=256MB, fsync on, ${2:-}pgbench -M $PROTOCOL -j 2,"
	echo "            ${SECONDS_PER_RUN}s per run, $warmup$ROUNDS round(s), median reported"
}

# cycle_run DB SCRIPT CLIENTS COMMIT SECONDS: run pgbench, print its tps
# (its whole output goes to RUN_LOG).
cycle_run() {
	local db=$1 script=$2 clients=$3 commit=$4 secs=$5 out tps
	out=$(PGOPTIONS="-c synchronous_commit=$commit" \
		"$PGBIN/pgbench" -n -M "$PROTOCOL" -c "$clients" -j 2 -T "$secs" \
		-f "$HERE/$script" "$db" 2>>"$RUN_LOG") || {
		echo "pgbench failed: $script, $clients clients, synchronous_commit=$commit" >&2
		echo "$out" >&2
		tail -n 20 "$RUN_LOG" >&2
		exit 1
	}
	printf '== %s clients=%s commit=%s\n%s\n' "$script" "$clients" "$commit" "$out" >>"$RUN_LOG"
	tps=$(pgbench_tps "$script" "$out")
	wait_idle "$db"
	echo "$tps"
}

# cycle_hook FUNCTION VARIANT: call FUNCTION VARIANT if the script defines it.
cycle_hook() {
	if declare -F "$1" >/dev/null; then
		"$1" "$2"
	fi
}

# bench_matrix BEFORE RUN: the measured runs of a throughput benchmark, in
# database bench: ROUNDS rounds of COMMIT_MODES x CLIENT_COUNTS x
# VARIANTS, the order of the variants rotating from one configuration to
# the next.  For each run: BEFORE VARIANT CLIENTS COMMIT ROUND (outside
# the measured time; ":" for nothing), a CHECKPOINT, so that no run pays
# for one that happens to fall inside it, then RUN VARIANT CLIENTS COMMIT
# ROUND, which measures and keeps the figures.
bench_matrix() {
	local before=$1 run=$2 rotation=0 round commit clients v order
	for round in $(seq 1 "$ROUNDS"); do
		for commit in "${COMMIT_MODES[@]}"; do
			for clients in "${CLIENT_COUNTS[@]}"; do
				mapfile -t order < <(rotated "$rotation" "${VARIANTS[@]}")
				rotation=$((rotation + 1))
				for v in "${order[@]}"; do
					"$before" "$v" "$clients" "$commit" "$round"
					q bench "CHECKPOINT"
					"$run" "$v" "$clients" "$commit" "$round"
				done
			done
		done
	done
}

# cycle_matrix_before, cycle_matrix_run VARIANT CLIENTS COMMIT: one run of
# cycle_matrix, its tps added to RESULTS[VARIANT,CLIENTS,COMMIT].
cycle_matrix_before() {
	cycle_hook cycle_before "$1"
}
cycle_matrix_run() {
	local tps
	tps=$(cycle_run bench "cycle_$1.sql" "$2" "$3" "$SECONDS_PER_RUN")
	cycle_hook cycle_after "$1"
	RESULTS[$1,$2,$3]="${RESULTS[$1,$2,$3]:-} $tps"
}

# cycle_matrix CHECK_SCRIPT: the acquire+release cycle runs that
# lease_bench.sh and ephemeral_bench.sh share, in database bench.  First a
# counting check (pgbench runs CHECK_SCRIPT 1000 times; the server's commit
# counter shows two transactions per run), the prefill (PREFILL), then a
# warm-up of each of VARIANTS and ROUNDS rounds of every variant for
# CLIENT_COUNTS x COMMIT_MODES, in rotating order, each after a CHECKPOINT.
# Fills the global CYCLES[variant,clients,commit] with medians and prints
# them.  Needs NAMES, DSYNC_TABLE and a table "lease" in bench.  A script
# may define cycle_before VARIANT and cycle_after VARIANT, run around every
# run of a variant (warm-up included), outside the measured time.
cycle_matrix() {
	local check_script=$1 commits_before commits_after check_out check_counted
	local commit clients v
	wait_idle bench
	commits_before=$(q bench "SELECT pg_stat_force_next_flush(); SELECT xact_commit FROM pg_stat_database WHERE datname = 'bench'" | tail -n 1)
	check_out=$("$PGBIN/pgbench" -n -M "$PROTOCOL" -c 1 -t 1000 -f "$HERE/$check_script" bench 2>>"$RUN_LOG")
	wait_idle bench
	commits_after=$(q bench "SELECT pg_stat_force_next_flush(); SELECT xact_commit FROM pg_stat_database WHERE datname = 'bench'" | tail -n 1)
	check_counted=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' <<<"$check_out")
	echo
	echo "Counting check: pgbench ran $check_script $check_counted times (its \"transactions\");"
	echo "  the server committed $((commits_after - commits_before)) transactions meanwhile (2 per run expected, plus this check's own queries)."
	echo "  So one pgbench \"transaction\" = one cycle = two server transactions, and cycles/s = pgbench tps."

	if [ "$PREFILL" = 1 ]; then
		prefill_released bench "$NAMES"
	fi
	q bench "VACUUM ANALYZE lease" >/dev/null
	q bench "VACUUM ANALYZE $DSYNC_TABLE" >/dev/null

	# Warm-up: one unmeasured run of each variant.
	if [ "$WARMUP" -gt 0 ]; then
		for v in "${VARIANTS[@]}"; do
			cycle_hook cycle_before "$v"
			cycle_run bench "cycle_$v.sql" 16 off "$WARMUP" >/dev/null
			cycle_hook cycle_after "$v"
		done
	fi

	local -A RESULTS=()
	bench_matrix cycle_matrix_before cycle_matrix_run

	echo
	echo "Acquire+release cycles per second (random names 1..$NAMES, two transactions per cycle)"
	printf '%-9s %8s %12s %10s   %s\n' variant clients sync_commit cycles/s "each round"
	for commit in "${COMMIT_MODES[@]}"; do
		for clients in "${CLIENT_COUNTS[@]}"; do
			for v in "${VARIANTS[@]}"; do
				# shellcheck disable=SC2086
				CYCLES[$v,$clients,$commit]=$(median ${RESULTS[$v,$clients,$commit]})
				printf '%-9s %8s %12s %10.0f   %s\n' "$v" "$clients" "$commit" \
					"${CYCLES[$v,$clients,$commit]}" "$(printf '%.0f ' ${RESULTS[$v,$clients,$commit]})"
			done
		done
	done
}
