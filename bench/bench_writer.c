/*
 * bench_writer — workload 3 of the suite: how fast the writer side goes.
 *
 * a) End to end: kvidx-fakepod publishes a vLLM KV-event workload over ZeroMQ (msgpack
 *    batches of 64 events, as fast as it can: --rate 0) to kvidx-ingestd, which decodes,
 *    computes request keys (cbor-fnv, llm-d's default), maps engine keys and applies each
 *    batch to the index. ingestd is pinned to one CPU and fakepod to another (when the
 *    machine has two). The rate is block events (blocks stored + block records removed, from
 *    the pod's counters in the segment, which ingestd bumps after applying a batch) per second
 *    from the first visible block to the moment the last event is applied; a fresh ingestd
 *    and index per run.
 * b) Raw table operations in this process, no wire: a table of N keys (default 1 Mi) churns
 *    in batches of 64 operations, inserting fresh keys and deleting the oldest inserted batch
 *    (FIFO, steady state: half inserts, half deletes), on
 *      kvidx            kvidx_store / kvidx_remove of 64 keys per call, kvidx_writer_tick
 *                       every millisecond (RCU reclamation included)
 *      kvidx update     the same on keys that exist: a second pod added, then removed (each
 *                       a copy-on-write of the entry)
 *      rculfhash        malloc + cds_lfht_add / lookup + cds_lfht_del + call_rcu(free)
 *      ck_hs            SPMC set: malloc + ck_hs_put / ck_hs_remove + free (no safe memory
 *                       reclamation: cheaper than a real concurrent-reader setup would be)
 *      rwlock table     the naive shared table, write-locked once per batch
 *      redis            llm-d's Add/Evict: one pipeline of 64 HSET (or HDEL) per batch
 *    Per batch the time is taken; rows give ns per operation (median, p99 over batches) and
 *    the overall rate.
 */
#define PROG "bench_writer"
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "benchlib.h"
#include "ckhs.h"
#include "fixture.h"
#include "host.h"
#include "inspect.h"
#include "lfht.h"
#include "naive.h"
#include "rand.h"
#include "redis_index.h"
#include "redis_server.h"
#include "report.h"
#include "stats.h"

const char bl_prog[] = PROG;

#define BATCH 64u
#define FIFO_D 1024u

struct opts {
	uint64_t keys, ops, redis_ops, events;
	uint32_t runs, pods;
	bool no_redis, no_ingest;
	const char *bin;
	struct bl_args arg;
};
static struct opts o;

static void usage(FILE *f)
{
	fputs("Usage: " PROG " [--quick] [--keys N] [--ops N] [--events N] [--runs R] [--bin DIR]\n"
	      "       [--no-redis] [--no-ingest] [--json FILE]\n"
	      "Workload 3 of the kvidx benchmark suite: kvidx-fakepod -> ZeroMQ + msgpack ->\n"
	      "kvidx-ingestd -> visible in the index, in block events per second; and raw table\n"
	      "operations per second (kvidx, rculfhash, ck_hs, a process-shared rwlock table,\n"
	      "Redis with llm-d's layout). Prints table rows ('| ...') and one line starting\n"
	      "with '" PROG " '.\n"
	      "\n"
	      "  --quick        1 run of 25k events; 256Ki keys, 256Ki ops\n"
	      "  --keys N       keys in the table for raw operations (default 1Mi)\n"
	      "  --ops N        raw operations per structure (default 2Mi; Redis a quarter)\n"
	      "  --events N     vLLM events fakepod publishes per run (default 150000)\n"
	      "  --runs R       end-to-end runs, the median is reported (default 3)\n"
	      "  --bin DIR      where kvidx-ingestd and kvidx-fakepod are (default: this\n"
	      "                 program's directory)\n"
	      "  --no-redis     skip the Redis baseline\n"
	      "  --no-ingest    skip the end-to-end run\n"
	      BL_HELP_TAIL,
	      f);
}

