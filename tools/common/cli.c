/*
 * cli.c — the conventions every kvidx tool follows towards whoever runs it: messages named
 * after the tool, exit status 2 for bad usage and 1 for running out of memory or failing to
 * write standard output (see cli.h).
 */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *tc_prog = "kvidx";

void tc_usage_error(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", tc_prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry '%s --help' for more information.\n", tc_prog);
	exit(2);
}

void tc_getopt_default(int c, char **argv, void (*usage)(FILE *f))
{
	const char *arg = argv[optind - 1];
	const char *eq = strchr(arg, '=');

	if (c == 'h') {
		usage(stdout);
		exit(tc_flush_stdout());
	}
	if (c == ':')
		tc_usage_error("option '%s' requires an argument", arg);
	/* A known long option (getopt set optopt to its value) given a value it does not take. */
	if (!strncmp(arg, "--", 2) && eq && optopt)
		tc_usage_error("option '%.*s' takes no argument", (int)(eq - arg), arg);
	if (strncmp(arg, "--", 2) != 0 && optopt && optopt < 256)
		tc_usage_error("unknown option '-%c'", optopt);
	tc_usage_error("unknown option '%s'", arg);
}

void tc_die_nomem(void)
{
	fprintf(stderr, "%s: out of memory\n", tc_prog);
	exit(1);
}

void *tc_xrealloc(void *p, size_t n)
{
	p = realloc(p, n ? n : 1);
	if (!p)
		tc_die_nomem();
	return p;
}

void tc_grow(void *pv, size_t *cap, size_t need, size_t size)
{
	size_t c = *cap ? *cap : 16;

	if (need <= *cap)
		return;
	while (c < need)
		c *= 2;
	*(void **)pv = tc_xrealloc(*(void **)pv, c * size);
	*cap = c;
}

void tc_buf_add(struct tc_buf *b, const void *p, size_t n)
{
	tc_grow(&b->s, &b->cap, b->len + n + 1, 1);
	memcpy(b->s + b->len, p, n);
	b->len += n;
	b->s[b->len] = '\0';
}

int tc_flush_stdout(void)
{
	if (fflush(stdout) || ferror(stdout)) {
		fprintf(stderr, "%s: writing standard output: %s\n", tc_prog, strerror(errno));
		return 1;
	}
	return 0;
}
