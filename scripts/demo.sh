#!/usr/bin/env bash
# Runs dsync for real on a fresh Debian machine, as root: installs what it
# needs, builds and installs the extension, starts a throwaway PostgreSQL 15
# with dsync preloaded on a local socket, and walks through leases being
# taken, contended, expiring and fenced.  The server and its data directory
# are removed on exit.  Set DSYNC_DEMO_KEEP=1 to leave the server running.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh
export PATH="/usr/lib/postgresql/15/bin:$PATH"

echo "== building and installing dsync"
make -s >/dev/null
make -s install >/dev/null

dir=$(mktemp -d /tmp/dsync-demo.XXXXXX)
chown postgres "$dir"
port=${DSYNC_DEMO_PORT:-54329}
as_pg() { runuser -u postgres -- "$@"; }
cleanup() {
	if [ "${DSYNC_DEMO_KEEP:-0}" = 1 ]; then
		echo "== server left running: psql -h $dir -p $port -U postgres"
		return
	fi
	as_pg pg_ctl -D "$dir/data" -m fast stop >/dev/null 2>&1 || true
	rm -rf "$dir"
}
trap cleanup EXIT

echo "== starting a throwaway PostgreSQL with shared_preload_libraries = 'dsync'"
as_pg initdb -D "$dir/data" -A trust -U postgres >/dev/null
cat >> "$dir/data/postgresql.conf" <<EOF
shared_preload_libraries = 'dsync'
listen_addresses = ''
unix_socket_directories = '$dir'
port = $port
EOF
as_pg pg_ctl -D "$dir/data" -l "$dir/server.log" -w start >/dev/null

export PGHOST=$dir PGPORT=$port PGUSER=postgres PGDATABASE=postgres
sql() { psql -X -q -v ON_ERROR_STOP=1 -P pager=off "$@"; }

sql <<'EOF'
CREATE EXTENSION dsync;
\echo
\echo '1. Taking a lease.  worker-a asks for "nightly-report" for 5 seconds and gets'
\echo '   a fencing token: a number that only ever grows, for every grant.'
SELECT dsync_acquire('nightly-report', 'worker-a', '5 seconds',
					 info => '{"host": "node-1"}') AS token_a;
SELECT lease, holder, fencing, expires_at - now() AS time_left, info FROM dsync_leases;

\echo '2. Contention.  worker-b wants it too: NULL, right away (wait => 0 never blocks).'
SELECT dsync_acquire('nightly-report', 'worker-b', '5 seconds') AS token_b;
\echo '   worker-a asking again is reentrant: same token, expiry pushed out.'
SELECT dsync_acquire('nightly-report', 'worker-a', '5 seconds') AS token_a_again;
SELECT dsync_leader('nightly-report') AS leader;

\echo '3. Expiry.  worker-a stops renewing (say it hung).  We wait 5 seconds...'
SELECT pg_sleep(5.2);
\echo '   ...and the lease is gone at that instant, by the server clock:'
SELECT dsync_leader('nightly-report') AS leader,
	   dsync_renew('nightly-report', 'worker-a') AS renew_by_a;
\echo '   worker-b takes it over, with a greater token:'
SELECT dsync_acquire('nightly-report', 'worker-b', '30 seconds') AS token_b;

\echo '4. Fencing.  Writes carry the token, and the guarded table refuses old ones.'
CREATE TABLE report (id int PRIMARY KEY, body text, fencing bigint);
INSERT INTO report VALUES (1, 'empty', 0);
\echo '   worker-b writes inside one transaction with dsync_assert_held, which'
\echo '   returns its token and keeps the lease held until the transaction ends:'
BEGIN;
UPDATE report SET body = 'written by worker-b',
				  fencing = dsync_assert_held('nightly-report', 'worker-b')
 WHERE id = 1
   AND fencing <= dsync_assert_held('nightly-report', 'worker-b');
COMMIT;
SELECT * FROM report;
\echo '   worker-a wakes up and tries to write with the lease it lost: refused.'
\set ON_ERROR_STOP 0
BEGIN;
UPDATE report SET body = 'stale write by worker-a',
				  fencing = dsync_assert_held('nightly-report', 'worker-a')
 WHERE id = 1;
ROLLBACK;
\set ON_ERROR_STOP 1
SELECT * FROM report;

\echo '5. Release.  worker-b is done; the lease is free for the next one.'
SELECT dsync_release('nightly-report', 'worker-b') AS released;
SELECT dsync_acquire('nightly-report', 'worker-c') AS token_c;
SELECT lease, holder, fencing FROM dsync_leases;
\echo '   LISTEN on this channel for leadership events:'
SELECT dsync_channel('nightly-report') AS channel;
EOF

# 6. Leader election with the command-line tool: three candidates run
# "dsync elect"; only the leader runs its command.  We kill the leader's
# dsync with SIGKILL (no chance to release anything) and watch a new leader
# take over when the lease's ttl runs out, while "dsync watch" prints the
# events as they happen.
echo
echo "6. Leader election with the dsync tool: three candidates, ttl 3 s."
ttl=3
pids=()
dsync watch billing-leader > "$dir/watch.log" 2>&1 &
watch_pid=$!
sleep 0.5
for n in 1 2 3; do
	dsync elect billing-leader --ttl ${ttl}s --id "node-$n" --info "{\"node\": $n}" -- \
		sh -c 'echo "   [$DSYNC_HOLDER] now leader, fencing token $DSYNC_FENCING_TOKEN"; exec sleep 600' \
		2>>"$dir/elect.log" &
	pids+=($!)
done
leader=""
for _ in $(seq 100); do
	leader=$(sql -At -c "SELECT dsync_leader('billing-leader')")
	[ -n "$leader" ] && break
	sleep 0.1
done
sleep 0.5
sql -c "SELECT member, info, is_leader FROM dsync_members('billing-leader') ORDER BY member"
n=${leader#node-}
echo "   killing the leader's dsync ($leader) with SIGKILL: its command dies with it"
{ kill -9 "${pids[$((n - 1))]}"; wait "${pids[$((n - 1))]}"; } 2>/dev/null || true
start=$(date +%s%N)
new=""
for _ in $(seq 600); do
	new=$(sql -At -c "SELECT coalesce(dsync_leader('billing-leader'), '')")
	[ -n "$new" ] && [ "$new" != "$leader" ] && break
	sleep 0.05
done
[ -n "$new" ] && [ "$new" != "$leader" ] || { echo "no new leader within 30 s"; exit 1; }
elapsed=$(( ($(date +%s%N) - start) / 1000000 ))
echo "   new leader: $new, $elapsed ms after the kill (ttl ${ttl} s)"
sleep 0.5
sql -c "SELECT member, is_leader FROM dsync_members('billing-leader') ORDER BY member"
echo "   what 'dsync watch billing-leader' printed meanwhile:"
sed 's/^/     /' "$dir/watch.log"
for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
kill "$watch_pid" 2>/dev/null || true
wait 2>/dev/null || true
echo "== demo finished"
