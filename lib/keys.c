/*
 * keys.c — request keys and tier names (docs/DESIGN.md "Request keys and engine keys").
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
 * A block's extra is null for a text block, or llm-d's list of {"Hash": s} items: the
 * identifiers of the multimodal items overlapping the block, then the cache salt on block 0
 * (kvidx_key_block() takes a block's items as given, kvidx_key_chain_ex() derives them from
 * a prompt's item ranges). The root's extra is the model (or LoRA) name itself.
 *
 * kvidx_corr_id() (a request id string -> a correlation id) is here too: a pure hash of a
 * string, like the keys, though it names a request rather than a block.
 *
 * Everything here is a pure function of its arguments (kvidx_key_chain_ex() sets errno when
 * it refuses its input) and safe to call from any thread.
 */
#include <errno.h>
#include <stdbool.h>
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
#define CBOR_MAP (5u << 5)
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

static inline uint64_t fnv1a_byte(uint64_t h, unsigned b)
{
	return (h ^ (b & 0xffu)) * FNV64_PRIME;
}

/*
 * Feeds the head of a CBOR data item (major type and argument) to the hash. Canonical CBOR
 * requires the shortest form: the argument in the initial byte below 24, else in 1, 2, 4 or 8
 * big-endian bytes. The bytes go straight into the hash (no staging buffer): token ids make
 * this the inner loop of keying a block.
 */
static inline uint64_t fnv_cbor_head(uint64_t h, unsigned major, uint64_t v)
{
	if (v < 24)
		return fnv1a_byte(h, major | (unsigned)v);
	if (v <= 0xff)
		return fnv1a_byte(fnv1a_byte(h, major | 24), (unsigned)v);
	if (v <= 0xffff) {
		h = fnv1a_byte(h, major | 25);
		h = fnv1a_byte(h, (unsigned)(v >> 8));
		return fnv1a_byte(h, (unsigned)v);
	}
	if (v <= 0xffffffffull) {
		h = fnv1a_byte(h, major | 26);
		for (int i = 3; i >= 0; i--)
			h = fnv1a_byte(h, (unsigned)(v >> (8 * i)));
		return h;
	}
	h = fnv1a_byte(h, major | 27);
	for (int i = 7; i >= 0; i--)
		h = fnv1a_byte(h, (unsigned)(v >> (8 * i)));
	return h;
}

/* ---- one block's hash, either algorithm ----------------------------------------------- */

static void put_le64(unsigned char *b, uint64_t v)
{
	int i;

	for (i = 0; i < 8; i++)
		b[i] = (unsigned char)(v >> (8 * i));
}

/*
 * The hash of one [parent, tokens, extra], fed piece by piece: bh_begin(), then for the
 * extra either bh_text() once (the root's model name) or bh_items(k) followed by k calls
 * of bh_item(), then bh_end(). Nothing is buffered but a small stack staging area.
 *
 *   cbor-fnv: FNV-1a-64 over the canonical CBOR of the 3-array. tokens are an array of
 *             unsigned integers (CBOR null for the root); the extra is null, a text string
 *             (the root's model) or an array of k maps {"Hash": text}.
 *   xxh64:    XXH64 (seed 0) over LE64(parent) || LE32(token)... || LE64(len s) || s for
 *             each extra string s; a null extra adds nothing.
 */
struct blk_hash {
	enum kvidx_key_algo algo;
	uint64_t fnv;
	XXH64_state_t xxh;
};

static void bh_begin(struct blk_hash *b, enum kvidx_key_algo algo, uint64_t parent,
		     const uint32_t *tokens, size_t ntokens, bool root)
{
	unsigned char buf[1024];
	size_t i, n = 0;

	b->algo = algo;
	if (algo == KVIDX_KEY_CBOR_FNV) {
		unsigned char null = CBOR_NULL;
		uint64_t h = FNV64_OFFSET;

		h = fnv_cbor_head(h, CBOR_ARRAY, 3);
		h = fnv_cbor_head(h, CBOR_UINT, parent);
		if (root) {
			h = fnv1a(h, &null, 1);
		} else {
			h = fnv_cbor_head(h, CBOR_ARRAY, ntokens);
			for (i = 0; i < ntokens; i++)
				h = fnv_cbor_head(h, CBOR_UINT, tokens[i]);
		}
		b->fnv = h;
		return;
	}
	/* Tokens go little-endian through buf, so the key does not depend on byte order. */
	XXH64_reset(&b->xxh, 0);
	put_le64(buf, parent);
	XXH64_update(&b->xxh, buf, 8);
	for (i = 0; i < ntokens; i++) {
		uint32_t t = tokens[i];

		buf[n++] = (unsigned char)t;
		buf[n++] = (unsigned char)(t >> 8);
		buf[n++] = (unsigned char)(t >> 16);
		buf[n++] = (unsigned char)(t >> 24);
		if (n == sizeof(buf)) {
			XXH64_update(&b->xxh, buf, n);
			n = 0;
		}
	}
	if (n)
		XXH64_update(&b->xxh, buf, n);
}

