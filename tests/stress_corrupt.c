/*
 * stress_corrupt.c — readers against a corrupt segment (docs/DESIGN.md "Shared memory" and
 * "Concurrency").
 *
 * Readers must treat segment contents as untrusted: a corrupt data segment may give wrong
 * answers or errors, never a crash or a hang. Two parts:
 *
 *   1. Attach checks on a copy of a valid index: a changed layout/ABI stamp in the index
 *      header or the data segment is refused with KVIDX_EVERSION (by readers and by a writer
 *      taking over), bad magic, geometry, offsets, state or seed and truncated objects with
 *      KVIDX_ECORRUPT.
 *   2. Live corruption: a writer fills an index and goes idle; a forked child maps the data
 *      segment read-write and keeps writing random and plausible-but-wrong words into the
 *      slots, the arena, the pod table and the header (restoring a clean snapshot now and then,
 *      and toggling header geometry fields while other readers attach), while reader
 *      processes keep calling every reader entry point. A reader that faults (SIGSEGV,
 *      SIGBUS) or stops making progress (alarm(): SIGALRM) fails the run; so does an answer
 *      outside the API's stated ranges.
 *   3. The writer's side: the same corrupter scribbles into the data segment of a writer
 *      process that keeps storing, removing, speculating, expiring, clearing and ticking. The
 *      writer must neither crash nor hang (it checks what it reads back from its own segment),
 *      and a fresh writer must then take the damaged index over and serve it.
 *
 * Usage: stress_corrupt --seconds N [--readers R] [--seed S]
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
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

#define NPODS 8
#define PPK 4
#define NKEYS 3000
#define MAX_ROLES 32
#define HANG_S 10 /* a reader op batch taking this long is a hang */
#define NS_MS 1000000ull
#define NS_S 1000000000ull

static struct {
	unsigned seconds, readers;
	uint64_t seed;
} opt = { 10, 4, 0 };

static char idx_name[KVIDX_NAME_MAX], v_name[KVIDX_NAME_MAX], c_name[KVIDX_NAME_MAX];
/* What a run that overstays its time bound removes (tt_time_bound). */
static const char *const indexes[] = { idx_name, v_name, c_name, NULL };
static uint64_t keys[NKEYS];

struct role {
	uint64_t ops, opens, open_refused, retries, found;
	int32_t pid;
} __attribute__((aligned(128)));

struct shared {
	uint32_t stop;
	struct tt_failbox fail;
	uint64_t corruptions, restores, toggles, ctl_toggles;
	uint32_t wready;
	uint64_t wops, wticks;
	struct role roles[MAX_ROLES];
};

static struct shared *sh;
static const char *who = "supervisor";
static pid_t children[MAX_ROLES + 2];
static unsigned nchildren;

static void cleanup(void)
{
	tt_kill_children(children, nchildren, true);
	tt_unlink_index(idx_name);
	tt_unlink_index(v_name);
	tt_unlink_index(c_name);
}

static void __attribute__((noreturn, format(printf, 1, 2))) fail(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	tt_fail_report(sh ? &sh->fail : NULL, "stress_corrupt", who, fmt, ap);
	va_end(ap);
	cleanup();
	exit(1);
}

/* Maps shm object name (a "/..." path) read-write; *size gets its size. */
static void *map_rw(const char *path, size_t *size)
{
	const char *what;
	void *p = tt_map_shm(path, true, size, &what);

	if (!p)
		fail("%s(%s): %s", what, path, strerror(errno));
	return p;
}

static void shm_copy(const char *from, const char *to)
{
	char buf[65536];
	int in = shm_open(from, O_RDONLY, 0), out;
	ssize_t n;

	if (in < 0)
		fail("shm_open(%s): %s", from, strerror(errno));
	out = shm_open(to, O_RDWR | O_CREAT | O_TRUNC, 0600);
	if (out < 0)
		fail("shm_open(%s): %s", to, strerror(errno));
	while ((n = read(in, buf, sizeof(buf))) > 0)
		if (write(out, buf, (size_t)n) != n)
			fail("copying %s: %s", to, strerror(errno));
	if (n < 0)
		fail("reading %s: %s", from, strerror(errno));
	close(in);
	close(out);
}

static void shm_truncate(const char *path, off_t len)
{
	int fd = shm_open(path, O_RDWR, 0);

	if (fd < 0 || ftruncate(fd, len) < 0)
		fail("truncating %s: %s", path, strerror(errno));
	close(fd);
}

/* A writer with NPODS pods and keys[0..n) stored, speculated and partly removed. */
static struct kvidx *fill_index(const char *name, uint64_t capacity, size_t n, uint64_t *rng)
{
	struct kvidx_writer_opts o = {
		.name = name,
		.geo = { .capacity = capacity, .records = 4 * capacity, .pods_per_key = PPK,
			 .max_pods = NPODS,
			 .max_readers = 64 },
	};
	struct kvidx *w = kvidx_writer_open(&o);

