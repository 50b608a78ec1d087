/*
 * podsnap.c — copying an index's active pods, or a router slot's counters, for a tool (see
 * podsnap.h).
 */
#include "podsnap.h"

#include <errno.h>
#include <stdlib.h>

#include "atomics.h"
#include "inspect.h"

int tc_pods_snapshot(struct kvidx_reader *r, struct tc_pod **out)
{
	const struct kv_view *v = kv_reader_view(r);
	struct tc_pod *pods = NULL;
	int n = 0, cap = 0;

	for (uint32_t i = 0; i < v->max_pods; i++) {
		/* Acquire pairs with the release stores of pd_word in writer.c. */
		uint64_t pw = ld_acquire(&v->pods[i].pd_word);
		if (KV_POD_STATE(pw) != KV_POD_ACTIVE)
			continue;
		if (n == cap) {
			int ncap = cap ? 2 * cap : 16;
			struct tc_pod *np = realloc(pods, (size_t)ncap * sizeof(*np));
			if (!np) {
				free(pods);
				return -ENOMEM;
			}
			pods = np;
			cap = ncap;
		}
		struct tc_pod *p = &pods[n];
		int rc = kvidx_reader_pod(r, (int)i, p->name, p->model);
		if (rc == -KVIDX_ERETRY)
			rc = kvidx_reader_pod(r, (int)i, p->name, p->model);
		if (rc < 0)
			continue; /* removed, or renamed twice, since its state was read */
		p->idx = (int)i;
		p->gen = KV_POD_GEN(pw);
		p->flags = KV_POD_FLAGS(pw);
		for (unsigned c = 0; c < KV_PC_COUNT; c++)
			p->ctr[c] = kv_tm_view_pod(v, (int)i, (enum kv_pod_ctr)c);
		n++;
	}
	*out = pods;
	return n;
}

bool tc_router_snapshot(const struct kv_view *v, uint32_t s, uint64_t c[KV_RT_COUNT])
{
	if (s >= v->max_readers)
		return false;
	for (unsigned k = 0; k < KV_RT_COUNT; k++)
		c[k] = kv_tm_view_router(v, (int)s, (enum kv_router_ctr)k);
	return c[KV_RT_routes] || c[KV_RT_outcomes];
}
