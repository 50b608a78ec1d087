/*
 * spec.h — internal to kvidx-ingestd: its one job is the writer half of speculative entries
 * (docs/DESIGN.md "Speculation and the TTL"; the method: docs/ttl.md):
 *
 *   route commits   kvidx_drain() hands over what routers committed: per-pod route counters
 *                   (decided on a prediction / on confirmed blocks / on no match), speculative
 *                   records on the chosen decode pod and, under P/D, the prefill pod, trusted
 *                   for the pod's TTL. Outcome reports are matched to their route through a
 *                   bounded corr_id map and priced: false warm routes, wasted prefill tokens.
 *   confirmation    the writer's observer (spec_init() sets it) reports each speculative
 *                   record kvidx_store() confirms: route-to-confirmation latency (commit ->
 *                   event applied) goes into the pod's cumulative and recent histograms, and
 *                   the record counts as confirmed in time or, if it had expired, as a late
 *                   confirmation and an early expiry.
 *   reaper          a thread that removes expired speculative records (kvidx_expire) and keeps
 *                   what it removed in a bounded late-window map: a BlockStored for the same
 *                   (key, pod) within --late-window is a late confirmation and an early expiry
 *                   (the TTL did not cover the event path); none is a stale expiry (failed
 *                   prediction, lost event, key mismatch).
 *   per route       a route's new predictions on a pod share their created-at (the commit
 *                   time) and so expire together: the route map follows them and decides the
 *                   route once, as in time, early (late confirmation), stale, or dropped by
 *                   cause (clear, BlockRemoved, eviction); records dropped are counted too.
 *                   Per router worker (registry slot) the same, in the data segment's router
 *                   area, and latency by prompt-length class (KV_PROMPT_CLASSES).
 *   TTL policy      static, or adaptive per pod: T = clamp(Lq + J, floor, cap), Lq a percentile
 *                   of the pod's recent latency histogram, J = backlog + slack (the backlog
 *                   given, or with --ttl-backlog measured the same percentile of the pod's
 *                   recent event path lag histogram), re-evaluated
 *                   every interval and moved by at most max-step per interval. The TTL in force
 *                   is the pod counter ttl_ms.
 *   freshness       a pod's speculation is paused (kvidx_pod_set_spec_paused; readers then
 *                   ignore its speculative records and kvidx_speculate adds none) while its
 *                   stream is replaying or disconnected (spec_paused = 1), or while routes were
 *                   sent to it but no event came for --stale-limit (spec_paused = 2, "pipeline
 *                   broken"). An idle pod (no routes, no events) is not paused.
 *
 * Threads and the writer mutex (docs/DESIGN.md "One writer, and one mutator inside it": the
 * apply path and the reaper never mutate concurrently). Two threads make writer calls:
 *
 *   ingest thread  ingest.c's loop: sockets, the apply path, the route drain, the tick and
 *                  housekeeping; every function here but the four below runs on it.
 *   reaper thread  the reaper's work and nothing else: kvidx_expire over the table, a
 *                  wake-up of reap_budget slots every --reap-interval in chunks of at most
 *                  SPEC_REAP_CHUNK slots, and the late map's aging (stale expiries) in each
 *                  wake-up's first chunk (reaper_main, reap_chunk).
 *
 * Why a thread: the reaper's walk is the one piece of writer work that waits for nothing
 * outside, so it runs while the ingest thread waits on the network: ingest.c releases the
 * writer mutex around zmq_poll (spec_wait_begin / spec_wait_end), and that window is the
 * reaper's. Readers never wait for it: an expired prediction is ignored by readers at once
 * (reader.c); the reaper only reclaims its slot and starts its late window.
 *
 * Lock discipline:
 *  1. The writer mutex (ingest.c's d->lock, s->lock here) is held by whoever makes a writer
 *     call or touches struct ing_spec. The ingest thread holds it all the time, except inside
 *     a window: from spec_wait_begin() (called holding it, returns without) to
 *     spec_wait_end() (takes it back), and inside spec_reaper_turn().
 *  2. The reaper thread takes the mutex only to wait on rp_go (which releases it) and to do a
 *     chunk, and does a chunk only while a window is open (rp_open), so no writer call of
 *     the two threads ever overlaps, and none is made by the reaper outside a window.
 *  3. Progress, both ways: in a window the reaper may do chunk after chunk until the ingest
 *     thread asks for the mutex back (rp_back, set before it locks), so the ingest thread
 *     waits at most one chunk after its wait. When the loop is too busy to wait (zmq_poll
 *     with timeout 0 returns at once) the reaper is still owed a turn: spec_wait_end()
 *     waits on rp_done for the one chunk of a due wake-up the window did not see, and
 *     ingest.c's schedule gives a turn after each socket's read budget (spec_reaper_turn:
 *     one chunk, only when a wake-up is due). No spinning, no sched_yield.
 *  4. rp_* fields are under the mutex, except rp_back: a relaxed hint (a stale value costs
 *     at most one more chunk); the mutex and the two condition variables order the rest.
 *     All other writer-private state in struct ing_spec (per-pod state, the corr_id map, the
 *     late map) is under the mutex; the shared-memory counters written are writer-only
 *     relaxed words, as everywhere in ingestd.
 *
 * Metrics carry pods only: nothing here logs prompt text, token ids or keys above debug level.
 */
