#!/usr/bin/env bash
#
# restart_bench.sh: what the record of ephemeral leases (dsync_ephemeral_seq,
# README "One kind at a time") costs a restart.  After `pg_ctl restart -m
# fast`, how long until a durable grant of a free name, in a database whose
# ephemeral leases were in use just before and in one whose were not; and
# how long the restart itself takes.
#
# Run as root after `make install`:
#
#     bash test/bench/restart_bench.sh
#
# Settings (environment):
#   BENCH_MAX_TTL     dsync.ephemeral_max_ttl in seconds (default 10)
#   BENCH_KEEP        1: keep the directory
#
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/server.sh"
bench_settings MAX_TTL=10

bench_server_start restart "dsync.ephemeral_max_ttl = $MAX_TTL"
q postgres "CREATE DATABASE used"
q postgres "CREATE DATABASE unused"
q used "CREATE EXTENSION dsync"
q unused "CREATE EXTENSION dsync"

# Ephemeral grants wait out the first start's grace too.
sleep "$MAX_TTL"
q used "SELECT dsync_acquire('e', 'h', '1s', wait => '60s', durable => false)" >/dev/null

now() { date +%s.%N; }

t0=$(now)
runuser -u postgres -- "$PGBIN/pg_ctl" -D "$PGDATA_DIR" -m fast -w restart >/dev/null
t1=$(now)
echo "dsync.ephemeral_max_ttl = ${MAX_TTL}s"
echo "restart -m fast: $(echo "$t1 - $t0" | bc) s"
for db in unused used; do
	t0=$(now)
	q $db "SELECT dsync_acquire('x', 'h', '1min', wait => '5min')" >/dev/null
	t1=$(now)
	echo "database $db: a durable grant of a free name $(echo "$t1 - $t0" | bc) s after the restart"
done
