/*
 * kvidx-top — a live view of one index: per pod, the TTL in force, the routes decided on a
 * prediction / on confirmed blocks / on no match, what became of the speculative entries
 * (confirmed in time, early and stale expiries, late confirmations), false warm routes,
 * route-to-confirmation latency and event freshness; index-wide, the table's fill, the
 * readers and the writer's heartbeat (docs/DESIGN.md "Counters and metrics",
 * docs/ttl.md "Early and stale expiry").
 *
 * It attaches as an ordinary reader (the data segment mapped read-only) and reads the
 * writer's relaxed counters, so figures may lag each other by a moment. Rates are the
 * difference between two refreshes. Every frame is redrawn in place with ANSI "home" and
 * "clear to end of line / screen" when standard output is a terminal; otherwise (and with
 * --once) frames are plain text separated by a blank line.
 *
 * Exit status: 0 (also on SIGINT / SIGTERM), 1 if the index cannot be read, 2 on bad usage.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include "attach.h"
#include "args.h"
#include "cli.h"
#include "hist.h"
#include "inspect.h"
#include "kvidx.h"
#include "telemetry.h"

#define PROG "kvidx-top"
#define NS_PER_MS 1000000ull
#define NS_PER_S 1000000000ull

/* What a previous frame saw of one pod, for rates. */
struct prev {
	bool seen;
	char name[KVIDX_POD_NAME_MAX];
	uint64_t ctr[KV_PC_COUNT];
};

struct top {
	const char *name;
	double interval;
	bool once, tty;
	struct kvidx_reader *r;
	struct prev *prev;
	uint32_t nprev;
	uint64_t prev_ns, prev_commits;
	unsigned pod_w; /* width of the pod column */
};

static void usage(FILE *f)
{
	fputs("Usage: " PROG " [OPTION]...\n"
	      "A live view of a kvidx index, refreshed in place: per pod the TTL in force,\n"
	      "routes by kind (predicted / confirmed / nomatch, with their rate per second\n"
	      "since the last refresh), false warm routes, speculative records and what became\n"
	      "of them (confirmed in time, early expiries, stale expiries, late\n"
	      "confirmations), route-to-confirmation latency p50/p95/p99 over the recent\n"
	      "histogram, per route (routes with new predictions: in time, early, stale,\n"
	      "dropped), event lag p50/p99 and the queue depth peak, latency p99 by prompt\n"
	      "length (<512, <2k, <8k, >=8k tokens), and event freshness (time since the last\n"
	      "batch or heartbeat, events/s, speculation paused or not, ROUTED BUT SILENT for\n"
	      "a pod routed to that sends nothing); per router worker (registry slot)\n"
	      "its routes and latency; index-wide the keys, records, speculative records,\n"
	      "readers and the writer's heartbeat age.\n"
	      "\n"
	      "  --name NAME        index to watch (default kvidx)\n"
	      "  --interval D       time between refreshes, e.g. 500ms (default 1s)\n"
	      "  --once             print one frame, without terminal control codes, and exit\n"
	      "  -h, --help         print this help and exit\n"
	      "\n"
	      "Rates need two frames: the first frame (and --once) shows '-' for them.\n"
	      "Exit status: 0 (also on SIGINT or SIGTERM), 1 if the index cannot be read, 2 on\n"
	      "bad usage.\n",
	      f);
}

/* ---- formatting ------------------------------------------------------------------------------ */

/* A duration in microseconds, in 7 columns at most: "950us", "81.2ms", "1.25s". */
static const char *fmt_us(char *buf, size_t n, uint64_t us)
{
	if (us < 1000)
		snprintf(buf, n, "%" PRIu64 "us", us);
	else if (us < 1000000)
		snprintf(buf, n, "%.*fms", us < 100000 ? 1 : 0, (double)us / 1e3);
	else if (us < 100000000)
		snprintf(buf, n, "%.2fs", (double)us / 1e6);
	else
		snprintf(buf, n, "%.0fs", (double)us / 1e6);
	return buf;
}

