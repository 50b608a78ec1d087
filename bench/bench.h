/*
 * bench.h — what the kvidx benchmarks share: clock, random numbers, percentiles, the result
 * rows (a fixed-width table line on stdout and one JSON object per line in --json FILE, which
 * bench/run.sh joins into results.json), the baselines' data structures (the naive
 * process-shared rwlock table, pod rows for scoring), and a dependency-free Redis client
 * (RESP over a plain loopback socket) with a redis-server the benchmark starts and stops.
 *
 * Each bench/bench_*.c defines PROG before including this file. Everything here is static, so
 * that the hot paths inline into each benchmark; what need not be is in benchlib.c, which every
 * benchmark links (benchlib.h, included here, declares it).
 */
#ifndef KVIDX_BENCH_H
#define KVIDX_BENCH_H

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "benchlib.h"
#include "inspect.h"
#include "kvidx_writer.h"

#ifndef PROG
#error "define PROG before including bench.h"
#endif

#define BFN static __attribute__((unused))

/* The name benchlib.c's messages give. */
const char bl_prog[] = PROG;

/* ---- basics ------------------------------------------------------------------------------ */

static volatile uint64_t bench_sink; /* keeps measured loads alive */

BFN uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

BFN void sleep_until_ns(uint64_t t)
{
	struct timespec ts = { .tv_sec = (time_t)(t / 1000000000ull),
			       .tv_nsec = (long)(t % 1000000000ull) };

	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

BFN void sleep_ns(uint64_t ns)
{
	sleep_until_ns(now_ns() + ns);
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

/* A random key that is never 0 (0 marks an empty slot in the naive table). */
static inline uint64_t rand_key(uint64_t *s)
{
	uint64_t k;

	do
		k = xorshift64(s);
	while (k == 0);
	return k;
}

BFN void __attribute__((format(printf, 1, 2), noreturn)) bdie(const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	fputs(PROG ": ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

BFN void *xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size ? size : 1);

	if (!p)
		bdie("out of memory (%zu x %zu bytes)", n, size);
	return p;
}

/* Anonymous memory shared with forked children. */
BFN void *shared_alloc(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		bdie("mmap %zu shared bytes: %s", len, strerror(errno));
	return p;
}

BFN uint64_t parse_num(const char *flag, const char *s, uint64_t lo, uint64_t hi)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 0);
	if (*end == 'k' || *end == 'K')
		v <<= 10, end++;
	else if (*end == 'm' || *end == 'M')
		v <<= 20, end++;
	if (errno || end == s || *end || s[0] == '-' || v < lo || v > hi) {
		fprintf(stderr, PROG ": %s: expected a number in %" PRIu64 "..%" PRIu64 ", got '%s'\n",
			flag, lo, hi, s);
		exit(2);
	}
	return v;
}

/* Resident set size of this process in bytes (from /proc/self/statm). */
BFN uint64_t rss_bytes(void)
{
	FILE *f = fopen("/proc/self/statm", "r");
	unsigned long size = 0, res = 0;

	if (!f)
		return 0;
	if (fscanf(f, "%lu %lu", &size, &res) != 2)
		res = 0;
	fclose(f);
	return (uint64_t)res * (uint64_t)sysconf(_SC_PAGESIZE);
}

/* CPU time (user + system) of process pid in seconds, from /proc/PID/stat; -1 if unknown. */
BFN double proc_cpu_s(pid_t pid)
{
	char path[64], buf[1024];
	unsigned long ut = 0, stt = 0;
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	char *p = strrchr(buf, ')'); /* the command name may hold spaces */
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut,
			 &stt) != 2)
		return -1;
	return (double)(ut + stt) / (double)sysconf(_SC_CLK_TCK);
}

/* The 1-minute load average. */
BFN double loadavg1(void)
{
	double l = -1;
	FILE *f = fopen("/proc/loadavg", "r");

	if (f) {
		if (fscanf(f, "%lf", &l) != 1)
			l = -1;
		fclose(f);
	}
	return l;
}

/* Halves keys until segments of bytes_per_key x keys (x copies) fit in /dev/shm's free space,
 * saying so: a small /dev/shm (containers often give 64 MiB) would otherwise end the run with
 * SIGBUS. */
BFN uint64_t fit_shm_keys(uint64_t keys, double bytes_per_key, unsigned copies)
{
	struct statvfs sv;
	uint64_t k = keys;

	if (statvfs("/dev/shm", &sv) != 0)
		return keys;
	double avail = (double)sv.f_bavail * (double)sv.f_frsize;
	while (k > 65536 && (double)k * bytes_per_key * copies * 1.1 > avail)
		k /= 2;
	if (k != keys)
		fprintf(stderr, PROG ": /dev/shm has %.0f MiB free: %" PRIu64 " keys instead of %"
			PRIu64 "\n", avail / 1048576.0, k, keys);
	return k;
}

