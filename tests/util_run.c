/*
 * util_run.c — the tests' way of running the built tools, as one-shot commands or as
 * children, and of picking their ports (see util_run.h).
 */
#include "util_run.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

const char *tu_tool_path(const char *tool)
{
	static char path[4096];
	const char *bin = getenv("KVIDX_BIN");

	cr_assert(bin && *bin,
		  "KVIDX_BIN is not set: run the tests through `make test`, or set KVIDX_BIN to "
		  "the directory holding the %s binary", tool);
	cr_assert(!strchr(bin, '\''), "KVIDX_BIN contains a single quote: %s", bin);
	cr_assert(snprintf(path, sizeof(path), "%s/%s", bin, tool) < (int)sizeof(path));
	cr_assert_eq(access(path, X_OK), 0, "%s is not executable: %s", path, strerror(errno));
	return path;
}

/* Runs cmd through sh and collects its standard output (see tu_run_tool). */
static struct tu_run run_cmd(const char *cmd)
{
	struct tu_run r = { 0 };
	size_t cap = 1 << 16;
	FILE *p;
	int st;

	r.out = malloc(cap);
	cr_assert_not_null(r.out);
	p = popen(cmd, "r");
	cr_assert(p, "popen(%s): %s", cmd, strerror(errno));
	for (;;) {
		if (cap - r.len < 2) {
			cap *= 2;
			r.out = realloc(r.out, cap);
			cr_assert_not_null(r.out);
		}
		size_t got = fread(r.out + r.len, 1, cap - r.len - 1, p);
		if (!got)
			break;
		r.len += got;
	}
	r.out[r.len] = '\0';
	st = pclose(p);
	cr_assert(st != -1 && WIFEXITED(st), "%s: did not exit normally (status %d)", cmd, st);
	r.status = WEXITSTATUS(st);
	cr_assert_eq(strlen(r.out), r.len, "%s: NUL byte in the output", cmd);
	return r;
}

struct tu_run tu_run_tool(const char *tool, const char *fmt, ...)
{
	const char *path = tu_tool_path(tool);
	char cmd[8192], args[4096];
	va_list ap;

	va_start(ap, fmt);
	cr_assert(vsnprintf(args, sizeof(args), fmt, ap) < (int)sizeof(args));
	va_end(ap);
	cr_assert(snprintf(cmd, sizeof(cmd), "'%s' %s", path, args) < (int)sizeof(cmd));
	return run_cmd(cmd);
}

struct tu_run tu_run_sh(const char *fmt, ...)
{
	char cmd[8192];
	va_list ap;

	va_start(ap, fmt);
	cr_assert(vsnprintf(cmd, sizeof(cmd), fmt, ap) < (int)sizeof(cmd));
	va_end(ap);
	return run_cmd(cmd);
}

void tu_spawn(struct tu_child *c, const char *tool, const char *const *args, const char *log,
	      bool pipes)
{
	const char *path = tu_tool_path(tool);
	const char *argv[64];
	int in[2] = { -1, -1 }, out[2] = { -1, -1 }, err[2] = { -1, -1 }, logfd = -1, n = 0;

	argv[n++] = path;
	for (int i = 0; args[i]; i++) {
		cr_assert(n < 62, "too many arguments for %s", tool);
		argv[n++] = args[i];
	}
	argv[n] = NULL;
	cr_assert(log || pipes, "%s: its output must go to a log or a pipe", tool);
	*c = (struct tu_child){ .pid = -1, .in = -1, .out = -1, .err = -1 };
	if (log) {
		cr_assert(snprintf(c->log, sizeof(c->log), "%s", log) < (int)sizeof(c->log));
		logfd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		cr_assert(logfd >= 0, "%s: %s", log, strerror(errno));
	} else {
		cr_assert_eq(pipe2(err, O_CLOEXEC), 0);
	}
	if (pipes)
		cr_assert(pipe2(in, O_CLOEXEC) == 0 && pipe2(out, O_CLOEXEC) == 0);
	c->pid = fork();
	cr_assert(c->pid >= 0);
	if (c->pid == 0) {
		int devnull = open("/dev/null", O_RDONLY);

		prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive a crashed test */
		dup2(pipes ? in[0] : devnull, 0);
		dup2(pipes ? out[1] : logfd, 1);
		dup2(log ? logfd : err[1], 2);
		execv(path, (char *const *)argv);
		_exit(127);
	}
	if (logfd >= 0)
		close(logfd);
	if (pipes) {
		close(in[0]);
		close(out[1]);
		c->in = in[1];
		c->out = out[0];
		fcntl(c->out, F_SETFL, O_NONBLOCK);
	}
	if (!log) {
		close(err[1]);
		c->err = err[0];
		fcntl(c->err, F_SETFL, O_NONBLOCK);
	}
}

int tu_child_wait(struct tu_child *c, int timeout_ms)
{
	uint64_t dl = kvidx_now_ns() + (uint64_t)timeout_ms * 1000000ull;
	int st;

	if (c->pid <= 0)
		return -1;
	for (;;) {
		if (waitpid(c->pid, &st, WNOHANG) == c->pid) {
			c->pid = -1; /* reaped: tu_child_kill() then kills nothing */
			return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
		}
		if (kvidx_now_ns() >= dl)
			return -1;
		tu_sleep_ms(5);
	}
}