/* A count with a k/M suffix past 6 digits. */
static const char *fmt_count(char *buf, size_t n, uint64_t v)
{
	if (v < 1000000)
		snprintf(buf, n, "%" PRIu64, v);
	else if (v < 1000000000)
		snprintf(buf, n, "%.2fM", (double)v / 1e6);
	else
		snprintf(buf, n, "%.2fG", (double)v / 1e9);
	return buf;
}

/* "count rate/s", or "count -" without a previous frame. */
static const char *fmt_cr(char *buf, size_t n, uint64_t v, double rate)
{
	char c[24];

	fmt_count(c, sizeof(c), v);
	if (isnan(rate))
		snprintf(buf, n, "%s -", c);
	else
		snprintf(buf, n, "%s %.1f/s", c, rate);
	return buf;
}

/* Pod names are the writer's; print only printable ASCII. */
static void clean_name(char *s)
{
	for (; *s; s++)
		if (*s < 0x20 || *s >= 0x7f)
			*s = '?';
}

/* Ends a line: clear to its end when redrawing in place. */
static void eol(const struct top *t)
{
	fputs(t->tty ? "\033[K\n" : "\n", stdout);
}

/* ---- one frame ------------------------------------------------------------------------------- */

struct podrow {
	int idx;
	char name[KVIDX_POD_NAME_MAX];
	uint64_t ctr[KV_PC_COUNT];
	uint64_t word;
	double rate[KV_PC_COUNT]; /* NAN without a previous frame */
	bool have_lat;
	uint64_t p50, p95, p99, nlat;
	char lag50[16], lag99[16];          /* recent event lag, "-" when none */
	char cls99[KV_PROMPT_CLASSES][16];  /* recent latency p99 by prompt-length class */
};

/* The q-quantile of histogram h as a duration, "-" if empty. */
static void fmt_q(char *buf, size_t n, struct kv_tm_hist_ro h, double q)
{
	uint64_t us;

	if (kv_tm_ro_quantile(h, q, &us) < 0)
		snprintf(buf, n, "-");
	else
		fmt_us(buf, n, us);
}

/* Makes room for the previous frame of every pod the index can hold. */
static int grow_prev(struct top *t, const struct kv_view *v)
{
	if (v->max_pods > t->nprev) {
		struct prev *np = realloc(t->prev, v->max_pods * sizeof(*np));
		if (!np) {
			fprintf(stderr, PROG ": out of memory\n");
			return -1;
		}
		memset(np + t->nprev, 0, (v->max_pods - t->nprev) * sizeof(*np));
		t->prev = np;
		t->nprev = v->max_pods;
	}
	return 0;
}

/* One active pod's row: its counters, their rates since the previous frame, its percentiles. */
static void snapshot_pod(struct top *t, const struct kv_view *v, uint32_t i, double dt,
			 struct podrow *p)
{
	if (kvidx_reader_pod(t->r, (int)i, p->name, NULL) < 0)
		snprintf(p->name, sizeof(p->name), "pod[%" PRIu32 "]", i);
	clean_name(p->name);
	p->idx = (int)i;
	for (unsigned k = 0; k < KV_PC_COUNT; k++)
		p->ctr[k] = kv_tm_view_pod(v, (int)i, (enum kv_pod_ctr)k);
	struct prev *pv = &t->prev[i];
	bool same = pv->seen && !strcmp(pv->name, p->name);
	for (unsigned k = 0; k < KV_PC_COUNT; k++)
		p->rate[k] = same && dt > 0 && p->ctr[k] >= pv->ctr[k] ?
				     (double)(p->ctr[k] - pv->ctr[k]) / dt : NAN;
	pv->seen = true;
	memcpy(pv->name, p->name, sizeof(pv->name));
	memcpy(pv->ctr, p->ctr, sizeof(pv->ctr));
	struct kv_tm_hist_ro h = kv_tm_view_hist(v, (int)i, KV_HIST_CONFIRM_RECENT);
	p->nlat = kv_tm_ro_count(h);
	p->have_lat = kv_tm_ro_quantile(h, 0.50, &p->p50) == 0 &&
		      kv_tm_ro_quantile(h, 0.95, &p->p95) == 0 &&
		      kv_tm_ro_quantile(h, 0.99, &p->p99) == 0;
	fmt_q(p->lag50, sizeof(p->lag50), kv_tm_view_hist(v, (int)i, KV_HIST_LAG_RECENT), 0.5);
	fmt_q(p->lag99, sizeof(p->lag99), kv_tm_view_hist(v, (int)i, KV_HIST_LAG_RECENT), 0.99);
	for (unsigned pc = 0; pc < KV_PROMPT_CLASSES; pc++)
		fmt_q(p->cls99[pc], sizeof(p->cls99[pc]),
		      kv_tm_view_hist(v, (int)i, KV_HIST_CLASS(pc)), 0.99);
}

