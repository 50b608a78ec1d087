/*
 * test_wire.c — Criterion tests for the KV-event wire codec (tools/proto/wire_*.c).
 *
 * They pin the decoder to the bytes of docs/events.md "Example bytes", cover both encodings
 * vLLM has used (positional arrays and "type"-tagged maps, for the batch and the events
 * separately), every field and hash representation, and check that malformed input of any
 * kind (every truncation of valid payloads, wrong types, oversized counts, random and mutated
 * bytes) fails cleanly with nothing partial left in the batch. The encoder is checked by round
 * trips through the decoder and against the reference bytes.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "wire.h"

/* The bytes of docs/events.md "Example bytes". */
static const uint8_t example[] = {
	0x93, 0xcb, 0x3f, 0xf8, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x91, 0x98, 0xab, 'B', 'l',
	'o', 'c', 'k', 'S', 't', 'o', 'r', 'e', 'd', 0x91, 0xcf, 0xf1, 0xe2, 0xd3, 0xc4, 0xb5,
	0xa6, 0x97, 0x88, 0xc0, 0x94, 0x01, 0x02, 0x03, 0x04, 0x04, 0xc0, 0xa3, 'G', 'P', 'U',
	0xc0, 0x00,
};

/* ---- helpers ----------------------------------------------------------------------------- */

/* A raw msgpack writer, for payloads the encoder would never produce. */
struct tp {
	msgpack_sbuffer sb;
	msgpack_packer pk;
};

static void tp_init(struct tp *t)
{
	msgpack_sbuffer_init(&t->sb);
	msgpack_packer_init(&t->pk, &t->sb, msgpack_sbuffer_write);
}

static void tp_free(struct tp *t)
{
	msgpack_sbuffer_destroy(&t->sb);
}

static void tp_str(struct tp *t, const char *s)
{
	msgpack_pack_str_with_body(&t->pk, s, strlen(s));
}

static void tp_bin(struct tp *t, const void *p, size_t n)
{
	msgpack_pack_bin_with_body(&t->pk, p, n);
}

/* Decodes and asserts success; returns the batch for inspection. */
static void decode_ok(const void *p, size_t n, struct kvw_batch *b)
{
	char err[256];
	int rc = kvw_decode_batch(p, n, b, err, sizeof err);

	cr_assert_eq(rc, 0, "decode failed: %d %s", rc, err);
}

/* Decodes, asserts failure with code rc and, when msg is not NULL, exactly that message. */
static void decode_fails(const void *p, size_t n, int rc, const char *msg)
{
	struct kvw_batch b;
	char err[256];
	int got;

	kvw_batch_init(&b);
	got = kvw_decode_batch(p, n, &b, err, sizeof err);
	cr_assert_eq(got, rc, "expected %d, got %d (%s)", rc, got, err);
	cr_assert_eq(b.nevents, 0);
	cr_assert(err[0] != '\0', "no error message");
	if (msg)
		cr_assert_str_eq(err, msg);
	kvw_batch_free(&b);
}

/* Decodes t's payload into b (initialised here; the caller frees it) and frees t. */
static void decode_tp_ok(struct tp *t, struct kvw_batch *b)
{
	kvw_batch_init(b);
	decode_ok(t->sb.data, t->sb.size, b);
	tp_free(t);
}

static void decode_tp_fails(struct tp *t, int rc, const char *msg)
{
	decode_fails(t->sb.data, t->sb.size, rc, msg);
	tp_free(t);
}

/*
 * Decodes a payload with one malformed event: the batch decodes, the event is left out and
 * counted (nbad 1) with msg (when not NULL) as the first message, and nev valid events stay.
 */
static void event_fails_n(const void *p, size_t n, size_t nev, const char *msg)
{
	struct kvw_batch b;
	char err[256];
	int got;

	kvw_batch_init(&b);
	got = kvw_decode_batch(p, n, &b, err, sizeof err);
	cr_assert_eq(got, 0, "a malformed event failed its batch: %d (%s)", got, err);
	cr_assert_eq(b.nbad, 1, "malformed event not counted");
	cr_assert_eq(b.nevents, nev);
	cr_assert(b.bad_msg[0] != '\0', "no message");
	if (msg)
		cr_assert_str_eq(b.bad_msg, msg);
	kvw_batch_free(&b);
}

static void event_fails(const void *p, size_t n, const char *msg)
{
	event_fails_n(p, n, 0, msg);
}

static void event_tp_fails(struct tp *t, const char *msg)
{
	event_fails(t->sb.data, t->sb.size, msg);
	tp_free(t);
}

static void assert_event_eq(const struct kvw_event *a, const struct kvw_event *b)
{
	cr_assert_eq(a->type, b->type);
	cr_assert_eq(a->nhashes, b->nhashes);
	for (size_t i = 0; i < a->nhashes; i++)
		cr_assert_eq(a->hashes[i], b->hashes[i], "hash %zu", i);
	cr_assert_eq(a->has_parent, b->has_parent);
	if (a->has_parent)
		cr_assert_eq(a->parent, b->parent);
	cr_assert_eq(a->ntokens, b->ntokens);
	for (size_t i = 0; i < a->ntokens; i++)
		cr_assert_eq(a->tokens[i], b->tokens[i], "token %zu", i);
	cr_assert_eq(a->block_size, b->block_size);
	cr_assert_eq(a->has_lora_id, b->has_lora_id);
	if (a->has_lora_id)
		cr_assert_eq(a->lora_id, b->lora_id);
	cr_assert_str_eq(a->medium, b->medium);
	cr_assert_str_eq(a->lora_name, b->lora_name);
	cr_assert_eq(a->has_extra_keys, b->has_extra_keys);
	cr_assert_eq(a->nextra, b->nextra);
	for (size_t i = 0; i < a->nextra; i++) {
		const struct kvw_extra *x = &a->extra[i], *y = &b->extra[i];

		cr_assert_eq(x->set, y->set, "extra %zu", i);
		cr_assert_eq(x->nitems, y->nitems, "extra %zu", i);
		for (uint32_t j = 0; j < x->nitems; j++) {
			const struct kvw_xitem *u = &x->items[j], *v = &y->items[j];

			cr_assert_eq(u->kind, v->kind, "extra %zu item %u", i, j);
			if (u->kind == KVW_X_OTHER)
				continue;
			cr_assert_eq(u->len, v->len, "extra %zu item %u", i, j);
			cr_assert(!memcmp(u->str, v->str, u->len), "extra %zu item %u", i, j);
			cr_assert_eq(u->has_offset, v->has_offset);
			if (u->has_offset)
				cr_assert_eq(u->offset, v->offset);
		}
	}
	cr_assert_str_eq(a->locality, b->locality);
	cr_assert_str_eq(a->ownership, b->ownership);
	cr_assert_str_eq(a->session_id, b->session_id);
	cr_assert_eq(a->has_remaining, b->has_remaining);
	cr_assert_eq(a->nremaining, b->nremaining);
	for (size_t i = 0; i < a->nremaining; i++)
		cr_assert_eq(a->remaining[i], b->remaining[i], "remaining %zu", i);
	cr_assert_eq(a->has_group_idx, b->has_group_idx);
	if (a->has_group_idx)
		cr_assert_eq(a->group_idx, b->group_idx);
	cr_assert_str_eq(a->spec_kind, b->spec_kind);
	cr_assert_eq(a->has_sliding_window, b->has_sliding_window);
	if (a->has_sliding_window)
		cr_assert_eq(a->sliding_window, b->sliding_window);
}

/* The events of the round-trip tests: every type, every field set and unset. */
static const uint64_t rt_hashes1[] = { 1, 0x8000000000000000ull, UINT64_MAX, 42 };
static const uint32_t rt_tokens1[] = { 0, 1, 2, 3, 4, 5, 6, 7, UINT32_MAX, 9, 10, 11, 12, 13, 14,
				       15 };
static const struct kvw_xitem rt_items1[] = {
	{ .kind = KVW_X_STR, .str = "my-lora", .len = 7 },
	{ .kind = KVW_X_MM, .str = "img-1", .len = 5, .has_offset = true, .offset = -3 },
	{ .kind = KVW_X_MM, .str = "img-2", .len = 5 },
	{ .kind = KVW_X_STR, .str = "salt", .len = 4 },
	{ .kind = KVW_X_BYTES, .str = "\0\1\2", .len = 3 },
	{ .kind = KVW_X_OTHER },
};
static const struct kvw_extra rt_extra1[] = {
	{ .set = false },
	{ .set = true, .items = rt_items1, .nitems = 6 },
	{ .set = true, .items = rt_items1 + 1, .nitems = 1 },
	{ .set = true, .nitems = 0 },
};
static const uint64_t rt_hashes2[] = { 7 };
static const uint32_t rt_remaining[] = { 0, 2, 1, 0 };

