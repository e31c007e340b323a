#!/usr/bin/env bash
# Runs every dsync test on every PostgreSQL major we test, on a Debian
# bookworm machine, as root:
#   15 on this machine; 16 (built from source), 17 (Debian trixie) and 18
#   (Debian sid) each in a chroot made once by scripts/chroot.sh and cached
#   outside the clone; in each, test/suites.sh (builds with gcc and clang,
#   warnings as errors, then pg_regress, isolation, pgTAP, stress and Perl
#   TAP; in the 17 and 18 chroots also the Python client on their newer
#   Python and psycopg); then on 15 the client libraries (test/clients.sh:
#   Python and Node, directly and through PgBouncer, their packaging, and
#   the documentation's code examples, test/doctest.py), the monitoring kit
#   (test/monitoring.sh: the alert rules under promtool, the Grafana
#   dashboard, the queries file in the real prometheus-postgres-exporter),
#   the Debian package test (test/package.sh) and the HA test under Patroni
#   (test/ha/run.sh, with a synchronous standby on three nodes and with
#   asynchronous replication on two).
# The majors run side by side, DSYNC_LANES at a time (default 2, one per
# core here): 15 and its client, package and HA tests on the machine, the
# others each in its chroot, taken in order as lanes come free.  Each
# part's output is printed whole when it ends.
# DSYNC_PG_MAJORS limits the run, e.g. DSYNC_PG_MAJORS=15 for a quick local
# run (the package, client and HA tests run when 15 is in the list).  Prints
# a line per part with its time and one "N passed, N failed" line at the
# end, counting suites (the package test is one); exits non-zero on any
# failure.
set -uo pipefail
cd "$(dirname "$0")/.."
top=$(pwd)
majors=${DSYNC_PG_MAJORS:-15 16 17 18}
lanes=${DSYNC_LANES:-2}
run_started=$(date +%s)

bash scripts/install-deps.sh || { echo "0 passed, 1 failed"; exit 1; }

log=$(mktemp -d /tmp/dsync-run.XXXXXX)
trap 'rm -rf "$log"' EXIT

# What the chroots test is the tree as it is now: 15 builds in it while
# they run.
tar -C "$top" --exclude=./.git -cf "$log/tree.tar" .

# The chroots are made (or found in the cache) in the background from the
# start; a lane that takes a major waits for its chroot.
for major in $majors; do
	if [ "$major" != 15 ]; then
		(
			bash scripts/chroot.sh "$major" >"$log/chroot-$major.out" 2>&1
			echo $? >"$log/chroot-$major.rc"
		) &
	fi
done

# part ORDER WHAT [one] -- COMMAND...: runs one part with its output in a
# file of its own, prints that whole when it ends, and records the result
# for the summary ("one": the part counts as one suite, else its last
# "N passed, N failed" line counts).
part() {
	local order=$1 what=$2 one=
	shift 2
	if [ "$1" = one ]; then
		one=one
		shift
	fi
	shift # --
	local out="$log/part-$order.log" started status
	started=$(date +%s)
	echo "---- $what: started"
	"$@" >"$out" 2>&1
	status=$?
	printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$order" "$what" "$out" "$status" \
		"$(($(date +%s) - started))" "$one" >>"$log/results"
	{
		flock 9
		echo "==== $what"
		cat "$out"
	} 9>"$log/print.lock"
}

# One major inside its chroot: the tree is copied in, /proc and /dev/shm
# are mounted for the run and unmounted after, whatever happens.  (Not with
# a RETURN trap: it outlives the function and, under set -u, would end the
# lane at the next function's return, $root being gone.)
run_in_chroot() {
	local major=$1 root=$2 status=1
	rm -rf "$root/build/dsync"
	mkdir -p "$root/build/dsync" "$root/dev/shm"
	if tar -C "$root/build/dsync" -xf "$log/tree.tar" &&
		{ mountpoint -q "$root/proc" || mount -t proc proc "$root/proc"; } &&
		{ mountpoint -q "$root/dev/shm" || mount --bind /dev/shm "$root/dev/shm"; }; then
		chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 \
			PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
			bash /build/dsync/test/suites.sh "$major"
		status=$?
	fi
	umount "$root/dev/shm" 2>/dev/null
	umount "$root/proc" 2>/dev/null
	return $status
}

