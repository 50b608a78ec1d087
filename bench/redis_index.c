/*
 * redis_index.c — llm-d's Redis index layout over hiredis (see redis_index.h).
 */
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "benchlib.h"
#include "fixture.h"
#include "redis_index.h"

#define REDIS_TS "2025-01-01T00:00:00Z"

redisContext *redis_open(int port)
{
	redisContext *c = redisConnect("127.0.0.1", port);
	int one = 1;

	if (!c || c->err)
		bdie("cannot connect to redis-server on port %d: %s", port,
		     c ? c->errstr : "out of memory");
	setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return c;
}

void redis_call(redisContext *c, const char *fmt, ...)
{
	va_list ap;
	redisReply *r;

	va_start(ap, fmt);
	r = redisvCommand(c, fmt, ap);
	va_end(ap);
	if (!r)
		bdie("redis %s: %s", fmt, c->errstr);
	if (r->type == REDIS_REPLY_ERROR)
		bdie("redis %s: %s", fmt, r->str);
	freeReplyObject(r);
}

/* "<model>@<key>" into buf; returns its length. The key in decimal, as llm-d prints hashes. */
static size_t redis_key(char *buf, uint64_t key)
{
	char tmp[24];
	size_t n = 0, m = sizeof(BENCH_MODEL) - 1;

	memcpy(buf, BENCH_MODEL "@", m + 1);
	do
		tmp[n++] = (char)('0' + key % 10);
	while ((key /= 10) != 0);
	for (size_t i = 0; i < n; i++)
		buf[m + 1 + i] = tmp[n - 1 - i];
	return m + 1 + n;
}

/* "<pod>@gpu" into buf; returns its length. */
static size_t redis_field(char *buf, size_t len, uint16_t pod)
{
	int n = pod_name(buf, len, pod);

	n += snprintf(buf + n, len - (size_t)n, "@gpu");
	return (size_t)n;
}

/* The pod index of field "10.A.B.C:8000@tier", parsed back as a router maps names. */
static unsigned redis_field_pod(const char *p, size_t len)
{
	const char *e = p + len;
	unsigned part[4] = { 0, 0, 0, 0 }, np = 0;

	while (p < e && *p != ':' && *p != '@') {
		if (*p == '.')
			np = np < 3 ? np + 1 : 3;
		else
			part[np] = part[np] * 10 + (unsigned)(*p - '0');
		p++;
	}
	return (part[1] << 16) | (part[2] << 8) | part[3];
}

static void redis_appended(redisContext *c, int rc)
{
	if (rc != REDIS_OK)
		bdie("redis: cannot append a command: %s", c->errstr);
}

void redis_hset(redisContext *c, uint64_t key, const uint16_t *pods, unsigned npods)
{
	char k[64], f[8][40];
	const char *argv[2 + 2 * 8];
	size_t lens[2 + 2 * 8];
	int argc = 0;

	argv[argc] = "HSET";
	lens[argc++] = 4;
	lens[argc] = redis_key(k, key);
	argv[argc++] = k;
	for (unsigned i = 0; i < npods && i < 8; i++) {
		lens[argc] = redis_field(f[i], sizeof(f[i]), pods[i]);
		argv[argc++] = f[i];
		argv[argc] = REDIS_TS;
		lens[argc++] = sizeof(REDIS_TS) - 1;
	}
	redis_appended(c, redisAppendCommandArgv(c, argc, argv, lens));
}

void redis_hdel(redisContext *c, uint64_t key, uint16_t pod)
{
	char k[64], f[40];
	const char *argv[3] = { "HDEL", k, f };
	size_t lens[3] = { 4, redis_key(k, key), redis_field(f, sizeof(f), pod) };

	redis_appended(c, redisAppendCommandArgv(c, 3, argv, lens));
}

void redis_hkeys(redisContext *c, uint64_t key)
{
	char k[64];
	const char *argv[2] = { "HKEYS", k };
	size_t lens[2] = { 5, redis_key(k, key) };

	redis_appended(c, redisAppendCommandArgv(c, 2, argv, lens));
}

void redis_send(redisContext *c)
{
	int done = 0;

	while (!done)
		if (redisBufferWrite(c, &done) != REDIS_OK)
			bdie("redis write: %s", c->errstr);
}

/*
 * The replies of the measured pipelines are read with reply-object functions of their own
 * (hiredis's redisReplyObjectFunctions): an HKEYS reply's fields go to the caller's function
 * as the reader parses them, the replies redis_skip() drops are only checked for errors, and
 * no reply object is allocated (the reader only needs a non-NULL object back, which hk_obj
 * is). The hand-written client this replaced parsed in place too: the baseline's client costs
 * what a lean client costs, and the rows measure Redis.
 */
