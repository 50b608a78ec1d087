/*
 * http.c — kvidx-fakepod --http: what a vLLM pod serves for routing purposes, in vLLM's
 * OpenAI-compatible shapes (docs/events.md "The request path (HTTP)"), over HTTP/1.1 with
 * keep-alive. GNU libmicrohttpd does the HTTP (the project's house server, as ingestd's
 * metrics endpoint); jansson parses and writes the JSON bodies. serve.c decides what
 * becomes of a prompt; this file turns requests into prompts and outcomes into answers.
 *
 *   POST /v1/completions       prompt as a string or as token ids ([1, 2, ...], or a batch
 *                              of one: ["text"] / [[1, 2, ...]]); max_tokens, stream,
 *                              stream_options.include_usage
 *   POST /v1/chat/completions  messages (text content), max_tokens / max_completion_tokens,
 *                              stream, stream_options.include_usage
 *   POST /tokenize             {"prompt": ...} or {"messages": [...],
 *                              "add_generation_prompt": bool}: {"count", "max_model_len",
 *                              "tokens", "token_strs"}
 *   GET  /v1/models, GET /health, GET /metrics (the pod model's vLLM metrics, engine.c)
 *
 * The stand-in tokenizer (deterministic, so that routers computing keys from /tokenize agree
 * with the pod): one token per byte of the UTF-8 text, its value (0..255); no special
 * tokens. The chat template writes each message as "<|ROLE|>\n" CONTENT "\n" and, when a
 * generation prompt is added (always for chat completions; /tokenize's
 * add_generation_prompt, default true), "<|assistant|>\n" at the end; content is a string
 * or a list of {"type": "text", "text": ...} parts.
 *
 * Answers: once the last token is generated (--prefill-ms: after the prefill time) the
 * whole answer is ready: max_tokens (default 16) output tokens " t0", " t1", ...; usage with
 * prompt_tokens_details.cached_tokens, the pod's prefix cache hit at admission (at arrival
 * with --prefill-ms); headers X-Fakepod-Ttft-Seconds, -Queue-Seconds, -E2e-Seconds, the
 * model's times. Streaming answers are server-sent events, one "data:" event per chunk, all
 * sent then; the usage chunk (choices []) when stream_options.include_usage; then
 * "data: [DONE]". Errors are OpenAI-style JSON
 * ({"error": {"message", "type", "param", "code"}}): 400 bad request (or larger than the KV
 * cache), 404 unknown model or
 * path, 405, 413, 500 failed prefill (or a restart), 503 too much in flight. A cancelled
 * request (--cancel-rate, or the "cancel" fault) is answered by closing the connection.
 * X-Request-Id is echoed (one is made up if absent) and names the completion ("cmpl-ID").
 *
 * Faults (for validation tools; fakepod only): a request header "X-Fakepod-Fault: LIST",
 * comma-separated: "fail" (prefill fails), "cancel", "drop-events" (the event batch is
 * lost), "restart" (the pod restarts as the request arrives; it fails), "delay=D" (this
 * request's events D after arrival instead of --event-delay-ms).
 *
 * Concurrency: libmicrohttpd runs in external polling mode (MHD_USE_EPOLL, no thread of its
 * own): main.c polls its epoll descriptor and calls http_run() on the pod's one thread,
 * so every callback here runs there too. A request waiting for its prefill is suspended
 * (MHD_suspend_connection) and resumed by http_answer().
 */
#include "fakepod.h"
#include "duration.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "cli.h"
#include "httpd.h"
#include "kvidx.h"
#include "listen.h"

#define MAX_BODY (64u << 20)       /* request body bytes */
#define MAX_OUT_TOKENS 65536u      /* max_tokens at most */
#define DEFAULT_MAX_TOKENS 16
#define CONN_LIMIT 4096
#define CONN_TIMEOUT_S 120         /* idle keep-alive connections are closed after this */


enum hstate { H_READ, H_WAIT, H_READY };
enum hkind { EP_COMPLETIONS, EP_CHAT };

struct hreq {
	struct fp *fp;
	struct MHD_Connection *conn;
	struct hreq *prev, *next; /* suspended requests (fp->suspended) */
	struct tc_buf body;
	bool too_big, suspended;
	enum hstate state;
	struct inflight *q;
	enum hkind kind;
	bool stream, usage;
	uint32_t max_tokens;
	size_t prompt_tokens;
	char id[160];
	enum srv_status st;
	uint32_t cached;
	bool timed;                /* http_times() was called */
	uint64_t ttft, queue, e2e; /* model time, ns */
};

