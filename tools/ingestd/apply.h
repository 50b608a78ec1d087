/*
 * apply.h — internal to kvidx-ingestd: its one job is turning one decoded event batch of one
 * pod's rank into index operations: request keys from token ids and extra keys (dual keys,
 * docs/DESIGN.md "Request keys and engine keys"), the engine-key map and reference counts
 * (emap.h), and kvidx_store / kvidx_remove / kvidx_clear_pod. No sockets, no sequence numbers
 * (pods.c does those), so it runs against a bare writer in tests.
 *
 * A pod (struct ing_target) has one event stream per data-parallel rank (struct ing_stream);
 * blocks of any rank count for the pod. Rules, each skip counted by its reason in the pod's
 * counters (lib/telemetry.h KV_POD_CTRS; every reason also counts in skipped_events):
 *
 *  1. Each event is judged on its own: one event that cannot be used never costs the others
 *     of its batch. Malformed events (the decoder left them out) count as bad_events, unknown
 *     event types as unknown_type.
 *  2. KV-cache groups. An event without group_idx, or without kv_cache_spec_kind, is of the
 *     model's one group (nothing about groups is recorded: its keys count for every group).
 *     With both, the groups whose blocks a prefix hit can reuse are indexed per group (hybrid
 *     models, group_idx < KVIDX_MAX_GROUPS): full attention (full_attention, mla_attention,
 *     sink_full_attention), sliding window (sliding_window with its window size) and Mamba
 *     (mamba); the pod's group is described in the index (kvidx_pod_set_group: kind, block
 *     size, window) and the records say which groups hold each key (kvidx_store_groups). Each
 *     group has its own engine-map stream and held counts per rank, so a block one group
 *     lost is not held by that group however many others keep it (the index's hybrid hit
 *     then follows vLLM's rule). A sliding-window or Mamba event lists only the blocks its
 *     group keeps, the last ones of its token_ids (the others are masked): their keys chain
 *     through the skipped blocks' tokens, or are taken from another group's entry of the
 *     same hash. Other kinds, and group_idx out of range, are skipped before any shape check
 *     (skipped_group); a BlockRemoved of a group_idx that BlockStored events showed to be
 *     such a group is skipped the same way.
 *  3. Media -> tiers by the library's one map, kvidx_tier_from_medium(): GPU or nil -> gpu;
 *     CPU, CPU_PINNED, CPU_TIER1 -> cpu; STORAGE, FS, OBJ, SHARED_STORAGE, OBJECT_STORE,
 *     CPU_TIER2, DISK -> disk; anything else -> other (counted
 *     in other_medium, per block). locality "REMOTE" events are skipped (skipped_remote)
 *     unless --remote-tier names a tier to store them on.
 *  4. BlockStored shape: token_ids must be block_hashes x block_size, extra_keys (when
 *     present) one entry per hash, and the engine block size a multiple or a divisor of the
 *     index block size; otherwise skipped_shape.
 *  5. Request keys: the first block chains from the parent's chain state (the parent's last
 *     request key, plus the tokens of an index block it left unfinished) or, for a nil
 *     parent, from the model's root — lora_name when set, else the pod's model. An engine
 *     block of E tokens yields E/I request keys (I the index block size); with I a multiple
 *     of E, the engine block that completes an index block yields its key, and holds it only
 *     while every engine block before it in that index block is held (the last copy of any
 *     of them going drops the completing block's references: emap_link). A non-nil parent
 *     the map does not know skips the event (unknown_parent), as llm-d does.
 *  6. Extra keys (docs/events.md "extra_keys"): the LoRA name (a first string equal to
 *     lora_name) is dropped; multimodal identifiers (tuple or bare string) and the salt become
 *     items of the block's key (kvidx_key_block), in the order given, an item repeated by
 *     consecutive engine blocks of one index block keyed once. A block carrying extras no
 *     router can reproduce (prompt-embeds bytes, anything not a string) ends the event's
 *     chain there (unkeyable_extras, once per event); the blocks before it are indexed.
 *     With E > I, multimodal items are not placeable within the engine block and end the
 *     chain too; a string on the request's first block is the salt, keyed on index block 0.
 *  7. Copies: every BlockStored of an engine hash is one physical copy on its tier (vLLM does
 *     not de-duplicate; dup_copies counts the extra ones); BlockRemoved drops one (or sets the
 *     count from remaining_copy_counts when present); the request keys leave the index only
 *     when the last copy is gone and no other engine block or rank still references them
 *     (copies_kept counts removals that left copies). Unknown hashes count unknown_removed.
 *  8. Offload placeholders (no token ids; vLLM's OffloadingConnector, block_size 0) add their
 *     tier to engine blocks the map knows (offload_applied, per block) and count
 *     offload_unknown for the others.
 *  9. AllBlocksCleared, and pods.c's restart and unrecoverable-gap clears, drop the rank's
 *     blocks only: with one rank, kvidx_clear_pod (O(1)); with several, the rank's engine-map
 *     entries are walked and each key whose last reference goes is removed.
 * 10. Every kvidx_store reaches spec.c through the writer's observer (spec_init() sets it):
 *     a speculative record it confirms records the route-to-confirmation latency and counts
 *     as confirmed in time or late; then the event's keys are matched against predictions
 *     the reaper already removed (late confirmations).
 */
#ifndef KVIDX_INGEST_APPLY_H
#define KVIDX_INGEST_APPLY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "emap.h"
#include "kvidx_writer.h"
#include "log.h"
#include "telemetry.h"
#include "wire.h"

