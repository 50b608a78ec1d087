/*
 * apply.c — one decoded batch of one pod's rank -> index operations (the rules are in
 * apply.h).
 */
#include "apply.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>


#define ITEM_NOSTART INT64_MIN

/*
 * Prefetch distances, in engine blocks of one event. The engine-key map, the per-pod held
 * counts and the table are far larger than the caches and every block touches each at a
 * random place: loading the lines for block i + PF_FAR (index) and i + PF_NEAR (entry) while
 * working on block i overlaps those misses instead of taking them one after another.
 */
#define PF_FAR 16
#define PF_NEAR 8

void ing_apply_init(struct ing_apply *a, struct kvidx *w, struct emap *emap,
		    enum kvidx_key_algo algo, const char *seed, uint32_t block_size)
{
	memset(a, 0, sizeof(*a));
	a->w = w;
	a->emap = emap;
	a->algo = algo;
	a->seed = seed ? seed : "";
	a->block_size = block_size;
}

void ing_apply_free(struct ing_apply *a)
{
	free(a->keys);
	free(a->rm);
	free(a->tail);
	free(a->items);
	free(a->item_start);
	free(a->item_blk);
	free(a->pend);
	a->pend = NULL;
	a->pend_cap = a->npend = 0;
	a->keys = a->rm = NULL;
	a->tail = NULL;
	a->items = NULL;
	a->item_start = NULL;
	a->item_blk = NULL;
	a->keys_cap = a->rm_cap = a->items_cap = 0;
}

void ing_target_init(struct ing_target *t, uint64_t *ctr)
{
	memset(t, 0, sizeof(*t));
	t->pod = -1;
	t->ctr = ctr;
	emap_held_init(&t->held);
}

void ing_target_free(struct ing_target *t)
{
	emap_held_free(&t->held);
}

int ing_stream_open(struct ing_apply *a, struct ing_stream *s, struct ing_target *t,
		    unsigned rank)
{
	s->t = t;
	s->rank = rank;
	s->token = emap_stream_open(a->emap, &t->held);
	if (!s->token)
		return -ENOMEM;
	t->nstreams++;
	ing_rank_set(s, KV_RC_flags, KV_RANK_IN_USE);
	ing_ctr_set(t, KV_PC_ranks, t->nstreams);
	return 0;
}

void ing_stream_close(struct ing_apply *a, struct ing_stream *s)
{
	if (!s->t)
		return;
	emap_stream_close(a->emap, s->token);
	ing_rank_set(s, KV_RC_flags, 0);
	s->t->nstreams--;
	ing_ctr_set(s->t, KV_PC_ranks, s->t->nstreams);
	s->t = NULL;
	s->token = 0;
}

/* ---- counters ----------------------------------------------------------------------------- */

/* One skip of reason why (a KV_PC_* of the per-event reasons): also in skipped_events. */
static void skip(struct ing_target *t, enum kv_pod_ctr why, uint64_t n)
{
	ing_ctr_add(t, why, n);
	ing_ctr_add(t, KV_PC_skipped_events, n);
}

/* ---- clears -------------------------------------------------------------------------------- */

struct drain_ctx {
	struct ing_apply *a;
	struct ing_target *t;
	uint64_t removed;
};

/* One entry of a rank being cleared: drop its references, remove what nobody holds now. */
static void drain_one(void *arg, const struct emap_ent *e)
{
	struct drain_ctx *d = arg;
	uint32_t n;
	const uint64_t *k = emap_keys(e, &n);

	for (unsigned ti = 0; ti < KVIDX_NTIERS; ti++) {
		size_t nrm = 0;

		if (!e->copies[ti])
			continue;
		for (uint32_t i = 0; i < n && nrm < d->a->rm_cap; i++)
			if (emap_held_dec(&d->t->held, k[i], ti) == 0)
				d->a->rm[nrm++] = k[i];
		if (nrm) {
			int rc = kvidx_remove(d->a->w, d->t->pod, d->a->rm, nrm, 1u << ti);
			if (rc > 0)
				d->removed += (uint64_t)rc;
		}
	}
}