/* A response body handed to libmicrohttpd, which frees it with the response. */
struct obuf {
	char *s;
	size_t len, pos;
};

/* ---- small builders ------------------------------------------------------------------------ */

static void sb_str(struct tc_buf *b, const char *s)
{
	tc_buf_add(b, s, strlen(s));
}

/* Appends "data: JSON\n\n" and frees j. */
static void sb_event(struct tc_buf *b, json_t *j)
{
	char *s = json_dumps(j, JSON_COMPACT);

	json_decref(j);
	if (!s)
		tc_die_nomem();
	sb_str(b, "data: ");
	sb_str(b, s);
	sb_str(b, "\n\n");
	free(s);
}

static void add_times(struct MHD_Response *r, const struct hreq *h);

/* Queues a response; th (or NULL) gives the model-time headers of an answer. */
static enum MHD_Result queue_body_t(struct MHD_Connection *c, unsigned status, char *s,
				    size_t len, const char *ctype, const char *reqid,
				    const struct hreq *th)
{
	struct MHD_Response *r =
		MHD_create_response_from_buffer(len, s, MHD_RESPMEM_MUST_FREE);
	enum MHD_Result rc;

	if (!r) {
		free(s);
		return MHD_NO;
	}
	if (ctype)
		MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
	if (reqid && *reqid)
		MHD_add_response_header(r, "X-Request-Id", reqid);
	if (th)
		add_times(r, th);
	rc = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return rc;
}

static enum MHD_Result queue_body(struct MHD_Connection *c, unsigned status, char *s,
				  size_t len, const char *ctype, const char *reqid)
{
	return queue_body_t(c, status, s, len, ctype, reqid, NULL);
}

static enum MHD_Result queue_json_t(struct MHD_Connection *c, unsigned status, json_t *j,
				    const char *reqid, const struct hreq *th)
{
	char *s = json_dumps(j, JSON_COMPACT);

	json_decref(j);
	if (!s)
		return MHD_NO;
	return queue_body_t(c, status, s, strlen(s), "application/json", reqid, th);
}

static enum MHD_Result queue_json(struct MHD_Connection *c, unsigned status, json_t *j,
				  const char *reqid)
{
	return queue_json_t(c, status, j, reqid, NULL);
}

