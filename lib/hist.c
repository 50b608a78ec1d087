/*
 * hist.c — log-linear latency histograms in shared memory: bucket arithmetic, updates by the
 * writer, quantiles for the tools. Buckets: values 0..15 us one each; above, 8 sub-buckets per
 * power of two (12.5% resolution) up to 2^26 us (67 s).
 *
 * Concurrency model:
 *
 *  1. One writer thread updates buckets (kv_hist_add(), kv_hist_decay()) with relaxed
 *     stores: each bucket is one counter, nothing else depends on it, so no ordering is
 *     needed.
 *  2. Readers (other processes) load buckets relaxed and may see a histogram mid-update: a
 *     count off by the samples in flight, never a torn word. kv_hist_quantile() works on one
 *     snapshot so that its total and its walk agree.
 */
#include <errno.h>

#include "atomics.h"
#include "hist.h"

unsigned kv_hist_bucket(uint64_t us)
{
	if (us < 16)
		return (unsigned)us;
	unsigned e = 63u - (unsigned)__builtin_clzll(us); /* 4.. */
	unsigned b = 16 + (e - 4) * 8 + (unsigned)((us >> (e - 3)) & 7);
	return b < KV_HIST_BUCKETS ? b : KV_HIST_BUCKETS - 1;
}

uint64_t kv_hist_lower(unsigned b)
{
	if (b < 16)
		return b;
	unsigned e = 4 + (b - 16) / 8, sub = (b - 16) % 8;
	return (1ull << e) + ((uint64_t)sub << (e - 3));
}

uint64_t kv_hist_upper(unsigned b)
{
	return b + 1 >= KV_HIST_BUCKETS ? UINT64_MAX : kv_hist_lower(b + 1) - 1;
}

void kv_hist_add(uint64_t *h, uint64_t us)
{
	unsigned b = kv_hist_bucket(us);

	stat_add(&h[b], 1);
}

void kv_hist_decay(uint64_t *h)
{
	for (unsigned b = 0; b < KV_HIST_BUCKETS; b++)
		st_relaxed(&h[b], ld_relaxed(&h[b]) / 2);
}

uint64_t kv_hist_count(const uint64_t *h)
{
	uint64_t n = 0;

	for (unsigned b = 0; b < KV_HIST_BUCKETS; b++)
		n += ld_relaxed(&h[b]);
	return n;
}

int kv_hist_quantile(const uint64_t *h, double q, uint64_t *us)
{
	uint64_t c[KV_HIST_BUCKETS], n = 0, acc = 0;

	/* One snapshot, so that the total and the walk agree. */
	for (unsigned b = 0; b < KV_HIST_BUCKETS; b++)
		n += c[b] = ld_relaxed(&h[b]);
	if (n == 0)
		return -ENODATA;
	double want = q * (double)n;
	for (unsigned b = 0; b < KV_HIST_BUCKETS; b++) {
		acc += c[b];
		if ((double)acc >= want && c[b]) {
			*us = kv_hist_upper(b);
			return 0;
		}
	}
	*us = kv_hist_upper(KV_HIST_BUCKETS - 1);
	return 0;
}
