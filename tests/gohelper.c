/*
 * gohelper.c — the C side of the Go reader's tests (lib/go/kvidx): builds indexes through the
 * C writer API and prints what the C reader answers, so that the Go reader can be compared
 * with it; churns a tiny index for the Go torture test; drains route rings and prints what
 * the C consumer accepted.
 *
 *   kvidx-gohelper build NAME SEED   random index (stores, removals, clears, pod removal and
 *                                    reuse, live and expired predictions, paused pods, KV-cache
 *                                    groups and grouped stores and removals), then
 *                                    one line per question and the C reader's answer:
 *                                      I algo seed block_size generation
 *                                      P pod name|model
 *                                      C pod name=value ... (named per-pod counters)
 *                                      K pod rank flags,last_seq,... (ranks in use)
 *                                      W pod inflight,prefill_tokens,updated_ns,lost
 *                                        (load view rows; "W pod -": no such pod)
 *                                      L key : pod,tiers,spec,t_ns,expires ...
 *                                      S weights cands keys :
 *                                        pod,blocks,spec,score,gpu,cpu,disk,other,spec_run,
 *                                        hit,hybrid ... (gpu..spec_run: the per-tier runs;
 *                                        hit: the hybrid hit, pods 6..11 having groups)
 *                                    then END; keeps the writer until stdin closes, then
 *                                    removes the index.
 *   kvidx-gohelper churn NAME SEED STALL_MS
 *                                    tiny index: ALWAYS keys on pod 0, CHURN keys stored,
 *                                    removed, predicted, cleared on pods 1..7 with contents
 *                                    derived from (key, pod) (see the Go torture test); ticks
 *                                    every millisecond, drains the route rings; READY, then
 *                                    runs until stdin closes, prints "STATS expelled=N
 *                                    dead=N reclaimed=N limbo=N route_commits=N route_bad=N
 *                                    ops=N".
 *   kvidx-gohelper bench NAME KEYS PROMPTS
 *                                    KEYS keys in chains of 2048, each chain held by one of
 *                                    64 pods; times kvidx_score() on PROMPTS prompts of 512
 *                                    keys (full hits), prints "C median mean" (ns per key),
 *                                    READY, and keeps the index until stdin closes (the Go
 *                                    benchmark scores the same index meanwhile).
 *   kvidx-gohelper drain NAME [MODEL]
 *                                    writer with pods p0..p7; with MODEL, the prompt of tokens
 *                                    1..100 (cbor-fnv, seed "", 16-token blocks: 6 keys) is
 *                                    held: p1 on cpu (blocks 0-5) and gpu (0-3, 5), p2 on gpu
 *                                    (0-1) then predicted (2-4), p5 predicted (0-2); READY;
 *                                    prints each accepted route ("R corr pod prefill matched
 *                                    spec prompt nkeys keys...") and outcome ("O corr pod cached
 *                                    prompt") as it drains, and "BAD n" when route_bad grows,
 *                                    until stdin closes.
 *
 *   kvidx-gohelper bell NAME         as drain, but ticks and sleeps on the doorbell (poll on
 *                                    kvidx_writer_doorbell()'s eventfd, 1 s timeout) between
 *                                    rounds: "WOKE" when the eventfd woke it, "REBUILT n" when
 *                                    stat registry_rebuilds becomes n (a replaced registry).
 *
 * Numbers are decimal, keys 0x-hex; lists are comma-separated, "-" for none.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "inspect.h"
#include "kvidx_writer.h"
#include "rng.h"
#include "telemetry.h"

#define MS 1000000ull

static void die(const char *what, int err)
{
	fprintf(stderr, "kvidx-gohelper: %s: %s\n", what, kvidx_strerror(err));
	exit(1);
}

/* Whether stdin has closed (no wait). */
static bool stdin_closed(int ms)
{
	struct pollfd p = { .fd = 0, .events = POLLIN };
	char buf[64];

	if (poll(&p, 1, ms) <= 0)
		return false;
	return read(0, buf, sizeof(buf)) <= 0;
}

static void wait_stdin(void)
{
	while (!stdin_closed(1000))
		;
}

