/*
 * naive.h — the naive design, the baseline kvidx replaces: an open-addressing table in
 * MAP_SHARED memory under one PTHREAD_PROCESS_SHARED rwlock; readers take the read lock once
 * per prompt, the writer the write lock once per batch. 32-byte slots: key (0 = empty) and up
 * to 11 pod indices inline; no tiers, timestamps or TTLs (kvidx keeps 16 bytes of those per
 * record). Linear probing from the same home slot as kvidx, backward-shift deletion, load
 * factor 0.75. The lookup and the scorer are inline (they are what is measured).
 */
#ifndef KVIDX_BENCH_NAIVE_H
#define KVIDX_BENCH_NAIVE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "score.h"
#include "telemetry.h"

#define NAIVE_PPK 11
struct naive_slot {
	uint64_t key;
	uint16_t n;
	uint16_t pod[NAIVE_PPK];
};
_Static_assert(sizeof(struct naive_slot) == 32, "naive slot size");

struct naive_tab {
	pthread_rwlock_t lock;
	uint64_t nslots, keys;
	size_t map_len;
	uint8_t pad[64];
	struct naive_slot slots[];
};

/* A table for capacity keys in memory shared with children forked later; see
 * naive_lock_init() for writer_pref. Dies if it cannot be mapped. */
struct naive_tab *naive_new(uint64_t capacity, bool writer_pref);
void naive_free(struct naive_tab *t);

/* (Re)initialises the lock, which nobody may hold: writer_pref selects glibc's
 * PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP, else the default (readers preferred, under
 * which a steady stream of overlapping readers starves the writer indefinitely). */
void naive_lock_init(struct naive_tab *t, bool writer_pref);

/* Adds pod to key (write lock held). Returns false if the table is full. */
bool naive_add(struct naive_tab *t, uint64_t key, uint16_t pod);

/* Removes pod from key, and the key once no pod holds it (write lock held). */
void naive_del(struct naive_tab *t, uint64_t key, uint16_t pod);

/* Adds pod to (add) or removes it from (!add) each of the n keys k (write lock held).
 * Returns false if the table was full for some key. */
bool naive_apply(struct naive_tab *t, const uint64_t *k, uint32_t n, uint16_t pod, bool add);

static inline uint64_t naive_home(const struct naive_tab *t, uint64_t key)
{
	return kv_home(kv_mix(key), t->nslots);
}

/* Key's slot, or NULL (read or write lock held). */
static inline const struct naive_slot *naive_get(const struct naive_tab *t, uint64_t key)
{
	uint64_t i = naive_home(t, key);

	for (;;) {
		const struct naive_slot *s = &t->slots[i];
		if (s->key == key)
			return s;
		if (s->key == 0)
			return NULL;
		if (++i == t->nslots)
			i = 0;
	}
}

/* Scores one prompt under the read lock, stopping at the first block no run extends. */
static inline uint32_t score_naive(struct naive_tab *t, struct rows *rw, const uint64_t *k,
				   uint32_t n)
{
	pthread_rwlock_rdlock(&t->lock);
	for (uint32_t i = 0; i < n; i++) {
		const struct naive_slot *s = naive_get(t, k[i]);
		if (!s || !rows_extend_pods(rw, s->pod, s->n, i))
			break;
	}
	pthread_rwlock_unlock(&t->lock);
	return rows_best_reset(rw);
}

#endif /* KVIDX_BENCH_NAIVE_H */