/* A string: a CBOR text string, or LE64(len) || bytes for xxh64. */
static void bh_text(struct blk_hash *b, const char *s)
{
	size_t len = strlen(s);

	if (b->algo == KVIDX_KEY_CBOR_FNV) {
		b->fnv = fnv_cbor_head(b->fnv, CBOR_TEXT, len);
		b->fnv = fnv1a(b->fnv, s, len);
	} else {
		unsigned char le[8];

		put_le64(le, len);
		XXH64_update(&b->xxh, le, 8);
		XXH64_update(&b->xxh, s, len);
	}
}

/* The head of an extra of k items: CBOR null for none, else an array of k (cbor-fnv). */
static void bh_items(struct blk_hash *b, size_t k)
{
	unsigned char null = CBOR_NULL;

	if (b->algo != KVIDX_KEY_CBOR_FNV)
		return;
	if (k)
		b->fnv = fnv_cbor_head(b->fnv, CBOR_ARRAY, k);
	else
		b->fnv = fnv1a(b->fnv, &null, 1);
}

/* One item: the map {"Hash": s} (cbor-fnv: a1 64 "Hash" then s), or the string (xxh64). */
static void bh_item(struct blk_hash *b, const char *s)
{
	static const unsigned char hash_key[] = { CBOR_MAP | 1, CBOR_TEXT | 4, 'H', 'a', 's', 'h' };

	if (b->algo == KVIDX_KEY_CBOR_FNV)
		b->fnv = fnv1a(b->fnv, hash_key, sizeof(hash_key));
	bh_text(b, s ? s : "");
}

static uint64_t bh_end(struct blk_hash *b)
{
	return b->algo == KVIDX_KEY_CBOR_FNV ? b->fnv : XXH64_digest(&b->xxh);
}

static bool algo_known(enum kvidx_key_algo algo)
{
	return algo == KVIDX_KEY_CBOR_FNV || algo == KVIDX_KEY_XXH64;
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
	struct blk_hash b;
	uint64_t init;

	if (!seed)
		seed = "";
	if (!model)
		model = "";
	switch (algo) {
	case KVIDX_KEY_CBOR_FNV:
		init = fnv1a(FNV64_OFFSET, seed, strlen(seed));
		break;
	case KVIDX_KEY_XXH64:
		init = XXH64(seed, strlen(seed), 0);
		break;
	default:
		return 0;
	}
	bh_begin(&b, algo, init, NULL, 0, true);
	bh_text(&b, model);
	return bh_end(&b);
}

uint64_t kvidx_key_block(enum kvidx_key_algo algo, uint64_t parent, const uint32_t *tokens,
			 size_t ntokens, const char *const *items, size_t nitems)
{
	struct blk_hash b;
	size_t i;

	if (!algo_known(algo))
		return 0;
	if (!items)
		nitems = 0;
	bh_begin(&b, algo, parent, tokens, ntokens, false);
	bh_items(&b, nitems);
	for (i = 0; i < nitems; i++)
		bh_item(&b, items[i]);
	return bh_end(&b);
}

/*
 * Each block's key hashes the previous key and the block's tokens, with no extra (a null
 * extra for cbor-fnv, no extra strings for xxh64). An unknown algo yields 0 keys.
 */
size_t kvidx_key_chain(enum kvidx_key_algo algo, uint64_t parent, const uint32_t *tokens,
		       size_t ntokens, uint32_t block_size, uint64_t *out, size_t max)
{
	size_t n, i;

	if (!block_size || !algo_known(algo))
		return 0;
	n = ntokens / block_size;
	if (n > max)
		n = max;
	for (i = 0; i < n; i++) {
		struct blk_hash b;

		bh_begin(&b, algo, parent, tokens + i * block_size, block_size, false);
		bh_items(&b, 0);
		parent = bh_end(&b);
		out[i] = parent;
	}
	return n;
}

