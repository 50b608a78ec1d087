/*
 * cache.c — the fake pod's simulated prefix cache: at most --cache-blocks engine hashes,
 * least recently used evicted first, and the admission of a prompt's blocks to it after
 * prefill, which is what makes the pod publish BlockStored and BlockRemoved.
 *
 * An open-addressing table (linear probing, backward-shift deletion) maps a hash to its node;
 * nodes form a doubly linked list, most recent at head.
 */
#include "fakepod.h"

#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define NIL32 UINT32_MAX

struct cache_node {
	uint64_t hash;
	uint32_t prev, next;
};

static size_t cache_home(const struct cache *c, uint64_t h)
{
	return (size_t)(h ^ (h >> 29)) & c->mask;
}

void cache_clear(struct cache *c)
{
	memset(c->slots, 0, (c->mask + 1) * sizeof(*c->slots));
	c->size = 0;
	c->head = c->tail = NIL32;
	for (uint32_t i = 0; i < c->cap; i++)
		c->nodes[i].next = i + 1 < c->cap ? i + 1 : NIL32;
	c->free_list = 0;
}

void cache_init(struct cache *c, uint32_t cap)
{
	size_t n = 2;

	while (n < 2 * (size_t)cap)
		n *= 2;
	c->cap = cap;
	c->nodes = tc_xrealloc(NULL, cap * sizeof(*c->nodes));
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
		c->head = n->next;
	if (n->next != NIL32)
		c->nodes[n->next].prev = n->prev;
	else
		c->tail = n->prev;
}

static void cache_push_head(struct cache *c, uint32_t i)
{
	c->nodes[i].prev = NIL32;
	c->nodes[i].next = c->head;
	if (c->head != NIL32)
		c->nodes[c->head].prev = i;
	c->head = i;
	if (c->tail == NIL32)
		c->tail = i;
}

static void cache_touch(struct cache *c, uint32_t i)
{
	if (c->head == i)
		return;
	cache_unlink(c, i);
	cache_push_head(c, i);
}

/* Inserts h (not present) as most recent. The cache must not be full. */
static void cache_insert(struct cache *c, uint64_t h)
{
	uint32_t i = c->free_list;

	c->free_list = c->nodes[i].next;
	c->nodes[i].hash = h;
	c->slots[cache_slot(c, h)] = i + 1;
	cache_push_head(c, i);
	c->size++;
}

/* Removes the least recently used block and returns its hash. The cache must not be empty. */
static uint64_t cache_evict(struct cache *c)
{
	uint32_t i = c->tail;
	uint64_t h = c->nodes[i].hash;
	size_t hole = cache_slot(c, h), j = hole;

	cache_unlink(c, i);
	c->nodes[i].next = c->free_list;
	c->free_list = i;
	c->size--;
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

size_t cache_match(struct cache *c, const uint64_t *h, size_t n)
{
	size_t matched = 0;

	while (matched < n && cache_find(c, h[matched]) != NIL32)
		matched++;
	for (size_t i = matched; i-- > 0;)
		cache_touch(c, cache_find(c, h[i]));
	return matched;
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
	uint32_t bs = fp->o.block_size;

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
	if (c->size + missing > c->cap) {
		size_t need = c->size + missing - c->cap;
		uint64_t *evicted = ev_hashes(ev_add(fp, out, KVW_BLOCK_REMOVED), need);

		/* The prompt's own blocks are the most recent, so none of them is evicted. */
		for (size_t k = 0; k < need; k++)
			evicted[k] = cache_evict(c);
	}
	for (i = n; i-- > matched;) {
		uint32_t idx = cache_find(c, h[i]);

		if (idx == NIL32)
			cache_insert(c, h[i]);
		else
			cache_touch(c, idx);
	}
	for (i = matched; i-- > 0;)
		cache_touch(c, cache_find(c, h[i]));
	ev_add_stored(fp, out, h + matched, n - matched, matched > 0,
		      matched ? h[matched - 1] : 0, tokens + matched * bs, (n - matched) * bs);
}
