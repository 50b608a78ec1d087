/*
 * pick.c — the routing decision, the part a router embedding lib/kvidx.h needs: the
 * prompt's block keys with the index's scheme, a wait-free score of the candidate pods, the
 * pick, the commit (so that the writer adds speculative entries, DESIGN.md section 6), and
 * the outcome report. Also which pods are up: a pod that could not be reached is left out
 * for --down-ms.
 *
 * Decision kinds, from the chosen pod's score row:
 *   predicted  the match on the chosen pod includes speculative blocks (not yet confirmed)
 *   confirmed  the chosen pod matched blocks, all confirmed by BlockStored events
 *   nomatch    the chosen pod matched no block
 *
 * Policy: the best score wins; ties go to the pod with the fewest requests outstanding,
 * then round robin. Under P/D (--prefill pods), the prefill pod is the best-scored prefill
 * pod and the decode pod the best-scored decode pod; both are committed in one route.
 */
#include "route.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "attach.h"
#include "cli.h"

#define REFRESH_NS (1 * NS_PER_S)    /* full re-lookup of pod indices */
#define MISSING_NS (100 * NS_PER_MS) /* re-lookup of pods the index does not know yet */

const char *const kind_name[K_COUNT] = { "predicted", "confirmed", "nomatch" };

int router_attach(struct router *rt, struct opts *o)
{
	struct kvidx_info in;

	memset(rt, 0, sizeof(*rt));
	rt->o = o;
	rt->r = tc_index_open(o->name);
	if (!rt->r)
		return -1;
	if (tc_index_info(rt->r, o->name, &in) < 0)
		return -1;
	if (!in.block_size) {
		fprintf(stderr, PROG ": index '%s': block size 0\n", o->name);
		return -1;
	}
	rt->algo = in.algo;
	rt->bs = in.block_size;
	rt->gen = in.generation;
	rt->root = rt->key_root = kvidx_key_root(in.algo, in.seed, o->model);
	snprintf(rt->seed, sizeof(rt->seed), "%s", in.seed);
	kvidx_weights_default(&rt->weights);
	rt->weights.speculative = o->spec_weight;
	rt->rows = tc_xrealloc(NULL, MAX_PODS * sizeof(*rt->rows));
	return 0;
}

void router_close(struct router *rt)
{
	if (rt->r)
		kvidx_reader_close(rt->r);
	free(rt->rows);
	free(rt->keys);
	rt->r = NULL;
}

/*
 * Looks the pods' indices up by name (kvidx_reader_pod_find is linear in max_pods, so the
 * answers are cached): all of them when all is set (periodically, and when the index switched
 * to a new generation, where indices may differ), else only those the index did not know.
 * Rebuilds the candidate list passed to kvidx_score().
 */
static void pods_refresh(struct router *rt, bool all)
{
	struct opts *o = rt->o;

	rt->ncand = 0;
	for (int i = 0; i < o->npods; i++) {
		struct pod *p = &o->pods[i];
		if (all || p->idx < 0) {
			int idx = kvidx_reader_pod_find(rt->r, p->name);
			char cur[KVIDX_POD_NAME_MAX];
			if (idx < 0 && p->idx >= 0 &&
			    kvidx_reader_pod(rt->r, p->idx, cur, NULL) == -KVIDX_ERETRY)
				idx = p->idx; /* its name was being rewritten: keep it this time */
			if (idx < 0 && !p->warned) {
				fprintf(stderr,
					PROG ": pod %s is not in index '%s' (yet): routing to it "
					     "without scores or commits until it is\n",
					p->name, o->name);
				p->warned = true;
			}
			if (idx >= 0 && p->warned && p->idx < 0)
				fprintf(stderr, PROG ": pod %s is now index %d\n", p->name, idx);
			if (idx >= 0)
				p->warned = false;
			p->idx = idx >= 0 ? idx : -1;
		}
		if (p->idx >= 0)
			rt->cand[rt->ncand++] = p->idx;
	}
}

