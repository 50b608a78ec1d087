/*
 * wire.c — decoder and encoder for vLLM's KV-cache event payloads (see wire.h and
 * docs/events.md), plus the topic and sequence-frame helpers.
 *
 * Decoding runs in three steps. A pre-scan walks the raw bytes without building anything and
 * checks that they are a single, complete, bounded object (see scan_payload()), counting its
 * objects. build_tree() then builds msgpack-c's object tree (msgpack_object) from them in one
 * pass into a pool the batch keeps, and the schema walk copies what kvidx needs out of it into
 * plain C arrays, checking the type and range of every element on the way.
 *
 * Memory: the decoded arrays live in pools owned by the caller's struct kvw_batch, grown
 * with realloc and never shrunk, so a long-lived batch reaches a steady state in which the
 * schema walk allocates nothing. The alternative, handing the caller the msgpack_zone, would
 * tie the events' lifetime to msgpack-c's object tree and make every consumer deal with
 * msgpack types; copying into flat arrays costs one pass over data that is hot in cache
 * anyway. The tree's nodes live in the batch too (kvw_nodes), so a steady state allocates
 * nothing at all.
 */
#include "wire.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- schema tables --------------------------------------------------------------------- */

/* Every event field kvidx knows, in no particular order; names as on the wire. */
enum kvw_field {
	F_HASHES,
	F_PARENT,
	F_TOKENS,
	F_BLOCK_SIZE,
	F_LORA_ID,
	F_MEDIUM,
	F_LORA_NAME,
	F_EXTRA_KEYS,
	F_GROUP_IDX,
	F_SPEC_KIND,
	F_SLIDING_WINDOW,
	F_LOCALITY,
	F_OWNERSHIP,
	F_SESSION_ID,
	F_REMAINING,
	F_COUNT,
};

static const char *const field_names[F_COUNT] = {
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

/*
 * One event type: its tag, its fields in positional order, how many leading fields the
 * decoder requires (the rest default to nil), and how many leading fields vLLM always writes
 * because they have no default there (the encoder writes those even when nil).
 */
struct schema {
	enum kvw_type type;
	const char *tag;
	const enum kvw_field *fields;
	size_t nfields;
	size_t nrequired;
	size_t nalways;
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

static const struct schema schemas[] = {
	{ KVW_BLOCK_STORED, "BlockStored", stored_fields,
	  sizeof stored_fields / sizeof stored_fields[0], 4, 7 },
	{ KVW_BLOCK_REMOVED, "BlockRemoved", removed_fields,
	  sizeof removed_fields / sizeof removed_fields[0], 1, 2 },
	{ KVW_ALL_BLOCKS_CLEARED, "AllBlocksCleared", NULL, 0, 0, 0 },
};

#define NSCHEMAS (sizeof schemas / sizeof schemas[0])

static const struct schema *schema_of(enum kvw_type type)
{
	for (size_t i = 0; i < NSCHEMAS; i++)
		if (schemas[i].type == type)
			return &schemas[i];
	return NULL;
}

const char *kvw_type_name(enum kvw_type type)
{
	const struct schema *s = schema_of(type);

	return s ? s->tag : "?";
}

static bool str_eq(const msgpack_object_str *s, const char *lit)
{
	size_t n = strlen(lit);

	return s->size == n && memcmp(s->ptr, lit, n) == 0;
}

/* ---- decoder: context and error messages -------------------------------------------------- */

struct dctx {
	struct kvw_batch *b;
	char *err;
	size_t errlen;
	bool in_event; /* messages get an "event N: " prefix */
	size_t evi;    /* index of the event in the payload's events array */
	const char *sname; /* "batch" or the event's tag, for field paths */
};

__attribute__((format(printf, 3, 4)))
static int fail(struct dctx *c, int rc, const char *fmt, ...)
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
static const char *describe(const msgpack_object *o, char *buf, size_t len)
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
static int bad(struct dctx *c, const char *field, size_t idx, const char *what,
	       const msgpack_object *o)
{
	char ibuf[32] = "", obuf[48];

	if (idx != SIZE_MAX)
		snprintf(ibuf, sizeof ibuf, "[%zu]", idx);
	return fail(c, -EBADMSG, "%s.%s%s: expected %s, got %s", c->sname, field, ibuf, what,
		    describe(o, obuf, sizeof obuf));
}

/* ---- decoder: pre-scan --------------------------------------------------------------------- */

/* Big-endian loads of 2, 4 and 8 bytes (the integers of msgpack). */
static inline uint64_t be16(const uint8_t *p)
{
	uint16_t v;

	memcpy(&v, p, sizeof(v));
	return __builtin_bswap16(v);
}

static inline uint64_t be32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, sizeof(v));
	return __builtin_bswap32(v);
}

static inline uint64_t be64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, sizeof(v));
	return __builtin_bswap64(v);
}

static uint64_t load_be(const uint8_t *p, size_t n)
{
	uint64_t v = 0;

	for (size_t i = 0; i < n; i++)
		v = v << 8 | p[i];
	return v;
}

/*
 * Checks that payload is exactly one well-formed msgpack object, nested at most
 * KVW_MAX_DEPTH deep, whose containers declare no more elements than there are bytes left.
 *
 * This matters because msgpack-c allocates a container's element storage as soon as it reads
 * the header: the five bytes dd 00 ff ff ff would make it allocate 400 MB before finding out
 * that the elements are missing. Since every object takes at least one byte, "objects still
 * expected <= bytes left" is a necessary condition for a complete payload, and it bounds
 * msgpack-c's allocations to about 24 bytes per payload byte (one msgpack_object per
 * object). The walk keeps one counter per open container and does not recurse.
 */
