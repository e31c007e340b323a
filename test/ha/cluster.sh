#!/usr/bin/env bash
# Sourced by test/ha/run.sh (and usable by hand): a throwaway local HA
# cluster, one etcd member and two or three Patroni nodes running
# PostgreSQL 15 with dsync preloaded, all on loopback, in a mktemp
# directory owned by postgres.  Short Patroni timings keep a crash failover
# within seconds (ttl 10 s, loop_wait 1 s, retry_timeout 3 s).
#
#   ha_start NODES MODE     MODE: sync (synchronous_mode) or async
#   ha_dsn                  libpq multi-host string, read-write target
#   ha_node_port N          the PostgreSQL port of node N
#   ha_primary              the name of the node that leads now
#   ha_rest N PATH          HTTP status of node N's Patroni REST API at PATH
#   ha_kill_node N          crash node N (Patroni and PostgreSQL, SIGKILL)
#   ha_start_node N         start node N's Patroni again
#   ha_stall N SECONDS      stop node N's WAL senders
#   ha_wait_replicas        until the replicas stream (and one is in sync)
#   ha_stop                 stop everything and remove the directory
#
# Needs (Debian): patroni etcd-server postgresql-15, run as root.
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
HA_BASE_PORT=${HA_BASE_PORT:-25440}

ha_log() { printf '%s %s\n' "$(date +%T.%3N)" "$*"; }

# ha_rest N PATH: GET from node N's REST API; prints the HTTP status.
ha_rest() {
	/usr/bin/python3 - "$((HA_BASE_PORT + 100 + $1))" "$2" <<'PY'
import sys, urllib.request, urllib.error
try:
    r = urllib.request.urlopen("http://127.0.0.1:%s%s" % (sys.argv[1], sys.argv[2]), timeout=2)
    print(r.status)
except urllib.error.HTTPError as e:
    print(e.code)
except Exception:
    print(0)
PY
}

ha_node_port() { echo $((HA_BASE_PORT + $1)); }

ha_dsn() {
	local hosts="" ports="" i
	for i in $(seq 1 "$HA_NODES"); do
		hosts+="${hosts:+,}127.0.0.1"
		ports+="${ports:+,}$(ha_node_port "$i")"
	done
	echo "host=$hosts port=$ports user=postgres dbname=postgres target_session_attrs=read-write connect_timeout=2"
}

ha_primary() {
	local i
	for i in $(seq 1 "$HA_NODES"); do
		[ "$(ha_rest "$i" /primary)" = 200 ] && { echo "node$i"; return 0; }
	done
	return 1
}

# ha_start_node N: start Patroni for node N (as postgres, in the background).
ha_start_node() {
	runuser -u postgres -- patroni "$HA_DIR/node$1.yml" >>"$HA_DIR/patroni$1.log" 2>&1 &
	echo $! >"$HA_DIR/patroni$1.pid"
	disown $!	# its crash (ha_kill_node) is no news
}

