#!/usr/bin/env bash
# Makes (once) and prints the path of a Debian chroot with PostgreSQL MAJOR,
# its server headers, pgTAP and what the test suites need, for testing
# dsync on majors this bookworm host does not carry (17: trixie, 18: sid).
# Installing them on the host would pull a newer libc, so they live apart.
# No Debian suite reachable here packages 16: its chroot is bookworm with
# PostgreSQL 16 built from source (scripts/pg16-build.sh) where Debian
# would put it, /usr/lib/postgresql/16, so that pg_virtualenv and the
# suites find it as they find a packaged major.
#
#   scripts/chroot.sh 17      # prints /var/cache/dsync/chroot-17
#
# The chroot is cached outside the clone (DSYNC_CHROOT_CACHE, default
# /var/cache/dsync) and rebuilt only when the package list below (or, for
# 16, the source tarball) changes.
# It is made in a scratch directory and renamed when complete, so an
# interrupted run never leaves a half-made chroot behind.  Run as root.
set -euo pipefail

major=${1:?usage: scripts/chroot.sh MAJOR}
cache=${DSYNC_CHROOT_CACHE:-/var/cache/dsync}
# debootstrap picks its own default mirror; DSYNC_DEBIAN_MIRROR overrides it.
mirror=${DSYNC_DEBIAN_MIRROR:-}

here=$(cd "$(dirname "$0")" && pwd)
common="postgresql-common,libtap-parser-sourcehandler-pgtap-perl,libipc-run-perl"
common+=",make,gcc,clang,pgbouncer,util-linux,procps,ca-certificates"
case "$major" in
	16)
		suite=bookworm
		# What the source build needs, and the Python client's tests: they
		# run here against a server built with assertions.
		packages="$common,bison,flex,libssl-dev,zlib1g-dev,pkg-config,perl"
		packages+=",python3-psycopg,python3-psycopg-pool,python3-pytest,python3-pytest-timeout"
		packages+=",python3-asyncpg,python3-sqlalchemy,python3-psycopg2"
		# How it is built, and from what: the script holds the source's
		# checksum, so a cached chroot needs no source at hand.
		source_sum=$(sha256sum "$here/pg16-build.sh" | cut -d' ' -f1)
		;;
	17 | 18)
		[ "$major" = 17 ] && suite=trixie || suite=sid
		packages="postgresql-$major,postgresql-server-dev-$major,postgresql-$major-pgtap"
		packages+=",libpq-dev,$common"
		# The Python client's tests, on this suite's Python and psycopg,
		# and its integrations on this suite's SQLAlchemy and Django (the
		# host, bookworm, has the oldest: 1.4 and 3.2).
		packages+=",python3-psycopg,python3-psycopg-pool,python3-pytest,python3-pytest-timeout"
		packages+=",python3-asyncpg,python3-sqlalchemy,python3-psycopg2,python3-django"
		source_sum=
		;;
	*) echo "scripts/chroot.sh: no Debian suite known for PostgreSQL $major" >&2; exit 2 ;;
esac

dir="$cache/chroot-$major"
stamp="$suite $packages${source_sum:+ $source_sum}"
if [ -f "$dir/.dsync-stamp" ] && [ "$(cat "$dir/.dsync-stamp")" = "$stamp" ]; then
	echo "$dir"
	exit 0
fi

# 16's source, before anything is made.
tarball=
if [ "$major" = 16 ]; then
	tarball=$(bash "$here/pg16-build.sh" --find) || exit 1
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
if ! debootstrap --variant=minbase --include="$packages" "$suite" "$scratch" ${mirror:+"$mirror"} \
	>"$cache/debootstrap-$major.log" 2>&1; then
	echo "debootstrap failed; the last lines of $cache/debootstrap-$major.log:" >&2
	tail -20 "$cache/debootstrap-$major.log" >&2
	exit 1
fi
if [ "$major" = 16 ] && ! bash "$here/pg16-build.sh" "$scratch" "$tarball" \
	>"$cache/pg16-build.log" 2>&1; then
	echo "building PostgreSQL 16 failed; the last lines of $cache/pg16-build.log:" >&2
	tail -20 "$cache/pg16-build.log" >&2
	exit 1
fi
# Debian's postgresql-common would make and start a cluster on install in
# a normal system; the tests make their own, so drop any that exists.
rm -rf "$scratch/var/lib/postgresql/$major/main" "$scratch/etc/postgresql/$major/main"
# Keep the package cache small.
rm -rf "$scratch/var/cache/apt/archives/"*.deb
echo "$stamp" >"$scratch/.dsync-stamp"
# The chroot being replaced may still have /proc and the host's /dev/shm
# mounted in it (a run that was killed): rm -rf would empty the host's
# /dev/shm, the shared memory of every running server.
for m in proc dev/shm; do
	if mountpoint -q "$dir/$m" 2>/dev/null && ! umount "$dir/$m"; then
		echo "scripts/chroot.sh: $dir/$m is mounted and could not be unmounted" >&2
		exit 1
	fi
done
rm -rf "$dir"
mv "$scratch" "$dir"
echo "$dir"
