/*
 * testidx — a scripted index for the tests that run outside Criterion (the install test, the
 * Python binding's pytest suite): a writer driven line by line on standard input, and a
 * reader that prints kvidx_score()'s rows, so that a test in another language can build an
 * index and compare its own answers with the C API's.
 *
 *   testidx write NAME [ALGO [SEED [BLOCK_SIZE]]]
 *     Creates index NAME and reads commands, one per line, answering each with one line:
 *       pod NAME [MODEL]          -> "pod INDEX"
 *       store POD TIER KEY...     -> "ok N"        (TIER: gpu, cpu, disk, other; KEY: hex)
 *       spec POD TTL_MS KEY...    -> "ok N"
 *       remove POD TIER KEY...    -> "ok N"        (TIER any: every tier)
 *       pause POD 0|1             -> "ok 0"
 *       ttl MS                    -> "ok 0"        (TTL of the predictions commits make)
 *     Between commands it drains the readers' route rings every few milliseconds, as ingestd
 *     does: a commit adds predictions (kvidx_speculate) and prints "route CORR POD NKEYS
 *     ADDED", an outcome prints "outcome CORR POD CACHED PROMPT". At end of input the index
 *     is removed. A bad command prints "error MESSAGE".
 *   testidx score NAME [CAND,...|-] KEY...
 *     One line per row: "pod=I name=N blocks=B spec=S gpu=G cpu=C disk=D other=O
 *     spec_run=R score=X" (X with %.17g).
 *   testidx time NAME ROUNDS KEY...
 *     For bench/py_score.py: the median and minimum over ROUNDS rounds of the ns per kvidx_score()
 *     call on KEY... (every pod holding block 0, default weights), "score_ns=N min_ns=M rows=R".
 *   testidx time-keys ALGO BLOCK_SIZE NTOKENS ROUNDS
 *     The same for kvidx_key_chain() over NTOKENS tokens, "keys_ns=N min_ns=M keys=K".
 *
 * Exit status: 0, 1 on a failed call, 2 on bad usage.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvidx.h"
#include "kvidx_writer.h"

#define MAX_KEYS 8192

static uint32_t g_ttl_ms = 10000;

static void on_route(void *arg, const struct kvidx_route *rt, uint64_t commit_ns)
{
	struct kvidx *w = arg;
	int n = kvidx_speculate(w, rt->pod, rt->keys, rt->nkeys, kvidx_now_ns(), g_ttl_ms);

	printf("route %" PRIu64 " %d %zu %d\n", rt->corr_id, rt->pod, rt->nkeys, n);
	fflush(stdout);
}

static void on_outcome(void *arg, const struct kvidx_outcome *o)
{
	printf("outcome %" PRIu64 " %d %u %u\n", o->corr_id, o->pod, o->cached_tokens,
	       o->prompt_tokens);
	fflush(stdout);
}

static int parse_tier(const char *s, unsigned *out)
{
	static const char *const names[] = { "gpu", "cpu", "disk", "other" };

	if (!strcmp(s, "any")) {
		*out = 0;
		return 0;
	}
	for (unsigned t = 0; t < 4; t++)
		if (!strcmp(s, names[t])) {
			*out = 1u << t;
			return 0;
		}
	return -EINVAL;
}

/* Parses the hex keys in the rest of the line into keys; returns their number or -1. */
static long parse_keys(char *rest, uint64_t *keys)
{
	long n = 0;

	for (char *tok = strtok(rest, " \t\n"); tok; tok = strtok(NULL, " \t\n")) {
		char *end;
		errno = 0;
		unsigned long long k = strtoull(tok, &end, 16);
		if (errno || *end || n == MAX_KEYS)
			return -1;
		keys[n++] = k;
	}
	return n;
}