/* Pods: a snapshot of each active one into rows; returns how many. */
static uint32_t snapshot_pods(struct top *t, const struct kv_view *v, double dt,
			      struct podrow *rows)
{
	uint32_t nrows = 0;

	t->pod_w = 16;
	for (uint32_t i = 0; i < v->max_pods; i++) {
		struct podrow *p = &rows[nrows];
		p->word = ld_acquire(&v->pods[i].pd_word);
		if (KV_POD_STATE(p->word) != KV_POD_ACTIVE)
			continue;
		snapshot_pod(t, v, i, dt, p);
		size_t w = strlen(p->name);
		if (w > t->pod_w)
			t->pod_w = (unsigned)w;
		nrows++;
	}
	for (uint32_t i = 0; i < t->nprev; i++) { /* forget pods that left */
		bool live = false;
		for (uint32_t k = 0; k < nrows && !live; k++)
			live = rows[k].idx == (int)i;
		if (!live)
			t->prev[i].seen = false;
	}
	return nrows;
}

/* Readers: the registry's active slots (this view is one of them). */
static uint32_t count_readers(const struct kv_view *v, const struct kvidx_ctl_hdr *ctl)
{
	const struct kvidx_reader_slot *slots = (const void *)((const char *)ctl + sizeof(*ctl));
	uint32_t nslots = ld_relaxed(&ctl->ch_max_readers), readers = 0;

	if (nslots > v->hdr->dh_max_readers)
		nslots = v->hdr->dh_max_readers;
	for (uint32_t i = 0; i < nslots; i++)
		readers += KV_RS_STATE(ld_acquire(&slots[i].rs_state)) == KV_RS_ACTIVE;
	return readers;
}

/* The frame's first lines: the index, the writer's liveness, the table's fill, the commits. */
static void print_header(struct top *t, const struct kvidx_info *in, const struct kv_view *v,
			 uint32_t readers, uint64_t now, double dt)
{
	uint64_t commits = kv_tm_view_stat(v, KV_ST_route_commits);
	char a[32], b[32], c[32], d[32], e[32];
	time_t wall = time(NULL);
	struct tm tm;

	localtime_r(&wall, &tm);
	int64_t hb_ms = (int64_t)(now - in->heartbeat_ns) / (int64_t)NS_PER_MS;
	bool alive = in->writer_pid > 0 && (kill(in->writer_pid, 0) == 0 || errno == EPERM);
	if (t->tty)
		fputs("\033[H", stdout);
	printf(PROG ": index %s, generation %" PRIu64 ", %s, block %" PRIu32
	       ", %02d:%02d:%02d",
	       t->name, in->generation, kvidx_key_algo_name(in->algo), in->block_size, tm.tm_hour,
	       tm.tm_min, tm.tm_sec);
	eol(t);
	printf("writer pid %d (%s), heartbeat %" PRId64 " ms ago%s", (int)in->writer_pid,
	       alive ? "running" : "not running", hb_ms,
	       hb_ms > 1000 ? "  STALE: readers serve the last state" : "");
	eol(t);
	printf("keys %s of %s, records %s (speculative %s), readers %" PRIu32
	       " (this view included), route commits %s",
	       fmt_count(a, sizeof(a), kv_tm_view_stat(v, KV_ST_keys)),
	       fmt_count(b, sizeof(b), in->geo.capacity),
	       fmt_count(c, sizeof(c), kv_tm_view_stat(v, KV_ST_records)),
	       fmt_count(d, sizeof(d), kv_tm_view_stat(v, KV_ST_spec_records)), readers,
	       fmt_count(e, sizeof(e), commits));
	if (dt > 0 && commits >= t->prev_commits)
		printf(" (%.1f/s)", (double)(commits - t->prev_commits) / dt);
	eol(t);
	t->prev_ns = now;
	t->prev_commits = commits;
}

