/*
 * duration.h — internal to the tools: the one duration grammar of every kvidx tool's flags,
 * config files, fakepod scripts and fault headers, and the plain decimal numbers it is built
 * on. Pure functions, no state. Never installed.
 */
#ifndef KVIDX_TOOLS_DURATION_H
#define KVIDX_TOOLS_DURATION_H

#include <stddef.h>

/* Largest duration the parser accepts (one day): anything longer is a typo. */
#define TC_DURATION_MAX_S 86400.0

/*
 * The duration grammar of every kvidx tool (flags and config files that take a duration D):
 * a non-negative decimal number and a unit, "us" (or "µs"), "ms", "s" or "m" (minutes):
 * "1.15s", "250ms", "500us", "0.5m". The unit is required, since a bare "250" is 250 ms to
 * one reader and 250 s to another; only "0" may go without one. (Flags whose name carries
 * the unit, such as --prefill-ms, take a plain whole number instead.)
 * Returns 0 and sets *sec; -EINVAL for anything else (signs, exponents, hex, inf, nan,
 * spaces, unknown units), -EDOM for a nonzero number without a unit, -ERANGE above
 * TC_DURATION_MAX_S. tc_duration_error() says which in words.
 */
int tc_parse_duration(const char *s, double *sec);
/* What was wrong with a duration, for a return value of tc_parse_duration(): "expected a
 * duration such as 250ms, 1.5s or 500us", "needs a unit (us, ms, s or m)", "longer than a day". */
const char *tc_duration_error(int rc);

/*
 * Length of the plain decimal number at the start of s: digits, optionally a point and more
 * digits (at least one digit in all); 0 if s does not start with one. Signs, exponents, "inf"
 * and hex are not numbers here, unlike for strtod().
 */
size_t tc_dec_prefix(const char *s);
/* The number in s[0..len) (a tc_dec_prefix()), in the C locale's format: 0, -EINVAL (too
 * long) or -ERANGE (not finite). */
int tc_dec_value(const char *s, size_t len, double *v);

#endif /* KVIDX_TOOLS_DURATION_H */
