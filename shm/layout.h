/*
 * layout.h — internal, never installed: the byte layout of kvidx's shared-memory objects.
 *
 * An index NAME is four kinds of POSIX shm objects (/dev/shm/...):
 *
 *   /NAME           the index header (struct kvidx_idx_hdr, one 4096-byte page), written by
 *                   the writer only: created 0600, or 0640 with a group, and mapped PROT_READ
 *                   by readers. It names the current data generation and registry, holds the
 *                   RCU epoch, the writer's pid and its idle flag. Readers start here, and
 *                   check that every other object they open has the same owner.
 *   /NAME.lock      empty, 0600: the writer holds an OFD write lock on its byte 0 for its
 *                   lifetime. Readers cannot open it, so they cannot hold it against a writer.
 *   /NAME.reg.K     reader registry K, read-write for readers (0660 with a group): a header,
 *                   the doorbell word, one cache-line slot per reader, then one route ring per
 *                   slot (struct kv_ring_hdr + ring_entries x 64 B). OFD locks on byte 1+i of
 *                   its file are held by the reader owning slot i. The writer recreates it as
 *                   K+1 when it is damaged (truncated) or when a new writer asks for another
 *                   reader geometry; readers follow ih_reg_gen and re-register.
 *   /NAME.data.G    data generation G: header, pod table, stats, slot array, entry arena.
 *                   Written by the writer only; readers map it PROT_READ.
 *
 * Index header (64-byte lines):
 *
 *   0    ih_magic, ih_stamp, ih_size (4096), ih_created_ns, ih_max_readers, ih_ring_entries,
 *        ih_reg_size: the registry's geometry, written before ih_reg_gen names a registry
 *   64   ih_generation (current data generation, release), ih_reg_gen (current registry,
 *        release), ih_epoch (RCU epoch, seq_cst), ih_writer_pid, ih_writer_idle
 *
 * Registry K (offsets fixed by the geometry, checked against the index header):
 *
 *   0    struct kvidx_ctl_hdr line 0: magic, stamp, size, max_readers, slots_off (128),
 *        created_ns, ring_off, ring_entries, reg_gen (= K). Written once by the writer.
 *   64   ch_bell: the doorbell futex word (readers add 1 and FUTEX_WAKE)
 *   128  struct kvidx_reader_slot[max_readers]
 *   ...  per slot: struct kv_ring_hdr, then ring_entries struct kv_msg
 *
 * Data segment (offsets are fields of the header, each region 4096-aligned):
 *
 *   0        struct kvidx_data_hdr           identity, geometry, region offsets, heartbeat
 *   dh_stats_off  uint64_t[KV_STATS_WORDS]   writer counters (relaxed)
 *   dh_pods_off   struct kvidx_pod[max_pods] pod name, model, state word, per-pod counters
 *   dh_hist_off   uint64_t[max_pods][KV_HIST_PER_POD][KV_HIST_BUCKETS] latency histograms
 *   dh_routers_off struct kvidx_router[max_readers] per router worker (registry slot) stats
 *   dh_load_off   struct kvidx_load_row[max_pods] the load view: in flight, prefill to compute
 *   dh_slots_off  uint64_t[nslots+max_probe] open-addressing slots, linear probing, no wrap
 *   dh_arena_off  16-byte units[arena_units] entries: key, meta, then cap records
 *
 * Slot word: 0 = EMPTY (ends a probe), KV_SLOT_TOMB = deleted (probe goes on), else
 * (fingerprint32 << 32) | entry unit index (1..arena_units-1). One 64-bit word, so a reader
 * sees either the old or the new entry of a key, never a mix.
 *
 * Entry at unit e: word0 = key, word1 = meta (npods bits 0-7, cap bits 8-15), then cap
 * records of two words each at units e+1 .. e+cap. Entries are copy-on-write: once a slot
 * points at one, it never changes until it is retired through RCU and reused.
 *
 * Record: w0 = pod (0-15) | pod generation (16-31) | tiers (32-39) | flags (40-47) |
 *         ttl_ms (48-63), or for a confirmed record with KV_REC_GROUPS the mask of the
 *         pod's KV-cache groups holding the key (48-59, layout 8; without the flag: every
 *         group); w1 = t_ns (confirmed: stored-at; speculative: created-at).
 *
 * The normative description of every byte, and of the protocol readers follow, is
 * shm/FORMAT.md; tests/test_format.c checks this header against it.
 *
 * Who writes what: the index header and every data segment are written by the writer only.
 * In the registry, the header's line 0 and rh_tail are written by the writer; ch_bell by
 * committing readers; a reader slot's rs_ctr, rs_pid, rs_claimed_ns, rs_lookups, rs_commits,
 * rs_dropped and its ring's rh_head and messages by its reader, rs_expelled by the writer,
 * rs_state by both with CAS (reader: claim, re-register, leave; writer: free a dead slot,
 * expel a stalled reader). Any process that can map the registry can write all of it, or
 * truncate it: the writer never reads back what it wrote there, treats every registry word
 * as untrusted, and survives a truncation (lib/guard.c).
 */
