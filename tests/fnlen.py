#!/usr/bin/python3
"""fnlen.py — the C functions longer than a screen, longest first.

A function is counted from the line its name is on to its closing brace (the house style:
return type and name at column 0, the body's braces at column 0). Usage:
    tests/fnlen.py [--over N] [PATH...]     (default: 100 lines; lib shm tools tests bench)
Prints "LINES FILE:LINE NAME" per function over N lines, then "N functions over M lines".
A function whose line just above its name is a comment containing "stays whole:" (the reason
follows) is listed apart, as "justified", and is not in the count. docs/STYLE.md gives the
limit, the justification form and the last count.
"""
import argparse
import os
import re
import sys

NAME = re.compile(r"^(?:[A-Za-z_][\w \t*]*?[\s*])?([A-Za-z_]\w*)\s*\(")


def functions(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().split("\n")
    start = name = None
    whole = False
    for i, line in enumerate(lines):
        if start is None:
            if line == "{":
                # The name is on the nearest line above at column 0 with a '('.
                for j in range(i - 1, max(-1, i - 8), -1):
                    sig = re.sub(r"__attribute__\s*\(\(.*?\)\)\s*", "", lines[j])
                    m = NAME.match(sig)
                    if m and not sig.startswith((" ", "\t", "#", "/", "*")):
                        start, name = j, m.group(1)
                        above = lines[j - 1].strip() if j > 0 else ""
                        whole = above.startswith(("/*", "//", "*")) and "stays whole:" in above
                        t = re.match(r"^(?:Test|ParameterizedTest)\((\w+),\s*(\w+)", sig)
                        if t:
                            name = "Test(%s, %s)" % t.groups()
                        break
        elif line.startswith("}"):
            yield name, start + 1, i - start + 1, whole
            start = None


def sources(paths):
    """The .c and .h files under each path (a folder, or one file)."""
    for p in paths:
        if not os.path.isdir(p):
            yield p
            continue
        for d, _, files in sorted(os.walk(p)):
            for f in sorted(files):
                if f.endswith((".c", ".h")):
                    yield os.path.join(d, f)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--over", type=int, default=100)
    ap.add_argument("paths", nargs="*", default=["lib", "shm", "tools", "tests", "bench"])
    a = ap.parse_args()
    found, justified = [], []
    for path in sources(a.paths):
        for name, line, n, whole in functions(path):
            if n > a.over:
                (justified if whole else found).append((n, "%s:%d" % (path, line), name))
    for n, where, name in sorted(found, reverse=True):
        print("%5d %s %s" % (n, where, name))
    for n, where, name in sorted(justified, reverse=True):
        print("%5d %s %s (justified)" % (n, where, name))
    print("%d functions over %d lines" % (len(found), a.over))
    if justified:
        print("%d justified (\"stays whole:\" just above)" % len(justified))
    return 0


if __name__ == "__main__":
    sys.exit(main())