/* A block whose first copy is counted at the end of its event (apply.c, flush_copies). */
struct ing_pend {
	struct emap_ent *e;
	uint64_t ehash; /* e's, to tell whether e still holds that block */
	uint64_t key0;  /* its first request key, for prefetching */
	bool has_key;
};

/* Process-wide: the writer, the key scheme and scratch space. */
struct ing_apply {
	struct kvidx *w;
	struct emap *emap;
	enum kvidx_key_algo algo;
	const char *seed;
	uint32_t block_size;  /* index block size */
	unsigned remote_tier; /* locality REMOTE: 0 skipped, else stored on this tier */
	uint64_t *keys;       /* scratch: request keys of one event */
	size_t keys_cap;
	uint64_t *rm;         /* scratch: keys to remove */
	size_t rm_cap;
	uint32_t *tail;       /* scratch: tokens of an unfinished index block */
	const char **items;   /* scratch: items of the index block being keyed */
	int64_t *item_start;  /* their first token in the index block, INT64_MIN: unknown */
	uint32_t *item_blk;   /* the engine block that listed them */
	size_t items_cap, nitems;
	uint64_t *rmg[3];     /* scratch: keys leaving a group and a tier, a tier, a group */
	size_t rmg_cap[3], nrmg[3];
	struct ing_pend *pend; /* scratch: this event's new blocks (apply.c, defer_copy) */
	size_t pend_cap, npend;
	/* Called between two events of a batch when not NULL (ingestd drains route commits
	 * there: a batch of 64 prompts is milliseconds of work a commit should not wait for). */
	void (*between)(void *arg);
	void *between_arg;
};

/* One pod in the index, shared by its ranks' streams. */
struct ing_target {
	int pod;        /* kvidx pod index, -1 until registered */
	struct kv_tm_pod ctr; /* the pod's counters (telemetry.h: the segment's, or a buffer) */
	const char *label; /* for log lines */
	struct emap_held held; /* references per (request key, tier), all ranks together */
	unsigned nstreams;     /* ranks subscribed */
	/* Root-key cache: the last model's root. */
	bool root_ok;
	char root_model[KVW_LORA_NAME_MAX];
	uint64_t root;
	bool warned_ratio, warned_extra, warned_other;
	/* KV-cache groups (group_idx < 64) seen in BlockStored events: prefix-reusable or not.
	 * BlockRemoved carries no spec kind, only group_idx: these tell its group apart. */
	uint64_t prefix_groups, other_groups;
	/* Groups indexed per group (rule 2): their held counts, and what the index was told. */
	unsigned grouped;                            /* bit g: group g seen with a kind */
	struct emap_held gheld[KVIDX_MAX_GROUPS];
	struct kvidx_group gdesc[KVIDX_MAX_GROUPS];  /* as last set on pod gdesc_pod */
	int gdesc_pod;
	struct ilog_limit lim;
};

/* One rank's event stream of a pod. */
struct ing_stream {
	struct ing_target *t;
	unsigned rank;  /* < KV_POD_RANKS */
	uint64_t token; /* engine-map stream (emap_stream_open) */
	uint64_t gtok[KVIDX_MAX_GROUPS]; /* per-group streams (rule 2), 0 until used */
};

/* Adds v to counter i of t (writer-only, relaxed: readers may see it lag). */
static inline void ing_ctr_add(struct ing_target *t, enum kv_pod_ctr i, uint64_t v)
{
	kv_tm_add(t->ctr, i, v);
}
static inline void ing_ctr_set(struct ing_target *t, enum kv_pod_ctr i, uint64_t v)
{
	kv_tm_set(t->ctr, i, v);
}
/* Rank counter w of stream s. */
static inline void ing_rank_add(struct ing_stream *s, enum kv_rank_ctr w, uint64_t v)
{
	kv_tm_rank_add(s->t->ctr, s->rank, w, v);
}
static inline void ing_rank_set(struct ing_stream *s, enum kv_rank_ctr w, uint64_t v)
{
	kv_tm_rank_set(s->t->ctr, s->rank, w, v);
}

void ing_apply_init(struct ing_apply *a, struct kvidx *w, struct emap *emap,
		    enum kvidx_key_algo algo, const char *seed, uint32_t block_size);
void ing_apply_free(struct ing_apply *a);

/* Prepares t (not registered, counters in ctr) and frees it. */
void ing_target_init(struct ing_target *t, struct kv_tm_pod ctr);
void ing_target_free(struct ing_target *t);

/* Opens stream s of t for rank (t->nstreams + 1). 0, or -ENOMEM. */
int ing_stream_open(struct ing_apply *a, struct ing_stream *s, struct ing_target *t,
		    unsigned rank);
/* Closes s (its entries age out; the caller removes or clears the pod). */
void ing_stream_close(struct ing_apply *a, struct ing_stream *s);

/*
 * Applies batch b of stream s. model: the pod's model for keys (lora_name overrides it per
 * event). now: CLOCK_MONOTONIC ns for the records. Every event is applied or counted under
 * its skip reason (rules above). Returns 0, or -ENOMEM when scratch space ran out (the events
 * from that one on were not applied; logged).
 */
int ing_apply_batch(struct ing_apply *a, struct ing_stream *s, const struct kvw_batch *b,
		    const char *model, uint64_t now);

/* Drops every block rank s holds (rule 9); clears + 1 for the pod and the rank. */
void ing_stream_clear(struct ing_apply *a, struct ing_stream *s);


#endif /* KVIDX_INGEST_APPLY_H */
