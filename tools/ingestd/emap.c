/*
 * emap.c — the engine-key -> request-key map of kvidx-ingestd (see emap.h).
 *
 * The index is a plain open-addressing table of 64-bit words sized once at start for the map's
 * capacity (load <= 1/2: linear probes stay short): the low 32 bits of the key's hash, which
 * also give its home slot, and the entry's slot number + 1 (0: empty). A probe reads one
 * cache line of words and dereferences an entry only when its 32 hash bits match, so a lookup
 * of an absent key costs one cache miss, and emap_prefetch() lets a caller start that miss
 * for the next blocks of an event while it works on this one. Deletion shifts later members
 * of the probe run back (no tombstones, no periodic clean-up), computing homes from the words
 * alone. Nothing is allocated per event: the entries live in slot chunks allocated once as
 * the map fills, which also give the FIFO order for eviction for free (the slots are a ring).
 * (It replaced Concurrency Kit's ck_hs, whose pointer set dereferenced an entry on every
 * probe step, grew by rehashing and needed tombstone collection: a third of ingestd's time.)
 *
 * Entries never move once written (chunks are never reallocated), so the index and the
 * streams' lists name them by slot number. A slot whose token is 0 is dead
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
#include <sys/mman.h>

#define EMAP_CHUNK_SHIFT 17 /* 6 MiB of entries: three huge pages */
#define EMAP_CHUNK (1u << EMAP_CHUNK_SHIFT)
#define HUGE_PAGE (2ul << 20)

/*
 * Zeroed memory for a big table accessed at random places: from 2 MiB up, mapped on its own,
 * aligned and advised onto transparent huge pages (where the kernel's THP mode is madvise or
 * always), since a TLB miss on every access otherwise costs about as much as the access.
 * big_free() takes the same size.
 */
