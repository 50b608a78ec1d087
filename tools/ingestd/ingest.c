/*
 * ingest.c — kvidx-ingestd's event loop, reload and shutdown (see ingest.h).
 */
#include "ingest.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster.h"
#include "log.h"
#include "metrics.h" /* metrics_set_ready() */

#define NS_PER_MS 1000000ull

enum { ITEM_SUB, ITEM_MON, ITEM_REPLAY, ITEM_BIND, ITEM_DOORBELL };

/* Resolves 0 ("library default") fields so the summary shows what the index really uses. */
static void resolve_defaults(struct ing_config *c)
{
	if (!c->geo.capacity)
		c->geo.capacity = KVIDX_DEFAULT_CAPACITY;
	if (!c->geo.records)
		c->geo.records = KVIDX_DEFAULT_RECORDS_PER_KEY * c->geo.capacity;
	if (!c->geo.pods_per_key)
		c->geo.pods_per_key = KVIDX_DEFAULT_PODS_PER_KEY;
	if (!c->geo.max_pods)
		c->geo.max_pods = KVIDX_DEFAULT_MAX_PODS;
	if (!c->geo.max_readers)
		c->geo.max_readers = KVIDX_DEFAULT_MAX_READERS;
	if (!c->stall_ms)
		c->stall_ms = KVIDX_DEFAULT_STALL_MS;
	if (!c->engine_map)
		c->engine_map = 4 * c->geo.capacity;
}

/* --bind: a SUB bound at the endpoint for rank 0 and at its port + r for rank r
 * (--bind-ranks), as data-parallel publishers dial port + rank. */
static int bind_open(struct ingestd *d)
{
	int hwm = ING_SUB_HWM, zero = 0;
	unsigned nr = d->cfg->bind_ranks ? d->cfg->bind_ranks : 1;

	for (unsigned r = 0; r < nr; r++) {
		char ep[ING_ENDPOINT_MAX];
		void *s = zmq_socket(d->sh.zctx, ZMQ_SUB);

		if (!s)
			return -errno;
		d->bind_sub[d->nbind++] = s;
		zmq_setsockopt(s, ZMQ_RCVHWM, &hwm, sizeof(hwm));
		zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof(zero));
		if (ing_endpoint_plus(d->cfg->bind, r, ep, sizeof(ep)) < 0 ||
		    zmq_setsockopt(s, ZMQ_SUBSCRIBE, d->cfg->topic_filter,
				   strlen(d->cfg->topic_filter)) < 0 ||
		    zmq_bind(s, ep) < 0) {
			int e = errno ? errno : EINVAL;
			ilog(ILOG_ERROR, "bind %s (rank %u): %s", ep, r, zmq_strerror(e));
			return -e;
		}
	}
	return 0;
}

/* apply.c's hook between two events of a batch. */
static void at_event(void *arg)
{
	ing_schedule(arg, ING_AT_EVENT, 0);
}

/* --replay-on-start: the pods (with a model) of the generation readers use now, read before
 * this writer builds the next one; pods.c gives a pod that model until a topic names one. */
static void prev_pods(struct ingestd *d)
{
	struct kvidx_reader *r = kvidx_reader_open(d->cfg->name);
	struct kvidx_info info;

	if (!r)
		return; /* no index yet, or unreadable: nothing to carry over */
	if (kvidx_reader_info(r, &info) == 0 && info.geo.max_pods &&
	    (d->sh.prev = calloc(info.geo.max_pods, sizeof(*d->sh.prev))))
		for (uint32_t i = 0; i < info.geo.max_pods; i++) {
			struct ing_prev_pod *pp = &d->sh.prev[d->sh.nprev];
			if (kvidx_reader_pod(r, (int)i, pp->name, pp->model) == 0 && pp->model[0])
				d->sh.nprev++;
		}
	kvidx_reader_close(r);
}

/* What opening the index w (of name, asked for geometry geo) found and changed: another
 * geometry, a recreated registry, a rebuilt header. */
