#!/usr/bin/env bash
# Checks that the Python package installs the way clients/python/README.md
# says, with no network, as on a fresh Debian 12 with python3-venv,
# python3-pip and python3-psycopg (PyPI unreachable):
# - in a venv made with --system-site-packages (Debian's psycopg serves the
#   dependency): `pip install --no-index ./clients/python`, and the plain
#   `pip install ./clients/python` in a network namespace with no network
#   (unshare -n), timed, its pip -vv log showing no connection tried at
#   all (so a network that hangs instead of failing costs nothing either);
#   `import dsync` from outside the tree gives VERSION; the wheel's RECORD
#   (every file, sha256 in urlsafe base64 without padding, size) and
#   METADATA; every .py under clients/python/dsync ships; the same wheel
#   twice; the sdist, and a wheel built from it; `pip install -e`; the
#   [pool] extra (python3-psycopg-pool);
# - in a venv without system site packages: the plain install fails at
#   once, before pip tries the index, saying how to get psycopg (the
#   backend's dsync_deps.py), and with DSYNC_BUILD_CHECK=0 pip's own
#   failure to fetch psycopg; with --no-deps the package itself installs,
#   and imports only once psycopg is there;
# - the system's Python is left alone (no --break-system-packages).
# pip's settings from this machine (PIP_* variables, pip.conf) and its
# cache are set aside, as on a fresh machine.
#
#   bash test/package_python.sh      (as root, for unshare -n)
# Prints "N passed, N failed".
set -euo pipefail
cd "$(dirname "$0")/.."
top=$(pwd)
py=/usr/bin/python3
version=$(cat VERSION)

. test/checks.sh
finish() {
	echo "$passed passed, $failed failed"
	[ "$failed" -eq 0 ]
}

work=$(mktemp -d /tmp/dsync-package-python.XXXXXX)
trap 'rm -rf "$work"' EXIT
for var in $(compgen -e | grep '^PIP_' || true); do
	unset "$var"
done
export PIP_CONFIG_FILE=/dev/null XDG_CACHE_HOME=$work/cache

# Offline: a network namespace of its own has no network at all.
if unshare -n true 2>/dev/null; then
	offline=(unshare -n)
	echo "== offline runs in a network namespace without network (unshare -n)"
else
	offline=()
	echo "== unshare -n is not available (not root?): the offline runs use this machine's network"
fi
# Runs a command from outside the tree, so that clients/python is not on
# sys.path.
outside() { (cd "$work" && "$@"); }
# Seconds, to a tenth, that a command took; its output goes to a log.
timed() {
	local log=$1
	shift
	local start end status=0
	start=$(date +%s%N)
	"$@" >"$log" 2>&1 || status=$?
	end=$(date +%s%N)
	seconds=$(awk -v n=$((end - start)) 'BEGIN { printf "%.1f", n / 1e9 }')
	return "$status"
}
show_log() { sed 's/^/   /' "$1" | cut -c1-200 | tail -"${2:-15}"; }
# Network attempts in a pip -vv log.
network_lines() {
	grep -E 'Starting new HTTPS? connection|Getting page|Fetching project page|Retrying|NewConnectionError|Could not fetch URL' "$1" || true
}

# The backend reads pyproject.toml with tomllib, or with its own small
# reader on Python 3.9 and 3.10 without tomli: both must read it alike.
check "the backend's own TOML reader reads pyproject.toml as tomllib does" \
	"$py" -c '
import sys, tomllib
sys.path.insert(0, "clients/python/build_backend")
import dsync_build
text = open("clients/python/pyproject.toml", encoding="utf-8").read()
assert dsync_build._MiniToml(text).parse() == tomllib.loads(text)
'

echo "== venv with --system-site-packages ($($py --version), $($py -c 'import psycopg; print("psycopg", psycopg.__version__)'))"
"$py" -m venv --system-site-packages "$work/venv"
venv=$work/venv
echo "   $("$venv/bin/pip" --version)"

if timed "$work/noindex.log" "${offline[@]}" "$venv/bin/pip" install --no-index ./clients/python; then
	ok "pip install --no-index ./clients/python (${seconds} s)"
else
	show_log "$work/noindex.log"
	fail "pip install --no-index ./clients/python"
fi
"$venv/bin/pip" uninstall -y -q dsync >/dev/null 2>&1 || true

