/*
 * dischttp.h — internal to kvidx-ingestd: its one job is HTTP discovery (--discover-http):
 * asking pods' serving addresses where their KV events are published, and turning the answers
 * into pod specs for ing_pods_reconcile() (discover.h), the add/remove path SIGHUP and DNS
 * share.
 *
 * Each target HOST:PORT is asked, every --discover-interval, vLLM's GET /kv_event_sources
 * (vllm/entrypoints/serve/kv_events/api_router.py: {"sources": [...]} or a bare array of
 * {data_parallel_rank, endpoint, replay_endpoint, topic}) and, when that is 404, SGLang's
 * GET /server_info (python/sglang/srt/server_args.py, describe_kv_events_publisher:
 * "kv_events": {publisher, endpoint_host, endpoint_port_base, topic, block_size, dp_size},
 * and "served_model_name"). Answers are untrusted: bodies are capped (DH_MAX_BODY), endpoints
 * must be tcp://HOST:PORT, ranks 0..KV_POD_RANKS-1; anything else is a failed poll, counted.
 * A wildcard host (*, 0.0.0.0, ::) is replaced by the target's host. Ranks on consecutive ports
 * (port + rank, replay port + rank) become dp-ranks=N; otherwise only rank 0 is taken (said in
 * the poll's note). The pod is named HOST:PORT; --discover-pod-attrs model= overrides the model.
 *
 * A target that answers without a publisher (no sources, kv_events null) is no pod; one whose
 * poll fails keeps its last pod for DH_FAIL_LIMIT - 1 failures in a row and loses it at the
 * DH_FAIL_LIMIT-th (a pod that is gone, not one that hiccups).
 *
 * Threads: one poller thread (libcurl, blocking, every signal blocked) writes complete answers
 * into a single slot that the newest overwrites, as the DNS resolver does; the loop takes it
 * with a try-lock (never waits), logs what changed and reconciles, with the writer mutex held.
 */
#ifndef KVIDX_INGEST_DISCHTTP_H
#define KVIDX_INGEST_DISCHTTP_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "config.h"
#include "discover.h"
#include "pods.h"

#define DH_MAX_TARGETS 256
#define DH_MAX_BODY (1u << 20)
#define DH_FAIL_LIMIT 3

struct disc_http;

/* Starts the poller for cfg->disc.http (checked by config.c). NULL: out of memory or no
 * thread (logged). */
struct disc_http *dischttp_open(const struct ing_config *cfg);

/* Stops the thread (at most one request's timeout) and frees everything. NULL is fine. */
void dischttp_close(struct disc_http *dh);

/* --discover-http-port: the DNS answer's addresses become the targets (each at that port),
 * asked at once; what the poller knew of an address it had stays. Loop side. */
void dischttp_set_targets(struct disc_http *dh, const char (*addr)[DISC_ADDR_LEN], size_t n);

/* Loop side: takes a new round of answers, if one is waiting, and reconciles the pods. */
void dischttp_poll(struct disc_http *dh, struct ing_shared *sh, uint64_t now);

/* kvidx_discovery_http_* in Prometheus text format. */
void dischttp_render(FILE *f, struct disc_http *dh);

/*
 * Parsing, exposed for the tests: one answer body (len bytes) of kind "kv_event_sources" or
 * "server_info" from target host:port into *spec. Returns 1 (a pod), 0 (no publisher), or -1
 * (not a usable answer); err (and a note on a pod taken with fewer ranks) say why.
 */
int dischttp_parse(const char *kind, const char *body, size_t len, const char *host,
		   unsigned port, struct ing_pod_spec *spec, char *err, size_t errlen);

#endif /* KVIDX_INGEST_DISCHTTP_H */
