/*
 * front.c — kvidx-route --listen: an OpenAI-compatible front for POST /v1/completions and
 * /v1/chat/completions that routes each request to the pod holding its prefix. Per
 * request:
 *
 *   1. tokens: a token-id prompt as given; a text prompt or chat messages through a pod's
 *      POST /tokenize, so that the keys are those of the server's own tokenizer and chat
 *      template (the same request fields are passed on);
 *   2. keys (the index's scheme, rooted at the request's model; cache_salt on block 0),
 *      score, pick among the pods that are up, commit (the prefill pod too under P/D);
 *   3. forward the body unchanged (a stream without stream_options.include_usage gets it
 *      added, and the usage chunk that brings is not passed on) with X-Request-Id;
 *   4. stream the answer back unchanged, byte for byte, as it comes, with X-Request-Id,
 *      X-Kvidx-Pod, X-Kvidx-Decision and X-Kvidx-Worker (this process's pid);
 *   5. report the outcome from the answer's usage (kvidx_report_outcome).
 *
 * The correlation id of the commit and the outcome is the request id: the client's
 * X-Request-Id (hashed, FNV-1a 64) or one made up ("kvidx-" and the id in hex). A pod that
 * cannot be reached is marked down for --down-ms and the request goes to the next best pod
 * (--tries pods at most), committed again. Bad requests get OpenAI-style JSON errors: 400
 * malformed, 404 unknown path, 405 wrong method, 413 too large, 502/503 no pod answered.
 *
 * Several fronts on one port: the listening socket has SO_REUSEPORT, so processes started
 * with the same --listen share the port (the kernel spreads connections over them) and,
 * with the same --name, one index: they see each other's predictions as soon as the writer
 * has applied the commits.
 *
 * libmicrohttpd serves (the project's house HTTP server, see tools/ingestd/metrics.c), in
 * external polling mode on this process's one thread: main loop = curl_multi_poll() over
 * libcurl's sockets plus libmicrohttpd's epoll descriptor and the signalfd. A request
 * waiting for its pod is suspended (MHD_suspend_connection) and resumed when the pod's head
 * or body arrives; a pod faster than its client is paused (CURL_WRITEFUNC_PAUSE) once
 * OUT_HIGH bytes wait, and unpaused when they are sent.
 */
#include "route.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <microhttpd.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "httpd.h"
#include "listen.h"

/* A /tokenize answer of MAX_PROMPT_TOKENS ids fits in this ({"count":N,...,"tokens":[...]},
 * at most 11 bytes an id): a longer one is a longer prompt, refused without parsing it. */
#define TOK_ANSWER_MAX (11ull * MAX_PROMPT_TOKENS + 4096)
#define OFFLOAD_MIN (1u << 20)   /* bodies from this size are parsed on the helper thread */
#define OUT_HIGH (1u << 20)      /* answer bytes waiting for the client before the pod pauses */
#define CONN_LIMIT 8192
#define CONN_TIMEOUT_S 600       /* idle client connections are closed after this */

enum fstate { F_READ, F_PARSE, F_TOKENIZE, F_FORWARD, F_REPLY, F_ERROR };
enum tokres { TOK_OK, TOK_EMPTY, TOK_BAD };
enum fep { EP_COMPLETIONS, EP_CHAT, EP_MODELS };

struct front;

struct freq {
	struct front *F;
	struct MHD_Connection *conn;
	struct freq *sprev, *snext; /* while suspended: F->suspended */
	struct tc_buf body;
	bool too_big, suspended, queued, tok_too_long;
	enum fstate state;
	struct job job;          /* a parse on the helper thread (offload.c) */
	json_error_t je;         /* the body's parse error */
	char *tok_body;          /* its /tokenize body, when built off the loop */
	char *fwd_body;          /* the body forwarded, when not the client's */
	size_t fwd_len;
	enum tokres tokres;      /* what the /tokenize answer held */
	enum fep ep;
	json_t *req;
	const char *auth;        /* the client's Authorization header (MHD's storage) */
	char id[160];
	uint64_t corr, t_recv;
	uint32_t *toks;
	size_t ntok;
	bool routed, plain, inject_usage, stream;
	struct decision d;
	uint64_t tried[MAX_PODS / 64];
	unsigned tries;
	struct call call;
	/* the answer */
	struct tc_buf out;
	size_t out_pos;
	bool up_done, up_failed;
	struct sse sse;
	struct usage u;
	unsigned err_status;
	char *err_body;
};

struct front {
	struct opts *o;
	struct router rt;
	struct client cl;
	struct MHD_Daemon *d;
	struct offload ol;
	int port;
	bool kick;
	char pid[16];             /* X-Kvidx-Worker: which front answered */
	struct freq *suspended;
	uint64_t ids, tok_rr;
	/* results */
	struct tally t;
	uint64_t requests, answered, errors[6], retries, tokenized, no_usage, aborted;
	uint64_t conn_closes;     /* connections closed after --keepalive-requests answers */
};

/* ---- small helpers ------------------------------------------------------------------------- */

