/*
 * test_cluster.c — Criterion suite "cluster": kvidx-ingestd's cluster link on NATS
 * (tools/ingestd/cluster.c, clwire.c; docs/cluster.md). The message codec and the time rule
 * in process; end to end, a nats-server started by the test on a loopback port (Debian's
 * nats-server, installed by `make setup`: a test that cannot start it fails) and two or three
 * real daemons, each with its own index, on the same two fake pods (ZeroMQ PUB sockets bound
 * by the test, so that the pods count as connected and speculation runs). The test is the
 * router of each host (kvidx_commit / kvidx_report_outcome on that host's reader) and a
 * hostile or replaying peer (raw messages published with libnats).
 *
 * Every wait polls for the event until a generous deadline; nothing here measures time
 * (bench/cluster_latency.sh does).
 */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <nats/nats.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "cluster.h"
#include "clwire.h"
#include "inspect.h"
#include "kvidx.h"
#include "telemetry.h"
#include "util_http.h"
#include "util_index.h"
#include "util_run.h"
#include "util_text.h"

#define POD0 "10.0.0.1:8000"
#define POD1 "10.0.0.2:8000"
#define WAIT_MS 10000
#define NHOSTS 3

struct host {
	char name[64], log[256], metrics[32];
	int mport;
	struct tu_child d;
	struct kvidx_reader *rd;
	int pod[2];
};

static struct {
	void *zctx, *pub[2];
	char pod_ep[2][64];
	pid_t nats;
	int nats_port;
	char nats_url[64], nats_log[128], nats_store[128];
	struct host h[NHOSTS];
	natsConnection *peer; /* the test as a raw peer */
} T;

/* ---- nats-server ------------------------------------------------------------------------- */

static bool port_open(int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	int fd = socket(AF_INET, SOCK_STREAM, 0), ok;

	inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
	ok = connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
	close(fd);
	return ok;
}

static void nats_start(void)
{
	char port[16];

	snprintf(port, sizeof(port), "%d", T.nats_port);
	T.nats = fork();
	cr_assert(T.nats >= 0);
	if (T.nats == 0) {
		int fd = open(T.nats_log, O_WRONLY | O_CREAT | O_APPEND, 0644);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		/* JetStream on (the warm-start stream lives in its memory; -sd: a store of our own) */
		execlp("nats-server", "nats-server", "-a", "127.0.0.1", "-p", port, "-js", "-sd",
		       T.nats_store, (char *)NULL);
		_exit(127);
	}
	bool up = TU_WAIT_FOR(port_open(T.nats_port) || waitpid(T.nats, NULL, WNOHANG) != 0,
			      WAIT_MS);
	cr_assert(up && port_open(T.nats_port),
		  "nats-server did not start on 127.0.0.1:%d (is it installed? make setup); log %s",
		  T.nats_port, T.nats_log);
}

static void nats_stop(void)
{
	if (T.nats > 0) {
		kill(T.nats, SIGKILL);
		waitpid(T.nats, NULL, 0);
	}
	T.nats = -1;
}

/* ---- hosts ------------------------------------------------------------------------------- */

static void setup(void)
{
	memset(&T, 0, sizeof(T));
	T.nats = -1;
	T.zctx = zmq_ctx_new();
	for (int i = 0; i < 2; i++) {
		T.pub[i] = zmq_socket(T.zctx, ZMQ_PUB);
		snprintf(T.pod_ep[i], sizeof(T.pod_ep[i]), "%s", tu_endpoint(i));
		cr_assert_eq(zmq_bind(T.pub[i], T.pod_ep[i]), 0, "bind %s", T.pod_ep[i]);
	}
	T.nats_port = tu_port(9);
	snprintf(T.nats_url, sizeof(T.nats_url), "nats://127.0.0.1:%d", T.nats_port);
	snprintf(T.nats_log, sizeof(T.nats_log), "/tmp/t-cluster-nats-%d.log", (int)getpid());
	snprintf(T.nats_store, sizeof(T.nats_store), "/tmp/t-cluster-js-%d", (int)getpid());
	for (int i = 0; i < NHOSTS; i++) {
		char tag[16];
		snprintf(tag, sizeof(tag), "cl%c", 'a' + i);
		tu_index_name(T.h[i].name, sizeof(T.h[i].name), tag);
		snprintf(T.h[i].log, sizeof(T.h[i].log), "/tmp/%s.log", T.h[i].name);
		T.h[i].d = (struct tu_child){ .pid = -1, .in = -1, .out = -1, .err = -1 };
		T.h[i].mport = tu_port(2 + i);
	}
	nats_start();
}

static void teardown(void)
{
	if (T.peer) {
		natsConnection_Destroy(T.peer);
		T.peer = NULL;
	}
	for (int i = 0; i < NHOSTS; i++) {
		tu_child_kill(&T.h[i].d);
		if (T.h[i].rd)
			kvidx_reader_close(T.h[i].rd);
		tu_index_remove(T.h[i].name, NULL);
	}
	for (int i = 0; i < 2; i++) {
		int zero = 0;
		zmq_setsockopt(T.pub[i], ZMQ_LINGER, &zero, sizeof(zero));
		zmq_close(T.pub[i]);
	}
	zmq_ctx_term(T.zctx);
	nats_stop();
	if (!getenv("KVIDX_KEEP_LOGS"))
		unlink(T.nats_log);
	char cmd[192];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", T.nats_store);
	if (system(cmd) != 0) {
		/* a leftover directory in /tmp, nothing worse */
	}
}

TestSuite(cluster, .init = setup, .fini = teardown, .timeout = 120);

