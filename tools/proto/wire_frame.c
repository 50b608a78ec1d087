/*
 * wire_frame.c — the two frames around a payload: the topic (kv@POD@MODEL; SGLang's epoch
 * marker after a NUL) and the sequence frame (8 bytes, or 8 + a 16-byte publisher id).
 */
#include "wire_int.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- topic and sequence frames --------------------------------------------------------------- */

static bool copy_part(char *dst, size_t cap, const char *src, size_t n)
{
	if (n >= cap)
		return false;
	if (n)
		memcpy(dst, src, n);
	dst[n] = '\0';
	return true;
}

int kvw_parse_topic(const char *topic, size_t len, char *pod, size_t podlen, char *model,
		    size_t modellen)
{
	const char *a1 = NULL, *a2 = NULL, *a3 = NULL;
	bool ok;

	if (podlen == 0 || modellen == 0)
		return -EINVAL;
	pod[0] = model[0] = '\0';
	if (len == 0)
		return 0;
	if (memchr(topic, '\0', len))
		return -EINVAL;
	a1 = memchr(topic, '@', len);
	if (a1)
		a2 = memchr(a1 + 1, '@', len - (size_t)(a1 + 1 - topic));
	if (a2)
		a3 = memchr(a2 + 1, '@', len - (size_t)(a2 + 1 - topic));
	if (a2 && !a3)
		ok = copy_part(pod, podlen, a1 + 1, (size_t)(a2 - a1 - 1)) &&
		     copy_part(model, modellen, a2 + 1, len - (size_t)(a2 + 1 - topic));
	else
		ok = true; /* "", "kv-events", ...: names neither */
	if (!ok) {
		pod[0] = model[0] = '\0';
		return -ENAMETOOLONG;
	}
	return 0;
}

/* 128 bits of FNV-1a over s (two 64-bit lanes of different offsets), big-endian. */
static void hash128(const char *s, size_t n, uint8_t out[KVW_PUB_ID_LEN])
{
	uint64_t h[2] = { 0xcbf29ce484222325ull, 0x84222325cbf29ce4ull };

	for (int l = 0; l < 2; l++)
		for (size_t i = 0; i < n; i++)
			h[l] = (h[l] ^ (uint8_t)s[i]) * 0x100000001b3ull;
	for (int i = 0; i < 16; i++)
		out[i] = (uint8_t)(h[i / 8] >> (56 - 8 * (i % 8)));
}

static int hexval(char ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	if (ch >= 'A' && ch <= 'F')
		return ch - 'A' + 10;
	return -1;
}

/* The publisher id an SGLang epoch names: its 32 hex digits, else a hash of the string. */
static void epoch_id(const char *e, size_t n, uint8_t id[KVW_PUB_ID_LEN])
{
	bool hex = n == 2 * KVW_PUB_ID_LEN;

	for (size_t i = 0; hex && i < n; i++)
		hex = hexval(e[i]) >= 0;
	if (!hex) {
		hash128(e, n, id);
		return;
	}
	for (size_t i = 0; i < KVW_PUB_ID_LEN; i++)
		id[i] = (uint8_t)(hexval(e[2 * i]) << 4 | hexval(e[2 * i + 1]));
}

int kvw_topic_split(const char *topic, size_t len, size_t *base_len, struct kvw_seqf *sf)
{
	static const char mark[] = "\0sgl-kv-epoch=", snap[] = "\0sgl-kv-snapshot=";
	const size_t ml = sizeof mark - 1, sl = sizeof snap - 1;
	const char *nul = len ? memchr(topic, '\0', len) : NULL;
	const char *e, *end, *next;

	*base_len = nul ? (size_t)(nul - topic) : len;
	if (!nul)
		return 0;
	if ((size_t)(topic + len - nul) <= ml || memcmp(nul, mark, ml)) {
		*base_len = 0;
		return -EINVAL;
	}
	e = nul + ml;
	end = topic + len;
	next = memchr(e, '\0', (size_t)(end - e));
	if (next && ((size_t)(end - next) < sl || memcmp(next, snap, sl) ||
		     memchr(next + 1, '\0', (size_t)(end - next - 1)))) {
		*base_len = 0;
		return -EINVAL;
	}
	if (next)
		end = next;
	if (end == e) {
		*base_len = 0;
		return -EINVAL;
	}
	if (sf && !sf->has_id) {
		sf->has_id = true;
		epoch_id(e, (size_t)(end - e), sf->id);
	}
	return 0;
}

bool kvw_seq_frame(const void *frame, size_t len, struct kvw_seqf *out)
{
	if (len != 8 && len != 8 + KVW_PUB_ID_LEN)
		return false;
	out->seq = wi_load_be(frame, 8);
	out->has_id = len > 8;
	if (out->has_id)
		memcpy(out->id, (const uint8_t *)frame + 8, KVW_PUB_ID_LEN);
	else
		memset(out->id, 0, KVW_PUB_ID_LEN);
	return true;
}

bool kvw_seq_get(const void *frame, size_t len, uint64_t *seq)
{
	if (len != 8)
		return false;
	*seq = wi_load_be(frame, 8);
	return true;
}

void kvw_seq_put(void *frame, uint64_t seq)
{
	uint8_t *p = frame;

	for (int i = 7; i >= 0; i--, seq >>= 8)
		p[i] = (uint8_t)seq;
}

