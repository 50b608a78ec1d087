/*
 * bench_score — how fast kvidx_score() resolves a prompt's blocks in a table far bigger than
 * the last-level cache, next to what else could answer the same question: one kvidx_lookup()
 * per block, an in-process liburcu rculfhash holding the same keys, and the memory system's
 * own floor (independent and dependent random cache-line loads over an array as big as the
 * index's slots and arena).
 *
 * The index is filled as prompts: chains of B random keys, each prompt held on one pod, and
 * a prefix of some prompts on a second or third pod, as a fleet of vLLM pods reports them.
 * By default a prompt is stored in one call, so its entries lie side by side in the arena as
 * in a fresh index; --scatter stores keys one by one in random order, as after long churn.
 * The floor is measured on 4 KiB pages (as /dev/shm has them) and on 2 MiB pages, whose
 * difference is the TLB's share. The reader runs in the writer's process (its own mapping of the segment), a first
 * measurement rather than the router's multi-process setup. One warm-up round, then R timed
 * rounds; every figure is the median over rounds, and every ratio is the median of ratios
 * taken within one round, so the machine's noise hits both sides alike. Build with -DNDEBUG.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <urcu.h>            /* the default flavor: rcu_read_lock() and friends */
#include <urcu/rculfhash.h>

#include "inspect.h"
#include "kvidx.h"

#define PROG "bench_score"
#define HUGE_2M (2ul << 20)
#define MAX_ROUNDS 101

struct opts {
	uint64_t keys;
	uint32_t blocks, pods, prompts, reps;
	bool quick, scatter;
};

/* The pods holding one prompt: pod[i] holds its first len[i] blocks; pod[0] holds them all. */
struct prompt_pods {
	uint16_t pod[3];
	uint32_t len[3];
	unsigned n;
};

/* A key of the rculfhash copy: the node, the key and its pods in one 32-byte object. */
struct lf_node {
	struct cds_lfht_node node;
	uint64_t key;
	uint16_t pod[3];
	uint16_t npods;
};

/* An array for the floor measurements: nlines cache lines, word 0 of each names the next line
 * of one random cycle through all of them. */
struct floor_mem {
	uint64_t *a;
	uint64_t nlines;
	void *map;
	size_t map_len;
	uint64_t huge_kb; /* how much of it transparent hugepages back, from /proc/self/smaps */
};

/* Per-pod scratch of the baseline scorers: blocks held from block 0, and which pods to reset. */
struct rows {
	uint32_t *blocks;
	double *score;
	uint16_t *touched;
	unsigned ntouched;
};

/* Figures of one round. */
enum { M_SCORE, M_LOOKUP, M_LFHT, M_INDEP, M_DEP, M_INDEP2M, M_DEP2M, M_N };
static const char *const m_names[M_N] = {
	"kvidx_score", "kvidx_lookup", "rculfhash", "floor indep 4k", "floor dep 4k",
	"floor indep 2M", "floor dep 2M",
};

static volatile uint64_t sink; /* keeps measured loads alive */

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline uint64_t xorshift64(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return *s = x;
}

/* A uniform index below n from a 64-bit random word. */
static inline uint64_t below(uint64_t x, uint64_t n)
{
	return (uint64_t)(((unsigned __int128)x * n) >> 64);
}

