/*
 * jsonw.c — the tools' streaming JSON writer (see jsonw.h).
 */
#include "jsonw.h"

#include <inttypes.h>

#include "escape.h"

static void jw_indent(struct tc_jw *j, int depth)
{
	putc('\n', j->f);
	for (int i = 0; i < depth; i++)
		fputs("  ", j->f);
}

void tc_jw_item(struct tc_jw *j, const char *key)
{
	if (!j->first[j->depth])
		putc(',', j->f);
	if (j->depth <= 2)
		jw_indent(j, j->depth);
	else if (!j->first[j->depth])
		putc(' ', j->f);
	j->first[j->depth] = false;
	if (key) {
		tc_json_str(j->f, key);
		fputs(": ", j->f);
	}
}

void tc_jw_open(struct tc_jw *j, const char *key, char brace)
{
	if (j->depth > 0)
		tc_jw_item(j, key);
	putc(brace, j->f);
	j->depth++;
	j->first[j->depth] = true;
}

void tc_jw_close(struct tc_jw *j, char brace)
{
	bool empty = j->first[j->depth];

	j->depth--;
	if (j->depth <= 1 && !empty)
		jw_indent(j, j->depth);
	putc(brace, j->f);
	if (j->depth == 0)
		putc('\n', j->f);
}

void tc_jw_u64(struct tc_jw *j, const char *key, uint64_t v)
{
	tc_jw_item(j, key);
	fprintf(j->f, "%" PRIu64, v);
}

void tc_jw_i64(struct tc_jw *j, const char *key, int64_t v)
{
	tc_jw_item(j, key);
	fprintf(j->f, "%" PRId64, v);
}

void tc_jw_num(struct tc_jw *j, const char *key, double v)
{
	tc_jw_item(j, key);
	fprintf(j->f, "%.9g", v);
}

void tc_jw_str(struct tc_jw *j, const char *key, const char *s)
{
	tc_jw_item(j, key);
	if (s)
		tc_json_str(j->f, s);
	else
		fputs("null", j->f);
}

void tc_jw_bool(struct tc_jw *j, const char *key, bool v)
{
	tc_jw_item(j, key);
	fputs(v ? "true" : "false", j->f);
}

void tc_jw_null(struct tc_jw *j, const char *key)
{
	tc_jw_item(j, key);
	fputs("null", j->f);
}
