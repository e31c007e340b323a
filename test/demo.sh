#!/usr/bin/env bash
#
# demo.sh: checks that scripts/demo.sh runs, as an ordinary user, against
# the dsync installed in the system's PostgreSQL 15, and fails when it does.
#
#     bash test/demo.sh    (from anywhere, as root or not, dsync installed)
#
# The demo checks each of its steps itself and exits non-zero when one does
# not do what it says; this adds that every step was reached.  As root it
# runs the demo as DSYNC_TEST_USER (nobody unless set): the ordinary-user
# mode is the one that must work without root, and a copy of the script in
# a directory of its own spares that user read access to this tree.
set -euo pipefail
cd "$(dirname "$0")/.."

log=$(mktemp /tmp/dsync-test-demo.XXXXXX)
copy=""
trap 'rm -rf "$log" ${copy:+"$copy"}' EXIT

if [ "$(id -u)" = 0 ]; then
	user=${DSYNC_TEST_USER:-nobody}
	copy=$(mktemp -d /tmp/dsync-test-demo.XXXXXX)
	mkdir "$copy/scripts"
	cp scripts/demo.sh "$copy/scripts/"
	chmod -R a+rX "$copy"
	run=(runuser -u "$user" -- env DSYNC_DEMO_INSTALLED=1 bash "$copy/scripts/demo.sh")
else
	run=(env DSYNC_DEMO_INSTALLED=1 bash scripts/demo.sh)
fi

rc=0
"${run[@]}" >"$log" 2>&1 || rc=$?
missing=""
for step in 1 2 3 4 5 6; do
	grep -q "^$step\. " "$log" || missing+=" $step"
done
grep -q '^== demo finished$' "$log" || missing+=" end"
if [ "$rc" != 0 ] || [ -n "$missing" ]; then
	cat "$log"
	echo "FAIL: scripts/demo.sh exited $rc${missing:+, never reached:$missing}"
	exit 1
fi
echo "ok: scripts/demo.sh, every step, as $(if [ -n "$copy" ]; then echo "$user"; else id -un; fi)"
