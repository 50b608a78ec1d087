/*
 * route.h — internal to kvidx-route: the state its parts share, and what each offers the
 * others. Everything runs on one thread around one curl_multi_poll() loop (main.c); nothing
 * here is thread-safe, and nothing blocks but that poll. The one exception is offload.c's
 * helper thread, which parses the front's large JSON bodies and touches nothing else.
 * Several processes scale it: each is one loop with one reader handle on the index (the
 * mission's "router workers").
 *
 * The parts, one job a file:
 *   main.c      the command line, the poll loop, signals, the mode chosen
 *   pick.c      the routing decision (keys, score, pick, commit), the pods' load and health:
 *               the part a router embedding kvidx needs
 *   policy.c    the policies (--policy): a cost per pod from its match and load, the pick
 *   client.c    HTTP/1.1 requests to pods with keep-alive (libcurl's multi interface)
 *   answer.c    reading answers: server-sent events, usage, OpenAI-style errors (jansson)
 *   front.c     --listen: the OpenAI-compatible front (libmicrohttpd)
 *   offload.c   the front's helper thread: large bodies parsed off the loop
 *   load.c      the load generator: lines, files, the synthetic workload, a trace; to pods
 *               or fronts
 *   trace.c     a Mooncake-format request trace (--trace), its hash ids made tokens
 *   validate.c  --validate: docs/ttl.md's paired-gap validation against live pods
 *   stats.c     latency samples, percentiles, per-kind tallies and their summary lines
 */
#ifndef KVIDX_ROUTE_H
#define KVIDX_ROUTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <curl/curl.h>
#include <pthread.h>

#include "kvidx.h"
#include "policy.h"

#define PROG "kvidx-route"
#define NS_PER_MS 1000000ull
#define NS_PER_S 1000000000ull
#define MAX_PODS 256
#define POD_QUEUE 64 /* requests per pod the fluid prefill queue tells apart (pick.c) */
#define MAX_FRONTS 64
#define URL_MAX 512
#define MAX_PROMPT_TOKENS (1u << 22)
#define ROUTE_VOCAB 50000u /* synthetic tokens are drawn from [0, ROUTE_VOCAB) */

/* ---- decisions ---------------------------------------------------------------------------- */

enum kind { K_PREDICTED, K_CONFIRMED, K_NOMATCH, K_COUNT };
extern const char *const kind_name[K_COUNT];

/* ---- options (main.c) --------------------------------------------------------------------- */

enum mode { M_LOAD, M_FRONT, M_VALIDATE };

struct pod {
	char name[KVIDX_POD_NAME_MAX]; /* as in the index: the pod's ip:port */
	char url[URL_MAX];             /* its base URL, http://host:port, no trailing '/' */
	bool prefill;                  /* a prefill pod (P/D), not a decode pod */
	int idx;                       /* pod index in the index, -1 while unknown */
	bool warned;                   /* "not in the index" said once */
	uint32_t outstanding;          /* requests sent, not answered */
	uint64_t pending_prefill;      /* uncached prompt tokens of the requests outstanding */
	uint64_t active_tokens;        /* prompt tokens of the requests outstanding */
	double backlog;                /* prefill tokens queued, as of backlog_ns (pick.c) */
	uint64_t backlog_ns;
	double q_rem[POD_QUEUE];       /* that backlog request by request, oldest first (a */
	uint32_t q_head, q_len;        /* ring; the newest entry takes any overflow) */
	/* The index's load view (pick.c, load_of): this router's part of it, and the others' */
	uint64_t view_reqs, view_tokens; /* this router's committed requests counted on it */
	uint64_t ret_reqs[2], ret_tokens[2], ret_epoch; /* ... ended lately: maybe still counted */
	double others_backlog;         /* other routers' prefill queued here, as of backlog_ns */
	uint64_t others_seen;          /* the others' tokens in the view at the last look */
	double work;                   /* uncached tokens sent, decayed, as of work_ns (pick.c) */
	uint64_t work_ns;
	uint64_t routed, failures;
	uint64_t down_until;           /* marked down (unreachable) until then */
};

