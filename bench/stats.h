/*
 * stats.h — samples and their percentiles: a growing array of doubles, sorted once when a
 * percentile is asked for.
 */
#ifndef KVIDX_BENCH_STATS_H
#define KVIDX_BENCH_STATS_H

#include <stdbool.h>
#include <stddef.h>

/* Zero-initialised is empty. */
struct samples {
	double *v;
	size_t n, cap;
	bool sorted;
};

/* Appends x (dies when out of memory). */
void samples_add(struct samples *s, double x);

/* The p-th percentile (0..100), nearest rank; NAN when empty. */
double samples_pct(struct samples *s, double p);

/* Frees the samples and leaves s empty. */
void samples_free(struct samples *s);

#endif /* KVIDX_BENCH_STATS_H */
