"""Checks that the reference names everything dsync has, so that a thing
added without its reference entry fails here:

  - functions, views and settings of the installed extension (read from
    the database of DSYNC_ADMIN_DSN);
  - SQLSTATEs the extension raises (read from src/ and the installed
    PL/pgSQL functions);
  - notification kinds and payload keys (read from src/);
  - the commands and exit codes of the dsync tool (read from cli/);
  - the exports and class members of the Python and Node clients (read by
    importing them).

    python3 clients/with_server.py python3 test/docs_reference.py

DSYNC_ADMIN_DSN is a superuser connection to a database where dsync is
created; clients/with_server.py provides one.  The Node check runs `node`
in clients/node, which needs its node_modules (`npm ci`).  What counts as
named:
  - a function: its name in backquotes, or followed by "(", anywhere in
    the reference (docs/reference/*.md);
  - a view: a table row "| view `name` ... | `col, col, ...` |" whose
    backquoted list is exactly the view's columns;
  - a setting: a row of docs/reference/settings.md's table starting
    "| `dsync.name` |";
  - a SQLSTATE: a row of docs/reference/errors.md's table whose second
    cell has the five characters (as in "22015 / 22008").  The SQLSTATEs
    are those of every ereport() whose level can be ERROR or FATAL in
    src/**/*.[ch] (comments removed): its errcode(ERRCODE_X) mapped to five
    characters through PostgreSQL's utils/errcodes.h (in the server's
    INCLUDEDIR-SERVER, from the pg_config view), XX000 when it has no
    errcode() (PostgreSQL's default), and an errcode() of anything but an
    ERRCODE_ macro fails as one the test cannot tell; every elog(ERROR or
    FATAL) is XX000; and every RAISE of level EXCEPTION (the default) in the
    installed extension's PL/pgSQL functions: its USING ERRCODE, a
    SQLSTATE or a condition name looked up in the server's
    SHAREDIR/errcodes.txt as PL/pgSQL does (the first error, not warning,
    of that name), or P0001 without one.  Internal errors
    ("can't happen" checks, XX000) are not exempt: errors.md names them
    as bugs to report;
  - a notification: each event kind as a row of
    docs/reference/notifications.md's table starting "| `kind` |", and each
    payload key in backquotes and each fixed value of a key in backquotes
    or as "value", anywhere on that page.  They are read from the C string
    literals of src/**/*.c, which write JSON only for notification payloads:
    a key is \"key\": in a literal; a kind is the value of \"event\": in a
    literal, or, for \"event\":\"%s\", every plain word literal among the
    arguments of that call; a fixed value is \"key\":\"value\" in a
    literal (other than \"event\");
  - a command of the dsync tool: "`word`" or "`dsync word" in
    docs/reference/cli.md, for every word of cli/*.c's command table
    ({"word", DSYNC_CMD_...}) and every command word main() compares
    with strcmp(cmd, "word");
  - an exit code of the tool: a row of cli.md's table starting "| N |"
    for every #define EXIT_NAME N of cli/*.h and every integer literal
    passed to exit() or _exit() in cli/*.c, and a row "| 128+N |" if the
    tool returns 128 + a signal number;
  - a Python export: every name of dsync.__all__ (clients/python/dsync)
    in backquotes, alone or called (`name` or `name(...)`), in
    clients/python/README.md; a member of an exported class that is not
    an exception (every name of dir(cls) not starting with "_" and not
    inherited from a built-in type, and every field of a dataclass) as
    `name`, `.name(` or `name(`, or as an attribute in backquotes
    (`lock.name`, `x.name(...)`), in that README;
  - a Node export: every key of require('clients/node') in backquotes,
    alone or called, in clients/node/README.md; a member of an exported
    class that is not an Error (every own property name, not starting
    with "_" and not "constructor", of its prototype and of its
    ancestors' up to Object.prototype or EventEmitter.prototype, and its
    own static ones) named as a Python member is, in that README.
Prints one line per object missing and "N passed, N failed" (checks: the
functions, the views, the settings, the SQLSTATEs, the notifications, the
tool's commands, its exit codes, the Python client, the Node client).
"""