/* Reads 2 x LLC-sized memory so that the next measurement starts with a cold cache. */
BFN void flush_llc(void)
{
	static uint64_t *buf;
	static const size_t words = (96ul << 20) / 8;
	uint64_t sum = 0;

	if (!buf) {
		buf = xcalloc(words, 8);
		for (size_t i = 0; i < words; i += 512)
			buf[i] = i;
	}
	for (size_t i = 0; i < words; i += 8)
		sum += buf[i];
	bench_sink += sum;
}

/* ---- cleanup on SIGINT/SIGTERM: this run's shm segments and child processes ------------- */

#define GUARD_MAX 16
static char g_guard_names[GUARD_MAX][KVIDX_NAME_MAX];
static volatile pid_t g_guard_pids[GUARD_MAX];

static void guard_signal(int sig)
{
	char p[KVIDX_NAME_MAX + 32];

	for (int i = 0; i < GUARD_MAX; i++) {
		if (g_guard_pids[i] > 0)
			kill(g_guard_pids[i], SIGKILL);
		if (!g_guard_names[i][0])
			continue;
		snprintf(p, sizeof(p), "/%.*s", KVIDX_NAME_MAX, g_guard_names[i]);
		shm_unlink(p);
		for (int g = 1; g <= 4; g++) {
			snprintf(p, sizeof(p), "/%.*s.data.%d", KVIDX_NAME_MAX, g_guard_names[i], g);
			shm_unlink(p);
		}
	}
	signal(sig, SIG_DFL);
	raise(sig);
}

/* Index name to unlink if the run is interrupted (NULL name: forget slot i). */
BFN void guard_name(int i, const char *name)
{
	snprintf(g_guard_names[i], sizeof(g_guard_names[i]), "%s", name ? name : "");
}

/* A child to kill if the run is interrupted; returns its slot (or -1). */
BFN int guard_pid(pid_t pid)
{
	for (int i = 0; i < GUARD_MAX; i++)
		if (g_guard_pids[i] <= 0) {
			g_guard_pids[i] = pid;
			return i;
		}
	return -1;
}

BFN void guard_unpid(pid_t pid)
{
	for (int i = 0; i < GUARD_MAX; i++)
		if (g_guard_pids[i] == pid)
			g_guard_pids[i] = 0;
}

/* ---- samples and percentiles ------------------------------------------------------------- */

struct samples {
	double *v;
	size_t n, cap;
	bool sorted;
};

