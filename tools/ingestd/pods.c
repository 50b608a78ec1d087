/*
 * pods.c — one pod's event stream in kvidx-ingestd: sockets, identity, sequence numbers,
 * replay, health (see pods.h). Everything here runs on the one ingest thread and never
 * blocks: sockets are read with ZMQ_DONTWAIT and sends to a replay DEALER only queue.
 */
#include "pods.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "inspect.h"
#include "log.h"

#define NS_PER_MS 1000000ull
#define NS_PER_S 1000000000ull

/* ---- small helpers -------------------------------------------------------------------- */

static void set_ctr(struct ing_pod *p, enum kv_pod_ctr i, uint64_t v)
{
	ing_ctr_set(&p->g->tgt, i, v);
}

static const char *label(const struct ing_pod *p)
{
	return p->g->tgt.label;
}

static void relabel(struct ing_pod *p)
{
	p->g->tgt.label = p->g->name[0] ? p->g->name : p->ep;
}

int ing_recv_multipart(void *sock, zmq_msg_t *msgs, int max, int *nframes)
{
	int total = 0, more = 0;
	size_t more_len = sizeof(more);

	*nframes = 0;
	do {
		zmq_msg_t scratch, *m = total < max ? &msgs[total] : &scratch;
		zmq_msg_init(m);
		/* Parts of one message arrive together: only the first can find nothing there. */
		if (zmq_msg_recv(m, sock, ZMQ_DONTWAIT) < 0) {
			int e = errno;
			zmq_msg_close(m);
			if (total == 0 && e == EAGAIN)
				return 0;
			return -e;
		}
		if (zmq_getsockopt(sock, ZMQ_RCVMORE, &more, &more_len) < 0)
			more = 0;
		if (total < max)
			(*nframes)++;
		else
			zmq_msg_close(m);
		total++;
	} while (more);
	return total;
}

static void close_frames(zmq_msg_t *msgs, int n)
{
	for (int i = 0; i < n; i++)
		zmq_msg_close(&msgs[i]);
}

/* Host:port of an endpoint, "tcp://10.0.0.1:5557" -> "10.0.0.1:5557". */
static void endpoint_host(const char *ep, char *out, size_t len)
{
	const char *p = strstr(ep, "://");
	const char *h = p ? p + 3 : ep;
	size_t n = strlen(h);

	/* Too long for a pod name: truncated (give name= for such endpoints). */
	if (n >= len)
		n = len - 1;
	memcpy(out, h, n);
	out[n] = '\0';
}

static void sock_close(void **s)
{
	if (*s) {
		int zero = 0;
		zmq_setsockopt(*s, ZMQ_LINGER, &zero, sizeof(zero));
		zmq_close(*s);
		*s = NULL;
	}
}

/*
 * Freshness gating (docs/DESIGN.md "Freshness gating"): while a gap is being replayed or the SUB is
 * disconnected, the pod's speculative records stop counting for readers. Called where either
 * changes, and from housekeeping (for a pod registered after the change).
 */
static void gate(struct ing_shared *sh, struct ing_pod *p)
{
	struct ing_group *g = p->g;
	bool pause = false, all_up = true;

	/* This rank's health word. */
	ing_rank_set(&p->st, KV_RC_flags,
		     KV_RANK_IN_USE | (p->connected ? KV_RANK_CONNECTED : 0) |
			     (p->replaying ? KV_RANK_REPLAYING : 0));
	/* A pod is as fresh as its stalest rank. */
	for (unsigned r = 0; r < KV_POD_RANKS; r++) {
		struct ing_pod *q = g->rank[r];
		if (!q)
			continue;
		pause |= q->replaying || (!q->bind_mode && !q->connected);
		all_up &= q->connected;
	}
	set_ctr(p, KV_PC_connected, all_up);
	if (g->tgt.pod >= 0)
		spec_set_stream(sh->spec, g->tgt.pod, pause ? SPEC_STREAM : SPEC_FRESH,
				kvidx_now_ns());
}

/* ---- identity ------------------------------------------------------------------------- */

static struct ing_pod *find_by_name(struct ing_shared *sh, const char *name,
				    const struct ing_pod *except)
{
	for (size_t i = 0; i < sh->npods; i++)
		if ((!except || sh->pods[i]->g != except->g) && sh->pods[i]->g->tgt.pod >= 0 &&
		    !strcmp(sh->pods[i]->g->name, name))
			return sh->pods[i];
	return NULL;
}

/* Registers p's pod in the index as name (how: where the name came from, for the log). 0, or
 * -errno / -KVIDX_E* (logged). */
/* A pod registered with no model yet (no model=, no topic so far: replayed batches carry
 * none) takes the model the index had for its name before the restart, so its keys and its
 * metrics' model label stay what they were; a topic naming another model still wins. */
static void prev_model(const struct ing_shared *sh, const char *name, struct ing_group *g)
{
	for (size_t i = 0; i < sh->nprev; i++)
		if (!strcmp(sh->prev[i].name, name)) {
			snprintf(g->model, sizeof(g->model), "%s", sh->prev[i].model);
			ilog(ILOG_INFO, "pod %s: model %s, as before the restart (until a topic names "
			     "one)", name, g->model);
			return;
		}
}

