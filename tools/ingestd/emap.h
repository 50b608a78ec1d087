/*
 * emap.h — internal to kvidx-ingestd: its one job is the writer-private bookkeeping between
 * engine block keys (the opaque hashes in vLLM events) and the request keys the index is
 * keyed by: the engine-key map (with copy counts per tier) and, per pod, the reference counts
 * that say when the pod stops holding a request key.
 *
 * Engine-key map. Keyed by (stream token, engine hash). A stream is one rank's event stream
 * of one pod (data parallelism gives a pod several); its token is replaced whenever that rank
 * is cleared (AllBlocksCleared, restart, failed replay). Each entry holds:
 *   - the request keys the engine block completes (one when engine and index block sizes are
 *     equal, engine/index when the engine's blocks are a multiple, zero or one when the index
 *     block is a multiple of the engine block: the block that completes an index block owns
 *     its key);
 *   - the chain state after the block, for a child's BlockStored: the last request key and
 *     the tokens of an index block still being filled (the many:1 case);
 *   - copies[t]: how many physical copies of the block the stream holds on tier t (vLLM does
 *     not de-duplicate: each copy has its own BlockStored and BlockRemoved).
 * Entries of one stream are linked, so a rank can be cleared alone (emap_stream_drain).
 * Bounded: at most cap entries; inserting into a full map evicts the oldest insertion (FIFO).
 *
 * Held counts (struct emap_held, one per pod): for each request key and tier, how many
 * (stream, engine block) pairs with copies > 0 reference it. The pod holds the key on that
 * tier while its count is > 0: a key two ranks hold, or a partial-block entry and the full
 * block that replaced it, stays until the last reference goes. An entry evicted from the
 * engine-key map drops its references without removing anything from the index (the key
 * then stays until the pod is cleared, as before reference counting).
 *
 * Single-threaded: only the ingest thread uses these. Memory: the fifomap's (48 bytes per entry
 * slot and 16 to 32 bytes of index per slot, committed as touched), plus a heap array per
 * entry with more than one key or a chain tail; 24 bytes per held slot (load <= 1/2).
 */
#ifndef KVIDX_INGEST_EMAP_H
#define KVIDX_INGEST_EMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fifomap.h"
#include "kvidx.h"

#define EMAP_NONE UINT32_MAX /* no slot (list ends) */

/* Per-pod held counts: open addressing, linear probing, backward-shift deletion. */
struct emap_hslot {
	uint64_t key;            /* request key; slot empty when all counts are 0 */
	uint32_t n[KVIDX_NTIERS]; /* references per tier index (tier bit 1 << i) */
};
struct emap_held {
	struct emap_hslot *s;
	size_t cap; /* power of two, or 0 */
	size_t used;
};

int emap_held_init(struct emap_held *h);
void emap_held_free(struct emap_held *h);
/* Forgets every count (the pod was cleared). */
void emap_held_reset(struct emap_held *h);
/* Adds one reference to (key, tier index ti). Returns the new count, or -ENOMEM. */
int emap_held_inc(struct emap_held *h, uint64_t key, unsigned ti);
/* Drops one reference; returns the new count (0 also when there was none). */
uint32_t emap_held_dec(struct emap_held *h, uint64_t key, unsigned ti);
/* Starts loading the slot a later inc / dec / get of key reads first (a hint). */
void emap_held_prefetch(const struct emap_held *h, uint64_t key);
/* The count of (key, ti). */
uint32_t emap_held_get(const struct emap_held *h, uint64_t key, unsigned ti);

#define EMAP_TAIL_ITEMS 0x1u /* flags: the tail's index block had extra items (not kept) */
/* flags: the entry's references on tier index ti were dropped early (an engine block before
 * it in the index block it completes went: apply.c, break_dependent); they count no more. */
#define EMAP_UNREF(ti) (0x100u << (ti))

struct emap_ent {
	uint64_t token; /* the lookup key: token and ehash; 0 = dead slot */
	uint64_t ehash;
	uint32_t prev, next;            /* the stream's list, slot numbers */
	uint16_t copies[KVIDX_NTIERS];  /* physical copies per tier index */
	uint16_t nkeys, ntail;          /* request keys completed; tail tokens */
	uint32_t flags;
	union {
		uint64_t one;   /* nkeys == 1, ntail == 0: the key (and the chain's last key) */
		uint64_t *many; /* else: keys[nkeys], last key, tail tokens (uint32, packed) */
	} k;
};

