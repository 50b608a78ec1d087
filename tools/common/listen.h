/*
 * listen.h — the listening TCP sockets of the tools that serve HTTP (kvidx-fakepod --http,
 * kvidx-route --listen): "HOST:PORT" parsed and bound, optionally with SO_REUSEPORT so that
 * several processes share one port (the kernel spreads new connections over them). The
 * HTTP itself is libmicrohttpd's, which is handed the socket.
 */
#ifndef KVIDX_TOOLS_LISTEN_H
#define KVIDX_TOOLS_LISTEN_H

#include <stdbool.h>
#include <stddef.h>

/*
 * Parses "HOST:PORT" (HOST an IPv4 address, "localhost", "*" or "0.0.0.0" for every
 * address, or "[IPv6]"; PORT 0..65535, 0 letting the kernel choose) and checks it only:
 * returns 0, or -EINVAL with a reason in err.
 */
int tc_listen_check(const char *hostport, char *err, size_t errlen);

/*
 * Creates a non-blocking, close-on-exec TCP socket bound to hostport and listening
 * (SO_REUSEADDR; SO_REUSEPORT when reuseport). Returns the descriptor, or a negative errno
 * with a reason in err. *port (if not NULL) receives the bound port.
 */
int tc_listen_tcp(const char *hostport, bool reuseport, int backlog, int *port, char *err,
		  size_t errlen);

#endif /* KVIDX_TOOLS_LISTEN_H */