/* Routes by decision, per pod. */
static void print_routes(const struct top *t, const struct podrow *rows, uint32_t nrows)
{
	int w = (int)t->pod_w;

	eol(t);
	printf("%-*s %8s %15s %15s %15s %10s %8s", w, "ROUTES", "TTL", "predicted", "confirmed",
	       "nomatch", "false-warm", "outcomes");
	eol(t);
	for (uint32_t k = 0; k < nrows; k++) {
		const struct podrow *p = &rows[k];
		char ttl[16], pr[32], cf[32], nm[32];
		snprintf(ttl, sizeof(ttl), "%" PRIu64 "ms", p->ctr[KV_PC_ttl_ms]);
		printf("%-*s %8s %15s %15s %15s %10" PRIu64 " %8" PRIu64, w, p->name, ttl,
		       fmt_cr(pr, sizeof(pr), p->ctr[KV_PC_routes_predicted],
			      p->rate[KV_PC_routes_predicted]),
		       fmt_cr(cf, sizeof(cf), p->ctr[KV_PC_routes_confirmed],
			      p->rate[KV_PC_routes_confirmed]),
		       fmt_cr(nm, sizeof(nm), p->ctr[KV_PC_routes_nomatch],
			      p->rate[KV_PC_routes_nomatch]),
		       p->ctr[KV_PC_false_warm_routes], p->ctr[KV_PC_outcomes]);
		eol(t);
	}
}

/* Speculative records and route-to-confirmation latency (recent histogram), per pod. */
static void print_speculation(const struct top *t, const struct podrow *rows, uint32_t nrows)
{
	int w = (int)t->pod_w;
	char a[32], b[32], r[32];

	eol(t);
	printf("%-*s %9s %9s %9s %7s %7s %7s %7s %7s %7s %7s", w, "SPECULATION", "records",
	       "remote", "in-time", "early", "stale", "late", "p50", "p95", "p99", "samples");
	eol(t);
	for (uint32_t k = 0; k < nrows; k++) {
		const struct podrow *p = &rows[k];
		char p50[16] = "-", p95[16] = "-", p99[16] = "-";
		if (p->have_lat) {
			fmt_us(p50, sizeof(p50), p->p50);
			fmt_us(p95, sizeof(p95), p->p95);
			fmt_us(p99, sizeof(p99), p->p99);
		}
		printf("%-*s %9s %9s %9s %7" PRIu64 " %7" PRIu64 " %7" PRIu64 " %7s %7s %7s %7" PRIu64,
		       w, p->name, fmt_count(a, sizeof(a), p->ctr[KV_PC_speculations]),
		       fmt_count(r, sizeof(r), p->ctr[KV_PC_remote_speculations]),
		       fmt_count(b, sizeof(b), p->ctr[KV_PC_confirmed_in_time]),
		       p->ctr[KV_PC_early_expiries], p->ctr[KV_PC_stale_expiries],
		       p->ctr[KV_PC_late_confirmations], p50, p95, p99, p->nlat);
		eol(t);
	}
}

/* Per route (a route's predictions expire together), backlog, latency by prompt length. */
static void print_per_route(const struct top *t, const struct podrow *rows, uint32_t nrows)
{
	int w = (int)t->pod_w;
	char a[32], b[32];

	eol(t);
	printf("%-*s %8s %8s %6s %6s %7s %8s %8s %6s %8s %8s %8s %8s", w, "PER ROUTE", "routes",
	       "in-time", "early", "stale", "dropped", "lag p50", "lag p99", "queue", "p99<512",
	       "p99<2k", "p99<8k", "p99>=8k");
	eol(t);
	for (uint32_t k = 0; k < nrows; k++) {
		const struct podrow *p = &rows[k];
		printf("%-*s %8s %8s %6" PRIu64 " %6" PRIu64 " %7" PRIu64 " %8s %8s %6" PRIu64
		       " %8s %8s %8s %8s",
		       w, p->name, fmt_count(a, sizeof(a), p->ctr[KV_PC_spec_routes]),
		       fmt_count(b, sizeof(b), p->ctr[KV_PC_routes_in_time]),
		       p->ctr[KV_PC_routes_early_expiries], p->ctr[KV_PC_routes_stale_expiries],
		       p->ctr[KV_PC_routes_dropped_clear] + p->ctr[KV_PC_routes_dropped_removed] +
			       p->ctr[KV_PC_routes_dropped_evicted],
		       p->lag50, p->lag99, p->ctr[KV_PC_queue_depth_peak], p->cls99[0], p->cls99[1],
		       p->cls99[2], p->cls99[3]);
		eol(t);
	}
}

