/*
 * pub.c — the fake pod's publisher, as vLLM's (docs/events.md "The publisher"): per data-parallel
 * rank, the PUB socket sending [topic, seq8, payload] (seq8 + a 16-byte publisher id with
 * --publisher-id), the ring of the last --keep batches and the replay ROUTER that answers
 * from it, --heartbeat's empty batches, and, with --wait-subscribers, the XPUB subscription
 * count (all ranks together).
 */
#include "fakepod.h"

#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "kvidx.h"

/*
 * The id of rank rk's current process: with --publisher-id random a fresh random one per
 * process; with HEX, HEX for the first and HEX + n (its last 8 bytes, big-endian) after the
 * n-th restart, so tests know every id.
 */
static void new_id(struct fp *fp, struct rank *rk)
{
	uint64_t lo = 0;

	if (fp->o.pub_id_random) {
		if (getrandom(rk->id, sizeof rk->id, 0) == (ssize_t)sizeof rk->id)
			return;
		/* No entropy (cannot happen after boot): still a new id per process. */
		kvw_seq_put(rk->id, (uint64_t)getpid() << 32 | rk->id_gen);
		kvw_seq_put(rk->id + 8, kvidx_now_ns());
		return;
	}
	memcpy(rk->id, fp->o.pub_id, sizeof rk->id);
	for (int i = 8; i < 16; i++)
		lo = lo << 8 | rk->id[i];
	kvw_seq_put(rk->id + 8, lo + rk->id_gen);
}

/* The sequence frame of seq: 8 bytes, or 24 with --publisher-id. Returns its length. */
static size_t seq_frame(const struct fp *fp, const struct rank *rk, uint64_t seq,
			unsigned char out[24])
{
	kvw_seq_put(out, seq);
	if (!fp->o.pub_id_set)
		return 8;
	memcpy(out + 8, rk->id, 16);
	return 24;
}

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
	unsigned char sf[24];
	size_t sflen;
	uint64_t seq = rk->seq++;

	/* A restart (sched.c) numbers from 0 again: a new process, a new id. */
	if (fp->o.pub_id_set && (!rk->published || seq == 0)) {
		rk->id_gen += rk->published;
		new_id(fp, rk);
	}
	rk->published = true;
	rk->last_pub_ns = kvidx_now_ns();
	sflen = seq_frame(fp, rk, seq, sf);
	if (rk->lose_left) {
		rk->lose_left--;
		fp->st.lost++;
	} else {
		const void *d[3] = { fp->topic, sf, a->data };
		size_t l[3] = { fp->topiclen, sflen, a->len };

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
			unsigned char sf[24];

			if (k->seq < start)
				continue;
			/* The ring holds the current process's batches only (a restart empties it). */
			l[pre] = seq_frame(fp, rk, k->seq, sf);
			d[pre] = sf;
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

uint64_t pub_heartbeats(struct fp *fp, uint64_t now)
{
	uint64_t iv = fp->o.heartbeat_ms * NS_PER_MS, next = UINT64_MAX;

	if (!iv)
		return next;
	for (uint32_t r = 0; r < fp->nranks; r++) {
		struct rank *rk = &fp->rk[r];

		if (!rk->last_pub_ns)
			rk->last_pub_ns = now; /* idle from the start on */
		if (now - rk->last_pub_ns >= iv) {
			struct timespec ts;
			struct action a = { .kind = ACT_PUBLISH, .rank = r };
			const void *buf;
			size_t len;

			clock_gettime(CLOCK_REALTIME, &ts);
			kvw_enc_begin(&fp->enc, &fp->encopts, (double)ts.tv_sec + ts.tv_nsec / 1e9, 0,
				      fp->o.has_rank || fp->nranks > 1,
				      fp->nranks > 1 ? (int64_t)r : fp->o.rank);
			if (kvw_enc_end(&fp->enc, &buf, &len) == 0) {
				a.data = tc_xrealloc(NULL, len);
				memcpy(a.data, buf, len);
				a.len = len;
				publish(fp, &a);
			}
			rk->last_pub_ns = now;
		}
		if (rk->last_pub_ns + iv < next)
			next = rk->last_pub_ns + iv;
	}
	return next;
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
