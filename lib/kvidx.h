/*
 * kvidx.h — the public API of kvidx, a shared-memory prefix-cache index.
 *
 * One writer process (kvidx-ingestd, or any program using the writer API in kvidx_writer.h)
 * keeps a hash table "request block key -> pods holding it" in POSIX shared memory. Router
 * worker processes attach with the reader API declared here, map the table read-only, look
 * keys up and score prompts wait-free, and commit their routing decisions back to the writer.
 * This header is all a router needs.
 *
 * Conventions: actions return 0 or a negative errno (or a negative KVIDX_E* code, see
 * kvidx_strerror()); predicates return bool; constructors return NULL and set errno.
 * Timestamps are CLOCK_MONOTONIC nanoseconds (kvidx_now_ns()).
 *
 * Which calls may run concurrently:
 *
 *   - Writer calls (struct kvidx *, kvidx_writer.h) are single-threaded: the caller
 *     serialises them. Only one writer per index exists.
 *   - Reader calls on one struct kvidx_reader are single-threaded (one handle per thread).
 *     Any number of reader handles, in any number of processes, run concurrently with each
 *     other and with the writer, and never wait for them.
 */
#ifndef KVIDX_H
#define KVIDX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- errors ---------------------------------------------------------------------------- */

/* Project-specific error codes, returned negated like errnos. Values sit above errno's range. */
enum kvidx_error {
	KVIDX_EVERSION = 1000, /* segment layout/ABI version differs from this library's */
	KVIDX_ECORRUPT,        /* segment header inconsistent, too small, or bad magic */
	KVIDX_EWRITER,         /* another writer holds the index */
	KVIDX_ERETRY,          /* lookup raced a reader expulsion or generation switch: retry */
	KVIDX_EFULL,           /* table full and nothing could be evicted */
	KVIDX_ENOSLOT,         /* reader registry full (also from calls that follow a new one) */
	KVIDX_ENOPOD,          /* pod index unknown or pod table full */
};

/* Message for a negative return value (errno or KVIDX_E*). Never NULL; thread-safe. */
const char *kvidx_strerror(int err);

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t kvidx_now_ns(void);

/* ---- request keys (docs/keys.md) ------------------------------------------------- */

enum kvidx_key_algo {
	KVIDX_KEY_CBOR_FNV = 1, /* llm-d default: FNV-1a-64 over canonical CBOR [parent, tokens, extra] */
	KVIDX_KEY_XXH64 = 2,    /* XXH64 over LE64(parent) || LE32(tokens)... || extras */
};

/* "cbor-fnv" / "xxh64" <-> enum. parse returns 0 or -EINVAL. name returns "?" for unknown. */
int kvidx_key_algo_parse(const char *s, enum kvidx_key_algo *out);
const char *kvidx_key_algo_name(enum kvidx_key_algo algo);

/*
 * The root key of a model's chains: the parent of block 0. seed and model may be "" (not
 * NULL). Pure function.
 */
uint64_t kvidx_key_root(enum kvidx_key_algo algo, const char *seed, const char *model);

/*
 * Chains request keys over tokens: out[i] = H(i ? out[i-1] : parent, tokens of block i).
 * Only full blocks count (a trailing partial block is dropped). Writes at most max keys.
 * Returns the number of keys written (ntokens / block_size, capped at max), or 0 if
 * block_size is 0. Pure function.
 */
size_t kvidx_key_chain(enum kvidx_key_algo algo, uint64_t parent, const uint32_t *tokens,
		       size_t ntokens, uint32_t block_size, uint64_t *out, size_t max);

