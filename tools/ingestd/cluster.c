/*
 * cluster.c — kvidx-ingestd's cluster link on NATS (libnats): publishing this host's route
 * commits and failed outcomes, applying its peers' (see cluster.h for the design, clwire.h
 * for the message format, docs/cluster.md for the rules and their reasons).
 *
 * Queues: two single-producer single-consumer rings of message pointers, cap --cluster-queue
 * each. Out: producer the writer loop, consumer our sender thread (woken by a semaphore:
 * sem_post never blocks). In: producer libnats's delivery thread of our one subscription
 * (libnats delivers one subscription's messages in order from one thread), consumer the
 * writer loop. A full ring drops the message and counts it; nothing waits.
 *
 * Counters are relaxed atomics, written by whichever thread counts and read by the metrics
 * thread. The writer-private state (batch being built, maps of commits) is touched only with
 * the writer mutex held.
 */
#include "cluster.h"

#include <errno.h>
#include <nats/nats.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "clwire.h"
#include "load.h"
#include "log.h"
#include "spec.h"

#define NS_PER_MS 1000000ull
#define CL_STEP_BUDGET 64      /* peer messages applied per loop round */
#define CL_SEEN_MAP 262144     /* (origin, corr) pairs remembered against duplicates */
#define CL_MINE_MAP 65536      /* own commits remembered for withdrawals */
#define CL_KEYRING (1u << 19)  /* their keys (4 MiB) */
#define CL_URLS_MAX 16
#define CL_BACKOFF_MIN_MS 50
#define CL_BACKOFF_MAX_MS 2000
#define CL_STREAM_BYTES (256ll << 20) /* the warm-start stream's memory bound */
#define CL_WARM_WAIT_MS 2000   /* a replay's patience for the next message */
#define CL_WARM_READY_MS 10000 /* readiness waits this long at most for the first replay */
#define CL_WARM_OFFLINE_MS 2000 /* ... or this long when no server is reachable */

/* Counters: name, help. */
#define CL_CTRS(X)                                                                           \
	X(reconnects, "Reconnections to a NATS server after a loss")                         \
	X(disconnects, "Losses of the NATS connection")                                      \
	X(published_messages, "Messages published to peers")                                 \
	X(published_records, "Commit and withdrawal records published to peers")             \
	X(unsent_records, "Records not published: not connected, out queue full, or a publish error") \
	X(received_messages, "Peer messages taken from NATS")                                \
	X(inbound_dropped_messages, "Peer messages dropped: in queue full, too big, or libnats slow consumer") \
	X(scheme_refused_messages, "Peer messages of another key scheme, refused")           \
	X(bad_messages, "Peer messages refused or cut short as malformed")                   \
	X(bad_records, "Peer records skipped as malformed")                                  \
	X(applied_commits, "Peer commits applied")                                           \
	X(remote_predictions, "Speculative records added from peer commits")                 \
	X(withdrawals, "Peer withdrawals (failed outcomes) applied")                         \
	X(withdrawn_records, "Speculative records removed by peer withdrawals")              \
	X(outcomes, "Peer outcomes that were not failures (done records) applied")          \
	X(remote_load, "Peer requests counted in this host's load view")                    \
	X(unknown_pod, "Peer records naming a pod this index does not have")                 \
	X(duplicates, "Peer records already applied (or a commit after its withdrawal), ignored") \
	X(expired_on_arrival, "Peer commits already expired by the time rule when applied")  \
	X(clock_skew, "Peer commits stamped further ahead than --cluster-clock-skew")        \
	X(withdrawals_lost, "Failed outcomes whose commit keys were no longer remembered (sent as done)") \
	X(warm_replays, "Warm-start replays of the cluster's JetStream stream completed")   \
	X(warm_messages, "Messages replayed from the cluster's JetStream stream")          \
	X(warm_expired, "Replayed commits already expired by the time rule (not applied)")  \
	X(warm_unavailable, "Warm starts impossible: no JetStream on the server, or an error")
enum cl_ctr {
#define CL_ENUM(n, h) CL_##n,
	CL_CTRS(CL_ENUM)
#undef CL_ENUM
	CL_NCTR
};

struct cl_msg {
	uint32_t len;
	uint8_t data[];
};

struct cl_ring {
	struct cl_msg **slot;
	uint32_t cap;
	_Atomic uint64_t head, tail; /* consumer, producer */
};

struct ing_cluster {
	struct ing_cluster_config cfg;
	struct ing_spec *spec;
	uint64_t origin, scheme;
	char subject[96], wildcard[96];
	natsOptions *opts;
	natsConnection *nc;
	natsSubscription *sub;
	struct cl_ring in, out;
	struct cl_ring warm; /* replayed messages: producer the warm thread, consumer the writer */
	int in_fd; /* eventfd: readable when the in ring may hold messages (-1: none) */
	sem_t out_sem;
	pthread_t sender;
	bool sender_running;
	atomic_bool stop;
	atomic_int connected;
	atomic_bool sub_done; /* the subscription's delivery thread is finished */
	atomic_bool closed;   /* libnats's last connection callback (closed) has run */
	/* Warm start (the warm thread; docs/cluster.md "Warm start"). */
	jsCtx *js;
	char stream[48];
	int64_t history_ns;      /* the stream's max age: the largest TTL this host gives */
	sem_t warm_sem;
	pthread_t warmer;
	bool warmer_running;
	atomic_bool warm_wanted; /* a (re)connection happened: replay */
	_Atomic uint64_t warm_since; /* CLOCK_REALTIME to replay from (0: the whole stream) */
	atomic_int warm_done;    /* the first replay finished (or was impossible) */
	uint64_t opened_ns;
	_Atomic uint64_t ctr[CL_NCTR];
	/* Writer-private. */
	uint64_t disconnects_seen; /* ctr[CL_disconnects] when the peers' load was last forgotten */
	uint8_t *obuf;
	struct clw_enc enc;
	struct spec_fifo seen; /* key mix(origin, corr) -> aux state, a origin, b corr */
	struct spec_fifo mine; /* key corr -> a keyring position, b nkeys | prefill << 16... */
	uint64_t *keyring;
	uint64_t kr_pos;
	uint64_t keys[CLW_MAX_KEYS];
	struct ilog_limit lim;
};

