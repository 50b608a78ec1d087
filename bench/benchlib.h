/*
 * benchlib.h — the out-of-line half of what the benchmarks share (bench.h keeps the static,
 * inlined half): command-line handling common to every bench_* program and the Concurrency
 * Kit baselines' object, hash, comparison and allocator.
 */
#ifndef KVIDX_BENCHLIB_H
#define KVIDX_BENCHLIB_H

#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <ck_hs.h>

#include "layout.h"

/* The program's name (its PROG), defined by bench.h in each benchmark. */
extern const char bl_prog[];

/* The last lines of the --help text of the benchmarks whose option column is 15 wide. */
#define BL_HELP_TAIL \
	"  --json FILE    append one JSON object per row to FILE\n" \
	"  -h, --help     this text\n"

int bl_getopt(int argc, char **argv, const struct option *lo, void (*usage)(FILE *f));

/* An entry of a ck_hs baseline: the key and up to three pods holding it. */
struct bl_ck_obj {
	uint64_t key;
	uint16_t pod[3];
	uint16_t npods;
};

/* ck_hs's hash of an object (or a bare key: the key is its first member). */
static inline unsigned long bl_ck_hash(const void *obj, unsigned long seed)
{
	return (unsigned long)(kv_mix(*(const uint64_t *)obj) ^ seed);
}

/* ck_hs's comparison: two objects (or keys) are the same if their keys are. */
static inline bool bl_ck_cmp(const void *a, const void *b)
{
	return *(const uint64_t *)a == *(const uint64_t *)b;
}

extern struct ck_malloc bl_ck_alloc;

#endif
