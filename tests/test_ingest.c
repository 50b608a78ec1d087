/*
 * test_ingest.c — Criterion suite "ingest": kvidx-ingestd end to end, plus unit tests of its
 * configuration, engine-key map and sequence rules.
 *
 * End-to-end tests run the real daemon ($KVIDX_BIN/kvidx-ingestd, a child process with an
 * index name unique to the test) against a publisher inside the test: an XPUB socket (a PUB
 * that also tells us when ingestd's subscription has arrived) and a ROUTER playing vLLM's
 * replay socket, both bound to tcp://127.0.0.1:* and built with the wire encoder. The table is
 * then checked as a router would see it: kvidx_reader_open / kvidx_lookup / kvidx_score with
 * keys computed by kvidx_key_chain, and the pod's counters through inspect.h.
 *
 * Nothing sleeps for a fixed time: every check polls until a deadline (20 s), serving replay
 * requests while it waits. Events apply in order, so "X did not happen" is checked after a
 * later sentinel event became visible.
 *
 * The ingest rate measurement is the test ingest/rate: 20,000 one-block events by default,
 * KVIDX_INGEST_RATE=N for N events; it prints one "ingest-rate:" line to stderr.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "config.h"
#include "emap.h"
#include "fifomap.h"
#include "inspect.h"
#include "kvidx.h"
#include "seq.h"
#include "telemetry.h"
#include "util_index.h"
#include "util_ingestd.h"
#include "util_run.h"
#include "wire.h"

#define MODEL "test-model"
#define POD "10.0.0.1:8000"
#define TOPIC "kv@" POD "@" MODEL
#define BS 16

/* ---- per-test state ------------------------------------------------------------------------ */

static char confpath[256];

static void setup(void)
{
	tu_ingestd_setup("ing");
	snprintf(confpath, sizeof(confpath), "/tmp/%s.conf", tu_ing.name);
}

static void teardown(void)
{
	tu_ingestd_teardown();
	unlink(confpath);
}

TestSuite(ingest, .init = setup, .fini = teardown, .timeout = 120);

/* ---- events ---------------------------------------------------------------------------------- */

static struct kvw_event cleared(void)
{
	struct kvw_event ev;

	memset(&ev, 0, sizeof(ev));
	ev.type = KVW_ALL_BLOCKS_CLEARED;
	return ev;
}

static uint64_t pub_one(struct tu_pub *p, struct kvw_event ev)
{
	return tu_pub_events(p, &ev, 1);
}

/*
 * Publishes one BlockStored of the BS tokens t with engine hash h, after the block of engine
 * hash ph whose request key is pkey (ph 0: from the model's root); returns the block's key.
 */
static uint64_t pub_block(struct tu_pub *p, uint64_t h, uint64_t ph, uint64_t pkey,
			  const uint32_t *t)
{
	uint64_t k;

	tu_keys_of(MODEL, pkey, t, BS, &k);
	pub_one(p, tu_stored(&h, 1, ph != 0, ph, t, BS, BS));
	return k;
}

/* ---- ingestd --------------------------------------------------------------------------------- */

#define START(...) tu_ingestd_start((const char *const[]){ __VA_ARGS__, NULL })

/* Starts ingestd on publisher p (one pod, name= pinned) and waits for its subscription. */
static void start_on(struct tu_pub *p, const char *attrs)
{
	char spec[512];

	snprintf(spec, sizeof(spec), "%s,replay=%s%s", p->ep, p->rep, attrs ? attrs : "");
	START("--capacity", "16k", "--pod", spec);
	tu_pub_wait_subscribed(p);
}

/* ---- table checks ---------------------------------------------------------------------------- */

static int pod_index(const char *pod)
{
	return kvidx_reader_pod_find(tu_ing.rd, pod);
}

static bool holds(uint64_t key, int pod)
{
	return tu_tiers(key, pod) != 0;
}

/* Blocks of keys[0..n) pod holds from block 0 on, as kvidx_score sees it. */
static uint32_t score_blocks(const uint64_t *keys, size_t n, int pod)
{
	struct kvidx_score out[4];
	int cand = pod, r;

	do
		r = kvidx_score(tu_ing.rd, keys, n, &cand, 1, NULL, out, 4);
	while (r == -KVIDX_ERETRY);
	cr_assert_eq(r, 1, "score: %d", r);
	return out[0].blocks;
}

/* ---- end-to-end tests ------------------------------------------------------------------------ */

Test(ingest, stores_chain_and_removes)
{
	struct tu_pub *p = tu_pub_open(TOPIC);
	const uint32_t *t = tu_toks(1000, 3 * BS);
	uint64_t h01[] = { 101, 102 }, h2[] = { 103 }, k[3];

	start_on(p, NULL);
	cr_assert_eq(tu_keys_of(MODEL, 0, t, 3 * BS, k), 3);
	pub_one(p, tu_stored(h01, 2, false, 0, t, 2 * BS, BS));
	pub_one(p, tu_stored(h2, 1, true, 102, t + 2 * BS, BS, BS));
	int pod = tu_wait_pod(POD);
	TU_EVENTUALLY(holds(k[2], pod), "chained block not stored; log: %s", tu_ing.log);
	cr_assert(holds(k[0], pod) && holds(k[1], pod));
	cr_assert_eq(tu_tiers(k[0], pod), KVIDX_TIER_GPU);
	cr_assert_eq(score_blocks(k, 3, pod), 3);

	pub_one(p, tu_removed(&h01[1], 1, NULL));
	TU_EVENTUALLY(!holds(k[1], pod), "removed block still held; log: %s", tu_ing.log);
	cr_assert(holds(k[0], pod) && holds(k[2], pod));
	cr_assert_eq(score_blocks(k, 3, pod), 1);
	tu_wait_batches(pod, 3);
	cr_assert_eq(tu_ctr(pod, KV_PC_blocks_stored), 3);
	cr_assert_eq(tu_ctr(pod, KV_PC_blocks_removed), 1);
	cr_assert_eq(tu_ctr(pod, KV_PC_events), 3);
	cr_assert_eq(tu_ctr(pod, KV_PC_last_seq), 2);
	cr_assert_eq(tu_ctr(pod, KV_PC_connected), 1);
	cr_assert_neq(tu_ctr(pod, KV_PC_last_event_ns), 0);
	cr_assert_eq(tu_ctr(pod, KV_PC_decode_errors), 0);

	char pname[KVIDX_POD_NAME_MAX], pmodel[KVIDX_POD_NAME_MAX];
	cr_assert_eq(kvidx_reader_pod(tu_ing.rd, pod, pname, pmodel), 0);
	cr_assert_str_eq(pmodel, MODEL);
}

Test(ingest, map_encoding_and_bin_hashes)
{
	struct tu_pub *p = tu_pub_open(TOPIC);
	const uint32_t *t = tu_toks(5000, 2 * BS);
	uint64_t h[] = { 0xF1E2D3C4B5A69788ull, 0x8000000000000001ull }, k[2];
	struct kvw_event ev[2] = { tu_stored(h, 1, false, 0, t, BS, BS),
				   tu_stored(h + 1, 1, true, h[0], t + BS, BS, BS) };

	start_on(p, NULL);
	tu_keys_of(MODEL, 0, t, 2 * BS, k);
	tu_pub_events_ex(p, ev, 2, true, KVW_FORM_MAP);
	int pod = tu_wait_pod(POD);
	TU_EVENTUALLY(holds(k[1], pod), "map-form batch not applied; log: %s", tu_ing.log);
	cr_assert(holds(k[0], pod));
}

Test(ingest, all_blocks_cleared_clears_pod_and_map)
{
	struct tu_pub *p = tu_pub_open(TOPIC);
	const uint32_t *a = tu_toks(100, 2 * BS), *b = tu_toks(9000, BS), *c = tu_toks(7000, BS);
	uint64_t ha[] = { 1, 2 }, hb[] = { 3 }, hc[] = { 4 }, ka[2], kb[1], kc[2];

	start_on(p, NULL);
	tu_keys_of(MODEL, 0, a, 2 * BS, ka);
	tu_keys_of(MODEL, 0, b, BS, kb);
	pub_one(p, tu_stored(ha, 2, false, 0, a, 2 * BS, BS));
	int pod = tu_wait_pod(POD);
	TU_EVENTUALLY(holds(ka[1], pod), "not stored; log: %s", tu_ing.log);

	struct kvw_event ev[3] = { cleared(), tu_stored(hb, 1, false, 0, b, BS, BS),
				   /* the parent's mapping went with the clear */
				   tu_stored(hc, 1, true, 2, c, BS, BS) };
	tu_pub_events(p, ev, 3);
	TU_EVENTUALLY(holds(kb[0], pod), "block after the clear not stored; log: %s", tu_ing.log);
	cr_assert(!holds(ka[0], pod) && !holds(ka[1], pod), "cleared blocks still held");
	tu_keys_of(MODEL, ka[1], c, BS, kc);
	tu_wait_batches(pod, 2);
	cr_assert(!holds(kc[0], pod));
	cr_assert_eq(tu_ctr(pod, KV_PC_clears), 1);
	cr_assert_eq(tu_ctr(pod, KV_PC_unknown_parent), 1);
}

Test(ingest, cpu_medium_is_cpu_tier)
{
	struct tu_pub *p = tu_pub_open(TOPIC);
	const uint32_t *t = tu_toks(300, BS);
	uint64_t h[] = { 11 }, k[1];
	struct kvw_event ev = tu_stored(h, 1, false, 0, t, BS, BS);

	start_on(p, NULL);
	tu_keys_of(MODEL, 0, t, BS, k);
	strcpy(ev.medium, "CPU");
	pub_one(p, ev);
	int pod = tu_wait_pod(POD);
	TU_EVENTUALLY(holds(k[0], pod), "not stored; log: %s", tu_ing.log);
	cr_assert_eq(tu_tiers(k[0], pod), KVIDX_TIER_CPU);

	/* The same block lands on GPU too: both tiers. */
	strcpy(ev.medium, "GPU");
	pub_one(p, ev);
	TU_EVENTUALLY(tu_tiers(k[0], pod) == (KVIDX_TIER_CPU | KVIDX_TIER_GPU), "GPU not added");
	/* Removal is per tier. */
	pub_one(p, tu_removed(h, 1, "GPU"));
	TU_EVENTUALLY(tu_tiers(k[0], pod) == KVIDX_TIER_CPU, "GPU removal did not leave CPU");
	pub_one(p, tu_removed(h, 1, "cpu"));
	TU_EVENTUALLY(!holds(k[0], pod), "CPU removal did not remove the block");
}