/* What the seen map knows of (origin, corr): bits. */
enum { SEEN_COMMITTED = 1, SEEN_WITHDRAWN = 2, SEEN_DONE = 4 };

static void count(struct ing_cluster *c, enum cl_ctr k, uint64_t v)
{
	atomic_fetch_add_explicit(&c->ctr[k], v, memory_order_relaxed);
}

static uint64_t real_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- the rings --------------------------------------------------------------------------- */

static int ring_init(struct cl_ring *r, uint32_t cap)
{
	r->cap = cap ? cap : 1;
	r->slot = calloc(r->cap, sizeof(*r->slot));
	atomic_init(&r->head, 0);
	atomic_init(&r->tail, 0);
	return r->slot ? 0 : -ENOMEM;
}

static bool ring_push(struct cl_ring *r, struct cl_msg *m)
{
	uint64_t t = atomic_load_explicit(&r->tail, memory_order_relaxed);
	uint64_t h = atomic_load_explicit(&r->head, memory_order_acquire);

	if (t - h >= r->cap)
		return false;
	r->slot[t % r->cap] = m;
	atomic_store_explicit(&r->tail, t + 1, memory_order_release);
	return true;
}

static struct cl_msg *ring_pop(struct cl_ring *r)
{
	uint64_t h = atomic_load_explicit(&r->head, memory_order_relaxed);
	uint64_t t = atomic_load_explicit(&r->tail, memory_order_acquire);

	if (h == t)
		return NULL;
	struct cl_msg *m = r->slot[h % r->cap];
	atomic_store_explicit(&r->head, h + 1, memory_order_release);
	return m;
}

static void ring_free(struct cl_ring *r)
{
	struct cl_msg *m;

	if (!r->slot)
		return;
	while ((m = ring_pop(r)))
		free(m);
	free(r->slot);
	r->slot = NULL;
}

/* ---- libnats callbacks (its threads) ------------------------------------------------------ */

static void on_msg(natsConnection *nc, natsSubscription *sub, natsMsg *msg, void *arg)
{
	struct ing_cluster *c = arg;
	int len = natsMsg_GetDataLength(msg);
	struct cl_msg *m = NULL;

	(void)nc;
	(void)sub;
	count(c, CL_received_messages, 1);
	if (len < 0 || (uint32_t)len > CLW_MSG_MAX || !(m = malloc(sizeof(*m) + (size_t)len))) {
		count(c, CL_inbound_dropped_messages, 1);
	} else {
		m->len = (uint32_t)len;
		memcpy(m->data, natsMsg_GetData(msg), (size_t)len);
		if (!ring_push(&c->in, m)) {
			free(m);
			count(c, CL_inbound_dropped_messages, 1);
		} else if (c->in_fd >= 0) {
			uint64_t one = 1; /* wakes the writer's poll; never blocks (counter) */
			if (write(c->in_fd, &one, sizeof(one)) < 0) {
				/* EAGAIN: the counter is saturated, a wake-up is pending anyway */
			}
		}
	}
	natsMsg_Destroy(msg);
}

static void on_sub_complete(void *arg)
{
	struct ing_cluster *c = arg;

	atomic_store(&c->sub_done, true);
}

/* The connection's last callback: libnats calls no other after it (cluster_close waits). */
static void on_closed(natsConnection *nc, void *arg)
{
	struct ing_cluster *c = arg;

	(void)nc;
	atomic_store(&c->closed, true);
}

static void on_connected(natsConnection *nc, void *arg)
{
	struct ing_cluster *c = arg;
	char url[256] = "";

	natsConnection_GetConnectedUrl(nc, url, sizeof(url));
	atomic_store(&c->connected, 1);
	atomic_store(&c->warm_wanted, true);
	sem_post(&c->warm_sem);
	ilog(ILOG_INFO, "cluster: connected to %s", url);
}

static void on_reconnected(natsConnection *nc, void *arg)
{
	struct ing_cluster *c = arg;

	count(c, CL_reconnects, 1);
	on_connected(nc, arg);
}

static void on_disconnected(natsConnection *nc, void *arg)
{
	struct ing_cluster *c = arg;

	(void)nc;
	if (atomic_exchange(&c->connected, 0)) {
		count(c, CL_disconnects, 1);
		/* Back online, the warm thread replays what peers published meanwhile (from
		 * the earliest loss not replayed yet, a second of margin). */
		uint64_t t = real_ns() - 1000 * NS_PER_MS, cur = atomic_load(&c->warm_since);
		while (t < cur && !atomic_compare_exchange_weak(&c->warm_since, &cur, t))
			;
		ilog(ILOG_WARN, "cluster: NATS connection lost; local-only until it is back "
		     "(reconnecting with backoff)");
	}
}

static void on_error(natsConnection *nc, natsSubscription *sub, natsStatus err, void *arg)
{
	struct ing_cluster *c = arg;

	(void)nc;
	(void)sub;
	if (err == NATS_SLOW_CONSUMER)
		count(c, CL_inbound_dropped_messages, 1);
	else
		ilog_limited(&c->lim, ILOG_WARN, "cluster: %s", natsStatus_GetText(err));
}

/* Backoff: 50 ms doubling per attempt over the server list, at most 2 s, plus up to 25 %
 * jitter (the herd of hosts reconnecting after a server restart spreads out). */
static int64_t reconnect_delay(natsConnection *nc, int attempts, void *arg)
{
	int64_t d = CL_BACKOFF_MIN_MS;

	(void)nc;
	(void)arg;
	for (int i = 1; i < attempts && d < CL_BACKOFF_MAX_MS; i++)
		d *= 2;
	if (d > CL_BACKOFF_MAX_MS)
		d = CL_BACKOFF_MAX_MS;
	return d + (int64_t)(random() % (d / 4 + 1));
}

/* ---- the sender thread ------------------------------------------------------------------ */

/* Waits on sem for at most 100 ms: the link's threads look at c->stop that often. */
static void nap(sem_t *sem)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_nsec += 100 * 1000000L;
	if (ts.tv_nsec >= 1000000000L)
		ts.tv_sec++, ts.tv_nsec -= 1000000000L;
	sem_timedwait(sem, &ts);
}

