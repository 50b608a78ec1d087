/*
 * serve.c — the fake pod's --serve mode: a ROUTER where a router worker "sends" prompts
 * (tools/proto/serve.h). The pod looks up the prompt's cached prefix at once, replies with the
 * number of cached tokens after a simulated prefill, and publishes the new blocks after a
 * simulated route-to-event delay, with injectable failures, cancellations and lost events
 * (the validation cases of seeds/prefix-cache-speculative-index-ttl.md).
 */
#include "fakepod.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "rng.h"

#define MAX_INFLIGHT 65536 /* serve requests being "prefilled" at once */

struct inflight {
	unsigned char id[256]; /* ROUTER identity of the client (ZMQ caps it at 255 bytes) */
	size_t idlen;
	bool delim; /* the request came with an empty delimiter frame */
	uint64_t corr_id;
	enum kvs_status status;
	uint32_t cached_tokens;
	bool drop_event;
	uint64_t event_due;
	uint64_t *hashes; /* engine hashes of the prompt's full blocks */
	uint32_t *tokens; /* their tokens */
	size_t nblocks;
};

static double rng_unit(uint64_t *s)
{
	return (double)(tc_rng_next(s) >> 11) * 0x1.0p-53;
}

void free_inflight(struct fp *fp, struct inflight *q)
{
	free(q->hashes);
	free(q->tokens);
	free(q);
	fp->ninflight--;
}

static void serve_reply(struct fp *fp, struct inflight *q)
{
	struct kvs_reply rp = { q->corr_id, q->cached_tokens, q->status };
	const void *d[3];
	size_t l[3];
	int n = 0;

	msgpack_sbuffer_clear(&fp->reply);
	if (kvs_encode_reply(&fp->reply, &rp))
		tc_die_nomem();
	d[n] = q->id;
	l[n++] = q->idlen;
	if (q->delim) {
		d[n] = "";
		l[n++] = 0;
	}
	d[n] = fp->reply.data;
	l[n++] = fp->reply.size;
	send_frames(fp->serve, n, d, l);
	switch (q->status) {
	case KVS_OK: fp->st.ok++; break;
	case KVS_FAILED: fp->st.failed++; break;
	case KVS_CANCELLED: fp->st.cancelled++; break;
	}
}

void serve_fail(struct fp *fp, struct inflight *q)
{
	q->status = KVS_FAILED;
	serve_reply(fp, q);
	free_inflight(fp, q);
}

void serve_complete(struct fp *fp, struct inflight *q, uint64_t now)
{
	if (q->status == KVS_OK) {
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
	serve_reply(fp, q);
	free_inflight(fp, q);
}

/*
 * A request arrived: look up its cached prefix now (as the scheduler does), draw its fate,
 * and queue its completion after the prefill time.
 */
static void serve_request(struct fp *fp, const void *id, size_t idlen, bool delim,
			  const void *msg, size_t len, uint64_t now)
{
	struct inflight *q;
	struct action a;
	char err[160];
	size_t matched, nblocks;
	uint32_t bs = fp->o.block_size;
	uint64_t jitter;
	double u;
	int r;

	fp->st.requests++;
	r = kvs_decode_request(msg, len, &fp->rq, err, sizeof err);
	if (r) {
		fp->st.bad_requests++;
		fp_warn(&fp->rl_serve, "--serve: ignoring a bad request: %s", err);
		return;
	}
	q = tc_xrealloc(NULL, sizeof(*q));
	memset(q, 0, sizeof(*q));
	fp->ninflight++;
	memcpy(q->id, id, idlen);
	q->idlen = idlen;
	q->delim = delim;
	q->corr_id = fp->rq.corr_id;
	/* Draws in a fixed order, so a seed gives every request the same fate whatever happens. */
	u = rng_unit(&fp->srv_rng);
	q->drop_event = rng_unit(&fp->srv_rng) < fp->o.drop_rate;
	jitter = tc_rng_next(&fp->srv_rng) % (fp->o.jitter_ms + 1) * NS_PER_MS;
	q->status = u < fp->o.fail_rate ? KVS_FAILED
		    : u < fp->o.fail_rate + fp->o.cancel_rate ? KVS_CANCELLED : KVS_OK;

	/* Refused at once, never scheduled: another model, or too much in flight. */
	if ((fp->rq.model[0] && strcmp(fp->rq.model, fp->o.model)) ||
	    fp->ninflight > MAX_INFLIGHT) {
		if (fp->ninflight > MAX_INFLIGHT)
			fp_warn(&fp->rl_serve, "--serve: more than %d requests in flight: failing "
				"request %" PRIu64, MAX_INFLIGHT, q->corr_id);
		else
			fp_warn(&fp->rl_serve, "--serve: request %" PRIu64 " for model '%s', not "
				"'%s': failed", q->corr_id, fp->rq.model, fp->o.model);
		serve_fail(fp, q);
		return;
	}

	/* The scheduler's lookup: leading cached blocks, touched so they stay. */
	nblocks = fp->rq.ntokens / bs;
	q->nblocks = nblocks;
	q->hashes = tc_xrealloc(NULL, nblocks * sizeof(*q->hashes));
	engine_chain(0, fp->rq.tokens, nblocks, bs, q->hashes);
	matched = cache_match(&fp->cache, q->hashes, nblocks);
	/* Like vLLM, never report the whole prompt as cached: its last token is recomputed. */
	if (matched && matched * bs == fp->rq.ntokens)
		matched--;
	q->cached_tokens = (uint32_t)(matched * bs);
	if (q->status == KVS_OK) { /* only a successful prefill stores blocks */
		q->tokens = tc_xrealloc(NULL, nblocks * bs * sizeof(*q->tokens));
		memcpy(q->tokens, fp->rq.tokens, nblocks * bs * sizeof(*q->tokens));
	}
	q->event_due = now + fp->o.event_delay_ms * NS_PER_MS + jitter;
	memset(&a, 0, sizeof a);
	a.kind = ACT_SERVE_DONE;
	a.data = q;
	a.due = now + fp->o.prefill_ms * NS_PER_MS + jitter;
	schedule(fp, &a, now);
}

void handle_serve(struct fp *fp, uint64_t now)
{
	struct frames f;
	int budget = 256;

	while (budget-- && recv_frames(fp->serve, &f)) {
		bool delim;

		if (!router_envelope(&f, &delim)) {
			fp->st.requests++;
			fp->st.bad_requests++;
			fp_warn(&fp->rl_serve, "--serve: ignoring a message of %d%s frames that is "
				"not [\"\", request] or [request]", f.n, f.too_many ? "+" : "");
		} else {
			serve_request(fp, FDATA(&f, 0), FSIZE(&f, 0), delim, FDATA(&f, f.n - 1),
				      FSIZE(&f, f.n - 1), now);
		}
		frames_close(&f);
	}
}