static void log_open_info(struct kvidx *w, const char *name, const struct kvidx_geometry *geo)
{
	struct kvidx_open_info oi;

	kvidx_writer_open_info(w, &oi);
	if (oi.flags & KVIDX_OPEN_GEOMETRY)
		ilog(ILOG_WARN, "index '%s' had capacity %llu, records %llu, pods-per-key %u, "
		     "max-pods %u, max-readers %u; generation %llu has capacity %llu, records %llu, "
		     "pods-per-key %u, max-pods %u, max-readers %u (readers switch to it)",
		     name, (unsigned long long)oi.prev.capacity,
		     (unsigned long long)oi.prev.records, oi.prev.pods_per_key, oi.prev.max_pods,
		     oi.prev.max_readers, (unsigned long long)oi.generation,
		     (unsigned long long)geo->capacity, (unsigned long long)geo->records,
		     geo->pods_per_key, geo->max_pods, geo->max_readers);
	if (oi.flags & KVIDX_OPEN_REGISTRY)
		ilog(ILOG_WARN, "index '%s': reader registry recreated (%s); readers re-register",
		     name, oi.flags & KVIDX_OPEN_GEOMETRY ? "new reader geometry" : "damaged");
	if (oi.flags & KVIDX_OPEN_REBUILT)
		ilog(ILOG_WARN, "index '%s': its header was damaged and has been rebuilt", name);
}

int ingestd_open(struct ingestd *d, struct ing_config *cfg)
{
	struct kvidx_writer_opts o;
	uint64_t now = kvidx_now_ns();
	int rc;

	memset(d, 0, sizeof(*d));
	resolve_defaults(cfg);
	d->cfg = cfg;
	d->sh.cfg = cfg;
	memset(&o, 0, sizeof(o));
	o.name = cfg->name;
	o.geo = cfg->geo;
	o.algo = cfg->algo;
	o.seed = cfg->seed;
	o.block_size = cfg->block_size;
	o.group = cfg->group;
	o.stall_ms = cfg->stall_ms;
	/* With --replay-on-start, readers keep the previous generation until the replays that
	 * rebuild this one are over (maybe_publish()), so a restart costs them no empty index. */
	o.defer_publish = cfg->replay_on_start;
	d->published = !o.defer_publish;
	if (cfg->replay_on_start)
		prev_pods(d);
	d->sh.w = kvidx_writer_open(&o);
	if (!d->sh.w) {
		rc = -errno;
		ilog(ILOG_ERROR, "cannot open index '%s': %s", cfg->name, kvidx_strerror(rc));
		return rc;
	}
	log_open_info(d->sh.w, cfg->name, &o.geo);
	d->bell_fd = kvidx_writer_doorbell(d->sh.w);
	if (d->bell_fd < 0)
		ilog(ILOG_WARN, "no commit doorbell (%s): route commits wait up to 1 ms",
		     strerror(-d->bell_fd));
	pthread_mutex_init(&d->lock, NULL);
	d->lock_ok = true;
	rc = spec_init(&d->spec, d->sh.w, &cfg->spec, cfg->block_size, cfg->geo.max_pods, &d->lock,
		       now);
	if (rc < 0) {
		ilog(ILOG_ERROR, "speculation state: %s", strerror(-rc));
		goto fail;
	}
	d->spec_ok = true;
	d->sh.spec = &d->spec;
	rc = load_init(&d->load, d->sh.w, cfg->geo.max_pods, cfg->block_size, cfg->spec.corr_map,
		       cfg->spec.load_timeout_ms);
	if (rc < 0) {
		ilog(ILOG_ERROR, "load view: %s", strerror(-rc));
		goto fail;
	}
	d->spec.load = &d->load;
	if (cfg->cluster.urls[0]) {
		d->cluster = cluster_open(&cfg->cluster, &d->spec, cfg->algo, cfg->seed,
					  cfg->block_size);
		if (!d->cluster) {
			rc = -EINVAL;
			goto fail;
		}
		d->spec.cluster = d->cluster;
	}
	rc = emap_init(&d->sh.emap, cfg->engine_map);
	if (rc < 0) {
		ilog(ILOG_ERROR, "engine-key map: %s", strerror(-rc));
		goto fail;
	}
	ing_apply_init(&d->sh.ap, d->sh.w, &d->sh.emap, cfg->algo, cfg->seed, cfg->block_size);
	d->sh.ap.remote_tier = cfg->remote_tier;
	d->sh.ap.between = at_event;
	d->sh.ap.between_arg = &d->sh;
	kvw_batch_init(&d->sh.batch);
	d->sh.zctx = zmq_ctx_new();
	if (!d->sh.zctx) {
		rc = -errno;
		ilog(ILOG_ERROR, "zmq_ctx_new: %s", zmq_strerror(errno));
		goto fail;
	}
	if (cfg->bind[0] && (rc = bind_open(d)) < 0)
		goto fail;
	for (size_t i = 0; i < cfg->npods; i++) {
		/* A pod that cannot be subscribed is logged and left out; the others run. */
		ing_pod_open(&d->sh, &cfg->pods[i], now);
	}
	ing_schedule(&d->sh, ING_AT_START, now);
	if ((rc = discover_open(&d->disc, cfg)) < 0)
		goto fail;
	/* Last: from here on writer calls take d->lock. */
	if ((rc = spec_reaper_start(&d->spec)) < 0)
		goto fail;
	return 0;
fail:
	ingestd_close(d);
	return rc;
}

