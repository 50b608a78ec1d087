/*
 * cache.c — the fake pod's simulated KV cache, vLLM's block pool (vllm/v1/core/block_pool.py):
 * --kv-blocks blocks per data-parallel rank, each held by the requests using it (a reference
 * count: blocks of running requests are pinned); a block nobody holds sits in its rank's
 * free queue, still cached (its hash findable) until an allocation takes it, least recently
 * freed first, which evicts it. That is what makes the pod publish BlockStored (a block
 * cached) and BlockRemoved (a cached block evicted), in the shapes real vLLM streams have
 * (docs/events.md "Shapes real streams contain"):
 *
 *   --hybrid      each step's full-attention events (group 0, "full_attention") come with the
 *                 sliding-window group's (1: only the blocks inside the window listed, the
 *                 token_ids of all) and the Mamba group's (2: the last block only), all in
 *                 one batch, as the scheduler merges them; an evicted block's BlockRemoved
 *                 comes for each group that listed it;
 *   --offload P   a share P of prompts has its new blocks announced again by an offload
 *                 placeholder (block_size 0, no tokens, medium --offload-medium) in the same
 *                 batch; evicting such a block removes it from that medium too;
 *   --dup-copies P  a share P of prompts has its new blocks stored twice (two physical
 *                 copies); evicting such a block sends two BlockRemoved, with
 *                 remaining_copy_counts under --copy-counts.
 *
 * An open-addressing table (linear probing, backward-shift deletion) maps a cached hash to its
 * block; each rank's free blocks form a doubly linked list, the most recently freed at head,
 * the next to be reused at tail. Rank r owns blocks [r * cap, (r + 1) * cap).
 */
#include "fakepod.h"

#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "rng.h"

#define NIL32 UINT32_MAX

#define CN_OFFLOADED 1 /* announced on --offload-medium too */
#define CN_DUP       2 /* stored as two copies */
#define CN_SW        4 /* --hybrid: the sliding-window group holds it too */
#define CN_MAMBA     8 /* --hybrid: the Mamba group holds its state */

#define SW_BLOCKS 2    /* --hybrid: blocks inside the sliding window */

struct cache_node {
	uint64_t hash;
	uint32_t prev, next; /* the rank's free queue, while ref is 0 */
	uint32_t ref;        /* requests holding the block */
	uint8_t rank, flags;
	bool cached;         /* hash is valid and in the table */
};

uint32_t rank_of(const struct fp *fp, uint64_t h0)
{
	return fp->nranks > 1 ? (uint32_t)((h0 >> 17) % fp->nranks) : 0;
}

static size_t cache_home(const struct cache *c, uint64_t h)
{
	return (size_t)(h ^ (h >> 29)) & c->mask;
}

/* The slot holding hash h, or the empty slot where it would go. */
static size_t cache_slot(const struct cache *c, uint64_t h)
{
	size_t i = cache_home(c, h);

	while (c->slots[i] && c->nodes[c->slots[i] - 1].hash != h)
		i = (i + 1) & c->mask;
	return i;
}

uint32_t cache_lookup(const struct cache *c, uint64_t h)
{
	uint32_t s = c->slots[cache_slot(c, h)];

	return s ? s - 1 : NIL32;
}

static void fq_unlink(struct cache *c, uint32_t i)
{
	struct cache_node *n = &c->nodes[i];

	if (n->prev != NIL32)
		c->nodes[n->prev].next = n->next;
	else
		c->head[n->rank] = n->next;
	if (n->next != NIL32)
		c->nodes[n->next].prev = n->prev;
	else
		c->tail[n->rank] = n->prev;
	c->nfree[n->rank]--;
}

/* Block i (ref 0) becomes its rank's most recently freed: the last to be reused. */
static void fq_push_head(struct cache *c, uint32_t i)
{
	uint32_t r = c->nodes[i].rank;

	c->nodes[i].prev = NIL32;
	c->nodes[i].next = c->head[r];
	if (c->head[r] != NIL32)
		c->nodes[c->head[r]].prev = i;
	c->head[r] = i;
	if (c->tail[r] == NIL32)
		c->tail[r] = i;
	c->nfree[r]++;
}

