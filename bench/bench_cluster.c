/*
 * bench_cluster — commit-on-host-A to visible-on-host-B latency of the cluster link
 * (kvidx-ingestd --cluster, docs/cluster.md), beside the local commit path in the same run.
 * bench/cluster_latency.sh sets the hosts up (a nats-server, a fake pod, two ingestds with
 * their own indexes on loopback) and runs this.
 *
 *   bench_cluster --a NAME_A --b NAME_B --pod POD [--count N] [--keys K]
 *
 * One process, two reader handles: each round commits K fresh keys on A's reader (t0 =
 * CLOCK_MONOTONIC, system-wide), then spins on kvidx_lookup() of the last key, first on A
 * (t1: the local path, ring -> writer -> table) and then on B (t2: A's writer -> NATS -> B's
 * writer -> B's table). Rounds are spaced by 1-3 ms so that each commit is its own batch.
 * Prints p50/p99/max of both, in microseconds, and the rounds that timed out (1 s).
 */
#define PROG "bench_cluster"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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

/* Spins until key shows a record on pod in r, or deadline; the time it did, or 0. */
static uint64_t wait_visible(struct kvidx_reader *r, uint64_t key, int pod, uint64_t deadline)
{
	struct kvidx_rec rec[16];

	for (;;) {
		uint64_t now = kvidx_now_ns();
		int n = kvidx_lookup(r, key, rec, 16);
		for (int i = 0; i < n; i++)
			if (rec[i].pod == pod)
				return now;
		if (now > deadline)
			return 0;
	}
}

static void report(const char *what, uint64_t *v, size_t n, size_t lost)
{
	qsort(v, n, sizeof(*v), cmp_u64);
	printf("cluster_latency: path=%s n=%zu p50_us=%.1f p99_us=%.1f max_us=%.1f timeouts=%zu\n",
	       what, n, pct(v, n, 0.5) / 1e3, pct(v, n, 0.99) / 1e3, n ? v[n - 1] / 1e3 : 0.0, lost);
}

int main(int argc, char **argv)
{
	const char *an = NULL, *bn = NULL, *pod = NULL;
	size_t count = 2000, nk = 8;

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
	}
	if (!an || !bn || !pod || !count || !nk || nk > 256) {
		fprintf(stderr, "usage: %s --a NAME --b NAME --pod POD [--count N] [--keys 1..256]\n",
			PROG);
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
		uint64_t t1 = wait_visible(a, keys[nk - 1], pa, t0 + 1000000000ull);
		uint64_t t2 = wait_visible(b, keys[nk - 1], pb, t0 + 1000000000ull);
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
	report("local", loc, nl, lost_l);
	report("remote", rem, nr, lost_r);
	kvidx_reader_close(a);
	kvidx_reader_close(b);
	return 0;
}