import dataclasses
import glob
import importlib
import inspect
import json
import os
import re
import subprocess
import sys

import psycopg

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def read(*path):
    return open(os.path.join(TOP, *path), encoding="utf-8").read()


def reference_text():
    """The reference pages, concatenated."""
    files = sorted(glob.glob(os.path.join(TOP, "docs", "reference", "*.md")))
    if not files:
        sys.exit("no docs/reference/*.md")
    return "\n".join(open(f, encoding="utf-8").read() for f in files)


def extension_objects(conn):
    """(function names, {view: [columns]}, setting names) of the extension."""
    functions = sorted({r[0] for r in conn.execute(
        "SELECT p.proname FROM pg_depend d JOIN pg_proc p ON p.oid = d.objid"
        " WHERE d.classid = 'pg_proc'::regclass AND d.deptype = 'e'"
        "   AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'dsync')")})
    views = {}
    for view, column in conn.execute(
            "SELECT c.relname, a.attname FROM pg_depend d JOIN pg_class c ON c.oid = d.objid"
            " JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped"
            " WHERE d.classid = 'pg_class'::regclass AND d.deptype = 'e' AND c.relkind = 'v'"
            "   AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'dsync')"
            " ORDER BY c.relname, a.attnum"):
        views.setdefault(view, []).append(column)
    settings = [r[0] for r in conn.execute(
        "SELECT name FROM pg_settings WHERE name LIKE 'dsync.%' ORDER BY name")]
    return functions, views, settings


def plpgsql_sources(conn):
    """[(function name, body)] of the extension's PL/pgSQL functions."""
    return conn.execute(
        "SELECT p.proname, p.prosrc FROM pg_depend d JOIN pg_proc p ON p.oid = d.objid"
        " JOIN pg_language l ON l.oid = p.prolang"
        " WHERE d.classid = 'pg_proc'::regclass AND d.deptype = 'e' AND l.lanname = 'plpgsql'"
        "   AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'dsync')"
        " ORDER BY 1").fetchall()


def server_paths(conn):
    """{name: setting} of the server's pg_config view."""
    return dict(conn.execute("SELECT name, setting FROM pg_config").fetchall())


# --- C source -------------------------------------------------------------