static uint64_t hctr(struct host *h, int pod, enum kv_pod_ctr c)
{
	const struct kv_view *v = kv_reader_view(h->rd);

	return ld_relaxed(&v->pods[pod].pd_ctr[c]);
}

/* Starts host i with the extra flags; waits for its index and both pods connected, fresh. */
static struct host *host_start(int i, const char *const *extra)
{
	struct host *h = &T.h[i];
	const char *argv[48];
	char spec[2][128];
	int n = 0;

	snprintf(h->metrics, sizeof(h->metrics), "127.0.0.1:%d", h->mport);
	const char *base[] = { "--name", h->name, "--log-level", "debug", "--capacity", "16k",
			       "--cluster", T.nats_url, "--metrics", h->metrics, NULL };
	for (int k = 0; base[k]; k++)
		argv[n++] = base[k];
	for (int p = 0; p < 2; p++) {
		snprintf(spec[p], sizeof(spec[p]), "%s,name=%s", T.pod_ep[p], p ? POD1 : POD0);
		argv[n++] = "--pod";
		argv[n++] = spec[p];
	}
	for (int k = 0; extra && extra[k]; k++)
		argv[n++] = extra[k];
	argv[n] = NULL;
	tu_spawn(&h->d, "kvidx-ingestd", argv, h->log, false);
	cr_assert(TU_WAIT_FOR((h->rd = kvidx_reader_open(h->name)) != NULL, WAIT_MS),
		  "index %s never appeared; log %s", h->name, h->log);
	for (int p = 0; p < 2; p++) {
		const char *pod = p ? POD1 : POD0;
		cr_assert(TU_WAIT_FOR((h->pod[p] = kvidx_reader_pod_find(h->rd, pod)) >= 0, WAIT_MS),
			  "pod %s never registered; log %s", pod, h->log);
		cr_assert(TU_WAIT_FOR(hctr(h, h->pod[p], KV_PC_connected) == 1 &&
					      !tu_pod_paused(h->rd, h->pod[p]), WAIT_MS),
			  "pod %s never connected and fresh; log %s", pod, h->log);
	}
	return h;
}

/* Metric name (a full sample name, no labels) of h's /metrics, or -1 if absent. */
static double metric(struct host *h, const char *name)
{
	char url[96], needle[128];
	struct tu_http r;
	double v = -1;

	snprintf(url, sizeof(url), "http://%s/metrics", h->metrics);
	snprintf(needle, sizeof(needle), "\n%s ", name);
	tu_http(url, NULL, NULL, 3000, &r);
	if (r.status == 200 && r.body && strstr(r.body, needle))
		v = tu_number_after(r.body, needle);
	tu_http_free(&r);
	return v;
}

#define WAIT_METRIC(h, name, cond)                                                           \
	cr_assert(TU_POLL(({ double v_ = metric(h, name); (void)v_; cond; }), WAIT_MS,           \
			  tu_sleep_ms(20)),                                                      \
		  "%s stayed at %g; log %s", name, metric(h, name), (h)->log)

static void wait_connected(struct host *h)
{
	WAIT_METRIC(h, "kvidx_cluster_connected", v_ == 1);
}

static void commit(struct host *h, uint64_t corr, int pod, const uint64_t *keys, size_t n,
		   uint32_t matched)
{
	struct kvidx_route rt = { .corr_id = corr, .pod = pod, .prefill_pod = -1, .keys = keys,
				  .nkeys = n, .matched_blocks = matched };

	cr_assert_eq(kvidx_commit(h->rd, &rt), 0);
}

static bool all_state(struct host *h, const uint64_t *keys, size_t n, int pod, int state)
{
	for (size_t i = 0; i < n; i++)
		if (tu_rec_state(h->rd, keys[i], pod, NULL) != state)
			return false;
	return true;
}

static void keys_from(uint64_t base, uint64_t *k, size_t n)
{
	for (size_t i = 0; i < n; i++)
		k[i] = base * 1000003ull + i * 7919ull + 1;
}

/* ---- the test as a raw peer ---------------------------------------------------------------- */

static void peer_connect(void)
{
	cr_assert_eq(natsConnection_ConnectTo(&T.peer, T.nats_url), NATS_OK);
}

static uint64_t real_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The subject the default key scheme (cbor-fnv, seed "", block size 16) publishes on. */
static const char *subject(uint64_t scheme)
{
	static char s[96];

	snprintf(s, sizeof(s), "kvidx.kvidx.%016llx.p", (unsigned long long)scheme);
	return s;
}

static uint64_t def_scheme(void)
{
	return clw_scheme(KVIDX_KEY_CBOR_FNV, "", 16);
}

static struct clw_rec rec(int kind, uint64_t corr, const char *pod, uint16_t n)
{
	struct clw_rec r = { .kind = (uint8_t)kind, .corr = corr, .ttl_ms = 30000, .nkeys = n,
			     .commit_ns = real_now() };

	snprintf(r.pod, sizeof(r.pod), "%s", pod);
	return r;
}

/* An outcome that is not a failure, on the outcome pod. */
static struct clw_rec done_rec(uint64_t corr, const char *pod)
{
	struct clw_rec r = rec(CLW_DONE, corr, pod, 0);

	r.ttl_ms = 0;
	return r;
}

static void publish(const void *buf, size_t len)
{
	cr_assert_eq(natsConnection_Publish(T.peer, subject(def_scheme()), buf, (int)len), NATS_OK);
	cr_assert_eq(natsConnection_Flush(T.peer), NATS_OK);
}

/* One message from origin of the records r[0..n), each with keys k. */
static void publish_recs(uint64_t origin, const struct clw_rec *r, size_t n, const uint64_t *k)
{
	static uint8_t buf[CLW_MSG_MAX];
	struct clw_enc e;

	clw_enc_begin(&e, buf, sizeof(buf), origin, def_scheme());
	for (size_t i = 0; i < n; i++)
		cr_assert_eq(clw_enc_add(&e, &r[i], k), 0);
	publish(buf, clw_enc_finish(&e, real_now()));
}

