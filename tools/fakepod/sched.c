/*
 * sched.c — the fake pod's action queue: publications, script sequence changes (gap, lose,
 * restart), served requests' completions (--prefill-ms) and the pod model's step ends
 * (engine.c), run in (due time, creation order) order, so that
 * delays of any size keep a defined order. Sequence numbers (each rank's own) are assigned
 * when a batch is actually published. Also the simulated pod (or rank) restart, which empties
 * the queue of the old process.
 *
 * The queue is a binary min-heap in fp->heap.
 */
#include "fakepod.h"

#include <stdlib.h>

#include "cli.h"

static bool act_before(const struct action *a, const struct action *b)
{
	return a->due != b->due ? a->due < b->due : a->order < b->order;
}

static void heap_sift_down(struct fp *fp, size_t i)
{
	for (;;) {
		size_t l = 2 * i + 1, m = i;
		struct action t;

		if (l < fp->nheap && act_before(&fp->heap[l], &fp->heap[m]))
			m = l;
		if (l + 1 < fp->nheap && act_before(&fp->heap[l + 1], &fp->heap[m]))
			m = l + 1;
		if (m == i)
			return;
		t = fp->heap[i];
		fp->heap[i] = fp->heap[m];
		fp->heap[m] = t;
		i = m;
	}
}

static void heap_push(struct fp *fp, const struct action *a)
{
	size_t i;

	tc_grow(&fp->heap, &fp->heap_cap, fp->nheap + 1, sizeof(*fp->heap));
	i = fp->nheap++;
	fp->heap[i] = *a;
	while (i && act_before(&fp->heap[i], &fp->heap[(i - 1) / 2])) {
		struct action t = fp->heap[i];

		fp->heap[i] = fp->heap[(i - 1) / 2];
		fp->heap[(i - 1) / 2] = t;
		i = (i - 1) / 2;
	}
}

struct action heap_pop(struct fp *fp)
{
	struct action a = fp->heap[0];

	fp->heap[0] = fp->heap[--fp->nheap];
	heap_sift_down(fp, 0);
	return a;
}

void pod_restart(struct fp *fp, uint64_t order_limit, int rank)
{
	bool all = rank < 0 || fp->nranks == 1;
	size_t i, k = 0;

	for (uint32_t r = 0; r < fp->nranks; r++) {
		if (!all && r != (uint32_t)rank)
			continue;
		fp->rk[r].seq = 0;
		fp->rk[r].lose_left = 0;
		ring_clear(fp, r);
	}
	if (all)
		cache_clear(&fp->cache);
	else
		cache_clear_rank(&fp->cache, (uint32_t)rank);
	engine_restart(fp, all ? -1 : rank);
	for (i = 0; i < fp->nheap; i++) {
		struct action *a = &fp->heap[i];

		if (a->order >= order_limit ||
		    (!all && (a->kind == ACT_SERVE_DONE || a->rank != (uint32_t)rank))) {
			fp->heap[k++] = *a;
			continue;
		}
		if (a->kind == ACT_PUBLISH) {
			free(a->data);
			fp->st.discarded++;
		} else if (a->kind == ACT_SERVE_DONE) {
			serve_fail(fp, a->data);
		}
	}
	fp->nheap = k;
	for (i = k / 2; i-- > 0;)
		heap_sift_down(fp, i);
	fp->st.restarts++;
}

static void run_action(struct fp *fp, struct action *a, uint64_t now)
{
	switch (a->kind) {
	case ACT_PUBLISH:
		publish(fp, a);
		break;
	case ACT_GAP:
		fp->rk[a->rank].seq += a->n;
		break;
	case ACT_LOSE:
		fp->rk[a->rank].lose_left += a->n;
		break;
	case ACT_RESTART:
		pod_restart(fp, a->order, (int)a->rank);
		break;
	case ACT_SERVE_DONE:
		serve_complete(fp, a->data, now);
		break;
	case ACT_STEP:
		engine_step_end(fp, a->rank, a->n, now);
		break;
	}
}

void schedule(struct fp *fp, struct action *a, uint64_t now)
{
	a->order = fp->order++;
	if (a->due <= now && (fp->nheap == 0 || fp->heap[0].due > now))
		run_action(fp, a, now);
	else
		heap_push(fp, a);
}

void enqueue(struct fp *fp, struct action *a)
{
	a->order = fp->order++;
	heap_push(fp, a);
}

void run_due(struct fp *fp, uint64_t now)
{
	while (fp->nheap && fp->heap[0].due <= now) {
		struct action a = heap_pop(fp);

		run_action(fp, &a, now);
	}
}
