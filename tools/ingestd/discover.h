/*
 * discover.h — internal to kvidx-ingestd: its one job is finding pods rather than having
 * them typed: DNS discovery (--discover-dns, a Kubernetes headless Service re-resolved every
 * --discover-interval), the watched config file (--config-watch) and HTTP discovery
 * (--discover-http, its poller in dischttp.h). All end in
 * ing_pods_reconcile(), the one add/remove path SIGHUP's reload uses too.
 *
 * DNS: a helper thread resolves the name (A records, through libresolv's res_nsearch, so the
 * search domains of /etc/resolv.conf apply; --discover-dns-server IPv4:PORT asks that server
 * instead), because resolution blocks for up to seconds and the writer's loop must not. Each
 * answer is a complete set of addresses, so the handoff is a single slot that the newest
 * answer overwrites (an answer the loop has not taken yet is superseded, nothing is lost):
 * three buffers (the thread's, the slot, the loop's) swapped by pointer under a mutex that the
 * thread holds for a swap and the loop only try-locks, so the loop never waits. Every address
 * becomes a pod spec: tcp://IP:EVENTS, replay tcp://IP:REPLAY (unless 0), name IP:HTTP (the
 * serving address routers send requests to, stable while the pod keeps its IP, at most 21
 * bytes, within the index's pod-name limit). An answer without an address (NXDOMAIN, no A
 * record) removes every discovered pod; a failed resolution (timeout, SERVFAIL, a malformed
 * answer) changes nothing. At most DISC_MAX_ADDRS addresses are taken from one answer.
 *
 * Config watch: every --config-watch the loop stat()s the config file (following symlinks, so
 * a Kubernetes ConfigMap's swapped ..data link is seen, which inotify on the file is not);
 * a change of inode, size, mtime or ctime triggers the SIGHUP reload.
 *
 * Metrics (rendered after the index's own by the --metrics thread, from atomics):
 * kvidx_discovery_resolutions_total, kvidx_discovery_resolution_failures_total,
 * kvidx_discovery_pods_added_total, kvidx_discovery_pods_removed_total,
 * kvidx_discovery_pods (gauge), kvidx_config_watch_reloads_total.
 *
 * Threads: discover_poll() and ing_pods_reconcile() run on the ingest thread with the writer
 * mutex held; the resolver thread touches only its buffers, the slot and the counters.
 */
#ifndef KVIDX_INGEST_DISCOVER_H
#define KVIDX_INGEST_DISCOVER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>

#include "config.h"
#include "log.h"
#include "pods.h"

#define DISC_MAX_ADDRS 4096 /* addresses taken from one answer (KVIDX_MAX_PODS) */
#define DISC_ADDR_LEN 16    /* "255.255.255.255" */

/* One resolution's result. */
struct disc_set {
	bool ok;                 /* false: the resolution failed, err says why */
	size_t n;                /* addresses, sorted, distinct */
	bool truncated;          /* the answer had more than DISC_MAX_ADDRS */
	char err[160];
	char addr[DISC_MAX_ADDRS][DISC_ADDR_LEN];
};

struct ing_discover {
	const struct ing_config *cfg;
	/* DNS */
	bool dns_on, thr_ok;
	pthread_t thr;
	pthread_mutex_t mu;      /* guards slot, fresh, stop */
	pthread_cond_t cv;       /* wakes the thread to stop */
	bool stop, fresh;
	struct disc_set *work, *slot, *mine; /* the thread's, the handoff, the loop's */
	bool last_ok;            /* the loop's view: the last answer succeeded (logs changes) */
	struct ilog_limit lim;
	/* config watch */
	struct stat st;
	bool st_ok;
	uint64_t next_watch_ns;
	/* HTTP discovery (dischttp.h), NULL when off */
	struct disc_http *http;
	/* counters, for the metrics thread */
	_Atomic uint64_t resolutions, failures, added, removed, pods, watch_reloads;
};

/* Sets up what cfg->disc asks for and starts the resolver thread (its first resolution at
 * once). 0, or a negative errno (logged; nothing left running). */
int discover_open(struct ing_discover *ds, const struct ing_config *cfg);

/* Stops the thread (waiting for a resolution in progress: at most a few seconds) and frees
 * the buffers. Safe on a zeroed or already closed ds. */
void discover_close(struct ing_discover *ds);

/*
 * Loop side, every round: takes a new DNS answer if one is waiting and reconciles the
 * discovered pods with it. Returns true when the watched config file changed (the caller then
 * runs the reload).
 */
bool discover_poll(struct ing_discover *ds, struct ing_shared *sh, uint64_t now);

/* A config reload happened because discover_poll() returned true: counted. */
void discover_count_reload(struct ing_discover *ds);

/*
 * The one add/remove path (SIGHUP, the watched file, DNS): pods for which mine(p) holds and
 * whose spec is not among want[0..n) are unsubscribed and removed from the index (their
 * entries dropped in one step, kvidx_pod_remove); specs of want not subscribed yet are
 * subscribed, unless another subscription already has the endpoint (skipped, warned through
 * lim). why prefixes the log lines ("SIGHUP", "DNS vllm.ns.svc"). Counts into *added,
 * *removed.
 */
void ing_pods_reconcile(struct ing_shared *sh, const struct ing_pod_spec *want, size_t n,
			bool (*mine)(const struct ing_pod *p), const char *why,
			struct ilog_limit *lim, size_t *added, size_t *removed, uint64_t now);

/* How many pods mine(p) holds for (rank-0 streams: one per pod). */
size_t ing_pods_count(const struct ing_shared *sh, bool (*mine)(const struct ing_pod *p));

/* True when the pods mine(p) holds for are exactly want[0..n): nothing to reconcile. */
bool ing_pods_in_step(const struct ing_shared *sh, const struct ing_pod_spec *want, size_t n,
		      bool (*mine)(const struct ing_pod *p));

/* A discovery thread's pause between two rounds: up to ms on cv (mu held), or until *stop. */
void disc_sleep(pthread_cond_t *cv, pthread_mutex_t *mu, const bool *stop, uint32_t ms);

/* One metric with its HELP and TYPE lines. */
void discover_metric(FILE *f, const char *name, const char *type, const char *help, uint64_t v);

/* The discovery metrics in Prometheus text format (see above). */
void discover_render(FILE *f, void *ds);

#endif /* KVIDX_INGEST_DISCOVER_H */
