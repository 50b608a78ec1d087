/*
 * client.c — kvidx-route's HTTP/1.1 requests to pods (real vLLM servers or kvidx-fakepod
 * --http), on libcurl's multi interface: many requests in flight on one thread, connections
 * kept alive and reused per host, no HTTP parsing of our own. Bodies arrive through the
 * caller's callbacks as they come, so a streamed answer can be passed on chunk by chunk.
 * Also the body of a token-id completion request, which the load generator and the
 * validation both send.
 *
 * libcurl, not a parser of our own: Debian's well-kept client library, whose multi
 * interface pools keep-alive connections per host and exposes its sockets to an outer poll
 * (curl_multi_poll() with extra descriptors: the front's server and the signalfd).
 * "Expect: 100-continue" is turned off: vLLM does not need it, and it costs a round trip.
 */
#include "route.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "cli.h"
#include "escape.h"

static size_t on_header(char *p, size_t size, size_t n, void *arg)
{
	struct call *c = arg;
	size_t len = size * n;

	/* The blank line ends a header block; a 1xx block is followed by the real one. */
	if (len <= 2 && (p[0] == '\r' || p[0] == '\n')) {
		long st = 0;
		char *ct = NULL;

		curl_easy_getinfo(c->easy, CURLINFO_RESPONSE_CODE, &st);
		if (st >= 200 && !c->head_done) {
			c->status = st;
			c->head_done = true;
			curl_easy_getinfo(c->easy, CURLINFO_CONTENT_TYPE, &ct);
			snprintf(c->ctype, sizeof(c->ctype), "%s", ct ? ct : "");
			if (c->on_head)
				c->on_head(c);
		}
	}
	return len;
}

static size_t on_write(char *p, size_t size, size_t n, void *arg)
{
	struct call *c = arg;
	size_t len = size * n, r;

	if (!c->t_first && len)
		c->t_first = kvidx_now_ns();
	r = c->on_data ? c->on_data(c, p, len) : len;
	if (r == CURL_WRITEFUNC_PAUSE) {
		c->paused = true;
		return r;
	}
	return len;
}

/* Aborts the transfer once the whole request is sent (abort_after_upload). */
static int on_progress(void *arg, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
		       curl_off_t ulnow)
{
	struct call *c = arg;

	(void)dltotal, (void)dlnow;
	return c->abort_after_upload && ultotal > 0 && ulnow >= ultotal;
}

int client_init(struct client *cl)
{
	memset(cl, 0, sizeof(*cl));
	if (curl_global_init(CURL_GLOBAL_DEFAULT))
		return -1;
	cl->multi = curl_multi_init();
	if (!cl->multi)
		return -1;
	/* Keep enough idle connections for every pod's share of the requests in flight. */
	curl_multi_setopt(cl->multi, CURLMOPT_MAXCONNECTS, 1024L);
	return 0;
}

void client_free(struct client *cl)
{
	if (cl->multi)
		curl_multi_cleanup(cl->multi);
	cl->multi = NULL;
	curl_global_cleanup();
}

void call_header(struct call *c, const char *name, const char *value)
{
	char line[1024];
	struct curl_slist *l;

	snprintf(line, sizeof(line), "%s: %s", name, value);
	l = curl_slist_append(c->hdrs, line);
	if (!l)
		tc_die_nomem();
	c->hdrs = l;
}

void call_release(struct call *c)
{
	curl_slist_free_all(c->hdrs);
	c->hdrs = NULL;
	free(c->body);
	c->body = NULL;
	c->len = 0;
}

int call_start(struct client *cl, struct call *c, const char *method, const char *url,
	       long timeout_ms, long connect_ms)
{
	CURL *e = c->easy ? c->easy : curl_easy_init();

	if (!e)
		return -1;
	curl_easy_reset(e);
	c->easy = e;
	c->active = true;
	c->head_done = c->paused = false;
	c->status = 0;
	c->ctype[0] = c->err[0] = '\0';
	c->t_first = 0;
	call_header(c, "Expect", "");
	curl_easy_setopt(e, CURLOPT_URL, url);
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, c->hdrs);
	curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(e, CURLOPT_HEADERDATA, c);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_write);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, c);
	curl_easy_setopt(e, CURLOPT_PRIVATE, c);
	curl_easy_setopt(e, CURLOPT_ERRORBUFFER, c->err);
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
	curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
	curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout_ms);
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, connect_ms);
	curl_easy_setopt(e, CURLOPT_ACCEPT_ENCODING, NULL);
	if (c->abort_after_upload) {
		curl_easy_setopt(e, CURLOPT_XFERINFOFUNCTION, on_progress);
		curl_easy_setopt(e, CURLOPT_XFERINFODATA, c);
		curl_easy_setopt(e, CURLOPT_NOPROGRESS, 0L);
	}
	if (!strcmp(method, "POST")) {
		curl_easy_setopt(e, CURLOPT_POST, 1L);
		curl_easy_setopt(e, CURLOPT_POSTFIELDS, c->body ? c->body : "");
		curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)c->len);
	}
	if (curl_multi_add_handle(cl->multi, e) != CURLM_OK) {
		c->active = false;
		return -1;
	}
	cl->started++;
	return 0;
}

