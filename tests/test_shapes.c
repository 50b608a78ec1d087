/*
 * test_shapes.c — Criterion suite "shapes": what real vLLM 0.26+ streams contain, published by
 * kvidx-fakepod and indexed by kvidx-ingestd, end to end through ZeroMQ on loopback ports:
 * the default and kv-events topics, two data-parallel ranks (a restart and a clear of one
 * rank), LoRA / salt / multimodal extra_keys (keys equal to kvidx-hash's), a hybrid batch
 * with offload placeholders and duplicate copies, and the workload with every shape on.
 *
 * Both tools are children of the test (fakepod's script on a pipe, its hashes read back from
 * its standard output); the index is checked as a router sees it (the test's reader) and
 * through the pod's counters. Nothing sleeps for a fixed time: checks poll until a deadline,
 * and "X did not happen" is checked once the batch count says every batch was applied.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "kvidx.h"
#include "telemetry.h"
#include "util_index.h"
#include "util_ingestd.h"
#include "util_run.h"
#include "wire.h"

#define MODEL "shape-model"
#define POD "10.0.0.9:8000"
#define BS 16

static struct tu_child pod = { .pid = -1, .in = -1, .out = -1, .err = -1 };
static char errbuf[1 << 14];
static size_t errlen;

static void setup(void)
{
	tu_ingestd_setup("shp");
	pod = (struct tu_child){ .pid = -1, .in = -1, .out = -1, .err = -1 };
	errlen = 0;
}

static void teardown(void)
{
	tu_child_kill(&pod);
	tu_ingestd_teardown();
}

TestSuite(shapes, .init = setup, .fini = teardown, .timeout = 120);

/* ---- the fake pod ---------------------------------------------------------------------------- */

#define FAKEPOD(...) tu_spawn(&pod, "kvidx-fakepod", (const char *const[]){ __VA_ARGS__, NULL }, \
			      NULL, true)
#define INGESTD(...) tu_ingestd_start((const char *const[]){ __VA_ARGS__, NULL })

/* What the pod wrote on standard error so far (all of it once it exited). */
static const char *pod_stderr(void)
{
	return tu_child_stderr(&pod, errbuf, sizeof(errbuf), &errlen);
}

/* One script line to the pod: never an empty one. */
#define say(...) cr_assert(tu_child_say(&pod, __VA_ARGS__) > 0, "empty script line")

/* The next hash the pod printed (a store's block), within the deadline. */
static uint64_t read_hash(void)
{
	char line[64];
	size_t n = 0;

	for (;;) {
		struct pollfd p = { .fd = pod.out, .events = POLLIN };
		char c;

		cr_assert(poll(&p, 1, TU_DEADLINE_MS) == 1, "no hash from kvidx-fakepod: %s",
			  pod_stderr());
		if (read(pod.out, &c, 1) != 1)
			continue;
		if (c == '\n')
			break;
		cr_assert(n < sizeof(line) - 1);
		line[n++] = c;
	}
	line[n] = '\0';
	return strtoull(line, NULL, 16);
}

static void read_hashes(uint64_t *h, size_t n)
{
	for (size_t i = 0; i < n; i++)
		h[i] = read_hash();
}

/* "a,a+1,...": n tokens from a, in a buffer of its own per call (4 of them). */
static const char *toks(uint32_t a, size_t n)
{
	static char buf[4][8192];
	static int next;
	char *b = buf[next++ % 4];
	size_t k = 0;

	for (size_t i = 0; i < n; i++)
		k += (size_t)snprintf(b + k, sizeof(buf[0]) - k, "%s%u", i ? "," : "", a + (uint32_t)i);
	return b;
}

/* ---- the index ------------------------------------------------------------------------------- */

static bool holds(uint64_t key, int p)
{
	return tu_tiers(key, p) != 0;
}

/* Keys of n tokens from a as a router computes them (plain text, model MODEL). */
static void plain_keys(uint32_t a, size_t n, uint64_t *out)
{
	uint32_t t[256];

	cr_assert(n <= 256);
	for (size_t i = 0; i < n; i++)
		t[i] = a + (uint32_t)i;
	cr_assert_eq(tu_keys_of(MODEL, 0, t, n, out), n / BS);
}

