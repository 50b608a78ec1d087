/*
 * kvidx-fakepod — a vLLM-compatible KV-cache event publisher, for tests, demos and benchmarks.
 *
 * It plays one vLLM pod on the wire (reference/kv-events.md): a PUB socket sending
 * [topic, seq8, payload] batches of BlockStored / BlockRemoved / AllBlocksCleared events in
 * either msgpack encoding, and optionally vLLM's replay ROUTER. What it publishes comes from
 * one or more sources:
 *
 *   - a workload: prompts built from a pool of shared prefixes, run through an LRU block
 *     cache, emitting BlockStored for blocks not yet cached and BlockRemoved for evictions,
 *     paced at a given event rate;
 *   - a script: one command per line, for tests that need exact events, sequence gaps,
 *     restarts, delayed delivery and malformed payloads;
 *   - a serve socket: a ROUTER where a router worker "sends" prompts (serve.h); the pod
 *     replies with the number of cached tokens after a simulated prefill and publishes the new
 *     blocks after a simulated route-to-event delay, with injectable failures, cancellations
 *     and lost events (the validation cases of seeds/prefix-cache-speculative-index-ttl.md).
 *
 * Block hashes are the engine's, not kvidx request keys, as with a real vLLM: block i of a
 * prompt is XXH64(LE64(parent) || LE32(token)..., seed ENGINE_SEED) over its block_size
 * tokens, parent being block i-1's engine hash or 0 for block 0 (published as a nil
 * parent_block_hash). Deterministic, so tests can predict them, and never equal to the
 * request keys kvidx_key_chain() computes, so consumers must map engine hashes to keys.
 *
 * Everything runs in one thread around one zmq_poll() loop. Publications, replies and
 * script sequence changes are actions in a min-heap ordered by (due time, creation order),
 * so delays of any size keep a defined order; sequence numbers are assigned when a batch is
 * actually published. Time is CLOCK_MONOTONIC; the batch timestamp is the wall clock, as
 * vLLM's. Signals arrive through a signalfd, so a signal never races with the poll.
 *
 * Exit status: 0 on a normal end or SIGTERM/SIGINT, 1 on a setup or runtime error (bind
 * failure, out of memory), 2 on bad usage or a bad script line.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>
#include <zmq.h>

#include "cli.h"
#include "parse.h"
#include "rng.h"
#include "serve.h"
#include "wire.h"

#define PROG "kvidx-fakepod"

#define ENGINE_SEED     0x66616b65706f6431ull /* "fakepod1": engine hashes, not request keys */
#define VOCAB           50000u                /* workload tokens are drawn from [0, VOCAB) */
#define NAME_MAX_LEN    255                   /* pod and model names, in bytes */
#define MAX_INFLIGHT    65536                 /* serve requests being "prefilled" at once */
#define SCRIPT_LINE_MAX (64u << 20)           /* bytes in one script line */
#define PUB_HWM         100000                /* vLLM's default PUB high-water mark */
#define MAX_MS          86400000ull           /* one day: bound of every *-ms value */
#define NS_PER_MS       1000000ull
#define NS_PER_S        1000000000ull
#define NIL32           UINT32_MAX

/* ---- small helpers -------------------------------------------------------------------------- */

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * NS_PER_S + (uint64_t)ts.tv_nsec;
}

static double wall_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Grows *v (elements of size sz) to hold at least need elements. */
static void grow(void *v, size_t *cap, size_t need, size_t sz)
{
	size_t c = *cap ? *cap : 16;

	if (need <= *cap)
		return;
	while (c < need)
		c *= 2;
	*(void **)v = tc_xrealloc(*(void **)v, c * sz);
	*cap = c;
}

static double rng_unit(uint64_t *s)
{
	return (double)(tc_rng_next(s) >> 11) * 0x1.0p-53;
}

/* Parses a whole string as a finite decimal number in [lo, hi]. */
static bool parse_num(const char *s, double lo, double hi, double *out)
{
	char *end;
	double v;

	if (!*s || *s == ' ' || *s == '\t')
		return false;
	errno = 0;
	v = strtod(s, &end);
	if (*end || errno || !isfinite(v) || v < lo || v > hi)
		return false;
	*out = v;
	return true;
}

/* One warning per second at most, for things a peer can make happen at any rate. */
struct ratelimit {
	uint64_t last_ns;
	uint64_t suppressed;
};