def strip_c_comments(text):
    """text with /* */ and // comments blanked (newlines kept), strings intact."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i = j + 1
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def calls(text, name):
    """(offset, argument text) of every call name(...) in text."""
    for m in re.finditer(r"\b%s\s*\(" % re.escape(name), text):
        depth, j, quote = 1, m.end(), None
        while depth and j < len(text):
            c = text[j]
            if quote:
                if c == "\\":
                    j += 1
                elif c == quote:
                    quote = None
            elif c in "\"'":
                quote = c
            elif c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
            j += 1
        yield m.start(), text[m.end():j - 1]


def c_files(directory, pattern):
    for path in sorted(glob.glob(os.path.join(TOP, directory, "**", pattern), recursive=True)):
        yield os.path.relpath(path, TOP), strip_c_comments(open(path, encoding="utf-8").read())


def c_literals(text):
    """The contents of the C string literals in text, still escaped."""
    return re.findall(r'"((?:[^"\\\n]|\\.)*)"', text)


def sqlstates_raised(conn, paths):
    """({SQLSTATE: [where]}, [problems]) of what the extension raises."""
    header = os.path.join(paths["INCLUDEDIR-SERVER"], "utils", "errcodes.h")
    macros = {m: "".join(chars.split("','"))
              for m, chars in re.findall(r"#define (ERRCODE_\w+) MAKE_SQLSTATE\('(.','.','.','.','.)'\)",
                                         open(header).read())}
    conditions = {}
    for line in open(os.path.join(paths["SHAREDIR"], "errcodes.txt")):
        f = line.split()
        if len(f) == 4 and f[1] == "E":       # PL/pgSQL knows errors only, and
            conditions.setdefault(f[3], f[0])   # takes the first of a name
    if not macros or not conditions:
        sys.exit(f"no SQLSTATEs read from {header} or errcodes.txt")
    raised, problems = {}, []
    for path, text in c_files("src", "*.[ch]"):
        for offset, args in list(calls(text, "ereport")) + list(calls(text, "elog")):
            level = re.split(r",", args, 1)[0]
            if not re.search(r"\b(ERROR|FATAL|PANIC)\b", level):
                continue
            where = f"{path}:{text.count(chr(10), 0, offset) + 1}"
            codes = re.findall(r"\berrcode\s*\(\s*([^()]*?)\s*\)", args)
            if text.startswith("elog", offset) or not codes:
                codes = ["ERRCODE_INTERNAL_ERROR"]
            for code in codes:
                if code not in macros:
                    problems.append(f"SQLSTATE of errcode({code}) at {where} cannot be told")
                    continue
                raised.setdefault(macros[code], []).append(f"{code} {where}")
    for proname, body in plpgsql_sources(conn):
        for stmt in re.findall(r"\bRAISE\b(.*?);", body, re.S | re.I):
            words = stmt.split()
            if words and words[0].upper() in ("DEBUG", "LOG", "INFO", "NOTICE", "WARNING"):
                continue
            if not words:
                continue        # RAISE; re-raises what was caught
            code = re.search(r"\bERRCODE\s*=\s*'([^']*)'", stmt, re.I)
            named = re.match(r"(?:EXCEPTION\s+)?(?!USING\b)([a-z_]+)\b(?!\s*')", stmt.strip(), re.I)
            if code:
                code = code.group(1)
            elif named and named.group(1).lower() in conditions:
                code = named.group(1).lower()
            else:
                code = "P0001"
            state = code if re.fullmatch(r"[0-9A-Z]{5}", code) else conditions.get(code.lower())
            if state is None:
                problems.append(f"SQLSTATE of ERRCODE '{code}' in {proname}() cannot be told")
                continue
            raised.setdefault(state, []).append(f"{code} in {proname}()")
    return raised, problems


def documented_sqlstates(page):
    """The SQLSTATEs in the second cell of the rows of page's tables."""
    found = set()
    for line in page.splitlines():
        if not line.startswith("|"):
            continue
        cells, cell, quoted = [], "", False
        for c in line[1:]:
            if c == "`":
                quoted = not quoted
            if c == "|" and not quoted:
                cells.append(cell)
                cell = ""
            else:
                cell += c
        if len(cells) > 1:
            found.update(re.findall(r"\b[0-9A-Z]{5}\b", cells[1]))
    return found


def notification_names():
    """(kinds, keys, {key: values}) written into notification payloads."""
    kinds, keys, values = set(), set(), {}
    for path, text in c_files("src", "*.c"):
        for literal in c_literals(text):
            keys.update(re.findall(r'\\"(\w+)\\":', literal))
            for key, value in re.findall(r'\\"(\w+)\\":\\"(\w+)\\"', literal):
                if key == "event":
                    kinds.add(value)
                else:
                    values.setdefault(key, set()).add(value)
        for _, args in calls(text, "appendStringInfo"):
            literals = c_literals(args)
            if literals and '\\"event\\":\\"%s\\"' in literals[0]:
                kinds.update(v for v in literals[1:] if re.fullmatch(r"[a-z_]+", v))
    return kinds, keys, values


def cli_names():
    """(commands, exit codes) of the dsync tool, from cli/."""
    commands, codes = set(), set()
    for path, text in c_files("cli", "*.[ch]"):
        commands.update(re.findall(r'\{\s*"(\w+)"\s*,\s*DSYNC_CMD_\w+\s*\}', text))
        commands.update(re.findall(r'\bstrcmp\s*\(\s*cmd\s*,\s*"(\w+)"\s*\)', text))
        codes.update(re.findall(r"#define\s+EXIT_\w+\s+(\d+)\b", text))
        codes.update(re.findall(r"\b_?exit\s*\(\s*(\d+)\s*\)", text))
        if re.search(r"\breturn\s+128\s*\+", text):
            codes.add("128+N")
    return commands, codes


