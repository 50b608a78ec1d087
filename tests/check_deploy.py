#!/usr/bin/python3
"""check_deploy.py — checks deploy/ for what the README and docs/operations.md promise.

  check_deploy.py --bin DIR [--dir DEPLOY_DIR] [--no-live] [--no-systemd]

Kubernetes (deploy/kubernetes/*.yaml, parsed with python3-yaml), per manifest:
  - a ConfigMap holds the config file that ingestd's --config names, mounted where it looks;
  - every container of the writer's pod and of the readers' pods mounts /dev/shm from the
    same kind of volume: an emptyDir of medium Memory in one pod (the sidecar shape), or a
    hostPath /dev/shm in every pod (the DaemonSet shape);
  - the config's group (ingestd --group) is the fsGroup (or a supplemental group) of every
    pod that maps the index; the readers' --name is the config's name;
  - ingestd's liveness and readiness probes are HTTP GETs on the port --metrics-listen
    binds, as are the prometheus.io annotations; every container has memory requests and
    limits and runs as non-root;
  - live: kvidx-ingestd started from DIR with that ConfigMap's config (pods moved to one local
    kvidx-fakepod, which starts later), --metrics-listen as in the manifest on a free local
    port: the liveness path answers 200, the readiness path 503 while the pod is down and
    200 once it is up, and prometheus.io/path serves the exposition.
Prometheus (deploy/prometheus): static.yml passes `promtool check config`; kubernetes.yml
keeps the manifests' pods (their app label, ingestd's metrics port name) as job kvidx-ingestd.
Containerfile: multi-stage, from Debian bookworm, a non-root USER, no kvidx-fakepod, and its
run-time packages provide every library the installed tools link (ldd here).
systemd (deploy/systemd/*.service): `systemd-analyze verify` with ExecStart pointed at DIR
passes with no message at all, and each unit has the sandboxing docs/operations.md lists.

Exit status 0 if everything holds; 1 with one line per failure.
"""
import argparse
import glob
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import yaml

failures = []
TREE = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def fail(msg):
    failures.append(msg)
    print("check_deploy: FAIL: " + msg, file=sys.stderr)


def parse_conf(text):
    """key = value lines (examples/ingestd.conf's format) as a list of (key, value)."""
    out = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            k, _, v = line.partition("=")
            out.append((k.strip(), v.strip()))
    return out


def flag(args, name):
    """The value of --name in an argument list (last one wins), or None."""
    val = None
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            val = args[i + 1]
        elif a.startswith(name + "="):
            val = a.split("=", 1)[1]
    return val


def pod_specs(docs):
    """(kind, name, pod spec, pod template metadata) of every workload in docs."""
    out = []
    for d in docs:
        if d.get("kind") in ("Deployment", "DaemonSet", "StatefulSet"):
            t = d["spec"]["template"]
            out.append((d["kind"], d["metadata"]["name"], t["spec"], t.get("metadata", {})))
    return out


def containers(spec):
    return list(spec.get("initContainers", [])) + list(spec.get("containers", []))


def cmdline(c):
    return list(c.get("command", [])) + list(c.get("args", []))


def is_ingestd(c):
    cmd = c.get("command")
    return (not cmd and c["name"] == "ingestd") or (cmd and "kvidx-ingestd" in cmd[0])


def shm_volume(spec, c, where):
    """The volume c mounts at /dev/shm, or None (a failure)."""
    mounts = [m for m in c.get("volumeMounts", []) if m.get("mountPath") == "/dev/shm"]
    if not mounts:
        fail(f"{where}: container {c['name']} does not mount /dev/shm")
        return None
    vols = {v["name"]: v for v in spec.get("volumes", [])}
    v = vols.get(mounts[0]["name"])
    if v is None:
        fail(f"{where}: container {c['name']} mounts an undeclared volume at /dev/shm")
    return v


def port_number(c, port):
    if isinstance(port, int):
        return port
    for p in c.get("ports", []):
        if p.get("name") == port:
            return p["containerPort"]
    return None


