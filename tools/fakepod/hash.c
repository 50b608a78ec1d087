/*
 * hash.c — engine block hashes: the hashes a vLLM engine would publish for the fake pod's
 * blocks, not kvidx request keys.
 *
 * Block i of a prompt is XXH64(LE64(parent) || LE32(token)... || extras, seed ENGINE_SEED)
 * over its block_size tokens, parent being block i-1's engine hash or 0 for block 0
 * (published as a nil parent_block_hash). A block with extra_keys (LoRA name, multimodal
 * items, salt: events.c block_items()) appends, per item, its kind byte, LE32(length), its
 * bytes and, for a tuple, LE64(offset), as vLLM folds extra_keys into its hashes; a block
 * without adds nothing. Deterministic, so tests can predict them, and never equal to the
 * request keys kvidx_key_chain() computes, so consumers must map engine hashes to keys.
 */
#include "fakepod.h"

#include <string.h>

#include <xxhash.h>

#include "cli.h"

#define ENGINE_SEED 0x66616b65706f6431ull /* "fakepod1": engine hashes, not request keys */

static void put_le(unsigned char *b, size_t *k, uint64_t v, int bytes)
{
	for (int i = 0; i < bytes; i++)
		b[(*k)++] = (unsigned char)(v >> (8 * i));
}

static uint64_t engine_hash(uint64_t parent, const uint32_t *tokens, size_t n,
			    const struct kvw_xitem *it, size_t nit)
{
	static unsigned char *buf; /* the hashed bytes, grown to the largest block */
	static size_t cap;
	size_t len = 8 + 4 * n, k = 0;

	for (size_t j = 0; j < nit; j++)
		len += 1 + 4 + it[j].len + 8;
	tc_grow(&buf, &cap, len, 1);
	put_le(buf, &k, parent, 8);
	for (size_t i = 0; i < n; i++)
		put_le(buf, &k, tokens[i], 4);
	for (size_t j = 0; j < nit; j++) {
		buf[k++] = (unsigned char)it[j].kind;
		put_le(buf, &k, it[j].len, 4);
		memcpy(buf + k, it[j].str, it[j].len);
		k += it[j].len;
		if (it[j].has_offset)
			put_le(buf, &k, (uint64_t)it[j].offset, 8);
	}
	return XXH64(buf, k, ENGINE_SEED);
}

void engine_chain_x(uint64_t parent, const uint32_t *tokens, size_t first, size_t nblocks,
		    uint32_t bs, const struct prompt_x *px, uint64_t *out)
{
	struct kvw_xitem it[BLOCK_ITEMS_MAX];

	for (size_t i = 0; i < nblocks; i++) {
		size_t nit = block_items(px, first + i, bs, it);

		parent = out[i] = engine_hash(parent, tokens + i * bs, bs, it, nit);
	}
}

void engine_chain(uint64_t parent, const uint32_t *tokens, size_t nblocks, uint32_t bs,
		  uint64_t *out)
{
	engine_chain_x(parent, tokens, 0, nblocks, bs, NULL, out);
}
