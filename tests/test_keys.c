/*
 * test_keys.c — request keys, algorithm names and tier names (lib/keys.c), and the
 * kvidx-hash tool.
 *
 * The check values 0x8464eee8f2cf3412 (cbor-fnv) and 0xbc179097a38e1274 (xxh64) come from
 * docs/keys.md; the cbor-fnv one is what llm-d's token processor produces. The
 * "wide" and "big" vectors were computed by an independent reference encoder (Python, byte
 * strings built by hand) to cover every CBOR integer width and multi-byte array lengths.
 *
 * Keys with extras (LoRA root, cache salt, multimodal items) are checked against bytes laid
 * out by hand in this file, hashed with its own FNV-1a-64 and with libxxhash, and (cbor-fnv)
 * against tests/keys_ref.py, which encodes with Python's cbor2.
 *
 * The tool tests run $KVIDX_BIN/kvidx-hash; `make test` sets KVIDX_BIN.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include "kvidx.h"
#include "util_run.h"

#define CHECK_CBOR_FNV 0x8464eee8f2cf3412ull
#define CHECK_XXH64 0xbc179097a38e1274ull

static const enum kvidx_key_algo algos[] = { KVIDX_KEY_CBOR_FNV, KVIDX_KEY_XXH64 };

static void seq_tokens(uint32_t *t, size_t n, uint32_t first)
{
	size_t i;

	for (i = 0; i < n; i++)
		t[i] = first + (uint32_t)i;
}

static uint64_t one_key(enum kvidx_key_algo algo, const char *seed, const char *model,
			const uint32_t *t, size_t n, uint32_t bs)
{
	uint64_t out[1] = { 0 };
	size_t got = kvidx_key_chain(algo, kvidx_key_root(algo, seed, model), t, n, bs, out, 1);

	cr_assert_eq(got, 1, "expected 1 key, got %zu", got);
	return out[0];
}

Test(keys, check_value_cbor_fnv)
{
	uint32_t t[16];

	seq_tokens(t, 16, 1);
	cr_assert_eq(one_key(KVIDX_KEY_CBOR_FNV, "", "test-model", t, 16, 16), CHECK_CBOR_FNV);
}

Test(keys, check_value_xxh64)
{
	uint32_t t[16];

	seq_tokens(t, 16, 1);
	cr_assert_eq(one_key(KVIDX_KEY_XXH64, "", "test-model", t, 16, 16), CHECK_XXH64);
}

/* Every CBOR integer width for tokens (0, 23, 24, 255, 256, 65535, 65536, 2^32-1). */
Test(keys, wide_tokens)
{
	static const uint32_t w[8] = { 0, 23, 24, 255, 256, 65535, 65536, 4294967295u };
	uint32_t t[16];

	memcpy(t, w, sizeof(w));
	memcpy(t + 8, w, sizeof(w));
	cr_assert_eq(one_key(KVIDX_KEY_CBOR_FNV, "seed42", "llama-3/lora-x", t, 16, 16),
		     0x1a550f5363cf1f1bull);
	cr_assert_eq(one_key(KVIDX_KEY_XXH64, "seed42", "llama-3/lora-x", t, 16, 16),
		     0x20188a14442bf7b7ull);
}

/* Blocks of 1000 tokens: a 2-byte CBOR array length and several xxh64 staging buffers. */
Test(keys, big_blocks)
{
	static const uint64_t want[2][3] = {
		{ 0xfa82101d8042f809ull, 0x0cb23089ca69eba9ull, 0xbf0f4b140b429774ull },
		{ 0x2cf2fe366aba429full, 0xd6dfcdf6a57223b0ull, 0x549ef7566406ba19ull },
	};
	static uint32_t t[3000];
	uint64_t out[4];
	uint32_t i;
	size_t a, k, got;

	for (i = 0; i < 3000; i++)
		t[i] = i * 2654435761u;
	for (a = 0; a < 2; a++) {
		got = kvidx_key_chain(algos[a], kvidx_key_root(algos[a], "", "m"), t, 3000, 1000,
				      out, 4);
		cr_assert_eq(got, 3);
		for (k = 0; k < 3; k++)
			cr_assert_eq(out[k], want[a][k], "%s key %zu: 0x%016llx",
				     kvidx_key_algo_name(algos[a]), k, (unsigned long long)out[k]);
	}
}

Test(keys, root_depends_on_model_and_seed)
{
	size_t a;

	for (a = 0; a < 2; a++) {
		enum kvidx_key_algo algo = algos[a];
		uint64_t r = kvidx_key_root(algo, "", "test-model");

		cr_assert_eq(r, kvidx_key_root(algo, "", "test-model"), "root is not pure");
		cr_assert_neq(r, kvidx_key_root(algo, "", "other-model"));
		cr_assert_neq(r, kvidx_key_root(algo, "", ""));
		cr_assert_neq(r, kvidx_key_root(algo, "42", "test-model"));
		cr_assert_neq(kvidx_key_root(algo, "1", ""), kvidx_key_root(algo, "2", ""));
	}
	cr_assert_neq(kvidx_key_root(KVIDX_KEY_CBOR_FNV, "", "test-model"),
		      kvidx_key_root(KVIDX_KEY_XXH64, "", "test-model"));
}