BFN void samples_add(struct samples *s, double x)
{
	if (s->n == s->cap) {
		s->cap = s->cap ? 2 * s->cap : 4096;
		s->v = realloc(s->v, s->cap * sizeof(*s->v));
		if (!s->v)
			bdie("out of memory for samples");
	}
	s->v[s->n++] = x;
	s->sorted = false;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* The p-th percentile (0..100), nearest rank; NAN when empty. */
BFN double samples_pct(struct samples *s, double p)
{
	if (!s->n)
		return NAN;
	if (!s->sorted) {
		qsort(s->v, s->n, sizeof(*s->v), cmp_double);
		s->sorted = true;
	}
	size_t i = (size_t)ceil(p / 100.0 * (double)s->n);
	return s->v[i ? i - 1 : 0];
}

BFN void samples_clear(struct samples *s)
{
	s->n = 0;
	s->sorted = false;
}

BFN void samples_free(struct samples *s)
{
	free(s->v);
	memset(s, 0, sizeof(*s));
}

/* ---- result rows --------------------------------------------------------------------------- */

/* A row's parameters, as "k=v k=v" for the table and as a JSON object. */
struct params {
	char txt[400];
	char json[800];
};

BFN void par_add(struct params *p, const char *k, const char *jv, const char *tv)
{
	size_t t = strlen(p->txt), j = strlen(p->json);

	snprintf(p->txt + t, sizeof(p->txt) - t, "%s%s=%s", t ? " " : "", k, tv);
	snprintf(p->json + j, sizeof(p->json) - j, "%s\"%s\":%s", j ? "," : "", k, jv);
}

/* Human form of a count: 8388608 -> 8M, 102400 -> 100k. */
BFN const char *human_count(char *buf, size_t len, uint64_t v)
{
	if (v && v % (1ull << 20) == 0)
		snprintf(buf, len, "%" PRIu64 "Mi", v >> 20);
	else if (v >= 1000000 && v % 1000000 == 0)
		snprintf(buf, len, "%" PRIu64 "M", v / 1000000);
	else if (v && v % 1024 == 0)
		snprintf(buf, len, "%" PRIu64 "Ki", v >> 10);
	else if (v >= 1000 && v % 1000 == 0)
		snprintf(buf, len, "%" PRIu64 "k", v / 1000);
	else
		snprintf(buf, len, "%" PRIu64, v);
	return buf;
}

BFN void par_u(struct params *p, const char *k, uint64_t v)
{
	char j[32], t[32];

	snprintf(j, sizeof(j), "%" PRIu64, v);
	par_add(p, k, j, human_count(t, sizeof(t), v));
}

BFN void par_f(struct params *p, const char *k, double v)
{
	char j[48], t[48];

	snprintf(j, sizeof(j), "%.6g", v);
	snprintf(t, sizeof(t), "%.4g", v);
	par_add(p, k, isfinite(v) ? j : "null", t);
}

BFN void par_s(struct params *p, const char *k, const char *v)
{
	char j[200];

	snprintf(j, sizeof(j), "\"%s\"", v); /* values are ours: no quotes or backslashes */
	par_add(p, k, j, v);
}

static void json_num(char *b, size_t n, double v);

/* Target states of a row. */
enum { T_NONE = -2, T_NA = -1, T_MISSED = 0, T_MET = 1 };

struct row {
	const char *workload;  /* "1 lookups", "2 readers", ... */
	char name[48];         /* what was measured: "kvidx_score", "redis HKEYS", ... */
	struct params par;
	double median, p99;    /* p99 NAN: not a distribution (throughput, size) */
	const char *unit;
	bool higher_better;    /* throughputs; else times and sizes (lower is better) */
	double ratio;          /* median / median of the kvidx row of the same workload; NAN: none */
	char target[48];       /* "" or the target's text, e.g. "<= 50 ns/key" */
	int target_state;      /* T_NONE, T_NA (not applicable in this run), T_MISSED, T_MET */
	char note[200];        /* free text for the table and the JSON "note" */
	const char *vs_text;   /* replaces the "vs kvidx" cell (floors: not a competitor) */
	char extra[240];       /* more numeric JSON members, see row_extra() */
};

/* Adds a numeric member to the row's JSON object (machine-readable twins of the notes). */
BFN void row_extra(struct row *r, const char *name, double v)
{
	size_t n = strlen(r->extra);
	char num[48];

	json_num(num, sizeof(num), v);
	snprintf(r->extra + n, sizeof(r->extra) - n, ",\"%s\":%s", name, num);
}

static FILE *g_json; /* --json FILE: one JSON object per row, appended */
static bool g_header_done;

BFN void json_open(const char *path)
{
	g_json = fopen(path, "a");
	if (!g_json)
		bdie("%s: %s", path, strerror(errno));
	setvbuf(g_json, NULL, _IOLBF, 0);
}

BFN void row_header(void)
{
	printf("| %-10s | %-34s | %10s | %10s | %-11s | %-13s | %-30s | %s\n", "workload", "name",
	       "median", "p99", "unit", "kvidx is", "target", "params; notes");
	g_header_done = true;
}

static void fmt_num(char *b, size_t n, double v)
{
	if (!isfinite(v))
		snprintf(b, n, "-");
	else if (fabs(v) >= 1e6)
		snprintf(b, n, "%.4g", v);
	else if (fabs(v) >= 100)
		snprintf(b, n, "%.0f", v);
	else if (fabs(v) >= 10)
		snprintf(b, n, "%.1f", v);
	else
		snprintf(b, n, "%.2f", v);
}

static void json_num(char *b, size_t n, double v)
{
	if (isfinite(v))
		snprintf(b, n, "%.6g", v);
	else
		snprintf(b, n, "null");
}

/* Writes the row to the table on stdout and to the JSON file. */
BFN void row_emit(const struct row *r)
{
	char med[32], p99[32], vs[32], tgt[80], jm[32], jp[32], jr[32];

	if (!g_header_done)
		row_header();
	fmt_num(med, sizeof(med), r->median);
	fmt_num(p99, sizeof(p99), r->p99);
	if (r->vs_text)
		snprintf(vs, sizeof(vs), "%s", r->vs_text);
	else if (!isfinite(r->ratio))
		snprintf(vs, sizeof(vs), "-");
	else if (r->ratio == 1.0)
		snprintf(vs, sizeof(vs), "(reference)");
	else {
		/* How many times better kvidx is: >1 kvidx ahead, <1 kvidx behind. */
		double adv = r->higher_better ? 1.0 / r->ratio : r->ratio;
		bool ahead = adv >= 1.0;
		double x = ahead ? adv : 1.0 / adv;
		if (x < 1.02)
			snprintf(vs, sizeof(vs), "even (%.2fx)", adv);
		else
			snprintf(vs, sizeof(vs), x < 10 ? "%s %.2fx" : x < 100 ? "%s %.1fx" : "%s %.0fx",
				 ahead ? "ahead" : "BEHIND", x);
	}
	switch (r->target_state) {
	case T_MET: snprintf(tgt, sizeof(tgt), "met (%s)", r->target); break;
	case T_MISSED: snprintf(tgt, sizeof(tgt), "MISSED (%s)", r->target); break;
	case T_NA: snprintf(tgt, sizeof(tgt), "n/a (%s)", r->target); break;
	default: snprintf(tgt, sizeof(tgt), "-");
	}
	printf("| %-10s | %-34s | %10s | %10s | %-11s | %-13s | %-30s | %s%s%s\n", r->workload,
	       r->name, med, p99, r->unit, vs, tgt, r->par.txt, r->note[0] ? "; " : "", r->note);
	if (!g_json)
		return;
	json_num(jm, sizeof(jm), r->median);
	json_num(jp, sizeof(jp), r->p99);
	json_num(jr, sizeof(jr), r->ratio);
	fprintf(g_json,
		"{\"bench\":\"%s\",\"workload\":\"%s\",\"name\":\"%s\",\"params\":{%s},"
		"\"median\":%s,\"p99\":%s,\"unit\":\"%s\",\"higher_is_better\":%s,"
		"\"ratio_to_kvidx\":%s,\"target\":%s%s%s,\"target_met\":%s,\"note\":\"%s\"%s}\n",
		PROG, r->workload, r->name, r->par.json, jm, jp, r->unit,
		r->higher_better ? "true" : "false", jr, r->target[0] ? "\"" : "",
		r->target[0] ? r->target : "null", r->target[0] ? "\"" : "",
		r->target_state == T_MET ? "true" : r->target_state == T_MISSED ? "false" : "null",
		r->note, r->extra);
}

/* ---- pod rows: per-pod consecutive blocks from block 0, for the baseline scorers ---------- */

struct rows {
	uint32_t *blocks;
	uint16_t *touched;
	unsigned ntouched;
};

BFN void rows_init(struct rows *rw, unsigned max_pods)
{
	rw->blocks = xcalloc(max_pods, sizeof(uint32_t));
	rw->touched = xcalloc(max_pods, sizeof(uint16_t));
	rw->ntouched = 0;
}

/* Counts block i for pod p if p holds blocks 0..i-1; returns whether p's run goes on. */
static inline bool rows_extend(struct rows *rw, unsigned p, uint32_t i)
{
	if (rw->blocks[p] != i)
		return false;
	if (i == 0)
		rw->touched[rw->ntouched++] = (uint16_t)p;
	rw->blocks[p] = i + 1;
	return true;
}

/* The longest run; resets the rows. */
static inline uint32_t rows_best_reset(struct rows *rw)
{
	uint32_t best = 0;

	for (unsigned i = 0; i < rw->ntouched; i++) {
		unsigned p = rw->touched[i];
		if (rw->blocks[p] > best)
			best = rw->blocks[p];
		rw->blocks[p] = 0;
	}
	rw->ntouched = 0;
	return best;
}

/* kvidx_score's answer reduced the same way: the longest run of any pod. */
static inline uint32_t score_kvidx(struct kvidx_reader *r, const uint64_t *k, uint32_t n)
{
	struct kvidx_score out[128];
	uint32_t best = 0;
	int rc;

	while ((rc = kvidx_score(r, k, n, NULL, 0, NULL, out, 128)) == -KVIDX_ERETRY)
		;
	if (rc < 0)
		bdie("kvidx_score: %s", kvidx_strerror(rc));
	for (int i = 0; i < rc; i++)
		if (out[i].blocks > best)
			best = out[i].blocks;
	return best;
}

/* One kvidx_lookup() per block, stopping where no pod's run goes on. */
static inline uint32_t score_lookup(struct kvidx_reader *r, struct rows *rw, const uint64_t *k,
				    uint32_t n)
{
	struct kvidx_rec rec[16];

	for (uint32_t i = 0; i < n; i++) {
		int rc;
		unsigned alive = 0;
		while ((rc = kvidx_lookup(r, k[i], rec, 16)) == -KVIDX_ERETRY)
			;
		if (rc < 0)
			bdie("kvidx_lookup: %s", kvidx_strerror(rc));
		for (int j = 0; j < rc; j++)
			alive += rows_extend(rw, rec[j].pod, i);
		if (!alive)
			break;
	}
	return rows_best_reset(rw);
}

/* ---- the naive design: an open-addressing table in MAP_SHARED memory under one
 * PTHREAD_PROCESS_SHARED rwlock; readers take the read lock once per prompt, the writer the
 * write lock once per batch. 32-byte slots: key (0 = empty) and up to 11 pod indices inline;
 * no tiers, timestamps or TTLs (kvidx keeps 16 bytes of those per record). Linear probing from
 * the same home slot as kvidx, backward-shift deletion, load factor 0.75. ---- */

#define NAIVE_PPK 11
struct naive_slot {
	uint64_t key;
	uint16_t n;
	uint16_t pod[NAIVE_PPK];
};
_Static_assert(sizeof(struct naive_slot) == 32, "naive slot size");

struct naive_tab {
	pthread_rwlock_t lock;
	uint64_t nslots, keys;
	size_t map_len;
	uint8_t pad[64];
	struct naive_slot slots[];
};

/* (Re)initialises the lock, which nobody may hold: writer_pref selects glibc's
 * PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP, else the default (readers preferred, under
 * which a steady stream of overlapping readers starves the writer indefinitely). */
BFN void naive_lock_init(struct naive_tab *t, bool writer_pref)
{
	pthread_rwlockattr_t a;

	pthread_rwlockattr_init(&a);
	pthread_rwlockattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
	if (writer_pref)
		pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	if (pthread_rwlock_init(&t->lock, &a))
		bdie("pthread_rwlock_init failed");
	pthread_rwlockattr_destroy(&a);
}

BFN struct naive_tab *naive_new(uint64_t capacity, bool writer_pref)
{
	uint64_t nslots = capacity * 4 / 3 + 1;
	size_t len = sizeof(struct naive_tab) + nslots * sizeof(struct naive_slot);
	struct naive_tab *t = shared_alloc(len);

	naive_lock_init(t, writer_pref);
	t->nslots = nslots;
	t->map_len = len;
	return t;
}

BFN void naive_free(struct naive_tab *t)
{
	if (t)
		munmap(t, t->map_len);
}

static inline uint64_t naive_home(const struct naive_tab *t, uint64_t key)
{
	return kv_home(kv_mix(key), t->nslots);
}

static inline const struct naive_slot *naive_get(const struct naive_tab *t, uint64_t key)
{
	uint64_t i = naive_home(t, key);

	for (;;) {
		const struct naive_slot *s = &t->slots[i];
		if (s->key == key)
			return s;
		if (s->key == 0)
			return NULL;
		if (++i == t->nslots)
			i = 0;
	}
}

/* Adds pod to key (write lock held). Returns false if the table is full. */
BFN bool naive_add(struct naive_tab *t, uint64_t key, uint16_t pod)
{
	uint64_t i = naive_home(t, key);

	for (;;) {
		struct naive_slot *s = &t->slots[i];
		if (s->key == key) {
			for (unsigned j = 0; j < s->n; j++)
				if (s->pod[j] == pod)
					return true;
			if (s->n < NAIVE_PPK)
				s->pod[s->n++] = pod;
			else
				s->pod[NAIVE_PPK - 1] = pod; /* displace the newest */
			return true;
		}
		if (s->key == 0) {
			if (t->keys + 1 >= t->nslots)
				return false;
			s->key = key;
			s->n = 1;
			s->pod[0] = pod;
			t->keys++;
			return true;
		}
		if (++i == t->nslots)
			i = 0;
	}
}

/* Removes pod from key, and the key once no pod holds it (write lock held). */
BFN void naive_del(struct naive_tab *t, uint64_t key, uint16_t pod)
{
	uint64_t i = naive_home(t, key);
	struct naive_slot *s;

	for (;;) {
		s = &t->slots[i];
		if (s->key == 0)
			return;
		if (s->key == key)
			break;
		if (++i == t->nslots)
			i = 0;
	}
	for (unsigned j = 0; j < s->n; j++)
		if (s->pod[j] == pod) {
			s->pod[j] = s->pod[--s->n];
			break;
		}
	if (s->n)
		return;
	/* Backward-shift deletion: pull later members of the cluster into the hole. */
	uint64_t hole = i;
	for (;;) {
		if (++i == t->nslots)
			i = 0;
		struct naive_slot *n = &t->slots[i];
		if (n->key == 0)
			break;
		uint64_t h = naive_home(t, n->key);
		/* n may move to hole iff its home is not in (hole, i] cyclically. */
		bool stay = hole <= i ? (h > hole && h <= i) : (h > hole || h <= i);
		if (stay)
			continue;
		t->slots[hole] = *n;
		hole = i;
	}
	memset(&t->slots[hole], 0, sizeof(t->slots[hole]));
	t->keys--;
}

/* Scores one prompt under the read lock, stopping at the first block no run extends. */
static inline uint32_t score_naive(struct naive_tab *t, struct rows *rw, const uint64_t *k,
				   uint32_t n)
{
	pthread_rwlock_rdlock(&t->lock);
	for (uint32_t i = 0; i < n; i++) {
		const struct naive_slot *s = naive_get(t, k[i]);
		unsigned alive = 0;
		if (!s)
			break;
		for (unsigned j = 0; j < s->n; j++)
			alive += rows_extend(rw, s->pod[j], i);
		if (!alive)
			break;
	}
	pthread_rwlock_unlock(&t->lock);
	return rows_best_reset(rw);
}

/* ---- Redis: a redis-server on a free loopback port, and RESP over a plain socket ----------
 *
 * The layout is llm-d's Redis index (llm-d-kv-cache-manager pkg/kvcache/kvblock/redis.go):
 * one hash per request key, named "<model>@<key>", one field "<pod>@<tier>" per pod holding
 * it, valued with an RFC 3339 timestamp; Add is a pipeline of HSET, Evict of HDEL, and Lookup
 * one pipeline of HKEYS over all of a prompt's keys, cut client-side at the first key no
 * wanted pod holds.
 */

#define REDIS_MODEL "bench-model"
#define REDIS_TS "2025-01-01T00:00:00Z"

struct rconn {
	int fd;
	char *w;
	size_t wlen, wcap;
	char *r;
	size_t rpos, rlen, rcap;
};

struct redis_srv {
	pid_t pid;
	int port;
	char dir[64];
};

static struct redis_srv *g_redis_atexit;

/* "10.A.B.C:8000@gpu" for pod index p, as the naming in every benchmark. */
BFN int pod_name(char *buf, size_t len, unsigned p)
{
	return snprintf(buf, len, "10.%u.%u.%u:8000", p >> 16, (p >> 8) & 255, p & 255);
}

/*
 * Opens the writer wo describes (dying if it cannot) and adds pods 0..npods-1, named by
 * pod_name(), with the Redis baseline's model. With strict set, a pod that does not get its
 * own number as its index is fatal too.
 */
BFN struct kvidx *writer_with_pods(const struct kvidx_writer_opts *wo, uint32_t npods,
				  bool strict)
{
	struct kvidx *w = kvidx_writer_open(wo);

	if (!w)
		bdie("kvidx_writer_open: %s", kvidx_strerror(-errno));
	for (uint32_t p = 0; p < npods; p++) {
		char pn[KVIDX_POD_NAME_MAX];
		int rc;

		pod_name(pn, sizeof(pn), p);
		rc = kvidx_pod_add(w, pn, REDIS_MODEL);
		if (strict && rc != (int)p)
			bdie("kvidx_pod_add gave %d for pod %u", rc, p);
	}
	return w;
}

BFN bool redis_available(void)
{
	return access("/usr/bin/redis-server", X_OK) == 0 ||
	       system("command -v redis-server >/dev/null 2>&1") == 0;
}

static int free_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t l = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;

	if (fd < 0)
		return -1;
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &l) == 0)
		port = ntohs(a.sin_port);
	close(fd);
	return port;
}