static void rt_events(struct kvw_event *ev, size_t *n)
{
	memset(ev, 0, 6 * sizeof *ev);
	ev[0] = (struct kvw_event){ .type = KVW_BLOCK_STORED, .hashes = rt_hashes1, .nhashes = 4,
		.has_parent = true, .parent = 0xfedcba9876543210ull, .tokens = rt_tokens1,
		.ntokens = 16, .block_size = 4, .has_lora_id = true, .lora_id = -3,
		.medium = "CPU", .lora_name = "my-lora", .has_extra_keys = true,
		.extra = rt_extra1, .nextra = 4, .has_group_idx = true, .group_idx = 2,
		.spec_kind = "sliding_window", .has_sliding_window = true, .sliding_window = 4096,
		.locality = "REMOTE", .ownership = "tier-a", .session_id = "s-1" };
	/* Minimal BlockStored: every defaulted field at its default. */
	ev[1] = (struct kvw_event){ .type = KVW_BLOCK_STORED, .hashes = rt_hashes2, .nhashes = 1,
		.tokens = rt_tokens1, .ntokens = 4, .block_size = 4 };
	/* Only a late defaulted field set: earlier ones must be written as nil positionally. */
	ev[2] = (struct kvw_event){ .type = KVW_BLOCK_STORED, .block_size = 16,
		.spec_kind = "mla_attention" };
	ev[3] = (struct kvw_event){ .type = KVW_BLOCK_REMOVED, .hashes = rt_hashes1, .nhashes = 4,
		.medium = "GPU", .has_group_idx = true, .group_idx = 0, .locality = "LOCAL",
		.ownership = "o", .has_remaining = true, .remaining = rt_remaining,
		.nremaining = 4 };
	ev[4] = (struct kvw_event){ .type = KVW_BLOCK_REMOVED, .hashes = rt_hashes2, .nhashes = 1 };
	ev[5] = (struct kvw_event){ .type = KVW_ALL_BLOCKS_CLEARED };
	*n = 6;
}

/* The two encodings the malformed-input tests cut and mutate: all arrays, and all maps. */
static const struct kvw_enc_opts rt_forms[] = {
	{ KVW_FORM_ARRAY, KVW_FORM_ARRAY, KVW_HASH_INT },
	{ KVW_FORM_MAP, KVW_FORM_MAP, KVW_HASH_BIN },
};

/* Encodes the n events of ev as one batch (ts 1.0, rank 1) in the form o; asserts success. */
static void encode_events(struct kvw_enc *e, const struct kvw_enc_opts *o,
			  const struct kvw_event *ev, size_t n, const void **buf, size_t *len)
{
	kvw_enc_begin(e, o, 1.0, n, true, 1);
	for (size_t i = 0; i < n; i++)
		kvw_enc_event(e, &ev[i]);
	cr_assert_eq(kvw_enc_end(e, buf, len), 0);
}

static void round_trip(enum kvw_form bf, enum kvw_form ef, enum kvw_hash_form hf)
{
	struct kvw_enc_opts o = { .batch_form = bf, .event_form = ef, .hash_form = hf };
	struct kvw_event ev[6];
	struct kvw_batch b;
	struct kvw_enc e;
	const void *buf;
	size_t n, len;

	rt_events(ev, &n);
	kvw_enc_init(&e);
	kvw_batch_init(&b);
	kvw_enc_begin(&e, &o, 1234.25, n + 1, true, 3);
	for (size_t i = 0; i < n; i++) {
		kvw_enc_event(&e, &ev[i]);
		if (i == 2)
			kvw_enc_unknown(&e, "BlockTransferred");
	}
	cr_assert_eq(kvw_enc_end(&e, &buf, &len), 0);
	decode_ok(buf, len, &b);
	cr_assert_eq(b.ts, 1234.25);
	cr_assert(b.has_dp_rank);
	cr_assert_eq(b.dp_rank, 3);
	cr_assert_eq(b.nevents, n);
	cr_assert_eq(b.nskipped, 1);
	for (size_t i = 0; i < n; i++)
		assert_event_eq(&b.events[i], &ev[i]);

	/* No rank: omitted, as msgspec does for the nil default. */
	kvw_enc_begin(&e, &o, 2, 0, false, 0);
	cr_assert_eq(kvw_enc_end(&e, &buf, &len), 0);
	decode_ok(buf, len, &b);
	cr_assert(!b.has_dp_rank);
	cr_assert_eq(b.ts, 2.0);
	cr_assert_eq(b.nevents, 0);

	kvw_enc_free(&e);
	kvw_batch_free(&b);
}

/* A payload with one BlockStored event whose block_hashes is the single value h. */
static void one_hash_payload(struct tp *t, void (*put)(struct tp *, const void *), const void *h)
{
	tp_init(t);
	msgpack_pack_array(&t->pk, 3);
	msgpack_pack_double(&t->pk, 1.0);
	msgpack_pack_array(&t->pk, 1);
	msgpack_pack_array(&t->pk, 5);
	tp_str(t, "BlockStored");
	msgpack_pack_array(&t->pk, 1);
	put(t, h);
	put(t, h); /* parent_block_hash: the same representation */
	msgpack_pack_array(&t->pk, 0);
	msgpack_pack_uint8(&t->pk, 16);
	msgpack_pack_nil(&t->pk);
}

static void put_u64(struct tp *t, const void *h)
{
	msgpack_pack_uint64(&t->pk, *(const uint64_t *)h);
}

static void put_i64(struct tp *t, const void *h)
{
	msgpack_pack_int64(&t->pk, *(const int64_t *)h);
}

/* h points to a length byte followed by that many bytes. */
static void put_binl(struct tp *t, const void *h)
{
	const uint8_t *p = h;

	tp_bin(t, p + 1, p[0]);
}

static uint64_t decode_one_hash(void (*put)(struct tp *, const void *), const void *h)
{
	struct kvw_batch b;
	struct tp t;
	uint64_t v;

	one_hash_payload(&t, put, h);
	decode_tp_ok(&t, &b);
	cr_assert_eq(b.nevents, 1);
	cr_assert_eq(b.events[0].nhashes, 1);
	v = b.events[0].hashes[0];
	/* The parent is the same hash; of value 0 it reads as no parent (llm-d's rule). */
	cr_assert_eq(b.events[0].has_parent, v != 0);
	cr_assert_eq(b.events[0].parent, v);
	kvw_batch_free(&b);
	return v;
}

/* Starts [1.0, [<nev events>], 0]-style payloads whose last event the caller writes. */
static void batch_head(struct tp *t, uint32_t nev)
{
	tp_init(t);
	msgpack_pack_array(&t->pk, 3);
	msgpack_pack_double(&t->pk, 1.0);
	msgpack_pack_array(&t->pk, nev);
}

static void batch_tail(struct tp *t)
{
	msgpack_pack_uint8(&t->pk, 0);
}

/*
 * Opens a positional BlockStored event of nfields fields whose first four are empty
 * ([], nil, [], block_size); the caller writes the fields after block_size.
 */
static void stored_empty(struct tp *t, uint32_t nfields, uint32_t block_size)
{
	msgpack_pack_array(&t->pk, nfields);
	tp_str(t, "BlockStored");
	msgpack_pack_array(&t->pk, 0);
	msgpack_pack_nil(&t->pk);
	msgpack_pack_array(&t->pk, 0);
	msgpack_pack_uint32(&t->pk, block_size);
}

/* Opens a positional BlockRemoved event of nfields fields with no hashes. */
static void removed_empty(struct tp *t, uint32_t nfields)
{
	msgpack_pack_array(&t->pk, nfields);
	tp_str(t, "BlockRemoved");
	msgpack_pack_array(&t->pk, 0);
}

/* Ends a batch_head() payload and asserts that its one event fails with msg. */
static void event_tail_fails(struct tp *t, const char *msg)
{
	batch_tail(t);
	event_tp_fails(t, msg);
}

/*
 * Ends a batch_head() payload, decodes it into b (initialised here, the caller frees it),
 * frees t and asserts there is one event, which it returns.
 */
static const struct kvw_event *decode_tail_one(struct tp *t, struct kvw_batch *b)
{
	batch_tail(t);
	decode_tp_ok(t, b);
	cr_assert_eq(b->nevents, 1);
	return &b->events[0];
}

