#!/usr/bin/env bash
# Sets dsync's version in every place that carries it:
#   VERSION                              the one place to read it from
#   META.json                            "version" and provides.dsync.version
#   debian/changelog                     a new top entry, if the top one differs
#   clients/python/dsync/_version.py     __version__ = "X.Y.Z"
#   clients/node/package.json            "version"
#   clients/node/package-lock.json       "version" of the root package (twice)
# The command-line tool reads VERSION when it is built (cli/Makefile), and
# CHANGELOG.md's newest entry must be written by hand.
# The version is X.Y.Z, where X.Y is dsync.control's default_version (the
# extension's SQL version) and Z a patch level; any other is refused.
# test/version.sh checks that everything agrees.
#
#   bash scripts/set-version.sh 1.5.0
set -euo pipefail
cd "$(dirname "$0")/.."

if [ $# -ne 1 ]; then
	echo "usage: bash scripts/set-version.sh X.Y.Z" >&2
	exit 2
fi
new=$1
if ! [[ $new =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
	echo "set-version.sh: refusing '$new': the version is X.Y.Z (three numbers), the same spelling for PGXN, Debian, Python and npm" >&2
	exit 1
fi
ext=$(sed -n "s/^default_version = '\(.*\)'/\1/p" dsync.control)
if [ -z "$ext" ]; then
	echo "set-version.sh: dsync.control has no default_version line" >&2
	exit 1
fi
if [ "${new%.*}" != "$ext" ]; then
	echo "set-version.sh: refusing $new: its major.minor ${new%.*} is not dsync.control's default_version $ext." >&2
	echo "  The packages' version is the extension's version plus a patch level: for a new" >&2
	echo "  extension version, change default_version in dsync.control (with its upgrade script) first." >&2
	exit 1
fi

echo "$new" >VERSION
echo "VERSION: $new"

printf '__version__ = "%s"\n' "$new" >clients/python/dsync/_version.py
echo "clients/python/dsync/_version.py: $new"

# The JSON files are edited in place, only the "version" values named, so
# that their layout stays as it was: each "version" string in the text is
# found by changing it alone and seeing which key of the parsed file moved.
/usr/bin/python3 - "$new" <<'EOF'
import json, re, sys

new = sys.argv[1]
probe_value = "@@set-version probe@@"

def get(obj, path):
    for key in path:
        if not isinstance(obj, dict) or key not in obj:
            return None
        obj = obj[key]
    return obj

def set_versions(filename, paths):
    with open(filename, encoding="utf-8") as f:
        text = f.read()
    found = {}
    for m in re.finditer(r'"version"\s*:\s*"([^"\\]*)"', text):
        probe = json.loads(text[:m.start(1)] + probe_value + text[m.end(1):])
        for path in paths:
            if get(probe, path) == probe_value:
                found[path] = m
    missing = [".".join(p) or '""' for p in paths if p not in found]
    if missing:
        sys.exit("set-version.sh: %s: no version at %s" % (filename, ", ".join(missing)))
    for m in sorted(found.values(), key=lambda m: -m.start(1)):
        text = text[:m.start(1)] + new + text[m.end(1):]
    json.loads(text)
    with open(filename, "w", encoding="utf-8") as f:
        f.write(text)
    print("%s: %s" % (filename, new))

set_versions("META.json", [("version",), ("provides", "dsync", "version")])
set_versions("clients/node/package.json", [("version",)])
set_versions("clients/node/package-lock.json", [("version",), ("packages", "", "version")])
EOF

# debian/changelog: a new entry on top, in the form of the others (same
# distribution, urgency and maintainer as the current top entry), unless
# the top entry already has this version.
top=$(sed -n '1s/^dsync (\([^)]*\)).*/\1/p' debian/changelog)
if [ "$top" = "$new" ]; then
	echo "debian/changelog: $new already on top"
else
	header=$(sed -n '1s/^dsync ([^)]*) \(.*\)$/\1/p' debian/changelog)
	maintainer=$(sed -n 's/^ -- \(.*>\)  .*$/\1/p' debian/changelog | head -1)
	if [ -z "$header" ] || [ -z "$maintainer" ]; then
		echo "set-version.sh: debian/changelog: cannot read its top entry" >&2
		exit 1
	fi
	date=$(LC_ALL=C date -u '+%a, %d %b %Y 00:00:00 +0000')
	{
		printf 'dsync (%s) %s\n\n  * dsync %s.\n\n -- %s  %s\n\n' \
			"$new" "$header" "$new" "$maintainer" "$date"
		cat debian/changelog
	} >debian/changelog.new
	mv debian/changelog.new debian/changelog
	echo "debian/changelog: new entry $new (was $top)"
fi
