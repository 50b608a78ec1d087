/*
 * arena.c — the writer's entry allocator: size classes, a bump pointer over the data
 * segment's arena region, and one free list per class. Single-threaded (the writer's), O(1)
 * per call, and not concurrent: readers only read units, and an entry comes back here only
 * through rcu.c, after a grace period.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"

void kv_arena_init(struct kv_arena *a, uint64_t *base, uint64_t units, unsigned ppk,
		   struct kvidx_stats *st)
{
	unsigned c = 1;

	memset(a, 0, sizeof(*a));
	a->base = base;
	a->units = units;
	a->st = st;
	while (a->ncls < KV_NCLASSES) {
		if (c >= ppk) {
			a->cls_cap[a->ncls++] = (uint8_t)ppk;
			break;
		}
		a->cls_cap[a->ncls++] = (uint8_t)c;
		c *= 2;
	}
	a->bump = 1; /* unit 0 is never an entry: slot words use index 0 for EMPTY/TOMB */
}

void kv_arena_fini(struct kv_arena *a)
{
	for (unsigned c = 0; c < KV_NCLASSES; c++)
		free(a->freel[c].v);
	memset(a->freel, 0, sizeof(a->freel));
}

unsigned kv_arena_class(const struct kv_arena *a, unsigned need)
{
	for (unsigned c = 0; c < a->ncls; c++)
		if (a->cls_cap[c] >= need)
			return c;
	return a->ncls - 1;
}

int kv_arena_class_of(const struct kv_arena *a, unsigned cap)
{
	for (unsigned c = 0; c < a->ncls; c++)
		if (a->cls_cap[c] == cap)
			return (int)c;
	return -1; /* not a cap the writer writes: the entry is damaged */
}

uint32_t kv_arena_alloc(struct kv_arena *a, unsigned cls)
{
	struct kv_u32vec *f = &a->freel[cls];
	uint64_t units = 1 + (uint64_t)a->cls_cap[cls];

	/* Free-list entries came back through RCU from the segment's meta words, which were
	 * checked then (table.c, entry_class()); checked again against the arena's end. */
	while (f->n) {
		uint32_t idx = f->v[--f->n];
		if (idx && (uint64_t)idx + units <= a->units)
			return idx;
	}
	if (a->bump + units > a->units)
		return 0;
	uint32_t idx = (uint32_t)a->bump;
	a->bump += units;
	stat_add(&a->st->arena_used, units);
	return idx;
}

int kv_arena_free(struct kv_arena *a, uint32_t idx, unsigned cls)
{
	struct kv_u32vec *f;

	if (cls >= a->ncls || idx == 0 || idx >= a->bump)
		return 0; /* not an entry this arena handed out: dropped (never reused) */
	f = &a->freel[cls];

	if (f->n == f->cap) {
		size_t ncap = f->cap ? f->cap * 2 : 1024;
		uint32_t *nv = realloc(f->v, ncap * sizeof(*nv));
		if (!nv)
			return -ENOMEM; /* the caller keeps the entry and tries again later */
		f->v = nv;
		f->cap = ncap;
	}
	f->v[f->n++] = idx;
	return 0;
}

bool kv_arena_tight(const struct kv_arena *a)
{
	size_t nfree = 0;

	if (a->bump + 1 + a->cls_cap[a->ncls - 1] <= a->units)
		return false;
	for (unsigned c = 0; c < a->ncls; c++)
		nfree += a->freel[c].n;
	return nfree < 16;
}
