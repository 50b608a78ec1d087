/*
 * kvidx-ttl — the TTL advisor: the arithmetic of docs/ttl.md made into a tool, on numbers given
 * on the command line or on what a live index has measured.
 *
 *   T = Lq + J                Lq a high percentile of route-to-confirmation latency, J the
 *                             slack for subscriber backlog and timing (--backlog + --slack)
 *   recommended = T, clamped to --floor and --cap (the longest stale window the routing SLO
 *                             permits)
 *   exposure = lambda x p x TTL   live failed predictions in requests' worth: lambda routed
 *                             requests per second, p the failed-prediction probability
 *
 * Offline (any of --p50/--p95/--p99/--lq/--rate/--fail given), it prints that arithmetic
 * written out, the recommendation against the cap, the room a compared setting leaves, and the
 * stale exposure. Live (otherwise), it attaches to an index as an ordinary reader (data mapped
 * read-only, one registry slot) and does the same per active pod from the pod's latency
 * histograms and counters, adding the counts that tell early expiry from stale expiry, the
 * pod's freshness, and docs/ttl.md's guidance where it applies. It never changes the index. All
 * arithmetic is in double-precision seconds, rounded only when printed, in the TTL core it
 * shares with ingestd's adaptive policy (tools/common/ttl.c).
 *
 * Exit status: 0 on success, 1 if the index cannot be read or the --pod is not in it, 2 on
 * bad usage.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "args.h"
#include "attach.h"
#include "cli.h"
#include "escape.h"
#include "hist.h"
#include "inspect.h"
#include "jsonw.h"
#include "kvidx.h"
#include "podsnap.h"
#include "segment.h"
#include "sweep.h"
#include "ttl.h"

#define PROG "kvidx-ttl"
#define MAX_TTLS 8          /* --ttl settings compared */
#define MIN_JUDGE 100       /* outcomes needed before expiry rates are judged */
#define INTERVAL_MAX_S 3600.0
#define NPCT 3

static const double pct_q[NPCT] = { 0.50, 0.95, 0.99 };
static const char *const pct_label[NPCT] = { "p50", "p95", "p99" };

struct opts {
	const char *name;
	bool json;
	/* offline numbers */
	double pv[NPCT];
	bool have_pv[NPCT];
	double lq;
	bool have_lq;
	const char *pct_name;
	double rate, fail;
	bool have_rate, have_fail;
	/* both modes */
	double q;
	bool have_q;
	double backlog, slack, cap, floor;
	bool have_backlog;
	double ttls[MAX_TTLS];
	int nttl;
	/* the TTL curve */
	bool sweep;
	const char *svg;       /* --svg FILE */
	const char *hist_in;   /* offline --histogram FILE */
	const char *hist_out;  /* live --save-histogram FILE */
	double in_force, tokens;
	bool have_in_force, have_tokens;
	/* live */
	const char *pod;
	double interval;
	bool have_interval, since_start, cumulative;
	double stale_limit;
};

static void jw_plan(struct tc_jw *j, const struct ttl_plan *pl)
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

/* ---- offline --------------------------------------------------------------------------------- */

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

/* The settings compared: the --ttl values, or the documented default. */
static int settings(const struct opts *o, const double **out, bool *dflt)
{
	static const double def = TTL_DEFAULT_S;

	*dflt = o->nttl == 0;
	*out = o->nttl ? o->ttls : &def;
	return o->nttl ? o->nttl : 1;
}

/*
 * A saved histogram (--save-histogram writes one): lines "LOWER_US COUNT", each count added
 * to the bucket of LOWER_US; '#' starts a comment. 0, or -1 after a message.
 */
static int load_hist(const char *path, uint64_t *c)
{
	FILE *f = fopen(path, "r");
	char line[256];
	unsigned ln = 0;

	memset(c, 0, KV_HIST_BUCKETS * sizeof(*c));
	if (!f) {
		fprintf(stderr, PROG ": %s: %s\n", path, strerror(errno));
		return -1;
	}
	while (fgets(line, sizeof(line), f)) {
		unsigned long long lo, n;
		char extra;
		ln++;
		char *h = strchr(line, '#');
		if (h)
			*h = '\0';
		if (strspn(line, " \t\r\n") == strlen(line))
			continue;
		if (sscanf(line, "%llu %llu %c", &lo, &n, &extra) != 2) {
			fprintf(stderr, PROG ": %s:%u: expected LOWER_US COUNT\n", path, ln);
			fclose(f);
			return -1;
		}
		c[kv_hist_bucket(lo)] += n;
	}
	fclose(f);
	return 0;
}

/* Writes the histogram h in load_hist()'s format. */
static int save_hist(const char *path, const char *pod, const uint64_t *h)
{
	FILE *f = fopen(path, "w");

	if (!f) {
		fprintf(stderr, PROG ": %s: %s\n", path, strerror(errno));
		return -1;
	}
	fprintf(f, "# kvidx recent route-to-confirmation latency histogram of pod ");
	tc_text_str(f, pod);
	fprintf(f, "\n# LOWER_US COUNT (bucket lower bound in microseconds; kvidx-ttl --histogram)\n");
	for (unsigned b = 0; b < KV_HIST_BUCKETS; b++) {
		uint64_t n = ld_relaxed(&h[b]);
		if (n)
			fprintf(f, "%" PRIu64 " %" PRIu64 "\n", kv_hist_lower(b), n);
	}
	if (fclose(f) != 0) {
		fprintf(stderr, PROG ": %s: %s\n", path, strerror(errno));
		return -1;
	}
	return 0;
}

