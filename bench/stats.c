/*
 * stats.c — samples and nearest-rank percentiles (see stats.h).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "benchlib.h"
#include "stats.h"

void samples_add(struct samples *s, double x)
{
	if (s->n == s->cap) {
		s->cap = s->cap ? 2 * s->cap : 4096;
		s->v = realloc(s->v, s->cap * sizeof(*s->v));
		if (!s->v)
			bdie("out of memory for samples");
	}
	s->v[s->n++] = x;
	s->sorted = false;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

double samples_pct(struct samples *s, double p)
{
	if (!s->n)
		return NAN;
	if (!s->sorted) {
		qsort(s->v, s->n, sizeof(*s->v), cmp_double);
		s->sorted = true;
	}
	size_t i = (size_t)ceil(p / 100.0 * (double)s->n);
	return s->v[i ? i - 1 : 0];
}

void samples_free(struct samples *s)
{
	free(s->v);
	memset(s, 0, sizeof(*s));
}
