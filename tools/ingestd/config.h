/*
 * config.h — internal to kvidx-ingestd: its one job is the daemon's configuration, from
 * command-line flags and from a config file, and the --help text that documents both.
 *
 * The config file has one format: "key = value" lines whose keys are exactly the long flag
 * names (without "--"); '#' starts a comment (whole line, or after whitespace); blank lines
 * are ignored; "pod = ..." may repeat; a flag without a value (replay-on-start) takes
 * true/false/yes/no/1/0. Flags on the command line override the file's scalar settings; pods
 * from both are used. On SIGHUP ingestd re-reads only the file's pod list.
 */
#ifndef KVIDX_INGEST_CONFIG_H
#define KVIDX_INGEST_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "kvidx.h"
#include "log.h"

#define ING_ENDPOINT_MAX 256
#define ING_MODEL_MAX KVIDX_POD_NAME_MAX /* the index stores pod models in 64 bytes */

#define ING_TOPIC_MAX 256

/* One --pod: 'ENDPOINT[,replay=ENDPOINT][,name=IP:PORT][,model=MODEL][,topic=PREFIX]
 * [,dp-ranks=N]'. */
struct ing_pod_spec {
	char endpoint[ING_ENDPOINT_MAX]; /* the pod's PUB socket, ingestd connects a SUB to it */
	char replay[ING_ENDPOINT_MAX];   /* its replay ROUTER socket, "" = none */
	char name[KVIDX_POD_NAME_MAX];   /* identity override, "" = from the topic */
	char model[ING_MODEL_MAX];       /* model override, "" = from the topic */
	char topic[ING_TOPIC_MAX];       /* subscription prefix when topic_set, else the global */
	bool topic_set;
	unsigned dp_ranks;               /* data-parallel ranks, 1..KV_POD_RANKS (0 = 1) */
	bool from_file;                  /* listed in the config file (SIGHUP reloads those) */
	bool discovered;                 /* made by DNS discovery (discover.c owns those) */
	bool http_found;                 /* made by HTTP discovery (dischttp.c owns those) */
};

/* Pod discovery (discover.c): --discover-* and --config-watch. Durations in milliseconds. */
struct ing_discover_config {
	char dns[256];             /* name re-resolved for A records, "" = off */
	char http[2048];           /* --discover-http HOST:PORT,...: serving addresses asked, "" = off */
	uint32_t http_port;        /* --discover-http-port: DNS addresses asked over HTTP there */
	char server[64];           /* "IPv4:PORT" asked instead of resolv.conf's, "" = those */
	uint16_t port_events;      /* --discover-ports EVENTS,REPLAY,HTTP (REPLAY 0 = none) */
	uint16_t port_replay;
	uint16_t port_http;        /* the serving port: pods are named IP:HTTP */
	uint32_t interval_ms;      /* re-resolution period (default 5000) */
	uint32_t watch_ms;         /* --config-watch: stat() the config file this often, 0 = off */
	/* --discover-pod-attrs: model=, topic=, dp-ranks= of every discovered pod */
	char model[ING_MODEL_MAX];
	char topic[ING_TOPIC_MAX];
	bool topic_set;
	unsigned dp_ranks;
};

enum ing_ttl_policy {
	ING_TTL_STATIC = 0, /* one TTL for every pod */
	ING_TTL_ADAPTIVE,   /* per pod: clamp(Lq + backlog + slack, floor, cap), changed slowly */
};

/* Speculative lifecycle settings (spec.c). Durations in milliseconds. */
struct ing_spec_config {
	enum ing_ttl_policy policy;
	uint32_t ttl_ms;          /* static TTL; the adaptive policy's start (default 2000) */
	double percentile;        /* adaptive: Lq percentile of recent latency (default 0.99) */
	uint32_t backlog_ms;      /* adaptive: J part for subscriber backlog (default 250) */
	bool backlog_measured;    /* adaptive: J's backlog from the pod's lag histogram */
	uint32_t slack_ms;        /* adaptive: J part for jitter and resolution (default 100) */
	uint32_t floor_ms;        /* adaptive: smallest TTL (default 200) */
	uint32_t cap_ms;          /* adaptive: largest TTL, the largest stale window (default 5000) */
	uint64_t min_samples;     /* adaptive: recent samples before adapting (default 200) */
	uint32_t interval_ms;     /* adaptive: re-evaluation period (default 10000) */
	double max_step;          /* adaptive: largest change per interval, a fraction (0.25) */
	uint32_t late_window_ms;  /* expiry -> late confirmation window; 0: max(10 s, 5 x TTL) */
	uint32_t stale_limit_ms;  /* routes without events this long pause speculation (5000) */
	uint64_t corr_map;        /* route commits remembered for outcomes (default 65536) */
	uint32_t load_timeout_ms; /* load view: a request without outcome retired after (120000) */
	uint64_t late_map;        /* expired predictions remembered (default 131072) */
	uint32_t reap_interval_ms; /* reaper wake-up period (default 10) */
	uint32_t reap_pass_ms;    /* time for the reaper to walk the whole table (default 1000) */
};