/* ---- in process: the codec and the time rule ------------------------------------------------ */

TestSuite(clwire, .timeout = 30);

Test(clwire, codec_round_trip_and_bounds)
{
	static uint8_t buf[CLW_MSG_MAX];
	uint64_t k[3] = { 1, 0x8000000000000001ull, 42 };
	struct clw_enc e;
	struct clw_dec d;
	struct clw_header h;
	struct clw_rec r = rec(CLW_COMMIT, 7, POD0, 3), out;

	clw_enc_begin(&e, buf, sizeof(buf), 11, 22);
	r.tokens = 70000; /* more than a u16 */
	cr_assert_eq(clw_enc_add(&e, &r, k), 0);
	r.kind = CLW_WITHDRAW;
	r.tokens = 0;
	snprintf(r.prefill, sizeof(r.prefill), "%s", POD1);
	cr_assert_eq(clw_enc_add(&e, &r, k), 0);
	struct clw_rec done = done_rec(8, POD1);
	cr_assert_eq(clw_enc_add(&e, &done, NULL), 0);
	size_t len = clw_enc_finish(&e, 33);
	cr_assert_eq(clw_dec_begin(&d, buf, len, &h), 0);
	cr_assert(h.nrec == 3 && h.origin == 11 && h.scheme == 22 && h.sent_ns == 33);
	cr_assert_eq(clw_dec_next(&d, &out), CLW_OK);
	cr_assert(out.kind == CLW_COMMIT && out.corr == 7 && out.nkeys == 3 && out.ttl_ms == 30000);
	cr_assert_eq(out.tokens, 70000);
	cr_assert_str_eq(out.pod, POD0);
	cr_assert_str_eq(out.prefill, "");
	cr_assert(clw_key(&out, 1) == k[1] && clw_key(&out, 2) == 42);
	cr_assert_eq(clw_dec_next(&d, &out), CLW_OK);
	cr_assert(out.kind == CLW_WITHDRAW && !strcmp(out.prefill, POD1));
	cr_assert_eq(clw_dec_next(&d, &out), CLW_OK);
	cr_assert(out.kind == CLW_DONE && out.corr == 8 && out.nkeys == 0 && !out.ttl_ms);
	cr_assert_str_eq(out.pod, POD1);
	cr_assert_eq(clw_dec_next(&d, &out), CLW_END);

	/* Every truncation is refused or cut short, never read past the end. */
	for (size_t cut = 0; cut < len; cut++) {
		if (clw_dec_begin(&d, buf, cut, &h) < 0)
			continue;
		enum clw_status st;
		int guard = 0;
		while ((st = clw_dec_next(&d, &out)) != CLW_END && st != CLW_BAD)
			cr_assert(++guard < 5);
		cr_assert_eq(st, CLW_BAD, "a message cut at %zu decoded whole", cut);
	}
	/* Encoder bounds: a name with a space, no keys, too many keys, TTL 0. */
	struct clw_rec bad = rec(CLW_COMMIT, 1, "a b", 1);
	cr_assert_eq(clw_enc_add(&e, &bad, k), -EINVAL);
	bad = rec(CLW_COMMIT, 1, POD0, 0);
	cr_assert_eq(clw_enc_add(&e, &bad, k), -EINVAL);
	bad = rec(CLW_COMMIT, 1, POD0, CLW_MAX_KEYS + 1);
	cr_assert_eq(clw_enc_add(&e, &bad, k), -EINVAL);
	bad = rec(CLW_COMMIT, 1, POD0, 1);
	bad.ttl_ms = 0;
	cr_assert_eq(clw_enc_add(&e, &bad, k), -EINVAL);
	/* A done record carries no keys, TTL, tokens or prefill pod; a withdrawal no tokens. */
	bad = done_rec(1, POD0);
	bad.nkeys = 1;
	cr_assert_eq(clw_enc_add(&e, &bad, k), -EINVAL);
	bad = done_rec(1, POD0);
	bad.tokens = 5;
	cr_assert_eq(clw_enc_add(&e, &bad, k), -EINVAL);
	bad = rec(CLW_WITHDRAW, 1, POD0, 1);
	bad.tokens = 5;
	cr_assert_eq(clw_enc_add(&e, &bad, k), -EINVAL);
	bad = rec(4, 1, POD0, 1);
	cr_assert_eq(clw_enc_add(&e, &bad, k), -EINVAL);
	/* The decoder applies the same bounds: a done record given a key is skipped alone. */
	static uint8_t b2[256];
	clw_enc_begin(&e, b2, sizeof(b2), 1, 2);
	bad = rec(CLW_WITHDRAW, 1, POD0, 1);
	cr_assert_eq(clw_enc_add(&e, &bad, k), 0);
	b2[CLW_HDR] = CLW_DONE;
	b2[CLW_HDR + 4] = b2[CLW_HDR + 5] = 0; /* TTL 0: only the key is wrong */
	size_t l2 = clw_enc_finish(&e, 3);
	cr_assert_eq(clw_dec_begin(&d, b2, l2, &h), 0);
	cr_assert_eq(clw_dec_next(&d, &out), CLW_SKIP);
	cr_assert_eq(clw_dec_next(&d, &out), CLW_END);
	/* Header checks: magic, version, record count. */
	buf[0] ^= 1;
	cr_assert_lt(clw_dec_begin(&d, buf, len, &h), 0);
	buf[0] ^= 1;
	buf[4] = 9;
	cr_assert_lt(clw_dec_begin(&d, buf, len, &h), 0);
	buf[4] = CLW_VERSION;
	buf[6] = 0, buf[7] = 0;
	cr_assert_lt(clw_dec_begin(&d, buf, len, &h), 0);
}

