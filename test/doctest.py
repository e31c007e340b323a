#!/usr/bin/env python3
"""doctest.py: runs the code examples of the documentation against a real
dsync server, so that an example that does not run fails CI.

    /usr/bin/python3 test/doctest.py                 README.md, docs/**/*.md,
                                                     clients/*.md and
                                                     clients/*/README.md
    /usr/bin/python3 test/doctest.py FILE.md ...     those files only
    /usr/bin/python3 test/doctest.py --list [FILE.md ...]
                                                     every fenced block and what
                                                     would be done with it; no server
    /usr/bin/python3 test/doctest.py --self-test     the fixtures of test/doctest/:
                                                     passing blocks pass, failing
                                                     ones are reported failed

Run as root (the throwaway server runs as postgres) with the extension
installed into PGBIN's PostgreSQL (default /usr/lib/postgresql/15/bin), and
`npm ci` done in clients/node for JavaScript blocks.  Prints a line per
block, then the skipped blocks with their reasons, "N skipped", and last
"N passed, N failed" (blocks).  Exits non-zero if any block failed.

Conventions (the documentation is written to them):

Which blocks run.  Fenced code blocks (``` or ~~~, also indented in a
list item) are run by the first word of their info string:
  sql                   psql -X -v ON_ERROR_STOP=1 -q -f BLOCK, each block
                        its own psql process (so its own session: \\gset
                        variables and SET do not carry over to the next block)
  sh, bash, shell       bash -euo pipefail -c BLOCK
  python, py            /usr/bin/python3 BLOCK, PYTHONPATH=clients/python
  js, javascript        node BLOCK: an ES module (.mjs) if the block has an
                        import or export statement, else CommonJS (.cjs)
                        wrapped in an async function, so top-level await
                        works in both; require('dsync-client') and
                        import ... from 'dsync-client' load clients/node,
                        and 'pg' its node_modules' node-postgres
Any other info string, or none (text, console, conf, ini, yaml, json, output
shown), is not run.

Where.  The server is started once for the whole run (clients/python/tests/
conftest.py's Server: PostgreSQL with dsync preloaded on a Unix socket of its
own, and PgBouncer in transaction mode).  Each markdown file gets a fresh
database named app, owned by the ordinary login role app: the harness drops
the previous one (WITH (FORCE)) and creates it again, then, as the superuser,
runs CREATE EXTENSION dsync in it (dsync.control says superuser = true,
trusted = false, so app could not).  A document's
`CREATE EXTENSION IF NOT EXISTS dsync;` therefore works as app; a bare
`CREATE EXTENSION dsync;` fails (already exists) unless the block is marked
`admin` and the document drops it first.  The blocks of a file run in
document order in one temporary working directory of the file's own, so a
later block may use the tables, files and leases an earlier one made.

Environment of every block: libpq's PGHOST (the socket directory), PGPORT,
PGUSER=app, PGDATABASE=app (any other PG* variable removed), so `psql`,
`Client("")`, `Client("dbname=app")`, `new Client()` and node-postgres connect
as app; DATABASE_URL (the same as a URL: postgresql://app@/app?host=DIR&port=N);
DSYNC_DSN (app, direct), DSYNC_BOUNCER_DSN (app through PgBouncer,
transaction mode), DSYNC_ADMIN_DSN (the superuser postgres), DSYNC_SRC (the
top of the repository), PATH with PGBIN first (psql, the dsync tool),
PYTHONPATH=$DSYNC_SRC/clients/python, NODE_PATH=$DSYNC_SRC/clients/node/
node_modules, PYTHONUNBUFFERED=1.

Annotations: an HTML comment on the line(s) just before the opening fence
(no blank line between), one or more per comment, several comments allowed:
  <!-- doctest: skip REASON -->   not run; REASON (required) is printed in
                                   the summary (installs, make install, system
                                   changes, a second machine...)
  <!-- doctest: error -->         the block must fail (exit non-zero: an
                                   example that shows an error); it is
                                   reported failed if it succeeds
  <!-- doctest: error="TEXT" -->  the same, and its output must contain TEXT
                                   (the error it shows, not another one that
                                   an earlier statement of the block hit)
  <!-- doctest: background -->    started and left running while the file's
                                   later blocks run (a LISTEN loop, a worker),
                                   after a 1 s head start; killed (its process
                                   group, SIGTERM then SIGKILL) at the end of
                                   the file.  Failed if it exits non-zero
                                   before then.  background=SECONDS sets the
                                   head start.
  <!-- doctest: timeout=N -->     seconds the block may run (default 60); a
                                   block still running then is killed and failed
  <!-- doctest: admin -->         run as the superuser (PGUSER=postgres), for
                                   what an administrator does: GRANT,
                                   dsync_force_release, settings
e.g. `<!-- doctest: error timeout=5 -->`.  An unknown annotation fails the
block.
"""