Test(ingest, non_prefix_group_ignored)
{
	struct tu_pub *p = tu_pub_open(TOPIC);
	const uint32_t *a = tu_toks(400, BS), *b = tu_toks(500, BS), *c = tu_toks(600, BS);
	uint64_t ha[] = { 21 }, hb[] = { 22 }, hc[] = { 23 }, ka[1], kb[1], kc[1];
	struct kvw_event ev[3] = { tu_stored(ha, 1, false, 0, a, BS, BS),
				   tu_stored(hb, 1, false, 0, b, BS, BS),
				   tu_stored(hc, 1, false, 0, c, BS, BS) };

	strcpy(ev[0].spec_kind, "sliding_window");
	ev[0].has_sliding_window = true;
	ev[0].sliding_window = 128;
	strcpy(ev[1].spec_kind, "mamba");
	strcpy(ev[2].spec_kind, "mla_attention");
	start_on(p, NULL);
	tu_keys_of(MODEL, 0, a, BS, ka);
	tu_keys_of(MODEL, 0, b, BS, kb);
	tu_keys_of(MODEL, 0, c, BS, kc);
	tu_pub_events(p, ev, 3);
	int pod = tu_wait_pod(POD);
	TU_EVENTUALLY(holds(kc[0], pod), "MLA group not indexed; log: %s", tu_ing.log);
	cr_assert(!holds(ka[0], pod), "sliding-window group indexed");
	cr_assert(!holds(kb[0], pod), "mamba group indexed");
	cr_assert_eq(tu_ctr(pod, KV_PC_skipped_events), 2);
}

Test(ingest, lora_name_changes_keys)
{
	struct tu_pub *p = tu_pub_open(TOPIC);
	const uint32_t *t = tu_toks(800, 2 * BS);
	uint64_t h[] = { 31, 32 }, kl[2], km[2];
	struct kvw_event ev = tu_stored(h, 2, false, 0, t, 2 * BS, BS);

	strcpy(ev.lora_name, "my-lora");
	start_on(p, NULL);
	tu_keys_of("my-lora", 0, t, 2 * BS, kl);
	tu_keys_of(MODEL, 0, t, 2 * BS, km);
	pub_one(p, ev);
	int pod = tu_wait_pod(POD);
	TU_EVENTUALLY(holds(kl[1], pod), "LoRA keys not stored; log: %s", tu_ing.log);
	cr_assert(holds(kl[0], pod));
	cr_assert(!holds(km[0], pod) && !holds(km[1], pod), "base-model keys stored for a LoRA");
}

Test(ingest, model_override_and_xxh64)
{
	struct tu_pub *p = tu_pub_open("kv@" POD "@topic-model");
	const uint32_t *t = tu_toks(850, BS);
	uint64_t h[] = { 33 }, k[1];
	char spec[512];

	snprintf(spec, sizeof(spec), "%s,model=other-model,name=10.9.9.9:1", p->ep);
	START("--capacity", "16k", "--algo", "xxh64", "--seed", "s1", "--pod", spec);
	tu_pub_wait_subscribed(p);
	kvidx_key_chain(KVIDX_KEY_XXH64, kvidx_key_root(KVIDX_KEY_XXH64, "s1", "other-model"), t,
			BS, BS, k, 1);
	int pod = tu_wait_pod("10.9.9.9:1");
	pub_one(p, tu_stored(h, 1, false, 0, t, BS, BS));
	TU_EVENTUALLY(holds(k[0], pod), "model= / xxh64 keys not stored; log: %s", tu_ing.log);
}

Test(ingest, unknown_parent_skipped)
{
	struct tu_pub *p = tu_pub_open(TOPIC);
	const uint32_t *a = tu_toks(1100, BS), *b = tu_toks(1200, BS);
	uint64_t ha[] = { 41 }, hb[] = { 42 }, ka[1], kb[1];
	struct kvw_event ev[2] = { tu_stored(ha, 1, true, 0xdeadbeef, a, BS, BS),
				   tu_stored(hb, 1, false, 0, b, BS, BS) };

	start_on(p, NULL);
	tu_keys_of(MODEL, 0, a, BS, ka);
	tu_keys_of(MODEL, 0, b, BS, kb);
	tu_pub_events(p, ev, 2);
	int pod = tu_wait_pod(POD);
	TU_EVENTUALLY(holds(kb[0], pod), "event after the unknown parent not applied; log: %s",
		      tu_ing.log);
	cr_assert(!holds(ka[0], pod));
	tu_wait_batches(pod, 1);
	cr_assert_eq(tu_ctr(pod, KV_PC_unknown_parent), 1);
	cr_assert_eq(tu_ctr(pod, KV_PC_blocks_stored), 1);
	/* A child of the skipped block is unknown too. */
	pub_one(p, tu_stored((uint64_t[]){ 43 }, 1, true, 41, b, BS, BS));
	TU_EVENTUALLY(tu_ctr(pod, KV_PC_unknown_parent) == 2,
		      "child of a skipped block not skipped");
}

Test(ingest, engine_blocks_multiple_of_index_blocks)
{
	struct tu_pub *p = tu_pub_open(TOPIC);
	const uint32_t *t = tu_toks(2000, 6 * BS), *u = tu_toks(3000, 3 * BS);
	uint64_t h[] = { 51, 52, 53 }, k[6], ku[3];

	start_on(p, NULL);
	tu_keys_of(MODEL, 0, t, 6 * BS, k);
	/* Engine blocks of 32 tokens: each is two index blocks. */
	pub_one(p, tu_stored(h, 2, false, 0, t, 4 * BS, 2 * BS));
	pub_one(p, tu_stored(h + 2, 1, true, 52, t + 4 * BS, 2 * BS, 2 * BS));
	int pod = tu_wait_pod(POD);
	TU_EVENTUALLY(holds(k[5], pod), "chained 32-token block not stored; log: %s", tu_ing.log);
	cr_assert_eq(score_blocks(k, 6, pod), 6);
	/* Removing engine block 51 removes both of its index blocks. */
	pub_one(p, tu_removed(h, 1, NULL));
	TU_EVENTUALLY(!holds(k[0], pod) && !holds(k[1], pod), "engine block not fully removed");
	cr_assert(holds(k[2], pod) && holds(k[3], pod));
	tu_wait_batches(pod, 3);
	cr_assert_eq(tu_ctr(pod, KV_PC_blocks_removed), 2);
	/* 48 tokens per engine block is not a multiple of 16... it is; 24 is not. */
	tu_keys_of(MODEL, 0, u, 3 * BS, ku);
	pub_one(p, tu_stored((uint64_t[]){ 54, 55 }, 2, false, 0, u, 3 * BS, 24));
	pub_one(p, tu_stored((uint64_t[]){ 56 }, 1, false, 0, u, 3 * BS, 3 * BS));
	TU_EVENTUALLY(holds(ku[2], pod), "48-token engine block not stored");
	tu_wait_batches(pod, 5);
	cr_assert_eq(tu_ctr(pod, KV_PC_skipped_events), 1);
}

/* Publishes seqs 0..4, each one block chained on the previous; lost: which are not sent. */
static void chain5(struct tu_pub *p, const bool lost[5], uint64_t k[5], const uint32_t **t)
{
	*t = tu_toks(20000, 5 * BS);
	tu_keys_of(MODEL, 0, *t, 5 * BS, k);
	for (int i = 0; i < 5; i++) {
		uint64_t h = 600 + (uint64_t)i;
		struct kvw_event ev = tu_stored(&h, 1, i > 0, h - 1, *t + i * BS, BS, BS);
		tu_pub_events_ex(p, &ev, 1, !lost[i], KVW_FORM_ARRAY);
	}
}

Test(ingest, gap_is_replayed)
{
	struct tu_pub *p = tu_pub_open(TOPIC);
	const bool lost[5] = { false, false, true, false, false };
	const uint32_t *t;
	uint64_t k[5];

	start_on(p, NULL);
	chain5(p, lost, k, &t);
	int pod = tu_wait_pod(POD);
	TU_EVENTUALLY(holds(k[4], pod), "chain not complete after replay; log: %s", tu_ing.log);
	TU_EVENTUALLY(tu_ctr(pod, KV_PC_replays_ok) == 1, "replay not finished; log: %s",
		      tu_ing.log);
	cr_assert_eq(score_blocks(k, 5, pod), 5);
	cr_assert_eq(p->replay_requests, 1);
	cr_assert_eq(p->last_replay_from, 2);
	cr_assert_eq(tu_ctr(pod, KV_PC_seq_gaps), 1);
	cr_assert_eq(tu_ctr(pod, KV_PC_last_seq), 4);
	/* Seqs 3 and 4 came both live and replayed: applied once, no dups, no errors. */
	tu_wait_batches(pod, 5);
	cr_assert_eq(tu_ctr(pod, KV_PC_seq_dups), 0);
	cr_assert_eq(tu_ctr(pod, KV_PC_clears), 0);
	/* Live ingest goes on. */
	uint64_t k6 = pub_block(p, 700, 604, k[4], tu_toks(21000, BS));
	TU_EVENTUALLY(holds(k6, pod), "live after replay not applied");
	cr_assert_eq(tu_ctr(pod, KV_PC_seq_gaps), 1);
}

Test(ingest, replay_truncated_clears_pod)
{
	struct tu_pub *p = tu_pub_open(TOPIC);
	const bool lost[5] = { false, false, true, false, false };
	const uint32_t *t;
	uint64_t k[5];

	p->keep_from = 3; /* the publisher no longer has seq 2 */
	p->old_framing = true;
	start_on(p, NULL);
	chain5(p, lost, k, &t);
	int pod = tu_wait_pod(POD);
	TU_EVENTUALLY(tu_ctr(pod, KV_PC_replays_truncated) == 1, "no truncated replay; log: %s",
		      tu_ing.log);
	TU_EVENTUALLY(tu_ctr(pod, KV_PC_last_seq) == 4, "live did not continue; log: %s",
		      tu_ing.log);
	tu_wait_batches(pod, 4);
	cr_assert(!holds(k[0], pod) && !holds(k[1], pod), "blocks before the gap survived");
	cr_assert_eq(tu_ctr(pod, KV_PC_clears), 1);
	/* Seq 3's parent went with the clear: 3 and 4 are unknown-parent skips. */
	cr_assert_eq(tu_ctr(pod, KV_PC_unknown_parent), 2);
	/* A fresh chain after the clear is indexed. */
	uint64_t kn = pub_block(p, 800, 0, 0, tu_toks(22000, BS));
	TU_EVENTUALLY(holds(kn, pod), "live after truncation not applied");
}

Test(ingest, gap_without_replay_endpoint_clears_pod)
{
	struct tu_pub *p = tu_pub_open(TOPIC);
	const uint32_t *a = tu_toks(30000, BS), *b = tu_toks(31000, BS);
	uint64_t ha = 901, hb = 902, ka[1], kb[1];
	char spec[256];

	snprintf(spec, sizeof(spec), "%s", p->ep);
	START("--capacity", "16k", "--pod", spec);
	tu_pub_wait_subscribed(p);
	tu_keys_of(MODEL, 0, a, BS, ka);
	tu_keys_of(MODEL, 0, b, BS, kb);
	pub_one(p, tu_stored(&ha, 1, false, 0, a, BS, BS));
	int pod = tu_wait_pod(POD);
	TU_EVENTUALLY(holds(ka[0], pod), "not stored; log: %s", tu_ing.log);
	p->next_seq += 3;
	pub_one(p, tu_stored(&hb, 1, false, 0, b, BS, BS));
	TU_EVENTUALLY(holds(kb[0], pod), "live after the gap not applied; log: %s", tu_ing.log);
	cr_assert(!holds(ka[0], pod), "pod not cleared on an unrecoverable gap");
	cr_assert_eq(tu_ctr(pod, KV_PC_replays_failed), 1);
	cr_assert_eq(tu_ctr(pod, KV_PC_seq_gaps), 1);
}

