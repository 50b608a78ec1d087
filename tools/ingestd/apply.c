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
	for (int i = 0; i < 3; i++) {
		free(a->rmg[i]);
		a->rmg[i] = NULL;
		a->rmg_cap[i] = a->nrmg[i] = 0;
	}
	a->pend = NULL;
	a->pend_cap = a->npend = 0;
	a->keys = a->rm = NULL;
	a->tail = NULL;
	a->items = NULL;
	a->item_start = NULL;
	a->item_blk = NULL;
	a->keys_cap = a->rm_cap = a->items_cap = 0;
}

void ing_target_init(struct ing_target *t, struct kv_tm_pod ctr)
{
	memset(t, 0, sizeof(*t));
	t->pod = -1;
	t->gdesc_pod = -1;
	t->ctr = ctr;
	emap_held_init(&t->held);
	for (unsigned g = 0; g < KVIDX_MAX_GROUPS; g++)
		emap_held_init(&t->gheld[g]);
}

void ing_target_free(struct ing_target *t)
{
	emap_held_free(&t->held);
	for (unsigned g = 0; g < KVIDX_MAX_GROUPS; g++)
		emap_held_free(&t->gheld[g]);
}

int ing_stream_open(struct ing_apply *a, struct ing_stream *s, struct ing_target *t,
		    unsigned rank)
{
	s->t = t;
	s->rank = rank;
	memset(s->gtok, 0, sizeof(s->gtok));
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
	for (unsigned g = 0; g < KVIDX_MAX_GROUPS; g++)
		if (s->gtok[g])
			emap_stream_close(a->emap, s->gtok[g]);
	memset(s->gtok, 0, sizeof(s->gtok));
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

		if (!e->copies[ti] || (e->flags & EMAP_UNREF(ti)))
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

static uint64_t drain_groups(struct ing_apply *a, struct ing_stream *s);

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
		for (unsigned g = 0; g < KVIDX_MAX_GROUPS; g++) {
			emap_held_reset(&t->gheld[g]);
			if (s->gtok[g])
				emap_stream_close(a->emap, s->gtok[g]);
			s->gtok[g] = 0;
		}
	} else {
		/* Other ranks keep their blocks: release this rank's references one by one. */
		struct drain_ctx d = { .a = a, .t = t };

		if (reserve(&a->rm, &a->rm_cap, 1u << 16, sizeof(*a->rm)) == 0 && t->pod >= 0)
			emap_stream_drain(a->emap, s->token, drain_one, &d);
		else
			emap_stream_drain(a->emap, s->token, NULL, NULL);
		d.removed += drain_groups(a, s);
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
		  enum kvidx_tier tier, unsigned groups, uint64_t now)
{
	int rc;

