/*
 * stress_index.c — multi-process torture of kvidx's concurrency contract (the README's
 * "Concurrency contract"): one writer process churns a deliberately small index while reader
 * processes check every answer, and the supervisor (the parent) kills, stops and replaces them,
 * and the writer.
 *
 * Oracle. Exact for lookups: the writer logs every state each (key, pod) and each pod takes,
 * numbered by a shared change counter, into a shared-memory history per data generation
 * (see "the exact oracle" below); every lookup answer is checked, pod by pod, against every
 * state its (key, pod) and pod had between the call's start and end, including "absent" and
 * "hidden" (expired, paused, cleared, removed). Besides: ALWAYS keys are stored on pod 0
 * before the readers start and that record never changes but for gaining tiers: every lookup
 * finds it, every ALWAYS-only prompt scores n blocks on pod 0. NEVER keys are never stored.
 * Every record's contents derive from (key, pod) (a 10-bit tag in t_ns, a tier set, TTLs from
 * a fixed set), so a torn record, another key's or one read from reused memory shows; per
 * (key, pod) t_ns never goes backwards for a reader. -KVIDX_ERETRY is accepted only as often
 * as the reader's slot was expelled.
 *
 * Faults. Readers are SIGKILLed (some mid-registration) and replaced, and SIGSTOPped inside a
 * read-side section past the stall limit: the writer must expel them, keep reclaiming and keep
 * its heartbeat; resumed, they must get -KVIDX_ERETRY and re-register by themselves. The
 * registry has only readers + 2 slots, so replacements keep taking over dead readers' slots
 * (and their route rings) before the writer frees them. A second writer is refused.
 *
 * Route rings. Readers commit routes and report outcomes; the writer applies routes as
 * speculation and checks that each producer's messages arrive whole, in order, exactly once,
 * with the contents their correlation id implies, even across SIGKILL.
 *
 * Writer restarts (contract 6). --restarts times (default one per 10 s) the writer is
 * SIGKILLed at a random instruction: readers must keep serving and see its heartbeat go
 * stale; the supervisor logs what the dead writer's last change left visible; a successor
 * takes over, replays (pods, ALWAYS keys) into the next generation, and readers must switch
 * by themselves. Successors into even generations use defer_publish and publish after the
 * replay (a reader missing an ALWAYS key then fails the run: no downtime); odd ones publish
 * first and only count the misses (--lax-restart: all of them).
 *
 * Hostile chaos (issue 24; on unless --no-chaos). A hostile member of the index's group (a
 * forked process holding a reader handle of its own, x_main()) does what the README's
 * contract rule 7 lets a group member do, at random intervals of tens of ms: it truncates the
 * current registry to a random shorter length (0, into the header or the slots, or cutting
 * rings only), and forges route-ring words: heads ahead of, behind or just past the tail,
 * wild heads and tails, garbage messages, and in its own ring well-formed commits and
 * outcomes of its own. It never writes another reader's slot (the contract says that can
 * give wrong answers: out of scope). The exact oracle stays on for every answer; readers
 * follow the registry generations, and -KVIDX_ERETRY is accepted only when an expulsion of
 * its slot, a replacement of its registry or a truncation since its last successful call
 * explains it (counted per cause), -KVIDX_ENOSLOT / -KVIDX_ECORRUPT only while its handle is
 * behind the registry the index header names (an attach to the replacement failed; bounded
 * at 10 s). A reader may die of SIGBUS only while a truncation is not yet repaired (its
 * handler records when; the member logs each truncation's window, from just before the
 * ftruncate until it sees the size restored); any other death fails the run. The route-ring
 * oracle is relaxed only for rings the member touched in that registry (forged, or cut by a
 * truncation): duplicates and stale messages there are skipped, messages that do not match
 * their correlation id counted; a missing message must have been sent into such a ring, or
 * be among the last a producer sent into a registry that was then replaced (queued when the
 * writer replaced it), as each producer's log of (registry, ring) segments says. Messages of
 * the member's own id are accepted only from rings it touched. The member pauses around
 * writer restarts and stops a second before the end.
 *
 * At the end the writer walks the table (no duplicate, foreign or missing key), checks that
 * limbo drains to 0 and that every dead reader's slot was freed.
 *
 * Usage: stress_index --seconds N [--readers R] [--capacity C] [--records N] [--seed S]
 *                     [--stall-ms M] [--no-restart] [--lax-restart] [--restarts K]
 *                     [--no-chaos]
 * Exit 0 with one summary line, or 1 with the first violation.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "inspect.h"
#include "kvidx_writer.h"
#include "segment.h"
#include "telemetry.h"
#include "torture_util.h"

#define NPODS 8            /* max_pods of the index */
#define PPK 4              /* pods_per_key */
#define ALWAYS_PODS 4      /* pods 0..3 may hold ALWAYS keys: never more than PPK, no eviction */
#define REMOVABLE 4        /* pods 4..7 are removed and re-added */
#define MAX_ROLES 64
#define NNEVER 4096
#define NHOT 16            /* hot keys at the start of each class, hammered by both sides */
#define TAG_MASK 1023ull
#define MAX_PROMPT 128
#define NS_MS 1000000ull
#define NS_S 1000000000ull
#define MAX_GEN 64         /* data generations of one run: the first writer and successors */
#define HOSTILE_ROLE 63    /* the correlation-id role of the hostile member's own messages */
#define MAX_CHAOS_READERS 61 /* registry slots (readers + 3) fit a 64-bit ring mask */
#define TAINT_MAP 16384    /* registries whose touched rings are remembered, at K % TAINT_MAP */
#define TWIN 4096          /* truncation windows kept */
#define SEGS 2048          /* (registry, ring) segments kept per reader role */

static const uint32_t ttls[] = { 5, 10, 20, 50 };
#define TTL_MIN 5u
#define TTL_MAX 50u

enum { CLS_ALWAYS = 0, CLS_CHURN = 1, CLS_NEVER = 2 };
static const char *cls_name[3] = { "ALWAYS", "CHURN", "NEVER" };

/* ---- options and the key sets (built before any fork, so every process shares them) ---- */

static struct {
	unsigned seconds, readers, stall_ms, restarts;
	uint64_t capacity, records, seed;
	bool no_restart, strict_restart, chaos;
} opt = { 10, 4, 200, 0, 4096, 0, 0, false, true, true };

static char idx_name[KVIDX_NAME_MAX];
static const char *const indexes[] = { idx_name, NULL }; /* for tt_time_bound */
static uint64_t *keys_of[3];
static uint32_t nkeys[3];

struct key_ent {
	uint64_t key;
	uint32_t cls, idx;
};
static struct key_ent *sorted_keys; /* all keys, sorted, for classifying walked keys */
static uint32_t nsorted;

/* ---- shared state: one anonymous MAP_SHARED region, mapped before forking ---- */

struct role {
	int32_t pid;   /* current incarnation */
	int32_t slot;  /* its registry slot */
	uint64_t ready;
	uint64_t ops;  /* lookups + scores + pod reads: progress */
	uint64_t lookups, scores, pod_reads, retries, torn_names, max_retry_run, spec_seen;
	uint64_t incarnations;
	uint64_t msgs_ok, msgs_dropped;  /* route ring: sent, and refused with -EAGAIN */
	uint64_t final_inc, final_seq, final_msg_gen; /* a clean exit's last message */
	uint64_t gen, switches;          /* data generation the reader is on */
	uint64_t restart_misses;         /* ALWAYS answers missing during the restart replay */
	uint64_t max_hb_age_ms;          /* stalest writer heartbeat seen (kvidx_reader_info) */
	uint64_t late_expels;            /* re-registered though no call returned -KVIDX_ERETRY */
	uint64_t h_calls, h_checked, h_unknown; /* exact oracle: lookups, (lookup, pod) answers */
	/* Chaos: the registry the handle is in after its last call, its slot's claim generation. */
	uint64_t reg_gen, slot_claim;
	uint64_t retry_expel, retry_replace, retry_trunc; /* -KVIDX_ERETRY by cause */
	uint64_t attach_fails;           /* -KVIDX_ENOSLOT / -KVIDX_ECORRUPT behind a replacement */
	uint64_t follows;                /* registries followed */
	uint64_t msgs_refused;           /* messages refused while following a replaced registry */
	uint64_t bus_ns, bus_addr;       /* its SIGBUS, written by the handler */
	uint64_t seg_n;                  /* entries in its segment log */
} __attribute__((aligned(128)));

/* A truncation's window: from just before the ftruncate until the size was seen restored. */
struct twin {
	uint64_t t0, t1, reg; /* t1 == 0: still open */
};

/* What the hostile member did, and what it may explain (shared with the writer and readers). */
struct chaos {
	uint32_t stop, pause, paused; /* supervisor -> member, member -> supervisor */
	uint64_t rounds, reopens, truncations, cut_all, cut_slots, cut_rings, self_restores;
	uint64_t max_open_ns;
	uint64_t forged, f_ahead, f_behind, f_near, f_wild, f_tail, f_garbage, f_crafted;
	uint64_t ntw;
	struct twin tw[TWIN];
	/* Rings the member touched, per registry: bit s of mask for ring s of registry reg. */
	uint64_t taint_reg[TAINT_MAP], taint_mask[TAINT_MAP];
	/* The writers' side. */
	uint64_t w_hostile, w_hostile_keys, w_dups, w_lost, w_tail_lost, w_mismatch;
};

/* One run of a producer's messages into one ring: from message number first on. */
struct seg {
	uint64_t inc, first, reg, gen;
	int64_t slot;
};

struct shared {
	uint64_t t0;             /* run start: no record is older */
	uint64_t always_base[MAX_GEN + 1]; /* per data generation: the now of the ALWAYS stores */
	int32_t writer_pid[MAX_GEN + 1];   /* per data generation */
	uint8_t deferred[MAX_GEN + 1];     /* per data generation: its writer used defer_publish */
	uint64_t hseq, hdone;              /* exact oracle: changes begun, changes logged */
	uint64_t h_logged, h_reconciled;   /* states logged by writers, by the supervisor */
	uint32_t writer_ready, replayed, stop_readers, stop_writer, writer_final;
	uint32_t pod_inc[NPODS]; /* pod name incarnations, carried over a writer restart */
	uint64_t seq_n;          /* route producers in seqs[] */
	struct tt_failbox fail;
	/* Writer's counters. */
	uint64_t w_ops, w_efull, w_clears, w_readds, w_pauses, w_ticks, w_max_gap_ns, w_max_tick_ns;
	uint64_t w_max_replace_ns; /* the longest tick that replaced the registry */
	uint64_t final_walked, final_limbo, w_routes, w_outcomes, w_handed;
	struct chaos ch;
	struct kvidx_stats final_st;
	struct role roles[MAX_ROLES];
};

static struct shared *sh;
static const char *who = "supervisor";

/* ---- helpers ---- */

/* The oracle: what a record of (key, pod) may contain. */
static unsigned rec_tag(uint64_t key, unsigned pod)
{
	return (unsigned)(tt_splitmix64(key ^ (0x5bd1e995ull * (pod + 1))) & TAG_MASK);
}

/* A timestamp at most now whose low 10 bits are the (key, pod) tag. */
static uint64_t tagged_ns(uint64_t now, uint64_t key, unsigned pod)
{
	return ((now - (TAG_MASK + 1)) & ~TAG_MASK) | rec_tag(key, pod);
}

/* Two of GPU, CPU, DISK, chosen by (key, pod). */
static unsigned allowed_tiers(uint64_t key, unsigned pod)
{
	return 7u & ~(1u << (tt_splitmix64(key + 0x1234567ull * (pod + 7)) % 3));
}

static unsigned pick_bit(unsigned mask, uint64_t r)
{
	unsigned lo = mask & -mask, hi = mask & ~lo;

	return (r & 1) && hi ? (hi & -hi) : lo;
}

static void pod_name(char out[KVIDX_POD_NAME_MAX], unsigned pod, unsigned inc)
{
	snprintf(out, KVIDX_POD_NAME_MAX, "pod%u-inc%06u-chk%08x", pod, inc,
		 (unsigned)tt_splitmix64(((uint64_t)pod << 32) | inc));
}

static void pod_model(char out[KVIDX_POD_NAME_MAX], unsigned pod, unsigned inc)
{
	snprintf(out, KVIDX_POD_NAME_MAX, "model-%u-%06u", pod, inc);
}

static uint64_t now_ns(void)
{
	return kvidx_now_ns();
}

/* ---- failure ---- */

static pid_t children[MAX_ROLES + 2];
static unsigned nchildren;

/* The first violation wins; children report it through the shared region and exit 2. */
static void __attribute__((noreturn, format(printf, 1, 2))) fail(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	tt_fail_report(sh ? &sh->fail : NULL, "stress_index", who, fmt, ap);
	va_end(ap);
	tt_kill_children(children, nchildren, true);
	tt_unlink_index(idx_name);
	exit(1);
}

/* ---- key sets ---- */

static int key_cmp(const void *a, const void *b)
{
	const struct key_ent *x = a, *y = b;

	return x->key < y->key ? -1 : x->key > y->key;
}

static void keys_build(void)
{
	uint32_t n = 0;

	nkeys[CLS_ALWAYS] = opt.capacity / 8 < 256 ? (uint32_t)(opt.capacity / 8) : 256;
	nkeys[CLS_CHURN] = opt.capacity / 2 < 2000 ? (uint32_t)(opt.capacity / 2) : 2000;
	nkeys[CLS_NEVER] = NNEVER;
	sorted_keys = calloc(nkeys[0] + nkeys[1] + nkeys[2], sizeof(*sorted_keys));
	if (!sorted_keys)
		fail("out of memory");
	for (unsigned c = 0; c < 3; c++) {
		keys_of[c] = calloc(nkeys[c], sizeof(uint64_t));
		if (!keys_of[c])
			fail("out of memory");
		for (uint32_t i = 0; i < nkeys[c]; i++) {
			uint64_t k = tt_splitmix64(opt.seed * 0x2545f4914f6cdd1dull ^
						((uint64_t)(c + 1) << 40) ^ i);
			keys_of[c][i] = k;
			sorted_keys[n++] = (struct key_ent){ k, c, i };
		}
	}
	nsorted = n;
	qsort(sorted_keys, n, sizeof(*sorted_keys), key_cmp);
	for (uint32_t i = 1; i < n; i++)
		if (sorted_keys[i].key == sorted_keys[i - 1].key)
			fail("seed %llu gives a duplicate key; pick another seed",
			     (unsigned long long)opt.seed);
}

static const struct key_ent *key_find(uint64_t key)
{
	uint32_t lo = 0, hi = nsorted;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (sorted_keys[mid].key < key)
			lo = mid + 1;
		else if (sorted_keys[mid].key > key)
			hi = mid;
		else
			return &sorted_keys[mid];
	}
	return NULL;
}

/* A key of class c, hot keys half of the time. */
static uint32_t pick_idx(uint64_t *rng, unsigned c)
{
	uint32_t n = nkeys[c];

	if (n > NHOT && (tt_rnd(rng) & 1))
		return tt_rnd_below(rng, NHOT);
	return tt_rnd_below(rng, n);
}

/*
 * ---- the exact oracle: the history of every (key, pod) and every pod, per data generation ----
 *
 * The writer takes a sequence number before each change (h_begin(): sh->hseq, release), makes
 * it, reads the resulting raw records of the keys it touched straight from its own segment
 * (mapped read-only; no concurrency inside one process), appends every (key, pod) whose raw
 * record changed to that cell's ring with the change's number, then marks the change logged
 * (h_end(): sh->hdone). State s logged at number p was visible, if at all, only while hseq
 * was in [p, q], q the number of the next state of the same cell. A reader takes hseq before
 * and after its call (start, end), waits until hdone >= end, and accepts an answer for
 * (key, pod) only if some state whose interval meets [start, end] explains it: the same
 * record (tiers, flag, t_ns, expiry) under a pod state that shows it, or, for no record,
 * an absent state or one that could have been hidden (expired, paused, cleared, removed).
 * A ring that no longer reaches back to start and explains nothing counts as unknown, not
 * as a violation. A killed writer's last change is logged by the supervisor from the frozen
 * segment (h_reconcile()), with the dead writer's last number.
 */
#define HG 4          /* generations whose history is kept, at gen % HG */
#define HDEPTH 32     /* states kept per (key, pod) */
#define PDEPTH 64     /* states kept per pod */

struct hent {
	uint64_t n;      /* record number (1-based) once complete, 0 while written */
	uint64_t p;      /* change number */
	uint64_t w0, w1; /* raw record; w1 == 0: absent (a present record has t_ns > 0) */
};
struct hcell {
	uint64_t count; /* records appended */
	struct hent e[HDEPTH];
};
struct pcell {
	uint64_t count;
	struct hent e[PDEPTH]; /* w0 = pd_word, w1 = 1 (a pod is never "absent") */
};
struct hgen {
	uint64_t gen; /* the generation these rings describe, 0 while reset */
	struct pcell pods[NPODS];
	struct hcell cells[];
};

/* One ring: a cell's or a pod's. */
struct ring {
	uint64_t *count;
	struct hent *e;
	unsigned depth;
	bool pod;
};

static struct hgen *hist[HG];
static size_t hgen_bytes;

static size_t h_ncells(void)
{
	return (size_t)(nkeys[CLS_ALWAYS] + nkeys[CLS_CHURN]) * NPODS;
}

static struct hcell *h_cell(struct hgen *h, unsigned cls, uint32_t ki, unsigned pod)
{
	return &h->cells[((cls == CLS_ALWAYS ? 0 : nkeys[CLS_ALWAYS]) + ki) * NPODS + pod];
}

static struct ring r_cell(struct hgen *h, unsigned cls, uint32_t ki, unsigned pod)
{
	struct hcell *c = h_cell(h, cls, ki, pod);

	return (struct ring){ &c->count, c->e, HDEPTH, false };
}

static struct ring r_pod(struct hgen *h, unsigned pod)
{
	return (struct ring){ &h->pods[pod].count, h->pods[pod].e, PDEPTH, true };
}

static void h_alloc(void)
{
	hgen_bytes = sizeof(struct hgen) + h_ncells() * sizeof(struct hcell);
	for (unsigned i = 0; i < HG; i++) {
		hist[i] = mmap(NULL, hgen_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
			       -1, 0);
		if (hist[i] == MAP_FAILED)
			fail("mmap history: %s", strerror(errno));
	}
}

/* A new writer's generation starts with every cell absent and every pod free. */
static struct hgen *h_reset(uint64_t gen)
{
	struct hgen *h = hist[gen % HG];

	st_release(&h->gen, 0);
	memset((char *)h + sizeof(h->gen), 0, hgen_bytes - sizeof(h->gen));
	st_release(&h->gen, gen);
	return h;
}

static void h_last(struct ring r, uint64_t *w0, uint64_t *w1)
{
	uint64_t n = ld_relaxed(r.count);
	const struct hent *e = n ? &r.e[(n - 1) % r.depth] : NULL;

	*w0 = e ? e->w0 : 0;
	*w1 = e ? e->w1 : r.pod;
}