/* Counter c of router slot s. */
static uint64_t rctr(const struct kv_view *v, uint32_t s, enum kv_router_ctr c)
{
	return kv_tm_view_router(v, (int)s, c);
}

/* Router workers (registry slots) that committed routes. */
static void print_routers(const struct top *t, const struct kv_view *v)
{
	char a[32], b[32], c[32], d[32];
	bool rhead = false;

	for (uint32_t s = 0; s < v->max_readers; s++) {
		char p50[16], p99[16];
		if (!rctr(v, s, KV_RT_routes))
			continue;
		if (!rhead) {
			eol(t);
			printf("%-8s %8s %10s %10s %10s %10s %6s %6s %8s %8s", "ROUTERS", "pid",
			       "routes", "predicted", "confirmed", "nomatch", "early", "stale",
			       "p50", "p99");
			eol(t);
			rhead = true;
		}
		fmt_q(p50, sizeof(p50), kv_tm_view_router_hist(v, (int)s), 0.5);
		fmt_q(p99, sizeof(p99), kv_tm_view_router_hist(v, (int)s), 0.99);
		printf("slot %-3u %8" PRIu64 " %10s %10s %10s %10s %6" PRIu64 " %6" PRIu64 " %8s %8s",
		       s, rctr(v, s, KV_RT_pid),
		       fmt_count(a, sizeof(a), rctr(v, s, KV_RT_routes)),
		       fmt_count(b, sizeof(b), rctr(v, s, KV_RT_routes_predicted)),
		       fmt_count(c, sizeof(c), rctr(v, s, KV_RT_routes_confirmed)),
		       fmt_count(d, sizeof(d), rctr(v, s, KV_RT_routes_nomatch)),
		       rctr(v, s, KV_RT_routes_early_expiries),
		       rctr(v, s, KV_RT_routes_stale_expiries), p50, p99);
		eol(t);
	}
}

/* A pod's speculation state in words; routed but silent is the worst case. */
static const char *spec_state(const struct podrow *p)
{
	const char *state;

	switch (p->ctr[KV_PC_spec_paused]) {
	case 0:
		state = KV_POD_FLAGS(p->word) & KV_POD_SPEC_PAUSED ? "paused" : "active";
		break;
	case 1: state = "paused (stream)"; break;
	case 2: state = "paused (pipeline)"; break;
	default: state = "paused (?)"; break;
	}
	if (!p->ctr[KV_PC_connected] && !strcmp(state, "active"))
		state = "active, disconnected";
	/* Routes went to it and nothing came back for --stale-limit: the worst case. */
	if (p->ctr[KV_PC_routed_silent])
		state = "ROUTED BUT SILENT";
	return state;
}

/* Event freshness, per pod. */
static void print_events(const struct top *t, const struct podrow *rows, uint32_t nrows,
			 uint64_t now)
{
	int w = (int)t->pod_w;
	char a[32];

	eol(t);
	printf("%-*s %-19s %10s %8s %8s %6s %8s %8s", w, "EVENTS", "speculation",
	       "last event", "events/s", "events", "gaps", "restarts", "replays");
	eol(t);
	for (uint32_t k = 0; k < nrows; k++) {
		const struct podrow *p = &rows[k];
		uint64_t last = p->ctr[KV_PC_last_event_ns];
		char age[16] = "never";
		if (last && now >= last)
			fmt_us(age, sizeof(age), (now - last) / 1000);
		printf("%-*s %-19s %10s %8" PRIu64 " %8s %6" PRIu64 " %8" PRIu64 " %8" PRIu64, w,
		       p->name, spec_state(p), age, p->ctr[KV_PC_events_per_s],
		       fmt_count(a, sizeof(a), p->ctr[KV_PC_events]), p->ctr[KV_PC_seq_gaps],
		       p->ctr[KV_PC_restarts], p->ctr[KV_PC_replays_ok]);
		eol(t);
	}
	if (!nrows) {
		printf("(no pods yet)");
		eol(t);
	}
}