/* Keys kvidx-hash prints for "ARGS" (its options and tokens): their number. */
__attribute__((format(printf, 3, 4)))
static size_t hash_tool(uint64_t *out, size_t cap, const char *fmt, ...)
{
	char args[16384];
	va_list ap;
	size_t n = 0;

	va_start(ap, fmt);
	vsnprintf(args, sizeof(args), fmt, ap);
	va_end(ap);
	struct tu_run r = tu_run_tool("kvidx-hash", "%s", args);
	cr_assert_eq(r.status, 0, "kvidx-hash %s: %s", args, r.out);
	for (char *l = strtok(r.out, "\n"); l && n < cap; l = strtok(NULL, "\n"))
		out[n++] = strtoull(l, NULL, 16);
	free(r.out);
	return n;
}

/* Counter c of pod p, the name given for messages. */
#define CTR(p, c) tu_ctr(p, KV_PC_##c)

/* ---- tests ------------------------------------------------------------------------------------ */

Test(shapes, default_topic_two_dp_ranks)
{
	char spec[256], subep[64];
	uint64_t a[2], u, w, h1, ka[2], ku, kw, c1;
	void *sub;
	int p, hwm = 0;

	/* vLLM's default topic "" and --data-parallel-size 2: rank r on port + r. A SUB of the
	 * test's on rank 1 sees what rank 1 sends. */
	FAKEPOD("--topic", "", "--dp-ranks", "2", "--pub", tu_endpoint(0), "--replay",
		tu_endpoint(2), "--wait-subscribers", "3", "--script", "-");
	snprintf(spec, sizeof(spec), "%s,replay=%s,name=" POD ",model=" MODEL ",dp-ranks=2",
		 tu_endpoint(0), tu_endpoint(2));
	INGESTD("--capacity", "16k", "--pod", spec);
	sub = zmq_socket(tu_ing.zctx, ZMQ_SUB);
	zmq_setsockopt(sub, ZMQ_RCVHWM, &hwm, sizeof(hwm));
	zmq_setsockopt(sub, ZMQ_SUBSCRIBE, "", 0);
	snprintf(subep, sizeof(subep), "%s", tu_endpoint(1));
	cr_assert_eq(zmq_connect(sub, subep), 0);

	say("store - %s", toks(1000, 2 * BS)); /* rank 0 */
	read_hashes(a, 2);
	say("rank 1");
	say("store - %s", toks(1000, BS)); /* the same first block on rank 1 */
	h1 = read_hash();
	cr_assert_eq(h1, a[0], "engine hashes depend on the tokens only");
	say("store - %s", toks(2000, BS));
	u = read_hash();
	plain_keys(1000, 2 * BS, ka);
	plain_keys(2000, BS, &ku);
	p = tu_wait_pod(POD);
	tu_wait_batches(p, 3);
	cr_assert(holds(ka[0], p) && holds(ka[1], p) && holds(ku, p), "log: %s", tu_ing.log);
	cr_assert_eq(CTR(p, ranks), 2);
	cr_assert_eq(tu_ctr(p, KV_PC_RANK(0, KV_RC_batches)), 1);
	cr_assert_eq(tu_ctr(p, KV_PC_RANK(1, KV_RC_batches)), 2);

	/* Rank 1's first batch, as the SUB saw it: topic "", seq 0, data_parallel_rank 1. */
	{
		struct kvw_batch b;
		zmq_msg_t m[3];
		uint64_t seq;
		int rcvto = TU_DEADLINE_MS;
		char err[128];

		zmq_setsockopt(sub, ZMQ_RCVTIMEO, &rcvto, sizeof(rcvto));
		for (int i = 0; i < 3; i++) {
			zmq_msg_init(&m[i]);
			cr_assert(zmq_msg_recv(&m[i], sub, 0) >= 0, "nothing on rank 1's port");
		}
		cr_assert_eq(zmq_msg_size(&m[0]), 0, "the topic is not \"\"");
		cr_assert(kvw_seq_get(zmq_msg_data(&m[1]), zmq_msg_size(&m[1]), &seq));
		cr_assert_eq(seq, 0, "rank 1 numbers its own batches from 0");
		kvw_batch_init(&b);
		cr_assert_eq(kvw_decode_batch(zmq_msg_data(&m[2]), zmq_msg_size(&m[2]), &b, err,
					      sizeof(err)), 0, "%s", err);
		cr_assert(b.has_dp_rank && b.dp_rank == 1, "data_parallel_rank of rank 1's batch");
		kvw_batch_free(&b);
		for (int i = 0; i < 3; i++)
			zmq_msg_close(&m[i]);
		zmq_close(sub);
	}

	/* Rank 1 restarts (its sequence back to 0): its blocks go, rank 0's stay. */
	say("restart");
	say("store - %s", toks(3000, BS));
	w = read_hash();
	plain_keys(3000, BS, &kw);
	tu_wait_batches(p, 4);
	TU_EVENTUALLY(holds(kw, p), "rank 1's store after its restart; log: %s", tu_ing.log);
	cr_assert(!holds(ku, p), "rank 1's block survived its restart");
	cr_assert(holds(ka[0], p) && holds(ka[1], p), "rank 0's blocks went with rank 1's restart");
	cr_assert_eq(tu_ctr(p, KV_PC_RANK(1, KV_RC_restarts)), 1);
	cr_assert_eq(tu_ctr(p, KV_PC_RANK(0, KV_RC_restarts)), 0);

	/* Rank 0 clears: its blocks go, rank 1's new one stays. */
	c1 = tu_ctr(p, KV_PC_RANK(1, KV_RC_clears)); /* a restart clears the rank too */
	say("rank 0");
	say("clear");
	tu_wait_batches(p, 5);
	cr_assert(!holds(ka[0], p) && !holds(ka[1], p), "rank 0's blocks survived its clear");
	cr_assert(holds(kw, p), "rank 1's block went with rank 0's clear");
	cr_assert_eq(tu_ctr(p, KV_PC_RANK(0, KV_RC_clears)), 1);
	cr_assert_eq(tu_ctr(p, KV_PC_RANK(1, KV_RC_clears)), c1);
	cr_assert_eq(CTR(p, seq_gaps), 0, "each rank has its own sequence");
	(void)u;
	(void)w;

	struct tu_run run = tu_run_tool("kvidx-dump", "--name %s --pods", tu_ing.name);
	cr_assert_eq(run.status, 0, "%s", run.out);
	cr_assert(strstr(run.out, "rank 0: connected") && strstr(run.out, "rank 1: connected"),
		  "%s", run.out);
	free(run.out);
	close(pod.in);
	pod.in = -1;
	cr_assert_eq(tu_child_wait(&pod, TU_DEADLINE_MS), 0, "%s", pod_stderr());
	cr_assert(strstr(pod_stderr(), "shapes: ranks=2"), "%s", pod_stderr());
}