static int pod_register(struct ing_shared *sh, struct ing_pod *p, const char *name,
			const char *how)
{
	struct ing_group *g = p->g;

	if (!g->model[0] && !p->spec.model[0])
		prev_model(sh, name, g);
	int idx;

	if (strlen(name) >= sizeof(g->name))
		return -ENAMETOOLONG;
	if (find_by_name(sh, name, p)) {
		/* kvidx_pod_add would hand out the same index: two streams would clear each
		 * other's records. */
		ilog_limited(&g->tgt.lim, ILOG_ERROR,
			     "pod %s (%s): another subscription already uses that name; ignored",
			     name, p->ep[0] ? p->ep : "bind");
		return -EEXIST;
	}
	idx = kvidx_pod_add(sh->w, name, g->model);
	if (idx < 0) {
		ilog_limited(&g->tgt.lim, ILOG_ERROR, "pod %s: cannot add to the index: %s", name,
			     kvidx_strerror(idx));
		return idx;
	}
	strcpy(g->name, name);
	for (unsigned r = 0; r < KV_POD_RANKS; r++)
		if (g->rank[r])
			relabel(g->rank[r]);
	struct kv_tm_pod shm = kv_tm_pod(sh->w, idx);
	/* kvidx_pod_add zeroed the slot's counters; carry over what was counted before. */
	kv_tm_pod_carry(shm, kv_tm_pod_local(&g->local_ctr));
	g->tgt.ctr = shm;
	g->tgt.pod = idx;
	spec_pod_attach(sh->spec, idx, name, kvidx_now_ns());
	gate(sh, p);
	ilog(ILOG_INFO, "pod %s (name from %s): index pod %d%s%s, %u rank(s), model %s%s%s", name,
	     how, idx, p->bind_mode ? " (bind mode)" : ", endpoint ",
	     p->bind_mode ? "" : p->ep, g->nmembers, g->model[0] ? g->model : "(none yet)",
	     g->model[0] ? (p->spec.model[0] ? " from model=" : " from the topic") : "", "");
	return 0;
}

/* Connect mode, first message: name = name=, else the topic's pod, else endpoint host:port. */
static int identify(struct ing_shared *sh, struct ing_pod *p, const char *topic_pod)
{
	char host[KVIDX_POD_NAME_MAX];

	endpoint_host(p->spec.endpoint, host, sizeof(host));
	if (topic_pod[0]) {
		if (!find_by_name(sh, topic_pod, p))
			return pod_register(sh, p, topic_pod, "the topic");
		ilog(ILOG_WARN,
		     "pod %s: topic names pod %s, which another subscription already uses; "
		     "naming this one %s (give name= to choose)",
		     p->ep, topic_pod, host);
	} else {
		ilog(ILOG_WARN,
		     "pod %s: neither name= nor a kv@POD@MODEL topic names the pod; naming it by "
		     "its event endpoint %s, which routers do not send requests to (give name= "
		     "the serving IP:PORT)",
		     p->ep, host);
	}
	return pod_register(sh, p, host, "the endpoint");
}

/* Registers p's pod if it is not yet: by name=, else by identify(). 0 or negative (logged). */
static int ensure_registered(struct ing_shared *sh, struct ing_pod *p, const char *topic_pod)
{
	if (p->g->tgt.pod >= 0)
		return 0;
	return p->spec.name[0] ? pod_register(sh, p, p->spec.name, "name=")
			       : identify(sh, p, topic_pod);
}

/* ---- lifecycle ------------------------------------------------------------------------ */

static struct ing_group *group_new(void)
{
	struct ing_group *g = calloc(1, sizeof(*g));

	if (g)
		ing_target_init(&g->tgt, kv_tm_pod_local(&g->local_ctr));
	return g;
}

/* A stream of group g for rank (g NULL: a new group). NULL when out of memory. */
static struct ing_pod *pod_alloc(struct ing_shared *sh, struct ing_group *g, unsigned rank)
{
	struct ing_pod *p = calloc(1, sizeof(*p));
	bool own = !g;

	if (!p)
		return NULL;
	if (own && !(g = group_new()))
		goto fail;
	if (sh->npods == sh->pods_cap) {
		size_t ncap = sh->pods_cap ? 2 * sh->pods_cap : 16;
		struct ing_pod **np = realloc(sh->pods, ncap * sizeof(*np));
		if (!np)
			goto fail;
		sh->pods = np;
		sh->pods_cap = ncap;
	}
	p->g = g;
	if (ing_stream_open(&sh->ap, &p->st, &g->tgt, rank) < 0)
		goto fail;
	g->rank[rank] = p;
	g->nmembers++;
	sh->pods[sh->npods++] = p;
	return p;
fail:
	if (own && g) {
		ing_target_free(&g->tgt);
		free(g);
	}
	free(p);
	return NULL;
}

static void pod_unlink(struct ing_shared *sh, struct ing_pod *p)
{
	for (size_t i = 0; i < sh->npods; i++) {
		if (sh->pods[i] == p) {
			memmove(&sh->pods[i], &sh->pods[i + 1], (sh->npods - i - 1) * sizeof(p));
			sh->npods--;
			return;
		}
	}
}

static int replay_start(struct ing_shared *sh, struct ing_pod *p, uint64_t from, uint64_t now);

/* Endpoint ep with r added to its port ("tcp://h:5557" + 2 -> "tcp://h:5559"). */
int ing_endpoint_plus(const char *ep, unsigned r, char *out, size_t len)
{
	const char *colon = strrchr(ep, ':');
	char *end;
	unsigned long port;

	if (r == 0 || !ep[0]) {
		snprintf(out, len, "%s", ep);
		return 0;
	}
	if (!colon || !colon[1])
		return -EINVAL;
	port = strtoul(colon + 1, &end, 10);
	if (*end || port + r > 65535)
		return -EINVAL;
	snprintf(out, len, "%.*s:%lu", (int)(colon - ep), ep, port + r);
	return 0;
}

