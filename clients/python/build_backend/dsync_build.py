"""The build backend of the dsync Python package (PEP 517, PEP 660).

Standard library only, and in the tree (pyproject.toml: requires = [],
backend-path = ["build_backend"]), so that `pip install ./clients/python`
needs no network: with setuptools as the backend, pip's build isolation
would first fetch setuptools from PyPI.

It reads the [project] table of pyproject.toml and builds
- a pure-Python wheel (py3-none-any) with every .py and .pyi file under
  dsync/, subpackages included, and dsync/py.typed if there is one;
- an sdist holding those, pyproject.toml, README.md, this backend and
  PKG-INFO, from which the same wheel builds;
- an editable wheel (pip install -e): a .pth file naming this directory.
The version is __version__ in dsync/_version.py (scripts/set-version.sh
writes it).  A LICENSE file next to pyproject.toml, or at the top of the
dsync repository when building from it, ships too.

Builds are reproducible: files in sorted order, fixed timestamps
(SOURCE_DATE_EPOCH if set), fixed permissions and owners.
"""

import base64
import csv
import gzip
import hashlib
import io
import os
import re
import sys
import tarfile
import time
import zipfile

PACKAGE = "dsync"
VERSION_FILE = "dsync/_version.py"
SHIPPED_SUFFIXES = (".py", ".pyi")
SHIPPED_NAMES = ("py.typed",)
LICENSE_NAMES = ("LICENSE", "LICENSE.txt", "LICENSE.md", "COPYING")
GENERATOR = "dsync_build"
TAG = "py3-none-any"

# [project] keys this backend turns into metadata; any other is refused
# rather than left out silently.
KNOWN_KEYS = {
    "name", "version", "description", "readme", "requires-python", "license",
    "authors", "maintainers", "keywords", "classifiers", "urls",
    "dependencies", "optional-dependencies", "dynamic",
}


class BuildError(Exception):
    pass


# ---------------------------------------------------------------- TOML

def _load_toml(text):
    try:
        import tomllib  # Python 3.11 and later
    except ImportError:
        try:
            import tomli as tomllib
        except ImportError:
            return _MiniToml(text).parse()
    return tomllib.loads(text)