BFN int rconn_open(struct rconn *c, int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int one = 1;

	memset(c, 0, sizeof(*c));
	c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (c->fd < 0)
		return -1;
	if (connect(c->fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		close(c->fd);
		c->fd = -1;
		return -1;
	}
	setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	c->wcap = 1 << 16;
	c->w = xcalloc(c->wcap, 1);
	c->rcap = 1 << 16;
	c->r = xcalloc(c->rcap, 1);
	return 0;
}

BFN void rconn_close(struct rconn *c)
{
	if (c->fd >= 0)
		close(c->fd);
	free(c->w);
	free(c->r);
	memset(c, 0, sizeof(*c));
	c->fd = -1;
}

static void rc_reserve(struct rconn *c, size_t n)
{
	if (c->wlen + n <= c->wcap)
		return;
	while (c->wlen + n > c->wcap)
		c->wcap *= 2;
	c->w = realloc(c->w, c->wcap);
	if (!c->w)
		bdie("out of memory (redis buffer)");
}

/* Appends one command of argc bulk strings. */
BFN void rc_cmd(struct rconn *c, int argc, const char *const *argv, const size_t *lens)
{
	size_t need = 16;

	for (int i = 0; i < argc; i++)
		need += lens[i] + 24;
	rc_reserve(c, need);
	c->wlen += (size_t)sprintf(c->w + c->wlen, "*%d\r\n", argc);
	for (int i = 0; i < argc; i++) {
		c->wlen += (size_t)sprintf(c->w + c->wlen, "$%zu\r\n", lens[i]);
		memcpy(c->w + c->wlen, argv[i], lens[i]);
		c->wlen += lens[i];
		c->w[c->wlen++] = '\r';
		c->w[c->wlen++] = '\n';
	}
}

/* Appends a command given as NULL-terminated strings. */
BFN void rc_cmdv(struct rconn *c, ...)
{
	const char *argv[16];
	size_t lens[16];
	int argc = 0;
	va_list ap;

	va_start(ap, c);
	while (argc < 16 && (argv[argc] = va_arg(ap, const char *)) != NULL) {
		lens[argc] = strlen(argv[argc]);
		argc++;
	}
	va_end(ap);
	rc_cmd(c, argc, argv, lens);
}

/* "<model>@<key>" into buf; returns its length. The key in decimal, as llm-d prints hashes. */
static inline size_t redis_key(char *buf, uint64_t key)
{
	char tmp[24];
	size_t n = 0, m = sizeof(REDIS_MODEL) - 1;

	memcpy(buf, REDIS_MODEL "@", m + 1);
	do
		tmp[n++] = (char)('0' + key % 10);
	while ((key /= 10) != 0);
	for (size_t i = 0; i < n; i++)
		buf[m + 1 + i] = tmp[n - 1 - i];
	return m + 1 + n;
}

/* HKEYS <model>@<key>: fast path for the hot loop. */
static inline void rc_hkeys(struct rconn *c, uint64_t key)
{
	char k[64];
	size_t kl = redis_key(k, key);
	const char *argv[2] = { "HKEYS", k };
	size_t lens[2] = { 5, kl };

	rc_cmd(c, 2, argv, lens);
}

/* HSET <model>@<key> <pod>@gpu <ts> [...] for npods pods. */
BFN void rc_hset(struct rconn *c, uint64_t key, const uint16_t *pods, unsigned npods)
{
	char k[64], f[8][40];
	const char *argv[2 + 2 * 8];
	size_t lens[2 + 2 * 8];
	int argc = 0;

	argv[argc] = "HSET";
	lens[argc++] = 4;
	lens[argc] = redis_key(k, key);
	argv[argc++] = k;
	for (unsigned i = 0; i < npods && i < 8; i++) {
		int n = pod_name(f[i], sizeof(f[i]), pods[i]);
		n += snprintf(f[i] + n, sizeof(f[i]) - (size_t)n, "@gpu");
		argv[argc] = f[i];
		lens[argc++] = (size_t)n;
		argv[argc] = REDIS_TS;
		lens[argc++] = sizeof(REDIS_TS) - 1;
	}
	rc_cmd(c, argc, argv, lens);
}

/* HDEL <model>@<key> <pod>@gpu. */
BFN void rc_hdel(struct rconn *c, uint64_t key, uint16_t pod)
{
	char k[64], f[40];
	const char *argv[3] = { "HDEL", k, f };
	size_t lens[3];

	lens[0] = 4;
	lens[1] = redis_key(k, key);
	int n = pod_name(f, sizeof(f), pod);
	n += snprintf(f + n, sizeof(f) - (size_t)n, "@gpu");
	lens[2] = (size_t)n;
	rc_cmd(c, 3, argv, lens);
}

BFN void rc_flush(struct rconn *c)
{
	size_t off = 0;

	while (off < c->wlen) {
		ssize_t n = write(c->fd, c->w + off, c->wlen - off);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			bdie("redis write: %s", strerror(errno));
		}
		off += (size_t)n;
	}
	c->wlen = 0;
}

