/*
 * json.c — kvidx-ttl's live output for scripts: one pod as a member of "pods" (the same
 * numbers text.c prints, with null where there is none yet), the plan's members (shared with
 * offline.c), and one router worker as a member of "routers".
 */
#include <stdio.h>

#include "advisor.h"
#include "segment.h"

void jw_plan(struct tc_jw *j, const struct ttl_plan *pl)
{
	char buf[256];

	tc_jw_num(j, "lq_s", pl->lq);
	tc_jw_num(j, "backlog_s", pl->backlog);
	tc_jw_num(j, "slack_s", pl->slack);
	tc_jw_num(j, "j_s", pl->j);
	tc_jw_num(j, "t_s", pl->t);
	tc_jw_num(j, "recommended_s", pl->rec);
	tc_jw_u64(j, "recommended_ms", ttl_ms_ceil(pl->rec));
	tc_jw_bool(j, "capped", pl->bound > 0);
	tc_jw_bool(j, "raised_to_floor", pl->bound < 0);
	tc_jw_str(j, "arithmetic", ttl_fmt_arith(buf, sizeof(buf), pl));
	tc_jw_str(j, "recommendation", ttl_fmt_recommend(buf, sizeof(buf), pl));
}

/* key: {p50, p95, p99} (with "batches" first when batches is set), or null when empty. */
static void json_pcts(struct tc_jw *j, const char *key, const struct lat *l, bool batches)
{
	if (!l->n) {
		tc_jw_null(j, key);
		return;
	}
	tc_jw_open(j, key, '{');
	if (batches)
		tc_jw_u64(j, "batches", l->n);
	for (int i = 0; i < NPCT; i++)
		tc_jw_num(j, pct_label[i], l->p[i]);
	tc_jw_close(j, '}');
}

/* Latency, Lq and the plan, the TTL in force. */
static void json_plan(struct tc_jw *j, const struct pod_eval *e)
{
	tc_jw_u64(j, "confirmations_recent", e->rec.n);
	tc_jw_u64(j, "confirmations_cumulative", e->cum.n);
	json_pcts(j, "latency_recent_s", &e->rec, false);
	json_pcts(j, "latency_cumulative_s", &e->cum, false);
	if (e->have_lq) {
		tc_jw_str(j, "lq_source", e->src);
		jw_plan(j, &e->pl);
	} else {
		tc_jw_null(j, "lq_source");
		tc_jw_null(j, "lq_s");
		tc_jw_null(j, "t_s");
		tc_jw_null(j, "recommended_s");
	}
	if (e->ttl_ms) {
		tc_jw_num(j, "ttl_in_force_s", e->ttl_in_force);
		if (e->have_lq)
			tc_jw_num(j, "room_s", e->ttl_in_force - e->pl.t);
	} else {
		tc_jw_null(j, "ttl_in_force_s");
	}
}