/* The OpenAI-style error answer. */
static enum MHD_Result queue_error(struct hreq *h, unsigned status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static enum MHD_Result queue_error(struct hreq *h, unsigned status, const char *fmt, ...)
{
	char msg[512], *body;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (status == 400 || status == 413 || status == 405 || status == 404)
		h->fp->st.bad_requests++;
	body = tc_http_error_body(status, msg);
	if (!body)
		return MHD_NO;
	return queue_body(h->conn, status, body, strlen(body), "application/json", h->id);
}

/* ---- the stand-in tokenizer ---------------------------------------------------------------- */

struct toks {
	uint32_t *v;
	size_t n, cap;
};

static void toks_text(struct toks *t, const char *s, size_t n)
{
	tc_grow(&t->v, &t->cap, t->n + n, sizeof(*t->v));
	for (size_t i = 0; i < n; i++)
		t->v[t->n++] = (unsigned char)s[i];
}

/* A prompt: a string, token ids, or a batch of one of those. 0, or -1 with err set. */
static int prompt_tokens(json_t *p, struct toks *t, bool nested, char *err, size_t errlen)
{
	size_t i;
	json_t *e;

	if (json_is_string(p)) {
		toks_text(t, json_string_value(p), json_string_length(p));
		return 0;
	}
	if (!json_is_array(p) || !json_array_size(p)) {
		snprintf(err, errlen, "'prompt' must be a string or a non-empty list of token ids");
		return -1;
	}
	e = json_array_get(p, 0);
	if (!nested && (json_is_string(e) || json_is_array(e))) {
		if (json_array_size(p) > 1) {
			snprintf(err, errlen, "kvidx-fakepod serves one prompt per request, got %zu",
				 json_array_size(p));
			return -1;
		}
		return prompt_tokens(e, t, true, err, errlen);
	}
	tc_grow(&t->v, &t->cap, json_array_size(p), sizeof(*t->v));
	json_array_foreach(p, i, e) {
		json_int_t v = json_is_integer(e) ? json_integer_value(e) : -1;

		if (v < 0 || v > (json_int_t)UINT32_MAX) {
			snprintf(err, errlen, "'prompt'[%zu]: expected a token id (0..%u)", i,
				 UINT32_MAX);
			return -1;
		}
		t->v[t->n++] = (uint32_t)v;
	}
	return 0;
}

/* Chat messages through the stand-in template. 0, or -1 with err set. */
static int chat_tokens(json_t *msgs, bool add_gen, struct toks *t, char *err, size_t errlen)
{
	size_t i, k;
	json_t *m, *part;

	if (!json_is_array(msgs) || !json_array_size(msgs)) {
		snprintf(err, errlen, "'messages' must be a non-empty list");
		return -1;
	}
	json_array_foreach(msgs, i, m) {
		json_t *role = json_object_get(m, "role"), *content = json_object_get(m, "content");

		if (!json_is_string(role)) {
			snprintf(err, errlen, "'messages'[%zu].role: expected a string", i);
			return -1;
		}
		toks_text(t, "<|", 2);
		toks_text(t, json_string_value(role), json_string_length(role));
		toks_text(t, "|>\n", 3);
		if (json_is_string(content)) {
			toks_text(t, json_string_value(content), json_string_length(content));
		} else if (json_is_array(content)) {
			json_array_foreach(content, k, part) {
				json_t *ty = json_object_get(part, "type"),
				       *tx = json_object_get(part, "text");
				if (!json_is_string(ty) || strcmp(json_string_value(ty), "text") ||
				    !json_is_string(tx)) {
					snprintf(err, errlen, "'messages'[%zu].content[%zu]: "
						 "kvidx-fakepod serves text parts only", i, k);
					return -1;
				}
				toks_text(t, json_string_value(tx), json_string_length(tx));
			}
		} else if (!json_is_null(content) && content) {
			snprintf(err, errlen, "'messages'[%zu].content: expected a string or a list "
				 "of text parts", i);
			return -1;
		}
		toks_text(t, "\n", 1);
	}
	if (add_gen)
		toks_text(t, "<|assistant|>\n", 14);
	return 0;
}

/* ---- answers ------------------------------------------------------------------------------- */

static json_t *usage_json(const struct hreq *h)
{
	return json_pack("{s:I,s:I,s:I,s:{s:I}}", "prompt_tokens", (json_int_t)h->prompt_tokens,
			 "total_tokens", (json_int_t)(h->prompt_tokens + h->max_tokens),
			 "completion_tokens", (json_int_t)h->max_tokens, "prompt_tokens_details",
			 "cached_tokens", (json_int_t)h->cached);
}

/* The chunk of output token j (or the role chunk of a chat stream, j = -1). */
static json_t *chunk_json(const struct hreq *h, const char *id, json_int_t created, long j)
{
	char text[32] = "";
	const char *fin = j + 1 == (long)h->max_tokens ? "length" : NULL;
	json_t *choice;

	if (j >= 0)
		snprintf(text, sizeof(text), " t%ld", j);
	if (h->kind == EP_CHAT)
		choice = json_pack("{s:i,s:o,s:n,s:o}", "index", 0, "delta",
				   j < 0 ? json_pack("{s:s,s:s}", "role", "assistant", "content", "")
					 : json_pack("{s:s}", "content", text),
				   "logprobs", "finish_reason", fin ? json_string(fin) : json_null());
	else
		choice = json_pack("{s:i,s:s,s:n,s:o,s:n}", "index", 0, "text", text, "logprobs",
				   "finish_reason", fin ? json_string(fin) : json_null(),
				   "stop_reason");
	return json_pack("{s:s,s:s,s:I,s:s,s:[o]}", "id", id, "object",
			 h->kind == EP_CHAT ? "chat.completion.chunk" : "text_completion",
			 "created", created, "model", h->fp->o.model, "choices", choice);
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct obuf *o = cls;
	const char *s = o->s + o->pos, *end;
	size_t n;

	(void)pos;
	if (o->pos >= o->len)
		return MHD_CONTENT_READER_END_OF_STREAM;
	/* One event per chunk, as a server streaming tokens sends them. */
	end = memmem(s, o->len - o->pos, "\n\n", 2);
	n = end ? (size_t)(end + 2 - s) : o->len - o->pos;
	if (n > max)
		n = max;
	memcpy(buf, s, n);
	o->pos += n;
	return (ssize_t)n;
}

static void obuf_free(void *cls)
{
	struct obuf *o = cls;

	free(o->s);
	free(o);
}

/* The answer of a successful prefill. */
static enum MHD_Result queue_success(struct hreq *h)
{
	char id[200];
	json_int_t created = (json_int_t)time(NULL);
	struct tc_buf b = { 0 };

	snprintf(id, sizeof(id), "%s-%s", h->kind == EP_CHAT ? "chatcmpl" : "cmpl", h->id);
	if (!h->stream) {
		struct tc_buf text = { 0 };
		json_t *choice;
		char t[32];

		sb_str(&text, "");
		for (uint32_t j = 0; j < h->max_tokens; j++) {
			snprintf(t, sizeof(t), " t%u", j);
			sb_str(&text, t);
		}
		if (h->kind == EP_CHAT)
			choice = json_pack("{s:i,s:{s:s,s:s,s:[]},s:n,s:s,s:n}", "index", 0,
					   "message", "role", "assistant", "content", text.s,
					   "tool_calls", "logprobs", "finish_reason", "length",
					   "stop_reason");
		else
			choice = json_pack("{s:i,s:s,s:n,s:s,s:n,s:n}", "index", 0, "text", text.s,
					   "logprobs", "finish_reason", "length", "stop_reason",
					   "prompt_logprobs");
		free(text.s);
		return queue_json_t(h->conn, 200,
				    json_pack("{s:s,s:s,s:I,s:s,s:[o],s:o}", "id", id, "object",
					      h->kind == EP_CHAT ? "chat.completion"
								 : "text_completion",
					      "created", created, "model", h->fp->o.model,
					      "choices", choice, "usage", usage_json(h)),
				    h->id, h);
	}
	if (h->kind == EP_CHAT)
		sb_event(&b, chunk_json(h, id, created, -1));
	for (uint32_t j = 0; j < h->max_tokens; j++)
		sb_event(&b, chunk_json(h, id, created, j));
	if (h->usage)
		sb_event(&b, json_pack("{s:s,s:s,s:I,s:s,s:[],s:o}", "id", id, "object",
				       h->kind == EP_CHAT ? "chat.completion.chunk"
							  : "text_completion",
				       "created", created, "model", h->fp->o.model, "choices",
				       "usage", usage_json(h)));
	sb_str(&b, "data: [DONE]\n\n");

	struct obuf *o = tc_xrealloc(NULL, sizeof(*o));
	*o = (struct obuf){ b.s, b.len, 0 };
	struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 1 << 16,
								   stream_read, o, obuf_free);
	enum MHD_Result rc;
	if (!r) {
		obuf_free(o);
		return MHD_NO;
	}
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
				"text/event-stream; charset=utf-8");
	MHD_add_response_header(r, "X-Request-Id", h->id);
	add_times(r, h);
	rc = MHD_queue_response(h->conn, 200, r);
	MHD_destroy_response(r);
	return rc;
}