struct hk_read {
	void (*fn)(void *arg, unsigned pod); /* NULL: any reply but an error is dropped */
	void *arg;
	uint64_t fields;
	int bad_type;  /* the type of the first reply or element that is not a string field */
	char err[128]; /* an error reply's text */
};

static char hk_obj;

/* Notes a reply or element an HKEYS reply does not hold (nothing when dropping replies). */
static void hk_bad(const redisReadTask *t)
{
	struct hk_read *h = t->privdata;

	if (h->fn && !h->bad_type)
		h->bad_type = t->type;
}

static void *hk_string(const redisReadTask *t, char *s, size_t len)
{
	struct hk_read *h = t->privdata;

	if (t->type == REDIS_REPLY_STRING && t->parent && h->fn) {
		h->fn(h->arg, redis_field_pod(s, len));
		h->fields++;
	} else {
		if (t->type == REDIS_REPLY_ERROR)
			snprintf(h->err, sizeof(h->err), "%.*s", (int)len, s);
		hk_bad(t);
	}
	return &hk_obj;
}

static void *hk_array(const redisReadTask *t, int n)
{
	(void)n;
	if (t->parent)
		hk_bad(t);
	return &hk_obj;
}

static void *hk_integer(const redisReadTask *t, long long v)
{
	(void)v;
	hk_bad(t);
	return &hk_obj;
}

static void *hk_nil(const redisReadTask *t)
{
	hk_bad(t);
	return &hk_obj;
}

static void hk_free(void *obj)
{
	(void)obj;
}

static redisReplyObjectFunctions hk_fns = { hk_string, hk_array, hk_integer, hk_nil, hk_free };

/* Reads one reply through hk_fns into h; dies on an error reply or one h does not expect. */
static void hk_reply(redisContext *c, struct hk_read *h)
{
	redisReader *rd = c->reader;
	redisReplyObjectFunctions *fn0 = rd->fn;
	void *priv0 = rd->privdata, *obj = NULL;
	int rc;

	/* Whole replies only: the reader parses nothing ahead of the reply asked for. */
	rd->fn = &hk_fns;
	rd->privdata = h;
	rc = redisGetReply(c, &obj);
	rd->fn = fn0;
	rd->privdata = priv0;
	if (rc != REDIS_OK || !obj)
		bdie("redis: %s", c->err ? c->errstr : "no reply");
	if (h->err[0])
		bdie("redis error: %s", h->err);
	if (h->bad_type)
		bdie("redis: HKEYS answered with a reply of type %d", h->bad_type);
}

uint64_t redis_read_hkeys(redisContext *c, void (*fn)(void *arg, unsigned pod), void *arg)
{
	struct hk_read h = { .fn = fn, .arg = arg };

	hk_reply(c, &h);
	return h.fields;
}

void redis_skip(redisContext *c, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++) {
		struct hk_read h = { .fn = NULL };
		hk_reply(c, &h);
	}
}

/* A scratch for llm-d's Lookup: per key, its pods, then the prefix cut. */
struct redis_scan {
	struct rows *rw;
	uint32_t i;
	unsigned alive;
	bool stopped;
};

static void redis_scan_pod(void *arg, unsigned pod)
{
	struct redis_scan *s = arg;

	if (!s->stopped)
		s->alive += rows_extend(s->rw, pod, s->i);
}

uint32_t score_redis(redisContext *c, struct rows *rw, const uint64_t *k, uint32_t n)
{
	struct redis_scan s = { .rw = rw };

	for (uint32_t i = 0; i < n; i++)
		redis_hkeys(c, k[i]);
	redis_send(c);
	for (uint32_t i = 0; i < n; i++) {
		s.i = i;
		s.alive = 0;
		uint64_t got = redis_read_hkeys(c, redis_scan_pod, &s);
		if (!s.stopped && (got == 0 || s.alive == 0))
			s.stopped = true; /* every reply is still read: the pipeline was sent whole */
	}
	return rows_best_reset(rw);
}

uint64_t redis_used_memory(redisContext *c)
{
	redisReply *r = redisCommand(c, "INFO memory");
	uint64_t v = 0;

	if (!r)
		bdie("redis INFO: %s", c->errstr);
	if (r->type == REDIS_REPLY_STRING) {
		const char *m = strstr(r->str, "used_memory:");
		if (m)
			v = strtoull(m + 12, NULL, 10);
	}
	freeReplyObject(r);
	return v;
}
