/*
 * pick.c — the routing decision, the part a router embedding lib/kvidx.h needs: the prompt's
 * block keys with the index's scheme, a wait-free score of the candidate pods, the pick, the
 * commit (so that the writer adds speculative entries, docs/DESIGN.md "Speculation and the
 * TTL"), and the outcome report. Also which pods are up: a pod that could not be reached is
 * left out for --down-ms.
 *
 * Decision kinds, from the chosen pod's score row:
 *   predicted  the match on the chosen pod includes speculative blocks (not yet confirmed)
 *   confirmed  the chosen pod matched blocks, all confirmed by BlockStored events
 *   nomatch    the chosen pod matched no block
 *
 * Policy: --policy (policy.c) over each candidate's score row and load, all read from
 * memory; ties go to the pod with the fewest requests outstanding, then round robin. Under
 * P/D (--prefill pods), the prefill pod is the policy's pick among the prefill pods and the
 * decode pod its pick among the decode pods; both are committed in one route.
 *
 * Load: each pod's requests outstanding, its prefill backlog (the uncached tokens this router
 * sent it, drained at the pod's prefill rate, request by request: how many still wait for
 * their prefill) and the prompt tokens of its requests
 * outstanding (route_load_*), plus the other routers' part of the index's shared load view
 * (kvidx_pod_load: every router's commits not yet retired by an outcome), read wait-free.
 */
#include "route.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attach.h"
#include "cli.h"
#include "podsnap.h"
#include "telemetry.h"

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
	rt->pp = (struct pol_params){ .block_size = rt->bs, .prefill_rate = o->prefill_rate,
				      .max_num_seqs = (uint32_t)o->pod_max_num_seqs,
				      .kv_blocks = o->pod_kv_blocks,
				      .balance_slack = o->balance_slack,
				      .balance_margin = o->balance_margin_ms / 1e3 * o->prefill_rate };
	for (int i = 0; i < MAX_PODS; i++)
		rt->confirm[i] = 1.0;
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

/*
 * Every RATES_NS, each pod's confirmation rate from the index's per-pod counters: of its
 * speculative routes decided (confirmed in time, expired first, never confirmed, dropped),
 * the share confirmed in time. Below RATES_MIN decided routes the rate is 1 (the index trusts
 * a prediction for its TTL). Reads memory only.
 */
#define RATES_NS (1 * NS_PER_S)
#define RATES_MIN 16

static void rates_maybe_refresh(struct router *rt, uint64_t now)
{
	struct opts *o = rt->o;
	struct tc_pod *ps = NULL;
	int n;

	if (now < rt->next_rates_ns)
		return;
	rt->next_rates_ns = now + RATES_NS;
	for (int i = 0; i < o->npods; i++)
		rt->confirm[i] = 1.0;
	n = tc_pods_snapshot(rt->r, &ps);
	for (int k = 0; k < n; k++) {
		const uint64_t *c = ps[k].ctr;
		uint64_t ok = c[KV_PC_routes_in_time];
		uint64_t decided = ok + c[KV_PC_routes_early_expiries] +
				   c[KV_PC_routes_stale_expiries] + c[KV_PC_routes_dropped_clear] +
				   c[KV_PC_routes_dropped_removed] + c[KV_PC_routes_dropped_evicted];
		for (int i = 0; i < o->npods; i++)
			if (o->pods[i].idx == ps[k].idx && decided >= RATES_MIN)
				rt->confirm[i] = (double)ok / (double)decided;
	}
	free(ps);
}

/*
 * p's fluid prefill queue: p->backlog is the sum of q_rem[], kept by these two alone.
 * queue_drain takes up to tokens computed off its head, first come, first served, and
 * returns what it took.
 */
static double queue_drain(struct pod *p, double tokens)
{
	double taken = 0;

	while (p->q_len && taken < tokens) {
		double *head = &p->q_rem[p->q_head];
		double take = *head < tokens - taken ? *head : tokens - taken;

		*head -= take;
		taken += take;
		if (*head <= 0) {
			p->q_head = (p->q_head + 1) % POD_QUEUE;
			p->q_len--;
		}
	}
	p->backlog = p->q_len ? p->backlog - taken : 0; /* empty: no rounding left over */
	return taken;
}

