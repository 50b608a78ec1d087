/*
 * fakepod.h — internal to kvidx-fakepod: the state of the one fake pod, shared by its parts,
 * and what each part offers the others. Every function runs on the one thread of the
 * zmq_poll() loop in main.c; nothing here is thread-safe or blocks.
 *
 * The parts, one job a file:
 *   main.c      setup, the poll loop, signals, teardown, the summary line
 *   opts.c      the command line: flags, --help, their checks, the topic, rank endpoints
 *   sched.c     the action queue: publications, sequence changes and replies in due order;
 *               the simulated pod restart
 *   events.c    events waiting for their batch, their extra_keys, their encoding into a
 *               payload
 *   pub.c       each rank's PUB socket, replay buffer and ROUTER, the XPUB subscriber count
 *   zframes.c   ZMQ plumbing: binding sockets, multi-frame messages, ROUTER envelopes
 *   hash.c      engine block hashes
 *   cache.c     the simulated KV cache (vLLM's block pool: reference counts, an LRU free
 *               queue per rank), the admission of a prompt's blocks to it at once, the
 *               events it produces, with the shapes of vLLM's streams (hybrid groups,
 *               offload placeholders, duplicate copies)
 *   engine.c    the pod model: vLLM V1's scheduler (continuous batching, chunked prefill,
 *               preemption), step times, the model clock, GET /metrics
 *   workload.c  the synthetic workload
 *   script.c    the script language
 *   serve.c     a served request's life: cache lookup, fate, prefill, its events
 *   http.c      --http: vLLM's OpenAI-compatible API (libmicrohttpd, jansson)
 */
#ifndef KVIDX_FAKEPOD_H
#define KVIDX_FAKEPOD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <zmq.h>

#include "log.h"
#include "wire.h"

#define PROG "kvidx-fakepod"

#define NAME_MAX_LEN    255          /* pod and model names, in bytes */
#define MAX_MS          86400000ull  /* one day: bound of every *-ms value */
#define NS_PER_MS       1000000ull
#define NS_PER_S        1000000000ull
#define FP_MAX_RANKS    32           /* --dp-ranks bound (kvidx-ingestd's KV_POD_RANKS) */
#define FP_MAX_MM       64           /* multimodal items of one prompt */

/* ---- options (opts.c) --------------------------------------------------------------------- */

/*
 * The pod model's defaults: Llama-3.1-8B (bf16) on one H100 80GB, vLLM V1's default
 * scheduler limits (tools/fakepod/README.md "The pod model" gives the sources).
 */
#define MODEL_SEQS        1024
#define MODEL_BATCHED     8192
#define MODEL_KV_BLOCKS   25000
#define MODEL_PREFILL_TPS 24000.0
#define MODEL_STEP_MS     4.6
#define MODEL_DECODE_MS   0.03

struct opts {
	const char *pub_ep, *replay_ep, *http_addr, *script;
	const char *pod, *model, *medium;
	enum kvw_form form;
	enum kvw_hash_form hash_form;
	uint32_t block_size;
	bool has_rank;
	int64_t rank;
	uint64_t keep;
	bool old_framing;
	bool pub_id_set, pub_id_random; /* --publisher-id: 24-byte sequence frames */
	uint8_t pub_id[16];
	uint64_t heartbeat_ms;          /* --heartbeat: empty batches when idle (0: none) */
	uint64_t wait_subs, linger_ms;
	double duration;
	bool workload;
	uint64_t prefixes, prefix_blocks, suffix_blocks, seed, batch, cache_blocks, count;
	double rate;
	uint64_t prefill_ms, jitter_ms, event_delay_ms;
	bool constant;              /* --prefill-ms given: no pod model */

	/* the pod model (engine.c) */
	uint64_t max_num_seqs, max_batched, kv_blocks;
	double prefill_tps, step_ms, decode_seq_ms, time_scale;
	double fail_rate, cancel_rate, drop_rate;
	uint64_t ts_ahead_ms; /* batch ts this far ahead of the wall clock (a skewed clock) */