/* Writes n curves as an SVG file. */
static int write_svg(const char *path, const struct sweep *sw, int n)
{
	FILE *f = fopen(path, "w");

	if (!f || sweep_svg(f, sw, n) < 0) {
		fprintf(stderr, PROG ": %s: %s\n", path, strerror(errno ? errno : EIO));
		if (f)
			fclose(f);
		return -1;
	}
	if (fclose(f) != 0) {
		fprintf(stderr, PROG ": %s: %s\n", path, strerror(errno));
		return -1;
	}
	return 0;
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

static int run_offline(const struct opts *o)
{
	struct ttl_plan pl = { .backlog = o->backlog, .slack = o->slack, .floor = o->floor,
			       .cap = o->cap };
	char label[64], buf[512], d[32];
	const double *set;
	bool dflt;
	int nset = settings(o, &set, &dflt);
	bool expo = o->have_rate && o->have_fail;

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

	if (o->json) {
		struct tc_jw j = { .f = stdout };
		tc_jw_open(&j, NULL, '{');
		tc_jw_str(&j, "mode", "offline");
		tc_jw_open(&j, "latency_s", '{');
		for (int i = 0; i < NPCT; i++)
			if (o->have_pv[i])
				tc_jw_num(&j, pct_label[i], o->pv[i]);
		tc_jw_close(&j, '}');
		tc_jw_str(&j, "percentile", label);
		jw_plan(&j, &pl);
		tc_jw_num(&j, "floor_s", pl.floor);
		tc_jw_num(&j, "cap_s", pl.cap);
		if (expo) {
			tc_jw_num(&j, "rate_per_s", o->rate);
			tc_jw_num(&j, "fail_p", o->fail);
			tc_jw_num(&j, "exposure_at_recommended",
				  ttl_exposure(o->rate, o->fail, pl.rec));
			tc_jw_str(&j, "exposure_line",
				  ttl_fmt_exposure(buf, sizeof(buf), o->rate, o->fail, pl.rec));
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
			tc_jw_num(&j, "room_s", set[i] - pl.t);
			tc_jw_str(&j, "room", ttl_fmt_room(buf, sizeof(buf), set[i], pl.t));
			if (expo) {
				tc_jw_num(&j, "exposure", ttl_exposure(o->rate, o->fail, set[i]));
				tc_jw_str(&j, "exposure_line", ttl_fmt_exposure(buf, sizeof(buf),
										o->rate, o->fail,
										set[i]));
			} else {
				tc_jw_null(&j, "exposure");
			}
			tc_jw_close(&j, '}');
		}
		tc_jw_close(&j, ']');
		tc_jw_close(&j, '}');
		return 0;
	}

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
	printf("  Lq = %s = %s\n", label, ttl_fmt_fixed(d, sizeof(d), pl.lq));
	printf("  %s\n", ttl_fmt_arith(buf, sizeof(buf), &pl));
	printf("  %s\n", ttl_fmt_recommend(buf, sizeof(buf), &pl));
	for (int i = 0; i < nset; i++)
		printf("  compared%s: %s\n", dflt ? " with the documented default" : "",
		       ttl_fmt_room(buf, sizeof(buf), set[i], pl.t));
	if (!expo) {
		printf("  stale exposure: give --rate and --fail to price failed predictions\n");
		return 0;
	}
	printf("  stale exposure, lambda x p x TTL:\n");
	printf("    at the recommended TTL: %s\n",
	       ttl_fmt_exposure(buf, sizeof(buf), o->rate, o->fail, pl.rec));
	for (int i = 0; i < nset; i++)
		printf("    at %s: %s\n", ttl_fmt_dur(d, sizeof(d), set[i]),
		       ttl_fmt_exposure(buf, sizeof(buf), o->rate, o->fail, set[i]));
	return 0;
}

/* ---- live ------------------------------------------------------------------------------------ */

struct live {
	const struct opts *o;
	const char *name;
	struct kvidx_reader *r;
	struct tc_jw j;
	char pct[32];       /* "p99" */
	double elapsed_s;   /* of the rate sample */
	uint32_t block_size;
	struct sweep *sw;   /* --sweep: one curve per pod shown (for --svg) */
	uint64_t (*sw_hist)[KV_HIST_BUCKETS]; /* the histogram snapshots they point to */
	int nsw;
};

static const char *const class_name[KV_PROMPT_CLASSES] = { "lt512", "512-2047", "2048-8191",
							   "ge8192" };

static uint64_t routes_of(const struct tc_pod *p)
{
	return p->ctr[KV_PC_routes_predicted] + p->ctr[KV_PC_routes_confirmed] +
	       p->ctr[KV_PC_routes_nomatch];
}

static void sleep_s(double s)
{
	struct timespec ts = { (time_t)s, (long)((s - (double)(time_t)s) * 1e9) };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* One latency histogram, copied once so that its count and percentiles agree. */
struct lat {
	uint64_t n;
	double p[NPCT]; /* seconds */
	double q;       /* at the chosen percentile */
};

static void lat_of(const uint64_t *h, double q, struct lat *out)
{
	uint64_t c[KV_HIST_BUCKETS], us;

	for (unsigned b = 0; b < KV_HIST_BUCKETS; b++)
		c[b] = ld_relaxed(&h[b]);
	out->n = kv_hist_count(c);
	for (int i = 0; i < NPCT; i++)
		out->p[i] = kv_hist_quantile(c, pct_q[i], &us) == 0 ? (double)us / 1e6 : 0;
	out->q = kv_hist_quantile(c, q, &us) == 0 ? (double)us / 1e6 : 0;
}

static const char *fresh_name(uint64_t sp)
{
	return sp == 0 ? "fresh" : sp == 1 ? "replaying-disconnected" :
	       sp == 2 ? "pipeline-broken" : "unknown";
}

/* docs/ttl.md's guidance for a pod, one line each, into g[]; returns how many. */
static int guidance(const struct live *L, const struct tc_pod *p, bool have_lq, char g[][256],
		    const char *backlog_note)
{
	const struct opts *o = L->o;
	uint64_t spec = routes_of(p), stale = p->ctr[KV_PC_routes_stale_expiries];
	uint64_t early = p->ctr[KV_PC_early_expiries], in_time = p->ctr[KV_PC_confirmed_in_time];
	uint64_t sp = p->ctr[KV_PC_spec_paused];
	char a[32], b[32];
	int n = 0;

	if (sp == 2)
		snprintf(g[n++], 256, "pipeline broken: fix the subscriber; do not stretch the TTL");
	else if (sp == 1 || (p->flags & KV_POD_SPEC_PAUSED))
		snprintf(g[n++], 256, "replaying or disconnected: speculation is paused until "
				      "events are fresh again; do not stretch the TTL over the gap");
	if (!have_lq)
		snprintf(g[n++], 256, "no confirmations yet: no measured Lq; start from the "
				      "documented 2 s default");
	if (backlog_note && backlog_note[0])
		snprintf(g[n++], 256, "%s", backlog_note);
	if (early + in_time >= MIN_JUDGE) {
		double fr = (double)early / (double)(early + in_time);
		if (fr > 1.0 - o->q + 1e-12)
			snprintf(g[n++], 256,
				 "early expiries high (%s%% of confirmed predictions, above the "
				 "%s%% a %s target accepts): TTL shorter than the event path",
				 ttl_fmt_num(a, sizeof(a), 100.0 * fr),
				 ttl_fmt_num(b, sizeof(b), 100.0 * (1.0 - o->q)), L->pct);
	}
	if (spec >= MIN_JUDGE) {
		double pf = (double)stale / (double)spec;
		if (pf > o->stale_limit)
			snprintf(g[n++], 256,
				 "stale expiries high (%s%% of routes, above the %s%% "
				 "limit): failed predictions or lost events; a longer TTL will not "
				 "help",
				 ttl_fmt_num(a, sizeof(a), 100.0 * pf),
				 ttl_fmt_num(b, sizeof(b), 100.0 * o->stale_limit));
	} else if (spec || early + in_time) {
		snprintf(g[n++], 256, "too few routes (%" PRIu64 ") to judge expiry rates; "
				      "%d or more needed", spec, MIN_JUDGE);
	}
	return n;
}

/* Prints (or adds to the JSON) one pod. prev: its first sample, or NULL. */
static void live_pod(struct live *L, const struct tc_pod *p, const struct tc_pod *prev,
		     uint64_t since_start_routes_ns)
{
	const struct opts *o = L->o;
	const struct kv_view *v = kv_reader_view(L->r);
	struct lat rec, cum;
	struct ttl_plan pl = { .backlog = o->backlog, .slack = o->slack, .floor = o->floor,
			       .cap = o->cap };
	char buf[512], d[32], d2[32], g[8][256], why[128] = "";
	uint64_t now = kvidx_now_ns();
	uint64_t spec = p->ctr[KV_PC_speculations], stale = p->ctr[KV_PC_stale_expiries];
	uint64_t ttl_ms = p->ctr[KV_PC_ttl_ms], last_ev = p->ctr[KV_PC_last_event_ns];
	uint64_t sp = p->ctr[KV_PC_spec_paused], routes = routes_of(p);
	double lambda = 0, pf = 0, ttl_in_force = (double)ttl_ms / 1000.0;
	uint64_t rstale = p->ctr[KV_PC_routes_stale_expiries];
	bool have_rate = false, have_p = routes > 0, have_lq;
	const char *src = NULL;

	lat_of(kv_view_pod_hist(v, p->idx, 1), o->q, &rec);
	lat_of(kv_view_pod_hist(v, p->idx, 0), o->q, &cum);
	if (!o->cumulative && rec.n) {
		pl.lq = rec.q;
		src = "recent";
	} else if (cum.n) {
		pl.lq = cum.q;
		src = o->cumulative ? "cumulative" : "cumulative (the recent window is empty)";
	}
	have_lq = src != NULL;

	/* J's backlog: the measured p99 of the event path lag unless --backlog was given. */
	struct lat lag_rec, lag_cum;
	lat_of(kv_view_pod_hist(v, p->idx, KV_HIST_LAG_RECENT), 0.99, &lag_rec);
	lat_of(kv_view_pod_hist(v, p->idx, KV_HIST_LAG), 0.99, &lag_cum);
	const struct lat *lag = lag_rec.n ? &lag_rec : lag_cum.n ? &lag_cum : NULL;
	const char *bsrc;
	if (o->have_backlog) {
		bsrc = "given (--backlog)";
	} else if (lag) {
		pl.backlog = lag->p[2];
		bsrc = lag == &lag_rec ? "measured: recent event lag p99" :
					 "measured: cumulative event lag p99";
	} else {
		bsrc = "assumed: no event lag measured yet";
	}
	if (have_lq)
		ttl_plan_compute(&pl);
	char bnote[256] = "";
	if (lag && have_lq && ttl_ms) {
		double room = ttl_in_force - pl.lq;
		if (room <= 0 || lag->p[2] > 0.5 * room)
			snprintf(bnote, sizeof(bnote),
				 "subscriber backlog eats most of the slack: event lag p99 %s against "
				 "the %s the TTL in force leaves over Lq; fix the subscriber's backlog "
				 "before stretching the TTL",
				 ttl_fmt_dur(d, sizeof(d), lag->p[2]),
				 ttl_fmt_dur(d2, sizeof(d2), room > 0 ? room : 0));
	}
	if (!bnote[0] && lag && o->have_backlog && lag->p[2] > o->backlog)
		snprintf(bnote, sizeof(bnote),
			 "measured event lag p99 %s exceeds the --backlog allowance of %s",
			 ttl_fmt_dur(d, sizeof(d), lag->p[2]), ttl_fmt_dur(d2, sizeof(d2), o->backlog));
	uint64_t srec = p->ctr[KV_PC_stale_expiries];
	double tokens = rstale ? (double)srec * L->block_size / (double)rstale : 0;
	uint64_t nq = !o->cumulative && rec.n ? rec.n : cum.n;

	/* lambda */
	if (o->since_start) {
		if (since_start_routes_ns) {
			lambda = (double)routes / ((double)since_start_routes_ns / 1e9);
			have_rate = true;
		} else {
			snprintf(why, sizeof(why), "the index was created just now");
		}
	} else if (!prev) {
		snprintf(why, sizeof(why), "the pod appeared during the sample");
	} else if (routes_of(prev) > routes) {
		snprintf(why, sizeof(why), "its route counters went back during the sample");
	} else {
		lambda = (double)(routes - routes_of(prev)) / L->elapsed_s;
		have_rate = true;
	}
	if (have_p)
		pf = (double)rstale / (double)routes;
	int ng = guidance(L, p, have_lq, g, bnote);
	double age = last_ev && now > last_ev ? (double)(now - last_ev) / 1e9 : 0;
	const double *set;
	bool dflt;
	int nset = settings(o, &set, &dflt);
	bool expo = have_rate && have_p;

	if (o->hist_out)
		save_hist(o->hist_out, p->name, kv_view_pod_hist(v, p->idx, 1));
	struct sweep *sw = NULL;
	if (o->sweep) {
		const uint64_t *h = kv_view_pod_hist(v, p->idx, !o->cumulative && rec.n ? 1 : 0);
		sw = &L->sw[L->nsw];
		for (unsigned bk = 0; bk < KV_HIST_BUCKETS; bk++)
			L->sw_hist[L->nsw][bk] = ld_relaxed(&h[bk]);
		*sw = (struct sweep){ .in = { .label = p->name, .rec = have_lq ? pl.rec : 0,
					      .in_force = ttl_in_force, .have_expo = expo,
					      .lambda = lambda, .p = pf, .tokens = tokens,
					      .hist = L->sw_hist[L->nsw], .ttls = o->ttls,
					      .nttl = o->nttl, .cap = o->cap } };
		sweep_compute(sw);
		L->nsw++;
	}

	if (o->json) {
		struct tc_jw *j = &L->j;
		tc_jw_open(j, p->name, '{');
		tc_jw_u64(j, "index", (uint64_t)p->idx);
		tc_jw_str(j, "model", p->model);
		tc_jw_u64(j, "confirmations_recent", rec.n);
		tc_jw_u64(j, "confirmations_cumulative", cum.n);
		for (int w = 0; w < 2; w++) {
			const struct lat *l = w ? &cum : &rec;
			const char *key = w ? "latency_cumulative_s" : "latency_recent_s";
			if (!l->n) {
				tc_jw_null(j, key);
				continue;
			}
			tc_jw_open(j, key, '{');
			for (int i = 0; i < NPCT; i++)
				tc_jw_num(j, pct_label[i], l->p[i]);
			tc_jw_close(j, '}');
		}
		if (have_lq) {
			tc_jw_str(j, "lq_source", src);
			jw_plan(j, &pl);
		} else {
			tc_jw_null(j, "lq_source");
			tc_jw_null(j, "lq_s");
			tc_jw_null(j, "t_s");
			tc_jw_null(j, "recommended_s");
		}
		if (ttl_ms) {
			tc_jw_num(j, "ttl_in_force_s", ttl_in_force);
			if (have_lq)
				tc_jw_num(j, "room_s", ttl_in_force - pl.t);
		} else {
			tc_jw_null(j, "ttl_in_force_s");
		}
		tc_jw_u64(j, "speculations", spec);
		tc_jw_u64(j, "confirmed_in_time", p->ctr[KV_PC_confirmed_in_time]);
		tc_jw_u64(j, "early_expiries", p->ctr[KV_PC_early_expiries]);
		tc_jw_u64(j, "stale_expiries", stale);
		tc_jw_u64(j, "late_confirmations", p->ctr[KV_PC_late_confirmations]);
		tc_jw_u64(j, "routes", routes);
		if (have_rate)
			tc_jw_num(j, "rate_per_s", lambda);
		else
			tc_jw_null(j, "rate_per_s");
		if (have_p)
			tc_jw_num(j, "fail_p", pf);
		else
			tc_jw_null(j, "fail_p");
		tc_jw_str(j, "fail_p_source", "stale routes / routes");
		if (expo && have_lq)
			tc_jw_num(j, "exposure_at_recommended", ttl_exposure(lambda, pf, pl.rec));
		else
			tc_jw_null(j, "exposure_at_recommended");
		if (expo && ttl_ms)
			tc_jw_num(j, "exposure_at_ttl_in_force",
				  ttl_exposure(lambda, pf, ttl_in_force));
		else
			tc_jw_null(j, "exposure_at_ttl_in_force");
		if (o->nttl) {
			tc_jw_open(j, "compared", '[');
			for (int i = 0; i < nset; i++) {
				tc_jw_open(j, NULL, '{');
				tc_jw_num(j, "ttl_s", set[i]);
				if (have_lq)
					tc_jw_num(j, "room_s", set[i] - pl.t);
				if (expo)
					tc_jw_num(j, "exposure", ttl_exposure(lambda, pf, set[i]));
				tc_jw_close(j, '}');
			}
			tc_jw_close(j, ']');
		}
		for (int w = 0; w < 2; w++) {
			const struct lat *l = w ? &lag_cum : &lag_rec;
			const char *key = w ? "event_lag_cumulative_s" : "event_lag_recent_s";
			if (!l->n) {
				tc_jw_null(j, key);
				continue;
			}
			tc_jw_open(j, key, '{');
			tc_jw_u64(j, "batches", l->n);
			for (int i = 0; i < NPCT; i++)
				tc_jw_num(j, pct_label[i], l->p[i]);
			tc_jw_close(j, '}');
		}
		tc_jw_str(j, "backlog_source", bsrc);
		tc_jw_num(j, "j_backlog_s", pl.backlog);
		tc_jw_u64(j, "lag_negative", p->ctr[KV_PC_lag_negative]);
		tc_jw_u64(j, "queue_depth", p->ctr[KV_PC_queue_depth]);
		tc_jw_u64(j, "queue_depth_peak", p->ctr[KV_PC_queue_depth_peak]);
		if (bnote[0])
			tc_jw_str(j, "backlog_warning", bnote);
		else
			tc_jw_null(j, "backlog_warning");
		tc_jw_open(j, "per_route", '{');
		tc_jw_u64(j, "spec_routes", p->ctr[KV_PC_spec_routes]);
		tc_jw_u64(j, "in_time", p->ctr[KV_PC_routes_in_time]);
		tc_jw_u64(j, "early_expiries", p->ctr[KV_PC_routes_early_expiries]);
		tc_jw_u64(j, "late_confirmations", p->ctr[KV_PC_routes_late_confirmations]);
		tc_jw_u64(j, "stale_expiries", rstale);
		tc_jw_u64(j, "dropped_clear", p->ctr[KV_PC_routes_dropped_clear]);
		tc_jw_u64(j, "dropped_removed", p->ctr[KV_PC_routes_dropped_removed]);
		tc_jw_u64(j, "dropped_evicted", p->ctr[KV_PC_routes_dropped_evicted]);
		tc_jw_u64(j, "untracked", p->ctr[KV_PC_routes_untracked]);
		tc_jw_num(j, "tokens_per_failed_route", tokens);
		tc_jw_close(j, '}');
		tc_jw_open(j, "records_dropped", '{');
		tc_jw_u64(j, "clear", p->ctr[KV_PC_dropped_clear]);
		tc_jw_u64(j, "removed", p->ctr[KV_PC_dropped_removed]);
		tc_jw_u64(j, "evicted", p->ctr[KV_PC_dropped_evicted]);
		tc_jw_close(j, '}');
		tc_jw_open(j, "latency_by_prompt_class_s", '{');
		for (unsigned c = 0; c < KV_PROMPT_CLASSES; c++) {
			struct lat cl;
			lat_of(kv_view_pod_hist(v, p->idx, KV_HIST_CLASS(c)), o->q, &cl);
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
		if (sw) {
			tc_jw_open(j, "sweep", '{');
			sweep_json(j, sw);
			tc_jw_close(j, '}');
		}
		tc_jw_str(j, "freshness", fresh_name(sp));
		tc_jw_u64(j, "spec_paused", sp);
		tc_jw_bool(j, "spec_paused_flag", p->flags & KV_POD_SPEC_PAUSED);
		if (last_ev)
			tc_jw_num(j, "seconds_since_last_event", age);
		else
			tc_jw_null(j, "seconds_since_last_event");
		tc_jw_open(j, "guidance", '[');
		for (int i = 0; i < ng; i++)
			tc_jw_str(j, NULL, g[i]);
		tc_jw_close(j, ']');
		tc_jw_close(j, '}');
		return;
	}

	printf("\npod ");
	tc_text_str(stdout, p->name);
	printf(" (model \"");
	tc_text_str(stdout, p->model);
	printf("\")\n");
	if (sw) { /* --sweep: the arithmetic and the curve */
		if (have_lq) {
			printf("  %s\n", ttl_fmt_arith(buf, sizeof(buf), &pl));
			printf("  %s\n", ttl_fmt_recommend(buf, sizeof(buf), &pl));
		}
		printf("  J's backlog: %s\n", bsrc);
		sweep_print_text(stdout, sw);
		for (int i = 0; i < ng; i++)
			printf("  guidance: %s\n", g[i]);
		return;
	}
	for (int w = 0; w < 2; w++) {
		const struct lat *l = w ? &cum : &rec;
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
		const struct lat *l = w ? &lag_cum : &lag_rec;
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
	       bsrc, p->ctr[KV_PC_queue_depth], p->ctr[KV_PC_queue_depth_peak],
	       p->ctr[KV_PC_lag_negative]);
	printf("  latency by prompt length (recent):");
	for (unsigned c = 0; c < KV_PROMPT_CLASSES; c++) {
		struct lat cl;
		lat_of(kv_view_pod_hist(v, p->idx, KV_HIST_CLASS(c)), o->q, &cl);
		printf("%s %s", c ? ";" : "", class_name[c]);
		if (!cl.n) {
			printf(" -");
			continue;
		}
		printf(" (%" PRIu64 ") p50 %s p99 %s", cl.n, ttl_fmt_dur(d, sizeof(d), cl.p[0]),
		       ttl_fmt_dur(d2, sizeof(d2), cl.p[2]));
	}
	printf("\n");
	if (have_lq) {
		printf("  Lq = %s of %s latency = %s", L->pct, src, ttl_fmt_fixed(d, sizeof(d), pl.lq));
		if ((double)nq * (1.0 - o->q) <= 1.0 && o->q < 1.0)
			printf(" (only %" PRIu64 " confirmation%s: the %s is the slowest one seen)", nq,
			       nq == 1 ? "" : "s", L->pct);
		printf("\n  %s\n", ttl_fmt_arith(buf, sizeof(buf), &pl));
		printf("  %s\n", ttl_fmt_recommend(buf, sizeof(buf), &pl));
	}
	if (ttl_ms) {
		printf("  TTL in force %s", ttl_fmt_dur(d, sizeof(d), ttl_in_force));
		if (have_lq)
			printf(": %s", ttl_fmt_room(buf, sizeof(buf), ttl_in_force, pl.t));
		printf("\n");
	} else {
		printf("  TTL in force: not reported (pod counter ttl_ms is 0)\n");
	}
	for (int i = 0; i < o->nttl && have_lq; i++)
		printf("  compared: %s\n", ttl_fmt_room(buf, sizeof(buf), set[i], pl.t));
	printf("  speculations %" PRIu64 ", confirmed in time %" PRIu64 ", early expiries %" PRIu64
	       ", stale expiries %" PRIu64 ", late confirmations %" PRIu64 "\n",
	       spec, p->ctr[KV_PC_confirmed_in_time], p->ctr[KV_PC_early_expiries], stale,
	       p->ctr[KV_PC_late_confirmations]);
	if (have_rate && o->since_start)
		printf("  routed rate lambda = %s /s (%" PRIu64 " routes in %s since the index "
		       "generation was created)\n",
		       ttl_fmt_num(d, sizeof(d), lambda), routes,
		       ttl_fmt_dur(d2, sizeof(d2), (double)since_start_routes_ns / 1e9));
	else if (have_rate)
		printf("  routed rate lambda = %s /s (%" PRIu64 " routes in a %s sample)\n",
		       ttl_fmt_num(d, sizeof(d), lambda), routes - routes_of(prev),
		       ttl_fmt_dur(d2, sizeof(d2), L->elapsed_s));
	else
		printf("  routed rate lambda: unknown (%s)\n", why);
	printf("  per route: %" PRIu64 " with new predictions; in time %" PRIu64 ", early "
	       "expiries %" PRIu64 ", stale %" PRIu64 ", dropped by clear %" PRIu64 ", by "
	       "BlockRemoved %" PRIu64 ", by eviction %" PRIu64 ", untracked %" PRIu64 "\n",
	       p->ctr[KV_PC_spec_routes], p->ctr[KV_PC_routes_in_time],
	       p->ctr[KV_PC_routes_early_expiries], rstale, p->ctr[KV_PC_routes_dropped_clear],
	       p->ctr[KV_PC_routes_dropped_removed], p->ctr[KV_PC_routes_dropped_evicted],
	       p->ctr[KV_PC_routes_untracked]);
	printf("  records dropped before expiry: clear %" PRIu64 ", BlockRemoved %" PRIu64
	       ", eviction %" PRIu64 "\n", p->ctr[KV_PC_dropped_clear],
	       p->ctr[KV_PC_dropped_removed], p->ctr[KV_PC_dropped_evicted]);
	if (have_p)
		printf("  failed-prediction probability p = stale routes / routes = %" PRIu64
		       " / %" PRIu64 " = %s\n", rstale, routes, ttl_fmt_num(d, sizeof(d), pf));
	else
		printf("  failed-prediction probability p: no routes yet\n");
	if (rstale)
		printf("  token-weighted: %" PRIu64 " stale records x %u tokens over %" PRIu64
		       " stale routes = %s prefix tokens at stake per failed route\n",
		       srec, L->block_size, rstale, ttl_fmt_num(d, sizeof(d), tokens));
	if (expo) {
		if (have_lq)
			printf("  stale exposure at the recommended TTL: %s\n",
			       ttl_fmt_exposure(buf, sizeof(buf), lambda, pf, pl.rec));
		if (ttl_ms)
			printf("  stale exposure at the TTL in force:    %s\n",
			       ttl_fmt_exposure(buf, sizeof(buf), lambda, pf, ttl_in_force));
		for (int i = 0; i < o->nttl; i++)
			printf("  stale exposure at %s: %s\n", ttl_fmt_dur(d, sizeof(d), set[i]),
			       ttl_fmt_exposure(buf, sizeof(buf), lambda, pf, set[i]));
	}
	printf("  freshness: %s", sp == 0 ? "fresh" : sp == 1 ? "replaying or disconnected" :
				    sp == 2 ? "pipeline broken" : "unknown state");
	if (sp > 2)
		printf(" (spec_paused %" PRIu64 ")", sp);
	if (p->flags & KV_POD_SPEC_PAUSED)
		printf(", speculation paused");
	if (last_ev)
		printf(", last event %s ago\n", ttl_fmt_dur(d, sizeof(d), age));
	else
		printf(", no events yet\n");
	for (int i = 0; i < ng; i++)
		printf("  guidance: %s\n", g[i]);
}

/* Router workers (registry slots) that committed routes: counters and latency summary. */
static void live_routers(struct live *L)
{
	const struct kv_view *v = kv_reader_view(L->r);
	const struct opts *o = L->o;
	uint64_t now = kvidx_now_ns();
	char d[32], d2[32], d3[32];
	int shown = 0;

	if (o->json)
		tc_jw_open(&L->j, "routers", '{');
	for (uint32_t s = 0; s < v->max_readers; s++) {
		const struct kvidx_router *rt = kv_view_router(v, (int)s);
		uint64_t c[KV_RT_COUNT];
		struct lat l;
		char key[16];
		if (!tc_router_snapshot(v, s, c))
			continue;
		lat_of(rt->rt_hist, o->q, &l);
		double age = c[KV_RT_last_route_ns] && now > c[KV_RT_last_route_ns] ?
				     (double)(now - c[KV_RT_last_route_ns]) / 1e9 : 0;
		if (o->json) {
			snprintf(key, sizeof(key), "%u", s);
			tc_jw_open(&L->j, key, '{');
			tc_jw_u64(&L->j, "pid", c[KV_RT_pid]);
			tc_jw_u64(&L->j, "routes", c[KV_RT_routes]);
			tc_jw_u64(&L->j, "routes_predicted", c[KV_RT_routes_predicted]);
			tc_jw_u64(&L->j, "routes_confirmed", c[KV_RT_routes_confirmed]);
			tc_jw_u64(&L->j, "routes_nomatch", c[KV_RT_routes_nomatch]);
			tc_jw_u64(&L->j, "spec_routes", c[KV_RT_spec_routes]);
			tc_jw_u64(&L->j, "routes_in_time", c[KV_RT_routes_in_time]);
			tc_jw_u64(&L->j, "routes_early_expiries", c[KV_RT_routes_early_expiries]);
			tc_jw_u64(&L->j, "routes_stale_expiries", c[KV_RT_routes_stale_expiries]);
			tc_jw_u64(&L->j, "routes_dropped", c[KV_RT_routes_dropped]);
			tc_jw_u64(&L->j, "outcomes", c[KV_RT_outcomes]);
			tc_jw_u64(&L->j, "false_warm_routes", c[KV_RT_false_warm_routes]);
			tc_jw_u64(&L->j, "wasted_prefill_tokens", c[KV_RT_wasted_prefill_tokens]);
			tc_jw_num(&L->j, "seconds_since_last_route", age);
			if (l.n) {
				tc_jw_open(&L->j, "latency_recent_s", '{');
				tc_jw_u64(&L->j, "n", l.n);
				for (int i = 0; i < NPCT; i++)
					tc_jw_num(&L->j, pct_label[i], l.p[i]);
				tc_jw_close(&L->j, '}');
			} else {
				tc_jw_null(&L->j, "latency_recent_s");
			}
			tc_jw_close(&L->j, '}');
			continue;
		}
		if (!shown++)
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
		if (l.n)
			printf("; latency (recent, %" PRIu64 ") p50 %s p95 %s p99 %s", l.n,
			       ttl_fmt_dur(d, sizeof(d), l.p[0]), ttl_fmt_dur(d2, sizeof(d2), l.p[1]),
			       ttl_fmt_dur(d3, sizeof(d3), l.p[2]));
		printf("\n");
	}
	if (o->json)
		tc_jw_close(&L->j, '}');
}

static int run_live(const struct opts *o)
{
	struct live L = { .o = o, .name = o->name, .j = { .f = stdout } };
	struct tc_pod *a = NULL, *b = NULL;
	struct kvidx_info info;
	uint64_t gen0, t0, t1, since = 0;
	int na = 0, nb, status = 0;
	char d[32], d2[32], d3[32], d4[32];

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

	if (o->json) {
		tc_jw_open(&L.j, NULL, '{');
		tc_jw_str(&L.j, "mode", o->sweep ? "sweep-live" : "live");
		tc_jw_str(&L.j, "index", L.name);
		tc_jw_num(&L.j, "percentile", o->q);
		tc_jw_str(&L.j, "percentile_name", L.pct);
		tc_jw_str(&L.j, "lq_window", o->cumulative ? "cumulative" : "recent");
		if (o->have_backlog)
			tc_jw_num(&L.j, "backlog_s", o->backlog);
		else
			tc_jw_str(&L.j, "backlog_s", "measured");
		tc_jw_num(&L.j, "slack_s", o->slack);
		tc_jw_num(&L.j, "floor_s", o->floor);
		tc_jw_num(&L.j, "cap_s", o->cap);
		tc_jw_str(&L.j, "rate_source", o->since_start ? "since-start" : "interval");
		tc_jw_num(&L.j, "rate_window_s",
			  o->since_start ? (double)since / 1e9 : L.elapsed_s);
		tc_jw_u64(&L.j, "active_pods", (uint64_t)nb);
		tc_jw_open(&L.j, "pods", '{');
	} else {
		if (o->have_backlog)
			ttl_fmt_dur(d, sizeof(d), o->backlog);
		else
			snprintf(d, sizeof(d), "measured p99");
		printf("index %s: %d active pod%s; Lq = %s of %s route-to-confirmation latency, "
		       "J = %s backlog + %s slack, cap %s",
		       L.name, nb, nb == 1 ? "" : "s", L.pct,
		       o->cumulative ? "cumulative" : "recent", d,
		       ttl_fmt_dur(d2, sizeof(d2), o->slack), ttl_fmt_dur(d3, sizeof(d3), o->cap));
		if (o->floor > 0)
			printf(", floor %s", ttl_fmt_dur(d4, sizeof(d4), o->floor));
		printf("\n(percentiles are histogram bucket upper bounds, at most 12.5%% above the "
		       "true value)\n");
	}
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

/* ---- command line ----------------------------------------------------------------------------- */

static void usage(FILE *f)
{
	fputs("Usage: " PROG " [OPTION]...   (live: from an index)\n"
	      "       " PROG " --p99 D [--p95 D] [--p50 D] | --lq D [OPTION]...   (offline)\n"
	      "Sizes the speculative TTL from route-to-confirmation latency: T = Lq + J, with Lq a\n"
	      "high percentile of the latency and J = backlog + slack; recommends T clamped to the\n"
	      "cap; prices failed predictions as lambda x p x TTL (live failed predictions, in\n"
	      "requests' worth). Arithmetic in full precision, rounded only when printed.\n"
	      "\n"
	      "Offline, from numbers (any of the options below selects it):\n"
	      "  --p50 D, --p95 D, --p99 D   measured latency percentiles; Lq is the highest\n"
	      "                    given, or the one --percentile names (0.5, 0.95 or 0.99)\n"
	      "  --lq D            Lq directly (label it with --percentile or --percentile-name)\n"
	      "  --percentile-name NAME  how to call Lq in the output (e.g. p99)\n"
	      "  --rate R          routed requests per second (lambda)\n"
	      "  --fail P          failed-prediction probability p, 0.004 or 0.4%\n"
	      "                    (--rate and --fail go together)\n"
	      "  --histogram FILE  (--sweep) the latency distribution as a saved histogram\n"
	      "                    (--save-histogram writes one: lines LOWER_US COUNT)\n"
	      "  --in-force D      (--sweep) the TTL in force, marked on the curve\n"
	      "  --tokens N        (--sweep) prefix tokens a failed route puts at stake\n"
	      "\n"
	      "Live, from an index (when no offline numbers are given), per active pod: recent and\n"
	      "cumulative latency p50/p95/p99 from its histograms, T, the recommendation, the TTL\n"
	      "in force (counter ttl_ms), the event path lag p50/p95/p99 (batch ts to applied:\n"
	      "the measured backlog, J's backlog term unless --backlog is given), latency by\n"
	      "prompt length, speculations, confirmed in time, early and stale expiries, late\n"
	      "confirmations, the same per route and dropped predictions by cause, lambda (route\n"
	      "counters), p = stale routes / routes, tokens at stake per failed route, exposure at\n"
	      "the recommended TTL and at the TTL in force, freshness, docs/ttl.md's guidance where\n"
	      "it applies (and a warning when backlog eats most of the slack), then per router\n"
	      "worker (registry slot) its routes and latency.\n"
	      "  --name NAME       index to read (default \"" KVIDX_DEFAULT_NAME "\")\n"
	      "  --pod NAME        only this pod (exit status 1 if it is not active)\n"
	      "  --interval D      lambda from route counters sampled twice D apart (default 1s)\n"
	      "  --since-start     lambda from the counters over the index generation's age\n"
	      "                    instead (no wait)\n"
	      "  --cumulative      Lq from the cumulative histogram, not the recent one (the recent\n"
	      "                    one halves every 60 s; when it is empty the cumulative is used)\n"
	      "  --save-histogram FILE  write the --pod's recent latency histogram (for\n"
	      "                    --sweep --histogram elsewhere)\n"
	      "  --stale-limit P   stale routes above this share of routes are called\n"
	      "                    high (default 1%, or 0.01); early expiries are high above the\n"
	      "                    share of confirmed predictions the percentile accepts (1% for\n"
	      "                    p99). Each is judged once it has 100 speculations, or 100\n"
	      "                    confirmed predictions, to go on.\n"
	      "\n"
	      "Both:\n"
	      "  --percentile Q    0 < Q <= 1, as 0.99 or 99%. Live: Lq's percentile (default\n"
	      "                    0.99). Offline: which of --p50/--p95/--p99 is Lq, or the\n"
	      "                    label of --lq\n"
	      "  --backlog D       J's allowance for subscriber backlog (live default: the pod's\n"
	      "                    measured event lag p99, 250ms until one is measured; offline\n"
	      "                    default 250ms)\n"
	      "  --slack D         J's allowance for timing slack and resolution (default 100ms)\n"
	      "  --cap D           the longest stale window the routing SLO permits (default 5s,\n"
	      "                    at most 65.535s, the index's largest TTL)\n"
	      "  --floor D         never recommend less (default 0: none)\n"
	      "  --ttl D           a setting to compare: the room it leaves over T and its\n"
	      "                    exposure; repeatable up to 8 times. Offline, without --ttl, the\n"
	      "                    documented 2 s default is compared.\n"
	      "  --sweep           the TTL curve: for candidate TTLs (the --ttl values, else a\n"
	      "                    range around the recommendation and the TTL in force, both\n"
	      "                    marked) the share of successful predictions that would expire\n"
	      "                    early (P(latency > T) from the recent histogram, the\n"
	      "                    --histogram, or log-linear between the given percentiles),\n"
	      "                    live failed predictions lambda x p x T, the same in prefix\n"
	      "                    tokens, and the routes per second that would lose their\n"
	      "                    prediction\n"
	      "  --svg FILE        (--sweep) also draw the curve: early-expiry share and stale\n"
	      "                    exposure against T, one panel per pod\n"
	      "  --json            one JSON object (live: a member per pod under \"pods\")\n"
	      "  -h, --help        print this help and exit\n"
	      "\n"
	      "Durations D: a number with a unit, us, ms, s or m (minutes): 250ms, 1.15s; 0 alone.\n"
	      "Example (docs/ttl.md's): " PROG " --p99 1.15s --backlog 250ms --slack 100ms --rate 120\n"
	      "  --fail 0.004 --ttl 2s --ttl 5s   gives T = 1.500 s, 500 ms of room at 2 s, and\n"
	      "  0.72 requests' worth of live failed predictions (2.4 at 5 s).\n"
	      "\n"
	      "Exit status: 0 on success, 1 if the index cannot be read or the --pod is not active,\n"
	      "2 on bad usage.\n",
	      f);
}

int main(int argc, char **argv)
{
	enum { OPT_P50 = 256, OPT_P95, OPT_P99, OPT_LQ, OPT_PERCENTILE, OPT_PCT_NAME, OPT_BACKLOG,
	       OPT_SLACK, OPT_CAP, OPT_FLOOR, OPT_RATE, OPT_FAIL, OPT_TTL, OPT_NAME, OPT_POD,
	       OPT_INTERVAL, OPT_SINCE_START, OPT_CUMULATIVE, OPT_STALE_LIMIT, OPT_JSON, OPT_SWEEP,
	       OPT_SVG, OPT_HISTOGRAM, OPT_SAVE_HISTOGRAM, OPT_IN_FORCE, OPT_TOKENS };
	static const struct option longopts[] = {
		{ "p50", required_argument, NULL, OPT_P50 },
		{ "p95", required_argument, NULL, OPT_P95 },
		{ "p99", required_argument, NULL, OPT_P99 },
		{ "lq", required_argument, NULL, OPT_LQ },
		{ "percentile", required_argument, NULL, OPT_PERCENTILE },
		{ "percentile-name", required_argument, NULL, OPT_PCT_NAME },
		{ "backlog", required_argument, NULL, OPT_BACKLOG },
		{ "slack", required_argument, NULL, OPT_SLACK },
		{ "cap", required_argument, NULL, OPT_CAP },
		{ "floor", required_argument, NULL, OPT_FLOOR },
		{ "rate", required_argument, NULL, OPT_RATE },
		{ "fail", required_argument, NULL, OPT_FAIL },
		{ "ttl", required_argument, NULL, OPT_TTL },
		{ "name", required_argument, NULL, OPT_NAME },
		{ "pod", required_argument, NULL, OPT_POD },
		{ "interval", required_argument, NULL, OPT_INTERVAL },
		{ "since-start", no_argument, NULL, OPT_SINCE_START },
		{ "cumulative", no_argument, NULL, OPT_CUMULATIVE },
		{ "stale-limit", required_argument, NULL, OPT_STALE_LIMIT },
		{ "json", no_argument, NULL, OPT_JSON },
		{ "sweep", no_argument, NULL, OPT_SWEEP },
		{ "svg", required_argument, NULL, OPT_SVG },
		{ "histogram", required_argument, NULL, OPT_HISTOGRAM },
		{ "save-histogram", required_argument, NULL, OPT_SAVE_HISTOGRAM },
		{ "in-force", required_argument, NULL, OPT_IN_FORCE },
		{ "tokens", required_argument, NULL, OPT_TOKENS },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct opts o = { .name = KVIDX_DEFAULT_NAME, .q = 0.99, .backlog = 0.25, .slack = 0.1,
			  .cap = 5.0, .interval = 1.0, .stale_limit = 0.01 };
	const char *live_opt = NULL, *offline_opt = NULL;
	int c, rc;

	tc_prog = PROG;
	opterr = 0; /* This program prints its own messages, naming itself PROG. */
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		switch (c) {
		case OPT_P50:
		case OPT_P95:
		case OPT_P99:
			o.pv[c - OPT_P50] = tc_arg_duration(c == OPT_P50 ? "p50" :
							     c == OPT_P95 ? "p95" : "p99", optarg);
			o.have_pv[c - OPT_P50] = true;
			offline_opt = pct_label[c - OPT_P50];
			break;
		case OPT_LQ:
			o.lq = tc_arg_duration("lq", optarg);
			o.have_lq = true;
			offline_opt = "lq";
			break;
		case OPT_PERCENTILE:
			if (ttl_parse_probability(optarg, &o.q) < 0 || o.q <= 0)
				tc_usage_error("bad --percentile '%s': expected a number in (0, 1] "
					       "such as 0.99, or a percentage such as 99%%",
					       optarg);
			o.have_q = true;
			break;
		case OPT_PCT_NAME:
			if (!*optarg || strlen(optarg) > 16 ||
			    strspn(optarg, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
					   "0123456789._-") != strlen(optarg))
				tc_usage_error("bad --percentile-name '%s': expected 1 to 16 of "
					       "[A-Za-z0-9._-], such as p99", optarg);
			o.pct_name = optarg;
			offline_opt = "percentile-name";
			break;
		case OPT_BACKLOG:
			o.backlog = tc_arg_duration("backlog", optarg);
			o.have_backlog = true;
			break;
		case OPT_SLACK:
			o.slack = tc_arg_duration("slack", optarg);
			break;
		case OPT_CAP:
			o.cap = tc_arg_duration("cap", optarg);
			if (o.cap <= 0 || o.cap > KVIDX_MAX_TTL_MS / 1000.0)
				tc_usage_error("bad --cap '%s': expected more than 0 and at most "
					       "65.535s (the index stores TTLs in 16-bit "
					       "milliseconds)", optarg);
			break;
		case OPT_FLOOR:
			o.floor = tc_arg_duration("floor", optarg);
			break;
		case OPT_RATE:
			if (ttl_parse_number(optarg, &o.rate) < 0)
				tc_usage_error("bad --rate '%s': expected routed requests per "
					       "second, a plain non-negative number such as 120",
					       optarg);
			o.have_rate = true;
			offline_opt = "rate";
			break;
		case OPT_FAIL:
			rc = ttl_parse_probability(optarg, &o.fail);
			if (rc < 0)
				tc_usage_error("bad --fail '%s': expected a probability in [0, 1] "
					       "such as 0.004, or a percentage such as 0.4%%",
					       optarg);
			o.have_fail = true;
			offline_opt = "fail";
			break;
		case OPT_TTL:
			if (o.nttl == MAX_TTLS)
				tc_usage_error("too many --ttl settings (at most %d)", MAX_TTLS);
			o.ttls[o.nttl] = tc_arg_duration("ttl", optarg);
			if (o.ttls[o.nttl] <= 0)
				tc_usage_error("bad --ttl '%s': a TTL must be longer than 0",
					       optarg);
			o.nttl++;
			break;
		case OPT_NAME:
			o.name = tc_index_name_arg(optarg);
			live_opt = "name";
			break;
		case OPT_POD:
			o.pod = optarg;
			live_opt = "pod";
			break;
		case OPT_INTERVAL:
			o.interval = tc_arg_duration("interval", optarg);
			if (o.interval <= 0 || o.interval > INTERVAL_MAX_S)
				tc_usage_error("bad --interval '%s': expected more than 0 and at "
					       "most an hour", optarg);
			o.have_interval = true;
			live_opt = "interval";
			break;
		case OPT_SINCE_START:
			o.since_start = true;
			live_opt = "since-start";
			break;
		case OPT_CUMULATIVE:
			o.cumulative = true;
			live_opt = "cumulative";
			break;
		case OPT_STALE_LIMIT:
			if (ttl_parse_probability(optarg, &o.stale_limit) < 0)
				tc_usage_error("bad --stale-limit '%s': expected a share in [0, 1] "
					       "such as 0.01, or a percentage such as 1%%", optarg);
			live_opt = "stale-limit";
			break;
		case OPT_JSON:
			o.json = true;
			break;
		case OPT_SWEEP:
			o.sweep = true;
			break;
		case OPT_SVG:
			o.svg = optarg;
			break;
		case OPT_HISTOGRAM:
			o.hist_in = optarg;
			offline_opt = "histogram";
			break;
		case OPT_SAVE_HISTOGRAM:
			o.hist_out = optarg;
			live_opt = "save-histogram";
			break;
		case OPT_IN_FORCE:
			o.in_force = tc_arg_duration("in-force", optarg);
			if (o.in_force <= 0)
				tc_usage_error("bad --in-force '%s': a TTL must be longer than 0",
					       optarg);
			o.have_in_force = true;
			offline_opt = "in-force";
			break;
		case OPT_TOKENS:
			if (ttl_parse_number(optarg, &o.tokens) < 0)
				tc_usage_error("bad --tokens '%s': expected prefix tokens per failed "
					       "route, a plain non-negative number such as 2048",
					       optarg);
			o.have_tokens = true;
			offline_opt = "tokens";
			break;
		default: /* 'h', ':' or '?' */
			tc_getopt_default(c, argv, usage);
		}
	}
	if (optind < argc)
		tc_usage_error("unexpected argument '%s'", argv[optind]);
	if (o.floor > o.cap)
		tc_usage_error("--floor (%gs) is above --cap (%gs)", o.floor, o.cap);
	if (o.svg && !o.sweep)
		tc_usage_error("--svg draws the TTL curve: it goes with --sweep");
	if (o.hist_out && !o.pod)
		tc_usage_error("--save-histogram saves one pod's histogram: give --pod");
	if (!o.sweep && (o.have_in_force || o.have_tokens))
		tc_usage_error("--%s is an input of the TTL curve: it goes with --sweep",
			       o.have_in_force ? "in-force" : "tokens");

	if (offline_opt) {
		if (live_opt)
			tc_usage_error("--%s reads a live index, but --%s gives offline numbers; "
				       "use one mode or the other", live_opt, offline_opt);
		bool any_pv = o.have_pv[0] || o.have_pv[1] || o.have_pv[2];
		if (o.hist_in && (o.have_lq || any_pv))
			tc_usage_error("--histogram gives the latency distribution; it does not go "
				       "with --lq, --p50, --p95 or --p99");
		if (o.hist_in && !o.sweep)
			tc_usage_error("--histogram is an input of the TTL curve: it goes with "
				       "--sweep");
		if (!o.have_lq && !any_pv && !o.hist_in)
			tc_usage_error("offline mode needs a latency percentile: --p99, --p95, "
				       "--p50 or --lq (or, with --sweep, --histogram)");
		if (o.have_lq && any_pv)
			tc_usage_error("--lq gives Lq directly; it does not go with --p50, --p95 or "
				       "--p99 (give one or the other)");
		if (o.have_rate != o.have_fail)
			tc_usage_error("--rate and --fail go together (stale exposure is lambda x "
				       "p x T); --%s is missing", o.have_rate ? "fail" : "rate");
		if (!o.have_lq && !o.hist_in && o.have_q) {
			bool found = false;
			for (int i = 0; i < NPCT; i++)
				found |= o.have_pv[i] && o.q > pct_q[i] - 1e-9 &&
					 o.q < pct_q[i] + 1e-9;
			if (!found) {
				char qn[32], pn[32];
				tc_usage_error("--percentile %s selects the %s, which was not "
					       "given (give it with --p50, --p95 or --p99, or give "
					       "--lq)", ttl_fmt_num(qn, sizeof(qn), o.q),
					       ttl_fmt_pct_name(pn, sizeof(pn), o.q));
			}
		}
		rc = run_offline(&o);
	} else {
		if (o.have_interval && o.since_start)
			tc_usage_error("--interval and --since-start are two ways to measure "
				       "lambda; give one");
		rc = run_live(&o);
	}
	return tc_flush_stdout() ? 1 : rc;
}
