/*
 * telemetry.c — the typed doors of telemetry.h: handles to a pod's counters, its histograms
 * and a router slot's statistics for the writer, values and read-only histograms for the
 * readers, all bounds-checked against the geometry the writer or the view holds (never the
 * segment's own header).
 */
#include <errno.h>
#include <string.h>

#include "inspect.h"
#include "telemetry.h"

struct kv_tm_pod kv_tm_pod(struct kvidx *w, int pod)
{
	return (struct kv_tm_pod){ kv_writer_pod_ctrs(w, pod) };
}

void kv_tm_pod_carry(struct kv_tm_pod to, struct kv_tm_pod from)
{
	if (!to.w_ || !from.w_)
		return;
	for (unsigned c = 0; c < KV_POD_COUNTERS; c++) {
		uint64_t v = ld_relaxed(&from.w_[c]);
		if (v)
			st_relaxed(&to.w_[c], v);
	}
}

struct kv_tm_hist kv_tm_hist(struct kvidx *w, int pod, enum kv_hist_id id)
{
	return (struct kv_tm_hist){ kv_writer_pod_hist(w, pod, (int)id) };
}

struct kv_tm_router kv_tm_router(struct kvidx *w, int slot)
{
	return (struct kv_tm_router){ kv_writer_router(w, slot) };
}

void kv_tm_router_reset(struct kv_tm_router t)
{
	if (!t.r_)
		return;
	for (unsigned c = 0; c < KV_ROUTER_WORDS; c++)
		st_relaxed(&t.r_->rt_ctr[c], 0);
	for (unsigned b = 0; b < KV_HIST_BUCKETS; b++)
		st_relaxed(&t.r_->rt_hist[b], 0);
}

int kv_tm_ro_quantile(struct kv_tm_hist_ro h, double q, uint64_t *us)
{
	return h.b_ ? kv_hist_quantile(h.b_, q, us) : -ENODATA;
}

void kv_tm_ro_buckets(struct kv_tm_hist_ro h, uint64_t out[KV_HIST_BUCKETS])
{
	for (unsigned b = 0; b < KV_HIST_BUCKETS; b++)
		out[b] = h.b_ ? ld_relaxed(&h.b_[b]) : 0;
}

uint64_t kv_tm_view_stat(const struct kv_view *v, enum kv_stat c)
{
	if (!v->st || (unsigned)c >= KV_ST_COUNT)
		return 0;
	return ld_relaxed(&((const uint64_t *)v->st)[c]);
}

uint64_t kv_tm_view_pod(const struct kv_view *v, int pod, enum kv_pod_ctr c)
{
	if (!v->pods || pod < 0 || (uint32_t)pod >= v->max_pods || (unsigned)c >= KV_POD_NAMED)
		return 0;
	return ld_relaxed(&v->pods[pod].pd_ctr[c]);
}

uint64_t kv_tm_view_rank(const struct kv_view *v, int pod, unsigned rank, enum kv_rank_ctr c)
{
	if (!v->pods || pod < 0 || (uint32_t)pod >= v->max_pods || rank >= KV_POD_RANKS ||
	    (unsigned)c >= KV_RC_COUNT)
		return 0;
	return ld_relaxed(&v->pods[pod].pd_ctr[KV_PC_RANK(rank, (unsigned)c)]);
}

uint64_t kv_tm_view_router(const struct kv_view *v, int slot, enum kv_router_ctr c)
{
	const struct kvidx_router *rt = kv_view_router(v, slot);

	return rt && (unsigned)c < KV_RT_COUNT ? ld_relaxed(&rt->rt_ctr[c]) : 0;
}

struct kv_tm_hist_ro kv_tm_view_hist(const struct kv_view *v, int pod, enum kv_hist_id id)
{
	return (struct kv_tm_hist_ro){ kv_view_pod_hist(v, pod, (int)id) };
}

struct kv_tm_hist_ro kv_tm_view_router_hist(const struct kv_view *v, int slot)
{
	const struct kvidx_router *rt = kv_view_router(v, slot);

	return (struct kv_tm_hist_ro){ rt ? rt->rt_hist : NULL };
}