Test(ingest, replay_timeout_clears_pod)
{
	struct tu_pub *p = tu_pub_open(TOPIC);
	const bool lost[5] = { false, false, true, false, false };
	const uint32_t *t;
	uint64_t k[5];
	char spec[512];

	p->mute = true;
	snprintf(spec, sizeof(spec), "%s,replay=%s", p->ep, p->rep);
	/* 3 s: the test sees the pause before the replay times out, however slow the machine. */
	START("--capacity", "16k", "--replay-timeout-ms", "3000", "--pod", spec);
	tu_pub_wait_subscribed(p);
	chain5(p, lost, k, &t);
	int pod = tu_wait_pod(POD);
	/* While the gap is being replayed, the pod's speculation is paused. */
	TU_EVENTUALLY(p->replay_requests == 1, "no replay request; log: %s", tu_ing.log);
	TU_EVENTUALLY(tu_pod_paused(tu_ing.rd, pod) || tu_ctr(pod, KV_PC_replays_failed),
		      "pod not paused during its replay");
	cr_assert_eq(tu_ctr(pod, KV_PC_replays_failed), 0, "replay timed out too early");
	TU_EVENTUALLY(tu_ctr(pod, KV_PC_replays_failed) == 1, "replay never timed out; log: %s",
		      tu_ing.log);
	TU_EVENTUALLY(!tu_pod_paused(tu_ing.rd, pod), "pod still paused after its replay");
	TU_EVENTUALLY(tu_ctr(pod, KV_PC_last_seq) == 4, "live did not continue; log: %s",
		      tu_ing.log);
	cr_assert(!holds(k[0], pod));
	cr_assert_eq(p->replay_requests, 1);
}

Test(ingest, publisher_restart_clears_and_resyncs)
{
	struct tu_pub *p = tu_pub_open(TOPIC);
	const bool lost[5] = { false };
	const uint32_t *t, *u = tu_toks(40000, 2 * BS);
	uint64_t k[5], ku[2], hu[] = { 1001, 1002 };

	start_on(p, NULL);
	chain5(p, lost, k, &t);
	int pod = tu_wait_pod(POD);
	TU_EVENTUALLY(holds(k[4], pod), "chain not stored; log: %s", tu_ing.log);
	/* The publisher restarts: seq back to 0. */
	tu_keys_of(MODEL, 0, u, 2 * BS, ku);
	p->next_seq = 0;
	pub_one(p, tu_stored(hu, 1, false, 0, u, BS, BS));
	pub_one(p, tu_stored(hu + 1, 1, true, 1001, u + BS, BS, BS));
	TU_EVENTUALLY(holds(ku[1], pod), "resynced stream not applied; log: %s", tu_ing.log);
	cr_assert(holds(ku[0], pod));
	cr_assert(!holds(k[0], pod) && !holds(k[4], pod), "old stream's blocks survived");
	cr_assert_eq(tu_ctr(pod, KV_PC_restarts), 1);
	cr_assert_eq(tu_ctr(pod, KV_PC_last_seq), 1);
	cr_assert_eq(tu_ctr(pod, KV_PC_seq_gaps), 0);
	cr_assert_eq(p->replay_requests, 0);
}

/* 24-byte sequence frames (seq8 + a 16-byte publisher id, vLLM #57789) index exactly as
 * 8-byte ones, live and replayed (a gap among them is replayed); other lengths stay skipped. */
Test(ingest, publisher_id_frames_index_like_8_byte_ones)
{
	struct tu_pub *p = tu_pub_open(TOPIC);
	const bool lost[5] = { false, false, true, false, false };
	const unsigned char f9[9] = { 0 };
	const uint32_t *t;
	uint64_t k[5];

	p->has_id = true;
	memset(p->id, 0xa5, sizeof(p->id));
	start_on(p, NULL);
	chain5(p, lost, k, &t);
	int pod = tu_wait_pod(POD);
	TU_EVENTUALLY(tu_ctr(pod, KV_PC_replays_ok) == 1, "gap not replayed; log: %s", tu_ing.log);
	tu_wait_batches(pod, 5);
	cr_assert_eq(score_blocks(k, 5, pod), 5);
	cr_assert_eq(p->last_replay_from, 2);
	cr_assert_eq(tu_ctr(pod, KV_PC_decode_errors), 0);
	cr_assert_eq(tu_ctr(pod, KV_PC_restarts), 0);
	cr_assert_eq(tu_ctr(pod, KV_PC_last_seq), 4);
	tu_send_frames(p->xpub, p->topic, strlen(p->topic), f9, sizeof(f9), "x", 1);
	TU_EVENTUALLY(tu_ctr(pod, KV_PC_decode_errors) == 1, "9-byte seq frame not counted");
	cr_assert(tu_log_has("seq frame 9 bytes"), "log: %s", tu_ing.log);
}

/* llm-d's simulator (array format) sends parent 0 for "no parent": a root block. */
Test(ingest, parent_zero_is_no_parent)
{
	struct tu_pub *p = tu_pub_open(TOPIC);
	const uint32_t *a = tu_toks(1300, BS);
	uint64_t h = 51, k1;

	start_on(p, NULL);
	tu_keys_of(MODEL, 0, a, BS, &k1);
	pub_one(p, tu_stored(&h, 1, true, 0, a, BS, BS));
	int pod = tu_wait_pod(POD);
	TU_EVENTUALLY(holds(k1, pod), "block with parent 0 not indexed; log: %s", tu_ing.log);
	uint64_t k2 = pub_block(p, 52, 51, k1, tu_toks(1400, BS));
	TU_EVENTUALLY(holds(k2, pod), "child of the parent-0 block not indexed");
	cr_assert_eq(tu_ctr(pod, KV_PC_unknown_parent), 0);
	cr_assert_eq(tu_ctr(pod, KV_PC_blocks_stored), 2);
}

/* Publishes two chained blocks of the tokens u (engine hashes 1001, 1002) as batches 0 and 1
 * of a restarted publisher, batch 0 lost on the way (kept for replay); ku: their keys. */
static void restart_two(struct tu_pub *p, const uint8_t *id, uint64_t ku[2])
{
	const uint32_t *u = tu_toks(40000, 2 * BS);
	uint64_t hu[] = { 1001, 1002 };
	struct kvw_event e0 = tu_stored(hu, 1, false, 0, u, BS, BS);

	tu_keys_of(MODEL, 0, u, 2 * BS, ku);
	tu_pub_restart(p, id);
	tu_pub_events_ex(p, &e0, 1, false, KVW_FORM_ARRAY);
	pub_one(p, tu_stored(hu + 1, 1, true, 1001, u + BS, BS, BS));
}

/* After a restart the pod is cleared, batch 0 comes by a replay asked from 0, the new blocks
 * arrive. */
static void check_restarted(struct tu_pub *p, int pod, const uint64_t k[5], const uint64_t ku[2])
{
	TU_EVENTUALLY(holds(ku[0], pod) && holds(ku[1], pod),
		      "restarted stream not applied; log: %s", tu_ing.log);
	cr_assert(!holds(k[0], pod) && !holds(k[4], pod), "old process's blocks survived");
	cr_assert_eq(tu_ctr(pod, KV_PC_restarts), 1);
	cr_assert_eq(p->replay_requests, 1);
	cr_assert_eq(p->last_replay_from, 0);
	TU_EVENTUALLY(tu_ctr(pod, KV_PC_replays_ok) == 1, "replay from 0 not finished");
	cr_assert_eq(tu_ctr(pod, KV_PC_seq_gaps), 0);
	cr_assert_eq(tu_ctr(pod, KV_PC_last_seq), 1);
	cr_assert(tu_log_has("engine restarted, pod cleared"), "log: %s", tu_ing.log);
}

/* A new publisher id is a restart even where the sequence alone (5 -> 1) reads as a
 * duplicate. */
Test(ingest, new_publisher_id_is_a_restart)
{
	struct tu_pub *p = tu_pub_open(TOPIC);
	const bool lost[5] = { false };
	const uint32_t *t;
	uint8_t id2[KVW_PUB_ID_LEN];
	uint64_t k[5], ku[2];

	p->has_id = true;
	memset(p->id, 0x11, sizeof(p->id));
	start_on(p, NULL);
	chain5(p, lost, k, &t);
	int pod = tu_wait_pod(POD);
	TU_EVENTUALLY(holds(k[4], pod), "chain not stored; log: %s", tu_ing.log);
	memset(id2, 0x22, sizeof(id2));
	restart_two(p, id2, ku);
	check_restarted(p, pod, k, ku);
	cr_assert_eq(tu_ctr(pod, KV_PC_seq_dups), 0);
	cr_assert(tu_log_has("publisher id changed from 11111111111111111111111111111111 to "
			     "22222222222222222222222222222222"), "log: %s", tu_ing.log);
}

/* Without an id, a sequence that goes back (21 -> 1) is a restart; heartbeats (empty
 * batches) took the old process's sequence that far without touching the table. */
Test(ingest, sequence_back_without_id_is_a_restart)
{
	struct tu_pub *p = tu_pub_open(TOPIC);
	const bool lost[5] = { false };
	const uint32_t *t;
	uint64_t k[5], ku[2];

	start_on(p, NULL);
	chain5(p, lost, k, &t);
	int pod = tu_wait_pod(POD);
	for (int i = 0; i < 16; i++)
		tu_pub_events(p, NULL, 0);
	tu_wait_batches(pod, 21);
	cr_assert_eq(tu_ctr(pod, KV_PC_heartbeats), 16);
	cr_assert_eq(score_blocks(k, 5, pod), 5);
	restart_two(p, NULL, ku);
	check_restarted(p, pod, k, ku);
	cr_assert(tu_log_has("seq went back from 20 to 1"), "log: %s", tu_ing.log);
}

/* Heartbeats keep a pod fresh (last_event_ns moves on) without touching the table, even one
 * sent again under the same sequence number. */
Test(ingest, heartbeats_keep_a_pod_fresh)
{
	struct tu_pub *p = tu_pub_open(TOPIC);

	start_on(p, NULL);
	uint64_t k = pub_block(p, 61, 0, 0, tu_toks(1500, BS));
	int pod = tu_wait_pod(POD);
	tu_wait_batches(pod, 1);
	uint64_t t1 = tu_ctr(pod, KV_PC_last_event_ns);
	for (int i = 0; i < 3; i++) {
		tu_pump(20);
		tu_pub_events(p, NULL, 0);
	}
	tu_wait_batches(pod, 4);
	cr_assert_eq(tu_ctr(pod, KV_PC_heartbeats), 3);
	uint64_t t2 = tu_ctr(pod, KV_PC_last_event_ns);
	cr_assert(t2 >= t1 + 40 * 1000000ull, "heartbeats did not refresh the pod");
	cr_assert_eq(tu_ctr(pod, KV_PC_blocks_stored), 1);
	cr_assert_eq(tu_ctr(pod, KV_PC_events), 1);
	cr_assert(holds(k, pod));
	/* The same heartbeat again (seq 3): a duplicate, yet the publisher was heard. */
	tu_pump(20);
	p->next_seq--;
	tu_pub_events(p, NULL, 0);
	TU_EVENTUALLY(tu_ctr(pod, KV_PC_seq_dups) == 1, "duplicate not seen; log: %s", tu_ing.log);
	cr_assert(tu_ctr(pod, KV_PC_last_event_ns) > t2, "duplicate heartbeat not heard");
	cr_assert_eq(tu_ctr(pod, KV_PC_heartbeats), 3);
	cr_assert_eq(tu_ctr(pod, KV_PC_clears), 0);
}

