#!/usr/bin/env bash
# Builds the Debian packages (debian/, pg_buildext) for the PostgreSQL
# majors installed here (15 on bookworm), installs them, and checks them
# the way a user would: a fresh cluster with dsync preloaded from the
# package, CREATE EXTENSION dsync, a lease, and the dsync tool from PATH.
# The packages are removed again at the end, with the files they installed
# (a `make install` done before is undone too: run it again if needed).
# Run as root.  Prints "N passed, N failed" at the end.
set -uo pipefail
cd "$(dirname "$0")/.."
top=$(pwd)

passed=0
failed=0
check() {
	local what=$1; shift
	if "$@"; then
		echo "ok     $what"
		passed=$((passed + 1))
	else
		echo "FAILED $what"
		failed=$((failed + 1))
	fi
}
finish() {
	echo "$passed passed, $failed failed"
	[ "$failed" -eq 0 ]
	exit
}

# One version everywhere (VERSION): PGXN, the Debian changelog, the tool;
# the extension's SQL version is its major.minor.
version=$(cat VERSION)
extversion=$(sed -n "s/^default_version = '\(.*\)'/\1/p" dsync.control)
check "META.json gives VERSION ($version)" \
	grep -q "\"version\": \"$version\"" META.json
check "debian/changelog gives VERSION ($version)" \
	grep -q "^dsync ($version)" debian/changelog
check "dsync.control's default_version ($extversion) is VERSION's major.minor" \
	test "$extversion" = "${version%.*}"

work=$(mktemp -d /tmp/dsync-package.XXXXXX)
installed=()
cleanup() {
	if [ ${#installed[@]} -gt 0 ]; then
		dpkg --purge "${installed[@]}" >"$work/purge.log" 2>&1 ||
			echo "warning: could not remove ${installed[*]}"
	fi
	rm -rf "$work"
}
trap cleanup EXIT

# Build from a copy of the tree without build products or git metadata,
# as a source package would be.
mkdir "$work/dsync"
tar -C "$top" --exclude=./.git --exclude=./results --exclude=./output_iso \
	--exclude='*.o' --exclude='*.so' --exclude='*.bc' --exclude=./cli/dsync -cf - . |
	tar -C "$work/dsync" -xf -
majors=$(cd "$work/dsync" && pg_buildext supported-versions)
echo "== building for PostgreSQL $majors"
(cd "$work/dsync" && pg_buildext updatecontrol &&
	dpkg-buildpackage -us -uc -b) >"$work/build.log" 2>&1
status=$?
check "dpkg-buildpackage builds the packages" test "$status" -eq 0
if [ "$status" -ne 0 ]; then
	tail -40 "$work/build.log"
	finish
fi
ls "$work"/*.deb | sed 's|.*/|   |'

for major in $majors; do
	deb=$(ls "$work"/postgresql-"$major"-dsync_*.deb 2>/dev/null | head -1)
	check "postgresql-$major-dsync was built" test -n "$deb"
	[ -n "$deb" ] || continue
	dpkg-deb -c "$deb" >"$work/contents"
	check "postgresql-$major-dsync holds the library, control file and scripts" \
		bash -c "grep -q '/usr/lib/postgresql/$major/lib/dsync.so' '$work/contents' &&
			grep -q '/usr/share/postgresql/$major/extension/dsync.control' '$work/contents' &&
			grep -q '/usr/share/postgresql/$major/extension/dsync--1.4--1.5.sql' '$work/contents'"
	check "postgresql-$major-dsync does not ship the tool next to the server's programs" \
		bash -c "! grep -q 'bin/dsync\$' '$work/contents'"
done
client=$(ls "$work"/dsync-client_*.deb 2>/dev/null | head -1)
[ -n "$client" ] && dpkg-deb -c "$client" >"$work/contents"
check "dsync-client was built and ships /usr/bin/dsync" \
	bash -c "test -n '$client' && grep -q '\./usr/bin/dsync\$' '$work/contents'"

# Install what was built; a leftover `make install` is replaced.
for major in $majors; do
	rm -f "/usr/lib/postgresql/$major/lib/dsync.so" "/usr/lib/postgresql/$major/bin/dsync"
done
if dpkg -i $(ls "$work"/*.deb | grep -v dbgsym) >"$work/install.log" 2>&1; then
	installed=(dsync-client $(for m in $majors; do echo "postgresql-$m-dsync"; done))
	check "the packages install" true
else
	check "the packages install" false
	tail -20 "$work/install.log"
	finish
fi

check "dsync is on PATH as /usr/bin/dsync" test "$(command -v dsync)" = /usr/bin/dsync
said=$(dsync --version 2>&1)
echo "   dsync --version: $said"
check "dsync --version answers with VERSION" test "$said" = "dsync $version"

# A clean cluster of each major, dsync preloaded from the package.
for major in $majors; do
	out=$(pg_virtualenv -v "$major" -o shared_preload_libraries=dsync bash -c '
		psql -X -q -At -v ON_ERROR_STOP=1 \
			-c "CREATE EXTENSION dsync" \
			-c "SELECT extversion FROM pg_extension WHERE extname = '"'dsync'"'" \
			-c "SELECT dsync_acquire('"'pkg'"', '"'me'"', interval '"'1 minute'"') > 0" \
			-c "SELECT holder FROM dsync_leases WHERE lease = '"'pkg'"'" &&
		dsync status pkg' 2>&1)
	echo "$out" | sed 's/^/   /'
	check "PostgreSQL $major: CREATE EXTENSION dsync from the package, version $extversion" \
		bash -c "grep -qx '$extversion' <<<'$out'"
	check "PostgreSQL $major: a lease is granted and shown" \
		bash -c "grep -qx 't' <<<'$out' && grep -qx 'me' <<<'$out'"
	check "PostgreSQL $major: the dsync tool from PATH reads it" \
		bash -c "grep -q 'pkg' <<<'$(echo "$out" | tail -3)'"
done
finish
