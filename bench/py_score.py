#!/usr/bin/python3
"""py_score.py — the Python binding's call cost against the C API's, in the same run.

  make python build/bin/testidx && PYTHONPATH=build/python /usr/bin/python3 bench/py_score.py [BUILD]

Builds an index with tests/testidx (4 pods holding all 512 blocks of one prompt on the GPU),
then alternates, five times each: kvidx_score() on the 512 keys timed in C (testidx time)
and Reader.score() on the same keys timed in Python (array('Q') from Reader.keys, and a
list); then Reader.keys() on 8192 tokens from a list, an array('I') and a NumPy array,
against kvidx_key_chain() in C. Figures are ns per call, median/minimum (the machine is
shared: the minimum is the least disturbed); one summary line per measure.
Not part of make test (timings are never asserted).
"""
import array
import os
import statistics
import subprocess
import sys
import time

import kvidx

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
TESTIDX = os.path.join(BUILD, "bin", "testidx")
ROUNDS = 15


def per_call_ns(fn):
    """(median, minimum) over ROUNDS rounds of ns per call, each round ~2 ms of calls."""
    reps = 1
    while True:
        t = time.perf_counter_ns()
        for _ in range(reps):
            fn()
        if time.perf_counter_ns() - t > 2_000_000:
            break
        reps *= 2
    out = []
    for _ in range(ROUNDS):
        t = time.perf_counter_ns()
        for _ in range(reps):
            fn()
        out.append((time.perf_counter_ns() - t) / reps)
    return statistics.median(out), min(out)


def c_time(*args):
    """testidx time/time-keys: (median, minimum) ns per call."""
    out = subprocess.run([TESTIDX, *args], capture_output=True, text=True, check=True).stdout
    f = dict(w.split("=") for w in out.split())
    return int(f.get("score_ns", f.get("keys_ns"))), int(f["min_ns"])


def fig(label, values):
    """label=MEDIAN/MIN over interleaved repetitions (median of medians, min of minima)."""
    return f"{label}={statistics.median(v[0] for v in values):.0f}/{min(v[1] for v in values):.0f}"


def main():
    name = f"bench-py-{os.getpid()}"
    w = subprocess.Popen([TESTIDX, "write", name], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True, bufsize=1)
    assert w.stdout.readline().strip() == "ready"

    def cmd(line):
        w.stdin.write(line + "\n")
        reply = w.stdout.readline().strip()
        assert not reply.startswith("error"), reply
        return reply

    try:
        pods = [int(cmd(f"pod 10.0.0.{i}:8000 m").split()[1]) for i in range(1, 5)]
        r = kvidx.Reader(name)
        tokens = list(range(1, 16 * 512 + 1))
        keys = r.keys(tokens, "m")
        assert len(keys) == 512
        hexkeys = ["%x" % k for k in keys]
        for p in pods:
            cmd(f"store {p} gpu " + " ".join(hexkeys))
        rows = r.score(keys)
        assert len(rows) == 4 and all(s.blocks == 512 for s in rows)

        c, py_arr, py_list, py_one = [], [], [], []
        klist, one = list(keys), keys[:1]
        for _ in range(5):  # interleaved, so both see the same machine
            c.append(c_time("time", name, str(ROUNDS), *hexkeys))
            py_arr.append(per_call_ns(lambda: r.score(keys)))
            py_list.append(per_call_ns(lambda: r.score(klist)))
            py_one.append(per_call_ns(lambda: r.score(one)))
        print("py_score: blocks=512 pods=4 ns median/min " + " ".join(
            [fig("c", c), fig("py_array", py_arr), fig("py_list", py_list), fig("py_1key", py_one)]))

        t8 = list(range(1, 8193))
        ta = array.array("I", t8)
        ck, kl, ka, kn = [], [], [], []
        try:
            import numpy as np
            tn = np.array(t8, dtype=np.uint32)
        except ImportError:
            tn = None
        for _ in range(5):
            ck.append(c_time("time-keys", "cbor-fnv", "16", "8192", str(ROUNDS)))
            kl.append(per_call_ns(lambda: r.keys(t8, "m")))
            ka.append(per_call_ns(lambda: r.keys(ta, "m")))
            if tn is not None:
                kn.append(per_call_ns(lambda: r.keys(tn, "m")))
        print("py_keys: tokens=8192 algo=cbor-fnv ns median/min " + " ".join(
            [fig("c", ck), fig("py_list", kl), fig("py_array", ka)] + ([fig("py_numpy", kn)] if kn else [])))
        r.close()
    finally:
        w.stdin.close()
        w.wait()


if __name__ == "__main__":
    main()