Test(ingest, malformed_counted_and_skipped)
{
	struct tu_pub *p = tu_pub_open(TOPIC);
	const uint32_t *a = tu_toks(50000, 2 * BS), *b = tu_toks(51000, BS);
	uint64_t ha[] = { 61, 62 }, hb = 63, ka[2], kb[1];
	unsigned char seq8[8];

	start_on(p, NULL);
	tu_keys_of(MODEL, 0, a, 2 * BS, ka);
	tu_keys_of(MODEL, 0, b, BS, kb);
	/* seq 0: not msgpack. */
	tu_pub_batch(p, p->next_seq++, "\xc1\x00garbage", 9, true);
	/* A two-frame message. */
	kvw_seq_put(seq8, 99);
	tu_send_frames(p->xpub, p->topic, strlen(p->topic), seq8, 8, NULL, 0);
	/* A 7-byte seq frame. */
	tu_send_frames(p->xpub, p->topic, strlen(p->topic), seq8, 7, "x", 1);
	/* seq 1: a valid event, then one whose token count is wrong: only that one goes. */
	struct kvw_event ev[2] = { tu_stored(ha, 1, false, 0, a, BS, BS),
				   tu_stored(ha + 1, 1, true, 61, a + BS, BS - 1, BS) };
	tu_pub_events(p, ev, 2);
	/* seq 2: valid. */
	pub_one(p, tu_stored(&hb, 1, false, 0, b, BS, BS));
	int pod = tu_wait_pod(POD);
	TU_EVENTUALLY(holds(kb[0], pod), "valid batch after malformed ones not applied; log: %s",
		      tu_ing.log);
	tu_wait_batches(pod, 2);
	cr_assert(holds(ka[0], pod), "a bad event cost the valid one of its batch");
	cr_assert(!holds(ka[1], pod), "the bad event was applied");
	cr_assert_eq(tu_ctr(pod, KV_PC_skipped_shape), 1);
	cr_assert_eq(tu_ctr(pod, KV_PC_skipped_events), 1);
	cr_assert_eq(tu_ctr(pod, KV_PC_decode_errors), 3);
	cr_assert_eq(tu_ctr(pod, KV_PC_seq_gaps), 0,
		     "a malformed batch must still consume its seq");
	/* A duplicate of seq 2 is ignored. */
	tu_pub_batch(p, 2, p->h[p->nh - 1].buf, p->h[p->nh - 1].len, true);
	TU_EVENTUALLY(tu_ctr(pod, KV_PC_seq_dups) == 1, "duplicate not counted");
	cr_assert_eq(tu_ctr(pod, KV_PC_restarts), 0);
}

static void write_conf(const char *body)
{
	char tmp[300];
	FILE *f;

	snprintf(tmp, sizeof(tmp), "%s.tmp", confpath);
	f = fopen(tmp, "w");
	cr_assert_not_null(f);
	fputs(body, f);
	fclose(f);
	cr_assert_eq(rename(tmp, confpath), 0);
}

Test(ingest, sighup_adds_and_removes_pods)
{
	struct tu_pub *a = tu_pub_open("kv@10.0.0.1:8000@" MODEL);
	struct tu_pub *b = tu_pub_open("kv@10.0.0.2:8000@" MODEL);
	const uint32_t *t = tu_toks(60000, BS), *u = tu_toks(61000, BS);
	uint64_t h = 71, hb = 72, k[1], ku[1];
	char conf[2048];

	tu_keys_of(MODEL, 0, t, BS, k);
	tu_keys_of(MODEL, 0, u, BS, ku);
	snprintf(conf, sizeof(conf),
		 "# test config\ncapacity = 16k\nlog-level = debug\n"
		 "pod = %s,replay=%s,name=10.0.0.1:8000   # pod A\n",
		 a->ep, a->rep);
	write_conf(conf);
	START("--config", confpath);
	tu_pub_wait_subscribed(a);
	int pa = tu_wait_pod("10.0.0.1:8000");
	pub_one(a, tu_stored(&h, 1, false, 0, t, BS, BS));
	TU_EVENTUALLY(holds(k[0], pa), "pod A's block not stored; log: %s", tu_ing.log);

	snprintf(conf, sizeof(conf), "capacity = 16k\npod = %s,name=10.0.0.2:8000\n", b->ep);
	write_conf(conf);
	kill(tu_ing.daemon.pid, SIGHUP);
	tu_pub_wait_subscribed(b);
	TU_EVENTUALLY(pod_index("10.0.0.1:8000") < 0, "pod A not removed; log: %s", tu_ing.log);
	int pb = tu_wait_pod("10.0.0.2:8000");
	cr_assert(!holds(k[0], pa), "removed pod's records still visible");
	pub_one(b, tu_stored(&hb, 1, false, 0, u, BS, BS));
	TU_EVENTUALLY(holds(ku[0], pb), "pod B's block not stored; log: %s", tu_ing.log);
	/* A's publisher is no longer heard. */
	pub_one(a, tu_stored((uint64_t[]){ 73 }, 1, false, 0, t, BS, BS));
	pub_one(b, tu_stored((uint64_t[]){ 74 }, 1, false, 0, u, BS, BS));
	TU_EVENTUALLY(tu_ctr(pb, KV_PC_batches) == 2, "pod B's second batch not applied");
	cr_assert(pod_index("10.0.0.1:8000") < 0);
}

Test(ingest, disconnect_is_seen)
{
	struct tu_pub *p = tu_pub_open(TOPIC);
	int zero = 0;

	start_on(p, NULL);
	uint64_t k = pub_block(p, 85, 0, 0, tu_toks(75000, BS));
	int pod = tu_wait_pod(POD);
	TU_EVENTUALLY(holds(k, pod), "not stored; log: %s", tu_ing.log);
	cr_assert_eq(tu_ctr(pod, KV_PC_connected), 1);
	cr_assert(!tu_pod_paused(tu_ing.rd, pod));
	/* The pod goes away: connected drops, speculation pauses, its blocks stay. */
	zmq_setsockopt(p->xpub, ZMQ_LINGER, &zero, sizeof(zero));
	zmq_close(p->xpub);
	p->xpub = NULL;
	TU_EVENTUALLY(tu_ctr(pod, KV_PC_connected) == 0, "disconnect not seen; log: %s",
		      tu_ing.log);
	TU_EVENTUALLY(tu_pod_paused(tu_ing.rd, pod), "disconnected pod not paused");
	cr_assert(holds(k, pod));
}

Test(ingest, sigterm_exits_zero_and_index_stays)
{
	struct tu_pub *p = tu_pub_open(TOPIC);
	int status;

	start_on(p, NULL);
	uint64_t k = pub_block(p, 81, 0, 0, tu_toks(70000, BS));
	int pod = tu_wait_pod(POD);
	TU_EVENTUALLY(holds(k, pod), "not stored; log: %s", tu_ing.log);
	cr_assert_eq(kill(tu_ing.daemon.pid, SIGTERM), 0);
	status = tu_child_wait(&tu_ing.daemon, TU_DEADLINE_MS);
	cr_assert_neq(status, -1, "kvidx-ingestd ignored SIGTERM");
	cr_assert_eq(status, 0, "status %d", status);
	/* Readers keep serving the last state. */
	cr_assert(holds(k, pod));
	kvidx_reader_close(tu_ing.rd);
	tu_ing.rd = kvidx_reader_open(tu_ing.name);
	cr_assert_not_null(tu_ing.rd, "index gone after SIGTERM");
	cr_assert(holds(k, pod));
}

Test(ingest, replay_on_start_rebuilds)
{
	struct tu_pub *p = tu_pub_open(TOPIC);
	const bool lost[5] = { true, true, true, true, true };
	const uint32_t *t;
	uint64_t k[5];
	char spec[512];

	chain5(p, lost, k, &t); /* batches 0..4 only in the publisher's replay buffer */
	snprintf(spec, sizeof(spec), "%s,replay=%s", p->ep, p->rep);
	START("--capacity", "16k", "--replay-on-start", "--pod", spec);
	tu_pub_wait_subscribed(p);
	int pod = tu_wait_pod(POD);
	TU_EVENTUALLY(holds(k[4], pod), "replay at start did not rebuild; log: %s", tu_ing.log);
	TU_EVENTUALLY(tu_ctr(pod, KV_PC_replays_ok) == 1, "replay at start not finished");
	cr_assert_eq(p->last_replay_from, 0);
	/* Seq 4 again, live (covered by the replay), then seq 5. */
	tu_pub_batch(p, 4, p->h[4].buf, p->h[4].len, true);
	p->next_seq = 5;
	uint64_t k6 = pub_block(p, 605, 604, k[4], tu_toks(23000, BS));
	TU_EVENTUALLY(holds(k6, pod), "live after replay-on-start not applied; log: %s",
		      tu_ing.log);
	tu_wait_batches(pod, 6);
	cr_assert_eq(tu_ctr(pod, KV_PC_seq_dups), 0);
	cr_assert_eq(tu_ctr(pod, KV_PC_seq_gaps), 0);
}

Test(ingest, replay_on_start_takes_the_window_kept)
{
	struct tu_pub *p = tu_pub_open(TOPIC);
	const uint32_t *t = tu_toks(24000, 3 * BS);
	uint64_t h[] = { 1101, 1102, 1103 }, k[3];
	char spec[512];

	/* Three one-block prompts; the publisher kept only the last two batches. */
	for (int i = 0; i < 3; i++) {
		struct kvw_event ev = tu_stored(&h[i], 1, false, 0, t + i * BS, BS, BS);
		tu_keys_of(MODEL, 0, t + i * BS, BS, &k[i]);
		tu_pub_events_ex(p, &ev, 1, false, KVW_FORM_ARRAY);
	}
	p->keep_from = 1;
	snprintf(spec, sizeof(spec), "%s,replay=%s", p->ep, p->rep);
	START("--capacity", "16k", "--replay-on-start", "--pod", spec);
	tu_pub_wait_subscribed(p);
	int pod = tu_wait_pod(POD);
	TU_EVENTUALLY(tu_ctr(pod, KV_PC_replays_ok) == 1, "replay at start not finished; log: %s",
		      tu_ing.log);
	cr_assert(holds(k[1], pod) && holds(k[2], pod), "kept window not rebuilt");
	cr_assert(!holds(k[0], pod));
	cr_assert_eq(tu_ctr(pod, KV_PC_replays_truncated), 0);
	cr_assert_eq(tu_ctr(pod, KV_PC_clears), 0);
	cr_assert_eq(tu_ctr(pod, KV_PC_last_seq), 2);
}