	if (!n || t->pod < 0)
		return;
	/* Confirmations, and late confirmations of keys the event names whether or not the table
	 * had room for all of them, reach spec.c through the writer's observer. */
	rc = kvidx_store_groups(a->w, t->pod, keys, n, tier, groups, now);
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

/* One more physical copy of e on tier: its keys gain a reference in held on the first one. */
static void add_copy(struct ing_target *t, struct emap_held *held, struct emap_ent *e,
		     unsigned tier)
{
	unsigned ti = tier_index(tier);
	uint32_t n;
	const uint64_t *k = emap_keys(e, &n);

	if (e->copies[ti]) {
		ing_ctr_add(t, KV_PC_dup_copies, 1);
	} else {
		e->flags &= ~EMAP_UNREF(ti); /* a fresh copy references its keys again */
		for (uint32_t i = 0; i < n; i++)
			if (emap_held_inc(held, k[i], ti) < 0)
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

/* Where one event's blocks go: the engine-map stream, its held counts, its group bit (0: the
 * model's one group, rule 2). */
struct ing_gctx {
	uint64_t token;
	struct emap_held *held;
	unsigned gbit;
};

/*
 * A placeholder without group_idx on a pod indexed per group (rule 2): the medium holds the
 * block of hash h for every group whose stream knows it (an offloading connector moves all
 * of a block's groups). Returns how many groups, or -ENOMEM.
 */
static int placeholder_groups(struct ing_apply *a, struct ing_stream *s, uint64_t h,
			      unsigned tier, size_t base, uint64_t now)
{
	struct ing_target *t = s->t;
	int found = 0;

	for (unsigned g = 0; g < KVIDX_MAX_GROUPS; g++) {
		struct emap_ent *e = s->gtok[g] ? emap_find(a->emap, s->gtok[g], h) : NULL;
		uint32_t n;
		const uint64_t *k;
		size_t nk = base; /* after the caller's keys, which stay */

		if (!e)
			continue;
		add_copy(t, &t->gheld[g], e, tier);
		k = emap_keys(e, &n);
		if (push_keys(a, &nk, k, n))
			return -ENOMEM;
		store(a, t, a->keys + base, nk - base, tier, 1u << g, now);
		found++;
	}
	if (found)
		ing_ctr_add(t, KV_PC_offload_applied, 1);
	return found;
}

/* Rule 8: no token ids: a tier for blocks the map knows. */
static int placeholder(struct ing_apply *a, struct ing_stream *s, const struct kvw_event *ev,
		       unsigned tier, uint64_t now, const struct ing_gctx *gc)
{
	struct ing_target *t = s->t;
	size_t nk = 0;

	for (size_t i = 0; i < ev->nhashes; i++) {
		struct emap_ent *e = emap_find(a->emap, gc->token, ev->hashes[i]);
		uint32_t n;
		const uint64_t *k;

		if (!e && !gc->gbit && t->grouped) {
			int rc = placeholder_groups(a, s, ev->hashes[i], tier, nk, now);
			if (rc < 0)
				return rc;
			if (rc > 0)
				continue;
		}
		if (!e) {
			skip(t, KV_PC_offload_unknown, 1);
			continue;
		}
		add_copy(t, gc->held, e, tier);
		k = emap_keys(e, &n);
		if (push_keys(a, &nk, k, n))
			return -ENOMEM;
		ing_ctr_add(t, KV_PC_offload_applied, 1);
	}
	store(a, t, a->keys, nk, tier, gc->gbit, now);
	return 0;
}

/* ---- keys with extras ------------------------------------------------------------------------ */

/* Appends one key item of engine block i to the index block being filled. false: no memory. */
static bool push_item(struct ing_apply *a, const char *str, int64_t start, size_t i)
{
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
	a->items[a->nitems] = str;
	a->item_start[a->nitems] = start;
	a->item_blk[a->nitems] = (uint32_t)i;
	a->nitems++;
	return true;
}

/*
 * Adds engine block i's key items to the list of the index block being filled (rule 6).
 * pos: tokens of that index block before this engine block. first: the request's first block.
 * SGLang's metadata.cache_salt is the salt, the last item of the request's first block, as
 * vLLM lists it in extra_keys. Returns false when the block carries extras no router can
 * reproduce.
 */
static bool add_items(struct ing_apply *a, const struct kvw_event *ev, size_t i, uint32_t pos,
		      bool first)
{
	const struct kvw_extra *x;
	uint32_t E = ev->block_size, I = a->block_size;

	if (!ev->has_extra_keys || !ev->extra[i].set)
		return !(first && i == 0 && ev->cache_salt[0]) ||
		       push_item(a, ev->cache_salt, ITEM_NOSTART, i);
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
		if (!push_item(a, it->str, start, i))
			return false;
	}
	if (first && i == 0 && ev->cache_salt[0])
		return push_item(a, ev->cache_salt, ITEM_NOSTART, i);
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

static void flush_copies(struct ing_apply *a, struct ing_target *t, struct emap_held *held,
			 uint64_t token, unsigned tier)
{
	unsigned ti = tier_index(tier);

	for (size_t j = 0; j < a->npend && j < PF_NEAR; j++)
		if (a->pend[j].has_key)
			emap_held_prefetch(held, a->pend[j].key0);
	for (size_t j = 0; j < a->npend; j++) {
		struct ing_pend *p = &a->pend[j];

		if (j + PF_NEAR < a->npend && a->pend[j + PF_NEAR].has_key)
			emap_held_prefetch(held, a->pend[j + PF_NEAR].key0);
		if (p->e->token != token || p->e->ehash != p->ehash || p->e->copies[ti])
			continue;
		add_copy(t, held, p->e, tier);
	}
	a->npend = 0;
}

/*
 * Shape of a BlockStored (rule 4). nskip: the engine blocks token_ids spans before the first
 * listed hash (rule 2: only a sliding-window or Mamba group may mask blocks; 0 otherwise).
 */
static bool shape_ok(struct ing_apply *a, struct ing_target *t, const struct kvw_event *ev,
		     bool may_mask, size_t *nskip)
{
	uint32_t E = ev->block_size, I = a->block_size;

	if (E == 0 || ev->ntokens % E || ev->ntokens / E < ev->nhashes ||
	    (!may_mask && ev->ntokens != (uint64_t)ev->nhashes * E) ||
	    (ev->has_extra_keys && ev->nextra != ev->nhashes))
		return false;
	*nskip = (size_t)(ev->ntokens / E - ev->nhashes);
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

/* ---- KV-cache groups (rule 2) ------------------------------------------------------------------ */

/*
 * The event's group: 0 the model's one group (no group_idx or no kind), 1 indexed per group
 * (*g its description, *gi its index), -1 a group no prefix hit reuses (skipped).
 */
static int event_group(const struct kvw_event *ev, struct kvidx_group *g, unsigned *gi)
{
	bool full = kvw_is_prefix_group(ev);

	if (!ev->has_group_idx || !ev->spec_kind[0])
		return full ? 0 : -1;
	*g = (struct kvidx_group){ .kind = KVIDX_GROUP_FULL, .block_size = ev->block_size };
	if (!full) {
		if (!strcmp(ev->spec_kind, "sliding_window") && ev->has_sliding_window &&
		    ev->sliding_window > 0) {
			g->kind = KVIDX_GROUP_SLIDING;
			g->sliding_window = ev->sliding_window;
		} else if (!strcmp(ev->spec_kind, "mamba")) {
			g->kind = KVIDX_GROUP_MAMBA;
		} else {
			return -1;
		}
	}
	if (ev->group_idx >= KVIDX_MAX_GROUPS)
		return full ? 0 : -1; /* more full-attention groups than described: as one */
	*gi = ev->group_idx;
	return 1;
}

/* Tells the index what group gi of the pod is, when that changed (kvidx_pod_set_group). */
static void describe_group(struct ing_apply *a, struct ing_target *t, unsigned gi,
			   const struct kvidx_group *g)
{
	struct kvidx_group *d = &t->gdesc[gi];

	if (t->pod < 0 || g->block_size == 0)
		return;
	if (t->gdesc_pod != t->pod) {
		memset(t->gdesc, 0, sizeof(t->gdesc));
		t->gdesc_pod = t->pod;
	}
	if (d->kind == g->kind && d->block_size == g->block_size &&
	    d->sliding_window == g->sliding_window)
		return;
	int rc = kvidx_pod_set_group(a->w, t->pod, gi, g);
	if (rc < 0) {
		ilog_limited(&t->lim, ILOG_WARN, "pod %s: group %u: %s", t->label, gi,
			     kvidx_strerror(rc));
		return;
	}
	*d = *g;
	if (g->kind == KVIDX_GROUP_SLIDING)
		ilog(ILOG_INFO, "pod %s: KV-cache group %u is a sliding window of %u tokens "
		     "(block %u tokens)", t->label, gi, g->sliding_window, g->block_size);
	else
		ilog(ILOG_INFO, "pod %s: KV-cache group %u is %s (block %u tokens)", t->label, gi,
		     g->kind == KVIDX_GROUP_FULL ? "full attention" : "Mamba", g->block_size);
}

/* Stream s's engine-map stream of group gi, opened on first use (0: out of memory). */
static uint64_t group_token(struct ing_apply *a, struct ing_stream *s, unsigned gi)
{
	if (!s->gtok[gi])
		s->gtok[gi] = emap_stream_open(a->emap, &s->t->gheld[gi]);
	return s->gtok[gi];
}

/* The entry of hash h in stream token, else in another group's stream of the same rank
 * (groups of one block size share hashes: a hash names the same tokens in each). */
static struct emap_ent *find_any(struct ing_apply *a, const struct ing_stream *s,
				 uint64_t token, uint64_t h)
{
	struct emap_ent *e = emap_find(a->emap, token, h);

	for (unsigned g = 0; !e && g < KVIDX_MAX_GROUPS; g++)
		if (s->gtok[g] && s->gtok[g] != token)
			e = emap_find(a->emap, s->gtok[g], h);
	if (!e && s->token != token)
		e = emap_find(a->emap, s->token, h);
	return e;
}

/* Whether blocks masked out of an event can be keyed from their tokens alone: no listed
 * block has an item but the LoRA name (masked blocks' extra_keys are not sent). */
static bool masked_keyable(const struct kvw_event *ev)
{
	for (size_t i = 0; ev->has_extra_keys && i < ev->nhashes; i++)
		for (uint32_t j = 0; ev->extra[i].set && j < ev->extra[i].nitems; j++) {
			const struct kvw_xitem *it = &ev->extra[i].items[j];
			if (!(j == 0 && it->kind == KVW_X_STR && ev->lora_name[0] &&
			      !strcmp(it->str, ev->lora_name)))
				return false;
		}
	return true;
}

/* Records the links of rule 5's many:1 case (emap_link): the engine blocks before the one
 * completing an index block (prev back from prevh, at most I / E - 1) name it. */
static void link_dependents(struct ing_apply *a, uint64_t token, uint64_t prevh, uint64_t done,
			    uint32_t steps)
{
	for (uint32_t s = 0; prevh && s < steps; s++) {
		struct emap_ent *d = emap_find(a->emap, token, prevh);
		uint64_t *lk = d ? emap_link(d) : NULL;
		if (!lk)
			return;
		lk[1] = done;
		prevh = lk[0];
	}
}

/* ---- BlockStored ------------------------------------------------------------------------------ */

/* Chain state while an event is keyed: the last request key, the tail in a->tail. */
struct ing_chain {
	uint64_t last;
	uint32_t ntail;
	bool lost; /* the pending index block had items that were not kept */
};

static void chain_from(struct ing_apply *a, struct ing_chain *c, const struct emap_ent *e)
{
	const uint32_t *pt;

	c->last = emap_chain(e, &pt, &c->ntail);
	if (c->ntail)
		memcpy(a->tail, pt, c->ntail * sizeof(*pt));
	c->lost = e->flags & EMAP_TAIL_ITEMS;
}

/*
 * Keys engine block tok (E tokens) onto chain c: finishes the index block the chain left
 * open, then whole ones, then a new tail; appends the keys completed to a->keys[*nk] (room
 * for E / I + 1 reserved by the caller). Items pending in a->items key the first one.
 */
static void key_tokens(struct ing_apply *a, struct ing_chain *c, const uint32_t *tok,
		       uint32_t E, size_t *nk)
{
	uint32_t I = a->block_size, pos = 0;

	if (c->ntail) {
		uint32_t take = I - c->ntail < E ? I - c->ntail : E;

		memcpy(a->tail + c->ntail, tok, take * sizeof(*tok));
		c->ntail += take;
		pos = take;
		if (c->ntail == I) {
			c->last = a->keys[(*nk)++] = key_block(a, c->last, a->tail);
			c->ntail = 0;
		}
	}
	for (; E - pos >= I; pos += I)
		c->last = a->keys[(*nk)++] = key_block(a, c->last, tok + pos);
	if (pos < E) {
		memcpy(a->tail, tok + pos, (E - pos) * sizeof(*tok));
		c->ntail = E - pos;
	}
}

/* Counts an unkeyable block (rule 6) and warns once. */
static void unkeyable(struct ing_target *t)
{
	skip(t, KV_PC_unkeyable_extras, 1);
	if (!t->warned_extra) {
		t->warned_extra = true;
		ilog(ILOG_WARN,
		     "pod %s: blocks with extras no router can reproduce (prompt "
		     "embeds) end their event's chain (unkeyable_extras)",
		     t->label);
	}
}

/* The event's chain start: the parent's state, or the model's root. false: parent unknown. */
static bool chain_start(struct ing_apply *a, struct ing_stream *s, const struct kvw_event *ev,
			const char *model, const struct ing_gctx *gc, struct ing_chain *c)
{
	struct ing_target *t = s->t;

	*c = (struct ing_chain){ 0 };
	if (!ev->has_parent) {
		c->last = root_of(a, t, ev->lora_name[0] ? ev->lora_name : model);
		return true;
	}
	struct emap_ent *pe = gc->gbit ? find_any(a, s, gc->token, ev->parent) :
					 emap_find(a->emap, gc->token, ev->parent);
	if (!pe) {
		skip(t, KV_PC_unknown_parent, 1);
		ilog_limited(&t->lim, ILOG_DEBUG, "pod %s: parent %016llx unknown, %zu blocks skipped",
			     t->label, (unsigned long long)ev->parent, ev->nhashes);
		return false;
	}
	chain_from(a, c, pe);
	return true;
}

/*
 * The blocks of one event: each listed hash i is engine block nskip + i of token_ids. Known
 * hashes (this stream, or for a group another group's of the same hash) are copies; new ones
 * are keyed from the chain, which first runs through the masked blocks' tokens.
 */
static int stored_blocks(struct ing_apply *a, struct ing_stream *s, const struct kvw_event *ev,
			 const struct ing_gctx *gc, struct ing_chain *c, size_t nskip,
			 unsigned tier, size_t *nkp)
{
	struct ing_target *t = s->t;
	uint32_t E = ev->block_size, I = a->block_size;
	size_t nk = 0, cblk = 0; /* engine blocks of token_ids the chain has consumed */

	prefetch_start(a, gc->token, ev->hashes, ev->nhashes);
	for (size_t i = 0; i < ev->nhashes; i++) {
		size_t bi = nskip + i, nk0 = nk;
		struct emap_ent *e, *x;
		uint32_t n;

		prefetch_ahead(a, gc->token, ev->hashes, ev->nhashes, i);
		e = emap_find(a->emap, gc->token, ev->hashes[i]);
		x = e || !gc->gbit ? NULL : find_any(a, s, gc->token, ev->hashes[i]);
		if (e || x) {
			/* Known: one more copy of it (or a re-announcement: docs/events.md
			 * "Duplicate copies and re-announcements"); or another
			 * group's block of this hash, whose keys this group now holds too. */
			const uint64_t *k = emap_keys(e ? e : x, &n);
			if (push_keys(a, &nk, k, n))
				return -ENOMEM;
			chain_from(a, c, e ? e : x);
			a->nitems = 0;
			cblk = bi + 1;
			if (e) {
				if (a->npend)
					flush_copies(a, t, gc->held, gc->token, tier);
				add_copy(t, gc->held, e, tier);
				continue;
			}
			e = emap_put(a->emap, gc->token, ev->hashes[i], a->keys + nk0, n, c->last,
				     a->tail, c->ntail, c->lost ? EMAP_TAIL_ITEMS : 0);
		} else {
			if (reserve(&a->keys, &a->keys_cap, nk + (bi - cblk + 1) * (E / I + 1),
				    sizeof(*a->keys)))
				return -ENOMEM;
			if (cblk < bi && (c->lost || !masked_keyable(ev))) {
				unkeyable(t);
				break;
			}
			for (; cblk < bi; cblk++) { /* masked blocks: chained, not held */
				size_t scratch = nk;
				a->nitems = 0;
				key_tokens(a, c, ev->tokens + cblk * E, E, &scratch);
			}
			if (c->lost || !add_items(a, ev, i, c->ntail, !ev->has_parent && bi == 0)) {
				unkeyable(t);
				break;
			}
			/* The engine block before this one in the index block it continues. */
			uint64_t prevh = !c->ntail || nskip ? 0 : i ? ev->hashes[i - 1] :
					 ev->has_parent ? ev->parent : 0;
			key_tokens(a, c, ev->tokens + bi * E, E, &nk);
			cblk = bi + 1;
			if (prevh && nk > nk0)
				link_dependents(a, gc->token, prevh, ev->hashes[i], I / E);
			e = emap_put(a->emap, gc->token, ev->hashes[i], a->keys + nk0,
				     (uint32_t)(nk - nk0), c->last, a->tail, c->ntail,
				     c->ntail && a->nitems ? EMAP_TAIL_ITEMS : 0);
			uint64_t *lk = e && c->ntail ? emap_link(e) : NULL;
			if (lk)
				lk[0] = nk > nk0 ? 0 : prevh;
		}
		if (!e) {
			ilog_limited(&t->lim, ILOG_ERROR, "pod %s: engine-key map: %s", t->label,
				     strerror(errno));
			continue;
		}
		defer_copy(a, e);
	}
	*nkp = nk;
	return 0;
}

static int block_stored(struct ing_apply *a, struct ing_stream *s, const struct kvw_event *ev,
			const char *model, uint64_t now)
{
	struct ing_target *t = s->t;
	uint64_t gbit = ev->has_group_idx && ev->group_idx < 64 ? 1ull << ev->group_idx : 0;
	struct ing_gctx gc = { .token = s->token, .held = &t->held };
	struct kvidx_group g;
	struct ing_chain c;
	unsigned gi = 0, tier;
	size_t nk = 0, nskip = 0;
	int kind = event_group(ev, &g, &gi), rc;

	if (kind < 0) {
		t->other_groups |= gbit;
		skip(t, KV_PC_skipped_group, 1);
		return 0;
	}
	t->prefix_groups |= gbit;
	if (kind > 0) {
		t->grouped |= 1u << gi;
		describe_group(a, t, gi, &g);
		gc = (struct ing_gctx){ .token = group_token(a, s, gi), .held = &t->gheld[gi],
					.gbit = 1u << gi };
		if (!gc.token)
			return -ENOMEM;
	}
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
		return placeholder(a, s, ev, tier, now, &gc);
	if (!shape_ok(a, t, ev, kind > 0 && g.kind != KVIDX_GROUP_FULL, &nskip)) {
		skip(t, KV_PC_skipped_shape, 1);
		return 0;
	}
	if (!a->tail && !(a->tail = malloc(a->block_size * sizeof(*a->tail))))
		return -ENOMEM;
	if (reserve(&a->pend, &a->pend_cap, ev->nhashes, sizeof(*a->pend)))
		return -ENOMEM;
	a->npend = 0;
	a->nitems = 0;
	if (!chain_start(a, s, ev, model, &gc, &c))
		return 0;
	rc = stored_blocks(a, s, ev, &gc, &c, nskip, tier, &nk);
	flush_copies(a, t, gc.held, gc.token, tier);
	if (rc == 0)
		store(a, t, a->keys, nk, tier, gc.gbit, now);
	return rc;
}

/* ---- removals of a group's blocks (rule 2) ------------------------------------------------------ */

/*
 * Key k lost the last reference of group gi on tier index ti: queues what the index loses,
 * in a->rmg: [0] the group and the tier, [1] the tier only (the group holds it elsewhere),
 * [2] the group only (another group holds it on that tier).
 */
static int release_group_key(struct ing_apply *a, struct ing_target *t, unsigned gi,
			     uint64_t k, unsigned ti)
{
	bool tier_gone = emap_held_get(&t->held, k, ti) == 0, group_gone = true;
	int which;

	for (unsigned g = 0; tier_gone && g < KVIDX_MAX_GROUPS; g++)
		if ((t->grouped >> g) & 1 && emap_held_get(&t->gheld[g], k, ti))
			tier_gone = false;
	for (unsigned u = 0; group_gone && u < KVIDX_NTIERS; u++)
		if (emap_held_get(&t->gheld[gi], k, u))
			group_gone = false;
	which = tier_gone && group_gone ? 0 : tier_gone ? 1 : group_gone ? 2 : -1;
	if (which < 0)
		return 0;
	if (reserve(&a->rmg[which], &a->rmg_cap[which], a->nrmg[which] + 1, sizeof(uint64_t)))
		return -ENOMEM;
	a->rmg[which][a->nrmg[which]++] = k;
	return 0;
}

/* Applies what release_group_key() queued; the records changed. */
static uint64_t flush_group_removals(struct ing_apply *a, struct ing_target *t, unsigned gi,
				     unsigned tier)
{
	static const unsigned tiers_of[3] = { 1, 1, 0 }, groups_of[3] = { 1, 0, 1 };
	uint64_t changed = 0;

	for (int w = 0; w < 3; w++) {
		if (a->nrmg[w] && t->pod >= 0) {
			int rc = kvidx_remove_groups(a->w, t->pod, a->rmg[w], a->nrmg[w],
						     tiers_of[w] ? tier : 0,
						     groups_of[w] ? 1u << gi : 0);
			if (rc > 0)
				changed += (uint64_t)rc;
		}
		a->nrmg[w] = 0;
	}
	return changed;
}

/* One entry of group gi's stream being drained: its references go, and what they held. */
struct gdrain_ctx {
	struct ing_apply *a;
	struct ing_target *t;
	unsigned gi;
	uint64_t removed;
};

static void gdrain_one(void *arg, const struct emap_ent *e)
{
	struct gdrain_ctx *d = arg;
	uint32_t n;
	const uint64_t *k = emap_keys(e, &n);

	for (unsigned ti = 0; ti < KVIDX_NTIERS; ti++) {
		if (!e->copies[ti] || (e->flags & EMAP_UNREF(ti)))
			continue;
		for (uint32_t i = 0; i < n; i++)
			if (emap_held_dec(&d->t->gheld[d->gi], k[i], ti) == 0)
				release_group_key(d->a, d->t, d->gi, k[i], ti);
		d->removed += flush_group_removals(d->a, d->t, d->gi, 1u << ti);
	}
}

/* Drops stream s's blocks of every group, one by one (other ranks keep theirs). */
static uint64_t drain_groups(struct ing_apply *a, struct ing_stream *s)
{
	struct gdrain_ctx d = { .a = a, .t = s->t };

	for (unsigned g = 0; g < KVIDX_MAX_GROUPS; g++) {
		if (!s->gtok[g])
			continue;
		d.gi = g;
		emap_stream_drain(a->emap, s->gtok[g], s->t->pod >= 0 ? gdrain_one : NULL, &d);
		s->gtok[g] = 0;
	}
	return d.removed;
}

/*
 * Engine blocks smaller than the index block: e's last copy on tier index ti went, so the block
 * that completed e's index block no longer gives its key (vLLM hits an index block only with
 * every engine block of it): that block's references on ti are dropped (EMAP_UNREF), and the
 * keys no one else references queued: into a->rm[*nrm] (gi < 0: the model's one group) or
 * for flush_group_removals() (group gi). Another block holding the key on its own (a full
 * block that replaced partial ones) keeps it. 0 or -ENOMEM.
 */
static int break_dependent(struct ing_apply *a, struct ing_target *t, uint64_t token,
			   struct emap_held *held, int gi, struct emap_ent *e, unsigned ti,
			   size_t *nrm)
{
	uint64_t *lk = emap_link(e);
	struct emap_ent *c = lk && lk[1] ? emap_find(a->emap, token, lk[1]) : NULL;
	uint32_t n;
	const uint64_t *k;

	if (!c || !c->copies[ti] || (c->flags & EMAP_UNREF(ti)))
		return 0;
	c->flags |= EMAP_UNREF(ti);
	k = emap_keys(c, &n);
	for (uint32_t j = 0; j < n; j++) {
		if (emap_held_dec(held, k[j], ti) != 0)
			continue;
		if (gi >= 0) {
			if (release_group_key(a, t, (unsigned)gi, k[j], ti) < 0)
				return -ENOMEM;
		} else {
			if (reserve(&a->rm, &a->rm_cap, *nrm + 1, sizeof(*a->rm)))
				return -ENOMEM;
			a->rm[(*nrm)++] = k[j];
		}
	}
	return 0;
}

/*
 * One copy fewer of hash h in group gi's stream (rule 7). left_given: remaining_copy_counts'
 * value, or -1. Returns 1 if the group held it, 0 if not, -ENOMEM. The keys whose last
 * reference went are queued for flush_group_removals().
 */
static int group_remove_one(struct ing_apply *a, struct ing_stream *s, unsigned gi, uint64_t h,
			    unsigned ti, int64_t left_given)
{
	struct ing_target *t = s->t;
	struct emap_ent *e = s->gtok[gi] ? emap_find(a->emap, s->gtok[gi], h) : NULL;
	uint32_t left, n;
	const uint64_t *k;

	if (!e || !e->copies[ti])
		return 0;
	left = left_given >= 0 ? (uint32_t)left_given : e->copies[ti] - 1u;
	if (left) {
		e->copies[ti] = left > UINT16_MAX ? UINT16_MAX : (uint16_t)left;
		ing_ctr_add(t, KV_PC_copies_kept, 1);
		return 1;
	}
	e->copies[ti] = 0;
	k = emap_keys(e, &n);
	for (uint32_t j = 0; j < n && !(e->flags & EMAP_UNREF(ti)); j++)
		if (emap_held_dec(&t->gheld[gi], k[j], ti) == 0 &&
		    release_group_key(a, t, gi, k[j], ti) < 0)
			return -ENOMEM;
	if (break_dependent(a, t, s->gtok[gi], &t->gheld[gi], (int)gi, e, ti, NULL) < 0)
		return -ENOMEM;
	return 1;
}

/*
 * A BlockRemoved without group_idx of hash h that the model's one-group stream does not hold,
 * on a pod indexed per group: a copy fewer in every group that holds it (as a placeholder
 * without group_idx adds one to each). Returns how many groups, or -ENOMEM.
 */
static int removed_in_groups(struct ing_apply *a, struct ing_stream *s, uint64_t h, unsigned tier,
			     int64_t left_given)
{
	unsigned ti = tier_index(tier);
	int found = 0;

	for (unsigned g = 0; g < KVIDX_MAX_GROUPS; g++) {
		int rc = group_remove_one(a, s, g, h, ti, left_given);
		if (rc < 0)
			return rc;
		if (rc > 0) {
			ing_ctr_add(s->t, KV_PC_blocks_removed, flush_group_removals(a, s->t, g, tier));
			found++;
		}
	}
	return found;
}

/* A BlockRemoved of group gi (rule 7, per group). */
static int group_removed(struct ing_apply *a, struct ing_stream *s, const struct kvw_event *ev,
			 unsigned gi)
{
	struct ing_target *t = s->t;
	unsigned tier;

	if (!(tier = event_tier(a, t, ev)))
		return 0;
	if (ev->has_remaining && ev->nremaining != ev->nhashes) {
		skip(t, KV_PC_skipped_shape, 1);
		return 0;
	}
	for (size_t i = 0; i < ev->nhashes; i++) {
		int rc = group_remove_one(a, s, gi, ev->hashes[i], tier_index(tier),
					  ev->has_remaining ? (int64_t)ev->remaining[i] : -1);
		if (rc < 0)
			return rc;
		if (rc == 0)
			skip(t, KV_PC_unknown_removed, 1);
	}
	ing_ctr_add(t, KV_PC_blocks_removed, flush_group_removals(a, t, gi, tier));
	return 0;
}

/* ---- BlockRemoved ----------------------------------------------------------------------------- */

static int block_removed(struct ing_apply *a, struct ing_stream *s, const struct kvw_event *ev)
{
	struct ing_target *t = s->t;
	uint64_t gbit = ev->has_group_idx && ev->group_idx < 64 ? 1ull << ev->group_idx : 0;
	unsigned tier, ti;
	size_t nrm = 0;

	if (ev->has_group_idx && ev->group_idx < KVIDX_MAX_GROUPS &&
	    (t->grouped >> ev->group_idx) & 1)
		return group_removed(a, s, ev, ev->group_idx);
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

		if ((!e || !e->copies[ti]) && t->grouped) {
			int rc = removed_in_groups(a, s, ev->hashes[i], tier,
						   ev->has_remaining ? (int64_t)ev->remaining[i] : -1);
			if (rc < 0)
				return rc;
			if (rc > 0)
				continue;
		}
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
		for (uint32_t j = 0; j < n && !(e->flags & EMAP_UNREF(ti)); j++)
			if (emap_held_dec(&t->held, k[j], ti) == 0)
				a->rm[nrm++] = k[j];
		if (break_dependent(a, t, s->token, &t->held, -1, e, ti, &nrm) < 0)
			return -ENOMEM;
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