/* Queues a request of tokens uncached tokens on p's fluid prefill queue (backlog_at). */
static void queue_push(struct pod *p, double tokens)
{
	if (tokens <= 0)
		return;
	p->backlog += tokens;
	if (p->q_len == POD_QUEUE) { /* the newest entry takes it: a count that undercounts */
		p->q_rem[(p->q_head + p->q_len - 1) % POD_QUEUE] += tokens;
		return;
	}
	p->q_rem[(p->q_head + p->q_len) % POD_QUEUE] = tokens;
	p->q_len++;
}

/*
 * Pod p's prefill backlogs at now: what this router sent it and what the other routers did,
 * drained at --pod-prefill-rate tokens per second of pod time (--pod-time-scale per second
 * of wall time) since the last look. A fluid model of the pod's FCFS prefill queue: it needs
 * no answer to come (a pod that sends its whole answer at the end, as kvidx-fakepod's model
 * does, says nothing at the first token) and errs by the steps' overheads, which it ignores.
 * This router's own work drains first (it is what it knows best).
 */
static double backlog_at(const struct router *rt, struct pod *p, uint64_t now)
{
	if (now > p->backlog_ns) {
		double drained = (double)(now - p->backlog_ns) / 1e9 * rt->o->pod_time_scale *
				 rt->pp.prefill_rate;
		drained -= queue_drain(p, drained);
		p->others_backlog = p->others_backlog > drained ? p->others_backlog - drained : 0;
		p->backlog_ns = now;
	}
	return p->backlog;
}

/*
 * Pod p's work at now: the uncached tokens this router sent it, each weighing half as much
 * every --balance-half-life of pod time (kvidx's balance guard, policy.c).
 */
static double work_at(const struct router *rt, struct pod *p, uint64_t now)
{
	if (now > p->work_ns) {
		double dt = (double)(now - p->work_ns) / 1e9 * rt->o->pod_time_scale;
		p->work *= exp2(-dt / rt->o->balance_half_life);
		p->work_ns = now;
	}
	return p->work;
}

/* Requests of this router that ended less than RETIRE_NS to 2 x RETIRE_NS ago: their outcome
 * may still be in the ring, so the view may still count them. */
#define RETIRE_NS (20 * NS_PER_MS)

static void retire_rotate(struct pod *p, uint64_t now)
{
	uint64_t epoch = now / RETIRE_NS;

	if (epoch == p->ret_epoch)
		return;
	p->ret_reqs[1] = epoch == p->ret_epoch + 1 ? p->ret_reqs[0] : 0;
	p->ret_tokens[1] = epoch == p->ret_epoch + 1 ? p->ret_tokens[0] : 0;
	p->ret_reqs[0] = p->ret_tokens[0] = 0;
	p->ret_epoch = epoch;
}

/* The tokens the index's load view counts for d's request: its formula (docs/LOADVIEW.md). */
static uint64_t view_tokens_of(const struct router *rt, const struct decision *d)
{
	uint64_t cached = (uint64_t)d->blocks * rt->bs;

	return d->ntok > cached ? d->ntok - cached : 0;
}

/*
 * The other routers' share of pod p's load in the index's view (kvidx_pod_load, wait-free):
 * the view less what this router committed there (in flight, or ended lately). Their prefill
 * backlog grows by what their share of the view's tokens grew since the last look and drains
 * as this router's does, never above their share now: the view counts a request until its
 * outcome, long after its prefill, so its level alone would count decodes as queued prefill.
 * Returns the others' requests in flight; *tokens their tokens in the view. 0, 0 without a row.
 */
