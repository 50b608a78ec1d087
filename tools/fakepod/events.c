/*
 * events.c — the fake pod's events on their way out: the list of events waiting for their
 * batch, and the encoding of a batch into a vLLM payload (wire.h) as a publish action.
 *
 * The batch timestamp is the wall clock, as vLLM's; every other time in the pod is
 * CLOCK_MONOTONIC.
 */
#include "fakepod.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

static double wall_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

struct kvw_event *ev_add(struct fp *fp, struct evlist *l, enum kvw_type type)
{
	struct kvw_event *e;

	tc_grow(&l->v, &l->cap, l->n + 1, sizeof(*l->v));
	e = &l->v[l->n++];
	memset(e, 0, sizeof(*e));
	e->type = type;
	e->block_size = fp->o.block_size;
	snprintf(e->medium, sizeof e->medium, "%s", fp->o.medium);
	return e;
}

uint64_t *ev_hashes(struct kvw_event *e, size_t n)
{
	uint64_t *h = n ? tc_xrealloc(NULL, n * sizeof(*h)) : NULL;

	e->hashes = h;
	e->nhashes = n;
	return h;
}

void ev_add_removed(struct fp *fp, struct evlist *l, const uint64_t *hashes, size_t nhashes)
{
	struct kvw_event *e = ev_add(fp, l, KVW_BLOCK_REMOVED);

	if (nhashes)
		memcpy(ev_hashes(e, nhashes), hashes, nhashes * sizeof(*hashes));
}

void ev_add_stored(struct fp *fp, struct evlist *l, const uint64_t *hashes, size_t nhashes,
		   bool has_parent, uint64_t parent, const uint32_t *tokens, size_t ntokens)
{
	struct kvw_event *e = ev_add(fp, l, KVW_BLOCK_STORED);
	uint32_t *t = tc_xrealloc(NULL, ntokens * sizeof(*tokens));

	if (nhashes)
		memcpy(ev_hashes(e, nhashes), hashes, nhashes * sizeof(*hashes));
	e->has_parent = has_parent;
	e->parent = parent;
	memcpy(t, tokens, ntokens * sizeof(*tokens));
	e->tokens = t;
	e->ntokens = ntokens;
}

void evlist_drop(struct evlist *l, size_t k)
{
	if (!k)
		return;
	/* The arrays are the list's own (ev_hashes(), ev_add_stored()), const only to wire.h. */
	for (size_t i = 0; i < k; i++) {
		free((void *)l->v[i].hashes);
		free((void *)l->v[i].tokens);
		free((void *)l->v[i].extra);
	}
	memmove(l->v, l->v + k, (l->n - k) * sizeof(*l->v));
	l->n -= k;
}

void encode_batch(struct fp *fp, const struct kvw_event *v, size_t n, struct action *a)
{
	const void *buf;
	size_t len;
	int r;

	memset(a, 0, sizeof(*a));
	a->kind = ACT_PUBLISH;
	kvw_enc_begin(&fp->enc, &fp->encopts, wall_s() + (double)fp->o.ts_ahead_ms / 1e3, n,
		      fp->o.has_rank, fp->o.rank);
	for (size_t i = 0; i < n; i++) {
		kvw_enc_event(&fp->enc, &v[i]);
		if (v[i].type == KVW_BLOCK_STORED)
			a->nstored += v[i].nhashes;
		else if (v[i].type == KVW_BLOCK_REMOVED)
			a->nremoved += v[i].nhashes;
		else
			a->ncleared++;
	}
	r = kvw_enc_end(&fp->enc, &buf, &len);
	if (r) {
		/* The events are built here within the encoder's limits: only memory can fail. */
		fprintf(stderr, PROG ": encoding a batch of %zu events: %s\n", n, strerror(-r));
		exit(1);
	}
	a->nevents = n;
	a->data = tc_xrealloc(NULL, len);
	memcpy(a->data, buf, len);
	a->len = len;
}

void flush_pending(struct fp *fp, size_t n, uint64_t now)
{
	struct action a;

	if (!n)
		return;
	encode_batch(fp, fp->pending.v, n, &a);
	evlist_drop(&fp->pending, n);
	a.due = now + fp->delay_ns;
	schedule(fp, &a, now);
}