Test(clwire, time_rule)
{
	const uint64_t S = 1000000000ull, now = 1000 * S;
	uint64_t age;
	bool skewed;

	/* Fresh: lives TTL - skew from its origin commit, created age ago. */
	cr_assert_eq(cluster_remote_life(now - S / 10, now, 2000, 5, &age, &skewed), 1995);
	cr_assert(age == S / 10 && !skewed);
	/* Older than TTL - skew at receipt: nothing. */
	cr_assert_eq(cluster_remote_life(now - 2 * S, now, 2000, 5, &age, &skewed), 0);
	cr_assert_eq(cluster_remote_life(now - 1996 * (S / 1000), now, 2000, 5, &age, &skewed), 0);
	/* Stamped ahead within the bound: age 0, not skewed. Beyond it: counted, age 0, so it
	 * still lives no longer than TTL - skew from receipt. */
	cr_assert_eq(cluster_remote_life(now + 3 * (S / 1000), now, 2000, 5, &age, &skewed), 1995);
	cr_assert(age == 0 && !skewed);
	cr_assert_eq(cluster_remote_life(now + 60 * S, now, 2000, 5, &age, &skewed), 1995);
	cr_assert(age == 0 && skewed);
	/* A TTL within the skew bound cannot be trusted at all. */
	cr_assert_eq(cluster_remote_life(now, now, 5, 5, &age, &skewed), 0);
}

/* ---- end to end ----------------------------------------------------------------------------- */

/* A commit on A is a speculative entry on B; A's failed outcome withdraws it on B (A keeps
 * its own until its TTL: withdrawals are for peers). */
Test(cluster, commit_visible_then_withdrawn)
{
	struct host *a = host_start(0, NULL), *b = host_start(1, NULL);
	uint64_t k[6];

	wait_connected(a);
	wait_connected(b);
	keys_from(1, k, 6);
	commit(a, 101, a->pod[0], k, 6, 2);
	cr_assert(TU_WAIT_FOR(all_state(a, k, 6, a->pod[0], TU_SPEC), WAIT_MS));
	cr_assert(TU_WAIT_FOR(all_state(b, k, 6, b->pod[0], TU_SPEC), WAIT_MS),
		  "A's commit never became a prediction on B; logs %s %s", a->log, b->log);
	cr_assert(all_state(b, k, 6, b->pod[1], TU_ABSENT), "B predicted it on the other pod");
	struct kvidx_rec r;
	cr_assert_eq(tu_rec_state(b->rd, k[0], b->pod[0], &r), TU_SPEC);
	cr_assert(r.expires_ns <= kvidx_now_ns() + 2000 * 1000000ull,
		  "a remote prediction outlives its TTL at the origin");
	WAIT_METRIC(b, "kvidx_cluster_remote_predictions_total", v_ == 6);
	WAIT_METRIC(a, "kvidx_cluster_published_records_total", v_ >= 1);
	/* The pod's remote_speculations counter (FORMAT.md 5.4, index 63) says where they came
	 * from, and kvidx-top shows it beside the pod's predictions. */
	cr_assert_eq(hctr(b, b->pod[0], KV_PC_remote_speculations), 6);
	cr_assert_eq(hctr(b, b->pod[0], KV_PC_speculations), 6);
	cr_assert_eq(hctr(a, a->pod[0], KV_PC_remote_speculations), 0);
	cr_assert_eq(hctr(a, a->pod[0], KV_PC_speculations), 6);
	struct tu_run top = tu_run_tool("kvidx-top", "--name %s --once", b->name);
	const char *row = strstr(top.out, "\nSPECULATION");
	cr_assert(row && strstr(row, " remote "), "kvidx-top has no remote column:\n%s", top.out);
	row = strstr(row, "\n" POD0);
	cr_assert(row, "kvidx-top has no speculation row for " POD0 ":\n%s", top.out);
	unsigned long recs = 0, remote = 0;
	cr_assert_eq(sscanf(row + 1 + strlen(POD0), "%lu %lu", &recs, &remote), 2);
	cr_assert(recs == 6 && remote == 6, "kvidx-top shows %lu records, %lu remote:\n%s", recs,
		  remote, top.out);
	free(top.out);

	/* The pod served it with nothing cached although the route matched 2 blocks. */
	cr_assert_eq(kvidx_report_outcome(a->rd, 101, a->pod[0], 0, 200), 0);
	cr_assert(TU_WAIT_FOR(all_state(b, k, 6, b->pod[0], TU_ABSENT), WAIT_MS),
		  "A's failed outcome never withdrew the prediction on B; log %s", b->log);
	WAIT_METRIC(b, "kvidx_cluster_withdrawn_records_total", v_ == 6);
	cr_assert(all_state(a, k, 6, a->pod[0], TU_SPEC), "the origin's own prediction went");

	/* A good outcome withdraws nothing. */
	keys_from(2, k, 6);
	commit(a, 102, a->pod[1], k, 6, 2);
	cr_assert(TU_WAIT_FOR(all_state(b, k, 6, b->pod[1], TU_SPEC), WAIT_MS));
	cr_assert_eq(kvidx_report_outcome(a->rd, 102, a->pod[1], 32, 200), 0);
	/* It arrives as a done record (the load's), not a withdrawal: wait for it, then look. */
	WAIT_METRIC(b, "kvidx_cluster_outcomes_total", v_ == 1);
	cr_assert(all_state(b, k, 6, b->pod[1], TU_SPEC), "a good outcome withdrew predictions");
	cr_assert_eq(metric(b, "kvidx_cluster_withdrawals_total"), 1);
}