	if (!w)
		fail("kvidx_writer_open(%s): %s", name, kvidx_strerror(-errno));
	for (unsigned p = 0; p < NPODS; p++) {
		char pn[KVIDX_POD_NAME_MAX];
		snprintf(pn, sizeof(pn), "10.0.0.%u:8000", p);
		if (kvidx_pod_add(w, pn, "model") != (int)p)
			fail("kvidx_pod_add(%s) failed", pn);
	}
	uint64_t now = kvidx_now_ns();
	for (size_t i = 0; i < n; i++) {
		unsigned np = 1 + tt_rnd_below(rng, PPK + 1);
		for (unsigned j = 0; j < np; j++) {
			int pod = (int)tt_rnd_below(rng, NPODS);
			int rc = tt_rnd_below(rng, 3) ?
					 kvidx_store(w, pod, &keys[i], 1, 1u << tt_rnd_below(rng, 3),
						     now) :
					 kvidx_speculate(w, pod, &keys[i], 1, now, KVIDX_MAX_TTL_MS);
			if (rc < 0 && rc != -KVIDX_EFULL)
				fail("filling %s: %s", name, kvidx_strerror(rc));
		}
		if (tt_rnd_below(rng, 8) == 0)
			kvidx_remove(w, (int)tt_rnd_below(rng, NPODS), &keys[i], 1, 0);
	}
	kvidx_clear_pod(w, NPODS - 1); /* stale records the sweep has not removed yet */
	kvidx_writer_tick(w, kvidx_now_ns());
	return w;
}

/* ==== part 1: attach checks on a copy ======================================================= */

static int try_open(const char *name)
{
	struct kvidx_reader *r = kvidx_reader_open(name);

	if (!r)
		return -errno;
	kvidx_reader_close(r);
	return 0;
}

static void expect_open(const char *what, int want)
{
	int rc = try_open(c_name);

	if (rc != want)
		fail("%s: kvidx_reader_open = %d (%s), expected %d (%s)", what, rc,
		     kvidx_strerror(rc), want, want ? kvidx_strerror(want) : "success");
}

/*
 * Cuts shm object path (a copy of the pristine object orig) to len bytes, expects opening
 * the copy to be refused as corrupt ("SEG truncated to LEN bytes"), and restores it from orig.
 */
static void expect_truncated(const char *seg, const char *path, const char *orig, off_t len)
{
	char what[64];

	snprintf(what, sizeof(what), "%s truncated to %lld bytes", seg, (long long)len);
	shm_truncate(path, len);
	expect_open(what, -KVIDX_ECORRUPT);
	shm_copy(orig, path);
}

struct patch {
	const char *what;
	int seg; /* 0 registry, 1 data */
	size_t off;
	uint64_t xor_mask, set; /* set used when xor_mask is 0 */
	int want;
};