static void *sender_main(void *arg)
{
	struct ing_cluster *c = arg;

	while (!atomic_load(&c->stop)) {
		nap(&c->out_sem);
		struct cl_msg *m;
		while ((m = ring_pop(&c->out))) {
			uint16_t nrec = (uint16_t)(m->data[6] | m->data[7] << 8);
			natsStatus s = NATS_NOT_YET_CONNECTED;
			if (atomic_load(&c->connected))
				s = natsConnection_Publish(c->nc, c->subject, m->data, (int)m->len);
			if (s == NATS_OK) {
				count(c, CL_published_messages, 1);
				count(c, CL_published_records, nrec);
			} else {
				count(c, CL_unsent_records, nrec);
			}
			free(m);
		}
	}
	return NULL;
}

/* ---- warm start: replaying the stream (the warm thread) ----------------------------------- */

/*
 * The stream KVIDX_<cluster-name> keeps every message of kvidx.<cluster-name>.*.p in the
 * server's memory for the largest TTL (older ones cannot hold a live prediction). The first
 * host to connect creates it; a host whose largest TTL is longer raises its max age; an
 * operator may create it beforehand (replicas in a NATS cluster): its other settings are left
 * alone. 0 (*msgs: the messages it holds, all schemes), or -1 when JetStream is not
 * available (logged).
 */
static int ensure_stream(struct ing_cluster *c, uint64_t *msgs)
{
	jsStreamInfo *si = NULL;
	jsErrCode je = 0;
	natsStatus s = js_GetStreamInfo(&si, c->js, c->stream, NULL, &je);

	if (s == NATS_NOT_FOUND || je == JSStreamNotFoundErr) {
		jsStreamConfig sc;
		const char *subj[1] = { c->wildcard };
		jsStreamConfig_Init(&sc);
		sc.Name = c->stream;
		sc.Subjects = subj;
		sc.SubjectsLen = 1;
		sc.Storage = js_MemoryStorage;
		sc.MaxAge = c->history_ns;
		sc.MaxBytes = CL_STREAM_BYTES;
		sc.MaxMsgSize = CLW_MSG_MAX;
		sc.Discard = js_DiscardOld;
		sc.NoAck = true;
		s = js_AddStream(&si, c->js, &sc, NULL, &je);
		if (s != NATS_OK) /* a peer may have created it meanwhile */
			s = js_GetStreamInfo(&si, c->js, c->stream, NULL, &je);
		else
			ilog(ILOG_INFO, "cluster: created the JetStream stream %s (memory, max age "
			     "%lld ms, at most %lld MiB)", c->stream,
			     (long long)(c->history_ns / (int64_t)NS_PER_MS),
			     (long long)(CL_STREAM_BYTES >> 20));
	} else if (s == NATS_OK && si->Config->MaxAge && si->Config->MaxAge < c->history_ns) {
		jsStreamConfig sc = *si->Config;
		jsStreamInfo *up = NULL;
		sc.MaxAge = c->history_ns;
		if (js_UpdateStream(&up, c->js, &sc, NULL, &je) == NATS_OK)
			ilog(ILOG_INFO, "cluster: stream %s: max age raised to %lld ms", c->stream,
			     (long long)(c->history_ns / (int64_t)NS_PER_MS));
		jsStreamInfo_Destroy(up);
	}
	if (s == NATS_OK)
		*msgs = si->State.Msgs;
	jsStreamInfo_Destroy(si);
	if (s != NATS_OK) {
		count(c, CL_warm_unavailable, 1);
		ilog(ILOG_WARN, "cluster: no warm start: JetStream stream %s unavailable (%s, "
		     "error %d; is the server run with -js?)", c->stream, natsStatus_GetText(s),
		     (int)je);
		return -1;
	}
	return 0;
}

/* Hands one replayed message to the writer, waiting while its ring is full (this thread may
 * wait; the writer never does). false: stopping. */
static bool warm_push(struct ing_cluster *c, natsMsg *msg)
{
	int len = natsMsg_GetDataLength(msg);
	struct cl_msg *m;

	if (len < 0 || (uint32_t)len > CLW_MSG_MAX || !(m = malloc(sizeof(*m) + (size_t)len))) {
		count(c, CL_inbound_dropped_messages, 1);
		return true;
	}
	m->len = (uint32_t)len;
	memcpy(m->data, natsMsg_GetData(msg), (size_t)len);
	while (!ring_push(&c->warm, m)) {
		if (atomic_load(&c->stop)) {
			free(m);
			return false;
		}
		nats_Sleep(1);
	}
	uint64_t one = 1;
	if (write(c->in_fd, &one, sizeof(one)) < 0) {
		/* EAGAIN: a wake-up is pending anyway */
	}
	count(c, CL_warm_messages, 1);
	return true;
}

/* One replay of our scheme's subject from since (CLOCK_REALTIME; 0: the whole stream), with
 * an ordered consumer (ephemeral, no acks, flow-controlled by the server), until a message
 * says nothing is pending after it (or none comes for CL_WARM_WAIT_MS: the stream held only
 * other schemes' messages, or older ones). The consumer's own info is no help: a push
 * consumer delivers at once, so its pending count is 0 already. Live messages keep arriving on the subscription meanwhile;
 * the (origin, corr) memory makes the overlap harmless. */