Test(ingest, writer_restart_rebuilds_new_generation)
{
	struct tu_pub *p = tu_pub_open(TOPIC);
	const bool lost[5] = { false };
	const uint32_t *t;
	uint64_t k[5];
	char spec[512];
	struct kvidx_info info;

	snprintf(spec, sizeof(spec), "%s,replay=%s", p->ep, p->rep);
	START("--capacity", "16k", "--replay-on-start", "--pod", spec);
	tu_pub_wait_subscribed(p);
	chain5(p, lost, k, &t);
	int pod = tu_wait_pod(POD);
	TU_EVENTUALLY(holds(k[4], pod), "chain not stored; log: %s", tu_ing.log);

	/* The writer dies; readers keep serving; a new writer rebuilds from the pod's buffer. */
	kill(tu_ing.daemon.pid, SIGKILL);
	tu_child_wait(&tu_ing.daemon, TU_DEADLINE_MS);
	struct kvidx_reader *old = tu_ing.rd;
	cr_assert(holds(k[4], pod), "readers must keep serving after the writer died");
	tu_ing.rd = NULL;
	START("--capacity", "16k", "--replay-on-start", "--pod", spec);
	/* A lookup moves a reader to the newest generation. */
	TU_EVENTUALLY((tu_tiers(k[0], 0),
		       kvidx_reader_info(tu_ing.rd, &info) == 0 && info.generation == 2),
		      "no second generation; log: %s", tu_ing.log);
	tu_pub_wait_subscribed(p);
	pod = tu_wait_pod(POD);
	TU_EVENTUALLY(holds(k[4], pod), "new generation not rebuilt; log: %s", tu_ing.log);
	cr_assert_eq(score_blocks(k, 5, pod), 5);
	/* The old handle moves to the new generation by itself. */
	struct kvidx_reader *mine = tu_ing.rd;
	tu_ing.rd = old;
	TU_EVENTUALLY(holds(k[4], pod), "old reader did not switch generation");
	cr_assert_eq(kvidx_reader_info(tu_ing.rd, &info), 0);
	cr_assert_eq(info.generation, 2);
	kvidx_reader_close(old);
	tu_ing.rd = mine;
}

/* Issue 22, item 10: a pod named by name= whose model only its topic gives keeps that model
 * across a restart with --replay-on-start: replayed batches (3 frames, as vLLM answers)
 * carry no topic, so before, the rebuilt pod had model "" (its metrics label changed, its
 * replayed blocks chained from model ""'s root) until a live message came. */
Test(ingest, replay_on_start_keeps_the_model)
{
	struct tu_pub *p = tu_pub_open(TOPIC);
	char spec[512], name[KVIDX_POD_NAME_MAX], model[KVIDX_POD_NAME_MAX];

	p->old_framing = true; /* replies [id, "", seq, payload]: no topic */
	snprintf(spec, sizeof(spec), "%s,replay=%s,name=%s", p->ep, p->rep, POD);
	START("--capacity", "16k", "--replay-on-start", "--pod", spec);
	tu_pub_wait_subscribed(p);
	uint64_t k = pub_block(p, 1201, 0, 0, tu_toks(31000, BS)); /* keyed with MODEL */
	int pod = tu_wait_pod(POD);
	TU_EVENTUALLY(holds(k, pod), "not stored; log: %s", tu_ing.log);
	cr_assert_eq(kvidx_reader_pod(tu_ing.rd, pod, name, model), 0);
	cr_assert_str_eq(model, MODEL);

	kill(tu_ing.daemon.pid, SIGKILL);
	tu_child_wait(&tu_ing.daemon, TU_DEADLINE_MS);
	kvidx_reader_close(tu_ing.rd);
	tu_ing.rd = NULL;
	START("--capacity", "16k", "--replay-on-start", "--pod", spec);
	struct kvidx_info info;
	TU_EVENTUALLY((tu_tiers(k, 0),
		       kvidx_reader_info(tu_ing.rd, &info) == 0 && info.generation == 2),
		      "no second generation; log: %s", tu_ing.log);
	pod = tu_wait_pod(POD);
	TU_EVENTUALLY(tu_ctr(pod, KV_PC_replays_ok) == 1, "replay not done; log: %s", tu_ing.log);
	/* No live message since the restart: the model is the one from before. */
	cr_assert_eq(tu_ctr(pod, KV_PC_batches), 1, "a live batch came");
	cr_assert_eq(kvidx_reader_pod(tu_ing.rd, pod, name, model), 0);
	cr_assert_str_eq(model, MODEL, "model after the restart: '%s'; log: %s", model, tu_ing.log);
	cr_assert(holds(k, pod), "the replayed block is not keyed with the pod's model");
}

Test(ingest, bind_mode_pods_by_topic)
{
	struct tu_pub *a = tu_pub_open("kv@10.1.0.1:8000@" MODEL);
	struct tu_pub *b = tu_pub_open("kv@10.1.0.2:8000@" MODEL);
	const uint32_t *t = tu_toks(80000, BS), *u = tu_toks(81000, BS);
	uint64_t ha = 91, hb = 92, k[1], ku[1];
	char ep[64];

	snprintf(ep, sizeof(ep), "%s", tu_endpoint(7));
	START("--capacity", "16k", "--bind", ep);
	/* In bind mode the pods connect to ingestd. */
	cr_assert_eq(zmq_connect(a->xpub, ep), 0);
	cr_assert_eq(zmq_connect(b->xpub, ep), 0);
	tu_pub_wait_subscribed(a);
	tu_pub_wait_subscribed(b);
	tu_keys_of(MODEL, 0, t, BS, k);
	tu_keys_of(MODEL, 0, u, BS, ku);
	pub_one(a, tu_stored(&ha, 1, false, 0, t, BS, BS));
	pub_one(b, tu_stored(&hb, 1, false, 0, u, BS, BS));
	int pa = tu_wait_pod("10.1.0.1:8000"), pb = tu_wait_pod("10.1.0.2:8000");
	TU_EVENTUALLY(holds(k[0], pa) && holds(ku[0], pb), "bind-mode blocks not stored; log: %s",
		      tu_ing.log);
	cr_assert(!holds(k[0], pb) && !holds(ku[0], pa));
	cr_assert_eq(tu_ctr(pa, KV_PC_connected), 1);
	/* A gap in bind mode cannot be replayed: the pod is cleared. */
	a->next_seq += 2;
	pub_one(a, tu_stored((uint64_t[]){ 93 }, 1, false, 0, u, BS, BS));
	TU_EVENTUALLY(tu_ctr(pa, KV_PC_replays_failed) == 1, "bind-mode gap not handled");
	TU_EVENTUALLY(holds(ku[0], pa) && !holds(k[0], pa), "bind-mode gap: pod not cleared");
}

/* Sends ev as batch seq of p's stream without keeping it for replay. */
static void send_unkept(struct tu_pub *p, uint64_t seq, struct kvw_event ev)
{
	struct kvw_enc_opts o = { 0 };
	const void *buf;
	size_t len;
	uint8_t s8[8];

	kvw_enc_begin(&p->enc, &o, 1.0, 1, false, 0);
	kvw_enc_event(&p->enc, &ev);
	cr_assert_eq(kvw_enc_end(&p->enc, &buf, &len), 0);
	kvw_seq_put(s8, seq);
	tu_send_frames(p->xpub, p->topic, strlen(p->topic), s8, 8, buf, len);
}

/* Bind mode with --bind-replay: a gap is replayed from the bound pod's replay ROUTER, and the
 * live messages that come on the shared socket meanwhile (here: ones the replay does not
 * have) wait and are applied after it, in order. */
Test(ingest, bind_replay_queues_live_messages)
{
	struct tu_pub *a = tu_pub_open(TOPIC);
	const uint32_t *t = tu_toks(82000, 5 * BS);
	uint64_t h[5] = { 301, 302, 303, 304, 305 }, k[5];
	char ep[64], rep[200];

	snprintf(ep, sizeof(ep), "%s", tu_endpoint(7));
	snprintf(rep, sizeof(rep), POD "=%s", a->rep);
	START("--capacity", "16k", "--bind", ep, "--bind-replay", rep);
	cr_assert_eq(zmq_connect(a->xpub, ep), 0);
	tu_pub_wait_subscribed(a);
	tu_keys_of(MODEL, 0, t, 5 * BS, k);
	for (int i = 0; i < 3; i++) { /* batch 1 lost on the way, kept for replay */
		struct kvw_event ev = tu_stored(&h[i], 1, i > 0, h[i] - 1, t + i * BS, BS, BS);
		tu_pub_events_ex(a, &ev, 1, i != 1, KVW_FORM_ARRAY);
	}
	/* Batch 2 started the replay, which waits for this test to serve it: 3 and 4 come live
	 * now, and the replay will not have them. */
	for (int i = 3; i < 5; i++)
		send_unkept(a, (uint64_t)i, tu_stored(&h[i], 1, true, h[i] - 1, t + i * BS, BS, BS));
	int pod = tu_wait_pod(POD);
	TU_EVENTUALLY(holds(k[4], pod), "the queued live messages were not applied; log: %s",
		      tu_ing.log);
	for (int i = 0; i < 4; i++)
		cr_assert(holds(k[i], pod), "block %d", i);
	cr_assert_eq(a->replay_requests, 1);
	cr_assert_eq(a->last_replay_from, 1);
	cr_assert_eq(tu_ctr(pod, KV_PC_replays_ok), 1);
	cr_assert_eq(tu_ctr(pod, KV_PC_seq_gaps), 1);
	cr_assert_eq(tu_ctr(pod, KV_PC_last_seq), 4);
}

Test(ingest, help_and_bad_usage)
{
	const char *bin = tu_tool_path("kvidx-ingestd");
	char cmd[4200];

	snprintf(cmd, sizeof(cmd), "'%s' --help | grep -q -- '--replay-on-start'", bin);
	cr_assert_eq(system(cmd), 0, "--help does not document the flags");
	snprintf(cmd, sizeof(cmd), "'%s' --capacity lots --pod tcp://x:1 2>/dev/null", bin);
	int st = system(cmd);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 2, "bad usage must exit 2, got %#x", st);
	snprintf(cmd, sizeof(cmd), "'%s' --name %s 2>/dev/null", bin, tu_ing.name);
	st = system(cmd);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 2, "no pods must exit 2, got %#x", st);
}

/* ---- ingest rate ------------------------------------------------------------------------------ */

/* ---- what vLLM 0.26+ really sends, end to end --------------------------------------------- */

#define NAMED ",name=" POD ",model=" MODEL

Test(ingest, default_empty_topic)
{
	struct tu_pub *p = tu_pub_open(""); /* vLLM's default topic */
	const uint32_t *t = tu_toks(60000, 2 * BS);
	uint64_t h[2] = { 1, 2 }, k[2];

	start_on(p, NAMED);
	tu_keys_of(MODEL, 0, t, 2 * BS, k);
	pub_one(p, tu_stored(h, 2, false, 0, t, 2 * BS, BS));
	int pod = tu_wait_pod(POD);
	TU_EVENTUALLY(holds(k[1], pod), "nothing indexed from topic \"\"; log: %s", tu_ing.log);
	cr_assert(holds(k[0], pod));
}