static void *big_calloc(size_t n)
{
	size_t len = (n + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
	char *p, *a;

	if (n < HUGE_PAGE)
		return calloc(1, n);
	p = mmap(NULL, len + HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
		 0);
	if (p == MAP_FAILED)
		return NULL;
	a = (char *)(((uintptr_t)p + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
	if (a > p)
		munmap(p, (size_t)(a - p));
	if (p + len + HUGE_PAGE > a + len)
		munmap(a + len, (size_t)(p + len + HUGE_PAGE - (a + len)));
	(void)madvise(a, len, MADV_HUGEPAGE); /* a hint: without it, ordinary pages */
	return a;
}

static void big_free(void *p, size_t n)
{
	if (!p)
		return;
	if (n < HUGE_PAGE)
		free(p);
	else
		munmap(p, (n + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1));
}
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

/* The 32 hash bits of (token, ehash) the index keeps; their low bits are the home slot. */
static uint32_t ent_hash(uint64_t token, uint64_t ehash)
{
	return (uint32_t)mix64(ehash ^ (token * 0x9e3779b97f4a7c15ull) ^ 0x5bd1e995);
}

/* ---- held counts ------------------------------------------------------------------------- */

int emap_held_init(struct emap_held *h)
{
	memset(h, 0, sizeof(*h));
	return 0;
}

void emap_held_free(struct emap_held *h)
{
	big_free(h->s, h->cap * sizeof(*h->s));
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

void emap_held_prefetch(const struct emap_held *h, uint64_t key)
{
	if (h->cap) {
		/* The slot and the line after it: deletion shifts the rest of the probe run. */
		const char *p = (const char *)&h->s[held_home(h, key)];
		__builtin_prefetch(p, 1);
		__builtin_prefetch(p + 64, 1);
	}
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
	struct emap_hslot *ns = big_calloc(ncap * sizeof(*ns)), *old = h->s;
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
	big_free(old, ocap * sizeof(*old));
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
	uint64_t words = 16;

	memset(m, 0, sizeof(*m));
	if (cap == 0 || cap >= EMAP_NONE)
		return -EINVAL;
	m->cap = cap;
	m->nchunks = (size_t)((cap + EMAP_CHUNK - 1) / EMAP_CHUNK);
	m->chunks = calloc(m->nchunks, sizeof(*m->chunks));
	/* Load <= 1/2; homes come from 32 hash bits, so at most 2^32 words (and cap < 2^32 - 1
	 * leaves a free word for every probe to end on). */
	while (words < 2 * cap && words < (1ull << 32))
		words <<= 1;
	m->idx = big_calloc((size_t)words * sizeof(*m->idx));
	if (!m->chunks || !m->idx) {
		free(m->chunks);
		big_free(m->idx, (size_t)words * sizeof(*m->idx));
		memset(m, 0, sizeof(*m));
		return -ENOMEM;
	}
	m->imask = words - 1;
	return 0;
}

/* Entries in chunk c: EMAP_CHUNK, fewer in the last one. */
static size_t chunk_len(const struct emap *m, size_t c)
{
	uint64_t left = m->cap - (uint64_t)c * EMAP_CHUNK;

	return left < EMAP_CHUNK ? (size_t)left : EMAP_CHUNK;
}

static struct emap_ent *slot(const struct emap *m, uint64_t i)
{
	return &m->chunks[i >> EMAP_CHUNK_SHIFT][i & (EMAP_CHUNK - 1)];
}

/* ---- the index: word = 32 hash bits << 32 | slot + 1; 0 empty ---- */

static uint64_t iword(uint32_t h, uint64_t slotno)
{
	return (uint64_t)h << 32 | (slotno + 1);
}

static uint64_t ihome(const struct emap *m, uint32_t h)
{
	return h & m->imask;
}

/* The index position of (token, ehash) with hash h, or -1. */
static int64_t ifind(const struct emap *m, uint32_t h, uint64_t token, uint64_t ehash)
{
	for (uint64_t i = ihome(m, h);; i = (i + 1) & m->imask) {
		uint64_t w = m->idx[i];
		if (!w)
			return -1;
		if ((uint32_t)(w >> 32) != h)
			continue;
		const struct emap_ent *e = slot(m, (uint32_t)w - 1);
		if (e->token == token && e->ehash == ehash)
			return (int64_t)i;
	}
}

static void iinsert(struct emap *m, uint32_t h, uint64_t slotno)
{
	uint64_t i = ihome(m, h);

	while (m->idx[i])
		i = (i + 1) & m->imask;
	m->idx[i] = iword(h, slotno);
}

/* Removes the word of slot slotno (hash h): backward-shift deletion, homes from the words. */
static void iremove(struct emap *m, uint32_t h, uint64_t slotno)
{
	uint64_t want = iword(h, slotno), i, j;

	for (i = ihome(m, h); m->idx[i] != want; i = (i + 1) & m->imask)
		if (!m->idx[i])
			return; /* cannot happen: every live entry is indexed */
	m->idx[i] = 0;
	for (j = i;;) {
		j = (j + 1) & m->imask;
		uint64_t w = m->idx[j];
		if (!w)
			return;
		uint64_t k = ihome(m, (uint32_t)(w >> 32));
		/* Slot j's word stays if its home lies cyclically in (i, j]. */
		if (i <= j ? (i < k && k <= j) : (i < k || k <= j))
			continue;
		m->idx[i] = w;
		m->idx[j] = 0;
		i = j;
	}
}

void emap_prefetch(const struct emap *m, uint64_t token, uint64_t ehash)
{
	__builtin_prefetch(&m->idx[ihome(m, ent_hash(token, ehash))]);
}

void emap_prefetch_entry(const struct emap *m, uint64_t token, uint64_t ehash)
{
	uint32_t h = ent_hash(token, ehash);

	/* The first few words of the probe run only: a hint need not be complete. */
	for (uint64_t i = ihome(m, h), n = 0; n < 4; i = (i + 1) & m->imask, n++) {
		uint64_t w = m->idx[i];
		if (!w)
			return;
		if ((uint32_t)(w >> 32) == h) {
			__builtin_prefetch(slot(m, (uint32_t)w - 1));
			return;
		}
	}
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

/* Takes the entry of slot no off its stream's list and out of the index; the slot goes dead.
 * unref: drop its held references too. */
static void ent_release(struct emap *m, uint64_t no, bool unref)
{
	struct emap_ent *e = slot(m, no);
	struct emap_stream *st = stream_of(m, e->token);

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
	iremove(m, ent_hash(e->token, e->ehash), no);
	if (e->flags & ENT_MANY)
		free(e->k.many);
	memset(e, 0, sizeof(*e));
	e->prev = e->next = EMAP_NONE;
	m->live--;
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
		big_free(m->chunks[c], chunk_len(m, c) * sizeof(struct emap_ent));
	free(m->chunks);
	free(m->streams);
	big_free(m->idx, (size_t)(m->imask + 1) * sizeof(*m->idx));
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
		uint32_t no = st->head;
		if (fn)
			fn(arg, slot(m, no));
		ent_release(m, no, true);
	}
	emap_stream_close(m, token);
}

struct emap_ent *emap_find(struct emap *m, uint64_t token, uint64_t ehash)
{
	int64_t i;

	if (!stream_of(m, token))
		return NULL; /* closed: its entries only wait to age out */
	i = ifind(m, ent_hash(token, ehash), token, ehash);
	return i < 0 ? NULL : slot(m, (uint32_t)m->idx[i] - 1);
}

struct emap_ent *emap_put(struct emap *m, uint64_t token, uint64_t ehash, const uint64_t *keys,
			  uint32_t nkeys, uint64_t last, const uint32_t *tail, uint32_t ntail,
			  uint32_t flags)
{
	uint32_t h = ent_hash(token, ehash);
	struct emap_stream *st = stream_of(m, token);
	uint64_t *many = NULL;
	struct emap_ent *e;
	int64_t prev;
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
		m->chunks[c] = big_calloc(chunk_len(m, c) * sizeof(struct emap_ent));
		if (!m->chunks[c]) {
			free(many);
			errno = ENOMEM;
			return NULL;
		}
		for (size_t i = 0; i < chunk_len(m, c); i++)
			m->chunks[c][i].prev = m->chunks[c][i].next = EMAP_NONE;
	}
	/* A replaced mapping goes first (it may be the very slot about to be reused). */
	prev = ifind(m, h, token, ehash);
	if (prev >= 0)
		ent_release(m, (uint32_t)m->idx[prev] - 1, true);
	e = slot(m, m->head);
	/* Evict the slot's current (oldest) entry if it is still live. */
	if (e->token) {
		ent_release(m, m->head, true);
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
	iinsert(m, h, m->head);
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
	int64_t i;

	if (!stream_of(m, token) || (i = ifind(m, ent_hash(token, ehash), token, ehash)) < 0)
		return 0;
	ent_release(m, (uint32_t)m->idx[i] - 1, true);
	return 1;
}