/*
 * Request keys with extras (llm-d compatible; docs/keys.md, after vLLM's
 * generate_block_hash_extra_keys in vllm/v1/core/kv_cache_utils.py). Besides its tokens, a block's key can hash
 * a list of string items: the identifiers of the multimodal items whose placeholder tokens
 * overlap the block, in position order, then the request's cache salt on block 0 only. A
 * LoRA request needs no item: its root is kvidx_key_root(algo, seed, lora_name) instead of
 * the base model's, and vLLM's LoRA name entry in extra_keys is dropped by ingestd.
 *
 * Encoding of a block with items s1..sk (k >= 1):
 *   cbor-fnv  FNV-1a-64(CBOR [parent, tokens, [{"Hash": s1}, ..., {"Hash": sk}]]); with no
 *             item the extra is CBOR null, as for a text block. {"Hash": "abc"} is the bytes
 *             a1 64 48617368 63 616263.
 *   xxh64     XXH64(LE64(parent) || LE32(token)... || LE64(len s1) || s1 || ...); with no
 *             item nothing follows the tokens, as for a text block.
 *
 * Source of truth (llm-d-router, pkg/kvcache/kvblock): token_processor.go hash() and
 * hashXXH64() key a block's []MMHash (struct {Hash string}; a nil slice is CBOR null);
 * extra_keys.go ComputeBlockExtraFeatures() gives a block [b*bs, (b+1)*bs) the items with
 * start < (b+1)*bs and start + len > b*bs, sorted by start (with Go's unstable sort.Slice:
 * llm-d leaves the order of equal starts open, kvidx keeps the order given), matching vLLM's
 * _gen_mm_extra_hash_keys() in vllm/v1/core/kv_cache_utils.py (end > offset and
 * start < offset + length); preciseprefixcache/blockkeys.go foldCacheSalt() appends the
 * salt after block 0's multimodal items and does nothing for an empty salt or a prompt with
 * no full block, as vLLM's generate_block_hash_extra_keys() keys cache_salt only when
 * start_token_idx == 0 and the salt is non-empty. llm-d-router PR #2929 drops the LoRA name
 * from the event side's items (it was kept as an item before).
 */

/* At most this many multimodal items per kvidx_key_chain_ex() call. */
#define KVIDX_KEY_MAX_MM 1024

/* One multimodal item of a prompt: tokens [start, start + len) are its placeholder. */
struct kvidx_mm_item {
	uint32_t start, len;
	const char *id; /* its identifier (vLLM's mm hash), NUL-terminated */
};

/* What besides the tokens goes into a prompt's keys. The LoRA name is not here: a LoRA
 * request's root is kvidx_key_root(algo, seed, lora_name) instead of the base model. */
struct kvidx_key_extras {
	const char *salt;               /* vLLM cache_salt, keyed on block 0; NULL or "": none */
	const struct kvidx_mm_item *mm; /* items, any order (keyed in position order) */
	size_t nmm;                     /* at most KVIDX_KEY_MAX_MM */
};

/*
 * One block's key: H(parent, tokens, items), the items keyed in the order given (ingestd
 * passes an event block's multimodal identifiers, then the salt, as vLLM listed them). With
 * items NULL/0 it equals what kvidx_key_chain() computes for that block. tokens may be NULL
 * only when ntokens is 0 (an empty token array is hashed, not the root's null), items only
 * when nitems is 0; a NULL items[i] is hashed as "". Items have no length or count limit
 * beyond memory. Returns the key, or 0 for an unknown algo. Pure function, thread-safe,
 * no allocation.
 */
uint64_t kvidx_key_block(enum kvidx_key_algo algo, uint64_t parent, const uint32_t *tokens,
			 size_t ntokens, const char *const *items, size_t nitems);

/*
 * kvidx_key_chain() with extras, for a prompt: tokens[0] is the prompt's first token, so
 * block 0 (tokens [0, block_size)) carries the salt and ex->mm ranges are positions in
 * tokens. out[i] = kvidx_key_block(algo, i ? out[i-1] : parent, tokens of block i, items of
 * block i), the items of block i being the id of every item whose range overlaps
 * [i*block_size, (i+1)*block_size), ordered by start (items with equal starts in the order
 * given), then on block 0 the salt. ex NULL (or no items and no salt) gives exactly
 * kvidx_key_chain().
 *
 * Edge cases, as llm-d computes them: an item spanning several blocks is keyed on each; an
 * item's range may extend past the prompt or lie wholly beyond it (only full blocks are
 * keyed; the part past them changes nothing); items may overlap one another (each is keyed
 * on every block it overlaps; vLLM itself never produces overlapping placeholders); a
 * zero-length item at position p is keyed on block p / block_size if p is not a multiple
 * of block_size, and on no block otherwise; a salt with no full block keys nothing.
 *
 * Writes at most max keys. Returns the number written (ntokens / block_size, capped at max),
 * or 0 if block_size is 0 or algo is unknown, or 0 with errno set: E2BIG if ex->nmm >
 * KVIDX_KEY_MAX_MM, EINVAL if ex->nmm > 0 with ex->mm NULL or an item's id is NULL (out is
 * then untouched). Pure function (but for errno), thread-safe, no allocation; uses about
 * 2 KiB of stack.
 */
