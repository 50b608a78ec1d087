/*
 * wire_tree.c — the codec's bounded msgpack reader: a pre-scan that checks a payload is one
 * complete object within the limits (scan_payload) and the one-pass build of its object tree
 * into the batch's node pool (build_tree). See wire_decode.c for why the tree is built here
 * rather than by msgpack-c's unpacker.
 */
#include "wire_int.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- decoder: pre-scan --------------------------------------------------------------------- */

/* Big-endian loads of 2, 4 and 8 bytes (the integers of msgpack). */

/*
 * The header of an object whose type byte is t: its kind (0 scalar, 1 array, 2 map; -1 the
 * reserved byte 0xc1), *lenbytes the big-endian length or count that follows t, *fixed the
 * payload bytes that do not depend on it, *n a fix container's count.
 */
static inline int scan_head(uint8_t t, size_t *lenbytes, uint64_t *fixed, uint64_t *n)
{
	int kind = 0;

	if (t <= 0x7f || t >= 0xe0) {
		/* positive or negative fixint */
	} else if (t <= 0x8f) {
		kind = 2;
		*n = t & 0x0f;
	} else if (t <= 0x9f) {
		kind = 1;
		*n = t & 0x0f;
	} else if (t <= 0xbf) {
		*fixed = t & 0x1f;
	} else {
		switch (t) {
		case 0xc0: case 0xc2: case 0xc3: break;
		case 0xc1:
			return -1;
		case 0xc4: *lenbytes = 1; break;              /* bin 8/16/32 */
		case 0xc5: *lenbytes = 2; break;
		case 0xc6: *lenbytes = 4; break;
		case 0xc7: *lenbytes = 1; *fixed = 1; break;   /* ext 8/16/32: + type byte */
		case 0xc8: *lenbytes = 2; *fixed = 1; break;
		case 0xc9: *lenbytes = 4; *fixed = 1; break;
		case 0xca: *fixed = 4; break;                 /* float 32/64 */
		case 0xcb: *fixed = 8; break;
		case 0xcc: case 0xd0: *fixed = 1; break;      /* (u)int 8/16/32/64 */
		case 0xcd: case 0xd1: *fixed = 2; break;
		case 0xce: case 0xd2: *fixed = 4; break;
		case 0xcf: case 0xd3: *fixed = 8; break;
		case 0xd4: *fixed = 2; break;                 /* fixext 1/2/4/8/16 */
		case 0xd5: *fixed = 3; break;
		case 0xd6: *fixed = 5; break;
		case 0xd7: *fixed = 9; break;
		case 0xd8: *fixed = 17; break;
		case 0xd9: *lenbytes = 1; break;              /* str 8/16/32 */
		case 0xda: *lenbytes = 2; break;
		case 0xdb: *lenbytes = 4; break;
		case 0xdc: *lenbytes = 2; kind = 1; break;    /* array 16/32 */
		case 0xdd: *lenbytes = 4; kind = 1; break;
		case 0xde: *lenbytes = 2; kind = 2; break;    /* map 16/32 */
		case 0xdf: *lenbytes = 4; kind = 2; break;
		}
	}
	return kind;
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
int wi_scan_payload(struct dctx *c, const uint8_t *p, size_t len, uint64_t *nobj)
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
			return wi_fail(c, -EBADMSG,
				    "payload: truncated or bad length: %llu more objects expected at "
				    "byte %zu, %zu bytes left",
				    (unsigned long long)pending, pos, len - pos);
		remain[top]--;
		pending--;
		(*nobj)++;
		t = p[pos++];
		kind = scan_head(t, &lenbytes, &fixed, &n);
		if (kind < 0)
			return wi_fail(c, -EBADMSG, "payload: reserved byte 0xc1 at byte %zu",
				       pos - 1);
		if (lenbytes > len - pos)
			return wi_fail(c, -EBADMSG, "payload: truncated at byte %zu", pos);
		if (lenbytes) {
			uint64_t v = wi_load_be(p + pos, lenbytes);

			pos += lenbytes;
			if (kind)
				n = v;
			else
				fixed += v;
		}
		if (kind == 0) {
			if (fixed > len - pos)
				return wi_fail(c, -EBADMSG, "payload: truncated at byte %zu", pos);
			pos += (size_t)fixed;
			continue;
		}
		if (kind == 2)
			n *= 2;
		if (n == 0)
			continue;
		if (top == KVW_MAX_DEPTH)
			return wi_fail(c, -EBADMSG, "payload: nested deeper than %d at byte %zu",
				    KVW_MAX_DEPTH, pos);
		remain[++top] = n;
		pending += n;
	}
	if (pos != len)
		return wi_fail(c, -EBADMSG, "payload: the batch ends at byte %zu of %zu", pos, len);
	return 0;
}