static void warm_replay(struct ing_cluster *c, uint64_t since)
{
	uint64_t t0 = kvidx_now_ns(), n = 0, pending = 0;
	natsSubscription *sub = NULL;
	jsSubOptions so;
	jsErrCode je = 0;

	if (!c->js && natsConnection_JetStream(&c->js, c->nc, NULL) != NATS_OK)
		c->js = NULL;
	if (!c->js || ensure_stream(c, &pending) < 0)
		return;
	jsSubOptions_Init(&so);
	so.Stream = c->stream;
	so.Ordered = true;
	so.Config.DeliverPolicy = since ? js_DeliverByStartTime : js_DeliverAll;
	so.Config.OptStartTime = (int64_t)since;
	natsStatus s = js_SubscribeSync(&sub, c->js, c->subject, NULL, &so, &je);
	while (s == NATS_OK && pending && !atomic_load(&c->stop)) {
		natsMsg *m = NULL;
		jsMsgMetaData *md = NULL;
		if ((s = natsSubscription_NextMsg(&m, sub, CL_WARM_WAIT_MS)) == NATS_TIMEOUT)
			s = NATS_OK, pending = 0;
		if (s != NATS_OK || !m)
			break;
		if (natsMsg_GetMetaData(&md, m) == NATS_OK) {
			pending = md->NumPending;
			jsMsgMetaData_Destroy(md);
		}
		bool go_on = warm_push(c, m);
		natsMsg_Destroy(m);
		n++;
		if (!go_on)
			break;
	}
	if (sub) {
		natsSubscription_Unsubscribe(sub);
		natsSubscription_Destroy(sub);
	}
	if (s != NATS_OK) {
		count(c, CL_warm_unavailable, 1);
		ilog(ILOG_WARN, "cluster: warm start stopped after %llu messages: %s (error %d)",
		     (unsigned long long)n, natsStatus_GetText(s), (int)je);
		return;
	}
	count(c, CL_warm_replays, 1);
	ilog(ILOG_INFO, "cluster: warm start: %llu messages replayed from %s (%s) in %.1f ms",
	     (unsigned long long)n, c->stream, since ? "since the connection loss" : "all",
	     (double)(kvidx_now_ns() - t0) / 1e6);
}

static void *warm_main(void *arg)
{
	struct ing_cluster *c = arg;

	while (!atomic_load(&c->stop)) {
		nap(&c->warm_sem);
		if (!atomic_load(&c->connected) || !atomic_exchange(&c->warm_wanted, false))
			continue; /* the next connection asks again */
		uint64_t since = atomic_exchange(&c->warm_since, UINT64_MAX);
		warm_replay(c, since == UINT64_MAX ? real_ns() - 1000 * NS_PER_MS : since);
		atomic_store(&c->warm_done, 1);
	}
	return NULL;
}

/* ---- setup ------------------------------------------------------------------------------ */

static bool name_ok(const char *s)
{
	size_t n = strlen(s);

	if (n < 1 || n > 32)
		return false;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
		      (*s >= '0' && *s <= '9') || *s == '_' || *s == '-'))
			return false;
	return true;
}

void ing_cluster_config_init(struct ing_cluster_config *c)
{
	memset(c, 0, sizeof(*c));
	strcpy(c->name, "kvidx");
	c->clock_skew_ms = 5;
	c->queue = 1024;
}

static int cfail(char *err, size_t errlen, const char *msg, const char *key)
{
	snprintf(err, errlen, "%s: %s", key, msg);
	return -EINVAL;
}

static int cset_str(char *dst, size_t size, const char *key, const char *value, char *err,
		    size_t errlen)
{
	if (strlen(value) >= size)
		return cfail(err, errlen, "too long", key);
	strcpy(dst, value);
	return 0;
}

int ing_cluster_config_set(struct ing_cluster_config *c, const char *key, const char *value,
			   bool from_file, char *err, size_t errlen)
{
	if (!strcmp(key, "cluster"))
		return cset_str(c->urls, sizeof(c->urls), key, value, err, errlen);
	if (!strcmp(key, "cluster-name")) {
		if (!name_ok(value))
			return cfail(err, errlen, "expected 1..32 characters of [A-Za-z0-9_-]", key);
		return cset_str(c->name, sizeof(c->name), key, value, err, errlen);
	}
	if (!strcmp(key, "cluster-user"))
		return cset_str(c->user, sizeof(c->user), key, value, err, errlen);
	if (!strcmp(key, "cluster-password")) {
		if (!from_file)
			return cfail(err, errlen, "give it in the config file (a flag shows in ps)",
				     key);
		return cset_str(c->password, sizeof(c->password), key, value, err, errlen);
	}
	if (!strcmp(key, "cluster-creds"))
		return cset_str(c->creds, sizeof(c->creds), key, value, err, errlen);
	if (!strcmp(key, "cluster-ca"))
		return cset_str(c->ca, sizeof(c->ca), key, value, err, errlen);
	if (!strcmp(key, "cluster-clock-skew"))
		return ing_parse_duration(key, value, 10000, &c->clock_skew_ms, err, errlen);
	if (!strcmp(key, "cluster-queue")) {
		char *end;
		unsigned long v = strtoul(value, &end, 10);
		if (!*value || *end || v < 1 || v > 65536)
			return cfail(err, errlen, "expected a count 1..65536", key);
		c->queue = (uint32_t)v;
		return 0;
	}
	return cfail(err, errlen, "unknown cluster option", key);
}

