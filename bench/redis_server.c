/*
 * redis_server.c — starting and stopping the benchmarks' redis-server (see redis_server.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "benchlib.h"
#include "host.h"
#include "redis_server.h"

static struct redis_srv *g_redis_atexit;

bool redis_available(void)
{
	return access("/usr/bin/redis-server", X_OK) == 0 ||
	       system("command -v redis-server >/dev/null 2>&1") == 0;
}

/* Ends the server process, if any. */
static void redis_kill(struct redis_srv *s)
{
	if (s->pid > 0) {
		kill(s->pid, SIGTERM);
		waitpid(s->pid, NULL, 0);
		guard_unpid(s->pid);
		s->pid = 0;
	}
}

void redis_stop(struct redis_srv *s)
{
	redis_kill(s);
	if (s->dir[0]) {
		rmdir(s->dir);
		s->dir[0] = 0;
	}
	if (g_redis_atexit == s)
		g_redis_atexit = NULL;
}

static void redis_atexit(void)
{
	if (g_redis_atexit)
		redis_stop(g_redis_atexit);
}

/* Whether the server on port answers PING. */
static bool redis_pings(int port)
{
	redisContext *c = redisConnect("127.0.0.1", port);
	redisReply *r = NULL;
	bool ok = false;

	if (c && !c->err) {
		r = redisCommand(c, "PING");
		ok = r && r->type == REDIS_REPLY_STATUS;
	}
	if (r)
		freeReplyObject(r);
	if (c)
		redisFree(c);
	return ok;
}

/* The child: redis-server on port, its output to /dev/null. */
static void __attribute__((noreturn)) redis_exec(const struct redis_srv *s)
{
	char port[16];
	int dn = open("/dev/null", O_RDWR);

	prctl(PR_SET_PDEATHSIG, SIGTERM);
	if (dn >= 0) {
		dup2(dn, 0);
		dup2(dn, 1);
	}
	snprintf(port, sizeof(port), "%d", s->port);
	execlp("redis-server", "redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "",
	       "--appendonly", "no", "--dir", s->dir, "--daemonize", "no", "--loglevel",
	       "warning", "--logfile", "", "--protected-mode", "no", (char *)NULL);
	_exit(127);
}

int redis_start(struct redis_srv *s)
{
	memset(s, 0, sizeof(*s));
	snprintf(s->dir, sizeof(s->dir), "/tmp/kvidx-bench-redis-XXXXXX");
	if (!mkdtemp(s->dir)) {
		s->dir[0] = 0;
		fprintf(stderr, "%s: mkdtemp: %s\n", bl_prog, strerror(errno));
		return -1;
	}
	for (int attempt = 0; attempt < 5; attempt++) {
		s->port = free_port();
		if (s->port < 0)
			continue;
		s->pid = fork();
		if (s->pid < 0)
			bdie("fork: %s", strerror(errno));
		if (s->pid == 0)
			redis_exec(s);
		guard_pid(s->pid);
		for (int i = 0; i < 500; i++) { /* up to 5 s */
			int st;
			if (waitpid(s->pid, &st, WNOHANG) == s->pid) {
				guard_unpid(s->pid);
				s->pid = 0;
				break;
			}
			if (redis_pings(s->port)) {
				static bool registered;
				g_redis_atexit = s;
				if (!registered)
					atexit(redis_atexit);
				registered = true;
				return 0;
			}
			sleep_ns(10000000);
		}
		redis_kill(s);
	}
	fprintf(stderr, "%s: could not start redis-server\n", bl_prog);
	redis_stop(s);
	return -1;
}