static void cache_reset_rank(struct cache *c, uint32_t r)
{
	c->size[r] = c->nfree[r] = 0;
	c->head[r] = c->tail[r] = NIL32;
	for (uint32_t k = 0; k < c->cap; k++) {
		uint32_t i = r * c->cap + k;

		c->nodes[i] = (struct cache_node){ .rank = (uint8_t)r };
		fq_push_head(c, i);
	}
}

void cache_clear(struct cache *c)
{
	memset(c->slots, 0, (c->mask + 1) * sizeof(*c->slots));
	for (uint32_t r = 0; r < c->nranks; r++)
		cache_reset_rank(c, r);
}

void cache_init(struct cache *c, uint32_t cap, uint32_t nranks)
{
	size_t n = 2, total = (size_t)cap * nranks;

	while (n < 2 * total)
		n *= 2;
	c->cap = cap;
	c->nranks = nranks;
	c->nodes = tc_xrealloc(NULL, total * sizeof(*c->nodes));
	c->slots = tc_xrealloc(NULL, n * sizeof(*c->slots));
	c->mask = n - 1;
	cache_clear(c);
}

void cache_free(struct cache *c)
{
	free(c->nodes);
	free(c->slots);
}

/* Takes block i's hash out of the table (backward-shift deletion) and out of the cache. */
static void cache_uncache(struct cache *c, uint32_t i)
{
	size_t hole = cache_slot(c, c->nodes[i].hash), j = hole;

	for (;;) {
		size_t k;

		j = (j + 1) & c->mask;
		if (!c->slots[j])
			break;
		k = cache_home(c, c->nodes[c->slots[j] - 1].hash);
		if (hole <= j ? (hole < k && k <= j) : (hole < k || k <= j))
			continue;
		c->slots[hole] = c->slots[j];
		hole = j;
	}
	c->slots[hole] = 0;
	c->nodes[i].cached = false;
	c->size[c->nodes[i].rank]--;
}

void cache_clear_rank(struct cache *c, uint32_t r)
{
	if (c->nranks == 1) {
		cache_clear(c);
		return;
	}
	for (uint32_t k = 0; k < c->cap; k++)
		if (c->nodes[r * c->cap + k].cached)
			cache_uncache(c, r * c->cap + k);
	cache_reset_rank(c, r);
}

void cache_forget(struct cache *c, uint32_t r)
{
	for (uint32_t k = 0; k < c->cap; k++)
		if (c->nodes[r * c->cap + k].cached)
			cache_uncache(c, r * c->cap + k);
}

void blk_ref(struct cache *c, uint32_t i)
{
	if (c->nodes[i].ref++ == 0)
		fq_unlink(c, i);
}

void blk_unref(struct cache *c, uint32_t i)
{
	if (--c->nodes[i].ref == 0)
		fq_push_head(c, i);
}

uint32_t blk_alloc(struct fp *fp, uint32_t r)
{
	struct cache *c = &fp->cache;
	uint32_t i = c->tail[r];

	if (i == NIL32)
		return NIL32;
	if (c->nodes[i].cached) { /* evicted: its BlockRemoved comes with cache_evictions() */
		tc_grow(&fp->evict, &fp->evict_cap, fp->nevict + 1, sizeof(*fp->evict));
		tc_grow(&fp->evict_fl, &fp->evict_fl_cap, fp->nevict + 1, sizeof(*fp->evict_fl));
		fp->evict[fp->nevict] = c->nodes[i].hash;
		fp->evict_fl[fp->nevict++] = c->nodes[i].flags;
		cache_uncache(c, i);
	}
	blk_ref(c, i);
	return i;
}

bool blk_store(struct cache *c, uint32_t i, uint64_t h, uint8_t flags)
{
	size_t s = cache_slot(c, h);

	if (c->slots[s] || c->nodes[i].cached)
		return false;
	c->nodes[i].hash = h;
	c->nodes[i].flags = flags;
	c->nodes[i].cached = true;
	c->slots[s] = i + 1;
	c->size[c->nodes[i].rank]++;
	return true;
}

uint32_t cache_nfree(const struct cache *c, uint32_t r)
{
	return c->nfree[r];
}