/* Opens the sockets of rank stream p. 0, or -1 (logged). */
static int pod_connect(struct ing_shared *sh, struct ing_pod *p, uint64_t now)
{
	const char *topic = p->spec.topic_set ? p->spec.topic : sh->cfg->topic_filter;
	char mon_ep[64];
	int hwm = ING_SUB_HWM, zero = 0;

	p->win_start_ns = now;
	p->sub = zmq_socket(sh->zctx, ZMQ_SUB);
	if (!p->sub)
		goto fail;
	zmq_setsockopt(p->sub, ZMQ_RCVHWM, &hwm, sizeof(hwm));
	zmq_setsockopt(p->sub, ZMQ_LINGER, &zero, sizeof(zero));
	if (zmq_setsockopt(p->sub, ZMQ_SUBSCRIBE, topic, strlen(topic)) < 0)
		goto fail;
	/* The monitor reports the SUB's TCP connection coming and going: the connected gauge,
	 * and a reconnect makes any step back in the sequence a publisher restart. */
	snprintf(mon_ep, sizeof(mon_ep), "inproc://kvidx-ingestd-mon-%llu",
		 (unsigned long long)++sh->monitor_seq);
	if (zmq_socket_monitor(p->sub, mon_ep, ZMQ_EVENT_CONNECTED | ZMQ_EVENT_DISCONNECTED) < 0)
		goto fail;
	p->mon = zmq_socket(sh->zctx, ZMQ_PAIR);
	if (!p->mon || zmq_connect(p->mon, mon_ep) < 0)
		goto fail;
	if (zmq_connect(p->sub, p->ep) < 0)
		goto fail;
	ilog(ILOG_INFO, "pod %s rank %u: subscribed to %s, topic prefix \"%s\"%s%s",
	     p->spec.name[0] ? p->spec.name : p->spec.endpoint, p->st.rank, p->ep, topic,
	     p->rep[0] ? ", replay " : "", p->rep);
	return 0;
fail:
	ilog(ILOG_ERROR, "pod %s: cannot subscribe: %s", p->ep, zmq_strerror(errno));
	return -1;
}

struct ing_pod *ing_pod_open(struct ing_shared *sh, const struct ing_pod_spec *spec,
			     uint64_t now)
{
	unsigned nranks = spec->dp_ranks ? spec->dp_ranks : 1;
	struct ing_pod *first = NULL;
	struct ing_group *g = NULL;

	for (unsigned r = 0; r < nranks; r++) {
		struct ing_pod *p = pod_alloc(sh, g, r);

		if (!p) {
			ilog(ILOG_ERROR, "pod %s: out of memory", spec->endpoint);
			goto fail;
		}
		g = p->g;
		if (!first)
			first = p;
		p->spec = *spec;
		if (ing_endpoint_plus(spec->endpoint, r, p->ep, sizeof(p->ep)) < 0 ||
		    ing_endpoint_plus(spec->replay, r, p->rep, sizeof(p->rep)) < 0) {
			ilog(ILOG_ERROR, "pod %s: rank %u: no port to add %u to", spec->endpoint, r, r);
			goto fail;
		}
		relabel(p);
		if (pod_connect(sh, p, now) < 0)
			goto fail;
	}
	snprintf(g->model, sizeof(g->model), "%s", spec->model);
	if (spec->name[0] && pod_register(sh, first, spec->name, "name=") < 0) {
		/* Retried at the first message; the subscription stays. */
		ilog(ILOG_WARN, "pod %s: not registered yet, will retry", spec->name);
	}
	if (sh->cfg->replay_on_start && spec->replay[0])
		for (unsigned r = 0; r < KV_POD_RANKS; r++)
			if (g->rank[r])
				replay_start(sh, g->rank[r], 0, now);
	return first;
fail:
	/* Closing the last stream frees the group. */
	for (unsigned r = nranks; g && r-- > 0;) {
		if (!g->rank[r])
			continue;
		bool last = g->nmembers == 1;
		ing_pod_close(sh, g->rank[r], false);
		if (last)
			g = NULL;
	}
	return NULL;
}

/* The group of the bind-mode pod named name, NULL if none is bound yet. */
static struct ing_group *bound_group(struct ing_shared *sh, const char *name)
{
	for (size_t i = 0; i < sh->npods; i++)
		if (sh->pods[i]->bind_mode && !strcmp(sh->pods[i]->g->name, name))
			return sh->pods[i]->g;
	return NULL;
}

struct ing_pod *ing_pod_open_bound(struct ing_shared *sh, const char *name, const char *model,
				   unsigned rank, const char *rep, uint64_t now)
{
	struct ing_group *g = bound_group(sh, name);
	struct ing_pod *p, *other = g ? NULL : find_by_name(sh, name, NULL);

	if (g) { /* another rank of a pod already bound */
		if (rank >= KV_POD_RANKS || g->rank[rank] || !(p = pod_alloc(sh, g, rank)))
			return NULL;
		p->bind_mode = true;
		if (ing_endpoint_plus(rep, rank, p->rep, sizeof(p->rep)) < 0)
			p->rep[0] = '\0';
		relabel(p);
		p->win_start_ns = now;
		p->connected = true;
		gate(sh, p);
		return p;
	}
	if (other) {
		/* Two streams writing one pod would clear each other on every sequence step. */
		ilog_limited(&other->g->tgt.lim, ILOG_WARN,
			     "pod %s: also publishing to the bound socket while subscribed as %s; "
			     "bound messages ignored",
			     name, other->ep);
		return NULL;
	}
	p = rank < KV_POD_RANKS ? pod_alloc(sh, NULL, rank) : NULL;
	if (!p) {
		ilog(ILOG_ERROR, "pod %s: out of memory", name);
		return NULL;
	}
	p->bind_mode = true;
	if (ing_endpoint_plus(rep, rank, p->rep, sizeof(p->rep)) < 0)
		p->rep[0] = '\0';
	snprintf(p->g->model, sizeof(p->g->model), "%s", model);
	relabel(p);
	p->win_start_ns = now;
	if (pod_register(sh, p, name, "the topic") < 0) {
		ing_pod_close(sh, p, false);
		return NULL;
	}
	p->connected = true;
	gate(sh, p);
	return p;
}