/* [BlockStored, [1], nil, tokens..., 4] with the given token writer. */
static void stored_with(struct tp *t, void (*tokens)(struct tp *))
{
	msgpack_pack_array(&t->pk, 5);
	tp_str(t, "BlockStored");
	msgpack_pack_array(&t->pk, 1);
	msgpack_pack_uint8(&t->pk, 1);
	msgpack_pack_nil(&t->pk);
	tokens(t);
	msgpack_pack_uint8(&t->pk, 4);
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rng(void)
{
	uint64_t x = rng_state;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return rng_state = x;
}

/* Any decode result must be one of the documented codes, with nothing partial on failure. */
static void decode_any(const void *p, size_t n, struct kvw_batch *b)
{
	char err[128];
	int rc = kvw_decode_batch(p, n, b, err, sizeof err);

	cr_assert(rc == 0 || rc == -EBADMSG || rc == -E2BIG, "rc %d", rc);
	if (rc) {
		cr_assert_eq(b->nevents, 0);
		cr_assert(err[0] != '\0');
	}
}

/* ---- the reference bytes ------------------------------------------------------------------ */

Test(wire, example_bytes)
{
	struct kvw_batch b;
	const struct kvw_event *ev;

	kvw_batch_init(&b);
	decode_ok(example, sizeof example, &b);
	cr_assert_eq(b.ts, 1.5);
	cr_assert(b.has_dp_rank);
	cr_assert_eq(b.dp_rank, 0);
	cr_assert_eq(b.nevents, 1);
	cr_assert_eq(b.nskipped, 0);
	ev = &b.events[0];
	cr_assert_eq(ev->type, KVW_BLOCK_STORED);
	cr_assert_eq(ev->nhashes, 1);
	cr_assert_eq(ev->hashes[0], 0xF1E2D3C4B5A69788ull);
	cr_assert(!ev->has_parent);
	cr_assert_eq(ev->ntokens, 4);
	for (uint32_t i = 0; i < 4; i++)
		cr_assert_eq(ev->tokens[i], i + 1);
	cr_assert_eq(ev->block_size, 4);
	cr_assert(!ev->has_lora_id);
	cr_assert_str_eq(ev->medium, "GPU");
	cr_assert_str_eq(ev->lora_name, "");
	cr_assert(!ev->has_extra_keys);
	cr_assert_eq(ev->nextra, 0);
	cr_assert(!ev->has_group_idx);
	cr_assert_str_eq(ev->spec_kind, "");
	cr_assert(!ev->has_sliding_window);
	cr_assert(kvw_is_prefix_group(ev));
	kvw_batch_free(&b);
}

Test(wire, encoder_reproduces_example_bytes)
{
	static const uint64_t h = 0xF1E2D3C4B5A69788ull;
	static const uint32_t tok[] = { 1, 2, 3, 4 };
	struct kvw_enc_opts o = { KVW_FORM_ARRAY, KVW_FORM_ARRAY, KVW_HASH_INT };
	struct kvw_event ev = { .type = KVW_BLOCK_STORED, .hashes = &h, .nhashes = 1,
				.tokens = tok, .ntokens = 4, .block_size = 4, .medium = "GPU" };
	struct kvw_enc e;
	const void *buf;
	size_t len;

	kvw_enc_init(&e);
	kvw_enc_begin(&e, &o, 1.5, 1, true, 0);
	kvw_enc_event(&e, &ev);
	cr_assert_eq(kvw_enc_end(&e, &buf, &len), 0);
	cr_assert_eq(len, sizeof example);
	cr_assert(memcmp(buf, example, len) == 0);
	kvw_enc_free(&e);
}

/* ---- encodings ------------------------------------------------------------------------------ */

Test(wire, map_form_batch_and_events)
{
	struct kvw_batch b;
	struct tp t;
	const struct kvw_event *ev;

	/* Keys in an unusual order, unknown keys at both levels, rank as nil. */
	tp_init(&t);
	msgpack_pack_map(&t.pk, 5);
	tp_str(&t, "future_batch_key");
	msgpack_pack_array(&t.pk, 2);
	msgpack_pack_uint8(&t.pk, 1);
	msgpack_pack_uint8(&t.pk, 2);
	tp_str(&t, "events");
	msgpack_pack_array(&t.pk, 2);
	msgpack_pack_map(&t.pk, 7);
	tp_str(&t, "token_ids");
	msgpack_pack_array(&t.pk, 2);
	msgpack_pack_uint8(&t.pk, 5);
	msgpack_pack_uint8(&t.pk, 6);
	tp_str(&t, "locality");
	tp_str(&t, "REMOTE");
	tp_str(&t, "block_size");
	msgpack_pack_uint8(&t.pk, 2);
	tp_str(&t, "parent_block_hash");
	msgpack_pack_uint64(&t.pk, 99);
	tp_str(&t, "type");
	tp_str(&t, "BlockStored");
	tp_str(&t, "block_hashes");
	msgpack_pack_array(&t.pk, 1);
	msgpack_pack_uint64(&t.pk, 100);
	tp_str(&t, "medium");
	msgpack_pack_nil(&t.pk);
	msgpack_pack_map(&t.pk, 2);
	tp_str(&t, "block_hashes");
	msgpack_pack_array(&t.pk, 1);
	msgpack_pack_uint64(&t.pk, 100);
	tp_str(&t, "type");
	tp_str(&t, "BlockRemoved");
	tp_str(&t, "data_parallel_rank");
	msgpack_pack_nil(&t.pk);
	tp_str(&t, "ts");
	msgpack_pack_float(&t.pk, 2.5f);
	tp_str(&t, "x");
	msgpack_pack_map(&t.pk, 0);

	decode_tp_ok(&t, &b);
	cr_assert_eq(b.ts, 2.5);
	cr_assert(!b.has_dp_rank);
	cr_assert_eq(b.nevents, 2);
	ev = &b.events[0];
	cr_assert_eq(ev->type, KVW_BLOCK_STORED);
	cr_assert_eq(ev->nhashes, 1);
	cr_assert_eq(ev->hashes[0], 100);
	cr_assert(ev->has_parent);
	cr_assert_eq(ev->parent, 99);
	cr_assert_eq(ev->ntokens, 2);
	cr_assert_eq(ev->tokens[0], 5);
	cr_assert_eq(ev->tokens[1], 6);
	cr_assert_eq(ev->block_size, 2);
	cr_assert_str_eq(ev->medium, "");
	ev = &b.events[1];
	cr_assert_eq(ev->type, KVW_BLOCK_REMOVED);
	cr_assert_eq(ev->nhashes, 1);
	cr_assert_eq(ev->hashes[0], 100);
	cr_assert_str_eq(ev->medium, "");
	cr_assert(!ev->has_group_idx);
	kvw_batch_free(&b);
}

Test(wire, int_timestamp_and_two_element_batch)
{
	static const uint8_t pos[] = { 0x92, 0x05, 0x90 };       /* [5, []] */
	static const uint8_t neg[] = { 0x93, 0xff, 0x90, 0xc0 }; /* [-1, [], nil] */
	struct kvw_batch b;

	kvw_batch_init(&b);
	decode_ok(pos, sizeof pos, &b);
	cr_assert_eq(b.ts, 5.0);
	cr_assert(!b.has_dp_rank);
	decode_ok(neg, sizeof neg, &b);
	cr_assert_eq(b.ts, -1.0);
	cr_assert(!b.has_dp_rank);
	kvw_batch_free(&b);
}

Test(wire, omitted_trailing_fields)
{
	struct kvw_batch b;
	struct tp t;

	/* Old vLLM: BlockStored of 4 fields, BlockRemoved of 1, trailing extra positional. */
	tp_init(&t);
	msgpack_pack_array(&t.pk, 2);
	msgpack_pack_double(&t.pk, 0.0);
	msgpack_pack_array(&t.pk, 3);
	msgpack_pack_array(&t.pk, 5);
	tp_str(&t, "BlockStored");
	msgpack_pack_array(&t.pk, 1);
	msgpack_pack_uint8(&t.pk, 9);
	msgpack_pack_nil(&t.pk);
	msgpack_pack_array(&t.pk, 1);
	msgpack_pack_uint8(&t.pk, 77);
	msgpack_pack_uint8(&t.pk, 1);
	msgpack_pack_array(&t.pk, 2);
	tp_str(&t, "BlockRemoved");
	msgpack_pack_array(&t.pk, 1);
	msgpack_pack_uint8(&t.pk, 9);
	msgpack_pack_array(&t.pk, 2);
	tp_str(&t, "AllBlocksCleared");
	tp_str(&t, "GPU"); /* a field from some future vLLM: ignored */

	decode_tp_ok(&t, &b);
	cr_assert_eq(b.nevents, 3);
	cr_assert_eq(b.events[0].type, KVW_BLOCK_STORED);
	cr_assert_eq(b.events[0].block_size, 1);
	cr_assert_eq(b.events[0].ntokens, 1);
	cr_assert_eq(b.events[0].tokens[0], 77);
	cr_assert(!b.events[0].has_lora_id);
	cr_assert_str_eq(b.events[0].medium, "");
	cr_assert_str_eq(b.events[0].lora_name, "");
	cr_assert(!b.events[0].has_group_idx);
	cr_assert_eq(b.events[1].type, KVW_BLOCK_REMOVED);
	cr_assert_eq(b.events[1].hashes[0], 9);
	cr_assert_str_eq(b.events[1].medium, "");
	cr_assert_eq(b.events[2].type, KVW_ALL_BLOCKS_CLEARED);
	kvw_batch_free(&b);
}

Test(wire, round_trip_positional_int)
{
	round_trip(KVW_FORM_ARRAY, KVW_FORM_ARRAY, KVW_HASH_INT);
}

Test(wire, round_trip_positional_bin)
{
	round_trip(KVW_FORM_ARRAY, KVW_FORM_ARRAY, KVW_HASH_BIN);
}

Test(wire, round_trip_map_int)
{
	round_trip(KVW_FORM_MAP, KVW_FORM_MAP, KVW_HASH_INT);
}

Test(wire, round_trip_map_bin)
{
	round_trip(KVW_FORM_MAP, KVW_FORM_MAP, KVW_HASH_BIN);
}

Test(wire, round_trip_mixed_forms)
{
	round_trip(KVW_FORM_ARRAY, KVW_FORM_MAP, KVW_HASH_BIN);
	round_trip(KVW_FORM_MAP, KVW_FORM_ARRAY, KVW_HASH_INT);
}

Test(wire, encoder_omits_defaults_like_msgspec)
{
	struct kvw_enc_opts o = { KVW_FORM_ARRAY, KVW_FORM_ARRAY, KVW_HASH_INT };
	struct kvw_event ev[6];
	struct kvw_enc e;
	msgpack_unpacked up;
	const msgpack_object *evs;
	const void *buf;
	size_t n, len;

	rt_events(ev, &n);
	for (int form = 0; form < 2; form++) {
		o.event_form = form ? KVW_FORM_MAP : KVW_FORM_ARRAY;
		kvw_enc_init(&e);
		kvw_enc_begin(&e, &o, 0, n, true, 0);
		for (size_t i = 0; i < n; i++)
			kvw_enc_event(&e, &ev[i]);
		cr_assert_eq(kvw_enc_end(&e, &buf, &len), 0);
		msgpack_unpacked_init(&up);
		cr_assert_eq(msgpack_unpack_next(&up, buf, len, NULL), MSGPACK_UNPACK_SUCCESS);
		evs = up.data.via.array.ptr[1].via.array.ptr;
		/* Sizes count the tag (positional) or the "type" key (map). */
		cr_assert_eq(evs[0].via.array.size, 15);     /* everything set */
		cr_assert_eq(evs[1].via.array.size, 8);      /* up to lora_name */
		cr_assert_eq(evs[2].via.array.size, form ? 9 : 11); /* up to spec_kind */
		cr_assert_eq(evs[3].via.array.size, 7);      /* everything set */
		cr_assert_eq(evs[4].via.array.size, 3);      /* hashes, medium */
		cr_assert_eq(evs[5].via.array.size, 1);
		msgpack_unpacked_destroy(&up);
		kvw_enc_free(&e);
	}
}

Test(wire, encoder_checks_event_count_and_events)
{
	struct kvw_enc_opts o = { KVW_FORM_MAP, KVW_FORM_MAP, KVW_HASH_INT };
	struct kvw_event bad = { .type = (enum kvw_type)99 };
	struct kvw_event nullh = { .type = KVW_BLOCK_REMOVED, .nhashes = 3 };
	struct kvw_enc e;
	const void *buf;
	size_t len;

	kvw_enc_init(&e);
	kvw_enc_begin(&e, &o, 0, 2, false, 0);
	kvw_enc_unknown(&e, "X");
	cr_assert_eq(kvw_enc_end(&e, &buf, &len), -EINVAL);
	kvw_enc_begin(&e, &o, 0, 1, false, 0);
	kvw_enc_event(&e, &bad);
	cr_assert_eq(kvw_enc_end(&e, &buf, &len), -EINVAL);
	kvw_enc_begin(&e, &o, 0, 1, false, 0);
	kvw_enc_event(&e, &nullh);
	cr_assert_eq(kvw_enc_end(&e, &buf, &len), -EINVAL);
	/* The encoder is reusable after an error. */
	kvw_enc_begin(&e, &o, 0, 0, false, 0);
	cr_assert_eq(kvw_enc_end(&e, &buf, &len), 0);
	kvw_enc_free(&e);
}

/* ---- fields ---------------------------------------------------------------------------------- */

Test(wire, hash_representations)
{
	uint64_t u = 0xF1E2D3C4B5A69788ull, small = 5;
	int64_t neg = -1, neg2 = -2;
	static const uint8_t bin8[] = { 8, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08 };
	static const uint8_t bin3[] = { 3, 0xaa, 0xbb, 0xcc };
	static const uint8_t bin0[] = { 0 };
	uint8_t bin32[33];

	bin32[0] = 32;
	for (int i = 0; i < 32; i++)
		bin32[1 + i] = (uint8_t)i;
	cr_assert_eq(decode_one_hash(put_u64, &u), u);
	cr_assert_eq(decode_one_hash(put_u64, &small), 5);
	cr_assert_eq(decode_one_hash(put_i64, &neg), UINT64_MAX);
	cr_assert_eq(decode_one_hash(put_i64, &neg2), 0xfffffffffffffffeull);
	cr_assert_eq(decode_one_hash(put_binl, bin8), 0x0102030405060708ull);
	cr_assert_eq(decode_one_hash(put_binl, bin3), 0xaabbccull);
	cr_assert_eq(decode_one_hash(put_binl, bin0), 0);
	cr_assert_eq(decode_one_hash(put_binl, bin32), 0x18191a1b1c1d1e1full);
}

Test(wire, parent_nil_and_present)
{
	struct kvw_batch b;
	struct tp t;

	kvw_batch_init(&b);
	decode_ok(example, sizeof example, &b);
	cr_assert(!b.events[0].has_parent);
	{
		uint64_t h = 0;

		one_hash_payload(&t, put_u64, &h); /* parent 0 is no parent, as nil */
		decode_ok(t.sb.data, t.sb.size, &b);
		cr_assert(!b.events[0].has_parent);
		cr_assert_eq(b.events[0].parent, 0);
		tp_free(&t);
	}
	kvw_batch_free(&b);
}

Test(wire, lora_medium_group_and_spec_kind)
{
	static const char *kinds[] = { "", "full_attention", "mla_attention", "sliding_window",
				       "mamba", "chunked_local_attention" };
	static const bool prefix[] = { true, true, true, false, false, false };
	struct kvw_batch b;
	struct tp t;

	kvw_batch_init(&b);
	for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
		batch_head(&t, 1);
		stored_empty(&t, 12, 256);
		msgpack_pack_int64(&t.pk, 17);
		tp_str(&t, "CPU");
		tp_str(&t, "adapter-a");
		msgpack_pack_nil(&t.pk);
		msgpack_pack_uint8(&t.pk, 3);
		if (kinds[k][0])
			tp_str(&t, kinds[k]);
		else
			msgpack_pack_nil(&t.pk);
		msgpack_pack_uint16(&t.pk, 1024);
		batch_tail(&t);
		decode_ok(t.sb.data, t.sb.size, &b);
		cr_assert_eq(b.nevents, 1);
		cr_assert_eq(b.events[0].block_size, 256);
		cr_assert(b.events[0].has_lora_id);
		cr_assert_eq(b.events[0].lora_id, 17);
		cr_assert_str_eq(b.events[0].medium, "CPU");
		cr_assert_str_eq(b.events[0].lora_name, "adapter-a");
		cr_assert(!b.events[0].has_extra_keys);
		cr_assert(b.events[0].has_group_idx);
		cr_assert_eq(b.events[0].group_idx, 3);
		cr_assert_str_eq(b.events[0].spec_kind, kinds[k]);
		cr_assert(b.events[0].has_sliding_window);
		cr_assert_eq(b.events[0].sliding_window, 1024);
		cr_assert_eq(kvw_is_prefix_group(&b.events[0]), prefix[k], "%s", kinds[k]);
		tp_free(&t);
	}
	kvw_batch_free(&b);
}

