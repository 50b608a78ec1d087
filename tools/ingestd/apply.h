/*
 * apply.h — internal to kvidx-ingestd: its one job is turning one decoded event batch of one
 * pod into index operations: request keys from token ids (dual keys, DESIGN.md section 3),
 * the engine-key map, and kvidx_store / kvidx_remove / kvidx_clear_pod. No sockets, no
 * sequence numbers (pods.c does those), so it runs against a bare writer in tests.
 *
 * Rules (each one counted in the pod's counters, shm/layout.h KV_POD_CTRS):
 *
 *  1. Validate first, apply second: a batch in which any BlockStored has token_ids other than
 *     block_hashes x block_size (or no tokens at all, see 5), or extra_keys of another length,
 *     is rejected whole (-EBADMSG; the caller counts decode_errors) and nothing of it is
 *     applied. Events that are valid but cannot be indexed are skipped one by one (2-4).
 *  2. Only prefix-reusable KV-cache groups (kvw_is_prefix_group) are indexed; events of
 *     other groups, events with an unknown tag, BlockStored events whose engine block size is
 *     not a multiple of the index block size, and BlockStored events carrying extra_keys
 *     (multimodal / salted blocks, whose keys kvidx_key_chain cannot compute) count as
 *     skipped_events. The two latter are logged once per pod.
 *  3. Request keys: the first block chains from the parent's request key (the last one the
 *     parent's engine block yielded) or, for a nil parent, from the root of the model —
 *     lora_name when set, else the pod's model. An engine block of E tokens yields E/I request
 *     keys (I the index block size); the map remembers them all, so that BlockRemoved removes
 *     them all.
 *  4. A non-nil parent the map does not know: the event is skipped and counted in
 *     unknown_parent. This follows llm-d (pkg/kvevents/pool.go, processEventBatch): when
 *     GetRequestKey fails for the parent engine key it logs and `continue`s, dropping every
 *     block of that event, and goes on with the next event of the batch.
 *  5. A BlockStored with block hashes but no token ids at all is a tier update (vLLM's
 *     offloading connector announces a CPU copy that way): each engine key is resolved through
 *     the map and the known ones are stored on the event's tier, as llm-d's
 *     handleDeviceTierUpdate does. Unknown ones count as skipped_events.
 *  6. BlockRemoved resolves each engine key through the map and removes the request keys on
 *     the event's tier only; unknown engine keys count as skipped_events. A BlockRemoved of a
 *     group_idx that BlockStored events showed to be a non-prefix group (hybrid models:
 *     sliding-window or Mamba groups may reuse the same block hashes) is skipped. The mapping is kept
 *     (the content hash still names the same tokens), so a later removal on another tier or a
 *     child's parent lookup still resolves; FIFO eviction bounds it.
 *  7. AllBlocksCleared clears the pod (O(1) in the index) and starts a new engine-map stream
 *     token, which forgets the pod's mappings at once.
 *  8. Every kvidx_store reaches spec.c through the writer's observer (spec_init() sets it):
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
#include "layout.h"
#include "log.h"
#include "wire.h"

/* Process-wide: the writer, the key scheme and scratch space. */
struct ing_apply {
	struct kvidx *w;
	struct emap *emap;
	enum kvidx_key_algo algo;
	const char *seed;
	uint32_t block_size; /* index block size */
	uint64_t *keys;      /* scratch: request keys of one event */
	size_t keys_cap;
};

/* One pod's event stream as the apply step sees it. */
struct ing_target {
	int pod;        /* kvidx pod index */
	uint64_t token; /* engine-map stream token (emap_new_token) */
	uint64_t *ctr;  /* the pod's counters (kv_writer_pod_ctrs), indexed by enum kv_pod_ctr */
	const char *label; /* for log lines */
	/* Root-key cache: the last model's root. */
	bool root_ok;
	char root_model[KVW_LORA_NAME_MAX];
	uint64_t root;
	bool warned_ratio, warned_extra;
	/* KV-cache groups (group_idx < 64) seen in BlockStored events: prefix-reusable or not.
	 * BlockRemoved carries no spec kind, only group_idx: these tell its group apart. */
	uint64_t prefix_groups, other_groups;
	struct ilog_limit lim;
};

/* Adds v to counter i of t (writer-only, relaxed: readers may see it lag). */
static inline void ing_ctr_add(struct ing_target *t, enum kv_pod_ctr i, uint64_t v)
{
	stat_add(&t->ctr[i], v);
}
static inline void ing_ctr_set(struct ing_target *t, enum kv_pod_ctr i, uint64_t v)
{
	if (ld_relaxed(&t->ctr[i]) != v)
		st_relaxed(&t->ctr[i], v);
}

void ing_apply_init(struct ing_apply *a, struct kvidx *w, struct emap *emap,
		    enum kvidx_key_algo algo, const char *seed, uint32_t block_size);
void ing_apply_free(struct ing_apply *a);

/*
 * Applies batch b of target t. model: the pod's model for keys (lora_name overrides it per
 * event). now: CLOCK_MONOTONIC ns for the records. Returns 0 when the batch passed validation
 * (it was applied, events skipped per the rules above counted), -EBADMSG when it did not
 * (nothing applied; a message in err), or -ENOMEM (nothing applied).
 */
int ing_apply_batch(struct ing_apply *a, struct ing_target *t, const struct kvw_batch *b,
		    const char *model, uint64_t now, char *err, size_t errlen);

/* Drops everything pod t holds: kvidx_clear_pod, a new stream token, clears + 1. */
void ing_target_clear(struct ing_apply *a, struct ing_target *t);

#endif /* KVIDX_INGEST_APPLY_H */
