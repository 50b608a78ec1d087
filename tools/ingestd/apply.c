/*
 * apply.c — one decoded batch of one pod -> index operations (the rules are in apply.h).
 */
#include "apply.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spec.h"

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
	a->keys = NULL;
	a->keys_cap = 0;
}

void ing_target_clear(struct ing_apply *a, struct ing_target *t)
{
	if (t->pod >= 0)
		kvidx_clear_pod(a->w, t->pod);
	t->token = emap_new_token(a->emap);
	ing_ctr_add(t, KV_PC_clears, 1);
}

static enum kvidx_tier tier_of(const struct kvw_event *ev)
{
	/* The decoder gives "" for a nil medium, which vLLM means as GPU. */
	return kvidx_tier_from_medium(ev->medium[0] ? ev->medium : NULL);
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

static bool has_set_extra(const struct kvw_event *ev)
{
	if (!ev->has_extra_keys)
		return false;
	for (size_t i = 0; i < ev->nextra; i++)
		if (ev->extra[i].set)
			return true;
	return false;
}

/* Pass 1: structure only, nothing written. Also sizes the key scratch. */
static int validate(struct ing_apply *a, const struct kvw_batch *b, char *err, size_t errlen)
{
	size_t need = 0;

	for (size_t i = 0; i < b->nevents; i++) {
		const struct kvw_event *ev = &b->events[i];
		if (ev->type != KVW_BLOCK_STORED)
			continue;
		if (ev->ntokens != 0 && ev->ntokens != (uint64_t)ev->nhashes * ev->block_size) {
			snprintf(err, errlen,
				 "event %zu: BlockStored has %zu token ids for %zu blocks of %u", i,
				 ev->ntokens, ev->nhashes, ev->block_size);
			return -EBADMSG;
		}
		if (ev->has_extra_keys && ev->nextra != ev->nhashes) {
			snprintf(err, errlen,
				 "event %zu: BlockStored has %zu extra_keys entries for %zu blocks", i,
				 ev->nextra, ev->nhashes);
			return -EBADMSG;
		}
		size_t n = ev->ntokens / a->block_size;
		if (n > need)
			need = n;
	}
	if (need > a->keys_cap) {
		size_t cap = a->keys_cap ? a->keys_cap : 256;
		while (cap < need)
			cap *= 2;
		uint64_t *k = realloc(a->keys, cap * sizeof(*k));
		if (!k) {
			snprintf(err, errlen, "out of memory for %zu keys", need);
			return -ENOMEM;
		}
		a->keys = k;
		a->keys_cap = cap;
	}
	return 0;
}

static void store(struct ing_apply *a, struct ing_target *t, const uint64_t *keys, size_t n,
		  enum kvidx_tier tier, uint64_t now)
{
	struct spec_confirm_ctx cx = { .s = a->spec, .now = now };
	int rc = kvidx_store(a->w, t->pod, keys, n, tier, now, a->spec ? spec_confirm : NULL, &cx);

