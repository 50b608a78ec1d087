/*
 * events.c — the fake pod's events on their way out: the list of events waiting for their
 * batch (each with the rank it goes to), the extra_keys vLLM gives a prompt's blocks, and the
 * encoding of a batch into a vLLM payload (wire.h) as a publish action.
 *
 * The batch timestamp is the wall clock, as vLLM's; every other time in the pod is
 * CLOCK_MONOTONIC.
 */
#include "fakepod.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

static double wall_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

struct kvw_event *ev_add(struct fp *fp, struct evlist *l, enum kvw_type type)
{
	const struct ev_attr *at = &fp->attr;
	struct kvw_event *e;

	tc_grow(&l->v, &l->cap, l->n + 1, sizeof(*l->v));
	tc_grow(&l->rank, &l->rank_cap, l->n + 1, sizeof(*l->rank));
	l->rank[l->n] = fp->ev_rank;
	e = &l->v[l->n++];
	memset(e, 0, sizeof(*e));
	e->type = type;
	if (type == KVW_ALL_BLOCKS_CLEARED)
		return e;
	e->block_size = fp->o.block_size;
	snprintf(e->medium, sizeof e->medium, "%s", at->medium ? at->medium : "");
	e->has_group_idx = at->has_group;
	e->group_idx = at->group;
	if (type == KVW_BLOCK_STORED && at->kind)
		snprintf(e->spec_kind, sizeof e->spec_kind, "%s", at->kind);
	if (type == KVW_BLOCK_STORED && at->sliding_window) {
		e->has_sliding_window = true;
		e->sliding_window = at->sliding_window;
	}
	if (at->locality)
		snprintf(e->locality, sizeof e->locality, "%s", at->locality);
	return e;
}

uint64_t *ev_hashes(struct kvw_event *e, size_t n)
{
	uint64_t *h = n ? tc_xrealloc(NULL, n * sizeof(*h)) : NULL;

	e->hashes = h;
	e->nhashes = n;
	return h;
}

struct kvw_event *ev_add_removed(struct fp *fp, struct evlist *l, const uint64_t *hashes,
				 size_t nhashes, const uint32_t *remaining)
{
	struct kvw_event *e = ev_add(fp, l, KVW_BLOCK_REMOVED);

	if (nhashes)
		memcpy(ev_hashes(e, nhashes), hashes, nhashes * sizeof(*hashes));
	if (remaining && nhashes) {
		uint32_t *r = tc_xrealloc(NULL, nhashes * sizeof(*r));

		memcpy(r, remaining, nhashes * sizeof(*r));
		e->has_remaining = true;
		e->remaining = r;
		e->nremaining = nhashes;
	}
	return e;
}

size_t block_items(const struct prompt_x *px, size_t blk, uint32_t bs, struct kvw_xitem *out)
{
	uint64_t lo = (uint64_t)blk * bs, hi = lo + bs;
	size_t n = 0;

	if (!px)
		return 0;
	if (px->lora)
		out[n++] = (struct kvw_xitem){ .kind = KVW_X_STR, .str = px->lora,
					       .len = (uint32_t)strlen(px->lora) };
	for (size_t i = 0; i < px->nmm; i++) {
		const struct mm_item *m = &px->mm[i];

		if (m->start >= hi || (uint64_t)m->start + m->len <= lo)
			continue;
		out[n] = (struct kvw_xitem){ .kind = px->mm_bare ? KVW_X_STR : KVW_X_MM,
					     .str = m->id, .len = (uint32_t)strlen(m->id) };
		if (!px->mm_bare) {
			out[n].has_offset = true;
			out[n].offset = (int64_t)m->start - (int64_t)lo;
		}
		n++;
	}
	if (px->salt && blk == 0)
		out[n++] = (struct kvw_xitem){ .kind = KVW_X_STR, .str = px->salt,
					       .len = (uint32_t)strlen(px->salt) };
	return n;
}

/*
 * Gives e the extra_keys of its blocks (prompt blocks first, first + 1, ...) in one
 * allocation: the entries, then the items, then their strings. Nothing when no block has any.
 */
static void ev_extras(struct fp *fp, struct kvw_event *e, size_t first)
{
	struct kvw_xitem it[BLOCK_ITEMS_MAX];
	size_t nitems = 0, nbytes = 0;
	struct kvw_extra *x;
	struct kvw_xitem *items;
	char *str;

	for (size_t i = 0; i < e->nhashes; i++) {
		size_t k = block_items(fp->px, first + i, fp->o.block_size, it);

		nitems += k;
		for (size_t j = 0; j < k; j++)
			nbytes += it[j].len + 1;
	}
	if (fp->px && fp->px->lora) {
		snprintf(e->lora_name, sizeof e->lora_name, "%s", fp->px->lora);
		e->has_lora_id = true; /* vLLM still fills the deprecated id */
		e->lora_id = 1;
	}
	if (!nitems)
		return;
	x = tc_xrealloc(NULL, e->nhashes * sizeof(*x) + nitems * sizeof(*items) + nbytes);
	items = (struct kvw_xitem *)(x + e->nhashes);
	str = (char *)(items + nitems);
	for (size_t i = 0; i < e->nhashes; i++) {
		size_t k = block_items(fp->px, first + i, fp->o.block_size, it);

		x[i] = (struct kvw_extra){ .set = k > 0, .items = items, .nitems = (uint32_t)k };
		for (size_t j = 0; j < k; j++) {
			*items = it[j];
			memcpy(str, it[j].str, it[j].len + 1);
			items->str = str;
			str += it[j].len + 1;
			items++;
		}
	}
	e->has_extra_keys = true;
	e->extra = x;
	e->nextra = e->nhashes;
}