/* Appends (w0, w1) at change number p if it differs from the cell's last state. */
static bool h_put(struct ring r, uint64_t p, uint64_t w0, uint64_t w1)
{
	uint64_t lw0, lw1, n = ld_relaxed(r.count);

	h_last(r, &lw0, &lw1);
	if (lw0 == w0 && lw1 == w1)
		return false;
	struct hent *e = &r.e[n % r.depth];
	st_relaxed(&e->n, 0);
	/* The entry is invalid before its words change; pairs with the acquire fence in h_states. */
	fence_release();
	st_relaxed(&e->p, p);
	st_relaxed(&e->w0, w0);
	st_relaxed(&e->w1, w1);
	/* Pairs with the acquire loads of e->n and the count in h_states(). */
	st_release(&e->n, n + 1);
	st_release(r.count, n + 1);
	return true;
}

/* A read-only view of one data generation: what h_raw() needs. */
struct rawview {
	const struct kvidx_data_hdr *hdr;
	const struct kvidx_stats *st;
	const struct kvidx_pod *pods;
	const uint64_t *slots, *arena;
	uint64_t nslots, units;
	uint32_t max_probe;
	struct hgen *h;
	uint64_t logged; /* cells appended, for the summary */
};

static void *map_ro(const char *path);

static void h_view(struct rawview *v, uint64_t gen)
{
	char path[KV_SHM_PATH_MAX];

	kv_data_shm_name(path, idx_name, gen);
	v->hdr = map_ro(path);
	v->st = (const void *)((const char *)v->hdr + v->hdr->dh_stats_off);
	v->pods = (const void *)((const char *)v->hdr + v->hdr->dh_pods_off);
	v->slots = (const void *)((const char *)v->hdr + v->hdr->dh_slots_off);
	v->arena = (const void *)((const char *)v->hdr + v->hdr->dh_arena_off);
	v->nslots = v->hdr->dh_nslots;
	v->units = v->hdr->dh_arena_units;
	v->max_probe = v->hdr->dh_max_probe;
}

/* key's raw records per pod (w1 = 0: none), read directly as the writer left them. */
static void h_raw(const struct rawview *v, uint64_t key, uint64_t w0[NPODS], uint64_t w1[NPODS])
{
	uint64_t m = kv_mix(key);
	const uint64_t *slot = v->slots + kv_home(m, v->nslots);

	memset(w0, 0, NPODS * sizeof(*w0));
	memset(w1, 0, NPODS * sizeof(*w1));
	for (uint32_t i = 0; i < v->max_probe; i++) {
		uint64_t s = ld_acquire(&slot[i]);
		if (s == KV_SLOT_EMPTY)
			return;
		uint32_t idx = (uint32_t)s;
		if (s == KV_SLOT_TOMB || (uint32_t)(s >> 32) != kv_fp(m) || idx == 0 || idx >= v->units)
			continue;
		const uint64_t *e = v->arena + 2 * (uint64_t)idx;
		if (e[0] != key)
			continue;
		unsigned np = KV_META_NPODS(e[1]);
		if (np > PPK)
			fail("history: key %016llx has %u records", (unsigned long long)key, np);
		for (unsigned r = 0; r < np; r++) {
			unsigned pod = KV_REC_POD(e[2 + 2 * r]);
			if (pod >= NPODS || w1[pod])
				fail("history: key %016llx: record of pod %u out of range or twice",
				     (unsigned long long)key, pod);
			w0[pod] = e[2 + 2 * r];
			w1[pod] = e[3 + 2 * r];
			if (!w1[pod])
				fail("history: key %016llx pod %u: a record with t_ns 0",
				     (unsigned long long)key, pod);
		}
		return;
	}
}

static void h_log_key(struct rawview *v, uint64_t p, uint64_t key)
{
	const struct key_ent *ke = key_find(key);
	uint64_t w0[NPODS], w1[NPODS];

	if (!ke || ke->cls == CLS_NEVER)
		fail("history: the writer changed key %016llx, which is no ALWAYS or CHURN key",
		     (unsigned long long)key);
	h_raw(v, key, w0, w1);
	for (unsigned pod = 0; pod < NPODS; pod++)
		v->logged += h_put(r_cell(v->h, ke->cls, ke->idx, pod), p, w0[pod], w1[pod]);
}

static void h_log_pods(struct rawview *v, uint64_t p)
{
	for (unsigned pod = 0; pod < NPODS; pod++)
		v->logged += h_put(r_pod(v->h, pod), p, ld_relaxed(&v->pods[pod].pd_word), 1);
}

static void h_log_all(struct rawview *v, uint64_t p)
{
	for (unsigned c = 0; c < 2; c++)
		for (uint32_t i = 0; i < nkeys[c]; i++)
			h_log_key(v, p, keys_of[c][i]);
	h_log_pods(v, p);
}

/* Before a change: its number. Release pairs with the acquire loads in r_hseq(). */
static uint64_t h_begin(void)
{
	return __atomic_add_fetch(&sh->hseq, 1, __ATOMIC_SEQ_CST);
}

/* After a change and its logging. Pairs with the acquire load in h_wait(). */
static void h_end(uint64_t p)
{
	__atomic_store_n(&sh->hdone, p, __ATOMIC_RELEASE);
}

/* After a writer died: its last change, whatever part of it was published, from the frozen
 * segment, under its own number (readers may have seen it from then on). */
static void h_reconcile(uint64_t gen)
{
	struct rawview v = { 0 };
	uint64_t p = __atomic_load_n(&sh->hseq, __ATOMIC_SEQ_CST);

	h_view(&v, gen);
	v.h = hist[gen % HG];
	if (ld_acquire(&v.h->gen) == gen)
		h_log_all(&v, p);
	munmap((void *)v.hdr, v.hdr->dh_size);
	sh->h_reconciled += v.logged;
	h_end(p);
}

struct hstate {
	uint64_t p, w0, w1;
};

/*
 * The states of cell c whose interval [p, next p] meets [start, end], newest first. *complete
 * is false when the ring was overwritten before reaching start (older states unknown).
 */
static unsigned h_states(struct ring r, uint64_t start, uint64_t end, struct hstate *out,
			 unsigned max, bool *complete)
{
	uint64_t cnt = ld_acquire(r.count), depth = r.depth;
	uint64_t lo = cnt > depth ? cnt - depth : 0, q = UINT64_MAX;
	unsigned n = 0;

	*complete = false;
	for (uint64_t k = cnt; k-- > lo;) {
		const struct hent *e = &r.e[k % depth];
		uint64_t n1 = ld_acquire(&e->n);
		struct hstate s = { ld_relaxed(&e->p), ld_relaxed(&e->w0), ld_relaxed(&e->w1) };
		/* Pairs with the release fence in h_put(): an entry rewritten meanwhile shows. */
		fence_acquire();
		if (n1 != k + 1 || ld_relaxed(&e->n) != k + 1)
			return n; /* overwritten under us */
		if (s.p <= end && q >= start && n < max)
			out[n++] = s;
		if (s.p < start) {
			*complete = true;
			return n;
		}
		q = s.p;
	}
	if (lo == 0) {
		if (q >= start && n < max)
			out[n++] = (struct hstate){ 0, 0, r.pod };
		*complete = true;
	}
	return n;
}

static bool h_spec(uint64_t w0)
{
	return KV_REC_FLAGS(w0) & KV_REC_SPEC;
}

static uint64_t h_expires(uint64_t w0, uint64_t w1)
{
	return h_spec(w0) ? w1 + (uint64_t)KV_REC_TTL(w0) * NS_MS : 0;
}

/* Whether pod word pw lets a reader see record w0. */
static bool h_pod_shows(uint64_t pw, uint64_t w0)
{
	return KV_POD_STATE(pw) == KV_POD_ACTIVE && KV_POD_GEN(pw) == KV_REC_GEN(w0) &&
	       !(h_spec(w0) && (KV_POD_FLAGS(pw) & KV_POD_SPEC_PAUSED));
}

/* Until every change numbered up to end is logged (a writer logs within microseconds; a dead
 * one's last change is logged by the supervisor at once). */
static void h_wait(uint64_t end)
{
	uint64_t t0 = 0;

	while (__atomic_load_n(&sh->hdone, __ATOMIC_ACQUIRE) < end) {
		if (!t0)
			t0 = now_ns();
		else if (now_ns() - t0 > 20 * NS_S)
			fail("history: change %llu still not logged after 20 s (logged up to %llu)",
			     (unsigned long long)end,
			     (unsigned long long)__atomic_load_n(&sh->hdone, __ATOMIC_ACQUIRE));
		sched_yield();
	}
}

static int h_fmt(char *b, size_t sz, const struct hstate *s, bool pod)
{
	if (pod)
		return snprintf(b, sz, " [#%llu state %u flags %#x gen %u]", (unsigned long long)s->p,
				KV_POD_STATE(s->w0), KV_POD_FLAGS(s->w0), KV_POD_GEN(s->w0));
	if (!s->w1)
		return snprintf(b, sz, " [#%llu absent]", (unsigned long long)s->p);
	return snprintf(b, sz, " [#%llu %s tiers %#x gen %u t %llu exp %llu]",
			(unsigned long long)s->p, h_spec(s->w0) ? "spec" : "conf",
			KV_REC_TIERS(s->w0), KV_REC_GEN(s->w0), (unsigned long long)s->w1,
			(unsigned long long)h_expires(s->w0, s->w1));
}

/*
 * The exact check of one lookup answer: for each pod, its record (or its absence) against
 * every state the (key, pod) and the pod had during [start, end]. Counts per pod checked or
 * unknown (ring overwritten); fails the run on anything no state explains.
 */
static void h_check(struct role *me, uint64_t gen, unsigned cls, uint32_t ki, uint64_t key,
		    const struct kvidx_rec *out, int n, size_t max, uint64_t start, uint64_t end,
		    uint64_t t_after)
{
	struct hgen *h = hist[gen % HG];
	struct hstate ss[HDEPTH + 1], ps[PDEPTH + 1];

	me->h_calls++;
	if (ld_acquire(&h->gen) != gen) {
		me->h_unknown += NPODS; /* a generation too old to be kept */
		return;
	}
	h_wait(end);
	for (unsigned pod = 0; pod < NPODS; pod++) {
		const struct kvidx_rec *x = NULL;
		bool sc, pc, ok = false;

		for (int i = 0; i < n; i++)
			if (out[i].pod == pod)
				x = &out[i];
		if (!x && (size_t)n >= max)
			continue; /* cut at max: its absence says nothing */
		unsigned ns = h_states(r_cell(h, cls, ki, pod), start, end, ss, HDEPTH + 1, &sc);
		unsigned np = h_states(r_pod(h, pod), start, end, ps, PDEPTH + 1, &pc);
		for (unsigned i = 0; i < ns && !ok; i++) {
			const struct hstate *s = &ss[i];
			if (x) {
				if (!s->w1 || x->tiers != KV_REC_TIERS(s->w0) ||
				    x->speculative != h_spec(s->w0) || x->t_ns != s->w1 ||
				    x->expires_ns != h_expires(s->w0, s->w1))
					continue;
				for (unsigned j = 0; j < np && !ok; j++)
					ok = h_pod_shows(ps[j].w0, s->w0);
			} else {
				ok = !s->w1 || (h_spec(s->w0) && h_expires(s->w0, s->w1) <= t_after);
				for (unsigned j = 0; j < np && !ok; j++)
					ok = !h_pod_shows(ps[j].w0, s->w0);
			}
		}
		if (ok) {
			me->h_checked++;
			continue;
		}
		if (!sc || !pc) {
			me->h_unknown++;
			continue;
		}
		char b[2048];
		int o = snprintf(b, sizeof(b), "%s key #%u %016llx pod %u in generation %llu, "
				 "changes [%llu, %llu]: answer ", cls_name[cls], ki,
				 (unsigned long long)key, pod, (unsigned long long)gen,
				 (unsigned long long)start, (unsigned long long)end);
		if (x)
			o += snprintf(b + o, sizeof(b) - o, "%s tiers %#x t %llu exp %llu (TTL %lld ms)",
				      x->speculative ? "spec" : "conf", x->tiers,
				      (unsigned long long)x->t_ns, (unsigned long long)x->expires_ns,
				      x->speculative ? (long long)((x->expires_ns - x->t_ns) / NS_MS) : -1);
		else
			o += snprintf(b + o, sizeof(b) - o, "absent");
		o += snprintf(b + o, sizeof(b) - o, "; states then:");
		for (unsigned i = 0; i < ns && o < (int)sizeof(b) - 200; i++)
			o += h_fmt(b + o, sizeof(b) - o, &ss[i], false);
		o += snprintf(b + o, sizeof(b) - o, "; pod:");
		for (unsigned j = 0; j < np && o < (int)sizeof(b) - 200; j++)
			o += h_fmt(b + o, sizeof(b) - o, &ps[j], true);
		fail("exact oracle: %s", b);
	}
}

/*
 * Route ring messages. A correlation id is (role << 58) | (first << 57) | (incarnation << 40)
 * | n, n counting the producer's accepted messages from 1 and first marking its first message
 * accepted under a data generation (messages of an older one are dropped by a new writer);
 * everything else in the message derives from the id.
 */
#define CORR_SEQ_BITS 40
#define CORR_INC_MASK 0x1ffffull
#define CORR_FIRST (1ull << 57)
#define CORR_PRODUCER(corr) ((((corr) >> 58) << 17) | (((corr) >> CORR_SEQ_BITS) & CORR_INC_MASK))

/* Last message number per producer, shared by both writers (a MAP_SHARED region). */
struct seq_ent {
	uint64_t id, last, gen;
};
#define SEQ_MAP 65536
static struct seq_ent *seqs;

struct route_spec {
	uint32_t first, len; /* consecutive CHURN keys */
	int pod, prefill;
	uint32_t matched, matched_spec, cached, prompt;
};

static void route_of(uint64_t corr, struct route_spec *rs)
{
	uint64_t h = tt_splitmix64(corr ^ 0xc0441e55ull);
	uint32_t maxlen = (h >> 60) == 0 ? nkeys[CLS_CHURN] / 4 : 12;

	rs->len = 1 + (uint32_t)(h % maxlen);
	rs->first = (uint32_t)((h >> 16) % (nkeys[CLS_CHURN] - rs->len + 1));
	rs->pod = (int)((h >> 8) % NPODS);
	rs->prefill = (h >> 12) & 1 ? -1 : (int)((h >> 20) % NPODS);
	rs->matched = (uint32_t)((h >> 32) % (rs->len + 1));
	rs->matched_spec = rs->matched ? (uint32_t)((h >> 44) % (rs->matched + 1)) : 0;
	rs->cached = (uint32_t)(h >> 24) & 0xffff;
	rs->prompt = rs->cached + ((uint32_t)(h >> 40) & 0xffff);
}

/*
 * ---- chaos bookkeeping: rings the hostile member touched, truncation windows, segments ----
 *
 * The member marks a ring (seq_cst) before it writes a word of it or truncates it away, so a
 * drain that read a forged word finds the mark (x86-TSO: its stores are seen in order).
 */
static struct seg *segs; /* [MAX_ROLES][SEGS], MAP_SHARED */

static void taint_mark(uint64_t reg, unsigned slot)
{
	size_t i = reg % TAINT_MAP;

	if (ld_acquire(&sh->ch.taint_reg[i]) != reg) {
		__atomic_store_n(&sh->ch.taint_mask[i], 0, __ATOMIC_SEQ_CST);
		__atomic_store_n(&sh->ch.taint_reg[i], reg, __ATOMIC_SEQ_CST);
	}
	__atomic_fetch_or(&sh->ch.taint_mask[i], 1ull << slot, __ATOMIC_SEQ_CST);
}

static bool taint_has(uint64_t reg, int64_t slot)
{
	size_t i = reg % TAINT_MAP;

	return slot >= 0 && slot < 64 && ld_acquire(&sh->ch.taint_reg[i]) == reg &&
	       (ld_acquire(&sh->ch.taint_mask[i]) >> slot & 1);
}

static uint64_t taint_rings(void)
{
	uint64_t n = 0;

	for (size_t i = 0; i < TAINT_MAP; i++)
		n += sh->ch.taint_reg[i] ? (uint64_t)__builtin_popcountll(sh->ch.taint_mask[i]) : 0;
	return n;
}

static struct seg *seg_at(unsigned role, uint64_t i)
{
	return &segs[(size_t)role * SEGS + i % SEGS];
}

/* The segment of role's incarnation inc (masked as in correlation ids) that holds message m;
 * *end: the first message of its next segment (UINT64_MAX if none). NULL if not logged. */
static const struct seg *seg_find(unsigned role, uint64_t inc, uint64_t m, uint64_t *end)
{
	uint64_t n = ld_acquire(&sh->roles[role].seg_n), lo = n > SEGS ? n - SEGS : 0;

	*end = UINT64_MAX;
	for (uint64_t i = n; i-- > lo;) {
		const struct seg *e = seg_at(role, i);
		if ((e->inc & CORR_INC_MASK) != inc)
			continue;
		if (e->first <= m)
			return e;
		*end = e->first;
	}
	return NULL;
}

/* The first message number role's incarnation inc sent under data generation gen, or 0. */
static uint64_t seg_gen_first(unsigned role, uint64_t inc, uint64_t gen)
{
	uint64_t n = ld_acquire(&sh->roles[role].seg_n), lo = n > SEGS ? n - SEGS : 0, f = 0;

	for (uint64_t i = n; i-- > lo;) {
		const struct seg *e = seg_at(role, i);
		if ((e->inc & CORR_INC_MASK) == inc && e->gen == gen)
			f = e->first;
	}
	return f;
}

/* Whether time t (a SIGBUS) falls inside a truncation's window (50 ms of slack at its end: the
 * handler reads the clock after the fault). */
static bool bus_explained(uint64_t t)
{
	uint64_t n = ld_acquire(&sh->ch.ntw), lo = n > TWIN ? n - TWIN : 0;

	for (uint64_t i = lo; i < n; i++) {
		const struct twin *w = &sh->ch.tw[i % TWIN];
		uint64_t t1 = ld_acquire(&w->t1);
		if (t >= w->t0 && (t1 == 0 || t <= t1 + 50 * NS_MS))
			return true;
	}
	return false;
}

/* ==== writer ================================================================================ */

struct wctx {
	struct kvidx *w;
	uint64_t rng;
	bool active[NPODS];
	bool paused[NPODS];
	unsigned inc[NPODS];
	uint64_t efull;
	unsigned gen; /* the data generation this writer publishes: 1, 2, ... after takeovers */
	struct rawview v; /* its own segment, read-only, for the history */
	uint64_t ev0;
	const struct kvidx_idx_hdr *ih; /* the index header, read-only: the registry it drains */
};

/* Where the message being drained comes from: registry, ring, and whether the member touched
 * that ring in that registry. */
struct origin {
	uint64_t reg;
	int slot;
	bool tainted;
};

/* Whole-entry evictions so far: they change keys the call did not name. */
static uint64_t w_evictions(const struct wctx *c)
{
	return ld_relaxed(&c->v.st->evict_spec) + ld_relaxed(&c->v.st->evict_confirmed);
}

/* Around every change: its number before, the changed states logged after. */
static uint64_t w_begin(struct wctx *c)
{
	c->ev0 = w_evictions(c);
	return h_begin();
}

static void w_end(struct wctx *c, uint64_t p, const uint64_t *keys, size_t n, bool pods)
{
	uint64_t before = c->v.logged;

	if (w_evictions(c) != c->ev0) {
		h_log_all(&c->v, p);
	} else {
		for (size_t i = 0; i < n; i++)
			h_log_key(&c->v, p, keys[i]);
		if (pods)
			h_log_pods(&c->v, p);
	}
	st_relaxed(&sh->h_logged, sh->h_logged + c->v.logged - before);
	h_end(p);
}

