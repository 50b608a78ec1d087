/*
 * util_ingestd.c — kvidx-ingestd and its fake pods under test (see util_ingestd.h).
 */
#include "util_ingestd.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "inspect.h"
#include "util_index.h"

struct tu_ingestd tu_ing;

void tu_ingestd_setup(const char *tag)
{
	memset(&tu_ing, 0, sizeof(tu_ing));
	tu_index_name(tu_ing.name, sizeof(tu_ing.name), tag);
	snprintf(tu_ing.log, sizeof(tu_ing.log), "/tmp/%s.log", tu_ing.name);
	tu_ing.zctx = zmq_ctx_new();
	tu_ing.daemon = (struct tu_child){ .pid = -1, .in = -1, .out = -1, .err = -1 };
}

static void pub_close(struct tu_pub *p)
{
	int zero = 0;

	if (p->xpub) {
		zmq_setsockopt(p->xpub, ZMQ_LINGER, &zero, sizeof(zero));
		zmq_close(p->xpub);
	}
	if (p->router) {
		zmq_setsockopt(p->router, ZMQ_LINGER, &zero, sizeof(zero));
		zmq_close(p->router);
	}
	for (size_t i = 0; i < p->nh; i++)
		free(p->h[i].buf);
	free(p->h);
	kvw_enc_free(&p->enc);
	memset(p, 0, sizeof(*p));
}

void tu_ingestd_teardown(void)
{
	tu_child_kill(&tu_ing.daemon);
	if (tu_ing.rd)
		kvidx_reader_close(tu_ing.rd);
	tu_ing.rd = NULL;
	for (int i = 0; i < tu_ing.npubs; i++)
		pub_close(&tu_ing.pubs[i]);
	tu_ing.npubs = 0;
	zmq_ctx_term(tu_ing.zctx);
	tu_index_remove(tu_ing.name, NULL);
}

/* ---- fake pods ---- */

/* Binds p's sockets on host at ports xp and rp (0: any). 0, or -1 if a port was taken. */
static int pub_bind_at(struct tu_pub *p, const char *topic, const char *host, int xp, int rp)
{
	char ep[64];
	size_t len;
	int zero = 0, one = 1;

	memset(p, 0, sizeof(*p));
	snprintf(p->topic, sizeof(p->topic), "%s", topic);
	kvw_enc_init(&p->enc);
	p->xpub = zmq_socket(tu_ing.zctx, ZMQ_XPUB);
	p->router = zmq_socket(tu_ing.zctx, ZMQ_ROUTER);
	cr_assert(p->xpub && p->router);
	zmq_setsockopt(p->xpub, ZMQ_SNDHWM, &zero, sizeof(zero));
	zmq_setsockopt(p->router, ZMQ_SNDHWM, &zero, sizeof(zero));
	zmq_setsockopt(p->xpub, ZMQ_XPUB_VERBOSE, &one, sizeof(one));
	if (xp)
		snprintf(ep, sizeof(ep), "tcp://%s:%d", host, xp);
	else
		snprintf(ep, sizeof(ep), "tcp://%s:*", host);
	if (zmq_bind(p->xpub, ep) < 0)
		return -1;
	if (rp)
		snprintf(ep, sizeof(ep), "tcp://%s:%d", host, rp);
	else
		snprintf(ep, sizeof(ep), "tcp://%s:*", host);
	if (zmq_bind(p->router, ep) < 0)
		return -1;
	len = sizeof(p->ep);
	zmq_getsockopt(p->xpub, ZMQ_LAST_ENDPOINT, p->ep, &len);
	len = sizeof(p->rep);
	zmq_getsockopt(p->router, ZMQ_LAST_ENDPOINT, p->rep, &len);
	return 0;
}

static int pub_bind(struct tu_pub *p, const char *topic, int xp, int rp)
{
	return pub_bind_at(p, topic, "127.0.0.1", xp, rp);
}

struct tu_pub *tu_pub_open_at(const char *topic, const char *host, int xp, int rp)
{
	struct tu_pub *p;

	cr_assert(tu_ing.npubs < (int)(sizeof(tu_ing.pubs) / sizeof(tu_ing.pubs[0])));
	p = &tu_ing.pubs[tu_ing.npubs++];
	cr_assert_eq(pub_bind_at(p, topic, host, xp, rp), 0, "bind %s:%d/%d: %s", host, xp, rp,
		     zmq_strerror(errno));
	return p;
}

struct tu_pub *tu_pub_open(const char *topic)
{
	struct tu_pub *p;

