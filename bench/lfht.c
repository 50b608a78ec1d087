/*
 * lfht.c — the rculfhash baseline's table, writes and teardown (see lfht.h).
 */
#include <stdlib.h>

#include "benchlib.h"
#include "lfht.h"

int lf_match(struct cds_lfht_node *node, const void *key)
{
	return LF_NODE(node)->key == *(const uint64_t *)key;
}

struct cds_lfht *lf_new(uint64_t capacity, unsigned long *nbuckets)
{
	unsigned long nb = 1;
	struct cds_lfht *ht;

	while (nb < capacity)
		nb <<= 1;
	ht = cds_lfht_new(nb, nb, nb, 0, NULL);
	if (!ht)
		bdie("cds_lfht_new failed");
	if (nbuckets)
		*nbuckets = nb;
	return ht;
}

static void lf_free(struct rcu_head *h)
{
	free((struct lf_rnode *)(void *)((char *)h - offsetof(struct lf_rnode, rcu)));
}

/* The lf_rnode of node, which lf_apply() allocated. */
static struct lf_rnode *lf_rnode_of(struct cds_lfht_node *node)
{
	return (struct lf_rnode *)(void *)LF_NODE(node);
}

void lf_apply(struct cds_lfht *ht, const uint64_t *k, uint32_t n, uint16_t pod, bool add)
{
	rcu_read_lock();
	for (uint32_t i = 0; i < n; i++) {
		if (add) {
			struct lf_rnode *r = malloc(sizeof(*r));
			if (!r)
				bdie("out of memory");
			cds_lfht_node_init(&r->n.node);
			r->n.key = k[i];
			r->n.pod[0] = pod;
			r->n.npods = 1;
			cds_lfht_add(ht, kv_mix(k[i]), &r->n.node);
		} else {
			struct cds_lfht_iter it;
			cds_lfht_lookup(ht, kv_mix(k[i]), lf_match, &k[i], &it);
			struct cds_lfht_node *node = cds_lfht_iter_get_node(&it);
			if (node && cds_lfht_del(ht, node) == 0)
				call_rcu(&lf_rnode_of(node)->rcu, lf_free);
		}
	}
	rcu_read_unlock();
}

void lf_destroy(struct cds_lfht *ht, bool rcu_free)
{
	struct cds_lfht_iter it;
	struct cds_lfht_node *node;

	rcu_read_lock();
	cds_lfht_for_each(ht, &it, node)
		if (cds_lfht_del(ht, node) == 0 && rcu_free)
			call_rcu(&lf_rnode_of(node)->rcu, lf_free);
	rcu_read_unlock();
	if (rcu_free)
		rcu_barrier();
	else
		synchronize_rcu();
	if (cds_lfht_destroy(ht, NULL) < 0)
		fprintf(stderr, "%s: warning: cds_lfht_destroy failed\n", bl_prog);
}