static void parse_opts(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "keys", required_argument, NULL, 'n' },   { "ops", required_argument, NULL, 'o' },
		{ "events", required_argument, NULL, 'e' }, { "runs", required_argument, NULL, 'r' },
		{ "bin", required_argument, NULL, 'b' },    { "no-redis", no_argument, NULL, 'R' },
		{ "no-ingest", no_argument, NULL, 'I' },    BL_OPTIONS_TAIL,
	};
	uint64_t keys = 0, ops = 0, events = 0, runs = 0;
	int c;

	o = (struct opts){ .pods = 64 };
	while ((c = bl_getopt(argc, argv, lo, usage, &o.arg)) != -1) {
		switch (c) {
		case 'n': keys = parse_num("--keys", optarg, 4096, 1ull << 30); break;
		case 'o': ops = parse_num("--ops", optarg, 4 * BATCH, 1ull << 32); break;
		case 'e': events = parse_num("--events", optarg, 64, 1ull << 32); break;
		case 'r': runs = parse_num("--runs", optarg, 1, 50); break;
		case 'b': o.bin = optarg; break;
		case 'R': o.no_redis = true; break;
		case 'I': o.no_ingest = true; break;
		}
	}
	o.keys = keys ? keys : o.arg.quick ? 256ull << 10 : 1ull << 20;
	o.ops = ops ? ops : o.arg.quick ? 256ull << 10 : 2ull << 20;
	o.redis_ops = o.ops / 4;
	o.events = events ? events : o.arg.quick ? 25000 : 150000;
	o.runs = (uint32_t)(runs ? runs : o.arg.quick ? 1 : 3);
}

/* ---- a) end to end ---- */

static char g_bindir[4096];
static char g_sum_ingest[400] = "ingest=skipped", g_sum_raw[400];

struct ingest_res {
	double rate, cpu_rate, cores, ev_rate, secs;
	uint64_t blocks, events, gaps, clears;
	bool complete;
};

static struct ingest_res ingest_run(int run, int ncpu)
{
	struct ingest_res res = { 0 };
	char name[KVIDX_NAME_MAX], ingestd[4200], fakepod[4200], ep[64], podspec[96], cnt[32];
	char errf[2][128];
	int port = free_port();

	if (port < 0)
		bdie("no free port");
	snprintf(name, sizeof(name), "bench-ingest-%d-%d", (int)getpid(), run);
	guard_name(1, name);
	snprintf(ingestd, sizeof(ingestd), "%s/kvidx-ingestd", g_bindir);
	snprintf(fakepod, sizeof(fakepod), "%s/kvidx-fakepod", g_bindir);
	snprintf(ep, sizeof(ep), "tcp://127.0.0.1:%d", port);
	snprintf(podspec, sizeof(podspec), "%s,name=127.0.0.1:%d", ep, port);
	snprintf(cnt, sizeof(cnt), "%" PRIu64, o.events);
	snprintf(errf[0], sizeof(errf[0]), "/tmp/%s.ingestd.log", name);
	snprintf(errf[1], sizeof(errf[1]), "/tmp/%s.fakepod.log", name);
	char *iargv[] = { ingestd, "--name", name, "--capacity", "1m", "--pod", podspec,
			  "--log-level", "warn", NULL };
	char *fargv[] = { fakepod, "--pub", ep, "--workload", "--rate", "0", "--count", cnt,
			  "--batch", "64", "--prefixes", "1024", "--prefix-blocks", "4",
			  "--suffix-blocks", "60", "--cache-blocks", "262144",
			  "--wait-subscribers", "1", "--linger-ms", "0", NULL };

	pid_t ip = bl_spawn(iargv, ncpu >= 2 ? 1 : -1, errf[0]);
	struct kvidx_reader *r = fx_wait_index(name, ip, errf[0]);
	const struct kv_view *v = kv_reader_view(r);
	pid_t fp = bl_spawn(fargv, ncpu >= 2 ? 0 : -1, errf[1]);
	struct fx_window w;