_Static_assert(KVIDX_KEY_MAX_MM <= 65536, "kvidx_key_chain_ex() sorts items by uint16_t index");

static uint64_t mm_end(const struct kvidx_mm_item *it)
{
	return (uint64_t)it->start + it->len;
}

/*
 * Blocks are keyed in order, the items walked in start order through ord[] (indices into
 * ex->mm, stably sorted by start). An item whose range ends at or before a block's start is
 * done for every later block too; lo skips the leading run of such items, and the scan of a
 * block stops at the first item starting at or after its end. For each block the items are
 * walked twice: once to count them (the CBOR array head comes first), once to hash them.
 */
size_t kvidx_key_chain_ex(enum kvidx_key_algo algo, uint64_t parent, const uint32_t *tokens,
			  size_t ntokens, uint32_t block_size, const struct kvidx_key_extras *ex,
			  uint64_t *out, size_t max)
{
	uint16_t ord[KVIDX_KEY_MAX_MM];
	const struct kvidx_mm_item *mm;
	const char *salt;
	size_t n, nmm, i, j, lo = 0;

	if (!ex)
		return kvidx_key_chain(algo, parent, tokens, ntokens, block_size, out, max);
	if (!block_size || !algo_known(algo))
		return 0;
	mm = ex->mm;
	nmm = ex->nmm;
	if (nmm > KVIDX_KEY_MAX_MM) {
		errno = E2BIG;
		return 0;
	}
	if (nmm && !mm) {
		errno = EINVAL;
		return 0;
	}
	/* Insertion sort: stable, and linear for items already in order (the usual case). */
	for (i = 0; i < nmm; i++) {
		if (!mm[i].id) {
			errno = EINVAL;
			return 0;
		}
		for (j = i; j > 0 && mm[ord[j - 1]].start > mm[i].start; j--)
			ord[j] = ord[j - 1];
		ord[j] = (uint16_t)i;
	}
	salt = ex->salt && *ex->salt ? ex->salt : NULL;

	n = ntokens / block_size;
	if (n > max)
		n = max;
	for (i = 0; i < n; i++) {
		uint64_t bstart = (uint64_t)i * block_size, bend = bstart + block_size;
		size_t k = (i == 0 && salt) ? 1 : 0;
		struct blk_hash b;

		while (lo < nmm && mm_end(&mm[ord[lo]]) <= bstart)
			lo++;
		for (j = lo; j < nmm && mm[ord[j]].start < bend; j++)
			k += mm_end(&mm[ord[j]]) > bstart;

		bh_begin(&b, algo, parent, tokens + bstart, block_size, false);
		bh_items(&b, k);
		for (j = lo; j < nmm && mm[ord[j]].start < bend; j++)
			if (mm_end(&mm[ord[j]]) > bstart)
				bh_item(&b, mm[ord[j]].id);
		if (i == 0 && salt)
			bh_item(&b, salt);
		parent = bh_end(&b);
		out[i] = parent;
	}
	return n;
}

enum kvidx_tier kvidx_tier_from_medium(const char *medium)
{
	/* vLLM (GPU, CPU, CPU_PINNED, STORAGE; FS and OBJ in 0.26), llm-d (SHARED_STORAGE,
	 * OBJECT_STORE), SGLang (CPU_TIER1, CPU_TIER2) (docs/events.md "Media"). */
	static const char *const cpu[] = { "CPU", "CPU_PINNED", "CPU_TIER1" };
	static const char *const disk[] = { "STORAGE",      "FS",        "OBJ", "SHARED_STORAGE",
					    "OBJECT_STORE", "CPU_TIER2", "DISK" };

	if (!medium || !*medium || !strcasecmp(medium, "GPU"))
		return KVIDX_TIER_GPU;
	for (size_t i = 0; i < sizeof(cpu) / sizeof(cpu[0]); i++)
		if (!strcasecmp(medium, cpu[i]))
			return KVIDX_TIER_CPU;
	for (size_t i = 0; i < sizeof(disk) / sizeof(disk[0]); i++)
		if (!strcasecmp(medium, disk[i]))
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

uint64_t kvidx_corr_id(const char *request_id, size_t len)
{
	uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a-64 */

	for (size_t i = 0; request_id && i < len; i++)
		h = (h ^ (unsigned char)request_id[i]) * 0x100000001b3ull;
	return h ? h : 1;
}
