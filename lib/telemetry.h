/*
 * telemetry.h — internal, never installed: what the index's shared-memory telemetry means
 * (writer counters, per-pod counters and gauges, per-rank health, per-router counters,
 * latency histograms) and the typed doors to it, for the writer (kvidx-ingestd) and for the
 * readers (kvidx-dump, kvidx-top, kvidx-ttl, the metrics, kvidx-route --validate).
 *
 * shm/layout.h gives the telemetry's geometry (how many words, where); this header gives each
 * word its name and index, and shm/FORMAT.md (sections 5.3 to 5.6) describes both, checked by
 * tests/test_format.c. A tool never holds a pointer into the segment's counters nor a bare
 * histogram number: the writer gets handles (struct kv_tm_pod, kv_tm_hist, kv_tm_router) and
 * adds or sets a counter named by its enum; a reader gets values (kv_tm_view_*()) and
 * read-only histogram handles (struct kv_tm_hist_ro). Writer handles are written by the
 * writer thread only, with relaxed stores; readers may see values lag.
 */
#ifndef KVIDX_TELEMETRY_H
#define KVIDX_TELEMETRY_H

#include <stdbool.h>
#include <stdint.h>

#include "hist.h"
#include "layout.h"

/* ---- the vocabulary --------------------------------------------------------------------- */

/* Writer counters of the index (dh_stats_off; relaxed). Order is the dump's order. */
#define KV_STATS(X)                                                                          \
	X(keys) X(records) X(spec_records) X(tombstones) X(arena_used) X(limbo)              \
	X(stores) X(confirms) X(removes) X(speculations) X(expirations) X(pod_clears)        \
	X(evict_spec) X(evict_confirmed) X(rec_evictions) X(store_failed) X(retired)         \
	X(reclaimed) X(epochs) X(readers_dead) X(readers_expelled) X(sweep_passes)            \
	X(route_commits) X(route_bad) X(registry_rebuilds) X(registry_repairs) X(bad_entries)
struct kvidx_stats {
#define KV_STAT_FIELD(n) uint64_t n;
	KV_STATS(KV_STAT_FIELD)
#undef KV_STAT_FIELD
};
enum kv_stat {
#define KV_STAT_ENUM(n) KV_ST_##n,
	KV_STATS(KV_STAT_ENUM)
#undef KV_STAT_ENUM
	KV_ST_COUNT
};
_Static_assert(sizeof(struct kvidx_stats) == KV_STATS_WORDS * sizeof(uint64_t), "stats words");
_Static_assert(KV_ST_COUNT == KV_STATS_WORDS, "one enum kv_stat per stats word");

/*
 * Per-pod counters and gauges (pd_ctr[]), written by the writer only, relaxed. X(name) in
 * index order; kvidx-dump and the metrics print them by these names. Times are CLOCK_MONOTONIC
 * ns; "_us" values are microseconds.
 */
#define KV_POD_CTRS(X)                                                                       \
	/* ingest (kvidx-ingestd) */                                                         \
	X(last_event_ns) X(last_seq) X(batches) X(events) X(blocks_stored) X(blocks_removed) \
	X(clears) X(events_per_s) X(seq_gaps) X(seq_dups) X(restarts) X(replays_ok)          \
	X(replays_truncated) X(replays_failed) X(decode_errors) X(skipped_events)            \
	X(unknown_parent) X(queue_depth) X(connected)                                        \
	/* ingest: per-event skips by reason (each also counts in skipped_events) */         \
	X(bad_events) X(unknown_type) X(skipped_group) X(skipped_shape) X(skipped_remote)    \
	X(unknown_removed) X(offload_unknown) X(unkeyable_extras)                            \
	/* ingest: what was applied */                                                       \
	X(offload_applied) X(dup_copies) X(copies_kept) X(other_medium) X(ranks)             \
	/* speculation (route commits, reaper, TTL) */                                       \
	X(ttl_ms) X(speculations) X(confirmed_in_time) X(early_expiries) X(stale_expiries)   \
	X(late_confirmations) X(routes_predicted) X(routes_confirmed) X(routes_nomatch)      \
	X(outcomes) X(false_warm_routes) X(wasted_prefill_tokens) X(spec_paused)             \
	X(last_route_ns)                                                                     \
	/* event path lag (batch ts to applied, wall clock; layout 4) */                     \
	X(lag_negative) X(lag_last_us) X(queue_depth_peak)                                   \
	/* speculation per route (a route's new predictions on the pod; layout 4) */         \
	X(spec_routes) X(routes_in_time) X(routes_early_expiries)                            \
	X(routes_late_confirmations) X(routes_stale_expiries) X(routes_dropped_clear)        \
	X(routes_dropped_removed) X(routes_dropped_evicted) X(routes_untracked)              \
	/* speculative records dropped before they expired, by cause (layout 4) */           \
	X(dropped_clear) X(dropped_removed) X(dropped_evicted)                               \
	/* liveness (heartbeats, routed but silent; layout 6, compatible) */                  \
	X(heartbeats) X(routed_silent)                                                       \
	/* the cluster link: predictions from peer hosts' commits (layout 8, compatible) */  \
	X(remote_speculations)
