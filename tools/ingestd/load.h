/*
 * load.h — internal to kvidx-ingestd: its one job is the accounting behind the index's load
 * view (kvidx_pod_load(), shm/FORMAT.md section 5.9): per pod, the requests routed to it whose
 * outcome has not come and their uncached prompt tokens, published with kvidx_pod_set_load()
 * after every change.
 *
 *   commit    a drained route commit counts on the pod its outcome is for (the prefill pod
 *             under P/D, else the decode pod): one request, and its uncached tokens =
 *             prompt tokens (the commit's, or nkeys x block size when it gave none) less the
 *             matched blocks' tokens, at least 0.
 *   outcome   retires the oldest in-flight request of (corr_id, pod); one that matches none
 *             (retired by the bound already, or never committed) changes nothing and counts.
 *   bound     a request in flight longer than --load-timeout is retired (its outcome is taken
 *             as lost: a router that crashed, a ring that was full); a full map (--corr-map
 *             entries) retires its oldest. Both count in the row's lost.
 *   pod gone  kvidx_pod_remove(): its requests are forgotten (the library zeroes the row).
 *   peers     with the cluster link, a peer host's commit counts the same way from its
 *             receipt (load_remote: the tokens its origin computed), and its outcome (or the
 *             same bound, if the peer dies) retires it: the view is fleet-wide. A loss of
 *             the link retires every peer's request at once (load_forget_remote): their
 *             outcomes may be lost with it, and a phantom load would steer the policies
 *             away from pods for up to --load-timeout after the link is back.
 *
 * Requests are kept in one bounded FIFO map (spec.h's struct spec_fifo) keyed (corr_id, pod),
 * where corr_id is the id spec.c keys by origin (origin_corr(): the router's id and its
 * process), so two routers' equal ids never retire each other's requests;
 * in drain order, so the bound retires from the oldest end and costs nothing when none is due.
 * Threads: as spec.c, everything here runs on the ingest thread under the writer mutex.
 */
#ifndef KVIDX_INGEST_LOAD_H
#define KVIDX_INGEST_LOAD_H

#include <stdint.h>

#include "spec.h"

struct load_pod {
	uint64_t inflight, tokens;
	uint64_t lost; /* retired without their outcome */
};

struct ing_load {
	struct kvidx *w;
	uint32_t max_pods;
	uint32_t block_size;
	uint64_t timeout_ns;
	struct load_pod *pods;
	struct spec_fifo map; /* (corr_id, pod) -> aux slot, a tokens, b drained-at */
	uint64_t unmatched;   /* outcomes that matched no request in flight */
};

/* An empty view for writer w: at most cap requests in flight, retired after timeout_ms.
 * 0 or -ENOMEM. */
int load_init(struct ing_load *l, struct kvidx *w, uint32_t max_pods, uint32_t block_size,
	      uint64_t cap, uint32_t timeout_ms);
void load_free(struct ing_load *l);

/* The uncached prompt tokens of a request: prompt tokens (0: nkeys x block size) less the
 * matched blocks' tokens, at least 0, at most UINT32_MAX. */
static inline uint32_t load_uncached(uint32_t prompt_tokens, uint64_t nkeys,
				     uint32_t matched_blocks, uint32_t block_size)
{
	uint64_t prompt = prompt_tokens ? prompt_tokens : nkeys * block_size;
	uint64_t cached = (uint64_t)matched_blocks * block_size;
	uint64_t t = prompt > cached ? prompt - cached : 0;

	return t > UINT32_MAX ? UINT32_MAX : (uint32_t)t;
}

/* A route commit drained at now: counts on pod. prompt_tokens 0: nkeys x block size. */
void load_commit(struct ing_load *l, uint64_t corr_id, int pod, int slot, uint32_t prompt_tokens,
		 uint64_t nkeys, uint32_t matched_blocks, uint64_t now);
/* A peer's request (cluster.c; key mixes its origin and correlation id) received at now:
 * counts on pod with its tokens, retired as a local one (load_outcome, the bound). */
void load_remote(struct ing_load *l, uint64_t key, int pod, uint32_t tokens, uint64_t now);
/* The cluster link was lost (cluster.c): every peer's request still in flight is retired,
 * counted lost, since the outcomes that would retire it may be lost with the link; the view
 * is this host's own until peers' commits arrive again. */
void load_forget_remote(struct ing_load *l, uint64_t now);
/* An outcome for (corr_id, pod), drained at now. */
void load_outcome(struct ing_load *l, uint64_t corr_id, int pod, uint64_t now);
/* Retires what the bound says is lost. Cheap when nothing is due: call every loop round. */
void load_tick(struct ing_load *l, uint64_t now);
/* Pod index pod left the index: its requests are forgotten, uncounted. */
void load_pod_forget(struct ing_load *l, int pod);

#endif /* KVIDX_INGEST_LOAD_H */
