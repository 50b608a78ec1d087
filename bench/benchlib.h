/*
 * benchlib.h — the frame every bench_* program runs in: its name, its command line (the
 * options all of them take, numbers with k/m suffixes), fatal errors, the start (line-buffered
 * stdout, the --json file, signal handlers) and, when a run is interrupted, the removal of the
 * shm segments and child processes it registered.
 */
#ifndef KVIDX_BENCHLIB_H
#define KVIDX_BENCHLIB_H

#include <getopt.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

/* The program's name, defined by each benchmark: const char bl_prog[] = PROG; */
extern const char bl_prog[];

/* The options every benchmark takes besides its own. */
struct bl_args {
	bool quick;       /* --quick: a short run */
	const char *json; /* --json FILE: append one JSON object per result row to FILE */
};

/* The last entries of a benchmark's option table: --quick, --json, --help, the terminator. */
#define BL_OPTIONS_TAIL                                                                    \
	{ "quick", no_argument, NULL, 'q' }, { "json", required_argument, NULL, 'j' },    \
	{ "help", no_argument, NULL, 'h' }, { NULL, 0, NULL, 0 }

/* The last lines of the --help text of the benchmarks whose option column is 15 wide. */
#define BL_HELP_TAIL \
	"  --json FILE    append one JSON object per row to FILE\n" \
	"  -h, --help     this text\n"

/*
 * getopt_long() over lo (which ends in BL_OPTIONS_TAIL) with what every benchmark answers
 * alike: --quick and --json are stored in *a, -h/--help prints usage to stdout and exits 0, an
 * unknown option or a missing value prints it to stderr and exits 2, and an operand left after
 * the options is refused (exit 2). Returns the next option of the caller's own, or -1 once all
 * are read.
 */
int bl_getopt(int argc, char **argv, const struct option *lo, void (*usage)(FILE *f),
	      struct bl_args *a);

/* The number in s (k/m suffixes: x 1024, x 1048576), or exit 2 naming flag if it is not one
 * or lies outside lo..hi. */
uint64_t parse_num(const char *flag, const char *s, uint64_t lo, uint64_t hi);

/* Prints "PROG: message" to stderr and exits 1. */
void __attribute__((format(printf, 1, 2), noreturn)) bdie(const char *fmt, ...);

/* calloc that dies when out of memory (and never returns NULL for a zero size). */
void *xcalloc(size_t n, size_t size);

/* Line-buffered stdout, the --json file (NULL: none), and the cleanup handlers. */
void bench_start(const char *json_path);

/* Unlinks index name's segments: the registry and its data generations. */
void bl_unlink_index(const char *name);

/* Slot i (0..15) of the indexes to unlink if the run is interrupted; name NULL forgets it. */
void guard_name(int i, const char *name);

/* A child to kill if the run is interrupted; returns its slot (or -1). */
int guard_pid(pid_t pid);

/* Forgets a child guard_pid() registered. */
void guard_unpid(pid_t pid);

/* The folder of the tools a benchmark runs: given (--bin), else the benchmark's own. */
void bl_find_bindir(const char *given, char *dir, size_t n);
/* Starts argv[0] (pinned to cpu unless < 0, stderr to errfile when set), killed with the
 * benchmark (PR_SET_PDEATHSIG and guard_pid()). Exits on failure. */
pid_t bl_spawn(char *const argv[], int cpu, const char *errfile);
/* Sends sig (0: none) to a child bl_spawn() started and waits for it. */
void bl_reap(pid_t pid, int sig);

#endif /* KVIDX_BENCHLIB_H */