static struct kvidx *writer(const char *name, const struct kvidx_geometry *geo, uint32_t stall)
{
	struct kvidx_writer_opts o = { .name = name, .stall_ms = stall };

	if (geo)
		o.geo = *geo;
	struct kvidx *w = kvidx_writer_open(&o);
	if (!w)
		die("writer_open", -errno);
	return w;
}

/* ---- build ----------------------------------------------------------------------------- */

#define NCHAINS 48
#define CHAIN 40
#define NPODS 12

static uint64_t rng, grng; /* grng: the KV-cache group draws, apart from the others' */
static uint64_t chains[NCHAINS][CHAIN];
static uint64_t never[64];

static unsigned rnd(unsigned n)
{
	return (unsigned)(tc_rng_next(&rng) % n);
}

static unsigned grnd(unsigned n)
{
	return (unsigned)(tc_rng_next(&grng) % n);
}

static void print_list_keys(const uint64_t *k, size_t n)
{
	if (!n)
		printf("-");
	for (size_t i = 0; i < n; i++)
		printf("%s0x%" PRIx64, i ? "," : "", k[i]);
}

static void print_lookup(struct kvidx_reader *r, uint64_t key)
{
	struct kvidx_rec rec[KV_MAX_PPK];
	int n = kvidx_lookup(r, key, rec, KV_MAX_PPK);

	if (n < 0)
		die("lookup", n);
	printf("L 0x%" PRIx64 " :", key);
	for (int i = 0; i < n; i++)
		printf(" %u,%u,%d,%" PRIu64 ",%" PRIu64, rec[i].pod, rec[i].tiers, rec[i].speculative,
		       rec[i].t_ns, rec[i].expires_ns);
	printf("\n");
}

static const struct kvidx_weights wsets[2] = {
	{ { 1.0, 0.8, 0.5, 0.0 }, 1.0 },     /* the defaults, passed as NULL */
	{ { 1.0, 0.25, 0.5, 0.75 }, 0.375 },
};

static void print_score(struct kvidx_reader *r, const uint64_t *keys, size_t n, const int *cand,
			int ncand, int wi)
{
	struct kvidx_score s[64];
	int rows = kvidx_score(r, keys, n, ncand < 0 ? NULL : cand, ncand < 0 ? 0 : (size_t)ncand,
			       wi ? &wsets[wi] : NULL, s, 64);

	if (rows < 0)
		die("score", rows);
	printf("S %d ", wi);
	if (ncand < 0)
		printf("*");
	else if (ncand == 0)
		printf("-");
	for (int i = 0; i < ncand; i++)
		printf("%s%d", i ? "," : "", cand[i]);
	printf(" ");
	print_list_keys(keys, n);
	printf(" :");
	for (int i = 0; i < rows; i++)
		printf(" %d,%u,%u,%.17g,%u,%u,%u,%u,%u,%u,%d", s[i].pod, s[i].blocks, s[i].spec_blocks,
		       s[i].score, s[i].run[0], s[i].run[1], s[i].run[2], s[i].run[3], s[i].spec_run,
		       s[i].hit, !!(s[i].flags & KVIDX_SCORE_HYBRID));
	printf("\n");
}

/*
 * Per-pod counters as kvidx-ingestd writes them: a distinct value in every word of every pod
 * (named counters and rank areas alike), and flags making some ranks in use, connected or
 * replaying. Ranks not in use keep non-zero words, which a reader must ignore.
 */
static void set_counters(struct kvidx *w)
{
	for (int p = 0; p < 16; p++) {
		uint64_t *ctr = kv_writer_pod_ctrs(w, p);
		if (!ctr)
			die("pod_ctrs", -EINVAL);
		for (unsigned i = 0; i < KV_POD_COUNTERS; i++)
			st_relaxed(&ctr[i], tc_rng_next(&rng) >> rnd(64));
		for (unsigned rk = 0; rk < KV_POD_RANKS; rk++) {
			uint64_t fl = rnd(3) ? 0 : KV_RANK_IN_USE | ((uint64_t)rnd(8) << 1);
			st_relaxed(&ctr[KV_PC_RANK(rk, KV_RC_flags)], fl);
		}
	}
}