/* One frame: a snapshot of the index, printed table by table. */
static int frame(struct top *t)
{
	struct kvidx_info in;
	int rc = kvidx_reader_info(t->r, &in);

	if (rc == -KVIDX_ERETRY)
		rc = kvidx_reader_info(t->r, &in);
	if (rc < 0) {
		fprintf(stderr, PROG ": reading index '%s': %s\n", t->name, kvidx_strerror(rc));
		return -1;
	}
	/* kvidx_reader_info() switched the view to the current generation: read it now. */
	const struct kv_view *v = kv_reader_view(t->r);
	uint64_t now = kvidx_now_ns();
	double dt = t->prev_ns ? (double)(now - t->prev_ns) / 1e9 : NAN;

	if (grow_prev(t, v) < 0)
		return -1;
	struct podrow *rows = calloc(v->max_pods ? v->max_pods : 1, sizeof(*rows));
	if (!rows) {
		fprintf(stderr, PROG ": out of memory\n");
		return -1;
	}
	uint32_t nrows = snapshot_pods(t, v, dt, rows);
	print_header(t, &in, v, count_readers(v, kv_reader_ctl(t->r)), now, dt);
	print_routes(t, rows, nrows);
	print_speculation(t, rows, nrows);
	print_per_route(t, rows, nrows);
	print_routers(t, v);
	print_events(t, rows, nrows, now);
	if (t->tty)
		fputs("\033[J", stdout);
	else
		putchar('\n');
	fflush(stdout);
	free(rows);
	return 0;
}

/* ---- main ------------------------------------------------------------------------------------ */

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "name", required_argument, NULL, 'n' },
		{ "interval", required_argument, NULL, 'i' },
		{ "once", no_argument, NULL, 'o' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct top t = { .name = KVIDX_DEFAULT_NAME, .interval = 1.0 };
	sigset_t sigs;
	int c, sfd;

	tc_prog = PROG;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", lo, NULL)) != -1) {
		switch (c) {
		case 'n':
			t.name = tc_index_name_arg(optarg);
			break;
		case 'i':
			t.interval = tc_arg_duration("interval", optarg);
			if (!(t.interval >= 0.05) || t.interval > 3600)
				tc_usage_error("bad --interval '%s': expected 50ms to 1h", optarg);
			break;
		case 'o':
			t.once = true;
			break;
		default: /* 'h', ':' or '?' */
			tc_getopt_default(c, argv, usage);
		}
	}
	if (optind < argc)
		tc_usage_error("unexpected argument '%s'", argv[optind]);
	t.tty = !t.once && isatty(STDOUT_FILENO);

	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	sigprocmask(SIG_BLOCK, &sigs, NULL);
	sfd = signalfd(-1, &sigs, SFD_CLOEXEC);
	if (sfd < 0) {
		fprintf(stderr, PROG ": signalfd: %s\n", strerror(errno));
		return 1;
	}

	t.r = kvidx_reader_open(t.name);
	if (!t.r) {
		int rc = -errno;
		if (rc == -ENOENT)
			fprintf(stderr, PROG ": index '%s' not found (is kvidx-ingestd running?)\n",
				t.name);
		else
			fprintf(stderr, PROG ": cannot attach to index '%s': %s\n", t.name,
				kvidx_strerror(rc));
		return 1;
	}
	if (t.tty)
		fputs("\033[H\033[2J", stdout);
	int rc = 0;
	for (;;) {
		if (frame(&t) < 0) {
			rc = 1;
			break;
		}
		if (t.once)
			break;
		struct pollfd pfd = { .fd = sfd, .events = POLLIN };
		if (poll(&pfd, 1, (int)(t.interval * 1000)) > 0)
			break; /* SIGINT or SIGTERM */
	}
	kvidx_reader_close(t.r);
	free(t.prev);
	return rc;
}
