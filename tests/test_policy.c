/*
 * test_policy.c — kvidx-route's routing policies (tools/route/policy.c) on constructed
 * states: each policy's pick, its cost where the formula gives an exact number, the ties;
 * and kvidx-route refusing a policy it does not know.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "policy.h"
#include "util_run.h"

#define BS 16

static const struct pol_params pp = { .block_size = BS, .prefill_rate = 1000,
				      .max_num_seqs = 4, .kv_blocks = 100 };

/* n idle, eligible pods without a match. */
static void pods_init(struct pol_pod *p, int n)
{
	for (int i = 0; i < n; i++)
		p[i] = (struct pol_pod){ .eligible = true, .confirm_rate = 1.0 };
}

/* A confirmed GPU match of b blocks (score b, the default weights). */
static void match(struct pol_pod *p, uint32_t b)
{
	p->blocks = p->gpu_run = b;
	p->score = b;
}

Test(policy, names_parse_back)
{
	enum policy p;

	for (int i = 0; i < P_COUNT; i++) {
		cr_assert_eq(policy_parse(policy_name[i], &p), 0);
		cr_assert_eq(p, (enum policy)i);
	}
	cr_assert_eq(policy_parse("llmd", &p), -1);
	cr_assert_eq(policy_parse("", &p), -1);
}

Test(policy, prefix_best_score_then_fewer_in_flight_then_scan_order)
{
	struct pol_pod p[4];
	struct pol_req rq = { .prompt_tokens = 10 * BS, .nkeys = 10 };

	pods_init(p, 4);
	match(&p[2], 6);
	match(&p[3], 4);
	p[2].inflight = 50; /* prefix ignores load beyond ties */
	cr_assert_eq(policy_pick(P_PREFIX, &pp, &rq, p, 4, 0, NULL), 2);
	match(&p[1], 6);
	p[1].inflight = 3;
	cr_assert_eq(policy_pick(P_PREFIX, &pp, &rq, p, 4, 0, NULL), 1, "tie: fewer in flight");
	p[1].inflight = 50;
	cr_assert_eq(policy_pick(P_PREFIX, &pp, &rq, p, 4, 0, NULL), 1, "full tie: scan order");
	cr_assert_eq(policy_pick(P_PREFIX, &pp, &rq, p, 4, 2, NULL), 2, "scan from the cursor");
	p[1].eligible = p[2].eligible = false;
	cr_assert_eq(policy_pick(P_PREFIX, &pp, &rq, p, 4, 0, NULL), 3, "only eligible pods");
}

Test(policy, round_robin_takes_the_next_eligible_pod)
{
	struct pol_pod p[3];
	struct pol_req rq = { .prompt_tokens = 100, .nkeys = 6 };

	pods_init(p, 3);
	match(&p[0], 6); /* neither match nor load matters */
	p[1].inflight = 9;
	cr_assert_eq(policy_pick(P_RR, &pp, &rq, p, 3, 1, NULL), 1);
	cr_assert_eq(policy_pick(P_RR, &pp, &rq, p, 3, 2, NULL), 2);
	p[2].eligible = false;
	cr_assert_eq(policy_pick(P_RR, &pp, &rq, p, 3, 2, NULL), 0, "wraps past an ineligible one");
	p[0].eligible = p[1].eligible = false;
	cr_assert_eq(policy_pick(P_RR, &pp, &rq, p, 3, 0, NULL), -1, "none eligible");
}

Test(policy, least_loaded_fewest_in_flight)
{
	struct pol_pod p[3];
	struct pol_req rq = { .prompt_tokens = 100, .nkeys = 6 };
	double c;

	pods_init(p, 3);
	p[0].inflight = 3;
	p[1].inflight = 1;
	p[2].inflight = 2;
	match(&p[0], 6);
	cr_assert_eq(policy_pick(P_LEAST, &pp, &rq, p, 3, 0, &c), 1);
	cr_assert_float_eq(c, 1.0, 1e-12);
}

