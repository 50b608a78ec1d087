/*
 * prom.h — internal to the tools: kvidx's state in the Prometheus text exposition format (version
 * 0.0.4), for kvidx-dump --prometheus and for kvidx-ingestd's --metrics HTTP endpoint.
 * Never installed.
 *
 * What is exported: every per-pod counter and gauge of shm/layout.h (KV_POD_CTRS) as
 * kvidx_pod_<name>, last_event_ns and last_route_ns as ages in seconds, the cumulative
 * route-to-confirmation latency histogram of each pod, the index-wide writer counters
 * (KV_STATS) as kvidx_<stat>, the reader registry's occupancy and the writer's heartbeat age.
 * Per-pod series carry two labels, pod and model, and nothing else: never keys, token ids or
 * prompt text (docs/DESIGN.md "Counters and metrics").
 */
#ifndef KVIDX_TOOLS_PROM_H
#define KVIDX_TOOLS_PROM_H

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
int prom_render(struct kvidx_reader *r, FILE *out);

#endif /* KVIDX_TOOLS_PROM_H */