static int reserve(void *arrp, size_t *cap, size_t need, size_t elsize)
{
	void *p, *q;
	size_t n;

	if (need <= *cap)
		return 0;
	n = *cap ? *cap : 256;
	while (n < need)
		n *= 2;
	memcpy(&p, arrp, sizeof(p));
	q = realloc(p, n * elsize);
	if (!q)
		return -ENOMEM;
	memcpy(arrp, &q, sizeof(q));
	*cap = n;
	return 0;
}

void ing_stream_clear(struct ing_apply *a, struct ing_stream *s)
{
	struct ing_target *t = s->t;
	uint64_t tok;

	if (t->nstreams <= 1) {
		/* The pod's only rank: O(1) in the index, and every count goes with it. */
		if (t->pod >= 0)
			kvidx_clear_pod(a->w, t->pod);
		emap_held_reset(&t->held);
		emap_stream_close(a->emap, s->token);
	} else {
		/* Other ranks keep their blocks: release this rank's references one by one. */
		struct drain_ctx d = { .a = a, .t = t };

		if (reserve(&a->rm, &a->rm_cap, 1u << 16, sizeof(*a->rm)) == 0 && t->pod >= 0)
			emap_stream_drain(a->emap, s->token, drain_one, &d);
		else
			emap_stream_drain(a->emap, s->token, NULL, NULL);
		ing_ctr_add(t, KV_PC_blocks_removed, d.removed);
	}
	tok = emap_stream_open(a->emap, &t->held);
	if (!tok)
		ilog(ILOG_ERROR, "pod %s rank %u: out of memory for an engine-map stream", t->label,
		     s->rank);
	s->token = tok;
	ing_ctr_add(t, KV_PC_clears, 1);
	ing_rank_add(s, KV_RC_clears, 1);
}

/* ---- roots ------------------------------------------------------------------------- */

/* The tier the event's blocks go on, or 0 when it is skipped (REMOTE, counted). */
static unsigned event_tier(struct ing_apply *a, struct ing_target *t, const struct kvw_event *ev)
{
	if (!strcasecmp(ev->locality, "REMOTE")) {
		if (!a->remote_tier)
			skip(t, KV_PC_skipped_remote, 1);
		return a->remote_tier;
	}
	return kvidx_tier_from_medium(ev->medium); /* rule 3 */
}

static unsigned tier_index(unsigned tier)
{
	return (unsigned)__builtin_ctz(tier);
}

static uint64_t root_of(struct ing_apply *a, struct ing_target *t, const char *model)
{
	if (!t->root_ok || strcmp(t->root_model, model)) {
		snprintf(t->root_model, sizeof(t->root_model), "%s", model);
		t->root = kvidx_key_root(a->algo, a->seed, model);
		t->root_ok = true;
	}
	return t->root;
}

/* ---- stores -------------------------------------------------------------------------------- */

static void store(struct ing_apply *a, struct ing_target *t, const uint64_t *keys, size_t n,
		  enum kvidx_tier tier, uint64_t now)
{
	int rc;

	if (!n || t->pod < 0)
		return;
	/* Confirmations, and late confirmations of keys the event names whether or not the table
	 * had room for all of them, reach spec.c through the writer's observer. */
	rc = kvidx_store(a->w, t->pod, keys, n, tier, now);
	if (rc >= 0) {
		ing_ctr_add(t, KV_PC_blocks_stored, (uint64_t)rc);
		return;
	}
	if (rc == -KVIDX_EFULL) {
		/* The others were stored; the failures are in the segment's store_failed. */
		ilog_limited(&t->lim, ILOG_WARN, "pod %s: index full, some blocks not stored",
			     t->label);
		return;
	}
	ilog_limited(&t->lim, ILOG_ERROR, "pod %s: store failed: %s", t->label,
		     kvidx_strerror(rc));
}

/* One more physical copy of e on tier: its keys gain a reference on the first one. */
static void add_copy(struct ing_target *t, struct emap_ent *e, unsigned tier)
{
	unsigned ti = tier_index(tier);
	uint32_t n;
	const uint64_t *k = emap_keys(e, &n);

	if (e->copies[ti]) {
		ing_ctr_add(t, KV_PC_dup_copies, 1);
	} else {
		for (uint32_t i = 0; i < n; i++)
			if (emap_held_inc(&t->held, k[i], ti) < 0)
				ilog_limited(&t->lim, ILOG_ERROR,
					     "pod %s: out of memory for reference counts", t->label);
	}
	if (e->copies[ti] < UINT16_MAX)
		e->copies[ti]++;
}