Test(shapes, kv_events_topic_and_filter)
{
	char spec[256];
	uint64_t k[2];
	int p;

	FAKEPOD("--topic", "kv-events", "--pub", tu_endpoint(0), "--wait-subscribers", "1",
		"--script", "-");
	snprintf(spec, sizeof(spec), "%s,name=" POD ",model=" MODEL, tu_endpoint(0));
	INGESTD("--capacity", "16k", "--topic-filter", "kv-events", "--pod", spec);
	say("store - %s", toks(4000, 2 * BS));
	plain_keys(4000, 2 * BS, k);
	p = tu_wait_pod(POD);
	tu_wait_batches(p, 1);
	cr_assert(holds(k[0], p) && holds(k[1], p), "nothing indexed from kv-events; log: %s",
		  tu_ing.log);
	cr_assert_eq(CTR(p, skipped_events), 0);
}

/* Publishers that dial out (llm-d's simulator; SGLang with an endpoint that is no wildcard):
 * kvidx-ingestd --bind with --bind-ranks 2 takes rank r on the bound port + r as rank r of
 * the pod its topic names, and --bind-replay replays a gap from the pod's replay ROUTER
 * (rank r's at its port + r) while the pod's later live messages wait. */
Test(shapes, bind_mode_ranks_and_replay)
{
	char rep[128], bind[64];
	uint64_t a[3], b1, ka[3], kb;
	int p;

	FAKEPOD("--pub-connect", "--pub", tu_endpoint(0), "--dp-ranks", "2", "--replay",
		tu_endpoint(2), "--pod", POD, "--model", MODEL, "--wait-subscribers", "2",
		"--script", "-");
	snprintf(bind, sizeof(bind), "%s", tu_endpoint(0));
	snprintf(rep, sizeof(rep), POD "=%s", tu_endpoint(2));
	INGESTD("--capacity", "16k", "--bind", bind, "--bind-ranks", "2", "--bind-replay", rep);
	say("store - %s", toks(3000, BS)); /* rank 0, seq 0 */
	a[0] = read_hash();
	say("rank 1");
	say("store - %s", toks(4000, BS)); /* rank 1, seq 0 */
	b1 = read_hash();
	say("rank 0");
	say("lose 1");
	say("store %016" PRIx64 " %s", a[0], toks(3000 + BS, BS)); /* seq 1: lost, kept */
	a[1] = read_hash();
	say("store %016" PRIx64 " %s", a[1], toks(3000 + 2 * BS, BS)); /* seq 2: the gap */
	a[2] = read_hash();
	plain_keys(3000, 3 * BS, ka);
	plain_keys(4000, BS, &kb);
	p = tu_wait_pod(POD);
	TU_EVENTUALLY(CTR(p, replays_ok) == 1, "gap not replayed; log: %s; pod: %s", tu_ing.log,
		      pod_stderr());
	tu_wait_batches(p, 4);
	for (int i = 0; i < 3; i++)
		cr_assert(holds(ka[i], p), "rank 0 block %d; log: %s", i, tu_ing.log);
	cr_assert(holds(kb, p), "rank 1's block (bound port + 1)");
	cr_assert_eq(CTR(p, ranks), 2);
	cr_assert_eq(CTR(p, seq_gaps), 1);
	cr_assert_eq(tu_ctr(p, KV_PC_RANK(0, KV_RC_batches)), 3);
	cr_assert_eq(tu_ctr(p, KV_PC_RANK(1, KV_RC_batches)), 1);
	cr_assert_eq(CTR(p, clears), 0, "the gap cleared the pod instead of replaying");
	cr_assert_eq(CTR(p, replays_failed), 0);
	(void)b1;
	free(tu_expect_usage("kvidx-ingestd", "--pod tcp://127.0.0.1:1 --bind-ranks 2", "need --bind"));
	free(tu_expect_usage("kvidx-ingestd", "--bind tcp://127.0.0.1:65535 --bind-ranks 2",
			     "room for 1 more"));
	free(tu_expect_usage("kvidx-ingestd", "--bind tcp://127.0.0.1:5 --bind-replay pod",
			     "NAME=ENDPOINT"));
}