import glob
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PGBIN = os.environ.get("PGBIN", "/usr/lib/postgresql/15/bin")
DEFAULT_TIMEOUT = 60
BACKGROUND_START = 1.0
OUTPUT_LINES = 40

LANGS = {
    "sql": "sql",
    "sh": "sh", "bash": "sh", "shell": "sh",
    "python": "python", "py": "python", "python3": "python",
    "js": "js", "javascript": "js", "node": "js",
}

FENCE = re.compile(r"^( *)(`{3,}|~{3,})\s*([^`\s]*)[^`]*$")
ANNOTATION = re.compile(r"^\s*<!--\s*doctest:\s*(.*?)\s*-->\s*$")


class Block:
    def __init__(self, path, line, info, code, notes):
        self.path = path            # as given (relative to the top when found)
        self.line = line            # line of the opening fence, from 1
        self.info = info
        self.lang = LANGS.get(info.lower())
        self.code = code
        self.skip = None
        self.error = False
        self.error_text = None      # what the failure's output must say
        self.background = None      # head start in seconds when background
        self.timeout = DEFAULT_TIMEOUT
        self.admin = False
        self.bad = []               # annotations not understood
        for note in notes:
            self._annotate(note)

    def _annotate(self, note):
        # A skip's reason is prose (apostrophes and all): taken as it is.
        words = note.split()
        if "skip" not in words:
            try:
                words = shlex.split(note)
            except ValueError:
                self.bad.append(note)
                return
        while words:
            w = words.pop(0)
            if w == "skip":
                self.skip = " ".join(words) or "(no reason given)"
                if not words:
                    self.bad.append("skip needs a reason")
                return
            if w == "error":
                self.error = True
            elif w.startswith("error="):
                self.error = True
                self.error_text = w.split("=", 1)[1]
                if not self.error_text:
                    self.bad.append(w)
            elif w == "admin":
                self.admin = True
            elif w == "background":
                self.background = BACKGROUND_START
            elif w.startswith("background="):
                try:
                    self.background = float(w.split("=", 1)[1])
                except ValueError:
                    self.bad.append(w)
            elif w.startswith("timeout="):
                try:
                    self.timeout = float(w.split("=", 1)[1])
                except ValueError:
                    self.bad.append(w)
            else:
                self.bad.append(w)

    @property
    def where(self):
        return f"{self.path}:{self.line}"

    @property
    def runs(self):
        return self.lang is not None and self.skip is None


