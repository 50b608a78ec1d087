#!/usr/bin/python3
"""trace_report.py — the numbers of bench/trace.sh, from kvidx-route --json runs:
  stats TRACE LIMIT            the trace's prompt tokens per second at speedup 1
  line FILE WORKLOAD LOAD POLICY SCALE   one run's row, printed as it ends
  report RUNS TRACE LIMIT HOT_PREFIX HOT_SUFFIX SCALE JSON SVG PODS KV_BLOCKS
                               the table, the targets' verdicts, trace.json, the TTFT CDFs
Times are the pods' model time (kvidx-fakepod's X-Fakepod-Ttft-Seconds); a run's rate is
its answers per wall second over the time scale (a model second is 1/scale wall seconds)."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trace_sim  # noqa: E402  (the capacity-bound ideal)

BLOCK = 512  # tokens per Mooncake hash id
INDEX_BLOCK = 16


def load_trace(path, limit):
    reqs = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            try:
                r = json.loads(line)
            except ValueError:
                continue
            reqs.append(r)
            if limit and len(reqs) >= limit:
                break
    return reqs


def trace_stats(reqs):
    tokens = sum(r["input_length"] for r in reqs)
    span = (reqs[-1]["timestamp"] - reqs[0]["timestamp"]) / 1000.0 or 1.0
    # Ideal reuse: unbounded caches, perfect placement: each prompt's longest prefix of ids
    # seen before is cached (at most the prompt less its last token, in index blocks).
    seen, cached = set(), 0
    for r in reqs:
        ids, k = r["hash_ids"], 0
        while k < len(ids) and ids[k] in seen:
            k += 1
        cap = (r["input_length"] - 1) // INDEX_BLOCK * INDEX_BLOCK
        cached += min(k * BLOCK, cap)
        seen.update(ids)
    return tokens / span, cached / tokens if tokens else 0.0


def run_row(path, workload, load, policy, scale):
    summary, ttfts = None, []
    with open(path) as f:
        for line in f:
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if e.get("event") == "outcome" and e.get("status") == "ok" and e["ttft_ms"] >= 0:
                ttfts.append(e["ttft_ms"])
            elif e.get("event") == "summary":
                summary = e
    if summary is None:
        return None, ttfts
    s = summary
    pre = list(s["pod_prefill_tokens"].values())
    mean = sum(pre) / len(pre) if pre else 0
    row = {
        "workload": workload, "load": float(load), "policy": policy,
        "ttft_p50_ms": s["ttft_p50_ms"], "ttft_p90_ms": s["ttft_p90_ms"],
        "ttft_p99_ms": s["ttft_p99_ms"],
        "cached_share": s["cached_tokens"] / s["prompt_tokens"] if s["prompt_tokens"] else 0,
        "ideal_share": None, "capacity_share": None,
        "imbalance": max(pre) / mean if mean else 0,
        "completed_per_s": s["answers_per_s"] / scale,
        "false_warm": s["false_warm"],
        "requests": s["decisions"], "ok": s["ok"], "ttft_from_pod": s["ttft_from_pod"],
        "routed": list(s["pods"].values()),
    }
    return row, ttfts


def fmt(r):
    return ("%-8s %4.2f %-12s %9.1f %9.1f %9.1f %6.3f %6.3f %6.3f %5.2f %7.2f %5d  %s" % (
        r["workload"], r["load"], r["policy"], r["ttft_p50_ms"], r["ttft_p90_ms"],
        r["ttft_p99_ms"], r["cached_share"], r["ideal_share"] or 0, r["capacity_share"] or 0,
        r["imbalance"], r["completed_per_s"], r["false_warm"],
        " ".join(str(x) for x in r["routed"])))


HEAD = ("workload load policy          p50_ms    p90_ms    p99_ms cached  ideal ideal@kv imbal"
        "   req/s  fwarm  routed per pod")


def svg(groups, path):
    """One panel per (workload, load): the TTFT CDF of each policy, log-scaled x."""
    import math
    colors = ["#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]
    W, H, pad = 420, 260, 45
    keys = sorted(groups)
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
           'font-family="sans-serif" font-size="11">' % (W * len(keys), H + 60)]
    for gi, key in enumerate(keys):
        x0 = gi * W
        runs = groups[key]
        allv = [v for _, vs in runs for v in vs if v > 0]
        if not allv:
            continue
        lo, hi = math.log10(min(allv)), math.log10(max(allv))
        hi = hi if hi > lo else lo + 1
        sx = lambda v: x0 + pad + (math.log10(max(v, 10 ** lo)) - lo) / (hi - lo) * (W - 2 * pad)
        sy = lambda q: 20 + (1 - q) * (H - 40)
        out.append('<text x="%d" y="14">%s, load %s: TTFT CDF (model ms, log)</text>' % (
            x0 + pad, key[0], key[1]))
        out.append('<rect x="%d" y="20" width="%d" height="%d" fill="none" stroke="#999"/>' % (
            x0 + pad, W - 2 * pad, H - 40))
        for t in range(int(math.floor(lo)), int(math.ceil(hi)) + 1):
            if lo <= t <= hi:
                out.append('<text x="%.1f" y="%d" text-anchor="middle">%g</text>' % (
                    sx(10 ** t), H - 6, 10 ** t))
        for ci, (pol, vs) in enumerate(runs):
            vs = sorted(v for v in vs if v > 0)
            if not vs:
                continue
            pts = " ".join("%.1f,%.1f" % (sx(v), sy((i + 1) / len(vs)))
                           for i, v in enumerate(vs))
            c = colors[ci % len(colors)]
            out.append('<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>' % (
                c, pts))
            out.append('<text x="%d" y="%d" fill="%s">%s</text>' % (
                x0 + pad + (ci % 3) * 110, H + 15 + (ci // 3) * 14, c, pol))
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def report(runs_path, trace, limit, hot_prefix, hot_suffix, scale, json_path, svg_path, pods,
           kv_blocks):
    reqs = load_trace(trace, limit)
    _, ideal_trace = trace_stats(reqs)
    # What the pods' caches can hold of it: perfect placement, the fleet's KV as one LRU.
    cap_trace = trace_sim.capacity_ideal(reqs, pods, kv_blocks)
    rows, groups = [], {}
    for line in open(runs_path):
        w, l, p, f, *rest = line.split()
        run_scale = float(rest[0]) if rest else scale  # trace.sh writes each run's scale
        row, ttfts = run_row(f, w, l, p, run_scale)
        if row is None:
            print("trace_report: no summary in %s" % f)
            continue
        row["time_scale"] = run_scale
        if w == "trace":
            row["ideal_share"] = ideal_trace
            row["capacity_share"] = cap_trace
        else:
            n = max(row["requests"], 1)
            row["ideal_share"] = (n - 1) / n * hot_prefix / (hot_prefix + hot_suffix)
            row["capacity_share"] = row["ideal_share"]  # one prompt: it fits
        rows.append(row)
        groups.setdefault((w, l), []).append((p, ttfts))
    print(HEAD)
    for r in rows:
        print(fmt(r))
    print()
    # Targets (printed, never asserted).
    for (w, l) in sorted(groups):
        g = {r["policy"]: r for r in rows if r["workload"] == w and r["load"] == float(l)}
        k = g.get("kvidx")
        if not k:
            continue
        for other, r in g.items():
            if other == "kvidx":
                continue
            print("target %s load %s: kvidx vs %-12s TTFT p50 x%.2f p99 x%.2f (<= 1: as good)"
                  % (w, l, other, k["ttft_p50_ms"] / r["ttft_p50_ms"] if r["ttft_p50_ms"] else 0,
                     k["ttft_p99_ms"] / r["ttft_p99_ms"] if r["ttft_p99_ms"] else 0))
        if "prefix" in g and g["prefix"]["cached_share"]:
            print("target %s load %s: kvidx cached share %.3f = x%.2f of prefix's (>= 0.9), "
                  "x%.2f of the ideal, x%.2f of what the caches can hold (>= 0.9)" % (
                      w, l, k["cached_share"], k["cached_share"] / g["prefix"]["cached_share"],
                      k["cached_share"] / k["ideal_share"] if k["ideal_share"] else 0,
                      k["cached_share"] / k["capacity_share"] if k["capacity_share"] else 0))
        print("target %s load %s: kvidx imbalance %.2f (<= 1.3: %s)" % (
            w, l, k["imbalance"], "met" if k["imbalance"] <= 1.3 else "MISSED"))
    with open(json_path, "w") as f:
        json.dump({"rows": rows, "time_scale": scale}, f, indent=1)
    svg(groups, svg_path)
    print("trace_report: wrote %s and %s" % (json_path, svg_path))


def main(a):
    if a[1] == "stats":
        rate, _ = trace_stats(load_trace(a[2], int(a[3])))
        print("%.1f" % rate)
    elif a[1] == "line":
        row, _ = run_row(a[2], a[3], a[4], a[5], float(a[6]))
        if row:
            print(fmt(row))
    elif a[1] == "report":
        report(a[2], a[3], int(a[4]), int(a[5]), int(a[6]), float(a[7]), a[8], a[9],
               int(a[10]), int(a[11]))


if __name__ == "__main__":
    main(sys.argv)
