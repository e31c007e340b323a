#!/usr/bin/env bash
# Checks that dsync has one version: VERSION (X.Y.Z) has dsync.control's
# default_version as its X.Y, and META.json (both "version" fields), the top
# entries of debian/changelog and CHANGELOG.md, clients/python/dsync/_version.py,
# clients/node/package.json and clients/node/package-lock.json (the root
# package) and the command-line tool (dsync --version) all say VERSION;
# and that LICENSE, META.json, debian/copyright and both clients name the
# PostgreSQL License.  Then it builds what users install and reads
# the version back: the Python wheel (pip wheel, offline), imported as
# installed (its metadata and dsync.__version__), the package imported at
# the top of the tree after make (the client in clients/python/dsync, not
# the extension's dsync.so there: dsync/__init__.py hands over), and the
# tarball of npm pack (its name and its package.json).  Each disagreement
# is one FAILED line naming the file; scripts/set-version.sh fixes them all.
#
#   bash test/version.sh          (as root on Debian 12; needs python3-pip,
#                                  python3-psycopg, node and npm, and the
#                                  server headers for make: no network)
# Prints "N passed, N failed".
set -euo pipefail
cd "$(dirname "$0")/.."
py=/usr/bin/python3

. test/checks.sh
# agree FILE WHAT VALUE: VALUE, read from FILE, must be VERSION.
agree() {
	if [ "$3" = "$version" ]; then
		ok "$1: $2 is $version"
	else
		fail "$1: $2 is '${3}', VERSION says $version (bash scripts/set-version.sh $version sets it)"
	fi
}
# The value at a key path of a JSON file, or nothing.
json() {
	"$py" - "$@" <<'EOF' 2>/dev/null || true
import json, sys
value = json.load(open(sys.argv[1], encoding="utf-8"))
for key in sys.argv[2:]:
    value = value[key]
print(value)
EOF
}

if [ ! -f VERSION ]; then
	echo "FAILED VERSION: the file is missing (bash scripts/set-version.sh X.Y.Z makes it)"
	echo "0 passed, 1 failed"
	exit 1
