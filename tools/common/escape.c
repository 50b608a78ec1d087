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

void tc_json_str(FILE *f, const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	uint32_t cp;
	size_t n;

	putc('"', f);
	while (*p) {
		if (*p == '"' || *p == '\\') {
			putc('\\', f);
			putc(*p++, f);
		} else if (*p < 0x20 || *p == 0x7f) {
			fprintf(f, "\\u%04x", *p++);
		} else if (*p < 0x80) {
			putc(*p++, f);
		} else if ((n = tc_utf8_seq(p, &cp)) != 0) {
			fwrite(p, 1, n, f);
			p += n;
		} else {
			fputs("\\ufffd", f);
			p++;
		}
	}
	putc('"', f);
}

size_t tc_text_str(FILE *f, const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t cols = 0, n;
	uint32_t cp;

	while (*p) {
		if (*p == '\\' || *p == '"') {
			putc('\\', f);
			putc(*p++, f);
			cols += 2;
		} else if (*p >= 0x20 && *p < 0x7f) {
			putc(*p++, f);
			cols++;
		} else if ((n = tc_utf8_seq(p, &cp)) != 0 && cp >= 0xa0) {
			fwrite(p, 1, n, f);
			p += n, cols++;
		} else if (n) {
			fprintf(f, "\\u%04" PRIx32, cp);
			p += n, cols += 6;
		} else {
			fprintf(f, "\\x%02x", *p++);
			cols += 4;
		}
	}
	return cols;
}