#ifndef KVIDX_INGEST_SPEC_H
#define KVIDX_INGEST_SPEC_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "fifomap.h"
#include "kvidx_writer.h"
#include "telemetry.h"

#define SPEC_REAP_CHUNK 4096 /* slots examined per mutex hold of the reaper */

/* Why a pod's speculation is paused: the value of its spec_paused counter. */
enum spec_pause {
	SPEC_FRESH = 0,       /* not paused */
	SPEC_STREAM = 1,      /* replaying a gap, or the subscriber is disconnected */
	SPEC_PIPELINE = 2,    /* routes sent, no event for --stale-limit */
};

/*
 * A bounded map with FIFO eviction keyed by (key, sub), on the fifomap of fifomap.h (the one
 * under the engine-key map too). A key may be pushed more than once (a multimap): every entry
 * has its own slot. Used for route commits awaiting their outcome (key = corr_id mixed with
 * its origin, sub = the committing registry slot: spec.c origin_corr(); aux = the pod the outcome counts for: the prefill pod under P/D, else the decode pod), for
 * expired predictions awaiting a late confirmation (key = block key, sub = pod) and for the
 * route map (key = created_ns, sub = pod).
 */
struct spec_fent {
	uint64_t key;
	int32_t sub;
	int32_t aux;
	uint64_t a, b; /* payload */
	uint32_t live;
	uint32_t pad;
};
struct spec_fifo {
	struct fifomap fm; /* slots of struct spec_fent */
	uint64_t head;     /* an insertion number: none before it is live */
	uint64_t live;
};

/* An empty map of at least cap entries. 0 or -ENOMEM. */
int spec_fifo_init(struct spec_fifo *f, uint64_t cap);
void spec_fifo_free(struct spec_fifo *f);
/* A live entry of (key, sub) (one of them if pushed more than once), or NULL. Valid until
 * the next push or del. */
struct spec_fent *spec_fifo_find(struct spec_fifo *f, uint64_t key, int32_t sub);
/* Removes a live entry (from find, oldest or next). */
void spec_fifo_del(struct spec_fifo *f, struct spec_fent *e);
/* Appends (key, sub) -> (aux, a, b). An existing entry of (key, sub) stays (delete it first
 * for map semantics). When the ring is full the oldest live entry is evicted: copied to
 * *evicted (if non-NULL) and true returned. */
bool spec_fifo_push(struct spec_fifo *f, uint64_t key, int32_t sub, int32_t aux, uint64_t a,
		    uint64_t b, struct spec_fent *evicted);
/* The oldest live entry, or NULL. */
struct spec_fent *spec_fifo_oldest(struct spec_fifo *f);
/* The live entries, oldest first: *pos = 0, then each call gives the next or NULL. The
 * entry given may be deleted before the next call. */
