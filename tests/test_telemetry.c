/*
 * test_telemetry.c — Criterion suite "telemetry": the typed doors of lib/telemetry.h. What the
 * writer adds and sets through its handles is what a reader's view reads, word for word
 * (pod counters, rank area, router counters, histograms); a pod's counters counted before it
 * was in the index are carried in; every handle out of range is null and harmless.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "inspect.h"
#include "kvidx_writer.h"
#include "telemetry.h"
#include "util_index.h"

static char name[64];
static struct kvidx *w;
static struct kvidx_reader *rd;

static void setup(void)
{
	tu_index_name(name, sizeof(name), "tele");
}

static void teardown(void)
{
	tu_reader_close(&rd);
	tu_index_remove(name, &w);
}

TestSuite(telemetry, .init = setup, .fini = teardown);

static const struct kv_view *open_both(int *pod)
{
	struct kvidx_writer_opts o = { .geo = { .capacity = 1000, .pods_per_key = 4 } };

	w = tu_writer_open(name, &o);
	*pod = kvidx_pod_add(w, "10.0.0.1:8000", "m");
	cr_assert_geq(*pod, 0);
	rd = kvidx_reader_open(name);
	cr_assert_not_null(rd);
	return kv_reader_view(rd);
}

Test(telemetry, writer_handles_are_what_readers_read)
{
	int pod;
	const struct kv_view *v = open_both(&pod);
	struct kv_tm_pod t = kv_tm_pod(w, pod);

	cr_assert(kv_tm_pod_ok(t));
	kv_tm_add(t, KV_PC_events, 5);
	kv_tm_add(t, KV_PC_events, 2);
	kv_tm_set(t, KV_PC_ttl_ms, 1234);
	kv_tm_rank_add(t, 3, KV_RC_batches, 9);
	kv_tm_rank_set(t, 3, KV_RC_flags, KV_RANK_IN_USE);
	cr_expect_eq(kv_tm_get(t, KV_PC_events), 7);
	cr_expect_eq(kv_tm_view_pod(v, pod, KV_PC_events), 7);
	cr_expect_eq(kv_tm_view_pod(v, pod, KV_PC_ttl_ms), 1234);
	cr_expect_eq(kv_tm_view_pod(v, pod, KV_PC_batches), 0, "a neighbour word stays 0");
	cr_expect_eq(kv_tm_view_rank(v, pod, 3, KV_RC_batches), 9);
	cr_expect_eq(kv_tm_rank_get(t, 3, KV_RC_flags), KV_RANK_IN_USE);
	cr_expect_eq(kv_tm_view_rank(v, pod, 2, KV_RC_batches), 0, "another rank's word stays 0");
	/* The layout's words are where FORMAT.md section 5.4 puts them. */
	cr_expect_eq(ld_relaxed(&v->pods[pod].pd_ctr[KV_PC_events]), 7);
	cr_expect_eq(ld_relaxed(&v->pods[pod].pd_ctr[KV_PC_RANK(3, KV_RC_batches)]), 9);
}

Test(telemetry, histograms_by_id_and_router_slots)
{
	int pod;
	const struct kv_view *v = open_both(&pod);
	struct kv_tm_hist lag = kv_tm_hist(w, pod, KV_HIST_LAG_RECENT);
	uint64_t us = 0, b[KV_HIST_BUCKETS];

	cr_assert(kv_tm_hist_ok(lag));
	for (int i = 0; i < 4; i++)
		kv_tm_hist_add(lag, 1000);
	struct kv_tm_hist_ro ro = kv_tm_view_hist(v, pod, KV_HIST_LAG_RECENT);
	cr_expect_eq(kv_tm_ro_count(ro), 4);
	cr_expect_eq(kv_tm_ro_count(kv_tm_view_hist(v, pod, KV_HIST_LAG)), 0, "another id");
	cr_expect_eq(kv_tm_ro_count(kv_tm_hist_ro(lag)), 4, "the writer reads its own");
	cr_assert_eq(kv_tm_ro_quantile(ro, 0.5, &us), 0);
	cr_expect(us >= 1000 && us <= 1125, "p50 %llu within a bucket of 1000", (unsigned long long)us);
	kv_tm_ro_buckets(ro, b);
	cr_expect_eq(b[kv_hist_bucket(1000)], 4);
	kv_tm_hist_decay(lag);
	cr_expect_eq(kv_tm_ro_count(ro), 2, "decay halves");
	kv_tm_hist_add(kv_tm_hist(w, pod, KV_HIST_CLASS(2)), 7);
	cr_expect_eq(kv_tm_ro_count(kv_tm_view_hist(v, pod, KV_HIST_CLASS(2))), 1);
	cr_expect_eq(kv_tm_ro_count(kv_tm_view_hist(v, pod, KV_HIST_CLASS(1))), 0);

	struct kv_tm_router rt = kv_tm_router(w, 1);
	cr_assert(kv_tm_router_ok(rt));
	kv_tm_router_set(rt, KV_RT_pid, 4242);
	kv_tm_router_add(rt, KV_RT_routes, 3);
	kv_tm_hist_add(kv_tm_router_hist(rt), 50);
	cr_expect_eq(kv_tm_view_router(v, 1, KV_RT_pid), 4242);
	cr_expect_eq(kv_tm_view_router(v, 1, KV_RT_routes), 3);
	cr_expect_eq(kv_tm_router_get(rt, KV_RT_routes), 3);
	cr_expect_eq(kv_tm_view_router(v, 0, KV_RT_routes), 0, "another slot");
	cr_expect_eq(kv_tm_ro_count(kv_tm_view_router_hist(v, 1)), 1);
	kv_tm_router_reset(rt);
	cr_expect_eq(kv_tm_view_router(v, 1, KV_RT_pid), 0);
	cr_expect_eq(kv_tm_ro_count(kv_tm_view_router_hist(v, 1)), 0, "reset clears the histogram");
}