static int scan_payload(struct dctx *c, const uint8_t *p, size_t len, uint64_t *nobj)
{
	uint64_t remain[KVW_MAX_DEPTH + 1]; /* remain[0]: the root level, one object */
	uint64_t pending = 1;               /* objects still expected, all levels together */
	size_t pos = 0;
	int top = 0;

	remain[0] = 1;
	for (;;) {
		size_t lenbytes = 0; /* bytes of a big-endian length or count after the type byte */
		uint64_t fixed = 0;  /* payload bytes that do not depend on a length */
		int kind = 0;        /* 0 scalar, 1 array, 2 map */
		uint64_t n = 0;
		uint8_t t;

		while (top > 0 && remain[top] == 0)
			top--;
		/* A run of integers (token ids, block hashes: most objects of a batch), with the
		 * checks below in the same order; anything else, or a check failing, goes the
		 * general way (which then reports it). */
		uint64_t r = remain[top], pend = pending;
		size_t q = pos;
		while (r && pend <= len - q) {
			uint8_t ti = p[q];
			size_t f;
			if (ti <= 0x7f || ti >= 0xe0)
				f = 0;
			else if (ti >= 0xcc && ti <= 0xd3)
				f = (size_t)1 << ((ti - 0xcc) & 3);
			else
				break;
			if (f > len - q - 1)
				break;
			r--;
			pend--;
			q += 1 + f;
		}
		*nobj += pending - pend;
		remain[top] = r;
		pending = pend;
		pos = q;
		if (top > 0 && remain[top] == 0)
			continue;
		if (remain[top] == 0)
			break;
		if (pending > len - pos)
			return fail(c, -EBADMSG,
				    "payload: truncated or bad length: %llu more objects expected at "
				    "byte %zu, %zu bytes left",
				    (unsigned long long)pending, pos, len - pos);
		remain[top]--;
		pending--;
		(*nobj)++;
		t = p[pos++];
		if (t <= 0x7f || t >= 0xe0) {
			/* positive or negative fixint */
		} else if (t <= 0x8f) {
			kind = 2;
			n = t & 0x0f;
		} else if (t <= 0x9f) {
			kind = 1;
			n = t & 0x0f;
		} else if (t <= 0xbf) {
			fixed = t & 0x1f;
		} else {
			switch (t) {
			case 0xc0: case 0xc2: case 0xc3: break;
			case 0xc1:
				return fail(c, -EBADMSG, "payload: reserved byte 0xc1 at byte %zu",
					    pos - 1);
			case 0xc4: lenbytes = 1; break;              /* bin 8/16/32 */
			case 0xc5: lenbytes = 2; break;
			case 0xc6: lenbytes = 4; break;
			case 0xc7: lenbytes = 1; fixed = 1; break;   /* ext 8/16/32: + type byte */
			case 0xc8: lenbytes = 2; fixed = 1; break;
			case 0xc9: lenbytes = 4; fixed = 1; break;
			case 0xca: fixed = 4; break;                 /* float 32/64 */
			case 0xcb: fixed = 8; break;
			case 0xcc: case 0xd0: fixed = 1; break;      /* (u)int 8/16/32/64 */
			case 0xcd: case 0xd1: fixed = 2; break;
			case 0xce: case 0xd2: fixed = 4; break;
			case 0xcf: case 0xd3: fixed = 8; break;
			case 0xd4: fixed = 2; break;                 /* fixext 1/2/4/8/16 */
			case 0xd5: fixed = 3; break;
			case 0xd6: fixed = 5; break;
			case 0xd7: fixed = 9; break;
			case 0xd8: fixed = 17; break;
			case 0xd9: lenbytes = 1; break;              /* str 8/16/32 */
			case 0xda: lenbytes = 2; break;
			case 0xdb: lenbytes = 4; break;
			case 0xdc: lenbytes = 2; kind = 1; break;    /* array 16/32 */
			case 0xdd: lenbytes = 4; kind = 1; break;
			case 0xde: lenbytes = 2; kind = 2; break;    /* map 16/32 */
			case 0xdf: lenbytes = 4; kind = 2; break;
			}
		}
		if (lenbytes > len - pos)
			return fail(c, -EBADMSG, "payload: truncated at byte %zu", pos);
		if (lenbytes) {
			uint64_t v = load_be(p + pos, lenbytes);

			pos += lenbytes;
			if (kind)
				n = v;
			else
				fixed += v;
		}
		if (kind == 0) {
			if (fixed > len - pos)
				return fail(c, -EBADMSG, "payload: truncated at byte %zu", pos);
			pos += (size_t)fixed;
			continue;
		}
		if (kind == 2)
			n *= 2;
		if (n == 0)
			continue;
		if (top == KVW_MAX_DEPTH)
			return fail(c, -EBADMSG, "payload: nested deeper than %d at byte %zu",
				    KVW_MAX_DEPTH, pos);
		remain[++top] = n;
		pending += n;
	}
	if (pos != len)
		return fail(c, -EBADMSG, "payload: the batch ends at byte %zu of %zu", pos, len);
	return 0;
}

/*
 * Builds the object tree of payload p, which scan_payload() checked and found to hold nobj
 * objects, into the batch's node pool: the tree msgpack_unpack_next() would build (same
 * types, integers signed only when negative, strings, bins and exts pointing into the
 * payload), with no allocation once the pool has grown. It replaced msgpack-c's unpacker,
 * whose per-object callbacks and zone allocations were a quarter of ingestd's time: token
 * ids make most objects of a batch fixints, which take three instructions here.
 */
static int reserve(void *arrp, size_t *cap, size_t need, size_t elsize);

