/*
 * wire.h — internal to kvidx-ingestd, kvidx-fakepod and the tests; never installed.
 *
 * The codec for vLLM's KV-cache event stream (docs/events.md): a decoder that turns
 * one msgpack payload (a KVEventBatch) into plain C structures, an encoder that produces the
 * same payloads for the fake pod and the tests, and the small helpers for the other two ZMQ
 * frames (topic and sequence frame: 8-byte number, optionally a 16-byte publisher id).
 *
 * The decoder accepts both encodings vLLM has used: positional arrays (msgspec array_like)
 * and "type"-tagged maps, for the batch and for each event independently. Trailing
 * positional fields and map keys it does not know are ignored; events with an unknown tag
 * are skipped and counted. Each event is judged on its own (docs/events.md "Batches"): an
 * event that breaks the schema or a per-event limit is left out of the batch and counted
 * (nbad, with the first message kept), and the other events of its batch decode normally.
 * Only a payload that is not one well-formed msgpack object, or whose batch envelope (ts,
 * events array, data_parallel_rank) is wrong, fails as a whole.
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
#define KVW_LOCALITY_MAX  16
#define KVW_OWNERSHIP_MAX 128
#define KVW_SESSION_MAX   128
#define KVW_SALT_MAX      256 /* BlockStored metadata.cache_salt (SGLang) */
#define KVW_ERR_MAX       256 /* kvw_batch.bad_msg */

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
 * One entry of a block's extra_keys tuple (docs/events.md "extra_keys"): in vLLM's
 * order the LoRA name (a str), multimodal items ((identifier, offset) tuples, or bare
 * identifier strings before vLLM 0.26), the cache salt (a str, block 0 only) and prompt-embeds
 * digests (bytes).
 */
enum kvw_xkind {
	KVW_X_STR = 1, /* a string: LoRA name, bare multimodal identifier or cache salt */
	KVW_X_MM,      /* a tuple whose element 0 is a string: (identifier, offset) */
	KVW_X_BYTES,   /* bin: a prompt-embeds digest, which no router can reproduce */
	KVW_X_OTHER,   /* anything else (nil, ints, maps, strings with NUL bytes...) */
};

struct kvw_xitem {
	enum kvw_xkind kind;
	const char *str;  /* STR, MM: the string, NUL-terminated; BYTES: the bytes; else NULL */
	uint32_t len;     /* bytes of str (NUL not counted) */
	bool has_offset;  /* MM: element 1 was an int in int64 range */
	int64_t offset;   /* MM: offset of the item's first token in the block (may be < 0) */
	size_t kvw_off;   /* private to the codec */
};

/* One block's extra_keys entry: nil (set false, no items) or a tuple of items. */
struct kvw_extra {
	bool set;
	const struct kvw_xitem *items;
	uint32_t nitems;
	size_t kvw_off; /* private to the codec */
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

	bool has_parent; /* BlockStored: parent_block_hash neither nil nor 0 (parent then 0) */
	uint64_t parent;

	const uint32_t *tokens; /* BlockStored: token_ids, all new full blocks back to back */
	size_t ntokens;         /* not checked against nhashes * block_size: the caller decides */
	uint32_t block_size;    /* BlockStored: 0 only for offload placeholders (no tokens) */

	bool has_lora_id; /* BlockStored: lora_id not nil (deprecated by vLLM for lora_name) */
	int64_t lora_id;

	char medium[KVW_MEDIUM_MAX];       /* BlockStored, BlockRemoved: "" = nil = GPU */
	char lora_name[KVW_LORA_NAME_MAX]; /* BlockStored: "" = nil */

	/*
	 * BlockStored.extra_keys: when not nil, one entry per block (the decoder does not check
	 * the count against nhashes: the caller decides). A non-nil entry that is not an array
	 * is kept as a tuple of that one item.
	 */
	bool has_extra_keys;
	const struct kvw_extra *extra;
	size_t nextra;