def parse(path, shown=None):
    """The fenced blocks of a markdown file, with their annotations."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    blocks = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent = len(m.group(1))
        fence = m.group(2)
        info = m.group(3)
        start = i
        # Annotations: comment lines just above the fence.
        notes = []
        j = i - 1
        while j >= 0:
            a = ANNOTATION.match(lines[j])
            if not a:
                break
            notes.insert(0, a.group(1))
            j -= 1
        body = []
        i += 1
        close = re.compile(r"^\s*" + re.escape(fence[0]) + "{" + str(len(fence)) + r",}\s*$")
        while i < len(lines) and not close.match(lines[i]):
            text = lines[i]
            # Take off the fence's indentation (a block in a list item).
            k = 0
            while k < indent and k < len(text) and text[k] == " ":
                k += 1
            body.append(text[k:])
            i += 1
        i += 1
        blocks.append(Block(shown or path, start + 1, info, "\n".join(body) + "\n", notes))
    return blocks


def default_files():
    """README.md, docs/**/*.md, then the client libraries' documents:
    clients/*.md (RECIPES.md, DESIGN.md) and clients/*/README.md."""
    files = []
    if os.path.exists(os.path.join(TOP, "README.md")):
        files.append("README.md")
    for pattern in (("docs", "**", "*.md"), ("clients", "*.md"), ("clients", "*", "README.md")):
        files += sorted(os.path.relpath(p, TOP) for p in
                        glob.glob(os.path.join(TOP, *pattern), recursive=True))
    return files


def trim(text):
    lines = text.rstrip("\n").split("\n") if text.strip() else []
    cut = []
    if len(lines) > OUTPUT_LINES:
        cut = [f"... ({len(lines) - OUTPUT_LINES} lines above left out)"]
        lines = lines[-OUTPUT_LINES:]
    return "\n".join("    | " + l[:240] for l in cut + lines)


def kill_group(proc, grace=3.0):
    if proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


class Runner:
    def __init__(self, server, out=sys.stdout):
        self.server = server
        self.out = out
        self.results = []           # (block, status, detail)
        self.node_modules = os.path.join(TOP, "clients", "node", "node_modules")

    def say(self, text):
        print(text, file=self.out, flush=True)

    def env(self, admin=False):
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        s = self.server
        env.update(
            PGHOST=s.dir, PGPORT=str(s.port), PGUSER="postgres" if admin else "app",
            PGDATABASE="app", PGBIN=PGBIN,
            DSYNC_DSN=s.dsn(), DSYNC_BOUNCER_DSN=s.dsn(bouncer=True),
            DSYNC_ADMIN_DSN=s.dsn(user="postgres"), DSYNC_SRC=TOP,
            DATABASE_URL=f"postgresql://{'postgres' if admin else 'app'}@/app?host={s.dir}&port={s.port}",
            PATH=PGBIN + os.pathsep + os.environ.get("PATH", "/usr/bin:/bin"),
            PYTHONPATH=os.path.join(TOP, "clients", "python"),
            NODE_PATH=self.node_modules, PYTHONUNBUFFERED="1",
        )
        return env

    def fresh_database(self):
        import psycopg
        with psycopg.connect(self.server.dsn("postgres", "postgres"), autocommit=True) as conn:
            conn.execute("DROP DATABASE IF EXISTS app WITH (FORCE)")
            conn.execute("CREATE DATABASE app OWNER app")
        with psycopg.connect(self.server.dsn("app", "postgres"), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION dsync")

    def node_links(self, work):
        """work/node_modules: dsync-client as clients/node, and clients/node's
        own dependencies (for ES modules, which ignore NODE_PATH) and their
        commands (.bin, for `npx --no-install prisma`)."""
        nm = os.path.join(work, "node_modules")
        os.makedirs(nm, exist_ok=True)
        os.symlink(os.path.join(TOP, "clients", "node"), os.path.join(nm, "dsync-client"))
        if os.path.isdir(self.node_modules):
            for name in os.listdir(self.node_modules):
                if (name == ".bin" or not name.startswith(".")) and name != "dsync-client":
                    os.symlink(os.path.join(self.node_modules, name), os.path.join(nm, name))

    def command(self, block, work, n):
        """The argv to run block n of a file, its script written into work."""
        base = os.path.join(work, f".block{n}-line{block.line}")
        if block.lang == "sql":
            path = base + ".sql"
            cmd = ["psql", "-X", "-v", "ON_ERROR_STOP=1", "-q", "-f", path]
            code = block.code
        elif block.lang == "sh":
            path = base + ".sh"
            cmd = ["bash", "-euo", "pipefail", "-c", block.code, path]
            code = block.code
        elif block.lang == "python":
            path = base + ".py"
            cmd = ["/usr/bin/python3", path]
            code = block.code
        else:
            if re.search(r"^\s*(import\s*[\w{*'\"]|export\s)", block.code, re.M):
                path = base + ".mjs"
                code = block.code
            else:
                # Same line numbers: the wrapper opens on the first line.
                path = base + ".cjs"
                code = ("(async () => { " + block.code + "\n})().catch((e) => "
                        "{ console.error(e); process.exit(1); });\n")
            cmd = ["node", path]
        with open(path, "w") as f:
            f.write(code)
        return cmd, path

    def fix_paths(self, text, block, path):
        """Error positions in the script as positions in the document."""
        def doc_line(m):
            return f"{block.path}{m.group(1)}{block.line + int(m.group(2))}"
        text = text.replace("file://" + path, path)
        text = re.sub(re.escape(path) + r"(\", line |: line |:)(\d+)", doc_line, text)
        return text.replace(path, block.where)

    def record(self, block, status, detail=""):
        self.results.append((block, status, detail))
        what = f"{block.where} {block.info}"
        if status == "ok":
            note = " (error as expected)" if block.error else ""
            note += " (background)" if block.background is not None else ""
            self.say(f"ok       {what}{note}")
        elif status == "skipped":
            self.say(f"skipped  {what} ({block.skip})")
        else:
            self.say(f"FAILED   {what}: {status}")
            if detail.strip():
                self.say(trim(detail))

    def run_file(self, path, shown=None):
        blocks = [b for b in parse(path, shown) if b.lang is not None or b.skip is not None]
        if not blocks:
            return
        try:
            self.fresh_database()
        except Exception as e:  # noqa: BLE001
            for b in blocks:
                self.record(b, "a fresh database could not be made", str(e))
            return
        work = tempfile.mkdtemp(prefix="dsync-doctest-")
        self.node_links(work)
        background = []            # (block, proc, log path, script path)
        try:
            for n, block in enumerate(blocks, 1):
                if block.bad:
                    self.record(block, "annotation not understood: " + ", ".join(block.bad))
                    continue
                if block.skip is not None:
                    self.record(block, "skipped")
                    continue
                self.run_block(block, work, n, background)
        finally:
            for block, proc, log, script in background:
                gone = proc.poll()
                kill_group(proc)
                output = self.fix_paths(open(log, errors="replace").read(), block, script)
                if gone not in (None, 0):
                    self.record(block, f"background block exited with {gone}", output)
                else:
                    self.record(block, "ok")
            shutil.rmtree(work, ignore_errors=True)

    def run_block(self, block, work, n, background):
        cmd, script = self.command(block, work, n)
        env = self.env(block.admin)
        if block.background is not None:
            log = script + ".log"
            with open(log, "w") as f:
                proc = subprocess.Popen(cmd, cwd=work, env=env, stdin=subprocess.DEVNULL,
                                        stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
            deadline = time.monotonic() + block.background
            while time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.05)
            if proc.returncode not in (None, 0):
                output = self.fix_paths(open(log, errors="replace").read(), block, script)
                self.record(block, f"background block exited with {proc.returncode}", output)
                return
            background.append((block, proc, log, script))
            self.say(f"started  {block.where} {block.info} (background; reported at the end of the file)")
            return
        proc = subprocess.Popen(cmd, cwd=work, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            output, _ = proc.communicate(timeout=block.timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            kill_group(proc, grace=1.0)
            output, _ = proc.communicate()
            timed_out = True
        finally:
            # Whatever the block left running in its process group goes too.
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        output = self.fix_paths(output.decode("utf-8", "replace"), block, script)
        if timed_out:
            self.record(block, f"timed out after {block.timeout:g} s", output)
        elif block.error and proc.returncode == 0:
            self.record(block, "succeeded, but is marked <!-- doctest: error -->", output)
        elif block.error and block.error_text and block.error_text not in output:
            self.record(block, f"failed, but its output does not say {block.error_text!r}", output)
        elif not block.error and proc.returncode != 0:
            self.record(block, f"exit status {proc.returncode}", output)
        else:
            self.record(block, "ok")

    def summary(self):
        passed = sum(1 for _, s, _ in self.results if s == "ok")
        skipped = [(b, s) for b, s, _ in self.results if s == "skipped"]
        failed = len(self.results) - passed - len(skipped)
        if skipped:
            self.say("skipped:")
            for b, _ in skipped:
                self.say(f"  {b.where} {b.info}: {b.skip}")
        self.say(f"{len(skipped)} skipped")
        self.say(f"{passed} passed, {failed} failed")
        return failed


def start_server():
    sys.path.insert(0, os.path.join(TOP, "clients", "python", "tests"))
    from conftest import Server  # noqa: E402
    server = Server()
    server.start()
    return server


def run(files, out=sys.stdout):
    """Runs the files' blocks; returns the Runner (its results)."""
    server = start_server()
    try:
        runner = Runner(server, out)
        for f in files:
            shown = os.path.relpath(os.path.abspath(f), TOP)
            if shown.startswith(".."):
                shown = f
            runner.run_file(f, shown)
        return runner
    finally:
        server.stop()