/* The error answer (an OpenAI-style JSON body) that the handler queues next. */
static void set_error(struct freq *q, unsigned status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void set_error(struct freq *q, unsigned status, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	free(q->err_body);
	q->err_body = tc_http_error_body(status, msg);
	if (!q->err_body)
		tc_die_nomem();
	q->err_status = status;
	q->state = F_ERROR;
	switch (status / 100) {
	case 4: q->F->errors[status == 400 ? 0 : 1]++; break;
	default: q->F->errors[status == 502 ? 2 : status == 503 ? 3 : 4]++; break;
	}
}

static void unlink_suspended(struct freq *q)
{
	if (q->sprev)
		q->sprev->snext = q->snext;
	else
		q->F->suspended = q->snext;
	if (q->snext)
		q->snext->sprev = q->sprev;
	q->sprev = q->snext = NULL;
	q->suspended = false;
}

static void wake(struct freq *q)
{
	if (q->suspended) {
		unlink_suspended(q);
		MHD_resume_connection(q->conn);
		q->F->kick = true;
	}
}

static void suspend(struct freq *q)
{
	if (!q->suspended) {
		q->suspended = true;
		q->snext = q->F->suspended;
		if (q->snext)
			q->snext->sprev = q;
		q->F->suspended = q;
		MHD_suspend_connection(q->conn);
	}
}

/* ---- the answer ---------------------------------------------------------------------------- */

static void on_event(void *arg, const char *ev, size_t len)
{
	struct freq *q = arg;
	bool only = false;

	usage_parse(ev, len, true, &q->u, &only);
	if (q->inject_usage && only)
		return; /* the usage chunk the client did not ask for */
	tc_buf_add(&q->out, ev, len);
}

static size_t fwd_data(struct call *c, const char *p, size_t n)
{
	struct freq *q = c->arg;

	if (q->out.len - q->out_pos > OUT_HIGH)
		return CURL_WRITEFUNC_PAUSE;
	if (q->out_pos > OUT_HIGH) { /* compact what the client has taken */
		memmove(q->out.s, q->out.s + q->out_pos, q->out.len - q->out_pos);
		q->out.len -= q->out_pos;
		q->out_pos = 0;
	}
	if (q->stream && c->status == 200 && strstr(c->ctype, "event-stream"))
		sse_feed(&q->sse, p, n, on_event, q);
	else
		tc_buf_add(&q->out, p, n);
	wake(q);
	return n;
}

static void fwd_head(struct call *c)
{
	struct freq *q = c->arg;

	q->state = F_REPLY;
	wake(q);
}

static int route_and_forward(struct freq *q);

static void fwd_done(struct call *c, CURLcode rc)
{
	struct freq *q = c->arg;
	struct front *F = q->F;
	uint64_t now = kvidx_now_ns();

	if (q->routed)
		route_load_end(&F->rt, &q->d);
	if (!c->head_done) {
		/* Nothing reached the client yet: try another pod, or say why not. */
		if (q->routed && call_unreachable(c, rc)) {
			pod_down(&F->rt, &F->o->pods[q->d.cand], now);
			if (++q->tries < F->o->tries && !q->plain) {
				F->retries++;
				if (route_and_forward(q) == 0)
					return;
			}
		}
		if (q->state != F_ERROR) {
			if (rc == CURLE_OPERATION_TIMEDOUT && !call_unreachable(c, rc))
				set_error(q, 504, "the pod did not answer in time");
			else
				set_error(q, 502, "no pod answered: %s", c->err[0] ? c->err :
					  curl_easy_strerror(rc));
		}
		wake(q);
		return;
	}
	if (q->stream && q->sse.len) /* an unterminated last event: pass it on */
		tc_buf_add(&q->out, q->sse.buf, q->sse.len), q->sse.len = 0;
	q->up_done = true;
	q->up_failed = rc != CURLE_OK;
	if (!q->u.have && !q->stream && c->status == 200 && q->out.len)
		usage_parse(q->out.s, q->out.len, false, &q->u, NULL);
	F->answered++;
	if (q->routed) {
		enum kind k = q->d.kind;

		if (c->status == 200 && rc == CURLE_OK) {
			uint32_t cached = q->u.have ? q->u.cached_tokens : 0;
			uint32_t prompt = q->u.have && q->u.prompt_tokens ? q->u.prompt_tokens
									  : (uint32_t)q->ntok;
			uint32_t expected = route_expected(&F->rt, &q->d, prompt);

			if (q->u.have)
				route_report(&F->rt, &q->d, q->corr, cached, prompt);
			else
				F->no_usage++;
			F->t.ok[k]++;
			F->t.cached[k] += cached;
			F->t.prompt[k] += prompt;
			if (q->d.blocks && cached < expected) {
				F->t.false_warm[k]++;
				F->t.wasted += expected - cached;
			}
			if (c->t_first)
				samples_add(&F->t.ttft[k], (double)(c->t_first - q->t_recv) / 1e6);
			samples_add(&F->t.total[k], (double)(now - q->t_recv) / 1e6);
		} else if (c->status >= 500) {
			route_report(&F->rt, &q->d, q->corr, 0, (uint32_t)q->ntok);
		}
	}
	wake(q);
}

static ssize_t reader(void *cls, uint64_t pos, char *b, size_t max)
{
	struct freq *q = cls;
	size_t n = q->out.len - q->out_pos;

	(void)pos;
	if (!n) {
		if (q->up_done)
			return q->up_failed ? MHD_CONTENT_READER_END_WITH_ERROR
					    : MHD_CONTENT_READER_END_OF_STREAM;
		suspend(q);
		return 0;
	}
	if (n > max)
		n = max;
	memcpy(b, q->out.s + q->out_pos, n);
	q->out_pos += n;
	if (q->call.paused && q->out.len - q->out_pos <= OUT_HIGH / 2)
		call_resume(&q->call);
	return (ssize_t)n;
}

static void reader_free(void *cls)
{
	(void)cls; /* the request owns the buffer */
}

/* MHD_OPTION_NOTIFY_CONNECTION: a count of the answers of each client connection. */
static void conn_notify(void *cls, struct MHD_Connection *c, void **socket_context,
			enum MHD_ConnectionNotificationCode toe)
{
	(void)cls;
	(void)c;
	if (toe == MHD_CONNECTION_NOTIFY_STARTED)
		*socket_context = calloc(1, sizeof(uint64_t)); /* NULL: not counted */
	else if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
		free(*socket_context);
		*socket_context = NULL;
	}
}