static uint64_t others_of(const struct router *rt, struct pod *p, uint64_t now, uint64_t *tokens)
{
	struct kvidx_load l;
	uint64_t own_reqs, own_toks, toks, reqs;

	*tokens = 0;
	if (p->idx < 0 || kvidx_pod_load(rt->r, p->idx, &l) < 0)
		return 0;
	retire_rotate(p, now);
	own_reqs = p->view_reqs + p->ret_reqs[0] + p->ret_reqs[1];
	own_toks = p->view_tokens + p->ret_tokens[0] + p->ret_tokens[1];
	reqs = l.inflight > own_reqs ? l.inflight - own_reqs : 0;
	toks = l.prefill_tokens > own_toks ? l.prefill_tokens - own_toks : 0;
	backlog_at(rt, p, now);
	if (toks > p->others_seen)
		p->others_backlog += (double)(toks - p->others_seen);
	if (p->others_backlog > (double)toks)
		p->others_backlog = (double)toks;
	p->others_seen = toks;
	*tokens = toks;
	return reqs;
}

/* The other routers' requests still queued on p: their backlog over their mean uncached
 * tokens a request (toks / reqs in flight), rounded up. */
static uint32_t others_queued(const struct pod *p, uint64_t toks, uint64_t reqs)
{
	double each, n;

	if (p->others_backlog <= 0 || !reqs || !toks)
		return 0;
	each = (double)toks / (double)reqs;
	n = ceil(p->others_backlog / each);
	return n < (double)reqs ? (uint32_t)n : (uint32_t)(reqs < UINT32_MAX ? reqs : UINT32_MAX);
}

/*
 * Pod i's load as the policies see it: this router's own (requests outstanding, prefill
 * backlog, prompt tokens in flight) plus the other routers' from the index's load view
 * (others_of(): their requests in flight, their prefill backlog, and their uncached tokens
 * in flight standing in for their prompt tokens, which the view does not carry).
 */
static void load_of(const struct router *rt, int i, struct pol_pod *pp, uint64_t now)
{
	struct pod *p = &rt->o->pods[i];
	uint64_t toks, reqs = others_of(rt, p, now, &toks);

	pp->inflight = p->outstanding + (uint32_t)(reqs < UINT32_MAX ? reqs : UINT32_MAX);
	pp->prefill_tokens = (uint64_t)(backlog_at(rt, p, now) + p->others_backlog + 0.5);
	pp->queued = p->q_len + others_queued(p, toks, reqs);
	pp->active_tokens = p->active_tokens + toks;
	pp->work = work_at(rt, p, now);
}

/*
 * The pick among the pods of one role (prefill or decode) not in tried: the policy's among
 * those that are up; if none is, the down pod whose down time ends first. -1 if none.
 */
static int best_of(struct router *rt, bool prefill, struct pol_pod *pp, const struct pol_req *req,
		   const uint64_t *tried, uint64_t now, double *cost)
{
	struct opts *o = rt->o;
	int best, down = -1;

	for (int i = 0; i < o->npods; i++) {
		struct pod *p = &o->pods[i];
		bool mine = p->prefill == prefill && !(tried && (tried[i / 64] >> (i % 64) & 1));

		pp[i].eligible = mine && pod_is_up(p, now);
		if (mine && !pp[i].eligible && (down < 0 || p->down_until < o->pods[down].down_until))
			down = i;
	}
	best = policy_pick(o->policy, &rt->pp, req, pp, o->npods, rt->rr, cost);
	if (best < 0 && down >= 0) {
		*cost = 0;
		best = down;
	}
	return best;
}

/* Each candidate's score row and load into pp[] (by opts.pods index). */
static void fill_candidates(struct router *rt, int rows, struct pol_pod *pp, uint64_t now)
{
	struct opts *o = rt->o;

	for (int i = 0; i < o->npods; i++) {
		pp[i] = (struct pol_pod){ .confirm_rate = rt->confirm[i] };
		load_of(rt, i, &pp[i], now);
	}
	for (int k = 0; k < rows; k++)
		for (int i = 0; i < o->npods; i++)
			if (o->pods[i].idx == rt->rows[k].pod) {
				const struct kvidx_score *s = &rt->rows[k];
				pp[i].score = s->score;
				pp[i].blocks = s->blocks;
				pp[i].spec_blocks = s->spec_blocks;
				pp[i].gpu_run = s->run[0];
				pp[i].cpu_run = s->run[1];
				pp[i].disk_run = s->run[2];
			}
}