	bool has_group_idx; /* BlockStored, BlockRemoved: KV-cache group */
	uint32_t group_idx;

	char spec_kind[KVW_SPEC_KIND_MAX]; /* BlockStored.kv_cache_spec_kind, "" = nil */
	bool has_sliding_window;           /* BlockStored.kv_cache_spec_sliding_window */
	uint32_t sliding_window;

	/* BlockStored, BlockRemoved (vLLM 0.26+): "" = nil. locality "LOCAL" / "REMOTE";
	 * ownership names the offload tier that owns the copy; session_id (BlockStored). */
	char locality[KVW_LOCALITY_MAX];
	char ownership[KVW_OWNERSHIP_MAX];
	char session_id[KVW_SESSION_MAX];

	/* BlockStored: SGLang's BlockStoredWithMetadata carries the request's cache salt as a map
	 * {"cache_salt": str} in the 7th positional place (where vLLM has lora_name) or under
	 * "metadata" (docs/events.md "Other engines"); "" = none. */
	char cache_salt[KVW_SALT_MAX];

	/* BlockRemoved.remaining_copy_counts (proposed, vLLM #48933): when present, copies of
	 * each hash still held after this removal (the caller checks the count). */
	bool has_remaining;
	const uint32_t *remaining;
	size_t nremaining;

	/* Private to the codec: offsets into the batch's pools while the arrays may still move. */
	size_t kvw_hash_off, kvw_token_off, kvw_extra_off, kvw_rem_off;
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
	struct kvw_event *events; /* known, well-formed events, in payload order */
	size_t nevents;
	size_t nskipped;   /* events with an unknown tag, skipped */
	size_t nbad;       /* malformed events, left out */
	char bad_msg[KVW_ERR_MAX]; /* the first malformed event's message, "" if none */

