/*
 * test_load.c — Criterion suite "load": the index's load view (kvidx_pod_load(), kept by
 * kvidx-ingestd's tools/ingestd/load.c): what a commit counts (uncached prompt tokens, on the
 * prefill pod under P/D), what an outcome retires, conservation under many router processes
 * committing and reporting at once, the time bound after a router is killed, a full map, and
 * commits longer than KVIDX_MAX_COMMIT_KEYS; and kvidx-route's policies picking by other routers'
 * load in the view.
 *
 * The real daemon runs as a child (util_ingestd.c), a fake pod publishes nothing but its
 * subscription, and the test and its forked children are the routers. Every wait is for an
 * event, bounded by TU_DEADLINE_MS.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvidx.h"
#include "telemetry.h"
#include "util_index.h"
#include "util_ingestd.h"
#include "util_run.h"

#define MODEL "test-model"
#define POD_A "10.0.0.1:8000"
#define POD_B "10.0.0.2:8000"
#define BS TU_BLOCK_SIZE

static void setup(void)
{
	tu_ingestd_setup("load");
}

TestSuite(load, .init = setup, .fini = tu_ingestd_teardown, .timeout = 60);

/* Fake pods a and b, ingestd on them with extra flags (NULL-terminated); their indices. */
static void start(int *a, int *b, const char *const *extra)
{
	const char *argv[32];
	char specs[2][512];
	const char *names[2] = { POD_A, POD_B };
	int n = 0;

	for (int i = 0; i < 2; i++) {
		char topic[128];
		snprintf(topic, sizeof(topic), "kv@%s@%s", names[i], MODEL);
		struct tu_pub *p = tu_pub_open(topic);
		snprintf(specs[i], sizeof(specs[i]), "%s,name=%s", p->ep, names[i]);
		argv[n++] = "--pod";
		argv[n++] = specs[i];
	}
	argv[n++] = "--capacity";
	argv[n++] = "16k";
	for (int i = 0; extra && extra[i]; i++)
		argv[n++] = extra[i];
	argv[n] = NULL;
	tu_ingestd_start(argv);
	for (int i = 0; i < tu_ing.npubs; i++)
		tu_pub_wait_subscribed(&tu_ing.pubs[i]);
	TU_EVENTUALLY((*a = kvidx_reader_pod_find(tu_ing.rd, POD_A)) >= 0 &&
			      (*b = kvidx_reader_pod_find(tu_ing.rd, POD_B)) >= 0,
		      "pods never registered; log: %s", tu_ing.log);
}

static struct kvidx_load load_of(int pod)
{
	struct kvidx_load l;
	int rc;

	while ((rc = kvidx_pod_load(tu_ing.rd, pod, &l)) == -KVIDX_ERETRY)
		;
	cr_assert_eq(rc, 0, "kvidx_pod_load(%d): %s", pod, kvidx_strerror(rc));
	return l;
}

/* Whether pod's row reads (inflight, tokens). */
static bool load_is(int pod, uint32_t inflight, uint64_t tokens)
{
	struct kvidx_load l = load_of(pod);

	return l.inflight == inflight && l.prefill_tokens == tokens;
}

#define LOAD_EVENTUALLY(pod, n, t)                                                            \
	TU_EVENTUALLY(load_is(pod, n, t), "pod %d: load %u/%llu, want %u/%llu; log: %s", pod,  \
		      load_of(pod).inflight, (unsigned long long)load_of(pod).prefill_tokens,   \
		      (unsigned)(n), (unsigned long long)(t), tu_ing.log)

/* Commits corr on pod (prefill: -1 or the prefill pod), retrying while the ring is full. */
static int commit_on(struct kvidx_reader *r, uint64_t corr, int pod, int prefill, size_t nkeys,
		     uint32_t matched, uint32_t prompt)
{
	static uint64_t keys[4096];
	struct kvidx_route rt = { .corr_id = corr, .pod = pod, .prefill_pod = prefill,
				  .keys = keys, .nkeys = nkeys, .matched_blocks = matched,
				  .prompt_tokens = prompt };
	int rc;

	for (size_t i = 0; i < nkeys && i < 4096; i++)
		keys[i] = 0x10ad000000ull + corr * 4096 + i;
	while ((rc = kvidx_commit(r, &rt)) == -EAGAIN)
		usleep(200);
	return rc;
}

