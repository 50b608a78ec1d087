/*
 * test_fakepod.c — Criterion tests for kvidx-fakepod (tools/fakepod/): its KV events on the
 * wire and its HTTP API (vLLM's OpenAI-compatible shapes, tools/fakepod/http.c).
 *
 * Each test starts $KVIDX_BIN/kvidx-fakepod as a child on loopback ports of its own, with
 * --wait-subscribers so that nothing is published before the test's SUB socket has
 * subscribed, drives it through its script on standard input, its replay ROUTER or its HTTP
 * API, and checks what comes out on the wire with the project's own decoder: topic,
 * sequence numbers, every event field, both encodings, replay framings, HTTP answers
 * (cached tokens, streaming, errors, faults) and the timing of delayed events. The child is killed in teardown whatever happens.
 * The pod model (suite fakepod, model_*; suite podmodel with kvidx-ingestd): TTFT in model
 * time against uncached tokens and the queue, --max-num-seqs, vLLM's metric names, and an
 * eviction's BlockRemoved followed by the index.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>
#include <zmq.h>

#include "kvidx.h"
#include <curl/curl.h>

#include "util_http.h"
#include "util_index.h"
#include "util_ingestd.h"
#include "util_run.h"
#include "wire.h"

#define ENGINE_SEED 0x66616b65706f6431ull /* as in kvidx-fakepod.c: "fakepod1" */
#define RCV_MS 15000

/* ---- child process ------------------------------------------------------------------------- */

static struct tu_child child = { .pid = -1, .in = -1, .out = -1, .err = -1 };
static char outbuf[1 << 16], errbuf[1 << 14];
static size_t outlen, errlen;
static void *zctx;
static void *socks[16];
static int nsocks;

static void setup(void)
{
	zctx = zmq_ctx_new();
	cr_assert_not_null(zctx);
}

/* Kills the child if it still runs, and forgets its pipes and what was read from them. */
static void kill_child(void)
{
	tu_child_kill(&child);
	outlen = errlen = 0;
}

static void teardown(void)
{
	kill_child();
	for (int i = 0; i < nsocks; i++)
		zmq_close(socks[i]);
	nsocks = 0;
	if (zctx)
		zmq_ctx_term(zctx);
	zctx = NULL;
}

TestSuite(fakepod, .init = setup, .fini = teardown, .timeout = 120);

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Starts kvidx-fakepod with the NULL-terminated arguments, its stdio on pipes. */
static void spawn(const char *first, ...)
{
	const char *argv[64];
	int n = 0;
	va_list ap;

	va_start(ap, first);
	for (const char *a = first; a; a = va_arg(ap, const char *)) {
		cr_assert(n < 62);
		argv[n++] = a;
	}
	va_end(ap);
	argv[n] = NULL;
	tu_spawn(&child, "kvidx-fakepod", argv, NULL, true);
	outlen = errlen = 0;
}

/*
 * What the child has written on standard error so far (all of it once it has exited), for
 * assertions and for failure messages.
 */
static const char *child_stderr(void)
{
	return tu_child_stderr(&child, errbuf, sizeof errbuf, &errlen);
}

/* Writes one script line (a newline is added). */
#define say(...) tu_child_say(&child, __VA_ARGS__)

static void close_stdin(void)
{
	close(child.in);
	child.in = -1;
}

/* Reads one line of the child's standard output; false on timeout or end of file. */
static bool read_line(char *buf, size_t len, int timeout_ms)
{
	uint64_t deadline = now_ms() + (uint64_t)timeout_ms;

	for (;;) {
		char *nl = memchr(outbuf, '\n', outlen);
		struct pollfd p = { child.out, POLLIN, 0 };
		uint64_t now = now_ms();
		ssize_t r;

		if (nl) {
			size_t n = (size_t)(nl - outbuf);

			cr_assert(n < len);
			memcpy(buf, outbuf, n);
			buf[n] = '\0';
			memmove(outbuf, nl + 1, outlen - n - 1);
			outlen -= n + 1;
			return true;
		}
		if (now >= deadline || poll(&p, 1, (int)(deadline - now)) <= 0)
			return false;
		r = read(child.out, outbuf + outlen, sizeof outbuf - outlen);
		if (r <= 0)
			return false;
		outlen += (size_t)r;
	}
}

/* Reads the hashes a store prints. */
static void read_hashes(uint64_t *h, size_t n)
{
	char line[64];

	for (size_t i = 0; i < n; i++) {
		cr_assert(read_line(line, sizeof line, RCV_MS), "no hash line %zu from store; "
			  "child stderr: %s", i, child_stderr());
		cr_assert_eq(strlen(line), 18, "bad hash line '%s'", line);
		cr_assert(line[0] == '0' && line[1] == 'x');
		h[i] = strtoull(line + 2, NULL, 16);
	}
}

/* Runs kvidx-fakepod to completion with no input; returns the exit status. */
#define RUN(...) (spawn(__VA_ARGS__, NULL), close_stdin(), tu_child_wait(&child, 20000))

/* ---- sockets ------------------------------------------------------------------------------- */

static void *sock(int type, const char *ep)
{
	void *s = zmq_socket(zctx, type);
	int zero = 0, tmo = RCV_MS;

	cr_assert_not_null(s);
	cr_assert(nsocks < 16);
	socks[nsocks++] = s;
	zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
	zmq_setsockopt(s, ZMQ_RCVTIMEO, &tmo, sizeof tmo);
	if (type == ZMQ_SUB)
		zmq_setsockopt(s, ZMQ_SUBSCRIBE, "", 0);
	cr_assert_eq(zmq_connect(s, ep), 0, "connect %s: %s", ep, zmq_strerror(errno));
	return s;
}

static void set_timeout(void *s, int ms)
{
	zmq_setsockopt(s, ZMQ_RCVTIMEO, &ms, sizeof ms);
}

/* One received message, up to 8 frames. */
struct msg {
	int n;
	size_t len[8];
	unsigned char *data[8];
};

static bool recv_msg(void *s, struct msg *m)
{
	int more = 1;
	size_t sz = sizeof more;

	m->n = 0;
	while (more) {
		zmq_msg_t f;

		zmq_msg_init(&f);
		if (zmq_msg_recv(&f, s, 0) < 0) {
			zmq_msg_close(&f);
			cr_assert_eq(m->n, 0, "message cut short");
			return false;
		}
		cr_assert(m->n < 8, "more than 8 frames");
		m->len[m->n] = zmq_msg_size(&f);
		m->data[m->n] = malloc(m->len[m->n] + 1);
		memcpy(m->data[m->n], zmq_msg_data(&f), m->len[m->n]);
		m->data[m->n][m->len[m->n]] = '\0';
		m->n++;
		zmq_msg_close(&f);
		zmq_getsockopt(s, ZMQ_RCVMORE, &more, &sz);
	}
	return true;
}

static void msg_free(struct msg *m)
{
	for (int i = 0; i < m->n; i++)
		free(m->data[i]);
	m->n = 0;
}

static void send_msg(void *s, int n, const void *const *d, const size_t *l)
{
	for (int i = 0; i < n; i++)
		cr_assert(zmq_send(s, d[i], l[i], i + 1 < n ? ZMQ_SNDMORE : 0) >= 0);
}

/* A batch received on the SUB socket, decoded. */
struct got {
	char topic[600];
	uint64_t seq;
	struct kvw_seqf sf;    /* the sequence frame: 8 bytes, or 24 with a publisher id */
	size_t seqlen;
	unsigned char *payload;
	size_t len;
	struct kvw_batch b;
	uint64_t at_ms;
};

static bool recv_batch(void *sub, struct got *g)
{
	struct msg m;
	char err[256];
	int rc;

	free(g->payload);
	g->payload = NULL;
	if (!recv_msg(sub, &m))
		return false;
	g->at_ms = now_ms();
	cr_assert_eq(m.n, 3, "PUB message of %d frames", m.n);
	cr_assert(m.len[0] < sizeof g->topic);
	memcpy(g->topic, m.data[0], m.len[0] + 1);
	cr_assert(kvw_seq_frame(m.data[1], m.len[1], &g->sf), "seq frame of %zu bytes", m.len[1]);
	g->seq = g->sf.seq;
	g->seqlen = m.len[1];
	g->payload = m.data[2];
	g->len = m.len[2];
	m.data[2] = NULL;
	free(m.data[0]);
	free(m.data[1]);
	rc = kvw_decode_batch(g->payload, g->len, &g->b, err, sizeof err);
	cr_assert_eq(rc, 0, "seq %llu: decode failed: %s", (unsigned long long)g->seq, err);
	return true;
}

static void got_free(struct got *g)
{
	free(g->payload);
	g->payload = NULL;
	kvw_batch_free(&g->b);
}

/* Receives a batch and checks its sequence number. */
static void expect_batch(void *sub, struct got *g, uint64_t seq)
{
	cr_assert(recv_batch(sub, g), "no batch with seq %llu; child stderr: %s",
		  (unsigned long long)seq, child_stderr());
	cr_assert_eq(g->seq, seq, "seq %llu, expected %llu", (unsigned long long)g->seq,
		     (unsigned long long)seq);
}

/* ---- expected values ------------------------------------------------------------------------ */