#ifndef KVIDX_LAYOUT_H
#define KVIDX_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "atomics.h"

#define KV_IDX_MAGIC 0x5844495844494b56ull  /* "VKIDXIDX" little-endian */
#define KV_CTL_MAGIC 0x4c54435844494b56ull  /* "VKIDXCTL" little-endian */
#define KV_DATA_MAGIC 0x4154414458444b56ull /* "VKDXDATA" little-endian */
#define KV_LAYOUT_VERSION 8u

/*
 * Format stamp: the layout version and the sizes the format fixes, all constants of
 * shm/FORMAT.md (section 4), not properties of a compiler, so that a reader in another
 * language computes the same word. The structs below are asserted to these sizes.
 */
#define KV_POD_BYTES 2752
#define KV_MSG_BYTES 64
#define KV_RSLOT_BYTES 64
#define KV_STAMP                                                                             \
	(((uint64_t)KV_LAYOUT_VERSION << 48) | ((uint64_t)KV_HIST_BUCKETS << 32) |            \
	 ((uint64_t)KV_POD_BYTES << 16) | ((uint64_t)KV_MSG_BYTES << 8) | (uint64_t)KV_RSLOT_BYTES)

#define KV_SLOT_EMPTY 0ull
#define KV_SLOT_TOMB 0x00000000ffffffffull
#define KV_UNIT_MAX 0xfffffffeull /* entry indices stay below the TOMB pattern */

#define KV_MAX_PPK 64
#define KV_MAX_PODS 4096
#define KV_MAX_READERS 4096
#define KV_MAX_PROBE 256 /* probe bound: readers look at most this many slots per key */
#define KV_EPOCH_MAX (1ull << 62) /* an inherited epoch above this is damage: restart at 1 */
#define KV_GEN_MAX (1ull << 62)   /* likewise for generation numbers */

#define KV_REC_SPEC 0x1u   /* record flag: speculative */
#define KV_REC_GROUPS 0x2u /* record flag (layout 8): bits 48-59 are its KV-cache group mask */

/* ---- index header ---- */

#define KV_IDX_SIZE 4096u

struct kvidx_idx_hdr {
	/* Written at creation, and before ih_reg_gen names a registry of another geometry. */
	uint64_t ih_magic;
	uint64_t ih_stamp;
	uint64_t ih_size; /* KV_IDX_SIZE */
	uint64_t ih_created_ns;
	uint32_t ih_max_readers;  /* of the registry ih_reg_gen names */
	uint32_t ih_ring_entries; /* ditto */
	uint64_t ih_reg_size;     /* ditto: kv_ctl_size(max_readers, ring_entries) */
	uint8_t ih_pad0[KVIDX_CACHELINE - 48];
	/* Writer-written, loaded by readers on every call. */
	uint64_t ih_generation; /* current data generation; release-stored after it is built */
	uint64_t ih_reg_gen;    /* current registry /NAME.reg.K; release-stored after it is built */
	uint64_t ih_epoch;      /* RCU epoch, starts at 1; seq_cst-stored by kv_rcu_reclaim() */
	int32_t ih_writer_pid;
	uint32_t ih_writer_idle; /* 1 while the writer may sleep: committers ring its doorbell */
	uint8_t ih_pad1[KVIDX_CACHELINE - 32];
};
_Static_assert(sizeof(struct kvidx_idx_hdr) == 2 * KVIDX_CACHELINE, "index header size");
_Static_assert(offsetof(struct kvidx_idx_hdr, ih_generation) == KVIDX_CACHELINE, "idx lines");

/* ---- registry segment ---- */

