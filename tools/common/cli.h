/*
 * cli.h — how every kvidx tool talks to whoever runs it: messages on standard error that
 * start with the tool's name, usage errors (exit status 2), running out of memory (exit
 * status 1), and standard output flushed with its write errors reported.
 *
 * main() sets tc_prog to the tool's name before anything here can print.
 */
#ifndef KVIDX_TOOLS_CLI_H
#define KVIDX_TOOLS_CLI_H

#include <stddef.h>
#include <stdio.h>

/* The tool's name, as its messages start ("kvidx-dump"). */
extern const char *tc_prog;

/*
 * Prints "PROG: <message>" and the line pointing to --help, and exits with status 2.
 */
void tc_usage_error(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));

/*
 * The default arm of a tool's getopt_long() switch (optstring starting with ':', 'h' the value
 * of -h/--help): for 'h' prints usage(stdout) and exits with tc_flush_stdout()'s status; for
 * ':' (a missing argument) or anything else (an unknown option) reports the bad option and
 * exits with status 2.
 */
void tc_getopt_default(int c, char **argv, void (*usage)(FILE *f)) __attribute__((noreturn));

/* Prints "PROG: out of memory" and exits with status 1. */
void tc_die_nomem(void) __attribute__((noreturn));

/* realloc() that never fails: n == 0 still gets a block, and no memory ends the tool. */
void *tc_xrealloc(void *p, size_t n);

/*
 * Grows the array *pv of *cap elements of size bytes to hold at least need, doubling from 16:
 * pv is the address of the array pointer (of any type). No memory ends the tool.
 */
void tc_grow(void *pv, size_t *cap, size_t need, size_t size);

/* A growable byte string, always NUL-terminated once anything was added; zero-initialised
 * it is empty. free(b.s) releases it. */
struct tc_buf {
	char *s;
	size_t len, cap;
};
/* Appends n bytes of p to b (tc_grow(): no memory ends the tool). */
void tc_buf_add(struct tc_buf *b, const void *p, size_t n);

/*
 * Flushes standard output. Returns 0, or 1 after "PROG: writing standard output: <why>",
 * as a tool's exit status.
 */
int tc_flush_stdout(void);

#endif /* KVIDX_TOOLS_CLI_H */