/* The documented engine hash: XXH64(LE64(parent) || LE32(tokens)..., ENGINE_SEED). */
static uint64_t engine_hash(uint64_t parent, const uint32_t *t, size_t n)
{
	unsigned char buf[8 + 4 * 64];

	cr_assert(n <= 64);
	for (int i = 0; i < 8; i++)
		buf[i] = (unsigned char)(parent >> (8 * i));
	for (size_t i = 0; i < n; i++)
		for (int k = 0; k < 4; k++)
			buf[8 + 4 * i + k] = (unsigned char)(t[i] >> (8 * k));
	return XXH64(buf, 8 + 4 * n, ENGINE_SEED);
}

static void seq_tokens(uint32_t *t, uint32_t from, size_t n)
{
	for (size_t i = 0; i < n; i++)
		t[i] = from + (uint32_t)i;
}

/* "from,from+1,...", n tokens. */
static const char *token_list(uint32_t from, size_t n)
{
	static char buf[8192];
	size_t k = 0;

	for (size_t i = 0; i < n; i++)
		k += (size_t)snprintf(buf + k, sizeof buf - k, "%s%u", i ? "," : "",
				      from + (unsigned)i);
	return buf;
}

static void assert_stored(const struct kvw_event *ev, const uint64_t *h, size_t nh,
			  bool has_parent, uint64_t parent, uint32_t tok_from)
{
	cr_assert_eq(ev->type, KVW_BLOCK_STORED, "event is %s", kvw_type_name(ev->type));
	cr_assert_eq(ev->nhashes, nh);
	for (size_t i = 0; i < nh; i++)
		cr_assert_eq(ev->hashes[i], h[i], "hash %zu: 0x%llx, expected 0x%llx", i,
			     (unsigned long long)ev->hashes[i], (unsigned long long)h[i]);
	cr_assert_eq(ev->has_parent, has_parent);
	if (has_parent)
		cr_assert_eq(ev->parent, parent);
	cr_assert_eq(ev->block_size, 16);
	cr_assert_eq(ev->ntokens, nh * 16);
	for (size_t i = 0; i < ev->ntokens; i++)
		cr_assert_eq(ev->tokens[i], tok_from + i, "token %zu", i);
}

/* ---- usage ---------------------------------------------------------------------------------- */

Test(fakepod, help_and_usage_errors)
{
	static const struct {
		const char *a, *b, *c, *msg;
	} bad[] = {
		{ "--bogus", NULL, NULL, "unknown option '--bogus'" },
		{ "--rate", "fast", NULL, "bad --rate 'fast': expected a number in [0, 1e+09]" },
		{ "--block-size", "0", NULL, "bad --block-size '0': expected a decimal integer 1..65536" },
		{ "--encoding", "xml", NULL, "bad --encoding 'xml': expected array or map" },
		{ "--hashes", "hex", NULL, "bad --hashes 'hex': expected int or bytes" },
		{ "--medium", "TPU", NULL, "bad --medium 'TPU': expected GPU or CPU" },
		{ "--fail-rate", "1.5", NULL, "bad --fail-rate '1.5'" },
		{ "--pod", "a@b", NULL, "must not contain '@'" },
		{ "--script", "-", "--workload", "--workload and --script cannot be combined" },
		{ "--http", NULL, NULL, "option '--http' requires an argument" },
		{ "--http", "nowhere", NULL, "bad --http 'nowhere': expected HOST:PORT" },
		{ "stray", NULL, NULL, "unexpected argument 'stray'" },
	};
	char line[256];
	bool usage = false;

	spawn("--help", NULL);
	while (read_line(line, sizeof line, RCV_MS))
		usage |= strstr(line, "Usage: kvidx-fakepod") != NULL;
	cr_assert(usage, "--help printed no usage line");
	cr_assert_eq(tu_child_wait(&child, 5000), 0);
	kill_child();

	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		const char *err;
		int rc = RUN(bad[i].a, bad[i].b, bad[i].c);

		cr_assert_eq(rc, 2, "%s: exit %d, expected 2", bad[i].a, rc);
		err = child_stderr();
		cr_assert(strstr(err, bad[i].msg), "%s: stderr '%s' lacks '%s'", bad[i].a, err,
			  bad[i].msg);
		cr_assert(strstr(err, "Try 'kvidx-fakepod --help'"));
		kill_child();
	}
}

Test(fakepod, bad_script_lines_exit_2)
{
	static const struct {
		const char *line, *msg;
	} bad[] = {
		{ "store - 1,2,3", "standard input line 3: store: 3 tokens make no full block of 16" },
		{ "store xyz 1", "store: bad parent 'xyz'" },
		{ "store - 1,-2", "store: bad token '-2'" },
		{ "remove", "remove: expected at least one hash" },
		{ "gap 0", "gap: bad argument '0'" },
		{ "raw 0g", "raw: bad hex digit in '0g'" },
		{ "clear now", "clear: no argument expected" },
		{ "explode", "unknown command 'explode'" },
		{ "delay 300", "delay: bad argument '300': needs a unit (us, ms, s or m)" },
		{ "sleep 1.5x", "sleep: bad argument '1.5x': expected a duration" },
		{ "delay 1s 2s", "delay: too many arguments" },
	};

	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		const char *err;
		int rc;

		spawn("--script", "-", "--pub", tu_endpoint(0), "--linger-ms", "0", NULL);
		say("# a comment, then a blank line");
		say("%s", "");
		say("%s", bad[i].line);
		rc = tu_child_wait(&child, 5000);
		cr_assert_eq(rc, 2, "'%s': exit %d", bad[i].line, rc);
		err = child_stderr();
		cr_assert(strstr(err, bad[i].msg), "'%s': stderr '%s' lacks '%s'", bad[i].line, err,
			  bad[i].msg);
		cr_assert(strstr(err, "line 3:"), "'%s': wrong line number in '%s'", bad[i].line,
			  err);
		kill_child();
	}
}

/* ---- script mode ------------------------------------------------------------------------------ */

Test(fakepod, script_store_remove_clear)
{
	struct got g = { 0 };
	uint64_t h[3], h3[3], keys[3];
	uint32_t t[48];
	const char *err;
	void *sub;

	spawn("--script", "-", "--pub", tu_endpoint(0), "--pod", "10.0.0.1:8000", "--model", "m1",
	      "--wait-subscribers", "1", "--linger-ms", "0", NULL);
	sub = sock(ZMQ_SUB, tu_endpoint(0));

	say("store - %s", token_list(1, 32));
	read_hashes(h, 2);
	expect_batch(sub, &g, 0);
	cr_assert_str_eq(g.topic, "kv@10.0.0.1:8000@m1");
	cr_assert_eq(g.b.nevents, 1);
	cr_assert_not(g.b.has_dp_rank);
	assert_stored(&g.b.events[0], h, 2, false, 0, 1);
	cr_assert_str_eq(g.b.events[0].medium, "GPU");
	cr_assert(g.payload[0] == 0x92, "array batch without rank expected, got 0x%02x",
		  g.payload[0]);

	/* The hashes are the documented engine hashes, chained, and not kvidx request keys. */
	seq_tokens(t, 1, 48);
	cr_assert_eq(h[0], engine_hash(0, t, 16));
	cr_assert_eq(h[1], engine_hash(h[0], t + 16, 16));
	kvidx_key_chain(KVIDX_KEY_CBOR_FNV, kvidx_key_root(KVIDX_KEY_CBOR_FNV, "", "m1"), t, 32,
			16, keys, 2);
	cr_assert_neq(h[0], keys[0]);
	kvidx_key_chain(KVIDX_KEY_XXH64, kvidx_key_root(KVIDX_KEY_XXH64, "", "m1"), t, 32, 16,
			keys, 2);
	cr_assert_neq(h[0], keys[0]);

	/* Chaining from a parent; a trailing partial block is dropped. */
	say("store 0x%016llx %s,999", (unsigned long long)h[1], token_list(33, 16));
	read_hashes(&h[2], 1);
	expect_batch(sub, &g, 1);
	assert_stored(&g.b.events[0], &h[2], 1, true, h[1], 33);
	cr_assert_eq(h[2], engine_hash(h[1], t + 32, 16));

	/* Deterministic: the same tokens from the root give the same chain, spaces work too. */
	say("store - 1,2,3,4,5,6,7,8 9 10 11 12 13 14 15 16 %s", token_list(17, 32));
	read_hashes(h3, 3);
	cr_assert_arr_eq(h3, h, sizeof h);
	expect_batch(sub, &g, 2);
	assert_stored(&g.b.events[0], h, 3, false, 0, 1);

	say("remove 0x%llx %llx", (unsigned long long)h[0], (unsigned long long)h[2]);
	expect_batch(sub, &g, 3);
	cr_assert_eq(g.b.nevents, 1);
	cr_assert_eq(g.b.events[0].type, KVW_BLOCK_REMOVED);
	cr_assert_eq(g.b.events[0].nhashes, 2);
	cr_assert_eq(g.b.events[0].hashes[0], h[0]);
	cr_assert_eq(g.b.events[0].hashes[1], h[2]);
	cr_assert_str_eq(g.b.events[0].medium, "GPU");

	say("clear");
	expect_batch(sub, &g, 4);
	cr_assert_eq(g.b.nevents, 1);
	cr_assert_eq(g.b.events[0].type, KVW_ALL_BLOCKS_CLEARED);

	close_stdin();
	cr_assert_eq(tu_child_wait(&child, 5000), 0);
	err = child_stderr();
	cr_assert(strstr(err, "events=5 batches=5 blocks_stored=6 blocks_removed=2 clears=1"),
		  "summary: %s", err);
	got_free(&g);
}