/* Before a decision: a new data generation (writer restart) or the periodic check re-reads
 * every pod index; pods still unknown are re-read every MISSING_NS. */
static void pods_maybe_refresh(struct router *rt, uint64_t now)
{
	struct kvidx_info in;
	bool all = now >= rt->next_refresh_ns;

	if (kvidx_reader_info(rt->r, &in) == 0 && in.generation != rt->gen) {
		rt->gen = in.generation;
		all = true;
	}
	if (all) {
		pods_refresh(rt, true);
		rt->next_refresh_ns = now + REFRESH_NS;
		rt->next_missing_ns = now + MISSING_NS;
	} else if (rt->ncand < (size_t)rt->o->npods && now >= rt->next_missing_ns) {
		pods_refresh(rt, false);
		rt->next_missing_ns = now + MISSING_NS;
	}
}

void route_refresh(struct router *rt)
{
	pods_refresh(rt, true);
}

bool pod_is_up(const struct pod *p, uint64_t now)
{
	return now >= p->down_until;
}

void pod_down(struct router *rt, struct pod *p, uint64_t now)
{
	bool was_up = pod_is_up(p, now);

	p->failures++;
	p->down_until = now + rt->o->down_ms * NS_PER_MS;
	if (was_up && !rt->o->quiet)
		fprintf(stderr, PROG ": pod %s (%s) unreachable: down for %llu ms\n", p->name,
			p->url, (unsigned long long)rt->o->down_ms);
}

void route_key_context(struct router *rt, const char *model, const char *salt)
{
	rt->key_root = model && strcmp(model, rt->o->model) ?
			       kvidx_key_root(rt->algo, rt->seed, model) : rt->root;
	rt->key_salt = salt && *salt ? salt : NULL;
}

const uint64_t *route_keys(struct router *rt, const uint32_t *tokens, size_t ntok, size_t *n)
{
	size_t nk = ntok / rt->bs;
	struct kvidx_key_extras ex = { .salt = rt->key_salt };

	if (nk > rt->keys_cap) {
		rt->keys_cap = nk;
		rt->keys = tc_xrealloc(rt->keys, nk * sizeof(*rt->keys));
	}
	*n = kvidx_key_chain_ex(rt->algo, rt->key_root, tokens, ntok, rt->bs,
				rt->key_salt ? &ex : NULL, rt->keys, nk);
	return rt->keys;
}

/* The best of the pods of one role (prefill or decode) not in tried; -1 if none. */
static int best_of(struct router *rt, bool prefill, const double *score, const uint64_t *tried,
		   uint64_t now)
{
	struct opts *o = rt->o;
	int best = -1;
	bool best_up = false;

	for (int k = 0; k < o->npods; k++) {
		int i = (rt->rr + k) % o->npods;
		struct pod *p = &o->pods[i];
		bool up = pod_is_up(p, now);

		if (p->prefill != prefill || (tried && (tried[i / 64] >> (i % 64) & 1)))
			continue;
		/* An up pod beats a down one; among those, the score, then fewer outstanding;
		 * among down pods, the one whose down time ends first. */
		if (best < 0 || (up && !best_up) ||
		    (up == best_up && up &&
		     (score[i] > score[best] ||
		      (score[i] == score[best] &&
		       p->outstanding < o->pods[best].outstanding))) ||
		    (!up && !best_up && p->down_until < o->pods[best].down_until)) {
			best = i;
			best_up = up;
		}
	}
	return best;
}

