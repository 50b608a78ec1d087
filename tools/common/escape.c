/*
 * escape.c — untrusted strings written as JSON or as terminal text (see escape.h).
 */
#include "escape.h"

#include <inttypes.h>

size_t tc_utf8_seq(const unsigned char *p, uint32_t *cp)
{
	uint32_t c = p[0], v, min;
	size_t n;

	if (c >= 0xc2 && c <= 0xdf)
		n = 2, v = c & 0x1f, min = 0x80;
	else if (c >= 0xe0 && c <= 0xef)
		n = 3, v = c & 0x0f, min = 0x800;
	else if (c >= 0xf0 && c <= 0xf4)
		n = 4, v = c & 0x07, min = 0x10000;
	else
		return 0;
	for (size_t i = 1; i < n; i++) {
		if ((p[i] & 0xc0) != 0x80)
			return 0;
		v = v << 6 | (p[i] & 0x3f);
	}
	if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
		return 0;
	*cp = v;
	return n;
}

/* What a byte that cannot be written as it is becomes, per style: a C0 control or DEL (c
 * below 0x80), or a stray byte that starts no well-formed UTF-8 sequence. Returns columns. */
static size_t esc_byte(FILE *f, enum tc_esc how, unsigned char c)
{
	switch (how) {
	case TC_ESC_JSON:
		if (c < 0x80)
			return (size_t)fprintf(f, "\\u%04x", c);
		fputs("\\ufffd", f);
		return 6;
	case TC_ESC_TEXT:
		return (size_t)fprintf(f, "\\x%02x", c);
	case TC_ESC_PROM:
		break;
	}
	fputs("\xef\xbf\xbd", f); /* U+FFFD */
	return 1;
}

size_t tc_escape(FILE *f, const char *s, enum tc_esc how)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t cols = 0, n;
	uint32_t cp;

	while (*p) {
		if (*p == '\\' || *p == '"') {
			putc('\\', f);
			putc(*p++, f);
			cols += 2;
		} else if (*p == '\n' && how == TC_ESC_PROM) {
			fputs("\\n", f);
			p++, cols += 2;
		} else if (*p >= 0x20 && *p < 0x7f) {
			putc(*p++, f);
			cols++;
		} else if (*p < 0x80) {
			cols += esc_byte(f, how, *p++);
		} else if ((n = tc_utf8_seq(p, &cp)) != 0 && (cp >= 0xa0 || how != TC_ESC_TEXT)) {
			fwrite(p, 1, n, f);
			p += n, cols++;
		} else if (n) { /* a C1 control, which can drive a terminal */
			fprintf(f, "\\u%04" PRIx32, cp);
			p += n, cols += 6;
		} else {
			cols += esc_byte(f, how, *p++);
		}
	}
	return cols;
}

void tc_json_str(FILE *f, const char *s)
{
	putc('"', f);
	tc_escape(f, s, TC_ESC_JSON);
	putc('"', f);
}

size_t tc_text_str(FILE *f, const char *s)
{
	return tc_escape(f, s, TC_ESC_TEXT);
}