enum kv_pod_ctr {
#define KV_POD_CTR_ENUM(n) KV_PC_##n,
	KV_POD_CTRS(KV_POD_CTR_ENUM)
#undef KV_POD_CTR_ENUM
	KV_PC_COUNT
};

/*
 * Per-rank health of a data-parallel pod (kvidx-ingestd's dp-ranks=N: one event stream per
 * rank), in pd_ctr[] after the named counters: KV_POD_RANKS ranks of KV_RANK_WORDS words,
 * rank r's word w at pd_ctr[KV_PC_RANK(r, w)]. A rank in use has KV_RANK_IN_USE in its flags;
 * counters as the pod-level ones of the same name, for that rank's stream only.
 */
#define KV_RANK_CTRS(X)                                                                      \
	X(flags) X(last_seq) X(last_event_ns) X(batches) X(events) X(seq_gaps) X(restarts)   \
	X(clears)
enum kv_rank_ctr {
#define KV_RANK_CTR_ENUM(n) KV_RC_##n,
	KV_RANK_CTRS(KV_RANK_CTR_ENUM)
#undef KV_RANK_CTR_ENUM
	KV_RC_COUNT
};
#define KV_RANK_IN_USE 0x1u    /* flags: the rank is subscribed */
#define KV_RANK_CONNECTED 0x2u /* flags: its SUB is connected */
#define KV_RANK_REPLAYING 0x4u /* flags: it is replaying a gap */
#define KV_PC_RANK(r, w) (KV_POD_NAMED + (r) * KV_RANK_WORDS + (w))
_Static_assert(KV_PC_COUNT <= KV_POD_NAMED, "per-pod counters fit the pod struct");
_Static_assert(KV_RC_COUNT <= KV_RANK_WORDS, "per-rank counters fit their area");

/*
 * Latency histograms of a pod (KV_HIST_PER_POD, shm/layout.h), by id:
 *
 *   KV_HIST_CONFIRM         route-to-confirmation latency, cumulative since the pod was added
 *   KV_HIST_CONFIRM_RECENT  the same, recent (the writer halves it every KV_HIST_DECAY_S s)
 *   KV_HIST_LAG             event path lag, cumulative: applied minus published wall clock
 *                           (the batch's ts) per live batch, negative values as 0
 *   KV_HIST_LAG_RECENT      the same, recent
 *   KV_HIST_CLASS(c)        recent route-to-confirmation latency of routes whose prompt is
 *                           of length class c (KV_PROMPT_CLASSES, bounds below)
 */
#define KV_HIST_DECAY_S 60
enum kv_hist_id { KV_HIST_CONFIRM = 0, KV_HIST_CONFIRM_RECENT = 1, KV_HIST_LAG = 2,
		  KV_HIST_LAG_RECENT = 3, KV_HIST_CLASS0 = 4 };
#define KV_PROMPT_CLASSES 4
#define KV_HIST_CLASS(c) ((enum kv_hist_id)(KV_HIST_CLASS0 + (c)))
_Static_assert(KV_HIST_CLASS0 + KV_PROMPT_CLASSES == KV_HIST_PER_POD, "histograms per pod");
/*
 * Prompt-length classes of a route, by the tokens of its full blocks (nkeys x block size):
 * class 0 below 512 tokens, 1 below 2048, 2 below 8192, 3 from 8192 on. Fixed, so that a
 * class means the same in every index and every dashboard.
 */
static inline unsigned kv_prompt_class(uint64_t tokens)
{
	return tokens < 512 ? 0 : tokens < 2048 ? 1 : tokens < 8192 ? 2 : 3;
}