static int build_tree(struct dctx *c, const uint8_t *p, uint64_t nobj, msgpack_object *root)
{
	struct kvw_batch *b = c->b;
	struct {
		msgpack_object *next;
		uint64_t left;
	} st[KVW_MAX_DEPTH + 2];
	msgpack_object *nodes;
	size_t pos = 0, used = 0;
	int top = 0;

	if (reserve(&b->kvw_nodes, &b->kvw_node_cap, nobj, sizeof(*b->kvw_nodes)))
		return fail(c, -ENOMEM, "out of memory");
	nodes = b->kvw_nodes;
	st[0].next = root;
	st[0].left = 1;
	while (top >= 0) {
		msgpack_object *o;
		uint64_t n = 0, v;
		size_t lb = 0; /* bytes of a big-endian length or count */
		int kind = 0;  /* 1 array, 2 map */
		uint8_t t;

		/* A run of unsigned integers (token ids, block hashes): the bulk of a batch. */
		for (o = st[top].next; st[top].left; st[top].left--, o++) {
			t = p[pos];
			if (t <= 0x7f) {
				v = t;
				pos += 1;
			} else if (t == 0xcd) {
				v = be16(p + pos + 1);
				pos += 3;
			} else if (t == 0xce) {
				v = be32(p + pos + 1);
				pos += 5;
			} else if (t == 0xcc) {
				v = p[pos + 1];
				pos += 2;
			} else if (t == 0xcf) {
				v = be64(p + pos + 1);
				pos += 9;
			} else {
				break;
			}
			o->type = MSGPACK_OBJECT_POSITIVE_INTEGER;
			o->via.u64 = v;
		}
		st[top].next = o;
		if (st[top].left == 0) {
			top--;
			continue;
		}
		st[top].left--;
		o = st[top].next++;
		t = p[pos++];
		if (t <= 0x7f) {
			o->type = MSGPACK_OBJECT_POSITIVE_INTEGER;
			o->via.u64 = t;
			continue;
		}
		if (t >= 0xe0) {
			o->type = MSGPACK_OBJECT_NEGATIVE_INTEGER;
			o->via.i64 = (int8_t)t;
			continue;
		}
		if (t <= 0x8f) {
			kind = 2;
			n = t & 0x0f;
		} else if (t <= 0x9f) {
			kind = 1;
			n = t & 0x0f;
		} else if (t <= 0xbf) {
			o->type = MSGPACK_OBJECT_STR;
			o->via.str.size = t & 0x1f;
			o->via.str.ptr = (const char *)p + pos;
			pos += t & 0x1f;
			continue;
		} else {
			switch (t) {
			case 0xc0:
				o->type = MSGPACK_OBJECT_NIL;
				continue;
			case 0xc2:
			case 0xc3:
				o->type = MSGPACK_OBJECT_BOOLEAN;
				o->via.boolean = t == 0xc3;
				continue;
			case 0xc4: case 0xc5: case 0xc6: /* bin 8/16/32 */
				lb = (size_t)1 << (t - 0xc4);
				o->type = MSGPACK_OBJECT_BIN;
				o->via.bin.size = (uint32_t)load_be(p + pos, lb);
				o->via.bin.ptr = (const char *)p + pos + lb;
				pos += lb + o->via.bin.size;
				continue;
			case 0xc7: case 0xc8: case 0xc9: /* ext 8/16/32: length, type, data */
				lb = (size_t)1 << (t - 0xc7);
				o->type = MSGPACK_OBJECT_EXT;
				o->via.ext.size = (uint32_t)load_be(p + pos, lb);
				o->via.ext.type = (int8_t)p[pos + lb];
				o->via.ext.ptr = (const char *)p + pos + lb + 1;
				pos += lb + 1 + o->via.ext.size;
				continue;
			case 0xca: { /* float 32 */
				uint32_t u = (uint32_t)load_be(p + pos, 4);
				float f;
				memcpy(&f, &u, sizeof(f));
				o->type = MSGPACK_OBJECT_FLOAT32;
				o->via.f64 = f;
				pos += 4;
				continue;
			}
			case 0xcb: { /* float 64 */
				uint64_t u = load_be(p + pos, 8);
				o->type = MSGPACK_OBJECT_FLOAT64;
				memcpy(&o->via.f64, &u, sizeof(u));
				pos += 8;
				continue;
			}
			case 0xcc: case 0xcd: case 0xce: case 0xcf: /* uint 8/16/32/64 */
				lb = (size_t)1 << (t - 0xcc);
				o->type = MSGPACK_OBJECT_POSITIVE_INTEGER;
				o->via.u64 = load_be(p + pos, lb);
				pos += lb;
				continue;
			case 0xd0: case 0xd1: case 0xd2: case 0xd3: { /* int 8/16/32/64 */
				lb = (size_t)1 << (t - 0xd0);
				v = load_be(p + pos, lb);
				int64_t x = lb == 1 ? (int8_t)v : lb == 2 ? (int16_t)v :
					    lb == 4 ? (int32_t)v : (int64_t)v;
				pos += lb;
				if (x < 0) {
					o->type = MSGPACK_OBJECT_NEGATIVE_INTEGER;
					o->via.i64 = x;
				} else {
					o->type = MSGPACK_OBJECT_POSITIVE_INTEGER;
					o->via.u64 = (uint64_t)x;
				}
				continue;
			}
			case 0xd4: case 0xd5: case 0xd6: case 0xd7: case 0xd8: /* fixext 1..16 */
				o->type = MSGPACK_OBJECT_EXT;
				o->via.ext.size = 1u << (t - 0xd4);
				o->via.ext.type = (int8_t)p[pos];
				o->via.ext.ptr = (const char *)p + pos + 1;
				pos += 1 + o->via.ext.size;
				continue;
			case 0xd9: case 0xda: case 0xdb: /* str 8/16/32 */
				lb = (size_t)1 << (t - 0xd9);
				o->type = MSGPACK_OBJECT_STR;
				o->via.str.size = (uint32_t)load_be(p + pos, lb);
				o->via.str.ptr = (const char *)p + pos + lb;
				pos += lb + o->via.str.size;
				continue;
			case 0xdc: case 0xdd: /* array 16/32 */
				lb = (size_t)2 << (t - 0xdc);
				kind = 1;
				n = load_be(p + pos, lb);
				pos += lb;
				break;
			case 0xde: case 0xdf: /* map 16/32 */
				lb = (size_t)2 << (t - 0xde);
				kind = 2;
				n = load_be(p + pos, lb);
				pos += lb;
				break;
			default: /* 0xc1: scan_payload() refused it */
				return fail(c, -EBADMSG, "payload: reserved byte 0x%02x", t);
			}
		}
		/* A container: its elements (a map's keys and values alternating, as in a
		 * msgpack_object_kv array) take the next nodes of the pool. */
		uint64_t elems = kind == 2 ? 2 * n : n;
		if (used + elems > nobj || top + 1 >= (int)(sizeof(st) / sizeof(st[0])))
			return fail(c, -EBADMSG, "payload: inconsistent object count");
		if (kind == 1) {
			o->type = MSGPACK_OBJECT_ARRAY;
			o->via.array.size = (uint32_t)n;
			o->via.array.ptr = nodes + used;
		} else {
			o->type = MSGPACK_OBJECT_MAP;
			o->via.map.size = (uint32_t)n;
			o->via.map.ptr = (msgpack_object_kv *)(void *)(nodes + used);
		}
		if (elems) {
			st[++top].next = nodes + used;
			st[top].left = elems;
			used += elems;
		}
	}
	return 0;
}

/* ---- decoder: pools ------------------------------------------------------------------------ */

/*
 * Makes the array *arrp (any element type, passed as a pointer to the pointer) hold at least
 * need elements of elsize bytes, doubling its capacity. Returns 0 or -ENOMEM (array intact).
 */
static int reserve(void *arrp, size_t *cap, size_t need, size_t elsize)
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

void kvw_batch_init(struct kvw_batch *b)
{
	memset(b, 0, sizeof *b);
}

void kvw_batch_free(struct kvw_batch *b)
{
	free(b->kvw_nodes);
	free(b->events);
	free(b->kvw_hashes);
	free(b->kvw_tokens);
	free(b->kvw_xblocks);
	free(b->kvw_xitems);
	free(b->kvw_xbytes);
	free(b->kvw_rem);
	kvw_batch_init(b);
}

/* ---- decoder: fields ----------------------------------------------------------------------- */

/* A block hash: uint, negative int reinterpreted, or the last 8 bytes of a bin, big-endian. */
static int get_hash(struct dctx *c, const char *field, size_t idx, const msgpack_object *o,
		    uint64_t *out)
{
	switch (o->type) {
	case MSGPACK_OBJECT_POSITIVE_INTEGER:
		*out = o->via.u64;
		return 0;
	case MSGPACK_OBJECT_NEGATIVE_INTEGER:
		*out = (uint64_t)o->via.i64;
		return 0;
	case MSGPACK_OBJECT_BIN: {
		uint32_t n = o->via.bin.size;
		const uint8_t *p = (const uint8_t *)o->via.bin.ptr;

		*out = n >= 8 ? load_be(p + n - 8, 8) : load_be(p, n);
		return 0;
	}
	default:
		return bad(c, field, idx, "int or bin", o);
	}
}

/* A non-negative int no larger than max (which is below 2^63). */
static int get_uint(struct dctx *c, const char *field, size_t idx, const msgpack_object *o,
		    uint64_t min, uint64_t max, const char *what, uint64_t *out)
{
	if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER || o->via.u64 < min || o->via.u64 > max)
		return bad(c, field, idx, what, o);
	*out = o->via.u64;
	return 0;
}