void call_cancel(struct client *cl, struct call *c)
{
	if (!c->active)
		return;
	curl_multi_remove_handle(cl->multi, c->easy);
	c->active = false;
}

void call_resume(struct call *c)
{
	if (c->active && c->paused) {
		c->paused = false;
		curl_easy_pause(c->easy, CURLPAUSE_CONT);
	}
}

void client_pump(struct client *cl)
{
	CURLMsg *m;
	int left;

	curl_multi_perform(cl->multi, &cl->running);
	while ((m = curl_multi_info_read(cl->multi, &left))) {
		struct call *c = NULL;

		if (m->msg != CURLMSG_DONE)
			continue;
		CURLcode rc = m->data.result;
		curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&c);
		curl_multi_remove_handle(cl->multi, m->easy_handle);
		if (!c)
			continue;
		c->active = false;
		if (rc != CURLE_OK)
			cl->failed++;
		if (c->on_done)
			c->on_done(c, rc);
	}
}

int client_wait(struct client *cl, struct curl_waitfd *extra, unsigned nextra, int timeout_ms)
{
	long ct = -1;

	curl_multi_timeout(cl->multi, &ct);
	if (ct >= 0 && ct < timeout_ms)
		timeout_ms = (int)ct;
	for (unsigned i = 0; i < nextra; i++)
		extra[i].revents = 0;
	return curl_multi_poll(cl->multi, extra, nextra, timeout_ms, NULL) == CURLM_OK ? 0 : -1;
}

int client_wait_sig(struct client *cl, struct curl_waitfd *extra, unsigned nextra,
		    int timeout_ms)
{
	struct signalfd_siginfo si;

	if (client_wait(cl, extra, nextra, timeout_ms) < 0)
		return -1;
	return extra[0].revents && read(extra[0].fd, &si, sizeof(si)) == (ssize_t)sizeof(si);
}

/* Appends the decimal of v to the builder. */
static void put_u32(char **p, uint32_t v)
{
	char tmp[12];
	int n = 0;

	do
		tmp[n++] = (char)('0' + v % 10);
	while ((v /= 10));
	while (n)
		*(*p)++ = tmp[--n];
}

char *completion_body(const char *model, const uint32_t *toks, size_t n, uint64_t max_tokens,
		      bool stream, size_t *len)
{
	size_t cap = strlen(model) * 6 + 11 * n + 256;
	char *b = tc_xrealloc(NULL, cap), *p = b;
	FILE *f;

	p += sprintf(p, "{\"model\":");
	f = fmemopen(p, cap - 32, "w");
	if (!f)
		tc_die_nomem();
	tc_json_str(f, model);
	p += ftell(f);
	fclose(f);
	p += sprintf(p, ",\"prompt\":[");
	for (size_t i = 0; i < n; i++) {
		if (i)
			*p++ = ',';
		put_u32(&p, toks[i]);
	}
	p += sprintf(p, "],\"max_tokens\":%" PRIu64 ",\"stream\":%s%s}", max_tokens,
		     stream ? "true" : "false",
		     stream ? ",\"stream_options\":{\"include_usage\":true}" : "");
	*len = (size_t)(p - b);
	return b;
}

bool call_unreachable(const struct call *c, CURLcode rc)
{
	curl_off_t connected = 0;

	if (rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST)
		return true;
	/* A timeout before any connection was made is the connect timeout. */
	curl_easy_getinfo(c->easy, CURLINFO_CONNECT_TIME_T, &connected);
	return rc == CURLE_OPERATION_TIMEDOUT && connected == 0;
}

void call_destroy(struct call *c)
{
	if (c->easy)
		curl_easy_cleanup(c->easy);
	c->easy = NULL;
	call_release(c);
}
