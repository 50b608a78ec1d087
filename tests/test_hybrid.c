/*
 * test_hybrid.c — Criterion suite "hybrid": hybrid models (full-attention, sliding-window and
 * Mamba KV-cache groups) scored as vLLM hits them. Every expected hit comes from
 * tests/hybrid_ref.py, an independent reference of vLLM's rule in Python (tokens, each
 * group's own blocks, spec groups, the coordinator's fixed point), never from lib/hybrid.c:
 *
 *   - rule: random pods (groups of every kind, block sizes of 1-4 index blocks, windows,
 *     groups sharing a spec) with random per-key group masks, speculative and group-less
 *     records, stored with the writer API; kvidx_score's hit against the reference;
 *   - streams: a vLLM-shaped event stream through kvidx-ingestd's apply step (no sockets):
 *     full attention, a sliding window whose blocks are freed outside the window and evicted
 *     inside it, a Mamba group of twice the block size (its own hashes, only the state block
 *     listed, the others masked), events of a step in any order; the simulator's own record
 *     of what each group holds is the reference's input;
 *   - the two llm-d edge cases: engine blocks smaller than the index block (evicting the first
 *     one drops the key) and two full-attention groups of different block sizes (a block one
 *     group lost is not held);
 *   - a one-group model scores exactly as before (hit == blocks, nothing hybrid).
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "apply.h"
#include "emap.h"
#include "inspect.h"
#include "kvidx_writer.h"
#include "telemetry.h"
#include "util_index.h"
#include "util_ingestd.h"
#include "wire.h"

#define MODEL "m"
#define BS 16
#define MAXN 48

static char name[64];
static struct kvidx *w;
static struct kvidx_reader *rd;
static uint64_t rs = 0x9e3779b97f4a7c15ull;

static uint64_t rnd64(void)
{
	rs ^= rs << 13;
	rs ^= rs >> 7;
	rs ^= rs << 17;
	return rs;
}

static unsigned rnd(unsigned n)
{
	return (unsigned)(rnd64() % n);
}

static void setup(void)
{
	struct kvidx_writer_opts o = { .geo = { .capacity = 1 << 16, .max_pods = 8 },
				       .block_size = BS };

	tu_index_name(name, sizeof(name), "hybrid");
	w = tu_writer_open(name, &o);
	rd = kvidx_reader_open(name);
	cr_assert_not_null(rd);
}

static void teardown(void)
{
	kvidx_reader_close(rd);
	tu_index_remove(name, &w);
}

TestSuite(hybrid, .init = setup, .fini = teardown, .timeout = 180);

/* ---- the reference ------------------------------------------------------------------------- */

/* One case for hybrid_ref.py: the pod's groups and, per index block, the groups holding it. */
struct rcase {
	unsigned ng, gidx[KVIDX_MAX_GROUPS];
	struct kvidx_group g[KVIDX_MAX_GROUPS];
	unsigned n;
	unsigned mask[MAXN];
	uint32_t got, blocks; /* kvidx's hit and run */
};

static const char *kind_name(enum kvidx_group_kind k)
{
	return k == KVIDX_GROUP_FULL ? "full" : k == KVIDX_GROUP_SLIDING ? "sliding" : "mamba";
}

