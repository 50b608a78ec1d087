/*
 * util_run.h — running the project's built tools from the tests, found in $KVIDX_BIN (`make
 * test` sets it): either to completion through the shell, standard output collected, or as
 * a child the test talks to through pipes and a log file, which dies with the test and is
 * killed and reaped in teardown; the loopback ports the test gives them; and waiting, with a
 * deadline, for what they do to show.
 */
#ifndef KVIDX_TESTS_UTIL_RUN_H
#define KVIDX_TESTS_UTIL_RUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "kvidx.h"

/* The path of tool in $KVIDX_BIN (a static buffer), asserting that it is executable. */
const char *tu_tool_path(const char *tool);

/* What a tool run to completion did. */
struct tu_run {
	int status; /* exit status */
	char *out;  /* standard output (and standard error if the arguments redirect it) */
	size_t len;
};

/*
 * Runs "$KVIDX_BIN/TOOL ARGS" through sh, ARGS formatted from fmt, and collects its standard
 * output (NUL-terminated; the caller frees r.out). Asserts that it exited normally and wrote
 * no NUL byte.
 */
struct tu_run tu_run_tool(const char *tool, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Runs a shell command line formatted from fmt (a script of the tree, a pipeline), as
 * tu_run_tool does a tool: standard output collected, normal exit asserted. */
struct tu_run tu_run_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Runs TOOL ARGS (stderr folded into the output); asserts exit 2 (a usage error) and that
 * the output holds msg. Returns the output (the caller frees it) for further checks. */
char *tu_expect_usage(const char *tool, const char *args, const char *msg);

/* A tool running as a child of the test. */
struct tu_child {
	pid_t pid;          /* -1 when there is none (never started, or reaped) */
	int in, out, err;   /* the test's ends of the child's piped stdio, -1 where not piped */
	char log[256];      /* the file taking what is not piped, "" for none */
};

/*
 * Starts $KVIDX_BIN/tool with the NULL-terminated args as c. With pipes, its standard input
 * and output are pipes (c->in, c->out); otherwise standard input is /dev/null and standard
 * output goes to log. Standard error goes to log, or to a pipe (c->err) without one. The
 * test's ends of output pipes do not block. The child is killed if the test dies.
 */
void tu_spawn(struct tu_child *c, const char *tool, const char *const *args, const char *log,
	      bool pipes);

/*
 * Waits up to timeout_ms for c to exit and reaps it. Returns its exit status, 128 + the
 * signal that killed it, or -1 if it is still running.
 */
int tu_child_wait(struct tu_child *c, int timeout_ms);

/*
 * Kills c (SIGKILL) if it runs, reaps it and closes its pipes; unlinks its log unless
 * KVIDX_KEEP_LOGS is set. Safe to call on a child that never started.
 */
void tu_child_kill(struct tu_child *c);

/* A test's children, in the order they started. */
struct tu_kids {
	struct tu_child c[24];
	int n;
};

/*
 * Starts tool with the NULL-terminated args as k's next child (tu_spawn with pipes), its log
 * "/tmp/NAME.TOOL.N.log" (N counting from 1), asserting there is room. Returns the child.
 */
struct tu_child *tu_kids_spawn(struct tu_kids *k, const char *name, const char *tool,
			       const char *const *args, bool pipes);

/* Kills k's children, the last started first (tu_child_kill), and empties k. */
void tu_kids_kill(struct tu_kids *k);

/*
 * Writes one line to c's standard input: fmt formatted (under 16 KiB), then a newline;
 * asserts that it fitted and was all written. Returns the line's length without the newline.
 */
size_t tu_child_say(struct tu_child *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/*
 * What c has written on its standard error pipe so far (all of it once it has exited),
 * gathered in buf (size bytes, *len of them already used, the caller's to reset), which it
 * NUL-terminates and returns: for assertions and failure messages.
 */
const char *tu_child_stderr(struct tu_child *c, char *buf, size_t size, size_t *len);

/* Sleeps ms milliseconds. */
void tu_sleep_ms(unsigned ms);

/*
 * Evaluates cond until it holds or ms milliseconds have passed, running pause (a statement)
 * between tries; the expression's value is cond's last value.
 */
#define TU_POLL(cond, ms, pause)                                                             \
	({                                                                                   \
		uint64_t tu_dl_ = kvidx_now_ns() + (uint64_t)(ms) * 1000000ull;              \
		bool tu_ok_;                                                                 \
		while (!(tu_ok_ = (cond)) && kvidx_now_ns() < tu_dl_)                        \
			pause;                                                               \
		tu_ok_;                                                                      \
	})

/* Evaluates cond every 2 ms until it holds or ms milliseconds pass; its last value. */
#define TU_WAIT_FOR(cond, ms) TU_POLL(cond, ms, tu_sleep_ms(2))

/*
 * Loopback ports of this test, n in 0..9 (Criterion runs each test in its own process): a
 * block of 10 that no other process calling tu_port() holds (a flock on a file in /tmp, for
 * this process's lifetime) and that all bound, TCP and UDP, when it was picked. Concurrent
 * test runs of different worktrees therefore never share a port.
 * They stay below Linux's ephemeral range (32768-60999 by default): a client connection in
 * TIME_WAIT on an ephemeral port lacks SO_REUSEADDR and would make a bind to it fail.
 */
int tu_port(int n);

/* "tcp://127.0.0.1:PORT" of tu_port(n), in a buffer of its own per n. */
const char *tu_endpoint(int n);

/* A loopback port nothing listens on right now (from the kernel's ephemeral range). */
int tu_free_port(void);

#endif /* KVIDX_TESTS_UTIL_RUN_H */