/* The connection options: servers, auth, TLS, reconnection. 0 or -1 (logged). */
static int set_options(struct ing_cluster *c)
{
	char urls[sizeof(c->cfg.urls)], *save = NULL;
	const char *list[CL_URLS_MAX];
	int n = 0;
	natsStatus s;

	strcpy(urls, c->cfg.urls);
	for (char *u = strtok_r(urls, ",", &save); u; u = strtok_r(NULL, ",", &save)) {
		if (n == CL_URLS_MAX) {
			ilog(ILOG_ERROR, "cluster: more than %d URLs", CL_URLS_MAX);
			return -1;
		}
		list[n++] = u;
	}
	if (!n) {
		ilog(ILOG_ERROR, "cluster: no URL in '%s'", c->cfg.urls);
		return -1;
	}
	if ((s = natsOptions_Create(&c->opts)) != NATS_OK ||
	    (s = natsOptions_SetServers(c->opts, list, n)) != NATS_OK ||
	    (s = natsOptions_SetName(c->opts, "kvidx-ingestd")) != NATS_OK ||
	    (s = natsOptions_SetNoEcho(c->opts, true)) != NATS_OK ||
	    /* Our messages are batches already: write each at once (on the sender thread)
	     * instead of waiting for libnats's flusher. */
	    (s = natsOptions_SetSendAsap(c->opts, true)) != NATS_OK ||
	    (s = natsOptions_SetMaxReconnect(c->opts, -1)) != NATS_OK ||
	    (s = natsOptions_SetCustomReconnectDelay(c->opts, reconnect_delay, c)) != NATS_OK ||
	    (s = natsOptions_SetReconnectBufSize(c->opts, 1 << 20)) != NATS_OK ||
	    (s = natsOptions_SetTimeout(c->opts, 2000)) != NATS_OK ||
	    (s = natsOptions_SetRetryOnFailedConnect(c->opts, true, on_connected, c)) != NATS_OK ||
	    (s = natsOptions_SetReconnectedCB(c->opts, on_reconnected, c)) != NATS_OK ||
	    (s = natsOptions_SetDisconnectedCB(c->opts, on_disconnected, c)) != NATS_OK ||
	    (s = natsOptions_SetClosedCB(c->opts, on_closed, c)) != NATS_OK ||
	    (s = natsOptions_SetErrorHandler(c->opts, on_error, c)) != NATS_OK) {
		ilog(ILOG_ERROR, "cluster: NATS options: %s", natsStatus_GetText(s));
		return -1;
	}
	if (c->cfg.user[0] &&
	    (s = natsOptions_SetUserInfo(c->opts, c->cfg.user, c->cfg.password)) != NATS_OK) {
		ilog(ILOG_ERROR, "cluster: user: %s", natsStatus_GetText(s));
		return -1;
	}
	if (c->cfg.creds[0] &&
	    (s = natsOptions_SetUserCredentialsFromFiles(c->opts, c->cfg.creds, NULL)) != NATS_OK) {
		ilog(ILOG_ERROR, "cluster: creds file %s: %s", c->cfg.creds, natsStatus_GetText(s));
		return -1;
	}
	if (c->cfg.ca[0] &&
	    ((s = natsOptions_SetSecure(c->opts, true)) != NATS_OK ||
	     (s = natsOptions_LoadCATrustedCertificates(c->opts, c->cfg.ca)) != NATS_OK)) {
		ilog(ILOG_ERROR, "cluster: CA file %s: %s", c->cfg.ca, natsStatus_GetText(s));
		return -1;
	}
	return 0;
}

struct ing_cluster *cluster_open(const struct ing_cluster_config *cc, struct ing_spec *spec,
				 int algo, const char *seed, uint32_t block_size)
{
	struct ing_cluster *c = calloc(1, sizeof(*c));
	natsStatus s;

	if (!c)
		return NULL;
	c->cfg = *cc;
	c->spec = spec;
	c->scheme = clw_scheme(algo, seed, block_size);
	if (getrandom(&c->origin, sizeof(c->origin), 0) != sizeof(c->origin))
		c->origin = real_ns() ^ (uint64_t)getpid() << 32;
	snprintf(c->subject, sizeof(c->subject), "kvidx.%s.%016llx.p", cc->name,
		 (unsigned long long)c->scheme);
	snprintf(c->wildcard, sizeof(c->wildcard), "kvidx.%s.*.p", cc->name);
	snprintf(c->stream, sizeof(c->stream), "KVIDX_%s", cc->name);
	c->history_ns = (int64_t)(spec->cfg->policy == ING_TTL_ADAPTIVE ? spec->ttl_cap_ms
									  : spec->ttl_static_ms) *
			(int64_t)NS_PER_MS;
	c->opened_ns = kvidx_now_ns();
	sem_init(&c->out_sem, 0, 0);
	sem_init(&c->warm_sem, 0, 0);
	c->in_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (ring_init(&c->in, cc->queue) < 0 || ring_init(&c->out, cc->queue) < 0 ||
	    ring_init(&c->warm, cc->queue) < 0 ||
	    !(c->obuf = malloc(CLW_MSG_MAX)) ||
	    !(c->keyring = malloc(CL_KEYRING * sizeof(uint64_t))) ||
	    spec_fifo_init(&c->seen, CL_SEEN_MAP) < 0 || spec_fifo_init(&c->mine, CL_MINE_MAP) < 0) {
		ilog(ILOG_ERROR, "cluster: out of memory");
		goto fail;
	}
	clw_enc_begin(&c->enc, c->obuf, CLW_MSG_MAX, c->origin, c->scheme);
	if (set_options(c) < 0)
		goto fail;
	s = natsConnection_Connect(&c->nc, c->opts);
	bool up = s == NATS_OK;
	if (up)
		atomic_store(&c->warm_wanted, true);
	else if (s == NATS_NOT_YET_CONNECTED)
		ilog(ILOG_WARN, "cluster: no NATS server reachable at %s yet: local-only, retrying "
		     "with backoff", cc->urls);
	else {
		ilog(ILOG_ERROR, "cluster: connect to %s: %s (%s)", cc->urls, natsStatus_GetText(s),
		     nats_GetLastError(NULL));
		goto fail;
	}
	s = natsConnection_Subscribe(&c->sub, c->nc, c->wildcard, on_msg, c);
	if (s == NATS_OK)
		s = natsSubscription_SetPendingLimits(c->sub, 65536, 64 << 20);
	if (s == NATS_OK)
		s = natsSubscription_SetOnCompleteCB(c->sub, on_sub_complete, c);
	if (s != NATS_OK) {
		ilog(ILOG_ERROR, "cluster: subscribe %s: %s", c->wildcard, natsStatus_GetText(s));
		goto fail;
	}
	/* Connected means subscribed: the gauge reads 1 once the server has our subscription
	 * (a round trip), so a peer's commit after it reaches us. (A reconnection resubscribes
	 * before libnats calls on_reconnected.) */
	if (up) {
		if (natsConnection_FlushTimeout(c->nc, 2000) != NATS_OK)
			ilog(ILOG_WARN, "cluster: the server did not confirm the subscription in 2 s");
		atomic_store(&c->connected, 1);
	}
	if (pthread_create(&c->sender, NULL, sender_main, c) != 0) {
		ilog(ILOG_ERROR, "cluster: cannot start the sender thread");
		goto fail;
	}
	c->sender_running = true;
	if (pthread_create(&c->warmer, NULL, warm_main, c) != 0) {
		ilog(ILOG_ERROR, "cluster: cannot start the warm-start thread");
		goto fail;
	}
	c->warmer_running = true;
	sem_post(&c->warm_sem);
	ilog(ILOG_INFO, "cluster: %s as %016llx, publishing on %s, listening on %s, clock-skew "
	     "bound %ums, queues %u", cc->urls, (unsigned long long)c->origin, c->subject,
	     c->wildcard, cc->clock_skew_ms, cc->queue);
	return c;
fail:
	cluster_close(c);
	return NULL;
}

