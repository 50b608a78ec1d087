/*
 * ingest.h — internal to kvidx-ingestd: its one job is the daemon's event loop: opening the
 * index and the ZeroMQ context, the bind-mode socket, polling every pod's sockets in one
 * zmq_poll loop (1 ms timeout, so kvidx_writer_tick() runs every millisecond), SIGHUP
 * reconciliation of the config file's pod list, and a clean shutdown.
 *
 * Threads: one. The loop, the apply path and the writer tick all run on the calling thread,
 * so the writer API's "caller serialises" contract holds trivially. Fairness: each socket is
 * read at most ING_READ_BUDGET messages per round, so a flooding pod delays others by at most
 * one budget; a dead pod costs nothing (its SUB is simply never readable).
 */
#ifndef KVIDX_INGEST_INGEST_H
#define KVIDX_INGEST_INGEST_H

#include <signal.h>
#include <stdbool.h>

#include "config.h"
#include "pods.h"

struct ingestd {
	struct ing_config *cfg; /* borrowed; pods of cfg are the initial set */
	struct ing_shared sh;
	void *bind_sub;
	struct ilog_limit bind_lim;
	zmq_pollitem_t *items;
	struct ing_pod **item_pod;
	unsigned char *item_kind;
	size_t items_cap;
	uint64_t last_house_ns;
};

/*
 * Opens the index (kvidx_writer_open with cfg's geometry) and subscribes to every pod. Returns
 * 0, or a negative errno / -KVIDX_E* (logged; d is cleaned up).
 */
int ingestd_open(struct ingestd *d, struct ing_config *cfg);

/* The one-line start-up summary: geometry and pods. */
void ingestd_summary(const struct ingestd *d);

/*
 * Runs the loop until *stop is set. When *hup is set, clears it and re-reads the config file's
 * pod list. Returns 0 on a requested stop, or a negative errno if polling failed for good.
 */
int ingestd_run(struct ingestd *d, volatile sig_atomic_t *stop, volatile sig_atomic_t *hup);

/* Re-reads cfg->config_path and reconciles its pods (added: subscribed; removed: unsubscribed
 * and removed from the index). Command-line pods are kept. 0, or -errno (nothing changed). */
int ingestd_reload(struct ingestd *d);

/* Closes every socket and the context, then the writer without unlinking (readers keep the
 * last state). */
void ingestd_close(struct ingestd *d);

#endif /* KVIDX_INGEST_INGEST_H */