size_t kvidx_key_chain_ex(enum kvidx_key_algo algo, uint64_t parent, const uint32_t *tokens,
			  size_t ntokens, uint32_t block_size, const struct kvidx_key_extras *ex,
			  uint64_t *out, size_t max);

/* ---- records and geometry ---------------------------------------------------------------- */

/* Device tiers a block can be held on, as a bitmask in a record. */
enum kvidx_tier {
	KVIDX_TIER_GPU = 1u << 0,
	KVIDX_TIER_CPU = 1u << 1,
	KVIDX_TIER_DISK = 1u << 2,
	KVIDX_TIER_OTHER = 1u << 3, /* a medium this version does not know */
};
#define KVIDX_NTIERS 4

/*
 * Maps a KV-event "medium" string to a tier, case-insensitively, as kvidx-ingestd does:
 * NULL, "" or GPU -> gpu; CPU, CPU_PINNED, CPU_TIER1 -> cpu; STORAGE, FS, OBJ, SHARED_STORAGE,
 * OBJECT_STORE, CPU_TIER2, DISK -> disk; anything else -> other (weight 0 by default).
 */
enum kvidx_tier kvidx_tier_from_medium(const char *medium);
const char *kvidx_tier_name(enum kvidx_tier tier); /* "gpu", "cpu", "disk", "other" */

/* One pod's hold on one key, as readers see it. */
struct kvidx_rec {
	uint16_t pod;        /* pod index, see kvidx_reader_pod() */
	uint8_t tiers;       /* enum kvidx_tier bits */
	bool speculative;    /* predicted by a route, not yet confirmed by an event */
	uint64_t t_ns;       /* confirmed: stored-at; speculative: created-at */
	uint64_t expires_ns; /* speculative: expires-at; confirmed: 0 */
};

/* Fixed per segment; 0 in any field means the default (KVIDX_DEFAULT_*, kvidx_writer.h). */
struct kvidx_geometry {
	uint64_t capacity;     /* keys (default 1 Mi) */
	uint64_t records;      /* pod records in all (default 2 x capacity) */
	uint32_t pods_per_key; /* max pods recorded per key (default 10, at most 64) */
	uint32_t max_pods;     /* pods (default 256, at most 4096) */
	uint32_t max_readers;  /* reader registry slots (default 64, at most 4096) */
	uint32_t ring_entries; /* route-ring messages per reader, power of two (default 4096) */
};

#define KVIDX_DEFAULT_NAME "kvidx"
#define KVIDX_NAME_MAX 48     /* index names: [A-Za-z0-9_.-], 1..47 chars */
#define KVIDX_POD_NAME_MAX 64 /* pod names "ip:port", NUL included */
#define KVIDX_MAX_TTL_MS 65535u

/* ---- reader -------------------------------------------------------------------------------- */

struct kvidx_reader; /* opaque reader handle; one per thread */

/*
 * Attaches to index name (NULL: KVIDX_DEFAULT_NAME): maps the data segment read-only and
 * claims a registry slot (held by an OFD lock the kernel drops if this process dies).
 * Returns NULL with errno ENOENT (no such index), KVIDX_EVERSION, KVIDX_ECORRUPT,
 * KVIDX_ENOSLOT, EACCES, or a system errno. May block briefly (syscalls); lookups do not.
 */
struct kvidx_reader *kvidx_reader_open(const char *name);
void kvidx_reader_close(struct kvidx_reader *r);