void ingestd_summary(const struct ingestd *d)
{
	const struct ing_config *c = d->cfg;
	char line[8192], a[32], b[32], e[32];
	size_t n;

	n = (size_t)snprintf(line, sizeof(line),
			     "kvidx-ingestd: index '%s' capacity=%s records=%s pods-per-key=%u "
			     "max-pods=%u max-readers=%u algo=%s seed='%s' block-size=%u "
			     "engine-map=%s group=%u stall-ms=%u replay-timeout-ms=%u%s "
			     "topic-filter='%s' remote-tier=%s; bind=%s; streams=%zu:",
			     c->name, ing_fmt_count(c->geo.capacity, a, sizeof(a)),
			     ing_fmt_count(c->geo.records, b, sizeof(b)), c->geo.pods_per_key,
			     c->geo.max_pods, c->geo.max_readers, kvidx_key_algo_name(c->algo),
			     c->seed, c->block_size, ing_fmt_count(c->engine_map, e, sizeof(e)),
			     (unsigned)c->group, c->stall_ms, c->replay_timeout_ms,
			     c->replay_on_start ? " replay-on-start" : "", c->topic_filter,
			     c->remote_tier ? kvidx_tier_name(c->remote_tier) : "none",
			     c->bind[0] ? c->bind : "-", d->sh.npods);
	for (size_t i = 0; i < d->sh.npods && n < sizeof(line); i++) {
		const struct ing_pod *p = d->sh.pods[i];
		const struct ing_pod_spec *s = &p->spec;
		n += (size_t)snprintf(line + n, sizeof(line) - n, " %s%s%s%s%s%s%s%s%s%s", p->ep,
				      s->name[0] ? ",name=" : "", s->name,
				      p->rep[0] ? ",replay=" : "", p->rep,
				      s->model[0] ? ",model=" : "", s->model,
				      s->topic_set ? ",topic=" : "", s->topic,
				      s->dp_ranks > 1 ? ",rank" : "");
		if (s->dp_ranks > 1 && n < sizeof(line))
			n += (size_t)snprintf(line + n, sizeof(line) - n, "=%u", p->st.rank);
	}
	ilog(ILOG_INFO, "%s", line);
}

/* ---- bind mode ------------------------------------------------------------------------------ */

static struct ing_pod *bound_pod(struct ingestd *d, const char *name, unsigned rank)
{
	for (size_t i = 0; i < d->sh.npods; i++)
		if (d->sh.pods[i]->bind_mode && d->sh.pods[i]->st.rank == rank &&
		    !strcmp(d->sh.pods[i]->g->name, name))
			return d->sh.pods[i];
	return NULL;
}