/* Per-record counts, lambda, p, the exposure at each TTL and the settings compared. */
static void json_exposure(struct tc_jw *j, const struct live *L, const struct pod_eval *e)
{
	const struct tc_pod *p = e->p;

	tc_jw_u64(j, "speculations", e->spec);
	tc_jw_u64(j, "confirmed_in_time", p->ctr[KV_PC_confirmed_in_time]);
	tc_jw_u64(j, "early_expiries", p->ctr[KV_PC_early_expiries]);
	tc_jw_u64(j, "stale_expiries", e->stale);
	tc_jw_u64(j, "late_confirmations", p->ctr[KV_PC_late_confirmations]);
	tc_jw_u64(j, "routes", e->routes);
	if (e->have_rate)
		tc_jw_num(j, "rate_per_s", e->lambda);
	else
		tc_jw_null(j, "rate_per_s");
	if (e->have_p)
		tc_jw_num(j, "fail_p", e->pf);
	else
		tc_jw_null(j, "fail_p");
	tc_jw_str(j, "fail_p_source", "stale routes / routes");
	if (e->expo && e->have_lq)
		tc_jw_num(j, "exposure_at_recommended", ttl_exposure(e->lambda, e->pf, e->pl.rec));
	else
		tc_jw_null(j, "exposure_at_recommended");
	if (e->expo && e->ttl_ms)
		tc_jw_num(j, "exposure_at_ttl_in_force",
			  ttl_exposure(e->lambda, e->pf, e->ttl_in_force));
	else
		tc_jw_null(j, "exposure_at_ttl_in_force");
	if (!L->o->nttl)
		return;
	tc_jw_open(j, "compared", '[');
	for (int i = 0; i < e->nset; i++) {
		tc_jw_open(j, NULL, '{');
		tc_jw_num(j, "ttl_s", e->set[i]);
		if (e->have_lq)
			tc_jw_num(j, "room_s", e->set[i] - e->pl.t);
		if (e->expo)
			tc_jw_num(j, "exposure", ttl_exposure(e->lambda, e->pf, e->set[i]));
		tc_jw_close(j, '}');
	}
	tc_jw_close(j, ']');
}

/* The event path lag, J's backlog and the subscriber's queue. */
static void json_lag(struct tc_jw *j, const struct pod_eval *e)
{
	const struct tc_pod *p = e->p;

	json_pcts(j, "event_lag_recent_s", &e->lag_rec, true);
	json_pcts(j, "event_lag_cumulative_s", &e->lag_cum, true);
	tc_jw_str(j, "backlog_source", e->bsrc);
	tc_jw_num(j, "j_backlog_s", e->pl.backlog);
	tc_jw_u64(j, "lag_negative", p->ctr[KV_PC_lag_negative]);
	tc_jw_u64(j, "queue_depth", p->ctr[KV_PC_queue_depth]);
	tc_jw_u64(j, "queue_depth_peak", p->ctr[KV_PC_queue_depth_peak]);
	if (e->bnote[0])
		tc_jw_str(j, "backlog_warning", e->bnote);
	else
		tc_jw_null(j, "backlog_warning");
}

/* Per route, records dropped, latency by prompt length. */
static void json_routes(struct tc_jw *j, const struct live *L, const struct pod_eval *e)
{
	const struct kv_view *v = kv_reader_view(L->r);
	const struct tc_pod *p = e->p;

	tc_jw_open(j, "per_route", '{');
	tc_jw_u64(j, "spec_routes", p->ctr[KV_PC_spec_routes]);
	tc_jw_u64(j, "in_time", p->ctr[KV_PC_routes_in_time]);
	tc_jw_u64(j, "early_expiries", p->ctr[KV_PC_routes_early_expiries]);
	tc_jw_u64(j, "late_confirmations", p->ctr[KV_PC_routes_late_confirmations]);
	tc_jw_u64(j, "stale_expiries", e->rstale);
	tc_jw_u64(j, "dropped_clear", p->ctr[KV_PC_routes_dropped_clear]);
	tc_jw_u64(j, "dropped_removed", p->ctr[KV_PC_routes_dropped_removed]);
	tc_jw_u64(j, "dropped_evicted", p->ctr[KV_PC_routes_dropped_evicted]);
	tc_jw_u64(j, "untracked", p->ctr[KV_PC_routes_untracked]);
	tc_jw_num(j, "tokens_per_failed_route", e->tokens);
	tc_jw_close(j, '}');
	tc_jw_open(j, "records_dropped", '{');
	tc_jw_u64(j, "clear", p->ctr[KV_PC_dropped_clear]);
	tc_jw_u64(j, "removed", p->ctr[KV_PC_dropped_removed]);
	tc_jw_u64(j, "evicted", p->ctr[KV_PC_dropped_evicted]);
	tc_jw_close(j, '}');
	tc_jw_open(j, "latency_by_prompt_class_s", '{');
	for (unsigned c = 0; c < KV_PROMPT_CLASSES; c++) {
		struct lat cl;
		lat_of(kv_tm_view_hist(v, p->idx, KV_HIST_CLASS(c)), L->o->q, &cl);
		tc_jw_open(j, class_name[c], '{');
		tc_jw_u64(j, "n", cl.n);
		for (int i = 0; i < NPCT; i++)
			if (cl.n)
				tc_jw_num(j, pct_label[i], cl.p[i]);
			else
				tc_jw_null(j, pct_label[i]);
		tc_jw_close(j, '}');
	}
	tc_jw_close(j, '}');
}

