/*
 * duration.c — the tools' one duration grammar and the plain decimal numbers under it (see
 * duration.h). Pure functions.
 */
#include "duration.h"

#include <errno.h>
#include <math.h> /* isfinite() only: the tools do not link libm */
#include <stdlib.h>
#include <string.h>

size_t tc_dec_prefix(const char *s)
{
	size_t i = 0, digits = 0;

	while (s[i] >= '0' && s[i] <= '9')
		i++, digits++;
	if (s[i] == '.') {
		i++;
		while (s[i] >= '0' && s[i] <= '9')
			i++, digits++;
	}
	return digits ? i : 0;
}

int tc_dec_value(const char *s, size_t len, double *v)
{
	char tmp[64];

	if (len >= sizeof(tmp))
		return -EINVAL;
	memcpy(tmp, s, len);
	tmp[len] = '\0';
	errno = 0;
	*v = strtod(tmp, NULL);
	if (errno || !isfinite(*v))
		return -ERANGE;
	return 0;
}

int tc_parse_duration(const char *s, double *sec)
{
	static const struct {
		const char *suffix;
		double scale;
	} units[] = {
		{ "s", 1.0 },   { "ms", 1e-3 },          { "us", 1e-6 },
		{ "m", 60.0 },  { "\xc2\xb5s", 1e-6 },
	};
	size_t len;
	double v;

	if (!s || !(len = tc_dec_prefix(s)))
		return -EINVAL;
	if (s[len] == '\0') {
		if (tc_dec_value(s, len, &v) < 0)
			return -EINVAL;
		if (v != 0)
			return -EDOM; /* only 0 goes without a unit */
		*sec = 0;
		return 0;
	}
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (strcmp(s + len, units[i].suffix) != 0)
			continue;
		if (tc_dec_value(s, len, &v) < 0)
			return -ERANGE;
		v *= units[i].scale;
		if (v > TC_DURATION_MAX_S)
			return -ERANGE;
		*sec = v;
		return 0;
	}
	return -EINVAL;
}

const char *tc_duration_error(int rc)
{
	switch (rc) {
	case -EDOM:
		return "needs a unit (us, ms, s or m)";
	case -ERANGE:
		return "longer than a day";
	default:
		return "expected a duration such as 250ms, 1.5s or 500us";
	}
}