# ha_wait_replicas: until every node but the leader is a streaming replica
# and, in sync mode, one of them is the synchronous standby: only then may
# Patroni (synchronous_mode) switch over or fail over without losing
# anything.  Returns 1 after 60 s.
ha_wait_replicas() {
	local leader i ok
	for _ in $(seq 1 600); do
		leader=$(ha_primary) || { sleep 0.1; continue; }
		ok=1
		for i in $(seq 1 "$HA_NODES"); do
			[ "node$i" = "$leader" ] && continue
			[ "$(ha_rest "$i" /replica)" = 200 ] || ok=0
		done
		if [ "$HA_MODE" = sync ] && [ $ok = 1 ]; then
			ok=0
			for i in $(seq 1 "$HA_NODES"); do
				[ "node$i" != "$leader" ] && [ "$(ha_rest "$i" /sync)" = 200 ] && ok=1
			done
		fi
		# The leader's view: every replica streaming (Patroni's /replica
		# does not wait for that).
		[ $ok = 1 ] && [ "$("$PGBIN/psql" -X -At -h 127.0.0.1 -p "$(ha_node_port "${leader#node}")" \
			-U postgres -d postgres -c "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'" \
			2>/dev/null)" = $((HA_NODES - 1)) ] && return 0
		sleep 0.1
	done
	return 1
}

ha_start() {
	local nodes=$1 mode=$2 i sync=true lag=1048576
	# Asynchronous: Patroni fails over to a standby that is behind by up
	# to maximum_lag_on_failover (1 MB by default); the test's stall puts
	# it further behind than that, and a failover is what it tests.
	[ "$mode" = async ] && { sync=false; lag=67108864; }
	HA_NODES=$nodes
	HA_MODE=$mode
	# A cluster left over (HA_KEEP, a killed run) would answer in its place.
	for i in 90 91 $(seq 1 "$nodes") $(seq 101 $((100 + nodes))); do
		if (: </dev/tcp/127.0.0.1/$((HA_BASE_PORT + i))) 2>/dev/null; then
			echo "port $((HA_BASE_PORT + i)) is in use: a cluster left over? (set HA_BASE_PORT)" >&2
			return 1
		fi
	done
	HA_DIR=$(mktemp -d /tmp/dsync-ha.XXXXXX)
	chown postgres: "$HA_DIR"
	chmod 700 "$HA_DIR"
	local etcd_client=$((HA_BASE_PORT + 90)) etcd_peer=$((HA_BASE_PORT + 91))
	runuser -u postgres -- etcd --name e1 --data-dir "$HA_DIR/etcd" --enable-v2=true \
		--listen-client-urls "http://127.0.0.1:$etcd_client" \
		--advertise-client-urls "http://127.0.0.1:$etcd_client" \
		--listen-peer-urls "http://127.0.0.1:$etcd_peer" \
		--initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer" \
		--initial-cluster "e1=http://127.0.0.1:$etcd_peer" >"$HA_DIR/etcd.log" 2>&1 &
	echo $! >"$HA_DIR/etcd.pid"
	disown $!
	for i in $(seq 1 "$nodes"); do
		cat >"$HA_DIR/node$i.yml" <<YML
scope: dsync-ha
name: node$i
restapi:
  listen: 127.0.0.1:$((HA_BASE_PORT + 100 + i))
  connect_address: 127.0.0.1:$((HA_BASE_PORT + 100 + i))
etcd:
  host: 127.0.0.1:$etcd_client
bootstrap:
  dcs:
    ttl: 10
    loop_wait: 1
    retry_timeout: 3
    maximum_lag_on_failover: $lag
    synchronous_mode: $sync
    postgresql:
      use_pg_rewind: true
      parameters:
        shared_preload_libraries: dsync
        wal_level: replica
        hot_standby: 'on'
        wal_log_hints: 'on'
        max_wal_senders: 10
        max_replication_slots: 10
        synchronous_commit: 'on'
  initdb:
  - encoding: UTF8
  - locale: C
  pg_hba:
  - local all all trust
  - host all all 127.0.0.1/32 trust
  - host replication replicator 127.0.0.1/32 trust
postgresql:
  listen: 127.0.0.1:$(ha_node_port "$i")
  connect_address: 127.0.0.1:$(ha_node_port "$i")
  data_dir: $HA_DIR/data$i
  bin_dir: $PGBIN
  pgpass: $HA_DIR/pgpass$i
  authentication:
    replication:
      username: replicator
      password: rep
    superuser:
      username: postgres
      password: pg
    rewind:
      username: postgres
      password: pg
  parameters:
    unix_socket_directories: '$HA_DIR'
    log_min_messages: warning
tags:
  nofailover: false
  noloadbalance: false
YML
		chown postgres: "$HA_DIR/node$i.yml"
		ha_start_node "$i"
	done
	# A leader, then every replica streaming.
	for _ in $(seq 1 600); do
		ha_primary >/dev/null && break
		sleep 0.1
	done
	ha_primary >/dev/null || { echo "no leader elected" >&2; tail -20 "$HA_DIR"/patroni*.log >&2; return 1; }
	ha_wait_replicas || { echo "the replicas did not all stream" >&2; return 1; }
	ha_log "cluster up: $(ha_primary) leads ($mode replication, $nodes nodes)"
}

# ha_kill_node N: node N's Patroni and PostgreSQL killed with SIGKILL, as
# a crash of its machine would.
ha_kill_node() {
	local pm
	pm=$(head -1 "$HA_DIR/data$1/postmaster.pid" 2>/dev/null)
	pkill -9 -f "patroni $HA_DIR/node$1.yml"
	# The postmaster is stopped first so that its children (some may be
	# stopped themselves, see ha_stall) are still its own when killed.
	if [ -n "$pm" ]; then
		kill -STOP "$pm" 2>/dev/null
		pkill -9 -P "$pm"
		kill -9 "$pm" 2>/dev/null
	fi
	pkill -9 -f "postgres -D $HA_DIR/data$1"
}

# ha_stall N SECONDS: node N's WAL senders stopped (SIGSTOP) for SECONDS,
# and any that starts meanwhile too: its commits reach no standby, as in a
# network partition or a standby that fell behind.  Only a crash of node N
# (ha_kill_node) ends it.  Fails if node N had no WAL sender to stop.
ha_stall() {
	local pm stopped=0
	pm=$(head -1 "$HA_DIR/data$1/postmaster.pid")
	for _ in $(seq 1 $(($2 * 10))); do
		pkill -STOP -P "$pm" -f walsender && stopped=1
		sleep 0.1
	done
	[ $stopped = 1 ]
}

ha_stop() {
	local f
	[ -n "${HA_DIR:-}" ] || return 0
	pkill -f "patroni $HA_DIR/" 2>/dev/null
	sleep 2
	pkill -9 -f "patroni $HA_DIR/" 2>/dev/null
	pkill -9 -f "$HA_DIR/data" 2>/dev/null
	[ -f "$HA_DIR/etcd.pid" ] && kill -9 "$(cat "$HA_DIR/etcd.pid")" 2>/dev/null
	pkill -9 -f "etcd --name e1 --data-dir $HA_DIR" 2>/dev/null
	[ "${HA_KEEP:-0}" = 1 ] && { echo "kept $HA_DIR"; return 0; }
	rm -rf "$HA_DIR"
}
