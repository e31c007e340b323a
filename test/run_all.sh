#!/usr/bin/env bash
# Runs every dsync test on every PostgreSQL major we test, on a Debian
# bookworm machine, as root:
#   15 on this machine; 17 (Debian trixie) and 18 (Debian sid) each in a
#   chroot made once by scripts/chroot.sh and cached outside the clone;
#   in each, test/suites.sh (builds with gcc and clang, warnings as errors,
#   then pg_regress, isolation, pgTAP, stress and Perl TAP; in the chroots
#   also the Python client on their newer Python and psycopg);
#   then on 15 the client libraries (test/clients.sh: Python and Node,
#   directly and through PgBouncer, and their packaging), the Debian package test
#   (test/package.sh) and the HA test under Patroni (test/ha/run.sh, with
#   a synchronous standby on three nodes and with asynchronous replication
#   on two).
# DSYNC_PG_MAJORS limits the run, e.g. DSYNC_PG_MAJORS=15 for a quick local
# run (the package, client and HA tests run when 15 is in the list).  Prints a line per
# major and one "N passed, N failed" line at the end, counting suites (the
# package test is one); exits non-zero on any failure.
set -uo pipefail
cd "$(dirname "$0")/.."
top=$(pwd)
majors=${DSYNC_PG_MAJORS:-15 17 18}

bash scripts/install-deps.sh || { echo "0 passed, 1 failed"; exit 1; }

passed=0
failed=0
summary=()
log=$(mktemp -d /tmp/dsync-run.XXXXXX)

# Adds a finished run's counts to the totals and to the per-major summary:
# its suites (its last "N passed, N failed" line), or with "one", the run
# counted as a single suite.
tally() {
	local what=$1 out=$2 status=$3 started=$4 one=${5:-}
	local counts p f secs
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
	secs=$(($(date +%s) - started))
	passed=$((passed + p))
	failed=$((failed + f))
	summary+=("$(printf '%-26s %2d passed, %d failed  (%dm%02ds)' "$what:" "$p" "$f" $((secs / 60)) $((secs % 60)))")
}

# The chroots are made (or found in the cache) in the background while 15
# runs on the machine itself.
declare -A chroot_job
for major in $majors; do
	if [ "$major" != 15 ]; then
		bash scripts/chroot.sh "$major" >"$log/chroot-$major.out" 2>&1 &
		chroot_job[$major]=$!
	fi
done

# One major inside its chroot: the tree is copied in, /proc and /dev/shm
# are mounted for the run and unmounted after, whatever happens.
run_in_chroot() {
	local major=$1 root=$2
	trap 'umount "$root/dev/shm" 2>/dev/null; umount "$root/proc" 2>/dev/null' RETURN
	rm -rf "$root/build/dsync"
	mkdir -p "$root/build/dsync"
	tar -C "$top" --exclude=./.git -cf - . | tar -C "$root/build/dsync" -xf -
	mountpoint -q "$root/proc" || mount -t proc proc "$root/proc" || return 1
	mkdir -p "$root/dev/shm"
	mountpoint -q "$root/dev/shm" || mount --bind /dev/shm "$root/dev/shm" || return 1
	chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 \
		PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
		bash /build/dsync/test/suites.sh "$major"
}

for major in $majors; do
	started=$(date +%s)
	out="$log/pg$major.log"
	echo "==== PostgreSQL $major"
	if [ "$major" = 15 ]; then
		bash test/suites.sh 15 2>&1 | tee "$out"
	elif wait "${chroot_job[$major]}"; then
		run_in_chroot "$major" "$(tail -1 "$log/chroot-$major.out")" 2>&1 | tee "$out"
	else
		cat "$log/chroot-$major.out" | tee "$out"
		false
	fi
	tally "PostgreSQL $major" "$out" "${PIPESTATUS[0]}" "$started"
	if [ "$major" = 15 ]; then
		started=$(date +%s)
		out="$log/clients.log"
		echo "==== client libraries (PostgreSQL 15)"
		bash test/clients.sh 2>&1 | tee "$out"
		tally "client libraries (15)" "$out" "${PIPESTATUS[0]}" "$started"
		started=$(date +%s)
		out="$log/package.log"
		echo "==== Debian package (PostgreSQL 15)"
		bash test/package.sh 2>&1 | tee "$out"
		tally "Debian package (15)" "$out" "${PIPESTATUS[0]}" "$started" one
		# The package test removed the build's install: install it again.
		make -s PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config install >/dev/null ||
			echo "make install failed: the HA runs below will fail"
		for ha in "sync 3" "async 2"; do
			started=$(date +%s)
			out="$log/ha.log"
			echo "==== HA with Patroni: ${ha% *} replication, ${ha#* } nodes (PostgreSQL 15)"
			bash test/ha/run.sh $ha 2>&1 | tee "$out"
			tally "HA, ${ha% *} (15)" "$out" "${PIPESTATUS[0]}" "$started" one
		done
	fi
done
rm -rf "$log"

echo
echo "==== summary"
printf '%s\n' "${summary[@]}"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
