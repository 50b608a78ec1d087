/*
 * test_ttl.c — the TTL advisor: the worked examples of docs/ttl.md through the arithmetic of
 * tools/common/ttl.c (p99 1.15 s + 250 ms backlog + 100 ms slack = 1.50 s; a 2 s setting
 * leaves 500 ms; 120/s x 0.4% x 1.5 s = 0.72 live failed predictions, 2.4 at 5 s; the cap
 * clamps), its parsers and formatters, and the built kvidx-ttl tool offline (those numbers in
 * its output lines and its JSON), on bad usage, and live against an index the test builds with
 * the writer API, filling per-pod counters and latency histograms as ingestd would.
 *
 * The tool is found through KVIDX_BIN (`make test` sets it); the tests fail loudly without it.
 * Each live test creates its own index "t-ttl-<pid>-<n>", unlinked in teardown.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hist.h"
#include "inspect.h"
#include "kvidx_writer.h"
#include "telemetry.h"
#include "sweep.h"
#include "duration.h"
#include "ttl.h"
#include "util_index.h"
#include "util_run.h"
#include "util_text.h"

static char name[64];
static struct kvidx *w;

static void setup(void)
{
	tu_index_name(name, sizeof(name), "ttl");
}

static void teardown(void)
{
	tu_index_remove(name, &w);
}

TestSuite(ttl, .init = setup, .fini = teardown);

/* ---- helpers ---- */

/* Runs "$KVIDX_BIN/kvidx-ttl ARGS" through sh; the caller frees r.out. */
#define run_ttl(...) tu_run_tool("kvidx-ttl", __VA_ARGS__)

/* The line of out that contains needle (a copy, static), for asserting on one line. */
static const char *line_with(const char *out, const char *needle)
{
	static char line[1024];
	const char *p = strstr(out, needle);

	cr_assert_not_null(p, "no line with %s in:\n%s", needle, out);
	const char *b = p, *e = strchr(p, '\n');
	while (b > out && b[-1] != '\n')
		b--;
	if (!e)
		e = p + strlen(p);
	cr_assert_lt((size_t)(e - b), sizeof(line));
	memcpy(line, b, (size_t)(e - b));
	line[e - b] = '\0';
	return line;
}

Test(ttl, json_checker_can_fail)
{
	cr_assert(tu_json_object("{\"a\": [1, 2.5, null, true], \"b\": {\"c\": \"x\"}}", NULL));
	cr_assert(!tu_json_object("{\"a\": 1,}", NULL));
	cr_assert(!tu_json_object("{\"a\": inf}", NULL));
	cr_assert(!tu_json_object("{\"a\": 1} {}", NULL));
	cr_assert(!tu_json_object("{\"a\": \"\x01\"}", NULL));
}

/* ---- the arithmetic: docs/ttl.md's examples ---- */

static struct ttl_plan seed_plan(void)
{
	struct ttl_plan p = { .lq = 1.15, .backlog = 0.25, .slack = 0.10, .cap = 5.0 };

	ttl_plan_compute(&p);
	return p;
}

Test(ttl, seed_t_is_lq_plus_j)
{
	struct ttl_plan p = seed_plan();
	char buf[256];

	cr_assert_float_eq(p.j, 0.35, 1e-12);
	cr_assert_float_eq(p.t, 1.50, 1e-12, "T = %.17g", p.t);
	cr_assert_float_eq(p.rec, p.t, 0);
	cr_assert_eq(p.bound, 0);
	cr_assert_str_eq(ttl_fmt_arith(buf, sizeof(buf), &p),
			 "T = Lq + J = 1.150 s + (0.250 s backlog + 0.100 s slack) = 1.500 s");
	/* Round only after the arithmetic: 1.15 + 0.25 + 0.10 is not exactly 1.5 in binary,
	 * and must not become 1501 ms by rounding up an intermediate result. */
	cr_assert_eq(ttl_ms_ceil(p.t), 1500);
	cr_assert_str_eq(ttl_fmt_recommend(buf, sizeof(buf), &p),
			 "recommended TTL 1.500 s (ttl_ms 1500): T is under the 5 s cap, 3.5 s to "
			 "spare");
}

Test(ttl, seed_two_second_setting_leaves_500ms)
{
	struct ttl_plan p = seed_plan();
	char buf[256];

	cr_assert_float_eq(TTL_DEFAULT_S - p.t, 0.5, 1e-12);
	cr_assert_str_eq(ttl_fmt_room(buf, sizeof(buf), 2.0, p.t),
			 "a 2 s setting would leave 500 ms of additional room");
	cr_assert_str_eq(ttl_fmt_room(buf, sizeof(buf), 1.0, p.t),
			 "a 1 s setting would fall 500 ms short of T: expect early expiries");
	cr_assert_str_eq(ttl_fmt_room(buf, sizeof(buf), 1.5, p.t),
			 "a 1.5 s setting would leave no additional room");
}

Test(ttl, seed_exposure)
{
	struct ttl_plan p = seed_plan();
	char buf[256];

	cr_assert_float_eq(ttl_exposure(120, 0.004, p.t), 0.72, 1e-12);
	cr_assert_float_eq(ttl_exposure(120, 0.004, 5.0), 2.4, 1e-12);
	cr_assert_str_eq(ttl_fmt_exposure(buf, sizeof(buf), 120, 0.004, p.t),
			 "120 /s x 0.004 x 1.500 s = 0.72 requests' worth of live failed "
			 "predictions");
	cr_assert_str_eq(ttl_fmt_exposure(buf, sizeof(buf), 120, 0.004, 5.0),
			 "120 /s x 0.004 x 5.000 s = 2.4 requests' worth of live failed predictions");
	/* Linear in each factor. */
	cr_assert_float_eq(ttl_exposure(240, 0.004, 1.5), 1.44, 1e-12);
	cr_assert_float_eq(ttl_exposure(120, 0, 1.5), 0, 0);
}