/*
 * Queues r for q's connection, closing the connection after it when it is the connection's
 * --keepalive-requests-th answer: the client reconnects, and the kernel's SO_REUSEPORT hash
 * picks a worker again, so that clients with few keep-alive connections spread over the
 * workers' processes.
 */
static enum MHD_Result queue_on_conn(struct freq *q, unsigned status, struct MHD_Response *r)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(q->conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	uint64_t *n = ci ? ci->socket_context : NULL;
	uint64_t max = q->F->o->keepalive_requests;

	if (n && max && ++*n >= max) {
		MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
		q->F->conn_closes++;
		*n = 0;
	}
	return MHD_queue_response(q->conn, status, r);
}

static enum MHD_Result queue_reply(struct freq *q)
{
	struct front *F = q->F;
	struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 1 << 16,
								   reader, q, reader_free);
	enum MHD_Result rc;

	if (!r)
		return MHD_NO;
	if (q->call.ctype[0])
		MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, q->call.ctype);
	MHD_add_response_header(r, "X-Request-Id", q->id);
	MHD_add_response_header(r, "X-Kvidx-Worker", F->pid);
	if (q->routed) {
		MHD_add_response_header(r, "X-Kvidx-Pod", F->o->pods[q->d.cand].name);
		MHD_add_response_header(r, "X-Kvidx-Decision", kind_name[q->d.kind]);
		if (q->d.prefill >= 0)
			MHD_add_response_header(r, "X-Kvidx-Prefill-Pod",
						F->o->pods[q->d.prefill].name);
	}
	rc = queue_on_conn(q, (unsigned)q->call.status, r);
	MHD_destroy_response(r);
	q->queued = true;
	return rc;
}

static enum MHD_Result queue_error(struct freq *q)
{
	char *s = q->err_body;
	struct MHD_Response *r =
		MHD_create_response_from_buffer(strlen(s), s, MHD_RESPMEM_MUST_FREE);
	enum MHD_Result rc;

	q->err_body = NULL;
	if (!r) {
		free(s);
		return MHD_NO;
	}
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
	MHD_add_response_header(r, "X-Request-Id", q->id);
	rc = queue_on_conn(q, q->err_status, r);
	MHD_destroy_response(r);
	q->queued = true;
	return rc;
}

/* ---- forwarding ---------------------------------------------------------------------------- */

static const char *ep_path(enum fep ep)
{
	return ep == EP_CHAT ? "/v1/chat/completions" : ep == EP_COMPLETIONS ? "/v1/completions"
									      : "/v1/models";
}

/* Starts q's call to pod p (path), with the body given (owned by the call). */
static int start_call(struct freq *q, struct pod *p, const char *path, char *body, size_t len,
		      const char *method)
{
	struct front *F = q->F;
	char url[URL_MAX + 64];

	call_release(&q->call);
	q->call.arg = q;
	q->call.body = body;
	q->call.len = len;
	snprintf(url, sizeof(url), "%s%s", p->url, path);
	if (body)
		call_header(&q->call, "Content-Type", "application/json");
	call_header(&q->call, "X-Request-Id", q->id);
	if (q->auth)
		call_header(&q->call, "Authorization", q->auth);
	if (q->routed && q->d.prefill >= 0)
		call_header(&q->call, "x-prefiller-host-port", F->o->pods[q->d.prefill].name);
	return call_start(&F->cl, &q->call, method, url, (long)F->o->reply_timeout_ms,
			  (long)F->o->connect_timeout_ms);
}

