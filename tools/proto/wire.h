/*
 * wire.h — internal to kvidx-ingestd, kvidx-fakepod and the tests; never installed.
 *
 * The codec for vLLM's KV-cache event stream (reference/kv-events.md): a decoder that turns
 * one msgpack payload (a KVEventBatch) into plain C structures, an encoder that produces the
 * same payloads for the fake pod and the tests, and the small helpers for the other two ZMQ
 * frames (topic and 8-byte sequence number).
 *
 * The decoder accepts both encodings vLLM has used: positional arrays (msgspec array_like)
 * and "type"-tagged maps, for the batch and for each event independently. Trailing
 * positional fields and map keys it does not know are ignored; events with an unknown tag
 * are skipped and counted. Everything else is validated strictly: a payload that breaks the
 * schema or a limit below fails as a whole with a message that names the offending element,
 * and the caller is expected to drop the whole batch.
 *
 * Nothing here is thread-safe on a shared object; distinct objects may be used concurrently.
 * No function blocks.
 */
#ifndef KVIDX_WIRE_H
#define KVIDX_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>

/* ---- limits ------------------------------------------------------------------------------ */

/*
 * The decoder rejects (with -E2BIG) payloads that exceed any of these. They bound the memory
 * one payload can make the decoder and msgpack-c allocate, whatever its bytes claim.
 */
#define KVW_MAX_PAYLOAD   (64u << 20) /* bytes in one payload */
#define KVW_MAX_EVENTS    (1u << 16)  /* events in one batch, unknown ones included */
#define KVW_MAX_HASHES    (1u << 20)  /* block_hashes per event */
#define KVW_MAX_TOKENS    (1u << 22)  /* token_ids per event (4 Mi tokens) */
#define KVW_MAX_DEPTH     16          /* msgpack container nesting (msgpack-c itself stops at 32) */

/* Capacities of the string fields, terminating NUL included; a longer string is an error. */
#define KVW_MEDIUM_MAX    32
#define KVW_LORA_NAME_MAX 256
#define KVW_SPEC_KIND_MAX 64

/* Limits of kvw_parse_topic()'s outputs are the caller's buffer sizes. */

/* The sequence number of the end-of-replay marker (eight 0xff bytes). */
#define KVW_SEQ_END UINT64_MAX

/* ---- decoded structures -------------------------------------------------------------------- */

enum kvw_type {
	KVW_BLOCK_STORED = 1,
	KVW_BLOCK_REMOVED,
	KVW_ALL_BLOCKS_CLEARED,
};

/*
 * One event. Fields that an event type does not carry are zero/empty. Strings are
 * NUL-terminated; an empty string stands for nil or absent (for medium that means "GPU").
 * The arrays point into storage owned by the struct kvw_batch the event belongs to and stay
 * valid until the next kvw_decode_batch() or kvw_batch_free() on that batch.
 */
struct kvw_event {
	enum kvw_type type;

	const uint64_t *hashes; /* block_hashes (BlockStored, BlockRemoved) */
	size_t nhashes;

	bool has_parent; /* BlockStored: parent_block_hash not nil */
	uint64_t parent;

	const uint32_t *tokens; /* BlockStored: token_ids, all new full blocks back to back */
	size_t ntokens;         /* not checked against nhashes * block_size: the caller decides */
	uint32_t block_size;    /* BlockStored: > 0 */

	bool has_lora_id; /* BlockStored: lora_id not nil (deprecated by vLLM for lora_name) */
	int64_t lora_id;

	char medium[KVW_MEDIUM_MAX];       /* BlockStored, BlockRemoved: "" = nil = GPU */
	char lora_name[KVW_LORA_NAME_MAX]; /* BlockStored: "" = nil */

	/*
	 * BlockStored.extra_keys: when not nil, one entry per block; extra_set[i] is 1 when
	 * entry i is a tuple (the block's hash mixed in multimodal, LoRA or salt keys) and 0 when
	 * it is nil. The tuples' contents are validated as msgpack only, not kept.
	 */
	bool has_extra_keys;
	const uint8_t *extra_set;
	size_t nextra;

	bool has_group_idx; /* BlockStored, BlockRemoved: KV-cache group */
	uint32_t group_idx;

	char spec_kind[KVW_SPEC_KIND_MAX]; /* BlockStored.kv_cache_spec_kind, "" = nil */
	bool has_sliding_window;           /* BlockStored.kv_cache_spec_sliding_window */
	uint32_t sliding_window;

	/* Private to wire.c: offsets into the batch's pools while the arrays may still move. */
	size_t kvw_hash_off, kvw_token_off, kvw_extra_off;
};

/*
 * One decoded payload, and the storage its events use. Zero-initialise it (or call
 * kvw_batch_init()) before the first decode; reuse it for every payload so that, once its
 * arrays have grown to the largest batch seen, decoding allocates nothing of its own;
 * release it with kvw_batch_free(). The pools only grow.
 */
struct kvw_batch {
	double ts;         /* publisher wall clock, seconds */
	bool has_dp_rank;  /* data_parallel_rank not nil */
	int64_t dp_rank;   /* >= 0 */
	struct kvw_event *events; /* known events, in payload order */
	size_t nevents;
	size_t nskipped;   /* events with an unknown tag, skipped */

	/* Private to wire.c. */
	size_t kvw_ev_cap;
	uint64_t *kvw_hashes;
	size_t kvw_nhashes, kvw_hash_cap;
	uint32_t *kvw_tokens;
	size_t kvw_ntokens, kvw_token_cap;
	uint8_t *kvw_extra;
	size_t kvw_nextra, kvw_extra_cap;
};

/* ---- decoder ------------------------------------------------------------------------------- */

