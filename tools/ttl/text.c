/*
 * text.c — kvidx-ttl's live output for people: one pod (its latency and event lag, the
 * plan, the counts that tell early from stale expiry, lambda and p, the exposure, its
 * freshness and the guidance), or with --sweep its plan and TTL curve; and one router worker.
 */
#include <inttypes.h>
#include <stdio.h>

#include "advisor.h"
#include "escape.h"
#include "segment.h"

/* Latency and event lag percentiles, J's backlog, latency by prompt length. */
static void text_latency(const struct live *L, const struct pod_eval *e)
{
	const struct kv_view *v = kv_reader_view(L->r);
	const struct tc_pod *p = e->p;
	char d[32], d2[32];

	for (int w = 0; w < 2; w++) {
		const struct lat *l = w ? &e->cum : &e->rec;
		printf("  latency, %-10s ", w ? "cumulative" : "recent");
		if (!l->n) {
			printf("no confirmations yet\n");
			continue;
		}
		printf("(%" PRIu64 " confirmation%s):", l->n, l->n == 1 ? "" : "s");
		for (int i = 0; i < NPCT; i++)
			printf(" %s %s", pct_label[i], ttl_fmt_dur(d, sizeof(d), l->p[i]));
		printf("\n");
	}
	for (int w = 0; w < 2; w++) {
		const struct lat *l = w ? &e->lag_cum : &e->lag_rec;
		printf("  event lag, %-10s ", w ? "cumulative" : "recent");
		if (!l->n) {
			printf("no live batches measured yet\n");
			continue;
		}
		printf("(%" PRIu64 " batch%s):", l->n, l->n == 1 ? "" : "es");
		for (int i = 0; i < NPCT; i++)
			printf(" %s %s", pct_label[i], ttl_fmt_dur(d, sizeof(d), l->p[i]));
		printf("\n");
	}
	printf("  J's backlog: %s; queue depth %" PRIu64 " (peak %" PRIu64 " over the last "
	       "minute); batches stamped ahead of the clock %" PRIu64 "\n",
	       e->bsrc, p->ctr[KV_PC_queue_depth], p->ctr[KV_PC_queue_depth_peak],
	       p->ctr[KV_PC_lag_negative]);
	printf("  latency by prompt length (recent):");
	for (unsigned c = 0; c < KV_PROMPT_CLASSES; c++) {
		struct lat cl;
		lat_of(kv_tm_view_hist(v, p->idx, KV_HIST_CLASS(c)), L->o->q, &cl);
		printf("%s %s", c ? ";" : "", class_name[c]);
		if (!cl.n) {
			printf(" -");
			continue;
		}
		printf(" (%" PRIu64 ") p50 %s p99 %s", cl.n, ttl_fmt_dur(d, sizeof(d), cl.p[0]),
		       ttl_fmt_dur(d2, sizeof(d2), cl.p[2]));
	}
	printf("\n");
}

/* Lq, the arithmetic, the recommendation, the TTL in force and the settings compared. */
static void text_plan(const struct live *L, const struct pod_eval *e)
{
	const struct opts *o = L->o;
	char buf[512], d[32];

	if (e->have_lq) {
		printf("  Lq = %s of %s latency = %s", L->pct, e->src,
		       ttl_fmt_fixed(d, sizeof(d), e->pl.lq));
		if ((double)e->nq * (1.0 - o->q) <= 1.0 && o->q < 1.0)
			printf(" (only %" PRIu64 " confirmation%s: the %s is the slowest one seen)",
			       e->nq, e->nq == 1 ? "" : "s", L->pct);
		printf("\n  %s\n", ttl_fmt_arith(buf, sizeof(buf), &e->pl));
		printf("  %s\n", ttl_fmt_recommend(buf, sizeof(buf), &e->pl));
	}
	if (e->ttl_ms) {
		printf("  TTL in force %s", ttl_fmt_dur(d, sizeof(d), e->ttl_in_force));
		if (e->have_lq)
			printf(": %s", ttl_fmt_room(buf, sizeof(buf), e->ttl_in_force, e->pl.t));
		printf("\n");
	} else {
		printf("  TTL in force: not reported (pod counter ttl_ms is 0)\n");
	}
	for (int i = 0; i < o->nttl && e->have_lq; i++)
		printf("  compared: %s\n", ttl_fmt_room(buf, sizeof(buf), e->set[i], e->pl.t));
}