/* The body sent on: the client's bytes, or with include_usage added to a stream. */
static bool wants_usage(const struct freq *q)
{
	json_t *so = json_object_get(q->req, "stream_options");

	return json_is_true(json_object_get(q->req, "stream")) &&
	       !json_is_true(json_object_get(so, "include_usage"));
}

/* The request with stream_options.include_usage added, malloc'd, of *len bytes. */
static char *usage_body(const struct freq *q, size_t *len)
{
	json_t *copy = json_deep_copy(q->req);
	char *s;

	if (!json_is_object(json_object_get(copy, "stream_options")))
		json_object_set_new(copy, "stream_options", json_object());
	json_object_set_new(json_object_get(copy, "stream_options"), "include_usage",
			    json_true());
	s = json_dumps(copy, JSON_COMPACT);
	json_decref(copy);
	if (!s)
		tc_die_nomem();
	*len = strlen(s);
	return s;
}

static char *forward_body(struct freq *q, size_t *len)
{
	const char *from = q->body.s;
	char *s;

	q->stream = json_is_true(json_object_get(q->req, "stream"));
	q->inject_usage = wants_usage(q);
	*len = q->body.len;
	if (q->inject_usage) { /* built once (off the loop for a large body), sent per try */
		if (!q->fwd_body)
			q->fwd_body = usage_body(q, &q->fwd_len);
		from = q->fwd_body;
		*len = q->fwd_len;
	}
	s = tc_xrealloc(NULL, *len + 1);
	memcpy(s, from, *len);
	return s;
}

/* Scores, picks, commits and forwards q. 0, or -1 with the error set. */
static int route_and_forward(struct freq *q)
{
	struct front *F = q->F;
	struct opts *o = F->o;
	json_t *m = json_object_get(q->req, "model"), *salt = json_object_get(q->req, "cache_salt");
	uint64_t now = kvidx_now_ns();
	size_t len;
	char *body;

	route_key_context(&F->rt, json_is_string(m) ? json_string_value(m) : NULL,
			  json_is_string(salt) ? json_string_value(salt) : NULL);
	for (;;) {
		if (route_pick(&F->rt, q->toks, q->ntok, q->corr, q->tried, &q->d, now) < 0) {
			set_error(q, 503, "no pod could be reached (%u tried)", q->tries);
			return -1;
		}
		q->routed = true;
		q->tried[q->d.cand / 64] |= 1ull << (q->d.cand % 64);
		if (q->tries == 0)
			F->t.n[q->d.kind]++;
		route_load_start(&F->rt, &q->d);
		if (!o->quiet && o->json)
			printf("{\"event\":\"route\",\"id\":\"%s\",\"corr\":\"0x%016" PRIx64
			       "\",\"pod\":\"%s\",\"kind\":\"%s\",\"blocks\":%u,"
			       "\"spec_blocks\":%u,\"prompt_tokens\":%zu,\"committed\":%s}\n",
			       q->id, q->corr, o->pods[q->d.cand].name, kind_name[q->d.kind],
			       q->d.blocks, q->d.spec_blocks, q->ntok,
			       q->d.committed ? "true" : "false");
		body = forward_body(q, &len);
		q->call.on_head = fwd_head;
		q->call.on_data = fwd_data;
		q->call.on_done = fwd_done;
		q->state = F_FORWARD;
		if (start_call(q, &o->pods[q->d.cand], ep_path(q->ep), body, len, "POST") == 0)
			return 0;
		route_load_end(&F->rt, &q->d);
		if (++q->tries >= o->tries) {
			set_error(q, 502, "cannot start a request to a pod");
			return -1;
		}
	}
}

/* ---- tokenizing ---------------------------------------------------------------------------- */

/* Token ids, as a completions prompt gives them ([ids] or [[ids]]); false if it is text. */
static bool token_prompt(json_t *p, struct freq *q)
{
	size_t i;
	json_t *e;

	if (json_is_array(p) && json_array_size(p) == 1 &&
	    json_is_array(json_array_get(p, 0)))
		p = json_array_get(p, 0);
	if (!json_is_array(p) || !json_array_size(p))
		return false;
	json_array_foreach(p, i, e)
		if (!json_is_integer(e) || json_integer_value(e) < 0 ||
		    json_integer_value(e) > (json_int_t)UINT32_MAX)
			return false;
	q->ntok = json_array_size(p);
	q->toks = tc_xrealloc(NULL, q->ntok * sizeof(*q->toks));
	json_array_foreach(p, i, e)
		q->toks[i] = (uint32_t)json_integer_value(e);
	return true;
}

static size_t tok_data(struct call *c, const char *p, size_t n)
{
	struct freq *q = c->arg;

	if (q->out.len + n > TOK_ANSWER_MAX) {
		q->tok_too_long = true;
		return 0; /* aborts the transfer */
	}
	tc_buf_add(&q->out, p, n);
	return n;
}

static int start_tokenize(struct freq *q);

static struct freq *job_req(struct job *j)
{
	return (struct freq *)(void *)((char *)j - offsetof(struct freq, job));
}

