/*
 * serve.h — internal to kvidx-fakepod, the router tools and the tests; never installed.
 *
 * The tiny request/reply protocol a router worker uses to "send a prompt" to a fake pod
 * (kvidx-fakepod --serve), so that routing decisions can be followed by the pod's own
 * BlockStored events exactly as with a real vLLM server, without HTTP.
 *
 * Messages are single msgpack frames:
 *
 *   request  [corr_id, model, tokens]         corr_id: uint64, the router's correlation id
 *                                             model:   str, < KVS_MODEL_MAX bytes, no NUL
 *                                             tokens:  array of uint32 (the prompt)
 *   reply    [corr_id, cached_tokens, status] cached_tokens: uint32, prompt tokens the pod
 *                                             found in its prefix cache
 *                                             status:  str "ok", "failed" or "cancelled"
 *
 * Each is an array of exactly three elements. Integers may use any msgpack integer format
 * whose value is in range (signed formats included, as some encoders use them for
 * non-negative values). Anything else (another type, a negative or too large value, a
 * truncated or longer message, trailing bytes) is rejected with a message naming the element.
 *
 * Framing over ZMQ: the client is a DEALER and sends ["", request]; the pod's ROUTER then sees
 * [identity, "", request] and answers [identity, "", reply], so the DEALER receives
 * ["", reply]. A client that omits the empty delimiter gets its reply without one. Replies
 * come in completion order, not request order: match them by corr_id.
 *
 * The decoders read the bytes themselves (no msgpack-c object tree), so a message's claimed
 * counts never make them allocate more than the message's own size justifies.
 * Nothing here is thread-safe on a shared object; distinct objects may be used concurrently.
 * No function blocks.
 */
#ifndef KVIDX_SERVE_H
#define KVIDX_SERVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>

#define KVS_MAX_TOKENS (1u << 22)  /* tokens in one request, as KVW_MAX_TOKENS */
#define KVS_MAX_MSG    (32u << 20) /* bytes in one request or reply (4 Mi tokens fit) */
#define KVS_MODEL_MAX  256         /* model capacity, terminating NUL included */

enum kvs_status {
	KVS_OK = 0,    /* prefill done; the pod stored the prompt's new full blocks */
	KVS_FAILED,    /* prefill failed (or the pod restarted, or refused): nothing stored */
	KVS_CANCELLED, /* the client went away before prefill finished: nothing stored */
};

/*
 * A decoded request. Zero-initialise it (or call kvs_request_init()) before the first decode
 * and reuse it; tokens points into storage owned by the struct, valid until the next decode or
 * kvs_request_free().
 */
struct kvs_request {
	uint64_t corr_id;
	char model[KVS_MODEL_MAX];
	const uint32_t *tokens;
	size_t ntokens;

	/* Private to serve.c. */
	uint32_t *kvs_pool;
	size_t kvs_cap;
};

struct kvs_reply {
	uint64_t corr_id;
	uint32_t cached_tokens;
	enum kvs_status status;
};

void kvs_request_init(struct kvs_request *rq);
void kvs_request_free(struct kvs_request *rq);

/*
 * Appends one request to out (the caller clears it between messages). Returns 0; -EINVAL if
 * model is NULL or KVS_MODEL_MAX bytes or longer, if ntokens exceeds KVS_MAX_TOKENS, or if
 * tokens is NULL with ntokens > 0; or -ENOMEM.
 */
int kvs_encode_request(msgpack_sbuffer *out, uint64_t corr_id, const char *model,
		       const uint32_t *tokens, size_t ntokens);

/*
 * Decodes one request of len bytes into out. Returns 0; or, with out->ntokens set to 0 and a
 * one-line message in err (truncated to errlen, NUL-terminated; err may be NULL when errlen is
 * 0): -EBADMSG (not the schema, truncated, trailing bytes), -E2BIG (len > KVS_MAX_MSG, more
 * than KVS_MAX_TOKENS tokens, model too long), or -ENOMEM (out keeps its previous storage).
 * Never reads outside buf[0, len).
 */
int kvs_decode_request(const void *buf, size_t len, struct kvs_request *out, char *err,
		       size_t errlen);

/* Appends one reply to out. Returns 0, -EINVAL for an unknown status, or -ENOMEM. */
int kvs_encode_reply(msgpack_sbuffer *out, const struct kvs_reply *rp);

/*
 * Decodes one reply of len bytes into out. Returns 0, or -EBADMSG / -E2BIG with a message in
 * err as kvs_decode_request() does (out is then unspecified). An unknown status string is
 * -EBADMSG.
 */
int kvs_decode_reply(const void *buf, size_t len, struct kvs_reply *out, char *err,
		     size_t errlen);

/* "ok", "failed", "cancelled", or "?" for anything else. */
const char *kvs_status_name(enum kvs_status status);

#endif /* KVIDX_SERVE_H */