Test(ingest, kv_events_topic_and_filters)
{
	/* vLLM's example topic, with a pod filter that matches it, and a pod whose filter
	 * matches nothing it publishes. */
	struct tu_pub *p = tu_pub_open("kv-events"), *q = tu_pub_open("kv-events");
	const uint32_t *t = tu_toks(61000, BS), *u = tu_toks(62000, BS);
	uint64_t h = 3, g = 4, k, kq;
	char a[512], b[512];

	snprintf(a, sizeof(a), "%s,replay=%s,topic=kv-events" NAMED, p->ep, p->rep);
	snprintf(b, sizeof(b), "%s,topic=other,name=10.0.0.2:8000,model=" MODEL, q->ep);
	START("--capacity", "16k", "--pod", a, "--pod", b);
	tu_pub_wait_subscribed(p);
	tu_pub_wait_subscribed(q);
	tu_keys_of(MODEL, 0, t, BS, &k);
	tu_keys_of(MODEL, 0, u, BS, &kq);
	pub_one(q, tu_stored(&g, 1, false, 0, u, BS, BS));
	pub_one(p, tu_stored(&h, 1, false, 0, t, BS, BS));
	int pod = tu_wait_pod(POD), podq = tu_wait_pod("10.0.0.2:8000");
	TU_EVENTUALLY(holds(k, pod), "nothing indexed from topic kv-events; log: %s", tu_ing.log);
	/* q's message was sent first on its own connection; give it the same time again. */
	tu_pump(100);
	cr_assert(!holds(kq, podq), "a topic outside the filter was indexed");
	cr_assert_eq(tu_ctr(podq, KV_PC_batches), 0);
}

Test(ingest, two_dp_ranks_one_pod)
{
	struct tu_pub *r0 = tu_pub_open_ranks(TOPIC, 2), *r1 = r0 + 1;
	const uint32_t *t = tu_toks(63000, 2 * BS), *u = tu_toks(64000, BS);
	uint64_t h[2] = { 5, 6 }, hu = 7, k[2], ku;
	char spec[512];

	snprintf(spec, sizeof(spec), "%s,replay=%s,dp-ranks=2", r0->ep, r0->rep);
	START("--capacity", "16k", "--pod", spec);
	tu_pub_wait_subscribed(r0);
	tu_pub_wait_subscribed(r1);
	tu_keys_of(MODEL, 0, t, 2 * BS, k);
	tu_keys_of(MODEL, 0, u, BS, &ku);
	pub_one(r0, tu_stored(h, 2, false, 0, t, 2 * BS, BS));
	pub_one(r1, tu_stored(h, 1, false, 0, t, BS, BS)); /* same first block on rank 1 */
	pub_one(r1, tu_stored(&hu, 1, false, 0, u, BS, BS));
	int pod = tu_wait_pod(POD);
	tu_wait_batches(pod, 3);
	cr_assert(holds(k[0], pod) && holds(k[1], pod) && holds(ku, pod));
	cr_assert_eq(tu_ctr(pod, KV_PC_ranks), 2);
	cr_assert_eq(tu_ctr(pod, KV_PC_RANK(0, KV_RC_batches)), 1);
	cr_assert_eq(tu_ctr(pod, KV_PC_RANK(1, KV_RC_batches)), 2);
	cr_assert(tu_ctr(pod, KV_PC_RANK(1, KV_RC_flags)) & KV_RANK_IN_USE);
	/* Rank 0 clears: its blocks go, rank 1's stay, the shared one too. */
	pub_one(r0, cleared());
	tu_wait_batches(pod, 4);
	cr_assert(!holds(k[1], pod), "rank 0's block survived its clear");
	cr_assert(holds(k[0], pod), "a block rank 1 holds went with rank 0's clear");
	cr_assert(holds(ku, pod), "rank 1's block went with rank 0's clear");
	cr_assert_eq(tu_ctr(pod, KV_PC_RANK(0, KV_RC_clears)), 1);
	cr_assert_eq(tu_ctr(pod, KV_PC_RANK(1, KV_RC_clears)), 0);
	cr_assert_eq(tu_ctr(pod, KV_PC_seq_gaps), 0, "each rank has its own sequence");
	/* Per-rank health in kvidx-dump --pods. */
	struct tu_run run = tu_run_tool("kvidx-dump", "--name %s --pods", tu_ing.name);
	cr_assert_eq(run.status, 0, "%s", run.out);
	cr_assert(strstr(run.out, "rank 0: connected") && strstr(run.out, "rank 1: connected"),
		  "%s", run.out);
	cr_assert(strstr(run.out, "clears 1"), "%s", run.out);
	free(run.out);
}

Test(ingest, duplicate_copies_stay_until_the_last_removal)
{
	struct tu_pub *p = tu_pub_open(TOPIC);
	const uint32_t *t = tu_toks(65000, BS), *s = tu_toks(66000, BS);
	uint64_t h = 8, hs = 9, k, ks;

	start_on(p, NULL);
	tu_keys_of(MODEL, 0, t, BS, &k);
	tu_keys_of(MODEL, 0, s, BS, &ks);
	pub_one(p, tu_stored(&h, 1, false, 0, t, BS, BS));
	pub_one(p, tu_stored(&h, 1, false, 0, t, BS, BS));
	pub_one(p, tu_removed(&h, 1, NULL));
	pub_one(p, tu_stored(&hs, 1, false, 0, s, BS, BS)); /* sentinel */
	int pod = tu_wait_pod(POD);
	TU_EVENTUALLY(holds(ks, pod), "sentinel not applied; log: %s", tu_ing.log);
	cr_assert(holds(k, pod), "stored twice, removed once: must still be held");
	cr_assert_eq(tu_ctr(pod, KV_PC_copies_kept), 1);
	pub_one(p, tu_removed(&h, 1, NULL));
	TU_EVENTUALLY(!holds(k, pod), "the last copy's removal did not remove it");
}

Test(ingest, hybrid_batch)
{
	struct tu_pub *p = tu_pub_open(TOPIC);
	const uint32_t *t = tu_toks(67000, 2 * BS);
	uint64_t fa[2] = { 10, 11 }, sw[1] = { 12 }, k[2];
	struct kvw_event ev[3] = { tu_stored(fa, 2, false, 0, t, 2 * BS, BS),
				   tu_stored(sw, 1, false, 0, t, 2 * BS, BS),
				   tu_stored(fa, 2, false, 0, NULL, 0, 0) };

	snprintf(ev[0].spec_kind, sizeof(ev[0].spec_kind), "full_attention");
	snprintf(ev[1].spec_kind, sizeof(ev[1].spec_kind), "sliding_window");
	ev[1].has_group_idx = true;
	ev[1].group_idx = 1;
	snprintf(ev[2].medium, sizeof(ev[2].medium), "CPU");
	start_on(p, NULL);
	tu_keys_of(MODEL, 0, t, 2 * BS, k);
	tu_pub_events_ex(p, ev, 3, true, KVW_FORM_MAP);
	int pod = tu_wait_pod(POD);
	tu_wait_batches(pod, 1);
	for (int i = 0; i < 2; i++)
		cr_assert_eq(tu_tiers(k[i], pod), KVIDX_TIER_GPU | KVIDX_TIER_CPU, "block %d", i);
	cr_assert_eq(tu_ctr(pod, KV_PC_skipped_group), 1);
	cr_assert_eq(tu_ctr(pod, KV_PC_offload_applied), 2);
	cr_assert_eq(tu_ctr(pod, KV_PC_decode_errors), 0);
}

Test(ingest, salted_two_turn_conversation)
{
	struct tu_pub *p = tu_pub_open(TOPIC);
	const uint32_t *t = tu_toks(68000, 3 * BS);
	uint64_t h[3] = { 13, 14, 15 }, k[3];
	struct kvw_xitem salt[1] = { { .kind = KVW_X_STR, .str = "user-42", .len = 7 } };
	struct kvw_extra x[2] = { { .set = true, .items = salt, .nitems = 1 }, { .set = false } };
	struct kvw_event t1 = tu_stored(h, 2, false, 0, t, 2 * BS, BS);
	struct kvidx_key_extras ex = { .salt = "user-42" };

	t1.has_extra_keys = true;
	t1.extra = x;
	t1.nextra = 2;
	start_on(p, NULL);
	kvidx_key_chain_ex(KVIDX_KEY_CBOR_FNV, kvidx_key_root(KVIDX_KEY_CBOR_FNV, "", MODEL), t,
			   3 * BS, BS, &ex, k, 3);
	pub_one(p, t1);
	pub_one(p, tu_stored(h + 2, 1, true, h[1], t + 2 * BS, BS, BS)); /* turn 2 */
	int pod = tu_wait_pod(POD);
	tu_wait_batches(pod, 2);
	for (int i = 0; i < 3; i++)
		cr_assert(holds(k[i], pod), "salted block %d not indexed; log: %s", i, tu_ing.log);
	cr_assert_eq(tu_ctr(pod, KV_PC_unknown_parent), 0);
	cr_assert_eq(tu_ctr(pod, KV_PC_skipped_events), 0);
}

Test(ingest, multimodal_prompt_then_text_turn)
{
	struct tu_pub *p = tu_pub_open(TOPIC);
	const uint32_t *t = tu_toks(69000, 3 * BS);
	uint64_t h[3] = { 16, 17, 18 }, k[3];
	/* An image on tokens [8, 24): blocks 0 (offset 8) and 1 (offset -8), tuple form. */
	struct kvw_xitem i0[1] = { { .kind = KVW_X_MM, .str = "img-9", .len = 5,
				     .has_offset = true, .offset = 8 } };
	struct kvw_xitem i1[1] = { { .kind = KVW_X_MM, .str = "img-9", .len = 5,
				     .has_offset = true, .offset = -8 } };
	struct kvw_extra x[2] = { { .set = true, .items = i0, .nitems = 1 },
				  { .set = true, .items = i1, .nitems = 1 } };
	struct kvw_event m = tu_stored(h, 2, false, 0, t, 2 * BS, BS);
	struct kvidx_mm_item item = { .start = 8, .len = 16, .id = "img-9" };
	struct kvidx_key_extras ex = { .mm = &item, .nmm = 1 };

	m.has_extra_keys = true;
	m.extra = x;
	m.nextra = 2;
	start_on(p, NULL);
	kvidx_key_chain_ex(KVIDX_KEY_CBOR_FNV, kvidx_key_root(KVIDX_KEY_CBOR_FNV, "", MODEL), t,
			   3 * BS, BS, &ex, k, 3);
	pub_one(p, m);
	pub_one(p, tu_stored(h + 2, 1, true, h[1], t + 2 * BS, BS, BS)); /* a text turn */
	int pod = tu_wait_pod(POD);
	tu_wait_batches(pod, 2);
	for (int i = 0; i < 3; i++)
		cr_assert(holds(k[i], pod), "block %d not indexed; log: %s", i, tu_ing.log);
	cr_assert_eq(tu_ctr(pod, KV_PC_skipped_events), 0);
}

