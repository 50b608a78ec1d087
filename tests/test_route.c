/*
 * test_route.c — route commits and outcomes through the per-reader rings (lib/route.c), and
 * the latency histograms (lib/hist.c).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "hist.h"
#include "internal.h"
#include "util_index.h"

static char name[64];
static struct kvidx *w;
static struct kvidx_reader *r;

static void setup(void)
{
	struct kvidx_writer_opts o = { .name = name, .geo = { .capacity = 1000,
							     .ring_entries = 64 } };

	tu_index_name(name, sizeof(name), "route");
	w = kvidx_writer_open(&o);
	cr_assert_not_null(w, "%s", kvidx_strerror(-errno));
	r = kvidx_reader_open(name);
	cr_assert_not_null(r);
}

static void teardown(void)
{
	kvidx_reader_close(r);
	kvidx_writer_close(w, true);
}

struct seen {
	int routes, outcomes;
	struct kvidx_route rt;
	uint64_t keys[KVIDX_MAX_COMMIT_KEYS];
	uint64_t commit_ns;
	struct kvidx_outcome o;
};

static void on_route(void *arg, const struct kvidx_route *rt, uint64_t commit_ns)
{
	struct seen *s = arg;
	s->routes++;
	s->rt = *rt;
	memcpy(s->keys, rt->keys, rt->nkeys * sizeof(uint64_t));
	s->commit_ns = commit_ns;
}

static void on_outcome(void *arg, const struct kvidx_outcome *o)
{
	struct seen *s = arg;
	s->outcomes++;
	s->o = *o;
}

TestSuite(route, .init = setup, .fini = teardown);

Test(route, commit_reaches_writer_whole)
{
	static struct seen s;
	struct kvidx_drain_ops ops = { on_route, on_outcome, &s };
	uint64_t keys[20];
	for (int i = 0; i < 20; i++)
		keys[i] = 0x1000 + (uint64_t)i;
	int pod = kvidx_pod_add(w, "a:1", NULL);
	struct kvidx_route rt = { .corr_id = 77, .pod = pod, .prefill_pod = -1, .keys = keys,
				  .nkeys = 20, .matched_blocks = 5, .matched_spec = 2,
				  .prompt_tokens = 333 };
	uint64_t t0 = kvidx_now_ns();
	cr_assert_eq(kvidx_commit(r, &rt), 0);
	cr_assert_eq(kvidx_report_outcome(r, 77, pod, 80, 320), 0);
	cr_assert_eq(kvidx_drain(w, 1000, &ops), 1 + 4 + 1);
	cr_assert_eq(s.routes, 1);
	cr_assert_eq(s.rt.corr_id, 77);
	cr_assert_eq(s.rt.pod, pod);
	cr_assert_eq(s.rt.prefill_pod, -1);
	cr_assert_eq(s.rt.nkeys, 20);
	cr_assert_eq(s.rt.matched_blocks, 5);
	cr_assert_eq(s.rt.matched_spec, 2);
	cr_assert_eq(s.rt.prompt_tokens, 333);
	cr_assert_arr_eq(s.keys, keys, sizeof(keys));
	cr_assert_geq(s.commit_ns, t0);
	cr_assert_eq(s.outcomes, 1);
	cr_assert_eq(s.o.cached_tokens, 80);
	cr_assert_eq(s.o.prompt_tokens, 320);
	cr_assert_eq(kvidx_drain(w, 1000, &ops), 0, "nothing twice");
	cr_assert_eq(kv_writer_stats(w)->route_commits, 1);
}

Test(route, full_ring_drops_and_counts)
{
	static struct seen s;
	struct kvidx_drain_ops ops = { on_route, on_outcome, &s };
	uint64_t keys[30] = { 0 };
	struct kvidx_route rt = { .corr_id = 1, .pod = 0, .prefill_pod = 3, .keys = keys,
				  .nkeys = 30 };
	/* 6 messages per commit in a 64-entry ring: 10 fit, the 11th is dropped. */
	int ok = 0, dropped = 0;
	for (int i = 0; i < 11; i++) {
		int rc = kvidx_commit(r, &rt);
		ok += rc == 0;
		dropped += rc == -EAGAIN;
	}
	cr_assert_eq(ok, 10);
	cr_assert_eq(dropped, 1);
	const struct kvidx_ctl_hdr *ctl = kv_reader_ctl(r);
	const struct kvidx_reader_slot *rs = (const void *)((const char *)ctl + ctl->ch_slots_off);
	cr_assert_eq(rs[kv_reader_slot_index(r)].rs_dropped, 1);
	cr_assert_eq(kvidx_drain(w, 1000, &ops), 60);
	cr_assert_eq(s.routes, 10);
	cr_assert_eq(s.rt.prefill_pod, 3);
	cr_assert_eq(kvidx_commit(r, &rt), 0, "room again after the drain");
	/* A longer prompt is not refused for its length: its first KVIDX_MAX_COMMIT_KEYS keys
	 * go (343 messages, more than this 64-entry ring: dropped as full; the load suite sends
	 * one through ingestd's default rings). */
	static uint64_t many[KVIDX_MAX_COMMIT_KEYS + 1];
	rt.keys = many;
	rt.nkeys = KVIDX_MAX_COMMIT_KEYS + 1;
	cr_assert_eq(kvidx_commit(r, &rt), -EAGAIN);
	rt.keys = keys;
	rt.nkeys = 1;
	rt.pod = -1;
	cr_assert_eq(kvidx_commit(r, &rt), -EINVAL);
}