Test(wire, extra_keys)
{
	struct kvw_batch b;
	struct tp t;
	const struct kvw_event *ev;

	batch_head(&t, 1);
	msgpack_pack_array(&t.pk, 9);
	tp_str(&t, "BlockStored");
	msgpack_pack_array(&t.pk, 3);
	msgpack_pack_uint8(&t.pk, 1);
	msgpack_pack_uint8(&t.pk, 2);
	msgpack_pack_uint8(&t.pk, 3);
	msgpack_pack_nil(&t.pk);
	msgpack_pack_array(&t.pk, 0);
	msgpack_pack_uint8(&t.pk, 16);
	msgpack_pack_nil(&t.pk);
	msgpack_pack_nil(&t.pk);
	msgpack_pack_nil(&t.pk);
	msgpack_pack_array(&t.pk, 3);
	msgpack_pack_nil(&t.pk);
	msgpack_pack_array(&t.pk, 2); /* ("mm-hash", 12) */
	tp_str(&t, "mm-hash");
	msgpack_pack_uint8(&t.pk, 12);
	msgpack_pack_array(&t.pk, 1);
	msgpack_pack_array(&t.pk, 0);
	batch_tail(&t);

	decode_tp_ok(&t, &b);
	ev = &b.events[0];
	cr_assert(ev->has_extra_keys);
	cr_assert_eq(ev->nextra, 3);
	cr_assert(!ev->extra[0].set);
	cr_assert(ev->extra[1].set);
	cr_assert_eq(ev->extra[1].nitems, 2);
	/* The entry is the tuple ("mm-hash", 12): a bare-string item and an int item. */
	cr_assert_eq(ev->extra[1].items[0].kind, KVW_X_STR);
	cr_assert_str_eq(ev->extra[1].items[0].str, "mm-hash");
	cr_assert_eq(ev->extra[1].items[1].kind, KVW_X_OTHER);
	cr_assert(ev->extra[2].set);
	cr_assert_eq(ev->extra[2].nitems, 1);
	cr_assert_eq(ev->extra[2].items[0].kind, KVW_X_OTHER);
	kvw_batch_free(&b);
}

