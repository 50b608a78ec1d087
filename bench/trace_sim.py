#!/usr/bin/python3
"""trace_sim.py — a fluid model of bench/trace.sh, to reason about policies in seconds:
  trace_sim.py ideal TRACE LIMIT PODS KV_BLOCKS
        the trace's reusable share with perfect placement and one LRU cache of the whole
        fleet's KV (PODS x KV_BLOCKS x 16 tokens): what the pods' caches can hold of the
        trace's reuse, beside the unbounded ideal (bench/trace_report.py)
  trace_sim.py table TRACE LIMIT [PODS]
        TTFT p50/p99, cached share and imbalance per policy on the trace at loads 0.6 and 0.9
        and on the hot spot, in the model below

The model: each pod prefills first come, first served at RATE tokens/s (no chunking, no step
overhead, no decode interference), its KV cache an LRU of KV_BLOCKS x 16 tokens kept per
Mooncake block of 512 tokens; a request is in flight until its prefill ends plus 5 ms per
output token. Policies as tools/route/policy.c decides them from that state: kvidx (the
expected TTFT and the balance guard, kvidx-route's defaults: slack 0.15, margin 3000 tokens,
half-life 30 s), least-loaded, round-robin, prefix. It is not the pod
model (tools/fakepod/engine.c) and it leaves out the index (a pick sees the caches as they
are): it ranks designs, and the benchmark measures them.
"""
import json
import math
import random
import sys
from collections import OrderedDict

BLOCK = 512        # tokens per Mooncake hash id
INDEX_BLOCK = 16
RATE = 24000.0     # kvidx-fakepod's prefill tokens/s
KV_BLOCKS = 25000  # and its KV cache, blocks of 16 tokens
DECODE_S = 0.005   # per output token, for the time a request is in flight


def load_trace(path, limit):
    reqs = []
    for line in open(path):
        line = line.strip()
        if line and not line.startswith("#"):
            reqs.append(json.loads(line))
            if limit and len(reqs) >= limit:
                break
    return reqs


