/*
 * util_index.h — a test's own index: a name no other test (or test process) uses, a writer
 * opened on it, per-pod counters and latency samples written as kvidx-ingestd would, what a
 * router would see of a key or a pod, and removing the index whatever state the test left
 * it in.
 */
#ifndef KVIDX_TESTS_UTIL_INDEX_H
#define KVIDX_TESTS_UTIL_INDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvidx_writer.h"
#include "telemetry.h"

struct kvidx_reader_slot;

/* Writes "t-TAG-<pid>-<n>" into name, n counting the calls of this process. */
void tu_index_name(char *name, size_t len, const char *tag);

/*
 * Closes *w if it is open (unlinking the index) and sets it to NULL (w itself may be NULL),
 * then unlinks whatever segments of index name are left: those of a test that failed
 * before closing its writer, or of a writer in another process.
 */
void tu_index_remove(const char *name, struct kvidx **w);

/* Closes the reader *rd if it is open and sets *rd to NULL. */
void tu_reader_close(struct kvidx_reader **rd);

/* Opens a writer on index name with opts (whose name is ignored), asserting it opened. */
struct kvidx *tu_writer_open(const char *name, const struct kvidx_writer_opts *opts);

/* Sets per-pod counter c (an index into pd_ctr, enum kv_pod_ctr) of pod, as ingestd does. */
void tu_set_pod_ctr(struct kvidx *w, int pod, unsigned c, uint64_t v);

/* Adds n latency samples of us microseconds to pod's histogram which (telemetry.h), as
 * kvidx-ingestd does. */
void tu_add_latency(struct kvidx *w, int pod, enum kv_hist_id which, uint64_t us, int n);

/* Whether pod's speculation is paused (the flag in its pod word, which readers honour). */
bool tu_pod_paused(struct kvidx_reader *r, int pod);

/*
 * Reader r's own slot in the registry, writable, for tests that forge what the reader
 * announces (rs_ctr) as a stopped or hostile reader would.
 */
struct kvidx_reader_slot *tu_reader_slot(struct kvidx_reader *r);

/*
 * Makes r look stopped inside a read-side section: its slot announces the index's current
 * epoch and keeps announcing it. Returns the slot (tu_reader_slot).
 */
struct kvidx_reader_slot *tu_reader_stall(struct kvidx_reader *r);

enum { TU_ABSENT = 0, TU_SPEC = 1, TU_CONF = 2 };

/*
 * What a router sees of key on pod now: TU_ABSENT, TU_SPEC (a live prediction) or TU_CONF
 * (confirmed), with pod's record in *rec (when not NULL and not absent); -1 if the lookup
 * failed.
 */
int tu_rec_state(struct kvidx_reader *r, uint64_t key, int pod, struct kvidx_rec *rec);

#endif /* KVIDX_TESTS_UTIL_INDEX_H */