/* Makes sure n bytes from rpos are buffered. */
static void rc_need(struct rconn *c, size_t n)
{
	if (c->rlen - c->rpos >= n)
		return;
	if (c->rpos) {
		memmove(c->r, c->r + c->rpos, c->rlen - c->rpos);
		c->rlen -= c->rpos;
		c->rpos = 0;
	}
	if (n > c->rcap) {
		while (n > c->rcap)
			c->rcap *= 2;
		c->r = realloc(c->r, c->rcap);
		if (!c->r)
			bdie("out of memory (redis buffer)");
	}
	while (c->rlen < n) {
		ssize_t got = read(c->fd, c->r + c->rlen, c->rcap - c->rlen);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			bdie("redis read: %s", got ? strerror(errno) : "connection closed");
		c->rlen += (size_t)got;
	}
}

/* One "\r\n"-terminated line from rpos: its first byte and the integer after it. */
static int64_t rc_line(struct rconn *c, char *type)
{
	size_t want = 4;

	for (;;) {
		rc_need(c, want);
		char *p = c->r + c->rpos, *e = memchr(p, '\n', c->rlen - c->rpos);
		if (e) {
			*type = *p;
			int64_t v = 0;
			bool neg = false;
			char *q = p + 1;
			if (*q == '-')
				neg = true, q++;
			while (*q >= '0' && *q <= '9')
				v = v * 10 + (*q++ - '0');
			if (*type == '-')
				bdie("redis error: %.*s", (int)(e - p - 1), p + 1);
			c->rpos = (size_t)(e - c->r) + 1;
			return neg ? -v : v;
		}
		want = c->rlen - c->rpos + 1;
	}
}