def named_member(name, text):
    """name as `name`, `x.name ...`, .name( or name( in text."""
    return (f"`{name}`" in text or f".{name}(" in text
            or re.search(r"(?<![\w.])%s\(" % re.escape(name), text)
            or re.search(r"`[^`\n]*\.%s\b[^`\n]*`" % re.escape(name), text))


def python_api():
    """(exports, {class: [members]}) of clients/python's dsync."""
    sys.path.insert(0, os.path.join(TOP, "clients", "python"))
    dsync = importlib.import_module("dsync")
    exports = list(getattr(dsync, "__all__", None)
                   or [n for n in vars(dsync) if not n.startswith("_")])
    classes = {}
    for name in exports:
        cls = getattr(dsync, name)
        if not inspect.isclass(cls) or issubclass(cls, BaseException):
            continue
        builtin = {a for base in cls.__mro__ if base.__module__ == "builtins" for a in dir(base)}
        members = {a for a in dir(cls) if not a.startswith("_") and a not in builtin}
        if dataclasses.is_dataclass(cls):
            members.update(f.name for f in dataclasses.fields(cls) if not f.name.startswith("_"))
        classes[name] = sorted(members)
    return exports, classes


NODE_API = r"""
const m = require('.');
let EventEmitter = null;
try { EventEmitter = require('events'); } catch (e) {}
const classes = {};
for (const [name, v] of Object.entries(m)) {
  if (typeof v !== 'function' || !/^class\b/.test(Function.prototype.toString.call(v))
      || v.prototype instanceof Error) continue;
  const names = new Set();
  for (let p = v.prototype; p && p !== Object.prototype
       && !(EventEmitter && p === EventEmitter.prototype); p = Object.getPrototypeOf(p))
    for (const n of Object.getOwnPropertyNames(p)) names.add(n);
  for (let c = v; c && c !== Function.prototype && !(EventEmitter && c === EventEmitter);
       c = Object.getPrototypeOf(c))
    for (const n of Object.getOwnPropertyNames(c))
      if (!['length', 'name', 'prototype'].includes(n)) names.add(n);
  classes[name] = [...names].filter(n => n !== 'constructor' && !n.startsWith('_')).sort();
}
process.stdout.write(JSON.stringify({ exports: Object.keys(m), classes }));
"""


def node_api():
    """(exports, {class: [members]}) of clients/node, by running node."""
    out = subprocess.run(["node", "-e", NODE_API], cwd=os.path.join(TOP, "clients", "node"),
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "node failed")
    api = json.loads(out.stdout)
    return api["exports"], api["classes"]


def client_missing(label, readme_path, api):
    """Lines for the exports and members of a client that its README does not name."""
    readme = read(*readme_path)
    exports, classes = api
    missing = [f"{label} export not in {'/'.join(readme_path)}: {n}"
               for n in exports if not re.search(r"`%s[`(]" % re.escape(n), readme)]
    missing += [f"{label} member not in {'/'.join(readme_path)}: {cls}.{m}"
                for cls, members in sorted(classes.items()) for m in members
                if not named_member(m, readme)]
    count = len(exports) + sum(len(m) for m in classes.values())
    return missing, count