void ing_pod_close(struct ing_shared *sh, struct ing_pod *p, bool remove)
{
	struct ing_group *g;

	if (!p)
		return;
	g = p->g;
	if (p->sub)
		zmq_socket_monitor(p->sub, NULL, 0);
	sock_close(&p->mon);
	sock_close(&p->sub);
	sock_close(&p->dealer);
	ing_stream_close(&sh->ap, &p->st);
	g->rank[p->st.rank] = NULL;
	if (--g->nmembers == 0) {
		if (remove && g->tgt.pod >= 0) {
			kvidx_pod_remove(sh->w, g->tgt.pod); /* spec.c hears of it: observer */
			ilog(ILOG_INFO, "pod %s: removed from the index", label(p));
		}
		ing_target_free(&g->tgt);
		free(g);
	}
	pod_unlink(sh, p);
	free(p->held_buf);
	for (size_t i = 0; i < p->bq_n; i++)
		free(p->bq[i].buf);
	free(p->bq);
	free(p);
}

/* ---- applying one batch --------------------------------------------------------------- */

/* Drops this rank's blocks (the pod's other ranks keep theirs). */
static void clear_pod(struct ing_shared *sh, struct ing_pod *p)
{
	ing_stream_clear(&sh->ap, &p->st);
}

/*
 * The event path's lag for one live batch: applied minus published, both wall clock (vLLM
 * stamps ts with time.time()), into the pod's lag histograms (cumulative and recent, us).
 * A batch stamped after it was applied (clock skew between the hosts) counts in lag_negative
 * and as 0. Replayed batches are not the live path and are not measured.
 */
static void record_lag(struct ing_shared *sh, struct ing_pod *p, double ts)
{
	struct timespec wall;
	int pod = p->g->tgt.pod;
	struct kv_tm_hist h0 = kv_tm_hist(sh->w, pod, KV_HIST_LAG);
	struct kv_tm_hist h1 = kv_tm_hist(sh->w, pod, KV_HIST_LAG_RECENT);

	if (!kv_tm_hist_ok(h0) || !kv_tm_hist_ok(h1) || !(ts > 0))
		return;
	clock_gettime(CLOCK_REALTIME, &wall);
	double lag = (double)wall.tv_sec + (double)wall.tv_nsec / 1e9 - ts;
	if (lag < 0) {
		ing_pod_ctr_add(p, KV_PC_lag_negative, 1);
		lag = 0;
	}
	uint64_t us = lag > 1e9 ? (uint64_t)1e15 : (uint64_t)(lag * 1e6);
	kv_tm_hist_add(h0, us);
	kv_tm_hist_add(h1, us);
	set_ctr(p, KV_PC_lag_last_us, us);
}

/* The pod's publisher was heard (a batch or a heartbeat): fresh, and its routes' pipeline is
 * alive (spec.c's routed-but-silent clock restarts). */
static void heard(struct ing_shared *sh, struct ing_pod *p, uint64_t now)
{
	set_ctr(p, KV_PC_last_event_ns, now);
	ing_rank_set(&p->st, KV_RC_last_event_ns, now);
	spec_on_event(sh->spec, p->g->tgt.pod, now);
}

/* Consumes batch seq: decode, validate, apply. Malformed: counted, logged, skipped. */
static void apply_batch(struct ing_shared *sh, struct ing_pod *p, const char *topic_model,
			uint64_t seq, const void *payload, size_t len, uint64_t now)
{
	char err[256];
	const char *model = p->spec.model[0] ? p->spec.model
			    : topic_model[0] ? topic_model : p->g->model;
	int rc;

	seq_accept(&p->seq, seq);
	set_ctr(p, KV_PC_last_seq, seq);
	ing_rank_set(&p->st, KV_RC_last_seq, seq);
	rc = kvw_decode_batch(payload, len, &sh->batch, err, sizeof(err));
	if (rc < 0) {
		ing_pod_ctr_add(p, KV_PC_decode_errors, 1);
		ilog_limited(&p->g->tgt.lim, ILOG_WARN, "pod %s rank %u: batch %llu skipped: %s",
			     label(p), p->st.rank, (unsigned long long)seq, err);
		return;
	}
	if (!sh->batch.nevents && !sh->batch.nskipped && !sh->batch.nbad) {
		/* An empty batch: a heartbeat (vLLM #57789's idle publishers send one a second).
		 * The pod is fresh; the table is not touched. */
		ing_pod_ctr_add(p, KV_PC_heartbeats, 1);
		ing_pod_ctr_add(p, KV_PC_batches, 1);
		ing_rank_add(&p->st, KV_RC_batches, 1);
		heard(sh, p, now);
		return;
	}
	if (!model[0] && !p->g->warned_model) {
		p->g->warned_model = true;
		ilog(ILOG_WARN,
		     "pod %s: no model from model= or a kv@POD@MODEL topic: keys chain from the "
		     "root of model \"\" and match only routers that key the same (give model=)",
		     label(p));
	}
	ing_apply_batch(&sh->ap, &p->st, &sh->batch, model, now);
	if (!p->replaying)
		record_lag(sh, p, sh->batch.ts);
	ing_pod_ctr_add(p, KV_PC_batches, 1);
	ing_rank_add(&p->st, KV_RC_batches, 1);
	heard(sh, p, now);
	p->win_events += sh->batch.nevents + sh->batch.nskipped + sh->batch.nbad;
}