/* What the C side reads of the pod table: the named counters by name, the ranks in use. */
static void print_counters(struct kvidx_reader *r)
{
	static const char *const names[] = {
#define CTR_NAME(n) #n,
		KV_POD_CTRS(CTR_NAME)
#undef CTR_NAME
	};
	const struct kv_view *v = kv_reader_view(r);

	for (uint32_t p = 0; p < v->max_pods; p++) {
		const uint64_t *ctr = v->pods[p].pd_ctr;
		if (KV_POD_STATE(ld_acquire(&v->pods[p].pd_word)) != KV_POD_ACTIVE)
			continue;
		printf("C %u", p);
		for (unsigned i = 0; i < KV_PC_COUNT; i++)
			printf(" %s=%" PRIu64, names[i], ld_relaxed(&ctr[i]));
		printf("\n");
		for (unsigned rk = 0; rk < KV_POD_RANKS; rk++) {
			if (!(ld_relaxed(&ctr[KV_PC_RANK(rk, KV_RC_flags)]) & KV_RANK_IN_USE))
				continue;
			printf("K %u %u", p, rk);
			for (unsigned wd = 0; wd < KV_RC_COUNT; wd++)
				printf("%s%" PRIu64, wd ? "," : " ", ld_relaxed(&ctr[KV_PC_RANK(rk, wd)]));
			printf("\n");
		}
	}
}

/* The index's NPODS pods, their names and models; KV-cache groups on pods 6.. */
static void build_pods(struct kvidx *w, int *pods)
{
	char pn[64], model[64];

	for (int p = 0; p < NPODS; p++) {
		snprintf(pn, sizeof(pn), "10.0.0.%d:8000", p + 1);
		snprintf(model, sizeof(model), "model-%d", p % 3);
		pods[p] = kvidx_pod_add(w, pn, model);
		if (pods[p] < 0)
			die("pod_add", pods[p]);
	}
	/* KV-cache groups on pods 6..11 (hybrid models): full attention, sliding windows of
	 * several sizes, Mamba, a full-attention group of two index blocks, two groups of one
	 * spec (a class). Pods 0..5 describe none. */
	static const struct kvidx_group gs[6] = {
		{ KVIDX_GROUP_FULL, 0, 0 },      { KVIDX_GROUP_SLIDING, 0, 33 },
		{ KVIDX_GROUP_SLIDING, 0, 100 }, { KVIDX_GROUP_MAMBA, 0, 0 },
		{ KVIDX_GROUP_FULL, 32, 0 },     { KVIDX_GROUP_MAMBA, 32, 0 },
	};
	for (int p = 6; p < NPODS; p++)
		for (unsigned g = 0; g < 4; g++) {
			unsigned k = g == 0 ? (p == 11 ? 4 : 0) : grnd(7);
			int rc = k < 6 ? kvidx_pod_set_group(w, pods[p], g, &gs[k]) : 0;
			if (rc < 0)
				die("set_group", rc);
		}
}