struct spec_fent *spec_fifo_next(struct spec_fifo *f, uint64_t *pos);
/* Forgets every live entry whose sub (by_aux: aux) is pod. O(entries). */
void spec_fifo_purge(struct spec_fifo *f, int32_t pod, bool by_aux);

/* Writer-private state of one pod index. */
struct spec_pod {
	bool active;
	char label[KVIDX_POD_NAME_MAX];
	struct kv_tm_pod ctr;          /* its counters (telemetry.h) */
	struct kv_tm_hist hist_cum;    /* confirmation latency: cumulative (KV_HIST_CONFIRM) */
	struct kv_tm_hist hist_recent; /* the same, recent (KV_HIST_CONFIRM_RECENT) */
	struct kv_tm_hist hist_lag;    /* recent event path lag (pods.c records it) */
	struct kv_tm_hist hist_class[KV_PROMPT_CLASSES]; /* recent latency by prompt class */
	uint32_t ttl_ms;      /* TTL in force */
	uint64_t next_eval_ns;
	uint64_t pending_ns;  /* earliest route expecting events since the last event; 0: none */
	enum spec_pause stream; /* SPEC_STREAM while pods.c says replaying / disconnected */
	enum spec_pause paused; /* in force */
	uint64_t recent_created[8]; /* created-at of the last confirmed routes: one latency
				     * sample per route, not per block (routes the route map lost) */
	unsigned rc_next;
	uint64_t spec_live;   /* speculative records of the pod in the table (a clear drops them) */
};

struct ing_load; /* load.h */
struct ing_cluster;

struct ing_spec {
	struct kvidx *w;
	struct ing_load *load; /* the load view's accounting (load.h), or NULL: none */
	struct ing_cluster *cluster; /* the cluster link (cluster.c), NULL: none */
	const struct ing_spec_config *cfg;
	pthread_mutex_t *lock; /* the writer mutex */
	uint32_t block_size;
	uint32_t max_pods;
	struct spec_pod *pods;
	struct spec_fifo corr; /* (origin corr_id, slot) -> (pod, predicted tokens | on-prediction bit, commit) */
	struct spec_fifo late; /* (key, pod) -> (created_ns, expired_ns) */
	struct spec_fifo routes; /* (created_ns, pod) -> route accounting, see spec.c */
	uint64_t late_window_ns;
	uint32_t ttl_static_ms, ttl_floor_ms, ttl_cap_ms; /* clamped to 1..KVIDX_MAX_TTL_MS */
	uint64_t reap_budget;  /* slots per reaper wake-up */
	uint64_t next_decay_ns;
	uint64_t late_evicted; /* late-map entries evicted before their window ended */
	uint64_t drain_now, reap_now; /* time of the current drain / reaper step */
	struct ilog_limit lim, late_lim;
	/* Reaper thread and its turns (rules 1-4 above): under the writer mutex but rp_back. */
	pthread_t reaper;
	bool reaper_running;
	pthread_cond_t rp_go;   /* the reaper waits: a window with work in it, or stop */
	pthread_cond_t rp_done; /* the ingest thread waits: the chunk owed in its window */
	bool rp_stop;
	bool rp_open;           /* a window is open: the ingest thread makes no writer call */
	bool rp_first;          /* the wake-up's first chunk is still to do (late aging) */
	uint64_t rp_window;     /* windows opened so far */
	uint64_t rp_served;     /* the last window the reaper did a chunk in */
	uint64_t rp_left;       /* slots of the current wake-up still to examine */
	uint64_t rp_next_ns;    /* when the next wake-up is due */
	uint32_t rp_back;       /* atomic hint: the ingest thread wants the mutex back */
};

/*
 * Prepares s for writer w and makes it w's observer (kvidx_writer_set_observer(); spec_free()
 * unsets it). The reaper's budget is sized from w's table (kv_writer_slots()) so that a
 * full pass takes about cfg->reap_pass_ms. lock: the writer mutex, held by
 * the caller of every other function (rule 1 above). Logs the effective settings (clamped
 * TTLs, late window). 0 or -ENOMEM.
 */
