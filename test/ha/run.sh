#!/usr/bin/env bash
# The HA test: dsync under Patroni + etcd on loopback (test/ha/cluster.sh),
# with clients on a libpq multi-host connection string (test/ha/ha_test.py).
#
#   bash test/ha/run.sh [sync|async] [NODES]      (default: sync 2)
#
# Runs a planned switchover, a crash failover (the primary's Patroni and
# PostgreSQL killed with SIGKILL) and the old primary's rejoin (pg_rewind),
# then prints each event's figures and checks them (ha_test.py says which).
# In async mode the primary's WAL senders are stopped for 2 s before the
# crash, so that the standby that takes over has missed acknowledged
# commits.  Also prints how soon the dsync worker runs on each new
# primary.  Run as root; needs patroni, etcd-server, postgresql-15 and
# python3-psycopg, and dsync installed (make install).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
mode=${1:-sync}
nodes=${2:-2}
case "$mode" in sync | async) ;; *) echo "usage: $0 [sync|async] [NODES]" >&2; exit 2 ;; esac
. "$here/cluster.sh"
trap 'exec 3>&- 2>/dev/null; ha_stop' EXIT
ha_start "$nodes" "$mode" || exit 1
status=0
fail() { ha_log "FAILED $*"; status=1; }

# worker_up NODE: seconds until NODE runs dsync's worker for database postgres.
worker_up() {
	local port t0
	port=$(ha_node_port "${1#node}")
	t0=$(date +%s.%N)
	for _ in $(seq 1 200); do
		if [ "$("$PGBIN/psql" -X -At -h 127.0.0.1 -p "$port" -U postgres -d postgres -c \
			"SELECT count(*) FROM pg_stat_activity WHERE backend_type LIKE 'dsync%' AND datname = 'postgres'" 2>/dev/null)" = 1 ]; then
			printf '%.3f s' "$(echo "$(date +%s.%N) - $t0" | bc)"
			return 0
		fi
		sleep 0.05
	done
	echo never
	return 1
}

# wait_leader_other_than NODE: until another node leads; prints it.
wait_leader_other_than() {
	local p
	for _ in $(seq 1 600); do
		p=$(ha_primary) && [ "$p" != "$1" ] && { echo "$p"; return 0; }
		sleep 0.05
	done
	return 1
}

# new_leader OLD: wait for a leader other than OLD and for dsync's worker
# on it.
new_leader() {
	local new up
	new=$(wait_leader_other_than "$1") || { fail "no new leader after $1"; return 1; }
	up=$(worker_up "$new") || fail "no dsync worker on $new"
	ha_log "$new leads; dsync worker there after $up"
}

# wait_replicas: ha_wait_replicas, logged.
wait_replicas() {
	if ha_wait_replicas; then
		ha_log "every other node streams from $(ha_primary)"
	else
		fail "the replicas did not all stream from $(ha_primary)"
	fi
}

mkfifo "$HA_DIR/ctl"
HA_READY="$HA_DIR/ready" DSYNC_TOOL="$PGBIN/dsync" \
	/usr/bin/python3 "$here/ha_test.py" "$(ha_dsn)" "$mode" <"$HA_DIR/ctl" &
test_pid=$!
exec 3>"$HA_DIR/ctl"
for _ in $(seq 1 1200); do
	[ -e "$HA_DIR/ready" ] && break
	kill -0 "$test_pid" 2>/dev/null || break
	sleep 0.1
done
[ -e "$HA_DIR/ready" ] || { fail "the clients did not start"; exit 1; }
sleep 2

old=$(ha_primary)
ha_log "switchover from $old"
echo switchover >&3
runuser -u postgres -- patronictl -c "$HA_DIR/node1.yml" switchover --force >/dev/null 2>&1 ||
	fail "patronictl switchover"
new_leader "$old"
wait_replicas
sleep 2

old=$(ha_primary)
echo crash-failover >&3
if [ "$mode" = async ]; then
	ha_log "replication from $old stalled"
	ha_stall "${old#node}" 2 || fail "no WAL sender to stop on $old"
fi
ha_log "crash of $old (Patroni and PostgreSQL killed)"
ha_kill_node "${old#node}"
new_leader "$old"
sleep 5

ha_log "rejoin of $old"
echo rejoin >&3
ha_start_node "${old#node}"
wait_replicas
sleep 3
echo end >&3
exec 3>&-
wait "$test_pid" || status=1
exit $status