/* Stores, removals, predictions, a cleared pod, a reused one, paused ones. */
static void build_records(struct kvidx *w, const int *pods, uint64_t now)
{
	/* Stores: prefixes of chains on random pods and tiers, some at an offset (holes); on the
	 * pods with groups, in random groups. */
	for (int c = 0; c < NCHAINS; c++) {
		int holders = 1 + (int)rnd(6);
		for (int h = 0; h < holders; h++) {
			int pi = (int)rnd(NPODS), p = pods[pi];
			unsigned from = rnd(4) == 0 ? rnd(CHAIN) : 0, len = rnd(CHAIN + 1 - from);
			enum kvidx_tier t = (enum kvidx_tier)(1u << rnd(4));
			unsigned gm = pi >= 6 && grnd(4) ? 1 + grnd(15) : 0;
			int rc = kvidx_store_groups(w, p, chains[c] + from, len, t, gm,
						    now - rnd(1000) * MS);
			if (rc < 0 && rc != -KVIDX_EFULL)
				die("store", rc);
			if (gm && len > 3 && grnd(2)) /* more groups on a part of it */
				kvidx_store_groups(w, p, chains[c] + from + grnd(len - 3), 1 + grnd(3),
						   t, 1 + grnd(15), now);
		}
	}
	kvidx_writer_tick(w, kvidx_now_ns()); /* the copies the grouped stores retired come back */
	/* Removals, some of one tier only. */
	for (int i = 0; i < 200; i++) {
		int c = (int)rnd(NCHAINS), k = (int)rnd(CHAIN);
		kvidx_remove(w, pods[rnd(NPODS)], &chains[c][k], 1 + rnd(3) * (k + 3 < CHAIN),
			     rnd(2) ? 0 : 1u << rnd(4));
	}
	/* Group removals on the pods with groups, some of a tier too. */
	for (int i = 0; i < 150; i++) {
		int c = (int)grnd(NCHAINS), k = (int)grnd(CHAIN);
		kvidx_remove_groups(w, pods[6 + grnd(NPODS - 6)], &chains[c][k],
				    1 + grnd(3) * (k + 3 < CHAIN), grnd(2) ? 0 : 1u << grnd(4),
				    1u << grnd(4));
	}
	kvidx_writer_tick(w, kvidx_now_ns());
	/* Predictions: live (created now, 60 s) and expired (created 10 s ago, 1 s). */
	for (int i = 0; i < 60; i++) {
		int c = (int)rnd(NCHAINS), len = 1 + (int)rnd(CHAIN);
		bool live = rnd(3) != 0;
		int rc = kvidx_speculate(w, pods[rnd(NPODS)], chains[c], (size_t)len,
					 live ? now : now - 10000 * MS, live ? 60000 : 1000);
		if (rc < 0 && rc != -KVIDX_EFULL)
			die("speculate", rc);
	}
	/* A cleared pod that stores again, a removed pod whose index is reused, paused pods. */
	kvidx_clear_pod(w, pods[0]);
	kvidx_store(w, pods[0], chains[0], 10, KVIDX_TIER_CPU, now);
	kvidx_pod_remove(w, pods[1]);
	int reused = kvidx_pod_add(w, "10.0.0.99:8000", "model-new");
	if (reused < 0)
		die("pod_add", reused);
	kvidx_store(w, reused, chains[1], 5, KVIDX_TIER_GPU, now);
	kvidx_speculate(w, reused, chains[2], 8, now, 60000);
	kvidx_pod_set_spec_paused(w, pods[2], true);
	kvidx_pod_set_spec_paused(w, pods[3], true);
	kvidx_pod_set_spec_paused(w, pods[3], false);
	for (int i = 0; i < 3; i++)
		kvidx_writer_tick(w, kvidx_now_ns());
}

/* What a reader sees of the index: info, pods, counters, load rows, lookups, scores. */
static void print_index(struct kvidx_reader *r)
{
	char pn[64], model[64];
	struct kvidx_info in;
	int rc = kvidx_reader_info(r, &in);
	if (rc < 0)
		die("info", rc);
	printf("I %s %s %u %" PRIu64 "\n", kvidx_key_algo_name(in.algo), in.seed[0] ? in.seed : "-",
	       in.block_size, in.generation);
	for (int p = 0; p < 16; p++) {
		rc = kvidx_reader_pod(r, p, pn, model);
		if (rc == 0)
			printf("P %d %s|%s\n", p, pn, model);
		else
			printf("P %d -\n", p);
	}
	print_counters(r);
	for (int p = 0; p < 16; p++) {
		struct kvidx_load l;
		int lrc = kvidx_pod_load(r, p, &l);
		if (lrc == 0)
			printf("W %d %u,%" PRIu64 ",%" PRIu64 ",%" PRIu64 "\n", p, l.inflight,
			       l.prefill_tokens, l.updated_ns, l.lost);
		else
			printf("W %d -\n", p);
	}
	for (int c = 0; c < NCHAINS; c++)
		for (int i = 0; i < CHAIN; i++)
			print_lookup(r, chains[c][i]);
	for (int i = 0; i < 64; i++)
		print_lookup(r, never[i]);
	/* Prompts: chain prefixes, some with foreign keys inside or after; open or candidates. */
	for (int q = 0; q < 400; q++) {
		uint64_t keys[CHAIN + 8];
		int c = (int)rnd(NCHAINS), n = (int)rnd(CHAIN + 1), cand[8], ncand = -1;
		memcpy(keys, chains[c], (size_t)n * sizeof(uint64_t));
		if (n && rnd(4) == 0)
			keys[rnd((unsigned)n)] = never[rnd(64)];
		int extra = rnd(3) == 0 ? (int)rnd(8) : 0;
		for (int i = 0; i < extra; i++)
			keys[n + i] = rnd(2) ? never[rnd(64)] : chains[rnd(NCHAINS)][rnd(CHAIN)];
		if (rnd(2)) {
			ncand = (int)rnd(8);
			for (int i = 0; i < ncand; i++) {
				unsigned k = rnd(20);
				cand[i] = k < 16 ? (int)k : k == 16 ? -1 : k == 17 ? 4096 : i ? cand[0] : 3;
			}
		}
		print_score(r, keys, (size_t)(n + extra), cand, ncand, (int)rnd(2));
	}
}

