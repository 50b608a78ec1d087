/*
 * bench_mixed — workload 7 of the suite: block events and route commits into one index at
 * once, the shape of NVIDIA Dynamo's claim for its KV router's indexer (more than 10 M events
 * plus requests per second, p99 under 10 us).
 *
 * kvidx-ingestd serves P kvidx-fakepod processes, each publishing bench_writer's workload
 * (batches of 64 vLLM events, 64 blocks a prompt) as fast as it can, while R router
 * processes commit routes of K fresh keys each to those pods through their rings: a router
 * takes t0, calls kvidx_commit(), then polls kvidx_lookup() of the commit's last key
 * (sched_yield() between polls) until the prediction is there, takes t1, and commits the next
 * one. The segment is shared, so what a router sees there every process sees: t1 - t0 is
 * commit -> visible to other processes. Operations are block events applied (stored +
 * removed, the pods' counters, as in bench_writer) plus keys committed and speculated (the
 * pods' speculations counter); the rate is taken over the window from the routers' start
 * to the last event applied. Nothing is pinned: ingestd, P fakepods and R routers share the
 * machine's cores, so on a small machine the routers' latency is mostly waiting for a CPU.
 */
#define PROG "bench_mixed"
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "benchlib.h"
#include "fixture.h"
#include "host.h"
#include "inspect.h"
#include "rand.h"
#include "report.h"
#include "stats.h"

const char bl_prog[] = PROG;

#define MAXR 8
#define MAXP 8
#define MAX_LAT (1u << 20) /* latency samples kept per router */

struct opts {
	uint64_t events;
	uint32_t pods, routers, keys, runs;
	const char *bin;
	struct bl_args arg;
};
static struct opts o;

/* Shared with the router processes. */
struct mctl {
	uint32_t go, stop;
	uint32_t npods;
	int32_t pod[MAXP];
	uint64_t commits[MAXR], lost[MAXR], nlat[MAXR];
	char name[KVIDX_NAME_MAX];
};
static struct mctl *M;
static float *g_lat; /* MAXR x MAX_LAT, us */

static void usage(FILE *f)
{
	fputs("Usage: " PROG " [--quick] [--events N] [--pods P] [--routers R] [--keys K]\n"
	      "       [--runs N] [--bin DIR] [--json FILE]\n"
	      "Workload 7 of the kvidx benchmark suite: P kvidx-fakepods -> ZeroMQ -> kvidx-ingestd\n"
	      "while R router processes commit K-key routes; operations (block events + keys\n"
	      "speculated) per second into one index, and commit -> visible latency percentiles.\n"
	      "Prints table rows ('| ...') and one line starting with '" PROG " '.\n"
	      "\n"
	      "  --quick        1 run of 8000 events per fakepod\n"
	      "  --events N     vLLM events each fakepod publishes (default 25000)\n"
	      "  --pods P       fakepods (default 2, at most 8)\n"
	      "  --routers R    router processes (default 2, at most 8)\n"
	      "  --keys K       keys per route commit (default 32, at most 512)\n"
	      "  --runs N       runs, the median is reported (default 3)\n"
	      "  --bin DIR      where kvidx-ingestd and kvidx-fakepod are (default: this\n"
	      "                 program's directory)\n"
	      BL_HELP_TAIL,
	      f);
}

static void parse_opts(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "events", required_argument, NULL, 'e' }, { "pods", required_argument, NULL, 'p' },
		{ "routers", required_argument, NULL, 'r' }, { "keys", required_argument, NULL, 'k' },
		{ "runs", required_argument, NULL, 'n' },   { "bin", required_argument, NULL, 'b' },
		BL_OPTIONS_TAIL,
	};
	uint64_t events = 0, runs = 0;
	int c;

	o = (struct opts){ .pods = 2, .routers = 2, .keys = 32 };
	while ((c = bl_getopt(argc, argv, lo, usage, &o.arg)) != -1) {
		switch (c) {
		case 'e': events = parse_num("--events", optarg, 64, 1ull << 32); break;
		case 'p': o.pods = (uint32_t)parse_num("--pods", optarg, 1, MAXP); break;
		case 'r': o.routers = (uint32_t)parse_num("--routers", optarg, 1, MAXR); break;
		case 'k': o.keys = (uint32_t)parse_num("--keys", optarg, 1, 512); break;
		case 'n': runs = parse_num("--runs", optarg, 1, 50); break;
		case 'b': o.bin = optarg; break;
		}
	}
	o.events = events ? events : o.arg.quick ? 8000 : 25000;
	o.runs = (uint32_t)(runs ? runs : o.arg.quick ? 1 : 3);
}