static struct seq_ent *w_seq_of(uint64_t producer)
{
	size_t i = (size_t)tt_splitmix64(producer) & (SEQ_MAP - 1);

	for (;; i = (i + 1) & (SEQ_MAP - 1)) {
		if (seqs[i].id == producer + 1)
			return &seqs[i];
		if (seqs[i].id == 0) {
			if (++sh->seq_n > SEQ_MAP / 2)
				fail("more than %d route producers", SEQ_MAP / 2);
			seqs[i].id = producer + 1;
			return &seqs[i];
		}
	}
}

static struct origin w_origin(struct wctx *c)
{
	struct origin o = { ld_acquire(&c->ih->ih_reg_gen), kv_writer_drain_slot(c->w, NULL), false };

	o.tainted = opt.chaos && taint_has(o.reg, o.slot);
	return o;
}

/*
 * Chaos: messages lo..hi of the producer of corr never arrived. Each must have been sent into
 * a ring the member touched, or be among the last its producer sent into a registry that was
 * replaced since (queued there when the writer replaced it; the message after them arrives
 * from og, a later registry).
 */
static void w_explain_gap(uint64_t corr, uint64_t lo, uint64_t hi, const struct origin *og)
{
	unsigned role = (unsigned)(corr >> 58);
	uint64_t inc = (corr >> CORR_SEQ_BITS) & CORR_INC_MASK;

	for (uint64_t m = lo, end; m <= hi; m = end) {
		const struct seg *e = seg_find(role, inc, m, &end);
		if (!e)
			fail("route ring: reader role %u incarnation %llu: messages %llu..%llu lost, and "
			     "its segment log does not say where it sent them", role,
			     (unsigned long long)inc, (unsigned long long)m, (unsigned long long)hi);
		uint64_t last = end - 1 < hi ? end - 1 : hi;
		bool taint = taint_has(e->reg, e->slot);
		bool tail = e->reg < og->reg;
		if (!taint && !tail)
			fail("route ring: reader role %u incarnation %llu: messages %llu..%llu, sent into "
			     "ring %lld of registry %llu, which the hostile member never touched, were "
			     "lost (the next one arrived from ring %d of registry %llu)", role,
			     (unsigned long long)inc, (unsigned long long)m, (unsigned long long)last,
			     (long long)e->slot, (unsigned long long)e->reg, og->slot,
			     (unsigned long long)og->reg);
		if (!taint)
			sh->ch.w_tail_lost += last - m + 1;
		sh->ch.w_lost += last - m + 1;
		if (end > hi)
			break;
	}
}

/*
 * Each producer's messages arrive exactly once and in order: within a generation, its first
 * message carries CORR_FIRST and every next one follows the last. Chaos relaxes it as far as
 * the member explains: a duplicate (a stale message) only from a ring it touched (returns
 * false: skip it), a gap only as w_explain_gap() says.
 */
static bool w_check_seq(struct wctx *c, uint64_t corr, const char *what, const struct origin *og)
{
	struct seq_ent *e = w_seq_of(CORR_PRODUCER(corr));
	uint64_t n = corr & ((1ull << CORR_SEQ_BITS) - 1), lo = 0;
	bool first = corr & CORR_FIRST;
	bool ok = e->gen == c->gen ? !first && n == e->last + 1 : first && (c->gen > 1 || n == 1);

	if (!ok && opt.chaos && e->gen == c->gen && n <= e->last && og->tainted) {
		sh->ch.w_dups++;
		return false;
	}
	if (!ok && opt.chaos && !first && (e->gen == c->gen ? n > e->last + 1 : true)) {
		lo = e->gen == c->gen ? e->last + 1 :
			seg_gen_first((unsigned)(corr >> 58), (corr >> CORR_SEQ_BITS) & CORR_INC_MASK,
				      c->gen);
		ok = lo && lo < n;
	}
	if (!ok)
		fail("route ring: %s number %llu%s from reader role %u incarnation %llu follows "
		     "%llu (generation %llu; ring %d of registry %llu%s): a message was lost, "
		     "duplicated or reordered", what, (unsigned long long)n, first ? " (first)" : "",
		     (unsigned)(corr >> 58),
		     (unsigned long long)((corr >> CORR_SEQ_BITS) & CORR_INC_MASK),
		     (unsigned long long)e->last, (unsigned long long)e->gen, og->slot,
		     (unsigned long long)og->reg, og->tainted ? ", touched by the member" : "");
	if (lo)
		w_explain_gap(corr, lo, n - 1, og);
	e->gen = c->gen;
	e->last = n;
	return true;
}

static unsigned w_pick_pod(struct wctx *c, unsigned lo, unsigned hi)
{
	for (int tries = 0; tries < 16; tries++) {
		unsigned p = lo + tt_rnd_below(&c->rng, hi - lo);
		if (c->active[p])
			return p;
	}
	return 0; /* pod 0 is always active */
}

static void w_store(struct wctx *c, uint64_t key, unsigned pod)
{
	unsigned tier = pick_bit(allowed_tiers(key, pod), tt_rnd(&c->rng));
	uint64_t p = w_begin(c);
	int rc = kvidx_store(c->w, (int)pod, &key, 1, (enum kvidx_tier)tier,
			     tagged_ns(now_ns(), key, pod));

	w_end(c, p, &key, 1, false);

	if (rc == -KVIDX_EFULL)
		c->efull++;
	else if (rc != 1)
		fail("kvidx_store(pod %u, key %016llx) = %d (%s)", pod, (unsigned long long)key, rc,
		     kvidx_strerror(rc));
}

static void w_remove(struct wctx *c, uint64_t key, unsigned pod)
{
	unsigned a = allowed_tiers(key, pod), tiers;

	switch (tt_rnd_below(&c->rng, 4)) {
	case 0: tiers = 0; break;
	case 1: tiers = a; break;
	case 2: tiers = pick_bit(a, tt_rnd(&c->rng)); break;
	default: tiers = 1u + tt_rnd_below(&c->rng, 15); break;
	}
	uint64_t p = w_begin(c);
	int rc = kvidx_remove(c->w, (int)pod, &key, 1, tiers);
	w_end(c, p, &key, 1, false);
	/* -KVIDX_EFULL: no arena memory for the shrunk entry (limbo held by stopped readers);
	 * the old entry stays, which the oracle allows. */
	if ((rc < 0 && rc != -KVIDX_EFULL) || rc > 1)
		fail("kvidx_remove(pod %u, key %016llx) = %d", pod, (unsigned long long)key, rc);
}

static void w_spec(struct wctx *c, uint64_t key, unsigned pod)
{
	uint32_t ttl = ttls[tt_rnd_below(&c->rng, sizeof(ttls) / sizeof(ttls[0]))];
	uint64_t p = w_begin(c);
	int rc = kvidx_speculate(c->w, (int)pod, &key, 1, tagged_ns(now_ns(), key, pod), ttl);

	w_end(c, p, &key, 1, false);

	if (rc == -KVIDX_EFULL)
		c->efull++;
	else if (rc < 0 || rc > 1)
		fail("kvidx_speculate(pod %u, key %016llx) = %d (%s)", pod,
		     (unsigned long long)key, rc, kvidx_strerror(rc));
}

static void w_add_pod(struct wctx *c, unsigned p)
{
	char name[KVIDX_POD_NAME_MAX], model[KVIDX_POD_NAME_MAX];

	pod_name(name, p, c->inc[p]);
	pod_model(model, p, c->inc[p]);
	uint64_t hp = w_begin(c);
	int rc = kvidx_pod_add(c->w, name, model);
	w_end(c, hp, NULL, 0, true);
	if (rc != (int)p)
		fail("kvidx_pod_add(%s) = %d, expected the lowest free index %u", name, rc, p);
	c->active[p] = true;
	c->paused[p] = false;
}

/* A commit of the member's own correlation id: only from a ring it touched; applied as any,
 * on the keys that are CHURN keys (others counted: the oracle knows no other key). */
static void w_hostile_route(struct wctx *c, const struct kvidx_route *rt, const struct origin *og)
{
	if (!og->tainted)
		fail("route commit %016llx of the hostile member's id arrived from ring %d of "
		     "registry %llu, which it never touched", (unsigned long long)rt->corr_id,
		     og->slot, (unsigned long long)og->reg);
	sh->ch.w_hostile++;
	for (size_t i = 0; i < rt->nkeys; i++) {
		const struct key_ent *ke = key_find(rt->keys[i]);
		if (!ke || ke->cls != CLS_CHURN) {
			sh->ch.w_hostile_keys++;
			continue;
		}
		if (c->active[rt->pod])
			w_spec(c, rt->keys[i], (unsigned)rt->pod);
		if (rt->prefill_pod >= 0 && c->active[rt->prefill_pod])
			w_spec(c, rt->keys[i], (unsigned)rt->prefill_pod);
	}
}

/* Whether a commit is exactly what its correlation id says was sent. */
static bool w_route_matches(const struct kvidx_route *rt, uint64_t commit_ns,
			    const struct route_spec *rs)
{
	if (rt->pod != rs->pod || rt->prefill_pod != rs->prefill || rt->nkeys != rs->len ||
	    rt->matched_blocks != rs->matched || rt->matched_spec != rs->matched_spec ||
	    commit_ns < sh->t0 || commit_ns > now_ns())
		return false;
	for (uint32_t i = 0; i < rs->len; i++)
		if (rt->keys[i] != keys_of[CLS_CHURN][rs->first + i])
			return false;
	return true;
}

static void w_route_fn(void *arg, const struct kvidx_route *rt, uint64_t commit_ns)
{
	struct wctx *c = arg;
	struct route_spec rs;
	struct origin og = w_origin(c);

	sh->w_handed++;
	if (opt.chaos && (rt->corr_id >> 58) == HOSTILE_ROLE) {
		w_hostile_route(c, rt, &og);
		return;
	}
	route_of(rt->corr_id, &rs);
	if (!w_route_matches(rt, commit_ns, &rs)) {
		if (og.tainted) {
			sh->ch.w_mismatch++; /* torn or forged where the member wrote */
			return;
		}
		fail("route commit %016llx arrived as pod %d prefill %d nkeys %zu matched %u/%u "
		     "at %llu; sent as pod %d prefill %d nkeys %u matched %u/%u (ring %d of "
		     "registry %llu)", (unsigned long long)rt->corr_id, rt->pod, rt->prefill_pod,
		     rt->nkeys, rt->matched_blocks, rt->matched_spec, (unsigned long long)commit_ns,
		     rs.pod, rs.prefill, rs.len, rs.matched, rs.matched_spec, og.slot,
		     (unsigned long long)og.reg);
	}
	if (!w_check_seq(c, rt->corr_id, "route commit", &og))
		return;
	/* Applied as ingestd would: speculation on the chosen pods. */
	for (uint32_t i = 0; i < rs.len; i++) {
		if (c->active[rs.pod])
			w_spec(c, rt->keys[i], (unsigned)rs.pod);
		if (rs.prefill >= 0 && c->active[rs.prefill])
			w_spec(c, rt->keys[i], (unsigned)rs.prefill);
	}
	sh->w_routes++;
}

static void w_outcome_fn(void *arg, const struct kvidx_outcome *o)
{
	struct wctx *c = arg;
	struct route_spec rs;
	struct origin og = w_origin(c);

	if (opt.chaos && (o->corr_id >> 58) == HOSTILE_ROLE) {
		if (!og.tainted)
			fail("outcome %016llx of the hostile member's id arrived from ring %d of "
			     "registry %llu, which it never touched", (unsigned long long)o->corr_id,
			     og.slot, (unsigned long long)og.reg);
		sh->ch.w_hostile++;
		return;
	}
	route_of(o->corr_id, &rs);
	if (o->pod != rs.pod || o->cached_tokens != rs.cached || o->prompt_tokens != rs.prompt ||
	    o->t_ns < sh->t0 || o->t_ns > now_ns()) {
		if (og.tainted) {
			sh->ch.w_mismatch++;
			return;
		}
		fail("outcome %016llx arrived as pod %d cached %u of %u; sent pod %d cached %u of %u "
		     "(ring %d of registry %llu)", (unsigned long long)o->corr_id, o->pod,
		     o->cached_tokens, o->prompt_tokens, rs.pod, rs.cached, rs.prompt, og.slot,
		     (unsigned long long)og.reg);
	}
	if (!w_check_seq(c, o->corr_id, "outcome", &og))
		return;
	sh->w_outcomes++;
}

static void w_drain(struct wctx *c, size_t budget)
{
	const struct kvidx_drain_ops ops = { w_route_fn, w_outcome_fn, c };
	int rc = kvidx_drain(c->w, budget, &ops);

	if (rc < 0 || (size_t)rc > budget + KVIDX_MAX_COMMIT_KEYS)
		fail("kvidx_drain(%zu) = %d", budget, rc);
}

/* One random operation; the mix favours the hot keys the readers also favour. */
static void w_op(struct wctx *c)
{
	uint32_t sel = tt_rnd_below(&c->rng, 1000);
	const uint64_t *ch = keys_of[CLS_CHURN], *al = keys_of[CLS_ALWAYS];

	if (sel < 280) {
		w_store(c, ch[pick_idx(&c->rng, CLS_CHURN)], w_pick_pod(c, 0, NPODS));
	} else if (sel < 450) {
		w_remove(c, ch[pick_idx(&c->rng, CLS_CHURN)], w_pick_pod(c, 0, NPODS));
	} else if (sel < 650) {
		w_spec(c, ch[pick_idx(&c->rng, CLS_CHURN)], w_pick_pod(c, 0, NPODS));
	} else if (sel < 700) {
		/* A routed prompt: a chain of consecutive keys speculated, or stored, on one pod. */
		uint32_t len = 1 + tt_rnd_below(&c->rng, 16), j = pick_idx(&c->rng, CLS_CHURN);
		unsigned p = w_pick_pod(c, 0, NPODS);
		bool spec = tt_rnd(&c->rng) & 1;
		for (uint32_t i = j; i < j + len && i < nkeys[CLS_CHURN]; i++)
			spec ? w_spec(c, ch[i], p) : w_store(c, ch[i], p);
	} else if (sel < 740) {
		/* A batch remove: kvidx_remove takes no timestamp, so batches keep the oracle. */
		uint64_t batch[16];
		uint32_t len = 1 + tt_rnd_below(&c->rng, 16), j = pick_idx(&c->rng, CLS_CHURN);
		unsigned p = w_pick_pod(c, 0, NPODS);
		size_t n = 0;
		for (uint32_t i = j; i < j + len && i < nkeys[CLS_CHURN]; i++)
			batch[n++] = ch[i];
		uint64_t hp = w_begin(c);
		int rc = kvidx_remove(c->w, (int)p, batch, n, tt_rnd(&c->rng) & 1 ? 0 : 7);
		w_end(c, hp, batch, n, false);
		if ((rc < 0 && rc != -KVIDX_EFULL) || (rc >= 0 && (size_t)rc > n))
			fail("kvidx_remove(batch of %zu) = %d", n, rc);
	} else if (sel < 900) {
		/* ALWAYS keys: other pods (1..3) come and go, rewriting the entry under readers. */
		uint64_t k = al[pick_idx(&c->rng, CLS_ALWAYS)];
		unsigned p = 1 + tt_rnd_below(&c->rng, ALWAYS_PODS - 1);
		switch (tt_rnd_below(&c->rng, 3)) {
		case 0: w_store(c, k, p); break;
		case 1: w_remove(c, k, p); break;
		default: w_spec(c, k, p); break;
		}
	} else if (sel < 930) {
		/* Pod 0 re-stores an ALWAYS key on an allowed tier: its tiers may only grow. */
		w_store(c, al[pick_idx(&c->rng, CLS_ALWAYS)], 0);
	} else {
		/* Speculate pod 0 on an ALWAYS key: it is confirmed there, so nothing changes. */
		uint64_t k = al[pick_idx(&c->rng, CLS_ALWAYS)];
		uint64_t hp = w_begin(c);
		int rc = kvidx_speculate(c->w, 0, &k, 1, tagged_ns(now_ns(), k, 0), TTL_MIN);
		w_end(c, hp, &k, 1, false);
		if (rc != 0)
			fail("kvidx_speculate(pod 0, ALWAYS key %016llx) = %d, expected 0 (confirmed)",
			     (unsigned long long)k, rc);
	}
}

/* Time-driven rare events: pod clears, pod removal and re-adding, speculation pauses. */
static void w_events(struct wctx *c, uint64_t now, uint64_t *next_clear, uint64_t *next_readd,
		     uint64_t *next_pause)
{
	if (now >= *next_clear) {
		unsigned p = w_pick_pod(c, 1, NPODS);
		uint64_t hp = w_begin(c);
		int rc = p ? kvidx_clear_pod(c->w, (int)p) : 0;
		w_end(c, hp, NULL, 0, true);
		if (rc != 0)
			fail("kvidx_clear_pod(%u) failed", p);
		sh->w_clears++;
		*next_clear = now + 20 * NS_MS;
	}
	if (now >= *next_readd) {
		unsigned p;
		for (p = REMOVABLE; p < NPODS && c->active[p]; p++)
			;
		if (p < NPODS) {
			sh->pod_inc[p] = ++c->inc[p]; /* first: a successor continues after it */
			w_add_pod(c, p);              /* p is the lowest free index */
		} else {
			p = REMOVABLE + tt_rnd_below(&c->rng, NPODS - REMOVABLE);
			uint64_t hp = w_begin(c);
			int rc = kvidx_pod_remove(c->w, (int)p);
			w_end(c, hp, NULL, 0, true);
			if (rc != 0)
				fail("kvidx_pod_remove(%u) = %d", p, rc);
			c->active[p] = false;
		}
		sh->w_readds++;
		*next_readd = now + 50 * NS_MS;
	}
	if (now >= *next_pause) {
		unsigned p = w_pick_pod(c, 1, NPODS);
		if (p) {
			c->paused[p] = !c->paused[p];
			uint64_t hp = w_begin(c);
			int rc = kvidx_pod_set_spec_paused(c->w, (int)p, c->paused[p]);
			w_end(c, hp, NULL, 0, true);
			if (rc != 0)
				fail("kvidx_pod_set_spec_paused(%u) failed", p);
			sh->w_pauses++;
		}
		*next_pause = now + 30 * NS_MS;
	}
}

struct walk_ctx {
	uint8_t *seen;
	uint64_t keys, foreign, dups, bad;
	uint64_t first_bad;
};

static void walk_fn(void *arg, uint64_t key, const struct kvidx_rec *recs, int n)
{
	struct walk_ctx *wc = arg;
	const struct key_ent *ke = key_find(key);

	wc->keys++;
	if (!ke || ke->cls == CLS_NEVER) {
		if (!wc->foreign++ && !wc->bad)
			wc->first_bad = key;
		return;
	}
	uint32_t i = ke->cls == CLS_ALWAYS ? ke->idx : nkeys[CLS_ALWAYS] + ke->idx;
	if (wc->seen[i]++ && !wc->dups++ && !wc->bad)
		wc->first_bad = key;
	if (ke->cls == CLS_ALWAYS) {
		bool pod0 = false;
		for (int j = 0; j < n; j++)
			pod0 |= recs[j].pod == 0 && !recs[j].speculative;
		if (!pod0 && !wc->bad++)
			wc->first_bad = key;
	}
}