/* A uniformly random permutation of 0..n-1 (Fisher-Yates). */
static void shuffle(uint32_t *v, uint64_t n, uint64_t *s)
{
	for (uint64_t i = 0; i < n; i++)
		v[i] = (uint32_t)i;
	for (uint64_t i = n - 1; i > 0; i--) {
		uint64_t j = below(xorshift64(s), i + 1);
		uint32_t tmp = v[i];
		v[i] = v[j];
		v[j] = tmp;
	}
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double median(const double *v, unsigned n)
{
	double s[MAX_ROUNDS];

	memcpy(s, v, n * sizeof(*s));
	qsort(s, n, sizeof(*s), cmp_double);
	return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

static void usage(FILE *f)
{
	fputs("Usage: " PROG " [--quick] [--keys N] [--blocks B] [--pods P] [--prompts K] [--reps R]\n"
	      "Fills a kvidx index with N keys as prompts of B blocks on P pods, then measures\n"
	      "kvidx_score() per key over K random full-hit prompts against single-key\n"
	      "kvidx_lookup(), an in-process liburcu rculfhash with the same keys, and random\n"
	      "cache-line loads over an array of the index's size (4 KiB and 2 MiB pages).\n"
	      "Prints a table and one summary line starting with '" PROG " '.\n"
	      "\n"
	      "  --quick        1 Mi keys, 512 prompts, 5 rounds (under 30 s)\n"
	      "  --keys N       keys in the index (default 8388608)\n"
	      "  --blocks B     blocks per prompt (default 512)\n"
	      "  --pods P       pods, 1..4096 (default 64)\n"
	      "  --prompts K    prompts scored per round (default 2048)\n"
	      "  --reps R       timed rounds after one warm-up round, 1..101 (default 9)\n"
	      "  --scatter      store keys one at a time in random order, so a prompt's entries\n"
	      "                 (and rculfhash nodes) lie scattered, as after long churn; by\n"
	      "                 default each prompt is stored in one call and its entries are\n"
	      "                 adjacent, as a fresh index fed by whole-request events has them\n"
	      "  -h, --help     print this help and exit\n"
	      "\n"
	      "Summary fields: *_ns_per_key are medians over rounds; floor_* are ns per load;\n"
	      "ratio_X is X's time per key over kvidx_score's (above 1: kvidx_score is faster);\n"
	      "ratio_floor is kvidx_score's time per key over one independent load.\n",
	      f);
}

static uint64_t parse_num(const char *flag, const char *s, uint64_t lo, uint64_t hi)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno || end == s || *end || s[0] == '-' || v < lo || v > hi) {
		fprintf(stderr, PROG ": %s: expected a number in %" PRIu64 "..%" PRIu64 ", got '%s'\n",
			flag, lo, hi, s);
		exit(2);
	}
	return v;
}

