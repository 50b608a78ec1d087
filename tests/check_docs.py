#!/usr/bin/python3
"""check_docs.py — the tree's references and the README's counts, checked (run by test_docs.c).

References: every mention of a Markdown file in the tree's sources, help texts and documents
(`docs/DESIGN.md`, `../shm/FORMAT.md`, a Markdown link) must name a file that exists, and the
section it names must exist in that file: a `#anchor` (GitHub's heading slugs), a quoted
heading title right after the file name (`docs/events.md "Example bytes"`), or a section
number (`shm/FORMAT.md section 5.9`, `shm/FORMAT.md 5.9`). A path is resolved against the
citing file's folder, then the tree's root; a bare name (`FORMAT.md`) against any file of that
name. Citations of documents outside the tree (the shared background folder, "the seed
document") are refused outright.

Counts (with --bin): the README's "~N tests" within 10% of the Criterion tests `make test`
runs; the benchmark programs it and docs/benchmarks.md count against bench/bench_*.c; the
programs it lists against the Makefile's (`make list-programs`). Flags (with --bin): every flag
a program's --help defines is in its section of docs/tools.md (kvidx-hash: docs/keys.md), and
every flag of the usage lines there is one --help defines. Exports (with --bin): every
function BIN/../libkvidx.so exports is named in docs/api.md.

Usage: check_docs.py [--root DIR] [--bin BUILD/bin]. Exit 0 and one "check_docs: ok" line, or
1 and one line per problem (FILE:LINE: what).
"""
import argparse
import os
import re
import subprocess
import sys

SKIP_DIRS = {".git", "traces", "go-cache", "go-path"}
TEXT_EXT = {".c", ".h", ".md", ".go", ".py", ".sh", ".yml", ".yaml", ".json", ".toml",
            ".conf", ".map", ".pml", ".in", ".txt", ".service", ".mod", ".svg", ""}
MD_MENTION = re.compile(r"(?<![\w/.\-])((?:\.\.?/)*(?:[\w.\-]+/)*[\w.\-]+\.md)(#[\w\-]+)?")
# What may follow a mention: a quoted heading, or a section number.
QUOTED = re.compile(r"^(?:,|:)? \(?[\"\u201c]([^\"\u201d\n]{2,80})[\"\u201d]")
NUMBERED = re.compile(r"^(?:,? sections?)? ((?:\d+)(?:\.\d+)?)(?:\b)")
README_QUOTED = re.compile(r"\bREADME(?:'s)?,? [\"\u201c]([^\"\u201d\n]{2,80})[\"\u201d]")
MD_LINK = re.compile(r"\]\(([^)\s]+)\)")
OUTSIDE = [
    # (each pattern split so that this file itself cites nothing outside the tree)
    (re.compile(r"/work/" r"shared|\.\./" r"shared/|\bseeds" r"/"),
     "cites the shared background folder, which is not in the tree"),
    (re.compile(r"seed " r"document|user's " r"seed|the seed's " r"\""),
     "cites \"the seed\", a document that is not in the tree (docs/ttl.md has the method)"),
]


def slug(title):
    t = title.strip().lower()
    t = re.sub(r"[^\w\- ]", "", t)
    return t.replace(" ", "-")


def norm_title(title):
    t = title.replace("`", "").strip()
    t = re.sub(r"^\d+(\.\d+)*\.? ", "", t)
    return t.lower()


class Doc:
    """The headings of one Markdown file."""

    def __init__(self, path):
        self.slugs, self.titles, self.numbers = set(), set(), set()
        fence = False
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("```"):
                    fence = not fence
                    continue
                m = re.match(r"^#{1,6} (.*?)\s*#*$", line)
                if m and not fence:
                    title = m.group(1)
                    s = slug(title)
                    n = 1
                    base = s
                    while s in self.slugs:
                        s = "%s-%d" % (base, n)
                        n += 1
                    self.slugs.add(s)
                    self.titles.add(norm_title(title))
                    num = re.match(r"^(\d+(?:\.\d+)*)\.? ", title)
                    if num:
                        self.numbers.add(num.group(1))
                for a in re.findall(r"<a (?:id|name)=\"([\w\-]+)\"", line):
                    self.slugs.add(a)