/* Quiescent checks once the readers are gone: a full walk, limbo, the registry. */
static void writer_final(struct wctx *c)
{
	uint64_t now = now_ns();

	/* 300 ms of ticks: more than the 100 ms dead-reader scan period. */
	for (uint64_t end = now + 300 * NS_MS; (now = now_ns()) < end; tt_sleep_us(1000)) {
		kvidx_writer_tick(c->w, now);
		kvidx_expire(c->w, now, 4096);
	}
	/* Every message a producer got 0 for is delivered, the last clean ones exactly. */
	for (int i = 0; i < 1000; i++)
		w_drain(c, 1u << 20);
	for (unsigned id = 0; id < opt.readers; id++) {
		const struct role *ro = &sh->roles[id];
		if (ro->final_msg_gen != c->gen)
			continue; /* none sent to this writer */
		const struct seq_ent *e = w_seq_of(((uint64_t)id << 17) |
						   (ro->final_inc & CORR_INC_MASK));
		if (e->gen != c->gen || e->last != ro->final_seq)
			fail("route ring: reader role %u incarnation %llu sent %llu messages, the "
			     "writer received %llu", id, (unsigned long long)ro->final_inc,
			     (unsigned long long)ro->final_seq, (unsigned long long)e->last);
	}
	struct kvidx_reader *r = kvidx_reader_open(idx_name);
	if (!r)
		fail("final kvidx_reader_open: %s", kvidx_strerror(-errno));
	const struct kv_view *v = kv_reader_view(r);
	struct walk_ctx wc = { .seen = calloc(nkeys[0] + nkeys[1], 1) };
	if (!wc.seen)
		fail("out of memory");
	int64_t walked = kv_reader_walk(r, 0, v->nslots + v->max_probe, now_ns(), walk_fn, &wc);
	if (walked < 0)
		fail("final walk: %s", kvidx_strerror((int)walked));
	uint64_t keys = ld_relaxed(&v->st->keys);
	if ((uint64_t)walked != keys || wc.keys != keys)
		fail("final walk visited %lld keys, stats say %llu", (long long)walked,
		     (unsigned long long)keys);
	if (wc.foreign || wc.dups || wc.bad)
		fail("final walk: %llu foreign keys, %llu keys in two slots, %llu ALWAYS keys "
		     "without pod 0 (first %016llx)", (unsigned long long)wc.foreign,
		     (unsigned long long)wc.dups, (unsigned long long)wc.bad,
		     (unsigned long long)wc.first_bad);
	for (uint32_t i = 0; i < nkeys[CLS_ALWAYS]; i++)
		if (!wc.seen[i])
			fail("final walk: ALWAYS key #%u %016llx missing", i,
			     (unsigned long long)keys_of[CLS_ALWAYS][i]);
	free(wc.seen);
	/* Nothing is inside a read-side section now: one grace period empties limbo. */
	kvidx_writer_tick(c->w, now_ns());
	kvidx_writer_tick(c->w, now_ns());
	sh->final_limbo = ld_relaxed(&v->st->limbo);
	if (sh->final_limbo != 0)
		fail("limbo holds %llu entries with every reader quiescent",
		     (unsigned long long)sh->final_limbo);
	/* Every slot but this check's own is free: dead and expelled readers were reclaimed. */
	const struct kvidx_ctl_hdr *ctl = kv_reader_ctl(r);
	const struct kvidx_reader_slot *rs = (const void *)((const char *)ctl + ctl->ch_slots_off);
	for (uint32_t i = 0; i < ctl->ch_max_readers; i++) {
		uint64_t st = ld_relaxed(&rs[i].rs_state);
		if ((int)i != kv_reader_slot_index(r) && KV_RS_STATE(st) != KV_RS_FREE)
			fail("registry slot %u still in state %u (pid %d) after every reader exited",
			     i, KV_RS_STATE(st), (int)ld_relaxed(&rs[i].rs_pid));
	}
	memcpy(&sh->final_st, v->st, sizeof(sh->final_st));
	sh->final_walked = (uint64_t)walked;
	kvidx_reader_close(r);
}

static void __attribute__((noreturn)) writer_main(unsigned gen)
{
	struct kvidx_writer_opts o = {
		.name = idx_name,
		.geo = { .capacity = opt.capacity, .records = opt.records, .pods_per_key = PPK,
			 .max_pods = NPODS, .max_readers = opt.readers + (opt.chaos ? 3 : 2) },
		.stall_ms = opt.stall_ms,
		.defer_publish = gen > 1 && sh->deferred[gen],
	};
	struct wctx c = { .rng = opt.seed ^ (0x77 * gen), .gen = gen };
	uint64_t now, last_tick, next_clear, next_readd, next_pause;

	who = gen == 1 ? "writer" : "writer 2";
	sh->writer_pid[gen] = getpid();
	/* The history of this generation starts empty before the writer can change it. */
	c.v.h = h_reset(gen);
	c.w = kvidx_writer_open(&o);
	if (!c.w)
		fail("kvidx_writer_open(%s): %s", idx_name, kvidx_strerror(-errno));
	h_view(&c.v, gen);
	char ipath[KV_SHM_PATH_MAX];
	snprintf(ipath, sizeof(ipath), "/%s", idx_name);
	c.ih = map_ro(ipath);
	if (c.v.hdr->dh_generation != gen || c.v.hdr->dh_writer_pid != getpid())
		fail("writer %u: the data generation it built is not %u", gen, gen);
	/* Contract 1, inside one process: a second open file description is refused too. */
	errno = 0;
	struct kvidx *w2 = kvidx_writer_open(&o);
	if (w2 || errno != KVIDX_EWRITER)
		fail("a second writer in the writer's process was not refused (errno %d)", errno);
	/* The replay: pods (names continuing the old incarnations), then the ALWAYS keys. */
	for (unsigned p = 0; p < NPODS; p++) {
		c.inc[p] = gen == 1 ? 0 : sh->pod_inc[p] + 1;
		sh->pod_inc[p] = c.inc[p];
		w_add_pod(&c, p);
	}
	if (gen == 1)
		sh->t0 = now_ns();
	sh->always_base[gen] = now_ns();
	for (uint32_t i = 0; i < nkeys[CLS_ALWAYS]; i++) {
		uint64_t k = keys_of[CLS_ALWAYS][i];
		uint64_t hp = w_begin(&c);
		int rc = kvidx_store(c.w, 0, &k, 1, (enum kvidx_tier)pick_bit(allowed_tiers(k, 0), i),
				     tagged_ns(sh->always_base[gen], k, 0));
		w_end(&c, hp, &k, 1, false);
		if (rc != 1)
			fail("storing ALWAYS key #%u: %d (%s)", i, rc, kvidx_strerror(rc));
	}
	if (o.defer_publish && kvidx_writer_publish(c.w) != 0)
		fail("kvidx_writer_publish failed");
	__atomic_store_n(&sh->replayed, gen, __ATOMIC_RELEASE);
	__atomic_store_n(&sh->writer_ready, 1, __ATOMIC_RELEASE);

	now = last_tick = now_ns();
	next_clear = now + 20 * NS_MS;
	next_readd = now + 50 * NS_MS;
	next_pause = now + 30 * NS_MS;
	while (!__atomic_load_n(&sh->stop_writer, __ATOMIC_ACQUIRE)) {
		now = now_ns();
		if (now - last_tick >= NS_MS) {
			if (now - last_tick > sh->w_max_gap_ns)
				sh->w_max_gap_ns = now - last_tick;
			uint64_t rb = ld_relaxed(&c.v.st->registry_rebuilds);
			kvidx_writer_tick(c.w, now);
			uint64_t d = now_ns() - now;
			uint64_t *worst = ld_relaxed(&c.v.st->registry_rebuilds) != rb ?
						  &sh->w_max_replace_ns : &sh->w_max_tick_ns;
			if (d > *worst)
				*worst = d;
			kvidx_expire(c.w, now, 256);
			w_events(&c, now, &next_clear, &next_readd, &next_pause);
			last_tick = now;
			sh->w_ticks++;
		}
		for (int i = 0; i < 16; i++)
			w_op(&c);
		w_drain(&c, 256);
		sh->w_ops += 16;
		sh->w_efull = c.efull;
	}
	writer_final(&c);
	kvidx_writer_close(c.w, true);
	__atomic_store_n(&sh->writer_final, 1, __ATOMIC_RELEASE);
	_exit(0);
}

/* ==== readers =============================================================================== */

/* A lookup answer waiting for the history to catch up (h_check()). */
#define PEND 64
struct pend {
	uint64_t gen, key, hs, he, t1;
	size_t max;
	int n;
	unsigned cls;
	uint32_t ki;
	struct kvidx_rec out[PPK + 4];
};

struct rctx {
	struct pend pend[PEND];
	unsigned pend_head, npend;
	struct kvidx_reader *r;
	struct role *me;
	int id;
	uint64_t rng;
	uint64_t *last_t;     /* per (ALWAYS or CHURN key, pod): newest t_ns seen */
	uint8_t *last_tiers;  /* per ALWAYS key: pod 0's tiers seen */
	uint32_t last_inc[NPODS];
	uint64_t expelled_base;
	uint64_t retries;
	uint64_t inc, msg_seq; /* route ring producer: incarnation, accepted messages */
	uint64_t msg_gen;      /* generation of the last accepted message */
	uint64_t slot_gen;     /* claim generation of our registry slot */
	bool prev_retry;       /* the last call returned -KVIDX_ERETRY */
	uint64_t gen;          /* data generation of the last call */
	uint64_t replayed;     /* newest generation whose replay was done before this call */
	const struct kvidx_reader_slot *slot;
	/* Chaos: the registry the handle is in, the truncation count when its last successful
	 * call began, -KVIDX_ERETRY charged to expulsions in this slot, since when attaching to
	 * a replacement fails, and the current segment (registry, ring, generation). */
	uint64_t reg_gen, trunc_ok, exp_retries, fail_since;
	uint64_t seg_reg, seg_gen;
	int seg_slot;
};

/* After each call: the handle may have followed the registry (the old mapping is gone), so
 * the slot is looked up again. Reading it may fault if the registry is truncated and not
 * yet repaired (allowed by the contract: counted as a bus death). */
static void r_sync(struct rctx *c, bool first)
{
	uint64_t k = kv_reader_reg_gen(c->r);

	if (!first && k == c->reg_gen)
		return;
	int i = kv_reader_slot_index(c->r);
	/* ch_slots_off is 128 (FORMAT.md 6.3): not read from the live header. */
	c->slot = (const struct kvidx_reader_slot *)((const char *)kv_reader_ctl(c->r) +
						      sizeof(struct kvidx_ctl_hdr)) + i;
	c->expelled_base = ld_relaxed(&c->slot->rs_expelled);
	c->exp_retries = 0;
	c->slot_gen = KV_RS_GEN(ld_relaxed(&c->slot->rs_state));
	c->reg_gen = k;
	c->me->follows += !first;
	st_relaxed(&c->me->slot, i);
	st_relaxed(&c->me->slot_claim, c->slot_gen);
	st_relaxed(&c->me->reg_gen, k);
}

/* A truncation since the last successful call began. */
static bool r_truncated(struct rctx *c)
{
	return opt.chaos && ld_acquire(&sh->ch.truncations) != c->trunc_ok;
}

/* The handle is in a registry the index header no longer names. */
static bool r_behind(struct rctx *c)
{
	return ld_relaxed(&kv_reader_idx(c->r)->ih_reg_gen) != kv_reader_reg_gen(c->r);
}

/*
 * After each call that enters a read-side section: a changed claim generation means the call
 * re-registered after an expulsion. Normally the call before it returned -KVIDX_ERETRY; if
 * not, the expulsion came after that call's last check (it correctly succeeded): counted, so
 * the supervisor can tell this from an expelled call that wrongly succeeded.
 */
static void r_note_slot(struct rctx *c, bool retry)
{
	uint64_t g = KV_RS_GEN(ld_relaxed(&c->slot->rs_state));

	if (g != c->slot_gen) {
		/* Chaos: a truncation zeroes slots; the re-registration that follows is no
		 * expulsion. */
		if (!c->prev_retry && !r_truncated(c))
			st_relaxed(&c->me->late_expels, c->me->late_expels + 1);
		c->slot_gen = g;
		st_relaxed(&c->me->slot_claim, g);
	}
	c->prev_retry = retry;
}

/* -KVIDX_ERETRY is allowed only after an expulsion of this reader's slot, or (chaos) when the
 * registry was replaced during the call (the handle moved, or the header names another) or
 * truncated since the last successful call. k0: the handle's registry before the call. */
static void r_count_retry(struct rctx *c, unsigned run, uint64_t k0)
{
	c->retries++;
	c->me->retries++;
	if (run + 1 > c->me->max_retry_run)
		c->me->max_retry_run = run + 1;
	if (run >= 1000)
		fail("1000 -KVIDX_ERETRY in a row");
	if (opt.chaos && (c->reg_gen != k0 || r_behind(c))) {
		c->me->retry_replace++;
		return;
	}
	if (r_truncated(c)) {
		c->me->retry_trunc++;
		return;
	}
	c->me->retry_expel++;
	c->exp_retries++;
	/* The writer bumps rs_expelled just after its CAS to EXPELLED: allow that one. */
	uint64_t exp = ld_relaxed(&c->slot->rs_expelled) - c->expelled_base;
	if (c->exp_retries > exp + 1)
		fail("-KVIDX_ERETRY number %llu in this slot but it was expelled only %llu times "
		     "(no replacement or truncation explains it)",
		     (unsigned long long)c->exp_retries, (unsigned long long)exp);
}

/*
 * After a call that enters a read-side section (rc its result; tr0 the truncation count when
 * it began): whether to call again. -KVIDX_ERETRY always (counted); with chaos also
 * -KVIDX_ENOSLOT and -KVIDX_ECORRUPT while the handle is behind a replacement (its attach to
 * the new registry failed: the member filled or truncated it), for at most 10 s.
 */
static bool r_again(struct rctx *c, int rc, unsigned *run, uint64_t tr0)
{
	uint64_t k0 = c->reg_gen;

	r_sync(c, false);
	r_note_slot(c, rc == -KVIDX_ERETRY);
	if (rc == -KVIDX_ERETRY) {
		r_count_retry(c, (*run)++, k0);
		return true;
	}
	if (opt.chaos && (rc == -KVIDX_ENOSLOT || rc == -KVIDX_ECORRUPT) && r_behind(c)) {
		uint64_t t = now_ns();
		c->me->attach_fails++;
		if (!c->fail_since)
			c->fail_since = t;
		else if (t - c->fail_since > 10 * NS_S)
			fail("could not attach to the replacement registry for 10 s: %s",
			     kvidx_strerror(rc));
		tt_sleep_us(1000);
		return true;
	}
	c->fail_since = 0;
	if (rc >= 0)
		c->trunc_ok = tr0;
	return false;
}

/* *hs: the history's change number before the attempt that answered. Acquire pairs with the
 * seq_cst increment in h_begin(). */
static int r_lookup(struct rctx *c, uint64_t key, struct kvidx_rec *out, size_t max,
		    uint64_t *hs)
{
	for (unsigned run = 0;;) {
		uint64_t tr0 = ld_acquire(&sh->ch.truncations);
		*hs = __atomic_load_n(&sh->hseq, __ATOMIC_ACQUIRE);
		int n = kvidx_lookup(c->r, key, out, max);
		if (!r_again(c, n, &run, tr0))
			return n;
	}
}

static int r_score(struct rctx *c, const uint64_t *keys, size_t n, const int *cand, size_t ncand,
		   struct kvidx_score *out, size_t max)
{
	for (unsigned run = 0;;) {
		uint64_t tr0 = ld_acquire(&sh->ch.truncations);
		int nr = kvidx_score(c->r, keys, n, cand, ncand, NULL, out, max);
		if (!r_again(c, nr, &run, tr0))
			return nr;
	}
}

/* Before a call: whether the generation the call may see has been replayed. */
static void r_before(struct rctx *c)
{
	c->replayed = __atomic_load_n(&sh->replayed, __ATOMIC_ACQUIRE);
}

/* After a call: the generation it used (it switches inside rd_enter()). */
static void r_after(struct rctx *c)
{
	uint64_t g = kv_reader_view(c->r)->gen;

	if (g == c->gen)
		return;
	if (g < c->gen || g > MAX_GEN)
		fail("data generation went from %llu to %llu", (unsigned long long)c->gen,
		     (unsigned long long)g);
	c->gen = g;
	memset(c->last_tiers, 0, nkeys[CLS_ALWAYS]); /* a new writer starts them afresh */
	st_relaxed(&c->me->gen, g);
	c->me->switches++;
}

/* An ALWAYS answer without pod 0: allowed (and counted) only in a generation published before
 * its replay (no defer_publish) whose writer had not finished the replay when the call began. */
static bool r_restart_miss(struct rctx *c)
{
	if (c->gen < 2 || c->gen <= c->replayed || sh->deferred[c->gen])
		return false;
	c->me->restart_misses++;
	return true;
}

