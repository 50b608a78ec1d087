/*
 * spec.c — the writer half of speculative entries in kvidx-ingestd: route commits, outcome
 * reports, confirmations, the reaper thread and its late window, the TTL policy and
 * freshness gating (see spec.h for what each does and for the threading rules).
 *
 * Counting, per pod (lib/telemetry.h KV_POD_CTRS), per record unless said otherwise:
 *
 *   speculations          new records kvidx_speculate() added (extensions not counted)
 *   confirmed_in_time     a BlockStored found the record speculative and unexpired
 *   late_confirmations    a BlockStored found it expired: still in the table (the reaper had
 *                         not come by), or removed by the reaper less than --late-window ago
 *   early_expiries        = late confirmations: each is an expiry the TTL made too early
 *   stale_expiries        removed by the reaper and not confirmed within --late-window (or
 *                         pushed out of a full late map before its window ended)
 *   routes_*, outcomes,   per route commit / outcome report
 *   false_warm_routes, wasted_prefill_tokens
 *   dropped_clear, dropped_removed, dropped_evicted
 *                         speculative records that left the table before they expired: the
 *                         pod was cleared, a BlockRemoved named them, or an eviction made room
 *                         (an expired one evicted counts as an expiry, not a drop)
 *
 * Per route (docs/ttl.md's p is a share of routed requests): a route's new predictions on a pod
 * share its created-at, so (created_ns, pod) names them; the route map (s->routes, as big as
 * --corr-map) counts how many are still in the table (live) and in the late window (late),
 * and decides the route once:
 *
 *   routes_in_time        its first confirmation came before its expiry
 *   routes_early_expiries its first confirmation came after its expiry, within the late
 *   routes_late_confirmations  window (both counted: the same event seen from each side)
 *   routes_stale_expiries none of its records was confirmed and at least one went stale
 *   routes_dropped_*      none was confirmed and none went stale: dropped by that cause (the
 *                         first drop's)
 *   spec_routes           routes that added predictions (what the above add up to, once
 *                         decided); routes_untracked: routes the full map forgot undecided
 *
 * Routes with the same created-at on one pod (a commit stamped in the future takes the
 * drain's time) share an entry and count as one. The latency sample of a route is taken at
 * its first confirmation (in the pod's histograms, its prompt-length class's, and its router
 * worker's); each route also counts for the registry slot that committed it.
 *
 * Latency samples (microseconds, cumulative and recent histograms) are taken per route, not
 * per block: a route's blocks share their created-at (the commit time), so the first
 * confirmation of a route records the sample and the pod's last few created-at values
 * suppress the rest. A route of 100 blocks thus weighs as much as a route of one, as the
 * seed's route-to-event latency does.
 *
 * Concurrency (spec.h "Threads and the writer mutex", rules 1-4): everything here runs under
 * the writer mutex, on the ingest thread, or on the reaper thread inside a window the ingest
 * thread opened (its wait on the network, or a turn its schedule gives). A chunk is at most
 * SPEC_REAP_CHUNK slots of kvidx_expire (plus, in a wake-up's first chunk, at most
 * LATE_AGE_MAX late entries), so the ingest thread waits at most that long for the mutex.
 *
 * The late window of an expired prediction runs from its own expires-at, whether the reaper
 * removed it or kvidx_speculate() replaced it with a new prediction (both report it here).
 *
 * What the writer did to records reaches this file through one observer (struct
 * kvidx_observer, set in spec_init()), called after each change is published: confirmations
 * (spec_confirm), expiries (on_expire), the keys of each BlockStored (spec_after_store) and
 * the removal of a pod (spec_pod_detach).
 */
#include "spec.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cluster.h"
#include "inspect.h"
#include "load.h"
#include "log.h"
#include "telemetry.h"
#include "ttl.h"

#define NS_PER_US 1000ull
#define NS_PER_MS 1000000ull
#define NS_PER_S 1000000000ull
#define PRED_FLAG (1ull << 63) /* corr map payload a: decided on a prediction */
#define LATE_AGE_MAX 65536     /* late entries aged per reaper wake-up (bounds the hold) */

/* Route map entries: key created_ns, sub pod, aux the committing registry slot (-1: none),
 * a = live records | late records << 32, b = the flags below | prompt class << 8. */
#define RT_DECIDED 0x1ull
#define RT_STALE 0x2ull
#define RT_SAMPLED 0x4ull
#define RT_CAUSE_SHIFT 4 /* 2 bits: 0 none, 1 clear, 2 removed, 3 evicted */
#define RT_CLASS(b) ((unsigned)(((b) >> 8) & 3))
#define RT_LIVE(a) ((uint32_t)(a))
#define RT_LATE(a) ((uint32_t)((a) >> 32))
enum { CAUSE_NONE = 0, CAUSE_CLEAR = 1, CAUSE_REMOVED = 2, CAUSE_EVICTED = 3 };

/* ---- the bounded FIFO map -------------------------------------------------------------- */

/* The 32 hash bits of (key, sub) the fifomap's index keeps. */
static uint32_t fhash(uint64_t key, int32_t sub)
{
	return fm_hash(key, (uint32_t)sub);
}

int spec_fifo_init(struct spec_fifo *f, uint64_t cap)
{
	memset(f, 0, sizeof(*f));
	return fm_init(&f->fm, cap < 16 ? 16 : cap, sizeof(struct spec_fent));
}

void spec_fifo_free(struct spec_fifo *f)
{
	fm_free(&f->fm);
	memset(f, 0, sizeof(*f));
}

struct spec_fent *spec_fifo_find(struct spec_fifo *f, uint64_t key, int32_t sub)
{
	uint32_t h = fhash(key, sub);

	if (!f->live)
		return NULL;
	for (uint64_t pos = FM_NONE, no; (no = fm_scan(&f->fm, h, &pos)) != FM_NONE;) {
		struct spec_fent *e = fm_slot(&f->fm, no);
		if (e->key == key && e->sub == sub)
			return e;
	}
	return NULL;
}

void spec_fifo_del(struct spec_fifo *f, struct spec_fent *e)
{
	fm_unindex(&f->fm, fhash(e->key, e->sub), fm_slotno(&f->fm, e));
	e->live = 0;
	f->live--;
}

