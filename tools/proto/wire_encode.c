/*
 * wire_encode.c — the encoder of KV-event payloads, as vLLM's msgspec writes them (positional
 * or map form, defaulted fields left out), for kvidx-fakepod and the tests.
 */
#include "wire_int.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
	const struct schema *s = wi_schema_of(ev->type);
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
		put_str(e, wi_field_names[s->fields[i]]);
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