struct emap_stream {
	uint64_t token;          /* current token of the slot; 0 = free */
	uint32_t head;           /* first entry, EMAP_NONE if none */
	uint64_t n;              /* entries */
	struct emap_held *held;  /* the pod's held counts, for evictions */
};

struct emap {
	struct fifomap fm;   /* the entries (fifomap.h): slot order is the FIFO order */
	uint64_t live;       /* entries findable */
	uint64_t evictions;  /* live entries dropped to make room */
	struct emap_stream *streams; /* token = generation << 32 | index + 1 */
	size_t nstreams, streams_cap;
	uint32_t stream_gen;
};

/* Prepares an empty map of at most cap entries (1 <= cap < 2^32 - 1). 0 or -ENOMEM/-EINVAL. */
int emap_init(struct emap *m, uint64_t cap);
void emap_free(struct emap *m);

/* A fresh stream whose references count in held (may be NULL: none). Returns its token
 * (never 0, never handed out before), or 0 when out of memory. */
uint64_t emap_stream_open(struct emap *m, struct emap_held *held);

/* Forgets stream token in O(1): its entries are never found again and age out; their held
 * references are not dropped (the caller resets held or drops the pod). */
void emap_stream_close(struct emap *m, uint64_t token);

/*
 * Drops every entry of stream token, calling fn (if not NULL) on each before it goes (for
 * the caller to release the entry's references), then closes the stream. O(its entries).
 */
void emap_stream_drain(struct emap *m, uint64_t token,
		       void (*fn)(void *arg, const struct emap_ent *e), void *arg);

/* Entries of stream token (0 if the token is closed). */
uint64_t emap_stream_entries(const struct emap *m, uint64_t token);

/* Starts loading the index line a later emap_find / emap_put of (token, ehash) reads (a hint:
 * no effect on the map). */
void emap_prefetch(const struct emap *m, uint64_t token, uint64_t ehash);
/* The same for the entry itself, once the index line is loaded (else it costs that miss). */
void emap_prefetch_entry(const struct emap *m, uint64_t token, uint64_t ehash);

/* The entry of (token, ehash), or NULL. Valid until the next emap_put or emap_del. */

struct emap_ent *emap_find(struct emap *m, uint64_t token, uint64_t ehash);

/*
 * Maps (token, ehash) to keys[0..nkeys) with the chain state (last, tail[0..ntail)), copies
 * all 0, replacing any previous mapping (its held references are dropped), which counts as a
 * new insertion for the FIFO order. Evicts the oldest entry when full. Returns the entry, or
 * NULL with errno ENOMEM (the map is unchanged) / EINVAL (token closed or 0, nkeys or ntail
 * above 65535).
 */
struct emap_ent *emap_put(struct emap *m, uint64_t token, uint64_t ehash, const uint64_t *keys,
			  uint32_t nkeys, uint64_t last, const uint32_t *tail, uint32_t ntail,
			  uint32_t flags);

/* Forgets (token, ehash), dropping its held references. Returns 1 if it was there, else 0. */
int emap_del(struct emap *m, uint64_t token, uint64_t ehash);

/* The entry's request keys (count in *n). */
const uint64_t *emap_keys(const struct emap_ent *e, uint32_t *n);
/*
 * An entry whose block leaves an index block open (ntail > 0, engine blocks smaller than the
 * index block) has two link words, zero when put: [0] the engine hash of the block before it
 * in that index block (0: it starts the index block), [1] the engine hash of the block that
 * completed the index block (0: none yet). NULL for other entries. Valid as emap_keys().
 */
uint64_t *emap_link(struct emap_ent *e);

/* The chain state after the entry's block: last request key, tail tokens (count in *ntail). */
uint64_t emap_chain(const struct emap_ent *e, const uint32_t **tail, uint32_t *ntail);

#endif /* KVIDX_INGEST_EMAP_H */