Test(ttl, cap_clamps_and_floor_raises)
{
	struct ttl_plan p = { .lq = 6.0, .backlog = 0.25, .slack = 0.10, .cap = 5.0 };
	char buf[256];

	ttl_plan_compute(&p);
	cr_assert_float_eq(p.t, 6.35, 1e-12);
	cr_assert_float_eq(p.rec, 5.0, 0);
	cr_assert_eq(p.bound, 1);
	ttl_fmt_recommend(buf, sizeof(buf), &p);
	tu_assert_has(buf, "recommended TTL 5.000 s (ttl_ms 5000): capped");
	tu_assert_has(buf, "T = 6.350 s exceeds the 5 s cap by 1.35 s");

	/* Exactly at the cap is not capped. */
	struct ttl_plan at = { .lq = 4.65, .backlog = 0.25, .slack = 0.10, .cap = 5.0 };
	ttl_plan_compute(&at);
	cr_assert_leq(at.rec, 5.0);
	cr_assert_float_eq(at.rec, 5.0, 1e-12);

	struct ttl_plan lo = { .lq = 0.1, .backlog = 0.25, .slack = 0.10, .floor = 1.0,
			       .cap = 5.0 };
	ttl_plan_compute(&lo);
	cr_assert_float_eq(lo.t, 0.45, 1e-12);
	cr_assert_float_eq(lo.rec, 1.0, 0);
	cr_assert_eq(lo.bound, -1);
	tu_assert_has(ttl_fmt_recommend(buf, sizeof(buf), &lo), "raised to the 1 s floor");
}

Test(ttl, parse_durations)
{
	static const struct {
		const char *s;
		double v;
	} ok[] = {
		{ "1.15s", 1.15 }, { "250ms", 0.25 }, { "100ms", 0.1 }, { "500us", 0.0005 },
		{ "2s", 2.0 },     { "0.5m", 30.0 },  { "1.s", 1.0 },   { ".5s", 0.5 },
		{ "0", 0.0 },      { "7\xc2\xb5s", 7e-6 },
	};
	static const char *bad[] = { "",     "s",   "-1s", "+1s", "1e3", "inf", "nan",  "1 s",
				     " 1s",  "1h",  "0x10", "1.2.3", "1ms ", "ms", ".", "1sec" };
	double v;

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		cr_assert_eq(tc_parse_duration(ok[i].s, &v), 0, "%s", ok[i].s);
		cr_assert_float_eq(v, ok[i].v, 1e-12, "%s -> %g", ok[i].s, v);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		cr_assert_eq(tc_parse_duration(bad[i], &v), -EINVAL, "'%s' accepted", bad[i]);
	/* One grammar for every tool: a unit is required, except for 0. */
	cr_assert_eq(tc_parse_duration("250", &v), -EDOM);
	cr_assert_eq(tc_parse_duration("1.", &v), -EDOM);
	cr_assert_str_eq(tc_duration_error(-EDOM), "needs a unit (us, ms, s or m)");
	cr_assert_eq(tc_parse_duration("90000s", &v), -ERANGE);
	cr_assert_eq(tc_parse_duration("86400s", &v), 0);
}

Test(ttl, parse_numbers_and_probabilities)
{
	double v;

	cr_assert_eq(ttl_parse_number("120", &v), 0);
	cr_assert_float_eq(v, 120, 0);
	cr_assert_eq(ttl_parse_number("0.5", &v), 0);
	cr_assert_eq(ttl_parse_number("-1", &v), -EINVAL);
	cr_assert_eq(ttl_parse_number("12/s", &v), -EINVAL);
	cr_assert_eq(ttl_parse_number("", &v), -EINVAL);
	cr_assert_eq(ttl_parse_probability("0.004", &v), 0);
	cr_assert_float_eq(v, 0.004, 1e-15);
	cr_assert_eq(ttl_parse_probability("0.4%", &v), 0);
	cr_assert_float_eq(v, 0.004, 1e-15);
	cr_assert_eq(ttl_parse_probability("100%", &v), 0);
	cr_assert_float_eq(v, 1.0, 0);
	cr_assert_eq(ttl_parse_probability("1.5", &v), -ERANGE);
	cr_assert_eq(ttl_parse_probability("101%", &v), -ERANGE);
	cr_assert_eq(ttl_parse_probability("x", &v), -EINVAL);
	cr_assert_eq(ttl_parse_probability("0.4%%", &v), -EINVAL);
}

Test(ttl, formatters)
{
	char b[64];

	cr_assert_str_eq(ttl_fmt_num(b, sizeof(b), 0.72), "0.72");
	cr_assert_str_eq(ttl_fmt_num(b, sizeof(b), 0.7200000000000001), "0.72");
	cr_assert_str_eq(ttl_fmt_num(b, sizeof(b), 2.4), "2.4");
	cr_assert_str_eq(ttl_fmt_num(b, sizeof(b), 120), "120");
	cr_assert_str_eq(ttl_fmt_num(b, sizeof(b), 0.004), "0.004");
	cr_assert_str_eq(ttl_fmt_num(b, sizeof(b), 12345.6), "12346");
	cr_assert_str_eq(ttl_fmt_num(b, sizeof(b), 0), "0");
	cr_assert_str_eq(ttl_fmt_dur(b, sizeof(b), 2.0), "2 s");
	cr_assert_str_eq(ttl_fmt_dur(b, sizeof(b), 1.5), "1.5 s");
	cr_assert_str_eq(ttl_fmt_dur(b, sizeof(b), 0.5), "500 ms");
	cr_assert_str_eq(ttl_fmt_dur(b, sizeof(b), 2.0 - (1.15 + 0.25 + 0.10)), "500 ms");
	cr_assert_str_eq(ttl_fmt_dur(b, sizeof(b), 0.00025), "250 us");
	cr_assert_str_eq(ttl_fmt_dur(b, sizeof(b), 0.180223), "180.223 ms");
	cr_assert_str_eq(ttl_fmt_dur(b, sizeof(b), 0.9999996), "1 s");
	cr_assert_str_eq(ttl_fmt_fixed(b, sizeof(b), 1.15), "1.150 s");
	cr_assert_str_eq(ttl_fmt_fixed(b, sizeof(b), -0.0001), "0.000 s");
	cr_assert_str_eq(ttl_fmt_pct_name(b, sizeof(b), 0.99), "p99");
	cr_assert_str_eq(ttl_fmt_pct_name(b, sizeof(b), 0.999), "p99.9");
	cr_assert_str_eq(ttl_fmt_pct_name(b, sizeof(b), 0.5), "p50");
	cr_assert_eq(ttl_ms_ceil(0.0015001), 2);
	cr_assert_eq(ttl_ms_ceil(0), 0);
}

/* ---- the tool, offline ---- */

#define SEED_ARGS "--p99 1.15s --backlog 250ms --slack 100ms --rate 120 --fail 0.004"