fi
version=$(cat VERSION)
if [[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] && [ "$(wc -l <VERSION)" -eq 1 ]; then
	ok "VERSION: $version"
else
	fail "VERSION: '$version' is not one line X.Y.Z"
fi
ext=$(sed -n "s/^default_version = '\(.*\)'/\1/p" dsync.control)
if [ "${version%.*}" = "$ext" ]; then
	ok "dsync.control: default_version $ext is VERSION's major.minor"
else
	fail "dsync.control: default_version is '$ext', VERSION $version says ${version%.*} (change one of them)"
fi

agree META.json '"version"' "$(json META.json version)"
agree META.json 'provides.dsync.version' "$(json META.json provides dsync version)"
if command -v dpkg-parsechangelog >/dev/null 2>&1; then
	agree debian/changelog "the top entry's version" \
		"$(dpkg-parsechangelog -l debian/changelog -S Version 2>/dev/null || true)"
else
	agree debian/changelog "the top entry's version" \
		"$(sed -n '1s/^dsync (\([^)]*\)).*/\1/p' debian/changelog)"
fi
# CHANGELOG.md's newest entry is this version's ("## X.Y.Z (date)").
newest=$(sed -n 's/^## \([0-9][0-9.]*\) .*/\1/p' CHANGELOG.md 2>/dev/null | head -1)
if [ "$newest" = "$version" ]; then
	ok "CHANGELOG.md: the newest entry is $version"
else
	fail "CHANGELOG.md: the newest entry is '$newest', VERSION says $version (write its entry)"
fi
if [ "$(wc -l <clients/python/dsync/_version.py 2>/dev/null || echo 0)" -eq 1 ]; then
	agree clients/python/dsync/_version.py __version__ \
		"$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' clients/python/dsync/_version.py)"
else
	fail "clients/python/dsync/_version.py: missing, or not the one line __version__ = \"$version\""
fi
agree clients/node/package.json '"version"' "$(json clients/node/package.json version)"
agree clients/node/package-lock.json '"version"' "$(json clients/node/package-lock.json version)"
agree clients/node/package-lock.json 'packages."".version' \
	"$(json clients/node/package-lock.json packages '' version)"

work=$(mktemp -d /tmp/dsync-version.XXXXXX)
trap 'rm -rf "$work"' EXIT

# The command-line tool, built from this tree as make builds it.
if make -s -C cli clean >/dev/null 2>&1 && make -s -C cli >"$work/cli.log" 2>&1; then
	agree cli/dsync "dsync --version" "$(cli/dsync --version | sed -n 's/^dsync //p')"
else
	sed 's/^/   /' "$work/cli.log"
	fail "cli: make -C cli failed"
fi

# The Python package imported at the top of the tree after make: the
# extension's dsync.so is there, and Python would take it for the module
# dsync; the package dsync/ there hands over to clients/python/dsync.
if make -s >"$work/make.log" 2>&1 && [ -f dsync.so ]; then
	if reported=$(env -u PYTHONPATH PYTHONDONTWRITEBYTECODE=1 "$py" -c '
import os, sys
import dsync, dsync.aio, dsync._wire
package = os.path.join(sys.argv[1], "clients", "python", "dsync")
for module in (dsync, dsync.aio, dsync._wire):
    if os.path.dirname(module.__file__) != package:
        sys.exit("%s was imported from %s, not from %s" % (module.__name__, module.__file__, package))
print(dsync.__version__)
' "$(pwd)" 2>"$work/import-top.log"); then
		agree "dsync/__init__.py (import dsync at the top, after make)" \
			"dsync.__version__, from clients/python/dsync" "$reported"
	else
		fail "dsync/__init__.py: import dsync at the top of the tree, after make, fails: $(tail -1 "$work/import-top.log")"
	fi
else
	sed 's/^/   /' "$work/make.log" | tail -15
	fail "make (the extension, for the import at the top) failed"
fi

# One license: the PostgreSQL License, "The dsync authors", everywhere.
if grep -q '^PostgreSQL License$' LICENSE 2>/dev/null &&
	grep -q 'Copyright (c) [0-9]*, The dsync authors' LICENSE; then
	ok "LICENSE: the PostgreSQL License, copyright The dsync authors"
else
	fail "LICENSE: missing, or not the PostgreSQL License of The dsync authors"
fi
if cmp -s LICENSE clients/node/LICENSE; then
	ok "clients/node/LICENSE is LICENSE (npm pack ships it)"
else
	fail "clients/node/LICENSE differs from LICENSE (cp LICENSE clients/node/LICENSE)"
fi
[ "$(json META.json license)" = postgresql ] && ok 'META.json: "license" is postgresql' ||
	fail "META.json: \"license\" is '$(json META.json license)', not postgresql"
[ "$(json clients/node/package.json license)" = PostgreSQL ] &&
	ok 'clients/node/package.json: "license" is PostgreSQL' ||
	fail "clients/node/package.json: \"license\" is '$(json clients/node/package.json license)', not PostgreSQL"
grep -q '^license = { text = "PostgreSQL" }$' clients/python/pyproject.toml &&
	ok "clients/python/pyproject.toml: license PostgreSQL" ||
	fail "clients/python/pyproject.toml: the license is not PostgreSQL"
if [ "$(grep -c '^License: PostgreSQL$' debian/copyright)" -eq 2 ] &&
	grep -q '^Copyright: .*The dsync authors$' debian/copyright; then
	ok "debian/copyright: PostgreSQL, The dsync authors"
else
	fail "debian/copyright: not the PostgreSQL License of The dsync authors"
fi

# The Python package as pip builds it (from the tree, no index), unpacked
# the way pip installs a pure wheel, and imported from outside the tree.
if "$py" -m pip wheel --quiet --no-deps --no-index --no-cache-dir -w "$work/wheel" \
	./clients/python >"$work/pip.log" 2>&1; then
	wheel=$(cd "$work/wheel" && ls)
	if [ "$wheel" = "dsync-$version-py3-none-any.whl" ]; then
		ok "clients/python: pip builds $wheel"
	else
		fail "clients/python: pip builds '$wheel', not dsync-$version-py3-none-any.whl"
	fi
	"$py" -m zipfile -e "$work/wheel/$wheel" "$work/site" || true
	if cmp -s "$work/site/dsync-$version.dist-info/LICENSE" LICENSE ||
		cmp -s "$work/site/dsync-$version.dist-info/licenses/LICENSE" LICENSE; then
		ok "clients/python: the wheel ships LICENSE"
	else
		fail "clients/python: the wheel has no LICENSE in dsync-$version.dist-info"
	fi
	agree "clients/python (installed)" "the distribution's version (importlib.metadata)" \
		"$(cd "$work" && PYTHONPATH="$work/site" "$py" -c \
			'import importlib.metadata; print(importlib.metadata.version("dsync"))' 2>&1 | tail -1)"
	# Imported from the unpacked wheel, outside the tree (needs psycopg:
	# python3-psycopg).
	if reported=$(cd "$work" && PYTHONPATH="$work/site" "$py" -c '
import os, sys
import dsync
if not dsync.__file__.startswith(sys.argv[1] + os.sep):
    sys.exit("dsync was imported from %s, not from the wheel" % dsync.__file__)
print(getattr(dsync, "__version__", "(none)"))
' "$work/site" 2>"$work/import.log"); then
		agree "clients/python (installed)" \
			"dsync.__version__ (dsync/__init__.py takes it from _version.py)" "$reported"
	else
		fail "clients/python (installed): import dsync fails: $(tail -1 "$work/import.log")"
	fi
else
	sed 's/^/   /' "$work/pip.log"
	fail "clients/python: pip wheel ./clients/python failed"
fi

# The Node package as npm pack makes it.
if (cd clients/node && npm pack --silent --pack-destination "$work" >"$work/npm.log" 2>&1); then
	tarball=$(cd "$work" && ls -- *.tgz)
	if [ "$tarball" = "dsync-client-$version.tgz" ]; then
		ok "clients/node: npm pack makes $tarball"
	else
		fail "clients/node: npm pack makes '$tarball', not dsync-client-$version.tgz"
	fi
	tar -xzOf "$work/$tarball" package/package.json >"$work/packed.json"
	agree "clients/node (npm pack)" "package/package.json's version" "$(json "$work/packed.json" version)"
	if tar -xzOf "$work/$tarball" package/LICENSE 2>/dev/null | cmp -s - LICENSE; then
		ok "clients/node (npm pack): package/LICENSE is LICENSE"
	else
		fail "clients/node (npm pack): the tarball has no package/LICENSE, or another one"
	fi
else
	sed 's/^/   /' "$work/npm.log"
	fail "clients/node: npm pack failed"
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