/* The /tokenize answer's token ids into q->toks (on the helper thread for a large one). */
static void tok_parse(struct job *jb)
{
	struct freq *q = job_req(jb);
	json_t *j = json_loadb(q->out.s ? q->out.s : "", q->out.len, 0, NULL);
	json_t *toks = json_object_get(j, "tokens");

	if (json_is_array(toks) && !json_array_size(toks))
		q->tokres = TOK_EMPTY;
	else
		q->tokres = json_is_array(toks) && token_prompt(toks, q) ? TOK_OK : TOK_BAD;
	json_decref(j);
}

/* The prompt's tokens are known: route it, or say why not. */
static void tok_parsed(struct job *jb)
{
	struct freq *q = job_req(jb);
	struct front *F = q->F;
	struct pod *p = &F->o->pods[q->d.cand];

	q->out.len = 0;
	if (q->tokres == TOK_EMPTY)
		/* The pod read the request and found no tokens in it: the client's error. */
		set_error(q, 400, "the prompt is empty (pod %s tokenized it to no tokens)", p->name);
	else if (q->tokres == TOK_BAD)
		set_error(q, 502, "pod %s: /tokenize gave no token ids", p->name);
	else if (q->ntok > MAX_PROMPT_TOKENS)
		set_error(q, 400, "the prompt has %zu tokens, at most %u", q->ntok,
			  MAX_PROMPT_TOKENS);
	if (q->state == F_ERROR) {
		wake(q);
		return;
	}
	F->tokenized++;
	q->tries = 0;
	memset(q->tried, 0, sizeof(q->tried));
	route_and_forward(q);
	wake(q); /* an error, or nothing: the call's head resumes it again */
}

static void tok_done(struct call *c, CURLcode rc)
{
	struct freq *q = c->arg;
	struct front *F = q->F;
	struct pod *p = &F->o->pods[q->d.cand];

	if (q->tok_too_long) {
		set_error(q, 400, "the prompt has more than %u tokens (its /tokenize answer is "
			  "over %llu bytes)", MAX_PROMPT_TOKENS, (unsigned long long)TOK_ANSWER_MAX);
		wake(q);
		return;
	}
	if (rc != CURLE_OK) {
		if (call_unreachable(c, rc))
			pod_down(&F->rt, p, kvidx_now_ns());
		if (++q->tries < F->o->tries && start_tokenize(q) == 0)
			return;
		set_error(q, 502, "no pod could tokenize the request: %s",
			  c->err[0] ? c->err : curl_easy_strerror(rc));
		wake(q);
		return;
	}
	if (c->status != 200) {
		/* The server's own verdict on the request (a bad chat, an unknown model). */
		q->err_status = (unsigned)c->status;
		q->err_body = tc_xrealloc(NULL, q->out.len + 1);
		memcpy(q->err_body, q->out.s ? q->out.s : "", q->out.len);
		q->err_body[q->out.len] = '\0';
		q->state = F_ERROR;
		F->errors[c->status < 500 ? 1 : 4]++;
		wake(q);
		return;
	}
	q->job.work = tok_parse;
	q->job.done = tok_parsed;
	if (q->out.len >= OFFLOAD_MIN) { /* millions of ids: seconds of jansson */
		offload_submit(&F->ol, &q->job);
		return;
	}
	tok_parse(&q->job);
	tok_parsed(&q->job);
}

/* Asks an up pod (round robin) for the request's tokens. 0, or -1 with the error set. */
/* The body of q's /tokenize request (the request's fields that tokenizing reads). */
static char *tok_body_of(const struct freq *q)
{
	static const char *const chat_keys[] = { "messages", "add_generation_prompt",
						 "continue_final_message", "chat_template",
						 "chat_template_kwargs", "tools",
						 "add_special_tokens", "model" };
	static const char *const comp_keys[] = { "prompt", "add_special_tokens", "model" };
	json_t *t = json_object();

	if (q->ep == EP_CHAT) {
		for (size_t i = 0; i < sizeof(chat_keys) / sizeof(chat_keys[0]); i++)
			if (json_object_get(q->req, chat_keys[i]))
				json_object_set(t, chat_keys[i], json_object_get(q->req, chat_keys[i]));
	} else {
		for (size_t i = 0; i < sizeof(comp_keys) / sizeof(comp_keys[0]); i++)
			if (json_object_get(q->req, comp_keys[i]))
				json_object_set(t, comp_keys[i], json_object_get(q->req, comp_keys[i]));
		/* A batch of one text prompt. */
		json_t *p = json_object_get(t, "prompt");
		if (json_is_array(p) && json_array_size(p) == 1)
			json_object_set(t, "prompt", json_array_get(p, 0));
	}
	char *body = json_dumps(t, JSON_COMPACT);
	json_decref(t);
	if (!body)
		tc_die_nomem();
	return body;
}

