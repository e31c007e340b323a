"""Checks that the reference (docs/reference/*.md) names everything the
installed extension has: every SQL function, every view with exactly its
columns, and every dsync.* setting.  A function, column or setting added
without its reference entry fails here.

    python3 clients/with_server.py python3 test/docs_reference.py

It reads the extension from the database of DSYNC_ADMIN_DSN (a superuser
connection to a database where dsync is created; clients/with_server.py
provides one).  What counts as named:
  - a function: its name in backquotes, or followed by "(", anywhere in
    the reference;
  - a view: a table row "| view `name` ... | `col, col, ...` |" whose
    backquoted list is exactly the view's columns;
  - a setting: a row of docs/reference/settings.md's table starting
    "| `dsync.name` |".
Prints one line per object missing and "N passed, N failed" (checks: the
functions, the views, the settings).
"""

import glob
import os
import re
import sys

import psycopg

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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


def main():
    text = reference_text()
    settings_page = open(os.path.join(TOP, "docs", "reference", "settings.md"),
                         encoding="utf-8").read()
    with psycopg.connect(os.environ["DSYNC_ADMIN_DSN"], autocommit=True) as conn:
        functions, views, settings = extension_objects(conn)
    if not functions or not views or not settings:
        sys.exit("the extension has no functions, views or settings here: is it created?")
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

    for bad in (missing, wrong, absent):
        if bad:
            failed += 1
        else:
            passed += 1
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
