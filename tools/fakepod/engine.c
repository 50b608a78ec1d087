/*
 * engine.c — the pod model behind --http (unless --prefill-ms): one engine per data-parallel
 * rank, stepping as vLLM V1's scheduler does (vllm/v1/core/sched/scheduler.py, schedule() and
 * update_from_output()), on a model clock, and vLLM's metrics on GET /metrics.
 *
 * A step: the token budget is --max-num-batched-tokens. Running requests come first, in
 * admission order, each taking what it still has to compute (the rest of its prompt, as a
 * chunk if the budget is short: chunked prefill; 1 token when decoding); a block it cannot
 * get preempts the last running request (its blocks freed, back to the head of the queue,
 * recomputed from scratch when readmitted, vLLM's recompute preemption). Then, if nothing
 * was preempted, waiting requests are admitted in arrival order while fewer than
 * --max-num-seqs run and budget is left: the prefix-cache lookup (leading cached blocks,
 * at most the prompt minus its last token), its hit held, and blocks for its first chunk;
 * one that cannot get its blocks stays waiting, and so do those after it. Allocation evicts
 * the least recently freed blocks (cache.c); a prompt's full blocks are cached as they are
 * scheduled, as vLLM's allocate_slots() does. The step's events (BlockRemoved of evictions,
 * BlockStored of new blocks, request by request) form one batch, published when the step
 * ends, as vLLM publishes a step's events.
 *
 * A step lasts --step-overhead-ms + (prefill tokens) / --prefill-tokens-per-s +
 * (decoding requests) x --decode-ms-per-seq. When it ends, every request whose known tokens
 * are all computed gets one more token: the first is its time to first token (TTFT: from its
 * arrival to the end of that step); after max_tokens it finishes, its blocks freed (last
 * first, so its tail is reused before its head) and the answer sent. Failed and cancelled
 * requests (fault header, --fail-rate, --cancel-rate) end when their first token would come,
 * having cached nothing.
 *
 * The model clock runs --time-scale times as fast as the wall clock: model time t is wall
 * time start + t / scale. Steps follow each other on the model clock exactly; when the
 * process falls behind (a loaded machine), the model falls behind the wall clock rather
 * than counting the lag as model time, and a request arriving then is taken as arriving when
 * the current step ends. Every figure reported (TTFT headers, /metrics) is model time.
 */
#include "fakepod.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* vLLM's buckets of vllm:time_to_first_token_seconds (vllm/v1/metrics/loggers.py). */
static const double ttft_bounds[TTFT_BUCKETS] = {
	0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
	1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
};

uint64_t model_now(const struct fp *fp, uint64_t wall)
{
	double t = (double)(wall > fp->start_ns ? wall - fp->start_ns : 0) * fp->o.time_scale;

	return t < 1.8e19 ? (uint64_t)t : UINT64_MAX / 2;
}

/* The wall time of model time t. */
static uint64_t wall_of(const struct fp *fp, uint64_t t)
{
	return fp->start_ns + (uint64_t)((double)t / fp->o.time_scale + 0.999);
}

/* The tokens q knows: its prompt and what it generated. */
static size_t known(const struct inflight *q)
{
	return q->ntokens + q->nout;
}

static size_t blocks_for(const struct fp *fp, size_t tokens)
{
	return (tokens + fp->o.block_size - 1) / fp->o.block_size;
}

/* Releases q's blocks, last first. */
static void release_blocks(struct fp *fp, struct inflight *q)
{
	for (size_t i = q->nblk; i-- > 0;)
		blk_unref(&fp->cache, q->blocks[i]);
	q->nblk = 0;
}

/*
 * Gives q blocks for its first `tokens` tokens and caches the prompt's full blocks among
 * them, their events to out. False (nothing taken) if the free queue is short.
 */
static bool grow(struct fp *fp, struct inflight *q, size_t tokens, struct evlist *out)
{
	size_t need = blocks_for(fp, tokens), bs = fp->o.block_size, full, first;

	if (need > q->nblk && need - q->nblk > cache_nfree(&fp->cache, q->rank))
		return false;
	tc_grow(&q->blocks, &q->blk_cap, need, sizeof(*q->blocks));
	while (q->nblk < need)
		q->blocks[q->nblk++] = blk_alloc(fp, q->rank);
	cache_evictions(fp, out);
	full = tokens / bs < q->nblocks ? tokens / bs : q->nblocks;
	if (q->status != SRV_OK) {
		q->nstored = full; /* a failing request caches nothing */
		return true;
	}
	/* Runs of blocks this request caches (one already cached by another is skipped). */
	while (q->nstored < full) {
		while (q->nstored < full &&
		       cache_lookup(&fp->cache, q->hashes[q->nstored]) != BLK_NONE)
			q->nstored++;
		first = q->nstored;
		while (q->nstored < full &&
		       blk_store(&fp->cache, q->blocks[q->nstored], q->hashes[q->nstored], q->fl))
			q->nstored++;
		if (q->nstored > first) {
			fp->px = NULL;
			cache_stored(fp, out, q->hashes, q->nstored - first, q->tokens, first, q->fl);
		}
	}
	return true;
}