/* Two blocks at once equal block 0 from the root, then block 1 from key 0 (--parent). */
Test(keys, chain_continues_from_parent)
{
	uint32_t t[32];
	uint64_t two[2], first, second;
	size_t a;

	seq_tokens(t, 32, 1);
	for (a = 0; a < 2; a++) {
		enum kvidx_key_algo algo = algos[a];
		uint64_t root = kvidx_key_root(algo, "", "test-model");

		cr_assert_eq(kvidx_key_chain(algo, root, t, 32, 16, two, 2), 2);
		cr_assert_eq(kvidx_key_chain(algo, root, t, 16, 16, &first, 1), 1);
		cr_assert_eq(kvidx_key_chain(algo, first, t + 16, 16, 16, &second, 1), 1);
		cr_assert_eq(two[0], first);
		cr_assert_eq(two[1], second);
		cr_assert_neq(two[0], two[1]);
	}
	cr_assert_eq(two[0], CHECK_XXH64);
}

Test(keys, partial_block_dropped)
{
	uint32_t t[47];
	uint64_t out[4] = { 0 };
	size_t a;

	seq_tokens(t, 47, 1);
	for (a = 0; a < 2; a++) {
		enum kvidx_key_algo algo = algos[a];
		uint64_t root = kvidx_key_root(algo, "", "test-model");

		cr_assert_eq(kvidx_key_chain(algo, root, t, 15, 16, out, 4), 0);
		cr_assert_eq(kvidx_key_chain(algo, root, t, 17, 16, out, 4), 1);
		cr_assert_eq(out[0], a ? CHECK_XXH64 : CHECK_CBOR_FNV);
		cr_assert_eq(kvidx_key_chain(algo, root, t, 47, 16, out, 4), 2);
		cr_assert_eq(out[0], a ? CHECK_XXH64 : CHECK_CBOR_FNV);
	}
}

Test(keys, block_size_zero)
{
	uint32_t t[16];
	uint64_t out[2] = { 7, 7 };

	seq_tokens(t, 16, 1);
	cr_assert_eq(kvidx_key_chain(KVIDX_KEY_CBOR_FNV, 1, t, 16, 0, out, 2), 0);
	cr_assert_eq(kvidx_key_chain(KVIDX_KEY_XXH64, 1, t, 16, 0, out, 2), 0);
	cr_assert_eq(out[0], 7, "out written with block_size 0");
}

Test(keys, max_caps_output)
{
	uint32_t t[64];
	uint64_t all[4], out[4];
	size_t a;

	seq_tokens(t, 64, 100);
	for (a = 0; a < 2; a++) {
		enum kvidx_key_algo algo = algos[a];

		cr_assert_eq(kvidx_key_chain(algo, 5, t, 64, 16, all, 4), 4);
		memset(out, 0xee, sizeof(out));
		cr_assert_eq(kvidx_key_chain(algo, 5, t, 64, 16, out, 2), 2);
		cr_assert_eq(out[0], all[0]);
		cr_assert_eq(out[1], all[1]);
		cr_assert_eq(out[2], 0xeeeeeeeeeeeeeeeeull, "wrote past max");
		cr_assert_eq(kvidx_key_chain(algo, 5, t, 64, 16, NULL, 0), 0);
	}
}

/* The correlation id of a request id: FNV-1a-64, 0 -> 1 (Go's CorrID and Python's corr_id()
 * are tested against the same values). */
Test(keys, corr_id_of_request_ids)
{
	cr_assert_eq(kvidx_corr_id("", 0), 0xcbf29ce484222325ull);
	cr_assert_eq(kvidx_corr_id("a", 1), 0xaf63dc4c8601ec8cull);
	cr_assert_eq(kvidx_corr_id("req-1", 5), kvidx_corr_id("req-1\0junk", 5));
	cr_assert_neq(kvidx_corr_id("req-1", 5), kvidx_corr_id("req-2", 5));
	cr_assert_eq(kvidx_corr_id(NULL, 0), 0xcbf29ce484222325ull);
}

Test(keys, algo_names)
{
	enum kvidx_key_algo algo = 0;
	size_t a;

	for (a = 0; a < 2; a++) {
		cr_assert_eq(kvidx_key_algo_parse(kvidx_key_algo_name(algos[a]), &algo), 0);
		cr_assert_eq(algo, algos[a]);
	}
	cr_assert_str_eq(kvidx_key_algo_name(KVIDX_KEY_CBOR_FNV), "cbor-fnv");
	cr_assert_str_eq(kvidx_key_algo_name(KVIDX_KEY_XXH64), "xxh64");
	cr_assert_str_eq(kvidx_key_algo_name(0), "?");
	cr_assert_str_eq(kvidx_key_algo_name(99), "?");

	algo = KVIDX_KEY_XXH64;
	cr_assert_eq(kvidx_key_algo_parse("", &algo), -EINVAL);
	cr_assert_eq(kvidx_key_algo_parse("cbor_fnv", &algo), -EINVAL);
	cr_assert_eq(kvidx_key_algo_parse("XXH64", &algo), -EINVAL);
	cr_assert_eq(kvidx_key_algo_parse("xxh64 ", &algo), -EINVAL);
	cr_assert_eq(kvidx_key_algo_parse("?", &algo), -EINVAL);
	cr_assert_eq(algo, KVIDX_KEY_XXH64, "out changed on rejection");
}