static void check_recs(struct rctx *c, unsigned cls, uint32_t ki, uint64_t key,
		       const struct kvidx_rec *out, int n, size_t max, uint64_t t_before,
		       uint64_t t_after)
{
	unsigned podmask = 0;
	uint64_t max_ttl = (t_after - sh->t0) / NS_MS + TTL_MAX + 1;
	const uint64_t slack = 2 * (TAG_MASK + 1);

	if (n < 0)
		fail("kvidx_lookup(%s #%u %016llx) = %d (%s)", cls_name[cls], ki,
		     (unsigned long long)key, n, kvidx_strerror(n));
	if ((size_t)n > max || n > PPK)
		fail("kvidx_lookup(%s #%u) returned %d records (max %zu, pods_per_key %d)",
		     cls_name[cls], ki, n, max, PPK);
	if (cls == CLS_NEVER && n)
		fail("NEVER key #%u %016llx found with %d records (pod %u)", ki,
		     (unsigned long long)key, n, out[0].pod);
	for (int i = 0; i < n; i++) {
		const struct kvidx_rec *x = &out[i];
		unsigned p = x->pod;
#define RFAIL(what, ...)                                                                     \
	fail("%s key #%u %016llx record %d/%d (pod %u tiers %#x %s t %llu exp %llu): " what,   \
	     cls_name[cls], ki, (unsigned long long)key, i, n, p, x->tiers,                    \
	     x->speculative ? "spec" : "conf", (unsigned long long)x->t_ns,                    \
	     (unsigned long long)x->expires_ns, ##__VA_ARGS__)
		if (p >= NPODS)
			RFAIL("pod index out of range");
		if (cls == CLS_ALWAYS && p >= ALWAYS_PODS)
			RFAIL("a pod that never holds ALWAYS keys");
		if (podmask & (1u << p))
			RFAIL("pod listed twice");
		podmask |= 1u << p;
		if ((x->t_ns & TAG_MASK) != rec_tag(key, p))
			RFAIL("t_ns tag %llu, expected %u: torn or foreign record",
			      (unsigned long long)(x->t_ns & TAG_MASK), rec_tag(key, p));
		if (x->t_ns + slack < sh->t0 || x->t_ns > t_after)
			RFAIL("t_ns outside [run start, now]");
		if (x->speculative) {
			uint64_t span = x->expires_ns - x->t_ns;
			if (x->tiers != KVIDX_TIER_GPU)
				RFAIL("speculative record not on GPU tier");
			if (x->expires_ns <= t_before)
				RFAIL("expired %llu ns before the lookup began",
				      (unsigned long long)(t_before - x->expires_ns));
			if (span % NS_MS || span / NS_MS < TTL_MIN || span / NS_MS > max_ttl ||
			    span / NS_MS > KVIDX_MAX_TTL_MS)
				RFAIL("TTL %llu ns not a whole ms in [%u, %llu] ms",
				      (unsigned long long)span, TTL_MIN, (unsigned long long)max_ttl);
			c->me->spec_seen++;
		} else {
			if (x->expires_ns != 0)
				RFAIL("confirmed record with an expiry");
			if (!x->tiers || (x->tiers & ~allowed_tiers(key, p)))
				RFAIL("tiers outside the allowed set %#x", allowed_tiers(key, p));
		}
		/* Per (key, pod) the writer only ever writes newer t_ns: never backwards. */
		uint64_t *lt = &c->last_t[((cls == CLS_ALWAYS ? 0 : nkeys[CLS_ALWAYS]) + ki) * NPODS + p];
		if (x->t_ns < *lt)
			RFAIL("t_ns went back from %llu", (unsigned long long)*lt);
		*lt = x->t_ns;
		if (cls == CLS_ALWAYS && p == 0) {
			uint64_t want = tagged_ns(sh->always_base[c->gen], key, 0);
			if (x->speculative || x->t_ns != want)
				RFAIL("pod 0's ALWAYS record changed (expected confirmed at %llu)",
				      (unsigned long long)want);
			if (c->last_tiers[ki] & ~x->tiers)
				RFAIL("pod 0 lost tiers (had %#x)", c->last_tiers[ki]);
			c->last_tiers[ki] = x->tiers;
		}
#undef RFAIL
	}
	if (cls == CLS_ALWAYS && max >= PPK && !(podmask & 1)) {
		if (r_restart_miss(c))
			return;
		fail("ALWAYS key #%u %016llx: pod 0 missing (%d records, pods %#x) in generation "
		     "%llu", ki, (unsigned long long)key, n, podmask, (unsigned long long)c->gen);
	}
}

/* Checks the queued answers whose changes are all logged (all of them if wait). */
static void r_check_pending(struct rctx *c, bool wait)
{
	while (c->npend) {
		struct pend *q = &c->pend[c->pend_head];
		if (__atomic_load_n(&sh->hdone, __ATOMIC_ACQUIRE) < q->he && !wait)
			return;
		h_check(c->me, q->gen, q->cls, q->ki, q->key, q->out, q->n, q->max, q->hs, q->he,
			q->t1);
		c->pend_head = (c->pend_head + 1) % PEND;
		c->npend--;
		wait = false; /* one at a time: room for the next */
	}
}

static void r_lookup_one(struct rctx *c, unsigned cls)
{
	struct kvidx_rec out[PPK + 4];
	uint32_t ki = pick_idx(&c->rng, cls);
	uint64_t key = keys_of[cls][ki];
	size_t max = tt_rnd_below(&c->rng, 8) == 0 ? 1 + tt_rnd_below(&c->rng, PPK) : PPK + 4;
	uint64_t t0 = now_ns(), hs;
	r_before(c);
	int n = r_lookup(c, key, out, max, &hs);
	uint64_t he = __atomic_load_n(&sh->hseq, __ATOMIC_ACQUIRE), t1 = now_ns();

	r_after(c);
	check_recs(c, cls, ki, key, out, n, max, t0, t1);
	if (cls != CLS_NEVER) {
		/* Checked once every change up to he is logged, which is almost always by the
		 * next call: queued, so that the reader does not wait for the writer. */
		if (c->npend == PEND)
			r_check_pending(c, true);
		struct pend *q = &c->pend[(c->pend_head + c->npend++) % PEND];
		*q = (struct pend){ .gen = c->gen, .cls = cls, .ki = ki, .key = key, .n = n,
				    .max = max, .hs = hs, .he = he, .t1 = t1 };
		memcpy(q->out, out, (size_t)n * sizeof(*out));
	}
	r_check_pending(c, false);
	c->me->ops++;
	c->me->lookups++;
}

/* Score rows: sorted by pod, in range, blocks within the prompt, scores within weights. */
static void check_rows(const char *what, const struct kvidx_score *s, int nr, size_t max,
		       size_t n, const int *cand, size_t ncand)
{
	if (nr < 0)
		fail("kvidx_score(%s, n=%zu) = %d (%s)", what, n, nr, kvidx_strerror(nr));
	if ((size_t)nr > max)
		fail("kvidx_score(%s) wrote %d rows, max %zu", what, nr, max);
	for (int i = 0; i < nr; i++) {
		double lo = 0.5 * (s[i].blocks - s[i].spec_blocks) + s[i].spec_blocks;
		if (s[i].pod < 0 || s[i].pod >= NPODS || (i && s[i].pod <= s[i - 1].pod))
			fail("kvidx_score(%s) row %d: pod %d out of range or out of order", what, i,
			     s[i].pod);
		if (s[i].blocks > n || s[i].spec_blocks > s[i].blocks)
			fail("kvidx_score(%s) row %d (pod %d): blocks %u spec %u of %zu", what, i,
			     s[i].pod, s[i].blocks, s[i].spec_blocks, n);
		if (s[i].score < lo - 1e-9 || s[i].score > s[i].blocks + 1e-9)
			fail("kvidx_score(%s) row %d (pod %d): score %g outside [%g, %u]", what, i,
			     s[i].pod, s[i].score, lo, s[i].blocks);
		if (!cand && s[i].blocks == 0)
			fail("kvidx_score(%s) row %d (pod %d): a row without block 0", what, i,
			     s[i].pod);
	}
	if (cand) {
		unsigned want = 0, got = 0;
		for (size_t i = 0; i < ncand; i++)
			want |= 1u << cand[i];
		for (int i = 0; i < nr; i++)
			got |= 1u << s[i].pod;
		if ((size_t)__builtin_popcount(want) <= max && got != want)
			fail("kvidx_score(%s): rows for pods %#x, candidates %#x", what, got, want);
	}
}

static const struct kvidx_score *row_of(const struct kvidx_score *s, int nr, int pod)
{
	for (int i = 0; i < nr; i++)
		if (s[i].pod == pod)
			return &s[i];
	return NULL;
}

static void r_score_one(struct rctx *c)
{
	uint64_t keys[MAX_PROMPT];
	struct kvidx_score out[NPODS];
	int cand[4];
	size_t n = 1 + tt_rnd_below(&c->rng, tt_rnd_below(&c->rng, 4) ? 32 : MAX_PROMPT), ncand = 0;
	size_t max = tt_rnd_below(&c->rng, 8) == 0 ? 1 + tt_rnd_below(&c->rng, NPODS) : NPODS;
	uint32_t kind = tt_rnd_below(&c->rng, 4), gap = UINT32_MAX;
	const int *cp = NULL;
	char what[48];

	if (tt_rnd_below(&c->rng, 3) == 0) {
		ncand = 1 + tt_rnd_below(&c->rng, 4);
		for (size_t i = 0; i < ncand; i++)
			cand[i] = (int)tt_rnd_below(&c->rng, NPODS);
		cand[0] = 0; /* pod 0 always has a row then */
		cp = cand;
	}
	if (kind <= 1) {
		/* ALWAYS-only prompt, or one with a NEVER key at position gap. */
		for (size_t i = 0; i < n; i++)
			keys[i] = keys_of[CLS_ALWAYS][pick_idx(&c->rng, CLS_ALWAYS)];
		if (kind == 1) {
			gap = tt_rnd_below(&c->rng, (uint32_t)n);
			keys[gap] = keys_of[CLS_NEVER][tt_rnd_below(&c->rng, nkeys[CLS_NEVER])];
		}
	} else {
		/* Consecutive CHURN keys, as the writer stores and speculates prompts. */
		uint32_t j = pick_idx(&c->rng, CLS_CHURN);
		if (j + n > nkeys[CLS_CHURN])
			j = nkeys[CLS_CHURN] - (uint32_t)n;
		for (size_t i = 0; i < n; i++)
			keys[i] = keys_of[CLS_CHURN][j + i];
	}
	snprintf(what, sizeof(what), "%s, %zu cand",
		 kind == 0 ? "ALWAYS" : kind == 1 ? "gap" : "CHURN", ncand);
	r_before(c);
	int nr = r_score(c, keys, n, cp, ncand, out, max);
	r_after(c);
	check_rows(what, out, nr, max, n, cp, ncand);
	c->me->scores++;
	c->me->ops++;
	if (kind > 1)
		return;
	/* Rows come out in pod order, so a cut at max never drops pod 0's. */
	const struct kvidx_score *r0 = row_of(out, nr, 0);
	uint32_t want = kind == 0 ? (uint32_t)n : gap;
	if (kind == 1 && gap == 0 && !cp && nr != 0)
		fail("kvidx_score(gap at block 0): %d rows, expected none", nr);
	if (want == 0 && !cp)
		return;
	if ((!r0 || r0->blocks != want || r0->spec_blocks != 0) && r_restart_miss(c))
		return;
	if (!r0 || r0->blocks != want || r0->spec_blocks != 0)
		fail("kvidx_score(%s, n=%zu, gap %d): pod 0 has %u blocks (%u spec), expected %u "
		     "confirmed", what, n, kind == 1 ? (int)gap : -1, r0 ? r0->blocks : 0,
		     r0 ? r0->spec_blocks : 0, want);
	if (kind == 1)
		for (int i = 0; i < nr; i++)
			if (out[i].blocks > gap)
				fail("kvidx_score(gap at %u): pod %d has %u blocks, past the absent "
				     "block", gap, out[i].pod, out[i].blocks);
}

static void r_pod_one(struct rctx *c)
{
	char name[KVIDX_POD_NAME_MAX], model[KVIDX_POD_NAME_MAX], want[KVIDX_POD_NAME_MAX];
	unsigned p = tt_rnd_below(&c->rng, NPODS), pp, inc;
	r_before(c);
	int rc = kvidx_reader_pod(c->r, (int)p, name, model);

	c->me->pod_reads++;
	c->me->ops++;
	if (rc == -KVIDX_ERETRY) {
		c->me->torn_names++;
		return;
	}
	if (rc == -KVIDX_ENOPOD && (p >= REMOVABLE || r_restart_miss(c)))
		return;
	if (rc != 0)
		fail("kvidx_reader_pod(%u) = %d (%s)", p, rc, kvidx_strerror(rc));
	if (sscanf(name, "pod%u-inc%u-chk", &pp, &inc) != 2 || pp != p)
		fail("kvidx_reader_pod(%u): name '%s' is not this pod's", p, name);
	pod_name(want, p, inc);
	if (strcmp(want, name) != 0)
		fail("kvidx_reader_pod(%u): torn name '%s' (expected '%s')", p, name, want);
	pod_model(want, p, inc);
	if (strcmp(want, model) != 0)
		fail("kvidx_reader_pod(%u): model '%s' does not match name '%s'", p, model, name);
	if (inc < c->last_inc[p])
		fail("kvidx_reader_pod(%u): incarnation went back from %u to %u", p, c->last_inc[p],
		     inc);
	c->last_inc[p] = inc;
}

static void r_info_one(struct rctx *c)
{
	struct kvidx_info in;
	int rc;

	for (unsigned run = 0;;) {
		uint64_t tr0 = ld_acquire(&sh->ch.truncations);
		rc = kvidx_reader_info(c->r, &in);
		if (!r_again(c, rc, &run, tr0))
			break;
	}
	if (rc != 0)
		fail("kvidx_reader_info = %d", rc);
	r_after(c);
	uint64_t age = (kvidx_now_ns() - in.heartbeat_ns) / NS_MS;
	if (in.heartbeat_ns <= kvidx_now_ns() && age > c->me->max_hb_age_ms)
		st_relaxed(&c->me->max_hb_age_ms, age);
	if (in.generation != c->gen || in.writer_pid != sh->writer_pid[c->gen] ||
	    in.geo.max_pods != NPODS ||
	    in.geo.pods_per_key != PPK || in.geo.capacity != opt.capacity)
		fail("kvidx_reader_info: generation %llu writer %d geometry %u/%u/%llu is wrong",
		     (unsigned long long)in.generation, (int)in.writer_pid, in.geo.max_pods,
		     in.geo.pods_per_key, (unsigned long long)in.geo.capacity);
}

/* After message msg_seq was accepted under generation g: a new segment of the log if it went
 * into another ring or generation than the last (written before the next message is sent, so
 * the writer finds it whenever it looks for a message it did not get). */
static void r_seg_note(struct rctx *c, uint64_t g)
{
	uint64_t k = kv_reader_reg_gen(c->r);
	int slot = kv_reader_slot_index(c->r);

	if (c->seg_reg == k && c->seg_slot == slot && c->seg_gen == g)
		return;
	uint64_t i = c->me->seg_n;
	*seg_at((unsigned)c->id, i) = (struct seg){ c->inc, c->msg_seq, k, g, slot };
	st_release(&c->me->seg_n, i + 1);
	c->seg_reg = k;
	c->seg_slot = slot;
	c->seg_gen = g;
}

/* A route commit or an outcome report; -EAGAIN (ring full) is allowed and counted. */
static void r_message_one(struct rctx *c, bool outcome)
{
	uint64_t g = kv_reader_view(c->r)->gen; /* what kvidx_commit() stamps */
	/* Acquire: the library's own (relaxed) load of the name comes after this one. */
	uint64_t named = ld_acquire(&kv_reader_idx(c->r)->ih_reg_gen);
	uint64_t corr = ((uint64_t)c->id << 58) | (g != c->msg_gen ? CORR_FIRST : 0) |
			((c->inc & CORR_INC_MASK) << CORR_SEQ_BITS) | (c->msg_seq + 1);
	struct route_spec rs;
	int rc;

	route_of(corr, &rs);
	if (outcome) {
		rc = kvidx_report_outcome(c->r, corr, rs.pod, rs.cached, rs.prompt);
	} else {
		struct kvidx_route rt = { .corr_id = corr, .pod = rs.pod, .prefill_pod = rs.prefill,
					  .keys = &keys_of[CLS_CHURN][rs.first], .nkeys = rs.len,
					  .matched_blocks = rs.matched,
					  .matched_spec = rs.matched_spec };
		rc = kvidx_commit(c->r, &rt);
	}
	c->me->ops++;
	r_sync(c, false);
	if (rc == -EAGAIN) {
		c->me->msgs_dropped++;
		return;
	}
	/* Chaos: following the registry failed (replaced again meanwhile, or the attach to the
	 * replacement failed while the handle is behind it): nothing was sent. */
	if (opt.chaos && (rc == -KVIDX_ERETRY ||
			  ((rc == -KVIDX_ENOSLOT || rc == -KVIDX_ECORRUPT) && r_behind(c)))) {
		c->me->msgs_refused++;
		return;
	}
	if (rc != 0)
		fail("%s = %d (%s)", outcome ? "kvidx_report_outcome" : "kvidx_commit", rc,
		     kvidx_strerror(rc));
	/* Issue 24 fault 2: a message begun once registry `named` was named goes into it (or a
	 * later one), never into the registry the handle last entered. */
	if (kv_reader_reg_gen(c->r) < named)
		fail("%s begun when the index header named registry %llu went into registry %llu",
		     outcome ? "kvidx_report_outcome" : "kvidx_commit", (unsigned long long)named,
		     (unsigned long long)kv_reader_reg_gen(c->r));
	c->msg_seq++;
	c->msg_gen = g;
	c->me->msgs_ok++;
	r_seg_note(c, g);
}

/* Chaos: a reader's SIGBUS (it touched a truncated registry) records when and where, then
 * kills the reader as it would have died: the supervisor checks the time against the
 * truncation windows. */
static struct role *bus_role;

static void r_on_bus(int sig, siginfo_t *si, void *uc)
{
	struct timespec ts;

	(void)uc;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	if (bus_role) {
		bus_role->bus_addr = (uint64_t)(uintptr_t)si->si_addr;
		__atomic_store_n(&bus_role->bus_ns,
				 (uint64_t)ts.tv_sec * NS_S + (uint64_t)ts.tv_nsec, __ATOMIC_RELEASE);
	}
	signal(sig, SIG_DFL);
	raise(sig); /* delivered when the handler returns: the default action, death */
}

static void r_bus_arm(struct role *me)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = r_on_bus;
	sa.sa_flags = SA_SIGINFO;
	sigemptyset(&sa.sa_mask);
	bus_role = me;
	if (sigaction(SIGBUS, &sa, NULL) < 0)
		fail("sigaction(SIGBUS): %s", strerror(errno));
}

static void __attribute__((noreturn)) reader_main(int id)
{
	struct rctx c = { .me = &sh->roles[id], .id = id };
	static char whobuf[32];

	snprintf(whobuf, sizeof(whobuf), "reader %d", id);
	who = whobuf;
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	c.rng = opt.seed ^ tt_splitmix64((uint64_t)getpid() << 8 | (uint64_t)id);
	c.inc = ld_acquire(&c.me->incarnations);
	if (opt.chaos)
		r_bus_arm(c.me);
	c.trunc_ok = ld_acquire(&sh->ch.truncations);
	/* Chaos: the registry may be truncated or full right now; the writer replaces it. */
	for (uint64_t t0 = now_ns(); !(c.r = kvidx_reader_open(idx_name));) {
		if (!opt.chaos || now_ns() - t0 > 20 * NS_S)
			fail("kvidx_reader_open(%s): %s", idx_name, kvidx_strerror(-errno));
		tt_sleep_us(2000);
	}
	c.gen = kv_reader_view(c.r)->gen;
	st_relaxed(&c.me->gen, c.gen);
	r_sync(&c, true);
	c.last_t = calloc((size_t)(nkeys[0] + nkeys[1]) * NPODS, sizeof(uint64_t));
	c.last_tiers = calloc(nkeys[0], 1);
	if (!c.last_t || !c.last_tiers)
		fail("out of memory");
	st_release(&c.me->ready, 1);

	while (!ld_acquire(&sh->stop_readers)) {
		uint32_t sel = tt_rnd_below(&c.rng, 1000);
		/* Chaos: half the time a replacement is seen, a message goes first, before any
		 * lookup moves the handle (issue 24 fault 2: it must follow by itself). */
		if (opt.chaos && r_behind(&c) && (sel & 1))
			sel = 999;
		if (sel < 400)
			r_lookup_one(&c, CLS_ALWAYS);
		else if (sel < 700)
			r_lookup_one(&c, CLS_CHURN);
		else if (sel < 780)
			r_lookup_one(&c, CLS_NEVER);
		else if (sel < 958)
			r_score_one(&c);
		else if (sel < 988)
			r_pod_one(&c);
		else if (sel < 998)
			r_info_one(&c);
		else
			r_message_one(&c, tt_rnd(&c.rng) & 1);
	}
	while (c.npend)
		r_check_pending(&c, true);
	kvidx_reader_close(c.r);
	st_relaxed(&c.me->final_inc, c.inc);
	st_relaxed(&c.me->final_msg_gen, c.msg_gen);
	st_release(&c.me->final_seq, c.msg_seq);
	_exit(0);
}

/* ==== the hostile member of the index's group ============================================== */

struct xctx {
	uint64_t rng;
	struct kvidx_reader *own; /* a reader handle: its slot's ring is the member's own */
	uint64_t own_reg;
	int own_slot;
	uint32_t own_seq;
	int ifd;                  /* the index header, for pread */
	struct kvidx_idx_hdr ih;  /* a copy, this round's */
};

#define XADD(f) __atomic_add_fetch(&sh->ch.f, 1, __ATOMIC_RELAXED)