/* Appends n keys to a->keys (grown as needed). */
static int push_keys(struct ing_apply *a, size_t *nk, const uint64_t *k, size_t n)
{
	if (reserve(&a->keys, &a->keys_cap, *nk + n, sizeof(*a->keys)))
		return -ENOMEM;
	memcpy(a->keys + *nk, k, n * sizeof(*k));
	*nk += n;
	return 0;
}

/* Rule 8: no token ids: a tier for blocks the map knows. */
static int placeholder(struct ing_apply *a, struct ing_stream *s, const struct kvw_event *ev,
		       unsigned tier, uint64_t now)
{
	struct ing_target *t = s->t;
	size_t nk = 0;

	for (size_t i = 0; i < ev->nhashes; i++) {
		struct emap_ent *e = emap_find(a->emap, s->token, ev->hashes[i]);
		uint32_t n;
		const uint64_t *k;

		if (!e) {
			skip(t, KV_PC_offload_unknown, 1);
			continue;
		}
		add_copy(t, e, tier);
		k = emap_keys(e, &n);
		if (push_keys(a, &nk, k, n))
			return -ENOMEM;
		ing_ctr_add(t, KV_PC_offload_applied, 1);
	}
	store(a, t, a->keys, nk, tier, now);
	return 0;
}

/* ---- keys with extras ------------------------------------------------------------------------ */

/*
 * Adds engine block i's key items to the list of the index block being filled (rule 6).
 * pos: tokens of that index block before this engine block. first: the request's first block.
 * Returns false when the block carries extras no router can reproduce.
 */
static bool add_items(struct ing_apply *a, const struct kvw_event *ev, size_t i, uint32_t pos,
		      bool first)
{
	const struct kvw_extra *x;
	uint32_t E = ev->block_size, I = a->block_size;

	if (!ev->has_extra_keys || !ev->extra[i].set)
		return true;
	x = &ev->extra[i];
	for (uint32_t j = 0; j < x->nitems; j++) {
		const struct kvw_xitem *it = &x->items[j];
		int64_t start = ITEM_NOSTART;
		bool dup = false;

		if (j == 0 && it->kind == KVW_X_STR && ev->lora_name[0] &&
		    !strcmp(it->str, ev->lora_name))
			continue; /* the LoRA name: keyed by the root instead */
		if (it->kind != KVW_X_STR && it->kind != KVW_X_MM)
			return false; /* prompt-embeds bytes or anything else */
		if (E > I && (it->kind == KVW_X_MM || !first))
			return false; /* where in the engine block it lies is unknown */
		if (it->kind == KVW_X_MM && it->has_offset)
			start = (int64_t)pos + it->offset;
		/* The same item listed by an earlier engine block of this index block. */
		for (size_t k = 0; k < a->nitems && !dup; k++)
			dup = a->item_blk[k] != i && !strcmp(a->items[k], it->str) &&
			      (start == ITEM_NOSTART || a->item_start[k] == ITEM_NOSTART ||
			       a->item_start[k] == start);
		if (dup)
			continue;
		if (a->nitems == a->items_cap) {
			size_t cap = a->items_cap ? 2 * a->items_cap : 16;
			const char **ni = realloc(a->items, cap * sizeof(*ni));
			if (ni)
				a->items = ni;
			int64_t *ns = realloc(a->item_start, cap * sizeof(*ns));
			if (ns)
				a->item_start = ns;
			uint32_t *nb = realloc(a->item_blk, cap * sizeof(*nb));
			if (nb)
				a->item_blk = nb;
			if (!ni || !ns || !nb)
				return false;
			a->items_cap = cap;
		}
		a->items[a->nitems] = it->str;
		a->item_start[a->nitems] = start;
		a->item_blk[a->nitems] = (uint32_t)i;
		a->nitems++;
	}
	return true;
}

/* Keys one index block of I tokens from *last, with the pending items; clears them. */
static uint64_t key_block(struct ing_apply *a, uint64_t last, const uint32_t *tok)
{
	uint64_t k = kvidx_key_block(a->algo, last, tok, a->block_size, a->nitems ? a->items : NULL,
				     a->nitems);

	a->nitems = 0;
	return k;
}

/* ---- prefetching and deferred copies ----------------------------------------------------------- */

