/*
 * metrics.h — internal: kvidx's state in the Prometheus text exposition format (version
 * 0.0.4), for kvidx-dump --prometheus and for kvidx-ingestd's --metrics HTTP endpoint.
 * Never installed.
 *
 * What is exported: every per-pod counter and gauge of shm/layout.h (KV_POD_CTRS) as
 * kvidx_pod_<name>, last_event_ns and last_route_ns as ages in seconds, the cumulative
 * route-to-confirmation latency histogram of each pod, the index-wide writer counters
 * (KV_STATS) as kvidx_<stat>, the reader registry's occupancy and the writer's heartbeat age.
 * Per-pod series carry two labels, pod and model, and nothing else: never keys, token ids or
 * prompt text (DESIGN.md section 6).
 */
#ifndef KVIDX_INGEST_METRICS_H
#define KVIDX_INGEST_METRICS_H

#include <stdio.h>

#include "kvidx.h"

/*
 * Writes the metrics of the index r is attached to, as one exposition, to out. Refreshes r
 * first (kvidx_reader_info(), which follows a new data generation). Reads the segment with
 * relaxed loads, outside any read-side section (it touches only the fixed pod, histogram and
 * stats regions, never the entry arena), so it never holds up the writer; counters may lag
 * each other slightly. Each histogram is copied once, so its buckets, +Inf and _count agree.
 * Strings from the segment (pod names, models) are untrusted: they are escaped as the format
 * requires (backslash, double quote, line feed) and made valid UTF-8 (other control
 * characters and malformed bytes become U+FFFD).
 *
 * Returns 0; -KVIDX_ERETRY or another error of kvidx_reader_info() if r could not be
 * refreshed (nothing written); -ENOMEM; -EIO if writing to out failed. Single-threaded per
 * r, like every reader call. Does not block beyond stdio.
 */
int metrics_render(struct kvidx_reader *r, FILE *out);

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