	/* vLLM stream shapes (the "Shapes" block of opts.c) */
	const char *topic;          /* --topic, NULL: kv@<pod>@<model> */
	uint32_t dp_ranks;          /* ranks, each on its own ports (1: no data parallelism) */
	const char *lora, *salt;    /* workload prompts' LoRA adapter and cache_salt, or NULL */
	double lora_share, salt_share, mm_rate;
	bool mm_bare;               /* multimodal entries as bare identifiers (vLLM < 0.26) */
	bool hybrid;                /* sliding-window and Mamba groups besides full attention */
	double offload, dup_copies; /* shares of prompts offloaded / stored as two copies */
	const char *offload_medium;
	bool copy_counts;           /* BlockRemoved carries remaining_copy_counts */
	const char *kv_sources;     /* --kv-sources vllm | vllm-array | sglang, or NULL */
	bool pub_connect;           /* --pub-connect: the PUB connects to --pub, not binds */
};

/* Fills o from the command line, or exits: status 0 after --help, 2 on bad usage. */
void opts_parse(int argc, char **argv, struct opts *o);

/*
 * Writes the topic kv@<pod>@<model> to topic (2 * NAME_MAX_LEN + 8 bytes), the pod being
 * --pod or derived from an endpoint; returns its length. Exits with status 2 if a derived
 * name is not a valid pod name.
 */
size_t opts_topic(const struct opts *o, char *topic, size_t cap);

/*
 * Writes endpoint ep with its port raised by r (vLLM's data-parallel convention: rank r on
 * port + r) to out; r 0 copies ep. Exits with status 2 if ep has no numeric port or it
 * overflows.
 */
void opts_rank_endpoint(const char *flag, const char *ep, unsigned r, char *out, size_t cap);

/* ---- events waiting for their batch (events.c) -------------------------------------------- */

/*
 * Pending events are wire events (wire.h) whose arrays are malloc'd copies owned by their
 * list. A new kind of event, or a field the pod did not set before, is built by filling more
 * of the struct kvw_event: encode_batch() writes whatever kvw_enc_event() supports.
 */
struct evlist {
	struct kvw_event *v;
	uint32_t *rank; /* the rank each event is published on (fp->ev_rank when added) */
	size_t n, cap, rank_cap;
};

/* One multimodal item of a prompt: tokens [start, start + len), vLLM's identifier. */
struct mm_item {
	uint32_t start, len;
	const char *id;
};

/*
 * What vLLM keys beyond a prompt's tokens (docs/events.md "extra_keys"). Block i's
 * extra_keys entry is, in order: the LoRA name, one entry per item overlapping the block
 * ((identifier, start - block start), or the bare identifier), the salt on block 0 only.
 */
struct prompt_x {
	const char *lora, *salt;  /* NULL: none */
	const struct mm_item *mm; /* sorted by start */
	size_t nmm;
	bool mm_bare;
};

/* Capacity a block_items() output needs. */
#define BLOCK_ITEMS_MAX (FP_MAX_MM + 2)

/*
 * Block blk's extra_keys items (at most BLOCK_ITEMS_MAX, their strings px's) to out; the
 * count. px may be NULL (none).
 */
size_t block_items(const struct prompt_x *px, size_t blk, uint32_t bs, struct kvw_xitem *out);

/*
 * The attributes ev_add() gives an event: medium, KV-cache group, locality. cache_admit()
 * sets its own; the script's medium, group and locality commands set the script's.
 */
struct ev_attr {
	const char *medium;     /* "" or NULL: nil (GPU) */
	bool has_group;
	uint32_t group;
	const char *kind;       /* kv_cache_spec_kind, NULL: nil */
	uint32_t sliding_window; /* 0: nil */
	const char *locality;   /* NULL: nil */
};

struct fp;
struct action;

/*
 * Appends an event of this type carrying fp->attr (medium, group, locality) and the pod's
 * block size, on rank fp->ev_rank; arrays empty.
 */
struct kvw_event *ev_add(struct fp *fp, struct evlist *l, enum kvw_type type);

/* Gives e an owned array of n hashes (uninitialised; NULL when n is 0) and returns it. */
uint64_t *ev_hashes(struct kvw_event *e, size_t n);