/* One message from rank's bound socket, routed to its pod by topic. */
static void bind_message(struct ingestd *d, zmq_msg_t *f, int n, int total, unsigned rank,
			 uint64_t now)
{
	char tpod[KVIDX_POD_NAME_MAX], tmodel[ING_MODEL_MAX];
	struct ing_pod *p;
	struct kvw_seqf sf;

	/* Pods are told apart by topic: kv@POD@MODEL, or the whole topic as the pod's name
	 * (before SGLang's epoch marker, whose epoch is the publisher id). */
	size_t tlen = 0;
	bool seq_ok = total == 3 && kvw_seq_frame(zmq_msg_data(&f[1]), zmq_msg_size(&f[1]), &sf);
	tpod[0] = tmodel[0] = '\0';
	if (kvw_topic_split(zmq_msg_data(&f[0]), zmq_msg_size(&f[0]), &tlen, seq_ok ? &sf : NULL) ==
		    0 &&
	    kvw_parse_topic(zmq_msg_data(&f[0]), tlen, tpod, sizeof(tpod), tmodel,
			    sizeof(tmodel)) == 0 &&
	    !tpod[0] && tlen < sizeof(tpod) && !memchr(zmq_msg_data(&f[0]), '@', tlen)) {
		memcpy(tpod, zmq_msg_data(&f[0]), tlen);
		tpod[tlen] = '\0';
	}
	if (!tpod[0]) {
		/* No pod to count it against: the log is all there is. */
		ilog_limited(&d->bind_lim, ILOG_WARN,
			     "bind %s: message without a usable topic skipped", d->cfg->bind);
		return;
	}
	p = bound_pod(d, tpod, rank);
	if (!p) {
		char rep[ING_ENDPOINT_MAX];
		ing_bind_replay(d->cfg, tpod, rep, sizeof(rep));
		if (!(p = ing_pod_open_bound(&d->sh, tpod, tmodel, rank, rep, now)))
			return;
	}
	p->round_reads++;
	if (!seq_ok) {
		ing_pod_ctr_add(p, KV_PC_decode_errors, 1);
		ilog_limited(&p->g->tgt.lim, ILOG_WARN,
			     "pod %s: message of %d frames (seq frame %zu bytes) skipped: expected "
			     "topic, 8-byte seq (+ 16-byte publisher id), payload", p->g->name, total,
			     n > 1 ? zmq_msg_size(&f[1]) : (size_t)0);
		return;
	}
	if (tmodel[0] && strcmp(p->g->model, tmodel))
		snprintf(p->g->model, sizeof(p->g->model), "%s", tmodel);
	ing_pod_live_bound(&d->sh, p, tmodel, &sf, zmq_msg_data(&f[2]), zmq_msg_size(&f[2]), now);
}

static unsigned read_bind(struct ingestd *d, void *sock)
{
	unsigned reads, rank = 0;

	while (rank + 1 < d->nbind && d->bind_sub[rank] != sock)
		rank++;
	for (reads = 0; reads < ING_READ_BUDGET; reads++) {
		zmq_msg_t f[3];
		int n, total = ing_recv_multipart(sock, f, 3, &n);

		if (total <= 0)
			break;
		bind_message(d, f, n, total, rank, kvidx_now_ns());
		for (int i = 0; i < n; i++)
			zmq_msg_close(&f[i]);
		ing_schedule(&d->sh, ING_AT_MESSAGE, kvidx_now_ns());
	}
	return reads;
}

/* ---- the loop ------------------------------------------------------------------------------- */

static int items_reserve(struct ingestd *d, size_t n)
{
	if (n <= d->items_cap)
		return 0;
	size_t cap = d->items_cap ? d->items_cap : 16;
	while (cap < n)
		cap *= 2;
	zmq_pollitem_t *it = realloc(d->items, cap * sizeof(*it));
	if (!it)
		return -ENOMEM;
	d->items = it;
	struct ing_pod **ip = realloc(d->item_pod, cap * sizeof(*ip));
	if (!ip)
		return -ENOMEM;
	d->item_pod = ip;
	unsigned char *ik = realloc(d->item_kind, cap);
	if (!ik)
		return -ENOMEM;
	d->item_kind = ik;
	d->items_cap = cap;
	return 0;
}

static void add_item(struct ingestd *d, size_t *n, void *sock, struct ing_pod *p, int kind)
{
	d->items[*n] = (zmq_pollitem_t){ .socket = sock, .events = ZMQ_POLLIN };
	d->item_pod[*n] = p;
	d->item_kind[*n] = (unsigned char)kind;
	(*n)++;
}

/* Poll set for this round: a replaying pod's DEALER instead of its SUB (its live messages wait
 * in ZeroMQ's queue). Rebuilt every round: O(pods), and pods come and go. */