if timed "$work/plain.log" "${offline[@]}" "$venv/bin/pip" install -vv ./clients/python; then
	ok "pip install ./clients/python, offline: ${seconds} s"
	offline_seconds=$seconds
else
	show_log "$work/plain.log"
	fail "pip install ./clients/python, offline"
fi
tried=$(network_lines "$work/plain.log")
if [ -z "$tried" ]; then
	ok "that plain pip install tried no connection (pip -vv log)"
else
	echo "$tried" | sed 's/^/   /' | head -5
	fail "that plain pip install tried the network"
fi

reported=$(outside "$venv/bin/python" -c 'import dsync; print(dsync.__version__)' 2>"$work/import.log") || true
if [ "$reported" = "$version" ]; then
	ok "import dsync from outside the tree: dsync.__version__ is $version"
else
	show_log "$work/import.log" 3
	fail "import dsync from outside the tree: dsync.__version__ is '$reported', VERSION says $version"
fi
check "it is the installed copy, in the venv's site-packages" outside "$venv/bin/python" -c '
import dsync, sys
assert dsync.__file__.startswith(sys.prefix + "/lib/"), dsync.__file__
'
check "pip show dsync: version $version, license PostgreSQL, requires psycopg" \
	bash -c "'$venv/bin/pip' show dsync >'$work/show' &&
		grep -qx 'Version: $version' '$work/show' && grep -qx 'License: PostgreSQL' '$work/show' &&
		grep -qx 'Requires: psycopg' '$work/show'"
# pip check looks at every package the venv sees; Debian's own may miss
# some (python3-gi without pycairo): only dsync's requirements count here.
pip_check=$("$venv/bin/pip" check 2>&1 || true)
if grep -qi '^dsync ' <<<"$pip_check"; then
	grep -i '^dsync ' <<<"$pip_check" | sed 's/^/   /'
	fail "pip check: dsync's requirements are met"
else
	ok "pip check: dsync's requirements are met"
fi
# The installed files against the installed RECORD.
check "pip show -f lists the files of RECORD, each one matching its sha256 and size" "$venv/bin/python" - "$work" <<'EOF'
import base64, csv, hashlib, importlib.metadata, os, subprocess, sys
files = subprocess.run([sys.prefix + "/bin/pip", "show", "-f", "dsync"], check=True,
                       capture_output=True, text=True).stdout.split("Files:\n", 1)[1].split()
dist = importlib.metadata.distribution("dsync")
base = str(dist.locate_file(""))
record = {row[0]: row[1:] for row in csv.reader(dist.read_text("RECORD").splitlines())}
assert sorted(files) == sorted(record), (files, sorted(record))
for path, (digest, size) in record.items():
    if path.endswith(".dist-info/RECORD") or path.endswith(".pyc"):
        assert digest == size == "", path  # RECORD itself; pip's bytecode
        continue
    data = open(os.path.join(base, path), "rb").read()
    expected = "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    assert (digest, int(size)) == (expected, len(data)), path
EOF

echo "== the wheel and the sdist"
"$venv/bin/pip" wheel -q --no-deps --no-index -w "$work/wheel1" ./clients/python >"$work/wheel.log" 2>&1 ||
	show_log "$work/wheel.log"
"$venv/bin/pip" wheel -q --no-deps --no-index -w "$work/wheel2" ./clients/python >/dev/null 2>&1 || true
wheel=$work/wheel1/dsync-$version-py3-none-any.whl
check "pip wheel makes dsync-$version-py3-none-any.whl" test -f "$wheel"
check "the same wheel, byte for byte, when built again" cmp -s "$wheel" "$work/wheel2/${wheel##*/}"
check "the wheel: RECORD lists every file with sha256 (urlsafe base64, no padding) and size; METADATA and WHEEL as they should be; every .py under clients/python/dsync ships" \
	"$py" - "$wheel" "$version" clients/python/dsync <<'EOF'
import base64, csv, email.parser, hashlib, os, re, sys, zipfile
wheel, version, tree = sys.argv[1:]
zf = zipfile.ZipFile(wheel)
names = zf.namelist()
info = "dsync-%s.dist-info/" % version
rows = list(csv.reader(zf.read(info + "RECORD").decode().splitlines()))
assert sorted(r[0] for r in rows) == sorted(names), "RECORD and the zip differ"
for path, digest, size in rows:
    if path == info + "RECORD":
        assert digest == size == ""
        continue
    assert re.fullmatch(r"sha256=[A-Za-z0-9_-]{43}", digest), digest
    data = zf.read(path)
    want = "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    assert (digest, int(size)) == (want, len(data)), path