Test(keys, tiers)
{
	cr_assert_eq(kvidx_tier_from_medium(NULL), KVIDX_TIER_GPU);
	cr_assert_eq(kvidx_tier_from_medium("GPU"), KVIDX_TIER_GPU);
	cr_assert_eq(kvidx_tier_from_medium("gpu"), KVIDX_TIER_GPU);
	cr_assert_eq(kvidx_tier_from_medium("Gpu"), KVIDX_TIER_GPU);
	cr_assert_eq(kvidx_tier_from_medium("CPU"), KVIDX_TIER_CPU);
	cr_assert_eq(kvidx_tier_from_medium("cpu"), KVIDX_TIER_CPU);
	cr_assert_eq(kvidx_tier_from_medium("DISK"), KVIDX_TIER_DISK);
	cr_assert_eq(kvidx_tier_from_medium("disk"), KVIDX_TIER_DISK);
	cr_assert_eq(kvidx_tier_from_medium(""), KVIDX_TIER_GPU, "empty is nil is GPU");
	cr_assert_eq(kvidx_tier_from_medium("NVME"), KVIDX_TIER_OTHER);
	cr_assert_eq(kvidx_tier_from_medium("GPU "), KVIDX_TIER_OTHER);

	cr_assert_str_eq(kvidx_tier_name(KVIDX_TIER_GPU), "gpu");
	cr_assert_str_eq(kvidx_tier_name(KVIDX_TIER_CPU), "cpu");
	cr_assert_str_eq(kvidx_tier_name(KVIDX_TIER_DISK), "disk");
	cr_assert_str_eq(kvidx_tier_name(KVIDX_TIER_OTHER), "other");
}

/* ---- the kvidx-hash tool ------------------------------------------------------------------ */

/* Runs "$KVIDX_BIN/kvidx-hash ARGS" through sh; returns its exit status, output in out. */
static int run_hash(const char *args, char *out, size_t outsz)
{
	struct tu_run r = tu_run_tool("kvidx-hash", "%s", args);

	snprintf(out, outsz, "%s", r.out);
	free(r.out);
	return r.status;
}

Test(keys, tool_check_value)
{
	char out[256];

	cr_assert_eq(run_hash("--model test-model $(seq 1 16)", out, sizeof(out)), 0);
	cr_assert_str_eq(out, "0x8464eee8f2cf3412\n");
	cr_assert_eq(run_hash("--algo xxh64 --model test-model $(seq 1 16)", out, sizeof(out)),
		     0);
	cr_assert_str_eq(out, "0xbc179097a38e1274\n");
}

Test(keys, tool_stdin_and_parent)
{
	char out[256];

	/* Tokens on stdin, separated by commas and whitespace; the partial block is dropped. */
	cr_assert_eq(run_hash("--model test-model < /dev/null", out, sizeof(out)), 0);
	cr_assert_str_eq(out, "");
	cr_assert_eq(run_hash("--model=test-model <<EOF\n1,2,3 4\n5\t6,7,8,9,10,11,12,13,14,15,16,"
			      "17 18\nEOF",
			      out, sizeof(out)),
		     0);
	cr_assert_str_eq(out, "0x8464eee8f2cf3412\n");

	/* Two blocks equal block 0, then block 1 chained from its key with --parent. */
	cr_assert_eq(run_hash("--model test-model $(seq 1 32)", out, sizeof(out)), 0);
	cr_assert(!strncmp(out, "0x8464eee8f2cf3412\n", 19), "got %s", out);
	{
		char second[256];

		cr_assert_eq(run_hash("--parent 0x8464eee8f2cf3412 $(seq 17 32)", second,
				      sizeof(second)),
			     0);
		cr_assert_str_eq(out + 19, second);
	}
}

Test(keys, tool_errors)
{
	char out[4096];

	cr_assert_eq(run_hash("--bogus 1 2>/dev/null", out, sizeof(out)), 2);
	cr_assert_eq(run_hash("--algo sha256 1 2>/dev/null", out, sizeof(out)), 2);
	cr_assert_eq(run_hash("--block-size 0 1 2>/dev/null", out, sizeof(out)), 2);
	cr_assert_eq(run_hash("--parent xyz 1 2>/dev/null", out, sizeof(out)), 2);
	cr_assert_eq(run_hash("--model 2>/dev/null", out, sizeof(out)), 2);
	cr_assert_eq(run_hash("1 2 4294967296 2>&1", out, sizeof(out)), 2);
	cr_assert(strstr(out, "'4294967296'"), "message does not name the token: %s", out);
	cr_assert_eq(run_hash("1 2x 3 2>&1", out, sizeof(out)), 2);
	cr_assert(strstr(out, "'2x'"), "message does not name the token: %s", out);
	cr_assert_eq(run_hash("--help", out, sizeof(out)), 0);
	cr_assert(strstr(out, "--block-size"), "help lacks --block-size: %s", out);
}