/* A str or nil into a NUL-terminated buffer of cap bytes; nil gives "". */
static int get_str(struct dctx *c, const char *field, const msgpack_object *o, char *dst,
		   size_t cap)
{
	if (o->type == MSGPACK_OBJECT_NIL) {
		dst[0] = '\0';
		return 0;
	}
	if (o->type != MSGPACK_OBJECT_STR)
		return bad(c, field, SIZE_MAX, "str or nil", o);
	if (o->via.str.size >= cap)
		return fail(c, -E2BIG, "%s.%s: string of %u bytes, at most %zu allowed", c->sname,
			    field, o->via.str.size, cap - 1);
	if (o->via.str.size && memchr(o->via.str.ptr, '\0', o->via.str.size))
		return fail(c, -EBADMSG, "%s.%s: string contains a NUL byte", c->sname, field);
	memcpy(dst, o->via.str.ptr, o->via.str.size);
	dst[o->via.str.size] = '\0';
	return 0;
}

static int get_array(struct dctx *c, const char *field, const msgpack_object *o, size_t max)
{
	if (o->type != MSGPACK_OBJECT_ARRAY)
		return bad(c, field, SIZE_MAX, "array", o);
	if (o->via.array.size > max)
		return fail(c, -E2BIG, "%s.%s: %u elements, at most %zu allowed", c->sname, field,
			    o->via.array.size, max);
	return 0;
}

/*
 * Checks that o is an array of at most max elements and makes room for them after the used
 * ones of one of the batch's pools (*pool, an array of *cap elements of elsize bytes).
 */
static int pool_array(struct dctx *c, const char *field, const msgpack_object *o, size_t max,
		      void *pool, size_t *cap, size_t used, size_t elsize)
{
	int rc;

	if ((rc = get_array(c, field, o, max)) != 0)
		return rc;
	if (reserve(pool, cap, used + o->via.array.size, elsize))
		return fail(c, -ENOMEM, "out of memory");
	return 0;
}

/*
 * An array of at most max uint32s appended to one of the batch's pools (*pool of *cap
 * elements, *used of them in use): *off is where it starts there, *n its length.
 */
static int get_u32s(struct dctx *c, const char *field, const msgpack_object *o, size_t max,
		    uint32_t **pool, size_t *cap, size_t *used, size_t *off, size_t *n)
{
	const msgpack_object *a;
	uint64_t v = 0;
	int rc;

	if ((rc = pool_array(c, field, o, max, pool, cap, *used, sizeof **pool)))
		return rc;
	a = o->via.array.ptr;
	*off = *used;
	for (size_t i = 0; i < o->via.array.size; i++) {
		if ((rc = get_uint(c, field, i, &a[i], 0, UINT32_MAX, "int in [0, 2^32)", &v)))
			return rc;
		(*pool)[*used + i] = (uint32_t)v;
	}
	*n = o->via.array.size;
	*used += *n;
	return 0;
}

/* A uint32 or nil: nil leaves *has (and *dst) as they are. */
static int get_opt_u32(struct dctx *c, const char *field, const msgpack_object *o,
		       uint32_t *dst, bool *has)
{
	uint64_t v = 0;
	int rc;

	if (o->type == MSGPACK_OBJECT_NIL)
		return 0;
	if ((rc = get_uint(c, field, SIZE_MAX, o, 0, UINT32_MAX, "int in [0, 2^32) or nil", &v)))
		return rc;
	*dst = (uint32_t)v;
	*has = true;
	return 0;
}

/* Copies len bytes into the batch's byte pool, NUL-terminated; *off is where. */
static int pool_bytes(struct dctx *c, const char *p, size_t len, size_t *off)
{
	struct kvw_batch *b = c->b;

	if (reserve(&b->kvw_xbytes, &b->kvw_xbyte_cap, b->kvw_nxbytes + len + 1, 1))
		return fail(c, -ENOMEM, "out of memory");
	*off = b->kvw_nxbytes;
	if (len)
		memcpy(b->kvw_xbytes + b->kvw_nxbytes, p, len);
	b->kvw_xbytes[b->kvw_nxbytes + len] = '\0';
	b->kvw_nxbytes += len + 1;
	return 0;
}

/* A string usable as a key item: no NUL byte inside (keys hash C strings). */
static bool item_str(const msgpack_object *o)
{
	return o->type == MSGPACK_OBJECT_STR &&
	       (o->via.str.size == 0 || !memchr(o->via.str.ptr, '\0', o->via.str.size));
}

/* One element of an extra_keys tuple, appended to the item pool. Never a schema error: what
 * is not a usable string, (string, offset) tuple or bin is kept as KVW_X_OTHER. */
static int get_xitem(struct dctx *c, const msgpack_object *o)
{
	struct kvw_batch *b = c->b;
	struct kvw_xitem *it;
	const msgpack_object *s = NULL;
	int rc;

	if (reserve(&b->kvw_xitems, &b->kvw_xitem_cap, b->kvw_nxitems + 1, sizeof *b->kvw_xitems))
		return fail(c, -ENOMEM, "out of memory");
	it = &b->kvw_xitems[b->kvw_nxitems];
	memset(it, 0, sizeof *it);
	it->kind = KVW_X_OTHER;
	if (item_str(o)) {
		it->kind = KVW_X_STR;
		s = o;
	} else if (o->type == MSGPACK_OBJECT_BIN) {
		it->kind = KVW_X_BYTES;
		it->len = o->via.bin.size;
		if ((rc = pool_bytes(c, o->via.bin.ptr, o->via.bin.size, &it->kvw_off)))
			return rc;
	} else if (o->type == MSGPACK_OBJECT_ARRAY && o->via.array.size >= 1 &&
		   item_str(&o->via.array.ptr[0])) {
		const msgpack_object *off = o->via.array.size > 1 ? &o->via.array.ptr[1] : NULL;

		it->kind = KVW_X_MM;
		s = &o->via.array.ptr[0];
		if (off && off->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
			it->has_offset = true;
			it->offset = off->via.i64;
		} else if (off && off->type == MSGPACK_OBJECT_POSITIVE_INTEGER &&
			   off->via.u64 <= INT64_MAX) {
			it->has_offset = true;
			it->offset = (int64_t)off->via.u64;
		}
	}
	if (s) {
		it->len = s->via.str.size;
		if ((rc = pool_bytes(c, s->via.str.ptr, s->via.str.size, &it->kvw_off)))
			return rc;
	}
	b->kvw_nxitems++;
	return 0;
}

/* One block's extra_keys entry: nil, a tuple of items, or (liberally) a single item. */
static int get_extra(struct dctx *c, const msgpack_object *o, struct kvw_extra *x)
{
	struct kvw_batch *b = c->b;
	int rc;

	memset(x, 0, sizeof *x);
	if (o->type == MSGPACK_OBJECT_NIL)
		return 0;
	x->set = true;
	x->kvw_off = b->kvw_nxitems;
	if (o->type != MSGPACK_OBJECT_ARRAY) {
		x->nitems = 1;
		return get_xitem(c, o);
	}
	for (uint32_t i = 0; i < o->via.array.size; i++)
		if ((rc = get_xitem(c, &o->via.array.ptr[i])))
			return rc;
	x->nitems = o->via.array.size;
	return 0;
}

/* SGLang's BlockStored metadata: nil, or a map whose "cache_salt" (a str) is kept; its other
 * keys are ignored, as an event's unknown fields are (docs/events.md "Other engines"). */