struct kvidx_ctl_hdr {
	/* Written once by the writer when it creates the registry; never read back by it. */
	uint64_t ch_magic;
	uint64_t ch_stamp;
	uint64_t ch_size;
	uint32_t ch_max_readers;
	uint32_t ch_slots_off;
	uint64_t ch_created_ns;
	uint64_t ch_ring_off;     /* first reader's ring; ring i at ch_ring_off + i * ring bytes */
	uint32_t ch_ring_entries; /* messages per ring, a power of two */
	uint32_t ch_pad3;
	uint64_t ch_reg_gen;      /* K of /NAME.reg.K */
	/* Reader-written. */
	uint32_t ch_bell; /* doorbell futex word: a committer adds 1 and FUTEX_WAKEs (route.c) */
	uint8_t ch_pad2[KVIDX_CACHELINE - 4];
};
_Static_assert(sizeof(struct kvidx_ctl_hdr) == 2 * KVIDX_CACHELINE, "ctl header size");
_Static_assert(offsetof(struct kvidx_ctl_hdr, ch_bell) == KVIDX_CACHELINE, "ctl lines");

/* rs_state: (claim generation << 8) | one of these. */
enum { KV_RS_FREE = 0, KV_RS_ACTIVE = 1, KV_RS_EXPELLED = 2 };
#define KV_RS_STATE(w) ((unsigned)((w) & 0xff))
#define KV_RS_GEN(w) ((w) >> 8)

struct kvidx_reader_slot {
	uint64_t rs_state;    /* CAS by reader and writer, see above */
	uint64_t rs_ctr;      /* epoch announced at read-side entry, 0 = quiescent (reader) */
	int32_t rs_pid;       /* owner pid, for display (reader) */
	uint32_t rs_pad;
	uint64_t rs_claimed_ns;
	uint64_t rs_lookups;  /* lookups done (reader) */
	uint64_t rs_expelled; /* times this slot's owner was expelled (writer) */
	uint64_t rs_commits;  /* route commits and outcomes sent (reader) */
	uint64_t rs_dropped;  /* messages dropped because the ring was full (reader) */
};
_Static_assert(sizeof(struct kvidx_reader_slot) == KV_RSLOT_BYTES, "reader slot size");

/*
 * Route rings: one single-producer (the reader owning the slot) single-consumer (the writer)
 * ring per registry slot, carrying route commits and outcome reports. Indices run freely;
 * message i lives at i & (entries - 1). The producer publishes rh_head after writing all the
 * messages of one commit, so the consumer never sees half a commit. The consumer keeps the
 * ring geometry itself and never trusts rh_head beyond entries ahead of its own tail.
 * (ck_ring would keep its mask in this producer-writable memory; that is why this is not it.)
 */
struct kv_ring_hdr {
	uint64_t rh_head; /* producer: messages written (release) */
	uint8_t rh_pad0[KVIDX_CACHELINE - 8];
	uint64_t rh_tail; /* consumer: messages consumed (release) */
	uint8_t rh_pad1[KVIDX_CACHELINE - 8];
};

enum { KV_MSG_COMMIT = 1, KV_MSG_KEYS = 2, KV_MSG_OUTCOME = 3 };
#define KV_MSG_KEYS_PER 6

struct kv_msg {
	uint8_t m_type;
	uint8_t m_n;      /* KEYS: keys in this message */
	uint16_t m_pad;
	uint32_t m_seq;   /* producer's commit number, repeated in each of its KEYS messages */
	uint64_t m_corr;
	union {
		struct {
			uint64_t t_ns, gen;
			uint16_t pod, prefill_pod;
			uint32_t nkeys, matched, matched_spec;
			uint32_t prompt_tokens; /* layout 7; 0: unknown */
			uint8_t pad[8];
		} commit;
		uint64_t keys[KV_MSG_KEYS_PER];
		struct {
			uint64_t t_ns, gen;
			uint16_t pod, pad0;
			uint32_t cached_tokens, prompt_tokens;
			uint8_t pad[20];
		} outcome;
	} u;
};
_Static_assert(sizeof(struct kv_msg) == KV_MSG_BYTES, "ring message size");
_Static_assert(sizeof(struct kv_ring_hdr) == 2 * KVIDX_CACHELINE, "ring header size");

/* ---- data segment ---- */

enum { KV_DATA_BUILDING = 0, KV_DATA_LIVE = 1, KV_DATA_RETIRED = 2 };