Test(shapes, lora_salt_mm_keys_equal_kvidx_hash)
{
	char spec[256];
	uint64_t h[4], kl[2], kplain[2], ks[4], kb[2];
	int p;

	FAKEPOD("--pub", tu_endpoint(0), "--pod", POD, "--model", MODEL, "--wait-subscribers", "1",
		"--script", "-");
	snprintf(spec, sizeof(spec), "%s", tu_endpoint(0));
	INGESTD("--capacity", "16k", "--pod", spec);

	/* A LoRA request: lora_name and the name in every block's extra_keys. */
	say("lora sql-adapter");
	say("store - %s", toks(1, 2 * BS));
	read_hashes(h, 2);
	/* A salted request with an image on tokens [20, 40) (blocks 1 and 2, tuple form), then
	 * a text turn chained from it. */
	say("lora -");
	say("salt tenant-7");
	say("mm 20:20:img0");
	say("store - %s", toks(1, 3 * BS));
	read_hashes(h, 3);
	say("salt -");
	say("mm -");
	say("store %016" PRIx64 " %s", h[2], toks(3 * BS + 1, BS));
	read_hashes(h + 3, 1);
	/* The bare-string form of vLLM 0.18-0.25: an image on [4, 12) of block 0. */
	say("mm bare 4:8:imgB");
	say("store - %s", toks(500, 2 * BS));

	cr_assert_eq(hash_tool(kl, 2, "--model " MODEL " --lora sql-adapter %s", toks(1, 2 * BS)), 2);
	plain_keys(1, 2 * BS, kplain);
	cr_assert_eq(hash_tool(ks, 4, "--model " MODEL " --salt tenant-7 --mm 20:20:img0 %s",
			       toks(1, 4 * BS)), 4);
	cr_assert_eq(hash_tool(kb, 2, "--model " MODEL " --mm 4:8:imgB %s", toks(500, 2 * BS)), 2);
	p = tu_wait_pod(POD);
	tu_wait_batches(p, 4);
	for (int i = 0; i < 2; i++) {
		cr_assert(holds(kl[i], p), "LoRA block %d: not the key kvidx-hash --lora gives; "
			  "log: %s", i, tu_ing.log);
		cr_assert(!holds(kplain[i], p), "LoRA block %d indexed under the base model", i);
		cr_assert(holds(kb[i], p), "bare multimodal block %d", i);
	}
	for (int i = 0; i < 4; i++)
		cr_assert(holds(ks[i], p), "salted multimodal block %d (3: the text turn)", i);
	cr_assert_eq(CTR(p, skipped_events), 0);
	cr_assert_eq(CTR(p, unknown_parent), 0);
	cr_assert_eq(CTR(p, unkeyable_extras), 0);
}

