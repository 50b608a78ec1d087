/*
 * sweep.c — the TTL curve of kvidx-ttl --sweep: candidate TTLs, the early-expiry share from a
 * histogram or from percentiles, the stale exposure, and the three ways of writing it (text,
 * JSON, SVG). See sweep.h.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "escape.h"
#include "hist.h"
#include "kvidx.h"
#include "sweep.h"
#include "ttl.h"

#define EPS_T 5e-4 /* candidates closer than half a millisecond are one */

double sweep_hist_tail(const uint64_t *c, double t)
{
	double n = 0, above = 0, tus = t * 1e6;

	for (unsigned b = 0; b < KV_HIST_BUCKETS; b++)
		n += (double)c[b];
	if (n <= 0)
		return -1;
	for (unsigned b = 0; b < KV_HIST_BUCKETS; b++) {
		if (!c[b])
			continue;
		/* Bucket b holds the whole microseconds lo..hi; a value v is above t when v > t. */
		double lo = (double)kv_hist_lower(b);
		double hi = b + 1 < KV_HIST_BUCKETS ? (double)kv_hist_upper(b) : lo * 1.125;
		if (lo > tus)
			above += (double)c[b];
		else if (hi > tus)
			above += (double)c[b] * (hi - tus) / (hi - lo + 1);
	}
	return above / n;
}

