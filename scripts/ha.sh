#!/usr/bin/env bash
# dsync under Patroni, for real, on a fresh Debian machine as root: installs
# what it needs (Debian's patroni and etcd-server), builds and installs
# dsync, starts one etcd member and two or three Patroni nodes running
# PostgreSQL 15 with dsync preloaded, all on loopback (test/ha/cluster.sh),
# and shows a lease and its fencing token surviving a switchover and a
# crash of the primary, with `dsync lock` holding a lease throughout on a
# multi-host connection string.  Then it leaves the cluster running until
# Enter is pressed, and removes it.
#
#   bash scripts/ha.sh [sync|async] [NODES]        (default: sync 3)
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-sync}
nodes=${2:-3}
case "$mode" in sync | async) ;; *) echo "usage: $0 [sync|async] [NODES]" >&2; exit 2 ;; esac

bash scripts/install-deps.sh
export PATH="/usr/lib/postgresql/15/bin:$PATH"
echo "== building and installing dsync"
make -s >/dev/null
make -s install >/dev/null

set +e
. test/ha/cluster.sh
trap 'kill "$tool" 2>/dev/null; ha_stop' EXIT
echo "== starting etcd and $nodes Patroni nodes ($mode replication)"
ha_start "$nodes" "$mode" || exit 1
dsn=$(ha_dsn)
sql() { psql -X -q -P pager=off "$dsn" "$@"; }
cluster() { runuser -u postgres -- patronictl -c "$HA_DIR/node1.yml" list; }
cluster

echo
echo "== dsync on the primary, reached through: $dsn"
sql -c "CREATE EXTENSION dsync" -c "SELECT dsync_acquire('report', 'worker-1', '10 minutes') AS token"
echo "   and \`dsync lock\` holding \"batch\" (ttl 30 s, renewed every 10 s) while its command runs:"
dsync --dsn "$dsn" lock batch --ttl 30s --holder batch-1 -- sleep 100000 &
tool=$!
sleep 2
show() { sql -c "SELECT lease, holder, fencing, round(extract(epoch FROM expires_at - now())) AS seconds_left FROM dsync_leases ORDER BY lease"; }
show

echo "== a planned switchover"
ha_wait_replicas
old=$(ha_primary)
runuser -u postgres -- patronictl -c "$HA_DIR/node1.yml" switchover --force >/dev/null ||
	echo "patronictl switchover failed"
for _ in $(seq 1 300); do
	p=$(ha_primary) && [ "$p" != "$old" ] && break
	sleep 0.1
done
sleep 2
cluster
echo "   the same holders and tokens on the new primary:"
show

ha_wait_replicas
old=$(ha_primary)
echo "== a crash of the primary, $old (Patroni and PostgreSQL killed with SIGKILL)"
ha_kill_node "${old#node}"
for _ in $(seq 1 300); do
	p=$(ha_primary) && [ "$p" != "$old" ] && break
	sleep 0.1
done
echo "   $(ha_primary) leads; the dsync worker there:"
sql -c "SELECT pid, backend_type, backend_start FROM pg_stat_activity WHERE backend_type LIKE 'dsync%'"
sleep 3
show
echo "   (\`dsync lock\` reconnected and renews: its command still runs: $(kill -0 "$tool" 2>/dev/null && echo yes || echo no))"
echo "== $old rejoins (pg_rewind)"
ha_start_node "${old#node}"
ha_wait_replicas
cluster

echo
echo "The cluster runs in $HA_DIR.  Try: psql \"$dsn\""
echo "Press Enter to stop it and remove it."
read -r _ || true