def has_title(self, title):
    """A cited title names a heading, or the start of one up to a word's end ("Segment
    format" for "Segment format (layout version 6)", "Warm start" for "Warm start: ...")."""
    t = norm_title(title)
    return any(h == t or (h.startswith(t) and not h[len(t)].isalnum()) for h in self.titles)


Doc.has_title = has_title
# An upstream project's own file, cited by name ("xxHash's doc/xxhash_spec.md").
UPSTREAM = re.compile(r"\b([\w\-]+)'s `?$")


def tree_files(root):
    out = []
    for d, dirs, files in os.walk(root):
        rel = os.path.relpath(d, root)
        dirs[:] = [x for x in dirs if x not in SKIP_DIRS and not x.startswith("build")
                   and not (rel == "." and x.startswith("."))]
        for f in files:
            p = os.path.join(d, f)
            ext = os.path.splitext(f)[1]
            if ext in TEXT_EXT and os.path.getsize(p) < 2_000_000:
                out.append(os.path.relpath(p, root))
    return sorted(out)


class Checker:
    def __init__(self, root):
        self.root = root
        self.files = tree_files(root)
        self.by_name = {}
        for f in self.files:
            self.by_name.setdefault(os.path.basename(f), []).append(f)
        self.docs = {}
        self.problems = []
        self.refs = 0

    def doc(self, rel):
        if rel not in self.docs:
            self.docs[rel] = Doc(os.path.join(self.root, rel))
        return self.docs[rel]

    def resolve(self, src, target):
        here = os.path.dirname(src)
        for base in (here, ""):
            p = os.path.normpath(os.path.join(base, target))
            if not p.startswith("..") and os.path.isfile(os.path.join(self.root, p)):
                return p
        if "/" not in target and target in self.by_name:
            return self.by_name[target][0]
        # A path built in code ($KVIDX_SRC/shm/FORMAT.md, "%s/shm/FORMAT.md"): its tail.
        parts = target.split("/")
        while len(parts) > 2:
            parts = parts[1:]
            p = "/".join(parts)
            if os.path.isfile(os.path.join(self.root, p)):
                return p
        return None

    def bad(self, src, lineno, what):
        self.problems.append("%s:%d: %s" % (src, lineno, what))

    def check_section(self, src, lineno, target, rel, anchor, rest):
        if not rel.endswith(".md"):
            return
        d = self.doc(rel)
        if anchor:
            if anchor[1:] not in d.slugs:
                self.bad(src, lineno, "%s%s: no such section in %s" % (target, anchor, rel))
            return
        m = QUOTED.match(rest)
        if m and d.has_title(m.group(1)):
            return
        if m and d.titles:
            self.bad(src, lineno, '%s "%s": no such section in %s' % (target, m.group(1), rel))
            return
        m = NUMBERED.match(rest)
        if m and m.group(1) not in d.numbers:
            self.bad(src, lineno, "%s section %s: %s has no section %s" %
                     (target, m.group(1), rel, m.group(1)))

    def check_file(self, src):
        with open(os.path.join(self.root, src), encoding="utf-8", errors="replace") as f:
            lines = f.read().split("\n")
        is_md = src.endswith(".md")
        for i, line in enumerate(lines, 1):
            if src == "tests/check_docs.py" or src == "tests/test_docs.c":
                continue
            for rx, why in OUTSIDE:
                if rx.search(line):
                    self.bad(src, i, why)
            # Joined with the next line: a title may be on the line after its file name.
            joined = line + " " + (lines[i].lstrip(" \t*/#\"") if i < len(lines) else "")
            seen = set()
            for m in MD_MENTION.finditer(line):
                target, anchor = m.group(1), m.group(2)
                up = UPSTREAM.search(line[:m.start()])
                if up and up.group(1) not in ("README", "kvidx", "tree"):
                    continue
                tok = line.rfind(" ", 0, m.start()) + 1
                if "://" in line[tok:m.end()]:
                    continue
                self.refs += 1
                seen.add(m.start())
                rel = self.resolve(src, target)
                if rel is None:
                    self.bad(src, i, "%s: no such file in the tree" % target)
                    continue
                self.check_section(src, i, target, rel, anchor, joined[m.end():])
            for m in README_QUOTED.finditer(joined[:len(line)]):
                if "README.md" in m.group(0):
                    continue
                self.refs += 1
                rel = self.resolve(src, "README.md") or "README.md"
                d = self.doc(rel)
                if not d.has_title(m.group(1)):
                    self.bad(src, i, 'README "%s": no such section in %s' % (m.group(1), rel))
            if is_md:
                for m in MD_LINK.finditer(line):
                    t = m.group(1)
                    if re.match(r"^[a-z]+:", t):
                        continue
                    path, _, anchor = t.partition("#")
                    self.refs += 1
                    rel = src if not path else self.resolve(src, path)
                    if rel is None:
                        self.bad(src, i, "link %s: no such file in the tree" % t)
                    elif anchor and rel.endswith(".md") and anchor not in self.doc(rel).slugs:
                        self.bad(src, i, "link %s: no such section in %s" % (t, rel))

    def run(self):
        for f in self.files:
            self.check_file(f)


