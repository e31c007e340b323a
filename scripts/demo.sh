#!/usr/bin/env bash
# Runs dsync for real: starts a throwaway PostgreSQL 15 with dsync preloaded
# on a socket in a directory of its own, and walks through leases being
# taken, contended, expiring and fenced, then leader election with the dsync
# tool.  The server and its directory are removed on exit; nothing outside
# that directory is written, no service is stopped or started.
#
# Which dsync it runs:
#   - built from this tree (the default as root, or DSYNC_DEMO_INSTALLED=0):
#     installed into a private copy of PostgreSQL 15 inside the demo's
#     directory, never into the system's.  As root on Debian 12 it first
#     apt-gets what the build needs, if anything is missing.
#   - already installed (DSYNC_DEMO_INSTALLED=1, or by default as an
#     ordinary user when the system's PostgreSQL 15 has dsync): no build,
#     no root needed.
#   - DSYNC_DEMO_SYSTEM_INSTALL=1 (root): builds, `make install`s into the
#     system's PostgreSQL 15 and runs that.
# As root the server runs as postgres, else as the invoking user.
# DSYNC_DEMO_KEEP=1 leaves the server running; DSYNC_DEMO_PORT sets its port.
set -euo pipefail
cd "$(dirname "$0")/.."

sys_bin=/usr/lib/postgresql/15/bin
# What building dsync needs (Makefile and cli/Makefile are PGXS: the server
# headers, whose package brings clang and libpq-dev for the bitcode and the
# tool, and a C toolchain) and what running it needs (the server and psql).
build_packages=(postgresql-15 postgresql-server-dev-15 libpq-dev build-essential)

fail() { echo "demo.sh: $*" >&2; exit 1; }
root=0; [ "$(id -u)" = 0 ] && root=1

# dsync is installed in the system's PostgreSQL 15 when its module and its
# control file are where that server looks for them.
installed_dsync() {
	[ -x "$sys_bin/pg_config" ] &&
		[ -f "$("$sys_bin/pg_config" --pkglibdir)/dsync.so" ] &&
		[ -f "$("$sys_bin/pg_config" --sharedir)/extension/dsync.control" ]
}

system_install=${DSYNC_DEMO_SYSTEM_INSTALL:-0}
mode=${DSYNC_DEMO_INSTALLED:-auto}
if [ "$system_install" = 1 ]; then
	[ "$root" = 1 ] || fail "DSYNC_DEMO_SYSTEM_INSTALL=1 installs into the system: run it as root"
	mode=system
elif [ "$mode" = auto ]; then
	# Root builds this tree (a fresh machine has no dsync); an ordinary user
	# runs the installed dsync when there is one.
	if [ "$root" = 0 ] && installed_dsync; then mode=1; else mode=0; fi
fi
case $mode in
1) mode=installed ;;
0) mode=source ;;
system) ;;
*) fail "DSYNC_DEMO_INSTALLED must be 0 or 1, not '$mode'" ;;
esac

if [ "$mode" = installed ]; then
	installed_dsync || fail "no dsync installed in $sys_bin/../ (DSYNC_DEMO_INSTALLED=0 builds this tree instead)"
else
	# apt-get only what is missing, and only root can.
	missing=()
	for p in "${build_packages[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
	done
	if [ ${#missing[@]} -gt 0 ]; then
		[ "$root" = 1 ] || fail "building dsync needs: ${missing[*]} (apt-get install them as root, or run with DSYNC_DEMO_INSTALLED=1 against an installed dsync)"
		echo "== installing: ${missing[*]}"
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq
		apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
	fi
fi

dir=$(mktemp -d /tmp/dsync-demo.XXXXXX)
port=${DSYNC_DEMO_PORT:-54329}
# As root the server runs as postgres (initdb refuses root), else as us.
if [ "$root" = 1 ]; then
	chown postgres "$dir"
	as_pg() { runuser -u postgres -- "$@"; }
else
	as_pg() { "$@"; }
fi
cleanup() {
	local rc=$?
	[ "$rc" = 0 ] || echo "== demo FAILED (exit $rc)" >&2
	# The candidates and the watcher of step 6, if it stopped there (one
	# pid a word).
	# shellcheck disable=SC2046
	kill $(jobs -p) 2>/dev/null || true
	if [ "${DSYNC_DEMO_KEEP:-0}" = 1 ]; then
		echo "== server left running: $(command -v psql) -h $dir -p $port -U postgres"
		return
	fi
	as_pg pg_ctl -D "$dir/data" -m fast stop >/dev/null 2>&1 || true
	rm -rf "$dir"
}
trap cleanup EXIT

case $mode in
installed)
	echo "== using the dsync installed in $("$sys_bin/pg_config" --pkglibdir)"
	bin=$sys_bin
	;;
source)
	# Debian's PostgreSQL is relocatable: a copy of its lib and share trees
	# finds them relative to its own bin, pg_config included, so `make
	# install` with the copy's pg_config installs into the copy alone.
	echo "== building dsync and installing it into a private copy of PostgreSQL 15"
	pg=$dir/pg/usr
	mkdir -p "$pg/lib/postgresql" "$pg/share/postgresql"
	cp -a /usr/lib/postgresql/15 "$pg/lib/postgresql/"
	cp -a /usr/share/postgresql/15 "$pg/share/postgresql/"
	# Built with the system's pg_config (the headers are the same, and the
	# dependency lists keep naming headers that stay), installed with the copy's.
	make -s -j"$(nproc)" PG_CONFIG="$sys_bin/pg_config" >/dev/null
	make -s install PG_CONFIG="$pg/lib/postgresql/15/bin/pg_config" >/dev/null
	bin=$pg/lib/postgresql/15/bin
	;;
