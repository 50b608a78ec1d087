/*
 * serve.c — the life of a request the fake pod serves over HTTP (http.c): its fate drawn
 * from the failure rates or forced by a fault header, then either the pod model (engine.c:
 * vLLM's scheduler decides when it is admitted, prefilled, decoded, and what its blocks
 * publish) or, with --prefill-ms, the constant mode: the prefix-cache lookup at arrival, the
 * completion after the fixed prefill time, and the BlockStored batch of its new blocks after
 * the route-to-event delay, maybe lost (the validation cases of
 * docs/ttl.md "Paired request gaps: the validation").
 *
 * A request whose client went away before its first token is cancelled: nothing more is
 * stored, as when a vLLM request is aborted.
 */
#include "fakepod.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "rng.h"

#define MAX_INFLIGHT 65536 /* requests being served at once */

static double rng_unit(uint64_t *s)
{
	return (double)(tc_rng_next(s) >> 11) * 0x1.0p-53;
}

void free_inflight(struct fp *fp, struct inflight *q)
{
	if (q->h)
		http_detach(q->h);
	free(q->hashes);
	free(q->tokens);
	free(q->blocks);
	free(q);
	fp->ninflight--;
}

void serve_detach(struct inflight *q)
{
	q->h = NULL;
}

static void count(struct fp *fp, enum srv_status st)
{
	switch (st) {
	case SRV_OK: fp->st.ok++; break;
	case SRV_FAILED: fp->st.failed++; break;
	case SRV_CANCELLED: fp->st.cancelled++; break;
	}
}

void serve_fail(struct fp *fp, struct inflight *q)
{
	count(fp, SRV_FAILED);
	if (q->h)
		http_answer(fp, q->h, SRV_FAILED, 0);
	free_inflight(fp, q);
}

void serve_finish(struct fp *fp, struct inflight *q, uint64_t t)
{
	count(fp, q->status);
	if (q->h) {
		http_times(q->h, q->first_token - q->arrival, q->first_sched - q->arrival,
			   t - q->arrival);
		http_answer(fp, q->h, q->status, q->cached_tokens);
	}
	free_inflight(fp, q);
}

void serve_complete(struct fp *fp, struct inflight *q, uint64_t now)
{
	/* A client that left before the end of prefill cancelled the request. */
	if (q->status == SRV_OK && (!q->h || http_peer_gone(q->h)))
		q->status = SRV_CANCELLED;
	if (q->status == SRV_OK) {
		cache_admit(fp, q->hashes, q->tokens, q->nblocks, &fp->tmp);
		if (fp->tmp.n && q->drop_event) {
			fp->st.dropped++;
		} else if (fp->tmp.n) {
			struct action a;

			encode_batch(fp, fp->tmp.v, fp->tmp.n, &a);
			a.due = q->event_due > now ? q->event_due : now;
			schedule(fp, &a, now);
		}
		evlist_drop(&fp->tmp, fp->tmp.n);
	}
	count(fp, q->status);
	if (q->h) {
		uint64_t d = now - q->arrival;

		http_times(q->h, d, 0, d);
		http_answer(fp, q->h, q->status, q->cached_tokens);
	}
	free_inflight(fp, q);
}

int serve_request(struct fp *fp, struct hreq *h, const uint32_t *tokens, size_t ntokens,
		  size_t max_tokens, const struct srv_fault *f, uint64_t now)
{
	struct inflight *q;
	struct action a;
	size_t matched, nblocks;
	uint32_t bs = fp->o.block_size;
	uint64_t jitter, delay_ns;
	double u;

	if (f->restart) {
		/* The pod restarts as the request arrives: everything in flight fails, and so
		 * does this request. */
		evlist_drop(&fp->pending, fp->pending.n);
		pod_restart(fp, fp->order, -1);
		count(fp, SRV_FAILED);
		return -1;
	}
	if (!fp->o.constant &&
	    (ntokens + max_tokens + bs - 1) / bs > fp->o.kv_blocks)
		return -2;
	if (fp->ninflight >= MAX_INFLIGHT) {
		fp_warn(&fp->rl_serve, "--http: more than %d requests in flight: failing one",
			MAX_INFLIGHT);
		count(fp, SRV_FAILED);
		return -1;
	}
	q = tc_xrealloc(NULL, sizeof(*q));
	memset(q, 0, sizeof(*q));
	fp->ninflight++;
	q->h = h;
	http_bind(h, q);
	/* Draws in a fixed order, so a seed gives every request the same fate whatever happens. */
	u = rng_unit(&fp->srv_rng);
	q->drop_event = rng_unit(&fp->srv_rng) < fp->o.drop_rate || f->drop_events;
	jitter = tc_rng_next(&fp->srv_rng) % (fp->o.jitter_ms + 1) * NS_PER_MS;
	q->status = u < fp->o.fail_rate ? SRV_FAILED
		    : u < fp->o.fail_rate + fp->o.cancel_rate ? SRV_CANCELLED : SRV_OK;
	if (f->fail)
		q->status = SRV_FAILED;
	if (f->cancel)
		q->status = SRV_CANCELLED;

	nblocks = ntokens / bs;
	q->nblocks = nblocks;
	q->hashes = tc_xrealloc(NULL, (nblocks ? nblocks : 1) * sizeof(*q->hashes));
	engine_chain(0, tokens, nblocks, bs, q->hashes);
	delay_ns = f->has_delay ? f->delay_ns : fp->o.event_delay_ms * NS_PER_MS;
	if (!fp->o.constant) {
		q->tokens = tc_xrealloc(NULL, (nblocks ? nblocks * bs : 1) * sizeof(*q->tokens));
		memcpy(q->tokens, tokens, nblocks * bs * sizeof(*q->tokens));
		q->ntokens = ntokens;
		q->max_tokens = max_tokens;
		q->rank = nblocks ? rank_of(fp, q->hashes[0]) : 0;
		q->event_delay = delay_ns;
		q->has_delay = delay_ns > 0;
		engine_submit(fp, q, now);
		return 0;
	}
	/* The scheduler's lookup: leading cached blocks, touched so they stay. */
	matched = cache_match(&fp->cache, q->hashes, nblocks);
	/* Like vLLM, never report the whole prompt as cached: its last token is recomputed. */
	if (matched && matched * bs == ntokens)
		matched--;
	q->cached_tokens = (uint32_t)(matched * bs);
	if (q->status == SRV_OK) { /* only a successful prefill stores blocks */
		q->tokens = tc_xrealloc(NULL, nblocks * bs * sizeof(*q->tokens));
		memcpy(q->tokens, tokens, nblocks * bs * sizeof(*q->tokens));
	}
	q->arrival = now;
	q->event_due = now + delay_ns + jitter;
	memset(&a, 0, sizeof a);
	a.kind = ACT_SERVE_DONE;
	a.data = q;
	a.due = now + fp->o.prefill_ms * NS_PER_MS + jitter;
	schedule(fp, &a, now);
	return 0;
}
