/*
 * util_http.c — the tests' blocking HTTP client (libcurl) and a JSON look-up (jansson); see
 * util_http.h.
 */
#include "util_http.h"

#include <curl/curl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "util_run.h"

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static size_t on_body(char *p, size_t size, size_t n, void *arg)
{
	struct tu_http *r = arg;
	size_t len = size * n;
	char *b = realloc(r->body, r->len + len + 1);

	if (!b)
		return 0;
	if (!r->t_first_ns)
		r->t_first_ns = now_ns();
	r->body = b;
	memcpy(b + r->len, p, len);
	r->len += len;
	b[r->len] = '\0';
	r->chunks++;
	return len;
}

static void header_value(const char *line, size_t len, const char *name, char *out,
			 size_t outlen)
{
	size_t nl = strlen(name);
	const char *v;

	if (len <= nl + 1 || strncasecmp(line, name, nl) || line[nl] != ':')
		return;
	v = line + nl + 1;
	while (*v == ' ')
		v++;
	len -= (size_t)(v - line);
	while (len && (v[len - 1] == '\r' || v[len - 1] == '\n'))
		len--;
	if (len >= outlen)
		len = outlen - 1;
	memcpy(out, v, len);
	out[len] = '\0';
}

static size_t on_header(char *p, size_t size, size_t n, void *arg)
{
	struct tu_http *r = arg;
	size_t len = size * n;

	header_value(p, len, "Content-Type", r->ctype, sizeof(r->ctype));
	header_value(p, len, "X-Request-Id", r->reqid, sizeof(r->reqid));
	header_value(p, len, "X-Kvidx-Pod", r->pod, sizeof(r->pod));
	header_value(p, len, "X-Kvidx-Decision", r->kind, sizeof(r->kind));
	header_value(p, len, "X-Kvidx-Worker", r->worker, sizeof(r->worker));
	header_value(p, len, "X-Kvidx-Prefill-Pod", r->prefill, sizeof(r->prefill));
	header_value(p, len, "X-Fakepod-Ttft-Seconds", r->ttft, sizeof(r->ttft));
	header_value(p, len, "X-Fakepod-Queue-Seconds", r->queue, sizeof(r->queue));
	return len;
}

void tu_http(const char *url, const char *body, const char *const *headers, long timeout_ms,
	     struct tu_http *r)
{
	CURL *e = curl_easy_init();
	struct curl_slist *h = curl_slist_append(NULL, "Expect:");

	memset(r, 0, sizeof(*r));
	r->rc = -1;
	if (!e)
		return;
	if (body)
		h = curl_slist_append(h, "Content-Type: application/json");
	for (size_t i = 0; headers && headers[i]; i++)
		h = curl_slist_append(h, headers[i]);
	curl_easy_setopt(e, CURLOPT_URL, url);
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
	curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(e, CURLOPT_HEADERDATA, r);
	curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout_ms);
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_FORBID_REUSE, 1L);
	if (body) {
		curl_easy_setopt(e, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
	}
	/* A server just started may not listen yet: connection refused is retried for 3 s. */
	for (uint64_t until = now_ns() + 3000000000ull;;) {
		r->t_start_ns = now_ns();
		r->rc = (int)curl_easy_perform(e);
		r->t_end_ns = now_ns();
		if (r->rc != CURLE_COULDNT_CONNECT || now_ns() > until)
			break;
		tu_sleep_ms(20);
	}
	curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &r->status);
	if (!r->body)
		r->body = calloc(1, 1);
	curl_slist_free_all(h);
	curl_easy_cleanup(e);
}

void tu_http_free(struct tu_http *r)
{
	free(r->body);
	r->body = NULL;
}

long long tu_json_int(const char *json, const char *path)
{
	json_t *root = json_loads(json, JSON_DISABLE_EOF_CHECK, NULL), *j = root;
	char buf[256], *save = NULL;
	long long v = -1;

	snprintf(buf, sizeof(buf), "%s", path);
	for (char *k = strtok_r(buf, ".", &save); k && j; k = strtok_r(NULL, ".", &save))
		j = json_object_get(j, k);
	if (json_is_integer(j))
		v = json_integer_value(j);
	json_decref(root);
	return v;
}

const char *tu_url(int n, const char *path)
{
	/* Per thread: a test's background request (test_fakepod.c bg_start) builds its URL
	 * while the test thread polls /metrics of the same port. */
	static __thread char bufs[10][128];

	snprintf(bufs[n], sizeof(bufs[n]), "http://127.0.0.1:%d%s", tu_port(n), path);
	return bufs[n];
}