Test(telemetry, counted_before_registration_is_carried_in)
{
	int pod;
	const struct kv_view *v = open_both(&pod);
	struct kv_tm_pod_buf buf;

	memset(&buf, 0, sizeof(buf));
	struct kv_tm_pod local = kv_tm_pod_local(&buf);
	kv_tm_add(local, KV_PC_decode_errors, 3);
	kv_tm_rank_set(local, 1, KV_RC_flags, KV_RANK_IN_USE | KV_RANK_CONNECTED);
	cr_expect_eq(kv_tm_view_pod(v, pod, KV_PC_decode_errors), 0, "not in the segment yet");
	kv_tm_set(kv_tm_pod(w, pod), KV_PC_ttl_ms, 500);
	kv_tm_pod_carry(kv_tm_pod(w, pod), local);
	cr_expect_eq(kv_tm_view_pod(v, pod, KV_PC_decode_errors), 3);
	cr_expect_eq(kv_tm_view_rank(v, pod, 1, KV_RC_flags), KV_RANK_IN_USE | KV_RANK_CONNECTED);
	cr_expect_eq(kv_tm_view_pod(v, pod, KV_PC_ttl_ms), 500, "a zero word carries nothing");
}

Test(telemetry, out_of_range_is_null_and_harmless)
{
	int pod;
	const struct kv_view *v = open_both(&pod);
	int far = (int)v->max_pods;
	uint64_t us = 0;

	cr_expect_not(kv_tm_pod_ok(kv_tm_pod(w, -1)));
	cr_expect_not(kv_tm_pod_ok(kv_tm_pod(w, far)));
	cr_expect_not(kv_tm_hist_ok(kv_tm_hist(w, far, KV_HIST_CONFIRM)));
	cr_expect_not(kv_tm_hist_ok(kv_tm_hist(w, pod, (enum kv_hist_id)KV_HIST_PER_POD)));
	cr_expect_not(kv_tm_router_ok(kv_tm_router(w, (int)v->max_readers)));
	kv_tm_add(kv_tm_pod(w, far), KV_PC_events, 1);
	kv_tm_rank_add(kv_tm_pod(w, pod), KV_POD_RANKS, KV_RC_batches, 1);
	kv_tm_hist_add(kv_tm_hist(w, far, KV_HIST_CONFIRM), 1);
	kv_tm_router_add(kv_tm_router(w, -1), KV_RT_routes, 1);
	kv_tm_router_reset(kv_tm_router(w, -1));
	cr_expect_eq(kv_tm_get(kv_tm_pod(w, far), KV_PC_events), 0);
	cr_expect_eq(kv_tm_view_pod(v, far, KV_PC_events), 0);
	cr_expect_eq(kv_tm_view_pod(v, pod, (enum kv_pod_ctr)KV_POD_NAMED), 0, "the rank area");
	kv_tm_add(kv_tm_pod(w, pod), KV_PC_COUNT, 1);
	cr_expect_eq(kv_tm_view_pod(v, pod, KV_PC_COUNT), 0, "the writer names no such counter");
	cr_expect_eq(kv_tm_view_rank(v, pod, KV_POD_RANKS, KV_RC_batches), 0);
	cr_expect_eq(kv_tm_view_router(v, -1, KV_RT_routes), 0);
	cr_expect_eq(kv_tm_ro_quantile(kv_tm_view_hist(v, far, KV_HIST_LAG), 0.5, &us), -ENODATA);
	cr_expect_eq(kv_tm_ro_count(kv_tm_view_router_hist(v, (int)v->max_readers)), 0);
	cr_expect_eq(kv_tm_view_stat(v, KV_ST_COUNT), 0);
	for (int c = 0; c < KV_PC_COUNT; c++)
		cr_expect_eq(kv_tm_view_pod(v, pod, (enum kv_pod_ctr)c), 0, "pod word %d untouched", c);
}

Test(telemetry, writer_stats_by_name)
{
	int pod;
	const struct kv_view *v = open_both(&pod);
	uint64_t keys[3] = { 11, 12, 13 };

	cr_assert_eq(kvidx_store(w, pod, keys, 3, KVIDX_TIER_GPU, kvidx_now_ns()), 3);
	cr_expect_eq(kv_tm_view_stat(v, KV_ST_keys), 3);
	cr_expect_eq(kv_tm_view_stat(v, KV_ST_stores), 3);
	cr_expect_eq(kv_tm_view_stat(v, KV_ST_keys), ld_relaxed(&v->st->keys), "the struct's word");
}