/*
 * BlockStored of copies of hashes and tokens. With fp->px set, it carries the prompt's
 * lora_name and every block's extra_keys (owned copies), hashes[0] being block first of the
 * prompt. BlockRemoved of a copy of hashes, with remaining_copy_counts when remaining is not
 * NULL.
 */
struct kvw_event *ev_add_stored(struct fp *fp, struct evlist *l, const uint64_t *hashes,
				size_t nhashes, bool has_parent, uint64_t parent,
				const uint32_t *tokens, size_t ntokens, size_t first);
struct kvw_event *ev_add_removed(struct fp *fp, struct evlist *l, const uint64_t *hashes,
				 size_t nhashes, const uint32_t *remaining);

/* Frees the first k events and moves the rest to the front. */
void evlist_drop(struct evlist *l, size_t k);

/*
 * Encodes events v[0, n) into a publish action (payload malloc'd) on rank fp->ev_rank, the
 * rank of the events last built (cache_admit() sets it). Exits if memory runs out.
 */
void encode_batch(struct fp *fp, const struct kvw_event *v, size_t n, struct action *a);

/*
 * Puts the first n pending events into batches published after the script's delay: one
 * batch per run of events of one rank.
 */
void flush_pending(struct fp *fp, size_t n, uint64_t now);

/* ---- the action queue (sched.c) ----------------------------------------------------------- */

enum act_kind {
	ACT_PUBLISH,    /* send payload as the next batch (raw when nevents is 0 and raw) */
	ACT_GAP,        /* skip n sequence numbers */
	ACT_LOSE,       /* keep the next n batches for replay but do not send them */
	ACT_RESTART,    /* the rank's sequence back to 0, nothing kept, cache emptied */
	ACT_SERVE_DONE, /* a served request's prefill is over: reply, maybe store blocks */
	ACT_STEP,       /* the pod model: rank's engine step ends (n: its generation) */
};

struct action {
	uint64_t due, order;
	enum act_kind kind;
	uint32_t rank; /* ACT_PUBLISH, ACT_GAP, ACT_LOSE, ACT_RESTART: the rank it concerns */
	uint64_t n;
	void *data; /* ACT_PUBLISH: the payload (malloc); ACT_SERVE_DONE: struct inflight */
	size_t len;
	bool raw;
	size_t nevents, nstored, nremoved, ncleared;
	size_t nextra, nplaceholder, ndup, ngroup; /* the shapes' counts (struct stats) */
};

/*
 * Runs a now, if nothing queued must go first, or queues it for a->due. Actions run in
 * (due time, creation order) order.
 */
void schedule(struct fp *fp, struct action *a, uint64_t now);

/* Queues a for a->due, even if it is due now (a step never runs inside another). */
void enqueue(struct fp *fp, struct action *a);

/* Runs every queued action due by now. */
void run_due(struct fp *fp, uint64_t now);

/* Removes and returns the first queued action (fp->nheap > 0). */
struct action heap_pop(struct fp *fp);

/*
 * Empties the pod as a restart does: sequence back to 0, nothing kept for replay, cache
 * empty. Actions created before order_limit that are still queued belonged to the old
 * process: their publications are discarded and their requests answered "failed". rank >= 0
 * with several ranks restarts that rank's engine only (its sequence, replay buffer, cache
 * part and queued publications; requests in flight stay).
 */
void pod_restart(struct fp *fp, uint64_t order_limit, int rank);

/* ---- publishing (pub.c) ------------------------------------------------------------------- */

/* A published batch kept for replay. */
struct kept {
	uint64_t seq;
	void *data;
	size_t len;
};

/*
 * One data-parallel rank: an engine of its own, publishing on the pod's ports + its number
 * with its own sequence numbers and replay buffer (docs/events.md "The publisher").
 */
struct rank {
	void *pub, *replay;
	uint64_t seq, lose_left;
	uint8_t id[16];           /* --publisher-id of this rank's current process */
	uint64_t id_gen;          /* restarts seen by the id (a new id after each) */
	bool published;           /* a batch went out since the start */
	uint64_t last_pub_ns;     /* last batch or heartbeat (--heartbeat) */
	struct kept *ring; /* o.keep slots */
	size_t ring_head, ring_n;
};

/*
 * Publishes a batch now on its rank: the next sequence number, the PUB socket (unless lost),
 * the ring.
 */