bool spec_fifo_push(struct spec_fifo *f, uint64_t key, int32_t sub, int32_t aux, uint64_t a,
		    uint64_t b, struct spec_fent *evicted)
{
	struct spec_fent *e = fm_slot(&f->fm, f->fm.next);
	bool ev = false;

	if (e->live) { /* the ring is full and its oldest entry still live */
		if (evicted)
			*evicted = *e;
		ev = true;
		spec_fifo_del(f, e);
	}
	*e = (struct spec_fent){ .key = key, .sub = sub, .aux = aux, .a = a, .b = b, .live = 1 };
	f->live++;
	fm_push(&f->fm, fhash(key, sub));
	return ev;
}

struct spec_fent *spec_fifo_next(struct spec_fifo *f, uint64_t *pos)
{
	uint64_t p = *pos < fm_oldest(&f->fm) ? fm_oldest(&f->fm) : *pos;

	for (uint64_t no = fm_slot_of(&f->fm, p); p < f->fm.pushes;
	     p++, no = fm_slot_after(&f->fm, no)) {
		struct spec_fent *e = fm_slot(&f->fm, no);
		if (e->live) {
			*pos = p + 1;
			return e;
		}
	}
	*pos = p;
	return NULL;
}

struct spec_fent *spec_fifo_oldest(struct spec_fifo *f)
{
	uint64_t p = f->head;
	struct spec_fent *e = f->live ? spec_fifo_next(f, &p) : NULL;

	/* Every insertion before the oldest live one is dead: later calls start there. */
	f->head = e ? p - 1 : p;
	return e;
}

void spec_fifo_purge(struct spec_fifo *f, int32_t pod, bool by_aux)
{
	struct spec_fent *e;

	for (uint64_t p = f->head; f->live && (e = spec_fifo_next(f, &p));)
		if ((by_aux ? e->aux : e->sub) == pod)
			spec_fifo_del(f, e);
}

/* ---- helpers --------------------------------------------------------------------------- */

static struct spec_pod *pod_of(struct ing_spec *s, int pod)
{
	if (!s || pod < 0 || (uint32_t)pod >= s->max_pods || !s->pods[pod].active)
		return NULL;
	return &s->pods[pod];
}

static void ctr_add(struct spec_pod *sp, enum kv_pod_ctr c, uint64_t v)
{
	kv_tm_add(sp->ctr, c, v);
}

static void ctr_set(struct spec_pod *sp, enum kv_pod_ctr c, uint64_t v)
{
	kv_tm_set(sp->ctr, c, v);
}

static uint32_t clamp_ttl(uint32_t ms)
{
	if (ms < 1)
		return 1;
	return ms > KVIDX_MAX_TTL_MS ? KVIDX_MAX_TTL_MS : ms;
}

/* The TTL a newly registered pod starts with. */
static uint32_t initial_ttl(const struct ing_spec *s)
{
	uint32_t t = s->ttl_static_ms;

	if (s->cfg->policy == ING_TTL_ADAPTIVE) {
		if (t < s->ttl_floor_ms)
			t = s->ttl_floor_ms;
		if (t > s->ttl_cap_ms)
			t = s->ttl_cap_ms;
	}
	return t;
}

/* One latency sample: the pod's histograms, its class's (cls < 0: unknown) and its router's. */
static void add_sample(struct ing_spec *s, struct spec_pod *sp, int cls, int slot,
		       uint64_t created_ns, uint64_t now)
{
	uint64_t us = now > created_ns ? (now - created_ns) / NS_PER_US : 0;
	struct kv_tm_router rt = kv_tm_router(s->w, slot);

	kv_tm_hist_add(sp->hist_cum, us);
	kv_tm_hist_add(sp->hist_recent, us);
	if (cls >= 0)
		kv_tm_hist_add(sp->hist_class[cls], us);
	kv_tm_hist_add(kv_tm_router_hist(rt), us);
	kv_tm_router_add(rt, KV_RT_confirmations, 1);
}

/* One latency sample per route, for confirmations of routes the route map does not know:
 * skipped when this route (its created-at) was sampled. */
static void record_latency(struct ing_spec *s, struct spec_pod *sp, uint64_t created_ns,
			   uint64_t now)
{
	for (unsigned i = 0; i < 8; i++)
		if (sp->recent_created[i] == created_ns)
			return;
	sp->recent_created[sp->rc_next++ & 7] = created_ns;
	add_sample(s, sp, -1, -1, created_ns, now);
}

/* The slot's statistics start afresh when another process owns it (the pid the registry
 * names is not the one recorded at the last commit): metrics label them by owner (prom.c). */
static void router_owner(struct kv_tm_router rt, int32_t pid)
{
	uint64_t was = kv_tm_router_get(rt, KV_RT_pid);

	if (!was || was == (uint64_t)(uint32_t)pid)
		return;
	kv_tm_router_reset(rt);
	kv_tm_router_set(rt, KV_RT_pid, (uint64_t)(uint32_t)pid);
}

static void router_add(struct ing_spec *s, int slot, enum kv_router_ctr c, uint64_t v)
{
	kv_tm_router_add(kv_tm_router(s->w, slot), c, v);
}

/* ---- per-route accounting ------------------------------------------------------------------ */

static struct spec_fent *route_of(struct ing_spec *s, uint64_t created_ns, int pod)
{
	return spec_fifo_find(&s->routes, created_ns, pod);
}

/* Decides route e on its first confirmation (in time or late), with its latency sample. */
static void route_confirmed(struct ing_spec *s, struct spec_pod *sp, struct spec_fent *e,
			    bool in_time, uint64_t now)
{
	if (!(e->b & RT_SAMPLED)) {
		add_sample(s, sp, (int)RT_CLASS(e->b), e->aux, e->key, now);
		e->b |= RT_SAMPLED;
	}
	if (e->b & RT_DECIDED)
		return;
	e->b |= RT_DECIDED;
	if (in_time) {
		ctr_add(sp, KV_PC_routes_in_time, 1);
		router_add(s, e->aux, KV_RT_routes_in_time, 1);
	} else {
		ctr_add(sp, KV_PC_routes_early_expiries, 1);
		ctr_add(sp, KV_PC_routes_late_confirmations, 1);
		router_add(s, e->aux, KV_RT_routes_early_expiries, 1);
	}
}