Test(fakepod, gap_restart_and_sigusr1_reset_seq)
{
	struct got g = { 0 };
	char topic[64];
	void *sub;

	spawn("--script", "-", "--pub", tu_endpoint(0), "--wait-subscribers", "1",
	      "--linger-ms", "0", NULL);
	sub = sock(ZMQ_SUB, tu_endpoint(0));
	say("store - %s", token_list(1, 16));
	expect_batch(sub, &g, 0);
	snprintf(topic, sizeof topic, "kv@127.0.0.1:%d@fake-model", tu_port(0));
	cr_assert_str_eq(g.topic, topic, "default topic");
	say("gap 5");
	say("store - %s", token_list(1, 16));
	expect_batch(sub, &g, 6);
	say("restart");
	say("store - %s", token_list(1, 16));
	expect_batch(sub, &g, 0);
	say("store - %s", token_list(1, 16));
	expect_batch(sub, &g, 1);

	/* SIGUSR1: a restart with nothing published; the next batch is seq 0 again. */
	cr_assert_eq(kill(child.pid, SIGUSR1), 0);
	say("store - %s", token_list(1, 16));
	expect_batch(sub, &g, 0);
	cr_assert_eq(g.b.nevents, 1);
	cr_assert_eq(g.b.events[0].type, KVW_BLOCK_STORED);

	/* SIGTERM: exit 0 at once, with the summary. */
	cr_assert_eq(kill(child.pid, SIGTERM), 0);
	cr_assert_eq(tu_child_wait(&child, 15000), 0);
	cr_assert(strstr(child_stderr(), "batches=5 "), "summary missing");
	got_free(&g);
}

/* --publisher-id: 24-byte sequence frames, HEX + 1 after a restart; --heartbeat: an idle
 * rank publishes empty batches, numbered like the others. */
Test(fakepod, publisher_id_restart_and_heartbeats)
{
	static const uint8_t id0[16] = { 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15 };
	uint8_t id1[16];
	struct got g = { 0 };
	void *sub;

	spawn("--script", "-", "--pub", tu_endpoint(0), "--wait-subscribers", "1",
	      "--linger-ms", "0", "--publisher-id", "000102030405060708090a0b0c0d0e0f",
	      "--heartbeat", "100ms", NULL);
	sub = sock(ZMQ_SUB, tu_endpoint(0));
	say("store - %s", token_list(1, 16));
	expect_batch(sub, &g, 0);
	cr_assert_eq(g.seqlen, 24);
	cr_assert(g.sf.has_id);
	cr_assert_arr_eq(g.sf.id, id0, 16);
	cr_assert_eq(g.b.nevents, 1);
	/* Idle: a heartbeat. */
	expect_batch(sub, &g, 1);
	cr_assert_eq(g.b.nevents, 0, "heartbeat with %zu events", g.b.nevents);
	cr_assert_arr_eq(g.sf.id, id0, 16);
	/* A restart: a new process, numbering from 0 under the next id. */
	say("restart");
	say("store - %s", token_list(1, 16));
	do
		cr_assert(recv_batch(sub, &g), "no batch after the restart; stderr: %s",
			  child_stderr());
	while (!g.b.nevents);
	memcpy(id1, id0, 16);
	id1[15] = 16;
	cr_assert_eq(g.seq, 0);
	cr_assert_eq(g.seqlen, 24);
	cr_assert_arr_eq(g.sf.id, id1, 16);
	cr_assert_eq(kill(child.pid, SIGTERM), 0);
	cr_assert_eq(tu_child_wait(&child, 3000), 0);
	got_free(&g);
}

Test(fakepod, encodings_and_hash_forms_decode_the_same)
{
	struct got g = { 0 };
	uint64_t ha[2], hm[2];
	void *sub;

	spawn("--script", "-", "--pub", tu_endpoint(0), "--wait-subscribers", "1",
	      "--linger-ms", "0", NULL);
	sub = sock(ZMQ_SUB, tu_endpoint(0));
	say("store - %s", token_list(100, 32));
	read_hashes(ha, 2);
	expect_batch(sub, &g, 0);
	cr_assert_eq(g.payload[0], 0x92, "array batch expected");
	cr_assert_null(memmem(g.payload, g.len, "\xc4\x08", 2), "int hashes expected");
	assert_stored(&g.b.events[0], ha, 2, false, 0, 100);
	kill_child();

	spawn("--script", "-", "--pub", tu_endpoint(1), "--wait-subscribers", "1",
	      "--linger-ms", "0", "--encoding", "map", "--hashes", "bytes", "--medium", "CPU",
	      "--rank", "3", NULL);
	sub = sock(ZMQ_SUB, tu_endpoint(1));
	say("store - %s", token_list(100, 32));
	read_hashes(hm, 2);
	cr_assert_arr_eq(hm, ha, sizeof ha, "hashes depend on the encoding");
	say("remove %llx", (unsigned long long)hm[1]);
	expect_batch(sub, &g, 0);
	cr_assert_eq(g.payload[0], 0x83, "map batch with rank expected, got 0x%02x", g.payload[0]);
	cr_assert_not_null(memmem(g.payload, g.len, "\xc4\x08", 2), "bin hashes expected");
	cr_assert_not_null(memmem(g.payload, g.len, "\xa4type\xab" "BlockStored", 17),
			   "type-tagged event expected");
	cr_assert(g.b.has_dp_rank && g.b.dp_rank == 3);
	assert_stored(&g.b.events[0], ha, 2, false, 0, 100);
	cr_assert_str_eq(g.b.events[0].medium, "CPU");
	expect_batch(sub, &g, 1);
	cr_assert_eq(g.b.events[0].type, KVW_BLOCK_REMOVED);
	cr_assert_eq(g.b.events[0].hashes[0], ha[1]);
	cr_assert_str_eq(g.b.events[0].medium, "CPU");
	got_free(&g);
}

Test(fakepod, batch_grouping_flush_and_raw)
{
	/* The example bytes of docs/events.md ("Example bytes"). */
	static const char example_hex[] =
		"93cb3ff8000000000000919" "8ab426c6f636b53746f72656491cff1e2d3c4b5a69788c09401"
		"02030404c0a3475055c000";
	struct got g = { 0 };
	uint64_t h[2];
	void *sub;

	spawn("--script", "-", "--pub", tu_endpoint(0), "--wait-subscribers", "1",
	      "--linger-ms", "0", "--batch", "3", NULL);
	sub = sock(ZMQ_SUB, tu_endpoint(0));
	say("store - %s", token_list(1, 16));
	read_hashes(&h[0], 1);
	say("store 0x%llx %s", (unsigned long long)h[0], token_list(17, 16));
	read_hashes(&h[1], 1);
	set_timeout(sub, 200);
	cr_assert_not(recv_batch(sub, &g), "a batch of 2 events went out with --batch 3");
	set_timeout(sub, RCV_MS);
	say("remove %llx", (unsigned long long)h[0]);
	expect_batch(sub, &g, 0);
	cr_assert_eq(g.b.nevents, 3);
	assert_stored(&g.b.events[0], &h[0], 1, false, 0, 1);
	assert_stored(&g.b.events[1], &h[1], 1, true, h[0], 17);
	cr_assert_eq(g.b.events[2].type, KVW_BLOCK_REMOVED);

	say("clear");
	say("flush");
	expect_batch(sub, &g, 1);
	cr_assert_eq(g.b.nevents, 1);
	cr_assert_eq(g.b.events[0].type, KVW_ALL_BLOCKS_CLEARED);

	/* raw publishes its bytes as they are, well-formed or not. */
	say("raw %s", example_hex);
	expect_batch(sub, &g, 2);
	cr_assert_eq(g.len, sizeof example_hex / 2);
	cr_assert_eq(g.b.nevents, 1);
	cr_assert_eq(g.b.events[0].hashes[0], 0xF1E2D3C4B5A69788ull);
	say("raw c1 00");
	{
		struct msg m;
		uint64_t seq;

		cr_assert(recv_msg(sub, &m));
		cr_assert_eq(m.n, 3);
		cr_assert(kvw_seq_get(m.data[1], m.len[1], &seq) && seq == 3);
		cr_assert_eq(m.len[2], 2);
		cr_assert(m.data[2][0] == 0xc1 && m.data[2][1] == 0x00);
		msg_free(&m);
	}

	/* SIGUSR1 drops the pending batch: the old process never published it. */
	say("store - %s", token_list(1, 16));
	read_hashes(&h[0], 1); /* the store has been run */
	cr_assert_eq(kill(child.pid, SIGUSR1), 0);
	say("clear");
	say("clear");
	say("clear");
	expect_batch(sub, &g, 0);
	cr_assert_eq(g.b.nevents, 3);
	for (int i = 0; i < 3; i++)
		cr_assert_eq(g.b.events[i].type, KVW_ALL_BLOCKS_CLEARED);
	got_free(&g);
}

