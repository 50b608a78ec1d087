/*
 * pods.h — internal to kvidx-ingestd: its one job is one pod's event stream: its ZeroMQ
 * sockets (SUB, socket monitor, replay DEALER), its identity in the index, its sequence
 * numbers and the replay state machine, and its health counters. The poll loop that drives
 * every pod is in ingest.c.
 *
 * Data parallelism: a pod spec with dp-ranks=N is N streams (struct ing_pod, one per rank r,
 * at the endpoint's port + r and the replay port + r, vLLM's convention) of one index pod
 * (struct ing_group: name, model, counters, reference counts). Each rank has its own
 * sockets, sequence, gap handling, replay and restart detection; clearing one rank drops its
 * blocks only (apply.h rule 9). Per-rank health is in the pod's rank area (telemetry.h
 * KV_RANK_CTRS).
 *
 * A pod is in one of two modes:
 *   connect  (--pod): ingestd owns a SUB connected to the pod's PUB, a PAIR socket receiving
 *            that SUB's monitor events (connected / disconnected), and, while a replay runs, a
 *            DEALER connected to the pod's replay ROUTER.
 *   bind     (--bind): the pod is one topic on the shared bound SUB; it has no socket of its
 *            own and no replay endpoint.
 *
 * Replay (connect mode): on a gap the message that revealed it is held, a DEALER sends
 * ["", seq8(next expected)], and the pod's SUB is not read (ZeroMQ queues its messages, up to
 * ING_SUB_HWM) until the end marker arrives, the replay proves short (first seq later than
 * asked, or a hole), or nothing arrives for replay-timeout-ms. Success: the replayed batches
 * are applied in order, then live messages the replay already covered are dropped. Failure:
 * the pod is cleared and live ingest goes on from the held message. A replay that starts later
 * than asked fails, except the one --replay-on-start asks for at seq 0: vLLM keeps only its
 * recent batches, so that rebuild applies whatever window the publisher still has (blocks
 * stored before it stay unknown; nothing wrong is indexed).
 *
 * Restarts: a live message whose sequence frame carries a publisher id (8 + 16 bytes, vLLM
 * #57789) other than the stream's last one, or a number that goes back (seq.h), is an engine
 * restart: the rank is cleared in one step, restarts counted, and, with a replay endpoint and
 * a first message past batch 0, a replay from 0 fetches what the new process sent before it.
 * Empty batches are heartbeats: consumed in sequence, they refresh last_event_ns and spec.c's
 * routed-but-silent clock and never touch the table (a duplicate-numbered one refreshes too).
 *
 * Counters (KV_POD_CTRS) this file maintains: last_event_ns, last_seq, batches, heartbeats,
 * events_per_s
 * (events in the last full one-second window), seq_gaps, seq_dups, restarts, replays_ok,
 * replays_truncated, replays_failed, decode_errors, queue_depth (messages read for the pod in
 * the last poll round; ING_READ_BUDGET means "at least that many were waiting"), connected
 * (connect mode: from the socket monitor, 1 while the TCP connection is up; bind mode: 1 after
 * the first message). apply.c maintains the others.
 *
 * Freshness gating (docs/DESIGN.md "Freshness gating"): while the pod replays a gap, or
 * (connect mode) its SUB is not connected, this file tells spec.c (spec_set_stream), which
 * flags the pod speculation-paused in the index (kvidx_pod_set_spec_paused, spec_paused = 1),
 * so readers stop counting its speculative records. spec.c also pauses it (spec_paused = 2)
 * when routes went to it and no event followed for --stale-limit; each applied batch
 * (spec_on_event) proves the pipeline alive again.
 *
 * Threads: everything here runs on the ingest thread with the writer mutex held (ingest.h).
 */
#ifndef KVIDX_INGEST_PODS_H
#define KVIDX_INGEST_PODS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "apply.h"
#include "config.h"
#include "emap.h"
#include "seq.h"
#include "spec.h"
#include "telemetry.h"
#include "wire.h"

#include <zmq.h>