void tu_child_kill(struct tu_child *c)
{
	if (c->pid > 0) { /* never kill(-1): a reaped child's pid is -1 */
		kill(c->pid, SIGKILL);
		waitpid(c->pid, NULL, 0);
	}
	c->pid = -1;
	if (c->in >= 0)
		close(c->in);
	if (c->out >= 0)
		close(c->out);
	if (c->err >= 0)
		close(c->err);
	c->in = c->out = c->err = -1;
	if (c->log[0] && !getenv("KVIDX_KEEP_LOGS"))
		unlink(c->log);
	c->log[0] = '\0';
}

struct tu_child *tu_kids_spawn(struct tu_kids *k, const char *name, const char *tool,
			       const char *const *args, bool pipes)
{
	char log[256];

	cr_assert(k->n < (int)(sizeof(k->c) / sizeof(k->c[0])), "more than %zu children",
		  sizeof(k->c) / sizeof(k->c[0]));
	snprintf(log, sizeof(log), "/tmp/%s.%s.%d.log", name, tool, k->n + 1);
	tu_spawn(&k->c[k->n], tool, args, log, pipes);
	return &k->c[k->n++];
}

void tu_kids_kill(struct tu_kids *k)
{
	for (int i = k->n - 1; i >= 0; i--)
		tu_child_kill(&k->c[i]);
	k->n = 0;
}

size_t tu_child_say(struct tu_child *c, const char *fmt, ...)
{
	char line[1 << 14];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line) - 1, fmt, ap);
	va_end(ap);
	cr_assert(n >= 0 && (size_t)n < sizeof(line) - 1, "script line too long: %d bytes", n);
	line[n++] = '\n';
	cr_assert_eq(write(c->in, line, (size_t)n), n, "writing a line to the child's standard "
		     "input: %s", strerror(errno));
	return (size_t)n - 1;
}

const char *tu_child_stderr(struct tu_child *c, char *buf, size_t size, size_t *len)
{
	ssize_t r;

	while (c->err >= 0 && *len < size - 1 &&
	       (r = read(c->err, buf + *len, size - 1 - *len)) > 0)
		*len += (size_t)r;
	buf[*len] = '\0';
	return buf;
}

void tu_sleep_ms(unsigned ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000 };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

char *tu_expect_usage(const char *tool, const char *args, const char *msg)
{
	struct tu_run r = tu_run_tool(tool, "%s 2>&1", args);

	cr_assert_eq(r.status, 2, "%s %s: exit %d: %s", tool, args, r.status, r.out);
	cr_assert(strstr(r.out, msg), "%s %s: no '%s' in: %s", tool, args, msg, r.out);
	return r.out;
}

/* Ports of the blocks tu_port() hands out: [TU_PORT_LO, TU_PORT_HI), 10 per block. */
#define TU_PORT_LO 12000
#define TU_PORT_HI 32760
#define TU_PORT_BLOCKS ((TU_PORT_HI - TU_PORT_LO) / 10)

/* Whether port binds on loopback now, as a TCP listener (SO_REUSEADDR, as servers do) and UDP. */
static bool port_binds(int port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	static const int types[] = { SOCK_STREAM, SOCK_DGRAM };
	int one = 1;

	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		int fd = socket(AF_INET, types[i] | SOCK_CLOEXEC, 0);
		bool ok;

		cr_assert_geq(fd, 0, "socket: %s", strerror(errno));
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		ok = bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
		close(fd);
		if (!ok)
			return false;
	}
	return true;
}

/*
 * Takes block b if no other process holds it: an exclusive flock on /tmp/kvidx-test-port-B.lock,
 * kept (the descriptor stays open, close-on-exec) until this process exits, when the kernel drops
 * it. A block whose ports do not all bind right now (something else on the machine uses one) is
 * given back. Returns the lock's descriptor, or -1.
 */
static int port_block_take(int b)
{
	char path[64];
	int fd;

	snprintf(path, sizeof(path), "/tmp/kvidx-test-port-%d.lock", b);
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
	if (fd < 0)
		return -1;
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		close(fd);
		return -1;
	}
	for (int i = 0; i < 10; i++)
		if (!port_binds(TU_PORT_LO + b * 10 + i)) {
			close(fd); /* drops the lock */
			return -1;
		}
	return fd;
}

/*
 * The block is picked on the first call of each process (a forked child picks its own: the
 * lock is per open file, shared with the parent's descriptor, so the child's fresh open
 * conflicts with the parent's lock and lands elsewhere). Blocks are tried from a start drawn
 * from the pid and the clock, so that concurrent runs of different worktrees rarely even try
 * the same lock, and never share a block.
 */
int tu_port(int n)
{
	static pid_t owner;
	static int base;

	cr_assert(n >= 0 && n < 10);
	if (owner != getpid()) {
		uint64_t seed = (uint64_t)getpid() * 2654435761u ^ kvidx_now_ns();
		int start = (int)(seed % TU_PORT_BLOCKS), got = -1;

		for (int k = 0; k < TU_PORT_BLOCKS && got < 0; k++) {
			int b = (start + k) % TU_PORT_BLOCKS;

			if (port_block_take(b) >= 0)
				got = b;
		}
		cr_assert_geq(got, 0, "tu_port: no free block of 10 ports in %d-%d", TU_PORT_LO,
			      TU_PORT_HI - 1);
		base = TU_PORT_LO + got * 10;
		owner = getpid();
	}
	return base + n;
}

const char *tu_endpoint(int n)
{
	static char buf[10][64];

	snprintf(buf[n], sizeof(buf[n]), "tcp://127.0.0.1:%d", tu_port(n));
	return buf[n];
}

int tu_free_port(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	cr_assert_geq(fd, 0);
	cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	cr_assert_eq(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
	close(fd);
	return ntohs(sa.sin_port);
}