class _MiniToml:
    """The part of TOML that pyproject.toml uses, for Python 3.9 and 3.10
    without tomli: [tables], key = value with bare, quoted or dotted keys,
    basic and literal strings, integers, booleans, arrays over several
    lines and inline tables.  Anything else is an error, never a guess.
    test/package_python.sh checks that it reads pyproject.toml as tomllib
    does."""

    _ESCAPES = {'"': '"', "\\": "\\", "n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f"}

    def __init__(self, text):
        self.s = text
        self.i = 0

    def error(self, what):
        line = self.s.count("\n", 0, self.i) + 1
        return BuildError("pyproject.toml line %d: %s (this Python has no tomllib: "
                          "install tomli or use Python 3.11 or later)" % (line, what))

    def skip(self, newlines):
        while self.i < len(self.s):
            c = self.s[self.i]
            if c in " \t" or (newlines and c in "\r\n"):
                self.i += 1
            elif c == "#":
                while self.i < len(self.s) and self.s[self.i] != "\n":
                    self.i += 1
            else:
                break

    def peek(self):
        return self.s[self.i] if self.i < len(self.s) else ""

    def expect(self, c):
        if self.peek() != c:
            raise self.error("expected %r" % c)
        self.i += 1

    def parse(self):
        root = {}
        table = root
        while True:
            self.skip(True)
            if self.i >= len(self.s):
                return root
            if self.peek() == "[":
                self.i += 1
                if self.peek() == "[":
                    raise self.error("arrays of tables are not supported")
                self.skip(False)
                path = self.key()
                self.skip(False)
                self.expect("]")
                table = root
                for k in path:
                    table = table.setdefault(k, {})
                    if not isinstance(table, dict):
                        raise self.error("%s is not a table" % ".".join(path))
            else:
                self.pair(table)
            self.skip(False)
            if self.peek() not in ("\n", "\r", ""):
                raise self.error("expected the end of the line")

    def key(self):
        parts = []
        while True:
            self.skip(False)
            c = self.peek()
            if c == '"':
                parts.append(self.basic_string())
            elif c == "'":
                parts.append(self.literal_string())
            else:
                m = re.compile(r"[A-Za-z0-9_-]+").match(self.s, self.i)
                if not m:
                    raise self.error("expected a key")
                parts.append(m.group())
                self.i = m.end()
            self.skip(False)
            if self.peek() != ".":
                return parts
            self.i += 1

    def pair(self, table):
        path = self.key()
        self.expect("=")
        self.skip(False)
        value = self.value()
        for k in path[:-1]:
            table = table.setdefault(k, {})
        if path[-1] in table:
            raise self.error("%s is given twice" % ".".join(path))
        table[path[-1]] = value

    def value(self):
        c = self.peek()
        if self.s.startswith('"""', self.i) or self.s.startswith("'''", self.i):
            raise self.error("multi-line strings are not supported")
        if c == '"':
            return self.basic_string()
        if c == "'":
            return self.literal_string()
        if c == "[":
            self.i += 1
            items = []
            while True:
                self.skip(True)
                if self.peek() == "]":
                    self.i += 1
                    return items
                items.append(self.value())
                self.skip(True)
                if self.peek() == ",":
                    self.i += 1
                elif self.peek() != "]":
                    raise self.error("expected , or ] in an array")
        if c == "{":
            self.i += 1
            table = {}
            self.skip(False)
            if self.peek() == "}":
                self.i += 1
                return table
            while True:
                self.pair(table)
                self.skip(False)
                if self.peek() == "}":
                    self.i += 1
                    return table
                self.expect(",")
        m = re.compile(r"(true|false|[+-]?[0-9]+)(?=[\s,\]}#]|$)").match(self.s, self.i)
        if not m:
            raise self.error("unsupported value")
        self.i = m.end()
        word = m.group(1)
        if word in ("true", "false"):
            return word == "true"
        return int(word)

    def basic_string(self):
        self.expect('"')
        out = []
        while True:
            c = self.peek()
            if c in ("", "\n"):
                raise self.error("unterminated string")
            self.i += 1
            if c == '"':
                return "".join(out)
            if c != "\\":
                out.append(c)
                continue
            e = self.peek()
            self.i += 1
            if e in self._ESCAPES:
                out.append(self._ESCAPES[e])
            elif e in ("u", "U"):
                n = 4 if e == "u" else 8
                digits = self.s[self.i:self.i + n]
                if not re.fullmatch(r"[0-9A-Fa-f]{%d}" % n, digits):
                    raise self.error("bad \\%s escape" % e)
                out.append(chr(int(digits, 16)))
                self.i += n
            else:
                raise self.error("bad escape \\%s" % e)

    def literal_string(self):
        self.expect("'")
        end = self.s.find("'", self.i)
        if end < 0 or "\n" in self.s[self.i:end]:
            raise self.error("unterminated string")
        text = self.s[self.i:end]
        self.i = end + 1
        return text


# ---------------------------------------------------------------- metadata

def _root():
    # PEP 517: the hooks run in the root of the source tree.
    return os.getcwd()