struct opts {
	enum mode mode;
	const char *name, *model, *file, *listen;
	bool synthetic, poisson, quiet, json, fakepods;
	struct pod pods[MAX_PODS];
	int npods, nprefill;
	const char *fronts[MAX_FRONTS]; /* --front URLs, then the --join-front ones */
	int nfronts, njoin;            /* njoin: the last njoin of them join at join_after */
	double join_after;             /* --join-after, seconds from the start */
	uint64_t prefixes, prefix_blocks, suffix_blocks, count, seed, max_tokens, concurrency;
	double rate, duration, spec_weight, followups, followup_ms;
	const char *trace;             /* --trace FILE */
	double trace_speedup;
	uint64_t trace_limit;
	bool trace_dump;
	enum policy policy;
	double prefill_rate;           /* --pod-prefill-rate: tokens/s */
	double pod_time_scale;         /* --pod-time-scale: pod model time per wall time */
	double balance_slack;          /* --balance-slack (kvidx's guard; 0: none) */
	double balance_half_life;      /* --balance-half-life, seconds of pod time */
	double balance_margin_ms;      /* --balance-margin-ms, of prefill at --pod-prefill-rate */
	uint64_t pod_max_num_seqs, pod_kv_blocks;
	uint64_t reply_timeout_ms, connect_timeout_ms, down_ms, tries;
	uint64_t max_body;             /* --max-body: request body bytes the front takes */
	uint64_t keepalive_requests;   /* --keepalive-requests: answers per connection (0: any) */
	bool stream, text;
	/* validation */
	uint64_t pairs, stagger_ms, delay_ms;
	const char *gaps, *scenarios;
};

/* ---- the routing decision (pick.c) -------------------------------------------------------- */

struct router {
	struct opts *o;
	struct kvidx_reader *r;
	struct kvidx_weights weights;
	enum kvidx_key_algo algo;
	uint32_t bs;
	uint64_t root, gen;
	char seed[64];
	uint64_t key_root;   /* route_key_context(): the root of the next keys */
	const char *key_salt;
	uint64_t *keys;
	size_t keys_cap;
	struct kvidx_score *rows;
	int cand[MAX_PODS];
	size_t ncand;
	int rr;      /* round-robin cursor over opts.pods */
	struct pol_params pp;
	double confirm[MAX_PODS];  /* per opts.pods index: speculative routes confirmed in time */
	uint64_t next_rates_ns;
	uint64_t next_refresh_ns, next_missing_ns;
	uint64_t commits_dropped, reports_dropped, retries, score_failed;
};

/* A decision: which pod (index into opts.pods), on what match, committed or not. */
struct decision {
	int cand, prefill;           /* opts.pods indices; prefill -1 without P/D */
	enum kind kind;
	uint32_t blocks, spec_blocks, nkeys;
	double score;
	double cost;                 /* the policy's cost of the pick (kvidx: TTFT added, s) */
	uint32_t ntok, uncached;     /* prompt tokens; those the match did not promise */
	bool held;                   /* counted in the pods' load (route_load_*) */
	bool committed;
	int pod, prefill_pod;        /* index pod indices committed, -1 if none */
};

/* Attaches to --name, learns the key scheme. 0, or -1 after saying why. */
int router_attach(struct router *rt, struct opts *o);
void router_close(struct router *rt);

/*
 * Routes a prompt: keys, score, pick among the pods that are up and not in tried (a bit
 * per opts.pods index; all down: the least recently failed), commit with corr. Never
 * blocks: scoring is wait-free, a commit that finds the ring full is dropped and counted.
 * Returns 0, or -1 if every decode pod is in tried.
 */
int route_pick(struct router *rt, const uint32_t *tokens, size_t ntok, uint64_t corr,
	       const uint64_t *tried, struct decision *d, uint64_t now);

/*
 * Keys of the next route_pick() calls: rooted at model (a LoRA adapter's name, say; NULL:
 * --model) and with salt (vLLM's cache_salt; NULL or "": none) on block 0.
 */
void route_key_context(struct router *rt, const char *model, const char *salt);

/* The request key of each full block of tokens (the router's own buffer, *n keys). */
const uint64_t *route_keys(struct router *rt, const uint32_t *tokens, size_t ntok, size_t *n);

/* Reports the outcome of d's request to the index. */
void route_report(struct router *rt, const struct decision *d, uint64_t corr,
		  uint32_t cached, uint32_t prompt_tokens);