Test(ttl, tool_offline_seed_example)
{
	struct tu_run r = run_ttl(SEED_ARGS " 2>&1");

	cr_assert_eq(r.status, 0, "%s", r.out);
	tu_assert_has(line_with(r.out, "Lq = p99"), "Lq = p99 = 1.150 s");
	tu_assert_has(r.out, "\n  T = Lq + J = 1.150 s + (0.250 s backlog + 0.100 s slack) = 1.500 "
			     "s\n");
	tu_assert_has(line_with(r.out, "recommended TTL"), "recommended TTL 1.500 s (ttl_ms 1500)");
	tu_assert_has(line_with(r.out, "recommended TTL"), "under the 5 s cap");
	/* Without --ttl, the documented 2 s default is compared, as docs/ttl.md does. */
	tu_assert_has(line_with(r.out, "documented default"),
		      "a 2 s setting would leave 500 ms of additional room");
	tu_assert_has(line_with(r.out, "at the recommended TTL"),
		      "120 /s x 0.004 x 1.500 s = 0.72 requests' worth of live failed predictions");
	free(r.out);

	r = run_ttl(SEED_ARGS " --ttl 2s --ttl 5s");
	cr_assert_eq(r.status, 0, "%s", r.out);
	tu_assert_has(r.out, "a 2 s setting would leave 500 ms of additional room\n");
	tu_assert_has(r.out, "a 5 s setting would leave 3.5 s of additional room\n");
	tu_assert_has(line_with(r.out, "at 5 s:"),
		      "120 /s x 0.004 x 5.000 s = 2.4 requests' worth of live failed predictions");
	tu_assert_has(line_with(r.out, "at 2 s:"), "120 /s x 0.004 x 2.000 s = 0.96 requests'");
	tu_assert_lacks(r.out, "documented default");
	free(r.out);
}

Test(ttl, tool_offline_json)
{
	struct tu_run r = run_ttl(SEED_ARGS " --p50 180ms --p95 620ms --ttl 5s --json");

	cr_assert_eq(r.status, 0, "%s", r.out);
	tu_assert_json(r.out);
	tu_assert_has(r.out, "\"mode\": \"offline\"");
	tu_assert_has(r.out, "\"percentile\": \"p99\"");
	tu_assert_has(r.out, "\"p50\": 0.18");
	tu_assert_has(r.out, "\"p95\": 0.62");
	tu_assert_has(r.out, "\"lq_s\": 1.15,");
	tu_assert_has(r.out, "\"t_s\": 1.5,");
	tu_assert_has(r.out, "\"recommended_ms\": 1500,");
	tu_assert_has(r.out, "\"capped\": false,");
	tu_assert_has(r.out, "\"exposure_at_recommended\": 0.72,");
	tu_assert_has(r.out, "\"ttl_s\": 5, \"source\": \"--ttl\", \"room_s\": 3.5,");
	tu_assert_has(r.out, "\"exposure\": 2.4,");
	tu_assert_has(r.out, "\"arithmetic\": \"T = Lq + J = 1.150 s + (0.250 s backlog + 0.100 s "
			     "slack) = 1.500 s\"");
	free(r.out);
}

Test(ttl, tool_offline_percentile_choice_and_cap)
{
	/* --percentile picks which given value is Lq. */
	struct tu_run r = run_ttl("--p50 180ms --p95 620ms --p99 1.15s --percentile 0.95");
	cr_assert_eq(r.status, 0, "%s", r.out);
	tu_assert_has(r.out, "latency: p50 180 ms, p95 620 ms, p99 1.15 s\n");
	tu_assert_has(r.out, "Lq = p95 = 0.620 s\n");
	tu_assert_has(r.out, "T = Lq + J = 0.620 s + (0.250 s backlog + 0.100 s slack) = 0.970 "
			     "s\n");
	tu_assert_has(r.out, "a 2 s setting would leave 1.03 s of additional room");
	tu_assert_has(r.out, "give --rate and --fail");
	free(r.out);

	/* The generic form, named. */
	r = run_ttl("--lq 1150ms --percentile-name p99 --backlog 0.25s --slack 100ms");
	cr_assert_eq(r.status, 0, "%s", r.out);
	tu_assert_has(r.out, "Lq = p99 = 1.150 s\n");
	tu_assert_has(r.out, "= 1.500 s\n");
	free(r.out);
	r = run_ttl("--lq 1.15s --percentile 99.9%%");
	cr_assert_eq(r.status, 0, "%s", r.out);
	tu_assert_has(r.out, "Lq = p99.9 = 1.150 s\n");
	free(r.out);

	/* The cap clamps. */
	r = run_ttl("--p99 6s --cap 5s --rate 100 --fail 1%%");
	cr_assert_eq(r.status, 0, "%s", r.out);
	tu_assert_has(r.out, "T = Lq + J = 6.000 s + (0.250 s backlog + 0.100 s slack) = 6.350 "
			     "s\n");
	tu_assert_has(r.out, "recommended TTL 5.000 s (ttl_ms 5000): capped; T = 6.350 s exceeds "
			     "the 5 s cap by 1.35 s");
	tu_assert_has(r.out, "a 2 s setting would fall 4.35 s short of T: expect early expiries");
	tu_assert_has(r.out, "100 /s x 0.01 x 5.000 s = 5 requests' worth");
	free(r.out);
	r = run_ttl("--p99 6s --cap 5s --json");
	cr_assert_eq(r.status, 0, "%s", r.out);
	tu_assert_json(r.out);
	tu_assert_has(r.out, "\"recommended_s\": 5,");
	tu_assert_has(r.out, "\"capped\": true,");
	tu_assert_has(r.out, "\"exposure_at_recommended\": null");
	free(r.out);
}