static int build_items(struct ingestd *d, size_t *n)
{
	*n = 0;
	if (items_reserve(d, 2 * d->sh.npods + 3 + d->nbind) < 0)
		return -ENOMEM;
	int fds[2] = { d->bell_fd, cluster_fd(d->cluster) }; /* cluster_step() empties the 2nd */
	for (int i = 0; i < 2; i++) {
		if (fds[i] < 0)
			continue;
		d->items[*n] = (zmq_pollitem_t){ .fd = fds[i], .events = ZMQ_POLLIN };
		d->item_pod[*n] = NULL;
		d->item_kind[*n] = ITEM_DOORBELL;
		(*n)++;
	}
	for (unsigned r = 0; r < d->nbind; r++)
		add_item(d, n, d->bind_sub[r], NULL, ITEM_BIND);
	for (size_t i = 0; i < d->sh.npods; i++) {
		struct ing_pod *p = d->sh.pods[i];
		if (p->bind_mode) { /* its live messages come on a bound socket */
			if (p->replaying && p->dealer)
				add_item(d, n, p->dealer, p, ITEM_REPLAY);
			continue;
		}
		/* Monitor first: a connect is seen before the messages that follow it. */
		if (p->mon)
			add_item(d, n, p->mon, p, ITEM_MON);
		if (p->replaying && p->dealer)
			add_item(d, n, p->dealer, p, ITEM_REPLAY);
		else if (p->sub)
			add_item(d, n, p->sub, p, ITEM_SUB);
	}
	return 0;
}


/* Publishes a deferred generation once no start-up replay is in progress (each is bounded by
 * --replay-timeout-ms). */
static void maybe_publish(struct ingestd *d)
{
	if (d->published)
		return;
	for (size_t i = 0; i < d->sh.npods; i++)
		if (d->sh.pods[i]->replaying)
			return;
	d->published = true;
	kvidx_writer_publish(d->sh.w);
	ilog(ILOG_INFO, "replay at start done: generation published, readers switch to it");
}

#define READY_EVERY_NS 100000000ull /* readiness refreshed every 100 ms */

/*
 * Tells /readyz (metrics.c) whether this writer is ready: its generation is published (with
 * --replay-on-start, the start-up replays are over) and every connect-mode stream's SUB is
 * connected (--ready-streams any: at least one, if there are any). Bind-mode pods connect to us, so there is nothing to wait for; a gap replay on a
 * connected stream does not make the writer unready (it is short and bounded).
 */
static void report_ready(struct ingestd *d, uint64_t now)
{
	const struct ing_pod *first = NULL;
	size_t down = 0, streams = 0;
	bool warming = false;
	char why[160];

	if (d->ready_ns && now - d->ready_ns < READY_EVERY_NS)
		return;
	d->ready_ns = now;
	for (size_t i = 0; i < d->sh.npods; i++) {
		const struct ing_pod *p = d->sh.pods[i];
		if (p->bind_mode)
			continue;
		streams++;
		if (!p->connected && !down++)
			first = p;
	}
	bool streams_ok = d->cfg->ready_any ? down < streams || !streams : !down;
	if (!d->published)
		snprintf(why, sizeof(why), "replay at start in progress, generation not published");
	else if (!streams_ok)
		snprintf(why, sizeof(why), "%zu of %zu streams not connected (first: %.100s)", down,
			 streams, first->ep);
	else if ((warming = cluster_warming(d->cluster, now)))
		snprintf(why, sizeof(why), "cluster warm start in progress (peers' predictions)");
	metrics_set_ready(d->published && streams_ok && !warming, why);
}

/* ---- the schedule ---------------------------------------------------------------------------- */

/* Route commits from the routers' rings become predictions (spec_drain); true if the budget
 * ran out (more may be waiting). */
static bool drain(struct ing_shared *sh)
{
	return sh->spec &&
	       spec_drain(sh->spec, ING_DRAIN_BUDGET, kvidx_now_ns()) >= ING_DRAIN_BUDGET;
}

/* kvidx_writer_tick() (epochs, reclamation, heartbeat) at most once a millisecond. */
static void tick(struct ing_shared *sh, uint64_t now, bool always)
{
	if (always || now - sh->last_tick_ns >= NS_PER_MS) {
		kvidx_writer_tick(sh->w, now);
		sh->last_tick_ns = now;
	}
}

