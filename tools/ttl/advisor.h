/*
 * advisor.h — internal to kvidx-ttl: what its parts share. kvidx-ttl is the TTL advisor, the
 * arithmetic of docs/ttl.md made into a tool, on numbers given on the command line (offline)
 * or on what a live index has measured:
 *
 *   T = Lq + J                Lq a high percentile of route-to-confirmation latency, J the
 *                             slack for subscriber backlog and timing (--backlog + --slack)
 *   recommended = T, clamped to --floor and --cap (the longest stale window the routing SLO
 *                             permits)
 *   exposure = lambda x p x TTL   live failed predictions in requests' worth: lambda routed
 *                             requests per second, p the failed-prediction probability
 *
 * The parts, each with one job:
 *   main.c     the command line: flags, their checks, --help, the mode
 *   offline.c  offline mode: Lq from the numbers given, the plan, printed as text or JSON
 *   live.c     live mode: two samples of the index's pods, then each pod and each router
 *              worker through the parts below
 *   measure.c  what a pod's histograms and counters say (latency, event lag, lambda, p)
 *   decide.c   what follows from it: the plan, J's backlog, docs/ttl.md's guidance, the curve
 *   text.c     a pod and a router worker as text
 *   json.c     a pod and a router worker as JSON
 *   files.c    the files it reads and writes: saved histograms, the SVG curve
 *
 * It never changes the index: live, it attaches as an ordinary reader (data mapped read-only,
 * one registry slot). All arithmetic is in double-precision seconds, rounded only when
 * printed, in the TTL core it shares with ingestd's adaptive policy (tools/common/ttl.c).
 * Exit status: 0 on success, 1 if the index cannot be read or the --pod is not in it, 2 on
 * bad usage.
 */
#ifndef KVIDX_TTL_ADVISOR_H
#define KVIDX_TTL_ADVISOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "hist.h"
#include "inspect.h"
#include "jsonw.h"
#include "kvidx.h"
#include "podsnap.h"
#include "sweep.h"
#include "ttl.h"

#define PROG "kvidx-ttl"
#define MAX_TTLS 8          /* --ttl settings compared */
#define MIN_JUDGE 100       /* outcomes needed before expiry rates are judged */
#define INTERVAL_MAX_S 3600.0
#define NPCT 3
#define MAX_GUIDANCE 8

extern const double pct_q[NPCT];              /* 0.50, 0.95, 0.99 */
extern const char *const pct_label[NPCT];     /* "p50", "p95", "p99" */
extern const char *const class_name[KV_PROMPT_CLASSES];

struct opts {
	const char *name;
	bool json;
	/* offline numbers */
	double pv[NPCT];
	bool have_pv[NPCT];
	double lq;
	bool have_lq;
	const char *pct_name;
	double rate, fail;
	bool have_rate, have_fail;
	/* both modes */
	double q;
	bool have_q;
	double backlog, slack, cap, floor;
	bool have_backlog;
	double ttls[MAX_TTLS];
	int nttl;
	/* the TTL curve */
	bool sweep;
	const char *svg;       /* --svg FILE */
	const char *hist_in;   /* offline --histogram FILE */
	const char *hist_out;  /* live --save-histogram FILE */
	double in_force, tokens;
	bool have_in_force, have_tokens;
	/* live */
	const char *pod;
	double interval;
	bool have_interval, since_start, cumulative;
	double stale_limit;
};

/* The live run: the index, its output and the curves shown. */
struct live {
	const struct opts *o;
	const char *name;
	struct kvidx_reader *r;
	struct tc_jw j;
	char pct[32];       /* "p99" */
	double elapsed_s;   /* of the rate sample */
	uint32_t block_size;
	struct sweep *sw;   /* --sweep: one curve per pod shown (for --svg) */
	uint64_t (*sw_hist)[KV_HIST_BUCKETS]; /* the histogram snapshots they point to */
	int nsw;
};

/* One latency histogram, copied once so that its count and percentiles agree. */
struct lat {
	uint64_t n;
	double p[NPCT]; /* seconds */
	double q;       /* at the chosen percentile */
};

/* One pod, measured (measure.c) and judged (decide.c), for text.c and json.c to print. */
struct pod_eval {
	const struct tc_pod *p, *prev;  /* this sample, the first one (or NULL) */
	uint64_t since_start_routes_ns; /* the index generation's age (--since-start) */
	uint64_t now;
	/* measured */
	struct lat rec, cum;            /* route-to-confirmation latency, recent and cumulative */
	struct lat lag_rec, lag_cum;    /* event path lag */
	const struct lat *lag;          /* the one J's backlog comes from, or NULL */
	const char *src;                /* Lq's window, NULL without confirmations */
	bool have_lq;
	uint64_t nq;                    /* confirmations in Lq's window */
	uint64_t spec, stale, rstale, srec, ttl_ms, last_ev, sp, routes;
	double ttl_in_force, tokens, age;
	double lambda, pf;
	bool have_rate, have_p, expo;
	char why[128];                  /* why lambda is unknown */
	/* decided */
	struct ttl_plan pl;
	const char *bsrc;               /* where J's backlog comes from */
	char bnote[256];                /* the backlog warning, or "" */
	char g[MAX_GUIDANCE][256];      /* guidance lines */
	int ng;
	const double *set;              /* the settings compared */
	bool dflt;
	int nset;
	struct sweep *sw;               /* --sweep: this pod's curve */
};

/* measure.c */
uint64_t routes_of(const struct tc_pod *p);
void lat_of(struct kv_tm_hist_ro h, double q, struct lat *out);
void measure_pod(const struct live *L, struct pod_eval *e);

/* decide.c */
int settings(const struct opts *o, const double **out, bool *dflt);
void decide_pod(struct live *L, struct pod_eval *e);
const char *fresh_name(uint64_t sp);

/* text.c, json.c */
void pod_text(const struct live *L, const struct pod_eval *e);
void router_text(uint32_t slot, const uint64_t *c, const struct lat *l, bool first);
void jw_plan(struct tc_jw *j, const struct ttl_plan *pl);
void pod_json(struct live *L, const struct pod_eval *e);
void router_json(struct tc_jw *j, uint32_t slot, const uint64_t *c, const struct lat *l,
		 double age);

/* files.c */
int load_hist(const char *path, uint64_t *c);
int save_hist(const char *path, const char *pod, const uint64_t h[KV_HIST_BUCKETS]);
int write_svg(const char *path, const struct sweep *sw, int n);

/* offline.c, live.c */
int run_offline(const struct opts *o);
int run_live(const struct opts *o);

#endif
