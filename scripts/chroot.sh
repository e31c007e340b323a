#!/usr/bin/env bash
# Makes (once) and prints the path of a Debian chroot with PostgreSQL MAJOR,
# its server headers, pgTAP and what the test suites need, for testing
# dsync on majors this bookworm host does not carry (17: trixie, 18: sid).
# Installing them on the host would pull a newer libc, so they live apart.
#
#   scripts/chroot.sh 17      # prints /var/cache/dsync/chroot-17
#
# The chroot is cached outside the clone (DSYNC_CHROOT_CACHE, default
# /var/cache/dsync) and rebuilt only when the package list below changes.
# It is made in a scratch directory and renamed when complete, so an
# interrupted run never leaves a half-made chroot behind.  Run as root.
set -euo pipefail

major=${1:?usage: scripts/chroot.sh MAJOR}
cache=${DSYNC_CHROOT_CACHE:-/var/cache/dsync}
mirror=${DSYNC_DEBIAN_MIRROR:-http://deb.debian.org/debian}

case "$major" in
	17) suite=trixie ;;
	18) suite=sid ;;
	*) echo "scripts/chroot.sh: no Debian suite known for PostgreSQL $major" >&2; exit 2 ;;
esac

packages="postgresql-$major,postgresql-server-dev-$major,postgresql-$major-pgtap"
packages+=",postgresql-common,libtap-parser-sourcehandler-pgtap-perl,libipc-run-perl"
packages+=",libpq-dev,make,gcc,clang,pgbouncer,util-linux,procps,ca-certificates"
# The Python client's tests, on this suite's Python and psycopg.
packages+=",python3-psycopg,python3-psycopg-pool,python3-pytest,python3-pytest-timeout"
packages+=",python3-asyncpg,python3-sqlalchemy,python3-psycopg2"

dir="$cache/chroot-$major"
stamp="$suite $packages"
if [ -f "$dir/.dsync-stamp" ] && [ "$(cat "$dir/.dsync-stamp")" = "$stamp" ]; then
	echo "$dir"
	exit 0
fi

if ! command -v debootstrap >/dev/null 2>&1; then
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
fi

mkdir -p "$cache"
scratch="$cache/.making-$major"
# A previous attempt may have left mounts behind.
for m in proc dev/shm; do
	mountpoint -q "$scratch/$m" 2>/dev/null && umount "$scratch/$m"
done
rm -rf "$scratch"
echo "== making a $suite chroot with PostgreSQL $major in $dir (takes a few minutes)" >&2
if ! debootstrap --variant=minbase --include="$packages" "$suite" "$scratch" "$mirror" \
	>"$cache/debootstrap-$major.log" 2>&1; then
	echo "debootstrap failed; the last lines of $cache/debootstrap-$major.log:" >&2
	tail -20 "$cache/debootstrap-$major.log" >&2
	exit 1
fi
# Debian's postgresql-common would make and start a cluster on install in
# a normal system; the tests make their own, so drop any that exists.
rm -rf "$scratch/var/lib/postgresql/$major/main" "$scratch/etc/postgresql/$major/main"
# Keep the package cache small.
rm -rf "$scratch/var/cache/apt/archives/"*.deb
echo "$stamp" >"$scratch/.dsync-stamp"
rm -rf "$dir"
mv "$scratch" "$dir"
echo "$dir"