Test(wire, block_removed_and_all_cleared)
{
	struct kvw_batch b;
	struct tp t;

	batch_head(&t, 4);
	msgpack_pack_array(&t.pk, 4);
	tp_str(&t, "BlockRemoved");
	msgpack_pack_array(&t.pk, 2);
	msgpack_pack_uint64(&t.pk, 10);
	msgpack_pack_int64(&t.pk, -10);
	tp_str(&t, "CPU");
	msgpack_pack_uint8(&t.pk, 1);
	msgpack_pack_map(&t.pk, 4);
	tp_str(&t, "group_idx");
	msgpack_pack_nil(&t.pk);
	tp_str(&t, "medium");
	tp_str(&t, "GPU");
	tp_str(&t, "type");
	tp_str(&t, "BlockRemoved");
	tp_str(&t, "block_hashes");
	msgpack_pack_array(&t.pk, 0);
	msgpack_pack_array(&t.pk, 1);
	tp_str(&t, "AllBlocksCleared");
	msgpack_pack_map(&t.pk, 1);
	tp_str(&t, "type");
	tp_str(&t, "AllBlocksCleared");
	batch_tail(&t);

	decode_tp_ok(&t, &b);
	cr_assert_eq(b.nevents, 4);
	cr_assert_eq(b.events[0].type, KVW_BLOCK_REMOVED);
	cr_assert_eq(b.events[0].nhashes, 2);
	cr_assert_eq(b.events[0].hashes[0], 10);
	cr_assert_eq(b.events[0].hashes[1], (uint64_t)-10);
	cr_assert_str_eq(b.events[0].medium, "CPU");
	cr_assert(b.events[0].has_group_idx);
	cr_assert_eq(b.events[0].group_idx, 1);
	cr_assert_eq(b.events[1].type, KVW_BLOCK_REMOVED);
	cr_assert_eq(b.events[1].nhashes, 0);
	cr_assert_str_eq(b.events[1].medium, "GPU");
	cr_assert(!b.events[1].has_group_idx);
	cr_assert_eq(b.events[2].type, KVW_ALL_BLOCKS_CLEARED);
	cr_assert_eq(b.events[3].type, KVW_ALL_BLOCKS_CLEARED);
	kvw_batch_free(&b);
}

Test(wire, unknown_event_tag_skipped)
{
	struct kvw_batch b;
	struct tp t;

	batch_head(&t, 4);
	msgpack_pack_array(&t.pk, 3);
	tp_str(&t, "BlockTransferred");
	msgpack_pack_array(&t.pk, 1);
	msgpack_pack_uint8(&t.pk, 1);
	tp_str(&t, "DISK");
	msgpack_pack_array(&t.pk, 2);
	tp_str(&t, "BlockRemoved");
	msgpack_pack_array(&t.pk, 1);
	msgpack_pack_uint8(&t.pk, 5);
	msgpack_pack_map(&t.pk, 2);
	tp_str(&t, "whatever");
	msgpack_pack_map(&t.pk, 0);
	tp_str(&t, "type");
	tp_str(&t, "SomethingNew");
	msgpack_pack_array(&t.pk, 1);
	tp_str(&t, "AllBlocksCleared");
	batch_tail(&t);

	decode_tp_ok(&t, &b);
	cr_assert_eq(b.nskipped, 2);
	cr_assert_eq(b.nevents, 2);
	cr_assert_eq(b.events[0].type, KVW_BLOCK_REMOVED);
	cr_assert_eq(b.events[0].hashes[0], 5);
	cr_assert_eq(b.events[1].type, KVW_ALL_BLOCKS_CLEARED);
	kvw_batch_free(&b);
}

/* ---- errors ------------------------------------------------------------------------------------ */

static void tokens_str17(struct tp *t)
{
	msgpack_pack_array(&t->pk, 18);
	for (int i = 0; i < 17; i++)
		msgpack_pack_uint8(&t->pk, (uint8_t)i);
	tp_str(t, "x");
}

static void tokens_negative(struct tp *t)
{
	msgpack_pack_array(&t->pk, 1);
	msgpack_pack_int8(&t->pk, -1);
}

static void tokens_too_big(struct tp *t)
{
	msgpack_pack_array(&t->pk, 2);
	msgpack_pack_uint32(&t->pk, UINT32_MAX);
	msgpack_pack_uint64(&t->pk, 1ull << 32);
}

static void tokens_not_array(struct tp *t)
{
	msgpack_pack_map(&t->pk, 0);
}

Test(wire, error_messages_name_the_element)
{
	struct tp t;

	batch_head(&t, 4);
	for (int i = 0; i < 3; i++) {
		msgpack_pack_array(&t.pk, 1);
		tp_str(&t, "AllBlocksCleared");
	}
	stored_with(&t, tokens_str17);
	batch_tail(&t);
	event_fails_n(t.sb.data, t.sb.size, 3,
		      "event 3: BlockStored.token_ids[17]: expected int in [0, 2^32), got str");
	tp_free(&t);

	batch_head(&t, 1);
	stored_with(&t, tokens_negative);
	event_tail_fails(&t,
			 "event 0: BlockStored.token_ids[0]: expected int in [0, 2^32), got int -1");

	batch_head(&t, 1);
	stored_with(&t, tokens_too_big);
	event_tail_fails(&t, "event 0: BlockStored.token_ids[1]: expected int in "
			     "[0, 2^32), got int 4294967296");

	batch_head(&t, 1);
	stored_with(&t, tokens_not_array);
	event_tail_fails(&t, "event 0: BlockStored.token_ids: expected array, got map");
}