/* Header words attach_checks() changes one at a time, and what an open must then return. */
static const struct patch patches[] = {
	{ "data stamp: layout version", 1, offsetof(struct kvidx_data_hdr, dh_stamp),
	  1ull << 48, 0, -KVIDX_EVERSION },
	{ "data stamp: pointer size", 1, offsetof(struct kvidx_data_hdr, dh_stamp),
	  1ull << 43, 0, -KVIDX_EVERSION },
	{ "data stamp: pod struct size", 1, offsetof(struct kvidx_data_hdr, dh_stamp),
	  1ull << 20, 0, -KVIDX_EVERSION },
	{ "index stamp: layout version", 0, offsetof(struct kvidx_idx_hdr, ih_stamp),
	  1ull << 49, 0, -KVIDX_EVERSION },
	{ "index magic of layout 2 (a registry)", 0, offsetof(struct kvidx_idx_hdr, ih_magic),
	  0, KV_CTL_MAGIC, -KVIDX_EVERSION },
	{ "index magic", 0, offsetof(struct kvidx_idx_hdr, ih_magic), 1 << 9, 0,
	  -KVIDX_ECORRUPT },
	{ "index magic 0 (being created)", 0, offsetof(struct kvidx_idx_hdr, ih_magic),
	  0, 0, -ENOENT },
	{ "index max_readers 0", 0, offsetof(struct kvidx_idx_hdr, ih_max_readers), 0,
	  0, -KVIDX_ECORRUPT },
	{ "index registry size", 0, offsetof(struct kvidx_idx_hdr, ih_reg_size), 64, 0,
	  -KVIDX_ECORRUPT },
	{ "index epoch above the limit", 0, offsetof(struct kvidx_idx_hdr, ih_epoch), 0,
	  UINT64_MAX, -KVIDX_ECORRUPT },
	{ "index generation absent", 0, offsetof(struct kvidx_idx_hdr, ih_generation),
	  0, 9, -ENOENT },
	{ "index names a registry that does not exist", 0,
	  offsetof(struct kvidx_idx_hdr, ih_reg_gen), 0, 7, -ENOENT },
	{ "index ring entries not a power of two", 0,
	  offsetof(struct kvidx_idx_hdr, ih_ring_entries) - 4, 1ull << 32, 0,
	  -KVIDX_ECORRUPT },
	{ "registry stamp: layout version", 2, offsetof(struct kvidx_ctl_hdr, ch_stamp),
	  1ull << 49, 0, -KVIDX_ECORRUPT },
	{ "registry magic", 2, offsetof(struct kvidx_ctl_hdr, ch_magic), 1 << 9, 0,
	  -KVIDX_ECORRUPT },
	{ "registry max_readers 0", 2, offsetof(struct kvidx_ctl_hdr, ch_max_readers), 0,
	  0, -KVIDX_ECORRUPT },
	{ "registry size", 2, offsetof(struct kvidx_ctl_hdr, ch_size), 64, 0,
	  -KVIDX_ECORRUPT },
	{ "registry generation", 2, offsetof(struct kvidx_ctl_hdr, ch_reg_gen), 1, 0,
	  -KVIDX_ECORRUPT },
	{ "registry ring entries not a power of two", 2,
	  offsetof(struct kvidx_ctl_hdr, ch_ring_entries), 1, 0, -KVIDX_ECORRUPT },
	{ "registry ring offset", 2, offsetof(struct kvidx_ctl_hdr, ch_ring_off), 64, 0,
	  -KVIDX_ECORRUPT },
	{ "data nslots", 1, offsetof(struct kvidx_data_hdr, dh_nslots), 1, 0,
	  -KVIDX_ECORRUPT },
	{ "data arena units", 1, offsetof(struct kvidx_data_hdr, dh_arena_units), 1 << 12,
	  0, -KVIDX_ECORRUPT },
	{ "data capacity", 1, offsetof(struct kvidx_data_hdr, dh_capacity), 1ull << 40, 0,
	  -KVIDX_ECORRUPT },
	{ "data pods_per_key 65", 1, offsetof(struct kvidx_data_hdr, dh_pods_per_key), 0,
	  65 | ((uint64_t)NPODS << 32), -KVIDX_ECORRUPT },
	{ "data max_probe", 1, offsetof(struct kvidx_data_hdr, dh_max_probe) - 4, 1ull << 40,
	  0, -KVIDX_ECORRUPT },
	{ "data slots offset", 1, offsetof(struct kvidx_data_hdr, dh_slots_off), 4096, 0,
	  -KVIDX_ECORRUPT },
	{ "data arena offset", 1, offsetof(struct kvidx_data_hdr, dh_arena_off), 1ull << 44,
	  0, -KVIDX_ECORRUPT },
	{ "data histogram offset", 1, offsetof(struct kvidx_data_hdr, dh_hist_off), 4096, 0,
	  -KVIDX_ECORRUPT },
	{ "data size beyond the file", 1, offsetof(struct kvidx_data_hdr, dh_size), 0,
	  1ull << 34, -KVIDX_ECORRUPT },
	{ "data generation", 1, offsetof(struct kvidx_data_hdr, dh_generation), 3, 0,
	  -KVIDX_ECORRUPT },
	{ "data state BUILDING", 1, offsetof(struct kvidx_data_hdr, dh_state), 0,
	  KV_DATA_BUILDING, -KVIDX_ECORRUPT },
	{ "data state RETIRED", 1, offsetof(struct kvidx_data_hdr, dh_state), 0,
	  KV_DATA_RETIRED, -KVIDX_ECORRUPT },
};

static void attach_checks(uint64_t *rng)
{
	char vc[KV_SHM_PATH_MAX], vd[KV_SHM_PATH_MAX], cc[KV_SHM_PATH_MAX], cd[KV_SHM_PATH_MAX];
	size_t csize, dsize;
	struct kvidx *w = fill_index(v_name, 1024, 500, rng);
	char vr[KV_SHM_PATH_MAX], cr[KV_SHM_PATH_MAX];
	kv_ctl_shm_name(vc, v_name);
	kv_data_shm_name(vd, v_name, 1);
	kv_reg_shm_name(vr, v_name, 1);
	kv_ctl_shm_name(cc, c_name);
	kv_data_shm_name(cd, c_name, 1);
	kv_reg_shm_name(cr, c_name, 1);
	shm_copy(vc, cc);
	shm_copy(vd, cd);
	shm_copy(vr, cr);

	/* The copy is a valid index: it attaches and answers. */
	struct kvidx_reader *r = kvidx_reader_open(c_name);
	struct kvidx_rec rec[PPK];
	int found = 0;
	if (!r)
		fail("opening a copy of a valid index: %s", kvidx_strerror(-errno));
	for (int i = 0; i < 500; i++)
		found += kvidx_lookup(r, keys[i], rec, PPK) > 0;
	kvidx_reader_close(r);
	if (found < 400)
		fail("the copy answers only %d of 500 stored keys", found);

	size_t rsize;
	uint8_t *ctl = map_rw(cc, &csize), *data = map_rw(cd, &dsize), *reg = map_rw(cr, &rsize);
	for (size_t i = 0; i < sizeof(patches) / sizeof(patches[0]); i++) {
		const struct patch *p = &patches[i];
		uint8_t *at = (p->seg == 2 ? reg : p->seg ? data : ctl) + p->off;
		uint64_t old;
		memcpy(&old, at, 8);
		uint64_t v = p->xor_mask ? old ^ p->xor_mask : p->set;
		memcpy(at, &v, 8);
		expect_open(p->what, p->want);
		memcpy(at, &old, 8);
		expect_open("restored", 0);
	}
	/* A seed without its NUL. */
	{
		struct kvidx_data_hdr *h = (void *)data;
		char seed[sizeof(h->dh_seed)];
		memcpy(seed, h->dh_seed, sizeof(seed));
		memset(h->dh_seed, 'x', sizeof(seed));
		expect_open("data seed without NUL", -KVIDX_ECORRUPT);
		memcpy(h->dh_seed, seed, sizeof(seed));
	}
	/* A writer taking over an index of another layout is refused the same way. */
	{
		struct kvidx_idx_hdr *h = (void *)ctl;
		struct kvidx_writer_opts o = { .name = c_name };
		h->ih_stamp ^= 1ull << 48;
		errno = 0;
		struct kvidx *w2 = kvidx_writer_open(&o);
		if (w2 || errno != KVIDX_EVERSION)
			fail("a writer taking over an index with another layout version: %p, "
			     "errno %d, expected KVIDX_EVERSION", (void *)w2, errno);
		h->ih_stamp ^= 1ull << 48;
	}
	expect_open("restored", 0);
	munmap(reg, rsize);
	munmap(ctl, csize);
	munmap(data, dsize);

	/* Truncated segments. */
	const off_t cuts[] = { (off_t)dsize / 2, (off_t)dsize - 4096, 4096, 200, 0 };
	for (size_t i = 0; i < sizeof(cuts) / sizeof(cuts[0]); i++)
		expect_truncated("data segment", cd, vd, cuts[i]);
	const off_t ccuts[] = { (off_t)csize - 64, 100, 0 };
	for (size_t i = 0; i < sizeof(ccuts) / sizeof(ccuts[0]); i++) {
		expect_truncated("index header", cc, vc, ccuts[i]);
		expect_truncated("registry", cr, vr, (off_t)(rsize - 64 * (i + 1) * (i + 1)));
	}
	expect_open("restored", 0);
	tt_unlink_index(c_name);
	kvidx_writer_close(w, true);
}

