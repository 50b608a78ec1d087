/*
 * fuzz_wire.c — libFuzzer harness for the KV-event payload decoder (tools/proto/wire_tree.c, wire_decode.c).
 *
 * Payloads arrive from the network, so the decoder must survive any bytes. Besides "no crash,
 * no out-of-bounds access, no leak" (ASan/UBSan), the harness checks two properties on every
 * input: a failed decode leaves no events and a message; a successful one survives a round
 * trip through the encoder (decode, re-encode in the encoding picked by the input's first
 * byte, decode again: same batch). The batch is reused across inputs, as kvidx-ingestd does.
 *
 * Built by its own make target, not by `make test`:
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -D_GNU_SOURCE -Itools/ingestd \
 *         tests/fuzz_wire.c tools/proto/wire_*.c -lmsgpackc
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct kvw_batch batch, again;
static struct kvw_enc enc;
static bool enc_ready;

static void check(bool ok)
{
	if (!ok)
		abort();
}

static bool same_extras(const struct kvw_event *a, const struct kvw_event *b)
{
	for (size_t i = 0; i < a->nextra && i < b->nextra; i++) {
		const struct kvw_extra *x = &a->extra[i], *y = &b->extra[i];

		if (x->set != y->set || x->nitems != y->nitems)
			return false;
		for (uint32_t j = 0; j < x->nitems; j++) {
			const struct kvw_xitem *u = &x->items[j], *v = &y->items[j];

			if (u->kind != v->kind)
				return false;
			if (u->kind == KVW_X_OTHER)
				continue;
			if (u->len != v->len || memcmp(u->str, v->str, u->len) ||
			    u->has_offset != v->has_offset ||
			    (u->has_offset && u->offset != v->offset))
				return false;
		}
	}
	return true;
}

static bool same_event(const struct kvw_event *a, const struct kvw_event *b)
{
	return a->type == b->type && a->nhashes == b->nhashes &&
	       (a->nhashes == 0 || memcmp(a->hashes, b->hashes, a->nhashes * 8) == 0) &&
	       a->has_parent == b->has_parent && (!a->has_parent || a->parent == b->parent) &&
	       a->ntokens == b->ntokens &&
	       (a->ntokens == 0 || memcmp(a->tokens, b->tokens, a->ntokens * 4) == 0) &&
	       a->block_size == b->block_size && a->has_lora_id == b->has_lora_id &&
	       (!a->has_lora_id || a->lora_id == b->lora_id) &&
	       strcmp(a->medium, b->medium) == 0 && strcmp(a->lora_name, b->lora_name) == 0 &&
	       a->has_extra_keys == b->has_extra_keys && a->nextra == b->nextra &&
	       same_extras(a, b) && strcmp(a->locality, b->locality) == 0 &&
	       strcmp(a->ownership, b->ownership) == 0 &&
	       strcmp(a->session_id, b->session_id) == 0 &&
	       a->has_remaining == b->has_remaining && a->nremaining == b->nremaining &&
	       (a->nremaining == 0 ||
		memcmp(a->remaining, b->remaining, a->nremaining * 4) == 0) &&
	       a->has_group_idx == b->has_group_idx &&
	       (!a->has_group_idx || a->group_idx == b->group_idx) &&
	       strcmp(a->spec_kind, b->spec_kind) == 0 &&
	       a->has_sliding_window == b->has_sliding_window &&
	       (!a->has_sliding_window || a->sliding_window == b->sliding_window);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kvw_enc_opts o;
	const void *buf;
	char err[256];
	size_t len;
	int rc;

	rc = kvw_decode_batch(data, size, &batch, err, sizeof err);
	if (rc) {
		check(rc == -EBADMSG || rc == -E2BIG);
		check(batch.nevents == 0 && err[0] != '\0');
		return 0;
	}

	if (!enc_ready) {
		kvw_enc_init(&enc);
		enc_ready = true;
	}
	o.batch_form = size && (data[0] & 1) ? KVW_FORM_MAP : KVW_FORM_ARRAY;
	o.event_form = size && (data[0] & 2) ? KVW_FORM_MAP : KVW_FORM_ARRAY;
	o.hash_form = size && (data[0] & 4) ? KVW_HASH_BIN : KVW_HASH_INT;
	kvw_enc_begin(&enc, &o, batch.ts, batch.nevents, batch.has_dp_rank, batch.dp_rank);
	for (size_t i = 0; i < batch.nevents; i++)
		kvw_enc_event(&enc, &batch.events[i]);
	check(kvw_enc_end(&enc, &buf, &len) == 0);
	check(kvw_decode_batch(buf, len, &again, err, sizeof err) == 0);
	check(memcmp(&again.ts, &batch.ts, sizeof batch.ts) == 0);
	check(again.has_dp_rank == batch.has_dp_rank && again.dp_rank == batch.dp_rank);
	check(again.nevents == batch.nevents && again.nskipped == 0 && again.nbad == 0);
	for (size_t i = 0; i < batch.nevents; i++)
		check(same_event(&batch.events[i], &again.events[i]));
	return 0;
}
