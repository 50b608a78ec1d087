/*
 * test_keys.c — request keys, algorithm names and tier names (lib/keys.c), and the
 * kvidx-hash tool.
 *
 * The check values 0x8464eee8f2cf3412 (cbor-fnv) and 0xbc179097a38e1274 (xxh64) come from
 * DESIGN.md section 3; the cbor-fnv one is what llm-d's token processor produces. The
 * "wide" and "big" vectors were computed by an independent reference encoder (Python, byte
 * strings built by hand) to cover every CBOR integer width and multi-byte array lengths.
 *
 * The tool tests run $KVIDX_BIN/kvidx-hash; `make test` sets KVIDX_BIN.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