#define ING_DRAIN_BUDGET 4096 /* route-ring messages consumed per drain */
#define ING_READ_BUDGET 256   /* messages read from one socket per poll round */
#define ING_SUB_HWM 100000    /* SUB receive high-water mark (vLLM's PUB uses 100,000) */

/* What every pod shares: set up by ingest.c. */
struct ing_shared {
	const struct ing_config *cfg;
	struct kvidx *w;
	void *zctx;
	struct emap emap;
	struct ing_apply ap;
	struct kvw_batch batch;   /* decode scratch, reused */
	struct ing_pod **pods;
	size_t npods, pods_cap;
	uint64_t monitor_seq;
	uint64_t last_tick_ns;
	struct ing_spec *spec;    /* speculation bookkeeping, NULL: none */
	/* --replay-on-start: the pods and models of the generation readers used at start
	 * (ingest.c), for pods whose model neither model= nor a topic has given yet. */
	struct ing_prev_pod {
		char name[KVIDX_POD_NAME_MAX], model[KVIDX_POD_NAME_MAX];
	} *prev;
	size_t nprev;
};

struct ing_pod;

/* One index pod: what its ranks' streams share. */
struct ing_group {
	char name[KVIDX_POD_NAME_MAX];  /* identity in the index, "" until known */
	char model[ING_MODEL_MAX];      /* model for keys: spec.model, else the topic's */
	struct ing_target tgt;          /* tgt.pod == -1 until registered */
	struct kv_tm_pod_buf local_ctr; /* counters before registration */
	struct ing_pod *rank[KV_POD_RANKS]; /* its streams, NULL where closed */
	unsigned nmembers;
	bool warned_model;
};

/* One rank's event stream of a pod. */
struct ing_pod {
	struct ing_pod_spec spec; /* connect mode: as configured (all ranks); bind mode: zero */
	bool bind_mode;
	struct ing_group *g;
	struct ing_stream st;     /* st.rank: this stream's rank */
	char ep[ING_ENDPOINT_MAX], rep[ING_ENDPOINT_MAX]; /* this rank's endpoints */

	void *sub, *mon, *dealer;
	bool connected, was_disconnected;

	struct seq_state seq;
	bool have_id;             /* the last sequence frame carried a publisher id */
	uint8_t pub_id[KVW_PUB_ID_LEN];

	bool replaying;
	uint64_t rp_from, rp_next, rp_last, rp_deadline;
	bool rp_got;
	bool rp_at_start; /* --replay-on-start: no sequence yet, a later first seq is fine */
	bool held;
	struct kvw_seqf held_sf;
	char held_model[ING_MODEL_MAX];
	void *held_buf;
	size_t held_len, held_cap;

	/* Bind mode: live messages that came on the shared socket while this rank replayed,
	 * applied in order once the replay is over (at most ING_BOUND_QUEUE; past that they are
	 * dropped and the next one's gap replays them). */
	struct ing_bound_msg *bq;
	size_t bq_n;

	uint64_t win_start_ns, win_events;
	uint32_t round_reads;
	uint32_t qd_cur, qd_prev; /* largest round_reads this and the previous minute */
	uint64_t qd_win_ns;
};

/* Creates a connect-mode pod for spec, one stream per rank (dp-ranks): SUB (+ monitor)
 * connected; registered in the index at once if spec has name=, else at its first message; a
 * replay from 0 started if --replay-on-start and spec has replay=. Returns rank 0's stream,
 * or NULL on error (logged; nothing left open). */
struct ing_pod *ing_pod_open(struct ing_shared *sh, const struct ing_pod_spec *spec,
			     uint64_t now);

/* Creates rank rank of the bind-mode pod named name (registered at once; a rank of a pod
 * already bound joins it): its replay endpoint rep at port + rank when rep is not "" (from
 * --bind-replay). NULL on error (logged). */
struct ing_pod *ing_pod_open_bound(struct ing_shared *sh, const char *name, const char *model,
				   unsigned rank, const char *rep, uint64_t now);

/* ep with r added to its port ("" stays ""): rank r's endpoint. 0, or -EINVAL (no room). */
int ing_endpoint_plus(const char *ep, unsigned r, char *out, size_t len);