/* A peer with another key scheme (here another seed) is refused and counted, never mixed. */
Test(cluster, other_key_scheme_refused)
{
	struct host *a = host_start(0, NULL);
	struct host *c = host_start(2, (const char *const[]){ "--seed", "other", NULL });
	uint64_t k[4];

	wait_connected(a);
	wait_connected(c);
	keys_from(3, k, 4);
	commit(a, 201, a->pod[0], k, 4, 0);
	WAIT_METRIC(c, "kvidx_cluster_scheme_refused_messages_total", v_ >= 1);
	cr_assert(all_state(c, k, 4, c->pod[0], TU_ABSENT));
	cr_assert_eq(metric(c, "kvidx_cluster_remote_predictions_total"), 0);
	/* And the other way round. */
	keys_from(33, k, 4);
	commit(c, 202, c->pod[0], k, 4, 0);
	WAIT_METRIC(a, "kvidx_cluster_scheme_refused_messages_total", v_ >= 1);
	cr_assert(all_state(a, k, 4, a->pod[0], TU_ABSENT));
}

/* Duplicated and reordered delivery: a commit twice adds once; a withdrawal before its
 * commit makes the late commit a no-op; unknown pods and expired commits are counted. */
Test(cluster, duplicates_reordering_unknown_pods)
{
	struct host *b = host_start(1, NULL);
	uint64_t k[4], k2[4], k3[4];

	wait_connected(b);
	peer_connect();
	keys_from(4, k, 4);
	struct clw_rec r = rec(CLW_COMMIT, 301, POD0, 4);
	publish_recs(0xabc, &r, 1, k);
	cr_assert(TU_WAIT_FOR(all_state(b, k, 4, b->pod[0], TU_SPEC), WAIT_MS));
	publish_recs(0xabc, &r, 1, k);
	WAIT_METRIC(b, "kvidx_cluster_duplicates_total", v_ == 1);
	cr_assert_eq(metric(b, "kvidx_cluster_applied_commits_total"), 1);
	cr_assert_eq(metric(b, "kvidx_cluster_remote_predictions_total"), 4);
	/* The same corr from another origin is another commit. */
	keys_from(5, k2, 4);
	r = rec(CLW_COMMIT, 301, POD1, 4);
	publish_recs(0xdef, &r, 1, k2);
	cr_assert(TU_WAIT_FOR(all_state(b, k2, 4, b->pod[1], TU_SPEC), WAIT_MS));

	/* Reordered: the withdrawal first, then its commit, then the withdrawal again. */
	keys_from(6, k3, 4);
	struct clw_rec w = rec(CLW_WITHDRAW, 302, POD0, 4), c = rec(CLW_COMMIT, 302, POD0, 4);
	publish_recs(0xabc, &w, 1, k3);
	publish_recs(0xabc, &c, 1, k3);
	publish_recs(0xabc, &w, 1, k3);
	WAIT_METRIC(b, "kvidx_cluster_duplicates_total", v_ == 3);
	cr_assert(all_state(b, k3, 4, b->pod[0], TU_ABSENT), "a commit after its withdrawal added");

	/* Unknown pod; a commit whose TTL ran out on the way (its origin stamped it 10 s ago). */
	r = rec(CLW_COMMIT, 303, "10.9.9.9:1", 4);
	publish_recs(0xabc, &r, 1, k3);
	WAIT_METRIC(b, "kvidx_cluster_unknown_pod_total", v_ == 1);
	r = rec(CLW_COMMIT, 304, POD0, 4);
	r.ttl_ms = 2000;
	r.commit_ns = real_now() - 10000000000ull;
	publish_recs(0xabc, &r, 1, k3);
	WAIT_METRIC(b, "kvidx_cluster_expired_on_arrival_total", v_ == 1);
	cr_assert(all_state(b, k3, 4, b->pod[0], TU_ABSENT));
	/* Stamped a minute ahead: counted, and trusted no longer than TTL - skew from now. */
	r = rec(CLW_COMMIT, 305, POD0, 4);
	r.ttl_ms = 3000;
	r.commit_ns = real_now() + 60000000000ull;
	uint64_t sent = kvidx_now_ns();
	publish_recs(0xabc, &r, 1, k3);
	WAIT_METRIC(b, "kvidx_cluster_clock_skew_total", v_ == 1);
	struct kvidx_rec rr;
	cr_assert(TU_WAIT_FOR(tu_rec_state(b->rd, k3[0], b->pod[0], &rr) == TU_SPEC, WAIT_MS));
	cr_assert_leq(rr.expires_ns, kvidx_now_ns() + 3000 * 1000000ull);
	cr_assert_geq(rr.t_ns, sent - 1000000000ull);
}

/* Hostile messages: garbage, a bad record between two good ones (skipped alone), a
 * truncated message (cut short), an oversized one. The good records stand. */
