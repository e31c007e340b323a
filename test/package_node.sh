#!/usr/bin/env bash
# Checks that the Node package installs the way clients/node/README.md says:
# `npm pack` in clients/node makes dsync-client-VERSION.tgz holding exactly
# package.json and the files its "files" names, each clients/node's, its
# package.json
# licensed PostgreSQL and not private; installed with
# `npm install --no-audit --no-fund <tarball>` into a fresh project (pg
# comes from the npm registry), `require('dsync-client')` loads and exports
# the README's API, and `require('dsync-client/package.json').version` is
# VERSION.  Then the same from the directory, as a copy:
# `npm install --install-links clients/node` (without --install-links npm
# links the folder and installs none of its dependencies).
#
#   bash test/package_node.sh      (as root on Debian 12, with node and npm;
#                                   needs the npm registry for pg)
# Prints "N passed, N failed".
set -euo pipefail
cd "$(dirname "$0")/.."
top=$(pwd)
version=$(cat VERSION)

. test/checks.sh
finish() {
	echo "$passed passed, $failed failed"
	[ "$failed" -eq 0 ]
	exit
}
show_log() { sed 's/^/   /' "$1" | cut -c1-200 | tail -"${2:-15}"; }

work=$(mktemp -d /tmp/dsync-package-node.XXXXXX)
trap 'rm -rf "$work"' EXIT
echo "== node $(node --version), npm $(npm --version)"

if (cd clients/node && npm pack --silent --pack-destination "$work" >"$work/pack.log" 2>&1); then
	ok "npm pack in clients/node"
else
	show_log "$work/pack.log"
	fail "npm pack in clients/node"
	finish
fi
tarball=$work/dsync-client-$version.tgz
if [ -f "$tarball" ]; then
	ok "it makes dsync-client-$version.tgz"
else
	fail "it makes $(cd "$work" && ls -- *.tgz), not dsync-client-$version.tgz"
	finish
fi

# What ships is what package.json's "files" names (those that exist) and
# package.json itself: nothing more (tests, examples, node_modules), nothing
# less (a source file left out of "files" breaks require at once).
listed=$(cd clients/node && node -e '
const fs = require("fs");
for (const f of require("./package.json").files) if (fs.existsSync(f)) console.log(f);')
expected=$(printf 'package/%s\n' package.json $listed | sort)
shipped=$(tar -tzf "$tarball" | sort)
if [ "$shipped" = "$expected" ]; then
	ok "the tarball holds exactly: $(echo "${shipped//package\//}" | paste -sd' ')"
else
	diff <(echo "$expected") <(echo "$shipped") | sed 's/^/   /' || true
	fail "the tarball's files (< expected, > shipped)"
fi
mkdir "$work/packed"
tar -xzf "$tarball" -C "$work/packed"
same=1
for f in $listed; do
	cmp -s "$work/packed/package/$f" "clients/node/$f" || { echo "   differs: $f"; same=0; }
done
check "its files are clients/node's" test "$same" = 1
check "its package.json: version $version, license PostgreSQL, not private, depends on pg" \
	node -e '
const p = require(process.argv[1]);
const bad = [];
if (p.version !== process.argv[2]) bad.push("version " + p.version);
if (p.license !== "PostgreSQL") bad.push("license " + p.license);
if (p.private) bad.push("private");
if (!p.dependencies || !p.dependencies.pg) bad.push("no pg dependency");
if (bad.length) { console.error("   " + bad.join(", ")); process.exit(1); }
' "$work/packed/package/package.json" "$version"

# require('dsync-client') in the project $1: the README's API, VERSION,
# and loaded from the project's own node_modules.
loads() {
	(cd "$1" && node -e '
const d = require("dsync-client");
const want = ["Client", "Lock", "ReadLock", "Semaphore", "Event", "LeaderElection", "watch",
  "withLock", "DsyncError"];
const missing = want.filter((n) => typeof d[n] !== "function");
if (missing.length) throw new Error("missing exports: " + missing.join(", "));
const v = require("dsync-client/package.json").version;
if (v !== process.argv[1]) throw new Error("version " + v + ", VERSION says " + process.argv[1]);
const where = require("fs").realpathSync(require.resolve("dsync-client"));
if (!where.startsWith(process.argv[2])) throw new Error("loaded from " + where);
console.log("   exports: " + Object.keys(d).join(", "));
' "$version" "$1/node_modules/dsync-client/")
}
# A fresh project installing the tarball, then the directory.
for how in tarball directory; do
	app=$work/app-$how
	mkdir "$app"
	(cd "$app" && npm init -y >/dev/null)
	if [ "$how" = tarball ]; then
		args=("$tarball")
		shown="npm install --no-audit --no-fund dsync-client-$version.tgz"
	else
		args=(--install-links "$top/clients/node")
		shown="npm install --no-audit --no-fund --install-links clients/node"
	fi
	if (cd "$app" && npm install --no-audit --no-fund --loglevel=error "${args[@]}" >"$work/install-$how.log" 2>&1); then
		ok "$shown, in a fresh project"
	else
		show_log "$work/install-$how.log"
		fail "$shown, in a fresh project"
		continue
	fi
	check "require('dsync-client') loads there, version $version" loads "$app"
done

finish
