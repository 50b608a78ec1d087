#!/usr/bin/python3
"""check_doors.py — the tools reach the index only through its doors (run by test_layers.c).

The doors are the public headers (lib/kvidx.h, lib/kvidx_writer.h), lib/telemetry.h for the
counters and histograms, and lib/inspect.h for the inspection tools' view. Under tools/ (and
bench/ for the telemetry rules) this fails on:
  - an #include of shm/layout.h (the segment's bytes are lib/'s business);
  - a raw telemetry word: pd_ctr, rt_ctr, rt_hist, struct kvidx_stats or kvidx_router, the
    stats through ->st->, or the raw accessors under telemetry.h's handles (kv_writer_pod_ctrs, kv_writer_pod_hist,
    kv_view_pod_hist, kv_writer_router, kv_view_router, kv_writer_stats);
  - a histogram named by a bare number (kv_tm_hist(w, pod, 1), kv_tm_view_hist(v, pod, 0)):
    histograms are named by enum kv_hist_id.
Usage: tests/check_doors.py [--root DIR]. Prints "check_doors: ok (N files)" or one line per
finding, "FILE:LINE: what", and exits 1.
"""
import argparse
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*[<"](?:\.\./)*(?:shm/)?layout\.h[">]')
RAW = re.compile(r"\b(pd_ctr|rt_ctr|rt_hist|kv_writer_pod_ctrs|kv_writer_pod_hist|"
                 r"kv_view_pod_hist|kv_writer_router|kv_view_router|kv_writer_stats|"
                 r"kvidx_stats|kvidx_router)\b|->st->")
HIST_CALL = re.compile(r"\bkv_(?:tm_(?:view_)?hist|writer_pod_hist|view_pod_hist)\s*\(")


def sources(root, top):
    for d, _, files in os.walk(os.path.join(root, top)):
        for f in sorted(files):
            if f.endswith((".c", ".h")):
                yield os.path.join(d, f)


def bare_hist_ids(code):
    """Line numbers of histogram calls whose id (third argument) holds a number literal
    outside KV_HIST_CLASS(...), e.g. kv_tm_view_hist(v, pod, recent ? 1 : 0)."""
    found = []
    for m in HIST_CALL.finditer(code):
        depth, args, cur, i = 1, [], "", m.end()
        while i < len(code) and depth:
            c = code[i]
            depth += c == "("
            depth -= c == ")"
            if depth == 1 and c == ",":
                args.append(cur)
                cur = ""
            elif depth:
                cur += c
            i += 1
        args.append(cur)
        if len(args) >= 3:
            rest = re.sub(r"KV_HIST_CLASS\s*\([^()]*\)", "", args[2])
            if re.search(r"\b\d+\b", rest):
                found.append(code.count("\n", 0, m.start()) + 1)
    return found


def strip_comments(text):
    """Comments and string literals blanked, newlines kept (so line numbers stay)."""
    def blank(m):
        return re.sub(r"[^\n]", " ", m.group(0))
    return re.sub(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"', blank, text, flags=re.S)


def check(root):
    problems, n = [], 0
    for top in ("tools", "bench"):
        for path in sources(root, top):
            n += 1
            rel = os.path.relpath(path, root)
            with open(path, encoding="utf-8", errors="replace") as f:
                raw = f.read()
            code = strip_comments(raw)
            for i, (line, cline) in enumerate(zip(raw.split("\n"), code.split("\n")), 1):
                if top == "tools" and INCLUDE.match(line):
                    problems.append("%s:%d: includes shm/layout.h (use lib/telemetry.h or a "
                                    "public header)" % (rel, i))
                m = RAW.search(cline)
                if m:
                    problems.append("%s:%d: raw telemetry word %s (use lib/telemetry.h)"
                                    % (rel, i, m.group(0)))
            for i in bare_hist_ids(code):
                problems.append("%s:%d: histogram named by a number (use enum kv_hist_id)"
                                % (rel, i))
    return problems, n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default=".")
    a = ap.parse_args()
    problems, n = check(a.root)
    for p in problems:
        print(p)
    if problems:
        return 1
    print("check_doors: ok (%d files)" % n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
