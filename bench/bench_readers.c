/*
 * bench_readers — workload 2 of the suite: reader processes scoring prompts while the writer
 * applies block events at a fixed rate.
 *
 * The table holds N keys (default 8 Mi) as chains of 512 blocks, each chain held whole by one
 * of 64 pods. R reader processes (1, 2, 4; forked once, each with its own kvidx reader handle
 * and its own page tables) score random whole chains (512-block full hits) back to back. The
 * parent process is the writer: it drives kvidx_store()/kvidx_remove() directly (no ZeroMQ),
 * paced at 0, 100k or 1M block events per second in batches of 64 (sleeping until each
 * batch is due), and calls kvidx_writer_tick() every millisecond as ingestd does. In steady
 * state the events alternate a store of 64 keys and the removal of the oldest stored batch;
 * half of the batches add (then remove) a second pod on 64 keys the readers score, so the
 * entries under the readers are copied and retired continuously, the other half insert and
 * delete fresh keys. Counters and latency samples travel through a shared anonymous mmap.
 *
 * The same runs are repeated on the naive design: an open-addressing table in MAP_SHARED
 * memory under a PTHREAD_PROCESS_SHARED rwlock (default, reader-preferring attributes),
 * readers read-lock once per prompt, the writer write-locks once per batch of 64 events.
 *
 * Per configuration: a short warm-up, then a timed window; reader throughput is keys scored
 * per second per reader process, latency is the time of one prompt, the writer's achieved
 * rate is reported next to the asked one. On a machine with C cores, R readers + 1 writer >
 * C share cores: the target (>= 85% of idle throughput at 1M events/s) is judged only where
 * R + 1 <= C.
 */
#define PROG "bench_readers"
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "benchlib.h"
#include "fixture.h"
#include "host.h"
#include "inspect.h"
#include "naive.h"
#include "rand.h"
#include "report.h"
#include "score.h"
#include "stats.h"
#include "duration.h"

const char bl_prog[] = PROG;

#define BLOCKS 512u
#define BATCH 64u
#define FIFO_D 512u /* store batches in flight before the oldest is removed */
#define MAXR 4
#define LATCAP (1u << 20)

static const unsigned reader_counts[] = { 1, 2, 4 };
static const uint64_t rates[] = { 0, 100000, 1000000 };
enum { D_KVIDX, D_NAIVE, D_NAIVE_RP, D_N };
static const char *const d_names[D_N] = { "kvidx_score", "rwlock table", "rwlock table (rd-pref)" };

struct opts {
	uint64_t keys;
	double seconds, warm;
	uint32_t pods, rounds;
	bool no_naive, no_pin;
	struct bl_args arg;
};
static struct opts o;

struct rstat {
	uint64_t prompts, nlat, wrong;
	uint64_t cpu_ns, wall_ns, nivcsw; /* the reader's CPU time and involuntary switches */
	uint8_t pad[64 - 48];
};

struct ctl {
	uint32_t cmd_seq, design, nreaders, measuring, stop, quit;
	uint32_t ready[MAXR], done_seq[MAXR];
	uint8_t pad[64];
	struct rstat st[MAXR];
};

struct world {
	uint64_t nchains;
	uint64_t *keys;       /* nchains x BLOCKS */
	uint16_t *primary;    /* pod holding chain c whole */
	char name[KVIDX_NAME_MAX];
	struct kvidx *w;
	struct naive_tab *naive;
	struct ctl *ctl;
	float *lat;           /* MAXR x LATCAP, microseconds */
	pid_t kids[MAXR];
	/* The writer's event stream. */
	struct pend {
		uint8_t fresh;
		uint16_t pod;
		uint64_t chain, off;
	} fifo[FIFO_D];
	uint64_t fresh_keys[FIFO_D][BATCH];
	uint32_t fhead, fcount;
	uint64_t rng;
	uint64_t events;
	uint64_t last_tick;
	uint64_t deadline; /* the rwlock writer gives up a batch at this time */
};