#define ING_BOUND_QUEUE 1024

/* One live message of a bound rank that arrived while it replayed (ing_pod_live_bound). */
struct ing_bound_msg {
	struct kvw_seqf sf;
	char model[ING_MODEL_MAX];
	void *buf;
	size_t len;
};

/* A bound rank's live message: applied (ing_pod_live) after the ones queued while it
 * replayed, or queued itself while it replays. */
void ing_pod_live_bound(struct ing_shared *sh, struct ing_pod *p, const char *topic_model,
			const struct kvw_seqf *sf, const void *payload, size_t len, uint64_t now);

/* Applies a bound rank's queued live messages, in order, while it is not replaying. */
void ing_pod_bound_drain(struct ing_shared *sh, struct ing_pod *p, uint64_t now);

/* Closes the stream's sockets and frees p; its group goes with its last stream, and then
 * (remove) the pod leaves the index (kvidx_pod_remove). */
void ing_pod_close(struct ing_shared *sh, struct ing_pod *p, bool remove);

/* Connect mode: reads up to ING_READ_BUDGET messages from the SUB (returns how many). */
unsigned ing_pod_read_sub(struct ing_shared *sh, struct ing_pod *p);
/* Reads the replay DEALER until it would block or the replay ends. */
void ing_pod_read_replay(struct ing_shared *sh, struct ing_pod *p);
/* Drains socket-monitor events. */
void ing_pod_read_monitor(struct ing_shared *sh, struct ing_pod *p);

/*
 * One live message for p (bind mode: routed here by its topic). topic_model: the model part of
 * the message's topic. Applies the sequence rules, then decodes and applies.
 */
void ing_pod_live(struct ing_shared *sh, struct ing_pod *p, const char *topic_model,
		  const struct kvw_seqf *sf, const void *payload, size_t len, uint64_t now);

/* Periodic work: replay timeout, events_per_s window, queue_depth. */
void ing_pod_housekeeping(struct ing_shared *sh, struct ing_pod *p, uint64_t now);

/*
 * The daemon's schedule (ingest.c, ing_schedule(): the one place that decides what runs
 * where). The loop's pieces of work name the point they reached; the schedule drains route
 * commits, ticks the writer, gives the reaper its turn and does the round's housekeeping as
 * that point calls for.
 */
enum ing_point {
	ING_AT_START,   /* the index is open: the first tick */
	ING_BEFORE_POLL, /* about to wait on the network: the mutex goes to the reaper */
	ING_AFTER_POLL, /* the wait is over: the mutex comes back */
	ING_AT_WAKE,    /* zmq_poll returned (commits first: this round's events may confirm them) */
	ING_AT_EVENT,   /* between two events of a batch (apply.c's between hook) */
	ING_AT_MESSAGE, /* a live message was applied (SUB or bind socket) */
	ING_AT_REPLAY,  /* a replayed message was applied */
	ING_AT_SOCKET,  /* one socket's read budget is done */
	ING_AT_ROUND,   /* every readable socket was read: the end of the round */
};

/* Runs what point at calls for (now: the caller's clock, for the tick). Returns true when
 * there is more to do at once (a drain's or a peer link's budget ran out: poll again without
 * sleeping). */
bool ing_schedule(struct ing_shared *sh, enum ing_point at, uint64_t now);

/* Counter i of p's pod (shm once registered, local before). */
static inline void ing_pod_ctr_add(struct ing_pod *p, enum kv_pod_ctr i, uint64_t v)
{
	ing_ctr_add(&p->g->tgt, i, v);
}

/*
 * Receives one multipart message from sock without blocking: up to max frames into msgs
 * (initialised here; the caller closes *nframes of them, at most max), extra frames dropped.
 * Returns the total frame count (> max means frames were dropped), 0 if nothing was waiting
 * (EAGAIN), or -errno.
 */
int ing_recv_multipart(void *sock, zmq_msg_t *msgs, int max, int *nframes);

#endif /* KVIDX_INGEST_PODS_H */