/*
 * Looks key up: writes up to max live records into out (expired speculative records and
 * records of cleared or removed pods are left out). Wait-free: a bounded number of steps
 * whatever the writer does. Returns the number of records (0: key absent), or -KVIDX_ERETRY if
 * this reader was expelled while stalled or the writer replaced the registry during the call
 * (the handle has re-registered itself or moved; call again). When the writer replaced the
 * registry (a restart with another reader geometry, or a truncation), the first call after
 * moves the handle to the new one (a few system calls); -KVIDX_ENOSLOT if it has no free slot
 * (more readers than max_readers, or a group member holding them): nothing was read, and the
 * handle tries again on a later call, at most once every 10 ms (calls in between return
 * -KVIDX_ENOSLOT at once, without a system call). -KVIDX_ECORRUPT or -errno likewise.
 */
int kvidx_lookup(struct kvidx_reader *r, uint64_t key, struct kvidx_rec *out, size_t max);

/* Tier weights for scoring; index i weighs tier bit (1u << i). */
struct kvidx_weights {
	double tier[KVIDX_NTIERS]; /* defaults: gpu 1.0, cpu 0.8, disk 0.5, other 0.0 */
	double speculative;        /* default 1.0 (llm-d) */
};
void kvidx_weights_default(struct kvidx_weights *w);

/*
 * One pod's result of prefix scoring. The row can grow: a minor release may append fields at
 * the end (never reorder, resize or remove one), and the library learns the caller's row size
 * from the size argument of kvidx_score_sized(), which kvidx_score() passes as
 * sizeof(struct kvidx_score) at the caller's compile time. A library newer than the caller's
 * header fills only the fields the caller knows; one older fills the fields it knows and
 * zeroes the rest of each row (so a field that reads 0 may mean "not computed").
 *
 * Runs: run[t] counts the consecutive blocks from block 0 the pod holds confirmed on tier
 * bit (1u << t) (a block held on several tiers counts in each), spec_run the consecutive
 * blocks from block 0 it holds only speculatively. Every run is at most blocks, and a run
 * equal to blocks means the whole prefix is on that tier (llm-d's per-tier prefix match).
 */
struct kvidx_score {
	int pod;                      /* pod index */
	uint32_t blocks;              /* consecutive blocks from block 0 held by pod */
	uint32_t spec_blocks;         /* how many of those were held only speculatively */
	double score;                 /* sum of per-block weights (best tier; speculative weight) */
	uint32_t run[KVIDX_NTIERS];   /* per tier (gpu, cpu, disk, other): run from block 0, confirmed */
	uint32_t spec_run;            /* run from block 0 held speculatively */
	/* 1.2: */
	uint32_t hit;                 /* the hybrid hit in blocks (valid with KVIDX_SCORE_HIT) */
	uint32_t flags;               /* KVIDX_SCORE_* */
	/* Fields added by later minor releases go here. */
};

/*
 * struct kvidx_score flags (1.2). KVIDX_SCORE_HIT: hit is computed (a library before 1.2 leaves
 * flags 0: take blocks then). KVIDX_SCORE_HYBRID: the pod described KV-cache groups beyond one
 * full-attention group (kvidx_pod_set_group()), and hit follows vLLM's hybrid rule.
 *
 * The hit is what vLLM's prefix cache would give for these keys (vLLM
 * vllm/v1/core/kv_cache_coordinator.py, HybridKVCacheCoordinator.find_longest_cache_hit, and
 * the per-kind finders in vllm/v1/core/single_type_kv_cache_manager.py): starting from
 * L = blocks (the run the full-attention groups hold; a pod without one: n, every key
 * given), each sliding-window group of W tokens cuts L to the end of the last window of
 * ceil((W - 1) / block size) consecutive blocks it holds at or before L (none: to the run it
 * holds from block 0), each Mamba group to just after the last block at or before L whose
 * state it holds (none: 0), all aligned to the groups' block sizes, repeated until no group
 * cuts L. Speculative records count for every group. A pod with no group described, or only
 * one full-attention group, has hit == blocks. Like blocks, it is over the keys given (vLLM
 * itself also keeps the prompt's last token out of a hit).
 */
#define KVIDX_SCORE_HIT 0x1u
#define KVIDX_SCORE_HYBRID 0x2u

