/*
 * hybrid.c — the reader's hybrid-model hit: for a pod whose KV cache is split into groups
 * (full attention, sliding window, Mamba; pd_groups in shm/layout.h), the prefix length vLLM's
 * prefix cache would actually give, computed from the per-(key, pod) group masks of the
 * records. Called by kvidx_score_sized() (reader.c) inside its read-side section, after the
 * forward scan has found each row's run (blocks).
 *
 * The rule is vLLM's (read from vllm/v1/core/kv_cache_coordinator.py,
 * HybridKVCacheCoordinator.find_longest_cache_hit, and the finders of
 * vllm/v1/core/single_type_kv_cache_manager.py; described in our words in kvidx.h and
 * docs/events.md): groups of one spec form a class whose blocks count only when every member
 * holds them; full attention bounds the hit by its run (blocks, already computed; a pod
 * without full attention starts from every key given); then each other class, in turn, may
 * only shorten the candidate length L, until none does:
 *
 *   sliding window (need N index blocks): searching back from L, the end of the first run of
 *     N consecutive blocks the class holds; none: the run it holds from block 0;
 *   Mamba: just after the last block at or before L whose state the class holds (a block
 *     ending on a group-block boundary); none: 0;
 *
 * every length aligned down to the lcm of the classes' block sizes (in index blocks).
 * Speculative records and records without a group mask hold the key for every group.
 *
 * Cost: per hybrid row, a lookup per block searched (typically N for a window, a few for
 * Mamba); bounded by (number of classes) x blocks per pass, and each pass but the last
 * shortens L, so wait-free with a bound of classes x blocks^2 lookups in the worst case.
 */
#include "internal.h"

struct grp_class {
	unsigned mask;  /* the class's groups */
	unsigned kind;  /* KV_GRP_* */
	uint32_t m;     /* block in index blocks */
	uint32_t need;  /* sliding window: blocks held back from the end */
};

struct kv_row kv_row_new(const struct kv_view *v, int pod)
{
	struct kv_row row = { .pod = pod };
	const uint32_t *g = v->pods[pod].pd_groups;

	for (unsigned i = 0; i < KV_POD_GROUPS; i++) {
		uint32_t d = ld_relaxed(&g[i]);
		if (KV_GRP_KIND(d) == KV_GRP_FULL)
			row.fa |= (uint16_t)(1u << i);
		if (KV_GRP_KIND(d) == KV_GRP_SLIDING || KV_GRP_KIND(d) == KV_GRP_MAMBA ||
		    (KV_GRP_KIND(d) == KV_GRP_FULL && KV_GRP_M(d) > 1))
			row.hybrid = true;
	}
	return row;
}

/* Pod's group mask at key: 0 (not held), or the groups of its visible record. */
static unsigned pod_groups_at(const struct kv_view *v, uint64_t key, int pod, uint64_t now)
{
	unsigned np = 0;
	const uint64_t *e = kv_rd_find(v, key, &np);

	for (unsigned k = 0; e && k < np; k++) {
		uint64_t w0 = ld_relaxed(&e[2 + 2 * k]), w1 = ld_relaxed(&e[3 + 2 * k]);
		if (KV_REC_POD(w0) != (unsigned)pod)
			continue;
		if (!kv_rd_visible(v, w0, w1, now))
			return 0;
		return KV_REC_FLAGS(w0) & KV_REC_GROUPS ? KV_REC_GMASK(w0) : KV_GMASK_ALL;
	}
	return 0;
}

/* Whether class c holds its group block J: each of its m index blocks, in every member. */
static bool class_holds(const struct kv_view *v, const uint64_t *keys, int pod, uint64_t now,
			const struct grp_class *c, uint32_t J)
{
	for (uint32_t j = J * c->m; j < (J + 1) * c->m; j++)
		if ((pod_groups_at(v, keys[j], pod, now) & c->mask) != c->mask)
			return false;
	return true;
}