int route_pick(struct router *rt, const uint32_t *tokens, size_t ntok, uint64_t corr,
	       const uint64_t *tried, struct decision *d, uint64_t now)
{
	struct opts *o = rt->o;
	double score[MAX_PODS] = { 0 };
	uint32_t blocks[MAX_PODS] = { 0 }, spec[MAX_PODS] = { 0 };
	size_t nk;
	int rows, best, pre = -1;

	/* 1. The prompt's block keys, chained from the model's root key with the index's
	 *    algorithm, seed and block size (a trailing partial block has no key). */
	route_keys(rt, tokens, ntok, &nk);

	/* 2. Score the candidates: per pod, the consecutive blocks from block 0 it holds,
	 *    confirmed or predicted. Wait-free. -KVIDX_ERETRY means this reader was expelled
	 *    while stalled and has re-registered: one retry, then route without scores. */
	pods_maybe_refresh(rt, now);
	rows = kvidx_score(rt->r, rt->keys, nk, rt->cand, rt->ncand, &rt->weights, rt->rows,
			   rt->ncand);
	if (rows == -KVIDX_ERETRY) {
		rt->retries++;
		rows = kvidx_score(rt->r, rt->keys, nk, rt->cand, rt->ncand, &rt->weights, rt->rows,
				   rt->ncand);
	}
	if (rows < 0) {
		rt->score_failed++;
		rows = 0;
	}
	for (int k = 0; k < rows; k++)
		for (int i = 0; i < o->npods; i++)
			if (o->pods[i].idx == rt->rows[k].pod) {
				score[i] = rt->rows[k].score;
				blocks[i] = rt->rows[k].blocks;
				spec[i] = rt->rows[k].spec_blocks;
			}

	/* 3. Pick: the best score among the pods that are up; ties go to the pod with the
	 *    fewest requests outstanding, then round robin (the scan starts after the previous
	 *    pick). Under P/D, a prefill pod the same way. */
	best = best_of(rt, false, score, tried, now);
	if (best < 0)
		return -1;
	if (o->nprefill)
		pre = best_of(rt, true, score, NULL, now);
	rt->rr = (best + 1) % o->npods;
	/* The kind is the match of the pod that prefills: the decode pod without P/D. */
	int m = pre >= 0 ? pre : best;
	*d = (struct decision){ .cand = best, .prefill = pre, .blocks = blocks[m],
				.spec_blocks = spec[m], .nkeys = (uint32_t)nk, .score = score[m],
				.pod = -1, .prefill_pod = -1 };
	d->kind = !blocks[m] ? K_NOMATCH : spec[m] ? K_PREDICTED : K_CONFIRMED;

	/* 4. Commit the decision: the writer adds speculative entries for the prompt's blocks on
	 *    the chosen pod(s), trusted for the pod's TTL until its BlockStored event confirms
	 *    them, and starts the route-to-confirmation clock. Wait-free; a full ring drops it. */
	if (o->pods[best].idx >= 0) {
		struct kvidx_route route = {
			.corr_id = corr,
			.pod = o->pods[best].idx,
			.prefill_pod = pre >= 0 ? o->pods[pre].idx : -1,
			.keys = rt->keys,
			.nkeys = nk < KVIDX_MAX_COMMIT_KEYS ? nk : KVIDX_MAX_COMMIT_KEYS,
			.matched_blocks = d->blocks,
			.matched_spec = d->spec_blocks,
		};
		if (kvidx_commit(rt->r, &route) == 0) {
			d->committed = true;
			d->pod = route.pod;
			d->prefill_pod = route.prefill_pod;
		} else {
			rt->commits_dropped++;
		}
	}
	o->pods[best].routed++;
	return 0;
}

uint32_t route_expected(const struct router *rt, const struct decision *d, uint32_t ntok)
{
	uint32_t bs = rt->bs, expected = d->blocks * bs;

	/* A pod never reports a whole prompt as cached (vLLM recomputes its last token). */
	if (ntok && expected > (ntok - 1) / bs * bs)
		expected = (ntok - 1) / bs * bs;
	return expected;
}

void route_report(struct router *rt, const struct decision *d, uint64_t corr, uint32_t cached,
		  uint32_t prompt_tokens)
{
	/* Under P/D the prefill pod is the one whose cache the usage describes. */
	int pod = d->prefill_pod >= 0 ? d->prefill_pod : d->pod;

	if (pod >= 0 && kvidx_report_outcome(rt->r, corr, pod, cached, prompt_tokens) < 0)
		rt->reports_dropped++;
}