/* A handle in the registry the header names: the old one is left once the header names
 * another (kvidx_reader_close() then only unmaps it). */
static void x_own(struct xctx *x, uint64_t k)
{
	if (x->own && x->own_reg == k)
		return;
	if (x->own)
		kvidx_reader_close(x->own);
	x->own = kvidx_reader_open(idx_name); /* may fail (full, truncated): tried next round */
	if (x->own) {
		x->own_reg = kv_reader_reg_gen(x->own);
		x->own_slot = kv_reader_slot_index(x->own);
		XADD(reopens);
	}
}

/* n messages of garbage at ring positions from pos: random bytes, half of them with a valid
 * type and plausible fields (the current generation, pods near the range, a few keys). */
static void x_garbage(struct xctx *x, struct kv_msg *msgs, uint32_t ne, uint64_t pos, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		struct kv_msg m;
		uint64_t *w = (uint64_t *)&m;
		for (size_t j = 0; j < sizeof(m) / 8; j++)
			w[j] = tt_rnd(&x->rng);
		if (tt_rnd(&x->rng) & 1) {
			m.m_type = (uint8_t)(1 + tt_rnd_below(&x->rng, 3));
			m.m_n = (uint8_t)tt_rnd_below(&x->rng, KV_MSG_KEYS_PER + 2);
			if (m.m_type == KV_MSG_COMMIT) {
				m.u.commit.gen = x->ih.ih_generation;
				m.u.commit.pod = (uint16_t)tt_rnd_below(&x->rng, 2 * NPODS);
				m.u.commit.nkeys = tt_rnd_below(&x->rng, 20);
			} else if (m.m_type == KV_MSG_OUTCOME) {
				m.u.outcome.gen = x->ih.ih_generation;
				m.u.outcome.pod = (uint16_t)tt_rnd_below(&x->rng, 2 * NPODS);
			}
		}
		memcpy(&msgs[(pos + i) & (ne - 1)], &m, sizeof(m));
	}
}

/* A well-formed commit (or outcome) of the member's own correlation id at pos: CHURN keys,
 * now and then a NEVER key; returns the messages written. */
static unsigned x_crafted(struct xctx *x, struct kv_msg *msgs, uint32_t ne, uint64_t pos)
{
	uint64_t corr = ((uint64_t)HOSTILE_ROLE << 58) | (tt_rnd(&x->rng) >> 6);
	struct kv_msg m = { .m_corr = corr };

	if (tt_rnd_below(&x->rng, 4) == 0) {
		m.m_type = KV_MSG_OUTCOME;
		m.u.outcome.t_ns = now_ns();
		m.u.outcome.gen = x->ih.ih_generation;
		m.u.outcome.pod = (uint16_t)tt_rnd_below(&x->rng, NPODS);
		memcpy(&msgs[pos & (ne - 1)], &m, sizeof(m));
		return 1;
	}
	uint32_t nk = tt_rnd_below(&x->rng, 13), j = tt_rnd_below(&x->rng, nkeys[CLS_CHURN] - 12);
	unsigned n = 1;
	m.m_type = KV_MSG_COMMIT;
	m.m_seq = ++x->own_seq;
	m.u.commit.t_ns = now_ns();
	m.u.commit.gen = x->ih.ih_generation;
	m.u.commit.pod = (uint16_t)tt_rnd_below(&x->rng, NPODS);
	m.u.commit.prefill_pod = tt_rnd(&x->rng) & 1 ? UINT16_MAX :
			       (uint16_t)tt_rnd_below(&x->rng, NPODS);
	m.u.commit.nkeys = nk;
	memcpy(&msgs[pos & (ne - 1)], &m, sizeof(m));
	for (uint32_t k = 0; k < nk; n++) {
		struct kv_msg km = { .m_type = KV_MSG_KEYS, .m_seq = m.m_seq, .m_corr = corr };
		km.m_n = (uint8_t)(nk - k < KV_MSG_KEYS_PER ? nk - k : KV_MSG_KEYS_PER);
		for (unsigned i = 0; i < km.m_n; i++, k++)
			km.u.keys[i] = tt_rnd_below(&x->rng, 8) ? keys_of[CLS_CHURN][j + k] :
				       keys_of[CLS_NEVER][tt_rnd_below(&x->rng, nkeys[CLS_NEVER])];
		memcpy(&msgs[(pos + n) & (ne - 1)], &km, sizeof(km));
	}
	return n;
}

/* One forgery in ring s of registry k (base: the member's shared mapping of it). */
static void x_forge(struct xctx *x, void *base, uint64_t k)
{
	uint32_t nr = x->ih.ih_max_readers, ne = x->ih.ih_ring_entries;
	bool own = x->own && x->own_reg == k && tt_rnd_below(&x->rng, 3) == 0;
	unsigned s = own ? (unsigned)x->own_slot : tt_rnd_below(&x->rng, nr);
	struct kv_ring_hdr *rh = kv_ring_at(base, nr, ne, s);
	struct kv_msg *msgs = (struct kv_msg *)(rh + 1);

	taint_mark(k, s); /* before any word changes (see taint_mark()) */
	uint64_t h = ld_relaxed(&rh->rh_head), t = ld_relaxed(&rh->rh_tail);
	switch (tt_rnd_below(&x->rng, own ? 9 : 7)) {
	case 0: st_release(&rh->rh_head, t + ne + 1 + tt_rnd_below(&x->rng, 1u << 20));
		XADD(f_ahead); break;
	case 1: st_release(&rh->rh_head, t - 1 - tt_rnd_below(&x->rng, ne)); XADD(f_behind); break;
	case 2: st_release(&rh->rh_head, t + 1 + tt_rnd_below(&x->rng, ne)); XADD(f_near); break;
	case 3: st_release(tt_rnd(&x->rng) & 1 ? &rh->rh_head : &rh->rh_tail, tt_rnd(&x->rng));
		XADD(f_wild); break;
	case 4: st_release(&rh->rh_tail, tt_rnd(&x->rng) & 1 ? h : h - tt_rnd_below(&x->rng, 2 * ne));
		XADD(f_tail); break;
	case 5: case 6: {
		/* Garbage at random places, or published after the head. */
		unsigned n = 1 + tt_rnd_below(&x->rng, 8);
		bool publish = tt_rnd(&x->rng) & 1;
		x_garbage(x, msgs, ne, publish ? h : tt_rnd(&x->rng), n);
		if (publish)
			st_release(&rh->rh_head, h + n);
		XADD(f_garbage);
		break;
	}
	default: /* own ring: a commit or outcome of its own, published */
		st_release(&rh->rh_head, h + x_crafted(x, msgs, ne, h));
		XADD(f_crafted);
		break;
	}
	XADD(forged);
}

/*
 * Truncates registry k (fd, size bytes) to a random shorter length: 0, into the header or the
 * slots, or into the rings only. Every ring cut is marked; the window stays open until the
 * writer has given the file its size back (after 2 s the member restores it itself:
 * counted, the writer should have been faster).
 */
static void x_truncate(struct xctx *x, int fd, uint64_t k, uint64_t size)
{
	uint32_t nr = x->ih.ih_max_readers, ne = x->ih.ih_ring_entries;
	uint64_t r0 = kv_ctl_ring_off(nr), rb = kv_ctl_ring_bytes(ne), len;
	unsigned kind = tt_rnd_below(&x->rng, 4);

	len = kind == 0 ? 0 : kind == 1 ? tt_rnd(&x->rng) % r0 : r0 + tt_rnd(&x->rng) % (size - r0);
	for (unsigned i = 0; i < nr; i++)
		if (r0 + (uint64_t)(i + 1) * rb > len)
			taint_mark(k, i);
	uint64_t n = sh->ch.ntw;
	struct twin *w = &sh->ch.tw[n % TWIN];
	st_relaxed(&w->t1, 0);
	st_relaxed(&w->reg, k);
	st_relaxed(&w->t0, now_ns());
	__atomic_store_n(&sh->ch.ntw, n + 1, __ATOMIC_SEQ_CST);
	if (ftruncate(fd, (off_t)len) < 0) {
		st_release(&w->t1, now_ns());
		return;
	}
	XADD(truncations);
	kind == 0 ? XADD(cut_all) : kind == 1 ? XADD(cut_slots) : XADD(cut_rings);
	for (;;) {
		struct stat sb;
		tt_sleep_us(500);
		if (fstat(fd, &sb) == 0 && (uint64_t)sb.st_size >= size)
			break;
		if (now_ns() - w->t0 > 2 * NS_S) {
			if (ftruncate(fd, (off_t)size) == 0)
				XADD(self_restores);
			break;
		}
	}
	uint64_t t1 = now_ns();
	if (t1 - w->t0 > sh->ch.max_open_ns)
		sh->ch.max_open_ns = t1 - w->t0;
	st_release(&w->t1, t1);
}

/* One round: the registry the header names now; a truncation a third of the time, else a few
 * forgeries. */
static void x_round(struct xctx *x)
{
	char path[KV_SHM_PATH_MAX];
	struct stat sb;

	if (pread(x->ifd, &x->ih, sizeof(x->ih), 0) != (ssize_t)sizeof(x->ih) ||
	    x->ih.ih_magic != KV_IDX_MAGIC)
		return;
	uint64_t k = x->ih.ih_reg_gen, size = x->ih.ih_reg_size;
	x_own(x, k);
	kv_reg_shm_name(path, idx_name, k);
	int fd = shm_open(path, O_RDWR, 0);
	if (fd < 0)
		return;
	/* Only the member truncates, and the writer only grows the file back: a size checked
	 * here stays, and its own stores below cannot fault. */
	if (fstat(fd, &sb) == 0 && (uint64_t)sb.st_size >= size) {
		XADD(rounds);
		if (tt_rnd_below(&x->rng, 3) == 0) {
			x_truncate(x, fd, k, size);
		} else {
			void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
			if (p != MAP_FAILED) {
				for (unsigned i = 1 + tt_rnd_below(&x->rng, 3); i; i--)
					x_forge(x, p, k);
				munmap(p, size);
			}
		}
	}
	close(fd);
}

static void __attribute__((noreturn)) x_main(int unused)
{
	char path[KV_SHM_PATH_MAX];
	struct xctx x = { .rng = opt.seed ^ 0x4057113ull };

	(void)unused;
	who = "hostile member";
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	snprintf(path, sizeof(path), "/%s", idx_name);
	x.ifd = shm_open(path, O_RDONLY, 0);
	if (x.ifd < 0)
		fail("shm_open(%s): %s", path, strerror(errno));
	while (!ld_acquire(&sh->ch.stop)) {
		if (__atomic_load_n(&sh->ch.pause, __ATOMIC_SEQ_CST)) {
			__atomic_store_n(&sh->ch.paused, 1, __ATOMIC_SEQ_CST);
			tt_sleep_us(1000);
			continue;
		}
		tt_sleep_us(10000 + tt_rnd_below(&x.rng, 70000)); /* 10..80 ms */
		if (!__atomic_load_n(&sh->ch.pause, __ATOMIC_SEQ_CST))
			x_round(&x);
	}
	kvidx_reader_close(x.own);
	close(x.ifd);
	_exit(0);
}

/* ==== supervisor ============================================================================ */

/* Read-only maps of the registry and data segment, to watch stats and slots from outside. */
static const struct kvidx_idx_hdr *mon_ih;
static const struct kvidx_stats *mon_st;
static const struct kvidx_data_hdr *mon_hdr;

static void *map_ro(const char *path)
{
	const char *what;
	void *p = tt_map_shm(path, false, NULL, &what);

	if (!p)
		fail("%s(%s): %s", what, path, strerror(errno));
	return p;
}

/* Maps data generation gen, which the registry must name as current. Earlier maps stay (a
 * dead writer's stats are still read after its successor unlinked them). */
static void monitor_open(unsigned gen)
{
	char path[KV_SHM_PATH_MAX];

	if (!mon_ih) {
		snprintf(path, sizeof(path), "/%s", idx_name);
		mon_ih = map_ro(path);
	}
	if (ld_acquire(&mon_ih->ih_generation) != gen)
		fail("index names generation %llu, expected %u",
		     (unsigned long long)mon_ih->ih_generation, gen);
	snprintf(path, sizeof(path), "/%s.data.%u", idx_name, gen);
	mon_hdr = map_ro(path);
	mon_st = (const void *)((const char *)mon_hdr + mon_hdr->dh_stats_off);
}

#define STAT(f) ld_relaxed(&mon_st->f)

/* The registry slots are watched with pread, never mapped: the member truncates registries,
 * and the supervisor must not fault. -1 if registry k is gone. */
static int reg_fd(uint64_t k)
{
	char path[KV_SHM_PATH_MAX];

	kv_reg_shm_name(path, idx_name, k);
	return shm_open(path, O_RDONLY, 0);
}

/* Word off (offsetof in struct kvidx_reader_slot) of slot i; false if not there (truncated). */
static bool slot_word(int fd, int i, size_t off, uint64_t *v)
{
	off_t at = (off_t)(sizeof(struct kvidx_ctl_hdr) + (size_t)i * sizeof(struct kvidx_reader_slot) +
			   off);
	return fd >= 0 && i >= 0 && pread(fd, v, sizeof(*v), at) == (ssize_t)sizeof(*v);
}

static pid_t spawn(void (*fn)(int), int arg)
{
	pid_t pid = fork();

	if (pid < 0)
		fail("fork: %s", strerror(errno));
	if (pid == 0)
		fn(arg);
	return pid;
}

static void writer_entry(int gen)
{
	writer_main((unsigned)gen);
}

static void reader_entry(int id)
{
	reader_main(id);
}

/* Reaps pid if it exited; any exit but a SIGKILL we sent is a failure. */
static bool reap(pid_t pid, const char *what, bool block)
{
	char why[512];
	int rc = tt_reap(pid, what, block, &sh->fail, 0, why, sizeof(why));

	if (rc < 0)
		fail("%s", why);
	return rc > 0;
}

static void set_child(pid_t old, pid_t pid)
{
	for (unsigned i = 0; i < nchildren; i++)
		if (children[i] == old) {
			children[i] = pid;
			return;
		}
	children[nchildren++] = pid;
}

static pid_t reader_spawn(int id)
{
	struct role *ro = &sh->roles[id];
	pid_t old = ro->pid;

	st_relaxed(&ro->ready, 0);
	st_relaxed(&ro->bus_ns, 0);
	st_release(&ro->incarnations, ro->incarnations + 1); /* before fork: the child reads it */
	pid_t pid = spawn(reader_entry, id);
	st_relaxed(&ro->pid, pid);
	set_child(old, pid);
	return pid;
}

static void reader_died(int id, pid_t pid, int st);

static void reader_kill(int id)
{
	pid_t pid = sh->roles[id].pid;
	int st;

	kill(pid, SIGKILL);
	if (waitpid(pid, &st, 0) != pid)
		fail("waitpid(reader %d): %s", id, strerror(errno));
	if (tt_fail_posted(&sh->fail))
		fail("reader failed");
	if (!(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL))
		reader_died(id, pid, st); /* before our SIGKILL: only SIGBUS, explained, passes */
}

/* Reaps reader id if it died: true if it did (a SIGBUS explained by a truncation; anything
 * else fails the run); the caller respawns it. */
static bool reader_reap(int id)
{
	pid_t pid = sh->roles[id].pid;
	int st;
	pid_t r = waitpid(pid, &st, WNOHANG);

	if (r == 0)
		return false;
	if (r != pid)
		fail("waitpid(reader %d): %s", id, strerror(errno));
	reader_died(id, pid, st);
	return true;
}

static bool wait_ready(int id, uint64_t deadline)
{
	while (!ld_acquire(&sh->roles[id].ready)) {
		if (now_ns() > deadline)
			return false;
		if (reader_reap(id))
			reader_spawn(id); /* died of SIGBUS while attaching */
		tt_sleep_us(200);
	}
	return true;
}

/* The stop experiment, one at a time: STOPPED (waiting for expulsion), then RECOVERING. */
enum { ST_IDLE, ST_STOPPED, ST_RECOVERING };
struct stopper {
	int state, id, attempts;
	pid_t pid;
	bool in_section, expelled;
	uint64_t since, expel_at, reclaimed_at_expel, slot_state, release_at;
	uint64_t ops0, retries0, late0;
	/* The registry the reader was stopped in (read with pread through fd), its claim. */
	int fd;
	uint64_t reg, claim0, trunc0;
	/* Results. */
	uint64_t stops, in_section_stops, expels_seen, resumed_expelled, retried_after;
	uint64_t late_after, killed_stopped, replaced, bus_aborts;
	uint64_t max_expel_ms, max_limbo_stopped;
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: stress_index --seconds N [--readers R] [--capacity C] [--records N]\n"
		"                    [--seed S] [--stall-ms M]\n"
		"                    [--no-restart] [--lax-restart] [--restarts K] [--no-chaos]\n"
		"Torture test of kvidx's concurrency contract: one writer churns a small index while\n"
		"R reader processes (default 4) verify every answer; readers are SIGKILLed and\n"
		"SIGSTOPped past the stall limit (default 200 ms); K times (default seconds / 10,\n"
		"at least 1; at most seconds / 6) the writer is SIGKILLed and a new one takes over\n"
		"(unless --no-restart): successors alternate publishing after their replay (a reader\n"
		"missing a key then fails the run) and before it (--lax-restart: always before).\n"
		"Every lookup answer is checked against the logged history of its (key, pod).\n"
		"Unless --no-chaos, a hostile member of the index's group truncates the registry\n"
		"and forges route-ring words every few tens of ms (R at most 61 then).\n"
		"Capacity defaults to 4096 keys, records to 4 x capacity. Exit 0 with a summary line,\n"
		"1 on the first violation.\n");
}

static void parse_args(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "seconds", required_argument, 0, 's' }, { "readers", required_argument, 0, 'r' },
		{ "capacity", required_argument, 0, 'c' }, { "records", required_argument, 0, 'R' },
		{ "seed", required_argument, 0, 'S' },    { "stall-ms", required_argument, 0, 'm' },
		{ "no-restart", no_argument, 0, 'n' },    { "lax-restart", no_argument, 0, 'x' },
		{ "restarts", required_argument, 0, 'k' }, { "no-chaos", no_argument, 0, 'C' },
		{ "help", no_argument, 0, 'h' },          { 0, 0, 0, 0 },
	};
	int ch;
	bool seeded = false;

	while ((ch = getopt_long(argc, argv, "s:r:c:R:S:m:k:nxh", lo, NULL)) != -1) {
		char *end = NULL;
		unsigned long long v = optarg ? strtoull(optarg, &end, 0) : 0;
		if (optarg && (*optarg == '\0' || *end != '\0')) {
			fprintf(stderr, "stress_index: bad number '%s'\n", optarg);
			exit(2);
		}
		switch (ch) {
		case 's': opt.seconds = (unsigned)v; break;
		case 'r': opt.readers = (unsigned)v; break;
		case 'c': opt.capacity = v; break;
		case 'R': opt.records = v; break;
		case 'S': opt.seed = v; seeded = true; break;
		case 'm': opt.stall_ms = (unsigned)v; break;
		case 'n': opt.no_restart = true; break;
		case 'k': opt.restarts = (unsigned)v; break;
		case 'x': opt.strict_restart = false; break;
		case 'C': opt.chaos = false; break;
		case 'h': usage(stdout); exit(0);
		default: usage(stderr); exit(2);
		}
	}
	if (optind != argc || opt.seconds < 1 || opt.readers < 1 ||
	    opt.readers > MAX_ROLES - 1 || (opt.chaos && opt.readers > MAX_CHAOS_READERS) ||
	    opt.capacity < 64 || opt.capacity > (1u << 24) ||
	    opt.stall_ms < 10 || opt.stall_ms > 10000) {
		usage(stderr);
		exit(2);
	}
	if (!opt.records)
		opt.records = 4 * opt.capacity;
	if (!opt.restarts)
		opt.restarts = opt.seconds / 10 ? opt.seconds / 10 : 1;
	if (opt.restarts > MAX_GEN - 1 || opt.seconds < 6 * opt.restarts)
		opt.restarts = opt.seconds / 6 < MAX_GEN - 1 ? opt.seconds / 6 : MAX_GEN - 1;
	if (opt.restarts == 0)
		opt.no_restart = true;
	if (!seeded)
		opt.seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
}

