/*
 * parse.c — whole-string decimal, hexadecimal and real number parsing for the tools (see
 * parse.h).
 */
#include "parse.h"

#include <errno.h>
#include <math.h> /* isfinite() only: the tools do not link libm */
#include <stddef.h>
#include <stdlib.h>

bool tc_parse_dec(const char *s, uint64_t max, uint64_t *out)
{
	uint64_t v = 0;

	if (!*s)
		return false;
	for (; *s; s++) {
		unsigned d;

		if (*s < '0' || *s > '9')
			return false;
		d = (unsigned)(*s - '0');
		if (v > (max - d) / 10)
			return false;
		v = v * 10 + d;
	}
	*out = v;
	return true;
}

int tc_hex_digit(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

bool tc_parse_hex64(const char *s, uint64_t *out)
{
	uint64_t v = 0;
	size_t n = 0;

	if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X'))
		s += 2;
	for (; *s; s++, n++) {
		int d = tc_hex_digit(*s);

		if (d < 0 || n == 16)
			return false;
		v = v << 4 | (unsigned)d;
	}
	if (!n)
		return false;
	*out = v;
	return true;
}

bool tc_parse_num(const char *s, double lo, double hi, double *out)
{
	char *end;
	double v;

	if (!*s || *s == ' ' || *s == '\t')
		return false;
	errno = 0;
	v = strtod(s, &end);
	if (*end || errno || !isfinite(v) || v < lo || v > hi)
		return false;
	*out = v;
	return true;
}