Test(cluster, hostile_peer)
{
	struct host *b = host_start(1, NULL);
	static uint8_t buf[CLW_MSG_MAX + 64];
	uint64_t k[3][2];

	wait_connected(b);
	peer_connect();
	publish("garbage that is long enough to have a header........", 52);
	WAIT_METRIC(b, "kvidx_cluster_bad_messages_total", v_ == 1);

	for (int i = 0; i < 3; i++)
		keys_from(10 + (uint64_t)i, k[i], 2);
	struct clw_enc e;
	clw_enc_begin(&e, buf, CLW_MSG_MAX, 0x77, def_scheme());
	struct clw_rec r = rec(CLW_COMMIT, 401, POD0, 2);
	cr_assert_eq(clw_enc_add(&e, &r, k[0]), 0);
	size_t bad_at = e.len;
	r.corr = 402;
	cr_assert_eq(clw_enc_add(&e, &r, k[1]), 0);
	r.corr = 403;
	cr_assert_eq(clw_enc_add(&e, &r, k[2]), 0);
	size_t len = clw_enc_finish(&e, real_now());
	buf[bad_at + CLW_REC_HDR] = ' '; /* the middle record's pod name now starts with a space */
	publish(buf, len);
	cr_assert(TU_WAIT_FOR(all_state(b, k[0], 2, b->pod[0], TU_SPEC) &&
				      all_state(b, k[2], 2, b->pod[0], TU_SPEC), WAIT_MS),
		  "a bad record cost the good ones beside it; log %s", b->log);
	cr_assert(all_state(b, k[1], 2, b->pod[0], TU_ABSENT));
	WAIT_METRIC(b, "kvidx_cluster_bad_records_total", v_ == 1);

	/* Truncated inside its second record: the first is applied, the rest dropped. */
	uint64_t k4[2], k5[2];
	keys_from(20, k4, 2);
	keys_from(21, k5, 2);
	clw_enc_begin(&e, buf, CLW_MSG_MAX, 0x77, def_scheme());
	r = rec(CLW_COMMIT, 404, POD1, 2);
	cr_assert_eq(clw_enc_add(&e, &r, k4), 0);
	r.corr = 405;
	cr_assert_eq(clw_enc_add(&e, &r, k5), 0);
	len = clw_enc_finish(&e, real_now());
	publish(buf, len - 5);
	cr_assert(TU_WAIT_FOR(all_state(b, k4, 2, b->pod[1], TU_SPEC), WAIT_MS));
	WAIT_METRIC(b, "kvidx_cluster_bad_messages_total", v_ == 2);
	cr_assert(all_state(b, k5, 2, b->pod[1], TU_ABSENT));

	/* Over the message bound: dropped on receipt. */
	memset(buf, 0, sizeof(buf));
	publish(buf, sizeof(buf));
	WAIT_METRIC(b, "kvidx_cluster_inbound_dropped_messages_total", v_ == 1);
	cr_assert_eq(tu_child_wait(&b->d, 0), -1, "ingestd died; log %s", b->log);
}

static bool load_is(struct host *h, int pod, uint32_t inflight, uint64_t tokens, uint64_t lost)
{
	struct kvidx_load l;

	return kvidx_pod_load(h->rd, h->pod[pod], &l) == 0 && l.inflight == inflight &&
	       l.prefill_tokens == tokens && l.lost == lost;
}

static void wait_load(struct host *h, int pod, uint32_t inflight, uint64_t tokens, uint64_t lost)
{
	struct kvidx_load l = { 0 };

	if (TU_WAIT_FOR(load_is(h, pod, inflight, tokens, lost), WAIT_MS))
		return;
	(void)kvidx_pod_load(h->rd, h->pod[pod], &l); /* what it is, for the message */
	cr_assert_fail("%s pod %d: load %u in flight, %llu tokens, %llu lost; expected %u, %llu, "
		       "%llu; log %s", h->name, pod, l.inflight, (unsigned long long)l.prefill_tokens,
		       (unsigned long long)l.lost, inflight, (unsigned long long)tokens,
		       (unsigned long long)lost, h->log);
}

/* The load view is fleet-wide: a commit on A counts its request on B (on the pod, with its
 * uncached tokens) until A's outcome retires it, good (a done record) or failed (a
 * withdrawal); a done that overtakes its commit leaves no load; a peer that dies leaves its
 * requests in flight no longer than this host's --load-timeout (C: 1 s), counted lost. */
Test(cluster, load_view_is_fleet_wide)
{
	struct host *a = host_start(0, NULL), *b = host_start(1, NULL);
	struct host *c = host_start(2, (const char *const[]){ "--load-timeout", "1s", NULL });
	uint64_t k[6], k2[6];

	wait_connected(a);
	wait_connected(b);
	wait_connected(c);
	keys_from(80, k, 6);
	keys_from(81, k2, 6);
	commit(a, 801, a->pod[0], k, 6, 2); /* 6 blocks of 16 tokens, 2 cached: 64 */
	wait_load(b, 0, 1, 64, 0);
	commit(a, 802, a->pod[0], k2, 6, 1); /* 80 */
	wait_load(b, 0, 2, 144, 0);
	cr_assert(load_is(a, 0, 2, 144, 0), "A's own view lost its requests");
	cr_assert_eq(kvidx_report_outcome(a->rd, 801, a->pod[0], 32, 200), 0); /* good */
	wait_load(b, 0, 1, 80, 0);
	cr_assert_eq(kvidx_report_outcome(a->rd, 802, a->pod[0], 0, 200), 0); /* failed */
	wait_load(b, 0, 0, 0, 0);
	WAIT_METRIC(b, "kvidx_cluster_outcomes_total", v_ == 1);
	WAIT_METRIC(b, "kvidx_cluster_withdrawals_total", v_ == 1);
	WAIT_METRIC(b, "kvidx_cluster_remote_load_total", v_ == 2);

	/* Reordered: a peer's done before its commit; the commit predicts but adds no load. */
	peer_connect();
	struct clw_rec d = done_rec(804, POD0), cm = rec(CLW_COMMIT, 804, POD0, 4);
	cm.tokens = 50;
	publish_recs(0xfeed, &d, 1, NULL);
	publish_recs(0xfeed, &cm, 1, k);
	WAIT_METRIC(b, "kvidx_cluster_applied_commits_total", v_ == 3);
	cr_assert(load_is(b, 0, 0, 0, 0), "a commit after its outcome added load");
	cm.corr = 805;
	publish_recs(0xfeed, &cm, 1, k);
	wait_load(b, 0, 1, 50, 0);
	d.corr = 805;
	publish_recs(0xfeed, &d, 1, NULL);
	wait_load(b, 0, 0, 0, 0);

	/* A dies with a request in flight on pod 1: C retires it by its bound, as lost. */
	commit(a, 803, a->pod[1], k2, 6, 0);
	WAIT_METRIC(c, "kvidx_cluster_remote_load_total", v_ == 4); /* 801 802 805 803 */
	tu_child_kill(&a->d);
	wait_load(c, 1, 0, 0, 1);
}