/* The pod's classes (groups of one descriptor word); returns how many, lcm of their m in *a. */
static unsigned pod_classes(const struct kv_view *v, int pod, struct grp_class *cls,
			    uint64_t *a)
{
	const uint32_t *g = v->pods[pod].pd_groups;
	uint32_t words[KV_POD_GROUPS];
	unsigned nc = 0;

	*a = 1;
	for (unsigned i = 0; i < KV_POD_GROUPS; i++) {
		uint32_t d = words[i] = ld_relaxed(&g[i]);
		unsigned k;
		if (!d || KV_GRP_KIND(d) > KV_GRP_MAMBA || KV_GRP_M(d) == 0)
			continue;
		for (k = 0; k < nc; k++)
			if (words[__builtin_ctz(cls[k].mask)] == d)
				break;
		if (k == nc)
			cls[nc++] = (struct grp_class){ .kind = KV_GRP_KIND(d), .m = KV_GRP_M(d),
							.need = KV_GRP_NEED(d) ? KV_GRP_NEED(d) : 1 };
		cls[k].mask |= 1u << i;
	}
	for (unsigned k = 0; k < nc; k++) {
		uint64_t x = *a, y = cls[k].m;
		while (y) { /* gcd */
			uint64_t t = x % y;
			x = y;
			y = t;
		}
		*a = *a / x * cls[k].m; /* at most 255^12: fits, the caller caps it */
		if (*a > UINT32_MAX)
			*a = UINT32_MAX;
	}
	return nc;
}

/* Sliding window: the class's hit at or below L, in group blocks of m index blocks (vLLM's
 * right-to-left window search; need is a whole number of group blocks). */
static uint32_t window_hit(const struct kv_view *v, const uint64_t *keys, int pod, uint64_t now,
			   const struct grp_class *c, uint32_t L)
{
	uint32_t need = c->need / c->m ? c->need / c->m : 1, run = 0;

	for (uint32_t J = L / c->m; J-- > 0;) {
		if (!class_holds(v, keys, pod, now, c, J)) {
			run = 0;
			continue;
		}
		if (++run >= need)
			return (J + need) * c->m;
	}
	return run * c->m; /* no whole window: the run held from block 0 */
}

/* Mamba: just after the last group block at or below L whose state the class holds. */
static uint32_t state_hit(const struct kv_view *v, const uint64_t *keys, int pod, uint64_t now,
			  const struct grp_class *c, uint32_t L)
{
	for (uint32_t J = L / c->m; J-- > 0;)
		if (class_holds(v, keys, pod, now, c, J))
			return (J + 1) * c->m;
	return 0;
}

static uint32_t row_hit(const struct kv_view *v, const uint64_t *keys, size_t n,
			const struct kv_row *row, uint64_t now)
{
	struct grp_class cls[KV_POD_GROUPS];
	uint64_t a;
	unsigned nc = pod_classes(v, row->pod, cls, &a);
	/* Full attention bounds the hit by its run; without it, every key given is a candidate. */
	uint32_t L = row->fa ? row->blocks : (uint32_t)(n < UINT32_MAX ? n : UINT32_MAX);

	L -= (uint32_t)(L % a);
	for (bool cut = true; cut && L > 0;) {
		cut = false;
		for (unsigned k = 0; k < nc && L > 0; k++) {
			uint32_t h;
			if (cls[k].kind == KV_GRP_SLIDING)
				h = window_hit(v, keys, row->pod, now, &cls[k], L);
			else if (cls[k].kind == KV_GRP_MAMBA)
				h = state_hit(v, keys, row->pod, now, &cls[k], L);
			else
				continue; /* full attention: its run is blocks, L is within it */
			h -= (uint32_t)(h % a);
			if (h < L) {
				L = h;
				cut = true;
			}
		}
	}
	return L;
}

void kv_score_hybrid(const struct kv_view *v, const uint64_t *keys, size_t n,
		     struct kv_row *rows, uint32_t nrows, uint64_t now)
{
	for (uint32_t i = 0; i < nrows; i++) {
		struct kv_row *row = &rows[i];
		row->hit = row->blocks;
		if (row->hybrid && n && row->blocks <= n)
			row->hit = row_hit(v, keys, n, row, now);
	}
}