static int do_build(const char *name, uint64_t seed)
{
	struct kvidx_geometry geo = { .capacity = 1500, .records = 3000, .pods_per_key = 5,
				      .max_pods = 16, .max_readers = 8 };
	struct kvidx *w = writer(name, &geo, 0);
	int pods[NPODS];
	uint64_t now = kvidx_now_ns();

	rng = seed;
	grng = seed * 0x9e3779b97f4a7c15ull + 1;
	for (int c = 0; c < NCHAINS; c++)
		for (int i = 0; i < CHAIN; i++)
			chains[c][i] = tc_rng_next(&rng);
	for (int i = 0; i < 64; i++)
		never[i] = tc_rng_next(&rng);
	build_pods(w, pods);
	build_records(w, pods, now);
	set_counters(w);
	/* Load rows: random on most pods, zeros on some, up to values past 32 bits. */
	for (int p = 0; p < 16; p++) {
		struct kvidx_load l = { .inflight = (uint32_t)(tc_rng_next(&rng) >> rnd(64)),
					.prefill_tokens = tc_rng_next(&rng) >> rnd(64),
					.updated_ns = now - rnd(1000) * MS,
					.lost = tc_rng_next(&rng) >> rnd(64) };
		if (rnd(4))
			kvidx_pod_set_load(w, p, &l); /* -KVIDX_ENOPOD on pods not in use */
	}

	struct kvidx_reader *r = kvidx_reader_open(name);
	if (!r)
		die("reader_open", -errno);
	print_index(r);
	printf("END\n");
	fflush(stdout);
	kvidx_reader_close(r);
	wait_stdin();
	kvidx_writer_close(w, true);
	return 0;
}

/* ---- churn -------------------------------------------------------------------------------- */

/* The oracle the Go torture test checks, FORMAT-independent: contents derive from (key, pod). */
static uint64_t smix(uint64_t x)
{
	x ^= x >> 31;
	x *= 0x7fb5d329728ea185ull;
	x ^= x >> 27;
	x *= 0x81dadef4bc2dd44dull;
	x ^= x >> 33;
	return x;
}

static unsigned tag_of(uint64_t key, unsigned pod)
{
	return (unsigned)(smix(key ^ (0x5bd1e995ull * (pod + 1))) & 1023);
}

static enum kvidx_tier tier_of(uint64_t key, unsigned pod)
{
	return (enum kvidx_tier)(1u << (smix(key + pod) % 3));
}

static uint64_t tagged(uint64_t now, uint64_t key, unsigned pod)
{
	return ((now - 1024) & ~1023ull) | tag_of(key, pod);
}

/* Key sets: ALWAYS = smix(1000 + i), CHURN = smix(2000 + i), NEVER = smix(3000 + i). */
#define NALWAYS 64
#define NCHURN 256

