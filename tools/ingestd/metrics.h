/*
 * metrics.h — internal to kvidx-ingestd: its --metrics endpoint, GET /metrics on loopback,
 * serving the exposition of prom.h. Never installed.
 */
#ifndef KVIDX_INGEST_METRICS_H
#define KVIDX_INGEST_METRICS_H

/*
 * Starts serving GET /metrics on addr, "IP:PORT" with a loopback IP: 127.0.0.0/8, "[::1]",
 * or "localhost" (127.0.0.1), with libmicrohttpd (metrics.c). Binds and listens before
 * returning; then one thread serves every connection (HTTP/1.0 and 1.1, keep-alive): 200
 * with the exposition (Content-Type text/plain; version=0.0.4) for GET or HEAD /metrics (a
 * query string is ignored); 404 for any other path; 405 with Allow for another method;
 * 400 for a malformed request (a line that is not a request at all is closed unanswered);
 * 431 for a request head over 16 KiB; 503 if the index cannot be read. Up to 1000
 * connections are served at once (fewer if the limit on open files is low; the soft limit is
 * raised to the hard one), each closed after 5 s without traffic, so idle or slow clients
 * cannot keep a scrape from being answered.
 *
 * The thread opens its own reader on index_name (NULL: KVIDX_DEFAULT_NAME) at the first
 * request, and opens it again after an error, so the index need not exist yet. It blocks all
 * signals and runs until the process exits.
 *
 * Returns 0, -EINVAL (addr malformed, not loopback, port 0, bad index name), the negative
 * errno of socket(), bind() (e.g. -EADDRINUSE) or listen(), -ENOMEM, or -EIO if the daemon
 * could not start. Thread-safe; each call starts another server.
 */
int metrics_http_start(const char *addr, const char *index_name);

/*
 * fn(f, arg) appends the process's own families (discover.h) after the index's; servers
 * started after this call use it. fn runs on the server thread: it reads atomics only.
 */
#include <stdio.h>
void metrics_set_extra(void (*fn)(FILE *f, void *arg), void *arg);

#endif /* KVIDX_INGEST_METRICS_H */