# A major in its chroot, once the chroot is there.
chroot_major() {
	local major=$1
	while [ ! -f "$log/chroot-$major.rc" ]; do sleep 2; done
	if [ "$(cat "$log/chroot-$major.rc")" != 0 ]; then
		cat "$log/chroot-$major.out"
		return 1
	fi
	run_in_chroot "$major" "$(tail -1 "$log/chroot-$major.out")"
}

# 15 on the machine, then what needs its installed build.
host_15() {
	part 15.0 "PostgreSQL 15" -- bash test/suites.sh 15
	# On the objects the suites just built, in this lane (no other build).
	part 15.1 "layering (src/README.md)" -- bash test/layers.sh
	part 15.2 "layering check fails" -- bash test/layers.sh --self-test
	part 15.3 "client libraries (15)" -- bash test/clients.sh
	part 15.4 "monitoring kit (15)" -- bash test/monitoring.sh
	part 15.5 "Debian package (15)" one -- bash test/package.sh
	# The package test removed the build's install: install it again.
	make -s PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config install >/dev/null ||
		echo "make install failed: the HA runs below will fail"
	part 15.6 "HA, sync (15)" one -- bash test/ha/run.sh sync 3
	part 15.7 "HA, async (15)" one -- bash test/ha/run.sh async 2
}

# The lanes take majors from the queue, in order.
printf '%s\n' $majors >"$log/queue"
lane() {
	local major
	while :; do
		major=$(flock "$log/queue.lock" bash -c 'head -1 "$1"; sed -i 1d "$1"' _ "$log/queue")
		[ -n "$major" ] || return 0
		if [ "$major" = 15 ]; then
			host_15
		else
			part "$major" "PostgreSQL $major" -- chroot_major "$major"
		fi
	done
}
for _ in $(seq "$lanes"); do
	lane &
done
# The lanes, not the chroot makers (they have all ended once a lane
# waited for its chroot, or were not needed).
wait
echo

# The summary, in the order of the parts.
passed=0
failed=0
echo "==== summary (lanes: $lanes)"
while IFS=$'\t' read -r order what out status secs one; do
	if [ -n "$one" ]; then
		counts="$((status == 0)) passed, $((status != 0)) failed"
	else
		counts=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$out" | tail -1)
	fi
	p=${counts%% passed*}
	f=${counts#*, }
	f=${f%% failed}
	if [ -z "$counts" ]; then
		p=0
		f=1
	elif [ "$status" -ne 0 ] && [ "$f" -eq 0 ]; then
		f=1
	fi
	passed=$((passed + p))
	failed=$((failed + f))
	# The server a major's suites ran on (test/suites.sh's first line).
	server=$(sed -n 's/^== PostgreSQL \([0-9][0-9.]*\).*/\1/p' "$out" | head -1)
	printf '%-26s %2d passed, %d failed  (%dm%02ds)%s\n' "$what:" "$p" "$f" \
		$((secs / 60)) $((secs % 60)) "${server:+  server $server}"
	# Which suite failed and the first lines that say why, here at the
	# end: a CI log cut short in the middle still names them.  (The stress
	# checkers' self-tests print FAILED lines on purpose, each followed by
	# "the failure above is expected"; they show here too, under the
	# suite's own "-- ...: FAILED" line, which is what names the failure.)
	if [ "$f" -gt 0 ]; then
		{
			grep -E '^-- .*: FAILED$' "$out"
			grep -E '^not ok|Failed test|^FAILED |^t/.*(Dubious|Failed)|^E  ' "$out" | head -12
		} | sed 's/^/    | /'
	fi
done < <(sort -t$'\t' -k1,1n "$log/results")
# A major whose lane died without a result counts as failed.
for major in $majors; do
	key=$major
	[ "$major" = 15 ] && key=15.0
	if ! cut -f1 "$log/results" 2>/dev/null | grep -qx "$key"; then
		printf '%-26s did not run\n' "PostgreSQL $major:"
		failed=$((failed + 1))
	fi
done
secs=$(($(date +%s) - run_started))
printf 'whole run: %dm%02ds\n' $((secs / 60)) $((secs % 60))
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