/* Skips one reply (of any type, nested arrays included). */
BFN void rc_skip(struct rconn *c)
{
	char t;
	int64_t v = rc_line(c, &t);

	if (t == '$' && v >= 0) {
		rc_need(c, (size_t)v + 2);
		c->rpos += (size_t)v + 2;
	} else if (t == '*') {
		for (int64_t i = 0; i < v; i++)
			rc_skip(c);
	}
}

/* Reads one HKEYS reply; calls fn for each "10.A.B.C:8000@tier" field with its pod index.
 * Returns the number of fields. */
static inline int64_t rc_read_hkeys(struct rconn *c, void (*fn)(void *, unsigned), void *arg)
{
	char t;
	int64_t n = rc_line(c, &t);

	if (t != '*')
		bdie("redis: HKEYS answered '%c'", t);
	for (int64_t i = 0; i < n; i++) {
		int64_t len = rc_line(c, &t);
		if (t != '$' || len < 0)
			bdie("redis: bad HKEYS element");
		rc_need(c, (size_t)len + 2);
		/* Parse the pod part "10.A.B.C:" back to its index, as a router maps names. */
		const char *p = c->r + c->rpos, *e = p + len;
		unsigned part[4] = { 0, 0, 0, 0 }, np = 0;
		while (p < e && *p != ':' && *p != '@') {
			if (*p == '.')
				np = np < 3 ? np + 1 : 3;
			else
				part[np] = part[np] * 10 + (unsigned)(*p - '0');
			p++;
		}
		fn(arg, (part[1] << 16) | (part[2] << 8) | part[3]);
		c->rpos += (size_t)len + 2;
	}
	return n;
}