/*
 * The router's own view of the pods' load: route_load_start() when d's request is sent
 * (outstanding, its uncached tokens into the pod's prefill backlog and its pending prefill,
 * its prompt as active tokens), route_load_end() when it is over (once; a d never started
 * is left alone).
 */
void route_load_start(struct router *rt, struct decision *d);
void route_load_end(struct router *rt, struct decision *d);

/* What d's match promised in cached tokens (a pod never reports a whole prompt cached). */
uint32_t route_expected(const struct router *rt, const struct decision *d, uint32_t ntok);

/* Looks every pod's index in the index up again. */
void route_refresh(struct router *rt);

/* Marks pod p unreachable for --down-ms. */
void pod_down(struct router *rt, struct pod *p, uint64_t now);
bool pod_is_up(const struct pod *p, uint64_t now);

/* ---- HTTP to pods (client.c) -------------------------------------------------------------- */

struct call;
typedef void (*call_head_fn)(struct call *c);
typedef size_t (*call_data_fn)(struct call *c, const char *p, size_t n);
typedef void (*call_done_fn)(struct call *c, CURLcode rc);

/* One HTTP request in flight. The caller owns it; client.c fills the marked fields. */
struct call {
	CURL *easy;                 /* client.c */
	struct curl_slist *hdrs;    /* the caller's; freed by call_release() */
	char *body;                 /* the request body, owned (freed by call_release()) */
	size_t len;
	call_head_fn on_head;       /* status and headers are in (status >= 200) */
	call_data_fn on_data;       /* body bytes: return n, or CURL_WRITEFUNC_PAUSE */
	call_done_fn on_done;       /* over: rc CURLE_OK or why not; the call is idle again */
	void *arg;
	bool active, head_done, paused, abort_after_upload;
	long status;                /* client.c: the HTTP status, once head_done */
	char ctype[128];            /* client.c: Content-Type of the answer */
	uint64_t t_first;           /* client.c: when the first body byte came */
	char err[CURL_ERROR_SIZE];  /* client.c */
};

struct client {
	CURLM *multi;
	int running;
	uint64_t started, failed;
};

int client_init(struct client *cl);
void client_free(struct client *cl);

/*
 * Starts a request: POST body (method "POST") or GET; url is copied. timeout_ms bounds the
 * whole transfer (0: none), connect_ms the connection. 0, or -1 (no memory, bad handle).
 */
int call_start(struct client *cl, struct call *c, const char *method, const char *url,
	       long timeout_ms, long connect_ms);

/* Abandons c without calling on_done (never from inside one of its callbacks). */
void call_cancel(struct client *cl, struct call *c);

/* Unpauses c's body. */
void call_resume(struct call *c);

/* Frees c's headers and body; c may then be reused. */
void call_release(struct call *c);

/* Adds "Name: value" to c's request headers. */
void call_header(struct call *c, const char *name, const char *value);

/* Runs transfers and calls on_done for those that ended. */
void client_pump(struct client *cl);

/*
 * Waits for the transfers' sockets, the extra descriptors (revents filled) or timeout_ms.
 * Returns 0, or -1 on a poll failure.
 */
int client_wait(struct client *cl, struct curl_waitfd *extra, unsigned nextra, int timeout_ms);

/*
 * client_wait() with extra[0] the signalfd of SIGTERM and SIGINT (nextra >= 1). Returns 1 when
 * a signal was read from it (the caller stops), 0 otherwise, -1 on a poll failure.
 */
int client_wait_sig(struct client *cl, struct curl_waitfd *extra, unsigned nextra,
		    int timeout_ms);

/* ---- work off the loop (offload.c) -------------------------------------------------------- */

/* A job: work() on the helper thread, then done() on the loop's. */
struct job {
	void (*work)(struct job *j);
	void (*done)(struct job *j);
	struct job *next;
};

struct offload {
	pthread_t th;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct job *todo, *done;
	bool stop, started;
	CURLM *wake;   /* curl_multi_wakeup() on it when a job is done */
};

/* Starts the helper thread. 0, or -1. */
int offload_start(struct offload *ol, CURLM *wake);
/* Queues j; its work() runs on the helper thread. */
void offload_submit(struct offload *ol, struct job *j);
/* Runs done() of every job finished since the last call (on the caller's thread). */
void offload_collect(struct offload *ol);
/* Stops the thread after the work it runs; queued jobs never run, finished ones are not
 * collected. */
