/*
 * jsonw.h — the small streaming JSON writer behind the tools' --json output. Members and
 * elements are separated and indented by depth: the top-level object and the objects
 * directly in it get one member per line; anything deeper (one pod, one reader, one entry)
 * stays on one line, so that the output greps well. Strings go through tc_json_str(), so
 * the output is valid JSON whatever they hold.
 */
#ifndef KVIDX_TOOLS_JSONW_H
#define KVIDX_TOOLS_JSONW_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define TC_JW_MAX_DEPTH 8

/* A writer: zero it but for f. */
struct tc_jw {
	FILE *f;
	int depth;
	bool first[TC_JW_MAX_DEPTH];
};

/*
 * Starts a member (key non-NULL, inside an object) or an element (key NULL, in an array);
 * the caller then writes its value.
 */
void tc_jw_item(struct tc_jw *j, const char *key);

/* Opens an object ('{') or array ('['), as a member or element unless it is the top level. */
void tc_jw_open(struct tc_jw *j, const char *key, char brace);

/* Closes the innermost object ('}') or array (']'); the top level ends with a newline. */
void tc_jw_close(struct tc_jw *j, char brace);

void tc_jw_u64(struct tc_jw *j, const char *key, uint64_t v);
void tc_jw_i64(struct tc_jw *j, const char *key, int64_t v);

/* A number as %.9g, which keeps 1.5000000000000002 as 1.5 (rounding after the arithmetic). */
void tc_jw_num(struct tc_jw *j, const char *key, double v);

/* A string, or null for s NULL. */
void tc_jw_str(struct tc_jw *j, const char *key, const char *s);

void tc_jw_bool(struct tc_jw *j, const char *key, bool v);
void tc_jw_null(struct tc_jw *j, const char *key);

#endif /* KVIDX_TOOLS_JSONW_H */
