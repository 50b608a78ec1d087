/*
 * workload.c — the fake pod's synthetic workload: prompts built from a pool of --prefixes
 * shared prefixes (system prompts) and a fresh suffix each, run through the pod's cache
 * (cache.c), their events published in batches of --batch at --rate events per second, until
 * --count events.
 */
#include "fakepod.h"

#include "cli.h"
#include "rng.h"

#define VOCAB 50000u /* workload tokens are drawn from [0, VOCAB) */

/* Builds one prompt (a shared prefix plus a fresh suffix) and admits it to the cache. */
static void workload_prompt(struct fp *fp)
{
	const struct opts *o = &fp->o;
	size_t nblocks = o->prefix_blocks + o->suffix_blocks, ntok = nblocks * o->block_size;
	size_t npre = o->prefix_blocks * o->block_size;
	uint64_t k = tc_rng_next(&fp->wl_rng) % o->prefixes;
	uint64_t ps = o->seed ^ (k + 1) * 0xd1342543de82ef95ull;

	tc_grow(&fp->toks, &fp->toks_cap, ntok, sizeof(*fp->toks));
	tc_grow(&fp->hbuf, &fp->hbuf_cap, nblocks, sizeof(*fp->hbuf));
	for (size_t i = 0; i < npre; i++)
		fp->toks[i] = (uint32_t)(tc_rng_next(&ps) % VOCAB);
	for (size_t i = npre; i < ntok; i++)
		fp->toks[i] = (uint32_t)(tc_rng_next(&fp->wl_rng) % VOCAB);
	engine_chain(0, fp->toks, nblocks, o->block_size, fp->hbuf);
	cache_admit(fp, fp->hbuf, fp->toks, nblocks, &fp->pending);
}

void workload_step(struct fp *fp, uint64_t now)
{
	const struct opts *o = &fp->o;

	for (int iter = 0; iter < 256; iter++) {
		uint64_t n = o->batch, due;
		int tries = 0;

		if (o->count && fp->wl_events >= o->count) {
			fp->wl_done = true;
			evlist_drop(&fp->pending, fp->pending.n);
			return;
		}
		if (o->count && o->count - fp->wl_events < n)
			n = o->count - fp->wl_events;
		while (fp->pending.n < n && tries++ < 1024)
			workload_prompt(fp);
		if (fp->pending.n < n) { /* everything was cached: try again on the next turn */
			fp->wl_next = now;
			return;
		}
		if (o->rate > 0) {
			double at = (double)(fp->wl_events + n) / o->rate * (double)NS_PER_S;

			due = fp->start_ns + (at < 1e18 ? (uint64_t)at : (uint64_t)1e18);
		} else {
			due = now;
		}
		if (due > now) {
			fp->wl_next = due;
			return;
		}
		flush_pending(fp, n, now);
		fp->wl_events += n;
	}
	fp->wl_next = now; /* more is due: come back after polling the sockets */
}