static int do_churn(const char *name, uint64_t seed, uint32_t stall_ms)
{
	struct kvidx_geometry geo = { .capacity = 512, .records = 1024, .pods_per_key = 4,
				      .max_pods = 8, .max_readers = 16, .ring_entries = 64 };
	struct kvidx *w = writer(name, &geo, stall_ms);
	uint64_t now = kvidx_now_ns(), always[NALWAYS];
	char pn[32];

	rng = seed;
	for (unsigned p = 0; p < 8; p++) {
		snprintf(pn, sizeof(pn), "p%u", p);
		if (kvidx_pod_add(w, pn, NULL) != (int)p)
			die("pod_add", -EINVAL);
	}
	for (int i = 0; i < NALWAYS; i++) {
		always[i] = smix(1000 + (uint64_t)i);
		int rc = kvidx_store(w, 0, &always[i], 1, tier_of(always[i], 0),
				     tagged(now, always[i], 0));
		if (rc != 1)
			die("store always", rc);
	}
	printf("READY\n");
	fflush(stdout);
	uint64_t last_tick = 0;
	for (uint64_t ops = 0;; ops++) {
		now = kvidx_now_ns();
		uint64_t key = smix(2000 + rnd(NCHURN));
		unsigned pod = 1 + rnd(7), op = rnd(100);
		if (op < 40) {
			kvidx_store(w, (int)pod, &key, 1, tier_of(key, pod), tagged(now, key, pod));
		} else if (op < 70) {
			kvidx_remove(w, (int)pod, &key, 1, 0);
		} else if (op < 90) {
			kvidx_speculate(w, (int)pod, &key, 1, tagged(now, key, pod), 5 + rnd(50));
		} else if (op < 92) {
			kvidx_clear_pod(w, (int)pod);
		} else if (op < 93 && pod >= 4) {
			kvidx_pod_remove(w, (int)pod);
			snprintf(pn, sizeof(pn), "p%u", pod);
			if (kvidx_pod_add(w, pn, NULL) != (int)pod)
				die("pod re-add", -EINVAL);
		} else if (op < 95) {
			kvidx_pod_set_spec_paused(w, (int)pod, rnd(2));
		} else {
			kvidx_expire(w, now, 64);
		}
		if (now - last_tick >= MS) {
			/* A fresh clock: an operation above may have run a grace-period check with a
			 * later time than now (kv_rcu_reclaim() on a full arena), and the stall
			 * check must never see time go backwards. */
			kvidx_writer_tick(w, kvidx_now_ns());
			kvidx_drain(w, 256, &(struct kvidx_drain_ops){ 0 });
			last_tick = now;
			if (stdin_closed(0))
				break;
		}
		if (ops % 64 == 0)
			usleep(20); /* ~ a few 100k ops/s at most: limbo stays bounded */
	}
	const struct kvidx_stats *st = kv_writer_stats(w);
	/* A last round of ticks so that dead readers are reaped before the report. */
	for (int i = 0; i < 3; i++) {
		usleep(110000);
		kvidx_writer_tick(w, kvidx_now_ns());
	}
	printf("STATS expelled=%" PRIu64 " dead=%" PRIu64 " reclaimed=%" PRIu64 " limbo=%" PRIu64
	       " route_commits=%" PRIu64 " route_bad=%" PRIu64 " ops=%" PRIu64 "\n",
	       st->readers_expelled, st->readers_dead, st->reclaimed, st->limbo, st->route_commits,
	       st->route_bad, st->stores + st->removes + st->speculations);
	fflush(stdout);
	kvidx_writer_close(w, true);
	return 0;
}

/* ---- drain -------------------------------------------------------------------------------- */

static void on_route(void *arg, const struct kvidx_route *rt, uint64_t commit_ns)
{
	printf("R %" PRIu64 " %d %d %u %u %u %zu ", rt->corr_id, rt->pod, rt->prefill_pod,
	       rt->matched_blocks, rt->matched_spec, rt->prompt_tokens, rt->nkeys);
	print_list_keys(rt->keys, rt->nkeys);
	uint64_t now = kvidx_now_ns();
	/* The commit's stamp must be CLOCK_MONOTONIC: within the last minute. */
	printf(" %s\n", commit_ns <= now && now - commit_ns < 60000 * MS ? "t-ok" : "t-bad");
}