static int start_tokenize(struct freq *q)
{
	struct front *F = q->F;
	struct opts *o = F->o;
	uint64_t now = kvidx_now_ns();
	int pick = -1;

	for (int k = 0; k < o->npods && pick < 0; k++) {
		int i = (int)((F->tok_rr + (uint64_t)k) % (uint64_t)o->npods);
		if (pod_is_up(&o->pods[i], now) && !(q->tried[i / 64] >> (i % 64) & 1))
			pick = i;
	}
	if (pick < 0) {
		set_error(q, 503, "no pod could be reached to tokenize the request");
		return -1;
	}
	F->tok_rr = (uint64_t)pick + 1;
	q->tried[pick / 64] |= 1ull << (pick % 64);
	q->d.cand = pick;
	/* A large request's body was built with its parse, off the loop (first try only). */
	char *body = q->tok_body ? q->tok_body : tok_body_of(q);
	q->tok_body = NULL;
	q->out.len = 0;
	q->call.on_head = NULL;
	q->call.on_data = tok_data;
	q->call.on_done = tok_done;
	q->state = F_TOKENIZE;
	if (start_call(q, &o->pods[pick], "/tokenize", body, strlen(body), "POST")) {
		set_error(q, 502, "cannot start a request to a pod");
		return -1;
	}
	return 0;
}

/* ---- requests ------------------------------------------------------------------------------ */

/* A parsed completions or chat request: tokens, then route; 400 for what is malformed. */
static void begin_parsed(struct freq *q)
{
	json_t *p, *v;

	if (!q->req) {
		set_error(q, 400, "the body is not JSON: %s (line %d, column %d)", q->je.text,
			  q->je.line, q->je.column);
		return;
	}
	if (!json_is_object(q->req)) {
		set_error(q, 400, "the body must be a JSON object");
		return;
	}
	v = json_object_get(q->req, "model");
	if (v && !json_is_string(v) && !json_is_null(v)) {
		set_error(q, 400, "'model' must be a string");
		return;
	}
	v = json_object_get(q->req, "stream");
	if (v && !json_is_boolean(v) && !json_is_null(v)) {
		set_error(q, 400, "'stream' must be a boolean");
		return;
	}
	if (q->ep == EP_CHAT) {
		p = json_object_get(q->req, "messages");
		if (!json_is_array(p) || !json_array_size(p)) {
			set_error(q, 400, "'messages' must be a non-empty list");
			return;
		}
		start_tokenize(q);
		return;
	}
	p = json_object_get(q->req, "prompt");
	if (!p || (!json_is_string(p) && !json_is_array(p))) {
		set_error(q, 400, "'prompt' must be a string or a list of token ids");
		return;
	}
	if ((json_is_string(p) && !json_string_length(p)) ||
	    (json_is_array(p) && !json_array_size(p))) {
		set_error(q, 400, "the prompt is empty");
		return;
	}
	if (json_is_array(p) && json_array_size(p) > 1 &&
	    !json_is_integer(json_array_get(p, 0))) {
		/* A batch: routed on its first prompt, like a conversation's first turn. */
		json_t *first = json_array_get(p, 0);
		if (json_is_array(first) && token_prompt(first, q)) {
			route_and_forward(q);
			return;
		}
	}
	if (token_prompt(p, q)) {
		if (q->ntok > MAX_PROMPT_TOKENS) {
			set_error(q, 400, "the prompt has %zu tokens, at most %u", q->ntok,
				  MAX_PROMPT_TOKENS);
			return;
		}
		route_and_forward(q);
		return;
	}
	if (json_is_array(p) && json_array_size(p) && json_is_integer(json_array_get(p, 0))) {
		set_error(q, 400, "'prompt': token ids must be integers 0..%u", UINT32_MAX);
		return;
	}
	start_tokenize(q);
}

/* The request's JSON (on the helper thread for a large body). */
static void parse_body(struct job *jb)
{
	struct freq *q = job_req(jb);

	json_t *p;

	q->req = json_loadb(q->body.s ? q->body.s : "", q->body.len, JSON_DECODE_ANY, &q->je);
	p = json_object_get(q->req, "prompt");
	if (json_is_array(p) && json_array_size(p) == 1)
		p = json_array_get(p, 0);
	/* What begin_parsed() would tokenize: build its /tokenize body here too. */
	if (json_is_object(q->req) && (q->ep == EP_CHAT || json_is_string(p)))
		q->tok_body = tok_body_of(q);
	if (json_is_object(q->req) && wants_usage(q))
		q->fwd_body = usage_body(q, &q->fwd_len);
}

static void body_parsed(struct job *jb)
{
	struct freq *q = job_req(jb);

	begin_parsed(q);
	wake(q); /* an error is queued by the handler; a call resumes it again */
}

/* A completions or chat request's body is in: parse it, here or (a large one, so that the
 * loop goes on serving the others) on the helper thread. */
static void begin(struct freq *q)
{
	q->job.work = parse_body;
	q->job.done = body_parsed;
	if (q->body.len >= OFFLOAD_MIN) {
		q->state = F_PARSE;
		offload_submit(&q->F->ol, &q->job);
		return;
	}
	parse_body(&q->job);
	begin_parsed(q);
}