static void push_waiting_head(struct engine *e, struct inflight *q)
{
	q->next = e->wait_head;
	e->wait_head = q;
	if (!e->wait_tail)
		e->wait_tail = q;
	e->nwait++;
}

static struct inflight *pop_waiting(struct engine *e)
{
	struct inflight *q = e->wait_head;

	e->wait_head = q->next;
	if (!e->wait_head)
		e->wait_tail = NULL;
	q->next = NULL;
	e->nwait--;
	return q;
}

/* Recompute preemption of the last running request. */
static void preempt_last(struct fp *fp, struct engine *e)
{
	struct inflight *q = e->run[--e->nrun];

	release_blocks(fp, q);
	q->computed = q->nstored = q->sched = 0;
	push_waiting_head(e, q);
	e->preemptions++;
}

/* The list q's events go to: the step's batch, or a list of their own (delay, drop). */
static struct evlist *events_of(struct fp *fp, const struct inflight *q)
{
	return q->drop_event || q->has_delay ? &fp->side : &fp->tmp;
}

/*
 * Drops what events_of() put aside for q, or makes it a batch of its own, published
 * event_delay after q's arrival but not before the step ends (step_begin() schedules it).
 */
static void flush_side(struct fp *fp, struct inflight *q)
{
	struct action a;

	if (!fp->side.n)
		return;
	if (q->drop_event) {
		fp->st.dropped++;
	} else {
		encode_batch(fp, fp->side.v, fp->side.n, &a);
		a.due = wall_of(fp, q->arrival + q->event_delay);
		tc_grow(&fp->side_acts, &fp->side_cap, fp->nside + 1, sizeof(*fp->side_acts));
		fp->side_acts[fp->nside++] = a;
	}
	evlist_drop(&fp->side, fp->side.n);
}

/* The running requests' share of the step; returns the budget left. *pre: preempted. */
static size_t sched_running(struct fp *fp, struct engine *e, size_t budget, bool *pre)
{
	for (size_t i = 0; i < e->nrun && budget; i++) {
		struct inflight *q = e->run[i];
		size_t n = known(q) - q->computed;

		if (n > budget)
			n = budget;
		while (!grow(fp, q, q->computed + n, events_of(fp, q))) {
			*pre = true;
			preempt_last(fp, e);
			if (i == e->nrun) /* q itself */
				return budget;
		}
		flush_side(fp, q);
		q->sched = n;
		budget -= n;
	}
	return budget;
}

/* Admits the head of the queue if it fits; false if it stays waiting. */
static bool admit(struct fp *fp, struct engine *e, size_t *budget, uint64_t t)
{
	struct inflight *q = e->wait_head;
	struct cache *c = &fp->cache;
	size_t bs = fp->o.block_size, lim = (known(q) - 1) / bs, hit = 0, evictable = 0, n;

	if (lim > q->nblocks)
		lim = q->nblocks;
	while (hit < lim && cache_lookup(c, q->hashes[hit]) != BLK_NONE) {
		if (blk_free_cached(c, cache_lookup(c, q->hashes[hit])))
			evictable++;
		hit++;
	}
	n = known(q) - hit * bs;
	if (n > *budget)
		n = *budget;
	if (blocks_for(fp, hit * bs + n) - hit + evictable > cache_nfree(c, q->rank))
		return false;
	e->queries += known(q);
	e->hits += hit * bs;
	tc_grow(&q->blocks, &q->blk_cap, hit ? hit : 1, sizeof(*q->blocks));
	for (size_t i = 0; i < hit; i++)
		blk_ref(c, q->blocks[i] = cache_lookup(c, q->hashes[i]));
	q->nblk = q->nstored = hit;
	q->computed = hit * bs;
	if (!q->admitted) {
		q->admitted = true;
		q->cached_tokens = (uint32_t)(hit * bs);
		q->first_sched = t;
		q->fl = cache_draw_flags(fp);
	}
	grow(fp, q, q->computed + n, events_of(fp, q));
	flush_side(fp, q);
	q->sched = n;
	*budget -= n;
	pop_waiting(e);
	tc_grow(&e->run, &e->run_cap, e->nrun + 1, sizeof(*e->run));
	e->run[e->nrun++] = q;
	return true;
}