/* Route e has no record left in the table or the late window: decided now if it was not. */
static void route_settle(struct ing_spec *s, struct spec_pod *sp, struct spec_fent *e)
{
	static const enum kv_pod_ctr by_cause[] = { [CAUSE_CLEAR] = KV_PC_routes_dropped_clear,
						    [CAUSE_REMOVED] = KV_PC_routes_dropped_removed,
						    [CAUSE_EVICTED] = KV_PC_routes_dropped_evicted };
	unsigned cause = (unsigned)((e->b >> RT_CAUSE_SHIFT) & 3);

	if (RT_LIVE(e->a) || RT_LATE(e->a))
		return;
	if (!(e->b & RT_DECIDED)) {
		if (e->b & RT_STALE) {
			ctr_add(sp, KV_PC_routes_stale_expiries, 1);
			router_add(s, e->aux, KV_RT_routes_stale_expiries, 1);
		} else if (cause) {
			ctr_add(sp, by_cause[cause], 1);
			router_add(s, e->aux, KV_RT_routes_dropped, 1);
		}
	}
	spec_fifo_del(&s->routes, e);
}

/* Moves one record of route e: d_live and d_late added to its counts (saturating at 0). */
static void route_move(struct spec_fent *e, int d_live, int d_late)
{
	uint64_t live = RT_LIVE(e->a), late = RT_LATE(e->a);

	live = d_live < 0 && live < (uint64_t)-d_live ? 0 : live + (uint64_t)(int64_t)d_live;
	late = d_late < 0 && late < (uint64_t)-d_late ? 0 : late + (uint64_t)(int64_t)d_late;
	e->a = (live & 0xffffffffull) | (late << 32);
}

static void route_drop(struct spec_fent *e, unsigned cause)
{
	if (!((e->b >> RT_CAUSE_SHIFT) & 3))
		e->b |= (uint64_t)cause << RT_CAUSE_SHIFT;
}

/* A new route's n predictions on pod, created at created_ns, committed from slot. */
static void route_track(struct ing_spec *s, struct spec_pod *sp, int pod, uint64_t created_ns,
			uint32_t n, int slot, unsigned cls)
{
	struct spec_fent *e = route_of(s, created_ns, pod), ev;

	if (e) {
		route_move(e, (int)n, 0); /* one entry per (created-at, pod), see above */
		return;
	}
	ctr_add(sp, KV_PC_spec_routes, 1);
	router_add(s, slot, KV_RT_spec_routes, 1);
	if (spec_fifo_push(&s->routes, created_ns, pod, slot, n, (uint64_t)cls << 8, &ev) &&
	    !(ev.b & RT_DECIDED)) {
		struct spec_pod *op = pod_of(s, ev.sub);
		if (op)
			ctr_add(op, KV_PC_routes_untracked, 1);
	}
}

/* Applies the pause state sp should have now: stream problems first, then the pipeline. */
static void apply_pause(struct ing_spec *s, struct spec_pod *sp, int pod, uint64_t now)
{
	uint64_t limit = (uint64_t)s->cfg->stale_limit_ms * NS_PER_MS;
	bool broken = limit && sp->pending_ns && now > sp->pending_ns &&
		      now - sp->pending_ns > limit;
	enum spec_pause want = sp->stream ? SPEC_STREAM : broken ? SPEC_PIPELINE : SPEC_FRESH;

	/* Routed but silent, whatever else pauses the pod (a disconnected pod can be both). */
	ctr_set(sp, KV_PC_routed_silent, broken);
	if (want == sp->paused)
		return;
	if (kvidx_pod_set_spec_paused(s->w, pod, want != SPEC_FRESH) < 0)
		return;
	if (want == SPEC_PIPELINE)
		ilog(ILOG_WARN,
		     "pod %s: routed but silent: routes were sent to it %.1f s ago and no batch or "
		     "heartbeat came since: event pipeline broken, speculation paused "
		     "(spec_paused=2, routed_silent=1) until it is heard again",
		     sp->label, (double)(now - sp->pending_ns) / 1e9);
	else if (want == SPEC_STREAM) /* pods.c logs the replay or disconnect itself */
		ilog(ILOG_DEBUG, "pod %s: speculation paused while its stream replays or is "
		     "disconnected (spec_paused=1)", sp->label);
	else if (sp->paused == SPEC_PIPELINE)
		ilog(ILOG_INFO, "pod %s: events flow again, speculation resumed", sp->label);
	else
		ilog(ILOG_DEBUG, "pod %s: stream fresh, speculation resumed", sp->label);
	sp->paused = want;
	ctr_set(sp, KV_PC_spec_paused, (uint64_t)want);
}

/* ---- setup ----------------------------------------------------------------------------- */

/* The writer's observer (struct kvidx_observer), defined with their subjects below. */
static void spec_after_store(void *arg, int pod, const uint64_t *keys, size_t n, uint64_t now);
static void spec_confirm(void *arg, uint64_t key, int pod, uint64_t created_ns,
			 uint64_t expires_ns, uint64_t now);
static void on_expire(void *arg, uint64_t key, int pod, uint64_t created_ns,
		      uint64_t expires_ns);
static void on_drop(void *arg, enum kvidx_drop cause, uint64_t key, int pod, bool speculative,
		    uint64_t t_ns, uint64_t expires_ns);
static void spec_pod_detach(void *arg, int pod, bool removed);