Test(policy, kvidx_expected_ttft_trades_cache_for_queue)
{
	struct pol_pod p[2];
	struct pol_req rq = { .prompt_tokens = 100 * BS, .nkeys = 100 }; /* 1600 tokens */
	double c;

	pods_init(p, 2);
	match(&p[0], 90); /* 1440 cached: 160 to compute */
	/* Queue of 1000 tokens on the warm pod: (1000 + 160) / 1000 = 1.16 s < 1.6 s cold. */
	p[0].prefill_tokens = 1000;
	cr_assert_eq(policy_pick(P_KVIDX, &pp, &rq, p, 2, 1, &c), 0);
	cr_assert_float_eq(c, 1.16, 1e-9);
	/* Queue of 1500: 1.66 s > 1.6 s on the idle cold pod: the hot spot spills over. */
	p[0].prefill_tokens = 1500;
	cr_assert_eq(policy_pick(P_KVIDX, &pp, &rq, p, 2, 0, &c), 1);
	cr_assert_float_eq(c, 1.6, 1e-9);
	/* prefix still piles onto the warm pod. */
	cr_assert_eq(policy_pick(P_PREFIX, &pp, &rq, p, 2, 1, NULL), 0);
}

Test(policy, kvidx_weighs_the_delay_to_prefills_queued_on_the_pod)
{
	struct pol_pod p[3];
	struct pol_req rq = { .prompt_tokens = 100 * BS, .nkeys = 100 }; /* 1600 tokens */
	double c;

	pods_init(p, 3);
	match(&p[0], 90); /* warm: 160 to compute */
	match(&p[1], 90);
	/* The same 500 tokens queued, as 4 requests on pod 0 and as 1 on pod 1: this prompt's
	 * 160 tokens delay each of them (they share its step): (500 + 160 x 5) / 1000 = 1.3 s
	 * against (500 + 160 x 2) / 1000 = 0.82 s. */
	p[0].prefill_tokens = p[1].prefill_tokens = 500;
	p[0].queued = 4;
	p[1].queued = 1;
	cr_assert_eq(policy_pick(P_KVIDX, &pp, &rq, p, 3, 0, &c), 1);
	cr_assert_float_eq(c, 0.82, 1e-9);
	cr_assert_float_eq(policy_cost(P_KVIDX, &pp, &rq, p, 3, 0), 1.3, 1e-9);
	/* Ten requests queued on each warm pod: (500 + 160 x 11) / 1000 = 2.26 s, more than
	 * computing the whole prompt on the idle cold pod (1.6 s): the prefix spreads before
	 * the queue's own wait alone would say so. */
	p[0].queued = p[1].queued = 10;
	cr_assert_eq(policy_pick(P_KVIDX, &pp, &rq, p, 3, 0, &c), 2);
	cr_assert_float_eq(c, 1.6, 1e-9);
	/* A whole-prompt match computes its last block only, and delays the ten by that. */
	match(&p[0], 100);
	p[0].prefill_tokens = 0;
	cr_assert_float_eq(policy_cost(P_KVIDX, &pp, &rq, p, 3, 0), BS / 1000.0 * 11, 1e-9);
}

Test(policy, kvidx_whole_prompt_match_still_computes_its_last_token)
{
	struct pol_pod p[1];
	struct pol_req rq = { .prompt_tokens = 4 * BS, .nkeys = 4 };

	pods_init(p, 1);
	match(&p[0], 4);
	cr_assert_float_eq(policy_expected_cached(&pp, &rq, &p[0], true), 3.0 * BS, 1e-12);
	cr_assert_float_eq(policy_cost(P_KVIDX, &pp, &rq, p, 1, 0), BS / 1000.0, 1e-12);
}

