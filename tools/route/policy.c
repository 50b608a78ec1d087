/*
 * policy.c — the routing policies of kvidx-route (--policy): a cost per candidate pod from
 * its prefix match and load, and the pick (lowest cost, ties by fewer in flight, then scan
 * order). Pure functions; the formulas' upstream sources are in tools/route/README.md.
 */
#include "policy.h"

#include <math.h>
#include <string.h>

const char *const policy_name[P_COUNT] = { "kvidx", "prefix", "round-robin", "least-loaded",
					   "llm-d", "dynamo" };

/*
 * llm-d's precise prefix-cache profile (llm-d-inference-scheduler,
 * deploy/config/epp-precise-prefix-cache-config.yaml): precise-prefix-cache-scorer weight 2,
 * kv-cache-utilization-scorer 1, queue-scorer 1, max-score-picker.
 */
#define LLMD_W_PREFIX 2.0
#define LLMD_W_KVUTIL 1.0
#define LLMD_W_QUEUE 1.0

/*
 * Dynamo's KvRouterConfig defaults (ai-dynamo/dynamo lib/kv-router/src/scheduling/config.rs):
 * overlap_score_credit 1.0, prefill_load_scale 1.0, host_cache_hit_weight 0.75,
 * disk_cache_hit_weight 0.25, router_temperature 0 (argmin).
 */
#define DYN_OVERLAP_CREDIT 1.0
#define DYN_PREFILL_LOAD_SCALE 1.0
#define DYN_HOST_WEIGHT 0.75
#define DYN_DISK_WEIGHT 0.25

int policy_parse(const char *s, enum policy *out)
{
	for (int p = 0; p < P_COUNT; p++)
		if (!strcmp(s, policy_name[p])) {
			*out = (enum policy)p;
			return 0;
		}
	return -1;
}

double policy_expected_cached(const struct pol_params *pp, const struct pol_req *req,
			      const struct pol_pod *pod, bool discount_spec)
{
	double bs = pp->block_size, cap, cached;
	uint32_t spec = pod->spec_blocks < pod->blocks ? pod->spec_blocks : pod->blocks;
	double rate = pod->confirm_rate < 0 ? 0 : pod->confirm_rate > 1 ? 1 : pod->confirm_rate;

	if (!req->prompt_tokens)
		return 0;
	cap = (double)((req->prompt_tokens - 1) / pp->block_size) * bs;
	cached = discount_spec ? bs * ((double)(pod->blocks - spec) + (double)spec * rate)
			       : bs * (double)pod->blocks;
	return cached < cap ? cached : cap;
}

/* llm-d's queue-scorer: (max - waiting) / (max - min) over the candidates, 1 if all equal.
 * Waiting is vLLM's num_requests_waiting: here the requests in flight beyond the running
 * set's bound. */
static uint32_t waiting_of(const struct pol_params *pp, const struct pol_pod *p)
{
	return p->inflight > pp->max_num_seqs ? p->inflight - pp->max_num_seqs : 0;
}

static double llmd_queue(const struct pol_params *pp, const struct pol_pod *pods, int n, int i)
{
	uint32_t lo = UINT32_MAX, hi = 0;

	for (int k = 0; k < n; k++) {
		if (!pods[k].eligible && k != i)
			continue;
		uint32_t w = waiting_of(pp, &pods[k]);
		lo = w < lo ? w : lo;
		hi = w > hi ? w : hi;
	}
	if (hi == lo)
		return 1.0;
	return (double)(hi - waiting_of(pp, &pods[i])) / (double)(hi - lo);
}

/* llm-d: 2 x prefix + 1 x (1 - KV usage) + 1 x queue, to maximise. The prefix scorer is the
 * matched score over the prompt's blocks, clipped to 1 (its absoluteScoredPods); KV usage,
 * vLLM's kv_cache_usage_perc, is the blocks of the requests in flight over the cache. */
static double llmd_score(const struct pol_params *pp, const struct pol_req *req,
			 const struct pol_pod *pods, int n, int i)
{
	const struct pol_pod *p = &pods[i];
	double prefix = req->nkeys ? p->score / req->nkeys : 0, usage = 0;

	prefix = prefix > 1 ? 1 : prefix < 0 ? 0 : prefix;
	if (pp->kv_blocks) {
		usage = (double)p->active_tokens / pp->block_size / (double)pp->kv_blocks;
		usage = usage > 1 ? 1 : usage;
	}
	return LLMD_W_PREFIX * prefix + LLMD_W_KVUTIL * (1 - usage) +
	       LLMD_W_QUEUE * llmd_queue(pp, pods, n, i);
}

