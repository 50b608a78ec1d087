/*
 * benchlib.c — code every bench_* program links (see benchlib.h): the common part of parsing
 * a benchmark's command line, and the plain malloc-backed allocator the ck_hs baselines use.
 */
#include <stdlib.h>

#include "benchlib.h"

/*
 * getopt_long() over lo with what every benchmark answers alike: -h/--help prints usage to
 * stdout and exits 0, an unknown option or a missing value prints it to stderr and exits 2,
 * and an operand left after the options is refused (exit 2). Returns the next option's value
 * for the caller to handle, or -1 once all are read.
 */
int bl_getopt(int argc, char **argv, const struct option *lo, void (*usage)(FILE *f))
{
	int c = getopt_long(argc, argv, "h", lo, NULL);

	switch (c) {
	case 'h':
		usage(stdout);
		exit(0);
	case '?':
		usage(stderr);
		exit(2);
	case -1:
		if (optind < argc) {
			fprintf(stderr, "%s: unexpected argument '%s'\n", bl_prog, argv[optind]);
			exit(2);
		}
		break;
	}
	return c;
}

static void *bl_ck_malloc(size_t n)
{
	return malloc(n);
}

static void *bl_ck_realloc(void *p, size_t old, size_t n, bool defer)
{
	(void)old;
	(void)defer;
	return realloc(p, n);
}

static void bl_ck_free(void *p, size_t n, bool defer)
{
	(void)n;
	(void)defer;
	free(p);
}

/* ck_hs's allocator for the baselines: malloc, realloc and free, with no deferred freeing. */
struct ck_malloc bl_ck_alloc = { bl_ck_malloc, bl_ck_realloc, bl_ck_free };