/*
 * Starts a step of rank r's engine at model time t (now: the wall clock), or leaves it idle
 * when there is nothing to do.
 */
static void step_begin(struct fp *fp, uint32_t r, uint64_t t, uint64_t now)
{
	struct engine *e = &fp->eng[r];
	size_t budget = fp->o.max_batched, prefill = 0, decode = 0;
	bool pre = false;
	double ms;
	struct action a;
	uint64_t due;

	fp->ev_rank = r;
	budget = sched_running(fp, e, budget, &pre);
	while (!pre && e->nwait && e->nrun < fp->o.max_num_seqs && budget &&
	       admit(fp, e, &budget, t))
		;
	for (size_t i = 0; i < e->nrun; i++) {
		const struct inflight *q = e->run[i];

		if (q->sched == 1 && q->nout && q->computed + 1 == known(q))
			decode++;
		else
			prefill += q->sched;
	}
	if (!prefill && !decode) {
		e->busy = false;
		return;
	}
	ms = fp->o.step_ms + (double)prefill * 1e3 / fp->o.prefill_tps +
	     (double)decode * fp->o.decode_seq_ms;
	e->step_end = t + (uint64_t)(ms * 1e6 + 0.5);
	e->busy = true;
	due = wall_of(fp, e->step_end);
	if (fp->tmp.n) {
		fp->ev_rank = r;
		encode_batch(fp, fp->tmp.v, fp->tmp.n, &a);
		a.due = due;
		schedule(fp, &a, now);
		evlist_drop(&fp->tmp, fp->tmp.n);
	}
	for (size_t i = 0; i < fp->nside; i++) {
		if (fp->side_acts[i].due < due)
			fp->side_acts[i].due = due;
		schedule(fp, &fp->side_acts[i], now);
	}
	fp->nside = 0;
	memset(&a, 0, sizeof a);
	a.kind = ACT_STEP;
	a.rank = r;
	a.n = e->gen;
	a.due = due;
	enqueue(fp, &a);
}

static void observe_ttft(struct engine *e, uint64_t ns)
{
	double s = (double)ns / 1e9;
	size_t b = 0;

	while (b < TTFT_BUCKETS && s > ttft_bounds[b])
		b++;
	e->ttft_bucket[b]++;
	e->ttft_sum += s;
	e->ttft_count++;
}

/* The end of a step of rank r: tokens, first tokens, finished requests, the next step. */
void engine_step_end(struct fp *fp, uint32_t r, uint64_t gen, uint64_t now)
{
	struct engine *e = &fp->eng[r];
	uint64_t t = e->step_end;
	size_t k = 0;

	if (gen != e->gen || !e->busy)
		return; /* a step of the engine before a restart */
	for (size_t i = 0; i < e->nrun; i++) {
		struct inflight *q = e->run[i];
		bool done = false;

		q->computed += q->sched;
		q->sched = 0;
		if (q->computed == known(q)) {
			if (!q->nout++) {
				q->first_token = t;
				if (q->status == SRV_OK && (!q->h || http_peer_gone(q->h)))
					q->status = SRV_CANCELLED;
				if (q->status == SRV_OK)
					observe_ttft(e, t - q->arrival);
				done = q->status != SRV_OK;
			}
			e->gen_tokens++;
			done = done || q->nout >= q->max_tokens;
		}
		if (!done) {
			e->run[k++] = q;
			continue;
		}
		release_blocks(fp, q);
		if (q->status == SRV_OK)
			e->success++;
		serve_finish(fp, q, t);
	}
	e->nrun = k;
	step_begin(fp, r, t, now);
}

void engine_submit(struct fp *fp, struct inflight *q, uint64_t now)
{
	struct engine *e = &fp->eng[q->rank];
	uint64_t t = model_now(fp, now);

	if (e->busy && t > e->step_end)
		t = e->step_end; /* the model is behind the wall clock */
	q->arrival = t;
	q->next = NULL;
	if (e->wait_tail)
		e->wait_tail->next = q;
	else
		e->wait_head = q;
	e->wait_tail = q;
	e->nwait++;
	e->prompt_tokens += q->ntokens;
	if (!e->busy)
		step_begin(fp, q->rank, t, now);
}