shipped = sorted(n for n in names if n.startswith("dsync/"))
expected = sorted("dsync/" + os.path.relpath(os.path.join(d, f), tree).replace(os.sep, "/")
                  for d, dirs, files in os.walk(tree) if "__pycache__" not in d
                  for f in files if f.endswith((".py", ".pyi")) or f == "py.typed")
assert shipped == expected, (shipped, expected)
assert all(n.startswith(("dsync/", info)) for n in names), names
wheel_file = zf.read(info + "WHEEL").decode()
for line in ("Wheel-Version: 1.0", "Root-Is-Purelib: true", "Tag: py3-none-any"):
    assert line in wheel_file.splitlines(), line
meta = email.parser.Parser().parsestr(zf.read(info + "METADATA").decode())
assert meta["Metadata-Version"] == "2.1" and meta["Name"] == "dsync" and meta["Version"] == version
assert meta["Requires-Python"] == ">=3.9" and meta["License"] == "PostgreSQL"
assert meta.get_all("Requires-Dist") == ["psycopg>=3.1", 'psycopg-pool>=3.1; extra == "pool"'], meta.get_all("Requires-Dist")
assert meta.get_all("Provides-Extra") == ["pool"]
assert "License :: OSI Approved :: PostgreSQL License" in meta.get_all("Classifier")
assert meta["Description-Content-Type"] == "text/markdown" and meta.get_payload().startswith("# dsync for Python")
print("   %d files in the wheel: %s" % (len(names), ", ".join(shipped)))
EOF

