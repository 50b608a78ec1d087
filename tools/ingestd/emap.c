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
 * addresses, and the streams' lists link slot numbers. A slot whose token is 0 is dead
 * (replaced, deleted or never written) and on no list. A closed stream's entries keep a token
 * no stream slot has any more: lookups never find them, and unlinking one leaves the stream
 * table alone (the list it is on belongs to nobody).
 *
 * The held counts are a plain open-addressing table (one per pod): every apply touches them,
 * and a node per key through ck_hs would cost a malloc each.
 */
#include "emap.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define EMAP_CHUNK_SHIFT 14
#define EMAP_CHUNK (1u << EMAP_CHUNK_SHIFT)
#define EMAP_GC_EVERY 65536 /* removals between ck_hs_gc() passes */

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

static uint64_t mix64(uint64_t x)
{
	/* splitmix64 finaliser: engine hashes in tests and some engines are small integers. */
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	x ^= x >> 31;
	return x;
}

static unsigned long hs_hash(const void *obj, unsigned long seed)
{
	const struct emap_key *k = obj;

	return (unsigned long)mix64(k->ehash ^ (k->token * 0x9e3779b97f4a7c15ull) ^ seed);
}

static bool hs_compare(const void *a, const void *b)
{
	const struct emap_key *x = a, *y = b;

	return x->token == y->token && x->ehash == y->ehash;
}

/* ---- held counts ------------------------------------------------------------------------- */

int emap_held_init(struct emap_held *h)
{
	memset(h, 0, sizeof(*h));
	return 0;
}

void emap_held_free(struct emap_held *h)
{
	free(h->s);
	memset(h, 0, sizeof(*h));
}

void emap_held_reset(struct emap_held *h)
{
	if (h->s)
		memset(h->s, 0, h->cap * sizeof(*h->s));
	h->used = 0;
}

static bool hslot_empty(const struct emap_hslot *s)
{
	for (unsigned i = 0; i < KVIDX_NTIERS; i++)
		if (s->n[i])
			return false;
	return true;
}

static size_t held_home(const struct emap_held *h, uint64_t key)
{
	return (size_t)mix64(key) & (h->cap - 1);
}

static struct emap_hslot *held_lookup(const struct emap_held *h, uint64_t key)
{
	if (!h->cap)
		return NULL;
	for (size_t i = held_home(h, key);; i = (i + 1) & (h->cap - 1)) {
		struct emap_hslot *s = &h->s[i];
		if (hslot_empty(s))
			return NULL;
		if (s->key == key)
			return s;
	}
}

static int held_grow(struct emap_held *h)
{
	size_t ncap = h->cap ? 2 * h->cap : 1024;
	struct emap_hslot *ns = calloc(ncap, sizeof(*ns)), *old = h->s;
	size_t ocap = h->cap;

	if (!ns)
		return -ENOMEM;
	h->s = ns;
	h->cap = ncap;
	for (size_t i = 0; i < ocap; i++) {
		if (hslot_empty(&old[i]))
			continue;
		size_t j = held_home(h, old[i].key);
		while (!hslot_empty(&ns[j]))
			j = (j + 1) & (ncap - 1);
		ns[j] = old[i];
	}
	free(old);
	return 0;
}

int emap_held_inc(struct emap_held *h, uint64_t key, unsigned ti)
{
	struct emap_hslot *s = held_lookup(h, key);

	if (!s) {
		if ((h->used + 1) * 2 > h->cap && held_grow(h) < 0)
			return -ENOMEM;
		size_t i = held_home(h, key);
		while (!hslot_empty(&h->s[i]))
			i = (i + 1) & (h->cap - 1);
		s = &h->s[i];
		s->key = key;
		h->used++;
	}
	if (s->n[ti] < UINT32_MAX)
		s->n[ti]++;
	return (int)(s->n[ti] > INT32_MAX ? INT32_MAX : s->n[ti]);
}

/* Removes the (now empty) slot at i, shifting later members of its probe run back. */
static void held_delete(struct emap_held *h, size_t i)
{
	size_t j = i;

	for (;;) {
		j = (j + 1) & (h->cap - 1);
		if (hslot_empty(&h->s[j]))
			break;
		size_t home = held_home(h, h->s[j].key);
		/* Can slot j's entry move to i? Only if its home is not in (i, j]. */
		bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
		if (stays)
			continue;
		h->s[i] = h->s[j];
		i = j;
	}
	memset(&h->s[i], 0, sizeof(h->s[i]));
	h->used--;
}

uint32_t emap_held_dec(struct emap_held *h, uint64_t key, unsigned ti)
{
	struct emap_hslot *s = held_lookup(h, key);
	uint32_t n;

	if (!s || !s->n[ti])
		return 0;
	n = --s->n[ti];
	if (hslot_empty(s))
		held_delete(h, (size_t)(s - h->s));
	return n;
}

