/*
 * ingest.h — internal to kvidx-ingestd: its one job is the daemon's event loop: opening the
 * index and the ZeroMQ context, the bind-mode socket, polling every pod's sockets in one
 * zmq_poll loop (1 ms timeout, so kvidx_writer_tick() runs every millisecond), SIGHUP
 * reconciliation of the config file's pod list, and a clean shutdown.
 *
 * Route commits: right after each poll wake-up, between every two events
 * applied and after every batch (ing_pod_drain(): a round of busy pods applies up to
 * ING_READ_BUDGET batches of up to hundreds of events each, a commit must not wait for that), and at the end of each round the loop drains the
 * routers' rings (spec_drain, at most ING_DRAIN_BUDGET messages), so a prediction is in the
 * table before the events after it are applied and can be confirmed by them. An idle loop
 * drains at least every millisecond (the poll timeout), at once when a commit rings the
 * doorbell.
 *
 * Threads: two, plus the metrics server's (which only reads the segment).
 *   ingest thread  the loop: sockets, the apply path, route drain, writer tick, housekeeping.
 *   reaper thread  spec.c: kvidx_expire and the late window, every --reap-interval.
 * Both make writer calls, so both hold d->lock (the writer mutex) while they do: the loop
 * takes it after zmq_poll returns and releases it before polling again, and in between lets a
 * waiting reaper in after each socket's budget (spec_yield). The writer API's "caller
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
	void *bind_sub;
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