	cr_assert(tu_ing.npubs < (int)(sizeof(tu_ing.pubs) / sizeof(tu_ing.pubs[0])));
	p = &tu_ing.pubs[tu_ing.npubs++];
	cr_assert_eq(pub_bind(p, topic, 0, 0), 0, "bind: %s", zmq_strerror(errno));
	return p;
}

static int port_of(const char *ep)
{
	const char *c = strrchr(ep, ':');

	return c ? atoi(c + 1) : 0;
}

struct tu_pub *tu_pub_open_ranks(const char *topic, int n)
{
	cr_assert(n >= 1 && tu_ing.npubs + n <= (int)(sizeof(tu_ing.pubs) / sizeof(tu_ing.pubs[0])));
	for (int attempt = 0; attempt < 50; attempt++) {
		struct tu_pub *p = &tu_ing.pubs[tu_ing.npubs];
		int ok = pub_bind(p, topic, 0, 0) == 0;
		int xp = port_of(p->ep), rp = port_of(p->rep);

		for (int r = 1; ok && r < n; r++)
			ok = pub_bind(&tu_ing.pubs[tu_ing.npubs + r], topic, xp + r, rp + r) == 0;
		if (ok) {
			tu_ing.npubs += n;
			return p;
		}
		for (int r = 0; r < n; r++)
			pub_close(&tu_ing.pubs[tu_ing.npubs + r]);
	}
	cr_assert_fail("no free consecutive ports for %d ranks", n);
	return NULL;
}

static void keep_batch(struct tu_pub *p, uint64_t seq, const void *buf, size_t len)
{
	if (p->nh == p->cap) {
		p->cap = p->cap ? 2 * p->cap : 64;
		p->h = realloc(p->h, p->cap * sizeof(*p->h));
		cr_assert_not_null(p->h);
	}
	p->h[p->nh].seq = seq;
	p->h[p->nh].buf = malloc(len ? len : 1);
	cr_assert_not_null(p->h[p->nh].buf);
	memcpy(p->h[p->nh].buf, buf, len);
	p->h[p->nh].len = len;
	p->nh++;
}

void tu_send_frames(void *s, const void *a, size_t alen, const void *b, size_t blen,
		    const void *c, size_t clen)
{
	cr_assert(zmq_send(s, a, alen, ZMQ_SNDMORE) >= 0);
	if (c) {
		cr_assert(zmq_send(s, b, blen, ZMQ_SNDMORE) >= 0);
		cr_assert(zmq_send(s, c, clen, 0) >= 0);
	} else {
		cr_assert(zmq_send(s, b, blen, 0) >= 0);
	}
}

/* p's sequence frame for seq: 8 bytes, or 24 with its publisher id. Returns the length. */
static size_t seq_frame(const struct tu_pub *p, uint64_t seq, unsigned char out[24])
{
	kvw_seq_put(out, seq);
	if (!p->has_id)
		return 8;
	memcpy(out + 8, p->id, KVW_PUB_ID_LEN);
	return 24;
}

void tu_pub_batch(struct tu_pub *p, uint64_t seq, const void *buf, size_t len, bool send)
{
	unsigned char sf[24];
	size_t sflen = seq_frame(p, seq, sf);

	keep_batch(p, seq, buf, len);
	if (!send)
		return;
	tu_send_frames(p->xpub, p->topic, strlen(p->topic), sf, sflen, buf, len);
}

bool tu_log_has(const char *needle)
{
	FILE *f = fopen(tu_ing.log, "r");
	char *text = NULL;
	size_t cap = 0, n = 0, got;
	bool has;

	if (!f)
		return false;
	do {
		if (n + 4096 + 1 > cap) {
			cap = cap ? 2 * cap : 65536;
			text = realloc(text, cap);
			cr_assert_not_null(text);
		}
		got = fread(text + n, 1, cap - n - 1, f);
		n += got;
	} while (got);
	fclose(f);
	text[n] = '\0';
	has = strstr(text, needle) != NULL;
	free(text);
	return has;
}

void tu_pub_restart(struct tu_pub *p, const uint8_t *id)
{
	for (size_t i = 0; i < p->nh; i++)
		free(p->h[i].buf);
	p->nh = 0;
	p->next_seq = 0;
	p->keep_from = 0;
	if (id) {
		p->has_id = true;
		memcpy(p->id, id, KVW_PUB_ID_LEN);
	}
}

uint64_t tu_pub_events_ex(struct tu_pub *p, const struct kvw_event *ev, size_t n, bool send,
			  enum kvw_form form)
{
	struct kvw_enc_opts o = { .batch_form = form, .event_form = form,
				  .hash_form = form == KVW_FORM_MAP ? KVW_HASH_BIN : KVW_HASH_INT };
	const void *buf;
	size_t len;
	uint64_t seq = p->next_seq++;