	fx_watch(v, o.events, ip, NULL, NULL, &w);
	double cpu_end = proc_cpu_s(ip), cpu_first = w.cpu_first;
	uint64_t e = w.events;
	res.complete = w.complete;
	res.blocks = w.b_last - w.b_first;
	res.events = e;
	res.secs = (double)(w.t_end - w.t_first) / 1e9;
	res.rate = (double)res.blocks / res.secs;
	res.cores = (cpu_end - cpu_first) / res.secs;
	res.cpu_rate = cpu_end > cpu_first ? (double)res.blocks / (cpu_end - cpu_first) : NAN;
	res.ev_rate = (double)e / res.secs;
	res.gaps = fx_pods_sum(v, KV_PC_seq_gaps);
	res.clears = fx_pods_sum(v, KV_PC_clears);
	kvidx_reader_close(r);
	bl_reap(fp, SIGTERM);
	bl_reap(ip, SIGTERM);
	bl_unlink_index(name);
	guard_name(1, NULL);
	if (!res.complete)
		fprintf(stderr, PROG ": run %d: only %" PRIu64 " of %" PRIu64 " events applied "
			"(logs: %s %s)\n", run, e, o.events, errf[0], errf[1]);
	else {
		unlink(errf[0]);
		unlink(errf[1]);
	}
	return res;
}

static void bench_ingest(void)
{
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	struct samples rate = { 0 }, cpu = { 0 }, cores = { 0 }, ev = { 0 };
	uint64_t gaps = 0, clears = 0;
	bool complete = true;

	for (uint32_t i = 0; i < o.runs; i++) {
		struct ingest_res x = ingest_run((int)i, (int)ncpu);
		printf("  ingest run %u: %" PRIu64 " block events in %.2f s = %.2f M/s, ingestd %.2f "
		       "cores, %.2f M per CPU-second, %.0f vLLM events/s%s\n", i, x.blocks, x.secs,
		       x.rate / 1e6, x.cores, x.cpu_rate / 1e6, x.ev_rate,
		       x.complete ? "" : " INCOMPLETE");
		samples_add(&rate, x.rate);
		samples_add(&cpu, x.cpu_rate);
		samples_add(&cores, x.cores);
		samples_add(&ev, x.ev_rate);
		gaps += x.gaps;
		clears += x.clears;
		complete &= x.complete;
	}
	struct row r = { .workload = "3 writer", .unit = "M blk-ev/s", .higher_better = true,
			 .ratio = NAN, .p99 = NAN };
	snprintf(r.name, sizeof(r.name), "ingest fakepod->ZMQ->ingestd");
	par_u(&r.par, "events", o.events);
	par_u(&r.par, "batch", 64);
	par_u(&r.par, "blocks_per_prompt", 64);
	par_s(&r.par, "key_algo", "cbor-fnv");
	par_u(&r.par, "runs", o.runs);
	par_s(&r.par, "ingestd_cpu", ncpu >= 2 ? "pinned-1" : "shared");
	r.median = samples_pct(&rate, 50) / 1e6;
	row_extra(&r, "per_ingestd_cpu_s", samples_pct(&cpu, 50) / 1e6);
	row_extra(&r, "ingestd_cores", samples_pct(&cores, 50));
	row_extra(&r, "vllm_events_per_s", samples_pct(&ev, 50));
	snprintf(r.target, sizeof(r.target), ">= 3M blk-ev/s, 1 core");
	r.target_state = !complete ? T_MISSED : r.median >= 3.0 ? T_MET : T_MISSED;
	snprintf(r.note, sizeof(r.note), "stored+removed blocks, first visible to last applied; "
		 "ingestd %.2f cores, %.2f M per ingestd CPU-second; %.0f vLLM events/s; seq "
		 "gaps %" PRIu64 ", clears %" PRIu64 "%s", samples_pct(&cores, 50),
		 samples_pct(&cpu, 50) / 1e6, samples_pct(&ev, 50), gaps, clears,
		 complete ? "" : "; INCOMPLETE RUN");
	row_emit(&r);
	snprintf(g_sum_ingest, sizeof(g_sum_ingest), "events=%" PRIu64 " runs=%u "
		 "ingest_mblock_events_per_s=%.3f ingest_per_cpu_s=%.3f ingest_cores=%.2f "
		 "ingest_gaps=%" PRIu64, o.events, o.runs, r.median, samples_pct(&cpu, 50) / 1e6,
		 samples_pct(&cores, 50), gaps);
	samples_free(&rate);
	samples_free(&cpu);
	samples_free(&cores);
	samples_free(&ev);
}