/*
 * One object at p[*posp] that is not a run of unsigned integers, into *o: 0 a scalar (done),
 * 1 an array or 2 a map of *np entries (elements to place by the caller), -1 the reserved
 * byte. *posp moves past what was read.
 */
/* tree_node() for the type bytes 0xc0..0xdf (nil, bool, bin, ext, float, sized ints, str,
 * array and map 16/32). */
/* tree_typed() for floats and signed integers (a non-negative one is POSITIVE_INTEGER, as
 * msgpack-c makes it). */
static inline void tree_num(const uint8_t *p, size_t *posp, uint8_t t, msgpack_object *o)
{
	size_t pos = *posp, lb;
	uint64_t v;

	switch (t) {
	case 0xca: { /* float 32 */
		uint32_t u = (uint32_t)wi_load_be(p + pos, 4);
		float f;
		memcpy(&f, &u, sizeof(f));
		o->type = MSGPACK_OBJECT_FLOAT32;
		o->via.f64 = f;
		pos += 4;
		goto done;
	}
	case 0xcb: { /* float 64 */
		uint64_t u = wi_load_be(p + pos, 8);
		o->type = MSGPACK_OBJECT_FLOAT64;
		memcpy(&o->via.f64, &u, sizeof(u));
		pos += 8;
		goto done;
	}
	case 0xd0: case 0xd1: case 0xd2: case 0xd3: { /* int 8/16/32/64 */
		lb = (size_t)1 << (t - 0xd0);
		v = wi_load_be(p + pos, lb);
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
		goto done;
	}
	}
done:
	*posp = pos;
}

static inline int tree_typed(const uint8_t *p, size_t *posp, uint8_t t, msgpack_object *o,
			     uint64_t *np)
{
	size_t pos = *posp, lb;
	uint64_t n = 0;
	int kind = 0;

	switch (t) {
	case 0xc0:
		o->type = MSGPACK_OBJECT_NIL;
		goto done;
	case 0xc2:
	case 0xc3:
		o->type = MSGPACK_OBJECT_BOOLEAN;
		o->via.boolean = t == 0xc3;
		goto done;
	case 0xc4: case 0xc5: case 0xc6: /* bin 8/16/32 */
		lb = (size_t)1 << (t - 0xc4);
		o->type = MSGPACK_OBJECT_BIN;
		o->via.bin.size = (uint32_t)wi_load_be(p + pos, lb);
		o->via.bin.ptr = (const char *)p + pos + lb;
		pos += lb + o->via.bin.size;
		goto done;
	case 0xc7: case 0xc8: case 0xc9: /* ext 8/16/32: length, type, data */
		lb = (size_t)1 << (t - 0xc7);
		o->type = MSGPACK_OBJECT_EXT;
		o->via.ext.size = (uint32_t)wi_load_be(p + pos, lb);
		o->via.ext.type = (int8_t)p[pos + lb];
		o->via.ext.ptr = (const char *)p + pos + lb + 1;
		pos += lb + 1 + o->via.ext.size;
		goto done;
	case 0xca: case 0xcb: case 0xd0: case 0xd1: case 0xd2: case 0xd3:
		tree_num(p, &pos, t, o);
		goto done;
	case 0xcc: case 0xcd: case 0xce: case 0xcf: /* uint 8/16/32/64 */
		lb = (size_t)1 << (t - 0xcc);
		o->type = MSGPACK_OBJECT_POSITIVE_INTEGER;
		o->via.u64 = wi_load_be(p + pos, lb);
		pos += lb;
		goto done;
	case 0xd4: case 0xd5: case 0xd6: case 0xd7: case 0xd8: /* fixext 1..16 */
		o->type = MSGPACK_OBJECT_EXT;
		o->via.ext.size = 1u << (t - 0xd4);
		o->via.ext.type = (int8_t)p[pos];
		o->via.ext.ptr = (const char *)p + pos + 1;
		pos += 1 + o->via.ext.size;
		goto done;
	case 0xd9: case 0xda: case 0xdb: /* str 8/16/32 */
		lb = (size_t)1 << (t - 0xd9);
		o->type = MSGPACK_OBJECT_STR;
		o->via.str.size = (uint32_t)wi_load_be(p + pos, lb);
		o->via.str.ptr = (const char *)p + pos + lb;
		pos += lb + o->via.str.size;
		goto done;
	case 0xdc: case 0xdd: /* array 16/32 */
		lb = (size_t)2 << (t - 0xdc);
		kind = 1;
		n = wi_load_be(p + pos, lb);
		pos += lb;
		break;
	case 0xde: case 0xdf: /* map 16/32 */
		lb = (size_t)2 << (t - 0xde);
		kind = 2;
		n = wi_load_be(p + pos, lb);
		pos += lb;
		break;
	default: /* 0xc1: wi_scan_payload() refused it */
		kind = -1;
		break;
	}
done:
	*posp = pos;
	*np = n;
	return kind;
}