int spec_init(struct ing_spec *s, struct kvidx *w, const struct ing_spec_config *cfg,
	      uint32_t block_size, uint32_t max_pods, pthread_mutex_t *lock,
	      uint64_t now)
{
	int rc;

	memset(s, 0, sizeof(*s));
	s->w = w;
	s->cfg = cfg;
	s->lock = lock;
	s->block_size = block_size ? block_size : 16;
	s->max_pods = max_pods;
	s->pods = calloc(max_pods ? max_pods : 1, sizeof(*s->pods));
	if (!s->pods)
		return -ENOMEM;
	if ((rc = spec_fifo_init(&s->corr, cfg->corr_map)) < 0 ||
	    (rc = spec_fifo_init(&s->late, cfg->late_map)) < 0 ||
	    (rc = spec_fifo_init(&s->routes, cfg->corr_map)) < 0) {
		spec_free(s);
		return rc;
	}
	s->ttl_static_ms = clamp_ttl(cfg->ttl_ms);
	s->ttl_floor_ms = clamp_ttl(cfg->floor_ms);
	s->ttl_cap_ms = clamp_ttl(cfg->cap_ms);
	if (cfg->ttl_ms > KVIDX_MAX_TTL_MS ||
	    (cfg->policy == ING_TTL_ADAPTIVE &&
	     (cfg->cap_ms > KVIDX_MAX_TTL_MS || cfg->floor_ms > KVIDX_MAX_TTL_MS)))
		ilog(ILOG_WARN, "TTLs above %ums are clamped to %ums (the record format's limit)",
		     KVIDX_MAX_TTL_MS, KVIDX_MAX_TTL_MS);
	uint64_t largest = cfg->policy == ING_TTL_ADAPTIVE ? s->ttl_cap_ms : s->ttl_static_ms;
	s->late_window_ns = cfg->late_window_ms ?
				    (uint64_t)cfg->late_window_ms * NS_PER_MS :
				    (5 * largest > 10000 ? 5 * largest : 10000) * NS_PER_MS;
	uint64_t slots = kv_writer_slots(w); /* what a full pass of kvidx_expire() visits */
	uint64_t wakeups = cfg->reap_pass_ms / (cfg->reap_interval_ms ? cfg->reap_interval_ms : 1);
	if (wakeups < 1)
		wakeups = 1;
	s->reap_budget = (slots + wakeups - 1) / wakeups;
	s->next_decay_ns = now + KV_HIST_DECAY_S * NS_PER_S;
	pthread_cond_init(&s->rp_go, NULL);
	pthread_cond_init(&s->rp_done, NULL);
	char backlog[96];
	/* J's backlog as --ttl-backlog gave it: a duration, or the measured event lag (with the
	 * given duration only until enough lag samples exist). */
	if (cfg->backlog_measured)
		snprintf(backlog, sizeof(backlog), "measured event lag p%g (%ums until %llu lag "
			 "samples)", cfg->percentile * 100, cfg->backlog_ms,
			 (unsigned long long)cfg->min_samples);
	else
		snprintf(backlog, sizeof(backlog), "%ums", cfg->backlog_ms);
	if (cfg->policy == ING_TTL_ADAPTIVE)
		ilog(ILOG_INFO,
		     "speculation: ttl-policy=adaptive start=%ums T=clamp(p%g + %s + %ums, %ums, "
		     "%ums) after %llu samples, every %ums, step <= %g%%; late-window=%llums "
		     "stale-limit=%ums; reaper: %llu slots every %ums (full pass ~%ums)",
		     initial_ttl(s), cfg->percentile * 100, backlog, cfg->slack_ms,
		     s->ttl_floor_ms, s->ttl_cap_ms, (unsigned long long)cfg->min_samples,
		     cfg->interval_ms, cfg->max_step * 100,
		     (unsigned long long)(s->late_window_ns / NS_PER_MS), cfg->stale_limit_ms,
		     (unsigned long long)s->reap_budget, cfg->reap_interval_ms, cfg->reap_pass_ms);
	else
		ilog(ILOG_INFO,
		     "speculation: ttl-policy=static ttl=%ums; late-window=%llums stale-limit=%ums; "
		     "reaper: %llu slots every %ums (full pass ~%ums)",
		     s->ttl_static_ms, (unsigned long long)(s->late_window_ns / NS_PER_MS),
		     cfg->stale_limit_ms, (unsigned long long)s->reap_budget,
		     cfg->reap_interval_ms, cfg->reap_pass_ms);
	if (cfg->stale_limit_ms && cfg->stale_limit_ms < largest)
		ilog(ILOG_WARN,
		     "stale-limit %ums is below the largest TTL %llums: a slow but healthy event "
		     "path may pause speculation",
		     cfg->stale_limit_ms, (unsigned long long)largest);
	struct kvidx_observer obs = { .ctx = s, .on_store = spec_after_store,
				      .on_confirm = spec_confirm, .on_expire = on_expire,
				      .on_drop = on_drop, .on_clear = spec_pod_detach };
	kvidx_writer_set_observer(w, &obs);
	return 0;
}

void spec_free(struct ing_spec *s)
{
	if (s->late_evicted)
		ilog(ILOG_INFO, "late map: %llu expired predictions were counted stale before "
		     "their window ended (--late-map too small)",
		     (unsigned long long)s->late_evicted);
	if (s->w)
		kvidx_writer_set_observer(s->w, NULL);
	spec_fifo_free(&s->corr);
	spec_fifo_free(&s->late);
	spec_fifo_free(&s->routes);
	free(s->pods);
	s->pods = NULL;
	if (s->cfg) {
		pthread_cond_destroy(&s->rp_go);
		pthread_cond_destroy(&s->rp_done);
		s->cfg = NULL;
	}
}

void spec_pod_attach(struct ing_spec *s, int pod, const char *name, uint64_t now)
{
	struct spec_pod *sp;

	if (!s || pod < 0 || (uint32_t)pod >= s->max_pods)
		return;
	sp = &s->pods[pod];
	memset(sp, 0, sizeof(*sp));
	sp->active = true;
	snprintf(sp->label, sizeof(sp->label), "%s", name);
	sp->ctr = kv_tm_pod(s->w, pod);
	sp->hist_cum = kv_tm_hist(s->w, pod, KV_HIST_CONFIRM);
	sp->hist_recent = kv_tm_hist(s->w, pod, KV_HIST_CONFIRM_RECENT);
	sp->hist_lag = kv_tm_hist(s->w, pod, KV_HIST_LAG_RECENT);
	bool ok = kv_tm_pod_ok(sp->ctr) && kv_tm_hist_ok(sp->hist_cum) &&
		  kv_tm_hist_ok(sp->hist_recent) && kv_tm_hist_ok(sp->hist_lag);
	for (unsigned c = 0; c < KV_PROMPT_CLASSES; c++)
		ok &= kv_tm_hist_ok(sp->hist_class[c] = kv_tm_hist(s->w, pod, KV_HIST_CLASS(c)));
	if (!ok) {
		sp->active = false;
		return;
	}
	sp->ttl_ms = initial_ttl(s);
	sp->next_eval_ns = now + (uint64_t)s->cfg->interval_ms * NS_PER_MS;
	ctr_set(sp, KV_PC_ttl_ms, sp->ttl_ms);
	/* A fresh index pod has no flags; one kept across a takeover may: start unpaused, the
	 * caller's stream gating follows. */
	kvidx_pod_set_spec_paused(s->w, pod, false);
	ctr_set(sp, KV_PC_spec_paused, SPEC_FRESH);
}

/*
 * Observer: every record of pod was dropped at once. kvidx_clear_pod() (removed false): its
 * speculative records still in the table are dropped (dropped_clear) and so are the routes
 * with nothing else left; late-window entries stay (those records had left the table). The
 * pod left the index (kvidx_pod_remove, removed true): its pending outcomes, late-window
 * entries and routes are forgotten uncounted.
 */
