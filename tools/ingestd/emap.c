/*
 * emap.c — the engine-key -> request-key map of kvidx-ingestd (see emap.h).
 *
 * Why Concurrency Kit's ck_hs and not liburcu's rculfhash: the map is private to the one ingest
 * thread, so nothing reads it concurrently. rculfhash would make every lookup enter an RCU
 * read-side section, allocate a node per entry and free removed nodes through call_rcu — cost
 * that only pays off with concurrent readers. ck_hs is a plain open-addressing set of pointers
 * (single-writer mode, usable single-threaded without any fences mattering), with no per-entry
 * node of its own: the entries live in our own slot chunks, which also give the FIFO order for
 * eviction for free (the slots are a ring). Deletes leave tombstones that ck_hs reuses on
 * insert; a periodic ck_hs_gc() keeps probe sequences short.
 *
 * Entries never move once written (chunks are never reallocated), so ck_hs can hold their
 * addresses. A slot whose token is 0 is dead (replaced, deleted or never written).
 */
#include "emap.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define EMAP_CHUNK_SHIFT 14
#define EMAP_CHUNK (1u << EMAP_CHUNK_SHIFT)
#define EMAP_GC_EVERY 65536 /* removals between ck_hs_gc() passes */

struct emap_ent {
	uint64_t token; /* the lookup key: token and ehash; 0 = dead slot */
	uint64_t ehash;
	uint32_t nkeys;
	uint32_t pad;
	union {
		uint64_t one;   /* nkeys == 1 */
		uint64_t *many; /* nkeys > 1: heap array */
	} k;
};

/* What lookups pass to ck_hs: the key part of an entry. */
struct emap_key {
	uint64_t token;
	uint64_t ehash;
};

static void *hs_malloc(size_t n)
{
	return malloc(n);
}

static void *hs_realloc(void *p, size_t old, size_t n, bool defer)
{
	(void)old;
	(void)defer;
	return realloc(p, n);
}

static void hs_free(void *p, size_t n, bool defer)
{
	(void)n;
	(void)defer; /* single-threaded: nobody can still be reading the old map */
	free(p);
}

static struct ck_malloc hs_alloc = { hs_malloc, hs_realloc, hs_free };

static unsigned long hs_hash(const void *obj, unsigned long seed)
{
	const struct emap_key *k = obj;
	uint64_t x = k->ehash ^ (k->token * 0x9e3779b97f4a7c15ull) ^ seed;

	/* splitmix64 finaliser: engine hashes in tests and some engines are small integers. */
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	x ^= x >> 31;
	return (unsigned long)x;
}

static bool hs_compare(const void *a, const void *b)
{
	const struct emap_key *x = a, *y = b;

	return x->token == y->token && x->ehash == y->ehash;
}

int emap_init(struct emap *m, uint64_t cap)
{
	memset(m, 0, sizeof(*m));
	if (cap == 0)
		return -EINVAL;
	m->cap = cap;
	m->nchunks = (size_t)((cap + EMAP_CHUNK - 1) / EMAP_CHUNK);
	m->chunks = calloc(m->nchunks, sizeof(*m->chunks));
	if (!m->chunks)
		return -ENOMEM;
	if (!ck_hs_init(&m->hs, CK_HS_MODE_SPMC | CK_HS_MODE_OBJECT | CK_HS_MODE_DELETE, hs_hash,
			hs_compare, &hs_alloc, 1024, 0x5bd1e995)) {
		free(m->chunks);
		m->chunks = NULL;
		return -ENOMEM;
	}
	return 0;
}

static struct emap_ent *slot(struct emap *m, uint64_t i)
{
	return &m->chunks[i >> EMAP_CHUNK_SHIFT][i & (EMAP_CHUNK - 1)];
}

static void ent_release(struct emap_ent *e)
{
	if (e->nkeys > 1)
		free(e->k.many);
	e->nkeys = 0;
	e->token = 0;
}

void emap_free(struct emap *m)
{
	if (!m->chunks)
		return;
	for (uint64_t i = 0; i < m->used; i++)
		ent_release(slot(m, i));
	for (size_t c = 0; c < m->nchunks; c++)
		free(m->chunks[c]);
	free(m->chunks);
	ck_hs_destroy(&m->hs);
	memset(m, 0, sizeof(*m));
}

uint64_t emap_new_token(struct emap *m)
{
	return ++m->next_token;
}

static void after_remove(struct emap *m)
{
	m->live--;
	if (++m->removes_since_gc >= EMAP_GC_EVERY) {
		ck_hs_gc(&m->hs, 0, 0);
		m->removes_since_gc = 0;
	}
}

int emap_put(struct emap *m, uint64_t token, uint64_t ehash, const uint64_t *keys, uint32_t n)
{
	struct emap_key key = { token, ehash };
	unsigned long h = CK_HS_HASH(&m->hs, hs_hash, &key);
	uint64_t *many = NULL;
	struct emap_ent *e, *prev;

	if (n == 0 || token == 0)
		return -EINVAL;
	if (n > 1) {
		many = malloc(n * sizeof(*many));
		if (!many)
			return -ENOMEM;
		memcpy(many, keys, n * sizeof(*many));
	}
	/* The slot to write: allocate its chunk on first use. */
	size_t c = (size_t)(m->head >> EMAP_CHUNK_SHIFT);
	if (!m->chunks[c]) {
		m->chunks[c] = calloc(EMAP_CHUNK, sizeof(struct emap_ent));
		if (!m->chunks[c]) {
			free(many);
			return -ENOMEM;
		}
	}
	e = slot(m, m->head);
	/* Evict the slot's current (oldest) entry if it is still live. */
	if (e->token) {
		struct emap_key old = { e->token, e->ehash };
		ck_hs_remove(&m->hs, CK_HS_HASH(&m->hs, hs_hash, &old), &old);
		ent_release(e);
		m->evictions++;
		after_remove(m);
	}
	e->token = token;
	e->ehash = ehash;
	e->nkeys = n;
	if (n == 1)
		e->k.one = keys[0];
	else
		e->k.many = many;
	prev = NULL;
	if (!ck_hs_set(&m->hs, h, e, (void **)&prev)) {
		ent_release(e);
		return -ENOMEM;
	}
	if (prev) {
		/* A replaced mapping: its slot goes dead where it is. */
		ent_release(prev);
		m->live--;
	}
	m->live++;
	m->head = (m->head + 1) % m->cap;
	if (m->used < m->cap)
		m->used++;
	return 0;
}

const uint64_t *emap_get(struct emap *m, uint64_t token, uint64_t ehash, uint32_t *n)
{
	struct emap_key key = { token, ehash };
	struct emap_ent *e = ck_hs_get(&m->hs, CK_HS_HASH(&m->hs, hs_hash, &key), &key);

	if (!e)
		return NULL;
	*n = e->nkeys;
	return e->nkeys == 1 ? &e->k.one : e->k.many;
}

int emap_del(struct emap *m, uint64_t token, uint64_t ehash)
{
	struct emap_key key = { token, ehash };
	struct emap_ent *e = ck_hs_remove(&m->hs, CK_HS_HASH(&m->hs, hs_hash, &key), &key);

	if (!e)
		return 0;
	ent_release(e);
	after_remove(m);
	return 1;
}