Test(ttl, tool_bad_usage)
{
	static const struct {
		const char *args, *msg;
	} bad[] = {
		{ "--p99 abc", "bad --p99 'abc': expected a duration" },
		{ "--p99 1s --backlog 250", "bad --backlog '250': needs a unit (us, ms, s or m)" },
		{ "--p95 -1s", "bad --p95 '-1s'" },
		{ "--p99", "option '--p99' requires an argument" },
		{ "--p99 1s --rate 120", "--rate and --fail go together" },
		{ "--p99 1s --fail 0.1", "--rate is missing" },
		{ "--rate 120 --fail 0.004", "offline mode needs a latency percentile" },
		{ "--p99 1s --name x", "--name reads a live index, but --p99 gives offline numbers" },
		{ "--p99 1s --interval 2s", "--interval reads a live index" },
		{ "--p99 1s --percentile 0.95", "--percentile 0.95 selects the p95, which was not "
						"given" },
		{ "--p99 1s --cap 70s", "bad --cap '70s'" },
		{ "--p99 1s --cap 0", "bad --cap '0'" },
		{ "--p99 1s --floor 6s", "--floor (6s) is above --cap (5s)" },
		{ "--p99 1s --fail 2 --rate 1", "bad --fail '2'" },
		{ "--p99 1s --rate 1e3 --fail 0", "bad --rate '1e3'" },
		{ "--p99 1s --percentile 0", "bad --percentile '0'" },
		{ "--p99 1s --ttl 0", "bad --ttl '0'" },
		{ "--p99 1s --percentile-name 'a b'", "bad --percentile-name 'a b'" },
		{ "--interval 1s --since-start", "--interval and --since-start" },
		{ "--percentile-name p99", "offline mode needs a latency percentile" },
		{ "--name ../x", "bad --name '../x'" },
		{ "--bogus", "unknown option '--bogus'" },
		{ "-q", "unknown option '-q'" },
		{ "extra", "unexpected argument 'extra'" },
		{ "--p99 1s --ttl 1s --ttl 1s --ttl 1s --ttl 1s --ttl 1s --ttl 1s --ttl 1s --ttl 1s "
		  "--ttl 1s", "too many --ttl settings" },
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct tu_run r = run_ttl("%s 2>/dev/null", bad[i].args);
		cr_assert_eq(r.status, 2, "%s: exit %d", bad[i].args, r.status);
		cr_assert_str_eq(r.out, "", "%s: printed on stdout:\n%s", bad[i].args, r.out);
		free(r.out);
		r = run_ttl("%s 2>&1", bad[i].args);
		tu_assert_has(r.out, bad[i].msg);
		tu_assert_has(r.out, "Try 'kvidx-ttl --help' for more information.\n");
		free(r.out);
	}
}

Test(ttl, tool_help)
{
	struct tu_run r = run_ttl("--help 2>/dev/null");
	static const char *opts[] = { "--p50 D", "--p95 D", "--p99 D", "--lq D", "--percentile Q",
				      "--percentile-name NAME", "--rate R", "--fail P", "--ttl D",
				      "--cap D", "--floor D", "--backlog D", "--slack D",
				      "--name NAME", "--pod NAME", "--interval D", "--since-start",
				      "--cumulative", "--stale-limit P", "--json", "--help",
				      "Exit status" };

	cr_assert_eq(r.status, 0);
	tu_assert_has(r.out, "Usage: kvidx-ttl");
	for (size_t i = 0; i < sizeof(opts) / sizeof(opts[0]); i++)
		tu_assert_has(r.out, opts[i]);
	free(r.out);
}

/* ---- the tool, live ---- */

static struct kvidx *open_index(void)
{
	struct kvidx_writer_opts o = { .geo = { .capacity = 1000, .pods_per_key = 4,
						.max_pods = 16, .max_readers = 8 } };

	return tu_writer_open(name, &o);
}

/* What the tool prints for a sample of us microseconds: its bucket's upper bound. */
static double bucket_s(uint64_t us)
{
	return (double)kv_hist_upper(kv_hist_bucket(us)) / 1e6;
}

/*
 * Pod "a": docs/ttl.md's distribution in the recent histogram (p50 180 ms, p95 620 ms, p99
 * 1.15 s over 1000 confirmations), a slower one in the cumulative histogram, TTL in force
 * 2 s, 1000 routes (all with new predictions) of which 4 went stale (p = 0.004). Pod "b":
 * nothing yet.
 */
static void seed_pods(int *pa, int *pb)
{
	int a = kvidx_pod_add(w, "10.0.0.1:8000", "llama-3");
	int b = kvidx_pod_add(w, "10.0.0.2:8000", "llama-3");

	cr_assert_geq(a, 0);
	cr_assert_geq(b, 0);
	tu_add_latency(w, a, KV_HIST_CONFIRM_RECENT, 180000, 500);
	tu_add_latency(w, a, KV_HIST_CONFIRM_RECENT, 620000, 450);
	tu_add_latency(w, a, KV_HIST_CONFIRM_RECENT, 1150000, 50);
	tu_add_latency(w, a, KV_HIST_CONFIRM, 180000, 500);
	tu_add_latency(w, a, KV_HIST_CONFIRM, 620000, 450);
	tu_add_latency(w, a, KV_HIST_CONFIRM, 3000000, 50);
	tu_set_pod_ctr(w, a, KV_PC_ttl_ms, 2000);
	tu_set_pod_ctr(w, a, KV_PC_speculations, 1000);
	tu_set_pod_ctr(w, a, KV_PC_confirmed_in_time, 994);
	tu_set_pod_ctr(w, a, KV_PC_early_expiries, 2);
	tu_set_pod_ctr(w, a, KV_PC_stale_expiries, 4);
	tu_set_pod_ctr(w, a, KV_PC_late_confirmations, 2);
	tu_set_pod_ctr(w, a, KV_PC_spec_routes, 1000);
	tu_set_pod_ctr(w, a, KV_PC_routes_stale_expiries, 4);
	tu_set_pod_ctr(w, a, KV_PC_routes_predicted, 300);
	tu_set_pod_ctr(w, a, KV_PC_routes_confirmed, 600);
	tu_set_pod_ctr(w, a, KV_PC_routes_nomatch, 100);
	tu_set_pod_ctr(w, a, KV_PC_last_event_ns, kvidx_now_ns());
	*pa = a;
	*pb = b;
}