/* Starts the engine-map misses of the blocks after block i of hashes[0..n). */
static void prefetch_ahead(struct ing_apply *a, uint64_t token, const uint64_t *h, size_t n,
			   size_t i)
{
	if (i + PF_FAR < n)
		emap_prefetch(a->emap, token, h[i + PF_FAR]);
	if (i + PF_NEAR < n)
		emap_prefetch_entry(a->emap, token, h[i + PF_NEAR]);
}

static void prefetch_start(struct ing_apply *a, uint64_t token, const uint64_t *h, size_t n)
{
	for (size_t i = 0; i < n && i < PF_FAR; i++)
		emap_prefetch(a->emap, token, h[i]);
}

/*
 * The first copy of each block an event added to the map is counted after the event's loop
 * (flush_copies), with the held-count slots prefetched ahead: each is a miss in a table of
 * every key the pod holds. Same result as counting at once: an entry put earlier in the same
 * event is either still there with no copy on the tier (counted now), or was replaced or
 * evicted meanwhile (then counting it at once would have been undone: skipped), and any
 * immediate add_copy flushes first (so a duplicate hash in one event counts as before).
 */
static void defer_copy(struct ing_apply *a, struct emap_ent *e)
{
	uint32_t n;
	const uint64_t *k = emap_keys(e, &n);

	a->pend[a->npend++] = (struct ing_pend){ .e = e, .ehash = e->ehash, .key0 = n ? k[0] : 0,
						 .has_key = n > 0 };
}

static void add_copy(struct ing_target *t, struct emap_ent *e, unsigned tier);

static void flush_copies(struct ing_apply *a, struct ing_target *t, uint64_t token,
			 unsigned tier)
{
	unsigned ti = tier_index(tier);

	for (size_t j = 0; j < a->npend && j < PF_NEAR; j++)
		if (a->pend[j].has_key)
			emap_held_prefetch(&t->held, a->pend[j].key0);
	for (size_t j = 0; j < a->npend; j++) {
		struct ing_pend *p = &a->pend[j];

		if (j + PF_NEAR < a->npend && a->pend[j + PF_NEAR].has_key)
			emap_held_prefetch(&t->held, a->pend[j + PF_NEAR].key0);
		if (p->e->token != token || p->e->ehash != p->ehash || p->e->copies[ti])
			continue;
		add_copy(t, p->e, tier);
	}
	a->npend = 0;
}

/* ---- BlockStored ------------------------------------------------------------------------------ */

static bool shape_ok(struct ing_apply *a, struct ing_target *t, const struct kvw_event *ev)
{
	uint32_t E = ev->block_size, I = a->block_size;

	if (E == 0 || ev->ntokens != (uint64_t)ev->nhashes * E ||
	    (ev->has_extra_keys && ev->nextra != ev->nhashes))
		return false;
	if (E % I && I % E) {
		if (!t->warned_ratio) {
			t->warned_ratio = true;
			ilog(ILOG_WARN,
			     "pod %s: engine block size %u is neither a multiple nor a divisor of the "
			     "index block size %u; such events are skipped (skipped_shape)",
			     t->label, E, I);
		}
		return false;
	}
	return true;
}