/* Runs hybrid_ref.py on cases[0..n) and checks each kvidx hit against its answer. */
static void check_with_reference(const struct rcase *cs, size_t n, const char *what)
{
	char script[512], in[] = "/tmp/kvidx-hybrid-XXXXXX", cmd[1024];
	const char *slash = strrchr(__FILE__, '/');
	int fd = mkstemp(in);
	FILE *f, *p;
	size_t bad = 0;

	snprintf(script, sizeof(script), "%.*shybrid_ref.py", slash ? (int)(slash - __FILE__ + 1) : 0,
		 __FILE__);
	cr_assert_eq(access(script, R_OK), 0, "%s not found (run from the source tree)", script);
	cr_assert_geq(fd, 0);
	f = fdopen(fd, "w");
	for (size_t c = 0; c < n; c++) {
		fprintf(f, "%d %u ", BS, cs[c].n);
		for (unsigned i = 0; i < cs[c].ng; i++)
			fprintf(f, "%s%u:%s:%u:%u", i ? "," : "", cs[c].gidx[i],
				kind_name(cs[c].g[i].kind),
				cs[c].g[i].block_size ? cs[c].g[i].block_size : BS,
				cs[c].g[i].sliding_window);
		fprintf(f, " ");
		for (unsigned i = 0; i < cs[c].n; i++)
			fprintf(f, "%s%x", i ? "," : "", cs[c].mask[i]);
		fprintf(f, "%s\n", cs[c].n ? "" : "-");
	}
	fclose(f);
	snprintf(cmd, sizeof(cmd), "/usr/bin/python3 '%s' < '%s'", script, in);
	p = popen(cmd, "r");
	cr_assert_not_null(p, "popen: %s", strerror(errno));
	for (size_t c = 0; c < n; c++) {
		unsigned want;
		cr_assert_eq(fscanf(p, "%u", &want), 1, "%s: the reference printed too little", what);
		if (want != cs[c].got && bad++ < 5)
			cr_expect_eq(cs[c].got, want, "%s case %zu: kvidx hit %u, vLLM's rule %u "
				     "(blocks %u, %u groups, first mask %x)", what, c, cs[c].got, want,
				     cs[c].blocks, cs[c].ng, cs[c].n ? cs[c].mask[0] : 0);
	}
	cr_assert_eq(WEXITSTATUS(pclose(p)), 0, "%s failed", cmd);
	unlink(in);
	cr_assert_eq(bad, 0, "%s: %zu of %zu hits differ from vLLM's rule", what, bad, n);
}

/* kvidx's row for pod over keys (cand: that pod only). */
static struct kvidx_score score_of(int pod, const uint64_t *keys, size_t n)
{
	struct kvidx_score s;
	int rc = kvidx_score(rd, keys, n, &pod, 1, NULL, &s, 1);

	cr_assert_eq(rc, 1, "score: %d", rc);
	cr_assert(s.flags & KVIDX_SCORE_HIT);
	return s;
}

/* ---- the rule, from random records ------------------------------------------------------------ */

static void random_groups(struct rcase *c)
{
	c->ng = 1 + rnd(5);
	for (unsigned i = 0; i < c->ng; i++) {
		struct kvidx_group *g = &c->g[i];
		static const unsigned ms[] = { 1, 1, 1, 2, 4 };
		c->gidx[i] = i;
		if (i && rnd(4) == 0) { /* a group of an earlier group's spec */
			*g = c->g[rnd(i)];
			continue;
		}
		g->kind = i == 0 ? (rnd(8) ? KVIDX_GROUP_FULL : KVIDX_GROUP_SLIDING) :
				   (enum kvidx_group_kind)(1 + rnd(3));
		g->block_size = BS * ms[rnd(5)];
		g->sliding_window = g->kind == KVIDX_GROUP_SLIDING ? 1 + rnd(6 * BS) : 0;
	}
}

Test(hybrid, rule_matches_vllm_on_random_records)
{
	static struct rcase cs[400];
	uint64_t keys[MAXN];
	int cuts = 0;

	for (size_t c = 0; c < sizeof(cs) / sizeof(cs[0]); c++) {
		struct rcase *k = &cs[c];
		char pn[32];
		snprintf(pn, sizeof(pn), "10.0.1.%zu:8000", c);
		int pod = kvidx_pod_add(w, pn, MODEL);
		cr_assert_geq(pod, 0);
		random_groups(k);
		for (unsigned i = 0; i < k->ng; i++)
			cr_assert_eq(kvidx_pod_set_group(w, pod, k->gidx[i], &k->g[i]), 0);
		k->n = rnd(MAXN + 1);
		unsigned all = (1u << k->ng) - 1;
		for (unsigned i = 0; i < k->n; i++) {
			unsigned r = rnd(20);
			keys[i] = rnd64() | 1;
			/* Mostly whole group blocks the way streams store them: a run of held keys
			 * with some groups missing here and there. */
			if (r == 0) {
				k->mask[i] = 0;
			} else if (r == 1) {
				cr_assert_eq(kvidx_speculate(w, pod, &keys[i], 1, kvidx_now_ns(), 60000), 1);
				k->mask[i] = all;
			} else if (r == 2) {
				cr_assert_geq(kvidx_store(w, pod, &keys[i], 1, KVIDX_TIER_GPU, kvidx_now_ns()), 0);
				k->mask[i] = all;
			} else {
				unsigned m = 0;
				for (unsigned g = 0; g < k->ng; g++)
					if (rnd(6))
						m |= 1u << g;
				k->mask[i] = m;
				if (m)
					cr_assert_geq(kvidx_store_groups(w, pod, &keys[i], 1, KVIDX_TIER_GPU,
									 m, kvidx_now_ns()), 0);
			}
		}
		struct kvidx_score s = score_of(pod, keys, k->n);
		k->got = s.hit;
		k->blocks = s.blocks;
		cuts += s.hit < s.blocks;
		cr_assert_eq(kvidx_pod_remove(w, pod), 0);
		kvidx_writer_tick(w, kvidx_now_ns());
	}
	cr_assert_gt(cuts, 20, "too few cases where a group cut the run: %d", cuts);
	check_with_reference(cs, sizeof(cs) / sizeof(cs[0]), "random records");
}

