/*
 * benchlib.c — the frame every bench_* program runs in (see benchlib.h): the common part of
 * its command line, fatal errors, its start, and the cleanup of what it registered when a
 * signal ends the run.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "benchlib.h"
#include "host.h"
#include "kvidx_writer.h"
#include "report.h"

int bl_getopt(int argc, char **argv, const struct option *lo, void (*usage)(FILE *f),
	      struct bl_args *a)
{
	for (;;) {
		int c = getopt_long(argc, argv, "h", lo, NULL);

		switch (c) {
		case 'q':
			a->quick = true;
			continue;
		case 'j':
			a->json = optarg;
			continue;
		case 'h':
			usage(stdout);
			exit(0);
		case '?':
			usage(stderr);
			exit(2);
		case -1:
			if (optind < argc) {
				fprintf(stderr, "%s: unexpected argument '%s'\n", bl_prog,
					argv[optind]);
				exit(2);
			}
			break;
		}
		return c;
	}
}

uint64_t parse_num(const char *flag, const char *s, uint64_t lo, uint64_t hi)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 0);
	if (*end == 'k' || *end == 'K')
		v <<= 10, end++;
	else if (*end == 'm' || *end == 'M')
		v <<= 20, end++;
	if (errno || end == s || *end || s[0] == '-' || v < lo || v > hi) {
		fprintf(stderr, "%s: %s: expected a number in %" PRIu64 "..%" PRIu64 ", got '%s'\n",
			bl_prog, flag, lo, hi, s);
		exit(2);
	}
	return v;
}

void bdie(const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	fprintf(stderr, "%s: ", bl_prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

void *xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size ? size : 1);

	if (!p)
		bdie("out of memory (%zu x %zu bytes)", n, size);
	return p;
}

/* ---- cleanup on SIGINT/SIGTERM/SIGHUP: this run's shm segments and child processes ---- */

#define GUARD_MAX 16
static char g_guard_names[GUARD_MAX][KVIDX_NAME_MAX];
static volatile pid_t g_guard_pids[GUARD_MAX];

void bl_unlink_index(const char *name)
{
	char p[KVIDX_NAME_MAX + 32];

	snprintf(p, sizeof(p), "/%.*s", KVIDX_NAME_MAX, name);
	shm_unlink(p);
	snprintf(p, sizeof(p), "/%.*s.lock", KVIDX_NAME_MAX, name);
	shm_unlink(p);
	for (int g = 1; g <= 8; g++) {
		snprintf(p, sizeof(p), "/%.*s.data.%d", KVIDX_NAME_MAX, name, g);
		shm_unlink(p);
		snprintf(p, sizeof(p), "/%.*s.reg.%d", KVIDX_NAME_MAX, name, g);
		shm_unlink(p);
	}
}

static void guard_signal(int sig)
{
	for (int i = 0; i < GUARD_MAX; i++) {
		if (g_guard_pids[i] > 0)
			kill(g_guard_pids[i], SIGKILL);
		if (g_guard_names[i][0])
			bl_unlink_index(g_guard_names[i]);
	}
	signal(sig, SIG_DFL);
	raise(sig);
}

void guard_name(int i, const char *name)
{
	snprintf(g_guard_names[i], sizeof(g_guard_names[i]), "%s", name ? name : "");
}

int guard_pid(pid_t pid)
{
	for (int i = 0; i < GUARD_MAX; i++)
		if (g_guard_pids[i] <= 0) {
			g_guard_pids[i] = pid;
			return i;
		}
	return -1;
}

void guard_unpid(pid_t pid)
{
	for (int i = 0; i < GUARD_MAX; i++)
		if (g_guard_pids[i] == pid)
			g_guard_pids[i] = 0;
}

void bench_start(const char *json_path)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (json_path)
		json_open(json_path);
	signal(SIGINT, guard_signal);
	signal(SIGTERM, guard_signal);
	signal(SIGHUP, guard_signal);
}

void bl_find_bindir(const char *given, char *dir, size_t n)
{
	if (given) {
		snprintf(dir, n, "%s", given);
		return;
	}
	ssize_t len = readlink("/proc/self/exe", dir, n - 1);
	if (len <= 0)
		bdie("readlink /proc/self/exe: %s", strerror(errno));
	dir[len] = 0;
	char *slash = strrchr(dir, '/');
	if (slash)
		*slash = 0;
}

pid_t bl_spawn(char *const argv[], int cpu, const char *errfile)
{
	pid_t pid = fork();

	if (pid < 0)
		bdie("fork: %s", strerror(errno));
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (cpu >= 0)
			pin_cpu(cpu);
		if (errfile) {
			int fd = open(errfile, O_WRONLY | O_CREAT | O_TRUNC, 0600);
			if (fd >= 0)
				dup2(fd, 2);
		}
		execv(argv[0], argv);
		fprintf(stderr, "%s: exec %s: %s\n", bl_prog, argv[0], strerror(errno));
		_exit(127);
	}
	guard_pid(pid);
	return pid;
}

void bl_reap(pid_t pid, int sig)
{
	if (pid <= 0)
		return;
	if (sig)
		kill(pid, sig);
	waitpid(pid, NULL, 0);
	guard_unpid(pid);
}