/* What main's run keeps between its steps (the fault schedule, the restarts, the counts). */
static struct run {
	struct stopper so;
	uint64_t kills, early_kills, max_limbo, max_hb_age, arena_max;
	uint64_t rng;
	uint64_t *ops_seen, *ops_at;
	pid_t wpid;
	struct kvidx_writer_opts o2;
	uint64_t arena_units;
	uint64_t start, end, next_kill, next_stop, next_progress;
	/* Writer restarts: 0 writer alive (next kill at restart_at), 1 dead, 2 successor
	 * replaying, 3 readers switching, 4 no more restarts. */
	unsigned restarts, gen;
	int phase;
	uint64_t slice, restart_at, phase_t;
	uint64_t stale_seen_ms, dead_ms, replay_ms, switch_ms;
	struct kvidx_stats g1; /* the dead writers' counters, summed */
	uint64_t g1_route_bad, stale_route_bad, deferred_restarts;
	/* Chaos: the hostile member, and the readers it killed through SIGBUS. */
	pid_t xpid;
	uint64_t bus_deaths;
} R;

/* A reader died (wait status st) without our SIGKILL: allowed only with chaos, of SIGBUS,
 * at a time inside a truncation's window (r_on_bus() records it). A stop experiment on it
 * ends. The caller respawns it. */
static void reader_died(int id, pid_t pid, int st)
{
	uint64_t t = ld_acquire(&sh->roles[id].bus_ns);

	if (tt_fail_posted(&sh->fail))
		fail("reader %d failed", id);
	if (!opt.chaos || !WIFSIGNALED(st) || WTERMSIG(st) != SIGBUS)
		fail("reader %d (pid %d) died by itself: status %#x (%s)", id, (int)pid, st,
		     WIFSIGNALED(st) ? strsignal(WTERMSIG(st)) : "exit");
	if (!t || !bus_explained(t))
		fail("reader %d (pid %d) died of SIGBUS at %llu (address %#llx), outside every "
		     "truncation window", id, (int)pid, (unsigned long long)t,
		     (unsigned long long)sh->roles[id].bus_addr);
	R.bus_deaths++;
	if (R.so.state != ST_IDLE && R.so.id == id) {
		if (R.so.fd >= 0)
			close(R.so.fd);
		R.so.fd = -1;
		R.so.state = ST_IDLE;
		R.so.bus_aborts++;
	}
}

/* The run's totals over the writers' generations and the readers, for the checks and the
 * summary. */
struct totals {
	struct kvidx_stats tot;
	const struct kvidx_stats *fs;
	uint64_t route_stale, lookups, scores, retries, pods, torn, maxrun, spec;
	uint64_t msgs_ok, msgs_dropped, misses, h_calls, h_checked, h_unknown, r_ops;
	/* Chaos. */
	uint64_t route_bad_all, retry_expel, retry_replace, retry_trunc, attach_fails, follows;
	uint64_t msgs_refused;
};

static void x_entry(int arg)
{
	x_main(arg);
}

/* The hostile member: started with the readers, stopped a second before the end (its last
 * truncation repaired by then), paused around writer restarts. */
static void x_step(uint64_t now)
{
	if (!R.xpid)
		return;
	if (reap(R.xpid, "hostile member", false))
		fail("the hostile member exited early");
	if (now + NS_S < R.end)
		return;
	st_release(&sh->ch.stop, 1);
	for (uint64_t dl = now_ns() + 10 * NS_S; !reap(R.xpid, "hostile member", false);) {
		if (now_ns() > dl)
			fail("the hostile member did not stop within 10 s");
		tt_sleep_us(1000);
	}
	set_child(R.xpid, 0);
	R.xpid = 0;
}

/* Whether the member is idle (asking it to pause first): no truncation outstanding when a
 * writer is killed, none while its successor replays. */
static bool x_paused(void)
{
	if (!R.xpid)
		return true;
	__atomic_store_n(&sh->ch.pause, 1, __ATOMIC_SEQ_CST);
	return __atomic_load_n(&sh->ch.paused, __ATOMIC_SEQ_CST);
}

static void x_resume(void)
{
	__atomic_store_n(&sh->ch.paused, 0, __ATOMIC_SEQ_CST);
	__atomic_store_n(&sh->ch.pause, 0, __ATOMIC_SEQ_CST);
}

/* The writer, the checks that need it alive, the readers; the fault and restart schedule. */
static void run_start(void)
{
	/* The writer, then the checks that need it alive. */
	R.wpid = spawn(writer_entry, 1);
	set_child(0, R.wpid);
	for (uint64_t dl = now_ns() + 20 * NS_S; !__atomic_load_n(&sh->writer_ready, __ATOMIC_ACQUIRE);) {
		reap(R.wpid, "writer", false);
		if (now_ns() > dl)
			fail("writer not ready after 20 s");
		tt_sleep_us(500);
	}
	R.o2 = (struct kvidx_writer_opts){ .name = idx_name };
	errno = 0;
	struct kvidx *w2 = kvidx_writer_open(&R.o2);
	if (w2 || errno != KVIDX_EWRITER)
		fail("a second writer was not refused: got %p, errno %d (%s)", (void *)w2, errno,
		     kvidx_strerror(-errno));
	monitor_open(1);
	R.arena_units = mon_hdr->dh_arena_units;

	for (unsigned i = 0; i < opt.readers; i++)
		reader_spawn((int)i);
	for (unsigned i = 0; i < opt.readers; i++)
		if (!wait_ready((int)i, now_ns() + 20 * NS_S))
			fail("reader %u not attached after 20 s", i);
	R.so.fd = -1;
	if (opt.chaos) {
		R.xpid = spawn(x_entry, 0);
		set_child(0, R.xpid);
	}

	R.start = now_ns();
	R.end = R.start + opt.seconds * NS_S;
	R.next_kill = R.start + (R.end - R.start) / 10;
	R.next_stop = R.start + (R.end - R.start) / 8;
	R.next_progress = R.start + NS_S;
	for (unsigned i = 0; i < opt.readers; i++)
		R.ops_at[i] = R.start;
	/* Restart k of n falls at (k + 1) / (n + 1) of the run, +-10%; successors alternate
	 * defer_publish (even generations) and publishing first (odd), or all publish first with
	 * --lax-restart. */
	R.restarts = 0;
	R.gen = 1;
	R.phase = opt.no_restart ? 4 : 0;
	R.slice = (R.end - R.start) / (opt.restarts + 1);
	R.restart_at = R.start + R.slice - R.slice / 10 +
		       tt_rnd_below(&R.rng, 1000) * (R.slice / 5000);
	R.phase_t = 0;
	R.stale_seen_ms = UINT64_MAX;
}

/* Contract 6, one step: the writer dies; readers serve on; a successor takes over. */
static void restart_step(uint64_t now)
{
	if (R.phase == 0 && now >= R.restart_at && R.so.state == ST_IDLE && x_paused()) {
		int st;
		kill(R.wpid, SIGKILL);
		if (waitpid(R.wpid, &st, 0) != R.wpid || !WIFSIGNALED(st) ||
		    WTERMSIG(st) != SIGKILL)
			fail("writer did not die of our SIGKILL");
		set_child(R.wpid, 0);
		R.wpid = 0;
		/* Its last change, whatever of it readers may see, into the history. */
		h_reconcile(R.gen);
		/* its stats, frozen now */
		struct kvidx_stats dead;
		memcpy(&dead, mon_st, sizeof(dead));
#define KV_STAT_ACC(n) R.g1.n += dead.n;
		KV_STATS(KV_STAT_ACC)
#undef KV_STAT_ACC
		if (R.gen == 1)
			R.g1_route_bad += dead.route_bad;
		else
			R.stale_route_bad += dead.route_bad;
		for (unsigned i = 0; i < opt.readers; i++)
			st_relaxed(&sh->roles[i].max_hb_age_ms, 0);
		R.phase = 1;
		R.phase_t = now_ns();
	} else if (R.phase == 1 && now_ns() - R.phase_t >= NS_S) {
		uint64_t seen = 0;
		for (unsigned i = 0; i < opt.readers; i++)
			if (ld_relaxed(&sh->roles[i].max_hb_age_ms) > seen)
				seen = ld_relaxed(&sh->roles[i].max_hb_age_ms);
		if (seen < 500)
			fail("the writer is dead for 1 s, but no reader saw its heartbeat older "
			     "than %llu ms", (unsigned long long)seen);
		if (seen < R.stale_seen_ms)
			R.stale_seen_ms = seen;
		R.dead_ms = (now_ns() - R.phase_t) / NS_MS;
		__atomic_store_n(&sh->writer_ready, 0, __ATOMIC_RELEASE);
		sh->deferred[R.gen + 1] = opt.strict_restart && (R.gen + 1) % 2 == 0;
		R.deferred_restarts += sh->deferred[R.gen + 1];
		R.wpid = spawn(writer_entry, (int)R.gen + 1);
		set_child(0, R.wpid);
		R.phase = 2;
		R.phase_t = now_ns();
	} else if (R.phase == 2 && __atomic_load_n(&sh->writer_ready, __ATOMIC_ACQUIRE)) {
		R.replay_ms = (now_ns() - R.phase_t) / NS_MS;
		errno = 0;
		struct kvidx *w3 = kvidx_writer_open(&R.o2);
		if (w3 || errno != KVIDX_EWRITER)
			fail("a second writer beside the successor was not refused (errno %d)",
			     errno);
		R.gen++;
		R.restarts++;
		monitor_open(R.gen);
		R.phase = 3;
		R.phase_t = now_ns();
	} else if (R.phase == 2 && now_ns() - R.phase_t > 20 * NS_S) {
		fail("the successor writer was not ready after 20 s");
	} else if (R.phase == 3) {
		unsigned behind = opt.readers;
		for (unsigned i = 0; i < opt.readers; i++)
			if (ld_relaxed(&sh->roles[i].gen) != R.gen)
				behind = i;
		if (behind == opt.readers) {
			x_resume();
			R.switch_ms = (now_ns() - R.phase_t) / NS_MS;
			R.phase = R.restarts < opt.restarts ? 0 : 4;
			R.restart_at = R.start + (R.restarts + 1) * R.slice - R.slice / 10 +
				       tt_rnd_below(&R.rng, 1000) * (R.slice / 5000);
			if (R.restart_at < now_ns() + 4 * NS_S)
				R.restart_at = now_ns() + 4 * NS_S;
			if (R.restart_at + 2 * NS_S > R.end)
				R.phase = 4;
		} else if (now_ns() - R.phase_t > 5 * NS_S) {
			fail("reader %u still on generation %llu 5 s after generation %u was "
			     "published", behind, (unsigned long long)sh->roles[behind].gen, R.gen);
		}
	}
}

/* The writer's segment, from outside: limbo, arena, heartbeat. Returns the limbo. */
static uint64_t watch_writer(void)
{
	uint64_t limbo = STAT(limbo), hb = ld_relaxed(&mon_hdr->dh_heartbeat_ns);
	uint64_t t = now_ns();
	if (limbo > R.max_limbo)
		R.max_limbo = limbo;
	if (STAT(arena_used) > R.arena_max)
		R.arena_max = STAT(arena_used);
	if (t > hb && t - hb > R.max_hb_age && (R.phase == 0 || R.phase >= 3))
		R.max_hb_age = t - hb;
	if (R.max_hb_age > 5 * NS_S)
		fail("writer heartbeat %llu ms old: the writer is blocked",
		     (unsigned long long)(R.max_hb_age / NS_MS));
	return limbo;
}

/* Progress: a reader that is neither stopped nor new must move within 5 s. */
static void check_progress(uint64_t now)
{
	if (now >= R.next_progress) {
		for (unsigned i = 0; i < opt.readers; i++) {
			uint64_t ops = ld_relaxed(&sh->roles[i].ops);
			bool held = R.so.state != ST_IDLE && R.so.id == (int)i;
			if (ops != R.ops_seen[i] || held || !ld_relaxed(&sh->roles[i].ready)) {
				R.ops_seen[i] = ops;
				R.ops_at[i] = now;
			} else if (now - R.ops_at[i] > 5 * NS_S) {
				fail("reader %u (pid %d) made no progress for %llu ms", i,
				     (int)sh->roles[i].pid,
				     (unsigned long long)((now - R.ops_at[i]) / NS_MS));
			}
		}
		R.next_progress = now + 100 * NS_MS;
	}
}

/* Kill a reader; a third of the time, also its replacement while it registers. Also while
 * the writer is dead: slots and full rings of the dead are then taken over. */
static void kill_step(uint64_t now, bool faults)
{
	if (now >= R.next_kill && (faults || R.phase == 1)) {
		int id;
		do
			id = (int)tt_rnd_below(&R.rng, opt.readers);
		while (R.so.state != ST_IDLE && id == R.so.id && opt.readers > 1);
		if (!(R.so.state != ST_IDLE && id == R.so.id)) {
			reader_kill(id);
			reader_spawn(id);
			R.kills++;
			if (tt_rnd_below(&R.rng, 3) == 0) {
				tt_sleep_us(tt_rnd_below(&R.rng, 3000));
				reader_kill(id);
				reader_spawn(id);
				R.kills++;
				R.early_kills++;
			}
			if (!wait_ready(id, now_ns() + 20 * NS_S))
				fail("replacement reader %d not attached after 20 s", id);
			R.ops_at[id] = now_ns();
		}
		R.next_kill = now_ns() + (R.phase == 1 ? 50 : 100) * NS_MS +
			      tt_rnd_below(&R.rng, R.phase == 1 ? 100 : 500) * NS_MS;
	}
}

/* Stop a reader. Retry until it is caught inside a read-side section (a reader spends a few
 * per cent of its time in one: up to 200 tries, giving up at random one time in 64, so that a
 * few stops land outside one too). */
static void stop_step(uint64_t now, bool faults)
{
	if (R.so.state == ST_IDLE && now >= R.next_stop && faults) {
		int st;
		R.so.id = (int)tt_rnd_below(&R.rng, opt.readers);
		R.so.pid = sh->roles[R.so.id].pid;
		kill(R.so.pid, SIGSTOP);
		if (waitpid(R.so.pid, &st, WUNTRACED) != R.so.pid)
			fail("waitpid(reader %d): %s", R.so.id, strerror(errno));
		if (!WIFSTOPPED(st)) {
			reader_died(R.so.id, R.so.pid, st); /* a SIGBUS just before the stop */
			reader_spawn(R.so.id);
			R.next_stop = now_ns() + 5 * NS_MS;
			return;
		}
		const struct role *ro = &sh->roles[R.so.id];
		uint64_t ctr = 0;
		R.so.reg = ro->reg_gen;
		R.so.claim0 = ro->slot_claim;
		R.so.trunc0 = ld_acquire(&sh->ch.truncations);
		R.so.fd = reg_fd(R.so.reg);
		R.so.slot_state = 0;
		R.so.in_section = slot_word(R.so.fd, ro->slot, offsetof(struct kvidx_reader_slot, rs_state),
					    &R.so.slot_state) &&
				  slot_word(R.so.fd, ro->slot, offsetof(struct kvidx_reader_slot, rs_ctr),
					    &ctr) &&
				  KV_RS_STATE(R.so.slot_state) == KV_RS_ACTIVE && ctr != 0;
		if (R.so.in_section)
			R.so.claim0 = KV_RS_GEN(R.so.slot_state);
		if (!R.so.in_section && R.so.attempts++ < 200 && tt_rnd_below(&R.rng, 64)) {
			if (R.so.fd >= 0)
				close(R.so.fd);
			R.so.fd = -1;
			kill(R.so.pid, SIGCONT);
			R.next_stop = now_ns() + 5 * NS_MS;
		} else {
			R.so.attempts = 0;
			R.so.state = ST_STOPPED;
			R.so.expelled = false;
			R.so.since = now_ns();
			R.so.release_at = R.so.since + 3 * opt.stall_ms * NS_MS;
			R.so.stops++;
			R.so.in_section_stops += R.so.in_section;
		}
	}
}

/* A stopped reader: expelled in time if it stopped inside a section, then released (or
 * killed). limbo: the writer's, now. */
static void stopped_step(uint64_t limbo)
{
	uint64_t st = 0;
	bool have = slot_word(R.so.fd, sh->roles[R.so.id].slot,
			      offsetof(struct kvidx_reader_slot, rs_state), &st);
	uint64_t t = now_ns();
	/* Chaos: its registry replaced or truncated meanwhile (the slot expelled through the
	 * writer's fresh view, or zeroed, or cut): the reader must discard its section. */
	bool replaced = opt.chaos && (ld_acquire(&mon_ih->ih_reg_gen) != R.so.reg || !have ||
				      ld_acquire(&sh->ch.truncations) != R.so.trunc0);
	if (R.so.in_section && !R.so.expelled && replaced &&
	    st != ((KV_RS_GEN(R.so.slot_state) << 8) | KV_RS_EXPELLED)) {
		R.so.expelled = true;
		R.so.expel_at = t;
		R.so.reclaimed_at_expel = STAT(reclaimed);
		R.so.replaced++;
		R.so.release_at = t + 2 * opt.stall_ms * NS_MS;
	}
	if (R.so.in_section && !R.so.expelled) {
		if (st == ((KV_RS_GEN(R.so.slot_state) << 8) | KV_RS_EXPELLED)) {
			R.so.expelled = true;
			R.so.expel_at = t;
			R.so.reclaimed_at_expel = STAT(reclaimed);
			R.so.expels_seen++;
			if ((t - R.so.since) / NS_MS > R.so.max_expel_ms)
				R.so.max_expel_ms = (t - R.so.since) / NS_MS;
			R.so.release_at = t + 2 * opt.stall_ms * NS_MS;
		} else if (st != R.so.slot_state) {
			fail("stopped reader %d: slot state went %#llx -> %#llx, not "
			     "to EXPELLED", R.so.id, (unsigned long long)R.so.slot_state,
			     (unsigned long long)st);
		} else if (t - R.so.since > opt.stall_ms * NS_MS + 3 * NS_S) {
			fail("reader %d stopped inside a read-side section for %llu ms "
			     "(stall limit %u ms) and still not expelled", R.so.id,
			     (unsigned long long)((t - R.so.since) / NS_MS), opt.stall_ms);
		}
	}
	if (R.so.expelled && limbo > R.so.max_limbo_stopped)
		R.so.max_limbo_stopped = limbo;
	if (t >= R.so.release_at) {
		/* Expelled: the writer must have reclaimed while it stayed stopped. */
		if (R.so.expelled && STAT(reclaimed) == R.so.reclaimed_at_expel &&
		    STAT(limbo) != 0)
			fail("reader %d expelled %llu ms ago but the writer reclaimed "
			     "nothing since (limbo %llu)", R.so.id,
			     (unsigned long long)((t - R.so.expel_at) / NS_MS),
			     (unsigned long long)STAT(limbo));
		if (R.so.fd >= 0)
			close(R.so.fd);
		R.so.fd = -1;
		if (tt_rnd_below(&R.rng, 4) == 0) {
			/* Dies while stopped (maybe expelled): its slot must be freed. */
			reader_kill(R.so.id);
			reader_spawn(R.so.id);
			R.kills++;
			R.so.killed_stopped++;
			if (!wait_ready(R.so.id, now_ns() + 20 * NS_S))
				fail("replacement reader %d not attached", R.so.id);
			R.ops_at[R.so.id] = now_ns();
			R.so.state = ST_IDLE;
		} else {
			R.so.ops0 = ld_relaxed(&sh->roles[R.so.id].ops);
			R.so.retries0 = ld_relaxed(&sh->roles[R.so.id].retries);
			R.so.late0 = ld_relaxed(&sh->roles[R.so.id].late_expels);
			kill(R.so.pid, SIGCONT);
			R.so.since = now_ns();
			R.so.state = ST_RECOVERING;
		}
		R.next_stop = now_ns() + 200 * NS_MS + tt_rnd_below(&R.rng, 600) * NS_MS;
	}
}