static void usage(FILE *f)
{
	fputs("Usage: " PROG " [--quick] [--keys N] [--duration D] [--pods P] [--no-naive] "
	      "[--json FILE]\n"
	      "Workload 2 of the kvidx benchmark suite: 1, 2 and 4 reader processes score 512-block\n"
	      "prompts while the writer applies 0, 100k and 1M block events per second (driven\n"
	      "through kvidx_store/kvidx_remove, paced, batches of 64); the same on a process-\n"
	      "shared rwlock table. Prints table rows ('| ...') and one line starting with '"
	      PROG " '.\n"
	      "\n"
	      "  --quick        1 Mi keys, 300ms per configuration\n"
	      "  --keys N       keys in the table (default 8Mi; k/m suffixes)\n"
	      "  --duration D   timed time per configuration, a duration with a unit (default\n"
	      "                 3s, in 3 interleaved rounds; --quick: 300ms in one)\n"
	      "  --pods P       pods, 2..4096 (default 64)\n"
	      "  --no-naive     skip the rwlock-table baseline\n"
	      "  --no-pin       no CPU pinning (by default the writer has the last CPU to itself\n"
	      "                 and readers the others when R + 1 <= cores)\n"
	      BL_HELP_TAIL,
	      f);
}

static void parse_opts(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "keys", required_argument, NULL, 'n' },   { "duration", required_argument, NULL, 's' },
		{ "pods", required_argument, NULL, 'p' },   { "no-naive", no_argument, NULL, 'N' },
		{ "no-pin", no_argument, NULL, 'P' },       BL_OPTIONS_TAIL,
	};
	uint64_t keys = 0;
	double secs = 0;
	int c;

	o = (struct opts){ .pods = 64 };
	while ((c = bl_getopt(argc, argv, lo, usage, &o.arg)) != -1) {
		switch (c) {
		case 'n': keys = parse_num("--keys", optarg, 64 * BLOCKS, 1ull << 30); break;
		case 's': {
			int rc = tc_parse_duration(optarg, &secs); /* the tools' one grammar */
			if (rc < 0) {
				fprintf(stderr, PROG ": bad --duration '%s': %s\n", optarg,
					tc_duration_error(rc));
				exit(2);
			}
			if (!(secs > 0 && secs < 3600)) {
				fprintf(stderr, PROG ": bad --duration '%s': expected more than 0 and "
					"less than 60m\n", optarg);
				exit(2);
			}
			break;
		}
		case 'p': o.pods = (uint32_t)parse_num("--pods", optarg, 2, 4096); break;
		case 'N': o.no_naive = true; break;
		case 'P': o.no_pin = true; break;
		}
	}
	o.keys = fit_shm_keys(keys ? keys : o.arg.quick ? 1ull << 20 : 8ull << 20, 80, 1);
	o.seconds = secs ? secs : o.arg.quick ? 0.3 : 3.0;
	o.warm = o.arg.quick ? 0.05 : 0.2;
	o.rounds = o.arg.quick ? 1 : 3;
}