Test(ingest, rate, .timeout = 120)
{
	const char *env = getenv("KVIDX_INGEST_RATE");
	size_t nev = env ? strtoull(env, NULL, 10) : 20000, per = 64;
	size_t nb = (nev + per - 1) / per;
	struct tu_pub *p = tu_pub_open(TOPIC);
	struct kvw_event *ev = calloc(per, sizeof(*ev));
	uint64_t *hs = calloc(nev, sizeof(*hs));
	uint32_t *tk = calloc(nev * BS, sizeof(*tk));
	struct { void *buf; size_t len; } *msg = calloc(nb, sizeof(*msg));
	char spec[512], cap[32];
	unsigned char seq8[8];
	uint64_t last[1];

	cr_assert(nev > 0 && ev && hs && tk && msg);
	snprintf(cap, sizeof(cap), "%zu", nev * 2 > 16384 ? nev * 2 : 16384);
	snprintf(spec, sizeof(spec), "%s,replay=%s", p->ep, p->rep);
	START("--capacity", cap, "--log-level", "info", "--pod", spec);
	tu_pub_wait_subscribed(p);
	/* Encode everything first: the clock measures ingestd, not the encoder. */
	for (size_t i = 0; i < nev * BS; i++)
		tk[i] = (uint32_t)i;
	for (size_t b = 0; b < nb; b++) {
		size_t n = b + 1 < nb ? per : nev - b * per;
		const void *buf;
		struct kvw_enc_opts o = { 0 };
		kvw_enc_begin(&p->enc, &o, 1.0, n, false, 0);
		for (size_t i = 0; i < n; i++) {
			size_t e = b * per + i;
			hs[e] = 0x1000000 + e;
			ev[i] = tu_stored(&hs[e], 1, false, 0, tk + e * BS, BS, BS);
			kvw_enc_event(&p->enc, &ev[i]);
		}
		cr_assert_eq(kvw_enc_end(&p->enc, &buf, &msg[b].len), 0);
		msg[b].buf = malloc(msg[b].len);
		memcpy(msg[b].buf, buf, msg[b].len);
	}
	tu_keys_of(MODEL, 0, tk + (nev - 1) * BS, BS, last);
	/* Warm-up: one batch, and the pod registered. */
	kvw_seq_put(seq8, 0);
	tu_send_frames(p->xpub, p->topic, strlen(p->topic), seq8, 8, msg[0].buf, msg[0].len);
	int pod = tu_wait_pod(POD);
	TU_EVENTUALLY(tu_ctr(pod, KV_PC_batches) == 1, "warm-up batch not applied");

	uint64_t t0 = kvidx_now_ns();
	for (size_t b = 1; b < nb; b++) {
		kvw_seq_put(seq8, b);
		tu_send_frames(p->xpub, p->topic, strlen(p->topic), seq8, 8, msg[b].buf,
			       msg[b].len);
	}
	uint64_t t_sent = kvidx_now_ns(), dl = t0 + 60 * 1000000000ull;
	while (!holds(last[0], pod)) {
		cr_assert(kvidx_now_ns() < dl, "last block never visible; log: %s", tu_ing.log);
		usleep(200);
	}
	uint64_t t1 = kvidx_now_ns();
	double secs = (double)(t1 - t0) / 1e9;
	size_t timed = nev - (nb > 1 ? per : 0) * 1;
	fprintf(stderr,
		"ingest-rate: events=%zu batch=%zu tokens_per_block=%d blocks_timed=%zu send_s=%.3f "
		"total_s=%.3f blocks_per_s=%.0f\n",
		nev, per, BS, timed, (double)(t_sent - t0) / 1e9, secs, (double)timed / secs);
	tu_wait_batches(pod, nb);
	cr_assert_eq(tu_ctr(pod, KV_PC_blocks_stored), nev);
	cr_assert_eq(tu_ctr(pod, KV_PC_seq_gaps), 0);
	cr_assert_eq(tu_ctr(pod, KV_PC_decode_errors), 0);
	for (size_t b = 0; b < nb; b++)
		free(msg[b].buf);
	free(msg);
	free(tk);
	free(hs);
	free(ev);
}

/* ---- unit tests: configuration ------------------------------------------------------------------ */

