/*
 * zframes.c — the fake pod's ZMQ plumbing: binding its sockets, sending and receiving
 * multi-frame messages without blocking, and taking ROUTER envelopes apart.
 */
#include "fakepod.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#define PUB_HWM 100000 /* vLLM's default PUB high-water mark */

void *bind_socket(struct fp *fp, int type, const char *flag, const char *ep, int64_t maxmsg)
{
	void *s = zmq_socket(fp->zctx, type);
	int linger = (int)fp->o.linger_ms, zero = 0, one = 1, hwm = PUB_HWM;

	if (!s) {
		fprintf(stderr, PROG ": creating the %s socket: %s\n", flag, zmq_strerror(errno));
		exit(1);
	}
	zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
	zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
	if (type == ZMQ_PUB || type == ZMQ_XPUB)
		zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof hwm);
	else /* a replay of every kept batch must not be cut by the high-water mark */
		zmq_setsockopt(s, ZMQ_SNDHWM, &zero, sizeof zero);
	if (type == ZMQ_XPUB)
		zmq_setsockopt(s, ZMQ_XPUB_VERBOSE, &one, sizeof one);
	/* --pub-connect: the PUB dials out (publishers such as llm-d's simulator, or SGLang's
	 * with an endpoint that is no wildcard); the replay ROUTER always binds. */
	if ((type == ZMQ_PUB || type == ZMQ_XPUB) && fp->o.pub_connect) {
		if (zmq_connect(s, ep)) {
			fprintf(stderr, PROG ": cannot connect %s %s: %s\n", flag, ep,
				zmq_strerror(errno));
			exit(1);
		}
		return s;
	}
	if (zmq_bind(s, ep)) {
		fprintf(stderr, PROG ": cannot bind %s %s: %s\n", flag, ep, zmq_strerror(errno));
		exit(1);
	}
	return s;
}

void send_frames(void *sock, int n, const void *const *data, const size_t *len)
{
	for (int i = 0; i < n; i++)
		if (zmq_send(sock, data[i], len[i], ZMQ_DONTWAIT | (i + 1 < n ? ZMQ_SNDMORE : 0)) < 0)
			return; /* a vanished ROUTER peer or a full PUB: the message is dropped */
}

bool recv_frames(void *sock, struct frames *f)
{
	int more = 1;
	size_t sz = sizeof more;

	f->n = 0;
	f->too_many = false;
	while (more) {
		zmq_msg_t tmp, *m = f->n < MAXFRAMES ? &f->m[f->n] : &tmp;

		zmq_msg_init(m);
		if (zmq_msg_recv(m, sock, ZMQ_DONTWAIT) < 0) {
			zmq_msg_close(m);
			if (f->n == 0)
				return false;
			break; /* cannot happen: ZMQ delivers messages whole */
		}
		if (zmq_getsockopt(sock, ZMQ_RCVMORE, &more, &sz))
			more = 0;
		if (m == &tmp) {
			zmq_msg_close(m);
			f->too_many = true;
		} else {
			f->n++;
		}
	}
	return true;
}

void frames_close(struct frames *f)
{
	for (int i = 0; i < f->n; i++)
		zmq_msg_close(&f->m[i]);
}

bool router_envelope(struct frames *f, bool *delim)
{
	if (f->too_many || f->n < 2 || f->n > 3 || FSIZE(f, 0) == 0 || FSIZE(f, 0) > 255)
		return false;
	if (f->n == 3 && FSIZE(f, 1) != 0)
		return false;
	*delim = f->n == 3;
	return true;
}