Test(ttl, tool_live_text)
{
	char want[512], d1[32], d2[32], d3[32];
	int a, b;

	w = open_index();
	seed_pods(&a, &b);
	struct tu_run r = run_ttl("--name %s --interval 50ms 2>&1", name);
	cr_assert_eq(r.status, 0, "%s", r.out);

	tu_assert_has(r.out, "2 active pods; Lq = p99 of recent route-to-confirmation latency");
	tu_assert_has(r.out, "\npod 10.0.0.1:8000 (model \"llama-3\")\n");
	/* Percentiles: the recent and the cumulative histogram, as bucket upper bounds. */
	snprintf(want, sizeof(want), "latency, recent     (1000 confirmations): p50 %s p95 %s p99 %s",
		 ttl_fmt_dur(d1, sizeof(d1), bucket_s(180000)),
		 ttl_fmt_dur(d2, sizeof(d2), bucket_s(620000)),
		 ttl_fmt_dur(d3, sizeof(d3), bucket_s(1150000)));
	tu_assert_has(r.out, want);
	tu_assert_has(want, "p50 180.223 ms"); /* the bucket bound is what the test expects */
	snprintf(want, sizeof(want), "latency, cumulative (1000 confirmations): p50 %s p95 %s p99 %s",
		 d1, d2, ttl_fmt_dur(d3, sizeof(d3), bucket_s(3000000)));
	tu_assert_has(r.out, want);
	/* T from the recent p99. */
	struct ttl_plan pl = { .lq = bucket_s(1150000), .backlog = 0.25, .slack = 0.1,
			       .cap = 5 };
	ttl_plan_compute(&pl);
	char arith[256];
	snprintf(want, sizeof(want), "  %s\n", ttl_fmt_arith(arith, sizeof(arith), &pl));
	tu_assert_has(r.out, want);
	tu_assert_has(r.out, "T = Lq + J = 1.180 s + (0.250 s backlog + 0.100 s slack) = 1.530 "
			     "s\n");
	tu_assert_has(r.out, "recommended TTL 1.530 s (ttl_ms 1530): T is under the 5 s cap");
	snprintf(want, sizeof(want), "TTL in force 2 s: %s\n",
		 ttl_fmt_room(arith, sizeof(arith), 2.0, pl.t));
	tu_assert_has(r.out, want);
	tu_assert_has(want, "would leave 470.353 ms of additional room");
	tu_assert_has(r.out, "speculations 1000, confirmed in time 994, early expiries 2, stale "
			     "expiries 4, late confirmations 2\n");
	tu_assert_has(r.out, "failed-prediction probability p = stale routes / routes = 4 / 1000 = "
			     "0.004\n");
	tu_assert_has(r.out, "token-weighted: 4 stale records x 16 tokens over 4 stale routes = 16 "
			     "prefix tokens at stake per failed route\n");
	tu_assert_has(r.out, "J's backlog: assumed: no event lag measured yet;");
	/* No routes during the sample: lambda 0, so no live failed predictions. */
	tu_assert_has(r.out, "routed rate lambda = 0 /s (0 routes in a ");
	tu_assert_has(r.out, "stale exposure at the recommended TTL: 0 /s x 0.004 x 1.530 s = 0 "
			     "requests' worth");
	tu_assert_has(r.out, "stale exposure at the TTL in force:    0 /s x 0.004 x 2.000 s = 0 ");
	tu_assert_has(r.out, "freshness: fresh, last event ");
	/* Pod b has nothing to go on. */
	const char *pb = strstr(r.out, "\npod 10.0.0.2:8000");
	cr_assert_not_null(pb, "%s", r.out);
	tu_assert_has(pb, "latency, recent     no confirmations yet\n");
	tu_assert_has(pb, "latency, cumulative no confirmations yet\n");
	tu_assert_has(pb, "TTL in force: not reported (pod counter ttl_ms is 0)\n");
	tu_assert_has(pb, "failed-prediction probability p: no routes yet\n");
	tu_assert_has(pb, "freshness: fresh, no events yet\n");
	tu_assert_has(pb, "guidance: no confirmations yet: no measured Lq; start from the "
			  "documented 2 s default\n");
	tu_assert_lacks(pb, "T = Lq + J");
	free(r.out);

	/* --cumulative takes Lq from the other histogram. */
	r = run_ttl("--name %s --interval 10ms --cumulative --pod 10.0.0.1:8000 --ttl 1s", name);
	cr_assert_eq(r.status, 0, "%s", r.out);
	snprintf(want, sizeof(want), "Lq = p99 of cumulative latency = %s\n",
		 ttl_fmt_fixed(d1, sizeof(d1), bucket_s(3000000)));
	tu_assert_has(r.out, want);
	tu_assert_lacks(r.out, "10.0.0.2:8000");
	/* A --ttl setting is compared too. */
	tu_assert_has(r.out, "compared: a 1 s setting would fall ");
	tu_assert_has(r.out, "stale exposure at 1 s: 0 /s x 0.004 x 1.000 s = 0 ");
	free(r.out);
}

/* Bumps pod's routes_predicted by 10 every millisecond until stopped. */
struct bumper {
	int pod;
	volatile int stop; /* test-local flag between two threads of this process */
	pthread_t t;
};

static void *bump(void *arg)
{
	struct bumper *b = arg;
	uint64_t *ctr = kv_writer_pod_ctrs(w, b->pod);

	while (!__atomic_load_n(&b->stop, __ATOMIC_RELAXED)) {
		st_relaxed(&ctr[KV_PC_routes_predicted], ld_relaxed(&ctr[KV_PC_routes_predicted]) + 10);
		usleep(1000);
	}
	return NULL;
}

