/*
 * main.c — kvidx-ttl's command line: the flags (offline numbers, live options, both), the
 * checks between them, --help, and the mode they select (offline.c or live.c). advisor.h
 * says what the tool does and lists its parts.
 */
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "advisor.h"
#include "args.h"
#include "attach.h"
#include "cli.h"

enum { OPT_P50 = 256, OPT_P95, OPT_P99, OPT_LQ, OPT_PERCENTILE, OPT_PCT_NAME, OPT_BACKLOG,
       OPT_SLACK, OPT_CAP, OPT_FLOOR, OPT_RATE, OPT_FAIL, OPT_TTL, OPT_NAME, OPT_POD,
       OPT_INTERVAL, OPT_SINCE_START, OPT_CUMULATIVE, OPT_STALE_LIMIT, OPT_JSON, OPT_SWEEP,
       OPT_SVG, OPT_HISTOGRAM, OPT_SAVE_HISTOGRAM, OPT_IN_FORCE, OPT_TOKENS };

static const struct option longopts[] = {
	{ "p50", required_argument, NULL, OPT_P50 },
	{ "p95", required_argument, NULL, OPT_P95 },
	{ "p99", required_argument, NULL, OPT_P99 },
	{ "lq", required_argument, NULL, OPT_LQ },
	{ "percentile", required_argument, NULL, OPT_PERCENTILE },
	{ "percentile-name", required_argument, NULL, OPT_PCT_NAME },
	{ "backlog", required_argument, NULL, OPT_BACKLOG },
	{ "slack", required_argument, NULL, OPT_SLACK },
	{ "cap", required_argument, NULL, OPT_CAP },
	{ "floor", required_argument, NULL, OPT_FLOOR },
	{ "rate", required_argument, NULL, OPT_RATE },
	{ "fail", required_argument, NULL, OPT_FAIL },
	{ "ttl", required_argument, NULL, OPT_TTL },
	{ "name", required_argument, NULL, OPT_NAME },
	{ "pod", required_argument, NULL, OPT_POD },
	{ "interval", required_argument, NULL, OPT_INTERVAL },
	{ "since-start", no_argument, NULL, OPT_SINCE_START },
	{ "cumulative", no_argument, NULL, OPT_CUMULATIVE },
	{ "stale-limit", required_argument, NULL, OPT_STALE_LIMIT },
	{ "json", no_argument, NULL, OPT_JSON },
	{ "sweep", no_argument, NULL, OPT_SWEEP },
	{ "svg", required_argument, NULL, OPT_SVG },
	{ "histogram", required_argument, NULL, OPT_HISTOGRAM },
	{ "save-histogram", required_argument, NULL, OPT_SAVE_HISTOGRAM },
	{ "in-force", required_argument, NULL, OPT_IN_FORCE },
	{ "tokens", required_argument, NULL, OPT_TOKENS },
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 },
};

