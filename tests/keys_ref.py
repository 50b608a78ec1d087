#!/usr/bin/python3
"""keys_ref.py -- an independent reference for cbor-fnv request keys with extras.

Prints what `kvidx-hash` prints for the same arguments (cbor-fnv only), computed from
llm-d's definition with the cbor2 package's canonical encoder instead of lib/keys.c:
root = FNV-1a-64(CBOR [FNV-1a-64(seed), null, model or LoRA name]), then per full block
key = FNV-1a-64(CBOR [parent, tokens, extra]), extra = null or [{"Hash": id}, ...] with the
ids of the multimodal items overlapping the block in start order, then the salt on block 0.
tests/test_keys.c runs it with Debian's /usr/bin/python3 (python3-cbor2) when present.

Usage: keys_ref.py [--seed S] [--model M] [--lora NAME] [--salt S]
                   [--mm START:LEN:ID]... [--block-size N] TOKEN...
"""
import sys

import cbor2


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for b in data:
        h ^= b
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def cbor_hash(parent, tokens, extra):
    return fnv1a64(cbor2.dumps([parent, tokens, extra], canonical=True))


def main(argv):
    seed, model, lora, salt, bs = "", "", None, None, 16
    items, tokens = [], []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("--seed", "--model", "--lora", "--salt", "--mm", "--block-size"):
            v = argv[i + 1]
            i += 2
            if a == "--seed":
                seed = v
            elif a == "--model":
                model = v
            elif a == "--lora":
                lora = v
            elif a == "--salt":
                salt = v
            elif a == "--block-size":
                bs = int(v)
            else:
                start, length, ident = v.split(":", 2)
                items.append((int(start), int(length), ident))
            continue
        tokens.extend(int(t) for t in a.replace(",", " ").split())
        i += 1

    parent = cbor_hash(fnv1a64(seed.encode()), None, lora if lora is not None else model)
    items.sort(key=lambda it: it[0])  # stable: equal starts keep their order
    for b in range(len(tokens) // bs):
        lo, hi = b * bs, (b + 1) * bs
        ids = [ident for (start, length, ident) in items if start < hi and start + length > lo]
        if b == 0 and salt:
            ids.append(salt)
        extra = [{"Hash": s} for s in ids] if ids else None
        parent = cbor_hash(parent, tokens[lo:hi], extra)
        print("0x%016x" % parent)


if __name__ == "__main__":
    main(sys.argv[1:])