static int block_stored(struct ing_apply *a, struct ing_stream *s, const struct kvw_event *ev,
			const char *model, uint64_t now)
{
	struct ing_target *t = s->t;
	uint32_t E = ev->block_size, I = a->block_size;
	uint64_t gbit = ev->has_group_idx && ev->group_idx < 64 ? 1ull << ev->group_idx : 0;
	uint32_t ntail = 0;
	uint64_t last;
	size_t nk = 0;
	bool lost = false; /* the chain's pending index block had items that were not kept */
	unsigned tier;
	int rc = 0;

	if (!kvw_is_prefix_group(ev)) {
		t->other_groups |= gbit;
		skip(t, KV_PC_skipped_group, 1);
		return 0;
	}
	t->prefix_groups |= gbit;
	if (ev->nhashes == 0)
		return 0;
	if (!(tier = event_tier(a, t, ev)))
		return 0;
	if (tier == KVIDX_TIER_OTHER) {
		ing_ctr_add(t, KV_PC_other_medium, ev->nhashes);
		if (!t->warned_other) {
			t->warned_other = true;
			ilog(ILOG_WARN, "pod %s: medium '%s' is not known; its blocks are tier 'other'",
			     t->label, ev->medium);
		}
	}
	if (ev->ntokens == 0)
		return placeholder(a, s, ev, tier, now);
	if (!shape_ok(a, t, ev)) {
		skip(t, KV_PC_skipped_shape, 1);
		return 0;
	}
	if (!a->tail && !(a->tail = malloc(I * sizeof(*a->tail))))
		return -ENOMEM;
	if (reserve(&a->pend, &a->pend_cap, ev->nhashes, sizeof(*a->pend)))
		return -ENOMEM;
	a->npend = 0;
	a->nitems = 0;
	if (ev->has_parent) {
		struct emap_ent *pe = emap_find(a->emap, s->token, ev->parent);
		const uint32_t *pt;

		if (!pe) {
			skip(t, KV_PC_unknown_parent, 1);
			ilog_limited(&t->lim, ILOG_DEBUG,
				     "pod %s: parent %016llx unknown, %zu blocks skipped", t->label,
				     (unsigned long long)ev->parent, ev->nhashes);
			return 0;
		}
		last = emap_chain(pe, &pt, &ntail);
		if (ntail)
			memcpy(a->tail, pt, ntail * sizeof(*pt));
		lost = pe->flags & EMAP_TAIL_ITEMS;
	} else {
		last = root_of(a, t, ev->lora_name[0] ? ev->lora_name : model);
	}
	prefetch_start(a, s->token, ev->hashes, ev->nhashes);
	for (size_t i = 0; i < ev->nhashes; i++) {
		const uint32_t *tok = ev->tokens + i * E;
		struct emap_ent *e;
		size_t nk0 = nk;
		uint32_t pos = 0, n;

		prefetch_ahead(a, s->token, ev->hashes, ev->nhashes, i);
		e = emap_find(a->emap, s->token, ev->hashes[i]);
		if (e) {
			/* Known: one more copy of it (or a re-announcement: docs/events.md
			 * "Duplicate copies and re-announcements"). */
			const uint32_t *pt;
			const uint64_t *k = emap_keys(e, &n);

			if (a->npend)
				flush_copies(a, t, s->token, tier);
			add_copy(t, e, tier);
			if (push_keys(a, &nk, k, n)) {
				rc = -ENOMEM;
				break;
			}
			last = emap_chain(e, &pt, &ntail);
			if (ntail)
				memcpy(a->tail, pt, ntail * sizeof(*pt));
			lost = e->flags & EMAP_TAIL_ITEMS;
			a->nitems = 0;
			continue;
		}
		if (lost || !add_items(a, ev, i, ntail, !ev->has_parent && i == 0)) {
			skip(t, KV_PC_unkeyable_extras, 1);
			if (!t->warned_extra) {
				t->warned_extra = true;
				ilog(ILOG_WARN,
				     "pod %s: blocks with extras no router can reproduce (prompt "
				     "embeds) end their event's chain (unkeyable_extras)",
				     t->label);
			}
			break;
		}
		if (reserve(&a->keys, &a->keys_cap, nk + E / I + 1, sizeof(*a->keys))) {
			rc = -ENOMEM;
			break;
		}
		/* Finish the index block the chain left open, then whole ones, then a new tail. */
		if (ntail) {
			uint32_t take = I - ntail < E ? I - ntail : E;

			memcpy(a->tail + ntail, tok, take * sizeof(*tok));
			ntail += take;
			pos = take;
			if (ntail == I) {
				last = a->keys[nk++] = key_block(a, last, a->tail);
				ntail = 0;
			}
		}
		for (; E - pos >= I; pos += I)
			last = a->keys[nk++] = key_block(a, last, tok + pos);
		if (pos < E) {
			memcpy(a->tail, tok + pos, (E - pos) * sizeof(*tok));
			ntail = E - pos;
		}
		e = emap_put(a->emap, s->token, ev->hashes[i], a->keys + nk0, (uint32_t)(nk - nk0),
			     last, a->tail, ntail, ntail && a->nitems ? EMAP_TAIL_ITEMS : 0);
		if (!e) {
			ilog_limited(&t->lim, ILOG_ERROR, "pod %s: engine-key map: %s", t->label,
				     strerror(errno));
			continue;
		}
		defer_copy(a, e);
	}
	flush_copies(a, t, s->token, tier);
	if (rc == 0)
		store(a, t, a->keys, nk, tier, now);
	return rc;
}

