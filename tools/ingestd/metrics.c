/*
 * metrics.c — kvidx-ingestd's --metrics-listen endpoint: GET /metrics, rendering with
 * prom_render() (tools/common/prom.c), and the probes /healthz and /readyz (readiness as the
 * event loop last reported it, metrics_set_ready()), served by GNU libmicrohttpd; see
 * metrics.h for the contract.
 *
 * libmicrohttpd, not a parser of our own: it is Debian's well-kept embeddable HTTP server
 * (libmicrohttpd-dev), it parses requests strictly, bounds each connection's memory and
 * idle time, and serves many connections from one epoll thread, so idle or slow clients
 * cost a file descriptor and a little memory each and never hold up a scrape. Limits:
 * CONN_LIMIT connections at once (fewer if open files are scarce: conn_limit(); further
 * ones wait in the kernel's backlog), CONN_MEM bytes
 * of request head per connection (more is answered 431), CONN_TIMEOUT_S seconds of
 * inactivity before a connection is closed.
 *
 * Concurrency model:
 *  1. Each metrics_http_start() starts one daemon with one internal polling thread; every
 *     handler call of that daemon runs on that thread, which alone owns its struct msrv
 *     (index name, reader handle, log limiter) from MHD_start_daemon() on. Reader handles
 *     are single-threaded, so the thread opens its own and shares it with no one.
 *  2. It shares one thing with the event loop: the readiness state (ready_mu guards ready
 *     and ready_why; the loop writes it, /readyz copies it, each holding the lock for a copy
 *     of a short string). Rendering reads the segments like every reader (prom.c), and
 *     ilog() writes each line with one write(2).
 *  3. Progress: rendering never waits for the writer; the thread blocks only in epoll.
 */
#include <errno.h>
#include <microhttpd.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "config.h" /* ing_metrics_addr_parse() */
#include "listen.h"
#include "log.h"
#include "metrics.h"
#include "prom.h"
#include "segment.h" /* kv_name_check() */

#define CONN_LIMIT 1000     /* connections served at once, at most (see conn_limit()) */
#define CONN_MEM (16 << 10) /* request head and buffers per connection, bytes */
#define CONN_TIMEOUT_S 5    /* idle seconds before a connection is closed */
#define BACKLOG 256         /* listen() backlog beyond CONN_LIMIT */

#define READY_WHY_MAX 192

/* Readiness, written by the event loop (metrics_set_ready), read by /readyz. */
static pthread_mutex_t ready_mu = PTHREAD_MUTEX_INITIALIZER;
static bool ready;
static char ready_why[READY_WHY_MAX] = "starting";

void metrics_set_ready(bool is_ready, const char *why)
{
	pthread_mutex_lock(&ready_mu);
	ready = is_ready;
	snprintf(ready_why, sizeof(ready_why), "%s", is_ready || !why ? "" : why);
	pthread_mutex_unlock(&ready_mu);
}

struct msrv {
	char name[KVIDX_NAME_MAX];
	struct kvidx_reader *r;
	struct ilog_limit lim;
};

/* The process's own families (metrics_add_extra()), shared by every server; the lock lets
 * metrics_clear_extra() wait out a render in progress, so their arguments can be freed. */
#define EXTRA_MAX 4
static pthread_rwlock_t extra_lock = PTHREAD_RWLOCK_INITIALIZER;
static struct {
	void (*fn)(FILE *f, void *arg);
	void *arg;
} extras[EXTRA_MAX];
static unsigned nextras;

int metrics_add_extra(void (*fn)(FILE *f, void *arg), void *arg)
{
	int rc = 0;

	pthread_rwlock_wrlock(&extra_lock);
	if (nextras == EXTRA_MAX)
		rc = -ENOSPC;
	else
		extras[nextras].fn = fn, extras[nextras++].arg = arg;
	pthread_rwlock_unlock(&extra_lock);
	return rc;
}

void metrics_clear_extra(void)
{
	pthread_rwlock_wrlock(&extra_lock);
	nextras = 0;
	pthread_rwlock_unlock(&extra_lock);
}

/*
 * How many connections the daemon may hold: CONN_LIMIT, after raising the soft limit on open
 * files to the hard one (a server's usual first step), and at most half of what that allows,
 * so that idle HTTP clients can never take the descriptors the pods' subscriptions need.
 */
static unsigned conn_limit(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		return 64;
	if (rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
		getrlimit(RLIMIT_NOFILE, &rl);
	}
	return rl.rlim_cur / 2 < CONN_LIMIT ? (unsigned)(rl.rlim_cur / 2) : CONN_LIMIT;
}

/* Queues a plain-text answer; MHD frees nothing of ours (the text is static or copied). */
static enum MHD_Result respond_text(struct MHD_Connection *c, unsigned status, const char *msg,
				    const char *allow)
{
	struct MHD_Response *resp =
		MHD_create_response_from_buffer(strlen(msg), (void *)msg, MHD_RESPMEM_MUST_COPY);
	enum MHD_Result rc;

	if (!resp)
		return MHD_NO;
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; charset=utf-8");
	if (allow)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, allow);
	rc = MHD_queue_response(c, status, resp);
	MHD_destroy_response(resp);
	return rc;
}

