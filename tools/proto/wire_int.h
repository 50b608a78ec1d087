/*
 * wire_int.h — private to tools/proto/: what the codec's files share (never included
 * elsewhere). The schema of each event type, the decoder's context and its error messages,
 * pool growth, big-endian loads, and the tree reader's two steps. Names start with wi_.
 */
#ifndef KVIDX_WIRE_INT_H
#define KVIDX_WIRE_INT_H

#include "wire.h"

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

extern const char *const wi_field_names[F_COUNT];

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

extern const struct schema wi_schemas[];
#define WI_NSCHEMAS 3

/* The schema of an event type, NULL for none. */
const struct schema *wi_schema_of(enum kvw_type type);

/* Whether msgpack string s is exactly lit. */
bool wi_str_eq(const msgpack_object_str *s, const char *lit);

/* ---- the decoder's context and its messages ---- */

struct dctx {
	struct kvw_batch *b;
	char *err;
	size_t errlen;
	bool in_event; /* messages get an "event N: " prefix */
	size_t evi;    /* index of the event in the payload's events array */
	const char *sname; /* "batch" or the event's tag, for field paths */
};

/* Writes the message (prefixed "event N: " inside an event) to c->err; returns rc. */
__attribute__((format(printf, 3, 4)))
int wi_fail(struct dctx *c, int rc, const char *fmt, ...);

/* A short description of o ("str of 3 bytes", "int 7", ...) in buf. */
const char *wi_describe(const msgpack_object *o, char *buf, size_t len);

/* "S.field[idx]: expected what, got ..." as -EBADMSG (idx SIZE_MAX: no index). */
int wi_bad(struct dctx *c, const char *field, size_t idx, const char *what, const msgpack_object *o);

/* Grows *arrp (a pointer to any array) to hold need elements of elsize bytes. 0 or -ENOMEM. */
int wi_reserve(void *arrp, size_t *cap, size_t need, size_t elsize);

/* ---- big-endian loads ---- */

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

/* n (1..8) bytes at p, big-endian. */
uint64_t wi_load_be(const uint8_t *p, size_t n);

/* ---- the payload's object tree (wire_tree.c) ---- */

/* Checks that p[0, len) is one complete, bounded msgpack object; counts its objects. */
int wi_scan_payload(struct dctx *c, const uint8_t *p, size_t len, uint64_t *nobj);

/* Builds the tree of a scanned payload of nobj objects into the batch's node pool. */
int wi_build_tree(struct dctx *c, const uint8_t *p, uint64_t nobj, msgpack_object *root);

#endif /* KVIDX_WIRE_INT_H */
