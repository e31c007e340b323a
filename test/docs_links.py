"""Checks that every relative link of the documentation leads somewhere: the
file it names exists and, for a link with an #anchor into a markdown file,
that file has a heading with that anchor (GitHub's rule: lowercased,
punctuation dropped, spaces to hyphens, "-1", "-2" for repeats).

    python3 test/docs_links.py [FILE.md ...]

Without arguments: README.md, docs/**/*.md, clients/**/*.md (not
node_modules) and test/**/README.md.  Links inside code (fenced blocks and
`spans`) and absolute URLs are not checked.  Prints each broken link and
"N links, N broken"; exits 1 if any is broken.
"""

import glob
import os
import re
import sys

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def default_files():
    """The documentation's markdown files, relative to the top."""
    files = ["README.md"]
    for pattern in ("docs/**/*.md", "clients/**/*.md", "test/**/README.md"):
        files += [f for f in glob.glob(pattern, root_dir=TOP, recursive=True)
                  if "node_modules" not in f]
    return sorted(set(files))


def slug(heading):
    """The anchor GitHub gives a heading."""
    heading = re.sub(r"<[^>]+>", "", heading).strip().lower()
    heading = re.sub(r"[^\w\- ]", "", heading)
    return heading.replace(" ", "-")


def anchors(path):
    """Every heading anchor of a markdown file (outside fenced code)."""
    found, seen, fenced = set(), {}, False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if re.match(r"^\s*(```|~~~)", line):
                fenced = not fenced
                continue
            m = None if fenced else re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
            if m:
                s = slug(m.group(2))
                n = seen.get(s, 0)
                seen[s] = n + 1
                found.add(s if n == 0 else f"{s}-{n}")
    return found


def broken_links(path):
    """(number of links checked, [broken link messages]) of one file."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    text = re.sub(r"`[^`\n]*`", "", text)
    total, broken = 0, []
    for target in LINK.findall(text):
        if re.match(r"^[a-z]+:", target):
            continue
        total += 1
        file, _, fragment = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(path), file)) if file else path
        if not os.path.exists(dest):
            broken.append(f"{target}: no such file")
        elif fragment and dest.endswith(".md") and fragment not in anchors(dest):
            broken.append(f"{target}: no heading #{fragment}")
    return total, broken


def main():
    os.chdir(TOP)
    total = bad = 0
    for path in sys.argv[1:] or default_files():
        n, broken = broken_links(path)
        total += n
        bad += len(broken)
        for message in broken:
            print(f"{path}: {message}")
    print(f"{total} links, {bad} broken")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