Test(wire, wrong_types)
{
	struct kvw_batch b;
	const struct kvw_event *ev;
	struct tp t;

	/* Hash as str. */
	batch_head(&t, 1);
	msgpack_pack_array(&t.pk, 2);
	tp_str(&t, "BlockRemoved");
	msgpack_pack_array(&t.pk, 2);
	msgpack_pack_uint8(&t.pk, 1);
	tp_str(&t, "abc");
	event_tail_fails(&t, "event 0: BlockRemoved.block_hashes[1]: expected int or bin, got str");

	/* Parent as float. */
	batch_head(&t, 1);
	msgpack_pack_array(&t.pk, 5);
	tp_str(&t, "BlockStored");
	msgpack_pack_array(&t.pk, 0);
	msgpack_pack_double(&t.pk, 1.0);
	msgpack_pack_array(&t.pk, 0);
	msgpack_pack_uint8(&t.pk, 4);
	event_tail_fails(&t,
			 "event 0: BlockStored.parent_block_hash: expected int or bin, got float64");

	/* block_size 0 is an offload placeholder's (no tokens), not an error. */
	batch_head(&t, 1);
	stored_empty(&t, 5, 0);
	ev = decode_tail_one(&t, &b);
	cr_assert_eq(ev->block_size, 0);
	kvw_batch_free(&b);

	/* Medium as int. */
	batch_head(&t, 1);
	removed_empty(&t, 3);
	msgpack_pack_uint8(&t.pk, 1);
	event_tail_fails(&t, "event 0: BlockRemoved.medium: expected str or nil, got int 1");

	/* extra_keys entry neither tuple nor nil: a bare entry is kept as a tuple of that item. */
	batch_head(&t, 1);
	stored_empty(&t, 9, 4);
	msgpack_pack_nil(&t.pk);
	msgpack_pack_nil(&t.pk);
	msgpack_pack_nil(&t.pk);
	msgpack_pack_array(&t.pk, 1);
	tp_str(&t, "x");
	ev = decode_tail_one(&t, &b);
	cr_assert(ev->extra[0].set);
	cr_assert_eq(ev->extra[0].nitems, 1);
	cr_assert_eq(ev->extra[0].items[0].kind, KVW_X_STR);
	cr_assert_str_eq(ev->extra[0].items[0].str, "x");
	kvw_batch_free(&b);

	/* group_idx negative. */
	batch_head(&t, 1);
	removed_empty(&t, 4);
	msgpack_pack_nil(&t.pk);
	msgpack_pack_int8(&t.pk, -2);
	event_tail_fails(&t, "event 0: BlockRemoved.group_idx: expected int in "
			     "[0, 2^32) or nil, got int -2");

	/* lora_id beyond int64. */
	batch_head(&t, 1);
	stored_empty(&t, 6, 4);
	msgpack_pack_uint64(&t.pk, UINT64_MAX);
	event_tail_fails(&t, NULL);

	/* String with a NUL byte. */
	batch_head(&t, 1);
	removed_empty(&t, 3);
	msgpack_pack_str_with_body(&t.pk, "G\0U", 3);
	event_tail_fails(&t, "event 0: BlockRemoved.medium: string contains a NUL byte");
}

Test(wire, malformed_structure)
{
	static const uint8_t introot[] = { 0x05 };
	static const uint8_t strroot[] = { 0xa1, 'x' };
	static const uint8_t nilroot[] = { 0xc0 };
	static const uint8_t short_batch[] = { 0x91, 0x00 };
	static const uint8_t ts_str[] = { 0x92, 0xa1, 'x', 0x90 };
	static const uint8_t events_map[] = { 0x92, 0x00, 0x80 };
	static const uint8_t rank_neg[] = { 0x93, 0x00, 0x90, 0xff };
	static const uint8_t rank_str[] = { 0x93, 0x00, 0x90, 0xa0 };
	static const uint8_t ev_empty[] = { 0x92, 0x00, 0x91, 0x90 };
	static const uint8_t ev_int[] = { 0x92, 0x00, 0x91, 0x07 };
	static const uint8_t ev_tag_int[] = { 0x92, 0x00, 0x91, 0x91, 0x01 };
	static const uint8_t ev_no_type[] = { 0x92, 0x00, 0x91, 0x81, 0xa1, 'x', 0x01 };
	static const uint8_t ev_int_key[] = { 0x92, 0x00, 0x91, 0x81, 0x01, 0x01 };
	static const uint8_t map_no_events[] = { 0x81, 0xa2, 't', 's', 0x00 };
	static const uint8_t trailing[] = { 0x92, 0x00, 0x90, 0x00 };
	static const uint8_t reserved[] = { 0x92, 0xc1, 0x90 };
	static const uint8_t empty[] = { 0 };
	/* [0, [["BlockRemoved"]]]: block_hashes missing. */
	static const uint8_t removed_short[] = { 0x92, 0x00, 0x91, 0x91, 0xac, 'B', 'l', 'o',
						 'c', 'k', 'R', 'e', 'm', 'o', 'v', 'e', 'd' };
	struct tp t;

	decode_fails(introot, sizeof introot, -EBADMSG,
		     "batch: expected array or map, got int 5");
	decode_fails(strroot, sizeof strroot, -EBADMSG, "batch: expected array or map, got str");
	decode_fails(nilroot, sizeof nilroot, -EBADMSG, "batch: expected array or map, got nil");
	decode_fails(short_batch, sizeof short_batch, -EBADMSG,
		     "batch: array of 1, expected [ts, events, data_parallel_rank]");
	decode_fails(ts_str, sizeof ts_str, -EBADMSG, "batch.ts: expected float or int, got str");
	decode_fails(events_map, sizeof events_map, -EBADMSG,
		     "batch.events: expected array, got map");
	decode_fails(rank_neg, sizeof rank_neg, -EBADMSG,
		     "batch.data_parallel_rank: expected non-negative int or nil, got int -1");
	decode_fails(rank_str, sizeof rank_str, -EBADMSG, NULL);
	event_fails(ev_empty, sizeof ev_empty,
		     "event 0: empty array, expected [tag, fields...]");
	event_fails(ev_int, sizeof ev_int,
		     "event 0: expected array or map, got int 7");
	event_fails(ev_tag_int, sizeof ev_tag_int,
		     "event 0: event.type: expected str, got int 1");
	event_fails(ev_no_type, sizeof ev_no_type,
		     "event 0: map without a \"type\" key");
	event_fails(ev_int_key, sizeof ev_int_key, NULL);
	decode_fails(map_no_events, sizeof map_no_events, -EBADMSG,
		     "batch: map without \"events\"");
	decode_fails(trailing, sizeof trailing, -EBADMSG,
		     "payload: the batch ends at byte 3 of 4");
	decode_fails(reserved, sizeof reserved, -EBADMSG,
		     "payload: reserved byte 0xc1 at byte 1");
	decode_fails(empty, 0, -EBADMSG, NULL);
	event_fails(removed_short, sizeof removed_short,
		     "event 0: BlockRemoved: 0 fields, at least 1 expected");

	/* Map event: duplicate key, missing required key. */
	batch_head(&t, 1);
	msgpack_pack_map(&t.pk, 3);
	tp_str(&t, "type");
	tp_str(&t, "BlockRemoved");
	tp_str(&t, "block_hashes");
	msgpack_pack_array(&t.pk, 0);
	tp_str(&t, "block_hashes");
	msgpack_pack_array(&t.pk, 0);
	event_tail_fails(&t, "event 0: BlockRemoved: duplicate key \"block_hashes\"");

	batch_head(&t, 1);
	msgpack_pack_map(&t.pk, 4);
	tp_str(&t, "type");
	tp_str(&t, "BlockStored");
	tp_str(&t, "block_hashes");
	msgpack_pack_array(&t.pk, 0);
	tp_str(&t, "parent_block_hash");
	msgpack_pack_nil(&t.pk);
	tp_str(&t, "token_ids");
	msgpack_pack_array(&t.pk, 0);
	event_tail_fails(&t, "event 0: BlockStored: missing block_size");

	batch_head(&t, 1);
	msgpack_pack_map(&t.pk, 2);
	tp_str(&t, "type");
	tp_str(&t, "AllBlocksCleared");
	tp_str(&t, "type");
	tp_str(&t, "AllBlocksCleared");
	event_tail_fails(&t, "event 0: duplicate key \"type\"");

	tp_init(&t);
	msgpack_pack_map(&t.pk, 3);
	tp_str(&t, "ts");
	msgpack_pack_uint8(&t.pk, 0);
	tp_str(&t, "events");
	msgpack_pack_array(&t.pk, 0);
	tp_str(&t, "ts");
	msgpack_pack_uint8(&t.pk, 0);
	decode_tp_fails(&t, -EBADMSG, "batch: duplicate key \"ts\"");
}

Test(wire, truncated_payloads_fail_cleanly)
{
	struct kvw_event ev[6];
	struct kvw_batch b;
	struct kvw_enc e;
	const void *buf;
	size_t n, len;

	kvw_batch_init(&b);
	for (size_t cut = 0; cut < sizeof example; cut++)
		decode_fails(example, cut, -EBADMSG, NULL);
	rt_events(ev, &n);
	kvw_enc_init(&e);
	for (size_t f = 0; f < 2; f++) {
		encode_events(&e, &rt_forms[f], ev, n, &buf, &len);
		for (size_t cut = 0; cut < len; cut++) {
			char err[128];

			cr_assert_eq(kvw_decode_batch(buf, cut, &b, err, sizeof err), -EBADMSG,
				     "cut %zu", cut);
			cr_assert_eq(b.nevents, 0);
		}
		decode_ok(buf, len, &b);
		cr_assert_eq(b.nevents, n);
	}
	kvw_enc_free(&e);
	kvw_batch_free(&b);
}