/* ==== part 2: live corruption =============================================================== */

struct geom {
	uint64_t nslots, units, probe;
	uint64_t slots_off, arena_off, pods_off;
	uint32_t max_pods;
};

/* For 20 ms, one geometry word of the data header (or the registry's reader count) flips
 * between its value and a bad one, as fast as it can. */
static void toggle_header(struct kvidx_data_hdr *h, struct kvidx_ctl_hdr *ch, uint64_t *rng)
{
	/* ch_max_readers and ch_slots_off share a word: both, or either. */
	uint64_t *f[] = { &h->dh_nslots, &h->dh_slots_off, &h->dh_arena_off, &h->dh_arena_units,
			  (uint64_t *)&ch->ch_max_readers };
	uint64_t *fld = f[tt_rnd_below(rng, 5)], good = *fld;
	uint64_t bad = good ^ (1ull << (fld == f[4] ? 44 + tt_rnd_below(rng, 20) :
					   32 + tt_rnd_below(rng, 24)));
	uint64_t end = kvidx_now_ns() + 20 * NS_MS;

	while (kvidx_now_ns() < end)
		for (int i = 0; i < 1000; i++)
			__atomic_store_n(fld, i & 1 ? bad : good, __ATOMIC_RELAXED);
	__atomic_store_n(fld, good, __ATOMIC_RELAXED);
	sh->toggles++;
	sh->ctl_toggles += fld == f[4];
}