static int outcome_on(struct kvidx_reader *r, uint64_t corr, int pod)
{
	int rc;

	while ((rc = kvidx_report_outcome(r, corr, pod, 0, 0)) == -EAGAIN)
		usleep(200);
	return rc;
}

Test(load, commit_counts_uncached_tokens_outcome_retires)
{
	int a, b;
	struct kvidx_load l;

	start(&a, &b, NULL);
	cr_assert(load_is(a, 0, 0) && load_is(b, 0, 0), "a fresh index has no load");
	cr_assert_eq(kvidx_pod_load(tu_ing.rd, 4000, &l), -KVIDX_ENOPOD);
	cr_assert_eq(kvidx_pod_load(tu_ing.rd, -1, &l), -KVIDX_ENOPOD);
	uint64_t t0 = kvidx_now_ns();
	/* 140 tokens, 2 blocks matched: 108 to compute. */
	cr_assert_eq(commit_on(tu_ing.rd, 1, a, -1, 8, 2, 140), 0);
	LOAD_EVENTUALLY(a, 1, 108);
	l = load_of(a);
	cr_assert(l.updated_ns >= t0 && l.updated_ns <= kvidx_now_ns());
	/* Prompt length unknown: nkeys x block size (8 x 16 - 3 x 16 = 80). */
	cr_assert_eq(commit_on(tu_ing.rd, 2, a, -1, 8, 3, 0), 0);
	/* Under P/D the request counts on the prefill pod; a full match computes nothing. */
	cr_assert_eq(commit_on(tu_ing.rd, 3, a, b, 4, 1, 64), 0);
	cr_assert_eq(commit_on(tu_ing.rd, 4, b, -1, 4, 4, 64), 0);
	LOAD_EVENTUALLY(a, 2, 188);
	LOAD_EVENTUALLY(b, 2, 48);
	/* The 1.0 symbol reads the 1.0 fields only: prompt unknown. */
	uint64_t k[5] = { 1, 2, 3, 4, 5 };
	struct kvidx_route old = { .corr_id = 5, .pod = b, .prefill_pod = -1, .keys = k, .nkeys = 5 };
	cr_assert_eq((kvidx_commit)(tu_ing.rd, &old), 0);
	LOAD_EVENTUALLY(b, 3, 48 + 80);
	cr_assert_eq(kvidx_commit_sized(tu_ing.rd, &old, KVIDX_ROUTE_SIZE_1_0 - 1), -EINVAL);
	/* Outcomes retire exactly their request; one for nothing in flight changes nothing. */
	cr_assert_eq(outcome_on(tu_ing.rd, 1, a), 0);
	cr_assert_eq(outcome_on(tu_ing.rd, 99, a), 0);
	LOAD_EVENTUALLY(a, 1, 80);
	cr_assert_eq(outcome_on(tu_ing.rd, 3, b), 0);
	cr_assert_eq(outcome_on(tu_ing.rd, 2, a), 0);
	cr_assert_eq(outcome_on(tu_ing.rd, 2, a), 0); /* a repeat: nothing left to retire */
	cr_assert_eq(outcome_on(tu_ing.rd, 4, b), 0);
	cr_assert_eq(outcome_on(tu_ing.rd, 5, b), 0);
	LOAD_EVENTUALLY(a, 0, 0);
	LOAD_EVENTUALLY(b, 0, 0);
	cr_assert_eq(load_of(a).lost + load_of(b).lost, 0);
}

Test(load, long_prompt_commits_its_prefix_and_counts_the_whole)
{
	int a, b;

	start(&a, &b, NULL);
	TU_EVENTUALLY(tu_ctr(a, KV_PC_connected) == 1 && !tu_pod_paused(tu_ing.rd, a) &&
			      tu_ctr(a, KV_PC_spec_paused) == 0,
		      "pod a never connected and fresh; log: %s", tu_ing.log);
	/* Above KVIDX_MAX_COMMIT_KEYS: not refused; the load counts every block. */
	cr_assert_eq(commit_on(tu_ing.rd, 7, a, -1, 3000, 0, 0), 0);
	LOAD_EVENTUALLY(a, 1, 3000 * BS);
	cr_assert_eq(commit_on(tu_ing.rd, 8, b, -1, 3000, 10, 87000), 0);
	LOAD_EVENTUALLY(b, 1, 87000 - 10 * BS);
	TU_EVENTUALLY(tu_ctr(a, KV_PC_speculations) == KVIDX_MAX_COMMIT_KEYS,
		      "speculated %llu blocks", (unsigned long long)tu_ctr(a, KV_PC_speculations));
}

