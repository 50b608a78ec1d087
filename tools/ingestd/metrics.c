/*
 * metrics.c — kvidx-ingestd's --metrics endpoint: a minimal loopback-only HTTP server for
 * GET /metrics, rendering with prom_render() (tools/common/prom.c); see metrics.h.
 *
 * The server is one detached thread per metrics_http_start() call, serving one connection at
 * a time: a scrape is a few hundred microseconds of work, and the per-connection deadlines
 * (REQ_TIMEOUT_MS to send the request, SEND_TIMEOUT_MS to take the answer, DRAIN_MS to close)
 * bound how long any client can keep the next one waiting.
 *
 * Concurrency model of the server:
 *  1. Each server thread owns its struct msrv (listening socket, index name, reader handle,
 *     log limiter) alone from pthread_create() on; the caller keeps no pointer to it. Reader
 *     handles are single-threaded, so the thread opens its own and shares it with no one.
 *  2. It shares nothing else with its caller: rendering reads the segments like every reader
 *     (prom.c), and ilog() writes each line with one write(2).
 *  3. Progress: the thread blocks only in accept() and in poll() with a deadline; rendering
 *     never waits for the writer.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "metrics.h"
#include "prom.h"
#include "segment.h" /* kv_name_check() */

#define REQ_MAX 4096          /* request line and headers, bytes */
#define REQ_TIMEOUT_MS 2000   /* for the whole request to arrive */
#define SEND_TIMEOUT_MS 5000  /* for the whole answer to be taken */
#define DRAIN_MS 200          /* for the client to close after the answer */
#define DRAIN_MAX 65536       /* bytes of unread request discarded before closing */

/* ---- HTTP ---- */

struct msrv {
	int fd;
	char name[KVIDX_NAME_MAX];
	struct kvidx_reader *r;
	struct ilog_limit lim;
};

/* Parses "IP:PORT" (IPv4 in 127.0.0.0/8, "localhost", or "[::1]"). 0 or -EINVAL. */
static int parse_addr(const char *addr, struct sockaddr_storage *ss, socklen_t *len)
{
	char host[64];
	const char *port;
	size_t hl;
	unsigned long pv = 0;

	if (!addr)
		return -EINVAL;
	memset(ss, 0, sizeof(*ss));
	if (addr[0] == '[') {
		const char *end = strchr(addr, ']');
		if (!end || end[1] != ':')
			return -EINVAL;
		hl = (size_t)(end - addr - 1);
		if (hl >= sizeof(host))
			return -EINVAL;
		memcpy(host, addr + 1, hl);
		host[hl] = '\0';
		port = end + 2;
	} else {
		const char *colon = strrchr(addr, ':');
		if (!colon)
			return -EINVAL;
		hl = (size_t)(colon - addr);
		if (hl >= sizeof(host))
			return -EINVAL;
		memcpy(host, addr, hl);
		host[hl] = '\0';
		port = colon + 1;
	}
	if (!*port || strlen(port) > 5)
		return -EINVAL;
	for (const char *p = port; *p; p++) {
		if (*p < '0' || *p > '9')
			return -EINVAL;
		pv = pv * 10 + (unsigned long)(*p - '0');
	}
	if (pv == 0 || pv > 65535)
		return -EINVAL;
	if (addr[0] == '[') {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
		if (inet_pton(AF_INET6, host, &s6->sin6_addr) != 1 ||
		    !IN6_IS_ADDR_LOOPBACK(&s6->sin6_addr))
			return -EINVAL;
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons((uint16_t)pv);
		*len = sizeof(*s6);
		return 0;
	}
	struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
	if (!strcmp(host, "localhost"))
		snprintf(host, sizeof(host), "127.0.0.1");
	if (inet_pton(AF_INET, host, &s4->sin_addr) != 1 ||
	    (ntohl(s4->sin_addr.s_addr) >> 24) != 127)
		return -EINVAL;
	s4->sin_family = AF_INET;
	s4->sin_port = htons((uint16_t)pv);
	*len = sizeof(*s4);
	return 0;
}

static uint64_t mono_ms(void)
{
	return kvidx_now_ns() / 1000000u;
}

