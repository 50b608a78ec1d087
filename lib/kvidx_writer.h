/*
 * kvidx_writer.h — the writer API of kvidx: creating or taking over an index, pods, the
 * records events and route commits turn into, the reaper, housekeeping, and consuming route
 * commits. For the one writer process (kvidx-ingestd, tests, benchmarks); routers need only
 * kvidx.h, which this header includes.
 *
 * Conventions as in kvidx.h. Every call here takes the writer handle and is single-threaded:
 * the caller serialises them (ingestd runs its apply path and its reaper under one mutex).
 * Only one writer per index exists: kvidx_writer_open() refuses a second one. Writer calls run
 * concurrently with any number of readers, and never wait for them.
 */
#ifndef KVIDX_WRITER_H
#define KVIDX_WRITER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "kvidx.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- open, publish, close ------------------------------------------------------------------ */

struct kvidx; /* opaque writer handle */

/* What 0 in struct kvidx_geometry and struct kvidx_writer_opts stands for. */
#define KVIDX_DEFAULT_CAPACITY (1u << 20) /* keys */
#define KVIDX_DEFAULT_RECORDS_PER_KEY 2   /* records = this x capacity */
#define KVIDX_DEFAULT_PODS_PER_KEY 10
#define KVIDX_DEFAULT_MAX_PODS 256
#define KVIDX_DEFAULT_MAX_READERS 64
#define KVIDX_DEFAULT_RING_ENTRIES 4096
#define KVIDX_DEFAULT_BLOCK_SIZE 16
#define KVIDX_DEFAULT_STALL_MS 1000

/* Limits of struct kvidx_writer_opts (kvidx_writer_check() says which one a value breaks). */
#define KVIDX_MAX_CAPACITY (1ull << 31)
#define KVIDX_MAX_PODS_PER_KEY 64
#define KVIDX_MAX_PODS 4096
#define KVIDX_MAX_READERS 4096
#define KVIDX_MIN_RING_ENTRIES 64
#define KVIDX_MAX_RING_ENTRIES (1u << 20)
#define KVIDX_MAX_BLOCK_SIZE 65536
#define KVIDX_MAX_STALL_MS 86400000u /* a day */

struct kvidx_writer_opts {
	const char *name;              /* index name (NULL: KVIDX_DEFAULT_NAME) */
	struct kvidx_geometry geo;     /* on a takeover, max_readers and ring_entries 0 keep the
					  index's; another value recreates the reader registry */
	enum kvidx_key_algo algo;      /* 0: cbor-fnv */
	const char *seed;              /* NULL: "" */
	uint32_t block_size;           /* 0: 16 */
	gid_t group;                   /* 0: segments 0600; else 0660 (registry) and 0640 (data), this group */
	uint32_t stall_ms;             /* reader stall limit before expulsion (0: 1000) */
	bool defer_publish;            /* build the new generation but let readers keep the
					  previous one until kvidx_writer_publish() */
};

/*
 * Which limit an option breaks (kvidx_writer_check()). field names the option as in struct
 * kvidx_writer_opts ("capacity", "records", "pods_per_key", "max_pods", "max_readers",
 * "ring_entries", "block_size", "stall_ms", "seed", "name", "algo"); value is what was given
 * (after defaults), [min, max] the allowed range. When the range depends on another option
 * (records on capacity), depends names it and dep_value is its value; else depends is NULL.
 * reason is one line of English saying all of it.
 */
struct kvidx_limit {
	const char *field;
	uint64_t value, min, max;
	const char *depends;
	uint64_t dep_value;
	char reason[160];
};

/*
 * Checks every option and the whole geometry against the limits above and the segment
 * format, exactly as kvidx_writer_open() does before it creates anything. Returns 0, or
 * -EINVAL with *why filled (why may be NULL). Pure: touches no shared memory.
 */
int kvidx_writer_check(const struct kvidx_writer_opts *opts, struct kvidx_limit *why);

/*
 * Creates the index, or takes it over when its previous writer is gone: a new data generation
 * is published (readers switch on their next lookup); its geometry may differ from the
 * previous one's (kvidx_writer_open_info() says what changed). Every option is checked first
 * (kvidx_writer_check()); a call that fails leaves nothing behind in /dev/shm that was not
 * there before.
 * Returns NULL with errno: -KVIDX_EWRITER's positive value (KVIDX_EWRITER) if another writer
 * is alive, KVIDX_EVERSION if an existing index has another layout, EINVAL for bad
 * options, or a system errno. Not thread-safe against itself.
 */
