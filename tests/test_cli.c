/*
 * test_cli.c — the command-line conventions every tool shares (tools/common/cli.c, attach.c,
 * ttl.c): the same message and exit status 2 for the same mistake in every tool (issue 10,
 * item 5): a value given to --help, an index name that breaks the naming rule, a duration
 * without a unit (refused; accepted with one: issue 8); and the per-tool checks that used to
 * be missing (--lq with --p99, a seed longer than an index holds).
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util_run.h"

/* tu_expect_usage(), and the message points at --help as the common CLI's errors do. */
static void expect_usage(const char *tool, const char *args, const char *msg)
{
	char *out = tu_expect_usage(tool, args, msg);
	char try[96];

	snprintf(try, sizeof(try), "Try '%s --help'", tool);
	cr_assert(strstr(out, try), "%s %s: no pointer to --help in: %s", tool, args, out);
	free(out);
}

static const char *const readers[] = { "kvidx-dump", "kvidx-top", "kvidx-ttl", "kvidx-route" };

Test(cli, help_with_a_value)
{
	const char *const tools[] = { "kvidx-dump", "kvidx-top", "kvidx-ttl", "kvidx-hash",
				      "kvidx-route" };

	for (size_t i = 0; i < sizeof(tools) / sizeof(tools[0]); i++)
		expect_usage(tools[i], "--help=yes", "option '--help' takes no argument");
}

Test(cli, unknown_and_incomplete_options)
{
	for (size_t i = 0; i < sizeof(readers) / sizeof(readers[0]); i++) {
		expect_usage(readers[i], "--frobnicate", "unknown option '--frobnicate'");
		expect_usage(readers[i], "--name", "option '--name' requires an argument");
	}
}

Test(cli, index_name_rule_is_the_same_everywhere)
{
	for (size_t i = 0; i < sizeof(readers) / sizeof(readers[0]); i++)
		expect_usage(readers[i], "--name ../../etc",
			     "bad --name '../../etc': expected 1 to 47 of [A-Za-z0-9_.-], not "
			     "starting with '.'");
}

Test(cli, durations_need_units_everywhere)
{
	expect_usage("kvidx-top", "--interval 250", "bad --interval '250': needs a unit");
	expect_usage("kvidx-ttl", "--p99 250", "bad --p99 '250': needs a unit");
	expect_usage("kvidx-fakepod", "--duration 5",
		     "bad --duration '5': needs a unit (us, ms, s or m)");
	expect_usage("kvidx-fakepod", "--duration 5sec", "bad --duration '5sec': expected a duration");
	expect_usage("kvidx-fakepod", "--duration 0", "bad --duration '0': must be longer than 0");
	expect_usage("kvidx-route", "--pod a:1=http://127.0.0.1:1 --duration 5",
		     "bad --duration '5': needs a unit (us, ms, s or m)");
	expect_usage("kvidx-route", "--validate --pod a:1=http://127.0.0.1:1 --gaps 40ms,300",
		     "bad --gaps '300': needs a unit (us, ms, s or m)");
	expect_usage("kvidx-route", "--validate --pod a:1=http://127.0.0.1:1 --gaps 1.5ms",
		     "bad --gaps '1.5ms': finer than a millisecond");
	expect_usage("kvidx-route", "--validate --pod a:1=http://127.0.0.1:1 --gaps 11m",
		     "bad --gaps '11m': at most 10m");
	/* A flag whose name carries its unit takes a whole number. */
	expect_usage("kvidx-route", "--pod a:1=http://127.0.0.1:1 --followup-ms 1.5",
		     "--followup-ms: expected an integer");
}

/* Parsed: the run goes on to attach to the (absent) index, exit 1, not 2. */
static void expect_parsed(const char *tool, const char *args)
{
	struct tu_run r = tu_run_tool(tool, "--name kvidx-cli-absent %s 2>&1", args);

	cr_assert_eq(r.status, 1, "%s %s: exit %d: %s", tool, args, r.status, r.out);
	cr_assert(strstr(r.out, "'kvidx-cli-absent' not found"), "%s %s: %s", tool, args, r.out);
	free(r.out);
}

/* The same flags with a unit run: a workload of --count events ends before --duration. */
Test(cli, durations_with_units_are_accepted)
{
	const char *const durs[] = { "5s", "250ms" };

	for (size_t i = 0; i < sizeof(durs) / sizeof(durs[0]); i++) {
		struct tu_run r = tu_run_tool("kvidx-fakepod", "--pub %s --workload --rate 0 "
					      "--count 10 --linger-ms 0 --duration %s 2>&1",
					      tu_endpoint(0), durs[i]);
		cr_assert_eq(r.status, 0, "kvidx-fakepod --duration %s: exit %d: %s", durs[i],
			     r.status, r.out);
		cr_assert(strstr(r.out, "events=10 "), "--duration %s: %s", durs[i], r.out);
		free(r.out);
	}
	expect_parsed("kvidx-route", "--pod a:1=http://127.0.0.1:1 --duration 5s");
	expect_parsed("kvidx-route", "--pod a:1=http://127.0.0.1:1 --duration 250ms");
	expect_parsed("kvidx-route", "--validate --pod a:1=http://127.0.0.1:1 --gaps 250ms,5s,0");
	expect_parsed("kvidx-route", "--pod a:1=http://127.0.0.1:1 --followup-ms 250");
}

Test(cli, ttl_lq_and_percentiles_exclude_each_other)
{
	expect_usage("kvidx-ttl", "--lq 1s --p99 2s", "--lq gives Lq directly");
}

Test(cli, hash_seed_fits_an_index)
{
	char args[160];

	snprintf(args, sizeof(args), "--seed %064d 1 2", 0);
	expect_usage("kvidx-hash", args, "bad --seed: 64 bytes; an index holds at most 63");
	snprintf(args, sizeof(args), "--seed %063d --block-size 2 1 2", 0);
	struct tu_run r = tu_run_tool("kvidx-hash", "%s", args);
	cr_assert_eq(r.status, 0, "63 bytes must be accepted: %s", r.out);
	free(r.out);
}

/*
 * Issue 24, item 9: combinations --help rules out are refused, each with a
 * message naming both flags; the edge of each is accepted. Before, all three were accepted.
 */
Test(cli, contradictory_combinations_refused)
{
	expect_usage("kvidx-hash", "--block-size 65537 1 2",
		     "bad --block-size '65537': expected a decimal integer 1..65536");
	struct tu_run r = tu_run_tool("kvidx-hash", "--block-size 65536 1 2");
	cr_assert_eq(r.status, 0, "--block-size 65536 must be accepted: %s", r.out);
	free(r.out);
	expect_usage("kvidx-ttl", "--p99 1s --p95 2s", "--p95 (2s) is above --p99 (1s)");
	expect_usage("kvidx-ttl", "--p95 1s --p50 2s", "--p50 (2s) is above --p95 (1s)");
	r = tu_run_tool("kvidx-ttl", "--p99 1s --p95 1s --p50 500ms");
	cr_assert_eq(r.status, 0, "equal percentiles must be accepted: %s", r.out);
	free(r.out);
	free(tu_expect_usage("kvidx-ingestd",
			     "--pod tcp://127.0.0.1:1 --reap-interval 2s --reap-pass 1s",
			     "reap-interval (2000ms) is longer than reap-pass (1000ms)"));
}