static void on_outcome(void *arg, const struct kvidx_outcome *o)
{
	uint64_t now = kvidx_now_ns();
	printf("O %" PRIu64 " %d %u %u %s\n", o->corr_id, o->pod, o->cached_tokens,
	       o->prompt_tokens, o->t_ns <= now && now - o->t_ns < 60000 * MS ? "t-ok" : "t-bad");
}

/* The prompt do_drain() holds for model: tokens 1..100, 6 full blocks. */
static void hold_prompt(struct kvidx *w, const char *model)
{
	uint32_t toks[100];
	uint64_t k[6], now = kvidx_now_ns();

	for (int i = 0; i < 100; i++)
		toks[i] = (uint32_t)i + 1;
	if (kvidx_key_chain(KVIDX_KEY_CBOR_FNV, kvidx_key_root(KVIDX_KEY_CBOR_FNV, "", model), toks,
			    100, 16, k, 6) != 6)
		die("key_chain", -EINVAL);
	if (kvidx_store(w, 1, k, 6, KVIDX_TIER_CPU, now) != 6 ||
	    kvidx_store(w, 1, k, 4, KVIDX_TIER_GPU, now) != 4 ||
	    kvidx_store(w, 1, k + 5, 1, KVIDX_TIER_GPU, now) != 1 ||
	    kvidx_store(w, 2, k, 2, KVIDX_TIER_GPU, now) != 2 ||
	    kvidx_speculate(w, 2, k + 2, 3, now, 60000) != 3 ||
	    kvidx_speculate(w, 5, k, 3, now, 60000) != 3)
		die("hold prompt", -EINVAL);
}

static int do_drain(const char *name, const char *model)
{
	struct kvidx_geometry geo = { .capacity = 1000, .max_pods = 8, .max_readers = 4,
				      .ring_entries = 64 };
	struct kvidx *w = writer(name, &geo, 0);
	struct kvidx_drain_ops ops = { on_route, on_outcome, NULL };
	char pn[32];
	uint64_t bad = 0;

	for (int p = 0; p < 8; p++) {
		snprintf(pn, sizeof(pn), "p%d", p);
		kvidx_pod_add(w, pn, NULL);
	}
	if (model)
		hold_prompt(w, model);
	printf("READY\n");
	fflush(stdout);
	while (!stdin_closed(1)) {
		kvidx_drain(w, 1024, &ops);
		uint64_t b = kv_writer_stats(w)->route_bad;
		if (b != bad) {
			printf("BAD %" PRIu64 "\n", b - bad);
			bad = b;
		}
		fflush(stdout);
	}
	kvidx_writer_close(w, true);
	return 0;
}

static int do_bell(const char *name)
{
	struct kvidx_geometry geo = { .capacity = 1000, .max_pods = 8, .max_readers = 4,
				      .ring_entries = 64 };
	struct kvidx *w = writer(name, &geo, 0);
	struct kvidx_drain_ops ops = { on_route, on_outcome, NULL };
	uint64_t rebuilt = 0;
	char pn[32];

	for (int p = 0; p < 8; p++) {
		snprintf(pn, sizeof(pn), "p%d", p);
		kvidx_pod_add(w, pn, NULL);
	}
	int efd = kvidx_writer_doorbell(w);
	if (efd < 0)
		die("writer_doorbell", efd);
	printf("READY\n");
	fflush(stdout);
	while (!stdin_closed(0)) {
		kvidx_writer_tick(w, kvidx_now_ns());
		uint64_t rb = kv_writer_stats(w)->registry_rebuilds;
		if (rb != rebuilt) {
			printf("REBUILT %" PRIu64 "\n", rb);
			rebuilt = rb;
		}
		fflush(stdout);
		if (!kvidx_writer_idle(w, true)) {
			struct pollfd p = { .fd = efd, .events = POLLIN };
			if (poll(&p, 1, 1000) > 0)
				printf("WOKE\n");
		}
		kvidx_writer_idle(w, false);
		kvidx_drain(w, 1024, &ops);
		fflush(stdout);
	}
	kvidx_writer_close(w, true);
	return 0;
}