Test(ttl, tool_live_json_rate_and_exposure)
{
	struct bumper bp = { 0 };
	int a, b;

	w = open_index();
	seed_pods(&a, &b);
	bp.pod = a;
	cr_assert_eq(pthread_create(&bp.t, NULL, bump, &bp), 0);
	struct tu_run r = run_ttl("--name %s --interval 300ms --json", name);
	__atomic_store_n(&bp.stop, 1, __ATOMIC_RELAXED);
	pthread_join(bp.t, NULL);
	cr_assert_eq(r.status, 0, "%s", r.out);
	tu_assert_json(r.out);
	tu_assert_has(r.out, "\"mode\": \"live\"");
	tu_assert_has(r.out, "\"percentile_name\": \"p99\"");
	tu_assert_has(r.out, "\"rate_source\": \"interval\"");

	const char *pa = strstr(r.out, "\"10.0.0.1:8000\": {");
	cr_assert_not_null(pa, "%s", r.out);
	const char *pa_end = strchr(pa, '\n');
	cr_assert_not_null(pa_end);
	char line[4096];
	cr_assert_lt((size_t)(pa_end - pa), sizeof(line));
	memcpy(line, pa, (size_t)(pa_end - pa));
	line[pa_end - pa] = '\0';
	tu_assert_has(line, "\"model\": \"llama-3\"");
	tu_assert_has(line, "\"confirmations_recent\": 1000");
	/* p per route: 4 stale routes over the routes counted when the tool looked (the bumper
	 * adds routes while it samples). */
	double pf = tu_number_after(line, "\"fail_p\": ");
	double nroutes = tu_number_after(line, "\"routes\": ");
	cr_assert_geq(nroutes, 1000);
	cr_assert_float_eq(pf, 4.0 / nroutes, 1e-5 * pf, "p %g over %g routes", pf, nroutes);
	tu_assert_has(line, "\"ttl_in_force_s\": 2,");
	tu_assert_has(line, "\"stale_expiries\": 4,");
	tu_assert_has(line, "\"freshness\": \"fresh\"");
	double lq = tu_number_after(line, "\"lq_s\": ");
	double t = tu_number_after(line, "\"t_s\": ");
	double rec = tu_number_after(line, "\"recommended_s\": ");
	double lambda = tu_number_after(line, "\"rate_per_s\": ");
	double ex = tu_number_after(line, "\"exposure_at_recommended\": ");
	double ex_now = tu_number_after(line, "\"exposure_at_ttl_in_force\": ");
	cr_assert_float_eq(lq, bucket_s(1150000), 1e-9);
	cr_assert_float_eq(t, lq + 0.35, 1e-9);
	cr_assert_float_eq(rec, t, 1e-9);
	/* At most 10 routes a millisecond (the bumper sleeps at least 1 ms between steps); how
	 * many fewer depends on scheduling: positive and bounded. */
	cr_assert_gt(lambda, 0, "lambda %g", lambda);
	cr_assert_lt(lambda, 20000, "lambda %g", lambda);
	cr_assert_float_eq(ex, lambda * pf * rec, 1e-6 * ex + 1e-9, "%g vs %g", ex,
			   lambda * pf * rec);
	cr_assert_float_eq(ex_now, lambda * pf * 2.0, 1e-6 * ex_now + 1e-9);

	const char *pbj = strstr(r.out, "\"10.0.0.2:8000\": {");
	cr_assert_not_null(pbj, "%s", r.out);
	tu_assert_has(pbj, "\"latency_recent_s\": null");
	tu_assert_has(pbj, "\"fail_p\": null");
	tu_assert_has(pbj, "\"rate_per_s\": 0,");
	free(r.out);

	/* --since-start: lambda from the counters over the generation's age, no wait. */
	r = run_ttl("--name %s --since-start --pod 10.0.0.1:8000", name);
	cr_assert_eq(r.status, 0, "%s", r.out);
	tu_assert_has(r.out, "routes in ");
	tu_assert_has(r.out, "since the index generation was created)\n");
	free(r.out);
}

Test(ttl, tool_live_guidance)
{
	int a, b, c;

	w = open_index();
	seed_pods(&a, &b);
	c = kvidx_pod_add(w, "10.0.0.3:8000", "llama-3");
	cr_assert_geq(c, 0);
	/* a: fresh and healthy: no guidance line. */
	/* b: the event path is longer than the TTL: 5% of confirmations arrive after expiry. */
	tu_add_latency(w, b, KV_HIST_CONFIRM_RECENT, 400000, 200);
	tu_set_pod_ctr(w, b, KV_PC_ttl_ms, 300);
	tu_set_pod_ctr(w, b, KV_PC_speculations, 1000);
	tu_set_pod_ctr(w, b, KV_PC_confirmed_in_time, 950);
	tu_set_pod_ctr(w, b, KV_PC_early_expiries, 50);
	/* c: predictions that never confirm, and a broken pipeline. */
	tu_add_latency(w, c, KV_HIST_CONFIRM_RECENT, 400000, 200);
	tu_set_pod_ctr(w, c, KV_PC_speculations, 1000);
	tu_set_pod_ctr(w, c, KV_PC_confirmed_in_time, 900);
	tu_set_pod_ctr(w, c, KV_PC_stale_expiries, 100);
	tu_set_pod_ctr(w, c, KV_PC_routes_predicted, 1000);
	tu_set_pod_ctr(w, c, KV_PC_routes_stale_expiries, 100);
	tu_set_pod_ctr(w, c, KV_PC_spec_paused, 2);
	cr_assert_eq(kvidx_pod_set_spec_paused(w, c, true), 0);

	struct tu_run r = run_ttl("--name %s --interval 10ms", name);
	cr_assert_eq(r.status, 0, "%s", r.out);
	const char *pb = strstr(r.out, "\npod 10.0.0.2:8000");
	const char *pc = strstr(r.out, "\npod 10.0.0.3:8000");
	cr_assert(pb && pc && pb < pc, "%s", r.out);
	char a_part[8192];
	size_t alen = (size_t)(pb - r.out);
	cr_assert_lt(alen, sizeof(a_part));
	memcpy(a_part, r.out, alen);
	a_part[alen] = '\0';
	tu_assert_lacks(a_part, "guidance:");

	char b_part[8192];
	size_t blen = (size_t)(pc - pb);
	cr_assert_lt(blen, sizeof(b_part));
	memcpy(b_part, pb, blen);
	b_part[blen] = '\0';
	tu_assert_has(b_part, "guidance: early expiries high (5% of confirmed predictions, above "
			      "the 1% a p99 target accepts): TTL shorter than the event path\n");
	tu_assert_has(b_part, "a 300 ms setting would fall");
	tu_assert_lacks(b_part, "stale expiries high");

	tu_assert_has(pc, "freshness: pipeline broken, speculation paused");
	tu_assert_has(pc, "guidance: pipeline broken: fix the subscriber; do not stretch the "
			  "TTL\n");
	tu_assert_has(pc, "guidance: stale expiries high (10% of routes, above the 1% "
			  "limit): failed predictions or lost events; a longer TTL will not "
			  "help\n");
	tu_assert_lacks(pc, "early expiries high");
	free(r.out);

	/* A laxer stale limit silences the stale line; a stricter percentile the early one. */
	r = run_ttl("--name %s --interval 10ms --stale-limit 20%% --percentile 0.9", name);
	cr_assert_eq(r.status, 0, "%s", r.out);
	tu_assert_lacks(r.out, "stale expiries high");
	tu_assert_lacks(r.out, "early expiries high");
	tu_assert_has(r.out, "Lq = p90 of recent latency");
	free(r.out);

	/* Replaying or disconnected. */
	tu_set_pod_ctr(w, c, KV_PC_spec_paused, 1);
	r = run_ttl("--name %s --interval 10ms --pod 10.0.0.3:8000 --json", name);
	cr_assert_eq(r.status, 0, "%s", r.out);
	tu_assert_json(r.out);
	tu_assert_has(r.out, "\"freshness\": \"replaying-disconnected\"");
	tu_assert_has(r.out, "replaying or disconnected: speculation is paused");
	free(r.out);
}