#define ROUTERS 6
#define PER_ROUTER 300

/* Router child i: commits PER_ROUTER requests over both pods, waits for the parent's go,
 * then reports every outcome, in an order of its own. */
static void router_child(int i, int a, int b, int go_fd, int done_fd)
{
	struct kvidx_reader *r = kvidx_reader_open(tu_ing.name);
	char c;

	if (!r)
		_exit(2);
	for (int j = 0; j < PER_ROUTER; j++) {
		uint64_t corr = (uint64_t)i << 32 | (uint64_t)j;
		int pod = (i + j) % 2 ? a : b;
		/* Distinct sizes: prompt 100 + j, matched j % 4 blocks. */
		if (commit_on(r, corr, pod, -1, 6, (uint32_t)(j % 4), 100 + (uint32_t)j) != 0)
			_exit(3);
		/* Half the outcomes interleave with other routers' commits. */
		if (j % 2 && outcome_on(r, corr, pod) != 0)
			_exit(4);
	}
	if (write(done_fd, "x", 1) != 1 || read(go_fd, &c, 1) != 1)
		_exit(5);
	for (int j = PER_ROUTER - 1; j >= 0; j--) {
		uint64_t corr = (uint64_t)i << 32 | (uint64_t)j;
		if (j % 2 == 0 && outcome_on(r, corr, (i + j) % 2 ? a : b) != 0)
			_exit(6);
	}
	kvidx_reader_close(r);
	_exit(0);
}

Test(load, conserved_under_many_routers)
{
	int a, b, go[2], done[2];
	pid_t kids[ROUTERS];
	uint32_t want_n[2] = { 0, 0 };
	uint64_t want_t[2] = { 0, 0 };

	start(&a, &b, NULL);
	cr_assert(pipe(go) == 0 && pipe(done) == 0);
	fflush(NULL);
	for (int i = 0; i < ROUTERS; i++) {
		cr_assert((kids[i] = fork()) >= 0);
		if (kids[i] == 0)
			router_child(i, a, b, go[0], done[1]);
		/* What stays in flight until the go: the even j of each router. */
		for (int j = 0; j < PER_ROUTER; j += 2) {
			int side = (i + j) % 2 ? 0 : 1;
			want_n[side]++;
			want_t[side] += 100 + (uint64_t)j - (uint64_t)(j % 4) * BS;
		}
	}
	for (int i = 0; i < ROUTERS; i++) {
		char c;
		cr_assert_eq(read(done[0], &c, 1), 1, "a router child failed");
	}
	LOAD_EVENTUALLY(a, want_n[0], want_t[0]);
	LOAD_EVENTUALLY(b, want_n[1], want_t[1]);
	for (int i = 0; i < ROUTERS; i++)
		cr_assert_eq(write(go[1], "g", 1), 1);
	for (int i = 0; i < ROUTERS; i++) {
		int st;
		cr_assert_eq(waitpid(kids[i], &st, 0), kids[i]);
		cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "router %d: status %#x", i, st);
	}
	LOAD_EVENTUALLY(a, 0, 0);
	LOAD_EVENTUALLY(b, 0, 0);
	cr_assert_eq(load_of(a).lost + load_of(b).lost, 0, "nothing was retired without its outcome");
}