/* ---- keys with extras (kvidx_key_block, kvidx_key_chain_ex) ------------------------------- */

/*
 * The expected keys below are computed without lib/keys.c: the bytes each algorithm hashes
 * are laid out by hand here (CBOR from RFC 8949's encoding of small values: tokens and
 * strings below 24 fit the initial byte, a key above 2^32 is 1b and 8 big-endian bytes),
 * hashed with the FNV-1a-64 below and with libxxhash's XXH64(). Which items key which block
 * is written out per case, not derived from the ranges.
 */

#define XBS 16      /* block size of the cases */
#define XMAXB 4     /* blocks per case */
#define XMAXI 4     /* items per block */

static uint64_t ref_fnv(const unsigned char *p, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ull;

	while (n--) {
		h ^= *p++;
		h *= 0x100000001b3ull;
	}
	return h;
}

struct ref_buf {
	unsigned char b[1024];
	size_t n;
};

static void rb_u8(struct ref_buf *r, unsigned v)
{
	cr_assert_lt(r->n, sizeof(r->b));
	r->b[r->n++] = (unsigned char)v;
}

static void rb_le(struct ref_buf *r, uint64_t v, int bytes)
{
	int i;

	for (i = 0; i < bytes; i++)
		rb_u8(r, (unsigned)(v >> (8 * i)) & 0xff);
}

/* CBOR 1b + 8 big-endian bytes: every key in these cases is above 2^32. */
static void rb_cbor_key(struct ref_buf *r, uint64_t v)
{
	int i;

	cr_assert_geq(v, 1ull << 32, "the reference encoder only writes 8-byte keys");
	rb_u8(r, 0x1b);
	for (i = 7; i >= 0; i--)
		rb_u8(r, (unsigned)(v >> (8 * i)) & 0xff);
}

/* CBOR text string of fewer than 24 bytes: 0x60 | len, then the bytes. */
static void rb_cbor_str(struct ref_buf *r, const char *s)
{
	size_t len = strlen(s), i;

	cr_assert_lt(len, 24, "the reference encoder only writes short strings");
	rb_u8(r, 0x60 | (unsigned)len);
	for (i = 0; i < len; i++)
		rb_u8(r, (unsigned char)s[i]);
}

/* The root: [FNV-1a-64(""), null, model] / XXH64(LE64(XXH64("")) || LE64(len) || model). */
static uint64_t ref_root(enum kvidx_key_algo algo, const char *model)
{
	struct ref_buf r = { .n = 0 };
	size_t i;

	if (algo == KVIDX_KEY_CBOR_FNV) {
		rb_u8(&r, 0x83);
		rb_cbor_key(&r, ref_fnv(NULL, 0));
		rb_u8(&r, 0xf6);
		rb_cbor_str(&r, model);
		return ref_fnv(r.b, r.n);
	}
	rb_le(&r, XXH64("", 0, 0), 8);
	rb_le(&r, strlen(model), 8);
	for (i = 0; model[i]; i++)
		rb_u8(&r, (unsigned char)model[i]);
	return XXH64(r.b, r.n, 0);
}

/* A block of XBS tokens first..first+XBS-1 (all below 24) with items (NULL-terminated). */
static uint64_t ref_block(enum kvidx_key_algo algo, uint64_t parent, uint32_t first,
			  const char *const *items)
{
	struct ref_buf r = { .n = 0 };
	size_t k = 0, i, j;

	while (items[k])
		k++;
	cr_assert_lt(first + XBS - 1, 24);
	if (algo == KVIDX_KEY_CBOR_FNV) {
		rb_u8(&r, 0x83);
		rb_cbor_key(&r, parent);
		rb_u8(&r, 0x80 | XBS);
		for (i = 0; i < XBS; i++)
			rb_u8(&r, first + (uint32_t)i);
		if (!k) {
			rb_u8(&r, 0xf6);
		} else {
			rb_u8(&r, 0x80 | (unsigned)k);
			for (i = 0; i < k; i++) {
				rb_u8(&r, 0xa1);
				rb_cbor_str(&r, "Hash");
				rb_cbor_str(&r, items[i]);
			}
		}
		return ref_fnv(r.b, r.n);
	}
	rb_le(&r, parent, 8);
	for (i = 0; i < XBS; i++)
		rb_le(&r, first + i, 4);
	for (i = 0; i < k; i++) {
		rb_le(&r, strlen(items[i]), 8);
		for (j = 0; items[i][j]; j++)
			rb_u8(&r, (unsigned char)items[i][j]);
	}
	return XXH64(r.b, r.n, 0);
}

/*
 * One prompt with extras. Tokens are 1..nblocks*XBS but restart at 1 in each block (so they
 * stay below 24): block b holds 1..16.
 */