Test(ingest, config_flags_and_file)
{
	struct ing_config c;
	char err[512];
	char *argv[] = { "kvidx-ingestd",  "--config",      confpath,          "--capacity=2M",
			 "--pod",          "tcp://h:1",     "--replay-on-start", "--seed",
			 "abc",            "--log-level",   "warn",            NULL };

	write_conf("# comment line\n"
		   "name = from-file\n"
		   "capacity = 4k   # overridden by the flag\n"
		   "algo = xxh64\n"
		   "block-size = 32\n"
		   "group = 0\n"
		   "pod = tcp://10.0.0.1:5557, replay=tcp://10.0.0.1:5558, name=10.0.0.1:8000\n"
		   "pod = tcp://10.0.0.2:5557,model=llama\n"
		   "\n"
		   "bind = tcp://*:5600\n");
	ing_config_init(&c);
	cr_assert_eq(ing_config_parse_args(&c, 11, argv, err, sizeof(err)), 0, "%s", err);
	cr_assert_str_eq(c.name, "from-file");
	cr_assert_eq(c.geo.capacity, 2u << 20);
	cr_assert_eq(c.algo, KVIDX_KEY_XXH64);
	cr_assert_eq(c.block_size, 32);
	cr_assert_str_eq(c.seed, "abc");
	cr_assert_eq(c.log_level, ILOG_WARN);
	cr_assert(c.replay_on_start);
	cr_assert_str_eq(c.bind, "tcp://*:5600");
	cr_assert_eq(c.npods, 3);
	cr_assert_str_eq(c.pods[0].endpoint, "tcp://10.0.0.1:5557");
	cr_assert_str_eq(c.pods[0].replay, "tcp://10.0.0.1:5558");
	cr_assert_str_eq(c.pods[0].name, "10.0.0.1:8000");
	cr_assert(c.pods[0].from_file);
	cr_assert_str_eq(c.pods[1].model, "llama");
	cr_assert_str_eq(c.pods[2].endpoint, "tcp://h:1");
	cr_assert(!c.pods[2].from_file);
	cr_assert_eq(ing_config_check(&c, err, sizeof(err)), 0, "%s", err);
	ing_config_free(&c);

	/* Errors name the problem. */
	struct ing_pod_spec s;
	cr_assert_eq(ing_pod_spec_parse("10.0.0.1:5557", &s, err, sizeof(err)), -EINVAL);
	cr_assert_eq(ing_pod_spec_parse("tcp://a:1,colour=red", &s, err, sizeof(err)), -EINVAL);
	cr_assert(strstr(err, "colour"));
	ing_config_init(&c);
	cr_assert_eq(ing_config_set(&c, "algo", "md5", false, err, sizeof(err)), -EINVAL);
	cr_assert_eq(ing_config_set(&c, "capacity", "-1", false, err, sizeof(err)), -EINVAL);
	cr_assert_eq(ing_config_set(&c, "max-pods", "5000000000", false, err, sizeof(err)),
		     -EINVAL);
	/* A flag named *-ms takes a whole number: no size suffix ("1m" is not a minute). */
	cr_assert_eq(ing_config_set(&c, "stall-ms", "1m", false, err, sizeof(err)), -EINVAL);
	cr_assert(strstr(err, "stall-ms: expected a whole number of milliseconds"), "%s", err);
	cr_assert_eq(ing_config_set(&c, "replay-timeout-ms", "2k", false, err, sizeof(err)),
		     -EINVAL);
	cr_assert_eq(ing_config_set(&c, "stall-ms", "1500", false, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(c.stall_ms, 1500);
	cr_assert_eq(ing_config_set(&c, "replay-timeout-ms", "250", false, err, sizeof(err)), 0,
		     "%s", err);
	cr_assert_eq(c.replay_timeout_ms, 250);
	cr_assert_eq(ing_config_set(&c, "frobnicate", "1", true, err, sizeof(err)), -EINVAL);
	cr_assert_eq(ing_config_set(&c, "config", "x", true, err, sizeof(err)), -EINVAL);
	cr_assert_eq(ing_config_check(&c, err, sizeof(err)), -EINVAL, "no pods must fail");
	write_conf("capacity 12\n");
	cr_assert_eq(ing_config_load_file(&c, confpath, err, sizeof(err)), -EINVAL);
	cr_assert(strstr(err, ":1:"), "error without a line number: %s", err);
	ing_config_free(&c);
}

Test(ingest, example_config_parses)
{
	struct ing_config c;
	char err[512];
	const char *paths[] = { "examples/ingestd.conf", "../examples/ingestd.conf" };
	int rc = -ENOENT;

	ing_config_init(&c);
	for (int i = 0; i < 2 && rc == -ENOENT; i++)
		rc = ing_config_load_file(&c, paths[i], err, sizeof(err));
	if (rc == -ENOENT)
		cr_skip_test("examples/ingestd.conf not found from %s", getcwd(err, sizeof(err)));
	cr_assert_eq(rc, 0, "%s", err);
	cr_assert_eq(ing_config_check(&c, err, sizeof(err)), 0, "%s", err);
	ing_config_free(&c);
}

/* ---- unit tests: the FIFO map under both private maps --------------------------------------- */

struct fm_test_ent {
	uint64_t key;
	uint64_t live;
};

/* Hash bits that collide on purpose: four values whose homes are the last two and first two
 * index words, so probe runs wrap around the end and deletions shift across it. */
static uint32_t fm_test_hash(const struct fifomap *m, uint64_t key)
{
	return (uint32_t)((m->imask - 1 + key % 4) & m->imask);
}

static uint64_t fm_test_find(const struct fifomap *m, uint64_t key)
{
	uint32_t h = fm_test_hash(m, key);

	for (uint64_t pos = FM_NONE, no; (no = fm_scan(m, h, &pos)) != FM_NONE;)
		if (((struct fm_test_ent *)fm_slot(m, no))->key == key)
			return no;
	return FM_NONE;
}

Test(ingest, fifomap_colliding_hashes_against_a_model)
{
	enum { CAP = 24, KEYS = 60 };
	struct fifomap m;
	uint64_t where[KEYS]; /* the model: slot of each live key, FM_NONE if absent */
	unsigned seed = 7;

	cr_assert_eq(fm_init(&m, 0, 8), -EINVAL);
	cr_assert_eq(fm_init(&m, CAP, sizeof(struct fm_test_ent)), 0);
	cr_assert_eq(m.imask + 1, 64, "index words: the power of two >= 2 x cap");
	for (int k = 0; k < KEYS; k++)
		where[k] = FM_NONE;
	for (int op = 0; op < 20000; op++) {
		seed = seed * 1103515245u + 12345u;
		uint64_t key = (seed >> 8) % KEYS;
		uint64_t no = fm_test_find(&m, key);
		cr_assert_eq(no, where[key], "op %d: key %llu found in slot %lld, model says %lld",
			     op, (unsigned long long)key, (long long)no, (long long)where[key]);
		if (no != FM_NONE) { /* delete */
			fm_unindex(&m, fm_test_hash(&m, key), no);
			((struct fm_test_ent *)fm_slot(&m, no))->live = 0;
			where[key] = FM_NONE;
			continue;
		}
		/* insert, evicting what occupies the oldest slot */
		uint64_t slot = m.next;
		cr_assert_eq(slot, fm_slot_of(&m, m.pushes));
		struct fm_test_ent *e = fm_slot(&m, slot);
		if (e->live) {
			cr_assert_eq(where[e->key], slot);
			fm_unindex(&m, fm_test_hash(&m, e->key), slot);
			where[e->key] = FM_NONE;
		}
		*e = (struct fm_test_ent){ .key = key, .live = 1 };
		cr_assert_eq(fm_push(&m, fm_test_hash(&m, key)), slot);
		where[key] = slot;
	}
	/* Every live key is still found after all the shifting; nothing else is. */
	for (uint64_t k = 0; k < KEYS; k++)
		cr_assert_eq(fm_test_find(&m, k), where[k]);
	cr_assert_eq(fm_oldest(&m), m.pushes - CAP);
	fm_free(&m);
}

/* ---- unit tests: engine-key map ----------------------------------------------------------------- */

/* Puts (token, ehash) -> keys[0..n) as a whole-block entry (chain's last key = the last). */
static struct emap_ent *put(struct emap *m, uint64_t tok, uint64_t eh, const uint64_t *k,
			    uint32_t n)
{
	return emap_put(m, tok, eh, k, n, k[n - 1], NULL, 0, 0);
}

static const uint64_t *get(struct emap *m, uint64_t tok, uint64_t eh, uint32_t *n)
{
	struct emap_ent *e = emap_find(m, tok, eh);

	return e ? emap_keys(e, n) : NULL;
}

Test(ingest, emap_fifo_replace_and_tokens)
{
	struct emap m;
	uint32_t n;
	uint64_t two[2] = { 7, 8 };
	const uint64_t *k;

	cr_assert_eq(emap_init(&m, 4), 0);
	uint64_t t1 = emap_stream_open(&m, NULL), t2 = emap_stream_open(&m, NULL);
	cr_assert(t1 && t2);
	cr_assert_neq(t1, t2);
	for (uint64_t i = 0; i < 4; i++)
		cr_assert_not_null(put(&m, t1, 100 + i, &i, 1));
	cr_assert_eq(m.live, 4);
	cr_assert_eq(emap_stream_entries(&m, t1), 4);
	/* Same engine hash, another stream: a separate entry, evicting the oldest (100). */
	cr_assert_not_null(put(&m, t2, 101, two, 2));
	cr_assert_null(get(&m, t1, 100, &n));
	k = get(&m, t2, 101, &n);
	cr_assert(k && n == 2 && k[0] == 7 && k[1] == 8);
	k = get(&m, t1, 101, &n);
	cr_assert(k && n == 1 && k[0] == 1);
	cr_assert_eq(m.evictions, 1);
	cr_assert_eq(emap_stream_entries(&m, t1), 3);
	/* Replacing re-inserts: 101 of t1 becomes the newest. */
	uint64_t v = 42;
	cr_assert_not_null(put(&m, t1, 101, &v, 1));
	cr_assert_eq(m.live, 4);
	k = get(&m, t1, 101, &n);
	cr_assert(k && *k == 42);
	/* Next insertions evict 102, then 103 (oldest first); 101 survives. */
	cr_assert_not_null(put(&m, t1, 200, &v, 1));
	cr_assert_not_null(put(&m, t1, 201, &v, 1));
	cr_assert_null(get(&m, t1, 102, &n));
	cr_assert_not_null(get(&m, t1, 101, &n));
	cr_assert_eq(emap_del(&m, t1, 101), 1);
	cr_assert_eq(emap_del(&m, t1, 101), 0);
	cr_assert_null(get(&m, t1, 101, &n));
	/* A closed stream's entries are never found again. */
	emap_stream_close(&m, t2);
	cr_assert_null(get(&m, t2, 101, &n));
	cr_assert_null(put(&m, t2, 5, &v, 1), "a closed stream takes no entries");
	emap_free(&m);

	/* Many entries through a small map: bounded, and the newest are all there. */
	cr_assert_eq(emap_init(&m, 1000), 0);
	uint64_t t = emap_stream_open(&m, NULL);
	for (uint64_t i = 0; i < 100000; i++) {
		uint64_t kk[3] = { i, i + 1, i + 2 };
		cr_assert_not_null(put(&m, t, i * 0x9e3779b97f4a7c15ull, kk, 1 + (uint32_t)(i % 3)));
	}
	cr_assert_eq(m.live, 1000);
	cr_assert_eq(emap_stream_entries(&m, t), 1000);
	for (uint64_t i = 99000; i < 100000; i++) {
		k = get(&m, t, i * 0x9e3779b97f4a7c15ull, &n);
		cr_assert(k && k[0] == i && n == 1 + i % 3);
	}
	cr_assert_null(get(&m, t, 98999 * 0x9e3779b97f4a7c15ull, &n));
	emap_free(&m);
}

static void count_drained(void *arg, const struct emap_ent *e)
{
	(void)e;
	(*(int *)arg)++;
}

Test(ingest, emap_chain_state_held_counts_and_drain)
{
	struct emap m;
	struct emap_held h;
	const uint32_t tail[3] = { 9, 8, 7 }, *pt;
	uint32_t nt, n;
	uint64_t keys[2] = { 11, 12 };
	int drained = 0;

	cr_assert_eq(emap_init(&m, 64), 0);
	emap_held_init(&h);
	uint64_t a = emap_stream_open(&m, &h), b = emap_stream_open(&m, &h);
	/* Chain state: a block that completes no index block keeps the tail tokens. */
	struct emap_ent *e = emap_put(&m, a, 1, NULL, 0, 77, tail, 3, EMAP_TAIL_ITEMS);
	cr_assert_not_null(e);
	cr_assert_eq(emap_chain(e, &pt, &nt), 77);
	cr_assert_eq(nt, 3);
	cr_assert_arr_eq(pt, tail, sizeof(tail));
	cr_assert(e->flags & EMAP_TAIL_ITEMS);
	emap_keys(e, &n);
	cr_assert_eq(n, 0);
	e = emap_put(&m, a, 2, keys, 2, 12, NULL, 0, 0);
	cr_assert_eq(emap_chain(e, &pt, &nt), 12);
	cr_assert_eq(nt, 0);
	/* Held counts: two references (two ranks) to key 11 on tier 0, one on tier 1. */
	cr_assert_eq(emap_held_inc(&h, 11, 0), 1);
	cr_assert_eq(emap_held_inc(&h, 11, 0), 2);
	cr_assert_eq(emap_held_inc(&h, 11, 1), 1);
	for (uint64_t k = 100; k < 5000; k++) /* growth and probe runs */
		cr_assert_eq(emap_held_inc(&h, k, 2), 1);
	cr_assert_eq(emap_held_dec(&h, 11, 0), 1);
	cr_assert_eq(emap_held_get(&h, 11, 0), 1);
	cr_assert_eq(emap_held_dec(&h, 11, 0), 0);
	cr_assert_eq(emap_held_dec(&h, 11, 0), 0, "no count below 0");
	cr_assert_eq(emap_held_get(&h, 11, 1), 1);
	for (uint64_t k = 100; k < 5000; k += 2)
		cr_assert_eq(emap_held_dec(&h, k, 2), 0);
	for (uint64_t k = 101; k < 5000; k += 2)
		cr_assert_eq(emap_held_get(&h, k, 2), 1, "key %llu lost by a deletion",
			     (unsigned long long)k);
	cr_assert_eq(h.used, 1 + (5000 - 100) / 2);
	/* An entry with copies holds references; deleting it releases them. */
	e = emap_put(&m, b, 3, keys, 1, 11, NULL, 0, 0);
	e->copies[1] = 1;
	cr_assert_eq(emap_held_inc(&h, 11, 1), 2);
	cr_assert_eq(emap_del(&m, b, 3), 1);
	cr_assert_eq(emap_held_get(&h, 11, 1), 1);
	/* Draining stream a visits its two entries and leaves b alone. */
	cr_assert_not_null(emap_put(&m, b, 4, keys, 1, 11, NULL, 0, 0));
	emap_stream_drain(&m, a, count_drained, &drained);
	cr_assert_eq(drained, 2);
	cr_assert_null(emap_find(&m, a, 1));
	cr_assert_null(emap_find(&m, a, 2));
	cr_assert_not_null(emap_find(&m, b, 4));
	cr_assert_eq(emap_stream_entries(&m, b), 1);
	emap_held_reset(&h);
	cr_assert_eq(emap_held_get(&h, 101, 2), 0);
	emap_held_free(&h);
	emap_free(&m);
}

/* ---- unit tests: sequence rules ---------------------------------------------------------------- */

Test(ingest, seq_rules)
{
	struct seq_state s;

	seq_reset(&s);
	cr_assert_eq(seq_classify(&s, 17), SEQ_FIRST);
	seq_accept(&s, 17);
	cr_assert_eq(seq_classify(&s, 18), SEQ_IN_ORDER);
	cr_assert_eq(seq_classify(&s, 20), SEQ_GAP);
	cr_assert_eq(seq_classify(&s, 17), SEQ_DUP);
	cr_assert_eq(seq_classify(&s, 2), SEQ_DUP);
	cr_assert_eq(seq_classify(&s, 0), SEQ_RESTART);
	cr_assert_eq(seq_classify(&s, 1), SEQ_RESTART);
	for (uint64_t i = 18; i < 1000; i++)
		seq_accept(&s, i);
	cr_assert_eq(seq_classify(&s, 999 - SEQ_DUP_WINDOW + 1), SEQ_DUP);
	cr_assert_eq(seq_classify(&s, 999 - SEQ_DUP_WINDOW), SEQ_RESTART);
	/* Seq 0 right after seq 0 is a duplicate, not a restart. */
	seq_reset(&s);
	seq_accept(&s, 0);
	cr_assert_eq(seq_classify(&s, 0), SEQ_DUP);
	/* After a reconnect any step back is a restart. */
	seq_accept(&s, 5);
	s.reconnected = true;
	cr_assert_eq(seq_classify(&s, 5), SEQ_RESTART);
	cr_assert_eq(seq_classify(&s, 6), SEQ_IN_ORDER);
	seq_accept(&s, 6);
	cr_assert(!s.reconnected);
	/* A replay covered 10..20: live 10..20 are dropped silently, 21 continues. */
	seq_accept(&s, 20);
	s.covered = true;
	s.cov_lo = 10;
	s.cov_hi = 20;
	cr_assert_eq(seq_classify(&s, 10), SEQ_COVERED);
	cr_assert_eq(seq_classify(&s, 20), SEQ_COVERED);
	cr_assert_eq(seq_classify(&s, 21), SEQ_IN_ORDER);
	seq_accept(&s, 21);
	cr_assert(!s.covered);
	cr_assert_eq(seq_classify(&s, 20), SEQ_DUP);
}
