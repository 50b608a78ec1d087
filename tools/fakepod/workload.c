/*
 * workload.c — the fake pod's synthetic workload: prompts built from a pool of --prefixes
 * shared prefixes (system prompts) and a fresh suffix each, run through the pod's cache
 * (cache.c), their events published in batches of --batch at --rate events per second, until
 * --count events. With --lora, --salt or --mm, a share of the prompts uses the adapter, the
 * salt or carries an image (its extra_keys as vLLM's); those draws come from a generator of
 * their own, so that the prompts' tokens stay what the seed gives without them.
 */
#include "fakepod.h"

#include <stdio.h>

#include "cli.h"
#include "rng.h"

#define VOCAB 50000u       /* workload tokens are drawn from [0, VOCAB) */
#define IMAGE_TOKEN 50000u /* an image's placeholder tokens, as vLLM repeats one id */

/* Places an image of one block in the ntok tokens, from half a block past npre on. */
static void place_image(struct fp *fp, size_t npre, size_t ntok, struct mm_item *m, char *id,
			size_t idcap)
{
	uint32_t bs = fp->o.block_size;
	size_t start = npre + bs / 2, len = bs;

	if (start + len > ntok)
		start = ntok > len ? ntok - len : 0;
	if (start + len > ntok)
		len = ntok - start;
	snprintf(id, idcap, "img-%016llx", (unsigned long long)tc_rng_next(&fp->shape_rng));
	*m = (struct mm_item){ .start = (uint32_t)start, .len = (uint32_t)len, .id = id };
	for (size_t i = start; i < start + len; i++)
		fp->toks[i] = IMAGE_TOKEN;
}

/* Builds one prompt (a shared prefix plus a fresh suffix) and admits it to the cache. */
static void workload_prompt(struct fp *fp)
{
	const struct opts *o = &fp->o;
	size_t nblocks = o->prefix_blocks + o->suffix_blocks, ntok = nblocks * o->block_size;
	size_t npre = o->prefix_blocks * o->block_size;
	uint64_t k = tc_rng_next(&fp->wl_rng) % o->prefixes;
	uint64_t ps = o->seed ^ (k + 1) * 0xd1342543de82ef95ull;
	struct prompt_x px = { .mm_bare = o->mm_bare };
	struct mm_item img;
	char id[32];

	tc_grow(&fp->toks, &fp->toks_cap, ntok, sizeof(*fp->toks));
	tc_grow(&fp->hbuf, &fp->hbuf_cap, nblocks, sizeof(*fp->hbuf));
	for (size_t i = 0; i < npre; i++)
		fp->toks[i] = (uint32_t)(tc_rng_next(&ps) % VOCAB);
	for (size_t i = npre; i < ntok; i++)
		fp->toks[i] = (uint32_t)(tc_rng_next(&fp->wl_rng) % VOCAB);
	if (o->lora && shape_draw(fp, o->lora_share))
		px.lora = o->lora;
	if (o->salt && shape_draw(fp, o->salt_share))
		px.salt = o->salt;
	if (shape_draw(fp, o->mm_rate)) {
		place_image(fp, npre, ntok, &img, id, sizeof id);
		px.mm = &img;
		px.nmm = 1;
	}
	engine_chain_x(0, fp->toks, 0, nblocks, o->block_size, &px, fp->hbuf);
	fp->px = &px;
	cache_admit(fp, fp->hbuf, fp->toks, nblocks, &fp->pending);
	fp->px = NULL;
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