	/* Private to the codec. */
	size_t kvw_ev_cap;
	uint64_t *kvw_hashes;
	size_t kvw_nhashes, kvw_hash_cap;
	uint32_t *kvw_tokens;
	size_t kvw_ntokens, kvw_token_cap;
	struct kvw_extra *kvw_xblocks;
	size_t kvw_nxblocks, kvw_xblock_cap;
	struct kvw_xitem *kvw_xitems;
	size_t kvw_nxitems, kvw_xitem_cap;
	char *kvw_xbytes;
	size_t kvw_nxbytes, kvw_xbyte_cap;
	uint32_t *kvw_rem;
	size_t kvw_nrem, kvw_rem_cap;
	msgpack_object *kvw_nodes; /* the payload's object tree (wire_tree.c) */
	size_t kvw_node_cap;
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
 * Returns 0 on success: out holds the batch, its known well-formed events in order, the
 * number of skipped unknown-tag events (nskipped) and of malformed events left out (nbad),
 * with the first one's message in bad_msg, e.g.
 * "event 3: BlockStored.token_ids[17]: expected int in [0, 2^32), got str" (events are
 * numbered from 0 in payload order, unknown ones included). A malformed event is one whose
 * fields have the wrong type, range or shape, or exceed a per-event limit (KVW_MAX_HASHES,
 * KVW_MAX_TOKENS, a string capacity). Otherwise out is empty (nevents 0: nothing partial is
 * visible), a one-line message is written to err (truncated to errlen, NUL-terminated; err
 * may be NULL when errlen is 0), and it returns
 *   -EBADMSG  not well-formed msgpack (truncated, trailing bytes, reserved byte), or a batch
 *             envelope of the wrong type or shape;
 *   -E2BIG    KVW_MAX_PAYLOAD or KVW_MAX_EVENTS exceeded;
 *   -ENOMEM   allocation failed (out keeps its previous storage and stays usable).
 * Never reads outside payload[0, len). Single-threaded per batch; does not block.
 */
int kvw_decode_batch(const void *payload, size_t len, struct kvw_batch *out, char *err,
		     size_t errlen);

/*
 * True when events of this group belong in a prefix index: kv_cache_spec_kind is nil,
 * "full_attention", "mla_attention" or "sink_full_attention". Sliding-window, Mamba and other
 * kinds are not prefix-reusable.
 */
bool kvw_is_prefix_group(const struct kvw_event *ev);

/* "BlockStored", "BlockRemoved", "AllBlocksCleared", or "?" for anything else. */
const char *kvw_type_name(enum kvw_type type);

/* ---- topic and sequence frames --------------------------------------------------------------- */

/*
 * Splits a topic frame (len bytes, not NUL-terminated) on '@'. Exactly three parts
 * ("kv@<pod>@<model>", the first part not checked) give pod and model; any other topic
 * (vLLM's default "", "kv-events", ...) names neither: both outputs are "". Both outputs are
 * NUL-terminated.
 * Returns 0, -EINVAL if the topic contains a NUL byte, or -ENAMETOOLONG if an output does not
 * fit its buffer (outputs are then "" ). podlen and modellen must be > 0.
 */
int kvw_parse_topic(const char *topic, size_t len, char *pod, size_t podlen, char *model,
		    size_t modellen);

/*
 * SGLang's topic frame (python/sglang/srt/disaggregation/kv_events.py, with a snapshot
 * endpoint configured) is the topic, then "\0sgl-kv-epoch=" and the publisher's epoch (a new
 * one per publisher process), optionally then "\0sgl-kv-snapshot=" and a barrier id. Splits
 * such a frame: *base_len is the topic's length before the first NUL (len if there is none);
 * a well-formed epoch that sf does not already carry an id for becomes sf's publisher id (the
 * epoch's 32 hex digits as 16 bytes, or a 128-bit hash of any other epoch string), so a new
 * epoch is read as an engine restart like a new vLLM publisher id. sf may be NULL.
 * Returns 0, or -EINVAL for a NUL byte that does not start SGLang's epoch marker (or an empty
 * epoch); *base_len is then 0.
 */
struct kvw_seqf;
int kvw_topic_split(const char *topic, size_t len, size_t *base_len, struct kvw_seqf *sf);

/*
 * Reads a sequence frame: 8 bytes, big-endian unsigned. Returns false (and leaves *seq alone)
 * if len is not 8.
 */
bool kvw_seq_get(const void *frame, size_t len, uint64_t *seq);

/*
 * A live or replayed message's sequence frame: the 8-byte big-endian sequence, optionally
 * followed by a 16-byte publisher id (vLLM #57789's shape, vllm/distributed/kv_events.py: a
 * new id is a new engine process). Returns false (*out untouched) for any other length.
 */
#define KVW_PUB_ID_LEN 16
struct kvw_seqf {
	uint64_t seq;
	bool has_id;
	uint8_t id[KVW_PUB_ID_LEN]; /* zero without an id */
};
bool kvw_seq_frame(const void *frame, size_t len, struct kvw_seqf *out);

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
 * the defaulted ones (extra_keys, group_idx, kv_cache_spec_*, locality, ownership,
 * session_id, remaining_copy_counts) only when set; in positional form a defaulted field
 * before a set one is written as nil. An empty string field is written as nil. extra_keys
 * entries: an unset one is nil, a set one the tuple of its items (STR a str, MM
 * [identifier, offset] or [identifier] without an offset, BYTES a bin, OTHER nil).
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

/* Appends len raw bytes as one event (one msgpack object, for testing malformed events). */
void kvw_enc_raw(struct kvw_enc *e, const void *obj, size_t len);

/*
 * Finishes the batch. On success returns 0 and sets *buf and *len to the payload, owned by e and
 * valid until the next kvw_enc_begin or kvw_enc_free. Returns -ENOMEM if a write failed, or
 * -EINVAL if the number of events differs from the one declared or an event was invalid
 * (unknown type, more than KVW_MAX_* elements, NULL array with a non-zero count).
 */
int kvw_enc_end(struct kvw_enc *e, const void **buf, size_t *len);

#endif /* KVIDX_WIRE_H */
