/*
 * parse.h — the whole-string number parsers of the tools' command lines and input: decimal
 * counts and hexadecimal keys, digits only, with no sign, spaces or overflow accepted; and
 * finite real numbers in a range.
 */
#ifndef KVIDX_TOOLS_PARSE_H
#define KVIDX_TOOLS_PARSE_H

#include <stdbool.h>
#include <stdint.h>

/* Parses all of s as a decimal number <= max: digits only, no sign, no spaces. */
bool tc_parse_dec(const char *s, uint64_t max, uint64_t *out);

/* Parses all of s as 1 to 16 hex digits, with an optional 0x or 0X prefix. */
bool tc_parse_hex64(const char *s, uint64_t *out);

/*
 * Parses all of s as a finite number in [lo, hi], in strtod()'s syntax (so "1e3" and "0x10"
 * are numbers) but with no leading white space.
 */
bool tc_parse_num(const char *s, double lo, double hi, double *out);

/* The value of hex digit c (either case), or -1 if c is none. */
int tc_hex_digit(char c);

#endif /* KVIDX_TOOLS_PARSE_H */