uint32_t emap_held_get(const struct emap_held *h, uint64_t key, unsigned ti)
{
	const struct emap_hslot *s = held_lookup(h, key);

	return s ? s->n[ti] : 0;
}

/* ---- entries ------------------------------------------------------------------------------ */

int emap_init(struct emap *m, uint64_t cap)
{
	memset(m, 0, sizeof(*m));
	if (cap == 0 || cap >= EMAP_NONE)
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

static struct emap_ent *slot(const struct emap *m, uint64_t i)
{
	return &m->chunks[i >> EMAP_CHUNK_SHIFT][i & (EMAP_CHUNK - 1)];
}

/* The open stream of token, or NULL. */
static struct emap_stream *stream_of(const struct emap *m, uint64_t token)
{
	uint64_t idx = (token & 0xffffffffu);

	if (idx == 0 || idx > m->nstreams)
		return NULL;
	struct emap_stream *st = &m->streams[idx - 1];
	return st->token == token ? st : NULL;
}

/* Flag bit (private): the entry's keys and chain state are in k.many. */
#define ENT_MANY 0x80000000u

const uint64_t *emap_keys(const struct emap_ent *e, uint32_t *n)
{
	*n = e->nkeys;
	return e->flags & ENT_MANY ? e->k.many : &e->k.one;
}

uint64_t emap_chain(const struct emap_ent *e, const uint32_t **tail, uint32_t *ntail)
{
	*ntail = e->ntail;
	if (!(e->flags & ENT_MANY)) {
		*tail = NULL;
		return e->k.one;
	}
	*tail = e->ntail ? (const uint32_t *)(e->k.many + e->nkeys + 1) : NULL;
	return e->k.many[e->nkeys];
}

/* Drops the held references of e (no index change). */
static void ent_unref(struct emap_held *h, const struct emap_ent *e)
{
	uint32_t n;
	const uint64_t *k;

	if (!h)
		return;
	k = emap_keys(e, &n);
	for (unsigned t = 0; t < KVIDX_NTIERS; t++)
		if (e->copies[t])
			for (uint32_t i = 0; i < n; i++)
				emap_held_dec(h, k[i], t);
}

/* Takes e off its stream's list and out of the hash set; the slot goes dead. unref: drop its
 * held references too. */
static void ent_release(struct emap *m, struct emap_ent *e, bool unref)
{
	struct emap_stream *st = stream_of(m, e->token);
	struct emap_key key = { e->token, e->ehash };

	if (unref && st)
		ent_unref(st->held, e);
	if (e->prev != EMAP_NONE)
		slot(m, e->prev)->next = e->next;
	else if (st)
		st->head = e->next;
	if (e->next != EMAP_NONE)
		slot(m, e->next)->prev = e->prev;
	if (st)
		st->n--;
	ck_hs_remove(&m->hs, CK_HS_HASH(&m->hs, hs_hash, &key), &key);
	if (e->flags & ENT_MANY)
		free(e->k.many);
	memset(e, 0, sizeof(*e));
	e->prev = e->next = EMAP_NONE;
	m->live--;
	if (++m->removes_since_gc >= EMAP_GC_EVERY) {
		ck_hs_gc(&m->hs, 0, 0);
		m->removes_since_gc = 0;
	}
}

void emap_free(struct emap *m)
{
	if (!m->chunks)
		return;
	for (uint64_t i = 0; i < m->used; i++) {
		struct emap_ent *e = slot(m, i);
		if (e->token && (e->flags & ENT_MANY))
			free(e->k.many);
	}
	for (size_t c = 0; c < m->nchunks; c++)
		free(m->chunks[c]);
	free(m->chunks);
	free(m->streams);
	ck_hs_destroy(&m->hs);
	memset(m, 0, sizeof(*m));
}

uint64_t emap_stream_open(struct emap *m, struct emap_held *held)
{
	size_t i;

	for (i = 0; i < m->nstreams; i++)
		if (!m->streams[i].token)
			break;
	if (i == m->nstreams) {
		if (m->nstreams == m->streams_cap) {
			size_t ncap = m->streams_cap ? 2 * m->streams_cap : 64;
			struct emap_stream *ns = realloc(m->streams, ncap * sizeof(*ns));
			if (!ns)
				return 0;
			m->streams = ns;
			m->streams_cap = ncap;
		}
		m->nstreams++;
	}
	/* The generation makes a reused slot's token new. */
	if (++m->stream_gen == 0)
		m->stream_gen = 1;
	m->streams[i] = (struct emap_stream){
		.token = (uint64_t)m->stream_gen << 32 | (uint64_t)(i + 1),
		.head = EMAP_NONE,
		.held = held,
	};
	return m->streams[i].token;
}

void emap_stream_close(struct emap *m, uint64_t token)
{
	struct emap_stream *st = stream_of(m, token);

	if (st)
		memset(st, 0, sizeof(*st));
}

uint64_t emap_stream_entries(const struct emap *m, uint64_t token)
{
	const struct emap_stream *st = stream_of(m, token);

	return st ? st->n : 0;
}

void emap_stream_drain(struct emap *m, uint64_t token,
		       void (*fn)(void *arg, const struct emap_ent *e), void *arg)
{
	struct emap_stream *st = stream_of(m, token);

	if (!st)
		return;
	while (st->head != EMAP_NONE) {
		struct emap_ent *e = slot(m, st->head);
		if (fn)
			fn(arg, e);
		ent_release(m, e, true);
	}
	emap_stream_close(m, token);
}

struct emap_ent *emap_find(struct emap *m, uint64_t token, uint64_t ehash)
{
	struct emap_key key = { token, ehash };

	if (!stream_of(m, token))
		return NULL; /* closed: its entries only wait to age out */
	return ck_hs_get(&m->hs, CK_HS_HASH(&m->hs, hs_hash, &key), &key);
}

struct emap_ent *emap_put(struct emap *m, uint64_t token, uint64_t ehash, const uint64_t *keys,
			  uint32_t nkeys, uint64_t last, const uint32_t *tail, uint32_t ntail,
			  uint32_t flags)
{
	struct emap_key key = { token, ehash };
	struct emap_stream *st = stream_of(m, token);
	uint64_t *many = NULL;
	struct emap_ent *e, *prev;
	bool use_many = !(nkeys == 1 && ntail == 0 && last == keys[0]);

	if (!st || nkeys > UINT16_MAX || ntail > UINT16_MAX) {
		errno = EINVAL;
		return NULL;
	}
	if (use_many) {
		size_t words = nkeys + 1 + (ntail + 1) / 2;
		many = malloc(words * sizeof(*many));
		if (!many) {
			errno = ENOMEM;
			return NULL;
		}
		if (nkeys)
			memcpy(many, keys, nkeys * sizeof(*many));
		many[nkeys] = last;
		if (ntail)
			memcpy(many + nkeys + 1, tail, ntail * sizeof(*tail));
	}
	/* The slot to write: allocate its chunk on first use. */
	size_t c = (size_t)(m->head >> EMAP_CHUNK_SHIFT);
	if (!m->chunks[c]) {
		m->chunks[c] = calloc(EMAP_CHUNK, sizeof(struct emap_ent));
		if (!m->chunks[c]) {
			free(many);
			errno = ENOMEM;
			return NULL;
		}
		for (size_t i = 0; i < EMAP_CHUNK; i++)
			m->chunks[c][i].prev = m->chunks[c][i].next = EMAP_NONE;
	}
	/* A replaced mapping goes first (it may be the very slot about to be reused). */
	prev = ck_hs_get(&m->hs, CK_HS_HASH(&m->hs, hs_hash, &key), &key);
	if (prev)
		ent_release(m, prev, true);
	e = slot(m, m->head);
	/* Evict the slot's current (oldest) entry if it is still live. */
	if (e->token) {
		ent_release(m, e, true);
		m->evictions++;
	}
	e->token = token;
	e->ehash = ehash;
	e->nkeys = (uint16_t)nkeys;
	e->ntail = (uint16_t)ntail;
	e->flags = flags | (use_many ? ENT_MANY : 0);
	memset(e->copies, 0, sizeof(e->copies));
	if (use_many)
		e->k.many = many;
	else
		e->k.one = keys[0];
	if (!ck_hs_put(&m->hs, CK_HS_HASH(&m->hs, hs_hash, &key), e)) {
		if (use_many)
			free(many);
		memset(e, 0, sizeof(*e));
		e->prev = e->next = EMAP_NONE;
		errno = ENOMEM;
		return NULL;
	}
	/* Link at the head of its stream. */
	uint32_t no = (uint32_t)m->head;
	e->prev = EMAP_NONE;
	e->next = st->head;
	if (st->head != EMAP_NONE)
		slot(m, st->head)->prev = no;
	st->head = no;
	st->n++;
	m->live++;
	m->head = (m->head + 1) % m->cap;
	if (m->used < m->cap)
		m->used++;
	return e;
}

int emap_del(struct emap *m, uint64_t token, uint64_t ehash)
{
	struct emap_ent *e = emap_find(m, token, ehash);

	if (!e)
		return 0;
	ent_release(m, e, true);
	return 1;
}
