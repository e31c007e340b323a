#!/usr/bin/env bash
# The HA test: dsync under Patroni + etcd on loopback (test/ha/cluster.sh),
# two nodes in synchronous_mode, clients on a multi-host connection string
# (test/ha/ha_test.py).  Runs a planned switchover, a crash failover (the
# primary's Patroni and PostgreSQL killed with SIGKILL) and the old
# primary's rejoin (pg_rewind), then the checks.  Prints the downtime of
# each and the dsync worker's start on each new primary.
# Run as root; needs patroni, etcd-server, postgresql-15, python3-psycopg.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/cluster.sh"
trap 'exec 3>&- 2>/dev/null; ha_stop' EXIT
ha_start 2 sync || exit 1
status=0

# worker_up NODE: seconds until NODE runs dsync's worker for database postgres.
worker_up() {
	local port=$(ha_node_port "${1#node}") t0=$(date +%s.%N)
	for _ in $(seq 1 200); do
		if [ "$("$PGBIN/psql" -X -At -h 127.0.0.1 -p "$port" -U postgres -d postgres -c \
			"SELECT count(*) FROM pg_stat_activity WHERE backend_type LIKE 'dsync%' AND datname = 'postgres'" 2>/dev/null)" = 1 ]; then
			echo "$(date +%s.%N) - $t0" | bc
			return 0
		fi
		sleep 0.05
	done
	echo never
	return 1
}

# wait_leader_other_than NODE: until another node leads.
wait_leader_other_than() {
	for _ in $(seq 1 600); do
		p=$(ha_primary) && [ "$p" != "$1" ] && { echo "$p"; return 0; }
		sleep 0.05
	done
	return 1
}

mkfifo "$HA_DIR/ctl"
/usr/bin/python3 "$here/ha_test.py" "$(ha_dsn)" <"$HA_DIR/ctl" &
test_pid=$!
exec 3>"$HA_DIR/ctl"
sleep 4

old=$(ha_primary)
ha_log "switchover from $old"
echo switchover >&3
runuser -u postgres -- patronictl -c "$HA_DIR/node1.yml" switchover --force >/dev/null 2>&1 ||
	{ ha_log "FAILED patronictl switchover"; status=1; }
new=$(wait_leader_other_than "$old") || { ha_log "FAILED no new leader"; status=1; }
ha_log "${new:-nobody} leads; dsync worker there after $([ -n "$new" ] && worker_up "$new") s"
# The old primary streams again and is the synchronous standby: only then
# may Patroni (synchronous_mode) fail over to it.
for _ in $(seq 1 600); do [ "$(ha_rest "${old#node}" /sync)" = 200 ] && break; sleep 0.1; done
ha_log "$old is the synchronous standby again: $(ha_rest "${old#node}" /sync)"
sleep 2

old=$(ha_primary)
ha_log "crash of $old (Patroni and PostgreSQL killed)"
echo crash-failover >&3
ha_kill_node "${old#node}"
new=$(wait_leader_other_than "$old") || { ha_log "FAILED no new leader"; status=1; }
ha_log "${new:-nobody} leads; dsync worker there after $([ -n "$new" ] && worker_up "$new") s"
sleep 5

if [ "${HA_DEBUG:-0}" = 1 ]; then
	for _ in 1 2 3 4 5; do
		"$PGBIN/psql" -X -At "$(ha_dsn)" -c "SELECT current_setting('synchronous_standby_names'), (SELECT wait_event FROM pg_stat_activity WHERE backend_type = 'dsync reaper')"
		sleep 1
	done
fi
ha_log "rejoin of $old"
echo rejoin >&3
ha_start_node "${old#node}"
for _ in $(seq 1 600); do [ "$(ha_rest "${old#node}" /replica)" = 200 ] && break; sleep 0.1; done
[ "$(ha_rest "${old#node}" /replica)" = 200 ] && ha_log "$old is a replica again" ||
	{ ha_log "FAILED $old did not rejoin"; status=1; }
sleep 3
if [ "${HA_DEBUG:-0}" = 1 ]; then
	"$PGBIN/psql" -X "$(ha_dsn)" -c "SHOW synchronous_standby_names" -c "SELECT application_name, state, sync_state, flush_lsn, pg_current_wal_lsn() FROM pg_stat_replication" -c "SELECT pid, backend_type, wait_event_type, wait_event, state, left(query, 60) FROM pg_stat_activity WHERE backend_type LIKE 'dsync%'" -c "SELECT * FROM dsync_stats" -c "SELECT max(seq) FROM dsync_event_log" -c "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN%' OR query = 'SELECT 1'"
fi
echo end >&3
exec 3>&-
wait "$test_pid" || status=1
exit $status