void publish(struct fp *fp, struct action *a);

/* Forgets every batch rank r kept for replay. */
void ring_clear(struct fp *fp, uint32_t r);

/*
 * --heartbeat: publishes an empty batch (numbered and kept like any other) on each rank that
 * sent nothing for the interval, as vLLM #57789's idle publishers do. Returns when the next
 * one is due (UINT64_MAX: none configured).
 */
uint64_t pub_heartbeats(struct fp *fp, uint64_t now);

/* Answers the replay requests waiting on rank r's ROUTER. */
void handle_replay(struct fp *fp, uint32_t r);

/* XPUB (--wait-subscribers): counts subscriptions, so that the run can wait for them. */
void handle_xpub(struct fp *fp, uint32_t r);

/* ---- ZMQ plumbing (zframes.c) ------------------------------------------------------------- */

#define MAXFRAMES 4

/* One received message: its first MAXFRAMES frames, and whether it had more. */
struct frames {
	zmq_msg_t m[MAXFRAMES];
	int n;
	bool too_many;
};

#define FDATA(f, i) ((const void *)zmq_msg_data(&(f)->m[i]))
#define FSIZE(f, i) zmq_msg_size(&(f)->m[i])

/* Creates and binds a socket; maxmsg bounds what a peer may send to it. Exits on failure. */
void *bind_socket(struct fp *fp, int type, const char *flag, const char *ep, int64_t maxmsg);

/* Sends n frames as one message; ROUTER and PUB sockets here never block. */
void send_frames(void *sock, int n, const void *const *data, const size_t *len);

/* Receives one whole message without blocking; false when none is waiting. */
bool recv_frames(void *sock, struct frames *f);
void frames_close(struct frames *f);

/*
 * Splits a ROUTER message [identity, "", body] or [identity, body] into its parts; false if
 * it has another shape.
 */
bool router_envelope(struct frames *f, bool *delim);

/* ---- engine block hashes (hash.c) --------------------------------------------------------- */

/* Engine hashes of the nblocks full blocks of tokens, chained from parent (0: none). */
void engine_chain(uint64_t parent, const uint32_t *tokens, size_t nblocks, uint32_t bs,
		  uint64_t *out);

/*
 * The same for blocks with extras, as vLLM folds extra_keys into its block hashes: tokens'
 * first block is block first of the prompt px describes (px NULL: engine_chain()).
 */
void engine_chain_x(uint64_t parent, const uint32_t *tokens, size_t first, size_t nblocks,
		    uint32_t bs, const struct prompt_x *px, uint64_t *out);

/* ---- the simulated prefix cache (cache.c) ------------------------------------------------- */

struct cache_node;

#define BLK_NONE UINT32_MAX

/*
 * cap blocks per rank, each cached (an engine hash) or not, held by requests or free; free
 * blocks are reused least recently freed first. A prompt belongs to one rank (the one
 * rank_of() its first block names), so each rank is an engine with a cache of its own; one
 * table finds any rank's cached blocks.
 */
struct cache {
	uint32_t cap, nranks;
	uint32_t size[FP_MAX_RANKS];  /* cached blocks */
	uint32_t nfree[FP_MAX_RANKS]; /* blocks in the free queue (cached or not) */
	uint32_t head[FP_MAX_RANKS], tail[FP_MAX_RANKS];
	struct cache_node *nodes;
	uint32_t *slots; /* node index + 1; 0 = empty */
	size_t mask;
};

void cache_init(struct cache *c, uint32_t cap, uint32_t nranks);
void cache_clear(struct cache *c);
void cache_clear_rank(struct cache *c, uint32_t r);
void cache_free(struct cache *c);

/* True with probability p, drawn from fp->shape_rng only when p > 0. */
bool shape_draw(struct fp *fp, double p);

/* The rank serving a prompt whose first engine block is h0 (0 without data parallelism). */
uint32_t rank_of(const struct fp *fp, uint64_t h0);

/*
 * The scheduler's lookup: the number of leading blocks of h[0, n) that are cached, touched
 * (last to first) so that they stay.
 */
size_t cache_match(struct cache *c, const uint64_t *h, size_t n);

