/*
 * pub.c — the fake pod's publisher, as vLLM's (reference/kv-events.md): per data-parallel
 * rank, the PUB socket sending [topic, seq8, payload], the ring of the last --keep batches
 * and the replay ROUTER that answers from it, and, with --wait-subscribers, the XPUB
 * subscription count (all ranks together).
 */
#include "fakepod.h"

#include <stdlib.h>

/* Keeps a published batch for replay, taking ownership of data. */
static void ring_add(struct fp *fp, struct rank *rk, uint64_t seq, void *data, size_t len)
{
	struct kept *k;

	if (!fp->o.keep) {
		free(data);
		return;
	}
	if (rk->ring_n == fp->o.keep) {
		free(rk->ring[rk->ring_head].data);
		rk->ring_head = (rk->ring_head + 1) % fp->o.keep;
		rk->ring_n--;
	}
	k = &rk->ring[(rk->ring_head + rk->ring_n++) % fp->o.keep];
	k->seq = seq;
	k->data = data;
	k->len = len;
}

void ring_clear(struct fp *fp, uint32_t r)
{
	struct rank *rk = &fp->rk[r];

	for (size_t i = 0; i < rk->ring_n; i++)
		free(rk->ring[(rk->ring_head + i) % fp->o.keep].data);
	rk->ring_head = rk->ring_n = 0;
}

void publish(struct fp *fp, struct action *a)
{
	struct rank *rk = &fp->rk[a->rank];
	unsigned char seq8[8];
	uint64_t seq = rk->seq++;

	kvw_seq_put(seq8, seq);
	if (rk->lose_left) {
		rk->lose_left--;
		fp->st.lost++;
	} else {
		const void *d[3] = { fp->topic, seq8, a->data };
		size_t l[3] = { fp->topiclen, 8, a->len };

		send_frames(rk->pub, 3, d, l);
	}
	fp->st.batches++;
	fp->st.events += a->nevents;
	fp->st.stored += a->nstored;
	fp->st.removed += a->nremoved;
	fp->st.cleared += a->ncleared;
	fp->st.raw += a->raw;
	fp->st.extra_blocks += a->nextra;
	fp->st.placeholders += a->nplaceholder;
	fp->st.dup_blocks += a->ndup;
	fp->st.group_events += a->ngroup;
	ring_add(fp, rk, seq, a->data, a->len);
	a->data = NULL;
}

/* Answers replay requests: every kept batch with seq >= start, then the end marker. */
void handle_replay(struct fp *fp, uint32_t r)
{
	struct rank *rk = &fp->rk[r];
	struct frames f;
	int budget = 64;

	while (budget-- && recv_frames(rk->replay, &f)) {
		static const unsigned char end[8] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff };
		const void *d[5];
		size_t l[5];
		uint64_t start;
		bool delim;
		int n = 0, pre;

		if (!router_envelope(&f, &delim) ||
		    !kvw_seq_get(FDATA(&f, f.n - 1), FSIZE(&f, f.n - 1), &start)) {
			fp_warn(&fp->rl_replay, "--replay: ignoring a request of %d%s frames that "
				"is not [\"\", seq8] or [seq8]", f.n, f.too_many ? "+" : "");
			frames_close(&f);
			continue;
		}
		d[n] = FDATA(&f, 0);
		l[n++] = FSIZE(&f, 0);
		if (delim) {
			d[n] = "";
			l[n++] = 0;
		}
		if (!fp->o.old_framing) {
			d[n] = fp->topic;
			l[n++] = fp->topiclen;
		}
		pre = n;
		for (size_t i = 0; i < rk->ring_n; i++) {
			const struct kept *k = &rk->ring[(rk->ring_head + i) % fp->o.keep];
			unsigned char seq8[8];

			if (k->seq < start)
				continue;
			kvw_seq_put(seq8, k->seq);
			d[pre] = seq8;
			l[pre] = 8;
			d[pre + 1] = k->data;
			l[pre + 1] = k->len;
			send_frames(rk->replay, pre + 2, d, l);
		}
		d[pre] = end;
		l[pre] = 8;
		d[pre + 1] = "";
		l[pre + 1] = 0;
		send_frames(rk->replay, pre + 2, d, l);
		fp->st.replays++;
		frames_close(&f);
	}
}

void handle_xpub(struct fp *fp, uint32_t r)
{
	struct frames f;

	while (recv_frames(fp->rk[r].pub, &f)) {
		if (f.n >= 1 && FSIZE(&f, 0) >= 1) {
			unsigned char b = *(const unsigned char *)FDATA(&f, 0);

			if (b == 1)
				fp->subs++;
			else if (b == 0 && fp->subs)
				fp->subs--;
		}
		frames_close(&f);
	}
}
