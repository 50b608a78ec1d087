/*
 * clwire.c — the cluster link's message format: encoder and validating decoder (the layout
 * and the bounds are in clwire.h).
 */
#include "clwire.h"

#include <errno.h>
#include <string.h>

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get64(const uint8_t *p)
{
	return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

uint64_t clw_scheme(int algo, const char *seed, uint32_t block_size)
{
	/* FNV-1a over algo, block size and the seed's bytes: an id, not a secret. */
	uint64_t h = 0xcbf29ce484222325ull;
	uint8_t head[8];

	put32(head, (uint32_t)algo);
	put32(head + 4, block_size);
	for (int i = 0; i < 8; i++)
		h = (h ^ head[i]) * 0x100000001b3ull;
	for (const char *s = seed ? seed : ""; *s; s++)
		h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
	return h;
}

void clw_enc_begin(struct clw_enc *e, uint8_t *buf, size_t cap, uint64_t origin,
		   uint64_t scheme)
{
	e->buf = buf;
	e->cap = cap > CLW_MSG_MAX ? CLW_MSG_MAX : cap;
	e->len = CLW_HDR;
	e->nrec = 0;
	memset(buf, 0, CLW_HDR);
	put32(buf, CLW_MAGIC);
	buf[4] = CLW_VERSION;
	put64(buf + 8, origin);
	put64(buf + 16, scheme);
}

/* A pod name as the wire carries it: 1..CLW_NAME_MAX printable ASCII bytes, no space. */
static bool name_ok(const char *s, size_t n)
{
	if (n < 1 || n > CLW_NAME_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] <= 0x20 || (unsigned char)s[i] >= 0x7f)
			return false;
	return true;
}

/* Why the last clw_rec_ok() said no (one thread per decoder: the writer's, or a test's). */
static _Thread_local const char *rec_why;

/* The per-kind bounds of a record, shared by the encoder and the decoder. */
static bool clw_rec_ok(int kind, const char *pod, size_t pl, const char *pre, size_t fl,
		       size_t nkeys, uint16_t ttl, uint16_t pre_ttl, uint32_t tokens)
{
	if (kind != CLW_COMMIT && kind != CLW_WITHDRAW && kind != CLW_DONE)
		return rec_why = "unknown record kind", false;
	if (!name_ok(pod, pl) || (fl && !name_ok(pre, fl)))
		return rec_why = "pod name not 1..63 printable bytes", false;
	if (kind == CLW_DONE ? nkeys != 0 || fl || ttl || pre_ttl || tokens
			     : nkeys < 1 || nkeys > CLW_MAX_KEYS)
		return rec_why = kind == CLW_DONE ? "a done record with keys, a prefill pod, a TTL "
						    "or tokens" : "no keys", false;
	if (kind == CLW_WITHDRAW && tokens)
		return rec_why = "a withdrawal with tokens", false;
	if (kind == CLW_COMMIT && (!ttl || (fl && !pre_ttl)))
		return rec_why = "commit with TTL 0", false;
	return true;
}

int clw_enc_add(struct clw_enc *e, const struct clw_rec *r, const uint64_t *keys)
{
	size_t pl = strnlen(r->pod, sizeof(r->pod)), fl = strnlen(r->prefill, sizeof(r->prefill));
	size_t need = CLW_REC_HDR + pl + fl + 8 * (size_t)r->nkeys;

	if (!clw_rec_ok(r->kind, r->pod, pl, r->prefill, fl, r->nkeys, r->ttl_ms,
			r->prefill_ttl_ms, r->tokens))
		return -EINVAL;
	if (e->nrec >= CLW_MAX_RECS || e->len + need > e->cap)
		return -ENOSPC;
	uint8_t *p = e->buf + e->len;
	p[0] = r->kind;
	p[1] = (uint8_t)pl;
	p[2] = (uint8_t)fl;
	p[3] = 0;
	put16(p + 4, r->ttl_ms);
	put16(p + 6, r->prefill_ttl_ms);
	put16(p + 8, r->nkeys);
	put16(p + 10, 0);
	put32(p + 12, r->tokens);
	put64(p + 16, r->corr);
	put64(p + 24, r->commit_ns);
	p += CLW_REC_HDR;
	memcpy(p, r->pod, pl);
	memcpy(p + pl, r->prefill, fl);
	p += pl + fl;
	for (size_t i = 0; i < r->nkeys; i++)
		put64(p + 8 * i, keys[i]);
	e->len += need;
	e->nrec++;
	return 0;
}

size_t clw_enc_finish(struct clw_enc *e, uint64_t sent_ns)
{
	put16(e->buf + 6, e->nrec);
	put64(e->buf + 24, sent_ns);
	return e->len;
}

int clw_dec_begin(struct clw_dec *d, const void *msg, size_t len, struct clw_header *h)
{
	const uint8_t *p = msg;

	memset(d, 0, sizeof(*d));
	if (len < CLW_HDR || len > CLW_MSG_MAX)
		return d->why = len < CLW_HDR ? "shorter than a header" : "over 64 KiB", -1;
	if (get32(p) != CLW_MAGIC)
		return d->why = "bad magic", -1;
	if (p[4] != CLW_VERSION)
		return d->why = "unknown version", -1;
	if (p[5] != 0)
		return d->why = "unknown flags", -1;
	h->nrec = get16(p + 6);
	h->origin = get64(p + 8);
	h->scheme = get64(p + 16);
	h->sent_ns = get64(p + 24);
	if (h->nrec < 1 || h->nrec > CLW_MAX_RECS)
		return d->why = "record count out of 1..256", -1;
	d->p = p + CLW_HDR;
	d->end = p + len;
	d->left = h->nrec;
	return 0;
}

enum clw_status clw_dec_next(struct clw_dec *d, struct clw_rec *r)
{
	const uint8_t *p = d->p;

	if (!d->left) {
		if (p != d->end)
			return d->why = "bytes after the last record", CLW_BAD;
		return CLW_END;
	}
	if ((size_t)(d->end - p) < CLW_REC_HDR)
		return d->why = "record header truncated", d->left = 0, d->p = d->end, CLW_BAD;
	size_t pl = p[1], fl = p[2], nk = get16(p + 8);
	if (nk > CLW_MAX_KEYS || pl > CLW_NAME_MAX || fl > CLW_NAME_MAX)
		return d->why = "a length over its bound", d->left = 0, d->p = d->end, CLW_BAD;
	size_t need = CLW_REC_HDR + pl + fl + 8 * nk;
	if ((size_t)(d->end - p) < need)
		return d->why = "record truncated", d->left = 0, d->p = d->end, CLW_BAD;
	d->p = p + need;
	d->left--;
	memset(r, 0, sizeof(*r));
	r->kind = p[0];
	r->ttl_ms = get16(p + 4);
	r->prefill_ttl_ms = get16(p + 6);
	r->nkeys = (uint16_t)nk;
	r->tokens = get32(p + 12);
	r->corr = get64(p + 16);
	r->commit_ns = get64(p + 24);
	memcpy(r->pod, p + CLW_REC_HDR, pl);
	memcpy(r->prefill, p + CLW_REC_HDR + pl, fl);
	r->keys = p + CLW_REC_HDR + pl + fl;
	if (p[3] || get16(p + 10))
		return d->why = "reserved bytes not zero", CLW_SKIP;
	if (!clw_rec_ok(r->kind, r->pod, pl, r->prefill, fl, r->nkeys, r->ttl_ms,
			r->prefill_ttl_ms, r->tokens))
		return d->why = rec_why, CLW_SKIP;
	return CLW_OK;
}