/* ---- BlockRemoved ----------------------------------------------------------------------------- */

static int block_removed(struct ing_apply *a, struct ing_stream *s, const struct kvw_event *ev)
{
	struct ing_target *t = s->t;
	uint64_t gbit = ev->has_group_idx && ev->group_idx < 64 ? 1ull << ev->group_idx : 0;
	unsigned tier, ti;
	size_t nrm = 0;

	if (!kvw_is_prefix_group(ev) ||
	    ((t->other_groups & gbit) && !(t->prefix_groups & gbit))) {
		skip(t, KV_PC_skipped_group, 1);
		return 0;
	}
	if (!(tier = event_tier(a, t, ev)))
		return 0;
	if (ev->has_remaining && ev->nremaining != ev->nhashes) {
		skip(t, KV_PC_skipped_shape, 1);
		return 0;
	}
	ti = tier_index(tier);
	prefetch_start(a, s->token, ev->hashes, ev->nhashes);
	for (size_t i = 0; i < ev->nhashes; i++) {
		struct emap_ent *e;
		uint32_t left, n;
		const uint64_t *k;

		prefetch_ahead(a, s->token, ev->hashes, ev->nhashes, i);
		if (i + PF_NEAR / 2 < ev->nhashes &&
		    (e = emap_find(a->emap, s->token, ev->hashes[i + PF_NEAR / 2])) &&
		    e->copies[ti] && (k = emap_keys(e, &n)) && n)
			emap_held_prefetch(&t->held, k[0]);
		e = emap_find(a->emap, s->token, ev->hashes[i]);

		if (!e || !e->copies[ti]) {
			skip(t, KV_PC_unknown_removed, 1);
			continue;
		}
		left = ev->has_remaining ? ev->remaining[i] : e->copies[ti] - 1u;
		if (left) {
			e->copies[ti] = left > UINT16_MAX ? UINT16_MAX : (uint16_t)left;
			ing_ctr_add(t, KV_PC_copies_kept, 1);
			continue;
		}
		/* The last copy: the mapping stays (the hash still names those tokens). */
		e->copies[ti] = 0;
		k = emap_keys(e, &n);
		if (reserve(&a->rm, &a->rm_cap, nrm + n, sizeof(*a->rm)))
			return -ENOMEM;
		for (uint32_t j = 0; j < n; j++)
			if (emap_held_dec(&t->held, k[j], ti) == 0)
				a->rm[nrm++] = k[j];
	}
	if (nrm && t->pod >= 0) {
		int rc = kvidx_remove(a->w, t->pod, a->rm, nrm, tier);
		if (rc > 0)
			ing_ctr_add(t, KV_PC_blocks_removed, (uint64_t)rc);
	}
	return 0;
}

int ing_apply_batch(struct ing_apply *a, struct ing_stream *s, const struct kvw_batch *b,
		    const char *model, uint64_t now)
{
	struct ing_target *t = s->t;
	uint64_t nev = b->nevents + b->nskipped + b->nbad;
	int rc = 0;

	if (!model)
		model = "";
	for (size_t i = 0; i < b->nevents && rc == 0; i++) {
		const struct kvw_event *ev = &b->events[i];
		switch (ev->type) {
		case KVW_BLOCK_STORED:
			rc = block_stored(a, s, ev, model, now);
			break;
		case KVW_BLOCK_REMOVED:
			rc = block_removed(a, s, ev);
			break;
		case KVW_ALL_BLOCKS_CLEARED:
			ing_stream_clear(a, s);
			break;
		}
		if (a->between && i + 1 < b->nevents)
			a->between(a->between_arg);
	}
	if (rc < 0)
		ilog_limited(&t->lim, ILOG_ERROR, "pod %s: out of memory applying a batch; the rest "
			     "of it is skipped", t->label);
	ing_ctr_add(t, KV_PC_events, nev);
	ing_rank_add(s, KV_RC_events, nev);
	if (b->nskipped)
		skip(t, KV_PC_unknown_type, b->nskipped);
	if (b->nbad) {
		skip(t, KV_PC_bad_events, b->nbad);
		ilog_limited(&t->lim, ILOG_WARN, "pod %s: %zu malformed event(s) skipped: %s",
			     t->label, b->nbad, b->bad_msg);
	}
	return rc;
}