static int get_metadata(struct dctx *c, struct kvw_event *ev, const msgpack_object *o)
{
	if (o->type == MSGPACK_OBJECT_NIL)
		return 0;
	if (o->type != MSGPACK_OBJECT_MAP)
		return bad(c, "metadata", SIZE_MAX, "map or nil", o);
	for (uint32_t i = 0; i < o->via.map.size; i++) {
		const msgpack_object_kv *kv = &o->via.map.ptr[i];

		if (kv->key.type == MSGPACK_OBJECT_STR && str_eq(&kv->key.via.str, "cache_salt"))
			return get_str(c, "metadata.cache_salt", &kv->val, ev->cache_salt,
				       sizeof ev->cache_salt);
	}
	return 0;
}

static int set_field(struct dctx *c, struct kvw_event *ev, enum kvw_field f,
		     const msgpack_object *o)
{
	struct kvw_batch *b = c->b;
	const char *name = field_names[f];
	const msgpack_object *a;
	uint64_t v = 0;
	size_t n;
	int rc;

	switch (f) {
	case F_HASHES:
		if ((rc = pool_array(c, name, o, KVW_MAX_HASHES, &b->kvw_hashes, &b->kvw_hash_cap,
				     b->kvw_nhashes, sizeof *b->kvw_hashes)))
			return rc;
		n = o->via.array.size;
		a = o->via.array.ptr;
		ev->kvw_hash_off = b->kvw_nhashes;
		for (size_t i = 0; i < n; i++)
			if ((rc = get_hash(c, name, i, &a[i], &b->kvw_hashes[b->kvw_nhashes + i])))
				return rc;
		b->kvw_nhashes += n;
		ev->nhashes = n;
		return 0;
	case F_PARENT:
		/* nil, or a hash of value 0 (llm-d's simulator sends the integer 0 in its array
		 * format; llm-d's pool reads 0 as none too): no parent. */
		ev->has_parent = o->type != MSGPACK_OBJECT_NIL;
		if (!ev->has_parent || (rc = get_hash(c, name, SIZE_MAX, o, &ev->parent)))
			return ev->has_parent ? rc : 0;
		ev->has_parent = ev->parent != 0;
		return 0;
	case F_TOKENS:
		return get_u32s(c, name, o, KVW_MAX_TOKENS, &b->kvw_tokens, &b->kvw_token_cap,
				&b->kvw_ntokens, &ev->kvw_token_off, &ev->ntokens);
	case F_BLOCK_SIZE:
		if ((rc = get_uint(c, name, SIZE_MAX, o, 0, UINT32_MAX, "int in [0, 2^32)", &v)))
			return rc;
		ev->block_size = (uint32_t)v;
		return 0;
	case F_LORA_ID:
		if (o->type == MSGPACK_OBJECT_NIL)
			return 0;
		if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
			ev->lora_id = o->via.i64;
		} else {
			if ((rc = get_uint(c, name, SIZE_MAX, o, 0, INT64_MAX, "int64 or nil", &v)))
				return rc;
			ev->lora_id = (int64_t)v;
		}
		ev->has_lora_id = true;
		return 0;
	case F_MEDIUM:
		return get_str(c, name, o, ev->medium, sizeof ev->medium);
	case F_LORA_NAME:
		/* SGLang's BlockStoredWithMetadata puts its metadata map in this place. */
		if (o->type == MSGPACK_OBJECT_MAP)
			return get_metadata(c, ev, o);
		return get_str(c, name, o, ev->lora_name, sizeof ev->lora_name);
	case F_SPEC_KIND:
		return get_str(c, name, o, ev->spec_kind, sizeof ev->spec_kind);
	case F_LOCALITY:
		return get_str(c, name, o, ev->locality, sizeof ev->locality);
	case F_OWNERSHIP:
		return get_str(c, name, o, ev->ownership, sizeof ev->ownership);
	case F_SESSION_ID:
		return get_str(c, name, o, ev->session_id, sizeof ev->session_id);
	case F_REMAINING:
		if (o->type == MSGPACK_OBJECT_NIL)
			return 0;
		if ((rc = get_u32s(c, name, o, KVW_MAX_HASHES, &b->kvw_rem, &b->kvw_rem_cap,
				   &b->kvw_nrem, &ev->kvw_rem_off, &ev->nremaining)))
			return rc;
		ev->has_remaining = true;
		return 0;
	case F_EXTRA_KEYS:
		if (o->type == MSGPACK_OBJECT_NIL)
			return 0;
		if ((rc = pool_array(c, name, o, KVW_MAX_HASHES, &b->kvw_xblocks,
				     &b->kvw_xblock_cap, b->kvw_nxblocks, sizeof *b->kvw_xblocks)))
			return rc;
		n = o->via.array.size;
		a = o->via.array.ptr;
		ev->kvw_extra_off = b->kvw_nxblocks;
		for (size_t i = 0; i < n; i++)
			if ((rc = get_extra(c, &a[i], &b->kvw_xblocks[b->kvw_nxblocks + i])))
				return rc;
		b->kvw_nxblocks += n;
		ev->nextra = n;
		ev->has_extra_keys = true;
		return 0;
	case F_GROUP_IDX:
		return get_opt_u32(c, name, o, &ev->group_idx, &ev->has_group_idx);
	case F_SLIDING_WINDOW:
		return get_opt_u32(c, name, o, &ev->sliding_window, &ev->has_sliding_window);
	case F_COUNT:
		break;
	}
	return fail(c, -EBADMSG, "internal error: unknown field %d", (int)f);
}

/* ---- decoder: events and batch ------------------------------------------------------------- */

