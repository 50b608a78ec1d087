/*
 * live.c — kvidx-ttl's live mode: it attaches to the index as an ordinary reader, samples the
 * pods' counters twice --interval apart (or once, with --since-start), and runs each pod shown
 * through measure.c and decide.c and out through text.c or json.c; then the router workers.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "advisor.h"
#include "attach.h"
#include "escape.h"
#include "segment.h"

static void sleep_s(double s)
{
	struct timespec ts = { (time_t)s, (long)((s - (double)(time_t)s) * 1e9) };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* One pod: measured, judged, its histogram saved (--save-histogram), printed. prev: its first
 * sample, or NULL. */
static void live_pod(struct live *L, const struct tc_pod *p, const struct tc_pod *prev,
		     uint64_t since_start_routes_ns)
{
	const struct opts *o = L->o;
	struct pod_eval e = { .p = p, .prev = prev, .since_start_routes_ns = since_start_routes_ns,
			      .pl = { .backlog = o->backlog, .slack = o->slack, .floor = o->floor,
				      .cap = o->cap } };

	measure_pod(L, &e);
	decide_pod(L, &e);
	if (o->hist_out) {
		const struct kv_view *v = kv_reader_view(L->r);
		uint64_t h[KV_HIST_BUCKETS];
		kv_tm_ro_buckets(kv_tm_view_hist(v, p->idx, KV_HIST_CONFIRM_RECENT), h);
		save_hist(o->hist_out, p->name, h);
	}
	if (o->json)
		pod_json(L, &e);
	else
		pod_text(L, &e);
}

/* Router workers (registry slots) that committed routes: counters and latency summary. */
static void live_routers(struct live *L)
{
	const struct kv_view *v = kv_reader_view(L->r);
	const struct opts *o = L->o;
	uint64_t now = kvidx_now_ns();
	int shown = 0;

	if (o->json)
		tc_jw_open(&L->j, "routers", '{');
	for (uint32_t s = 0; s < v->max_readers; s++) {
		uint64_t c[KV_RT_COUNT];
		struct lat l;
		if (!tc_router_snapshot(v, s, c))
			continue;
		lat_of(kv_tm_view_router_hist(v, (int)s), o->q, &l);
		double age = c[KV_RT_last_route_ns] && now > c[KV_RT_last_route_ns] ?
				     (double)(now - c[KV_RT_last_route_ns]) / 1e9 : 0;
		if (o->json)
			router_json(&L->j, s, c, &l, age);
		else
			router_text(s, c, &l, !shown++);
	}
	if (o->json)
		tc_jw_close(&L->j, '}');
}

/* The run's heading: the index, the percentile, J and the cap; JSON: opens "pods". */
static void live_header(struct live *L, int nb, uint64_t since)
{
	const struct opts *o = L->o;
	char d[32], d2[32], d3[32], d4[32];

	if (o->json) {
		tc_jw_open(&L->j, NULL, '{');
		tc_jw_str(&L->j, "mode", o->sweep ? "sweep-live" : "live");
		tc_jw_str(&L->j, "index", L->name);
		tc_jw_num(&L->j, "percentile", o->q);
		tc_jw_str(&L->j, "percentile_name", L->pct);
		tc_jw_str(&L->j, "lq_window", o->cumulative ? "cumulative" : "recent");
		if (o->have_backlog)
			tc_jw_num(&L->j, "backlog_s", o->backlog);
		else
			tc_jw_str(&L->j, "backlog_s", "measured");
		tc_jw_num(&L->j, "slack_s", o->slack);
		tc_jw_num(&L->j, "floor_s", o->floor);
		tc_jw_num(&L->j, "cap_s", o->cap);
		tc_jw_str(&L->j, "rate_source", o->since_start ? "since-start" : "interval");
		tc_jw_num(&L->j, "rate_window_s",
			  o->since_start ? (double)since / 1e9 : L->elapsed_s);
		tc_jw_u64(&L->j, "active_pods", (uint64_t)nb);
		tc_jw_open(&L->j, "pods", '{');
	} else {
		if (o->have_backlog)
			ttl_fmt_dur(d, sizeof(d), o->backlog);
		else
			snprintf(d, sizeof(d), "measured p99");
		printf("index %s: %d active pod%s; Lq = %s of %s route-to-confirmation latency, "
		       "J = %s backlog + %s slack, cap %s",
		       L->name, nb, nb == 1 ? "" : "s", L->pct,
		       o->cumulative ? "cumulative" : "recent", d,
		       ttl_fmt_dur(d2, sizeof(d2), o->slack), ttl_fmt_dur(d3, sizeof(d3), o->cap));
		if (o->floor > 0)
			printf(", floor %s", ttl_fmt_dur(d4, sizeof(d4), o->floor));
		printf("\n(percentiles are histogram bucket upper bounds, at most 12.5%% above the "
		       "true value)\n");
	}
}