static uint32_t ald(const uint32_t *p)
{
	return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

static void ast(uint32_t *p, uint32_t v)
{
	__atomic_store_n(p, v, __ATOMIC_RELEASE);
}

/* ---- setup ---- */

static void fill(struct world *W)
{
	uint64_t s = 0x2545f4914f6cdd1dull, t0 = now_ns();
	uint64_t nkeys;

	W->nchains = o.keys / BLOCKS;
	nkeys = W->nchains * BLOCKS;
	W->keys = xcalloc(nkeys, sizeof(uint64_t));
	W->primary = xcalloc(W->nchains, sizeof(uint16_t));
	for (uint64_t i = 0; i < nkeys; i++)
		W->keys[i] = rand_key(&s);
	for (uint64_t c = 0; c < W->nchains; c++)
		W->primary[c] = (uint16_t)below(xorshift64(&s), o.pods);

	snprintf(W->name, sizeof(W->name), "bench-readers-%d", (int)getpid());
	guard_name(0, W->name);
	struct kvidx_writer_opts wo = {
		.name = W->name,
		.geo = { .capacity = nkeys + FIFO_D * BATCH, .records = 2 * nkeys + 2 * FIFO_D * BATCH,
			 .pods_per_key = 10, .max_pods = o.pods, .max_readers = 64 },
		.group = (gid_t)-1,
	};
	W->w = writer_with_pods(&wo, o.pods, true);
	for (uint64_t c = 0; c < W->nchains; c++) {
		uint64_t now = kvidx_now_ns();
		int rc = kvidx_store(W->w, W->primary[c], W->keys + c * BLOCKS, BLOCKS,
				     KVIDX_TIER_GPU, now);
		if (rc < 0)
			bdie("kvidx_store: %s", kvidx_strerror(rc));
		if (c % 64 == 63)
			kvidx_writer_tick(W->w, now);
	}
	kvidx_writer_tick(W->w, kvidx_now_ns());
	double kv_s = (double)(now_ns() - t0) / 1e9;
	t0 = now_ns();
	if (!o.no_naive) {
		W->naive = naive_new(nkeys + FIFO_D * BATCH, true);
		for (uint64_t c = 0; c < W->nchains; c++)
			if (!naive_apply(W->naive, W->keys + c * BLOCKS, BLOCKS, W->primary[c], true))
				bdie("naive table full");
	}
	printf("filled %" PRIu64 " keys (%" PRIu64 " chains of %u) in %.2f s (kvidx) + %.2f s "
	       "(rwlock table)\n", nkeys, W->nchains, BLOCKS, kv_s,
	       (double)(now_ns() - t0) / 1e9);
	W->rng = 0x9e3779b97f4a7c15ull;
}

/* ---- readers ---- */

static uint64_t cpu_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t nivcsw(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (uint64_t)ru.ru_nivcsw;
}

/* With a CPU to spare for the writer (R + 1 <= cores), reader i runs on CPU i % (cores - 1)
 * and the writer alone on the last CPU, as a router host would give ingestd its own core;
 * otherwise the readers may run anywhere, the writer's CPU included. */
static void pin_reader(unsigned id, unsigned nr)
{
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	cpu_set_t set;

	if (o.no_pin || ncpu < 2)
		return;
	CPU_ZERO(&set);
	if ((long)nr + 1 <= ncpu)
		CPU_SET((int)(id % (unsigned)(ncpu - 1)), &set);
	else
		for (long c = 0; c < ncpu; c++)
			CPU_SET((int)c, &set);
	sched_setaffinity(0, sizeof(set), &set);
}

static void reader_main(struct world *W, unsigned id)
{
	struct ctl *C = W->ctl;
	struct kvidx_reader *r = kvidx_reader_open(W->name);
	struct rows rw;
	uint64_t s = 0x51afd7ed558ccdull * (id + 1);
	uint32_t seen = 0;

	if (!r)
		bdie("reader %u: kvidx_reader_open: %s", id, kvidx_strerror(-errno));
	rows_init(&rw, o.pods);
	/* Touch the whole mapping once, as a long-running router has. */
	const struct kv_view *v = kv_reader_view(r);
	touch_pages(v->base, v->size);
	ast(&C->ready[id], 1);
	for (;;) {
		uint32_t seq;
		while ((seq = ald(&C->cmd_seq)) == seen && !ald(&C->quit))
			sleep_ns(200000);
		if (ald(&C->quit))
			break;
		seen = seq;
		if (id >= ald(&C->nreaders)) {
			ast(&C->done_seq[id], seen);
			continue;
		}
		uint32_t design = ald(&C->design);
		pin_reader(id, ald(&C->nreaders));
		uint64_t prompts = 0, nlat = 0, wrong = 0, cpu0 = 0, wall0 = 0, csw0 = 0;
		bool started = false;
		float *lat = W->lat + (size_t)id * LATCAP;
		while (!ald(&C->stop)) {
			uint64_t c = below(xorshift64(&s), W->nchains);
			const uint64_t *k = W->keys + c * BLOCKS;
			uint64_t t0 = now_ns();
			uint32_t got = design == D_KVIDX ? score_kvidx(r, k, BLOCKS) :
							   score_naive(W->naive, &rw, k, BLOCKS);
			uint64_t dt = now_ns() - t0;
			if (ald(&C->measuring)) {
				if (!started) {
					started = true;
					cpu0 = cpu_now();
					wall0 = now_ns();
					csw0 = nivcsw();
				}
				prompts++;
				wrong += got != BLOCKS;
				if (nlat < LATCAP)
					lat[nlat++] = (float)((double)dt / 1e3);
			}
		}
		C->st[id].cpu_ns = started ? cpu_now() - cpu0 : 0;
		C->st[id].wall_ns = started ? now_ns() - wall0 : 0;
		C->st[id].nivcsw = started ? nivcsw() - csw0 : 0;
		C->st[id].prompts = prompts;
		C->st[id].nlat = nlat;
		C->st[id].wrong = wrong;
		ast(&C->done_seq[id], seen);
	}
	kvidx_reader_close(r);
	_exit(0);
}

/* ---- the writer ---- */

static void batch_keys(struct world *W, const struct pend *p, uint32_t slot, const uint64_t **k)
{
	*k = p->fresh ? W->fresh_keys[slot] : W->keys + p->chain * BLOCKS + p->off;
}

/* The rwlock writer's lock, given up at the end of the window (a starved writer). */
static bool naive_wrlock(struct world *W)
{
	struct timespec ts = { .tv_sec = (time_t)(W->deadline / 1000000000ull),
			       .tv_nsec = (long)(W->deadline % 1000000000ull) };

	return pthread_rwlock_clockwrlock(&W->naive->lock, CLOCK_MONOTONIC, &ts) == 0;
}

/* Applies the batch in FIFO slot `slot` to design d: stores it (store) or removes it. The
 * rwlock writer waits for its lock as long as it takes if `wait`, else until the deadline:
 * returns false if it was starved until then (nothing applied). */
static bool apply_slot(struct world *W, int d, uint32_t slot, bool store, bool wait)
{
	const struct pend *p = &W->fifo[slot];
	const uint64_t *k;

	batch_keys(W, p, slot, &k);
	if (d == D_KVIDX) {
		int rc = store ? kvidx_store(W->w, p->pod, k, BATCH, KVIDX_TIER_GPU, kvidx_now_ns()) :
				 kvidx_remove(W->w, p->pod, k, BATCH, 0);
		if (rc < 0)
			bdie("kvidx_%s: %s", store ? "store" : "remove", kvidx_strerror(rc));
		return true;
	}
	if (wait)
		pthread_rwlock_wrlock(&W->naive->lock);
	else if (!naive_wrlock(W))
		return false;
	naive_apply(W->naive, k, BATCH, p->pod, store);
	pthread_rwlock_unlock(&W->naive->lock);
	return true;
}

/* Applies one batch of BATCH events to design d: a store if the FIFO has room, else the
 * removal of its oldest batch. Returns false if the rwlock writer was starved until the
 * deadline (nothing applied). */
static bool apply_batch(struct world *W, int d)
{
	bool store = W->fcount < FIFO_D;
	uint32_t slot = store ? (W->fhead + W->fcount) % FIFO_D : W->fhead;

	if (store) {
		struct pend *p = &W->fifo[slot];
		p->fresh = (uint8_t)(xorshift64(&W->rng) & 1);
		p->chain = below(xorshift64(&W->rng), W->nchains);
		p->off = below(xorshift64(&W->rng), BLOCKS - BATCH + 1);
		do
			p->pod = (uint16_t)below(xorshift64(&W->rng), o.pods);
		while (p->pod == W->primary[p->chain]);
		if (p->fresh)
			for (uint32_t i = 0; i < BATCH; i++)
				W->fresh_keys[slot][i] = rand_key(&W->rng);
	}
	if (!apply_slot(W, d, slot, store, false))
		return false;
	if (store) {
		W->fcount++;
	} else {
		W->fhead = (W->fhead + 1) % FIFO_D;
		W->fcount--;
	}
	W->events += BATCH;
	return true;
}

/* Removes every batch still in the FIFO from design d, so the next run starts from the
 * table as filled. */
static void drain_fifo(struct world *W, int d)
{
	while (W->fcount) {
		apply_slot(W, d, W->fhead, false, true);
		W->fhead = (W->fhead + 1) % FIFO_D;
		W->fcount--;
	}
	kvidx_writer_tick(W->w, kvidx_now_ns());
}

/* Runs the writer until `until`: batches due at base + i * BATCH / rate, ticks every ms. */
static void writer_run(struct world *W, int d, uint64_t rate, uint64_t base, uint64_t *nb,
		       uint64_t until)
{
	W->deadline = until;
	for (;;) {
		uint64_t now = now_ns();
		if (now >= until)
			return;
		if (now - W->last_tick >= 1000000) {
			kvidx_writer_tick(W->w, kvidx_now_ns());
			W->last_tick = now;
		}
		uint64_t next_tick = W->last_tick + 1000000, due = until;
		if (rate) {
			uint64_t t = base + (uint64_t)((double)(*nb) * BATCH * 1e9 / (double)rate);
			if (t <= now) {
				if (apply_batch(W, d))
					(*nb)++;
				continue;
			}
			due = t;
		}
		if (next_tick < due)
			due = next_tick;
		if (until < due)
			due = until;
		sleep_until_ns(due);
	}
}

/* ---- one configuration ---- */

struct result {
	double thr;        /* keys/s per reader (mean over readers) */
	double cpu_share;  /* CPU time the readers got over their wall time (mean) */
	double csw_per_s;  /* involuntary context switches per second per reader */
	double cpu_thr;    /* keys per reader CPU-second: throughput net of lost CPU time */
	double lat50, lat99, lat999;
	double wrate;      /* writer's achieved events/s */
	uint64_t wrong;
};

/* What the rounds of one configuration add up to. */
struct acc {
	double secs, keys, cpu_s, wall_s, csw, events;
	uint64_t wrong;
	struct samples lat;
};

#define LAT_KEEP 100000 /* latency samples kept per reader per slot (evenly strided) */

/* One slot: configuration (d, nr, rate) for o.seconds / rounds, added to a. */
static void run_slot(struct world *W, int d, unsigned nr, uint64_t rate, double secs_slot,
		     struct acc *a)
{
	struct ctl *C = W->ctl;
	uint64_t nb = 0;

	if (d != D_KVIDX)
		naive_lock_init(W->naive, d == D_NAIVE); /* readers are idle: nobody holds it */
	ast(&C->design, (uint32_t)d);
	ast(&C->nreaders, nr);
	ast(&C->measuring, 0);
	ast(&C->stop, 0);
	uint32_t seq = ald(&C->cmd_seq) + 1;
	ast(&C->cmd_seq, seq);
	uint64_t base = now_ns();
	writer_run(W, d, rate, base, &nb, base + (uint64_t)(o.warm * 1e9));
	uint64_t e0 = W->events, t0 = now_ns();
	ast(&C->measuring, 1);
	writer_run(W, d, rate, base, &nb, t0 + (uint64_t)(secs_slot * 1e9));
	ast(&C->measuring, 0);
	uint64_t t1 = now_ns(), e1 = W->events;
	ast(&C->stop, 1);
	for (unsigned i = 0; i < MAXR; i++)
		while (ald(&C->done_seq[i]) != seq)
			sleep_ns(100000);
	drain_fifo(W, d);
	a->secs += (double)(t1 - t0) / 1e9;
	a->events += (double)(e1 - e0);
	for (unsigned i = 0; i < nr; i++) {
		const struct rstat *st = &C->st[i];
		a->keys += (double)st->prompts * BLOCKS;
		a->cpu_s += (double)st->cpu_ns / 1e9;
		a->wall_s += (double)st->wall_ns / 1e9;
		a->csw += (double)st->nivcsw;
		a->wrong += st->wrong;
		const float *lat = W->lat + (size_t)i * LATCAP;
		uint64_t stride = st->nlat / LAT_KEEP + 1;
		for (uint64_t j = 0; j < st->nlat; j += stride)
			samples_add(&a->lat, lat[j]);
	}
}

static struct result finish(struct acc *a, unsigned nr)
{
	struct result res = { 0 };

	res.thr = a->keys / a->secs / nr;
	res.cpu_thr = a->cpu_s > 0 ? a->keys / a->cpu_s : NAN;
	res.cpu_share = a->wall_s > 0 ? a->cpu_s / a->wall_s : NAN;
	res.csw_per_s = a->wall_s > 0 ? a->csw / a->wall_s : NAN;
	res.lat50 = samples_pct(&a->lat, 50);
	res.lat99 = samples_pct(&a->lat, 99);
	res.lat999 = samples_pct(&a->lat, 99.9);
	res.wrate = a->events / a->secs;
	res.wrong = a->wrong;
	samples_free(&a->lat);
	return res;
}

/* The two rows (throughput, latency) of design d at nr readers and writer rate rate: x its
 * result, k kvidx's in the same configuration, idle its own with the writer idle. */
static void emit_rows(const struct world *W, const struct result *x, const struct result *k,
		      const struct result *idle, int d, unsigned nr, uint64_t rate, long cores)
{
	for (int kind = 0; kind < 2; kind++) {
		struct row r = { .workload = "2 readers",
				 .target_state = T_NONE };
		snprintf(r.name, sizeof(r.name), "%s %s", d_names[d],
			 kind == 0 ? "thr" : "latency");
		par_u(&r.par, "readers", nr);
		par_u(&r.par, "writer_rate", rate);
		par_f(&r.par, "writer_achieved", x->wrate);
		par_u(&r.par, "keys", W->nchains * BLOCKS);
		par_u(&r.par, "blocks", BLOCKS);
		par_u(&r.par, "batch", BATCH);
		par_s(&r.par, "writer", "kvidx_store/remove-paced");
		par_u(&r.par, "rounds", o.rounds);
		par_s(&r.par, "pinning", o.no_pin || cores < 2 ? "none" :
		      (long)nr + 1 <= cores ? "writer-own-cpu" :
		      "writer-last-cpu,readers-any");
		if (d != D_KVIDX)
			par_s(&r.par, "lock", d == D_NAIVE ? "prefer-writer" :
			      "glibc-default(prefer-reader)");
		if (kind == 0) {
			r.unit = "Mkeys/s/rdr";
			r.higher_better = true;
			r.median = x->thr / 1e6;
			r.p99 = NAN;
			r.ratio = x->thr / k->thr;
			double frac = x->thr / idle->thr;
			double cfrac = x->cpu_thr / idle->cpu_thr;
			row_extra(&r, "vs_idle", frac);
			row_extra(&r, "keys_per_reader_cpu_s", x->cpu_thr);
			row_extra(&r, "vs_idle_per_cpu_s", cfrac);
			row_extra(&r, "reader_cpu_share", x->cpu_share);
			row_extra(&r, "decisions_per_s_per_reader",
				  x->thr / BLOCKS);
			snprintf(r.note, sizeof(r.note), "%.0f%% of idle; per "
				 "reader CPU-second %.1f M (%.0f%% of idle); "
				 "%.3g decisions/s/reader; readers on CPU %.0f%%,"
				 " %.0f preemptions/s%s%s", 100 * frac,
				 x->cpu_thr / 1e6, 100 * cfrac,
				 x->thr / BLOCKS, 100 * x->cpu_share,
				 x->csw_per_s, x->wrate < 0.9 * (double)rate ?
				 "; WRITER BELOW ITS RATE" : "",
				 x->wrong ? "; WRONG ANSWERS" : "");
			if (d == D_KVIDX && rate == 1000000) {
				snprintf(r.target, sizeof(r.target),
					 ">= 85%% of idle");
				/* Met only if both the wall-clock and the
				 * per-CPU-second throughput hold up. */
				if ((long)nr + 1 > cores)
					r.target_state = T_NA;
				else
					r.target_state = frac >= 0.85 &&
						cfrac >= 0.85 ? T_MET : T_MISSED;
				if (r.target_state == T_NA)
					snprintf(r.target, sizeof(r.target),
						 ">=85%% idle; R+1>%ld cores",
						 cores);
			}
		} else {
			r.unit = "us/prompt";
			r.median = x->lat50;
			r.p99 = x->lat99;
			r.ratio = x->lat50 / k->lat50;
			snprintf(r.note, sizeof(r.note), "p99.9 %.1f us", x->lat999);
			row_extra(&r, "p999", x->lat999);
		}
		if (d == D_KVIDX)
			r.ratio = 1.0;
		row_emit(&r);
	}
}

int main(int argc, char **argv)
{
	struct world *W;
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	uint64_t t_start = now_ns();

	parse_opts(argc, argv);
	bench_start(o.arg.json);
	prctl(PR_SET_TIMERSLACK, 1000ul); /* 1 us: the writer sleeps until each batch is due */
	W = xcalloc(1, sizeof(*W));
	printf("%s: %" PRIu64 " keys, prompts of %u blocks, readers 1/2/4, writer 0/100k/1M "
	       "events/s in batches of %u, %.1f s per configuration, %ld cores, load %.2f\n", PROG,
	       o.keys, BLOCKS, BATCH, o.seconds, cores, loadavg1());
	fill(W);
	if (!o.no_pin && cores >= 2)
		pin_cpu((int)cores - 1); /* the writer; readers set their own */
	W->ctl = shared_alloc(sizeof(struct ctl));
	W->lat = shared_alloc((size_t)MAXR * LATCAP * sizeof(float));
	fflush(stdout);
	for (unsigned i = 0; i < MAXR; i++) {
		pid_t pid = fork();
		if (pid < 0)
			bdie("fork: %s", strerror(errno));
		if (pid == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			reader_main(W, i);
		}
		W->kids[i] = pid;
		guard_pid(pid);
	}
	for (unsigned i = 0; i < MAXR; i++)
		while (!ald(&W->ctl->ready[i])) {
			kvidx_writer_tick(W->w, kvidx_now_ns());
			sleep_ns(1000000);
		}

	struct result res[3][3][D_N];
	static struct acc acc[3][3][D_N];
	int nd = o.no_naive ? 1 : D_N;
	memset(res, 0, sizeof(res));
	/* Rounds interleave the configurations of one reader count, so that a burst of
	 * outside load on this shared machine hits idle and loaded runs alike. */
	for (int ri = 0; ri < 3; ri++) {
		for (uint32_t round = 0; round < o.rounds; round++)
			for (int qi = 0; qi < 3; qi++)
				for (int d = 0; d < nd; d++) {
					if (d == D_NAIVE_RP && rates[qi] != 1000000)
						continue;
					run_slot(W, d, reader_counts[ri], rates[qi],
						 o.seconds / o.rounds, &acc[ri][qi][d]);
				}
		for (int qi = 0; qi < 3; qi++)
			for (int d = 0; d < nd; d++) {
				if (d == D_NAIVE_RP && rates[qi] != 1000000)
					continue;
				res[ri][qi][d] = finish(&acc[ri][qi][d], reader_counts[ri]);
				const struct result *x = &res[ri][qi][d];
				printf("  %-26s readers=%u rate=%-7" PRIu64 " thr %.1f Mkeys/s/reader, "
				       "prompt p50 %.1f us p99 %.1f us, writer %.0f ev/s, readers on "
				       "CPU %.0f%%, %.0f preemptions/s\n", d_names[d],
				       reader_counts[ri], rates[qi], x->thr / 1e6, x->lat50, x->lat99,
				       x->wrate, 100 * x->cpu_share, x->csw_per_s);
			}
	}

	/* Rows: per configuration a throughput row and a latency row per design. */
	for (int ri = 0; ri < 3; ri++)
		for (int qi = 0; qi < 3; qi++)
			for (int d = 0; d < nd; d++) {
				if (d == D_NAIVE_RP && rates[qi] != 1000000)
					continue;
				emit_rows(W, &res[ri][qi][d], &res[ri][qi][D_KVIDX],
					  &res[ri][0][d == D_NAIVE_RP ? D_NAIVE : d], d, reader_counts[ri],
					  rates[qi], cores);
			}

	struct ctl *C = W->ctl;
	ast(&C->quit, 1);
	for (unsigned i = 0; i < MAXR; i++) {
		waitpid(W->kids[i], NULL, 0);
		guard_unpid(W->kids[i]);
	}
	const struct result *a = &res[0][0][D_KVIDX], *b = &res[0][2][D_KVIDX];
	printf("%s keys=%" PRIu64 " seconds=%.1f idle_mkeys_per_reader=%.1f "
	       "w1m_mkeys_per_reader=%.1f w1m_vs_idle=%.3f w1m_writer_achieved=%.0f cores=%ld "
	       "naive=%d elapsed=%.0f load=%.2f\n", PROG, W->nchains * BLOCKS, o.seconds,
	       a->thr / 1e6, b->thr / 1e6, b->thr / a->thr, b->wrate, cores, !o.no_naive,
	       (double)(now_ns() - t_start) / 1e9, loadavg1());
	kvidx_writer_close(W->w, true);
	guard_name(0, NULL);
	naive_free(W->naive);
	free(W->keys);
	free(W->primary);
	free(W);
	return 0;
}
