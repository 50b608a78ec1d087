/*
 * wire_decode.c — the decoder of vLLM's KV-cache event payloads (see wire.h and
 * docs/events.md), the other engines' variations included (docs/events.md "Other engines");
 * the encoder is wire_encode.c, the topic and sequence frames wire_frame.c.
 *
 * Decoding runs in three steps. A pre-scan walks the raw bytes without building anything and
 * checks that they are a single, complete, bounded object (see wi_scan_payload()), counting its
 * objects. wi_build_tree() then builds msgpack-c's object tree (msgpack_object) from them in one
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
#include "wire_int.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- decoder: pools ------------------------------------------------------------------------ */


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

		*out = n >= 8 ? wi_load_be(p + n - 8, 8) : wi_load_be(p, n);
		return 0;
	}
	default:
		return wi_bad(c, field, idx, "int or bin", o);
	}
}

/* A non-negative int no larger than max (which is below 2^63). */
static int get_uint(struct dctx *c, const char *field, size_t idx, const msgpack_object *o,
		    uint64_t min, uint64_t max, const char *what, uint64_t *out)
{
	if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER || o->via.u64 < min || o->via.u64 > max)
		return wi_bad(c, field, idx, what, o);
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
		return wi_bad(c, field, SIZE_MAX, "str or nil", o);
	if (o->via.str.size >= cap)
		return wi_fail(c, -E2BIG, "%s.%s: string of %u bytes, at most %zu allowed", c->sname,
			    field, o->via.str.size, cap - 1);
	if (o->via.str.size && memchr(o->via.str.ptr, '\0', o->via.str.size))
		return wi_fail(c, -EBADMSG, "%s.%s: string contains a NUL byte", c->sname, field);
	memcpy(dst, o->via.str.ptr, o->via.str.size);
	dst[o->via.str.size] = '\0';
	return 0;
}