/* What became of predictions, per record and per route; lambda, p, the tokens at stake. */
static void text_counts(const struct live *L, const struct pod_eval *e)
{
	const struct tc_pod *p = e->p;
	char d[32], d2[32];

	printf("  speculations %" PRIu64 ", confirmed in time %" PRIu64 ", early expiries %" PRIu64
	       ", stale expiries %" PRIu64 ", late confirmations %" PRIu64 "\n",
	       e->spec, p->ctr[KV_PC_confirmed_in_time], p->ctr[KV_PC_early_expiries], e->stale,
	       p->ctr[KV_PC_late_confirmations]);
	if (e->have_rate && L->o->since_start)
		printf("  routed rate lambda = %s /s (%" PRIu64 " routes in %s since the index "
		       "generation was created)\n",
		       ttl_fmt_num(d, sizeof(d), e->lambda), e->routes,
		       ttl_fmt_dur(d2, sizeof(d2), (double)e->since_start_routes_ns / 1e9));
	else if (e->have_rate)
		printf("  routed rate lambda = %s /s (%" PRIu64 " routes in a %s sample)\n",
		       ttl_fmt_num(d, sizeof(d), e->lambda), e->routes - routes_of(e->prev),
		       ttl_fmt_dur(d2, sizeof(d2), L->elapsed_s));
	else
		printf("  routed rate lambda: unknown (%s)\n", e->why);
	printf("  per route: %" PRIu64 " with new predictions; in time %" PRIu64 ", early "
	       "expiries %" PRIu64 ", stale %" PRIu64 ", dropped by clear %" PRIu64 ", by "
	       "BlockRemoved %" PRIu64 ", by eviction %" PRIu64 ", untracked %" PRIu64 "\n",
	       p->ctr[KV_PC_spec_routes], p->ctr[KV_PC_routes_in_time],
	       p->ctr[KV_PC_routes_early_expiries], e->rstale, p->ctr[KV_PC_routes_dropped_clear],
	       p->ctr[KV_PC_routes_dropped_removed], p->ctr[KV_PC_routes_dropped_evicted],
	       p->ctr[KV_PC_routes_untracked]);
	printf("  records dropped before expiry: clear %" PRIu64 ", BlockRemoved %" PRIu64
	       ", eviction %" PRIu64 "\n", p->ctr[KV_PC_dropped_clear],
	       p->ctr[KV_PC_dropped_removed], p->ctr[KV_PC_dropped_evicted]);
	if (e->have_p)
		printf("  failed-prediction probability p = stale routes / routes = %" PRIu64
		       " / %" PRIu64 " = %s\n", e->rstale, e->routes,
		       ttl_fmt_num(d, sizeof(d), e->pf));
	else
		printf("  failed-prediction probability p: no routes yet\n");
	if (e->rstale)
		printf("  token-weighted: %" PRIu64 " stale records x %u tokens over %" PRIu64
		       " stale routes = %s prefix tokens at stake per failed route\n",
		       e->srec, L->block_size, e->rstale, ttl_fmt_num(d, sizeof(d), e->tokens));
}

