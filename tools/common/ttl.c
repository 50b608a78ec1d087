/*
 * ttl.c — the one TTL core: the arithmetic of docs/ttl.md (T = Lq + J, clamp to floor and cap,
 * the adaptive policy's slow step, stale exposure lambda x p x T), the parsers for kvidx-ttl's
 * other inputs (durations are duration.c's) and the sentences it prints. Pure functions; see
 * ttl.h.
 */
#include <errno.h>
#include <math.h> /* isfinite() only: the tools do not link libm */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "duration.h"
#include "ttl.h"

/* Half a microsecond: two durations closer than this print the same and count as equal. */
#define TTL_EPS_S 5e-7

/*
 * Rounding without libm (the tools link none). Valid for |x| < 2^62, far beyond any value
 * here (durations are at most a day in microseconds).
 */
static double abs_d(double x)
{
	return x < 0 ? -x : x;
}

/* Nearest integer, halves away from zero. */
static double round_d(double x)
{
	return x < 0 ? -(double)(int64_t)(-x + 0.5) : (double)(int64_t)(x + 0.5);
}

/* Smallest integer >= x, for x >= 0. */
static double ceil_pos(double x)
{
	double i = (double)(int64_t)x;
	return i < x ? i + 1 : i;
}

/* floor(log10(a)) for a > 0 finite. */
static int decade(double a)
{
	int e = 0;

	while (a >= 10.0)
		a /= 10.0, e++;
	while (a < 1.0)
		a *= 10.0, e--;
	return e;
}

/* ---- parsing ---- */

int ttl_parse_number(const char *s, double *v)
{
	size_t len;

	if (!s || !(len = tc_dec_prefix(s)) || s[len] != '\0')
		return -EINVAL;
	return tc_dec_value(s, len, v) < 0 ? -EINVAL : 0;
}

int ttl_parse_probability(const char *s, double *p)
{
	size_t len;
	double v;

	if (!s || !(len = tc_dec_prefix(s)))
		return -EINVAL;
	if (strcmp(s + len, "%") != 0 && s[len] != '\0')
		return -EINVAL;
	if (tc_dec_value(s, len, &v) < 0)
		return -EINVAL;
	if (s[len] == '%')
		v /= 100.0;
	if (v > 1.0)
		return -ERANGE;
	*p = v;
	return 0;
}

/* ---- arithmetic ---- */

void ttl_plan_compute(struct ttl_plan *p)
{
	p->j = p->backlog + p->slack;
	p->t = p->lq + p->j;
	p->rec = p->t;
	p->bound = 0;
	if (p->floor > 0 && p->t < p->floor) {
		p->rec = p->floor;
		p->bound = -1;
	}
	if (p->cap > 0 && p->t > p->cap) {
		p->rec = p->cap;
		p->bound = 1;
	}
}

double ttl_exposure(double lambda, double p, double ttl)
{
	return lambda * p * ttl;
}

uint32_t ttl_ms_ceil(double sec)
{
	if (!(sec > 0))
		return 0;
	if (sec > 4e9)
		return UINT32_MAX;
	double ms = ceil_pos(round_d(sec * 1e6) / 1000.0);
	return ms >= (double)UINT32_MAX ? UINT32_MAX : (uint32_t)ms;
}

uint32_t ttl_step(uint32_t cur_ms, const struct ttl_plan *p, double max_step)
{
	uint64_t floor_ms = ttl_ms_ceil(p->floor), cap_ms = ttl_ms_ceil(p->cap);
	uint64_t target = ttl_ms_ceil(p->rec), step, next;

	step = (uint64_t)((double)cur_ms * max_step);
	if (step < 1)
		step = 1;
	next = target;
	if (target > cur_ms && target - cur_ms > step)
		next = (uint64_t)cur_ms + step;
	else if (target < cur_ms && cur_ms - target > step)
		next = cur_ms - step;
	if (next < floor_ms)
		next = floor_ms;
	if (next > cap_ms)
		next = cap_ms;
	return (uint32_t)next;
}

/* ---- formatting ---- */

/* Drops trailing zeros after a decimal point, and the point if nothing follows it. */
static void trim_zeros(char *s)
{
	char *dot = strchr(s, '.');

	if (!dot)
		return;
	char *e = s + strlen(s);
	while (e > dot + 1 && e[-1] == '0')
		e--;
	if (e == dot + 1)
		e = dot;
	*e = '\0';
}

char *ttl_fmt_fixed(char *buf, size_t n, double sec)
{
	if (abs_d(sec) < 5e-4)
		sec = 0; /* no "-0.000" */
	snprintf(buf, n, "%.3f s", sec);
	return buf;
}