static void usage(FILE *f)
{
	fputs("Usage: " PROG " [OPTION]...   (live: from an index)\n"
	      "       " PROG " --p99 D [--p95 D] [--p50 D] | --lq D [OPTION]...   (offline)\n"
	      "Sizes the speculative TTL from route-to-confirmation latency: T = Lq + J, with Lq a\n"
	      "high percentile of the latency and J = backlog + slack; recommends T clamped to the\n"
	      "cap; prices failed predictions as lambda x p x TTL (live failed predictions, in\n"
	      "requests' worth). Arithmetic in full precision, rounded only when printed.\n"
	      "\n"
	      "Offline, from numbers (any of the options below selects it):\n"
	      "  --p50 D, --p95 D, --p99 D   measured latency percentiles; Lq is the highest\n"
	      "                    given, or the one --percentile names (0.5, 0.95 or 0.99)\n"
	      "  --lq D            Lq directly (label it with --percentile or --percentile-name)\n"
	      "  --percentile-name NAME  how to call Lq in the output (e.g. p99)\n"
	      "  --rate R          routed requests per second (lambda)\n"
	      "  --fail P          failed-prediction probability p, 0.004 or 0.4%\n"
	      "                    (--rate and --fail go together)\n"
	      "  --histogram FILE  (--sweep) the latency distribution as a saved histogram\n"
	      "                    (--save-histogram writes one: lines LOWER_US COUNT)\n"
	      "  --in-force D      (--sweep) the TTL in force, marked on the curve\n"
	      "  --tokens N        (--sweep) prefix tokens a failed route puts at stake\n"
	      "\n"
	      "Live, from an index (when no offline numbers are given), per active pod: recent and\n"
	      "cumulative latency p50/p95/p99 from its histograms, T, the recommendation, the TTL\n"
	      "in force (counter ttl_ms), the event path lag p50/p95/p99 (batch ts to applied:\n"
	      "the measured backlog, J's backlog term unless --backlog is given), latency by\n"
	      "prompt length, speculations, confirmed in time, early and stale expiries, late\n"
	      "confirmations, the same per route and dropped predictions by cause, lambda (route\n"
	      "counters), p = stale routes / routes, tokens at stake per failed route, exposure at\n"
	      "the recommended TTL and at the TTL in force, freshness, docs/ttl.md's guidance where\n"
	      "it applies (and a warning when backlog eats most of the slack), then per router\n"
	      "worker (registry slot) its routes and latency.\n"
	      "  --name NAME       index to read (default \"" KVIDX_DEFAULT_NAME "\")\n"
	      "  --pod NAME        only this pod (exit status 1 if it is not active)\n"
	      "  --interval D      lambda from route counters sampled twice D apart (default 1s)\n"
	      "  --since-start     lambda from the counters over the index generation's age\n"
	      "                    instead (no wait)\n"
	      "  --cumulative      Lq from the cumulative histogram, not the recent one (the recent\n"
	      "                    one halves every 60 s; when it is empty the cumulative is used)\n"
	      "  --save-histogram FILE  write the --pod's recent latency histogram (for\n"
	      "                    --sweep --histogram elsewhere)\n"
	      "  --stale-limit P   stale routes above this share of routes are called\n"
	      "                    high (default 1%, or 0.01); early expiries are high above the\n"
	      "                    share of confirmed predictions the percentile accepts (1% for\n"
	      "                    p99). Each is judged once it has 100 speculations, or 100\n"
	      "                    confirmed predictions, to go on.\n"
	      "\n"
	      "Both:\n"
	      "  --percentile Q    0 < Q <= 1, as 0.99 or 99%. Live: Lq's percentile (default\n"
	      "                    0.99). Offline: which of --p50/--p95/--p99 is Lq, or the\n"
	      "                    label of --lq\n"
	      "  --backlog D       J's allowance for subscriber backlog (live default: the pod's\n"
	      "                    measured event lag p99, 250ms until one is measured; offline\n"
	      "                    default 250ms)\n"
	      "  --slack D         J's allowance for timing slack and resolution (default 100ms)\n"
	      "  --cap D           the longest stale window the routing SLO permits (default 5s,\n"
	      "                    at most 65.535s, the index's largest TTL)\n"
	      "  --floor D         never recommend less (default 0: none)\n"
	      "  --ttl D           a setting to compare: the room it leaves over T and its\n"
	      "                    exposure; repeatable up to 8 times. Offline, without --ttl, the\n"
	      "                    documented 2 s default is compared.\n"
	      "  --sweep           the TTL curve: for candidate TTLs (the --ttl values, else a\n"
	      "                    range around the recommendation and the TTL in force, both\n"
	      "                    marked) the share of successful predictions that would expire\n"
	      "                    early (P(latency > T) from the recent histogram, the\n"
	      "                    --histogram, or log-linear between the given percentiles),\n"
	      "                    live failed predictions lambda x p x T, the same in prefix\n"
	      "                    tokens, and the routes per second that would lose their\n"
	      "                    prediction\n"
	      "  --svg FILE        (--sweep) also draw the curve: early-expiry share and stale\n"
	      "                    exposure against T, one panel per pod\n"
	      "  --json            one JSON object (live: a member per pod under \"pods\")\n"
	      "  -h, --help        print this help and exit\n"
	      "\n"
	      "Durations D: a number with a unit, us, ms, s or m (minutes): 250ms, 1.15s; 0 alone.\n"
	      "Example (docs/ttl.md's): " PROG " --p99 1.15s --backlog 250ms --slack 100ms --rate 120\n"
	      "  --fail 0.004 --ttl 2s --ttl 5s   gives T = 1.500 s, 500 ms of room at 2 s, and\n"
	      "  0.72 requests' worth of live failed predictions (2.4 at 5 s).\n"
	      "\n"
	      "Exit status: 0 on success, 1 if the index cannot be read or the --pod is not active,\n"
	      "2 on bad usage.\n",
	      f);
}