/* The end of a round: commits, the peer link, the tick, then the periodic work. */
static bool end_of_round(struct ingestd *d)
{
	bool more = drain(&d->sh);

	more |= cluster_step(d->cluster, kvidx_now_ns()); /* peers' commits; ours out */
	uint64_t now = kvidx_now_ns();
	tick(&d->sh, now, false);
	for (size_t i = 0; i < d->sh.npods; i++)
		ing_pod_housekeeping(&d->sh, d->sh.pods[i], now);
	spec_tick(&d->spec, now);
	load_tick(&d->load, now);
	maybe_publish(d);
	report_ready(d, now);
	return more;
}

/*
 * When route commits become predictions, when the writer ticks and when the reaper gets the
 * writer mutex: a commit waits at most one message (or one event, inside a batch) of the
 * apply path before it is drained, so a prediction is in the table before the events after
 * it are applied and can be confirmed by them; the writer ticks after every message (at most
 * once a millisecond) and at each round's end; the reaper works while the loop waits in
 * zmq_poll (spec_wait_begin/end) and, when its wake-up is due, gets one chunk after each
 * socket's budget (spec_reaper_turn), so a busy loop cannot starve it.
 */
bool ing_schedule(struct ing_shared *sh, enum ing_point at, uint64_t now)
{
	struct ingestd *d = (struct ingestd *)((char *)sh - offsetof(struct ingestd, sh));

	switch (at) {
	case ING_AT_START:
		tick(sh, now, true);
		return false;
	case ING_BEFORE_POLL:
		spec_wait_begin(&d->spec, kvidx_now_ns());
		return false;
	case ING_AFTER_POLL:
		spec_wait_end(&d->spec);
		return false;
	case ING_AT_WAKE:
	case ING_AT_EVENT:
		return drain(sh);
	case ING_AT_MESSAGE:
		tick(sh, now, false);
		return drain(sh);
	case ING_AT_REPLAY:
		tick(sh, now, false); /* replayed history, not commits' cue: no drain */
		return false;
	case ING_AT_SOCKET:
		spec_reaper_turn(&d->spec, kvidx_now_ns());
		return false;
	case ING_AT_ROUND:
		return end_of_round(d);
	}
	return false;
}

int ingestd_run(struct ingestd *d, volatile sig_atomic_t *stop, volatile sig_atomic_t *hup)
{
	long timeout = 1;
	int ret = 0;

	pthread_mutex_lock(&d->lock);
	while (!*stop) {
		size_t n;
		bool busy = false;

		if (*hup) {
			*hup = 0;
			ingestd_reload(d, "SIGHUP");
		}
		if (discover_poll(&d->disc, &d->sh, kvidx_now_ns())) {
			discover_count_reload(&d->disc);
			ingestd_reload(d, "config watch");
		}
		if (build_items(d, &n) < 0) {
			ilog(ILOG_ERROR, "out of memory building the poll set");
			ret = -ENOMEM;
			break;
		}
		/* Before a sleeping poll, announce it: a router committing meanwhile rings the
		 * doorbell (in the poll set) instead of waiting for the timeout. */
		bool idle = timeout && d->bell_fd >= 0;
		if (idle && kvidx_writer_idle(d->sh.w, true))
			timeout = 0;
		ing_schedule(&d->sh, ING_BEFORE_POLL, 0); /* releases the writer mutex */
		int rc = zmq_poll(d->items, (int)n, timeout);
		int e = errno;
		ing_schedule(&d->sh, ING_AFTER_POLL, 0); /* holds it again */
		if (idle)
			kvidx_writer_idle(d->sh.w, false);
		if (rc < 0) {
			if (e == EINTR)
				continue;
			ilog(ILOG_ERROR, "zmq_poll: %s", zmq_strerror(e));
			ret = -e;
			break;
		}
		busy |= ing_schedule(&d->sh, ING_AT_WAKE, 0);
		for (size_t i = 0; rc > 0 && i < n; i++) {
			struct ing_pod *p = d->item_pod[i];
			if (!(d->items[i].revents & ZMQ_POLLIN))
				continue;
			switch (d->item_kind[i]) {
			case ITEM_BIND:
				if (read_bind(d, d->items[i].socket) >= ING_READ_BUDGET)
					busy = true;
				break;
			case ITEM_SUB:
				if (!p->replaying && ing_pod_read_sub(&d->sh, p) >= ING_READ_BUDGET)
					busy = true;
				break;
			case ITEM_REPLAY:
				if (p->replaying)
					ing_pod_read_replay(&d->sh, p);
				if (p->bind_mode && !p->replaying)
					ing_pod_bound_drain(&d->sh, p, kvidx_now_ns());
				break;
			case ITEM_MON:
				ing_pod_read_monitor(&d->sh, p);
				break;
			case ITEM_DOORBELL:
				break; /* emptied by kvidx_writer_idle(); the schedule drains */
			}
			ing_schedule(&d->sh, ING_AT_SOCKET, 0);
		}
		busy |= ing_schedule(&d->sh, ING_AT_ROUND, 0);
		/* A socket left with messages after its budget: poll again at once. */
		timeout = busy ? 0 : 1;
	}
	pthread_mutex_unlock(&d->lock);
	return ret;
}

