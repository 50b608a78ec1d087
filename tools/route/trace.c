/*
 * trace.c — a request trace in the Mooncake format (kvcache-ai/Mooncake, FAST25-release
 * traces; bench/traces/README.md), read for kvidx-route --trace: one JSON object a line,
 * {"timestamp": ms, "input_length": tokens, "output_length": tokens, "hash_ids": [...]},
 * each hash id naming a block of TRACE_BLOCK prompt tokens shared by every request that
 * names it. The trace has no tokens: each id becomes TRACE_BLOCK synthetic tokens drawn
 * from a generator seeded by the id alone, so equal ids are equal blocks in every process
 * (pods, index and routers alike). Tokens past the ids' blocks, if a line has any, are fresh
 * for that request.
 */
#include "route.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "rng.h"

#define TRACE_SEED 0x6d6f6f6e63616b65ull /* "mooncake" */
#define MAX_LINE_BYTES (16u << 20)
#define MAX_BAD_SAID 5

void trace_block_tokens(uint64_t id, uint32_t out[TRACE_BLOCK])
{
	uint64_t s = TRACE_SEED ^ (id * 0x9e3779b97f4a7c15ull);

	for (unsigned i = 0; i < TRACE_BLOCK; i++)
		out[i] = (uint32_t)(tc_rng_next(&s) % ROUTE_VOCAB);
}

/* A non-negative integer member of o at most max, in *v; false if not one. */
static bool member_u64(json_t *o, const char *name, uint64_t max, uint64_t *v)
{
	json_t *m = json_object_get(o, name);

	if (json_is_integer(m) && json_integer_value(m) >= 0 &&
	    (uint64_t)json_integer_value(m) <= max) {
		*v = (uint64_t)json_integer_value(m);
		return true;
	}
	if (json_is_real(m) && json_real_value(m) >= 0 && json_real_value(m) <= (double)max) {
		*v = (uint64_t)json_real_value(m);
		return true;
	}
	return false;
}

/* Parses one line into t (appended). NULL, or why the line is bad. */
static const char *parse_line(struct trace *t, const char *line, size_t len)
{
	json_error_t e;
	json_t *o = json_loadb(line, len, 0, &e), *ids;
	struct trace_req r = { 0 };
	uint64_t ts, in, out;
	const char *why = NULL;

	if (!json_is_object(o)) {
		why = "not a JSON object";
		goto out;
	}
	ids = json_object_get(o, "hash_ids");
	if (!member_u64(o, "timestamp", UINT64_MAX / NS_PER_MS, &ts))
		why = "no timestamp (a number of ms >= 0)";
	else if (!member_u64(o, "input_length", MAX_PROMPT_TOKENS, &in) || !in)
		why = "no input_length (tokens, 1..4194304)";
	else if (!member_u64(o, "output_length", 1u << 20, &out))
		why = "no output_length (tokens, 0..1048576)";
	else if (!json_is_array(ids) || json_array_size(ids) > in / TRACE_BLOCK + 1)
		why = "hash_ids is not an array of at most input_length / 512 + 1 ids";
	if (why)
		goto out;
	r.t_ms = ts;
	r.input_len = (uint32_t)in;
	r.output_len = (uint32_t)out;
	r.first = t->nids;
	r.nids = (uint32_t)json_array_size(ids);
	tc_grow(&t->ids, &t->ids_cap, t->nids + r.nids, sizeof(*t->ids));
	for (size_t i = 0; i < r.nids; i++) {
		json_t *v = json_array_get(ids, i);
		if (!json_is_integer(v) || json_integer_value(v) < 0) {
			why = "a hash id is not an integer >= 0";
			goto out;
		}
		t->ids[t->nids + i] = (uint64_t)json_integer_value(v);
	}
	t->nids += r.nids;
	tc_grow(&t->v, &t->cap, t->n + 1, sizeof(*t->v));
	t->v[t->n++] = r;
out:
	json_decref(o);
	return why;
}

int trace_load(struct trace *t, const char *path, uint64_t limit)
{
	FILE *f = fopen(path, "re");
	char *line = NULL;
	size_t cap = 0;
	ssize_t len;
	uint64_t lineno = 0;

	memset(t, 0, sizeof(*t));
	if (!f) {
		fprintf(stderr, PROG ": --trace %s: %s\n", path, strerror(errno));
		return -1;
	}
	while ((!limit || t->n < limit) && (len = getline(&line, &cap, f)) >= 0) {
		lineno++;
		while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
			line[--len] = '\0';
		size_t sp = strspn(line, " \t");
		if (!line[sp] || line[sp] == '#')
			continue;
		const char *why = (size_t)len > MAX_LINE_BYTES ? "line too long" :
				  parse_line(t, line, (size_t)len);
		if (why && t->bad++ < MAX_BAD_SAID)
			fprintf(stderr, PROG ": --trace %s line %" PRIu64 ": %s; skipped\n", path,
				lineno, why);
	}
	free(line);
	if (ferror(f)) {
		fprintf(stderr, PROG ": --trace %s: read error\n", path);
		fclose(f);
		return -1;
	}
	fclose(f);
	if (!t->n) {
		fprintf(stderr, PROG ": --trace %s: no request in it\n", path);
		return -1;
	}
	return 0;
}

size_t trace_prompt(const struct trace *t, size_t i, uint32_t **buf, size_t *cap)
{
	const struct trace_req *r = &t->v[i];
	size_t n = r->input_len, at = 0;
	uint32_t blk[TRACE_BLOCK];

	tc_grow(buf, cap, n, sizeof(**buf));
	for (uint32_t b = 0; b < r->nids && at < n; b++) {
		size_t take = n - at < TRACE_BLOCK ? n - at : TRACE_BLOCK;
		trace_block_tokens(t->ids[r->first + b], blk);
		memcpy(*buf + at, blk, take * sizeof(*blk));
		at += take;
	}
	/* Past the named blocks: this request's own tokens. */
	uint64_t s = TRACE_SEED ^ ~(uint64_t)i;
	for (; at < n; at++)
		(*buf)[at] = (uint32_t)(tc_rng_next(&s) % ROUTE_VOCAB);
	return n;
}

void trace_free(struct trace *t)
{
	free(t->v);
	free(t->ids);
	memset(t, 0, sizeof(*t));
}
