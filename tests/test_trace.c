/*
 * test_trace.c — kvidx-route --trace's prompts (tools/route/trace.c): a hash id is the same
 * 512 tokens in every request that names it and in every process (the test's own
 * trace_block_tokens() and two kvidx-route --trace-dump runs agree), different ids differ,
 * a partial last block is cut, bad lines are skipped with a message and --trace-limit holds.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "route.h"
#include "util_run.h"

/* Parses line k (0-based) of a dump into toks; returns its token count. */
static size_t dump_line(const char *out, int k, uint32_t *toks, size_t max)
{
	const char *p = out;
	size_t n = 0;

	for (int i = 0; i < k; i++) {
		p = strchr(p, '\n');
		cr_assert_not_null(p, "line %d is missing", k);
		p++;
	}
	while (*p && *p != '\n') {
		char *end;
		unsigned long v = strtoul(p, &end, 10);
		cr_assert_neq(end, p, "not a token near '%.10s'", p);
		cr_assert_lt(n, max);
		toks[n++] = (uint32_t)v;
		p = end;
		while (*p == ' ')
			p++;
	}
	return n;
}

static char trace_path[64];

static void write_trace(void)
{
	snprintf(trace_path, sizeof(trace_path), "/tmp/kvidx-test-trace.%d.jsonl", (int)getpid());
	FILE *f = fopen(trace_path, "w");
	cr_assert_not_null(f);
	fputs("{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 3, \"hash_ids\": [7, 8]}\n"
	      "not json\n"
	      "{\"timestamp\": 5, \"input_length\": 1100, \"output_length\": 1, \"hash_ids\": [7, 9, 10]}\n"
	      "{\"timestamp\": 9, \"input_length\": 100, \"output_length\": 0, \"hash_ids\": [11]}\n"
	      "{\"timestamp\": 9, \"input_length\": 100, \"output_length\": 0}\n",
	      f);
	cr_assert_eq(fclose(f), 0);
}

Test(trace, a_hash_id_is_the_same_tokens_in_every_process)
{
	static uint32_t a[4096], b[4096], blk[TRACE_BLOCK], other[TRACE_BLOCK];
	struct tu_run r1, r2, msg;

	write_trace();
	r1 = tu_run_tool("kvidx-route", "--trace %s --trace-dump 2>/dev/null", trace_path);
	r2 = tu_run_tool("kvidx-route", "--trace %s --trace-dump 2>/dev/null", trace_path);
	msg = tu_run_tool("kvidx-route", "--trace %s --trace-dump 2>&1 >/dev/null", trace_path);
	cr_assert_eq(r1.status, 0);
	cr_assert_eq(r2.status, 0);
	cr_assert_not_null(strstr(msg.out, "line 2: not a JSON object; skipped"), "%s", msg.out);
	cr_assert_not_null(strstr(msg.out, "line 5: hash_ids is not an array"), "%s", msg.out);
	cr_assert_not_null(strstr(msg.out, "2 bad lines skipped"), "%s", msg.out);

	/* Two processes printed the same three prompts. */
	cr_assert_eq(r1.len, r2.len);
	cr_assert_str_eq(r1.out, r2.out);
	for (int k = 0; k < 3; k++) {
		size_t n1 = dump_line(r1.out, k, a, 4096);
		size_t n2 = dump_line(r2.out, k, b, 4096);
		cr_assert_eq(n1, n2);
		cr_assert_arr_eq(a, b, n1 * sizeof(*a));
	}
	/* Request 0: id 7 then 88 tokens of id 8, as this process makes them. */
	cr_assert_eq(dump_line(r2.out, 0, a, 4096), 600);
	trace_block_tokens(7, blk);
	cr_assert_arr_eq(a, blk, sizeof(blk), "id 7 differs between processes");
	trace_block_tokens(8, other);
	cr_assert_arr_eq(a + 512, other, 88 * sizeof(*a), "id 8's partial block");
	/* Request 1 shares id 7 and only it. */
	cr_assert_eq(dump_line(r2.out, 1, b, 4096), 1100);
	cr_assert_arr_eq(b, blk, sizeof(blk));
	cr_assert_arr_neq(b + 512, a + 512, 88 * sizeof(*a), "ids 8 and 9 gave equal tokens");
	trace_block_tokens(10, other);
	cr_assert_arr_eq(b + 1024, other, 76 * sizeof(*b));
	/* Request 2: id 11's first 100 tokens; and every token in the vocabulary. */
	cr_assert_eq(dump_line(r2.out, 2, a, 4096), 100);
	trace_block_tokens(11, other);
	cr_assert_arr_eq(a, other, 100 * sizeof(*a));
	for (size_t i = 0; i < 100; i++)
		cr_assert_lt(a[i], ROUTE_VOCAB);
	free(r1.out);
	free(r2.out);
	free(msg.out);
	unlink(trace_path);
}

Test(trace, limit_stops_after_n_requests)
{
	struct tu_run r;
	size_t lines = 0;

	write_trace();
	r = tu_run_tool("kvidx-route", "--trace %s --trace-limit 2 --trace-dump 2>/dev/null",
			trace_path);
	cr_assert_eq(r.status, 0);
	for (char *p = r.out; (p = strchr(p, '\n')); p++)
		lines++;
	cr_assert_eq(lines, 2);
	free(r.out);
	r = tu_run_tool("kvidx-route", "--trace /nonexistent/trace.jsonl --trace-dump 2>&1");
	cr_assert_eq(r.status, 1);
	cr_assert_not_null(strstr(r.out, "No such file"), "%s", r.out);
	free(r.out);
	unlink(trace_path);
}