/* Warm start: a host that joins later gets the predictions still alive in the cluster from
 * the JetStream stream (not the withdrawn ones, not the expired ones), and is not ready before
 * it has them; a host that restarts gets its own former predictions back the same way. */
Test(cluster, joining_host_gets_live_predictions)
{
	const char *const ttl[] = { "--ttl", "30s", NULL };
	struct host *a = host_start(0, ttl);
	uint64_t live[5], gone[5], old[3];

	wait_connected(a);
	WAIT_METRIC(a, "kvidx_cluster_warm", v_ == 1);
	keys_from(70, live, 5);
	keys_from(71, gone, 5);
	keys_from(72, old, 3);
	commit(a, 701, a->pod[0], live, 5, 0);
	commit(a, 702, a->pod[1], gone, 5, 2);
	cr_assert(TU_WAIT_FOR(all_state(a, gone, 5, a->pod[1], TU_SPEC), WAIT_MS));
	cr_assert_eq(kvidx_report_outcome(a->rd, 702, a->pod[1], 0, 200), 0); /* failed */
	/* A peer's commit stamped 40 s ago: in the stream, dead by the time rule. */
	peer_connect();
	struct clw_rec r = rec(CLW_COMMIT, 703, POD0, 3);
	r.commit_ns = real_now() - 40000000000ull;
	publish_recs(0x5151, &r, 1, old);
	WAIT_METRIC(a, "kvidx_cluster_published_records_total", v_ >= 3);
	WAIT_METRIC(a, "kvidx_cluster_expired_on_arrival_total", v_ == 1);

	/* B joins: nothing is published meanwhile, so all it has comes from the stream. */
	struct host *b = host_start(1, ttl);
	cr_assert(TU_WAIT_FOR(all_state(b, live, 5, b->pod[0], TU_SPEC), WAIT_MS),
		  "the joining host never got A's live prediction; logs %s %s", a->log, b->log);
	WAIT_METRIC(b, "kvidx_cluster_warm", v_ == 1);
	WAIT_METRIC(b, "kvidx_cluster_warm_replays_total", v_ == 1);
	cr_assert_geq(metric(b, "kvidx_cluster_warm_messages_total"), 2);
	/* Counted when the writer applies the replayed message, which may be after "warm" reads 1
	 * (the ring is empty once the last message is popped, before it is applied). */
	WAIT_METRIC(b, "kvidx_cluster_warm_expired_total", v_ == 1);
	cr_assert(all_state(b, gone, 5, b->pod[1], TU_ABSENT), "a withdrawn prediction came back");
	cr_assert(all_state(b, old, 3, b->pod[0], TU_ABSENT), "an expired prediction came back");
	struct kvidx_rec ra, rb;
	cr_assert_eq(tu_rec_state(a->rd, live[0], a->pod[0], &ra), TU_SPEC);
	cr_assert_eq(tu_rec_state(b->rd, live[0], b->pod[0], &rb), TU_SPEC);
	cr_assert_leq(rb.expires_ns, ra.expires_ns + 100 * 1000000ull,
		      "the replayed prediction outlives its origin's");
	char url[96];
	struct tu_http h;
	snprintf(url, sizeof(url), "http://%s/readyz", b->metrics);
	cr_assert(TU_POLL((tu_http(url, NULL, NULL, 3000, &h), h.status == 200 ? (tu_http_free(&h), 1)
								      : (tu_http_free(&h), 0)),
			  WAIT_MS, tu_sleep_ms(20)), "B never became ready; log %s", b->log);

	/* A restarts (a new origin id, a fresh index): its own predictions come back. */
	tu_child_kill(&a->d);
	kvidx_reader_close(a->rd);
	a->rd = NULL;
	tu_index_remove(a->name, NULL);
	a = host_start(0, ttl);
	cr_assert(TU_WAIT_FOR(all_state(a, live, 5, a->pod[0], TU_SPEC), WAIT_MS),
		  "the restarted host lost its own live predictions; log %s", a->log);
	/* The withdrawal is a later message of the replay than the commits: wait for it. */
	WAIT_METRIC(a, "kvidx_cluster_withdrawals_total", v_ == 1);
	cr_assert(all_state(a, gone, 5, a->pod[1], TU_ABSENT), "a withdrawn prediction came back");
}

/* The server goes away: local-only operation, the gauge says so, the peers' requests leave
 * the load view; it comes back on the same
 * port and the link recovers by itself. */