void cluster_close(struct ing_cluster *c)
{
	if (!c)
		return;
	atomic_store(&c->stop, true);
	if (c->sender_running) {
		sem_post(&c->out_sem);
		pthread_join(c->sender, NULL);
	}
	if (c->warmer_running) {
		sem_post(&c->warm_sem);
		pthread_join(c->warmer, NULL);
	}
	if (c->js)
		jsCtx_Destroy(c->js);
	if (c->sub) {
		/* After the unsubscribe, on_msg() may still run for a message in delivery: wait
		 * (bounded) for the delivery thread to say it is done before freeing what it uses. */
		natsSubscription_Unsubscribe(c->sub);
		for (int i = 0; i < 2000 && !atomic_load(&c->sub_done); i++)
			nats_Sleep(1);
		natsSubscription_Destroy(c->sub);
	}
	if (c->nc) {
		/* Close runs the disconnected and closed callbacks on libnats's callback thread,
		 * after it returns: c must outlive them. Then the library's threads are joined. */
		natsConnection_Close(c->nc);
		for (int i = 0; i < 2000 && !atomic_load(&c->closed); i++)
			nats_Sleep(1);
		natsConnection_Destroy(c->nc);
		nats_CloseAndWait(2000);
	}
	if (c->opts)
		natsOptions_Destroy(c->opts);
	ring_free(&c->in);
	ring_free(&c->out);
	ring_free(&c->warm);
	if (c->in_fd >= 0)
		close(c->in_fd);
	sem_destroy(&c->out_sem);
	sem_destroy(&c->warm_sem);
	spec_fifo_free(&c->seen);
	spec_fifo_free(&c->mine);
	free(c->keyring);
	free(c->obuf);
	free(c);
}

/* ---- out: the writer's side ----------------------------------------------------------------- */

/* Queues the batch being built (if any) for the sender. */
static void flush(struct ing_cluster *c)
{
	if (!c->enc.nrec)
		return;
	uint16_t nrec = c->enc.nrec;
	size_t len = clw_enc_finish(&c->enc, real_ns());
	struct cl_msg *m = malloc(sizeof(*m) + len);
	if (m) {
		m->len = (uint32_t)len;
		memcpy(m->data, c->obuf, len);
	}
	if (m && ring_push(&c->out, m))
		sem_post(&c->out_sem);
	else {
		free(m);
		count(c, CL_unsent_records, nrec);
	}
	clw_enc_begin(&c->enc, c->obuf, CLW_MSG_MAX, c->origin, c->scheme);
}

static void add_record(struct ing_cluster *c, const struct clw_rec *r, const uint64_t *keys)
{
	int rc = clw_enc_add(&c->enc, r, keys);

	if (rc == -ENOSPC) {
		flush(c);
		rc = clw_enc_add(&c->enc, r, keys);
	}
	if (rc < 0)
		count(c, CL_unsent_records, 1);
}

static void copy_name(char dst[KVIDX_POD_NAME_MAX], const char *src)
{
	snprintf(dst, KVIDX_POD_NAME_MAX, "%s", src ? src : "");
}

void cluster_local_commit(struct ing_cluster *c, const struct cl_commit *cm)
{
	struct clw_rec r = { .kind = CLW_COMMIT, .corr = cm->corr, .ttl_ms = (uint16_t)cm->ttl_ms,
			     .prefill_ttl_ms = (uint16_t)cm->prefill_ttl_ms, .tokens = cm->tokens };
	uint64_t mono = kvidx_now_ns(), real = real_ns();

	if (!cm->nkeys || cm->nkeys > CLW_MAX_KEYS)
		return;
	r.nkeys = (uint16_t)cm->nkeys;
	/* The commit time on the wire is the origin's CLOCK_REALTIME (monotonic clocks do not
	 * compare across hosts): now less the commit's age here. */
	r.commit_ns = real - (mono > cm->created_ns ? mono - cm->created_ns : 0);
	copy_name(r.pod, cm->pod);
	copy_name(r.prefill, cm->prefill);
	add_record(c, &r, cm->keys);
	/* Remembered for a withdrawal: the keys in the ring, the names re-read from the record. */
	uint64_t pos = c->kr_pos;
	for (size_t i = 0; i < cm->nkeys; i++)
		c->keyring[(pos + i) % CL_KEYRING] = cm->keys[i];
	c->kr_pos += cm->nkeys;
	struct spec_fent *old = spec_fifo_find(&c->mine, cm->corr, 0);
	if (old)
		spec_fifo_del(&c->mine, old);
	spec_fifo_push(&c->mine, cm->corr, 0, cm->pod_idx, pos,
		       cm->nkeys | (uint64_t)(uint32_t)(cm->prefill_idx + 1) << 32, NULL);
}

/* The name of index pod pod as spec.c knows it, or NULL. */
static const char *pod_label(const struct ing_cluster *c, int pod)
{
	const struct ing_spec *s = c->spec;

	if (pod < 0 || (uint32_t)pod >= s->max_pods || !s->pods[pod].active)
		return NULL;
	return s->pods[pod].label;
}

/* A done record: the outcome of corr on pod (an index pod; gone: nothing to say). */
static void send_done(struct ing_cluster *c, uint64_t corr, int pod)
{
	struct clw_rec r = { .kind = CLW_DONE, .corr = corr, .commit_ns = real_ns() };
	const char *name = pod_label(c, pod);

	if (!name)
		return;
	copy_name(r.pod, name);
	add_record(c, &r, NULL);
}