Test(wire, oversized_counts)
{
	/* [0, array32(0xffffffff)]: must fail without trying to allocate 4 Gi objects. */
	static const uint8_t huge_events[] = { 0x92, 0x00, 0xdd, 0xff, 0xff, 0xff, 0xff };
	static const uint8_t huge_map[] = { 0xdf, 0x00, 0xff, 0xff, 0xff, 0xc0 };
	static const uint8_t huge_str[] = { 0x92, 0xdb, 0x7f, 0xff, 0xff, 0xff, 0x90 };
	struct kvw_enc_opts o = { KVW_FORM_ARRAY, KVW_FORM_ARRAY, KVW_HASH_INT };
	struct kvw_event ev = { .type = KVW_BLOCK_STORED, .block_size = 1 };
	struct kvw_enc e;
	const void *buf;
	size_t len;
	char name[KVW_LORA_NAME_MAX + 1];
	struct tp t;

	decode_fails(huge_events, sizeof huge_events, -EBADMSG, NULL);
	decode_fails(huge_map, sizeof huge_map, -EBADMSG, NULL);
	decode_fails(huge_str, sizeof huge_str, -EBADMSG, NULL);

	/* One event too many. */
	kvw_enc_init(&e);
	kvw_enc_begin(&e, &o, 0, KVW_MAX_EVENTS + 1, false, 0);
	for (size_t i = 0; i < KVW_MAX_EVENTS + 1; i++)
		kvw_enc_unknown(&e, "A");
	cr_assert_eq(kvw_enc_end(&e, &buf, &len), 0);
	decode_fails(buf, len, -E2BIG, "batch.events: 65537 elements, at most 65536 allowed");
	kvw_enc_free(&e);

	/* Hashes and tokens one over the limit. */
	batch_head(&t, 1);
	msgpack_pack_array(&t.pk, 2);
	tp_str(&t, "BlockRemoved");
	msgpack_pack_array(&t.pk, KVW_MAX_HASHES + 1);
	for (size_t i = 0; i < KVW_MAX_HASHES + 1; i++)
		msgpack_pack_uint8(&t.pk, 1);
	event_tail_fails(&t, "event 0: BlockRemoved.block_hashes: 1048577 elements, at most "
			     "1048576 allowed");
	batch_head(&t, 1);
	msgpack_pack_array(&t.pk, 5);
	tp_str(&t, "BlockStored");
	msgpack_pack_array(&t.pk, 0);
	msgpack_pack_nil(&t.pk);
	msgpack_pack_array(&t.pk, KVW_MAX_TOKENS + 1);
	for (size_t i = 0; i < KVW_MAX_TOKENS + 1; i++)
		msgpack_pack_uint8(&t.pk, 1);
	msgpack_pack_uint8(&t.pk, 1);
	event_tail_fails(&t, "event 0: BlockStored.token_ids: 4194305 elements, at most "
			     "4194304 allowed");

	/* Strings: exactly at capacity is fine, one more byte is an error, not a truncation. */
	memset(name, 'n', sizeof name);
	name[KVW_LORA_NAME_MAX - 1] = '\0';
	strcpy(ev.lora_name, name);
	kvw_enc_init(&e);
	kvw_enc_begin(&e, &o, 0, 1, false, 0);
	kvw_enc_event(&e, &ev);
	cr_assert_eq(kvw_enc_end(&e, &buf, &len), 0);
	{
		struct kvw_batch b;

		kvw_batch_init(&b);
		decode_ok(buf, len, &b);
		cr_assert_eq(strlen(b.events[0].lora_name), KVW_LORA_NAME_MAX - 1);
		kvw_batch_free(&b);
	}
	kvw_enc_free(&e);
	name[KVW_LORA_NAME_MAX - 1] = 'n';
	name[KVW_LORA_NAME_MAX] = '\0';
	batch_head(&t, 1);
	stored_empty(&t, 8, 1);
	msgpack_pack_nil(&t.pk);
	msgpack_pack_nil(&t.pk);
	tp_str(&t, name);
	event_tail_fails(&t, "event 0: BlockStored.lora_name: string of 256 bytes, at "
			     "most 255 allowed");

	/* Whole payload over KVW_MAX_PAYLOAD: refused before it is read. */
	{
		uint8_t *big = calloc(1, (size_t)KVW_MAX_PAYLOAD + 1);

		cr_assert_not_null(big);
		decode_fails(big, (size_t)KVW_MAX_PAYLOAD + 1, -E2BIG, NULL);
		free(big);
	}
}

Test(wire, nesting_depth_is_bounded)
{
	uint8_t deep[64];
	size_t n = 0;

	/* [0, [[[[...]]]]]: nested arrays far deeper than any event needs. */
	deep[n++] = 0x92;
	deep[n++] = 0x00;
	while (n < sizeof deep - 1)
		deep[n++] = 0x91;
	deep[n++] = 0x90;
	decode_fails(deep, n, -EBADMSG, NULL);
}

Test(wire, random_and_mutated_bytes_never_crash)
{
	struct kvw_event ev[6];
	struct kvw_batch b;
	struct kvw_enc e;
	uint8_t buf[512];
	const void *valid[3];
	size_t vlen[3], n, nok = 0;
	uint8_t *copies[3];

	kvw_batch_init(&b);
	rng_state = 0x9e3779b97f4a7c15ull;
	for (int i = 0; i < 4000; i++) {
		size_t len = rng() % sizeof buf;

		for (size_t j = 0; j < len; j++)
			buf[j] = (uint8_t)rng();
		/* Bias half of them towards a plausible start: a fixarray or fixmap root. */
		if (len && (i & 1))
			buf[0] = (uint8_t)(0x90 | (rng() % 4));
		decode_any(buf, len, &b);
	}

	/* Mutations of valid payloads reach far deeper into the schema walk. */
	rt_events(ev, &n);
	kvw_enc_init(&e);
	valid[0] = example;
	vlen[0] = sizeof example;
	for (int f = 0; f < 2; f++) {
		const void *p;

		encode_events(&e, &rt_forms[f], ev, n, &p, &vlen[f + 1]);
		copies[f] = malloc(vlen[f + 1]);
		memcpy(copies[f], p, vlen[f + 1]);
		valid[f + 1] = copies[f];
	}
	for (int i = 0; i < 6000; i++) {
		size_t k = rng() % 3, len = vlen[k], flips = 1 + rng() % 4;
		uint8_t *m = malloc(len);

		memcpy(m, valid[k], len);
		for (size_t j = 0; j < flips; j++) {
			size_t at = rng() % len;

			m[at] = (rng() & 1) ? (uint8_t)rng() : (uint8_t)(m[at] ^ (1u << (rng() % 8)));
		}
		if (rng() % 4 == 0)
			len = rng() % (len + 1);
		/* An exact-size heap copy lets ASan catch any read past the end. */
		decode_any(m, len, &b);
		nok += b.nevents > 0;
		free(m);
	}
	cr_assert(nok > 0, "no mutation decoded at all: the test lost its power");
	free(copies[0]);
	free(copies[1]);
	kvw_enc_free(&e);
	kvw_batch_free(&b);
}

/* ---- memory ------------------------------------------------------------------------------------ */

Test(wire, steady_state_reuses_storage)
{
	struct kvw_enc_opts o = { KVW_FORM_MAP, KVW_FORM_MAP, KVW_HASH_BIN };
	struct kvw_event ev[6];
	struct kvw_batch b;
	struct kvw_enc e;
	const void *buf;
	size_t n, len;
	const void *events, *hashes, *tokens;

	rt_events(ev, &n);
	kvw_enc_init(&e);
	kvw_enc_begin(&e, &o, 1.0, n, false, 0);
	for (size_t i = 0; i < n; i++)
		kvw_enc_event(&e, &ev[i]);
	cr_assert_eq(kvw_enc_end(&e, &buf, &len), 0);
	kvw_batch_init(&b);
	decode_ok(buf, len, &b);
	events = b.events;
	hashes = b.events[0].hashes;
	tokens = b.events[0].tokens;
	for (int i = 0; i < 100; i++) {
		decode_ok(buf, len, &b);
		cr_assert_eq((const void *)b.events, events);
		cr_assert_eq((const void *)b.events[0].hashes, hashes);
		cr_assert_eq((const void *)b.events[0].tokens, tokens);
	}
	/* A failed decode leaves the batch empty but reusable. */
	decode_any(buf, len - 1, &b);
	cr_assert_eq(b.nevents, 0);
	decode_ok(buf, len, &b);
	cr_assert_eq(b.nevents, n);
	assert_event_eq(&b.events[0], &ev[0]);
	kvw_batch_free(&b);
	kvw_batch_free(&b); /* freeing an empty batch is harmless */
	kvw_enc_free(&e);
}

