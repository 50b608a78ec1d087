/*
 * args.c — numbers and durations of command-line flags, refused with a usage error (args.h).
 */
#include "args.h"

#include "cli.h"
#include "duration.h"
#include "parse.h"

double tc_arg_num(const char *flag, const char *arg, double lo, double hi)
{
	double v;

	if (!tc_parse_num(arg, lo, hi, &v))
		tc_usage_error("bad --%s '%s': expected a number in [%g, %g]", flag, arg, lo, hi);
	return v;
}

double tc_arg_duration(const char *flag, const char *arg)
{
	double v;
	int rc = tc_parse_duration(arg, &v);

	if (rc < 0)
		tc_usage_error("bad --%s '%s': %s", flag, arg, tc_duration_error(rc));
	return v;
}