static int decode_event(struct dctx *c, const msgpack_object *o)
{
	const msgpack_object *tag = NULL;
	const struct schema *s = NULL;
	struct kvw_event *ev;
	unsigned seen = 0;
	int rc;

	c->sname = "event";
	if (o->type == MSGPACK_OBJECT_ARRAY) {
		if (o->via.array.size == 0)
			return fail(c, -EBADMSG, "empty array, expected [tag, fields...]");
		tag = &o->via.array.ptr[0];
	} else if (o->type == MSGPACK_OBJECT_MAP) {
		for (uint32_t i = 0; i < o->via.map.size; i++) {
			const msgpack_object *k = &o->via.map.ptr[i].key;

			if (k->type != MSGPACK_OBJECT_STR)
				return bad(c, "<key>", i, "str", k);
			if (str_eq(&k->via.str, "type")) {
				if (tag)
					return fail(c, -EBADMSG, "duplicate key \"type\"");
				tag = &o->via.map.ptr[i].val;
			}
		}
		if (tag == NULL)
			return fail(c, -EBADMSG, "map without a \"type\" key");
	} else {
		char obuf[48];

		return fail(c, -EBADMSG, "expected array or map, got %s",
			    describe(o, obuf, sizeof obuf));
	}
	if (tag->type != MSGPACK_OBJECT_STR)
		return bad(c, "type", SIZE_MAX, "str", tag);
	for (size_t i = 0; i < NSCHEMAS; i++)
		if (str_eq(&tag->via.str, schemas[i].tag))
			s = &schemas[i];
	if (s == NULL) {
		c->b->nskipped++;
		return 0;
	}

	c->sname = s->tag;
	ev = &c->b->events[c->b->nevents];
	memset(ev, 0, sizeof *ev);
	ev->type = s->type;
	if (o->type == MSGPACK_OBJECT_ARRAY) {
		size_t nf = o->via.array.size - 1;

		if (nf < s->nrequired)
			return fail(c, -EBADMSG, "%s: %zu fields, at least %zu expected", s->tag, nf,
				    s->nrequired);
		if (nf > s->nfields)
			nf = s->nfields; /* fields from a newer vLLM: ignored */
		for (size_t i = 0; i < nf; i++)
			if ((rc = set_field(c, ev, s->fields[i], &o->via.array.ptr[i + 1])))
				return rc;
	} else {
		const msgpack_object *meta = NULL, *mm = NULL;

		for (uint32_t i = 0; i < o->via.map.size; i++) {
			const msgpack_object_kv *kv = &o->via.map.ptr[i];

			if (s->type == KVW_BLOCK_STORED && str_eq(&kv->key.via.str, "metadata"))
				meta = &kv->val;
			if (s->type == KVW_BLOCK_STORED && str_eq(&kv->key.via.str, "block_mm_infos"))
				mm = &kv->val;
			for (size_t j = 0; j < s->nfields; j++) {
				if (!str_eq(&kv->key.via.str, field_names[s->fields[j]]))
					continue;
				if (seen & 1u << j)
					return fail(c, -EBADMSG, "%s: duplicate key \"%s\"", s->tag,
						    field_names[s->fields[j]]);
				seen |= 1u << j;
				if ((rc = set_field(c, ev, s->fields[j], &kv->val)))
					return rc;
				break;
			}
		}
		for (size_t j = 0; j < s->nrequired; j++)
			if (!(seen & 1u << j))
				return fail(c, -EBADMSG, "%s: missing %s", s->tag,
					    field_names[s->fields[j]]);
		/* SGLang's metadata; TensorRT-LLM's per-block multimodal objects (through Dynamo's
		 * publisher), kept as extras no router reproduces when extra_keys is absent. */
		if (meta && (rc = get_metadata(c, ev, meta)))
			return rc;
		if (mm && !ev->has_extra_keys && (rc = set_field(c, ev, F_EXTRA_KEYS, mm)))
			return rc;
	}
	c->b->nevents++;
	return 0;
}

static int decode_ts(struct dctx *c, const msgpack_object *o)
{
	switch (o->type) {
	case MSGPACK_OBJECT_FLOAT32:
	case MSGPACK_OBJECT_FLOAT64:
		c->b->ts = o->via.f64;
		return 0;
	case MSGPACK_OBJECT_POSITIVE_INTEGER:
		c->b->ts = (double)o->via.u64;
		return 0;
	case MSGPACK_OBJECT_NEGATIVE_INTEGER:
		c->b->ts = (double)o->via.i64;
		return 0;
	default:
		return bad(c, "ts", SIZE_MAX, "float or int", o);
	}
}

static int decode_rank(struct dctx *c, const msgpack_object *o)
{
	uint64_t v = 0;
	int rc;

	if (o->type == MSGPACK_OBJECT_NIL)
		return 0;
	if ((rc = get_uint(c, "data_parallel_rank", SIZE_MAX, o, 0, INT64_MAX,
			   "non-negative int or nil", &v)))
		return rc;
	c->b->has_dp_rank = true;
	c->b->dp_rank = (int64_t)v;
	return 0;
}

static int decode_events(struct dctx *c, const msgpack_object *o)
{
	struct kvw_batch *b = c->b;
	int rc;

	if ((rc = get_array(c, "events", o, KVW_MAX_EVENTS)) != 0)
		return rc;
	if (reserve(&b->events, &b->kvw_ev_cap, o->via.array.size, sizeof *b->events))
		return fail(c, -ENOMEM, "out of memory");
	for (uint32_t i = 0; i < o->via.array.size; i++) {
		/* Pool marks: a malformed event gives back what it appended. */
		size_t mh = b->kvw_nhashes, mt = b->kvw_ntokens, mx = b->kvw_nxblocks,
		       mi = b->kvw_nxitems, mb = b->kvw_nxbytes, mr = b->kvw_nrem;
		char *err = c->err;
		size_t errlen = c->errlen;
		char evmsg[KVW_ERR_MAX];

		c->in_event = true;
		c->evi = i;
		/* Event messages go to evmsg: only ENOMEM fails the batch. */
		c->err = evmsg;
		c->errlen = sizeof evmsg;
		rc = decode_event(c, &o->via.array.ptr[i]);
		c->err = err;
		c->errlen = errlen;
		if (rc == -ENOMEM) {
			if (errlen)
				snprintf(err, errlen, "%s", evmsg);
			return rc;
		}
		if (rc) {
			b->kvw_nhashes = mh;
			b->kvw_ntokens = mt;
			b->kvw_nxblocks = mx;
			b->kvw_nxitems = mi;
			b->kvw_nxbytes = mb;
			b->kvw_nrem = mr;
			if (b->nbad++ == 0)
				snprintf(b->bad_msg, sizeof b->bad_msg, "%s", evmsg);
		}
	}
	c->in_event = false;
	c->sname = "batch";
	return 0;
}

static int decode_root(struct dctx *c, const msgpack_object *o)
{
	const msgpack_object *ts = NULL, *events = NULL, *rank = NULL;
	int rc;

	c->sname = "batch";
	if (o->type == MSGPACK_OBJECT_ARRAY) {
		if (o->via.array.size < 2)
			return fail(c, -EBADMSG,
				    "batch: array of %u, expected [ts, events, data_parallel_rank]",
				    o->via.array.size);
		ts = &o->via.array.ptr[0];
		events = &o->via.array.ptr[1];
		if (o->via.array.size > 2)
			rank = &o->via.array.ptr[2];
	} else if (o->type == MSGPACK_OBJECT_MAP) {
		for (uint32_t i = 0; i < o->via.map.size; i++) {
			const msgpack_object *k = &o->via.map.ptr[i].key;
			const msgpack_object **slot = NULL;

			if (k->type != MSGPACK_OBJECT_STR)
				return bad(c, "<key>", i, "str", k);
			if (str_eq(&k->via.str, "ts"))
				slot = &ts;
			else if (str_eq(&k->via.str, "events"))
				slot = &events;
			else if (str_eq(&k->via.str, "data_parallel_rank") ||
				 str_eq(&k->via.str, "attn_dp_rank"))
				slot = &rank; /* SGLang's name for the third place */
			else
				continue;
			if (*slot)
				return fail(c, -EBADMSG, "batch: duplicate key \"%.*s\"",
					    (int)k->via.str.size, k->via.str.ptr);
			*slot = &o->via.map.ptr[i].val;
		}
		if (ts == NULL || events == NULL)
			return fail(c, -EBADMSG, "batch: map without \"%s\"",
				    ts == NULL ? "ts" : "events");
	} else {
		char obuf[48];

		return fail(c, -EBADMSG, "batch: expected array or map, got %s",
			    describe(o, obuf, sizeof obuf));
	}
	if ((rc = decode_ts(c, ts)) || (rank && (rc = decode_rank(c, rank))))
		return rc;
	return decode_events(c, events);
}