static enum MHD_Result dispatch(struct freq *q, const char *url, const char *method)
{
	struct front *F = q->F;
	static const struct {
		const char *path, *method;
		enum fep ep;
	} eps[] = {
		{ "/v1/completions", "POST", EP_COMPLETIONS },
		{ "/v1/chat/completions", "POST", EP_CHAT },
		{ "/v1/models", "GET", EP_MODELS },
		{ "/health", "GET", EP_MODELS },
	};
	size_t i;

	for (i = 0; i < sizeof(eps) / sizeof(eps[0]); i++)
		if (!strcmp(url, eps[i].path))
			break;
	if (i == sizeof(eps) / sizeof(eps[0]))
		set_error(q, 404, "no such endpoint: %s %s", method, url);
	else if (strcmp(method, eps[i].method))
		set_error(q, 405, "%s takes %s, not %s", url, eps[i].method, method);
	else if (q->too_big)
		set_error(q, 413, "the body exceeds %" PRIu64 " bytes (--max-body)",
			  F->o->max_body);
	if (q->state == F_ERROR)
		return queue_error(q);
	q->ep = eps[i].ep;
	if (i == 3) { /* /health: this front is up if a pod is */
		uint64_t now = kvidx_now_ns();
		for (int k = 0; k < F->o->npods; k++)
			if (pod_is_up(&F->o->pods[k], now)) {
				struct MHD_Response *r = MHD_create_response_from_buffer(
					0, NULL, MHD_RESPMEM_PERSISTENT);
				enum MHD_Result rc = queue_on_conn(q, 200, r);
				MHD_destroy_response(r);
				return rc;
			}
		set_error(q, 503, "every pod is down");
		return queue_error(q);
	}
	if (q->ep == EP_MODELS) { /* any pod's answer */
		uint64_t now = kvidx_now_ns();
		int k;
		for (k = 0; k < F->o->npods && !pod_is_up(&F->o->pods[k], now); k++)
			;
		q->plain = true;
		q->call.on_head = fwd_head;
		q->call.on_data = fwd_data;
		q->call.on_done = fwd_done;
		q->state = F_FORWARD;
		if (start_call(q, &F->o->pods[k < F->o->npods ? k : 0], "/v1/models", NULL, 0,
			       "GET")) {
			set_error(q, 502, "cannot start a request to a pod");
			return queue_error(q);
		}
	} else {
		F->requests++;
		begin(q);
	}
	if (q->state == F_ERROR)
		return queue_error(q);
	if (q->state == F_REPLY)
		return queue_reply(q);
	suspend(q);
	return MHD_YES;
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url,
			       const char *method, const char *version, const char *data,
			       size_t *size, void **con_cls)
{
	struct front *F = cls;
	struct freq *q = *con_cls;

	(void)version;
	if (!q) {
		q = tc_xrealloc(NULL, sizeof(*q));
		memset(q, 0, sizeof(*q));
		q->F = F;
		q->conn = c;
		q->t_recv = kvidx_now_ns();
		q->d.cand = -1;
		q->d.prefill = -1;
		q->auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
		if (tc_http_request_id(c, q->id, sizeof(q->id))) {
			q->corr = kvidx_corr_id(q->id, strlen(q->id)); /* as every binding does */
		} else {
			q->corr = ((uint64_t)getpid() << 32) | (++F->ids & 0xffffffffull);
			snprintf(q->id, sizeof(q->id), "kvidx-%016" PRIx64, q->corr);
		}
		*con_cls = q;
		return MHD_YES;
	}
	if (q->state == F_READ && *size) {
		tc_http_body_chunk(&q->body, &q->too_big, (size_t)q->F->o->max_body, data, size);
		return MHD_YES;
	}
	if (q->queued)
		return MHD_YES;
	switch (q->state) {
	case F_READ: return dispatch(q, url, method);
	case F_ERROR: return queue_error(q);
	case F_REPLY: return queue_reply(q);
	default: suspend(q); return MHD_YES; /* woken early: wait on */
	}
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls,
		      enum MHD_RequestTerminationCode toe)
{
	struct front *F = cls;
	struct freq *q = *con_cls;

	(void)c;
	if (!q)
		return;
	if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK)
		F->aborted++;
	if (q->suspended)
		unlink_suspended(q);
	if (q->call.active) {
		/* The client left first: so does the request to the pod. */
		call_cancel(&F->cl, &q->call);
		if (q->routed)
			route_load_end(&F->rt, &q->d);
	}
	call_destroy(&q->call);
	json_decref(q->req);
	free(q->body.s);
	free(q->out.s);
	free(q->toks);
	free(q->tok_body);
	free(q->fwd_body);
	free(q->err_body);
	sse_free(&q->sse);
	free(q);
	*con_cls = NULL;
}

/* ---- the worker ---------------------------------------------------------------------------- */