/* The cluster link (cluster.c, docs/cluster.md); urls "" = off. */
struct ing_cluster_config {
	char urls[1024];          /* --cluster URL[,URL...] */
	char name[33];            /* --cluster-name: subject scope, [A-Za-z0-9_-] (default kvidx) */
	char user[128], password[256]; /* --cluster-user / cluster-password (config file only) */
	char creds[1024];         /* --cluster-creds FILE: NATS credentials (JWT + NKey seed) */
	char ca[1024];            /* --cluster-ca FILE: CA certificates; TLS is required then */
	uint32_t clock_skew_ms;   /* --cluster-clock-skew: bound on the hosts' clock offset (5ms) */
	uint32_t queue;           /* --cluster-queue: messages per direction (default 1024) */
};
void ing_cluster_config_init(struct ing_cluster_config *c);
/* Sets one cluster* option (cluster.c). 0 or -EINVAL with a message. */
int ing_cluster_config_set(struct ing_cluster_config *c, const char *key, const char *value,
			   bool from_file, char *err, size_t errlen);

struct ing_config {
	char name[KVIDX_NAME_MAX];
	struct kvidx_geometry geo;     /* 0 fields: the library's defaults */
	enum kvidx_key_algo algo;
	char seed[64];
	uint32_t block_size;           /* index block size (default 16) */
	gid_t group;                   /* 0: segments private to the user */
	uint32_t stall_ms;             /* 0: library default */
	uint64_t engine_map;           /* engine-key map entries, 0: 4 x capacity */
	uint32_t replay_timeout_ms;    /* silence on the replay socket that fails a replay */
	bool replay_on_start;
	char bind[ING_ENDPOINT_MAX];   /* "" = no bind-mode socket */
	uint32_t bind_ranks;           /* --bind-ranks: rank r's SUB at the port + r (0 = 1) */
	char bind_replay[2048];        /* --bind-replay NAME=ENDPOINT,...: bound pods' replay */
	char topic_filter[ING_TOPIC_MAX]; /* SUB prefix of pods without topic= (default "") */
	unsigned remote_tier;          /* locality REMOTE blocks: 0 skipped, else this tier */
	bool ready_any;                /* --ready-streams any: /readyz with one stream up */
	char config_path[4096];        /* "" = no config file */
	struct ing_spec_config spec;
	struct ing_cluster_config cluster;
	struct ing_discover_config disc;
	char metrics[ING_ENDPOINT_MAX]; /* "" = no metrics endpoint; else HOST:PORT */
	enum ilog_level log_level;
	bool help;
	struct ing_pod_spec *pods;
	size_t npods, pods_cap;
};

/* Defaults; no allocation. */
void ing_config_init(struct ing_config *c);
void ing_config_free(struct ing_config *c);

/*
 * Parses argv: finds --config first and loads that file, then applies the command-line flags
 * on top. Returns 0, or -EINVAL (bad flag or value, message in err), or -errno reading the
 * file. On --help, c->help is set and parsing stops early with 0.
 */
int ing_config_parse_args(struct ing_config *c, int argc, char **argv, char *err, size_t errlen);

/* Loads path ("key = value" lines) into c, pods marked from_file. 0 or -errno / -EINVAL. */
int ing_config_load_file(struct ing_config *c, const char *path, char *err, size_t errlen);

/* Sets one option by its long name. from_file: the value came from the config file. */
int ing_config_set(struct ing_config *c, const char *key, const char *value, bool from_file,
		   char *err, size_t errlen);

/* Parses one pod spec. 0 or -EINVAL with a message. */
int ing_pod_spec_parse(const char *s, struct ing_pod_spec *out, char *err, size_t errlen);

/* Two specs describe the same subscription (endpoint, replay, name and model all equal). */
bool ing_pod_spec_equal(const struct ing_pod_spec *a, const struct ing_pod_spec *b);

/* The replay endpoint --bind-replay gives the bound pod name (rank 0's), "" if none. */
void ing_bind_replay(const struct ing_config *c, const char *name, char *out, size_t len);

/* Checks the whole configuration (at least one pod or --bind, no duplicate endpoints). */
int ing_config_check(const struct ing_config *c, char *err, size_t errlen);

/*
 * Parses a duration in the tools' one grammar (tc_parse_duration(): "250ms", "2s", "1.5s",
 * "0.5m"; a unit is required but for 0) into whole milliseconds (at most max_ms; finer
 * values are refused). 0 or -EINVAL with a message naming key.
 */
int ing_parse_duration(const char *key, const char *v, uint64_t max_ms, uint32_t *out_ms,
		       char *err, size_t errlen);

/*
 * Parses a --metrics-listen value (--metrics is its older name): PORT alone (loopback,
 * 127.0.0.1:PORT), or HOST:PORT with HOST an IPv4 address, localhost, 0.0.0.0 or * (every
 * address), or [IPV6]; PORT 1-65535; no host names (no DNS at start-up). The endpoint has no
 * authentication: a non-loopback address is the operator's explicit choice (a pod IP that
 * Prometheus scrapes). Writes the normalized HOST:PORT to out (if not NULL; cap bytes).
 * 0 or -EINVAL with a message in err.
 */
int ing_metrics_addr_parse(const char *v, char *out, size_t cap, char *err, size_t errlen);

/* ing_metrics_addr_parse() without the output. */
int ing_metrics_addr_check(const char *v, char *err, size_t errlen);

/* Prints the --help text. */
void ing_config_usage(FILE *f);

/* Formats a number of keys with a binary suffix where exact (1048576 -> "1Mi"). */
const char *ing_fmt_count(uint64_t v, char *buf, size_t len);

#endif /* KVIDX_INGEST_CONFIG_H */