Test(ttl, tool_live_errors)
{
	int a, b;

	struct tu_run r = run_ttl("--name %s 2>&1", name);
	cr_assert_eq(r.status, 1, "%s", r.out);
	tu_assert_has(r.out, "kvidx-ttl: index '");
	tu_assert_has(r.out, "' not found (no /dev/shm/");
	free(r.out);

	w = open_index();
	seed_pods(&a, &b);
	r = run_ttl("--name %s --interval 10ms --pod nosuch 2>&1", name);
	cr_assert_eq(r.status, 1, "%s", r.out);
	tu_assert_has(r.out, "no active pod named 'nosuch'");
	free(r.out);
}

/* ---- the TTL curve (kvidx-ttl --sweep) ------------------------------------------------------ */

#define EXP_MEAN_S 0.3
#define EXP_N 200000

/* Exponential latencies of mean 0.3 s, placed at the distribution's own quantiles
 * ((i + 0.5) / N), so that the histogram holds that distribution without sampling noise. */
static void exp_hist(uint64_t *c)
{
	memset(c, 0, KV_HIST_BUCKETS * sizeof(*c));
	for (int i = 0; i < EXP_N; i++) {
		double u = (i + 0.5) / EXP_N;
		c[kv_hist_bucket((uint64_t)(-EXP_MEAN_S * log(1 - u) * 1e6))]++;
	}
}

static double exp_tail(double t)
{
	return exp(-t / EXP_MEAN_S);
}

static const double sweep_ts[] = { 0.05, 0.1, 0.3, 0.45, 0.6, 1.0, 1.5, 2.0 };
#define NSWEEP_TS (sizeof(sweep_ts) / sizeof(sweep_ts[0]))

/* The estimate may be off by what the bucket holding t holds, and no more. */
static void assert_tail_within_bucket(double est, double t)
{
	unsigned b = kv_hist_bucket((uint64_t)(t * 1e6));
	double lo = (double)kv_hist_lower(b) / 1e6, hi = (double)(kv_hist_upper(b) + 1) / 1e6;
	double slack = exp_tail(lo) - exp_tail(hi);

	cr_assert(est >= exp_tail(t) - slack - 1e-4 && est <= exp_tail(t) + slack + 1e-4,
		  "P(latency > %g s): %g, the distribution's %g, bucket [%g, %g) holds %g", t, est,
		  exp_tail(t), lo, hi, slack);
}

Test(ttl, sweep_early_share_matches_the_distribution_tail)
{
	uint64_t c[KV_HIST_BUCKETS];

	exp_hist(c);
	for (size_t i = 0; i < NSWEEP_TS; i++)
		assert_tail_within_bucket(sweep_hist_tail(c, sweep_ts[i]), sweep_ts[i]);
	/* Monotone, 1 at 0 and nothing above every sample. */
	cr_assert_float_eq(sweep_hist_tail(c, 0), 1.0, 1e-3);
	cr_assert_eq(sweep_hist_tail(c, 1000), 0);
	for (double t = 0.01; t < 3; t += 0.01)
		cr_assert_geq(sweep_hist_tail(c, t) + 1e-12, sweep_hist_tail(c, t + 0.01));
	memset(c, 0, sizeof(c));
	cr_assert_lt(sweep_hist_tail(c, 1), 0, "an empty histogram has no tail");
	/* From percentiles: the given points exactly. */
	double pv[3] = { 0.18, 0.62, 1.15 };
	bool have[3] = { true, true, true };
	cr_assert_float_eq(sweep_pct_tail(pv, have, 0.18), 0.5, 1e-12);
	cr_assert_float_eq(sweep_pct_tail(pv, have, 0.62), 0.05, 1e-12);
	cr_assert_float_eq(sweep_pct_tail(pv, have, 1.15), 0.01, 1e-12);
	cr_assert_lt(sweep_pct_tail(pv, have, 2.0), 0.01);
}

Test(ttl, sweep_offline_reproduces_the_seed_numbers)
{
	struct tu_run r = run_ttl("--sweep " SEED_ARGS " --ttl 1.5s --ttl 5s --json");
	cr_assert_eq(r.status, 0, "%s", r.out);
	tu_assert_json(r.out);
	tu_assert_has(r.out, "\"mode\": \"sweep-offline\"");
	const char *a = strstr(r.out, "{\"ttl_s\": 1.5,");
	const char *b = strstr(r.out, "{\"ttl_s\": 5,");
	cr_assert(a && b, "%s", r.out);
	cr_assert_float_eq(tu_number_after(a, "\"failed_live\": "), 0.72, 1e-9);
	cr_assert_float_eq(tu_number_after(b, "\"failed_live\": "), 2.4, 1e-9);
	tu_assert_has(a, "\"recommended\": true");
	free(r.out);

	r = run_ttl("--sweep " SEED_ARGS " --ttl 1.5s --ttl 5s");
	cr_assert_eq(r.status, 0, "%s", r.out);
	tu_assert_has(line_with(r.out, "    1.5 s "), "0.72");
	tu_assert_has(line_with(r.out, "    1.5 s "), "<- recommended");
	tu_assert_has(line_with(r.out, "      5 s "), "2.4");
	free(r.out);

	/* Default candidates: around the recommendation and the TTL in force, both marked. */
	r = run_ttl("--sweep " SEED_ARGS " --in-force 2s --tokens 2048");
	cr_assert_eq(r.status, 0, "%s", r.out);
	tu_assert_has(line_with(r.out, "<- recommended"), "1.5 s");
	tu_assert_has(line_with(r.out, "<- in force"), "    2 s ");
	/* 120 x 0.004 x 2 = 0.96 requests' worth, x 2048 tokens. */
	tu_assert_has(line_with(r.out, "<- in force"), " 0.96 ");
	tu_assert_has(line_with(r.out, "<- in force"), " 1966 ");
	free(r.out);
}