struct xcase {
	const char *name;
	const char *root;                /* base model, or the LoRA name */
	const char *salt;
	struct kvidx_mm_item mm[XMAXI];
	size_t nmm;
	size_t nblocks;
	const char *want[XMAXB][XMAXI + 1]; /* items keyed on each block, NULL-terminated */
	const char *flags;               /* the same case as kvidx-hash flags */
};

static const struct xcase xcases[] = {
	{ .name = "lora", .root = "sql-lora", .nblocks = 2,
	  .flags = "--model base-model --lora sql-lora" },
	{ .name = "salt", .root = "test-model", .salt = "s3cret", .nblocks = 2,
	  .want = { { "s3cret" } },
	  .flags = "--model test-model --salt s3cret" },
	{ .name = "one mm item", .root = "test-model", .nblocks = 3,
	  .mm = { { 18, 8, "img0" } }, .nmm = 1,
	  .want = { { NULL }, { "img0" } },
	  .flags = "--model test-model --mm 18:8:img0" },
	{ .name = "two mm items in one block (given out of order)", .root = "test-model",
	  .nblocks = 3,
	  .mm = { { 24, 4, "imgB" }, { 18, 4, "imgA" } }, .nmm = 2,
	  .want = { { NULL }, { "imgA", "imgB" } },
	  .flags = "--model test-model --mm 24:4:imgB --mm 18:4:imgA" },
	{ .name = "mm item spanning two blocks", .root = "test-model", .nblocks = 3,
	  .mm = { { 10, 20, "vid" } }, .nmm = 1,
	  .want = { { "vid" }, { "vid" } },
	  .flags = "--model test-model --mm 10:20:vid" },
	{ .name = "salt and mm", .root = "test-model", .salt = "s", .nblocks = 3,
	  .mm = { { 40, 8, "img1" }, { 2, 4, "img0" }, { 14, 6, "x:y" } }, .nmm = 3,
	  .want = { { "img0", "x:y", "s" }, { "x:y" }, { "img1" } },
	  .flags = "--model test-model --salt s --mm 40:8:img1 --mm 2:4:img0 --mm 14:6:x:y" },
	{ .name = "lora, salt and mm", .root = "sql-lora", .salt = "tenant-7", .nblocks = 2,
	  .mm = { { 16, 16, "img0" } }, .nmm = 1,
	  .want = { { "tenant-7" }, { "img0" } },
	  .flags = "--lora sql-lora --salt tenant-7 --mm 16:16:img0" },
	/* Edge cases of the contract in kvidx.h. */
	{ .name = "zero-length items", .root = "test-model", .nblocks = 3,
	  .mm = { { 16, 0, "atedge" }, { 20, 0, "inside" }, { 0, 0, "atzero" } }, .nmm = 3,
	  .want = { { NULL }, { "inside" } },
	  .flags = "--model test-model --mm 16:0:atedge --mm 20:0:inside --mm 0:0:atzero" },
	{ .name = "items past the prompt", .root = "test-model", .nblocks = 2,
	  .mm = { { 24, 1000, "long" }, { 32, 8, "beyond" }, { 4000000000u, 4000000000u, "far" } },
	  .nmm = 3,
	  .want = { { NULL }, { "long" } },
	  .flags = "--model test-model --mm 24:1000:long --mm 32:8:beyond "
		   "--mm 4000000000:4000000000:far" },
	{ .name = "overlapping items, equal starts", .root = "test-model", .nblocks = 2,
	  .mm = { { 0, 32, "A" }, { 8, 8, "D" }, { 4, 2, "C" }, { 4, 8, "B" } }, .nmm = 4,
	  .want = { { "A", "C", "B", "D" }, { "A" } },
	  .flags = "--model test-model --mm 0:32:A --mm 8:8:D --mm 4:2:C --mm 4:8:B" },
	{ .name = "empty salt", .root = "test-model", .salt = "", .nblocks = 1,
	  .flags = "--model test-model --salt ''" },
};

#define NXCASES (sizeof(xcases) / sizeof(xcases[0]))

static void xcase_tokens(const struct xcase *c, uint32_t *t)
{
	size_t b;

	for (b = 0; b < c->nblocks; b++)
		seq_tokens(t + b * XBS, XBS, 1);
}

static void xcase_ref(const struct xcase *c, enum kvidx_key_algo algo, uint64_t *want)
{
	uint64_t parent = ref_root(algo, c->root);
	size_t b;

	for (b = 0; b < c->nblocks; b++)
		parent = want[b] = ref_block(algo, parent, 1, c->want[b]);
}

static struct kvidx_key_extras xcase_extras(const struct xcase *c)
{
	struct kvidx_key_extras ex = { .salt = c->salt, .mm = c->mm, .nmm = c->nmm };

	return ex;
}

