#!/usr/bin/python3
"""check_monitoring.py — checks examples/monitoring against kvidx's real metrics.

  check_monitoring.py --metrics FILE [--dir DIR] [--no-promtool]

FILE is what `kvidx-dump --prometheus` printed. Checks, each failure printed on its own line:

  1. promtool check rules and promtool test rules pass (DIR/kvidx-rules.yml and its tests);
  2. the Grafana dashboard (DIR/kvidx-dashboard.json) is structurally sound: the top-level
     fields Grafana needs, unique panel ids, known panel types, grid positions inside the
     24-column grid without overlaps, targets with an expression and a unique refId, every
     $variable defined, and the panels the TTL guide names present;
  3. every kvidx_* metric a rule or a panel uses exists in FILE (histogram families with their
     _bucket/_sum/_count series), and every kvidx:* recording rule a panel uses is defined;
  4. per instance: every `by (...)` and `on (...)` of a rule keeps `instance` (absent() rules
     aside: they have no instance), the rules alert on a dead writer
     (kvidx_writer_heartbeat_age_seconds) and on a down (up == 0) and an absent target; the
     dashboard defines an `instance` variable and selects every kvidx series with it.

Exit status 0 when everything holds, 1 otherwise. Debian's python3 and python3-yaml.
"""
import argparse
import json
import os
import re
import subprocess
import sys

import yaml

METRIC = re.compile(r"\bkvidx_[A-Za-z0-9_]+")
RECORDED = re.compile(r"\bkvidx:[A-Za-z0-9_:]+")
VAR = re.compile(r"\$(?:\{)?([A-Za-z_][A-Za-z0-9_]*)")
GRAFANA_VARS = {"__rate_interval", "__interval", "__range", "__all", "__name"}
PANEL_TYPES = {"timeseries", "heatmap", "stat", "gauge", "table", "bargauge", "text", "row"}
# The panels docs/ttl.md describes (substrings of their titles).
REQUIRED_PANELS = ["latency (heatmap)", "TTL in force vs recommended", "Early, stale and late",
                   "False warm routes", "backlog"]


def exposition_names(text):
    """Metric names a Prometheus text exposition offers."""
    names = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            parts = line.split()
            if len(parts) >= 4:
                names.add(parts[2])
                if parts[3] in ("histogram", "summary"):
                    names.update(parts[2] + s for s in ("_sum", "_count"))
                if parts[3] == "histogram":
                    names.add(parts[2] + "_bucket")
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, 1)[0])
    return names


def rule_exprs(rules):
    out, recorded = [], set()
    for g in rules.get("groups", []):
        for r in g.get("rules", []):
            out.append((r.get("alert") or r.get("record"), r["expr"]))
            if "record" in r:
                recorded.add(r["record"])
    return out, recorded


GROUPING = re.compile(r"\b(by|on)\s*\(([^)]*)\)")
SELECTOR = re.compile(r"\b(kvidx[_:][A-Za-z0-9_:]+)(\{[^}]*\})?")


def check_per_instance(rules, dash_exprs, dash, errs):
    """Item 4 of the docstring: one broken ingestd must show on its own."""
    alerts = {}
    for g in rules.get("groups", []):
        for r in g.get("rules", []):
            name, e = r.get("alert") or r.get("record"), r["expr"]
            if r.get("alert"):
                alerts[name] = e
            if "absent(" in e:
                continue
            for kind, labels in GROUPING.findall(e):
                if "instance" not in [l.strip() for l in labels.split(",")]:
                    errs.append(f"{name}: '{kind} ({labels})' drops instance")
    if not any("kvidx_writer_heartbeat_age_seconds" in e for e in alerts.values()):
        errs.append("rules: no alert on kvidx_writer_heartbeat_age_seconds (a dead writer)")
    if not any(re.search(r"\bup\{[^}]*\}\s*==\s*0", e) for e in alerts.values()):
        errs.append("rules: no alert on a target down (up == 0)")
    if not any("absent(up" in e for e in alerts.values()):
        errs.append("rules: no alert on an absent target (absent(up{...}))")
    names = {v.get("name") for v in dash.get("templating", {}).get("list", [])}
    if "instance" not in names:
        errs.append("dashboard: no instance variable")
    for where, e in dash_exprs:
        if where.startswith("variable instance"):
            continue
        for m, sel in SELECTOR.findall(e):
            if 'instance=~"$instance"' not in sel:
                errs.append(f"panel '{where}': {m} is not selected by instance=~\"$instance\"")


