/*
 * cache.c — the fake pod's simulated prefix cache: at most --cache-blocks engine hashes per
 * data-parallel rank, least recently used evicted first, and the admission of a prompt's
 * blocks to it after prefill, which is what makes the pod publish BlockStored and
 * BlockRemoved, in the shapes real vLLM streams have (reference/kv-events.md):
 *
 *   --hybrid      each step's full-attention events (group 0, "full_attention") come with the
 *                 sliding-window group's (1: only the blocks inside the window listed, the
 *                 token_ids of all) and the Mamba group's (2: the last block only), all in
 *                 one batch, as the scheduler merges them;
 *   --offload P   a share P of prompts has its new blocks announced again by an offload
 *                 placeholder (block_size 0, no tokens, medium --offload-medium) in the same
 *                 batch; evicting such a block removes it from that medium too;
 *   --dup-copies P  a share P of prompts has its new blocks stored twice (two physical
 *                 copies); evicting such a block sends two BlockRemoved, with
 *                 remaining_copy_counts under --copy-counts.
 *
 * An open-addressing table (linear probing, backward-shift deletion) maps a hash to its node;
 * each rank's nodes form a doubly linked list, most recent at head.
 */
#include "fakepod.h"

#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "rng.h"

#define NIL32 UINT32_MAX

#define CN_OFFLOADED 1 /* announced on --offload-medium too */
#define CN_DUP       2 /* stored as two copies */

#define SW_BLOCKS 2    /* --hybrid: blocks inside the sliding window */

struct cache_node {
	uint64_t hash;
	uint32_t prev, next;
	uint8_t rank, flags;
};

uint32_t rank_of(const struct fp *fp, uint64_t h0)
{
	return fp->nranks > 1 ? (uint32_t)((h0 >> 17) % fp->nranks) : 0;
}

static size_t cache_home(const struct cache *c, uint64_t h)
{
	return (size_t)(h ^ (h >> 29)) & c->mask;
}

void cache_clear(struct cache *c)
{
	size_t total = (size_t)c->cap * c->nranks;

	memset(c->slots, 0, (c->mask + 1) * sizeof(*c->slots));
	for (uint32_t r = 0; r < c->nranks; r++) {
		c->size[r] = 0;
		c->head[r] = c->tail[r] = NIL32;
	}
	for (size_t i = 0; i < total; i++)
		c->nodes[i].next = i + 1 < total ? (uint32_t)i + 1 : NIL32;
	c->free_list = 0;
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

/* The slot holding hash h, or the empty slot where it would go. */
static size_t cache_slot(const struct cache *c, uint64_t h)
{
	size_t i = cache_home(c, h);

	while (c->slots[i] && c->nodes[c->slots[i] - 1].hash != h)
		i = (i + 1) & c->mask;
	return i;
}

static uint32_t cache_find(const struct cache *c, uint64_t h)
{
	uint32_t s = c->slots[cache_slot(c, h)];

	return s ? s - 1 : NIL32;
}

static void cache_unlink(struct cache *c, uint32_t i)
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
}

static void cache_push_head(struct cache *c, uint32_t i)
{
	uint32_t r = c->nodes[i].rank;

	c->nodes[i].prev = NIL32;
	c->nodes[i].next = c->head[r];
	if (c->head[r] != NIL32)
		c->nodes[c->head[r]].prev = i;
	c->head[r] = i;
	if (c->tail[r] == NIL32)
		c->tail[r] = i;
}

static void cache_touch(struct cache *c, uint32_t i)
{
	if (c->head[c->nodes[i].rank] == i)
		return;
	cache_unlink(c, i);
	cache_push_head(c, i);
}

/* Inserts h (not present) as rank r's most recent. Rank r's part must not be full. */
static void cache_insert(struct cache *c, uint64_t h, uint32_t r, uint8_t flags)
{
	uint32_t i = c->free_list;

	c->free_list = c->nodes[i].next;
	c->nodes[i].hash = h;
	c->nodes[i].rank = (uint8_t)r;
	c->nodes[i].flags = flags;
	c->slots[cache_slot(c, h)] = i + 1;
	cache_push_head(c, i);
	c->size[r]++;
}