static inline int tree_node(const uint8_t *p, size_t *posp, msgpack_object *o, uint64_t *np)
{
	size_t pos = *posp;
	uint64_t n = 0;
	int kind = 0;
	uint8_t t = p[pos++];

	if (t <= 0x7f) {
		o->type = MSGPACK_OBJECT_POSITIVE_INTEGER;
		o->via.u64 = t;
		goto done;
	}
	if (t >= 0xe0) {
		o->type = MSGPACK_OBJECT_NEGATIVE_INTEGER;
		o->via.i64 = (int8_t)t;
		goto done;
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
		goto done;
	} else {
		*posp = pos;
		return tree_typed(p, posp, t, o, np);
	}
done:
	*posp = pos;
	*np = n;
	return kind;
}

/*
 * Builds the object tree of payload p, which wi_scan_payload() checked and found to hold nobj
 * objects, into the batch's node pool: the tree msgpack_unpack_next() would build (same
 * types, integers signed only when negative, strings, bins and exts pointing into the
 * payload), with no allocation once the pool has grown. It replaced msgpack-c's unpacker,
 * whose per-object callbacks and zone allocations were a quarter of ingestd's time: token
 * ids make most objects of a batch fixints, which take three instructions here.
 */

int wi_build_tree(struct dctx *c, const uint8_t *p, uint64_t nobj, msgpack_object *root)
{
	struct kvw_batch *b = c->b;
	struct {
		msgpack_object *next;
		uint64_t left;
	} st[KVW_MAX_DEPTH + 2];
	msgpack_object *nodes;
	size_t pos = 0, used = 0;
	int top = 0;

	if (wi_reserve(&b->kvw_nodes, &b->kvw_node_cap, nobj, sizeof(*b->kvw_nodes)))
		return wi_fail(c, -ENOMEM, "out of memory");
	nodes = b->kvw_nodes;
	st[0].next = root;
	st[0].left = 1;
	while (top >= 0) {
		msgpack_object *o;
		uint64_t n = 0, v;
		int kind;      /* 1 array, 2 map */
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
		kind = tree_node(p, &pos, o, &n);
		if (kind == 0)
			continue;
		if (kind < 0)
			return wi_fail(c, -EBADMSG, "payload: reserved byte 0x%02x", p[pos - 1]);
		/* A container: its elements (a map's keys and values alternating, as in a
		 * msgpack_object_kv array) take the next nodes of the pool. */
		uint64_t elems = kind == 2 ? 2 * n : n;
		if (used + elems > nobj || top + 1 >= (int)(sizeof(st) / sizeof(st[0])))
			return wi_fail(c, -EBADMSG, "payload: inconsistent object count");
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

