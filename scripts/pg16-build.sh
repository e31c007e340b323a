#!/usr/bin/env bash
# PostgreSQL 16 from source, for the chroot scripts/chroot.sh makes to test
# dsync on 16 (no Debian suite reachable here packages it).
#
#   scripts/pg16-build.sh --find          # prints the source tarball's path
#   scripts/pg16-build.sh ROOT TARBALL    # builds it inside the chroot ROOT
#
# The tarball is looked for in $DSYNC_PG16_TARBALL, then in the shared
# folder beside the clone (../shared/pg16) and /work/shared/pg16, and must
# have the checksum below: it is a git archive of a tree titled "Vanilla
# PostgreSQL 16.13" (../shared/pg16/README.md), fit for tests, not for
# packages.  It is built with assertions (--enable-cassert, --enable-debug),
# so that every suite run on it fails on an Assert of PostgreSQL's or
# dsync's, and on memory used after it was freed (CLOBBER_FREED_MEMORY):
# the other majors are Debian's release builds.  The build goes where Debian puts a major
# (/usr/lib/postgresql/16, shared files in /usr/share/postgresql/16), with
# the Perl TAP modules and contrib's pg_walinspect (TAP test 020 uses it);
# pgTAP is pure SQL, so the host's (postgresql-15-pgtap) is copied in.
set -euo pipefail

expected=f633e874c0342cbb3c52a6b3051e6286f58b5c631d134860687ca6e88807e04a
name=postgresql-16.13-git.tar.gz
top=$(cd "$(dirname "$0")/.." && pwd)

if [ "${1:-}" = --find ]; then
	for f in "${DSYNC_PG16_TARBALL:-}" "$top/../shared/pg16/$name" "/work/shared/pg16/$name"; do
		[ -n "$f" ] && [ -f "$f" ] || continue
		if [ "$(sha256sum "$f" | cut -d' ' -f1)" != "$expected" ]; then
			echo "scripts/pg16-build.sh: $f does not have the expected checksum" >&2
			exit 1
		fi
		echo "$f"
		exit 0
	done
	echo "scripts/pg16-build.sh: the PostgreSQL 16 source ($name) was not found:" \
		"set DSYNC_PG16_TARBALL" >&2
	exit 1
fi

root=${1:?usage: scripts/pg16-build.sh ROOT TARBALL}
tarball=${2:?usage: scripts/pg16-build.sh ROOT TARBALL}
src=$root/build/pg16-src
trap 'umount "$root/proc" 2>/dev/null || true' EXIT

rm -rf "$src"
mkdir -p "$src"
tar -xzf "$tarball" -C "$src"
# The archive may hold the tree at its top or in one folder.
[ -f "$src/configure" ] || src=$(dirname "$(find "$src" -maxdepth 2 -name configure | head -1)")
mountpoint -q "$root/proc" || mount -t proc proc "$root/proc"
chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 PATH=/usr/sbin:/usr/bin:/sbin:/bin \
	bash -euo pipefail -c "
		cd '${src#"$root"}'
		./configure --prefix=/usr/lib/postgresql/16 --datadir=/usr/share/postgresql/16 \
			--without-icu --without-readline --with-openssl --enable-tap-tests \
			--enable-cassert --enable-debug
		make -s -j\$(nproc)
		make -s install
		make -s -C contrib/pg_walinspect install
	"
# Programs linked with its libpq (the stress driver) find it as they would
# a packaged one.
echo /usr/lib/postgresql/16/lib >"$root/etc/ld.so.conf.d/postgresql-16.conf"
chroot "$root" ldconfig
mkdir -p "$root/usr/share/postgresql/16/extension"
cp /usr/share/postgresql/15/extension/pgtap* "$root/usr/share/postgresql/16/extension/"
rm -rf "$root/build/pg16-src"
chroot "$root" /usr/lib/postgresql/16/bin/pg_config --version
