/*
 * fixture.h — the pods every benchmark and baseline agrees on: pod p is named
 * "10.A.B.C:8000" (A.B.C = p in base 256) under model BENCH_MODEL, and a kvidx writer opened
 * with pods 0..n-1 already added.
 */
#ifndef KVIDX_BENCH_FIXTURE_H
#define KVIDX_BENCH_FIXTURE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sys/types.h>

#include "kvidx_writer.h"

#define BENCH_MODEL "bench-model"

/* Pod p's name into buf, as snprintf() (returns the length it needs). */
int pod_name(char *buf, size_t len, unsigned p);

/*
 * Opens the writer wo describes (dying if it cannot) and adds pods 0..npods-1, named by
 * pod_name(), with model BENCH_MODEL. With strict set, a pod that does not get its own number
 * as its index is fatal too.
 */
struct kvidx *writer_with_pods(const struct kvidx_writer_opts *wo, uint32_t npods, bool strict);

struct kv_view;
enum kv_pod_ctr;
/* A per-pod counter summed over every active pod of a reader's view (relaxed loads). */
uint64_t fx_pods_sum(const struct kv_view *v, enum kv_pod_ctr c);

/*
 * Opens index name as a reader once kvidx-ingestd (process ingestd, a bl_spawn() child)
 * has created it, trying every 10 ms for 5 s; then stops ingestd and dies, naming its log.
 */
struct kvidx_reader *fx_wait_index(const char *name, pid_t ingestd, const char *log);

/* An end-to-end run's window: from the first block event the index shows to its end. */
struct fx_window {
	uint64_t t_first, t_end; /* now_ns() at the first block event, and at the end */
	uint64_t b_first, b_last; /* block events (stored + removed) then, and at the last */
	uint64_t events;          /* vLLM events applied at the end */
	double cpu_first;         /* ingestd's CPU seconds at the first block event */
	bool complete;            /* all the events expected were applied */
};

/*
 * Watches the pods' counters of v every millisecond until events vLLM events are applied
 * (w->complete) or no block event has come for 3 s. At the first block event, as the window
 * opens, reads the CPU time of process ingestd and runs on_first(arg) if it is not NULL.
 */
void fx_watch(const struct kv_view *v, uint64_t events, pid_t ingestd,
	      void (*on_first)(void *arg), void *arg, struct fx_window *w);

#endif /* KVIDX_BENCH_FIXTURE_H */
