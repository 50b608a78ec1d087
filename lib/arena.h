/*
 * arena.h — internal, never installed: the writer's entry allocator (arena.c), the bottom
 * layer of the writer. It hands out and takes back runs of 16-byte units of the data
 * segment's arena; it knows nothing of slots, readers or grace periods (rcu.c decides when a
 * retired entry may come back here).
 */
#ifndef KVIDX_ARENA_H
#define KVIDX_ARENA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "layout.h"
#include "telemetry.h"

#define KV_NCLASSES 8 /* entry size classes: caps 1, 2, 4, ... up to pods_per_key */

/* A growable array of entry indices (a free list of one size class). */
struct kv_u32vec {
	uint32_t *v;
	size_t n, cap;
};

/*
 * An entry of class c is one header unit (key, meta) plus cls_cap[c] record units. Unit 0 is
 * never handed out: slot words use entry index 0 for EMPTY and TOMB. All of this is private
 * to the writer; only the units themselves are in shared memory.
 */
struct kv_arena {
	uint64_t *base;      /* the data segment's arena region: unit i = words 2i, 2i+1 */
	uint64_t units;      /* its size in units (the writer's plan, never read back) */
	uint64_t bump;       /* first unit never handed out */
	uint32_t ncls;
	uint8_t cls_cap[KV_NCLASSES];
	struct kv_u32vec freel[KV_NCLASSES];
	struct kvidx_stats *st; /* arena_used is counted here */
};

/* Prepares a for an arena region of units units holding entries of up to ppk records
 * (1..KV_MAX_PPK). No allocation. */
void kv_arena_init(struct kv_arena *a, uint64_t *base, uint64_t units, unsigned ppk,
		   struct kvidx_stats *st);
/* Frees the free lists. */
void kv_arena_fini(struct kv_arena *a);

/* The smallest class whose entries hold need records (the largest class if none does). */
unsigned kv_arena_class(const struct kv_arena *a, unsigned need);
/* The class of an entry of capacity cap (as its meta word says), or -1 if no class has that
 * capacity (the writer only ever writes caps from its class table: the entry is damaged). */
int kv_arena_class_of(const struct kv_arena *a, unsigned cap);

/* An entry of class cls: its unit index, or 0 when neither the free list nor the bump
 * region has one. O(1). */
uint32_t kv_arena_alloc(struct kv_arena *a, unsigned cls);
/* Gives entry idx of class cls back. Only rcu.c calls this, once no reader can still see the
 * entry. 0, or -ENOMEM (the free list could not grow: the entry is not taken back). */
int kv_arena_free(struct kv_arena *a, uint32_t idx, unsigned cls);
/* No bump room for a largest entry and almost nothing on the free lists. */
bool kv_arena_tight(const struct kv_arena *a);

static inline uint64_t *kv_arena_unit(const struct kv_arena *a, uint32_t idx)
{
	return a->base + 2 * (uint64_t)idx;
}

#endif /* KVIDX_ARENA_H */