struct kvw_event *ev_add_stored(struct fp *fp, struct evlist *l, const uint64_t *hashes,
				size_t nhashes, bool has_parent, uint64_t parent,
				const uint32_t *tokens, size_t ntokens, size_t first)
{
	struct kvw_event *e = ev_add(fp, l, KVW_BLOCK_STORED);
	uint32_t *t = ntokens ? tc_xrealloc(NULL, ntokens * sizeof(*tokens)) : NULL;

	if (nhashes)
		memcpy(ev_hashes(e, nhashes), hashes, nhashes * sizeof(*hashes));
	e->has_parent = has_parent;
	e->parent = parent;
	if (ntokens)
		memcpy(t, tokens, ntokens * sizeof(*tokens));
	e->tokens = t;
	e->ntokens = ntokens;
	ev_extras(fp, e, first);
	return e;
}

void evlist_drop(struct evlist *l, size_t k)
{
	if (!k)
		return;
	/* The arrays are the list's own (ev_hashes(), ev_add_*()), const only to wire.h. */
	for (size_t i = 0; i < k; i++) {
		free((void *)l->v[i].hashes);
		free((void *)l->v[i].tokens);
		free((void *)l->v[i].extra);
		free((void *)l->v[i].remaining);
	}
	memmove(l->v, l->v + k, (l->n - k) * sizeof(*l->v));
	memmove(l->rank, l->rank + k, (l->n - k) * sizeof(*l->rank));
	l->n -= k;
}

/*
 * Adds the shapes event e shows to a's counts. A second copy is a BlockStored repeating the
 * event encoded just before it (fp->prev_ev, which may have ended the previous batch).
 */
static void count_shapes(struct fp *fp, struct action *a, const struct kvw_event *e)
{
	const struct kvw_event *p = &fp->prev_ev;

	if (e->has_group_idx && e->group_idx > 0)
		a->ngroup++;
	if (e->type == KVW_BLOCK_STORED) {
		if (e->ntokens == 0)
			a->nplaceholder += e->nhashes;
		if (p->type == KVW_BLOCK_STORED && p->nhashes == e->nhashes && e->nhashes &&
		    fp->prev_h0 == e->hashes[0] && p->ntokens == e->ntokens &&
		    p->group_idx == e->group_idx && !strcmp(p->medium, e->medium))
			a->ndup += e->nhashes;
		for (size_t k = 0; e->has_extra_keys && k < e->nextra; k++)
			a->nextra += e->extra[k].set;
	}
	fp->prev_ev = *e;
	fp->prev_ev.hashes = NULL;
	fp->prev_ev.tokens = NULL;
	fp->prev_ev.extra = NULL;
	fp->prev_ev.remaining = NULL;
	fp->prev_h0 = e->nhashes ? e->hashes[0] : 0;
}

void encode_batch(struct fp *fp, const struct kvw_event *v, size_t n, struct action *a)
{
	bool has_rank = fp->o.has_rank || fp->nranks > 1;
	int64_t rank = fp->nranks > 1 ? (int64_t)fp->ev_rank : fp->o.rank;
	const void *buf;
	size_t len;
	int r;

	memset(a, 0, sizeof(*a));
	a->kind = ACT_PUBLISH;
	a->rank = fp->ev_rank;
	kvw_enc_begin(&fp->enc, &fp->encopts, wall_s() + (double)fp->o.ts_ahead_ms / 1e3, n,
		      has_rank, rank);
	for (size_t i = 0; i < n; i++) {
		kvw_enc_event(&fp->enc, &v[i]);
		count_shapes(fp, a, &v[i]);
		if (v[i].type == KVW_BLOCK_STORED)
			a->nstored += v[i].nhashes;
		else if (v[i].type == KVW_BLOCK_REMOVED)
			a->nremoved += v[i].nhashes;
		else
			a->ncleared++;
	}
	r = kvw_enc_end(&fp->enc, &buf, &len);
	if (r) {
		/* The events are built here within the encoder's limits: only memory can fail. */
		fprintf(stderr, PROG ": encoding a batch of %zu events: %s\n", n, strerror(-r));
		exit(1);
	}
	a->nevents = n;
	a->data = tc_xrealloc(NULL, len);
	memcpy(a->data, buf, len);
	a->len = len;
}

void flush_pending(struct fp *fp, size_t n, uint64_t now)
{
	uint32_t keep = fp->ev_rank;

	while (n) {
		struct action a;
		size_t k = 1;

		while (k < n && fp->pending.rank[k] == fp->pending.rank[0])
			k++;
		fp->ev_rank = fp->pending.rank[0];
		encode_batch(fp, fp->pending.v, k, &a);
		evlist_drop(&fp->pending, k);
		a.due = now + fp->delay_ns;
		schedule(fp, &a, now);
		n -= k;
	}
	fp->ev_rank = keep;
}