/* sizeof(struct kvidx_score) in 1.0, the smallest row_size kvidx_score_sized() accepts. */
#define KVIDX_SCORE_SIZE_1_0 48
/* sizeof(struct kvidx_score) in 1.2 (hit and flags). */
#define KVIDX_SCORE_SIZE_1_2 56

/*
 * Bulk prefix scoring: for keys[0..n) of one prompt, per pod the number of consecutive blocks
 * from block 0 it holds, and the runs per tier. cand (ncand pod indices) restricts scoring to
 * those pods and gives each a row even at 0 blocks; cand NULL scores every pod that holds
 * block 0. Lookups are batched with prefetching and stop once no pod can extend its run.
 * weights NULL: defaults. Rows are written to out at a stride of row_size bytes (at least
 * KVIDX_SCORE_SIZE_1_0); see struct kvidx_score for what a size other than this library's
 * sizeof gets. Returns the number of rows written (at most max, sorted by pod index), or
 * -KVIDX_ERETRY, -KVIDX_ENOSLOT (as kvidx_lookup), -EINVAL. Wait-free.
 */
int kvidx_score_sized(struct kvidx_reader *r, const uint64_t *keys, size_t n, const int *cand,
		      size_t ncand, const struct kvidx_weights *weights, void *out, size_t max,
		      size_t row_size);

/* kvidx_score_sized() with this header's row size; compiled into the caller (not a symbol). */
static inline int kvidx_score(struct kvidx_reader *r, const uint64_t *keys, size_t n,
			      const int *cand, size_t ncand, const struct kvidx_weights *weights,
			      struct kvidx_score *out, size_t max)
{
	return kvidx_score_sized(r, keys, n, cand, ncand, weights, out, max,
				 sizeof(struct kvidx_score));
}

/* ---- route commits (router -> writer) ----------------------------------------------------- */

/* Keys a commit carries to the writer: the prefix it speculates. A longer prompt is not
 * refused: its first KVIDX_MAX_COMMIT_KEYS keys are sent (see kvidx_commit()). */
#define KVIDX_MAX_COMMIT_KEYS 2048

/*
 * A routing decision, as a router commits it. The struct can grow at the end (as
 * struct kvidx_score's rows): the library learns the caller's size from kvidx_commit_sized(),
 * which the kvidx_commit() macro below calls with sizeof(*rt) at the caller's compile time;
 * fields past that size read as 0.
 */
struct kvidx_route {
	uint64_t corr_id;        /* request-safe correlation id (never prompt data) */
	int pod;                 /* chosen (decode) pod index */
	int prefill_pod;         /* chosen prefill pod under P/D disaggregation, or -1 */
	const uint64_t *keys;    /* the prompt's block keys (any number; see kvidx_commit()) */
	size_t nkeys;
	uint32_t matched_blocks; /* blocks the chosen pod matched when the router scored */
	uint32_t matched_spec;   /* of those, held only speculatively */
	/* 1.1: */
	uint32_t prompt_tokens;  /* the prompt's length in tokens; 0: unknown (the writer then
				  * takes nkeys x block size) */
};

/*
 * A correlation id from a request id (1.1): FNV-1a-64 over the len bytes of request_id (e.g.
 * the X-Request-Id header vLLM takes as its request id), 0 mapped to 1. kvidx-route's front
 * derives its ids so; Go's kvidx.CorrID and Python's kvidx.corr_id() give the same value. The
 * writer keys a route by its origin (the committing reader's registry slot, i.e. its process)
 * and corr_id, so equal ids of two processes never meet: report an outcome on the reader
 * that committed the route.
 */
uint64_t kvidx_corr_id(const char *request_id, size_t len);

/* sizeof(struct kvidx_route) in 1.0 (no prompt_tokens), the smallest size accepted. */
#define KVIDX_ROUTE_SIZE_1_0 40