Test(ttl, sweep_offline_from_a_saved_histogram)
{
	uint64_t c[KV_HIST_BUCKETS];
	char path[128];

	exp_hist(c);
	snprintf(path, sizeof(path), "/tmp/%s.hist", name);
	FILE *f = fopen(path, "w");
	cr_assert_not_null(f);
	fprintf(f, "# exponential, mean 300 ms\n");
	for (unsigned b = 0; b < KV_HIST_BUCKETS; b++)
		if (c[b])
			fprintf(f, "%llu %llu\n", (unsigned long long)kv_hist_lower(b),
				(unsigned long long)c[b]);
	fclose(f);
	struct tu_run r = run_ttl("--sweep --histogram %s --ttl 50ms --ttl 100ms --ttl 300ms "
				  "--ttl 450ms --ttl 600ms --ttl 1s --ttl 1.5s --ttl 2s --json",
				  path);
	unlink(path);
	cr_assert_eq(r.status, 0, "%s", r.out);
	tu_assert_json(r.out);
	tu_assert_has(r.out, "\"tail_source\": \"histogram\"");
	/* Every row (the --ttl values, and the recommendation among them) within a bucket. */
	const char *p = r.out;
	size_t asked = 0, rows = 0;
	while ((p = strstr(p, "{\"ttl_s\": "))) {
		double t = tu_number_after(p, "{\"ttl_s\": ");
		assert_tail_within_bucket(tu_number_after(p, "\"early_share\": "), t);
		for (size_t i = 0; i < NSWEEP_TS; i++)
			asked += t > sweep_ts[i] - 1e-9 && t < sweep_ts[i] + 1e-9;
		rows++;
		p++;
	}
	cr_assert_eq(asked, NSWEEP_TS, "%s", r.out);
	cr_assert_eq(rows, NSWEEP_TS + 1, "the --ttl values and the recommendation: %s", r.out);
	free(r.out);
	r = run_ttl("--sweep --histogram /nonexistent/h 2>&1");
	cr_assert_eq(r.status, 1, "%s", r.out);
	tu_assert_has(r.out, "/nonexistent/h: No such file or directory");
	free(r.out);
}

/* Runs xmllint --xpath EXPR on path; its output in a static buffer. */
static const char *xpath(const char *path, const char *expr)
{
	static char out[4096];
	char cmd[1024];

	snprintf(cmd, sizeof(cmd), "xmllint --xpath \"%s\" %s 2>&1", expr, path);
	FILE *p = popen(cmd, "r");
	cr_assert_not_null(p);
	size_t n = fread(out, 1, sizeof(out) - 1, p);
	while (n && out[n - 1] == '\n')
		n--;
	out[n] = '\0';
	pclose(p);
	return out;
}

#define SVG_EL(e) "//*[local-name()='" e "']"

Test(ttl, sweep_svg_is_well_formed_with_the_expected_points)
{
	char path[128], cmd[256];

	snprintf(path, sizeof(path), "/tmp/%s.svg", name);
	struct tu_run r = run_ttl("--sweep " SEED_ARGS " --ttl 1s --ttl 1.5s --ttl 5s --in-force 2s "
				  "--svg %s", path);
	cr_assert_eq(r.status, 0, "%s", r.out);
	free(r.out);
	snprintf(cmd, sizeof(cmd), "xmllint --noout %s", path);
	cr_assert_eq(system(cmd), 0, "%s is not well-formed XML", path);
	/* --ttl values and the TTL in force: four points on each curve. */
	cr_assert_str_eq(xpath(path, "count(" SVG_EL("circle") "[@class='failed'])"), "4");
	cr_assert_str_eq(xpath(path, "count(" SVG_EL("circle") "[@class='early'])"), "4");
	cr_assert_str_eq(xpath(path, "string(" SVG_EL("circle") "[@class='failed'][@data-t='1.5']"
				     "/@data-failed)"), "0.72");
	cr_assert_str_eq(xpath(path, "string(" SVG_EL("circle") "[@class='failed'][@data-t='5']"
				     "/@data-failed)"), "2.4");
	cr_assert_str_eq(xpath(path, "string(" SVG_EL("circle") "[@class='early'][@data-t='1.15']"
				     "/@data-early)"), "", "no point that was not asked for");
	cr_assert_str_eq(xpath(path, "string(" SVG_EL("line") "[@class='recommended']/@data-t)"),
			 "1.5");
	cr_assert_str_eq(xpath(path, "string(" SVG_EL("line") "[@class='in-force']/@data-t)"), "2");
	/* Early expiry falls as T grows. */
	double e1 = atof(xpath(path, "string(" SVG_EL("circle") "[@class='early'][@data-t='1']"
				     "/@data-early)"));
	double e5 = atof(xpath(path, "string(" SVG_EL("circle") "[@class='early'][@data-t='5']"
				     "/@data-early)"));
	cr_assert_gt(e1, e5);
	unlink(path);

	r = run_ttl("--p99 1s --svg %s 2>&1", path);
	cr_assert_eq(r.status, 2, "%s", r.out);
	tu_assert_has(r.out, "--svg draws the TTL curve: it goes with --sweep");
	free(r.out);
}

Test(ttl, sweep_live_per_pod_with_svg)
{
	char path[128], cmd[256];
	int a, b;

	w = open_index();
	seed_pods(&a, &b);
	snprintf(path, sizeof(path), "/tmp/%s.svg", name);
	struct tu_run r = run_ttl("--name %s --sweep --interval 10ms --json --svg %s", name, path);
	cr_assert_eq(r.status, 0, "%s", r.out);
	tu_assert_json(r.out);
	tu_assert_has(r.out, "\"mode\": \"sweep-live\"");
	const char *pa = strstr(r.out, "\"10.0.0.1:8000\": {");
	cr_assert_not_null(pa, "%s", r.out);
	/* The TTL in force (2 s) is a point, and its early share is the recent histogram's. */
	const char *row = strstr(pa, "{\"ttl_s\": 2,");
	cr_assert_not_null(row, "%s", r.out);
	uint64_t c[KV_HIST_BUCKETS];
	const uint64_t *h = kv_writer_pod_hist(w, a, KV_HIST_CONFIRM_RECENT);
	for (unsigned k = 0; k < KV_HIST_BUCKETS; k++)
		c[k] = h[k];
	cr_assert_float_eq(tu_number_after(row, "\"early_share\": "), sweep_hist_tail(c, 2.0),
			   1e-9);
	tu_assert_has(row, "\"in_force\": true");
	cr_assert_float_eq(tu_number_after(pa, "\"recommended_s\": "), bucket_s(1150000) + 0.35,
			   1e-9);
	free(r.out);
	snprintf(cmd, sizeof(cmd), "xmllint --noout %s", path);
	cr_assert_eq(system(cmd), 0);
	cr_assert_str_eq(xpath(path, "count(" SVG_EL("g") "[@class='panel'])"), "2");
	cr_assert_str_eq(xpath(path, "string(" SVG_EL("line") "[@class='in-force']/@data-t)"), "2");
	unlink(path);

	r = run_ttl("--name %s --sweep --interval 10ms --pod 10.0.0.1:8000", name);
	cr_assert_eq(r.status, 0, "%s", r.out);
	tu_assert_has(r.out, "TTL curve for 10.0.0.1:8000: recommended 1.53 s, TTL in force 2 s");
	tu_assert_has(line_with(r.out, "<- in force"), "    2 s ");
	free(r.out);
}
