# Sourced by the benchmark scripts: a throwaway PostgreSQL 15 server of
# their own, owned by postgres, listening only on a Unix socket in its own
# directory, with dsync preloaded; stopped and removed on exit.
#
#   bench_server_start TAG 'extra postgresql.conf lines'
#
# sets WORKDIR, PGDATA_DIR, SERVER_LOG and PORT.  The caller sets PGBIN,
# and KEEP=1 (plus an optional KEEP_NOTE) to keep the directory.

bench_server_cleanup() {
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
}
