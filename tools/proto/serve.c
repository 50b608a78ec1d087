/*
 * serve.c — encoder and decoder for the fake pod's request/reply messages (see serve.h).
 *
 * Encoding goes through msgpack-c's packer, like wire.c's encoder. Decoding reads the bytes
 * with a small cursor instead of msgpack-c's unpacker: the schema is three fixed elements,
 * so a direct reader is shorter than a pre-scan plus an object tree, and it can check the
 * token count against the bytes left before allocating anything.
 */
#include "serve.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const status_names[] = {
	[KVS_OK] = "ok",
	[KVS_FAILED] = "failed",
	[KVS_CANCELLED] = "cancelled",
};

#define NSTATUS (sizeof status_names / sizeof status_names[0])

const char *kvs_status_name(enum kvs_status status)
{
	return (unsigned)status < NSTATUS ? status_names[status] : "?";
}

void kvs_request_init(struct kvs_request *rq)
{
	memset(rq, 0, sizeof(*rq));
}

void kvs_request_free(struct kvs_request *rq)
{
	free(rq->kvs_pool);
	kvs_request_init(rq);
}

/* ---- encoder -------------------------------------------------------------------------------- */

int kvs_encode_request(msgpack_sbuffer *out, uint64_t corr_id, const char *model,
		       const uint32_t *tokens, size_t ntokens)
{
	msgpack_packer pk;
	size_t mlen;
	int r;

	if (!model || (mlen = strlen(model)) >= KVS_MODEL_MAX || ntokens > KVS_MAX_TOKENS ||
	    (ntokens && !tokens))
		return -EINVAL;
	msgpack_packer_init(&pk, out, msgpack_sbuffer_write);
	r = msgpack_pack_array(&pk, 3);
	r |= msgpack_pack_uint64(&pk, corr_id);
	r |= msgpack_pack_str_with_body(&pk, model, mlen);
	r |= msgpack_pack_array(&pk, ntokens);
	for (size_t i = 0; i < ntokens && !r; i++)
		r |= msgpack_pack_uint32(&pk, tokens[i]);
	return r ? -ENOMEM : 0;
}

int kvs_encode_reply(msgpack_sbuffer *out, const struct kvs_reply *rp)
{
	msgpack_packer pk;
	const char *st;
	int r;

	if ((unsigned)rp->status >= NSTATUS)
		return -EINVAL;
	st = status_names[rp->status];
	msgpack_packer_init(&pk, out, msgpack_sbuffer_write);
	r = msgpack_pack_array(&pk, 3);
	r |= msgpack_pack_uint64(&pk, rp->corr_id);
	r |= msgpack_pack_uint32(&pk, rp->cached_tokens);
	r |= msgpack_pack_str_with_body(&pk, st, strlen(st));
	return r ? -ENOMEM : 0;
}

/* ---- decoder -------------------------------------------------------------------------------- */

struct cur {
	const uint8_t *p, *end;
	const char *what; /* "request" or "reply", for messages */
	char *err;
	size_t errlen;
};

__attribute__((format(printf, 3, 4)))
static int fail(struct cur *c, int rc, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (c->errlen == 0)
		return rc;
	n = snprintf(c->err, c->errlen, "%s: ", c->what);
	if (n < 0 || (size_t)n >= c->errlen)
		return rc;
	va_start(ap, fmt);
	vsnprintf(c->err + n, c->errlen - (size_t)n, fmt, ap);
	va_end(ap);
	return rc;
}

/* The msgpack type family a leading byte starts, for error messages. */
static const char *type_name(uint8_t b)
{
	if (b <= 0x7f || b >= 0xe0 || (b >= 0xcc && b <= 0xd3))
		return "int";
	if (b <= 0x8f || b == 0xde || b == 0xdf)
		return "map";
	if (b <= 0x9f || b == 0xdc || b == 0xdd)
		return "array";
	if (b <= 0xbf || (b >= 0xd9 && b <= 0xdb))
		return "str";
	switch (b) {
	case 0xc0: return "nil";
	case 0xc2: case 0xc3: return "bool";
	case 0xc4: case 0xc5: case 0xc6: return "bin";
	case 0xca: case 0xcb: return "float";
	case 0xc1: return "reserved byte 0xc1";
	default: return "ext";
	}
}