/*
 * Removes rank r's least recently used block and returns its hash (and flags). Rank r's part
 * must not be empty.
 */
static uint64_t cache_evict(struct cache *c, uint32_t r, uint8_t *flags)
{
	uint32_t i = c->tail[r];
	uint64_t h = c->nodes[i].hash;
	size_t hole = cache_slot(c, h), j = hole;

	*flags = c->nodes[i].flags;
	cache_unlink(c, i);
	c->nodes[i].next = c->free_list;
	c->free_list = i;
	c->size[r]--;
	/* Backward-shift deletion: pull later members of the probe run into the hole. */
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
	return h;
}

void cache_clear_rank(struct cache *c, uint32_t r)
{
	uint8_t fl;

	if (c->nranks == 1) {
		cache_clear(c);
		return;
	}
	while (c->size[r])
		cache_evict(c, r, &fl);
}

size_t cache_match(struct cache *c, const uint64_t *h, size_t n)
{
	size_t matched = 0;

	while (matched < n && cache_find(c, h[matched]) != NIL32)
		matched++;
	for (size_t i = matched; i-- > 0;)
		cache_touch(c, cache_find(c, h[i]));
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
		group_attr(fp, g, fp->o.medium);
		ev_add_removed(fp, out, h, n, NULL);
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

/*
 * Blocks already cached are reused, missing ones stored, and least recently used blocks of
 * other prompts evicted to make room. Appends a BlockRemoved for the evictions and a
 * BlockStored for the stored blocks (from the first uncached one on) to out. Blocks are
 * touched last to first, so a prompt's tail is evicted before its head, as vLLM's free-block
 * queue does. Only the first cap blocks of a prompt longer than the cache are kept.
 */
void cache_admit(struct fp *fp, const uint64_t *h, const uint32_t *tokens, size_t nblocks,
		 struct evlist *out)
{
	struct cache *c = &fp->cache;
	size_t n = nblocks < c->cap ? nblocks : c->cap, matched = 0, missing = 0, i;
	uint32_t bs = fp->o.block_size, r;
	struct ev_attr keep = fp->attr;
	uint8_t fl = 0;

	if (!nblocks)
		return;
	r = fp->ev_rank = rank_of(fp, h[0]);

	while (matched < n && cache_find(c, h[matched]) != NIL32)
		matched++;
	for (i = n; i-- > matched;) {
		uint32_t idx = cache_find(c, h[i]);

		if (idx != NIL32)
			cache_touch(c, idx);
		else
			missing++;
	}
	for (i = matched; i-- > 0;)
		cache_touch(c, cache_find(c, h[i]));
	if (!missing)
		return;
	/* Drawn in a fixed order, and only for the shapes asked for. */
	if (shape_draw(fp, fp->o.offload))
		fl |= CN_OFFLOADED;
	if (shape_draw(fp, fp->o.dup_copies))
		fl |= CN_DUP;
	if (c->size[r] + missing > c->cap) {
		size_t need = c->size[r] + missing - c->cap;

		tc_grow(&fp->evict, &fp->evict_cap, need, sizeof(*fp->evict));
		tc_grow(&fp->evict_fl, &fp->evict_fl_cap, need, sizeof(*fp->evict_fl));
		/* The prompt's own blocks are the most recent, so none of them is evicted. */
		for (size_t k = 0; k < need; k++)
			fp->evict[k] = cache_evict(c, r, &fp->evict_fl[k]);
		evicted_events(fp, out, fp->evict, fp->evict_fl, need);
	}
	for (i = n; i-- > matched;) {
		uint32_t idx = cache_find(c, h[i]);

		if (idx == NIL32)
			cache_insert(c, h[i], r, fl);
		else
			cache_touch(c, idx);
	}
	for (i = matched; i-- > 0;)
		cache_touch(c, cache_find(c, h[i]));
	stored_events(fp, out, h + matched, n - matched, matched > 0,
		      matched ? h[matched - 1] : 0, tokens + matched * bs, matched, fl);
	fp->attr = keep;
}
