#!/usr/bin/python3
"""hybrid_ref.py -- an independent reference of vLLM's prefix-cache hit on a hybrid model,
for tests/test_hybrid.c (suite "hybrid"). Written from the behaviour of vLLM's
vllm/v1/core/kv_cache_coordinator.py (HybridKVCacheCoordinator.find_longest_cache_hit: spec
groups, full attention first, the fixed point over the candidate length) and of the
per-kind finders in vllm/v1/core/single_type_kv_cache_manager.py (full attention: the run
from block 0; sliding window: searching right to left for ceil((W - 1) / block_size)
consecutive cached blocks, else the run cached from block 0; Mamba: the last cached state
at an aligned boundary), in tokens and in each group's own blocks -- not from kvidx's code.

Input, one case per line:
    I N GROUPS MASKS
  I       index block size in tokens
  N       blocks of the prompt (index blocks)
  GROUPS  comma-separated g:kind:block_tokens:window (kind full|sliding|mamba)
  MASKS   comma-separated hex, per index block: the groups that hold it (bit g)
Output, one line per case: the hit in index blocks.
"""
import math
import sys


def cdiv(a, b):
    return -(-a // b)


def hit(I, n, groups, masks):
    # Spec groups: groups of one spec are looked up together (a block counts when each
    # member group has it cached), as the coordinator batches them.
    specs = {}
    for g, kind, bs, win in groups:
        specs.setdefault((kind, bs, win), []).append(g)
    order = sorted(specs.items(), key=lambda kv: (kv[0][0] != "full", min(kv[1])))
    align = 1
    for (kind, bs, win), _ in order:
        align = align * bs // math.gcd(align, bs)

    def cached(kind_bs, members, j):
        # group block j (bs tokens) is cached when all its index blocks are held by every member
        bs = kind_bs
        first, last = j * bs // I, ((j + 1) * bs - 1) // I
        if last >= n:
            return False
        want = 0
        for g in members:
            want |= 1 << g
        return all(masks[i] & want == want for i in range(first, last + 1))

    def full(bs, members, length):
        k = 0
        while k < length // bs and cached(bs, members, k):
            k += 1
        return k * bs

    def sliding(bs, win, members, length):
        need = cdiv(win - 1, bs)
        nblk = length // bs
        run = 0
        for i in range(nblk - 1, -1, -1):
            if cached(bs, members, i):
                run += 1
                if run >= need:
                    return (i + run) * bs
            else:
                run = 0
        return run * bs

    def mamba(bs, members, length):
        for i in range(length // bs - 1, -1, -1):
            if (i + 1) * bs % align:
                continue
            if cached(bs, members, i):
                return (i + 1) * bs
        return 0

    length = n * I
    while True:
        cur = length
        for (kind, bs, win), members in order:
            if kind == "full":
                h = full(bs, members, cur)
            elif kind == "sliding":
                h = sliding(bs, win, members, cur)
            else:
                h = mamba(bs, members, cur)
            h -= h % align
            cur = min(cur, h)
        if cur >= length:
            break
        length = cur
    return length // I


def main():
    for line in sys.stdin:
        f = line.split()
        if not f:
            continue
        I, n = int(f[0]), int(f[1])
        groups = []
        for s in f[2].split(","):
            g, kind, bs, win = s.split(":")
            groups.append((int(g), kind, int(bs), int(win)))
        masks = [int(x, 16) for x in f[3].split(",")] if n else []
        print(hit(I, n, groups, masks))


if __name__ == "__main__":
    main()