struct kvidx_data_hdr {
	uint64_t dh_magic;
	uint64_t dh_stamp;
	uint64_t dh_size;
	uint64_t dh_generation;
	uint64_t dh_created_ns;
	uint32_t dh_algo;
	uint32_t dh_block_size;
	char dh_seed[64];
	/* Geometry. */
	uint64_t dh_capacity;
	uint64_t dh_records;
	uint64_t dh_nslots; /* home positions; the array has nslots + max_probe words */
	uint64_t dh_arena_units;
	uint32_t dh_pods_per_key;
	uint32_t dh_max_pods;
	uint32_t dh_max_readers;
	uint32_t dh_max_probe;
	/* Region offsets. */
	uint64_t dh_stats_off;
	uint64_t dh_pods_off;
	uint64_t dh_slots_off;
	uint64_t dh_arena_off;
	uint64_t dh_hist_off; /* max_pods x KV_HIST_PER_POD x KV_HIST_BUCKETS u64: histograms */
	uint64_t dh_routers_off; /* max_readers x struct kvidx_router (layout 4) */
	uint64_t dh_load_off;    /* max_pods x struct kvidx_load_row (layout 7) */
	uint8_t dh_pad0[256 - 216];
	/* Mutable, writer-written. */
	uint64_t dh_state;
	uint64_t dh_heartbeat_ns;
	int32_t dh_writer_pid;
	uint32_t dh_pad1;
};
_Static_assert(offsetof(struct kvidx_data_hdr, dh_state) == 256, "data header layout");
_Static_assert(offsetof(struct kvidx_data_hdr, dh_routers_off) == 200, "routers offset");
_Static_assert(offsetof(struct kvidx_data_hdr, dh_load_off) == 208, "load offset");

/*
 * Writer counters (relaxed; readers may see them lag): KV_STATS_WORDS words at dh_stats_off.
 * What each word means (struct kvidx_stats, KV_STATS) is lib/telemetry.h's.
 */
#define KV_STATS_WORDS 27

/* pd_word: state (bits 0-7) | flags (8-15) | generation (16-31). Readers load it once. */
enum { KV_POD_FREE = 0, KV_POD_ACTIVE = 1 };
#define KV_POD_SPEC_PAUSED 0x1u
#define KV_POD_STATE(w) ((unsigned)((w) & 0xff))
#define KV_POD_FLAGS(w) ((unsigned)(((w) >> 8) & 0xff))
#define KV_POD_GEN(w) ((unsigned)(((w) >> 16) & 0xffff))
#define KV_POD_WORD(st, fl, gen) ((uint64_t)(st) | ((uint64_t)(fl) << 8) | ((uint64_t)(gen) << 16))

/*
 * Per-pod counters and gauges (pd_ctr[], written by the writer only, relaxed): KV_POD_NAMED
 * named words, then the rank area, KV_POD_RANKS ranks of KV_RANK_WORDS words. Their names and
 * indices (KV_POD_CTRS, KV_RANK_CTRS) are lib/telemetry.h's.
 */
#define KV_POD_NAMED 64
#define KV_POD_RANKS 32
#define KV_RANK_WORDS 8
#define KV_POD_COUNTERS (KV_POD_NAMED + KV_POD_RANKS * KV_RANK_WORDS)
/*
 * KV-cache groups of a pod (layout 8): pd_groups[g] describes the pod's group g (vLLM's
 * group_idx), 0 = none. Each word stands alone (relaxed stores and loads): kind (bits 0-3,
 * KV_GRP_*), m (bits 4-11: the group's block in index blocks, 1 when it is not larger) and
 * need (bits 12-31: a sliding-window group's index blocks that must be held back from a hit's
 * end). A record's group bit g (KV_REC_GMASK) says group g holds the key. shm/FORMAT.md 5.4.
 */
#define KV_POD_GROUPS 12
enum { KV_GRP_NONE = 0, KV_GRP_FULL = 1, KV_GRP_SLIDING = 2, KV_GRP_MAMBA = 3 };
#define KV_GRP_WORD(kind, m, need) \
	((uint32_t)(kind) | ((uint32_t)(m) << 4) | ((uint32_t)(need) << 12))
#define KV_GRP_KIND(g) ((unsigned)((g) & 0xf))
#define KV_GRP_M(g) ((unsigned)(((g) >> 4) & 0xff))
#define KV_GRP_NEED(g) ((unsigned)((g) >> 12))
#define KV_GRP_NEED_MAX 0xfffffu
#define KV_GRP_M_MAX 0xffu
struct kvidx_pod {
	uint64_t pd_word;
	uint64_t pd_seq; /* bumped around name changes, for torn-name detection */
	uint32_t pd_groups[KV_POD_GROUPS]; /* layout 8: KV-cache group descriptors, above */
	char pd_name[64];
	char pd_model[64];
	uint64_t pd_ctr[KV_POD_COUNTERS]; /* named counters, then the rank area */
};
_Static_assert(sizeof(struct kvidx_pod) == KV_POD_BYTES, "pod size");
_Static_assert(sizeof(struct kvidx_pod) % KVIDX_CACHELINE == 0, "pods are cache-line sized");

