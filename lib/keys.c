/*
 * keys.c — request keys and tier names (DESIGN.md section 3).
 *
 * A request key names one full block of prompt tokens together with everything before it:
 * each key hashes its parent key and the block's tokens, and block 0's parent is a per-model
 * root. Routers compute these keys from prompts; ingestd computes the same keys from the
 * tokens in BlockStored events, so both sides must agree bit for bit.
 *
 * Two algorithms:
 *
 *   - cbor-fnv, compatible with llm-d's kvblock token processor: FNV-1a-64 over the canonical
 *     CBOR encoding of the 3-array [parent, tokens, extra]. The CBOR bytes are generated and
 *     fed to FNV on the fly, so a block of any size hashes with no buffer and no malloc.
 *   - xxh64: XXH64 (seed 0) over LE64(parent) || LE32(token)... || LE64(len s) || s for each
 *     extra string s, through xxhash's streaming state.
 *
 * Everything here is a pure function of its arguments and safe to call from any thread.
 */
#include <errno.h>
#include <string.h>
#include <strings.h>

/*
 * The xxhash implementation is compiled into this file (all its symbols static), so the
 * XXH64_state_t kept on the stack below always has the layout the code expects, whatever
 * libxxhash version is installed at run time.
 */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "kvidx.h"

/* ---- cbor-fnv ---------------------------------------------------------------------------- */

#define FNV64_OFFSET 0xcbf29ce484222325ull
#define FNV64_PRIME 0x100000001b3ull

/* CBOR major types (RFC 8949 section 3.1), already shifted into the initial byte. */
#define CBOR_UINT (0u << 5)
#define CBOR_TEXT (3u << 5)
#define CBOR_ARRAY (4u << 5)
#define CBOR_NULL 0xf6u

static inline uint64_t fnv1a(uint64_t h, const void *buf, size_t len)
{
	const unsigned char *p = buf;

	while (len--) {
		h ^= *p++;
		h *= FNV64_PRIME;
	}
	return h;
}

/*
 * Feeds the head of a CBOR data item (major type and argument) to the hash. Canonical CBOR
 * requires the shortest form: the argument in the initial byte below 24, else in 1, 2, 4 or 8
 * big-endian bytes.
 */
static inline uint64_t fnv_cbor_head(uint64_t h, unsigned major, uint64_t v)
{
	unsigned char b[9];
	size_t n, i;

	if (v < 24) {
		b[0] = (unsigned char)(major | v);
		return fnv1a(h, b, 1);
	}
	if (v <= 0xff) {
		b[0] = (unsigned char)(major | 24);
		n = 1;
	} else if (v <= 0xffff) {
		b[0] = (unsigned char)(major | 25);
		n = 2;
	} else if (v <= 0xffffffffull) {
		b[0] = (unsigned char)(major | 26);
		n = 4;
	} else {
		b[0] = (unsigned char)(major | 27);
		n = 8;
	}
	for (i = 0; i < n; i++)
		b[1 + i] = (unsigned char)(v >> (8 * (n - 1 - i)));
	return fnv1a(h, b, 1 + n);
}

/*
 * H(parent, tokens, extra) = FNV-1a-64(canonical CBOR of [parent, tokens, extra]).
 * tokens NULL encodes CBOR null (the root); otherwise an array of ntokens unsigned integers.
 * extra NULL encodes CBOR null (a text block); otherwise a text string (the model name).
 */
static uint64_t cbor_fnv_hash(uint64_t parent, const uint32_t *tokens, size_t ntokens,
			      const char *extra)
{
	uint64_t h = FNV64_OFFSET;
	unsigned char null = CBOR_NULL;
	size_t i;

	h = fnv_cbor_head(h, CBOR_ARRAY, 3);
	h = fnv_cbor_head(h, CBOR_UINT, parent);
	if (tokens) {
		h = fnv_cbor_head(h, CBOR_ARRAY, ntokens);
		for (i = 0; i < ntokens; i++)
			h = fnv_cbor_head(h, CBOR_UINT, tokens[i]);
	} else {
		h = fnv1a(h, &null, 1);
	}
	if (extra) {
		size_t len = strlen(extra);

		h = fnv_cbor_head(h, CBOR_TEXT, len);
		h = fnv1a(h, extra, len);
	} else {
		h = fnv1a(h, &null, 1);
	}
	return h;
}

/* ---- xxh64 ------------------------------------------------------------------------------- */

static void put_le64(unsigned char *b, uint64_t v)
{
	int i;

	for (i = 0; i < 8; i++)
		b[i] = (unsigned char)(v >> (8 * i));
}