/* ---- b) raw operations ---- */

enum { S_KVIDX, S_KVUPD, S_LFHT, S_CKHS, S_NAIVE, S_REDIS, S_N };
static const char *const s_names[S_N] = {
	"kvidx_store/remove (new keys)", "kvidx_store/remove (2nd pod)", "rculfhash add/del",
	"ck_hs put/remove", "rwlock shm table add/del", "redis HSET/HDEL pipeline",
};

/* One structure under churn. */
struct rawctx {
	int s;
	uint64_t *base;      /* the prefilled keys */
	struct kvidx *w;
	struct cds_lfht *lfht;
	ck_hs_t hs;
	struct naive_tab *naive;
	redisContext *rc;
	uint64_t last_tick;
};

/* Inserts (ins) or deletes the BATCH keys k with pod in c's structure. */
static void raw_apply(struct rawctx *c, const uint64_t *k, uint16_t pod, bool ins)
{
	switch (c->s) {
	case S_KVIDX:
	case S_KVUPD: {
		int rc = ins ? kvidx_store(c->w, pod, k, BATCH, KVIDX_TIER_GPU, kvidx_now_ns()) :
			       kvidx_remove(c->w, pod, k, BATCH, 0);
		if (rc < 0)
			bdie("kvidx_%s: %s", ins ? "store" : "remove", kvidx_strerror(rc));
		break;
	}
	case S_LFHT:
		lf_apply(c->lfht, k, BATCH, pod, ins);
		break;
	case S_CKHS:
		ck_set_apply(&c->hs, k, BATCH, pod, ins);
		break;
	case S_NAIVE: {
		pthread_rwlock_wrlock(&c->naive->lock);
		bool ok = naive_apply(c->naive, k, BATCH, pod, ins);
		pthread_rwlock_unlock(&c->naive->lock);
		if (!ok)
			bdie("naive table full");
		break;
	}
	case S_REDIS:
		for (uint32_t i = 0; i < BATCH; i++) {
			if (ins)
				redis_hset(c->rc, k[i], &pod, 1);
			else
				redis_hdel(c->rc, k[i], pod);
		}
		redis_send(c->rc);
		redis_skip(c->rc, BATCH);
		break;
	}
}

struct raw_res {
	double med, p99, rate, fill_s;
	bool ran;
};

/* Creates c->s's empty structure, sized for nbase keys and the churn FIFO. */
static void raw_open(struct rawctx *c, uint64_t nbase)
{
	char name[KVIDX_NAME_MAX];

	switch (c->s) {
	case S_KVIDX:
	case S_KVUPD: {
		snprintf(name, sizeof(name), "bench-writer-%d-%d", (int)getpid(), c->s);
		guard_name(0, name);
		struct kvidx_writer_opts wo = {
			.name = name,
			.geo = { .capacity = nbase + FIFO_D * BATCH, .records = 2 * (nbase + FIFO_D * BATCH),
				 .pods_per_key = 10, .max_pods = o.pods },
			.group = (gid_t)-1,
		};
		c->w = writer_with_pods(&wo, o.pods, false);
		break;
	}
	case S_LFHT:
		c->lfht = lf_new(nbase + FIFO_D * BATCH, NULL);
		break;
	case S_CKHS:
		ck_set_init(&c->hs, nbase + FIFO_D * BATCH, CK_HS_MODE_DELETE);
		break;
	case S_NAIVE:
		c->naive = naive_new(nbase + FIFO_D * BATCH, true);
		break;
	case S_REDIS:
		redis_call(c->rc, "FLUSHALL");
		break;
	}
}