Test(policy, kvidx_discounts_speculative_blocks_by_their_confirmation_rate)
{
	struct pol_pod p[2];
	struct pol_req rq = { .prompt_tokens = 41 * BS, .nkeys = 41 };

	pods_init(p, 2);
	/* Pod 0: 40 blocks, 30 of them speculative on a pod that confirms 10 % in time;
	 * pod 1: 20 blocks, all confirmed. */
	p[0].blocks = 40;
	p[0].spec_blocks = 30;
	p[0].gpu_run = 10;
	p[0].score = 40;
	p[0].confirm_rate = 0.1;
	match(&p[1], 20);
	cr_assert_float_eq(policy_expected_cached(&pp, &rq, &p[0], true), 13.0 * BS, 1e-9);
	cr_assert_eq(policy_pick(P_KVIDX, &pp, &rq, p, 2, 0, NULL), 1);
	/* Trusted (rate 1): the longer match wins, as it does for prefix. */
	p[0].confirm_rate = 1.0;
	cr_assert_eq(policy_pick(P_KVIDX, &pp, &rq, p, 2, 1, NULL), 0);
	p[0].confirm_rate = 0.1;
	cr_assert_eq(policy_pick(P_PREFIX, &pp, &rq, p, 2, 1, NULL), 0);
}

Test(policy, kvidx_ties_go_to_fewer_in_flight)
{
	struct pol_pod p[3];
	struct pol_req rq = { .prompt_tokens = 10 * BS, .nkeys = 10 };

	pods_init(p, 3);
	p[0].inflight = 5;
	p[1].inflight = 2;
	p[2].inflight = 7;
	cr_assert_eq(policy_pick(P_KVIDX, &pp, &rq, p, 3, 0, NULL), 1);
}

Test(policy, llmd_weighted_scorers)
{
	struct pol_pod p[3];
	struct pol_req rq = { .prompt_tokens = 10 * BS, .nkeys = 10 };
	double c;

	pods_init(p, 3);
	/* Pod 0: half the prompt cached, 60 of 100 KV blocks in use (960 tokens), 2 waiting
	 * (6 in flight, 4 run): 2 x 0.5 + 0.4 + 0 = 1.4.
	 * Pod 1: nothing cached, idle: 0 + 1 + 1 = 2.0. Pod 2: all 10 blocks, 20 blocks in use,
	 * 1 waiting: 2 x 1 + 0.8 + 0.5 = 3.3. */
	match(&p[0], 5);
	p[0].active_tokens = 60 * BS;
	p[0].inflight = 6;
	match(&p[2], 10);
	p[2].active_tokens = 20 * BS;
	p[2].inflight = 5;
	cr_assert_float_eq(policy_cost(P_LLMD, &pp, &rq, p, 3, 0), -1.4, 1e-9);
	cr_assert_float_eq(policy_cost(P_LLMD, &pp, &rq, p, 3, 1), -2.0, 1e-9);
	cr_assert_eq(policy_pick(P_LLMD, &pp, &rq, p, 3, 0, &c), 2);
	cr_assert_float_eq(c, -3.3, 1e-9);
	/* Its KV cache full and 3 waiting: 2 + 0 + 0 = 2.0 ties the idle pod, which has
	 * fewer in flight. */
	p[2].active_tokens = 100 * BS;
	p[2].inflight = 7;
	p[0].inflight = 0;
	p[0].active_tokens = 0;
	p[0].blocks = p[0].gpu_run = 0;
	p[0].score = 0;
	cr_assert_float_eq(policy_cost(P_LLMD, &pp, &rq, p, 3, 2), -2.0, 1e-9);
	cr_assert_eq(policy_pick(P_LLMD, &pp, &rq, p, 3, 2, NULL), 0);
}

Test(policy, llmd_queue_scorer_is_one_when_all_wait_alike)
{
	struct pol_pod p[2];
	struct pol_req rq = { .prompt_tokens = 10 * BS, .nkeys = 10 };

	pods_init(p, 2);
	p[0].inflight = p[1].inflight = 9;
	cr_assert_float_eq(policy_cost(P_LLMD, &pp, &rq, p, 2, 0), -2.0, 1e-9);
}