Test(load, killed_router_is_retired_by_the_time_bound)
{
	int a, b, done[2];

	start(&a, &b, (const char *const[]){ "--load-timeout", "300ms", NULL });
	cr_assert(pipe(done) == 0);
	fflush(NULL);
	pid_t kid = fork();
	cr_assert(kid >= 0);
	if (kid == 0) {
		struct kvidx_reader *r = kvidx_reader_open(tu_ing.name);
		if (!r)
			_exit(2);
		for (int j = 0; j < 5; j++)
			if (commit_on(r, 100 + (uint64_t)j, a, -1, 4, 0, 64) != 0)
				_exit(3);
		if (write(done[1], "x", 1) != 1)
			_exit(4);
		pause(); /* killed here, its outcomes never sent */
		_exit(5);
	}
	char c;
	cr_assert_eq(read(done[0], &c, 1), 1);
	kill(kid, SIGKILL);
	int st;
	cr_assert_eq(waitpid(kid, &st, 0), kid);
	/* The commits were published before the kill: the writer sees them, then the bound
	 * retires them (counted), and the row is back to zero. */
	TU_EVENTUALLY(load_of(a).lost == 5, "lost %llu; load %u; log: %s",
		      (unsigned long long)load_of(a).lost, load_of(a).inflight,
		      tu_ing.log);
	LOAD_EVENTUALLY(a, 0, 0);
	/* A late outcome after the bound finds nothing and changes nothing. */
	cr_assert_eq(commit_on(tu_ing.rd, 200, a, -1, 4, 0, 64), 0);
	cr_assert_eq(outcome_on(tu_ing.rd, 100, a), 0);
	LOAD_EVENTUALLY(a, 1, 64);
}

Test(load, full_map_retires_its_oldest)
{
	int a, b;

	start(&a, &b, (const char *const[]){ "--corr-map", "16", NULL });
	for (uint64_t j = 0; j < 20; j++)
		cr_assert_eq(commit_on(tu_ing.rd, j, a, -1, 1, 0, 10), 0);
	LOAD_EVENTUALLY(a, 16, 160);
	cr_assert_eq(load_of(a).lost, 4);
	cr_assert_eq(outcome_on(tu_ing.rd, 0, a), 0); /* evicted already: nothing */
	cr_assert_eq(outcome_on(tu_ing.rd, 19, a), 0);
	LOAD_EVENTUALLY(a, 15, 150);
}

/* The pod kvidx-route's load generator picks for one fresh prompt (seed) under policy. Its
 * pods serve nowhere (the port is closed): the pick is made and committed, the request fails
 * to connect and its outcome never comes, so its commit stays in the view (120 s bound). */
static char *route_pick_of(const char *policy, int seed)
{
	struct tu_run r = tu_run_tool(
		"kvidx-route", "--name %s --pod %s=http://127.0.0.1:%d --pod %s=http://127.0.0.1:%d "
		"--policy %s --synthetic --prefixes 1 --prefix-blocks 0 --suffix-blocks 4 "
		"--seed %d --count 1 --json 2>/dev/null", tu_ing.name, POD_A, tu_port(9), POD_B,
		tu_port(9), policy, seed);
	const char *p = strstr(r.out, "\"event\":\"route\"");
	static char pod[64];

	cr_assert_not_null(p, "%s: no route event: %s", policy, r.out);
	p = strstr(p, "\"pod\":\"");
	cr_assert_not_null(p, "%s", r.out);
	snprintf(pod, sizeof(pod), "%.*s", (int)strcspn(p + 7, "\""), p + 7);
	free(r.out);
	return pod;
}

/*
 * kvidx-route's policies weigh the load every router put in the index's view, not only their
 * own: each run below is a new router process that sent nothing itself. With no load, the
 * tie goes to the first pod; with another router's work on pod A (10 requests, 200,000
 * uncached tokens, committed by the test), every load-aware policy, and prefix on its tie,
 * picks B, though B holds the earlier runs' requests (at most 6, 24 blocks).
 */
Test(load, routers_pick_by_each_others_load)
{
	static const char *const pols[] = { "kvidx", "least-loaded", "llm-d", "dynamo", "prefix" };
	int a, b, seed = 1;

	start(&a, &b, NULL);
	cr_assert_str_eq(route_pick_of("kvidx", seed++), POD_A, "an idle tie: the first pod");
	LOAD_EVENTUALLY(a, 1, 4 * BS);
	for (uint64_t k = 0; k < 10; k++)
		cr_assert_eq(commit_on(tu_ing.rd, 500 + k, a, -1, 8, 0, 20000), 0);
	LOAD_EVENTUALLY(a, 11, 200000 + 4 * BS);
	for (size_t i = 0; i < sizeof(pols) / sizeof(pols[0]); i++)
		cr_assert_str_eq(route_pick_of(pols[i], seed++), POD_B, "%s ignored pod A's load",
				 pols[i]);
	LOAD_EVENTUALLY(b, 5, 5 * 4 * BS);
	/* round-robin weighs nothing: its first pick is the first pod still. */
	cr_assert_str_eq(route_pick_of("round-robin", seed++), POD_A);
}