system)
	echo "== building dsync and installing it into the system's PostgreSQL 15"
	make -s -j"$(nproc)" PG_CONFIG="$sys_bin/pg_config" >/dev/null
	make -s install PG_CONFIG="$sys_bin/pg_config" >/dev/null
	bin=$sys_bin
	;;
esac
# initdb, pg_ctl, psql and the dsync tool all from the same PostgreSQL (the
# Debian package of the tool puts it in /usr/bin, found after).
export PATH="$bin:$PATH"
command -v dsync >/dev/null || fail "the dsync command-line tool is not installed"

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

# Each step is checked (pg_temp.expect, results sent to /dev/null): a step
# that does not do what it says stops psql with an error, and the demo fails.
sql <<'EOF'
CREATE EXTENSION dsync;
CREATE FUNCTION pg_temp.expect(ok boolean, what text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
	IF ok IS NOT TRUE THEN
		RAISE EXCEPTION 'demo step failed: %', what;
	END IF;
END $$;
\echo
\echo '1. Taking a lease.  worker-a asks for "nightly-report" for 5 seconds and gets'
\echo '   a fencing token: a number that only ever grows, for every grant.'
SELECT dsync_acquire('nightly-report', 'worker-a', '5 seconds',
					 info => '{"host": "node-1"}') AS token_a;
SELECT lease, holder, fencing, expires_at - now() AS time_left, info FROM dsync_leases;
SELECT fencing AS token_a FROM dsync_leases
 WHERE lease = 'nightly-report' AND holder = 'worker-a' \gset

\echo '2. Contention.  worker-b wants it too: NULL, right away (wait => 0 never blocks).'
SELECT dsync_acquire('nightly-report', 'worker-b', '5 seconds') AS token_b;
\echo '   worker-a asking again is reentrant: same token, expiry pushed out.'
SELECT dsync_acquire('nightly-report', 'worker-a', '5 seconds') AS token_a_again;
SELECT dsync_leader('nightly-report') AS leader;
SELECT pg_temp.expect((SELECT fencing FROM dsync_leases
						WHERE lease = 'nightly-report' AND holder = 'worker-a') = :token_a,
					  'worker-a still holds the lease with its first token') \g /dev/null

\echo '3. Expiry.  worker-a stops renewing (say it hung).  We wait 5 seconds...'
SELECT pg_sleep(5.2);
\echo '   ...and the lease is gone at that instant, by the server clock:'
SELECT dsync_leader('nightly-report') AS leader,
	   dsync_renew('nightly-report', 'worker-a') AS renew_by_a;
SELECT pg_temp.expect(dsync_leader('nightly-report') IS NULL,
					  'the lease expired') \g /dev/null
\echo '   worker-b takes it over, with a greater token:'
SELECT dsync_acquire('nightly-report', 'worker-b', '30 seconds') AS token_b;
SELECT pg_temp.expect((SELECT fencing FROM dsync_leases
						WHERE lease = 'nightly-report' AND holder = 'worker-b') > :token_a,
					  'worker-b took the lease over with a greater token') \g /dev/null

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
\set stale_refused :ERROR
ROLLBACK;
\set ON_ERROR_STOP 1
SELECT * FROM report;
SELECT pg_temp.expect(:stale_refused AND
					  (SELECT body FROM report WHERE id = 1) = 'written by worker-b',
					  'worker-b wrote and worker-a''s stale write was refused') \g /dev/null

\echo '5. Release.  worker-b is done; the lease is free for the next one.'
SELECT dsync_release('nightly-report', 'worker-b') AS released;
SELECT dsync_acquire('nightly-report', 'worker-c') AS token_c;
SELECT lease, holder, fencing FROM dsync_leases;
SELECT pg_temp.expect(dsync_leader('nightly-report') = 'worker-c',
					  'worker-c took the released lease') \g /dev/null
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
[ -n "$new" ] && [ "$new" != "$leader" ] || fail "no new leader within 30 s"
elapsed=$(( ($(date +%s%N) - start) / 1000000 ))
echo "   new leader: $new, $elapsed ms after the kill (ttl ${ttl} s)"
sleep 0.5
sql -c "SELECT member, is_leader FROM dsync_members('billing-leader') ORDER BY member"
echo "   what 'dsync watch billing-leader' printed meanwhile:"
sed 's/^/     /' "$dir/watch.log"
grep -q "acquired billing-leader holder $new " "$dir/watch.log" ||
	fail "dsync watch did not show $new acquiring the lease"
for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
kill "$watch_pid" 2>/dev/null || true
wait 2>/dev/null || true
echo "== demo finished"