static void __attribute__((noreturn)) corrupter_main(const struct geom *g)
{
	char path[KV_SHM_PATH_MAX];
	size_t size;
	uint64_t rng = opt.seed ^ 0xc0ffee;

	who = "corrupter";
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	kv_data_shm_name(path, idx_name, 1);
	uint8_t *base = map_rw(path, &size);
	uint8_t *snap = malloc(size);
	if (!snap)
		fail("out of memory");
	memcpy(snap, base, size);
	size_t csize;
	kv_reg_shm_name(path, idx_name, 1);
	struct kvidx_ctl_hdr *ch = map_rw(path, &csize);
	uint64_t *slots = (uint64_t *)(base + g->slots_off);
	uint64_t *arena = (uint64_t *)(base + g->arena_off);
	uint64_t nsl = g->nslots + g->probe;
	struct kvidx_data_hdr *h = (void *)base;

	for (uint64_t round = 0; !__atomic_load_n(&sh->stop, __ATOMIC_ACQUIRE); round++) {
		/* Now and then, back to a clean table, so both sparse and dense damage occur. */
		if (round % 16 == 0) {
			memcpy(base, snap, size);
			sh->restores++;
		}
		/* Header geometry toggled between valid and not, while readers attach. */
		if (round % 16 == 8) {
			toggle_header(h, ch, &rng);
			continue;
		}
		unsigned burst = 1u << tt_rnd_below(&rng, 10);
		bool hdr_hit = false;
		for (unsigned b = 0; b < burst; b++) {
			uint32_t where = tt_rnd_below(&rng, 100);
			uint64_t v = tt_rnd(&rng), *p;
			if (where < 45) {
				p = &slots[tt_rnd_below(&rng, (uint32_t)nsl)];
				uint64_t old = __atomic_load_n(p, __ATOMIC_RELAXED);
				switch (tt_rnd_below(&rng, 6)) {
				case 0: break; /* random word */
				case 1: /* right fingerprint, index at or past the arena's end */
					v = (old & ~0xffffffffull) |
					    (uint32_t)(g->units - tt_rnd_below(&rng, 3) +
						       (tt_rnd(&rng) & 1 ? 0 : tt_rnd_below(&rng, 1u << 20)));
					break;
				case 2: /* right fingerprint, index into the middle of an entry */
					v = old + 1 + tt_rnd_below(&rng, 4);
					break;
				case 3: v = tt_rnd(&rng) & 1 ? KV_SLOT_EMPTY : KV_SLOT_TOMB; break;
				case 4: v = slots[tt_rnd_below(&rng, (uint32_t)nsl)]; break;
				default: v = old ^ (1ull << tt_rnd_below(&rng, 64)); break;
				}
			} else if (where < 85) {
				uint64_t u = tt_rnd_below(&rng, (uint32_t)g->units);
				p = &arena[2 * u + (tt_rnd(&rng) & 1)];
				switch (tt_rnd_below(&rng, 5)) {
				case 0: break;
				case 1: /* meta: npods and cap up to 255 */
					p = &arena[2 * u + 1];
					v = KV_META(tt_rnd_below(&rng, 256), tt_rnd_below(&rng, 256));
					break;
				case 2: /* a record word: any pod, generation, flags, TTL */
					v = KV_REC_W0(tt_rnd_below(&rng, 65536), tt_rnd_below(&rng, 65536),
						      tt_rnd_below(&rng, 256), tt_rnd_below(&rng, 256),
						      tt_rnd_below(&rng, 65536));
					break;
				case 3: v = keys[tt_rnd_below(&rng, NKEYS)]; break;
				default: v = *p ^ (1ull << tt_rnd_below(&rng, 64)); break;
				}
			} else if (where < 97) {
				uint8_t *pod = base + g->pods_off +
					       tt_rnd_below(&rng, g->max_pods) * sizeof(struct kvidx_pod);
				if (tt_rnd(&rng) & 1) {
					/* Names and models with no NUL anywhere. */
					memset(pod + offsetof(struct kvidx_pod, pd_name), 'A' + b % 26,
					       2 * KVIDX_POD_NAME_MAX);
					continue;
				}
				p = (uint64_t *)(pod + 8 * tt_rnd_below(&rng, 2));
			} else {
				p = (uint64_t *)base + tt_rnd_below(&rng, 512 / 8);
				hdr_hit = true;
			}
			__atomic_store_n(p, v, __ATOMIC_RELAXED);
		}
		sh->corruptions += burst;
		/* Mostly a short-lived header hit, so that attaching keeps being tried. */
		if (hdr_hit && tt_rnd_below(&rng, 4)) {
			tt_sleep_us(tt_rnd_below(&rng, 500));
			memcpy(base, snap, 512);
		}
		tt_sleep_us(tt_rnd_below(&rng, 2000));
	}
	memcpy(base, snap, size); /* leave the writer a header it can close */
	_exit(0);
}

/* ==== part 3: the writer's side =============================================================== */

/* A writer that keeps changing a table the corrupter scribbles into: it must neither crash
 * nor hang (it reads its own segment as untrusted: table.c, rule 6). */
static void __attribute__((noreturn)) writer_main(void)
{
	uint64_t rng = opt.seed ^ 0x77777;

	who = "writer";
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	struct kvidx *w = fill_index(idx_name, 4096, NKEYS, &rng);
	__atomic_store_n(&sh->wready, 1, __ATOMIC_RELEASE);
	uint64_t last_tick = 0;
	while (!__atomic_load_n(&sh->stop, __ATOMIC_ACQUIRE)) {
		uint64_t now = kvidx_now_ns();
		int pod = (int)tt_rnd_below(&rng, NPODS);
		uint64_t k = keys[tt_rnd_below(&rng, NKEYS)];
		switch (tt_rnd_below(&rng, 8)) {
		case 0: case 1: case 2:
			kvidx_store(w, pod, &k, 1, 1u << tt_rnd_below(&rng, 3), now);
			break;
		case 3: case 4:
			kvidx_remove(w, pod, &k, 1, 0);
			break;
		case 5:
			kvidx_speculate(w, pod, &k, 1, now, 1 + tt_rnd_below(&rng, 50));
			break;
		case 6:
			kvidx_expire(w, now, 256);
			break;
		default:
			if (tt_rnd_below(&rng, 64) == 0)
				kvidx_clear_pod(w, pod);
			else if (tt_rnd_below(&rng, 256) == 0 && kvidx_pod_remove(w, pod) == 0)
				kvidx_pod_add(w, "10.0.0.99:8000", NULL);
			break;
		}
		__atomic_add_fetch(&sh->wops, 1, __ATOMIC_RELAXED);
		if (now - last_tick >= NS_MS) {
			kvidx_writer_tick(w, now);
			last_tick = now;
			__atomic_add_fetch(&sh->wticks, 1, __ATOMIC_RELAXED);
		}
	}
	kvidx_writer_close(w, false);
	_exit(0);
}

static void check_lookup(int n, size_t max, const struct kvidx_rec *out)
{
	if (n == -KVIDX_ERETRY)
		return;
	if (n < 0 || (size_t)n > max)
		fail("kvidx_lookup = %d (max %zu) on a corrupt segment", n, max);
	for (int i = 0; i < n; i++)
		if (out[i].pod >= NPODS)
			fail("kvidx_lookup returned pod %u >= max_pods", out[i].pod);
}

struct walk_ctx {
	uint64_t keys;
};

