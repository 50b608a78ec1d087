/*
 * emap.h — internal to kvidx-ingestd: its one job is the writer-private map from engine block
 * keys (the opaque hashes in vLLM events) to the request keys the index is keyed by.
 *
 * Keyed by (stream token, engine hash): a stream token names one pod's event stream and is
 * replaced whenever that pod is cleared (AllBlocksCleared, restart, failed replay), so
 * clearing a pod's mappings is O(1): the old entries are never found again and age out.
 * Each entry holds the list of request keys one engine block yields (one when engine and index
 * block sizes are equal, engine/index when the engine's blocks are a multiple).
 *
 * Bounded: at most cap entries; inserting into a full map evicts the oldest insertion (FIFO).
 * Single-threaded: only the ingest thread uses it. Memory: 32 bytes per entry slot (allocated
 * in chunks as the map fills) plus the hash set's pointer array, plus a heap array per entry
 * with more than one request key.
 */
#ifndef KVIDX_INGEST_EMAP_H
#define KVIDX_INGEST_EMAP_H

#include <ck_hs.h>
#include <stddef.h>
#include <stdint.h>

struct emap_ent;

struct emap {
	ck_hs_t hs;
	struct emap_ent **chunks; /* slot i is chunks[i >> EMAP_CHUNK_SHIFT][i & mask] */
	size_t nchunks;
	uint64_t cap;        /* slots */
	uint64_t head;       /* next slot to write; slots wrap once the map is full */
	uint64_t used;       /* slots ever written, capped at cap */
	uint64_t live;       /* entries findable */
	uint64_t evictions;  /* live entries dropped to make room */
	uint64_t next_token;
	uint64_t removes_since_gc;
};

/* Prepares an empty map of at most cap entries (cap >= 1). 0 or -ENOMEM / -EINVAL. */
int emap_init(struct emap *m, uint64_t cap);
void emap_free(struct emap *m);

/* A fresh stream token (never 0, never handed out before by this map). */
uint64_t emap_new_token(struct emap *m);

/*
 * Maps (token, ehash) to keys[0..n) (n >= 1), replacing any previous mapping, which counts as
 * a new insertion for the FIFO order. Evicts the oldest entry when full. 0 or -ENOMEM (the map
 * is unchanged) / -EINVAL.
 */
int emap_put(struct emap *m, uint64_t token, uint64_t ehash, const uint64_t *keys, uint32_t n);

/* The request keys of (token, ehash) and their count in *n, or NULL. Valid until the next
 * emap_put or emap_del. */
const uint64_t *emap_get(struct emap *m, uint64_t token, uint64_t ehash, uint32_t *n);

/* Forgets (token, ehash). Returns 1 if it was there, else 0. */
int emap_del(struct emap *m, uint64_t token, uint64_t ehash);

#endif /* KVIDX_INGEST_EMAP_H */