/* An offline flag: sets it and returns its name, or NULL if c is not one. */
static const char *offline_flag(struct opts *o, int c)
{
	int rc;

	switch (c) {
	case OPT_P50:
	case OPT_P95:
	case OPT_P99:
		o->pv[c - OPT_P50] = tc_arg_duration(c == OPT_P50 ? "p50" :
						     c == OPT_P95 ? "p95" : "p99", optarg);
		o->have_pv[c - OPT_P50] = true;
		return pct_label[c - OPT_P50];
	case OPT_LQ:
		o->lq = tc_arg_duration("lq", optarg);
		o->have_lq = true;
		return "lq";
	case OPT_PCT_NAME:
		if (!*optarg || strlen(optarg) > 16 ||
		    strspn(optarg, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
				   "0123456789._-") != strlen(optarg))
			tc_usage_error("bad --percentile-name '%s': expected 1 to 16 of "
				       "[A-Za-z0-9._-], such as p99", optarg);
		o->pct_name = optarg;
		return "percentile-name";
	case OPT_RATE:
		if (ttl_parse_number(optarg, &o->rate) < 0)
			tc_usage_error("bad --rate '%s': expected routed requests per "
				       "second, a plain non-negative number such as 120",
				       optarg);
		o->have_rate = true;
		return "rate";
	case OPT_FAIL:
		rc = ttl_parse_probability(optarg, &o->fail);
		if (rc < 0)
			tc_usage_error("bad --fail '%s': expected a probability in [0, 1] "
				       "such as 0.004, or a percentage such as 0.4%%",
				       optarg);
		o->have_fail = true;
		return "fail";
	case OPT_HISTOGRAM:
		o->hist_in = optarg;
		return "histogram";
	case OPT_IN_FORCE:
		o->in_force = tc_arg_duration("in-force", optarg);
		if (o->in_force <= 0)
			tc_usage_error("bad --in-force '%s': a TTL must be longer than 0",
				       optarg);
		o->have_in_force = true;
		return "in-force";
	case OPT_TOKENS:
		if (ttl_parse_number(optarg, &o->tokens) < 0)
			tc_usage_error("bad --tokens '%s': expected prefix tokens per failed "
				       "route, a plain non-negative number such as 2048",
				       optarg);
		o->have_tokens = true;
		return "tokens";
	default:
		return NULL;
	}
}

/* A live flag: sets it and returns its name, or NULL if c is not one. */
static const char *live_flag(struct opts *o, int c)
{
	switch (c) {
	case OPT_NAME:
		o->name = tc_index_name_arg(optarg);
		return "name";
	case OPT_POD:
		o->pod = optarg;
		return "pod";
	case OPT_INTERVAL:
		o->interval = tc_arg_duration("interval", optarg);
		if (o->interval <= 0 || o->interval > INTERVAL_MAX_S)
			tc_usage_error("bad --interval '%s': expected more than 0 and at "
				       "most an hour", optarg);
		o->have_interval = true;
		return "interval";
	case OPT_SINCE_START:
		o->since_start = true;
		return "since-start";
	case OPT_CUMULATIVE:
		o->cumulative = true;
		return "cumulative";
	case OPT_STALE_LIMIT:
		if (ttl_parse_probability(optarg, &o->stale_limit) < 0)
			tc_usage_error("bad --stale-limit '%s': expected a share in [0, 1] "
				       "such as 0.01, or a percentage such as 1%%", optarg);
		return "stale-limit";
	case OPT_SAVE_HISTOGRAM:
		o->hist_out = optarg;
		return "save-histogram";
	default:
		return NULL;
	}
}

/* A flag of both modes: sets it; false if c is not one. */
static bool both_flag(struct opts *o, int c)
{
	switch (c) {
	case OPT_PERCENTILE:
		if (ttl_parse_probability(optarg, &o->q) < 0 || o->q <= 0)
			tc_usage_error("bad --percentile '%s': expected a number in (0, 1] "
				       "such as 0.99, or a percentage such as 99%%",
				       optarg);
		o->have_q = true;
		return true;
	case OPT_BACKLOG:
		o->backlog = tc_arg_duration("backlog", optarg);
		o->have_backlog = true;
		return true;
	case OPT_SLACK:
		o->slack = tc_arg_duration("slack", optarg);
		return true;
	case OPT_CAP:
		o->cap = tc_arg_duration("cap", optarg);
		if (o->cap <= 0 || o->cap > KVIDX_MAX_TTL_MS / 1000.0)
			tc_usage_error("bad --cap '%s': expected more than 0 and at most "
				       "65.535s (the index stores TTLs in 16-bit "
				       "milliseconds)", optarg);
		return true;
	case OPT_FLOOR:
		o->floor = tc_arg_duration("floor", optarg);
		return true;
	case OPT_TTL:
		if (o->nttl == MAX_TTLS)
			tc_usage_error("too many --ttl settings (at most %d)", MAX_TTLS);
		o->ttls[o->nttl] = tc_arg_duration("ttl", optarg);
		if (o->ttls[o->nttl] <= 0)
			tc_usage_error("bad --ttl '%s': a TTL must be longer than 0",
				       optarg);
		o->nttl++;
		return true;
	case OPT_JSON:
		o->json = true;
		return true;
	case OPT_SWEEP:
		o->sweep = true;
		return true;
	case OPT_SVG:
		o->svg = optarg;
		return true;
	default:
		return false;
	}
}