WORDS = {w: i for i, w in enumerate("zero one two three four five six seven eight nine ten "
                                    "eleven twelve thirteen fourteen fifteen".split())}


def check_counts(root, binary, problems):
    readme = open(os.path.join(root, "README.md"), encoding="utf-8").read()
    # Tests: the Criterion tests make test runs (the timing_* suites run in make stress).
    # Run from a Criterion test, the binary must not take itself for that test's sandboxed worker.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CRITERION", "BXFI_"))}
    r = subprocess.run([os.path.join(binary, "test_kvidx"), "--list"], capture_output=True,
                       text=True, check=False, env=env)
    out = r.stdout + r.stderr
    real = 0
    for m in re.finditer(r"^(\S+): (\d+) tests?$", out, re.M):
        if not m.group(1).startswith("timing_"):
            real += int(m.group(2))
    m = re.search(r"~(\d+) tests", readme)
    if not m:
        problems.append("README.md: no \"~N tests\" in Make targets")
    elif real == 0 or abs(int(m.group(1)) - real) > real / 10:
        problems.append("README.md: says ~%s tests, make test runs %d" % (m.group(1), real))
    counts = {"tests": real}
    # Benchmarks.
    nbench = len([f for f in os.listdir(os.path.join(root, "bench"))
                  if re.match(r"^bench_\w+\.c$", f)])
    counts["benchmarks"] = nbench
    for doc in ("README.md", "docs/benchmarks.md", "bench/README.md"):
        p = os.path.join(root, doc)
        if not os.path.exists(p):
            continue
        text = open(p, encoding="utf-8").read()
        found = re.findall(r"\b(\w+) (?:benchmark )?programs \(`(?:bench/)?bench_\*\.c`", text) + \
            re.findall(r"`bench_\*\.c` the (\w+) benchmark programs", text)
        if not found:
            problems.append("%s: does not count its benchmark programs (`bench_*.c`)" % doc)
        for w in found:
            if WORDS.get(w.lower()) != nbench:
                problems.append("%s: says %s benchmark programs, bench/ has %d" % (doc, w, nbench))
    # Programs.
    r = subprocess.run(["make", "-s", "--no-print-directory", "-C", root, "list-programs"],
                       capture_output=True, text=True, check=False)
    progs = set(r.stdout.split())
    counts["programs"] = len(progs)
    check_flags(root, binary, progs, problems)
    counts["exports"] = check_exports(root, binary, problems)
    m = re.search(r"the (\w+) programs in `build/bin/` \(([^)]*)\)", readme)
    if not m:
        problems.append("README.md: no \"the N programs in `build/bin/` (...)\" in Make targets")
    else:
        listed = set(re.findall(r"`([\w\-]+)`", m.group(2)))
        if WORDS.get(m.group(1).lower()) != len(progs):
            problems.append("README.md: says %s programs, the Makefile builds %d" %
                            (m.group(1), len(progs)))
        if listed != progs:
            problems.append("README.md: lists programs %s, the Makefile builds %s" %
                            (sorted(listed), sorted(progs)))
    return counts