/* The batch's results emptied (its pools are left as they are). */
static void batch_clear(struct kvw_batch *b)
{
	b->ts = 0;
	b->has_dp_rank = false;
	b->dp_rank = 0;
	b->nevents = 0;
	b->nskipped = 0;
	b->nbad = 0;
	b->bad_msg[0] = '\0';
}

int kvw_decode_batch(const void *payload, size_t len, struct kvw_batch *out, char *err,
		     size_t errlen)
{
	struct dctx c = { .b = out, .err = err, .errlen = errlen, .sname = "batch" };
	msgpack_object root;
	uint64_t nobj = 0;
	int rc;

	if (errlen)
		err[0] = '\0';
	batch_clear(out);
	out->kvw_nhashes = out->kvw_ntokens = 0;
	out->kvw_nxblocks = out->kvw_nxitems = out->kvw_nxbytes = out->kvw_nrem = 0;

	if (len > KVW_MAX_PAYLOAD)
		return fail(&c, -E2BIG, "payload: %zu bytes, at most %u allowed", len,
			    KVW_MAX_PAYLOAD);
	if ((rc = scan_payload(&c, payload, len, &nobj)))
		return rc;
	rc = build_tree(&c, payload, nobj, &root);
	if (rc == 0)
		rc = decode_root(&c, &root);
	if (rc) {
		/* Nothing of a rejected batch stays visible. */
		batch_clear(out);
		return rc;
	}

	/* The pools have stopped moving: point the events into them. */
	for (size_t i = 0; i < out->nevents; i++) {
		struct kvw_event *ev = &out->events[i];

		ev->hashes = ev->nhashes ? out->kvw_hashes + ev->kvw_hash_off : NULL;
		ev->tokens = ev->ntokens ? out->kvw_tokens + ev->kvw_token_off : NULL;
		ev->remaining = ev->nremaining ? out->kvw_rem + ev->kvw_rem_off : NULL;
		ev->extra = ev->nextra ? out->kvw_xblocks + ev->kvw_extra_off : NULL;
	}
	for (size_t i = 0; i < out->kvw_nxblocks; i++) {
		struct kvw_extra *x = &out->kvw_xblocks[i];

		x->items = x->nitems ? out->kvw_xitems + x->kvw_off : NULL;
	}
	for (size_t i = 0; i < out->kvw_nxitems; i++) {
		struct kvw_xitem *it = &out->kvw_xitems[i];

		it->str = it->kind == KVW_X_OTHER ? NULL : out->kvw_xbytes + it->kvw_off;
	}
	return 0;
}

bool kvw_is_prefix_group(const struct kvw_event *ev)
{
	return ev->spec_kind[0] == '\0' || strcmp(ev->spec_kind, "full_attention") == 0 ||
	       strcmp(ev->spec_kind, "mla_attention") == 0 ||
	       strcmp(ev->spec_kind, "sink_full_attention") == 0;
}

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
	out->seq = load_be(frame, 8);
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
	*seq = load_be(frame, 8);
	return true;
}

void kvw_seq_put(void *frame, uint64_t seq)
{
	uint8_t *p = frame;

	for (int i = 7; i >= 0; i--, seq >>= 8)
		p[i] = (uint8_t)seq;
}

/* ---- encoder ----------------------------------------------------------------------------- */

/* Records the first packing failure; msgpack-c's packers return non-zero only on ENOMEM. */
static void ck(struct kvw_enc *e, int r)
{
	if (r && !e->err)
		e->err = -ENOMEM;
}

static void put_str(struct kvw_enc *e, const char *s)
{
	ck(e, msgpack_pack_str_with_body(&e->pk, s, strlen(s)));
}

/* An empty string is nil on the wire. */
static void put_str_or_nil(struct kvw_enc *e, const char *s)
{
	if (s[0])
		put_str(e, s);
	else
		ck(e, msgpack_pack_nil(&e->pk));
}

/* An array of n uint32s, or nil when the field is unset. */
static void put_u32s(struct kvw_enc *e, bool set, const uint32_t *v, size_t n)
{
	if (!set) {
		ck(e, msgpack_pack_nil(&e->pk));
		return;
	}
	ck(e, msgpack_pack_array(&e->pk, n));
	for (size_t i = 0; i < n; i++)
		ck(e, msgpack_pack_uint32(&e->pk, v[i]));
}

/* A uint32, or nil when the field is unset. */
static void put_opt_u32(struct kvw_enc *e, bool set, uint32_t v)
{
	ck(e, set ? msgpack_pack_uint32(&e->pk, v) : msgpack_pack_nil(&e->pk));
}

static void put_hash(struct kvw_enc *e, uint64_t h)
{
	uint8_t be[8];

	if (e->opts.hash_form == KVW_HASH_INT) {
		ck(e, msgpack_pack_uint64(&e->pk, h));
		return;
	}
	kvw_seq_put(be, h);
	ck(e, msgpack_pack_bin_with_body(&e->pk, be, sizeof be));
}

void kvw_enc_init(struct kvw_enc *e)
{
	memset(e, 0, sizeof *e);
	msgpack_sbuffer_init(&e->sbuf);
	msgpack_packer_init(&e->pk, &e->sbuf, msgpack_sbuffer_write);
}

void kvw_enc_free(struct kvw_enc *e)
{
	msgpack_sbuffer_destroy(&e->sbuf);
	kvw_enc_init(e);
}

/* Whether a defaulted field would be written (it differs from its default). */
static bool field_set(const struct kvw_event *ev, enum kvw_field f)
{
	switch (f) {
	case F_EXTRA_KEYS: return ev->has_extra_keys;
	case F_GROUP_IDX: return ev->has_group_idx;
	case F_SPEC_KIND: return ev->spec_kind[0] != '\0';
	case F_SLIDING_WINDOW: return ev->has_sliding_window;
	case F_LOCALITY: return ev->locality[0] != '\0';
	case F_OWNERSHIP: return ev->ownership[0] != '\0';
	case F_SESSION_ID: return ev->session_id[0] != '\0';
	case F_REMAINING: return ev->has_remaining;
	default: return true;
	}
}

static void put_extra(struct kvw_enc *e, const struct kvw_extra *x)
{
	msgpack_packer *pk = &e->pk;

	if (!x->set) {
		ck(e, msgpack_pack_nil(pk));
		return;
	}
	ck(e, msgpack_pack_array(pk, x->nitems));
	for (uint32_t i = 0; i < x->nitems; i++) {
		const struct kvw_xitem *it = &x->items[i];

		switch (it->kind) {
		case KVW_X_STR:
			ck(e, msgpack_pack_str_with_body(pk, it->str, it->len));
			break;
		case KVW_X_MM:
			ck(e, msgpack_pack_array(pk, it->has_offset ? 2 : 1));
			ck(e, msgpack_pack_str_with_body(pk, it->str, it->len));
			if (it->has_offset)
				ck(e, msgpack_pack_int64(pk, it->offset));
			break;
		case KVW_X_BYTES:
			ck(e, msgpack_pack_bin_with_body(pk, it->str, it->len));
			break;
		default:
			ck(e, msgpack_pack_nil(pk));
			break;
		}
	}
}