Test(wire, error_buffer_sizes)
{
	struct kvw_batch b;
	char small[8];

	kvw_batch_init(&b);
	cr_assert_eq(kvw_decode_batch(example, 3, &b, NULL, 0), -EBADMSG);
	cr_assert_eq(kvw_decode_batch(example, 3, &b, small, sizeof small), -EBADMSG);
	cr_assert_eq(strlen(small), sizeof small - 1);
	cr_assert_eq(kvw_decode_batch(example, 3, &b, small, 1), -EBADMSG);
	cr_assert_str_eq(small, "");
	kvw_batch_free(&b);
}

/* ---- topic and sequence ---------------------------------------------------------------------- */

static void topic_is(const char *topic, size_t len, int rc, const char *pod, const char *model)
{
	char p[32], m[32];
	int got = kvw_parse_topic(topic, len, p, sizeof p, m, sizeof m);

	cr_assert_eq(got, rc, "topic %.*s: %d", (int)len, topic, got);
	cr_assert_str_eq(p, pod);
	cr_assert_str_eq(m, model);
}

#define TOPIC(s, rc, pod, model) topic_is(s, sizeof(s) - 1, rc, pod, model)

Test(wire, topic_parsing)
{
	char p[4], m[4];

	TOPIC("kv@10.0.0.1:8000@meta-llama/Llama-3", 0, "10.0.0.1:8000", "meta-llama/Llama-3");
	TOPIC("kv@pod@", 0, "pod", "");
	TOPIC("kv@@model", 0, "", "model");
	/* Anything but three parts names neither (vLLM's "" default, its "kv-events" example). */
	TOPIC("kv@pod", 0, "", "");
	TOPIC("10.0.0.1:8000", 0, "", "");
	TOPIC("kv-events", 0, "", "");
	TOPIC("", 0, "", "");
	TOPIC("a@b@c@d", 0, "", "");
	TOPIC("this-topic-is-longer-than-the-32-byte-buffers", 0, "", "");
	TOPIC("@@", 0, "", "");
	TOPIC("x@y\0z", -EINVAL, "", "");
	TOPIC("kv@this-pod-name-is-much-too-long-for-32@m", -ENAMETOOLONG, "", "");
	/* Not NUL-terminated: only len bytes count. */
	topic_is("kv@p@mXXXX", 6, 0, "p", "m");
	topic_is(NULL, 0, 0, "", "");
	/* Exactly filling the buffer is fine; one more byte is not. */
	cr_assert_eq(kvw_parse_topic("kv@abc@def", 10, p, sizeof p, m, sizeof m), 0);
	cr_assert_str_eq(p, "abc");
	cr_assert_str_eq(m, "def");
	cr_assert_eq(kvw_parse_topic("kv@abc@defg", 11, p, sizeof p, m, sizeof m), -ENAMETOOLONG);
	cr_assert_eq(kvw_parse_topic("kv", 2, p, 0, m, sizeof m), -EINVAL);
}

Test(wire, sequence_frames)
{
	static const uint8_t end[8] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff };
	static const uint8_t one[8] = { 0, 0, 0, 0, 0, 0, 0, 1 };
	uint8_t f[8];
	uint64_t s = 12345;

	cr_assert(kvw_seq_get(end, 8, &s));
	cr_assert_eq(s, KVW_SEQ_END);
	cr_assert(kvw_seq_get(one, 8, &s));
	cr_assert_eq(s, 1);
	cr_assert(!kvw_seq_get(one, 7, &s));
	cr_assert(!kvw_seq_get(one, 9, &s));
	cr_assert_eq(s, 1);
	kvw_seq_put(f, 0x0102030405060708ull);
	for (int i = 0; i < 8; i++)
		cr_assert_eq(f[i], i + 1);
	cr_assert(kvw_seq_get(f, 8, &s));
	cr_assert_eq(s, 0x0102030405060708ull);
}

/* 8 + 16 bytes: the sequence and a publisher id (vLLM #57789); nothing else but 8. */
Test(wire, sequence_frames_with_publisher_id)
{
	uint8_t f[25];
	struct kvw_seqf sf = { .seq = 77 };

	kvw_seq_put(f, 42);
	for (int i = 0; i < 16; i++)
		f[8 + i] = (uint8_t)(0xa0 + i);
	cr_assert(kvw_seq_frame(f, 24, &sf));
	cr_assert_eq(sf.seq, 42);
	cr_assert(sf.has_id);
	cr_assert_arr_eq(sf.id, f + 8, 16);
	cr_assert(kvw_seq_frame(f, 8, &sf));
	cr_assert_eq(sf.seq, 42);
	cr_assert(!sf.has_id);
	for (int i = 0; i < 16; i++)
		cr_assert_eq(sf.id[i], 0);
	sf.seq = 77;
	for (size_t len = 0; len <= sizeof(f); len++)
		if (len != 8 && len != 24)
			cr_assert(!kvw_seq_frame(f, len, &sf), "%zu-byte frame accepted", len);
	cr_assert_eq(sf.seq, 77, "a refused frame changed the output");
	cr_assert(!kvw_seq_get(f, 24, &sf.seq), "replay requests stay 8 bytes");
}

/* Parent 0 (llm-d's simulator, array format) is no parent, in both encodings; other
 * parents stay parents. */
Test(wire, parent_zero_is_no_parent)
{
	static const uint32_t tok[4] = { 1, 2, 3, 4 };
	uint64_t h[1] = { 9 };
	struct kvw_event ev[2] = {
		{ .type = KVW_BLOCK_STORED, .hashes = h, .nhashes = 1, .has_parent = true,
		  .parent = 0, .tokens = tok, .ntokens = 4, .block_size = 4 },
		{ .type = KVW_BLOCK_STORED, .hashes = h, .nhashes = 1, .has_parent = true,
		  .parent = 1, .tokens = tok, .ntokens = 4, .block_size = 4 },
	};

	for (size_t i = 0; i < sizeof(rt_forms) / sizeof(rt_forms[0]); i++) {
		struct kvw_enc e;
		struct kvw_batch b;
		const void *buf;
		size_t len;

		kvw_enc_init(&e);
		kvw_batch_init(&b);
		encode_events(&e, &rt_forms[i], ev, 2, &buf, &len);
		decode_ok(buf, len, &b);
		cr_assert_eq(b.nevents, 2);
		cr_assert(!b.events[0].has_parent, "form %zu: parent 0 read as a parent", i);
		cr_assert(b.events[1].has_parent);
		cr_assert_eq(b.events[1].parent, 1);
		kvw_batch_free(&b);
		kvw_enc_free(&e);
	}
}

/* ---- events judged one by one ------------------------------------------------------------------ */

Test(wire, malformed_event_keeps_the_others)
{
	/* ["BlockStored", [9, 8], nil, [1, "x"], 1]: token 1 is a str, after two hashes went into
	 * the pool; the events after it must not see them. */
	static const uint8_t bad[] = { 0x95, 0xab, 'B', 'l', 'o', 'c', 'k', 'S', 't', 'o', 'r',
				       'e', 'd', 0x92, 0x09, 0x08, 0xc0, 0x92, 0x01, 0xa1, 'x',
				       0x01 };
	static const uint64_t h1[] = { 11 }, h2[] = { 22, 23 };
	static const uint32_t tok[] = { 5, 6 };
	struct kvw_enc_opts o = { KVW_FORM_ARRAY, KVW_FORM_MAP, KVW_HASH_INT };
	struct kvw_event s1 = { .type = KVW_BLOCK_STORED, .hashes = h1, .nhashes = 1,
				.tokens = tok, .ntokens = 2, .block_size = 2 };
	struct kvw_event r2 = { .type = KVW_BLOCK_REMOVED, .hashes = h2, .nhashes = 2,
				.medium = "CPU" };
	struct kvw_batch b;
	struct kvw_enc e;
	const void *buf;
	size_t len;

	kvw_enc_init(&e);
	kvw_batch_init(&b);
	kvw_enc_begin(&e, &o, 1, 5, true, 0);
	kvw_enc_event(&e, &s1);
	kvw_enc_raw(&e, bad, sizeof bad);
	kvw_enc_unknown(&e, "BlockInactive");
	kvw_enc_raw(&e, "\x07", 1); /* an int is no event */
	kvw_enc_event(&e, &r2);
	cr_assert_eq(kvw_enc_end(&e, &buf, &len), 0);
	decode_ok(buf, len, &b);
	cr_assert_eq(b.nevents, 2);
	cr_assert_eq(b.nbad, 2);
	cr_assert_eq(b.nskipped, 1);
	cr_assert_str_eq(b.bad_msg,
			 "event 1: BlockStored.token_ids[1]: expected int in [0, 2^32), got str");
	assert_event_eq(&b.events[0], &s1);
	assert_event_eq(&b.events[1], &r2);
	kvw_enc_free(&e);
	kvw_batch_free(&b);
}