/* Waits for events on fd until deadline (mono_ms). 1 ready, 0 timed out, -errno. */
static int wait_fd(int fd, short events, uint64_t deadline)
{
	for (;;) {
		uint64_t now = mono_ms();
		if (now >= deadline)
			return 0;
		struct pollfd pfd = { .fd = fd, .events = events };
		int rc = poll(&pfd, 1, (int)(deadline - now));
		if (rc > 0)
			return 1;
		if (rc == 0)
			return 0;
		if (errno != EINTR)
			return -errno;
	}
}

/* Sends all of buf by deadline. 0, or -ETIMEDOUT / -errno. */
static int send_all(int fd, const char *buf, size_t len, uint64_t deadline)
{
	while (len) {
		int w = wait_fd(fd, POLLOUT, deadline);
		if (w <= 0)
			return w ? w : -ETIMEDOUT;
		ssize_t n = send(fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			return -errno;
		}
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

static void respond(int fd, const char *status, const char *ctype, const char *extra,
		    const char *body, size_t len, bool head_only)
{
	char hdr[512];
	uint64_t deadline = mono_ms() + SEND_TIMEOUT_MS;
	int hl = snprintf(hdr, sizeof(hdr),
			  "HTTP/1.0 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s"
			  "Connection: close\r\n\r\n",
			  status, ctype, len, extra ? extra : "");

	if (send_all(fd, hdr, (size_t)hl, deadline) == 0 && !head_only && len)
		send_all(fd, body, len, deadline);
}

static void respond_text(int fd, const char *status, const char *extra, const char *msg)
{
	respond(fd, status, "text/plain; charset=utf-8", extra, msg, strlen(msg), false);
}

/*
 * Reads the request head (request line and headers, up to the empty line) into buf within
 * REQ_TIMEOUT_MS. Returns its length, 0 if the client went away, -ETIMEDOUT, -E2BIG when it
 * exceeds REQ_MAX bytes, or -errno.
 */
static ssize_t read_head(int fd, char *buf)
{
	uint64_t deadline = mono_ms() + REQ_TIMEOUT_MS;
	size_t len = 0;

	for (;;) {
		int w = wait_fd(fd, POLLIN, deadline);
		if (w <= 0)
			return w ? w : -ETIMEDOUT;
		ssize_t n = recv(fd, buf + len, REQ_MAX - len, MSG_DONTWAIT);
		if (n < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			return -errno;
		}
		if (n == 0)
			return 0;
		len += (size_t)n;
		buf[len] = '\0';
		if (strstr(buf, "\r\n\r\n") || strstr(buf, "\n\n"))
			return (ssize_t)len;
		if (len == REQ_MAX)
			return -E2BIG;
	}
}

/* Renders the metrics into a malloc'd buffer. 0, or a negative error (reader dropped). */
static int render_body(struct msrv *s, char **body, size_t *len)
{
	int rc = 0;

	for (int tries = 0; tries < 2; tries++) {
		if (!s->r) {
			s->r = kvidx_reader_open(s->name);
			if (!s->r)
				return -errno;
		}
		FILE *m = open_memstream(body, len);
		if (!m)
			return -errno;
		rc = prom_render(s->r, m);
		if (fclose(m) != 0 && rc == 0)
			rc = -EIO;
		if (rc == 0)
			return 0;
		free(*body);
		*body = NULL;
		if (rc == -KVIDX_ERETRY || rc == -ENOMEM || rc == -EIO)
			continue;
		/* The index went away or changed beyond repair: attach afresh next time. */
		kvidx_reader_close(s->r);
		s->r = NULL;
	}
	return rc;
}

static void serve_one(struct msrv *s, int fd)
{
	char buf[REQ_MAX + 1], *body = NULL, msg[256];
	ssize_t n = read_head(fd, buf);
	size_t len = 0;

	if (n == 0 || n == -ECONNRESET)
		return;
	if (n == -ETIMEDOUT) {
		respond_text(fd, "408 Request Timeout", NULL, "request timeout\n");
		return;
	}
	if (n == -E2BIG) {
		respond_text(fd, "431 Request Header Fields Too Large", NULL,
			     "request too large\n");
		return;
	}
	if (n < 0)
		return;
	/* Request line: METHOD SP TARGET SP HTTP/x.y */
	char *eol = strpbrk(buf, "\r\n");
	*eol = '\0';
	char *sp1 = strchr(buf, ' '), *sp2 = sp1 ? strchr(sp1 + 1, ' ') : NULL;
	if (!sp1 || !sp2 || sp1 == buf || sp2 == sp1 + 1 || strchr(sp2 + 1, ' ') ||
	    strncmp(sp2 + 1, "HTTP/", 5) != 0) {
		respond_text(fd, "400 Bad Request", NULL, "malformed request line\n");
		return;
	}
	*sp1 = *sp2 = '\0';
	const char *method = buf, *target = sp1 + 1;
	size_t plen = strcspn(target, "?");
	if (plen != strlen("/metrics") || strncmp(target, "/metrics", plen) != 0) {
		respond_text(fd, "404 Not Found", NULL, "not found; try /metrics\n");
		return;
	}
	bool head = !strcmp(method, "HEAD");
	if (!head && strcmp(method, "GET") != 0) {
		respond_text(fd, "405 Method Not Allowed", "Allow: GET, HEAD\r\n",
			     "method not allowed\n");
		return;
	}
	int rc = render_body(s, &body, &len);
	if (rc < 0) {
		snprintf(msg, sizeof(msg), "index '%s' cannot be read: %s\n", s->name,
			 kvidx_strerror(rc));
		respond_text(fd, "503 Service Unavailable", NULL, msg);
		ilog_limited(&s->lim, ILOG_WARN, "metrics: index '%s' cannot be read: %s", s->name,
			     kvidx_strerror(rc));
		return;
	}
	respond(fd, "200 OK", "text/plain; version=0.0.4; charset=utf-8", NULL, body, len,
		head);
	free(body);
}

/*
 * Ends a connection: closing with unread input would make the kernel reset it, and the client
 * could lose the answer (an oversized request's 431, say). So the answer is finished with a
 * FIN and what the client still sends is discarded until it closes, for at most DRAIN_MS and
 * DRAIN_MAX bytes.
 */
static void finish(int fd)
{
	uint64_t deadline = mono_ms() + DRAIN_MS;
	size_t total = 0;
	char scratch[4096];

	shutdown(fd, SHUT_WR);
	while (total < DRAIN_MAX && wait_fd(fd, POLLIN, deadline) > 0) {
		ssize_t n = recv(fd, scratch, sizeof(scratch), MSG_DONTWAIT);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n <= 0)
			break;
		total += (size_t)n;
	}
	close(fd);
}

static void *serve_thread(void *arg)
{
	struct msrv *s = arg;

	for (;;) {
		int c = accept4(s->fd, NULL, NULL, SOCK_CLOEXEC);
		if (c < 0) {
			int e = errno;
			if (e == EINTR || e == ECONNABORTED || e == EPROTO)
				continue;
			ilog_limited(&s->lim, ILOG_WARN, "metrics: accept: %s", strerror(e));
			if (e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM) {
				struct timespec ts = { 0, 100 * 1000 * 1000 };
				nanosleep(&ts, NULL);
				continue;
			}
			break;
		}
		serve_one(s, c);
		finish(c);
	}
	close(s->fd);
	kvidx_reader_close(s->r);
	free(s);
	return NULL;
}

int metrics_http_start(const char *addr, const char *index_name)
{
	struct sockaddr_storage ss;
	socklen_t sl = 0;
	pthread_attr_t attr;
	pthread_t tid;
	sigset_t all, old;
	int one = 1, rc;

	if (!index_name)
		index_name = KVIDX_DEFAULT_NAME;
	if (kv_name_check(index_name) < 0 || parse_addr(addr, &ss, &sl) < 0)
		return -EINVAL;
	struct msrv *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	snprintf(s->name, sizeof(s->name), "%s", index_name);
	s->fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s->fd < 0) {
		rc = -errno;
		free(s);
		return rc;
	}
	setsockopt(s->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(s->fd, (struct sockaddr *)&ss, sl) < 0 || listen(s->fd, 16) < 0) {
		rc = -errno;
		close(s->fd);
		free(s);
		return rc;
	}
	/* The thread starts with every signal blocked, so they go to the caller's threads. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	rc = -pthread_create(&tid, &attr, serve_thread, s);
	pthread_attr_destroy(&attr);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc < 0) {
		close(s->fd);
		free(s);
	}
	return rc;
}