/* Uncaches every block of rank r (an AllBlocksCleared): held blocks stay held. */
void cache_forget(struct cache *c, uint32_t r);
/* The block caching hash h, or BLK_NONE. */
uint32_t cache_lookup(const struct cache *c, uint64_t h);
/* Holds block i (out of the free queue while held) / releases it (to the free queue's
 * reused-last end when nobody holds it). */
void blk_ref(struct cache *c, uint32_t i);
void blk_unref(struct cache *c, uint32_t i);
/* Whether block i is free (held by nobody): holding it takes a block from the free queue. */
bool blk_free_cached(const struct cache *c, uint32_t i);
/* Blocks in rank r's free queue. */
uint32_t cache_nfree(const struct cache *c, uint32_t r);
/*
 * Takes rank r's least recently freed block, held once; a cached one is evicted, its hash
 * kept for cache_evictions(). BLK_NONE if every block is held.
 */
uint32_t blk_alloc(struct fp *fp, uint32_t r);
/* Caches held block i as hash h with shape flags; false (nothing done) if h is cached. */
bool blk_store(struct cache *c, uint32_t i, uint64_t h, uint8_t flags);
/* The shape flags (--offload, --dup-copies) of a prompt's new blocks, drawn. */
uint8_t cache_draw_flags(struct fp *fp);
/* Appends the BlockRemoved events of the evictions since the last call to out. */
void cache_evictions(struct fp *fp, struct evlist *out);
/* Appends the BlockStored events of blocks h[first, first + n) of a prompt (tokens its
 * tokens, fl their flags) to out. */
void cache_stored(struct fp *fp, struct evlist *out, const uint64_t *h, size_t n,
		  const uint32_t *tokens, size_t first, uint8_t fl);

/*
 * Admits a prompt's full blocks to its rank's cache, as an engine does after prefill, and
 * appends the events that tells (BlockRemoved of evictions, BlockStored of new blocks, and
 * the shapes --hybrid, --offload and --dup-copies add) to out, on that rank (fp->ev_rank).
 * fp->px, when set, gives the prompt's extras.
 */
void cache_admit(struct fp *fp, const uint64_t *h, const uint32_t *tokens, size_t nblocks,
		 struct evlist *out);

/* ---- sources ------------------------------------------------------------------------------ */

/* Publishes the workload's batches that are due; sets fp->wl_next to the next due time. */
void workload_step(struct fp *fp, uint64_t now);

/* Opens the script (exits on failure). */
void script_open(struct fp *fp);
/* Runs the buffered script lines until a sleep, an error or the end of the buffer. */
void script_step(struct fp *fp, uint64_t now);
/* Reads what the script input has (poll said it is readable). */
void script_read(struct fp *fp);
/* Whether the script wants more input: no complete line is buffered. */
bool script_wants_input(const struct fp *fp);
/* Frees what the script's lora, salt and mm commands keep. */
void script_free(struct fp *fp);

/* ---- served requests (serve.c) and the HTTP API (http.c) ---------------------------------- */

struct hreq;

enum srv_status {
	SRV_OK,        /* prefill done; the pod stored the prompt's new full blocks */
	SRV_FAILED,    /* prefill failed (or the pod restarted): nothing stored */
	SRV_CANCELLED, /* the client went away (or --cancel-rate): nothing stored */
};

/* Faults a request asks for (http.c's X-Fakepod-Fault header). */
struct srv_fault {
	bool fail, cancel, drop_events, restart, has_delay;
	uint64_t delay_ns;
};

/* A served request (serve.c, engine.c), and its HTTP request (http.c). */
struct inflight {
	struct hreq *h; /* its HTTP request; NULL once the connection is gone */
	enum srv_status status;
	uint32_t cached_tokens;
	bool drop_event, has_delay;
	uint64_t event_due;   /* --prefill-ms: when its batch is published (wall clock) */
	uint64_t event_delay; /* the pod model: its batch this long after arrival, at least */
	uint64_t *hashes;     /* engine hashes of the prompt's full blocks */
	uint32_t *tokens;     /* their tokens */
	size_t nblocks;