struct kvidx *kvidx_writer_open(const struct kvidx_writer_opts *opts);

/* What kvidx_writer_open() found and did (kvidx_writer_open_info()). */
enum {
	KVIDX_OPEN_CREATED = 1u << 0,  /* no index existed: created */
	KVIDX_OPEN_TAKEOVER = 1u << 1, /* an index existed, its writer gone: taken over */
	KVIDX_OPEN_GEOMETRY = 1u << 2, /* the previous generation had another geometry (prev) */
	KVIDX_OPEN_REGISTRY = 1u << 3, /* the reader registry was recreated (another reader
					  geometry, or damage): readers re-register by themselves */
	KVIDX_OPEN_REBUILT = 1u << 4,  /* the index header was damaged and has been rebuilt */
};
struct kvidx_open_info {
	unsigned flags;
	uint64_t generation;        /* the generation this writer builds */
	uint64_t prev_generation;   /* the one readers were using (0: none) */
	struct kvidx_geometry prev; /* its geometry, when it could be read (else all 0) */
};

/* Fills *out for writer w. Returns 0. */
int kvidx_writer_open_info(const struct kvidx *w, struct kvidx_open_info *out);

/*
 * Publishes the generation kvidx_writer_open() built with defer_publish (a writer taking over
 * rebuilds it, e.g. by replay, while readers keep serving the previous one): readers switch on
 * their next call and the previous generation is unlinked. Returns 0, or -EALREADY if it was
 * published already. Never blocks.
 */
int kvidx_writer_publish(struct kvidx *w);

/* Unmaps and releases the writer lock. Segments stay (readers keep serving); unlink=true
 * removes them from /dev/shm too. */
void kvidx_writer_close(struct kvidx *w, bool unlink);

/* ---- pods -------------------------------------------------------------------------------- */

/*
 * Pods. add returns the pod index (>= 0) of name, creating it if new (an existing pod takes
 * the given model if it is non-NULL and differs), or -KVIDX_ENOPOD when the pod table is
 * full, -EINVAL for an empty or too-long name. model may be NULL; it is kept for display and
 * cut to KVIDX_POD_NAME_MAX - 1 bytes.
 * remove clears the pod and frees its index for reuse. Both O(1).
 */
int kvidx_pod_add(struct kvidx *w, const char *name, const char *model);
int kvidx_pod_remove(struct kvidx *w, int pod);

/* ---- records ----------------------------------------------------------------------------- */

/*
 * Records that pod holds keys[0..n) on tier (confirmed). A speculative record becomes
 * confirmed (reported to the observer's on_confirm, with its created-at and expires-at: an
 * expired one the reaper has not yet removed is a late confirmation). Returns the number of
 * keys stored, or a negative error; keys that could not be stored because the table is full
 * are counted in the segment stats (stat "store_failed") and make the call return
 * -KVIDX_EFULL after storing the others.
 */
int kvidx_store(struct kvidx *w, int pod, const uint64_t *keys, size_t n, enum kvidx_tier tier,
		uint64_t now_ns);

/* Pod no longer holds keys on tiers (a mask; 0: on any tier). A confirmed record on none of
 * those tiers is not changed (nor republished); a speculative one is dropped. Returns the
 * number of records changed, or -KVIDX_EFULL if some change could not be published (no arena
 * memory; counted). */
int kvidx_remove(struct kvidx *w, int pod, const uint64_t *keys, size_t n, unsigned tiers);
/* A tiers mask for kvidx_remove() that names no tier (records hold 8 tier bits): it drops
 * pod's speculative records of keys and leaves its confirmed ones as they are (a peer's
 * withdrawn prediction, tools/ingestd/cluster.c). */
#define KVIDX_REMOVE_SPECULATIVE 0x100u

/* Drops every record of pod in O(1): bumps the pod's generation; a background sweep in
 * kvidx_writer_tick() reclaims the stale records. Returns 0 or -KVIDX_ENOPOD. */
int kvidx_clear_pod(struct kvidx *w, int pod);

/*
 * Adds speculative records (expiring at now_ns + ttl_ms) for keys on pod, except where pod
 * already holds the key confirmed or by a live prediction (both left as they are: a
 * prediction is trusted for one TTL from its first commit, however many routes follow).
 * An expired prediction the reaper has not removed yet is reported to the observer's
 * on_expire and replaced by a new one. ttl_ms in 1..KVIDX_MAX_TTL_MS. Speculative records
 * are evicted first when the table is full. Returns the number of records added, 0 when
 * the pod's speculation is paused, or a negative error.
 */