Test(route, stale_generation_and_garbage_rejected)
{
	static struct seen s;
	struct kvidx_drain_ops ops = { on_route, on_outcome, &s };
	uint64_t key = 9;
	struct kvidx_route rt = { .corr_id = 1, .pod = 0, .prefill_pod = -1, .keys = &key,
				  .nkeys = 1 };
	cr_assert_eq(kvidx_commit(r, &rt), 0);
	/* A writer restart: commits stamped with the old generation name other pod indices. */
	kvidx_writer_close(w, false);
	struct kvidx_writer_opts o = { .name = name, .geo = { .capacity = 1000 } };
	w = kvidx_writer_open(&o);
	cr_assert_not_null(w);
	cr_assert_eq(kvidx_drain(w, 1000, &ops), 2);
	cr_assert_eq(s.routes, 0);
	cr_assert_eq(kv_writer_stats(w)->route_bad, 1);
	/* The reader switches generation on its next call; then commits go through. */
	struct kvidx_rec rec[1];
	cr_assert_eq(kvidx_lookup(r, 1, rec, 1), 0);
	cr_assert_eq(kvidx_commit(r, &rt), 0);
	cr_assert_eq(kvidx_drain(w, 1000, &ops), 2);
	cr_assert_eq(s.routes, 1);

	/* A producer that scribbles a head far ahead: the writer drops and counts one ring's
	 * worth (64 entries), no crash. */
	struct kvidx_ctl_hdr *ctl = (struct kvidx_ctl_hdr *)kv_reader_ctl(r);
	struct kv_ring_hdr *rh = kv_ring_at(ctl, ctl->ch_max_readers, ctl->ch_ring_entries,
					    (uint32_t)kv_reader_slot_index(r));
	cr_assert_eq(ctl->ch_ring_entries, 64);
	uint64_t before = kv_writer_stats(w)->route_bad;
	__atomic_store_n(&rh->rh_head, rh->rh_head + 1000000, __ATOMIC_RELEASE);
	cr_assert_eq(kvidx_drain(w, 1000, &ops), 0);
	cr_assert_eq(kv_writer_stats(w)->route_bad, before + 64);
	/* A head behind the tail (a truncation zeroed it, or forged): the same, and the count
	 * does not wrap (it once added head - tail, about 2^64). */
	__atomic_store_n(&rh->rh_head, rh->rh_head - 5, __ATOMIC_RELEASE);
	cr_assert_eq(kvidx_drain(w, 1000, &ops), 0);
	cr_assert_eq(kv_writer_stats(w)->route_bad, before + 128, "route_bad %llu",
		     (unsigned long long)(kv_writer_stats(w)->route_bad - before));
	before += 64;
	/* Stray key messages (a commit header lost) are skipped one by one. */
	struct kv_msg *msgs = (struct kv_msg *)(rh + 1);
	uint64_t h = rh->rh_head;
	memset(&msgs[h & 63], 0, sizeof(struct kv_msg));
	msgs[h & 63].m_type = KV_MSG_KEYS;
	msgs[h & 63].m_n = 3;
	__atomic_store_n(&rh->rh_head, h + 1, __ATOMIC_RELEASE);
	cr_assert_eq(kvidx_drain(w, 1000, &ops), 1);
	cr_assert_eq(s.routes, 1);
	cr_assert_eq(kv_writer_stats(w)->route_bad, before + 65);
}