/*
 * Per router worker (registry slot) counters (rt_ctr[], KV_ROUTER_WORDS words) in index order.
 * pid: the owner at its last message, as the registry said; a slot another process took over
 * starts afresh (kvidx-ingestd zeroes it at the new owner's first message). Metrics label it
 * by process.
 */
#define KV_ROUTER_CTRS(X)                                                                    \
	X(pid) X(routes) X(routes_predicted) X(routes_confirmed) X(routes_nomatch)           \
	X(spec_routes) X(routes_in_time) X(routes_early_expiries) X(routes_stale_expiries)   \
	X(routes_dropped) X(outcomes) X(false_warm_routes) X(wasted_prefill_tokens)          \
	X(last_route_ns) X(confirmations)
enum kv_router_ctr {
#define KV_ROUTER_CTR_ENUM(n) KV_RT_##n,
	KV_ROUTER_CTRS(KV_ROUTER_CTR_ENUM)
#undef KV_ROUTER_CTR_ENUM
	KV_RT_COUNT
};
_Static_assert(KV_RT_COUNT <= KV_ROUTER_WORDS, "router counters fit their area");

/* ---- the writer's doors ----------------------------------------------------------------- */

struct kvidx;   /* the writer handle (kvidx_writer.h) */
struct kv_view; /* a reader's view (inspect.h) */

/*
 * A pod's counters as the writer writes them: in the segment (kv_tm_pod()) or, before the pod
 * is in the index, in a private buffer (kv_tm_pod_local()), carried into the segment when it
 * is (kv_tm_pod_carry()). The handle of a pod out of range is null (kv_tm_pod_ok() false) and
 * every call on it is a no-op reading 0.
 */
struct kv_tm_pod {
	uint64_t *w_; /* private: use the calls below */
};
struct kv_tm_pod_buf {
	uint64_t w[KV_POD_COUNTERS];
};
struct kv_tm_pod kv_tm_pod(struct kvidx *w, int pod);
static inline struct kv_tm_pod kv_tm_pod_local(struct kv_tm_pod_buf *b)
{
	return (struct kv_tm_pod){ b->w };
}
static inline bool kv_tm_pod_ok(struct kv_tm_pod t)
{
	return t.w_ != NULL;
}
/* Copies every non-zero word of from (counters and rank area) into to. */
void kv_tm_pod_carry(struct kv_tm_pod to, struct kv_tm_pod from);

static inline uint64_t kv_tm_get(struct kv_tm_pod t, enum kv_pod_ctr c)
{
	return t.w_ && (unsigned)c < KV_PC_COUNT ? ld_relaxed(&t.w_[c]) : 0;
}
static inline void kv_tm_add(struct kv_tm_pod t, enum kv_pod_ctr c, uint64_t v)
{
	if (t.w_ && (unsigned)c < KV_PC_COUNT)
		stat_add(&t.w_[c], v);
}
/* Sets a gauge; stores only when the value changes. */
static inline void kv_tm_set(struct kv_tm_pod t, enum kv_pod_ctr c, uint64_t v)
{
	if (t.w_ && (unsigned)c < KV_PC_COUNT && ld_relaxed(&t.w_[c]) != v)
		st_relaxed(&t.w_[c], v);
}
/* Rank rank's (< KV_POD_RANKS) word c of the pod's rank area. */
static inline uint64_t kv_tm_rank_get(struct kv_tm_pod t, unsigned rank, enum kv_rank_ctr c)
{
	return t.w_ && rank < KV_POD_RANKS && (unsigned)c < KV_RC_COUNT
		       ? ld_relaxed(&t.w_[KV_PC_RANK(rank, (unsigned)c)])
		       : 0;
}
static inline void kv_tm_rank_add(struct kv_tm_pod t, unsigned rank, enum kv_rank_ctr c,
				  uint64_t v)
{
	if (t.w_ && rank < KV_POD_RANKS && (unsigned)c < KV_RC_COUNT)
		stat_add(&t.w_[KV_PC_RANK(rank, (unsigned)c)], v);
}
static inline void kv_tm_rank_set(struct kv_tm_pod t, unsigned rank, enum kv_rank_ctr c,
				  uint64_t v)
{
	if (t.w_ && rank < KV_POD_RANKS && (unsigned)c < KV_RC_COUNT &&
	    ld_relaxed(&t.w_[KV_PC_RANK(rank, (unsigned)c)]) != v)
		st_relaxed(&t.w_[KV_PC_RANK(rank, (unsigned)c)], v);
}