Test(policy, dynamo_cost_and_argmin)
{
	struct pol_pod p[2];
	struct pol_req rq = { .prompt_tokens = 10 * BS, .nkeys = 10 };
	double c;

	pods_init(p, 2);
	/* Pod 0: 8 of 10 blocks cached, 64 tokens of prefill queued (4 blocks), 30 blocks
	 * decoding: max(4 + 10 - 8, 0) + 30 + 10 = 46. Pod 1: cold, idle: 10 + 10 = 20. */
	match(&p[0], 8);
	p[0].prefill_tokens = 4 * BS;
	p[0].active_tokens = 30 * BS;
	cr_assert_float_eq(policy_cost(P_DYNAMO, &pp, &rq, p, 2, 0), 46.0, 1e-9);
	cr_assert_eq(policy_pick(P_DYNAMO, &pp, &rq, p, 2, 0, &c), 1);
	cr_assert_float_eq(c, 20.0, 1e-9);
	/* Its decode load gone: 6 + 10 = 16 < 20. */
	p[0].active_tokens = 0;
	cr_assert_eq(policy_pick(P_DYNAMO, &pp, &rq, p, 2, 1, &c), 0);
	cr_assert_float_eq(c, 16.0, 1e-9);
}

Test(policy, dynamo_tier_credits)
{
	struct pol_pod p[1];
	struct pol_req rq = { .prompt_tokens = 10 * BS, .nkeys = 10 };

	pods_init(p, 1);
	/* 8 blocks matched: 2 on the GPU, 6 more on the CPU only: credit 2 + 0.75 x 6 = 6.5,
	 * so 10 - 6.5 + 10 = 13.5. */
	p[0].blocks = 8;
	p[0].gpu_run = 2;
	p[0].cpu_run = 8;
	p[0].score = 2 + 0.8 * 6;
	cr_assert_float_eq(policy_cost(P_DYNAMO, &pp, &rq, p, 1, 0), 13.5, 1e-9);
	/* 2 more on disk beyond: credit 6.5 + 0.25 x 2 = 7 of a 10-block match. */
	p[0].blocks = 10;
	p[0].disk_run = 10;
	cr_assert_float_eq(policy_cost(P_DYNAMO, &pp, &rq, p, 1, 0), 13.0, 1e-9);
}

Test(policy, hot_spot_spreads_under_kvidx_and_not_under_prefix)
{
	/* One shared 8-block prefix, 2 fresh blocks each: route 40 requests in a row, none
	 * answered, each adding its uncached tokens to its pod's queue and the prefix to the
	 * pod's match once it has been sent there. */
	enum policy pols[2] = { P_KVIDX, P_PREFIX };
	int used[2] = { 0, 0 };

	for (int k = 0; k < 2; k++) {
		struct pol_pod p[4];
		struct pol_req rq = { .prompt_tokens = 10 * BS, .nkeys = 10 };
		int rr = 0, count[4] = { 0 };

		pods_init(p, 4);
		match(&p[0], 8);
		for (int n = 0; n < 40; n++) {
			int i = policy_pick(pols[k], &pp, &rq, p, 4, rr, NULL);
			cr_assert_geq(i, 0);
			p[i].prefill_tokens +=
				rq.prompt_tokens - (uint64_t)policy_expected_cached(&pp, &rq, &p[i], true);
			p[i].inflight++;
			if (!p[i].blocks)
				match(&p[i], 8);
			count[i]++;
			rr = (i + 1) % 4;
		}
		for (int i = 0; i < 4; i++)
			used[k] += count[i] > 0;
	}
	cr_assert_eq(used[0], 4, "kvidx spreads the hot prefix");
	cr_assert_eq(used[1], 1, "prefix keeps it on one pod");
}