static void parse_opts(int argc, char **argv, struct opts *o)
{
	static const struct option lo[] = {
		{ "quick", no_argument, NULL, 'q' },   { "keys", required_argument, NULL, 'n' },
		{ "blocks", required_argument, NULL, 'b' }, { "pods", required_argument, NULL, 'p' },
		{ "prompts", required_argument, NULL, 'k' }, { "reps", required_argument, NULL, 'r' },
		{ "scatter", no_argument, NULL, 's' }, { "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	uint64_t keys = 0, prompts = 0, reps = 0;
	int c;

	*o = (struct opts){ .blocks = 512, .pods = 64 };
	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (c) {
		case 'q': o->quick = true; break;
		case 's': o->scatter = true; break;
		case 'n': keys = parse_num("--keys", optarg, 1, 1ull << 30); break;
		case 'b': o->blocks = (uint32_t)parse_num("--blocks", optarg, 1, 1u << 20); break;
		case 'p': o->pods = (uint32_t)parse_num("--pods", optarg, 1, 4096); break;
		case 'k': prompts = parse_num("--prompts", optarg, 1, 1u << 24); break;
		case 'r': reps = parse_num("--reps", optarg, 1, MAX_ROUNDS); break;
		case 'h': usage(stdout); exit(0);
		default:
			fputs("Try '" PROG " --help' for more information.\n", stderr);
			exit(2);
		}
	}
	if (optind < argc) {
		fprintf(stderr, PROG ": unexpected argument '%s'\n", argv[optind]);
		exit(2);
	}
	o->keys = keys ? keys : o->quick ? 1ull << 20 : 8ull << 20;
	o->prompts = (uint32_t)(prompts ? prompts : o->quick ? 512 : 2048);
	o->reps = (uint32_t)(reps ? reps : o->quick ? 5 : 9);
	if (o->keys < o->blocks) {
		fprintf(stderr, PROG ": --keys must be at least --blocks (one full prompt)\n");
		exit(2);
	}
}

static void die(const char *what, int err)
{
	fprintf(stderr, PROG ": %s: %s\n", what, kvidx_strerror(err));
	exit(1);
}

static void *xcalloc(size_t n, size_t size)
{
	void *p = calloc(n, size);

	if (!p)
		die("out of memory", -ENOMEM);
	return p;
}

/* ---- filling ---- */

/* Blocks of prompt p (the last prompt may be short). */
static uint32_t prompt_len(const struct opts *o, uint64_t p)
{
	uint64_t left = o->keys - p * o->blocks;

	return left < o->blocks ? (uint32_t)left : o->blocks;
}

/* Chooses each prompt's pods: one holds it all; one prompt in 8 has a prefix on a second pod,
 * one in 32 on a third, so most keys are held once and some two or three times. */
static void plan_pods(const struct opts *o, struct prompt_pods *pp, uint64_t nprompts)
{
	uint64_t s = 0x9e3779b97f4a7c15ull;

	for (uint64_t p = 0; p < nprompts; p++) {
		uint32_t len = prompt_len(o, p);
		struct prompt_pods *q = &pp[p];
		q->n = 1;
		q->pod[0] = (uint16_t)below(xorshift64(&s), o->pods);
		q->len[0] = len;
		for (unsigned extra = 1; extra < 3 && o->pods > extra; extra++) {
			if (below(xorshift64(&s), extra == 1 ? 8 : 4) != 0)
				break;
			uint16_t pod;
			bool dup;
			do {
				pod = (uint16_t)below(xorshift64(&s), o->pods);
				dup = false;
				for (unsigned i = 0; i < q->n; i++)
					dup |= q->pod[i] == pod;
			} while (dup);
			q->pod[q->n] = pod;
			q->len[q->n] = 1 + (uint32_t)below(xorshift64(&s), len);
			q->n++;
		}
	}
}

static void store_or_die(struct kvidx *w, int pod, const uint64_t *k, size_t n, uint64_t now,
			 uint64_t *failed)
{
	int rc = kvidx_store(w, pod, k, n, KVIDX_TIER_GPU, now, NULL, NULL);

	if (rc == -KVIDX_EFULL)
		(*failed)++;
	else if (rc < 0)
		die("kvidx_store", rc);
}

/*
 * Stores every prompt through the writer API, ticking as the ingest daemon would so that RCU
 * limbo (entries copied when a second pod joins a key) is reclaimed. Without order, each pod's
 * part of a prompt is one call; with order (a permutation of the keys), keys go one at a time
 * in that order.
 */
static double fill_index(struct kvidx *w, const struct opts *o, const uint64_t *keys,
			 const struct prompt_pods *pp, uint64_t nprompts, const int *podidx,
			 const uint32_t *order)
{
	uint64_t t0 = now_ns(), failed = 0;

	for (uint64_t p = 0; !order && p < nprompts; p++) {
		uint64_t now = kvidx_now_ns();
		for (unsigned i = 0; i < pp[p].n; i++)
			store_or_die(w, podidx[pp[p].pod[i]], keys + p * o->blocks, pp[p].len[i],
				     now, &failed);
		kvidx_writer_tick(w, now);
	}
	for (uint64_t t = 0; order && t < o->keys; t++) {
		uint64_t now = kvidx_now_ns(), p = order[t] / o->blocks;
		uint32_t j = order[t] % o->blocks;
		for (unsigned i = 0; i < pp[p].n; i++)
			if (j < pp[p].len[i])
				store_or_die(w, podidx[pp[p].pod[i]], &keys[order[t]], 1, now,
					     &failed);
		if (t % 512 == 511)
			kvidx_writer_tick(w, now);
	}
	if (failed)
		fprintf(stderr, PROG ": warning: %" PRIu64 " stores hit a full table\n", failed);
	return (double)(now_ns() - t0) / 1e9;
}

/* ---- the rculfhash copy ---- */

static int lf_match(struct cds_lfht_node *node, const void *key)
{
	return caa_container_of(node, struct lf_node, node)->key == *(const uint64_t *)key;
}

/* Adds the keys in the index's fill order; nodes[t] is the t-th key added, so nodes lie in
 * memory as the index's entries do. */
static double fill_lfht(struct cds_lfht *ht, struct lf_node *nodes, const struct opts *o,
			const uint64_t *keys, const struct prompt_pods *pp, const uint32_t *order)
{
	uint64_t t0 = now_ns();

	rcu_read_lock();
	for (uint64_t t = 0; t < o->keys; t++) {
		uint64_t i = order ? order[t] : t, p = i / o->blocks;
		uint32_t j = (uint32_t)(i % o->blocks);
		struct lf_node *n = &nodes[t];
		cds_lfht_node_init(&n->node);
		n->key = keys[i];
		for (unsigned q = 0; q < pp[p].n; q++)
			if (j < pp[p].len[q])
				n->pod[n->npods++] = pp[p].pod[q];
		cds_lfht_add(ht, kv_mix(keys[i]), &n->node);
		if (t % 512 == 511) {
			rcu_read_unlock();
			rcu_read_lock();
		}
	}
	rcu_read_unlock();
	return (double)(now_ns() - t0) / 1e9;
}

/* ---- scorers: each returns the longest prefix any pod holds ---- */

/* Counts block i for pod p if p holds blocks 0..i-1; returns whether p's run goes on. */
static inline bool rows_extend(struct rows *rw, unsigned p, uint32_t i)
{
	if (rw->blocks[p] != i)
		return false;
	if (i == 0)
		rw->touched[rw->ntouched++] = (uint16_t)p;
	rw->blocks[p] = i + 1;
	rw->score[p] += 1.0; /* GPU weight: kvidx_score adds one too */
	return true;
}

static uint32_t rows_best_reset(struct rows *rw)
{
	uint32_t best = 0;

	for (unsigned i = 0; i < rw->ntouched; i++) {
		unsigned p = rw->touched[i];
		if (rw->blocks[p] > best)
			best = rw->blocks[p];
		rw->blocks[p] = 0;
		rw->score[p] = 0;
	}
	rw->ntouched = 0;
	return best;
}

static uint32_t score_kvidx(struct kvidx_reader *r, const uint64_t *k, uint32_t n)
{
	struct kvidx_score out[64];
	uint32_t best = 0;
	int rc = kvidx_score(r, k, n, NULL, 0, NULL, out, 64);

	if (rc < 0)
		die("kvidx_score", rc);
	for (int i = 0; i < rc; i++)
		if (out[i].blocks > best)
			best = out[i].blocks;
	return best;
}

static uint32_t score_lookup(struct kvidx_reader *r, struct rows *rw, const uint64_t *k,
			     uint32_t n)
{
	struct kvidx_rec rec[16];

	for (uint32_t i = 0; i < n; i++) {
		int rc = kvidx_lookup(r, k[i], rec, 16);
		unsigned alive = 0;
		if (rc < 0)
			die("kvidx_lookup", rc);
		for (int j = 0; j < rc; j++)
			alive += rows_extend(rw, rec[j].pod, i);
		if (!alive)
			break;
	}
	return rows_best_reset(rw);
}

static uint32_t score_lfht(struct cds_lfht *ht, struct rows *rw, const uint64_t *k, uint32_t n)
{
	struct cds_lfht_iter it;

	rcu_read_lock();
	for (uint32_t i = 0; i < n; i++) {
		cds_lfht_lookup(ht, kv_mix(k[i]), lf_match, &k[i], &it);
		struct cds_lfht_node *node = cds_lfht_iter_get_node(&it);
		unsigned alive = 0;
		if (!node)
			break;
		const struct lf_node *ln = caa_container_of(node, struct lf_node, node);
		for (unsigned j = 0; j < ln->npods; j++)
			alive += rows_extend(rw, ln->pod[j], i);
		if (!alive)
			break;
	}
	rcu_read_unlock();
	return rows_best_reset(rw);
}

/* ---- the physical floor ---- */

/* Which part of [p, p+len) transparent hugepages back, in KiB (0 if smaps cannot tell). */
static uint64_t smaps_huge_kb(const void *p, size_t len)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	char line[256];
	bool in = false;
	uint64_t kb = 0, lo, hi, v;

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		/* Mapping headers are the only lines of the form "lo-hi ...". */
		if (sscanf(line, "%" SCNx64 "-%" SCNx64 " ", &lo, &hi) == 2) {
			in = lo < (uint64_t)(uintptr_t)p + len && hi > (uint64_t)(uintptr_t)p;
			continue;
		}
		if (in && sscanf(line, "AnonHugePages: %" SCNu64 " kB", &v) == 1)
			kb += v;
	}
	fclose(f);
	return kb;
}