def _read(path, mode="r"):
    with open(path, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as f:
        return f.read()


def _pyproject():
    data = _load_toml(_read(os.path.join(_root(), "pyproject.toml")))
    project = data.get("project")
    if not isinstance(project, dict):
        raise BuildError("pyproject.toml has no [project] table")
    unknown = sorted(set(project) - KNOWN_KEYS)
    if unknown:
        raise BuildError("pyproject.toml: [project] keys this backend does not support: %s"
                         % ", ".join(unknown))
    if project.get("name") != PACKAGE:
        raise BuildError("pyproject.toml: this backend builds the %r package only" % PACKAGE)
    return project


def _version(project):
    if "version" in project:
        raise BuildError("pyproject.toml: the version comes from %s "
                         "(dynamic = [\"version\"]), not from [project]" % VERSION_FILE)
    if "version" not in project.get("dynamic", []):
        raise BuildError("pyproject.toml: [project] must say dynamic = [\"version\"]")
    path = os.path.join(_root(), VERSION_FILE)
    if not os.path.exists(path):
        raise BuildError("%s is missing (bash scripts/set-version.sh X.Y.Z writes it)" % VERSION_FILE)
    m = re.search(r"""^__version__\s*=\s*["']([^"']+)["']\s*$""", _read(path), re.M)
    if not m:
        raise BuildError("%s has no __version__ = \"X.Y.Z\" line" % VERSION_FILE)
    version = m.group(1)
    # Normalized PEP 440 only, so that the file names need no normalizing.
    if not re.fullmatch(r"[0-9]+(\.[0-9]+)*((a|b|rc)[0-9]+)?(\.post[0-9]+)?(\.dev[0-9]+)?", version):
        raise BuildError("%s: %r is not a normalized PEP 440 version" % (VERSION_FILE, version))
    return version


def _license_file():
    """The license text to ship and its name in the distribution, or None."""
    here = _root()
    for base in (here, os.path.join(here, os.pardir, os.pardir)):
        for name in LICENSE_NAMES:
            path = os.path.join(base, name)
            if os.path.isfile(path):
                return path, name
    return None


def _people(entries, field):
    names, emails = [], []
    for person in entries:
        name, email = person.get("name"), person.get("email")
        if email:
            emails.append("%s <%s>" % (name, email) if name else email)
        elif name:
            names.append(name)
    lines = []
    if names:
        lines.append("%s: %s" % (field, ", ".join(names)))
    if emails:
        lines.append("%s-email: %s" % (field, ", ".join(emails)))
    return lines


def _metadata(project, version):
    """Core metadata 2.1 (METADATA in the wheel, PKG-INFO in the sdist)."""
    def one_line(key, value):
        if not isinstance(value, str) or "\n" in value:
            raise BuildError("pyproject.toml: %s must be a one-line string" % key)
        return value

    lines = ["Metadata-Version: 2.1", "Name: " + PACKAGE, "Version: " + version]
    if "description" in project:
        lines.append("Summary: " + one_line("description", project["description"]))
    if project.get("keywords"):
        lines.append("Keywords: " + ",".join(project["keywords"]))
    lines += _people(project.get("authors", []), "Author")
    lines += _people(project.get("maintainers", []), "Maintainer")
    lic = project.get("license")
    if isinstance(lic, str):  # PEP 639 spelling: an SPDX expression
        lines.append("License: " + one_line("license", lic))
    elif isinstance(lic, dict) and "text" in lic:
        lines.append("License: " + one_line("license.text", lic["text"]))
    elif lic is not None:
        raise BuildError("pyproject.toml: license must be a string or {text = \"...\"}")
    if _license_file():
        lines.append("License-File: " + _license_file()[1])
    for classifier in project.get("classifiers", []):
        lines.append("Classifier: " + one_line("classifiers", classifier))
    for label, url in project.get("urls", {}).items():
        lines.append("Project-URL: %s, %s" % (label, one_line("urls", url)))
    if "requires-python" in project:
        lines.append("Requires-Python: " + one_line("requires-python", project["requires-python"]))
    for dep in project.get("dependencies", []):
        lines.append("Requires-Dist: " + one_line("dependencies", dep))
    for extra, deps in project.get("optional-dependencies", {}).items():
        if not re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", extra):
            raise BuildError("pyproject.toml: extra %r is not a normalized name" % extra)
        lines.append("Provides-Extra: " + extra)
        for dep in deps:
            dep = one_line("optional-dependencies", dep)
            if ";" in dep:
                req, marker = dep.split(";", 1)
                dep = '%s; (%s) and extra == "%s"' % (req.strip(), marker.strip(), extra)
            else:
                dep = '%s; extra == "%s"' % (dep, extra)
            lines.append("Requires-Dist: " + dep)
    body = ""
    readme = project.get("readme")
    if readme is not None:
        if isinstance(readme, str):
            readme = {"file": readme}
        if "file" in readme:
            body = _read(os.path.join(_root(), readme["file"]))
            default_type = {".md": "text/markdown", ".rst": "text/x-rst"}.get(
                os.path.splitext(readme["file"])[1].lower(), "text/plain")
        else:
            body = readme.get("text", "")
            default_type = "text/plain"
        lines.append("Description-Content-Type: " + readme.get("content-type", default_type))
    text = "\n".join(lines) + "\n"
    if body:
        text += "\n" + body.rstrip("\n") + "\n"
    return text


# ---------------------------------------------------------------- files

def _package_files():
    """(path relative to the root, with /) of every file of the package."""
    top = os.path.join(_root(), PACKAGE)
    if not os.path.isfile(os.path.join(top, "__init__.py")):
        raise BuildError("%s/__init__.py is missing" % PACKAGE)
    found = []
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and not d.startswith("."))
        rel = os.path.relpath(dirpath, _root()).replace(os.sep, "/")
        for name in sorted(filenames):
            if name.endswith(SHIPPED_SUFFIXES) or name in SHIPPED_NAMES:
                found.append(rel + "/" + name)
    return found


def _epoch():
    # Zip cannot go before 1980.
    return max(int(os.environ.get("SOURCE_DATE_EPOCH", "315532800")), 315532800)


def _dist_info(version):
    return "%s-%s.dist-info" % (PACKAGE, version)