static void walk_fn(void *arg, uint64_t key, const struct kvidx_rec *recs, int n)
{
	struct walk_ctx *wc = arg;

	(void)key;
	wc->keys++;
	if (n < 0 || n > PPK)
		fail("kv_reader_walk callback got %d records", n);
	for (int i = 0; i < n; i++)
		if (recs[i].pod >= NPODS)
			fail("kv_reader_walk: pod %u >= max_pods", recs[i].pod);
}

/* One reader op; every result must lie within the API's stated range. */
static void reader_op(struct kvidx_reader *r, struct role *me, uint64_t *rng)
{
	struct kvidx_rec out[PPK + 4];
	struct kvidx_score sc[NPODS];
	uint64_t pk[128];
	int cand[NPODS];
	char name[KVIDX_POD_NAME_MAX], model[KVIDX_POD_NAME_MAX];
	uint32_t sel = tt_rnd_below(rng, 100);

	if (sel < 50) {
		uint64_t k = tt_rnd(rng) & 1 ? keys[tt_rnd_below(rng, NKEYS)] : tt_rnd(rng);
		size_t max = 1 + tt_rnd_below(rng, PPK + 4);
		int n = kvidx_lookup(r, k, out, max);
		check_lookup(n, max, out);
		me->found += n > 0;
		me->retries += n == -KVIDX_ERETRY;
	} else if (sel < 80) {
		size_t n = 1 + tt_rnd_below(rng, 128), max = 1 + tt_rnd_below(rng, NPODS), ncand = 0;
		uint32_t j = tt_rnd_below(rng, NKEYS - 128);
		for (size_t i = 0; i < n; i++)
			pk[i] = tt_rnd_below(rng, 16) ? keys[j + i] : tt_rnd(rng);
		if (tt_rnd(rng) & 1) {
			ncand = 1 + tt_rnd_below(rng, NPODS);
			for (size_t i = 0; i < ncand; i++)
				cand[i] = (int)tt_rnd_below(rng, NPODS + 4) - 2; /* some invalid */
		}
		int nr = kvidx_score(r, pk, n, ncand ? cand : NULL, ncand, NULL, sc, max);
		if (nr == -KVIDX_ERETRY) {
			me->retries++;
		} else if (nr < 0 || (size_t)nr > max) {
			fail("kvidx_score = %d (max %zu) on a corrupt segment", nr, max);
		} else {
			for (int i = 0; i < nr; i++)
				if (sc[i].pod < 0 || sc[i].pod >= NPODS || sc[i].blocks > n ||
				    sc[i].spec_blocks > sc[i].blocks ||
				    (i && sc[i].pod <= sc[i - 1].pod))
					fail("kvidx_score row %d: pod %d blocks %u spec %u (n %zu)",
					     i, sc[i].pod, sc[i].blocks, sc[i].spec_blocks, n);
		}
	} else if (sel < 90) {
		int p = (int)tt_rnd_below(rng, NPODS + 4) - 2;
		int rc = kvidx_reader_pod(r, p, name, tt_rnd(rng) & 1 ? model : NULL);
		if (rc == 0 && (strnlen(name, sizeof(name)) >= sizeof(name) || p < 0 || p >= NPODS))
			fail("kvidx_reader_pod(%d): unterminated name or pod out of range", p);
		if (rc != 0 && rc != -KVIDX_ENOPOD && rc != -KVIDX_ERETRY)
			fail("kvidx_reader_pod(%d) = %d", p, rc);
	} else if (sel < 94) {
		snprintf(name, sizeof(name), "10.0.0.%u:8000", tt_rnd_below(rng, NPODS + 2));
		int rc = kvidx_reader_pod_find(r, name);
		if (rc != -KVIDX_ENOPOD && (rc < 0 || rc >= NPODS))
			fail("kvidx_reader_pod_find(%s) = %d", name, rc);
	} else if (sel < 97) {
		struct kvidx_info in;
		int rc = kvidx_reader_info(r, &in);
		if (rc != 0 && rc != -KVIDX_ERETRY)
			fail("kvidx_reader_info = %d", rc);
		if (rc == 0 && memchr(in.seed, 0, sizeof(in.seed)) == NULL)
			fail("kvidx_reader_info: unterminated seed");
	} else {
		const struct kv_view *v = kv_reader_view(r);
		struct walk_ctx wc = { 0 };
		uint64_t from = tt_rnd_below(rng, (uint32_t)(v->nslots + v->max_probe + 8));
		int64_t rc = kv_reader_walk(r, from, 1 + tt_rnd_below(rng, 4096), kvidx_now_ns(),
					    walk_fn, &wc);
		if (rc != -KVIDX_ERETRY && (rc < 0 || (uint64_t)rc != wc.keys))
			fail("kv_reader_walk = %lld, %llu callbacks", (long long)rc,
			     (unsigned long long)wc.keys);
	}
	me->ops++;
}