/* The suite of the same tests' windows of time (make stress): a loaded machine can miss them. */
TestSuite(timing_fakepod, .init = setup, .fini = teardown, .timeout = 120);

/* timed: also that the hashes and an undelayed batch come at once (within 250 ms). */
static void delay_holds(bool timed)
{
	struct got g = { 0 };
	uint64_t h, t0, t_hash;
	void *sub;

	spawn("--script", "-", "--pub", tu_endpoint(0), "--wait-subscribers", "1",
	      "--linger-ms", "0", NULL);
	sub = sock(ZMQ_SUB, tu_endpoint(0));
	say("store - %s", token_list(1, 16)); /* also proves the subscription is live */
	expect_batch(sub, &g, 0);
	say("delay 300ms");
	t0 = now_ms();
	say("store - %s", token_list(1, 32));
	read_hashes(&h, 1);
	t_hash = now_ms();
	expect_batch(sub, &g, 1);
	if (timed)
		cr_assert_lt(t_hash - t0, 250, "hashes printed after %llu ms",
			     (unsigned long long)(t_hash - t0));
	cr_assert_geq(g.at_ms - t0, 290, "delayed batch arrived after %llu ms",
		      (unsigned long long)(g.at_ms - t0));
	say("delay 0");
	t0 = now_ms();
	say("clear");
	expect_batch(sub, &g, 2);
	if (timed)
		cr_assert_lt(g.at_ms - t0, 250);
	got_free(&g);
}

Test(fakepod, delay_holds_publication_not_hashes)
{
	delay_holds(false);
}

Test(timing_fakepod, delay_holds_publication_not_hashes)
{
	delay_holds(true);
}

/* ---- replay ---------------------------------------------------------------------------------- */

static void replay_request(void *dealer, bool delim, uint64_t start)
{
	unsigned char seq8[8];
	const void *d[2] = { "", seq8 };
	size_t l[2] = { 0, 8 };

	kvw_seq_put(seq8, start);
	if (delim)
		send_msg(dealer, 2, d, l);
	else
		send_msg(dealer, 1, d + 1, l + 1);
}

/* Receives one replay message and checks its framing; returns its seq. */
static uint64_t replay_recv(void *dealer, bool delim, bool topic_frame, const char *topic,
			    const struct got *live, size_t nlive)
{
	struct msg m;
	int k = 0;
	uint64_t seq;

	cr_assert(recv_msg(dealer, &m), "no replay message; child stderr: %s", child_stderr());
	cr_assert_eq(m.n, (int)delim + (int)topic_frame + 2, "replay message of %d frames", m.n);
	if (delim)
		cr_assert_eq(m.len[k++], 0, "no empty delimiter");
	if (topic_frame) {
		cr_assert_str_eq((char *)m.data[k], topic);
		k++;
	}
	cr_assert(kvw_seq_get(m.data[k], m.len[k], &seq));
	if (seq == KVW_SEQ_END) {
		cr_assert_eq(m.len[k + 1], 0, "end marker with a payload");
	} else {
		bool found = false;

		for (size_t i = 0; i < nlive; i++) {
			if (live[i].seq != seq)
				continue;
			found = true;
			cr_assert_eq(m.len[k + 1], live[i].len);
			cr_assert_eq(memcmp(m.data[k + 1], live[i].payload, live[i].len), 0,
				     "replayed payload of seq %llu differs", (unsigned long long)seq);
		}
		cr_assert(found, "replayed seq %llu never published", (unsigned long long)seq);
	}
	msg_free(&m);
	return seq;
}

Test(fakepod, replay_new_framing_keep_and_lose)
{
	struct got g[8] = { 0 };
	const char *topic;
	void *sub, *dealer, *bare;

	spawn("--script", "-", "--pub", tu_endpoint(0), "--replay", tu_endpoint(1), "--keep", "3",
	      "--wait-subscribers", "1", "--linger-ms", "0", NULL);
	sub = sock(ZMQ_SUB, tu_endpoint(0));
	for (int i = 0; i < 5; i++) {
		say("store - %s", token_list((uint32_t)i * 16, 16));
		expect_batch(sub, &g[i], (uint64_t)i);
	}
	topic = g[0].topic;
	/* lose: seq 5 is kept for replay but never sent. */
	say("lose 1");
	say("store - %s", token_list(1000, 16));
	say("store - %s", token_list(2000, 16));
	expect_batch(sub, &g[6], 6);

	dealer = sock(ZMQ_DEALER, tu_endpoint(1));
	/* From 5: the lost batch is there (its payload is checked against nothing live). */
	replay_request(dealer, true, 6);
	cr_assert_eq(replay_recv(dealer, true, true, topic, g, 8), 6);
	cr_assert_eq(replay_recv(dealer, true, true, topic, g, 8), KVW_SEQ_END);
	/* From 0, older than the oldest kept (--keep 3: seqs 4, 5, 6): starts at 4. */
	replay_request(dealer, true, 0);
	cr_assert_eq(replay_recv(dealer, true, true, topic, g, 5), 4);
	{
		struct msg m;

		cr_assert(recv_msg(dealer, &m));
		cr_assert_eq(m.n, 4);
		cr_assert(kvw_seq_get(m.data[2], 8, &g[5].seq) && g[5].seq == 5);
		cr_assert_eq(kvw_decode_batch(m.data[3], m.len[3], &g[5].b, NULL, 0), 0);
		cr_assert_eq(g[5].b.events[0].tokens[0], 1000, "the lost batch");
		msg_free(&m);
	}
	cr_assert_eq(replay_recv(dealer, true, true, topic, g, 8), 6);
	cr_assert_eq(replay_recv(dealer, true, true, topic, g, 8), KVW_SEQ_END);

	/* A DEALER that sends [seq8] without the delimiter gets replies without it. */
	bare = sock(ZMQ_DEALER, tu_endpoint(1));
	replay_request(bare, false, 6);
	cr_assert_eq(replay_recv(bare, false, true, topic, g, 8), 6);
	cr_assert_eq(replay_recv(bare, false, true, topic, g, 8), KVW_SEQ_END);

	/* A past the end start: just the end marker. */
	replay_request(dealer, true, 100);
	cr_assert_eq(replay_recv(dealer, true, true, topic, g, 8), KVW_SEQ_END);
	for (int i = 0; i < 8; i++)
		got_free(&g[i]);
}

Test(fakepod, replay_old_framing)
{
	struct got g[2] = { 0 };
	void *sub, *dealer;

	spawn("--script", "-", "--pub", tu_endpoint(0), "--replay", tu_endpoint(1),
	      "--old-replay-framing", "--wait-subscribers", "1", "--linger-ms", "0", NULL);
	sub = sock(ZMQ_SUB, tu_endpoint(0));
	say("store - %s", token_list(1, 16));
	expect_batch(sub, &g[0], 0);
	say("clear");
	expect_batch(sub, &g[1], 1);
	dealer = sock(ZMQ_DEALER, tu_endpoint(1));
	replay_request(dealer, true, 0);
	cr_assert_eq(replay_recv(dealer, true, false, NULL, g, 2), 0);
	cr_assert_eq(replay_recv(dealer, true, false, NULL, g, 2), 1);
	cr_assert_eq(replay_recv(dealer, true, false, NULL, g, 2), KVW_SEQ_END);
	got_free(&g[0]);
	got_free(&g[1]);
}

/* ---- HTTP --------------------------------------------------------------------------------------- */

/* "127.0.0.1:PORT" of tu_port(n), for --http. */
static const char *haddr(int n)
{
	static char b[10][32];

	snprintf(b[n], sizeof b[n], "127.0.0.1:%d", tu_port(n));
	return b[n];
}

/* POST /v1/completions of tokens t[0, n) (model NULL: none given); returns the status. */
static long complete(int port_n, const char *model, const uint32_t *t, size_t n,
		     const char *const *hdrs, struct tu_http *r)
{
	static char body[1 << 16];
	size_t k = 0;

	k += (size_t)snprintf(body + k, sizeof body - k, "{");
	if (model)
		k += (size_t)snprintf(body + k, sizeof body - k, "\"model\":\"%s\",", model);
	k += (size_t)snprintf(body + k, sizeof body - k, "\"max_tokens\":2,\"prompt\":[");
	for (size_t i = 0; i < n; i++)
		k += (size_t)snprintf(body + k, sizeof body - k, "%s%u", i ? "," : "", t[i]);
	snprintf(body + k, sizeof body - k, "]}");
	tu_http(tu_url(port_n, "/v1/completions"), body, hdrs, RCV_MS, r);
	return r->status;
}

static long long cached_of(const struct tu_http *r)
{
	return tu_json_int(r->body, "usage.prompt_tokens_details.cached_tokens");
}