/* ---- replay ------------------------------------------------------------------------------ */

static void hold(struct ing_pod *p, const char *topic_model, const struct kvw_seqf *sf,
		 const void *payload, size_t len)
{
	if (len > p->held_cap) {
		void *nb = realloc(p->held_buf, len);
		if (!nb) {
			/* Without the message the replay must cover it: nothing is lost. */
			p->held = false;
			return;
		}
		p->held_buf = nb;
		p->held_cap = len;
	}
	/* Re-holding the held message itself (a new gap found when it is released) keeps it. */
	if (len && payload != p->held_buf)
		memcpy(p->held_buf, payload, len);
	if (topic_model != p->held_model)
		snprintf(p->held_model, sizeof(p->held_model), "%s", topic_model);
	p->held_len = len;
	if (sf != &p->held_sf)
		p->held_sf = *sf;
	p->held = true;
}

static int replay_start(struct ing_shared *sh, struct ing_pod *p, uint64_t from, uint64_t now)
{
	unsigned char seq8[8];
	int zero = 0;

	sock_close(&p->dealer);
	p->dealer = zmq_socket(sh->zctx, ZMQ_DEALER);
	if (!p->dealer)
		goto fail;
	/* Unbounded receive queue: a replay may send the publisher's whole buffer (10,000
	 * batches by default) at once, and a dropped reply would fail the replay. */
	zmq_setsockopt(p->dealer, ZMQ_RCVHWM, &zero, sizeof(zero));
	zmq_setsockopt(p->dealer, ZMQ_LINGER, &zero, sizeof(zero));
	if (zmq_connect(p->dealer, p->rep) < 0)
		goto fail;
	kvw_seq_put(seq8, from);
	if (zmq_send(p->dealer, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
	    zmq_send(p->dealer, seq8, 8, ZMQ_DONTWAIT) < 0)
		goto fail;
	p->replaying = true;
	p->rp_at_start = !p->seq.have;
	p->rp_from = p->rp_next = from;
	p->rp_got = false;
	p->rp_deadline = now + (uint64_t)sh->cfg->replay_timeout_ms * NS_PER_MS;
	gate(sh, p);
	ilog(ILOG_INFO, "pod %s: replaying from seq %llu (%s)", label(p),
	     (unsigned long long)from, p->rep);
	return 0;
fail:
	ilog(ILOG_WARN, "pod %s: cannot ask replay endpoint %s: %s", label(p), p->rep,
	     zmq_strerror(errno));
	sock_close(&p->dealer);
	return -1;
}

/* Resumes live ingest with the held message, if any, through the normal sequence rules. */
static void release_held(struct ing_shared *sh, struct ing_pod *p, uint64_t now)
{
	if (!p->held)
		return;
	p->held = false;
	ing_pod_live(sh, p, p->held_model, &p->held_sf, p->held_buf, p->held_len, now);
}

/* The replay could not cover the gap: clear the pod, continue live. */
static void replay_abandon(struct ing_shared *sh, struct ing_pod *p, enum kv_pod_ctr why,
			   const char *reason, uint64_t now)
{
	sock_close(&p->dealer);
	p->replaying = false;
	gate(sh, p);
	ing_pod_ctr_add(p, why, 1);
	ilog(ILOG_WARN, "pod %s: replay from seq %llu %s; pod cleared, continuing live", label(p),
	     (unsigned long long)p->rp_from, reason);
	clear_pod(sh, p);
	seq_reset(&p->seq);
	release_held(sh, p, now);
}

static void replay_done(struct ing_shared *sh, struct ing_pod *p, uint64_t now)
{
	if (!p->rp_got) {
		/* The publisher holds nothing from rp_from on, yet it sent a later batch. */
		replay_abandon(sh, p, KV_PC_replays_truncated, "returned nothing", now);
		return;
	}
	sock_close(&p->dealer);
	p->replaying = false;
	gate(sh, p);
	ing_pod_ctr_add(p, KV_PC_replays_ok, 1);
	ilog(ILOG_INFO, "pod %s: replayed seq %llu..%llu", label(p),
	     (unsigned long long)p->rp_from, (unsigned long long)p->rp_last);
	/* Live messages from the held one up to the last replayed one are already applied.
	 * Without a held message (replay at start) everything up to rp_last is. */
	uint64_t lo = p->held ? p->held_sf.seq : 0;
	if (lo <= p->rp_last) {
		p->seq.covered = true;
		p->seq.cov_lo = lo;
		p->seq.cov_hi = p->rp_last;
	}
	release_held(sh, p, now);
}

/* One reply: ["", seq8, payload] or ["", topic, seq8, payload]. */
static void replay_message(struct ing_shared *sh, struct ing_pod *p, zmq_msg_t *f, int n,
			   int total, uint64_t now)
{
	char tpod[KVIDX_POD_NAME_MAX], tmodel[ING_MODEL_MAX];
	const char *model = p->held ? p->held_model : p->g->model;
	struct kvw_seqf sf;
	uint64_t seq;
	int s;

	if (total != n || n < 3 || n > 4 || zmq_msg_size(&f[0]) != 0) {
		ing_pod_ctr_add(p, KV_PC_decode_errors, 1);
		ilog_limited(&p->g->tgt.lim, ILOG_WARN, "pod %s: replay reply of %d frames skipped",
			     label(p), total);
		return;
	}
	s = n == 4 ? 2 : 1;
	if (!kvw_seq_frame(zmq_msg_data(&f[s]), zmq_msg_size(&f[s]), &sf)) {
		ing_pod_ctr_add(p, KV_PC_decode_errors, 1);
		ilog_limited(&p->g->tgt.lim, ILOG_WARN, "pod %s: replay reply with a %zu-byte seq",
			     label(p), zmq_msg_size(&f[s]));
		return;
	}
	seq = sf.seq;
	if (seq == KVW_SEQ_END) {
		replay_done(sh, p, now);
		return;
	}
	size_t tlen = 0;
	if (n == 4 && kvw_topic_split(zmq_msg_data(&f[1]), zmq_msg_size(&f[1]), &tlen, &sf))
		tlen = 0;
	if (sf.has_id && p->have_id && memcmp(sf.id, p->pub_id, KVW_PUB_ID_LEN)) {
		/* Another process answers than the one whose gap this is: what it holds does not
		 * fill that gap. The next live message of the new process is a restart. */
		replay_abandon(sh, p, KV_PC_replays_truncated, "came from another publisher id", now);
		return;
	}
	tpod[0] = '\0';
	if (n == 4 && kvw_parse_topic(zmq_msg_data(&f[1]), tlen, tpod, sizeof(tpod), tmodel,
				      sizeof(tmodel)) == 0 && tmodel[0])
		model = tmodel;
	if (!p->spec.model[0] && model != p->g->model && strcmp(p->g->model, model))
		snprintf(p->g->model, sizeof(p->g->model), "%s", model);
	p->rp_deadline = now + (uint64_t)sh->cfg->replay_timeout_ms * NS_PER_MS;
	if (!p->rp_got) {
		p->rp_got = true;
		if (seq > p->rp_from && p->rp_at_start) {
			/* vLLM keeps only its last batches (10,000 by default): a rebuild at start
			 * takes what there is. Blocks stored before seq are unknown, so children of
			 * theirs count as unknown_parent; nothing wrong enters the index. */
			ilog(ILOG_INFO,
			     "pod %s: replay at start begins at seq %llu; earlier blocks are not "
			     "rebuilt",
			     label(p), (unsigned long long)seq);
			p->rp_next = seq;
		} else if (seq > p->rp_from) {
			char why[96];
			snprintf(why, sizeof(why), "starts at seq %llu (publisher no longer has the gap)",
				 (unsigned long long)seq);
			replay_abandon(sh, p, KV_PC_replays_truncated, why, now);
			return;
		}
	}
	if (seq < p->rp_next)
		return; /* before what was asked: already applied */
	if (seq > p->rp_next) {
		char why[96];
		snprintf(why, sizeof(why), "skipped from seq %llu to %llu",
			 (unsigned long long)p->rp_next, (unsigned long long)seq);
		replay_abandon(sh, p, KV_PC_replays_truncated, why, now);
		return;
	}
	/* A replay at start may come before any live message named the pod. */
	if (ensure_registered(sh, p, tpod) == 0)
		apply_batch(sh, p, model, seq, zmq_msg_data(&f[n - 1]), zmq_msg_size(&f[n - 1]),
			    now);
	else
		seq_accept(&p->seq, seq);
	p->rp_next = seq + 1;
	p->rp_last = seq;
}

void ing_pod_read_replay(struct ing_shared *sh, struct ing_pod *p)
{
	for (unsigned i = 0; i < ING_READ_BUDGET && p->replaying && p->dealer; i++) {
		zmq_msg_t f[4];
		int n, total = ing_recv_multipart(p->dealer, f, 4, &n);
		if (total <= 0) {
			if (total < 0)
				ilog_limited(&p->g->tgt.lim, ILOG_WARN, "pod %s: replay socket: %s",
					     label(p), zmq_strerror(-total));
			return;
		}
		uint64_t now = kvidx_now_ns();
		replay_message(sh, p, f, n, total, now);
		close_frames(f, n);
		p->round_reads++;
		ing_schedule(sh, ING_AT_REPLAY, now);
	}
}

/* ---- live messages ------------------------------------------------------------------------ */

/* Hex of a publisher id, for the log (an id is no secret: a random per-process value). */
static void id_hex(const uint8_t *id, char out[2 * KVW_PUB_ID_LEN + 1])
{
	for (int i = 0; i < KVW_PUB_ID_LEN; i++)
		snprintf(out + 2 * i, 3, "%02x", id[i]);
}

/*
 * Publisher identity: a sequence frame with an id other than the last one is a new engine
 * process, whatever its number. Adopts sf's id (or forgets it: a frame without one). Returns
 * true, with why filled in, if the id changed.
 */
static bool new_publisher(struct ing_pod *p, const struct kvw_seqf *sf, char *why, size_t len)
{
	bool changed = sf->has_id && p->have_id && memcmp(sf->id, p->pub_id, KVW_PUB_ID_LEN);

	if (changed) {
		char a[2 * KVW_PUB_ID_LEN + 1], b[2 * KVW_PUB_ID_LEN + 1];
		id_hex(p->pub_id, a);
		id_hex(sf->id, b);
		snprintf(why, len, "publisher id changed from %s to %s (seq %llu)", a, b,
			 (unsigned long long)sf->seq);
	}
	p->have_id = sf->has_id;
	memcpy(p->pub_id, sf->id, KVW_PUB_ID_LEN);
	return changed;
}

/*
 * An engine restart (new publisher id, or the sequence went back): the rank's blocks are gone
 * with the old process, so it is cleared in one step, and, with a replay endpoint, what the
 * new process published before this message (seq > 0) is asked from 0. Returns true if the
 * message is held for that replay (consumed), false if the caller applies it now.
 */
static bool restarted(struct ing_shared *sh, struct ing_pod *p, const char *topic_model,
		      const struct kvw_seqf *sf, const void *payload, size_t len, const char *why,
		      uint64_t now)
{
	ing_pod_ctr_add(p, KV_PC_restarts, 1);
	ing_rank_add(&p->st, KV_RC_restarts, 1);
	ilog(ILOG_WARN, "pod %s rank %u: %s: engine restarted, pod cleared", label(p),
	     p->st.rank, why);
	clear_pod(sh, p);
	seq_reset(&p->seq);
	if (!p->rep[0] || sf->seq == 0)
		return false;
	hold(p, topic_model, sf, payload, len);
	if (replay_start(sh, p, 0, now) == 0)
		return true;
	p->held = false;
	return false;
}

/* A duplicate-numbered empty batch is still a heartbeat: it proves the publisher alive. */
static void dup_heartbeat(struct ing_shared *sh, struct ing_pod *p, const void *payload,
			  size_t len, uint64_t now)
{
	char err[64];

	if (kvw_decode_batch(payload, len, &sh->batch, err, sizeof(err)) == 0 &&
	    !sh->batch.nevents && !sh->batch.nskipped && !sh->batch.nbad)
		heard(sh, p, now);
}

void ing_pod_live(struct ing_shared *sh, struct ing_pod *p, const char *topic_model,
		  const struct kvw_seqf *sf, const void *payload, size_t len, uint64_t now)
{
	uint64_t seq = sf->seq;
	char why[160];

	if (new_publisher(p, sf, why, sizeof(why))) {
		if (restarted(sh, p, topic_model, sf, payload, len, why, now))
			return;
		apply_batch(sh, p, topic_model, seq, payload, len, now);
		return;
	}
	switch (seq_classify(&p->seq, seq)) {
	case SEQ_FIRST:
	case SEQ_IN_ORDER:
		break;
	case SEQ_COVERED:
		return;
	case SEQ_DUP:
		ing_pod_ctr_add(p, KV_PC_seq_dups, 1);
		ilog_limited(&p->g->tgt.lim, ILOG_DEBUG, "pod %s: duplicate seq %llu (expected %llu)",
			     label(p), (unsigned long long)seq, (unsigned long long)p->seq.next);
		dup_heartbeat(sh, p, payload, len, now);
		return;
	case SEQ_RESTART:
		snprintf(why, sizeof(why), "seq went back from %llu to %llu",
			 (unsigned long long)p->seq.next - 1, (unsigned long long)seq);
		if (restarted(sh, p, topic_model, sf, payload, len, why, now))
			return;
		break;
	case SEQ_GAP:
		ing_pod_ctr_add(p, KV_PC_seq_gaps, 1);
		ing_rank_add(&p->st, KV_RC_seq_gaps, 1);
		ilog(ILOG_WARN, "pod %s: seq gap, expected %llu, got %llu", label(p),
		     (unsigned long long)p->seq.next, (unsigned long long)seq);
		if (p->rep[0]) {
			hold(p, topic_model, sf, payload, len);
			if (replay_start(sh, p, p->seq.next, now) == 0)
				return;
			p->held = false;
		}
		ing_pod_ctr_add(p, KV_PC_replays_failed, 1);
		ilog(ILOG_WARN, "pod %s: %s; pod cleared, continuing live", label(p),
		     p->rep[0] ? "replay failed" : "no replay endpoint");
		clear_pod(sh, p);
		seq_reset(&p->seq);
		break;
	}
	apply_batch(sh, p, topic_model, seq, payload, len, now);
}

void ing_pod_bound_drain(struct ing_shared *sh, struct ing_pod *p, uint64_t now)
{
	size_t i = 0;

	for (; i < p->bq_n && !p->replaying; i++) {
		struct ing_bound_msg *m = &p->bq[i];
		ing_pod_live(sh, p, m->model, &m->sf, m->buf, m->len, now);
		free(m->buf);
	}
	memmove(p->bq, p->bq + i, (p->bq_n - i) * sizeof(*p->bq));
	p->bq_n -= i;
}

void ing_pod_live_bound(struct ing_shared *sh, struct ing_pod *p, const char *topic_model,
			const struct kvw_seqf *sf, const void *payload, size_t len, uint64_t now)
{
	struct ing_bound_msg *m;

	ing_pod_bound_drain(sh, p, now);
	if (!p->replaying) {
		ing_pod_live(sh, p, topic_model, sf, payload, len, now);
		return;
	}
	if (!p->bq && !(p->bq = calloc(ING_BOUND_QUEUE, sizeof(*p->bq))))
		return;
	if (p->bq_n == ING_BOUND_QUEUE) {
		ilog_limited(&p->g->tgt.lim, ILOG_WARN, "pod %s: %d live messages wait for the "
			     "replay; seq %llu dropped (a later gap replays it)", label(p),
			     ING_BOUND_QUEUE, (unsigned long long)sf->seq);
		return;
	}
	m = &p->bq[p->bq_n];
	m->buf = len ? malloc(len) : NULL;
	if (len && !m->buf)
		return;
	if (len)
		memcpy(m->buf, payload, len);
	m->len = len;
	m->sf = *sf;
	snprintf(m->model, sizeof(m->model), "%s", topic_model);
	p->bq_n++;
}

unsigned ing_pod_read_sub(struct ing_shared *sh, struct ing_pod *p)
{
	unsigned reads = 0;

	while (reads < ING_READ_BUDGET && !p->replaying) {
		char tpod[KVIDX_POD_NAME_MAX], tmodel[ING_MODEL_MAX];
		zmq_msg_t f[3];
		struct kvw_seqf sf;
		uint64_t now;
		int n, total = ing_recv_multipart(p->sub, f, 3, &n);

		if (total <= 0) {
			if (total < 0)
				ilog_limited(&p->g->tgt.lim, ILOG_WARN, "pod %s: SUB socket: %s",
					     label(p), zmq_strerror(-total));
			break;
		}
		reads++;
		now = kvidx_now_ns();
		if (total != 3 || !kvw_seq_frame(zmq_msg_data(&f[1]), zmq_msg_size(&f[1]), &sf)) {
			ing_pod_ctr_add(p, KV_PC_decode_errors, 1);
			ilog_limited(&p->g->tgt.lim, ILOG_WARN,
				     "pod %s: message of %d frames (seq frame %zu bytes) skipped: "
				     "expected topic, 8-byte seq (+ 16-byte publisher id), payload",
				     label(p), total, n > 1 ? zmq_msg_size(&f[1]) : (size_t)0);
			close_frames(f, n);
			continue;
		}
		size_t tlen;
		int rc = kvw_topic_split(zmq_msg_data(&f[0]), zmq_msg_size(&f[0]), &tlen, &sf);
		if (rc == 0)
			rc = kvw_parse_topic(zmq_msg_data(&f[0]), tlen, tpod, sizeof(tpod), tmodel,
					     sizeof(tmodel));
		if (rc < 0) {
			ing_pod_ctr_add(p, KV_PC_decode_errors, 1);
			ilog_limited(&p->g->tgt.lim, ILOG_WARN, "pod %s: bad topic (%s), message skipped",
				     label(p), rc == -ENAMETOOLONG ? "too long" : "NUL byte");
			close_frames(f, n);
			continue;
		}
		if (!p->spec.model[0] && tmodel[0] && strcmp(p->g->model, tmodel)) {
			snprintf(p->g->model, sizeof(p->g->model), "%s", tmodel);
			/* A pod named by name= registered before its topic named the model. */
			if (p->g->tgt.pod >= 0)
				kvidx_pod_add(sh->w, p->g->name, p->g->model);
		}
		if (ensure_registered(sh, p, tpod) < 0) {
			close_frames(f, n);
			continue; /* logged; retried at the next message */
		}
		if (!p->connected) {
			/* A message proves the connection even if its monitor event is still
			 * queued. */
			p->connected = true;
			gate(sh, p);
		}
		ing_pod_live(sh, p, tmodel, &sf, zmq_msg_data(&f[2]), zmq_msg_size(&f[2]), now);
		close_frames(f, n);
		ing_schedule(sh, ING_AT_MESSAGE, kvidx_now_ns());
	}
	p->round_reads += reads;
	return reads;
}

void ing_pod_read_monitor(struct ing_shared *sh, struct ing_pod *p)
{
	for (;;) {
		zmq_msg_t f[2];
		int n, total = ing_recv_multipart(p->mon, f, 2, &n);
		uint16_t ev;

		if (total <= 0)
			return;
		if (n >= 1 && zmq_msg_size(&f[0]) >= 6) {
			memcpy(&ev, zmq_msg_data(&f[0]), sizeof(ev));
			if (ev == ZMQ_EVENT_CONNECTED) {
				if (p->was_disconnected)
					p->seq.reconnected = true;
				p->connected = true;
				ilog(ILOG_INFO, "pod %s: connected to %s", label(p), p->ep);
			} else if (ev == ZMQ_EVENT_DISCONNECTED) {
				if (p->connected)
					ilog(ILOG_WARN, "pod %s: disconnected from %s", label(p),
					     p->ep);
				p->connected = false;
				p->was_disconnected = true;
			}
			gate(sh, p);
		}
		close_frames(f, n);
	}
}

/* ---- housekeeping -------------------------------------------------------------------------- */

void ing_pod_housekeeping(struct ing_shared *sh, struct ing_pod *p, uint64_t now)
{
	if (p->replaying && now >= p->rp_deadline)
		replay_abandon(sh, p, KV_PC_replays_failed, "timed out", now);
	if (now - p->win_start_ns >= NS_PER_S) {
		uint64_t el = now - p->win_start_ns;
		set_ctr(p, KV_PC_events_per_s,
			(uint64_t)((double)p->win_events * (double)NS_PER_S / (double)el + 0.5));
		p->win_events = 0;
		p->win_start_ns = now;
	}
	set_ctr(p, KV_PC_queue_depth, p->round_reads);
	/* Queue depth over time: the largest round of this and the previous minute. */
	if (now - p->qd_win_ns >= (uint64_t)KV_HIST_DECAY_S * NS_PER_S) {
		p->qd_prev = p->qd_cur;
		p->qd_cur = 0;
		p->qd_win_ns = now;
	}
	if (p->round_reads > p->qd_cur)
		p->qd_cur = p->round_reads;
	set_ctr(p, KV_PC_queue_depth_peak, p->qd_cur > p->qd_prev ? p->qd_cur : p->qd_prev);
	p->round_reads = 0;
	gate(sh, p);
}