void pod_json(struct live *L, const struct pod_eval *e)
{
	struct tc_jw *j = &L->j;
	const struct tc_pod *p = e->p;

	tc_jw_open(j, p->name, '{');
	tc_jw_u64(j, "index", (uint64_t)p->idx);
	tc_jw_str(j, "model", p->model);
	json_plan(j, e);
	json_exposure(j, L, e);
	json_lag(j, e);
	json_routes(j, L, e);
	if (e->sw) {
		tc_jw_open(j, "sweep", '{');
		sweep_json(j, e->sw);
		tc_jw_close(j, '}');
	}
	tc_jw_str(j, "freshness", fresh_name(e->sp));
	tc_jw_u64(j, "spec_paused", e->sp);
	tc_jw_bool(j, "spec_paused_flag", p->flags & KV_POD_SPEC_PAUSED);
	if (e->last_ev)
		tc_jw_num(j, "seconds_since_last_event", e->age);
	else
		tc_jw_null(j, "seconds_since_last_event");
	tc_jw_open(j, "guidance", '[');
	for (int i = 0; i < e->ng; i++)
		tc_jw_str(j, NULL, e->g[i]);
	tc_jw_close(j, ']');
	tc_jw_close(j, '}');
}

/* One router worker (registry slot s): its counters, latency and last route's age. */
void router_json(struct tc_jw *j, uint32_t s, const uint64_t *c, const struct lat *l,
		 double age)
{
	char key[16];

	snprintf(key, sizeof(key), "%u", s);
	tc_jw_open(j, key, '{');
	tc_jw_u64(j, "pid", c[KV_RT_pid]);
	tc_jw_u64(j, "routes", c[KV_RT_routes]);
	tc_jw_u64(j, "routes_predicted", c[KV_RT_routes_predicted]);
	tc_jw_u64(j, "routes_confirmed", c[KV_RT_routes_confirmed]);
	tc_jw_u64(j, "routes_nomatch", c[KV_RT_routes_nomatch]);
	tc_jw_u64(j, "spec_routes", c[KV_RT_spec_routes]);
	tc_jw_u64(j, "routes_in_time", c[KV_RT_routes_in_time]);
	tc_jw_u64(j, "routes_early_expiries", c[KV_RT_routes_early_expiries]);
	tc_jw_u64(j, "routes_stale_expiries", c[KV_RT_routes_stale_expiries]);
	tc_jw_u64(j, "routes_dropped", c[KV_RT_routes_dropped]);
	tc_jw_u64(j, "outcomes", c[KV_RT_outcomes]);
	tc_jw_u64(j, "false_warm_routes", c[KV_RT_false_warm_routes]);
	tc_jw_u64(j, "wasted_prefill_tokens", c[KV_RT_wasted_prefill_tokens]);
	tc_jw_num(j, "seconds_since_last_route", age);
	if (l->n) {
		tc_jw_open(j, "latency_recent_s", '{');
		tc_jw_u64(j, "n", l->n);
		for (int i = 0; i < NPCT; i++)
			tc_jw_num(j, pct_label[i], l->p[i]);
		tc_jw_close(j, '}');
	} else {
		tc_jw_null(j, "latency_recent_s");
	}
	tc_jw_close(j, '}');
}