static char g_bindir[4096];

/* ---- a router process ---- */

static void router_main(int id)
{
	struct kvidx_reader *r = kvidx_reader_open(M->name);
	uint64_t keys[512], s = 0x9e3779b97f4a7c15ull * (uint64_t)(id + 1) ^ now_ns();
	float *lat = g_lat + (size_t)id * MAX_LAT;

	if (!r)
		bdie("router %d: kvidx_reader_open: %s", id, kvidx_strerror(-errno));
	while (!__atomic_load_n(&M->go, __ATOMIC_ACQUIRE))
		sleep_ns(200000);
	for (uint64_t corr = 1; !__atomic_load_n(&M->stop, __ATOMIC_ACQUIRE); corr++) {
		int pod = M->pod[below(xorshift64(&s), M->npods)];
		for (uint32_t k = 0; k < o.keys; k++)
			keys[k] = rand_key(&s);
		struct kvidx_route rt = { .corr_id = corr | (uint64_t)id << 56, .pod = pod,
					  .prefill_pod = -1, .keys = keys, .nkeys = o.keys };
		uint64_t t0 = now_ns(), t1 = 0;
		if (kvidx_commit(r, &rt) < 0) {
			M->lost[id]++; /* ring full: counted, retried with new keys */
			sched_yield();
			continue;
		}
		for (;;) {
			struct kvidx_rec rec[16];
			bool hit = false;
			int n = kvidx_lookup(r, keys[o.keys - 1], rec, 16);
			for (int j = 0; j < n; j++)
				hit |= rec[j].pod == pod;
			uint64_t now = now_ns();
			if (hit) {
				t1 = now;
				break;
			}
			if (now - t0 > 200000000ull || __atomic_load_n(&M->stop, __ATOMIC_ACQUIRE))
				break;
			sched_yield();
		}
		if (!t1) {
			M->lost[id]++;
			continue;
		}
		M->commits[id]++;
		if (M->nlat[id] < MAX_LAT)
			lat[M->nlat[id]++] = (float)((double)(t1 - t0) / 1e3);
	}
	kvidx_reader_close(r);
	_exit(0);
}

/* ---- one run ---- */

struct mres {
	double ops_rate, ev_rate, spec_rate, commit_rate, cores, secs;
	uint64_t lost;
	bool complete;
};

/* At the first block event: the speculations so far are counted, and the routers go. */
struct mixed_first {
	const struct kv_view *v;
	uint64_t spec;
};

static void on_first_block(void *arg)
{
	struct mixed_first *f = arg;

	f->spec = fx_pods_sum(f->v, KV_PC_speculations);
	__atomic_store_n(&M->go, 1, __ATOMIC_RELEASE);
}

/* Waits (5 s at most) until ingestd registered every pod: their indices into M->pod. */
static void wait_pods(const struct kv_view *v)
{
	for (int tries = 0; tries < 500 && M->npods < o.pods; tries++) {
		sleep_ns(10000000);
		M->npods = 0;
		for (uint32_t i = 0; i < v->max_pods && M->npods < o.pods; i++)
			if (KV_POD_STATE(ld_relaxed(&v->pods[i].pd_word)) == KV_POD_ACTIVE)
				M->pod[M->npods++] = (int32_t)i;
	}
	if (M->npods != o.pods)
		bdie("ingestd registered %u of %u pods", M->npods, o.pods);
}

/* Forks the router processes (they wait for M->go); their pids into rp. */
static void spawn_routers(pid_t *rp)
{
	for (uint32_t i = 0; i < o.routers; i++) {
		rp[i] = fork();
		if (rp[i] < 0)
			bdie("fork: %s", strerror(errno));
		if (rp[i] == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			router_main((int)i);
		}
		guard_pid(rp[i]);
	}
}

static struct mres mixed_run(int run, struct samples *lat_all)
{
	struct mres res = { 0 };
	char ingestd[4200], fakepod[4200], cnt[32], errf[MAXP + 1][160];
	char ep[MAXP][64], podspec[MAXP][160];
	char *iargv[12 + 2 * MAXP];
	pid_t fp[MAXP], rp[MAXR], ip;
	int ia = 0;

