/*
 * sweep.h — internal to the tools: the TTL curve, the operator's "what happens if I set T to
 * this value?" (kvidx-ttl --sweep). For candidate TTLs it computes, per pod (or for numbers
 * given offline):
 *
 *   early   the share of successful predictions that would expire early, P(latency > T),
 *           from a latency histogram (linear within a bucket) or from given percentiles
 *           (log-linear between them, the last segment's slope beyond)
 *   failed  live failed predictions, lambda x p x T, in requests' worth (ttl_exposure())
 *   tokens  the same weighted by the prefix tokens a failed route puts at stake (uncached
 *           prefill tokens a later request may be misrouted for)
 *   losing  routes per second that would lose their prediction before it is confirmed,
 *           lambda x (1 - p) x early
 *
 * and writes them as a text table, JSON members, or a small SVG chart (early-expiry share
 * and stale exposure against T, the recommendation and the TTL in force marked). Pure
 * computation and output; no state.
 */
#ifndef KVIDX_TOOLS_SWEEP_H
#define KVIDX_TOOLS_SWEEP_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "jsonw.h"
#include "telemetry.h"

#define SWEEP_MAX 24     /* rows of one curve */

struct sweep_in {
	const char *label;    /* pod name, or "offline" */
	double rec;           /* recommended TTL, s (0: none) */
	double in_force;      /* TTL in force, s (0: unknown) */
	bool have_expo;       /* lambda and p known */
	double lambda, p;     /* routed requests per second; failed-prediction share per route */
	double tokens;        /* mean prefix tokens per failed route (0: unknown) */
	/* The latency tail, from one of: */
	const uint64_t *hist; /* a snapshot of KV_HIST_BUCKETS counts (NULL: none) */
	double pv[3];         /* p50, p95, p99 seconds, where have_pv */
	bool have_pv[3];
	const double *ttls;   /* candidates given (nttl > 0), else 1/4, 1/2, 3/4, 1, 5/4, 3/2 and 2
	                       * times rec and in_force (whole ms, up to the cap) */
	int nttl;
	double cap;           /* largest candidate of the default range, s (0: the format's) */
};

struct sweep_row {
	double t, early, failed, tokens, losing;
	bool is_rec, is_force;
};

struct sweep {
	struct sweep_in in;
	bool have_tail;
	int n;
	struct sweep_row rows[SWEEP_MAX];
};

/* P(latency > t seconds) from histogram counts c (KV_HIST_BUCKETS), uniform within a bucket;
 * -1 for an empty histogram. */
double sweep_hist_tail(const uint64_t *c, double t);
/* P(latency > t) from the given p50/p95/p99 (at least one), log-linear between the points
 * (0, 1), (p50, 0.5), (p95, 0.05), (p99, 0.01), beyond the last on its segment's slope. */
double sweep_pct_tail(const double *pv, const bool *have, double t);

/* Fills s->rows from s->in (copied by the caller): the candidates (given, or the default
 * range) with the recommendation and the TTL in force among them, sorted, duplicates (within
 * half a millisecond) merged, those two flagged. */
void sweep_compute(struct sweep *s);

/* The table, a header line first. */
void sweep_print_text(FILE *f, const struct sweep *s);
/* The curve as members of the open JSON object of j. */
void sweep_json(struct tc_jw *j, const struct sweep *s);
/* An SVG document of n curves, one panel each. 0, or -EIO if f failed. Each point is a
 * <circle> with data-t, data-early or data-failed attributes (for tests and tooling). */
int sweep_svg(FILE *f, const struct sweep *s, int n);

#endif /* KVIDX_TOOLS_SWEEP_H */