/* A resumed reader must recover, and (contract 5) report -KVIDX_ERETRY if expelled. */
static void recovering_step(void)
{
	struct role *ro = &sh->roles[R.so.id];
	uint64_t ops = ld_relaxed(&ro->ops), retries = ld_relaxed(&ro->retries);
	/* Re-registered: a new claim of its slot, or a slot in another registry (chaos). */
	uint64_t st = ld_relaxed(&ro->slot_claim);
	bool rereg = ld_relaxed(&ro->reg_gen) != R.so.reg || st != R.so.claim0;
	if (ops >= R.so.ops0 + 100 && (!R.so.expelled || rereg)) {
		/*
		 * Contract 5: the call the reader was stopped in reports -KVIDX_ERETRY
		 * on resuming, unless the stop fell after that call's final state
		 * check (it then succeeds, correctly; the reader counts that case).
		 */
		bool late = ld_relaxed(&ro->late_expels) > R.so.late0;
		if (R.so.expelled && retries == R.so.retries0 && !late)
			fail("reader %d was expelled while stopped inside a read-side "
			     "section, and resumed without any call returning "
			     "-KVIDX_ERETRY", R.so.id);
		R.so.resumed_expelled += R.so.expelled;
		R.so.retried_after += R.so.expelled && retries > R.so.retries0;
		R.so.late_after += R.so.expelled && retries == R.so.retries0;
		R.so.state = ST_IDLE;
		R.ops_at[R.so.id] = now_ns();
	} else if (now_ns() - R.so.since > 5 * NS_S) {
		fail("reader %d resumed after %s but did not recover in 5 s: %llu ops, "
		     "claim %llu in registry %llu (was %llu in %llu)", R.so.id,
		     R.so.expelled ? "expulsion" : "a stop",
		     (unsigned long long)(ops - R.so.ops0), (unsigned long long)st,
		     (unsigned long long)ro->reg_gen, (unsigned long long)R.so.claim0,
		     (unsigned long long)R.so.reg);
	}
}

/* Wind down: readers close their handles, then the writer runs its final checks. */
static void wind_down(void)
{
	st_release(&sh->stop_readers, 1);
	for (unsigned i = 0; i < opt.readers; i++) {
		uint64_t dl = now_ns() + 20 * NS_S;
		while (!reap(sh->roles[i].pid, "reader", false)) {
			if (now_ns() > dl)
				fail("reader %u did not exit within 20 s of the stop", i);
			tt_sleep_us(1000);
		}
		sh->roles[i].pid = 0;
	}
	__atomic_store_n(&sh->stop_writer, 1, __ATOMIC_RELEASE);
	for (uint64_t dl = now_ns() + 60 * NS_S; !reap(R.wpid, "writer", false);) {
		if (now_ns() > dl)
			fail("writer did not finish within 60 s of the stop");
		tt_sleep_us(1000);
	}
	nchildren = 0;
}

/* Sums the writers' counters (route_bad apart: stale messages are expected after a takeover)
 * and the readers' into *T (zeroed by the caller). */
static void sum_totals(struct totals *T)
{
	T->tot = sh->final_st;
	T->fs = &T->tot;
#define KV_STAT_SUM(n) T->tot.n += R.g1.n;
	KV_STATS(KV_STAT_SUM)
#undef KV_STAT_SUM
	T->route_bad_all = R.g1.route_bad + sh->final_st.route_bad;
	T->route_stale = R.stale_route_bad + (R.gen > 1 ? sh->final_st.route_bad : 0);
	T->tot.route_bad = R.g1_route_bad + (R.gen == 1 ? sh->final_st.route_bad : 0);
	for (unsigned i = 0; i < opt.readers; i++) {
		const struct role *ro = &sh->roles[i];
		T->lookups += ro->lookups;
		T->scores += ro->scores;
		T->retries += ro->retries;
		T->pods += ro->pod_reads;
		T->torn += ro->torn_names;
		T->spec += ro->spec_seen;
		if (ro->max_retry_run > T->maxrun)
			T->maxrun = ro->max_retry_run;
		T->msgs_ok += ro->msgs_ok;
		T->msgs_dropped += ro->msgs_dropped;
		T->misses += ro->restart_misses;
		T->h_calls += ro->h_calls;
		T->h_checked += ro->h_checked;
		T->h_unknown += ro->h_unknown;
		T->r_ops += ro->ops;
		T->retry_expel += ro->retry_expel;
		T->retry_replace += ro->retry_replace;
		T->retry_trunc += ro->retry_trunc;
		T->attach_fails += ro->attach_fails;
		T->follows += ro->follows;
		T->msgs_refused += ro->msgs_refused;
	}
}

/* Chaos: the member did what it should have, the writer coped, and its counters stay sane. */
static void x_final_checks(const struct totals *T)
{
	const struct chaos *x = &sh->ch;

	if (x->truncations == 0 || x->forged == 0)
		fail("the hostile member made %llu truncations and %llu forgeries: nothing tested",
		     (unsigned long long)x->truncations, (unsigned long long)x->forged);
	if (T->tot.registry_rebuilds == 0)
		fail("%llu truncations, but the writer never replaced the registry",
		     (unsigned long long)x->truncations);
	if (T->follows == 0)
		fail("no reader followed a replaced registry");
	/* Issue 24 fault 4: a head behind its tail must count one ring's worth, not wrap. */
	if (T->route_bad_all >= 1ull << 40)
		fail("route_bad is %llu: it wrapped", (unsigned long long)T->route_bad_all);
	if (T->route_bad_all == 0)
		fail("%llu forgeries, but the writer counted no bad route-ring message",
		     (unsigned long long)x->forged);
	if (x->self_restores)
		fail("%llu truncated registries were not given their size back by the writer within "
		     "2 s", (unsigned long long)x->self_restores);
}

/* The run's end checks: what must have happened, and what must not. */
static void final_checks(const struct totals *T)
{
	if (!sh->writer_final)
		fail("writer did not complete its final checks");
	if (R.kills && T->fs->readers_dead == 0)
		fail("%llu readers killed, but the writer freed no dead reader's slot",
		     (unsigned long long)R.kills);
	/* Chaos: a stop its registry's replacement ended expels through the fresh view, which
	 * readers_expelled (stall expulsions) does not count. */
	if (R.so.in_section_stops > R.so.replaced && T->fs->readers_expelled == 0)
		fail("%llu stops inside a section, but no reader was expelled",
		     (unsigned long long)R.so.in_section_stops);
	if (R.so.in_section_stops == 0)
		fail("no stop landed inside a read-side section in %llu stops: nothing tested",
		     (unsigned long long)R.so.stops);
	/*
	 * A late expulsion (the stop fell after the call's final state check) needs the stop to
	 * land in a window of a few instructions: rare. From outside it looks exactly like an
	 * expelled call that wrongly succeeded, so only its frequency tells them apart.
	 */
	if (R.so.late_after > 1 + R.so.resumed_expelled / 4)
		fail("%llu of %llu readers resumed after an expulsion without -KVIDX_ERETRY: "
		     "expelled calls succeed", (unsigned long long)R.so.late_after,
		     (unsigned long long)R.so.resumed_expelled);
	/* Entries with nothing confirmed may be evicted when the record budget runs short (the
	 * oracle allows predictions to vanish); a confirmed one means the capacity is too small
	 * for the oracle's always-present keys. */
	if (T->fs->evict_confirmed)
		fail("confirmed keys were evicted (%llu; %llu speculative): capacity too small "
		     "for the oracle", (unsigned long long)T->fs->evict_confirmed,
		     (unsigned long long)T->fs->evict_spec);
	if (R.max_limbo >= 100000)
		fail("limbo reached %llu entries", (unsigned long long)R.max_limbo);
	if (T->lookups == 0 || T->scores == 0)
		fail("readers did no work");
	if (T->fs->route_bad && !opt.chaos)
		fail("the writer found %llu malformed route-ring messages (torn or half-published)",
		     (unsigned long long)T->fs->route_bad);
	/* A writer killed between counting a commit and handing it over: one more counted. */
	if (T->fs->route_commits < sh->w_handed || T->fs->route_commits > sh->w_handed + R.restarts)
		fail("stat route_commits %llu, but %llu routes were handed to the writer",
		     (unsigned long long)T->fs->route_commits, (unsigned long long)sh->w_handed);
	if (opt.chaos)
		x_final_checks(T);
	/*
	 * Every accepted message is delivered, or after a takeover dropped as stale (counted in the
	 * successor's route_bad). A producer killed after publishing but before counting: kills.
	 * With chaos, messages lost where the member explains it are not seen at all when they
	 * were a producer's last (the writer_final() check of each last message stays exact).
	 */
	if ((!opt.chaos && sh->w_routes + sh->w_outcomes + T->route_stale < T->msgs_ok) ||
	    sh->w_routes + sh->w_outcomes > T->msgs_ok + R.kills + R.bus_deaths)
		fail("route ring: producers sent %llu messages, the writer received %llu and dropped "
		     "%llu as stale (%llu kills)", (unsigned long long)T->msgs_ok,
		     (unsigned long long)(sh->w_routes + sh->w_outcomes),
		     (unsigned long long)T->route_stale, (unsigned long long)R.kills);

	if (T->h_calls == 0 || T->h_checked == 0)
		fail("the exact oracle checked nothing");
	/* Unknown answers (a ring overwritten during a long call) must stay rare. */
	if (T->h_unknown > T->h_checked / 100 + 100)
		fail("the exact oracle could not decide %llu of %llu answers: deepen the history",
		     (unsigned long long)T->h_unknown,
		     (unsigned long long)(T->h_checked + T->h_unknown));
}

/* The summary line's chaos part. */
static void x_report(char *b, size_t sz, const struct totals *T)
{
	const struct chaos *x = &sh->ch;
#define U(v) ((unsigned long long)(v))
	if (!opt.chaos) {
		snprintf(b, sz, "chaos: off");
		return;
	}
	snprintf(b, sz, "chaos: rounds=%llu truncations=%llu (to 0 %llu, into header/slots %llu, "
		 "rings only %llu; longest unrepaired %llu ms) forged=%llu (heads ahead %llu, behind "
		 "%llu, past tail %llu, wild %llu, tails %llu, garbage %llu, own commits %llu) "
		 "touched_rings=%llu member_reopens=%llu replacements=%llu bus_deaths=%llu "
		 "(stops ended %llu) | readers: follows=%llu retries expel/replace/trunc=%llu/%llu/%llu "
		 "attach_fails=%llu msgs_refused=%llu stops_replaced=%llu | writer: route_bad=%llu "
		 "member_msgs=%llu (foreign keys %llu) stale_dups=%llu mismatched=%llu lost=%llu "
		 "(at a replacement %llu)",
		 U(x->rounds), U(x->truncations), U(x->cut_all), U(x->cut_slots), U(x->cut_rings),
		 U(x->max_open_ns / NS_MS), U(x->forged), U(x->f_ahead), U(x->f_behind), U(x->f_near),
		 U(x->f_wild), U(x->f_tail), U(x->f_garbage), U(x->f_crafted), U(taint_rings()),
		 U(x->reopens), U(T->tot.registry_rebuilds), U(R.bus_deaths), U(R.so.bus_aborts),
		 U(T->follows), U(T->retry_expel), U(T->retry_replace), U(T->retry_trunc),
		 U(T->attach_fails), U(T->msgs_refused), U(R.so.replaced), U(T->route_bad_all),
		 U(x->w_hostile), U(x->w_hostile_keys), U(x->w_dups), U(x->w_mismatch), U(x->w_lost),
		 U(x->w_tail_lost));
#undef U
}

/* The summary line. */
static void report(const struct totals *T)
{
	char restart[256] = "off", chaos[1024];

	if (!opt.no_restart)
		snprintf(restart, sizeof(restart),
			 "%u (%llu deferred), last: dead %llu ms (stale heartbeat seen >= %llu ms), "
			 "replay %llu ms, readers switched in %llu ms, ALWAYS misses before replay "
			 "%llu, %s %llu", R.restarts,
			 (unsigned long long)R.deferred_restarts,
			 (unsigned long long)R.dead_ms, (unsigned long long)R.stale_seen_ms,
			 (unsigned long long)R.replay_ms, (unsigned long long)R.switch_ms,
			 (unsigned long long)T->misses,
			 opt.chaos ? "successors' route_bad (stale or forged)" : "stale messages",
			 (unsigned long long)T->route_stale);
	x_report(chaos, sizeof(chaos), T);
#define U(x) ((unsigned long long)(x))
	printf("stress_index: OK secs=%u readers=%u capacity=%llu records=%llu ppk=%d pods=%d "
	       "stall_ms=%u seed=%llu | ops=%llu answers_checked=%llu (lookups %llu, unknown "
	       "%llu) kills=%llu (readers %llu, writers %u) truncations=%llu forged=%llu "
	       "replacements=%llu bus_deaths=%llu violations=0 | history: logged=%llu "
	       "reconciled=%llu | reads: lookups=%llu scores=%llu pod_reads=%llu "
	       "spec_recs=%llu retries=%llu max_retry_run=%llu torn_names=%llu | kills=%llu "
	       "(mid-register %llu, stopped %llu) dead=%llu | stops=%llu in_section=%llu "
	       "expelled=%llu (seen %llu, max %llu ms, resumed %llu, retried %llu, late %llu) | "
	       "writer: "
	       "ops=%llu store_failed=%llu rec_evictions=%llu clears=%llu pod_readds=%llu "
	       "epochs=%llu reclaimed=%llu max_limbo=%llu max_limbo_stopped=%llu arena=%llu/%llu "
	       "max_tick_gap_ms=%llu max_tick_us=%llu (replacing %llu) max_heartbeat_age_ms=%llu "
	       "final_keys=%llu | "
	       "rings: "
	       "routes=%llu outcomes=%llu dropped=%llu bad=%llu | restart: %s | %s\n",
	       opt.seconds, opt.readers, U(opt.capacity), U(opt.records), PPK, NPODS, opt.stall_ms,
	       U(opt.seed), U(sh->w_ops + T->r_ops), U(T->h_checked), U(T->h_calls),
	       U(T->h_unknown), U(R.kills + R.restarts), U(R.kills), R.restarts,
	       U(sh->ch.truncations), U(sh->ch.forged), U(T->tot.registry_rebuilds), U(R.bus_deaths),
	       U(sh->h_logged),
	       U(sh->h_reconciled), U(T->lookups), U(T->scores), U(T->pods), U(T->spec),
	       U(T->retries), U(T->maxrun), U(T->torn), U(R.kills), U(R.early_kills),
	       U(R.so.killed_stopped), U(T->fs->readers_dead), U(R.so.stops),
	       U(R.so.in_section_stops), U(T->fs->readers_expelled), U(R.so.expels_seen),
	       U(R.so.max_expel_ms), U(R.so.resumed_expelled), U(R.so.retried_after),
	       U(R.so.late_after), U(sh->w_ops), U(T->fs->store_failed), U(T->fs->rec_evictions),
	       U(sh->w_clears), U(sh->w_readds), U(T->fs->epochs), U(T->fs->reclaimed),
	       U(R.max_limbo), U(R.so.max_limbo_stopped), U(R.arena_max), U(R.arena_units),
	       U(sh->w_max_gap_ns / NS_MS), U(sh->w_max_tick_ns / 1000),
	       U(sh->w_max_replace_ns / 1000), U(R.max_hb_age / NS_MS),
	       U(sh->final_walked),
	       U(sh->w_routes), U(sh->w_outcomes), U(T->msgs_dropped), U(T->fs->route_bad),
	       restart, chaos);
#undef U
}

int main(int argc, char **argv)
{
	struct totals T;
	uint64_t now;

	parse_args(argc, argv);
	setvbuf(stdout, NULL, _IOLBF, 0);
	snprintf(idx_name, sizeof(idx_name), "stress-%d", (int)getpid());
	R.rng = opt.seed ^ 0x5eed;
	keys_build();
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED) {
		sh = NULL;
		fail("mmap: %s", strerror(errno));
	}
	h_alloc();
	seqs = mmap(NULL, SEQ_MAP * sizeof(*seqs), PROT_READ | PROT_WRITE,
		    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (seqs == MAP_FAILED)
		fail("mmap: %s", strerror(errno));
	segs = mmap(NULL, (size_t)MAX_ROLES * SEGS * sizeof(*segs), PROT_READ | PROT_WRITE,
		    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (segs == MAP_FAILED)
		fail("mmap: %s", strerror(errno));
	R.ops_seen = calloc(MAX_ROLES, sizeof(uint64_t));
	R.ops_at = calloc(MAX_ROLES, sizeof(uint64_t));
	tt_time_bound("stress_index", opt.seconds + 120, children, &nchildren, indexes);

	run_start();
	while ((now = now_ns()) < R.end || R.so.state != ST_IDLE || (R.phase > 0 && R.phase < 4)) {
		/* Faults stop well before the restart (a stop takes up to 3 stall limits). */
		bool faults = now < R.end && (R.phase == 4 || now + 3 * opt.stall_ms * NS_MS +
								2 * NS_S < R.restart_at);
		if (tt_fail_posted(&sh->fail))
			fail("child reported a failure");
		if (R.wpid && reap(R.wpid, "writer", false))
			fail("writer exited early");

		restart_step(now);
		x_step(now);
		for (unsigned i = 0; i < opt.readers; i++)
			if (reader_reap((int)i)) {
				reader_spawn((int)i); /* died of SIGBUS, explained */
				if (!wait_ready((int)i, now_ns() + 20 * NS_S))
					fail("replacement reader %u not attached after 20 s", i);
				R.ops_at[i] = now_ns();
			}

		uint64_t limbo = watch_writer();
		check_progress(now);
		kill_step(now, faults);
		stop_step(now, faults);
		if (R.so.state == ST_STOPPED)
			stopped_step(limbo);
		else if (R.so.state == ST_RECOVERING)
			recovering_step();
		tt_sleep_us(2000);
	}
	wind_down();
	memset(&T, 0, sizeof(T));
	sum_totals(&T);
	final_checks(&T);
	report(&T);
	free(R.ops_seen);
	free(R.ops_at);
	return 0;
}