	kvw_enc_begin(&p->enc, &o, 1.5, n, true, 0);
	for (size_t i = 0; i < n; i++)
		kvw_enc_event(&p->enc, &ev[i]);
	cr_assert_eq(kvw_enc_end(&p->enc, &buf, &len), 0, "encoder");
	tu_pub_batch(p, seq, buf, len, send);
	return seq;
}

uint64_t tu_pub_events(struct tu_pub *p, const struct kvw_event *ev, size_t n)
{
	return tu_pub_events_ex(p, ev, n, true, KVW_FORM_ARRAY);
}

/* Sends one replay answer frame sequence: [id, "", (topic,) seq frame, payload]. */
static void replay_send(struct tu_pub *p, zmq_msg_t *id, const unsigned char *seqf,
			size_t seqlen, const void *buf, size_t len)
{
	zmq_send(p->router, zmq_msg_data(id), zmq_msg_size(id), ZMQ_SNDMORE);
	zmq_send(p->router, "", 0, ZMQ_SNDMORE);
	if (!p->old_framing)
		zmq_send(p->router, p->topic, strlen(p->topic), ZMQ_SNDMORE);
	zmq_send(p->router, seqf, seqlen, ZMQ_SNDMORE);
	zmq_send(p->router, buf, len, 0);
}

/* Serves p's replay requests for up to timeout_ms: every kept batch from the requested
 * seq on, then the end marker. */
static void pub_serve(struct tu_pub *p, int timeout_ms)
{
	zmq_pollitem_t it = { .socket = p->router, .events = ZMQ_POLLIN };

	while (zmq_poll(&it, 1, timeout_ms) > 0) {
		zmq_msg_t id, f;
		unsigned char sf[24], end8[8];
		uint64_t from = 0;
		int more;
		size_t ml = sizeof(more), n = 0;
		bool ok = false;

		timeout_ms = 0;
		zmq_msg_init(&id);
		if (zmq_msg_recv(&id, p->router, 0) < 0)
			return;
		do {
			zmq_msg_init(&f);
			zmq_msg_recv(&f, p->router, 0);
			if (n == 1 && kvw_seq_get(zmq_msg_data(&f), zmq_msg_size(&f), &from))
				ok = true;
			n++;
			zmq_getsockopt(p->router, ZMQ_RCVMORE, &more, &ml);
			zmq_msg_close(&f);
		} while (more);
		p->replay_requests++;
		p->last_replay_from = from;
		if (!ok || p->mute) {
			zmq_msg_close(&id);
			continue;
		}
		for (size_t i = 0; i < p->nh; i++) {
			struct tu_batch *h = &p->h[i];
			if (h->seq < from || h->seq < p->keep_from)
				continue;
			size_t sflen = seq_frame(p, h->seq, sf);
			replay_send(p, &id, sf, sflen, h->buf, h->len);
		}
		memset(end8, 0xff, 8);
		replay_send(p, &id, end8, 8, "", 0);
		zmq_msg_close(&id);
	}
}

void tu_pub_wait_subscribed(struct tu_pub *p)
{
	zmq_pollitem_t it = { .socket = p->xpub, .events = ZMQ_POLLIN };
	uint64_t dl = kvidx_now_ns() + TU_DEADLINE_MS * 1000000ull;

	for (;;) {
		if (zmq_poll(&it, 1, 10) > 0) {
			char buf[64];
			int n = zmq_recv(p->xpub, buf, sizeof(buf), 0);
			if (n >= 1 && buf[0] == 1)
				return;
			continue;
		}
		cr_assert(kvidx_now_ns() < dl, "no subscription from kvidx-ingestd at %s; log: %s",
			  p->ep, tu_ing.log);
		tu_pump(0);
	}
}

/* ---- the daemon ---- */

void tu_ingestd_start(const char *const *args)
{
	const char *argv[64];
	int n = 0;

	argv[n++] = "--name";
	argv[n++] = tu_ing.name;
	argv[n++] = "--log-level";
	argv[n++] = "debug";
	for (int i = 0; args[i]; i++) {
		cr_assert(n < 62);
		argv[n++] = args[i];
	}
	argv[n] = NULL;
	tu_spawn(&tu_ing.daemon, "kvidx-ingestd", argv, tu_ing.log, false);
	/* The index exists once the writer has published its first generation. */
	uint64_t dl = kvidx_now_ns() + TU_DEADLINE_MS * 1000000ull;
	while (!(tu_ing.rd = kvidx_reader_open(tu_ing.name))) {
		cr_assert(kvidx_now_ns() < dl, "index %s never appeared; log: %s", tu_ing.name,
			  tu_ing.log);
		tu_pump(5);
	}
}