void engine_restart(struct fp *fp, int rank)
{
	for (uint32_t r = 0; r < fp->nranks; r++) {
		struct engine *e = &fp->eng[r];

		if (rank >= 0 && fp->nranks > 1 && r != (uint32_t)rank)
			continue;
		/* The cache was emptied: the blocks are nobody's any more. */
		for (size_t i = 0; i < e->nrun; i++) {
			e->run[i]->nblk = 0;
			serve_fail(fp, e->run[i]);
		}
		e->nrun = 0;
		while (e->nwait) {
			struct inflight *q = pop_waiting(e);

			q->nblk = 0;
			serve_fail(fp, q);
		}
		e->busy = false;
		e->gen++;
	}
}

void engine_free(struct fp *fp)
{
	for (uint32_t r = 0; r < fp->nranks; r++) {
		struct engine *e = &fp->eng[r];

		for (size_t i = 0; i < e->nrun; i++)
			free_inflight(fp, e->run[i]);
		while (e->nwait)
			free_inflight(fp, pop_waiting(e));
		free(e->run);
	}
}

/* One series per engine: vLLM's labels, model_name and engine. */
static void series(FILE *f, const struct fp *fp, const char *name, uint32_t r, double v)
{
	fprintf(f, "%s{model_name=\"%s\",engine=\"%" PRIu32 "\"} %.17g\n", name, fp->o.model,
		r, v);
}

static void family(FILE *f, const char *name, const char *type, const char *help)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

char *engine_metrics(struct fp *fp, size_t *len)
{
	char *s = NULL;
	FILE *f = open_memstream(&s, len);
	uint32_t n = fp->nranks, r;

	if (!f)
		tc_die_nomem();
#define EACH(expr) for (r = 0; r < n; r++) { const struct engine *e = &fp->eng[r]; \
	(void)e; series(f, fp, name, r, (double)(expr)); }
	const char *name;

	name = "vllm:num_requests_running";
	family(f, name, "gauge", "Number of requests in model execution batches.");
	EACH(e->nrun);
	name = "vllm:num_requests_waiting";
	family(f, name, "gauge", "Number of requests waiting to be processed.");
	EACH(e->nwait);
	name = "vllm:kv_cache_usage_perc";
	family(f, name, "gauge", "KV-cache usage. 1 means 100 percent usage.");
	EACH(1.0 - (double)cache_nfree(&fp->cache, r) / fp->cache.cap);
	name = "vllm:prefix_cache_queries_total";
	family(f, name, "counter", "Prefix cache queries, in terms of number of queried tokens.");
	EACH(e->queries);
	name = "vllm:prefix_cache_hits_total";
	family(f, name, "counter", "Prefix cache hits, in terms of number of cached tokens.");
	EACH(e->hits);
	name = "vllm:num_preemptions_total";
	family(f, name, "counter", "Cumulative number of preemption from the engine.");
	EACH(e->preemptions);
	name = "vllm:prompt_tokens_total";
	family(f, name, "counter", "Number of prefill tokens processed.");
	EACH(e->prompt_tokens);
	name = "vllm:generation_tokens_total";
	family(f, name, "counter", "Number of generation tokens processed.");
	EACH(e->gen_tokens);
	name = "vllm:request_success_total";
	family(f, name, "counter", "Count of successfully processed requests.");
	EACH(e->success);
#undef EACH
	name = "vllm:time_to_first_token_seconds";
	family(f, name, "histogram", "Histogram of time to first token in seconds.");
	for (r = 0; r < n; r++) {
		const struct engine *e = &fp->eng[r];
		uint64_t cum = 0;

		for (size_t b = 0; b <= TTFT_BUCKETS; b++) {
			cum += e->ttft_bucket[b];
			if (b < TTFT_BUCKETS)
				fprintf(f, "%s_bucket{model_name=\"%s\",engine=\"%" PRIu32
					"\",le=\"%g\"} %" PRIu64 "\n", name, fp->o.model, r,
					ttft_bounds[b], cum);
			else
				fprintf(f, "%s_bucket{model_name=\"%s\",engine=\"%" PRIu32
					"\",le=\"+Inf\"} %" PRIu64 "\n", name, fp->o.model, r, cum);
		}
		series(f, fp, "vllm:time_to_first_token_seconds_sum", r, e->ttft_sum);
		series(f, fp, "vllm:time_to_first_token_seconds_count", r, (double)e->ttft_count);
	}
	if (fclose(f))
		tc_die_nomem();
	return s;
}
