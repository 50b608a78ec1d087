/*
 * hash.c — engine block hashes: the hashes a vLLM engine would publish for the fake pod's
 * blocks, not kvidx request keys.
 *
 * Block i of a prompt is XXH64(LE64(parent) || LE32(token)..., seed ENGINE_SEED) over its
 * block_size tokens, parent being block i-1's engine hash or 0 for block 0 (published as a
 * nil parent_block_hash). Deterministic, so tests can predict them, and never equal to the
 * request keys kvidx_key_chain() computes, so consumers must map engine hashes to keys.
 */
#include "fakepod.h"

#include <xxhash.h>

#include "cli.h"

#define ENGINE_SEED 0x66616b65706f6431ull /* "fakepod1": engine hashes, not request keys */

static uint64_t engine_hash(uint64_t parent, const uint32_t *tokens, size_t n)
{
	static unsigned char *buf; /* the hashed bytes, grown to the largest block */
	static size_t cap;
	size_t len = 8 + 4 * n, k = 0;

	tc_grow(&buf, &cap, len, 1);
	for (int i = 0; i < 8; i++)
		buf[k++] = (unsigned char)(parent >> (8 * i));
	for (size_t i = 0; i < n; i++) {
		buf[k++] = (unsigned char)tokens[i];
		buf[k++] = (unsigned char)(tokens[i] >> 8);
		buf[k++] = (unsigned char)(tokens[i] >> 16);
		buf[k++] = (unsigned char)(tokens[i] >> 24);
	}
	return XXH64(buf, len, ENGINE_SEED);
}

void engine_chain(uint64_t parent, const uint32_t *tokens, size_t nblocks, uint32_t bs,
		  uint64_t *out)
{
	for (size_t i = 0; i < nblocks; i++)
		parent = out[i] = engine_hash(parent, tokens + i * bs, bs);
}