/* Maps nlines cache lines, 2 MiB-aligned, on 4 KiB pages or asking for 2 MiB ones, and links
 * them in the cycle given by order (a random permutation of the line numbers). */
static void floor_build(struct floor_mem *fm, uint64_t nlines, const uint32_t *order, bool huge)
{
	size_t len = nlines * 64;

	fm->nlines = nlines;
	fm->map_len = len + HUGE_2M;
	fm->map = mmap(NULL, fm->map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		       -1, 0);
	if (fm->map == MAP_FAILED)
		die("mmap", -errno);
	fm->a = (uint64_t *)(((uintptr_t)fm->map + HUGE_2M - 1) & ~(uintptr_t)(HUGE_2M - 1));
	madvise(fm->a, len, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
	for (uint64_t i = 0; i < nlines; i++)
		fm->a[(uint64_t)order[i] * 8] = order[i + 1 < nlines ? i + 1 : 0];
	fm->huge_kb = smaps_huge_kb(fm->a, len);
}

static void floor_free(struct floor_mem *fm)
{
	if (fm->map)
		munmap(fm->map, fm->map_len);
}

/* Independent loads: the next index never waits for a load, so misses overlap. A Weyl
 * sequence keeps the generator's own dependency chain one add long. */
static double floor_indep(const struct floor_mem *fm, uint64_t nloads, uint64_t seed)
{
	uint64_t x = seed, sum = 0, t0 = now_ns();

	for (uint64_t i = 0; i < nloads; i++) {
		x += 0x9e3779b97f4a7c15ull;
		sum += fm->a[below(kv_mix(x), fm->nlines) * 8];
	}
	uint64_t t = now_ns() - t0;
	sink += sum;
	return (double)t / (double)nloads;
}

/* Dependent loads: each address is the previous load's value (pointer chasing). */
static double floor_dep(const struct floor_mem *fm, uint64_t nloads, uint64_t start)
{
	uint64_t p = start % fm->nlines, t0 = now_ns();

	for (uint64_t i = 0; i < nloads; i++)
		p = fm->a[p * 8];
	uint64_t t = now_ns() - t0;
	sink += p;
	return (double)t / (double)nloads;
}

/* ---- main ---- */

/* Touches every page of the reader's mapping once, as a long-running router has: the first
 * touch of each 4 KiB page is a minor fault, which is not what a lookup costs. */
static void prefault(const struct kv_view *v)
{
	uint64_t sum = 0;

	for (size_t off = 0; off < v->size; off += 4096)
		sum += ((const volatile uint8_t *)v->base)[off];
	sink += sum;
}

int main(int argc, char **argv)
{
	struct opts o;
	char name[KVIDX_NAME_MAX];
	double fig[M_N][MAX_ROUNDS], rat_lookup[MAX_ROUNDS], rat_lfht[MAX_ROUNDS];
	double rat_floor[MAX_ROUNDS];
	uint64_t mism = 0;

	parse_opts(argc, argv, &o);
	setvbuf(stdout, NULL, _IOLBF, 0);
	snprintf(name, sizeof(name), "bench-%d", (int)getpid());

	uint64_t nprompts = (o.keys + o.blocks - 1) / o.blocks, nfull = o.keys / o.blocks;
	uint64_t *keys = xcalloc(o.keys, sizeof(*keys));
	struct prompt_pods *pp = xcalloc(nprompts, sizeof(*pp));
	uint64_t s = 0x2545f4914f6cdd1dull;
	for (uint64_t i = 0; i < o.keys; i++)
		keys[i] = xorshift64(&s);
	plan_pods(&o, pp, nprompts);

	/* 1. The index: capacity for exactly the keys, two records per key. */
	struct kvidx_writer_opts wo = {
		.name = name,
		.geo = { .capacity = o.keys, .records = 2 * o.keys, .pods_per_key = 10,
			 .max_pods = o.pods },
		.group = (gid_t)-1,
	};
	struct kvidx *w = kvidx_writer_open(&wo);
	if (!w)
		die("kvidx_writer_open", -errno);
	int *podidx = xcalloc(o.pods, sizeof(*podidx));
	for (uint32_t p = 0; p < o.pods; p++) {
		char pn[KVIDX_POD_NAME_MAX];
		snprintf(pn, sizeof(pn), "10.%u.%u.%u:8000", p >> 16, (p >> 8) & 255, p & 255);
		podidx[p] = kvidx_pod_add(w, pn, "bench-model");
		if (podidx[p] < 0)
			die("kvidx_pod_add", podidx[p]);
	}
	uint32_t *fill_order = NULL;
	if (o.scatter) {
		fill_order = xcalloc(o.keys, sizeof(*fill_order));
		shuffle(fill_order, o.keys, &s);
	}
	printf("%s: %" PRIu64 " keys as %" PRIu64 " prompts of %u blocks on %u pods, stored %s; "
	       "%u prompts x %u rounds\n", PROG, o.keys, nprompts, o.blocks, o.pods,
	       o.scatter ? "scattered" : "prompt by prompt", o.prompts, o.reps);
	double fill_s = fill_index(w, &o, keys, pp, nprompts, podidx, fill_order);

	/* 2. A reader in this same process. */
	struct kvidx_reader *r = kvidx_reader_open(name);
	if (!r)
		die("kvidx_reader_open", -errno);
	const struct kv_view *v = kv_reader_view(r);
	uint64_t nkeys = ld_relaxed(&v->st->keys), nrecs = ld_relaxed(&v->st->records);
	uint64_t arena_b = ld_relaxed(&v->st->arena_used) * 16;
	uint64_t slots_b = (v->nslots + v->max_probe) * 8;
	double bytes_per_key = (double)v->size / (double)nkeys;
	printf("fill: %.2f s (%.0f ns/key), %" PRIu64 " keys, %.3f records/key; segment %.1f MiB "
	       "(slots %.1f MiB, arena used %.1f MiB of %.1f MiB): %.1f bytes/key, arena %.1f "
	       "bytes/key\n", fill_s, fill_s * 1e9 / (double)o.keys, nkeys,
	       (double)nrecs / (double)nkeys, (double)v->size / 1048576.0,
	       (double)slots_b / 1048576.0, (double)arena_b / 1048576.0,
	       (double)v->units * 16 / 1048576.0, bytes_per_key, (double)arena_b / (double)nkeys);
	if (nkeys != o.keys)
		fprintf(stderr, PROG ": warning: index holds %" PRIu64 " of %" PRIu64 " keys\n",
			nkeys, o.keys);
	uint64_t t0 = now_ns();
	prefault(v);
	printf("reader: prefaulted its mapping in %.2f s\n", (double)(now_ns() - t0) / 1e9);

	/* The rculfhash copy: a fixed bucket array of a power of two >= N, no resizing. */
	rcu_register_thread();
	unsigned long nb = 1;
	while (nb < o.keys)
		nb <<= 1;
	struct cds_lfht *ht = cds_lfht_new(nb, nb, nb, 0, NULL);
	if (!ht)
		die("cds_lfht_new", -ENOMEM);
	struct lf_node *nodes = xcalloc(o.keys, sizeof(*nodes));
	double lf_fill_s = fill_lfht(ht, nodes, &o, keys, pp, fill_order);
	free(fill_order);
	printf("rculfhash: %lu buckets, %zu-byte nodes, filled in %.2f s (%.0f ns/key)\n", nb,
	       sizeof(struct lf_node), lf_fill_s, lf_fill_s * 1e9 / (double)o.keys);

	/* The floor arrays: as many cache lines as the slots and the whole arena. */
	uint64_t nlines = (slots_b + v->units * 16 + 63) / 64;
	uint32_t *order = xcalloc(nlines, sizeof(*order));
	t0 = now_ns();
	shuffle(order, nlines, &s);
	struct floor_mem f4k = { 0 }, f2m = { 0 };
	floor_build(&f4k, nlines, order, false);
	floor_build(&f2m, nlines, order, true);
	free(order);
	printf("floor: 2 x %.1f MiB arrays built in %.2f s; 2 MiB-page one has %.0f%% on "
	       "hugepages, 4 KiB one %.0f%%\n", (double)nlines * 64 / 1048576.0,
	       (double)(now_ns() - t0) / 1e9, 100.0 * (double)f2m.huge_kb * 1024 / (nlines * 64.0),
	       100.0 * (double)f4k.huge_kb * 1024 / (nlines * 64.0));

	/* 3. Rounds: the same random prompts for every scorer; round 0 is the warm-up. */
	struct rows rw = {
		.blocks = xcalloc(o.pods, sizeof(uint32_t)),
		.score = xcalloc(o.pods, sizeof(double)),
		.touched = xcalloc(o.pods, sizeof(uint16_t)),
	};
	uint32_t *plist = xcalloc(o.prompts, sizeof(*plist));
	uint64_t nk = (uint64_t)o.prompts * o.blocks;
	uint64_t dep_loads = nk / 4 > 1000 ? nk / 4 : 1000;
	t0 = now_ns();
	for (uint32_t round = 0; round <= o.reps; round++) {
		uint64_t ps = 0x51afd7ed558ccdull + round, t;
		uint64_t got[3] = { 0, 0, 0 };
		double ns[M_N];
		for (uint32_t i = 0; i < o.prompts; i++)
			plist[i] = (uint32_t)below(xorshift64(&ps), nfull);

		t = now_ns();
		for (uint32_t i = 0; i < o.prompts; i++)
			got[0] += score_kvidx(r, keys + (uint64_t)plist[i] * o.blocks, o.blocks);
		ns[M_SCORE] = (double)(now_ns() - t) / (double)nk;
		t = now_ns();
		for (uint32_t i = 0; i < o.prompts; i++)
			got[1] += score_lookup(r, &rw, keys + (uint64_t)plist[i] * o.blocks, o.blocks);
		ns[M_LOOKUP] = (double)(now_ns() - t) / (double)nk;
		t = now_ns();
		for (uint32_t i = 0; i < o.prompts; i++)
			got[2] += score_lfht(ht, &rw, keys + (uint64_t)plist[i] * o.blocks, o.blocks);
		ns[M_LFHT] = (double)(now_ns() - t) / (double)nk;
		ns[M_INDEP] = floor_indep(&f4k, nk, ps);
		ns[M_DEP] = floor_dep(&f4k, dep_loads, ps);
		ns[M_INDEP2M] = floor_indep(&f2m, nk, ps);
		ns[M_DEP2M] = floor_dep(&f2m, dep_loads, ps);
		for (int m = 0; m < 3; m++)
			mism += got[m] != nk;
		if (round == 0)
			continue;
		for (int m = 0; m < M_N; m++)
			fig[m][round - 1] = ns[m];
		rat_lookup[round - 1] = ns[M_LOOKUP] / ns[M_SCORE];
		rat_lfht[round - 1] = ns[M_LFHT] / ns[M_SCORE];
		rat_floor[round - 1] = ns[M_SCORE] / ns[M_INDEP];
	}
	double rounds_s = (double)(now_ns() - t0) / 1e9;
	if (mism)
		fprintf(stderr, PROG ": warning: %" PRIu64 " scorer rounds did not find every prompt "
			"fully held\n", mism);

	/* 4. Report. */
	double med[M_N];
	printf("\n%-16s %10s %10s %10s   (ns per key, or per load for floors; %u rounds of %"
	       PRIu64 " keys, %.1f s)\n", "measure", "median", "min", "max", o.reps, nk, rounds_s);
	for (int m = 0; m < M_N; m++) {
		double lo = fig[m][0], hi = fig[m][0];
		for (uint32_t i = 1; i < o.reps; i++) {
			lo = fig[m][i] < lo ? fig[m][i] : lo;
			hi = fig[m][i] > hi ? fig[m][i] : hi;
		}
		med[m] = median(fig[m], o.reps);
		printf("%-16s %10.2f %10.2f %10.2f\n", m_names[m], med[m], lo, hi);
	}
	double rl = median(rat_lookup, o.reps), rf = median(rat_lfht, o.reps);
	double rfl = median(rat_floor, o.reps);
	printf("ratios (median of per-round): lookup/score %.2f, rculfhash/score %.2f, "
	       "score/floor-indep %.2f\n\n", rl, rf, rfl);
	printf("%s keys=%" PRIu64 " blocks=%u pods=%u prompts=%u reps=%u scatter=%d fill_s=%.2f "
	       "score_ns_per_key=%.2f lookup_ns_per_key=%.2f rculfhash_ns_per_key=%.2f "
	       "floor_indep_ns=%.2f floor_dep_ns=%.2f floor_indep_2m_ns=%.2f floor_dep_2m_ns=%.2f "
	       "ratio_lookup=%.2f ratio_rculfhash=%.2f ratio_floor=%.2f bytes_per_key=%.1f\n",
	       PROG, o.keys, o.blocks, o.pods, o.prompts, o.reps, o.scatter, fill_s, med[M_SCORE],
	       med[M_LOOKUP], med[M_LFHT], med[M_INDEP], med[M_DEP], med[M_INDEP2M], med[M_DEP2M],
	       rl, rf, rfl, bytes_per_key);

	/* 5. Clean up: the rculfhash nodes are removed before it is destroyed, as it requires. */
	struct cds_lfht_iter it;
	struct cds_lfht_node *node;
	rcu_read_lock();
	cds_lfht_for_each(ht, &it, node)
		cds_lfht_del(ht, node);
	rcu_read_unlock();
	synchronize_rcu();
	if (cds_lfht_destroy(ht, NULL) < 0)
		fprintf(stderr, PROG ": warning: cds_lfht_destroy failed\n");
	rcu_unregister_thread();
	free(nodes);
	floor_free(&f4k);
	floor_free(&f2m);
	kvidx_reader_close(r);
	kvidx_writer_close(w, true);
	free(rw.blocks);
	free(rw.score);
	free(rw.touched);
	free(plist);
	free(podidx);
	free(pp);
	free(keys);
	return mism ? 1 : 0;
}
