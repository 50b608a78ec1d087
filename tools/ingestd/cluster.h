/*
 * cluster.h — internal to kvidx-ingestd: its one job is the cluster link (--cluster,
 * docs/cluster.md): router hosts share their route commits and failed outcomes over NATS, so
 * that each host's index also holds its peers' predictions as speculative entries.
 *
 *   out   spec.c hands each local route commit (cluster_local_commit) and each outcome
 *         (cluster_local_outcome: a failed one withdraws) over; they are batched into one message (clwire.h) per loop
 *         round or per 64 KiB, queued (bounded, lock-free), and a sender thread of ours
 *         publishes them on kvidx.<cluster-name>.<scheme>.p. Nothing is published while the
 *         connection is down (local-only operation; counted).
 *   in    libnats's delivery thread copies each message of kvidx.<cluster-name>.*.p into a
 *         bounded lock-free queue (full: dropped, counted); the writer loop (cluster_step)
 *         validates and applies at most a budget of them per round: commits as speculative
 *         entries (spec_remote_predict, pods by name), withdrawals remove them
 *         (spec_remote_withdraw). A message of another key scheme is refused and counted.
 *   load  a peer's commit also counts its request in this index's load view (load.h) on the
 *         outcome pod, until the peer's outcome for it (done or withdraw) or this host's
 *         --load-timeout: the view is fleet-wide.
 *   time  a peer's prediction expires at min(origin commit + TTL, receipt + TTL) - the
 *         clock-offset bound (cluster_remote_life()): never later than at its origin while
 *         the hosts' clocks are within that bound.
 *   warm  a JetStream stream (memory, max age the largest TTL) keeps the cluster's recent
 *         messages; at each (re)connection a warm thread of ours replays it (from the start,
 *         or from the connection loss) through a third bounded ring into the same path, so
 *         a host that joins or restarts gets the predictions still alive.
 *   dups  (origin, correlation id) pairs seen are remembered (bounded): a repeated commit or
 *         withdrawal, or a commit arriving after its withdrawal, changes nothing.
 *
 * Threads: the writer loop's (every function below but cluster_metrics, with the writer
 * mutex held), our sender thread, and libnats's own (connection, delivery, reconnection with
 * backoff). They share only the two queues and relaxed atomic counters; the writer never
 * waits for the network.
 */
#ifndef KVIDX_INGEST_CLUSTER_H
#define KVIDX_INGEST_CLUSTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "config.h"

struct ing_spec;
struct ing_cluster;

/* A local route commit, as spec.c applied it. prefill NULL: none. */
struct cl_commit {
	uint64_t corr;
	const uint64_t *keys;
	size_t nkeys;
	uint64_t created_ns; /* CLOCK_MONOTONIC */
	const char *pod, *prefill;
	int pod_idx, prefill_idx; /* their index pods (prefill: -1) */
	uint32_t ttl_ms, prefill_ttl_ms;
	uint32_t tokens; /* uncached prompt tokens: the load the request adds (load_uncached) */
};

/*
 * Starts the link for spec's index with key scheme (algo, seed, block_size): connects in the
 * background (an unreachable server is not an error: the link retries with backoff) and
 * subscribes. NULL on a configuration error (logged: bad URL, unreadable creds or CA file).
 */
struct ing_cluster *cluster_open(const struct ing_cluster_config *cc, struct ing_spec *spec,
				 int algo, const char *seed, uint32_t block_size);
/* Stops the threads, closes the connection, frees everything. NULL: no-op. */
void cluster_close(struct ing_cluster *c);

void cluster_local_commit(struct ing_cluster *c, const struct cl_commit *cm);
/* The outcome of local commit corr on index pod pod (the outcome pod): failed (fewer cached
 * tokens than the route matched) is published as a withdrawal, else as done. */
void cluster_local_outcome(struct ing_cluster *c, uint64_t corr, int pod, bool failed);

/* Loop round: applies up to a budget of peers' messages, sends the batch being built.
 * Returns true if more messages are waiting. */
bool cluster_step(struct ing_cluster *c, uint64_t now);

/* Whether readiness should wait for the first warm-start replay: true until it finished and
 * the writer applied it, at most 10 s (2 s with no server reachable). NULL c: false. */
bool cluster_warming(const struct ing_cluster *c, uint64_t now);

/* A descriptor for the writer's poll set, readable when peers' messages wait (cluster_step
 * empties it), or -1 (NULL c, or none: then the loop's 1 ms timeout bounds the wait). */
int cluster_fd(const struct ing_cluster *c);

/* The link's metrics in Prometheus text (any thread); arg is the struct ing_cluster. */
void cluster_metrics(FILE *f, void *arg);

/*
 * The time rule: how long a peer's prediction lives here, from its receipt. commit_real and
 * now_real are CLOCK_REALTIME at the origin's commit and here at receipt; age =
 * max(now_real - commit_real, 0). The prediction's created-at is the receipt less age and its
 * TTL ttl_ms - skew_ms, so it expires at min(commit + TTL, receipt + TTL) - skew. Returns the
 * local TTL (0: already expired) and *age_ns; *skewed when the origin's clock reads more than
 * skew_ms ahead of this one (the bound is broken: counted).
 */
uint32_t cluster_remote_life(uint64_t commit_real, uint64_t now_real, uint32_t ttl_ms,
			     uint32_t skew_ms, uint64_t *age_ns, bool *skewed);

#endif /* KVIDX_INGEST_CLUSTER_H */