static void __attribute__((noreturn)) reader_main(int id)
{
	static char whobuf[32];
	struct role *me = &sh->roles[id];
	uint64_t rng = opt.seed ^ tt_splitmix64((uint64_t)id << 20 | (uint64_t)getpid());
	bool reopener = id % 2 == 1; /* half the readers keep attaching during corruption */
	struct kvidx_reader *r = NULL;

	snprintf(whobuf, sizeof(whobuf), "reader %d", id);
	who = whobuf;
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	signal(SIGALRM, SIG_DFL); /* a hang kills us with SIGALRM; the supervisor reports it */
	while (!__atomic_load_n(&sh->stop, __ATOMIC_ACQUIRE)) {
		alarm(HANG_S);
		if (!r) {
			r = kvidx_reader_open(idx_name);
			me->opens++;
			if (!r) {
				/* A header corrupted at this moment: refused, which is right. */
				if (errno != KVIDX_ECORRUPT && errno != KVIDX_EVERSION)
					fail("kvidx_reader_open: %s", kvidx_strerror(-errno));
				me->open_refused++;
				continue;
			}
		}
		for (int i = 0; i < (reopener ? 8 : 256); i++)
			reader_op(r, me, &rng);
		if (reopener) {
			kvidx_reader_close(r);
			r = NULL;
		}
	}
	alarm(0);
	kvidx_reader_close(r);
	_exit(0);
}

static pid_t spawn_reader(int id)
{
	pid_t pid = fork();

	if (pid < 0)
		fail("fork: %s", strerror(errno));
	if (pid == 0)
		reader_main(id);
	sh->roles[id].pid = pid;
	children[nchildren++] = pid;
	return pid;
}

static bool reap(pid_t pid, const char *what, bool block)
{
	char why[512];
	int rc = tt_reap(pid, what, block, &sh->fail, HANG_S, why, sizeof(why));

	if (rc < 0)
		fail("%s", why);
	return rc > 0;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: stress_corrupt --seconds N [--readers R] [--seed S]\n"
		"Checks that readers refuse a segment of another layout (KVIDX_EVERSION) or a\n"
		"corrupt or truncated one (KVIDX_ECORRUPT), then corrupts a live data segment for\n"
		"N seconds while R reader processes (default 4) use every reader entry point: none\n"
		"may crash, hang or answer out of range. Exit 0 with a summary line, 1 on failure.\n");
}

/* Options into opt; -1 to go on, else the exit status. */
static int parse_args(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "seconds", required_argument, 0, 's' }, { "readers", required_argument, 0, 'r' },
		{ "seed", required_argument, 0, 'S' },    { "help", no_argument, 0, 'h' },
		{ 0, 0, 0, 0 },
	};
	bool seeded = false;
	int ch;

	while ((ch = getopt_long(argc, argv, "s:r:S:h", lo, NULL)) != -1) {
		char *end = NULL;
		unsigned long long v = optarg ? strtoull(optarg, &end, 0) : 0;
		if (optarg && (*optarg == '\0' || *end != '\0')) {
			fprintf(stderr, "stress_corrupt: bad number '%s'\n", optarg);
			return 2;
		}
		switch (ch) {
		case 's': opt.seconds = (unsigned)v; break;
		case 'r': opt.readers = (unsigned)v; break;
		case 'S': opt.seed = v; seeded = true; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind != argc || opt.seconds < 1 || opt.readers < 1 || opt.readers > MAX_ROLES) {
		usage(stderr);
		return 2;
	}
	if (!seeded)
		opt.seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
	return -1;
}

/* Part 2, live corruption under readers: the writer stays idle (it trusts its own segment)
 * but keeps the index. Returns the data segment's geometry. */
static struct geom reader_side(uint64_t *rng)
{
	struct kvidx *w = fill_index(idx_name, 4096, NKEYS, rng);
	struct kvidx_reader *probe = kvidx_reader_open(idx_name);
	if (!probe)
		fail("kvidx_reader_open: %s", kvidx_strerror(-errno));
	const struct kv_view *v = kv_reader_view(probe);
	struct geom g = { v->nslots, v->units, v->max_probe, v->hdr->dh_slots_off,
			  v->hdr->dh_arena_off, v->hdr->dh_pods_off, v->max_pods };
	kvidx_reader_close(probe);

	for (unsigned i = 0; i < opt.readers; i++)
		spawn_reader((int)i);
	pid_t cpid = fork();
	if (cpid < 0)
		fail("fork: %s", strerror(errno));
	if (cpid == 0)
		corrupter_main(&g);
	children[nchildren++] = cpid;

	uint64_t end = kvidx_now_ns() + opt.seconds * NS_S;
	while (kvidx_now_ns() < end) {
		if (tt_fail_posted(&sh->fail))
			fail("child reported a failure");
		for (unsigned i = 0; i < opt.readers; i++)
			if (reap(sh->roles[i].pid, "reader", false))
				fail("reader %u exited early", i);
		if (reap(cpid, "corrupter", false))
			fail("corrupter exited early");
		tt_sleep_us(10000);
	}
	__atomic_store_n(&sh->stop, 1, __ATOMIC_RELEASE);
	for (unsigned i = 0; i < opt.readers; i++)
		reap(sh->roles[i].pid, "reader", true);
	reap(cpid, "corrupter", true);
	nchildren = 0;
	kvidx_writer_close(w, true);
	tt_unlink_index(idx_name);
	return g;
}