__attribute__((format(printf, 2, 3)))
static void warn_rl(struct ratelimit *rl, const char *fmt, ...)
{
	uint64_t now = mono_ns();
	va_list ap;

	if (rl->last_ns && now - rl->last_ns < NS_PER_S) {
		rl->suppressed++;
		return;
	}
	rl->last_ns = now;
	fputs(PROG ": ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	if (rl->suppressed)
		fprintf(stderr, " (%" PRIu64 " similar messages suppressed)", rl->suppressed);
	fputc('\n', stderr);
	rl->suppressed = 0;
}

/* ---- engine block hashes ------------------------------------------------------------------ */

static uint64_t engine_hash(uint64_t parent, const uint32_t *tokens, size_t n)
{
	XXH64_state_t st;
	unsigned char buf[1024];
	size_t k = 0;

	XXH64_reset(&st, ENGINE_SEED);
	for (int i = 0; i < 8; i++)
		buf[i] = (unsigned char)(parent >> (8 * i));
	XXH64_update(&st, buf, 8);
	for (size_t i = 0; i < n; i++) {
		buf[k++] = (unsigned char)tokens[i];
		buf[k++] = (unsigned char)(tokens[i] >> 8);
		buf[k++] = (unsigned char)(tokens[i] >> 16);
		buf[k++] = (unsigned char)(tokens[i] >> 24);
		if (k == sizeof buf) {
			XXH64_update(&st, buf, k);
			k = 0;
		}
	}
	if (k)
		XXH64_update(&st, buf, k);
	return XXH64_digest(&st);
}

/* Engine hashes of the nblocks full blocks of tokens, chained from parent (0: none). */
static void engine_chain(uint64_t parent, const uint32_t *tokens, size_t nblocks, uint32_t bs,
			 uint64_t *out)
{
	for (size_t i = 0; i < nblocks; i++)
		parent = out[i] = engine_hash(parent, tokens + i * bs, bs);
}

/* ---- LRU block cache ---------------------------------------------------------------------- */

/*
 * The pod's prefix cache: at most cap engine hashes, least recently used evicted first. An
 * open-addressing table (linear probing, backward-shift deletion) maps a hash to its node;
 * nodes form a doubly linked list, most recent at head.
 */
struct cache_node {
	uint64_t hash;
	uint32_t prev, next;
};

struct cache {
	uint32_t cap, size;
	struct cache_node *nodes;
	uint32_t head, tail, free_list;
	uint32_t *slots; /* node index + 1; 0 = empty */
	size_t mask;
};

static size_t cache_home(const struct cache *c, uint64_t h)
{
	return (size_t)(h ^ (h >> 29)) & c->mask;
}

static void cache_clear(struct cache *c)
{
	memset(c->slots, 0, (c->mask + 1) * sizeof(*c->slots));
	c->size = 0;
	c->head = c->tail = NIL32;
	for (uint32_t i = 0; i < c->cap; i++)
		c->nodes[i].next = i + 1 < c->cap ? i + 1 : NIL32;
	c->free_list = 0;
}

static void cache_init(struct cache *c, uint32_t cap)
{
	size_t n = 2;

	while (n < 2 * (size_t)cap)
		n *= 2;
	c->cap = cap;
	c->nodes = tc_xrealloc(NULL, cap * sizeof(*c->nodes));
	c->slots = tc_xrealloc(NULL, n * sizeof(*c->slots));
	c->mask = n - 1;
	cache_clear(c);
}

static void cache_free(struct cache *c)
{
	free(c->nodes);
	free(c->slots);
}

/* The slot holding hash h, or the empty slot where it would go. */
static size_t cache_slot(const struct cache *c, uint64_t h)
{
	size_t i = cache_home(c, h);

	while (c->slots[i] && c->nodes[c->slots[i] - 1].hash != h)
		i = (i + 1) & c->mask;
	return i;
}

static uint32_t cache_find(const struct cache *c, uint64_t h)
{
	uint32_t s = c->slots[cache_slot(c, h)];

	return s ? s - 1 : NIL32;
}

static void cache_unlink(struct cache *c, uint32_t i)
{
	struct cache_node *n = &c->nodes[i];

	if (n->prev != NIL32)
		c->nodes[n->prev].next = n->next;
	else
		c->head = n->next;
	if (n->next != NIL32)
		c->nodes[n->next].prev = n->prev;
	else
		c->tail = n->prev;
}

static void cache_push_head(struct cache *c, uint32_t i)
{
	c->nodes[i].prev = NIL32;
	c->nodes[i].next = c->head;
	if (c->head != NIL32)
		c->nodes[c->head].prev = i;
	c->head = i;
	if (c->tail == NIL32)
		c->tail = i;
}

static void cache_touch(struct cache *c, uint32_t i)
{
	if (c->head == i)
		return;
	cache_unlink(c, i);
	cache_push_head(c, i);
}

/* Inserts h (not present) as most recent. The cache must not be full. */
static void cache_insert(struct cache *c, uint64_t h)
{
	uint32_t i = c->free_list;

	c->free_list = c->nodes[i].next;
	c->nodes[i].hash = h;
	c->slots[cache_slot(c, h)] = i + 1;
	cache_push_head(c, i);
	c->size++;
}

/* Removes the least recently used block and returns its hash. The cache must not be empty. */
static uint64_t cache_evict(struct cache *c)
{
	uint32_t i = c->tail;
	uint64_t h = c->nodes[i].hash;
	size_t hole = cache_slot(c, h), j = hole;

	cache_unlink(c, i);
	c->nodes[i].next = c->free_list;
	c->free_list = i;
	c->size--;
	/* Backward-shift deletion: pull later members of the probe run into the hole. */
	for (;;) {
		size_t k;

		j = (j + 1) & c->mask;
		if (!c->slots[j])
			break;
		k = cache_home(c, c->nodes[c->slots[j] - 1].hash);
		if (hole <= j ? (hole < k && k <= j) : (hole < k || k <= j))
			continue;
		c->slots[hole] = c->slots[j];
		hole = j;
	}
	c->slots[hole] = 0;
	return h;
}

/* ---- pending events ------------------------------------------------------------------------- */

/* An event waiting for its batch; owns its arrays. */
struct pev {
	enum kvw_type type;
	uint64_t *hashes;
	size_t nhashes;
	bool has_parent;
	uint64_t parent;
	uint32_t *tokens;
	size_t ntokens;
};

struct evlist {
	struct pev *v;
	size_t n, cap;
};

static struct pev *evlist_push(struct evlist *l, enum kvw_type type, const uint64_t *hashes,
			       size_t nhashes)
{
	struct pev *e;

	grow(&l->v, &l->cap, l->n + 1, sizeof(*l->v));
	e = &l->v[l->n++];
	memset(e, 0, sizeof(*e));
	e->type = type;
	e->nhashes = nhashes;
	if (nhashes) {
		e->hashes = tc_xrealloc(NULL, nhashes * sizeof(*hashes));
		memcpy(e->hashes, hashes, nhashes * sizeof(*hashes));
	}
	return e;
}

static void evlist_push_stored(struct evlist *l, const uint64_t *hashes, size_t nhashes,
			       bool has_parent, uint64_t parent, const uint32_t *tokens,
			       size_t ntokens)
{
	struct pev *e = evlist_push(l, KVW_BLOCK_STORED, hashes, nhashes);

	e->has_parent = has_parent;
	e->parent = parent;
	e->ntokens = ntokens;
	e->tokens = tc_xrealloc(NULL, ntokens * sizeof(*tokens));
	memcpy(e->tokens, tokens, ntokens * sizeof(*tokens));
}

/* Frees the first k events and moves the rest to the front. */
static void evlist_drop(struct evlist *l, size_t k)
{
	if (!k)
		return;
	for (size_t i = 0; i < k; i++) {
		free(l->v[i].hashes);
		free(l->v[i].tokens);
	}
	memmove(l->v, l->v + k, (l->n - k) * sizeof(*l->v));
	l->n -= k;
}

/* ---- state -------------------------------------------------------------------------------- */

struct opts {
	const char *pub_ep, *replay_ep, *serve_ep, *script;
	const char *pod, *model, *medium;
	enum kvw_form form;
	enum kvw_hash_form hash_form;
	uint32_t block_size;
	bool has_rank;
	int64_t rank;
	uint64_t keep;
	bool old_framing;
	uint64_t wait_subs, linger_ms;
	double duration;
	bool workload;
	uint64_t prefixes, prefix_blocks, suffix_blocks, seed, batch, cache_blocks, count;
	double rate;
	uint64_t prefill_ms, jitter_ms, event_delay_ms;
	double fail_rate, cancel_rate, drop_rate;
};

enum act_kind {
	ACT_PUBLISH,    /* send payload as the next batch (raw when nevents is 0 and raw) */
	ACT_GAP,        /* skip n sequence numbers */
	ACT_LOSE,       /* keep the next n batches for replay but do not send them */
	ACT_RESTART,    /* sequence back to 0, nothing kept, cache emptied */
	ACT_SERVE_DONE, /* a served request's prefill is over: reply, maybe store blocks */
};

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

struct action {
	uint64_t due, order;
	enum act_kind kind;
	uint64_t n;
	void *data; /* ACT_PUBLISH: the payload (malloc); ACT_SERVE_DONE: struct inflight */
	size_t len;
	bool raw;
	size_t nevents, nstored, nremoved, ncleared;
};

struct kept {
	uint64_t seq;
	void *data;
	size_t len;
};

struct stats {
	uint64_t events, batches, stored, removed, cleared, raw, lost, discarded;
	uint64_t requests, ok, failed, cancelled, dropped, bad_requests, replays, restarts;
};

struct fp {
	struct opts o;
	char topic[2 * NAME_MAX_LEN + 8];
	size_t topiclen;
	void *zctx, *pub, *replay, *serve;
	bool xpub;
	int sigfd;
	struct kvw_enc enc;
	struct kvw_enc_opts encopts;

	uint64_t seq, lose_left;
	struct kept *ring;
	size_t ring_head, ring_n;

	struct action *heap;
	size_t nheap, heap_cap;
	uint64_t order;

	struct cache cache;
	struct evlist pending; /* script or workload events not yet in a batch */
	struct evlist tmp;     /* one served request's events */

	bool started;
	uint64_t subs, start_ns, end_ns;
	bool stopping, lingering;
	uint64_t linger_until;
	int exit_code;

	/* script */
	bool script_on, script_eof, script_done;
	int script_fd;
	char *sbuf;
	size_t slen, scap, sdone; /* sdone: bytes of sbuf already consumed */
	uint64_t sline, sleep_until, delay_ns;
	uint32_t *toks;
	size_t toks_cap;
	uint64_t *hbuf;
	size_t hbuf_cap;
	bool stdout_failed;

	/* workload */
	bool wl_on, wl_done;
	uint64_t wl_rng, wl_events, wl_next;

	/* serve */
	uint64_t srv_rng;
	size_t ninflight;
	struct kvs_request rq;
	msgpack_sbuffer reply;

	struct ratelimit rl_replay, rl_serve;
	struct stats st;
};

/* ---- the action heap ------------------------------------------------------------------------ */

static bool act_before(const struct action *a, const struct action *b)
{
	return a->due != b->due ? a->due < b->due : a->order < b->order;
}

static void heap_sift_down(struct fp *fp, size_t i)
{
	for (;;) {
		size_t l = 2 * i + 1, m = i;
		struct action t;

		if (l < fp->nheap && act_before(&fp->heap[l], &fp->heap[m]))
			m = l;
		if (l + 1 < fp->nheap && act_before(&fp->heap[l + 1], &fp->heap[m]))
			m = l + 1;
		if (m == i)
			return;
		t = fp->heap[i];
		fp->heap[i] = fp->heap[m];
		fp->heap[m] = t;
		i = m;
	}
}

static void heap_push(struct fp *fp, const struct action *a)
{
	size_t i;

	grow(&fp->heap, &fp->heap_cap, fp->nheap + 1, sizeof(*fp->heap));
	i = fp->nheap++;
	fp->heap[i] = *a;
	while (i && act_before(&fp->heap[i], &fp->heap[(i - 1) / 2])) {
		struct action t = fp->heap[i];

		fp->heap[i] = fp->heap[(i - 1) / 2];
		fp->heap[(i - 1) / 2] = t;
		i = (i - 1) / 2;
	}
}

static struct action heap_pop(struct fp *fp)
{
	struct action a = fp->heap[0];

	fp->heap[0] = fp->heap[--fp->nheap];
	heap_sift_down(fp, 0);
	return a;
}

/* ---- publishing ------------------------------------------------------------------------------ */

/* Sends n frames as one message; ROUTER and PUB sockets here never block. */
static void send_frames(void *sock, int n, const void *const *data, const size_t *len)
{
	for (int i = 0; i < n; i++)
		if (zmq_send(sock, data[i], len[i], ZMQ_DONTWAIT | (i + 1 < n ? ZMQ_SNDMORE : 0)) < 0)
			return; /* a vanished ROUTER peer or a full PUB: the message is dropped */
}

static void ring_clear(struct fp *fp)
{
	for (size_t i = 0; i < fp->ring_n; i++)
		free(fp->ring[(fp->ring_head + i) % fp->o.keep].data);
	fp->ring_head = fp->ring_n = 0;
}

/* Keeps a published batch for replay, taking ownership of data. */
static void ring_add(struct fp *fp, uint64_t seq, void *data, size_t len)
{
	struct kept *k;

	if (!fp->o.keep) {
		free(data);
		return;
	}
	if (fp->ring_n == fp->o.keep) {
		free(fp->ring[fp->ring_head].data);
		fp->ring_head = (fp->ring_head + 1) % fp->o.keep;
		fp->ring_n--;
	}
	k = &fp->ring[(fp->ring_head + fp->ring_n++) % fp->o.keep];
	k->seq = seq;
	k->data = data;
	k->len = len;
}

/* Publishes a batch now: the next sequence number, the PUB socket (unless lost), the ring. */
static void publish(struct fp *fp, struct action *a)
{
	unsigned char seq8[8];
	uint64_t seq = fp->seq++;

	kvw_seq_put(seq8, seq);
	if (fp->lose_left) {
		fp->lose_left--;
		fp->st.lost++;
	} else {
		const void *d[3] = { fp->topic, seq8, a->data };
		size_t l[3] = { fp->topiclen, 8, a->len };

		send_frames(fp->pub, 3, d, l);
	}
	fp->st.batches++;
	fp->st.events += a->nevents;
	fp->st.stored += a->nstored;
	fp->st.removed += a->nremoved;
	fp->st.cleared += a->ncleared;
	fp->st.raw += a->raw;
	ring_add(fp, seq, a->data, a->len);
	a->data = NULL;
}

/* Encodes events v[0, n) into a publish action (payload malloc'd). */
static void encode_batch(struct fp *fp, const struct pev *v, size_t n, struct action *a)
{
	const void *buf;
	size_t len;
	int r;

	memset(a, 0, sizeof(*a));
	a->kind = ACT_PUBLISH;
	kvw_enc_begin(&fp->enc, &fp->encopts, wall_s(), n, fp->o.has_rank, fp->o.rank);
	for (size_t i = 0; i < n; i++) {
		struct kvw_event ev;

		memset(&ev, 0, sizeof ev);
		ev.type = v[i].type;
		ev.hashes = v[i].hashes;
		ev.nhashes = v[i].nhashes;
		ev.has_parent = v[i].has_parent;
		ev.parent = v[i].parent;
		ev.tokens = v[i].tokens;
		ev.ntokens = v[i].ntokens;
		ev.block_size = fp->o.block_size;
		snprintf(ev.medium, sizeof ev.medium, "%s", fp->o.medium);
		kvw_enc_event(&fp->enc, &ev);
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

static void serve_reply(struct fp *fp, struct inflight *q);
static void free_inflight(struct fp *fp, struct inflight *q);

/*
 * Empties the pod as a restart does: sequence back to 0, nothing kept for replay, cache
 * empty. Actions created before order_limit that are still queued belonged to the old
 * process: their publications are discarded and their requests answered "failed".
 */
static void pod_restart(struct fp *fp, uint64_t order_limit)
{
	size_t i, k = 0;

	fp->seq = 0;
	fp->lose_left = 0;
	ring_clear(fp);
	cache_clear(&fp->cache);
	for (i = 0; i < fp->nheap; i++) {
		struct action *a = &fp->heap[i];

		if (a->order >= order_limit) {
			fp->heap[k++] = *a;
			continue;
		}
		if (a->kind == ACT_PUBLISH) {
			free(a->data);
			fp->st.discarded++;
		} else if (a->kind == ACT_SERVE_DONE) {
			struct inflight *q = a->data;

			q->status = KVS_FAILED;
			serve_reply(fp, q);
			free_inflight(fp, q);
		}
	}
	fp->nheap = k;
	for (i = k / 2; i-- > 0;)
		heap_sift_down(fp, i);
	fp->st.restarts++;
}

static void serve_complete(struct fp *fp, struct inflight *q, uint64_t now);

static void run_action(struct fp *fp, struct action *a, uint64_t now)
{
	switch (a->kind) {
	case ACT_PUBLISH:
		publish(fp, a);
		break;
	case ACT_GAP:
		fp->seq += a->n;
		break;
	case ACT_LOSE:
		fp->lose_left += a->n;
		break;
	case ACT_RESTART:
		pod_restart(fp, a->order);
		break;
	case ACT_SERVE_DONE:
		serve_complete(fp, a->data, now);
		break;
	}
}

/* Runs a now, if nothing queued must go first, or queues it for a->due. */
static void schedule(struct fp *fp, struct action *a, uint64_t now)
{
	a->order = fp->order++;
	if (a->due <= now && (fp->nheap == 0 || fp->heap[0].due > now))
		run_action(fp, a, now);
	else
		heap_push(fp, a);
}

static void run_due(struct fp *fp, uint64_t now)
{
	while (fp->nheap && fp->heap[0].due <= now) {
		struct action a = heap_pop(fp);

		run_action(fp, &a, now);
	}
}

/* Puts the first n pending events into a batch published after the current delay. */
static void flush_pending(struct fp *fp, size_t n, uint64_t now)
{
	struct action a;

	if (!n)
		return;
	encode_batch(fp, fp->pending.v, n, &a);
	evlist_drop(&fp->pending, n);
	a.due = now + fp->delay_ns;
	schedule(fp, &a, now);
}

/*
 * Admits a prompt's full blocks to the cache, as an engine does after prefill: blocks
 * already cached are reused, missing ones stored, and least recently used blocks of other
 * prompts evicted to make room. Appends a BlockRemoved for the evictions and a BlockStored
 * for the stored blocks (from the first uncached one on) to out. Blocks are touched last to
 * first, so a prompt's tail is evicted before its head, as vLLM's free-block queue does.
 * Only the first cap blocks of a prompt longer than the cache are kept.
 */
static void cache_admit(struct fp *fp, const uint64_t *h, const uint32_t *tokens,
			size_t nblocks, struct evlist *out)
{
	struct cache *c = &fp->cache;
	size_t n = nblocks < c->cap ? nblocks : c->cap, matched = 0, missing = 0, i;
	uint32_t bs = fp->o.block_size;

	while (matched < n && cache_find(c, h[matched]) != NIL32)
		matched++;
	for (i = n; i-- > matched;) {
		uint32_t idx = cache_find(c, h[i]);

		if (idx != NIL32)
			cache_touch(c, idx);
		else
			missing++;
	}
	for (i = matched; i-- > 0;)
		cache_touch(c, cache_find(c, h[i]));
	if (!missing)
		return;
	if (c->size + missing > c->cap) {
		size_t need = c->size + missing - c->cap;
		struct pev *e = evlist_push(out, KVW_BLOCK_REMOVED, NULL, 0);

		/* The prompt's own blocks are the most recent, so none of them is evicted. */
		e->hashes = tc_xrealloc(NULL, need * sizeof(*e->hashes));
		for (e->nhashes = 0; e->nhashes < need; e->nhashes++)
			e->hashes[e->nhashes] = cache_evict(c);
	}
	for (i = n; i-- > matched;) {
		uint32_t idx = cache_find(c, h[i]);

		if (idx == NIL32)
			cache_insert(c, h[i]);
		else
			cache_touch(c, idx);
	}
	for (i = matched; i-- > 0;)
		cache_touch(c, cache_find(c, h[i]));
	evlist_push_stored(out, h + matched, n - matched, matched > 0,
			   matched ? h[matched - 1] : 0, tokens + matched * bs,
			   (n - matched) * bs);
}

/* ---- serve ---------------------------------------------------------------------------------- */

static void free_inflight(struct fp *fp, struct inflight *q)
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

/* Prefill is over: a successful request stores its blocks, and the client gets its reply. */
static void serve_complete(struct fp *fp, struct inflight *q, uint64_t now)
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
	size_t matched = 0, nblocks;
	uint32_t bs = fp->o.block_size;
	uint64_t jitter;
	double u;
	int r;

	fp->st.requests++;
	r = kvs_decode_request(msg, len, &fp->rq, err, sizeof err);
	if (r) {
		fp->st.bad_requests++;
		warn_rl(&fp->rl_serve, "--serve: ignoring a bad request: %s", err);
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
			warn_rl(&fp->rl_serve, "--serve: more than %d requests in flight: failing "
				"request %" PRIu64, MAX_INFLIGHT, q->corr_id);
		else
			warn_rl(&fp->rl_serve, "--serve: request %" PRIu64 " for model '%s', not "
				"'%s': failed", q->corr_id, fp->rq.model, fp->o.model);
		q->status = KVS_FAILED;
		serve_reply(fp, q);
		free_inflight(fp, q);
		return;
	}

	/* The scheduler's lookup: leading cached blocks, touched so they stay. */
	nblocks = fp->rq.ntokens / bs;
	q->nblocks = nblocks;
	q->hashes = tc_xrealloc(NULL, nblocks * sizeof(*q->hashes));
	engine_chain(0, fp->rq.tokens, nblocks, bs, q->hashes);
	while (matched < nblocks && cache_find(&fp->cache, q->hashes[matched]) != NIL32)
		matched++;
	for (size_t i = matched; i-- > 0;)
		cache_touch(&fp->cache, cache_find(&fp->cache, q->hashes[i]));
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

/* ---- ZMQ receive helpers ------------------------------------------------------------------- */

#define MAXFRAMES 4

struct frames {
	zmq_msg_t m[MAXFRAMES];
	int n;
	bool too_many;
};

/* Receives one whole message without blocking; false when none is waiting. */
static bool recv_frames(void *sock, struct frames *f)
{
	int more = 1;
	size_t sz = sizeof more;

	f->n = 0;
	f->too_many = false;
	while (more) {
		zmq_msg_t tmp, *m = f->n < MAXFRAMES ? &f->m[f->n] : &tmp;

		zmq_msg_init(m);
		if (zmq_msg_recv(m, sock, ZMQ_DONTWAIT) < 0) {
			zmq_msg_close(m);
			if (f->n == 0)
				return false;
			break; /* cannot happen: ZMQ delivers messages whole */
		}
		if (zmq_getsockopt(sock, ZMQ_RCVMORE, &more, &sz))
			more = 0;
		if (m == &tmp) {
			zmq_msg_close(m);
			f->too_many = true;
		} else {
			f->n++;
		}
	}
	return true;
}

static void frames_close(struct frames *f)
{
	for (int i = 0; i < f->n; i++)
		zmq_msg_close(&f->m[i]);
}

#define FDATA(f, i) ((const void *)zmq_msg_data(&(f)->m[i]))
#define FSIZE(f, i) zmq_msg_size(&(f)->m[i])

/*
 * Splits a ROUTER message [identity, "", body] or [identity, body] into its parts; false if
 * it has another shape.
 */
static bool router_envelope(struct frames *f, bool *delim)
{
	if (f->too_many || f->n < 2 || f->n > 3 || FSIZE(f, 0) == 0 || FSIZE(f, 0) > 255)
		return false;
	if (f->n == 3 && FSIZE(f, 1) != 0)
		return false;
	*delim = f->n == 3;
	return true;
}

/* Answers replay requests: every kept batch with seq >= start, then the end marker. */
static void handle_replay(struct fp *fp)
{
	struct frames f;
	int budget = 64;

	while (budget-- && recv_frames(fp->replay, &f)) {
		static const unsigned char end[8] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff };
		const void *d[5];
		size_t l[5];
		uint64_t start;
		bool delim;
		int n = 0, pre;

		if (!router_envelope(&f, &delim) ||
		    !kvw_seq_get(FDATA(&f, f.n - 1), FSIZE(&f, f.n - 1), &start)) {
			warn_rl(&fp->rl_replay, "--replay: ignoring a request of %d%s frames that "
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
		for (size_t i = 0; i < fp->ring_n; i++) {
			const struct kept *k = &fp->ring[(fp->ring_head + i) % fp->o.keep];
			unsigned char seq8[8];

			if (k->seq < start)
				continue;
			kvw_seq_put(seq8, k->seq);
			d[pre] = seq8;
			l[pre] = 8;
			d[pre + 1] = k->data;
			l[pre + 1] = k->len;
			send_frames(fp->replay, pre + 2, d, l);
		}
		d[pre] = end;
		l[pre] = 8;
		d[pre + 1] = "";
		l[pre + 1] = 0;
		send_frames(fp->replay, pre + 2, d, l);
		fp->st.replays++;
		frames_close(&f);
	}
}

static void handle_serve(struct fp *fp, uint64_t now)
{
	struct frames f;
	int budget = 256;

	while (budget-- && recv_frames(fp->serve, &f)) {
		bool delim;

		if (!router_envelope(&f, &delim)) {
			fp->st.requests++;
			fp->st.bad_requests++;
			warn_rl(&fp->rl_serve, "--serve: ignoring a message of %d%s frames that is "
				"not [\"\", request] or [request]", f.n, f.too_many ? "+" : "");
		} else {
			serve_request(fp, FDATA(&f, 0), FSIZE(&f, 0), delim, FDATA(&f, f.n - 1),
				      FSIZE(&f, f.n - 1), now);
		}
		frames_close(&f);
	}
}

/* XPUB (--wait-subscribers): counts subscriptions, so that the run can wait for them. */
static void handle_xpub(struct fp *fp)
{
	struct frames f;

	while (recv_frames(fp->pub, &f)) {
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

/* ---- workload ------------------------------------------------------------------------------- */

/* Builds one prompt (a shared prefix plus a fresh suffix) and admits it to the cache. */
static void workload_prompt(struct fp *fp)
{
	const struct opts *o = &fp->o;
	size_t nblocks = o->prefix_blocks + o->suffix_blocks, ntok = nblocks * o->block_size;
	size_t npre = o->prefix_blocks * o->block_size;
	uint64_t k = tc_rng_next(&fp->wl_rng) % o->prefixes;
	uint64_t ps = o->seed ^ (k + 1) * 0xd1342543de82ef95ull;

	grow(&fp->toks, &fp->toks_cap, ntok, sizeof(*fp->toks));
	grow(&fp->hbuf, &fp->hbuf_cap, nblocks, sizeof(*fp->hbuf));
	for (size_t i = 0; i < npre; i++)
		fp->toks[i] = (uint32_t)(tc_rng_next(&ps) % VOCAB);
	for (size_t i = npre; i < ntok; i++)
		fp->toks[i] = (uint32_t)(tc_rng_next(&fp->wl_rng) % VOCAB);
	engine_chain(0, fp->toks, nblocks, o->block_size, fp->hbuf);
	cache_admit(fp, fp->hbuf, fp->toks, nblocks, &fp->pending);
}

/* Publishes the workload's batches that are due; sets fp->wl_next to the next due time. */
static void workload_step(struct fp *fp, uint64_t now)
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

/* ---- script --------------------------------------------------------------------------------- */

#define SCRIPT_SEPS " \t\r\v\f"

__attribute__((format(printf, 2, 3)))
static int script_error(struct fp *fp, const char *fmt, ...)
{
	va_list ap;

	if (!strcmp(fp->o.script, "-"))
		fprintf(stderr, PROG ": standard input line %" PRIu64 ": ", fp->sline);
	else
		fprintf(stderr, PROG ": %s line %" PRIu64 ": ", fp->o.script, fp->sline);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	fp->exit_code = 2;
	return -1;
}

/* Parses a count argument 1..max for command cmd. */
static int script_count(struct fp *fp, const char *cmd, char **save, uint64_t min,
			uint64_t max, uint64_t *v)
{
	char *arg = strtok_r(NULL, SCRIPT_SEPS, save);

	if (!arg)
		return script_error(fp, "%s: missing argument", cmd);
	if (!tc_parse_dec(arg, max, v) || *v < min)
		return script_error(fp, "%s: bad argument '%s': expected a decimal integer "
				    "%" PRIu64 "..%" PRIu64, cmd, arg, min, max);
	if (strtok_r(NULL, SCRIPT_SEPS, save))
		return script_error(fp, "%s: too many arguments", cmd);
	return 0;
}

static int script_store(struct fp *fp, char **save)
{
	uint32_t bs = fp->o.block_size;
	char *arg = strtok_r(NULL, SCRIPT_SEPS, save), *tsave, *t;
	uint64_t parent = 0, v;
	bool has_parent = false;
	size_t n = 0, nblocks;

	if (!arg)
		return script_error(fp, "store: missing parent (a hash, or - for none)");
	if (strcmp(arg, "-")) {
		if (!tc_parse_hex64(arg, &parent))
			return script_error(fp, "store: bad parent '%s': expected - or 1 to 16 hex "
					    "digits, optionally prefixed by 0x", arg);
		has_parent = true;
	}
	while ((arg = strtok_r(NULL, SCRIPT_SEPS, save))) {
		for (t = strtok_r(arg, ",", &tsave); t; t = strtok_r(NULL, ",", &tsave)) {
			if (!tc_parse_dec(t, UINT32_MAX, &v))
				return script_error(fp, "store: bad token '%s': expected a decimal "
						    "integer 0..%" PRIu32, t, UINT32_MAX);
			if (n == KVW_MAX_TOKENS)
				return script_error(fp, "store: more than %u tokens", KVW_MAX_TOKENS);
			grow(&fp->toks, &fp->toks_cap, n + 1, sizeof(*fp->toks));
			fp->toks[n++] = (uint32_t)v;
		}
	}
	nblocks = n / bs;
	if (!nblocks)
		return script_error(fp, "store: %zu tokens make no full block of %" PRIu32, n, bs);
	grow(&fp->hbuf, &fp->hbuf_cap, nblocks, sizeof(*fp->hbuf));
	engine_chain(parent, fp->toks, nblocks, bs, fp->hbuf);
	evlist_push_stored(&fp->pending, fp->hbuf, nblocks, has_parent, parent, fp->toks,
			   nblocks * bs);
	for (size_t i = 0; i < nblocks; i++)
		if (printf("0x%016llx\n", (unsigned long long)fp->hbuf[i]) < 0)
			break;
	if ((fflush(stdout) || ferror(stdout)) && !fp->stdout_failed) {
		fprintf(stderr, PROG ": writing the store hashes to standard output: %s\n",
			strerror(errno));
		fp->stdout_failed = true;
	}
	return 0;
}

static int script_remove(struct fp *fp, char **save)
{
	char *arg;
	size_t n = 0;

	while ((arg = strtok_r(NULL, SCRIPT_SEPS, save))) {
		if (n == KVW_MAX_HASHES)
			return script_error(fp, "remove: more than %u hashes", KVW_MAX_HASHES);
		grow(&fp->hbuf, &fp->hbuf_cap, n + 1, sizeof(*fp->hbuf));
		if (!tc_parse_hex64(arg, &fp->hbuf[n++]))
			return script_error(fp, "remove: bad hash '%s': expected 1 to 16 hex digits, "
					    "optionally prefixed by 0x", arg);
	}
	if (!n)
		return script_error(fp, "remove: expected at least one hash");
	evlist_push(&fp->pending, KVW_BLOCK_REMOVED, fp->hbuf, n);
	return 0;
}

static int script_raw(struct fp *fp, char **save, uint64_t now)
{
	unsigned char *p = NULL;
	size_t n = 0, cap = 0;
	struct action a;
	char *arg;

	while ((arg = strtok_r(NULL, SCRIPT_SEPS, save))) {
		size_t len = strlen(arg);

		if (len % 2) {
			free(p);
			return script_error(fp, "raw: '%s' has an odd number of hex digits", arg);
		}
		grow(&p, &cap, n + len / 2, 1);
		for (size_t i = 0; i < len; i += 2) {
			int hi = tc_hex_digit(arg[i]), lo = tc_hex_digit(arg[i + 1]);

			if (hi < 0 || lo < 0) {
				free(p);
				return script_error(fp, "raw: bad hex digit in '%s'", arg);
			}
			p[n++] = (unsigned char)(hi << 4 | lo);
		}
	}
	memset(&a, 0, sizeof a);
	a.kind = ACT_PUBLISH;
	a.raw = true;
	a.data = p ? p : tc_xrealloc(NULL, 1);
	a.len = n;
	a.due = now + fp->delay_ns;
	schedule(fp, &a, now);
	return 0;
}

/* Runs one script line (modified in place). Returns 0, or -1 after printing an error. */
static int script_line(struct fp *fp, char *line, uint64_t now)
{
	char *save = NULL, *cmd = strtok_r(line, SCRIPT_SEPS, &save);
	bool store, remove, clear;
	struct action a;
	uint64_t v;

	if (!cmd || cmd[0] == '#')
		return 0;
	store = !strcmp(cmd, "store");
	remove = !strcmp(cmd, "remove");
	clear = !strcmp(cmd, "clear");
	if ((clear || !strcmp(cmd, "flush") || !strcmp(cmd, "restart")) &&
	    strtok_r(NULL, SCRIPT_SEPS, &save))
		return script_error(fp, "%s: no argument expected", cmd);
	if (store || remove || clear) {
		if (store && script_store(fp, &save))
			return -1;
		if (remove && script_remove(fp, &save))
			return -1;
		if (clear) {
			evlist_push(&fp->pending, KVW_ALL_BLOCKS_CLEARED, NULL, 0);
			cache_clear(&fp->cache);
		}
		if (fp->pending.n >= fp->o.batch)
			flush_pending(fp, fp->pending.n, now);
		return 0;
	}
	/* Every other command publishes the pending batch first. */
	flush_pending(fp, fp->pending.n, now);
	memset(&a, 0, sizeof a);
	a.due = now + fp->delay_ns;
	if (!strcmp(cmd, "flush"))
		return 0;
	if (!strcmp(cmd, "restart")) {
		a.kind = ACT_RESTART;
		schedule(fp, &a, now);
		return 0;
	}
	if (!strcmp(cmd, "gap") || !strcmp(cmd, "lose")) {
		if (script_count(fp, cmd, &save, 1, UINT32_MAX, &v))
			return -1;
		a.kind = cmd[0] == 'g' ? ACT_GAP : ACT_LOSE;
		a.n = v;
		schedule(fp, &a, now);
		return 0;
	}
	if (!strcmp(cmd, "delay") || !strcmp(cmd, "sleep")) {
		if (script_count(fp, cmd, &save, 0, MAX_MS, &v))
			return -1;
		if (cmd[0] == 'd')
			fp->delay_ns = v * NS_PER_MS;
		else
			fp->sleep_until = now + v * NS_PER_MS;
		return 0;
	}
	if (!strcmp(cmd, "raw"))
		return script_raw(fp, &save, now);
	return script_error(fp, "unknown command '%s' (expected store, remove, clear, flush, gap, "
			    "lose, restart, delay, sleep or raw)", cmd);
}

/* Runs the buffered script lines until a sleep, an error or the end of the buffer. */
static void script_step(struct fp *fp, uint64_t now)
{
	while (!fp->script_done && now >= fp->sleep_until && fp->exit_code == 0) {
		char *line = fp->sbuf + fp->sdone;
		char *nl = memchr(line, '\n', fp->slen - fp->sdone);
		size_t len = nl ? (size_t)(nl - line) : fp->slen - fp->sdone;

		if (!nl && !fp->script_eof)
			break;
		if (!nl && len == 0) {
			flush_pending(fp, fp->pending.n, now);
			fp->script_done = true;
			break;
		}
		fp->sline++;
		fp->sdone += len + (nl != NULL);
		if (memchr(line, '\0', len)) {
			script_error(fp, "NUL byte");
			break;
		}
		line[len] = '\0'; /* the newline, or the spare byte after a last unterminated line */
		if (script_line(fp, line, now))
			break;
		now = mono_ns(); /* a long line takes time; keep delays honest */
	}
	if (fp->sdone == fp->slen)
		fp->sdone = fp->slen = 0;
}

/* Reads what the script input has (poll said it is readable). */
static void script_read(struct fp *fp)
{
	ssize_t r;

	if (fp->sdone) {
		memmove(fp->sbuf, fp->sbuf + fp->sdone, fp->slen - fp->sdone);
		fp->slen -= fp->sdone;
		fp->sdone = 0;
	}
	if (fp->slen >= SCRIPT_LINE_MAX) {
		fp->sline++;
		script_error(fp, "longer than %u bytes", SCRIPT_LINE_MAX);
		return;
	}
	grow(&fp->sbuf, &fp->scap, fp->slen + 65536 + 1, 1);
	r = read(fp->script_fd, fp->sbuf + fp->slen, fp->scap - fp->slen - 1);
	if (r < 0) {
		if (errno == EINTR || errno == EAGAIN)
			return;
		fprintf(stderr, PROG ": reading the script: %s\n", strerror(errno));
		fp->exit_code = 1;
		return;
	}
	if (r == 0)
		fp->script_eof = true;
	fp->slen += (size_t)r;
}

/* Whether the script wants more input: no complete line is buffered. */
static bool script_wants_input(const struct fp *fp)
{
	return fp->script_on && !fp->script_eof && !fp->script_done &&
	       !memchr(fp->sbuf + fp->sdone, '\n', fp->slen - fp->sdone);
}

/* ---- options -------------------------------------------------------------------------------- */

static void usage(FILE *f)
{
	fputs(
"Usage: " PROG " [OPTION]...\n"
"Plays one vLLM pod on the KV-cache event wire: publishes BlockStored, BlockRemoved and\n"
"AllBlocksCleared batches on a ZMQ PUB socket as [topic, seq8, payload], topic\n"
"kv@<pod>@<model>, from a synthetic workload, a script, and/or prompts served to a router.\n"
"The workload runs when --workload is given or neither --script nor --serve is. The run\n"
"ends once every source is done: the workload after --count events, the script at its\n"
"end; with --serve, or a workload without --count, only --duration or a signal ends it.\n"
"Block hashes are engine hashes (XXH64 with a fakepod seed over the parent engine hash\n"
"and the block's tokens; nil parent for a prompt's first block), never kvidx request keys.\n"
"\n"
"Wire:\n"
"  --pub ENDPOINT         bind the PUB socket here (default tcp://127.0.0.1:5557)\n"
"  --replay ENDPOINT      bind a replay ROUTER here (default none): a request [\"\", seq8]\n"
"                         or [seq8] gets every kept batch with seq >= start as\n"
"                         [\"\", topic, seq8, payload], then [\"\", topic, ff*8, \"\"]\n"
"  --old-replay-framing   replay without the topic frame: [\"\", seq8, payload]\n"
"  --keep N               batches kept for replay (default 10000; 0 keeps none)\n"
"  --pod NAME             pod in the topic (default: host:port of --serve, else of --pub;\n"
"                         a * or 0.0.0.0 host becomes 127.0.0.1)\n"
"  --model M              model in the topic (default fake-model)\n"
"  --encoding array|map   positional arrays (default) or type-tagged maps\n"
"  --hashes int|bytes     hashes as msgpack uint (default) or 8-byte big-endian bin\n"
"  --medium GPU|CPU       medium of the events (default GPU)\n"
"  --block-size N         tokens per block, 1..65536 (default 16)\n"
"  --rank N               data_parallel_rank of every batch (default: omitted, i.e. nil)\n"
"  --wait-subscribers N   start nothing (workload, script, serve) before N subscriptions\n"
"                         have arrived; uses an XPUB socket (default 0: start at once)\n"
"  --duration S           stop the sources after S seconds (default: no limit)\n"
"  --linger-ms MS         after a normal end, keep answering replay for MS before\n"
"                         exiting (default 200); also the sockets' ZMQ_LINGER\n"
"\n"
"Workload:\n"
"  --workload             run the workload (with --serve too; not with --script)\n"
"  --prefixes K           distinct shared prefixes, i.e. system prompts (default 8)\n"
"  --prefix-blocks N      blocks per prefix (default 8)\n"
"  --suffix-blocks N      fresh blocks after the prefix in each prompt (default 2)\n"
"  --seed N               seed of the workload and of serve's random draws (default 1)\n"
"  --rate R               events per second, 0 = as fast as possible (default 1000)\n"
"  --batch N              events per batch, also in script mode (default 1)\n"
"  --cache-blocks C       LRU block cache size; evictions give BlockRemoved (default 1024)\n"
"  --count N              stop the workload after N events (default 0: no limit)\n"
"\n"
"Script:\n"
"  --script FILE          run the commands in FILE, - for standard input\n"
"\n"
"Serve:\n"
"  --serve ENDPOINT       bind a ROUTER for prompts from a router worker (see below)\n"
"  --prefill-ms MS        time from request to reply (default 50)\n"
"  --jitter-ms MS         add a uniform 0..MS to both delays, per request (default 0)\n"
"  --event-delay-ms MS    time from request to its BlockStored batch, at least the\n"
"                         prefill time (default 100)\n"
"  --fail-rate P          probability that prefill fails: reply failed, nothing stored\n"
"  --cancel-rate P        probability of a cancellation: reply cancelled, nothing stored\n"
"  --drop-events P        probability that an ok request's event batch is never published\n"
"                         (no sequence number used: replay cannot recover it)\n"
"\n"
"  -h, --help             print this help and exit\n"
"\n"
"Script commands, one per line (# starts a comment):\n"
"  store PARENT TOKENS    BlockStored for the full blocks of TOKENS (decimal, separated by\n"
"                         commas or spaces), chained from PARENT (hex engine hash, or -\n"
"                         for a first block); prints each block's hash as 0x%016x\n"
"  remove HASH...         BlockRemoved of these hex hashes\n"
"  clear                  AllBlocksCleared (also empties the serve/workload cache)\n"
"  flush                  publish the pending batch now\n"
"  gap N                  skip N sequence numbers (a gap replay cannot fill)\n"
"  lose N                 do not send the next N batches, but keep them for replay\n"
"  restart                a pod restart, as SIGUSR1 below, in script order\n"
"  delay MS               run the publications, gap, lose and restart of the commands\n"
"                         that follow MS later (0 restores); hashes still print at once\n"
"  sleep MS               pause the script for MS\n"
"  raw HEX                publish these bytes as a batch payload, as they are\n"
"store, remove and clear add an event to the pending batch, published once it holds\n"
"--batch events (so each is its own batch by default), on flush, before any other command,\n"
"and at the end of the script. store and remove do not touch the cache.\n"
"\n"
"Serve protocol (msgpack, one frame): the client's DEALER sends [\"\", request] with\n"
"request [corr_id uint64, model str, tokens [uint32...]]; after the prefill time the reply\n"
"[corr_id, cached_tokens, status] comes back as [\"\", reply], status \"ok\", \"failed\" or\n"
"\"cancelled\". cached_tokens counts the leading full blocks cached when the request\n"
"arrived (a fully cached prompt reports one block less, as vLLM recomputes the last\n"
"token). A request for a model other than --model (or \"\") fails at once. The new blocks\n"
"of an ok request form one batch: BlockRemoved for its evictions, then BlockStored.\n"
"\n"
"Signals: SIGTERM and SIGINT exit at once (status 0). SIGUSR1 simulates a pod restart:\n"
"sequence back to 0, cache and replay buffer emptied, queued batches dropped, requests in\n"
"flight answered failed; nothing special is published.\n"
"A summary line is printed on standard error at exit.\n"
"Exit status: 0 on success, 1 on a setup or runtime error, 2 on bad usage or script line.\n",
	      f);
}

static uint64_t opt_int(const char *name, const char *arg, uint64_t min, uint64_t max)
{
	uint64_t v;

	if (!tc_parse_dec(arg, max, &v) || v < min)
		tc_usage_error("bad --%s '%s': expected a decimal integer %" PRIu64 "..%" PRIu64,
			       name, arg, min, max);
	return v;
}

static double opt_num(const char *name, const char *arg, double lo, double hi)
{
	double v;

	if (!parse_num(arg, lo, hi, &v))
		tc_usage_error("bad --%s '%s': expected a number in [%g, %g]", name, arg, lo, hi);
	return v;
}

static void check_name(const char *what, const char *s)
{
	if (!*s)
		tc_usage_error("bad %s '': must not be empty", what);
	if (strlen(s) > NAME_MAX_LEN)
		tc_usage_error("bad %s: %zu bytes, limit %d", what, strlen(s), NAME_MAX_LEN);
	if (strchr(s, '@'))
		tc_usage_error("bad %s '%s': must not contain '@' (the topic is kv@<pod>@<model>)",
			       what, s);
}

/*
 * The pod name an endpoint stands for: what follows "://", with a wildcard host localised.
 * False if it does not fit.
 */
static bool derive_pod(const char *ep, char *out, size_t outlen)
{
	const char *p = strstr(ep, "://");
	int n;

	p = p ? p + 3 : ep;
	if (!strncmp(p, "*:", 2))
		n = snprintf(out, outlen, "127.0.0.1%s", p + 1);
	else if (!strncmp(p, "0.0.0.0:", 8))
		n = snprintf(out, outlen, "127.0.0.1%s", p + 7);
	else
		n = snprintf(out, outlen, "%s", p);
	return n >= 0 && (size_t)n < outlen;
}

static void parse_args(int argc, char **argv, struct opts *o)
{
	enum {
		O_PUB = 256, O_REPLAY, O_OLD, O_KEEP, O_POD, O_MODEL, O_ENCODING, O_HASHES,
		O_MEDIUM, O_BS, O_RANK, O_WAIT, O_DURATION, O_LINGER, O_WORKLOAD, O_PREFIXES,
		O_PBLOCKS, O_SBLOCKS, O_SEED, O_RATE, O_BATCH, O_CACHE, O_COUNT, O_SCRIPT,
		O_SERVE, O_PREFILL, O_JITTER, O_EVDELAY, O_FAIL, O_CANCEL, O_DROP,
	};
	static const struct option longopts[] = {
		{ "pub", required_argument, NULL, O_PUB },
		{ "replay", required_argument, NULL, O_REPLAY },
		{ "old-replay-framing", no_argument, NULL, O_OLD },
		{ "keep", required_argument, NULL, O_KEEP },
		{ "pod", required_argument, NULL, O_POD },
		{ "model", required_argument, NULL, O_MODEL },
		{ "encoding", required_argument, NULL, O_ENCODING },
		{ "hashes", required_argument, NULL, O_HASHES },
		{ "medium", required_argument, NULL, O_MEDIUM },
		{ "block-size", required_argument, NULL, O_BS },
		{ "rank", required_argument, NULL, O_RANK },
		{ "wait-subscribers", required_argument, NULL, O_WAIT },
		{ "duration", required_argument, NULL, O_DURATION },
		{ "linger-ms", required_argument, NULL, O_LINGER },
		{ "workload", no_argument, NULL, O_WORKLOAD },
		{ "prefixes", required_argument, NULL, O_PREFIXES },
		{ "prefix-blocks", required_argument, NULL, O_PBLOCKS },
		{ "suffix-blocks", required_argument, NULL, O_SBLOCKS },
		{ "seed", required_argument, NULL, O_SEED },
		{ "rate", required_argument, NULL, O_RATE },
		{ "batch", required_argument, NULL, O_BATCH },
		{ "cache-blocks", required_argument, NULL, O_CACHE },
		{ "count", required_argument, NULL, O_COUNT },
		{ "script", required_argument, NULL, O_SCRIPT },
		{ "serve", required_argument, NULL, O_SERVE },
		{ "prefill-ms", required_argument, NULL, O_PREFILL },
		{ "jitter-ms", required_argument, NULL, O_JITTER },
		{ "event-delay-ms", required_argument, NULL, O_EVDELAY },
		{ "fail-rate", required_argument, NULL, O_FAIL },
		{ "cancel-rate", required_argument, NULL, O_CANCEL },
		{ "drop-events", required_argument, NULL, O_DROP },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	*o = (struct opts){
		.pub_ep = "tcp://127.0.0.1:5557", .model = "fake-model", .medium = "GPU",
		.block_size = 16, .keep = 10000, .linger_ms = 200, .prefixes = 8,
		.prefix_blocks = 8, .suffix_blocks = 2, .seed = 1, .rate = 1000, .batch = 1,
		.cache_blocks = 1024, .prefill_ms = 50, .event_delay_ms = 100,
	};
	tc_prog = PROG;
	opterr = 0; /* This program prints its own messages, naming itself PROG. */
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		switch (c) {
		case O_PUB: o->pub_ep = optarg; break;
		case O_REPLAY: o->replay_ep = optarg; break;
		case O_OLD: o->old_framing = true; break;
		case O_KEEP: o->keep = opt_int("keep", optarg, 0, 100000000); break;
		case O_POD: o->pod = optarg; break;
		case O_MODEL: o->model = optarg; break;
		case O_ENCODING:
			if (!strcmp(optarg, "array"))
				o->form = KVW_FORM_ARRAY;
			else if (!strcmp(optarg, "map"))
				o->form = KVW_FORM_MAP;
			else
				tc_usage_error("bad --encoding '%s': expected array or map",
					       optarg);
			break;
		case O_HASHES:
			if (!strcmp(optarg, "int"))
				o->hash_form = KVW_HASH_INT;
			else if (!strcmp(optarg, "bytes"))
				o->hash_form = KVW_HASH_BIN;
			else
				tc_usage_error("bad --hashes '%s': expected int or bytes", optarg);
			break;
		case O_MEDIUM:
			if (strcmp(optarg, "GPU") && strcmp(optarg, "CPU"))
				tc_usage_error("bad --medium '%s': expected GPU or CPU", optarg);
			o->medium = optarg;
			break;
		case O_BS: o->block_size = (uint32_t)opt_int("block-size", optarg, 1, 65536); break;
		case O_RANK:
			o->rank = (int64_t)opt_int("rank", optarg, 0, INT32_MAX);
			o->has_rank = true;
			break;
		case O_WAIT: o->wait_subs = opt_int("wait-subscribers", optarg, 0, 1000000); break;
		case O_DURATION:
			o->duration = opt_num("duration", optarg, 0, 1e9);
			if (o->duration <= 0)
				tc_usage_error("bad --duration '%s': expected a number of "
					       "seconds > 0", optarg);
			break;
		case O_LINGER: o->linger_ms = opt_int("linger-ms", optarg, 0, MAX_MS); break;
		case O_WORKLOAD: o->workload = true; break;
		case O_PREFIXES: o->prefixes = opt_int("prefixes", optarg, 1, 1u << 30); break;
		case O_PBLOCKS: o->prefix_blocks = opt_int("prefix-blocks", optarg, 0, 1u << 16); break;
		case O_SBLOCKS: o->suffix_blocks = opt_int("suffix-blocks", optarg, 0, 1u << 16); break;
		case O_SEED: o->seed = opt_int("seed", optarg, 0, UINT64_MAX); break;
		case O_RATE: o->rate = opt_num("rate", optarg, 0, 1e9); break;
		case O_BATCH: o->batch = opt_int("batch", optarg, 1, 65536); break;
		case O_CACHE: o->cache_blocks = opt_int("cache-blocks", optarg, 1, 1u << 26); break;
		case O_COUNT: o->count = opt_int("count", optarg, 0, UINT64_MAX); break;
		case O_SCRIPT: o->script = optarg; break;
		case O_SERVE: o->serve_ep = optarg; break;
		case O_PREFILL: o->prefill_ms = opt_int("prefill-ms", optarg, 0, MAX_MS); break;
		case O_JITTER: o->jitter_ms = opt_int("jitter-ms", optarg, 0, MAX_MS); break;
		case O_EVDELAY: o->event_delay_ms = opt_int("event-delay-ms", optarg, 0, MAX_MS); break;
		case O_FAIL: o->fail_rate = opt_num("fail-rate", optarg, 0, 1); break;
		case O_CANCEL: o->cancel_rate = opt_num("cancel-rate", optarg, 0, 1); break;
		case O_DROP: o->drop_rate = opt_num("drop-events", optarg, 0, 1); break;
		case 'h':
			usage(stdout);
			exit(fflush(stdout) || ferror(stdout) ? 1 : 0);
		default: /* ':' or '?' */
			tc_getopt_error(c, argv);
		}
	}
	if (optind < argc)
		tc_usage_error("unexpected argument '%s'", argv[optind]);
	if (o->workload && o->script)
		tc_usage_error("--workload and --script cannot be combined");
	if (!o->script && !o->serve_ep)
		o->workload = true;
	if (o->fail_rate + o->cancel_rate > 1)
		tc_usage_error("--fail-rate %g plus --cancel-rate %g exceed 1", o->fail_rate,
			       o->cancel_rate);
	if (o->workload && o->prefix_blocks + o->suffix_blocks == 0)
		tc_usage_error("--prefix-blocks and --suffix-blocks are both 0: prompts would be "
			       "empty");
	if (o->workload && o->suffix_blocks == 0 &&
	    o->prefixes * o->prefix_blocks <= o->cache_blocks)
		tc_usage_error("--suffix-blocks 0 with --prefixes x --prefix-blocks (%" PRIu64 ") "
			       "fitting in --cache-blocks %" PRIu64 ": once all is cached the "
			       "workload publishes nothing", o->prefixes * o->prefix_blocks,
			       o->cache_blocks);
	if ((o->prefix_blocks + o->suffix_blocks) * o->block_size > KVW_MAX_TOKENS)
		tc_usage_error("a workload prompt of (%" PRIu64 " + %" PRIu64 ") blocks of %" PRIu32
			       " tokens exceeds %u tokens", o->prefix_blocks, o->suffix_blocks,
			       o->block_size, KVW_MAX_TOKENS);
	check_name("--model", o->model);
	if (o->pod)
		check_name("--pod", o->pod);
}

/* ---- setup and main loop ------------------------------------------------------------------- */

/* Creates and binds a socket; maxmsg bounds what a peer may send to it. */
static void *bind_socket(struct fp *fp, int type, const char *flag, const char *ep,
			 int64_t maxmsg)
{
	void *s = zmq_socket(fp->zctx, type);
	int linger = (int)fp->o.linger_ms, zero = 0, one = 1, hwm = PUB_HWM;

	if (!s) {
		fprintf(stderr, PROG ": creating the %s socket: %s\n", flag, zmq_strerror(errno));
		exit(1);
	}
	zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
	zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
	if (type == ZMQ_PUB || type == ZMQ_XPUB)
		zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof hwm);
	else /* a replay of every kept batch must not be cut by the high-water mark */
		zmq_setsockopt(s, ZMQ_SNDHWM, &zero, sizeof zero);
	if (type == ZMQ_XPUB)
		zmq_setsockopt(s, ZMQ_XPUB_VERBOSE, &one, sizeof one);
	if (zmq_bind(s, ep)) {
		fprintf(stderr, PROG ": cannot bind %s %s: %s\n", flag, ep, zmq_strerror(errno));
		exit(1);
	}
	return s;
}

static void setup(struct fp *fp)
{
	const struct opts *o = &fp->o;
	char pod[NAME_MAX_LEN + 1];
	sigset_t sigs;

	if (o->pod) {
		snprintf(pod, sizeof pod, "%s", o->pod);
	} else {
		if (!derive_pod(o->serve_ep ? o->serve_ep : o->pub_ep, pod, sizeof pod))
			tc_usage_error("the pod name derived from the endpoint is longer than %d "
				       "bytes: use --pod", NAME_MAX_LEN);
		check_name("pod name derived from the endpoint (use --pod)", pod);
	}
	fp->topiclen = (size_t)snprintf(fp->topic, sizeof fp->topic, "kv@%s@%s", pod, o->model);

	/* Blocked before ZMQ starts its threads, so that they inherit the mask. */
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGUSR1);
	sigprocmask(SIG_BLOCK, &sigs, NULL);
	signal(SIGPIPE, SIG_IGN);
	fp->sigfd = signalfd(-1, &sigs, SFD_CLOEXEC | SFD_NONBLOCK);
	if (fp->sigfd < 0) {
		fprintf(stderr, PROG ": signalfd: %s\n", strerror(errno));
		exit(1);
	}

	fp->zctx = zmq_ctx_new();
	if (!fp->zctx) {
		fprintf(stderr, PROG ": zmq_ctx_new: %s\n", zmq_strerror(errno));
		exit(1);
	}
	fp->xpub = o->wait_subs > 0;
	fp->pub = bind_socket(fp, fp->xpub ? ZMQ_XPUB : ZMQ_PUB, "--pub", o->pub_ep, 1024);
	if (o->replay_ep)
		fp->replay = bind_socket(fp, ZMQ_ROUTER, "--replay", o->replay_ep, 1024);
	if (o->serve_ep)
		fp->serve = bind_socket(fp, ZMQ_ROUTER, "--serve", o->serve_ep, KVS_MAX_MSG);

	kvw_enc_init(&fp->enc);
	fp->encopts.batch_form = fp->encopts.event_form = o->form;
	fp->encopts.hash_form = o->hash_form;
	if (o->keep)
		fp->ring = tc_xrealloc(NULL, o->keep * sizeof(*fp->ring));
	cache_init(&fp->cache, (uint32_t)o->cache_blocks);
	kvs_request_init(&fp->rq);
	msgpack_sbuffer_init(&fp->reply);
	fp->wl_on = o->workload;
	fp->wl_rng = o->seed;
	fp->srv_rng = o->seed ^ 0x5e12e5e12e5e12e5ull;
	fp->script_on = o->script != NULL;
	fp->script_fd = -1;
	if (o->script) {
		if (!strcmp(o->script, "-")) {
			fp->script_fd = STDIN_FILENO;
		} else {
			FILE *f = fopen(o->script, "r");

			if (!f) {
				fprintf(stderr, PROG ": cannot open --script %s: %s\n", o->script,
					strerror(errno));
				exit(1);
			}
			fp->script_fd = dup(fileno(f));
			fclose(f);
		}
		grow(&fp->sbuf, &fp->scap, 65536 + 1, 1);
	}
}

static void teardown(struct fp *fp)
{
	while (fp->nheap) {
		struct action a = heap_pop(fp);

		if (a.kind == ACT_PUBLISH)
			free(a.data);
		else if (a.kind == ACT_SERVE_DONE)
			free_inflight(fp, a.data);
	}
	free(fp->heap);
	ring_clear(fp);
	free(fp->ring);
	evlist_drop(&fp->pending, fp->pending.n);
	free(fp->pending.v);
	free(fp->tmp.v);
	cache_free(&fp->cache);
	kvw_enc_free(&fp->enc);
	kvs_request_free(&fp->rq);
	msgpack_sbuffer_destroy(&fp->reply);
	free(fp->sbuf);
	free(fp->toks);
	free(fp->hbuf);
	zmq_close(fp->pub);
	if (fp->replay)
		zmq_close(fp->replay);
	if (fp->serve)
		zmq_close(fp->serve);
	zmq_ctx_term(fp->zctx);
	if (fp->script_fd > STDIN_FILENO)
		close(fp->script_fd);
	close(fp->sigfd);
}

/* Reads the signalfd; returns true when the program must exit now. */
static bool handle_signals(struct fp *fp)
{
	struct signalfd_siginfo si;

	while (read(fp->sigfd, &si, sizeof si) == (ssize_t)sizeof si) {
		if (si.ssi_signo == SIGUSR1) {
			evlist_drop(&fp->pending, fp->pending.n);
			pod_restart(fp, fp->order);
		} else {
			return true;
		}
	}
	return false;
}

/* Whether every source has finished and nothing is queued. */
static bool all_done(const struct fp *fp)
{
	if (fp->nheap)
		return false;
	if (fp->stopping)
		return true;
	return !fp->o.serve_ep && (!fp->wl_on || fp->wl_done) &&
	       (!fp->script_on || fp->script_done);
}

static void run(struct fp *fp)
{
	for (;;) {
		zmq_pollitem_t items[6];
		int n = 0, i_sig, i_pub = -1, i_replay = -1, i_serve = -1, i_script = -1;
		uint64_t now = mono_ns(), next = UINT64_MAX;
		long timeout;

		if (!fp->started && fp->subs >= fp->o.wait_subs) {
			fp->started = true;
			fp->start_ns = now;
			if (fp->o.duration > 0)
				fp->end_ns = now + (uint64_t)(fp->o.duration * (double)NS_PER_S);
		}
		if (fp->started) {
			run_due(fp, now);
			if (!fp->stopping && fp->end_ns && now >= fp->end_ns) {
				fp->stopping = true; /* --duration: stop the sources, drain the queue */
				if (fp->script_on && !fp->script_done)
					flush_pending(fp, fp->pending.n, now);
			}
			if (!fp->stopping) {
				if (fp->script_on)
					script_step(fp, now);
				if (fp->wl_on && !fp->wl_done)
					workload_step(fp, now);
			}
			if (fp->exit_code)
				return;
			if (!fp->lingering && all_done(fp)) {
				fp->lingering = true;
				fp->linger_until = now + fp->o.linger_ms * NS_PER_MS;
			}
			if (fp->lingering && now >= fp->linger_until)
				return;
			if (fp->nheap)
				next = fp->heap[0].due;
			if (fp->lingering && fp->linger_until < next)
				next = fp->linger_until;
			if (!fp->stopping) {
				if (fp->end_ns && fp->end_ns < next)
					next = fp->end_ns;
				if (fp->script_on && !fp->script_done && fp->sleep_until > now &&
				    fp->sleep_until < next)
					next = fp->sleep_until;
				if (fp->wl_on && !fp->wl_done && fp->wl_next < next)
					next = fp->wl_next;
			}
		}
		timeout = next == UINT64_MAX ? -1
			  : next <= now ? 0 : (long)((next - now + NS_PER_MS - 1) / NS_PER_MS);

		items[n] = (zmq_pollitem_t){ .fd = fp->sigfd, .events = ZMQ_POLLIN };
		i_sig = n++;
		if (fp->xpub) {
			items[n] = (zmq_pollitem_t){ .socket = fp->pub, .events = ZMQ_POLLIN };
			i_pub = n++;
		}
		if (fp->replay) {
			items[n] = (zmq_pollitem_t){ .socket = fp->replay, .events = ZMQ_POLLIN };
			i_replay = n++;
		}
		if (fp->serve && fp->started && !fp->stopping && !fp->lingering) {
			items[n] = (zmq_pollitem_t){ .socket = fp->serve, .events = ZMQ_POLLIN };
			i_serve = n++;
		}
		if (fp->started && !fp->stopping && script_wants_input(fp) &&
		    fp->sleep_until <= now) {
			items[n] = (zmq_pollitem_t){ .fd = fp->script_fd, .events = ZMQ_POLLIN };
			i_script = n++;
		}
		if (zmq_poll(items, n, timeout) < 0) {
			if (errno == EINTR)
				continue;
			fprintf(stderr, PROG ": zmq_poll: %s\n", zmq_strerror(errno));
			fp->exit_code = 1;
			return;
		}
		now = mono_ns();
		if ((items[i_sig].revents & ZMQ_POLLIN) && handle_signals(fp))
			return;
		if (i_pub >= 0 && (items[i_pub].revents & ZMQ_POLLIN))
			handle_xpub(fp);
		if (i_replay >= 0 && (items[i_replay].revents & ZMQ_POLLIN))
			handle_replay(fp);
		if (i_serve >= 0 && (items[i_serve].revents & ZMQ_POLLIN))
			handle_serve(fp, now);
		if (i_script >= 0 && (items[i_script].revents & (ZMQ_POLLIN | ZMQ_POLLERR)))
			script_read(fp);
	}
}

int main(int argc, char **argv)
{
	static struct fp fp;
	const struct stats *s = &fp.st;

	parse_args(argc, argv, &fp.o);
	setup(&fp);
	run(&fp);
	fprintf(stderr,
		PROG ": events=%" PRIu64 " batches=%" PRIu64 " blocks_stored=%" PRIu64
		" blocks_removed=%" PRIu64 " clears=%" PRIu64 " raw=%" PRIu64 " lost=%" PRIu64
		" discarded=%" PRIu64 " requests=%" PRIu64 " ok=%" PRIu64 " failed=%" PRIu64
		" cancelled=%" PRIu64 " events_dropped=%" PRIu64 " bad_requests=%" PRIu64
		" replays=%" PRIu64 " restarts=%" PRIu64 "\n",
		s->events, s->batches, s->stored, s->removed, s->cleared, s->raw, s->lost,
		s->discarded, s->requests, s->ok, s->failed, s->cancelled, s->dropped,
		s->bad_requests, s->replays, s->restarts);
	teardown(&fp);
	return fp.exit_code;
}
