/*
 * util_text.c — assertions on the tools' output, and the strict JSON parser behind
 * tu_json_object() (see util_text.h).
 */
#include "util_text.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

void tu_assert_has(const char *hay, const char *needle)
{
	cr_assert(strstr(hay, needle), "expected\n  %s\nin:\n%.8000s", needle, hay);
}

void tu_assert_lacks(const char *hay, const char *needle)
{
	cr_assert(!strstr(hay, needle), "did not expect\n  %s\nin:\n%.8000s", needle, hay);
}

double tu_number_after(const char *hay, const char *needle)
{
	const char *p = strstr(hay, needle);

	cr_assert_not_null(p, "no %s in:\n%.8000s", needle, hay);
	return strtod(p + strlen(needle), NULL);
}

/* ---- a strict JSON parser (RFC 8259), for well-formedness only ---- */

struct jp {
	const unsigned char *p;
	int depth;
};

static bool jv_value(struct jp *j);

static void jv_ws(struct jp *j)
{
	while (*j->p == ' ' || *j->p == '\n' || *j->p == '\t' || *j->p == '\r')
		j->p++;
}

static bool jv_lit(struct jp *j, const char *lit)
{
	size_t n = strlen(lit);

	if (strncmp((const char *)j->p, lit, n))
		return false;
	j->p += n;
	return true;
}

/* A string; raw bytes of 0x80 and above must be well-formed UTF-8. */
static bool jv_string(struct jp *j)
{
	if (*j->p != '"')
		return false; /* not past the end: callers may look at *p again */
	j->p++;
	for (;;) {
		unsigned c = *j->p++;
		if (c == '"')
			return true;
		if (c < 0x20)
			return false; /* control characters (and the end of the text) */
		if (c == '\\') {
			c = *j->p++;
			if (c == 'u') {
				for (int i = 0; i < 4; i++, j->p++)
					if (!*j->p || !strchr("0123456789abcdefABCDEF", *j->p))
						return false;
			} else if (!c || !strchr("\"\\/bfnrt", (int)c)) {
				return false;
			}
		} else if (c >= 0x80) {
			int more = c >= 0xf0 && c <= 0xf4 ? 3 : c >= 0xe0 ? 2 : c >= 0xc2 ? 1 : -1;
			if (more < 0 || c > 0xf4)
				return false;
			for (int i = 0; i < more; i++)
				if ((*j->p++ & 0xc0) != 0x80)
					return false;
		}
	}
}

static bool jv_number(struct jp *j)
{
	const unsigned char *s = j->p;

	if (*j->p == '-')
		j->p++;
	if (*j->p == '0')
		j->p++;
	else if (*j->p >= '1' && *j->p <= '9')
		while (*j->p >= '0' && *j->p <= '9')
			j->p++;
	else
		return false;
	if (*j->p == '.') {
		j->p++;
		if (!(*j->p >= '0' && *j->p <= '9'))
			return false;
		while (*j->p >= '0' && *j->p <= '9')
			j->p++;
	}
	if (*j->p == 'e' || *j->p == 'E') {
		j->p++;
		if (*j->p == '+' || *j->p == '-')
			j->p++;
		if (!(*j->p >= '0' && *j->p <= '9'))
			return false;
		while (*j->p >= '0' && *j->p <= '9')
			j->p++;
	}
	return j->p > s;
}

static bool jv_container(struct jp *j, char close, bool object)
{
	j->p++;
	if (++j->depth > 64)
		return false;
	jv_ws(j);
	if (*j->p == close) {
		j->p++;
		j->depth--;
		return true;
	}
	for (;;) {
		jv_ws(j);
		if (object) {
			if (!jv_string(j))
				return false;
			jv_ws(j);
			if (*j->p++ != ':')
				return false;
		}
		if (!jv_value(j))
			return false;
		jv_ws(j);
		if (*j->p == ',') {
			j->p++;
			continue;
		}
		if (*j->p++ != close)
			return false;
		j->depth--;
		return true;
	}
}

static bool jv_value(struct jp *j)
{
	jv_ws(j);
	switch (*j->p) {
	case '{':
		return jv_container(j, '}', true);
	case '[':
		return jv_container(j, ']', false);
	case '"':
		return jv_string(j);
	case 't':
		return jv_lit(j, "true");
	case 'f':
		return jv_lit(j, "false");
	case 'n':
		return jv_lit(j, "null");
	}
	return jv_number(j);
}

bool tu_json_object(const char *text, size_t *bad)
{
	struct jp j = { (const unsigned char *)text, 0 };
	bool ok;

	jv_ws(&j);
	ok = *j.p == '{' && jv_value(&j);
	if (ok) { /* after a failure p may point past the end */
		jv_ws(&j);
		ok = *j.p == '\0';
	}
	if (!ok && bad)
		*bad = (size_t)((const char *)j.p - text);
	return ok;
}

void tu_assert_json(const char *text)
{
	size_t bad = 0;

	cr_assert(tu_json_object(text, &bad),
		  "not exactly one well-formed JSON object (near offset %zu):\n%s", bad, text);
}