/* The reference encoders agree with the published check values. */
Test(keys_extras, reference_matches_check_values)
{
	static const char *const none[] = { NULL };

	cr_assert_eq(ref_block(KVIDX_KEY_CBOR_FNV, ref_root(KVIDX_KEY_CBOR_FNV, "test-model"), 1,
			       none),
		     CHECK_CBOR_FNV);
	cr_assert_eq(ref_block(KVIDX_KEY_XXH64, ref_root(KVIDX_KEY_XXH64, "test-model"), 1, none),
		     CHECK_XXH64);
}

/* The exact bytes of docs/keys.md "Request keys": H(parent, tokens, [{"Hash": "abc"}]), all
 * literal. */
Test(keys_extras, literal_abc_item)
{
	static const unsigned char head[] = { 0x83, 0x1b, 0x84, 0x64, 0xee, 0xe8,
					      0xf2, 0xcf, 0x34, 0x12, 0x90 };
	static const unsigned char tail[] = { 0x81, 0xa1, 0x64, 0x48, 0x61, 0x73, 0x68,
					      0x63, 0x61, 0x62, 0x63 };
	static const char *const abc[] = { "abc" };
	unsigned char bytes[sizeof(head) + 16 + sizeof(tail)];
	uint32_t t[16];
	size_t i;

	memcpy(bytes, head, sizeof(head));
	for (i = 0; i < 16; i++)
		bytes[sizeof(head) + i] = (unsigned char)(1 + i); /* tokens 1..16: 01..10 */
	memcpy(bytes + sizeof(head) + 16, tail, sizeof(tail));
	seq_tokens(t, 16, 1);
	cr_assert_eq(kvidx_key_block(KVIDX_KEY_CBOR_FNV, CHECK_CBOR_FNV, t, 16, abc, 1),
		     ref_fnv(bytes, sizeof(bytes)));
}

Test(keys_extras, chain_ex_vectors)
{
	uint32_t t[XMAXB * XBS];
	uint64_t want[XMAXB], got[XMAXB + 1];
	size_t c, a, n;

	for (c = 0; c < NXCASES; c++) {
		const struct xcase *xc = &xcases[c];
		struct kvidx_key_extras ex = xcase_extras(xc);

		xcase_tokens(xc, t);
		for (a = 0; a < 2; a++) {
			size_t b;

			xcase_ref(xc, algos[a], want);
			memset(got, 0xee, sizeof(got));
			n = kvidx_key_chain_ex(algos[a], kvidx_key_root(algos[a], "", xc->root), t,
					       xc->nblocks * XBS + XBS - 1, XBS, &ex, got,
					       XMAXB + 1);
			cr_assert_eq(n, xc->nblocks, "%s, %s: %zu keys", xc->name,
				     kvidx_key_algo_name(algos[a]), n);
			for (b = 0; b < n; b++)
				cr_assert_eq(got[b], want[b], "%s, %s, block %zu: 0x%016llx, want 0x%016llx",
					     xc->name, kvidx_key_algo_name(algos[a]), b,
					     (unsigned long long)got[b], (unsigned long long)want[b]);
			cr_assert_eq(got[n], 0xeeeeeeeeeeeeeeeeull, "%s: wrote past the keys",
				     xc->name);
		}
	}
}

/* kvidx_key_block() with a block's items as listed equals the chain (ingestd's path). */
Test(keys_extras, block_equals_chain)
{
	uint32_t t[XMAXB * XBS];
	uint64_t want[XMAXB];
	size_t c, a, b;

	for (c = 0; c < NXCASES; c++) {
		const struct xcase *xc = &xcases[c];

		xcase_tokens(xc, t);
		for (a = 0; a < 2; a++) {
			uint64_t parent = kvidx_key_root(algos[a], "", xc->root);

			xcase_ref(xc, algos[a], want);
			for (b = 0; b < xc->nblocks; b++) {
				size_t k = 0;

				while (xc->want[b][k])
					k++;
				parent = kvidx_key_block(algos[a], parent, t + b * XBS, XBS,
							 xc->want[b], k);
				cr_assert_eq(parent, want[b], "%s, %s, block %zu", xc->name,
					     kvidx_key_algo_name(algos[a]), b);
			}
		}
	}
}

/* Extras change exactly the blocks they key, and no extras is kvidx_key_chain(). */
Test(keys_extras, extras_isolate)
{
	static const struct kvidx_key_extras none = { 0 };
	uint32_t t[48];
	uint64_t plain[3], got[3];
	size_t a;

	seq_tokens(t, 48, 1);
	for (a = 0; a < 2; a++) {
		enum kvidx_key_algo algo = algos[a];
		uint64_t root = kvidx_key_root(algo, "", "m");
		struct kvidx_mm_item it = { 40, 4, "img" };
		struct kvidx_key_extras mm = { .mm = &it, .nmm = 1 }, salt = { .salt = "s" };

		cr_assert_eq(kvidx_key_chain(algo, root, t, 48, 16, plain, 3), 3);
		cr_assert_eq(kvidx_key_chain_ex(algo, root, t, 48, 16, NULL, got, 3), 3);
		cr_assert_arr_eq(got, plain, sizeof(plain));
		cr_assert_eq(kvidx_key_chain_ex(algo, root, t, 48, 16, &none, got, 3), 3);
		cr_assert_arr_eq(got, plain, sizeof(plain));
		cr_assert_eq(kvidx_key_block(algo, root, t, 16, NULL, 0), plain[0]);

		cr_assert_eq(kvidx_key_chain_ex(algo, root, t, 48, 16, &mm, got, 3), 3);
		cr_assert_eq(got[0], plain[0]);
		cr_assert_eq(got[1], plain[1]);
		cr_assert_neq(got[2], plain[2], "the item's block is keyed like text");

		cr_assert_eq(kvidx_key_chain_ex(algo, root, t, 48, 16, &salt, got, 3), 3);
		cr_assert_neq(got[0], plain[0], "the salt is not keyed");
		/* Every later key chains from a salted block 0, so they all differ. */
		cr_assert_neq(got[1], plain[1]);
		/* A salt with no full block keys nothing. */
		cr_assert_eq(kvidx_key_chain_ex(algo, root, t, 15, 16, &salt, got, 3), 0);
	}
}