/* Prepares an empty batch; equivalent to zero-initialising it. */
void kvw_batch_init(struct kvw_batch *b);

/* Frees the batch's storage and leaves it empty and reusable. b may be empty; not NULL. */
void kvw_batch_free(struct kvw_batch *b);

/*
 * Decodes one KVEventBatch payload of len bytes into out, replacing its previous contents.
 * The payload must be exactly one msgpack object; payload is not retained after return.
 *
 * Returns 0 on success: out holds the batch, its known events in order, and the number of
 * skipped unknown-tag events. Otherwise out is empty (nevents 0: nothing partial is visible),
 * a one-line message naming the offending element, e.g.
 * "event 3: BlockStored.token_ids[17]: expected int in [0, 2^32), got str" (events are
 * numbered from 0 in payload order, unknown ones included), is written to err (truncated to
 * errlen, NUL-terminated; err may be NULL when errlen is 0), and it returns
 *   -EBADMSG  not well-formed msgpack (truncated, trailing bytes, reserved byte) or a value
 *             of the wrong type, range or shape for the schema;
 *   -E2BIG    a KVW_MAX_* limit or a string capacity exceeded;
 *   -ENOMEM   allocation failed (out keeps its previous storage and stays usable).
 * Never reads outside payload[0, len). Single-threaded per batch; does not block.
 */
int kvw_decode_batch(const void *payload, size_t len, struct kvw_batch *out, char *err,
		     size_t errlen);

/*
 * True when events of this group belong in a prefix index: kv_cache_spec_kind is nil,
 * "full_attention" or "mla_attention". Sliding-window, Mamba and other kinds are not
 * prefix-reusable.
 */
bool kvw_is_prefix_group(const struct kvw_event *ev);

/* "BlockStored", "BlockRemoved", "AllBlocksCleared", or "?" for anything else. */
const char *kvw_type_name(enum kvw_type type);

/* ---- topic and sequence frames --------------------------------------------------------------- */

/*
 * Splits a topic frame (len bytes, not NUL-terminated) on '@'. Exactly three parts
 * ("kv@<pod>@<model>", the first part not checked) give pod and model; any other topic is the
 * pod as a whole and model is "". Both outputs are NUL-terminated and may be empty.
 * Returns 0, -EINVAL if the topic contains a NUL byte, or -ENAMETOOLONG if an output does not
 * fit its buffer (outputs are then "" ). podlen and modellen must be > 0.
 */
int kvw_parse_topic(const char *topic, size_t len, char *pod, size_t podlen, char *model,
		    size_t modellen);

/*
 * Reads a sequence frame: 8 bytes, big-endian unsigned. Returns false (and leaves *seq alone)
 * if len is not 8.
 */
bool kvw_seq_get(const void *frame, size_t len, uint64_t *seq);

/* Writes seq as 8 big-endian bytes to frame. */
void kvw_seq_put(void *frame, uint64_t seq);

/* ---- encoder --------------------------------------------------------------------------------- */

/* Layout of a struct: msgspec array_like (positional) or a map keyed by field name. */
enum kvw_form {
	KVW_FORM_ARRAY = 0,
	KVW_FORM_MAP,
};

/* How block hashes are written: msgpack uint, or 8-byte big-endian bin. */
enum kvw_hash_form {
	KVW_HASH_INT = 0,
	KVW_HASH_BIN,
};

struct kvw_enc_opts {
	enum kvw_form batch_form;
	enum kvw_form event_form;
	enum kvw_hash_form hash_form;
};

/*
 * Builds payloads the way vLLM's msgspec encoder does: fields without a default in vLLM
 * (up to lora_name for BlockStored, up to medium for BlockRemoved) are always written, and
 * the defaulted ones (extra_keys, group_idx, kv_cache_spec_*) only when set; in positional
 * form a defaulted field before a set one is written as nil. An empty medium or lora_name is
 * written as nil. A set extra_keys entry is written as the one-element tuple ["kvw-extra"],
 * since the decoder keeps only whether an entry is set.
 *
 * Use: kvw_enc_init once; per payload kvw_enc_begin, exactly nevents calls of kvw_enc_event or
 * kvw_enc_unknown, then kvw_enc_end; kvw_enc_free at the end. Errors are sticky and reported
 * by kvw_enc_end.
 */
struct kvw_enc {
	msgpack_sbuffer sbuf;
	msgpack_packer pk;
	struct kvw_enc_opts opts;
	size_t declared, written;
	bool has_rank;
	int64_t dp_rank;
	int err;
};

void kvw_enc_init(struct kvw_enc *e);
void kvw_enc_free(struct kvw_enc *e);

/*
 * Starts a batch of nevents events. has_rank false omits data_parallel_rank, as msgspec does
 * for its nil default.
 */
void kvw_enc_begin(struct kvw_enc *e, const struct kvw_enc_opts *opts, double ts,
		   size_t nevents, bool has_rank, int64_t dp_rank);

/* Appends one event as described by ev (its type selects the fields). */
void kvw_enc_event(struct kvw_enc *e, const struct kvw_event *ev);

/* Appends an event with tag tag and no fields (for testing the skip path). */
void kvw_enc_unknown(struct kvw_enc *e, const char *tag);

/*
 * Finishes the batch. On success returns 0 and sets *buf and *len to the payload, owned by e and
 * valid until the next kvw_enc_begin or kvw_enc_free. Returns -ENOMEM if a write failed, or
 * -EINVAL if the number of events differs from the one declared or an event was invalid
 * (unknown type, more than KVW_MAX_* elements, NULL array with a non-zero count).
 */
int kvw_enc_end(struct kvw_enc *e, const void **buf, size_t *len);

#endif /* KVIDX_WIRE_H */
