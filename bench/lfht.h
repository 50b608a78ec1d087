/*
 * lfht.h — the rculfhash baseline: liburcu's RCU hash table in the benchmark's own process,
 * keyed by kv_mix(key) as kvidx hashes, a node holding a key and up to three pods inline. The
 * scorer is inline (it is what is measured); the caller registers its thread with urcu.
 */
#ifndef KVIDX_BENCH_LFHT_H
#define KVIDX_BENCH_LFHT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <urcu.h>
#include <urcu/rculfhash.h>

#include "score.h"
#include "telemetry.h"

/* A key and the pods holding it: 32 bytes. */
struct lf_node {
	struct cds_lfht_node node;
	uint64_t key;
	uint16_t pod[3];
	uint16_t npods;
};

/* A node that lf_apply() allocated, freed through call_rcu(). */
struct lf_rnode {
	struct lf_node n;
	struct rcu_head rcu;
};

/* container_of through void *, which clang's -Wcast-align accepts (urcu's macro it does not). */
#define LF_NODE(p) ((struct lf_node *)(void *)((char *)(p) - offsetof(struct lf_node, node)))

/* cds_lfht_lookup()'s match: node's key is *key. */
int lf_match(struct cds_lfht_node *node, const void *key);

/* A table of a power of two >= capacity buckets, fixed (no resizing), into *nbuckets. Dies if
 * it cannot be made. */
struct cds_lfht *lf_new(uint64_t capacity, unsigned long *nbuckets);

/* Adds the n keys k with pod (add: one malloc'd lf_rnode each), or removes them (!add: each
 * node freed after a grace period through call_rcu). Takes the read lock itself. */
void lf_apply(struct cds_lfht *ht, const uint64_t *k, uint32_t n, uint16_t pod, bool add);

/* Removes every node and destroys the table; with rcu_free the nodes are lf_rnodes and are
 * freed through call_rcu() (waited for), else they belong to the caller (a grace period has
 * passed when it returns). */
void lf_destroy(struct cds_lfht *ht, bool rcu_free);

/* One lookup per block under one read-side critical section, stopping where no pod's run
 * goes on. */
static inline uint32_t score_lfht(struct cds_lfht *ht, struct rows *rw, const uint64_t *k,
				  uint32_t n)
{
	struct cds_lfht_iter it;

	rcu_read_lock();
	for (uint32_t i = 0; i < n; i++) {
		cds_lfht_lookup(ht, kv_mix(k[i]), lf_match, &k[i], &it);
		struct cds_lfht_node *node = cds_lfht_iter_get_node(&it);
		if (!node)
			break;
		const struct lf_node *ln = LF_NODE(node);
		if (!rows_extend_pods(rw, ln->pod, ln->npods, i))
			break;
	}
	rcu_read_unlock();
	return rows_best_reset(rw);
}

#endif /* KVIDX_BENCH_LFHT_H */