/* Tears down what raw_open() made. */
static void raw_close(struct rawctx *c)
{
	switch (c->s) {
	case S_KVIDX:
	case S_KVUPD:
		kvidx_writer_close(c->w, true);
		guard_name(0, NULL);
		break;
	case S_LFHT:
		lf_destroy(c->lfht, true);
		break;
	case S_CKHS:
		ck_set_destroy(&c->hs, true);
		break;
	case S_NAIVE:
		naive_free(c->naive);
		break;
	case S_REDIS:
		redis_call(c->rc, "FLUSHALL");
		break;
	}
}

static struct raw_res bench_raw_one(int s, const uint64_t *base, uint64_t nbase,
				    const uint16_t *bpod, redisContext *rc)
{
	struct raw_res res = { .ran = true };
	struct rawctx c = { .s = s, .rc = rc };
	uint64_t ops = s == S_REDIS ? o.redis_ops : o.ops, rng = 0x9e3779b97f4a7c15ull + (uint64_t)s;
	uint64_t (*fresh)[BATCH] = xcalloc(FIFO_D, sizeof(*fresh));
	uint16_t *fpod = xcalloc(FIFO_D, sizeof(uint16_t));
	uint64_t *foff = xcalloc(FIFO_D, sizeof(uint64_t));
	struct samples smp = { 0 };
	uint64_t t0 = now_ns();

	/* Prefill with the base keys (one pod each, in batches). */
	raw_open(&c, nbase);
	for (uint64_t i = 0; i + BATCH <= nbase; i += BATCH) {
		raw_apply(&c, base + i, bpod[i / BATCH], true);
		if (c.w && i % (64 * BATCH) == 0)
			kvidx_writer_tick(c.w, kvidx_now_ns());
	}
	res.fill_s = (double)(now_ns() - t0) / 1e9;

	/* Churn: a store batch while the FIFO has room, else the removal of its oldest. */
	uint32_t head = 0, count = 0;
	uint64_t nbatches = ops / BATCH, tstart = now_ns();
	for (uint64_t b = 0; b < nbatches; b++) {
		bool ins = count < FIFO_D;
		uint32_t slot = ins ? (head + count) % FIFO_D : head;
		if (ins) {
			fpod[slot] = (uint16_t)below(xorshift64(&rng), o.pods);
			if (s == S_KVUPD) {
				uint64_t off = below(xorshift64(&rng), nbase / BATCH) * BATCH;
				foff[slot] = off;
				while (fpod[slot] == bpod[off / BATCH])
					fpod[slot] = (uint16_t)below(xorshift64(&rng), o.pods);
			} else {
				for (uint32_t i = 0; i < BATCH; i++)
					fresh[slot][i] = rand_key(&rng);
			}
		}
		const uint64_t *k = s == S_KVUPD ? base + foff[slot] : fresh[slot];
		uint64_t t = now_ns();
		raw_apply(&c, k, fpod[slot], ins);
		uint64_t t2 = now_ns();
		samples_add(&smp, (double)(t2 - t) / BATCH);
		if (ins)
			count++;
		else
			head = (head + 1) % FIFO_D, count--;
		if (c.w && t2 - c.last_tick >= 1000000) {
			kvidx_writer_tick(c.w, kvidx_now_ns());
			c.last_tick = now_ns();
		}
	}
	res.rate = (double)(nbatches * BATCH) / ((double)(now_ns() - tstart) / 1e9);
	res.med = samples_pct(&smp, 50);
	res.p99 = samples_pct(&smp, 99);
	samples_free(&smp);

	raw_close(&c);
	free(fresh);
	free(fpod);
	free(foff);
	return res;
}