/*
 * B(parent, tokens, extra) = XXH64(LE64(parent) || LE32(tokens[i])... [|| LE64(len extra) ||
 * extra], seed 0). Tokens are converted to little-endian through a small stack buffer, so
 * the result does not depend on the host's byte order.
 */
static uint64_t xxh64_hash(uint64_t parent, const uint32_t *tokens, size_t ntokens,
			   const char *extra)
{
	XXH64_state_t st;
	unsigned char buf[1024];
	size_t i, n = 0;

	XXH64_reset(&st, 0);
	put_le64(buf, parent);
	XXH64_update(&st, buf, 8);
	for (i = 0; i < ntokens; i++) {
		uint32_t t = tokens[i];

		buf[n++] = (unsigned char)t;
		buf[n++] = (unsigned char)(t >> 8);
		buf[n++] = (unsigned char)(t >> 16);
		buf[n++] = (unsigned char)(t >> 24);
		if (n == sizeof(buf)) {
			XXH64_update(&st, buf, n);
			n = 0;
		}
	}
	if (n)
		XXH64_update(&st, buf, n);
	if (extra) {
		size_t len = strlen(extra);

		put_le64(buf, len);
		XXH64_update(&st, buf, 8);
		XXH64_update(&st, extra, len);
	}
	return XXH64_digest(&st);
}

/* ---- public ------------------------------------------------------------------------------ */

int kvidx_key_algo_parse(const char *s, enum kvidx_key_algo *out)
{
	if (!s)
		return -EINVAL;
	if (!strcmp(s, "cbor-fnv")) {
		*out = KVIDX_KEY_CBOR_FNV;
		return 0;
	}
	if (!strcmp(s, "xxh64")) {
		*out = KVIDX_KEY_XXH64;
		return 0;
	}
	return -EINVAL;
}

const char *kvidx_key_algo_name(enum kvidx_key_algo algo)
{
	switch (algo) {
	case KVIDX_KEY_CBOR_FNV:
		return "cbor-fnv";
	case KVIDX_KEY_XXH64:
		return "xxh64";
	}
	return "?";
}

/*
 * The root is the hash of the seed's initial value with no tokens and the model name as the
 * only extra. For cbor-fnv the initial value is FNV-1a-64 of the raw seed bytes (not CBOR),
 * as llm-d's NewChunkedTokenDatabase computes it; the root is then llm-d's getInitHash().
 * An unknown algo yields 0.
 */
uint64_t kvidx_key_root(enum kvidx_key_algo algo, const char *seed, const char *model)
{
	if (!seed)
		seed = "";
	if (!model)
		model = "";
	switch (algo) {
	case KVIDX_KEY_CBOR_FNV:
		return cbor_fnv_hash(fnv1a(FNV64_OFFSET, seed, strlen(seed)), NULL, 0, model);
	case KVIDX_KEY_XXH64:
		return xxh64_hash(XXH64(seed, strlen(seed), 0), NULL, 0, model);
	}
	return 0;
}

/*
 * Each block's key hashes the previous key and the block's tokens, with no extra (a null
 * extra for cbor-fnv, no extra strings for xxh64). An unknown algo yields 0 keys.
 */
size_t kvidx_key_chain(enum kvidx_key_algo algo, uint64_t parent, const uint32_t *tokens,
		       size_t ntokens, uint32_t block_size, uint64_t *out, size_t max)
{
	size_t n, i;

	if (!block_size || (algo != KVIDX_KEY_CBOR_FNV && algo != KVIDX_KEY_XXH64))
		return 0;
	n = ntokens / block_size;
	if (n > max)
		n = max;
	for (i = 0; i < n; i++) {
		const uint32_t *blk = tokens + i * block_size;

		if (algo == KVIDX_KEY_CBOR_FNV)
			parent = cbor_fnv_hash(parent, blk, block_size, NULL);
		else
			parent = xxh64_hash(parent, blk, block_size, NULL);
		out[i] = parent;
	}
	return n;
}

enum kvidx_tier kvidx_tier_from_medium(const char *medium)
{
	if (!medium || !*medium || !strcasecmp(medium, "GPU"))
		return KVIDX_TIER_GPU;
	if (!strcasecmp(medium, "CPU"))
		return KVIDX_TIER_CPU;
	if (!strcasecmp(medium, "DISK"))
		return KVIDX_TIER_DISK;
	return KVIDX_TIER_OTHER;
}

const char *kvidx_tier_name(enum kvidx_tier tier)
{
	switch (tier) {
	case KVIDX_TIER_GPU:
		return "gpu";
	case KVIDX_TIER_CPU:
		return "cpu";
	case KVIDX_TIER_DISK:
		return "disk";
	case KVIDX_TIER_OTHER:
		break;
	}
	return "other";
}