int kvidx_speculate(struct kvidx *w, int pod, const uint64_t *keys, size_t n, uint64_t now_ns,
		    uint32_t ttl_ms);

/*
 * Reaper step: removes speculative records whose expiry is <= now_ns, examining at most
 * budget slots from a cursor that walks the table (so one call is bounded). Each removed
 * record is reported to the observer's on_expire. Returns the number of records removed.
 */
int kvidx_expire(struct kvidx *w, uint64_t now_ns, size_t budget);

/* ---- KV-cache groups (1.2) ------------------------------------------------------------------ */

/*
 * Hybrid models (sliding-window and full attention, Mamba) keep one KV cache per group of
 * layers (vLLM's kv_cache_groups); a prefix hit needs every group's blocks as its kind
 * requires (struct kvidx_score, hit). A pod's groups are described once (group_idx as vLLM
 * numbers them, below KVIDX_MAX_GROUPS), and stores say which groups hold the keys.
 */
#define KVIDX_MAX_GROUPS 12
enum kvidx_group_kind {
	KVIDX_GROUP_FULL = 1,    /* full attention (also MLA, sink full attention) */
	KVIDX_GROUP_SLIDING = 2, /* sliding window of sliding_window tokens */
	KVIDX_GROUP_MAMBA = 3,   /* Mamba / linear attention: a state per block boundary */
};
struct kvidx_group {
	enum kvidx_group_kind kind;
	uint32_t block_size;     /* the group's block, in tokens (0: the index block size) */
	uint32_t sliding_window; /* KVIDX_GROUP_SLIDING: W tokens (>= 1) */
};

/*
 * Describes group group_idx of pod (g NULL: none). Records the kind, the group's block in
 * index blocks (a block no larger than the index block counts as one) and, for a sliding
 * window, the index blocks a hit needs held back from its end:
 * ceil(ceil((W - 1) / B) * B / index block size), at least 1. kvidx_pod_add() of a new
 * occupant starts with none. Returns 0, -KVIDX_ENOPOD, or -EINVAL (group_idx out of range,
 * unknown kind, a block size that is neither a multiple nor a divisor of the index block,
 * a window of 0).
 */
int kvidx_pod_set_group(struct kvidx *w, int pod, unsigned group_idx, const struct kvidx_group *g);

/*
 * kvidx_store() for the groups in mask groups (bit g: group_idx g): the record also holds the
 * key in those groups. groups 0 is kvidx_store() (the key counts for every group). A record
 * stored without groups keeps meaning every group.
 */
int kvidx_store_groups(struct kvidx *w, int pod, const uint64_t *keys, size_t n,
		       enum kvidx_tier tier, unsigned groups, uint64_t now_ns);

/*
 * The pod no longer holds keys on tiers (a mask, 0: no tier changes) and no longer in the
 * groups of mask groups. A record with groups goes when no tier or no group is left; a record
 * stored without groups only loses tiers (groups 0 and tiers 0: kvidx_remove(), any tier). A
 * speculative record is dropped. Returns the number of records changed, or -KVIDX_EFULL.
 */
int kvidx_remove_groups(struct kvidx *w, int pod, const uint64_t *keys, size_t n,
			unsigned tiers, unsigned groups);

/* ---- observer ------------------------------------------------------------------------------ */

/* Why a record left the table (struct kvidx_observer, on_drop). */
enum kvidx_drop {
	KVIDX_DROP_REMOVED = 1, /* kvidx_remove(): the pod no longer holds the key on any tier */
	KVIDX_DROP_EVICTED,     /* the table or the key's entry made room for another record */
};

/*
 * How the writer tells its user (the speculation policy) what happened to records. Every hook
 * may be NULL and is called on the writer's thread, from inside the writer call that made the
 * change, only after that change is published to readers: a change that could not be
 * published (no arena memory: the call returns -KVIDX_EFULL for it) is not reported, and is
 * reported once when a later call makes it. A hook must not call back into the writer.
 *
 *   on_store    once per kvidx_store() (a valid pod), after its records: pod holds
 *               keys[0..n) (all of them, also those the table had no room for), at now_ns
 *   on_confirm  a speculative record of (key, pod) became confirmed by kvidx_store() at now_ns
 *   on_expire   a speculative record expired unconfirmed: removed by kvidx_expire(), or
 *               replaced by a new prediction in kvidx_speculate()
 *   on_drop     a record of (key, pod) left the table for another reason (enum kvidx_drop);
 *               speculative says what it was, t_ns is its time word (speculative: created-at;
 *               confirmed: stored-at), expires_ns its expiry (0 for a confirmed record)
 *   on_clear    every record of pod was dropped at once: kvidx_clear_pod() (removed false) or
 *               kvidx_pod_remove() (removed true: the index may be reused for another pod)
 */
