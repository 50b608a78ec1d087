/*
 * redis_server.h — a private redis-server for the Redis baselines: started on a free loopback
 * port with no persistence, in a temporary directory, and stopped at the end (at exit too,
 * and by the SIGINT/SIGTERM handler as a guarded child).
 */
#ifndef KVIDX_BENCH_REDIS_SERVER_H
#define KVIDX_BENCH_REDIS_SERVER_H

#include <stdbool.h>
#include <sys/types.h>

struct redis_srv {
	pid_t pid;
	int port;
	char dir[64];
};

/* Whether a redis-server can be run. */
bool redis_available(void);

/* Starts redis-server and waits (up to 5 s per port tried) until it answers PING. Returns 0,
 * or -1 (with a message on stderr) if it cannot run. */
int redis_start(struct redis_srv *s);

/* Stops the server and removes its directory; nothing if it is not running. */
void redis_stop(struct redis_srv *s);

#endif /* KVIDX_BENCH_REDIS_SERVER_H */
