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
echo "== demo finished"
