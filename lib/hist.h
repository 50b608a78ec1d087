/*
 * hist.h — internal, never installed: the log-linear latency histograms kept per pod in the
 * data segment (route-to-confirmation latency, microseconds). Geometry in shm/layout.h
 * (KV_HIST_BUCKETS, KV_HIST_PER_POD), which histogram is which in telemetry.h (enum
 * kv_hist_id), whose handles the tools use instead of these bare arrays.
 */
#ifndef KVIDX_HIST_H
#define KVIDX_HIST_H

#include <stdint.h>

#include "layout.h"

/* Bucket of a value: 0..15 exact, then 8 buckets per power of two; capped at the last one. */
unsigned kv_hist_bucket(uint64_t us);
/* Smallest and largest value a bucket holds (the last bucket's upper bound is UINT64_MAX). */
uint64_t kv_hist_lower(unsigned b);
uint64_t kv_hist_upper(unsigned b);

/* Writer: one sample (relaxed stores; readers may see a histogram mid-update). */
void kv_hist_add(uint64_t *h, uint64_t us);
/* Writer: halves every bucket (the "recent" histogram's exponential window). */
void kv_hist_decay(uint64_t *h);

/* Samples in h. */
uint64_t kv_hist_count(const uint64_t *h);
/*
 * The q-quantile (0 < q <= 1) of h: the upper bound of the bucket in which the cumulative
 * count reaches q x total, so the true value is at most that (within 12.5%). Returns 0 and
 * sets *us, or -ENODATA when h is empty.
 */
int kv_hist_quantile(const uint64_t *h, double q, uint64_t *us);

#endif /* KVIDX_HIST_H */