def help_flags(text):
    """The flags a --help text defines: those that open an option line."""
    flags = set()
    for line in text.split("\n"):
        m = re.match(r"^\s{1,6}(?:-\w, )?(--[a-z].*?)(?:\s{2,}|$)", line)
        if m:
            flags |= set(re.findall(r"(?<![\w-])--[a-z][\w-]*", m.group(1)))
    return flags - {"--help"}


def synopsis_flags(doc, prog):
    """The flags of prog's usage lines in its section: code blocks that start with its name,
    and inline `prog [...]` spans."""
    spans = [b for b in re.findall(r"```\w*\n(.*?)```", doc, re.S) if b.lstrip().startswith(prog)]
    spans += re.findall(r"`(%s [^`]*)`" % re.escape(prog), doc)
    return set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", "\n".join(spans)))


def section(text, tool):
    """The "## TOOL ..." section of a Markdown text, or ""."""
    m = re.search(r"^## %s\b.*?(?=^## |\Z)" % re.escape(tool), text, re.M | re.S)
    return m.group(0) if m else ""


def check_flags(root, binary, progs, problems):
    """Every flag a program's --help defines is in its section of docs/tools.md (kvidx-hash:
    docs/keys.md, where key identity is explained), and every flag of the usage lines there
    is one its --help defines."""
    def read(rel):
        p = os.path.join(root, rel)
        return open(p, encoding="utf-8").read() if os.path.exists(p) else ""
    tools_md, keys_md = read("docs/tools.md"), read("docs/keys.md")
    for prog in sorted(progs):
        path = os.path.join(binary, prog)
        if not os.access(path, os.X_OK):
            problems.append("%s: not built in %s" % (prog, binary))
            continue
        r = subprocess.run([path, "--help"], capture_output=True, text=True, check=False)
        doc, where = section(tools_md, prog), "docs/tools.md"
        if prog == "kvidx-hash":
            doc, where = keys_md, "docs/keys.md"
        documented = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", doc))
        defined = help_flags(r.stdout)
        for f in sorted(defined - documented):
            problems.append("%s %s: in its --help, not in %s" % (prog, f, where))
        for f in sorted(synopsis_flags(doc, prog) - defined - {"--help"}):
            problems.append("%s %s: in its usage in %s, not in its --help" % (prog, f, where))


def check_exports(root, binary, problems):
    """Every function libkvidx.so exports is named in docs/api.md."""
    lib = os.path.join(os.path.dirname(os.path.abspath(binary)), "libkvidx.so")
    r = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True, text=True,
                       check=False)
    names = {re.sub(r"@.*", "", f.split()[-1]) for f in r.stdout.splitlines() if f.split()}
    names = {n for n in names if n.startswith("kvidx_")}
    if not names:
        problems.append("%s: no kvidx_* symbol exported (nm: %s)" % (lib, r.stderr.strip()))
        return 0
    p = os.path.join(root, "docs/api.md")
    api = open(p, encoding="utf-8").read() if os.path.exists(p) else ""
    for n in sorted(names):
        if not re.search(r"\b%s\b" % n, api):
            problems.append("docs/api.md: the exported function %s is not named" % n)
    return len(names)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default=".")
    ap.add_argument("--bin")
    a = ap.parse_args()
    c = Checker(a.root)
    c.run()
    counts = check_counts(a.root, a.bin, c.problems) if a.bin else None
    c.problems = list(dict.fromkeys(c.problems))
    for p in c.problems:
        print(p)
    if c.problems:
        print("check_docs: %d problem(s)" % len(c.problems))
        return 1
    extra = ""
    if counts:
        extra = "; README counts true: %(tests)d tests, %(benchmarks)d benchmark programs, " \
                "%(programs)d programs; %(exports)d exported functions in docs/api.md" % counts
    print("check_docs: ok (%d references in %d files%s)" % (c.refs, len(c.files), extra))
    return 0


if __name__ == "__main__":
    sys.exit(main())