/* /readyz: 200 "ready", or 503 "not ready: REASON" from the event loop's last report. */
static enum MHD_Result respond_ready(struct MHD_Connection *c)
{
	char msg[READY_WHY_MAX + 16];
	bool ok;

	pthread_mutex_lock(&ready_mu);
	ok = ready;
	snprintf(msg, sizeof(msg), ok ? "ready\n" : "not ready: %s\n", ready_why);
	pthread_mutex_unlock(&ready_mu);
	return respond_text(c, ok ? MHD_HTTP_OK : MHD_HTTP_SERVICE_UNAVAILABLE, msg, NULL);
}

/* The exposition into a malloc'd buffer, opening the reader if needed. 0 or -errno. */
static int render_body(struct msrv *s, char **body, size_t *len)
{
	int rc;

	if (!s->r) {
		s->r = kvidx_reader_open(s->name);
		if (!s->r)
			return -errno;
	}
	FILE *f = open_memstream(body, len);
	if (!f)
		return -errno;
	rc = prom_render(s->r, f);
	if (rc == -KVIDX_ERETRY) { /* expelled while stalled: the handle re-registered */
		rewind(f);
		rc = prom_render(s->r, f);
	}
	pthread_rwlock_rdlock(&extra_lock);
	for (unsigned i = 0; rc == 0 && i < nextras; i++)
		extras[i].fn(f, extras[i].arg);
	pthread_rwlock_unlock(&extra_lock);
	if (fclose(f) != 0 && rc == 0)
		rc = -EIO;
	if (rc < 0) {
		free(*body);
		*body = NULL;
		/* The index may be gone or replaced: open it again next time. */
		kvidx_reader_close(s->r);
		s->r = NULL;
	}
	return rc;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
			      const char *method, const char *version, const char *upload,
			      size_t *upload_len, void **req)
{
	struct msrv *s = cls;
	char *body = NULL;
	size_t len = 0;
	int rc;

	(void)version;
	(void)upload;
	*upload_len = 0; /* a request body, if any, is ignored */
	*req = s;
	if (strcmp(url, "/metrics") != 0 && strcmp(url, "/healthz") != 0 &&
	    strcmp(url, "/readyz") != 0)
		return respond_text(c, MHD_HTTP_NOT_FOUND,
				    "not found: try /metrics, /healthz or /readyz\n", NULL);
	if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
		return respond_text(c, MHD_HTTP_METHOD_NOT_ALLOWED, "use GET\n", "GET, HEAD");
	if (!strcmp(url, "/healthz")) /* answered by the process: it is alive */
		return respond_text(c, MHD_HTTP_OK, "ok\n", NULL);
	if (!strcmp(url, "/readyz"))
		return respond_ready(c);
	rc = render_body(s, &body, &len);
	if (rc < 0) {
		ilog_limited(&s->lim, ILOG_WARN, "metrics: index '%s' cannot be read: %s", s->name,
			     kvidx_strerror(rc));
		return respond_text(c, MHD_HTTP_SERVICE_UNAVAILABLE,
				    "index cannot be read (is kvidx-ingestd running?)\n", NULL);
	}
	struct MHD_Response *resp =
		MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
	if (!resp) {
		free(body);
		return MHD_NO;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
				"text/plain; version=0.0.4; charset=utf-8");
	enum MHD_Result r = MHD_queue_response(c, MHD_HTTP_OK, resp);
	MHD_destroy_response(resp);
	return r;
}

/* libmicrohttpd's own complaints (malformed requests, resource limits): rate-limited. */
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	struct msrv *s = cls;
	char msg[256];

	vsnprintf(msg, sizeof(msg), fmt, ap);
	msg[strcspn(msg, "\n")] = '\0';
	ilog_limited(&s->lim, ILOG_DEBUG, "metrics: %s", msg);
}

int metrics_http_start(const char *addr, const char *index_name)
{
	char err[256], hostport[256];
	sigset_t all, old;
	int fd;

	if (!index_name)
		index_name = KVIDX_DEFAULT_NAME;
	/* The address --metrics-listen accepts (port not 0), bound as the other servers'. */
	if (!addr || kv_name_check(index_name) < 0 ||
	    ing_metrics_addr_parse(addr, hostport, sizeof(hostport), err, sizeof(err)) < 0)
		return -EINVAL;
	fd = tc_listen_tcp(hostport, false, BACKLOG, NULL, err, sizeof(err));
	if (fd < 0)
		return fd;
	struct msrv *s = calloc(1, sizeof(*s));
	if (!s) {
		close(fd);
		return -ENOMEM;
	}
	snprintf(s->name, sizeof(s->name), "%s", index_name);
	/* The daemon's thread starts with every signal blocked, so they go to the caller's. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	struct MHD_Daemon *d = MHD_start_daemon(
		MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ERROR_LOG |
			(hostport[0] == '[' ? MHD_USE_IPv6 : 0),
		0, NULL, NULL, handle, s,
		MHD_OPTION_LISTEN_SOCKET, fd,
		MHD_OPTION_CONNECTION_LIMIT, conn_limit(),
		MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)CONN_MEM,
		MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)CONN_TIMEOUT_S,
		MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s,
		MHD_OPTION_END);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (!d) {
		close(fd);
		free(s);
		return -EIO;
	}
	return 0; /* runs until the process exits */
}
