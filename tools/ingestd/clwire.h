/*
 * clwire.h — internal to kvidx-ingestd: its one job is the cluster link's message format
 * (cluster.c, docs/cluster.md): a small fixed-layout little-endian binary encoding of batches
 * of route commits and withdrawals, with explicit bounds, and a decoder that validates every
 * field, so that a hostile peer can cost at most its own message.
 *
 * A message:
 *
 *   header, 32 bytes   magic u32 "KVC1" | version u8 (2) | flags u8 (0) | nrec u16 (1..256)
 *                      | origin u64 | scheme u64 | sent_ns u64 (origin's CLOCK_REALTIME)
 *   nrec records       kind u8 (1 commit, 2 withdraw, 3 done) | pod_len u8 (1..63) |
 *                      prefill_len u8 (0..63) | zero u8 | ttl_ms u16 | prefill_ttl_ms u16 |
 *                      nkeys u16 (commit, withdraw: 1..2048; done: 0) | zero u16 | tokens u32
 *                      (commit: the request's uncached prompt tokens, its load; else 0) |
 *                      corr u64 | commit_ns u64 (origin's CLOCK_REALTIME) | pod name |
 *                      prefill pod name | nkeys x u64 block keys
 *
 * A commit is a route (its predictions and its load on the outcome pod: the prefill pod when
 * one is named, else the pod); a withdraw is its failed outcome (the predictions go, the load
 * is retired); a done is any other outcome (the load is retired; pod names the outcome pod).
 * Version 2 added the load (tokens, done); a version 1 message is refused as unknown.
 *
 * Nothing else crosses the wire: block keys (hashes of token blocks, never tokens), pod names
 * (printable ASCII, as the index stores them), counts and times. A message is at most
 * CLW_MSG_MAX bytes. Records are self-delimiting: a record with a bad value but sound lengths
 * is skipped alone (CLW_SKIP); one whose lengths run past the message ends the message
 * (CLW_BAD), the records before it stand.
 */
#ifndef KVIDX_INGEST_CLWIRE_H
#define KVIDX_INGEST_CLWIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvidx.h"

#define CLW_MAGIC 0x3143564bu /* "KVC1" read as a little-endian u32 */
#define CLW_VERSION 2
#define CLW_HDR 32
#define CLW_REC_HDR 32
#define CLW_MSG_MAX (64u << 10)
#define CLW_MAX_RECS 256
#define CLW_NAME_MAX (KVIDX_POD_NAME_MAX - 1)
#define CLW_MAX_KEYS KVIDX_MAX_COMMIT_KEYS

enum clw_kind { CLW_COMMIT = 1, CLW_WITHDRAW = 2, CLW_DONE = 3 };

struct clw_header {
	uint16_t nrec;
	uint64_t origin;  /* the sending writer's random id, new at each start */
	uint64_t scheme;  /* clw_scheme() of its index */
	uint64_t sent_ns; /* CLOCK_REALTIME at the sender when the message left */
};

/* One record. keys point into the message (little-endian u64, maybe unaligned): read them
 * with clw_key(). */
struct clw_rec {
	uint8_t kind;
	uint16_t ttl_ms, prefill_ttl_ms; /* commit: the TTL at the origin, per pod */
	uint16_t nkeys;
	uint32_t tokens;    /* commit: uncached prompt tokens (the load it adds); else 0 */
	uint64_t corr;      /* the origin's correlation id */
	uint64_t commit_ns; /* commit: CLOCK_REALTIME at the origin when it applied the commit */
	char pod[KVIDX_POD_NAME_MAX], prefill[KVIDX_POD_NAME_MAX]; /* prefill "" = none */
	const uint8_t *keys;
};

/* The key scheme id: algorithm, seed and block size (peers must agree on all three). */
uint64_t clw_scheme(int algo, const char *seed, uint32_t block_size);

/* An encoder writing into buf (at least CLW_HDR bytes, at most CLW_MSG_MAX used). */
struct clw_enc {
	uint8_t *buf;
	size_t cap, len;
	uint16_t nrec;
};
void clw_enc_begin(struct clw_enc *e, uint8_t *buf, size_t cap, uint64_t origin,
		   uint64_t scheme);
/* Appends r with keys[0..r->nkeys): 0, -ENOSPC (does not fit, or CLW_MAX_RECS reached: the
 * message is unchanged) or -EINVAL (a field out of bounds). */
int clw_enc_add(struct clw_enc *e, const struct clw_rec *r, const uint64_t *keys);
/* Finishes the header (record count, sent_ns); returns the message length. */
size_t clw_enc_finish(struct clw_enc *e, uint64_t sent_ns);

enum clw_status {
	CLW_OK = 1,    /* a record */
	CLW_END = 0,   /* no more records */
	CLW_SKIP = -1, /* a record with a bad field, skipped; go on */
	CLW_BAD = -2,  /* the message cannot be read further */
};

struct clw_dec {
	const uint8_t *p, *end;
	uint16_t left;
	const char *why; /* what was wrong, for CLW_SKIP / CLW_BAD and a bad header */
};
/* Reads and checks the header: 0, or -1 with d->why (too short or long, magic, version,
 * flags, record count). */
int clw_dec_begin(struct clw_dec *d, const void *msg, size_t len, struct clw_header *h);
/* The next record into *r. CLW_END also checks that nothing trails the last record (else
 * CLW_BAD). */
enum clw_status clw_dec_next(struct clw_dec *d, struct clw_rec *r);

static inline uint64_t clw_key(const struct clw_rec *r, size_t i)
{
	const uint8_t *p = r->keys + 8 * i;
	uint64_t v = 0;

	for (int b = 7; b >= 0; b--)
		v = v << 8 | p[b];
	return v;
}

#endif /* KVIDX_INGEST_CLWIRE_H */