bool blk_free_cached(const struct cache *c, uint32_t i)
{
	return c->nodes[i].ref == 0;
}

size_t cache_match(struct cache *c, const uint64_t *h, size_t n)
{
	size_t matched = 0;

	while (matched < n && cache_lookup(c, h[matched]) != NIL32)
		matched++;
	/* Touched last to first: a free block moves to the reused-last end of its queue. */
	for (size_t i = matched; i-- > 0;) {
		uint32_t b = cache_lookup(c, h[i]);

		blk_ref(c, b);
		blk_unref(c, b);
	}
	return matched;
}

bool shape_draw(struct fp *fp, double p)
{
	return p > 0 && (double)(tc_rng_next(&fp->shape_rng) >> 11) * 0x1.0p-53 < p;
}

/* Sets the attributes of group g's events: --hybrid's three groups, or none. */
static void group_attr(struct fp *fp, int g, const char *medium)
{
	static const char *const kinds[3] = { "full_attention", "sliding_window", "mamba" };

	fp->attr = (struct ev_attr){ .medium = medium };
	if (!fp->o.hybrid)
		return;
	fp->attr.has_group = true;
	fp->attr.group = (uint32_t)g;
	fp->attr.kind = kinds[g];
	if (g == 1)
		fp->attr.sliding_window = SW_BLOCKS * fp->o.block_size;
}

/* The events of n evictions h[] with their flags fl[] (rule of the file comment). */
static void evicted_events(struct fp *fp, struct evlist *out, const uint64_t *h,
			   const uint8_t *fl, size_t n)
{
	uint64_t *sel = tc_xrealloc(NULL, n * sizeof(*sel));
	uint32_t *rem = fp->o.copy_counts ? tc_xrealloc(NULL, n * sizeof(*rem)) : NULL;
	size_t k = 0;

	group_attr(fp, 0, fp->o.medium);
	for (size_t i = 0; i < n; i++)
		if (rem)
			rem[i] = fl[i] & CN_DUP ? 1 : 0;
	ev_add_removed(fp, out, h, n, rem);
	for (size_t i = 0; i < n; i++)
		if (fl[i] & CN_DUP)
			sel[k++] = h[i];
	if (k) { /* the second copies */
		if (rem)
			memset(rem, 0, k * sizeof(*rem));
		ev_add_removed(fp, out, sel, k, rem);
	}
	for (int g = 1; g <= 2 && fp->o.hybrid; g++) {
		/* Each group removes only the blocks it held. */
		k = 0;
		for (size_t i = 0; i < n; i++)
			if (fl[i] & (g == 1 ? CN_SW : CN_MAMBA))
				sel[k++] = h[i];
		group_attr(fp, g, fp->o.medium);
		if (k)
			ev_add_removed(fp, out, sel, k, NULL);
	}
	k = 0;
	for (size_t i = 0; i < n; i++)
		if (fl[i] & CN_OFFLOADED)
			sel[k++] = h[i];
	if (k) {
		group_attr(fp, 0, fp->o.offload_medium);
		ev_add_removed(fp, out, sel, k, NULL);
	}
	free(sel);
	free(rem);
}

/* The events of storing n blocks h[] (prompt blocks first...) with tokens, flags fl. */
static void stored_events(struct fp *fp, struct evlist *out, const uint64_t *h, size_t n,
			  bool has_parent, uint64_t parent, const uint32_t *tokens, size_t first,
			  uint8_t fl)
{
	uint32_t bs = fp->o.block_size;
	size_t sw = n < SW_BLOCKS ? n : SW_BLOCKS;

	group_attr(fp, 0, fp->o.medium);
	ev_add_stored(fp, out, h, n, has_parent, parent, tokens, n * bs, first);
	if (fl & CN_DUP) {
		ev_add_stored(fp, out, h, n, has_parent, parent, tokens, n * bs, first);
	}
	if (fp->o.hybrid) {
		/* The other groups list only the blocks they keep; token_ids still span all. */
		group_attr(fp, 1, fp->o.medium);
		ev_add_stored(fp, out, h + n - sw, sw, has_parent || n > sw,
			      n > sw ? h[n - sw - 1] : parent, tokens, n * bs, first + n - sw);
		group_attr(fp, 2, fp->o.medium);
		ev_add_stored(fp, out, h + n - 1, 1, has_parent || n > 1,
			      n > 1 ? h[n - 2] : parent, tokens, n * bs, first + n - 1);
	}
	if (fl & CN_OFFLOADED) {
		const struct prompt_x *px = fp->px;
		struct kvw_event *e;

		fp->px = NULL; /* placeholders carry no tokens and no extras */
		group_attr(fp, 0, fp->o.offload_medium);
		e = ev_add_stored(fp, out, h, n, false, 0, NULL, 0, 0);
		e->block_size = 0;
		fp->px = px;
	}
}

