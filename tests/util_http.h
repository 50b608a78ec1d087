/*
 * util_http.h — HTTP requests from the tests to kvidx-fakepod --http and kvidx-route
 * --listen (libcurl's easy interface, blocking, one connection per request), with what
 * came back: status, body, the headers the tests look at, and when the first body byte
 * arrived.
 */
#ifndef KVIDX_TESTS_UTIL_HTTP_H
#define KVIDX_TESTS_UTIL_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct tu_http {
	int rc;              /* CURLcode: 0 when an answer came */
	long status;         /* HTTP status, 0 without an answer */
	char *body;          /* NUL-terminated; the caller frees it with tu_http_free() */
	size_t len;
	size_t chunks;       /* body pieces as they arrived */
	char ctype[128], reqid[160], pod[80], kind[16], worker[16], prefill[80];
	char ttft[32], queue[32]; /* kvidx-fakepod's X-Fakepod-Ttft-Seconds, -Queue-Seconds */
	uint64_t t_start_ns, t_first_ns, t_end_ns;
};

/*
 * POSTs body (JSON) to url, or GETs it when body is NULL, with extra headers "Name: value"
 * (NULL-terminated list, or NULL). timeout_ms bounds the request; a refused connection is
 * retried for 3 s (a server just started). Fills r; never asserts.
 */
void tu_http(const char *url, const char *body, const char *const *headers, long timeout_ms,
	     struct tu_http *r);
void tu_http_free(struct tu_http *r);

/* The integer at the JSON path "a.b.c" of r's body (jansson), or -1 if absent. */
long long tu_json_int(const char *json, const char *path);

/* "http://127.0.0.1:PORT" + path of tu_port(n), in a buffer of its own per n and thread. */
const char *tu_url(int n, const char *path);

#endif /* KVIDX_TESTS_UTIL_HTTP_H */