Test(policy, kvidx_balance_guard_passes_over_an_overworked_pod)
{
	struct pol_params g = pp;
	struct pol_pod p[4];
	struct pol_req rq = { .prompt_tokens = 10 * BS, .nkeys = 10 };

	g.balance_slack = 0.3;
	pods_init(p, 4);
	match(&p[0], 8);
	for (int i = 0; i < 4; i++)
		p[i].inflight = 1; /* busy: the guard weighs them */
	p[0].work = 4000;
	p[1].work = p[2].work = p[3].work = 1000;
	/* Mean 1750, limit 2275: the warm pod is passed over; the cold ones tie. */
	cr_assert(policy_over_balance(&g, p, 4, 0));
	cr_assert_not(policy_over_balance(&g, p, 4, 1));
	cr_assert_eq(policy_pick(P_KVIDX, &g, &rq, p, 4, 0, NULL), 1);
	cr_assert_eq(policy_pick(P_KVIDX, &pp, &rq, p, 4, 0, NULL), 0, "no slack: no guard");
	cr_assert_eq(policy_pick(P_PREFIX, &g, &rq, p, 4, 1, NULL), 0, "kvidx's guard only");
	/* Within the margin (2800 tokens above 1.3 x the mean): the cache wins. */
	g.balance_margin = 2800;
	cr_assert_eq(policy_pick(P_KVIDX, &g, &rq, p, 4, 1, NULL), 0);
	g.balance_margin = 0;
	/* Within the slack (1400, the limit 1.3 x 1100 = 1430): the cache wins. */
	p[0].work = 1400;
	cr_assert_eq(policy_pick(P_KVIDX, &g, &rq, p, 4, 1, NULL), 0);
	/* Idle (nothing in flight, nothing queued), it serves whatever it did lately. */
	p[0].work = 4000;
	p[0].inflight = 0;
	cr_assert_not(policy_over_balance(&g, p, 4, 0));
	cr_assert_eq(policy_pick(P_KVIDX, &g, &rq, p, 4, 1, NULL), 0);
	p[0].prefill_tokens = 1; /* a queue: busy again */
	cr_assert_eq(policy_pick(P_KVIDX, &g, &rq, p, 4, 0, NULL), 1);
	p[0].prefill_tokens = 0;
	p[0].inflight = 1;
	/* The only eligible pod is never passed over. */
	p[0].work = 1e9;
	p[1].eligible = p[2].eligible = p[3].eligible = false;
	cr_assert_eq(policy_pick(P_KVIDX, &g, &rq, p, 4, 0, NULL), 0);
}

Test(policy, hot_spot_on_idle_pods_is_balanced_by_the_guard)
{
	/* One shared 8-block prefix, 2 fresh blocks each, and pods with no queue at any
	 * decision but a request decoding: the expected TTFT alone keeps every request on the
	 * warm pod; the guard spreads the computed tokens within the slack, plus one cold
	 * prompt. */
	for (int guarded = 0; guarded < 2; guarded++) {
		struct pol_params g = pp;
		struct pol_pod p[4];
		struct pol_req rq = { .prompt_tokens = 10 * BS, .nkeys = 10 };
		double lo = 1e18, hi = 0, sum = 0;
		int rr = 0;

		g.balance_slack = guarded ? 0.3 : 0;
		pods_init(p, 4);
		match(&p[0], 8);
		for (int i = 0; i < 4; i++)
			p[i].inflight = 1;
		for (int n = 0; n < 200; n++) {
			int i = policy_pick(P_KVIDX, &g, &rq, p, 4, rr, NULL);
			cr_assert_geq(i, 0);
			p[i].work += rq.prompt_tokens - policy_expected_cached(&g, &rq, &p[i], true);
			if (!p[i].blocks)
				match(&p[i], 8);
			rr = (i + 1) % 4;
		}
		for (int i = 0; i < 4; i++) {
			lo = p[i].work < lo ? p[i].work : lo;
			hi = p[i].work > hi ? p[i].work : hi;
			sum += p[i].work;
		}
		if (!guarded)
			cr_assert_eq(lo, 0, "unguarded, the cold pods stay cold");
		else
			cr_assert_leq(hi, 1.3 * sum / 4 + 10 * BS, "max %g, mean %g", hi, sum / 4);
	}
}

Test(policy, an_unknown_policy_is_a_usage_error)
{
	struct tu_run r = tu_run_tool("kvidx-route", "--pod a:1=http://127.0.0.1:1 --policy llmd "
				      "--synthetic --count 1 2>&1");

	cr_assert_eq(r.status, 2, "%s", r.out);
	cr_assert_not_null(strstr(r.out, "--policy: 'llmd' is none of kvidx, prefix, round-robin, "
				  "least-loaded, llm-d, dynamo"), "%s", r.out);
	free(r.out);
}