sdist=$(cd clients/python && "$py" -c '
import sys
sys.path.insert(0, "build_backend")
import dsync_build
print(dsync_build.build_sdist(sys.argv[1]))' "$work/sdist") || true
check "build_sdist makes dsync-$version.tar.gz with PKG-INFO, pyproject.toml, the backend and the package" \
	bash -c "[ '$sdist' = 'dsync-$version.tar.gz' ] && tar -tzf '$work/sdist/$sdist' >'$work/sdist.list' &&
		grep -qx 'dsync-$version/PKG-INFO' '$work/sdist.list' &&
		grep -qx 'dsync-$version/pyproject.toml' '$work/sdist.list' &&
		grep -qx 'dsync-$version/build_backend/dsync_build.py' '$work/sdist.list' &&
		grep -qx 'dsync-$version/dsync/__init__.py' '$work/sdist.list' &&
		grep -qx 'dsync-$version/dsync/_version.py' '$work/sdist.list'"
mkdir "$work/from-sdist"
tar -xzf "$work/sdist/$sdist" -C "$work/from-sdist" 2>/dev/null || true
"$venv/bin/pip" wheel -q --no-deps --no-index -w "$work/wheel3" "$work/from-sdist/dsync-$version" >/dev/null 2>&1 || true
check "the wheel built from the sdist is the same wheel" cmp -s "$wheel" "$work/wheel3/${wheel##*/}"
if "${offline[@]}" "$venv/bin/pip" install -q --no-index --force-reinstall --no-deps "$work/sdist/$sdist" >"$work/sdist.log" 2>&1; then
	ok "pip install of the sdist, offline"
else
	show_log "$work/sdist.log"
	fail "pip install of the sdist, offline"
fi

echo "== pip install -e, and the [pool] extra"
"$venv/bin/pip" uninstall -y -q dsync >/dev/null 2>&1 || true
if "${offline[@]}" "$venv/bin/pip" install -q -e ./clients/python >"$work/editable.log" 2>&1; then
	ok "pip install -e ./clients/python, offline"
else
	show_log "$work/editable.log"
	fail "pip install -e ./clients/python, offline"
fi
check "the editable install imports dsync from the tree, version $version" outside "$venv/bin/python" -c '
import dsync, sys
assert dsync.__file__ == sys.argv[1], dsync.__file__
assert dsync.__version__ == sys.argv[2], dsync.__version__
' "$top/clients/python/dsync/__init__.py" "$version"
"$venv/bin/pip" uninstall -y -q dsync >/dev/null 2>&1 || true
check "pip uninstall removes it" bash -c "! (cd '$work' && '$venv/bin/python' -c 'import dsync' 2>/dev/null)"
if "${offline[@]}" "$venv/bin/pip" install -q './clients/python[pool]' >"$work/pool.log" 2>&1; then
	ok "pip install './clients/python[pool]', offline (Debian's python3-psycopg-pool)"
else
	show_log "$work/pool.log"
	fail "pip install './clients/python[pool]', offline"
fi

echo "== venv without system site packages"
"$py" -m venv "$work/plain"
plain=$work/plain
timed "$work/nodeps-fail.log" "${offline[@]}" "$plain/bin/pip" install ./clients/python && status=0 || status=$?
if [ "$status" -ne 0 ] && grep -q 'dsync needs psycopg 3, which .* does not have, and pip cannot fetch it' "$work/nodeps-fail.log" &&
	grep -q 'apt-get install python3-psycopg' "$work/nodeps-fail.log" && [ -z "$(network_lines "$work/nodeps-fail.log")" ]; then
	ok "pip install ./clients/python fails there, offline, after ${seconds} s, saying what to do, with no retry of the index"
	grep -Eo 'dsync needs.*' "$work/nodeps-fail.log" | cut -c1-120 | sed 's/^/   /' || true
else
	show_log "$work/nodeps-fail.log"
	fail "pip install ./clients/python without psycopg, offline: expected dsync's message and no retry (exit $status)"
fi
# A requirements file may name other sources: the check leaves it to pip.
echo "$top/clients/python" >"$work/req.txt"
timed "$work/req-fail.log" "${offline[@]}" "$plain/bin/pip" install -r "$work/req.txt" && status=0 || status=$?
if [ "$status" -ne 0 ] && grep -q 'No matching distribution found for psycopg' "$work/req-fail.log" &&
	! grep -q 'dsync needs psycopg' "$work/req-fail.log"; then
	ok "pip install -r FILE: the check stays out of the way (pip's own failure after ${seconds} s)"
else
	show_log "$work/req-fail.log"
	fail "pip install -r FILE without psycopg, offline: expected pip's own failure (exit $status)"
fi
# With the check off, pip tries the index itself and cannot fetch psycopg.
timed "$work/nocheck-fail.log" env DSYNC_BUILD_CHECK=0 "${offline[@]}" "$plain/bin/pip" install ./clients/python && status=0 || status=$?
if [ "$status" -ne 0 ] && grep -q 'No matching distribution found for psycopg' "$work/nocheck-fail.log"; then
	ok "with DSYNC_BUILD_CHECK=0 pip tries the index itself and fails after ${seconds} s: 'No matching distribution found for psycopg'"
else
	show_log "$work/nocheck-fail.log"
	fail "pip install ./clients/python with DSYNC_BUILD_CHECK=0, offline: expected pip's own failure (exit $status)"
fi
if "${offline[@]}" "$plain/bin/pip" install -q --no-deps ./clients/python >"$work/nodeps.log" 2>&1; then
	ok "pip install --no-deps ./clients/python installs the package itself"
else
	show_log "$work/nodeps.log"
	fail "pip install --no-deps ./clients/python"
fi
check "its metadata says $version" outside "$plain/bin/python" -c '
import importlib.metadata, sys
assert importlib.metadata.version("dsync") == sys.argv[1]' "$version"
if outside "$plain/bin/python" -c 'import dsync' >"$work/noimport.log" 2>&1; then
	fail "import dsync without psycopg: expected ModuleNotFoundError for psycopg, it imported"
elif grep -q "No module named 'psycopg'" "$work/noimport.log"; then
	ok "import dsync there fails as it should: $(tail -1 "$work/noimport.log")"
else
	show_log "$work/noimport.log" 3
	fail "import dsync without psycopg: not the missing psycopg error"
fi

echo "== the system's Python"
check "it has no dsync installed (everything went into venvs)" outside "$py" -c '
import importlib.metadata
try:
    importlib.metadata.version("dsync")
except importlib.metadata.PackageNotFoundError:
    pass
else:
    raise SystemExit("dsync is installed in the system Python")'

[ -z "${offline_seconds:-}" ] || echo "== the plain offline pip install took ${offline_seconds} s"
finish