/* Reads an n-byte big-endian unsigned integer; false if fewer than n bytes are left. */
static bool get_be(struct cur *c, size_t n, uint64_t *v)
{
	if ((size_t)(c->end - c->p) < n)
		return false;
	*v = 0;
	for (size_t i = 0; i < n; i++)
		*v = *v << 8 | c->p[i];
	c->p += n;
	return true;
}

#define TRUNCATED(c, field) fail((c), -EBADMSG, "%s: truncated", (field))

/* Reads an array header; the count is returned in *n. */
static int get_array(struct cur *c, const char *field, uint64_t *n)
{
	uint8_t b;

	if (c->p == c->end)
		return TRUNCATED(c, field);
	b = *c->p;
	if (b >= 0x90 && b <= 0x9f) {
		c->p++;
		*n = b & 0x0f;
		return 0;
	}
	if (b == 0xdc || b == 0xdd) {
		c->p++;
		return get_be(c, b == 0xdc ? 2 : 4, n) ? 0 : TRUNCATED(c, field);
	}
	return fail(c, -EBADMSG, "%s: expected array, got %s", field, type_name(b));
}

/* Reads a non-negative integer <= max in any integer format. */
static int get_uint(struct cur *c, const char *field, uint64_t max, uint64_t *v)
{
	static const uint8_t width[] = { 1, 2, 4, 8 };
	uint8_t b;

	if (c->p == c->end)
		return TRUNCATED(c, field);
	b = *c->p;
	if (b <= 0x7f) {
		c->p++;
		*v = b;
	} else if (b >= 0xcc && b <= 0xcf) {
		c->p++;
		if (!get_be(c, width[b - 0xcc], v))
			return TRUNCATED(c, field);
	} else if (b >= 0xd0 && b <= 0xd3) {
		size_t n = width[b - 0xd0];

		c->p++;
		if (!get_be(c, n, v))
			return TRUNCATED(c, field);
		if (*v >> (8 * n - 1))
			return fail(c, -EBADMSG, "%s: expected uint, got a negative int", field);
	} else if (b >= 0xe0) {
		return fail(c, -EBADMSG, "%s: expected uint, got a negative int", field);
	} else {
		return fail(c, -EBADMSG, "%s: expected uint, got %s", field, type_name(b));
	}
	if (*v > max)
		return fail(c, -EBADMSG, "%s: %llu out of range [0, %llu]", field,
			    (unsigned long long)*v, (unsigned long long)max);
	return 0;
}

/* Reads a str header and body; *s points into the message. */
static int get_str(struct cur *c, const char *field, const char **s, size_t *len)
{
	uint64_t n;
	uint8_t b;

	if (c->p == c->end)
		return TRUNCATED(c, field);
	b = *c->p;
	if (b >= 0xa0 && b <= 0xbf) {
		c->p++;
		n = b & 0x1f;
	} else if (b >= 0xd9 && b <= 0xdb) {
		c->p++;
		if (!get_be(c, (size_t)1 << (b - 0xd9), &n))
			return TRUNCATED(c, field);
	} else {
		return fail(c, -EBADMSG, "%s: expected str, got %s", field, type_name(b));
	}
	if ((uint64_t)(c->end - c->p) < n)
		return TRUNCATED(c, field);
	*s = (const char *)c->p;
	*len = (size_t)n;
	c->p += n;
	return 0;
}

/* Reads the outer [a, b, c] header and checks its count. */
static int get_triple(struct cur *c)
{
	uint64_t n;
	int r = get_array(c, "message", &n);

	if (r)
		return r;
	if (n != 3)
		return fail(c, -EBADMSG, "expected 3 elements, got %llu", (unsigned long long)n);
	return 0;
}

static int check_end(struct cur *c)
{
	if (c->p != c->end)
		return fail(c, -EBADMSG, "%zu trailing bytes", (size_t)(c->end - c->p));
	return 0;
}

