/*
 * measure.c — what one pod's histograms and counters say, read once: route-to-confirmation
 * latency (recent and cumulative) and Lq's window, the event path lag, the routed rate lambda
 * from two samples (or the generation's age), p = stale routes / routes and the prefix tokens
 * a failed route puts at stake. No judgement here (decide.c) and no output (text.c, json.c).
 */
#include <stdio.h>

#include "advisor.h"
#include "segment.h"

const double pct_q[NPCT] = { 0.50, 0.95, 0.99 };
const char *const pct_label[NPCT] = { "p50", "p95", "p99" };
const char *const class_name[KV_PROMPT_CLASSES] = { "lt512", "512-2047", "2048-8191",
						    "ge8192" };

uint64_t routes_of(const struct tc_pod *p)
{
	return p->ctr[KV_PC_routes_predicted] + p->ctr[KV_PC_routes_confirmed] +
	       p->ctr[KV_PC_routes_nomatch];
}

void lat_of(struct kv_tm_hist_ro h, double q, struct lat *out)
{
	uint64_t c[KV_HIST_BUCKETS], us;

	kv_tm_ro_buckets(h, c);
	out->n = kv_hist_count(c);
	for (int i = 0; i < NPCT; i++)
		out->p[i] = kv_hist_quantile(c, pct_q[i], &us) == 0 ? (double)us / 1e6 : 0;
	out->q = kv_hist_quantile(c, q, &us) == 0 ? (double)us / 1e6 : 0;
}

/* The latency histograms: Lq from the recent window unless --cumulative or it is empty. */
static void measure_latency(const struct live *L, struct pod_eval *e)
{
	const struct opts *o = L->o;
	const struct kv_view *v = kv_reader_view(L->r);
	const struct tc_pod *p = e->p;

	lat_of(kv_tm_view_hist(v, p->idx, KV_HIST_CONFIRM_RECENT), o->q, &e->rec);
	lat_of(kv_tm_view_hist(v, p->idx, KV_HIST_CONFIRM), o->q, &e->cum);
	if (!o->cumulative && e->rec.n) {
		e->pl.lq = e->rec.q;
		e->src = "recent";
	} else if (e->cum.n) {
		e->pl.lq = e->cum.q;
		e->src = o->cumulative ? "cumulative" : "cumulative (the recent window is empty)";
	}
	e->have_lq = e->src != NULL;
	e->nq = !o->cumulative && e->rec.n ? e->rec.n : e->cum.n;
	lat_of(kv_tm_view_hist(v, p->idx, KV_HIST_LAG_RECENT), 0.99, &e->lag_rec);
	lat_of(kv_tm_view_hist(v, p->idx, KV_HIST_LAG), 0.99, &e->lag_cum);
	e->lag = e->lag_rec.n ? &e->lag_rec : e->lag_cum.n ? &e->lag_cum : NULL;
}

/* lambda: from the two samples, or over the generation's age with --since-start. */
static void measure_rate(const struct live *L, struct pod_eval *e)
{
	const struct tc_pod *prev = e->prev;

	if (L->o->since_start) {
		if (e->since_start_routes_ns) {
			e->lambda = (double)e->routes / ((double)e->since_start_routes_ns / 1e9);
			e->have_rate = true;
		} else {
			snprintf(e->why, sizeof(e->why), "the index was created just now");
		}
	} else if (!prev) {
		snprintf(e->why, sizeof(e->why), "the pod appeared during the sample");
	} else if (routes_of(prev) > e->routes) {
		snprintf(e->why, sizeof(e->why), "its route counters went back during the sample");
	} else {
		e->lambda = (double)(e->routes - routes_of(prev)) / L->elapsed_s;
		e->have_rate = true;
	}
}

/* Fills the measured half of e; e->p, e->prev and e->since_start_routes_ns are set. */
void measure_pod(const struct live *L, struct pod_eval *e)
{
	const struct tc_pod *p = e->p;

	e->now = kvidx_now_ns();
	e->spec = p->ctr[KV_PC_speculations];
	e->stale = p->ctr[KV_PC_stale_expiries];
	e->ttl_ms = p->ctr[KV_PC_ttl_ms];
	e->last_ev = p->ctr[KV_PC_last_event_ns];
	e->sp = p->ctr[KV_PC_spec_paused];
	e->routes = routes_of(p);
	e->ttl_in_force = (double)e->ttl_ms / 1000.0;
	e->rstale = p->ctr[KV_PC_routes_stale_expiries];
	e->have_p = e->routes > 0;
	measure_latency(L, e);
	e->srec = p->ctr[KV_PC_stale_expiries];
	e->tokens = e->rstale ? (double)e->srec * L->block_size / (double)e->rstale : 0;
	measure_rate(L, e);
	if (e->have_p)
		e->pf = (double)e->rstale / (double)e->routes;
	e->age = e->last_ev && e->now > e->last_ev ? (double)(e->now - e->last_ev) / 1e9 : 0;
	e->expo = e->have_rate && e->have_p;
}
