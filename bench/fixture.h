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

#endif /* KVIDX_BENCH_FIXTURE_H */