/* Dynamo: prefill_load_scale x max(raw_prefill_blocks - overlap_credit_blocks, 0) +
 * decode_blocks. raw prefill: the pod's active prefill tokens plus the whole prompt, in
 * blocks; credit: device overlap x 1.0 + host-only extension x 0.75 + disk-only x 0.25;
 * decode blocks: the blocks of its requests in flight plus this prompt's. */
static double dynamo_cost(const struct pol_params *pp, const struct pol_req *req,
			  const struct pol_pod *p)
{
	double bs = pp->block_size;
	double raw = ((double)p->prefill_tokens + req->prompt_tokens) / bs;
	uint32_t host = p->cpu_run > p->gpu_run ? p->cpu_run - p->gpu_run : 0;
	uint32_t below = p->gpu_run > p->cpu_run ? p->gpu_run : p->cpu_run;
	uint32_t disk = p->disk_run > below ? p->disk_run - below : 0;
	uint32_t lower = host + disk < p->blocks ? host + disk : p->blocks;
	double device = (double)(p->blocks - lower); /* speculative blocks count as device */
	double credit = DYN_OVERLAP_CREDIT * device + DYN_HOST_WEIGHT * host +
			DYN_DISK_WEIGHT * disk;
	double prefill = raw - credit > 0 ? raw - credit : 0;
	double decode = ((double)p->active_tokens + req->prompt_tokens) / bs;

	return DYN_PREFILL_LOAD_SCALE * prefill + decode;
}

double policy_cost(enum policy p, const struct pol_params *pp, const struct pol_req *req,
		   const struct pol_pod *pods, int n, int i)
{
	const struct pol_pod *pod = &pods[i];

	switch (p) {
	case P_KVIDX: {
		/* The TTFT this request adds to the fleet: its own (the prefill queued ahead plus
		 * its uncached part) and what its prefill delays each request still queued there,
		 * since vLLM batches every waiting prefill into the next step and a request's
		 * first token comes at the end of the step its prefill completes in. */
		double uncached = req->prompt_tokens - policy_expected_cached(pp, req, pod, true);
		double rate = pp->prefill_rate > 0 ? pp->prefill_rate : 1;
		return ((double)pod->prefill_tokens + uncached * (1.0 + pod->queued)) / rate;
	}
	case P_PREFIX: return -pod->score;
	case P_RR: return 0;
	case P_LEAST: return (double)pod->inflight;
	case P_LLMD: return -llmd_score(pp, req, pods, n, i);
	case P_DYNAMO: return dynamo_cost(pp, req, pod);
	default: return 0;
	}
}

/* A pod with nothing in flight and nothing queued: it serves now, whatever it did lately. */
static bool idle(const struct pol_pod *p)
{
	return !p->inflight && !p->prefill_tokens;
}

/*
 * kvidx's balance guard: the work above which a busy pod is passed over, (1 + balance_slack)
 * x the eligible pods' mean work + balance_margin; HUGE_VAL (no guard) without a slack, with
 * fewer than two eligible pods, or when it would pass over every eligible pod.
 */
static double balance_limit(const struct pol_params *pp, const struct pol_pod *pods, int n)
{
	double sum = 0, lim;
	int m = 0;

	if (pp->balance_slack <= 0)
		return HUGE_VAL;
	for (int k = 0; k < n; k++)
		if (pods[k].eligible) {
			sum += pods[k].work;
			m++;
		}
	if (m < 2)
		return HUGE_VAL;
	lim = (1 + pp->balance_slack) * sum / m + pp->balance_margin;
	for (int k = 0; k < n; k++)
		if (pods[k].eligible && (pods[k].work <= lim || idle(&pods[k])))
			return lim;
	return HUGE_VAL;
}

bool policy_over_balance(const struct pol_params *pp, const struct pol_pod *pods, int n, int i)
{
	return !idle(&pods[i]) && pods[i].work > balance_limit(pp, pods, n);
}

int policy_pick(enum policy p, const struct pol_params *pp, const struct pol_req *req,
		const struct pol_pod *pods, int n, int start, double *cost)
{
	int best = -1;
	double best_cost = 0;
	double lim;

	if (n <= 0)
		return -1;
	start = start < 0 || start >= n ? 0 : start;
	lim = p == P_KVIDX ? balance_limit(pp, pods, n) : HUGE_VAL;
	for (int k = 0; k < n; k++) {
		int i = (start + k) % n;
		if (!pods[i].eligible || (pods[i].work > lim && !idle(&pods[i])))
			continue;
		if (p == P_RR) { /* the first eligible pod after the previous pick */
			best = i;
			break;
		}
		double c = policy_cost(p, pp, req, pods, n, i);
		if (best < 0 || c < best_cost ||
		    (c == best_cost && pods[i].inflight < pods[best].inflight)) {
			best = i;
			best_cost = c;
		}
	}
	if (cost)
		*cost = best >= 0 && p != P_RR ? best_cost : 0;
	return best;
}