static void bench_raw(void)
{
	struct redis_srv srv;
	redisContext *rc = NULL;
	bool have_redis = !o.no_redis && redis_available() && redis_start(&srv) == 0;
	uint64_t nbase = o.keys / BATCH * BATCH, s = 0x2545f4914f6cdd1dull;
	uint64_t *base = xcalloc(nbase, sizeof(uint64_t));
	uint16_t *bpod = xcalloc(nbase / BATCH, sizeof(uint16_t));
	struct raw_res res[S_N];

	if (have_redis)
		rc = redis_open(srv.port);
	if (!have_redis && !o.no_redis)
		printf("redis-server not available: Redis rows skipped\n");
	for (uint64_t i = 0; i < nbase; i++)
		base[i] = rand_key(&s);
	for (uint64_t i = 0; i < nbase / BATCH; i++)
		bpod[i] = (uint16_t)below(xorshift64(&s), o.pods);
	rcu_register_thread();
	memset(res, 0, sizeof(res));
	for (int st = 0; st < S_N; st++) {
		if (st == S_REDIS && !have_redis)
			continue;
		res[st] = bench_raw_one(st, base, nbase, bpod, rc);
		printf("  %-32s prefill %.2f s; %.3g ops/s, %.0f ns/op median, %.0f p99\n",
		       s_names[st], res[st].fill_s, res[st].rate, res[st].med, res[st].p99);
	}
	rcu_unregister_thread();
	for (int st = 0; st < S_N; st++) {
		if (!res[st].ran)
			continue;
		struct row r = { .workload = "3 writer", .unit = "ns/op", .target_state = T_NONE };
		snprintf(r.name, sizeof(r.name), "%s", s_names[st]);
		par_u(&r.par, "keys", nbase);
		par_u(&r.par, "ops", st == S_REDIS ? o.redis_ops : o.ops);
		par_u(&r.par, "batch", BATCH);
		par_s(&r.par, "mix", st == S_KVUPD ? "add+remove 2nd pod" : "insert+delete keys");
		r.median = res[st].med;
		r.p99 = res[st].p99;
		r.ratio = st == S_KVIDX ? 1.0 : res[st].med / res[S_KVIDX].med;
		row_extra(&r, "ops_per_s", res[st].rate);
		snprintf(r.note, sizeof(r.note), "%.3g ops/s on one core%s", res[st].rate,
			 st == S_CKHS ? "; frees at once (no safe reclamation for readers)" :
			 st == S_LFHT ? "; call_rcu frees on urcu's own thread" :
			 st == S_REDIS ? "; redis-server is a second process" : "");
		row_emit(&r);
	}
	snprintf(g_sum_raw, sizeof(g_sum_raw), "keys=%" PRIu64 " ops=%" PRIu64 " kvidx_mops=%.2f "
		 "kvidx_update_mops=%.2f rculfhash_mops=%.2f ckhs_mops=%.2f naive_mops=%.2f "
		 "redis_mops=%.3f", nbase, o.ops, res[S_KVIDX].rate / 1e6, res[S_KVUPD].rate / 1e6, res[S_LFHT].rate / 1e6,
	       res[S_CKHS].rate / 1e6, res[S_NAIVE].rate / 1e6, res[S_REDIS].rate / 1e6);
	if (have_redis) {
		redisFree(rc);
		redis_stop(&srv);
	}
	free(base);
	free(bpod);
}

int main(int argc, char **argv)
{
	uint64_t t0 = now_ns();

	parse_opts(argc, argv);
	bench_start(o.arg.json);
	bl_find_bindir(o.bin, g_bindir, sizeof(g_bindir));
	printf("%s: end to end %u run(s) of %" PRIu64 " events; raw ops on %" PRIu64 " keys, %"
	       PRIu64 " ops; load %.2f\n", PROG, o.runs, o.events, o.keys, o.ops, loadavg1());
	if (!o.no_ingest)
		bench_ingest();
	bench_raw();
	printf("%s %s %s seconds=%.0f load=%.2f\n", PROG, g_sum_ingest, g_sum_raw,
	       (double)(now_ns() - t0) / 1e9, loadavg1());
	return 0;
}