def _dist_info_files(project, version, editable=False):
    wheel = ("Wheel-Version: 1.0\nGenerator: %s\nRoot-Is-Purelib: true\nTag: %s\n"
             % (GENERATOR, TAG))
    files = [("METADATA", _metadata(project, version).encode("utf-8")),
             ("WHEEL", wheel.encode("utf-8"))]
    lic = _license_file()
    if lic:
        files.append((lic[1], _read(lic[0], "rb")))
    if not editable:
        files.append(("top_level.txt", (PACKAGE + "\n").encode("utf-8")))
    return files


def _record_hash(data):
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def _write_wheel(wheel_directory, version, contents):
    """Writes the wheel of contents (arcname, bytes), adding its RECORD;
    returns its file name."""
    name = "%s-%s-%s.whl" % (PACKAGE, version, TAG)
    record_name = _dist_info(version) + "/RECORD"
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    for arcname, data in contents:
        writer.writerow([arcname, _record_hash(data), str(len(data))])
    writer.writerow([record_name, "", ""])
    contents = list(contents) + [(record_name, record.getvalue().encode("utf-8"))]
    date_time = time.gmtime(_epoch())[:6]
    os.makedirs(wheel_directory, exist_ok=True)
    path = os.path.join(wheel_directory, name)
    tmp = path + ".part"
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for arcname, data in contents:
            info = zipfile.ZipInfo(arcname, date_time)
            info.external_attr = 0o100644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data)
    os.replace(tmp, path)
    return name


# ---------------------------------------------------------------- PEP 517 / 660 hooks

def _check_dependencies():
    """Stop at once, saying what to do, when psycopg is missing and pip
    could only fail to fetch it (dsync_deps.py)."""
    import dsync_deps
    try:
        dsync_deps.check()
    except dsync_deps.MissingDependency as e:
        sys.stderr.write("\n%s\n\n" % e)
        sys.stderr.flush()
        raise SystemExit(1)


def get_requires_for_build_wheel(config_settings=None):
    _check_dependencies()
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    _check_dependencies()
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    project = _pyproject()
    version = _version(project)
    dist_info = os.path.join(metadata_directory, _dist_info(version))
    os.makedirs(dist_info, exist_ok=True)
    for name, data in _dist_info_files(project, version):
        with open(os.path.join(dist_info, name), "wb") as f:
            f.write(data)
    return _dist_info(version)


def prepare_metadata_for_build_editable(metadata_directory, config_settings=None):
    return prepare_metadata_for_build_wheel(metadata_directory, config_settings)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    project = _pyproject()
    version = _version(project)
    contents = [(rel, _read(os.path.join(_root(), rel), "rb")) for rel in _package_files()]
    contents += [(_dist_info(version) + "/" + name, data)
                 for name, data in _dist_info_files(project, version)]
    return _write_wheel(wheel_directory, version, contents)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """A wheel whose .pth file puts this directory on sys.path, so that
    `import dsync` loads the files in it."""
    project = _pyproject()
    version = _version(project)
    _package_files()  # the package must be there
    pth = (os.path.abspath(_root()) + "\n").encode("utf-8")
    contents = [("__editable__.%s-%s.pth" % (PACKAGE, version), pth)]
    contents += [(_dist_info(version) + "/" + name, data)
                 for name, data in _dist_info_files(project, version, editable=True)]
    return _write_wheel(wheel_directory, version, contents)


def build_sdist(sdist_directory, config_settings=None):
    project = _pyproject()
    version = _version(project)
    base = "%s-%s" % (PACKAGE, version)
    here = os.path.dirname(os.path.abspath(__file__))
    backend_dir = os.path.relpath(here, _root()).replace(os.sep, "/")
    members = [("pyproject.toml", "pyproject.toml")]
    readme = project.get("readme")
    readme = readme if isinstance(readme, str) else (readme or {}).get("file")
    if readme:
        members.append((readme, readme))
    lic = _license_file()
    if lic:
        members.append((lic[0], lic[1]))
    for module in sorted(m for m in os.listdir(here) if m.endswith(".py")):
        members.append((os.path.join(here, module), backend_dir + "/" + module))
    members += [(rel, rel) for rel in _package_files()]
    contents = [(arcname, _read(os.path.join(_root(), src), "rb")) for src, arcname in members]
    contents.append(("PKG-INFO", _metadata(project, version).encode("utf-8")))
    contents.sort()
    name = base + ".tar.gz"
    os.makedirs(sdist_directory, exist_ok=True)
    path = os.path.join(sdist_directory, name)
    tmp = path + ".part"
    with open(tmp, "wb") as raw, \
            gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=_epoch()) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for arcname, data in contents:
            info = tarfile.TarInfo(base + "/" + arcname)
            info.size = len(data)
            info.mtime = _epoch()
            info.mode = 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))
    os.replace(tmp, path)
    return name