/* timed: also the answer within 150 ms and the event within 600 ms. */
static void cached_tokens_and_delayed_event(bool timed)
{
	struct got g = { 0 };
	struct tu_http r;
	uint32_t t[80];
	uint64_t h[5], t0;
	char topic[64];
	void *sub;

	spawn("--http", haddr(1), "--pub", tu_endpoint(0), "--prefill-ms", "20",
	      "--event-delay-ms", "200", "--wait-subscribers", "1", "--linger-ms", "0", NULL);
	sub = sock(ZMQ_SUB, tu_endpoint(0));
	seq_tokens(t, 500, 80);
	for (int i = 0; i < 5; i++)
		h[i] = engine_hash(i ? h[i - 1] : 0, t + 16 * i, 16);

	/* A prompt without a full block stores nothing; its answer shows the pod has started. */
	cr_assert_eq(complete(1, "fake-model", t, 15, NULL, &r), 200, "%s; stderr %s", r.body,
		     child_stderr());
	cr_assert_eq(cached_of(&r), 0);
	cr_assert_eq(tu_json_int(r.body, "usage.prompt_tokens"), 15);
	cr_assert_eq(tu_json_int(r.body, "usage.completion_tokens"), 2);
	cr_assert(strstr(r.body, "\"object\":\"text_completion\""), "%s", r.body);
	tu_http_free(&r);

	t0 = now_ms();
	cr_assert_eq(complete(1, "fake-model", t, 64, NULL, &r), 200);
	cr_assert_eq(cached_of(&r), 0);
	uint64_t t_answer = now_ms();
	cr_assert_geq(t_answer - t0, 18, "answered before the prefill time");
	if (timed)
		cr_assert_lt(t_answer - t0, 150, "answer took %llu ms",
			     (unsigned long long)(t_answer - t0));
	tu_http_free(&r);
	expect_batch(sub, &g, 0);
	cr_assert_geq(g.at_ms - t0, 195, "BlockStored after %llu ms, before --event-delay-ms",
		      (unsigned long long)(g.at_ms - t0));
	if (timed)
		cr_assert_lt(g.at_ms - t0, 600, "BlockStored after %llu ms",
			     (unsigned long long)(g.at_ms - t0));
	snprintf(topic, sizeof topic, "kv@127.0.0.1:%d@fake-model", tu_port(1));
	cr_assert_str_eq(g.topic, topic, "the pod is the HTTP address");
	cr_assert_eq(g.b.nevents, 1);
	assert_stored(&g.b.events[0], h, 4, false, 0, 500);

	/* The same prefix plus one block (no model given): 64 tokens cached, one block stored,
	 * chained. */
	cr_assert_eq(complete(1, NULL, t, 80, NULL, &r), 200);
	cr_assert_eq(cached_of(&r), 64);
	tu_http_free(&r);
	expect_batch(sub, &g, 1);
	assert_stored(&g.b.events[0], &h[4], 1, true, h[3], 500 + 64);

	/* Fully cached: the last block is recomputed (vLLM), and nothing new is published. */
	cr_assert_eq(complete(1, "fake-model", t, 80, NULL, &r), 200);
	cr_assert_eq(cached_of(&r), 64);
	tu_http_free(&r);
	/* Another model: 404, an OpenAI-style error. */
	cr_assert_eq(complete(1, "other-model", t, 80, NULL, &r), 404);
	cr_assert_eq(tu_json_int(r.body, "error.code"), 404, "%s", r.body);
	cr_assert(strstr(r.body, "The model `other-model` does not exist."), "%s", r.body);
	tu_http_free(&r);
	set_timeout(sub, 400);
	cr_assert_not(recv_batch(sub, &g), "unexpected batch seq %llu", (unsigned long long)g.seq);
	got_free(&g);
}

Test(fakepod, http_cached_tokens_and_delayed_event)
{
	cached_tokens_and_delayed_event(false);
}

Test(timing_fakepod, http_cached_tokens_and_delayed_event)
{
	cached_tokens_and_delayed_event(true);
}

/* Every endpoint, streaming and not, the stand-in tokenizer, the errors.
 * stays whole: one scenario against one pod, from start to end. */
