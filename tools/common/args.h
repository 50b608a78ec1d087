/*
 * args.h — flag values that end the tool when they are bad: a number in a range and a duration
 * in the tools' one grammar (duration.h), each refused with the same usage error ("bad --FLAG
 * 'VALUE': why", exit status 2, cli.h). flag is the flag's name without its dashes.
 */
#ifndef KVIDX_TOOLS_ARGS_H
#define KVIDX_TOOLS_ARGS_H

/* A decimal number in [lo, hi] (tc_parse_num()). */
double tc_arg_num(const char *flag, const char *arg, double lo, double hi);

/* A duration D (tc_parse_duration()), in seconds. */
double tc_arg_duration(const char *flag, const char *arg);

#endif /* KVIDX_TOOLS_ARGS_H */
