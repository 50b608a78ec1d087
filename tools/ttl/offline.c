/*
 * offline.c — kvidx-ttl's offline mode: Lq from the numbers given on the command line (a
 * percentile, --lq, or with --sweep a saved histogram), the plan T = Lq + J against the cap,
 * the settings compared and the stale exposure, printed as text or as one JSON object; with
 * --sweep the TTL curve instead.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "advisor.h"

/* Which given value Lq is, and its name. Validated in main(). */
static double offline_lq(const struct opts *o, char *label, size_t n)
{
	if (o->have_lq) {
		if (o->pct_name)
			snprintf(label, n, "%s", o->pct_name);
		else if (o->have_q)
			ttl_fmt_pct_name(label, n, o->q);
		else
			snprintf(label, n, "Lq");
		return o->lq;
	}
	int k = -1;
	for (int i = 0; i < NPCT; i++) {
		if (!o->have_pv[i])
			continue;
		if (o->have_q ? o->q > pct_q[i] - 1e-9 && o->q < pct_q[i] + 1e-9 : true)
			k = i; /* with no --percentile, the highest given */
	}
	snprintf(label, n, "%s", o->pct_name ? o->pct_name : pct_label[k]);
	return o->pv[k];
}

static int run_offline_sweep(const struct opts *o, const struct ttl_plan *pl,
			     const uint64_t *hist)
{
	struct sweep sw = { .in = { .label = "offline", .rec = pl->rec,
				    .in_force = o->have_in_force ? o->in_force : 0,
				    .have_expo = o->have_rate && o->have_fail, .lambda = o->rate,
				    .p = o->fail, .tokens = o->tokens, .hist = hist,
				    .ttls = o->ttls, .nttl = o->nttl, .cap = o->cap } };

	for (int i = 0; i < NPCT; i++) {
		sw.in.pv[i] = o->pv[i];
		sw.in.have_pv[i] = o->have_pv[i];
	}
	if (o->have_lq && !hist) {
		/* --lq alone: the tail through its one point. */
		int k = o->have_q && o->q < 0.97 ? 1 : 2;
		sw.in.pv[k] = o->lq;
		sw.in.have_pv[k] = true;
	}
	sweep_compute(&sw);
	if (o->json) {
		struct tc_jw j = { .f = stdout };
		tc_jw_open(&j, NULL, '{');
		tc_jw_str(&j, "mode", "sweep-offline");
		tc_jw_str(&j, "tail_source", hist ? "histogram" : "percentiles");
		jw_plan(&j, pl);
		tc_jw_open(&j, "pods", '{');
		tc_jw_open(&j, "offline", '{');
		sweep_json(&j, &sw);
		tc_jw_close(&j, '}');
		tc_jw_close(&j, '}');
		tc_jw_close(&j, '}');
	} else {
		char buf[512];
		printf("  %s\n", ttl_fmt_arith(buf, sizeof(buf), pl));
		printf("  %s\n", ttl_fmt_recommend(buf, sizeof(buf), pl));
		printf("  early expiry from %s\n", hist ? "the histogram given" :
		       "the percentiles given (log-linear between them: an estimate)");
		sweep_print_text(stdout, &sw);
	}
	if (o->svg && write_svg(o->svg, &sw, 1) < 0)
		return 1;
	return 0;
}