static void spec_pod_detach(void *arg, int pod, bool removed)
{
	struct ing_spec *s = arg;
	struct spec_pod *sp = pod_of(s, pod);

	if (!sp)
		return;
	if (removed) {
		if (s->load)
			load_pod_forget(s->load, pod);
		spec_fifo_purge(&s->corr, pod, true);
		spec_fifo_purge(&s->late, pod, false);
		spec_fifo_purge(&s->routes, pod, false);
		sp->active = false;
		return;
	}
	ctr_add(sp, KV_PC_dropped_clear, sp->spec_live);
	sp->spec_live = 0;
	struct spec_fent *e;
	for (uint64_t p = s->routes.head; (e = spec_fifo_next(&s->routes, &p));) {
		if (e->sub != pod || !RT_LIVE(e->a))
			continue;
		route_drop(e, CAUSE_CLEAR);
		e->a &= ~0xffffffffull; /* no live records left */
		route_settle(s, sp, e);
	}
}

/* ---- route commits and outcomes ---------------------------------------------------------- */

/* Predicts keys on pod for its TTL from created_ns. expects: the route leaves blocks for the
 * pod to store, so an event should follow (pipeline-broken gating). */
static void predict(struct ing_spec *s, struct spec_pod *sp, int pod, const uint64_t *keys,
		    size_t n, uint64_t created_ns, bool expects, int slot)
{
	if (expects && !sp->pending_ns)
		sp->pending_ns = s->drain_now;
	ctr_set(sp, KV_PC_last_route_ns, created_ns);
	if (!n)
		return;
	int rc = kvidx_speculate(s->w, pod, keys, n, created_ns, sp->ttl_ms);
	if (rc > 0) {
		ctr_add(sp, KV_PC_speculations, (uint64_t)rc);
		sp->spec_live += (uint64_t)rc;
		route_track(s, sp, pod, created_ns, (uint32_t)rc, slot,
			    kv_prompt_class((uint64_t)n * s->block_size));
	} else if (rc < 0)
		ilog_limited(&s->lim, ILOG_WARN, "pod %s: speculation failed: %s", sp->label,
			     kvidx_strerror(rc));
}

/*
 * The correlation id as this writer keys it (the route map, the load view, the cluster link):
 * the router's corr_id mixed with its origin, the registry slot whose ring brought it and the
 * time that slot's owner claimed it (kv_writer_drain_origin()), so two router processes that
 * both number their requests from 1 never match each other's routes. The mix is a bijection
 * of corr_id for one origin; the route map also keys on the slot itself, so one process can
 * never reach another's entry there. *slot gets the slot (-1 outside a drain).
 */
static uint64_t origin_corr(const struct ing_spec *s, uint64_t corr, int *slot)
{
	uint64_t claimed, h;
	int sl = kv_writer_drain_origin(s->w, &claimed);

	*slot = sl;
	/* splitmix64's finaliser over (slot, claim time) */
	h = claimed + 0x9e3779b97f4a7c15ull * (uint64_t)(uint32_t)(sl + 1);
	h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
	h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
	return corr ^ (h ^ (h >> 31));
}

static void on_route(void *arg, const struct kvidx_route *rt, uint64_t commit_ns)
{
	struct ing_spec *s = arg;
	struct spec_pod *sp = pod_of(s, rt->pod), *pp = NULL;
	uint64_t now = s->drain_now;
	bool on_pred = rt->matched_blocks > 0 && rt->matched_spec > 0;

	if (!sp) {
		ilog_limited(&s->lim, ILOG_DEBUG, "route commit to pod index %d, which ingestd "
			     "does not serve: ignored", rt->pod);
		return;
	}
	/* The ring is written by routers: a commit stamped in the future would be trusted for
	 * longer than the TTL. The clock is CLOCK_MONOTONIC, system-wide. */
	uint64_t created = commit_ns && commit_ns <= now ? commit_ns : now;
	int32_t pid = 0;
	int slot = kv_writer_drain_slot(s->w, &pid);
	struct kv_tm_router rtr = kv_tm_router(s->w, slot);
	enum kv_router_ctr rkind;
	if (rt->matched_blocks == 0) {
		ctr_add(sp, KV_PC_routes_nomatch, 1);
		rkind = KV_RT_routes_nomatch;
	} else if (on_pred) {
		ctr_add(sp, KV_PC_routes_predicted, 1);
		rkind = KV_RT_routes_predicted;
	} else {
		ctr_add(sp, KV_PC_routes_confirmed, 1);
		rkind = KV_RT_routes_confirmed;
	}
	if (kv_tm_router_ok(rtr)) {
		router_owner(rtr, pid);
		kv_tm_router_add(rtr, KV_RT_routes, 1);
		kv_tm_router_add(rtr, rkind, 1);
		kv_tm_router_set(rtr, KV_RT_pid, (uint64_t)(uint32_t)pid);
		kv_tm_router_set(rtr, KV_RT_last_route_ns, created);
	}
	predict(s, sp, rt->pod, rt->keys, rt->nkeys, created, rt->nkeys > rt->matched_blocks,
		slot);
	if (rt->prefill_pod >= 0 && rt->prefill_pod != rt->pod &&
	    (pp = pod_of(s, rt->prefill_pod)))
		predict(s, pp, rt->prefill_pod, rt->keys, rt->nkeys, created, rt->nkeys > 0, slot);

	int oslot;
	uint64_t corr = origin_corr(s, rt->corr_id, &oslot);
	struct spec_fent *old = spec_fifo_find(&s->corr, corr, oslot);
	if (old) /* this process reused a corr_id: its newest route wins */
		spec_fifo_del(&s->corr, old);
	/* The outcome belongs to the pod whose cache the match and the usage describe: under P/D
	 * the prefill pod (the router reports it so, and matched_blocks is its match). */
	uint64_t predicted = (uint64_t)rt->matched_blocks * s->block_size;
	int opod = pp ? rt->prefill_pod : rt->pod;
	spec_fifo_push(&s->corr, corr, oslot, opod, predicted | (on_pred ? PRED_FLAG : 0),
		       created, NULL);
	if (s->load)
		load_commit(s->load, corr, opod, slot, rt->prompt_tokens, rt->nkeys,
			    rt->matched_blocks, now);
	if (s->cluster)
		cluster_local_commit(s->cluster, &(struct cl_commit){
			.corr = corr, .keys = rt->keys, .nkeys = rt->nkeys, .created_ns = created,
			.pod = sp->label, .ttl_ms = sp->ttl_ms, .prefill = pp ? pp->label : NULL,
			.prefill_ttl_ms = pp ? pp->ttl_ms : 0, .pod_idx = rt->pod,
			.prefill_idx = pp ? rt->prefill_pod : -1,
			.tokens = load_uncached(rt->prompt_tokens, rt->nkeys, rt->matched_blocks,
						s->block_size) });
}