	/* The event arrived whether or not the table had room for all of it. */
	spec_after_store(a->spec, t->pod, keys, n, now);
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

/*
 * The request keys (*n of them) the engine-key map holds for engine block hash, or NULL if
 * the map does not know the block: an event that cannot be applied, counted as skipped.
 */
static const uint64_t *mapped_keys(struct ing_apply *a, struct ing_target *t, uint64_t hash,
				   uint32_t *n)
{
	const uint64_t *k = emap_get(a->emap, t->token, hash, n);

	if (!k)
		ing_ctr_add(t, KV_PC_skipped_events, 1);
	return k;
}

/* Rule 5: tokens absent, hashes present: a tier update of blocks the map knows. */
static void tier_update(struct ing_apply *a, struct ing_target *t, const struct kvw_event *ev,
			uint64_t now)
{
	enum kvidx_tier tier = tier_of(ev);

	for (size_t i = 0; i < ev->nhashes; i++) {
		uint32_t n;
		const uint64_t *k = mapped_keys(a, t, ev->hashes[i], &n);
		if (k)
			store(a, t, k, n, tier, now);
	}
}

static void block_stored(struct ing_apply *a, struct ing_target *t, const struct kvw_event *ev,
			 const char *model, uint64_t now)
{
	uint32_t eb = ev->block_size, ib = a->block_size, ratio;
	uint64_t parent;
	size_t n;

	uint64_t gbit = ev->has_group_idx && ev->group_idx < 64 ? 1ull << ev->group_idx : 0;

	if (!kvw_is_prefix_group(ev)) {
		t->other_groups |= gbit;
		ing_ctr_add(t, KV_PC_skipped_events, 1);
		return;
	}
	t->prefix_groups |= gbit;
	if (eb % ib) {
		ing_ctr_add(t, KV_PC_skipped_events, 1);
		if (!t->warned_ratio) {
			t->warned_ratio = true;
			ilog(ILOG_WARN,
			     "pod %s: engine block size %u is not a multiple of the index block size "
			     "%u; such events are skipped (counted in skipped_events)",
			     t->label, eb, ib);
		}
		return;
	}
	if (has_set_extra(ev)) {
		ing_ctr_add(t, KV_PC_skipped_events, 1);
		if (!t->warned_extra) {
			t->warned_extra = true;
			ilog(ILOG_WARN,
			     "pod %s: BlockStored with extra_keys (multimodal, LoRA or salted "
			     "blocks) cannot be keyed by this version; such events are skipped",
			     t->label);
		}
		return;
	}
	if (ev->nhashes == 0)
		return;
	if (ev->ntokens == 0) {
		tier_update(a, t, ev, now);
		return;
	}
	ratio = eb / ib;
	if (ev->has_parent) {
		uint32_t np;
		const uint64_t *pk = emap_get(a->emap, t->token, ev->parent, &np);
		if (!pk) {
			ing_ctr_add(t, KV_PC_unknown_parent, 1);
			ilog_limited(&t->lim, ILOG_DEBUG,
				     "pod %s: parent %016llx unknown, %zu blocks skipped", t->label,
				     (unsigned long long)ev->parent, ev->nhashes);
			return;
		}
		parent = pk[np - 1];
	} else {
		parent = root_of(a, t, ev->lora_name[0] ? ev->lora_name : model);
	}
	n = kvidx_key_chain(a->algo, parent, ev->tokens, ev->ntokens, ib, a->keys, a->keys_cap);
	/* validate() guarantees ntokens == nhashes * eb, hence n == nhashes * ratio. */
	for (size_t i = 0; i < ev->nhashes && (i + 1) * ratio <= n; i++) {
		if (emap_put(a->emap, t->token, ev->hashes[i], a->keys + i * ratio, ratio) < 0)
			ilog_limited(&t->lim, ILOG_ERROR,
				     "pod %s: out of memory in the engine-key map", t->label);
	}
	store(a, t, a->keys, n, tier_of(ev), now);
}

static void block_removed(struct ing_apply *a, struct ing_target *t, const struct kvw_event *ev)
{
	unsigned tier = tier_of(ev);
	uint64_t gbit = ev->has_group_idx && ev->group_idx < 64 ? 1ull << ev->group_idx : 0;

	if (!kvw_is_prefix_group(ev) ||
	    ((t->other_groups & gbit) && !(t->prefix_groups & gbit))) {
		ing_ctr_add(t, KV_PC_skipped_events, 1);
		return;
	}
	for (size_t i = 0; i < ev->nhashes; i++) {
		uint32_t n;
		const uint64_t *k = mapped_keys(a, t, ev->hashes[i], &n);
		if (!k)
			continue;
		int rc = kvidx_remove(a->w, t->pod, k, n, tier);
		if (rc > 0)
			ing_ctr_add(t, KV_PC_blocks_removed, (uint64_t)rc);
	}
}

int ing_apply_batch(struct ing_apply *a, struct ing_target *t, const struct kvw_batch *b,
		    const char *model, uint64_t now, char *err, size_t errlen)
{
	int rc = validate(a, b, err, errlen);

	if (rc < 0)
		return rc;
	if (!model)
		model = "";
	for (size_t i = 0; i < b->nevents; i++) {
		const struct kvw_event *ev = &b->events[i];
		switch (ev->type) {
		case KVW_BLOCK_STORED:
			block_stored(a, t, ev, model, now);
			break;
		case KVW_BLOCK_REMOVED:
			block_removed(a, t, ev);
			break;
		case KVW_ALL_BLOCKS_CLEARED:
			ing_target_clear(a, t);
			break;
		}
	}
	ing_ctr_add(t, KV_PC_events, b->nevents + b->nskipped + b->nbad);
	if (b->nskipped + b->nbad)
		ing_ctr_add(t, KV_PC_skipped_events, b->nskipped + b->nbad);
	return 0;
}
