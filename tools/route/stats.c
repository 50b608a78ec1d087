/*
 * stats.c — what kvidx-route measures: latency samples with their percentiles (all samples
 * up to a cap, a uniform reservoir beyond), and per decision kind tallies of answers, TTFT
 * and cached tokens, with their summary lines.
 */
#include "route.h"

#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "rng.h"

#define SAMPLES_CAP (1u << 18)

void samples_add(struct samples *s, double v)
{
	s->seen++;
	if (s->n < SAMPLES_CAP) {
		tc_grow(&s->v, &s->cap, s->n + 1, sizeof(*s->v));
		s->v[s->n++] = v;
		return;
	}
	uint64_t k = tc_rng_next(&s->rng) % s->seen;
	if (k < SAMPLES_CAP)
		s->v[k] = v;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

double samples_q(struct samples *s, double q)
{
	size_t i;

	if (!s->n)
		return 0;
	qsort(s->v, s->n, sizeof(*s->v), cmp_double);
	i = (size_t)(q * (double)(s->n - 1) + 0.5);
	return s->v[i < s->n ? i : s->n - 1];
}

double samples_mean(const struct samples *s)
{
	double sum = 0;

	for (size_t i = 0; i < s->n; i++)
		sum += s->v[i];
	return s->n ? sum / (double)s->n : 0;
}

void samples_free(struct samples *s)
{
	free(s->v);
	memset(s, 0, sizeof(*s));
}

void tally_free(struct tally *t)
{
	for (int k = 0; k < K_COUNT; k++) {
		samples_free(&t->ttft[k]);
		samples_free(&t->total[k]);
	}
}

void tally_print(struct tally *t, FILE *f, bool json)
{
	for (int k = 0; k < K_COUNT; k++) {
		double p50 = samples_q(&t->ttft[k], 0.5), p99 = samples_q(&t->ttft[k], 0.99);
		double mean_cached = t->ok[k] ? (double)t->cached[k] / (double)t->ok[k] : 0;

		if (json)
			fprintf(f, "%s\"%s\":{\"requests\":%llu,\"ok\":%llu,\"cached_tokens\":%llu,"
				"\"prompt_tokens\":%llu,\"mean_cached_tokens\":%.1f,"
				"\"false_warm\":%llu,\"ttft_p50_ms\":%.3f,\"ttft_p99_ms\":%.3f}",
				k ? "," : "", kind_name[k], (unsigned long long)t->n[k],
				(unsigned long long)t->ok[k], (unsigned long long)t->cached[k],
				(unsigned long long)t->prompt[k], mean_cached,
				(unsigned long long)t->false_warm[k], p50, p99);
		else
			fprintf(f, "summary: %-9s %6llu requests, %6llu ok, cached %llu of %llu "
				"prompt tokens (%.1f per answer), false warm %llu, TTFT p50 %.2f ms "
				"p99 %.2f ms\n",
				kind_name[k], (unsigned long long)t->n[k],
				(unsigned long long)t->ok[k], (unsigned long long)t->cached[k],
				(unsigned long long)t->prompt[k], mean_cached,
				(unsigned long long)t->false_warm[k], p50, p99);
	}
}