	/* the pod model (engine.c); times are model time, in ns */
	struct inflight *next; /* in the waiting queue */
	uint32_t rank;
	size_t ntokens, max_tokens; /* prompt tokens, output tokens to generate */
	size_t nout;     /* generated so far */
	size_t computed; /* tokens whose KV is computed (or being, sched of them, this step) */
	size_t sched;    /* tokens scheduled in the current step */
	size_t nstored;  /* leading prompt blocks past the caching decision */
	uint32_t *blocks; /* held blocks, in token order */
	size_t nblk, blk_cap;
	bool admitted;
	uint8_t fl;      /* shape flags of its new blocks */
	uint64_t arrival, first_sched, first_token;
};

#define TTFT_BUCKETS 22

/* One rank's engine: its scheduler's queues and vLLM's statistics. */
struct engine {
	struct inflight *wait_head, *wait_tail;
	size_t nwait;
	struct inflight **run; /* in admission order */
	size_t nrun, run_cap;
	bool busy;          /* a step is under way */
	uint64_t step_end;  /* its end, model time */
	uint64_t gen;       /* restarts: a step of an older generation is void */
	uint64_t queries, hits, preemptions, prompt_tokens, gen_tokens, success;
	uint64_t ttft_bucket[TTFT_BUCKETS + 1], ttft_count;
	double ttft_sum;
};

/* Model time (ns since the start) at wall time wall (kvidx_now_ns()). */
uint64_t model_now(const struct fp *fp, uint64_t wall);
/* q arrives at its rank's engine (the pod model); a step starts if it was idle. */
void engine_submit(struct fp *fp, struct inflight *q, uint64_t now);
/* ACT_STEP: the step of rank r's engine (generation gen) is over. */
void engine_step_end(struct fp *fp, uint32_t r, uint64_t gen, uint64_t now);
/* A restart (of rank `rank`, or all if < 0): every request of the engines fails. */
void engine_restart(struct fp *fp, int rank);
/* Frees every request of the engines without an answer. */
void engine_free(struct fp *fp);
/* GET /metrics: the exposition text (malloc'd), its length in *len. */
char *engine_metrics(struct fp *fp, size_t *len);

/*
 * A prompt of ntokens tokens, to be answered with max_tokens tokens, arrived: draws its
 * fate, then hands it to the pod model, or (--prefill-ms) looks up its cached prefix and
 * queues its completion after the prefill time; the answer comes through http_answer(),
 * maybe before this returns (no prefill time). Returns 0; -1 if it failed at once (a
 * restart fault, too much in flight); -2 if prompt and answer exceed the KV cache (the pod
 * model): then nothing is queued and the caller answers.
 */
int serve_request(struct fp *fp, struct hreq *h, const uint32_t *tokens, size_t ntokens,
		  size_t max_tokens, const struct srv_fault *f, uint64_t now);
/* The pod model is done with q at model time t (its blocks released): answer, free q. */
void serve_finish(struct fp *fp, struct inflight *q, uint64_t t);
/* Prefill is over (ACT_SERVE_DONE): store the blocks of a success, answer, free q. */
void serve_complete(struct fp *fp, struct inflight *q, uint64_t now);
/* Answers "failed" to q and frees it: its pod restarted. */
void serve_fail(struct fp *fp, struct inflight *q);
/* Frees q without an answer. */
void free_inflight(struct fp *fp, struct inflight *q);
/* q's connection is gone: it will not be answered. */
void serve_detach(struct inflight *q);

/* Binds the socket and starts the server (exits on failure). */
void http_start(struct fp *fp);
/* Ends every connection and stops the server. */
void http_stop(struct fp *fp);
/* How long the loop may wait for the server's descriptor (fp->http_fd), in ms; -1: forever.
 * Runs the server first if a connection was resumed. */
long http_timeout_ms(struct fp *fp);
/* Does what the server's descriptor says is ready (never blocks). */
void http_run(struct fp *fp);
/* serve.c tells h which request it became, and that it is gone. */
void http_bind(struct hreq *h, struct inflight *q);
void http_detach(struct hreq *h);
/* The model times of h's answer (headers X-Fakepod-*-Seconds), in ns. */
void http_times(struct hreq *h, uint64_t ttft, uint64_t queue, uint64_t e2e);
/* The outcome of h's prompt: queue the answer (resuming its connection). */
void http_answer(struct fp *fp, struct hreq *h, enum srv_status st, uint32_t cached_tokens);
/* Whether h's client has closed its connection (a cancellation). */
bool http_peer_gone(struct hreq *h);