void cache_evictions(struct fp *fp, struct evlist *out)
{
	if (!fp->nevict)
		return;
	evicted_events(fp, out, fp->evict, fp->evict_fl, fp->nevict);
	fp->nevict = 0;
}

uint8_t cache_draw_flags(struct fp *fp)
{
	uint8_t fl = 0;

	/* Drawn in a fixed order, and only for the shapes asked for. */
	if (shape_draw(fp, fp->o.offload))
		fl |= CN_OFFLOADED;
	if (shape_draw(fp, fp->o.dup_copies))
		fl |= CN_DUP;
	return fl;
}

void cache_stored(struct fp *fp, struct evlist *out, const uint64_t *h, size_t n,
		  const uint32_t *tokens, size_t first, uint8_t fl)
{
	struct ev_attr keep = fp->attr;

	stored_events(fp, out, h + first, n, first > 0, first ? h[first - 1] : 0,
		      tokens + first * fp->o.block_size, first, fl);
	fp->attr = keep;
	/* The blocks the other groups listed (stored_events): theirs to remove later. */
	for (size_t i = 0; fp->o.hybrid && i < n && i < SW_BLOCKS; i++) {
		uint32_t b = cache_lookup(&fp->cache, h[first + n - 1 - i]);
		if (b != NIL32)
			fp->cache.nodes[b].flags |= (uint8_t)(CN_SW | (i == 0 ? CN_MAMBA : 0));
	}
}

/*
 * A prompt passing through at once (the workload, --prefill-ms): its blocks are held while
 * missing ones are allocated (evicting the least recently used free blocks) and stored, then
 * released last to first, so that a prompt's tail is evicted before its head, as vLLM's free
 * block queue does. Appends a BlockRemoved for the evictions and a BlockStored for the stored
 * blocks (from the first uncached one on) to out. Only the first cap blocks of a prompt longer
 * than the cache are kept; fewer if blocks held by running requests leave no room.
 */
void cache_admit(struct fp *fp, const uint64_t *h, const uint32_t *tokens, size_t nblocks,
		 struct evlist *out)
{
	struct cache *c = &fp->cache;
	size_t n = nblocks < c->cap ? nblocks : c->cap, matched = 0, missing = 0, stored, i;
	uint32_t r, *held;
	struct ev_attr keep = fp->attr;
	uint8_t fl;

	if (!nblocks)
		return;
	r = fp->ev_rank = rank_of(fp, h[0]);
	while (matched < n && cache_lookup(c, h[matched]) != NIL32)
		matched++;
	for (i = matched; i < n; i++)
		if (cache_lookup(c, h[i]) == NIL32)
			missing++;
	if (!missing) {
		cache_match(c, h, n);
		return;
	}
	fl = cache_draw_flags(fp);
	held = tc_xrealloc(NULL, n * sizeof(*held));
	for (i = 0; i < n; i++) {
		held[i] = cache_lookup(c, h[i]);
		if (held[i] != NIL32)
			blk_ref(c, held[i]);
	}
	for (i = matched; i < n; i++) {
		if (held[i] != NIL32)
			continue;
		held[i] = blk_alloc(fp, r);
		if (held[i] == NIL32)
			break; /* every block is held by a running request */
		blk_store(c, held[i], h[i], fl);
	}
	stored = i;
	for (i = n; i-- > 0;)
		if (held[i] != NIL32)
			blk_unref(c, held[i]);
	free(held);
	cache_evictions(fp, out);
	if (stored > matched)
		cache_stored(fp, out, h, stored - matched, tokens, matched, fl);
	fp->attr = keep;
}
