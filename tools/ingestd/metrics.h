/*
 * metrics.h — internal to kvidx-ingestd: its --metrics endpoint, GET /metrics on loopback,
 * serving the exposition of prom.h. Never installed.
 */
#ifndef KVIDX_INGEST_METRICS_H
#define KVIDX_INGEST_METRICS_H

/*
 * Starts serving GET /metrics on addr, "IP:PORT" with a loopback IP: 127.0.0.0/8, "[::1]",
 * or "localhost" (127.0.0.1). Binds and listens before returning; then a detached thread
 * accepts one connection at a time and answers with HTTP/1.0-style responses (the connection
 * closes after each): 200 with the exposition (Content-Type text/plain; version=0.0.4) for
 * GET or HEAD /metrics (a query string is ignored); 404 for any other path; 405 for another
 * method on /metrics; 400 for a malformed request line; 431 for a request head over 4 KiB;
 * 408 for one not complete within 2 s; 503 if the index cannot be read. A client gets 2 s to
 * send its request, 5 s to take the answer and 0.2 s to close, so a slow or idle one cannot
 * wedge the server.
 *
 * The thread opens its own reader on index_name (NULL: KVIDX_DEFAULT_NAME) at the first
 * request, and opens it again after an error, so the index need not exist yet. It blocks all
 * signals and runs until the process exits.
 *
 * Returns 0, -EINVAL (addr malformed, not loopback, port 0, bad index name), or the negative
 * errno of socket(), bind() (e.g. -EADDRINUSE), listen() or pthread_create(). Thread-safe;
 * each call starts another server.
 */
int metrics_http_start(const char *addr, const char *index_name);

#endif /* KVIDX_INGEST_METRICS_H */