Test(shapes, hybrid_batch_placeholders_and_copies)
{
	char spec[256];
	uint64_t h[2], k[2], ks;
	int p;

	/* One scheduler step of a hybrid model with CPU offloading, merged in one batch as vLLM
	 * does: full attention, a sliding-window group (one hash, the tokens of both blocks),
	 * the placeholder announcing the blocks on CPU, and a second physical copy. */
	FAKEPOD("--pub", tu_endpoint(0), "--pod", POD, "--model", MODEL, "--wait-subscribers", "1",
		"--encoding", "map", "--batch", "100", "--script", "-");
	snprintf(spec, sizeof(spec), "%s", tu_endpoint(0));
	INGESTD("--capacity", "16k", "--pod", spec);
	plain_keys(6000, 2 * BS, k);
	plain_keys(7000, BS, &ks);
	say("group 0 full_attention");
	say("store - %s", toks(6000, 2 * BS));
	read_hashes(h, 2);
	say("group 1 sliding_window"); /* the window keeps block 1 only */
	say("store %016" PRIx64 " %s", h[0], toks(6000 + BS, BS));
	cr_assert_eq(read_hash(), h[1]);
	say("group 0 full_attention");
	say("offload CPU %016" PRIx64 " %016" PRIx64, h[0], h[1]);
	say("store - %s", toks(6000, 2 * BS));
	read_hashes(h, 2);
	say("flush");
	p = tu_wait_pod(POD);
	tu_wait_batches(p, 1);
	for (int i = 0; i < 2; i++)
		cr_assert_eq(tu_tiers(k[i], p), KVIDX_TIER_GPU | KVIDX_TIER_CPU, "block %d; log: %s",
			     i, tu_ing.log);
	cr_assert_eq(CTR(p, skipped_group), 1);
	cr_assert_eq(CTR(p, offload_applied), 2);
	cr_assert_eq(CTR(p, dup_copies), 2);
	cr_assert_eq(CTR(p, skipped_shape), 0);

	/* One copy removed, with remaining_copy_counts: still held. */
	say("remove %016" PRIx64 ":1 %016" PRIx64 ":1", h[0], h[1]);
	/* The sliding-window group's removal does not touch full attention's blocks. */
	say("group 1 -");
	say("remove %016" PRIx64 " %016" PRIx64, h[0], h[1]);
	say("flush");
	tu_wait_batches(p, 2);
	cr_assert(holds(k[0], p) && holds(k[1], p), "removed before the last copy went");
	cr_assert_eq(CTR(p, copies_kept), 2);
	cr_assert_eq(CTR(p, skipped_group), 2);
	/* CPU evicts them: GPU stays. */
	say("group -");
	say("medium CPU");
	say("remove %016" PRIx64 " %016" PRIx64, h[0], h[1]);
	say("flush");
	tu_wait_batches(p, 3);
	cr_assert_eq(tu_tiers(k[0], p), KVIDX_TIER_GPU);
	cr_assert_eq(tu_tiers(k[1], p), KVIDX_TIER_GPU);
	/* The last GPU copy. */
	say("medium -");
	say("remove %016" PRIx64 ":0 %016" PRIx64 ":0", h[0], h[1]);
	say("store - %s", toks(7000, BS)); /* sentinel */
	say("flush");
	tu_wait_batches(p, 4);
	cr_assert(holds(ks, p));
	cr_assert(!holds(k[0], p) && !holds(k[1], p), "the last copy's removal left them");
	cr_assert_eq(CTR(p, unknown_removed), 0);
}

/* The value of "NAME=" in the pod's summary lines. */
static uint64_t summary(const char *name)
{
	char pat[64];
	const char *s;

	snprintf(pat, sizeof(pat), " %s=", name);
	s = strstr(pod_stderr(), pat);
	cr_assert_not_null(s, "no %s in kvidx-fakepod's summary: %s", name, pod_stderr());
	return strtoull(s + strlen(pat), NULL, 10);
}