static int decode_request(struct cur *c, struct kvs_request *out)
{
	const char *model;
	size_t mlen;
	uint64_t n, v;
	int r;

	if ((r = get_triple(c)) || (r = get_uint(c, "corr_id", UINT64_MAX, &out->corr_id)) ||
	    (r = get_str(c, "model", &model, &mlen)))
		return r;
	if (mlen >= KVS_MODEL_MAX)
		return fail(c, -E2BIG, "model: %zu bytes, limit %u", mlen, KVS_MODEL_MAX - 1);
	if (memchr(model, '\0', mlen))
		return fail(c, -EBADMSG, "model: contains a NUL byte");
	memcpy(out->model, model, mlen);
	out->model[mlen] = '\0';
	if ((r = get_array(c, "tokens", &n)))
		return r;
	if (n > KVS_MAX_TOKENS)
		return fail(c, -E2BIG, "tokens: %llu tokens, limit %u", (unsigned long long)n,
			    KVS_MAX_TOKENS);
	/* Every token takes at least one byte: a larger count cannot be honest. */
	if (n > (uint64_t)(c->end - c->p))
		return TRUNCATED(c, "tokens");
	if (n > out->kvs_cap) {
		uint32_t *pool = realloc(out->kvs_pool, (size_t)n * sizeof(*pool));

		if (!pool)
			return fail(c, -ENOMEM, "tokens: out of memory for %llu tokens",
				    (unsigned long long)n);
		out->kvs_pool = pool;
		out->kvs_cap = (size_t)n;
	}
	for (size_t i = 0; i < n; i++) {
		char field[32];

		if (c->p < c->end && *c->p <= 0x7f) { /* the common case: positive fixint */
			out->kvs_pool[i] = *c->p++;
			continue;
		}
		snprintf(field, sizeof field, "tokens[%zu]", i);
		if ((r = get_uint(c, field, UINT32_MAX, &v)))
			return r;
		out->kvs_pool[i] = (uint32_t)v;
	}
	if ((r = check_end(c)))
		return r;
	out->tokens = out->kvs_pool;
	out->ntokens = (size_t)n;
	return 0;
}

int kvs_decode_request(const void *buf, size_t len, struct kvs_request *out, char *err,
		       size_t errlen)
{
	struct cur c = { buf, (const uint8_t *)buf + len, "request", err, errlen };
	int r;

	out->ntokens = 0;
	out->tokens = out->kvs_pool;
	if (errlen)
		err[0] = '\0';
	if (len > KVS_MAX_MSG)
		return fail(&c, -E2BIG, "%zu bytes, limit %u", len, KVS_MAX_MSG);
	r = decode_request(&c, out);
	if (r)
		out->ntokens = 0;
	return r;
}

int kvs_decode_reply(const void *buf, size_t len, struct kvs_reply *out, char *err,
		     size_t errlen)
{
	struct cur c = { buf, (const uint8_t *)buf + len, "reply", err, errlen };
	const char *st;
	size_t stlen, i;
	uint64_t v;
	int r;

	if (errlen)
		err[0] = '\0';
	if (len > KVS_MAX_MSG)
		return fail(&c, -E2BIG, "%zu bytes, limit %u", len, KVS_MAX_MSG);
	if ((r = get_triple(&c)) || (r = get_uint(&c, "corr_id", UINT64_MAX, &out->corr_id)) ||
	    (r = get_uint(&c, "cached_tokens", UINT32_MAX, &v)) ||
	    (r = get_str(&c, "status", &st, &stlen)))
		return r;
	out->cached_tokens = (uint32_t)v;
	for (i = 0; i < NSTATUS; i++)
		if (strlen(status_names[i]) == stlen && !memcmp(status_names[i], st, stlen))
			break;
	if (i == NSTATUS) {
		bool printable = stlen <= 32;

		for (size_t k = 0; k < stlen && printable; k++)
			printable = st[k] >= 0x20 && st[k] < 0x7f;
		if (printable)
			return fail(&c, -EBADMSG, "status: unknown value '%.*s'", (int)stlen, st);
		return fail(&c, -EBADMSG, "status: unknown value of %zu bytes", stlen);
	}
	out->status = (enum kvs_status)i;
	return check_end(&c);
}
