/*
 * bench_cluster — commit-on-host-A to visible-on-host-B latency of the cluster link
 * (kvidx-ingestd --cluster, docs/cluster.md), beside the local commit path in the same run.
 * bench/cluster_latency.sh sets the hosts up (a nats-server, a fake pod, two ingestds with
 * their own indexes on loopback) and runs this.
 *
 *   bench_cluster --a NAME_A --b NAME_B --pod POD [--count N] [--keys K]
 *                 [--poll yield|spin|sleep]
 *
 * One process, two reader handles: each round commits K fresh keys on A's reader (t0 =
 * CLOCK_MONOTONIC, system-wide), then polls kvidx_lookup() of the last key, first on A
 * (t1: the local path, ring -> writer -> table) and then on B (t2: A's writer -> NATS -> B's
 * writer -> B's table). Rounds are spaced by 1-3 ms so that each commit is its own batch.
 * Prints p50/p99/max of both, in microseconds, and the rounds that timed out (1 s).
 *
 * How the poller waits between two lookups (--poll): on a small machine (2 cores) a busy
 * poller ("spin", the measurement before issue 20's second pass) holds a core that the path
 * it measures needs, and a thread woken onto its core waits for its time slice (up to a 4 ms
 * tick on a kernel without preemption): the measurement charges that to the path. "yield"
 * (the default: sched_yield() between lookups) lets such a thread run at once; under load it
 * also hands the core to other processes, which may make it see the entry late. "sleep"
 * sleeps 20 us between lookups (1 us timer slack). docs/cluster.md "Measuring" compares them.
 *
 *   bench_cluster --fanout --nats URL --subs H [--msgs M] [--size S] [--js] [--server-pid P]
 *
 * The event-topology measurement (bench/cluster_topology.sh, docs/cluster.md "Topology"):
 * the cost of NATS delivering each of M messages of S bytes (an event batch) to H
 * subscribers, each on a connection of its own as H hosts would be: core NATS (a relay that
 * republishes batches as they come), or with --js a memory JetStream stream that every
 * subscriber reads with an ordered push consumer (the relay the issue proposes, which also
 * keeps history). Publishes at most 256 messages ahead of the slowest subscriber, then
 * prints the server's CPU per message and per delivery (from /proc/P/stat) and this
 * process's (publisher and H subscribers) per delivery.
 */
#define PROG "bench_cluster"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <nats/nats.h>
#include <stdatomic.h>
#include <sys/resource.h>

#include "kvidx.h"

const char bl_prog[] = PROG;

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static uint64_t pct(uint64_t *v, size_t n, double p)
{
	size_t i = (size_t)(p * (double)(n - 1) + 0.5);

	return n ? v[i] : 0;
}

enum poll_mode { POLL_SLEEP, POLL_YIELD, POLL_SPIN };
static const char *const poll_name[] = { "sleep", "yield", "spin" };

/* Polls until key shows a record on pod in r, or deadline; the time it did, or 0. */
static uint64_t wait_visible(struct kvidx_reader *r, uint64_t key, int pod, uint64_t deadline,
			     enum poll_mode mode)
{
	const struct timespec nap = { 0, 20000 };

	struct kvidx_rec rec[16];

	for (;;) {
		uint64_t now = kvidx_now_ns();
		int n = kvidx_lookup(r, key, rec, 16);
		for (int i = 0; i < n; i++)
			if (rec[i].pod == pod)
				return now;
		if (now > deadline)
			return 0;
		if (mode == POLL_YIELD)
			sched_yield();
		else if (mode == POLL_SLEEP)
			nanosleep(&nap, NULL);
	}
}

static void report(const char *what, uint64_t *v, size_t n, size_t lost, enum poll_mode mode)
{
	qsort(v, n, sizeof(*v), cmp_u64);
	printf("cluster_latency: path=%s n=%zu p50_us=%.1f p99_us=%.1f max_us=%.1f timeouts=%zu "
	       "poll=%s\n", what, n, pct(v, n, 0.5) / 1e3, pct(v, n, 0.99) / 1e3,
	       n ? v[n - 1] / 1e3 : 0.0, lost, poll_name[mode]);
}