/* ---- SIGHUP --------------------------------------------------------------------------------- */

static bool is_from_file(const struct ing_pod *p)
{
	return p->spec.from_file;
}

int ingestd_reload(struct ingestd *d, const char *why)
{
	struct ing_config nc;
	struct ilog_limit lim = { 0 };
	char err[512];
	size_t added = 0, removed = 0;
	int rc;

	if (!d->cfg->config_path[0]) {
		ilog(ILOG_WARN, "%s: no --config file, nothing to reload", why);
		return 0;
	}
	ing_config_init(&nc);
	rc = ing_config_load_file(&nc, d->cfg->config_path, err, sizeof(err));
	if (rc < 0) {
		ilog(ILOG_ERROR, "%s: %s; pods unchanged", why, err);
		ing_config_free(&nc);
		return rc;
	}
	/* The file's pods only: command-line and discovered pods are someone else's. */
	ing_pods_reconcile(&d->sh, nc.pods, nc.npods, is_from_file, why, &lim, &added, &removed,
			   kvidx_now_ns());
	ilog(ILOG_INFO, "%s: %zu pods added, %zu removed, %zu subscribed", why, added, removed,
	     d->sh.npods);
	ing_config_free(&nc);
	return 0;
}

void ingestd_close(struct ingestd *d)
{
	/* The reaper first: after it, this thread is the only one making writer calls. */
	if (d->spec_ok)
		spec_reaper_stop(&d->spec);
	cluster_close(d->cluster); /* its threads never touch the index */
	d->cluster = NULL;
	d->spec.cluster = NULL;
	discover_close(&d->disc);
	while (d->sh.npods)
		ing_pod_close(&d->sh, d->sh.pods[d->sh.npods - 1], false);
	free(d->sh.pods);
	free(d->sh.prev);
	d->sh.pods = NULL;
	for (unsigned r = 0; r < d->nbind; r++) {
		int zero = 0;
		zmq_setsockopt(d->bind_sub[r], ZMQ_LINGER, &zero, sizeof(zero));
		zmq_close(d->bind_sub[r]);
		d->bind_sub[r] = NULL;
	}
	d->nbind = 0;
	if (d->sh.zctx) {
		zmq_ctx_term(d->sh.zctx);
		d->sh.zctx = NULL;
	}
	kvw_batch_free(&d->sh.batch);
	ing_apply_free(&d->sh.ap);
	emap_free(&d->sh.emap);
	d->spec.load = NULL;
	load_free(&d->load);
	if (d->spec_ok) {
		spec_free(&d->spec);
		d->spec_ok = false;
		d->sh.spec = NULL;
	}
	if (d->sh.w) {
		kvidx_writer_close(d->sh.w, false);
		d->sh.w = NULL;
	}
	if (d->lock_ok) {
		pthread_mutex_destroy(&d->lock);
		d->lock_ok = false;
	}
	free(d->items);
	free(d->item_pod);
	free(d->item_kind);
	d->items = NULL;
	d->item_pod = NULL;
	d->item_kind = NULL;
	d->items_cap = 0;
}