int run_live(const struct opts *o)
{
	struct live L = { .o = o, .name = o->name, .j = { .f = stdout } };
	struct tc_pod *a = NULL, *b = NULL;
	struct kvidx_info info;
	uint64_t gen0, t0, t1, since = 0;
	int na = 0, nb, status = 0;

	ttl_fmt_pct_name(L.pct, sizeof(L.pct), o->q);
	L.r = tc_index_open(L.name);
	if (!L.r)
		return 1;
	if (tc_index_info(L.r, L.name, &info) < 0)
		goto fail;
	gen0 = info.generation;
	L.block_size = info.block_size;
	t0 = kvidx_now_ns();
	if (!o->since_start) {
		na = tc_pods_snapshot(L.r, &a);
		if (na < 0)
			goto nomem;
		sleep_s(o->interval);
		if (tc_index_info(L.r, L.name, &info) < 0)
			goto fail;
	}
	t1 = kvidx_now_ns();
	nb = tc_pods_snapshot(L.r, &b);
	if (nb < 0)
		goto nomem;
	L.elapsed_s = (double)(t1 - t0) / 1e9;
	if (t1 > info.created_ns)
		since = t1 - info.created_ns;
	if (info.generation != gen0)
		na = 0; /* pods of another generation: no rate */

	int shown = 0;
	for (int i = 0; i < nb; i++)
		shown += !o->pod || !strcmp(b[i].name, o->pod);
	if (o->sweep && nb) {
		L.sw = calloc((size_t)nb, sizeof(*L.sw));
		L.sw_hist = calloc((size_t)nb, sizeof(*L.sw_hist));
		if (!L.sw || !L.sw_hist)
			goto nomem;
	}
	if (o->pod && !shown) {
		fprintf(stderr, PROG ": index '%s': no active pod named '", L.name);
		tc_text_str(stderr, o->pod);
		fprintf(stderr, "'\n");
		status = 1;
		goto out;
	}

	live_header(&L, nb, since);
	for (int i = 0; i < nb; i++) {
		const struct tc_pod *p = &b[i], *prev = NULL;
		if (o->pod && strcmp(p->name, o->pod))
			continue;
		for (int k = 0; k < na; k++)
			if (a[k].idx == p->idx && a[k].gen == p->gen && !strcmp(a[k].name, p->name))
				prev = &a[k];
		live_pod(&L, p, prev, since);
	}
	if (o->json)
		tc_jw_close(&L.j, '}');
	if (!o->sweep && !o->pod)
		live_routers(&L);
	if (o->json)
		tc_jw_close(&L.j, '}');
	if (o->svg && write_svg(o->svg, L.sw, L.nsw) < 0)
		status = 1;
	goto out;
nomem:
	fprintf(stderr, PROG ": out of memory\n");
fail:
	status = 1;
out:
	free(L.sw);
	free(L.sw_hist);
	free(a);
	free(b);
	kvidx_reader_close(L.r);
	return status;
}
