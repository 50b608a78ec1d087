/*
 * metrics.h — internal to kvidx-ingestd: its --metrics-listen endpoint, GET /metrics
 * serving the exposition of prom.h, and the probes GET /healthz and /readyz. Never installed.
 */
#ifndef KVIDX_INGEST_METRICS_H
#define KVIDX_INGEST_METRICS_H

#include <stdbool.h>

/*
 * Starts serving on addr, "HOST:PORT" as ing_metrics_addr_parse() normalizes it (any IPv4
 * address, "localhost", "0.0.0.0" or "*", "[IPV6]"), with libmicrohttpd (metrics.c). Binds
 * and listens before returning; then one thread serves every connection (HTTP/1.0 and 1.1,
 * keep-alive), for GET or HEAD (a query string is ignored): /metrics, 200 with the
 * exposition (Content-Type text/plain; version=0.0.4); /healthz, 200 "ok" (the process and
 * this thread are alive: a liveness probe); /readyz, 200 "ready" or 503 "not ready: REASON"
 * as metrics_set_ready() last said ("not ready: starting" before its first call); 404 for
 * any other path; 405 with Allow for another method;
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
 * Returns 0, -EINVAL (addr malformed, port 0, bad index name), the negative
 * errno of socket(), bind() (e.g. -EADDRINUSE) or listen(), -ENOMEM, or -EIO if the daemon
 * could not start. Thread-safe; each call starts another server.
 */
int metrics_http_start(const char *addr, const char *index_name);

/*
 * Sets what /readyz answers: ready, or not with why (a short reason, at most ~190 bytes kept,
 * no prompt data). The event loop calls it (ingest.c); every server of the process answers
 * from the same state. Thread-safe, never blocks for long (a mutex held for a copy).
 */
void metrics_set_ready(bool ready, const char *why);

/*
 * fn(f, arg) appends the process's own families (discover.h, cluster.h) after the index's,
 * in every server's exposition, in the order added (at most 4: else -ENOSPC). fn runs on the
 * server threads: it reads atomics only. metrics_clear_extra() removes them all and returns
 * once no render uses them, so that their arguments can be freed.
 */
#include <stdio.h>
int metrics_add_extra(void (*fn)(FILE *f, void *arg), void *arg);
void metrics_clear_extra(void);

#endif /* KVIDX_INGEST_METRICS_H */
