/*
 * test_apply.c — Criterion suite "apply": kvidx-ingestd's apply step (tools/ingestd/apply.c)
 * against a bare writer, no sockets: every event shape vLLM 0.26+ sends, each alone and mixed
 * into one batch with valid events (the valid ones indexed, each skip counted under its
 * reason), reference counts and copies, data-parallel ranks, media, block-size ratios and keys
 * with extras. Batches go through the wire encoder and decoder, as on the wire.
 *
 * Expected keys are computed as a router would, with the public key API (kvidx_key_chain,
 * kvidx_key_chain_ex), never with the apply code.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "apply.h"
#include "emap.h"
#include "inspect.h"
#include "kvidx.h"
#include "telemetry.h"
#include "util_index.h"
#include "util_ingestd.h"
#include "wire.h"

#define MODEL "m"
#define BS 16

static char name[64];
static struct kvidx *w;
static struct kvidx_reader *rd;
static struct emap em;
static struct ing_apply ap;
static struct ing_target tg;
static struct ing_stream st[2];
static struct kvw_batch batch;
static struct kvw_enc enc;
static int pod;

static void setup(void)
{
	struct kvidx_writer_opts o = { .geo = { .capacity = 4096, .max_pods = 8 } };

	tu_index_name(name, sizeof(name), "apply");
	w = tu_writer_open(name, &o);
	rd = kvidx_reader_open(name);
	cr_assert_not_null(rd);
	pod = kvidx_pod_add(w, "10.0.0.1:8000", MODEL);
	cr_assert_geq(pod, 0);
	cr_assert_eq(emap_init(&em, 1 << 14), 0);
	ing_apply_init(&ap, w, &em, KVIDX_KEY_CBOR_FNV, "", BS);
	ing_target_init(&tg, kv_tm_pod(w, pod));
	tg.pod = pod;
	tg.label = "test";
	cr_assert_eq(ing_stream_open(&ap, &st[0], &tg, 0), 0);
	kvw_batch_init(&batch);
	kvw_enc_init(&enc);
}

static void teardown(void)
{
	kvw_enc_free(&enc);
	kvw_batch_free(&batch);
	ing_target_free(&tg);
	ing_apply_free(&ap);
	emap_free(&em);
	kvidx_reader_close(rd);
	tu_index_remove(name, &w);
}

TestSuite(apply, .init = setup, .fini = teardown, .timeout = 120);

/* ---- helpers --------------------------------------------------------------------------------- */

static uint64_t ctr(enum kv_pod_ctr c)
{
	return kv_tm_view_pod(kv_reader_view(rd), pod, c);
}

static uint64_t rank_ctr(unsigned rank, enum kv_rank_ctr c)
{
	return kv_tm_view_rank(kv_reader_view(rd), pod, rank, c);
}

/* Extra entries: bad events and unknown types appended after the events, as raw objects. */
enum { X_NONE = 0, X_UNKNOWN = 1, X_MALFORMED = 2 };

/* Encodes ev[0..n) (plus an unknown-type or malformed event when extra says so) as one
 * map-form batch, decodes it and applies it to rank r. */