void cluster_local_outcome(struct ing_cluster *c, uint64_t corr, int pod, bool failed)
{
	struct spec_fent *e = spec_fifo_find(&c->mine, corr, 0);
	struct clw_rec r = { .kind = CLW_WITHDRAW, .corr = corr };

	if (!failed || !e) {
		if (failed)
			count(c, CL_withdrawals_lost, 1);
		if (e)
			spec_fifo_del(&c->mine, e);
		send_done(c, corr, pod);
		return;
	}
	uint64_t pos = e->a, n = e->b & 0xffffffffull;
	int prefill = (int)(e->b >> 32) - 1;
	const char *name = pod_label(c, e->aux), *pre = prefill >= 0 ? pod_label(c, prefill) : NULL;
	spec_fifo_del(&c->mine, e);
	if (c->kr_pos - pos > CL_KEYRING || !name) { /* keys overwritten, or the pod left */
		count(c, CL_withdrawals_lost, 1);
		send_done(c, corr, pod);
		return;
	}
	for (uint64_t i = 0; i < n; i++)
		c->keys[i] = c->keyring[(pos + i) % CL_KEYRING];
	r.nkeys = (uint16_t)n;
	r.commit_ns = real_ns();
	copy_name(r.pod, name);
	copy_name(r.prefill, pre);
	add_record(c, &r, c->keys);
}

/* ---- in: peers' messages, applied by the writer -------------------------------------------- */

uint32_t cluster_remote_life(uint64_t commit_real, uint64_t now_real, uint32_t ttl_ms,
			     uint32_t skew_ms, uint64_t *age_ns, bool *skewed)
{
	uint64_t skew = (uint64_t)skew_ms * NS_PER_MS;

	*skewed = commit_real > now_real && commit_real - now_real > skew;
	*age_ns = now_real > commit_real ? now_real - commit_real : 0;
	if (ttl_ms <= skew_ms || *age_ns >= (uint64_t)(ttl_ms - skew_ms) * NS_PER_MS)
		return 0;
	return ttl_ms - skew_ms;
}

static uint64_t mix(uint64_t origin, uint64_t corr)
{
	uint64_t h = origin ^ (corr * 0x9e3779b97f4a7c15ull);

	h ^= h >> 31;
	return h * 0xbf58476d1ce4e5b9ull;
}

/* The state of (origin, corr): 0 never seen, else SEEN_*; entry in *out. */
static int seen_state(struct ing_cluster *c, uint64_t origin, uint64_t corr,
		      struct spec_fent **out)
{
	struct spec_fent *e = spec_fifo_find(&c->seen, mix(origin, corr), 0);

	*out = e && e->a == origin && e->b == corr ? e : NULL;
	return *out ? (*out)->aux : 0;
}

/* One pod's part of a commit. */
static void predict_on(struct ing_cluster *c, const char *name, const struct clw_rec *r,
		       uint32_t ttl_ms, bool warm, uint64_t real_now, uint64_t now)
{
	uint64_t age;
	bool skewed;
	int pod = spec_pod_find(c->spec, name);
	uint32_t life = cluster_remote_life(r->commit_ns, real_now, ttl_ms, c->cfg.clock_skew_ms,
					    &age, &skewed);

	if (skewed)
		count(c, CL_clock_skew, 1);
	if (pod < 0) {
		count(c, CL_unknown_pod, 1);
		return;
	}
	if (!life) {
		/* A replay reaches back over the largest TTL: expired commits are expected. */
		count(c, warm ? CL_warm_expired : CL_expired_on_arrival, 1);
		return;
	}
	/* Created at the origin's commit (in this host's clock), so its latency samples and
	 * its expiry count from there. */
	uint64_t created = now > age ? now - age : 0;
	int rc = spec_remote_predict(c->spec, pod, c->keys, r->nkeys, created, life);
	if (rc > 0)
		count(c, CL_remote_predictions, (uint64_t)rc);
}

static void withdraw_on(struct ing_cluster *c, const char *name, const struct clw_rec *r)
{
	int pod = spec_pod_find(c->spec, name);

	if (pod < 0) {
		count(c, CL_unknown_pod, 1);
		return;
	}
	int rc = spec_remote_withdraw(c->spec, pod, c->keys, r->nkeys);
	if (rc > 0)
		count(c, CL_withdrawn_records, (uint64_t)rc);
}

/* A peer's request in this host's load view, on its outcome pod (the prefill pod when the
 * record names one), keyed by (origin, corr); add or retire. */
static void remote_load(struct ing_cluster *c, uint64_t origin, const struct clw_rec *r,
			bool add, uint64_t now)
{
	struct ing_load *l = c->spec->load;
	int pod = spec_pod_find(c->spec, r->prefill[0] ? r->prefill : r->pod);

	if (!l || pod < 0)
		return; /* unknown pods are counted by the predictions */
	if (add) {
		load_remote(l, mix(origin, r->corr), pod, r->tokens, now);
		count(c, CL_remote_load, 1);
	} else {
		load_outcome(l, mix(origin, r->corr), pod, now);
	}
}

/* One record of origin. The seen map makes repeats and reordering harmless: a commit after
 * its withdrawal predicts nothing, one after its done predicts without load. */
static void apply_record(struct ing_cluster *c, uint64_t origin, const struct clw_rec *r,
			 bool warm, uint64_t real_now, uint64_t now)
{
	struct spec_fent *e;
	int st = seen_state(c, origin, r->corr, &e);
	int bit = r->kind == CLW_COMMIT ? SEEN_COMMITTED
					: r->kind == CLW_WITHDRAW ? SEEN_WITHDRAWN : SEEN_DONE;

	/* Terminal: a withdrawal ends everything, a done the load. */
	if ((st & bit) || (st & SEEN_WITHDRAWN) || (bit == SEEN_DONE && (st & SEEN_DONE))) {
		count(c, CL_duplicates, 1);
		return;
	}
	if (e)
		e->aux = st | bit;
	else
		spec_fifo_push(&c->seen, mix(origin, r->corr), 0, bit, origin, r->corr, NULL);
	for (size_t i = 0; i < r->nkeys; i++)
		c->keys[i] = clw_key(r, i);
	if (r->kind == CLW_COMMIT) {
		count(c, CL_applied_commits, 1);
		if (!(st & SEEN_DONE))
			remote_load(c, origin, r, true, now);
		predict_on(c, r->pod, r, r->ttl_ms, warm, real_now, now);
		if (r->prefill[0] && strcmp(r->prefill, r->pod))
			predict_on(c, r->prefill, r, r->prefill_ttl_ms, warm, real_now, now);
		return;
	}
	if (st & SEEN_COMMITTED && !(st & SEEN_DONE))
		remote_load(c, origin, r, false, now);
	if (r->kind == CLW_DONE) {
		count(c, CL_outcomes, 1);
		return;
	}
	count(c, CL_withdrawals, 1);
	withdraw_on(c, r->pod, r);
	if (r->prefill[0] && strcmp(r->prefill, r->pod))
		withdraw_on(c, r->prefill, r);
}