static enum MHD_Result queue_answer(struct hreq *h)
{
	switch (h->st) {
	case SRV_OK:
		return queue_success(h);
	case SRV_CANCELLED:
		return MHD_NO; /* the connection is closed without an answer */
	case SRV_FAILED:
	default:
		return queue_error(h, 500, "prefill failed (kvidx-fakepod: injected failure or "
				   "pod restart)");
	}
}

/* ---- serve.c's side ------------------------------------------------------------------------ */

void http_times(struct hreq *h, uint64_t ttft, uint64_t queue, uint64_t e2e)
{
	h->timed = true;
	h->ttft = ttft;
	h->queue = queue;
	h->e2e = e2e;
}

/* The model times of a successful answer, as headers: seconds, 6 decimals. */
static void add_times(struct MHD_Response *r, const struct hreq *h)
{
	char v[32];

	if (!h->timed)
		return;
	snprintf(v, sizeof v, "%.6f", (double)h->ttft / 1e9);
	MHD_add_response_header(r, "X-Fakepod-Ttft-Seconds", v);
	snprintf(v, sizeof v, "%.6f", (double)h->queue / 1e9);
	MHD_add_response_header(r, "X-Fakepod-Queue-Seconds", v);
	snprintf(v, sizeof v, "%.6f", (double)h->e2e / 1e9);
	MHD_add_response_header(r, "X-Fakepod-E2e-Seconds", v);
}