Test(shapes, workload_with_every_shape)
{
	char spec[256];
	uint64_t batches;
	int p, st;

	/* Two ranks, a hybrid model, CPU offloading, duplicate copies with counts, LoRA, salt
	 * and images: what ingestd counts must be what the pod published. */
	FAKEPOD("--pub", tu_endpoint(0), "--pod", POD, "--model", MODEL, "--dp-ranks", "2",
		"--wait-subscribers", "2", "--workload", "--count", "1500", "--rate", "0",
		"--batch", "7", "--cache-blocks", "48", "--prefixes", "6", "--hybrid", "--offload",
		"0.3", "--dup-copies", "0.25", "--copy-counts", "--lora", "adapter-a",
		"--lora-share", "0.5", "--salt", "tenant-1", "--salt-share", "0.3", "--mm", "0.3",
		"--linger-ms", "3000");
	snprintf(spec, sizeof(spec), "%s,dp-ranks=2", tu_endpoint(0));
	INGESTD("--capacity", "64k", "--pod", spec);
	st = tu_child_wait(&pod, TU_DEADLINE_MS + 3000);
	cr_assert_eq(st, 0, "kvidx-fakepod: status %d: %s", st, pod_stderr());
	batches = summary("batches");
	p = tu_wait_pod(POD);
	tu_wait_batches(p, batches);
	cr_assert_eq(CTR(p, events), 1500);
	cr_assert_eq(CTR(p, ranks), 2);
	cr_assert(tu_ctr(p, KV_PC_RANK(0, KV_RC_batches)) && tu_ctr(p, KV_PC_RANK(1, KV_RC_batches)),
		  "the workload was not spread over both ranks");
	cr_assert_gt(summary("group_events"), 0);
	cr_assert_gt(summary("placeholder_blocks"), 0);
	cr_assert_gt(summary("dup_blocks"), 0);
	cr_assert_gt(summary("extra_blocks"), 0);
	/* The hybrid model's sliding-window and Mamba events are indexed per group. */
	cr_assert_eq(CTR(p, skipped_group), 0);
	cr_assert_eq(CTR(p, offload_applied), summary("placeholder_blocks"));
	cr_assert_eq(CTR(p, dup_copies), summary("dup_blocks"));
	cr_assert_eq(CTR(p, offload_unknown), 0);
	cr_assert_eq(CTR(p, unknown_parent), 0);
	cr_assert_eq(CTR(p, unkeyable_extras), 0);
	cr_assert_eq(CTR(p, skipped_shape), 0);
	cr_assert_eq(CTR(p, bad_events), 0);
	cr_assert_eq(CTR(p, unknown_removed), 0, "a removal of a block ingestd did not hold");
	cr_assert_gt(CTR(p, copies_kept), 0);
	cr_assert_eq(CTR(p, skipped_events), CTR(p, skipped_group));
}

Test(shapes, usage_errors)
{
	static const char *const bad[][8] = {
		{ "--dp-ranks", "2", "--rank", "1", NULL },
		{ "--dp-ranks", "33", NULL },
		{ "--dp-ranks", "2", "--pub", "tcp://127.0.0.1:*", NULL },
		{ "--dp-ranks", "2", "--pub", "tcp://127.0.0.1:65535", NULL },
		{ "--script", "-", "--lora", "a", NULL },
		{ "--script", "-", "--hybrid", NULL },
		{ "--salt", "", NULL },
		{ "--offload", "1.5", NULL },
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char args[512] = "";

		for (int j = 0; bad[i][j]; j++) {
			strcat(args, " '");
			strcat(args, bad[i][j]);
			strcat(args, "'");
		}
		struct tu_run r = tu_run_tool("kvidx-fakepod", "%s 2>&1", args);
		cr_assert_eq(r.status, 2, "kvidx-fakepod%s: status %d: %s", args, r.status, r.out);
		free(r.out);
	}
	struct tu_run r = tu_run_tool("kvidx-fakepod", "--help");
	cr_assert_eq(r.status, 0);
	cr_assert(strstr(r.out, "--dp-ranks N") && strstr(r.out, "--topic T") &&
		  strstr(r.out, "--hybrid") && strstr(r.out, "mm [bare] START:LEN:ID"), "%s", r.out);
	free(r.out);
}