double sweep_pct_tail(const double *pv, const bool *have, double t)
{
	static const double tail[3] = { 0.5, 0.05, 0.01 };
	double x[4] = { 0 }, y[4] = { 0 }; /* y = ln(tail) */
	int n = 1;

	for (int i = 0; i < 3; i++) {
		if (!have[i] || !(pv[i] > x[n - 1]))
			continue; /* percentiles out of order are ignored */
		x[n] = pv[i];
		y[n] = log(tail[i]);
		n++;
	}
	if (n < 2)
		return -1;
	if (t <= 0)
		return 1;
	for (int i = 1; i < n; i++)
		if (t <= x[i])
			return exp(y[i - 1] + (y[i] - y[i - 1]) * (t - x[i - 1]) / (x[i] - x[i - 1]));
	double slope = (y[n - 1] - y[n - 2]) / (x[n - 1] - x[n - 2]);
	return exp(y[n - 1] + slope * (t - x[n - 1]));
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static bool near(double a, double b)
{
	return a - b < EPS_T && b - a < EPS_T;
}

void sweep_compute(struct sweep *s)
{
	const struct sweep_in *in = &s->in;
	double c[SWEEP_MAX + 2];
	int nc = 0;

	if (in->nttl > 0) {
		for (int i = 0; i < in->nttl && nc < SWEEP_MAX; i++)
			c[nc++] = in->ttls[i];
		/* The two marks are points of the curve too. */
		if (in->rec > 0)
			c[nc++] = in->rec;
		if (in->in_force > 0)
			c[nc++] = in->in_force;
	} else {
		/* Around each of the two: a quarter of it to twice it, in whole milliseconds,
		 * and nothing beyond the cap (the SLO's stale window) or the record format. */
		static const double around[] = { 0.25, 0.5, 0.75, 1, 1.25, 1.5, 2 };
		double base[2] = { in->rec, in->in_force };
		double lim = KVIDX_MAX_TTL_MS / 1000.0;
		if (in->cap > 0 && in->cap < lim)
			lim = in->cap;
		if (!(base[0] > 0) && !(base[1] > 0))
			base[0] = TTL_DEFAULT_S;
		for (int b = 0; b < 2; b++) {
			if (!(base[b] > 0))
				continue;
			for (size_t k = 0; k < sizeof(around) / sizeof(around[0]); k++) {
				double t = around[k] == 1 ? base[b] :
					   (double)(int64_t)(base[b] * around[k] * 1000 + 0.5) / 1000;
				if (t > 0 && (t <= lim + EPS_T || around[k] == 1))
					c[nc++] = t;
			}
		}
	}
	qsort(c, (size_t)nc, sizeof(c[0]), cmp_d);
	s->n = 0;
	s->have_tail = false;
	for (int i = 0; i < nc && s->n < SWEEP_MAX; i++) {
		if (s->n && near(c[i], s->rows[s->n - 1].t))
			continue;
		struct sweep_row *r = &s->rows[s->n++];
		memset(r, 0, sizeof(*r));
		r->t = c[i];
		r->is_rec = in->rec > 0 && near(c[i], in->rec);
		r->is_force = in->in_force > 0 && near(c[i], in->in_force);
		double e = in->hist ? sweep_hist_tail(in->hist, c[i]) :
				      sweep_pct_tail(in->pv, in->have_pv, c[i]);
		r->early = e;
		if (e >= 0)
			s->have_tail = true;
		if (in->have_expo) {
			r->failed = ttl_exposure(in->lambda, in->p, c[i]);
			r->tokens = r->failed * in->tokens;
			r->losing = e >= 0 ? in->lambda * (1 - in->p) * e : 0;
		}
	}
}

/* ---- text ---- */

static char *pct(char *buf, size_t n, double share)
{
	char num[32];

	if (share > 0 && share < 1e-6)
		snprintf(buf, n, "<0.0001%%");
	else
		snprintf(buf, n, "%s%%", ttl_fmt_num(num, sizeof(num), 100 * share));
	return buf;
}

void sweep_print_text(FILE *f, const struct sweep *s)
{
	const struct sweep_in *in = &s->in;
	char a[32], b[32], c[32], d[32], e[32];

	fprintf(f, "TTL curve for ");
	tc_text_str(f, in->label);
	if (in->rec > 0)
		fprintf(f, ": recommended %s", ttl_fmt_dur(a, sizeof(a), in->rec));
	if (in->in_force > 0)
		fprintf(f, ", TTL in force %s", ttl_fmt_dur(a, sizeof(a), in->in_force));
	if (in->have_expo)
		fprintf(f, "; lambda %s /s, p %s per route", ttl_fmt_num(b, sizeof(b), in->lambda),
			pct(c, sizeof(c), in->p));
	if (in->tokens > 0)
		fprintf(f, ", %s prefix tokens per failed route", ttl_fmt_num(d, sizeof(d), in->tokens));
	fprintf(f, "\n");
	fprintf(f, "  %10s  %12s  %14s  %14s  %14s\n", "TTL", "early expiry", "failed live",
		"tokens", "routes losing");
	fprintf(f, "  %10s  %12s  %14s  %14s  %14s\n", "", "(P(lat > T))", "(lambda p T)",
		"at stake", "prediction /s");
	for (int i = 0; i < s->n; i++) {
		const struct sweep_row *r = &s->rows[i];
		fprintf(f, "  %10s  %12s  %14s  %14s  %14s%s%s\n", ttl_fmt_dur(a, sizeof(a), r->t),
			r->early >= 0 ? pct(b, sizeof(b), r->early) : "-",
			in->have_expo ? ttl_fmt_num(c, sizeof(c), r->failed) : "-",
			in->have_expo && in->tokens > 0 ? ttl_fmt_num(d, sizeof(d), r->tokens) : "-",
			in->have_expo && r->early >= 0 ? ttl_fmt_num(e, sizeof(e), r->losing) : "-",
			r->is_rec ? "  <- recommended" : "", r->is_force ? "  <- in force" : "");
	}
	if (!s->have_tail)
		fprintf(f, "  (no latency distribution yet: no early-expiry share)\n");
	if (!in->have_expo)
		fprintf(f, "  (no lambda and p yet: no exposure)\n");
}

/* ---- JSON ---- */

void sweep_json(struct tc_jw *j, const struct sweep *s)
{
	const struct sweep_in *in = &s->in;

	if (in->rec > 0)
		tc_jw_num(j, "recommended_s", in->rec);
	else
		tc_jw_null(j, "recommended_s");
	if (in->in_force > 0)
		tc_jw_num(j, "ttl_in_force_s", in->in_force);
	else
		tc_jw_null(j, "ttl_in_force_s");
	if (in->have_expo) {
		tc_jw_num(j, "rate_per_s", in->lambda);
		tc_jw_num(j, "fail_p", in->p);
	} else {
		tc_jw_null(j, "rate_per_s");
		tc_jw_null(j, "fail_p");
	}
	tc_jw_num(j, "tokens_per_failed_route", in->tokens);
	tc_jw_open(j, "curve", '[');
	for (int i = 0; i < s->n; i++) {
		const struct sweep_row *r = &s->rows[i];
		tc_jw_open(j, NULL, '{');
		tc_jw_num(j, "ttl_s", r->t);
		if (r->early >= 0)
			tc_jw_num(j, "early_share", r->early);
		else
			tc_jw_null(j, "early_share");
		if (in->have_expo) {
			tc_jw_num(j, "failed_live", r->failed);
			tc_jw_num(j, "tokens_at_stake", r->tokens);
			tc_jw_num(j, "routes_losing_per_s", r->losing);
		} else {
			tc_jw_null(j, "failed_live");
			tc_jw_null(j, "tokens_at_stake");
			tc_jw_null(j, "routes_losing_per_s");
		}
		tc_jw_bool(j, "recommended", r->is_rec);
		tc_jw_bool(j, "in_force", r->is_force);
		tc_jw_close(j, '}');
	}
	tc_jw_close(j, ']');
}

/* ---- SVG ---- */

#define W 640
#define H 320
#define ML 64  /* margins: left, right, top, bottom */
#define MR 72
#define MT 40
#define MB 48

/* XML character data or attribute text: markup escaped, well-formed UTF-8 kept, anything
 * else (control characters, stray bytes) as '?', so the document stays well-formed. */
static void xml_str(FILE *f, const char *s)
{
	const unsigned char *p = (const unsigned char *)s;

	while (*p) {
		uint32_t cp;
		size_t len;
		if (*p == '<')
			fputs("&lt;", f);
		else if (*p == '>')
			fputs("&gt;", f);
		else if (*p == '&')
			fputs("&amp;", f);
		else if (*p == '"')
			fputs("&quot;", f);
		else if (*p >= 0x20 && *p < 0x7f)
			putc(*p, f);
		else if (*p >= 0x80 && (len = tc_utf8_seq(p, &cp)) > 0) {
			fwrite(p, 1, len, f);
			p += len;
			continue;
		} else
			putc('?', f);
		p++;
	}
}

struct axes {
	double x0, x1, y0max, y1max; /* data ranges: T, early share, failed live */
	int top;                      /* panel's top edge */
};

static double px(const struct axes *a, double t)
{
	return ML + (t - a->x0) / (a->x1 - a->x0) * (W - ML - MR);
}

static double py(const struct axes *a, double v, double vmax)
{
	return a->top + MT + (1 - v / vmax) * (H - MT - MB);
}

static void marker(FILE *f, const struct axes *a, double t, const char *cls, const char *dash,
		   const char *label, int row)
{
	double x = px(a, t);
	char d[32];

	fprintf(f, "<line class=\"%s\" x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" "
		   "stroke=\"#555\" stroke-dasharray=\"%s\" data-t=\"%.6g\"/>\n",
		cls, x, a->top + MT, x, a->top + H - MB, dash, t);
	fprintf(f, "<text x=\"%.1f\" y=\"%d\" font-size=\"11\" text-anchor=\"middle\">%s %s</text>\n",
		x, a->top + MT - 6 - 12 * row, label, ttl_fmt_dur(d, sizeof(d), t));
}

static void panel(FILE *f, const struct sweep *s, int top)
{
	const struct sweep_in *in = &s->in;
	struct axes a = { .x0 = 0, .top = top };
	char b[32];

	a.x1 = s->n ? s->rows[s->n - 1].t * 1.05 : 1;
	a.y0max = 0.05;
	a.y1max = 0;
	for (int i = 0; i < s->n; i++) {
		if (s->rows[i].early > a.y0max)
			a.y0max = s->rows[i].early;
		if (s->rows[i].failed > a.y1max)
			a.y1max = s->rows[i].failed;
	}
	a.y0max = a.y0max > 0.5 ? 1 : a.y0max * 1.1;
	if (!(a.y1max > 0))
		a.y1max = 1;
	a.y1max *= 1.1;

	fprintf(f, "<g class=\"panel\" data-label=\"");
	xml_str(f, in->label);
	fprintf(f, "\">\n<text x=\"%d\" y=\"%d\" font-size=\"13\" font-weight=\"bold\">TTL curve: ",
		ML, top + 14);
	xml_str(f, in->label);
	fprintf(f, "</text>\n");
	/* Frame, gridlines and tick labels. */
	fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" "
		   "stroke=\"#999\"/>\n", ML, top + MT, W - ML - MR, H - MT - MB);
	for (int k = 0; k <= 4; k++) {
		double y = top + MT + k * (H - MT - MB) / 4.0;
		fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#eee\"/>\n",
			ML, y, W - MR, y);
		fprintf(f, "<text x=\"%d\" y=\"%.1f\" font-size=\"10\" text-anchor=\"end\" "
			   "fill=\"#1f77b4\">%s</text>\n",
			ML - 4, y + 3, pct(b, sizeof(b), a.y0max * (4 - k) / 4));
		if (in->have_expo)
			fprintf(f, "<text x=\"%d\" y=\"%.1f\" font-size=\"10\" fill=\"#d62728\">"
				   "%s</text>\n", W - MR + 4, y + 3,
				ttl_fmt_num(b, sizeof(b), a.y1max * (4 - k) / 4));
	}
	for (int k = 0; k <= 5; k++) {
		double t = a.x1 * k / 5;
		fprintf(f, "<text x=\"%.1f\" y=\"%d\" font-size=\"10\" text-anchor=\"middle\">"
			   "%s</text>\n", px(&a, t), top + H - MB + 14, ttl_fmt_dur(b, sizeof(b), t));
	}
	fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"11\" text-anchor=\"middle\">TTL</text>\n",
		(ML + W - MR) / 2, top + H - MB + 30);
	fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"11\" fill=\"#1f77b4\">early-expiry share "
		   "P(latency &gt; T)</text>\n", ML, top + H - 6);
	if (in->have_expo)
		fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"11\" fill=\"#d62728\" "
			   "text-anchor=\"end\">failed live predictions, lambda x p x T</text>\n",
			W - MR, top + H - 6);
	/* The two curves. */
	if (s->have_tail) {
		fprintf(f, "<polyline class=\"early\" fill=\"none\" stroke=\"#1f77b4\" "
			   "stroke-width=\"2\" points=\"");
		for (int i = 0; i < s->n; i++)
			if (s->rows[i].early >= 0)
				fprintf(f, "%.1f,%.1f ", px(&a, s->rows[i].t),
					py(&a, s->rows[i].early, a.y0max));
		fprintf(f, "\"/>\n");
		for (int i = 0; i < s->n; i++)
			if (s->rows[i].early >= 0)
				fprintf(f, "<circle class=\"early\" cx=\"%.1f\" cy=\"%.1f\" r=\"3\" "
					   "fill=\"#1f77b4\" data-t=\"%.6g\" data-early=\"%.6g\"/>\n",
					px(&a, s->rows[i].t), py(&a, s->rows[i].early, a.y0max),
					s->rows[i].t, s->rows[i].early);
	}
	if (in->have_expo) {
		fprintf(f, "<polyline class=\"failed\" fill=\"none\" stroke=\"#d62728\" "
			   "stroke-width=\"2\" points=\"");
		for (int i = 0; i < s->n; i++)
			fprintf(f, "%.1f,%.1f ", px(&a, s->rows[i].t),
				py(&a, s->rows[i].failed, a.y1max));
		fprintf(f, "\"/>\n");
		for (int i = 0; i < s->n; i++)
			fprintf(f, "<circle class=\"failed\" cx=\"%.1f\" cy=\"%.1f\" r=\"3\" "
				   "fill=\"#d62728\" data-t=\"%.6g\" data-failed=\"%.6g\"/>\n",
				px(&a, s->rows[i].t), py(&a, s->rows[i].failed, a.y1max),
				s->rows[i].t, s->rows[i].failed);
	}
	if (in->rec > 0)
		marker(f, &a, in->rec, "recommended", "6,3", "recommended", 0);
	if (in->in_force > 0)
		marker(f, &a, in->in_force, "in-force", "2,2", "in force",
		       in->rec > 0 && near(in->rec, in->in_force) ? 1 : 0);
	fprintf(f, "</g>\n");
}

int sweep_svg(FILE *f, const struct sweep *s, int n)
{
	fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
		   "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
		   "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\">\n"
		   "<title>kvidx TTL curve</title>\n"
		   "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
		W, H * (n > 0 ? n : 1), W, H * (n > 0 ? n : 1));
	for (int i = 0; i < n; i++)
		panel(f, &s[i], i * H);
	fprintf(f, "</svg>\n");
	return fflush(f) || ferror(f) ? -EIO : 0;
}