static void on_outcome(void *arg, const struct kvidx_outcome *o)
{
	struct ing_spec *s = arg;
	int slot;
	uint64_t corr = origin_corr(s, o->corr_id, &slot);
	struct spec_fent *e = spec_fifo_find(&s->corr, corr, slot);
	int pod = e ? e->aux : o->pod;
	struct spec_pod *sp = pod_of(s, pod);
	bool on_pred = false;
	uint64_t predicted = 0;

	if (e) {
		on_pred = e->a & PRED_FLAG;
		predicted = e->a & ~PRED_FLAG;
		spec_fifo_del(&s->corr, e);
	}
	if (s->load)
		load_outcome(s->load, corr, pod, s->drain_now);
	if (!sp)
		return;
	/* vLLM recomputes at least a prompt's last token: a full hit reports the prompt less
	 * one token, rounded down to a block. Predicting more would call every full hit false. */
	if (o->prompt_tokens) {
		uint64_t most = (uint64_t)(o->prompt_tokens - 1) / s->block_size * s->block_size;
		if (predicted > most)
			predicted = most;
	}
	/* Peers retire the request from their load views; a failed outcome (docs/cluster.md:
	 * fewer cached tokens than the route matched) withdraws its predictions too. */
	if (s->cluster && e)
		cluster_local_outcome(s->cluster, corr, pod,
				      predicted > 0 && o->cached_tokens < predicted);
	int32_t pid = 0;
	struct kv_tm_router rtr = kv_tm_router(s->w, kv_writer_drain_slot(s->w, &pid) >= 0 ?
						 slot : -1);
	if (kv_tm_router_ok(rtr)) {
		router_owner(rtr, pid);
		if (!kv_tm_router_get(rtr, KV_RT_pid))
			kv_tm_router_set(rtr, KV_RT_pid, (uint64_t)(uint32_t)pid);
	}
	ctr_add(sp, KV_PC_outcomes, 1);
	router_add(s, slot, KV_RT_outcomes, 1);
	if (on_pred && o->cached_tokens < predicted) {
		ctr_add(sp, KV_PC_false_warm_routes, 1);
		ctr_add(sp, KV_PC_wasted_prefill_tokens, predicted - o->cached_tokens);
		router_add(s, slot, KV_RT_false_warm_routes, 1);
		router_add(s, slot, KV_RT_wasted_prefill_tokens, predicted - o->cached_tokens);
	}
}

int spec_pod_find(const struct ing_spec *s, const char *name)
{
	for (uint32_t i = 0; i < s->max_pods; i++)
		if (s->pods[i].active && !strcmp(s->pods[i].label, name))
			return (int)i;
	return -1;
}

int spec_remote_predict(struct ing_spec *s, int pod, const uint64_t *keys, size_t n,
			uint64_t created_ns, uint32_t ttl_ms)
{
	struct spec_pod *sp = pod_of(s, pod);

	if (!sp)
		return -KVIDX_ENOPOD;
	int rc = kvidx_speculate(s->w, pod, keys, n, created_ns, ttl_ms);
	if (rc > 0) {
		ctr_add(sp, KV_PC_speculations, (uint64_t)rc);
		ctr_add(sp, KV_PC_remote_speculations, (uint64_t)rc);
		sp->spec_live += (uint64_t)rc;
		route_track(s, sp, pod, created_ns, (uint32_t)rc, -1,
			    kv_prompt_class((uint64_t)n * s->block_size));
	}
	return rc;
}

int spec_remote_withdraw(struct ing_spec *s, int pod, const uint64_t *keys, size_t n)
{
	if (!pod_of(s, pod))
		return -KVIDX_ENOPOD;
	/* Predictions only: a confirmed record stays as it is. */
	return kvidx_remove(s->w, pod, keys, n, KVIDX_REMOVE_SPECULATIVE);
}

int spec_drain(struct ing_spec *s, size_t budget, uint64_t now)
{
	struct kvidx_drain_ops ops = { .route = on_route, .outcome = on_outcome, .arg = s };

	s->drain_now = now;
	return kvidx_drain(s->w, budget, &ops);
}

/* ---- confirmations ----------------------------------------------------------------------- */

/* Observer: a speculative record of pod was confirmed by a BlockStored applied at now. */
static void spec_confirm(void *arg, uint64_t key, int pod, uint64_t created_ns,
			 uint64_t expires_ns, uint64_t now)
{
	struct ing_spec *s = arg;
	struct spec_pod *sp = pod_of(s, pod);
	struct spec_fent *e;

	(void)key;
	if (!sp)
		return;
	if (sp->spec_live)
		sp->spec_live--;
	/* Readers trust a prediction while now < expires (reader.c); the reaper removes it at
	 * expires <= now. In time means the readers were still trusting it. */
	if (now < expires_ns) {
		ctr_add(sp, KV_PC_confirmed_in_time, 1);
	} else {
		ctr_add(sp, KV_PC_late_confirmations, 1);
		ctr_add(sp, KV_PC_early_expiries, 1);
	}
	if ((e = route_of(s, created_ns, pod))) {
		route_confirmed(s, sp, e, now < expires_ns, now);
		route_move(e, -1, 0);
		route_settle(s, sp, e);
	} else {
		record_latency(s, sp, created_ns, now);
	}
}

/* Observer, after each kvidx_store of keys[0..n) on pod (every key of the event, stored or
 * not): late confirmations of records the reaper already removed. One hash lookup per key,
 * only while the late map is not empty. */
static void spec_after_store(void *arg, int pod, const uint64_t *keys, size_t n, uint64_t now)
{
	struct ing_spec *s = arg;
	struct spec_pod *sp;

	if (!s || !s->late.live || !(sp = pod_of(s, pod)))
		return;
	for (size_t i = 0; i < n && s->late.live; i++) {
		struct spec_fent *e;
		while ((e = spec_fifo_find(&s->late, keys[i], pod))) {
			struct spec_fent *r = route_of(s, e->a, pod);
			ctr_add(sp, KV_PC_late_confirmations, 1);
			ctr_add(sp, KV_PC_early_expiries, 1);
			if (r) {
				route_confirmed(s, sp, r, false, now);
				route_move(r, 0, -1);
				route_settle(s, sp, r);
			} else {
				record_latency(s, sp, e->a, now);
			}
			spec_fifo_del(&s->late, e);
		}
	}
}