def check_manifest(path):
    """Checks one manifest; returns what the live check needs, or None."""
    where = os.path.basename(path)
    with open(path) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    cms = {d["metadata"]["name"]: d for d in docs if d.get("kind") == "ConfigMap"}
    workloads = pod_specs(docs)
    writer = [(k, n, s, m, c) for k, n, s, m in workloads for c in containers(s) if is_ingestd(c)]
    if len(writer) != 1:
        fail(f"{where}: expected one kvidx-ingestd container, found {len(writer)}")
        return None
    kind, wname, wspec, wmeta, ing = writer[0]
    args = cmdline(ing)
    conf_path = flag(args, "--config")
    if not conf_path:
        fail(f"{where}: ingestd has no --config")
        return None
    # The config file: the ConfigMap mounted at the --config directory.
    conf_text = None
    vols = {v["name"]: v for v in wspec.get("volumes", [])}
    for m in ing.get("volumeMounts", []):
        if m["mountPath"] == os.path.dirname(conf_path) and "configMap" in vols.get(m["name"], {}):
            cm = cms.get(vols[m["name"]]["configMap"]["name"])
            if cm:
                conf_text = cm.get("data", {}).get(os.path.basename(conf_path))
    if conf_text is None:
        fail(f"{where}: no ConfigMap key {os.path.basename(conf_path)} mounted at "
             f"{os.path.dirname(conf_path)} for --config {conf_path}")
        return None
    conf = parse_conf(conf_text)
    cget = lambda k: next((v for kk, v in reversed(conf) if kk == k), None)
    group = flag(args, "--group") or cget("group")
    name = flag(args, "--name") or cget("name") or "kvidx"
    listen = flag(args, "--metrics-listen") or flag(args, "--metrics") or cget("metrics-listen")
    if not group or not group.isdigit():
        fail(f"{where}: ingestd's group must be a gid (the pods' fsGroup), got {group!r}")
    if not listen or ":" not in listen:
        fail(f"{where}: ingestd has no --metrics-listen ADDR:PORT")
        return None
    mport = int(listen.rsplit(":", 1)[1])

    # /dev/shm and the group in every pod that maps the index.
    wvol = shm_volume(wspec, ing, where)
    shape = None
    if wvol is not None:
        if wvol.get("emptyDir", {}).get("medium") == "Memory":
            shape = "sidecar"
        elif wvol.get("hostPath", {}).get("path") == "/dev/shm":
            shape = "node"
        else:
            fail(f"{where}: ingestd's /dev/shm is neither an emptyDir of medium Memory nor "
                 f"hostPath /dev/shm: {wvol}")
    readers = 0
    for k, n, s, meta in workloads:
        sc = s.get("securityContext", {})
        groups = [sc.get("fsGroup")] + list(sc.get("supplementalGroups", []))
        if group and group.isdigit() and int(group) not in groups:
            fail(f"{where}: {k} {n}: the index group {group} is not its fsGroup or a "
                 f"supplemental group ({groups})")
        if not sc.get("runAsNonRoot"):
            fail(f"{where}: {k} {n}: runAsNonRoot is not set")
        for c in containers(s):
            res = c.get("resources", {})
            if not res.get("requests", {}).get("memory") or not res.get("limits", {}).get("memory"):
                fail(f"{where}: {k} {n}: container {c['name']} lacks memory requests/limits")
            if c is ing:
                continue
            readers += 1
            v = shm_volume(s, c, where)
            if v is None:
                continue
            if shape == "sidecar" and (s is not wspec or v is not wvol):
                fail(f"{where}: {c['name']} does not share ingestd's emptyDir at /dev/shm")
            if shape == "node" and v.get("hostPath", {}).get("path") != "/dev/shm":
                fail(f"{where}: {c['name']} does not mount the node's /dev/shm (hostPath)")
            rname = flag(cmdline(c), "--name") or "kvidx"
            if rname != name:
                fail(f"{where}: {c['name']} reads index {rname!r}, ingestd writes {name!r}")
    if not readers:
        fail(f"{where}: no router container reads the index")

    # Probes and scrape annotations on the --metrics-listen port.
    paths = {}
    for probe in ("livenessProbe", "readinessProbe"):
        g = ing.get(probe, {}).get("httpGet")
        if not g:
            fail(f"{where}: ingestd has no {probe}.httpGet")
            continue
        if port_number(ing, g.get("port")) != mport:
            fail(f"{where}: {probe} port {g.get('port')} is not --metrics-listen's {mport}")
        paths[probe] = g.get("path")
    ann = wmeta.get("annotations", {})
    if ann.get("prometheus.io/scrape") != "true":
        fail(f"{where}: prometheus.io/scrape is not \"true\"")
    if ann.get("prometheus.io/port") != str(mport):
        fail(f"{where}: prometheus.io/port {ann.get('prometheus.io/port')!r} != {mport}")
    paths["scrape"] = ann.get("prometheus.io/path", "/metrics")
    port_name = next((p.get("name") for p in ing.get("ports", [])
                      if p.get("containerPort") == mport), None)
    return {"where": where, "args": args, "conf": conf, "listen": listen, "paths": paths,
            "shape": shape, "port_name": port_name,
            "app_label": wmeta.get("labels", {}).get("app.kubernetes.io/name")}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(port, path):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError as e:
        return None, str(e)


