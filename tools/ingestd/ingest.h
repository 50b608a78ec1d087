/*
 * ingest.h — internal to kvidx-ingestd: its one job is the daemon's event loop: opening the
 * index and the ZeroMQ context, the bind-mode socket, polling every pod's sockets in one
 * zmq_poll loop (1 ms timeout, so kvidx_writer_tick() runs every millisecond), SIGHUP
 * reconciliation of the config file's pod list, and a clean shutdown.
 *
 * The schedule: ing_schedule() (declared in pods.h, the one place that decides) is called at
 * each point of the loop's work (enum ing_point): right after each poll wake-up, between two
 * events of a batch (apply.c's between hook), after each message (pods.c, the bind socket),
 * after each socket's budget and at the end of each round. It drains the routers' rings
 * (spec_drain, at most ING_DRAIN_BUDGET messages) at the wake-up, between events, after each
 * live message and at the round's end, so a prediction is in the table before the events
 * after it are applied and can be confirmed by them (a round of busy pods applies up to
 * ING_READ_BUDGET batches of hundreds of events per socket: a commit must not wait for
 * that); ticks the writer at most once a millisecond; and gives the reaper the mutex. An
 * idle loop drains at least every millisecond (the poll timeout), at once when a commit
 * rings the doorbell.
 *
 * Threads that make writer calls: two (the metrics server's only reads the segment; the
 * cluster link's and DNS discovery's meet the loop through rings and a slot, never the index).
 *   ingest thread  the loop: sockets, the apply path, route drain, writer tick, housekeeping.
 *   reaper thread  spec.c: kvidx_expire and the late window, every --reap-interval.
 * Both hold d->lock (the writer mutex) while they make writer calls. The loop holds it all the
 * time except while it waits in zmq_poll: that window is the reaper's (spec_wait_begin/end);
 * when a wake-up is due the schedule also lends the reaper one chunk after each socket's
 * budget (spec_reaper_turn). spec.h spells out the rules. The writer API's "caller
 * serialises" contract and docs/DESIGN.md "One writer, and one mutator inside it" hold by
 * that mutex alone. Fairness: each socket is read at most ING_READ_BUDGET messages per round,
 * so a flooding pod delays others by at most one budget; a dead pod costs nothing (its SUB is
 * simply never readable).
 */
#ifndef KVIDX_INGEST_INGEST_H
#define KVIDX_INGEST_INGEST_H

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>

#include "config.h"
#include "discover.h"
#include "load.h"
#include "pods.h"
#include "spec.h"


struct ingestd {
	struct ing_config *cfg; /* borrowed; pods of cfg are the initial set */
	struct ing_shared sh;
	void *bind_sub[KV_POD_RANKS]; /* --bind: rank r's SUB at the endpoint's port + r */
	unsigned nbind;
	struct ilog_limit bind_lim;
	zmq_pollitem_t *items;
	struct ing_pod **item_pod;
	unsigned char *item_kind;
	size_t items_cap;
	pthread_mutex_t lock;   /* the writer mutex, see above */
	bool lock_ok;
	struct ing_spec spec;
	bool spec_ok;
	struct ing_load load; /* the load view (load.h); spec.load points here */
	bool published; /* the generation is visible to readers (see maybe_publish()) */
	int bell_fd;    /* kvidx_writer_doorbell(), in the poll set; -1 if unavailable */
	struct ing_cluster *cluster; /* --cluster link (cluster.h), NULL: none */
	uint64_t ready_ns; /* when readiness was last reported (report_ready()) */
	struct ing_discover disc; /* DNS discovery and the config watch (discover.h) */
};

/*
 * Opens the index (kvidx_writer_open with cfg's geometry), subscribes to every pod and starts
 * the reaper thread. Returns 0, or a negative errno / -KVIDX_E* (logged; d is cleaned up).
 */
int ingestd_open(struct ingestd *d, struct ing_config *cfg);

/* The one-line start-up summary: geometry and pods. */
void ingestd_summary(const struct ingestd *d);

/*
 * Runs the loop until *stop is set. When *hup is set, clears it and re-reads the config file's
 * pod list. Returns 0 on a requested stop, or a negative errno if polling failed for good.
 */
int ingestd_run(struct ingestd *d, volatile sig_atomic_t *stop, volatile sig_atomic_t *hup);

/* Re-reads cfg->config_path and reconciles its pods (ing_pods_reconcile(): added: subscribed;
 * removed: unsubscribed and removed from the index). Command-line and discovered pods are
 * kept. why ("SIGHUP", "config watch") prefixes the log lines. 0, or -errno (nothing
 * changed). */
int ingestd_reload(struct ingestd *d, const char *why);

/* Stops the reaper, closes every socket and the context, then the writer without unlinking
 * (readers keep the last state). Predictions still in their late window are not counted. */
void ingestd_close(struct ingestd *d);

#endif /* KVIDX_INGEST_INGEST_H */