/* ---- reaper ------------------------------------------------------------------------------ */

/* An expired record of (created_ns, pod) left the late window unconfirmed. */
static void count_stale(struct ing_spec *s, int pod, uint64_t created_ns)
{
	struct spec_pod *sp = pod_of(s, pod);
	struct spec_fent *r;

	if (!sp)
		return;
	ctr_add(sp, KV_PC_stale_expiries, 1);
	if ((r = route_of(s, created_ns, pod))) {
		r->b |= RT_STALE;
		route_move(r, 0, -1);
		route_settle(s, sp, r);
	}
}

/* Observer (kvidx_expire, kvidx_speculate): the expired record goes into the late window. */
static void on_expire(void *arg, uint64_t key, int pod, uint64_t created_ns,
		      uint64_t expires_ns)
{
	struct ing_spec *s = arg;
	struct spec_pod *sp = pod_of(s, pod);
	struct spec_fent ev, *r;

	if (!sp)
		return;
	if (sp->spec_live)
		sp->spec_live--;
	if ((r = route_of(s, created_ns, pod)))
		route_move(r, -1, 1);
	/* A (key, pod) may be here already: an earlier prediction of the same block expired and
	 * awaits its confirmation too. Each expiry keeps its own entry and window; one
	 * BlockStored confirms them all (spec_after_store), as docs/ttl.md counts it: each was
	 * followed by a matching confirmation, so none of them is stale. */
	if (spec_fifo_push(&s->late, key, pod, 0, created_ns, expires_ns, &ev)) {
		count_stale(s, ev.sub, ev.a);
		s->late_evicted++;
		ilog_limited(&s->late_lim, ILOG_WARN,
			     "late map full (--late-map %llu): oldest expired predictions counted "
			     "stale before their window ended",
			     (unsigned long long)s->cfg->late_map);
	}
}

/*
 * Observer: a record left the table for another reason than expiry or confirmation. A
 * speculative one is counted as dropped by its cause; one that had expired (an eviction found
 * it before the reaper) is an expiry, with its late window.
 */
static void on_drop(void *arg, enum kvidx_drop cause, uint64_t key, int pod, bool speculative,
		    uint64_t t_ns, uint64_t expires_ns)
{
	struct ing_spec *s = arg;
	struct spec_pod *sp = pod_of(s, pod);
	struct spec_fent *r;

	if (!sp || !speculative)
		return;
	if (expires_ns <= kvidx_now_ns()) {
		on_expire(arg, key, pod, t_ns, expires_ns);
		return;
	}
	if (sp->spec_live)
		sp->spec_live--;
	bool removed = cause == KVIDX_DROP_REMOVED;
	ctr_add(sp, removed ? KV_PC_dropped_removed : KV_PC_dropped_evicted, 1);
	if ((r = route_of(s, t_ns, pod))) {
		route_drop(r, removed ? CAUSE_REMOVED : CAUSE_EVICTED);
		route_move(r, -1, 0);
		route_settle(s, sp, r);
	}
}

/* Expired predictions whose late window passed without a confirmation: stale. */
static void age_late(struct ing_spec *s, uint64_t now)
{
	struct spec_fent *e;

	for (unsigned n = 0; n < LATE_AGE_MAX && (e = spec_fifo_oldest(&s->late)); n++) {
		if (e->b + s->late_window_ns > now)
			break;
		int pod = e->sub;
		uint64_t created = e->a;
		spec_fifo_del(&s->late, e);
		count_stale(s, pod, created);
	}
}

/*
 * The reaper's turns (spec.h "Threads and the writer mutex"). Every field below is under the
 * writer mutex but rp_back, a relaxed hint: a stale read costs at most one more chunk.
 */

/* A wake-up is due: its budget of slots becomes the reaper's work (ingest thread, mutex). */
static void reap_arm(struct ing_spec *s, uint64_t now)
{
	if (!s->rp_left && now >= s->rp_next_ns) {
		s->rp_left = s->reap_budget;
		s->rp_first = true;
	}
}

/* Opens a window: until it closes, the ingest thread makes no writer call and the reaper may
 * take the mutex. one: the ingest thread wants the mutex back after one chunk. */
static void window_open(struct ing_spec *s, bool one)
{
	s->rp_open = true;
	s->rp_window++;
	__atomic_store_n(&s->rp_back, one, __ATOMIC_RELAXED);
	if (s->rp_left)
		pthread_cond_signal(&s->rp_go);
}

/* Closes the window, holding the mutex again: if the reaper owes work and had no chunk in
 * this window (it was not scheduled during the wait), waits for that one chunk. */
static void window_close(struct ing_spec *s)
{
	while (s->reaper_running && !s->rp_stop && s->rp_left && s->rp_served != s->rp_window)
		pthread_cond_wait(&s->rp_done, s->lock);
	s->rp_open = false;
}

void spec_wait_begin(struct ing_spec *s, uint64_t now)
{
	reap_arm(s, now);
	window_open(s, false);
	pthread_mutex_unlock(s->lock);
}

void spec_wait_end(struct ing_spec *s)
{
	__atomic_store_n(&s->rp_back, 1, __ATOMIC_RELAXED);
	pthread_mutex_lock(s->lock);
	window_close(s);
}

void spec_reaper_turn(struct ing_spec *s, uint64_t now)
{
	reap_arm(s, now);
	if (!s->rp_left || !s->reaper_running)
		return;
	window_open(s, true);
	window_close(s);
}

/* One chunk of the wake-up: at most SPEC_REAP_CHUNK slots of kvidx_expire, and in the first
 * chunk the late map's aging (reaper thread, mutex held, a window open). */
static void reap_chunk(struct ing_spec *s)
{
	uint64_t chunk = s->rp_left < SPEC_REAP_CHUNK ? s->rp_left : SPEC_REAP_CHUNK;

	s->reap_now = kvidx_now_ns();
	kvidx_expire(s->w, s->reap_now, chunk);
	if (s->rp_first)
		age_late(s, s->reap_now);
	s->rp_first = false;
	s->rp_left -= chunk;
	if (!s->rp_left) /* the wake-up is done: the next one an interval from now */
		s->rp_next_ns = kvidx_now_ns() + (uint64_t)s->cfg->reap_interval_ms * NS_PER_MS;
	s->rp_served = s->rp_window;
	pthread_cond_signal(&s->rp_done);
}