Test(hybrid, one_group_scores_as_before)
{
	uint64_t keys[8];
	int pod = kvidx_pod_add(w, "10.0.2.1:8000", MODEL), old = kvidx_pod_add(w, "10.0.2.2:8000", MODEL);
	struct kvidx_group fa = { KVIDX_GROUP_FULL, BS, 0 };

	for (int i = 0; i < 8; i++)
		keys[i] = rnd64();
	cr_assert_eq(kvidx_pod_set_group(w, pod, 0, &fa), 0);
	cr_assert_eq(kvidx_store_groups(w, pod, keys, 6, KVIDX_TIER_GPU, 1, kvidx_now_ns()), 6);
	cr_assert_eq(kvidx_store(w, old, keys, 6, KVIDX_TIER_GPU, kvidx_now_ns()), 6);
	struct kvidx_score a = score_of(pod, keys, 8), b = score_of(old, keys, 8);
	cr_assert_eq(a.blocks, 6);
	cr_assert_eq(a.hit, 6);
	cr_assert_eq(a.flags, KVIDX_SCORE_HIT, "one full-attention group is not hybrid");
	cr_assert_eq(b.blocks, 6);
	cr_assert_eq(b.hit, 6);
	cr_assert_eq(b.flags, KVIDX_SCORE_HIT);
	cr_assert_eq(a.score, b.score);
	/* A 1.0 caller's row (48 bytes) is filled as before, nothing written past it. */
	unsigned char row[KVIDX_SCORE_SIZE_1_0 + 8];
	memset(row, 0xee, sizeof(row));
	cr_assert_eq(kvidx_score_sized(rd, keys, 8, &old, 1, NULL, row, 1, KVIDX_SCORE_SIZE_1_0), 1);
	cr_assert_eq(row[KVIDX_SCORE_SIZE_1_0], 0xee);
	cr_assert_eq(((struct kvidx_score *)row)->blocks, 6);
}

/* ---- streams, the way vLLM emits them --------------------------------------------------------- */

struct sim_blk {
	uint64_t h;
	unsigned copies;
};

/* One group's cached blocks, as the engine knows them (the reference's truth). */
struct sim_group {
	struct sim_blk b[2048];
	size_t n;
};

static struct sim_blk *sim_find(struct sim_group *g, uint64_t h)
{
	for (size_t i = 0; i < g->n; i++)
		if (g->b[i].h == h)
			return &g->b[i];
	return NULL;
}

static void sim_add(struct sim_group *g, uint64_t h)
{
	struct sim_blk *b = sim_find(g, h);

	if (b)
		b->copies++;
	else if (g->n < sizeof(g->b) / sizeof(g->b[0]))
		g->b[g->n++] = (struct sim_blk){ h, 1 };
}

static bool sim_has(struct sim_group *g, uint64_t h)
{
	struct sim_blk *b = sim_find(g, h);
	return b && b->copies;
}

struct stream {
	struct emap em;
	struct ing_apply ap;
	struct ing_target tg;
	struct ing_stream st;
	struct kvw_batch batch;
	struct kvw_enc enc;
	int pod;
};

static void stream_open(struct stream *s, const char *podname)
{
	memset(s, 0, sizeof(*s));
	s->pod = kvidx_pod_add(w, podname, MODEL);
	cr_assert_geq(s->pod, 0);
	cr_assert_eq(emap_init(&s->em, 1 << 15), 0);
	ing_apply_init(&s->ap, w, &s->em, KVIDX_KEY_CBOR_FNV, "", BS);
	ing_target_init(&s->tg, kv_tm_pod(w, s->pod));
	s->tg.pod = s->pod;
	s->tg.label = podname;
	cr_assert_eq(ing_stream_open(&s->ap, &s->st, &s->tg, 0), 0);
	kvw_batch_init(&s->batch);
	kvw_enc_init(&s->enc);
}

