/*
 * listen.c — "HOST:PORT" to a bound, listening TCP socket, for the tools that serve HTTP;
 * see listen.h.
 */
#include "listen.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdbool.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Fills ss from "HOST:PORT"; 0 or -EINVAL with err set. */
static int parse(const char *hp, struct sockaddr_storage *ss, socklen_t *len, char *err,
		 size_t errlen)
{
	char host[64];
	const char *port;
	size_t hl;
	unsigned long pv = 0;
	bool v6 = hp[0] == '[';

	memset(ss, 0, sizeof(*ss));
	if (v6) {
		const char *end = strchr(hp, ']');
		if (!end || end[1] != ':')
			goto bad;
		hl = (size_t)(end - hp - 1);
		port = end + 2;
		hp++;
	} else {
		const char *colon = strrchr(hp, ':');
		if (!colon)
			goto bad;
		hl = (size_t)(colon - hp);
		port = colon + 1;
	}
	if (hl >= sizeof(host) || !*port || strlen(port) > 5)
		goto bad;
	memcpy(host, hp, hl);
	host[hl] = '\0';
	for (const char *p = port; *p; p++) {
		if (*p < '0' || *p > '9')
			goto bad;
		pv = pv * 10 + (unsigned long)(*p - '0');
	}
	if (pv > 65535)
		goto bad;
	if (v6) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
		if (inet_pton(AF_INET6, host, &s6->sin6_addr) != 1)
			goto bad;
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons((uint16_t)pv);
		*len = sizeof(*s6);
		return 0;
	}
	struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
	if (!strcmp(host, "localhost"))
		snprintf(host, sizeof(host), "127.0.0.1");
	else if (!strcmp(host, "*") || !host[0])
		snprintf(host, sizeof(host), "0.0.0.0");
	if (inet_pton(AF_INET, host, &s4->sin_addr) != 1)
		goto bad;
	s4->sin_family = AF_INET;
	s4->sin_port = htons((uint16_t)pv);
	*len = sizeof(*s4);
	return 0;
bad:
	snprintf(err, errlen, "expected HOST:PORT (IPv4, localhost, * or [IPv6]; port 0..65535)");
	return -EINVAL;
}

int tc_listen_check(const char *hostport, char *err, size_t errlen)
{
	struct sockaddr_storage ss;
	socklen_t len;

	return parse(hostport, &ss, &len, err, errlen);
}

int tc_listen_tcp(const char *hostport, bool reuseport, int backlog, int *port, char *err,
		  size_t errlen)
{
	struct sockaddr_storage ss;
	socklen_t len;
	int fd, one = 1, rc;

	rc = parse(hostport, &ss, &len, err, errlen);
	if (rc)
		return rc;
	fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		rc = -errno;
		snprintf(err, errlen, "socket: %s", strerror(errno));
		return rc;
	}
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    (reuseport && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0) ||
	    bind(fd, (struct sockaddr *)&ss, len) < 0 || listen(fd, backlog) < 0) {
		rc = -errno;
		snprintf(err, errlen, "%s: %s", hostport, strerror(errno));
		close(fd);
		return rc;
	}
	if (port) {
		len = sizeof(ss);
		getsockname(fd, (struct sockaddr *)&ss, &len);
		*port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
						       : ((struct sockaddr_in *)&ss)->sin_port);
	}
	return fd;
}