/* The reaper may work: a window is open, work is owed, and either it has had no chunk in
 * this window or the ingest thread has not asked for the mutex back. */
static bool reap_may(const struct ing_spec *s)
{
	return s->rp_open && s->rp_left &&
	       (s->rp_served != s->rp_window || !__atomic_load_n(&s->rp_back, __ATOMIC_RELAXED));
}

static void *reaper_main(void *arg)
{
	struct ing_spec *s = arg;

	pthread_setname_np(pthread_self(), "kvidx-reaper");
	pthread_mutex_lock(s->lock);
	for (;;) {
		while (!s->rp_stop && !reap_may(s))
			pthread_cond_wait(&s->rp_go, s->lock); /* releases the writer mutex */
		if (s->rp_stop)
			break;
		reap_chunk(s);
	}
	pthread_mutex_unlock(s->lock);
	return NULL;
}

int spec_reaper_start(struct ing_spec *s)
{
	int rc;

	s->rp_stop = false;
	s->reaper_running = true; /* before the thread: window_close() reads it */
	rc = pthread_create(&s->reaper, NULL, reaper_main, s);
	if (rc) {
		s->reaper_running = false;
		ilog(ILOG_ERROR, "cannot start the reaper thread: %s", strerror(rc));
		return -rc;
	}
	return 0;
}

void spec_reaper_stop(struct ing_spec *s)
{
	if (!s->reaper_running)
		return;
	pthread_mutex_lock(s->lock);
	s->rp_stop = true;
	pthread_cond_broadcast(&s->rp_go);
	pthread_mutex_unlock(s->lock);
	pthread_join(s->reaper, NULL);
	s->reaper_running = false;
}

/* ---- freshness and TTL policy -------------------------------------------------------------- */

void spec_on_event(struct ing_spec *s, int pod, uint64_t now)
{
	struct spec_pod *sp = pod_of(s, pod);

	if (!sp)
		return;
	sp->pending_ns = 0;
	apply_pause(s, sp, pod, now);
}

void spec_set_stream(struct ing_spec *s, int pod, enum spec_pause stream, uint64_t now)
{
	struct spec_pod *sp = pod_of(s, pod);

	if (!sp)
		return;
	sp->stream = stream;
	apply_pause(s, sp, pod, now);
}

uint32_t spec_ttl_next(uint32_t cur_ms, uint64_t lq_us, uint32_t backlog_ms, uint32_t slack_ms,
		       uint32_t floor_ms, uint32_t cap_ms, double max_step)
{
	const uint64_t big = 1000000000000ull; /* 11.6 days: the histogram's open last bucket */
	struct ttl_plan p = {
		.lq = (double)(lq_us > big ? big : lq_us) / 1e6,
		.backlog = backlog_ms / 1e3,
		.slack = slack_ms / 1e3,
		.floor = floor_ms / 1e3,
		.cap = cap_ms / 1e3,
	};

	ttl_plan_compute(&p); /* the one TTL core (tools/common/ttl.c) */
	return clamp_ttl(ttl_step(cur_ms, &p, max_step));
}

static void adapt(struct ing_spec *s, struct spec_pod *sp, uint64_t now)
{
	const struct ing_spec_config *c = s->cfg;
	uint64_t n, lq;

	sp->next_eval_ns = now + (uint64_t)c->interval_ms * NS_PER_MS;
	n = kv_tm_ro_count(kv_tm_hist_ro(sp->hist_recent));
	if (n < c->min_samples || n == 0 ||
	    kv_tm_ro_quantile(kv_tm_hist_ro(sp->hist_recent), c->percentile, &lq) < 0)
		return; /* too few recent confirmations: keep the TTL in force */
	uint32_t backlog_ms = c->backlog_ms;
	const char *bsrc = "given";
	uint64_t lag_us;
	if (c->backlog_measured && kv_tm_ro_count(kv_tm_hist_ro(sp->hist_lag)) >= c->min_samples &&
	    kv_tm_ro_quantile(kv_tm_hist_ro(sp->hist_lag), c->percentile, &lag_us) == 0) {
		/* J's backlog term as measured: the same percentile of the recent event path lag,
		 * rounded up to the millisecond (capped where a TTL is anyway). */
		uint64_t ms = (lag_us + 999) / 1000;
		backlog_ms = ms > KVIDX_MAX_TTL_MS ? KVIDX_MAX_TTL_MS : (uint32_t)ms;
		bsrc = "measured";
	}
	uint32_t next = spec_ttl_next(sp->ttl_ms, lq, backlog_ms, c->slack_ms, s->ttl_floor_ms,
				      s->ttl_cap_ms, c->max_step);
	if (next == sp->ttl_ms)
		return;
	ilog(ILOG_INFO,
	     "pod %s: TTL %ums -> %ums (p%g of %llu recent confirmations <= %.1fms, + %ums "
	     "backlog (%s) + %ums slack, within %ums..%ums)",
	     sp->label, sp->ttl_ms, next, c->percentile * 100, (unsigned long long)n,
	     (double)lq / 1000, backlog_ms, bsrc, c->slack_ms, s->ttl_floor_ms, s->ttl_cap_ms);
	sp->ttl_ms = next;
	ctr_set(sp, KV_PC_ttl_ms, next);
}

void spec_tick(struct ing_spec *s, uint64_t now)
{
	bool decay;

	if (!s)
		return;
	decay = now >= s->next_decay_ns;
	if (decay)
		s->next_decay_ns = now + KV_HIST_DECAY_S * NS_PER_S;
	for (uint32_t pod = 0; pod < s->max_pods; pod++) {
		struct spec_pod *sp = &s->pods[pod];
		if (!sp->active)
			continue;
		apply_pause(s, sp, (int)pod, now);
		if (decay) {
			kv_tm_hist_decay(sp->hist_recent);
			kv_tm_hist_decay(sp->hist_lag);
			for (unsigned c = 0; c < KV_PROMPT_CLASSES; c++)
				kv_tm_hist_decay(sp->hist_class[c]);
		}
		if (s->cfg->policy == ING_TTL_ADAPTIVE && now >= sp->next_eval_ns)
			adapt(s, sp, now);
	}
	struct kv_tm_router rt;
	for (int slot = 0; decay && kv_tm_router_ok(rt = kv_tm_router(s->w, slot)); slot++)
		kv_tm_hist_decay(kv_tm_router_hist(rt));
}
