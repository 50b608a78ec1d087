/*
 * policy.h — kvidx-route's routing policies (--policy) as pure functions of a constructed
 * state: per candidate pod its prefix match (from kvidx_score) and its load; no I/O, no
 * clock, no index handle. pick.c fills the state from memory (the score rows, the load view)
 * and calls policy_pick(); the tests build states by hand and check each policy's pick.
 * tools/route/README.md documents each policy and the upstream source of its formula.
 */
#ifndef KVIDX_ROUTE_POLICY_H
#define KVIDX_ROUTE_POLICY_H

#include <stdbool.h>
#include <stdint.h>

enum policy { P_KVIDX, P_PREFIX, P_RR, P_LEAST, P_LLMD, P_DYNAMO, P_COUNT };
extern const char *const policy_name[P_COUNT];

/* The policy named s (as policy_name[]), 0; -1 if none is. */
int policy_parse(const char *s, enum policy *out);

/* One candidate pod, as a policy sees it. */
struct pol_pod {
	bool eligible;            /* may be picked (up, of the role, not tried yet) */
	/* the prefix match, kvidx_score's row */
	uint32_t blocks;          /* consecutive blocks from block 0, confirmed or speculative */
	uint32_t spec_blocks;     /* of those, held only speculatively */
	uint32_t gpu_run, cpu_run, disk_run; /* confirmed runs from block 0 per tier */
	double score;             /* the row's tier- and speculation-weighted score */
	double confirm_rate;      /* share of this pod's speculative routes confirmed in time */
	/* the load */
	uint32_t inflight;        /* requests in flight */
	uint64_t prefill_tokens;  /* uncached prompt tokens routed to it, not yet computed */
	uint32_t queued;          /* requests among them whose prefill is not done yet */
	uint64_t active_tokens;   /* prompt tokens of its requests in flight (their KV blocks) */
	double work;              /* uncached tokens routed to it lately (decayed; kvidx's guard) */
};

/* What a policy knows of the pods' model (the same for every pod). */
struct pol_params {
	uint32_t block_size;      /* the index's block size in tokens */
	double prefill_rate;      /* prompt tokens one pod prefills per second */
	uint32_t max_num_seqs;    /* a pod's running-set bound (vLLM --max-num-seqs) */
	uint64_t kv_blocks;       /* a pod's KV cache in blocks of block_size tokens */
	double balance_slack;     /* kvidx: a busy pod whose work exceeds the eligible pods'
				   * mean by more than this share of it and balance_margin tokens
				   * is passed over (0: no guard) */
	double balance_margin;
};

/* The request being routed. */
struct pol_req {
	uint32_t prompt_tokens;
	uint32_t nkeys;           /* its full blocks (keys scored) */
};

/*
 * The tokens of req a pod would find cached, by the match and (kvidx policy) speculative
 * blocks discounted by the pod's confirmation rate; never the whole prompt (a pod recomputes
 * the last token), as route_expected().
 */
double policy_expected_cached(const struct pol_params *pp, const struct pol_req *req,
			      const struct pol_pod *pod, bool discount_spec);

/*
 * The cost of pod i under policy p, lower is better (a score-maximising policy returns its
 * score negated). pods[0..n) are the candidates: llm-d's queue scorer normalises over the
 * eligible ones. kvidx: the TTFT in seconds the request adds, its own and the delay to the
 * prefills queued on the pod.
 */
double policy_cost(enum policy p, const struct pol_params *pp, const struct pol_req *req,
		   const struct pol_pod *pods, int n, int i);

/*
 * The pick among the eligible pods of pods[0..n): the lowest cost; ties go to the pod with
 * fewer requests in flight, then to the first in scan order, which starts at pod start and
 * wraps (round-robin: the first eligible pod in that order). Its cost in *cost (may be NULL).
 * kvidx passes over the busy pods (requests in flight or prefill queued) whose work exceeds
 * (1 + balance_slack) x the eligible pods' mean work + balance_margin, unless that leaves
 * none (policy_over_balance()): a cache hit wins the request, not every request, so a hot
 * prefix is computed again on other pods.
 * Returns the pod's index, or -1 if none is eligible. Deterministic.
 */
/* Whether kvidx's balance guard passes pod i over (pods[0..n), the eligible ones' mean). */
bool policy_over_balance(const struct pol_params *pp, const struct pol_pod *pods, int n, int i);

int policy_pick(enum policy p, const struct pol_params *pp, const struct pol_req *req,
		const struct pol_pod *pods, int n, int start, double *cost);

#endif /* KVIDX_ROUTE_POLICY_H */