/* A writer takes over the scribbled index, stores and is read back. */
static void takeover_check(void)
{
	struct kvidx_writer_opts o = { .name = idx_name };
	struct kvidx *w3 = kvidx_writer_open(&o);
	if (!w3)
		fail("takeover of the scribbled index: %s", kvidx_strerror(-errno));
	int pod = kvidx_pod_add(w3, "10.0.0.1:8000", NULL);
	if (pod < 0 || kvidx_store(w3, pod, keys, 100, KVIDX_TIER_GPU, kvidx_now_ns()) != 100)
		fail("the successor cannot store");
	struct kvidx_reader *r3 = kvidx_reader_open(idx_name);
	struct kvidx_rec rec[PPK];
	int got = 0;
	for (int i = 0; r3 && i < 100; i++)
		got += kvidx_lookup(r3, keys[i], rec, PPK) == 1;
	if (got != 100)
		fail("after the takeover a reader finds %d of 100 keys", got);
	kvidx_reader_close(r3);
	kvidx_writer_close(w3, true);
}

/* Part 3: the writer's side under corruption (of g's layout), then a takeover of the damaged
 * index. Returns the corruptions made meanwhile. */
static uint64_t writer_side(const struct geom *g)
{
	__atomic_store_n(&sh->stop, 0, __ATOMIC_RELEASE);
	pid_t wpid = fork(), cpid;
	if (wpid < 0)
		fail("fork: %s", strerror(errno));
	if (wpid == 0)
		writer_main();
	children[nchildren++] = wpid;
	uint64_t dl = kvidx_now_ns() + 30 * NS_S;
	while (!__atomic_load_n(&sh->wready, __ATOMIC_ACQUIRE)) {
		if (reap(wpid, "writer", false) || kvidx_now_ns() > dl)
			fail("the writer did not start");
		tt_sleep_us(1000);
	}
	cpid = fork();
	if (cpid < 0)
		fail("fork: %s", strerror(errno));
	if (cpid == 0)
		corrupter_main(g);
	children[nchildren++] = cpid;
	uint64_t c0 = sh->corruptions;
	uint64_t end = kvidx_now_ns() + (opt.seconds / 2 + 1) * NS_S;
	while (kvidx_now_ns() < end) {
		if (tt_fail_posted(&sh->fail))
			fail("child reported a failure");
		if (reap(wpid, "writer", false))
			fail("the writer exited early");
		if (reap(cpid, "corrupter", false))
			fail("corrupter exited early");
		tt_sleep_us(10000);
	}
	__atomic_store_n(&sh->stop, 1, __ATOMIC_RELEASE);
	reap(wpid, "writer", true);
	reap(cpid, "corrupter", true);
	nchildren = 0;
	takeover_check();
	tt_unlink_index(idx_name);
	return sh->corruptions - c0;
}

/* The summary line; fails if nothing ran. */
static void report(uint64_t wcorrupt)
{
	uint64_t ops = 0, opens = 0, refused = 0, retries = 0, found = 0;

	for (unsigned i = 0; i < opt.readers; i++) {
		ops += sh->roles[i].ops;
		opens += sh->roles[i].opens;
		refused += sh->roles[i].open_refused;
		retries += sh->roles[i].retries;
		found += sh->roles[i].found;
	}
	if (!ops || !sh->corruptions)
		fail("nothing ran: %llu reader ops, %llu corruptions", (unsigned long long)ops,
		     (unsigned long long)sh->corruptions);
	printf("stress_corrupt: OK secs=%u readers=%u seed=%llu | attach checks passed | "
	       "reader_ops=%llu found=%llu retries=%llu opens=%llu refused=%llu | "
	       "corruptions=%llu restores=%llu header_toggles=%llu (registry %llu) | "
	       "writer side: ops=%llu ticks=%llu corruptions=%llu, takeover ok\n",
	       opt.seconds, opt.readers, (unsigned long long)opt.seed, (unsigned long long)ops,
	       (unsigned long long)found, (unsigned long long)retries, (unsigned long long)opens,
	       (unsigned long long)refused, (unsigned long long)sh->corruptions,
	       (unsigned long long)sh->restores, (unsigned long long)sh->toggles,
	       (unsigned long long)sh->ctl_toggles, (unsigned long long)sh->wops,
	       (unsigned long long)sh->wticks, (unsigned long long)wcorrupt);
}

int main(int argc, char **argv)
{
	int rc = parse_args(argc, argv);

	if (rc >= 0)
		return rc;
	setvbuf(stdout, NULL, _IOLBF, 0);
	snprintf(idx_name, sizeof(idx_name), "corrupt-%d", (int)getpid());
	snprintf(v_name, sizeof(v_name), "corruptv-%d", (int)getpid());
	snprintf(c_name, sizeof(c_name), "corruptc-%d", (int)getpid());
	uint64_t rng = opt.seed;
	for (int i = 0; i < NKEYS; i++)
		keys[i] = tt_splitmix64(opt.seed * 0x2545f4914f6cdd1dull + (uint64_t)i);
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED) {
		sh = NULL;
		fail("mmap: %s", strerror(errno));
	}
	tt_time_bound("stress_corrupt", opt.seconds + 120, children, &nchildren, indexes);

	attach_checks(&rng);

	struct geom g = reader_side(&rng);
	uint64_t wcorrupt = writer_side(&g);

	report(wcorrupt);
	return 0;
}