static void put_field(struct kvw_enc *e, const struct kvw_event *ev, enum kvw_field f)
{
	msgpack_packer *pk = &e->pk;

	switch (f) {
	case F_HASHES:
		ck(e, msgpack_pack_array(pk, ev->nhashes));
		for (size_t i = 0; i < ev->nhashes; i++)
			put_hash(e, ev->hashes[i]);
		break;
	case F_PARENT:
		if (ev->has_parent)
			put_hash(e, ev->parent);
		else
			ck(e, msgpack_pack_nil(pk));
		break;
	case F_TOKENS:
		put_u32s(e, true, ev->tokens, ev->ntokens);
		break;
	case F_BLOCK_SIZE:
		ck(e, msgpack_pack_uint32(pk, ev->block_size));
		break;
	case F_LORA_ID:
		ck(e, ev->has_lora_id ? msgpack_pack_int64(pk, ev->lora_id) : msgpack_pack_nil(pk));
		break;
	case F_MEDIUM:
		put_str_or_nil(e, ev->medium);
		break;
	case F_LORA_NAME:
		put_str_or_nil(e, ev->lora_name);
		break;
	case F_EXTRA_KEYS:
		if (!ev->has_extra_keys) {
			ck(e, msgpack_pack_nil(pk));
			break;
		}
		ck(e, msgpack_pack_array(pk, ev->nextra));
		for (size_t i = 0; i < ev->nextra; i++)
			put_extra(e, &ev->extra[i]);
		break;
	case F_LOCALITY:
		put_str_or_nil(e, ev->locality);
		break;
	case F_OWNERSHIP:
		put_str_or_nil(e, ev->ownership);
		break;
	case F_SESSION_ID:
		put_str_or_nil(e, ev->session_id);
		break;
	case F_REMAINING:
		put_u32s(e, ev->has_remaining, ev->remaining, ev->nremaining);
		break;
	case F_GROUP_IDX:
		put_opt_u32(e, ev->has_group_idx, ev->group_idx);
		break;
	case F_SPEC_KIND:
		put_str_or_nil(e, ev->spec_kind);
		break;
	case F_SLIDING_WINDOW:
		put_opt_u32(e, ev->has_sliding_window, ev->sliding_window);
		break;
	case F_COUNT:
		break;
	}
}

void kvw_enc_begin(struct kvw_enc *e, const struct kvw_enc_opts *opts, double ts,
		   size_t nevents, bool has_rank, int64_t dp_rank)
{
	msgpack_sbuffer_clear(&e->sbuf);
	e->opts = *opts;
	e->declared = nevents;
	e->written = 0;
	e->err = nevents > UINT32_MAX ? -EINVAL : 0;
	e->has_rank = has_rank;
	e->dp_rank = dp_rank;
	if (opts->batch_form == KVW_FORM_MAP) {
		ck(e, msgpack_pack_map(&e->pk, has_rank ? 3 : 2));
		put_str(e, "ts");
	} else {
		ck(e, msgpack_pack_array(&e->pk, has_rank ? 3 : 2));
	}
	ck(e, msgpack_pack_double(&e->pk, ts));
	if (opts->batch_form == KVW_FORM_MAP)
		put_str(e, "events");
	ck(e, msgpack_pack_array(&e->pk, nevents));
}

/* Every item of a set extra_keys entry has its bytes. */
static bool extras_ok(const struct kvw_event *ev)
{
	for (size_t i = 0; i < ev->nextra; i++) {
		const struct kvw_extra *x = &ev->extra[i];

		if (x->set && x->nitems && !x->items)
			return false;
		for (uint32_t j = 0; x->set && j < x->nitems; j++)
			if (x->items[j].kind != KVW_X_OTHER && x->items[j].len && !x->items[j].str)
				return false;
	}
	return true;
}

void kvw_enc_event(struct kvw_enc *e, const struct kvw_event *ev)
{
	const struct schema *s = schema_of(ev->type);
	size_t n;

	e->written++;
	if (s == NULL || ev->nhashes > KVW_MAX_HASHES || ev->ntokens > KVW_MAX_TOKENS ||
	    ev->nextra > KVW_MAX_HASHES || ev->nremaining > KVW_MAX_HASHES ||
	    (ev->nhashes && !ev->hashes) || (ev->ntokens && !ev->tokens) ||
	    (ev->nextra && !ev->extra) || (ev->nremaining && !ev->remaining) ||
	    !extras_ok(ev)) {
		if (!e->err)
			e->err = -EINVAL;
		return;
	}
	/* Written fields: the always-written ones, then defaulted ones up to the last set. */
	n = s->nalways;
	for (size_t i = s->nalways; i < s->nfields; i++)
		if (field_set(ev, s->fields[i]))
			n = i + 1;
	if (e->opts.event_form == KVW_FORM_ARRAY) {
		ck(e, msgpack_pack_array(&e->pk, n + 1));
		put_str(e, s->tag);
		for (size_t i = 0; i < n; i++)
			put_field(e, ev, s->fields[i]);
		return;
	}
	size_t nkeys = 1 + s->nalways;

	for (size_t i = s->nalways; i < n; i++)
		nkeys += field_set(ev, s->fields[i]);
	ck(e, msgpack_pack_map(&e->pk, nkeys));
	put_str(e, "type");
	put_str(e, s->tag);
	for (size_t i = 0; i < n; i++) {
		if (i >= s->nalways && !field_set(ev, s->fields[i]))
			continue;
		put_str(e, field_names[s->fields[i]]);
		put_field(e, ev, s->fields[i]);
	}
}

void kvw_enc_unknown(struct kvw_enc *e, const char *tag)
{
	e->written++;
	if (e->opts.event_form == KVW_FORM_ARRAY) {
		ck(e, msgpack_pack_array(&e->pk, 1));
	} else {
		ck(e, msgpack_pack_map(&e->pk, 1));
		put_str(e, "type");
	}
	put_str(e, tag);
}

void kvw_enc_raw(struct kvw_enc *e, const void *obj, size_t len)
{
	e->written++;
	ck(e, msgpack_sbuffer_write(&e->sbuf, obj, len));
}

int kvw_enc_end(struct kvw_enc *e, const void **buf, size_t *len)
{
	if (e->written != e->declared && !e->err)
		e->err = -EINVAL;
	if (e->has_rank) {
		if (e->opts.batch_form == KVW_FORM_MAP)
			put_str(e, "data_parallel_rank");
		ck(e, msgpack_pack_int64(&e->pk, e->dp_rank));
	}
	if (e->err)
		return e->err;
	*buf = e->sbuf.data;
	*len = e->sbuf.size;
	return 0;
}
