/*
 * score.h — the scorer loops every benchmark times, inline so that they compile into the
 * measured loops: kvidx_score() and one kvidx_lookup() per block, reduced to the longest
 * prefix any pod holds, and the per-pod rows with which the baselines (naive.h, lfht.h,
 * ckhs.h, redis_index.h) cut a prompt at its first block no pod's run reaches.
 */
#ifndef KVIDX_BENCH_SCORE_H
#define KVIDX_BENCH_SCORE_H

#include <stdbool.h>
#include <stdint.h>

#include "benchlib.h"
#include "kvidx_writer.h"

/* Per pod, how many consecutive blocks from block 0 it holds in the prompt being scored. */
struct rows {
	uint32_t *blocks;
	uint16_t *touched;
	unsigned ntouched;
};

/* Rows for pods 0..max_pods-1, all at 0 (dies when out of memory); rows_free() frees them. */
void rows_init(struct rows *rw, unsigned max_pods);
void rows_free(struct rows *rw);

/* Counts block i for pod p if p holds blocks 0..i-1; returns whether p's run goes on. */
static inline bool rows_extend(struct rows *rw, unsigned p, uint32_t i)
{
	if (rw->blocks[p] != i)
		return false;
	if (i == 0)
		rw->touched[rw->ntouched++] = (uint16_t)p;
	rw->blocks[p] = i + 1;
	return true;
}

/* rows_extend() for each of the n pods holding block i; returns how many runs go on. */
static inline unsigned rows_extend_pods(struct rows *rw, const uint16_t *pods, unsigned n,
					uint32_t i)
{
	unsigned alive = 0;

	for (unsigned j = 0; j < n; j++)
		alive += rows_extend(rw, pods[j], i);
	return alive;
}

/* The longest run; resets the rows. */
static inline uint32_t rows_best_reset(struct rows *rw)
{
	uint32_t best = 0;

	for (unsigned i = 0; i < rw->ntouched; i++) {
		unsigned p = rw->touched[i];
		if (rw->blocks[p] > best)
			best = rw->blocks[p];
		rw->blocks[p] = 0;
	}
	rw->ntouched = 0;
	return best;
}

/* kvidx_score's answer reduced the same way: the longest run of any pod. */
static inline uint32_t score_kvidx(struct kvidx_reader *r, const uint64_t *k, uint32_t n)
{
	struct kvidx_score out[128];
	uint32_t best = 0;
	int rc;

	while ((rc = kvidx_score(r, k, n, NULL, 0, NULL, out, 128)) == -KVIDX_ERETRY)
		;
	if (rc < 0)
		bdie("kvidx_score: %s", kvidx_strerror(rc));
	for (int i = 0; i < rc; i++)
		if (out[i].blocks > best)
			best = out[i].blocks;
	return best;
}

/* One kvidx_lookup() per block, stopping where no pod's run goes on. */
static inline uint32_t score_lookup(struct kvidx_reader *r, struct rows *rw, const uint64_t *k,
				    uint32_t n)
{
	struct kvidx_rec rec[16];

	for (uint32_t i = 0; i < n; i++) {
		int rc;
		unsigned alive = 0;
		while ((rc = kvidx_lookup(r, k[i], rec, 16)) == -KVIDX_ERETRY)
			;
		if (rc < 0)
			bdie("kvidx_lookup: %s", kvidx_strerror(rc));
		for (int j = 0; j < rc; j++)
			alive += rows_extend(rw, rec[j].pod, i);
		if (!alive)
			break;
	}
	return rows_best_reset(rw);
}

#endif /* KVIDX_BENCH_SCORE_H */