def check_dashboard(d, errs):
    for key in ("title", "uid", "schemaVersion", "panels", "templating"):
        if key not in d:
            errs.append(f"dashboard: no '{key}'")
    if not isinstance(d.get("panels"), list) or not d["panels"]:
        errs.append("dashboard: no panels")
        return []
    defined = {v.get("name") for v in d.get("templating", {}).get("list", [])}
    exprs, ids, cells = [], set(), {}
    for p in d["panels"]:
        t = p.get("title", "?")
        if p.get("id") in ids or not isinstance(p.get("id"), int):
            errs.append(f"panel '{t}': missing or repeated id {p.get('id')!r}")
        ids.add(p.get("id"))
        if p.get("type") not in PANEL_TYPES:
            errs.append(f"panel '{t}': unknown type {p.get('type')!r}")
        g = p.get("gridPos", {})
        if not all(isinstance(g.get(k), int) for k in ("x", "y", "w", "h")):
            errs.append(f"panel '{t}': gridPos needs integer x, y, w, h")
        else:
            if g["x"] < 0 or g["w"] < 1 or g["x"] + g["w"] > 24 or g["h"] < 1:
                errs.append(f"panel '{t}': gridPos {g} outside the 24-column grid")
            for x in range(g["x"], g["x"] + g["w"]):
                for y in range(g["y"], g["y"] + g["h"]):
                    if (x, y) in cells:
                        errs.append(f"panel '{t}' overlaps panel '{cells[(x, y)]}'")
                        break
                    cells[(x, y)] = t
                else:
                    continue
                break
        targets = p.get("targets", [])
        if p.get("type") != "text" and not targets:
            errs.append(f"panel '{t}': no targets")
        refs = set()
        for tg in targets:
            if not tg.get("expr"):
                errs.append(f"panel '{t}': a target without expr")
            if tg.get("refId") in refs or not tg.get("refId"):
                errs.append(f"panel '{t}': missing or repeated refId {tg.get('refId')!r}")
            refs.add(tg.get("refId"))
            exprs.append((t, tg.get("expr", "")))
    for v in d.get("templating", {}).get("list", []):
        q = v.get("query")
        exprs.append((f"variable {v.get('name')}", q.get("query", "") if isinstance(q, dict)
                      else "" if v.get("type") == "datasource" else str(q or "")))
    blob = json.dumps(d)
    for name in set(VAR.findall(blob)) - GRAFANA_VARS:
        if name not in defined:
            errs.append(f"dashboard: ${name} is used but not defined in templating")
    titles = [p.get("title", "") for p in d["panels"]]
    for want in REQUIRED_PANELS:
        if not any(want.lower() in t.lower() for t in titles):
            errs.append(f"dashboard: no panel for '{want}'")
    return exprs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--metrics", required=True)
    ap.add_argument("--dir", default=os.path.join(os.path.dirname(__file__), "..", "examples",
                                                  "monitoring"))
    ap.add_argument("--no-promtool", action="store_true")
    a = ap.parse_args()
    errs = []
    rules_path = os.path.join(a.dir, "kvidx-rules.yml")
    if not a.no_promtool:
        for cmd in (["promtool", "check", "rules", "kvidx-rules.yml"],
                    ["promtool", "test", "rules", "kvidx-rules.test.yml"]):
            r = subprocess.run(cmd, cwd=a.dir, capture_output=True, text=True)
            if r.returncode != 0:
                errs.append(f"{' '.join(cmd)} failed:\n{r.stdout}{r.stderr}")
    with open(rules_path) as f:
        exprs, recorded = rule_exprs(yaml.safe_load(f))
    with open(os.path.join(a.dir, "kvidx-dashboard.json")) as f:
        try:
            dash = json.load(f)
        except ValueError as e:
            errs.append(f"dashboard: not JSON: {e}")
            dash = {}
    dash_exprs = check_dashboard(dash, errs)
    exprs += dash_exprs
    with open(rules_path) as f:
        check_per_instance(yaml.safe_load(f), dash_exprs, dash, errs)
    with open(a.metrics) as f:
        have = exposition_names(f.read())
    used = 0
    for where, e in exprs:
        for m in METRIC.findall(e):
            used += 1
            if m not in have:
                errs.append(f"{where}: metric {m} is not in kvidx's exposition")
        for m in RECORDED.findall(e):
            if m not in recorded:
                errs.append(f"{where}: recording rule {m} is not defined in kvidx-rules.yml")
    if used == 0:
        errs.append("no kvidx metric used at all: the checker found nothing to check")
    for e in errs:
        print(e)
    if not errs:
        print(f"monitoring: ok ({len(exprs)} expressions, {used} metric uses, all in the "
              f"exposition)")
    return 1 if errs else 0


if __name__ == "__main__":
    sys.exit(main())