/* A scratch for llm-d's Lookup: per key, its pods, then the prefix cut. */
struct redis_scan {
	struct rows *rw;
	uint32_t i;
	unsigned alive;
	bool stopped;
};

static void redis_scan_pod(void *arg, unsigned pod)
{
	struct redis_scan *s = arg;

	if (!s->stopped)
		s->alive += rows_extend(s->rw, pod, s->i);
}

/* llm-d's RedisIndex.Lookup for one prompt: one pipeline of n HKEYS, then per key in order the
 * pods, stopping at the first key without any (llm-d stops at an empty reply). Returns the
 * longest run of any pod, as the other scorers. */
BFN uint32_t score_redis(struct rconn *c, struct rows *rw, const uint64_t *k, uint32_t n)
{
	struct redis_scan s = { .rw = rw };

	for (uint32_t i = 0; i < n; i++)
		rc_hkeys(c, k[i]);
	rc_flush(c);
	for (uint32_t i = 0; i < n; i++) {
		s.i = i;
		s.alive = 0;
		int64_t got = rc_read_hkeys(c, redis_scan_pod, &s);
		if (!s.stopped && (got == 0 || s.alive == 0))
			s.stopped = true; /* every reply is still read: the pipeline was sent whole */
	}
	return rows_best_reset(rw);
}