static void print_summary(struct front *F)
{
	FILE *f = stdout;

	if (F->o->json) {
		fprintf(f, "{\"event\":\"summary\",\"requests\":%" PRIu64 ",\"answered\":%" PRIu64
			",\"tokenized\":%" PRIu64 ",\"retries\":%" PRIu64 ",\"no_usage\":%" PRIu64
			",\"errors_400\":%" PRIu64 ",\"errors_4xx\":%" PRIu64 ",\"errors_502\":%"
			PRIu64 ",\"errors_503\":%" PRIu64 ",\"errors_5xx\":%" PRIu64
			",\"client_aborts\":%" PRIu64 ",\"commits_dropped\":%" PRIu64
			",\"reports_dropped\":%" PRIu64 ",\"keepalive_closes\":%" PRIu64
			",\"kinds\":{",
			F->requests, F->answered, F->tokenized, F->retries, F->no_usage,
			F->errors[0], F->errors[1], F->errors[2], F->errors[3], F->errors[4],
			F->aborted, F->rt.commits_dropped, F->rt.reports_dropped, F->conn_closes);
		tally_print(&F->t, f, true);
		fprintf(f, "}}\n");
	} else {
		fprintf(f, "summary: %" PRIu64 " requests, %" PRIu64 " answered by pods, %" PRIu64
			" tokenized, %" PRIu64 " retried elsewhere, errors 400 %" PRIu64
			" other-4xx %" PRIu64 " 502 %" PRIu64 " 503 %" PRIu64 " other-5xx %" PRIu64
			", client aborts %" PRIu64 ", commits dropped %" PRIu64
			", connections closed after --keepalive-requests %" PRIu64 "\n",
			F->requests, F->answered, F->tokenized, F->retries, F->errors[0],
			F->errors[1], F->errors[2], F->errors[3], F->errors[4], F->aborted,
			F->rt.commits_dropped, F->conn_closes);
		tally_print(&F->t, f, false);
	}
	fflush(f);
}

int front_main(struct opts *o, int sigfd)
{
	static struct front F;
	char err[200];
	int fd, mfd, rc = 0;

	F.o = o;
	snprintf(F.pid, sizeof(F.pid), "%d", (int)getpid());
	if (router_attach(&F.rt, o) < 0)
		return 1;
	if (client_init(&F.cl)) {
		fprintf(stderr, PROG ": cannot set up libcurl\n");
		return 1;
	}
	if (offload_start(&F.ol, F.cl.multi)) {
		fprintf(stderr, PROG ": cannot start the parsing thread\n");
		return 1;
	}
	fd = tc_listen_tcp(o->listen, true, 4096, &F.port, err, sizeof(err));
	if (fd < 0) {
		fprintf(stderr, PROG ": --listen %s\n", err);
		return 1;
	}
	F.d = MHD_start_daemon(MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME, 0, NULL, NULL, handler,
			       &F, MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_NOTIFY_COMPLETED,
			       completed, &F, MHD_OPTION_CONNECTION_LIMIT, (unsigned)CONN_LIMIT,
			       MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)CONN_TIMEOUT_S,
			       MHD_OPTION_NOTIFY_CONNECTION, conn_notify, &F, MHD_OPTION_END);
	if (!F.d) {
		fprintf(stderr, PROG ": --listen %s: cannot start the HTTP server\n", o->listen);
		return 1;
	}
	mfd = MHD_get_daemon_info(F.d, MHD_DAEMON_INFO_EPOLL_FD)->epoll_fd;
	fprintf(stderr, PROG ": pid %d listening on %s (port %d), %d pods, index '%s'\n",
		(int)getpid(), o->listen, F.port, o->npods, o->name);
	for (;;) {
		MHD_UNSIGNED_LONG_LONG mt;
		int timeout = 1000;

		offload_collect(&F.ol); /* large bodies parsed: their requests go on */
		client_pump(&F.cl);
		MHD_run(F.d);
		if (F.kick) {
			/* A resumed connection is taken up by the next MHD_run(). */
			F.kick = false;
			MHD_run(F.d);
			timeout = 0;
		}
		if (MHD_get_timeout(F.d, &mt) == MHD_YES && mt < (MHD_UNSIGNED_LONG_LONG)timeout)
			timeout = (int)mt;
		struct curl_waitfd w[2] = { { .fd = sigfd, .events = CURL_WAIT_POLLIN },
					    { .fd = mfd, .events = CURL_WAIT_POLLIN } };
		int waited = client_wait_sig(&F.cl, w, 2, timeout);
		if (waited < 0) {
			fprintf(stderr, PROG ": curl_multi_poll failed\n");
			rc = 1;
		}
		if (waited)
			break;
	}
	print_summary(&F);
	offload_stop(&F.ol); /* nothing runs on a request after this */
	/* libmicrohttpd cannot stop with suspended connections: end their requests. */
	while (F.suspended) {
		struct freq *q = F.suspended;

		if (q->call.active)
			call_cancel(&F.cl, &q->call);
		q->up_done = q->up_failed = true;
		if (q->state != F_REPLY)
			set_error(q, 503, "the front is shutting down");
		wake(q);
	}
	MHD_run(F.d);
	MHD_stop_daemon(F.d);
	client_free(&F.cl);
	router_close(&F.rt);
	tally_free(&F.t);
	return rc;
}