/* ---- bench -------------------------------------------------------------------------------- */

#define BCHAIN 2048
#define BPROMPT 512

static uint64_t bkey(uint64_t chain, uint64_t i)
{
	return smix(0x9000000000ull + chain * BCHAIN + i);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* keys in chains of BCHAIN, each held whole by pod chain % 64; prompts of BPROMPT keys from
 * a random chain and offset (full hits). Prints "C median_ns_per_key mean_ns_per_key". */
static int do_bench(const char *name, uint64_t nkeys, unsigned nprompts)
{
	uint64_t nchains = nkeys / BCHAIN;
	struct kvidx_geometry geo = { .capacity = nchains * BCHAIN, .records = 2 * nchains * BCHAIN,
				      .max_pods = 64, .max_readers = 8 };
	struct kvidx *w = writer(name, &geo, 0);
	char pn[32];
	uint64_t keys[BCHAIN], *t = malloc(nprompts * sizeof(*t));

	for (int p = 0; p < 64; p++) {
		snprintf(pn, sizeof(pn), "10.1.0.%d:8000", p);
		kvidx_pod_add(w, pn, NULL);
	}
	for (uint64_t c = 0; c < nchains; c++) {
		for (uint64_t i = 0; i < BCHAIN; i++)
			keys[i] = bkey(c, i);
		if (kvidx_store(w, (int)(c % 64), keys, BCHAIN, KVIDX_TIER_GPU, kvidx_now_ns()) != BCHAIN)
			die("bench store", -KVIDX_EFULL);
		kvidx_writer_tick(w, kvidx_now_ns());
	}
	struct kvidx_reader *r = kvidx_reader_open(name);
	struct kvidx_score s[4];
	if (!r)
		die("reader_open", -errno);
	rng = 99;
	double sum = 0;
	for (unsigned q = 0; q < nprompts; q++) {
		uint64_t c = tc_rng_next(&rng) % nchains, off = tc_rng_next(&rng) % (BCHAIN - BPROMPT);
		for (int i = 0; i < BPROMPT; i++)
			keys[i] = bkey(c, off + (uint64_t)i);
		uint64_t t0 = kvidx_now_ns();
		int n = kvidx_score(r, keys, BPROMPT, NULL, 0, NULL, s, 4);
		t[q] = kvidx_now_ns() - t0;
		if (n != 1 || s[0].blocks != BPROMPT)
			die("bench score", -EINVAL);
		sum += (double)t[q];
	}
	qsort(t, nprompts, sizeof(*t), cmp_u64);
	printf("C %.2f %.2f\n", (double)t[nprompts / 2] / BPROMPT, sum / nprompts / BPROMPT);
	printf("READY\n");
	fflush(stdout);
	kvidx_reader_close(r);
	free(t);
	wait_stdin();
	kvidx_writer_close(w, true);
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOFBF, 1 << 16);
	if (argc == 4 && !strcmp(argv[1], "build"))
		return do_build(argv[2], strtoull(argv[3], NULL, 0));
	if (argc == 5 && !strcmp(argv[1], "churn"))
		return do_churn(argv[2], strtoull(argv[3], NULL, 0),
				(uint32_t)strtoul(argv[4], NULL, 0));
	if (argc == 5 && !strcmp(argv[1], "bench"))
		return do_bench(argv[2], strtoull(argv[3], NULL, 0), (unsigned)strtoul(argv[4], NULL, 0));
	if ((argc == 3 || argc == 4) && !strcmp(argv[1], "drain"))
		return do_drain(argv[2], argc == 4 ? argv[3] : NULL);
	if (argc == 3 && !strcmp(argv[1], "bell"))
		return do_bell(argv[2]);
	fprintf(stderr, "usage: kvidx-gohelper build NAME SEED | churn NAME SEED STALL_MS | "
			"bench NAME KEYS PROMPTS | drain NAME [MODEL] | bell NAME\n");
	return 2;
}