BFN void redis_stop(struct redis_srv *s)
{
	if (s->pid > 0) {
		kill(s->pid, SIGTERM);
		waitpid(s->pid, NULL, 0);
		guard_unpid(s->pid);
		s->pid = 0;
	}
	if (s->dir[0]) {
		rmdir(s->dir);
		s->dir[0] = 0;
	}
}

static void redis_atexit(void)
{
	if (g_redis_atexit)
		redis_stop(g_redis_atexit);
}

/* Starts redis-server on a free loopback port without persistence; waits for PING.
 * Returns 0, or -1 (with a message) if it cannot run. */
BFN int redis_start(struct redis_srv *s)
{
	memset(s, 0, sizeof(*s));
	snprintf(s->dir, sizeof(s->dir), "/tmp/kvidx-bench-redis-XXXXXX");
	if (!mkdtemp(s->dir)) {
		s->dir[0] = 0;
		fprintf(stderr, PROG ": mkdtemp: %s\n", strerror(errno));
		return -1;
	}
	for (int attempt = 0; attempt < 5; attempt++) {
		char port[16];
		s->port = free_port();
		if (s->port < 0)
			continue;
		snprintf(port, sizeof(port), "%d", s->port);
		s->pid = fork();
		if (s->pid < 0)
			bdie("fork: %s", strerror(errno));
		if (s->pid == 0) {
			prctl(PR_SET_PDEATHSIG, SIGTERM);
			int dn = open("/dev/null", O_RDWR);
			if (dn >= 0) {
				dup2(dn, 0);
				dup2(dn, 1);
			}
			execlp("redis-server", "redis-server", "--port", port, "--bind", "127.0.0.1",
			       "--save", "", "--appendonly", "no", "--dir", s->dir, "--daemonize",
			       "no", "--loglevel", "warning", "--logfile", "", "--protected-mode",
			       "no", (char *)NULL);
			_exit(127);
		}
		guard_pid(s->pid);
		for (int i = 0; i < 500; i++) { /* up to 5 s */
			struct rconn c;
			int st;
			if (waitpid(s->pid, &st, WNOHANG) == s->pid) {
				s->pid = 0;
				break;
			}
			if (rconn_open(&c, s->port) == 0) {
				rc_cmdv(&c, "PING", NULL);
				rc_flush(&c);
				rc_skip(&c);
				rconn_close(&c);
				g_redis_atexit = s;
				atexit(redis_atexit);
				return 0;
			}
			sleep_ns(10000000);
		}
		if (s->pid > 0)
			redis_stop(s);
	}
	fprintf(stderr, PROG ": could not start redis-server\n");
	redis_stop(s);
	return -1;
}

/* INFO memory's used_memory, in bytes (0 if unknown). */
BFN uint64_t redis_used_memory(struct rconn *c)
{
	char t;

	rc_cmdv(c, "INFO", "memory", NULL);
	rc_flush(c);
	int64_t len = rc_line(c, &t);
	if (t != '$' || len < 0)
		return 0;
	rc_need(c, (size_t)len + 2);
	char *p = c->r + c->rpos;
	uint64_t v = 0;
	char *m = memmem(p, (size_t)len, "used_memory:", 12);
	if (m)
		v = strtoull(m + 12, NULL, 10);
	c->rpos += (size_t)len + 2;
	return v;
}

/* ---- common start ------------------------------------------------------------------------- */

/* Line-buffered stdout, the --json file, and the cleanup handlers. */
BFN void bench_start(const char *json_path)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (json_path)
		json_open(json_path);
	signal(SIGINT, guard_signal);
	signal(SIGTERM, guard_signal);
	signal(SIGHUP, guard_signal);
}

#endif /* KVIDX_BENCH_H */
