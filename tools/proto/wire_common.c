/*
 * wire_common.c — what the codec's decoder and encoder share (wire_int.h): the schema tables
 * of the event types (fields in positional order, required and always-written counts), the
 * decoder's error messages, pool growth and big-endian loads.
 */
#include "wire_int.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- schema tables --------------------------------------------------------------------- */


const char *const wi_field_names[F_COUNT] = {
	[F_HASHES] = "block_hashes",
	[F_PARENT] = "parent_block_hash",
	[F_TOKENS] = "token_ids",
	[F_BLOCK_SIZE] = "block_size",
	[F_LORA_ID] = "lora_id",
	[F_MEDIUM] = "medium",
	[F_LORA_NAME] = "lora_name",
	[F_EXTRA_KEYS] = "extra_keys",
	[F_GROUP_IDX] = "group_idx",
	[F_SPEC_KIND] = "kv_cache_spec_kind",
	[F_SLIDING_WINDOW] = "kv_cache_spec_sliding_window",
	[F_LOCALITY] = "locality",
	[F_OWNERSHIP] = "ownership",
	[F_SESSION_ID] = "session_id",
	[F_REMAINING] = "remaining_copy_counts",
};


static const enum kvw_field stored_fields[] = {
	F_HASHES,     F_PARENT,     F_TOKENS,    F_BLOCK_SIZE, F_LORA_ID,        F_MEDIUM,
	F_LORA_NAME,  F_EXTRA_KEYS, F_GROUP_IDX, F_SPEC_KIND,  F_SLIDING_WINDOW, F_LOCALITY,
	F_OWNERSHIP,  F_SESSION_ID,
};
/* remaining_copy_counts is only a proposal (vLLM #48933): positionally it is taken to follow
 * ownership; map-form events name it. */
static const enum kvw_field removed_fields[] = { F_HASHES,   F_MEDIUM,    F_GROUP_IDX,
						 F_LOCALITY, F_OWNERSHIP, F_REMAINING };

const struct schema wi_schemas[] = {
	{ KVW_BLOCK_STORED, "BlockStored", stored_fields,
	  sizeof stored_fields / sizeof stored_fields[0], 4, 7 },
	{ KVW_BLOCK_REMOVED, "BlockRemoved", removed_fields,
	  sizeof removed_fields / sizeof removed_fields[0], 1, 2 },
	{ KVW_ALL_BLOCKS_CLEARED, "AllBlocksCleared", NULL, 0, 0, 0 },
};


const struct schema *wi_schema_of(enum kvw_type type)
{
	for (size_t i = 0; i < WI_NSCHEMAS; i++)
		if (wi_schemas[i].type == type)
			return &wi_schemas[i];
	return NULL;
}

const char *kvw_type_name(enum kvw_type type)
{
	const struct schema *s = wi_schema_of(type);

	return s ? s->tag : "?";
}

bool wi_str_eq(const msgpack_object_str *s, const char *lit)
{
	size_t n = strlen(lit);

	return s->size == n && memcmp(s->ptr, lit, n) == 0;
}

/* ---- decoder: context and error messages -------------------------------------------------- */


int wi_fail(struct dctx *c, int rc, const char *fmt, ...)
{
	size_t n = 0;
	va_list ap;

	if (c->errlen == 0)
		return rc;
	c->err[0] = '\0';
	if (c->in_event) {
		int k = snprintf(c->err, c->errlen, "event %zu: ", c->evi);

		n = k < 0 ? 0 : (size_t)k;
		if (n >= c->errlen)
			return rc;
	}
	va_start(ap, fmt);
	vsnprintf(c->err + n, c->errlen - n, fmt, ap);
	va_end(ap);
	return rc;
}

/* Describes what an object is for "got ..." in messages: its type, and its value for ints. */
const char *wi_describe(const msgpack_object *o, char *buf, size_t len)
{
	switch (o->type) {
	case MSGPACK_OBJECT_NIL: return "nil";
	case MSGPACK_OBJECT_BOOLEAN: return "bool";
	case MSGPACK_OBJECT_POSITIVE_INTEGER:
		snprintf(buf, len, "int %llu", (unsigned long long)o->via.u64);
		return buf;
	case MSGPACK_OBJECT_NEGATIVE_INTEGER:
		snprintf(buf, len, "int %lld", (long long)o->via.i64);
		return buf;
	case MSGPACK_OBJECT_FLOAT32: return "float32";
	case MSGPACK_OBJECT_FLOAT64: return "float64";
	case MSGPACK_OBJECT_STR: return "str";
	case MSGPACK_OBJECT_BIN: return "bin";
	case MSGPACK_OBJECT_ARRAY: return "array";
	case MSGPACK_OBJECT_MAP: return "map";
	case MSGPACK_OBJECT_EXT: return "ext";
	}
	return "unknown type";
}

/* "<struct>.<field>[idx]: expected <what>, got <o>"; idx SIZE_MAX means no index. */
int wi_bad(struct dctx *c, const char *field, size_t idx, const char *what,
	       const msgpack_object *o)
{
	char ibuf[32] = "", obuf[48];

	if (idx != SIZE_MAX)
		snprintf(ibuf, sizeof ibuf, "[%zu]", idx);
	return wi_fail(c, -EBADMSG, "%s.%s%s: expected %s, got %s", c->sname, field, ibuf, what,
		    wi_describe(o, obuf, sizeof obuf));
}

/* ---- pools and loads ---- */

/*
 * Makes the array *arrp (any element type, passed as a pointer to the pointer) hold at least
 * need elements of elsize bytes, doubling its capacity. Returns 0 or -ENOMEM (array intact).
 */
int wi_reserve(void *arrp, size_t *cap, size_t need, size_t elsize)
{
	void *p, *q;
	size_t n;

	if (need <= *cap)
		return 0;
	n = *cap ? *cap : 64;
	while (n < need)
		n *= 2;
	if (n > SIZE_MAX / elsize)
		return -ENOMEM;
	memcpy(&p, arrp, sizeof p);
	q = realloc(p, n * elsize);
	if (q == NULL)
		return -ENOMEM;
	memcpy(arrp, &q, sizeof q);
	*cap = n;
	return 0;
}

uint64_t wi_load_be(const uint8_t *p, size_t n)
{
	uint64_t v = 0;

	for (size_t i = 0; i < n; i++)
		v = v << 8 | p[i];
	return v;
}