def list_blocks(files):
    count = 0
    for f in files:
        for b in parse(f):
            if b.bad:
                what = "BAD ANNOTATION " + ", ".join(b.bad)
            elif b.skip is not None:
                what = f"skip ({b.skip})"
            elif b.lang is None:
                what = f"not run (info string {b.info!r})" if b.info else "not run (no info string)"
            else:
                count += 1
                what = "run" + (" as admin" if b.admin else "") + \
                    (", must fail" if b.error else "") + \
                    (", in the background" if b.background is not None else "") + \
                    (f", timeout {b.timeout:g} s" if b.timeout != DEFAULT_TIMEOUT else "")
            first = next((l for l in b.code.split("\n") if l.strip()), "")[:60]
            print(f"{b.where:<24} {b.info or '-':<10} {what:<36} {first}")
    print(f"{count} blocks to run")


def self_test():
    """Runs the fixtures: test/doctest/pass.md and isolation.md must pass
    (with the one skip), every block of fail.md must be reported failed,
    and a background block must be gone at the end of its file."""
    import io
    here = os.path.join(TOP, "test", "doctest")
    passing = [os.path.join(here, "pass.md"), os.path.join(here, "isolation.md")]
    failing = os.path.join(here, "fail.md")
    buf = io.StringIO()

    class Tee:
        def write(self, s):
            buf.write(s)
            sys.stdout.write(s)

        def flush(self):
            sys.stdout.flush()

    pidfile = tempfile.mktemp(prefix="dsync-doctest-background-", suffix=".pid")
    os.environ["DOCTEST_SELFTEST_PIDFILE"] = pidfile
    runner = run(passing + [failing], Tee())
    problems = []
    for block, status, _ in runner.results:
        name = os.path.basename(block.path)
        if name in ("pass.md", "isolation.md"):
            want = "skipped" if block.skip is not None else "ok"
            if status != want:
                problems.append(f"{block.where} should be {want}, is: {status}")
        elif status in ("ok", "skipped"):
            problems.append(f"{block.where} should have FAILED, is: {status}")
    runnable = {os.path.basename(p): [b for b in parse(p) if b.lang or b.skip]
                for p in passing + [failing]}
    if len(runner.results) != sum(len(v) for v in runnable.values()):
        problems.append(f"{len(runner.results)} results for "
                        f"{sum(len(v) for v in runnable.values())} blocks")
    langs = {b.lang for b in runnable["pass.md"] if b.runs}
    if langs != {"sql", "sh", "python", "js"}:
        problems.append(f"pass.md runs {sorted(langs)}, not every language")
    if not any(b.background is not None for b in runnable["pass.md"]):
        problems.append("pass.md has no background block")
    try:
        pid = int(open(pidfile).read())
        try:
            os.kill(pid, 0)
            problems.append(f"the background block (pid {pid}) was left running")
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.unlink(pidfile)
    except (OSError, ValueError):
        problems.append("the background block wrote no pid file")
    summary = runner.summary()
    last = buf.getvalue().rstrip().split("\n")[-1]
    want_failed = len([b for b in runnable["fail.md"] if b.runs or b.bad])
    if summary != want_failed or not re.fullmatch(rf"\d+ passed, {want_failed} failed", last):
        problems.append(f"summary line {last!r}: wanted {want_failed} failed")
    print("== self-test")
    for p in problems:
        print("  " + p)
    if problems:
        print("self-test: FAILED")
    else:
        print(f"self-test: ok (the passing fixtures passed, the {want_failed} failing blocks"
              " were reported failed, the background block was stopped)")
    return 1 if problems else 0


def main(argv):
    args = argv[1:]
    if args[:1] == ["--self-test"]:
        return self_test()
    listing = bool(args[:1] == ["--list"])
    if listing:
        args = args[1:]
    for a in args:
        if a.startswith("-"):
            print(__doc__.split("\n\n")[1], file=sys.stderr)
            return 2
    if not args:
        os.chdir(TOP)
    files = args or default_files()
    if listing:
        list_blocks(files)
        return 0
    runner = run(files)
    return 1 if runner.summary() else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