/*
 * Latency histograms, KV_HIST_PER_POD per pod, pod p's histogram h at
 * dh_hist_off + ((p * KV_HIST_PER_POD) + h) * KV_HIST_BUCKETS * 8. Which histogram h is
 * (KV_HIST_CONFIRM, ...) is lib/telemetry.h's. Log-linear buckets over microseconds: 0..15 one
 * each, then 8 per power of two up to 2^26 us (67 s); larger values land in the last bucket.
 * See lib/hist.c.
 */
#define KV_HIST_BUCKETS 192
#define KV_HIST_PER_POD 8
/*
 * Per router worker (registry slot) statistics, one struct per slot at
 * dh_routers_off + slot * sizeof(struct kvidx_router), written by the writer only (relaxed)
 * as it consumes that slot's ring: KV_ROUTER_WORDS counter words (their names, KV_ROUTER_CTRS,
 * are lib/telemetry.h's), then the slot's recent route-to-confirmation latency histogram.
 */
#define KV_ROUTER_WORDS 32
#define KV_ROUTER_BYTES 1792
struct kvidx_router {
	uint64_t rt_ctr[KV_ROUTER_WORDS];
	uint64_t rt_hist[KV_HIST_BUCKETS];
};
_Static_assert(sizeof(struct kvidx_router) == KV_ROUTER_BYTES, "router stats size");

/*
 * The load view (layout 7): one cache line per pod at dh_load_off + pod * KV_LOAD_BYTES,
 * written by the writer only, under a seqlock (lr_seq odd while a change is in progress;
 * every other word relaxed). Requests routed to the pod whose outcome has not come, their
 * uncached prompt tokens, the writer's time of its last change, and how many requests it
 * retired without their outcome (time bound, full map). Reset to zero when the pod index is
 * taken or freed. Words 5-7 are zero (room for later fields).
 */
#define KV_LOAD_BYTES 64
struct kvidx_load_row {
	uint64_t lr_seq;
	uint64_t lr_inflight;
	uint64_t lr_prefill_tokens;
	uint64_t lr_updated_ns;
	uint64_t lr_lost;
	uint64_t lr_reserved[3];
};
_Static_assert(sizeof(struct kvidx_load_row) == KV_LOAD_BYTES, "load row size");

/* Record word 0 packing. */
#define KV_REC_W0(pod, gen, tiers, flags, ttl)                                              \
	((uint64_t)(pod) | ((uint64_t)(gen) << 16) | ((uint64_t)(tiers) << 32) |             \
	 ((uint64_t)(flags) << 40) | ((uint64_t)(ttl) << 48))
#define KV_REC_POD(w) ((unsigned)((w) & 0xffff))
#define KV_REC_GEN(w) ((unsigned)(((w) >> 16) & 0xffff))
#define KV_REC_TIERS(w) ((unsigned)(((w) >> 32) & 0xff))
#define KV_REC_FLAGS(w) ((unsigned)(((w) >> 40) & 0xff))
#define KV_REC_TTL(w) ((unsigned)((w) >> 48))
#define KV_REC_GMASK(w) ((unsigned)(((w) >> 48) & 0xfff)) /* with KV_REC_GROUPS */
#define KV_GMASK_ALL 0xfffu

#define KV_META(npods, cap) ((uint64_t)(npods) | ((uint64_t)(cap) << 8))
#define KV_META_NPODS(m) ((unsigned)((m) & 0xff))
#define KV_META_CAP(m) ((unsigned)(((m) >> 8) & 0xff))

/* Hashing a key to its home slot and fingerprint (keys are hashes already; mix anyway). */
static inline uint64_t kv_mix(uint64_t key)
{
	key ^= key >> 33;
	key *= 0xff51afd7ed558ccdull;
	key ^= key >> 33;
	return key;
}
static inline uint64_t kv_home(uint64_t mixed, uint64_t nslots)
{
	return (uint64_t)(((unsigned __int128)mixed * nslots) >> 64);
}
static inline uint32_t kv_fp(uint64_t mixed)
{
	return (uint32_t)mixed;
}

#endif /* KVIDX_LAYOUT_H */