Test(keys_extras, bad_input)
{
	static struct kvidx_mm_item many[KVIDX_KEY_MAX_MM + 1];
	struct kvidx_mm_item noid = { 0, 4, NULL };
	struct kvidx_key_extras ex = { .mm = many, .nmm = KVIDX_KEY_MAX_MM + 1 };
	uint32_t t[32];
	uint64_t out[2] = { 7, 7 };
	size_t i;

	seq_tokens(t, 32, 1);
	for (i = 0; i <= KVIDX_KEY_MAX_MM; i++)
		many[i] = (struct kvidx_mm_item){ (uint32_t)i, 1, "x" };
	errno = 0;
	cr_assert_eq(kvidx_key_chain_ex(KVIDX_KEY_CBOR_FNV, 1, t, 32, 16, &ex, out, 2), 0);
	cr_assert_eq(errno, E2BIG);
	ex.nmm = KVIDX_KEY_MAX_MM;
	cr_assert_eq(kvidx_key_chain_ex(KVIDX_KEY_CBOR_FNV, 1, t, 32, 16, &ex, out, 2), 2,
		     "KVIDX_KEY_MAX_MM items refused");
	out[0] = out[1] = 7;

	ex = (struct kvidx_key_extras){ .mm = NULL, .nmm = 1 };
	errno = 0;
	cr_assert_eq(kvidx_key_chain_ex(KVIDX_KEY_XXH64, 1, t, 32, 16, &ex, out, 2), 0);
	cr_assert_eq(errno, EINVAL);
	ex = (struct kvidx_key_extras){ .mm = &noid, .nmm = 1 };
	errno = 0;
	cr_assert_eq(kvidx_key_chain_ex(KVIDX_KEY_XXH64, 1, t, 32, 16, &ex, out, 2), 0);
	cr_assert_eq(errno, EINVAL);
	cr_assert_eq(out[0], 7, "out written on a refusal");

	ex = (struct kvidx_key_extras){ .salt = "s" };
	cr_assert_eq(kvidx_key_chain_ex(KVIDX_KEY_XXH64, 1, t, 32, 0, &ex, out, 2), 0);
	cr_assert_eq(kvidx_key_chain_ex(99, 1, t, 32, 16, &ex, out, 2), 0);
	cr_assert_eq(kvidx_key_chain_ex(KVIDX_KEY_XXH64, 1, t, 32, 16, &ex, out, 1), 1);
	cr_assert_eq(out[1], 7, "wrote past max");
	cr_assert_eq(kvidx_key_block(99, 1, t, 16, NULL, 0), 0);
}

/* ---- kvidx-hash with extras ---------------------------------------------------------------- */

/* "$(seq 1 16) $(seq 1 16) ..." for the case's tokens, plus a partial block. */
static void xcase_token_args(const struct xcase *c, char *buf, size_t sz)
{
	size_t b, off = 0;

	for (b = 0; b < c->nblocks; b++)
		off += (size_t)snprintf(buf + off, sz - off, "$(seq 1 16) ");
	snprintf(buf + off, sz - off, "$(seq 1 15)");
}

Test(keys_extras, tool_matches_api)
{
	char args[1024], toks[256], out[1024], want[1024];
	uint32_t t[XMAXB * XBS];
	uint64_t keys[XMAXB];
	size_t c, a, b, n, off;

	for (c = 0; c < NXCASES; c++) {
		const struct xcase *xc = &xcases[c];
		struct kvidx_key_extras ex = xcase_extras(xc);

		xcase_tokens(xc, t);
		xcase_token_args(xc, toks, sizeof(toks));
		for (a = 0; a < 2; a++) {
			n = kvidx_key_chain_ex(algos[a], kvidx_key_root(algos[a], "", xc->root), t,
					       xc->nblocks * XBS, XBS, &ex, keys, XMAXB);
			cr_assert_eq(n, xc->nblocks);
			for (b = 0, off = 0; b < n; b++)
				off += (size_t)snprintf(want + off, sizeof(want) - off,
							"0x%016llx\n", (unsigned long long)keys[b]);
			snprintf(args, sizeof(args), "--algo %s %s %s",
				 kvidx_key_algo_name(algos[a]), xc->flags, toks);
			cr_assert_eq(run_hash(args, out, sizeof(out)), 0, "%s", args);
			cr_assert_str_eq(out, want, "kvidx-hash %s", args);
		}
	}
}

