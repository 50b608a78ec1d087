/*
 * ckhs.h — the ck_hs baseline: Concurrency Kit's SPMC hash set in the benchmark's own process,
 * of 16-byte objects (a key and up to three pods), hashed with kv_mix() as kvidx hashes and
 * allocated with plain malloc (no safe memory reclamation). The scorer is inline (it is what
 * is measured).
 */
#ifndef KVIDX_BENCH_CKHS_H
#define KVIDX_BENCH_CKHS_H

#include <stdbool.h>
#include <stdint.h>
#include <ck_hs.h>

#include "score.h"
#include "telemetry.h"

/* An entry: the key and up to three pods holding it. */
struct ck_obj {
	uint64_t key;
	uint16_t pod[3];
	uint16_t npods;
};

/* ck_hs's hash of an object (or a bare key: the key is its first member). */
static inline unsigned long ck_obj_hash(const void *obj, unsigned long seed)
{
	return (unsigned long)(kv_mix(*(const uint64_t *)obj) ^ seed);
}

/* A set in CK_HS_MODE_SPMC | CK_HS_MODE_OBJECT | mode for capacity objects; dies if it cannot
 * be made. */
void ck_set_init(ck_hs_t *hs, uint64_t capacity, unsigned mode);

/* Adds the object (dies if ck_hs cannot). */
void ck_set_put(ck_hs_t *hs, struct ck_obj *ob);

/* Adds the n keys k with pod (add: one malloc'd object each) or removes and frees them
 * (!add; the set needs CK_HS_MODE_DELETE). */
void ck_set_apply(ck_hs_t *hs, const uint64_t *k, uint32_t n, uint16_t pod, bool add);

/* Destroys the set, first freeing every object in it if free_objs. */
void ck_set_destroy(ck_hs_t *hs, bool free_objs);

/* One ck_hs_get() per block, stopping where no pod's run goes on. */
static inline uint32_t score_ckhs(ck_hs_t *hs, struct rows *rw, const uint64_t *k, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		const struct ck_obj *ob = ck_hs_get(hs, CK_HS_HASH(hs, ck_obj_hash, &k[i]), &k[i]);
		if (!ob || !rows_extend_pods(rw, ob->pod, ob->npods, i))
			break;
	}
	return rows_best_reset(rw);
}

#endif /* KVIDX_BENCH_CKHS_H */