static void apply_ex(unsigned r, const struct kvw_event *ev, size_t n, int extra)
{
	struct kvw_enc_opts o = { KVW_FORM_ARRAY, KVW_FORM_MAP, KVW_HASH_BIN };
	const void *buf;
	size_t len;
	char err[256];

	kvw_enc_begin(&enc, &o, 1.0, n + (extra ? 1 : 0), true, r);
	for (size_t i = 0; i < n; i++)
		kvw_enc_event(&enc, &ev[i]);
	if (extra == X_UNKNOWN)
		kvw_enc_unknown(&enc, "BlockInactive");
	else if (extra == X_MALFORMED)
		kvw_enc_raw(&enc, "\x92\xab" "BlockStored" "\xa1x", 15); /* block_hashes a str */
	cr_assert_eq(kvw_enc_end(&enc, &buf, &len), 0);
	cr_assert_eq(kvw_decode_batch(buf, len, &batch, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(ing_apply_batch(&ap, &st[r], &batch, MODEL, kvidx_now_ns()), 0);
}

static void apply(const struct kvw_event *ev, size_t n)
{
	apply_ex(0, ev, n, X_NONE);
}

static unsigned tiers(uint64_t key)
{
	struct kvidx_rec rec;
	int s = tu_rec_state(rd, key, pod, &rec);

	cr_assert_geq(s, 0);
	return s == TU_ABSENT ? 0 : rec.tiers;
}

/* Router keys of tokens from the model's root (or parent). */
static size_t keys_of(uint64_t parent, const uint32_t *t, size_t n, uint64_t *out)
{
	if (!parent)
		parent = kvidx_key_root(KVIDX_KEY_CBOR_FNV, "", MODEL);
	return kvidx_key_chain(KVIDX_KEY_CBOR_FNV, parent, t, n, BS, out, 64);
}

/* ---- every shape, alone and mixed ------------------------------------------------------------ */

/* One shape that is not indexed, the counter it must raise and by how much. */
struct shape {
	const char *what;
	enum kv_pod_ctr why;
	uint64_t n;
	struct kvw_event ev;
	int extra;
};

static const uint64_t sh_h[] = { 9001, 9002 }, sh_known[] = { 100 };
static const struct kvw_xitem sh_embeds[] = { { .kind = KVW_X_BYTES, .str = "\1\2\3\4",
						.len = 4 } };
static const struct kvw_extra sh_extra[] = { { .set = true, .items = sh_embeds, .nitems = 1 } };

static size_t shapes(struct shape *s)
{
	const uint32_t *t = tu_toks(70000, 4 * BS);
	size_t n = 0;

	/* A sliding-window group: token_ids span masked blocks too (more than hashes x size). */
	s[n] = (struct shape){ "sliding window", KV_PC_skipped_group, 1,
			       tu_stored(sh_h, 1, false, 0, t, 3 * BS, BS), X_NONE };
	snprintf(s[n].ev.spec_kind, sizeof(s[n].ev.spec_kind), "sliding_window");
	s[n].ev.has_group_idx = true;
	s[n].ev.group_idx = 1;
	n++;
	s[n] = (struct shape){ "mamba", KV_PC_skipped_group, 1,
			       tu_stored(sh_h, 1, false, 0, t, BS, BS), X_NONE };
	snprintf(s[n].ev.spec_kind, sizeof(s[n].ev.spec_kind), "mamba");
	n++;
	s[n] = (struct shape){ "token count", KV_PC_skipped_shape, 1,
			       tu_stored(sh_h, 2, false, 0, t, BS + 3, BS), X_NONE };
	n++;
	s[n] = (struct shape){ "ratio", KV_PC_skipped_shape, 1,
			       tu_stored(sh_h, 1, false, 0, t, 24, 24), X_NONE };
	n++;
	s[n] = (struct shape){ "remote", KV_PC_skipped_remote, 1,
			       tu_stored(sh_h, 1, false, 0, t, BS, BS), X_NONE };
	snprintf(s[n].ev.locality, sizeof(s[n].ev.locality), "REMOTE");
	n++;
	s[n] = (struct shape){ "unknown parent", KV_PC_unknown_parent, 1,
			       tu_stored(sh_h, 1, true, 4242, t, BS, BS), X_NONE };
	n++;
	s[n] = (struct shape){ "placeholder of unknown blocks", KV_PC_offload_unknown, 2,
			       tu_stored(sh_h, 2, false, 0, NULL, 0, 0), X_NONE };
	snprintf(s[n].ev.medium, sizeof(s[n].ev.medium), "CPU");
	n++;
	s[n] = (struct shape){ "removal of unknown blocks", KV_PC_unknown_removed, 2,
			       tu_removed(sh_h, 2, NULL), X_NONE };
	n++;
	s[n] = (struct shape){ "removal on a tier never stored", KV_PC_unknown_removed, 1,
			       tu_removed(sh_known, 1, "CPU"), X_NONE };
	n++;
	s[n] = (struct shape){ "prompt embeds", KV_PC_unkeyable_extras, 1,
			       tu_stored(sh_h, 1, false, 0, t + 3 * BS, BS, BS), X_NONE };
	s[n].ev.has_extra_keys = true;
	s[n].ev.extra = sh_extra;
	s[n].ev.nextra = 1;
	n++;
	s[n] = (struct shape){ "unknown type", KV_PC_unknown_type, 1, { .type = 0 }, X_UNKNOWN };
	n++;
	s[n] = (struct shape){ "malformed", KV_PC_bad_events, 1, { .type = 0 }, X_MALFORMED };
	n++;
	return n;
}

/* A valid block 100 (tokens 1000..) that stays indexed on the GPU. */
static uint64_t known_block(void)
{
	const uint32_t *t = tu_toks(1000, BS);
	uint64_t h = 100, k;
	struct kvw_event e = tu_stored(&h, 1, false, 0, t, BS, BS);

	keys_of(0, t, BS, &k);
	apply(&e, 1);
	cr_assert_eq(tiers(k), KVIDX_TIER_GPU);
	return k;
}

Test(apply, every_shape_alone_and_mixed)
{
	struct shape s[16];
	size_t ns = shapes(s);
	uint64_t k100 = known_block();

	for (size_t i = 0; i < ns; i++) {
		uint64_t before = ctr(s[i].why), skipped = ctr(KV_PC_skipped_events);
		uint64_t stored0 = ctr(KV_PC_blocks_stored);
		size_t n = s[i].ev.type ? 1 : 0;

		/* Alone: counted under its reason, nothing stored. */
		apply_ex(0, &s[i].ev, n, s[i].extra);
		cr_assert_eq(ctr(s[i].why), before + s[i].n, "%s alone: counter %llu -> %llu",
			     s[i].what, (unsigned long long)before,
			     (unsigned long long)ctr(s[i].why));
		cr_assert_eq(ctr(KV_PC_skipped_events), skipped + s[i].n, "%s", s[i].what);
		cr_assert_eq(ctr(KV_PC_blocks_stored), stored0, "%s alone stored blocks", s[i].what);

		/* Mixed: a valid event before and after it in the same batch are indexed. */
		const uint32_t *ta = tu_toks(200000 + 1000 * (uint32_t)i, BS);
		const uint32_t *tb = tu_toks(300000 + 1000 * (uint32_t)i, BS);
		uint64_t ha = 5000 + 2 * i, hb = 5001 + 2 * i, ka, kb;
		struct kvw_event mix[3] = { tu_stored(&ha, 1, false, 0, ta, BS, BS), s[i].ev,
					    tu_stored(&hb, 1, false, 0, tb, BS, BS) };

		keys_of(0, ta, BS, &ka);
		keys_of(0, tb, BS, &kb);
		before = ctr(s[i].why);
		if (n) {
			apply_ex(0, mix, 3, X_NONE);
		} else {
			mix[1] = mix[2];
			apply_ex(0, mix, 2, s[i].extra);
		}
		cr_assert_eq(ctr(s[i].why), before + s[i].n, "%s mixed", s[i].what);
		cr_assert_eq(tiers(ka), KVIDX_TIER_GPU, "%s: valid event before it lost", s[i].what);
		cr_assert_eq(tiers(kb), KVIDX_TIER_GPU, "%s: valid event after it lost", s[i].what);
	}
	cr_assert_eq(tiers(k100), KVIDX_TIER_GPU, "no skip touched the known block");
}

Test(apply, hybrid_batch_yields)
{
	/* One scheduler step of a hybrid model with CPU offloading: full-attention blocks, the
	 * sliding-window group's blocks of the same tokens (without a window size), a Mamba
	 * group, an offload placeholder for the full-attention blocks, and an unknown new event
	 * type. */
	const uint32_t *t = tu_toks(40000, 4 * BS);
	uint64_t fa[4] = { 1, 2, 3, 4 }, sw[2] = { 11, 12 }, mb[1] = { 21 }, k[4];
	struct kvw_event ev[4] = {
		tu_stored(fa, 4, false, 0, t, 4 * BS, BS),
		tu_stored(sw, 2, false, 0, t, 4 * BS, BS),
		tu_stored(mb, 1, false, 0, t, 4 * BS, 4 * BS),
		tu_stored(fa, 4, false, 0, NULL, 0, 0),
	};

	snprintf(ev[0].spec_kind, sizeof(ev[0].spec_kind), "full_attention");
	ev[0].has_group_idx = true;
	ev[0].group_idx = 0;
	snprintf(ev[1].spec_kind, sizeof(ev[1].spec_kind), "sliding_window");
	ev[1].has_group_idx = true;
	ev[1].group_idx = 1;
	snprintf(ev[2].spec_kind, sizeof(ev[2].spec_kind), "mamba");
	ev[2].has_group_idx = true;
	ev[2].group_idx = 2;
	snprintf(ev[3].medium, sizeof(ev[3].medium), "CPU_PINNED");
	apply_ex(0, ev, 4, X_UNKNOWN);
	keys_of(0, t, 4 * BS, k);
	for (int i = 0; i < 4; i++)
		cr_assert_eq(tiers(k[i]), KVIDX_TIER_GPU | KVIDX_TIER_CPU, "block %d", i);
	/* Full attention 4 on GPU, the Mamba group's one block of 4 index blocks on GPU, the
	 * full-attention blocks on CPU (the placeholder names no group: the groups that know
	 * its hashes); the sliding-window event gives no window size: skipped. */
	cr_assert_eq(ctr(KV_PC_blocks_stored), 12, "4 + 4 GPU, 4 CPU");
	cr_assert_eq(ctr(KV_PC_skipped_group), 1);
	cr_assert_eq(ctr(KV_PC_offload_applied), 4);
	cr_assert_eq(ctr(KV_PC_unknown_type), 1);
	cr_assert_eq(ctr(KV_PC_skipped_events), 2);
	fprintf(stderr,
		"hybrid-batch: events=5 blocks_stored=%llu offload_applied=%llu skipped_group=%llu "
		"unknown_type=%llu skipped_events=%llu\n",
		(unsigned long long)ctr(KV_PC_blocks_stored),
		(unsigned long long)ctr(KV_PC_offload_applied),
		(unsigned long long)ctr(KV_PC_skipped_group),
		(unsigned long long)ctr(KV_PC_unknown_type),
		(unsigned long long)ctr(KV_PC_skipped_events));
	/* A BlockRemoved of the sliding-window group (same hash space) leaves them alone. */
	struct kvw_event rsw = tu_removed(fa, 1, NULL);
	rsw.has_group_idx = true;
	rsw.group_idx = 1;
	apply(&rsw, 1);
	cr_assert_eq(tiers(k[0]), KVIDX_TIER_GPU | KVIDX_TIER_CPU);
}

/* ---- copies and reference counts ------------------------------------------------------------ */

Test(apply, duplicate_copies_held_until_the_last)
{
	const uint32_t *t = tu_toks(1000, 2 * BS);
	uint64_t h[2] = { 31, 32 }, k[2];
	struct kvw_event s = tu_stored(h, 2, false, 0, t, 2 * BS, BS);
	struct kvw_event r = tu_removed(h + 1, 1, NULL);

	keys_of(0, t, 2 * BS, k);
	apply(&s, 1);
	apply(&s, 1); /* a second physical copy (vLLM does not de-duplicate) */
	cr_assert_eq(ctr(KV_PC_dup_copies), 2);
	apply(&r, 1);
	cr_assert_eq(tiers(k[1]), KVIDX_TIER_GPU, "one of two copies removed: still held");
	cr_assert_eq(ctr(KV_PC_copies_kept), 1);
	apply(&r, 1);
	cr_assert_eq(tiers(k[1]), 0, "both copies removed: gone");
	cr_assert_eq(tiers(k[0]), KVIDX_TIER_GPU);
	apply(&r, 1);
	cr_assert_eq(ctr(KV_PC_unknown_removed), 1, "a third removal has no copy to remove");
}

Test(apply, remaining_copy_counts_honoured)
{
	const uint32_t *t = tu_toks(2000, BS);
	uint64_t h = 41, k;
	uint32_t rem1 = 1, rem0 = 0;
	struct kvw_event s = tu_stored(&h, 1, false, 0, t, BS, BS), r = tu_removed(&h, 1, NULL);

	keys_of(0, t, BS, &k);
	apply(&s, 1); /* we saw one copy; the engine says two remain after this removal */
	r.has_remaining = true;
	r.remaining = &rem1;
	r.nremaining = 1;
	apply(&r, 1);
	cr_assert_eq(tiers(k), KVIDX_TIER_GPU);
	r.remaining = &rem0;
	apply(&r, 1);
	cr_assert_eq(tiers(k), 0);
	/* A count per hash is required. */
	apply(&s, 1);
	r.nremaining = 0;
	r.remaining = NULL;
	struct kvw_event r2 = tu_removed(&h, 1, NULL);
	r2.has_remaining = true;
	apply(&r2, 1);
	cr_assert_eq(ctr(KV_PC_skipped_shape), 1);
	cr_assert_eq(tiers(k), KVIDX_TIER_GPU);
}

Test(apply, partial_block_entry_then_full_block)
{
	/* Hybrid partial-block entries: hash block 8, index block 16. Two 8-token entries make
	 * one index block; the full 16-token block that replaces them is another engine hash
	 * holding the same key; removing the partial entries leaves it held. */
	const uint32_t *t = tu_toks(3000, BS);
	uint64_t p1 = 51, p2 = 52, full = 53, k;
	struct kvw_event a = tu_stored(&p1, 1, false, 0, t, 8, 8);
	struct kvw_event b = tu_stored(&p2, 1, true, p1, t + 8, 8, 8);
	struct kvw_event f = tu_stored(&full, 1, false, 0, t, BS, BS);
	struct kvw_event ra = tu_removed(&p1, 1, NULL), rb = tu_removed(&p2, 1, NULL);

	keys_of(0, t, BS, &k);
	apply(&a, 1);
	cr_assert_eq(tiers(k), 0, "half an index block is no key");
	apply(&b, 1);
	cr_assert_eq(tiers(k), KVIDX_TIER_GPU, "the block completing it yields the key");
	apply(&f, 1);
	apply(&ra, 1);
	apply(&rb, 1);
	cr_assert_eq(tiers(k), KVIDX_TIER_GPU, "the full block still references it");
	struct kvw_event rf = tu_removed(&full, 1, NULL);
	apply(&rf, 1);
	cr_assert_eq(tiers(k), 0);
}

Test(apply, engine_blocks_smaller_than_index_blocks)
{
	/* Engine block 4, index block 16 (llm-d's many:1): 6 engine blocks = 1.5 index blocks,
	 * the rest in a child event. */
	const uint32_t *t = tu_toks(4000, 2 * BS);
	uint64_t h[8] = { 61, 62, 63, 64, 65, 66, 67, 68 }, k[2];
	struct kvw_event a = tu_stored(h, 6, false, 0, t, 24, 4);
	struct kvw_event b = tu_stored(h + 6, 2, true, h[5], t + 24, 8, 4);

	keys_of(0, t, 2 * BS, k);
	apply(&a, 1);
	cr_assert_eq(tiers(k[0]), KVIDX_TIER_GPU);
	cr_assert_eq(tiers(k[1]), 0);
	apply(&b, 1);
	cr_assert_eq(tiers(k[1]), KVIDX_TIER_GPU, "the chain's open index block was finished");
	/* Removing the engine block that completed index block 1 removes its key. */
	struct kvw_event r = tu_removed(h + 7, 1, NULL);
	apply(&r, 1);
	cr_assert_eq(tiers(k[1]), 0);
	cr_assert_eq(tiers(k[0]), KVIDX_TIER_GPU);
}

/*
 * llm-d's edge case, as vLLM has it: with engine blocks smaller than the index block, an index
 * block is hit only with every engine block of it, so evicting any of them (the first one
 * included) drops its key, also when the index block spans two events.
 */
Test(apply, evicting_any_engine_block_of_an_index_block_drops_its_key)
{
	const uint32_t *t = tu_toks(4500, 2 * BS);
	uint64_t h[8] = { 71, 72, 73, 74, 75, 76, 77, 78 }, k[2];
	struct kvw_event a = tu_stored(h, 6, false, 0, t, 24, 4);
	struct kvw_event b = tu_stored(h + 6, 2, true, h[5], t + 24, 8, 4);

	keys_of(0, t, 2 * BS, k);
	apply(&a, 1);
	apply(&b, 1);
	cr_assert_eq(tiers(k[0]), KVIDX_TIER_GPU);
	cr_assert_eq(tiers(k[1]), KVIDX_TIER_GPU);
	struct kvw_event r0 = tu_removed(&h[0], 1, NULL); /* the first of index block 0 */
	apply(&r0, 1);
	cr_assert_eq(tiers(k[0]), 0, "vLLM can no longer hit index block 0");
	cr_assert_eq(tiers(k[1]), KVIDX_TIER_GPU);
	struct kvw_event r4 = tu_removed(&h[4], 1, NULL); /* the first of index block 1 (event a) */
	apply(&r4, 1);
	cr_assert_eq(tiers(k[1]), 0, "index block 1 lost its first engine block");
	/* Its completing block's own removal later changes nothing more, nor counts twice. */
	struct kvw_event r7 = tu_removed(&h[7], 1, NULL);
	apply(&r7, 1);
	cr_assert_eq(ctr(KV_PC_unknown_removed), 0);
	/* Stored again, the index block is whole again. */
	struct kvw_event a2 = tu_stored(h + 4, 2, true, h[3], t + 16, 8, 4);
	apply(&a2, 1);
	apply(&b, 1);
	cr_assert_eq(tiers(k[1]), KVIDX_TIER_GPU);
}

/* ---- media and locality --------------------------------------------------------------------- */

Test(apply, media_table)
{
	static const struct {
		const char *m;
		enum kvidx_tier t;
	} tab[] = {
		{ "", KVIDX_TIER_GPU },          { "GPU", KVIDX_TIER_GPU },
		{ "CPU", KVIDX_TIER_CPU },       { "cpu_pinned", KVIDX_TIER_CPU },
		{ "CPU_TIER1", KVIDX_TIER_CPU }, { "STORAGE", KVIDX_TIER_DISK },
		{ "FS", KVIDX_TIER_DISK },       { "OBJ", KVIDX_TIER_DISK },
		{ "SHARED_STORAGE", KVIDX_TIER_DISK }, { "OBJECT_STORE", KVIDX_TIER_DISK },
		{ "CPU_TIER2", KVIDX_TIER_DISK }, { "NVME", KVIDX_TIER_OTHER },
	};
	struct kvidx_weights wt;

	for (size_t i = 0; i < sizeof(tab) / sizeof(tab[0]); i++)
		cr_assert_eq(kvidx_tier_from_medium(tab[i].m), tab[i].t, "%s", tab[i].m);
	kvidx_weights_default(&wt);
	cr_assert_eq(wt.tier[3], 0.0, "tier other scores nothing by default");

	const uint32_t *t = tu_toks(5000, BS);
	uint64_t h = 71, k;
	struct kvw_event s = tu_stored(&h, 1, false, 0, t, BS, BS);
	snprintf(s.medium, sizeof(s.medium), "NVME");
	keys_of(0, t, BS, &k);
	apply(&s, 1);
	cr_assert_eq(tiers(k), KVIDX_TIER_OTHER);
	cr_assert_eq(ctr(KV_PC_other_medium), 1);

	/* REMOTE kept out by default; --remote-tier stores it on the tier named. */
	const uint32_t *t2 = tu_toks(6000, BS);
	uint64_t h2 = 72, k2;
	struct kvw_event r = tu_stored(&h2, 1, false, 0, t2, BS, BS);
	snprintf(r.locality, sizeof(r.locality), "REMOTE");
	keys_of(0, t2, BS, &k2);
	apply(&r, 1);
	cr_assert_eq(tiers(k2), 0);
	ap.remote_tier = KVIDX_TIER_DISK;
	apply(&r, 1);
	cr_assert_eq(tiers(k2), KVIDX_TIER_DISK);
}

/* ---- data-parallel ranks -------------------------------------------------------------------- */

Test(apply, clearing_one_rank_keeps_the_others_blocks)
{
	const uint32_t *t = tu_toks(7000, 2 * BS), *u = tu_toks(8000, BS);
	uint64_t h[2] = { 81, 82 }, hu = 83, k[2], ku;
	struct kvw_event both = tu_stored(h, 1, false, 0, t, BS, BS);
	struct kvw_event r0only = tu_stored(h + 1, 1, true, h[0], t + BS, BS, BS);
	struct kvw_event r1only = tu_stored(&hu, 1, false, 0, u, BS, BS);
	struct kvw_event clear = { .type = KVW_ALL_BLOCKS_CLEARED };

	cr_assert_eq(ing_stream_open(&ap, &st[1], &tg, 1), 0);
	cr_assert_eq(ctr(KV_PC_ranks), 2);
	keys_of(0, t, 2 * BS, k);
	keys_of(0, u, BS, &ku);
	apply_ex(0, &both, 1, X_NONE);
	apply_ex(0, &r0only, 1, X_NONE);
	apply_ex(1, &both, 1, X_NONE); /* rank 1 caches the same first block */
	apply_ex(1, &r1only, 1, X_NONE);
	/* Both ranks' engine hashes are their own: rank 1 removing h[1] knows no such block. */
	struct kvw_event r1rm = tu_removed(h + 1, 1, NULL);
	apply_ex(1, &r1rm, 1, X_NONE);
	cr_assert_eq(ctr(KV_PC_unknown_removed), 1);
	cr_assert_eq(tiers(k[1]), KVIDX_TIER_GPU);

	apply_ex(0, &clear, 1, X_NONE);
	cr_assert_eq(tiers(k[0]), KVIDX_TIER_GPU, "rank 1 still holds block 0");
	cr_assert_eq(tiers(k[1]), 0, "rank 0's own block went");
	cr_assert_eq(tiers(ku), KVIDX_TIER_GPU, "rank 1's own block stays");
	cr_assert_eq(rank_ctr(0, KV_RC_clears), 1);
	cr_assert_eq(rank_ctr(1, KV_RC_clears), 0);
	cr_assert_eq(ctr(KV_PC_clears), 1);
	/* Rank 0 starts over: its old blocks are unknown to it now. */
	struct kvw_event child = tu_stored(h + 1, 1, true, h[0], t + BS, BS, BS);
	apply_ex(0, &child, 1, X_NONE);
	cr_assert_eq(ctr(KV_PC_unknown_parent), 1);
	/* Rank 1 removing its copy of block 0: now nobody holds it. */
	struct kvw_event rm0 = tu_removed(h, 1, NULL);
	apply_ex(1, &rm0, 1, X_NONE);
	cr_assert_eq(tiers(k[0]), 0);
	ing_stream_close(&ap, &st[1]);
	cr_assert_eq(ctr(KV_PC_ranks), 1);
}

/* ---- keys with extras -------------------------------------------------------------------------- */

static struct kvw_xitem xs(const char *s)
{
	return (struct kvw_xitem){ .kind = KVW_X_STR, .str = s, .len = (uint32_t)strlen(s) };
}

static struct kvw_xitem xmm(const char *s, int64_t off)
{
	return (struct kvw_xitem){ .kind = KVW_X_MM, .str = s, .len = (uint32_t)strlen(s),
				   .has_offset = true, .offset = off };
}

Test(apply, lora_name_dropped_and_used_as_root)
{
	const uint32_t *t = tu_toks(9000, 2 * BS);
	uint64_t h[2] = { 91, 92 }, k[2];
	struct kvw_xitem lora[1] = { xs("adapter-a") };
	struct kvw_extra x[2] = { { true, lora, 1, 0 }, { true, lora, 1, 0 } };
	struct kvw_event s = tu_stored(h, 2, false, 0, t, 2 * BS, BS);

	snprintf(s.lora_name, sizeof(s.lora_name), "adapter-a");
	s.has_extra_keys = true;
	s.extra = x;
	s.nextra = 2;
	apply(&s, 1);
	kvidx_key_chain(KVIDX_KEY_CBOR_FNV, kvidx_key_root(KVIDX_KEY_CBOR_FNV, "", "adapter-a"), t,
			2 * BS, BS, k, 2);
	cr_assert_eq(tiers(k[0]), KVIDX_TIER_GPU);
	cr_assert_eq(tiers(k[1]), KVIDX_TIER_GPU);
	cr_assert_eq(ctr(KV_PC_skipped_events), 0);
}

/*
 * Applies a prompt of the n blocks of tokens t (engine hashes h) as two events: blocks
 * 0..n-2 with the extra_keys entries x, then block n-1 continuing the chain without any; and
 * asserts that every block is indexed under the key a router computes with extras ex.
 */
static void apply_with_extras(const char *what, const uint64_t *h, const uint32_t *t, size_t n,
			      const struct kvw_extra *x, const struct kvidx_key_extras *ex)
{
	struct kvw_event e1 = tu_stored(h, n - 1, false, 0, t, (n - 1) * BS, BS);
	struct kvw_event e2 = tu_stored(h + n - 1, 1, true, h[n - 2], t + (n - 1) * BS, BS, BS);
	uint64_t k[8];

	cr_assert(n >= 2 && n <= 8);
	e1.has_extra_keys = true;
	e1.extra = x;
	e1.nextra = n - 1;
	apply(&e1, 1);
	apply(&e2, 1);
	cr_assert_eq(kvidx_key_chain_ex(KVIDX_KEY_CBOR_FNV,
					kvidx_key_root(KVIDX_KEY_CBOR_FNV, "", MODEL), t, n * BS, BS,
					ex, k, n),
		     n);
	for (size_t i = 0; i < n; i++)
		cr_assert_eq(tiers(k[i]), KVIDX_TIER_GPU, "%s block %zu", what, i);
}

Test(apply, salted_two_turns_and_multimodal_then_text)
{
	/* Turn 1: salted, 2 blocks (salt on block 0). Turn 2: 1 more block, parent = turn 1's
	 * last, no extras. Keys as a router computes them with kvidx_key_chain_ex. */
	const uint32_t *t = tu_toks(10000, 3 * BS);
	uint64_t h[3] = { 101, 102, 103 };
	struct kvw_xitem salt[1] = { xs("s3cr3t") };
	struct kvw_extra x1[2] = { { true, salt, 1, 0 }, { false, NULL, 0, 0 } };
	struct kvidx_key_extras ex = { .salt = "s3cr3t" };

	apply_with_extras("salted", h, t, 3, x1, &ex);
	uint64_t plain[3];
	keys_of(0, t, 3 * BS, plain);
	cr_assert_eq(tiers(plain[0]), 0, "the unsalted key must not be indexed");

	/* An image on tokens [20, 40) of a new prompt: blocks 1 and 2 list it (offsets 4, -12),
	 * then a text turn continues the chain. */
	const uint32_t *u = tu_toks(20000, 4 * BS);
	uint64_t g[4] = { 111, 112, 113, 114 };
	struct kvw_xitem im1[1] = { xmm("img-hash-1", 4) }, im2[1] = { xmm("img-hash-1", -12) };
	struct kvw_extra xm[3] = { { false, NULL, 0, 0 }, { true, im1, 1, 0 }, { true, im2, 1, 0 } };
	struct kvidx_mm_item item = { .start = 20, .len = 20, .id = "img-hash-1" };
	struct kvidx_key_extras exm = { .mm = &item, .nmm = 1 };

	apply_with_extras("multimodal prompt", g, u, 4, xm, &exm);
	cr_assert_eq(ctr(KV_PC_skipped_events), 0);
}

Test(apply, prompt_embeds_end_the_chain)
{
	const uint32_t *t = tu_toks(30000, 3 * BS);
	uint64_t h[3] = { 121, 122, 123 }, k[3];
	struct kvw_extra x[3] = { { false, NULL, 0, 0 },
				  { true, sh_embeds, 1, 0 },
				  { false, NULL, 0, 0 } };
	struct kvw_event s = tu_stored(h, 3, false, 0, t, 3 * BS, BS);

	s.has_extra_keys = true;
	s.extra = x;
	s.nextra = 3;
	apply(&s, 1);
	keys_of(0, t, 3 * BS, k);
	cr_assert_eq(tiers(k[0]), KVIDX_TIER_GPU, "the text block before it is indexed");
	cr_assert_eq(tiers(k[1]), 0);
	cr_assert_eq(tiers(k[2]), 0);
	cr_assert_eq(ctr(KV_PC_unkeyable_extras), 1);
	/* Its children cannot chain: the block is not known. */
	struct kvw_event c = tu_stored(h + 2, 1, true, h[1], t + 2 * BS, BS, BS);
	apply(&c, 1);
	cr_assert_eq(ctr(KV_PC_unknown_parent), 1);
}
