/*
 * answer.c — reading what pods answer: a stream of server-sent events cut at its blank
 * lines (the events themselves are passed on unchanged), and the usage of an answer, whole
 * JSON or one "data:" event, parsed with jansson.
 */
#include "route.h"

#include <jansson.h>
#include <string.h>

#include "cli.h"

/* The end of the first event in p[0, n): just past its blank line, or NULL. */
static const char *event_end(const char *p, size_t n)
{
	for (size_t i = 0; i + 1 < n; i++) {
		if (p[i] != '\n')
			continue;
		if (p[i + 1] == '\n')
			return p + i + 2;
		if (p[i + 1] == '\r' && i + 2 < n && p[i + 2] == '\n')
			return p + i + 3;
	}
	return NULL;
}

size_t sse_feed(struct sse *s, const char *p, size_t n,
		void (*fn)(void *arg, const char *ev, size_t len), void *arg)
{
	size_t events = 0, used = 0;
	const char *e;

	tc_grow(&s->buf, &s->cap, s->len + n + 1, 1);
	memcpy(s->buf + s->len, p, n);
	s->len += n;
	while ((e = event_end(s->buf + used, s->len - used))) {
		size_t len = (size_t)(e - (s->buf + used));

		fn(arg, s->buf + used, len);
		used += len;
		events++;
	}
	memmove(s->buf, s->buf + used, s->len - used);
	s->len -= used;
	return events;
}

void sse_free(struct sse *s)
{
	free(s->buf);
	memset(s, 0, sizeof(*s));
}

static uint32_t u32_of(json_t *v)
{
	json_int_t i = json_is_integer(v) ? json_integer_value(v) : 0;

	return i < 0 ? 0 : i > (json_int_t)UINT32_MAX ? UINT32_MAX : (uint32_t)i;
}

bool usage_parse(const char *p, size_t n, bool sse, struct usage *u, bool *usage_only)
{
	json_t *j, *us, *ch;
	bool ok;

	if (usage_only)
		*usage_only = false;
	if (sse) {
		/* "data: {...}" (one data line: what vLLM sends); comments and other fields
		 * carry no usage. */
		const char *d = memmem(p, n, "data:", 5);
		if (!d || !memmem(p, n, "\"usage\"", 7))
			return false;
		d += 5;
		n -= (size_t)(d - p);
		p = d;
	} else if (!memmem(p, n, "\"usage\"", 7)) {
		return false;
	}
	j = json_loadb(p, n, JSON_DISABLE_EOF_CHECK, NULL);
	if (!j)
		return false;
	us = json_object_get(j, "usage");
	ok = json_is_object(us);
	if (ok) {
		u->have = true;
		u->prompt_tokens = u32_of(json_object_get(us, "prompt_tokens"));
		u->completion_tokens = u32_of(json_object_get(us, "completion_tokens"));
		u->cached_tokens = u32_of(json_object_get(
			json_object_get(us, "prompt_tokens_details"), "cached_tokens"));
		ch = json_object_get(j, "choices");
		if (usage_only)
			*usage_only = json_is_array(ch) && !json_array_size(ch);
	}
	json_decref(j);
	return ok;
}