int route_pick(struct router *rt, const uint32_t *tokens, size_t ntok, uint64_t corr,
	       const uint64_t *tried, struct decision *d, uint64_t now)
{
	struct opts *o = rt->o;
	struct pol_pod pp[MAX_PODS];
	size_t nk;
	int rows, best, pre = -1;
	double cost = 0, pre_cost = 0;

	/* 1. The prompt's block keys, chained from the model's root key with the index's
	 *    algorithm, seed and block size (a trailing partial block has no key). */
	route_keys(rt, tokens, ntok, &nk);

	/* 2. Score the candidates: per pod, the consecutive blocks from block 0 it holds,
	 *    confirmed or predicted. Wait-free. -KVIDX_ERETRY means this reader was expelled
	 *    while stalled and has re-registered: one retry, then route without scores. */
	pods_maybe_refresh(rt, now);
	rates_maybe_refresh(rt, now);
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
	fill_candidates(rt, rows, pp, now);

	/* 3. Pick by --policy among the pods that are up (policy.c): the lowest cost; ties go
	 *    to the pod with the fewest requests outstanding, then round robin (the scan
	 *    starts after the previous pick). Under P/D, a prefill pod the same way. */
	struct pol_req req = { .prompt_tokens = (uint32_t)ntok, .nkeys = (uint32_t)nk };
	best = best_of(rt, false, pp, &req, tried, now, &cost);
	if (best < 0)
		return -1;
	if (o->nprefill)
		pre = best_of(rt, true, pp, &req, NULL, now, &pre_cost);
	rt->rr = (best + 1) % o->npods;
	/* The kind is the match of the pod that prefills: the decode pod without P/D. */
	int m = pre >= 0 ? pre : best;
	*d = (struct decision){ .cand = best, .prefill = pre, .blocks = pp[m].blocks,
				.spec_blocks = pp[m].spec_blocks, .nkeys = (uint32_t)nk,
				.score = pp[m].score, .cost = pre >= 0 ? pre_cost : cost,
				.ntok = (uint32_t)ntok, .pod = -1, .prefill_pod = -1 };
	d->kind = !d->blocks ? K_NOMATCH : d->spec_blocks ? K_PREDICTED : K_CONFIRMED;
	d->uncached = (uint32_t)ntok - route_expected(rt, d, (uint32_t)ntok);

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
			.prompt_tokens = (uint32_t)ntok,
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

/* The pod whose prefill d's request waits for: its prefill pod under P/D. */
static struct pod *prefill_pod_of(struct router *rt, const struct decision *d)
{
	return &rt->o->pods[d->prefill >= 0 ? d->prefill : d->cand];
}

void route_load_start(struct router *rt, struct decision *d)
{
	struct pod *p = &rt->o->pods[d->cand], *pre = prefill_pod_of(rt, d);

	if (d->held)
		return;
	d->held = true;
	p->outstanding++;
	p->active_tokens += d->ntok;
	pre->pending_prefill += d->uncached;
	backlog_at(rt, pre, kvidx_now_ns());
	queue_push(pre, d->uncached);
	pre->work = work_at(rt, pre, kvidx_now_ns()) + d->uncached;
	if (d->committed) { /* the view counts it on the pod its outcome is for */
		pre->view_reqs++;
		pre->view_tokens += view_tokens_of(rt, d);
	}
}

void route_load_end(struct router *rt, struct decision *d)
{
	struct pod *p = &rt->o->pods[d->cand], *pre = prefill_pod_of(rt, d);

	if (!d->held)
		return;
	d->held = false;
	if (p->outstanding)
		p->outstanding--;
	p->active_tokens -= d->ntok <= p->active_tokens ? d->ntok : p->active_tokens;
	pre->pending_prefill -= d->uncached <= pre->pending_prefill ? d->uncached
								    : pre->pending_prefill;
	if (d->committed) {
		uint64_t vt = view_tokens_of(rt, d);
		retire_rotate(pre, kvidx_now_ns());
		pre->view_reqs -= pre->view_reqs ? 1 : 0;
		pre->view_tokens -= vt < pre->view_tokens ? vt : pre->view_tokens;
		pre->ret_reqs[0]++;
		pre->ret_tokens[0] += vt;
	}
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