/* The stale exposure at each TTL, the pod's freshness, the guidance. */
static void text_exposure(const struct live *L, const struct pod_eval *e)
{
	const struct opts *o = L->o;
	uint64_t sp = e->sp;
	char buf[512], d[32];

	if (e->expo) {
		if (e->have_lq)
			printf("  stale exposure at the recommended TTL: %s\n",
			       ttl_fmt_exposure(buf, sizeof(buf), e->lambda, e->pf, e->pl.rec));
		if (e->ttl_ms)
			printf("  stale exposure at the TTL in force:    %s\n",
			       ttl_fmt_exposure(buf, sizeof(buf), e->lambda, e->pf,
						e->ttl_in_force));
		for (int i = 0; i < o->nttl; i++)
			printf("  stale exposure at %s: %s\n", ttl_fmt_dur(d, sizeof(d), e->set[i]),
			       ttl_fmt_exposure(buf, sizeof(buf), e->lambda, e->pf, e->set[i]));
	}
	printf("  freshness: %s", sp == 0 ? "fresh" : sp == 1 ? "replaying or disconnected" :
				    sp == 2 ? "pipeline broken" : "unknown state");
	if (sp > 2)
		printf(" (spec_paused %" PRIu64 ")", sp);
	if (e->p->flags & KV_POD_SPEC_PAUSED)
		printf(", speculation paused");
	if (e->last_ev)
		printf(", last event %s ago\n", ttl_fmt_dur(d, sizeof(d), e->age));
	else
		printf(", no events yet\n");
	for (int i = 0; i < e->ng; i++)
		printf("  guidance: %s\n", e->g[i]);
}

void pod_text(const struct live *L, const struct pod_eval *e)
{
	char buf[512];

	printf("\npod ");
	tc_text_str(stdout, e->p->name);
	printf(" (model \"");
	tc_text_str(stdout, e->p->model);
	printf("\")\n");
	if (e->sw) { /* --sweep: the arithmetic and the curve */
		if (e->have_lq) {
			printf("  %s\n", ttl_fmt_arith(buf, sizeof(buf), &e->pl));
			printf("  %s\n", ttl_fmt_recommend(buf, sizeof(buf), &e->pl));
		}
		printf("  J's backlog: %s\n", e->bsrc);
		sweep_print_text(stdout, e->sw);
		for (int i = 0; i < e->ng; i++)
			printf("  guidance: %s\n", e->g[i]);
		return;
	}
	text_latency(L, e);
	text_plan(L, e);
	text_counts(L, e);
	text_exposure(L, e);
}

/* One router worker (registry slot); first: print the heading before it. */
void router_text(uint32_t s, const uint64_t *c, const struct lat *l, bool first)
{
	char d[32], d2[32], d3[32];

	if (first)
		printf("\nrouter workers (registry slots):\n");
	printf("  slot %u (pid %" PRIu64 "): routes %" PRIu64 " (on a prediction %" PRIu64
	       ", on confirmed blocks %" PRIu64 ", no match %" PRIu64 "); with new "
	       "predictions %" PRIu64 ": in time %" PRIu64 ", early %" PRIu64 ", stale %" PRIu64
	       ", dropped %" PRIu64 "; false warm %" PRIu64 " of %" PRIu64 " outcomes",
	       s, c[KV_RT_pid], c[KV_RT_routes], c[KV_RT_routes_predicted],
	       c[KV_RT_routes_confirmed], c[KV_RT_routes_nomatch], c[KV_RT_spec_routes],
	       c[KV_RT_routes_in_time], c[KV_RT_routes_early_expiries],
	       c[KV_RT_routes_stale_expiries], c[KV_RT_routes_dropped],
	       c[KV_RT_false_warm_routes], c[KV_RT_outcomes]);
	if (l->n)
		printf("; latency (recent, %" PRIu64 ") p50 %s p95 %s p99 %s", l->n,
		       ttl_fmt_dur(d, sizeof(d), l->p[0]), ttl_fmt_dur(d2, sizeof(d2), l->p[1]),
		       ttl_fmt_dur(d3, sizeof(d3), l->p[2]));
	printf("\n");
}