/*
 * Sends a routing decision to the writer, which adds speculative records for keys on the
 * chosen pod(s) (except where already confirmed), starts the route-to-confirmation clock, and
 * counts the request in the pod's load (kvidx_pod_load()) until its outcome comes. Only the
 * first KVIDX_MAX_COMMIT_KEYS keys are sent (the writer speculates at most that prefix); the
 * load counts the whole prompt (prompt_tokens, or nkeys x block size when 0).
 * Wait-free: returns 0, -EAGAIN when this reader's ring is full (the commit is dropped and
 * counted in its registry slot), -EINVAL for bad arguments (size below KVIDX_ROUTE_SIZE_1_0).
 * After the writer replaced the registry the call first moves the handle to the new one (a
 * few syscalls, as a lookup would); that can fail with -KVIDX_ERETRY (replaced again
 * meanwhile), -KVIDX_ENOSLOT or -KVIDX_ECORRUPT, and the commit is then not sent.
 * The commit is stamped with kvidx_now_ns() and the reader's data generation (pod indices
 * are only meaningful within one generation).
 *
 * kvidx_commit() is a macro over kvidx_commit_sized() (1.1) passing the caller's
 * sizeof(struct kvidx_route). The 1.0 function of that name stays exported for programs built
 * against 1.0 (it reads the 1.0 fields only); (kvidx_commit)(r, rt) or &kvidx_commit reach it.
 */
int kvidx_commit_sized(struct kvidx_reader *r, const struct kvidx_route *rt, size_t size);
int kvidx_commit(struct kvidx_reader *r, const struct kvidx_route *rt);
#define kvidx_commit(r, rt) kvidx_commit_sized((r), (rt), sizeof(*(rt)))

/*
 * Reports what the model server said about a routed request: cached_tokens as vLLM's
 * usage.prompt_tokens_details.cached_tokens, prompt_tokens its prompt length. Wait-free;
 * returns 0, -EAGAIN (ring full, dropped and counted), -EINVAL, or what following a replaced
 * registry can return (as kvidx_commit()).
 */
int kvidx_report_outcome(struct kvidx_reader *r, uint64_t corr_id, int pod,
			 uint32_t cached_tokens, uint32_t prompt_tokens);

/*
 * The load view (1.1): per pod, what the writer knows of the work routed to it and not yet
 * finished, as every router worker committed and reported it. A request counts from its
 * commit (as the writer drains it) until its outcome report, or until the writer's bound in
 * time (kvidx-ingestd --load-timeout) when no outcome ever comes (a router that crashed).
 * Under P/D it counts on the pod its outcome is for (the prefill pod). How stale it can be:
 * docs/LOADVIEW.md "How stale it can be".
 */
struct kvidx_load {
	uint32_t inflight;        /* requests routed to the pod whose outcome has not come */
	uint64_t prefill_tokens;  /* uncached prompt tokens of those requests (still to compute) */
	uint64_t updated_ns;      /* kvidx_now_ns() of the writer's last change to this row */
	uint64_t lost;            /* requests the writer retired without their outcome (its time
				   * bound, a full map) since the pod index was assigned */
};

/*
 * Pod's load row, one consistent snapshot. Wait-free (a bounded number of loads; no section,
 * no syscall unless the writer switched data generations). Returns 0, -KVIDX_ENOPOD (the
 * pod index is not in use), or -KVIDX_ERETRY (the writer was changing the row on every try:
 * call again). A pod the writer never counted anything on reads as zeros.
 */
int kvidx_pod_load(struct kvidx_reader *r, int pod, struct kvidx_load *out);

/* Reader-side view of the index header and pods (for tools and routers). */
struct kvidx_info {
	uint32_t layout_version;
	uint64_t generation;
	enum kvidx_key_algo algo;
	char seed[64];
	uint32_t block_size;
	struct kvidx_geometry geo;
	pid_t writer_pid;
	uint64_t heartbeat_ns; /* writer's last tick; compare with kvidx_now_ns() */
	uint64_t created_ns;
};
int kvidx_reader_info(struct kvidx_reader *r, struct kvidx_info *out);

/* Name (and model, may be "") of pod index pod; -KVIDX_ENOPOD if the index is not in use. */
int kvidx_reader_pod(struct kvidx_reader *r, int pod, char name[KVIDX_POD_NAME_MAX],
		     char model[KVIDX_POD_NAME_MAX]);

/* Pod index of name, or -KVIDX_ENOPOD. Linear in max_pods; cache the answer. */
int kvidx_reader_pod_find(struct kvidx_reader *r, const char *name);

#ifdef __cplusplus
}
#endif
#endif /* KVIDX_H */