/* The checks between flags of both modes, after the last flag. */
static void check_common(int argc, char **argv, const struct opts *o)
{
	if (optind < argc)
		tc_usage_error("unexpected argument '%s'", argv[optind]);
	if (o->floor > o->cap)
		tc_usage_error("--floor (%gs) is above --cap (%gs)", o->floor, o->cap);
	if (o->svg && !o->sweep)
		tc_usage_error("--svg draws the TTL curve: it goes with --sweep");
	if (o->hist_out && !o->pod)
		tc_usage_error("--save-histogram saves one pod's histogram: give --pod");
	if (!o->sweep && (o->have_in_force || o->have_tokens))
		tc_usage_error("--%s is an input of the TTL curve: it goes with --sweep",
			       o->have_in_force ? "in-force" : "tokens");
}

/* The checks of offline mode: one latency input, the pairs that go together. */
static void check_offline(const struct opts *o, const char *live_opt, const char *offline_opt)
{
	if (live_opt)
		tc_usage_error("--%s reads a live index, but --%s gives offline numbers; "
			       "use one mode or the other", live_opt, offline_opt);
	bool any_pv = o->have_pv[0] || o->have_pv[1] || o->have_pv[2];
	if (o->hist_in && (o->have_lq || any_pv))
		tc_usage_error("--histogram gives the latency distribution; it does not go "
			       "with --lq, --p50, --p95 or --p99");
	if (o->hist_in && !o->sweep)
		tc_usage_error("--histogram is an input of the TTL curve: it goes with "
			       "--sweep");
	if (!o->have_lq && !any_pv && !o->hist_in)
		tc_usage_error("offline mode needs a latency percentile: --p99, --p95, "
			       "--p50 or --lq (or, with --sweep, --histogram)");
	if (o->have_lq && any_pv)
		tc_usage_error("--lq gives Lq directly; it does not go with --p50, --p95 or "
			       "--p99 (give one or the other)");
	/* Percentiles of one distribution cannot decrease: p50 <= p95 <= p99. */
	for (int i = 0; i + 1 < NPCT; i++)
		for (int j = i + 1; j < NPCT; j++)
			if (o->have_pv[i] && o->have_pv[j] && o->pv[i] > o->pv[j])
				tc_usage_error("--%s (%gs) is above --%s (%gs): percentiles of "
					       "one latency distribution cannot decrease",
					       pct_label[i], o->pv[i], pct_label[j], o->pv[j]);
	if (o->have_rate != o->have_fail)
		tc_usage_error("--rate and --fail go together (stale exposure is lambda x "
			       "p x T); --%s is missing", o->have_rate ? "fail" : "rate");
	if (!o->have_lq && !o->hist_in && o->have_q) {
		bool found = false;
		for (int i = 0; i < NPCT; i++)
			found |= o->have_pv[i] && o->q > pct_q[i] - 1e-9 &&
				 o->q < pct_q[i] + 1e-9;
		if (!found) {
			char qn[32], pn[32];
			tc_usage_error("--percentile %s selects the %s, which was not "
				       "given (give it with --p50, --p95 or --p99, or give "
				       "--lq)", ttl_fmt_num(qn, sizeof(qn), o->q),
				       ttl_fmt_pct_name(pn, sizeof(pn), o->q));
		}
	}
}

int main(int argc, char **argv)
{
	struct opts o = { .name = KVIDX_DEFAULT_NAME, .q = 0.99, .backlog = 0.25, .slack = 0.1,
			  .cap = 5.0, .interval = 1.0, .stale_limit = 0.01 };
	const char *live_opt = NULL, *offline_opt = NULL, *f;
	int c, rc;

	tc_prog = PROG;
	opterr = 0; /* This program prints its own messages, naming itself PROG. */
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		if ((f = offline_flag(&o, c)))
			offline_opt = f;
		else if ((f = live_flag(&o, c)))
			live_opt = f;
		else if (!both_flag(&o, c)) /* 'h', ':' or '?' */
			tc_getopt_default(c, argv, usage);
	}
	check_common(argc, argv, &o);
	if (offline_opt) {
		check_offline(&o, live_opt, offline_opt);
		rc = run_offline(&o);
	} else {
		if (o.have_interval && o.since_start)
			tc_usage_error("--interval and --since-start are two ways to measure "
				       "lambda; give one");
		rc = run_live(&o);
	}
	return tc_flush_stdout() ? 1 : rc;
}