static void stream_close(struct stream *s)
{
	kvw_enc_free(&s->enc);
	kvw_batch_free(&s->batch);
	ing_target_free(&s->tg);
	ing_apply_free(&s->ap);
	emap_free(&s->em);
}

/* Encodes ev[0..n) as one batch, decodes and applies it. */
static void stream_apply(struct stream *s, const struct kvw_event *ev, size_t n)
{
	struct kvw_enc_opts o = { KVW_FORM_ARRAY, KVW_FORM_MAP, KVW_HASH_BIN };
	const void *buf;
	size_t len;
	char err[256];

	kvw_enc_begin(&s->enc, &o, 1.0, n, true, 0);
	for (size_t i = 0; i < n; i++)
		kvw_enc_event(&s->enc, &ev[i]);
	cr_assert_eq(kvw_enc_end(&s->enc, &buf, &len), 0);
	cr_assert_eq(kvw_decode_batch(buf, len, &s->batch, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(ing_apply_batch(&s->ap, &s->st, &s->batch, MODEL, kvidx_now_ns()), 0);
}

static void group_of(struct kvw_event *ev, unsigned g, const char *kind, uint32_t window)
{
	ev->has_group_idx = true;
	ev->group_idx = g;
	snprintf(ev->spec_kind, sizeof(ev->spec_kind), "%s", kind);
	ev->has_sliding_window = window > 0;
	ev->sliding_window = window;
}

/* Hashes: the full-attention and sliding-window groups share one hash space (equal block
 * sizes), the Mamba group of MM index blocks has its own. */
#define MM 2
static uint64_t h_fa(const uint64_t *keys, size_t i)
{
	return keys[i] ^ 0x5a5a5a5a5a5a5a5aull;
}
static uint64_t h_mb(const uint64_t *keys, size_t j)
{
	return keys[j * MM + MM - 1] ^ 0xa5a5a5a5a5a5a5a5ull;
}

/*
 * One request of n index blocks through the engine: each group caches from the first block
 * full attention does not hold (the recomputed part), as one scheduler step's batch:
 * full attention lists every block; the sliding window (W tokens) lists the last blocks of
 * the span only (the others masked, outside the window); Mamba lists its state block, the
 * span's last whole block of MM index blocks, all earlier ones masked from block 0.
 */
static void request(struct stream *s, struct sim_group *sg, const uint32_t *tok,
		    const uint64_t *keys, size_t n, uint32_t W)
{
	uint64_t hf[MAXN], hm[MAXN];
	struct kvw_event ev[3];
	size_t r = 0, nev = 0, nm = n / MM;

	while (r < n && sim_has(&sg[0], h_fa(keys, r)))
		r++;
	if (r == n)
		return;
	for (size_t i = r; i < n; i++)
		hf[i - r] = h_fa(keys, i);
	ev[nev] = tu_stored(hf, n - r, r > 0, r ? h_fa(keys, r - 1) : 0, tok + r * BS,
			    (n - r) * BS, BS);
	group_of(&ev[nev++], 0, "full_attention", 0);
	for (size_t i = r; i < n; i++)
		sim_add(&sg[0], h_fa(keys, i));
	/* The window's blocks: all of them when the step prefilled at once, else the last ones. */
	size_t keep = rnd(2) ? n - r : 1 + rnd((unsigned)(n - r));
	ev[nev] = tu_stored(hf + (n - r - keep), keep, r > 0, r ? h_fa(keys, r - 1) : 0,
			    tok + r * BS, (n - r) * BS, BS);
	group_of(&ev[nev++], 1, "sliding_window", W);
	for (size_t i = n - keep; i < n; i++)
		sim_add(&sg[1], h_fa(keys, i));
	if (nm) {
		hm[0] = h_mb(keys, nm - 1);
		ev[nev] = tu_stored(hm, 1, false, 0, tok, nm * MM * BS, MM * BS);
		group_of(&ev[nev++], 2, "mamba", 0);
		sim_add(&sg[2], hm[0]);
	}
	/* The scheduler merges the groups' events in one batch, in no fixed order. */
	for (size_t i = nev; i > 1; i--) {
		size_t j = rnd((unsigned)i);
		struct kvw_event t = ev[i - 1];
		ev[i - 1] = ev[j];
		ev[j] = t;
	}
	stream_apply(s, ev, nev);
}

/* Evicts one copy of k random cached blocks of group g (BlockRemoved of that group); the
 * sliding window's blocks of prompt keys[0..n) outside its window (freed) first. */
static void evict(struct stream *s, struct sim_group *sg, unsigned g, unsigned k,
		  const uint64_t *keys, size_t n, size_t window_blocks)
{
	static const char *const kinds[3] = { "full_attention", "sliding_window", "mamba" };
	uint64_t h[16];
	size_t nh = 0;

	for (unsigned t = 0; t < 4 * k && nh < k && sg[g].n; t++) {
		struct sim_blk *b = &sg[g].b[rnd((unsigned)sg[g].n)];
		if (g == 1 && n > window_blocks && rnd(2)) {
			uint64_t fh = h_fa(keys, rnd((unsigned)(n - window_blocks)));
			b = sim_find(&sg[1], fh) ? sim_find(&sg[1], fh) : b;
		}
		if (!b->copies)
			continue;
		bool dup = false;
		for (size_t i = 0; i < nh; i++)
			dup |= h[i] == b->h;
		if (dup)
			continue;
		b->copies--;
		h[nh++] = b->h;
	}
	if (!nh)
		return;
	struct kvw_event ev = tu_removed(h, nh, NULL);
	group_of(&ev, g, kinds[g], 0);
	ev.spec_kind[0] = '\0'; /* BlockRemoved carries group_idx only */
	stream_apply(s, &ev, 1);
}

/* The reference's view of prompt keys[0..n): which groups hold each index block. */
static void truth(struct sim_group *sg, const uint64_t *keys, size_t n, struct rcase *c)
{
	c->n = (unsigned)n;
	for (size_t i = 0; i < n; i++) {
		unsigned m = 0;
		if (sim_has(&sg[0], h_fa(keys, i)))
			m |= 1;
		if (sim_has(&sg[1], h_fa(keys, i)))
			m |= 2;
		if (i / MM < n / MM && sim_has(&sg[2], h_mb(keys, i / MM)))
			m |= 4;
		c->mask[i] = m;
	}
}

Test(hybrid, vllm_shaped_stream_scores_as_vllm_hits)
{
	static struct sim_group sg[3];
	static struct rcase cs[600];
	static uint32_t prefix[6][8 * BS], tok[MAXN * BS];
	static uint64_t keys[MAXN];
	struct stream s;
	const uint32_t W = 3 * BS + 5; /* ceil((W - 1) / 16) = 4 blocks */
	size_t nc = 0, cuts = 0, partial = 0, last_n = 0;
	uint32_t next_tok = 1000;

	stream_open(&s, "10.0.3.1:8000");
	for (int p = 0; p < 6; p++)
		for (int i = 0; i < 8 * BS; i++)
			prefix[p][i] = next_tok++;
	for (int step = 0; step < 300; step++) {
		size_t n, fresh;
		if (last_n && last_n + 2 <= MAXN && rnd(2) == 0) {
			n = last_n + 2; /* the next turn of the same conversation */
			fresh = last_n;
		} else {
			size_t pl = 2 + rnd(7); /* a shared prefix of pl blocks, then new ones */
			memcpy(tok, prefix[rnd(6)], pl * BS * sizeof(*tok));
			n = pl + rnd(10);
			fresh = pl;
		}
		for (size_t i = fresh * BS; i < n * BS; i++)
			tok[i] = next_tok++;
		cr_assert_eq(kvidx_key_chain(KVIDX_KEY_CBOR_FNV, kvidx_key_root(KVIDX_KEY_CBOR_FNV, "", MODEL),
					     tok, n * BS, BS, keys, MAXN), n);
		/* Score before the request as a router would, then run it. */
		if (nc < sizeof(cs) / sizeof(cs[0])) {
			struct kvidx_score r = score_of(s.pod, keys, n);
			struct rcase *c = &cs[nc++];
			c->ng = 3;
			for (unsigned g = 0; g < 3; g++)
				c->gidx[g] = g;
			c->g[0] = (struct kvidx_group){ KVIDX_GROUP_FULL, BS, 0 };
			c->g[1] = (struct kvidx_group){ KVIDX_GROUP_SLIDING, BS, W };
			c->g[2] = (struct kvidx_group){ KVIDX_GROUP_MAMBA, MM * BS, 0 };
			truth(sg, keys, n, c);
			c->got = r.hit;
			c->blocks = r.blocks;
			cuts += r.hit < r.blocks;
			partial += r.hit > 0 && r.hit < r.blocks;
			if (step > 2)
				cr_assert(r.flags & KVIDX_SCORE_HYBRID);
		}
		request(&s, sg, tok, keys, n, W);
		last_n = n;
		evict(&s, sg, 0, rnd(3), keys, n, 4);
		evict(&s, sg, 1, rnd(4), keys, n, 4);
		evict(&s, sg, 2, rnd(2), keys, n, 4);
	}
	cr_assert_eq(kv_tm_get(s.tg.ctr, KV_PC_unknown_parent), 0);
	cr_assert_eq(kv_tm_get(s.tg.ctr, KV_PC_skipped_shape), 0);
	cr_assert_eq(kv_tm_get(s.tg.ctr, KV_PC_skipped_group), 0);
	cr_assert_eq(kv_tm_get(s.tg.ctr, KV_PC_unknown_removed), 0);
	cr_assert_gt(cuts, 20, "too few steps where a group cut the run: %zu of %zu", cuts, nc);
	cr_assert_gt(partial, 10, "too few hits between 0 and the run: %zu", partial);
	check_with_reference(cs, nc, "vLLM-shaped stream");
	fprintf(stderr, "hybrid stream: %zu scores, %zu cut below the full-attention run (%zu not "
		"to 0)\n", nc, cuts, partial);
	stream_close(&s);
}

/* ---- llm-d's edge cases, as vLLM has them ------------------------------------------------------ */

/* Two full-attention groups of different block sizes (16 and 32 tokens: their own hashes): a
 * block the 32-token group lost is not held, however much the other group keeps. */
Test(hybrid, two_full_attention_groups_of_different_block_sizes)
{
	static uint32_t tok[4 * BS];
	uint64_t keys[4], h16[4], h32[2];
	struct kvw_event ev[2];
	struct stream s;

	for (int i = 0; i < 4 * BS; i++)
		tok[i] = 500 + (uint32_t)i;
	kvidx_key_chain(KVIDX_KEY_CBOR_FNV, kvidx_key_root(KVIDX_KEY_CBOR_FNV, "", MODEL), tok,
			4 * BS, BS, keys, 4);
	for (int i = 0; i < 4; i++)
		h16[i] = 0x1600 + (uint64_t)i;
	h32[0] = 0x3200;
	h32[1] = 0x3201;
	stream_open(&s, "10.0.4.1:8000");
	ev[0] = tu_stored(h16, 4, false, 0, tok, 4 * BS, BS);
	group_of(&ev[0], 0, "full_attention", 0);
	ev[1] = tu_stored(h32, 2, false, 0, tok, 4 * BS, 2 * BS);
	group_of(&ev[1], 1, "full_attention", 0);
	stream_apply(&s, ev, 2);
	struct kvidx_score r = score_of(s.pod, keys, 4);
	cr_assert_eq(r.blocks, 4);
	cr_assert_eq(r.hit, 4);
	/* The 32-token group evicts its second block (index blocks 2 and 3). */
	ev[0] = tu_removed(&h32[1], 1, NULL);
	ev[0].has_group_idx = true;
	ev[0].group_idx = 1;
	stream_apply(&s, ev, 1);
	r = score_of(s.pod, keys, 4);
	cr_assert_eq(r.blocks, 2, "kvidx kept blocks the 32-token group lost: %u", r.blocks);
	cr_assert_eq(r.hit, 2);
	/* The 16-token group evicts block 0: nothing is hit. */
	ev[0] = tu_removed(&h16[0], 1, NULL);
	ev[0].has_group_idx = true;
	ev[0].group_idx = 0;
	stream_apply(&s, ev, 1);
	r = score_of(s.pod, keys, 4);
	cr_assert_eq(r.blocks, 0);
	cr_assert_eq(r.hit, 0);
	stream_close(&s);
}
