/*
 * inspect.h — internal, never installed: a reader's validated view of the current data
 * segment and of the registry, for kvidx-dump and the tests, and the writer-side counters
 * kvidx-ingestd writes. Not part of the router API.
 */
#ifndef KVIDX_INSPECT_H
#define KVIDX_INSPECT_H

#include "kvidx.h"
#include "layout.h"
#include "telemetry.h"

/* Geometry copied out of a validated header at attach: lookups use these, never the
 * segment's own (possibly corrupted later) header fields. */
struct kv_view {
	void *base;
	size_t size;
	uint64_t gen;
	const struct kvidx_data_hdr *hdr;
	const struct kvidx_stats *st;
	const struct kvidx_pod *pods;
	const uint64_t *slots;
	const uint64_t *arena;
	const uint64_t *hist;
	const struct kvidx_router *routers;
	const struct kvidx_load_row *load;
	uint64_t nslots, units;
	uint32_t ppk, max_pods, max_probe, max_readers;
};

struct kvidx; /* the writer handle (kvidx_writer.h) */

const struct kv_view *kv_reader_view(struct kvidx_reader *r);
const struct kvidx_ctl_hdr *kv_reader_ctl(struct kvidx_reader *r);   /* its registry */
const struct kvidx_idx_hdr *kv_reader_idx(struct kvidx_reader *r);   /* the index header */
uint64_t kv_reader_reg_gen(struct kvidx_reader *r);                  /* K of /NAME.reg.K */
int kv_reader_slot_index(struct kvidx_reader *r);

/*
 * Calls fn for every live key in slot positions [from, from+count), with its visible records
 * (as kvidx_lookup() would return them, at time now). Runs inside read-side sections of at
 * most 1024 slots each, and calls fn inside them: fn must be quick (a slow fn gets the reader
 * expelled) and must not publish what it is given before the call returns successfully, since
 * -KVIDX_ERETRY (returned after that step's calls) means the step may have read reused memory.
 * Walk in steps of at most 1024 slots to retry exactly the failed one. Returns the number of
 * keys visited, or -KVIDX_ERETRY.
 */
typedef void (*kv_entry_fn)(void *arg, uint64_t key, const struct kvidx_rec *recs, int n);
int64_t kv_reader_walk(struct kvidx_reader *r, uint64_t from, uint64_t count, uint64_t now,
		       kv_entry_fn fn, void *arg);

/*
 * Writer side, the raw words under telemetry.h's typed handles (tools call those, not these):
 * pod's counters (pd_ctr[KV_POD_COUNTERS], index with enum kv_pod_ctr), to be written by the
 * writer thread only with relaxed stores; NULL for a pod index out of range. And the data
 * segment's writer counters.
 */
uint64_t *kv_writer_pod_ctrs(struct kvidx *w, int pod);
/* Pod's histogram which (0 .. KV_HIST_PER_POD-1, telemetry.h: KV_HIST_CONFIRM, ...); NULL if
 * out of range. */
uint64_t *kv_writer_pod_hist(struct kvidx *w, int pod, int which);
const uint64_t *kv_view_pod_hist(const struct kv_view *v, int pod, int which);
/* Router worker statistics of registry slot slot (struct kvidx_router); NULL if out of range. */
struct kvidx_router *kv_writer_router(struct kvidx *w, int slot);
const struct kvidx_router *kv_view_router(const struct kv_view *v, int slot);
/* During a kvidx_drain() callback: the registry slot whose ring the message came from, and
 * (pid non-NULL) the pid the slot names, as read from the registry (untrusted: for display).
 * -1 outside a drain. */
int kv_writer_drain_slot(const struct kvidx *w, int32_t *pid);
/* During a kvidx_drain() callback: the slot (as kv_writer_drain_slot()) and, in *claimed_ns,
 * when its present owner claimed it (rs_claimed_ns: a new process, or a rebuilt registry,
 * claims anew; an expelled reader re-registering keeps it). Together they tell the processes
 * that committed apart, so the writer can key their correlation ids by origin. The claim time
 * is written by the reader (untrusted): it only separates that slot's own owners. -1 outside
 * a drain. */
int kv_writer_drain_origin(const struct kvidx *w, uint64_t *claimed_ns);
const struct kvidx_stats *kv_writer_stats(struct kvidx *w);
/* Slot words of the table, probe overflow included: what one full pass of kvidx_expire()
 * (and of the clear sweep) visits. */
uint64_t kv_writer_slots(const struct kvidx *w);

#endif /* KVIDX_INSPECT_H */