char *ttl_fmt_dur(char *buf, size_t n, double sec)
{
	double us = round_d(sec * 1e6), a = abs_d(us);
	const char *unit;
	char num[64];

	if (a >= 1e6) {
		snprintf(num, sizeof(num), "%.3f", us / 1e6);
		unit = "s";
	} else if (a >= 1e3) {
		snprintf(num, sizeof(num), "%.3f", us / 1e3);
		unit = "ms";
	} else {
		snprintf(num, sizeof(num), "%.0f", a == 0 ? 0.0 : us);
		unit = "us";
	}
	trim_zeros(num);
	snprintf(buf, n, "%s %s", num, unit);
	return buf;
}

char *ttl_fmt_num(char *buf, size_t n, double v)
{
	double a = abs_d(v);
	int dec = 0;

	if (a > 0 && isfinite(a)) {
		dec = 2 - decade(a);
		if (dec < 0)
			dec = 0;
		if (dec > 9)
			dec = 9;
	}
	snprintf(buf, n, "%.*f", dec, v);
	trim_zeros(buf);
	if (strcmp(buf, "-0") == 0)
		snprintf(buf, n, "0");
	return buf;
}

char *ttl_fmt_pct_name(char *buf, size_t n, double q)
{
	snprintf(buf, n, "p%.6g", q * 100.0);
	return buf;
}

char *ttl_fmt_arith(char *buf, size_t n, const struct ttl_plan *p)
{
	char lq[32], bl[32], sl[32], t[32];

	snprintf(buf, n, "T = Lq + J = %s + (%s backlog + %s slack) = %s",
		 ttl_fmt_fixed(lq, sizeof(lq), p->lq), ttl_fmt_fixed(bl, sizeof(bl), p->backlog),
		 ttl_fmt_fixed(sl, sizeof(sl), p->slack), ttl_fmt_fixed(t, sizeof(t), p->t));
	return buf;
}

char *ttl_fmt_recommend(char *buf, size_t n, const struct ttl_plan *p)
{
	char rec[32], cap[32], t[32], d[32], fl[32];
	int len = snprintf(buf, n, "recommended TTL %s (ttl_ms %u): ",
			   ttl_fmt_fixed(rec, sizeof(rec), p->rec), ttl_ms_ceil(p->rec));
	size_t off = len < 0 ? 0 : (size_t)len < n ? (size_t)len : n;

	ttl_fmt_dur(cap, sizeof(cap), p->cap);
	ttl_fmt_fixed(t, sizeof(t), p->t);
	if (p->bound > 0) {
		snprintf(buf + off, n - off,
			 "capped; T = %s exceeds the %s cap by %s, so confirmations slower than the "
			 "cap will expire early",
			 t, cap, ttl_fmt_dur(d, sizeof(d), p->t - p->cap));
	} else if (p->bound < 0) {
		snprintf(buf + off, n - off, "raised to the %s floor (T = %s); under the %s cap",
			 ttl_fmt_dur(fl, sizeof(fl), p->floor), t, cap);
	} else if (p->cap - p->t < TTL_EPS_S) {
		snprintf(buf + off, n - off, "T is at the %s cap, with nothing to spare", cap);
	} else {
		snprintf(buf + off, n - off, "T is under the %s cap, %s to spare", cap,
			 ttl_fmt_dur(d, sizeof(d), p->cap - p->t));
	}
	return buf;
}

char *ttl_fmt_room(char *buf, size_t n, double setting, double t)
{
	char s[32], d[32];
	double room = setting - t;

	ttl_fmt_dur(s, sizeof(s), setting);
	if (abs_d(room) < TTL_EPS_S)
		snprintf(buf, n, "a %s setting would leave no additional room", s);
	else if (room > 0)
		snprintf(buf, n, "a %s setting would leave %s of additional room", s,
			 ttl_fmt_dur(d, sizeof(d), room));
	else
		snprintf(buf, n, "a %s setting would fall %s short of T: expect early expiries", s,
			 ttl_fmt_dur(d, sizeof(d), -room));
	return buf;
}

char *ttl_fmt_exposure(char *buf, size_t n, double lambda, double p, double ttl)
{
	char l[32], pp[32], t[32], e[32];

	snprintf(buf, n, "%s /s x %s x %s = %s requests' worth of live failed predictions",
		 ttl_fmt_num(l, sizeof(l), lambda), ttl_fmt_num(pp, sizeof(pp), p),
		 ttl_fmt_fixed(t, sizeof(t), ttl),
		 ttl_fmt_num(e, sizeof(e), ttl_exposure(lambda, p, ttl)));
	return buf;
}
