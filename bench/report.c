/*
 * report.c — result rows as table lines and JSON objects (see report.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "benchlib.h"
#include "report.h"

static FILE *g_json; /* --json FILE: one JSON object per row, appended */
static bool g_header_done;

static void par_add(struct params *p, const char *k, const char *jv, const char *tv)
{
	size_t t = strlen(p->txt), j = strlen(p->json);

	snprintf(p->txt + t, sizeof(p->txt) - t, "%s%s=%s", t ? " " : "", k, tv);
	snprintf(p->json + j, sizeof(p->json) - j, "%s\"%s\":%s", j ? "," : "", k, jv);
}

/* Human form of a count: 8388608 -> 8Mi, 102400 -> 100Ki, 100000 -> 100k. */
static const char *human_count(char *buf, size_t len, uint64_t v)
{
	if (v && v % (1ull << 20) == 0)
		snprintf(buf, len, "%" PRIu64 "Mi", v >> 20);
	else if (v >= 1000000 && v % 1000000 == 0)
		snprintf(buf, len, "%" PRIu64 "M", v / 1000000);
	else if (v && v % 1024 == 0)
		snprintf(buf, len, "%" PRIu64 "Ki", v >> 10);
	else if (v >= 1000 && v % 1000 == 0)
		snprintf(buf, len, "%" PRIu64 "k", v / 1000);
	else
		snprintf(buf, len, "%" PRIu64, v);
	return buf;
}

/* A number for JSON: null where it is not finite. */
static void json_num(char *b, size_t n, double v)
{
	if (isfinite(v))
		snprintf(b, n, "%.6g", v);
	else
		snprintf(b, n, "null");
}

/* A number for the table: "-" where it is not finite, digits by magnitude. */
static void fmt_num(char *b, size_t n, double v)
{
	if (!isfinite(v))
		snprintf(b, n, "-");
	else if (fabs(v) >= 1e6)
		snprintf(b, n, "%.4g", v);
	else if (fabs(v) >= 100)
		snprintf(b, n, "%.0f", v);
	else if (fabs(v) >= 10)
		snprintf(b, n, "%.1f", v);
	else
		snprintf(b, n, "%.2f", v);
}

void par_u(struct params *p, const char *k, uint64_t v)
{
	char j[32], t[32];

	snprintf(j, sizeof(j), "%" PRIu64, v);
	par_add(p, k, j, human_count(t, sizeof(t), v));
}

void par_f(struct params *p, const char *k, double v)
{
	char j[48], t[48];

	snprintf(j, sizeof(j), "%.6g", v);
	snprintf(t, sizeof(t), "%.4g", v);
	par_add(p, k, isfinite(v) ? j : "null", t);
}

void par_s(struct params *p, const char *k, const char *v)
{
	char j[200];

	snprintf(j, sizeof(j), "\"%s\"", v);
	par_add(p, k, j, v);
}

void row_extra(struct row *r, const char *name, double v)
{
	size_t n = strlen(r->extra);
	char num[48];

	json_num(num, sizeof(num), v);
	snprintf(r->extra + n, sizeof(r->extra) - n, ",\"%s\":%s", name, num);
}

void json_open(const char *path)
{
	g_json = fopen(path, "a");
	if (!g_json)
		bdie("%s: %s", path, strerror(errno));
	setvbuf(g_json, NULL, _IOLBF, 0);
}

static void row_header(void)
{
	printf("| %-10s | %-34s | %10s | %10s | %-11s | %-13s | %-30s | %s\n", "workload", "name",
	       "median", "p99", "unit", "kvidx is", "target", "params; notes");
	g_header_done = true;
}

/* The "kvidx is" cell: how many times better kvidx's reference row is, or what replaces it. */
static void vs_cell(char *vs, size_t len, const struct row *r)
{
	if (r->vs_text) {
		snprintf(vs, len, "%s", r->vs_text);
	} else if (!isfinite(r->ratio)) {
		snprintf(vs, len, "-");
	} else if (r->ratio == 1.0) {
		snprintf(vs, len, "(reference)");
	} else {
		/* >1 kvidx ahead, <1 kvidx behind. */
		double adv = r->higher_better ? 1.0 / r->ratio : r->ratio;
		bool ahead = adv >= 1.0;
		double x = ahead ? adv : 1.0 / adv;
		if (x < 1.02)
			snprintf(vs, len, "even (%.2fx)", adv);
		else
			snprintf(vs, len, x < 10 ? "%s %.2fx" : x < 100 ? "%s %.1fx" : "%s %.0fx",
				 ahead ? "ahead" : "BEHIND", x);
	}
}

void row_emit(const struct row *r)
{
	char med[32], p99[32], vs[32], tgt[80], jm[32], jp[32], jr[32];

	if (!g_header_done)
		row_header();
	fmt_num(med, sizeof(med), r->median);
	fmt_num(p99, sizeof(p99), r->p99);
	vs_cell(vs, sizeof(vs), r);
	switch (r->target_state) {
	case T_MET: snprintf(tgt, sizeof(tgt), "met (%s)", r->target); break;
	case T_MISSED: snprintf(tgt, sizeof(tgt), "MISSED (%s)", r->target); break;
	case T_NA: snprintf(tgt, sizeof(tgt), "n/a (%s)", r->target); break;
	default: snprintf(tgt, sizeof(tgt), "-");
	}
	printf("| %-10s | %-34s | %10s | %10s | %-11s | %-13s | %-30s | %s%s%s\n", r->workload,
	       r->name, med, p99, r->unit, vs, tgt, r->par.txt, r->note[0] ? "; " : "", r->note);
	if (!g_json)
		return;
	json_num(jm, sizeof(jm), r->median);
	json_num(jp, sizeof(jp), r->p99);
	json_num(jr, sizeof(jr), r->ratio);
	fprintf(g_json,
		"{\"bench\":\"%s\",\"workload\":\"%s\",\"name\":\"%s\",\"params\":{%s},"
		"\"median\":%s,\"p99\":%s,\"unit\":\"%s\",\"higher_is_better\":%s,"
		"\"ratio_to_kvidx\":%s,\"target\":%s%s%s,\"target_met\":%s,\"note\":\"%s\"%s}\n",
		bl_prog, r->workload, r->name, r->par.json, jm, jp, r->unit,
		r->higher_better ? "true" : "false", jr, r->target[0] ? "\"" : "",
		r->target[0] ? r->target : "null", r->target[0] ? "\"" : "",
		r->target_state == T_MET ? "true" : r->target_state == T_MISSED ? "false" : "null",
		r->note, r->extra);
}