struct kvidx_observer {
	void *ctx;
	void (*on_store)(void *ctx, int pod, const uint64_t *keys, size_t n, uint64_t now_ns);
	void (*on_confirm)(void *ctx, uint64_t key, int pod, uint64_t created_ns,
			   uint64_t expires_ns, uint64_t now_ns);
	void (*on_expire)(void *ctx, uint64_t key, int pod, uint64_t created_ns,
			  uint64_t expires_ns);
	void (*on_drop)(void *ctx, enum kvidx_drop cause, uint64_t key, int pod, bool speculative,
			uint64_t t_ns, uint64_t expires_ns);
	void (*on_clear)(void *ctx, int pod, bool removed);
};

/* Sets the writer's observer (copied; obs NULL: none). Replaces any previous one. */
void kvidx_writer_set_observer(struct kvidx *w, const struct kvidx_observer *obs);

/* ---- housekeeping ------------------------------------------------------------------------ */

/*
 * Housekeeping, call every few milliseconds: refreshes the heartbeat, advances the RCU epoch,
 * reclaims retired memory, frees the slots of dead readers, expels readers stalled past the
 * stall limit, and advances the pod-clear sweep. Bounded work; never blocks on readers.
 */
void kvidx_writer_tick(struct kvidx *w, uint64_t now_ns);

/* Pod flags readers honour: a paused pod's speculative records do not count. Returns 0 or
 * -KVIDX_ENOPOD. */
int kvidx_pod_set_spec_paused(struct kvidx *w, int pod, bool paused);

/*
 * Publishes pod's load row (kvidx_pod_load(), 1.1): load->inflight, load->prefill_tokens and
 * load->lost,
 * stamped load->updated_ns (0: kvidx_now_ns()). The writer keeps the accounting (what is in
 * flight, what retires it); this only publishes it, under the row's seqlock, so a reader sees
 * either the old or the new row whole. kvidx_pod_add() and kvidx_pod_remove() reset the row
 * to zeros. Returns 0 or -KVIDX_ENOPOD.
 */
int kvidx_pod_set_load(struct kvidx *w, int pod, const struct kvidx_load *load);

/* ---- route commits (router -> writer) ----------------------------------------------------- */

/* What kvidx_drain() hands over. */
struct kvidx_outcome {
	uint64_t corr_id;
	int pod;
	uint32_t cached_tokens, prompt_tokens;
	uint64_t t_ns;
};
struct kvidx_drain_ops {
	/* A validated commit; rt->keys is valid during the call only. */
	void (*route)(void *arg, const struct kvidx_route *rt, uint64_t commit_ns);
	void (*outcome)(void *arg, const struct kvidx_outcome *o);
	void *arg;
};

/*
 * Consumes up to budget messages from the readers' rings, calling ops for each
 * valid one (malformed, stale-generation or truncated ones are counted in stat route_bad and
 * skipped). Returns the number of messages consumed. Never blocks.
 */
int kvidx_drain(struct kvidx *w, size_t budget, const struct kvidx_drain_ops *ops);

/*
 * Waking up for commits without polling the rings. kvidx_writer_doorbell() returns a
 * non-blocking eventfd to include in the writer's poll set (readable when commits may be
 * waiting; the same descriptor on every call), or a negative errno (then poll the rings on a
 * timer). It starts one helper thread that waits on a futex word in the reader registry:
 * only processes that can map the registry (the index's owner and group) can ring it, from
 * any network or PID namespace sharing /dev/shm, and the helper passes on at most one wake-up
 * per 50 us, so a reader ringing without pause cannot make the writer spin. Before sleeping
 * the writer calls kvidx_writer_idle(w, true): it announces the sleep and returns true if
 * commits are already waiting (then don't sleep). A reader committing while the writer is
 * idle rings (wait-free for the reader). After waking, kvidx_writer_idle(w, false) clears the
 * announcement and empties the eventfd. kvidx_writer_close() stops the helper.
 */
int kvidx_writer_doorbell(struct kvidx *w);
bool kvidx_writer_idle(struct kvidx *w, bool idle);

#ifdef __cplusplus
}
#endif
#endif /* KVIDX_WRITER_H */