static int command(struct kvidx *w, char *line, uint64_t *keys)
{
	char *cmd = strtok(line, " \t\n"), *a = strtok(NULL, " \t\n"), *b;
	long n;
	int rc = -EINVAL;
	unsigned tier;

	if (!cmd)
		return -EINVAL;
	if (!strcmp(cmd, "pod") && a) {
		b = strtok(NULL, " \t\n");
		rc = kvidx_pod_add(w, a, b);
		if (rc >= 0)
			printf("pod %d\n", rc);
		return rc < 0 ? rc : 0;
	}
	if (!strcmp(cmd, "ttl") && a) {
		g_ttl_ms = (uint32_t)strtoul(a, NULL, 10);
		rc = 0;
	} else if (!strcmp(cmd, "pause") && a && (b = strtok(NULL, " \t\n"))) {
		rc = kvidx_pod_set_spec_paused(w, atoi(a), atoi(b) != 0);
	} else if ((!strcmp(cmd, "store") || !strcmp(cmd, "remove")) && a &&
		   (b = strtok(NULL, " \t\n")) && parse_tier(b, &tier) == 0 &&
		   (n = parse_keys(strtok(NULL, ""), keys)) >= 0) {
		if (cmd[0] == 's')
			rc = tier ? kvidx_store(w, atoi(a), keys, (size_t)n, tier, kvidx_now_ns()) : -EINVAL;
		else
			rc = kvidx_remove(w, atoi(a), keys, (size_t)n, tier);
	} else if (!strcmp(cmd, "spec") && a && (b = strtok(NULL, " \t\n")) &&
		   (n = parse_keys(strtok(NULL, ""), keys)) >= 0) {
		rc = kvidx_speculate(w, atoi(a), keys, (size_t)n, kvidx_now_ns(),
				     (uint32_t)strtoul(b, NULL, 10));
	}
	if (rc >= 0)
		printf("ok %d\n", rc);
	return rc < 0 ? rc : 0;
}

static int run_writer(int argc, char **argv)
{
	struct kvidx_writer_opts o = { .name = argv[2] };
	static uint64_t keys[MAX_KEYS];
	char line[1 << 17];
	size_t len = 0;

	if (argc > 3 && kvidx_key_algo_parse(argv[3], &o.algo) < 0)
		return 2;
	if (argc > 4)
		o.seed = argv[4];
	if (argc > 5)
		o.block_size = (uint32_t)strtoul(argv[5], NULL, 10);
	o.geo.capacity = 1 << 14;
	o.geo.max_pods = 64;
	o.geo.max_readers = 64;
	o.geo.ring_entries = 256;
	struct kvidx *w = kvidx_writer_open(&o);
	if (!w) {
		fprintf(stderr, "testidx: kvidx_writer_open(%s): %s\n", o.name, kvidx_strerror(-errno));
		return 1;
	}
	struct kvidx_drain_ops ops = { .route = on_route, .outcome = on_outcome, .arg = w };
	printf("ready\n");
	fflush(stdout);
	for (;;) {
		struct pollfd p = { .fd = 0, .events = POLLIN };
		int pr = poll(&p, 1, 2);
		kvidx_writer_tick(w, kvidx_now_ns());
		kvidx_drain(w, 256, &ops);
		if (pr <= 0)
			continue;
		ssize_t got = read(0, line + len, sizeof(line) - 1 - len);
		if (got <= 0)
			break;
		len += (size_t)got;
		char *nl;
		while ((nl = memchr(line, '\n', len))) {
			*nl = 0;
			size_t used = (size_t)(nl - line) + 1;
			int rc = command(w, line, keys);
			if (rc < 0)
				printf("error %s\n", kvidx_strerror(rc));
			fflush(stdout);
			memmove(line, nl + 1, len - used);
			len -= used;
		}
		if (len == sizeof(line) - 1)
			break;
	}
	kvidx_writer_close(w, true);
	return 0;
}