/* ---- the pod ------------------------------------------------------------------------------ */

struct stats {
	uint64_t events, batches, stored, removed, cleared, raw, lost, discarded;
	uint64_t requests, ok, failed, cancelled, dropped, bad_requests, replays, restarts;
	/* shapes, as published: blocks with extra_keys, placeholder blocks, blocks of a
	 * BlockStored repeating the one before it (a second copy), events of group_idx > 0 */
	uint64_t extra_blocks, placeholders, dup_blocks, group_events;
};

struct fp {
	struct opts o;

	/* publishing (pub.c) */
	char topic[2 * NAME_MAX_LEN + 8];
	size_t topiclen;
	void *zctx;
	bool xpub;
	int sigfd;
	struct kvw_enc enc;
	struct kvw_enc_opts encopts;
	struct rank rk[FP_MAX_RANKS];
	uint32_t nranks;

	/* the action queue (sched.c): a min-heap */
	struct action *heap;
	size_t nheap, heap_cap;
	uint64_t order;

	struct cache cache;
	struct evlist pending; /* script or workload events not yet in a batch */
	struct evlist tmp;     /* one served request's events; a model step's */
	struct evlist side;    /* a model step's events of a request with a fault */
	struct action *side_acts; /* their batches, until the step's end is known */
	size_t nside, side_cap;
	struct engine eng[FP_MAX_RANKS]; /* the pod model */

	/* shapes: what the next events carry (events.c, cache.c) */
	uint32_t ev_rank;           /* the rank of the events being built */
	struct ev_attr attr;        /* their medium, group and locality */
	const struct prompt_x *px;  /* the extras of the prompt being stored, or NULL */
	uint64_t shape_rng;         /* draws of --lora-share, --offload, ... */
	struct kvw_event prev_ev;   /* the last event encoded (its arrays not kept) */
	uint64_t prev_h0;           /* its first hash */
	uint64_t *evict;            /* blk_alloc()'s evicted hashes, their flags */
	uint8_t *evict_fl;
	size_t nevict, evict_cap, evict_fl_cap;

	/* the run (main.c) */
	bool started;
	uint64_t subs, start_ns, end_ns;
	bool stopping, lingering;
	uint64_t linger_until;
	int exit_code;

	/* script (script.c) */
	bool script_on, script_eof, script_done;
	int script_fd;
	char *sbuf;
	size_t slen, scap, sdone; /* sdone: bytes of sbuf already consumed */
	uint64_t sline, sleep_until, delay_ns;
	bool stdout_failed;
	uint32_t script_rank;   /* rank R */
	struct ev_attr script_attr; /* medium, group, locality */
	char script_medium[KVW_MEDIUM_MAX], script_kind[KVW_SPEC_KIND_MAX];
	char script_locality[KVW_LOCALITY_MAX];
	char *script_lora, *script_salt; /* lora, salt (malloc'd) */
	struct mm_item script_mm[FP_MAX_MM]; /* mm, ids malloc'd */
	size_t script_nmm;
	bool script_mm_bare;

	/* token and hash scratch of the script and the workload */
	uint32_t *toks;
	size_t toks_cap;
	uint64_t *hbuf;
	size_t hbuf_cap;

	/* workload (workload.c) */
	bool wl_on, wl_done;
	uint64_t wl_rng, wl_events, wl_next;

	/* serve (serve.c, http.c) */
	uint64_t srv_rng;
	size_t ninflight;
	struct MHD_Daemon *httpd;
	int http_fd;              /* its epoll descriptor */
	struct hreq *suspended;   /* requests waiting for their prefill */
	uint64_t http_ids;        /* request ids made up */
	bool http_kick;           /* a connection was resumed: run the server before waiting */

	struct ilog_limit rl_replay, rl_serve;
	struct stats st;
};

/* "PROG: message" on stderr, at most one a second per limiter (peers can cause them at will). */
void fp_warn(struct ilog_limit *lim, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif /* KVIDX_FAKEPOD_H */