def usable(r, k):
    """Tokens of request r cached with its first k ids held (never the last token)."""
    return min(k * BLOCK, (r["input_length"] - 1) // INDEX_BLOCK * INDEX_BLOCK)


def capacity_ideal(reqs, pods, kv_blocks):
    """Cached share with perfect placement and the fleet's KV as one LRU of hash ids."""
    cap = pods * kv_blocks * INDEX_BLOCK // BLOCK
    lru, hit, tot = OrderedDict(), 0, 0
    for r in reqs:
        ids, k = r["hash_ids"], 0
        while k < len(ids) and ids[k] in lru:
            k += 1
        hit += usable(r, k)
        tot += r["input_length"]
        for i in ids:
            lru[i] = 1
            lru.move_to_end(i)
        while len(lru) > cap:
            lru.popitem(last=False)
    return hit / tot if tot else 0.0


class Fleet:
    """The pods' queues, caches, requests in flight and the router's decayed work."""

    def __init__(self, pods, slack, half_life, margin):
        self.n, self.slack, self.half_life, self.margin = pods, slack, half_life, margin
        self.busy = [0.0] * pods
        self.caches = [OrderedDict() for _ in range(pods)]
        self.ends, self.work, self.decayed, self.t_work = [], [0] * pods, [0.0] * pods, 0.0
        self.rr = 0

    def pick(self, policy, t, ids, prompt, match):
        n = self.n
        self.ends = [(e, p) for e, p in self.ends if e > t]
        infl = [0] * n
        for _, p in self.ends:
            infl[p] += 1
        f = math.exp(-(t - self.t_work) * math.log(2) / self.half_life)
        self.decayed = [w * f for w in self.decayed]
        self.t_work = t
        q = [max(self.busy[i] - t, 0) * RATE for i in range(n)]
        order = {(self.rr + k) % n: k for k in range(n)}
        if policy == "round-robin":
            p = self.rr
        elif policy == "least-loaded":
            p = min(range(n), key=lambda i: (infl[i], order[i]))
        elif policy == "prefix":
            p = min(range(n), key=lambda i: (-match[i], infl[i], order[i]))
        else:
            lim = ((1 + self.slack) * sum(self.decayed) / n + self.margin if self.slack
                   else math.inf)
            cand = [i for i in range(n) if self.decayed[i] <= lim or (not infl[i] and not q[i])]
            cand = cand or list(range(n))
            p = min(cand, key=lambda i: (q[i] + prompt - match[i], infl[i], order[i]))
        self.rr = (p + 1) % n
        return p

    def run(self, p, t, prompt, cached, out_tokens):
        u = prompt - cached
        self.work[p] += u
        self.decayed[p] += u
        self.busy[p] = max(self.busy[p], t) + u / RATE
        self.ends.append((self.busy[p] + out_tokens * DECODE_S, p))
        return self.busy[p] - t


def summary(ttft, hit, tot, work):
    ttft.sort()
    mean = sum(work) / len(work)
    return (ttft[len(ttft) // 2] * 1e3, ttft[int(len(ttft) * 0.99)] * 1e3, hit / tot,
            max(work) / mean if mean else 0)


def sim_trace(reqs, policy, load, pods, slack=0.15, half_life=30.0, margin=3000,
              kv_blocks=KV_BLOCKS):
    tokens = sum(r["input_length"] for r in reqs)
    span = (reqs[-1]["timestamp"] - reqs[0]["timestamp"]) / 1000.0 or 1.0
    speedup = load * pods * RATE / (tokens / span)
    fl, cap = Fleet(pods, slack, half_life, margin), kv_blocks * INDEX_BLOCK // BLOCK
    ttft, hit = [], 0
    for r in reqs:
        t, ids = r["timestamp"] / 1000.0 / speedup, r["hash_ids"]
        match = []
        for c in fl.caches:
            k = 0
            while k < len(ids) and ids[k] in c:
                k += 1
            match.append(usable(r, k))
        p = fl.pick(policy, t, ids, r["input_length"], match)
        hit += match[p]
        ttft.append(fl.run(p, t, r["input_length"], match[p], r["output_length"]))
        c = fl.caches[p]
        for i in ids:
            c[i] = 1
            c.move_to_end(i)
        while len(c) > cap:
            c.popitem(last=False)
    return summary(ttft, hit, tokens, fl.work)


def sim_hot(policy, pods, n=1500, load=0.3, prefix=4096, suffix=512, slack=0.15,
            half_life=30.0, margin=3000, seed=1):
    rate = load * pods * RATE / suffix
    rnd, fl, t = random.Random(seed), Fleet(pods, slack, half_life, margin), 0.0
    warm, ttft, hit = [False] * pods, [], 0
    for _ in range(n):
        t += rnd.expovariate(rate)
        match = [prefix if w else 0 for w in warm]
        p = fl.pick(policy, t, None, prefix + suffix, match)
        hit += match[p]
        warm[p] = True
        ttft.append(fl.run(p, t, prefix + suffix, match[p], 64))
    return summary(ttft, hit, n * (prefix + suffix), fl.work)


def table(trace, limit, pods):
    reqs = load_trace(trace, limit)
    rows = [("kvidx", {}), ("kvidx", {"slack": 0}), ("least-loaded", {}),
            ("round-robin", {}), ("prefix", {})]
    print("workload load policy                p50_ms   p99_ms cached  imbal")
    for load in (0.6, 0.9):
        for pol, kw in rows:
            r = sim_trace(reqs, pol, load, pods, **kw)
            name = pol + (" (no guard)" if kw else "")
            print("trace    %4.1f %-20s %8.0f %8.0f %6.3f %6.2f" % ((load, name) + r))
    for pol, kw in rows:
        r = sim_hot(pol, pods, **kw)
        name = pol + (" (no guard)" if kw else "")
        print("hotspot  %4.1f %-20s %8.0f %8.0f %6.3f %6.2f" % ((0.3, name) + r))


def main(a):
    if len(a) >= 6 and a[1] == "ideal":
        print("%.4f" % capacity_ideal(load_trace(a[2], int(a[3])), int(a[4]), int(a[5])))
    elif len(a) >= 4 and a[1] == "table":
        table(a[2], int(a[3]), int(a[4]) if len(a) > 4 else 8)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