def wait_for(pred, secs=15):
    end = time.monotonic() + secs
    while time.monotonic() < end:
        r = pred()
        if r:
            return r
        time.sleep(0.1)
    return pred()


def live(info, bindir):
    """Runs ingestd from the manifest's config and GETs the probe paths it names."""
    where, paths = info["where"], info["paths"]
    name = f"t-deploy-{os.getpid()}-{info['shape']}"
    pub, rep, port = free_port(), free_port(), free_port()
    lines, pod_done = [], False
    for k, v in info["conf"]:
        if k == "name":
            v = name
        elif k == "group":
            v = str(os.getgid())  # a group this process is in
        elif k == "pod":
            if pod_done:
                continue
            pod_done = True
            extra = [p for p in v.split(",")[1:] if not p.startswith("replay=")]
            v = ",".join([f"tcp://127.0.0.1:{pub}", f"replay=tcp://127.0.0.1:{rep}"] + extra)
        lines.append(f"{k} = {v}")
    tmp = tempfile.mkdtemp(prefix="kvidx-deploy.")
    conf = os.path.join(tmp, "ingestd.conf")
    with open(conf, "w") as f:
        f.write("\n".join(lines) + "\n")
    args = list(info["args"])
    args[args.index("--config") + 1] = conf
    i = args.index("--metrics-listen") if "--metrics-listen" in args else args.index("--metrics")
    args[i + 1] = f"127.0.0.1:{port}"  # $(POD_IP):PORT, here on loopback
    log = open(os.path.join(tmp, "ingestd.log"), "w+")
    procs = [subprocess.Popen([os.path.join(bindir, "kvidx-ingestd")] + args,
                              stdout=log, stderr=subprocess.STDOUT)]
    try:
        lp, rp, sp = paths.get("livenessProbe"), paths.get("readinessProbe"), paths["scrape"]
        st = wait_for(lambda: get(port, lp)[0] == 200 and 200)
        if st != 200:
            log.seek(0)
            fail(f"{where}: liveness path {lp} does not answer 200: {get(port, lp)}; "
                 f"log: {log.read()[-800:]}")
            return
        st, body = get(port, rp)
        if st != 503 or "not ready" not in body:
            fail(f"{where}: readiness path {rp} with the pod down: {st} {body!r} (want 503)")
            if st == 404:
                return  # a path ingestd does not serve: nothing more to wait for
        pod = next(v for k, v in info["conf"] if k == "pod")
        pname = re.search(r"name=([^,]+)", pod)
        pname = pname.group(1) if pname else f"127.0.0.1:{pub}"
        procs.append(subprocess.Popen(
            [os.path.join(bindir, "kvidx-fakepod"), "--pub", f"tcp://127.0.0.1:{pub}",
             "--replay", f"tcp://127.0.0.1:{rep}", "--pod", pname, "--rate", "50"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        if not wait_for(lambda: get(port, rp)[0] == 200):
            log.seek(0)
            fail(f"{where}: readiness path {rp} not 200 with the pod up: {get(port, rp)}; "
                 f"log: {log.read()[-800:]}")
        st, body = get(port, sp)
        if st != 200 or "kvidx_writer_heartbeat_age_seconds" not in body:
            fail(f"{where}: scrape path {sp}: {st} {body[:200]!r}")
    finally:
        for p in reversed(procs):
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for f in glob.glob(f"/dev/shm/{name}") + glob.glob(f"/dev/shm/{name}.*"):
            os.unlink(f)
        log.close()
        subprocess.run(["rm", "-rf", tmp])


def check_containerfile(path, bindir):
    with open(path) as f:
        text = f.read()
    body = "\n".join(l for l in text.splitlines() if not l.lstrip().startswith("#"))
    froms = re.findall(r"^FROM\s+(\S+)", body, re.M)
    argdeb = re.search(r"^ARG DEBIAN=(\S+)", body, re.M)
    deb = argdeb.group(1) if argdeb else ""
    froms = [f.replace("${DEBIAN}", deb) for f in froms]
    if len(froms) < 2 or not all(f.startswith("debian:bookworm") for f in froms):
        fail(f"Containerfile: not multi-stage from debian:bookworm: {froms}")
    users = re.findall(r"^USER\s+(\S+)", body, re.M)
    if not users or users[-1].split(":")[0] in ("root", "0"):
        fail(f"Containerfile: the image does not run as non-root (USER {users})")
    if "fakepod" in body:
        fail("Containerfile: mentions kvidx-fakepod (the image carries no test double)")
    # The last stage's apt-get install list must cover what the installed tools link.
    last = body.split("FROM")[-1]
    m = re.search(r"apt-get install -y --no-install-recommends(.*?)(&&|$)", last.replace("\\\n", " "))
    runtime = set(m.group(1).split()) if m else set()
    essential = {"libc6", "libgcc-s1", "libstdc++6", "zlib1g"}
    with tempfile.TemporaryDirectory() as d:
        r = subprocess.run(["make", "-s", "--no-print-directory", "install", f"DESTDIR={d}",
                            "PREFIX=/usr", "LIBDIR=/usr/lib",
                            f"BUILD={os.path.dirname(os.path.abspath(bindir))}"],
                           capture_output=True, text=True, cwd=TREE)
        if r.returncode:
            fail(f"make install (as the Containerfile runs it): {r.stderr[-500:]}")
            return
        bins = glob.glob(os.path.join(d, "usr/bin/*"))
        if any(os.path.basename(b) == "kvidx-fakepod" for b in bins):
            fail("make install installs kvidx-fakepod")
        libs = set()
        for b in bins + glob.glob(os.path.join(d, "usr/lib/libkvidx.so.*.*")):
            out = subprocess.run(["ldd", b], capture_output=True, text=True).stdout
            for lib in re.findall(r"=> (/\S+)", out):
                if "libkvidx" in lib or re.search(r"lib(a|ub|t|l)san", lib):
                    continue  # ours, or a sanitizer's run time (make SAN=...)
                libs.add(os.path.realpath(lib))
    out = subprocess.run(["dpkg", "-S"] + sorted(libs), capture_output=True, text=True).stdout
    direct = {line.split(":")[0] for line in out.splitlines() if ":" in line}
    # A package that one of the listed ones pulls in is there too.
    out = subprocess.run(["apt-cache", "depends", "--recurse", "--important"] + sorted(runtime),
                         capture_output=True, text=True).stdout
    deps = set(re.findall(r"^([^\s<][^\s]*)$", out, re.M)) | runtime
    missing = sorted(p.split(":")[0] for p in direct if p.split(":")[0] not in deps | essential)
    if missing:
        fail(f"Containerfile: run-time packages {sorted(runtime)} miss {missing}")


SANDBOX = ["NoNewPrivileges=yes", "ProtectSystem=strict", "ReadWritePaths=/dev/shm",
           "PrivateTmp=yes", "ProtectHome=yes", "RemoveIPC=no", "CapabilityBoundingSet="]


def check_systemd(d, bindir):
    units = sorted(glob.glob(os.path.join(d, "*.service")))
    if not any(os.path.basename(u) == "kvidx-ingestd.service" for u in units) or \
       not any(os.path.basename(u).endswith("@.service") for u in units):
        fail(f"systemd: want kvidx-ingestd.service and a template unit, got {units}")
    with tempfile.TemporaryDirectory() as t:
        paths = []
        for u in units:
            with open(u) as f:
                text = f.read()
            lines = set(l.strip() for l in text.splitlines())
            for want in SANDBOX:
                if want not in lines:
                    fail(f"systemd: {os.path.basename(u)} lacks {want}")
            exe = re.search(r"^ExecStart=(\S+)", text, re.M)
            if not exe or not os.path.basename(exe.group(1)).startswith("kvidx-"):
                fail(f"systemd: {os.path.basename(u)}: ExecStart is not a kvidx tool")
                continue
            text = text.replace(os.path.dirname(exe.group(1)) + "/", os.path.abspath(bindir) + "/")
            dst = os.path.join(t, os.path.basename(u).replace("@.service", "@1.service"))
            with open(dst, "w") as f:
                f.write(text)
            paths.append(dst)
        r = subprocess.run(["systemd-analyze", "verify"] + paths, capture_output=True, text=True)
        msg = (r.stdout + r.stderr).strip()
        if r.returncode or msg:
            fail(f"systemd-analyze verify: status {r.returncode}: {msg}")


def check_prometheus(d, infos):
    """deploy/prometheus: static.yml passes promtool check config; kubernetes.yml keeps the
    pods the manifests label, on the port name of ingestd's probes, as job kvidx-ingestd."""
    r = subprocess.run(["promtool", "check", "config", os.path.join(d, "static.yml")],
                       capture_output=True, text=True)
    if r.returncode:
        fail(f"promtool check config static.yml: {r.stdout}{r.stderr}")
    with open(os.path.join(d, "kubernetes.yml")) as f:
        cfg = yaml.safe_load(f)
    jobs = {j["job_name"]: j for j in cfg.get("scrape_configs", [])}
    for path in (os.path.join(d, "static.yml"), os.path.join(d, "kubernetes.yml")):
        with open(path) as f:
            if "kvidx-ingestd" not in {j["job_name"] for j in yaml.safe_load(f)["scrape_configs"]}:
                fail(f"{os.path.basename(path)}: no job kvidx-ingestd (the rules' job)")
    job = jobs.get("kvidx-ingestd", {})
    keeps = {tuple(r.get("source_labels", [])): r.get("regex") for r in
             job.get("relabel_configs", []) if r.get("action") == "keep"}
    for info in infos:
        for label, want in (("__meta_kubernetes_pod_label_app_kubernetes_io_name",
                             info["app_label"]),
                            ("__meta_kubernetes_pod_container_port_name", info["port_name"]),
                            ("__meta_kubernetes_pod_annotation_prometheus_io_scrape", "true")):
            if keeps.get((label,)) != want:
                fail(f"kubernetes.yml: keeps {label} = {keeps.get((label,))!r}, "
                     f"{info['where']} has {want!r}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True, help="the build's bin directory")
    ap.add_argument("--dir", default=os.path.join(TREE, "deploy"))
    ap.add_argument("--no-live", action="store_true")
    ap.add_argument("--no-systemd", action="store_true")
    a = ap.parse_args()
    manifests = sorted(glob.glob(os.path.join(a.dir, "kubernetes", "*.yaml")))
    shapes, infos = [], []
    for m in manifests:
        info = check_manifest(m)
        if info:
            infos.append(info)
            shapes.append(info["shape"])
            if not a.no_live:
                live(info, a.bin)
    if sorted(s for s in shapes if s) != ["node", "sidecar"]:
        fail(f"kubernetes: want the sidecar and the node (DaemonSet) shapes, got {shapes}")
    check_containerfile(os.path.join(a.dir, "Containerfile"), a.bin)
    check_prometheus(os.path.join(a.dir, "prometheus"), infos)
    if not a.no_systemd:
        check_systemd(os.path.join(a.dir, "systemd"), a.bin)
    if failures:
        return 1
    print(f"check_deploy: ok ({len(manifests)} manifests, Containerfile, Prometheus "
          f"configurations, systemd units)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