void offload_stop(struct offload *ol);

/*
 * The body of a completion request for a token-id prompt, in a malloc'd buffer of *len bytes:
 * model (escaped), prompt, max_tokens, stream, and with stream the usage asked for
 * (stream_options.include_usage), as vLLM reports cached tokens only then.
 */
char *completion_body(const char *model, const uint32_t *toks, size_t n, uint64_t max_tokens,
		      bool stream, size_t *len);

/* Whether rc means the pod could not be reached at all (then it is marked down). */
bool call_unreachable(const struct call *c, CURLcode rc);

/* call_release(), and the handle freed (c must not be active). */
void call_destroy(struct call *c);

/* ---- answers (answer.c) ------------------------------------------------------------------- */

/* Splits a byte stream into server-sent events, each ending in a blank line. */
struct sse {
	char *buf;
	size_t len, cap;
};

/*
 * Feeds n bytes; for every complete event calls fn(arg, event, len) with the event's bytes
 * (its blank line included) and returns the number of events.
 */
size_t sse_feed(struct sse *s, const char *p, size_t n,
		void (*fn)(void *arg, const char *ev, size_t len), void *arg);
void sse_free(struct sse *s);

/* What an answer's usage says. */
struct usage {
	bool have;
	uint32_t prompt_tokens, completion_tokens, cached_tokens;
};

/*
 * The usage of a JSON answer or of one server-sent event ("data: {...}"). Returns true if it
 * had a non-null usage. *usage_only is set when the event is a usage chunk (choices []).
 */
bool usage_parse(const char *p, size_t n, bool sse, struct usage *u, bool *usage_only);

/* ---- latency samples and tallies (stats.c) ------------------------------------------------ */

/* Samples in ms (up to a cap, then a reservoir), for percentiles. */
struct samples {
	double *v;
	size_t n, cap, seen;
	uint64_t rng;
};

void samples_add(struct samples *s, double v);
/* The q-quantile (0..1) of the samples, 0 without any. Sorts them. */
double samples_q(struct samples *s, double q);
double samples_mean(const struct samples *s);
void samples_free(struct samples *s);

/* Per decision kind: requests, answers, TTFT, cached and prompt tokens. */
struct tally {
	uint64_t n[K_COUNT], ok[K_COUNT], cached[K_COUNT], prompt[K_COUNT], false_warm[K_COUNT];
	uint64_t wasted;
	struct samples ttft[K_COUNT], total[K_COUNT];
};

void tally_free(struct tally *t);
/* One line per kind on f (text), or the members of a JSON object (json). */
void tally_print(struct tally *t, FILE *f, bool json);


/* ---- a request trace (trace.c) ----------------------------------------------------------- */

#define TRACE_BLOCK 512 /* tokens per hash id (Mooncake's block) */

struct trace_req {
	uint64_t t_ms;                 /* arrival, ms from the trace's start */
	uint32_t input_len, output_len;
	size_t first;                  /* its hash ids: trace.ids[first .. first + nids) */
	uint32_t nids;
};

struct trace {
	struct trace_req *v;
	size_t n, cap;
	uint64_t *ids;
	size_t nids, ids_cap;
	uint64_t bad;                  /* lines skipped (each of the first few said) */
};

/* The TRACE_BLOCK tokens of hash id id: the same in every process. */
void trace_block_tokens(uint64_t id, uint32_t out[TRACE_BLOCK]);

/* Reads the requests of path (at most limit; 0: all). 0, or -1 after saying why. */
int trace_load(struct trace *t, const char *path, uint64_t limit);

/* Request i's prompt into *buf (grown as needed); returns its length, input_length. */
size_t trace_prompt(const struct trace *t, size_t i, uint32_t **buf, size_t *cap);

void trace_free(struct trace *t);

/* ---- the modes ---------------------------------------------------------------------------- */

/* Each returns the exit status. sigfd: the signalfd of SIGTERM and SIGINT. */
int front_main(struct opts *o, int sigfd);
int load_main(struct opts *o, int sigfd);
int validate_main(struct opts *o, int sigfd);

#endif /* KVIDX_ROUTE_H */