int spec_init(struct ing_spec *s, struct kvidx *w, const struct ing_spec_config *cfg,
	      uint32_t block_size, uint32_t max_pods, pthread_mutex_t *lock, uint64_t now);
/* Frees s; the reaper must be stopped. Pending late-window entries are dropped uncounted. */
void spec_free(struct ing_spec *s);

/* Starts / stops the reaper thread. Called without the writer mutex (start: before the loop
 * first takes it; stop: after the loop). start: 0 or -errno. */
int spec_reaper_start(struct ing_spec *s);
void spec_reaper_stop(struct ing_spec *s);
/* Ingest thread, around a wait on the network (rule 1): begin is called holding the mutex
 * and releases it, opening the reaper's window (a wake-up due at now is armed first); end
 * takes it back, after the one chunk the reaper is owed if it had none in the window. */
void spec_wait_begin(struct ing_spec *s, uint64_t now);
void spec_wait_end(struct ing_spec *s);
/* Ingest thread, holding the mutex: if a wake-up is due, the reaper does one chunk now
 * (the mutex is lent and taken back); otherwise nothing. */
void spec_reaper_turn(struct ing_spec *s, uint64_t now);

/* Pod index pod was registered (name for log lines): TTL set to the static one, counter
 * ttl_ms and spec_paused written. (When the pod leaves the index, kvidx_pod_remove() tells
 * the observer: its pending outcomes and late-window entries are forgotten uncounted.) */
void spec_pod_attach(struct ing_spec *s, int pod, const char *name, uint64_t now);

/* Consumes up to budget messages of the route rings (kvidx_drain) and applies them. */
int spec_drain(struct ing_spec *s, size_t budget, uint64_t now);

/* An event batch of pod was applied: the pipeline is alive. */
void spec_on_event(struct ing_spec *s, int pod, uint64_t now);

/* pods.c's view of the pod's stream (SPEC_STREAM or SPEC_FRESH); re-evaluates the pause. */
void spec_set_stream(struct ing_spec *s, int pod, enum spec_pause stream, uint64_t now);

/* Periodic work (each loop round): pipeline-broken gating, adaptive TTL, histogram decay. */
void spec_tick(struct ing_spec *s, uint64_t now);


/* ---- the cluster link's hooks (cluster.c; writer mutex held) ----------------------------- */

/* The index of the active pod called name, or -1. O(max pods). */
int spec_pod_find(const struct ing_spec *s, const char *name);
/* A peer's prediction: keys on pod, created at created_ns (local clock), trusted for ttl_ms;
 * counted as the pod's speculations and routes like a local commit's (without a router slot,
 * and without pipeline gating: that follows this host's own routes). Returns the records
 * added (0 when the pod's speculation is paused), or a negative error. */
int spec_remote_predict(struct ing_spec *s, int pod, const uint64_t *keys, size_t n,
			uint64_t created_ns, uint32_t ttl_ms);
/* A peer's failed outcome: pod's speculative records of keys are removed (dropped_removed);
 * confirmed records stay. Returns the records changed or a negative error. */
int spec_remote_withdraw(struct ing_spec *s, int pod, const uint64_t *keys, size_t n);

/*
 * The adaptive policy's next TTL, a pure function: target = ceil((lq_us + J) / 1 ms) with
 * J = backlog + slack, clamped to [floor, cap]; the result moves from cur_ms toward it by at
 * most max_step x cur_ms (at least 1 ms) and stays within [floor, cap] and
 * [1, KVIDX_MAX_TTL_MS]. floor and cap are taken as given (already clamped).
 */
uint32_t spec_ttl_next(uint32_t cur_ms, uint64_t lq_us, uint32_t backlog_ms, uint32_t slack_ms,
		       uint32_t floor_ms, uint32_t cap_ms, double max_step);

#endif /* KVIDX_INGEST_SPEC_H */