Test(fakepod, http_endpoints_and_errors)
{
	const char *id[] = { "X-Request-Id: test-42", NULL };
	struct tu_http r;

	spawn("--http", haddr(1), "--pub", tu_endpoint(0), "--prefill-ms", "30",
	      "--event-delay-ms", "30", "--linger-ms", "0", NULL);
	cr_assert(TU_WAIT_FOR((tu_http(tu_url(1, "/health"), NULL, NULL, 500, &r), r.status == 200)
			      || (tu_http_free(&r), false), 15000), "no /health");
	tu_http_free(&r);
	tu_http(tu_url(1, "/v1/models"), NULL, NULL, RCV_MS, &r);
	cr_assert_eq(r.status, 200);
	cr_assert(strstr(r.body, "\"id\":\"fake-model\"") && strstr(r.body, "\"object\":\"list\""),
		  "%s", r.body);
	tu_http_free(&r);

	/* The stand-in tokenizer: one token per byte; the chat template around messages. */
	tu_http(tu_url(1, "/tokenize"), "{\"prompt\":\"ab c\"}", NULL, RCV_MS, &r);
	cr_assert_eq(r.status, 200);
	cr_assert(strstr(r.body, "\"count\":4") && strstr(r.body, "\"tokens\":[97,98,32,99]"),
		  "%s", r.body);
	tu_http_free(&r);
	tu_http(tu_url(1, "/tokenize"),
		"{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
		"\"add_generation_prompt\":false}", NULL, RCV_MS, &r);
	cr_assert(strstr(r.body, "\"tokens\":[60,124,117,115,101,114,124,62,10,104,105,10]"),
		  "<|user|>\\nhi\\n: %s", r.body);
	tu_http_free(&r);

	/* A text prompt repeated: cached tokens from the simulated prefix cache. */
	static const char text[] = "{\"prompt\":\"0123456789abcdef0123456789abcdef.\","
				   "\"max_tokens\":3}";
	tu_http(tu_url(1, "/v1/completions"), text, id, RCV_MS, &r);
	cr_assert_eq(r.status, 200);
	cr_assert_str_eq(r.reqid, "test-42", "X-Request-Id echoed");
	cr_assert(strstr(r.body, "\"id\":\"cmpl-test-42\"") && strstr(r.body, "\" t0 t1 t2\""),
		  "%s", r.body);
	cr_assert_eq(tu_json_int(r.body, "usage.prompt_tokens"), 33);
	cr_assert_eq(cached_of(&r), 0);
	tu_http_free(&r);
	tu_http(tu_url(1, "/v1/completions"), text, NULL, RCV_MS, &r);
	cr_assert_eq(cached_of(&r), 32, "%s", r.body);
	tu_http_free(&r);

	/* Streaming: one event per chunk, the first after prefill, usage at the end when asked. */
	tu_http(tu_url(1, "/v1/completions"),
		"{\"prompt\":\"0123456789abcdef0123456789abcdef!\",\"max_tokens\":3,"
		"\"stream\":true,\"stream_options\":{\"include_usage\":true}}", NULL, RCV_MS, &r);
	cr_assert_eq(r.status, 200);
	cr_assert(strstr(r.ctype, "text/event-stream"), "%s", r.ctype);
	cr_assert_geq(r.t_first_ns - r.t_start_ns, 25000000ull, "first chunk before the prefill");
	const char *p = r.body;
	int events = 0;
	while ((p = strstr(p, "data: ")))
		events++, p++;
	cr_assert_eq(events, 3 + 1 + 1, "3 tokens, usage, [DONE]: %s", r.body);
	cr_assert(strstr(r.body, "\"choices\":[],\"usage\":{\"prompt_tokens\":33,"), "%s", r.body);
	cr_assert(strstr(r.body, "\"cached_tokens\":32}"), "%s", r.body);
	cr_assert(strstr(r.body, "\"finish_reason\":\"length\""), "%s", r.body);
	cr_assert(strstr(r.body, "data: [DONE]\n\n"), "%s", r.body);
	cr_assert_gt(r.chunks, 1, "streamed in pieces");
	tu_http_free(&r);
	tu_http(tu_url(1, "/v1/chat/completions"),
		"{\"messages\":[{\"role\":\"user\",\"content\":\"hello\"}],\"max_tokens\":2,"
		"\"stream\":true}", NULL, RCV_MS, &r);
	cr_assert_eq(r.status, 200);
	cr_assert(strstr(r.body, "\"object\":\"chat.completion.chunk\"") &&
		  strstr(r.body, "\"delta\":{\"role\":\"assistant\",\"content\":\"\"}") &&
		  !strstr(r.body, "\"usage\""), "%s", r.body);
	tu_http_free(&r);
	tu_http(tu_url(1, "/v1/chat/completions"),
		"{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":"
		"\"hello\"}]}],\"max_completion_tokens\":1}", NULL, RCV_MS, &r);
	cr_assert_eq(r.status, 200);
	cr_assert(strstr(r.body, "\"message\":{\"role\":\"assistant\",\"content\":\" t0\""), "%s",
		  r.body);
	cr_assert_eq(tu_json_int(r.body, "usage.prompt_tokens"), 9 + 5 + 1 + 14);
	tu_http_free(&r);

	/* Errors, OpenAI-style, with their status codes. */
	static const struct {
		const char *path, *body;
		long status;
		const char *msg;
	} bad[] = {
		{ "/v1/completions", "{\"prompt\":", 400, "not JSON" },
		{ "/v1/completions", "[1,2]", 400, "JSON object" },
		{ "/v1/completions", "{\"max_tokens\":2}", 400, "'prompt' is required" },
		{ "/v1/completions", "{\"prompt\":[1,-2]}", 400, "'prompt'[1]" },
		{ "/v1/completions", "{\"prompt\":[]}", 400, "non-empty" },
		{ "/v1/completions", "{\"prompt\":[\"a\",\"b\"]}", 400, "one prompt per request" },
		{ "/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":0}", 400, "max_tokens" },
		{ "/v1/completions", "{\"prompt\":\"a\",\"stream\":1}", 400, "'stream'" },
		{ "/v1/chat/completions", "{\"messages\":[]}", 400, "messages" },
		{ "/v1/chat/completions", "{\"messages\":[{\"content\":\"x\"}]}", 400, "role" },
		{ "/tokenize", "{}", 400, "'prompt' or 'messages'" },
		{ "/v1/nothing", "{}", 404, "no such endpoint" },
		{ "/health", "{}", 405, "takes GET" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		tu_http(tu_url(1, bad[i].path), bad[i].body, NULL, RCV_MS, &r);
		cr_assert_eq(r.status, bad[i].status, "%s %s: %ld %s", bad[i].path, bad[i].body,
			     r.status, r.body);
		cr_assert_eq(tu_json_int(r.body, "error.code"), bad[i].status, "%s", r.body);
		cr_assert(strstr(r.body, bad[i].msg), "%s: %s lacks %s", bad[i].body, r.body,
			  bad[i].msg);
		cr_assert(strstr(r.ctype, "application/json"));
		tu_http_free(&r);
	}
	tu_http(tu_url(1, "/v1/completions"), NULL, NULL, RCV_MS, &r);
	cr_assert_eq(r.status, 405, "GET of a POST endpoint");
	tu_http_free(&r);
}

Test(fakepod, http_failed_and_cancelled_store_nothing)
{
	static const char *const rates[] = { "--fail-rate", "--cancel-rate" };

	for (int k = 0; k < 2; k++) {
		struct got g = { 0 };
		struct tu_http r;
		uint32_t t[32];
		void *sub;

		spawn("--http", haddr(2 * k + 1), "--pub", tu_endpoint(2 * k), rates[k], "1",
		      "--prefill-ms", "10", "--event-delay-ms", "50", "--wait-subscribers", "1",
		      "--linger-ms", "0", NULL);
		sub = sock(ZMQ_SUB, tu_endpoint(2 * k));
		seq_tokens(t, 1, 32);
		for (int i = 0; i < 2; i++) {
			complete(2 * k + 1, "fake-model", t, 32, NULL, &r);
			if (k == 0) {
				cr_assert_eq(r.status, 500, "%s 1: %ld %s", rates[k], r.status, r.body);
				cr_assert_eq(tu_json_int(r.body, "error.code"), 500, "%s", r.body);
			} else {
				cr_assert_eq(r.rc, CURLE_GOT_NOTHING, "%s 1: rc %d status %ld",
					     rates[k], r.rc, r.status);
			}
			tu_http_free(&r);
		}
		set_timeout(sub, 300);
		cr_assert_not(recv_batch(sub, &g), "%s 1: a batch was published", rates[k]);
		kill_child();
		got_free(&g);
	}
}

/* A client that leaves before the end of prefill cancels its request: nothing stored. The
 * prefill (2 s) is long against the client's 60 ms, so that only a hung machine lets the
 * client leave after it. */
Test(fakepod, http_client_gone_cancels)
{
	struct got g = { 0 };
	struct tu_http r;
	uint32_t t[32];
	void *sub;

	spawn("--http", haddr(1), "--pub", tu_endpoint(0), "--prefill-ms", "2000",
	      "--event-delay-ms", "300", "--wait-subscribers", "1", "--linger-ms", "0", NULL);
	sub = sock(ZMQ_SUB, tu_endpoint(0));
	seq_tokens(t, 1, 32);
	/* Wait for the pod to start: a prompt without a full block. */
	cr_assert_eq(complete(1, NULL, t, 8, NULL, &r), 200);
	tu_http_free(&r);
	tu_http(tu_url(1, "/v1/completions"), "{\"prompt\":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,"
		"16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32]}", NULL, 60, &r);
	cr_assert_eq(r.rc, CURLE_OPERATION_TIMEDOUT);
	tu_http_free(&r);
	set_timeout(sub, 2700); /* past its prefill and event delay */
	cr_assert_not(recv_batch(sub, &g), "a cancelled request stored blocks");
	cr_assert_eq(complete(1, NULL, t, 32, NULL, &r), 200);
	cr_assert_eq(cached_of(&r), 0, "a cancelled request's blocks were cached");
	tu_http_free(&r);
	cr_assert_eq(kill(child.pid, SIGTERM), 0);
	cr_assert_eq(tu_child_wait(&child, 15000), 0);
	cr_assert(strstr(child_stderr(), "ok=2 failed=0 cancelled=1 "), "%s", child_stderr());
	got_free(&g);
}

/* X-Fakepod-Fault: a forced failure, a restart, a delayed event, a bad fault. */
Test(fakepod, http_fault_header)
{
	const char *fail[] = { "X-Fakepod-Fault: fail", NULL };
	const char *delay[] = { "X-Fakepod-Fault: delay=300ms", NULL };
	const char *restart[] = { "X-Fakepod-Fault: restart", NULL };
	const char *bogus[] = { "X-Fakepod-Fault: explode", NULL };
	struct got g = { 0 };
	struct tu_http r;
	uint32_t t[32];
	uint64_t t0;
	void *sub;

	spawn("--http", haddr(1), "--pub", tu_endpoint(0), "--prefill-ms", "5",
	      "--event-delay-ms", "5", "--wait-subscribers", "1", "--linger-ms", "0", NULL);
	sub = sock(ZMQ_SUB, tu_endpoint(0));
	seq_tokens(t, 1, 32);
	cr_assert_eq(complete(1, NULL, t, 32, fail, &r), 500, "%s", r.body);
	tu_http_free(&r);
	set_timeout(sub, 200);
	cr_assert_not(recv_batch(sub, &g), "a failed prefill stored blocks");
	set_timeout(sub, RCV_MS);
	t0 = now_ms();
	cr_assert_eq(complete(1, NULL, t, 32, delay, &r), 200);
	tu_http_free(&r);
	expect_batch(sub, &g, 0);
	cr_assert_geq(g.at_ms - t0, 290, "delay=300: the batch came after %llu ms",
		      (unsigned long long)(g.at_ms - t0));
	cr_assert_eq(complete(1, NULL, t, 32, restart, &r), 500);
	tu_http_free(&r);
	cr_assert_eq(complete(1, NULL, t, 32, NULL, &r), 200);
	cr_assert_eq(cached_of(&r), 0, "the restart left the cache");
	tu_http_free(&r);
	expect_batch(sub, &g, 0); /* the sequence starts over */
	cr_assert_eq(complete(1, NULL, t, 32, bogus, &r), 400);
	cr_assert(strstr(r.body, "unknown fault 'explode'"), "%s", r.body);
	tu_http_free(&r);
	const char *bare[] = { "X-Fakepod-Fault: delay=300", NULL };
	cr_assert_eq(complete(1, NULL, t, 32, bare, &r), 400);
	cr_assert(strstr(r.body, "bad delay '300': needs a unit"), "%s", r.body);
	tu_http_free(&r);
	got_free(&g);
}

Test(fakepod, http_dropped_event_still_caches)
{
	const char *err;
	struct got g = { 0 };
	struct tu_http r;
	uint32_t t[32];
	void *sub;

	spawn("--http", haddr(1), "--pub", tu_endpoint(0), "--drop-events", "1",
	      "--prefill-ms", "5", "--event-delay-ms", "20", "--wait-subscribers", "1",
	      "--linger-ms", "0", NULL);
	sub = sock(ZMQ_SUB, tu_endpoint(0));
	seq_tokens(t, 1, 32);
	cr_assert_eq(complete(1, "fake-model", t, 32, NULL, &r), 200);
	cr_assert_eq(cached_of(&r), 0);
	tu_http_free(&r);
	cr_assert_eq(complete(1, "fake-model", t, 32, NULL, &r), 200);
	cr_assert_eq(cached_of(&r), 16, "the pod holds the blocks its event never announced");
	tu_http_free(&r);
	set_timeout(sub, 200);
	cr_assert_not(recv_batch(sub, &g), "a dropped event was published");

	/* A malformed request gets a 400 and does not stop the server. */
	tu_http(tu_url(1, "/v1/completions"), "\x93\x01", NULL, RCV_MS, &r);
	cr_assert_eq(r.status, 400);
	tu_http_free(&r);
	cr_assert_eq(complete(1, "fake-model", t, 8, NULL, &r), 200);
	tu_http_free(&r);

	/* SIGUSR1 empties the cache (the pod handles the signal when it next runs: until then a
	 * request still finds the blocks). */
	cr_assert_eq(kill(child.pid, SIGUSR1), 0);
	cr_assert(TU_WAIT_FOR((complete(1, "fake-model", t, 32, NULL, &r) == 200 &&
			       cached_of(&r) == 0) || (tu_http_free(&r), false), 15000),
		  "cache survived a restart");
	tu_http_free(&r);

	cr_assert_eq(kill(child.pid, SIGTERM), 0);
	cr_assert_eq(tu_child_wait(&child, 15000), 0);
	err = child_stderr();
	cr_assert(strstr(err, "requests=5 ok=4 failed=0 cancelled=0 events_dropped=2 "
			      "bad_requests=1"), "summary: %s", err);
	got_free(&g);
}

Test(fakepod, script_clear_empties_the_served_cache)
{
	struct got g = { 0 };
	struct tu_http r;
	uint32_t t[48];
	void *sub;

	spawn("--script", "-", "--http", haddr(1), "--pub", tu_endpoint(0),
	      "--prefill-ms", "0", "--event-delay-ms", "0", "--wait-subscribers", "1",
	      "--linger-ms", "0", NULL);
	sub = sock(ZMQ_SUB, tu_endpoint(0));
	seq_tokens(t, 7, 48);
	cr_assert_eq(complete(1, "fake-model", t, 48, NULL, &r), 200);
	cr_assert_eq(cached_of(&r), 0);
	tu_http_free(&r);
	expect_batch(sub, &g, 0);
	cr_assert_eq(complete(1, "fake-model", t, 40, NULL, &r), 200);
	cr_assert_eq(cached_of(&r), 32);
	tu_http_free(&r);
	say("clear");
	expect_batch(sub, &g, 1);
	cr_assert_eq(g.b.events[0].type, KVW_ALL_BLOCKS_CLEARED);
	cr_assert_eq(complete(1, "fake-model", t, 40, NULL, &r), 200);
	cr_assert_eq(cached_of(&r), 0, "clear left blocks in the cache");
	tu_http_free(&r);
	/* The pod stores them again: a new BlockStored with the same engine hashes. */
	expect_batch(sub, &g, 2);
	cr_assert_eq(g.b.events[0].nhashes, 2);
	got_free(&g);
}

/* ---- workload --------------------------------------------------------------------------------- */

static bool in_set(const uint64_t *v, size_t n, uint64_t x)
{
	for (size_t i = 0; i < n; i++)
		if (v[i] == x)
			return true;
	return false;
}

static void set_del(uint64_t *v, size_t *n, uint64_t x)
{
	for (size_t i = 0; i < *n; i++)
		if (v[i] == x) {
			v[i] = v[--*n];
			return;
		}
}

Test(fakepod, workload_count_chains_and_evictions)
{
	struct got g = { 0 };
	uint64_t cached[64], t0 = now_ms();
	size_t ncached = 0, nremoved = 0, nstored = 0, nevents = 0;
	const char *err;
	void *sub;

	spawn("--pub", tu_endpoint(0), "--count", "40", "--batch", "4", "--rate", "200",
	      "--prefixes", "3", "--prefix-blocks", "4", "--suffix-blocks", "1", "--cache-blocks",
	      "10", "--wait-subscribers", "1", "--linger-ms", "100", NULL);
	sub = sock(ZMQ_SUB, tu_endpoint(0));
	for (uint64_t seq = 0; seq < 10; seq++) {
		expect_batch(sub, &g, seq);
		cr_assert_eq(g.b.nevents, 4);
		for (size_t i = 0; i < g.b.nevents; i++) {
			const struct kvw_event *ev = &g.b.events[i];

			nevents++;
			if (ev->type == KVW_BLOCK_REMOVED) {
				for (size_t k = 0; k < ev->nhashes; k++) {
					cr_assert(in_set(cached, ncached, ev->hashes[k]),
						  "removed a block never stored");
					set_del(cached, &ncached, ev->hashes[k]);
				}
				nremoved += ev->nhashes;
				continue;
			}
			cr_assert_eq(ev->type, KVW_BLOCK_STORED);
			cr_assert(!ev->has_parent || in_set(cached, ncached, ev->parent),
				  "parent not cached");
			cr_assert_eq(ev->ntokens, ev->nhashes * 16);
			for (size_t k = 0; k < ev->nhashes; k++) {
				uint64_t parent = k ? ev->hashes[k - 1] : ev->has_parent ? ev->parent : 0;

				cr_assert_eq(ev->hashes[k], engine_hash(parent, ev->tokens + 16 * k, 16));
				cr_assert_not(in_set(cached, ncached, ev->hashes[k]), "stored twice");
				cached[ncached++] = ev->hashes[k];
			}
			nstored += ev->nhashes;
		}
		cr_assert_leq(ncached, 10, "more blocks cached than --cache-blocks");
	}
	cr_assert_eq(nevents, 40);
	cr_assert_gt(nremoved, 0, "no eviction");
	/* 40 events at 200/s: the last batch is due 180 ms after the first, which comes after
	 * the spawn. From the spawn, not from the first batch's receipt: a test process that
	 * read the first batch late would shorten the span it measures (flaky under load). */
	cr_assert_geq(g.at_ms - t0, 150, "rate not honoured: %llu ms",
		      (unsigned long long)(g.at_ms - t0));
	cr_assert_eq(tu_child_wait(&child, 15000), 0);
	err = child_stderr();
	cr_assert(strstr(err, "events=40 batches=10 "), "summary: %s", err);
	(void)nstored;
	got_free(&g);
}

Test(fakepod, duration_ends_http_mode)
{
	uint64_t t0 = now_ms();
	int rc = RUN("--http", haddr(1), "--pub", tu_endpoint(0), "--duration", "300ms",
		     "--linger-ms", "0");

	cr_assert_eq(rc, 0);
	cr_assert_geq(now_ms() - t0, 290);
	cr_assert(strstr(child_stderr(), "requests=0 "));
}

/* ---- the pod model (tools/fakepod/engine.c) -------------------------------------------------- */

/*
 * Times are asserted in model time, as the pod reports them (X-Fakepod-*-Seconds, /metrics):
 * exact values where the engine was idle when the request arrived, orderings otherwise; no
 * assertion on the wall clock.
 */

/* POST /v1/completions of tokens [from, from + n) with max_tokens mt; returns the status. */
static long model_complete(int port_n, uint32_t from, size_t n, unsigned mt,
			   const char *const *hdrs, struct tu_http *r)
{
	char body[1 << 16]; /* not static: bg_run() calls this from two threads at once */
	size_t k = 0;

	k += (size_t)snprintf(body + k, sizeof body - k, "{\"max_tokens\":%u,\"prompt\":[", mt);
	for (size_t i = 0; i < n; i++)
		k += (size_t)snprintf(body + k, sizeof body - k, "%s%u", i ? "," : "",
				      from + (unsigned)i);
	snprintf(body + k, sizeof body - k, "]}");
	tu_http(tu_url(port_n, "/v1/completions"), body, hdrs, 60000, r);
	return r->status;
}

/* A model-time header, in microseconds (-1 if absent). */
static long long header_us(const char *v)
{
	return *v ? (long long)(strtod(v, NULL) * 1e6 + 0.5) : -1;
}

/* The value of the series "NAME{labels} V" of a /metrics text (the first one), or -1. */
static double metric(const char *text, const char *name)
{
	size_t n = strlen(name);

	for (const char *p = text; (p = strstr(p, name)); p += n)
		if ((p == text || p[-1] == '\n') && (p[n] == '{' || p[n] == ' ')) {
			const char *v = strchr(p, ' ');

			return v ? strtod(v + 1, NULL) : -1;
		}
	return -1;
}

static double get_metric(int port_n, const char *name)
{
	struct tu_http r;
	double v;

	tu_http(tu_url(port_n, "/metrics"), NULL, NULL, RCV_MS, &r);
	cr_assert_eq(r.status, 200, "GET /metrics: %ld", r.status);
	v = metric(r.body, name);
	tu_http_free(&r);
	return v;
}

Test(fakepod, model_ttft_grows_with_uncached_tokens)
{
	const char *fail[] = { "X-Fakepod-Fault: fail", NULL };
	struct tu_http r;
	long long a, b, c;

	/* Steps of 10 ms plus 0.1 ms per prefill token (10000 tokens/s), run 100 times as
	 * fast as real time; every request arrives at an idle engine. */
	spawn("--http", haddr(1), "--pub", tu_endpoint(0), "--time-scale", "100",
	      "--step-overhead-ms", "10", "--prefill-tokens-per-s", "10000",
	      "--decode-ms-per-seq", "1", "--kv-blocks", "1024", "--linger-ms", "0", NULL);
	cr_assert_eq(model_complete(1, 100, 320, 2, NULL, &r), 200, "%s; stderr %s", r.body,
		     child_stderr());
	a = header_us(r.ttft);
	cr_assert_eq(cached_of(&r), 0);
	cr_assert_eq(a, 10000 + 32000, "320 uncached tokens: TTFT %lld us", a);
	cr_assert_eq(header_us(r.queue), 0);
	tu_http_free(&r);

	/* The same prompt: 19 blocks hit (the last token is recomputed), 16 tokens to compute. */
	cr_assert_eq(model_complete(1, 100, 320, 2, NULL, &r), 200);
	b = header_us(r.ttft);
	cr_assert_eq(cached_of(&r), 304);
	cr_assert_eq(b, 10000 + 1600, "16 uncached tokens: TTFT %lld us", b);
	tu_http_free(&r);

	/* Twice the uncached tokens, one step (the 8192-token budget holds it). */
	cr_assert_eq(model_complete(1, 5000, 640, 2, NULL, &r), 200);
	c = header_us(r.ttft);
	cr_assert_eq(c, 10000 + 64000, "640 uncached tokens: TTFT %lld us", c);
	cr_assert(b < a && a < c);
	tu_http_free(&r);

	/* Chunked prefill: 10000 tokens take two steps (8192 + 1808). */
	cr_assert_eq(model_complete(1, 20000, 10000, 1, NULL, &r), 200);
	cr_assert_eq(header_us(r.ttft), 2 * 10000 + 1000000, "TTFT %s", r.ttft);
	tu_http_free(&r);

	/* A failed prefill (fault header) answers 500 and caches nothing. */
	cr_assert_eq(model_complete(1, 40000, 64, 2, fail, &r), 500);
	tu_http_free(&r);
	cr_assert_eq(model_complete(1, 40000, 64, 2, NULL, &r), 200);
	cr_assert_eq(cached_of(&r), 0, "a failed request cached blocks");
	tu_http_free(&r);
	/* A prompt and answer larger than the KV cache: 400. */
	cr_assert_eq(model_complete(1, 1, 16, 20000, NULL, &r), 400, "%s", r.body);
	tu_http_free(&r);
}

/* A request sent from a thread of its own. */
struct bg_req {
	pthread_t th;
	uint32_t from;
	size_t n;
	unsigned mt;
	struct tu_http r;
};

static void *bg_run(void *arg)
{
	struct bg_req *q = arg;

	model_complete(1, q->from, q->n, q->mt, NULL, &q->r);
	return NULL;
}

static void bg_start(struct bg_req *q, uint32_t from, size_t n, unsigned mt)
{
	q->from = from;
	q->n = n;
	q->mt = mt;
	cr_assert_eq(pthread_create(&q->th, NULL, bg_run, q), 0);
}

Test(fakepod, model_max_num_seqs_holds_requests_back)
{
	struct bg_req q[2];
	long long t1, t2, w2;

	/* One running request at most; the first request decodes 8000 steps of 10 ms (80 s of
	 * model time, 8 s of wall time at --time-scale 10): long enough that the waits below see
	 * it running on a loaded machine (at 300 steps, 0.3 s, a slow /metrics poll missed it;
	 * at 3000, 3 s, 2 runs of 4 missed it with five agents building on 2 cores). */
	spawn("--http", haddr(1), "--pub", tu_endpoint(0), "--time-scale", "10",
	      "--max-num-seqs", "1", "--step-overhead-ms", "10", "--decode-ms-per-seq", "0",
	      "--prefill-tokens-per-s", "10000", "--linger-ms", "0", NULL);
	cr_assert(TU_WAIT_FOR(get_metric(1, "vllm:num_requests_running") == 0, 3000),
		  "no /metrics; stderr %s", child_stderr());
	bg_start(&q[0], 100, 160, 8000);
	cr_assert(TU_WAIT_FOR(get_metric(1, "vllm:num_requests_running") == 1, 5000));
	bg_start(&q[1], 9000, 160, 2);
	cr_assert(TU_WAIT_FOR(get_metric(1, "vllm:num_requests_waiting") == 1, 5000),
		  "the second request was not held back");
	cr_assert_eq(get_metric(1, "vllm:num_requests_running"), 1, "--max-num-seqs 1");
	pthread_join(q[0].th, NULL);
	pthread_join(q[1].th, NULL);
	cr_assert_eq(q[0].r.status, 200);
	cr_assert_eq(q[1].r.status, 200);
	t1 = header_us(q[0].r.ttft);
	t2 = header_us(q[1].r.ttft);
	w2 = header_us(q[1].r.queue);
	cr_assert_eq(t1, 10000 + 16000, "the first request: TTFT %lld us", t1);
	cr_assert_gt(w2, 0, "the second request did not wait");
	/* Admitted alone once the first finished: its wait plus its own prefill step. */
	cr_assert_eq(t2, w2 + 10000 + 16000, "TTFT %lld us, waited %lld us", t2, w2);
	cr_assert_gt(t2, t1, "the queue did not lengthen the TTFT");
	tu_http_free(&q[0].r);
	tu_http_free(&q[1].r);
}

Test(fakepod, model_metrics_have_vllm_names)
{
	static const char *const names[] = {
		"# TYPE vllm:num_requests_running gauge",
		"# TYPE vllm:num_requests_waiting gauge",
		"# TYPE vllm:kv_cache_usage_perc gauge",
		"# TYPE vllm:prefix_cache_queries_total counter",
		"# TYPE vllm:prefix_cache_hits_total counter",
		"# TYPE vllm:time_to_first_token_seconds histogram",
		"vllm:time_to_first_token_seconds_bucket{model_name=\"fake-model\",engine=\"0\","
		"le=\"0.001\"} 0",
		"vllm:time_to_first_token_seconds_bucket{model_name=\"fake-model\",engine=\"0\","
		"le=\"2560\"} 2",
		"vllm:time_to_first_token_seconds_bucket{model_name=\"fake-model\",engine=\"0\","
		"le=\"+Inf\"} 2",
		"vllm:time_to_first_token_seconds_count{model_name=\"fake-model\",engine=\"0\"} 2",
		"vllm:prefix_cache_queries_total{model_name=\"fake-model\",engine=\"0\"} 128",
		"vllm:prefix_cache_hits_total{model_name=\"fake-model\",engine=\"0\"} 48",
		"vllm:kv_cache_usage_perc{model_name=\"fake-model\",engine=\"0\"} 0",
	};
	struct tu_http r;

	spawn("--http", haddr(1), "--pub", tu_endpoint(0), "--time-scale", "100",
	      "--linger-ms", "0", NULL);
	for (int i = 0; i < 2; i++) {
		cr_assert_eq(model_complete(1, 7, 64, 2, NULL, &r), 200, "stderr %s",
			     child_stderr());
		tu_http_free(&r);
	}
	tu_http(tu_url(1, "/metrics"), NULL, NULL, RCV_MS, &r);
	cr_assert_eq(r.status, 200);
	cr_assert(strstr(r.ctype, "text/plain"), "Content-Type %s", r.ctype);
	/* Tokens queried 64 + 64; hit at the second admission: 3 blocks (the last recomputed). */
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
		cr_assert(strstr(r.body, names[i]), "no '%s' in:\n%s", names[i], r.body);
	tu_http_free(&r);
}

static void pm_setup(void)
{
	setup();
	tu_ingestd_setup("podmodel");
}

static void pm_teardown(void)
{
	teardown();
	tu_ingestd_teardown();
}

TestSuite(podmodel, .init = pm_setup, .fini = pm_teardown, .timeout = 30);

/* Whether the index holds key on pod p (confirmed or predicted). */
static bool indexed(uint64_t key, int p)
{
	struct kvidx_rec rec;
	int st = tu_rec_state(tu_ing.rd, key, p, &rec);

	cr_assert(st >= 0, "lookup of 0x%016llx failed", (unsigned long long)key);
	return st != TU_ABSENT;
}

Test(podmodel, eviction_publishes_block_removed_and_the_index_follows)
{
	uint64_t ka[4], kb[6];
	struct tu_http r;
	char ep[64];
	int p;

	/* A cache of 8 blocks. A's 4 blocks are freed when it ends (still cached); B needs 6:
	 * the 4 never used, then A's least recently freed ones, its tail first. */
	spawn("--http", haddr(1), "--pub", tu_endpoint(0), "--pod", "pm-pod", "--model",
	      "pm-model", "--kv-blocks", "8", "--time-scale", "100", "--wait-subscribers", "1",
	      "--linger-ms", "0", NULL);
	snprintf(ep, sizeof ep, "%s", tu_endpoint(0));
	tu_ingestd_start((const char *const[]){ "--capacity", "16k", "--pod", ep, NULL });
	cr_assert_eq(tu_keys_of("pm-model", 0, tu_toks(1000, 64), 64, ka), 4);
	cr_assert_eq(tu_keys_of("pm-model", 0, tu_toks(5000, 96), 96, kb), 6);

	cr_assert_eq(model_complete(1, 1000, 64, 1, NULL, &r), 200, "stderr %s", child_stderr());
	tu_http_free(&r);
	TU_EVENTUALLY(kvidx_reader_pod_find(tu_ing.rd, "pm-pod") >= 0, "pod never registered; "
		      "log %s", tu_ing.log);
	p = kvidx_reader_pod_find(tu_ing.rd, "pm-pod");
	TU_EVENTUALLY(indexed(ka[3], p), "A's blocks never indexed; log %s", tu_ing.log);
	cr_assert_eq(model_complete(1, 5000, 96, 1, NULL, &r), 200);
	tu_http_free(&r);
	TU_EVENTUALLY(indexed(kb[5], p), "B's blocks never indexed");
	TU_EVENTUALLY(!indexed(ka[3], p) && !indexed(ka[2], p),
		      "A's evicted tail still indexed; log %s", tu_ing.log);
	cr_assert(indexed(ka[0], p) && indexed(ka[1], p), "A's head was evicted");
	cr_assert_eq(tu_ctr(p, KV_PC_blocks_removed), 2);
	for (int i = 0; i < 6; i++)
		cr_assert(indexed(kb[i], p), "B's block %d", i);
	/* A again: its head is still cached, as the index said. */
	cr_assert_eq(model_complete(1, 1000, 64, 1, NULL, &r), 200);
	cr_assert_eq(cached_of(&r), 32);
	tu_http_free(&r);
}