/* With --parent the first block given is block 0 for --salt and --mm. */
Test(keys_extras, tool_parent_with_extras)
{
	static const char *const items[] = { "img", "s" };
	char out[256], want[64];
	uint32_t t[16];

	seq_tokens(t, 16, 1);
	snprintf(want, sizeof(want), "0x%016llx\n",
		 (unsigned long long)kvidx_key_block(KVIDX_KEY_CBOR_FNV, 0x1234567890abcdefull, t,
						     16, items, 2));
	cr_assert_eq(run_hash("--parent 0x1234567890abcdef --salt s --mm 3:1:img $(seq 1 16)",
			      out, sizeof(out)),
		     0);
	cr_assert_str_eq(out, want);
}

Test(keys_extras, tool_errors)
{
	static const char *const bad[] = {
		"--mm 1:2",       "--mm 1:2:",  "--mm :2:x",  "--mm 1::x", "--mm a:2:x",
		"--mm -1:2:x",    "--mm 1:4294967296:x",      "--mm 4294967296:1:x",
		"--mm ''",        "--mm ' 1:2:x'",
	};
	char cmd[256], out[4096];
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(cmd, sizeof(cmd), "%s $(seq 1 16) 2>&1", bad[i]);
		cr_assert_eq(run_hash(cmd, out, sizeof(out)), 2, "%s: %s", bad[i], out);
		cr_assert(strstr(out, "bad --mm '"), "%s: message does not name --mm: %s", bad[i],
			  out);
		cr_assert_eq(strncmp(out, "kvidx-hash: ", 12), 0, "%s", out);
	}
	cr_assert_eq(run_hash("--lora '' 1 2>&1", out, sizeof(out)), 2);
	cr_assert(strstr(out, "--lora"), "message does not name --lora: %s", out);
	cr_assert_eq(run_hash("--salt 2>&1", out, sizeof(out)), 2);
	cr_assert(strstr(out, "--salt"), "message does not name --salt: %s", out);
	cr_assert_eq(run_hash("$(i=0; while [ $i -le 1024 ]; do printf -- '--mm %d:1:x ' $i; "
			      "i=$((i+1)); done) 1 2>&1",
			      out, sizeof(out)),
		     2);
	cr_assert(strstr(out, "--mm"), "message does not name --mm: %s", out);
	cr_assert_eq(run_hash("$(i=0; while [ $i -lt 1024 ]; do printf -- '--mm %d:1:x ' $i; "
			      "i=$((i+1)); done) $(seq 1 16)",
			      out, sizeof(out)),
		     0, "1024 items refused");
	cr_assert_eq(run_hash("--help", out, sizeof(out)), 0);
	cr_assert(strstr(out, "--lora") && strstr(out, "--salt") && strstr(out, "--mm START:LEN:ID"),
		  "help lacks the extras flags: %s", out);
}

/*
 * Cross-check against a second, independent implementation: tests/keys_ref.py computes
 * the cbor-fnv keys of the same kvidx-hash flags with Python's cbor2 and derives the items
 * from the ranges itself. Needs Debian's /usr/bin/python3 with python3-cbor2; the C vectors
 * above do not.
 */
Test(keys_extras, cbor2_cross_check)
{
	char cmd[2048], toks[256], out[1024];
	char script[512];
	const char *slash = strrchr(__FILE__, '/');
	size_t c;
	FILE *p;

	if (system("/usr/bin/python3 -c 'import cbor2' >/dev/null 2>&1") != 0)
		cr_skip_test("/usr/bin/python3 with cbor2 (python3-cbor2) is not installed");
	snprintf(script, sizeof(script), "%.*skeys_ref.py", slash ? (int)(slash - __FILE__ + 1) : 0,
		 __FILE__);
	cr_assert_eq(access(script, R_OK), 0, "%s not found (run from the source tree)", script);
	for (c = 0; c < NXCASES; c++) {
		const struct xcase *xc = &xcases[c];
		struct tu_run tool;
		size_t len;
		int st;

		xcase_token_args(xc, toks, sizeof(toks));
		snprintf(cmd, sizeof(cmd), "/usr/bin/python3 '%s' %s %s", script, xc->flags, toks);
		p = popen(cmd, "r");
		cr_assert(p, "popen: %s", strerror(errno));
		len = fread(out, 1, sizeof(out) - 1, p);
		out[len] = '\0';
		st = pclose(p);
		cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s failed (%d)", cmd, st);
		cr_assert_gt(len, 0, "%s printed nothing", cmd);
		tool = tu_run_tool("kvidx-hash", "%s %s", xc->flags, toks);
		cr_assert_eq(tool.status, 0);
		cr_assert_str_eq(tool.out, out, "%s: kvidx-hash and cbor2 disagree", xc->name);
		free(tool.out);
	}
}