/* ---- --fanout ------------------------------------------------------------------------- */

#define FAN_MAX_SUBS 64

static _Atomic uint64_t fan_got[FAN_MAX_SUBS];

static void fan_on_msg(natsConnection *nc, natsSubscription *sub, natsMsg *msg, void *arg)
{
	(void)nc;
	(void)sub;
	atomic_fetch_add_explicit(&fan_got[(uintptr_t)arg], 1, memory_order_relaxed);
	natsMsg_Destroy(msg);
}

/* utime + stime of process pid in microseconds (0 if unreadable). */
static uint64_t proc_cpu_us(int pid)
{
	char path[64], buf[1024];
	unsigned long ut = 0, st = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	if (pid <= 0 || !(f = fopen(path, "r")))
		return 0;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	const char *p = strrchr(buf, ')'); /* the name may hold spaces */
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut,
			 &st) != 2)
		return 0;
	return (uint64_t)(ut + st) * 1000000ull / (uint64_t)sysconf(_SC_CLK_TCK);
}

static uint64_t self_cpu_us(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000ull +
	       (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

static uint64_t fan_slowest(int subs)
{
	uint64_t m = UINT64_MAX;

	for (int i = 0; i < subs; i++) {
		uint64_t v = atomic_load_explicit(&fan_got[i], memory_order_relaxed);
		m = v < m ? v : m;
	}
	return m;
}

/* The subscribers: H connections, each with a plain subscription or an ordered consumer. */
static int fan_subscribe(const char *url, int subs, bool js, natsConnection **nc,
			 natsSubscription **sub, jsCtx **jctx)
{
	for (int i = 0; i < subs; i++) {
		natsStatus s = natsConnection_ConnectTo(&nc[i], url);
		jsSubOptions so;
		jsErrCode je = 0;
		if (s == NATS_OK && !js) {
			s = natsConnection_Subscribe(&sub[i], nc[i], "topo.batches", fan_on_msg,
						     (void *)(uintptr_t)i);
			if (s == NATS_OK)
				s = natsSubscription_SetPendingLimits(sub[i], -1, -1);
		} else if (s == NATS_OK) {
			jsSubOptions_Init(&so);
			so.Stream = "TOPO";
			so.Ordered = true;
			if ((s = natsConnection_JetStream(&jctx[i], nc[i], NULL)) == NATS_OK)
				s = js_Subscribe(&sub[i], jctx[i], "topo.batches", fan_on_msg,
						 (void *)(uintptr_t)i, NULL, &so, &je);
		}
		if (s == NATS_OK)
			s = natsConnection_Flush(nc[i]);
		if (s != NATS_OK) {
			fprintf(stderr, "%s: subscriber %d: %s (%s)\n", PROG, i, natsStatus_GetText(s),
				nats_GetLastError(NULL));
			return -1;
		}
	}
	return 0;
}

/* A fresh memory stream TOPO on topo.> (the relay's), or -1. */
static int fan_stream(natsConnection *pub)
{
	jsCtx *j = NULL;
	jsStreamConfig sc;
	jsErrCode je = 0;
	const char *subj[1] = { "topo.>" };
	natsStatus s = natsConnection_JetStream(&j, pub, NULL);

	if (s == NATS_OK) {
		js_DeleteStream(j, "TOPO", NULL, &je);
		jsStreamConfig_Init(&sc);
		sc.Name = "TOPO";
		sc.Subjects = subj;
		sc.SubjectsLen = 1;
		sc.Storage = js_MemoryStorage;
		sc.NoAck = true;
		s = js_AddStream(NULL, j, &sc, NULL, &je);
	}
	jsCtx_Destroy(j);
	if (s != NATS_OK)
		fprintf(stderr, "%s: JetStream stream: %s (error %d; nats-server -js?)\n", PROG,
			natsStatus_GetText(s), (int)je);
	return s == NATS_OK ? 0 : -1;
}

static int fanout(const char *url, int subs, size_t msgs, size_t size, bool js, int spid)
{
	natsConnection *pub = NULL, *nc[FAN_MAX_SUBS] = { 0 };
	natsSubscription *sub[FAN_MAX_SUBS] = { 0 };
	jsCtx *jctx[FAN_MAX_SUBS] = { 0 };
	char *buf = calloc(1, size);
	int rc = 1;

	if (!buf || natsConnection_ConnectTo(&pub, url) != NATS_OK) {
		fprintf(stderr, "%s: cannot connect to %s\n", PROG, url);
		return 1;
	}
	if ((js && fan_stream(pub) < 0) || fan_subscribe(url, subs, js, nc, sub, jctx) < 0)
		goto out;
	for (size_t i = 0; i < size; i++)
		buf[i] = (char)(i * 131);
	uint64_t s0 = proc_cpu_us(spid), c0 = self_cpu_us(), t0 = kvidx_now_ns();
	for (size_t i = 0; i < msgs; i++) {
		while (i - fan_slowest(subs) > 256 && kvidx_now_ns() - t0 < 60000000000ull)
			nats_Sleep(0);
		natsConnection_Publish(pub, "topo.batches", buf, (int)size);
	}
	natsConnection_Flush(pub);
	while (fan_slowest(subs) < msgs && kvidx_now_ns() - t0 < 60000000000ull)
		nats_Sleep(1);
	uint64_t t1 = kvidx_now_ns(), s1 = proc_cpu_us(spid), c1 = self_cpu_us();
	uint64_t got = 0;
	for (int i = 0; i < subs; i++)
		got += atomic_load(&fan_got[i]);
	double d = (double)got ? (double)got : 1.0;
	printf("cluster_topology: path=%s subs=%d msgs=%zu size=%zu delivered=%llu "
	       "server_us_per_msg=%.2f server_us_per_delivery=%.2f client_us_per_delivery=%.2f "
	       "wall_s=%.2f\n", js ? "jetstream" : "core", subs, msgs, size,
	       (unsigned long long)got, (double)(s1 - s0) / (double)msgs, (double)(s1 - s0) / d,
	       (double)(c1 - c0) / d, (double)(t1 - t0) / 1e9);
	rc = got == (uint64_t)subs * msgs ? 0 : 1;
out:
	for (int i = 0; i < subs; i++) {
		if (sub[i]) {
			natsSubscription_Unsubscribe(sub[i]);
			natsSubscription_Destroy(sub[i]);
		}
		jsCtx_Destroy(jctx[i]);
		natsConnection_Destroy(nc[i]);
	}
	natsConnection_Destroy(pub);
	free(buf);
	return rc;
}

/* --fanout --nats URL --subs H [--msgs M] [--size S] [--js] [--server-pid P] */
static int fanout_main(int argc, char **argv)
{
	const char *url = NULL;
	int subs = 0, spid = 0;
	size_t msgs = 20000, size = 2048;
	bool js = false;

	for (int i = 1; i < argc; i++) {
		const char *v = i + 1 < argc ? argv[i + 1] : "";
		if (!strcmp(argv[i], "--js"))
			js = true;
		else if (!strcmp(argv[i], "--nats"))
			url = v, i++;
		else if (!strcmp(argv[i], "--subs"))
			subs = atoi(v), i++;
		else if (!strcmp(argv[i], "--msgs"))
			msgs = strtoul(v, NULL, 10), i++;
		else if (!strcmp(argv[i], "--size"))
			size = strtoul(v, NULL, 10), i++;
		else if (!strcmp(argv[i], "--server-pid"))
			spid = atoi(v), i++;
	}
	if (!url || subs < 1 || subs > FAN_MAX_SUBS || !msgs || !size || size > (1u << 20)) {
		fprintf(stderr, "usage: %s --fanout --nats URL --subs 1..%d [--msgs M] [--size S] "
			"[--js] [--server-pid PID]\n", PROG, FAN_MAX_SUBS);
		return 2;
	}
	int rc = fanout(url, subs, msgs, size, js, spid);
	nats_CloseAndWait(2000);
	return rc;
}

int main(int argc, char **argv)
{
	const char *an = NULL, *bn = NULL, *pod = NULL;
	size_t count = 2000, nk = 8;
	enum poll_mode mode = POLL_YIELD;

	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--fanout"))
			return fanout_main(argc, argv);
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--a"))
			an = argv[i + 1];
		else if (!strcmp(argv[i], "--b"))
			bn = argv[i + 1];
		else if (!strcmp(argv[i], "--pod"))
			pod = argv[i + 1];
		else if (!strcmp(argv[i], "--count"))
			count = strtoul(argv[i + 1], NULL, 10);
		else if (!strcmp(argv[i], "--keys"))
			nk = strtoul(argv[i + 1], NULL, 10);
		else if (!strcmp(argv[i], "--poll"))
			mode = !strcmp(argv[i + 1], "spin")    ? POLL_SPIN
			       : !strcmp(argv[i + 1], "sleep") ? POLL_SLEEP
			                                       : POLL_YIELD;
	}
	if (!an || !bn || !pod || !count || !nk || nk > 256) {
		fprintf(stderr, "usage: %s --a NAME --b NAME --pod POD [--count N] [--keys 1..256] "
			"[--poll yield|spin|sleep]\n", PROG);
		return 2;
	}
	struct kvidx_reader *a = kvidx_reader_open(an), *b = kvidx_reader_open(bn);
	if (!a || !b) {
		fprintf(stderr, "%s: cannot open the indexes: %s\n", PROG, strerror(errno));
		return 1;
	}
	int pa = kvidx_reader_pod_find(a, pod), pb = kvidx_reader_pod_find(b, pod);
	if (pa < 0 || pb < 0) {
		fprintf(stderr, "%s: pod %s is not in both indexes\n", PROG, pod);
		return 1;
	}
	prctl(PR_SET_TIMERSLACK, 1000UL); /* 1 us: the 20 us naps stay 20 us */
	uint64_t *loc = calloc(count, sizeof(uint64_t)), *rem = calloc(count, sizeof(uint64_t));
	uint64_t keys[256];
	size_t nl = 0, nr = 0, lost_l = 0, lost_r = 0;
	srandom((unsigned)getpid());
	for (size_t i = 0; i < count; i++) {
		for (size_t k = 0; k < nk; k++)
			keys[k] = ((uint64_t)random() << 33) ^ ((uint64_t)random() << 2) ^ (i * 977 + k);
		struct kvidx_route rt = { .corr_id = i + 1, .pod = pa, .prefill_pod = -1,
					  .keys = keys, .nkeys = nk };
		uint64_t t0 = kvidx_now_ns();
		if (kvidx_commit(a, &rt) < 0) {
			lost_l++;
			continue;
		}
		uint64_t t1 = wait_visible(a, keys[nk - 1], pa, t0 + 1000000000ull, mode);
		uint64_t t2 = wait_visible(b, keys[nk - 1], pb, t0 + 1000000000ull, mode);
		if (t1)
			loc[nl++] = t1 - t0;
		else
			lost_l++;
		if (t2)
			rem[nr++] = t2 - t0;
		else
			lost_r++;
		struct timespec ts = { 0, (1 + random() % 3) * 1000000L };
		nanosleep(&ts, NULL);
	}
	report("local", loc, nl, lost_l, mode);
	report("remote", rem, nr, lost_r, mode);
	kvidx_reader_close(a);
	kvidx_reader_close(b);
	return 0;
}