def main():
    text = reference_text()
    settings_page = read("docs", "reference", "settings.md")
    with psycopg.connect(os.environ["DSYNC_ADMIN_DSN"], autocommit=True) as conn:
        functions, views, settings = extension_objects(conn)
        if not functions or not views or not settings:
            sys.exit("the extension has no functions, views or settings here: is it created?")
        raised, unknown = sqlstates_raised(conn, server_paths(conn))
    failed = passed = 0

    missing = [f for f in functions if f"`{f}`" not in text and f"{f}(" not in text]
    for f in missing:
        print(f"function not in the reference: {f}")
    print(f"functions: {len(functions) - len(missing)} of {len(functions)} named")

    wrong = []
    for view, columns in sorted(views.items()):
        rows = re.findall(r"^\| view `%s`[^|]*\| `([^`]*)`" % re.escape(view), text, re.M)
        if not rows:
            wrong.append(view)
            print(f"view not in the reference: {view} ({', '.join(columns)})")
            continue
        listed = [c.strip() for c in rows[0].split(",")]
        if listed != columns:
            wrong.append(view)
            print(f"view {view}: the reference lists ({', '.join(listed)}), "
                  f"the view has ({', '.join(columns)})")
    print(f"views: {len(views) - len(wrong)} of {len(views)} with their columns")

    absent = [s for s in settings if not re.search(r"^\| `%s` \|" % re.escape(s), settings_page, re.M)]
    for s in absent:
        print(f"setting not in docs/reference/settings.md: {s}")
    print(f"settings: {len(settings) - len(absent)} of {len(settings)} named")

    documented = documented_sqlstates(read("docs", "reference", "errors.md"))
    undocumented = sorted(s for s in raised if s not in documented)
    for s in undocumented:
        where = raised[s]
        print(f"SQLSTATE not in docs/reference/errors.md: {s} ({where[0]}"
              + (f", and {len(where) - 1} more" if len(where) > 1 else "") + ")")
    for problem in unknown:
        print(problem)
    sqlstate_bad = undocumented + unknown
    print(f"SQLSTATEs: {len(raised) - len(undocumented)} of {len(raised)} in errors.md")

    page = read("docs", "reference", "notifications.md")
    kinds, keys, values = notification_names()
    unnamed = [f"kind {k}" for k in sorted(kinds) if not re.search(r"^\| `%s` \|" % re.escape(k), page, re.M)]
    unnamed += [f"key {k}" for k in sorted(keys) if f"`{k}`" not in page]
    unnamed += [f"value {v} of {k}" for k, vs in sorted(values.items()) for v in sorted(vs)
                if f"`{v}`" not in page and f'"{v}"' not in page]
    for u in unnamed:
        print(f"notification {u} not in docs/reference/notifications.md")
    total = len(kinds) + len(keys) + sum(len(vs) for vs in values.values())
    print(f"notifications: {total - len(unnamed)} of {total} kinds, keys and values named")
    if not kinds or not keys:
        unnamed.append("none found")
        print("no notification kinds or keys found in src/")

    cli_page = read("docs", "reference", "cli.md")
    commands, codes = cli_names()
    no_command = [c for c in sorted(commands)
                  if f"`{c}`" not in cli_page and not re.search(r"`dsync %s\b" % re.escape(c), cli_page)]
    for c in no_command:
        print(f"dsync command not in docs/reference/cli.md: {c}")
    print(f"dsync commands: {len(commands) - len(no_command)} of {len(commands)} named")
    no_code = [c for c in sorted(codes, key=lambda c: (len(c), c))
               if not re.search(r"^\| %s \|" % re.escape(c), cli_page, re.M)]
    for c in no_code:
        print(f"dsync exit code not in docs/reference/cli.md's table: {c}")
    print(f"dsync exit codes: {len(codes) - len(no_code)} of {len(codes)} named")
    if not commands or not codes:
        (no_command if not commands else no_code).append("none found")
        print("no commands or exit codes found in cli/")

    clients = []
    for label, readme, load in (("Python", ("clients", "python", "README.md"), python_api),
                                ("Node", ("clients", "node", "README.md"), node_api)):
        try:
            api = load()
        except Exception as e:      # the check fails, the others still run
            print(f"{label} client: cannot be loaded: {e}")
            clients.append(["unloadable"])
            continue
        lines, count = client_missing(label, readme, api)
        for line in lines:
            print(line)
        print(f"{label} client: {count - len(lines)} of {count} exports and members named")
        clients.append(lines)

    for bad in [missing, wrong, absent, sqlstate_bad, unnamed, no_command, no_code] + clients:
        if bad:
            failed += 1
        else:
            passed += 1
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
