/*
 * emap.c — the engine-key -> request-key map of kvidx-ingestd (see emap.h).
 *
 * The entries live in a fifomap (fifomap.h): a ring of slots in insertion order, which gives
 * the FIFO order for eviction for free, found through an open-addressing index of hash words
 * sized at start, so nothing is allocated per event and a lookup of an absent key costs one
 * cache miss (emap_prefetch() lets a caller start it for the next blocks of an event while it
 * works on this one). (It replaced Concurrency Kit's ck_hs, whose pointer set dereferenced an
 * entry on every probe step, grew by rehashing and needed tombstone collection: a third of
 * ingestd's time.)
 *
 * Entries never move once written, so the index and the streams' lists name them by slot
 * number. A slot whose token is 0 is dead (replaced, deleted or never written) and on no
 * list. A closed stream's entries keep a token no stream slot has any more: lookups never
 * find them, and unlinking one leaves the stream table alone (the list it is on belongs to
 * nobody).
 *
 * The held counts are a plain open-addressing table (one per pod): every apply touches them,
 * and a node per key through ck_hs would cost a malloc each.
 */
#include "emap.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* The 32 hash bits of (token, ehash) the index keeps; their low bits are the home slot. */
static uint32_t ent_hash(uint64_t token, uint64_t ehash)
{
	return fm_hash(ehash, token);
}

/* ---- held counts ------------------------------------------------------------------------- */

int emap_held_init(struct emap_held *h)
{
	memset(h, 0, sizeof(*h));
	return 0;
}

void emap_held_free(struct emap_held *h)
{
	fm_zfree(h->s, h->cap * sizeof(*h->s));
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
	return (size_t)fm_mix64(key) & (h->cap - 1);
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
	struct emap_hslot *ns = fm_zalloc(ncap * sizeof(*ns)), *old = h->s;
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
	fm_zfree(old, ocap * sizeof(*old));
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
	return fm_init(&m->fm, cap, sizeof(struct emap_ent));
}

static struct emap_ent *slot(const struct emap *m, uint64_t no)
{
	return fm_slot(&m->fm, no);
}

/* The slot of (token, ehash) with hash h, or FM_NONE. */
static uint64_t ifind(const struct emap *m, uint32_t h, uint64_t token, uint64_t ehash)
{
	for (uint64_t pos = FM_NONE, no; (no = fm_scan(&m->fm, h, &pos)) != FM_NONE;) {
		const struct emap_ent *e = slot(m, no);
		if (e->token == token && e->ehash == ehash)
			return no;
	}
	return FM_NONE;
}

void emap_prefetch(const struct emap *m, uint64_t token, uint64_t ehash)
{
	fm_prefetch(&m->fm, ent_hash(token, ehash));
}

void emap_prefetch_entry(const struct emap *m, uint64_t token, uint64_t ehash)
{
	fm_prefetch_entry(&m->fm, ent_hash(token, ehash));
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

uint64_t *emap_link(struct emap_ent *e)
{
	if (!e->ntail || !(e->flags & ENT_MANY))
		return NULL;
	return e->k.many + e->nkeys + 1 + (e->ntail + 1) / 2;
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
		if (e->copies[t] && !(e->flags & EMAP_UNREF(t)))
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
	fm_unindex(&m->fm, ent_hash(e->token, e->ehash), no);
	if (e->flags & ENT_MANY)
		free(e->k.many);
	memset(e, 0, sizeof(*e));
	m->live--;
}

void emap_free(struct emap *m)
{
	uint64_t used = m->fm.pushes < m->fm.cap ? m->fm.pushes : m->fm.cap;

	for (uint64_t i = 0; i < used; i++) {
		struct emap_ent *e = slot(m, i);
		if (e->token && (e->flags & ENT_MANY))
			free(e->k.many);
	}
	fm_free(&m->fm);
	free(m->streams);
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
	uint64_t no;

	if (!stream_of(m, token))
		return NULL; /* closed: its entries only wait to age out */
	no = ifind(m, ent_hash(token, ehash), token, ehash);
	return no == FM_NONE ? NULL : slot(m, no);
}

struct emap_ent *emap_put(struct emap *m, uint64_t token, uint64_t ehash, const uint64_t *keys,
			  uint32_t nkeys, uint64_t last, const uint32_t *tail, uint32_t ntail,
			  uint32_t flags)
{
	uint32_t h = ent_hash(token, ehash);
	struct emap_stream *st = stream_of(m, token);
	uint64_t *many = NULL;
	struct emap_ent *e;
	uint64_t no;
	bool use_many = !(nkeys == 1 && ntail == 0 && last == keys[0]);

	if (!st || nkeys > UINT16_MAX || ntail > UINT16_MAX) {
		errno = EINVAL;
		return NULL;
	}
	if (use_many) {
		/* An open tail also gets the two link words (emap_link()), zero. */
		size_t words = nkeys + 1 + (ntail + 1) / 2 + (ntail ? 2 : 0);
		many = calloc(words, sizeof(*many));
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
	/* A replaced mapping goes first (it may be the very slot about to be reused). */
	no = ifind(m, h, token, ehash);
	if (no != FM_NONE)
		ent_release(m, no, true);
	no = m->fm.next;
	e = slot(m, no);
	/* Evict the slot's current (oldest) entry if it is still live. */
	if (e->token) {
		ent_release(m, no, true);
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
	fm_push(&m->fm, h);
	/* Link at the head of its stream. */
	e->prev = EMAP_NONE;
	e->next = st->head;
	if (st->head != EMAP_NONE)
		slot(m, st->head)->prev = (uint32_t)no;
	st->head = (uint32_t)no;
	st->n++;
	m->live++;
	return e;
}

int emap_del(struct emap *m, uint64_t token, uint64_t ehash)
{
	uint64_t no;

	if (!stream_of(m, token) ||
	    (no = ifind(m, ent_hash(token, ehash), token, ehash)) == FM_NONE)
		return 0;
	ent_release(m, no, true);
	return 1;
}