/* A histogram the writer records into (a pod's, by id, or a router's); null if out of range. */
struct kv_tm_hist {
	uint64_t *b_; /* private */
};
struct kv_tm_hist kv_tm_hist(struct kvidx *w, int pod, enum kv_hist_id id);
static inline bool kv_tm_hist_ok(struct kv_tm_hist h)
{
	return h.b_ != NULL;
}
static inline void kv_tm_hist_add(struct kv_tm_hist h, uint64_t us)
{
	if (h.b_)
		kv_hist_add(h.b_, us);
}
/* Halves every bucket (a "recent" histogram's window). */
static inline void kv_tm_hist_decay(struct kv_tm_hist h)
{
	if (h.b_)
		kv_hist_decay(h.b_);
}

/* A registry slot's router counters and histogram as the writer writes them; null if out
 * of range. */
struct kv_tm_router {
	struct kvidx_router *r_; /* private */
};
struct kv_tm_router kv_tm_router(struct kvidx *w, int slot);
static inline bool kv_tm_router_ok(struct kv_tm_router t)
{
	return t.r_ != NULL;
}
static inline uint64_t kv_tm_router_get(struct kv_tm_router t, enum kv_router_ctr c)
{
	return t.r_ && (unsigned)c < KV_RT_COUNT ? ld_relaxed(&t.r_->rt_ctr[c]) : 0;
}
static inline void kv_tm_router_add(struct kv_tm_router t, enum kv_router_ctr c, uint64_t v)
{
	if (t.r_ && (unsigned)c < KV_RT_COUNT)
		stat_add(&t.r_->rt_ctr[c], v);
}
static inline void kv_tm_router_set(struct kv_tm_router t, enum kv_router_ctr c, uint64_t v)
{
	if (t.r_ && (unsigned)c < KV_RT_COUNT)
		st_relaxed(&t.r_->rt_ctr[c], v);
}
static inline struct kv_tm_hist kv_tm_router_hist(struct kv_tm_router t)
{
	return (struct kv_tm_hist){ t.r_ ? t.r_->rt_hist : NULL };
}
/* Zeroes the slot's counters and histogram (a new owner starts afresh). */
void kv_tm_router_reset(struct kv_tm_router t);

/* ---- the readers' doors ----------------------------------------------------------------- */

/* A histogram to read (a reader's view of one, or one the writer records into); null if out
 * of range: it counts 0 samples and has no quantile. */
struct kv_tm_hist_ro {
	const uint64_t *b_; /* private */
};
static inline struct kv_tm_hist_ro kv_tm_hist_ro(struct kv_tm_hist h)
{
	return (struct kv_tm_hist_ro){ h.b_ };
}
static inline bool kv_tm_ro_ok(struct kv_tm_hist_ro h)
{
	return h.b_ != NULL;
}
static inline uint64_t kv_tm_ro_count(struct kv_tm_hist_ro h)
{
	return h.b_ ? kv_hist_count(h.b_) : 0;
}
/* As kv_hist_quantile(): 0 and *us, or -ENODATA when h is empty (or null). */
int kv_tm_ro_quantile(struct kv_tm_hist_ro h, double q, uint64_t *us);
/* Copies the KV_HIST_BUCKETS buckets (relaxed loads) into out; all 0 for a null h. */
void kv_tm_ro_buckets(struct kv_tm_hist_ro h, uint64_t out[KV_HIST_BUCKETS]);

/* A reader's view of the telemetry: values, 0 when out of range. kv_tm_view_pod() reads any
 * word of the named area (c < KV_POD_NAMED), so a counter a newer writer of the same layout
 * adds shows as a number (kvidx-dump prints it as ctr[c]). */
uint64_t kv_tm_view_stat(const struct kv_view *v, enum kv_stat c);
uint64_t kv_tm_view_pod(const struct kv_view *v, int pod, enum kv_pod_ctr c);
uint64_t kv_tm_view_rank(const struct kv_view *v, int pod, unsigned rank, enum kv_rank_ctr c);
uint64_t kv_tm_view_router(const struct kv_view *v, int slot, enum kv_router_ctr c);
struct kv_tm_hist_ro kv_tm_view_hist(const struct kv_view *v, int pod, enum kv_hist_id id);
struct kv_tm_hist_ro kv_tm_view_router_hist(const struct kv_view *v, int slot);

#endif /* KVIDX_TELEMETRY_H */