static void apply_msg(struct ing_cluster *c, const struct cl_msg *m, bool warm, uint64_t now)
{
	struct clw_dec d;
	struct clw_header h;
	struct clw_rec r;
	enum clw_status st;
	uint64_t real_now = real_ns();

	if (clw_dec_begin(&d, m->data, m->len, &h) < 0) {
		count(c, CL_bad_messages, 1);
		ilog_limited(&c->lim, ILOG_WARN, "cluster: peer message refused: %s", d.why);
		return;
	}
	if (h.scheme != c->scheme) {
		count(c, CL_scheme_refused_messages, 1);
		ilog_limited(&c->lim, ILOG_WARN, "cluster: peer %016llx uses key scheme %016llx, "
			     "this index %016llx (algo, seed, block size): refused",
			     (unsigned long long)h.origin, (unsigned long long)h.scheme,
			     (unsigned long long)c->scheme);
		return;
	}
	if (h.origin == c->origin)
		return; /* our own (NoEcho is set; a second link of the same origin cannot be) */
	while ((st = clw_dec_next(&d, &r)) != CLW_END) {
		if (st == CLW_OK) {
			apply_record(c, h.origin, &r, warm, real_now, now);
			continue;
		}
		count(c, st == CLW_SKIP ? CL_bad_records : CL_bad_messages, 1);
		ilog_limited(&c->lim, ILOG_WARN, "cluster: peer %016llx: %s%s",
			     (unsigned long long)h.origin, d.why,
			     st == CLW_SKIP ? ": record skipped" : ": rest of the message dropped");
		if (st == CLW_BAD)
			break;
	}
}

/* Whether replayed messages wait: a paused pod takes no prediction, so at start (for at most
 * the readiness bound) they wait while there is no pod yet or a pod's stream is still
 * connecting or replaying, rather than being applied to nothing. */
static bool warm_hold(const struct ing_cluster *c, uint64_t now)
{
	const struct ing_spec *s = c->spec;
	bool any = false;

	if (now - c->opened_ns >= CL_WARM_READY_MS * NS_PER_MS)
		return false;
	for (uint32_t i = 0; i < s->max_pods; i++) {
		if (!s->pods[i].active)
			continue;
		if (s->pods[i].stream == SPEC_STREAM)
			return true;
		any = true;
	}
	return !any;
}

/* After a loss of the link, the peers' requests in the load view are forgotten (load.h): the
 * outcomes that would retire them may be lost with it. On the writer's thread, at the first
 * round after libnats reported the disconnection. */
static void forget_on_disconnect(struct ing_cluster *c, uint64_t now)
{
	uint64_t d = atomic_load_explicit(&c->ctr[CL_disconnects], memory_order_relaxed);

	if (d == c->disconnects_seen)
		return;
	c->disconnects_seen = d;
	if (c->spec && c->spec->load)
		load_forget_remote(c->spec->load, now);
}

bool cluster_step(struct ing_cluster *c, uint64_t now)
{
	struct cl_msg *m;
	int n = 0;

	if (!c)
		return false;
	if (c->in_fd >= 0) {
		uint64_t v;
		if (read(c->in_fd, &v, sizeof(v)) < 0) {
			/* EAGAIN: nothing signalled since the last round */
		}
	}
	forget_on_disconnect(c, now);
	flush(c);
	while (n < CL_STEP_BUDGET && (m = ring_pop(&c->in))) {
		apply_msg(c, m, false, now);
		free(m);
		n++;
	}
	while (n < CL_STEP_BUDGET && !warm_hold(c, now) && (m = ring_pop(&c->warm))) {
		apply_msg(c, m, true, now);
		free(m);
		n++;
	}
	return n == CL_STEP_BUDGET;
}

bool cluster_warming(const struct ing_cluster *c, uint64_t now)
{
	uint64_t t = c ? now - c->opened_ns : UINT64_MAX;

	if (t >= CL_WARM_READY_MS * NS_PER_MS)
		return false;
	if (!atomic_load(&c->connected) && t >= CL_WARM_OFFLINE_MS * NS_PER_MS)
		return false; /* no server: local-only, ready without peers */
	return !atomic_load(&c->warm_done) ||
	       atomic_load_explicit(&c->warm.tail, memory_order_acquire) !=
		       atomic_load_explicit(&c->warm.head, memory_order_relaxed);
}

int cluster_fd(const struct ing_cluster *c)
{
	return c ? c->in_fd : -1;
}

/* ---- metrics ------------------------------------------------------------------------------ */

void cluster_metrics(FILE *f, void *arg)
{
	struct ing_cluster *c = arg;

	if (!c)
		return;
	fprintf(f, "# HELP kvidx_cluster_connected 1 while the cluster link has a NATS connection\n"
		"# TYPE kvidx_cluster_connected gauge\nkvidx_cluster_connected %d\n",
		atomic_load(&c->connected));
	fprintf(f, "# HELP kvidx_cluster_warm 1 once the first warm-start replay has finished "
		"(or was impossible)\n# TYPE kvidx_cluster_warm gauge\nkvidx_cluster_warm %d\n",
		atomic_load(&c->warm_done));
#define CL_PRINT(n, h)                                                                       \
	fprintf(f, "# HELP kvidx_cluster_" #n "_total " h "\n# TYPE kvidx_cluster_" #n           \
		"_total counter\nkvidx_cluster_" #n "_total %llu\n",                            \
		(unsigned long long)atomic_load_explicit(&c->ctr[CL_##n], memory_order_relaxed));
	CL_CTRS(CL_PRINT)
#undef CL_PRINT
}