	memset(M, 0, sizeof(*M));
	snprintf(M->name, sizeof(M->name), "bench-mixed-%d-%d", (int)getpid(), run);
	guard_name(1, M->name);
	snprintf(ingestd, sizeof(ingestd), "%s/kvidx-ingestd", g_bindir);
	snprintf(fakepod, sizeof(fakepod), "%s/kvidx-fakepod", g_bindir);
	snprintf(cnt, sizeof(cnt), "%" PRIu64, o.events);
	iargv[ia++] = ingestd;
	iargv[ia++] = "--name";
	iargv[ia++] = M->name;
	iargv[ia++] = "--capacity";
	iargv[ia++] = "2m";
	for (uint32_t p = 0; p < o.pods; p++) {
		int port = free_port();
		if (port < 0)
			bdie("no free port");
		snprintf(ep[p], sizeof(ep[p]), "tcp://127.0.0.1:%d", port);
		snprintf(podspec[p], sizeof(podspec[p]), "%.63s,name=127.0.0.1:%d", ep[p], port);
		iargv[ia++] = "--pod";
		iargv[ia++] = podspec[p];
	}
	iargv[ia++] = "--log-level";
	iargv[ia++] = "warn";
	iargv[ia] = NULL;
	for (uint32_t p = 0; p <= o.pods; p++)
		snprintf(errf[p], sizeof(errf[p]), "/tmp/%s.%u.log", M->name, p);
	ip = bl_spawn(iargv, -1, errf[o.pods]);

	struct kvidx_reader *r = fx_wait_index(M->name, ip, errf[o.pods]);
	const struct kv_view *v = kv_reader_view(r);
	wait_pods(v);
	spawn_routers(rp);
	for (uint32_t p = 0; p < o.pods; p++) {
		char seed[16];
		snprintf(seed, sizeof(seed), "%u", p + 1);
		char *fargv[] = { fakepod, "--pub", ep[p], "--workload", "--rate", "0", "--count",
				  cnt, "--batch", "64", "--prefixes", "1024", "--prefix-blocks", "4",
				  "--suffix-blocks", "60", "--cache-blocks", "262144", "--seed", seed,
				  "--wait-subscribers", "1", "--linger-ms", "1000", NULL };
		fp[p] = bl_spawn(fargv, -1, errf[p]);
	}
	/* The window opens at the first block event: the routers start then. */
	struct mixed_first first = { .v = v };
	struct fx_window w;
	fx_watch(v, o.events * o.pods, ip, on_first_block, &first, &w);
	res.complete = w.complete;
	uint64_t spec = fx_pods_sum(v, KV_PC_speculations) - first.spec;
	double cpu1 = proc_cpu_s(ip), cpu0 = w.cpu_first;
	__atomic_store_n(&M->stop, 1, __ATOMIC_RELEASE);
	for (uint32_t i = 0; i < o.routers; i++)
		bl_reap(rp[i], 0);
	res.secs = (double)(w.t_end - w.t_first) / 1e9;
	res.ev_rate = (double)(w.b_last - w.b_first) / res.secs;
	res.spec_rate = (double)spec / res.secs;
	res.ops_rate = res.ev_rate + res.spec_rate;
	res.cores = (cpu1 - cpu0) / res.secs;
	uint64_t commits = 0;
	for (uint32_t i = 0; i < o.routers; i++) {
		commits += M->commits[i];
		res.lost += M->lost[i];
		for (uint64_t j = 0; j < M->nlat[i]; j++)
			samples_add(lat_all, g_lat[(size_t)i * MAX_LAT + j]);
	}
	res.commit_rate = (double)commits / res.secs;
	kvidx_reader_close(r);
	for (uint32_t p = 0; p < o.pods; p++)
		bl_reap(fp[p], SIGTERM);
	bl_reap(ip, SIGTERM);
	bl_unlink_index(M->name);
	guard_name(1, NULL);
	if (res.complete)
		for (uint32_t p = 0; p <= o.pods; p++)
			unlink(errf[p]);
	else
		fprintf(stderr, PROG ": run %d: only %" PRIu64 " of %" PRIu64 " events applied (logs "
			"/tmp/%s.*.log)\n", run, w.events, o.events * o.pods, M->name);
	return res;
}