Test(route, histogram_buckets_and_quantiles)
{
	for (uint64_t v = 0; v < 16; v++)
		cr_assert_eq(kv_hist_bucket(v), v);
	/* Every value lies within its bucket's bounds, buckets are contiguous. */
	for (uint64_t v = 1; v < (1ull << 27); v = v * 5 / 4 + 1) {
		unsigned b = kv_hist_bucket(v);
		cr_assert(kv_hist_lower(b) <= v && v <= kv_hist_upper(b), "v=%llu b=%u",
			  (unsigned long long)v, b);
	}
	for (unsigned b = 0; b + 1 < KV_HIST_BUCKETS; b++)
		cr_assert_eq(kv_hist_upper(b) + 1, kv_hist_lower(b + 1));
	cr_assert_eq(kv_hist_bucket(UINT64_MAX), KV_HIST_BUCKETS - 1);
	cr_assert_geq(kv_hist_lower(KV_HIST_BUCKETS - 1), 60000000ull, "covers a minute");

	static uint64_t h[KV_HIST_BUCKETS];
	uint64_t q;
	cr_assert_eq(kv_hist_quantile(h, 0.5, &q), -ENODATA);
	/* docs/ttl.md's example distribution: 180 ms p50, 620 ms p95, 1.15 s p99. */
	for (int i = 0; i < 50; i++)
		kv_hist_add(h, 100000);
	for (int i = 0; i < 45; i++)
		kv_hist_add(h, 600000);
	for (int i = 0; i < 4; i++)
		kv_hist_add(h, 1100000);
	kv_hist_add(h, 5000000);
	cr_assert_eq(kv_hist_count(h), 100);
	cr_assert_eq(kv_hist_quantile(h, 0.50, &q), 0);
	cr_assert(q >= 100000 && q < 100000 * 1.125 + 1, "p50 %llu", (unsigned long long)q);
	cr_assert_eq(kv_hist_quantile(h, 0.95, &q), 0);
	cr_assert(q >= 600000 && q < 600000 * 1.125 + 1, "p95 %llu", (unsigned long long)q);
	cr_assert_eq(kv_hist_quantile(h, 0.99, &q), 0);
	cr_assert(q >= 1100000 && q < 1100000 * 1.125 + 1, "p99 %llu", (unsigned long long)q);
	kv_hist_decay(h);
	cr_assert_eq(kv_hist_count(h), 25 + 22 + 2 + 0, "each bucket halves, rounding down");
}

Test(route, doorbell_wakes_an_idle_writer)
{
	int fd = kvidx_writer_doorbell(w);
	cr_assert_geq(fd, 0, "doorbell: %s", strerror(-fd));
	cr_assert_eq(kvidx_writer_doorbell(w), fd, "one doorbell per writer");
	struct pollfd pfd = { .fd = fd, .events = POLLIN };

	/* Not idle: a commit rings nothing (no syscall on the busy path). */
	uint64_t key = 5;
	struct kvidx_route rt = { .corr_id = 1, .pod = 0, .prefill_pod = -1, .keys = &key,
				  .nkeys = 1 };
	cr_assert_eq(kvidx_commit(r, &rt), 0);
	cr_assert_eq(poll(&pfd, 1, 50), 0);
	cr_assert(kvidx_writer_idle(w, true), "a waiting commit is reported before sleeping");
	kvidx_writer_idle(w, false);
	kvidx_drain(w, 100, &(struct kvidx_drain_ops){ 0 });

	/* Idle with nothing waiting: the next commit rings. */
	cr_assert_not(kvidx_writer_idle(w, true));
	cr_assert_eq(kvidx_commit(r, &rt), 0);
	cr_assert_eq(poll(&pfd, 1, 2000), 1, "the doorbell rang");
	kvidx_writer_idle(w, false);
	cr_assert_eq(poll(&pfd, 1, 0), 0, "emptied on wake-up");
}