static int run_score(int argc, char **argv)
{
	static uint64_t keys[MAX_KEYS];
	int cand[64], ncand = 0;
	struct kvidx_score rows[64];
	char name[KVIDX_POD_NAME_MAX], model[KVIDX_POD_NAME_MAX];
	long n = 0;

	if (argc < 4)
		return 2;
	if (strcmp(argv[3], "-"))
		for (char *t = strtok(argv[3], ","); t && ncand < 64; t = strtok(NULL, ","))
			cand[ncand++] = atoi(t);
	for (int i = 4; i < argc && n < MAX_KEYS; i++)
		keys[n++] = strtoull(argv[i], NULL, 16);
	struct kvidx_reader *r = kvidx_reader_open(argv[2]);
	if (!r) {
		fprintf(stderr, "testidx: kvidx_reader_open(%s): %s\n", argv[2], kvidx_strerror(-errno));
		return 1;
	}
	int nr = kvidx_score(r, keys, (size_t)n, ncand ? cand : NULL, (size_t)ncand, NULL, rows, 64);
	if (nr == -KVIDX_ERETRY)
		nr = kvidx_score(r, keys, (size_t)n, ncand ? cand : NULL, (size_t)ncand, NULL, rows, 64);
	if (nr < 0) {
		fprintf(stderr, "testidx: kvidx_score: %s\n", kvidx_strerror(nr));
		kvidx_reader_close(r);
		return 1;
	}
	for (int i = 0; i < nr; i++) {
		const struct kvidx_score *s = &rows[i];
		if (kvidx_reader_pod(r, s->pod, name, model) < 0)
			strcpy(name, "?");
		printf("pod=%d name=%s blocks=%u spec=%u gpu=%u cpu=%u disk=%u other=%u spec_run=%u "
		       "score=%.17g\n", s->pod, name, s->blocks, s->spec_blocks, s->run[0], s->run[1],
		       s->run[2], s->run[3], s->spec_run, s->score);
	}
	kvidx_reader_close(r);
	return 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Median and minimum over rounds of the ns per call, each round timing calls for ~1 ms. */
#define TIME_MEDIAN(rounds, out_ns, min_ns, call)                                                \
	do {                                                                             \
		uint64_t *t_ = calloc((size_t)(rounds), sizeof(uint64_t)), reps_ = 1;    \
		for (;;) { /* calibrate */                                               \
			uint64_t s_ = kvidx_now_ns();                                    \
			for (uint64_t i_ = 0; i_ < reps_; i_++)                          \
				call;                                                    \
			if (kvidx_now_ns() - s_ > 1000000 || reps_ > (1u << 24))         \
				break;                                                   \
			reps_ *= 2;                                                      \
		}                                                                        \
		for (int r_ = 0; r_ < (rounds); r_++) {                                  \
			uint64_t s_ = kvidx_now_ns();                                    \
			for (uint64_t i_ = 0; i_ < reps_; i_++)                          \
				call;                                                    \
			t_[r_] = (kvidx_now_ns() - s_) / reps_;                          \
		}                                                                        \
		qsort(t_, (size_t)(rounds), sizeof(uint64_t), cmp_u64);                  \
		(out_ns) = t_[(rounds) / 2];                                             \
		(min_ns) = t_[0];                                                        \
		free(t_);                                                                \
	} while (0)

static int run_time(int argc, char **argv)
{
	static uint64_t keys[MAX_KEYS];
	struct kvidx_score rows[64];
	long n = 0;
	int rounds = argc > 3 ? atoi(argv[3]) : 0, nr = 0;
	uint64_t ns, mn;

	if (rounds < 1)
		return 2;
	for (int i = 4; i < argc && n < MAX_KEYS; i++)
		keys[n++] = strtoull(argv[i], NULL, 16);
	struct kvidx_reader *r = kvidx_reader_open(argv[2]);
	if (!r)
		return 1;
	TIME_MEDIAN(rounds, ns, mn, nr = kvidx_score(r, keys, (size_t)n, NULL, 0, NULL, rows, 64));
	printf("score_ns=%" PRIu64 " min_ns=%" PRIu64 " rows=%d\n", ns, mn, nr);
	kvidx_reader_close(r);
	return nr < 0;
}

static int run_time_keys(int argc, char **argv)
{
	enum kvidx_key_algo algo;
	size_t nt = argc > 4 ? strtoul(argv[4], NULL, 10) : 0, nk = 0;
	uint32_t bs = argc > 3 ? (uint32_t)strtoul(argv[3], NULL, 10) : 0;
	int rounds = argc > 5 ? atoi(argv[5]) : 0;
	uint64_t ns, mn;

	if (argc < 6 || kvidx_key_algo_parse(argv[2], &algo) < 0 || !bs || rounds < 1 || !nt)
		return 2;
	uint32_t *tok = malloc(nt * sizeof(*tok));
	uint64_t *out = malloc((nt / bs + 1) * sizeof(*out));
	for (size_t i = 0; i < nt; i++)
		tok[i] = (uint32_t)(i + 1); /* the tokens py_score.py hashes: 1..NTOKENS */
	uint64_t root = kvidx_key_root(algo, "", "m");
	TIME_MEDIAN(rounds, ns, mn, nk = kvidx_key_chain(algo, root, tok, nt, bs, out, nt / bs + 1));
	printf("keys_ns=%" PRIu64 " min_ns=%" PRIu64 " keys=%zu\n", ns, mn, nk);
	free(tok);
	free(out);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc >= 3 && !strcmp(argv[1], "write"))
		return run_writer(argc, argv);
	if (argc >= 3 && !strcmp(argv[1], "score"))
		return run_score(argc, argv);
	if (argc >= 3 && !strcmp(argv[1], "time"))
		return run_time(argc, argv);
	if (argc >= 3 && !strcmp(argv[1], "time-keys"))
		return run_time_keys(argc, argv);
	fputs("usage: testidx write NAME [ALGO [SEED [BLOCK_SIZE]]] | testidx score NAME CANDS|- KEY...\n"
	      "       testidx time NAME ROUNDS KEY... | testidx time-keys ALGO BLOCK_SIZE NTOKENS ROUNDS\n",
	      stderr);
	return 2;
}