int main(int argc, char **argv)
{
	uint64_t t0 = now_ns();
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	struct samples ops = { 0 }, ev = { 0 }, sp = { 0 }, cm = { 0 }, cores = { 0 }, lat = { 0 };
	uint64_t lost = 0;
	bool complete = true;

	parse_opts(argc, argv);
	bench_start(o.arg.json);
	bl_find_bindir(o.bin, g_bindir, sizeof(g_bindir));
	M = shared_alloc(sizeof(*M));
	g_lat = shared_alloc((size_t)MAXR * MAX_LAT * sizeof(float));
	printf("%s: %u run(s): %u fakepods x %" PRIu64 " events, %u routers committing %u keys; "
	       "%ld cores, load %.2f\n", PROG, o.runs, o.pods, o.events, o.routers, o.keys, ncpu,
	       loadavg1());
	for (uint32_t i = 0; i < o.runs; i++) {
		struct samples rl = { 0 };
		struct mres x = mixed_run((int)i, &rl);
		printf("  run %u: %.2f s: %.2f M ops/s (%.2f M block events/s + %.2f M keys "
		       "speculated/s, %.0f commits/s), ingestd %.2f cores; commit->visible p50 %.1f "
		       "us p99 %.1f us; %" PRIu64 " commits lost%s\n", i, x.secs, x.ops_rate / 1e6,
		       x.ev_rate / 1e6, x.spec_rate / 1e6, x.commit_rate, x.cores,
		       samples_pct(&rl, 50), samples_pct(&rl, 99), x.lost,
		       x.complete ? "" : " INCOMPLETE");
		for (size_t j = 0; j < rl.n; j++)
			samples_add(&lat, rl.v[j]);
		samples_free(&rl);
		samples_add(&ops, x.ops_rate);
		samples_add(&ev, x.ev_rate);
		samples_add(&sp, x.spec_rate);
		samples_add(&cm, x.commit_rate);
		samples_add(&cores, x.cores);
		lost += x.lost;
		complete &= x.complete;
	}

	struct row r = { .workload = "7 mixed", .unit = "M ops/s", .higher_better = true,
			 .ratio = NAN, .p99 = NAN };
	snprintf(r.name, sizeof(r.name), "events+commits fakepods,routers");
	par_u(&r.par, "fakepods", o.pods);
	par_u(&r.par, "events_each", o.events);
	par_u(&r.par, "routers", o.routers);
	par_u(&r.par, "keys_per_commit", o.keys);
	par_u(&r.par, "runs", o.runs);
	par_s(&r.par, "pinned", "no");
	r.median = samples_pct(&ops, 50) / 1e6;
	row_extra(&r, "block_events_per_s", samples_pct(&ev, 50));
	row_extra(&r, "keys_speculated_per_s", samples_pct(&sp, 50));
	row_extra(&r, "commits_per_s", samples_pct(&cm, 50));
	row_extra(&r, "ingestd_cores", samples_pct(&cores, 50));
	snprintf(r.target, sizeof(r.target), ">= 3M ops/s");
	r.target_state = !complete ? T_MISSED : r.median >= 3.0 ? T_MET : T_MISSED;
	snprintf(r.note, sizeof(r.note), "%.2f M block events/s + %.2f M keys speculated/s (%.0f "
		 "commits/s); ingestd %.2f cores of %ld shared with %u fakepods and %u routers%s",
		 samples_pct(&ev, 50) / 1e6, samples_pct(&sp, 50) / 1e6, samples_pct(&cm, 50),
		 samples_pct(&cores, 50), ncpu, o.pods, o.routers,
		 complete ? "" : "; INCOMPLETE RUN");
	row_emit(&r);

	struct row l = { .workload = "7 mixed", .unit = "us", .ratio = NAN };
	snprintf(l.name, sizeof(l.name), "commit->visible under events");
	l.par = r.par;
	l.median = samples_pct(&lat, 50);
	l.p99 = samples_pct(&lat, 99);
	row_extra(&l, "p999", samples_pct(&lat, 99.9));
	row_extra(&l, "samples", (double)lat.n);
	row_extra(&l, "lost", (double)lost);
	snprintf(l.target, sizeof(l.target), "p99 <= 100 us");
	l.target_state = lat.n == 0 ? T_MISSED : l.p99 <= 100 ? T_MET : T_MISSED;
	snprintf(l.note, sizeof(l.note), "router commits, polls its last key until visible; %zu "
		 "samples, p99.9 %.0f us, %" PRIu64 " lost (ring full or not seen in 200 ms)",
		 lat.n, samples_pct(&lat, 99.9), lost);
	row_emit(&l);

	printf("%s pods=%u events=%" PRIu64 " routers=%u keys=%u runs=%u mops=%.3f "
	       "block_mev_s=%.3f spec_mkeys_s=%.3f commits_s=%.0f p50_us=%.1f p99_us=%.1f "
	       "seconds=%.0f load=%.2f\n", PROG, o.pods, o.events, o.routers, o.keys, o.runs,
	       r.median, samples_pct(&ev, 50) / 1e6, samples_pct(&sp, 50) / 1e6,
	       samples_pct(&cm, 50), l.median, l.p99, (double)(now_ns() - t0) / 1e9, loadavg1());
	samples_free(&ops);
	samples_free(&ev);
	samples_free(&sp);
	samples_free(&cm);
	samples_free(&cores);
	samples_free(&lat);
	return 0;
}