void http_bind(struct hreq *h, struct inflight *q)
{
	h->q = q;
}

void http_detach(struct hreq *h)
{
	h->q = NULL;
}

static void unlink_suspended(struct hreq *h)
{
	struct fp *fp = h->fp;

	if (h->prev)
		h->prev->next = h->next;
	else
		fp->suspended = h->next;
	if (h->next)
		h->next->prev = h->prev;
	h->prev = h->next = NULL;
	h->suspended = false;
}

void http_answer(struct fp *fp, struct hreq *h, enum srv_status st, uint32_t cached)
{
	h->st = st;
	h->cached = cached;
	h->state = H_READY;
	if (h->suspended) {
		unlink_suspended(h);
		MHD_resume_connection(h->conn);
		fp->http_kick = true;
	}
}

bool http_peer_gone(struct hreq *h)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(h->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	char c;
	ssize_t r;

	if (!ci)
		return false;
	r = recv(ci->connect_fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
	return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/* ---- requests ------------------------------------------------------------------------------ */

/* The X-Fakepod-Fault header. 0, or -1 with err set. */
static int parse_faults(const char *v, struct srv_fault *f, char *err, size_t errlen)
{
	char buf[256], *save = NULL, *tok;

	memset(f, 0, sizeof(*f));
	if (!v)
		return 0;
	snprintf(buf, sizeof(buf), "%s", v);
	for (tok = strtok_r(buf, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
		if (!strcmp(tok, "fail"))
			f->fail = true;
		else if (!strcmp(tok, "cancel"))
			f->cancel = true;
		else if (!strcmp(tok, "drop-events"))
			f->drop_events = true;
		else if (!strcmp(tok, "restart"))
			f->restart = true;
		else if (!strncmp(tok, "delay=", 6)) {
			double sec;
			int rc = tc_parse_duration(tok + 6, &sec);

			if (rc < 0) {
				snprintf(err, errlen, "X-Fakepod-Fault: bad delay '%s': %s", tok + 6,
					 tc_duration_error(rc));
				return -1;
			}
			f->has_delay = true;
			f->delay_ns = (uint64_t)(sec * 1e9 + 0.5);
		} else {
			snprintf(err, errlen, "X-Fakepod-Fault: unknown fault '%s' (fail, cancel, "
				 "drop-events, restart, delay=D)", tok);
			return -1;
		}
	}
	return 0;
}

/* "model" absent, or this pod's. */
static bool model_ok(struct hreq *h, json_t *req)
{
	json_t *m = json_object_get(req, "model");

	return !m || json_is_null(m) ||
	       (json_is_string(m) && !strcmp(json_string_value(m), h->fp->o.model));
}

static enum MHD_Result bad_model(struct hreq *h, json_t *req)
{
	json_t *m = json_object_get(req, "model");
	enum MHD_Result rc;

	if (!json_is_string(m))
		rc = queue_error(h, 400, "'model' must be a string");
	else
		rc = queue_error(h, 404, "The model `%s` does not exist.", json_string_value(m));
	json_decref(req);
	return rc;
}

static json_t *parse_body(struct hreq *h, char *err, size_t errlen)
{
	json_error_t je;
	json_t *j = json_loadb(h->body.s ? h->body.s : "", h->body.len, 0, &je);

	if (!j) {
		snprintf(err, errlen, "the body is not JSON: %s (line %d, column %d)", je.text,
			 je.line, je.column);
		return NULL;
	}
	if (!json_is_object(j)) {
		snprintf(err, errlen, "the body must be a JSON object");
		json_decref(j);
		return NULL;
	}
	return j;
}

static enum MHD_Result do_tokenize(struct hreq *h)
{
	char err[300];
	struct toks t = { 0 };
	json_t *req = parse_body(h, err, sizeof(err)), *arr;
	json_t *msgs, *agp;
	int rc;

	if (!req)
		return queue_error(h, 400, "%s", err);
	if (!model_ok(h, req))
		return bad_model(h, req);
	msgs = json_object_get(req, "messages");
	agp = json_object_get(req, "add_generation_prompt");
	if (msgs)
		rc = chat_tokens(msgs, !agp || json_is_true(agp), &t, err, sizeof(err));
	else if (json_object_get(req, "prompt"))
		rc = prompt_tokens(json_object_get(req, "prompt"), &t, false, err, sizeof(err));
	else
		rc = -1, snprintf(err, sizeof(err), "give 'prompt' or 'messages'");
	json_decref(req);
	if (rc) {
		free(t.v);
		return queue_error(h, 400, "%s", err);
	}
	arr = json_array();
	for (size_t i = 0; i < t.n; i++)
		json_array_append_new(arr, json_integer(t.v[i]));
	free(t.v);
	return queue_json(h->conn, 200,
			  json_pack("{s:I,s:I,s:o,s:n}", "count", (json_int_t)t.n, "max_model_len",
				    (json_int_t)KVW_MAX_TOKENS, "tokens", arr, "token_strs"),
			  h->id);
}

static enum MHD_Result do_generate(struct hreq *h)
{
	struct fp *fp = h->fp;
	char err[300];
	struct toks t = { 0 };
	struct srv_fault f;
	json_t *req = parse_body(h, err, sizeof(err)), *v, *so;
	int rc;

	fp->st.requests++;
	if (!req)
		return queue_error(h, 400, "%s", err);
	if (!model_ok(h, req))
		return bad_model(h, req);
	if (parse_faults(MHD_lookup_connection_value(h->conn, MHD_HEADER_KIND, "X-Fakepod-Fault"),
			 &f, err, sizeof(err))) {
		json_decref(req);
		return queue_error(h, 400, "%s", err);
	}
	if (h->kind == EP_CHAT)
		rc = chat_tokens(json_object_get(req, "messages"), true, &t, err, sizeof(err));
	else if (!json_object_get(req, "prompt"))
		rc = -1, snprintf(err, sizeof(err), "'prompt' is required");
	else
		rc = prompt_tokens(json_object_get(req, "prompt"), &t, false, err, sizeof(err));
	h->max_tokens = DEFAULT_MAX_TOKENS;
	v = json_object_get(req, "max_tokens");
	if (!v && h->kind == EP_CHAT)
		v = json_object_get(req, "max_completion_tokens");
	if (!rc && v && !json_is_null(v)) {
		json_int_t m = json_is_integer(v) ? json_integer_value(v) : -1;
		if (m < 1 || m > MAX_OUT_TOKENS)
			rc = -1, snprintf(err, sizeof(err), "'max_tokens' must be an integer in "
					  "1..%u", MAX_OUT_TOKENS);
		else
			h->max_tokens = (uint32_t)m;
	}
	v = json_object_get(req, "stream");
	if (!rc && v && !json_is_boolean(v) && !json_is_null(v))
		rc = -1, snprintf(err, sizeof(err), "'stream' must be a boolean");
	h->stream = json_is_true(v);
	so = json_object_get(req, "stream_options");
	h->usage = h->stream && json_is_true(json_object_get(so, "include_usage"));
	if (!rc && !t.n)
		rc = -1, snprintf(err, sizeof(err), "the prompt is empty");
	if (!rc && t.n > KVW_MAX_TOKENS)
		rc = -1, snprintf(err, sizeof(err), "This model's maximum context length is %u "
				  "tokens; the prompt has %zu", KVW_MAX_TOKENS, t.n);
	json_decref(req);
	if (rc) {
		free(t.v);
		return queue_error(h, 400, "%s", err);
	}
	h->prompt_tokens = t.n;
	h->state = H_WAIT;
	rc = serve_request(fp, h, t.v, t.n, h->max_tokens, &f, kvidx_now_ns());
	free(t.v);
	if (rc == -2)
		return queue_error(h, 400, "the prompt (%zu tokens) and max_tokens (%u) exceed the "
				   "KV cache (--kv-blocks %" PRIu64 " of %" PRIu32 " tokens)",
				   h->prompt_tokens, h->max_tokens, fp->o.kv_blocks,
				   fp->o.block_size);
	if (rc)
		return queue_error(h, f.restart ? 500 : 503, f.restart
				   ? "prefill failed: the pod restarted (X-Fakepod-Fault: restart)"
				   : "too many requests in flight");
	if (h->state == H_READY) /* answered at once (no prefill time) */
		return queue_answer(h);
	h->suspended = true;
	h->next = fp->suspended;
	if (h->next)
		h->next->prev = h;
	fp->suspended = h;
	MHD_suspend_connection(h->conn);
	return MHD_YES;
}

static enum MHD_Result do_models(struct hreq *h)
{
	return queue_json(h->conn, 200,
			  json_pack("{s:s,s:[{s:s,s:s,s:I,s:s,s:s,s:n,s:I}]}", "object", "list",
				    "data", "id", h->fp->o.model, "object", "model", "created",
				    (json_int_t)time(NULL), "owned_by", "kvidx-fakepod", "root",
				    h->fp->o.model, "parent", "max_model_len",
				    (json_int_t)KVW_MAX_TOKENS),
			  h->id);
}

static enum MHD_Result do_metrics(struct hreq *h)
{
	size_t len;
	char *s = engine_metrics(h->fp, &len);

	return queue_body(h->conn, 200, s, len, "text/plain; version=0.0.4; charset=utf-8",
			  h->id);
}

/* Rank r's endpoint of flag's ep, its host replaced by host unless host is NULL. */
static json_t *rank_ep(const char *flag, const char *ep, unsigned r, const char *host)
{
	char e[512], out[600];
	const char *colon;

	opts_rank_endpoint(flag, ep, r, e, sizeof e);
	colon = strrchr(e, ':');
	if (!host || !colon)
		return json_string(e);
	snprintf(out, sizeof out, "tcp://%s%s", host, colon);
	return json_string(out);
}

/* --kv-sources vllm / vllm-array: vLLM's GET /kv_event_sources
 * (vllm/entrypoints/serve/kv_events/api_router.py), one entry per rank. */
static enum MHD_Result do_sources(struct hreq *h)
{
	const struct opts *o = &h->fp->o;
	bool wild = !strcmp(o->kv_sources, "vllm");
	char topic[2 * NAME_MAX_LEN + 8];
	json_t *a = json_array();

	opts_topic(o, topic, sizeof topic);
	for (unsigned r = 0; r < (o->dp_ranks ? o->dp_ranks : 1); r++)
		json_array_append_new(
			a, json_pack("{s:I,s:o,s:o,s:s}", "data_parallel_rank", (json_int_t)r,
				     "endpoint", rank_ep("--pub", o->pub_ep, r, wild ? "0.0.0.0" : NULL),
				     "replay_endpoint",
				     o->replay_ep ? rank_ep("--replay", o->replay_ep, r,
							    wild ? "0.0.0.0" : NULL)
						  : json_null(),
				     "topic", topic));
	return queue_json(h->conn, 200, wild ? json_pack("{s:o}", "sources", a) : a, h->id);
}

/* --kv-sources sglang: SGLang's GET /server_info with its kv_events descriptor
 * (python/sglang/srt/server_args.py, describe_kv_events_publisher). */
static enum MHD_Result do_server_info(struct hreq *h)
{
	const struct opts *o = &h->fp->o;
	const char *colon = strrchr(o->pub_ep, ':');
	char topic[2 * NAME_MAX_LEN + 8];

	opts_topic(o, topic, sizeof topic);
	return queue_json(h->conn, 200,
			  json_pack("{s:s,s:{s:s,s:s,s:I,s:s,s:I,s:I}}", "served_model_name", o->model,
				    "kv_events", "publisher", "zmq", "endpoint_host", "*",
				    "endpoint_port_base", (json_int_t)(colon ? atoi(colon + 1) : 0),
				    "topic", topic, "block_size", (json_int_t)o->block_size,
				    "dp_size", (json_int_t)(o->dp_ranks ? o->dp_ranks : 1)),
			  h->id);
}

static enum MHD_Result dispatch(struct hreq *h, const char *url, const char *method)
{
	static const struct {
		const char *path, *method;
	} eps[] = {
		{ "/v1/completions", "POST" }, { "/v1/chat/completions", "POST" },
		{ "/tokenize", "POST" },       { "/v1/models", "GET" },
		{ "/health", "GET" },          { "/metrics", "GET" },
	};
	size_t i;

	const char *ks = h->fp->o.kv_sources;

	if (ks && !strcmp(method, "GET") && !strcmp(url, "/kv_event_sources") && strcmp(ks, "sglang"))
		return do_sources(h);
	if (ks && !strcmp(method, "GET") && !strcmp(url, "/server_info") && !strcmp(ks, "sglang"))
		return do_server_info(h);
	for (i = 0; i < sizeof(eps) / sizeof(eps[0]); i++)
		if (!strcmp(url, eps[i].path))
			break;
	if (i == sizeof(eps) / sizeof(eps[0]))
		return queue_error(h, 404, "no such endpoint: %s %s", method, url);
	if (strcmp(method, eps[i].method)) {
		enum MHD_Result rc = queue_error(h, 405, "%s takes %s, not %s", url,
						 eps[i].method, method);
		return rc;
	}
	if (h->too_big)
		return queue_error(h, 413, "the body exceeds %u bytes", MAX_BODY);
	switch (i) {
	case 0: h->kind = EP_COMPLETIONS; return do_generate(h);
	case 1: h->kind = EP_CHAT; return do_generate(h);
	case 2: return do_tokenize(h);
	case 3: return do_models(h);
	case 5: return do_metrics(h);
	default: return queue_body(h->conn, 200, NULL, 0, NULL, h->id);
	}
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url,
			       const char *method, const char *version, const char *data,
			       size_t *size, void **con_cls)
{
	struct fp *fp = cls;
	struct hreq *h = *con_cls;

	(void)version;
	if (!h) {
		h = tc_xrealloc(NULL, sizeof(*h));
		memset(h, 0, sizeof(*h));
		h->fp = fp;
		h->conn = c;
		if (!tc_http_request_id(c, h->id, sizeof(h->id)))
			snprintf(h->id, sizeof(h->id), "fakepod-%" PRIu64, ++fp->http_ids);
		*con_cls = h;
		return MHD_YES;
	}
	if (h->state == H_READ && *size) {
		tc_http_body_chunk(&h->body, &h->too_big, MAX_BODY, data, size);
		return MHD_YES;
	}
	if (h->state == H_READ)
		return dispatch(h, url, method);
	if (h->state == H_READY)
		return queue_answer(h);
	return MHD_YES;
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls,
		      enum MHD_RequestTerminationCode toe)
{
	struct hreq *h = *con_cls;

	(void)cls, (void)c, (void)toe;
	if (!h)
		return;
	if (h->q)
		serve_detach(h->q);
	if (h->suspended)
		unlink_suspended(h);
	free(h->body.s);
	free(h);
	*con_cls = NULL;
}

/* ---- the daemon ---------------------------------------------------------------------------- */

void http_start(struct fp *fp)
{
	char err[200];
	int fd = tc_listen_tcp(fp->o.http_addr, false, 1024, NULL, err, sizeof(err));

	if (fd < 0) {
		fprintf(stderr, PROG ": --http %s\n", err);
		exit(1);
	}
	fp->httpd = MHD_start_daemon(MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME, 0, NULL, NULL,
				     handler, fp, MHD_OPTION_LISTEN_SOCKET, fd,
				     MHD_OPTION_NOTIFY_COMPLETED, completed, fp,
				     MHD_OPTION_CONNECTION_LIMIT, (unsigned)CONN_LIMIT,
				     MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)CONN_TIMEOUT_S,
				     MHD_OPTION_END);
	if (!fp->httpd) {
		fprintf(stderr, PROG ": --http %s: cannot start the HTTP server\n",
			fp->o.http_addr);
		exit(1);
	}
	fp->http_fd = MHD_get_daemon_info(fp->httpd, MHD_DAEMON_INFO_EPOLL_FD)->epoll_fd;
}

long http_timeout_ms(struct fp *fp)
{
	MHD_UNSIGNED_LONG_LONG t;

	/* A resumed connection is taken up by the next MHD_run(), which its descriptor need
	 * not announce: run now, and poll without waiting for what that queued. */
	if (fp->http_kick) {
		fp->http_kick = false;
		MHD_run(fp->httpd);
		return 0;
	}
	if (!fp->httpd || MHD_get_timeout(fp->httpd, &t) != MHD_YES)
		return -1;
	return t > 1000000 ? 1000000 : (long)t;
}

void http_run(struct fp *fp)
{
	if (fp->httpd)
		MHD_run(fp->httpd);
}

void http_stop(struct fp *fp)
{
	if (!fp->httpd)
		return;
	/* libmicrohttpd cannot stop with suspended connections: resume them (their requests
	 * were freed with the queue, so they end without an answer). */
	while (fp->suspended) {
		struct hreq *h = fp->suspended;

		h->st = SRV_CANCELLED;
		h->state = H_READY;
		unlink_suspended(h);
		MHD_resume_connection(h->conn);
	}
	MHD_run(fp->httpd);
	MHD_stop_daemon(fp->httpd);
	fp->httpd = NULL;
}