/* The last lines of the daemon's log, for a failure message that names its cause (CI keeps
 * the test's output, not /tmp). */
static const char *log_tail(char *buf, size_t len)
{
	FILE *f = fopen(tu_ing.log, "r");
	size_t n = 0;

	buf[0] = '\0';
	if (!f)
		return "(no log)";
	if (fseek(f, -(long)(len - 1), SEEK_END) < 0)
		rewind(f);
	n = fread(buf, 1, len - 1, f);
	fclose(f);
	buf[n] = '\0';
	return buf;
}

void tu_pump(int ms)
{
	int st = tu_child_wait(&tu_ing.daemon, 0);
	char tail[1024];

	if (st >= 0)
		cr_assert_fail("kvidx-ingestd exited early (status %d); log %s ends:\n%s", st,
			       tu_ing.log, log_tail(tail, sizeof(tail)));
	if (tu_ing.npubs == 0) {
		tu_sleep_ms((unsigned)ms);
		return;
	}
	for (int i = 0; i < tu_ing.npubs; i++)
		pub_serve(&tu_ing.pubs[i], i == 0 ? ms : 0);
}

/* ---- the index ---- */

uint64_t tu_ctr(int pod, enum kv_pod_ctr c)
{
	const struct kv_view *v = kv_reader_view(tu_ing.rd);

	cr_assert(pod >= 0 && (uint32_t)pod < v->max_pods);
	return ld_relaxed(&v->pods[pod].pd_ctr[c]);
}

void tu_wait_batches(int pod, uint64_t n)
{
	TU_EVENTUALLY(tu_ctr(pod, KV_PC_batches) >= n, "only %llu of %llu batches applied; log: %s",
		      (unsigned long long)tu_ctr(pod, KV_PC_batches), (unsigned long long)n,
		      tu_ing.log);
	cr_assert_eq(tu_ctr(pod, KV_PC_batches), n, "more batches applied than published");
}

int tu_wait_pod(const char *pod)
{
	TU_EVENTUALLY(kvidx_reader_pod_find(tu_ing.rd, pod) >= 0, "pod %s never registered; log: %s",
		      pod, tu_ing.log);
	return kvidx_reader_pod_find(tu_ing.rd, pod);
}

unsigned tu_tiers(uint64_t key, int pod)
{
	struct kvidx_rec rec;
	int st = tu_rec_state(tu_ing.rd, key, pod, &rec);

	cr_assert(st >= 0, "lookup of 0x%016llx failed", (unsigned long long)key);
	return st == TU_ABSENT ? 0 : rec.tiers;
}

const uint32_t *tu_toks(uint32_t base, size_t n)
{
	static uint32_t buf[8][4096];
	static int next;
	uint32_t *t = buf[next++ % 8];

	cr_assert(n <= 4096);
	for (size_t i = 0; i < n; i++)
		t[i] = base + (uint32_t)i;
	return t;
}

struct kvw_event tu_stored(const uint64_t *h, size_t nh, bool has_parent, uint64_t parent,
			   const uint32_t *tok, size_t ntok, uint32_t bs)
{
	struct kvw_event ev;

	memset(&ev, 0, sizeof(ev));
	ev.type = KVW_BLOCK_STORED;
	ev.hashes = h;
	ev.nhashes = nh;
	ev.has_parent = has_parent;
	ev.parent = parent;
	ev.tokens = tok;
	ev.ntokens = ntok;
	ev.block_size = bs;
	return ev;
}

struct kvw_event tu_removed(const uint64_t *h, size_t nh, const char *medium)
{
	struct kvw_event ev;

	memset(&ev, 0, sizeof(ev));
	ev.type = KVW_BLOCK_REMOVED;
	ev.hashes = h;
	ev.nhashes = nh;
	if (medium)
		snprintf(ev.medium, sizeof(ev.medium), "%s", medium);
	return ev;
}

size_t tu_keys_of(const char *model, uint64_t parent, const uint32_t *tok, size_t n,
		  uint64_t *out)
{
	if (!parent)
		parent = kvidx_key_root(KVIDX_KEY_CBOR_FNV, "", model);
	return kvidx_key_chain(KVIDX_KEY_CBOR_FNV, parent, tok, n, TU_BLOCK_SIZE, out, 256);
}
