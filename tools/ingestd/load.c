/*
 * load.c — the accounting behind the index's load view in kvidx-ingestd (see load.h): what is
 * in flight per pod, from the route commits and outcomes spec.c drains, retired by outcome,
 * by the time bound or by a full map, published after every change.
 */
#include "load.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <stdbool.h>

#define NS_PER_MS 1000000ull

int load_init(struct ing_load *l, struct kvidx *w, uint32_t max_pods, uint32_t block_size,
	      uint64_t cap, uint32_t timeout_ms)
{
	int rc;

	memset(l, 0, sizeof(*l));
	l->w = w;
	l->max_pods = max_pods;
	l->block_size = block_size ? block_size : 16;
	l->timeout_ns = (uint64_t)(timeout_ms ? timeout_ms : 1) * NS_PER_MS;
	l->pods = calloc(max_pods ? max_pods : 1, sizeof(*l->pods));
	if (!l->pods)
		return -ENOMEM;
	if ((rc = spec_fifo_init(&l->map, cap)) < 0) {
		free(l->pods);
		l->pods = NULL;
		return rc;
	}
	return 0;
}

void load_free(struct ing_load *l)
{
	if (l->pods)
		spec_fifo_free(&l->map);
	free(l->pods);
	memset(l, 0, sizeof(*l));
}

static struct load_pod *lpod(struct ing_load *l, int pod)
{
	if (!l->pods || pod < 0 || (uint32_t)pod >= l->max_pods)
		return NULL;
	return &l->pods[pod];
}

static void publish(struct ing_load *l, int pod, uint64_t now)
{
	struct load_pod *lp = &l->pods[pod];
	struct kvidx_load row = { .inflight = lp->inflight > UINT32_MAX ? UINT32_MAX :
								  (uint32_t)lp->inflight,
				  .prefill_tokens = lp->tokens, .updated_ns = now, .lost = lp->lost };
	(void)kvidx_pod_set_load(l->w, pod, &row); /* -KVIDX_ENOPOD: nothing to show it on */
}

/* Takes request e (removed from the map already) off its pod; lost: without its outcome. */
static void retire(struct ing_load *l, const struct spec_fent *e, bool lost, uint64_t now)
{
	struct load_pod *lp = lpod(l, e->sub);

	if (!lp)
		return;
	/* The sums only ever hold what the map holds: never below zero. */
	lp->inflight -= lp->inflight ? 1 : 0;
	lp->tokens -= e->a < lp->tokens ? e->a : lp->tokens;
	lp->lost += lost;
	publish(l, e->sub, now);
}

static void add(struct ing_load *l, uint64_t key, int pod, int slot, uint64_t tokens,
		uint64_t now)
{
	struct load_pod *lp = lpod(l, pod);
	struct spec_fent ev;

	if (!lp)
		return;
	/* A retry of one request on the same pod is a second request in flight: the map is a
	 * multimap, each outcome retires one. */
	if (spec_fifo_push(&l->map, key, pod, slot, tokens, now, &ev))
		retire(l, &ev, true, now);
	lp->inflight++;
	lp->tokens += tokens;
	publish(l, pod, now);
}

void load_commit(struct ing_load *l, uint64_t corr_id, int pod, int slot, uint32_t prompt_tokens,
		 uint64_t nkeys, uint32_t matched_blocks, uint64_t now)
{
	add(l, corr_id, pod, slot,
	    load_uncached(prompt_tokens, nkeys, matched_blocks, l->block_size), now);
}

/* The aux of a peer's request in the map (a local one holds its registry slot, >= 0). */
#define AUX_REMOTE (-2)

void load_remote(struct ing_load *l, uint64_t key, int pod, uint32_t tokens, uint64_t now)
{
	add(l, key, pod, AUX_REMOTE, tokens, now);
}

void load_forget_remote(struct ing_load *l, uint64_t now)
{
	struct spec_fent *e;

	if (!l->pods)
		return;
	for (uint64_t p = 0; l->map.live && (e = spec_fifo_next(&l->map, &p));)
		if (e->aux == AUX_REMOTE) {
			struct spec_fent copy = *e;
			spec_fifo_del(&l->map, e);
			retire(l, &copy, true, now);
		}
}

void load_outcome(struct ing_load *l, uint64_t corr_id, int pod, uint64_t now)
{
	struct spec_fent *e = l->pods ? spec_fifo_find(&l->map, corr_id, pod) : NULL;

	if (!e) {
		l->unmatched++;
		return;
	}
	struct spec_fent copy = *e;
	spec_fifo_del(&l->map, e);
	retire(l, &copy, false, now);
}

void load_tick(struct ing_load *l, uint64_t now)
{
	struct spec_fent *e;

	if (!l->pods)
		return;
	/* Drain order is time order: stop at the first request still within the bound. */
	while ((e = spec_fifo_oldest(&l->map)) && e->b + l->timeout_ns <= now) {
		struct spec_fent copy = *e;
		spec_fifo_del(&l->map, e);
		retire(l, &copy, true, now);
	}
}

void load_pod_forget(struct ing_load *l, int pod)
{
	struct load_pod *lp = lpod(l, pod);

	if (!lp)
		return;
	spec_fifo_purge(&l->map, pod, false);
	lp->inflight = lp->tokens = lp->lost = 0;
}