static int get_array(struct dctx *c, const char *field, const msgpack_object *o, size_t max)
{
	if (o->type != MSGPACK_OBJECT_ARRAY)
		return wi_bad(c, field, SIZE_MAX, "array", o);
	if (o->via.array.size > max)
		return wi_fail(c, -E2BIG, "%s.%s: %u elements, at most %zu allowed", c->sname, field,
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
	if (wi_reserve(pool, cap, used + o->via.array.size, elsize))
		return wi_fail(c, -ENOMEM, "out of memory");
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

	if (wi_reserve(&b->kvw_xbytes, &b->kvw_xbyte_cap, b->kvw_nxbytes + len + 1, 1))
		return wi_fail(c, -ENOMEM, "out of memory");
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

	if (wi_reserve(&b->kvw_xitems, &b->kvw_xitem_cap, b->kvw_nxitems + 1, sizeof *b->kvw_xitems))
		return wi_fail(c, -ENOMEM, "out of memory");
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
		return wi_bad(c, "metadata", SIZE_MAX, "map or nil", o);
	for (uint32_t i = 0; i < o->via.map.size; i++) {
		const msgpack_object_kv *kv = &o->via.map.ptr[i];

		if (kv->key.type == MSGPACK_OBJECT_STR && wi_str_eq(&kv->key.via.str, "cache_salt"))
			return get_str(c, "metadata.cache_salt", &kv->val, ev->cache_salt,
				       sizeof ev->cache_salt);
	}
	return 0;
}

static int set_field(struct dctx *c, struct kvw_event *ev, enum kvw_field f,
		     const msgpack_object *o)
{
	struct kvw_batch *b = c->b;
	const char *name = wi_field_names[f];
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
	return wi_fail(c, -EBADMSG, "internal error: unknown field %d", (int)f);
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
			return wi_fail(c, -EBADMSG, "empty array, expected [tag, fields...]");
		tag = &o->via.array.ptr[0];
	} else if (o->type == MSGPACK_OBJECT_MAP) {
		for (uint32_t i = 0; i < o->via.map.size; i++) {
			const msgpack_object *k = &o->via.map.ptr[i].key;

			if (k->type != MSGPACK_OBJECT_STR)
				return wi_bad(c, "<key>", i, "str", k);
			if (wi_str_eq(&k->via.str, "type")) {
				if (tag)
					return wi_fail(c, -EBADMSG, "duplicate key \"type\"");
				tag = &o->via.map.ptr[i].val;
			}
		}
		if (tag == NULL)
			return wi_fail(c, -EBADMSG, "map without a \"type\" key");
	} else {
		char obuf[48];

		return wi_fail(c, -EBADMSG, "expected array or map, got %s",
			    wi_describe(o, obuf, sizeof obuf));
	}
	if (tag->type != MSGPACK_OBJECT_STR)
		return wi_bad(c, "type", SIZE_MAX, "str", tag);
	for (size_t i = 0; i < WI_NSCHEMAS; i++)
		if (wi_str_eq(&tag->via.str, wi_schemas[i].tag))
			s = &wi_schemas[i];
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
			return wi_fail(c, -EBADMSG, "%s: %zu fields, at least %zu expected", s->tag, nf,
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

			if (s->type == KVW_BLOCK_STORED && wi_str_eq(&kv->key.via.str, "metadata"))
				meta = &kv->val;
			if (s->type == KVW_BLOCK_STORED && wi_str_eq(&kv->key.via.str, "block_mm_infos"))
				mm = &kv->val;
			for (size_t j = 0; j < s->nfields; j++) {
				if (!wi_str_eq(&kv->key.via.str, wi_field_names[s->fields[j]]))
					continue;
				if (seen & 1u << j)
					return wi_fail(c, -EBADMSG, "%s: duplicate key \"%s\"", s->tag,
						    wi_field_names[s->fields[j]]);
				seen |= 1u << j;
				if ((rc = set_field(c, ev, s->fields[j], &kv->val)))
					return rc;
				break;
			}
		}
		for (size_t j = 0; j < s->nrequired; j++)
			if (!(seen & 1u << j))
				return wi_fail(c, -EBADMSG, "%s: missing %s", s->tag,
					    wi_field_names[s->fields[j]]);
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
		return wi_bad(c, "ts", SIZE_MAX, "float or int", o);
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
	if (wi_reserve(&b->events, &b->kvw_ev_cap, o->via.array.size, sizeof *b->events))
		return wi_fail(c, -ENOMEM, "out of memory");
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
			return wi_fail(c, -EBADMSG,
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
				return wi_bad(c, "<key>", i, "str", k);
			if (wi_str_eq(&k->via.str, "ts"))
				slot = &ts;
			else if (wi_str_eq(&k->via.str, "events"))
				slot = &events;
			else if (wi_str_eq(&k->via.str, "data_parallel_rank") ||
				 wi_str_eq(&k->via.str, "attn_dp_rank"))
				slot = &rank; /* SGLang's name for the third place */
			else
				continue;
			if (*slot)
				return wi_fail(c, -EBADMSG, "batch: duplicate key \"%.*s\"",
					    (int)k->via.str.size, k->via.str.ptr);
			*slot = &o->via.map.ptr[i].val;
		}
		if (ts == NULL || events == NULL)
			return wi_fail(c, -EBADMSG, "batch: map without \"%s\"",
				    ts == NULL ? "ts" : "events");
	} else {
		char obuf[48];

		return wi_fail(c, -EBADMSG, "batch: expected array or map, got %s",
			    wi_describe(o, obuf, sizeof obuf));
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
		return wi_fail(&c, -E2BIG, "payload: %zu bytes, at most %u allowed", len,
			    KVW_MAX_PAYLOAD);
	if ((rc = wi_scan_payload(&c, payload, len, &nobj)))
		return rc;
	rc = wi_build_tree(&c, payload, nobj, &root);
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