/* The offline plan as one JSON object. */
static void offline_json(const struct opts *o, const struct ttl_plan *pl, const char *label)
{
	const double *set;
	bool dflt;
	int nset = settings(o, &set, &dflt);
	bool expo = o->have_rate && o->have_fail;
	char buf[512];

	struct tc_jw j = { .f = stdout };
	tc_jw_open(&j, NULL, '{');
	tc_jw_str(&j, "mode", "offline");
	tc_jw_open(&j, "latency_s", '{');
	for (int i = 0; i < NPCT; i++)
		if (o->have_pv[i])
			tc_jw_num(&j, pct_label[i], o->pv[i]);
	tc_jw_close(&j, '}');
	tc_jw_str(&j, "percentile", label);
	jw_plan(&j, pl);
	tc_jw_num(&j, "floor_s", pl->floor);
	tc_jw_num(&j, "cap_s", pl->cap);
	if (expo) {
		tc_jw_num(&j, "rate_per_s", o->rate);
		tc_jw_num(&j, "fail_p", o->fail);
		tc_jw_num(&j, "exposure_at_recommended",
			  ttl_exposure(o->rate, o->fail, pl->rec));
		tc_jw_str(&j, "exposure_line",
			  ttl_fmt_exposure(buf, sizeof(buf), o->rate, o->fail, pl->rec));
	} else {
		tc_jw_null(&j, "rate_per_s");
		tc_jw_null(&j, "fail_p");
		tc_jw_null(&j, "exposure_at_recommended");
	}
	tc_jw_open(&j, "compared", '[');
	for (int i = 0; i < nset; i++) {
		tc_jw_open(&j, NULL, '{');
		tc_jw_num(&j, "ttl_s", set[i]);
		tc_jw_str(&j, "source", dflt ? "documented default" : "--ttl");
		tc_jw_num(&j, "room_s", set[i] - pl->t);
		tc_jw_str(&j, "room", ttl_fmt_room(buf, sizeof(buf), set[i], pl->t));
		if (expo) {
			tc_jw_num(&j, "exposure", ttl_exposure(o->rate, o->fail, set[i]));
			tc_jw_str(&j, "exposure_line",
				  ttl_fmt_exposure(buf, sizeof(buf), o->rate, o->fail, set[i]));
		} else {
			tc_jw_null(&j, "exposure");
		}
		tc_jw_close(&j, '}');
	}
	tc_jw_close(&j, ']');
	tc_jw_close(&j, '}');
}

/* The offline plan as text: the arithmetic written out, the settings compared, the exposure. */
static void offline_text(const struct opts *o, const struct ttl_plan *pl, const char *label)
{
	const double *set;
	bool dflt;
	int nset = settings(o, &set, &dflt);
	bool expo = o->have_rate && o->have_fail;
	char buf[512], d[32];

	printf("TTL from route-to-confirmation latency (numbers given)\n");
	bool any = false;
	for (int i = 0; i < NPCT; i++) {
		if (!o->have_pv[i])
			continue;
		printf("%s %s %s", any ? "," : "  latency:", pct_label[i],
		       ttl_fmt_dur(d, sizeof(d), o->pv[i]));
		any = true;
	}
	if (any)
		printf("\n");
	printf("  Lq = %s = %s\n", label, ttl_fmt_fixed(d, sizeof(d), pl->lq));
	printf("  %s\n", ttl_fmt_arith(buf, sizeof(buf), pl));
	printf("  %s\n", ttl_fmt_recommend(buf, sizeof(buf), pl));
	for (int i = 0; i < nset; i++)
		printf("  compared%s: %s\n", dflt ? " with the documented default" : "",
		       ttl_fmt_room(buf, sizeof(buf), set[i], pl->t));
	if (!expo) {
		printf("  stale exposure: give --rate and --fail to price failed predictions\n");
		return;
	}
	printf("  stale exposure, lambda x p x TTL:\n");
	printf("    at the recommended TTL: %s\n",
	       ttl_fmt_exposure(buf, sizeof(buf), o->rate, o->fail, pl->rec));
	for (int i = 0; i < nset; i++)
		printf("    at %s: %s\n", ttl_fmt_dur(d, sizeof(d), set[i]),
		       ttl_fmt_exposure(buf, sizeof(buf), o->rate, o->fail, set[i]));
}

int run_offline(const struct opts *o)
{
	struct ttl_plan pl = { .backlog = o->backlog, .slack = o->slack, .floor = o->floor,
			       .cap = o->cap };
	char label[64];

	static uint64_t hist[KV_HIST_BUCKETS];
	if (o->hist_in) {
		uint64_t us;
		if (load_hist(o->hist_in, hist) < 0)
			return 1;
		if (kv_hist_quantile(hist, o->q, &us) < 0) {
			fprintf(stderr, PROG ": %s: the histogram is empty\n", o->hist_in);
			return 1;
		}
		pl.lq = (double)us / 1e6;
		ttl_fmt_pct_name(label, sizeof(label), o->q);
	} else {
		pl.lq = offline_lq(o, label, sizeof(label));
	}
	ttl_plan_compute(&pl);
	if (o->sweep)
		return run_offline_sweep(o, &pl, o->hist_in ? hist : NULL);
	if (o->json)
		offline_json(o, &pl, label);
	else
		offline_text(o, &pl, label);
	return 0;
}