Test(cluster, server_restart_recovers)
{
	struct host *a = host_start(0, NULL), *b = host_start(1, NULL);
	uint64_t k[4];

	wait_connected(a);
	wait_connected(b);
	/* A request of A's in flight on pod 1 counts on B; when the link goes, B forgets it
	 * (counted lost: its outcome may be lost with the link) instead of keeping it for
	 * --load-timeout (120 s); A keeps its own. */
	keys_from(29, k, 4);
	commit(a, 500, a->pod[1], k, 4, 0); /* 4 blocks of 16 tokens, none cached: 64 */
	wait_load(b, 1, 1, 64, 0);
	nats_stop();
	WAIT_METRIC(a, "kvidx_cluster_connected", v_ == 0);
	WAIT_METRIC(b, "kvidx_cluster_connected", v_ == 0);
	wait_load(b, 1, 0, 0, 1);
	cr_assert(load_is(a, 1, 1, 64, 0), "A forgot its own request with the link");
	keys_from(30, k, 4);
	commit(a, 501, a->pod[0], k, 4, 0);
	cr_assert(TU_WAIT_FOR(all_state(a, k, 4, a->pod[0], TU_SPEC), WAIT_MS),
		  "local commits stopped without NATS");
	WAIT_METRIC(a, "kvidx_cluster_unsent_records_total", v_ >= 1);

	nats_start();
	wait_connected(a);
	wait_connected(b);
	WAIT_METRIC(a, "kvidx_cluster_reconnects_total", v_ >= 1);
	/* Core NATS is at most once: a message published while a peer's subscription is being
	 * restored may be lost. The link has recovered when a commit made now reaches B, so
	 * commit again (a new correlation id each time) until one does. */
	keys_from(31, k, 4);
	uint64_t corr = 502;
	cr_assert(TU_POLL((commit(a, corr++, a->pod[0], k, 4, 0),
			   all_state(b, k, 4, b->pod[0], TU_SPEC)), WAIT_MS, tu_sleep_ms(200)),
		  "the link did not recover; logs %s %s", a->log, b->log);
}

/* A flood of peer messages (a small in queue) cannot stall the writer: its heartbeat moves
 * and its own router's commits land while the excess is dropped and counted. */
Test(cluster, flood_cannot_stall_writer)
{
	struct host *b = host_start(1, (const char *const[]){ "--cluster-queue", "4", NULL });
	static uint8_t buf[CLW_MSG_MAX];
	static uint64_t k[CLW_MAX_KEYS];
	struct clw_enc e;

	wait_connected(b);
	peer_connect();
	keys_from(40, k, CLW_MAX_KEYS);
	clw_enc_begin(&e, buf, sizeof(buf), 0x99, def_scheme());
	for (uint64_t i = 0;; i++) {
		struct clw_rec r = rec(CLW_COMMIT, 1000 + i, "10.9.9.9:1", 16);
		if (clw_enc_add(&e, &r, k + (i * 16) % (CLW_MAX_KEYS - 16)) < 0)
			break;
	}
	size_t len = clw_enc_finish(&e, real_now());
	for (int i = 0; i < 3000; i++)
		cr_assert_eq(natsConnection_Publish(T.peer, subject(def_scheme()), buf, (int)len),
			     NATS_OK);
	uint64_t mine[4];
	keys_from(41, mine, 4);
	commit(b, 601, b->pod[0], mine, 4, 0);
	cr_assert(TU_WAIT_FOR(all_state(b, mine, 4, b->pod[0], TU_SPEC), WAIT_MS),
		  "the writer stalled under the flood; log %s", b->log);
	natsConnection_Flush(T.peer);
	WAIT_METRIC(b, "kvidx_cluster_inbound_dropped_messages_total", v_ >= 1);
	struct kvidx_info i0, i1;
	kvidx_reader_info(b->rd, &i0);
	cr_assert(TU_WAIT_FOR((kvidx_reader_info(b->rd, &i1), i1.heartbeat_ns > i0.heartbeat_ns),
			      WAIT_MS), "the writer's heartbeat stopped");
	cr_assert_eq(tu_child_wait(&b->d, 0), -1, "ingestd died; log %s", b->log);
}

/* examples/monitoring/kvidx-cluster-rules.yml: promtool checks and unit-tests it, and every
 * kvidx_cluster_* metric it uses is in a real ingestd's exposition (with its HELP and TYPE). */
Test(cluster, alert_rules_use_real_metrics)
{
	struct host *a = host_start(0, NULL);
	char url[96], path[128], line[512];
	struct tu_http r;

	wait_connected(a);
	snprintf(url, sizeof(url), "http://%s/metrics", a->metrics);
	tu_http(url, NULL, NULL, 3000, &r);
	cr_assert_eq(r.status, 200);
	const char *src = getenv("KVIDX_SRC") ? getenv("KVIDX_SRC") : ".";
	char cmd[1024], out[8192];
	snprintf(cmd, sizeof(cmd), "cd '%s/examples/monitoring' && promtool check rules "
		 "kvidx-cluster-rules.yml && promtool test rules kvidx-cluster-rules.test.yml 2>&1",
		 src);
	FILE *pf = popen(cmd, "r");
	cr_assert_not_null(pf);
	size_t got = fread(out, 1, sizeof(out) - 1, pf);
	out[got] = '\0';
	cr_assert_eq(pclose(pf), 0, "promtool: %s", out);
	snprintf(path, sizeof(path), "%s/examples/monitoring/kvidx-cluster-rules.yml", src);
	FILE *f = fopen(path, "r");
	cr_assert_not_null(f, "%s", path);
	int used = 0;
	while (fgets(line, sizeof(line), f)) {
		if (line[strspn(line, " ")] == '#')
			continue;
		for (char *p = line; (p = strstr(p, "kvidx_cluster_"));) {
			char name[96], type[128];
			size_t n = strspn(p, "abcdefghijklmnopqrstuvwxyz_");
			snprintf(name, sizeof(name), "%.*s", (int)n, p);
			snprintf(type, sizeof(type), "# TYPE %s ", name);
			cr_assert(strstr(r.body, type), "%s is not in ingestd's exposition", name);
			used++;
			p += n;
		}
	}
	fclose(f);
	cr_assert_geq(used, 3);
	tu_http_free(&r);
}
